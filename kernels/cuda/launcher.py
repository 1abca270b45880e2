"""Host side of the GPU score pass: subjects on the device, queries in batches, and only
the candidate hits back.

One :class:`DeviceSubjects` holds a partition's subjects on the GPU.  Its
:meth:`~DeviceSubjects.top_many` scores a batch of queries against them and returns,
per query, every subject that can be among its ``max_hits`` best:

1. Queries are sorted by length and scored two at a time by the 16-bit kernel
   (:mod:`~swdask.kernels.cuda.inter_task_dpx`, Hopper DPX; its twin in the simulator),
   or one at a time by the 32-bit kernel (:mod:`~swdask.kernels.cuda.inter_task`) on GPUs
   without DPX and for scorings outside the 16-bit bounds.  All launches of a batch go
   out back to back on the instance's own stream; the score tables stay on the device,
   bounded by :data:`SCORE_TABLE_BYTES` per batch.
2. Pairs whose 16-bit score may have wrapped come back as ``-1``; they are re-scored
   exactly by the 32-bit kernel (their cells are counted in
   :attr:`KernelStats.cells_32bit`).
3. A score histogram per query gives the cut that keeps ``max_hits`` subjects (ties
   included); one kernel compacts the survivors, which are the only rows copied back.

The host waits on the device twice per batch (histograms, survivors), not per query.
Each instance has its own CUDA stream and uploads from pinned memory, so two threads (two
Dask tasks on one GPU worker) overlap one partition's copies with another's kernels.
"""
from __future__ import annotations

import contextlib
import math
import time
import warnings
from dataclasses import dataclass

import numpy as np
from numba import config, cuda

from . import inter_task, inter_task_dpx
from .inter_task import has_dpx, launch_plan, threads_per_block

#: Bound on the score tables (scores and both ends, int32) of one batch of queries on the
#: device.
SCORE_TABLE_BYTES = 512 * 2**20
#: Score histogram bins for choosing a query's cut on the device; scores at or above the
#: last bin share it (the cut then keeps all of them).
HIST_BINS = 4096


@dataclass(frozen=True)
class KernelStats:
    """Work and kernel time of a batch (cells = query length x subject length)."""

    seconds: float  #: kernel time (CUDA events), score kernels only
    cells: int
    cells_32bit: int = 0  #: cells scored by the 32-bit kernel (its path, or re-runs)
    rescored: int = 0  #: (query, subject) pairs re-scored in 32 bits after a 16-bit overflow

    def __add__(self, other):
        return KernelStats(self.seconds + other.seconds, self.cells + other.cells,
                           self.cells_32bit + other.cells_32bit, self.rescored + other.rescored)


@contextlib.contextmanager
def _quiet():
    """Small launches are legitimate (a small database); silence Numba's occupancy note."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Grid size .* under-utilization")
        yield


class _Ordered:
    """Subjects to score, in launch order, with a launch plan per group size."""

    def __init__(self, positions, lengths, subjects, stream):
        self.positions = positions  # indices into the owner's subjects
        self.lengths = lengths
        self.order = cuda.to_device(subjects, stream=stream)
        self.plans = {}
        self.stream = stream

    def plan(self, group):
        if group not in self.plans:
            uniform = threads_per_block() if config.ENABLE_CUDASIM else 32
            warp_len, warp_base, slots = launch_plan(self.lengths, group, uniform)
            self.plans[group] = (cuda.to_device(warp_len, stream=self.stream),
                                 cuda.to_device(warp_base, stream=self.stream), slots,
                                 len(warp_len))
        return self.plans[group]


class DeviceSubjects:
    """A set of subjects on the GPU, scored against batches of queries.

    Parameters
    ----------
    s_res, s_off : numpy.ndarray
        Subject residues (uint8, concatenated) and offsets (int64, n + 1).
    subjects : numpy.ndarray of int64, optional
        Subjects to score, launched in this order; result columns follow it.  Default:
        all of them, launched longest first (neighbours of similar length keep a warp's
        lanes busy for the same number of steps, and the longest-first order leaves no
        long subject running alone at the end: 4-9% faster on an H100 than the store's
        ascending order), with result columns in subject order.
    stream : numba.cuda.cudadrv.driver.Stream, optional
        Default: a new stream for this instance.
    """

    def __init__(self, s_res, s_off, subjects=None, *, stream=None):
        self.stream = stream if stream is not None else cuda.stream()
        s_off = np.ascontiguousarray(s_off, dtype=np.int64)
        #: For the default order: result column of each launch position (else None).
        self._columns = None
        if subjects is None:
            lengths = np.diff(s_off)
            subjects = np.argsort(-lengths, kind="stable").astype(np.int64)
            self._columns = subjects
        self.subjects = np.ascontiguousarray(subjects, dtype=np.int64)
        self.lengths = s_off[self.subjects + 1] - s_off[self.subjects]
        self.residues = int(self.lengths.sum())
        self._res = cuda.to_device(_pinned(s_res, np.uint8), stream=self.stream)
        self._off = cuda.to_device(_pinned(s_off, np.int64), stream=self.stream)
        self._all = _Ordered(np.arange(len(self.subjects)), self.lengths, self.subjects,
                             self.stream)
        self._boundary = cuda.device_array(2, np.int32, stream=self.stream)

    def __len__(self):
        return len(self.subjects)

    # -- one query, 32-bit (the reference launch, and the benchmark's variants) ----------

    def score(self, query, matrix, gap_open, gap_extend, **options):
        """Local scores and end cells of one ``query`` by the 32-bit kernel.

        Options: ``rows`` and ``group`` default to
        :func:`~swdask.kernels.cuda.inter_task.choose_shape`; ``shared`` stages the
        query profile in shared memory (default True); ``dpx`` uses Hopper's 32-bit
        fused max instructions (default: on compute capability 9.0 and newer).

        Returns
        -------
        scores, query_end, subject_end : numpy.ndarray of int32
            In the order of ``subjects`` (of the subjects when it was not given); ends
            exclusive, by the reference's tie rule.
        seconds : float
            Kernel time (CUDA events), without the copies of results.
        """
        n = len(self.subjects)
        outs = [cuda.device_array(n, np.int32, stream=self.stream) for _ in range(3)]
        timer = _Timer(self.stream)
        self._launch32(np.ascontiguousarray(query, np.uint8), np.asarray(matrix), gap_open,
                       gap_extend, self._all, outs, **options)
        seconds = timer.stop()
        results = [o.copy_to_host(stream=self.stream) for o in outs]
        if self._columns is not None:
            for launched in results:
                launched[self._columns] = launched.copy()
        return (*results, seconds)

    def _launch32(self, query, matrix, gap_open, gap_extend, subset, outs, *, rows=None,
                  group=None, shared=True, dpx=None):
        m = len(query)
        if dpx is None:
            dpx = has_dpx()
        if rows is None:
            rows, chosen = inter_task.choose_shape(m)
            group = group or chosen
        group = group or inter_task.choose_group(m, rows)
        passes = max(1, math.ceil(m / (group * rows)))
        profile = cuda.to_device(inter_task.query_profile(query, matrix, passes * group * rows),
                                 stream=self.stream)
        warp_len, warp_base, slots, n_warps = subset.plan(group)
        boundary = self._boundary_for(2 * slots if passes > 1 else 2)
        threads = threads_per_block()
        kernel = inter_task.get_kernel(rows, group, shared=shared, dpx=dpx,
                                       alphabet=matrix.shape[0] + 1)
        if len(subset.lengths):
            with _quiet():
                kernel[max(1, math.ceil(n_warps * 32 / threads)), threads, self.stream](
                    profile, passes, self._res, self._off, subset.order, warp_len, warp_base,
                    np.int64(matrix.shape[0]), np.int32(gap_open + gap_extend),
                    np.int32(gap_extend), boundary, *outs)

    def _boundary_for(self, size):
        # Launches on one stream run in order, so one buffer serves them all.
        if self._boundary.shape[0] < size:
            self._boundary = cuda.device_array(size, np.int32, stream=self.stream)
        return self._boundary

    # -- batches of queries -------------------------------------------------------------

    def score_many(self, queries, matrix, gap_open, gap_extend, *, packed=None):
        """Scores and end cells of every query against every subject, copied back whole
        (for tests and small sets; a search uses :meth:`top_many`).

        Returns
        -------
        scores, query_end, subject_end : numpy.ndarray of int32, (queries, subjects)
        stats : KernelStats
        """
        n = len(self.subjects)
        shape = (len(queries), n)
        outs = [np.zeros(shape, np.int32) for _ in range(3)]
        stats = KernelStats(0.0, 0)
        for rows, tables, batch_stats in self._batches(queries, matrix, gap_open, gap_extend,
                                                       packed):
            for out, table in zip(outs, tables):
                if self._columns is None:
                    out[rows] = table.copy_to_host(stream=self.stream)
                else:
                    out[np.ix_(rows, self._columns)] = table.copy_to_host(stream=self.stream)
            stats += batch_stats
        return (*outs, stats)

    def top_many(self, queries, matrix, gap_open, gap_extend, max_hits, min_score=None, *,
                 packed=None):
        """The subjects that can be among each query's ``max_hits`` best, chosen on the GPU.

        A histogram of each query's scores (:data:`HIST_BINS` bins, the last one
        open-ended) gives the lowest score ``t`` that keeps at least ``max_hits`` subjects
        (or ``min_score`` when fewer reach it); one kernel compacts the subjects scoring
        ``t`` or more.  Only the histograms and those subjects cross to the host: every
        tie at the cut comes back, so the host ranks them exactly as the CPU search does.

        Parameters
        ----------
        queries : list of numpy.ndarray of uint8
        max_hits : int
        min_score : int, optional
            Default 1 (a local score of 0 is no alignment).
        packed : bool, optional
            Use the 16-bit kernel (default: on GPUs with DPX and in the simulator, when
            the scoring is within its bounds).

        Returns
        -------
        candidates : list of (columns, scores, query_end, subject_end)
            Per query: result columns (int64, no particular order: subject indices, or
            positions in ``subjects`` when it was given) and their int32 scores and ends.
        stats : KernelStats
        """
        floor = 1 if min_score is None else max(int(min_score), 0)
        candidates = [None] * len(queries)
        stats = KernelStats(0.0, 0)
        n = len(self.subjects)
        for rows, (scores, q_end, s_end), batch_stats in self._batches(
                queries, matrix, gap_open, gap_extend, packed):
            stats += batch_stats
            k = len(rows)
            if n == 0:
                for row in rows:
                    empty = np.zeros(0, np.int32)
                    candidates[row] = (np.zeros(0, np.int64), empty, empty, empty)
                continue
            hist = cuda.to_device(np.zeros((k, HIST_BINS), np.int32), stream=self.stream)
            threads = threads_per_block()
            blocks = max(1, math.ceil(k * n / threads))
            with _quiet():
                _histogram[blocks, threads, self.stream](scores, hist)
            counts = hist.copy_to_host(stream=self.stream)
            self.stream.synchronize()
            cuts = np.array([cut_score(c, max_hits, floor) for c in counts], np.int32)
            # Scores past the last bin share it: count them all, the kernel checks exactly.
            kept = np.array([c[min(t, HIST_BINS - 1):].sum() for c, t in zip(counts, cuts)],
                            np.int64)
            starts = np.concatenate([[0], np.cumsum(kept)]).astype(np.int64)
            total = max(int(starts[-1]), 1)
            found = cuda.to_device(np.zeros(k, np.int64), stream=self.stream)
            picked = [cuda.device_array(total, t, stream=self.stream)
                      for t in (np.int64, np.int32, np.int32, np.int32)]
            with _quiet():
                _select[blocks, threads, self.stream](scores, q_end, s_end,
                                                      cuda.to_device(cuts, stream=self.stream),
                                                      cuda.to_device(starts, stream=self.stream),
                                                      found, *picked)
            host = [p.copy_to_host(stream=self.stream) for p in picked]
            self.stream.synchronize()
            if self._columns is not None:
                host[0] = self._columns[host[0]]
            for j, row in enumerate(rows):
                part = slice(starts[j], starts[j + 1])
                candidates[row] = tuple(h[part] for h in host)
        return candidates, stats

    def _batches(self, queries, matrix, gap_open, gap_extend, packed):
        """Score the queries in batches bounded by :data:`SCORE_TABLE_BYTES`; yield each
        batch's query indices and its device score tables ``(scores, query_end,
        subject_end)`` (rows in the order of the indices) with its stats."""
        matrix = np.asarray(matrix)
        queries = [np.ascontiguousarray(q, np.uint8) for q in queries]
        if packed is None:
            packed = ((has_dpx() or bool(config.ENABLE_CUDASIM))
                      and inter_task_dpx.fits_16bit(matrix, gap_open, gap_extend))
        # Longest first, so paired queries have similar lengths.
        order = np.argsort([-len(q) for q in queries], kind="stable")
        per_batch = max(2, SCORE_TABLE_BYTES // (12 * max(len(self.subjects), 1)))
        per_batch -= per_batch % 2
        for b0 in range(0, len(order), per_batch):
            rows = order[b0:b0 + per_batch]
            yield (rows, *self._score_batch([queries[r] for r in rows], matrix, gap_open,
                                            gap_extend, packed))

    def _score_batch(self, queries, matrix, gap_open, gap_extend, packed):
        k = len(queries)
        n = len(self.subjects)
        height = k + (k % 2 if packed else 0)
        tables = [cuda.device_array((height, n), np.int32, stream=self.stream) for _ in range(3)]
        overflows = cuda.to_device(np.zeros(height, np.int32), stream=self.stream)
        residues = self.residues
        cells = sum(len(q) for q in queries) * residues
        timer = _Timer(self.stream)
        if packed:
            self._launch16(queries, matrix, gap_open, gap_extend, tables, overflows)
            cells_32bit = 0
        else:
            for q, query in enumerate(queries):
                self._launch32(query, matrix, gap_open, gap_extend, self._all,
                               [t[q] for t in tables])
            cells_32bit = cells
        seconds = timer.stop()
        rescored = 0
        if packed and n:
            wrapped = overflows.copy_to_host(stream=self.stream)
            self.stream.synchronize()
            for q in np.flatnonzero(wrapped[:k]):
                positions = np.flatnonzero(tables[0][q].copy_to_host(stream=self.stream) < 0)
                rescore = _Ordered(positions, self.lengths[positions], self.subjects[positions],
                                   self.stream)
                outs = [cuda.device_array(len(positions), np.int32, stream=self.stream)
                        for _ in range(3)]
                timer = _Timer(self.stream)
                self._launch32(queries[q], matrix, gap_open, gap_extend, rescore, outs)
                seconds += timer.stop()
                where = cuda.to_device(positions.astype(np.int64), stream=self.stream)
                with _quiet():
                    _scatter[max(1, math.ceil(len(positions) / 32)), 32, self.stream](
                        where, *outs, *(t[q] for t in tables))
                cells_32bit += len(queries[q]) * int(rescore.lengths.sum())
                rescored += len(positions)
        return [t[:k] for t in tables], KernelStats(seconds, cells, cells_32bit, rescored)

    def _launch16(self, queries, matrix, gap_open, gap_extend, tables, overflows):
        """Launch the 16-bit kernel on consecutive pairs of ``queries``."""
        alphabet = matrix.shape[0]
        threads = threads_per_block()
        shapes, profiles = [], []
        for p in range(0, len(queries), 2):
            qa = queries[p]
            qb = queries[p + 1] if p + 1 < len(queries) else np.zeros(0, np.uint8)
            rows, group = inter_task_dpx.choose_shape(max(len(qa), len(qb), 1), alphabet)
            passes = max(1, math.ceil(max(len(qa), len(qb)) / (rows * group)))
            profiles.append(inter_task_dpx.pair_profile(qa, qb, matrix, passes * rows * group))
            shapes.append((rows, group, passes))
        # One upload for the whole batch's profiles.
        flat = cuda.to_device(_pinned(np.concatenate([p.ravel() for p in profiles]), np.int32),
                              stream=self.stream)
        limit = np.int32(inter_task_dpx.overflow_limit(matrix))
        neg_oe = inter_task_dpx.packed_constant(-(gap_open + gap_extend))
        neg_e = inter_task_dpx.packed_constant(-gap_extend)
        at = 0
        for p, ((rows, group, passes), profile) in enumerate(zip(shapes, profiles)):
            device_profile = flat[at:at + profile.size].reshape(profile.shape)
            at += profile.size
            warp_len, warp_base, slots, n_warps = self._all.plan(group)
            boundary = self._boundary_for(2 * slots if passes > 1 else 2)
            kernel = inter_task_dpx.get_kernel(rows, group, alphabet, threads)
            pair = slice(2 * p, 2 * p + 2)
            if len(self.subjects):
                with _quiet():
                    kernel[max(1, math.ceil(n_warps * 32 / threads)), threads, self.stream](
                        device_profile, passes, self._res, self._off, self._all.order, warp_len,
                        warp_base, np.int64(0), neg_oe, neg_e, limit, boundary,
                        *(t[pair] for t in tables), overflows[pair])


def _pinned(array, dtype):
    """A page-locked copy of ``array`` (asynchronous uploads need page-locked memory)."""
    array = np.ascontiguousarray(array, dtype=dtype)
    if config.ENABLE_CUDASIM:
        return array
    pinned = cuda.pinned_array(array.shape, dtype=dtype)
    pinned[...] = array
    return pinned


class _Timer:
    """Kernel time on a stream: CUDA events on a GPU, the host clock in the simulator
    (which has no event timing)."""

    def __init__(self, stream):
        self.stream = stream
        self.tick = time.perf_counter()
        if not config.ENABLE_CUDASIM:
            self.start, self.end = cuda.event(), cuda.event()
            self.start.record(stream)

    def stop(self) -> float:
        if config.ENABLE_CUDASIM:
            return time.perf_counter() - self.tick
        self.end.record(self.stream)
        self.end.synchronize()
        return self.start.elapsed_time(self.end) / 1e3


@cuda.jit
def _histogram(scores, hist):
    """``hist[q, min(score, HIST_BINS - 1)] += 1`` over a (queries, subjects) table."""
    i = cuda.grid(1)
    n = scores.shape[1]
    if i < scores.shape[0] * n:
        q = i // n
        cuda.atomic.add(hist, (q, min(scores[q, i % n], HIST_BINS - 1)), 1)


@cuda.jit
def _select(scores, q_end, s_end, cuts, starts, found, columns, out_score, out_qend, out_send):
    """Append each subject scoring at least its query's cut to that query's slice
    (``starts[q]`` on); order within a slice is not kept."""
    i = cuda.grid(1)
    n = scores.shape[1]
    if i < scores.shape[0] * n:
        q = i // n
        c = i % n
        if scores[q, c] >= cuts[q]:
            slot = starts[q] + cuda.atomic.add(found, q, 1)
            if slot < starts[q + 1]:
                columns[slot] = c
                out_score[slot] = scores[q, c]
                out_qend[slot] = q_end[q, c]
                out_send[slot] = s_end[q, c]


@cuda.jit
def _scatter(where, score, qend, send, out_score, out_qend, out_send):
    """Write re-scored pairs back into a query's row of the score tables."""
    i = cuda.grid(1)
    if i < where.shape[0]:
        out_score[where[i]] = score[i]
        out_qend[where[i]] = qend[i]
        out_send[where[i]] = send[i]


def cut_score(hist, max_hits, floor):
    """The lowest score that keeps at least ``max_hits`` subjects of a score histogram,
    never below ``floor``; ``floor`` itself when fewer than ``max_hits`` reach it.

    Examples
    --------
    >>> cut_score(np.array([5, 0, 3, 2, 1]), 4, 1)
    2
    >>> cut_score(np.array([5, 0, 3, 2, 1]), 10, 1)
    1
    """
    from_top = np.cumsum(np.asarray(hist)[::-1])
    enough = np.flatnonzero(from_top >= max_hits)
    if enough.size == 0:
        return int(floor)
    return max(int(len(hist) - 1 - enough[0]), int(floor))


def score_pairs(query, s_res, s_off, subjects, matrix, gap_open, gap_extend, **options):
    """Local scores and end cells of one query against ``subjects`` by the 32-bit kernel
    (a one-off :class:`DeviceSubjects`); returns ``scores, query_end, subject_end``."""
    return DeviceSubjects(s_res, s_off, subjects).score(query, matrix, gap_open, gap_extend,
                                                        **options)[:3]
