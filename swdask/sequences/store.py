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

Validation
----------
A store is read by code that trusts nothing in it; every check is here, and a failure is a
:class:`StoreError` naming the file and what is wrong.

- Opening a store checks its metadata once: the fields and their types, the SHA-256 of
  the metadata itself (``checksum``; an edited alphabet, count or partition list is
  caught), the partition counts against the totals, the length order of the partitions,
  the alphabet's letters (``alphabet_letters``, versioned: a store lists the letters its
  codes index, and they must be a prefix of this swdask's alphabet), and every partition
  path: a plain file name inside the store, no ``..``, no absolute path, no symlink that
  leads out.
- Every read of a part file (:func:`read_part`, the one reader of part files) checks the
  file against its partition's metadata before decoding it (size, row count, the
  ``seq_id`` and ``length`` ranges of its Parquet statistics: a partition copied over
  another is caught here), Parquet's page CRC32s while decoding (written at ingest; a
  flipped byte is caught), and then what it decoded: the residue codes against the
  alphabet (one vectorised maximum), the list lengths against ``length``, the length
  order, the ``seq_id`` range and, for a whole file, the residue count.  On a
  100,000-sequence store this costs about 1% of reading it (docs/reliability.md#inputs),
  and no out-of-range code ever reaches a kernel.

Stores written before these fields existed (no ``checksum``, ``alphabet_letters``,
``bytes`` or ``seq_id`` ranges) are read with the checks their metadata allows.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InvalidSequenceError, StoreError
from ..parquet_schemas import SEQUENCES, SEQUENCES_VERSION
from ..tables import check_schema, check_table, numpy_of, to_pandas
from .alphabet import DNA, PROTEIN_V1, Alphabet, get_alphabet
from .batch import SequenceBatch, list_arrays
from .fastx import check_alphabet, check_readable, read_records, resolve_alphabet

if TYPE_CHECKING:
    import dask.dataframe as dd

    from .batch import SequencesLike

__all__ = ["METADATA_FILE", "STORE_FORMAT", "SequenceStore", "fetch_sequences", "load_sequences",
           "metadata_checksum", "read_part", "row_group_sizes"]

STORE_FORMAT = "swdask-store"
METADATA_FILE = "swdask_store.json"
#: The letters whose codes a store without ``alphabet_letters`` holds (written before the
#: protein alphabet gained U, O and J).
V1_LETTERS = {"protein": PROTEIN_V1, "dna": DNA.letters}
_PARTITION_INTS = ("n_records", "n_residues", "min_length", "max_length")


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

    def __init__(self, path: str | os.PathLike) -> None:
        self._path = Path(path)
        self._metadata = _store_metadata(self._path)
        self.temporary = False

    @classmethod
    def open(cls, path: str | os.PathLike) -> SequenceStore:
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

    def to_dask(self, columns: Sequence[str] | None = None,
                filters: list[tuple[str, str, Any]] | None = None) -> dd.DataFrame:
        """The store as a lazy Dask DataFrame, one partition per Parquet file.

        Parameters
        ----------
        columns : sequence of str, optional
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
            try:
                dataset = ds.dataset(files, schema=SEQUENCES, format="parquet")
                kept = {
                    fragment.path
                    for fragment in dataset.get_fragments()
                    if fragment.split_by_row_group(expression, schema=SEQUENCES)
                }
            except (OSError, pa.ArrowException) as exc:
                raise StoreError(f"{self._path}: cannot read the partitions' statistics: "
                                 f"{exc}") from None
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
            The file is missing, unreadable or damaged (see :func:`read_part`).
        """
        partitions = self._metadata["partitions"]
        i = range(len(partitions))[i]
        return SequenceBatch.from_arrow(read_part(self._path / partitions[i]["file"]),
                                        self.alphabet)

    def iter_partitions(self, *, read_ahead: bool = False) -> Iterator[SequenceBatch]:
        """Yield a :class:`SequenceBatch` per Parquet file, shortest sequences first.

        With ``read_ahead=True`` the first file is read on a thread from this call on,
        and each next one while the caller works on the one before (Parquet decoding
        releases the GIL): a GPU search hides its reads so (0.3 s of 2.9 s for 102 M
        residues on an H100 host), the first one behind the GPU's start.  Closing the
        iterator, or dropping it unread, leaves no thread behind.
        """
        count = len(self._metadata["partitions"])
        if not read_ahead or count < 2:
            return (self.read_partition(i) for i in range(count))
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(1, thread_name_prefix="swdask-read")
        # Dropped unread, the generator and with it the pool are freed: its thread ends.
        return self._read_ahead(pool, pool.submit(self.read_partition, 0), count)

    def _read_ahead(self, pool, pending, count: int) -> Iterator[SequenceBatch]:
        with pool:
            for i in range(1, count + 1):
                batch = pending.result()
                if i < count:
                    pending = pool.submit(self.read_partition, i)
                yield batch

    def read_all(self) -> SequenceBatch:
        """Every sequence of the store in one batch, in store order (by length)."""
        return SequenceBatch.concat(self.iter_partitions(), alphabet=self.alphabet)

    def check_alphabet(self, alphabet: Alphabet | Literal["auto"]) -> None:
        """Raise :class:`StoreError` unless ``alphabet`` is ``"auto"`` or the store's
        (an :class:`Alphabet`, see :func:`swdask.sequences.fastx.check_alphabet`)."""
        if alphabet != "auto" and alphabet.name != self.alphabet.name:
            raise StoreError(
                f"{self.path}: the store holds {self.alphabet.name} sequences, not {alphabet.name}"
            )


def read_part(path: str | os.PathLike, columns: list[str] | None = None,
              filters: list[tuple[str, str, Any]] | None = None, *,
              row_groups: list[int] | None = None) -> pa.Table:
    """One part file of a store as an Arrow table of ``columns`` (default: all), checked.

    The one reader of part files: the file is checked against its partition's entry in
    the store's metadata before it is decoded, and what was decoded is checked after
    (module docstring, *Validation*), so that no damaged or foreign file reaches a kernel.
    The file's own schema is checked first, so that a damaged or foreign file raises a
    :class:`SchemaError` naming the file and the column instead of being cast or padded
    with nulls.

    Parameters
    ----------
    path : str or os.PathLike
        A part file of a store (the store is the folder holding it).
    columns : list of str, optional
        Columns of ``SEQUENCES`` to read (default: all).
    filters : list of tuples, optional
        pyarrow filters in DNF; they select rows as they are read.
    row_groups : list of int, optional
        Read only these row groups (in this order).

    Returns
    -------
    pyarrow.Table

    Raises
    ------
    StoreError
        The file cannot be read, is not a partition of its store, or disagrees with the
        store's metadata or alphabet; the message names the file and what is wrong.
    SchemaError
        A column is missing or of another type.
    """
    path = Path(path)
    metadata = _store_metadata(path.parent)
    entry = next((p for p in metadata["partitions"] if p["file"] == path.name), None)
    if entry is None:
        raise StoreError(f"{path}: not a partition of the store {path.parent}")
    wanted = SEQUENCES if columns is None else pa.schema([SEQUENCES.field(c) for c in columns])
    try:
        parquet = pq.ParquetFile(path, page_checksum_verification=True)
        check_schema(parquet.schema_arrow, wanted, where=str(path))
        _check_footer(path, parquet.metadata, entry)
        if row_groups is not None:
            table = parquet.read_row_groups(row_groups, columns=columns, use_threads=False)
        elif filters is None:
            table = _read_row_groups_in_parallel(path, parquet, columns)
        else:
            table = pq.read_table(path, columns=columns, filters=filters, schema=SEQUENCES,
                                  page_checksum_verification=True)
    except (OSError, pa.ArrowException) as exc:
        raise StoreError(f"{path}: cannot read partition: {exc}") from None
    table = check_table(table, wanted, where=str(path))
    _check_rows(path, table, entry, len(metadata["alphabet_letters"]),
                whole=filters is None and row_groups is None)
    return table


def _read_row_groups_in_parallel(path: Path, parquet: pq.ParquetFile,
                                 columns: list[str] | None) -> pa.Table:
    """A whole part file, its row groups decoded on threads (one reader each).

    Not ``pq.read_table``, which decodes row groups in parallel too, but through
    ``pyarrow.dataset``, whose import imports pandas: 0.3-0.7 s of the GIL while a GPU
    search's first read overlaps the GPU's start.  Not ``ParquetFile.read``, whose threads
    split the columns, not the rows: 0.16-0.24 s for a 16.8 M-residue partition during a
    search on the 16-core H100 host, 0.05-0.09 s so (2026-11-27).
    """
    groups = parquet.metadata.num_row_groups
    if groups < 2:
        return parquet.read(columns=columns, use_threads=True)

    def read(group: int) -> pa.Table:
        own = pq.ParquetFile(path, page_checksum_verification=True)
        return own.read_row_group(group, columns=columns, use_threads=False)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(groups, os.cpu_count() or 1),
                            thread_name_prefix="swdask-decode") as pool:
        return pa.concat_tables(pool.map(read, range(groups)))


def row_group_sizes(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """The rows and the residues of each row group of a part file (int64 arrays, in
    file order), from its ``length`` column (read and checked by :func:`read_part`).

    Raises
    ------
    StoreError
        As :func:`read_part`.
    """
    lengths = numpy_of(read_part(path, ["length"]).column("length")).astype(np.int64)
    try:
        footer = pq.ParquetFile(path).metadata
    except (OSError, pa.ArrowException) as exc:
        raise StoreError(f"{path}: cannot read partition: {exc}") from None
    rows = np.array([footer.row_group(g).num_rows for g in range(footer.num_row_groups)],
                    dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(rows)])
    residues = np.concatenate([[0], np.cumsum(lengths)])
    return rows, residues[bounds[1:]] - residues[bounds[:-1]]


def _check_footer(path: Path, footer, entry: dict) -> None:
    """The part file's size, row count and Parquet statistics against its metadata entry."""
    if "bytes" in entry and path.stat().st_size != entry["bytes"]:
        raise _damaged(path, f"{path.stat().st_size:,} bytes, the metadata says {entry['bytes']:,}")
    if footer.num_rows != entry["n_records"]:
        raise _damaged(path, f"{footer.num_rows:,} records, the metadata says "
                       f"{entry['n_records']:,}")
    names = footer.schema.to_arrow_schema().names
    ranges = {"length": (entry["min_length"], entry["max_length"]),
              "seq_id": (entry.get("min_seq_id"), entry.get("max_seq_id"))}
    for name, (low, high) in ranges.items():
        if low is None or name not in names:
            continue
        column = names.index(name)
        for g in range(footer.num_row_groups):
            stats = footer.row_group(g).column(column).statistics
            if stats is not None and stats.has_min_max and not low <= stats.min <= stats.max <= high:
                raise _damaged(path, f"{name} {stats.min}..{stats.max} in row group {g}, outside "
                               f"the partition's {low}..{high} (a partition copied over another?)")


def _check_rows(path: Path, table: pa.Table, entry: dict, n_codes: int, whole: bool) -> None:
    """What was decoded: codes in the alphabet, lengths that match the residues and are
    sorted, ``seq_id`` and ``length`` in the partition's ranges; whole files exactly."""
    names = table.column_names
    lengths = numpy_of(table.column("length")) if "length" in names else None
    if lengths is not None and len(lengths):
        low, high = entry["min_length"], entry["max_length"]
        if whole and (lengths[0] != low or lengths[-1] != high) or lengths.min() < low \
                or lengths.max() > high:
            raise _damaged(path, f"lengths {lengths.min()}..{lengths.max()}, the metadata says "
                           f"{low}..{high}")
        if whole and (lengths[1:] < lengths[:-1]).any():
            raise _damaged(path, "records are not sorted by length")
    if "seq_id" in names and table.num_rows:
        ids = numpy_of(table.column("seq_id"))
        low, high = entry.get("min_seq_id", 0), entry.get("max_seq_id", None)
        if ids.min() < low or (high is not None and ids.max() > high):
            raise _damaged(path, f"seq_id {ids.min()}..{ids.max()} outside the partition's "
                           f"{low}..{high} (a partition copied over another?)")
    if "residues" not in names:
        return
    offsets, codes = list_arrays(table.column("residues"))
    if lengths is not None and not np.array_equal(np.diff(offsets), lengths):
        row = int(np.flatnonzero(np.diff(offsets) != lengths)[0])
        raise _damaged(path, f"row {row} holds {int(offsets[row + 1] - offsets[row])} residues "
                       f"but its length is {int(lengths[row])}")
    if whole and len(codes) != entry["n_residues"]:
        raise _damaged(path, f"{len(codes):,} residues, the metadata says "
                       f"{entry['n_residues']:,}")
    if len(codes) and int(codes.max()) >= n_codes:
        at = int(np.flatnonzero(codes >= n_codes)[0])
        row = int(np.searchsorted(offsets, at, side="right") - 1)
        raise _damaged(path, f"row {row}, position {at - int(offsets[row]) + 1}: residue code "
                       f"{int(codes[at])} is outside the alphabet (codes 0-{n_codes - 1})")


def _damaged(path: Path, what: str) -> StoreError:
    return StoreError(f"{path}: damaged store partition: {what}; re-create the store with ingest")


def _read_part_frame(path, filters=None, columns=None):
    """One part file as a pandas DataFrame (the task of :meth:`SequenceStore.to_dask`)."""
    return to_pandas(read_part(path, columns, filters))


def metadata_checksum(metadata: dict) -> str:
    """The SHA-256 of a store's metadata, ``checksum`` left out (what ingest writes in it).

    Examples
    --------
    >>> metadata_checksum({"format": "swdask-store"}) == metadata_checksum(
    ...     {"format": "swdask-store", "checksum": "anything"})
    True
    """
    body = {k: v for k, v in metadata.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def _store_metadata(path: Path) -> dict:
    """The checked metadata of the store at ``path``, read once per version of the file
    (a part file's reader asks for it every time)."""
    meta_path = path / METADATA_FILE
    try:
        stat = meta_path.stat()
    except OSError:
        return _read_metadata(path)  # raises the right error
    return _cached_metadata(str(path), stat.st_mtime_ns, stat.st_size, stat.st_ino)


@functools.lru_cache(maxsize=16)
def _cached_metadata(path: str, mtime_ns: int, size: int, inode: int) -> dict:
    return _read_metadata(Path(path))


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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
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
    if "checksum" in metadata and metadata["checksum"] != metadata_checksum(metadata):
        raise StoreError(f"{meta_path}: the metadata does not match its checksum (edited or "
                         "damaged); re-create the store with ingest")
    _check_alphabet(meta_path, metadata)
    _check_partitions(path, meta_path, metadata)
    return metadata


def _check_alphabet(meta_path: Path, metadata: dict) -> None:
    """The alphabet is known and its letters (``alphabet_letters``) a prefix of ours."""
    try:
        alphabet = get_alphabet(metadata["alphabet"])
    except (InvalidSequenceError, TypeError):
        raise StoreError(f"{meta_path}: unknown alphabet {metadata['alphabet']!r}") from None
    letters = metadata.setdefault("alphabet_letters", V1_LETTERS[alphabet.name])
    if not isinstance(letters, str) or not letters or not alphabet.letters.startswith(letters):
        raise StoreError(f"{meta_path}: the store's {alphabet.name} letters {letters!r} are not "
                         f"this swdask's ({alphabet.letters}); re-create the store with ingest")


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_partitions(path: Path, meta_path: Path, metadata: dict) -> None:
    """Counts, types, order and files of the partitions, against the totals and the store."""
    parts, n_records, n_residues = (metadata[k] for k in ("partitions", "n_records", "n_residues"))
    if not (_whole(n_records) and _whole(n_residues) and isinstance(parts, list)):
        raise StoreError(f"{meta_path}: damaged store metadata: n_records, n_residues and "
                         "partitions must be counts and a list")
    root = path.resolve()
    previous = None
    for k, part in enumerate(parts):
        where = f"{meta_path}: partition {k}"
        if not isinstance(part, dict) or not isinstance(part.get("file"), str):
            raise StoreError(f"{where}: damaged store metadata: not an entry with a file name")
        name = part["file"]
        if any(not _whole(part.get(key)) for key in _PARTITION_INTS) or any(
                key in part and not _whole(part[key]) for key in ("bytes", "min_seq_id", "max_seq_id")):
            raise StoreError(f"{where} ({name!r}): damaged store metadata: counts must be "
                             "whole numbers")
        if not 1 <= part["min_length"] <= part["max_length"] or part["n_records"] < 1:
            raise StoreError(f"{where} ({name!r}): damaged store metadata: empty partition or "
                             f"lengths {part['min_length']}..{part['max_length']}")
        if previous is not None and part["min_length"] < previous["max_length"]:
            raise StoreError(f"{where} ({name!r}): damaged store metadata: partitions are not in "
                             "length order")
        if (name in ("", ".", "..") or "/" in name or "\\" in name or "\x00" in name
                or os.path.isabs(name)):
            raise StoreError(f"{where}: partition path {name!r} is not a file name inside the "
                             "store; refusing to read it")
        file = path / name
        if file.resolve().parent != root:
            raise StoreError(f"{where}: partition path {name!r} leads outside the store (a "
                             "symlink?); refusing to read it")
        if not file.is_file():
            raise StoreError(f"{path}: damaged store: {name} is missing")
        previous = part
    for key, total in (("n_records", n_records), ("n_residues", n_residues)):
        counted = sum(part[key] for part in parts)
        if counted != total:
            raise StoreError(f"{meta_path}: damaged store metadata: the partitions hold "
                             f"{counted:,} {key[2:]}, the store says {total:,}")
    if len({part["file"] for part in parts}) != len(parts):
        raise StoreError(f"{meta_path}: damaged store metadata: a partition file is listed twice")


def load_sequences(source: str | os.PathLike, *, alphabet: str | Alphabet = "auto",
                   map_unknown: bool = False) -> SequenceBatch:
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


def fetch_sequences(source: SequenceStore | SequencesLike, seq_ids: Sequence[int] | np.ndarray,
                    *, alphabet: str | Alphabet = "auto",
                    map_unknown: bool = False) -> SequenceBatch:
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
