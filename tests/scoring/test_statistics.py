"""Karlin-Altschul statistics: BLAST's published tables, bit scores and E-values.

The expected numbers in ``BLAST_HSPS`` were printed by NCBI BLAST+ 2.12.0 (Debian package
``ncbi-blast+`` 2.12.0+ds-3) in its JSON output (``-outfmt 15``, 6 significant digits), on
the project's test data::

    zcat tests/data/sprot_db.fasta.gz > sprot_db.fasta      # 171,138 residues, 400 sequences
    makeblastdb -in sprot_db.fasta -dbtype prot -out sprot
    blastp -query tests/data/sprot_queries.fasta -db sprot -matrix M -gapopen O -gapextend E \\
        -comp_based_stats 0 -seg no -evalue 1000 -max_target_seqs 500 -outfmt 15

    zcat tests/data/16S_200.fna.gz > 16S.fna                # 287,612 residues, 200 sequences
    makeblastdb -in 16S.fna -dbtype nucl -out s16
    # q16.fna: the first 6 records of 16S.fna
    blastn -task blastn -query q16.fna -db s16 -reward R -penalty P -gapopen O -gapextend E \\
        -dust no -soft_masking false -strand plus -evalue 1000 -max_target_seqs 500 -outfmt 15

Each row is one HSP: its raw ``score``, the query's ``query_len``, the subject's ``len``,
its ``evalue`` and ``bit_score``, and the report's ``stat.hsp_len`` (length adjustment) and
``stat.eff_space`` (search space) for that query.  Run over every combination in the
tables, the same comparison agreed to the printed digits everywhere; these rows keep a
sample of it, from E ~ 1e-161 to E ~ 50, odd scores of a round-down pair included.
"""
import math
import pickle
import re
from dataclasses import FrozenInstanceError
from importlib.resources import files
from itertools import pairwise

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from Bio.Align import substitution_matrices

from swdask.scoring import MATRICES, Scoring
from swdask.scoring.statistics import (
    _BLASTN,
    _PROTEIN,
    KarlinAltschul,
    annotate,
    bitscore,
    evalue,
    karlin_altschul,
    length_adjustment,
)

PROTEIN_DB = (171138, 400)
DNA_DB = (287612, 200)

# (Scoring arguments, database, [(score, query_len, subject_len, evalue, bit_score,
#  hsp_len, eff_space), ...]) from the BLAST runs above.
BLAST_HSPS = [
    (dict(), PROTEIN_DB, [
        (756, 144, 144, 6.11314e-107, 295.819, 63, 11820978),
        (187, 302, 122, 2.74641e-19, 76.6406, 70, 33208016),
        (72, 249, 1128, 0.00399763, 32.3426, 68, 26052778),
        (57, 605, 1265, 0.846158, 26.5646, 76, 74450402),
        (39, 302, 655, 50.0019, 19.631, 70, 33208016),
        (36, 50, 644, 6.72559, 18.4754, 24, 4199988),
    ]),
    (dict(matrix="BLOSUM45", gap_open=14, gap_extend=2), PROTEIN_DB, [
        (897, 144, 144, 4.81748e-92, 257.315, 85, 8091142),
        (92, 605, 1265, 0.0365512, 30.8477, 105, 64569000),
        (57, 751, 731, 49.4173, 21.0013, 108, 82264134),
    ]),
    (dict(matrix="PAM30", gap_open=9, gap_extend=1), PROTEIN_DB, [
        (1101, 144, 144, 1.49291e-161, 470.176, 17, 20870926),
        (61, 204, 365, 0.05181, 29.0577, 18, 30492468),
        (38, 204, 657, 49.7501, 19.3022, 18, 30492468),
    ]),
    (dict(alphabet="dna"), DNA_DB, [  # 2/-3, 5/2: E-values of odd scores use score - 1
        (405, 1473, 649, 3.69153e-102, 366.468, 22, 410940612),
        (49, 1450, 1480, 1.55163e-05, 45.4688, 22, 404426736),
        (30, 1363, 1468, 1.12022, 28.3368, 22, 379787292),
        (25, 1450, 1542, 50.7232, 23.8284, 22, 404426736),
    ]),
    (dict(match=4, mismatch=-6, gap_open=10, gap_extend=4), DNA_DB, [  # the 2/-3 row, doubled
        (206, 1519, 1651, 1.91606e-20, 94.1598, 22, 423968364),
        (48, 1450, 1368, 50.7232, 22.9267, 22, 404426736),
    ]),
    (dict(match=1, mismatch=-2, gap_open=2, gap_extend=1), DNA_DB, [
        (51, 1519, 1467, 5.58578e-21, 95.9441, 19, 425718000),
        (12, 1519, 1485, 39.4857, 23.3621, 19, 425718000),
    ]),
    # blastn -reward 5 -penalty -4: NUC.4.4 scores ACGT the same way (it differs on N only,
    # which the statistics of random ACGT sequences do not see).
    (dict(matrix="NUC.4.4", gap_open=10, gap_extend=6), DNA_DB, [
        (268, 1519, 1651, 2.81634e-12, 66.901, 85, 388057608),
        (105, 1473, 1531, 0.94253, 28.57, 85, 375609456),
    ]),
]
CASES = [(kwargs, db, hsp) for kwargs, db, hsps in BLAST_HSPS for hsp in hsps]


@pytest.mark.parametrize("kwargs,expected", [
    # lambda, K, H, alpha, beta, round_down: rows of blast_stat.c
    (dict(), (0.267, 0.041, 0.14, 1.9, -30, False)),
    (dict(matrix="BLOSUM80", gap_open=25, gap_extend=2), (0.342, 0.17, 0.66, 0.52, -1.6, False)),
    (dict(matrix="PAM250", gap_open=15, gap_extend=3), (0.205, 0.049, 0.13, 1.6, -23, False)),
    (dict(alphabet="dna"), (0.625, 0.41, 0.78, 0.8, -2, True)),
    (dict(match=1, mismatch=-1, gap_open=0, gap_extend=2), (0.80, 0.064, 0.17, 4.8, -16, False)),
    (dict(match=4, mismatch=-6, gap_open=10, gap_extend=4), (0.3125, 0.41, 0.78, 0.4, -2, True)),
    (dict(matrix="NUC.4.4", gap_open=10, gap_extend=6), (0.163, 0.068, 0.16, 1.0, -19, False)),
])
def test_published_parameters(kwargs, expected):
    params = karlin_altschul(Scoring(**kwargs))
    got = (params.lambda_, params.k, params.h, params.alpha, params.beta, params.round_down)
    assert got == pytest.approx(expected, rel=1e-12), kwargs


def test_blosum62_11_1_source_and_spouge_terms():
    params = karlin_altschul(Scoring())
    assert params.source == "blast_stat.c blosum62_values, gaps 11/1"
    # Blast_GumbelBlkLoadFromTables: G = 11 + 1; b = 2G(a_un - a), beta = 2G(Alpha_un - Alpha),
    # tau = 2G(Alpha_un - Sigma) with the ungapped row's a_un = 0.7916, Alpha_un = 4.96466.
    s = params.spouge
    assert (s.a, s.alpha_v, s.sigma) == (1.9, 42.6028, 43.6362)
    assert (s.b, s.beta_v, s.tau) == pytest.approx((-26.6016, -903.31536, -928.11696))


def test_every_blast_combination_is_found():
    found = 0
    for name, rows in _PROTEIN.items():
        for row in rows[1:]:
            params = karlin_altschul(Scoring(name, gap_open=row[0], gap_extend=row[1]))
            assert params.lambda_ == row[2] and params.source.endswith(f"{row[0]}/{row[1]}")
            found += 1
    for (match, mismatch), rows in _BLASTN.items():
        for row in rows:
            scoring = Scoring(match=match, mismatch=mismatch, gap_open=row[0], gap_extend=row[1])
            assert karlin_altschul(scoring).k == row[3]
            found += 1
    assert found == 82 + 52  # every gapped row of the NCBI tables, megablast's (0, 0) aside
    assert set(_PROTEIN) == {name for name, abc in MATRICES.items() if abc.name == "protein"}


def test_tables_are_read_from_the_packaged_data_file():
    """BLAST's tables come from swdask/data/blast_gapped_params.tsv (shipped in the wheel as
    package data): every row, and a few of them as blast_stat.c prints them."""
    path = files("swdask") / "data" / "blast_gapped_params.tsv"
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    assert lines[0].split("\t") == ["table", "gap_open", "gap_extend", "lambda", "K", "H",
                                     "alpha", "beta", "alpha_v", "sigma"]
    assert len(lines) - 1 == 8 + 82 + 52  # 8 ungapped protein rows, 82 gapped, 52 blastn
    assert sum(map(len, _PROTEIN.values())) == 8 + 82
    assert sum(map(len, _BLASTN.values())) == 52
    assert list(_PROTEIN) == ["BLOSUM45", "BLOSUM50", "BLOSUM62", "BLOSUM80", "BLOSUM90",
                              "PAM250", "PAM30", "PAM70"]
    assert _PROTEIN["BLOSUM62"][0] == (None, None, 0.3176, 0.134, 0.4012, 0.7916, -3.2,
                                       4.964660, 4.964660)
    assert _PROTEIN["BLOSUM62"][9] == (11, 1, 0.267, 0.041, 0.14, 1.9, -30, 42.602800, 43.636200)
    assert _PROTEIN["PAM30"][-1] == (8, 1, 0.270, 0.072, 0.40, 0.68, -10, 5.368130, 6.763480)
    assert _BLASTN[(2, -3)][5] == (5, 2, 0.625, 0.41, 0.78, 0.8, -2)
    assert _BLASTN[(5, -4)] == [(10, 6, 0.163, 0.068, 0.16, 1.0, -19),
                                (8, 6, 0.146, 0.039, 0.11, 1.3, -29)]
    assert all(type(row[0]) is int for rows in _BLASTN.values() for row in rows)


@pytest.mark.parametrize("kwargs,db,hsp", CASES)
def test_matches_blast(kwargs, db, hsp):
    score, m, s, blast_e, blast_bits, blast_ell, blast_space = hsp
    params = karlin_altschul(Scoring(**kwargs))
    ell = length_adjustment(params, m, *db)
    assert (ell, (db[0] - db[1] * ell) * (m - ell)) == (blast_ell, blast_space)
    assert bitscore(score, params) == pytest.approx(blast_bits, rel=1e-5)
    assert evalue(score, params, m, *db, subject_length=s) == pytest.approx(blast_e, rel=1e-5)


def test_protein_evalues_need_the_subject_length_for_blasts_numbers():
    """Without it, the Karlin-Altschul formula: a different number, by hand here."""
    params = karlin_altschul(Scoring())
    classic = evalue(36, params, 50, *PROTEIN_DB)
    assert classic == pytest.approx(4199988 * 0.041 * math.exp(-0.267 * 36), rel=1e-12)
    assert classic == pytest.approx(11.5237, rel=1e-5)
    blastp = evalue(36, params, 50, *PROTEIN_DB, subject_length=644)
    assert blastp == pytest.approx(6.72559, rel=1e-5)
    # blastn ignores subject lengths
    dna = karlin_altschul(Scoring(alphabet="dna"))
    assert evalue(30, dna, 1363, *DNA_DB, subject_length=1) == evalue(30, dna, 1363, *DNA_DB)


def test_round_down_pairs_score_odd_scores_as_the_even_score_below():
    params = karlin_altschul(Scoring(alphabet="dna"))
    assert evalue(49, params, 1450, *DNA_DB) == evalue(48, params, 1450, *DNA_DB)
    assert evalue(50, params, 1450, *DNA_DB) < evalue(49, params, 1450, *DNA_DB)
    assert bitscore(49, params) > bitscore(48, params)  # bit scores keep the raw score


UNSUPPORTED = [
    (dict(gap_open=3, gap_extend=3), "BLOSUM62 with gap costs 3/3"),
    (dict(matrix="PAM250", gap_open=11, gap_extend=1), "PAM250 with gap costs 11/1"),
    # BLAST would use ungapped values computed from the scores here; no table has them.
    (dict(alphabet="dna", gap_open=10, gap_extend=10), "match 2 mismatch -3 with gap costs 10/10"),
    (dict(match=3, mismatch=-5), "match 3 mismatch -5 with gap costs 5/2"),  # no 3/-5 table
    (dict(matrix=substitution_matrices.load("BLOSUM62")), "custom with gap costs 11/1"),
]


@pytest.mark.parametrize("kwargs,what", UNSUPPORTED)
def test_unsupported_scoring_warns_once_and_leaves_nulls(kwargs, what):
    scoring = Scoring(**kwargs)
    assert karlin_altschul(scoring) is None
    hits = pd.DataFrame({"score": [40, 30, 20], "query_length": 300, "subject_length": 400,
                         "evalue": np.full(3, np.nan)})
    message = f"no published Karlin-Altschul parameters for {what}; E-values left empty"
    with pytest.warns(UserWarning, match=re.escape(message)) as record:
        out = annotate(hits, scoring, db_residues=10**6, db_sequences=1000)
    assert len(record) == 1 and str(record[0].message) == message
    for column in ("evalue", "bitscore"):
        assert out[column].dtype == np.float64 and out[column].isna().all()
        arrow = pa.array(out[column], from_pandas=True)  # the HITS schema's nullable float64
        assert arrow.type == pa.float64() and arrow.null_count == 3
    pd.testing.assert_frame_equal(out[["score", "query_length"]], hits[["score", "query_length"]])


def test_annotate_fills_blasts_numbers_and_copies():
    for kwargs, db, hsps in BLAST_HSPS:
        rows = np.array(hsps)
        hits = pd.DataFrame({"query": "q", "score": pd.array(rows[:, 0].astype(int), dtype="Int32"),
                             "query_length": pd.array(rows[:, 1].astype(int), dtype="Int32"),
                             "subject_length": pd.array(rows[:, 2].astype(int), dtype="Int32"),
                             "evalue": np.full(len(rows), np.nan)},
                            index=range(10, 10 + len(rows)))
        before = hits.copy()
        out = annotate(hits, Scoring(**kwargs), db_residues=db[0], db_sequences=db[1])
        pd.testing.assert_frame_equal(hits, before)  # the input is left alone
        assert list(out.index) == list(hits.index)
        assert out["evalue"].dtype == np.float64 and out["bitscore"].dtype == np.float64
        np.testing.assert_allclose(out["evalue"].to_numpy(float), rows[:, 3], rtol=1e-5)
        np.testing.assert_allclose(out["bitscore"].to_numpy(float), rows[:, 4], rtol=1e-5)


def test_annotate_dna_needs_no_subject_length_and_takes_empty_tables():
    hits = pd.DataFrame({"score": [30], "query_length": [1363]})
    out = annotate(hits, Scoring(alphabet="dna"), db_residues=DNA_DB[0], db_sequences=DNA_DB[1])
    assert out["evalue"][0] == pytest.approx(1.12022, rel=1e-5)
    empty = annotate(pd.DataFrame({"score": [], "query_length": [], "subject_length": []}),
                     Scoring(), db_residues=100, db_sequences=1)
    assert len(empty) == 0 and empty["evalue"].dtype == np.float64


def test_vectorised_over_scores_and_lengths():
    params = karlin_altschul(Scoring())
    scores = np.array([[36, 57], [72, 187]])
    m = np.array([[50, 605], [249, 302]])
    s = np.array([[644, 1265], [1128, 122]])
    for subject in (None, s):
        got = evalue(scores, params, m, *PROTEIN_DB, subject_length=subject)
        assert got.shape == (2, 2)
        for i in range(2):
            for j in range(2):
                one = evalue(int(scores[i, j]), params, int(m[i, j]), *PROTEIN_DB,
                             subject_length=None if subject is None else int(s[i, j]))
                assert type(one) is float and got[i, j] == pytest.approx(one, rel=1e-14)
    broadcast = evalue(np.arange(30, 40), params, 300, *PROTEIN_DB, subject_length=400)
    assert broadcast.shape == (10,)
    bits = bitscore(scores, params)
    assert bits.shape == (2, 2) and bits[0, 0] == bitscore(36, params)


def test_evalue_falls_with_score_and_grows_with_the_database():
    protein, dna = karlin_altschul(Scoring()), karlin_altschul(Scoring(alphabet="dna"))
    scores = np.arange(10, 500)
    for subject in (None, 350):
        e = evalue(scores, protein, 300, *PROTEIN_DB, subject_length=subject)
        assert np.all(np.diff(e) < 0)
    e = evalue(scores, dna, 1400, *DNA_DB)
    assert np.all(np.diff(e) <= 0) and np.all(np.diff(e[::2]) < 0)  # steps of 2: round down
    sizes = [(10**4, 25), (10**5, 250), (10**6, 2500), (10**8, 250000)]
    for subject in (None, 350):
        grows = [evalue(60, protein, 300, n, big_n, subject_length=subject) for n, big_n in sizes]
        assert all(a < b for a, b in pairwise(grows)), grows
    grows = [evalue(40, dna, 1400, n, big_n) for n, big_n in sizes]
    assert all(a < b for a, b in pairwise(grows)), grows


def test_length_adjustment_of_a_tiny_database_is_zero():
    params = karlin_altschul(Scoring())
    assert length_adjustment(params, 10, 10, 1) == 0  # K * 10 * 10 < max(10, 10)
    assert evalue(20, params, 10, 10, 1) == pytest.approx(100 * 0.041 * math.exp(-0.267 * 20))


def test_bad_database_size_is_refused():
    with pytest.raises(ValueError) as info:
        evalue(40, karlin_altschul(Scoring()), 100, 0, 0)
    assert str(info.value) == ("need a database of at least one residue and one sequence, "
                               "got 0 residues in 0 sequences")


def test_parameters_are_small_immutable_and_picklable():
    params = karlin_altschul(Scoring())
    assert isinstance(params, KarlinAltschul)
    with pytest.raises(FrozenInstanceError):
        params.k = 1.0
    clone = pickle.loads(pickle.dumps(params))
    assert clone == params and repr(clone) == repr(params)
    assert karlin_altschul(Scoring(gap_open=10)) != params
