"""Sequences as flat arrays (:class:`SequenceBatch`), and the one normaliser of inputs.

Every job takes its sequences through :func:`as_batch` (a set: a file or store, a
batch, a dict or a list) or :func:`one_sequence` (one sequence: letters, a file or
codes); :func:`list_arrays` turns an Arrow residues column into offsets and codes
without copying them.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..errors import EmptyInputError, InputNotFoundError, InvalidSequenceError
from ..parquet_schemas import SEQUENCES
from ..tables import check_table, numpy_of
from .alphabet import Alphabet, detect_alphabet, get_alphabet, reverse_complement

if TYPE_CHECKING:
    import numpy.typing as npt
    import pandas as pd

__all__ = ["MAX_LIST_RESIDUES", "SequenceBatch", "SequencesLike", "as_batch", "join_runs",
           "list_arrays", "one_sequence"]

#: Most residues of one Arrow ``list<uint8>`` column (int32 offsets).
MAX_LIST_RESIDUES = 2**31 - 1


@dataclass(frozen=True, eq=False)
class SequenceBatch:
    """Sequences as flat arrays: residue codes concatenated, with offsets.

    Small, immutable and picklable; sequence ``i`` is
    ``residues[offsets[i]:offsets[i + 1]]`` (see :meth:`codes`).

    Parameters
    ----------
    seq_id : numpy.ndarray
        int64 record numbers (``seq_id`` of the store, or input order).
    names : tuple of str
        Header up to the first white space.
    descriptions : tuple of str
        Rest of the header (``""`` if none).
    lengths : numpy.ndarray
        int32 sequence lengths.
    offsets : numpy.ndarray
        int64, ``len(self) + 1`` entries, into ``residues``; starts at 0.
    residues : numpy.ndarray
        uint8 codes of every sequence, concatenated.
    alphabet : Alphabet
        The alphabet of the codes.

    Examples
    --------
    >>> from swdask.sequences.alphabet import PROTEIN
    >>> batch = SequenceBatch.from_records(
    ...     [("a", "", PROTEIN.encode("MKV")), ("b", "second", PROTEIN.encode("WW"))], PROTEIN)
    >>> batch
    SequenceBatch(2 sequences, 5 residues, protein)
    >>> PROTEIN.decode(batch.codes(1)), batch.lengths.tolist(), batch.offsets.tolist()
    ('WW', [3, 2], [0, 3, 5])
    >>> batch.sorted_by_length().names
    ('b', 'a')
    """

    seq_id: np.ndarray
    names: tuple
    descriptions: tuple
    lengths: np.ndarray
    offsets: np.ndarray
    residues: np.ndarray
    alphabet: Alphabet

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "seq_id", np.asarray(self.seq_id, dtype=np.int64))
        set_(self, "names", tuple(self.names))
        set_(self, "descriptions", tuple(self.descriptions))
        set_(self, "lengths", np.asarray(self.lengths, dtype=np.int32))
        set_(self, "offsets", np.asarray(self.offsets, dtype=np.int64))
        set_(self, "residues", np.asarray(self.residues, dtype=np.uint8))
        set_(self, "alphabet", get_alphabet(self.alphabet))
        n = len(self.seq_id)
        if not (len(self.names) == len(self.descriptions) == len(self.lengths) == n):
            raise ValueError("SequenceBatch: seq_id, names, descriptions and lengths differ in length")
        if len(self.offsets) != n + 1 or self.offsets[0] != 0 or self.offsets[-1] != len(self.residues):
            raise ValueError("SequenceBatch: offsets must have len + 1 entries, from 0 to len(residues)")
        if not np.array_equal(np.diff(self.offsets), self.lengths):
            raise ValueError("SequenceBatch: lengths do not match the offsets")

    # -- construction -----------------------------------------------------------------

    @classmethod
    def from_arrow(cls, table: pa.Table, alphabet: str | Alphabet) -> SequenceBatch:
        """A batch from a table of schema ``SEQUENCES`` (residues are not copied).

        Parameters
        ----------
        table : pyarrow.Table
            Columns ``seq_id``, ``name``, ``description``, ``length``, ``residues``.
        alphabet : Alphabet or str
            The alphabet of the codes.

        Returns
        -------
        SequenceBatch

        Raises
        ------
        SchemaError
            A column is missing or of the wrong type.
        """
        table = check_table(table, SEQUENCES, where="sequence table")
        offsets, residues = list_arrays(table.column("residues"))
        return cls(
            seq_id=numpy_of(table.column("seq_id")),
            names=tuple(table.column("name").to_pylist()),
            descriptions=tuple(table.column("description").to_pylist()),
            lengths=numpy_of(table.column("length")),
            offsets=offsets,
            residues=residues,
            alphabet=alphabet,
        )

    @classmethod
    def from_pandas(cls, frame: pd.DataFrame, alphabet: str | Alphabet) -> SequenceBatch:
        """A batch from a pandas partition of :meth:`SequenceStore.to_dask`: as
        :meth:`from_arrow` (same ``alphabet``, same SchemaError), of a DataFrame with the
        columns of ``SEQUENCES`` (an Arrow list column of residues is used without copying;
        an object column of arrays works too)."""
        columns = [f.name for f in SEQUENCES if f.name in frame.columns]
        return cls.from_arrow(pa.Table.from_pandas(frame[columns], preserve_index=False), alphabet)

    @classmethod
    def from_records(cls, records: Iterable[tuple[str, str, npt.ArrayLike]],
                     alphabet: str | Alphabet,
                     seq_ids: npt.ArrayLike | None = None) -> SequenceBatch:
        """A batch from ``(name, description, codes)`` tuples.

        Parameters
        ----------
        records : iterable of (str, str, array of uint8)
            As yielded by :func:`swdask.sequences.fastx.iter_records`.
        alphabet : Alphabet or str
            The alphabet of the codes.
        seq_ids : array of int, optional
            Defaults to ``0 .. n - 1``.

        Returns
        -------
        SequenceBatch
        """
        records = list(records)
        codes = [np.asarray(c, dtype=np.uint8) for _, _, c in records]
        lengths = np.fromiter((len(c) for c in codes), dtype=np.int64, count=len(codes))
        offsets = np.zeros(len(codes) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(
            seq_id=np.arange(len(records)) if seq_ids is None else seq_ids,
            names=tuple(r[0] for r in records),
            descriptions=tuple(r[1] for r in records),
            lengths=lengths,
            offsets=offsets,
            residues=np.concatenate(codes) if codes else np.empty(0, np.uint8),
            alphabet=alphabet,
        )

    @classmethod
    def concat(cls, batches: Iterable[SequenceBatch],
               alphabet: str | Alphabet | None = None) -> SequenceBatch:
        """One batch holding the sequences of ``batches`` in order.

        Parameters
        ----------
        batches : iterable of SequenceBatch
            Batches of one alphabet.
        alphabet : Alphabet or str, optional
            Needed only when ``batches`` is empty.

        Returns
        -------
        SequenceBatch
        """
        batches = list(batches)
        if alphabet is None:
            if not batches:
                raise ValueError("SequenceBatch.concat: no batches and no alphabet")
            alphabet = batches[0].alphabet
        alphabet = get_alphabet(alphabet)
        if any(b.alphabet.name != alphabet.name for b in batches):
            raise ValueError("SequenceBatch.concat: batches of different alphabets")
        offsets, residues = join_runs([b.offsets for b in batches], [b.residues for b in batches])
        return cls(
            seq_id=np.concatenate([np.empty(0, np.int64)] + [b.seq_id for b in batches]),
            names=sum((b.names for b in batches), ()),
            descriptions=sum((b.descriptions for b in batches), ()),
            lengths=np.concatenate([np.empty(0, np.int32)] + [b.lengths for b in batches]),
            offsets=offsets,
            residues=residues,
            alphabet=alphabet,
        )

    # -- access -----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.seq_id)

    @property
    def n_residues(self) -> int:
        """Total number of residues."""
        return len(self.residues)

    def codes(self, i: int) -> np.ndarray:
        """The uint8 codes of sequence ``i`` (a view, not a copy)."""
        i = range(len(self))[i]
        return self.residues[self.offsets[i]: self.offsets[i + 1]]

    def take(self, indices: npt.ArrayLike) -> SequenceBatch:
        """A new batch of the sequences at ``indices``, in that order."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        lengths = self.lengths[indices].astype(np.int64)
        offsets = np.zeros(len(indices) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if len(indices) and (np.diff(indices) == 1).all():
            # A run of consecutive sequences (a block of all-pairs): one slice, no gather.
            first = self.offsets[indices[0]]
            residues = self.residues[first:first + offsets[-1]].copy()
        else:
            starts = self.offsets[:-1][indices]
            gather = (np.repeat(starts - offsets[:-1], lengths)
                      + np.arange(offsets[-1], dtype=np.int64))
            residues = self.residues[gather]
        return SequenceBatch(
            seq_id=self.seq_id[indices],
            names=tuple(self.names[i] for i in indices),
            descriptions=tuple(self.descriptions[i] for i in indices),
            lengths=lengths,
            offsets=offsets,
            residues=residues,
            alphabet=self.alphabet,
        )

    def reverse_complement(self) -> SequenceBatch:
        """A new batch of the reverse complements, in the same order, with the same
        names and ``seq_id`` (DNA; N stays N).

        Raises
        ------
        ValueError
            The batch is not DNA.

        Examples
        --------
        >>> from swdask.sequences.alphabet import DNA
        >>> batch = as_batch({"a": "AACG", "b": "TTN"}, alphabet="dna").reverse_complement()
        >>> [DNA.decode(batch.codes(k)) for k in range(2)], batch.names
        (['CGTT', 'NAA'], ('a', 'b'))
        """
        if self.alphabet.name != "dna":
            raise ValueError(f"reverse complement of {self.alphabet.name} sequences")
        # The reverse complement of the concatenation holds the sequences last to first.
        flipped = SequenceBatch(seq_id=self.seq_id[::-1], names=self.names[::-1],
                                descriptions=self.descriptions[::-1], lengths=self.lengths[::-1],
                                offsets=self.offsets[-1] - self.offsets[::-1],
                                residues=reverse_complement(self.residues), alphabet=self.alphabet)
        return flipped.take(np.arange(len(self))[::-1])

    def sorted_by_length(self) -> SequenceBatch:
        """A new batch sorted by ``(length, seq_id)``, the order of a store."""
        return self.take(np.lexsort((self.seq_id, self.lengths)))

    def to_arrow(self) -> pa.Table:
        """The batch as a table of schema ``SEQUENCES``."""
        if self.offsets[-1] > MAX_LIST_RESIDUES:
            raise ValueError("SequenceBatch.to_arrow: more than 2**31 - 1 residues in one table")
        residues = pa.ListArray.from_arrays(
            pa.array(self.offsets.astype(np.int32)), pa.array(self.residues, type=pa.uint8())
        )
        return pa.Table.from_arrays(
            [
                pa.array(self.seq_id, type=pa.int64()),
                pa.array(self.names, type=pa.string()),
                pa.array(self.descriptions, type=pa.string()),
                pa.array(self.lengths, type=pa.int32()),
                residues,
            ],
            schema=SEQUENCES,
        )

    def __eq__(self, other):
        if not isinstance(other, SequenceBatch):
            return NotImplemented
        return (
            self.alphabet.name == other.alphabet.name
            and self.names == other.names
            and self.descriptions == other.descriptions
            and np.array_equal(self.seq_id, other.seq_id)
            and np.array_equal(self.offsets, other.offsets)
            and np.array_equal(self.residues, other.residues)
        )

    __hash__ = None

    def __repr__(self) -> str:
        return f"SequenceBatch({len(self)} sequences, {self.n_residues} residues, {self.alphabet.name})"


#: A set of sequences as :func:`as_batch` takes it (type alias): a FASTA/FASTQ file or a
#: store, a batch, ``{name: sequence}`` or sequences as letters.
SequencesLike = str | os.PathLike | SequenceBatch | dict[str, str] | Sequence[str]


def join_runs(offsets: Sequence[npt.NDArray[np.int64]], residues: Sequence[npt.NDArray[np.uint8]],
              ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """Runs of sequences end to end: one ``offsets`` array (from 0) and the residues.  One
    run comes back as it is, without a copy (a store file's 64 Mi residues, read for a
    search's score task).

    Parameters
    ----------
    offsets : sequence of numpy.ndarray of int64
        Each run's offsets, from 0 (as :func:`list_arrays` gives them).
    residues : sequence of numpy.ndarray of uint8
        Each run's residues.

    Returns
    -------
    tuple of numpy.ndarray

    Examples
    --------
    >>> off, res = join_runs([np.array([0, 2, 3]), np.array([0, 1])],
    ...                      [np.array([5, 6, 7], np.uint8), np.array([8], np.uint8)])
    >>> off.tolist(), res.tolist()
    ([0, 2, 3, 4], [5, 6, 7, 8])
    """
    if len(offsets) == 1:
        return np.asarray(offsets[0], np.int64), np.asarray(residues[0])
    shifts = np.cumsum([0] + [len(r) for r in residues])
    joined = [np.zeros(1, np.int64)] + [np.asarray(o[1:], np.int64) + s
                                        for o, s in zip(offsets, shifts)]
    return (np.concatenate(joined),
            np.concatenate([np.empty(0, np.uint8)] + [np.asarray(r) for r in residues]))


def list_arrays(
    column: pa.ChunkedArray | pa.ListArray,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """``offsets`` (int64, from 0) and ``values`` (uint8) of a ``list<uint8>`` column,
    without copying the values.

    Parameters
    ----------
    column : pyarrow.ChunkedArray or pyarrow.ListArray
        Residues, one list a sequence.

    Returns
    -------
    tuple of numpy.ndarray
    """
    if isinstance(column, pa.ChunkedArray):
        # combine_chunks copies even a single chunk; take that one as it is.
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    offsets = numpy_of(column.offsets).astype(np.int64)
    if offsets.size == 0:  # an empty array may have no offsets buffer
        offsets = np.zeros(1, dtype=np.int64)
    values = numpy_of(column.values)[offsets[0]:offsets[-1]]
    return offsets - offsets[0], values


def as_batch(sequences: SequencesLike, alphabet: str | Alphabet = "auto",
             map_unknown: bool = False) -> SequenceBatch:
    """Sequences as a batch: the one normaliser of every job's sequence sets.

    Parameters
    ----------
    sequences : path, SequenceBatch, dict or list of str
        A FASTA/FASTQ file or sequence store (:func:`swdask.load_sequences`), a batch (as
        it is), ``{name: sequence}``, or sequences (named ``query_1``, ``query_2``, ...).
    alphabet : {"auto", "protein", "dna"} or Alphabet, default "auto"
        ``"auto"`` detects it from the first 10,000 letters (of a file: its first records).
    map_unknown : bool, default False
        Read letters outside the alphabet as ``X``/``N`` instead of failing.

    Returns
    -------
    SequenceBatch

    Raises
    ------
    EmptyInputError
        No sequences.
    InvalidSequenceError
        A bad letter or an empty sequence.

    Examples
    --------
    >>> as_batch(["MKV", "WW"]).names
    ('query_1', 'query_2')
    """
    if isinstance(sequences, SequenceBatch):
        return sequences
    if isinstance(sequences, (str, os.PathLike)):
        from .store import load_sequences  # store.py builds on this module

        return load_sequences(sequences, alphabet=alphabet, map_unknown=map_unknown)
    if isinstance(sequences, dict):
        items = list(sequences.items())
    else:
        items = [(f"query_{k + 1}", seq) for k, seq in enumerate(sequences)]
    if not items:
        raise EmptyInputError("no queries")
    if alphabet == "auto":
        alphabet = detect_alphabet("".join(seq for _, seq in items)[:10000].encode("ascii", "replace"))
    alphabet = get_alphabet(alphabet)
    records = []
    for name, seq in items:
        codes = alphabet.encode(seq, map_unknown=map_unknown, where=f"query {name!r}")
        if codes.size == 0:
            raise InvalidSequenceError(f"query {name!r}: empty sequence")
        records.append((str(name), "", codes))
    return SequenceBatch.from_records(records, alphabet)


def one_sequence(value: str | os.PathLike | np.ndarray, alphabet: str | Alphabet,
                 map_unknown: bool,
                 default_name: str) -> tuple[str, str | np.ndarray, Alphabet | None]:
    """One sequence given as letters, as a FASTA/FASTQ path (its first record) or as codes.

    Returns
    -------
    tuple
        ``(name, sequence, alphabet)``: a file gives its record's name, codes and
        alphabet; letters stay a str and codes a uint8 array, named ``default_name``
        with alphabet None (the caller decides it, e.g. from both sequences of a pair).

    Raises
    ------
    InputNotFoundError
        A path (or text with ``.``, ``/`` or ``\\``, which no residue is) that does not exist.
    TypeError
        Neither text, a path nor an array.
    """
    if isinstance(value, (str, os.PathLike)) and os.path.exists(value):
        from .store import load_sequences  # store.py builds on this module

        batch = load_sequences(value, alphabet=alphabet, map_unknown=map_unknown)
        return batch.names[0], batch.codes(0), batch.alphabet
    if isinstance(value, os.PathLike) or (isinstance(value, str) and any(c in value for c in "./\\")):
        # No residue is '.', '/' or '\\': a missing file, not a sequence with bad letters.
        raise InputNotFoundError(f"{value}: no such file (and not a sequence)")
    if isinstance(value, np.ndarray):
        return default_name, value.astype(np.uint8), None
    if not isinstance(value, str):
        raise TypeError(f"{default_name}: expected a sequence string, a file path or a code array")
    return default_name, value, None
