"""A store is trusted in nothing: damaged or crafted metadata and part files end in one
StoreError naming the file and what is wrong (exit 2 from the CLI), and no residue code
outside the alphabet reaches a kernel (swdask.sequences.store, *Validation*)."""
from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import swdask
from swdask.errors import StoreError
from swdask.sequences.alphabet import PROTEIN
from swdask.sequences.ingest import ingest
from swdask.sequences.store import METADATA_FILE, SequenceStore, metadata_checksum
from tests.helpers import QUERIES, SPROT_DB, run_cli

#: The fields a store written before validation existed lacks.
NEW_FIELDS = ("checksum", "alphabet_letters")
NEW_PARTITION_FIELDS = ("bytes", "min_seq_id", "max_seq_id")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """The test database in 2 partitions (333 and 67 records)."""
    path = tmp_path_factory.mktemp("stores") / "db.store"
    ingest(SPROT_DB, path, partition_residues=100_000)
    return path


def copy_store(pristine, tmp_path, *, old=False):
    path = tmp_path / ("old.store" if old else "new.store")
    shutil.copytree(pristine, path)
    if old:  # as written before the checksum, the letters and the partition ranges
        edit_metadata(path, lambda m: [m.pop(k) for k in NEW_FIELDS]
                      + [p.pop(k) for p in m["partitions"] for k in NEW_PARTITION_FIELDS],
                      keep_checksum=False)
    return path


def edit_metadata(store, change, *, keep_checksum=True):
    """Apply ``change`` to the metadata; with ``keep_checksum`` re-sign it, as a crafted
    store would, so that the structural checks behind the checksum are reached."""
    path = store / METADATA_FILE
    metadata = json.loads(path.read_text())
    change(metadata)
    if keep_checksum and "checksum" in metadata:
        metadata["checksum"] = metadata_checksum(metadata)
    path.write_text(json.dumps(metadata))


def rewrite_codes(store, change, *, keep_metadata=True):
    """Rewrite part 0 with its residue codes changed by ``change`` (a schema-valid file);
    with ``keep_metadata`` the metadata is updated to match the new file's size."""
    part = store / "part-00000.parquet"
    table = pq.read_table(part)
    residues = table.column("residues").combine_chunks()
    codes = residues.values.to_numpy().copy()
    change(codes)
    table = table.set_column(4, table.schema.field("residues"), pa.ListArray.from_arrays(
        residues.offsets, pa.array(codes, pa.uint8())))
    pq.write_table(table, part, write_statistics=["seq_id", "length"])
    if keep_metadata:
        size = part.stat().st_size
        edit_metadata(store, lambda m: m["partitions"][0].update(bytes=size)
                      if "bytes" in m["partitions"][0] else None)


def read_everything(store):
    opened = SequenceStore.open(store)
    opened.read_all()
    for k in range(len(opened.partitions)):
        swdask.sequences.store.read_part(opened.files[k], ["seq_id", "length"])


def error_of(store) -> str:
    with pytest.raises(StoreError) as info:
        read_everything(store)
    return str(info.value)


# -- what the metadata may not say ------------------------------------------------------

METADATA_CASES = {
    # An old store names no letters: its protein codes are then outside the dna alphabet.
    "edited alphabet": (lambda m: m.update(alphabet="dna"), "letters|outside the alphabet"),
    "unknown alphabet": (lambda m: m.update(alphabet=["protein"]), "unknown alphabet"),
    "foreign letters": (lambda m: m.update(alphabet_letters="ACDEFG"), "letters"),
    "record count": (lambda m: m.update(n_records=5), "the partitions hold 400 records"),
    "residue count": (lambda m: m.update(n_residues=-1), "must be counts"),
    "partition count": (lambda m: m["partitions"][0].update(n_records=5), "partitions hold 72"),
    "partitions not a list": (lambda m: m.update(partitions="x"), "must be counts and a list"),
    "file null": (lambda m: m["partitions"][0].update(file=None), "not an entry with a file"),
    "file listed twice": (lambda m: m["partitions"].append(dict(m["partitions"][1])),
                          "not in length order"),
    "dot-dot path": (lambda m: m["partitions"][0].update(file="../outside.parquet"),
                     "is not a file name inside the store"),
    "absolute path": (lambda m: m["partitions"][0].update(file="/etc/hostname"),
                      "is not a file name inside the store"),
    "sub-folder path": (lambda m: m["partitions"][0].update(file="a/part-00000.parquet"),
                        "is not a file name inside the store"),
    "lengths out of order": (lambda m: m["partitions"].reverse(), "not in length order"),
    "length range": (lambda m: m["partitions"][0].update(max_length=10), "outside the partition"),
    "bool count": (lambda m: m["partitions"][1].update(n_records=True), "whole numbers"),
}


@pytest.mark.parametrize("case,old", [(c, False) for c in METADATA_CASES]
                         + [(c, True) for c in METADATA_CASES if c != "foreign letters"])
def test_crafted_metadata_is_refused(pristine, tmp_path, case, old):
    """Re-signed (new stores) or unsigned (old stores): the structural check names it."""
    store = copy_store(pristine, tmp_path, old=old)
    change, expected = METADATA_CASES[case]
    edit_metadata(store, change)
    message = error_of(store)
    assert re.search(expected, message) and str(store) in message


def test_any_edit_of_signed_metadata_fails_its_checksum(pristine, tmp_path):
    store = copy_store(pristine, tmp_path)
    edit_metadata(store, lambda m: m.update(alphabet="dna"), keep_checksum=False)
    assert error_of(store) == (f"{store / METADATA_FILE}: the metadata does not match its "
                               "checksum (edited or damaged); re-create the store with ingest")


def test_a_symlink_out_of_the_store_is_not_followed(pristine, tmp_path):
    store = copy_store(pristine, tmp_path)
    outside = tmp_path / "outside.parquet"
    shutil.copy(store / "part-00000.parquet", outside)
    os.remove(store / "part-00000.parquet")
    os.symlink(outside, store / "part-00000.parquet")
    assert "leads outside the store" in error_of(store)


# -- what the part files may not hold ---------------------------------------------------


@pytest.mark.parametrize("code,old", [(27, False), (200, False), (255, False), (24, True),
                                      (26, True), (200, True)])
def test_codes_outside_the_alphabet_never_reach_a_kernel(pristine, tmp_path, capsys, code, old):
    """A schema-valid part file, metadata made to match, with one code outside the store's
    alphabet: old stores index the 24 letters of their day, new ones 27."""
    store = copy_store(pristine, tmp_path, old=old)
    limit = 24 if old else PROTEIN.size
    rewrite_codes(store, lambda codes: codes.__setitem__(7, code))
    message = error_of(store)
    assert message == (f"{store / 'part-00000.parquet'}: damaged store partition: row 0, "
                       f"position 8: residue code {code} is outside the alphabet (codes "
                       f"0-{limit - 1}); re-create the store with ingest")
    status, _, err = run_cli(capsys, "search", QUERIES, store, "-o", tmp_path / "h.parquet")
    assert status == 2 and err == f"swdask: error: {message}\n"
    assert not (tmp_path / "h.parquet").exists()


@pytest.mark.parametrize("old", [False, True], ids=["new", "old"])
def test_a_partition_copied_over_another_is_caught(pristine, tmp_path, old):
    store = copy_store(pristine, tmp_path, old=old)
    shutil.copy(store / "part-00001.parquet", store / "part-00000.parquet")
    message = error_of(store)
    assert message.startswith(f"{store / 'part-00000.parquet'}: damaged store partition: ")
    assert ("bytes" in message) if not old else ("67 records, the metadata says 333" in message)


def test_a_partition_copied_over_another_of_the_same_size_is_caught(tmp_path):
    """Same record count and lengths: the seq_id range of the statistics tells them apart."""
    fasta = tmp_path / "same.fa"
    fasta.write_text("".join(f">r{k}\nMKVLAWQERT\n" for k in range(6)))
    store = tmp_path / "same.store"
    ingest(fasta, store, partition_residues=30)
    assert len(SequenceStore.open(store).partitions) == 2
    shutil.copy(store / "part-00001.parquet", store / "part-00000.parquet")
    assert "seq_id 3..5 in row group 0, outside the partition's 0..2" in error_of(store)


def test_a_flipped_byte_fails_the_page_checksum(pristine, tmp_path):
    store = copy_store(pristine, tmp_path)
    part = store / "part-00000.parquet"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x10
    part.write_bytes(bytes(data))
    assert error_of(store).startswith(f"{part}: cannot read partition: ")


def test_lengths_that_disagree_with_the_residues(pristine, tmp_path):
    store = copy_store(pristine, tmp_path)
    part = store / "part-00000.parquet"
    table = pq.read_table(part)
    lengths = table.column("length").to_numpy().copy()
    lengths[3] += 1
    table = table.set_column(3, table.schema.field("length"), pa.array(lengths, pa.int32()))
    pq.write_table(table, part, write_statistics=["seq_id", "length"])
    edit_metadata(store, lambda m: m["partitions"][0].update(bytes=part.stat().st_size))
    assert "row 3 holds" in error_of(store)


def test_a_store_written_before_the_checks_reads_and_searches_the_same(pristine, tmp_path):
    """Old stores: no checksum, letters or ranges; their codes index the 24 old letters."""
    old = copy_store(pristine, tmp_path, old=True)
    assert SequenceStore.open(old).read_all() == SequenceStore.open(pristine).read_all()
    assert swdask.search_in_process(QUERIES, old).equals(
        swdask.search_in_process(QUERIES, pristine))


def test_cli_one_line_for_a_damaged_store(pristine, tmp_path, capsys):
    store = copy_store(pristine, tmp_path)
    edit_metadata(store, lambda m: m["partitions"][1].update(file="../../etc/passwd"))
    status, _, err = run_cli(capsys, "search", QUERIES, store, "-o", tmp_path / "h.parquet")
    assert status == 2
    assert err == (f"swdask: error: {store / METADATA_FILE}: partition 1: partition path "
                   "'../../etc/passwd' is not a file name inside the store; refusing to read it\n")


def test_allpairs_and_dask_read_through_the_same_checks(pristine, tmp_path):
    store = copy_store(pristine, tmp_path)
    rewrite_codes(store, lambda codes: codes.__setitem__(0, 99))
    with pytest.raises(StoreError, match="residue code 99"):
        swdask.all_pairs(store, min_identity=0.99).compute()
    with pytest.raises(StoreError, match="residue code 99"):
        SequenceStore.open(store).to_dask().compute()
    batch = SequenceStore.open(pristine).read_partition(0)
    assert int(batch.residues.max()) < PROTEIN.size and np.all(batch.lengths > 0)
