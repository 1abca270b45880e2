"""The long-alignment traceback (swdask.jobs.long_align.traceback): the walk through the
grids of ``_trace_rect`` equal to the full-matrix traceback of ``align_codes``, with the
CPU's grids (``cpu_grid``) and the checkpointing GPU kernel's in the simulator
(``gpu_grid``); the grid lines and sides.  The grids themselves are tested with the tile
kernels (tests/kernels/cpu/test_tile.py, tests/kernels/cuda/test_tile.py).  The GPU lane
compares the real GPU's grid with the CPU's on a few-hundred-kb pair, and the traceback
through each."""
from __future__ import annotations

import numpy as np
import pytest

from swdask.jobs.long_align import traceback as la
from swdask.kernels.cpu.tile import STATE_H, matrix_boundaries, score_grid, score_tile
from swdask.kernels.cpu.traceback import align_codes
from swdask.kernels.paths import cigar_string, summarize_path
from swdask.scoring import Scoring
from swdask.testing import planted_copy
from tests.helpers import assert_grids_equal, related, window_codes

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
