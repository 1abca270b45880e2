"""A search's tasks: the score pass of a partition, the merge tree of candidates, the
traceback of a batch of queries, and their typed statistics.

The score pass (:func:`score_pass`) and the traceback (:func:`trace`) serve both engines:
the Dask tasks here and :func:`swdask.jobs.search.api.search_in_process`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ... import backend
from ...kernels.cpu.threads import kernel_threads
from ...parquet_schemas import HITS, SCORES
from ...scoring.statistics import annotate
from ...sequences.batch import join_runs, list_arrays
from ...sequences.store import read_part
from ...tables import check_table, numpy_dtype, numpy_of, to_pandas
from ..align import alignment_from_codes
from ..base import TaskStats, stat
from .plan import SearchJob, SearchStats, rows_per_pass

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import numpy.typing as npt
    import pandas as pd

    from ...scoring import Scoring

__all__ = [
    "Candidates",
    "ScoreStats",
    "TraceStats",
    "best_of",
    "candidates_frame",
    "hit_row",
    "hits_frame",
    "merge_candidates",
    "on_strands",
    "queries_at",
    "score_partition",
    "score_pass",
    "search_stats",
    "split_candidates",
    "statistics",
    "trace",
    "traceback_batch",
]

_SUBJECT_COLUMNS = ("seq_id", "name", "length", "residues")
_HIT_COLUMNS = ("query", "subject", "score", "identity", "align_length", "mismatches",
                "gap_opens", "query_start", "query_end", "subject_start", "subject_end", "cigar",
                "query_length", "subject_length", "query_id", "subject_id", "rank", "strand")
# Positions in a row of hit_row of the query's aligned region and length.
_QUERY_START, _QUERY_END, _QUERY_LENGTH = (_HIT_COLUMNS.index(name) for name in
                                           ("query_start", "query_end", "query_length"))
#: The score table is built inside the score task and never handed out: its numbers keep
#: NumPy's dtypes, its subjects' names and residues stay Arrow arrays (no Python object a
#: row; pickled as Arrow buffers between workers).
_SCORES_DTYPES = {f.name: numpy_dtype(f.type) for f in SCORES if pa.types.is_integer(f.type)}


# --------------------------------------------------------------------------------------
# typed statistics
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoreStats(TaskStats):
    """What score tasks did: kernel seconds and cells, when, on which devices and workers."""

    kernel_seconds: float = 0.0
    cells: int = 0
    started: float = stat("min")
    finished: float = stat("max")
    devices: str = stat("join")
    workers: frozenset = stat("union")


@dataclass(frozen=True)
class TraceStats(TaskStats):
    """What traceback tasks did."""

    traceback_seconds: float = 0.0
    started: float = stat("min")
    finished: float = stat("max")
    n_hits: int = 0
    queries_at_max_hits: int = 0


@dataclass(frozen=True)
class Candidates:
    """Each query's best candidates so far (schema ``SCORES``) and what scored them."""

    table: pd.DataFrame
    stats: ScoreStats


def search_stats(job: SearchJob, scored: ScoreStats, traced: Iterable[TraceStats], *, n_queries: int,
                 n_subjects: int, cells: int) -> SearchStats:
    """The :class:`SearchStats` of a Dask search from its tasks' records."""
    traced = sum(traced, TraceStats())
    if scored.cells != cells:  # every partition was scored exactly once
        raise AssertionError(f"search stats: {scored.cells} cells scored, expected {cells}")
    return SearchStats(
        n_queries=n_queries, n_subjects=n_subjects, cells=cells,
        score_seconds=scored.kernel_seconds, traceback_seconds=traced.traceback_seconds,
        total_seconds=max(scored.finished, traced.finished) - scored.started,
        n_hits=traced.n_hits, workers=len(scored.workers), device=scored.devices,
        strands=job.strands, max_hits=job.max_hits,
        queries_at_max_hits=traced.queries_at_max_hits)


def queries_at(hits: pd.DataFrame, max_hits: int) -> int:
    """How many queries of a hits table have ``max_hits`` hits (and may have more)."""
    counts = hits["query_id"].value_counts(sort=False)
    return int((counts.to_numpy() >= max_hits).sum())


# --------------------------------------------------------------------------------------
# the score pass
# --------------------------------------------------------------------------------------


def score_partition(job: SearchJob, task: int) -> Candidates:
    """Each query's best candidates in score task ``task`` of the job (schema SCORES):
    its pieces, each a store file or some of its row groups
    (:func:`swdask.jobs.search.plan.score_tasks`).

    The task reads its Parquet files itself, straight to arrays, only its row groups
    (columns checked: a damaged file names the file and the column).  Each candidate
    carries its subject's name and residues from this read, as the in-process search's
    candidates do, so the traceback tasks read no store file: they had to decode most of
    the database again on every worker, since any batch's best hits are spread over it.
    """
    started = time.time()
    seq_ids, offset_runs, residue_runs, name_chunks = [], [], [], []
    for part in (job.pieces[k] for k in job.tasks[task]):
        table = read_part(job.files[part.number], list(_SUBJECT_COLUMNS),
                          row_groups=None if part.row_groups is None else list(part.row_groups))
        seq_ids.append(numpy_of(table.column("seq_id")))
        part_offsets, part_residues = list_arrays(table.column("residues"))
        offset_runs.append(part_offsets)
        residue_runs.append(part_residues)
        name_chunks.extend(table.column("name").chunks)
    offsets, residues = join_runs(offset_runs, residue_runs)  # as SequenceBatch.concat joins
    seq_id = _joined(seq_ids)
    device = job.task_device()
    batch = job.rows  # a DNA query's strands are rows of their own
    n_queries, n_subjects = len(batch), len(seq_id)
    rows_per_chunk = rows_per_pass(device, n_subjects, n_queries)
    names = pa.chunked_array(name_chunks, pa.string())
    frames = []  # a chunk's candidates cut to each query's best at once (memory)
    kernel_seconds = 0.0
    for q0 in range(0, n_queries if n_subjects else 0, rows_per_chunk):
        q1 = min(n_queries, q0 + rows_per_chunk)
        q_off = batch.offsets[q0:q1 + 1] - batch.offsets[q0]
        q_res = batch.residues[batch.offsets[q0]:batch.offsets[q1]]
        with backend.score_pass_lock(device):  # a GPU worker's 2 tasks overlap
            candidates, seconds = score_pass(device, q_res, q_off, residues, offsets,
                                             job.scoring, job.mode, job.max_hits, job.min_score,
                                             seq_id)
        kernel_seconds += seconds
        frames.append(candidates_frame(job, list(enumerate(candidates, start=q0)), seq_id,
                                       offsets, residues, names))
    frames = frames or [candidates_frame(job, [], seq_id, offsets, residues, names)]
    if len(frames) > 1:
        import pandas as pd

        frames = [pd.concat(frames, ignore_index=True)]
    return Candidates(frames[0], ScoreStats(
        kernel_seconds=kernel_seconds, cells=int(batch.lengths.sum()) * int(offsets[-1]),
        started=started, finished=time.time(), devices=device,
        workers=frozenset([backend.worker_name()])))


def candidates_frame(job: SearchJob, found_rows: Sequence[tuple[int, tuple]],
                     seq_id: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64],
                     residues: npt.NDArray[np.uint8], names: pa.ChunkedArray) -> pd.DataFrame:
    """A score task's table (schema SCORES): each query row's ``max_hits`` best of its
    candidates (:func:`best_of`), with their subjects' names and residues.

    Parameters
    ----------
    job : SearchJob
    found_rows : sequence of (int, tuple)
        ``(row, found)``: a row of ``job.rows`` and its candidates as :func:`score_pass`
        gives them (positions in the task's subjects, scores, ends).
    seq_id, offsets, residues, names
        The task's subjects: ids, residues as offsets and codes, names.
    """
    import pandas as pd  # on the Dask path only: the in-process search imports it late

    batch, minus = job.rows, job.row_minus
    columns = {name: [] for name in _SCORES_DTYPES}
    taken = []  # each candidate's subject: its position in the task's arrays
    for row, found in found_rows:
        keep, scores, q_end, s_end = best_of(found, seq_id, job.max_hits)
        columns["query_id"].append(np.full(keep.size, batch.seq_id[row], np.int64))
        columns["subject_id"].append(seq_id[keep])
        columns["score"].append(scores)
        columns["query_end"].append(q_end)
        columns["subject_end"].append(s_end)
        columns["subject_length"].append((offsets[keep + 1] - offsets[keep]).astype(np.int32))
        columns["minus"].append(np.full(keep.size, minus[row], np.int32))
        taken.append(keep)
    frame = pd.DataFrame({
        name: np.concatenate([np.empty(0, dtype)] + parts).astype(dtype, copy=False)
        for (name, dtype), parts in zip(_SCORES_DTYPES.items(), columns.values())})
    at = pa.array(np.concatenate([np.empty(0, np.int64)] + taken))
    subjects = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(seq_id), [None, pa.py_buffer(offsets.astype(np.int64, copy=False)),
                                         pa.py_buffer(residues)])
    frame["subject"] = pd.arrays.ArrowExtensionArray(names.take(at).combine_chunks())
    frame["residues"] = pd.arrays.ArrowExtensionArray(subjects.take(at))
    return frame[list(SCORES.names)]


def _joined(runs: list[np.ndarray]) -> np.ndarray:
    """The arrays of a task's pieces end to end (one piece's as it was read: no copy)."""
    return runs[0] if len(runs) == 1 else np.concatenate(runs)


def score_pass(device: str, q_res: npt.NDArray[np.uint8], q_off: npt.NDArray[np.int64],
               s_res: npt.NDArray[np.uint8], s_off: npt.NDArray[np.int64], scoring: Scoring,
               mode: str, max_hits: int, min_score: int | None,
               seq_id: npt.NDArray[np.int64] | None = None,
               ) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], float]:
    """Candidate hits of some queries against some subjects, and the kernel seconds.

    One ``(columns, scores, query_ends, subject_ends)`` per query: at least every
    subject that can be among the query's ``max_hits`` best scoring ``min_score`` or more
    (ties included; :func:`best_of` ranks them by score, then ``seq_id``).  The GPU
    selects them on the device and ships back only those, and given ``seq_id`` the
    ``max_hits`` best alone, so that only those need their end cells.
    """
    if device == "gpu":
        return backend.top_hits_gpu(q_res, q_off, s_res, s_off, scoring.matrix,
                                    scoring.gap_open, scoring.gap_extend, max_hits, min_score,
                                    mode, ties=seq_id)
    from ...kernels.cpu.score import load_kernel, score_all  # Numba: the CPU path only

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


def best_of(found: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], seq_id: np.ndarray,
            max_hits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A query's ``max_hits`` best candidates of a partition: by score, ties by seq_id."""
    keep, scores, q_end, s_end = found
    if keep.size > max_hits:
        order = np.lexsort((seq_id[keep], -scores.astype(np.int64)))[:max_hits]
        keep, scores, q_end, s_end = keep[order], scores[order], q_end[order], s_end[order]
    return keep, scores, q_end, s_end


def merge_candidates(job: SearchJob, *parts: Candidates) -> Candidates:
    """Each query's ``max_hits`` best of several score tables, sorted by query position,
    score (descending), subject_id and strand (plus first): the order of the hits table.
    A DNA query's two strands compete for its ``max_hits``."""
    tables = [p.table for p in parts if len(p.table)] or [parts[0].table]

    def column(name):
        return np.concatenate([table[name].to_numpy() for table in tables])

    position = job.positions(column("query_id"))
    order = np.lexsort((column("minus"), column("subject_id"),
                        -column("score").astype(np.int64), position))
    sorted_position = position[order]
    n = len(order)
    first = np.ones(n, bool)
    first[1:] = sorted_position[1:] != sorted_position[:-1]
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0)) if n else np.zeros(0, int)
    result = _gathered(tables, order[np.arange(n) - start < job.max_hits])
    return Candidates(result, sum((p.stats for p in parts), ScoreStats()))


def _gathered(tables: list[pd.DataFrame], rows: npt.NDArray[np.int64]) -> pd.DataFrame:
    """Rows ``rows`` (positions in ``tables`` end to end) in that order, each taken from its
    own table: a take from the tables' concatenation copied every table's residues first
    (0.38 s to keep 98,000 of 784,000 candidates of 8 tables)."""
    import pandas as pd

    if len(tables) == 1:
        return tables[0].iloc[rows].reset_index(drop=True)
    starts = np.cumsum([0] + [len(table) for table in tables])
    which = np.searchsorted(starts, rows, side="right") - 1
    by_table = np.argsort(which, kind="stable")
    grouped = pd.concat([table.iloc[rows[by_table][which[by_table] == k] - starts[k]]
                         for k, table in enumerate(tables)], ignore_index=True)
    return grouped.iloc[np.argsort(by_table)].reset_index(drop=True)


def split_candidates(job: SearchJob, candidates: Candidates) -> tuple:
    """The merged candidates cut into the query batches of the traceback tasks."""
    table = candidates.table
    position = job.positions(table["query_id"].to_numpy())
    bounds = np.searchsorted(position, np.arange(0, job.n_batches + 1) * job.batch_size)
    return tuple(table.iloc[bounds[b]:bounds[b + 1]].reset_index(drop=True)
                 for b in range(job.n_batches))


# --------------------------------------------------------------------------------------
# the traceback
# --------------------------------------------------------------------------------------


def traceback_batch(job: SearchJob, candidates: pd.DataFrame,
                    batch: int) -> tuple[pd.DataFrame, TraceStats]:
    """Hits of one batch of queries: the candidates' alignments (their subjects' residues
    came with them from the score tasks), E-values and ranks (schema HITS); and the task's
    record."""
    started, tick = time.time(), time.perf_counter()
    queries = job.queries
    if job.evalue is not None and len(candidates):
        position = job.positions(candidates["query_id"].to_numpy())
        candidates = candidates[within_evalue(job, candidates["score"].to_numpy(),
                                              queries.lengths[position],
                                              candidates["subject_length"].to_numpy())]
    position = job.positions(candidates["query_id"].to_numpy())
    work = []
    rank = 0
    for k, row in enumerate(candidates.itertuples(index=False)):
        rank = rank + 1 if k and position[k] == position[k - 1] else 1
        qi = int(position[k])
        work.append((queries.names[qi], int(queries.seq_id[qi]), job.query_codes(qi, row.minus),
                     row.subject, int(row.subject_id), np.frombuffer(row.residues, np.uint8),
                     int(row.score), int(row.query_end), int(row.subject_end), rank))
    traced = backend.trace_device(job.device, job.mode)
    rows = trace(work, job.scoring, job.mode, traced)
    hits = hits_frame(on_strands(rows, candidates["minus"].to_numpy(), job.stranded))
    if job.statistics:
        hits = statistics(hits, job)
    return hits, TraceStats(traceback_seconds=time.perf_counter() - tick, started=started,
                            finished=time.time(), n_hits=len(hits),
                            queries_at_max_hits=queries_at(hits, job.max_hits))


def trace(work: list[tuple], scoring: Scoring, mode: str, device: str = "cpu") -> list[tuple]:
    """Rows of the hits table for ``work``, a list of :func:`hit_row` arguments.

    On the GPU (``device="gpu"``, every mode) all pairs go to
    :func:`swdask.kernels.cuda.traceback.trace_paths` at once.  On the CPU the traceback
    kernel releases the GIL, so the pairs are spread over Numba's thread count (the
    worker's share of the cores).  The largest pairs go first; rows come back in ``work``
    order.
    """
    if device == "gpu" and work:
        from ...kernels.cuda import traceback as gpu_traceback

        if gpu_traceback.fits(scoring.matrix):
            return _trace_gpu(work, scoring, mode, gpu_traceback)
    threads = min(kernel_threads(), len(work))
    if threads <= 1:
        return [hit_row(*item, scoring, mode) for item in work]
    from concurrent.futures import ThreadPoolExecutor

    order = sorted(range(len(work)), key=lambda k: -(work[k][7] * work[k][8]))  # end cells
    rows = [None] * len(work)

    def trace_one(k):
        rows[k] = hit_row(*work[k], scoring, mode)

    with ThreadPoolExecutor(threads, thread_name_prefix="swdask-traceback") as pool:
        for _ in pool.map(trace_one, order):
            pass
    return rows


def _trace_gpu(work, scoring, mode, gpu_traceback) -> list:
    """:func:`trace` on the GPU: paths from the device, described on the host."""
    from ...kernels.paths import cigar_string, summarize_path

    with backend.KERNEL_LOCK:
        scores, starts, paths = gpu_traceback.trace_paths(
            [item[2] for item in work], [item[5] for item in work],
            np.array([(item[7], item[8]) for item in work], dtype=np.int64).reshape(-1, 2),
            scoring.matrix, scoring.gap_open, scoring.gap_extend, mode=mode)
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


def hit_row(query_name: str, query_id: int, query: np.ndarray, subject_name: str,
            subject_id: int, subject: np.ndarray, score: int, q_end: int, s_end: int,
            rank: int, scoring: Scoring, mode: str) -> tuple:
    """One row of the hits table (:data:`_HIT_COLUMNS`): the traceback of a scored pair."""
    aln = alignment_from_codes(query, subject, scoring, mode, end=(q_end, s_end))
    if aln.score != score:  # the score and traceback kernels must agree to the bit
        raise AssertionError(f"kernel mismatch for {query_name} / {subject_name}: "
                             f"score pass {score}, traceback {aln.score}")
    return (query_name, subject_name, score, aln.identity, aln.align_length, aln.mismatches,
            aln.gap_opens, aln.query_start, aln.query_end, aln.subject_start, aln.subject_end,
            aln.cigar, len(query), len(subject), query_id, subject_id, rank)


def on_strands(rows: Iterable[tuple], minus: Iterable[bool], stranded: bool) -> list[tuple]:
    """Rows of :func:`trace` with their strand: ``"plus"``/``"minus"`` where ``stranded``
    (DNA), else None.  A minus-strand row was traced on the query's reverse complement;
    its query region is counted again on the query as given (the CIGAR keeps the subject's
    direction).
    """
    out = []
    for row, flip in zip(rows, minus):
        row = list(row)
        if flip:
            length = row[_QUERY_LENGTH]
            row[_QUERY_START], row[_QUERY_END] = (length - row[_QUERY_END],
                                                  length - row[_QUERY_START])
        out.append((*row, ("minus" if flip else "plus") if stranded else None))
    return out


def hits_frame(rows: Sequence[tuple]) -> pd.DataFrame:
    """The hits table of some rows (:func:`on_strands`), as a pandas DataFrame of HITS's
    dtypes."""
    data = {name: [r[k] for r in rows] for k, name in enumerate(_HIT_COLUMNS)}
    data["evalue"] = pa.nulls(len(rows), pa.float64())
    data["bitscore"] = pa.nulls(len(rows), pa.float64())
    table = pa.table({f.name: pa.array(data[f.name], type=f.type) for f in HITS}, schema=HITS)
    return to_pandas(check_table(table, HITS, where="hits"))


def within_evalue(job: SearchJob, scores: npt.ArrayLike, query_lengths: npt.ArrayLike,
                  subject_lengths: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """Which candidates reach ``job.evalue``: an E-value depends on the score and the
    lengths only, so candidates are cut before their traceback, never after."""
    import pandas as pd

    evalues = statistics(pd.DataFrame({"score": np.asarray(scores),
                                       "query_length": np.asarray(query_lengths),
                                       "subject_length": np.asarray(subject_lengths)}),
                         job)["evalue"]
    return (evalues <= job.evalue).to_numpy(dtype=bool)


def statistics(frame: pd.DataFrame, job: SearchJob) -> pd.DataFrame:
    """``frame`` with BLAST's ``bitscore`` and ``evalue`` over the whole database."""
    return annotate(frame, job.scoring, db_residues=job.db_residues, db_sequences=job.db_sequences)
