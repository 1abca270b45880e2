"""Pairwise statistical significance (PSSE): is this pair related?

For each (query, subject) pair the subject is shuffled ``N`` times (composition kept),
the query is aligned (Smith-Waterman) against every shuffle, a Gumbel is fitted to those
scores by censored maximum likelihood, and the real score's P-value is read from the
fit (Agrawal & Huang 2011; on GPUs, Zhang et al. 2012).  Unlike a database E-value it
depends only on the pair: its lengths and compositions.

Reproducible: shuffle ``k`` of a subject is drawn from Philox4x32-10 keyed on
``(seed, subject key, k)``, the subject key a 64-bit hash of the subject's name
(:func:`subject_key`), so the numbers do not depend on the backend (CPU, simulator,
GPU), the launch geometry, the batching, or which other records are in the files.
A subject's shuffles are shared by every query it is paired with: each pair still sees
``N`` independent uniform permutations of its subject (its P-value is unchanged in
distribution), and the GPU makes them once per chunk and scores two queries per pass.

References
----------
.. [1] A. Agrawal, X. Huang, "Pairwise statistical significance of local sequence
   alignment using sequence-specific and position-specific substitution matrices",
   IEEE/ACM TCBB 8(1), 2011.
.. [2] Y. Zhang, F. Misra, A. Agrawal et al., "Accelerating pairwise statistical
   significance estimation for local alignment by harvesting GPU's power", BMC
   Bioinformatics 13(Suppl 5):S3, 2012.
.. [3] S. R. Eddy, Easel ``esl_gumbel.c``: ``esl_gumbel_FitCensored``.
.. [4] J. K. Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011.
"""
from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow as pa

from .. import backend
from ..errors import EmptyInputError, InputNotFoundError, SchemaError, ScoringError
from ..options import DEVICES, check_choice
from ..parquet_schemas import SIGNIFICANCE
from ..scoring import Scoring, check_score
from ..sequences.batch import SequenceBatch, SequencesLike, as_batch
from ..tables import check_table, on_backend, to_pandas
from .base import Job, TaskStats, import_beside, lazy_value, progress_bar, stat

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    import dask.dataframe as dd
    import pandas as pd

#: Residues (subjects and shuffles) per CPU chunk: the shuffled buffer stays in cache-
#: friendly tens of MB.
CPU_CHUNK_RESIDUES = 1 << 24
#: Order of the 20 score columns of a PSI-BLAST ASCII PSSM.
PSSM_LETTERS = "ARNDCQEGHILKMFPSTWYV"
#: The pairs of a run (type alias): ``"all"``, a pairs file or hits table, or (query,
#: subject) names.
PairsLike = str | os.PathLike | Iterable[tuple[str, str]]


def subject_key(name: str) -> np.uint64:
    """The RNG key of a subject: the first 8 bytes of BLAKE2b of its name (little endian).

    Examples
    --------
    >>> int(subject_key("sp|P69905|HBA_HUMAN")) == int(subject_key("sp|P69905|HBA_HUMAN"))
    True
    """
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
    return np.uint64(int.from_bytes(digest, "little"))


# --------------------------------------------------------------------------------------
# PSSM
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Pssm:
    """A position-specific scoring matrix from PSI-BLAST's ASCII output.

    Parameters
    ----------
    sequence : str
        The query's letters, one per position.
    scores : numpy.ndarray
        int32, (positions, 20), columns in :data:`PSSM_LETTERS` order.
    lambdas : dict
        The footer's ``K`` and ``Lambda`` per line (``"PSI Gapped"`` ...), if present.
    """

    sequence: str
    scores: np.ndarray
    lambdas: dict = field(default_factory=dict)

    def __len__(self):
        return len(self.sequence)

    def __eq__(self, other):
        return (isinstance(other, Pssm) and self.sequence == other.sequence
                and np.array_equal(self.scores, other.scores))

    def __repr__(self):
        return f"Pssm({len(self)} positions, {self.sequence[:10]}{'...' if len(self) > 10 else ''})"

    def profile(self, scoring: Scoring) -> np.ndarray:
        """Query profile ``[code, position]`` over the scoring's alphabet (int32).

        The 20 letters take the PSSM's scores; ``B`` and ``Z`` the mean (rounded down)
        of N and D, Q and E; ``U`` C's scores and ``J`` the better of I's and L's (as
        :mod:`swdask.scoring` scores them where a matrix lacks them); ``X``, ``*`` and ``O``
        (which PSI-BLAST does not print) the substitution matrix's score of the position's
        query letter against them.
        """
        letters = scoring.alphabet.letters
        if scoring.alphabet.name != "protein":
            raise ScoringError("a PSSM needs a protein scoring")
        prof = np.zeros((len(letters), len(self)), np.int32)
        for k, letter in enumerate(PSSM_LETTERS):
            prof[letters.index(letter)] = self.scores[:, k]
        for pair, letter in (("ND", "B"), ("QE", "Z")):
            a, b = (self.scores[:, PSSM_LETTERS.index(c)] for c in pair)
            prof[letters.index(letter)] = np.floor_divide(a + b, 2)
        prof[letters.index("U")] = prof[letters.index("C")]
        prof[letters.index("J")] = np.maximum(prof[letters.index("I")], prof[letters.index("L")])
        query = scoring.alphabet.encode(self.sequence, map_unknown=True)
        for letter in "X*O":
            prof[letters.index(letter)] = scoring.matrix[query, letters.index(letter)]
        return prof


def read_pssm(path: str | os.PathLike) -> Pssm:
    """Read PSI-BLAST's ASCII PSSM (``psiblast -out_ascii_pssm FILE``).

    The table after the ``Last position-specific scoring matrix computed`` line: a header
    of 40 letters (scores, then weighted percentages), then one line per position:
    number, query letter, 20 scores, 20 percentages, information and relative weight.
    The ``K``/``Lambda`` footer is read when present.

    Raises
    ------
    InputNotFoundError
        No such file.
    ScoringError
        Not a PSSM file, or a malformed line (the message gives the line number).

    Examples
    --------
    >>> import tempfile, os, pathlib
    >>> text = ("\\nLast position-specific scoring matrix computed\\n"
    ...         "   " + "  ".join(PSSM_LETTERS * 2) + "\\n"
    ...         "    1 M   " + " ".join(["-1"] * 12 + ["5"] + ["-1"] * 7) + " "
    ...         + " ".join(["0"] * 20) + "  0.50 0.10\\n\\n")
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "q.pssm")
    ...     _ = pathlib.Path(path).write_text(text)
    ...     pssm = read_pssm(path)
    >>> pssm, pssm.scores[0, PSSM_LETTERS.index("M")]
    (Pssm(1 positions, M), np.int32(5))
    """
    if not os.path.exists(path):
        raise InputNotFoundError(f"{path}: no such PSSM file")
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines = handle.read().splitlines()
    start = next((k for k, line in enumerate(lines)
                  if line.startswith("Last position-specific scoring matrix computed")), None)
    if start is None or start + 1 >= len(lines):
        raise ScoringError(f"{path}: not a PSI-BLAST ASCII PSSM (no 'Last position-specific "
                           "scoring matrix computed' line)")
    header = lines[start + 1].split()
    if header[:20] != list(PSSM_LETTERS):
        raise ScoringError(f"{path}: line {start + 2}: expected the 20 letters "
                           f"{' '.join(PSSM_LETTERS)}, got {' '.join(header[:20])!r}")
    letters, rows = [], []
    k = start + 2
    while k < len(lines) and lines[k].strip():
        parts = lines[k].split()
        try:
            if len(parts) < 22 or int(parts[0]) != len(rows) + 1 or len(parts[1]) != 1:
                raise ValueError
            rows.append([int(v) for v in parts[2:22]])
        except ValueError:
            raise ScoringError(f"{path}: line {k + 1}: expected position {len(rows) + 1}, a "
                               f"letter and 20 scores, got {lines[k].strip()[:60]!r}") from None
        for letter, value in zip(PSSM_LETTERS, rows[-1]):
            check_score(value, f"{path}: line {k + 1}: score of {letter}")
        letters.append(parts[1])
        k += 1
    if not rows:
        raise ScoringError(f"{path}: the PSSM has no positions")
    lambdas = {}
    for line in lines[k:]:
        parts = line.split()
        if len(parts) >= 4 and parts[0] in ("Standard", "PSI"):
            try:
                lambdas[f"{parts[0]} {parts[1]}"] = (float(parts[2]), float(parts[3]))
            except ValueError:
                pass
    return Pssm("".join(letters), np.array(rows, np.int32), lambdas)


# --------------------------------------------------------------------------------------
# pairs
# --------------------------------------------------------------------------------------


def _read_pairs(pairs, queries: SequenceBatch, subjects: SequenceBatch) -> list:
    """Per query index, the subject indices it is paired with (int64 arrays)."""
    if isinstance(pairs, str) and pairs == "all":
        every = np.arange(len(subjects), dtype=np.int64)
        return [every for _ in range(len(queries))]
    if isinstance(pairs, (str, os.PathLike)):
        path = os.fspath(pairs)
        if not os.path.exists(path):
            raise InputNotFoundError(f"{path}: no such pairs file")
        if path.endswith(".parquet") or os.path.isdir(path):
            import pyarrow.compute as pc
            import pyarrow.parquet as pq

            try:
                table = pq.read_table(path)
            except (OSError, pa.ArrowException) as exc:
                raise SchemaError(f"{path}: not a readable Parquet hits table: {exc}") from None
            for column in ("query", "subject"):
                if column not in table.column_names:
                    raise SchemaError(f"{path}: column {column!r} is missing (a hits table "
                                      "has 'query' and 'subject')")
            minus = (pc.sum(pc.equal(table.column("strand"), "minus")).as_py() or 0
                     if "strand" in table.column_names else 0)
            if minus:  # shuffles of the subject against the query as given: plus only
                raise SchemaError(f"{path}: {minus:,} hit(s) on the minus strand; significance "
                                  "aligns each query as given, so give plus-strand hits "
                                  "(search with --strand plus)")
            names = list(zip(table.column("query").to_pylist(),
                             table.column("subject").to_pylist()))
        else:
            names = []
            with open(path, encoding="utf-8") as handle:
                for k, line in enumerate(handle, 1):
                    if not line.strip():
                        continue
                    parts = line.rstrip("\r\n").split("\t")
                    if len(parts) != 2:
                        raise SchemaError(f"{path}: line {k}: expected two tab-separated "
                                          f"names (query, subject), got {line.strip()[:60]!r}")
                    names.append((parts[0], parts[1]))
    else:
        names = list(pairs)
    q_index = {n: k for k, n in enumerate(queries.names)}
    s_index = {n: k for k, n in enumerate(subjects.names)}
    found = [[] for _ in range(len(queries))]
    seen = set()
    for q, s in names:
        if q not in q_index:
            raise EmptyInputError(f"pairs: query {q!r} is not among the queries")
        if s not in s_index:
            raise EmptyInputError(f"pairs: subject {s!r} is not among the subjects")
        if (q, s) not in seen:  # a hits table may list a pair twice (two alignments)
            seen.add((q, s))
            found[q_index[q]].append(s_index[s])
    return [np.array(f, np.int64) for f in found]


# --------------------------------------------------------------------------------------
# the job and its tasks
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SignificanceStats(TaskStats):
    """Work and time of a significance run (summed over tasks)."""

    pairs: int = 0
    cells: int = 0  #: query x subject residues x (shuffles + 1), every pair
    kernel_seconds: float = 0.0  #: score kernels (GPU) or score calls (CPU)
    shuffle_seconds: float = 0.0
    fit_seconds: float = 0.0
    seconds: float = 0.0  #: task wall time
    device: str = stat("join")  #: the devices that ran the kernels ("cpu", "gpu", "cpu+gpu")

    @property
    def gcups(self) -> float:
        """Effective GCUPS: every cell of every shuffled alignment per second of wall time."""
        return self.cells / self.seconds / 1e9 if self.seconds else 0.0


@dataclass(frozen=True, eq=False, kw_only=True)
class SignificanceJob(Job):
    """Everything a significance task needs: small, immutable, picklable."""

    mode: ClassVar[str] = "local"  # the shuffles are scored by Smith-Waterman

    queries: SequenceBatch
    subjects: SequenceBatch
    pairs: tuple  # per query, subject indices
    profiles: tuple  # per query, int32 [code, row] profile (matrix columns or PSSM)
    shuffles: int
    seed: int
    uses_pssm: bool


def _empty_frame():
    return to_pandas(SIGNIFICANCE.empty_table())


def _table(rows: dict, n_shuffles: int, seed: int) -> pa.Table:
    """The checked Arrow table of a batch's rows (pandas is left to the API's edge: the
    command line writes Arrow, and pandas took 0.24-0.37 s of its 2 s on an H100 host)."""
    n = len(rows["query"])
    mu = np.asarray(rows["mu"], np.float64)
    lam = np.asarray(rows["lambda"], np.float64)
    data = {
        "query": pa.array(rows["query"], pa.string()),
        "subject": pa.array(rows["subject"], pa.string()),
        "score": pa.array(np.asarray(rows["score"], np.int32)),
        "mu": pa.array(mu, mask=np.isnan(mu)),
        "lambda": pa.array(lam, mask=np.isnan(lam)),
        "p_value": pa.array(np.asarray(rows["p_value"], np.float64)),
        "n_shuffles": pa.array(np.full(n, n_shuffles, np.int32)),
        "seed": pa.array(np.full(n, seed, np.int64)),
    }
    return check_table(pa.table(data), SIGNIFICANCE, where="significance")


def _run_batch(job: SignificanceJob, query_ids) -> tuple[pd.DataFrame, SignificanceStats]:
    """Significance of every pair of the queries ``query_ids``, in this process, as a
    pandas frame (a Dask task's partition)."""
    table, stats = _run_batch_table(job, query_ids)
    return to_pandas(table), stats


def _run_batch_table(job: SignificanceJob, query_ids) -> tuple[pa.Table, SignificanceStats]:
    """Significance of every pair of the queries ``query_ids``, in this process."""
    tick = time.perf_counter()
    query_ids = np.asarray(query_ids, np.int64)
    needed = np.unique(np.concatenate([job.pairs[q] for q in query_ids] + [np.zeros(0, np.int64)]))
    # Subjects longest first: neighbours in a warp (or a SIMD vector) have equal lengths.
    lengths = job.subjects.lengths[needed].astype(np.int64)
    needed = needed[np.argsort(-lengths, kind="stable")]
    device = job.task_device()
    if device == "gpu":
        from ..kernels.cuda import psse as gpu

        chunks = gpu.chunk_subjects(job.subjects.lengths[needed], job.shuffles)
    else:
        chunks = _cpu_chunks(job.subjects.lengths[needed], job.shuffles)
    # Per query: the subjects scored so far and their (score, mu, lambda, p), chunk by chunk.
    got = {int(q): [] for q in query_ids}
    stats = SignificanceStats()
    position = np.full(len(job.subjects), -1, np.int64)
    for chunk in chunks:
        subjects = needed[chunk]
        position[:] = -1
        position[subjects] = np.arange(len(subjects))
        blocks = []
        for q in query_ids:
            local = position[job.pairs[q]]
            blocks.append(tuple(np.sort(local[local >= 0]).tolist()))
        res, off = _gather(job.subjects, subjects)
        keys = np.array([subject_key(job.subjects.names[s]) for s in subjects], np.uint64)
        runner = _gpu_chunk if device == "gpu" else _cpu_chunk
        with backend.KERNEL_LOCK:  # the CPU's kernels are parallel Numba kernels
            results, chunk_stats = runner(job, res, off, keys, query_ids, blocks)
        stats += chunk_stats
        for q, block, result in zip(query_ids, blocks, results):
            got[int(q)].append((subjects[np.asarray(block, np.int64)], *result))
    columns = {name: [] for name in ("query", "subject", "score", "mu", "lambda", "p_value")}
    subject_names = np.array(job.subjects.names, dtype=object)
    for q in query_ids:
        parts = got[int(q)]
        subj = np.concatenate([p[0] for p in parts] + [np.zeros(0, np.int64)])
        values = [np.concatenate([p[k] for p in parts]) if parts else np.zeros(0)
                  for k in range(1, 5)]
        # Back to the order the pairs were asked in (a query's subjects are distinct).
        sorter = np.argsort(subj, kind="stable")
        pick = sorter[np.searchsorted(subj, job.pairs[q], sorter=sorter)]
        columns["query"] += [job.queries.names[q]] * len(pick)
        columns["subject"] += subject_names[job.pairs[q]].tolist()
        for name, value in zip(("score", "mu", "lambda", "p_value"), values):
            columns[name].append(value[pick])
    rows = {name: (columns[name] if name in ("query", "subject") else
                   np.concatenate(columns[name] + [np.zeros(0)]))
            for name in columns}
    table = _table(rows, job.shuffles, job.seed)
    stats = SignificanceStats(table.num_rows, _cells(job, query_ids), stats.kernel_seconds,
                              stats.shuffle_seconds, stats.fit_seconds,
                              time.perf_counter() - tick, device)
    return table, stats


def _cells(job: SignificanceJob, query_ids) -> int:
    """Cells of the pairs of the queries ``query_ids``: each query against its subjects
    and all their shuffles."""
    return sum(int(job.profiles[q].shape[1]) * int(job.subjects.lengths[job.pairs[q]].sum())
               for q in query_ids) * (job.shuffles + 1)


def _gather(batch: SequenceBatch, indices):
    lengths = batch.lengths[indices].astype(np.int64)
    off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    res = np.empty(int(off[-1]), np.uint8)
    for k, s in enumerate(indices):
        res[off[k]:off[k + 1]] = batch.codes(int(s))
    return res, off


def _cpu_chunks(lengths, n_shuffles):
    """Subjects cut into chunks of at most :data:`CPU_CHUNK_RESIDUES` residues over all
    their shuffled copies (the GPU path's rule, with the CPU's budget)."""
    from ..kernels.cpu.psse import chunk_subjects

    return chunk_subjects(lengths, n_shuffles, budget=CPU_CHUNK_RESIDUES)


def _cpu_chunk(job: SignificanceJob, res, off, keys, query_ids, blocks):
    """One chunk on the CPU: shuffles by the ``@njit`` twin, scores by the SIMD kernels
    (or the profile scorer for a PSSM), fits by the ``@njit`` fit."""
    from ..kernels.cpu import psse
    from ..kernels.cpu.score import score_all

    copies = job.shuffles + 1
    lengths = np.diff(off)
    sizes = lengths * copies
    base = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    buf = np.empty(max(int(sizes.sum()), 1), np.uint8)
    buf_off = np.zeros(len(lengths) * copies + 1, np.int64)
    tick = time.perf_counter()
    psse.shuffle_chunk(res, off[:-1].copy(), lengths, base, keys, np.int64(job.shuffles),
                       np.uint64(job.seed), buf, buf_off)
    shuffle_seconds = time.perf_counter() - tick
    score_seconds = 0.0
    rows = []
    for q, block in zip(query_ids, blocks):
        idx = np.asarray(block, np.int64)
        order = (idx[:, None] * copies + np.arange(copies)[None, :]).ravel()
        tick = time.perf_counter()
        if job.uses_pssm:
            scores = np.zeros(len(order), np.int64)
            psse.score_profile(job.profiles[q].astype(np.int64), buf, buf_off, order,
                               job.scoring.gap_open, job.scoring.gap_extend, scores)
        else:
            query = job.queries.codes(int(q))
            scores = score_all(query, np.array([0, len(query)], np.int64), buf, buf_off,
                               job.scoring.matrix, job.scoring.gap_open, job.scoring.gap_extend,
                               "local", order)[0][0]
        score_seconds += time.perf_counter() - tick
        rows.append(np.asarray(scores, np.int64))
    # One parallel fit over every pair of the chunk.
    tick = time.perf_counter()
    scores = np.concatenate(rows + [np.zeros(0, np.int64)])
    n = len(scores) // copies
    mu, lam, p = (np.zeros(n) for _ in range(3))
    if n:
        psse.fit_pairs(scores, np.int64(copies), mu, lam, p)
    fit_seconds = time.perf_counter() - tick
    results, at = [], 0
    for block in blocks:
        part = slice(at, at + len(block))
        results.append((scores[at * copies:(at + len(block)) * copies:copies].astype(np.int32),
                        mu[part], lam[part], p[part]))
        at += len(block)
    return results, SignificanceStats(kernel_seconds=score_seconds, shuffle_seconds=shuffle_seconds,
                                      fit_seconds=fit_seconds)


def _gpu_chunk(job: SignificanceJob, res, off, keys, query_ids, blocks):
    from ..kernels.cuda.psse import DeviceShuffles

    shuffled = DeviceShuffles(res, off, keys, job.shuffles, job.seed)
    import_beside("pandas")  # pyarrow's first pa.array (the result table) imports it
    results, dstats = shuffled.significance([job.profiles[q] for q in query_ids], blocks,
                                            job.scoring.gap_open, job.scoring.gap_extend)
    return results, SignificanceStats(kernel_seconds=dstats.kernel_seconds,
                                      shuffle_seconds=dstats.shuffle_seconds,
                                      fit_seconds=dstats.fit_seconds)


# --------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------


def check_options(shuffles: int, seed: int, device: str, pairs: PairsLike) -> None:
    """Check the options of a significance run before any work is done.

    Parameters
    ----------
    shuffles : int
        Shuffles of each subject: a whole number >= 2.
    seed : int
        Seed of the shuffles: a whole number in [0, 2**63).
    device : {"auto", "cpu", "gpu"}
        The device asked for (only the name is checked here).
    pairs : "all", path or iterable of (query, subject) names
        The pairs to score; a string other than ``"all"`` must name an existing file.
        Pairs given as data (not a string) are checked where they are read.

    Raises
    ------
    ValueError
        ``shuffles``, ``seed`` or ``device`` is out of range or unknown.
    InputNotFoundError
        ``pairs`` names a file that does not exist.

    Examples
    --------
    >>> check_options(1000, 0, "cpu", "all")
    >>> check_options(1, 0, "cpu", "all")
    Traceback (most recent call last):
    ...
    ValueError: shuffles must be a whole number >= 2, got 1
    """
    if isinstance(shuffles, bool) or not isinstance(shuffles, (int, np.integer)) or shuffles < 2:
        raise ValueError(f"shuffles must be a whole number >= 2, got {shuffles!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be a whole number in [0, 2**63), got {seed!r}")
    check_choice("device", device, DEVICES)
    if isinstance(pairs, str) and pairs != "all" and not os.path.exists(pairs):
        raise InputNotFoundError(f"{pairs}: no such pairs file (pairs is 'all', a PAIRS.tsv "
                                 "of query/subject names or a HITS.parquet)")


def _prepare(queries, subjects, *, scoring, shuffles, seed, pairs, pssm, device, alphabet,
             map_unknown, here=True) -> SignificanceJob:
    check_options(shuffles, seed, device, pairs)
    queries = as_batch(queries, alphabet, map_unknown)
    subjects = as_batch(subjects, queries.alphabet.name if alphabet == "auto" else alphabet,
                          map_unknown)
    if len(subjects) == 0:
        raise EmptyInputError("no subjects")
    scoring = scoring if scoring is not None else Scoring.default(queries.alphabet)
    if scoring.alphabet.name != queries.alphabet.name:
        raise ScoringError(f"the sequences are {queries.alphabet.name} but the scoring "
                           f"({scoring.name}) is for {scoring.alphabet.name}")
    profiles = [np.ascontiguousarray(scoring.matrix[:, queries.codes(q)], np.int32)
                for q in range(len(queries))]
    if pssm is not None:
        table = pssm if isinstance(pssm, Pssm) else read_pssm(pssm)
        target = scoring.alphabet.encode(table.sequence, map_unknown=True)
        matched = [q for q in range(len(queries)) if np.array_equal(queries.codes(q), target)]
        if not matched:
            raise ScoringError(f"the PSSM's query ({len(table)} positions, "
                               f"{table.sequence[:20]}...) matches none of the queries")
        for q in matched:
            profiles[q] = table.profile(scoring)
    # In this process, or on a Dask cluster ("auto": each worker's GPU, see swdask.backend).
    device = backend.job_device(device, "local", client=None if here else backend.current_client())
    return SignificanceJob(queries=queries, subjects=subjects,
                           pairs=tuple(_read_pairs(pairs, queries, subjects)),
                           profiles=tuple(profiles), scoring=scoring, shuffles=int(shuffles),
                           seed=int(seed), device=device, uses_pssm=pssm is not None)


def significance_in_process(queries: SequencesLike, subjects: SequencesLike, *,
                            scoring: Scoring | None = None, shuffles: int = 1000, seed: int = 0,
                            pairs: PairsLike = "all", pssm: str | os.PathLike | Pssm | None = None,
                            device: str = "auto", alphabet: str = "auto",
                            map_unknown: bool = False,
                            progress: bool = False) -> tuple[pd.DataFrame, SignificanceStats]:
    """:func:`significance` computed here, without Dask: returns ``(frame, stats)``.

    Parameters and Raises are those of :func:`significance`; ``progress`` shows progress
    on the standard error in cells (every shuffle's; :func:`swdask.jobs.base.progress_bar`).

    Returns
    -------
    frame : pandas.DataFrame
        One row per pair, columns of ``swdask.parquet_schemas.SIGNIFICANCE``.
    stats : SignificanceStats

    Examples
    --------
    >>> frame, stats = significance_in_process(
    ...     {"q": "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ"},
    ...     {"same": "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", "other": "GSHMLEDPVDAFQGRAGW"},
    ...     shuffles=50, seed=1, device="cpu")
    >>> frame[["subject", "score", "n_shuffles"]].to_string(index=False)
    'subject  score  n_shuffles\\n   same    160          50\\n  other     15          50'
    >>> bool(frame.p_value[0] < 1e-6), bool(frame.p_value[1] > 0.01)
    (True, True)
    """
    table, stats = significance_table(
        queries, subjects, scoring=scoring, shuffles=shuffles, seed=seed, pairs=pairs,
        pssm=pssm, device=device, alphabet=alphabet, map_unknown=map_unknown, progress=progress)
    return to_pandas(table), stats


def significance_table(queries: SequencesLike, subjects: SequencesLike, *,
                       scoring: Scoring | None = None, shuffles: int = 1000, seed: int = 0,
                       pairs: PairsLike = "all", pssm: str | os.PathLike | Pssm | None = None,
                       device: str = "auto", alphabet: str = "auto", map_unknown: bool = False,
                       progress: bool = False) -> tuple[pa.Table, SignificanceStats]:
    """:func:`significance_in_process` as an Arrow table (what the command line writes,
    without importing pandas).

    Returns
    -------
    table : pyarrow.Table
        Schema ``swdask.parquet_schemas.SIGNIFICANCE``.
    stats : SignificanceStats
    """
    job = _prepare(queries, subjects, scoring=scoring, shuffles=shuffles, seed=seed, pairs=pairs,
                   pssm=pssm, device=device, alphabet=alphabet, map_unknown=map_unknown)
    tables, stats = [], SignificanceStats()
    tick = time.perf_counter()
    batches = _query_batches(job)
    _log_plan(job, batches)
    with progress_bar(progress, desc="significance", unit="cell", unit_scale=True,
                      total=_cells(job, range(len(job.queries))), leave=True) as bar:
        for batch in batches:
            table, batch_stats = _run_batch_table(job, batch)
            tables.append(table)
            stats += batch_stats
            bar.update(batch_stats.cells)
    table = pa.concat_tables(tables) if tables else SIGNIFICANCE.empty_table()
    return table, replace(stats, seconds=time.perf_counter() - tick,
                          device=stats.device or job.device)


def _log_plan(job: SignificanceJob, batches) -> None:
    logger.info("significance: %d pairs of %d queries, %d shuffles each, %s cells, in %d "
                "batches on %s", sum(len(p) for p in job.pairs), len(job.queries), job.shuffles,
                f"{_cells(job, range(len(job.queries))):,}", len(batches), job.device)


def _query_batches(job: SignificanceJob, per_task=None):
    """Query indices per task: every query in one batch on a GPU (the shuffles of a
    chunk are made once for all of them), 8 per batch on the CPU."""
    if per_task is None:
        per_task = len(job.queries) if job.device != "cpu" else 8
    ids = np.arange(len(job.queries))
    return [ids[k:k + per_task] for k in range(0, len(ids), max(per_task, 1))]


def significance(queries: SequencesLike, subjects: SequencesLike, *,
                 scoring: Scoring | None = None, shuffles: int = 1000, seed: int = 0,
                 pairs: PairsLike = "all", pssm: str | os.PathLike | Pssm | None = None,
                 device: str = "auto", alphabet: str = "auto", map_unknown: bool = False,
                 queries_per_task: int | None = None,
                 return_stats: bool = False) -> dd.DataFrame | tuple[dd.DataFrame, Any]:
    """Pairwise statistical significance of (query, subject) pairs: a lazy Dask DataFrame.

    Parameters
    ----------
    queries, subjects : str, os.PathLike, SequenceBatch, dict or list
        FASTA/FASTQ files or stores, batches, ``{name: sequence}`` or lists of sequences.
    scoring : Scoring, optional
        Default: BLOSUM62 with gaps 11/1 (protein), see :class:`~swdask.Scoring`.
    shuffles : int, default 1000
        Shuffles of each subject (>= 2).
    seed : int, default 0
        Seed of the shuffles, in ``[0, 2**63)``.
    pairs : "all", path or iterable of (query, subject) names, default "all"
        ``"all"``: every query against every subject; a ``.tsv`` of two tab-separated
        names per line (query, subject; no header); a hits table (``.parquet`` with
        ``query`` and ``subject`` columns, e.g. :func:`swdask.search`'s output) to
        re-rank a search's hits.
    pssm : str, os.PathLike or Pssm, optional
        A PSI-BLAST ASCII PSSM (``-out_ascii_pssm``); it replaces the substitution matrix
        for the queries whose sequence is the PSSM's.
    device : {"auto", "cpu", "gpu"}, default "auto"
        ``"auto"``: a GPU when one is visible.
    alphabet : {"auto", "protein", "dna"}, default "auto"
    map_unknown : bool, default False
        Read unknown letters as X/N instead of failing.
    queries_per_task : int, optional
        Queries per Dask task (default: all of them on a GPU, 8 on the CPU).
    return_stats : bool, default False
        Also return a lazy :class:`SignificanceStats` (a Dask scalar); compute it with the
        frame (``dask.compute(frame, stats)``) so that the work runs once.

    Returns
    -------
    dask.dataframe.DataFrame
        Lazy; columns ``query, subject, score, mu, lambda, p_value, n_shuffles, seed``
        (``swdask.parquet_schemas.SIGNIFICANCE``), pairs in query order, then in pair
        order.  Its tasks declare their device (:class:`swdask.backend.KernelTask`):
        on a cluster of GPU and CPU workers those of ``device="gpu"`` go to the GPU
        workers (:func:`swdask.gpu_resources`), and say their cells, which progress counts.
        pandas partitions, or cudf partitions under ``dask.config.set(
        {"dataframe.backend": "cudf"})`` (:func:`swdask.tables.on_backend`).
    dask.dataframe.Scalar
        Only with ``return_stats=True``: computes to a :class:`SignificanceStats`.

    Raises
    ------
    ValueError
        ``shuffles`` < 2, a seed out of range, or an unknown device.
    InputNotFoundError, SequenceFormatError, InvalidSequenceError, EmptyInputError
        Unreadable inputs, or a pair naming a record that is not there.
    ScoringError
        A malformed PSSM, or one that matches no query.
    DeviceError
        ``device="gpu"`` without a GPU.

    Notes
    -----
    Shuffles are composition-preserving permutations (Fisher-Yates, Philox4x32-10 keyed
    on ``(seed, subject key, shuffle)``); scores are local (Smith-Waterman) scores; the
    Gumbel is fitted by censored ML with scores below ``floor(mean) + 0.5`` censored
    (Eddy's ``esl_gumbel_FitCensored``: local scores are Gumbel only in their right tail);
    above the cutoff ``p_value = 1 - exp(-exp(-lambda (score - mu)))``, at or below it
    (P-values above about 0.4, where the censored fit knows only how many shuffles lie
    there) the shuffles' own mid-P, ``(#{x > score} + #{x == score} / 2) / N``.  See
    :mod:`swdask.kernels.cpu.psse`.

    References
    ----------
    Agrawal & Huang, IEEE/ACM TCBB 8(1), 2011; Zhang et al., BMC Bioinformatics 13(S5),
    2012; Eddy, Easel ``esl_gumbel``.

    Examples
    --------
    >>> frame = significance({"q": "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ"},
    ...                      {"same": "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ"},
    ...                      shuffles=50, seed=1, device="cpu")
    >>> frame.compute()[["subject", "score"]].to_string(index=False)
    'subject  score\\n   same    160'
    """
    import dask
    import dask.dataframe as dd
    from dask.base import tokenize

    job = _prepare(queries, subjects, scoring=scoring, shuffles=shuffles, seed=seed, pairs=pairs,
                   pssm=pssm, device=device, alphabet=alphabet, map_unknown=map_unknown,
                   here=False)
    batches = _query_batches(job, queries_per_task)
    _log_plan(job, batches)
    token = tokenize(job.queries.residues, job.subjects.residues, job.pairs, job.shuffles,
                     job.seed, job.device)[:8]
    job_node = dask.delayed(job, name=f"swdask-significance-job-{token}")
    # Each task declares its kernels' device (the cluster routes GPU work by it) and its
    # cells (progress counts them).
    parts = [dask.delayed(backend.KernelTask(_run_batch, job.device, work=_cells(job, batch)),
                          nout=2, pure=True)(job_node, batch,
                                             dask_key_name=(f"swdask-significance-{token}", k))
             for k, batch in enumerate(batches)]
    if parts:
        frame = dd.from_delayed([frame for frame, _ in parts], meta=_empty_frame(),
                                prefix=f"swdask-significance-frame-{token}", verify_meta=False)
    else:
        frame = dd.from_pandas(_empty_frame(), npartitions=1)
    frame = on_backend(frame)
    if not return_stats:
        return frame
    stats = dask.delayed(sum, pure=True)([stats for _, stats in parts], SignificanceStats())
    return frame, lazy_value(stats, SignificanceStats, name=f"swdask-significance-stats-{token}")
