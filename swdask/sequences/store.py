"""The sequence store: FASTA/FASTQ ingested once into a length-sorted Parquet dataset.

A store is a directory::

    swdask_store.json       metadata: alphabet, counts, input checksums, partitions
    part-00000.parquet      rows of schema swdask.parquet_schemas.SEQUENCES
    part-00001.parquet      ...

Rows are sorted by ``(length, seq_id)`` over the whole store and every file holds one
contiguous slice of that order, so file *i*'s longest sequence is no longer than file
*i + 1*'s shortest and a filter on ``length`` skips whole files (and, through the
Parquet statistics, row groups within a file).  ``seq_id`` is the 0-based record number
over all inputs in order.  Residues are uint8 codes of :mod:`swdask.sequences.alphabet`.

:func:`swdask.sequences.ingest.ingest` builds a store, :class:`SequenceStore` reads one (as a
lazy Dask DataFrame or as :class:`SequenceBatch` arrays), :func:`load_sequences` and
:func:`swdask.sequences.ingest.open_database` accept either a FASTA/FASTQ file or a store.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InvalidSequenceError, StoreError
from ..parquet_schemas import SEQUENCES, SEQUENCES_VERSION
from ..tables import check_schema, check_table, to_pandas
from .alphabet import Alphabet, get_alphabet
from .batch import SequenceBatch
from .fastx import check_alphabet, check_readable, read_records, resolve_alphabet

__all__ = ["METADATA_FILE", "STORE_FORMAT", "SequenceStore", "fetch_sequences", "load_sequences",
           "read_part"]

STORE_FORMAT = "swdask-store"
METADATA_FILE = "swdask_store.json"


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
    >>> from swdask.sequences.ingest import ingest
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

    def check_alphabet(self, alphabet) -> None:
        """Raise :class:`StoreError` unless ``alphabet`` is ``"auto"`` or the store's
        (an :class:`Alphabet`, see :func:`swdask.sequences.fastx.check_alphabet`)."""
        if alphabet != "auto" and alphabet.name != self.alphabet.name:
            raise StoreError(
                f"{self.path}: the store holds {self.alphabet.name} sequences, not {alphabet.name}"
            )


def read_part(path, columns=None, filters=None) -> pa.Table:
    """One part file of a store as an Arrow table of ``columns`` (default: all), checked.

    The file's own schema is checked first, so that a damaged or foreign file raises a
    :class:`SchemaError` naming the file and the column instead of being cast or padded
    with nulls.  ``filters`` (pyarrow's, in DNF) select rows as they are read.

    Raises
    ------
    StoreError
        The file cannot be read.
    SchemaError
        A column is missing or of another type.
    """
    wanted = SEQUENCES if columns is None else pa.schema([SEQUENCES.field(c) for c in columns])
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise StoreError(f"{path}: cannot read partition: {exc}") from None
    check_schema(schema, wanted, where=str(path))
    table = pq.read_table(path, columns=columns, filters=filters, schema=SEQUENCES)
    return check_table(table, wanted, where=str(path))


def _read_part_frame(path, filters=None, columns=None):
    """One part file as a pandas DataFrame (the task of :meth:`SequenceStore.to_dask`)."""
    return to_pandas(read_part(path, columns, filters))


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
    alphabet = check_alphabet(alphabet)
    if os.path.isdir(source):
        store = SequenceStore.open(source)
        store.check_alphabet(alphabet)
        batch = store.read_all()
        return batch.take(np.argsort(batch.seq_id, kind="stable"))
    check_readable(source)
    alphabet, detected = resolve_alphabet(alphabet, [source])
    return SequenceBatch.from_records(read_records(source, alphabet, detected, map_unknown), alphabet)


def fetch_sequences(source, seq_ids, *, alphabet="auto", map_unknown: bool = False) -> SequenceBatch:
    """The sequences of some ``seq_id`` values, from a store, a FASTA/FASTQ file or memory.

    What a writer needs to show a hit's residues: only the records asked for are kept.

    Parameters
    ----------
    source : path, SequenceStore, SequenceBatch, dict or list of str
        A store (read with a filter on ``seq_id``), a FASTA/FASTQ file (read record by
        record, ``seq_id`` being the 0-based record number as :func:`ingest` numbers it,
        until every id asked for is found), or sequences as :func:`as_batch` takes them.
    seq_ids : array_like of int
        The ``seq_id`` values wanted.
    alphabet : {"auto", "protein", "dna"} or Alphabet, default "auto"
        As :func:`load_sequences`.
    map_unknown : bool, default False
        As :func:`load_sequences`.

    Returns
    -------
    SequenceBatch
        The records found, by ``seq_id``; an id not in ``source`` is left out (the caller
        checks what it got).

    Raises
    ------
    InputNotFoundError, SequenceFormatError, InvalidSequenceError, StoreError
        As :func:`load_sequences`.

    Examples
    --------
    >>> from importlib.resources import files
    >>> batch = fetch_sequences(files("swdask") / "data" / "demo_db.fasta.gz", [1999, 3])
    >>> batch.seq_id.tolist(), batch.names[0]
    ([3, 1999], 'sp|Q6GZW4|011R_FRG3G')
    """
    from .batch import as_batch  # batch.py imports this module lazily

    wanted = np.unique(np.asarray(seq_ids, dtype=np.int64))
    alphabet = check_alphabet(alphabet)
    if isinstance(source, SequenceStore) or (isinstance(source, (str, os.PathLike))
                                             and os.path.isdir(source)):
        store = source if isinstance(source, SequenceStore) else SequenceStore.open(source)
        store.check_alphabet(alphabet)
        filters = [("seq_id", "in", wanted.tolist())]
        parts = [read_part(path, None, filters) for path in store.files] if len(wanted) else []
        table = pa.concat_tables(parts) if parts else SEQUENCES.empty_table()
        batch = SequenceBatch.from_arrow(table, store.alphabet)
    elif isinstance(source, (str, os.PathLike)):
        check_readable(source)
        alphabet, detected = resolve_alphabet(alphabet, [source])
        keep, records, ids = set(wanted.tolist()), [], []
        records_read = read_records(source, alphabet, detected, map_unknown) if keep else ()
        for number, record in enumerate(records_read):
            if number in keep:
                records.append(record)
                ids.append(number)
                if len(ids) == len(keep):
                    break
        batch = SequenceBatch.from_records(records, alphabet, seq_ids=np.asarray(ids, np.int64))
    else:
        batch = as_batch(source, alphabet=alphabet, map_unknown=map_unknown)
        batch = batch.take(np.flatnonzero(np.isin(batch.seq_id, wanted)))
    return batch.take(np.argsort(batch.seq_id, kind="stable"))
