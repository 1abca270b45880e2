"""The sequence store: FASTA/FASTQ ingested once into a length-sorted Parquet dataset.

A store is a directory::

    swdask_store.json       metadata: alphabet, counts, input checksums, partitions
    part-00000.parquet      rows of schema swdask.parquet_schemas.SEQUENCES
    part-00001.parquet      ...

Rows are sorted by ``(length, seq_id)`` over the whole store and every file holds one
contiguous slice of that order, so file *i*'s longest sequence is no longer than file
*i + 1*'s shortest and a filter on ``length`` skips whole files (and, through the
Parquet statistics, row groups within a file).  ``seq_id`` is the 0-based record number
over all inputs in order.  Residues are uint8 codes of :mod:`swdask.alphabet`.

:func:`ingest` builds a store, :class:`SequenceStore` reads one (as a lazy Dask
DataFrame or as :class:`SequenceBatch` arrays), :func:`load_sequences` and
:func:`open_database` accept either a FASTA/FASTQ file or a store.
"""
from __future__ import annotations

import hashlib
import json
import numbers
import os
import shutil
import tempfile
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .alphabet import DNA, PROTEIN, Alphabet, get_alphabet
from .errors import (
    EmptyInputError,
    InvalidSequenceError,
    OutputExistsError,
    SequenceFormatError,
    StoreError,
)
from .fastx import check_readable, iter_records, sniff_alphabet
from .jobs.base import atomic_dir, progress_bar
from .parquet_schemas import SEQUENCES, SEQUENCES_VERSION
from .tables import check_schema, check_table, to_pandas

__all__ = [
    "SequenceBatch",
    "SequenceStore",
    "ingest",
    "load_sequences",
    "open_database",
]

STORE_FORMAT = "swdask-store"
METADATA_FILE = "swdask_store.json"
#: Default residues per Parquet file (one Dask partition each).
PARTITION_RESIDUES = 16_777_216
#: Residues buffered in memory during ingest before they are spilled to disk.
SPILL_RESIDUES = 64 * 2**20
#: Residues per Parquet row group (so that ``length`` statistics prune within a file).
ROW_GROUP_RESIDUES = 2 * 2**20
_MAX_LIST_RESIDUES = 2**31 - 1  # int32 offsets of Arrow list<uint8>
_PROGRESS_EVERY = 4096


def _swdask_version() -> str:
    try:
        from importlib.metadata import version

        return version("swdask")
    except Exception:  # noqa: BLE001  # pragma: no cover - not installed
        return "unknown"


# --------------------------------------------------------------------------------------
# SequenceBatch
# --------------------------------------------------------------------------------------


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
    >>> from swdask.alphabet import PROTEIN
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
    def from_arrow(cls, table: pa.Table, alphabet) -> SequenceBatch:
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
        column = table.column("residues")
        # combine_chunks copies even a single chunk; take that one as it is.
        residues = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        offsets = residues.offsets.to_numpy().astype(np.int64)
        if offsets.size == 0:  # an empty array may have no offsets buffer
            offsets = np.zeros(1, dtype=np.int64)
        values = residues.values.to_numpy(zero_copy_only=True)[offsets[0]: offsets[-1]]
        return cls(
            seq_id=table.column("seq_id").to_numpy(),
            names=tuple(table.column("name").to_pylist()),
            descriptions=tuple(table.column("description").to_pylist()),
            lengths=table.column("length").to_numpy(),
            offsets=offsets - offsets[0],
            residues=values,
            alphabet=alphabet,
        )

    @classmethod
    def from_pandas(cls, frame, alphabet) -> SequenceBatch:
        """A batch from a pandas partition of :meth:`SequenceStore.to_dask`.

        Parameters
        ----------
        frame : pandas.DataFrame
            Columns ``seq_id``, ``name``, ``description``, ``length``, ``residues``
            (an Arrow list column is used without copying; an object column of arrays
            works too).
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
        columns = [f.name for f in SEQUENCES if f.name in frame.columns]
        return cls.from_arrow(pa.Table.from_pandas(frame[columns], preserve_index=False), alphabet)

    @classmethod
    def from_records(cls, records, alphabet, seq_ids=None) -> SequenceBatch:
        """A batch from ``(name, description, codes)`` tuples.

        Parameters
        ----------
        records : iterable of (str, str, array of uint8)
            As yielded by :func:`swdask.fastx.iter_records`.
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
    def concat(cls, batches, alphabet=None) -> SequenceBatch:
        """One batch holding the sequences of ``batches`` in order.

        Parameters
        ----------
        batches : sequence of SequenceBatch
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
        shifts = np.cumsum([0] + [len(b.residues) for b in batches])
        offsets = [np.zeros(1, np.int64)] + [b.offsets[1:] + s for b, s in zip(batches, shifts)]
        return cls(
            seq_id=np.concatenate([np.empty(0, np.int64)] + [b.seq_id for b in batches]),
            names=sum((b.names for b in batches), ()),
            descriptions=sum((b.descriptions for b in batches), ()),
            lengths=np.concatenate([np.empty(0, np.int32)] + [b.lengths for b in batches]),
            offsets=np.concatenate(offsets),
            residues=np.concatenate([np.empty(0, np.uint8)] + [b.residues for b in batches]),
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

    def take(self, indices) -> SequenceBatch:
        """A new batch of the sequences at ``indices``, in that order."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        lengths = self.lengths[indices].astype(np.int64)
        offsets = np.zeros(len(indices) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        starts = self.offsets[:-1][indices]
        gather = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
        return SequenceBatch(
            seq_id=self.seq_id[indices],
            names=tuple(self.names[i] for i in indices),
            descriptions=tuple(self.descriptions[i] for i in indices),
            lengths=lengths,
            offsets=offsets,
            residues=self.residues[gather],
            alphabet=self.alphabet,
        )

    def sorted_by_length(self) -> SequenceBatch:
        """A new batch sorted by ``(length, seq_id)``, the order of a store."""
        return self.take(np.lexsort((self.seq_id, self.lengths)))

    def to_arrow(self) -> pa.Table:
        """The batch as a table of schema ``SEQUENCES``."""
        if self.offsets[-1] > _MAX_LIST_RESIDUES:
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


# --------------------------------------------------------------------------------------
# SequenceStore
# --------------------------------------------------------------------------------------


class SequenceStore:
    """A sequence store on disk (see the module docstring for its layout).

    Use :meth:`open` (or :func:`ingest`, which returns one).

    Parameters
    ----------
    path : str or os.PathLike
        The store directory.

    Raises
    ------
    StoreError
        ``path`` does not exist, is not a store, or is of an unsupported version.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> from importlib.resources import files
    >>> tmp = tempfile.mkdtemp()
    >>> _ = ingest(files("swdask") / "data" / "demo_db.fasta.gz", os.path.join(tmp, "demo.store"))
    >>> store = SequenceStore.open(os.path.join(tmp, "demo.store"))
    >>> store.alphabet.name, len(store), store.n_residues
    ('protein', 2000, 797215)
    >>> batch = store.read_partition(0)
    >>> bool((batch.lengths[:-1] <= batch.lengths[1:]).all())
    True
    >>> ddf = store.to_dask(columns=["seq_id", "length"], filters=[("length", ">=", 1000)])
    >>> int(ddf["length"].min().compute()) >= 1000
    True
    >>> shutil.rmtree(tmp)
    """

    def __init__(self, path):
        self._path = Path(path)
        self._metadata = _read_metadata(self._path)
        self.temporary = False

    @classmethod
    def open(cls, path) -> SequenceStore:
        """Open the store at ``path``.

        Parameters
        ----------
        path : str or os.PathLike
            A directory written by :func:`ingest`.

        Returns
        -------
        SequenceStore

        Raises
        ------
        StoreError
            ``path`` does not exist, is not a store, or is of an unsupported version.
        """
        return cls(path)

    @property
    def path(self) -> Path:
        """The store directory."""
        return self._path

    @property
    def metadata(self) -> dict:
        """The contents of ``swdask_store.json`` (a copy)."""
        return json.loads(json.dumps(self._metadata))

    @property
    def alphabet(self) -> Alphabet:
        """The alphabet of the residue codes."""
        return get_alphabet(self._metadata["alphabet"])

    @property
    def n_records(self) -> int:
        """Number of sequences."""
        return int(self._metadata["n_records"])

    @property
    def n_residues(self) -> int:
        """Number of residues over all sequences."""
        return int(self._metadata["n_residues"])

    @property
    def partitions(self) -> list:
        """One dict per Parquet file, in length order.

        Keys: ``file``, ``n_records``, ``n_residues``, ``min_length``, ``max_length``.
        """
        return [dict(p) for p in self._metadata["partitions"]]

    @property
    def files(self) -> list:
        """Paths of the Parquet files, in length order."""
        return [self._path / p["file"] for p in self._metadata["partitions"]]

    def __len__(self) -> int:
        return self.n_records

    def __repr__(self) -> str:
        return (
            f"SequenceStore({str(self._path)!r}, {self.alphabet.name}, {self.n_records} sequences, "
            f"{self.n_residues} residues, {len(self._metadata['partitions'])} partitions)"
        )

    def to_dask(self, columns=None, filters=None):
        """The store as a lazy Dask DataFrame, one partition per Parquet file.

        Parameters
        ----------
        columns : list of str, optional
            Columns to read (default: all of ``SEQUENCES``).
        filters : list of tuples, optional
            pyarrow filters in DNF, e.g. ``[("length", ">=", 100)]``.  Files whose
            Parquet statistics exclude the filter are left out (``length`` prunes whole
            files, as the store is sorted by it); rows are filtered as they are read.

        Returns
        -------
        dask.dataframe.DataFrame
            Columns as in ``SEQUENCES``; ``residues`` is of dtype
            ``pd.ArrowDtype(pa.list_(pa.uint8()))`` (Arrow memory, no per-row objects);
            a RangeIndex per partition.  :meth:`SequenceBatch.from_pandas` turns a
            partition into arrays without copying the residues.

        Notes
        -----
        Built with ``dask.dataframe.from_map`` over the part files rather than
        ``dask.dataframe.read_parquet``: the latter fuses neighbouring files into one
        partition as soon as fewer than all columns are read (dask-expr's
        ``_fusion_compression_factor``), which would undo the store's partition sizing.
        Column projections are still pushed into the reads.  ``residues`` is an Arrow
        list column because Dask's string conversion (``dataframe.convert-string``)
        would turn an object column of arrays from ``from_map`` into strings.
        """
        import dask.dataframe as dd
        import pyarrow.dataset as ds

        files = [str(f) for f in self.files]
        if filters:
            expression = pq.filters_to_expression(filters)
            dataset = ds.dataset(files, schema=SEQUENCES, format="parquet")
            kept = {
                fragment.path
                for fragment in dataset.get_fragments()
                if fragment.split_by_row_group(expression, schema=SEQUENCES)
            }
            # Keep one file when nothing matches, so that the result is an empty frame.
            files = [f for f in files if f in kept] or files[:1]
        meta = to_pandas(SEQUENCES.empty_table())
        ddf = dd.from_map(
            _read_part_frame,
            files,
            filters=filters or None,
            meta=meta,
            label="swdask-store",
            enforce_metadata=False,
        )
        return ddf if columns is None else ddf[list(columns)]

    def read_partition(self, i: int) -> SequenceBatch:
        """The sequences of Parquet file ``i``, sorted by ``(length, seq_id)``.

        Raises
        ------
        IndexError
            ``i`` is not a partition number.
        StoreError
            The file is missing or unreadable.
        """
        partitions = self._metadata["partitions"]
        i = range(len(partitions))[i]
        path = self._path / partitions[i]["file"]
        try:
            table = pq.read_table(path, schema=SEQUENCES)
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"{path}: cannot read partition {i}: {exc}") from None
        return SequenceBatch.from_arrow(table, self.alphabet)

    def iter_partitions(self, *, read_ahead: bool = False):
        """Yield a :class:`SequenceBatch` per Parquet file, shortest sequences first.

        With ``read_ahead=True`` the next file is read on a thread while the caller works
        on this one (Parquet decoding releases the GIL): a GPU search hides its reads so,
        0.3 s of 2.9 s for 102 M residues on an H100 host.
        """
        count = len(self._metadata["partitions"])
        if not read_ahead or count < 2:
            for i in range(count):
                yield self.read_partition(i)
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1, thread_name_prefix="swdask-read") as pool:
            pending = pool.submit(self.read_partition, 0)
            for i in range(1, count + 1):
                batch = pending.result()
                if i < count:
                    pending = pool.submit(self.read_partition, i)
                yield batch

    def read_all(self) -> SequenceBatch:
        """Every sequence of the store in one batch, in store order (by length)."""
        return SequenceBatch.concat(self.iter_partitions(), alphabet=self.alphabet)


def _read_part_frame(path, filters=None, columns=None):
    """One part file as a pandas DataFrame (the task of :meth:`SequenceStore.to_dask`).

    The file's own schema is checked first, so that a damaged or foreign file raises a
    :class:`SchemaError` naming the file and the column instead of being cast or padded
    with nulls.
    """
    wanted = SEQUENCES if columns is None else pa.schema([SEQUENCES.field(c) for c in columns])
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise StoreError(f"{path}: cannot read partition: {exc}") from None
    check_schema(schema, wanted, where=str(path))
    table = pq.read_table(path, columns=columns, filters=filters, schema=SEQUENCES)
    return to_pandas(check_table(table, wanted, where=str(path)))


def _read_metadata(path: Path) -> dict:
    if not path.exists():
        raise StoreError(f"{path}: no such sequence store")
    if not path.is_dir():
        raise StoreError(f"{path}: not a sequence store (not a directory)")
    meta_path = path / METADATA_FILE
    if not meta_path.is_file():
        raise StoreError(
            f"{path}: not a sequence store (no {METADATA_FILE}); create one with ingest / swdask ingest"
        )
    try:
        metadata = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreError(f"{meta_path}: damaged store metadata: {exc}") from None
    if not isinstance(metadata, dict) or metadata.get("format") != STORE_FORMAT:
        raise StoreError(f"{meta_path}: not swdask store metadata (format is not {STORE_FORMAT!r})")
    version = metadata.get("schema_version")
    if version != SEQUENCES_VERSION:
        raise StoreError(
            f"{path}: store schema version {version!r} is not supported "
            f"(this swdask reads version {SEQUENCES_VERSION}); re-create it with ingest"
        )
    missing = [k for k in ("alphabet", "n_records", "n_residues", "partitions") if k not in metadata]
    if missing:
        raise StoreError(f"{meta_path}: damaged store metadata: missing {', '.join(missing)}")
    try:
        get_alphabet(metadata["alphabet"])
    except InvalidSequenceError:
        raise StoreError(f"{meta_path}: unknown alphabet {metadata['alphabet']!r}") from None
    for part in metadata["partitions"]:
        if not (path / part["file"]).is_file():
            raise StoreError(f"{path}: damaged store: {part['file']} is missing")
    return metadata


# --------------------------------------------------------------------------------------
# ingest
# --------------------------------------------------------------------------------------


def _check_alphabet_arg(alphabet):
    if isinstance(alphabet, Alphabet) or alphabet == "auto":
        return alphabet
    if isinstance(alphabet, str) and alphabet in ("protein", "dna"):
        return get_alphabet(alphabet)
    raise InvalidSequenceError(f"unknown alphabet {alphabet!r}; choose one of: auto, protein, dna")


def _as_path_list(inputs) -> list:
    if isinstance(inputs, (str, bytes, os.PathLike)):
        inputs = [inputs]
    inputs = list(inputs)
    if not inputs:
        raise EmptyInputError("no input files given")
    return inputs


def _detected_hint(exc: InvalidSequenceError, detected: Alphabet) -> InvalidSequenceError:
    """Add the auto-detection hint to a bad-letter error."""
    if detected.name == DNA.name:
        hint = f"alphabet detected as {DNA.name} from the first records; pass --alphabet {PROTEIN.name}"
    else:
        hint = f"alphabet detected as {detected.name} from the first records"
    return InvalidSequenceError(f"{exc} ({hint})")


def _resolve_alphabet(alphabet, paths):
    """``(Alphabet, detected)``: detected is True when it was sniffed from ``paths``."""
    if alphabet == "auto":
        return sniff_alphabet(paths), True
    return alphabet, False


def _read_records(path, alphabet, detected, map_unknown):
    """iter_records with the auto-detection hint added to bad-letter errors."""
    records = iter_records(path, alphabet=alphabet, map_unknown=map_unknown)
    while True:
        try:
            record = next(records)
        except StopIteration:
            return
        except InvalidSequenceError as exc:
            if detected and " is not in the " in str(exc):  # a bad letter, not an empty record
                raise _detected_hint(exc, alphabet) from None
            raise
        yield record


def _sha256(path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _plan_partitions(lengths: np.ndarray, target: int):
    """Cut the (length, seq_id) order into runs of about ``target`` residues.

    Returns the stable order of seq_ids by length and the start index (in that order)
    of every partition plus the end.  A partition is never empty; a record longer than
    ``target`` is its own partition.
    """
    order = np.argsort(lengths, kind="stable")
    cum = np.cumsum(lengths[order], dtype=np.int64)
    bounds = [0]
    start, done = 0, 0
    n = len(order)
    while start < n:
        end = int(np.searchsorted(cum, done + target, side="right"))
        end = max(end, start + 1)
        bounds.append(end)
        done = int(cum[end - 1])
        start = end
    return order, np.asarray(bounds, dtype=np.int64)


class _Spill:
    """Buffered rows of one partition; flushed to Arrow IPC files under the budget."""

    def __init__(self, directory: Path, index: int):
        self.directory = directory
        self.index = index
        self.files: list[Path] = []
        self._reset()

    def _reset(self):
        self.seq_ids = array("q")
        self.names: list[str] = []
        self.descriptions: list[str] = []
        self.lengths = array("q")
        self.residues = bytearray()

    def append(self, seq_id, name, description, codes):
        self.seq_ids.append(seq_id)
        self.names.append(name)
        self.descriptions.append(description)
        self.lengths.append(len(codes))
        self.residues += memoryview(codes)

    def table(self) -> pa.Table:
        lengths = np.frombuffer(self.lengths, dtype=np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        batch = SequenceBatch(
            seq_id=np.frombuffer(self.seq_ids, dtype=np.int64),
            names=self.names,
            descriptions=self.descriptions,
            lengths=lengths,
            offsets=offsets,
            residues=np.frombuffer(self.residues, dtype=np.uint8),
            alphabet=PROTEIN,  # the codes are not interpreted here
        )
        return batch.to_arrow()

    def flush(self):
        if not self.names:
            return
        path = self.directory / f"spill-{self.index:05d}-{len(self.files):05d}.arrow"
        table = self.table()
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, SEQUENCES) as writer:
            writer.write_table(table)
        self.files.append(path)
        self._reset()

    def collect(self) -> pa.Table:
        tables = []
        for path in self.files:
            with pa.OSFile(str(path), "rb") as source:
                tables.append(pa.ipc.open_file(source).read_all())
            path.unlink()
        if self.names:
            tables.append(self.table())
        self._reset()
        return pa.concat_tables(tables)


def _write_partition(table: pa.Table, path: Path) -> dict:
    table = table.sort_by([("length", "ascending"), ("seq_id", "ascending")]).combine_chunks()
    lengths = table.column("length").to_numpy()
    cum = np.cumsum(lengths, dtype=np.int64)
    with pq.ParquetWriter(
        str(path), SEQUENCES, compression="zstd", write_statistics=["seq_id", "length"]
    ) as writer:
        start, done = 0, 0
        while start < len(lengths):
            end = max(int(np.searchsorted(cum, done + ROW_GROUP_RESIDUES, side="right")), start + 1)
            writer.write_table(table.slice(start, end - start), row_group_size=end - start)
            done = int(cum[end - 1])
            start = end
    return {
        "file": path.name,
        "n_records": len(lengths),
        "n_residues": int(cum[-1]),
        "min_length": int(lengths[0]),
        "max_length": int(lengths[-1]),
    }


def _check_output(output: Path, force: bool) -> None:
    if not (output.exists() or output.is_symlink()):
        return
    if not force:
        raise OutputExistsError(f"{output}: already exists (use --force to overwrite)")
    is_store = output.is_dir() and not output.is_symlink() and (output / METADATA_FILE).is_file()
    is_empty_dir = output.is_dir() and not output.is_symlink() and not any(output.iterdir())
    if not (is_store or is_empty_dir):
        raise OutputExistsError(
            f"{output}: exists and is not a sequence store; refusing to overwrite it even with --force"
        )


def ingest(
    inputs,
    output,
    *,
    alphabet="auto",
    partition_residues: int = PARTITION_RESIDUES,
    map_unknown: bool = False,
    force: bool = False,
    progress: bool = False,
) -> SequenceStore:
    """Read FASTA/FASTQ files into a sequence store (a length-sorted Parquet dataset).

    Parameters
    ----------
    inputs : str, os.PathLike or list of them
        FASTA/FASTQ files, plain or gzip.  Records are numbered (``seq_id``) from 0 over
        all inputs in the order given.
    output : str or os.PathLike
        The store directory to create.
    alphabet : {"auto", "protein", "dna"} or Alphabet, default "auto"
        ``"auto"`` decides from the first 10,000 residues
        (:func:`swdask.fastx.sniff_alphabet`).
    partition_residues : int, default 16_777_216
        Residues per Parquet file (one Dask partition each).  A sequence longer than this
        gets a file of its own.
    map_unknown : bool, default False
        Read letters outside the alphabet as ``X``/``N`` instead of failing.
    force : bool, default False
        Replace ``output`` if it is an existing store (only once the new one is complete).
    progress : bool, default False
        Show progress bars (records) on stderr.

    Returns
    -------
    SequenceStore
        The new store.

    Raises
    ------
    OutputExistsError
        ``output`` exists and ``force`` is False (raised before any work), or it is not
        a store (never overwritten).
    InputNotFoundError
        An input does not exist.
    SequenceFormatError
        An input is not valid FASTA/FASTQ.
    InvalidSequenceError
        A record has a bad letter, an empty sequence or no name; or ``alphabet`` is
        unknown.
    EmptyInputError
        No inputs, or an input holds no records.
    StoreError
        ``partition_residues`` is not a positive integer below 2**31.

    Notes
    -----
    Ingest streams; it never holds the input in memory.  Pass 1 reads every record,
    checking every letter, and keeps only the lengths (and each file's SHA-256).  The
    ``(length, seq_id)`` order is then cut into partitions of about
    ``partition_residues`` residues.  Pass 2 re-reads the records, appends each to its
    partition's buffer and spills the buffers to Arrow IPC files whenever more than
    ``SPILL_RESIDUES`` (64 Mi) residues are buffered.  Finally each partition's spills
    are sorted and written as its Parquet file (zstd, row groups of about 2 Mi
    residues).  Peak memory is about one partition plus the spill budget.

    Everything is written to a hidden temporary directory beside ``output`` and renamed
    into place at the end; on any error it is removed, so no partial store is left.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> from importlib.resources import files
    >>> tmp = tempfile.mkdtemp()
    >>> store = ingest(files("swdask") / "data" / "demo_db.fasta.gz",
    ...                os.path.join(tmp, "demo.store"), partition_residues=200_000)
    >>> store  # doctest: +ELLIPSIS
    SequenceStore('...demo.store', protein, 2000 sequences, 797215 residues, 4 partitions)
    >>> [(p["n_records"], p["min_length"], p["max_length"]) for p in store.partitions]
    [(1010, 8, 332), (508, 332, 487), (322, 487, 853), (160, 854, 3797)]
    >>> shutil.rmtree(tmp)
    """
    # Arguments first, then the output, then the inputs: all before any work.
    alphabet = _check_alphabet_arg(alphabet)
    if (
        isinstance(partition_residues, bool)
        or not isinstance(partition_residues, numbers.Integral)
        or not 0 < partition_residues <= _MAX_LIST_RESIDUES
    ):
        raise StoreError(
            f"partition_residues must be a positive integer up to {_MAX_LIST_RESIDUES}, "
            f"got {partition_residues!r}"
        )
    partition_residues = int(partition_residues)
    paths = _as_path_list(inputs)
    output = Path(output)
    _check_output(output, force)
    for path in paths:
        check_readable(path)

    alphabet, detected = _resolve_alphabet(alphabet, paths)

    # Pass 1: validate every record, keep lengths and checksums.
    lengths = array("q")
    input_info = []
    per_input = []
    with progress_bar(progress, desc="ingest: checking", unit=" records",
                      dynamic_ncols=True) as bar:
        for path in paths:
            count = 0
            for _, _, codes in _read_records(path, alphabet, detected, map_unknown):
                lengths.append(len(codes))
                count += 1
                if count % _PROGRESS_EVERY == 0:
                    bar.update(_PROGRESS_EVERY)
            bar.update(count % _PROGRESS_EVERY)
            size, digest = _sha256(path)
            input_info.append({"path": os.path.abspath(path), "size": size, "sha256": digest})
            per_input.append(count)
    lengths = np.frombuffer(lengths, dtype=np.int64)
    if lengths.max() > _MAX_LIST_RESIDUES:
        raise InvalidSequenceError("a sequence is longer than 2**31 - 1 residues, which a store cannot hold")

    order, bounds = _plan_partitions(lengths, partition_residues)
    partition_of = np.empty(len(lengths), dtype=np.int64)
    for p in range(len(bounds) - 1):
        partition_of[order[bounds[p]: bounds[p + 1]]] = p

    with atomic_dir(output) as tmp:
        spill_dir = tmp / "_spill"
        spill_dir.mkdir()
        spills = [_Spill(spill_dir, p) for p in range(len(bounds) - 1)]
        buffered = 0
        seq_id = 0
        # Pass 2: encode again and route each record to its partition.
        with progress_bar(progress, desc="ingest: writing", unit=" records", total=len(lengths),
                          dynamic_ncols=True) as bar:
            for path, expected in zip(paths, per_input):
                first = seq_id
                records = iter_records(path, alphabet=alphabet, map_unknown=map_unknown)
                for name, description, codes in records:
                    if seq_id - first >= expected or len(codes) != lengths[seq_id]:
                        raise SequenceFormatError(f"{path}: changed while being read; run ingest again")
                    spills[partition_of[seq_id]].append(seq_id, name, description, codes)
                    buffered += len(codes)
                    seq_id += 1
                    if buffered > SPILL_RESIDUES:
                        for spill in spills:
                            spill.flush()
                        buffered = 0
                    if seq_id % _PROGRESS_EVERY == 0:
                        bar.update(_PROGRESS_EVERY)
                if seq_id - first != expected:
                    raise SequenceFormatError(f"{path}: changed while being read; run ingest again")
            bar.update(seq_id % _PROGRESS_EVERY)

        partitions = []
        for p, spill in enumerate(spills):
            partitions.append(_write_partition(spill.collect(), tmp / f"part-{p:05d}.parquet"))
            spills[p] = None  # free the buffers
        spill_dir.rmdir()

        metadata = {
            "format": STORE_FORMAT,
            "schema_version": SEQUENCES_VERSION,
            "swdask_version": _swdask_version(),
            "alphabet": alphabet.name,
            "n_records": len(lengths),
            "n_residues": int(lengths.sum()),
            "min_length": int(lengths.min()),
            "max_length": int(lengths.max()),
            "partition_residues": partition_residues,
            "inputs": input_info,
            "partitions": partitions,
        }
        (tmp / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    return SequenceStore(output)


# --------------------------------------------------------------------------------------
# convenience
# --------------------------------------------------------------------------------------


def _check_store_alphabet(store: SequenceStore, alphabet) -> None:
    if alphabet != "auto" and alphabet.name != store.alphabet.name:
        raise StoreError(
            f"{store.path}: the store holds {store.alphabet.name} sequences, not {alphabet.name}"
        )


def load_sequences(source, *, alphabet="auto", map_unknown: bool = False) -> SequenceBatch:
    """Read a query set: a FASTA/FASTQ file or a sequence store, all in memory.

    Parameters
    ----------
    source : str or os.PathLike
        A FASTA/FASTQ file (plain or gzip) or a store directory.
    alphabet : {"auto", "protein", "dna"} or Alphabet, default "auto"
        For a file, ``"auto"`` sniffs the first records; for a store, anything but
        ``"auto"`` must match the store's alphabet.
    map_unknown : bool, default False
        Read letters outside the alphabet as ``X``/``N`` instead of failing (files only).

    Returns
    -------
    SequenceBatch
        The sequences in input order, ``seq_id`` 0 .. n - 1 (for a store: its
        ``seq_id`` order).

    Raises
    ------
    InputNotFoundError, SequenceFormatError, InvalidSequenceError, EmptyInputError
        As :func:`ingest`, for a file.
    StoreError
        A damaged store, or a store of another alphabet than ``alphabet``.

    Examples
    --------
    >>> from importlib.resources import files
    >>> queries = load_sequences(files("swdask") / "data" / "demo_queries.fasta")
    >>> len(queries), queries.alphabet.name
    (5, 'protein')
    """
    alphabet = _check_alphabet_arg(alphabet)
    if os.path.isdir(source):
        store = SequenceStore.open(source)
        _check_store_alphabet(store, alphabet)
        batch = store.read_all()
        return batch.take(np.argsort(batch.seq_id, kind="stable"))
    check_readable(source)
    alphabet, detected = _resolve_alphabet(alphabet, [source])
    return SequenceBatch.from_records(_read_records(source, alphabet, detected, map_unknown), alphabet)


def open_database(source, *, alphabet="auto", map_unknown: bool = False, tmpdir=None) -> SequenceStore:
    """A database to search: a store as it is, or a FASTA/FASTQ file ingested into a temporary store.

    Parameters
    ----------
    source : str or os.PathLike
        A store directory, or a FASTA/FASTQ file (plain or gzip).
    alphabet : {"auto", "protein", "dna"} or Alphabet, default "auto"
        As :func:`ingest`; for a store, anything but ``"auto"`` must match it.
    map_unknown : bool, default False
        As :func:`ingest`.
    tmpdir : str or os.PathLike, optional
        Where the temporary store of a file goes (default: the system's temporary
        directory).

    Returns
    -------
    SequenceStore
        For a file, a store whose ``temporary`` attribute is True; the caller removes
        ``store.path`` when done (``shutil.rmtree``).

    Raises
    ------
    EmptyInputError
        The database holds no sequences.
    InputNotFoundError, SequenceFormatError, InvalidSequenceError, StoreError
        As :func:`ingest` and :meth:`SequenceStore.open`.

    Examples
    --------
    >>> import shutil
    >>> from importlib.resources import files
    >>> db = open_database(files("swdask") / "data" / "demo_db.fasta.gz")
    >>> db.temporary, len(db)
    (True, 2000)
    >>> shutil.rmtree(db.path)
    """
    alphabet = _check_alphabet_arg(alphabet)
    if os.path.isdir(source):
        store = SequenceStore.open(source)
        _check_store_alphabet(store, alphabet)
    else:
        check_readable(source)
        directory = Path(tempfile.mkdtemp(prefix="swdask-db-", dir=tmpdir))
        try:
            store = ingest(source, directory, alphabet=alphabet, map_unknown=map_unknown, force=True)
        except EmptyInputError:
            shutil.rmtree(directory, ignore_errors=True)
            raise EmptyInputError(f"{source}: empty database") from None
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        store.temporary = True
    if store.n_records == 0:
        raise EmptyInputError(f"{source}: empty database")
    return store
