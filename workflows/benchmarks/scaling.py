"""Scaling benchmark: the same job on 1 and N workers of one machine (issue 18).

For each job of ``--jobs`` it starts a cluster of 1 worker, then one of ``--workers`` N
(``swdask.cluster(n_workers=...)``: a dask-cuda ``LocalCUDACluster``, one worker per GPU,
for ``--device gpu``; a ``LocalCluster`` of worker processes with ``--cpu-threads`` Numba
threads each for ``--device cpu``), and in each cluster runs the job: an untimed warm-up
on a smaller input (the same kinds of tasks; repeated, at most 3 times, until every worker
has run one of its kernel tasks, so that each has loaded its kernels), then the timed run.
It prints, for each job: the wall time on 1 and N workers, their ratio, whether the outputs are
identical (the result tables compared exactly), and the **busy share of each worker**
from Dask's task stream (``distributed.get_task_stream``): the time at least one of its
tasks ran over the wall time, and apart the same for its kernel tasks (search score
tasks, all-pairs block pairs, long-alignment tiles), with a one-line picture of each
worker's timeline, its **task counts** (all, kernel tasks, and by kind) and when its
first kernel task started.  For the search it also prints, per worker, its score tasks'
phases from wrappers installed on the workers for the timed run (:func:`log_score_phases`):
when each store read, score pass (with its kernel seconds) and table ran.

Jobs:

``search``
    ``--queries`` (default ``tests/data/sprot196.fasta``, 196 queries) against ``--db``
    (default ``tests/data/sprot12071.fasta.gz``) replicated ``--copies`` times (default 21:
    102.6 M residues; ``gpu_dask_search.replicate``), ingested once into a store (not
    timed); BLOSUM62 11/1, local, ``--max-hits`` 10: ``swdask.search(...)`` computed with
    ``swdask.cluster.compute``.  Warm-up: the same queries against one copy of ``--db``.
``allpairs``
    ``--genes`` (default ``tests/data/16S_200.fna.gz``), ``--max-genes`` of them drawn at
    random (seeded; 0 = all), ingested once into a store (not timed); global, DNA 2/-3,
    gaps 5/2, identity >= 0.97: ``swdask.write_all_pairs(..., client=client)``, what
    ``swdask allpairs --workers N`` runs; the output folder is read back and compared.
    Warm-up: ``--warmup-genes`` of them.
``long``
    ``--window`` residues of ``--chromosome`` from ``--window-start`` against a planted
    mutated copy (a mutation every ``--spacing``: ``swdask.testing.planted_copy``, as in
    ``long_align.py``): ``swdask.align_long(..., client=client)``, score pass (with
    ``--long-traceback`` the traceback too); the planted score is checked.  Warm-up: a
    tenth of the window (at least 5,000 residues).

The machine (CPU model, cores, GPU names from ``nvidia-smi``), the workload and every run
(wall time, the job's own statistics, each worker's busy share) go to ``--json``, rewritten
after each run so that a cut-off run keeps what it finished.  ``--task-stream DIR`` also
writes each timed run's task stream as CSV (worker, key, kind, start, stop; seconds from
the run's start) and, with ``--html``, Dask's Bokeh plot of it.

On a machine with 2 GPUs, from the repository root (kernel cache filled; about 8 minutes
for the defaults on 2 H100s)::

    python workflows/benchmarks/scaling.py --device gpu --workers 2 \\
        --genes .data/refseq_16S.fna.gz --chromosome .data/NCTC11397_chromosome.fna.gz \\
        --json scaling_gpu.json --task-stream scaling_streams

The CPU version (``--device cpu``: LocalCluster, 1 vs 2 workers of ``--cpu-threads`` 1
each, small inputs; ``--quick`` is CI's smoke run, under a minute on 2 cores)::

    python workflows/benchmarks/scaling.py --device cpu --quick --json scaling_cpu.json

The bars of issue 18 (1.9 x for search and all-pairs, 1.7 x for the long pair from 1 to 2
GPUs) are reported, not enforced: the exit status is 1 only when outputs differ between
1 and N workers or the planted score is missed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
JOBS = ("search", "allpairs", "long")
#: Issue 18's bars: speed-up from 1 to 2 GPUs.
BARS = {"search": 1.9, "allpairs": 1.9, "long": 1.7}
#: Characters of a worker's timeline picture.
TIMELINE_WIDTH = 60

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_wall import machine, planted_pair, write_genes  # noqa: E402
from gpu_dask_search import replicate  # noqa: E402  (the GPU benchmark's database)

# --------------------------------------------------------------------------------------
# the task stream: what each worker did
# --------------------------------------------------------------------------------------

#: Key prefixes of the tasks that run a job's kernels, and of the others worth naming.
#: (Names only label this report; swdask routes tasks by their function, never by key.)
TASK_KINDS = (("swdask_score-", "score", True), ("swdask-allpairs-write-", "block pair", True),
              ("swdask-allpairs-", "block pair", True), ("swdask-tile-best-", "tile best", False),
              ("swdask-tile-", "tile", True), ("merge_candidates-", "merge", False),
              ("split_candidates-", "split", False), ("traceback_batch-", "traceback", False),
              ("_trace_tile-", "tile traceback", False))


def task_kind(key) -> tuple[str, bool]:
    """What a task is, from its key: ``(kind, runs kernels)``.

    Examples
    --------
    >>> task_kind(("swdask_score-0123abcd", 4)), task_kind("swdask-tile-best-ab-0-1")
    (('score', True), ('tile best', False))
    """
    from dask.utils import key_split

    name = str(key[0] if isinstance(key, tuple) else key)
    for prefix, kind, kernel in TASK_KINDS:
        if name.startswith(prefix):
            return kind, kernel
    return key_split(key), False


def union_seconds(spans) -> float:
    """Seconds covered by at least one of the ``(start, stop)`` spans.

    Examples
    --------
    >>> union_seconds([(0, 2), (1, 3), (5, 6)])
    4
    """
    total, end = 0, None
    for start, stop in sorted(spans):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def stream_rows(records, t0: float) -> list[dict]:
    """The compute spans of a task stream (``get_task_stream().data``), seconds from
    ``t0``: ``worker``, ``key``, ``kind``, ``kernel``, ``start``, ``stop``."""
    rows = []
    for record in records:
        kind, kernel = task_kind(record["key"])
        for part in record.get("startstops", ()):
            if part["action"] == "compute":
                rows.append({"worker": record["worker"], "key": str(record["key"]), "kind": kind,
                             "kernel": kernel, "start": part["start"] - t0,
                             "stop": part["stop"] - t0})
    return sorted(rows, key=lambda r: (r["worker"], r["start"]))


def timeline(spans, kernel_spans, wall: float, width: int = TIMELINE_WIDTH) -> str:
    """A worker's run as ``width`` characters: ``#`` a kernel task ran most of that
    slot, ``+`` another task, ``.`` idle."""
    out = []
    for k in range(width):
        a, b = wall * k / width, wall * (k + 1) / width

        def covered(runs, a=a, b=b):
            return union_seconds([(max(s, a), min(e, b)) for s, e in runs if e > a and s < b])

        if covered(kernel_spans) >= (b - a) / 2:
            out.append("#")
        elif covered(spans) >= (b - a) / 2:
            out.append("+")
        else:
            out.append(".")
    return "".join(out)


def busy_shares(rows: list[dict], workers: dict, wall: float) -> list[dict]:
    """Per worker (``workers``: address -> name; a worker without tasks counts too): its
    tasks, their summed seconds, the seconds and share of the wall time in which at least
    one ran (``busy``), the same for its kernel tasks, and its timeline picture."""
    out = []
    for address, name in sorted(workers.items(), key=lambda item: str(item[1])):
        mine = [r for r in rows if r["worker"] == address]
        spans = [(r["start"], r["stop"]) for r in mine]
        kernel = [(r["start"], r["stop"]) for r in mine if r["kernel"]]
        busy, kernel_busy = union_seconds(spans), union_seconds(kernel)
        kinds = {}
        for r in mine:
            kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
        out.append({"worker": str(name), "address": address, "tasks": len(mine),
                    "task_kinds": kinds, "task_seconds": sum(b - a for a, b in spans),
                    "busy_seconds": busy, "busy_share": busy / wall if wall else 0.0,
                    "kernel_tasks": len(kernel), "kernel_seconds": sum(b - a for a, b in kernel),
                    "kernel_busy_seconds": kernel_busy,
                    "kernel_busy_share": kernel_busy / wall if wall else 0.0,
                    "last_task_end": max((b for _, b in spans), default=0.0),
                    "first_kernel_start": min((a for a, _ in kernel), default=None),
                    "timeline": timeline(spans, kernel, wall)})
    return out


def write_stream(rows: list[dict], path: Path) -> None:
    """The task stream as CSV: one line a task's compute span."""
    import csv

    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["worker", "key", "kind", "kernel", "start", "stop"])
        writer.writeheader()
        writer.writerows(rows)


# --------------------------------------------------------------------------------------
# outputs compared exactly
# --------------------------------------------------------------------------------------


def fingerprint(frame) -> str:
    """SHA-256 of a table's columns, dtypes and values (rows in order), to record in the
    JSON; :func:`same_output` compares the tables themselves."""
    import pandas as pd

    digest = hashlib.sha256(repr([(c, str(t)) for c, t in frame.dtypes.items()]).encode())
    digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def same_output(a, b) -> bool:
    """Whether two outputs are identical: tables equal value for value (same columns and
    dtypes, rows in the same order; not the index, which a computed Dask frame numbers
    per partition, and the partitions follow the workers), other results equal."""
    import pandas as pd

    if isinstance(a, pd.DataFrame) or isinstance(b, pd.DataFrame):
        return (isinstance(a, pd.DataFrame) and isinstance(b, pd.DataFrame)
                and list(a.dtypes) == list(b.dtypes)
                and a.reset_index(drop=True).equals(b.reset_index(drop=True)))
    return a == b


# --------------------------------------------------------------------------------------
# the search's score-task phases, logged on the workers
# --------------------------------------------------------------------------------------


def log_score_phases() -> None:
    """On a worker: wrap the score task's store read (``read_part``), score pass and
    table (``candidates_frame``) in ``swdask.jobs.search.tasks`` so that each call logs
    ``(phase, start, end, kernel seconds)`` (wall clock), and empty the log.  A profile of
    the score tasks' time outside their kernels, without changing swdask."""
    from swdask.jobs.search import tasks

    log = getattr(tasks, "_phase_log", None)
    if log is not None:
        log.clear()
        return
    log = tasks._phase_log = []

    def timed(phase, function):
        def call(*args, **kwargs):
            start = time.time()
            result = function(*args, **kwargs)
            seconds = result[1] if phase == "pass" else 0.0
            log.append((phase, start, time.time(), seconds))
            return result
        return call

    tasks.read_part = timed("read", tasks.read_part)
    tasks.score_pass = timed("pass", tasks.score_pass)
    tasks.candidates_frame = timed("table", tasks.candidates_frame)


def score_phases() -> list:
    """On a worker: the log :func:`log_score_phases` keeps."""
    from swdask.jobs.search import tasks

    return list(getattr(tasks, "_phase_log", []))


def phase_summary(log: list, t0: float) -> str:
    """One line of a worker's score-task phases: each phase's spans (seconds from the
    run's start) and, for the passes, their kernel seconds."""
    parts = []
    for phase in ("read", "pass", "table"):
        spans = sorted((start - t0, end - t0, k) for p, start, end, k in log if p == phase)
        if not spans:
            continue
        text = ", ".join(f"{a:.3f}-{b:.3f}" for a, b, _ in spans)
        if phase == "pass":
            text += f" (kernel {sum(k for _, _, k in spans):.3f} s)"
        parts.append(f"{phase} {text}")
    return "; ".join(parts)


# --------------------------------------------------------------------------------------
# the jobs: inputs made once, then run(client, warm) on each cluster
# --------------------------------------------------------------------------------------


class SearchJob:
    """``--queries`` against ``--db`` x ``--copies`` (a store made once)."""

    name = "search"

    def __init__(self, args, scratch: Path):
        import swdask
        from swdask.sequences.store import load_sequences

        self.args = args
        queries = load_sequences(args.queries)
        if args.max_queries and args.max_queries < len(queries):
            queries = queries.take(range(args.max_queries))
        self.queries = queries
        options = {"force": True}
        if args.partition_residues:
            options["partition_residues"] = args.partition_residues
        tick = time.perf_counter()
        fasta = scratch / "db.fasta.gz"
        replicate(Path(args.db), args.copies, fasta)
        self.store = swdask.ingest(fasta, scratch / "db.store", **options)
        self.warm_store = swdask.ingest(args.db, scratch / "db1.store", **options)
        ingest_s = time.perf_counter() - tick
        q_res = int(queries.lengths.sum())
        self.workload = {"queries_file": str(args.queries), "queries": len(queries),
                         "query_residues": q_res, "db": str(args.db), "copies": args.copies,
                         "db_sequences": self.store.n_records,
                         "db_residues": self.store.n_residues,
                         "store_files": len(self.store.files),
                         "cells": q_res * self.store.n_residues, "max_hits": args.max_hits,
                         "scoring": "BLOSUM62 11/1, local", "ingest_s": ingest_s}
        print(f"search: {len(queries)} queries ({q_res:,} residues) x {args.db.name} x "
              f"{args.copies} ({self.store.n_residues:,} residues in {len(self.store.files)} "
              f"store files; ingested in {ingest_s:.1f} s, not timed), max {args.max_hits} "
              f"hits, {self.workload['cells']:,} cells", flush=True)

    def run(self, client, warm: bool):
        import swdask
        from swdask.cluster import compute

        store = self.warm_store if warm else self.store
        hits, stats = compute(*swdask.search(self.queries, store, device=self.args.device,
                                             max_hits=self.args.max_hits, return_stats=True),
                              client=client)
        return hits, {"n_hits": stats.n_hits, "score_task_seconds": stats.score_seconds,
                      "traceback_seconds": stats.traceback_seconds,
                      "workers_that_scored": stats.workers, "device": stats.device}


class AllPairsJob:
    """``--max-genes`` genes of ``--genes`` (a store made once), every pair >= 97%."""

    name = "allpairs"

    def __init__(self, args, scratch: Path):
        import swdask

        self.args, self.scratch = args, scratch
        fasta, count = write_genes(args.genes, args.max_genes, args.seed,
                                   scratch / "genes.fasta")
        warm_fasta, warm_count = write_genes(fasta, min(args.warmup_genes, count), args.seed,
                                             scratch / "genes_warm.fasta")
        tick = time.perf_counter()
        self.store = swdask.ingest(fasta, scratch / "genes.store", alphabet="dna",
                                   map_unknown=True, force=True)
        self.warm_store = swdask.ingest(warm_fasta, scratch / "genes_warm.store",
                                        alphabet="dna", map_unknown=True, force=True)
        self.scoring = swdask.Scoring(match=2, mismatch=-3, gap_open=5, gap_extend=2)
        self.workload = {"genes_file": str(args.genes), "genes": count, "seed": args.seed,
                         "pairs": count * (count - 1) // 2, "block_size": args.block_size,
                         "warmup_genes": warm_count, "mode": "global",
                         "scoring": "DNA 2/-3, gaps 5/2", "min_identity": 0.97,
                         "ingest_s": time.perf_counter() - tick}
        print(f"allpairs: {count:,} genes of {Path(args.genes).name} (seed {args.seed}), "
              f"{count * (count - 1) // 2:,} pairs, global, DNA 2/-3 5/2, identity >= 0.97, "
              f"blocks of {args.block_size}", flush=True)

    def run(self, client, warm: bool):
        from swdask.jobs.allpairs import read_all_pairs, write_all_pairs

        out = self.scratch / ("allpairs_warm" if warm else "allpairs_out")
        stats = write_all_pairs(self.warm_store if warm else self.store, out,
                                scoring=self.scoring, mode="global", min_identity=0.97,
                                device=self.args.device, block_size=self.args.block_size,
                                client=client, force=True)
        # The folder is read back after the clock stops (run_on): not part of the job.
        return (lambda: read_all_pairs(out)), {
            "hits": stats.hits, "pairs_scored": stats.pairs_scored, "cells": stats.cells,
            "block_pairs": stats.block_pairs, "block_pairs_skipped": stats.block_pairs_skipped,
            "kernel_seconds": stats.kernel_seconds,
            "traceback_seconds": stats.traceback_seconds, "device": stats.device}


class LongJob:
    """A window of ``--chromosome`` against a planted mutated copy."""

    name = "long"

    def __init__(self, args, scratch: Path):
        import swdask

        self.args = args
        self.scoring = swdask.Scoring(alphabet="dna")
        self.a, self.b, self.expected, start = planted_pair(
            args.chromosome, args.window, args.window_start, args.spacing, self.scoring)
        # A tenth of the pair, but at least 5,000 residues (all of a smaller one), so that
        # its tiles reach every worker and each loads the tile kernels before the timed run.
        warm = max(len(self.a) // 10, min(len(self.a), 5000))
        self.warm = (self.a[:warm], self.b[:warm])
        self.workload = {"chromosome": str(args.chromosome), "window_start": start,
                         "a": len(self.a), "b": len(self.b), "spacing": args.spacing,
                         "planted_score": self.expected, "cells": len(self.a) * len(self.b),
                         "tile": args.tile, "traceback": args.long_traceback}
        print(f"long: {len(self.a):,} residues of {Path(args.chromosome).name} from {start:,} "
              f"x a copy with a mutation every {args.spacing} ({len(self.b):,} residues, "
              f"planted score {self.expected:,}), {self.workload['cells']:,} cells"
              f"{', with traceback' if args.long_traceback else ''}", flush=True)

    def run(self, client, warm: bool):
        import swdask

        a, b = self.warm if warm else (self.a, self.b)
        tile = self.args.tile if self.args.tile == "auto" else int(self.args.tile)
        result = swdask.align_long(a, b, scoring=self.scoring, tile=tile,
                                   device=self.args.device, client=client,
                                   traceback=self.args.long_traceback)
        output = (result.score, result.query_start, result.query_end, result.subject_start,
                  result.subject_end, result.cigar)
        return output, {"score": result.score, "planted_score_ok": warm
                        or result.score == self.expected, "tiles": [result.tile_rows,
                                                                    result.tile_cols],
                        "tiles_on": result.stats["tiles_on"],
                        "predicted_seconds": result.stats["predicted_seconds"],
                        "score_seconds": result.score_seconds,
                        "traceback_seconds": result.traceback_seconds, "device": result.device}


JOB_CLASSES = {job.name: job for job in (SearchJob, AllPairsJob, LongJob)}


# --------------------------------------------------------------------------------------
# one cluster, one job
# --------------------------------------------------------------------------------------


def start_cluster(args, n_workers: int):
    """``swdask.cluster`` of ``n_workers`` for ``args.device``; CPU workers get
    ``--cpu-threads`` Numba threads each (so that a worker stands for one device)."""
    import swdask

    options = {"dashboard_address": ":0", "silence_logs": logging.ERROR}
    if args.device == "cpu":
        options.update(threads_per_worker=1, env={"NUMBA_NUM_THREADS": str(args.cpu_threads)})
    return swdask.cluster(n_workers, device=args.device, **options)


#: Warm-up runs at most, until every worker has run a kernel task.
WARMUP_RUNS = 3


def warm_up(job, client, workers: dict) -> int:
    """Run the job's warm-up until every worker ran at least one of its kernel tasks (so
    that each has loaded its kernels before the timed run; where the tasks go is Dask's
    choice), at most :data:`WARMUP_RUNS` times; returns how many runs it took."""
    from distributed import get_task_stream

    runs = 0
    while runs < WARMUP_RUNS:
        runs += 1
        with get_task_stream(client) as stream:
            job.run(client, warm=True)
        if {r["worker"] for r in stream_rows(stream.data, 0.0) if r["kernel"]} >= set(workers):
            break
    return runs


def run_on(job, args, n_workers: int, streams: Path | None) -> tuple[object, dict]:
    """The job's warm-up and timed run on a new cluster of ``n_workers``: its output and
    its record (wall time, statistics, busy share per worker)."""
    from distributed import get_task_stream

    from swdask.cluster import shutdown

    tick = time.perf_counter()
    client = start_cluster(args, n_workers)
    try:
        start_s = time.perf_counter() - tick
        info = client.scheduler_info(n_workers=-1)["workers"]
        workers = {address: w.get("name", address) for address, w in info.items()}
        tick = time.perf_counter()
        warmups = warm_up(job, client, workers)
        warm_s = time.perf_counter() - tick
        html = None
        if streams is not None and args.html:
            html = str(streams / f"{job.name}_{n_workers}w.html")
        if job.name == "search":
            client.run(log_score_phases)
        with get_task_stream(client, plot="save" if html else False,
                             filename=html or "task-stream.html") as stream:
            t0, tick = time.time(), time.perf_counter()
            output, stats = job.run(client, warm=False)
            wall = time.perf_counter() - tick
        if callable(output):  # an output to read back, not timed
            output = output()
        rows = stream_rows(stream.data, t0)
        phases = ({address: phase_summary(log, t0)
                   for address, log in client.run(score_phases).items()}
                  if job.name == "search" else {})
    finally:
        shutdown(client)
    shares = busy_shares(rows, workers, wall)
    if streams is not None:
        write_stream(rows, streams / f"{job.name}_{n_workers}w.csv")
    cells = stats.get("cells", job.workload.get("cells"))
    record = {"workers": n_workers, "wall_s": wall, "cluster_start_s": start_s,
              "warmup_s": warm_s, "warmup_runs": warmups, "stats": stats, "busy": shares,
              "gcups": cells / wall / 1e9 if cells and wall else None,
              "score_phases": {str(workers.get(a, a)): text for a, text in phases.items()},
              "output": fingerprint(output) if hasattr(output, "dtypes") else repr(output)}
    gcups = "" if record["gcups"] is None else f", {record['gcups']:.3g} GCUPS"
    print(f"  {n_workers} worker(s): wall {wall:.2f} s{gcups} (warm-up {warm_s:.1f} s, cluster "
          f"start {start_s:.1f} s)", flush=True)
    for w in shares:
        first = w["first_kernel_start"]
        print(f"    worker {w['worker']:>3}: busy {100 * w['busy_share']:5.1f}% (kernel tasks "
              f"{100 * w['kernel_busy_share']:5.1f}%), {w['tasks']} tasks ({w['kernel_tasks']} "
              f"kernel, first at {'-' if first is None else f'{first:.2f} s'}), last ends at "
              f"{w['last_task_end']:.2f} s |{w['timeline']}|", flush=True)
        print(f"      tasks by kind: {', '.join(f'{k} {n}' for k, n in sorted(w['task_kinds'].items()))}",
              flush=True)
        if w["worker"] in record["score_phases"]:
            print(f"      score tasks: {record['score_phases'][w['worker']]}", flush=True)
    return output, record


def run_job(job, args, streams: Path | None, result: dict, save) -> None:
    """1 worker, then N, into ``result`` (both runs, the ratio, outputs identical);
    ``save()`` after each run."""
    result.update(workload=job.workload, runs={})
    outputs = {}
    for n_workers in (1, args.workers):
        outputs[n_workers], result["runs"][str(n_workers)] = run_on(job, args, n_workers,
                                                                    streams)
        save()
    one, many = result["runs"]["1"], result["runs"][str(args.workers)]
    result["ratio"] = one["wall_s"] / many["wall_s"] if many["wall_s"] else None
    result["identical"] = same_output(outputs[1], outputs[args.workers])
    bar = BARS.get(job.name) if args.workers == 2 and args.device == "gpu" else None
    result["bar"] = bar
    result["bar_met"] = None if bar is None else result["ratio"] >= bar
    ok = all(r["stats"].get("planted_score_ok", True) for r in result["runs"].values())
    result["checks_ok"] = ok and result["identical"]
    against = "" if bar is None else f" (bar {bar} x: {'met' if result['bar_met'] else 'NOT met'})"
    print(f"{job.name}: 1 worker {one['wall_s']:.2f} s, {args.workers} workers "
          f"{many['wall_s']:.2f} s, ratio {result['ratio']:.2f} x{against}"
          f"; outputs {'identical' if result['identical'] else 'DIFFER'}"
          f"{'' if ok else '; PLANTED SCORE MISSED'}\n", flush=True)


def report_table(report: dict) -> None:
    """Print the jobs as one table."""
    n = report["workers"]
    print(f"| job | 1 worker s | {n} workers s | ratio | outputs identical | busy share of "
          f"each worker ({n} workers) | kernel-task share |")
    print("|---|---:|---:|---:|---|---|---|")
    for name, job in report["jobs"].items():
        if "ratio" not in job:
            continue
        busy = job["runs"][str(n)]["busy"]
        shares = ", ".join(f"{100 * w['busy_share']:.0f}%" for w in busy)
        kernel = ", ".join(f"{100 * w['kernel_busy_share']:.0f}%" for w in busy)
        print(f"| {name} | {job['runs']['1']['wall_s']:.2f} | {job['runs'][str(n)]['wall_s']:.2f} "
              f"| {job['ratio']:.2f} x | {'yes' if job['identical'] else 'NO'} | {shares} | "
              f"{kernel} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default="gpu",
                        help="gpu: LocalCUDACluster, one worker per GPU (default); cpu: "
                        "LocalCluster")
    parser.add_argument("--workers", type=int, default=2, help="N, compared with 1 (default 2)")
    parser.add_argument("--jobs", default=",".join(JOBS), help="comma list of search, allpairs, "
                        "long (default all, in this order)")
    parser.add_argument("--cpu-threads", type=int, default=1,
                        help="Numba threads of each CPU worker (default 1)")
    parser.add_argument("--queries", type=Path, default=DATA / "sprot196.fasta")
    parser.add_argument("--max-queries", type=int, default=0, help="first N queries (0 = all)")
    parser.add_argument("--db", type=Path, default=DATA / "sprot12071.fasta.gz")
    parser.add_argument("--copies", type=int, default=21, help="replicas of --db (default 21)")
    parser.add_argument("--partition-residues", type=int, default=0,
                        help="residues per store file (default: swdask.ingest's)")
    parser.add_argument("--max-hits", type=int, default=10)
    parser.add_argument("--genes", type=Path, default=DATA / "16S_200.fna.gz")
    parser.add_argument("--max-genes", type=int, default=12000,
                        help="genes drawn from --genes (default 12000; 0 = all)")
    parser.add_argument("--warmup-genes", type=int, default=1000)
    parser.add_argument("--block-size", type=int, default=2048, help="all-pairs block size")
    parser.add_argument("--chromosome", type=Path, default=DATA / "NCTC11397_window40k.fna.gz")
    parser.add_argument("--window", type=int, default=0,
                        help="long pair length (default 1000000 on the GPU, 20000 on the CPU)")
    parser.add_argument("--window-start", type=int, default=700_000)
    parser.add_argument("--spacing", type=int, default=1000, help="residues between planted "
                        "mutations (default 1000)")
    parser.add_argument("--tile", default="auto", help="long pair tile side or auto")
    parser.add_argument("--long-traceback", action="store_true",
                        help="the long pair's traceback too")
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--quick", action="store_true", help="CI's smoke run: tiny inputs")
    parser.add_argument("--scratch", type=Path, help="work folder (default a temporary one)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--task-stream", type=Path, metavar="DIR",
                        help="write each timed run's task stream here (CSV)")
    parser.add_argument("--html", action="store_true", help="with --task-stream: Bokeh plots too")
    args = parser.parse_args(argv)
    jobs = [j for j in args.jobs.split(",") if j]
    unknown = sorted(set(jobs) - set(JOBS))
    if unknown or args.workers < 2:
        parser.error(f"unknown job(s) {', '.join(unknown)}" if unknown else "--workers >= 2")
    if args.window == 0:
        args.window = 1_000_000 if args.device == "gpu" else 20_000
    if args.quick:
        args.max_queries = args.max_queries or 6
        args.db, args.copies = DATA / "sprot_db.fasta.gz", 2
        args.partition_residues = args.partition_residues or 12_000
        args.max_genes, args.warmup_genes, args.block_size = 80, 20, 16
        args.window, args.window_start, args.spacing, args.tile = 1600, 500, 150, "400"

    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="swdask-scaling-"))
    scratch.mkdir(parents=True, exist_ok=True)
    streams = args.task_stream
    if streams is not None:
        streams.mkdir(parents=True, exist_ok=True)
    info = machine()
    print(f"# swdask scaling: 1 vs {args.workers} workers, device {args.device}\n\n"
          f"- CPU: {info['cpu']}, {info['cores']} cores; GPUs: "
          f"{', '.join(info['gpus']) or 'none'}; swdask {info['swdask']} ({info['commit']})\n",
          flush=True)
    report = {"machine": info, "device": args.device, "workers": args.workers,
              "cpu_threads": args.cpu_threads if args.device == "cpu" else None,
              "quick": args.quick, "jobs": {}}
    def save() -> None:
        if args.json:
            args.json.write_text(json.dumps(report, indent=1, default=str) + "\n")

    try:
        for name in jobs:
            tick = time.perf_counter()
            job = JOB_CLASSES[name](args, scratch)
            result = report["jobs"][name] = {}
            run_job(job, args, streams, result, save)
            result["job_s"] = time.perf_counter() - tick
            save()
    finally:
        if args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    report_table(report)
    return 0 if all(job.get("checks_ok") for job in report["jobs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
