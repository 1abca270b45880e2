"""One tile of a long local alignment on the CPU: boundaries in, boundaries out, under the
tile contract of :mod:`swdask.kernels.tile_contract` (what crosses a tile's border, the
best-cell rule, the grids of tiles).

Traceback: :func:`traceback_tile` recomputes a tile with one direction byte a cell (the
bits of :mod:`swdask.kernels.cpu.traceback`) and walks back from a cell and a state
until the path stops (``H == 0``) or leaves the tile through its top row or left column,
returning where and in which state, so that the walk continues in the next tile.

Grids: :func:`score_grid` computes a rectangle cut into a grid of tiles and keeps every
tile's boundaries (:class:`~swdask.kernels.tile_contract.GridBoundaries`);
:func:`swdask.kernels.cuda.tile.score_grid_gpu` returns the same from one GPU sweep.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
from numba import njit

# The direction bits, the walk (its states are those of traceback_tile), -inf (E on column
# 0 and F on row 0 of the whole matrix), the profile and the tie rule of the whole-pair
# traceback: a tile's cells and path are that kernel's.
from .. import tile_contract
from ..directions import NEG, STATE_E, STATE_F, STATE_H  # noqa: F401 (public here too)
from ..tile_contract import (  # noqa: F401 (public here too)
    GridBoundaries,
    grid_lines,
    grid_tile_inputs,
    matrix_boundaries,
)
from .threads import kernel_threads
from .traceback import decision_njit, row_best, subject_profile, walk_step_njit

if TYPE_CHECKING:
    import numpy.typing as npt


#: :func:`swdask.kernels.tile_contract.better`, compiled for the kernels below.
better = njit(cache=True, nogil=True)(tile_contract.better)


@njit(cache=True, nogil=True)
def score_tile(
    a: np.ndarray, b: np.ndarray, matrix: np.ndarray, gap_open: int, gap_extend: int,
    top_h: np.ndarray, top_f: np.ndarray, left_h: np.ndarray, left_e: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int, int]:
    """Local (Smith-Waterman) scores of one tile: boundaries out and the best cell.

    Parameters
    ----------
    a, b : numpy.ndarray of uint8
        Codes of the tile's query residues (``h``, its rows) and subject residues (``w``).
    matrix : numpy.ndarray of int32, 2-D
        Substitution scores indexed by codes.
    gap_open, gap_extend : int
        A gap of k residues costs ``gap_open + k * gap_extend``.
    top_h, top_f, left_h, left_e : numpy.ndarray of int32
        Boundaries (see the module docstring); they are not modified.

    Returns
    -------
    tuple
        ``(bottom_h, bottom_f, right_h, right_e, best, best_i, best_j)``: four int32
        arrays and three ints.

    Notes
    -----
    Row by row in three sweeps (the loops of :mod:`swdask.kernels.cpu.traceback`, without
    the direction bits): (1) F from the row above and ``max(diagonal, F, 0)``, with no
    dependency along the row, so it vectorises; (2) the E chain along the row, which
    cannot; (3) ``H = max(., E)`` and the row maximum, vectorised.  E may be taken from "H
    before E" of the cell on the left: ``E(i,j-1) - o - e <= E(i,j-1) - e`` since
    ``o >= 0``, so the maximum is the same.
    """
    h = a.shape[0]
    w = b.shape[0]
    o = np.int32(gap_open)
    e = np.int32(gap_extend)
    oe = np.int32(o + e)
    zero = np.int32(0)
    profile = subject_profile(matrix, b, w)
    h_prev = top_h.copy()
    h_cur = np.empty(w + 1, dtype=np.int32)
    f_row = top_f.copy()
    h_no_e = np.empty(w + 1, dtype=np.int32)
    e_row = np.empty(w + 1, dtype=np.int32)
    right_h = np.empty(h, dtype=np.int32)
    right_e = np.empty(h, dtype=np.int32)
    best = np.int32(0)
    best_i = 0
    best_j = 0
    for i in range(1, h + 1):
        prow = profile[a[i - 1]]
        left = left_h[i - 1]
        h_cur[0] = left
        h_no_e[0] = left
        # 1. F and the diagonal (vectorised; int32 casts keep the lanes 32-bit).
        for j in range(1, w + 1):
            f_val = max(np.int32(f_row[j - 1] - e), np.int32(h_prev[j] - oe))
            f_row[j - 1] = f_val
            h_no_e[j] = max(max(np.int32(h_prev[j - 1] + prow[j]), f_val), zero)
        # 2. The E chain alone: one subtraction and one max a cell on the serial path
        #    (fusing sweep 3 into it measured 2.4 times slower: it stops the pipelining).
        e_val = left_e[i - 1]
        for j in range(1, w + 1):
            e_val = max(np.int32(e_val - e), np.int32(h_no_e[j - 1] - oe))
            e_row[j] = e_val
        # 3. H and the row maximum (vectorised).
        row_max = zero
        for j in range(1, w + 1):
            hv = max(h_no_e[j], e_row[j])
            h_cur[j] = hv
            row_max = max(row_max, hv)
        right_h[i - 1] = h_cur[w]
        right_e[i - 1] = e_val if w > 0 else left_e[i - 1]
        best, best_i, best_j = row_best(h_cur, w, row_max, i, best, best_i, best_j)
        h_prev, h_cur = h_cur, h_prev
    if h > 0:
        h_prev[0] = left_h[h - 1]
    return h_prev, f_row, right_h, right_e, np.int64(best), best_i, best_j


@njit(cache=True, nogil=True)
def traceback_tile(a: np.ndarray, b: np.ndarray, matrix: np.ndarray, gap_open: int,
                   gap_extend: int, top_h: np.ndarray, top_f: np.ndarray, left_h: np.ndarray,
                   left_e: np.ndarray, end_i: int, end_j: int,
                   state: int) -> tuple[npt.NDArray[np.uint8], int, int, int, bool]:
    """Recompute a tile with direction bytes and walk the path back from a cell.

    Parameters
    ----------
    a, b, matrix, gap_open, gap_extend, top_h, top_f, left_h, left_e
        As :func:`score_tile`; only rows ``<= end_i`` and columns ``<= end_j`` are
        computed (nothing after the start of the walk can be on the path).
    end_i, end_j : int
        1-based tile coordinates of the cell where the walk starts (``1 <= end_i <= h``,
        ``1 <= end_j <= w``).
    state : int
        :data:`STATE_H`, :data:`STATE_E` or :data:`STATE_F`: the walk's state there.

    Returns
    -------
    tuple
        ``(ops_reversed, i, j, state, stopped)``: the operations emitted, last one
        first; where the walk ended (tile coordinates) and its state; ``stopped`` is True
        when it met ``H == 0`` in state H (the local alignment starts at ``(i, j)``),
        False when it left through row 0 or column 0 of the tile (``i == 0`` or
        ``j == 0``), where the caller continues in the neighbouring tile.

    Notes
    -----
    The direction bits and the walk are those of
    :func:`swdask.kernels.cpu.traceback.traceback_pair` (diagonal before E before F for
    H, opening before extending inside a gap, stop at the first ``H == 0``); only the
    boundaries come from the arguments instead of zeros, so the path is the reference's
    path through this tile.  Memory: ``(end_i + 1) * (end_j + 1)`` bytes.
    """
    rows = end_i
    cols = end_j
    o = np.int32(gap_open)
    e = np.int32(gap_extend)
    oe = np.int32(o + e)
    zero = np.int32(0)
    profile = subject_profile(matrix, b, cols)
    h_prev = top_h[:cols + 1].copy()
    h_cur = np.empty(cols + 1, dtype=np.int32)
    f_row = np.empty(cols + 1, dtype=np.int32)
    f_row[0] = NEG
    f_row[1:] = top_f[:cols]
    e_row = np.empty(cols + 1, dtype=np.int32)
    h_no_e = np.empty(cols + 1, dtype=np.int32)
    direction = np.empty((rows + 1, cols + 1), dtype=np.uint8)
    for i in range(1, rows + 1):
        prow = profile[a[i - 1]]
        left = left_h[i - 1]
        h_cur[0] = left
        h_no_e[0] = left
        e_row[0] = left_e[i - 1]
        dir_row = direction[i]
        f_above = f_row.copy()
        for j in range(1, cols + 1):
            f_val = max(np.int32(f_above[j] - e), np.int32(h_prev[j] - oe))
            f_row[j] = f_val
            h_no_e[j] = max(max(np.int32(h_prev[j - 1] + prow[j]), f_val), zero)
        e_val = e_row[0]
        for j in range(1, cols + 1):
            # Here the open term must use H(i, j-1) itself: the extend bit compares with it.
            e_val = max(np.int32(e_val - e), np.int32(h_cur[j - 1] - oe))
            e_row[j] = e_val
            h_cur[j] = max(h_no_e[j], e_val)
        for j in range(1, cols + 1):
            dir_row[j] = decision_njit(h_cur[j], e_row[j], f_row[j],
                                       np.int32(h_prev[j - 1] + prow[j]),
                                       np.int32(h_cur[j - 1] - oe), np.int32(h_prev[j] - oe),
                                       True)
        h_prev, h_cur = h_cur, h_prev

    ops_rev = np.empty(rows + cols, dtype=np.uint8)
    k = 0
    i = end_i
    j = end_j
    stopped = False
    while i > 0 and j > 0:
        state, i, j, k, stopped = walk_step_njit(direction[i, j], state, i, j, ops_rev, k)
        if stopped:
            break
    return ops_rev[:k].copy(), i, j, state, stopped


_POOLS = {}
_POOLS_LOCK = threading.Lock()


def _pool(threads):
    """The shared thread pool of ``threads`` workers (default: Numba's thread count, one a
    core unless ``NUMBA_NUM_THREADS`` or ``swdask --threads`` says otherwise)."""
    threads = max(1, int(threads or kernel_threads()))
    with _POOLS_LOCK:
        if threads not in _POOLS:
            _POOLS[threads] = ThreadPoolExecutor(max_workers=threads,
                                                 thread_name_prefix="swdask-grid")
        return _POOLS[threads]


def score_grid(a: np.ndarray, b: np.ndarray, matrix: np.ndarray, gap_open: int, gap_extend: int,
               top_h: np.ndarray, top_f: np.ndarray, left_h: np.ndarray, left_e: np.ndarray,
               row_cuts: Sequence[int] = (), col_cuts: Sequence[int] = (), *,
               threads: int | None = None) -> GridBoundaries:
    """:func:`score_tile` of a rectangle cut into a grid, keeping every tile's boundaries.

    Parameters
    ----------
    a, b, matrix, gap_open, gap_extend, top_h, top_f, left_h, left_e
        As :func:`score_tile`, for the whole rectangle (``h x w``).
    row_cuts, col_cuts : sequence of int, default ()
        Interior cuts, increasing, in ``(0, h)`` and ``(0, w)``.
    threads : int, optional
        Tiles computed at once; default Numba's thread count (the cores, unless
        ``NUMBA_NUM_THREADS`` or ``numba.set_num_threads`` says otherwise).  The threads are kept
        between calls (a traceback makes thousands of small grids).

    Returns
    -------
    GridBoundaries

    Raises
    ------
    ValueError
        Cuts outside the rectangle or not increasing.

    Notes
    -----
    Tiles of one anti-diagonal of the grid depend only on earlier anti-diagonals, so they
    run in parallel threads (:func:`score_tile` releases the GIL).  They write disjoint
    parts of the cut arrays: tile ``(p, q)`` writes columns ``c0 + 1 .. c1`` of row cut
    ``p`` and rows ``r0 + 1 .. r1`` of column cut ``q``, while its neighbours on the same
    anti-diagonal read only what earlier ones wrote (the corner ``c0`` of a row cut comes
    from the tile on the left).  The last row and column of tiles write the rectangle's
    own bottom and right boundaries, so the result is :func:`score_tile`'s exactly.
    """
    h, w = int(a.shape[0]), int(b.shape[0])
    rows = grid_lines(row_cuts, h)
    cols = grid_lines(col_cuts, w)
    n_p, n_q = len(rows) - 1, len(cols) - 1
    # One more line than the cuts each way: the last holds the rectangle's bottom / right.
    cut_h = np.empty((n_p, w + 1), dtype=np.int32)
    cut_f = np.empty((n_p, w), dtype=np.int32)
    col_h = np.empty((n_q, h), dtype=np.int32)
    col_e = np.empty((n_q, h), dtype=np.int32)
    if h:
        cut_h[:, 0] = left_h[np.asarray(rows[1:]) - 1]
    else:
        cut_h[:, 0] = top_h[0]
    work = GridBoundaries(cut_h, cut_f, col_h, col_e, ())
    bests = np.zeros((n_p, n_q, 3), dtype=np.int64)

    def run(p, q):
        r0, r1, c0, c1 = rows[p], rows[p + 1], cols[q], cols[q + 1]
        out = score_tile(a[r0:r1], b[c0:c1], matrix, gap_open, gap_extend,
                         *grid_tile_inputs(work, rows, cols, p, q, top_h, top_f, left_h, left_e))
        cut_h[p, c0 + 1:c1 + 1] = out[0][1:]
        cut_f[p, c0:c1] = out[1]
        col_h[q, r0:r1] = out[2]
        col_e[q, r0:r1] = out[3]
        bests[p, q] = (out[4], r0 + out[5], c0 + out[6])

    for d in range(n_p + n_q - 1):
        diagonal = [(p, d - p) for p in range(max(0, d - n_q + 1), min(n_p, d + 1))]
        if threads == 1 or len(diagonal) == 1:
            for p, q in diagonal:
                run(p, q)
        else:
            # list() waits for the whole diagonal and re-raises a tile's exception.
            list(_pool(threads).map(lambda pq: run(*pq), diagonal))
    best, best_i, best_j = 0, 0, 0
    for score, i, j in bests.reshape(-1, 3):
        if score > 0 and better(score, i, j, best, best_i, best_j):
            best, best_i, best_j = int(score), int(i), int(j)
    tile = (cut_h[-1].copy(), cut_f[-1].copy(), col_h[-1].copy(), col_e[-1].copy(),
            np.int64(best), best_i, best_j)
    return GridBoundaries(cut_h[:-1], cut_f[:-1], col_h[:-1], col_e[:-1], tile)
