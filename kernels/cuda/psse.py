"""Pairwise statistical significance on the GPU: shuffles made on the device, scored by
the search kernels, fitted on the device.

Tile-based (Zhang et al. 2012): a chunk of subjects and ``N`` shuffles of each are
scored against one query (or two, in the 16-bit kernel) per launch, ``subjects x (N+1)``
thread groups (the real subject is copy 0 of its block), the query profile shared.  A
chunk holds as many subjects as :data:`CHUNK_RESIDUES` allows: for 1,000 shuffles of
Swiss-Prot proteins about 3,000 subjects, 3 M thread groups of 8-32 lanes, a hundred or more
times the threads an H100 holds at once (:func:`resident_threads`: multiprocessors x
resident threads each), so every launch fills the GPU many waves over and its tail is
short; fewer subjects (a small job) fill what they can.

1. ``psse_kernels._shuffle_kernel``, one thread per copy, writes each subject and its shuffles
   (Fisher-Yates, Philox keyed on ``(seed, subject key, shuffle)``: the same code as the
   CPU twin, :mod:`swdask.kernels.psse_math`) straight into a device residue buffer with
   its offsets, laid out as the search kernels read subjects.  Nothing but the chunk's
   original residues and four small per-subject arrays crosses from the host.
2. The search kernels (the local search's 16-bit kernel, :func:`pair_kernel`, two queries
   per launch; :mod:`~swdask.kernels.cuda.inter_task`, 32-bit, for scorings outside the
   16-bit bounds and to re-score exactly the pairs whose 16-bit score may have wrapped)
   score the query against every copy; the shapes a job needs are built before its first
   launch, in parallel (:func:`kernel_specs`).  A position-specific query profile (a PSSM) is
   just another profile ``[code, row]``.
3. ``psse_kernels._fit_kernel``, one thread per (query, subject) pair, fits the Gumbel to the
   pair's ``N`` shuffle scores by censored ML and computes the real score's P-value; only
   ``(score, mu, lambda, p)`` per pair come back.

Launches use the public functions of :mod:`~swdask.kernels.cuda.inter_task` and
:mod:`~swdask.kernels.cuda.inter_task_dpx` (``get_kernel``, ``choose_shape``,
``launch_plan``, ``query_profile``, ``pair_profile``, ...), with their argument order.
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import psse_math
from . import driver, inter_task, inter_task_dpx
from .compile import build, device_api, get_kernel, hand_written, quiet_occupancy, simulated
from .launcher import packed_kernel, scan_kernel

if TYPE_CHECKING:
    import numpy.typing as npt

#: Residues (subjects and their shuffles) of one chunk on the device.  With the 8 bytes
#: per residue of a multi-pass query's boundary row, about 9 GiB at this size.
CHUNK_RESIDUES = 1 << 30
#: Chunk bound in the simulator (tests use tiny inputs).
SIMULATOR_CHUNK_RESIDUES = 1 << 14


def _kernel(name: str):
    """A kernel of :mod:`~swdask.kernels.cuda.psse_kernels`, without importing it
    (:func:`swdask.kernels.cuda.compile.hand_written`)."""
    return hand_written(f"{__package__}.psse_kernels:{name}")


@dataclass(frozen=True)
class DeviceStats:
    """Work and time of the GPU path."""

    kernel_seconds: float = 0.0  #: score kernels (CUDA events)
    shuffle_seconds: float = 0.0  #: shuffle kernels
    fit_seconds: float = 0.0  #: fit kernels
    cells: int = 0  #: query x subject residues over every copy scored
    rescored: int = 0  #: copies re-scored in 32 bits after a 16-bit overflow

    def __add__(self, other):
        return DeviceStats(*(a + b for a, b in zip(self._values(), other._values())))

    def _values(self):
        return (self.kernel_seconds, self.shuffle_seconds, self.fit_seconds, self.cells,
                self.rescored)


_quiet = quiet_occupancy


def _grid(n, threads):
    return max(1, math.ceil(n / threads))


class _Timer:
    def __init__(self, stream):
        self.stream = stream
        self.tick = time.perf_counter()
        if not simulated():
            self.start, self.end = device_api().event(), device_api().event()
            self.start.record(stream)

    def stop(self) -> float:
        if simulated():
            return time.perf_counter() - self.tick
        self.end.record(self.stream)
        self.end.synchronize()
        return self.start.elapsed_time(self.end) / 1e3


def pair_kernel() -> tuple[Any, str]:
    """The 16-bit kernel's module (its shape chooser) and family: the local search's
    (:func:`swdask.kernels.cuda.launcher.scan_kernel`; by default the scan kernel, whose
    scores are the same and which skips the end cells that significance does not need).
    Its shapes are then the search's: ``swdask warmup`` builds them and the package ships
    them, where a family of its own would compile a shape per query length in the first
    run (44 s for 100 Swiss-Prot pairs on a 2 x H200 host with the older kernel)."""
    return packed_kernel(scan_kernel(None))


def kernel_specs(lengths: Sequence[int], alphabet: int,
                 packed: bool) -> list[tuple[str, dict[str, Any]]]:
    """Build specs (:func:`swdask.kernels.cuda.compile.build`) of the score kernels that
    queries of ``lengths`` (longest first, paired as :meth:`DeviceShuffles.significance`
    pairs them when ``packed``) launch with an ``alphabet``-row profile."""
    threads = inter_task.threads_per_block()
    if packed:
        module, family = pair_kernel()
        specs = []
        for m in lengths[::2]:
            rows, group = module.choose_shape(max(m, 1), alphabet)
            specs.append((family, dict(rows=rows, group=group, alphabet=alphabet,
                                       threads=threads)))
        return specs
    return [("inter_task", dict(zip(("rows", "group"), inter_task.choose_shape(m)),
                                shared=True, dpx=inter_task.has_dpx(), alphabet=alphabet + 1))
            for m in lengths]


def resident_threads() -> int:
    """Threads the current GPU holds at once (multiprocessors x resident threads each);
    the simulator counts one block."""
    if simulated():
        return inter_task.threads_per_block()
    return driver.attribute("multiprocessors") * driver.attribute("threads_per_multiprocessor")


def chunk_subjects(lengths: npt.ArrayLike, n_shuffles: int,
                   budget: int | None = None) -> list[npt.NDArray[np.int64]]:
    """:func:`swdask.kernels.psse_math.chunk_subjects` with the GPU's budget by default
    (:data:`CHUNK_RESIDUES`, :data:`SIMULATOR_CHUNK_RESIDUES` in the simulator)."""
    if budget is None:
        budget = SIMULATOR_CHUNK_RESIDUES if simulated() else CHUNK_RESIDUES
    return psse_math.chunk_subjects(lengths, n_shuffles, budget)


class DeviceShuffles:
    """A chunk of subjects and their shuffles, made and kept on the GPU.

    Parameters
    ----------
    residues, offsets : numpy.ndarray
        The chunk's subjects (uint8 codes concatenated, int64 offsets), in launch order
        (longest first keeps a warp's lanes equally busy).
    keys : numpy.ndarray of uint64
        Each subject's RNG key (a stable id: see :func:`swdask.jobs.significance.subject_key`).
    n_shuffles : int
    seed : int
        A 64-bit seed.
    stream : swdask.kernels.cuda.driver.Stream, optional (Numba's in the simulator)
    """

    def __init__(self, residues: np.ndarray, offsets: np.ndarray, keys: np.ndarray,
                 n_shuffles: int, seed: int, *, stream: Any = None) -> None:
        self.cuda = cuda = device_api()  # the driver layer on a GPU, Numba's simulator in CI
        self.stream = stream if stream is not None else cuda.stream()
        offsets = np.ascontiguousarray(offsets, np.int64)
        self.lengths = np.diff(offsets)
        self.copies = n_shuffles + 1
        n = len(self.lengths)
        sizes = self.lengths * self.copies
        base = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        total = int(sizes.sum())
        s = self.stream
        self.res = cuda.device_array(max(total, 1), np.uint8, stream=s)
        self.off = cuda.device_array(n * self.copies + 1, np.int64, stream=s)
        threads = inter_task.threads_per_block()
        timer = _Timer(s)
        if n:
            with _quiet():
                _kernel("_shuffle_kernel")[_grid(n * self.copies, threads), threads, s](
                    cuda.to_device(np.ascontiguousarray(residues, np.uint8), stream=s),
                    cuda.to_device(offsets[:-1], stream=s),
                    cuda.to_device(self.lengths, stream=s),
                    cuda.to_device(base, stream=s),
                    cuda.to_device(np.ascontiguousarray(keys, np.uint64), stream=s),
                    np.int64(n_shuffles), np.uint64(seed), self.res, self.off)
        self.seconds = timer.stop()
        self._orders = {}
        self._buffers = {}

    def _buffer(self, name, shape, dtype):
        """A device buffer reused by every launch of this chunk (launches on one stream
        run in order): a multi-pass query's boundary row holds 8 bytes per residue of
        the chunk, too much to allocate per launch."""
        size = int(np.prod(shape))
        held = self._buffers.get(name)
        if held is None or held.size < size:
            held = self.cuda.device_array(max(size, 1), dtype, stream=self.stream)
            self._buffers[name] = held
        return held[:size].reshape(shape) if len(shape) > 1 else held[:size]

    def residues(self) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """The shuffled buffer and its offsets, copied to the host (tests)."""
        return self.res.copy_to_host(stream=self.stream), self.off.copy_to_host(stream=self.stream)

    def order(
        self, blocks: tuple[int, ...],
    ) -> tuple[Any, npt.NDArray[np.int64], dict[int, tuple[Any, ...]]]:
        """Device order of the copies of subjects ``blocks`` (tuple of chunk indices),
        with per-warp launch plans cached per group size."""
        if blocks not in self._orders:
            idx = np.asarray(blocks, np.int64)
            order = self.cuda.device_array(max(len(idx) * self.copies, 1), np.int64,
                                           stream=self.stream)
            threads = inter_task.threads_per_block()
            with _quiet():
                launch = _kernel("_order_kernel")[_grid(len(idx) * self.copies, threads), threads,
                                                  self.stream]
                blocks_on_device = self.cuda.to_device(idx if len(idx) else np.zeros(1, np.int64),
                                                       stream=self.stream)
                launch(blocks_on_device, np.int64(self.copies), order)
            lengths = np.repeat(self.lengths[idx], self.copies)
            self._orders[blocks] = (order, lengths, {})
        return self._orders[blocks]

    def plan(self, blocks: tuple[int, ...],
             group: int) -> tuple[Any, npt.NDArray[np.int64], tuple[Any, ...]]:
        order, lengths, plans = self.order(blocks)
        if group not in plans:
            uniform = inter_task.threads_per_block() if simulated() else 32
            warp_len, warp_base, slots = inter_task.launch_plan(lengths, group, uniform)
            plans[group] = (self.cuda.to_device(warp_len, stream=self.stream),
                            self.cuda.to_device(warp_base, stream=self.stream), slots,
                            len(warp_len))
        return order, lengths, plans[group]

    # -- scoring ------------------------------------------------------------------------

    def significance(
        self, profiles: Sequence[np.ndarray], blocks: Sequence[tuple[int, ...]], gap_open: int,
        gap_extend: int, *, packed: bool | None = None,
    ) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], DeviceStats]:
        """Scores, fits and P-values of query profiles against subject blocks.

        Parameters
        ----------
        profiles : sequence of numpy.ndarray
            Query profiles ``[code, row]`` (int, ``alphabet`` codes x query length):
            ``matrix[:, query]`` for a substitution matrix, or a PSSM.
        blocks : sequence of tuple of int
            Per query, the chunk's subjects (indices) it is paired with.
        packed : bool, optional
            16-bit kernel (default: on Hopper and in the simulator, when the profiles and
            gaps are within its bounds).

        Returns
        -------
        results : list of (score, mu, lambda, p_value) arrays, one per query
        stats : DeviceStats
        """
        stats = DeviceStats(shuffle_seconds=self.seconds)
        results = [None] * len(profiles)
        alphabet = profiles[0].shape[0] if profiles else 0
        if packed is None:
            joined = np.concatenate([p.ravel() for p in profiles]) if profiles else np.zeros(1)
            packed = ((inter_task.has_dpx() or simulated())
                      and inter_task_dpx.fits_16bit(joined, gap_open, gap_extend))
        # Queries of the same subject set, longest first, go two by two to the 16-bit kernel.
        by_set = {}
        for q in sorted(range(len(profiles)), key=lambda q: -profiles[q].shape[1]):
            by_set.setdefault(blocks[q], []).append(q)
        # Every shape due, built at once in parallel processes, not one by one at launch.
        build([spec for subset, queries in by_set.items() if subset
               for spec in kernel_specs([profiles[q].shape[1] for q in queries], alphabet,
                                        packed)])
        for subset, queries in by_set.items():
            if not subset:
                for q in queries:
                    results[q] = tuple(np.zeros(0, t) for t in
                                       (np.int32, np.float64, np.float64, np.float64))
                continue
            step = 2 if packed else 1
            for at in range(0, len(queries), step):
                group_q = queries[at:at + step]
                tables, batch = self._score(subset, [profiles[q] for q in group_q], alphabet,
                                            gap_open, gap_extend, packed)
                stats += batch
                for q, table in zip(group_q, tables):
                    results[q], seconds = self._fit(table, len(subset))
                    stats += DeviceStats(fit_seconds=seconds)
        return results, stats

    def _score(self, subset, profiles, alphabet, gap_open, gap_extend, packed):
        """Device score rows (one per profile) over the copies of ``subset``."""
        s = self.stream
        order, lengths, _ = self.order(subset)
        n = len(lengths)
        residues = int(lengths.sum())
        rows = [None] * len(profiles)
        cells = sum(p.shape[1] for p in profiles) * residues
        timer = _Timer(s)
        rescored = 0
        if packed:
            pa = profiles[0]
            pb = profiles[1] if len(profiles) > 1 else np.zeros((alphabet, 0), pa.dtype)
            m = max(pa.shape[1], pb.shape[1], 1)
            module, family = pair_kernel()
            r, group = module.choose_shape(m, alphabet)
            passes = max(1, math.ceil(m / (r * group)))
            # Both profiles as columns of one "matrix", the queries as column indices.
            both = np.concatenate([pa, pb], axis=1)
            qa = np.arange(pa.shape[1])
            qb = pa.shape[1] + np.arange(pb.shape[1])
            profile = self.cuda.to_device(
                inter_task_dpx.pair_profile(qa, qb, both, passes * r * group), stream=s)
            order, _, (warp_len, warp_base, slots, n_warps) = self.plan(subset, group)
            boundary = self._buffer("boundary", (2 * slots if passes > 1 else 2,), np.int32)
            # The scores are kept per query; the ends are scratch.
            tables = [self.cuda.device_array((2, n), np.int32, stream=s)]
            tables += [self._buffer(f"ends{k}", (2, n), np.int32) for k in range(2)]
            overflows = self.cuda.to_device(np.zeros(2, np.int32), stream=s)
            threads = inter_task.threads_per_block()
            kernel = get_kernel(family, rows=r, group=group, alphabet=alphabet, threads=threads)
            with _quiet():
                kernel[_grid(n_warps * 32, threads), threads, s](
                    profile, passes, self.res, self.off, order, warp_len, warp_base,
                    np.int64(0), inter_task_dpx.packed_constant(-(gap_open + gap_extend)),
                    inter_task_dpx.packed_constant(-gap_extend),
                    np.int32(inter_task_dpx.overflow_limit(both)), boundary, *tables, overflows)
            wrapped = overflows.copy_to_host(stream=s)
            s.synchronize()
            for i in range(len(profiles)):
                rows[i] = tables[0][i]
                if wrapped[i]:
                    rescored += self._rescore(subset, profiles[i], gap_open, gap_extend, rows[i])
        else:
            for i, prof in enumerate(profiles):
                rows[i] = self.cuda.device_array(n, np.int32, stream=s)
                self._launch32(subset, prof, gap_open, gap_extend, self.order(subset)[0], lengths,
                               rows[i])
        seconds = timer.stop()
        return rows, DeviceStats(kernel_seconds=seconds, cells=cells, rescored=rescored)

    def _launch32(self, subset, prof, gap_open, gap_extend, order, lengths, out_score):
        s = self.stream
        m = prof.shape[1]
        alphabet = prof.shape[0]
        r, group = inter_task.choose_shape(m)
        passes = max(1, math.ceil(m / (group * r)))
        profile = self.cuda.to_device(
            inter_task.query_profile(np.arange(m), prof, passes * group * r), stream=s)
        uniform = inter_task.threads_per_block() if simulated() else 32
        warp_len, warp_base, slots = inter_task.launch_plan(lengths, group, uniform)
        boundary = self._buffer("boundary", (2 * slots if passes > 1 else 2,), np.int32)
        threads = inter_task.threads_per_block()
        kernel = get_kernel("inter_task", rows=r, group=group, shared=True,
                            dpx=inter_task.has_dpx(), alphabet=alphabet + 1)
        ends = [self._buffer(f"ends32_{k}", (len(lengths),), np.int32) for k in range(2)]
        with _quiet():
            kernel[_grid(len(warp_len) * 32, threads), threads, s](
                profile, passes, self.res, self.off, order,
                self.cuda.to_device(warp_len, stream=s), self.cuda.to_device(warp_base, stream=s),
                np.int64(alphabet),
                np.int32(gap_open + gap_extend), np.int32(gap_extend), boundary, out_score,
                *ends)

    def _rescore(self, subset, prof, gap_open, gap_extend, row):
        """Re-score exactly, in 32 bits, the copies whose 16-bit score came back -1."""
        s = self.stream
        order, lengths, _ = self.order(subset)
        host = row.copy_to_host(stream=s)
        s.synchronize()
        where = np.flatnonzero(host < 0)
        sub_order = self.cuda.to_device(order.copy_to_host(stream=s)[where], stream=s)
        out = self.cuda.device_array(len(where), np.int32, stream=s)
        self._launch32(subset, prof, gap_open, gap_extend, sub_order, lengths[where], out)
        with _quiet():
            _kernel("_scatter")[_grid(len(where), 32), 32, s](
                self.cuda.to_device(where, stream=s), out, row)
        return len(where)

    def _fit(self, row, n_pairs):
        s = self.stream
        outs = [self.cuda.device_array(n_pairs, t, stream=s)
                for t in (np.int32, np.float64, np.float64, np.float64)]
        threads = inter_task.threads_per_block()
        timer = _Timer(s)
        with _quiet():
            _kernel("_fit_kernel")[_grid(n_pairs, threads), threads, s](
                row, np.int64(self.copies), *outs)
        seconds = timer.stop()
        host = tuple(o.copy_to_host(stream=s) for o in outs)
        s.synchronize()
        return host, seconds
