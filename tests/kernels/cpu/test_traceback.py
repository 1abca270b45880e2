"""The CPU traceback kernel against the reference, parasail and Biopython.

What is asserted, and why:

- :func:`traceback_pair` equals :func:`align_reference` exactly (score, the four
  coordinates and the path) in every mode, on hypothesis-drawn pairs over small alphabets
  (many ties), at warp-ish lengths, and on real proteins; the tie rules are ours, so only
  the reference can judge paths.
- The path re-scores to the reported score and consumes exactly the reported ranges.
- parasail and Biopython agree on scores over a grid of matrices and gap pairs (their gap
  convention converted: their open is our ``gap_open + gap_extend``).  Their tie rules for
  paths differ from ours, so paths are not compared with them.  For local alignments the
  end cells are checked against parasail's ``end_query``/``end_ref`` by rule, not by
  equality: parasail's cell must hold the best score too, and ours, the first best cell in
  column-major order, may not come after it.  Biopython's global mode with
  ``end_gap_score=0`` is our semiglobal (free end gaps on both sequences, as parasail's
  ``sg``).
"""
from __future__ import annotations

import numpy as np
import parasail
import pytest
from Bio.Align import PairwiseAligner, substitution_matrices
from hypothesis import given, settings
from hypothesis import strategies as st

from swdask.kernels.cpu.reference import (
    GLOBAL,
    LOCAL,
    MODE_CODES,
    OP_DEL,
    OP_INS,
    OP_MATCH,
    SEMIGLOBAL,
    align_reference,
)
from swdask.kernels.cpu.traceback import (
    COUNT_COLUMNS,
    COUNT_GAP_OPENS,
    COUNT_MATCHES,
    COUNT_MISMATCHES,
    MAX_TRACEBACK_CELLS,
    align_codes,
    check_traceback_size,
    path_counts,
    rescore,
    traceback_pair,
)
from swdask.kernels.paths import cigar_string, summarize_path
from swdask.scoring import Scoring
from swdask.testing import path_summary
from tests.helpers import QUERIES, RRNA, SPROT_DB, read_fasta

MODES = tuple(MODE_CODES)
GAP_PAIRS = [(0, 1), (1, 1), (3, 2), (5, 2), (11, 1)]
PROTEIN_GRID = [("BLOSUM62", 11, 1), ("BLOSUM50", 13, 2), ("PAM250", 10, 2), ("BLOSUM45", 14, 2)]
DNA_GRID = [(None, 5, 2), ("NUC.4.4", 10, 1)]
PARASAIL = {
    "local": parasail.sw_trace_scan_32,
    "global": parasail.nw_trace_scan_32,
    "semiglobal": parasail.sg_trace_scan_32,
}


def fast(query, subject, matrix, gap_open, gap_extend, mode, end=None):
    """traceback_pair as the reference's tuple (ints and a list of ops)."""
    end_i, end_j = (-1, -1) if end is None else end
    score, qs, qe, ss, se, ops = traceback_pair(
        np.asarray(query, dtype=np.uint8), np.asarray(subject, dtype=np.uint8),
        np.ascontiguousarray(matrix, dtype=np.int32), gap_open, gap_extend, MODE_CODES[mode],
        end_i, end_j,
    )
    return int(score), int(qs), int(qe), int(ss), int(se), ops.tolist()


def reference(query, subject, matrix, gap_open, gap_extend, mode):
    return align_reference(list(map(int, query)), list(map(int, subject)),
                           np.asarray(matrix).tolist(), gap_open, gap_extend, mode)


def check_path(result, query, subject, matrix, gap_open, gap_extend, label):
    """The path re-scores to the score and covers exactly the reported ranges."""
    score, qs, qe, ss, se, ops = result
    ops = list(ops)
    assert rescore(query, subject, qs, ss, ops, matrix, gap_open, gap_extend) == score, label
    assert qs + sum(op != OP_DEL for op in ops) == qe, label
    assert ss + sum(op != OP_INS for op in ops) == se, label
    assert 0 <= qs <= qe <= len(query) and 0 <= ss <= se <= len(subject), label


# --- random pairs against the reference ---------------------------------------------

@settings(deadline=None, max_examples=200, derandomize=True)
@given(batch=st.lists(st.tuples(st.lists(st.integers(0, 4), max_size=30),
                                st.lists(st.integers(0, 4), max_size=30),
                                st.sampled_from(sorted(MODE_CODES))), min_size=1, max_size=6))
def test_path_counts_count_as_summarize_path(batch):
    """Many paths counted at once (concatenated sequences, empty paths among them, the
    unknown code 4 never an identity) give each path's summarize_path counts."""
    matrix = Scoring(alphabet="dna").matrix.astype(np.int32)
    queries = [np.array(q, np.uint8) for q, _, _ in batch]
    subjects = [np.array(s, np.uint8) for _, s, _ in batch]
    results = [traceback_pair(q, s, matrix, 5, 2, MODE_CODES[mode], -1, -1)
               for q, s, (_, _, mode) in zip(queries, subjects, batch)]

    def joined(seqs):
        at = np.concatenate([[0], np.cumsum([len(x) for x in seqs])[:-1]]).astype(np.int64)
        return np.concatenate(seqs + [np.zeros(0, np.uint8)]).astype(np.uint8), at

    (q_res, q_at), (s_res, s_at) = joined(queries), joined(subjects)
    starts = [(r[1], r[3]) for r in results]
    paths = [np.asarray(r[5], np.uint8) for r in results]
    counts = path_counts(q_res, q_at, s_res, s_at, starts, paths, 4)
    for k, (q, s, (qs, ss), ops) in enumerate(zip(queries, subjects, starts, paths)):
        _, matches, mismatches, gap_opens, columns = summarize_path(q, s, qs, ss, ops, 4)
        got = counts[k, [COUNT_MATCHES, COUNT_MISMATCHES, COUNT_GAP_OPENS, COUNT_COLUMNS]]
        assert tuple(got) == (matches, mismatches, gap_opens, columns), k


@st.composite
def problems(draw):
    """A pair over 1-4 letters, a substitution matrix and a gap pair."""
    k = draw(st.integers(1, 4))
    seq = st.lists(st.integers(0, k - 1), min_size=0, max_size=40)
    query, subject = draw(seq), draw(seq)
    kind = draw(st.sampled_from(["dna", "random"]))
    if kind == "dna":
        matrix = Scoring(alphabet="dna").matrix[:k, :k]
    else:
        values = draw(st.lists(st.integers(-5, 5), min_size=k * k, max_size=k * k))
        matrix = np.array(values, dtype=np.int32).reshape(k, k)
    gap_open, gap_extend = draw(st.sampled_from(GAP_PAIRS))
    return query, subject, np.ascontiguousarray(matrix, dtype=np.int32), gap_open, gap_extend


@settings(deadline=None, max_examples=1500, derandomize=True)
@given(problem=problems())
def test_matches_reference_on_random_pairs(problem):
    query, subject, matrix, gap_open, gap_extend = problem
    for mode in MODES:
        label = (mode, query, subject, matrix.tolist(), gap_open, gap_extend)
        expected = reference(query, subject, matrix, gap_open, gap_extend, mode)
        got = fast(query, subject, matrix, gap_open, gap_extend, mode)
        assert got == expected, label
        # Given the end cell, only the prefix rectangle is computed: same alignment.
        given_end = fast(query, subject, matrix, gap_open, gap_extend, mode,
                         end=(expected[2], expected[4]))
        assert given_end == expected, label
        check_path(got, query, subject, matrix, gap_open, gap_extend, label)
        if mode == "local":
            assert got[0] >= 0 and (got[0] > 0) == bool(got[5]), label
        # The summary agrees with the obvious one (code 0 plays the unknown residue).
        q, s = np.array(query, np.uint8), np.array(subject, np.uint8)
        cigar, *counts = summarize_path(q, s, got[1], got[3], np.array(got[5], np.uint8), 0)
        assert (cigar_string(cigar), *counts) == path_summary(
            query, subject, got[1], got[3], got[5], 0), label


@pytest.mark.parametrize("m", [0, 1, 15, 16, 17, 31, 32, 33])
@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 31, 32, 33])
def test_matches_reference_at_boundary_lengths(m, n):
    rng = np.random.default_rng(1000 * m + n)
    scoring = Scoring("BLOSUM62", gap_open=3, gap_extend=1)
    # Two related sequences: the subject is the query, mutated, so paths hold gaps.
    query = rng.integers(0, 20, m).astype(np.uint8)
    subject = np.resize(query, n) if m else rng.integers(0, 20, n).astype(np.uint8)
    subject = np.where(rng.random(n) < 0.3, rng.integers(0, 20, n), subject).astype(np.uint8)
    for mode in MODES:
        expected = reference(query, subject, scoring.matrix, 3, 1, mode)
        assert fast(query, subject, scoring.matrix, 3, 1, mode) == expected, (mode, m, n)


def test_matches_reference_on_real_proteins():
    queries = list(read_fasta(QUERIES).items())[:3]  # 50, 75 and 100 residues
    database = [r for r in read_fasta(SPROT_DB).items() if len(r[1]) <= 150][:4]
    failures = []
    for name, gap_open, gap_extend in PROTEIN_GRID[:2]:
        scoring = Scoring(name, gap_open=gap_open, gap_extend=gap_extend)
        for qname, qseq in queries:
            for dname, dseq in database:
                q, d = scoring.alphabet.encode(qseq), scoring.alphabet.encode(dseq)
                for mode in MODES:
                    expected = reference(q, d, scoring.matrix, gap_open, gap_extend, mode)
                    if fast(q, d, scoring.matrix, gap_open, gap_extend, mode) != expected:
                        failures.append((name, gap_open, gap_extend, mode, qname, dname))
    assert not failures, "\n".join(map(repr, failures))


# --- parasail and Biopython over a grid ---------------------------------------------

def biopython_aligner(matrix_name, scoring, mode):
    """Biopython's aligner with the same scoring (its open counts the first residue)."""
    if matrix_name is None:
        letters = scoring.alphabet.letters
        matrix = substitution_matrices.Array(letters, dims=2,
                                             data=scoring.matrix.astype(float))
    else:
        matrix = substitution_matrices.load(matrix_name)
    aligner = PairwiseAligner(
        mode="local" if mode == "local" else "global",
        substitution_matrix=matrix,
        open_gap_score=-(scoring.gap_open + scoring.gap_extend),
        extend_gap_score=-scoring.gap_extend,
    )
    if mode == "semiglobal":
        aligner.end_gap_score = 0
    return aligner


def compare_with_tools(matrix_name, scoring, pairs):
    """Scores against parasail and Biopython; local ends against parasail's, by rule."""
    parasail_matrix = scoring.to_parasail()
    p_open, p_extend = scoring.parasail_gaps
    failures = []
    for mode in MODES:
        aligner = biopython_aligner(matrix_name, scoring, mode)
        for qname, q, dname, d in pairs:
            label = (matrix_name or scoring.name, scoring.gap_open, scoring.gap_extend, mode,
                     qname, dname)
            # Letters from codes: IUPAC codes become N, as swdask scores them.
            qs, ds = scoring.alphabet.decode(q), scoring.alphabet.decode(d)
            ours = align_codes(q, d, scoring, mode)
            theirs = PARASAIL[mode](qs, ds, p_open, p_extend, parasail_matrix)
            bio = aligner.score(qs, ds)
            if (mode == "semiglobal" and ours["score"] == bio == 0 and theirs.score < 0
                    and ours["align_length"] == 0):
                # parasail's sg never ends in the corners (m, 0) and (0, n): when every
                # real alignment scores below 0 it reports the best negative one, where
                # the reference (and Biopython) take the empty alignment, 0.
                pass
            elif not ours["score"] == theirs.score == bio:
                failures.append((*label, ours["score"], theirs.score, bio))
                continue
            result = tuple(ours[k] for k in ("score", "query_start", "query_end",
                                             "subject_start", "subject_end", "ops"))
            check_path(result, q, d, scoring.matrix, scoring.gap_open, scoring.gap_extend,
                       label)
            if mode == "local" and ours["score"] > 0:
                p_end = (theirs.end_query + 1, theirs.end_ref + 1)
                at_theirs = align_codes(q, d, scoring, mode, end=p_end)["score"]
                ours_first = (ours["subject_end"], ours["query_end"]) <= (p_end[1], p_end[0])
                if at_theirs != ours["score"] or not ours_first:
                    failures.append((*label, "end", (ours["query_end"], ours["subject_end"]),
                                     p_end, at_theirs))
    return failures


@pytest.mark.parametrize("matrix_name, gap_open, gap_extend", PROTEIN_GRID)
def test_protein_scores_match_parasail_and_biopython(matrix_name, gap_open, gap_extend):
    scoring = Scoring(matrix_name, gap_open=gap_open, gap_extend=gap_extend)
    queries = list(read_fasta(QUERIES).items())
    database = list(read_fasta(SPROT_DB).items())
    # Records with B, Z or X, records spread over the lengths up to 1000, and the queries'
    # own records where the database holds them (true hits: long, high-scoring paths).
    odd = [r for r in database if set(r[1]) & set("BZX")][:4]
    by_length = sorted((r for r in database if len(r[1]) <= 1000), key=lambda r: len(r[1]))
    spread = by_length[:: max(1, len(by_length) // 6)][:6]
    own = {name: seq for name, seq in database}
    pairs = []
    for k, (qname, qseq) in enumerate(queries):
        subjects = odd + spread[k % 2::2]
        subjects += [(qname, own[qname])] if qname in own else []
        for dname, dseq in subjects:
            pairs.append((qname, scoring.alphabet.encode(qseq), dname,
                          scoring.alphabet.encode(dseq)))
    assert sum(q == d for q, _, d, _ in pairs) == 3  # the three queries kept in the database
    failures = compare_with_tools(matrix_name, scoring, pairs)
    assert not failures, "\n".join(map(repr, failures))


@pytest.mark.parametrize("matrix_name, gap_open, gap_extend", DNA_GRID)
def test_dna_scores_match_parasail_and_biopython(matrix_name, gap_open, gap_extend):
    if matrix_name is None:
        scoring = Scoring(match=2, mismatch=-3, gap_open=gap_open, gap_extend=gap_extend)
    else:
        scoring = Scoring(matrix_name, gap_open=gap_open, gap_extend=gap_extend)
    records = list(read_fasta(RRNA).items())
    rng = np.random.default_rng(16)
    pairs = []
    for _ in range(24):
        (a_name, a), (b_name, b) = (records[k] for k in rng.choice(len(records), 2, replace=False))
        # Windows at nearby offsets of two 16S genes: homologous, with indels.
        length_a, length_b = (int(x) for x in rng.integers(100, 300, 2))
        start = int(rng.integers(0, min(len(a), len(b)) - 300))
        shift = int(rng.integers(-20, 21))
        wa = a[start:start + length_a]
        wb = b[max(0, start + shift):max(0, start + shift) + length_b]
        pairs.append((f"{a_name}[{start}:+{length_a}]", scoring.alphabet.encode(wa),
                      f"{b_name}[{max(0, start + shift)}:+{length_b}]",
                      scoring.alphabet.encode(wb)))
    failures = compare_with_tools(matrix_name, scoring, pairs)
    assert not failures, "\n".join(map(repr, failures))


# --- conventions ---------------------------------------------------------------------

def test_gap_convention_is_open_plus_k_extend():
    # One 3-residue gap between 20 identities: 20 * 2 - (5 + 3 * 2) = 29.
    scoring = Scoring(match=2, mismatch=-3, gap_open=5, gap_extend=2)
    query = "ACGTACGTAC" + "GTACGTACGT"
    subject = "ACGTACGTAC" + "TTT" + "GTACGTACGT"
    assert scoring.gap_cost(3) == 5 + 3 * 2
    for mode in MODES:
        result = align_codes(query, subject, scoring, mode)
        assert (result["score"], result["cigar"]) == (29, "10=3D10="), mode
        assert result["gap_opens"] == 1 and result["align_length"] == 23
    # Reversed roles: the gap is in the subject, an 'I'.
    assert align_codes(subject, query, scoring, "global")["cigar"] == "10=3I10="
    # parasail's (open, extend) is (o + e, e); Biopython's open score is -(o + e).
    assert scoring.parasail_gaps == (7, 2)
    for function in PARASAIL.values():
        assert function(query, subject, 7, 2, scoring.to_parasail()).score == 29
    for mode in MODES:
        bio = biopython_aligner(None, scoring, mode)
        if mode != "semiglobal":  # its end gap scores differ: no single open score then
            assert (bio.open_gap_score, bio.extend_gap_score) == (-7, -2)
        assert bio.score(query, subject) == 29
    # A gap of one residue costs o + e, two gaps of one cost twice that.
    assert rescore([0, 1], [0, 2, 1], 0, 0, [OP_MATCH, OP_DEL, OP_MATCH], scoring.matrix,
                   5, 2) == 4 - 7
    assert rescore([0, 1], [0, 2, 3, 1], 0, 0, [OP_MATCH, OP_DEL, OP_DEL, OP_MATCH],
                   scoring.matrix, 5, 2) == 4 - 9
    assert rescore([0, 3, 1], [0, 2, 1], 0, 0, [OP_MATCH, OP_DEL, OP_INS, OP_MATCH],
                   scoring.matrix, 5, 2) == 4 - 14


def test_semiglobal_corner_differs_from_parasail():
    # Every real semiglobal alignment of these scores below 0.  The reference lets the
    # alignment end in the corner (m, 0), all end gaps and no column: score 0, as Biopython
    # with free end gaps.  parasail's sg ends only in cells with i, j >= 1: score -3.
    scoring = Scoring(alphabet="dna")
    result = align_codes("AAAA", "C", scoring, "semiglobal")
    assert (result["score"], result["query_start"], result["query_end"],
            result["subject_start"], result["subject_end"], result["cigar"]) == (
                0, 4, 4, 0, 0, "")
    assert biopython_aligner(None, scoring, "semiglobal").score("AAAA", "C") == 0
    assert parasail.sg_trace_scan_32("AAAA", "C", 7, 2, scoring.to_parasail()).score == -3


def test_mode_codes_and_bad_mode():
    assert (LOCAL, GLOBAL, SEMIGLOBAL) == (0, 1, 2)
    assert MODE_CODES == {"local": 0, "global": 1, "semiglobal": 2}
    with pytest.raises(ValueError) as info:
        align_codes("ACGT", "ACGT", Scoring(alphabet="dna"), "x")
    assert str(info.value) == "unknown mode 'x'; choose one of: local, global, semiglobal"


def test_bad_end_cells():
    scoring = Scoring(alphabet="dna")
    with pytest.raises(ValueError, match="outside the 4 x 3 matrix"):
        align_codes("ACGT", "ACG", scoring, "local", end=(5, 1))
    with pytest.raises(ValueError, match="global alignment ends at"):
        align_codes("ACGT", "ACG", scoring, "global", end=(2, 3))
    with pytest.raises(ValueError, match="semiglobal alignment ends on row 4 or column 3"):
        align_codes("ACGT", "ACG", scoring, "semiglobal", end=(2, 2))
    assert align_codes("ACGT", "ACG", scoring, "semiglobal", end=(2, 3))["query_end"] == 2


# --- edge cases ----------------------------------------------------------------------

def test_protein_ambiguity_letters():
    scoring = Scoring("BLOSUM62", gap_open=11, gap_extend=1)
    query, subject = "MKXBZ*WXXLV", "MKXBZ*WXXLV"
    result = align_codes(query, subject, scoring, "global")
    # X-X is never an identity; B, Z and * are ordinary letters.
    assert result["cigar"] == "2=1X4=2X2="
    assert (result["matches"], result["mismatches"], result["align_length"]) == (8, 3, 11)
    assert result["identity"] == 8 / 11
    q = scoring.alphabet.encode("PEPTXBZIDE*KX")
    s = scoring.alphabet.encode("PEPXXZBIDKE*")
    for mode in MODES:
        expected = reference(q, s, scoring.matrix, 11, 1, mode)
        assert fast(q, s, scoring.matrix, 11, 1, mode) == expected, mode
        p = PARASAIL[mode]("PEPTXBZIDE*KX", "PEPXXZBIDKE*", 12, 1, scoring.to_parasail())
        assert p.score == expected[0], mode


def test_dna_n_is_never_an_identity():
    for scoring in (Scoring(alphabet="dna"), Scoring("NUC.4.4", gap_open=10, gap_extend=1)):
        result = align_codes("ACNNGT", "ACNNGT", scoring, "global")
        assert result["cigar"] == "2=2X2=", scoring
        assert (result["matches"], result["mismatches"]) == (4, 2)
        # IUPAC codes are read as N.
        assert align_codes("ACRYGT", "ACNNGT", scoring, "global")["cigar"] == "2=2X2="


@pytest.mark.parametrize("mode", MODES)
def test_all_mismatches(mode):
    scoring = Scoring(alphabet="dna")
    result = align_codes("AAAA", "CCCC", scoring, mode)
    expected = reference(scoring.alphabet.encode("AAAA"), scoring.alphabet.encode("CCCC"),
                         scoring.matrix, 5, 2, mode)
    assert (result["score"], result["query_start"], result["query_end"],
            result["subject_start"], result["subject_end"],
            result["ops"].tolist()) == expected
    if mode == "local":
        # Nothing scores above 0: the empty alignment at (0, 0).
        assert expected == (0, 0, 0, 0, 0, [])
        assert (result["cigar"], result["align_length"], result["identity"]) == ("", 0, 0.0)
        assert (result["matches"], result["mismatches"], result["gap_opens"]) == (0, 0, 0)
    elif mode == "global":
        assert (result["score"], result["cigar"]) == (-12, "4X")


@pytest.mark.parametrize("mode", MODES)
def test_empty_sequences(mode):
    scoring = Scoring(alphabet="dna")
    for query, subject in (("", ""), ("", "ACG"), ("ACG", ""), ("A", ""), ("A", "A")):
        q, s = scoring.alphabet.encode(query), scoring.alphabet.encode(subject)
        expected = reference(q, s, scoring.matrix, 5, 2, mode)
        result = align_codes(q, s, scoring, mode)
        got = tuple(result[k] for k in ("score", "query_start", "query_end",
                                        "subject_start", "subject_end"))
        assert (*got, result["ops"].tolist()) == expected, (mode, query, subject)
    assert align_codes("", "ACG", scoring, "global")["cigar"] == "3D"
    assert align_codes("ACG", "", scoring, "global")["score"] == -(5 + 3 * 2)


@pytest.mark.slow
def test_long_identical_pair_beyond_16_bits():
    # 40,000 identities score 80,000: beyond int16 and uint16, exact in the int32 kernel.
    # (40,001^2 cells is over align_codes' limit, so the kernel is called directly; the
    # direction matrix takes 1.6 GB.)
    scoring = Scoring(alphabet="dna")
    rng = np.random.default_rng(40_000)
    seq = rng.integers(0, 4, 40_000).astype(np.uint8)
    score, qs, qe, ss, se, ops = traceback_pair(seq, seq, scoring.matrix, 5, 2, LOCAL, -1, -1)
    assert (int(score), qs, qe, ss, se) == (80_000, 0, 40_000, 0, 40_000)
    cigar, matches, mismatches, gap_opens, length = summarize_path(seq, seq, qs, ss, ops, 4)
    assert cigar_string(cigar) == "40000="
    assert (matches, mismatches, gap_opens, length) == (40_000, 0, 0, 40_000)


def test_traceback_cell_limit():
    scoring = Scoring(alphabet="dna")
    seq = np.zeros(40_000, dtype=np.uint8)
    assert MAX_TRACEBACK_CELLS == 1_000_000_000
    with pytest.raises(ValueError) as info:
        align_codes(seq, seq, scoring, "local")
    assert str(info.value).startswith(
        "pair of 40000 x 40000 residues needs 1,600,080,001 traceback cells, over the "
        "limit of 1,000,000,000; ")
    # A given end is checked as its prefix rectangle: 31,622^2 cells pass, 31,623^2 not.
    assert check_traceback_size(31_621, 31_621) == 31_622 ** 2
    with pytest.raises(ValueError, match="over the limit"):
        align_codes(seq, seq, scoring, "local", end=(31_622, 31_622))


@settings(deadline=None, max_examples=400, derandomize=True)
@given(problem=problems())
def test_global_band_of_the_optimal_score_gives_the_same_alignment(problem):
    """Computed only in the band of its optimal score (global_band), a global traceback
    gives the whole matrix's score, start and path, for any matrix and gap pair."""
    from swdask.kernels.directions import global_band

    query, subject, matrix, gap_open, gap_extend = problem
    q, s = np.asarray(query, np.uint8), np.asarray(subject, np.uint8)
    whole = traceback_pair(q, s, matrix, gap_open, gap_extend, GLOBAL, len(q), len(s))
    (lo,), (hi,) = global_band([len(q)], [len(s)], [whole[0]], matrix, gap_open, gap_extend)
    banded = traceback_pair(q, s, matrix, gap_open, gap_extend, GLOBAL, len(q), len(s),
                            (int(lo), int(hi)))
    assert banded[:5] == whole[:5]
    np.testing.assert_array_equal(banded[5], whole[5])
