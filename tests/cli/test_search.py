"""``swdask search`` (swdask.cli.search), run in-process through ``main``: output formats
and their errors, options, the help's conventions, no cluster needed."""
from __future__ import annotations

import re
import sys

import pyarrow.parquet as pq
import pytest

import swdask
from swdask.cli import build_parser, main
from swdask.options import MAX_HITS
from swdask.output import blast_evalue
from swdask.parquet_schemas import HITS
from swdask.scoring import Scoring
from tests.helpers import N_QUERIES, QUERIES, RRNA, SPROT_DB, read_fasta, run_cli

#: Queries whose own record is in sprot_db.fasta.gz (tests/data/README.md), with lengths.
SELF_HITS = {"sp|Q197D0|030L_IIV3": 144, "sp|Q67475|055R_FRG3G": 379, "sp|Q6GZU9|027R_FRG3G": 970}
#: 16S records of plain ACGT (no IUPAC code, no N), by index in 16S_200.fna.gz.
DNA_QUERY_INDEX = (0, 64, 129)


def search_table(capsys, out, *argv):
    """Run ``swdask search ... -o OUT --quiet`` (Parquet) and return the table as a dict of lists."""
    status, _, err = run_cli(capsys, "search", *argv, "-o", out, "--quiet")
    assert status == 0, err
    assert err == ""
    return pq.read_table(out)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "sprot.store"
    assert main(["ingest", str(SPROT_DB), "-o", str(path), "--quiet"]) == 0
    return path


@pytest.fixture(scope="module")
def default_hits(store, tmp_path_factory):
    """The default search (BLOSUM62 11/1, local, 500 hits) of the queries against the store."""
    out = tmp_path_factory.mktemp("cli") / "hits.parquet"
    assert main(["search", str(QUERIES), str(store), "-o", str(out), "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def sequences():
    return {**read_fasta(SPROT_DB), **read_fasta(QUERIES)}


# -- search: output formats -------------------------------------------------------------


def test_search_parquet_schema_and_shape(default_hits):
    schema = pq.read_schema(default_hits)
    assert schema.equals(HITS, check_metadata=False)
    # The schema's name and version, and pandas' dtypes of swdask.tables (for_file).
    assert {k: v for k, v in schema.metadata.items() if k != b"pandas"} == HITS.metadata
    table = pq.read_table(default_hits).to_pydict()
    queries = list(dict.fromkeys(table["query"]))
    assert queries == list(read_fasta(QUERIES))  # every query, in input order
    for q in queries:
        ranks = [r for qq, r in zip(table["query"], table["rank"]) if qq == q]
        assert ranks == list(range(1, len(ranks) + 1))
        assert 1 <= len(ranks) <= MAX_HITS
    assert min(table["score"]) >= 1  # local default: min score 1
    # BLOSUM62 11/1 has published Karlin-Altschul parameters: every hit has both
    assert None not in table["evalue"] and None not in table["bitscore"]
    assert all(e >= 0 for e in table["evalue"]) and all(b > 0 for b in table["bitscore"])


@pytest.mark.parametrize("argv,message", [
    (["search", QUERIES, SPROT_DB, "-o", "-"], "-o -: Parquet does not go to the standard "
     "output; give --outfmt blast6 or sam, or a file name"),
    (["significance", QUERIES, SPROT_DB, "-o", "-"], "-o -: Parquet does not go to the "
     "standard output; give a file name"),
    (["demo", "-o", "-"], "-o -: Parquet does not go to the standard output; give a file name"),
    (["allpairs", SPROT_DB, "-o", "-"], "-o -: Parquet does not go to the standard output; "
     "give a folder name"),
    (["align-long", QUERIES, QUERIES, "-o", "-"], "-o -: Parquet does not go to the standard "
     "output; give a file name"),
])
def test_parquet_is_refused_on_the_standard_output(capsys, argv, message):
    status, out, err = run_cli(capsys, *argv)
    assert (status, out, err) == (2, "", f"swdask: error: {message}\n")


def test_queries_from_the_standard_input(store, tmp_path, capsys, monkeypatch):
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(QUERIES.read_bytes())))
    status, out, err = run_cli(capsys, "search", "-", store, "-o", "-", "--outfmt", "blast6",
                               "--max-hits", 2)
    assert status == 0, err
    assert err.splitlines()[0] == "wrote 24 hits to the standard output (blast6)"
    assert [line.split("\t")[0] for line in out.splitlines()] == [
        name for name in read_fasta(QUERIES) for _ in range(2)]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b">q1\nMKV1L\n")))
    status, _, err = run_cli(capsys, "search", "-", store, "-o", tmp_path / "x.tsv")
    assert status == 2 and err.startswith("swdask: error: <stdin>, record 1 'q1', position 4:")
    assert not (tmp_path / "x.tsv").exists()

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdin", Terminal())
    status, _, err = run_cli(capsys, "search", "-", store, "-o", tmp_path / "x.tsv")
    assert (status, err) == (2, "swdask: error: -: the standard input is a terminal; pipe "
                             "FASTA/FASTQ into it or give a file\n")


def test_max_hits_defaults_to_blasts_in_one_place():
    import inspect

    assert MAX_HITS == 500  # BLAST+'s -max_target_seqs
    assert build_parser().parse_args(["search", "q", "db", "-o", "x"]).max_hits == MAX_HITS
    for function in (swdask.search, swdask.search_in_process):
        assert inspect.signature(function).parameters["max_hits"].default == MAX_HITS


@pytest.mark.parametrize("max_hits,note", [
    (3, "; 3 queries reached --max-hits 3: raise it to see more"),
    (4, "; 1 query reached --max-hits 4: raise it to see more"),
    (MAX_HITS, ""),
])
def test_summary_says_how_many_queries_reached_max_hits(store, tmp_path, capsys, max_hits,
                                                        note):
    out = tmp_path / "hits.parquet"
    status, _, err = run_cli(capsys, "search", QUERIES, store, "-o", out, "--evalue", 1,
                             "--max-hits", max_hits)
    assert status == 0, err
    summary = err.splitlines()[-1]
    assert re.search(rf", \d+ threads?{re.escape(note)}$", summary), summary
    counts = pq.read_table(out).to_pandas().groupby("query_id").size()
    assert 0 < counts.max() <= max_hits
    assert (counts == max_hits).sum() == int(note.split()[1] if note else 0)


def test_search_evalue_keeps_a_prefix_of_each_query(store, default_hits, tmp_path, capsys):
    """--evalue drops the hits above the cut-off and re-ranks: what is left is, per query,
    the default search's hits with an E-value of at most 1e-3, in the same order."""
    out = tmp_path / "hits.parquet"
    status, _, err = run_cli(capsys, "search", QUERIES, store, "-o", out, "--evalue", "1e-3",
                             "--quiet")
    assert status == 0, err
    kept = pq.read_table(out).to_pandas()
    everything = pq.read_table(default_hits).to_pandas()
    expected = everything[everything["evalue"] <= 1e-3].copy()
    expected["rank"] = expected.groupby("query_id").cumcount() + 1
    assert 0 < len(kept) < len(everything)
    assert kept.drop(columns="rank").equals(expected.drop(columns="rank").reset_index(drop=True))
    assert kept["rank"].tolist() == expected["rank"].tolist()
    status, _, err = run_cli(capsys, "search", QUERIES, store, "-o", tmp_path / "x.parquet",
                         "--evalue", "0")
    assert status == 2 and "--evalue: must be a positive number, got '0'" in err


def test_search_reports_on_stderr(store, tmp_path, capsys):
    out = tmp_path / "hits.parquet"
    status, stdout, err = run_cli(capsys, "search", QUERIES, store, "-o", out, "--max-hits", 2)
    assert status == 0
    assert stdout == ""
    lines = err.splitlines()
    assert lines[0] == f"wrote {2 * N_QUERIES} hits to {out} (parquet)"
    assert re.match(r"12 queries x 400 subjects, [\d,]+ cells: score pass", lines[1])


def test_self_hits_rank_first(default_hits, sequences):
    table = pq.read_table(default_hits).to_pylist()
    blosum62 = Scoring()
    for name, length in SELF_HITS.items():
        first = next(row for row in table if row["query"] == name and row["rank"] == 1)
        assert first["subject"] == name
        assert first["identity"] == 1.0
        assert first["cigar"] == f"{length}="
        assert (first["query_start"], first["query_end"]) == (0, length)
        assert (first["subject_start"], first["subject_end"]) == (0, length)
        assert (first["query_length"], first["subject_length"]) == (length, length)
        assert (first["align_length"], first["mismatches"], first["gap_opens"]) == (length, 0, 0)
        assert first["score"] == blosum62.score(sequences[name], sequences[name])


def test_blast6_matches_parquet(store, default_hits, tmp_path, capsys):
    out = tmp_path / "hits.tsv"
    status, _, err = run_cli(capsys, "search", QUERIES, store, "-o", out, "--outfmt", "blast6",
                             "--quiet")
    assert status == 0, err
    rows = pq.read_table(default_hits).to_pylist()
    text = out.read_text()
    assert text.endswith("\n")
    lines = text.splitlines()
    assert len(lines) == len(rows)
    for line, row in zip(lines, rows):
        fields = line.split("\t")
        assert len(fields) == 12, line
        assert fields == [
            row["query"], row["subject"], f"{100 * row['identity']:.3f}",
            str(row["align_length"]), str(row["mismatches"]), str(row["gap_opens"]),
            str(row["query_start"] + 1), str(row["query_end"]),
            str(row["subject_start"] + 1), str(row["subject_end"]),
            blast_evalue(row["evalue"]),  # its digits: tests/test_output.py
            format(row["bitscore"], ".1f"),
        ]
    self_line = next(line for line in lines if line.startswith("sp|Q197D0|030L_IIV3\t"))
    assert self_line.split("\t")[1:10] == ["sp|Q197D0|030L_IIV3", "100.000", "144", "0", "0",
                                           "1", "144", "1", "144"]


def test_blast6_columns(store, default_hits, tmp_path, capsys):
    out = tmp_path / "hits.tsv"
    status, _, err = run_cli(capsys, "search", QUERIES, store, "-o", out, "--outfmt", "blast6",
                         "--columns", "std qlen slen cigar", "--quiet")
    assert status == 0, err
    rows = pq.read_table(default_hits).to_pylist()
    lines = out.read_text().splitlines()
    assert len(lines) == len(rows)
    for line, row in zip(lines, rows):
        fields = line.split("\t")
        assert len(fields) == 15, line
        assert fields[:2] == [row["query"], row["subject"]]
        assert fields[6:10] == [str(row["query_start"] + 1), str(row["query_end"]),
                                str(row["subject_start"] + 1), str(row["subject_end"])]
        assert fields[12:] == [str(row["query_length"]), str(row["subject_length"]), row["cigar"]]


def test_sam_output(store, default_hits, tmp_path, capsys):
    from swdask.output import write_hits

    out = tmp_path / "hits.sam"
    argv = ["search", str(QUERIES), str(store), "-o", str(out), "--outfmt", "sam", "--quiet"]
    status, _, err = run_cli(capsys, *argv)
    assert status == 0, err
    text = out.read_text()
    lines = text.splitlines()
    assert lines[0] == "@HD\tVN:1.6\tSO:unsorted"
    command = " ".join(["swdask", *argv])  # no argument here needs quoting
    assert f"@PG\tID:swdask\tPN:swdask\tVN:{swdask.__version__}\tCL:{command}" in lines
    # The same bytes as the Python writer on the Parquet result of the same search.
    again = write_hits(pq.read_table(default_hits), tmp_path / "again.sam", outfmt="sam",
                       command_line=command)
    assert again.read_text() == text
    records = [line.split("\t") for line in lines if not line.startswith("@")]
    rows = pq.read_table(default_hits).to_pylist()
    assert len(records) == len(rows)
    for fields, row in zip(records, rows):
        assert fields[:5] == [row["query"], "0" if row["rank"] == 1 else "256", row["subject"],
                              str(row["subject_start"] + 1), "255"]


def test_output_format_errors(store, tmp_path, capsys, monkeypatch):
    import sys

    def no_search(*args, **kwargs):  # errors must come before the work
        raise AssertionError("search ran")

    monkeypatch.setattr(sys.modules["swdask.jobs.search"], "search", no_search)
    out = tmp_path / "hits.tsv"
    status, stdout, err = run_cli(capsys, "search", QUERIES, store, "-o", out, "--outfmt", "blast6",
                              "--columns", "std staxids")
    assert (status, stdout) == (2, "")
    assert err == ("swdask: error: unknown BLAST column 'staxids'; choose from: std, qseqid, "
                   "sseqid, pident, length, mismatch, gapopen, qstart, qend, sstart, send, "
                   "evalue, bitscore, score, nident, gaps, qlen, slen, cigar, sstrand, qcovs, "
                   "qcovhsp, positive, ppos, qseq, sseq, btop\n")
    # (hits.tsv would be BLAST tabular, where --columns applies: the extension decides)
    status, stdout, err = run_cli(capsys, "search", QUERIES, store, "-o", tmp_path / "hits.pq",
                                  "--columns", "std")
    assert (status, stdout) == (2, "")
    assert err == ("swdask: error: columns apply to the blast6 output format only, not to "
                   "'parquet'\n")
    status, stdout, err = run_cli(capsys, "search", QUERIES, store, "-o", out, "--outfmt", "sam")
    assert (status, stdout) == (2, "")
    assert err == (f"swdask: error: {out}: the extension .tsv stands for blast6, but this output "
                   "is sam\n")
    status, _, err = run_cli(capsys, "search", QUERIES, store, "-o", out, "--outfmt", "xml")
    assert status == 2
    assert err.count("\n") == 1 and "invalid choice: 'xml'" in err and "'bam'" in err
    assert list(tmp_path.iterdir()) == []


def test_fasta_database_gives_the_store_result(default_hits, tmp_path, capsys, monkeypatch):
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    table = search_table(capsys, tmp_path / "fasta.parquet", QUERIES, SPROT_DB)
    assert table.equals(pq.read_table(default_hits))
    assert list(scratch.iterdir()) == []  # the temporary store is gone


# -- search: options --------------------------------------------------------------------


def test_max_hits(store, default_hits, tmp_path, capsys):
    table = search_table(capsys, tmp_path / "h.parquet", QUERIES, store, "--max-hits", 3)
    full = pq.read_table(default_hits).to_pylist()
    assert table.to_pylist() == [row for row in full if row["rank"] <= 3]


def test_min_score(store, default_hits, tmp_path, capsys):
    table = search_table(capsys, tmp_path / "h.parquet", QUERIES, store, "--min-score", 60)
    full = pq.read_table(default_hits).to_pylist()
    expected = [row for row in full if row["score"] >= 60]
    assert 0 < len(expected) < len(full)
    assert table.to_pylist() == expected


def test_global_mode(store, tmp_path, capsys, sequences):
    rows = search_table(capsys, tmp_path / "h.parquet", QUERIES, store, "--mode", "global",
                        "--max-hits", 4).to_pylist()
    assert len(rows) == 4 * N_QUERIES  # no score floor in global mode
    for row in rows:
        assert (row["query_start"], row["query_end"]) == (0, row["query_length"])
        assert (row["subject_start"], row["subject_end"]) == (0, row["subject_length"])
    for name, length in SELF_HITS.items():
        first = next(r for r in rows if r["query"] == name and r["rank"] == 1)
        assert (first["subject"], first["cigar"]) == (name, f"{length}=")
    sample = [r for r in rows if r["subject_length"] < 400 and r["query_length"] < 200][:3]
    assert sample
    for row in sample:
        aln = swdask.align(sequences[row["query"]], sequences[row["subject"]], mode="global")
        assert (aln.score, aln.cigar) == (row["score"], row["cigar"])
    assert any(r["score"] < 0 for r in rows)


def test_matrix_and_gaps(store, default_hits, tmp_path, capsys, sequences):
    rows = search_table(capsys, tmp_path / "h.parquet", QUERIES, store, "--matrix", "BLOSUM50",
                        "--gap-open", 13, "--gap-extend", 2, "--max-hits", 5).to_pylist()
    scoring = Scoring("BLOSUM50", gap_open=13, gap_extend=2)
    for name in SELF_HITS:
        first = next(r for r in rows if r["query"] == name and r["rank"] == 1)
        assert first["score"] == scoring.score(sequences[name], sequences[name])
    for row in [r for r in rows if r["rank"] == 2][:4]:
        aln = swdask.align(sequences[row["query"]], sequences[row["subject"]], scoring=scoring)
        assert (aln.score, aln.cigar, aln.query_start, aln.subject_start) == (
            row["score"], row["cigar"], row["query_start"], row["subject_start"])
    default = [(r["query"], r["subject"], r["score"]) for r in pq.read_table(default_hits).to_pylist()
               if r["rank"] <= 5]
    assert [(r["query"], r["subject"], r["score"]) for r in rows] != default


def test_dna_search(tmp_path, capsys):
    records = list(read_fasta(RRNA).items())
    picked = [records[k] for k in DNA_QUERY_INDEX]
    queries = tmp_path / "q.fna"
    queries.write_text("".join(f">{name}\n{seq}\n" for name, seq in picked))
    rows = search_table(capsys, tmp_path / "h.parquet", queries, RRNA, "--match", 2,
                        "--mismatch", -3, "--max-hits", 5).to_pylist()
    assert len(rows) == 15
    for name, seq in picked:
        mine = [r for r in rows if r["query"] == name]
        assert [r["rank"] for r in mine] == [1, 2, 3, 4, 5]
        first = mine[0]
        assert (first["subject"], first["score"], first["identity"], first["cigar"]) == (
            name, 2 * len(seq), 1.0, f"{len(seq)}=")
        assert all(a["score"] >= b["score"] for a, b in zip(mine, mine[1:]))
    # Match/mismatch 2/-3 with default gaps 5/2 is NCBI's blastn default: same as no options.
    same = search_table(capsys, tmp_path / "h2.parquet", queries, RRNA, "--max-hits", 5)
    assert same.to_pylist() == rows


def test_dna_search_covers_both_strands(tmp_path, capsys):
    """A read reverse-complemented finds its gene on the minus strand, with the forward
    read's score; blast6 as blastn (sstart > send), SAM with FLAG 16 and the read's
    reverse complement; ``--strand plus`` finds it no more."""
    genes = list(read_fasta(RRNA).items())
    name, gene = genes[DNA_QUERY_INDEX[1]]
    read = gene[100:400]
    rc = read[::-1].translate(str.maketrans("ACGT", "TGCA"))
    queries = tmp_path / "reads.fna"
    queries.write_text(f">fwd\n{read}\n>rev\n{rc}\n")
    out = tmp_path / "hits.tsv"
    status, _, err = run_cli(capsys, "search", queries, RRNA, "-o", out, "--outfmt", "blast6",
                             "--columns", "qseqid sseqid score qstart qend sstart send sstrand",
                             "--max-hits", 3)
    assert status == 0, err
    assert re.search(r"^2 queries \(both strands\) x 200 subjects, ", err, re.M)
    top = {f[0]: f[1:] for f in (line.split("\t") for line in out.read_text().splitlines())
           if f[1] == name}
    assert top == {"fwd": [name, "600", "1", "300", "101", "400", "plus"],
                   "rev": [name, "600", "1", "300", "400", "101", "minus"]}
    sam = tmp_path / "hits.sam"
    status, _, err = run_cli(capsys, "search", queries, RRNA, "-o", sam, "--outfmt", "sam",
                             "--max-hits", 1, "--quiet")
    assert status == 0, err
    records = [line.split("\t") for line in sam.read_text().splitlines() if line[0] != "@"]
    assert [r[:6] + r[9:10] for r in records] == [
        ["fwd", "0", name, "101", "255", "300=", read],
        ["rev", "16", name, "101", "255", "300=", read]]  # SEQ on the reference's strand
    plus = search_table(capsys, tmp_path / "plus.parquet", queries, RRNA, "--strand", "plus",
                        "--max-hits", 3).to_pylist()
    assert {r["strand"] for r in plus} == {"plus"}
    assert not [r for r in plus if r["query"] == "rev" and r["subject"] == name]


def test_strand_of_a_protein_search_is_refused(store, tmp_path, capsys):
    out = tmp_path / "hits.parquet"
    status, stdout, err = run_cli(capsys, "search", QUERIES, store, "-o", out, "--strand", "both")
    assert (status, stdout) == (2, "")
    assert err == ("swdask: error: strand 'both' applies to DNA; a protein search has one "
                   "strand (plus)\n")
    assert not out.exists()
    table = search_table(capsys, out, QUERIES, store, "--strand", "plus", "--max-hits", 1)
    assert table.column("strand").null_count == table.num_rows == N_QUERIES


def test_workers_do_not_change_the_result(store, tmp_path, capsys):
    one = search_table(capsys, tmp_path / "w1.parquet", QUERIES, store, "--workers", 1, "--max-hits", 10)
    status, _, err = run_cli(capsys, "search", QUERIES, store, "-o", tmp_path / "w2.parquet",
                             "--workers", 2, "--max-hits", 10)
    assert status == 0, err
    assert one.equals(pq.read_table(tmp_path / "w2.parquet"))
    # The cluster's size, and how many of its workers had score tasks (one partition here).
    assert err.splitlines()[-1].endswith(", 2 Dask workers (score tasks on 1); 12 queries "
                                         "reached --max-hits 10: raise it to see more")


def test_force_replaces_output(store, tmp_path, capsys):
    out = tmp_path / "h.parquet"
    out.write_bytes(b"old")
    table = search_table(capsys, out, QUERIES, store, "--max-hits", 1, "--force")
    assert table.num_rows == N_QUERIES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.parquet"]


# -- help ---------------------------------------------------------------------------------


def test_search_help_states_gap_convention(capsys):
    assert main(["search", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "a gap of k residues costs OPEN + k * EXTEND" in text
    assert "1-based inclusive" in text and "0-based half-open" in text


# -- without a cluster: the in-process engine ----------------------------------------------


def test_search_without_a_cluster_runs_in_process(store, tmp_path, capsys, monkeypatch):
    def no_dask_search(*args, **kwargs):
        raise AssertionError("the Dask search ran")

    monkeypatch.setattr(sys.modules["swdask.jobs.search"], "search", no_dask_search)
    table = search_table(capsys, tmp_path / "hits.parquet", QUERIES, store, "--max-hits", 2)
    assert table.num_rows == 2 * N_QUERIES
