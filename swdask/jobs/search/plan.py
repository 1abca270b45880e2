"""A search's plan: its arguments checked, its queries and database opened, its device
decided; the :class:`SearchJob` every task gets, and the :class:`SearchStats` it reports."""
from __future__ import annotations

import functools
import heapq
import math
import numbers
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ... import backend
from ...errors import EmptyInputError, InvalidSequenceError
from ...options import check_strand
from ...parquet_schemas import HITS
from ...scoring import Scoring
from ...scoring.statistics import annotate, karlin_altschul
from ...sequences.batch import SequenceBatch, as_batch
from ...sequences.ingest import open_database
from ...sequences.store import SequenceStore, row_group_sizes
from ...tables import to_pandas
from ..base import Job, TemporaryStore

if TYPE_CHECKING:
    import os
    from collections.abc import Sequence

    import pandas as pd

    from ...sequences.batch import SequencesLike

__all__ = ["GPU_TASK_RESIDUES", "GPU_TASKS_PER_WORKER", "MERGE_FAN_IN", "SCORE_TABLE_BYTES",
           "SPLIT_LEVELS", "SPLIT_TOLERANCE", "TRACEBACK_QUERIES", "ScorePiece", "SearchJob",
           "SearchStats", "check_limits", "hits_meta", "longest_share", "prepare",
           "rows_per_pass", "score_pieces", "score_tasks", "strand_rows",
           "traceback_batch_size"]

#: Bound on the host score tables (scores and both ends, int32) a CPU score pass holds at
#: once (:func:`rows_per_pass`).
SCORE_TABLE_BYTES = 256 * 2**20
#: Score tables merged by one task of the merge tree.
MERGE_FAN_IN = 8
#: Most queries per traceback task (and per partition of the hits DataFrame); the
#: batches are of equal size (:func:`traceback_batch_size`).
TRACEBACK_QUERIES = 64
#: How much longer than an even share (the database's residues / the workers) the most
#: any worker scores may be before a search's store files are cut finer
#: (:func:`score_pieces`).
SPLIT_TOLERANCE = 0.05
#: Pieces per worker tried in turn, finer and finer, by :func:`score_pieces`.
SPLIT_LEVELS = (1, 2, 4, 8, 16)
#: Score tasks per worker of a GPU search (:func:`score_tasks`): two, so that a worker
#: reads one while the other's kernels run.  A GPU task's host work is per batch of
#: queries, whatever its subjects: 196 queries against a store file of 16.8 M residues
#: and one of 2.0 M took about the same 0.35-0.45 s on an H200, the GPU idle most of the
#: smaller one; a task of several files gives the GPU more to do per batch.
GPU_TASKS_PER_WORKER = 2
#: Residues a GPU score task reads at most (more tasks than GPU_TASKS_PER_WORKER on a
#: large database): about four store files, which bounds a task's memory and what a
#: failed task has to score again.
GPU_TASK_RESIDUES = 64 * 2**20

@functools.cache
def hits_meta() -> pd.DataFrame:
    """``meta`` of the hits table: swdask's dtypes (swdask.tables).  Made on first use: it
    imports pandas, which a GPU search in this process imports while the GPU works."""
    return to_pandas(HITS.empty_table())


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

    ``cells`` counts what the kernels scored: with both strands of a DNA query searched
    (``strands == 2``), each query's cells twice.
    ``queries_at_max_hits`` counts the queries that kept ``max_hits`` hits (after
    ``min_score`` and ``evalue``): their list may be cut short, and a larger ``max_hits``
    shows the rest, as BLAST's ``-max_target_seqs`` does.
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
    #: Strands scored per query: 2 for a DNA search of both strands, else 1.
    strands: int = 1
    #: The search's ``max_hits``.
    max_hits: int = 0
    #: Queries that kept ``max_hits`` hits: there may be more.
    queries_at_max_hits: int = 0

    @property
    def kernel_gcups(self) -> float:
        """Billions of cells per second of the score pass."""
        return self.cells / self.score_seconds / 1e9 if self.score_seconds else 0.0

    @property
    def gcups(self) -> float:
        """Billions of cells per second, end to end (reading, scoring, traceback)."""
        return self.cells / self.total_seconds / 1e9 if self.total_seconds else 0.0


@dataclass(frozen=True)
class ScorePiece:
    """The subjects of one score task: row groups ``row_groups`` of store file ``number``
    (all of it when None), whose first row is row ``first_row`` of the file, holding
    ``residues`` residues."""

    number: int
    row_groups: tuple[int, ...] | None
    first_row: int
    residues: int


def rows_per_pass(device: str, n_subjects: int, n_rows: int) -> int:
    """Query rows one score pass takes against ``n_subjects`` subjects, of ``n_rows``.

    A CPU pass holds its whole score table (scores and both ends, int32) in host memory:
    as many rows as fit in :data:`SCORE_TABLE_BYTES`.  A GPU pass returns only candidates
    and bounds its device tables itself (``launcher.SCORE_TABLE_BYTES``), so it takes every
    row: cut by the host bound, a one-GPU score task of 126,000 subjects made two passes of
    177 and 19 of the 196 queries, each with its own uploads, profiles and selections, the
    second running alone at the end for 0.2 s (H200 host, ``scaling.py``'s phases).

    Examples
    --------
    >>> rows_per_pass("cpu", 126_000, 196), rows_per_pass("gpu", 126_000, 196)
    (177, 196)
    """
    if device == "gpu":
        return max(1, n_rows)
    return max(1, SCORE_TABLE_BYTES // (12 * max(n_subjects, 1)))


def score_pieces(files: Sequence[str], file_residues: Sequence[int],
                 workers: int = 1) -> tuple[ScorePiece, ...]:
    """The score tasks of a search on ``workers`` workers, largest first.

    Workers take the tasks largest first, each the next one as it is free (on a cluster
    the scheduler starts kernel tasks by their work, most first:
    :func:`swdask.cluster.largest_first`): the most any worker then scores is
    :func:`longest_share`.  One task per store file (as the store's partitions are
    sized) while that is within :data:`SPLIT_TOLERANCE` of an even share: 102.6 M
    residues in six files of 16.8 M and one of 2 M on 2 workers, say (3 files and the small
    one against 3).  Otherwise the files are cut into runs of whole row groups (the
    smallest unit a task reads: about 2 M residues, ``ROW_GROUP_RESIDUES``) of about
    ``total / (k x workers)`` residues, for ``k`` of :data:`SPLIT_LEVELS` in turn, until
    it is (or the row groups allow no finer cut): as few tasks as balance needs, since
    each task costs its read, upload and kernel launches.  Ties are ordered the later
    first (longer subjects).  Which subjects a task scores does not change any hit: the
    merge keeps each query's best by a total order.

    Examples
    --------
    Balanced as stored: one piece per file, largest first (no file is opened):

    >>> pieces = score_pieces(["a", "b", "c", "d"], [50, 80, 80, 50], workers=2)
    >>> [(p.number, p.row_groups, p.residues) for p in pieces]
    [(2, None, 80), (1, None, 80), (3, None, 50), (0, None, 50)]
    """
    total = sum(int(r) for r in file_residues)
    even = total / max(workers, 1)
    groups = {}  # file -> (rows, residues) of its row groups, read once
    pieces = [ScorePiece(number, None, 0, int(residues))
              for number, residues in enumerate(file_residues)]
    for level in SPLIT_LEVELS if workers > 1 else ():
        if longest_share([p.residues for p in pieces], workers) <= (1 + SPLIT_TOLERANCE) * even:
            break
        target = total / (level * workers)
        finer = []
        for number, (path, residues) in enumerate(zip(files, file_residues)):
            parts = math.ceil(int(residues) / target)
            if parts > 1 and number not in groups:
                groups[number] = row_group_sizes(path)
            rows, group_residues = groups.get(number, ((), ()))
            finer.extend(_cut_file(number, rows, group_residues, min(parts, len(rows)),
                                   int(residues)))
        pieces = finer
    return tuple(sorted(pieces, key=lambda p: (-p.residues, -p.number, -p.first_row)))


def score_tasks(pieces: Sequence[ScorePiece], tasks: int | None) -> tuple[tuple[int, ...], ...]:
    """The score tasks of a search: which of ``pieces`` (largest first) each task reads,
    largest task first.

    ``tasks=None`` (a CPU search): one task a piece.  Otherwise the pieces go, largest
    first, to the task with the fewest residues so far (greedy LPT) into at most
    ``tasks`` tasks, each reading its pieces in store order.

    Examples
    --------
    >>> pieces = [ScorePiece(k, None, 0, r) for k, r in enumerate([17, 17, 17, 2])]
    >>> score_tasks(pieces, None)
    ((0,), (1,), (2,), (3,))
    >>> score_tasks(pieces, 2)
    ((0, 2), (1, 3))
    """
    if tasks is None or tasks >= len(pieces):
        return tuple((k,) for k in range(len(pieces)))
    loads = [(0, t, []) for t in range(max(tasks, 1))]
    for k in sorted(range(len(pieces)), key=lambda k: -pieces[k].residues):
        load, t, members = heapq.heappop(loads)
        members.append(k)
        heapq.heappush(loads, (load + pieces[k].residues, t, members))
    ordered = sorted(loads, key=lambda entry: (-entry[0], entry[1]))
    return tuple(tuple(sorted(members, key=lambda k: (pieces[k].number, pieces[k].first_row)))
                 for _, _, members in ordered if members)


def longest_share(sizes: Sequence[int], workers: int) -> float:
    """The most any of ``workers`` workers gets when each takes the largest of ``sizes``
    left as it is free (greedy longest-first, all at the same speed).

    Examples
    --------
    >>> longest_share([5, 5, 4, 3, 3], 2)
    11
    """
    loads = [0] * max(workers, 1)
    for size in sorted(sizes, reverse=True):
        heapq.heapreplace(loads, loads[0] + size)
    return max(loads)


def _cut_file(number: int, rows: Sequence[int], group_residues: Sequence[int], parts: int,
              residues: int) -> list[ScorePiece]:
    """Store file ``number`` as ``parts`` runs of whole row groups of about equal residues
    (the whole file, ``row_groups=None``, for one part)."""
    if parts <= 1:
        return [ScorePiece(number, None, 0, residues)]
    done = np.concatenate([[0], np.cumsum(group_residues)])
    # Cut between row groups where the residues before are nearest k / parts of the file.
    cuts = sorted({int(np.abs(done - k * done[-1] / parts).argmin())
                   for k in range(1, parts)} - {0, len(rows)})
    first_rows = np.concatenate([[0], np.cumsum(rows)])
    return [ScorePiece(number, tuple(range(g0, g1)), int(first_rows[g0]), int(done[g1] - done[g0]))
            for g0, g1 in zip([0, *cuts], [*cuts, len(rows)])]


def traceback_batch_size(n_queries: int, workers: int = 1) -> int:
    """Queries per traceback task: at most :data:`TRACEBACK_QUERIES`, and at least as
    many tasks as ``workers`` (while there are queries for them), of equal size.  196
    queries make 4 tasks of 49, not 3 of 64 and one of 4, and 12 queries on 2 workers 2
    tasks of 6, not one: the traceback comes after the last score task, and one worker
    tracing back alone while the others wait was the end of every small search.

    Examples
    --------
    >>> traceback_batch_size(196), traceback_batch_size(12, workers=2), traceback_batch_size(0)
    (49, 6, 1)
    """
    batches = max(1, -(-n_queries // TRACEBACK_QUERIES), min(n_queries, workers))
    return max(1, -(-n_queries // batches))


@dataclass(frozen=True, kw_only=True)
class SearchJob(Job):
    """Everything the tasks of one search need: small, immutable, picklable.

    ``queries`` are the queries as given; ``rows`` the sequences the score pass scores
    (:func:`strand_rows`): the queries, their reverse complements, or each query followed
    by its reverse complement.  ``strand`` is the search's, ``"plus"`` for protein.
    """

    queries: SequenceBatch
    rows: SequenceBatch
    strand: str
    mode: str
    max_hits: int
    min_score: int | None
    evalue: float | None
    store_path: str
    files: tuple
    db_residues: int
    db_sequences: int
    statistics: bool  # local mode with published Karlin-Altschul parameters
    batch_size: int  # queries per traceback task (traceback_batch_size() when planned)
    file_residues: tuple = ()  # residues of each of ``files``
    keep: object = None  # a temporary store's TemporaryStore (a plain path once pickled)
    pieces: tuple = ()  # the store's runs of row groups, largest first (score_pieces)
    tasks: tuple = ()  # the score tasks: the pieces each reads, largest first (score_tasks)
    #: The search's GPU kernels compute every mode.
    gpu_kernels: ClassVar[backend.GpuKernels] = backend.SEARCH_GPU

    @property
    def n_batches(self) -> int:
        """Traceback tasks (query batches)."""
        return -(-len(self.queries) // self.batch_size)

    @property
    def cells(self) -> int:
        """Cells of the whole score pass: residues scored (each strand) x database residues."""
        return int(self.rows.lengths.sum()) * self.db_residues

    def batch_residues(self) -> list[int]:
        """Residues of the queries of each traceback task (at least 1 each): their weight
        when a cluster deals them out (:class:`swdask.backend.SpreadTask`)."""
        lengths = np.asarray(self.queries.lengths, dtype=np.int64)
        return [max(1, int(lengths[b * self.batch_size:(b + 1) * self.batch_size].sum()))
                for b in range(self.n_batches)]

    def task_cells(self, task: int) -> int:
        """Cells of score task ``task`` (of :attr:`tasks`: its weight in progress)."""
        residues = sum(self.pieces[k].residues for k in self.tasks[task])
        return int(self.rows.lengths.sum()) * residues

    @property
    def strands(self) -> int:
        """Strands scored per query: 2 for ``"both"``, else 1."""
        return 2 if self.strand == "both" else 1

    @property
    def stranded(self) -> bool:
        """Whether hits have a strand (DNA)."""
        return self.queries.alphabet.name == "dna"

    @property
    def row_position(self) -> np.ndarray:
        """Position in :attr:`queries` of each row of :attr:`rows`."""
        return np.arange(len(self.rows)) // self.strands

    @property
    def row_minus(self) -> np.ndarray:
        """1 for the rows of :attr:`rows` that are reverse complements, else 0 (int32)."""
        rows = np.arange(len(self.rows), dtype=np.int32)
        if self.strand == "both":
            return rows % 2
        return np.full(len(rows), int(self.strand == "minus"), np.int32)

    def query_codes(self, position: int, minus: bool) -> np.ndarray:
        """The codes a hit of query ``position`` was scored with: the query's, or with
        ``minus`` those of its reverse complement (a row of :attr:`rows`)."""
        return self.rows.codes(position * self.strands + int(minus and self.strand == "both"))

    def positions(self, query_ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Positions in :attr:`queries` of queries given by ``seq_id``."""
        ids = self.queries.seq_id
        order = np.argsort(ids, kind="stable")
        return order[np.searchsorted(ids, np.asarray(query_ids), sorter=order)]


def check_limits(max_hits: int, min_score: int | None, evalue: float | None) -> None:
    """Raise ValueError unless ``max_hits`` is a positive whole number, ``min_score`` a
    whole number or None and ``evalue`` a positive number or None."""
    if isinstance(max_hits, bool) or not isinstance(max_hits, (int, np.integer)) or max_hits < 1:
        raise ValueError(f"max_hits must be a positive whole number, got {max_hits!r}")
    if min_score is not None and (isinstance(min_score, bool)
                                  or not isinstance(min_score, (int, np.integer))):
        raise ValueError(f"min_score must be a whole number, got {min_score!r}")
    if evalue is not None and (isinstance(evalue, bool) or not isinstance(evalue, numbers.Real)
                               or not evalue > 0):
        raise ValueError(f"evalue must be a positive number, got {evalue!r}")


def strand_rows(queries: SequenceBatch, strand: str) -> SequenceBatch:
    """The sequences a search of ``strand`` scores: the queries (``"plus"``), their
    reverse complements (``"minus"``), or each query followed by its reverse complement
    (``"both"``: query ``i`` in rows ``2 i`` and ``2 i + 1``), names and ``seq_id`` kept.

    Examples
    --------
    >>> from swdask.sequences.batch import as_batch
    >>> rows = strand_rows(as_batch({"a": "AAC", "b": "GT"}, alphabet="dna"), "both")
    >>> [rows.alphabet.decode(rows.codes(k)) for k in range(4)], rows.names
    (['AAC', 'GTT', 'GT', 'AC'], ('a', 'a', 'b', 'b'))
    """
    if strand == "plus":
        return queries
    minus = queries.reverse_complement()
    if strand == "minus":
        return minus
    n = len(queries)
    both = SequenceBatch.concat([queries, minus])
    return both.take(np.column_stack([np.arange(n), np.arange(n) + n]).ravel())


def prepare(queries: SequencesLike, database: str | os.PathLike | SequenceStore, *,
            scoring: Scoring | None, mode: str, max_hits: int, min_score: int | None,
            evalue: float | None, device: str, alphabet: str, map_unknown: bool, owner: str,
            strand: str | None = None, workers: int = 1) -> SearchJob:
    """Open the database and the queries and check that they go together.

    ``device`` is the job's, already decided; ``workers`` the workers that will run its
    score tasks (:func:`score_pieces`).  A FASTA database is ingested into a
    temporary store; with ``owner="dask"`` the search's :class:`TemporaryStore` removes
    it later, otherwise the caller must (``store_path`` of the result; ``keep`` is then
    True).  ``strand`` defaults to ``"both"`` for DNA; protein takes ``"plus"`` only
    (:func:`swdask.options.check_strand`).
    """
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
        batch = as_batch(queries, alphabet=alphabet, map_unknown=map_unknown)
        if batch.alphabet is not db_alphabet:
            how = " (detected)" if alphabet == "auto" else ""
            raise InvalidSequenceError(
                f"the queries are {batch.alphabet.name}{how} but the database is "
                f"{db_alphabet.name}; to read them as {db_alphabet.name}, pass "
                f"alphabet={db_alphabet.name!r} (--alphabet {db_alphabet.name})")
        # Sorted, not np.unique: that imports numpy.ma, 0.04 s before a CLI search's first
        # store read (cli_timeline.py, H200 host).
        ids = np.sort(batch.seq_id)
        if (ids[1:] == ids[:-1]).any():
            raise ValueError("queries: two queries have the same seq_id")
        strand = check_strand(strand, batch.alphabet.name)
        # Before any work: the longest pair must stay inside the kernels' exact range.
        scoring.check_lengths(int(batch.lengths.max(initial=0)),
                              max((p["max_length"] for p in store.partitions), default=0),
                              "the longest query and subject")
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
            annotate(hits_meta(), scoring, db_residues=store.n_residues,
                     db_sequences=store.n_records)  # warns once: E-values stay null
        files = tuple(str(f) for f in store.files)
        file_residues = tuple(int(p["n_residues"]) for p in store.partitions)
        pieces = score_pieces(files, file_residues, workers)
        tasks = score_tasks(pieces, max(GPU_TASKS_PER_WORKER * workers,
                                        -(-store.n_residues // GPU_TASK_RESIDUES))
                            if device == "gpu" else None)
    except BaseException:
        if temporary:
            shutil.rmtree(store.path, ignore_errors=True)
        raise
    if not temporary:
        keep = None
    elif owner == "dask":
        keep = TemporaryStore(store.path)
    else:
        keep = True
    return SearchJob(queries=batch, rows=strand_rows(batch, strand), strand=strand,
                     scoring=scoring, mode=mode, max_hits=max_hits,
                     min_score=min_score, evalue=evalue, device=device,
                     store_path=str(store.path), files=files,
                     db_residues=store.n_residues, db_sequences=store.n_records,
                     statistics=statistics, batch_size=traceback_batch_size(len(batch), workers),
                     keep=keep, file_residues=file_residues, pieces=pieces,
                     tasks=tasks)
