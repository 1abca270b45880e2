"""BLAST tabular columns people ask for (issue 19, item 12): qcovs/qcovhsp, positive/ppos,
qseq/sseq, btop and a header line; and BAM through pysam.  Each is checked against an
independent computation: coverage from the 1-based columns by BLAST+'s rounding, positives
from Biopython's matrices and the aligned letters, qseq/sseq against the CIGAR and the
sequences read by a plain FASTA reader, BTOP decoded by Biopython's BLAST tabular parser
and by a plain decoder, hand-checked examples, and BAM read back by pysam."""
from __future__ import annotations

import itertools
import os
import re
import stat
import sys

import numpy as np
import pyarrow as pa
import pysam
import pytest
from Bio.Align import substitution_matrices
from Bio.Align.tabular import AlignmentIterator

import swdask
from swdask.errors import MissingDependencyError
from swdask.output import blast6_lines, write_hits
from swdask.parquet_schemas import HITS
from swdask.scoring import Scoring
from tests.helpers import QUERIES, RRNA, SPROT_DB, read_fasta, revcomp, run_cli, strand_reads
from tests.test_output import read_sam

RESIDUE_COLUMNS = ("qseqid sseqid qstart qend sstart send sstrand length nident qcovs qcovhsp "
                   "positive ppos qseq sseq btop cigar")
def parse(text: str, columns: str = RESIDUE_COLUMNS) -> list[dict]:
    names = columns.split()
    return [dict(zip(names, line.split("\t"), strict=True)) for line in text.splitlines()]


def blast_rounding(covered: int, length: int) -> int:
    """BLAST+'s coverage (tabular.cpp): percent, +0.5 under 99, then truncated."""
    percent = 100.0 * covered / length
    return int(percent + 0.5) if percent < 99 else int(percent)


def decode_btop(btop: str, query: str, subject: str) -> tuple[str, str]:
    """The two aligned rows a BTOP string stands for, given the ungapped residues."""
    rows, i, j = ["", ""], 0, 0
    for token in re.findall(r"\d+|[A-Z*-]{2}", btop):
        if token.isdigit():
            n = int(token)
            rows[0] += query[i:i + n]
            rows[1] += subject[j:j + n]
            assert query[i:i + n] == subject[j:j + n], "a run of identities that differ"
            i, j = i + n, j + n
        else:
            rows[0] += token[0]
            rows[1] += token[1]
            i += token[0] != "-"
            j += token[1] != "-"
    assert (i, j) == (len(query), len(subject))
    return rows[0], rows[1]


def cigar_columns(cigar: str) -> str:
    return "".join(op * int(n) for n, op in re.findall(r"(\d+)([=XID])", cigar))


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def protein():
    """Local search, BLOSUM62 11/1, of 12 Swiss-Prot queries against 400 records."""
    return swdask.search_in_process(QUERIES, SPROT_DB, max_hits=6)


@pytest.fixture(scope="module")
def reads():
    """16S reads on both strands, and one of a forward and a reverse-complemented piece of
    the same gene (hits on both strands of one subject)."""
    gene = next(iter(read_fasta(RRNA).values()))
    return {**strand_reads(), "both": gene[100:260] + revcomp(gene[700:840])}


@pytest.fixture(scope="module")
def dna(reads):
    hits = swdask.search_in_process(reads, RRNA, max_hits=6)
    assert set(hits["strand"]) == {"plus", "minus"}
    return hits


# -- coverage -----------------------------------------------------------------------------------


def test_qcovhsp_and_qcovs_as_blast_computes_them(dna, reads, tmp_path):
    out = write_hits(dna, tmp_path / "cov.tsv", columns="qseqid sseqid qstart qend qlen qcovhsp "
                     "qcovs")
    rows = parse(out.read_text(), "qseqid sseqid qstart qend qlen qcovhsp qcovs")
    both_strands = 0
    for row in rows:
        start, end, length = int(row["qstart"]), int(row["qend"]), int(row["qlen"])
        assert int(row["qcovhsp"]) == blast_rounding(end - start + 1, length)
        covered = set()  # every query residue under any hit of this query and subject
        same = [r for r in rows if (r["qseqid"], r["sseqid"]) == (row["qseqid"], row["sseqid"])]
        for other in same:
            covered |= set(range(int(other["qstart"]), int(other["qend"]) + 1))
        assert int(row["qcovs"]) == blast_rounding(len(covered), length)
        both_strands += len(same) > 1
    # The read of both strands of one gene: two hits on that subject, each about half of
    # the read, together nearly all of it.
    halves = [r for r in rows if r["qseqid"] == "both" and int(r["qcovs"]) > 90]
    assert both_strands and len(halves) >= 2
    assert all(int(r["qcovhsp"]) < 60 for r in halves)


@pytest.mark.parametrize("covered, length, expected", [
    (1000, 1000, 100), (999, 1000, 99), (985, 1000, 99), (984, 1000, 98), (3, 1000, 0),
    (5, 1000, 1), (1, 3, 33), (2, 3, 67)])
def test_coverage_rounding(covered, length, expected):
    assert swdask.output.blast_coverage(covered, length) == expected == blast_rounding(
        covered, length)


# -- residues: qseq, sseq, positive, ppos, btop --------------------------------------------------


def check_residue_columns(row, query, subject, matrix, unknown):
    """One line of RESIDUE_COLUMNS against the sequences, its CIGAR and the matrix."""
    qstart, qend, sstart, send = (int(row[k]) for k in ("qstart", "qend", "sstart", "send"))
    qseq, sseq = row["qseq"], row["sseq"]
    assert len(qseq) == len(sseq) == int(row["length"])
    # Without gaps: the query as given, the subject (reverse complemented on minus).
    assert qseq.replace("-", "") == query[qstart - 1:qend]
    if row["sstrand"] == "minus":
        assert sstart > send and sseq.replace("-", "") == revcomp(subject[send - 1:sstart])
    else:
        assert sseq.replace("-", "") == subject[sstart - 1:send]
    # The gaps and identities where the CIGAR has them (along the subject: reversed on
    # the minus strand); = only for equal letters, never for the unknown one (X or N).
    columns = cigar_columns(row["cigar"])
    if row["sstrand"] == "minus":
        columns = columns[::-1]
    for op, a, b in zip(columns, qseq, sseq, strict=True):
        assert (op == "I") == (b == "-") and (op == "D") == (a == "-")
        if op in "=X":
            assert (op == "=") == (a == b != unknown)
    assert int(row["nident"]) == columns.count("=")
    # Positives: equal letters, or a matrix score above 0 (Biopython's matrix).
    positive = sum(a == b or (a != "-" and b != "-" and matrix[a][b] > 0)
                   for a, b in zip(qseq, sseq))
    assert int(row["positive"]) == positive
    assert row["ppos"] == f"{100 * positive / len(qseq):.2f}"
    # BTOP: decoded plainly, and by Biopython's BLAST tabular parser.
    assert decode_btop(row["btop"], qseq.replace("-", ""), sseq.replace("-", "")) == (qseq, sseq)
    coordinates = AlignmentIterator.parse_btop(None, row["btop"])  # rows: subject, query
    got = [("M" if t and q else "I" if q else "D", int(max(t, q)))
           for t, q in np.diff(coordinates, axis=1).T]
    runs = [(kind, len(list(run))) for kind, run in
            itertools.groupby("M" if op in "=X" else op for op in columns)]
    assert got == runs


def test_protein_residue_columns(protein, tmp_path):
    out = write_hits(protein, tmp_path / "p.tsv", columns=RESIDUE_COLUMNS, queries=QUERIES,
                     subjects=SPROT_DB, scoring=Scoring())
    rows = parse(out.read_text())
    assert len(rows) == len(protein)
    blosum62 = substitution_matrices.load("BLOSUM62")
    names = {**read_fasta(SPROT_DB), **read_fasta(QUERIES)}
    for row in rows:
        check_residue_columns(row, names[row["qseqid"]], names[row["sseqid"]], blosum62, "X")
    assert any(row["positive"] != row["nident"] for row in rows)  # substitutions count
    assert any("-" in row["btop"] for row in rows)  # gaps in BTOP


def test_dna_residue_columns_on_both_strands(dna, reads, tmp_path):
    genes = read_fasta(RRNA)
    store = swdask.ingest(RRNA, tmp_path / "genes.store")
    for subjects in (RRNA, store, str(store.path)):  # a FASTA file or a store
        out = write_hits(dna, tmp_path / "d.tsv", columns=RESIDUE_COLUMNS, queries=reads,
                         subjects=subjects, force=True)
        rows = parse(out.read_text())
        match = substitution_matrices.Array("ACGTN", dims=2)
        for a in "ACGT":
            match[a, a] = 2
        for row in rows:
            check_residue_columns(row, reads[row["qseqid"]], genes[row["sseqid"]], match, "N")
        assert {row["sstrand"] for row in rows} == {"plus", "minus"}


def test_hand_checked_examples():
    """Worked by hand from BLAST+'s rules (tabular.cpp): identities counted, any other
    column as query letter then subject letter; positives: equal letters or a positive
    matrix score.  HEAGAWGHEE x PAWHEAE (BLOSUM50 8/2, Durbin et al.): AWGHE / AW-HE."""
    row = {"query": "q", "subject": "s", "score": 0, "evalue": None, "bitscore": None,
           "identity": 0.8, "align_length": 5, "mismatches": 0, "gap_opens": 1,
           "query_start": 4, "query_end": 9, "subject_start": 1, "subject_end": 5,
           "cigar": "2=1I2=", "query_length": 10, "subject_length": 7, "query_id": 0,
           "subject_id": 0, "rank": 1, "strand": None}
    columns = "qseq sseq btop positive ppos qcovhsp qcovs"
    table = pa.Table.from_pylist([row], schema=HITS)
    blosum50 = Scoring("BLOSUM50", gap_open=8, gap_extend=2)
    line = next(blast6_lines(table, columns, queries={"q": "HEAGAWGHEE"},
                             subjects={"s": "PAWHEAE"}, scoring=blosum50))
    assert line == "AWGHE\tAW-HE\t2G-2\t4\t80.00\t50\t50\n"
    # A substitution (V/I scores +3: positive), an X against X (not an identity of the
    # CIGAR, but equal letters: BLAST's BTOP and positives count it) and a D/E (+2).
    row |= {"query_start": 0, "query_end": 8, "subject_start": 0, "subject_end": 8,
            "cigar": "2=1X1=1X1=1X1=", "query_length": 8, "subject_length": 8,
            "align_length": 8}
    table = pa.Table.from_pylist([row], schema=HITS)
    line = next(blast6_lines(table, columns, queries={"q": "MKVLXWDA"},
                             subjects={"s": "MKILXWEA"}, scoring=Scoring()))
    assert line == "MKVLXWDA\tMKILXWEA\t2VI3DE1\t8\t100.00\t100\t100\n"


def test_header_line(protein, tmp_path):
    out = write_hits(protein, tmp_path / "h.tsv", columns="std qcovs", header=True)
    lines = out.read_text().splitlines()
    assert lines[0] == "#" + "\t".join(
        "qseqid sseqid pident length mismatch gapopen qstart qend sstart send evalue bitscore "
        "qcovs".split())
    assert len(lines) == len(protein) + 1 and not any(x.startswith("#") for x in lines[1:])
    plain = write_hits(protein, tmp_path / "n.tsv", columns="std qcovs")
    assert plain.read_text().splitlines() == lines[1:]
    with pytest.raises(ValueError, match="^a header applies to the blast6 output format only, "
                       "not to 'sam'$"):
        write_hits(protein, tmp_path / "h.sam", header=True)


def test_residue_columns_need_the_sequences_searched(protein, tmp_path):
    lazy = swdask.search(QUERIES, SPROT_DB, max_hits=2)
    with pytest.raises(ValueError, match=r"^columns qseq btop show residues: give the queries "
                       r"and the database searched \(queries=, subjects=\)$"):
        write_hits(lazy, tmp_path / "x.tsv", columns="qseqid qseq btop qseq", queries=QUERIES)
    with pytest.raises(ValueError) as exc:
        write_hits(protein, tmp_path / "x.tsv", columns="sseq", queries=QUERIES,
                   subjects=QUERIES)
    assert re.fullmatch(r"subjects: subject '\S+' \(subject_id \d+, \d+ residues\) of the hits "
                        r"is not among them; give the database that was searched",
                        str(exc.value)), exc.value
    assert list(tmp_path.iterdir()) == []


def test_cli_columns_header_and_stdout(reads, tmp_path, capsys):
    fasta = tmp_path / "reads.fa"
    fasta.write_text("".join(f">{k}\n{v}\n" for k, v in reads.items()))
    columns = "qseqid sseqid sstrand qcovs qcovhsp positive ppos qseq sseq btop"
    out = tmp_path / "r.tsv"
    code, _, err = run_cli(capsys, "search", fasta, RRNA, "-o", out, "--columns", columns,
                           "--header", "--max-hits", "3", "--quiet")
    assert code == 0, err
    code, stdout, err = run_cli(capsys, "search", fasta, RRNA, "-o", "-", "--outfmt", "blast6",
                                "--columns", columns, "--header", "--max-hits", "3", "--quiet")
    assert code == 0, err
    assert stdout == out.read_text() and stdout.startswith("#qseqid\tsseqid\tsstrand\t")
    code, _, err = run_cli(capsys, "search", fasta, RRNA, "-o", tmp_path / "r.sam", "--header")
    assert code == 2 and err == ("swdask: error: a header applies to the blast6 output format "
                                 "only, not to 'sam'\n")


# -- BAM ----------------------------------------------------------------------------------------


def read_bam(path):
    """``(header text, records as SAM lines)`` of a BAM file, by pysam."""
    with pysam.AlignmentFile(str(path), "rb") as bam:
        return str(bam.header), [record for record in bam.fetch(until_eof=True)]


@pytest.mark.parametrize("which", ["protein", "dna"])
def test_bam_holds_the_sam_records_with_their_types(which, request, reads, tmp_path):
    hits = request.getfixturevalue(which)
    queries = reads if which == "dna" else QUERIES
    sam = write_hits(hits, tmp_path / "h.sam", queries=queries, command_line="swdask x")
    bam = write_hits(hits, tmp_path / "h.bam", queries=queries, command_line="swdask x")
    assert bam.read_bytes()[:4] == b"\x1f\x8b\x08\x04"  # BGZF
    header, records = read_sam(sam.read_text())
    bam_header, bam_records = read_bam(bam)
    assert bam_header.splitlines() == [line for line in sam.read_text().splitlines()
                                       if line.startswith("@")]
    assert len(bam_records) == len(records) == len(hits)
    for record, got in zip(records, bam_records):
        assert (got.query_name, got.flag, got.reference_name, got.reference_start + 1,
                got.mapping_quality, got.cigarstring) == (
            record["QNAME"], record["FLAG"], record["RNAME"], record["POS"], record["MAPQ"],
            record["CIGAR"])
        assert (got.query_sequence or "*") == record["SEQ"]
        tags = dict((name, (value, kind)) for name, value, kind in
                    got.get_tags(with_value_type=True))
        assert set(tags) == set(record["tags"])
        for name, (kind, text) in record["tags"].items():
            value, stored = tags[name]
            if kind == "i":  # BAM keeps an integer in the smallest integer type
                assert stored in "cCsSiI" and value == int(text)
            else:  # BAM's f is a 32-bit float: what the text becomes as one
                assert kind == stored == "f" and value == float(np.float32(float(text)))
        # And written out again as SAM text, the record is valid SAM that reads the same.
        _, (again,) = read_sam(bam_header + got.to_string() + "\n")
        assert {k: again[k] for k in again if k != "tags"} == {
            k: record[k] for k in record if k != "tags"}
    if which == "dna":
        assert any(r.flag & 16 for r in bam_records)


def test_bam_from_the_cli_by_extension_and_umask(tmp_path, capsys):
    previous = os.umask(0o027)
    try:
        code, _, err = run_cli(capsys, "search", QUERIES, SPROT_DB, "-o", tmp_path / "h.bam",
                               "--max-hits", "2")
    finally:
        os.umask(previous)
    assert code == 0, err
    assert "(bam)" in err
    assert stat.S_IMODE((tmp_path / "h.bam").stat().st_mode) == 0o640
    _, records = read_bam(tmp_path / "h.bam")
    assert len(records) == 24
    code, _, err = run_cli(capsys, "search", QUERIES, SPROT_DB, "-o", "-", "--outfmt", "bam")
    assert code == 2 and err == ("swdask: error: -o -: BAM does not go to the standard output; "
                                 "give --outfmt blast6 or sam, or a file name\n")


def test_bam_without_pysam_says_what_to_install(protein, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pysam", None)  # import pysam now raises ImportError
    with pytest.raises(MissingDependencyError) as exc:
        write_hits(protein, tmp_path / "h.bam")
    assert isinstance(exc.value, ImportError)
    message = ("BAM output needs pysam: pip install 'swdask[bam]' (or write SAM: --outfmt sam, "
               "-o hits.sam)")
    assert str(exc.value) == message
    for argv in (["search", QUERIES, SPROT_DB], ["demo"]):
        code, out, err = run_cli(capsys, *argv, "-o", tmp_path / "h.bam")
        assert code == 2 and err == f"swdask: error: {message}\n"
        assert "GCUPS" not in out  # refused before the search
    assert list(tmp_path.iterdir()) == []
