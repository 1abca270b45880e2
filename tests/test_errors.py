"""Bad input: one line ``swdask: error: ...`` naming the file (record, position), exit 2,
and no output left behind; and the Python API's exception classes."""
from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import pytest

import swdask
from swdask.cli import main
from swdask.errors import (
    DeviceError,
    EmptyInputError,
    InputNotFoundError,
    InvalidSequenceError,
    OutputExistsError,
    ScoringError,
    SequenceFormatError,
    StoreError,
    SwdaskError,
)
from swdask.output import write_hits
from tests.helpers import QUERIES, RRNA, SPROT_DB

MATRIX_NAMES = "BLOSUM45, BLOSUM50, BLOSUM62, BLOSUM80, BLOSUM90, PAM30, PAM70, PAM250, NUC.4.4"


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A folder with the inputs (``in``), an empty output folder (``out``) and an empty
    private temporary folder (``tmp``, where a FASTA database is ingested)."""
    for name in ("in", "out", "tmp"):
        (tmp_path / name).mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path


def write(work, name, text):
    path = work / "in" / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def dna_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("errors") / "rrna.store"
    swdask.ingest(RRNA, path)
    return path


@pytest.fixture
def dna_queries(work):
    with gzip.open(RRNA, "rt") as handle:
        text = handle.read()
    first_two = ">" + ">".join(text.split(">")[1:3])
    return write(work, "q.fna", first_two)


def listing(folder):
    return sorted(p.relative_to(folder).as_posix() for p in Path(folder).rglob("*"))


def fails(work, capsys, *argv, before=None) -> str:
    """Run ``swdask ARGV``; check exit 2, one error line, nothing left; return the line."""
    before = listing(work / "out") if before is None else before
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert status == 2, (out, err)
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("swdask: error: ")
    assert listing(work / "out") == before  # no output, no temporary file
    assert listing(work / "tmp") == []  # no temporary store
    return lines[0]


def argparse_fails(work, capsys, *argv) -> str:
    """A usage error: exit 2 and one line, like every other error, naming the help."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert status == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("swdask: error: argument ") and "--help" in lines[0]
    assert listing(work / "out") == []
    return lines[0]


def search(work, queries, database, *options):
    return ("search", queries, database, "-o", work / "out" / "hits.parquet", "--quiet", *options)


# -- malformed input files ----------------------------------------------------------------


def test_fasta_without_header(work, capsys):
    bad = write(work, "nogt.fa", "MKVLAWQERT\nLMNP\n")
    line = fails(work, capsys, *search(work, bad, SPROT_DB))
    assert line.startswith(f"swdask: error: {bad}: not valid FASTA/FASTQ: ")
    assert "'>'" in line


def test_truncated_fastq(work, capsys, dna_queries):
    bad = write(work, "trunc.fq", "@r1\nACGT\n+\nIIII\n@r2\nACGTACGT\n")
    line = fails(work, capsys, *search(work, dna_queries, bad))
    assert line.startswith(f"swdask: error: {bad}: not valid FASTA/FASTQ: ")
    assert "'r2'" in line and "line" in line


def test_fastq_quality_length_mismatch(work, capsys, dna_store):
    bad = write(work, "qual.fq", "@r1\nACGT\n+\nIIII\n@r2\nACGTACGT\n+\nIII\n")
    line = fails(work, capsys, *search(work, bad, dna_store))
    assert line.startswith(f"swdask: error: {bad}: not valid FASTA/FASTQ: ")
    assert "quality length is 3" in line and "'r2'" in line


def test_empty_record(work, capsys):
    bad = write(work, "empty_record.fa", ">a\nMKVLA\n>b\n>c\nMKV\n")
    line = fails(work, capsys, *search(work, bad, SPROT_DB))
    assert line == f"swdask: error: {bad}, record 2 'b': empty sequence"


def test_letter_outside_alphabet(work, capsys):
    bad = write(work, "letter.fa", ">a\nMKVLAWQERTYIPASDFGHKLCVNM\n>b desc\nMKV1LA\n")
    line = fails(work, capsys, *search(work, bad, SPROT_DB))
    assert line.startswith(f"swdask: error: {bad}, record 2 'b', position 4: letter '1' is not "
                           "in the protein alphabet ARNDCQEGHILKMFPSTWYVBZX*UOJ")
    assert "--map-unknown" in line


@pytest.mark.parametrize("where", ["queries", "database"])
def test_invalid_letter_names_its_file(work, capsys, where):
    bad = write(work, f"bad_{where}.fa", ">p1\nMKVLAWQERT\n>p2\nMKVLA@QERT\n")
    queries, database = (bad, SPROT_DB) if where == "queries" else (QUERIES, bad)
    line = fails(work, capsys, *search(work, queries, database))
    assert line.startswith(f"swdask: error: {bad}, record 2 'p2', position 6: letter '@' is not "
                           "in the protein alphabet")


def test_ingest_bad_letter_leaves_no_store(work, capsys):
    bad = write(work, "letter.fa", ">a\nMKVLAWQERT\n>b\nMKVLA#\n")
    line = fails(work, capsys, "ingest", bad, "-o", work / "out" / "db.store", "--quiet")
    assert line.startswith(f"swdask: error: {bad}, record 2 'b', position 6: letter '#'")


# -- scoring options -------------------------------------------------------------------


def test_unknown_matrix_lists_the_names(work, capsys):
    line = fails(work, capsys, *search(work, QUERIES, SPROT_DB, "--matrix", "BLOSUM99"))
    assert line == (f"swdask: error: unknown matrix 'BLOSUM99'; choose one of: {MATRIX_NAMES}, "
                    "or give the path of an NCBI-format matrix file")


def test_negative_gap_open(work, capsys):
    line = fails(work, capsys, *search(work, QUERIES, SPROT_DB, "--gap-open", -1))
    assert line == "swdask: error: --gap-open must be a whole number from 0 to 32767, got -1"


def test_gap_extend_zero(work, capsys):
    line = fails(work, capsys, *search(work, QUERIES, SPROT_DB, "--gap-extend", 0))
    assert line == "swdask: error: --gap-extend must be a whole number from 1 to 32767, got 0"


def test_non_integer_gap_is_an_argparse_error(work, capsys):
    line = argparse_fails(work, capsys, *search(work, QUERIES, SPROT_DB, "--gap-open", "1.5"))
    assert line == "swdask: error: argument --gap-open: must be a whole number, got '1.5' (see 'swdask search --help')"


def test_matrix_with_match(work, capsys):
    line = fails(work, capsys, *search(work, QUERIES, SPROT_DB, "--matrix", "BLOSUM62",
                                       "--match", 2))
    assert line == "swdask: error: give either a matrix or --match/--mismatch scores, not both"


def test_malformed_matrix_file(work, capsys):
    matrix = write(work, "bad.mat", "this is not a matrix\n1 2 3\n")
    line = fails(work, capsys, *search(work, QUERIES, SPROT_DB, "--matrix", matrix))
    assert line.startswith(f"swdask: error: {matrix}: not a readable NCBI-format matrix")


def test_protein_matrix_on_dna_database(work, capsys, dna_queries):
    line = fails(work, capsys, *search(work, dna_queries, RRNA, "--matrix", "BLOSUM62"))
    assert line == (f"swdask: error: {RRNA}: the database is dna (detected) but the scoring "
                    "(BLOSUM62) is for protein")


def test_max_hits_zero(work, capsys):
    line = argparse_fails(work, capsys, *search(work, QUERIES, SPROT_DB, "--max-hits", 0))
    assert line == "swdask: error: argument --max-hits: must be a positive whole number, got '0' (see 'swdask search --help')"


def test_unknown_mode(work, capsys):
    line = argparse_fails(work, capsys, *search(work, QUERIES, SPROT_DB, "--mode", "lokal"))
    assert line.startswith("swdask: error: argument --mode: invalid choice: 'lokal'")


@pytest.fixture
def no_gpu(monkeypatch):
    """A machine where Numba sees no GPU (the test lane itself has the simulator)."""
    import swdask.backend

    monkeypatch.setattr(swdask.backend, "gpu_available", lambda: False)


def test_gpu_device_without_a_gpu(work, capsys, no_gpu):
    line = fails(work, capsys, *search(work, QUERIES, SPROT_DB, "--device", "gpu"))
    assert line == ("swdask: error: --device gpu: no CUDA GPU is visible (the CUDA driver "
                    "could not start device 0, or Numba is not installed); install swdask[gpu] "
                    "on a machine with an NVIDIA GPU, or use --device cpu")


def test_gpu_device_with_a_mode_its_kernels_lack():
    """A job whose GPU kernels lack a mode refuses ``--device gpu`` in one line naming the
    way out (the search's kernels compute every mode: tests/jobs/search)."""
    from swdask.backend import ALLPAIRS_GPU, LOCAL_GPU, SEARCH_GPU, check_device

    with pytest.raises(DeviceError) as raised:
        check_device("gpu", "global", kernels=LOCAL_GPU)
    assert str(raised.value) == ("--device gpu: the GPU kernels compute local alignments; run "
                                 "--mode global with --device cpu (or auto)")
    with pytest.raises(DeviceError, match="^--device gpu: the all-pairs GPU kernel computes "):
        check_device("gpu", "semiglobal", here=False, kernels=ALLPAIRS_GPU)
    for mode in ("local", "global", "semiglobal"):
        assert check_device("gpu", mode, here=False, kernels=SEARCH_GPU) == "gpu"


# -- missing, empty and wrong inputs ----------------------------------------------------


def test_missing_query_file(work, capsys):
    missing = work / "in" / "missing.fa"
    line = fails(work, capsys, *search(work, missing, SPROT_DB))
    assert line == f"swdask: error: {missing}: no such file"


def test_missing_database(work, capsys):
    missing = work / "in" / "missing_db.fa.gz"
    line = fails(work, capsys, *search(work, QUERIES, missing))
    assert line == f"swdask: error: {missing}: no such file"


def test_empty_database_file(work, capsys):
    empty = write(work, "empty_db.fa", "")
    line = fails(work, capsys, *search(work, QUERIES, empty))
    assert line == f"swdask: error: {empty}: no sequences"


def test_empty_query_file(work, capsys):
    empty = write(work, "empty_q.fa", "")
    line = fails(work, capsys, *search(work, empty, SPROT_DB))
    assert line == f"swdask: error: {empty}: no sequences"


def test_directory_as_query_file(work, capsys):
    folder = work / "in" / "a_folder"
    folder.mkdir()
    line = fails(work, capsys, *search(work, folder, SPROT_DB))
    assert line.startswith(f"swdask: error: {folder}: not a sequence store")


MISMATCH = ("the queries are protein (detected) but the database is dna; to read them as "
            "dna, pass alphabet='dna' (--alphabet dna)")


def test_protein_queries_against_dna_database(work, capsys, dna_store):
    line = fails(work, capsys, *search(work, QUERIES, dna_store))
    assert line == f"swdask: error: {MISMATCH}"


def test_protein_queries_against_dna_fasta(work, capsys):
    line = fails(work, capsys, *search(work, QUERIES, RRNA))
    assert line == f"swdask: error: {MISMATCH}"


def test_protein_queries_read_as_dna_name_the_letter(work, capsys, dna_store):
    line = fails(work, capsys, *search(work, QUERIES, dna_store, "--alphabet", "dna"))
    assert line.startswith(f"swdask: error: {QUERIES}, record 1 'sp|Q6GZU6|030R_FRG3G', "
                           "position 3: letter 'L' is not in the dna alphabet ACGTN")


def test_dna_queries_against_protein_database(work, capsys):
    """ACGT are protein letters too: without detection DNA would be searched as protein."""
    dna = write(work, "dna.fa", ">d1\nACGTACGTACGTTTGACGATCG\n")
    line = fails(work, capsys, *search(work, dna, SPROT_DB))
    assert line == ("swdask: error: the queries are dna (detected) but the database is protein; "
                    "to read them as protein, pass alphabet='protein' (--alphabet protein)")


def test_align_missing_file(work, capsys):
    missing = work / "in" / "missing.fa"
    line = fails(work, capsys, "align", QUERIES, missing)
    assert line.startswith(f"swdask: error: {missing}: no such file")


def test_align_bad_letter(work, capsys):
    line = fails(work, capsys, "align", "MKVLAW", "MKV1AW")
    assert line.startswith("swdask: error: subject, position 4: letter '1' is not in the protein")


# -- output -------------------------------------------------------------------------------


def test_existing_output_is_untouched(work, capsys):
    out = work / "out" / "hits.parquet"
    content = bytes(range(256)) * 4
    out.write_bytes(content)
    line = fails(work, capsys, *search(work, QUERIES, SPROT_DB), before=["hits.parquet"])
    assert line == f"swdask: error: {out}: already exists (use --force to overwrite)"
    assert out.read_bytes() == content


def test_force_replaces_output(work, capsys):
    out = work / "out" / "hits.parquet"
    out.write_bytes(b"old")
    assert main([str(a) for a in search(work, QUERIES, SPROT_DB, "--max-hits", 1, "--force")]) == 0
    capsys.readouterr()
    assert out.read_bytes()[:4] == b"PAR1"
    assert listing(work / "out") == ["hits.parquet"]
    assert listing(work / "tmp") == []


def test_failed_search_keeps_forced_output(work, capsys):
    out = work / "out" / "hits.parquet"
    out.write_bytes(b"old")
    bad = write(work, "letter.fa", ">a\nMK!\n")
    line = fails(work, capsys, *search(work, bad, SPROT_DB, "--force"), before=["hits.parquet"])
    assert line.startswith(f"swdask: error: {bad}, record 1 'a', position 3")
    assert out.read_bytes() == b"old"


def test_output_folder_missing(work, capsys):
    out = work / "out" / "nowhere" / "hits.parquet"
    line = fails(work, capsys, "search", QUERIES, SPROT_DB, "-o", out, "--quiet")
    assert line == f"swdask: error: {out}: folder {out.parent} does not exist"


def test_output_is_a_directory(work, capsys):
    out = work / "out" / "a_folder"
    out.mkdir()
    line = fails(work, capsys, "search", QUERIES, SPROT_DB, "-o", out, "--quiet", "--force",
                 before=["a_folder"])
    assert line == f"swdask: error: {out}: is a directory; give a file name"


def test_ingest_existing_store(work, capsys):
    out = work / "out" / "db.store"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    line = fails(work, capsys, "ingest", SPROT_DB, "-o", out, "--quiet",
                 before=["db.store", "db.store/keep.txt"])
    assert line == f"swdask: error: {out}: already exists (use --force to overwrite)"
    assert (out / "keep.txt").read_text() == "mine"


# -- the Python API's exception classes ---------------------------------------------------


def test_api_missing_file(tmp_path):
    with pytest.raises(InputNotFoundError, match="no such file") as exc:
        swdask.search(tmp_path / "missing.fa", SPROT_DB)
    assert isinstance(exc.value, FileNotFoundError)
    assert isinstance(exc.value, SwdaskError)
    with pytest.raises(FileNotFoundError):
        swdask.search(QUERIES, tmp_path / "missing.fa")


def test_api_bad_letter(tmp_path):
    with pytest.raises(InvalidSequenceError, match=r"query 'q', position 3: letter '1'") as exc:
        swdask.search({"q": "MK1"}, SPROT_DB)
    assert isinstance(exc.value, ValueError)


def test_api_malformed_and_empty(tmp_path):
    bad = tmp_path / "bad.fa"
    bad.write_text("MKVL\n")
    with pytest.raises(SequenceFormatError, match="not valid FASTA/FASTQ"):
        swdask.search(bad, SPROT_DB)
    empty = tmp_path / "empty.fa"
    empty.write_text("")
    with pytest.raises(EmptyInputError, match="empty database"):
        swdask.search(QUERIES, empty)
    with pytest.raises(EmptyInputError):
        swdask.search([], SPROT_DB)


def test_api_options():
    with pytest.raises(ScoringError, match="unknown matrix 'FOO'; choose one of: BLOSUM45"):
        swdask.Scoring("FOO")
    with pytest.raises(ValueError, match=r"^unknown mode 'lokal'; choose one of: local, global, "
                       r"semiglobal$"):
        swdask.search(QUERIES, SPROT_DB, mode="lokal")
    with pytest.raises(ValueError, match="max_hits must be a positive whole number, got 0"):
        swdask.search(QUERIES, SPROT_DB, max_hits=0)
    # The search's GPU kernels take every mode: no DeviceError, a lazy hits table.
    assert swdask.search(QUERIES, SPROT_DB, device="gpu", mode="semiglobal").npartitions == 1


def test_api_gpu_without_a_gpu(no_gpu):
    with pytest.raises(DeviceError, match="no CUDA GPU is visible") as exc:
        swdask.search(QUERIES, SPROT_DB, device="gpu")
    assert isinstance(exc.value, RuntimeError)


def test_api_alphabet_mismatch(dna_store):
    with pytest.raises(StoreError, match="holds dna sequences, not protein"):
        swdask.search(QUERIES, dna_store, scoring=swdask.Scoring())
    with pytest.raises(InvalidSequenceError, match=r"the queries are protein \(detected\)"):
        swdask.search(QUERIES, dna_store)
    with pytest.raises(InvalidSequenceError, match="not in the dna alphabet"):
        swdask.search(QUERIES, dna_store, alphabet="dna")


def test_api_existing_output(tmp_path):
    hits = swdask.search({"q": "MKVLAWQERTYIPAS"}, SPROT_DB, max_hits=1)
    out = tmp_path / "hits.parquet"
    out.write_bytes(b"old")
    with pytest.raises(OutputExistsError) as exc:
        write_hits(hits, out)
    assert isinstance(exc.value, FileExistsError)
    assert out.read_bytes() == b"old"
    write_hits(hits, out, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hits.parquet"]
