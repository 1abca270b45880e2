"""The inter-sequence score kernel against the reference and the traceback kernel.

Scores and both end cells must be identical, for every mode, on real sequences over a
grid of matrices and gap penalties, at lane boundaries (groups of 16 and 8 subjects),
for empty and length-1 sequences, and through the 16-bit overflow path.
"""
import itertools

import numpy as np
import pytest

from swdask.kernels.cpu.reference import MODE_CODES, score_reference
from swdask.kernels.cpu.score import INT16_MAX, banded_global_scores, score_all
from swdask.kernels.cpu.traceback import traceback_pair
from swdask.scoring import Scoring
from swdask.sequences.store import load_sequences
from tests.helpers import QUERIES, RRNA, SPROT_DB, pack

MODES = list(MODE_CODES)
GRID = [
    ("BLOSUM62", 11, 1),
    ("BLOSUM50", 13, 2),
    ("PAM250", 10, 2),
    ("PAM30", 9, 1),
    ("BLOSUM62", 0, 1),
]


@pytest.fixture(scope="module")
def proteins():
    queries = load_sequences(QUERIES)
    db = load_sequences(SPROT_DB)
    return queries, db


def windows(batch, count, max_len, rng):
    """Real subsequences of varied length (0 .. max_len) from random records."""
    out = []
    for _ in range(count):
        codes = batch.codes(int(rng.integers(len(batch))))
        n = int(rng.integers(0, min(max_len, len(codes)) + 1))
        start = int(rng.integers(0, len(codes) - n + 1))
        out.append(codes[start:start + n].copy())
    return out


def check_against_reference(queries, subjects, scoring, mode, label):
    q_res, q_off = pack(queries)
    s_res, s_off = pack(subjects)
    scores, q_end, s_end = score_all(q_res, q_off, s_res, s_off, scoring.matrix,
                                     scoring.gap_open, scoring.gap_extend, mode)
    matrix = scoring.matrix.tolist()
    for a, b in itertools.product(range(len(queries)), range(len(subjects))):
        want = score_reference(queries[a].tolist(), subjects[b].tolist(), matrix,
                               scoring.gap_open, scoring.gap_extend, mode)
        got = (int(scores[a, b]), int(q_end[a, b]), int(s_end[a, b]))
        assert got == want, (label, scoring, mode, a, b, len(queries[a]), len(subjects[b]))


@pytest.mark.parametrize("matrix,gap_open,gap_extend", GRID)
@pytest.mark.parametrize("mode", MODES)
def test_real_protein_windows_match_reference(proteins, matrix, gap_open, gap_extend, mode):
    rng = np.random.default_rng(7)
    queries, db = proteins
    scoring = Scoring(matrix, gap_open=gap_open, gap_extend=gap_extend)
    qs = windows(queries, 3, 40, rng) + [np.zeros(0, np.uint8), queries.codes(0)[:1].copy()]
    ss = sorted(windows(db, 19, 45, rng), key=len)  # 19: one full group of 16 and a partial one
    check_against_reference(qs, ss, scoring, mode, "protein windows")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scoring", [Scoring(alphabet="dna"), Scoring("NUC.4.4", gap_open=10, gap_extend=1)],
                         ids=["dna-2-3-5-2", "nuc44-10-1"])
def test_real_dna_windows_match_reference(scoring, mode):
    rng = np.random.default_rng(11)
    genes = load_sequences(RRNA)
    qs = windows(genes, 3, 50, rng)
    ss = sorted(windows(genes, 10, 60, rng), key=len)
    check_against_reference(qs, ss, scoring, mode, "16S windows")


@pytest.mark.parametrize("n_subjects", [1, 7, 8, 9, 15, 16, 17, 31, 32, 33])
def test_lane_boundaries(n_subjects):
    rng = np.random.default_rng(n_subjects)
    scoring = Scoring(alphabet="dna")
    subjects = [rng.integers(0, 5, int(rng.integers(0, 34))).astype(np.uint8)
                for _ in range(n_subjects)]
    queries = [rng.integers(0, 5, n).astype(np.uint8) for n in (0, 1, 31, 32, 33)]
    for mode in MODES:
        check_against_reference(queries, subjects, scoring, mode, f"{n_subjects} subjects")


def test_unsorted_subjects_and_subset(proteins):
    """Grouping follows ``subjects``; any order and subset gives the same per-pair result."""
    queries, db = proteins
    scoring = Scoring()
    q_res, q_off = pack([queries.codes(1)])
    full = score_all(q_res, q_off, db.residues, db.offsets, scoring.matrix, 11, 1)
    order = np.random.default_rng(3).permutation(len(db))[:50]
    part = score_all(q_res, q_off, db.residues, db.offsets, scoring.matrix, 11, 1,
                     subjects=order)
    for full_arr, part_arr in zip(full, part):
        np.testing.assert_array_equal(full_arr[:, order], part_arr)


@pytest.mark.parametrize("mode", MODES)
def test_whole_records_match_traceback_kernel(proteins, mode):
    """Every query against every database record (full lengths up to ~3,800): the
    score kernel and the traceback kernel agree on score and end cell."""
    queries, db = proteins
    scoring = Scoring()
    take = [0, 3, 7]  # 50, 144 and 375 residues
    q_res, q_off = pack([queries.codes(i) for i in take])
    subjects = np.arange(0, len(db), 5)
    scores, q_end, s_end = score_all(q_res, q_off, db.residues, db.offsets, scoring.matrix,
                                     11, 1, mode, subjects=subjects)
    code = MODE_CODES[mode]
    for a, qi in enumerate(take):
        for b, si in enumerate(subjects):
            got = traceback_pair(queries.codes(qi), db.codes(int(si)), scoring.matrix, 11, 1,
                                 code, -1, -1)
            assert (int(scores[a, b]), int(q_end[a, b]), int(s_end[a, b])) == \
                (int(got[0]), int(got[2]), int(got[4])), (mode, queries.names[qi], db.names[si])


def test_16bit_overflow_is_recomputed_exactly():
    """A local score past 32,767 saturates the 16-bit lanes and is redone in 32 bits;
    its neighbours in the same vector keep their 16-bit results."""
    rng = np.random.default_rng(5)
    scoring = Scoring(alphabet="dna")  # match 2: 20,000 identical bases score 40,000
    gene = rng.integers(0, 4, 20_000).astype(np.uint8)
    others = [rng.integers(0, 4, n).astype(np.uint8) for n in (19_990, 19_995, 20_000)]
    subjects = [others[0], gene, others[1], others[2]]
    q_res, q_off = pack([gene])
    s_res, s_off = pack(subjects)
    scores, q_end, s_end = score_all(q_res, q_off, s_res, s_off, scoring.matrix, 5, 2)
    assert scores[0, 1] == 40_000 > INT16_MAX
    assert (q_end[0, 1], s_end[0, 1]) == (20_000, 20_000)
    for b in (0, 2, 3):
        want = traceback_pair(gene, subjects[b], scoring.matrix, 5, 2, 0, -1, -1)
        assert (scores[0, b], q_end[0, b], s_end[0, b]) == (want[0], want[2], want[4])


def test_score_exactly_at_16bit_limit():
    """Scores of 32,766 and 32,768 straddle the saturation value: both exact."""
    scoring = Scoring("PAM30", gap_open=9, gap_extend=1)  # W-W scores 13
    w = scoring.alphabet.encode("W")[0]
    a = scoring.alphabet.encode("A")[0]
    # 2,520 W = 32,760; then A-A (6) makes 32,766, and one more W-W (13) passes the limit.
    below = np.array([w] * 2520 + [a], np.uint8)
    above = np.array([w] * 2521 + [a], np.uint8)
    q_res, q_off = pack([below, above])
    scores, _, _ = score_all(q_res, q_off, q_res, q_off, scoring.matrix, 9, 1)
    assert scores[0, 0] == 32_766
    assert scores[1, 1] == 32_779


def test_empty_inputs_give_empty_tables():
    scoring = Scoring()
    q_res, q_off = pack([])
    s_res, s_off = pack([np.array([0, 1], np.uint8)])
    scores, q_end, s_end = score_all(q_res, q_off, s_res, s_off, scoring.matrix, 11, 1)
    assert scores.shape == q_end.shape == s_end.shape == (0, 1)


def test_scalar_profile_fallback_gives_identical_results(proteins, monkeypatch):
    """CPUs without AVX2 build 8-bit profile columns with scalar code: same results."""
    import swdask.kernels.cpu.score as score_module

    queries, db = proteins
    scoring = Scoring()
    q_res, q_off = pack([queries.codes(i) for i in (0, 5)])
    subjects = np.arange(0, len(db), 3)
    fast = score_all(q_res, q_off, db.residues, db.offsets, scoring.matrix, 11, 1,
                     subjects=subjects)
    monkeypatch.setattr(score_module, "USE_SHUFFLE", False)
    portable = score_all(q_res, q_off, db.residues, db.offsets, scoring.matrix, 11, 1,
                         subjects=subjects)
    for a, b in zip(fast, portable):
        np.testing.assert_array_equal(a, b)


# -- rescoring pairs that saturate 8 bits, threads, group order ------------------------------


def saturating_case(proteins):
    """Three queries against every 4th database record plus the queries' own records:
    the self hits (and some others) score past the 8-bit limit."""
    queries, db = proteins
    names = {name: k for k, name in enumerate(db.names)}
    take = [3, 7, 11]  # 144, 375 and 970 residues; each has its own record in the database
    own = [names[queries.names[i]] for i in take]
    subjects = np.unique(np.concatenate([np.arange(0, len(db), 4), own])).astype(np.int64)
    q_res, q_off = pack([queries.codes(i) for i in take])
    return q_res, q_off, db, subjects


def test_saturated_pairs_rescored_by_traceback_kernel_or_16bit_kernel(proteins, monkeypatch):
    """Pairs that may have saturated the 8-bit lanes get the same exact scores and ends
    whether the traceback kernel rescores them (few pairs, no 16-bit kernel loaded) or
    the 16-bit kernel does; both agree with the traceback kernel on the whole pair."""
    import swdask.kernels.cpu.score as score_module

    q_res, q_off, db, subjects = saturating_case(proteins)
    scoring = Scoring()
    calls = []
    rescore = score_module._rescore
    monkeypatch.setattr(score_module, "_loaded", lambda bits: False)
    monkeypatch.setattr(score_module, "_rescore", lambda *a: calls.append(1) or rescore(*a))
    exact = score_all(q_res, q_off, db.residues, db.offsets, scoring.matrix, 11, 1,
                      subjects=subjects)
    assert calls == [1]
    monkeypatch.setattr(score_module, "EXACT_RESCORE_CELLS", 0)
    wide = score_all(q_res, q_off, db.residues, db.offsets, scoring.matrix, 11, 1,
                     subjects=subjects)
    assert calls == [1]
    for a, b in zip(exact, wide):
        np.testing.assert_array_equal(a, b)
    limit = 255 + int(scoring.matrix.min())  # the 8-bit lanes' limit: 255 - bias
    rows, cols = np.nonzero(exact[0] >= limit)
    assert len(rows) >= 3  # the self hits at least
    for qi, c in zip(rows, cols):
        query = q_res[q_off[qi]:q_off[qi + 1]]
        got = traceback_pair(query, db.codes(int(subjects[c])), scoring.matrix, 11, 1, 0, -1, -1)
        assert (exact[0][qi, c], exact[1][qi, c], exact[2][qi, c]) == (got[0], got[2], got[4])


def test_rescoring_choice(proteins, monkeypatch):
    """The traceback kernel takes few, small pairs when the wider kernel is not loaded;
    the wider kernel takes the rest."""
    import swdask.kernels.cpu.score as score_module

    q_res, q_off, db, subjects = saturating_case(proteins)
    s_off = db.offsets.astype(np.int64)
    rows, cols = np.array([0, 2]), np.array([0, 5])
    args = (rows, cols, 16, q_off, s_off, subjects, Scoring().matrix, 11, 1)
    monkeypatch.setattr(score_module, "_loaded", lambda bits: False)
    assert score_module._rescore_exactly(*args)
    monkeypatch.setattr(score_module, "EXACT_PAIR_CELLS", 10)
    assert not score_module._rescore_exactly(*args)
    monkeypatch.setattr(score_module, "EXACT_PAIR_CELLS", 1 << 24)
    monkeypatch.setattr(score_module, "_loaded", lambda bits: True)
    assert not score_module._rescore_exactly(*args)


def test_one_thread_or_two_give_the_same_results(proteins):
    """Groups are dealt to the threads dynamically; results do not depend on the deal."""
    import numba

    q_res, q_off, db, subjects = saturating_case(proteins)
    scoring = Scoring()
    previous = numba.get_num_threads()
    results = []
    try:
        for threads in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(threads)
            results.append(score_all(q_res, q_off, db.residues, db.offsets, scoring.matrix,
                                     11, 1, subjects=subjects[::-1].copy()))
    finally:
        numba.set_num_threads(previous)
    for a, b in zip(results[0], results[-1]):
        np.testing.assert_array_equal(a, b)


def test_groups_longest_first():
    from swdask.kernels.cpu.score import _group_order

    s_off = np.cumsum([0, 5, 1, 9, 2, 2, 7]).astype(np.int64)  # lengths 5 1 9 2 2 7
    order, longest = _group_order(s_off, np.arange(6, dtype=np.int64), 2)
    # groups (5, 1), (9, 2), (2, 7): longest 5, 9, 7
    assert order.tolist() == [1, 2, 0] and longest == 9
    order, longest = _group_order(s_off, np.zeros(0, np.int64), 2)
    assert order.tolist() == [] and longest == 0


@pytest.mark.parametrize("threshold", [0.97, 0.8])
def test_banded_global_scores_are_exact_where_they_reach_the_bound(threshold):
    """Real 16S genes, mutated copies of them (0-6 % divergence, indels) and empty and
    one-residue sequences, every pair scored in the band of its identity bound (and of a
    bound far below any score: the whole matrix): exact where the global score reaches
    the bound, below the bound elsewhere, as ``score_all`` says."""
    import random

    from swdask.jobs.allpairs.plan import IdentityBound
    from swdask.testing import mutated_copy

    scoring = Scoring(None, match=2, mismatch=-3, gap_open=5, gap_extend=2, alphabet="dna")
    genes = load_sequences(RRNA, alphabet="dna", map_unknown=True)
    rng = random.Random(3)
    texts = []
    for k in range(12):
        gene = genes.alphabet.decode(genes.codes(k))[:400]
        texts += [gene, mutated_copy(gene, rng.uniform(0.0, 0.06), rng)]
    codes = [genes.alphabet.encode(t) for t in texts] + [np.zeros(0, np.uint8),
                                                         np.array([0], np.uint8)]
    res, off = pack(codes)
    want = score_all(res, off, res, off, scoring.matrix, 5, 2, "global")[0].astype(np.int64)
    pq, ps = (a.ravel() for a in np.meshgrid(np.arange(len(codes)), np.arange(len(codes)),
                                             indexing="ij"))
    lengths = np.diff(off)
    bound = IdentityBound.from_scoring(scoring, threshold, "global")
    low = bound.lowest_scores(lengths[pq], lengths[ps])
    got = banded_global_scores(res, off, res, off, pq, ps, low, scoring.matrix, 5, 2)
    reach = want[pq, ps] >= low
    assert reach.sum() >= 12  # each gene with itself at least, most with its copy
    np.testing.assert_array_equal(got[reach], want[pq, ps][reach])
    assert (got[~reach] < low[~reach]).all()
    whole = banded_global_scores(res, off, res, off, pq, ps, np.full(len(pq), -(1 << 62)),
                                 scoring.matrix, 5, 2)
    np.testing.assert_array_equal(whole, want[pq, ps])
