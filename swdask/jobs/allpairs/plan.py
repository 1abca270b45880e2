"""All-pairs plan: the identity threshold and its score bound, blocks and block pairs,
and the :class:`AllPairsJob` every block-pair task gets (see the package docstring)."""
from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ... import backend
from ...errors import InvalidSequenceError
from ...kernels.cpu.reference import mode_code
from ...options import ALLPAIRS_MODES, check_choice
from ...scoring import Scoring
from ...sequences.ingest import open_database
from ...sequences.store import SequenceStore, read_part
from ...tables import numpy_of
from ..base import Job, TemporaryStore
from .filter import QgramFilter, filters, screen_buckets

if TYPE_CHECKING:
    from collections.abc import Iterable

    import numpy.typing as npt
    from distributed import Client

__all__ = ["ALLPAIRS_MODES", "BLOCK_SIZE", "CANNOT_PASS", "MAX_DENOMINATOR", "NO_BOUND",
           "AllPairsJob", "Block", "IdentityBound", "as_threshold", "block_lengths",
           "block_pair_work", "blocks_can_pass", "check_allpairs_mode", "check_device",
           "largest_first", "pair_cells", "pair_ranges", "plan_blocks", "prepare"]

#: Default sequences per block (a block pair is one task).
BLOCK_SIZE = 2048
#: Largest denominator of an identity threshold (keeps the bound's integers in int64).
MAX_DENOMINATOR = 10**6
NO_BOUND = -(1 << 62)
CANNOT_PASS = 1 << 62


def check_allpairs_mode(mode: str) -> str:
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


def as_threshold(value: float | Fraction | str) -> Fraction:
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
    def from_scoring(cls, scoring: Scoring, min_identity: float | Fraction = 0.97,
                     mode: str = "global") -> IdentityBound:
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
    def params(self) -> tuple[int, int, int, int, int]:
        """``(num, den, ident, penalty, local)``: the kernels' integer arguments."""
        t = self.threshold
        return (t.numerator, t.denominator, self.identity_score, self.penalty,
                int(self.mode == "local"))

    def lengths_can_pass(self, m: int, n: int) -> bool:
        """Whether lengths ``m`` and ``n`` allow identity ``t`` (always in local mode)."""
        if self.mode == "local" or self.threshold == 0:
            return True
        return min(m, n) >= self.threshold * max(m, n)

    def lowest_score(self, m: int, n: int) -> int | float | None:
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

    def lowest_scores(self, m: npt.ArrayLike, n: npt.ArrayLike) -> npt.NDArray[np.int64]:
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

    def identity_passes(self, matches: int | npt.ArrayLike,
                        columns: int | npt.ArrayLike) -> bool | npt.NDArray[np.bool_]:
        """``matches / columns >= t``, exactly (an empty alignment has identity 0); of
        one alignment, or elementwise of arrays of them."""
        t = self.threshold
        passes = (np.asarray(matches, dtype=np.int64) * t.denominator
                  >= t.numerator * np.asarray(columns, dtype=np.int64))
        passes = np.where(np.asarray(columns) == 0, t == 0, passes)
        return bool(passes) if passes.ndim == 0 else passes


@dataclass(frozen=True)
class Block:
    """A run of consecutive sequences of one store partition, and its length range."""

    partition: int
    start: int
    stop: int
    min_length: int
    max_length: int


def block_lengths(store: SequenceStore, partition: int) -> np.ndarray:
    """The lengths of store partition ``partition`` (int64), read from its Parquet file."""
    return numpy_of(read_part(store.files[partition], ["length"])["length"]).astype(np.int64)


def plan_blocks(store: SequenceStore, block_size: int) -> tuple[Block, ...]:
    """Blocks of at most ``block_size`` consecutive sequences, each inside one partition."""
    blocks = []
    for part in range(len(store.partitions)):
        lengths = block_lengths(store, part)
        for start in range(0, len(lengths), block_size):
            stop = min(start + block_size, len(lengths))
            blocks.append(Block(part, start, stop, int(lengths[start:stop].min()),
                                 int(lengths[start:stop].max())))
    return tuple(blocks)


def blocks_can_pass(bound: IdentityBound, a: Block, b: Block) -> bool:
    """Whether some pair of blocks ``a`` and ``b`` has lengths allowing identity ``t``:
    the closest lengths of the two ranges decide."""
    if a.max_length < b.min_length:
        return bound.lengths_can_pass(a.max_length, b.min_length)
    if b.max_length < a.min_length:
        return bound.lengths_can_pass(b.max_length, a.min_length)
    return True


def pair_ranges(
    q_len: npt.ArrayLike, s_len: npt.ArrayLike, diagonal: bool, bound: IdentityBound,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
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


def pair_cells(q_len: npt.ArrayLike, s_len: npt.ArrayLike, q_list: npt.NDArray[np.int64],
               s_lo: npt.NDArray[np.int64], s_count: npt.NDArray[np.int64]) -> int:
    """Cells of the ranges of :func:`pair_ranges`: each query's length times the lengths
    of its subjects, summed.

    Examples
    --------
    >>> import numpy as np
    >>> pair_cells([10, 20], [1, 2, 3], np.array([1]), np.array([1]), np.array([2]))
    100
    """
    cum = np.concatenate([[0], np.cumsum(np.asarray(s_len, dtype=np.int64))])
    q_len = np.asarray(q_len, dtype=np.int64)
    return int((q_len[q_list] * (cum[s_lo + s_count] - cum[s_lo])).sum())


def block_pair_work(job: AllPairsJob,
                    pairs: Iterable[tuple[int, int]]) -> dict[tuple[int, int], tuple[int, int]]:
    """``(pairs to score, cells)`` of each block pair of ``pairs``, from the lengths only
    (each store partition's ``length`` column read once): a run's progress weights and the
    order its block pairs start in (most cells first)."""
    store = SequenceStore.open(job.store_path)
    by_partition, lengths, work = {}, {}, {}
    for a, b in pairs:
        for x in (a, b):
            if x not in lengths:
                block = job.blocks[x]
                if block.partition not in by_partition:
                    by_partition[block.partition] = block_lengths(store, block.partition)
                lengths[x] = by_partition[block.partition][block.start:block.stop]
        q_list, s_lo, s_count = pair_ranges(lengths[a], lengths[b], a == b, job.bound)
        work[(a, b)] = (int(s_count.sum()),
                        pair_cells(lengths[a], lengths[b], q_list, s_lo, s_count))
    return work


def largest_first(work: dict[tuple[int, int], tuple[int, int]]) -> list[tuple[int, int]]:
    """The block pairs of ``work`` (:func:`block_pair_work`) in the order a run starts
    them: most cells first, ties in their own order.  The last to finish are then small
    and the workers finish together (greedy longest-first); in the store's order the
    large block pairs of the longest sequences came last, and one worker ran the last of
    them alone.

    Examples
    --------
    >>> largest_first({(0, 0): (3, 30), (0, 1): (9, 90), (1, 1): (3, 30)})
    [(0, 1), (0, 0), (1, 1)]
    """
    return sorted(work, key=lambda pair: -work[pair][1])


@dataclass(frozen=True, kw_only=True)
class AllPairsJob(Job):
    """Everything a block-pair task needs (pickled to the workers once)."""

    gpu_kernels: ClassVar[backend.GpuKernels] = backend.ALLPAIRS_GPU

    store_path: str
    blocks: tuple
    block_pairs: tuple
    bound: IdentityBound
    min_score: int | None
    cigar: bool
    rows: int | None
    n_sequences: int
    skipped: int
    prefilter: QgramFilter | None = None
    keep: object = field(default=None, compare=False)  # a temporary store's TemporaryStore

    @property
    def mode(self) -> str:
        """The alignment mode (of the identity bound)."""
        return self.bound.mode


def check_device(device: str, mode: str, *, here: bool) -> str:
    """The device of the all-pairs score pass: :func:`swdask.backend.check_device` with
    the all-pairs GPU kernel, which computes global and local alignments.

    Examples
    --------
    >>> check_device("cpu", "local", here=True)
    'cpu'
    >>> check_device("gpu", "global", here=False)
    'gpu'
    """
    return backend.check_device(device, mode, here=here, kernels=AllPairsJob.gpu_kernels)


def warm_screen_beside() -> threading.Thread:
    """Start the GPU q-gram screen's first use on a daemon thread while this one reads
    the sequences: cupy imported, cuBLAS loaded and its handle made by a product of two
    tiny matrices, cupy's compaction kernels loaded (a process's first screen paid all of
    that inside its first block pair: 1.9-2.1 s on an H100 host).  The imports go first,
    outside the kernel lock.  Nothing in the simulator or without cupy; errors are left
    to the screen's own call, which reports them.  (Here, not in
    :mod:`swdask.kernels.cuda.qgram`: host code there would change the digest of the
    kernels shipped with the package.)"""
    def warm():
        try:
            from ...kernels.cuda import qgram

            xp = qgram._array_module()
            if xp is None or xp is np:
                return
            with backend.KERNEL_LOCK:
                v = xp.ones((2, 4), dtype=np.float32)
                xp.flatnonzero((v @ v.T).ravel() > 0).astype(np.int64)
                qgram.cuda.synchronize()
        except Exception:  # noqa: BLE001, S110 - the first block pair's screen says why
            pass

    thread = threading.Thread(target=warm, name="swdask-screen-warm", daemon=True)
    thread.start()
    return thread


def prepare(source: str | os.PathLike | SequenceStore, *, scoring: Scoring | None, mode: str,
            min_identity: float | Fraction, min_score: int | None, device: str, cigar: bool,
            block_size: int, alphabet: str, map_unknown: bool, rows: int | None,
            client: Client | None, prefilter: bool = True) -> AllPairsJob:
    """Check the arguments, open (or ingest) the sequences, decide the device once
    (:func:`swdask.backend.job_device`: here, or on ``client``'s workers) and plan the
    blocks and the block pairs that the lengths leave, and the q-gram pre-filter
    (:class:`~.filter.QgramFilter`, unless ``prefilter`` is false or it cannot drop a
    pair)."""
    check_allpairs_mode(mode)
    if block_size is None or isinstance(block_size, bool) or int(block_size) < 1:
        raise ValueError(f"block_size must be a positive whole number, got {block_size!r}")
    if min_score is not None and (isinstance(min_score, bool) or int(min_score) != min_score):
        raise ValueError(f"min_score must be a whole number, got {min_score!r}")
    device = backend.job_device(device, mode, kernels=AllPairsJob.gpu_kernels, client=client)
    if (device == "gpu" and client is None and prefilter
            and filters(mode, as_threshold(min_identity)) and screen_buckets()):
        warm_screen_beside()  # beside the reading of the sequences, not after it
    if isinstance(source, SequenceStore):
        store = source
    else:
        store = open_database(source, alphabet=alphabet, map_unknown=map_unknown)
    keep = None
    if getattr(store, "temporary", False):
        keep = TemporaryStore(store.path)
    scoring = scoring if scoring is not None else Scoring.default(store.alphabet)
    if scoring.alphabet.name != store.alphabet.name:
        raise InvalidSequenceError(f"{source}: the sequences are {store.alphabet.name} but the "
                                   f"scoring ({scoring.name}) is for {scoring.alphabet.name}")
    longest = max((p["max_length"] for p in store.partitions), default=0)
    scoring.check_lengths(longest, longest, "the longest pair")  # before any work
    bound = IdentityBound.from_scoring(scoring, min_identity, mode)
    qgrams = QgramFilter.for_job(bound, store.alphabet) if prefilter else None
    blocks = plan_blocks(store, int(block_size))
    pairs, skipped = [], 0
    for a in range(len(blocks)):
        for b in range(a, len(blocks)):
            if blocks_can_pass(bound, blocks[a], blocks[b]):
                pairs.append((a, b))
            else:
                skipped += 1
    return AllPairsJob(store_path=str(store.path), blocks=blocks, block_pairs=tuple(pairs),
                       scoring=scoring, bound=bound,
                       min_score=None if min_score is None else int(min_score), device=device,
                       cigar=bool(cigar), rows=rows, n_sequences=store.n_records,
                       skipped=skipped, prefilter=qgrams, keep=keep)
