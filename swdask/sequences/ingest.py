"""Ingest: FASTA/FASTQ files read once into a sequence store (see :mod:`.store`), and
:func:`open_database`, which takes a store or ingests a file into a temporary one."""
from __future__ import annotations

import hashlib
import json
import logging
import numbers
import os
import shutil
import tempfile
from array import array
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import (
    EmptyInputError,
    InvalidSequenceError,
    SequenceFormatError,
    StoreError,
)
from ..jobs.base import OutputKind, atomic_dir, check_output, progress_bar, temporary_folder
from ..parquet_schemas import SEQUENCES, SEQUENCES_VERSION
from ..tables import numpy_of
from .alphabet import PROTEIN, Alphabet
from .batch import MAX_LIST_RESIDUES, SequenceBatch
from .fastx import check_alphabet, check_readable, iter_records, read_records, resolve_alphabet
from .store import METADATA_FILE, STORE_FORMAT, SequenceStore, metadata_checksum

__all__ = ["PARTITION_RESIDUES", "ROW_GROUP_RESIDUES", "SPILL_RESIDUES", "ingest", "open_database"]

logger = logging.getLogger(__name__)

#: Default residues per Parquet file (one Dask partition each).
PARTITION_RESIDUES = 16_777_216
#: Residues buffered in memory during ingest before they are spilled to disk.
SPILL_RESIDUES = 64 * 2**20
#: Residues per Parquet row group (so that ``length`` statistics prune within a file).
ROW_GROUP_RESIDUES = 2 * 2**20
_PROGRESS_EVERY = 4096


def _swdask_version() -> str:
    try:
        from importlib.metadata import version

        return version("swdask")
    except Exception:  # noqa: BLE001  # pragma: no cover - not installed
        return "unknown"


def _as_path_list(inputs) -> list:
    if isinstance(inputs, (str, bytes, os.PathLike)):
        inputs = [inputs]
    inputs = list(inputs)
    if not inputs:
        raise EmptyInputError("no input files given")
    return inputs


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
    lengths = numpy_of(table.column("length"))
    cum = np.cumsum(lengths, dtype=np.int64)
    # Page CRC32s: the reader verifies them (swdask.sequences.store.read_part).
    with pq.ParquetWriter(
        str(path), SEQUENCES, compression="zstd", write_statistics=["seq_id", "length"],
        write_page_checksum=True,
    ) as writer:
        start, done = 0, 0
        while start < len(lengths):
            end = max(int(np.searchsorted(cum, done + ROW_GROUP_RESIDUES, side="right")), start + 1)
            writer.write_table(table.slice(start, end - start), row_group_size=end - start)
            done = int(cum[end - 1])
            start = end
    seq_ids = numpy_of(table.column("seq_id"))
    return {
        "file": path.name,
        "n_records": len(lengths),
        "n_residues": int(cum[-1]),
        "min_length": int(lengths[0]),
        "max_length": int(lengths[-1]),
        "min_seq_id": int(seq_ids.min()),
        "max_seq_id": int(seq_ids.max()),
        "bytes": path.stat().st_size,
    }


def _is_store(path: Path) -> bool:
    return (path / METADATA_FILE).is_file()


#: What ``ingest --force`` may replace: a store (or an empty folder), never other folders.
STORE_OUTPUT = OutputKind("sequence store", folder=True, recognise=_is_store)


def ingest(
    inputs: str | os.PathLike | Iterable[str | os.PathLike],
    output: str | os.PathLike,
    *,
    alphabet: str | Alphabet = "auto",
    partition_residues: int = PARTITION_RESIDUES,
    map_unknown: bool = False,
    force: bool = False,
    progress: bool = False,
) -> SequenceStore:
    """Read FASTA/FASTQ files into a sequence store (a length-sorted Parquet dataset).

    Parameters
    ----------
    inputs : str, os.PathLike or iterable of them
        FASTA/FASTQ files, plain or gzip.  Records are numbered (``seq_id``) from 0 over
        all inputs in the order given.
    output : str or os.PathLike
        The store directory to create.
    alphabet : {"auto", "protein", "dna"} or Alphabet, default "auto"
        ``"auto"`` decides from the first 10,000 residues
        (:func:`swdask.sequences.fastx.sniff_alphabet`).
    partition_residues : int, default 16_777_216
        Residues per Parquet file (one Dask partition each).  A sequence longer than this
        gets a file of its own.
    map_unknown : bool, default False
        Read letters outside the alphabet as ``X``/``N`` instead of failing.
    force : bool, default False
        Replace ``output`` if it is an existing store or an empty folder (only once the
        new one is complete); anything else is never replaced.
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
        a store (never overwritten); or another run made it while this one worked.
    OutputError
        ``output`` is an input or inside one, or its folder is not writable (raised
        before any work).
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
    into place at the end (:func:`swdask.jobs.base.atomic_dir`); on any error it is
    removed, so no partial store is left.

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
    alphabet = check_alphabet(alphabet)
    if (
        isinstance(partition_residues, bool)
        or not isinstance(partition_residues, numbers.Integral)
        or not 0 < partition_residues <= MAX_LIST_RESIDUES
    ):
        raise StoreError(
            f"partition_residues must be a positive integer up to {MAX_LIST_RESIDUES}, "
            f"got {partition_residues!r}"
        )
    partition_residues = int(partition_residues)
    paths = _as_path_list(inputs)
    output = check_output(output, force=force, kind=STORE_OUTPUT, inputs=paths)
    for path in paths:
        check_readable(path)

    alphabet, detected = resolve_alphabet(alphabet, paths)

    # Pass 1: validate every record, keep lengths and checksums.
    lengths = array("q")
    input_info = []
    per_input = []
    with progress_bar(progress, desc="ingest: checking", unit=" records",
                      dynamic_ncols=True) as bar:
        for path in paths:
            count = 0
            for _, _, codes in read_records(path, alphabet, detected, map_unknown):
                lengths.append(len(codes))
                count += 1
                if count % _PROGRESS_EVERY == 0:
                    bar.update(_PROGRESS_EVERY)
            bar.update(count % _PROGRESS_EVERY)
            size, digest = _sha256(path)
            input_info.append({"path": os.path.abspath(path), "size": size, "sha256": digest})
            per_input.append(count)
    lengths = np.frombuffer(lengths, dtype=np.int64)
    if lengths.max() > MAX_LIST_RESIDUES:
        raise InvalidSequenceError("a sequence is longer than 2**31 - 1 residues, which a store cannot hold")

    order, bounds = _plan_partitions(lengths, partition_residues)
    partition_of = np.empty(len(lengths), dtype=np.int64)
    for p in range(len(bounds) - 1):
        partition_of[order[bounds[p]: bounds[p + 1]]] = p

    with atomic_dir(output, force=force, kind=STORE_OUTPUT) as tmp:
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
            "alphabet_letters": alphabet.letters,
            "n_records": len(lengths),
            "n_residues": int(lengths.sum()),
            "min_length": int(lengths.min()),
            "max_length": int(lengths.max()),
            "partition_residues": partition_residues,
            "inputs": input_info,
            "partitions": partitions,
        }
        metadata["checksum"] = metadata_checksum(metadata)
        (tmp / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    logger.info("ingest: %s %s records (%s residues) into %s: %d files", f"{len(lengths):,}",
                alphabet.name, f"{int(lengths.sum()):,}", output, len(partitions))
    return SequenceStore(output)


def open_database(source: str | os.PathLike, *, alphabet: str | Alphabet = "auto",
                  map_unknown: bool = False,
                  tmpdir: str | os.PathLike | None = None) -> SequenceStore:
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
    alphabet = check_alphabet(alphabet)
    if os.path.isdir(source):
        store = SequenceStore.open(source)
        store.check_alphabet(alphabet)
    else:
        check_readable(source)
        # Named so that the next run reclaims it if this process is killed.
        directory = temporary_folder(Path(tmpdir or tempfile.gettempdir()) / "swdask-db")
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
