"""``swdask align`` (swdask.cli.align): literal sequences and FASTA files, modes, widths."""
import re

import swdask
from tests.helpers import run_cli


def test_align_literal_sequences(capsys):
    status, out, err = run_cli(capsys, "align", "HEAGAWGHEE", "PAWHEAE", "--matrix", "BLOSUM50",
                           "--gap-open", 8, "--gap-extend", 2)
    assert status == 0, err
    assert out.splitlines() == [
        "local alignment of query (10) and subject (7)",
        "score 26, identity 4/5 (80.0%), mismatches 0, gap opens 1, cigar 2=1I2=",
        "",
        "query   5 AWGHE 9",
        "          || ||",
        "subject 2 AW-HE 5",
        "",
    ]


def test_align_fasta_files(tmp_path, capsys):
    a, b = tmp_path / "a.fa", tmp_path / "b.fa"
    a.write_text(">first some description\nMKVLAWQERTYIPAS\nDFGHKLCVNM\n>second\nMMMM\n")
    b.write_text(">other\nQERTYIPASDFGHK\n")
    status, out, err = run_cli(capsys, "align", a, b)
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == "local alignment of first (25) and other (14)"
    assert lines[1].startswith("score ") and "identity 14/14 (100.0%)" in lines[1]
    assert lines[1].endswith("cigar 14=")
    assert lines[3:6] == ["first  7 QERTYIPASDFGHK 20",  # 1-based inclusive positions
                          "         ||||||||||||||",
                          "other  1 QERTYIPASDFGHK 14"]


def test_align_global_mode(capsys):
    status, out, err = run_cli(capsys, "align", "HEAGAWGHEE", "PAWHEAE", "--mode", "global")
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == "global alignment of query (10) and subject (7)"
    query_row, subject_row = lines[3].split(), lines[5].split()
    assert query_row[0] == "query" and subject_row[0] == "subject"
    assert query_row[2].replace("-", "") == "HEAGAWGHEE"  # global: every residue of both
    assert subject_row[2].replace("-", "") == "PAWHEAE"
    assert len(query_row[2]) == len(subject_row[2])
    score = int(re.match(r"score (-?\d+),", lines[1]).group(1))
    assert score == swdask.align("HEAGAWGHEE", "PAWHEAE", mode="global").score


def test_align_dna_width(capsys):
    status, out, err = run_cli(capsys, "align", "ACGTACGTTT" * 3, "ACGTACGTTT" * 3, "--width", 10)
    assert status == 0, err
    blocks = [line for line in out.splitlines() if line.startswith("query ")]
    assert len(blocks) == 3  # 30 columns in blocks of 10
    assert "score 60," in out  # DNA default match 2
