"""Database search on one machine: score every pair (CPU SIMD or CUDA kernel),
keep each query's best hits, trace back only those.

The Dask flow (partitions mapped over a cluster, lazy traceback tasks) builds on the
same three steps; this module is the single-process engine and the reference the
distributed search is checked against.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass

import numba
import numpy as np
import pandas as pd
import pyarrow as pa

from .align import alignment_from_codes, check_mode
from .alphabet import get_alphabet
from .errors import DeviceError, EmptyInputError, InvalidSequenceError
from .kernels.cpu.score import score_all
from .parquet_schemas import HITS, check_table
from .scoring import Scoring
from .store import SequenceBatch, SequenceStore, load_sequences, open_database

DEVICES = ("auto", "cpu", "gpu")
#: Bound on the score tables (scores and both ends, int32) held at once for one partition.
SCORE_TABLE_BYTES = 256 * 2**20


@dataclass(frozen=True)
class SearchStats:
    """What a search did: work, time and speed (cells = query length x subject length)."""

    n_queries: int
    n_subjects: int
    cells: int
    score_seconds: float
    traceback_seconds: float
    total_seconds: float
    n_hits: int
    workers: int
    device: str = "cpu"

    @property
    def kernel_gcups(self) -> float:
        """Billions of cells per second of the score pass."""
        return self.cells / self.score_seconds / 1e9 if self.score_seconds else 0.0

    @property
    def gcups(self) -> float:
        """Billions of cells per second, end to end (reading, scoring, traceback)."""
        return self.cells / self.total_seconds / 1e9 if self.total_seconds else 0.0


def check_device(device: str, mode: str = "local") -> str:
    """The backend that runs a search's score pass: ``"gpu"`` or ``"cpu"``.

    ``"auto"`` takes a real GPU when Numba sees one and the mode is local, else the CPU;
    ``"gpu"`` insists (the CUDA simulator counts, for tests) and raises
    :class:`DeviceError` when there is none or the mode has no GPU kernel yet.
    """
    from .gpu import gpu_available, require_gpu, simulator_enabled

    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; choose one of: {', '.join(DEVICES)}")
    if device == "gpu":
        require_gpu()
        if mode != "local":
            raise DeviceError(f"--device gpu: the GPU kernels compute local alignments; run "
                              f"--mode {mode} with --device cpu (or auto)")
        return "gpu"
    if device == "auto" and mode == "local" and not simulator_enabled() and gpu_available():
        return "gpu"
    return "cpu"


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


def search(queries, database, *, scoring: Scoring | None = None, mode: str = "local",
           max_hits: int = 50, min_score: int | None = None, device: str = "auto",
           workers: int | None = None, alphabet="auto", map_unknown: bool = False,
           progress: bool = False, return_stats: bool = False):
    """Search queries against a database; exact scores and full alignments of the best hits.

    Parameters
    ----------
    queries : path, SequenceBatch, dict or list of str
        A FASTA/FASTQ file or sequence store, a batch, ``{name: sequence}``, or sequences.
    database : path or SequenceStore
        A sequence store (see :func:`swdask.ingest`) or a FASTA/FASTQ file, which is
        ingested into a temporary store first.
    scoring : Scoring, optional
        Default: BLAST's default for the database's alphabet (BLOSUM62 11/1, DNA 2/-3 5/2).
    mode : {"local", "global", "semiglobal"}, default "local"
    max_hits : int, default 50
        Hits kept per query: the highest scores, ties broken by database order.
    min_score : int, optional
        Report only hits scoring at least this.  Default: 1 for local mode (a score of
        0 is no alignment), none otherwise.
    device : {"auto", "cpu", "gpu"}, default "auto"
        Where the score pass runs: ``"auto"`` takes a GPU when Numba sees one (local mode),
        else the CPU; ``"gpu"`` requires one (or ``NUMBA_ENABLE_CUDASIM=1``, the simulator).
        Scores, ends and alignments are identical on every device.
    workers : int, optional
        CPU threads for the score kernel (default: all cores).
    alphabet : {"auto", "protein", "dna"}, default "auto"
        Alphabet of the query and database files; "auto" detects each from its first
        records, and queries and database must then agree.
    map_unknown : bool, default False
        Read letters outside the alphabet as ``X``/``N`` instead of failing.
    progress : bool, default False
        Show a progress bar (cells) on stderr.
    return_stats : bool, default False
        Also return a :class:`SearchStats`.

    Returns
    -------
    pandas.DataFrame
        The hits table (schema ``swdask.parquet_schemas.HITS``), queries in input order,
        hits by rank.  ``evalue`` and ``bitscore`` are null in this version.
    SearchStats
        Only with ``return_stats=True``.

    Raises
    ------
    ValueError
        Bad ``mode``, ``device``, ``max_hits`` or ``workers``, or the queries, database and
        scoring are of different alphabets.
    DeviceError
        ``device="gpu"`` without a GPU, or with a mode other than local.
    EmptyInputError, InvalidSequenceError, SequenceFormatError, InputNotFoundError
        Bad input files (see :func:`swdask.ingest`).

    Examples
    --------
    >>> from importlib.resources import files
    >>> data = files("swdask") / "data"
    >>> hits = search(data / "demo_queries.fasta", data / "demo_db.fasta.gz", max_hits=2)
    >>> print(hits[["query", "subject", "score", "cigar", "rank"]].head(2).to_string(index=False))
                  query               subject  score cigar  rank
    sp|Q91G65|032R_IIV6   sp|Q91G65|032R_IIV6    532  100=     1
    sp|Q91G65|032R_IIV6 sp|Q55DQ2|ABCGB_DICDI     49 1=1X1=1X1=1X1=2X1=1X2=1X2=4D1X1=1X1=1X1=     2
    """
    started = time.perf_counter()
    check_mode(mode)
    backend = check_device(device, mode)
    if isinstance(max_hits, bool) or not isinstance(max_hits, (int, np.integer)) or max_hits < 1:
        raise ValueError(f"max_hits must be a positive whole number, got {max_hits!r}")
    if min_score is not None and (isinstance(min_score, bool)
                                  or not isinstance(min_score, (int, np.integer))):
        raise ValueError(f"min_score must be a whole number, got {min_score!r}")
    threads = _threads(workers)
    store = database if isinstance(database, SequenceStore) else None
    if store is None:
        db_alphabet = scoring.alphabet if scoring is not None and alphabet == "auto" else alphabet
        store = open_database(database, alphabet=db_alphabet, map_unknown=map_unknown)
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
        if min_score is None and mode == "local":
            min_score = 1
        previous = numba.get_num_threads()
        numba.set_num_threads(threads)
        try:
            table, stats = _run(batch, store, scoring, mode, int(max_hits), min_score, progress,
                                backend)
        finally:
            numba.set_num_threads(previous)
    finally:
        if getattr(store, "temporary", False):
            shutil.rmtree(store.path, ignore_errors=True)
    stats = SearchStats(**stats, total_seconds=time.perf_counter() - started, workers=threads,
                        device=backend)
    frame = table.to_pandas(types_mapper=_types_mapper)
    return (frame, stats) if return_stats else frame


def _types_mapper(arrow_type):
    # Nullable float columns stay float64 with NaN would hide nulls; keep pandas' masks.
    if arrow_type == pa.float64():
        return pd.Float64Dtype()
    if arrow_type == pa.int32():
        return pd.Int32Dtype()
    if arrow_type == pa.int64():
        return pd.Int64Dtype()
    if arrow_type == pa.string():
        return pd.StringDtype()
    return None


def _threads(workers) -> int:
    available = numba.config.NUMBA_NUM_THREADS
    if workers is None:
        return available
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be a positive whole number, got {workers!r}")
    return min(int(workers), available)


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


def _score_pass(backend, q_res, q_off, part, scoring, mode, max_hits, min_score):
    """Candidate hits of some queries in one partition, and the kernel seconds.

    One ``(columns, scores, query_ends, subject_ends)`` per query: at least every
    subject that can be among the query's ``max_hits`` best scoring ``min_score`` or more
    (ties included).  The GPU selects them on the device and ships back only those.
    """
    if backend == "gpu":
        from .gpu import top_hits_gpu

        return top_hits_gpu(q_res, q_off, part.residues, part.offsets, scoring.matrix,
                            scoring.gap_open, scoring.gap_extend, max_hits, min_score)
    tick = time.perf_counter()
    scores, q_end, s_end = score_all(q_res, q_off, part.residues, part.offsets, scoring.matrix,
                                     scoring.gap_open, scoring.gap_extend, mode)
    seconds = time.perf_counter() - tick
    candidates = []
    for row in range(scores.shape[0]):
        cols = (np.arange(scores.shape[1]) if min_score is None
                else np.flatnonzero(scores[row] >= min_score))
        candidates.append((cols, scores[row, cols], q_end[row, cols], s_end[row, cols]))
    return candidates, seconds


def _run(batch, store, scoring, mode, max_hits, min_score, progress, backend="cpu"):
    n_queries = len(batch)
    top = _TopHits(n_queries, max_hits)
    cells = 0
    score_seconds = 0.0
    bar = _progress(progress, int(batch.lengths.sum()) * store.n_residues)
    names = {}
    for part in store.iter_partitions():
        n_subjects = len(part)
        rows_per_chunk = max(1, SCORE_TABLE_BYTES // (12 * max(n_subjects, 1)))
        for q0 in range(0, n_queries, rows_per_chunk):
            q1 = min(n_queries, q0 + rows_per_chunk)
            q_off = batch.offsets[q0:q1 + 1] - batch.offsets[q0]
            q_res = batch.residues[batch.offsets[q0]:batch.offsets[q1]]
            candidates, seconds = _score_pass(backend, q_res, q_off, part, scoring, mode,
                                              max_hits, min_score)
            score_seconds += seconds
            work = int(batch.lengths[q0:q1].sum()) * part.n_residues
            cells += work
            if bar is not None:
                bar.update(work)
            for row, (keep, scores, q_end, s_end) in enumerate(candidates):
                if keep.size > max_hits:
                    # Top max_hits by score, ties by seq_id.
                    order = np.lexsort((part.seq_id[keep], -scores.astype(np.int64)))[:max_hits]
                    keep, scores, q_end, s_end = keep[order], scores[order], q_end[order], s_end[order]
                top.add(q0 + row, scores, part.seq_id[keep], q_end, s_end,
                        [part.codes(int(c)).copy() for c in keep])
                for c in keep:
                    names[int(part.seq_id[c])] = part.names[int(c)]
    if bar is not None:
        bar.close()

    tick = time.perf_counter()
    rows = []
    for qi in range(n_queries):
        query = batch.codes(qi)
        for rank, (score, seq_id, qe, se, subject) in enumerate(top.result(qi), start=1):
            aln = alignment_from_codes(query, subject, scoring, mode, end=(qe, se))
            if aln.score != score:  # the score and traceback kernels must agree to the bit
                raise AssertionError(f"kernel mismatch for {batch.names[qi]} / {names[seq_id]}: "
                                     f"score pass {score}, traceback {aln.score}")
            rows.append((batch.names[qi], names[seq_id], score, aln.identity, aln.align_length,
                         aln.mismatches, aln.gap_opens, aln.query_start, aln.query_end,
                         aln.subject_start, aln.subject_end, aln.cigar, len(query), len(subject),
                         int(batch.seq_id[qi]), seq_id, rank))
    traceback_seconds = time.perf_counter() - tick
    columns = ["query", "subject", "score", "identity", "align_length", "mismatches",
               "gap_opens", "query_start", "query_end", "subject_start", "subject_end", "cigar",
               "query_length", "subject_length", "query_id", "subject_id", "rank"]
    data = {name: [r[k] for r in rows] for k, name in enumerate(columns)}
    data["evalue"] = pa.nulls(len(rows), pa.float64())
    data["bitscore"] = pa.nulls(len(rows), pa.float64())
    table = pa.table({f.name: pa.array(data[f.name], type=f.type) for f in HITS}, schema=HITS)
    table = check_table(table, HITS, where="hits")
    stats = dict(n_queries=n_queries, n_subjects=store.n_records, cells=cells,
                 score_seconds=score_seconds, traceback_seconds=traceback_seconds,
                 n_hits=len(rows))
    return table, stats


def _progress(enabled, total):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="cell", unit_scale=True, desc="search", file=sys.stderr,
                leave=False)
