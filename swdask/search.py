"""Database search: score every pair, keep each query's best hits, trace back only those.

Two engines run the same three steps and give the same hits table:

- :func:`search` builds a lazy Dask DataFrame: one score task per store partition, a tree
  of merges to each query's best candidates, and traceback tasks per batch of queries.
  It runs wherever Dask computes it: Dask's threads in this process, a
  ``LocalCUDACluster`` or ``LocalCluster`` (:func:`swdask.cluster`), or a multi-node
  cluster.
- :func:`search_in_process` runs the steps in this process, partition after partition,
  without Dask, and returns a pandas DataFrame.  It is the reference that the Dask flow
  is checked against, and what the CPU benchmark times.

The Dask graph of :func:`search`::

    SequenceStore.to_dask()                one partition per Parquet file (length-sorted)
      .map_partitions(score, meta=SCORES)  score table: each query's best candidates of the
                                           partition (score kernel on the CPU or the GPU)
      -> merge tree (MERGE_FAN_IN)         each query's max_hits best over all partitions
      -> split by query batch              TRACEBACK_QUERIES queries each
      -> traceback tasks                   read the candidates' residues from the store
                                           (a filtered Parquet read: the join), align,
                                           E-values, rank
      -> dd.from_delayed(meta=HITS)        the hits table, one partition per query batch

Only the score tasks touch the whole database, one partition at a time; everything after
them holds at most ``max_hits`` candidates per query, so memory is bounded by a partition
per running task whatever the database's size.
"""
from __future__ import annotations

import numbers
import os
import shutil
import sys
import time
import uuid
import weakref
from dataclasses import dataclass

import numba
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import backend
from .align import alignment_from_codes, check_mode
from .alphabet import get_alphabet
from .errors import EmptyInputError, InvalidSequenceError, StoreError
from .kernels.cpu.score import kernel_threads, load_kernel, score_all
from .options import DEVICES
from .parquet_schemas import HITS, SCORES, SEQUENCES
from .scoring import Scoring
from .store import SequenceBatch, SequenceStore, load_sequences, open_database
from .tables import check_table, to_pandas

__all__ = ["DEVICES", "SearchStats", "as_queries", "search", "search_in_process"]

#: Bound on the score tables (scores and both ends, int32) held at once for one partition.
SCORE_TABLE_BYTES = 256 * 2**20
#: Score tables merged by one task of the merge tree.
MERGE_FAN_IN = 8
#: Queries per traceback task (and per partition of the hits DataFrame).
TRACEBACK_QUERIES = 64
#: Threads that decode a traceback task's row groups (at most one per core).
_READ_THREADS = 8

_SUBJECT_COLUMNS = ("seq_id", "length", "residues")
_SUBJECTS = pa.schema([SEQUENCES.field(name) for name in _SUBJECT_COLUMNS])
_FETCHED = pa.schema([SEQUENCES.field(name) for name in ("seq_id", "name", "length", "residues")])
_HIT_COLUMNS = ("query", "subject", "score", "identity", "align_length", "mismatches",
                "gap_opens", "query_start", "query_end", "subject_start", "subject_end", "cigar",
                "query_length", "subject_length", "query_id", "subject_id", "rank")


@dataclass(frozen=True)
class SearchStats:
    """What a search did: work, time and speed (cells = query length x subject length).

    For :func:`search_in_process`, ``score_seconds`` and ``traceback_seconds`` are wall
    time in this process and ``workers`` is Numba's thread count.  ``score_seconds``
    leaves out loading (or compiling) the score kernel, once per process.  For :func:`search`
    they are summed over the tasks (busy time, so ``kernel_gcups`` is the speed of one
    worker's kernel), ``total_seconds`` runs from the first task's start to the last
    one's end, ``workers`` counts the processes that ran score tasks and ``device`` names
    every device they used (``"cpu"``, ``"gpu"`` or ``"cpu+gpu"``).
    """

    n_queries: int
    n_subjects: int
    cells: int
    score_seconds: float
    traceback_seconds: float
    total_seconds: float
    n_hits: int
    workers: int
    device: str = "cpu"
    #: Why ``device="auto"`` chose the device (empty when the device was given).
    device_reason: str = ""

    @property
    def kernel_gcups(self) -> float:
        """Billions of cells per second of the score pass."""
        return self.cells / self.score_seconds / 1e9 if self.score_seconds else 0.0

    @property
    def gcups(self) -> float:
        """Billions of cells per second, end to end (reading, scoring, traceback)."""
        return self.cells / self.total_seconds / 1e9 if self.total_seconds else 0.0


def as_queries(queries, alphabet="auto", map_unknown=False) -> SequenceBatch:
    """Queries as a batch: a FASTA/FASTQ path or store, a SequenceBatch, a dict of
    name -> sequence, or a list of sequences (named ``query_1``, ``query_2``, ...)."""
    if isinstance(queries, SequenceBatch):
        return queries
    if isinstance(queries, (str, os.PathLike)):
        return load_sequences(queries, alphabet=alphabet, map_unknown=map_unknown)
    if isinstance(queries, dict):
        items = list(queries.items())
    else:
        items = [(f"query_{k + 1}", seq) for k, seq in enumerate(queries)]
    if not items:
        raise EmptyInputError("no queries")
    if alphabet == "auto":
        from .alphabet import detect_alphabet

        alphabet = detect_alphabet("".join(seq for _, seq in items)[:10000].encode("ascii", "replace"))
    alphabet = get_alphabet(alphabet)
    records = []
    for name, seq in items:
        codes = alphabet.encode(seq, map_unknown=map_unknown, where=f"query {name!r}")
        if codes.size == 0:
            raise InvalidSequenceError(f"query {name!r}: empty sequence")
        records.append((str(name), "", codes))
    return SequenceBatch.from_records(records, alphabet)


# --------------------------------------------------------------------------------------
# the Dask flow
# --------------------------------------------------------------------------------------


def search(queries, database, *, scoring: Scoring | None = None, mode: str = "local",
           max_hits: int = 50, min_score: int | None = None, evalue: float | None = None,
           device: str = "auto", alphabet="auto", map_unknown: bool = False,
           return_stats: bool = False):
    """Search queries against a database: a lazy Dask DataFrame of the best hits.

    Exact scores of every (query, subject) pair, each query's ``max_hits`` best subjects,
    and their full alignments.  Nothing is computed until the result is: ``.compute()``
    on Dask's threads or the current ``distributed`` client (:func:`swdask.cluster`),
    ``client.compute(...)``, ``.to_parquet(...)``; the arguments are checked at once.

    Parameters
    ----------
    queries : path, SequenceBatch, dict or list of str
        A FASTA/FASTQ file or sequence store, a batch, ``{name: sequence}``, or sequences.
        Held in memory and shipped once to every worker.
    database : path or SequenceStore
        A sequence store (see :func:`swdask.ingest`), or a FASTA/FASTQ file, which is
        ingested into a temporary store at once (removed when the last object that can
        compute the result is gone).  Every worker reads the store's files by path: on a
        multi-node cluster give a store on a shared file system.
    scoring : Scoring, optional
        Default: BLAST's default for the database's alphabet (BLOSUM62 11/1, DNA 2/-3 5/2).
    mode : {"local", "global", "semiglobal"}, default "local"
    max_hits : int, default 50
        Hits kept per query: the highest scores, ties broken by database order
        (``subject_id``).
    min_score : int, optional
        Report only hits scoring at least this.  Default: 1 for local mode (a score of
        0 is no alignment), none otherwise.
    evalue : float, optional
        Drop hits whose E-value is above this (local mode, with a scoring BLAST publishes
        statistics for).  Applied to each query's ``max_hits`` best by score, before their
        traceback; ranks count the hits kept.  Default: keep all.
    device : {"auto", "cpu", "gpu"}, default "auto"
        Where score tasks run their kernel.  ``"auto"``: each task takes a GPU when its
        worker has one (local mode), else the CPU; ``"gpu"``: the CUDA kernel, which needs
        a GPU on every worker that gets a score task (see :func:`swdask.gpu_resources`
        for clusters of GPU and CPU workers) or, with no ``distributed`` client, in this
        process (``NUMBA_ENABLE_CUDASIM=1`` counts); ``"cpu"``: the CPU kernel.  Scores,
        ends and alignments are identical on every device.
    alphabet : {"auto", "protein", "dna"}, default "auto"
        Alphabet of the query and database files; "auto" detects each from its first
        records, and queries and database must then agree.
    map_unknown : bool, default False
        Read letters outside the alphabet as ``X``/``N`` instead of failing.
    return_stats : bool, default False
        Also return a lazy :class:`SearchStats` (a Dask scalar); compute it with the hits
        (``dask.compute(hits, stats)``) so that the search runs once.

    Returns
    -------
    dask.dataframe.DataFrame
        The hits table (columns and dtypes of ``swdask.parquet_schemas.HITS``), one
        partition per ``TRACEBACK_QUERIES`` (64) queries: queries in input order, hits by
        rank, a RangeIndex in each partition.  ``evalue`` and ``bitscore`` follow NCBI
        BLAST+ (:mod:`swdask.statistics`) in local mode and are null otherwise.
    dask.dataframe.Scalar
        Only with ``return_stats=True``: computes to a :class:`SearchStats`.

    Raises
    ------
    ValueError
        Bad ``mode``, ``device``, ``max_hits``, ``min_score`` or ``evalue``; the
        queries, database and scoring are of different alphabets; or two queries share
        a ``seq_id``.
    DeviceError
        ``device="gpu"`` with a mode other than local, or without a GPU in this process
        (no client) or on any worker of the current client.
    EmptyInputError, InvalidSequenceError, SequenceFormatError, InputNotFoundError
        Bad input files (see :func:`swdask.ingest`).
    SchemaError
        When computed: a store partition lacks a column or has one of another type (the
        message names the file and the column).

    Warns
    -----
    UserWarning
        Local mode with a scoring that BLAST publishes no statistics for: ``evalue`` and
        ``bitscore`` stay null.

    See Also
    --------
    search_in_process : the same search in this process, without Dask.
    swdask.cluster : a Dask client for a GPU or CPU cluster, or a running scheduler.

    Notes
    -----
    The score pass computes every cell of every pair (Smith-Waterman or
    Needleman-Wunsch with affine gaps, a gap of k costing ``gap_open + k * gap_extend``),
    but a score task returns only its partition's candidates: per query, the ``max_hits``
    best subjects scoring at least ``min_score`` (schema ``SCORES``).  Because
    ``(score desc, subject_id asc)`` is a total order, each query's overall best are
    among its partition bests, and the merge tree keeps exactly those of
    :func:`search_in_process`.  Traceback, the only step that stores a DP matrix, runs
    for the final candidates only.

    Examples
    --------
    >>> from importlib.resources import files
    >>> data = files("swdask") / "data"
    >>> hits = search(data / "demo_queries.fasta", data / "demo_db.fasta.gz", max_hits=2)
    >>> hits.npartitions, list(hits.columns[:4])
    (1, ['query', 'subject', 'score', 'evalue'])
    >>> table = hits.compute()
    >>> print(table[["query", "subject", "score", "evalue", "rank"]].head(2).to_string(index=False))
                  query               subject  score   evalue  rank
    sp|Q91G65|032R_IIV6   sp|Q91G65|032R_IIV6    532      0.0     1
    sp|Q91G65|032R_IIV6 sp|Q55DQ2|ABCGB_DICDI     49 2.416093     2
    """
    import dask
    import dask.dataframe as dd

    check_mode(mode)
    device = backend.job_device(device, mode, client=backend.current_client())
    _check_limits(max_hits, min_score, evalue)
    job = _prepare(queries, database, scoring=scoring, mode=mode, max_hits=int(max_hits),
                   min_score=min_score, evalue=evalue, device=device, alphabet=alphabet,
                   map_unknown=map_unknown, owner="dask")
    token = uuid.uuid4().hex
    job_node = dask.delayed(job, name=f"swdask-search-{token}")
    store = SequenceStore.open(job.store_path)
    scores = store.to_dask(columns=list(_SUBJECT_COLUMNS)).map_partitions(
        _score_partition, job_node, meta=_SCORES_META, token=f"swdask_score_{device}")
    level = scores.to_delayed()
    merge = dask.delayed(_merge_candidates, pure=True)
    while True:
        level = [merge(job_node, *level[k:k + MERGE_FAN_IN])
                 for k in range(0, len(level), MERGE_FAN_IN)]
        if len(level) == 1:
            break
    candidates = level[0]
    n_batches = job.n_batches
    batches = dask.delayed(_split_candidates, nout=n_batches, pure=True)(job_node, candidates)
    traceback = dask.delayed(_traceback_batch, pure=True)
    parts = [traceback(job_node, batches[b], b) for b in range(n_batches)]
    hits = dd.from_delayed(parts, meta=_HITS_META, prefix=f"swdask-hits-{token[:8]}")
    if not return_stats:
        return hits
    stats = hits.reduction(_task_info, aggregate=_search_stats, meta=object, split_every=False,
                           token="swdask-stats", aggregate_kwargs={
                               "n_queries": len(job.queries), "n_subjects": job.db_sequences,
                               "cells": int(job.queries.lengths.sum()) * job.db_residues})
    return hits, stats


@dataclass(frozen=True)
class _Search:
    """Everything the tasks of one search need: small, immutable, picklable."""

    queries: SequenceBatch
    scoring: Scoring
    mode: str
    max_hits: int
    min_score: int | None
    evalue: float | None
    device: str  # decided on the client: "cpu", "gpu", or "auto" (each worker's GPU)
    store_path: str
    files: tuple
    db_residues: int
    db_sequences: int
    statistics: bool  # local mode with published Karlin-Altschul parameters
    batch_size: int  # queries per traceback task (TRACEBACK_QUERIES when the graph was built)
    keep: object = None  # a temporary store's _TemporaryStore (a plain path once pickled)

    @property
    def n_batches(self) -> int:
        return -(-len(self.queries) // self.batch_size)

    def positions(self, query_ids) -> np.ndarray:
        """Positions in :attr:`queries` of queries given by ``seq_id``."""
        ids = self.queries.seq_id
        order = np.argsort(ids, kind="stable")
        return order[np.searchsorted(ids, np.asarray(query_ids), sorter=order)]


class _TemporaryStore:
    """Removes a temporary store once nothing refers to it (at exit at the latest).

    A pickled copy (what a worker gets) is the path alone, so only the client's object
    ever removes the store.
    """

    def __init__(self, path):
        self.path = str(path)
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.path, True)

    def __reduce__(self):
        return (str, (self.path,))


def _check_limits(max_hits, min_score, evalue) -> None:
    if isinstance(max_hits, bool) or not isinstance(max_hits, (int, np.integer)) or max_hits < 1:
        raise ValueError(f"max_hits must be a positive whole number, got {max_hits!r}")
    if min_score is not None and (isinstance(min_score, bool)
                                  or not isinstance(min_score, (int, np.integer))):
        raise ValueError(f"min_score must be a whole number, got {min_score!r}")
    if evalue is not None and (isinstance(evalue, bool) or not isinstance(evalue, numbers.Real)
                               or not evalue > 0):
        raise ValueError(f"evalue must be a positive number, got {evalue!r}")


def _prepare(queries, database, *, scoring, mode, max_hits, min_score, evalue, device,
             alphabet, map_unknown, owner) -> _Search:
    """Open the database and the queries and check that they go together.

    A FASTA database is ingested into a temporary store; with ``owner="dask"`` the
    search's :class:`_TemporaryStore` removes it later, otherwise the caller must
    (``store_path`` of the result; ``keep`` is then True).
    """
    from .statistics import annotate, karlin_altschul

    store = database if isinstance(database, SequenceStore) else None
    if store is None:
        db_alphabet = scoring.alphabet if scoring is not None and alphabet == "auto" else alphabet
        store = open_database(database, alphabet=db_alphabet, map_unknown=map_unknown)
    temporary = getattr(store, "temporary", False) and store is not database
    try:
        if store.n_records == 0:
            raise EmptyInputError(f"{store.path}: empty database")
        db_alphabet = store.alphabet
        scoring = scoring or Scoring.default(db_alphabet.name)
        if scoring.alphabet is not db_alphabet:
            raise InvalidSequenceError(f"the database is {db_alphabet.name} but the scoring "
                                       f"is for {scoring.alphabet.name}")
        batch = as_queries(queries, alphabet=alphabet, map_unknown=map_unknown)
        if batch.alphabet is not db_alphabet:
            how = " (detected)" if alphabet == "auto" else ""
            raise InvalidSequenceError(
                f"the queries are {batch.alphabet.name}{how} but the database is "
                f"{db_alphabet.name}; to read them as {db_alphabet.name}, pass "
                f"alphabet={db_alphabet.name!r} (--alphabet {db_alphabet.name})")
        if len(np.unique(batch.seq_id)) != len(batch):
            raise ValueError("queries: two queries have the same seq_id")
        if min_score is None and mode == "local":
            min_score = 1
        statistics = mode == "local" and karlin_altschul(scoring) is not None
        if evalue is not None and not statistics:
            if mode != "local":
                raise ValueError(f"evalue applies to local alignments, not to mode {mode!r}")
            raise ValueError(f"evalue: BLAST publishes no statistics for {scoring.name} with gap "
                             f"costs {scoring.gap_open}/{scoring.gap_extend}, so hits have no "
                             "E-values to filter on")
        if mode == "local" and not statistics:
            annotate(_HITS_META, scoring, db_residues=store.n_residues,
                     db_sequences=store.n_records)  # warns once: E-values stay null
    except BaseException:
        if temporary:
            shutil.rmtree(store.path, ignore_errors=True)
        raise
    if not temporary:
        keep = None
    elif owner == "dask":
        keep = _TemporaryStore(store.path)
    else:
        keep = True
    return _Search(queries=batch, scoring=scoring, mode=mode, max_hits=max_hits,
                   min_score=min_score, evalue=evalue, device=device,
                   store_path=str(store.path), files=tuple(str(f) for f in store.files),
                   db_residues=store.n_residues, db_sequences=store.n_records,
                   statistics=statistics, batch_size=TRACEBACK_QUERIES, keep=keep)


def _score_partition(frame, job: _Search, partition_info=None) -> pd.DataFrame:
    """Score table of one store partition: each query's best candidates (schema SCORES)."""
    started = time.time()
    number = partition_info["number"]
    where = f"{job.files[number]} (store partition {number})"
    seq_id, offsets, residues = _subject_arrays(frame, where)
    device = backend.task_device(job.device, job.mode)
    batch = job.queries
    n_queries, n_subjects = len(batch), len(seq_id)
    lengths = np.diff(offsets).astype(np.int32)
    rows_per_chunk = max(1, SCORE_TABLE_BYTES // (12 * max(n_subjects, 1)))
    columns = {name: [] for name in SCORES.names}
    kernel_seconds = 0.0
    for q0 in range(0, n_queries if n_subjects else 0, rows_per_chunk):
        q1 = min(n_queries, q0 + rows_per_chunk)
        q_off = batch.offsets[q0:q1 + 1] - batch.offsets[q0]
        q_res = batch.residues[batch.offsets[q0]:batch.offsets[q1]]
        with backend.KERNEL_LOCK:
            candidates, seconds = _score_pass(device, q_res, q_off, residues, offsets,
                                              job.scoring, job.mode, job.max_hits, job.min_score)
        kernel_seconds += seconds
        for row, found in enumerate(candidates):
            keep, scores, q_end, s_end = _best_of(found, seq_id, job.max_hits)
            columns["query_id"].append(np.full(keep.size, batch.seq_id[q0 + row], np.int64))
            columns["subject_id"].append(seq_id[keep])
            columns["score"].append(scores)
            columns["query_end"].append(q_end)
            columns["subject_end"].append(s_end)
            columns["subject_length"].append(lengths[keep])
            columns["partition"].append(np.full(keep.size, number, np.int32))
            columns["row"].append(keep.astype(np.int64))
    table = pd.DataFrame({
        field.name: np.concatenate([np.empty(0, _SCORES_META[field.name].dtype)] + parts)
        .astype(_SCORES_META[field.name].dtype, copy=False)
        for field, parts in zip(SCORES, columns.values())})
    table.attrs["swdask"] = {
        "kernel_seconds": kernel_seconds,
        "cells": int(batch.lengths.sum()) * int(offsets[-1]),
        "started": started, "finished": time.time(),
        "devices": [device], "workers": [backend.worker_name()]}
    return table


def _subject_arrays(frame, where):
    """``seq_id, offsets, residues`` of a partition frame, its columns checked."""
    present = [name for name in _SUBJECT_COLUMNS if name in frame.columns]
    table = check_table(pa.Table.from_pandas(frame[present], preserve_index=False), _SUBJECTS,
                        where=where)  # names a missing column or one of another type
    return (table.column("seq_id").to_numpy(),) + _list_arrays(table.column("residues"))


def _list_arrays(column):
    """``offsets`` (int64, from 0) and ``values`` (uint8) of a ``list<uint8>`` column."""
    column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    offsets = column.offsets.to_numpy().astype(np.int64)
    if offsets.size == 0:  # an empty array may have no offsets buffer
        offsets = np.zeros(1, dtype=np.int64)
    values = column.values.to_numpy(zero_copy_only=True)[offsets[0]:offsets[-1]]
    return offsets - offsets[0], values


def _best_of(found, seq_id, max_hits):
    """A query's ``max_hits`` best candidates of a partition: by score, ties by seq_id."""
    keep, scores, q_end, s_end = found
    if keep.size > max_hits:
        order = np.lexsort((seq_id[keep], -scores.astype(np.int64)))[:max_hits]
        keep, scores, q_end, s_end = keep[order], scores[order], q_end[order], s_end[order]
    return keep, scores, q_end, s_end


def _merge_candidates(job: _Search, *tables) -> pd.DataFrame:
    """Each query's ``max_hits`` best of several score tables, sorted by query position,
    score (descending) and subject_id: the order of the hits table."""
    info = _merge_info([t.attrs.get("swdask") for t in tables])
    kept = [t for t in tables if len(t)] or list(tables[:1])
    frames = []
    for t in kept:
        t = t.copy(deep=False)
        t.attrs = {}
        frames.append(t)
    table = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    position = job.positions(table["query_id"].to_numpy())
    order = np.lexsort((table["subject_id"].to_numpy(),
                        -table["score"].to_numpy().astype(np.int64), position))
    sorted_position = position[order]
    n = len(order)
    first = np.ones(n, bool)
    first[1:] = sorted_position[1:] != sorted_position[:-1]
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0)) if n else np.zeros(0, int)
    result = table.iloc[order[np.arange(n) - start < job.max_hits]].reset_index(drop=True)
    result.attrs["swdask"] = info
    return result


def _merge_info(infos):
    infos = [i for i in infos if i]
    return {
        "kernel_seconds": sum(i["kernel_seconds"] for i in infos),
        "cells": sum(i["cells"] for i in infos),
        "started": min(i["started"] for i in infos),
        "finished": max(i["finished"] for i in infos),
        "devices": sorted(set().union(*(i["devices"] for i in infos))),
        "workers": sorted(set().union(*(i["workers"] for i in infos))),
    }


def _split_candidates(job: _Search, candidates: pd.DataFrame):
    """The merged candidates cut into the query batches of the traceback tasks."""
    position = job.positions(candidates["query_id"].to_numpy())
    bounds = np.searchsorted(position, np.arange(0, job.n_batches + 1) * job.batch_size)
    parts = []
    for b in range(job.n_batches):
        part = candidates.iloc[bounds[b]:bounds[b + 1]].reset_index(drop=True)
        part.attrs = {"swdask": candidates.attrs["swdask"]}
        parts.append(part)
    return tuple(parts)


def _traceback_batch(job: _Search, candidates: pd.DataFrame, batch: int) -> pd.DataFrame:
    """Hits of one batch of queries: the candidates' residues read from the store, their
    alignments, E-values and ranks (schema HITS)."""
    started, tick = time.time(), time.perf_counter()
    scored = candidates.attrs["swdask"]
    queries = job.queries
    if job.evalue is not None and len(candidates):
        position = job.positions(candidates["query_id"].to_numpy())
        evalues = _statistics(pd.DataFrame({
            "score": candidates["score"].to_numpy(),
            "query_length": queries.lengths[position],
            "subject_length": candidates["subject_length"].to_numpy()}), job)["evalue"]
        candidates = candidates[(evalues <= job.evalue).to_numpy(dtype=bool)]
    subjects = _read_subjects(job, candidates)
    position = job.positions(candidates["query_id"].to_numpy())
    work = []
    rank = 0
    for k, row in enumerate(candidates.itertuples(index=False)):
        rank = rank + 1 if k and position[k] == position[k - 1] else 1
        qi = int(position[k])
        name, codes = subjects[row.subject_id]
        work.append((queries.names[qi], int(queries.seq_id[qi]), queries.codes(qi), name,
                     int(row.subject_id), codes, int(row.score), int(row.query_end),
                     int(row.subject_end), rank))
    traced = backend.trace_device(job.device, job.mode)
    hits = _hits_frame(_trace(work, job.scoring, job.mode, traced))
    if job.statistics:
        hits = _statistics(hits, job)
    hits.attrs["swdask"] = {"scored": scored, "traceback_seconds": time.perf_counter() - tick,
                            "started": started, "finished": time.time(), "n_hits": len(hits)}
    return hits


def _read_subjects(job: _Search, candidates: pd.DataFrame) -> dict:
    """``{seq_id: (name, codes)}`` of the candidates' subjects, read from their partitions.

    The score table gives each candidate's row in its partition file, so only the row
    groups holding a candidate are decoded (about 2 M residues each), and the rows are
    taken by position; their ``seq_id`` must be the score pass's.  The row groups are
    decoded in parallel threads (Arrow releases the GIL): the top hits of a search are
    spread over most of a database, and one thread decoding them all took about 0.55 s
    of a 1.2 s traceback task on an H100 host (102 M residues, 64 queries).
    """
    plans = []
    for number, group in candidates.groupby("partition", sort=True):
        path = job.files[int(number)]
        wanted = group.drop_duplicates("row").sort_values("row")
        rows = wanted["row"].to_numpy()
        try:
            metadata = pq.ParquetFile(path).metadata
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"{path}: cannot read partition {number}: {exc}") from None
        sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
        bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        if rows[-1] >= bounds[-1]:
            raise _changed(path)
        of_row = np.searchsorted(bounds, rows, side="right") - 1
        plans.append((number, path, wanted, rows, bounds, of_row, np.unique(of_row)))
    reads = [(number, path, int(g)) for number, path, *_, groups in plans for g in groups]

    def read(item):
        number, path, g = item
        try:
            table = pq.ParquetFile(path).read_row_group(g, columns=list(_FETCHED.names),
                                                        use_threads=False)
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"{path}: cannot read partition {number}: {exc}") from None
        return check_table(table, _FETCHED, where=path)

    threads = min(len(reads), os.cpu_count() or 1, _READ_THREADS)
    if threads > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads, thread_name_prefix="swdask-read-subjects") as pool:
            tables = iter(list(pool.map(read, reads)))
    else:
        tables = iter([read(item) for item in reads])
    subjects = {}
    for number, path, wanted, rows, bounds, of_row, groups in plans:
        table = pa.concat_tables([next(tables) for _ in groups])
        read_before = np.concatenate([[0], np.cumsum(bounds[groups + 1] - bounds[groups])[:-1]])
        table = table.take(read_before[np.searchsorted(groups, of_row)] + rows - bounds[of_row])
        if not np.array_equal(table.column("seq_id").to_numpy(), wanted["subject_id"].to_numpy()):
            raise _changed(path)
        offsets, residues = _list_arrays(table.column("residues"))
        for k, (seq_id, name) in enumerate(zip(wanted["subject_id"].tolist(),
                                               table.column("name").to_pylist())):
            subjects[seq_id] = (name, residues[offsets[k]:offsets[k + 1]])
    return subjects


def _changed(path) -> StoreError:
    return StoreError(f"{path}: a subject of the score pass is missing; did the store change "
                      "during the search?")


def _task_info(hits: pd.DataFrame) -> pd.Series:
    """What a traceback task and the score tasks before it did (reduction chunk)."""
    info = hits.attrs.get("swdask")  # Dask also calls this on an empty frame, for meta
    return pd.Series([info] if info else [], dtype=object)


def _search_stats(infos, *, n_queries: int, n_subjects: int, cells: int) -> SearchStats:
    """The :class:`SearchStats` of a Dask search from its tasks' infos (reduction aggregate)."""
    traced = [info for info in np.asarray(infos, dtype=object).ravel() if info]
    scored = traced[0]["scored"]
    if scored["cells"] != cells:  # every partition was scored exactly once
        raise AssertionError(f"search stats: {scored['cells']} cells scored, expected {cells}")
    return SearchStats(
        n_queries=n_queries, n_subjects=n_subjects, cells=cells,
        score_seconds=scored["kernel_seconds"],
        traceback_seconds=sum(t["traceback_seconds"] for t in traced),
        total_seconds=max([scored["finished"]] + [t["finished"] for t in traced]) - scored["started"],
        n_hits=sum(t["n_hits"] for t in traced), workers=len(scored["workers"]),
        device="+".join(scored["devices"]))


# --------------------------------------------------------------------------------------
# the single-process engine (the reference)
# --------------------------------------------------------------------------------------


def search_in_process(queries, database, *, scoring: Scoring | None = None,
                      mode: str = "local", max_hits: int = 50, min_score: int | None = None,
                      evalue: float | None = None, device: str = "auto",
                      threads: int | None = None, alphabet="auto", map_unknown: bool = False,
                      progress: bool = False, return_stats: bool = False):
    """Search queries against a database in this process, without Dask.

    The same search as :func:`search` (same arguments, same hits), run partition after
    partition in this process with Numba's threads (or one GPU), returning a pandas
    DataFrame.  It is the reference the Dask flow is tested against and what the CPU
    benchmark (``workflows/benchmarks/cpu_search.py``) times.

    Parameters
    ----------
    queries, database, scoring, mode, max_hits, min_score, evalue, alphabet, map_unknown
        As :func:`search`.  A FASTA database's temporary store is removed on return.
    device : {"auto", "cpu", "gpu"}, default "auto"
        As :func:`swdask.backend.check_device`: ``"auto"`` takes a GPU when Numba sees
        one (local mode).
    threads : int, optional
        Numba threads of the CPU score kernel (default: all cores).
    progress : bool, default False
        Show a progress bar (cells) on stderr.
    return_stats : bool, default False
        Also return a :class:`SearchStats`.

    Returns
    -------
    pandas.DataFrame
        The hits table (schema ``swdask.parquet_schemas.HITS``), queries in input order,
        hits by rank.
    SearchStats
        Only with ``return_stats=True``.

    Raises
    ------
    ValueError
        As :func:`search`, and a bad ``threads``.
    DeviceError
        ``device="gpu"`` without a GPU, or with a mode other than local.
    EmptyInputError, InvalidSequenceError, SequenceFormatError, InputNotFoundError
        Bad input files (see :func:`swdask.ingest`).

    Examples
    --------
    >>> from importlib.resources import files
    >>> data = files("swdask") / "data"
    >>> hits = search_in_process(data / "demo_queries.fasta", data / "demo_db.fasta.gz",
    ...                          max_hits=2)
    >>> print(hits[["query", "subject", "score", "cigar", "rank"]].head(2).to_string(index=False))
                  query               subject  score cigar  rank
    sp|Q91G65|032R_IIV6   sp|Q91G65|032R_IIV6    532  100=     1
    sp|Q91G65|032R_IIV6 sp|Q55DQ2|ABCGB_DICDI     49 1=1X1=1X1=1X1=2X1=1X2=1X2=4D1X1=1X1=1X1=     2
    """
    started = time.perf_counter()
    check_mode(mode)
    # "auto" is decided once the work is known: a small search never touches the GPU.
    # "gpu" starts the GPU now and checks it once the input is read (start_early).
    chosen = "cpu" if device == "auto" else backend.check_device(device, mode,
                                                                  here=device != "gpu")
    if chosen == "gpu":
        backend.start_early()
    _check_limits(max_hits, min_score, evalue)
    threads = _threads(threads)
    if device == "cpu":
        from .kernels.cpu import prebuild

        prebuild.start(prebuild.SEARCH)  # a first run compiles them in a second process
    job = _prepare(queries, database, scoring=scoring, mode=mode, max_hits=int(max_hits),
                   min_score=min_score, evalue=evalue, device=chosen, alphabet=alphabet,
                   map_unknown=map_unknown, owner="caller")
    reason = ""
    if device == "auto":
        chosen, reason = backend.auto_device(job.queries.lengths, job.db_residues, job.scoring,
                                             job.mode, threads)
        if chosen == "cpu":
            from .kernels.cpu import prebuild

            prebuild.start(prebuild.SEARCH)
    try:
        if chosen == "gpu":
            backend.check_device(chosen, mode)  # raises DeviceError where there is none
        if threads == kernel_threads():  # as it is: leave Numba's threading layer unstarted
            frame, stats = _run(job, progress, chosen)
        else:
            previous = numba.get_num_threads()
            numba.set_num_threads(threads)
            try:
                frame, stats = _run(job, progress, chosen)
            finally:
                numba.set_num_threads(previous)
    finally:
        if job.keep:
            shutil.rmtree(job.store_path, ignore_errors=True)
    stats = SearchStats(**stats, total_seconds=time.perf_counter() - started, workers=threads,
                        device=chosen, device_reason=reason)
    return (frame, stats) if return_stats else frame


def _threads(threads) -> int:
    available = numba.config.NUMBA_NUM_THREADS
    if threads is None:
        return available
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be a positive whole number, got {threads!r}")
    return min(int(threads), available)


class _TopHits:
    """Best ``k`` candidates per query over all partitions: (score desc, seq_id asc)."""

    def __init__(self, n_queries: int, k: int):
        self.k = k
        self.parts = [[] for _ in range(n_queries)]

    def add(self, qi, scores, seq_ids, q_end, s_end, codes):
        current = self.parts[qi]
        current.extend(zip(scores.tolist(), seq_ids.tolist(), q_end.tolist(), s_end.tolist(), codes))
        if len(current) > 2 * self.k:
            self.parts[qi] = self._best(current)

    def _best(self, items):
        items.sort(key=lambda hit: (-hit[0], hit[1]))
        return items[: self.k]

    def result(self, qi):
        return self._best(self.parts[qi])


def _score_pass(device, q_res, q_off, s_res, s_off, scoring, mode, max_hits, min_score):
    """Candidate hits of some queries against some subjects, and the kernel seconds.

    One ``(columns, scores, query_ends, subject_ends)`` per query: at least every
    subject that can be among the query's ``max_hits`` best scoring ``min_score`` or more
    (ties included).  The GPU selects them on the device and ships back only those.
    """
    if device == "gpu":
        return backend.top_hits_gpu(q_res, q_off, s_res, s_off, scoring.matrix,
                            scoring.gap_open, scoring.gap_extend, max_hits, min_score)
    # Numba's one-time set-up (or compilation) of the kernel is not scoring time.
    load_kernel(scoring.matrix, scoring.gap_open, scoring.gap_extend, mode)
    tick = time.perf_counter()
    scores, q_end, s_end = score_all(q_res, q_off, s_res, s_off, scoring.matrix,
                                     scoring.gap_open, scoring.gap_extend, mode)
    seconds = time.perf_counter() - tick
    candidates = []
    for row in range(scores.shape[0]):
        cols = (np.arange(scores.shape[1]) if min_score is None
                else np.flatnonzero(scores[row] >= min_score))
        candidates.append((cols, scores[row, cols], q_end[row, cols], s_end[row, cols]))
    return candidates, seconds


def _run(job: _Search, progress, device="cpu"):
    batch, max_hits = job.queries, job.max_hits
    store = SequenceStore.open(job.store_path)
    n_queries = len(batch)
    top = _TopHits(n_queries, max_hits)
    cells = 0
    score_seconds = 0.0
    bar = _progress(progress, int(batch.lengths.sum()) * store.n_residues)
    names = {}
    # The GPU scores a partition while the next one is read and decoded.
    for part in store.iter_partitions(read_ahead=device == "gpu"):
        n_subjects = len(part)
        rows_per_chunk = max(1, SCORE_TABLE_BYTES // (12 * max(n_subjects, 1)))
        for q0 in range(0, n_queries, rows_per_chunk):
            q1 = min(n_queries, q0 + rows_per_chunk)
            q_off = batch.offsets[q0:q1 + 1] - batch.offsets[q0]
            q_res = batch.residues[batch.offsets[q0]:batch.offsets[q1]]
            candidates, seconds = _score_pass(device, q_res, q_off, part.residues, part.offsets,
                                              job.scoring, job.mode, max_hits, job.min_score)
            score_seconds += seconds
            work = int(batch.lengths[q0:q1].sum()) * part.n_residues
            cells += work
            if bar is not None:
                bar.update(work)
            for row, found in enumerate(candidates):
                keep, scores, q_end, s_end = _best_of(found, part.seq_id, max_hits)
                top.add(q0 + row, scores, part.seq_id[keep], q_end, s_end,
                        [part.codes(int(c)).copy() for c in keep])
                for c in keep:
                    names[int(part.seq_id[c])] = part.names[int(c)]
    if bar is not None:
        bar.close()

    tick = time.perf_counter()
    work = []
    for qi in range(n_queries):
        query = batch.codes(qi)
        for rank, (score, seq_id, qe, se, subject) in enumerate(top.result(qi), start=1):
            work.append((batch.names[qi], int(batch.seq_id[qi]), query, names[seq_id], seq_id,
                         subject, score, qe, se, rank))
    frame = _hits_frame(_trace(work, job.scoring, job.mode, device))
    if job.statistics:
        frame = _statistics(frame, job)
    if job.evalue is not None:
        frame = frame[(frame["evalue"] <= job.evalue).to_numpy(dtype=bool)].reset_index(drop=True)
        frame["rank"] = (frame.groupby("query_id", sort=False).cumcount() + 1).astype("Int32")
    traceback_seconds = time.perf_counter() - tick
    stats = {"n_queries": n_queries, "n_subjects": store.n_records, "cells": cells,
             "score_seconds": score_seconds, "traceback_seconds": traceback_seconds,
             "n_hits": len(frame)}
    return frame, stats


def _progress(enabled, total):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="cell", unit_scale=True, desc="search", file=sys.stderr,
                leave=False)


# --------------------------------------------------------------------------------------
# hits: shared by both engines
# --------------------------------------------------------------------------------------


def _trace(work, scoring, mode, device="cpu") -> list:
    """Rows of the hits table for ``work``, a list of :func:`_hit_row` arguments.

    On the GPU (``device="gpu"``, local mode) all pairs go to
    :func:`swdask.kernels.cuda.traceback.trace_local` at once.  On the CPU the traceback
    kernel releases the GIL, so the pairs are spread over Numba's thread count (the
    worker's share of the cores).  The largest pairs go first; rows come back in ``work``
    order.
    """
    if device == "gpu" and mode == "local" and work:
        from .kernels.cuda import traceback as gpu_traceback

        if gpu_traceback.fits(scoring.matrix):
            return _trace_gpu(work, scoring, gpu_traceback)
    threads = min(kernel_threads(), len(work))
    if threads <= 1:
        return [_hit_row(*item, scoring, mode) for item in work]
    from concurrent.futures import ThreadPoolExecutor

    order = sorted(range(len(work)), key=lambda k: -(work[k][7] * work[k][8]))  # end cells
    rows = [None] * len(work)

    def trace(k):
        rows[k] = _hit_row(*work[k], scoring, mode)

    with ThreadPoolExecutor(threads, thread_name_prefix="swdask-traceback") as pool:
        for _ in pool.map(trace, order):
            pass
    return rows


def _trace_gpu(work, scoring, gpu_traceback) -> list:
    """:func:`_trace` on the GPU: paths from the device, described on the host."""
    from .kernels.cpu.traceback import cigar_string, summarize_path

    with backend.KERNEL_LOCK:
        scores, starts, paths = gpu_traceback.trace_local(
            [item[2] for item in work], [item[5] for item in work],
            np.array([(item[7], item[8]) for item in work], dtype=np.int64).reshape(-1, 2),
            scoring.matrix, scoring.gap_open, scoring.gap_extend)
    rows = []
    for k, (query_name, query_id, query, subject_name, subject_id, subject, score, q_end, s_end,
            rank) in enumerate(work):
        if scores[k] != score:  # the score and traceback kernels must agree to the bit
            raise AssertionError(f"kernel mismatch for {query_name} / {subject_name}: "
                                 f"score pass {score}, GPU traceback {scores[k]}")
        q_start, s_start = (int(x) for x in starts[k])
        cigar, matches, mismatches, gap_opens, length = summarize_path(
            query, subject, q_start, s_start, paths[k], scoring.alphabet.unknown_code)
        rows.append((query_name, subject_name, score, matches / length if length else 0.0,
                     int(length), int(mismatches), int(gap_opens), q_start, int(q_end), s_start,
                     int(s_end), cigar_string(cigar), len(query), len(subject), query_id,
                     subject_id, rank))
    return rows


def _hit_row(query_name, query_id, query, subject_name, subject_id, subject, score, q_end, s_end,
             rank, scoring, mode) -> tuple:
    """One row of the hits table (:data:`_HIT_COLUMNS`): the traceback of a scored pair."""
    aln = alignment_from_codes(query, subject, scoring, mode, end=(q_end, s_end))
    if aln.score != score:  # the score and traceback kernels must agree to the bit
        raise AssertionError(f"kernel mismatch for {query_name} / {subject_name}: "
                             f"score pass {score}, traceback {aln.score}")
    return (query_name, subject_name, score, aln.identity, aln.align_length, aln.mismatches,
            aln.gap_opens, aln.query_start, aln.query_end, aln.subject_start, aln.subject_end,
            aln.cigar, len(query), len(subject), query_id, subject_id, rank)


def _hits_frame(rows) -> pd.DataFrame:
    """The hits table of some rows, as a pandas DataFrame of HITS's dtypes."""
    data = {name: [r[k] for r in rows] for k, name in enumerate(_HIT_COLUMNS)}
    data["evalue"] = pa.nulls(len(rows), pa.float64())
    data["bitscore"] = pa.nulls(len(rows), pa.float64())
    table = pa.table({f.name: pa.array(data[f.name], type=f.type) for f in HITS}, schema=HITS)
    return to_pandas(check_table(table, HITS, where="hits"))


def _statistics(frame: pd.DataFrame, job: _Search) -> pd.DataFrame:
    """``frame`` with BLAST's ``bitscore`` and ``evalue`` over the whole database."""
    from .statistics import annotate

    return annotate(frame, job.scoring, db_residues=job.db_residues, db_sequences=job.db_sequences)


#: ``meta`` of the Dask graphs, built from the schemas.  The hits table has swdask's dtypes
#: (swdask.tables); the score table, built from NumPy arrays inside the score task and never
#: handed out, keeps NumPy's.
_SCORES_META = SCORES.empty_table().to_pandas()
_HITS_META = to_pandas(HITS.empty_table())
