"""The sequence store (swdask.sequences.store): a round trip through ingest, rows sorted by
length and partitions of contiguous lengths, read-ahead, Dask partitions with swdask's
dtypes and pruning filters, the metadata, load_sequences, and the errors of opening one."""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swdask.errors import StoreError
from swdask.sequences.alphabet import DNA, PROTEIN
from swdask.sequences.ingest import ingest, open_database
from swdask.sequences.store import SequenceStore, load_sequences
from tests.helpers import (
    QUERIES,
    RRNA,
    SPROT_DB,
    assert_matches,
    batch_in_input_order,
    error_of,
    fasta_records,
)

# -- round trip and layout ----------------------------------------------------------------


def test_round_trip_protein(sprot_store):
    assert sprot_store.alphabet is PROTEIN
    assert_matches(batch_in_input_order(sprot_store), fasta_records(SPROT_DB), PROTEIN)
    assert len(sprot_store) == 400


def test_round_trip_dna_with_iupac(tmp_path):
    store = ingest(RRNA, tmp_path / "rrna", partition_residues=50_000)
    assert store.alphabet is DNA
    records = fasta_records(RRNA)
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


def test_read_ahead_starts_reading_at_the_call(sprot_store, monkeypatch):
    """The first file is read before the caller iterates (a GPU search reads it while the
    GPU starts); an iterator dropped unread leaves no thread behind."""
    started = threading.Event()
    read = sprot_store.read_partition

    def watched(i):
        started.set()
        return read(i)

    monkeypatch.setattr(sprot_store, "read_partition", watched)
    ahead = sprot_store.iter_partitions(read_ahead=True)
    assert started.wait(30)
    del ahead
    deadline = time.monotonic() + 60
    while any(t.name.startswith("swdask-read") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "a read-ahead thread outlived its iterator"
        time.sleep(0.01)


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


def test_metadata(sprot_store):
    meta = json.loads((sprot_store.path / "swdask_store.json").read_text())
    assert meta == sprot_store.metadata
    records = fasta_records(SPROT_DB)
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


def test_load_sequences_file_and_store_agree(tmp_path, sprot_store):
    from_file = load_sequences(SPROT_DB)
    assert_matches(from_file, fasta_records(SPROT_DB), PROTEIN)
    assert load_sequences(sprot_store.path) == from_file
    assert load_sequences(sprot_store.path, alphabet="protein") == from_file
    with pytest.raises(StoreError) as info:
        load_sequences(sprot_store.path, alphabet="dna")
    assert str(info.value) == f"{sprot_store.path}: the store holds protein sequences, not dna"


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
