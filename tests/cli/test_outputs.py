"""The outputs' guarantees of every writing subcommand, run in-process through ``main``: an
output never replaces an input; ``--force`` replaces only an output of the same kind, and
only once the new one is complete; what cannot be written is found before any work; the
format follows the extension; outputs have the umask's permissions; names are escaped in
text outputs.  (Signals and concurrent processes: test_signals.py.)"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

import swdask
from swdask.cli import main
from swdask.errors import OutputError
from swdask.jobs.allpairs import output as ap_output
from swdask.jobs.allpairs import read_all_pairs, write_all_pairs
from swdask.scoring import Scoring
from tests.helpers import run_cli, write_fasta


def argv_of(inputs, out: Path) -> dict:
    """The command line of each writing subcommand, its outputs in the folder ``out``."""
    return {
        "search": ["search", inputs.queries, inputs.store, "-o", out / "hits.tsv",
                   "--max-hits", "2", "--device", "cpu", "--quiet"],
        "significance": ["significance", inputs.queries, inputs.queries, "-o",
                         out / "p.parquet", "--shuffles", "20", "--device", "cpu", "--quiet"],
        "align-long": ["align-long", inputs.a, inputs.b, "-o", out / "long.parquet",
                       "--traceback", "--sam", out / "long.sam", "--device", "cpu", "--quiet"],
        "allpairs": ["allpairs", inputs.genes_store, "-o", out / "pairs", "--min-identity", "0.8",
                     "--block-size", "6", "--device", "cpu", "--quiet"],
        "ingest": ["ingest", inputs.genes, "-o", out / "genes.store", "--quiet"],
    }


def with_output(argv: list, out) -> list:
    """``argv`` with ``out`` after its ``-o``."""
    where = argv.index("-o") + 1
    return argv[:where] + [out] + argv[where + 1:]


def cli(argv) -> int:
    """``swdask ARGV`` in this process; its exit status."""
    return main([str(a) for a in argv])


def digest(path: Path) -> str:
    """A hash of a file, or of a folder's files and their names."""
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if p.is_file():
            h.update(str(p.relative_to(path)).encode() if path.is_dir() else b"")
            h.update(p.read_bytes())
    return h.hexdigest()


def one_error(capsys, argv) -> str:
    status, stdout, err = run_cli(capsys, *argv)
    assert (status, stdout) == (2, ""), err
    assert err.count("\n") == 1 and err.startswith("swdask: error: "), err
    return err[len("swdask: error: "):-1]


# -- an output never replaces an input ----------------------------------------------------


def test_an_output_never_replaces_an_input(inputs, tmp_path, capsys):
    (tmp_path / "queries-link.fasta").symlink_to(inputs.queries)
    os.link(inputs.genes, tmp_path / "genes-hard.fasta")
    relative = Path(os.path.relpath(inputs.queries))
    q, db, store = inputs.queries, inputs.database, inputs.store
    search = ["search", q, store, "--device", "cpu", "--quiet", "--force", "-o"]
    cases = [
        (search + [q], f"{q}: is the input {q}"),
        (["search", q, db, "--device", "cpu", "--quiet", "--force", "-o", db],
         f"{db}: is the input {db}"),
        (search + [tmp_path / "queries-link.fasta"],
         f"{tmp_path / 'queries-link.fasta'}: is the input {q}"),
        (search + [relative], f"{relative}: is the input {q}"),
        (search + [store], f"{store}: is the input {store}"),
        (search + [store / "hits.parquet"], f"{store / 'hits.parquet'}: is inside the input {store}"),
        (["significance", q, q, "--pairs", inputs.pairs, "--force", "-o", inputs.pairs],
         f"{inputs.pairs}: is the input {inputs.pairs}"),
        (["align-long", inputs.a, inputs.b, "--force", "-o", inputs.b],
         f"{inputs.b}: is the input {inputs.b}"),
        (["align-long", inputs.a, inputs.b, "--traceback", "--force", "-o",
          tmp_path / "x.parquet", "--sam", inputs.a], f"{inputs.a}: is the input {inputs.a}"),
        (["allpairs", inputs.genes_store, "--force", "-o", inputs.genes_store],
         f"{inputs.genes_store}: is the input {inputs.genes_store}"),
        (["allpairs", inputs.genes, "--force", "-o", inputs.genes],
         f"{inputs.genes}: is the input {inputs.genes}"),
        (["ingest", inputs.genes, "--force", "-o", tmp_path / "genes-hard.fasta"],
         f"{tmp_path / 'genes-hard.fasta'}: is the input {inputs.genes}"),
    ]
    before = {p: digest(p) for p in (q, db, store, inputs.pairs, inputs.a, inputs.b,
                                      inputs.genes, inputs.genes_store)}
    for argv, message in cases:
        assert one_error(capsys, argv) == (f"{message}; an output never replaces an input, "
                                           "even with --force")
    assert {p: digest(p) for p in before} == before
    # Two outputs of one command on one file.
    same = tmp_path / "long.out"
    assert one_error(capsys, ["align-long", inputs.a, inputs.b, "--traceback", "-o", same,
                              "--sam", tmp_path / "." / "long.out"]) == \
        f"{same}: given for two outputs; give each its own name"
    assert sorted(os.listdir(tmp_path)) == ["genes-hard.fasta", "queries-link.fasta"]


# -- --force replaces only the same kind, once the new one is complete ----------------------


def test_force_replaces_only_an_output_of_the_same_kind(inputs, tmp_path, capsys):
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "keep.txt").write_text("precious")
    a_file = tmp_path / "a-file"
    a_file.write_text("precious")
    assert cli(argv_of(inputs, tmp_path)["allpairs"]) == 0
    pairs = tmp_path / "pairs"
    kinds = {"allpairs": ("an all-pairs output folder", inputs.store),
             "ingest": ("a sequence store", pairs)}
    for command, (kind, other_kind) in kinds.items():
        for target in (junk, a_file, other_kind):
            before = digest(target)
            argv = with_output(argv_of(inputs, tmp_path)[command], target)
            assert one_error(capsys, argv + ["--force"]) == (
                f"{target}: exists and is not {kind}; refusing to overwrite it even with --force")
            assert digest(target) == before
    assert (junk / "keep.txt").read_text() == "precious" and a_file.read_text() == "precious"
    for command in ("search", "significance"):
        argv = with_output(argv_of(inputs, tmp_path)[command], junk)
        assert one_error(capsys, argv + ["--force"]) == f"{junk}: is a directory; give a file name"
    # An empty folder may become the output.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli(with_output(argv_of(inputs, tmp_path)["allpairs"], empty) + ["--force"]) == 0
    assert len(read_all_pairs(empty)) == len(read_all_pairs(tmp_path / "pairs"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "empty", "junk", "pairs"]


@pytest.mark.parametrize("force", [True, False])
def test_allpairs_interrupted(inputs, tmp_path, capsys, monkeypatch, force):
    """Ctrl-C during a run: with --force the old result stays whole (the new run was going to
    a temporary folder); a new run keeps what it finished, for --resume."""
    argv = argv_of(inputs, tmp_path)["allpairs"]
    out = tmp_path / "pairs"
    if force:
        assert cli(argv[:argv.index("0.8")] + ["0.9"] + argv[argv.index("0.8") + 1:]) == 0
        old, old_digest = read_all_pairs(out), digest(out)
    capsys.readouterr()
    real, calls = ap_output.write_block_pair, []

    def interrupted_at_the_third(*args):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(args[1:3])
        return real(*args)

    monkeypatch.setattr(ap_output, "write_block_pair", interrupted_at_the_third)
    status, _, err = run_cli(capsys, *argv, *(["--force"] if force else []))
    assert status == 130
    if force:
        assert err == f"swdask: interrupted; {out} kept as it was\n"
        assert digest(out) == old_digest
        pd.testing.assert_frame_equal(read_all_pairs(out), old)
    else:
        assert err == (f"swdask: interrupted; {out} keeps the block pairs finished so far: "
                       "continue with --resume\n")
        assert len(list(out.glob("pairs-*.parquet"))) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
    monkeypatch.undo()
    assert cli(argv + (["--force"] if force else ["--resume"])) == 0
    assert read_all_pairs(out).equals(
        swdask.all_pairs(inputs.genes_store, min_identity=0.8, block_size=6, device="cpu",
                         scoring=Scoring(alphabet="dna")).compute().reset_index(drop=True))


def test_allpairs_one_writer_at_a_time(inputs, tmp_path):
    out = tmp_path / "pairs"
    options = dict(scoring=Scoring(alphabet="dna"), min_identity=0.8, block_size=6, device="cpu")
    write_all_pairs(inputs.genes_store, out, **options)
    handle = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running swdask holds it
        for how in ({"resume": True}, {"force": True}):
            with pytest.raises(OutputError) as exc:
                write_all_pairs(inputs.genes_store, out, **options, **how)
            assert str(exc.value) == f"{out}: another run is writing it; wait for it to end"
    finally:
        os.close(handle)
    assert json.loads((out / ap_output.MANIFEST).read_text())["finished"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs"]


# -- found before any work ----------------------------------------------------------------


def test_what_cannot_be_written_is_found_before_any_work(inputs, tmp_path, capsys,
                                                         unwritable_folder):
    """Inputs that fail when read (a bad letter in the last record): the error is the
    output's, so it came first."""
    bad = write_fasta(tmp_path / "bad.fasta", [("ok", "MKVLAT"), ("bad", "MKV1LAT")])
    bad_dna = write_fasta(tmp_path / "bad.fna", [("ok", "ACGTACGT"), ("bad", "ACG1T")])
    file = tmp_path / "a-file"
    file.write_text("")
    lines = [
        ["search", bad, bad, "-o", "{}/hits.tsv"],
        ["significance", bad, bad, "-o", "{}/p.parquet"],
        ["align-long", bad_dna, bad_dna, "-o", "{}/l.parquet"],
        ["allpairs", bad_dna, "-o", "{}/pairs"],
        ["ingest", bad, "-o", "{}/x.store"],
    ]
    for line in lines:
        name = line[line.index("-o") + 1]
        out = Path(name.format(unwritable_folder))
        message = one_error(capsys, with_output(line, out))
        assert message.startswith(f"{out}: cannot write in folder {unwritable_folder}: "), message
        out = Path(name.format(tmp_path / "missing"))
        assert one_error(capsys, with_output(line, out)) == \
            f"{out}: folder {tmp_path / 'missing'} does not exist"
        out = Path(name.format(file))
        assert one_error(capsys, with_output(line, out)) == f"{out}: {file} is not a folder"
    assert one_error(capsys, ["allpairs", bad_dna, "-o", file]) == \
        f"{file}: already exists (use --resume to continue it, or --force)"
    assert one_error(capsys, ["allpairs", bad_dna, "-o", file, "--resume"]) == \
        f"{file}: not an all-pairs output folder (_manifest.json missing or damaged)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "bad.fasta", "bad.fna",
                                                          "read-only"]


# -- the format from the extension ----------------------------------------------------------


def test_format_from_the_extension(inputs, tmp_path, capsys):
    search = ["search", inputs.queries, inputs.store, "--max-hits", "2", "--device", "cpu",
              "--quiet"]
    for name, outfmt in (("hits.tsv", "blast6"), ("hits.TAB", "blast6"), ("hits.m8", "blast6"),
                         ("hits.sam", "sam"), ("hits.pq", "parquet"), ("hits.out", "parquet"),
                         ("hits", "parquet")):
        status, _, err = run_cli(capsys, *search[:-1], "-o", tmp_path / name)
        assert status == 0, err
        assert err.splitlines()[0] == f"wrote 4 hits to {tmp_path / name} ({outfmt})"
        data = (tmp_path / name).read_bytes()
        if outfmt == "parquet":
            assert pq.read_table(tmp_path / name).num_rows == 4
        elif outfmt == "sam":
            assert data.startswith(b"@HD\tVN:1.6")
        else:
            assert [len(line.split(b"\t")) for line in data.splitlines()] == [12] * 4
    status, _, err = run_cli(capsys, *search, "-o", tmp_path / "other.out", "--outfmt", "blast6")
    assert status == 0 and (tmp_path / "other.out").read_bytes() == \
        (tmp_path / "hits.tsv").read_bytes()
    cases = [
        (search + ["-o", tmp_path / "x.tsv", "--outfmt", "parquet"], "x.tsv", ".tsv", "blast6",
         "parquet"),
        (search + ["-o", tmp_path / "x.sam", "--outfmt", "blast6"], "x.sam", ".sam", "sam",
         "blast6"),
        (search + ["-o", tmp_path / "x.parquet", "--outfmt", "sam"], "x.parquet", ".parquet",
         "parquet", "sam"),
        (["significance", inputs.queries, inputs.queries, "-o", tmp_path / "x.tsv"], "x.tsv",
         ".tsv", "blast6", "parquet"),
        (["align-long", inputs.a, inputs.b, "-o", tmp_path / "x.sam"], "x.sam", ".sam", "sam",
         "parquet"),
        (["align-long", inputs.a, inputs.b, "--traceback", "-o", tmp_path / "x.parquet",
          "--sam", tmp_path / "x.pq"], "x.pq", ".pq", "parquet", "sam"),
    ]
    for argv, name, suffix, meant, outfmt in cases:
        assert one_error(capsys, argv) == (f"{tmp_path / name}: the extension {suffix} stands "
                                           f"for {meant}, but this output is {outfmt}")
    assert not list(tmp_path.glob("x.*"))
    hits = pq.read_table(tmp_path / "hits.pq").to_pandas()
    assert swdask.write_hits(hits, tmp_path / "api.tsv").read_bytes() == \
        (tmp_path / "hits.tsv").read_bytes()


# -- permissions ----------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o027, 0o002])
def test_every_output_has_the_umask_permissions(inputs, tmp_path, capsys, umask):
    previous = os.umask(umask)
    try:
        for argv in argv_of(inputs, tmp_path).values():
            assert cli(argv) == 0, capsys.readouterr().err
        assert cli(argv_of(inputs, tmp_path)["allpairs"] + ["--force"]) == 0  # swapped in
        assert cli(argv_of(inputs, tmp_path)["ingest"] + ["--force"]) == 0
    finally:
        os.umask(previous)
    capsys.readouterr()
    paths = [p for p in tmp_path.rglob("*")]
    assert {p.name for p in tmp_path.iterdir()} == {"hits.tsv", "p.parquet", "long.parquet",
                                                     "long.sam", "pairs", "genes.store"}
    assert len(paths) > 10
    for path in paths:
        want = (0o777 if path.is_dir() else 0o666) & ~umask
        assert stat.S_IMODE(path.stat().st_mode) == want, (path, oct(want))


# -- names in text outputs ------------------------------------------------------------------


def test_unprintable_names_are_escaped_in_text_outputs(inputs, tmp_path, capsys):
    names = ["q\x01one\x1b[31mred", "back\\slash", "s\x7fdel"]
    sequence = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ"
    queries = write_fasta(tmp_path / "q.fasta", [(names[0], sequence), (names[1], sequence)])
    db = write_fasta(tmp_path / "db.fasta", [(names[2], sequence), ("plain", sequence[::-1])])
    shown = {names[0]: "q\\x01one\\x1b[31mred", names[1]: "back\\\\slash",
             names[2]: "s\\x7fdel"}
    base = ["search", queries, db, "--device", "cpu", "--quiet", "--max-hits", "1", "-o"]
    assert cli(base + [tmp_path / "hits.tsv"]) == 0
    rows = [line.split("\t")[:2] for line in (tmp_path / "hits.tsv").read_text().splitlines()]
    assert rows == [[shown[names[0]], shown[names[2]]], [shown[names[1]], shown[names[2]]]]
    assert cli(base + [tmp_path / "hits.parquet"]) == 0  # Parquet keeps them as they are
    table = pq.read_table(tmp_path / "hits.parquet")
    assert table.column("query").to_pylist() == names[:2]
    assert table.column("subject").to_pylist() == [names[2]] * 2
    # SAM: a query name escaped is a valid QNAME; a subject name escaped holds a backslash,
    # which no SAM reference name may: refused, in one line.
    message = one_error(capsys, base + [tmp_path / "hits.sam"])
    assert message == ("subject name 's\\\\x7fdel' is not a valid SAM reference name "
                       "(SAM v1.6, section 1.2.1)")
    status, stdout, _ = run_cli(capsys, "align", queries, db)
    assert status == 0 and "\x01" not in stdout and "\x7f" not in stdout
    assert stdout.splitlines()[0] == f"local alignment of {shown[names[0]]} (33) and " \
        f"{shown[names[2]]} (33)"
    a = write_fasta(tmp_path / "a.fna", [("a\x1bb", "ACGTACGTTTGACCA" * 4)])
    assert cli(["align-long", a, a, "-o", tmp_path / "l.parquet", "--traceback", "--sam",
                 tmp_path / "l.sam", "--device", "cpu", "--quiet"]) == 0
    sam = (tmp_path / "l.sam").read_text()
    assert "\x1b" not in sam and "SN:a\\x1bb" in sam and "\na\\x1bb\t0\ta\\x1bb\t" in sam
