"""The tile contract of a long local alignment, shared by the CPU and GPU tile kernels
(:mod:`swdask.kernels.cpu.tile`, :mod:`swdask.kernels.cuda.tile`) and the long alignment's
host code, without Numba: a GPU job that scores its tiles on the GPU never imports it.

A tile covers rows ``(r0, r1]`` (query residues ``r0 .. r1-1``) and columns ``(c0, c1]``
(subject residues ``c0 .. c1-1``) of the Smith-Waterman matrix of
:mod:`swdask.kernels.cpu.reference` (local mode, ``h = r1 - r0`` rows, ``w = c1 - c0``
columns).  Everything that crosses its border travels in four int32 arrays:

==========  ========  ===============================================================
name        length    values
==========  ========  ===============================================================
``top_h``   ``w + 1`` ``H(r0, c0 .. c1)``: the row above, its first cell the corner
``top_f``   ``w``     ``F(r0, c0+1 .. c1)``: vertical gaps entering from above
``left_h``  ``h``     ``H(r0+1 .. r1, c0)``: the column on the left
``left_e``  ``h``     ``E(r0+1 .. r1, c0)``: horizontal gaps entering from the left
==========  ========  ===============================================================

and the tile returns the same four for its neighbours: ``bottom_h`` (``H(r1, c0 .. c1)``,
corner included, so the tile below-right finds its corner there), ``bottom_f``,
``right_h`` and ``right_e``.  Row 0 and column 0 of the whole matrix are ``H = 0`` with
``E = F = -inf`` (:data:`NEG` stands for ``-inf``).  Given exact boundaries the tile's
cells equal the reference's, so tiles compose into the whole matrix.

Best cell: the tile's largest ``H`` with the reference's tie rule (smallest subject end
``j``, then smallest query end ``i``), as 1-based tile coordinates; ``(0, 0, 0)`` when no
cell is positive.  Since the rule is a total order on cells, the best of the whole
matrix is the best of the tiles' bests under the same order (:func:`better`).

Grids: :func:`swdask.kernels.cpu.tile.score_grid` computes a rectangle cut at interior row
cuts ``r_1 < r_2 < ...`` and column cuts ``c_1 < c_2 < ...`` into a grid of tiles, and
keeps every tile's boundaries (a :class:`GridBoundaries`): for each row cut ``r``
(rectangle coordinates) ``row_h[k] = H(r, 0 .. w)`` (index 0 is the rectangle's left
boundary ``left_h[r - 1]``, the corner of the tiles below, as in ``bottom_h``) and
``row_f[k] = F(r, 1 .. w)``; for each column cut ``c``, ``col_h[k] = H(1 .. h, c)`` and
``col_e[k] = E(1 .. h, c)``. The tile between row cuts ``p - 1, p`` and column cuts ``q -
1, q`` then reads its four boundaries from slices of those (:func:`grid_tile_inputs`), so a
traceback can walk through the grid without recomputing it. Memory: ``O(h * column cuts + w
* row cuts)``. :func:`swdask.kernels.cuda.tile.score_grid_gpu` returns the same from one
GPU sweep.

Scores are exact int32: callers check that ``|H|`` stays below ``2^30 - 2^20`` (local
scores are at most ``max(s) * min(m, n)``; ``E`` and ``F`` at least ``-(o + e)`` below
a non-negative ``H``).
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from .directions import NEG

__all__ = ["NEG", "GridBoundaries", "better", "grid_lines", "grid_tile_inputs",
           "matrix_boundaries"]


def better(score_a: int, i_a: int, j_a: int, score_b: int, i_b: int, j_b: int) -> bool:
    """Whether cell a beats cell b: higher score, then smaller ``j``, then smaller ``i``
    (compiled by Numba for the CPU kernels as :func:`swdask.kernels.cpu.tile.better`).

    Examples
    --------
    >>> better(5, 9, 3, 5, 1, 4), better(5, 1, 4, 5, 9, 3), better(4, 0, 0, 5, 9, 9)
    (True, False, False)
    """
    if score_a != score_b:
        return score_a > score_b
    if j_a != j_b:
        return j_a < j_b
    return i_a < i_b


def matrix_boundaries(h: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(top_h, top_f, left_h, left_e)`` of a tile on row 0 and column 0 of the matrix.

    Examples
    --------
    >>> top_h, top_f, left_h, left_e = matrix_boundaries(2, 3)
    >>> top_h.tolist(), left_e.tolist() == [NEG, NEG]
    ([0, 0, 0, 0], True)
    """
    return (np.zeros(w + 1, dtype=np.int32), np.full(w, NEG, dtype=np.int32),
            np.zeros(h, dtype=np.int32), np.full(h, NEG, dtype=np.int32))


class GridBoundaries(NamedTuple):
    """Boundaries of every tile of a grid (layout in the module docstring), and the
    rectangle's own result as :func:`swdask.kernels.cpu.tile.score_tile` gives it (``tile``).

    ``row_h``: int32 ``(row cuts, w + 1)``; ``row_f``: ``(row cuts, w)``; ``col_h`` and
    ``col_e``: ``(column cuts, h)``.
    """

    row_h: np.ndarray
    row_f: np.ndarray
    col_h: np.ndarray
    col_e: np.ndarray
    tile: tuple


def grid_lines(cuts: Iterable[int], length: int, step: int = 1) -> tuple[int, ...]:
    """``(0, *cuts, length)`` after checking that the cuts are interior, increasing and
    multiples of ``step``.

    Raises
    ------
    ValueError

    Examples
    --------
    >>> grid_lines([4, 8], 10, step=4)
    (0, 4, 8, 10)
    """
    cuts = tuple(int(c) for c in cuts)
    lines = (0, *cuts, int(length))
    if cuts and (any(x >= y for x, y in itertools.pairwise(lines)) or any(c % step for c in cuts)):
        raise ValueError(f"cuts {list(cuts)} must be increasing multiples of {step} strictly "
                         f"inside (0, {length})")
    return lines


def grid_tile_inputs(grid: GridBoundaries, rows: Sequence[int], cols: Sequence[int], p: int,
                     q: int, top_h: np.ndarray, top_f: np.ndarray, left_h: np.ndarray,
                     left_e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(top_h, top_f, left_h, left_e)`` of tile ``(p, q)`` of a grid with lines ``rows``
    and ``cols`` (from :func:`grid_lines`): slices of the grid's cut boundaries, or of
    the rectangle's own on its first tile row and column.  No copies."""
    r0, r1, c0, c1 = rows[p], rows[p + 1], cols[q], cols[q + 1]
    if p:
        t_h, t_f = grid.row_h[p - 1, c0:c1 + 1], grid.row_f[p - 1, c0:c1]
    else:
        t_h, t_f = top_h[c0:c1 + 1], top_f[c0:c1]
    if q:
        l_h, l_e = grid.col_h[q - 1, r0:r1], grid.col_e[q - 1, r0:r1]
    else:
        l_h, l_e = left_h[r0:r1], left_e[r0:r1]
    return t_h, t_f, l_h, l_e
