"""Database search: score every pair, keep each query's best hits, trace back only those.

Two engines run the same three steps (:mod:`.plan`, :mod:`.tasks`) and give the same hits
table:

- :func:`search` builds a lazy Dask DataFrame: one score task per store partition, a tree
  of merges to each query's best candidates, and traceback tasks per batch of queries.
  It runs wherever Dask computes it: Dask's threads in this process, a
  ``LocalCUDACluster`` or ``LocalCluster`` (:func:`swdask.cluster`), or a multi-node
  cluster.
- :func:`search_in_process` runs the steps in this process, partition after partition,
  without Dask, and returns a pandas DataFrame.  It is the reference that the Dask flow
  is checked against, and what the CPU benchmark times.

The Dask graph of :func:`search`::

    score task per store file, or per      reads its Parquet files (their row groups)
    piece of one on several workers        straight to arrays; score table: each query's
    (plan.score_pieces); on GPUs 2 a       best candidates of its pieces (score kernel on
    worker of several pieces each          the CPU or the GPU), each with its subject's
    (plan.score_tasks), largest first      name and residues
      -> merge tree (MERGE_FAN_IN)         each query's max_hits best over all partitions
      -> split by query batch              at most TRACEBACK_QUERIES queries each, equal
                                           batches, at least one per worker
      -> traceback tasks                   align the candidates (no store file read),
                                           E-values, rank
      -> dd.from_delayed(meta=HITS)        the hits table, one partition per query batch
      (and, beside each table, a typed record: ScoreStats up the merge tree, TraceStats
      from each traceback; search_stats adds them up)

On a cluster the score tasks are dealt out to the workers by their cells and the
traceback tasks by their queries' residues, heaviest first
(:class:`swdask.cluster.TaskRouting`), so that the workers finish together; each worker
fetches the job (:class:`SearchJob`, one task of the graph) once.

Only the score tasks touch the whole database, one partition at a time; everything after
them holds at most ``max_hits`` candidates per query, so memory is bounded by a partition
per running task whatever the database's size.
"""
from __future__ import annotations

import logging
import shutil
import sys
import time
import uuid
from typing import TYPE_CHECKING

import numpy as np

from ... import backend
from ...kernels.cpu.threads import kernel_threads
from ...options import MAX_HITS, check_strand
from ...scoring import Scoring
from ...sequences.store import SequenceStore
from ...tables import on_backend
from ..align import check_mode
from ..base import import_beside, lazy_value, progress_bar
from . import plan, tasks
from .plan import SearchJob, SearchStats, check_limits, hits_meta, prepare

if TYPE_CHECKING:
    import os

    import dask.dataframe as dd
    import pandas as pd

    from ...sequences.batch import SequencesLike

__all__ = ["search", "search_in_process"]

logger = logging.getLogger(__name__)


def _log_plan(job: SearchJob, where: str) -> None:
    logger.info("search: %d queries%s against %s subjects (%s residues) in %d store files, "
                "%s cells, %s, device %s", len(job.queries),
                " (both strands)" if job.strands == 2 else "", f"{job.db_sequences:,}",
                f"{job.db_residues:,}", len(job.files), f"{job.cells:,}", where, job.device)


def search(queries: SequencesLike, database: str | os.PathLike | SequenceStore, *,
           scoring: Scoring | None = None, mode: str = "local", max_hits: int = MAX_HITS,
           min_score: int | None = None, evalue: float | None = None, device: str = "auto",
           alphabet: str = "auto", map_unknown: bool = False, strand: str | None = None,
           return_stats: bool = False) -> dd.DataFrame | tuple[dd.DataFrame, dd.Scalar]:
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
    max_hits : int, default 500
        Hits kept per query: the highest scores, ties broken by database order
        (``subject_id``).  The default is BLAST's (``-max_target_seqs``); the statistics
        count the queries that reached it (``SearchStats.queries_at_max_hits``).
    min_score : int, optional
        Report only hits scoring at least this.  Default: 1 for local mode (a score of
        0 is no alignment), none otherwise.
    evalue : float, optional
        Drop hits whose E-value is above this (local mode, with a scoring BLAST publishes
        statistics for).  Applied to each query's ``max_hits`` best by score, before their
        traceback; ranks count the hits kept.  Default: keep all.
    device : {"auto", "cpu", "gpu"}, default "auto"
        Where score tasks run their kernel.  ``"auto"``: each task takes a GPU when its
        worker has one, else the CPU; ``"gpu"``: the CUDA kernels, which need
        a GPU on every worker that gets a score task (on a cluster of GPU and CPU
        workers they go to the GPU workers: :func:`swdask.gpu_resources`) or, with no
        ``distributed`` client, in this
        process (``NUMBA_ENABLE_CUDASIM=1`` counts); ``"cpu"``: the CPU kernel.  Scores,
        ends and alignments are identical on every device.
    alphabet : {"auto", "protein", "dna"}, default "auto"
        Alphabet of the query and database files; "auto" detects each from its first
        records, and queries and database must then agree.
    map_unknown : bool, default False
        Read letters outside the alphabet as ``X``/``N`` instead of failing.
    strand : {"both", "plus", "minus"}, optional
        DNA: the strands of each query searched, as blastn's ``-strand``: the query as
        given (``"plus"``), its reverse complement (``"minus"``), or both (the default
        for DNA).  A query's hits on both strands are ranked together, a subject hit on
        both strands being two hits.  Protein: ``"plus"`` or None only.
    return_stats : bool, default False
        Also return a lazy :class:`SearchStats` (a Dask scalar); compute it with the hits
        (``dask.compute(hits, stats)``) so that the search runs once.

    Returns
    -------
    dask.dataframe.DataFrame
        The hits table (columns and dtypes of ``swdask.parquet_schemas.HITS``), one
        partition per traceback task (batches of equal size, at most
        ``TRACEBACK_QUERIES`` (64) queries each, at least one per worker of the current
        client): queries in input order, hits by rank, a RangeIndex in each partition.
        ``evalue`` and ``bitscore`` follow NCBI BLAST+ (:mod:`swdask.scoring.statistics`)
        in local mode and are null otherwise.  pandas partitions, or cudf partitions
        under ``dask.config.set({"dataframe.backend": "cudf"})``
        (:func:`swdask.tables.on_backend`).
        ``strand`` is ``"plus"`` or ``"minus"`` for DNA (coordinates on the sequences as
        given; see ``swdask.parquet_schemas.HITS``), null for protein.
    dask.dataframe.Scalar
        Only with ``return_stats=True``: computes to a :class:`SearchStats`, from the
        records the tasks return beside their tables.

    Raises
    ------
    ValueError
        Bad ``mode``, ``device``, ``max_hits``, ``min_score``, ``evalue`` or ``strand``
        (``"both"``/``"minus"`` for protein); the queries, database and scoring are of
        different alphabets; or two queries share a ``seq_id``.
    DeviceError
        ``device="gpu"`` without a GPU in this process (no client) or on any worker of
        the current client.
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

    A DNA query's reverse complement is scored as a query row of its own (the same
    kernels), so ``cells`` and GCUPS count both strands.  E-values follow blastn, which
    gives each strand the search space of the query and the database: searching both
    strands does not change a hit's E-value.

    Examples
    --------
    >>> from importlib.resources import files
    >>> data = files("swdask") / "data"
    >>> hits = search(data / "demo_queries.fasta", data / "demo_db.fasta.gz", max_hits=2)
    >>> hits.npartitions, list(hits.columns[:4])
    (1, ['query', 'subject', 'score', 'evalue'])
    >>> table = hits.compute()
    >>> print(table[["query", "subject", "score", "evalue", "rank"]].head(2).to_string(index=False))
                  query               subject  score       evalue  rank
    sp|Q91G65|032R_IIV6   sp|Q91G65|032R_IIV6    532 1.603674e-73     1
    sp|Q91G65|032R_IIV6 sp|Q55DQ2|ABCGB_DICDI     49 2.416093e+00     2
    """
    import dask
    import dask.dataframe as dd

    check_mode(mode)
    client = backend.current_client()
    device = backend.job_device(device, mode, kernels=SearchJob.gpu_kernels, client=client)
    check_limits(max_hits, min_score, evalue)
    check_strand(strand)
    # The score tasks are cut for the workers that will run them (plan.score_pieces,
    # plan.score_tasks).
    workers = 1 if client is None else backend.kernel_workers(client, device)
    job = prepare(queries, database, scoring=scoring, mode=mode, max_hits=int(max_hits),
                  min_score=min_score, evalue=evalue, device=device, alphabet=alphabet,
                  map_unknown=map_unknown, owner="dask", strand=strand, workers=workers)
    _log_plan(job, "on Dask")
    token = uuid.uuid4().hex
    job_node = dask.delayed(job, name=f"swdask-search-{token}")
    # The task declares its kernels' device (the cluster routes GPU work by it) and its
    # cells (progress counts them, and on a cluster the scheduler deals the score tasks
    # out to the workers by them, longest first, and starts them most first:
    # swdask.cluster.TaskRouting).  Left to Dask, every score task went to the worker
    # holding the job (issue 18); dealt, each worker fetches the job once.
    level = [dask.delayed(backend.KernelTask(tasks.score_partition, device,
                                             work=job.task_cells(task)), pure=True)(
                 job_node, task, dask_key_name=(f"swdask_score-{token}", task))
             for task in range(len(job.tasks))]
    merge = dask.delayed(tasks.merge_candidates, pure=True)
    while True:
        level = [merge(job_node, *level[k:k + plan.MERGE_FAN_IN])
                 for k in range(0, len(level), plan.MERGE_FAN_IN)]
        if len(level) == 1:
            break
    candidates = level[0]
    n_batches = job.n_batches
    batches = dask.delayed(tasks.split_candidates, nout=n_batches, pure=True)(job_node, candidates)
    # The traceback batches all read the merged candidates, which one worker holds: dealt
    # out by their queries' residues instead (backend.SpreadTask), they run on every worker.
    rows = job.batch_residues()
    parts = [dask.delayed(backend.SpreadTask(tasks.traceback_batch, weight=rows[b]), nout=2,
                          pure=True)(job_node, batches[b], b,
                                     dask_key_name=(f"traceback_batch-{token}", b))
             for b in range(n_batches)]
    hits = on_backend(dd.from_delayed([hits for hits, _ in parts], meta=hits_meta(),
                                      prefix=f"swdask-hits-{token[:8]}"))
    if not return_stats:
        return hits
    stats = dask.delayed(tasks.search_stats, pure=True)(
        job_node, candidates.stats, [traced for _, traced in parts], n_queries=len(job.queries),
        n_subjects=job.db_sequences, cells=job.cells)
    return hits, lazy_value(stats, SearchStats, name=f"swdask-stats-{token[:8]}")


# --------------------------------------------------------------------------------------
# the single-process engine (the reference)
# --------------------------------------------------------------------------------------


def search_in_process(queries: SequencesLike, database: str | os.PathLike | SequenceStore, *,
                      scoring: Scoring | None = None, mode: str = "local",
                      max_hits: int = MAX_HITS, min_score: int | None = None,
                      evalue: float | None = None, device: str = "auto",
                      threads: int | None = None, alphabet: str = "auto",
                      map_unknown: bool = False, strand: str | None = None,
                      progress: bool = False, return_stats: bool = False,
                      ) -> pd.DataFrame | tuple[pd.DataFrame, SearchStats]:
    """Search queries against a database in this process, without Dask.

    The same search as :func:`search` (same arguments, same hits), run partition after
    partition in this process with Numba's threads (or one GPU), returning a pandas
    DataFrame.  It is the reference the Dask flow is tested against and what the CPU
    benchmark (``workflows/benchmarks/cpu_search.py``) times.

    Parameters
    ----------
    queries, database, scoring, mode, max_hits, min_score, evalue, alphabet, map_unknown, strand
        As :func:`search`.  A FASTA database's temporary store is removed on return.
    device : {"auto", "cpu", "gpu"}, default "auto"
        ``"auto"`` takes a GPU when Numba sees one and its expected time beats the
        CPU's (:func:`swdask.backend.auto_device`), in every mode.
    threads : int, optional
        Numba threads of the CPU score kernel.  Default: Numba's thread count, every core
        unless ``NUMBA_NUM_THREADS``, ``numba.set_num_threads`` or ``swdask --threads``
        says fewer.
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
        ``device="gpu"`` without a GPU.
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
    chosen = "cpu" if device == "auto" else backend.check_device(
        device, mode, here=device != "gpu", kernels=SearchJob.gpu_kernels)
    if chosen == "gpu":
        backend.start_early()
    check_limits(max_hits, min_score, evalue)
    check_strand(strand)
    threads = _threads(threads)
    if device == "cpu":
        from ...kernels.cpu import prebuild

        prebuild.start(prebuild.SEARCH)  # a first run compiles them in a second process
    job = prepare(queries, database, scoring=scoring, mode=mode, max_hits=int(max_hits),
                  min_score=min_score, evalue=evalue, device=chosen, alphabet=alphabet,
                  map_unknown=map_unknown, owner="caller", strand=strand)
    reason = ""
    if device == "auto":
        chosen, reason = backend.auto_device(job.rows.lengths, job.db_residues, job.scoring,
                                             job.mode, threads)
        if chosen == "cpu":
            from ...kernels.cpu import prebuild

            prebuild.start(prebuild.SEARCH)
    _log_plan(job, f"in this process ({threads} threads)")
    if reason:
        logger.info("search: device auto chose %s: %s", chosen, reason)
    loading = partitions = None
    try:
        if chosen == "gpu":
            # The first partition is read while the GPU starts (check_device waits for it).
            partitions = SequenceStore.open(job.store_path).iter_partitions(read_ahead=True)
            # Raises DeviceError where there is none.
            backend.check_device(chosen, mode, kernels=SearchJob.gpu_kernels)
            # The kernels' modules load on a thread while the store is read and the GPU
            # scores: 0.36 s of a first search's launches otherwise (H200 host).
            loading = backend.load_search_kernels(job.rows.lengths, job.scoring, job.mode)
        if threads == kernel_threads():  # as it is: leave Numba's threading layer unstarted
            frame, stats = _run(job, progress, chosen, partitions)
        else:
            import numba

            previous = numba.get_num_threads()
            numba.set_num_threads(threads)
            try:
                frame, stats = _run(job, progress, chosen, partitions)
            finally:
                numba.set_num_threads(previous)
    finally:
        if loading is not None:
            loading.join()  # nothing of the search's goes on after it returns
        if job.keep:
            shutil.rmtree(job.store_path, ignore_errors=True)
    stats = SearchStats(**stats, total_seconds=time.perf_counter() - started, workers=threads,
                        device=chosen, device_reason=reason, strands=job.strands,
                        max_hits=int(max_hits))
    return (frame, stats) if return_stats else frame


def _threads(threads) -> int:
    if threads is None:
        return kernel_threads()
    import numba

    available = numba.config.NUMBA_NUM_THREADS
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be a positive whole number, got {threads!r}")
    return min(int(threads), available)


#: What a GPU search needs after its score pass and not before: the GPU traceback's
#: launcher and the paths' description (neither imports Numba since their kernels moved
#: out; together they imported 0.55-0.68 s of it) and pandas for the hits table
#: (0.25-0.4 s).  They are imported beside the score pass once its first part is scored
#: (:func:`swdask.jobs.base.import_beside`).
AFTER_FIRST_PASS = ("swdask.kernels.cuda.traceback", "swdask.kernels.paths", "pandas")


class _TopHits:
    """Best ``k`` candidates per query over all partitions and both strands: (score desc,
    seq_id asc, minus asc)."""

    def __init__(self, n_queries: int, k: int):
        self.k = k
        self.parts = [[] for _ in range(n_queries)]

    def add(self, qi, minus, scores, seq_ids, q_end, s_end, codes):
        current = self.parts[qi]
        current.extend(zip(scores.tolist(), seq_ids.tolist(), [minus] * len(codes),
                           q_end.tolist(), s_end.tolist(), codes))
        if len(current) > 2 * self.k:
            self.parts[qi] = self._best(current)

    def _best(self, items):
        items.sort(key=lambda hit: (-hit[0], hit[1], hit[2]))
        return items[: self.k]

    def result(self, qi):
        return self._best(self.parts[qi])


#: Score passes a GPU search in one process runs at once, each on a thread of its own
#: (:func:`swdask.backend.score_passes_at_once`): one's host work then overlaps the
#: other's kernels.
GPU_SCORE_LANES = 2


def _gpu_groups(partitions, limit: int | None = None):
    """Store files joined into runs for the GPU's score passes: the first file alone (the
    GPU starts as soon as it is read), then runs of consecutive files of at most ``limit``
    residues together (default :data:`~swdask.jobs.search.plan.GPU_TASK_RESIDUES`), each
    at least one file.

    A score pass's host work (profiles, selection, the end pass, their waits) is per batch
    of queries whatever its subjects: one file at a time, a 20-query search's pass took
    0.25 s a file for 0.136 s of kernels (cli_timeline, H200 host, 2026-11-28).  The files
    of a run are read while the run before it is scored.  The first file is handed on as
    soon as it is read: waiting to see the second first held the first pass of a CLI
    search back by that file's read, 0.055 s (``cli_timeline.py``, H200 host).
    """
    from ...sequences.batch import SequenceBatch

    limit = plan.GPU_TASK_RESIDUES if limit is None else limit
    partitions = iter(partitions)
    first = next(partitions, None)
    if first is None:
        return
    yield first
    run, size = [], 0
    for part in partitions:
        if run and size + part.n_residues > limit:
            yield run[0] if len(run) == 1 else SequenceBatch.concat(run)
            run, size = [], 0
        run.append(part)
        size += part.n_residues
    if run:
        yield run[0] if len(run) == 1 else SequenceBatch.concat(run)


def _scored(job: SearchJob, partitions, device: str):
    """``(subjects, passes, span)`` in store order: ``subjects`` a partition, or on the GPU
    a run of them (:func:`_gpu_groups`); ``passes`` its ``(q0, q1, candidates, kernel
    seconds)`` for each chunk of query rows; ``span`` the ``(start, end)`` of its scoring
    (``time.perf_counter``).  On a real GPU :data:`GPU_SCORE_LANES` runs are scored at
    once."""
    batch = job.rows
    if device == "gpu":
        partitions = _gpu_groups(partitions)

    def score(part):
        start = time.perf_counter()
        rows_per_chunk = plan.rows_per_pass(device, len(part), len(batch))
        passes = []
        for q0 in range(0, len(batch), rows_per_chunk):
            q1 = min(len(batch), q0 + rows_per_chunk)
            q_off = batch.offsets[q0:q1 + 1] - batch.offsets[q0]
            q_res = batch.residues[batch.offsets[q0]:batch.offsets[q1]]
            passes.append((q0, q1, *tasks.score_pass(
                device, q_res, q_off, part.residues, part.offsets, job.scoring, job.mode,
                job.max_hits, job.min_score, part.seq_id)))
        return part, passes, (start, time.perf_counter())

    lanes = GPU_SCORE_LANES if backend.score_passes_at_once(device) else 1
    if lanes == 1:
        yield from map(score, partitions)
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(lanes, thread_name_prefix="swdask-score") as pool:
        running = deque()
        for part in partitions:
            running.append(pool.submit(score, part))
            if len(running) == lanes:
                yield running.popleft().result()
        while running:
            yield running.popleft().result()


def _covered(spans) -> float:
    """Seconds during which at least one of the ``(start, end)`` spans ran.

    >>> _covered([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)])
    4.0
    """
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def _run(job: SearchJob, progress, device="cpu", partitions=None):
    batch, max_hits = job.rows, job.max_hits  # a DNA query's strands are rows of their own
    origin, minus = job.row_position, job.row_minus
    if partitions is None:
        partitions = SequenceStore.open(job.store_path).iter_partitions(read_ahead=device == "gpu")
    n_queries = len(job.queries)
    top = _TopHits(n_queries, max_hits)
    cells = 0
    score_seconds = 0.0
    names = {}
    bar = progress_bar(progress, desc="search", unit="cell", unit_scale=True, total=job.cells)
    # A GPU search imports what it needs after the score pass once its first part is
    # scored, while this thread waits on the GPU (AFTER_FIRST_PASS).
    import_after = device == "gpu" and not all(m in sys.modules for m in AFTER_FIRST_PASS)
    with bar:
        # The GPU scores a run of files while the next one is read and decoded.
        spans = []
        for part, passes, span in _scored(job, partitions, device):
            spans.append(span)
            for q0, q1, candidates, seconds in passes:
                if import_after:
                    import_after = False
                    import_beside(*AFTER_FIRST_PASS)
                score_seconds += seconds
                work = int(batch.lengths[q0:q1].sum()) * part.n_residues
                cells += work
                bar.update(work)
                for row, found in enumerate(candidates):
                    keep, scores, q_end, s_end = tasks.best_of(found, part.seq_id, max_hits)
                    top.add(int(origin[q0 + row]), int(minus[q0 + row]), scores,
                            part.seq_id[keep], q_end, s_end,
                            [part.codes(int(c)).copy() for c in keep])
                    for c in keep:
                        names[int(part.seq_id[c])] = part.names[int(c)]
    if device == "gpu":  # the kernel seconds of partitions scored at once overlap
        score_seconds = _covered(spans)

    tick = time.perf_counter()
    work, strands = [], []
    queries = job.queries
    for qi in range(n_queries):
        for rank, (score, seq_id, flip, qe, se, subject) in enumerate(top.result(qi), start=1):
            work.append((queries.names[qi], int(queries.seq_id[qi]), job.query_codes(qi, flip),
                         names[seq_id], seq_id, subject, score, qe, se, rank))
            strands.append(flip)
    if job.evalue is not None and work:  # cut before the traceback, ranks renumbered
        keep = tasks.within_evalue(job, [w[6] for w in work], [len(w[2]) for w in work],
                                   [len(w[5]) for w in work])
        work = [w for w, k in zip(work, keep) if k]
        strands = [f for f, k in zip(strands, keep) if k]
        rank = 0
        for k, w in enumerate(work):
            rank = rank + 1 if k and w[1] == work[k - 1][1] else 1
            work[k] = (*w[:9], rank)
    rows = tasks.trace(work, job.scoring, job.mode, device)
    frame = tasks.hits_frame(tasks.on_strands(rows, strands, job.stranded))
    if job.statistics:
        frame = tasks.statistics(frame, job)
    traceback_seconds = time.perf_counter() - tick
    stats = {"n_queries": n_queries, "n_subjects": job.db_sequences, "cells": cells,
             "score_seconds": score_seconds, "traceback_seconds": traceback_seconds,
             "n_hits": len(frame), "queries_at_max_hits": tasks.queries_at(frame, max_hits)}
    return frame, stats
