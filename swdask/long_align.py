"""Long pair alignment: megabase Smith-Waterman as a Dask DAG of tiles, exact traceback.

The local-alignment matrix of two long sequences (``A``, the query, ``m`` rows; ``B``,
the subject, ``n`` columns) is cut into tiles (:mod:`swdask.kernels.cpu.tile` says what
crosses a tile's border).  Each tile is one Dask task that takes the bottom boundary of
the tile above and the right boundary of the tile on its left and returns its own, plus
its best cell; the dependencies form the wavefront DAG, and Dask runs the tiles on GPU
workers (:func:`swdask.kernels.cuda.tile.score_tile_gpu`) and CPU workers
(:func:`swdask.kernels.cpu.tile.score_tile`) at once: a task picks its kernel by whether
the worker that took it has the resource ``GPU``.  Both kernels give the same bits.

Tile sizes come from :class:`CostModel`: per-kind rates and per-task overheads,
calibrated by :func:`calibrate`, and a list-scheduling simulation of the wavefront that
counts its non-saturated start and end (ASW's equations 4-7 evaluated by simulation
rather than in closed form).

Traceback in bounded memory: the score pass's tile boundaries are checkpoints.  From
the best end the path is walked back tile by tile; a tile on the path is recomputed
(restricted to the rows and columns before the walk's entry cell) either directly with
one direction byte a cell, when small (a *leaf*, :data:`LEAF_CELLS`), or as a grid of
tiles whose boundaries one sweep keeps (:func:`swdask.kernels.cpu.tile.score_grid`, the
grid's tiles of an anti-diagonal in parallel threads, or
:func:`swdask.kernels.cuda.tile.score_grid_gpu`, one checkpointing kernel sequence on the
GPU), walked the same way.  The grid's size adapts to the rectangle (the arithmetic is
in the comment above :func:`_trace_side`): about 1.07 times the rectangle's cells
recomputed in all, few sequential sweeps.  Given exact boundaries a tile's cells are the
reference's, so the path is the reference's path (same tie rules, same start); the
memory is the grids' cut lines, ``O((h + w) * tiles per side)`` a level and at most
:data:`TRACE_MEMORY` bytes a grid, never ``O(mn)``.
"""
from __future__ import annotations

import heapq
import math
import os
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from . import backend
from .errors import InvalidSequenceError, ScoringError
from .kernels.cpu.tile import (
    STATE_H,
    better,
    grid_tile_inputs,
    matrix_boundaries,
    score_grid,
    score_tile,
    traceback_tile,
)
from .kernels.cpu.traceback import cigar_string, summarize_path
from .scoring import Scoring
from .sequences.batch import one_sequence

__all__ = ["CostModel", "LongAlignment", "TilePlan", "align_long", "calibrate", "plan_tiles",
           "planted_copy", "reverse_complement"]

#: Largest rectangle (cells = bytes of direction matrix) that the traceback walks directly
#: (a *leaf*); larger tiles on the path are cut into a grid first (:func:`_trace_side`).
LEAF_CELLS = 1 << 16
#: Most tiles a side of one traceback grid (so at most its square in a grid).
TRACE_MAX_SPLIT = 32
#: Most bytes of cut boundaries one traceback grid keeps (8 per cell of a cut line).
TRACE_MEMORY = 1 << 29
#: Smallest rectangle whose traceback grid goes to the GPU, when the score pass has one:
#: below it the CPU's threads are about as fast as a launch sequence and its transfers
#: (16 M cells: about 4 ms on the H100 host's 16 cores at their calibrated 0.25 GCUPS a
#: thread).  The threshold itself was not tuned on the GPU.
GPU_TRACE_CELLS = 1 << 24
#: Reachable scores stay this far inside the int32 sentinel of the kernels.
_SCORE_LIMIT = (1 << 30) - (1 << 20)
# Codes of DNA's ACGT complement; N (4) stays N.
_COMPLEMENT = np.array([3, 2, 1, 0, 4], dtype=np.uint8)


# -- results -------------------------------------------------------------------------------

@dataclass(frozen=True)
class LongAlignment:
    """The best local alignment of a long pair: ends always, the path with traceback.

    Coordinates are 0-based half-open, on the sequences as aligned: for
    ``strand == "-"`` the query was aligned to the reverse complement of the subject, and
    ``subject_start``/``subject_end`` count on that reverse complement (the forward
    interval is ``[subject_length - subject_end, subject_length - subject_start)``, as
    the SAM record gives it).  ``query_start``, ``subject_start`` and the path's columns
    are None without traceback.  ``pident`` is BLAST's percent identity: 100 x identical
    columns / alignment columns.
    """

    query: str
    subject: str
    strand: str
    score: int
    query_start: int | None
    query_end: int
    subject_start: int | None
    subject_end: int
    query_length: int
    subject_length: int
    cigar: str | None = None
    matches: int | None = None
    mismatches: int | None = None
    gap_opens: int | None = None
    align_length: int | None = None
    pident: float | None = None
    cells: int = 0
    score_seconds: float = 0.0
    traceback_seconds: float | None = None
    device: str = "cpu"
    tile_rows: int = 0
    tile_cols: int = 0
    stats: dict = field(default_factory=dict, compare=False, repr=False)

    def to_table(self):
        """The one-row Arrow table (:data:`swdask.parquet_schemas.LONG_ALIGNMENTS`)."""
        import pyarrow as pa

        from .parquet_schemas import LONG_ALIGNMENTS
        from .tables import check_table

        row = {k: v for k, v in asdict(self).items() if k != "stats"}
        table = pa.Table.from_pylist([row], schema=LONG_ALIGNMENTS)
        return check_table(table, LONG_ALIGNMENTS, where="long alignment")

    def sam_lines(self, command_line: str | None = None):
        """SAM v1.6 lines: header, then the query as the read against the subject.

        Raises
        ------
        ValueError
            No traceback was made (``cigar`` is None).
        """
        from . import __version__
        from .output import sam_cigar

        if self.cigar is None:
            raise ValueError("SAM needs the alignment: run with traceback=True (--traceback)")
        lines = ["@HD\tVN:1.6\tSO:unsorted\n", f"@SQ\tSN:{self.subject}\tLN:{self.subject_length}\n"]
        pg = f"@PG\tID:swdask\tPN:swdask\tVN:{__version__}"
        if command_line:
            pg += "\tCL:" + " ".join(command_line.split())
        lines.append(pg + "\n")
        if not self.align_length:
            lines.append(f"{self.query}\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*\tAS:i:0\n")
            return lines
        if self.strand == "+":
            flag, cigar = 0, sam_cigar(self.cigar, self.query_start, self.query_end, self.query_length)
        else:
            # The read is reported reverse-complemented against the forward subject: the
            # path reversed, the clips swapped.
            runs = _cigar_runs(self.cigar)[::-1]
            flag = 16
            cigar = sam_cigar("".join(f"{n}{op}" for n, op in runs),
                              self.query_length - self.query_end,
                              self.query_length - self.query_start, self.query_length)
        pos = self.subject_start + 1 if self.strand == "+" else self.subject_length - self.subject_end + 1
        nm = self.align_length - self.matches
        lines.append(f"{self.query}\t{flag}\t{self.subject}\t{pos}\t255\t{cigar}"
                     f"\t*\t0\t0\t*\t*\tAS:i:{self.score}\tNM:i:{nm}\n")
        return lines


def _cigar_runs(cigar: str):
    import re

    return [(int(n), op) for n, op in re.findall(r"(\d+)([=XID])", cigar)]


@dataclass(frozen=True)
class TileResult:
    """What a tile task returns: its bottom and right boundaries and its best cell
    (whole-matrix coordinates), and which kernel ran it in how many seconds."""

    bottom_h: np.ndarray
    bottom_f: np.ndarray
    right_h: np.ndarray
    right_e: np.ndarray
    best: tuple
    kind: str
    seconds: float


# -- cost model ----------------------------------------------------------------------------

@dataclass(frozen=True)
class CostModel:
    """Seconds per tile on each kind of worker, and the per-task overheads.

    A CPU tile of ``c`` cells takes ``cpu_overhead + c / (cpu_gcups * 1e9)`` on one
    worker thread.  A GPU tile of ``h x w`` cells is ``P x Q`` sub-tiles of ``sub_cells``
    swept in ``P + Q - 1`` launches; a launch of ``L`` sub-tiles takes
    ``gpu_launch + sub_cells * max(L / (gpu_gcups * 1e9), 1 / (gpu_warp_gcups * 1e9))``:
    the whole GPU's rate bounds a wide launch, one warp's (a sub-tile is one warp's
    sequential sweep) a narrow one; plus ``gpu_overhead`` per task.  This is ASW's
    per-tile cost with the non-saturated start and end of the wavefront inside a GPU tile
    made explicit: below ``gpu_gcups / gpu_warp_gcups`` sub-tiles a launch does not fill
    the GPU.

    Defaults: the CPU rate was measured on this project's 2-core development machine
    while other jobs shared it (``calibrate(kinds=("cpu",))``: 0.33-0.37 GCUPS a thread
    for tiles of 512-2048 squared, kernel overhead below the fit's resolution); the
    per-task overhead of 2 ms is Dask's, from the tests (450 tiles of 61 x 61 in about 2 s
    on those 2 busy cores: at most 4 ms a tile).  GPU: :func:`calibrate` on an H100
    (2026-11-23): 612 GCUPS for the whole GPU, 0.50 GCUPS for one warp (so launches of
    fewer than about 1,230 sub-tiles do not fill it), overheads below the defaults; with
    these the 2.46 Mb x 1 Mb benchmark is predicted at 4.58 s and runs in 4.67 s.
    """

    cpu_gcups: float = 0.35
    cpu_overhead: float = 2e-3
    gpu_gcups: float = 612.0
    gpu_warp_gcups: float = 0.50
    gpu_overhead: float = 5e-3
    gpu_launch: float = 2e-5
    gpu_sub_rows: int = 256
    gpu_sub_cols: int = 512

    def cpu_seconds(self, h: int, w: int) -> float:
        return self.cpu_overhead + h * w / (self.cpu_gcups * 1e9)

    def gpu_seconds(self, h: int, w: int) -> float:
        p = max(1, math.ceil(h / self.gpu_sub_rows))
        q = max(1, math.ceil(w / self.gpu_sub_cols))
        d = np.arange(p + q - 1)
        per_diag = np.minimum(np.minimum(d + 1, p), np.minimum(q, p + q - 1 - d))
        sub = self.gpu_sub_rows * self.gpu_sub_cols
        compute = sub * np.maximum(per_diag / (self.gpu_gcups * 1e9),
                                   1.0 / (self.gpu_warp_gcups * 1e9)).sum()
        return self.gpu_overhead + (p + q - 1) * self.gpu_launch + float(compute)


@dataclass(frozen=True)
class TilePlan:
    """Tile boundaries and the kind of worker each tile row is meant for.

    ``rows``/``cols``: cut points ``0 = r_0 < r_1 < ... = m`` (and for columns);
    ``gpu_rows``: how many of the first tile rows go to GPU workers only (the rest go to
    any worker); ``predicted``: the cost model's makespan in seconds.
    """

    rows: tuple
    cols: tuple
    gpu_rows: int = 0
    predicted: float = 0.0

    @property
    def shape(self):
        return len(self.rows) - 1, len(self.cols) - 1


def _cuts(length: int, parts: int) -> tuple:
    parts = max(1, min(parts, max(length, 1)))
    return tuple(round(k * length / parts) for k in range(parts + 1))


def simulate(plan: TilePlan, model: CostModel, gpus: int, cpu_threads: int) -> float:
    """Makespan of a plan by list scheduling: tiles in wavefront order, each on the kind
    of worker that can finish it first (GPU tile rows only on GPUs).

    Examples
    --------
    >>> simulate(TilePlan((0, 100), (0, 100)), CostModel(cpu_gcups=1.0, cpu_overhead=0.0), 0, 1)
    1e-05
    """
    n_p, n_q = plan.shape
    pools = {kind: [0.0] * count for kind, count in (("gpu", gpus), ("cpu", cpu_threads)) if count}
    if not pools:
        return math.inf
    heights = np.diff(plan.rows)
    widths = np.diff(plan.cols)
    finish = np.zeros((n_p, n_q))
    cost = {}
    for d in range(n_p + n_q - 1):
        for p in range(max(0, d - n_q + 1), min(n_p, d + 1)):
            q = d - p
            h, w = int(heights[p]), int(widths[q])
            ready = max(finish[p - 1, q] if p else 0.0, finish[p, q - 1] if q else 0.0)
            best = None
            for kind, pool in pools.items():
                if kind == "cpu" and p < plan.gpu_rows:
                    continue
                key = (kind, h, w)
                if key not in cost:
                    cost[key] = model.gpu_seconds(h, w) if kind == "gpu" else model.cpu_seconds(h, w)
                end = max(pool[0], ready) + cost[key]
                if best is None or end < best[0]:
                    best = (end, kind)
            if best is None:
                return math.inf
            heapq.heapreplace(pools[best[1]], best[0])
            finish[p, q] = best[0]
    return float(finish.max()) if finish.size else 0.0


#: Most tiles of a candidate plan: more cost the scheduler more than they gain.
MAX_TILES = 4096


def plan_tiles(m: int, n: int, *, tile="auto", gpus: int = 0, cpu_threads: int = 1,
               model: CostModel | None = None) -> TilePlan:
    """Tile boundaries for an ``m x n`` matrix on ``gpus`` GPU workers and ``cpu_threads``
    CPU worker threads.

    Parameters
    ----------
    m, n : int
    tile : "auto" or int, default "auto"
        An int: square tiles of that side on every worker.  ``"auto"``: the cheapest of
        the candidates under ``model`` by :func:`simulate`: square CPU tiles (no GPU);
        one tile row per GPU cut into column bands (GPU only); and, with both, GPU tile
        rows over the top ``1 - f`` of the rows and square tiles below for any worker,
        for CPU shares ``f`` from 0 to 75 %, and the CPU-only plans: ``f = 0`` is a
        candidate, so a mixed plan is never predicted slower than the GPU alone.
    gpus, cpu_threads : int
    model : CostModel, optional

    Returns
    -------
    TilePlan

    Examples
    --------
    >>> plan_tiles(100, 250, tile=64).shape
    (2, 4)
    >>> plan_tiles(10_000, 10_000, cpu_threads=2).shape[0] > 1
    True
    """
    model = model or CostModel()
    if tile != "auto":
        t = int(tile)
        return TilePlan(_cuts(m, math.ceil(m / t)), _cuts(n, math.ceil(n / t)))
    candidates, cpu_candidates = [], []
    if gpus:
        for shares in (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75) if cpu_threads else (0.0,):
            m_cpu = int(m * shares)
            m_gpu = m - m_cpu
            if m_gpu < 1:
                continue
            for bands in (1, 2, 4, 8, 16, 32, 64):
                if bands > max(n, 1):
                    break
                rows = list(_cuts(m_gpu, gpus))
                cols = _cuts(n, bands)
                if m_cpu:
                    t = max(64, math.ceil(m_cpu / max(1, cpu_threads)),
                            math.isqrt(max(1, m_cpu * n // MAX_TILES)))
                    cols = tuple(sorted(set(cols) | set(_cuts(n, math.ceil(n / t)))))
                    rows += [m_gpu + x for x in _cuts(m_cpu, math.ceil(m_cpu / t))[1:]]
                candidates.append(TilePlan(tuple(rows), cols, gpu_rows=len(_cuts(m_gpu, gpus)) - 1))
    if cpu_threads:
        smallest = max(64, math.isqrt(max(1, m * n // MAX_TILES)))
        for t in (2 ** k for k in range(6, 31)):
            if t < smallest:
                continue
            cpu_candidates.append(TilePlan(_cuts(m, math.ceil(m / t)), _cuts(n, math.ceil(n / t))))
            if t >= max(m, n):
                break
    best = None
    # GPU plans first, so that a tie goes to them; CPU-only plans are costed without the
    # GPUs (a CPU worker may take any of their tiles).
    for plan, n_gpus in [(c, gpus) for c in candidates] + [(c, 0) for c in cpu_candidates]:
        t = simulate(plan, model, n_gpus, cpu_threads)
        if best is None or t < best.predicted:
            best = replace(plan, predicted=t)
    return best if best is not None else TilePlan(_cuts(m, 1), _cuts(n, 1))


def calibrate(kinds=("cpu", "gpu"), *, size: int = 2048, repeats: int = 3) -> CostModel:
    """Measure the cost model's rates and overheads here.

    CPU: times tiles of ``size/4`` and ``size`` squared (random DNA, default scoring) and
    fits ``seconds = overhead + cells / rate`` through the medians.  GPU, when one is
    visible: one strip of the kernel (one sub-tile a launch) 16 and 64 sub-tiles wide
    gives the warp's rate and the task overhead (the slope and intercept of ``seconds``
    against launches); then a tile of 2,048 x 2,048 sub-tiles (512 K x 1 M cells; its
    middle launches as wide as the megabase benchmark's) gives the whole GPU's rate, the
    ``gpu_gcups`` for which :meth:`CostModel.gpu_seconds` equals its time (bisection).  A
    tile that ran as fast as its warps alone allow never filled the GPU and only bounds
    that rate from below; the default is kept when larger.  A task's overhead is at least Dask's per-task cost, the defaults'
    ``cpu_overhead``/``gpu_overhead``, which are kept when larger.

    Returns
    -------
    CostModel
        The defaults, with the kinds measured replaced.
    """
    rng = np.random.default_rng(7)
    scoring = Scoring(alphabet="dna")
    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    model = CostModel()

    def timed(fn, h, w):
        a = rng.integers(0, 4, h).astype(np.uint8)
        b = rng.integers(0, 4, w).astype(np.uint8)
        bounds = matrix_boundaries(h, w)
        fn(a[:64], b[:64], matrix, 5, 2, *matrix_boundaries(64, 64))  # compile
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn(a, b, matrix, 5, 2, *bounds)
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    if "cpu" in kinds:
        small, large = size // 4, size
        t_small, t_large = timed(score_tile, small, small), timed(score_tile, large, large)
        rate = (large ** 2 - small ** 2) / max(t_large - t_small, 1e-9) / 1e9
        overhead = max(0.0, t_small - small ** 2 / (rate * 1e9))
        model = replace(model, cpu_gcups=rate, cpu_overhead=max(overhead, model.cpu_overhead))
    if "gpu" in kinds and backend.gpu_here():
        from .kernels.cuda.tile import ROWS, WIDTH, score_tile_gpu

        sub_rows, sub_cols = 32 * ROWS, WIDTH
        sub = sub_rows * sub_cols
        model = replace(model, gpu_sub_rows=sub_rows, gpu_sub_cols=sub_cols)
        t16 = timed(score_tile_gpu, sub_rows, 16 * sub_cols)
        t64 = timed(score_tile_gpu, sub_rows, 64 * sub_cols)
        per_launch = max((t64 - t16) / 48, model.gpu_launch + 1e-9)
        overhead = max(0.0, t16 - 16 * per_launch)
        model = replace(model, gpu_warp_gcups=sub / (per_launch - model.gpu_launch) / 1e9,
                        gpu_overhead=max(overhead, model.gpu_overhead))
        side = 2048
        h, w = side * sub_rows, side * sub_cols
        measured = timed(score_tile_gpu, h, w)
        if replace(model, gpu_gcups=1e6).gpu_seconds(h, w) >= 0.98 * measured:
            # As fast as its warps alone allow: the GPU was never full, and its rate is
            # only known to exceed what the widest launch ran at.
            model = replace(model, gpu_gcups=max(model.gpu_gcups, side * model.gpu_warp_gcups))
        else:
            low, high = 1.0, 1e6  # GCUPS; gpu_seconds falls as gpu_gcups grows
            for _ in range(60):
                mid = math.sqrt(low * high)
                if replace(model, gpu_gcups=mid).gpu_seconds(h, w) > measured:
                    low = mid
                else:
                    high = mid
            model = replace(model, gpu_gcups=high)
    return model


# -- the score pass as a Dask DAG ----------------------------------------------------------

def _worker_gpu():
    """The index of this worker's GPU, or None (not a GPU worker, or not on a worker)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return None
    if not worker.state.total_resources.get("GPU", 0):
        return None
    name = str(worker.name)
    return int(name.rsplit("-", 1)[1]) if name.startswith("gpu-") and name[4:].isdigit() else 0


def _tile_task(a, b, r0, r1, c0, c1, top, left, matrix, gap_open, gap_extend, force_cpu):
    """One tile: boundaries from the neighbours' results (None on the matrix border)."""
    h, w = r1 - r0, c1 - c0
    top_h, top_f, left_h, left_e = matrix_boundaries(h, w)
    if top is not None:
        top_h, top_f = top.bottom_h, top.bottom_f
    if left is not None:
        left_h, left_e = left.right_h, left.right_e
    gpu = None if force_cpu else _worker_gpu()
    started = time.perf_counter()
    if gpu is not None:
        from numba import config, cuda

        from .kernels.cuda.tile import score_tile_gpu

        if gpu and not config.ENABLE_CUDASIM:  # GPU 0 is every thread's default device
            cuda.select_device(gpu)
        out = score_tile_gpu(a[r0:r1], b[c0:c1], matrix, gap_open, gap_extend,
                             top_h, top_f, left_h, left_e)
        kind = "gpu"
    else:
        out = score_tile(a[r0:r1], b[c0:c1], matrix, gap_open, gap_extend,
                         top_h, top_f, left_h, left_e)
        kind = "cpu"
    bottom_h, bottom_f, right_h, right_e, score, i, j = out
    best = (int(score), r0 + int(i), c0 + int(j)) if score > 0 else (0, 0, 0)
    return TileResult(bottom_h, bottom_f, right_h, right_e, best, kind,
                      time.perf_counter() - started)


def _tile_summary(result: TileResult):
    return result.best, result.kind, result.seconds


def _local_cluster(device: str, gpus: int):
    """An in-process Dask cluster: ``gpus`` GPU workers (one thread, resource ``GPU=1``)
    and, unless ``device == "gpu"``, one CPU worker with a thread per remaining core."""
    from distributed import Client, Scheduler, SpecCluster, Worker

    cores = os.cpu_count() or 1
    workers = {}
    if device in ("gpu", "both"):
        for g in range(gpus):
            workers[f"gpu-{g}"] = {"cls": Worker, "options": {
                "nthreads": 1, "resources": {"GPU": 1}, "dashboard": False}}
    if device in ("cpu", "both"):
        workers["cpu"] = {"cls": Worker, "options": {
            "nthreads": max(1, cores - len(workers)), "dashboard": False}}
    cluster = SpecCluster(workers=workers, scheduler={
        "cls": Scheduler, "options": {"dashboard_address": ":0"}},
        silence_logs=40)
    return Client(cluster, set_as_default=False)


def _client_workers(client):
    info = client.scheduler_info(n_workers=-1)["workers"].values()
    gpus = sum(1 for w in info if w.get("resources", {}).get("GPU", 0) > 0)
    threads = sum(w["nthreads"] for w in info if not w.get("resources", {}).get("GPU", 0))
    return gpus, threads


def _score_pass(client, a_future, b_future, plan, scoring, device, progress):
    """Submit the tile DAG; return the futures and the best cell (score, i, j)."""
    from dask.base import tokenize

    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    n_p, n_q = plan.shape
    token = tokenize(a_future.key, b_future.key, plan, scoring.gap_open, scoring.gap_extend,
                     device, time.time_ns())
    futures = {}
    for d in range(n_p + n_q - 1):
        for p in range(max(0, d - n_q + 1), min(n_p, d + 1)):
            q = d - p
            if device == "gpu" or (device == "both" and p < plan.gpu_rows):
                resources = {"GPU": 1}
            else:
                resources = None
            futures[p, q] = client.submit(
                _tile_task, a_future, b_future, plan.rows[p], plan.rows[p + 1], plan.cols[q],
                plan.cols[q + 1], futures.get((p - 1, q)), futures.get((p, q - 1)), matrix,
                scoring.gap_open, scoring.gap_extend, device == "cpu",
                key=f"swdask-tile-{token}-{p}-{q}", priority=-d, resources=resources)
    summaries = [client.submit(_tile_summary, f, key=f"swdask-tile-best-{token}-{p}-{q}",
                               priority=-(p + q)) for (p, q), f in futures.items()]
    if progress:
        import contextlib
        import sys

        from distributed import progress as show_progress

        with contextlib.redirect_stdout(sys.stderr):
            show_progress(summaries)
    best = (0, 0, 0)
    kinds = {"cpu": 0, "gpu": 0}
    busy = {"cpu": 0.0, "gpu": 0.0}
    for (score, i, j), kind, seconds in client.gather(summaries):
        kinds[kind] += 1
        busy[kind] += seconds
        if score > 0 and better(score, i, j, best[0], best[1], best[2]):
            best = (score, i, j)
    return futures, best, {"tiles_on": kinds, "busy_seconds": busy}


# -- traceback -----------------------------------------------------------------------------

# How the traceback cuts a rectangle (h x w = N cells) larger than a leaf: into square
# tiles of side t, whose boundaries one sweep keeps (score_grid / score_grid_gpu).
# - Work.  The path of a long alignment is near-diagonal: it crosses about (h + w) / t
#   tiles, 2S of an S x S grid, each recomputed at the next level up to the walk's entry
#   cell: 2N/S cells, so all levels together cost N / (1 - 2/S) (1.07 N at S = 32, 1.14 N
#   at 16, 1.33 N at the former fixed 8).
# - Leaves are walked on the CPU with a direction byte a cell: traceback_tile runs at 0.5
#   GCUPS (130 us for 256 x 256 on the 2-core development machine) plus about 12 us of
#   Python a leaf (_walk, _trace_rect and the call, measured on 16 x 16 leaves).  A path
#   of length P through leaves of side L costs P * L cells in 2P / L leaves:
#   P * (L / 0.5e9 + 24e-6 / L) s, least at L = 110 (0.44 us a residue of path); 256
#   costs 0.60 us (the former 2^22-cell leaves, L = 2048: 4.1 us).  LEAF_CELLS = 2^16
#   (L = 256) rather than 110^2 because the sweeps just above the leaves, 2P / t of them
#   with t proportional to L, each cost more fixed time than a leaf (a pool round an
#   anti-diagonal on the CPU, P + Q launches and the transfers on the GPU): halving L
#   would save 0.2 us a residue and double their number.
# - Sequential steps: the sweeps, 1 + 2S + (2S)^2 + ... (the deepest level dominates),
#   then the leaves.  So the fewest levels that reach leaves with at most
#   TRACE_MAX_SPLIT^2 = 1024 tiles a grid, each level cutting into the same number of
#   tiles, k = (N / LEAF_CELLS)^(1 / levels): larger k on top would only move sweeps to the
#   most numerous deepest level.
# - Memory: the cut lines of a grid hold 8 (S_r w + S_c h) <= 16 N / t bytes, so t is also
#   at least 16 N / TRACE_MEMORY; the grids of the levels along the recursion live at
#   once, each about k times smaller than the one above it.
# Example, the benchmark (2.46 Mb x 1 Mb, a path of 1 Mb ending at (1.7 M, 1 M)): N =
# 1.7e12, N / LEAF_CELLS = 2.6e7, 3 levels of k = 296: one sweep of the whole rectangle
# into a 23 x 14 grid of t = 76 k (360 MB of cuts; 3.4 s at the score pass's 500 GCUPS);
# the path crosses about 27 of its tiles: 27 sweeps of <= 5.8e9 cells (1e11 in all) into
# grids of t = 4.4 k; those tiles on the path, about 2 x 1 M / 4.4 k = 455 sweeps of
# <= 1.9e7 cells (6.5e9 in all) into 256 x 256 leaves; about 7,800 leaves (2.6e8 cells,
# 0.6 s on one core).  In all 1.07 N cells recomputed in about 480 sweeps and 7,800 leaf
# walks.  The former 8 x 8 grids, one call a tile, took here 5 levels to reach 2^22-cell
# leaves: 13 x 64 GPU calls of 4e8-cell tiles with a few dozen warps each, then about
# 100 x 64 sequential single-thread CPU calls of 6.4e6 cells (4e10 cells, over a minute),
# 800 x 64 more of 1e5, and 6,500 leaves of 1e5 cells.

def _trace_side(h: int, w: int) -> float:
    """Side of the square tiles of the traceback grid over an ``h x w`` rectangle larger
    than :data:`LEAF_CELLS` (the arithmetic is in the comment above)."""
    cells = h * w
    ratio = cells / LEAF_CELLS
    levels = max(1, math.ceil(math.log(ratio) / math.log(TRACE_MAX_SPLIT ** 2)))
    side = math.sqrt(cells / ratio ** (1 / levels))
    return max(side, 16 * cells / TRACE_MEMORY)


def _grid_lines(length: int, side: float, step: int = 1) -> tuple:
    """``0 = x_0 < x_1 < ... = length``: parts of about ``side`` (at least ``step``),
    interior lines on multiples of ``step``."""
    parts = max(1, math.ceil(length / max(side, step)))
    cuts = {round(k * length / parts / step) * step for k in range(1, parts)}
    return (0, *sorted(c for c in cuts if 0 < c < length), length)


def _cpu_grid(a, b, matrix, o, e, top_h, top_f, left_h, left_e):
    """The traceback grid of a rectangle on the CPU: ``(rows, cols, grid, "cpu")``."""
    h, w = len(a), len(b)
    side = _trace_side(h, w)
    rows, cols = _grid_lines(h, side), _grid_lines(w, side)
    if len(rows) == 2 and len(cols) == 2:  # a cap made the side too long: halve the longer
        rows, cols = (_grid_lines(h, h / 2), cols) if h >= w else (rows, _grid_lines(w, w / 2))
    grid = score_grid(a, b, matrix, o, e, top_h, top_f, left_h, left_e, rows[1:-1], cols[1:-1])
    return rows, cols, grid, "cpu"


def _gpu_grid(a, b, matrix, o, e, top_h, top_f, left_h, left_e):
    """The traceback grid on the GPU when the rectangle has :data:`GPU_TRACE_CELLS` and
    a cut fits the kernel's strips and sub-tiles (lines rounded to them), else
    :func:`_cpu_grid`."""
    from .kernels.cuda.tile import grid_shape, score_grid_gpu

    h, w = len(a), len(b)
    if h * w >= GPU_TRACE_CELLS:
        lane_rows, width = grid_shape(h, w)
        side = _trace_side(h, w)
        rows, cols = _grid_lines(h, side, 32 * lane_rows), _grid_lines(w, side, width)
        if len(rows) > 2 or len(cols) > 2:
            grid = score_grid_gpu(a, b, matrix, o, e, top_h, top_f, left_h, left_e,
                                  rows[1:-1], cols[1:-1], rows=lane_rows, width=width)
            return rows, cols, grid, "gpu"
    return _cpu_grid(a, b, matrix, o, e, top_h, top_f, left_h, left_e)


def _trace_stats():
    """Counters of one traceback (:func:`_traceback` returns them)."""
    return {"grid_cells": 0, "grids": {"cpu": 0, "gpu": 0}, "leaf_cells": 0, "leaves": 0,
            "depth": 0, "boundary_bytes": 0, "peak_boundary_bytes": 0}


def _trace_rect(a, b, matrix, o, e, top_h, top_f, left_h, left_e, end_i, end_j, state,
                grid_fn, chunks, stats, depth=0):
    """Walk the path back inside a rectangle with exact boundaries, from 1-based cell
    ``(end_i, end_j)`` in ``state``; append reversed op chunks to ``chunks``.

    ``grid_fn`` is :func:`_cpu_grid` or :func:`_gpu_grid`; ``stats`` gets the counts of
    :func:`_trace_stats`.  Returns ``(i, j, state, stopped)`` in the rectangle's
    coordinates.
    """
    stats["depth"] = max(stats["depth"], depth)
    if end_i * end_j <= LEAF_CELLS:
        ops, i, j, state, stopped = traceback_tile(a[:end_i], b[:end_j], matrix, o, e, top_h,
                                                   top_f, left_h, left_e, end_i, end_j, state)
        chunks.append(ops)
        stats["leaf_cells"] += end_i * end_j
        stats["leaves"] += 1
        return i, j, state, stopped
    # Too large for direction bytes: a grid over the rows and columns before the end, its
    # cut boundaries kept, then the same walk through it.
    a, b = a[:end_i], b[:end_j]
    top_h, top_f = top_h[:end_j + 1], top_f[:end_j]
    left_h, left_e = left_h[:end_i], left_e[:end_i]
    rows, cols, grid, kind = grid_fn(a, b, matrix, o, e, top_h, top_f, left_h, left_e)
    held = sum(x.nbytes for x in grid[:4])
    stats["grid_cells"] += end_i * end_j
    stats["grids"][kind] += 1
    stats["boundary_bytes"] += held
    stats["peak_boundary_bytes"] = max(stats["peak_boundary_bytes"], stats["boundary_bytes"])

    def boundaries(p, q):
        return (rows[p], cols[q],
                *grid_tile_inputs(grid, rows, cols, p, q, top_h, top_f, left_h, left_e))

    out = _walk(rows, cols, boundaries, a, b, matrix, o, e, end_i, end_j, state, grid_fn,
                chunks, stats, depth + 1)
    stats["boundary_bytes"] -= held
    return out


def _walk(rows, cols, boundaries, a, b, matrix, o, e, i, j, state, grid_fn, chunks, stats,
          depth=0):
    """Walk back through a grid of tiles from cell ``(i, j)``: into the tile holding it as
    an inner cell, then on through the tile above, on the left or diagonal, until the
    path stops or reaches row 0 or column 0 of the grid."""
    while i > 0 and j > 0:
        p = int(np.searchsorted(rows, i) - 1)  # rows[p] < i <= rows[p + 1]
        q = int(np.searchsorted(cols, j) - 1)
        r0, c0, t_h, t_f, l_h, l_e = boundaries(p, q)
        r1, c1 = rows[p + 1], cols[q + 1]
        li, lj, state, stopped = _trace_rect(
            a[r0:r1], b[c0:c1], matrix, o, e, np.ascontiguousarray(t_h), np.ascontiguousarray(t_f),
            np.ascontiguousarray(l_h), np.ascontiguousarray(l_e), i - r0, j - c0, state,
            grid_fn, chunks, stats, depth)
        i, j = r0 + li, c0 + lj
        if stopped:
            return i, j, state, True
    return i, j, state, False


def _traceback(client, futures, plan, a, b, scoring, best, grid_fn):
    """The path from the best end, through the score pass's tiles (checkpoints)."""
    score, ei, ej = best
    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    chunks = []
    stats = _trace_stats()
    if score > 0:
        def boundaries(p, q):
            h = plan.rows[p + 1] - plan.rows[p]
            w = plan.cols[q + 1] - plan.cols[q]
            t_h, t_f, l_h, l_e = matrix_boundaries(h, w)
            wanted = [futures[k] for k in ((p - 1, q), (p, q - 1)) if k in futures]
            got = dict(zip([k for k in ((p - 1, q), (p, q - 1)) if k in futures],
                           client.gather(wanted)))
            if (p - 1, q) in got:
                t_h, t_f = got[p - 1, q].bottom_h, got[p - 1, q].bottom_f
            if (p, q - 1) in got:
                l_h, l_e = got[p, q - 1].right_h, got[p, q - 1].right_e
            return plan.rows[p], plan.cols[q], t_h, t_f, l_h, l_e

        si, sj, _, _ = _walk(plan.rows, plan.cols, boundaries, a, b, matrix, scoring.gap_open,
                             scoring.gap_extend, ei, ej, STATE_H, grid_fn, chunks, stats)
    else:
        si = sj = ei = ej = 0
    ops = np.concatenate(chunks)[::-1].copy() if chunks else np.zeros(0, dtype=np.uint8)
    cigar, matches, mismatches, gap_opens, length = summarize_path(
        a, b, si, sj, ops, scoring.alphabet.unknown_code)
    return {"query_start": int(si), "subject_start": int(sj), "cigar": cigar_string(cigar),
            "matches": int(matches), "mismatches": int(mismatches),
            "gap_opens": int(gap_opens), "align_length": int(length),
            "pident": 100.0 * matches / length if length else 0.0, "ops": ops,
            "stats": stats}


# -- the API -------------------------------------------------------------------------------

def check_score_range(m: int, n: int, scoring: Scoring) -> None:
    """Refuse a pair whose local scores could leave the kernels' exact int32 range.

    Every local ``H`` lies in ``[0, max(s) * min(m, n)]`` and every ``E``/``F`` at most
    ``o + e`` below a non-negative ``H``; the bound must stay under ``2^30 - 2^20``: about
    537 million residues for DNA at match 2, 97 million for BLOSUM62 (max 11).

    Raises
    ------
    ValueError
    """
    bound = max(scoring.max_score, 0) * min(m, n) + scoring.gap_open + scoring.gap_extend
    if bound >= _SCORE_LIMIT:
        raise ValueError(f"pair of {m:,} x {n:,} residues may reach scores of {bound:,}, "
                         f"beyond the exact 32-bit range of the tile kernels ({_SCORE_LIMIT:,})")


def reverse_complement(codes: np.ndarray) -> np.ndarray:
    """Reverse complement of DNA codes (``ACGTN`` order; N stays N).

    Examples
    --------
    >>> from swdask.sequences.alphabet import DNA
    >>> DNA.decode(reverse_complement(DNA.encode("AACGN")))
    'NCGTT'
    """
    return _COMPLEMENT[np.asarray(codes, dtype=np.uint8)][::-1].copy()


def _sequence(value, alphabet, name):
    from .sequences.alphabet import get_alphabet

    seq_name, codes, seq_alphabet = one_sequence(value, alphabet or "auto", False, name)
    if isinstance(codes, str):
        codes = get_alphabet(alphabet or "dna").encode(codes, where=seq_name)
    return seq_name, np.ascontiguousarray(codes, dtype=np.uint8), seq_alphabet


def align_long(a, b, *, scoring: Scoring | None = None, tile="auto", device: str = "auto",
               traceback: bool = False, reverse_complement: bool = False, client=None,
               model: CostModel | None = None, progress: bool = False) -> LongAlignment:
    """Best local alignment of two long sequences, tiled over Dask's CPU and GPU workers.

    Parameters
    ----------
    a, b : str, path or numpy.ndarray
        Query and subject: letters, the path of a FASTA/FASTQ file (its first record),
        or residue codes of ``scoring.alphabet``.
    scoring : Scoring, optional
        Default: the alphabet's default (DNA: match 2, mismatch -3, gaps 5/2; protein
        BLOSUM62 11/1); the alphabet is detected from the files when not given.
    tile : "auto" or int, default "auto"
        Tile side; ``"auto"`` asks :func:`plan_tiles` and the cost model.
    device : {"auto", "cpu", "gpu", "both"}, default "auto"
        ``"cpu"``: every tile on the CPU kernel; ``"gpu"``: every tile on GPU workers;
        ``"both"``: GPU tile rows on GPU workers, the others on whichever worker takes
        them, each picking its kernel by whether it has a GPU; ``"auto"``: ``"both"``
        when a GPU (or a GPU worker) is there, else ``"cpu"``.
    traceback : bool, default False
        Also recover the alignment (CIGAR, identity) in bounded memory.
    reverse_complement : bool, default False
        Also align ``a`` to the reverse complement of ``b`` (DNA) and report the better
        strand (``"+"`` on a tie).
    client : distributed.Client, optional
        A Dask client whose workers run the tiles (GPU workers advertise ``GPU=1``).
        Default: an in-process cluster here, closed at the end.
    model : CostModel, optional
        Default :class:`CostModel` ().
    progress : bool, default False
        Dask's progress bar on stderr.

    Returns
    -------
    LongAlignment

    Raises
    ------
    ValueError
        Unknown device, a tile below 1, scores beyond int32, or reverse complement of
        protein.
    DeviceError
        ``device="gpu"`` or ``"both"`` with no GPU (or GPU worker).
    InvalidSequenceError
        A letter outside the alphabet, or an alphabet that does not match the scoring.

    Notes
    -----
    The score pass is exact Smith-Waterman (:mod:`swdask.kernels.cpu.reference`): the
    score and end equal the reference's, ties broken by the smallest subject end, then
    the smallest query end; the traceback's path is the reference's too.

    References
    ----------
    .. [1] Zou, H. et al. (2018). ASW: accelerating Smith-Waterman on coupled CPU-GPU
       architecture. Heterogeneous computing of the tiled DP as a DAG with a tile-size
       cost model.
    .. [2] de O. Sandes, E. F. & de Melo, A. C. M. A. (2013). Retrieving Smith-Waterman
       alignments with optimizations for megabase biological sequences using GPU
       (CUDAlign 2.0). IEEE TPDS 24(5).

    Examples
    --------
    >>> r = align_long("TTACGTACGTAA", "GGACGTACGTGG", tile=4, device="cpu", traceback=True)
    >>> r.score, r.query_start, r.query_end, r.cigar
    (16, 2, 10, '8=')
    """
    from .sequences.alphabet import get_alphabet

    backend.check_long_device(device)
    if tile != "auto" and (isinstance(tile, bool) or int(tile) < 1):
        raise ValueError(f"tile must be 'auto' or a positive whole number, not {tile!r}")
    alphabet = scoring.alphabet.name if scoring is not None else None
    a_name, a_codes, a_alpha = _sequence(a, alphabet, "query")
    b_name, b_codes, b_alpha = _sequence(b, alphabet, "subject")
    if scoring is None:
        scoring = Scoring.default((a_alpha or b_alpha or get_alphabet("dna")).name)
    for seq_alpha, name in ((a_alpha, a_name), (b_alpha, b_name)):
        if seq_alpha is not None and seq_alpha is not scoring.alphabet:
            raise InvalidSequenceError(f"{name}: the sequence is {seq_alpha.name} but the "
                                       f"scoring is for {scoring.alphabet.name}")
    if reverse_complement and scoring.alphabet.name != "dna":
        raise ScoringError("--reverse-complement needs DNA sequences and scoring")
    m, n = len(a_codes), len(b_codes)
    check_score_range(m, n, scoring)

    own = client is None
    if own:
        gpus = backend.cluster_gpus(device)
        device = backend.tile_device(device, gpus,
                                     missing="a GPU; none is visible (use device='cpu')")
        client = _local_cluster(device, gpus)
    try:
        n_gpus, cpu_threads = _client_workers(client)
        device = backend.tile_device(device, n_gpus, missing="a Dask worker with the resource GPU=1")
        if device == "cpu":
            n_gpus = 0
        if device == "gpu":
            cpu_threads = 0
        plan = plan_tiles(m, n, tile=tile, gpus=n_gpus, cpu_threads=cpu_threads, model=model)
        a_future = client.scatter(a_codes, broadcast=True, hash=False)
        strands = [("+", b_codes)]
        if reverse_complement:
            strands.append(("-", _rc(b_codes)))
        results = []
        for strand, subject in strands:
            b_future = client.scatter(subject, broadcast=True, hash=False)
            started = time.perf_counter()
            futures, best, stats = _score_pass(client, a_future, b_future, plan, scoring,
                                               device, progress)
            results.append((best, strand, subject, futures, time.perf_counter() - started, stats))
        # The better strand: higher score, then '+'.
        best, strand, subject, futures, seconds, stats = max(
            results, key=lambda r: (r[0][0], r[1] == "+"))
        for other in results:
            if other[1] != strand:
                client.cancel(list(other[3].values()))
        fields = {}
        tb_seconds = None
        if traceback:
            started = time.perf_counter()
            grid_fn = _gpu_grid if device in ("gpu", "both") and backend.gpu_here() else _cpu_grid
            path = _traceback(client, futures, plan, a_codes, subject, scoring, best, grid_fn)
            tb_seconds = time.perf_counter() - started
            path.pop("ops")
            stats["traceback"] = path.pop("stats")
            fields = path
        client.cancel(list(futures.values()))
    finally:
        if own:
            cluster = client.cluster
            client.close()
            cluster.close()
    score, ei, ej = best
    qs = fields.get("query_start")
    ss = fields.get("subject_start")
    devices = {k: v for k, v in stats["tiles_on"].items() if v}
    return LongAlignment(
        query=a_name, subject=b_name, strand=strand, score=int(score),
        query_start=qs, query_end=int(ei), subject_start=ss, subject_end=int(ej),
        query_length=m, subject_length=n, cigar=fields.get("cigar"),
        matches=fields.get("matches"), mismatches=fields.get("mismatches"),
        gap_opens=fields.get("gap_opens"), align_length=fields.get("align_length"),
        pident=fields.get("pident"), cells=m * n * len(strands), score_seconds=seconds,
        traceback_seconds=tb_seconds, device="+".join(sorted(devices)) or device,
        tile_rows=plan.shape[0], tile_cols=plan.shape[1],
        stats={**stats, "predicted_seconds": plan.predicted, "plan": plan})


_rc = reverse_complement


def planted_copy(codes, scoring: Scoring, *, spacing: int = 200, seed: int = 0):
    """A copy of ``codes`` with known substitutions and indels, and its alignment's score.

    Every ``spacing`` residues (none within ``spacing`` of either end) one mutation, in
    turn: a substitution, an insertion of 1-3 random residues into the copy, a deletion
    of 1-3 residues from it.  With mutations this sparse in real sequence, the planted
    alignment of ``codes`` against the copy is the best local one, end to end.

    Parameters
    ----------
    codes : numpy.ndarray of uint8
        DNA codes (ACGT = 0-3).
    scoring : Scoring
    spacing : int, default 200
    seed : int, default 0
        Seed of the NumPy generator that draws the mutations.

    Returns
    -------
    tuple
        ``(copy, score, ops)``: the mutated copy, the planted alignment's score (by
        :func:`swdask.kernels.cpu.traceback.rescore`) and its operations.

    Examples
    --------
    >>> from swdask.sequences.alphabet import DNA
    >>> seq = np.random.default_rng(1).integers(0, 4, 1000).astype(np.uint8)
    >>> copy, score, ops = planted_copy(seq, Scoring(alphabet="dna"), spacing=300)
    >>> len(copy) != len(seq) or score < 2 * len(seq)
    True
    """
    from .kernels.cpu.reference import OP_DEL, OP_INS, OP_MATCH
    from .kernels.cpu.traceback import rescore

    rng = np.random.default_rng(seed)
    codes = np.asarray(codes, dtype=np.uint8)
    pieces, ops = [], []
    pos = 0
    for k, site in enumerate(range(spacing, len(codes) - spacing, spacing)):
        pieces.append(codes[pos:site])
        ops.append(np.full(site - pos, OP_MATCH, dtype=np.uint8))
        kind = k % 3
        if kind == 0:  # substitution
            pieces.append(np.array([(codes[site] + rng.integers(1, 4)) % 4], dtype=np.uint8))
            ops.append(np.array([OP_MATCH], dtype=np.uint8))
            pos = site + 1
        elif kind == 1:  # insertion into the copy: a gap in the query ('D')
            size = int(rng.integers(1, 4))
            pieces.append(rng.integers(0, 4, size).astype(np.uint8))
            ops.append(np.full(size, OP_DEL, dtype=np.uint8))
            pos = site
        else:  # deletion from the copy: a gap in the subject ('I')
            size = int(rng.integers(1, 4))
            ops.append(np.full(size, OP_INS, dtype=np.uint8))
            pos = site + size
    pieces.append(codes[pos:])
    ops.append(np.full(len(codes) - pos, OP_MATCH, dtype=np.uint8))
    copy = np.concatenate(pieces)
    ops = np.concatenate(ops)
    score = rescore(codes, copy, 0, 0, ops, np.asarray(scoring.matrix), scoring.gap_open,
                    scoring.gap_extend)
    return copy, int(score), ops
