"""Long pair alignment: megabase Smith-Waterman as a Dask DAG of tiles, exact traceback.

The local-alignment matrix of two long sequences (``A``, the query, ``m`` rows; ``B``,
the subject, ``n`` columns) is cut into tiles (:mod:`swdask.kernels.tile_contract` says what
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

Modules
-------
- :mod:`.plan`: :class:`CostModel`, :class:`TilePlan`, :func:`plan_tiles`, :func:`calibrate`;
- :mod:`.score`: the score pass as a Dask DAG of tile tasks;
- :mod:`.traceback`: the traceback through the checkpoints;
- :mod:`.api`: :func:`align_long` and :class:`LongAlignment`.
"""
from .api import LongAlignment, align_long, check_score_range, reverse_complement
from .plan import CostModel, TilePlan, calibrate, plan_tiles, simulate

__all__ = ["CostModel", "LongAlignment", "TilePlan", "align_long", "calibrate",
           "check_score_range", "plan_tiles", "reverse_complement", "simulate"]
