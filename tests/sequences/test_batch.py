"""SequenceBatch (swdask.sequences.batch): its methods, and batches from Arrow and from a
Dask partition without a copy."""
from __future__ import annotations

import pickle

import numpy as np
import pyarrow.parquet as pq
import pytest

from swdask.sequences.alphabet import DNA, PROTEIN
from swdask.sequences.batch import SequenceBatch, as_batch


def test_reverse_complement():
    """Each sequence reversed and complemented in place, names and ids kept; IUPAC codes
    (stored as N) and N stay N; a length of 1 and a protein batch at the edges."""
    rng = np.random.default_rng(11)
    letters = ["".join(rng.choice(list("ACGTacgtNRYKM"), size=int(n))) for n in (1, 7, 32, 33)]
    batch = as_batch(dict(zip("abcd", letters)), alphabet="dna")
    flipped = batch.reverse_complement()
    pairs = {"A": "T", "C": "G", "G": "C", "T": "A"}
    for k, seq in enumerate(letters):
        assert DNA.decode(flipped.codes(k)) == "".join(pairs.get(c, "N")
                                                       for c in reversed(seq.upper()))
    assert (flipped.names, flipped.seq_id.tolist()) == (batch.names, batch.seq_id.tolist())
    assert flipped.reverse_complement() == batch  # IUPAC codes were stored as N already
    with pytest.raises(ValueError, match="^reverse complement of protein sequences$"):
        as_batch(["MKV"]).reverse_complement()


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


def test_dask_partition_to_batch_without_copy(sprot_store):
    frame = sprot_store.to_dask().partitions[2].compute()
    batch = SequenceBatch.from_pandas(frame, sprot_store.alphabet)
    assert batch == sprot_store.read_partition(2)
    values = frame["residues"].array._pa_array.chunk(0).values.to_numpy()
    assert np.shares_memory(batch.residues, values)
