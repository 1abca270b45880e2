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
   :attr:`KernelStats.cells_32bit`).  With the score-only scan kernel
   (:mod:`~swdask.kernels.cuda.inter_task_dpx_scan`, ``kernel="scan"``, local searches),
   the end cells of the selected candidates come from the block-per-pair kernel run on
   them only (the *end pass*, :meth:`DeviceSubjects._end_cells`), which must give the
   scan's score again.
3. A score histogram per query gives the cut that keeps ``max_hits`` subjects (ties
   included); one kernel compacts the survivors, which are the only rows copied back.
   Global and semiglobal scores (``mode``; negative and unbounded below) are binned over
   each query's own range of scores (:func:`range_cut`).

Subjects of at least :data:`~swdask.kernels.cuda.intra_task.INTRA_THRESHOLD` residues
go to the block-per-pair kernel (:mod:`~swdask.kernels.cuda.intra_task`, 32-bit) instead,
launched first in the instance's order and on a second stream, so their blocks run beside
the inter-task kernel of the same batch; their scores land in the same table
(:attr:`KernelStats.pairs_intra` counts them).

Overlap: batches are pipelined.  Batch ``b``'s profiles are uploaded from pinned memory on
a copy stream, its score kernels and histogram run on the compute stream, and its
histogram is copied back into a pinned buffer asynchronously; the host then finishes batch
``b - 1`` (cuts, the selection kernel and the copy of the survivors, on a third stream)
while the GPU computes batch ``b``.  Two sets of score tables alternate, each bounded by
half of :data:`SCORE_TABLE_BYTES`, so device memory stays within the bound.  The host
waits on the device once per batch for the histogram (already computed while the next
batch runs) and once for the survivors, never per query.  Each instance has its own
streams, so two threads (two Dask tasks on one GPU worker) also overlap.
"""
from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import driver, inter_task, inter_task_dpx, inter_task_dpx_scan, intra_task
from .compile import (
    build,
    device_api,
    get_kernel,
    hand_written,
    is_cached,
    load_ahead,
    simulated,
)
from .inter_task import has_dpx, launch_plan, threads_per_block

if TYPE_CHECKING:
    import numpy.typing as npt

    from .driver import Stream

    #: A query's candidates: result columns (int64) and their int32 scores and ends.
    Candidates = tuple[npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.int32],
                       npt.NDArray[np.int32]]

#: Bound on the score tables (scores and both ends, int32) on the device; two batches are
#: in flight (one being scored, one being selected), each within half of it.
SCORE_TABLE_BYTES = 512 * 2**20
#: Queries per batch at most: small batches let a call of a few dozen queries pipeline
#: (the selection of one batch overlaps the kernels of the next) at the cost of one
#: histogram and one selection launch per batch.
BATCH_QUERIES = 8
#: Score histogram bins for choosing a query's cut on the device; scores at or above the
#: last bin share it (the cut then keeps all of them).
HIST_BINS = 4096
#: Blocks of the 16-bit kernel one multiprocessor runs at once (157 registers a thread,
#: 128 threads a block: three blocks, 18.75% occupancy; Nsight Compute on an H100).
#: A launch of fewer blocks than this times the multiprocessors leaves the GPU part idle.
BLOCKS_PER_SM = 3
#: The 16-bit kernel of a local search by the name ``kernel`` takes
#: (:meth:`DeviceSubjects.top_many`): ``"ends"`` keeps each column's maximum and the end
#: cell of every pair (:mod:`~swdask.kernels.cuda.inter_task_dpx`); ``"scan"`` computes
#: scores only (:mod:`~swdask.kernels.cuda.inter_task_dpx_scan`), and the end cells of the
#: candidates come from the 32-bit end pass.  Whichever is named, a global search runs the
#: scan kernel's global variant (its end cell is fixed: no end pass), a semiglobal one the
#: kernel with end cells, and the 32-bit path its own kernel (:func:`packed_kernel`).
PACKED_FAMILIES = {"ends": "inter_task_dpx", "scan": inter_task_dpx_scan.FAMILY}
#: The default of ``kernel``: ``"scan"``, with its end pass 1.8 x as fast as ``"ends"`` on
#: the 20 CUDASW++ queries (1.1-1.9 x per query pair; one H200, docs/search.md).  The
#: environment variable ``SWDASK_SEARCH_KERNEL`` names another for a whole process (the
#: command line, ``cli_wall.py`` and ``ncu_search.sh`` compare the two through it).
SEARCH_KERNEL = os.environ.get("SWDASK_SEARCH_KERNEL", "scan")
#: Streams at most that the query pairs of a batch spread over when one launch cannot fill
#: the GPU (few or few long subjects: a store's last partition of the longest ones, a
#: small database), so that their kernels run side by side instead of one after another.
LAUNCH_LANES = 4


@dataclass(frozen=True)
class KernelStats:
    """Work and kernel time of a batch (cells = query length x subject length)."""

    seconds: float  #: kernel time (CUDA events), score kernels only
    cells: int
    cells_32bit: int = 0  #: cells scored by the 32-bit kernel (its path, or re-runs)
    rescored: int = 0  #: (query, subject) pairs re-scored in 32 bits after a 16-bit overflow
    pairs_inter: int = 0  #: (query, subject) pairs scored by the inter-task kernels
    pairs_intra: int = 0  #: (query, subject) pairs scored by the intra-task kernel
    cells_intra: int = 0  #: cells scored by the intra-task kernel (32-bit, counted there too)
    #: cells of the scan kernel's end pass (32-bit, on the candidates; not in ``cells``)
    cells_ends: int = 0
    seconds_ends: float = 0.0  #: kernel time of the end pass (counted in ``seconds`` too)

    def __add__(self, other):
        return KernelStats(self.seconds + other.seconds, self.cells + other.cells,
                           self.cells_32bit + other.cells_32bit, self.rescored + other.rescored,
                           self.pairs_inter + other.pairs_inter,
                           self.pairs_intra + other.pairs_intra,
                           self.cells_intra + other.cells_intra,
                           self.cells_ends + other.cells_ends,
                           self.seconds_ends + other.seconds_ends)


def scan_kernel(kernel: str | None, mode: str = "local") -> bool:
    """Whether a search names (or defaults to, :data:`SEARCH_KERNEL`) the scan kernel
    and can use it (local mode).

    Raises
    ------
    ValueError
        If ``kernel`` is not one of :data:`PACKED_FAMILIES`.

    Examples
    --------
    >>> scan_kernel("scan"), scan_kernel("scan", "global"), scan_kernel("ends")
    (True, False, False)
    """
    named = "" if kernel is not None else " (SWDASK_SEARCH_KERNEL)"
    kernel = SEARCH_KERNEL if kernel is None else kernel
    if kernel not in PACKED_FAMILIES:
        raise ValueError(f"unknown search kernel {kernel!r}{named}; expected one of "
                         f"{', '.join(PACKED_FAMILIES)}")
    return kernel == "scan" and mode == "local"


def packed_kernel(scan: bool, mode: str = "local") -> tuple[Any, str]:
    """The 16-bit kernel's module (its shape chooser) and family for a search in ``mode``
    (``scan``: a local search on the scan kernel, :func:`scan_kernel`): the scan kernel
    for such a search and for every global one (its global variant: 0.93 x the local scan
    kernel's GCUPS, where the global kernel with end cells ran at 0.76 x; docs/benchmarks.md),
    else the kernel with end cells."""
    if scan or mode == "global":
        return inter_task_dpx_scan, PACKED_FAMILIES["scan"]
    return inter_task_dpx, PACKED_FAMILIES["ends"]


class _Ordered:
    """Subjects to score, in launch order, with a launch plan per group size."""

    def __init__(self, positions, lengths, subjects, stream):
        self.positions = positions  # indices into the owner's subjects
        self.lengths = lengths
        self.order = device_api().to_device(subjects, stream=stream)
        self.plans = {}
        self.stream = stream

    def plan(self, group):
        if group not in self.plans:
            uniform = threads_per_block() if simulated() else 32
            warp_len, warp_base, slots = launch_plan(self.lengths, group, uniform)
            self.plans[group] = (device_api().to_device(warp_len, stream=self.stream),
                                 device_api().to_device(warp_base, stream=self.stream), slots,
                                 len(warp_len))
        return self.plans[group]


class DeviceSubjects:
    """A set of subjects on the GPU, scored against batches of queries.

    Parameters
    ----------
    s_res, s_off : numpy.ndarray
        Subject residues (uint8, concatenated) and offsets (int64, n + 1).
    subjects : numpy.ndarray of int64, optional
        Subjects to score; result columns follow this order.  Default: all of them, with
        result columns in subject order.  Launches go longest first by default (neighbours
        of similar length keep a warp's lanes busy for the same number of steps, and the
        longest-first order leaves no long subject running alone at the end: 4-9% faster
        on an H100 than the store's ascending order), else in the given order, except that
        subjects routed to the intra-task kernel always launch first.
    stream : swdask.kernels.cuda.driver.Stream, optional
        (Numba's stream in the simulator.)
        The compute stream.  Default: a new stream for this instance.
    intra_threshold : int, optional
        Subjects of at least this many residues are scored by the block-per-pair kernel
        (:mod:`~swdask.kernels.cuda.intra_task`).  Default
        :data:`~swdask.kernels.cuda.intra_task.INTRA_THRESHOLD`.

    Attributes
    ----------
    subjects : numpy.ndarray of int64
        The subjects in launch order: the intra-task ones (:attr:`n_intra` of them) first.
    """

    def __init__(self, s_res: np.ndarray, s_off: np.ndarray,
                 subjects: npt.NDArray[np.int64] | None = None, *, stream: Stream | None = None,
                 intra_threshold: int | None = None) -> None:
        self.stream = stream if stream is not None else device_api().stream()
        #: Streams of the pipeline: uploads, the intra-task kernel, the selection.
        self._copy = device_api().stream()
        self._aux = device_api().stream()
        self._post = device_api().stream()
        s_off = np.ascontiguousarray(s_off, dtype=np.int64)
        self.intra_threshold = int(intra_task.INTRA_THRESHOLD if intra_threshold is None
                                   else intra_threshold)
        #: Result column of each launch position (None: the identity).
        self._columns = None
        if subjects is None:
            lengths = np.diff(s_off)
            subjects = np.argsort(-lengths, kind="stable").astype(np.int64)
            self._columns = subjects
        subjects = np.ascontiguousarray(subjects, dtype=np.int64)
        lengths = s_off[subjects + 1] - s_off[subjects]
        long = lengths >= self.intra_threshold
        if long.any() and not long[:int(long.sum())].all():
            # Long subjects first, so each kernel writes a contiguous range of columns.
            moved = np.concatenate([np.flatnonzero(long), np.flatnonzero(~long)])
            subjects = subjects[moved]
            self._columns = moved if self._columns is None else self._columns[moved]
        self.subjects = subjects
        self.lengths = s_off[self.subjects + 1] - s_off[self.subjects]
        #: Subjects scored by the intra-task kernel: launch positions [0, n_intra).
        self.n_intra = int(long.sum())
        self.residues = int(self.lengths.sum())
        self.residues_intra = int(self.lengths[:self.n_intra].sum())
        # Straight from pageable memory: the constructor waits for its uploads anyway, and
        # a page-locked copy of each cost 8.6 ms a partition (cuMemHostAlloc and the copy;
        # 0.12 s of a warm 1.6 s in-process search of 7 partitions, cProfile, H200).
        self._res = device_api().to_device(np.ascontiguousarray(s_res, np.uint8),
                                           stream=self.stream)
        self._off = device_api().to_device(s_off, stream=self.stream)
        self._all = _Ordered(np.arange(len(self.subjects)), self.lengths, self.subjects,
                             self.stream)
        short = np.arange(self.n_intra, len(self.subjects))
        self._short = (self._all if self.n_intra == 0 else
                       _Ordered(short, self.lengths[short], self.subjects[short], self.stream))
        #: Launch streams (the compute stream first, see :meth:`_lanes`) and the boundary
        #: row of each: launches on one stream run in order, so one buffer serves them all.
        self._lane_streams = [self.stream]
        self._boundaries = [device_api().device_array(2, np.int32, stream=self.stream)]
        #: Page-locked host buffers by (table set, use), reused: allocating or freeing
        #: page-locked memory can stall the device, which the pipeline must not.
        self._pool = {}
        if self.n_intra:
            b_off, size = intra_task.boundary_offsets(self.lengths[:self.n_intra])
            self._long_order = device_api().to_device(self.subjects[:self.n_intra],
                                                   stream=self.stream)
            self._long_boff = device_api().to_device(b_off, stream=self.stream)
            self._long_boundary = device_api().device_array(size, np.int32, stream=self.stream)
        self.stream.synchronize()  # the other streams use these uploads

    def __len__(self):
        return len(self.subjects)

    # -- one query, 32-bit (the reference launch, and the benchmark's variants) ----------

    def score(
        self, query: np.ndarray, matrix: npt.ArrayLike, gap_open: int, gap_extend: int,
        *, mode: str = "local", **options: Any,
    ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32], float]:
        """Scores and end cells of one ``query`` by the 32-bit kernels, in ``mode``
        (``"local"``, ``"global"`` or ``"semiglobal"``; default local).

        Options (for the inter-task kernel): ``rows`` and ``group`` default to
        :func:`~swdask.kernels.cuda.inter_task.choose_shape`; ``shared`` stages the
        query profile in shared memory (default True); ``dpx`` uses Hopper's 32-bit
        fused max instructions (default: on compute capability 9.0 and newer).  Subjects
        of at least ``intra_threshold`` residues go to the intra-task kernel.

        Returns
        -------
        scores, query_end, subject_end : numpy.ndarray of int32
            In the order of ``subjects`` (of the subjects when it was not given); ends
            exclusive, by the reference's tie rule.
        seconds : float
            Kernel time (CUDA events), without the copies of results.
        """
        n = len(self.subjects)
        k = self.n_intra
        query = np.ascontiguousarray(query, np.uint8)
        matrix = np.asarray(matrix)
        outs = [device_api().device_array(n, np.int32, stream=self.stream) for _ in range(3)]
        timer = _Timer(self.stream)
        if k:
            self._launch_intra(query, matrix, gap_open, gap_extend, [o[:k] for o in outs],
                               self.stream, mode=mode)
        self._launch32(query, matrix, gap_open, gap_extend, self._short,
                       [o[k:] for o in outs], mode=mode, **options)
        seconds = timer.stop()
        results = [o.copy_to_host(stream=self.stream) for o in outs]
        if self._columns is not None:
            for launched in results:
                launched[self._columns] = launched.copy()
        return (*results, seconds)

    def _launch32(self, query, matrix, gap_open, gap_extend, subset, outs, *, mode="local",
                  rows=None, group=None, shared=True, dpx=None):
        """Launch the 32-bit kernel on the ``subset``'s subjects, on the compute stream."""
        m = len(query)
        if dpx is None:
            dpx = has_dpx()
        if rows is None:
            rows, chosen = inter_task.choose_shape(m)
            group = group or chosen
        group = group or inter_task.choose_group(m, rows)
        # The shared profile is int16: a matrix with larger entries reads it through L1.
        shared = shared and int(np.abs(matrix).max(initial=0)) <= np.iinfo(np.int16).max
        passes = max(1, math.ceil(m / (group * rows)))
        profile = device_api().to_device(
            inter_task.query_profile(query, matrix, passes * group * rows, mode, gap_extend),
            stream=self.stream)
        warp_len, warp_base, slots, n_warps = subset.plan(group)
        boundary = self._boundary_for(2 * slots if passes > 1 else 2)
        threads = threads_per_block()
        kernel = get_kernel("inter_task", rows=rows, group=group, shared=shared, dpx=dpx,
                            alphabet=matrix.shape[0] + 1, **inter_task.mode_shape(mode))
        length = () if mode == "local" else (np.int64(m),)
        if len(subset.lengths):
            kernel[max(1, math.ceil(n_warps * 32 / threads)), threads, self.stream](
                profile, passes, self._res, self._off, subset.order, warp_len, warp_base,
                np.int64(matrix.shape[0]), np.int32(gap_open + gap_extend),
                np.int32(gap_extend), *length, boundary, *outs)

    def _launch_intra(self, query, matrix, gap_open, gap_extend, outs, stream, profile=None,
                      *, mode="local", pairs=None):
        """Score ``query`` against the intra-task subjects (launch positions
        ``[0, n_intra)``) into ``outs`` on ``stream``; ``profile`` is the query's device
        profile when already uploaded.  ``pairs``: other subjects instead, as
        ``(subjects, boundary offsets, boundary)`` on the device (the end pass, one block
        a candidate)."""
        alphabet = matrix.shape[0]
        lanes = intra_task.lanes_per_warp()
        dtype = _intra_dtype(matrix, mode, gap_extend)
        rows, warps = intra_task.choose_shape(len(query), alphabet, lanes, dtype.itemsize)
        order, b_off, boundary = ((self._long_order, self._long_boff, self._long_boundary)
                                  if pairs is None else pairs)
        n_pairs = self.n_intra if pairs is None else order.shape[0]
        span = rows * warps * lanes
        passes = max(1, math.ceil(len(query) / span))
        if profile is None:
            profile = device_api().to_device(
                intra_task.query_profile(query, matrix, passes * span, dtype, mode, gap_extend),
                stream=stream)
        kernel = get_kernel("intra_task", rows=rows, warps=warps, alphabet=alphabet, lanes=lanes,
                            dtype=np.dtype(dtype).name, **inter_task.mode_shape(mode))
        length = () if mode == "local" else (np.int64(len(query)),)
        kernel[n_pairs, warps * lanes, stream](
            profile, passes, self._res, self._off, order, b_off,
            np.int32(gap_open + gap_extend), np.int32(gap_extend), *length, boundary, *outs)

    def _host(self, slot, name, shape, dtype):
        """A page-locked host array of ``shape`` from the pool (grown when too small)."""
        dtype = np.dtype(dtype)
        size = int(np.prod(shape)) * dtype.itemsize
        buffer = self._pool.get((slot, name))
        if buffer is None or buffer.size < size:
            buffer = _pinned_empty(max(size, 2 * (0 if buffer is None else buffer.size), 64),
                                   np.uint8)
            self._pool[(slot, name)] = buffer
        return buffer[:size].view(dtype).reshape(shape)

    def _intra_profiles(self, queries, matrix, slot, mode="local", gap_extend=0):
        """Host profiles of ``queries`` for the intra-task kernel, as one pinned buffer and
        the (offset, shape) of each."""
        lanes = intra_task.lanes_per_warp()
        dtype = _intra_dtype(matrix, mode, gap_extend)
        profiles = []
        for query in queries:
            rows, warps = intra_task.choose_shape(len(query), matrix.shape[0], lanes,
                                                  dtype.itemsize)
            span = rows * warps * lanes
            profiles.append(intra_task.query_profile(
                query, matrix, max(1, math.ceil(len(query) / span)) * span, dtype, mode,
                gap_extend))
        flat = np.concatenate([p.ravel() for p in profiles])
        pinned = self._host(slot, "intra", flat.shape, dtype)
        pinned[...] = flat
        at = np.concatenate([[0], np.cumsum([p.size for p in profiles])])
        return pinned, [(int(a), p.shape) for a, p in zip(at, profiles)]

    def _boundary_for(self, size, lane=0):
        """The boundary row of launch stream ``lane``, at least ``size`` long."""
        if self._boundaries[lane].shape[0] < size:
            self._boundaries[lane] = device_api().device_array(
                size, np.int32, stream=self._lane_streams[lane])
        return self._boundaries[lane]

    def _lanes(self, launches, blocks):
        """The streams for ``launches`` independent launches of at most ``blocks`` blocks:
        the compute stream alone when one launch fills the GPU, else up to
        :data:`LAUNCH_LANES` streams (the compute stream first), the extra ones made to
        wait for the compute stream's work so far."""
        fill = BLOCKS_PER_SM * multiprocessors()
        count = min(LAUNCH_LANES, launches, math.ceil(fill / max(blocks, 1)))
        if count < 2:
            return [self.stream]
        while len(self._lane_streams) < count:
            self._lane_streams.append(device_api().stream())
            self._boundaries.append(device_api().device_array(2, np.int32, stream=self.stream))
        lanes = self._lane_streams[:count]
        begun = _event(timing=False)
        begun.record(self.stream)
        for stream in lanes[1:]:
            begun.wait(stream)
        return lanes

    def _join(self, lanes):
        """Make the compute stream wait for the work launched on the extra ``lanes``."""
        for stream in lanes[1:]:
            done = _event(timing=False)
            done.record(stream)
            done.wait(self.stream)

    # -- batches of queries -------------------------------------------------------------

    def score_many(
        self, queries: Sequence[np.ndarray], matrix: np.ndarray, gap_open: int, gap_extend: int,
        *, packed: bool | None = None, mode: str = "local", kernel: str | None = None,
    ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32], KernelStats]:
        """Scores and end cells of every query against every subject, copied back whole
        (for tests and small sets; a search uses :meth:`top_many`); ``packed``, ``mode``
        and ``kernel`` as :meth:`top_many` (with the scan kernel, the end pass runs on
        every subject).

        Returns
        -------
        scores, query_end, subject_end : numpy.ndarray of int32, (queries, subjects)
        stats : KernelStats
        """
        n = len(self.subjects)
        shape = (len(queries), n)
        outs = [np.zeros(shape, np.int32) for _ in range(3)]
        stats = KernelStats(0.0, 0)
        for staged, batch_stats in self._batches(queries, matrix, gap_open, gap_extend, packed,
                                                 mode, scan_kernel(kernel, mode)):
            rows = staged.rows
            host = [table.copy_to_host(stream=self.stream) for table in staged.tables]
            if staged.scan:  # every subject is a candidate
                inter = np.arange(self.n_intra, n, dtype=np.int64)
                found = [(inter, row_scores[self.n_intra:]) for row_scores in host[0]]
                q_end, s_end, batch_stats = self._end_cells(staged, found, batch_stats)
                for q in range(len(rows)):
                    host[1][q, self.n_intra:] = q_end[q]
                    host[2][q, self.n_intra:] = s_end[q]
            for out, table in zip(outs, host):
                if self._columns is None:
                    out[rows] = table
                else:
                    out[np.ix_(rows, self._columns)] = table
            stats += batch_stats
        return (*outs, stats)

    def top_many(self, queries: Sequence[np.ndarray], matrix: np.ndarray, gap_open: int,
                 gap_extend: int, max_hits: int, min_score: int | None = None, *,
                 packed: bool | None = None, mode: str = "local",
                 kernel: str | None = None,
                 ties: npt.NDArray[np.int64] | None = None) -> tuple[list[Candidates],
                                                                     KernelStats]:
        """The subjects that can be among each query's ``max_hits`` best, chosen on the GPU.

        A histogram of each query's scores (:data:`HIST_BINS` bins, the last one
        open-ended) gives the lowest score ``t`` that keeps at least ``max_hits`` subjects
        (or ``min_score`` when fewer reach it); one kernel compacts the subjects scoring
        ``t`` or more.  Only the histograms and those subjects cross to the host: every
        tie at the cut comes back, so the host ranks them exactly as the CPU search does.
        Batches are pipelined: the selection of one overlaps the kernels of the next
        (module docstring).

        Parameters
        ----------
        queries : list of numpy.ndarray of uint8
        max_hits : int
        min_score : int, optional
            Default 1 in local mode (a local score of 0 is no alignment), no floor in
            global and semiglobal modes.
        packed : bool, optional
            Use the 16-bit kernel (default: on GPUs with DPX and in the simulator, when
            the scoring is within its bounds).
        mode : {"local", "global", "semiglobal"}, default "local"
            The alignment mode of the scores and end cells, as the CPU kernels'
            (:func:`swdask.kernels.cpu.score.score_all`).  Global and semiglobal scores
            are cut by a histogram of each query's range of scores (:func:`range_cut`).
        kernel : {"ends", "scan"}, optional
            The 16-bit kernel of a local search (:data:`PACKED_FAMILIES`; default
            :data:`SEARCH_KERNEL`).  With ``"scan"`` the candidates' end cells come from
            the block-per-pair kernel run on them (the end pass, :meth:`_end_cells`;
            :attr:`KernelStats.cells_ends`), which must give the same scores.
        ties : numpy.ndarray of int64, optional
            A key per result column (a search's subject ``seq_id``): then each query's
            ``max_hits`` best by score, ties by the smallest key, come back and no others,
            and the scan kernel's end pass runs on those alone.  Without it every tie at
            the cut comes back (a database of copies ties many times over: 20 copies of
            each of 10 hits).

        Returns
        -------
        candidates : list of (columns, scores, query_end, subject_end)
            Per query: result columns (int64, no particular order: subject indices, or
            positions in ``subjects`` when it was given) and their int32 scores and ends.
        stats : KernelStats

        Raises
        ------
        ValueError
            If ``kernel`` is not one of :data:`PACKED_FAMILIES`, or ``ties`` does not
            hold one key per result column.
        RuntimeError
            If the end pass scores a candidate differently from the scan kernel.
        """
        scan = scan_kernel(kernel, mode)
        if ties is not None and len(ties) != len(self.subjects):
            raise ValueError(f"ties holds {len(ties)} keys for {len(self.subjects)} subjects; "
                             "it needs one per result column")
        if mode == "local":
            floor = 1 if min_score is None else max(int(min_score), 0)
        else:
            floor = LOWEST if min_score is None else max(int(min_score), LOWEST)
        candidates = [None] * len(queries)
        stats = KernelStats(0.0, 0)
        n = len(self.subjects)
        if n == 0:
            for row in range(len(queries)):
                empty = np.zeros(0, np.int32)
                candidates[row] = (np.zeros(0, np.int64), empty, empty, empty)
            return candidates, stats
        pending = None
        # Numba frees device memory in batches, and freeing synchronizes the device:
        # deferred to the end of the call, it cannot stall the pipeline.
        with device_api().defer_cleanup():
            for staged in self._stages(queries, matrix, gap_open, gap_extend, packed,
                                       hist=True, mode=mode, floor=floor, scan=scan):
                if pending is not None:  # while the GPU scores the batch just staged
                    stats += self._select_batch(pending, max_hits, floor, candidates, ties)
                pending = staged
            if pending is not None:
                stats += self._select_batch(pending, max_hits, floor, candidates, ties)
        return candidates, stats

    def _select_batch(self, staged, max_hits, floor, candidates, ties=None):
        """Finish a staged batch: wait for its scores and histograms, cut, compact the
        survivors on the selection stream and copy them back into ``candidates`` (with
        ``ties``, each query's ``max_hits`` best of them, :meth:`top_many`)."""
        stats = self._settle(staged)
        rows, (scores, q_end, s_end) = staged.rows, staged.tables
        k, n = len(rows), len(self.subjects)
        counts = staged.hist_host
        if staged.mode == "local":
            cuts = np.array([cut_score(c, max_hits, floor) for c in counts], np.int32)
            # Scores past the last bin share it: count them all, the kernel checks exactly.
            kept = np.array([c[min(t, HIST_BINS - 1):].sum() for c, t in zip(counts, cuts)],
                            np.int64)
        else:
            cut = [range_cut(c, r, max_hits) for c, r in zip(counts, staged.ranges_host)]
            cuts = np.array([c for c, _ in cut], np.int32)
            kept = np.array([c for _, c in cut], np.int64)
        starts = np.concatenate([[0], np.cumsum(kept)]).astype(np.int64)
        total = max(int(starts[-1]), 1)
        post = self._post
        found = device_api().to_device(np.zeros(k, np.int64), stream=post)
        picked = [device_api().device_array(total, t, stream=post)
                  for t in (np.int64, np.int32, np.int32, np.int32)]
        _kernel("_select")[_grid(k * n, post)](
            scores, q_end, s_end, device_api().to_device(cuts, stream=post),
            device_api().to_device(starts, stream=post), found, *picked)
        host = [p.copy_to_host(stream=post) for p in picked]
        post.synchronize()
        positions = host[0]  # launch positions; the caller gets result columns
        columns = positions if self._columns is None else self._columns[positions]
        parts = [np.arange(starts[j], starts[j + 1]) for j in range(k)]
        if ties is not None:
            parts = [part[np.lexsort((ties[columns[part]], -host[1][part].astype(np.int64)))
                          [:max_hits]] for part in parts]
        if staged.scan:
            # The candidates of the inter-task kernel (the intra-task kernel gave its ends).
            inter = [part[positions[part] >= self.n_intra] for part in parts]
            q_end, s_end, stats = self._end_cells(
                staged, [(positions[part], host[1][part]) for part in inter], stats)
            for j, part in enumerate(inter):
                host[2][part] = q_end[j]
                host[3][part] = s_end[j]
        host[0] = columns
        for j, row in enumerate(rows):
            candidates[row] = tuple(h[parts[j]] for h in host)
        return stats

    def _batches(self, queries, matrix, gap_open, gap_extend, packed, mode="local",
                 scan=False):
        """Score the queries in batches bounded by :data:`SCORE_TABLE_BYTES`; yield each
        batch as its :class:`_Staged` (query indices ``rows``, device score tables
        ``(scores, query_end, subject_end)`` in their order) with its stats."""
        for staged in self._stages(queries, matrix, gap_open, gap_extend, packed, hist=False,
                                   mode=mode, scan=scan):
            stats = self._settle(staged)
            yield staged, stats

    def _end_cells(self, staged, found, stats):
        """The end pass of a batch scored by the scan kernel: per query of the batch,
        ``found[q] = (positions, scores)`` (launch positions of inter-task subjects, their
        scan scores) are scored again on the selection stream by the block-per-pair kernel
        (:mod:`~swdask.kernels.cuda.intra_task`, 32-bit, one block a candidate, all of a
        query's rows in a few passes), which gives their end cells.  A search's candidates
        are each query's best few (``top_many(ties=)``), so the pass is one sweep of a
        subject's columns, not cells: the thread-group kernel took 24 ms for 20 hits of a
        pair of 5.4 k-residue queries, 15 passes of its 384 rows one after another (H200).
        Returns per query ``query_end`` and ``subject_end`` and ``stats`` with the pass's
        cells and time added.

        Raises
        ------
        RuntimeError
            If a 32-bit score differs from the scan's.
        """
        post = self._post
        counts = [len(positions) for positions, _ in found]
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        total = int(starts[-1])
        # One upload of every candidate, profile and boundary offset of the batch, one
        # output table and one copy back, the launches reading slices: a search of 196
        # queries spent 56 % of its score tasks (0.31 of 0.56 s, H200) in this pass when
        # each query made its own seven allocations and copies (cProfile: 23 us a driver
        # call, 1,630 allocations per task).
        timer = _Timer(post)
        results = self._host("ends", "out", (3, total), np.int32)
        cells = 0
        if total:
            positions = np.concatenate([positions for positions, _ in found])
            lengths = self.lengths[positions]
            b_off, size = intra_task.boundary_offsets(lengths)
            order = device_api().to_device(self.subjects[positions], stream=post)
            offsets = device_api().to_device(b_off, stream=post)
            boundary = device_api().device_array(size, np.int32, stream=post)
            outs = device_api().device_array((3, total), np.int32, stream=post)
            scored = [q for q, count in enumerate(counts) if count]
            flat, where = self._intra_profiles([staged.queries[q] for q in scored],
                                               staged.matrix, "ends", "local",
                                               staged.gap_extend)
            profiles = device_api().to_device(flat, stream=post)
            for q, (at, shape) in zip(scored, where):
                a, b = starts[q], starts[q + 1]
                self._launch_intra(staged.queries[q], staged.matrix, staged.gap_open,
                                   staged.gap_extend, [outs[r, a:b] for r in range(3)], post,
                                   profiles[at:at + shape[0] * shape[1]].reshape(shape),
                                   pairs=(order[a:b], offsets[a:b], boundary))
                cells += len(staged.queries[q]) * int(lengths[a:b].sum())
        seconds = timer.stop()
        if total:
            outs.copy_to_host(results, stream=post)
        post.synchronize()
        results = [[results[r, starts[q]:starts[q + 1]].copy() for r in range(3)]
                   for q in range(len(found))]
        q_ends, s_ends = [], []
        for q, ((positions, scores), (exact, q_end, s_end)) in enumerate(zip(found, results)):
            wrong = np.flatnonzero(exact != scores)
            if wrong.size:
                at = int(wrong[0])
                raise RuntimeError(
                    f"scan kernel and end pass disagree on {wrong.size} of {len(positions)} "
                    f"candidates (query of {len(staged.queries[q])} residues, subject "
                    f"{int(self.subjects[positions[at]])}: {int(scores[at])} vs "
                    f"{int(exact[at])})")
            q_ends.append(q_end)
            s_ends.append(s_end)
        stats = dataclasses.replace(stats, seconds=stats.seconds + seconds,
                                    cells_ends=stats.cells_ends + cells,
                                    seconds_ends=stats.seconds_ends + seconds)
        return q_ends, s_ends, stats

    def _stages(self, queries, matrix, gap_open, gap_extend, packed, *, hist, mode="local",
                floor=0, scan=False):
        """Enqueue each batch's scoring (and with ``hist`` its score histograms, copied
        back asynchronously; global and semiglobal: of scores of at least ``floor``) and
        yield it as a :class:`_Staged` before waiting on it.  ``scan``: 16-bit launches
        use the scan kernel (then ``_Staged.scan``: the tables hold no end cells)."""
        matrix = np.asarray(matrix)
        queries = [np.ascontiguousarray(q, np.uint8) for q in queries]
        if packed is None:
            packed = ((has_dpx() or simulated())
                      and inter_task_dpx.fits_16bit(matrix, gap_open, gap_extend))
        # Longest first, so paired queries have similar lengths.
        order = np.argsort([-len(q) for q in queries], kind="stable")
        scan = bool(scan and packed and mode == "local")
        self.prepare([queries[r] for r in order], matrix, packed, mode, gap_extend, scan=scan)
        n = len(self.subjects)
        per_batch = max(2, min(BATCH_QUERIES, SCORE_TABLE_BYTES // (24 * max(n, 1))))
        per_batch -= per_batch % 2
        height = min(per_batch, len(order) + len(order) % 2)
        # Two sets of tables: one batch is scored while the one before is selected.
        sets = [[device_api().device_array((max(height, 1), n), np.int32, stream=self.stream)
                 for _ in range(3)] for _ in range(2 if len(order) > per_batch else 1)]
        hists = [device_api().device_array((max(height, 1), HIST_BINS), np.int32,
                                        stream=self.stream)
                 for _ in sets] if hist else [None] * len(sets)
        ranges = [device_api().device_array((max(height, 1), 2), np.int32, stream=self.stream)
                  for _ in sets] if hist and mode != "local" else [None] * len(sets)
        for b, b0 in enumerate(range(0, len(order), per_batch)):
            rows = order[b0:b0 + per_batch]
            yield self._stage(rows, [queries[r] for r in rows], matrix, gap_open, gap_extend,
                              packed, sets[b % len(sets)], hists[b % len(sets)], b % len(sets),
                              mode=mode, ranges=ranges[b % len(sets)], floor=floor, scan=scan)

    def prepare(self, queries: Sequence[np.ndarray], matrix: np.ndarray, packed: bool,
                mode: str = "local", gap_extend: int = 0, *,
                scan: bool = False) -> list[tuple[str, dict[str, Any], float]]:
        """Build, in parallel processes, the kernels that scoring ``queries`` (longest
        first) in ``mode`` will launch (``scan``: the scan kernel) and that no earlier
        process on this machine has built (:func:`swdask.kernels.cuda.compile.build`);
        returns what was built."""
        specs = search_specs([len(q) for q in queries], matrix, packed,
                             short=len(self._short.lengths) > 0, mode=mode, scan=scan)
        if self.n_intra:
            specs += _intra_specs([len(q) for q in queries], matrix, mode, gap_extend)
        return build(specs)

    def _stage(self, rows, queries, matrix, gap_open, gap_extend, packed, tables, hist, slot,
               *, mode="local", ranges=None, floor=0, scan=False):
        k = len(queries)
        n = len(self.subjects)
        ki = self.n_intra
        height = k + (k % 2 if packed else 0)
        tables = [t[:height] for t in tables]
        overflows = device_api().device_array(max(height, 1), np.int32, stream=self.stream)
        _kernel("_fill")[_grid(overflows.shape[0], self.stream)](
            overflows.reshape(1, overflows.shape[0]), 0)
        # Host profiles first (CPU work while the GPU still runs the previous batch), then
        # their uploads on the copy stream, from pinned memory.
        uploads = []
        if packed and len(self._short.lengths):
            shapes, flat16 = self._pair_profiles(queries, matrix, slot, mode, gap_extend, scan)
            uploads.append(flat16)
        if ki:
            flat_i, where_i = self._intra_profiles(queries, matrix, slot, mode, gap_extend)
            uploads.append(flat_i)
        device = [device_api().to_device(u, stream=self._copy) for u in uploads]
        uploaded = _event(timing=False)
        uploaded.record(self._copy)
        uploaded.wait(self.stream)
        timer = _Timer(self.stream, defer=True)
        if ki:  # the long subjects, beside the inter-task kernel on the second stream
            timer.start_event.wait(self._aux)
            flat_dev = device[-1]
            for q, query in enumerate(queries):
                at, shape = where_i[q]
                profile = flat_dev[at:at + shape[0] * shape[1]].reshape(shape)
                self._launch_intra(query, matrix, gap_open, gap_extend,
                                   [t[q, :ki] for t in tables], self._aux, profile, mode=mode)
        if packed:
            if len(self._short.lengths):
                self._launch16(shapes, device[0], matrix, gap_open, gap_extend,
                               [t[:, ki:] if ki else t for t in tables], overflows, mode, scan)
        else:
            for q, query in enumerate(queries):
                self._launch32(query, matrix, gap_open, gap_extend, self._short,
                               [t[q, ki:] for t in tables], mode=mode)
        if ki:
            done = _event(timing=False)
            done.record(self._aux)
            done.wait(self.stream)
        timer.stop()
        hist_host = flags = ranges_host = None
        if hist and n:
            hist = hist[:k]
            if ranges is not None:
                ranges = ranges[:k]
            self._histograms(tables[0][:k], hist, ranges, floor)
            hist_host = self._host(slot, "hist", (k, HIST_BINS), np.int32)
            hist.copy_to_host(hist_host, stream=self.stream)
            if ranges is not None:
                ranges_host = self._host(slot, "ranges", (k, 2), np.int32)
                ranges.copy_to_host(ranges_host, stream=self.stream)
        if packed and n:
            flags = self._host(slot, "flags", overflows.shape, np.int32)
            overflows.copy_to_host(flags, stream=self.stream)
        ready = _event(timing=False)
        ready.record(self.stream)
        cells = sum(len(q) for q in queries)
        intra_cells = cells * self.residues_intra
        inter_32 = 0 if packed else cells * (self.residues - self.residues_intra)
        stats = KernelStats(0.0, cells * self.residues, inter_32 + intra_cells,
                            pairs_inter=k * (n - ki), pairs_intra=k * ki, cells_intra=intra_cells)
        return _Staged(rows, queries, matrix, gap_open, gap_extend, [t[:k] for t in tables],
                       hist, hist_host, flags, ready, timer, stats, [device, uploads], mode,
                       floor, ranges, ranges_host, scan)

    def _histograms(self, scores, hist, ranges, floor):
        """Fill the score histograms ``hist`` of a (queries, subjects) score table on the
        compute stream: local, one bin per score from 0 (:func:`_histogram`); global and
        semiglobal, each query's range of scores of at least ``floor`` (``ranges``) in
        :data:`HIST_BINS` bins of equal width (:func:`_score_range`,
        :func:`_range_histogram`)."""
        k, n = scores.shape
        _kernel("_fill")[_grid(k * HIST_BINS, self.stream)](hist, 0)
        if ranges is None:
            _kernel("_histogram")[_grid(k * n, self.stream)](scores, hist)
            return
        _kernel("_start_range")[_grid(k, self.stream)](ranges)
        _kernel("_score_range")[_grid(k * n, self.stream)](scores, np.int32(floor), ranges)
        _kernel("_range_histogram")[_grid(k * n, self.stream)](scores, ranges, hist)

    def _settle(self, staged):
        """Wait for a staged batch's scores (and histograms); re-score its 16-bit
        overflows exactly in 32 bits (and redo those queries' histograms).  Returns the
        batch's :class:`KernelStats`."""
        staged.ready.synchronize()
        seconds = staged.timer.seconds()
        stats = staged.stats
        if staged.flags is None or not staged.flags[:len(staged.rows)].any():
            return KernelStats(seconds, *_counts(stats))
        cells_32bit, rescored = stats.cells_32bit, 0
        tables = staged.tables
        for q in np.flatnonzero(staged.flags[:len(staged.rows)]):
            row_scores = tables[0][q].copy_to_host(stream=self.stream)
            positions = np.flatnonzero(row_scores < 0 if staged.mode == "local"
                                       else row_scores == inter_task_dpx.OVERFLOW)
            rescore = _Ordered(positions, self.lengths[positions], self.subjects[positions],
                               self.stream)
            outs = [device_api().device_array(len(positions), np.int32, stream=self.stream)
                    for _ in range(3)]
            timer = _Timer(self.stream)
            self._launch32(staged.queries[q], staged.matrix, staged.gap_open,
                           staged.gap_extend, rescore, outs, mode=staged.mode)
            seconds += timer.stop()
            where = device_api().to_device(positions.astype(np.int64), stream=self.stream)
            _kernel("_scatter")[max(1, math.ceil(len(positions) / 32)), 32, self.stream](
                where, *outs, *(t[q] for t in tables))
            cells_32bit += len(staged.queries[q]) * int(rescore.lengths.sum())
            rescored += len(positions)
            if staged.hist is not None:  # the row's histogram, now with exact scores
                row = staged.hist[q:q + 1]
                ranges = None if staged.ranges is None else staged.ranges[q:q + 1]
                self._histograms(tables[0][q:q + 1], row, ranges, staged.floor)
                staged.hist_host[q] = row.copy_to_host(stream=self.stream)[0]
                if ranges is not None:
                    staged.ranges_host[q] = ranges.copy_to_host(stream=self.stream)[0]
        self.stream.synchronize()
        return KernelStats(seconds, stats.cells, cells_32bit, rescored, stats.pairs_inter,
                           stats.pairs_intra, stats.cells_intra)

    def _pair_profiles(self, queries, matrix, slot, mode="local", gap_extend=0, scan=False):
        """Shapes and one pinned buffer of the packed profiles of consecutive query pairs
        (``scan``: shapes of the scan kernel)."""
        alphabet = matrix.shape[0]
        chooser = packed_kernel(scan, mode)[0].choose_shape
        shapes, profiles, lengths = [], [], []
        for p in range(0, len(queries), 2):
            qa = queries[p]
            qb = queries[p + 1] if p + 1 < len(queries) else np.zeros(0, np.uint8)
            rows, group = chooser(max(len(qa), len(qb), 1), alphabet)
            passes = max(1, math.ceil(max(len(qa), len(qb)) / (rows * group)))
            profiles.append(inter_task_dpx.pair_profile(qa, qb, matrix, passes * rows * group,
                                                        mode, gap_extend))
            lengths.append((len(qa), len(qb)))
            shapes.append((rows, group, passes, profiles[-1].shape, lengths[-1]))
        flat = np.concatenate([p.ravel() for p in profiles])
        pinned = self._host(slot, "pairs", flat.shape, np.int32)
        pinned[...] = flat
        return shapes, pinned

    def _launch16(self, shapes, flat, matrix, gap_open, gap_extend, tables, overflows,
                  mode="local", scan=False):
        """Launch the 16-bit kernel (``scan``: the scan kernel, same arguments) on
        consecutive query pairs against the inter-task subjects (``tables`` are their
        columns), profiles already on the device."""
        alphabet = matrix.shape[0]
        threads = threads_per_block()
        limit = np.int32(inter_task_dpx.overflow_limit(matrix))
        if mode != "local":
            floor16 = inter_task_dpx.end_bounds(matrix, gap_open, gap_extend, mode)[1]
        neg_oe = inter_task_dpx.packed_constant(-(gap_open + gap_extend))
        neg_e = inter_task_dpx.packed_constant(-gap_extend)
        subset = self._short
        blocks = [max(1, math.ceil(subset.plan(group)[3] * 32 / threads))
                  for _, group, *_ in shapes]
        lanes = self._lanes(len(shapes), max(blocks, default=1))
        at = 0
        for p, (rows, group, passes, shape, (m_a, m_b)) in enumerate(shapes):
            size = shape[0] * shape[1]
            device_profile = flat[at:at + size].reshape(shape)
            at += size
            warp_len, warp_base, slots, _ = subset.plan(group)
            lane = p % len(lanes)
            boundary = self._boundary_for(2 * slots if passes > 1 else 2, lane)
            kernel = get_kernel(packed_kernel(scan, mode)[1], rows=rows, group=group,
                                alphabet=alphabet, threads=threads, **inter_task.mode_shape(mode))
            pair = slice(2 * p, 2 * p + 2)
            ends = () if mode == "local" else (
                np.int64(m_a), np.int64(m_b), np.int32(gap_open), np.int32(gap_extend),
                np.int32(floor16))
            kernel[blocks[p], threads, lanes[lane]](
                device_profile, passes, self._res, self._off, subset.order, warp_len,
                warp_base, np.int64(0), neg_oe, neg_e, limit, *ends, boundary,
                *(t[pair] for t in tables), overflows[pair])
        self._join(lanes)


#: The hand-written kernels of a search: the device-side selection of the top hits and
#: the traceback (:mod:`~swdask.kernels.cuda.traceback_kernels`), built with the score
#: kernels.
SEARCH_KERNELS = [("kernel", {"name": f"{__package__}.selection:{name}"})
                  for name in ("_fill", "_histogram", "_select", "_scatter")] + \
                 [("kernel", {"name": f"{__package__}.traceback_kernels:{name}"})
                  for name in ("_forward_kernel", "_walk_kernel")]


#: The hand-written kernels a global or semiglobal search adds: its range histograms.
END_KERNELS = [("kernel", {"name": f"{__package__}.selection:{name}"})
               for name in ("_start_range", "_score_range", "_range_histogram")]


def search_specs(lengths: Sequence[int], matrix: np.ndarray, packed: bool, *,
                 short: bool = True, mode: str = "local",
                 scan: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """Build specs (:func:`swdask.kernels.cuda.compile.build`) of a search of queries of
    ``lengths`` (longest first) in ``mode``: :data:`SEARCH_KERNELS` and the inter-task
    kernels, the 16-bit kernel per query pair when ``packed`` (``scan``: the scan kernel,
    and the block-per-pair kernel of its end pass), else the 32-bit kernel per query
    (``short``: there are subjects below the intra-task threshold)."""
    alphabet = matrix.shape[0]
    specs = list(SEARCH_KERNELS) + (END_KERNELS if mode != "local" else [])
    modal = inter_task.mode_shape(mode)
    if not short:
        return specs
    if packed:
        threads = threads_per_block()
        module, family = packed_kernel(scan, mode)
        for p in range(0, len(lengths), 2):  # the pairs DeviceSubjects._pair_profiles forms
            rows, group = module.choose_shape(max(lengths[p], 1), alphabet)
            specs.append((family, dict(rows=rows, group=group, alphabet=alphabet,
                                       threads=threads, **modal)))
    if scan:  # the end pass: the block-per-pair kernel per query
        specs += _intra_specs(lengths, matrix, mode)
    if not packed:
        shared = int(np.abs(matrix).max(initial=0)) <= np.iinfo(np.int16).max
        for m in lengths:
            rows, group = inter_task.choose_shape(m)
            specs.append(("inter_task", dict(rows=rows, group=group, shared=shared,
                                             dpx=has_dpx(), alphabet=alphabet + 1, **modal)))
    return specs


def kernels_due(lengths: Iterable[int], matrix: npt.ArrayLike, gap_open: int,
                gap_extend: int, mode: str = "local") -> int:
    """How many distinct search kernels for queries of ``lengths`` in ``mode`` are not
    compiled on this machine yet (what ``device="auto"`` weighs)."""
    specs = _search_specs_of(lengths, matrix, gap_open, gap_extend, mode)
    unique = {(family, tuple(sorted(shape.items()))) for family, shape in specs}
    return sum(not is_cached(family, **dict(shape)) for family, shape in unique)


def _search_specs_of(lengths, matrix, gap_open, gap_extend, mode="local"):
    """:func:`search_specs` of a search of queries of ``lengths``, packed (16-bit) where
    this GPU and the scoring allow it, as the launcher decides."""
    matrix = np.asarray(matrix)
    packed = has_dpx() and inter_task_dpx.fits_16bit(matrix, gap_open, gap_extend)
    return search_specs(sorted(lengths, reverse=True), matrix, packed, mode=mode,
                        scan=packed and scan_kernel(None, mode))


def load_search_kernels(lengths: Iterable[int], matrix: npt.ArrayLike, gap_open: int,
                        gap_extend: int, mode: str = "local") -> threading.Thread | None:
    """Load the kernels a search of queries of ``lengths`` in ``mode`` launches (those
    saved on this machine) on a thread: :func:`swdask.kernels.cuda.compile.load_ahead`."""
    specs = _search_specs_of(lengths, matrix, gap_open, gap_extend, mode)
    fixed = len(SEARCH_KERNELS) + (len(END_KERNELS) if mode != "local" else 0)
    # Score kernels first (they launch first), each shape once.
    unique = dict.fromkeys((family, tuple(sorted(shape.items()))) for family, shape in
                           specs[fixed:] + specs[:fixed])
    return load_ahead([(family, dict(shape)) for family, shape in unique])


def _intra_specs(lengths, matrix, mode="local", gap_extend=0):
    """Specs of the block-per-pair kernel for queries of ``lengths`` in ``mode`` (the
    shapes :meth:`DeviceSubjects._launch_intra` launches)."""
    lanes = intra_task.lanes_per_warp()
    dtype = _intra_dtype(matrix, mode, gap_extend)
    alphabet = matrix.shape[0]
    return [("intra_task", dict(rows=rows, warps=warps, alphabet=alphabet, lanes=lanes,
                                dtype=dtype.name, **inter_task.mode_shape(mode)))
            for rows, warps in (intra_task.choose_shape(m, alphabet, lanes, dtype.itemsize)
                                for m in lengths)]


def _intra_dtype(matrix, mode, gap_extend):
    """The intra-task profile's type: it also holds a global query's rows above it
    (``-gap_extend``, :func:`swdask.kernels.cuda.inter_task.end_rows`)."""
    return intra_task.profile_dtype(matrix, -int(gap_extend) if mode == "global" else 0)


def _counts(stats):
    """A :class:`KernelStats`' fields after ``seconds``."""
    return (stats.cells, stats.cells_32bit, stats.rescored, stats.pairs_inter,
            stats.pairs_intra, stats.cells_intra, stats.cells_ends, stats.seconds_ends)


@dataclass
class _Staged:
    """A batch whose kernels are enqueued: what finishing it needs."""

    rows: np.ndarray
    queries: list
    matrix: np.ndarray
    gap_open: int
    gap_extend: int
    tables: list
    hist: object
    hist_host: object
    flags: object
    ready: object
    timer: object
    stats: KernelStats
    keep: list  # uploads (device and pinned host), alive until the batch is done
    mode: str = "local"
    floor: int = 0  # global and semiglobal: the lowest score the histograms count
    ranges: object = None  # global and semiglobal: each query's (lowest, highest) score
    ranges_host: object = None
    scan: bool = False  # scored by the scan kernel: no end cells in the tables


def _pinned_empty(shape, dtype):
    """A page-locked host buffer (asynchronous copies back need one)."""
    if simulated():
        return np.empty(shape, dtype)
    return driver.pinned_array(shape, dtype=dtype)


def multiprocessors() -> int:
    """The current GPU's multiprocessors (1 under the simulator, which runs one block at
    a time)."""
    if simulated():
        return 1
    return driver.attribute("multiprocessors")


class _Timer:
    """Kernel time on a stream: CUDA events on a GPU, the host clock in the simulator
    (which has no event timing and runs kernels as they are launched).  With ``defer``,
    :meth:`stop` only records and :meth:`seconds` waits for the end event later, so
    timing a batch costs the pipeline no wait."""

    def __init__(self, stream, defer=False):
        self.stream = stream
        self.defer = defer
        self.tick = time.perf_counter()
        self.elapsed = None
        self.start_event = _event(timing=True)
        self.start_event.record(stream)
        self.end_event = None

    def stop(self):
        if simulated():
            self.elapsed = time.perf_counter() - self.tick
        else:
            self.end_event = _event(timing=True)
            self.end_event.record(self.stream)
        return None if self.defer else self.seconds()

    def seconds(self) -> float:
        if simulated():
            return self.elapsed
        self.end_event.synchronize()
        return self.start_event.elapsed_time(self.end_event) / 1e3


def _event(timing):
    """A CUDA event (the simulator's takes no arguments)."""
    return device_api().event() if simulated() else driver.event(timing=timing)


def _kernel(name: str):
    """A selection kernel of :mod:`~swdask.kernels.cuda.selection`, without importing it
    (:func:`~swdask.kernels.cuda.compile.hand_written`)."""
    return hand_written(f"{__package__}.selection:{name}")


def _grid(total, stream):
    """Launch configuration ``(blocks, threads, stream)`` of a grid-stride kernel over
    ``total`` items: 256-thread blocks on a GPU (at most 4,096 of them), one small block
    in the simulator, where every thread is a Python thread."""
    if simulated():
        return 1, 32, stream
    return max(1, min(math.ceil(total / 256), 4096)), 256, stream


#: Global and semiglobal searches: the lowest score a histogram may count (the 16-bit
#: kernel's :data:`~swdask.kernels.cuda.inter_task_dpx.OVERFLOW` is one below it).
LOWEST = -(2**31) + 1
#: Largest int32: the cut of a query none of whose scores reaches the floor.
HIGHEST = 2**31 - 1


def cut_score(hist: npt.ArrayLike, max_hits: int, floor: int) -> int:
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


def range_cut(hist: npt.ArrayLike, score_range: npt.ArrayLike, max_hits: int) -> tuple[int, int]:
    """``(cut, kept)`` of a global or semiglobal query: the lowest score that keeps at
    least ``max_hits`` subjects, as the lower edge of a bin of its range histogram
    (:func:`_range_histogram`), and how many subjects score at least that.

    The bins cover the query's scores at or above the search's floor, ``score_range =
    (lo, hi)``, in :data:`HIST_BINS` bins of equal width ``w = (hi - lo) // HIST_BINS +
    1`` from ``lo``: a score ``s`` is in bin ``(s - lo) // w``, so it reaches the lower
    edge ``lo + t w`` of bin ``t`` exactly when its bin is ``t`` or later, and ``kept``
    is exact.  Where fewer than ``max_hits`` subjects reach the floor, the cut is ``lo``
    (all of them); where none does, the cut is :data:`HIGHEST` and none is kept.  The
    cut keeps more than ``max_hits`` subjects when ties or a wide bin share it: the host
    ranks them exactly.

    Examples
    --------
    >>> hist = np.zeros(HIST_BINS, np.int64); hist[[0, 1, HIST_BINS - 1]] = [5, 2, 1]
    >>> range_cut(hist, (-8192, 0), 3)  # bins of width 3: -8192, -8189, ..., -3
    (-8189, 3)
    >>> range_cut(hist, (10, 5), 3)
    (2147483647, 0)
    """
    low, high = int(score_range[0]), int(score_range[1])
    if low > high:
        return HIGHEST, 0
    width = (high - low) // HIST_BINS + 1
    cut = cut_score(hist, max_hits, 0)
    return low + cut * width, int(np.asarray(hist)[cut:].sum())


def score_query(
    query: np.ndarray, s_res: np.ndarray, s_off: np.ndarray,
    subjects: npt.NDArray[np.int64] | None, matrix: npt.ArrayLike, gap_open: int,
    gap_extend: int, **options: Any,
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32]]:
    """Scores and end cells of one query against ``subjects`` by the 32-bit kernels (a
    one-off :class:`DeviceSubjects`; ``mode`` and the kernel options as
    :meth:`DeviceSubjects.score`); returns ``scores, query_end, subject_end``."""
    return DeviceSubjects(s_res, s_off, subjects).score(query, matrix, gap_open, gap_extend,
                                                        **options)[:3]
