"""The CUDA score kernel against the CPU kernel, in Numba's CUDA simulator.

The simulator runs each CUDA thread as a Python thread, so the inputs are small; they
sit at the boundaries that matter: query lengths around the rows a lane holds and the
rows a group holds (one pass, several passes), groups of 1 to 32 lanes, subjects of
length 0 and 1, a partial last warp.  The GPU lane (``-m gpu``) checks whole real
databases on a real card.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import config

from swdask.kernels.cpu.score import score_all
from swdask.kernels.cuda import inter_task_dpx, launcher
from swdask.scoring import Scoring
from swdask.sequences.store import load_sequences
from tests.helpers import (
    QUERIES,
    SPROT_DB,
    assert_top_hits,
    check_score_many,
    pack,
    protein_windows,
)

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="simulator lane only")


@pytest.fixture(autouse=True)
def kernel_with_ends(monkeypatch):
    """These tests are of the 16-bit kernel that finds end cells itself
    (``inter_task_dpx``), not the default scan kernel (test_inter_task_dpx_scan.py)."""
    monkeypatch.setattr(launcher, "SEARCH_KERNEL", "ends")


def check(query, subjects, scoring, rows, group, label):
    s_res, s_off = pack(subjects)
    order = np.argsort([len(s) for s in subjects], kind="stable").astype(np.int64)
    got = launcher.score_query(query, s_res, s_off, order, scoring.matrix, scoring.gap_open,
                                 scoring.gap_extend, rows=rows, group=group)
    want = score_all(query, np.array([0, len(query)]), s_res, s_off, scoring.matrix,
                     scoring.gap_open, scoring.gap_extend, subjects=order)
    for name, g, w in zip(("score", "query_end", "subject_end"), got, want):
        np.testing.assert_array_equal(g, w[0], err_msg=f"{label}: {name}")


@pytest.mark.parametrize("rows,group,m", [
    (4, 1, 0), (4, 1, 1), (4, 1, 4), (4, 1, 9),      # one lane; several passes
    (4, 2, 7), (4, 2, 8), (4, 2, 9),                  # a pass boundary at 8 rows
    (2, 4, 15), (2, 4, 17), (2, 8, 31), (2, 8, 33),   # around 16 and 32 rows
    (16, 32, 40),                                     # the GPU's shape, one pass
])
def test_simulated_kernel_matches_cpu_on_real_proteins(rows, group, m):
    rng = np.random.default_rng(rows * 100 + group * 10 + m)
    queries = load_sequences(QUERIES)
    db = load_sequences(SPROT_DB)
    q = queries.codes(int(rng.integers(len(queries))))
    start = int(rng.integers(0, max(1, len(q) - m)))
    query = q[start:start + m].copy()
    subjects = [np.zeros(0, np.uint8), db.codes(0)[:1].copy()]
    for _ in range(7):  # real windows, enough pairs for a partial last warp at small groups
        codes = db.codes(int(rng.integers(len(db))))
        n = int(rng.integers(2, min(30, len(codes)) + 1))
        s0 = int(rng.integers(0, len(codes) - n + 1))
        subjects.append(codes[s0:s0 + n].copy())
    subjects.append(query[::-1].copy())  # a related subject: positive scores, gaps
    check(query, subjects, Scoring(), rows, group, f"R={rows} G={group} m={m}")


def test_simulated_kernel_dna_ties_and_gaps():
    """A small alphabet makes ties everywhere: the end rule must hold across lanes."""
    rng = np.random.default_rng(3)
    scoring = Scoring(alphabet="dna", gap_open=0, gap_extend=1)
    query = rng.integers(0, 2, 13).astype(np.uint8)
    subjects = [rng.integers(0, 2, n).astype(np.uint8) for n in (5, 12, 13, 14, 20)]
    check(query, subjects, scoring, 2, 4, "dna ties")


@pytest.mark.parametrize("shared,dpx", [(True, False), (True, True), (False, True)])
def test_simulated_variants_match_cpu(shared, dpx):
    """The shared-memory profile and the DPX formulation (its pure-Numba twin here)."""
    rng = np.random.default_rng(17)
    db = load_sequences(SPROT_DB)
    query = db.codes(5)[:19].copy()
    subjects = [db.codes(k)[:int(rng.integers(1, 25))].copy() for k in range(10, 19)]
    s_res, s_off = pack(subjects)
    order = np.argsort([len(x) for x in subjects], kind="stable").astype(np.int64)
    scoring = Scoring()
    got = launcher.score_query(query, s_res, s_off, order, scoring.matrix, 11, 1, rows=2,
                                 group=4, shared=shared, dpx=dpx)
    want = score_all(query, np.array([0, len(query)]), s_res, s_off, scoring.matrix, 11, 1,
                     subjects=order)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w[0])


@pytest.mark.parametrize("packed", [True, False], ids=["16bit", "32bit"])
@pytest.mark.parametrize("max_hits,min_score", [(3, None), (1, 20), (50, None), (2, 5000)])
def test_device_top_hits_keep_every_candidate(max_hits, min_score, packed):
    """The device keeps every subject that can rank among the best (ties at the cut
    included) and nothing under ``min_score``; the host's ranking is then exact."""
    rng = np.random.default_rng(max_hits)
    db = load_sequences(SPROT_DB)
    queries = [db.codes(3)[:16].copy(), db.codes(8)[:11].copy(), db.codes(9)[:5].copy()]
    subjects = [db.codes(k)[:int(rng.integers(4, 20))].copy() for k in range(20, 31)]
    subjects += [queries[0].copy(), queries[0].copy()]  # a tie at the top
    s_res, s_off = pack(subjects)
    scoring = Scoring()
    device = launcher.DeviceSubjects(s_res, s_off)
    found, stats = device.top_many(queries, scoring.matrix, 11, 1, max_hits, min_score,
                                   packed=packed)
    assert stats.cells_32bit == (0 if packed else stats.cells)
    q_res, q_off = pack(queries)
    want = score_all(q_res, q_off, s_res, s_off, scoring.matrix, 11, 1)
    floor = 1 if min_score is None else min_score
    assert_top_hits(found, want, floor, max_hits)


def check_many(queries, subjects, scoring, label, packed=True):
    """Every score and end of ``score_many`` equals the CPU kernel's; returns the stats."""
    return check_score_many(queries, subjects, scoring, label, packed=packed)


@pytest.mark.parametrize("rows,lengths", [
    (8, (0, 1)), (8, (1, 8)), (8, (7, 9)),            # one lane; an empty query
    (8, (31, 32, 33)),                                 # around a warp; an odd count
    (12, (12, 13, 24, 25)),                            # tile edges of 12-row lanes
    (16, (40, 15)),                                    # several 16-row lanes
])
def test_16bit_kernel_matches_cpu_at_boundaries(rows, lengths, monkeypatch):
    """Query pairs at lane and tile boundaries, subjects of length 0, 1 and around a
    warp, a query paired with nothing: the packed kernel equals the CPU kernel."""
    monkeypatch.setattr(inter_task_dpx, "ROW_RATES", {rows: 1.0})
    rng = np.random.default_rng(sum(lengths) + rows)
    db = load_sequences(SPROT_DB)
    queries = protein_windows(db, rng, lengths)
    subjects = [np.zeros(0, np.uint8), db.codes(1)[:1].copy()]
    subjects += [db.codes(int(rng.integers(len(db))))[:n].copy() for n in (5, 31, 32, 33)]
    subjects += [q[::-1].copy() for q in queries if len(q)] + [queries[-1].copy()]
    check_many(queries, subjects, Scoring(), f"R={rows} lengths={lengths}")


@pytest.mark.parametrize("blocks_per_sm", [0, 64])
def test_16bit_pairs_spread_over_streams_when_one_launch_cannot_fill(blocks_per_sm,
                                                                     monkeypatch):
    """Few subjects: a batch's query pairs launch on several streams (each with its own
    boundary row: queries of several passes), or on one where a launch fills the GPU;
    the scores are the CPU's either way."""
    monkeypatch.setattr(inter_task_dpx, "ROW_RATES", {8: 1.0})
    monkeypatch.setattr(launcher, "BLOCKS_PER_SM", blocks_per_sm)
    lanes = []
    spread = launcher.DeviceSubjects._lanes

    def counted(self, launches, blocks):
        chosen = spread(self, launches, blocks)
        lanes.append(len(chosen))
        return chosen

    monkeypatch.setattr(launcher.DeviceSubjects, "_lanes", counted)
    db = load_sequences(SPROT_DB)
    queries = [db.codes(k)[:n].copy() for k, n in ((3, 70), (4, 66), (5, 20), (6, 19),
                                                     (7, 9), (8, 41), (9, 3))]
    subjects = [db.codes(k)[:int(n)].copy() for k, n in zip(range(20, 26), (1, 8, 30, 45, 70, 90))]
    subjects.append(queries[0][::-1].copy())
    check_many(queries, subjects, Scoring(), f"{blocks_per_sm} blocks a multiprocessor")
    assert lanes and max(lanes) == (1 if blocks_per_sm == 0 else launcher.LAUNCH_LANES)


@pytest.mark.parametrize("scoring", [
    Scoring("BLOSUM50", gap_open=13, gap_extend=2), Scoring("PAM30", gap_open=9, gap_extend=1),
    Scoring(alphabet="dna", gap_open=0, gap_extend=1)], ids=["BLOSUM50", "PAM30", "dna-linear"])
def test_16bit_kernel_other_scorings(scoring):
    rng = np.random.default_rng(5)
    if scoring.alphabet.name == "dna":
        queries = [rng.integers(0, 2, n).astype(np.uint8) for n in (13, 20, 6)]
        subjects = [rng.integers(0, 2, n).astype(np.uint8) for n in (5, 12, 13, 14, 20)]
    else:
        db = load_sequences(SPROT_DB)
        queries = [db.codes(k)[:n].copy() for k, n in ((11, 21), (12, 17))]
        subjects = [db.codes(k)[:int(rng.integers(1, 26))].copy() for k in range(30, 40)]
        subjects.append(queries[0].copy())
    check_many(queries, subjects, scoring, scoring.name)


def test_16bit_overflow_is_rescored_exactly_in_32_bits():
    """Scores past 16 bits never come back capped: the wrapped pairs are re-scored by the
    32-bit kernel (match 8,000: five identities overflow).  Pairs just under and just over
    the limit, and a pair whose other query stays small, are all exact."""
    scoring = Scoring(alphabet="dna", match=8000, mismatch=-8000, gap_open=5, gap_extend=2)
    limit = inter_task_dpx.overflow_limit(scoring.matrix)
    assert limit == 32767 - 8000
    a = np.array([0, 1, 2, 3, 0, 1, 2], np.uint8)
    queries = [a[:3], a[:4], a.copy(), np.array([3, 3], np.uint8)]
    subjects = [a[:3].copy(), a[:4].copy(), a.copy(), np.array([2, 0, 1, 2, 3, 0], np.uint8),
                np.array([3], np.uint8)]
    stats = check_many(queries, subjects, scoring, "overflow")
    # Scores above 24,767 (the 4-residue and longer matches) were re-scored.
    assert stats.rescored > 0
    assert 0 < stats.cells_32bit < stats.cells


def test_16bit_twins_wrap_like_the_hardware():
    """The simulator's twins of the DPX helpers: per-half, wrapping, max with 0 where the
    hardware has _relu."""
    twins = inter_task_dpx.TWINS
    x = inter_task_dpx.pack(32767, -5)
    y = inter_task_dpx.pack(1, 7)
    floor = inter_task_dpx.packed_constant(-32768)
    assert (twins["lo16"](twins["add"](x, y)), twins["hi16"](twins["add"](x, y))) == (-32768, 2)
    got = twins["addmax_relu"](x, y, floor)
    assert (twins["lo16"](got), twins["hi16"](got)) == (0, 2)
    got = twins["addmax"](x, y, inter_task_dpx.pack(-3, 9))
    assert (twins["lo16"](got), twins["hi16"](got)) == (-3, 9)
    got = twins["max3"](x, y, inter_task_dpx.pack(-1, 100))
    assert (twins["lo16"](got), twins["hi16"](got)) == (32767, 100)
    got = twins["max_relu"](inter_task_dpx.pack(-4, -2), inter_task_dpx.pack(-1, 3))
    assert (twins["lo16"](got), twins["hi16"](got)) == (0, 3)


@pytest.mark.parametrize("rows,group", [(2, 1), (2, 2), (4, 2)])
def test_16bit_kernel_ties_across_passes(rows, group, monkeypatch):
    """Queries of many passes over a two-letter alphabet: ties everywhere, so an equal
    score at a smaller column found in a later pass (lower rows) must win, as in the CPU
    kernel's end rule."""
    monkeypatch.setattr(inter_task_dpx, "choose_shape", lambda m, alphabet: (rows, group))
    rng = np.random.default_rng(rows * 10 + group)
    scoring = Scoring(alphabet="dna", gap_open=5, gap_extend=2)
    queries = [rng.integers(0, 2, n).astype(np.uint8) for n in (17, 11, 9)]
    subjects = [rng.integers(0, 2, n).astype(np.uint8) for n in (3, 8, 13, 16, 21)]
    subjects += [queries[0][9:].copy(), queries[1][::-1].copy()]
    # ACGT against GTTTTTAC: "AC" (rows 1-2, the first pass) ends at column 8 and "GT"
    # (rows 3-4, a later pass) ties at column 2, which wins.
    queries.append(np.array([0, 1, 2, 3], np.uint8))
    subjects.append(np.array([2, 3, 3, 3, 3, 3, 0, 1], np.uint8))
    check_many(queries, subjects, scoring, f"R={rows} G={group}")


def test_32bit_kernel_with_matrix_entries_beyond_int16():
    """Entries over 32,767 do not fit the int16 shared profile: the 32-bit kernel then
    reads the profile through L1, and the scores stay exact."""
    db = load_sequences(SPROT_DB)
    matrix = Scoring().matrix.astype(np.int64) * 20_000
    query = db.codes(3)[:14].copy()
    subjects = [db.codes(k)[:int(5 + k)].copy() for k in range(4, 9)] + [query.copy()]
    s_res, s_off = pack(subjects)
    order = np.arange(len(subjects), dtype=np.int64)
    got = launcher.score_query(query, s_res, s_off, order, matrix, 11 * 20_000, 20_000,
                               rows=4, group=4)
    want = score_all(query, np.array([0, len(query)]), s_res, s_off, matrix, 11 * 20_000,
                     20_000, subjects=order)
    assert got[0].max() > 32_767
    for name, g, w in zip(("score", "query_end", "subject_end"), got, want):
        np.testing.assert_array_equal(g, w[0], err_msg=name)


@settings(max_examples=200, deadline=None)
@given(low=st.integers(-(1 << 40), 1 << 40), high=st.integers(-(1 << 40), 1 << 40))
def test_pack_is_both_halves_modulo_2_16(low, high):
    """``pack`` builds its words as int16 pairs: the same bits as the arithmetic
    definition, low half ``low mod 2**16``, high half ``high`` wrapped to int16."""
    want = np.int64(np.int16(np.int64(high).astype(np.int16))) * 65536 + (low & 0xFFFF)
    got = inter_task_dpx.pack(low, high)
    assert isinstance(got, np.int32) and int(got) == int(np.int64(want).astype(np.int32))
    row = inter_task_dpx.pack(np.array([low, high]), np.array([high, low]))
    assert row.dtype == np.int32 and row.tolist() == [
        int(inter_task_dpx.pack(low, high)), int(inter_task_dpx.pack(high, low))]


@pytest.mark.parametrize("mode", ["local", "global", "semiglobal"])
def test_pair_profile_holds_each_querys_rows_in_its_half(mode):
    """Query A's profile in the low 16 bits and B's in the high, padded rows (local) or
    the rows of :func:`end_rows` (global, semiglobal), for queries of different lengths
    and an empty one."""
    from swdask.kernels.cuda.inter_task import PAD_SCORE, end_rows

    matrix = Scoring().matrix
    rng = np.random.default_rng(5)
    for len_a, len_b in ((7, 3), (0, 5), (16, 16)):
        qa = rng.integers(0, matrix.shape[0], len_a).astype(np.uint8)
        qb = rng.integers(0, matrix.shape[0], len_b).astype(np.uint8)
        words = inter_task_dpx.pair_profile(qa, qb, matrix, 16, mode, gap_extend=2)
        assert words.shape == (matrix.shape[0], 16) and words.dtype == np.int32
        low = (words.astype(np.int64) & 0xFFFF).astype(np.uint16).astype(np.int16)
        high = (words.astype(np.int64) >> 16).astype(np.int16)
        for got, query in ((low, qa), (high, qb)):
            if mode == "local":
                want = np.full((matrix.shape[0], 16), PAD_SCORE, np.int64)
                want[:, :len(query)] = matrix[:, query]
            else:
                want = end_rows(query, matrix, 16, mode, 2)
            np.testing.assert_array_equal(got, want)
