"""FASTA/FASTQ reading (swdask.sequences.fastx): headers, records as codes, the alphabet
sniffed or given (IUPAC, U, lowercase, unknown letters mapped), plain, gzip and FASTQ
inputs alike, and every reading error named by file, record and position."""
from __future__ import annotations

import gzip
import random
import re

import numpy as np

from swdask.errors import (
    EmptyInputError,
    InputNotFoundError,
    InvalidSequenceError,
    SequenceFormatError,
)
from swdask.sequences.alphabet import DNA, PROTEIN
from swdask.sequences.fastx import iter_records, sniff_alphabet, split_header
from swdask.sequences.ingest import ingest
from swdask.sequences.store import load_sequences
from tests.helpers import (
    QUERIES,
    RRNA,
    SPROT_DB,
    assert_matches,
    batch_in_input_order,
    error_of,
    fasta_records,
    write_file,
)


def test_split_header():
    assert split_header("sp|P1|X_HUMAN  Some protein  OS=Homo ") == ("sp|P1|X_HUMAN", "Some protein  OS=Homo")
    assert split_header("NR_1.1\tdesc") == ("NR_1.1", "desc")
    assert split_header("solo") == ("solo", "")


def test_iter_records_names_and_codes():
    records = list(iter_records(QUERIES, alphabet=PROTEIN))
    expected = fasta_records(QUERIES)
    assert [(n, d) for n, d, _ in records] == [(n, d) for n, d, _ in expected]
    assert all(c.dtype == np.uint8 for _, _, c in records)
    assert [PROTEIN.decode(c) for _, _, c in records] == [s for _, _, s in expected]


def test_sniff_alphabet():
    assert sniff_alphabet(RRNA) is DNA
    assert sniff_alphabet([SPROT_DB]) is PROTEIN
    assert sniff_alphabet([QUERIES, RRNA]) is PROTEIN  # the first 10,000 residues decide


def to_fastq(records) -> str:
    return "".join(f"@{n} {d}\n{s}\n+\n{'I' * len(s)}\n" for n, d, s in records)


def test_plain_gzip_and_fastq_inputs_agree(tmp_path):
    records = fasta_records(RRNA)[:40]
    text = "".join(f">{n} {d}\n{s}\n" for n, d, s in records)
    inputs = [
        write_file(tmp_path / "a.fa", text),
        write_file(tmp_path / "a.fa.gz", text, compress=True),
        write_file(tmp_path / "a.fq", to_fastq(records)),
        write_file(tmp_path / "a.fq.gz", to_fastq(records), compress=True),
    ]
    batches = [batch_in_input_order(ingest(p, tmp_path / f"s{i}", alphabet="dna")) for i, p in enumerate(inputs)]
    assert_matches(batches[0], records, DNA)
    assert all(b == batches[0] for b in batches[1:])


# -- alphabets --------------------------------------------------------------------------


def test_auto_detection_and_explicit_alphabet(tmp_path):
    assert ingest(RRNA, tmp_path / "d").alphabet is DNA
    assert ingest(QUERIES, tmp_path / "p").alphabet is PROTEIN
    # Every nucleotide letter is also a protein letter: an explicit choice wins.
    assert ingest(RRNA, tmp_path / "dp", alphabet="protein").alphabet is PROTEIN
    assert ingest(QUERIES, tmp_path / "pp", alphabet=PROTEIN).alphabet is PROTEIN


def test_iupac_to_n_u_to_t_and_lowercase(tmp_path):
    fasta = write_file(tmp_path / "x.fa", ">a\nACGURYKMSWBDHVN\n>b\nacgtu\nn\n")
    batch = load_sequences(fasta, alphabet="dna")
    assert [DNA.decode(batch.codes(i)) for i in range(2)] == ["ACGTNNNNNNNNNNN", "ACGTTN"]
    protein = load_sequences(write_file(tmp_path / "p.fa", ">p\nmkvLW*\n"), alphabet="protein")
    assert PROTEIN.decode(protein.codes(0)) == "MKVLW*"


def test_uniprot_letters_u_o_j_are_residues_kept_as_they_are(tmp_path):
    """Selenocysteine U, pyrrolysine O and J (I or L) are read by default, kept, and print
    back as themselves; every letter is a protein residue, so map_unknown maps none."""
    fasta = write_file(tmp_path / "x.fa", ">a\nMKJOVU\n>b\nuoj\n")
    store = ingest(fasta, tmp_path / "s", alphabet="protein")
    assert [PROTEIN.decode(store.read_all().codes(i)) for i in range(2)] == ["UOJ", "MKJOVU"]
    assert store.metadata["alphabet_letters"] == PROTEIN.letters
    mapped = load_sequences(fasta, alphabet="protein", map_unknown=True)
    assert PROTEIN.decode(mapped.codes(0)) == "MKJOVU"
    dna = load_sequences(write_file(tmp_path / "d.fa", ">d\nACGTXE\n"), alphabet="dna", map_unknown=True)
    assert DNA.decode(dna.codes(0)) == "ACGTNN"


# -- errors -----------------------------------------------------------------------------


def test_error_missing_file(tmp_path):
    missing = tmp_path / "nope.fa"
    assert error_of(InputNotFoundError, ingest, missing, tmp_path / "s") == f"{missing}: no such file"
    assert error_of(FileNotFoundError, load_sequences, missing) == f"{missing}: no such file"


def test_error_directory_as_input(tmp_path):
    (tmp_path / "d").mkdir()
    message = error_of(SequenceFormatError, ingest, tmp_path / "d", tmp_path / "s")
    assert message == f"{tmp_path / 'd'}: is a directory, not a FASTA/FASTQ file"


def test_error_not_fasta(tmp_path):
    path = write_file(tmp_path / "x.txt", "hello world\n")
    assert error_of(SequenceFormatError, ingest, path, tmp_path / "s") == (
        f"{path}: not valid FASTA/FASTQ: Expected '@' or '>' at the start of the file but found 'h'. (line 0)"
    )


def test_error_truncated_fastq(tmp_path):
    path = write_file(tmp_path / "x.fq", "@r1\nACGT\n+\nIIII\n@r2\nAC")
    assert error_of(SequenceFormatError, ingest, path, tmp_path / "s") == (
        f"{path}: not valid FASTA/FASTQ: Unexpected end of input (record 'r2' at line 6)."
    )


def test_error_quality_length(tmp_path):
    path = write_file(tmp_path / "x.fq", "@r1\nACGT\n+\nIII\n")
    assert error_of(SequenceFormatError, ingest, path, tmp_path / "s") == (
        f"{path}: not valid FASTA/FASTQ: Sequence length is 4 but quality length is 3 (record 'r1' at line 1)"
    )


def test_error_truncated_gzip_names_the_last_record(tmp_path):
    path = tmp_path / "x.fa.gz"
    path.write_bytes(gzip.compress(gzip.decompress(SPROT_DB.read_bytes()), mtime=0)[:80_000])
    message = error_of(SequenceFormatError, ingest, path, tmp_path / "s")
    # needletail reads ahead, so the record count depends on its buffer size.
    assert re.fullmatch(
        re.escape(f"{path}: not valid FASTA/FASTQ: I/O error: unexpected end of file (after record ") + r"\d+\)",
        message,
    ), message


def test_error_empty_record_and_empty_name(tmp_path):
    path = write_file(tmp_path / "x.fa", ">a first\n\n>b\nAC\n")
    assert error_of(InvalidSequenceError, ingest, path, tmp_path / "s") == f"{path}, record 1 'a': empty sequence"
    path = write_file(tmp_path / "y.fa", ">a\nMK\n> no name\nMK\n")
    assert error_of(InvalidSequenceError, ingest, path, tmp_path / "s") == (
        f"{path}, record 2: empty name (the header line is empty or starts with white space)"
    )


def test_error_invalid_letter_with_position(tmp_path):
    path = write_file(tmp_path / "x.fa", ">a\nMKV\n>b two\nMKV1W\n")
    assert error_of(InvalidSequenceError, ingest, path, tmp_path / "s", alphabet="protein") == (
        f"{path}, record 2 'b', position 4: letter '1' is not in the protein alphabet "
        "ARNDCQEGHILKMFPSTWYVBZX*UOJ (use map_unknown / --map-unknown to read it as X)"
    )
    assert not (tmp_path / "s").exists()


def test_error_letter_outside_detected_alphabet_has_hint(tmp_path):
    rng = random.Random(11)
    dna = "".join(f">n{i}\n{''.join(rng.choice('ACGT') for _ in range(600))}\n" for i in range(20))
    path = write_file(tmp_path / "x.fa", dna + ">p protein\nMEEK\n")
    assert error_of(InvalidSequenceError, ingest, path, tmp_path / "s") == (
        f"{path}, record 21 'p', position 2: letter 'E' is not in the dna alphabet ACGTN "
        "(use map_unknown / --map-unknown to read it as N) "
        "(alphabet detected as dna from the first records; pass --alphabet protein)"
    )
    assert ingest(path, tmp_path / "s", alphabet="protein").n_records == 21


def test_error_empty_file(tmp_path):
    for path in (write_file(tmp_path / "x.fa", ""), write_file(tmp_path / "y.fa.gz", "", compress=True)):
        assert error_of(EmptyInputError, ingest, path, tmp_path / "s") == f"{path}: no sequences"
    assert error_of(EmptyInputError, ingest, [], tmp_path / "s") == "no input files given"


def test_error_bad_alphabet_name(tmp_path):
    message = error_of(InvalidSequenceError, ingest, QUERIES, tmp_path / "s", alphabet="rna")
    assert message == "unknown alphabet 'rna'; choose one of: auto, protein, dna"
    assert error_of(ValueError, load_sequences, QUERIES, alphabet="RNA") == (
        "unknown alphabet 'RNA'; choose one of: auto, protein, dna"
    )
