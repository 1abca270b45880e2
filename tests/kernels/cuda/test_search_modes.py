"""Global and semiglobal search kernels against the CPU kernels, in Numba's CUDA simulator.

The three GPU score kernels of a search (the 16-bit inter-task kernel with its 32-bit
re-run, the 32-bit inter-task kernel and the block-per-pair kernel) compute global and
semiglobal scores and end cells; every score and both ends must equal
:func:`swdask.kernels.cpu.score.score_all`'s in the same mode.  The inputs sit where the
modes differ from local alignment: empty and one-residue queries and subjects (global's
``H(m, 0)`` and ``H(0, n)``, semiglobal's corner cells), queries that fill a lane, a group
or several passes exactly or by one row more (the query sits in the last rows of its
passes, under rows that must change nothing), a two-letter alphabet where row ``m`` and
column ``n`` tie everywhere, X and N letters, scores far below 0 and pairs past 16 bits
(re-run in 32 bits).  The GPU lane (``-m gpu``) checks real databases on a card
(``tests/kernels/cuda/test_search_modes_gpu.py``).
"""
import numpy as np
import pytest
from numba import config

from swdask.kernels.cpu.score import score_all
from swdask.kernels.cuda import (
    inter_task,
    inter_task_dpx,
    inter_task_dpx_scan,
    intra_task,
    launcher,
)
from swdask.kernels.cuda.compile import get_kernel
from swdask.scoring import Scoring
from swdask.sequences.store import load_sequences
from tests.helpers import SPROT_DB, assert_top_hits, pack

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="simulator lane only")


@pytest.fixture(autouse=True)
def kernel_with_ends(monkeypatch):
    """These tests are of the 16-bit kernel that finds end cells itself
    (``inter_task_dpx``), not the default scan kernel (test_inter_task_dpx_scan.py); a
    global search runs the scan kernel's global variant whichever is named."""
    monkeypatch.setattr(launcher, "SEARCH_KERNEL", "ends")


def fix_packed_shape(monkeypatch, mode, rows, group):
    """Make the 16-bit kernel of ``mode`` take ``rows`` x ``group`` lanes: the kernel with
    end cells (semiglobal), or the scan kernel's global variant, whose rows come in fours
    (``rows`` rounded up)."""
    if mode == "global":
        monkeypatch.setattr(inter_task_dpx_scan, "choose_shape",
                            lambda m, alphabet: (-(-rows // 4) * 4, group))
    else:
        monkeypatch.setattr(inter_task_dpx, "choose_shape", lambda m, alphabet: (rows, group))

MODES = ["global", "semiglobal"]
#: BLOSUM62 11/1 (the protein default), BLOSUM50 with linear gaps, the DNA default 2/-3
#: 5/2: the matrices and gap pairs of the grid.
SCORINGS = {"BLOSUM62-11-1": Scoring(), "BLOSUM50-0-3": Scoring("BLOSUM50", gap_open=0,
                                                                gap_extend=3),
            "dna-2-3-5-2": Scoring(alphabet="dna")}


@pytest.fixture(scope="module")
def db():
    return load_sequences(SPROT_DB)


def sequences(db, rng, lengths, scoring):
    """Sequences of the given lengths: Swiss-Prot windows with an X (protein), random
    ACGT with an N (DNA); the unknown letter lands at a random position of each sequence
    of 3 residues or more."""
    out = []
    for n in lengths:
        if scoring.alphabet.name == "dna":
            codes = rng.integers(0, 4, n).astype(np.uint8)
        else:
            codes = db.codes(int(rng.integers(len(db))))
            while len(codes) < n:
                codes = np.concatenate([codes, codes])
            s0 = int(rng.integers(0, len(codes) - n + 1))
            codes = codes[s0:s0 + n].copy()
        if n >= 3:
            codes[int(rng.integers(n))] = scoring.alphabet.unknown_code
        out.append(codes)
    return out


def subjects_of(db, rng, queries, scoring, lengths=(0, 1, 5, 12, 31, 32, 33)):
    """Subjects of length 0, 1, around a warp and a few more, the queries reversed and
    the last query itself (a high score, gaps)."""
    subjects = sequences(db, rng, lengths, scoring)
    return subjects + [q[::-1].copy() for q in queries if len(q)] + [queries[-1].copy()]


def assert_as_cpu(got, queries, subjects, scoring, mode, label):
    """Scores and ends of ``got`` (queries x subjects) equal the CPU kernel's."""
    q_res, q_off = pack(queries)
    s_res, s_off = pack(subjects)
    want = score_all(q_res, q_off, s_res, s_off, scoring.matrix, scoring.gap_open,
                     scoring.gap_extend, mode)
    for name, g, w in zip(("score", "query_end", "subject_end"), got, want):
        np.testing.assert_array_equal(np.asarray(g).reshape(w.shape), w,
                                      err_msg=f"{label} {mode}: {name}")
    return want


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rows,group,m,scoring", [
    (4, 1, 0, "BLOSUM62-11-1"), (4, 1, 1, "dna-2-3-5-2"),      # empty, one residue
    (4, 2, 8, "BLOSUM50-0-3"), (4, 2, 9, "BLOSUM62-11-1"),     # one pass exactly, two
    (1, 32, 31, "dna-2-3-5-2"), (1, 32, 33, "BLOSUM62-11-1"),  # around a warp of rows
    (2, 4, 17, "BLOSUM62-11-1"),                               # three passes
])
def test_32bit_kernel_matches_cpu(db, mode, rows, group, m, scoring):
    rng = np.random.default_rng(rows * 100 + group * 10 + m)
    scoring = SCORINGS[scoring]
    query = sequences(db, rng, [m], scoring)[0]
    subjects = subjects_of(db, rng, [query], scoring)
    s_res, s_off = pack(subjects)
    order = np.argsort([len(s) for s in subjects], kind="stable").astype(np.int64)
    got = launcher.score_query(query, s_res, s_off, order, scoring.matrix, scoring.gap_open,
                               scoring.gap_extend, rows=rows, group=group, mode=mode)
    inverse = np.argsort(order)
    assert_as_cpu([g[inverse] for g in got], [query], subjects, scoring, mode,
                  f"R={rows} G={group} m={m}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rows,group,lengths,scoring", [
    (2, 1, (0, 1), "BLOSUM62-11-1"),     # an empty query beside a one-residue one
    (2, 2, (4, 3), "dna-2-3-5-2"),       # one pass exactly; the shorter one sits lower
    (4, 2, (17, 9, 5), "BLOSUM50-0-3"),  # three passes; a query paired with nothing
    (3, 8, (25, 24), "BLOSUM62-11-1"),   # a group's rows and one more
])
def test_16bit_kernel_matches_cpu(db, mode, rows, group, lengths, scoring, monkeypatch):
    """Query pairs of different lengths in one launch (each half has its own rows above
    the query), passes, lanes, every subject length of :func:`subjects_of`."""
    fix_packed_shape(monkeypatch, mode, rows, group)
    rng = np.random.default_rng(sum(lengths) + rows * group)
    scoring = SCORINGS[scoring]
    queries = sequences(db, rng, lengths, scoring)
    subjects = subjects_of(db, rng, queries, scoring)
    s_res, s_off = pack(subjects)
    *got, stats = launcher.DeviceSubjects(s_res, s_off).score_many(
        queries, scoring.matrix, scoring.gap_open, scoring.gap_extend, packed=True, mode=mode)
    assert (stats.rescored, stats.cells_32bit) == (0, 0)
    assert_as_cpu(got, queries, subjects, scoring, mode, f"R={rows} G={group}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("packed", [True, False], ids=["16bit", "32bit"])
def test_two_letters_tie_everywhere(mode, packed, monkeypatch):
    """Over two letters every row and column ties: row ``m`` (the last lane) against
    column ``n`` (every lane, every pass) must follow the end rule, across passes."""
    fix_packed_shape(monkeypatch, mode, 2, 2)
    monkeypatch.setattr(inter_task, "choose_shape", lambda m: (2, 2))
    rng = np.random.default_rng(11)
    scoring = Scoring(alphabet="dna", gap_open=0, gap_extend=1)
    queries = [rng.integers(0, 2, n).astype(np.uint8) for n in (13, 11, 6)]
    subjects = [rng.integers(0, 2, n).astype(np.uint8) for n in (1, 3, 8, 13, 16, 21)]
    subjects += [queries[0][5:].copy(), queries[1][::-1].copy()]
    s_res, s_off = pack(subjects)
    *got, _ = launcher.DeviceSubjects(s_res, s_off).score_many(
        queries, scoring.matrix, 0, 1, packed=packed, mode=mode)
    assert_as_cpu(got, queries, subjects, scoring, mode, "two letters")


def run_intra(query, subjects, scoring, mode, rows, warps, lanes, delay):
    """One launch of the block-per-pair kernel in ``mode``, outputs on the host."""
    s_res, s_off = pack(subjects)
    span = rows * warps * lanes
    passes = max(1, -(-len(query) // span))
    fill = -scoring.gap_extend if mode == "global" else 0
    dtype = intra_task.profile_dtype(scoring.matrix, fill)
    profile = intra_task.query_profile(query, scoring.matrix, passes * span, dtype, mode,
                                       scoring.gap_extend)
    b_off, size = intra_task.boundary_offsets([len(s) for s in subjects])
    outs = [np.full(len(subjects), -7, np.int32) for _ in range(3)]
    kernel = get_kernel("intra_task", rows=rows, warps=warps, alphabet=scoring.matrix.shape[0],
                        lanes=lanes, delay=delay, dtype=dtype.name, mode=mode)
    kernel[len(subjects), warps * lanes](
        profile, passes, s_res, s_off, np.arange(len(subjects), dtype=np.int64), b_off,
        np.int32(scoring.gap_open + scoring.gap_extend), np.int32(scoring.gap_extend),
        np.int64(len(query)), np.zeros(size, np.int32), *outs)
    return outs


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rows,warps,lanes,delay,m,scoring", [
    (2, 2, 4, 3, 0, "BLOSUM62-11-1"),    # an empty query
    (2, 3, 4, 2, 24, "dna-2-3-5-2"),     # one pass exactly, across two rings
    (2, 2, 4, 3, 17, "BLOSUM50-0-3"),    # three passes
])
def test_intra_task_kernel_matches_cpu(db, mode, rows, warps, lanes, delay, m, scoring):
    rng = np.random.default_rng(m * 7 + warps)
    scoring = SCORINGS[scoring]
    query = sequences(db, rng, [m], scoring)[0]
    subjects = subjects_of(db, rng, [query], scoring, lengths=(0, 1, 9, 20))
    got = run_intra(query, subjects, scoring, mode, rows, warps, lanes, delay)
    assert_as_cpu(got, [query], subjects, scoring, mode,
                  f"R={rows} W={warps} L={lanes} D={delay} m={m}")


@pytest.mark.parametrize("mode", MODES)
def test_launcher_routes_long_subjects_to_the_intra_task_kernel(db, mode):
    """Subjects over the threshold go to the block-per-pair kernel, the rest to the
    16-bit one, in one table; the query's rows above it hold ``-gap_extend`` (global),
    so a large gap extension takes a wider profile."""
    rng = np.random.default_rng(5)
    scoring = Scoring("BLOSUM62", gap_open=10, gap_extend=200)
    fill = -200 if mode == "global" else 0
    assert intra_task.profile_dtype(scoring.matrix, fill).name == (
        "int16" if mode == "global" else "int8")
    queries = sequences(db, rng, [7, 12], scoring)
    subjects = subjects_of(db, rng, queries, scoring, lengths=(0, 2, 14, 30))
    s_res, s_off = pack(subjects)
    *got, stats = launcher.DeviceSubjects(s_res, s_off, intra_threshold=14).score_many(
        queries, scoring.matrix, scoring.gap_open, scoring.gap_extend, packed=True, mode=mode)
    assert stats.pairs_intra == 2 * 2  # subjects of 14 and 30 residues
    assert_as_cpu(got, queries, subjects, scoring, mode, "routed")


def test_16bit_overflow_is_rescored_exactly_in_32_bits():
    """Scores past 16 bits never come back wrapped, above or below.  Match 8,000: five
    identities overflow (the maximum H decides); gap costs 8,000 + 190: a global pair of 3
    and 150 residues scores below -32,768, which the a priori bound catches (as it does a
    pair that would fit, re-scored at no loss but time).  Pairs that stay in 16 bits are
    exact too."""
    for mode in MODES:
        high = Scoring(alphabet="dna", match=8000, mismatch=-8000, gap_open=5, gap_extend=2)
        a = np.array([0, 1, 2, 3, 0, 1, 2], np.uint8)
        queries = [a[:3], a[:4], a.copy(), np.array([3, 3], np.uint8)]
        subjects = [a[:3].copy(), a[:4].copy(), a.copy(), np.array([2, 0, 1, 2, 3, 0], np.uint8),
                    np.array([3], np.uint8), np.zeros(0, np.uint8)]
        s_res, s_off = pack(subjects)
        *got, stats = launcher.DeviceSubjects(s_res, s_off).score_many(
            queries, high.matrix, 5, 2, packed=True, mode=mode)
        want = assert_as_cpu(got, queries, subjects, high, mode, "8,000")
        assert want[0].max() >= 40_000
        assert 0 < stats.rescored < len(queries) * len(subjects)
        assert 0 < stats.cells_32bit < stats.cells

    deep = Scoring(alphabet="dna", gap_open=8000, gap_extend=190)
    rng = np.random.default_rng(8)
    queries = [rng.integers(0, 4, 3).astype(np.uint8), rng.integers(0, 4, 20).astype(np.uint8)]
    subjects = [rng.integers(0, 4, n).astype(np.uint8) for n in (150, 4, 21)]
    s_res, s_off = pack(subjects)
    for mode in MODES:
        *got, stats = launcher.DeviceSubjects(s_res, s_off).score_many(
            queries, deep.matrix, 8000, 190, packed=True, mode=mode)
        want = assert_as_cpu(got, queries, subjects, deep, mode, "8,000 + 190")
        if mode == "global":
            assert want[0][0, 0] < -32_768 and stats.rescored > 0
        else:  # free end gaps: every score is small, and the bound holds for short pairs
            assert want[0].min() >= 0 and stats.rescored < len(queries) * len(subjects)


def test_end_bounds_take_the_rows_above_a_global_query():
    """``floor16`` leaves room for ``2 (o + e)`` and the lowest profile score, which for
    a global query includes ``-gap_extend`` (its rows above)."""
    matrix = np.array([[5, -4], [-4, 5]])
    assert inter_task_dpx.end_bounds(matrix, 11, 1, "semiglobal") == (32762, -32768 + 24)
    assert inter_task_dpx.end_bounds(matrix, 0, 30, "global") == (32762, -32768 + 60)
    assert inter_task_dpx.end_bounds(matrix * 30, 0, 1, "global") == (32767 - 150,
                                                                       -32768 + 120)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("packed", [True, False], ids=["16bit", "32bit"])
@pytest.mark.parametrize("max_hits,min_score", [(3, None), (1, -10), (50, None), (2, 5000)])
def test_device_top_hits_keep_every_candidate(db, mode, packed, max_hits, min_score):
    """The range histogram keeps every subject that can rank among the best (ties at the
    cut included, negative scores too) and nothing under ``min_score``."""
    rng = np.random.default_rng(max_hits)
    scoring = Scoring()
    queries = [db.codes(3)[:16].copy(), db.codes(8)[:11].copy(), db.codes(9)[:5].copy()]
    subjects = [db.codes(k)[:int(rng.integers(4, 20))].copy() for k in range(20, 31)]
    subjects += [queries[0].copy(), queries[0].copy(), np.zeros(0, np.uint8)]  # a tie at the top
    s_res, s_off = pack(subjects)
    found, stats = launcher.DeviceSubjects(s_res, s_off).top_many(
        queries, scoring.matrix, 11, 1, max_hits, min_score, packed=packed, mode=mode)
    assert stats.cells_32bit == (0 if packed else stats.cells)
    q_res, q_off = pack(queries)
    want = score_all(q_res, q_off, s_res, s_off, scoring.matrix, 11, 1, mode)
    floor = -(2**31) if min_score is None else min_score
    if mode == "global":
        assert (want[0] < 0).any()
    assert_top_hits(found, want, floor, max_hits)


def test_range_cut_keeps_what_a_wide_range_needs():
    """Scores spread over more than :data:`HIST_BINS` share bins: the cut is a bin's lower
    edge, and what it keeps is counted exactly."""
    scores = np.array([-30_000, -20_000, -12, -11, -11, -3, 40, 41])
    low, high = int(scores.min()), int(scores.max())
    width = (high - low) // launcher.HIST_BINS + 1
    hist = np.bincount((scores - low) // width, minlength=launcher.HIST_BINS)
    for max_hits in range(1, len(scores) + 2):
        cut, kept = launcher.range_cut(hist, (low, high), max_hits)
        assert kept == int((scores >= cut).sum())
        assert kept >= min(max_hits, len(scores))
        best = np.sort(scores)[::-1][:max_hits]
        assert (best >= cut).all()
