"""Ingest (swdask.sequences.ingest): partitions and row groups, several inputs, streaming
through small spills, open_database, and outputs: never over what is not a store, replaced
only whole, nothing left by a failure."""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import swdask.sequences.ingest as st
from swdask.errors import EmptyInputError, OutputExistsError, StoreError
from swdask.sequences import fastx
from swdask.sequences.alphabet import DNA, PROTEIN
from swdask.sequences.ingest import ingest, open_database
from swdask.sequences.store import SequenceStore
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


def test_single_long_record_gets_its_own_partition(tmp_path):
    fasta = write_file(tmp_path / "x.fa", ">a\nMKV\n>big\n" + "W" * 500 + "\n>b\nMKVL\n")
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


def test_multiple_inputs_get_consecutive_ids(tmp_path):
    store = ingest([QUERIES, SPROT_DB], tmp_path / "s", partition_residues=50_000)
    records = fasta_records(QUERIES) + fasta_records(SPROT_DB)
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


def test_open_database(tmp_path, sprot_store):
    store = open_database(sprot_store.path)
    assert store.path == sprot_store.path and not store.temporary
    temporary = open_database(SPROT_DB, tmpdir=tmp_path)
    assert temporary.temporary and temporary.path.parent == tmp_path
    assert temporary.partitions == SequenceStore.open(ingest(SPROT_DB, tmp_path / "again").path).partitions
    empty = write_file(tmp_path / "empty.fa", "")
    with pytest.raises(EmptyInputError) as info:
        open_database(empty, tmpdir=tmp_path)
    assert str(info.value) == f"{empty}: empty database"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["again", "empty.fa", temporary.path.name])


def no_hidden_leftovers(directory: Path):
    return [p.name for p in directory.iterdir() if p.name.startswith(".")]


# -- outputs and errors -----------------------------------------------------------------


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
