"""Tests of swdask.sequences (fastx, store, ingest): FASTA/FASTQ reading and the sequence
store."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import pickle
import random
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import swdask.sequences.ingest as st
from swdask.errors import (
    EmptyInputError,
    InputNotFoundError,
    InvalidSequenceError,
    OutputExistsError,
    SequenceFormatError,
    StoreError,
)
from swdask.sequences import fastx
from swdask.sequences.alphabet import DNA, PROTEIN
from swdask.sequences.batch import SequenceBatch
from swdask.sequences.fastx import iter_records, sniff_alphabet, split_header
from swdask.sequences.ingest import ingest, open_database
from swdask.sequences.store import SequenceStore, load_sequences

DATA = Path(__file__).parents[1] / "data"
QUERIES = DATA / "sprot_queries.fasta"
SPROT_DB = DATA / "sprot_db.fasta.gz"
RRNA = DATA / "16S_200.fna.gz"


# -- helpers ----------------------------------------------------------------------------


def read_fasta(path):
    """``[(name, description, sequence)]`` by a plain-Python parser, independent of needletail."""
    opener = gzip.open if str(path).endswith(".gz") else open
    records = []
    with opener(path, "rt") as handle:
        for line in handle:
            line = line.rstrip("\n")
            if line.startswith(">"):
                name, _, description = line[1:].partition(" ")
                records.append([name, description.strip(), []])
            elif line:
                records[-1][2].append(line)
    return [(n, d, "".join(s)) for n, d, s in records]


def write(path: Path, text: str, *, compress: bool = False) -> Path:
    data = text.encode("ascii")
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return path


def to_fastq(records) -> str:
    return "".join(f"@{n} {d}\n{s}\n+\n{'I' * len(s)}\n" for n, d, s in records)


def batch_in_input_order(store: SequenceStore) -> SequenceBatch:
    batch = store.read_all()
    return batch.take(np.argsort(batch.seq_id))


def assert_matches(batch: SequenceBatch, records, alphabet):
    assert batch.names == tuple(n for n, _, _ in records)
    assert batch.descriptions == tuple(d for _, d, _ in records)
    assert batch.seq_id.tolist() == list(range(len(records)))
    for i, (_, _, seq) in enumerate(records):
        expected = seq.upper()
        if alphabet is DNA:
            expected = expected.replace("U", "T").translate(str.maketrans("RYKMSWBDHV", "N" * 10))
        assert alphabet.decode(batch.codes(i)) == expected, batch.names[i]


def no_hidden_leftovers(directory: Path):
    return [p.name for p in directory.iterdir() if p.name.startswith(".")]


@pytest.fixture(scope="module")
def sprot_store(tmp_path_factory):
    """The 400-record protein database, cut into many small partitions."""
    out = tmp_path_factory.mktemp("store") / "sprot.store"
    return ingest(SPROT_DB, out, partition_residues=20_000)


# -- FASTA/FASTQ reading -------------------------------------------------------------------


def test_split_header():
    assert split_header("sp|P1|X_HUMAN  Some protein  OS=Homo ") == ("sp|P1|X_HUMAN", "Some protein  OS=Homo")
    assert split_header("NR_1.1\tdesc") == ("NR_1.1", "desc")
    assert split_header("solo") == ("solo", "")


def test_iter_records_names_and_codes():
    records = list(iter_records(QUERIES, alphabet=PROTEIN))
    expected = read_fasta(QUERIES)
    assert [(n, d) for n, d, _ in records] == [(n, d) for n, d, _ in expected]
    assert all(c.dtype == np.uint8 for _, _, c in records)
    assert [PROTEIN.decode(c) for _, _, c in records] == [s for _, _, s in expected]


def test_sniff_alphabet():
    assert sniff_alphabet(RRNA) is DNA
    assert sniff_alphabet([SPROT_DB]) is PROTEIN
    assert sniff_alphabet([QUERIES, RRNA]) is PROTEIN  # the first 10,000 residues decide


# -- round trip and layout ----------------------------------------------------------------


def test_round_trip_protein(sprot_store):
    assert sprot_store.alphabet is PROTEIN
    assert_matches(batch_in_input_order(sprot_store), read_fasta(SPROT_DB), PROTEIN)
    assert len(sprot_store) == 400


def test_round_trip_dna_with_iupac(tmp_path):
    store = ingest(RRNA, tmp_path / "rrna", partition_residues=50_000)
    assert store.alphabet is DNA
    records = read_fasta(RRNA)
    assert any(set(s) - set("ACGT") for _, _, s in records)  # the file does hold N/IUPAC
    assert_matches(batch_in_input_order(store), records, DNA)


def test_rows_sorted_and_partitions_contiguous(sprot_store):
    parts = sprot_store.partitions
    assert len(parts) > 5
    keys = []
    for i, part in enumerate(parts):
        batch = sprot_store.read_partition(i)
        assert len(batch) == part["n_records"] > 0
        assert batch.n_residues == part["n_residues"]
        assert (batch.lengths.min(), batch.lengths.max()) == (part["min_length"], part["max_length"])
        keys += list(zip(batch.lengths.tolist(), batch.seq_id.tolist()))
        # Pruning needs the Parquet statistics of the length column.
        stats = pq.ParquetFile(sprot_store.path / part["file"]).metadata.row_group(0).column(3).statistics
        assert (stats.min, stats.max) == (part["min_length"], part["max_length"])
    assert keys == sorted(keys)
    assert sorted(k[1] for k in keys) == list(range(400))
    for left, right in zip(parts, parts[1:]):
        assert left["max_length"] <= right["min_length"]
    # Greedy cut: every partition but the last is near the target; none is empty.
    assert all(p["n_residues"] <= 20_000 or p["n_records"] == 1 for p in parts)


def test_read_ahead_yields_the_same_partitions_in_order(sprot_store):
    plain = list(sprot_store.iter_partitions())
    ahead = sprot_store.iter_partitions(read_ahead=True)
    for expected in plain:
        got = next(ahead)
        assert np.array_equal(got.seq_id, expected.seq_id)
        assert np.array_equal(got.residues, expected.residues)
        assert got.names == expected.names
    assert next(ahead, None) is None
    early = sprot_store.iter_partitions(read_ahead=True)  # stopped early: no thread left behind
    next(early)
    early.close()


def test_single_long_record_gets_its_own_partition(tmp_path):
    fasta = write(tmp_path / "x.fa", ">a\nMKV\n>big\n" + "W" * 500 + "\n>b\nMKVL\n")
    store = ingest(fasta, tmp_path / "s", partition_residues=100)
    assert [(p["n_records"], p["max_length"]) for p in store.partitions] == [(2, 4), (1, 500)]


def test_row_groups_prune_within_a_file(tmp_path, monkeypatch):
    monkeypatch.setattr(st, "ROW_GROUP_RESIDUES", 5_000)
    store = ingest(SPROT_DB, tmp_path / "s")
    assert len(store.partitions) == 1
    meta = pq.ParquetFile(store.path / "part-00000.parquet").metadata
    assert meta.num_row_groups > 10
    bounds = [(meta.row_group(g).column(3).statistics.min, meta.row_group(g).column(3).statistics.max)
              for g in range(meta.num_row_groups)]
    assert bounds == sorted(bounds)
    assert all(lo <= hi for lo, hi in bounds)


def test_to_dask_one_partition_per_file_and_filters(sprot_store):
    parts = sprot_store.partitions
    ddf = sprot_store.to_dask()
    assert ddf.npartitions == len(parts)
    assert list(ddf.columns) == ["seq_id", "name", "description", "length", "residues"]
    # swdask's dtypes (swdask.tables), in the graph's meta and in what a partition computes
    dtypes = {"seq_id": pd.Int64Dtype(), "name": pd.StringDtype(), "description": pd.StringDtype(),
              "length": pd.Int32Dtype(), "residues": pd.ArrowDtype(pa.list_(pa.uint8()))}
    assert ddf.dtypes.to_dict() == dtypes
    assert ddf.partitions[0].compute().dtypes.to_dict() == dtypes
    sizes = ddf.map_partitions(len).compute().tolist()
    assert sizes == [p["n_records"] for p in parts]
    # Reading fewer columns must not fuse files into one partition.
    narrow = sprot_store.to_dask(columns=["seq_id", "length", "residues"])
    assert narrow.optimize().npartitions == len(parts)
    assert narrow.map_partitions(len).compute().tolist() == sizes

    cut = parts[len(parts) // 2]["min_length"] + 1
    filtered = sprot_store.to_dask(columns=["seq_id", "length"], filters=[("length", ">=", cut)])
    assert filtered.npartitions == sum(p["max_length"] >= cut for p in parts) < len(parts)
    frame = filtered.compute()
    everything = ddf[["seq_id", "length"]].compute()
    assert sorted(frame["seq_id"]) == sorted(everything.loc[everything["length"] >= cut, "seq_id"])
    none = sprot_store.to_dask(filters=[("length", ">", 10**6)]).compute()
    assert len(none) == 0 and list(none.columns) == list(ddf.columns)


def test_dask_partition_to_batch_without_copy(sprot_store):
    frame = sprot_store.to_dask().partitions[2].compute()
    batch = SequenceBatch.from_pandas(frame, sprot_store.alphabet)
    assert batch == sprot_store.read_partition(2)
    values = frame["residues"].array._pa_array.chunk(0).values.to_numpy()
    assert np.shares_memory(batch.residues, values)


def test_metadata(sprot_store):
    meta = json.loads((sprot_store.path / "swdask_store.json").read_text())
    assert meta == sprot_store.metadata
    records = read_fasta(SPROT_DB)
    lengths = [len(s) for _, _, s in records]
    assert meta["format"] == "swdask-store" and meta["schema_version"] == 1
    assert meta["swdask_version"]
    assert meta["alphabet"] == "protein"
    assert (meta["n_records"], meta["n_residues"]) == (400, sum(lengths))
    assert (meta["min_length"], meta["max_length"]) == (min(lengths), max(lengths))
    assert meta["inputs"] == [{
        "path": os.path.abspath(SPROT_DB),
        "size": SPROT_DB.stat().st_size,
        "sha256": hashlib.sha256(SPROT_DB.read_bytes()).hexdigest(),
    }]
    assert sum(p["n_records"] for p in meta["partitions"]) == 400
    assert sum(p["n_residues"] for p in meta["partitions"]) == sum(lengths)
    assert [p["file"] for p in meta["partitions"]] == [f"part-{i:05d}.parquet" for i in range(len(meta["partitions"]))]
    assert sorted(os.listdir(sprot_store.path)) == sorted(["swdask_store.json"] + [p["file"] for p in meta["partitions"]])
    assert sprot_store.n_records == 400 and sprot_store.n_residues == sum(lengths)
    assert repr(sprot_store) == (
        f"SequenceStore({str(sprot_store.path)!r}, protein, 400 sequences, {sum(lengths)} residues, "
        f"{len(meta['partitions'])} partitions)"
    )


def test_plain_gzip_and_fastq_inputs_agree(tmp_path):
    records = read_fasta(RRNA)[:40]
    text = "".join(f">{n} {d}\n{s}\n" for n, d, s in records)
    inputs = [
        write(tmp_path / "a.fa", text),
        write(tmp_path / "a.fa.gz", text, compress=True),
        write(tmp_path / "a.fq", to_fastq(records)),
        write(tmp_path / "a.fq.gz", to_fastq(records), compress=True),
    ]
    batches = [batch_in_input_order(ingest(p, tmp_path / f"s{i}", alphabet="dna")) for i, p in enumerate(inputs)]
    assert_matches(batches[0], records, DNA)
    assert all(b == batches[0] for b in batches[1:])


def test_multiple_inputs_get_consecutive_ids(tmp_path):
    store = ingest([QUERIES, SPROT_DB], tmp_path / "s", partition_residues=50_000)
    records = read_fasta(QUERIES) + read_fasta(SPROT_DB)
    assert_matches(batch_in_input_order(store), records, PROTEIN)
    assert [i["path"] for i in store.metadata["inputs"]] == [os.path.abspath(QUERIES), os.path.abspath(SPROT_DB)]


def test_streaming_with_small_spill_budget(tmp_path, monkeypatch, sprot_store):
    flushed = []
    original = st._Spill.flush

    def counting_flush(self):
        flushed.append(len(self.names))
        original(self)

    monkeypatch.setattr(st, "SPILL_RESIDUES", 3_000)
    monkeypatch.setattr(st._Spill, "flush", counting_flush)
    store = ingest(SPROT_DB, tmp_path / "s", partition_residues=20_000)
    assert sum(n > 0 for n in flushed) > 20  # really spilled, many times
    assert store.partitions == sprot_store.partitions
    for i in range(len(store.partitions)):
        assert store.read_partition(i) == sprot_store.read_partition(i)
    assert sorted(os.listdir(store.path)) == sorted(os.listdir(sprot_store.path))  # spills removed


# -- alphabets --------------------------------------------------------------------------


def test_auto_detection_and_explicit_alphabet(tmp_path):
    assert ingest(RRNA, tmp_path / "d").alphabet is DNA
    assert ingest(QUERIES, tmp_path / "p").alphabet is PROTEIN
    # Every nucleotide letter is also a protein letter: an explicit choice wins.
    assert ingest(RRNA, tmp_path / "dp", alphabet="protein").alphabet is PROTEIN
    assert ingest(QUERIES, tmp_path / "pp", alphabet=PROTEIN).alphabet is PROTEIN


def test_iupac_to_n_u_to_t_and_lowercase(tmp_path):
    fasta = write(tmp_path / "x.fa", ">a\nACGURYKMSWBDHVN\n>b\nacgtu\nn\n")
    batch = load_sequences(fasta, alphabet="dna")
    assert [DNA.decode(batch.codes(i)) for i in range(2)] == ["ACGTNNNNNNNNNNN", "ACGTTN"]
    protein = load_sequences(write(tmp_path / "p.fa", ">p\nmkvLW*\n"), alphabet="protein")
    assert PROTEIN.decode(protein.codes(0)) == "MKVLW*"


def test_map_unknown(tmp_path):
    fasta = write(tmp_path / "x.fa", ">a\nMKJOV\n")
    with pytest.raises(InvalidSequenceError, match="position 3: letter 'J'"):
        ingest(fasta, tmp_path / "s", alphabet="protein")
    store = ingest(fasta, tmp_path / "s", alphabet="protein", map_unknown=True)
    assert PROTEIN.decode(store.read_all().codes(0)) == "MKXXV"
    dna = load_sequences(write(tmp_path / "d.fa", ">d\nACGTXE\n"), alphabet="dna", map_unknown=True)
    assert DNA.decode(dna.codes(0)) == "ACGTNN"


# -- SequenceBatch, load_sequences, open_database -----------------------------------------


def test_sequence_batch_methods():
    rng = np.random.default_rng(7)
    records = [(f"s{i}", f"d {i}", rng.integers(0, 20, size=int(n), dtype=np.uint8))
               for i, n in enumerate(rng.integers(1, 40, size=25))]
    batch = SequenceBatch.from_records(records, "protein", seq_ids=np.arange(100, 125))
    assert len(batch) == 25 and batch.alphabet is PROTEIN
    assert batch.offsets[0] == 0 and batch.offsets[-1] == batch.n_residues == len(batch.residues)
    assert (batch.seq_id.dtype, batch.lengths.dtype, batch.offsets.dtype, batch.residues.dtype) == (
        np.int64, np.int32, np.int64, np.uint8)
    for i, (_, _, codes) in enumerate(records):
        assert np.array_equal(batch.codes(i), codes)
    assert np.array_equal(batch.codes(-1), records[-1][2])
    with pytest.raises(IndexError):
        batch.codes(25)
    ordered = batch.sorted_by_length()
    keys = list(zip(ordered.lengths.tolist(), ordered.seq_id.tolist()))
    assert keys == sorted(keys)
    for i in range(len(ordered)):
        assert np.array_equal(ordered.codes(i), records[ordered.seq_id[i] - 100][2])
    table = batch.to_arrow()
    assert SequenceBatch.from_arrow(table, PROTEIN) == batch
    assert SequenceBatch.from_arrow(table.slice(3, 5), PROTEIN) == batch.take([3, 4, 5, 6, 7])
    assert SequenceBatch.concat([batch.take(range(10)), batch.take(range(10, 25))]) == batch
    assert pickle.loads(pickle.dumps(batch)) == batch
    assert batch != ordered
    assert repr(batch) == f"SequenceBatch(25 sequences, {batch.n_residues} residues, protein)"
    with pytest.raises(ValueError, match="lengths do not match the offsets"):
        SequenceBatch(batch.seq_id, batch.names, batch.descriptions, batch.lengths[::-1],
                      batch.offsets, batch.residues, PROTEIN)


def test_from_arrow_is_zero_copy(sprot_store):
    table = pq.read_table(sprot_store.path / "part-00001.parquet")
    table = table.combine_chunks()
    batch = SequenceBatch.from_arrow(table, PROTEIN)
    values = table.column("residues").chunk(0).values.to_numpy()
    assert np.shares_memory(batch.residues, values)


def test_load_sequences_file_and_store_agree(tmp_path, sprot_store):
    from_file = load_sequences(SPROT_DB)
    assert_matches(from_file, read_fasta(SPROT_DB), PROTEIN)
    assert load_sequences(sprot_store.path) == from_file
    assert load_sequences(sprot_store.path, alphabet="protein") == from_file
    with pytest.raises(StoreError) as info:
        load_sequences(sprot_store.path, alphabet="dna")
    assert str(info.value) == f"{sprot_store.path}: the store holds protein sequences, not dna"


def test_open_database(tmp_path, sprot_store):
    store = open_database(sprot_store.path)
    assert store.path == sprot_store.path and not store.temporary
    temporary = open_database(SPROT_DB, tmpdir=tmp_path)
    assert temporary.temporary and temporary.path.parent == tmp_path
    assert temporary.partitions == SequenceStore.open(ingest(SPROT_DB, tmp_path / "again").path).partitions
    empty = write(tmp_path / "empty.fa", "")
    with pytest.raises(EmptyInputError) as info:
        open_database(empty, tmpdir=tmp_path)
    assert str(info.value) == f"{empty}: empty database"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["again", "empty.fa", temporary.path.name])


# -- errors -----------------------------------------------------------------------------


def error_of(exc_type, func, *args, **kwargs) -> str:
    with pytest.raises(exc_type) as info:
        func(*args, **kwargs)
    return str(info.value)


def test_error_missing_file(tmp_path):
    missing = tmp_path / "nope.fa"
    assert error_of(InputNotFoundError, ingest, missing, tmp_path / "s") == f"{missing}: no such file"
    assert error_of(FileNotFoundError, load_sequences, missing) == f"{missing}: no such file"


def test_error_directory_as_input(tmp_path):
    (tmp_path / "d").mkdir()
    message = error_of(SequenceFormatError, ingest, tmp_path / "d", tmp_path / "s")
    assert message == f"{tmp_path / 'd'}: is a directory, not a FASTA/FASTQ file"


def test_error_not_fasta(tmp_path):
    path = write(tmp_path / "x.txt", "hello world\n")
    assert error_of(SequenceFormatError, ingest, path, tmp_path / "s") == (
        f"{path}: not valid FASTA/FASTQ: Expected '@' or '>' at the start of the file but found 'h'. (line 0)"
    )


def test_error_truncated_fastq(tmp_path):
    path = write(tmp_path / "x.fq", "@r1\nACGT\n+\nIIII\n@r2\nAC")
    assert error_of(SequenceFormatError, ingest, path, tmp_path / "s") == (
        f"{path}: not valid FASTA/FASTQ: Unexpected end of input (record 'r2' at line 6)."
    )


def test_error_quality_length(tmp_path):
    path = write(tmp_path / "x.fq", "@r1\nACGT\n+\nIII\n")
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
    path = write(tmp_path / "x.fa", ">a first\n\n>b\nAC\n")
    assert error_of(InvalidSequenceError, ingest, path, tmp_path / "s") == f"{path}, record 1 'a': empty sequence"
    path = write(tmp_path / "y.fa", ">a\nMK\n> no name\nMK\n")
    assert error_of(InvalidSequenceError, ingest, path, tmp_path / "s") == (
        f"{path}, record 2: empty name (the header line is empty or starts with white space)"
    )


def test_error_invalid_letter_with_position(tmp_path):
    path = write(tmp_path / "x.fa", ">a\nMKV\n>b two\nMKV1W\n")
    assert error_of(InvalidSequenceError, ingest, path, tmp_path / "s", alphabet="protein") == (
        f"{path}, record 2 'b', position 4: letter '1' is not in the protein alphabet "
        "ARNDCQEGHILKMFPSTWYVBZX* (use map_unknown / --map-unknown to read it as X)"
    )
    assert not (tmp_path / "s").exists()


def test_error_letter_outside_detected_alphabet_has_hint(tmp_path):
    rng = random.Random(11)
    dna = "".join(f">n{i}\n{''.join(rng.choice('ACGT') for _ in range(600))}\n" for i in range(20))
    path = write(tmp_path / "x.fa", dna + ">p protein\nMEEK\n")
    assert error_of(InvalidSequenceError, ingest, path, tmp_path / "s") == (
        f"{path}, record 21 'p', position 2: letter 'E' is not in the dna alphabet ACGTN "
        "(use map_unknown / --map-unknown to read it as N) "
        "(alphabet detected as dna from the first records; pass --alphabet protein)"
    )
    assert ingest(path, tmp_path / "s", alphabet="protein").n_records == 21


def test_error_empty_file(tmp_path):
    for path in (write(tmp_path / "x.fa", ""), write(tmp_path / "y.fa.gz", "", compress=True)):
        assert error_of(EmptyInputError, ingest, path, tmp_path / "s") == f"{path}: no sequences"
    assert error_of(EmptyInputError, ingest, [], tmp_path / "s") == "no input files given"


def test_error_output_exists_without_force(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    monkeypatch.setattr(fastx, "sniff_alphabet", lambda paths: pytest.fail("work was done"))
    # Raised before any work: even before the (missing) input is looked at.
    message = error_of(OutputExistsError, ingest, tmp_path / "missing.fa", out)
    assert message == f"{out}: already exists (use --force to overwrite)"
    assert os.listdir(out) == ["keep.txt"] and (out / "keep.txt").read_text() == "precious"
    # --force never deletes something that is not a store.
    message = error_of(OutputExistsError, ingest, QUERIES, out, force=True)
    assert message == f"{out}: exists and is not a sequence store; refusing to overwrite it even with --force"
    assert os.listdir(out) == ["keep.txt"]


def test_force_replaces_a_store(tmp_path):
    out = tmp_path / "out"
    ingest(QUERIES, out)
    store = ingest(RRNA, out, force=True)
    assert store.alphabet is DNA and store.n_records == 200
    assert SequenceStore.open(out).n_records == 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_failed_ingest_leaves_nothing(tmp_path, monkeypatch):
    def broken(table, path):
        raise RuntimeError("disk full")

    out = tmp_path / "out"
    old = ingest(QUERIES, tmp_path / "old")
    monkeypatch.setattr(st, "_write_partition", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        ingest(SPROT_DB, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]
    # With --force, a failure keeps the old store intact.
    with pytest.raises(RuntimeError, match="disk full"):
        ingest(SPROT_DB, old.path, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]
    assert SequenceStore.open(old.path).n_records == 12
    assert no_hidden_leftovers(tmp_path) == []


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "10", 2**31])
def test_error_bad_partition_residues(tmp_path, bad):
    message = error_of(StoreError, ingest, QUERIES, tmp_path / "s", partition_residues=bad)
    assert message == f"partition_residues must be a positive integer up to 2147483647, got {bad!r}"
    assert isinstance(StoreError(), ValueError)


def test_error_bad_alphabet_name(tmp_path):
    message = error_of(InvalidSequenceError, ingest, QUERIES, tmp_path / "s", alphabet="rna")
    assert message == "unknown alphabet 'rna'; choose one of: auto, protein, dna"
    assert error_of(ValueError, load_sequences, QUERIES, alphabet="RNA") == (
        "unknown alphabet 'RNA'; choose one of: auto, protein, dna"
    )


def test_error_store_open(tmp_path, sprot_store):
    plain = tmp_path / "plain"
    plain.mkdir()
    assert error_of(StoreError, SequenceStore.open, plain) == (
        f"{plain}: not a sequence store (no swdask_store.json); create one with ingest / swdask ingest"
    )
    assert error_of(StoreError, SequenceStore.open, tmp_path / "nope") == f"{tmp_path / 'nope'}: no such sequence store"
    assert error_of(StoreError, load_sequences, plain).startswith(f"{plain}: not a sequence store")
    assert error_of(StoreError, open_database, plain).startswith(f"{plain}: not a sequence store")

    store = ingest(QUERIES, tmp_path / "v")
    meta_path = store.path / "swdask_store.json"
    meta = json.loads(meta_path.read_text())
    meta["schema_version"] = 2
    meta_path.write_text(json.dumps(meta))
    assert error_of(StoreError, SequenceStore.open, store.path) == (
        f"{store.path}: store schema version 2 is not supported (this swdask reads version 1); "
        "re-create it with ingest"
    )
    meta_path.write_text("{not json")
    assert error_of(StoreError, SequenceStore.open, store.path).startswith(f"{meta_path}: damaged store metadata: ")
    with pytest.raises(IndexError):
        sprot_store.read_partition(len(sprot_store.partitions))
