"""Valid edge cases of the inputs work (issue 19 item 2, issue 20 class 6): UniProt's U, O
and J letters without flags, and searches where nothing passes, in every output format and
engine; bad scores end in one line before any work."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import swdask
from swdask.cli import main
from swdask.parquet_schemas import HITS, SIGNIFICANCE
from swdask.scoring import Scoring
from tests.helpers import QUERIES, RRNA, SPROT_DB, read_fasta, run_cli

#: A query whose own record is in the test database (tests/data/README.md).
SELF = "sp|Q67475|055R_FRG3G"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("inputs") / "sprot.store"
    assert main(["ingest", str(SPROT_DB), "-o", str(path), "--quiet"]) == 0
    return path


def selenoprotein(sequence: str) -> str:
    """A real Swiss-Prot sequence with its cysteines read as selenocysteines, a K as
    pyrrolysine and an L as J: how UniProt writes such residues."""
    k, j = sequence.index("K"), sequence.index("L")
    letters = list(sequence.replace("C", "U"))
    letters[k], letters[j] = "O", "J"
    return "".join(letters)


@pytest.fixture(scope="module")
def uniprot_fasta(tmp_path_factory):
    """Queries with U, O and J in lower and upper case, and a database holding them."""
    folder = tmp_path_factory.mktemp("uoj")
    source = read_fasta(SPROT_DB)
    seleno = selenoprotein(source[SELF])
    assert {"U", "O", "J"} <= set(seleno)
    queries = folder / "q.fa"
    queries.write_text(f">seleno {SELF} with U/O/J\n{seleno}\n>lower\n{seleno[:60].lower()}\n")
    database = folder / "db.fa"
    database.write_text("".join(f">{name}\n{seq}\n" for name, seq in source.items())
                        + f">db_seleno\n{seleno}\n")
    return queries, database, seleno


def test_u_o_j_ingest_and_search_without_flags_and_print_as_themselves(
        uniprot_fasta, tmp_path, capsys):
    queries, database, seleno = uniprot_fasta
    store = tmp_path / "uoj.store"
    assert run_cli(capsys, "ingest", database, "-o", store, "--quiet")[0] == 0
    status, _, err = run_cli(capsys, "search", queries, store, "-o", tmp_path / "h.tsv",
                             "--outfmt", "blast6", "--quiet")
    assert status == 0, err
    assert "seleno\tdb_seleno\t100.000" in (tmp_path / "h.tsv").read_text()
    # Aligned letters print as they are: U, O, J, not C, X, L.
    status, out, err = run_cli(capsys, "align", "MKVLUUCOJAW", "MKVLCCCKLAW")
    assert status == 0, err
    assert "query    1 MKVLUUCOJAW 11" in out and "score 62," in out  # U-C scores as C-C, 9
    hits = swdask.search_in_process(queries, store).set_index(["query", "subject"])
    scoring = Scoring()
    assert hits.loc[("seleno", "db_seleno"), "score"] == scoring.score(seleno, seleno)
    # BLAST scores U as C: against the cysteine original the score falls only by O and J.
    original = read_fasta(SPROT_DB)[SELF]
    k, j = original.index("K"), original.index("L")
    expected = scoring.score(original, original) - sum(
        scoring.score(a, a) - scoring.score(a, b) for a, b in (("K", "O"), ("L", "J")))
    assert scoring.score(seleno, original) == expected
    assert hits.loc[("seleno", SELF), "score"] >= expected
    assert store.joinpath("swdask_store.json").read_text().count('"alphabet_letters"') == 1
    assert k >= 0 and j >= 0


def test_u_o_j_on_the_simulated_gpu_kernel_equal_the_cpu(uniprot_fasta):
    """Codes 24-26 in the query profile and the subjects: the CUDA kernel (simulator in CI,
    the card in the GPU lane) against the CPU kernel."""
    import numpy as np

    from swdask.kernels.cpu.score import score_all
    from swdask.kernels.cuda import launcher
    from swdask.sequences.alphabet import PROTEIN
    from tests.helpers import pack

    _, _, seleno = uniprot_fasta
    query = PROTEIN.encode(seleno[:21])
    subjects = [PROTEIN.encode(s) for s in (seleno[5:30], "UUOJJ", "CCKLL", seleno[::-1][:12])]
    s_res, s_off = pack(subjects)
    order = np.arange(len(subjects), dtype=np.int64)
    for scoring in (Scoring(), Scoring("PAM30")):
        got = launcher.score_query(query, s_res, s_off, order, scoring.matrix, scoring.gap_open,
                                   scoring.gap_extend, rows=4, group=4)
        want = score_all(query, np.array([0, len(query)]), s_res, s_off, scoring.matrix,
                         scoring.gap_open, scoring.gap_extend, subjects=order)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w[0])


@pytest.mark.gpu
def test_u_o_j_search_on_the_gpu_equals_the_cpu(uniprot_fasta, device, tmp_path):
    """The whole search on a card (16- and 32-bit kernels, GPU traceback) over a database
    holding U, O and J: the CPU's hits."""
    queries, database, _ = uniprot_fasta
    store = swdask.ingest(database, tmp_path / "uoj.store")
    cpu = swdask.search_in_process(queries, store, device="cpu")
    gpu = swdask.search_in_process(queries, store, device="gpu")
    assert len(cpu) and cpu.equals(gpu)


# -- nothing passes: an empty result of the right schema, exit 0 ----------------------------


@pytest.mark.parametrize("outfmt", ["parquet", "blast6", "sam"])
@pytest.mark.parametrize("engine", [[], ["--workers", "1"]], ids=["in-process", "dask"])
@pytest.mark.parametrize("cut", [["--min-score", "1000000"], ["--evalue", "1e-300"]],
                         ids=["min-score", "evalue"])
def test_search_with_no_hits_writes_an_empty_result(store, tmp_path, capsys, outfmt, engine, cut):
    out = tmp_path / f"hits.{outfmt}"
    query = tmp_path / "q.fa"
    query.write_text(">short\nMKV\n")  # no hit can reach either cut
    status, _, err = run_cli(capsys, "search", query, store, "-o", out, "--outfmt", outfmt,
                             *cut, *engine)
    assert status == 0, err
    assert f"wrote 0 hits to {out}" in err
    if outfmt == "parquet":
        table = pq.read_table(out)
        assert table.num_rows == 0 and table.schema.equals(HITS)
    elif outfmt == "blast6":
        assert out.read_text() == ""
    else:
        assert all(line.startswith("@") for line in out.read_text().splitlines())


def test_search_api_with_no_hits(store):
    hits = swdask.search(QUERIES, store, min_score=10**6).compute()
    assert len(hits) == 0 and list(hits.columns) == HITS.names
    assert len(swdask.search_in_process(QUERIES, store, min_score=10**6)) == 0


@pytest.mark.parametrize("engine", [[], ["--workers", "1"]], ids=["in-process", "dask"])
def test_allpairs_with_nothing_passing(tmp_path, capsys, engine):
    genes = tmp_path / "genes.fna"
    genes.write_text("".join(f">{n}\n{s}\n" for n, s in list(read_fasta(RRNA).items())[:8]))
    out = tmp_path / "pairs"
    status, _, err = run_cli(capsys, "allpairs", genes, "-o", out, "--min-score", "10000000",
                             *engine)
    assert status == 0, err
    assert len(swdask.read_all_pairs(out)) == 0


def test_significance_with_no_pairs(store, tmp_path, capsys):
    pairs = tmp_path / "none.tsv"
    pairs.write_text("")
    out = tmp_path / "sig.parquet"
    status, _, err = run_cli(capsys, "significance", QUERIES, store, "-o", out, "--pairs", pairs,
                             "--shuffles", "10")
    assert status == 0, err
    table = pq.read_table(out)
    assert table.num_rows == 0 and table.schema.equals(SIGNIFICANCE)


# -- scores out of range: one line, before any work ----------------------------------------


@pytest.mark.parametrize("flag,value,allowed", [
    ("--gap-open", "99999999999", "from 0 to 32767"), ("--gap-extend", "40000", "from 1 to 32767"),
    ("--match", "1000000", "from -32768 to 32767"), ("--mismatch", "-99999", "from -32768 to 32767")])
def test_out_of_range_scores_one_line(store, tmp_path, capsys, flag, value, allowed):
    database = store if flag.startswith("--gap") else RRNA
    status, _, err = run_cli(capsys, "search", QUERIES if database == store else RRNA, database,
                             "-o", tmp_path / "h.parquet", flag, value)
    assert status == 2
    assert err == f"swdask: error: {flag} must be a whole number {allowed}, got {value}\n"
    assert not (tmp_path / "h.parquet").exists()


def test_infinite_matrix_entry_one_line(store, tmp_path, capsys):
    letters = "ARNDCQEGHILKMFPSTWYV"
    matrix = tmp_path / "inf.mat"
    matrix.write_text("   " + "  ".join(letters) + "\n" + "".join(
        f"{a} " + " ".join("inf" if (a, b) == ("W", "W") else ("4" if a == b else "-1")
                           for b in letters) + "\n" for a in letters))
    status, _, err = run_cli(capsys, "search", QUERIES, store, "-o", tmp_path / "h.parquet",
                             "--matrix", matrix)
    assert status == 2
    assert err == (f"swdask: error: {matrix}: line 19: score of W/W must be a whole number, "
                   "got inf\n")


def test_scores_that_could_overflow_the_longest_pair_are_refused_before_any_work(
        store, tmp_path, capsys):
    """Allowed values, but a pair of the longest query and subject could leave the 32-bit
    kernels' exact range: one line at once (the traceback would refuse it after the pass)."""
    matrix = tmp_path / "huge.mat"
    letters = "ARNDCQEGHILKMFPSTWYV"
    matrix.write_text("   " + "  ".join(letters) + "\n" + "".join(
        f"{a} " + " ".join("32767" if a == b else "-32768" for b in letters) + "\n"
        for a in letters))
    long_query = tmp_path / "long.fa"
    long_query.write_text(">long\n" + ("".join(read_fasta(QUERIES).values()) * 2)[:8000] + "\n")
    status, _, err = run_cli(capsys, "search", long_query, store, "-o", tmp_path / "h.parquet",
                             "--matrix", matrix, "--gap-open", "32767", "--gap-extend", "32767")
    assert status == 2
    assert err.startswith("swdask: error: the longest query and subject of 8,000 x 3,797 "
                          "residues may reach scores of ")
    assert err.endswith("beyond the exact 32-bit range of the kernels (1,072,693,248); use "
                        "smaller scores or shorter sequences\n")


def test_pssm_scores_u_as_c_and_j_as_the_better_of_i_and_l_and_checks_its_range(tmp_path):
    import numpy as np

    from swdask.errors import ScoringError
    from swdask.jobs.significance import PSSM_LETTERS, read_pssm
    from tests.helpers import PSSM_FILE

    scoring = Scoring()
    letters = scoring.alphabet.letters
    pssm = read_pssm(PSSM_FILE)
    profile = pssm.profile(scoring)
    column = {c: pssm.scores[:, PSSM_LETTERS.index(c)] for c in "CIL"}
    assert np.array_equal(profile[letters.index("U")], column["C"])
    assert np.array_equal(profile[letters.index("J")], np.maximum(column["I"], column["L"]))
    query = scoring.alphabet.encode(pssm.sequence)
    assert np.array_equal(profile[letters.index("O")], scoring.matrix[query, letters.index("O")])
    lines = PSSM_FILE.read_text().splitlines()
    row = next(k for k, line in enumerate(lines) if line.split()[:1] == ["1"])
    fields = lines[row].split()
    fields[2] = "99999"
    lines[row] = " ".join(fields)
    bad = tmp_path / "bad.pssm"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(ScoringError) as info:
        read_pssm(bad)
    assert str(info.value) == (f"{bad}: line {row + 1}: score of A must be a whole number from "
                               "-32768 to 32767, got 99999")
