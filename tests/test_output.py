"""Tests of swdask.output: BLAST tabular columns, SAM export, CIGAR conversion, errors and
atomic writes, on hit tables from real searches of the bundled Swiss-Prot data."""
from __future__ import annotations

import math
import re

import pyarrow.parquet as pq
import pytest

import swdask
from swdask.output import (
    BLAST6_COLUMNS,
    BLAST_KEYWORDS,
    OUTFMTS,
    blast_columns,
    blast_evalue,
    check_format,
    hits_table,
    sam_cigar,
    sam_lines,
    write_hits,
)
from tests.helpers import QUERIES, RRNA, SPROT_DB, read_fasta, revcomp, strand_reads

ALLOWED = ("std, qseqid, sseqid, pident, length, mismatch, gapopen, qstart, qend, sstart, "
           "send, evalue, bitscore, score, nident, gaps, qlen, slen, cigar, sstrand, qcovs, "
           "qcovhsp, positive, ppos, qseq, sseq, btop")


# -- a strict SAM reader, of our own (pysam's reads what htslib accepts) ----------------------
# Regular expressions of SAM v1.6 (https://samtools.github.io/hts-specs/SAMv1.pdf), 1.3-1.5.

_NAME = r"[0-9A-Za-z!#$%&+./:;?@^_|~-][0-9A-Za-z!#$%&*+./:;=?@^_|~-]*"
SAM_FIELDS = (  # name, regex, is integer, inclusive range
    ("QNAME", r"\*|[!-?A-~]{1,254}", False, None),
    ("FLAG", r"[0-9]+", True, (0, 2**16 - 1)),
    ("RNAME", rf"\*|{_NAME}", False, None),
    ("POS", r"[0-9]+", True, (0, 2**31 - 1)),
    ("MAPQ", r"[0-9]+", True, (0, 255)),
    ("CIGAR", r"\*|([0-9]+[MIDNSHPX=])+", False, None),
    ("RNEXT", rf"\*|=|{_NAME}", False, None),
    ("PNEXT", r"[0-9]+", True, (0, 2**31 - 1)),
    ("TLEN", r"[-+]?[0-9]+", True, (-2**31 + 1, 2**31 - 1)),
    ("SEQ", r"\*|[A-Za-z=.]+", False, None),
    ("QUAL", r"[!-~]+", False, None),
)
_FLOAT = r"[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?"
TAG_VALUES = {"A": r"[!-~]", "i": r"[-+]?[0-9]+", "f": _FLOAT, "Z": r"[ !-~]*",
              "H": r"([0-9A-F][0-9A-F])*", "B": rf"[cCsSiIf](,{_FLOAT})*"}
HEADER_LINE = re.compile(r"@[A-Z][A-Z](\t[A-Za-z][A-Za-z0-9]:[ -~]+)+")


def cigar_lengths(cigar):
    """``(query length, reference length)`` of a SAM CIGAR; soft clips only at the ends."""
    runs = [(int(n), op) for n, op in re.findall(r"(\d+)([MIDNSHPX=])", cigar)]
    ops = "".join(op for _, op in runs)
    assert re.fullmatch(r"H?S?[MIDNPX=]*S?H?", ops), f"clips inside the CIGAR {cigar}"
    query = sum(n for n, op in runs if op in "MIS=X")
    reference = sum(n for n, op in runs if op in "MDN=X")
    return query, reference


def read_sam(text):
    """``(header, records)`` of SAM text, every line checked against SAM v1.6.

    ``header`` maps a record type to a list of ``{tag: value}``; each record is a dict of
    the 11 mandatory fields (integers as int) plus ``tags`` ``{tag: (type, value)}``.
    """
    assert text.endswith("\n")
    lines = text.split("\n")[:-1]
    header, records = {}, []
    for k, line in enumerate(lines):
        if line.startswith("@"):
            assert not records, f"header line after the records: {line}"
            assert HEADER_LINE.fullmatch(line), line
            kind, *fields = line.split("\t")
            tags = dict(field.split(":", 1) for field in fields)
            assert len(tags) == len(fields), f"a tag twice: {line}"
            if kind == "@HD":
                assert k == 0, "@HD must be the first line"
                assert re.fullmatch(r"[0-9]+\.[0-9]+", tags["VN"])
            if kind == "@SQ":
                assert re.fullmatch(_NAME, tags["SN"]) and 1 <= int(tags["LN"]) < 2**31, line
            header.setdefault(kind, []).append(tags)
            continue
        fields = line.split("\t")
        assert len(fields) >= 11, line
        record = {}
        for (name, pattern, integer, bounds), value in zip(SAM_FIELDS, fields):
            assert re.fullmatch(pattern, value), f"{name} {value!r} in {line}"
            if integer:
                value = int(value)
                assert bounds[0] <= value <= bounds[1], f"{name} {value} out of range"
            record[name] = value
        record["tags"] = {}
        for field in fields[11:]:
            tag, kind, value = field.split(":", 2)
            assert re.fullmatch(r"[A-Za-z][A-Za-z0-9]", tag) and kind in TAG_VALUES, field
            assert re.fullmatch(TAG_VALUES[kind], value), field
            assert tag not in record["tags"], f"tag {tag} twice in {line}"
            record["tags"][tag] = (kind, value)
        records.append(record)

    references = {sq["SN"]: int(sq["LN"]) for sq in header.get("@SQ", [])}
    assert len(references) == len(header.get("@SQ", [])), "an @SQ name twice"
    assert len({pg["ID"] for pg in header.get("@PG", [])}) == len(header.get("@PG", []))
    primaries = {}
    for record in records:
        if record["FLAG"] & 0x4:
            continue
        assert record["RNAME"] in references, record
        query_length, reference_length = cigar_lengths(record["CIGAR"])
        if record["SEQ"] != "*":
            assert len(record["SEQ"]) == query_length
        assert 1 <= record["POS"] and record["POS"] + reference_length - 1 <= references[
            record["RNAME"]], record
        if record["FLAG"] & 0x900 == 0:
            primaries[record["QNAME"]] = primaries.get(record["QNAME"], 0) + 1
    assert all(n == 1 for n in primaries.values()), "a read with two primary lines"
    return header, records


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sequences():
    return {**read_fasta(SPROT_DB), **read_fasta(QUERIES)}


@pytest.fixture(scope="module")
def hits():
    """Local search (BLOSUM62 11/1) of the 12 queries against 400 Swiss-Prot records."""
    return swdask.search(QUERIES, SPROT_DB, max_hits=10).compute()


@pytest.fixture(scope="module")
def global_hits():
    """Global alignments: CIGARs that start or end with a gap."""
    return swdask.search(QUERIES, SPROT_DB, mode="global", max_hits=3).compute()


@pytest.fixture(scope="module")
def empty_hits(tmp_path_factory):
    """Hits with a minimum score of 0: some are alignments of no columns."""
    db = tmp_path_factory.mktemp("empty") / "db.fasta"
    db.write_text(">s1\nPPPPPPPP\n>s2\nMKVLAWQ\n")
    return swdask.search({"q": "WWWWCC", "r": "GGMKVLAWQGG", "p": "GGGG"}, db, min_score=0).compute()


@pytest.fixture(scope="module")
def dna_reads():
    return strand_reads()


@pytest.fixture(scope="module")
def dna_hits(dna_reads):
    """Both strands of the reads against the 16S genes."""
    hits = swdask.search_in_process(dna_reads, RRNA, max_hits=4)
    assert set(hits["strand"]) == {"plus", "minus"}
    return hits


def cigar_runs(cigar):
    return [(int(n), op) for n, op in re.findall(r"(\d+)([=XID])", cigar)]


# -- BLAST tabular ------------------------------------------------------------------------------


def test_blast6_default_is_the_12_standard_columns(hits, tmp_path):
    default = write_hits(hits, tmp_path / "default.tsv", outfmt="blast6").read_text()
    for columns in ("std", BLAST6_COLUMNS, ["std"], "", []):
        out = tmp_path / "again.tsv"
        write_hits(hits, out, outfmt="blast6", columns=columns)
        assert out.read_text() == default, columns
        out.unlink()
    lines = default.splitlines()
    assert len(lines) == len(hits) and all(len(line.split("\t")) == 12 for line in lines)


def _printed_to_its_last_digit(text: str, value: float) -> bool:
    """Whether ``text`` is ``value`` rounded to the digits it shows (BLAST's "0.0" stands
    for anything under 1e-180)."""
    if text == "0.0":
        return value < 1e-180
    mantissa, _, exponent = text.partition("e")
    unit = 10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2]))
    return abs(float(text) - value) <= unit / 2 * (1 + 1e-9)


@pytest.mark.parametrize("value,text", [
    (0.0, "0.0"), (9.9e-181, "0.0"), (1.07e-108, "1.07e-108"), (2.5e-150, "2.50e-150"),
    (8.94e-4, "8.94e-04"), (9e-4, "0.001"), (0.04567, "0.046"), (0.4567, "0.46"),
    (4.567, "4.6"), (45.67, "46"), (1234.5, "1234"),
])
def test_blast_tabular_evalues_as_blast_writes_them(value, text):
    """The C formats of BLAST+'s tabular writer (CBlastTabularInfo::SetScores):
    0.0 / %.2e / %.3f / %.2f / %.1f / %.0f at 1e-180, 0.0009, 0.1, 1 and 10."""
    assert blast_evalue(value) == text


def test_blast6_columns_round_trip(hits, sequences, tmp_path):
    """Every keyword, read back: 1-based inclusive coordinates select the aligned residues."""
    columns = ("std",) + BLAST_KEYWORDS[12:]
    out = write_hits(hits, tmp_path / "all.tsv", outfmt="blast6", columns=columns,
                     queries=QUERIES, subjects=SPROT_DB)
    names = BLAST6_COLUMNS + BLAST_KEYWORDS[12:]
    rows = hits_table(hits).to_pylist()
    lines = out.read_text().splitlines()
    assert len(lines) == len(rows)
    for line, row in zip(lines, rows):
        f = dict(zip(names, line.split("\t"), strict=True))
        qstart, qend, sstart, send = (int(f[k]) for k in ("qstart", "qend", "sstart", "send"))
        assert (qstart - 1, qend, sstart - 1, send) == (
            row["query_start"], row["query_end"], row["subject_start"], row["subject_end"])
        assert (f["qseqid"], f["sseqid"], f["cigar"]) == (row["query"], row["subject"], row["cigar"])
        assert (int(f["score"]), int(f["qlen"]), int(f["slen"])) == (
            row["score"], row["query_length"], row["subject_length"])
        assert _printed_to_its_last_digit(f["evalue"], row["evalue"]), (f["evalue"], row)
        assert float(f["bitscore"]) == pytest.approx(row["bitscore"], abs=0.051)
        runs = cigar_runs(f["cigar"])
        count = {op: sum(n for n, o in runs if o == op) for op in "=XID"}
        assert int(f["nident"]) == count["="] == round(row["identity"] * row["align_length"])
        assert int(f["gaps"]) == count["I"] + count["D"]
        assert int(f["mismatch"]) == count["X"]
        assert int(f["length"]) == sum(count.values())
        assert f["pident"] == f"{100 * (count['='] / int(f['length'])):.3f}"
        # Walk the CIGAR over the residues that the 1-based coordinates name.
        query = sequences[f["qseqid"]][qstart - 1:qend]
        subject = sequences[f["sseqid"]][sstart - 1:send]
        i = j = 0
        for n, op in runs:
            for _ in range(n):
                if op in "=X":
                    same = query[i] == subject[j] and query[i] != "X"
                    assert same == (op == "="), (row["query"], row["subject"], i, j)
                i += op in "=XI"
                j += op in "=XD"
        assert (i, j) == (len(query), len(subject))


@pytest.mark.parametrize("columns, expected", [
    (None, BLAST6_COLUMNS),
    ("std qlen slen", BLAST6_COLUMNS + ("qlen", "slen")),
    (["qlen", "std"], ("qlen",) + BLAST6_COLUMNS),
    ("  qseqid\tsseqid  score ", ("qseqid", "sseqid", "score")),
    (("cigar", "cigar"), ("cigar", "cigar")),
    ([], BLAST6_COLUMNS),
])
def test_blast_columns(columns, expected):
    assert blast_columns(columns) == expected


@pytest.mark.parametrize("columns, bad", [
    ("std staxids", "'staxids'"), (["qseqid", "Qlen"], "'Qlen'"), ("6 std", "'6'"),
    (["qcovus"], "'qcovus'"), ([7], "7"),
])
def test_unknown_blast_column(columns, bad):
    with pytest.raises(ValueError) as exc:
        blast_columns(columns)
    assert str(exc.value) == f"unknown BLAST column {bad}; choose from: {ALLOWED}"


def test_format_errors(hits, tmp_path):
    out = tmp_path / "hits.out"
    with pytest.raises(ValueError) as exc:
        write_hits(hits, out, outfmt="xml")
    assert str(exc.value) == ("unknown output format 'xml'; choose one of: parquet, blast6, sam, "
                              "bam")
    for outfmt in ("sam", "parquet", "bam"):
        with pytest.raises(ValueError) as exc:
            write_hits(hits, out, outfmt=outfmt, columns="std qlen")
        assert str(exc.value) == (f"columns apply to the blast6 output format only, not to "
                                  f"{outfmt!r}")
    with pytest.raises(ValueError, match="^columns ppos show residues: give the queries and"):
        write_hits(hits, out, outfmt="blast6", columns="std ppos")
    assert list(tmp_path.iterdir()) == []
    assert OUTFMTS == ("parquet", "blast6", "sam", "bam")
    assert check_format("parquet") is None and check_format("blast6") == BLAST6_COLUMNS


# -- CIGAR conversion -------------------------------------------------------------------------


@pytest.mark.parametrize("cigar, query_start, query_end, query_length, expected", [
    ("144=", 0, 144, 144, "144="),                     # whole query, no clip
    ("3=1X2=", 2, 8, 10, "2S3=1X2=2S"),                # both ends clipped
    ("3=", 2, 5, 5, "2S3="),                           # leading clip only
    ("3=", 0, 3, 5, "3=2S"),                           # trailing clip only
    ("2=1I2=", 4, 9, 10, "4S2=1I2=1S"),                # I consumes the query (5 = 2+1+2)
    ("2=2D2=", 1, 5, 6, "1S2=2D2=1S"),                 # D does not (4 = 2+2)
    ("2D6X", 0, 6, 6, "2D6X"),                         # global: leading D, no clip
    ("1X4D1=1X3I", 0, 6, 6, "1X4D1=1X3I"),             # global: trailing I
    ("2I3=", 1, 6, 7, "1S2I3=1S"),
])
def test_sam_cigar(cigar, query_start, query_end, query_length, expected):
    converted = sam_cigar(cigar, query_start, query_end, query_length)
    assert converted == expected
    reference = sum(n for n, op in cigar_runs(cigar) if op in "=XD")
    assert cigar_lengths(converted) == (query_length, reference)


@pytest.mark.parametrize("args, message", [
    (("5=", 0, 4, 10), "cigar '5=' covers 5 query residues, but query_end - query_start is 4"),
    (("2=1D2=", 0, 5, 10), ("cigar '2=1D2=' covers 4 query residues, but query_end - "
                            "query_start is 5")),
    (("5M", 0, 5, 5), "cigar '5M' is not a run of =/X/I/D operations"),
    (("5=", 3, 8, 6), "query region 3..8 is not inside a query of length 6"),
])
def test_sam_cigar_errors(args, message):
    with pytest.raises(ValueError) as exc:
        sam_cigar(*args)
    assert str(exc.value) == message


# -- SAM ----------------------------------------------------------------------------------------


def test_sam_of_a_real_search(hits, tmp_path):
    command = "swdask search q.fasta db.store -o hits.sam --outfmt sam"
    out = write_hits(hits, tmp_path / "hits.sam", outfmt="sam", command_line=command)
    header, records = read_sam(out.read_text())
    assert header["@HD"] == [{"VN": "1.6", "SO": "unsorted"}]
    assert header["@PG"] == [{"ID": "swdask", "PN": "swdask", "VN": swdask.__version__,
                              "CL": command}]
    rows = hits_table(hits).to_pylist()
    by_id = sorted({(r["subject_id"], r["subject"], r["subject_length"]) for r in rows})
    assert header["@SQ"] == [{"SN": name, "LN": str(length)} for _, name, length in by_id]
    assert len(records) == len(rows)
    for record, row in zip(records, rows):
        assert (record["QNAME"], record["RNAME"]) == (row["query"], row["subject"])
        assert record["FLAG"] == (0 if row["rank"] == 1 else 256)
        assert record["POS"] - 1 == row["subject_start"]
        assert (record["MAPQ"], record["RNEXT"], record["PNEXT"], record["TLEN"]) == (
            255, "*", 0, 0)
        assert (record["SEQ"], record["QUAL"]) == ("*", "*")
        assert cigar_lengths(record["CIGAR"]) == (
            row["query_length"], row["subject_end"] - row["subject_start"])
        head, tail = row["query_start"], row["query_length"] - row["query_end"]
        assert record["CIGAR"] == ((f"{head}S" if head else "") + row["cigar"]
                                   + (f"{tail}S" if tail else ""))
        gaps = sum(n for n, op in cigar_runs(row["cigar"]) if op in "ID")
        assert {k: record["tags"][k] for k in ("AS", "NM")} == {
            "AS": ("i", str(row["score"])), "NM": ("i", str(row["mismatches"] + gaps))}
        assert float(record["tags"]["ZE"][1]) == pytest.approx(row["evalue"], rel=6e-3, abs=1e-180)
        assert float(record["tags"]["ZB"][1]) == pytest.approx(row["bitscore"], abs=0.051)


def columns_of_coordinates(coordinates):
    """Alignment columns (``M``/``I``/``D``) of Biopython coordinates (target, query); the
    query's run down its reverse strand."""
    columns = []
    for (t0, q0), (t1, q1) in zip(coordinates.T, coordinates.T[1:]):
        step = abs(q1 - q0)
        if t1 > t0 and step:
            assert t1 - t0 == step
            columns.append("M" * (t1 - t0))
        else:
            columns.append("D" * (t1 - t0) + "I" * step)
    return "".join(columns)


@pytest.mark.parametrize("which", ["hits", "global_hits", "dna_hits"])
def test_sam_read_back_by_biopython(which, request, tmp_path):
    """Biopython's SAM parser (Bio.Align.sam) reads the same hits back, subject as target;
    a minus-strand hit's query interval comes back on the read as given, from its end."""
    from Bio import Align

    table = request.getfixturevalue(which)
    out = write_hits(table, tmp_path / "hits.sam", outfmt="sam")
    rows = hits_table(table).to_pylist()
    with open(out) as handle:  # a path would leave the file open (a ResourceWarning)
        alignments = list(Align.parse(handle, "sam"))
    assert len(alignments) == len(rows)
    for aln, row in zip(alignments, rows):
        assert (aln.target.id, aln.query.id) == (row["subject"], row["query"])
        assert (len(aln.target), len(aln.query)) == (row["subject_length"], row["query_length"])
        minus = row["strand"] == "minus"
        assert (aln.flag, aln.score) == ((0 if row["rank"] == 1 else 256) | (16 if minus else 0),
                                         row["score"])
        first, last = (row["query_end"], row["query_start"]) if minus else (
            row["query_start"], row["query_end"])
        assert aln.coordinates[:, 0].tolist() == [row["subject_start"], first]
        assert aln.coordinates[:, -1].tolist() == [row["subject_end"], last]
        expected = "".join(("M" if op in "=X" else op) * n for n, op in cigar_runs(row["cigar"]))
        assert columns_of_coordinates(aln.coordinates) == expected


@pytest.mark.parametrize("record, problem", [
    ("q\t0\ts1\t1\t255\t2=1S2=\t*\t0\t0\t*\t*", "clips inside"),
    ("q\t0\ts1\t5\t255\t4=\t*\t0\t0\t*\t*", "POS"),
    ("q\t0\ts2\t1\t255\t4=\t*\t0\t0\t*\t*", "RNAME"),
    ("q@\t0\ts1\t1\t255\t4=\t*\t0\t0\t*\t*", "QNAME"),
    ("q\t0\ts1\t1\t255\t4=\t*\t0\t0\t*\t*\tZE:f:1e", "ZE"),
    ("q\t0\ts1\t1\t255\t4=\t*\t0\t0\t*\t*\nq\t0\ts1\t1\t255\t4=\t*\t0\t0\t*\t*",
     "two primary"),
    ("q\t0\ts1\t1\t256\t4=\t*\t0\t0\t*\t*", "MAPQ"),
])
def test_the_sam_reader_is_strict(record, problem):
    header = "@HD\tVN:1.6\n@SQ\tSN:s1\tLN:7\n"
    read_sam(header + "q\t0\ts1\t4\t255\t1S4=\t*\t0\t0\t*\t*\tAS:i:8\n")  # valid
    with pytest.raises(AssertionError):
        read_sam(header + record + "\n")


def test_sam_global_alignments_with_end_gaps(global_hits, tmp_path):
    assert any(re.match(r"\d+[ID]", c) or re.search(r"[ID]$", c) for c in global_hits["cigar"])
    out = write_hits(global_hits, tmp_path / "global.sam", outfmt="sam")
    _, records = read_sam(out.read_text())
    for record, row in zip(records, hits_table(global_hits).to_pylist(), strict=True):
        assert record["CIGAR"] == row["cigar"]  # global: the whole query, no clip
        assert cigar_lengths(record["CIGAR"]) == (row["query_length"], row["subject_length"])


def test_sam_statistics_tags(hits, tmp_path):
    with_stats = hits.copy()
    with_stats["evalue"] = [1.234e-7 * r if r != 2 else None for r in with_stats["rank"]]
    with_stats["bitscore"] = [0.25 * s if r != 3 else float("nan")
                              for s, r in zip(with_stats["score"], with_stats["rank"])]
    out = write_hits(with_stats, tmp_path / "stats.sam", outfmt="sam")
    _, records = read_sam(out.read_text())
    for record, (_, row) in zip(records, with_stats.iterrows(), strict=True):
        tags = record["tags"]
        if row["rank"] == 2:
            assert "ZE" not in tags
        else:
            assert tags["ZE"][0] == "f"
            assert math.isclose(float(tags["ZE"][1]), row["evalue"], rel_tol=5e-3)
        if row["rank"] == 3:
            assert "ZB" not in tags
        else:
            assert tags["ZB"] == ("f", f"{row['bitscore']:.1f}")


def test_sam_primary_is_the_smallest_rank(hits, tmp_path):
    first = hits["query"].iloc[0]
    subset = hits[(hits["query"] != first) | (hits["rank"] > 1)].iloc[::-1]  # reversed rows
    out = write_hits(subset, tmp_path / "subset.sam", outfmt="sam")
    _, records = read_sam(out.read_text())
    for record, (_, row) in zip(records, subset.iterrows(), strict=True):
        primary = row["rank"] == (2 if row["query"] == first else 1)
        assert record["FLAG"] == (0 if primary else 256)


def test_sam_alignments_of_no_columns(empty_hits, tmp_path):
    rows = hits_table(empty_hits).to_pylist()
    assert sorted((r["query"], r["subject"], r["cigar"]) for r in rows) == [
        ("p", "s1", ""), ("p", "s2", ""), ("q", "s1", ""), ("q", "s2", "1="),
        ("r", "s1", ""), ("r", "s2", "7=")]
    out = write_hits(empty_hits, tmp_path / "empty.sam", outfmt="sam")
    header, records = read_sam(out.read_text())
    assert header["@SQ"] == [{"SN": "s2", "LN": "7"}]  # s1 has no alignment
    assert [(r["QNAME"], r["FLAG"], r["RNAME"], r["POS"], r["CIGAR"]) for r in records] == [
        ("q", 0, "s2", 6, "1=5S"), ("r", 0, "s2", 1, "2S7=2S"), ("p", 4, "*", 0, "*")]
    tsv = write_hits(empty_hits, tmp_path / "empty.tsv", outfmt="blast6", columns="qseqid cigar")
    assert tsv.read_text().split("\n")[:2] == ["q\t1=", "q\t*"]


QNAME_RULE = "is not a valid SAM QNAME (1 to 254 printable characters other than '@')"
RNAME_RULE = "is not a valid SAM reference name (SAM v1.6, section 1.2.1)"


@pytest.mark.parametrize("change, message", [
    ({"query": "q@1"}, f"query name 'q@1' {QNAME_RULE}"),
    ({"query": "x" * 255}, f"query name {'x' * 255!r} {QNAME_RULE}"),
    ({"subject": "*s"}, f"subject name '*s' {RNAME_RULE}"),
    ({"subject": "s,1"}, f"subject name 's,1' {RNAME_RULE}"),
])
def test_sam_names_it_cannot_hold(hits, tmp_path, change, message):
    bad = hits.copy()
    column, value = next(iter(change.items()))
    bad.loc[bad.index[-1], column] = value  # found once the temporary file is open
    out = tmp_path / "hits.sam"
    with pytest.raises(ValueError) as exc:
        write_hits(bad, out, outfmt="sam")
    assert str(exc.value) == message
    assert list(tmp_path.iterdir()) == []


def test_sam_one_name_two_records(hits, tmp_path):
    bad = hits.copy()
    other = bad[bad["subject"] != bad["subject"].iloc[0]].index[0]
    bad.loc[other, "subject"] = bad["subject"].iloc[0]
    ids = (int(bad["subject_id"].iloc[0]), int(bad.loc[other, "subject_id"]))
    with pytest.raises(ValueError) as exc:
        write_hits(bad, tmp_path / "hits.sam", outfmt="sam")
    assert str(exc.value) == (f"subject name {bad['subject'].iloc[0]!r} stands for two "
                              f"database records (subject_id {ids[0]} and {ids[1]}); SAM "
                              "needs one reference per name")


def test_failed_write_leaves_no_file_and_keeps_the_old_one(hits, tmp_path):
    """A CIGAR that disagrees with the coordinates in the last row fails after the header
    and all other records went to the temporary file: nothing of it remains."""
    bad = hits.copy()
    last = bad.index[-1]
    bad.loc[last, "subject_end"] += 1
    row = bad.loc[last]
    span = row["subject_end"] - row["subject_start"]
    out = tmp_path / "hits.sam"
    out.write_text("old\n")
    with pytest.raises(ValueError) as exc:
        write_hits(bad, out, outfmt="sam", force=True)
    assert str(exc.value) == (
        f"hit {row['query']!r} x {row['subject']!r} (rank {row['rank']}): cigar "
        f"{row['cigar']!r} covers {span - 1} subject residues, but subject_end - "
        f"subject_start is {span}")
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["hits.sam"]


def test_outputs_honour_the_umask(hits, tmp_path):
    """Files and stores get the permissions the user's umask gives a new file or folder
    (a temporary file from ``mkstemp`` would keep 0600 through its rename)."""
    import os
    import stat

    previous = os.umask(0o027)
    try:
        out = write_hits(hits, tmp_path / "hits.tsv", outfmt="blast6")
        store = swdask.ingest(QUERIES, tmp_path / "queries.store")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o750


def test_sam_lines_is_what_write_hits_writes(hits, tmp_path):
    out = write_hits(hits, tmp_path / "hits.sam", outfmt="sam", command_line="a\tb\nc")
    assert out.read_text() == "".join(sam_lines(hits_table(hits), command_line="a\tb\nc"))
    assert "\tCL:a b c\n" in out.read_text()


def test_parquet_unchanged(hits, tmp_path):
    out = write_hits(hits, tmp_path / "hits.parquet")
    assert pq.read_table(out).equals(hits_table(hits))


# -- DNA: both strands ----------------------------------------------------------------------


def test_blast6_minus_strand_as_blastn(dna_hits, dna_reads, tmp_path):
    """sstart > send on the minus strand, qstart < qend always; the 1-based coordinates
    select the aligned residues (the query's reverse complement on the minus strand)."""
    genes = read_fasta(RRNA)
    out = write_hits(dna_hits, tmp_path / "dna.tsv", outfmt="blast6", columns="std sstrand")
    rows = hits_table(dna_hits).to_pylist()
    lines = out.read_text().splitlines()
    assert len(lines) == len(rows)
    for line, row in zip(lines, rows):
        f = dict(zip(BLAST6_COLUMNS + ("sstrand",), line.split("\t"), strict=True))
        qstart, qend, sstart, send = (int(f[k]) for k in ("qstart", "qend", "sstart", "send"))
        assert f["sstrand"] == row["strand"]
        assert qstart < qend and (qstart - 1, qend) == (row["query_start"], row["query_end"])
        if row["strand"] == "minus":
            assert sstart > send and (send - 1, sstart) == (row["subject_start"],
                                                             row["subject_end"])
        else:
            assert sstart < send and (sstart - 1, send) == (row["subject_start"],
                                                             row["subject_end"])
        query = dna_reads[f["qseqid"]][qstart - 1:qend]
        if f["sstrand"] == "minus":
            query = revcomp(query)
        subject = genes[f["sseqid"]][min(sstart, send) - 1:max(sstart, send)]
        i = j = 0
        for n, op in cigar_runs(row["cigar"]):
            for _ in range(n):
                if op in "=X":
                    assert (query[i] == subject[j] != "N") == (op == "="), (row, i, j)
                i += op in "=XI"
                j += op in "=XD"
        assert (i, j) == (len(query), len(subject))


def test_blast6_sstrand_of_protein_is_na(hits, tmp_path):
    out = write_hits(hits, tmp_path / "p.tsv", outfmt="blast6", columns="qseqid sstrand")
    assert {line.split("\t")[1] for line in out.read_text().splitlines()} == {"N/A"}


def test_sam_minus_strand_flag_16_and_reverse_complemented_seq(dna_hits, dna_reads, tmp_path):
    out = write_hits(dna_hits, tmp_path / "dna.sam", outfmt="sam", queries=dna_reads)
    _, records = read_sam(out.read_text())
    rows = hits_table(dna_hits).to_pylist()
    assert len(records) == len(rows)
    flags = set()
    for record, row in zip(records, rows):
        minus = row["strand"] == "minus"
        flag = (0 if row["rank"] == 1 else 256) | (16 if minus else 0)
        flags.add(flag)
        assert record["FLAG"] == flag
        assert record["POS"] - 1 == row["subject_start"]  # leftmost on the reference
        read = dna_reads[row["query"]]
        if flag & 256:
            assert record["SEQ"] == "*"  # secondary lines, as SAM allows
        else:
            assert record["SEQ"] == (revcomp(read) if minus else read)
        assert record["QUAL"] == "*"
        # The CIGAR runs along the reference: on the minus strand over the reverse
        # complement, whose first residues are the read's last.
        head, tail = row["query_start"], row["query_length"] - row["query_end"]
        if minus:
            head, tail = tail, head
        assert record["CIGAR"] == ((f"{head}S" if head else "") + row["cigar"]
                                   + (f"{tail}S" if tail else ""))
    assert {0, 16, 256, 272} <= flags  # every combination is met
    without = write_hits(dna_hits, tmp_path / "noseq.sam", outfmt="sam")
    _, plain = read_sam(without.read_text())
    assert [r["FLAG"] for r in plain] == [r["FLAG"] for r in records]
    assert {r["SEQ"] for r in plain} == {"*"}


def test_sam_queries_must_be_those_searched(dna_hits, dna_reads, tmp_path):
    other = {**dna_reads, "rev": dna_reads["rev"][:-1]}
    with pytest.raises(ValueError) as exc:
        write_hits(dna_hits, tmp_path / "dna.sam", outfmt="sam", queries=other)
    assert str(exc.value) == ("queries: query 'rev' (query_id 1, 300 residues) of the hits is "
                              "not among them; give the queries that were searched")
    assert list(tmp_path.iterdir()) == []
