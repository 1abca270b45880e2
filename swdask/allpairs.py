"""All-against-all alignment of a sequence set: every pair above an identity threshold.

The job of metagenomics groups clustering or de-replicating marker genes (16S rRNA):
every unordered pair of a set whose alignment has at least ``min_identity`` identity
(Truong et al. 2014's LazyRScan workflow, here with affine gaps and any matrix).

Flow
----
1. **Work split.**  The store is sorted by length; its sequences are cut into *blocks* of
   at most ``block_size`` consecutive sequences (each a length range, inside one store
   partition).  The block pairs ``(a, b)``, ``a <= b``, form a triangle; each is one task.
   In global mode a block pair whose length ranges make an identity of ``t`` impossible
   (``identity <= shorter / longer``, see :class:`IdentityBound`) is skipped whole, and
   inside a block pair only the pairs whose lengths allow ``t`` are scored: since blocks
   are sorted by length, those of one query form one contiguous range of subjects.
2. **Score pass.**  Exact scores of those pairs: on the GPU by the warp-per-pair kernel
   of :mod:`swdask.kernels.cuda.all_pairs`, which filters on the device and ships back
   only passing ``(query, subject, score)`` rows; on the CPU by the SIMD kernel
   :func:`swdask.kernels.cpu.score.score_all` (queries in chunks against the union of
   their subject ranges), filtered at once.  The filter is the score bound
   ``score >= max(L(m, n), min_score)`` of :class:`IdentityBound`.
3. **Traceback** (CPU, on every core) of the pairs that pass, the exact identity of the
   reported alignment, and the rows whose identity is at least the threshold.
4. **Output.**  A lazy Dask DataFrame (:func:`all_pairs`), or one Parquet file per block
   pair written atomically, resumable (:func:`write_all_pairs`, ``swdask allpairs``).

Which alignment, which identity
-------------------------------
The reported alignment of a pair is the one the traceback kernels return for the pair's
exact optimal score (swdask's one tie rule, :mod:`swdask.kernels.cpu.reference`); its
identity is ``matches / alignment columns`` (BLAST's pident / 100, ``N``/``X`` never an
identity).  A pair is in the output when that identity is at least the threshold ``t``,
decided exactly in integers (``matches * den >= num * columns`` for ``t = num / den``)
and its score is at least ``min_score``.  The score filter drops only pairs that cannot be
in the output (proof in :class:`IdentityBound`), so the output is exactly what tracing
every pair back and filtering would give.  Pairs are unordered and never self pairs: the
``query`` of a row is the sequence that comes first in the store (shorter, or as long with
a smaller ``seq_id``).

References
----------
Truong, Nguyen, Hoang, Le (2014). LazyRScan, all-pairs global alignment of 16S rDNA on
GPUs with an identity cut-off (97 %).
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numba
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import backend
from .errors import OutputExistsError, StoreError
from .kernels.cpu.reference import mode_code
from .kernels.cpu.score import score_all
from .kernels.cpu.traceback import align_codes
from .options import ALLPAIRS_MODES, check_choice
from .parquet_schemas import ALLPAIRS
from .scoring import Scoring
from .store import SequenceBatch, SequenceStore, open_database
from .tables import check_table, to_pandas

__all__ = ["ALLPAIRS_MODES", "AllPairsStats", "IdentityBound", "all_pairs", "check_device",
           "read_all_pairs", "write_all_pairs"]

#: Default sequences per block (a block pair is one task).
BLOCK_SIZE = 2048
#: Queries scored together by the CPU kernel (against the union of their subject ranges).
CPU_CHUNK = 16
#: Largest denominator of an identity threshold (keeps the bound's integers in int64).
MAX_DENOMINATOR = 10**6
NO_BOUND = -(1 << 62)
CANNOT_PASS = 1 << 62
MANIFEST = "_manifest.json"
MANIFEST_VERSION = 1


def check_allpairs_mode(mode) -> str:
    """``mode`` if it is one of :data:`ALLPAIRS_MODES`, else ValueError naming them.

    Examples
    --------
    >>> check_allpairs_mode("semiglobal")
    Traceback (most recent call last):
    ...
    ValueError: unknown all-pairs mode 'semiglobal'; choose one of: global, local
    """
    check_choice("all-pairs mode", mode, ALLPAIRS_MODES)
    mode_code(mode)  # and a mode of the kernels
    return mode


def as_threshold(value) -> Fraction:
    """An identity threshold as the exact fraction used everywhere.

    A float is read as the decimal it prints as (``0.97`` is 97/100), a fraction with a
    denominator over :data:`MAX_DENOMINATOR` is replaced by the nearest one within it.

    Raises
    ------
    ValueError
        Not a number in [0, 1].

    Examples
    --------
    >>> as_threshold(0.97), as_threshold(1), as_threshold("0.5")
    (Fraction(97, 100), Fraction(1, 1), Fraction(1, 2))
    """
    try:
        t = value if isinstance(value, Fraction) else Fraction(repr(float(value)))
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"min_identity must be a number between 0 and 1, got {value!r}") from None
    if not 0 <= t <= 1:
        raise ValueError(f"min_identity must be a number between 0 and 1, got {value!r}")
    if t.denominator > MAX_DENOMINATOR:
        t = t.limit_denominator(MAX_DENOMINATOR)
    return t


@dataclass(frozen=True)
class IdentityBound:
    """The lowest score of an alignment with identity at least ``t``: the score filter.

    Parameters
    ----------
    threshold : fractions.Fraction
        ``t``, see :func:`as_threshold`.
    mode : {"global", "local"}
    identity_score : int
        ``a``: the smallest score of an identity column (``matrix[c, c]`` over the codes
        ``c`` other than ``N``/``X``).
    penalty : int
        ``d``: the largest penalty of any other column, ``max(-s_min, o + e)`` with
        ``s_min`` the smallest score of an aligned non-identity pair (a mismatch, or any
        pair with ``N``/``X``) and ``o + e`` the most a gap column can cost (a run of
        ``k`` gap columns costs ``o + k*e <= k*(o + e)``).

    Notes
    -----
    **Global mode.**  Let ``m <= n`` be the lengths of a pair and ``A`` any global
    alignment of it with ``M`` identity columns, ``X`` other aligned columns and ``G``
    gap columns in ``g`` runs; ``C = M + X + G`` columns.  Every residue is in exactly
    one column, so ``M + X + G_ins = m`` and ``M + X + G_del = n``: ``C >= n`` and
    ``M <= m``.  Its score is

        ``S(A) = sum(identities) + sum(other pairs) - (g*o + G*e)
        >= M*a - X*d - G*(o + e) >= M*a - (C - M)*d = f(M, C)``

    using ``g <= G`` and ``o + e <= d``.  If ``M / C >= t`` then ``(M, C)`` lies in the
    triangle ``T = {n <= C, t*C <= M <= m}`` (empty when ``m < t*n``: no alignment can
    reach ``t``, which is also the block-skipping rule, since ``M/C <= m/n``).  ``f`` is
    linear, so its minimum over ``T`` is at a corner: ``(t*n, n)``, ``(m, n)`` or
    ``(m, m/t)``, and since scores are integers ``S(A) >= L = ceil(min over the corners)``
    (:meth:`lowest_score`; the real relaxation only weakens the bound).

    *No passing pair is dropped.*  The reported alignment ``A*`` of a pair (its traced
    optimal alignment) has the optimal score ``S``.  If its identity is at least ``t``,
    the inequality above gives ``S = S(A*) >= L``.  Hence a pair whose exact optimal
    score is below ``L`` (or whose lengths leave ``T`` empty) has a reported alignment
    below ``t`` (indeed every alignment of it is below ``t``), and dropping it changes no
    output row.  The bound depends on the lengths only, so it is computed per pair on the
    device.

    **Local mode.**  A local alignment has no length constraint: one identity column
    already has identity 1.  The only bound is ``L = 1`` (for ``t > 0``): the reported
    local alignment is empty (identity 0) exactly when the optimal score is 0, so pairs
    scoring 0 are dropped and every other pair is traced back.  Use local mode with
    ``min_score`` (a score threshold is the useful filter there); no block is skipped.

    With ``t = 0`` nothing is bounded (``L`` = :data:`NO_BOUND`).

    Examples
    --------
    >>> b = IdentityBound.from_scoring(Scoring(match=2, mismatch=-3, gap_open=5, gap_extend=2), 0.97)
    >>> b.identity_score, b.penalty
    (2, 7)
    >>> b.lowest_score(1500, 1500), b.lowest_score(1460, 1500), b.lowest_score(1400, 1500)
    (2595, 2595, None)
    """

    threshold: Fraction
    mode: str
    identity_score: int
    penalty: int

    @classmethod
    def from_scoring(cls, scoring: Scoring, min_identity=0.97, mode: str = "global") -> IdentityBound:
        """The bound of a scoring, threshold and mode (see the class docstring).

        Raises
        ------
        ValueError
            A mode not in :data:`ALLPAIRS_MODES`, or a threshold outside [0, 1].
        """
        check_allpairs_mode(mode)
        t = as_threshold(min_identity)
        matrix = np.asarray(scoring.matrix, dtype=np.int64)
        unknown = scoring.alphabet.unknown_code
        codes = np.arange(matrix.shape[0])
        known = codes[codes != unknown]
        identity = np.zeros(matrix.shape, dtype=bool)
        identity[known, known] = True
        ident = int(matrix[identity].min()) if identity.any() else 0
        other = int(matrix[~identity].min()) if (~identity).any() else ident
        penalty = max(-other, scoring.gap_open + scoring.gap_extend)
        return cls(t, mode, ident, penalty)

    @property
    def params(self) -> tuple:
        """``(num, den, ident, penalty, local)``: the kernels' integer arguments."""
        t = self.threshold
        return (t.numerator, t.denominator, self.identity_score, self.penalty,
                int(self.mode == "local"))

    def lengths_can_pass(self, m: int, n: int) -> bool:
        """Whether lengths ``m`` and ``n`` allow identity ``t`` (always in local mode)."""
        if self.mode == "local" or self.threshold == 0:
            return True
        return min(m, n) >= self.threshold * max(m, n)

    def lowest_score(self, m: int, n: int):
        """``L`` for lengths ``m`` and ``n`` in exact rational arithmetic (the reference
        of the integer formulas); None when the lengths rule identity ``t`` out, and
        ``-inf`` when nothing is bounded (``t = 0``)."""
        t = self.threshold
        if t == 0:
            return -math.inf
        if self.mode == "local":
            return 1
        if not self.lengths_can_pass(m, n):
            return None
        short, long_ = min(m, n), max(m, n)
        a, d = self.identity_score, self.penalty

        def f(matches, columns):
            return (a + d) * matches - d * columns

        return math.ceil(min(f(t * long_, long_), f(short, long_), f(short, short / t)))

    def lowest_scores(self, m, n) -> np.ndarray:
        """``L`` of many pairs (numpy broadcasting of ``m`` and ``n``), int64, with
        :data:`CANNOT_PASS` where the lengths rule ``t`` out and :data:`NO_BOUND` for
        ``t = 0``: the formula of the GPU kernel
        (:func:`swdask.kernels.cuda.all_pairs.lowest_score`)."""
        num, den, a, d, local = self.params
        m = np.asarray(m, dtype=np.int64)
        n = np.asarray(n, dtype=np.int64)
        short, long_ = np.minimum(m, n), np.maximum(m, n)
        if num == 0:
            return np.full(short.shape, NO_BOUND, dtype=np.int64)
        if local:
            return np.ones(short.shape, dtype=np.int64)
        f1 = -((-(long_ * (num * a - (den - num) * d))) // den)
        f2 = short * a - (long_ - short) * d
        f3 = -((-(short * ((a + d) * num - d * den))) // num)
        low = np.minimum(np.minimum(f1, f2), f3)
        return np.where(short * den < num * long_, CANNOT_PASS, low)

    def identity_passes(self, matches: int, columns: int) -> bool:
        """``matches / columns >= t``, exactly (an empty alignment has identity 0)."""
        t = self.threshold
        if columns == 0:
            return t == 0
        return matches * t.denominator >= t.numerator * columns


@dataclass(frozen=True)
class AllPairsStats:
    """What an all-pairs run did: small, immutable, picklable.

    ``pairs`` all unordered pairs of the set; ``pairs_scored`` those the lengths allow
    (each scored exactly once) and ``cells`` their ``m * n`` (whole, also for the pairs
    the GPU kernel abandoned early, ``pairs_abandoned``); ``candidates`` the pairs
    over the score bound (traced back); ``hits`` the rows written; seconds of the score
    kernel (``kernel_seconds``, summed over tasks) and of the traceback.
    """

    n_sequences: int
    pairs: int
    pairs_scored: int
    cells: int
    candidates: int
    hits: int
    kernel_seconds: float
    traceback_seconds: float
    block_pairs: int
    block_pairs_skipped: int
    device: str
    pairs_abandoned: int = 0

    @property
    def kernel_gcups(self) -> float:
        """Cells of the scored pairs per kernel second, in billions."""
        return self.cells / self.kernel_seconds / 1e9 if self.kernel_seconds else 0.0


# --------------------------------------------------------------------------------------
# plan: blocks, block pairs, pairs
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Block:
    partition: int
    start: int
    stop: int
    min_length: int
    max_length: int


def _block_lengths(store: SequenceStore, partition: int) -> np.ndarray:
    path = store.files[partition]
    try:
        return pq.read_table(path, columns=["length"])["length"].to_numpy().astype(np.int64)
    except (OSError, pa.ArrowException) as exc:
        raise StoreError(f"{path}: cannot read partition {partition}: {exc}") from None


def _plan_blocks(store: SequenceStore, block_size: int) -> tuple:
    """Blocks of at most ``block_size`` consecutive sequences, each inside one partition."""
    blocks = []
    for part in range(len(store.partitions)):
        lengths = _block_lengths(store, part)
        for start in range(0, len(lengths), block_size):
            stop = min(start + block_size, len(lengths))
            blocks.append(_Block(part, start, stop, int(lengths[start:stop].min()),
                                 int(lengths[start:stop].max())))
    return tuple(blocks)


def _blocks_can_pass(bound: IdentityBound, a: _Block, b: _Block) -> bool:
    """Whether some pair of blocks ``a`` and ``b`` has lengths allowing identity ``t``:
    the closest lengths of the two ranges decide."""
    if a.max_length < b.min_length:
        return bound.lengths_can_pass(a.max_length, b.min_length)
    if b.max_length < a.min_length:
        return bound.lengths_can_pass(b.max_length, a.min_length)
    return True


def _pair_ranges(q_len, s_len, diagonal: bool, bound: IdentityBound):
    """For each query, the contiguous range of subjects to score.

    ``s_len`` is sorted (a block of the length-sorted store); a subject is in range when
    the lengths allow identity ``t`` and, in a diagonal block pair, it comes after the
    query.  Returns ``q_list, s_lo, s_count`` (int64) of the queries with work.
    """
    q_len = np.asarray(q_len, dtype=np.int64)
    s_len = np.asarray(s_len, dtype=np.int64)
    n_s = len(s_len)
    num, den = bound.threshold.numerator, bound.threshold.denominator
    if bound.mode == "local" or num == 0:
        lo = np.zeros(len(q_len), dtype=np.int64)
        hi = np.full(len(q_len), n_s, dtype=np.int64)
    else:
        shortest = -((-(q_len * num)) // den)  # ceil(t*m): shortest subject allowed
        longest = (q_len * den) // num  # floor(m/t): longest subject allowed
        lo = np.searchsorted(s_len, shortest, side="left").astype(np.int64)
        hi = np.searchsorted(s_len, longest, side="right").astype(np.int64)
    if diagonal:
        lo = np.maximum(lo, np.arange(len(q_len), dtype=np.int64) + 1)
    count = np.maximum(hi - lo, 0)
    keep = np.flatnonzero(count > 0)
    return keep.astype(np.int64), lo[keep], count[keep]


@functools.lru_cache(maxsize=4)
def _read_partition(store_path: str, partition: int) -> SequenceBatch:
    return SequenceStore.open(store_path).read_partition(partition)


def _read_block(store_path: str, block: _Block) -> SequenceBatch:
    return _read_partition(store_path, block.partition).take(np.arange(block.start, block.stop))


@dataclass(frozen=True)
class _Job:
    """Everything a block-pair task needs (pickled to the workers once)."""

    store_path: str
    blocks: tuple
    block_pairs: tuple
    scoring: Scoring
    bound: IdentityBound
    min_score: int | None
    device: str
    cigar: bool
    rows: int | None
    n_sequences: int
    skipped: int
    keep_store: object = field(default=None, compare=False)

    @property
    def mode(self) -> str:
        return self.bound.mode


def check_device(device: str, mode: str, *, here: bool) -> str:
    """The backend of the all-pairs score pass: ``"gpu"`` or ``"cpu"`` (or, with
    ``here=False``, ``device`` itself once checked).

    Parameters
    ----------
    device : {"auto", "cpu", "gpu"}
        The device asked for.  ``"auto"`` takes a real GPU when Numba sees one and the
        mode is global, else the CPU; ``"gpu"`` insists (the CUDA simulator counts, for
        tests).
    mode : {"global", "local"}
        The all-pairs mode; the GPU kernel computes global alignments only.
    here : bool
        True when the score pass runs in this process; False when it runs on a
        cluster's workers, where only the name and the mode are checked.

    Returns
    -------
    str
        ``"gpu"`` or ``"cpu"``; with ``here=False``, ``device`` as it was given.

    Raises
    ------
    ValueError
        ``device`` is not one of :data:`swdask.options.DEVICES`.
    DeviceError
        ``"gpu"`` with a local mode, or (``here=True``) with no GPU visible.

    Examples
    --------
    >>> check_device("cpu", "local", here=True)
    'cpu'
    >>> check_device("gpu", "global", here=False)
    'gpu'
    """
    return backend.check_device(device, mode, here=here, kernels=backend.ALLPAIRS_GPU)


def _prepare(source, *, scoring, mode, min_identity, min_score, device, cigar, block_size,
             alphabet, map_unknown, rows, client) -> _Job:
    check_allpairs_mode(mode)
    if block_size is None or isinstance(block_size, bool) or int(block_size) < 1:
        raise ValueError(f"block_size must be a positive whole number, got {block_size!r}")
    if min_score is not None and (isinstance(min_score, bool) or int(min_score) != min_score):
        raise ValueError(f"min_score must be a whole number, got {min_score!r}")
    device = backend.job_device(device, mode, kernels=backend.ALLPAIRS_GPU, client=client)
    if isinstance(source, SequenceStore):
        store = source
    else:
        store = open_database(source, alphabet=alphabet, map_unknown=map_unknown)
    keep = None
    if getattr(store, "temporary", False):
        from .search import _TemporaryStore

        keep = _TemporaryStore(store.path)
    scoring = scoring if scoring is not None else Scoring.default(store.alphabet)
    if scoring.alphabet.name != store.alphabet.name:
        from .errors import InvalidSequenceError

        raise InvalidSequenceError(f"{source}: the sequences are {store.alphabet.name} but the "
                                   f"scoring ({scoring.name}) is for {scoring.alphabet.name}")
    bound = IdentityBound.from_scoring(scoring, min_identity, mode)
    blocks = _plan_blocks(store, int(block_size))
    pairs, skipped = [], 0
    for a in range(len(blocks)):
        for b in range(a, len(blocks)):
            if _blocks_can_pass(bound, blocks[a], blocks[b]):
                pairs.append((a, b))
            else:
                skipped += 1
    return _Job(str(store.path), blocks, tuple(pairs), scoring, bound,
                None if min_score is None else int(min_score), device, bool(cigar), rows,
                store.n_records, skipped, keep)


# --------------------------------------------------------------------------------------
# one block pair: score pass, filter, traceback
# --------------------------------------------------------------------------------------


def _score_cpu(qa: SequenceBatch, sb: SequenceBatch, q_list, s_lo, s_count, job: _Job):
    """Passing ``(query, subject, score, query_end, subject_end)`` arrays and kernel seconds."""
    scoring, bound = job.scoring, job.bound
    floor = NO_BOUND if job.min_score is None else job.min_score
    found = [[], [], [], [], []]
    seconds = 0.0
    for c in range(0, len(q_list), CPU_CHUNK):
        ql = q_list[c:c + CPU_CHUNK]
        lo = s_lo[c:c + CPU_CHUNK]
        hi = lo + s_count[c:c + CPU_CHUNK]
        first, last = int(lo.min()), int(hi.max())
        subjects = np.arange(first, last, dtype=np.int64)
        chunk = qa.take(ql)
        with backend.KERNEL_LOCK:
            tick = time.perf_counter()
            scores, q_end, s_end = score_all(chunk.residues, chunk.offsets, sb.residues,
                                             sb.offsets, scoring.matrix, scoring.gap_open,
                                             scoring.gap_extend, job.mode, subjects)
            seconds += time.perf_counter() - tick
        cols = subjects[None, :]
        low = bound.lowest_scores(chunk.lengths[:, None], sb.lengths[subjects][None, :])
        keep = (cols >= lo[:, None]) & (cols < hi[:, None]) & (scores >= low) & (scores >= floor)
        rows, which = np.nonzero(keep)
        found[0].append(ql[rows])
        found[1].append(subjects[which])
        found[2].append(scores[rows, which])
        found[3].append(q_end[rows, which])
        found[4].append(s_end[rows, which])
    if not found[0]:
        return [np.zeros(0, np.int64)] * 5, seconds, 0
    return [np.concatenate(x).astype(np.int64) for x in found], seconds, 0


def _score_gpu(qa, sb, q_list, s_lo, s_count, job: _Job):
    from .kernels.cuda.all_pairs import score_pairs

    with backend.KERNEL_LOCK:
        qi, sj, score, seconds, abandoned = score_pairs(qa.residues, qa.offsets, sb.residues, sb.offsets,
                                             q_list, s_lo, s_count, job.scoring.matrix,
                                             job.scoring.gap_open,
                                             job.scoring.gap_extend, job.bound.params,
                                             min_score=job.min_score,
                                             **({} if job.rows is None else {"rows": job.rows}))
    q_end = qa.lengths[qi].astype(np.int64)  # global: the end cell is (m, n)
    s_end = sb.lengths[sj].astype(np.int64)
    found = [qi.astype(np.int64), sj.astype(np.int64), score.astype(np.int64), q_end, s_end]
    return found, seconds, abandoned


def _trace(qa, sb, found, job: _Job) -> list:
    """Rows of the passing pairs, traced back on Numba's thread count (the kernel
    releases the GIL); rows in ``found`` order."""
    qi, sj, score, q_end, s_end = found
    n = len(qi)
    rows = [None] * n
    scoring, mode = job.scoring, job.mode

    def trace(k):
        q, s = qa.codes(int(qi[k])), sb.codes(int(sj[k]))
        r = align_codes(q, s, scoring, mode, end=(int(q_end[k]), int(s_end[k])))
        if r["score"] != score[k]:  # the score and traceback kernels must agree to the bit
            raise AssertionError(f"kernel mismatch for {qa.names[qi[k]]} / {sb.names[sj[k]]}: "
                                 f"score pass {score[k]}, traceback {r['score']}")
        if job.bound.identity_passes(r["matches"], r["align_length"]):
            rows[k] = (qa.names[qi[k]], sb.names[sj[k]], int(qa.seq_id[qi[k]]), int(sb.seq_id[sj[k]]),
                       r["score"], r["identity"], r["matches"], r["align_length"], r["mismatches"],
                       r["gap_opens"], r["query_start"], r["query_end"], r["subject_start"],
                       r["subject_end"], len(q), len(s), r["cigar"] if job.cigar else None)

    threads = min(numba.get_num_threads(), n)
    if threads <= 1:
        for k in range(n):
            trace(k)
    else:
        from concurrent.futures import ThreadPoolExecutor

        order = sorted(range(n), key=lambda k: -(int(q_end[k]) * int(s_end[k])))
        with ThreadPoolExecutor(threads, thread_name_prefix="swdask-allpairs") as pool:
            for _ in pool.map(trace, order):
                pass
    return [row for row in rows if row is not None]


_COLUMNS = ("query", "subject", "query_id", "subject_id", "score", "identity", "matches",
            "align_length", "mismatches", "gap_opens", "query_start", "query_end",
            "subject_start", "subject_end", "query_length", "subject_length", "cigar")


def _table(rows) -> pa.Table:
    data = {name: [r[k] for r in rows] for k, name in enumerate(_COLUMNS)}
    table = pa.table({f.name: pa.array(data[f.name], type=f.type) for f in ALLPAIRS}, schema=ALLPAIRS)
    return check_table(table, ALLPAIRS, where="all-pairs table")


def _block_pair(job: _Job, a: int, b: int):
    """``(table, info)`` of block pair ``(a, b)``: rows sorted by (query_id, subject_id)."""
    qa = _read_block(job.store_path, job.blocks[a])
    sb = qa if a == b else _read_block(job.store_path, job.blocks[b])
    q_list, s_lo, s_count = _pair_ranges(qa.lengths, sb.lengths, a == b, job.bound)
    pairs = int(s_count.sum())
    cells = 0
    if pairs:
        cum = np.concatenate([[0], np.cumsum(sb.lengths.astype(np.int64))])
        cells = int((qa.lengths[q_list].astype(np.int64) * (cum[s_lo + s_count] - cum[s_lo])).sum())
    device = backend.task_device(job.device, job.mode, kernels=backend.ALLPAIRS_GPU)
    if pairs == 0:
        found, seconds, abandoned = [np.zeros(0, np.int64)] * 5, 0.0, 0
    elif device == "gpu":
        found, seconds, abandoned = _score_gpu(qa, sb, q_list, s_lo, s_count, job)
    else:
        found, seconds, abandoned = _score_cpu(qa, sb, q_list, s_lo, s_count, job)
    tick = time.perf_counter()
    rows = _trace(qa, sb, found, job)
    traced = time.perf_counter() - tick
    rows.sort(key=lambda r: (r[2], r[3]))
    info = {"pairs_scored": pairs, "cells": cells, "abandoned": abandoned,
            "candidates": len(found[0]), "hits": len(rows),
            "kernel_seconds": seconds, "traceback_seconds": traced, "device": device}
    return _table(rows), info


def _stats(job: _Job, infos) -> AllPairsStats:
    infos = list(infos)
    devices = sorted({i["device"] for i in infos}) or [job.device]
    n = job.n_sequences
    return AllPairsStats(
        n_sequences=n, pairs=n * (n - 1) // 2,
        pairs_scored=sum(i["pairs_scored"] for i in infos), cells=sum(i["cells"] for i in infos),
        candidates=sum(i["candidates"] for i in infos), hits=sum(i["hits"] for i in infos),
        kernel_seconds=sum(i["kernel_seconds"] for i in infos),
        traceback_seconds=sum(i["traceback_seconds"] for i in infos),
        block_pairs=len(job.block_pairs), block_pairs_skipped=job.skipped, device="+".join(devices),
        pairs_abandoned=sum(i.get("abandoned", 0) for i in infos))


# --------------------------------------------------------------------------------------
# the lazy DataFrame
# --------------------------------------------------------------------------------------


def _task_frame(job: _Job, a: int, b: int) -> pd.DataFrame:
    """The rows of block pair ``(a, b)``, with its info in ``attrs`` (for the stats)."""
    table, info = _block_pair(job, a, b)
    frame = to_pandas(table)
    frame.attrs["swdask_allpairs"] = info
    return frame


def _task_info(frame: pd.DataFrame) -> pd.Series:
    """Reduction chunk of the stats (Dask also calls it on an empty frame, for meta)."""
    info = frame.attrs.get("swdask_allpairs")
    return pd.Series([info] if info else [], dtype=object)


def _stats_of(infos, *, job: _Job) -> AllPairsStats:
    return _stats(job, [i for i in np.asarray(infos, dtype=object).ravel() if i])


def _key_prefix(job: _Job) -> str:
    # "swdask_score_gpu" routes GPU tasks to GPU workers (swdask.cluster.gpu_resources).
    return "swdask_score_gpu-allpairs" if job.device == "gpu" else "swdask-allpairs"


def all_pairs(source, *, scoring: Scoring | None = None, mode: str = "global",
              min_identity=0.97, min_score: int | None = None, device: str = "auto",
              cigar: bool = False, block_size: int = BLOCK_SIZE, alphabet="auto",
              map_unknown: bool = False, return_stats: bool = False):
    """Every unordered pair of a sequence set with identity at least ``min_identity``:
    a lazy Dask DataFrame.

    One task per block pair (see the module docstring): score pass with the identity
    bound, traceback of the pairs over it, exact identity filter.  Nothing is computed
    until the result is (``.compute()``, ``client.compute(...)``, ``.to_parquet(...)``);
    the arguments are checked at once.

    Parameters
    ----------
    source : path or SequenceStore
        A sequence store, or a FASTA/FASTQ file (ingested into a temporary store at once).
    scoring : Scoring, optional
        Default: BLAST's default for the alphabet (DNA 2/-3, gaps 5/2).
    mode : {"global", "local"}, default "global"
        Needleman-Wunsch (the identity bound skips blocks and pairs) or Smith-Waterman
        (only a score of at least 1 is implied; give ``min_score``).
    min_identity : float or Fraction, default 0.97
        Identity threshold ``t`` (see :func:`as_threshold`); 0 keeps every pair.
    min_score : int, optional
        Also require at least this score (default: no such limit).
    device : {"auto", "cpu", "gpu"}, default "auto"
        Where the score pass runs: ``"auto"`` a GPU when one is visible and the mode is
        global.  Scores are identical on every device.
    cigar : bool, default False
        Fill the ``cigar`` column (null otherwise).
    block_size : int, default 2048
        Sequences per block; a block pair is one task.
    alphabet : {"auto", "protein", "dna"}, default "auto"
    map_unknown : bool, default False
        As :func:`swdask.ingest`.
    return_stats : bool, default False
        Also return a lazy :class:`AllPairsStats`.

    Returns
    -------
    dask.dataframe.DataFrame
        Schema :data:`swdask.parquet_schemas.ALLPAIRS`, one partition per block pair
        scored, rows sorted by ``(query_id, subject_id)`` inside a partition.  With
        ``return_stats``, ``(frame, stats)``.

    Raises
    ------
    ValueError
        A bad mode, threshold, block size or device name.
    DeviceError
        ``device="gpu"`` with no GPU, or in local mode.
    InputNotFoundError, StoreError, SequenceFormatError, InvalidSequenceError
        As :func:`swdask.store.open_database`.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> genes = {"a": "ACGTACGTTGCA" * 4, "b": "ACGTACGTTGCA" * 4 + "A", "c": "TTTTGGGGCCCC" * 4}
    >>> path = Path(tempfile.mkdtemp()) / "genes.fasta"
    >>> _ = path.write_text("".join(f">{k}\\n{v}\\n" for k, v in genes.items()))
    >>> table = all_pairs(path, min_identity=0.9).compute()
    >>> table[["query", "subject", "score", "identity", "align_length"]].values.tolist()
    [['a', 'b', 89, 0.9795918367346939, 49]]
    """
    import dask
    import dask.dataframe as dd

    job = _prepare(source, scoring=scoring, mode=mode, min_identity=min_identity,
                   min_score=min_score, device=device, cigar=cigar, block_size=block_size,
                   alphabet=alphabet, map_unknown=map_unknown, rows=None,
                   client=backend.current_client())
    prefix = _key_prefix(job)
    meta = to_pandas(ALLPAIRS.empty_table())
    token = uuid.uuid4().hex[:8]
    job_node = dask.delayed(job, name=f"swdask-allpairs-job-{token}")
    frames = [dask.delayed(_task_frame, pure=True)(job_node, a, b,
                                                    dask_key_name=f"{prefix}-{token}-{a}-{b}")
              for a, b in job.block_pairs]
    if not frames:
        frames = [dask.delayed(to_pandas, pure=True)(ALLPAIRS.empty_table())]
    frame = dd.from_delayed(frames, meta=meta, verify_meta=False, prefix=f"swdask-allpairs-{token}")
    if not return_stats:
        return frame
    stats = frame.reduction(_task_info, aggregate=_stats_of, meta=object, split_every=False,
                            token="swdask-allpairs-stats", aggregate_kwargs={"job": job})
    return frame, stats


# --------------------------------------------------------------------------------------
# resumable output: one Parquet file per block pair
# --------------------------------------------------------------------------------------


def _block_file(a: int, b: int) -> str:
    return f"pairs-{a:05d}-{b:05d}.parquet"


def _manifest(job: _Job, store: SequenceStore) -> dict:
    """The parameters that determine the output (a resumed run must have the same)."""
    return {
        "schema": "allpairs", "version": MANIFEST_VERSION,
        "store": {"path": str(Path(job.store_path).resolve()) if job.keep_store is None else None,
                  "n_records": store.n_records, "n_residues": store.n_residues,
                  "files": [p["file"] for p in store.partitions]},
        "scoring": {"name": job.scoring.name, "matrix": np.asarray(job.scoring.matrix).tolist(),
                    "gap_open": job.scoring.gap_open, "gap_extend": job.scoring.gap_extend},
        "mode": job.mode, "min_identity": str(job.bound.threshold), "min_score": job.min_score,
        "cigar": job.cigar,
        "blocks": [[b.partition, b.start, b.stop] for b in job.blocks],
        "block_pairs": [list(p) for p in job.block_pairs], "block_pairs_skipped": job.skipped,
    }


def _same_run(old: dict, new: dict) -> list:
    keys = ("schema", "version", "scoring", "mode", "min_identity", "min_score", "cigar", "blocks",
            "block_pairs")
    differ = [k for k in keys if old.get(k) != new.get(k)]
    if {k: v for k, v in old.get("store", {}).items() if k != "path"} != \
            {k: v for k, v in new["store"].items() if k != "path"}:
        differ.append("store")
    return differ


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def _complete(path: Path) -> bool:
    """Whether a block-pair file was written completely (renamed into place after the
    last byte, so a readable footer with our schema means complete)."""
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException):
        return False
    return (schema.metadata or {}).get(b"swdask.schema") == b"allpairs"


def _write_block_pair(job: _Job, a: int, b: int, out: str) -> dict:
    """Compute block pair ``(a, b)`` and write its file atomically; returns the info."""
    table, info = _block_pair(job, a, b)
    path = Path(out) / _block_file(a, b)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return info


def write_all_pairs(source, output, *, scoring: Scoring | None = None, mode: str = "global",
                    min_identity=0.97, min_score: int | None = None, device: str = "auto",
                    cigar: bool = False, block_size: int = BLOCK_SIZE, alphabet="auto",
                    map_unknown: bool = False, resume: bool = False, force: bool = False,
                    client=None, progress: bool = False, gpu_rows: int | None = None) -> AllPairsStats:
    """Run :func:`all_pairs` into a folder: one Parquet file per block pair, resumable.

    Each block pair's rows go to ``OUTPUT/pairs-AAAAA-BBBBB.parquet``, written under a
    temporary name and renamed when complete; ``OUTPUT/_manifest.json`` records the
    parameters, and at the end the run's statistics (``"finished": true``).  With
    ``resume`` the block pairs whose file is complete are skipped, so a run killed at any
    moment and resumed gives exactly the files of an uninterrupted run (every file is a
    deterministic function of its block pair: no duplicates, nothing lost).  Read the
    result with :func:`read_all_pairs` (or ``pandas.read_parquet(OUTPUT)``).

    Parameters
    ----------
    source, scoring, mode, min_identity, min_score, device, cigar, block_size, alphabet, map_unknown
        As :func:`all_pairs`.
    output : str or os.PathLike
        The folder to create (or to resume).
    resume : bool, default False
        Continue a run in ``output`` made with the same parameters.
    force : bool, default False
        Remove an existing ``output`` first.
    client : distributed.Client, optional
        Run the block pairs on this cluster (GPU tasks on GPU workers); default: in this
        process (one block pair at a time on the CPU, which uses every core; two at a
        time with a GPU, so that one traces back while the other is on the GPU).
    progress : bool, default False
        A progress bar on stderr over the pairs to score, with rate and ETA.
    gpu_rows : int, optional
        Query rows per lane of the GPU kernel (default
        :data:`swdask.kernels.cuda.all_pairs.ROWS`); for tuning, results do not change.

    Returns
    -------
    AllPairsStats
        Of the whole run (block pairs done earlier included, their kernel time as
        recorded then).

    Raises
    ------
    OutputExistsError
        ``output`` exists, without ``resume`` or ``force``.
    StoreError
        ``resume`` into a folder made with other parameters (the message names them).
    ValueError, DeviceError, InputNotFoundError
        As :func:`all_pairs`; a missing parent folder.
    """
    import shutil

    output = Path(output)
    if output.exists() and not (resume or force):
        raise OutputExistsError(f"{output}: already exists (use --resume to continue it, or --force)")
    if not output.parent.resolve().is_dir():
        from .errors import InputNotFoundError

        raise InputNotFoundError(f"{output}: folder {output.parent} does not exist")
    job = _prepare(source, scoring=scoring, mode=mode, min_identity=min_identity,
                   min_score=min_score, device=device, cigar=cigar, block_size=block_size,
                   alphabet=alphabet, map_unknown=map_unknown, rows=gpu_rows, client=client)
    store = SequenceStore.open(job.store_path)
    manifest = _manifest(job, store)
    if output.exists() and force and not resume:
        shutil.rmtree(output)
    done_infos = {}
    if output.exists():
        path = output / MANIFEST
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            raise StoreError(f"{output}: not an all-pairs output folder ({MANIFEST} missing or "
                             "damaged); use --force to replace it") from None
        differ = _same_run(old, manifest)
        if differ:
            raise StoreError(f"{output}: made with other {', '.join(differ)}; resume with the "
                             "same parameters, or use --force to start again")
        done_infos = {tuple(map(int, k.split("-"))): v for k, v in old.get("done", {}).items()}
    output.mkdir(exist_ok=True)
    for pattern in (".pairs-*.tmp", f".{MANIFEST}.*.tmp"):  # partial files of a killed run
        for stale in output.glob(pattern):
            stale.unlink(missing_ok=True)
    manifest["done"] = {f"{a}-{b}": v for (a, b), v in done_infos.items()}
    manifest["finished"] = False
    _write_json(output / MANIFEST, manifest)
    todo, infos = [], dict(done_infos)
    for a, b in job.block_pairs:
        if (a, b) in infos and _complete(output / _block_file(a, b)):
            continue
        infos.pop((a, b), None)
        todo.append((a, b))
    weights = _pair_counts(job, todo)
    bar = _progress_bar(progress, sum(weights.values()),
                        sum(v["pairs_scored"] for v in infos.values()))
    try:
        for (a, b), info in _run_blocks(job, todo, str(output), client):
            infos[(a, b)] = info
            manifest["done"][f"{a}-{b}"] = info
            _write_json(output / MANIFEST, manifest)  # what finished, for the stats of a resume
            if bar is not None:
                bar.update(weights[(a, b)])
    finally:
        if bar is not None:
            bar.close()
    stats = _stats(job, infos.values())
    manifest["finished"] = True
    manifest["stats"] = {k: getattr(stats, k) for k in AllPairsStats.__dataclass_fields__}
    _write_json(output / MANIFEST, manifest)
    return stats


def _pair_counts(job: _Job, todo) -> dict:
    """Pairs to score per block pair (lengths only: cheap), the progress bar's weights."""
    lengths = {}
    counts = {}
    for a, b in todo:
        for x in (a, b):
            if x not in lengths:
                block = job.blocks[x]
                lengths[x] = _block_lengths(SequenceStore.open(job.store_path),
                                            block.partition)[block.start:block.stop]
        counts[(a, b)] = int(_pair_ranges(lengths[a], lengths[b], a == b, job.bound)[2].sum())
    return counts


def _progress_bar(enabled: bool, total: int, initial: int):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total + initial, initial=initial, unit="pair", unit_scale=True,
                desc="all pairs", file=sys.stderr, smoothing=0.1)


def _run_blocks(job: _Job, todo, out: str, client):
    """Yield ``((a, b), info)`` as block pairs finish (in any order)."""
    if client is not None:
        from distributed import as_completed

        from .cluster import GPU_TASK_SHARE, has_gpu_workers

        resources = dict(GPU_TASK_SHARE) if job.device == "gpu" and has_gpu_workers(client) else None
        job_future = client.scatter(job, broadcast=True)
        futures = {client.submit(_write_block_pair, job_future, a, b, out, resources=resources,
                                 key=f"{_key_prefix(job)}-write-{a}-{b}-{os.getpid()}"
                                 f"-{time.monotonic_ns()}", pure=False): (a, b)
                   for a, b in todo}
        for future in as_completed(futures):
            yield futures[future], future.result()
        return
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    workers = 2 if job.device == "gpu" else 1
    if workers == 1:
        for a, b in todo:
            yield (a, b), _write_block_pair(job, a, b, out)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="swdask-allpairs-block") as pool:
        pending = {}
        queue = list(todo)
        while queue or pending:
            while queue and len(pending) < workers:
                a, b = queue.pop(0)
                pending[pool.submit(_write_block_pair, job, a, b, out)] = (a, b)
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                yield pending.pop(future), future.result()


def read_all_pairs(output) -> pd.DataFrame:
    """The rows of a :func:`write_all_pairs` folder, in block-pair order (pandas).

    Raises
    ------
    StoreError
        The folder has no manifest, or the run is not finished.
    """
    output = Path(output)
    try:
        manifest = json.loads((output / MANIFEST).read_text())
    except (OSError, ValueError):
        raise StoreError(f"{output}: not an all-pairs output folder ({MANIFEST} missing)") from None
    if not manifest.get("finished"):
        raise StoreError(f"{output}: the run is not finished; run it again with --resume")
    tables = [pq.read_table(output / _block_file(a, b), schema=ALLPAIRS)
              for a, b in manifest["block_pairs"]]
    return to_pandas(pa.concat_tables(tables) if tables else ALLPAIRS.empty_table())

