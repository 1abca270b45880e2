"""One all-pairs block pair: score pass with the identity bound, traceback of the pairs
over it, exact identity filter; and the typed statistics of the tasks."""
from __future__ import annotations

import collections
import functools
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields

import numba
import numpy as np
import pandas as pd
import pyarrow as pa

from ... import backend
from ...kernels.cpu.score import banded_global_scores, score_all
from ...kernels.cpu.threads import kernel_threads
from ...kernels.cpu.traceback import (
    COUNT_COLUMNS,
    COUNT_GAP_OPENS,
    COUNT_MATCHES,
    COUNT_MISMATCHES,
    align_codes,
    describe,
    path_counts,
)
from ...options import tunable
from ...parquet_schemas import ALLPAIRS
from ...sequences.batch import SequenceBatch
from ...sequences.store import SequenceStore
from ...tables import check_table, to_pandas
from ..base import TaskStats, stat
from .filter import QgramFilter, Runs, pairs_of
from .plan import NO_BOUND, AllPairsJob, Block, pair_cells, pair_ranges

__all__ = ["CPU_CHUNK", "AllPairsStats", "BlockStats", "allpairs_stats", "block_frame",
           "block_pair", "read_block"]

#: Queries scored together by the CPU kernel (against the union of their subject ranges).
CPU_CHUNK = 16


#: Store partitions a process keeps read (16.7 M residues each by default: the 215,016
#: sequences of workflows/make_16s_large.py are 20 of them, about 350 MB).  Block pairs run
#: most cells first, which at 16S lengths visits blocks in no order of the store.
PARTITIONS_KEPT = 32


@functools.lru_cache(maxsize=PARTITIONS_KEPT)
def _read_partition(store_path: str, partition: int) -> SequenceBatch:
    return SequenceStore.open(store_path).read_partition(partition)


def read_block(store_path: str, block: Block) -> SequenceBatch:
    """The sequences of ``block`` (its partition read once per process, the last few kept)."""
    return _read_partition(store_path, block.partition).take(np.arange(block.start, block.stop))


#: Bytes of q-gram codes a process keeps (4 a residue for DNA), most recently used first.
#: Block pairs run most cells first, in no order of their blocks, on many threads: with
#: the last 4 blocks kept, the 16S set (14 blocks, 62 block pairs) made its codes 8 times
#: over, under the kernel lock.  2 GiB holds every block of the 215,016-sequence set.
QGRAM_BYTES_KEPT = 2 << 30


class _CodeCache:
    """The q-gram codes of the blocks used last, within :data:`QGRAM_BYTES_KEPT`."""

    def __init__(self, limit: int):
        self.limit = limit
        self.entries: collections.OrderedDict = collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, store_path: str, block: Block, prefilter: QgramFilter) -> tuple:
        key = (store_path, block, prefilter.q, prefilter.base, prefilter.unknown)
        with self.lock:
            if key in self.entries:
                self.entries.move_to_end(key)
                return self.entries[key]
        codes = prefilter.codes(read_block(store_path, block))  # two threads may both make it
        with self.lock:
            self.entries[key] = codes
            self.entries.move_to_end(key)
            while len(self.entries) > 1 and sum(
                    c.nbytes + o.nbytes for c, o in self.entries.values()) > self.limit:
                self.entries.popitem(last=False)
        return codes


_block_qgrams = _CodeCache(QGRAM_BYTES_KEPT).get


def _score_cpu(qa: SequenceBatch, sb: SequenceBatch, runs: Runs, job: AllPairsJob, *,
               sparse: bool):
    """Passing ``(query, subject, score, query_end, subject_end)`` arrays, kernel seconds
    and 0 (the CPU abandons no pair).

    The SIMD kernel scores one query set against one subject set in lanes of subjects.
    Dense runs (every pair the lengths allow) go as chunks of :data:`CPU_CHUNK` queries
    against the union of their subject ranges, one chunk at a time on every core.  The
    sparse runs left by the q-gram filter go one query at a time against exactly its own
    subjects (a union would score mostly pairs the filter dropped), several queries at
    once on the cores: a query with a few subjects fills one group of lanes, one core.
    In global mode with an identity bound the sparse pairs are scored one by one inside
    the band of diagonals a path reaching the pair's bound can visit
    (:func:`~swdask.kernels.cpu.score.banded_global_scores`): exact for every pair that
    reaches it, a tenth of the cells at 16S lengths and 0.97.
    """
    scoring, bound = job.scoring, job.bound
    floor = NO_BOUND if job.min_score is None else job.min_score
    q_list, s_lo, s_count = runs

    def score(ql, subjects, lo=None, hi=None):
        chunk = qa.take(ql)
        scores, q_end, s_end = score_all(chunk.residues, chunk.offsets, sb.residues,
                                         sb.offsets, scoring.matrix, scoring.gap_open,
                                         scoring.gap_extend, job.mode, subjects)
        low = bound.lowest_scores(chunk.lengths[:, None], sb.lengths[subjects][None, :])
        keep = (scores >= low) & (scores >= floor)
        if lo is not None:
            cols = subjects[None, :]
            keep &= (cols >= lo[:, None]) & (cols < hi[:, None])
        rows, which = np.nonzero(keep)
        return (ql[rows], subjects[which], scores[rows, which], q_end[rows, which],
                s_end[rows, which])

    seconds = 0.0
    found = []
    if sparse and job.mode == "global" and bound.threshold > 0:
        # Each kept pair matters only if it reaches its bound: scored in the band of
        # diagonals a path of that score can visit (exact there; below it elsewhere).
        qi, sj = pairs_of(runs)
        low = np.maximum(bound.lowest_scores(qa.lengths[qi], sb.lengths[sj]), floor)
        with backend.KERNEL_LOCK:
            tick = time.perf_counter()
            scores = banded_global_scores(qa.residues, qa.offsets, sb.residues, sb.offsets,
                                          qi, sj, low, scoring.matrix, scoring.gap_open,
                                          scoring.gap_extend)
            seconds = time.perf_counter() - tick
        keep = scores >= low
        qi, sj = qi[keep], sj[keep]
        ends = (qa.lengths[qi], sb.lengths[sj])  # global paths end at the corner
        return [x.astype(np.int64) for x in (qi, sj, scores[keep], *ends)], seconds, 0
    if sparse:
        qi, sj = pairs_of(runs)
        cut = np.flatnonzero(np.diff(qi)) + 1
        work = [(g[:1], h) for g, h in zip(np.split(qi, cut), np.split(sj, cut)) if len(g)]
        threads = max(1, min(kernel_threads(), len(work)))
        with backend.KERNEL_LOCK:
            tick = time.perf_counter()
            with ThreadPoolExecutor(threads, thread_name_prefix="swdask-allpairs-score") as pool:
                found = list(pool.map(lambda w: score(*w), work))
            seconds = time.perf_counter() - tick
    else:
        for c in range(0, len(q_list), CPU_CHUNK):
            lo = s_lo[c:c + CPU_CHUNK]
            hi = lo + s_count[c:c + CPU_CHUNK]
            subjects = np.arange(int(lo.min()), int(hi.max()), dtype=np.int64)
            with backend.KERNEL_LOCK:
                tick = time.perf_counter()
                found.append(score(q_list[c:c + CPU_CHUNK], subjects, lo, hi))
                seconds += time.perf_counter() - tick
    if not found:
        return [np.zeros(0, np.int64)] * 5, seconds, 0
    return [np.concatenate(x).astype(np.int64) for x in zip(*found)], seconds, 0


def _score_gpu(qa: SequenceBatch, sb: SequenceBatch, runs: Runs, job: AllPairsJob):
    from ...kernels.cuda.all_pairs import score_passing_pairs

    q_list, s_lo, s_count = runs
    with backend.KERNEL_LOCK:
        qi, sj, score, q_end, s_end, seconds, abandoned = score_passing_pairs(
            qa.residues, qa.offsets, sb.residues, sb.offsets, q_list, s_lo, s_count,
            job.scoring.matrix, job.scoring.gap_open, job.scoring.gap_extend, job.bound.params,
            min_score=job.min_score, **({} if job.rows is None else {"rows": job.rows}))
    found = [x.astype(np.int64) for x in (qi, sj, score, q_end, s_end)]
    return found, seconds, abandoned


def _trace(qa, sb, found, job: AllPairsJob, device: str = "cpu") -> tuple[list, float]:
    """Rows of the passing pairs, traced back on the GPU (``device="gpu"``, all pairs of
    the block pair in one call, inside the band their scores allow) or on Numba's thread
    count (the CPU kernel releases the GIL); rows in ``found`` order; and the seconds of
    the GPU's traceback kernels (0.0 on the CPU)."""
    qi, sj, score, q_end, s_end = found
    n = len(qi)
    rows = [None] * n
    scoring, mode = job.scoring, job.mode

    def keep(k, r):
        if r["score"] != score[k]:  # the score and traceback kernels must agree to the bit
            raise AssertionError(f"kernel mismatch for {qa.names[qi[k]]} / {sb.names[sj[k]]}: "
                                 f"score pass {score[k]}, traceback {r['score']}")
        if job.bound.identity_passes(r["matches"], r["align_length"]):
            rows[k] = (qa.names[qi[k]], sb.names[sj[k]], int(qa.seq_id[qi[k]]), int(sb.seq_id[sj[k]]),
                       r["score"], r["identity"], r["matches"], r["align_length"], r["mismatches"],
                       r["gap_opens"], r["query_start"], r["query_end"], r["subject_start"],
                       r["subject_end"], int(qa.lengths[qi[k]]), int(sb.lengths[sj[k]]),
                       r["cigar"] if job.cigar else None)

    if device == "gpu" and n:
        from ...kernels.cuda import traceback as gpu_traceback

        if gpu_traceback.fits(scoring.matrix):
            # One view per sequence: the pairs of one query share its profile on the GPU.
            views = {i: qa.codes(i) for i in np.unique(qi).tolist()}
            queries = [views[i] for i in qi.tolist()]
            subjects = [sb.codes(j) for j in sj.tolist()]
            ends = np.stack([q_end, s_end], axis=1)
            timing = {}
            with backend.KERNEL_LOCK:
                scores, starts, paths = gpu_traceback.trace_paths(
                    queries, subjects, ends, scoring.matrix, scoring.gap_open,
                    scoring.gap_extend, mode=mode, known_scores=score, stats=timing)
            wrong = np.flatnonzero(scores != score)
            if len(wrong):  # the score and traceback kernels must agree to the bit
                k = wrong[0]
                raise AssertionError(f"kernel mismatch for {qa.names[qi[k]]} / {sb.names[sj[k]]}: "
                                     f"score pass {score[k]}, traceback {scores[k]}")
            # Most candidates fail the identity: count every path's columns at once, and
            # build rows (and CIGARs, if asked) of the paths that pass only.
            counts = path_counts(qa.residues, qa.offsets[qi], sb.residues, sb.offsets[sj],
                                 starts, paths, scoring.alphabet.unknown_code)
            matches, columns = counts[:, COUNT_MATCHES], counts[:, COUNT_COLUMNS]
            for k in np.flatnonzero(job.bound.identity_passes(matches, columns)):
                cigar = None
                if job.cigar:
                    cigar = describe(queries[k], subjects[k], scores[k], starts[k], ends[k],
                                     paths[k], scoring.alphabet.unknown_code)["cigar"]
                rows[k] = (qa.names[qi[k]], sb.names[sj[k]], int(qa.seq_id[qi[k]]),
                           int(sb.seq_id[sj[k]]), int(scores[k]),
                           int(matches[k]) / int(columns[k]), int(matches[k]), int(columns[k]),
                           int(counts[k, COUNT_MISMATCHES]), int(counts[k, COUNT_GAP_OPENS]),
                           int(starts[k, 0]), int(ends[k, 0]), int(starts[k, 1]),
                           int(ends[k, 1]), int(qa.lengths[qi[k]]), int(sb.lengths[sj[k]]),
                           cigar)
            kernels = timing["forward_seconds"] + timing["walk_seconds"]
            return [row for row in rows if row is not None], kernels

    def trace(k):
        q, s = qa.codes(int(qi[k])), sb.codes(int(sj[k]))
        keep(k, align_codes(q, s, scoring, mode, end=(int(q_end[k]), int(s_end[k])),
                            known_score=int(score[k])))

    threads = min(numba.get_num_threads(), n)
    if threads <= 1:
        for k in range(n):
            trace(k)
    else:
        order = sorted(range(n), key=lambda k: -(int(q_end[k]) * int(s_end[k])))
        with ThreadPoolExecutor(threads, thread_name_prefix="swdask-allpairs") as pool:
            for _ in pool.map(trace, order):
                pass
    return [row for row in rows if row is not None], 0.0


_COLUMNS = ("query", "subject", "query_id", "subject_id", "score", "identity", "matches",
            "align_length", "mismatches", "gap_opens", "query_start", "query_end",
            "subject_start", "subject_end", "query_length", "subject_length", "cigar")


def _table(rows) -> pa.Table:
    data = {name: [r[k] for r in rows] for k, name in enumerate(_COLUMNS)}
    table = pa.table({f.name: pa.array(data[f.name], type=f.type) for f in ALLPAIRS}, schema=ALLPAIRS)
    return check_table(table, ALLPAIRS, where="all-pairs table")


def block_pair(job: AllPairsJob, a: int, b: int) -> tuple[pa.Table, BlockStats]:
    """Block pair ``(a, b)``: its rows sorted by (query_id, subject_id) (schema ALLPAIRS),
    and its record."""
    qa = read_block(job.store_path, job.blocks[a])
    sb = qa if a == b else read_block(job.store_path, job.blocks[b])
    runs = pair_ranges(qa.lengths, sb.lengths, a == b, job.bound)
    pairs = int(runs[2].sum())
    sparse, filter_seconds = False, 0.0
    device = job.task_device()
    if job.prefilter is not None and job.prefilter.can_drop(qa.lengths, sb.lengths, runs):
        tick = time.perf_counter()
        codes = [_block_qgrams(job.store_path, job.blocks[x], job.prefilter)
                 for x in ((a,) if a == b else (a, b))]
        where = "cpu" if tunable("allpairs-filter-device") == "cpu" else device
        runs = job.prefilter.keep(codes[0], codes[-1], qa.lengths, sb.lengths, runs, where,
                                  same_block=a == b)
        sparse, filter_seconds = True, time.perf_counter() - tick
    q_list, s_lo, s_count = runs
    scored = int(s_count.sum())
    cells = pair_cells(qa.lengths, sb.lengths, q_list, s_lo, s_count) if scored else 0
    if scored == 0:
        found, seconds, abandoned = [np.zeros(0, np.int64)] * 5, 0.0, 0
    elif device == "gpu":
        found, seconds, abandoned = _score_gpu(qa, sb, runs, job)
    else:
        found, seconds, abandoned = _score_cpu(qa, sb, runs, job, sparse=sparse)
    tick = time.perf_counter()
    rows, trace_kernels = _trace(qa, sb, found, job, device)
    traced = time.perf_counter() - tick
    rows.sort(key=lambda r: (r[2], r[3]))
    return _table(rows), BlockStats(
        pairs_scored=scored, pairs_filtered=pairs - scored, cells=cells, abandoned=abandoned,
        candidates=len(found[0]), hits=len(rows), kernel_seconds=seconds,
        filter_seconds=filter_seconds, traceback_seconds=traced,
        traceback_kernel_seconds=trace_kernels, device=device)


@dataclass(frozen=True)
class BlockStats(TaskStats):
    """What block-pair tasks did (a manifest records one per block pair, as JSON)."""

    pairs_scored: int = 0
    pairs_filtered: int = 0
    cells: int = 0
    abandoned: int = 0
    candidates: int = 0
    hits: int = 0
    kernel_seconds: float = 0.0
    filter_seconds: float = 0.0
    traceback_seconds: float = 0.0
    traceback_kernel_seconds: float = 0.0
    device: str = stat("join")

    @property
    def pairs_planned(self) -> int:
        """The pairs the lengths allow: scored or dropped by the q-gram filter (what
        progress counts)."""
        return self.pairs_scored + self.pairs_filtered

    def to_json(self) -> dict:
        """The record as the manifest's JSON object."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> BlockStats:
        """A record from a manifest (one of an older run may lack later fields)."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class AllPairsStats:
    """What an all-pairs run did: small, immutable, picklable.

    ``pairs`` all unordered pairs of the set; of those the lengths allow,
    ``pairs_filtered`` were dropped by the q-gram pre-filter and ``pairs_scored`` scored
    (each exactly once), ``cells`` their ``m * n`` (whole, also for the pairs the GPU
    kernel abandoned early, ``pairs_abandoned``); ``candidates`` the pairs over the
    score bound (traced back); ``hits`` the rows written; seconds of the pre-filter
    (``filter_seconds``), of the score kernel (``kernel_seconds``), of the traceback
    (``traceback_seconds``: kernels, paths described, rows built) and of its GPU kernels
    alone (``traceback_kernel_seconds``, 0 on the CPU), each summed over tasks.
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
    pairs_filtered: int = 0
    filter_seconds: float = 0.0
    traceback_kernel_seconds: float = 0.0

    @property
    def kernel_gcups(self) -> float:
        """Cells of the scored pairs per kernel second, in billions."""
        return self.cells / self.kernel_seconds / 1e9 if self.kernel_seconds else 0.0


def allpairs_stats(job: AllPairsJob, blocks: Iterable[BlockStats]) -> AllPairsStats:
    """The :class:`AllPairsStats` of a run from its block pairs' records."""
    total = sum(blocks, BlockStats())
    n = job.n_sequences
    return AllPairsStats(
        n_sequences=n, pairs=n * (n - 1) // 2, pairs_scored=total.pairs_scored,
        cells=total.cells, candidates=total.candidates, hits=total.hits,
        kernel_seconds=total.kernel_seconds, traceback_seconds=total.traceback_seconds,
        block_pairs=len(job.block_pairs), block_pairs_skipped=job.skipped,
        device=total.device or job.device, pairs_abandoned=total.abandoned,
        pairs_filtered=total.pairs_filtered, filter_seconds=total.filter_seconds,
        traceback_kernel_seconds=total.traceback_kernel_seconds)


def block_frame(job: AllPairsJob, a: int, b: int) -> tuple[pd.DataFrame, BlockStats]:
    """The rows of block pair ``(a, b)`` as pandas, and its record (a lazy frame's task)."""
    table, stats = block_pair(job, a, b)
    return to_pandas(table), stats
