"""Scoring: matrices from Biopython or NCBI files, DNA scores, the gap convention."""
import pickle

import numpy as np
import parasail
import pytest
from Bio.Align import PairwiseAligner, substitution_matrices

from swdask.errors import ScoringError
from swdask.scoring import MATRICES, Scoring


@pytest.mark.parametrize("name", list(MATRICES))
def test_named_matrices_match_biopython(name):
    scoring = Scoring(name)
    source = substitution_matrices.load(name)
    letters = scoring.alphabet.letters
    for a, la in enumerate(letters):
        for b, lb in enumerate(letters):
            if la in source.alphabet and lb in source.alphabet:
                assert scoring.matrix[a, b] == source[la, lb], (name, la, lb)


def test_blosum62_scores_u_o_j_as_blastp():
    """BLAST's BLOSUM62 (Biopython's BLASTP table) defines U, O and J: ours are its scores."""
    scoring, blast = Scoring(), substitution_matrices.load("BLASTP")
    letters = scoring.alphabet.letters
    assert letters.endswith("UOJ")
    for rare in "UOJ":
        for other in letters:
            k, o = letters.index(rare), letters.index(other)
            assert scoring.matrix[k, o] == blast[rare, other] == scoring.matrix[o, k], (rare, other)


@pytest.mark.parametrize("name", [n for n in MATRICES if n not in ("BLOSUM62", "NUC.4.4")])
def test_u_o_j_where_the_matrix_lacks_them(name):
    """U as C and O as X (BLAST's blast_stat.c), J the better of I and L (SSEARCH)."""
    m, letters = Scoring(name).matrix, Scoring(name).alphabet.letters
    c = {x: letters.index(x) for x in letters}
    assert np.array_equal(m[c["U"], :24], m[c["C"], :24])
    assert np.array_equal(m[:24, c["U"]], m[:24, c["C"]])
    assert m[c["U"], c["U"]] == m[c["C"], c["C"]]
    assert np.array_equal(m[c["O"], :24], m[c["X"], :24]) and m[c["O"], c["O"]] == m[c["X"], c["X"]]
    assert np.array_equal(m[c["J"], :24], np.maximum(m[c["I"], :24], m[c["L"], :24]))
    assert m[c["J"], c["J"]] == max(m[c["I"], c["I"]], m[c["L"], c["L"]])
    assert np.array_equal(m, m.T)


def test_a_matrix_file_that_defines_u_scores_it_as_written(tmp_path):
    source = substitution_matrices.load("BLOSUM62")
    letters = "ARNDCQEGHILKMFPSTWYVU"
    lines = ["   " + "  ".join(letters)]
    for la in letters:
        lines.append(la + " " + " ".join(
            "7" if "U" in (la, lb) else f"{int(source[la, lb]):2d}" for lb in letters))
    path = tmp_path / "with_u.mat"
    path.write_text("\n".join(lines) + "\n")
    scoring = Scoring(path)
    u, a, o = (scoring.alphabet.letters.index(x) for x in "UAO")
    assert scoring.matrix[u, a] == 7 and scoring.matrix[u, u] == 7
    assert scoring.matrix[o, a] == scoring.matrix[scoring.alphabet.letters.index("X"), a]


def test_defaults_are_blast_defaults():
    protein, dna = Scoring(), Scoring(alphabet="dna")
    assert (protein.gap_open, protein.gap_extend, protein.name) == (11, 1, "BLOSUM62")
    assert (dna.gap_open, dna.gap_extend) == (5, 2)
    assert dna.score("ACGT", "ACGA") == 2 + 2 + 2 - 3
    assert dna.score("N", "N") == -3  # N is unknown: never a match


def test_gap_convention_is_open_plus_k_extend_and_converts_to_parasail_and_biopython():
    """A gap of k residues costs open + k*extend; parasail/Biopython take (o+e, e)."""
    scoring = Scoring(alphabet="dna", gap_open=5, gap_extend=2)
    assert [scoring.gap_cost(k) for k in (0, 1, 2, 3)] == [0, 7, 9, 11]
    assert scoring.parasail_gaps == (7, 2)
    query, subject = "ACGTACGTAC" + "GGGTTTCCCA", "ACGTACGTAC" + "TTT" + "GGGTTTCCCA"
    ours = 20 * 2 - scoring.gap_cost(3)
    result = parasail.nw_scan_32(query, subject, *scoring.parasail_gaps, scoring.to_parasail())
    assert result.score == ours
    aligner = PairwiseAligner(mode="global", substitution_matrix=substitution_matrices.Array(
        "ACGTN", 2, scoring.matrix.astype(float)))
    aligner.open_gap_score = -(scoring.gap_open + scoring.gap_extend)
    aligner.extend_gap_score = -scoring.gap_extend
    assert aligner.score(query, subject) == ours


def test_ncbi_matrix_file(tmp_path):
    path = tmp_path / "mini.mat"
    source = substitution_matrices.load("BLOSUM62")
    letters = "ARNDCQEGHILKMFPSTWYV"  # no B, Z, X, *: scored with the minimum (-4)
    lines = ["# a user's matrix", "   " + "  ".join(letters)]
    for la in letters:
        lines.append(la + " " + " ".join(f"{int(source[la, lb]):2d}" for lb in letters))
    path.write_text("\n".join(lines) + "\n")
    scoring = Scoring(path, gap_open=10, gap_extend=1)
    assert scoring.alphabet.name == "protein"
    x = scoring.alphabet.letters.index("X")
    w = scoring.alphabet.letters.index("W")
    assert scoring.matrix[w, w] == 11 and scoring.matrix[x, w] == -4


@pytest.mark.parametrize("kwargs,message", [
    (dict(matrix="BLOSUM99"), "unknown matrix 'BLOSUM99'; choose one of: BLOSUM45, BLOSUM50, "
     "BLOSUM62, BLOSUM80, BLOSUM90, PAM30, PAM70, PAM250, NUC.4.4, or give the path of an "
     "NCBI-format matrix file"),
    (dict(gap_open=-1), "gap_open must be a whole number from 0 to 32767, got -1"),
    (dict(gap_extend=0), "gap_extend must be a whole number from 1 to 32767, got 0"),
    (dict(gap_open=2**40), "gap_open must be a whole number from 0 to 32767, got 1099511627776"),
    (dict(gap_extend=float("inf")), "gap_extend must be a whole number, got inf"),
    (dict(gap_open=float("nan")), "gap_open must be a whole number, got nan"),
    (dict(match=10**9), "match must be a whole number from -32768 to 32767, got 1000000000"),
    (dict(mismatch=-40000), "mismatch must be a whole number from -32768 to 32767, got -40000"),
    (dict(gap_open=1.5), "gap_open must be a whole number, got 1.5"),
    (dict(gap_extend="2"), "gap_extend must be a whole number, got '2'"),
    (dict(gap_open=True), "gap_open must be a whole number, got True"),
    (dict(matrix="BLOSUM62", match=1), "give either a matrix or match/mismatch scores, not both"),
    (dict(match=1, mismatch=2), "need match > 0 and mismatch < match, got 1 and 2"),
    (dict(matrix="NUC.4.4", alphabet="protein"), "matrix NUC.4.4 scores dna, not protein"),
])
def test_bad_scoring_is_refused_with_a_clear_message(kwargs, message):
    with pytest.raises(ScoringError) as info:
        Scoring(**kwargs)
    assert str(info.value) == message


def test_matrix_lacking_standard_letters_is_refused(tmp_path):
    path = tmp_path / "bad.mat"
    path.write_text("   A  C  G\nA  1 -1 -1\nC -1  1 -1\nG -1 -1  1\n")
    with pytest.raises(ScoringError, match="cover neither protein nor dna"):
        Scoring(path)
    garbage = tmp_path / "garbage.mat"
    garbage.write_text("this is not a matrix\n1 2 3\n")
    with pytest.raises(ScoringError, match="garbage.mat"):
        Scoring(garbage)


def test_scoring_pickles_and_compares():
    for scoring in (Scoring("PAM70", gap_open=9, gap_extend=1), Scoring(match=1, mismatch=-2)):
        clone = pickle.loads(pickle.dumps(scoring))
        assert clone == scoring and hash(clone) == hash(scoring)
        assert repr(clone) == repr(scoring)
    assert Scoring() != Scoring(gap_open=10)


def test_query_profile_layout():
    scoring = Scoring()
    codes = scoring.alphabet.encode("WAX")
    profile = scoring.query_profile(codes, dtype=np.int16)
    assert profile.shape == (scoring.alphabet.size, 3) and profile.flags.c_contiguous
    assert profile[codes[0], 0] == 11  # W-W in BLOSUM62
    np.testing.assert_array_equal(profile[:, 1], scoring.matrix[:, codes[1]])


@pytest.mark.parametrize("value,shown", [
    ("1e300", "1e+300"), ("inf", "inf"), ("-inf", "-inf"), ("40000", "40000"), ("-32769", "-32769"),
    ("2.5", "2.5"), ("nan", "nan")])
def test_matrix_file_entry_out_of_range_names_file_line_and_range(tmp_path, value, shown):
    """Huge, infinite, fractional or NaN entries: one line with the file, the line of the row,
    the pair, the value and the allowed range; before any work."""
    source = substitution_matrices.load("BLOSUM62")
    letters = "ARNDCQEGHILKMFPSTWYV"
    lines = ["# comment", "   " + "  ".join(letters)]
    for la in letters:
        lines.append(la + " " + " ".join(
            value if (la, lb) == ("K", "M") else f"{int(source[la, lb]):2d}" for lb in letters))
    path = tmp_path / "bad.mat"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ScoringError) as info:
        Scoring(path)
    message = str(info.value)
    assert message.startswith(f"{path}: line 14: score of K/M must be a whole number")
    assert message.endswith(f"got {shown}")
    if shown not in ("2.5", "nan", "inf", "-inf"):
        assert "from -32768 to 32767" in message


def test_the_limits_hold_in_the_kernels():
    """The extreme allowed scoring runs exactly: entries of +-32767 and gaps of 32767 on
    the 32-bit kernels (no 8/16-bit path takes them), against the reference."""
    from swdask.kernels.cpu.reference import score_reference
    from swdask.kernels.cpu.score import score_all

    big = Scoring(substitution_matrices.Array("ACGTN", 2, np.where(
        np.eye(5, dtype=bool), 32767.0, -32768.0)), gap_open=32767, gap_extend=32767)
    big.check_lengths(60, 60)
    rng = np.random.default_rng(5)
    q = rng.integers(0, 4, 40).astype(np.uint8)
    s = np.concatenate([q[5:30], rng.integers(0, 4, 20).astype(np.uint8)])
    scores, _, _ = score_all(q, np.array([0, len(q)]), s, np.array([0, len(s)]), big.matrix,
                             big.gap_open, big.gap_extend, "local")
    expected = score_reference(q, s, big.matrix, big.gap_open, big.gap_extend, "local")
    assert int(scores[0, 0]) == expected[0] > 32767
    with pytest.raises(ScoringError, match="beyond the exact 32-bit range"):
        big.check_lengths(6000, 6000)
