"""The CPU tile kernel (kernels/cpu/tile.py): tiles composed into the whole matrix against
the reference and the full-matrix traceback, and the cut boundaries of a grid swept at once
(``score_grid``, by the CPU's threads) equal to the tiles computed one by one with
``score_tile``."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from swdask.kernels.cpu.reference import align_reference
from swdask.kernels.cpu.tile import better, grid_lines, matrix_boundaries, score_grid, score_tile
from swdask.kernels.cpu.traceback import align_codes
from swdask.scoring import Scoring
from tests.helpers import RRNA, assert_grids_equal, related_pair, tile_inputs, tiles_one_by_one

SCORINGS = [Scoring(alphabet="dna"), Scoring(match=1, mismatch=-1, gap_open=0, gap_extend=1),
            Scoring(match=5, mismatch=-4, gap_open=10, gap_extend=1)]


def tiled(a, b, scoring, rows, cols, tile_fn=score_tile):
    """The whole matrix's best cell by composing tiles in wavefront order, no Dask."""
    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    bottoms, rights, best = {}, {}, (0, 0, 0)
    for p, q in itertools.product(range(len(rows) - 1), range(len(cols) - 1)):
        r0, r1, c0, c1 = rows[p], rows[p + 1], cols[q], cols[q + 1]
        t_h, t_f, l_h, l_e = matrix_boundaries(r1 - r0, c1 - c0)
        if p:
            t_h, t_f = bottoms[p - 1, q]
        if q:
            l_h, l_e = rights[p, q - 1]
        out = tile_fn(a[r0:r1], b[c0:c1], matrix, scoring.gap_open, scoring.gap_extend,
                      t_h, t_f, l_h, l_e)
        bottoms[p, q], rights[p, q] = out[:2], out[2:4]
        if out[4] > 0 and better(out[4], r0 + out[5], c0 + out[6], *best):
            best = (int(out[4]), r0 + int(out[5]), c0 + int(out[6]))
    return best


# -- tiles against the reference -----------------------------------------------------------

@pytest.mark.parametrize("scoring", SCORINGS, ids=["dna", "linear", "5-4"])
def test_tiles_compose_to_the_reference(scoring):
    rng = np.random.default_rng(11)
    for m, n in [(0, 5), (1, 1), (1, 9), (9, 1), (31, 33), (47, 40), (64, 65)]:
        a, b = related_pair(rng, m, n)
        ref = align_reference(a.tolist(), b.tolist(), scoring.matrix, scoring.gap_open,
                              scoring.gap_extend)
        for th, tw in [(1, 1), (3, 7), (7, 3), (16, 16), (100, 100)]:
            rows = tuple(range(0, m, th)) + (m,)
            cols = tuple(range(0, n, tw)) + (n,)
            got = tiled(a, b, scoring, rows, cols)
            assert got == (ref[0], ref[2], ref[4]), (scoring, m, n, th, tw)


def test_tiles_on_kilobase_real_pairs_match_the_full_matrix():
    """Two 16S genes (2 kb class) cut in tiles of odd sizes: score and ends of the
    traceback kernel's whole-matrix pass (itself checked against the reference)."""
    from swdask.sequences.store import load_sequences

    batch = load_sequences(RRNA)
    scoring = Scoring(alphabet="dna")
    for x, y in [(0, 1), (5, 17)]:
        a, b = batch.codes(x), batch.codes(y)
        ref = align_codes(a, b, scoring)
        for t in (97, 211, 1000):
            rows = tuple(range(0, len(a), t)) + (len(a),)
            cols = tuple(range(0, len(b), t + 6)) + (len(b),)
            got = tiled(a, b, scoring, rows, cols)
            assert got == (ref["score"], ref["query_end"], ref["subject_end"]), (x, y, t)


def test_protein_tiles_match_the_reference():
    rng = np.random.default_rng(5)
    scoring = Scoring("BLOSUM62")
    for m, n in [(30, 45), (50, 40)]:
        a = rng.integers(0, 24, m).astype(np.uint8)
        b = np.concatenate([rng.integers(0, 24, 5), a[5:25], rng.integers(0, 24, n - 25)]).astype(np.uint8)
        ref = align_reference(a.tolist(), b.tolist(), scoring.matrix, 11, 1)
        assert tiled(a, b, scoring, (0, 13, m), (0, 8, 20, n)) == (ref[0], ref[2], ref[4])


# -- grids: cut boundaries of one sweep ----------------------------------------------------

# Odd sizes; cuts next to the edges (1 and h - 1), a single line, none on one side.
CPU_CASES = [
    (Scoring(alphabet="dna"), 37, 29, (1, 12, 36), (5, 28), 0, 0),
    (Scoring(alphabet="dna"), 50, 41, (25,), (), 7, 3),
    (Scoring(match=1, mismatch=-1, gap_open=0, gap_extend=1), 33, 64, (), (1, 2, 63), 4, 9),
    (Scoring("BLOSUM62"), 45, 38, (2, 20, 44), (17, 19, 37), 5, 6),
    (Scoring("PAM30", gap_open=9, gap_extend=1), 1, 30, (), (10, 20), 3, 0),
]


@pytest.mark.parametrize("scoring, h, w, row_cuts, col_cuts, r0, c0", CPU_CASES)
def test_cpu_grid_equals_tiles_one_by_one(scoring, h, w, row_cuts, col_cuts, r0, c0):
    a, b, matrix, o, e, bounds = tile_inputs(scoring, h, w, r0, c0, seed=h * w)
    want = tiles_one_by_one(a, b, matrix, o, e, bounds, grid_lines(row_cuts, h),
                            grid_lines(col_cuts, w))
    whole = score_tile(a, b, matrix, o, e, *bounds)
    for threads in (1, None):
        got = score_grid(a, b, matrix, o, e, *bounds, row_cuts, col_cuts, threads=threads)
        where = str((scoring, h, w, row_cuts, col_cuts, r0, c0, threads))
        assert_grids_equal(got, want, where)
        for x, y in zip(got.tile, whole):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=where)


def test_grid_edges_and_errors():
    matrix = np.ascontiguousarray(Scoring(alphabet="dna").matrix, dtype=np.int32)
    empty = np.zeros(0, dtype=np.uint8)
    b = np.array([0, 1, 2], dtype=np.uint8)
    got = score_grid(empty, b, matrix, 5, 2, *matrix_boundaries(0, 3))
    assert got.row_h.shape == (0, 4) and got.col_h.shape == (0, 0)
    np.testing.assert_array_equal(got.tile[0], np.zeros(4, dtype=np.int32))
    for cuts in ([0], [3], [2, 1], [1, 1]):
        with pytest.raises(ValueError, match="must be increasing multiples of 1"):
            score_grid(b, b, matrix, 5, 2, *matrix_boundaries(3, 3), cuts, ())
    with pytest.raises(ValueError, match=r"^cuts \[10\] must be increasing multiples of 4 "
                                         r"strictly inside \(0, 20\)$"):
        grid_lines([10], 20, step=4)
