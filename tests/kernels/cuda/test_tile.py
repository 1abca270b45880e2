"""The CUDA tile kernels (kernels/cuda/tile.py) against the CPU tile kernel, in the CUDA
simulator: one tile (``score_tile_gpu``: ragged strips and sub-tiles, upstream boundaries,
a protein matrix) and the checkpointing grid kernel (``score_grid_gpu``: the cut boundaries
of a grid equal to the CPU's grid and to the tiles one by one).  The GPU lane compares one
tile on a real card."""
from __future__ import annotations

import numpy as np
import pytest

from swdask.kernels.cpu.tile import grid_lines, matrix_boundaries, score_grid, score_tile
from swdask.scoring import Scoring
from swdask.testing import planted_copy
from tests.helpers import assert_grids_equal, tile_inputs, tiles_one_by_one, window_codes

# -- one tile (simulator on CI) ------------------------------------------------------------

def test_gpu_tile_kernel_matches_cpu_tile_kernel_in_the_simulator():
    """Ragged strips and sub-tiles, boundaries from an upstream tile, a protein matrix."""
    from swdask.kernels.cuda.tile import score_tile_gpu

    rng = np.random.default_rng(3)
    cases = [(Scoring(alphabet="dna"), 9, 13, 1, 3), (Scoring(match=1, mismatch=-1, gap_open=0,
             gap_extend=1), 70, 11, 1, 4), (Scoring("BLOSUM62"), 5, 17, 2, 8)]
    for scoring, h, w, rows, width in cases:
        alpha = scoring.matrix.shape[0] - 1
        a = rng.integers(0, alpha, h + 6).astype(np.uint8)
        b = rng.integers(0, alpha, w + 6).astype(np.uint8)
        k = min(len(a), w + 3)
        b[3:3 + k] = a[:k]  # related: the tile has gaps and a real best cell
        matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
        o, e = scoring.gap_open, scoring.gap_extend
        # Boundaries of the tile starting at (6, 6): from the real tiles above and left.
        up = score_tile(a[:6], b[6:], matrix, o, e, *matrix_boundaries(6, w))
        left = score_tile(a[6:], b[:6], matrix, o, e, *matrix_boundaries(h, 6))
        top_h = up[0].copy()
        top_h[0] = 0
        args = (a[6:], b[6:], matrix, o, e, top_h, up[1], left[2], left[3])
        want = score_tile(*args)
        got = score_tile_gpu(*args, rows=rows, width=width)
        for x, y in zip(want, got):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=str((h, w, rows, width)))


# -- the checkpointing grid kernel (simulator on CI) ---------------------------------------

# (scoring, h, w, rows per lane, width, row cuts, col cuts, r0, c0); strips of 32 * rows.
# Each sub-tile costs about 2 s in the simulator on the 2-core machine: few of them.
GPU_CASES = [
    # Ragged last strip and sub-tile right after the last cuts.
    (Scoring(alphabet="dna"), 67, 9, 1, 4, (32, 64), (4, 8), 3, 5),
    # Protein; one column cut of two possible; a row cut with one row after it.
    (Scoring("BLOSUM62"), 33, 11, 1, 5, (32,), (5,), 4, 2),
    # The simulator's own shape (2 x 8): only column cuts, rows less than a strip.
    (Scoring(match=5, mismatch=-4, gap_open=10, gap_extend=1), 45, 17, 2, 8, (), (8, 16), 2, 0),
]


@pytest.mark.parametrize("scoring, h, w, rows, width, row_cuts, col_cuts, r0, c0", GPU_CASES)
def test_gpu_checkpoint_grid_equals_cpu_grid(scoring, h, w, rows, width, row_cuts, col_cuts,
                                             r0, c0):
    from swdask.kernels.cuda.tile import score_grid_gpu

    a, b, matrix, o, e, bounds = tile_inputs(scoring, h, w, r0, c0, seed=h + w)
    where = str((scoring, h, w, rows, width, row_cuts, col_cuts, r0, c0))
    cpu = score_grid(a, b, matrix, o, e, *bounds, row_cuts, col_cuts)
    gpu = score_grid_gpu(a, b, matrix, o, e, *bounds, row_cuts, col_cuts, rows=rows, width=width)
    assert_grids_equal(gpu, cpu, where)
    one_by_one = tiles_one_by_one(a, b, matrix, o, e, bounds, grid_lines(row_cuts, h),
                                  grid_lines(col_cuts, w))
    assert_grids_equal(cpu, one_by_one, where)
    for x, y in zip(gpu.tile, score_tile(a, b, matrix, o, e, *bounds)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=where)


def test_gpu_grid_refuses_cuts_off_the_strips():
    from swdask.kernels.cuda.tile import score_grid_gpu

    matrix = np.ascontiguousarray(Scoring(alphabet="dna").matrix, dtype=np.int32)
    a = np.zeros(100, dtype=np.uint8)
    with pytest.raises(ValueError, match="multiples of 64"):
        score_grid_gpu(a, a, matrix, 5, 2, *matrix_boundaries(100, 100), [32], [], rows=2, width=8)
    with pytest.raises(ValueError, match="multiples of 8"):
        score_grid_gpu(a, a, matrix, 5, 2, *matrix_boundaries(100, 100), [], [12], rows=2, width=8)


# -- GPU lane ------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_tile_kernel_matches_cpu_on_a_real_gpu():
    from swdask.kernels.cuda.tile import score_tile_gpu

    codes = window_codes()
    scoring = Scoring(alphabet="dna")
    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    a = codes[:12_345]
    b, _, _ = planted_copy(codes[20_000:38_000], scoring, spacing=150, seed=9)
    b = np.concatenate([b, codes[1000:4000]])
    for h, w in [(12_345, len(b)), (257, 513), (4000, 1)]:
        args = (a[:h], b[:w], matrix, 5, 2, *matrix_boundaries(h, w))
        for x, y in zip(score_tile(*args), score_tile_gpu(*args)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=str((h, w)))
