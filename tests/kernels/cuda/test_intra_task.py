"""The block-per-pair (intra-task) kernel and the pipelined launcher, in the CUDA simulator.

The simulator runs each CUDA thread as a Python thread, so blocks here are small: warps of
2-8 lanes (the kernel's warp width is a parameter there) hold the query rows, which puts
lane, warp and pass boundaries at a few dozen residues.  Every score and both end cells
are compared with the CPU kernel (:func:`swdask.kernels.cpu.score.score_all`).  The GPU
lane checks real databases of long subjects (``tests/kernels/cuda/test_intra_task_gpu.py``).
"""
from types import SimpleNamespace

import numpy as np
import pytest
from numba import config

from swdask.kernels.cpu.score import score_all
from swdask.kernels.cuda import intra_task, launcher
from swdask.kernels.cuda.compile import get_kernel
from swdask.scoring import Scoring
from swdask.sequences.store import load_sequences
from tests.helpers import SPROT_DB, pack, protein_windows

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="simulator lane only")


@pytest.fixture(scope="module")
def db():
    return load_sequences(SPROT_DB)


def run_kernel(query, subjects, scoring, rows, warps, lanes, delay):
    """One launch of the intra-task kernel, outputs on the host."""
    s_res, s_off = pack(subjects)
    span = rows * warps * lanes
    passes = max(1, -(-len(query) // span))
    dtype = intra_task.profile_dtype(scoring.matrix)
    profile = intra_task.query_profile(query, scoring.matrix, passes * span, dtype)
    assert profile.dtype == dtype
    b_off, size = intra_task.boundary_offsets([len(s) for s in subjects])
    outs = [np.full(len(subjects), -7, np.int32) for _ in range(3)]
    kernel = get_kernel("intra_task", rows=rows, warps=warps, alphabet=scoring.matrix.shape[0],
                        lanes=lanes, delay=delay, dtype=dtype.name)
    kernel[len(subjects), warps * lanes](
        profile, passes, s_res, s_off, np.arange(len(subjects), dtype=np.int64), b_off,
        np.int32(scoring.gap_open + scoring.gap_extend), np.int32(scoring.gap_extend),
        np.zeros(size, np.int32), *outs)
    want = score_all(query, np.array([0, len(query)]), s_res, s_off, scoring.matrix,
                     scoring.gap_open, scoring.gap_extend)
    return outs, [w[0] for w in want]


@pytest.mark.parametrize("m,rows,warps,lanes,delay", [
    (0, 3, 3, 2, 2),     # an empty query
    (1, 3, 3, 2, 2),     # one row
    (7, 3, 3, 2, 2),     # past one warp's rows (6) into the next warp
    (18, 3, 3, 2, 2),    # exactly one pass (3 warps x 2 lanes x 3 rows)
    (19, 3, 3, 2, 2),    # one row into a second pass
    (13, 2, 3, 2, 1),    # delay 1: a barrier every step, two passes
    (9, 1, 2, 4, 3),     # one row per lane, two warps of 4, one pass
])
def test_kernel_matches_cpu_at_lane_warp_and_pass_boundaries(db, m, rows, warps, lanes, delay):
    rng = np.random.default_rng(m * 7 + rows + warps + delay)
    query = protein_windows(db, rng, [m])[0]
    subjects = [np.zeros(0, np.uint8), db.codes(0)[:1].copy()]
    subjects += protein_windows(db, rng, [9, 16])
    subjects += [query[::-1].copy(), query.copy()]  # related: positive scores, gaps
    got, want = run_kernel(query, subjects, Scoring(), rows, warps, lanes, delay)
    label = f"m={m} R={rows} W={warps} L={lanes} D={delay}"
    for name, g, w in zip(("score", "query_end", "subject_end"), got, want):
        np.testing.assert_array_equal(g, w, err_msg=f"{label}: {name}")


def test_kernel_ties_across_warps_and_passes():
    """A two-letter alphabet makes ties everywhere: equal scores at a smaller column in a
    later pass or another warp must win as in the CPU kernel's end rule; zero-cost gap
    opening makes gaps as cheap as they get."""
    rng = np.random.default_rng(11)
    scoring = Scoring(alphabet="dna", gap_open=0, gap_extend=1)
    query = rng.integers(0, 2, 15).astype(np.uint8)
    subjects = [rng.integers(0, 2, n).astype(np.uint8) for n in (4, 11, 17)]
    subjects.append(np.array([2, 3, 3, 3, 0, 1], np.uint8))
    got, want = run_kernel(query, subjects, scoring, 2, 3, 2, 2)
    for name, g, w in zip(("score", "query_end", "subject_end"), got, want):
        np.testing.assert_array_equal(g, w, err_msg=f"dna ties: {name}")


@pytest.mark.parametrize("match,dtype", [(300, "int16"), (40000, "int32")])
def test_kernel_wide_profiles(match, dtype):
    """Matrix entries past int8 (and int16) take a wider shared profile, still exact.
    Past int16 only through the kernels' own API: swdask.Scoring refuses scores outside
    -32768..32767 (BLAST's range), so the kernel gets the raw matrix here."""
    dna = Scoring(alphabet="dna", gap_open=5, gap_extend=2)
    matrix = np.where(dna.matrix > 0, match, -match).astype(np.int32)
    scoring = SimpleNamespace(matrix=matrix, gap_open=5, gap_extend=2)
    assert intra_task.profile_dtype(scoring.matrix).name == dtype
    rng = np.random.default_rng(match)
    query = rng.integers(0, 4, 14).astype(np.uint8)
    subjects = [rng.integers(0, 4, 9).astype(np.uint8), query[3:].copy(), query.copy()]
    got, want = run_kernel(query, subjects, scoring, 2, 2, 2, 2)
    for name, g, w in zip(("score", "query_end", "subject_end"), got, want):
        np.testing.assert_array_equal(g, w, err_msg=f"{dtype}: {name}")


def test_choose_shape_fills_shared_memory_and_holds_the_query():
    assert intra_task.choose_shape(0, 24) == (8, 1)
    assert intra_task.choose_shape(256, 24) == (8, 1)
    assert intra_task.choose_shape(257, 24) == (8, 2)
    for m in (1, 300, 900, 5000, 40000):
        for alphabet in (5, 24):
            for itemsize in (1, 2, 4):
                rows, warps = intra_task.choose_shape(m, alphabet, itemsize=itemsize)
                assert intra_task.shared_fits(rows, 32 * warps, alphabet, itemsize)
                assert 1 <= warps <= intra_task.MAX_WARPS
                assert warps == 1 or m > 32 * rows * (warps - 1)  # no idle warp
    with pytest.raises(ValueError, match="warp shuffles need 32 lanes"):
        intra_task.kernel_source(2, 2, 8, 4, shuffles=True, alphabet=24)


def check_many(device, queries, subjects, scoring, label, packed):
    s_res, s_off = pack(subjects)
    q_res, q_off = pack(queries)
    *got, stats = device.score_many(queries, scoring.matrix, scoring.gap_open,
                                    scoring.gap_extend, packed=packed)
    want = score_all(q_res, q_off, s_res, s_off, scoring.matrix, scoring.gap_open,
                     scoring.gap_extend)
    for name, g, w in zip(("score", "query_end", "subject_end"), got, want):
        np.testing.assert_array_equal(g, w, err_msg=f"{label}: {name}")
    return stats


@pytest.mark.parametrize("packed", [True, False], ids=["16bit", "32bit"])
def test_launcher_routes_long_subjects_to_the_intra_kernel(db, packed):
    """Subjects at or above the threshold go to the block kernel, the rest to the
    inter-task kernels, in one table; a given launch order with long subjects in the
    middle keeps its result columns."""
    rng = np.random.default_rng(3)
    queries = protein_windows(db, rng, [13, 6, 1])
    subjects = protein_windows(db, rng, [4, 21, 0, 9, 25, 1])
    subjects.append(queries[0].copy())  # 13 residues: under the threshold, a top hit
    s_res, s_off = pack(subjects)
    device = launcher.DeviceSubjects(s_res, s_off, intra_threshold=20)
    assert device.n_intra == 2 and sorted(device.subjects[:2].tolist()) == [1, 4]
    stats = check_many(device, queries, subjects, Scoring(), "default order", packed)
    assert (stats.pairs_intra, stats.pairs_inter) == (3 * 2, 3 * 5)
    assert stats.cells_intra == 20 * (21 + 25)
    # A given order, long subjects not first: columns follow the given order.
    order = np.array([0, 4, 2, 1, 6], np.int64)
    device = launcher.DeviceSubjects(s_res, s_off, order, intra_threshold=20)
    got = device.score(queries[0], Scoring().matrix, 11, 1)[:3]
    want = score_all(queries[0], np.array([0, 13]), s_res, s_off, Scoring().matrix, 11, 1,
                     subjects=order)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w[0])


def test_launcher_multi_warp_blocks_with_passes(db, monkeypatch):
    """The launcher's own shapes: three 8-lane warps of 2 rows (48 rows a pass), queries of
    one and two passes, against subjects that are all long (nothing for the inter-task
    kernels)."""
    monkeypatch.setattr(intra_task, "choose_shape",
                        lambda m, alphabet, lanes=32, itemsize=1: (2, 3))
    rng = np.random.default_rng(8)
    queries = protein_windows(db, rng, [50, 47])
    subjects = protein_windows(db, rng, [12, 19])
    s_res, s_off = pack(subjects)
    device = launcher.DeviceSubjects(s_res, s_off, intra_threshold=1)
    assert device.n_intra == len(subjects)
    stats = check_many(device, queries, subjects, Scoring(), "all intra", True)
    assert stats.pairs_inter == 0 and stats.cells_32bit == stats.cells == stats.cells_intra


def test_pipelined_top_hits_are_exact_with_overflow_in_a_middle_batch(monkeypatch):
    """Batches of two queries: five queries take three batches in flight over two
    alternating table sets; the second batch has 16-bit overflows, re-scored in 32 bits
    while the next batch is staged, and its histograms redone.  Every candidate set is the
    CPU's, ties at the cut included, and nothing under the floor comes back."""
    monkeypatch.setattr(launcher, "BATCH_QUERIES", 2)
    scoring = Scoring(alphabet="dna", match=8000, mismatch=-8000, gap_open=5, gap_extend=2)
    rng = np.random.default_rng(21)
    a = np.array([0, 1, 2, 3, 0, 1, 2, 3, 3], np.uint8)
    # Longest first: [9, 8] batch 1, [5 (overflow), 4] batch 2, [2] batch 3.
    queries = [a[:5].copy(), rng.integers(0, 4, 9).astype(np.uint8), a[1:3].copy(),
               rng.integers(0, 4, 8).astype(np.uint8), a[2:6].copy()]
    subjects = [a.copy(), rng.integers(0, 4, 12).astype(np.uint8), a[:5].copy(),
                a[:5].copy(), np.zeros(0, np.uint8), rng.integers(0, 4, 22).astype(np.uint8)]
    s_res, s_off = pack(subjects)
    device = launcher.DeviceSubjects(s_res, s_off, intra_threshold=20)
    found, stats = device.top_many(queries, scoring.matrix, 5, 2, 2, packed=True)
    assert stats.rescored > 0 and stats.pairs_intra == 5
    q_res, q_off = pack(queries)
    want = score_all(q_res, q_off, s_res, s_off, scoring.matrix, 5, 2)
    for q, (cols, scores, q_end, s_end) in enumerate(found):
        all_scores = want[0][q]
        ranked = sorted(np.flatnonzero(all_scores >= 1), key=lambda c: (-all_scores[c], c))[:2]
        assert set(ranked) <= set(cols.tolist()), q
        assert all(all_scores[c] >= 1 for c in cols), q
        order = np.argsort(cols)
        np.testing.assert_array_equal(scores[order], all_scores[np.sort(cols)])
        np.testing.assert_array_equal(q_end[order], want[1][q][np.sort(cols)])
        np.testing.assert_array_equal(s_end[order], want[2][q][np.sort(cols)])
