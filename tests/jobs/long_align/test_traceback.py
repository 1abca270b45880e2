"""The long-alignment traceback's grids (swdask.jobs.long_align.traceback._trace_rect): the cut boundaries
of a grid swept at once, by the CPU's threads (kernels/cpu/tile.py ``score_grid``) and by
the checkpointing GPU kernel in the simulator (kernels/cuda/tile.py ``score_grid_gpu``),
equal to the boundaries of the tiles computed one by one with ``score_tile``; the walk
through those grids equal to the full-matrix traceback of ``align_codes``.  The GPU lane
compares the real GPU's grid with the CPU's on a few-hundred-kb pair."""
from __future__ import annotations

import gzip
import itertools
from pathlib import Path

import numpy as np
import pytest

from swdask.jobs.long_align import planted_copy
from swdask.jobs.long_align import traceback as la
from swdask.sequences.alphabet import DNA
from swdask.kernels.cpu.tile import (STATE_H, grid_lines, matrix_boundaries, score_grid,
                                     score_tile)
from swdask.kernels.cpu.traceback import align_codes, cigar_string, summarize_path
from swdask.scoring import Scoring

WINDOW = Path(__file__).parents[2] / "data" / "NCTC11397_window40k.fna.gz"


def window_codes() -> np.ndarray:
    with gzip.open(WINDOW, "rt") as handle:
        return DNA.encode("".join(line.strip() for line in handle if not line.startswith(">")))


def related(rng, alphabet, m, n):
    """Two random sequences sharing a mutated stretch with an indel (gaps, a real best)."""
    a = rng.integers(0, alphabet, m).astype(np.uint8)
    b = rng.integers(0, alphabet, n).astype(np.uint8)
    k = min(m, n) * 2 // 3
    piece = a[m // 6:m // 6 + k].copy()
    piece[::6] = (piece[::6] + 1) % alphabet
    piece = np.delete(piece, np.arange(4, len(piece), 13))
    b[n // 7:n // 7 + len(piece)] = piece[:n - n // 7]
    return a, b


def upstream_boundaries(a, b, matrix, o, e, r0, c0):
    """The exact boundaries of the rectangle from ``(r0, c0)`` to the end of the matrix:
    the bottom row of the rows above it, the right column of the columns on its left."""
    above = score_tile(a[:r0], b, matrix, o, e, *matrix_boundaries(r0, len(b)))
    left = score_tile(a, b[:c0], matrix, o, e, *matrix_boundaries(len(a), c0))
    return above[0][c0:].copy(), above[1][c0:].copy(), left[2][r0:].copy(), left[3][r0:].copy()


def tiles_one_by_one(a, b, matrix, o, e, bounds, rows, cols):
    """The grid's cut boundaries by composing score_tile calls, the slow way."""
    top_h, top_f, left_h, left_e = bounds
    h, w = len(a), len(b)
    row_h = np.zeros((len(rows) - 2, w + 1), dtype=np.int32)
    row_f = np.zeros((len(rows) - 2, w), dtype=np.int32)
    col_h = np.zeros((len(cols) - 2, h), dtype=np.int32)
    col_e = np.zeros((len(cols) - 2, h), dtype=np.int32)
    bottoms, rights = {}, {}
    for p, q in itertools.product(range(len(rows) - 1), range(len(cols) - 1)):
        r0, r1, c0, c1 = rows[p], rows[p + 1], cols[q], cols[q + 1]
        t_h, t_f = bottoms[p - 1, q] if p else (top_h[c0:c1 + 1], top_f[c0:c1])
        l_h, l_e = rights[p, q - 1] if q else (left_h[r0:r1], left_e[r0:r1])
        out = score_tile(a[r0:r1], b[c0:c1], matrix, o, e, np.ascontiguousarray(t_h),
                         np.ascontiguousarray(t_f), np.ascontiguousarray(l_h),
                         np.ascontiguousarray(l_e))
        bottoms[p, q], rights[p, q] = out[:2], out[2:4]
        if p < len(rows) - 2:
            row_h[p, c0:c1 + 1], row_f[p, c0:c1] = out[0], out[1]
        if q < len(cols) - 2:
            col_h[q, r0:r1], col_e[q, r0:r1] = out[2], out[3]
    return row_h, row_f, col_h, col_e


def assert_grids_equal(got, want, where):
    for name, x, y in zip(("row_h", "row_f", "col_h", "col_e"), got[:4], want[:4]):
        np.testing.assert_array_equal(x, y, err_msg=f"{name}, {where}")


def tile_inputs(scoring, h, w, r0, c0, *, seed):
    """An ``h x w`` tile at ``(r0, c0)`` of a related random pair: its residues, the
    scoring's arrays, and its exact upstream boundaries."""
    a, b = related(np.random.default_rng(seed), scoring.matrix.shape[0] - 1, r0 + h, c0 + w)
    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    o, e = scoring.gap_open, scoring.gap_extend
    bounds = upstream_boundaries(a, b, matrix, o, e, r0, c0)
    return a[r0:], b[c0:], matrix, o, e, bounds


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


# -- the checkpointing GPU kernel (simulator on CI) ----------------------------------------

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


# -- the walk through the grids ------------------------------------------------------------

def trace(a, b, scoring, grid_fn, end=None):
    """``_trace_rect`` over the whole matrix from the best end (``(score, i, j)``, found
    here when not given): start, CIGAR, counters."""
    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    bounds = matrix_boundaries(len(a), len(b))
    if end is None:
        end = score_tile(a, b, matrix, scoring.gap_open, scoring.gap_extend, *bounds)[4:]
    score, ei, ej = end
    chunks, stats = [], la._trace_stats()
    i, j, _, _ = la._trace_rect(a, b, matrix, scoring.gap_open, scoring.gap_extend, *bounds,
                                int(ei), int(ej), STATE_H, grid_fn, chunks, stats)
    ops = np.concatenate(chunks)[::-1]
    cigar = cigar_string(summarize_path(a, b, i, j, ops, scoring.alphabet.unknown_code)[0])
    return (int(score), i, int(ei), j, int(ej), cigar), stats


def reference(a, b, scoring):
    ref = align_codes(a, b, scoring)
    return tuple(ref[k] for k in ("score", "query_start", "query_end", "subject_start",
                                  "subject_end", "cigar"))


@pytest.mark.parametrize("leaf, split, memory, depth", [(300, 3, 1 << 29, 3), (64, 32, 1 << 29, 1),
                                                        (1000, 4, 20_000, 2)],
                         ids=["deep", "wide", "memory-capped"])
def test_trace_rect_equals_align_codes(monkeypatch, leaf, split, memory, depth):
    """Tiny leaves and grids of at most 3 x 3 force several levels; 32 x 32 grids one
    or two; a memory cap forces coarse grids."""
    monkeypatch.setattr(la, "LEAF_CELLS", leaf)
    monkeypatch.setattr(la, "TRACE_MAX_SPLIT", split)
    monkeypatch.setattr(la, "TRACE_MEMORY", memory)
    codes = window_codes()
    dna = Scoring(alphabet="dna")
    b, _, _ = planted_copy(codes[2000:2700], dna, spacing=50, seed=5)
    pairs = [(codes[1900:2750], np.concatenate([codes[9000:9040], b]), dna)]
    rng = np.random.default_rng(12)
    a, b = related(rng, 20, 333, 301)
    pairs.append((a, b, Scoring("BLOSUM62")))
    for a, b, scoring in pairs:
        got, stats = trace(a, b, scoring, la.cpu_grid)
        assert got == reference(a, b, scoring), (scoring, leaf, split, memory)
        assert stats["grids"]["cpu"] >= 1 and stats["leaves"] > 1
        assert stats["grid_cells"] >= got[2] * got[4]  # the first grid: all before the end
        assert stats["depth"] >= depth
        assert stats["peak_boundary_bytes"] <= 2 * memory  # the levels' grids together


def test_grid_lines_and_sides(monkeypatch):
    lines = la._grid_lines(1000, 300, step=64)
    assert lines[0] == 0 and lines[-1] == 1000 and all(c % 64 == 0 for c in lines[1:-1])
    assert len(lines) == 5 and all(x < y for x, y in zip(lines, lines[1:]))
    assert la._grid_lines(100, 10, step=128) == (0, 100)
    assert la._grid_lines(7, 2) == (0, 2, 4, 5, 7)
    # The benchmark's rectangle: 3 levels of about 296 tiles, leaves of 2^16 cells.
    side = la._trace_side(1_700_000, 1_000_000)
    assert 75_000 < side < 77_000
    assert la._trace_side(4400, 4400) == pytest.approx(256, rel=0.01)
    monkeypatch.setattr(la, "TRACE_MEMORY", 1 << 20)
    assert la._trace_side(1_700_000, 1_000_000) == 16 * 1.7e12 / (1 << 20)


def test_trace_rect_through_the_simulator_grid(monkeypatch):
    """``gpu_grid`` with the checkpointing kernel (simulator, 32-row strips, 4-column
    sub-tiles) for the first grid, the CPU below: the path of align_codes."""
    from swdask.kernels.cuda import tile as gpu_tile

    monkeypatch.setattr(la, "LEAF_CELLS", 40)
    monkeypatch.setattr(la, "GPU_TRACE_CELLS", 400)
    monkeypatch.setattr(gpu_tile, "grid_shape", lambda h, w: (1, 4))
    codes = window_codes()
    scoring = Scoring(alphabet="dna")
    a = codes[540:580]
    b = np.concatenate([codes[700:702], a[22:31], a[33:38]])
    got, stats = trace(a, b, scoring, la.gpu_grid)
    assert got == reference(a, b, scoring) == (19, 22, 38, 2, 16, "9=2I5=")
    assert stats["grids"]["gpu"] == 1 and stats["grids"]["cpu"] >= 1


# -- GPU lane ------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_grid_matches_cpu_grid_on_a_real_gpu():
    """A 240 kb x 190 kb pair (a random flank and the test window, against random sequence
    and a mutated copy of the window's last 90 kb): the grids of both kernel shapes equal
    the CPU's, and the traceback through ``gpu_grid`` equals the one through
    ``cpu_grid``."""
    from numba import config

    from swdask.kernels.cuda.tile import GRID_ROWS, GRID_WIDTH, ROWS, WIDTH, score_grid_gpu

    assert not config.ENABLE_CUDASIM, "the GPU lane needs a real GPU, not the simulator"
    rng = np.random.default_rng(21)
    scoring = Scoring(alphabet="dna")
    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    a = np.concatenate([rng.integers(0, 4, 200_000).astype(np.uint8), window_codes()])
    copy, planted, _ = planted_copy(a[150_000:], scoring, spacing=300, seed=6)
    b = np.concatenate([rng.integers(0, 4, 100_000).astype(np.uint8), copy])
    h, w = len(a), len(b)
    bounds = matrix_boundaries(h, w)
    # Cuts on multiples of both shapes' strips (256, 128 rows) and sub-tiles (512, 128).
    row_cuts = la._grid_lines(h, 23_456, 32 * max(ROWS, GRID_ROWS))[1:-1]
    col_cuts = la._grid_lines(w, 23_456, max(WIDTH, GRID_WIDTH))[1:-1]
    cpu = score_grid(a, b, matrix, 5, 2, *bounds, row_cuts, col_cuts)
    assert cpu.tile[4] >= planted
    for rows, width in ((ROWS, WIDTH), (GRID_ROWS, GRID_WIDTH)):
        gpu = score_grid_gpu(a, b, matrix, 5, 2, *bounds, row_cuts, col_cuts, rows=rows,
                             width=width)
        assert_grids_equal(gpu, cpu, (rows, width))
        for x, y in zip(gpu.tile, cpu.tile):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=str((rows, width)))
    end = tuple(int(x) for x in cpu.tile[4:])
    on_gpu, gpu_counts = trace(a, b, scoring, la.gpu_grid, end)
    on_cpu, cpu_counts = trace(a, b, scoring, la.cpu_grid, end)
    assert on_gpu == on_cpu
    assert gpu_counts["grids"]["gpu"] >= 1 and cpu_counts["grids"]["gpu"] == 0
