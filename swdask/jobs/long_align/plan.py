"""Long alignment's plan: the cost model of a tile on each kind of worker, and the tile
plan it chooses by simulating the wavefront (ASW's equations evaluated by simulation)."""
from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from ... import backend
from ...kernels.tile_contract import matrix_boundaries
from ...scoring import Scoring

__all__ = ["MAX_TILES", "CostModel", "TilePlan", "calibrate", "makespan_bound", "plan_tiles",
           "simulate"]


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
    on those 2 busy cores: at most 4 ms a tile).  GPU: fitted to whole runs of the tile
    kernel with unsigned indexing on an H200 (2 x H200 host, 2026-11-28): one GPU scored
    1 Mb x 1 Mb in 1.85 s, 2.46 Mb x 1 Mb in 3.45 s and 2.46 Mb squared in 7.50 s, and 2
    GPUs that last pair as 4 x 2 tiles in 8.37 s.  960 GCUPS for the whole GPU, 0.51 GCUPS
    a warp and 0.25 s a task predict all four within 4 % (1.89, 3.53, 7.35, 8.10 s).
    :func:`calibrate` there gave 810 and 0.76: one warp alone runs faster than inside a
    wavefront whose warps share the multiprocessors, and with its rate the model had
    chosen the 4 x 2 plan, predicted at 6.1 s, which ran 0.9 s slower than one GPU.  (On
    an H100, 2026-11-23, before that kernel's indexing fix: 612 and 0.50.)
    """

    cpu_gcups: float = 0.35
    cpu_overhead: float = 2e-3
    gpu_gcups: float = 960.0
    gpu_warp_gcups: float = 0.51
    gpu_overhead: float = 0.25
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
    def shape(self) -> tuple[int, int]:
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


def makespan_bound(plan: TilePlan, model: CostModel, gpus: int, cpu_threads: int) -> float:
    """A lower bound of :func:`simulate`'s makespan, from a few array operations.

    The larger of two bounds that list scheduling cannot beat: the DAG's critical path
    with every tile at its cheapest allowed kind and no wait for a worker (a tile starts
    after the tiles above and to its left), and the GPU-only rows' work spread over the
    GPUs.  :func:`plan_tiles` simulates only the candidates whose bound is below the best
    makespan found so far: 196 simulations of up to 4,096 tiles took 0.65-1.8 s of a
    1 Mb pair's 3 s run (most candidates predicted 100 times slower than the best).

    Examples
    --------
    >>> plan = TilePlan((0, 100, 200), (0, 100, 200, 300))
    >>> model = CostModel(cpu_gcups=1.0, cpu_overhead=0.0)
    >>> makespan_bound(plan, model, 0, 2), simulate(plan, model, 0, 2)  # the path: 4 tiles
    (4e-05, 4e-05)
    >>> makespan_bound(plan, model, 0, 1) < simulate(plan, model, 0, 1)  # one thread: 6
    True
    """
    heights = np.diff(np.asarray(plan.rows, np.int64))
    widths = np.diff(np.asarray(plan.cols, np.int64))
    n_p, n_q = len(heights), len(widths)
    if not n_p or not n_q:
        return 0.0
    # A plan has few distinct tile sides: cost each (height, width) once.
    unique_widths, of_width = np.unique(widths, return_inverse=True)
    rows = {}

    def row_costs(h: int, gpu_only: bool) -> np.ndarray:
        if (h, gpu_only) not in rows:
            cheapest = []
            for w in unique_widths.tolist():
                options = [model.gpu_seconds(h, w)] if gpus else []
                if cpu_threads and not gpu_only:
                    options.append(model.cpu_seconds(h, w))
                cheapest.append(min(options, default=math.inf))
            rows[h, gpu_only] = np.array(cheapest)[of_width]
        return rows[h, gpu_only]

    finish = np.zeros(n_q)
    gpu_work = 0.0
    for p in range(n_p):
        gpu_only = p < plan.gpu_rows
        cost = row_costs(int(heights[p]), gpu_only)
        if np.isinf(cost).any():  # a tile no worker may take: simulate's inf
            return math.inf
        if gpu_only:
            gpu_work += float(cost.sum())
        # finish[q] = max(above[q], finish[q - 1]) + cost[q], solved for the whole row:
        # the path enters the row at some column k <= q and runs right from there.
        total = np.cumsum(cost)
        finish = total + np.maximum.accumulate(finish - (total - cost))
    path = float(finish[-1])
    return max(path, gpu_work / gpus) if gpus else path


#: Most tiles of a candidate plan: more cost the scheduler more than they gain.
MAX_TILES = 4096


def plan_tiles(m: int, n: int, *, tile: int | Literal["auto"] = "auto", gpus: int = 0,
               cpu_threads: int = 1, model: CostModel | None = None) -> TilePlan:
    """Tile boundaries for an ``m x n`` matrix on ``gpus`` GPU workers and ``cpu_threads``
    CPU worker threads.

    Parameters
    ----------
    m, n : int
    tile : "auto" or int, default "auto"
        An int: square tiles of that side on every worker.  ``"auto"``: the cheapest of
        the candidates under ``model`` by :func:`simulate`: square CPU tiles (no GPU);
        tile rows for the GPUs (one per GPU, one in all, or 2 or 4 per GPU) cut into
        column bands (GPU only); and, with both, GPU tile
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
    # GPU tile rows: one per GPU first (ties go to it), then fewer and more.  A GPU tile
    # restarts the kernel's wavefront of sub-tiles, whose launches are one warp's time at
    # least, so cutting a matrix for several GPUs can cost more than it gains: by the
    # model up to 2.46 Mb squared a pair is fastest as one tile on one GPU (7.35 s; as 4
    # rows of 2 bands on 2 GPUs 8.10 s, and 8.37 s measured), and only a larger pair gains
    # from 2 (5 Mb squared: 27.4 s on one, 20.9 s on 2).  So one row (one GPU) and 2 or 4
    # rows a GPU are candidates too, and a plan for 2 GPUs is never predicted slower than
    # one for 1.
    gpu_row_counts = sorted({gpus, 1, 2 * gpus, 4 * gpus}, key=lambda r: (r != gpus, r))
    if gpus:
        for shares in (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75) if cpu_threads else (0.0,):
            m_cpu = int(m * shares)
            m_gpu = m - m_cpu
            if m_gpu < 1:
                continue
            for row_count, bands in itertools.product(gpu_row_counts, (1, 2, 4, 8, 16, 32, 64)):
                if bands > max(n, 1) or row_count * bands > MAX_TILES:
                    continue
                gpu_cuts = _cuts(m_gpu, row_count)
                rows = list(gpu_cuts)
                cols = _cuts(n, bands)
                if m_cpu:
                    t = max(64, math.ceil(m_cpu / max(1, cpu_threads)),
                            math.isqrt(max(1, m_cpu * n // MAX_TILES)))
                    cols = tuple(sorted(set(cols) | set(_cuts(n, math.ceil(n / t)))))
                    rows += [m_gpu + x for x in _cuts(m_cpu, math.ceil(m_cpu / t))[1:]]
                candidates.append(TilePlan(tuple(rows), cols, gpu_rows=len(gpu_cuts) - 1))
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
        # A candidate whose bound is above the best cannot replace it (the margin keeps
        # the choice exactly the full search's under rounding).
        if best is not None and (makespan_bound(plan, model, n_gpus, cpu_threads)
                                 > best.predicted * (1 + 1e-9)):
            continue
        t = simulate(plan, model, n_gpus, cpu_threads)
        if best is None or t < best.predicted:
            best = replace(plan, predicted=t)
    return best if best is not None else TilePlan(_cuts(m, 1), _cuts(n, 1))


def calibrate(kinds: Collection[str] = ("cpu", "gpu"), *, size: int = 2048,
              repeats: int = 3) -> CostModel:
    """Measure the cost model's rates and overheads here.

    CPU: times tiles of ``size/4`` and ``size`` squared (random DNA, default scoring) and
    fits ``seconds = overhead + cells / rate`` through the medians.  GPU, when one is
    visible: one strip of the kernel (one sub-tile a launch) 64 and 256 sub-tiles wide
    gives the warp's rate with the launch cost and the task overhead (the slope and
    intercept of ``seconds`` against launches); then a tile of 2,048 x 2,048 sub-tiles (512 K x 1 M cells; its
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
        from ...kernels.cpu.tile import score_tile  # Numba: the CPU's rate only

        small, large = size // 4, size
        t_small, t_large = timed(score_tile, small, small), timed(score_tile, large, large)
        rate = (large ** 2 - small ** 2) / max(t_large - t_small, 1e-9) / 1e9
        overhead = max(0.0, t_small - small ** 2 / (rate * 1e9))
        model = replace(model, cpu_gcups=rate, cpu_overhead=max(overhead, model.cpu_overhead))
    if "gpu" in kinds and backend.gpu_here():
        from ...kernels.cuda.tile import ROWS, WIDTH, score_tile_gpu

        sub_rows, sub_cols = 32 * ROWS, WIDTH
        sub = sub_rows * sub_cols
        model = replace(model, gpu_sub_rows=sub_rows, gpu_sub_cols=sub_cols)
        narrow, wide = 64, 256
        t_narrow = timed(score_tile_gpu, sub_rows, narrow * sub_cols)
        t_wide = timed(score_tile_gpu, sub_rows, wide * sub_cols)
        per_launch = max((t_wide - t_narrow) / (wide - narrow), 1e-9)
        # A one-sub-tile launch costs the launch plus a warp's sweep, and a strip cannot
        # tell the two apart once launching is as fast as a sweep.  Since launches pack
        # their parameters into one buffer, the GPU lane measured the step at or below
        # the 20 us default launch cost (H100, 2026-11-28); the 0.50 GCUPS a warp of
        # 2026-11-23 (262 us a sub-tile) was the host's launch time, which 5,860 launches
        # of a 1 Mb pair spent (2.6-2.9 s).  Either split gives narrow launches the
        # measured cost: at most half goes to the launch.
        launch = min(model.gpu_launch, per_launch / 2)
        overhead = max(0.0, t_narrow - narrow * per_launch)
        model = replace(model, gpu_launch=launch,
                        gpu_warp_gcups=sub / (per_launch - launch) / 1e9,
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
