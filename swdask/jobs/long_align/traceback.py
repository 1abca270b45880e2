"""Long alignment's traceback in bounded memory: the score pass's tile boundaries are
checkpoints.

From the best end the path is walked back tile by tile, each score-pass tile on the path
a task on a worker (:func:`trace_on_workers`); a tile on the path is recomputed
(restricted to the rows and columns before the walk's entry cell) either directly with
one direction byte a cell, when small (a *leaf*, :data:`LEAF_CELLS`), or as a grid of
tiles whose boundaries one sweep keeps (:func:`cpu_grid`: the grid's tiles of an
anti-diagonal in parallel threads; :func:`gpu_grid`: one checkpointing kernel sequence on
the GPU), walked the same way.  The arithmetic of the grid's size is in the comment above
:func:`_trace_side`.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ...kernels.cpu.tile import (
    STATE_H,
    grid_tile_inputs,
    matrix_boundaries,
    score_grid,
    traceback_tile,
)
from ...kernels.paths import cigar_string, summarize_path
from .score import select_worker_gpu

if TYPE_CHECKING:
    from distributed import Client, Future

    from ...kernels.cpu.tile import GridBoundaries
    from ...scoring import Scoring
    from .plan import TilePlan

    #: What :func:`cpu_grid` and :func:`gpu_grid` return: row lines, column lines, the
    #: grid's boundaries and where it was computed.
    Grid = tuple[tuple[int, ...], tuple[int, ...], GridBoundaries, str]

__all__ = ["GPU_TRACE_CELLS", "LEAF_CELLS", "TRACE_MAX_SPLIT", "TRACE_MEMORY", "cpu_grid",
           "gpu_grid", "trace_on_workers"]

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


def cpu_grid(a: np.ndarray, b: np.ndarray, matrix: np.ndarray, o: int, e: int,
             top_h: np.ndarray, top_f: np.ndarray, left_h: np.ndarray,
             left_e: np.ndarray) -> Grid:
    """The traceback grid of a rectangle on the CPU: ``(rows, cols, grid, "cpu")``."""
    h, w = len(a), len(b)
    side = _trace_side(h, w)
    rows, cols = _grid_lines(h, side), _grid_lines(w, side)
    if len(rows) == 2 and len(cols) == 2:  # a cap made the side too long: halve the longer
        rows, cols = (_grid_lines(h, h / 2), cols) if h >= w else (rows, _grid_lines(w, w / 2))
    grid = score_grid(a, b, matrix, o, e, top_h, top_f, left_h, left_e, rows[1:-1], cols[1:-1])
    return rows, cols, grid, "cpu"


def gpu_grid(a: np.ndarray, b: np.ndarray, matrix: np.ndarray, o: int, e: int,
             top_h: np.ndarray, top_f: np.ndarray, left_h: np.ndarray,
             left_e: np.ndarray) -> Grid:
    """The traceback grid on the GPU when the rectangle has :data:`GPU_TRACE_CELLS` and
    a cut fits the kernel's strips and sub-tiles (lines rounded to them), else
    :func:`cpu_grid`."""
    from ...kernels.cuda.tile import grid_shape, score_grid_gpu

    h, w = len(a), len(b)
    if h * w >= GPU_TRACE_CELLS:
        lane_rows, width = grid_shape(h, w)
        side = _trace_side(h, w)
        rows, cols = _grid_lines(h, side, 32 * lane_rows), _grid_lines(w, side, width)
        if len(rows) > 2 or len(cols) > 2:
            grid = score_grid_gpu(a, b, matrix, o, e, top_h, top_f, left_h, left_e,
                                  rows[1:-1], cols[1:-1], rows=lane_rows, width=width)
            return rows, cols, grid, "gpu"
    return cpu_grid(a, b, matrix, o, e, top_h, top_f, left_h, left_e)


def _trace_stats():
    """Counters of one traceback (:func:`trace_on_workers` returns them)."""
    return {"grid_cells": 0, "grids": {"cpu": 0, "gpu": 0}, "leaf_cells": 0, "leaves": 0,
            "depth": 0, "boundary_bytes": 0, "peak_boundary_bytes": 0}


def _trace_rect(a, b, matrix, o, e, top_h, top_f, left_h, left_e, end_i, end_j, state,
                grid_fn, chunks, stats, depth=0):
    """Walk the path back inside a rectangle with exact boundaries, from 1-based cell
    ``(end_i, end_j)`` in ``state``; append reversed op chunks to ``chunks``.

    ``grid_fn`` is :func:`cpu_grid` or :func:`gpu_grid`; ``stats`` gets the counts of
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


def _trace_tile(a, b, r0, r1, c0, c1, top, left, matrix, gap_open, gap_extend, end_i, end_j,
                state, gpu_grids):
    """One score-pass tile of the walk, as a task on a worker: the path back from its cell
    ``(end_i, end_j)`` (tile coordinates) to where it leaves the tile or stops.

    The tile's boundaries come from the neighbours' :class:`TileResult` (None on the
    matrix border), as in the score pass.  Its grids run on this worker's GPU when
    ``gpu_grids`` and the worker has one, else on its CPU threads.  Returns the reversed
    op chunks joined, the exit cell, state, whether the path stopped, and the counters.
    """
    top_h, top_f, left_h, left_e = matrix_boundaries(r1 - r0, c1 - c0)
    if top is not None:
        top_h, top_f = top.bottom_h, top.bottom_f
    if left is not None:
        left_h, left_e = left.right_h, left.right_e
    grid_fn = gpu_grid if gpu_grids and select_worker_gpu() else cpu_grid
    chunks, stats = [], _trace_stats()
    i, j, state, stopped = _trace_rect(
        a[r0:r1], b[c0:c1], matrix, gap_open, gap_extend, np.ascontiguousarray(top_h),
        np.ascontiguousarray(top_f), np.ascontiguousarray(left_h), np.ascontiguousarray(left_e),
        end_i, end_j, state, grid_fn, chunks, stats)
    ops = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.uint8)
    return ops, i, j, state, stopped, stats


def _add_stats(total: dict, part: dict) -> None:
    """Add one tile's traceback counters to the whole walk's."""
    for key in ("grid_cells", "leaf_cells", "leaves"):
        total[key] += part[key]
    for kind in total["grids"]:
        total["grids"][kind] += part["grids"][kind]
    total["depth"] = max(total["depth"], part["depth"])
    total["peak_boundary_bytes"] = max(total["peak_boundary_bytes"], part["peak_boundary_bytes"])


def trace_on_workers(client: Client, futures: dict[tuple[int, int], Future], plan: TilePlan,
                     a_future: Future, b_future: Future, a: np.ndarray, b: np.ndarray,
                     scoring: Scoring, best: tuple[int, int, int],
                     gpu_grids: bool) -> dict[str, Any]:
    """The path from the best end through the score pass's tiles (checkpoints), walked
    tile by tile, each tile a task on a Dask worker.

    The client only follows the path: for each tile it enters, one task (on a worker with
    the resource ``GPU`` when ``gpu_grids``, else on any worker) takes that tile's two
    neighbour boundaries from the score pass and returns the path through it.  So the
    client process needs no GPU and holds no grid, and only the boundaries of the tiles
    on the path move.  ``a`` and ``b`` are the codes of ``a_future`` and ``b_future``
    (the summary of the path reads them here).
    """
    score, ei, ej = best
    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    resources = {"GPU": 1} if gpu_grids else None
    chunks = []
    stats = _trace_stats()
    i, j, state = int(ei), int(ej), STATE_H
    while score > 0 and i > 0 and j > 0:
        p = int(np.searchsorted(plan.rows, i) - 1)  # rows[p] < i <= rows[p + 1]
        q = int(np.searchsorted(plan.cols, j) - 1)
        r0, c0 = plan.rows[p], plan.cols[q]
        task = client.submit(_trace_tile, a_future, b_future, r0, plan.rows[p + 1], c0,
                             plan.cols[q + 1], futures.get((p - 1, q)), futures.get((p, q - 1)),
                             matrix, scoring.gap_open, scoring.gap_extend, i - r0, j - c0,
                             state, gpu_grids, resources=resources, pure=False)
        ops, li, lj, state, stopped, tile_stats = task.result()
        task.release()
        chunks.append(ops)
        _add_stats(stats, tile_stats)
        i, j = r0 + li, c0 + lj
        if stopped:
            break
    si, sj = (i, j) if score > 0 else (0, 0)
    ops = np.concatenate(chunks)[::-1].copy() if chunks else np.zeros(0, dtype=np.uint8)
    cigar, matches, mismatches, gap_opens, length = summarize_path(
        a, b, si, sj, ops, scoring.alphabet.unknown_code)
    return {"query_start": int(si), "subject_start": int(sj), "cigar": cigar_string(cigar),
            "matches": int(matches), "mismatches": int(mismatches),
            "gap_opens": int(gap_opens), "align_length": int(length),
            "pident": 100.0 * matches / length if length else 0.0, "ops": ops,
            "stats": stats}
