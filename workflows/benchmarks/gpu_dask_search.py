"""End-to-end GPU search through Dask: a ``LocalCUDACluster`` against the kernel alone.

Workload (issue 4, on the GPU benchmark's workload of issue 3): the Swiss-Prot database
``tests/data/sprot12071.fasta.gz`` replicated until it holds at least ``--min-residues``
residues (default 100 million), ingested into a sequence store (16M-residue partitions,
sorted by length; the ingest is timed apart and not counted); ``--per-length`` Swiss-Prot
queries closest to each length of ``--lengths`` (default 4 each of 375, 1,000, 2,000 and
5,000 residues). BLOSUM62 11/1, local, the top ``--max-hits`` (default 100) per query.

In the same run it measures:

- kernel only: per store partition, the partition uploaded once (not timed) and
  ``DeviceSubjects.top_many`` over all queries, what a score task does; kernel GCUPS =
  cells / the CUDA-event time of the score kernels (32-bit re-runs included);
- end to end: ``swdask.cluster(device="gpu")`` (one dask-cuda worker per GPU) and
  ``swdask.search(..., device="gpu", max_hits=100)`` computed on it: reading every
  partition from Parquet, uploading it, the kernels, the device-side top-hit selection,
  the merge tree, reading the hits' subjects back from the store, the traceback of every
  reported hit (CPU, all cores), E-values, and the hits table back in this process.
  End-to-end GCUPS = cells / wall time of ``compute``, median of ``--repeats`` after a
  warm-up search (which compiles the kernels in the worker);

cells = query length x database residues for every pair. The bar of issue 4: end-to-end
at least 80% of the kernel-only GCUPS. The hits of every repeat must be identical.

Run from the repository root on a GPU machine::

    python workflows/benchmarks/gpu_dask_search.py --json gpu_dask_search.json
"""
from __future__ import annotations

import argparse
import gzip
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def shuffled_copy(residues: np.ndarray, offsets: np.ndarray, copy: int,
                  seed: int | None) -> np.ndarray:
    """Copy ``copy`` of a database's concatenated ``residues``: the residues themselves for
    copy 0 or without a ``seed``, else every sequence's residues in an order drawn from
    ``(seed, copy)`` (lengths and compositions kept, the sequences no longer alike)."""
    if seed is None or copy == 0:
        return residues
    rng = np.random.default_rng([seed, copy])
    sequence = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    return residues[np.lexsort((rng.random(residues.size), sequence))]


def replicate(db_path: Path, copies: int, out: Path, shuffle: int | None = None) -> None:
    """``db_path`` written ``copies`` times, record names made unique with ``/copy``;
    with ``shuffle``, copies after the first are :func:`shuffled_copy` ones."""
    from swdask.sequences.store import load_sequences

    db = load_sequences(db_path)
    names = [name.split()[0] for name in db.names]
    with gzip.open(out, "wt", compresslevel=1) as handle:
        for c in range(copies):
            residues = shuffled_copy(db.residues, db.offsets, c, shuffle)
            handle.write("".join(
                f">{name}/{c}\n{db.alphabet.decode(residues[db.offsets[k]:db.offsets[k + 1]])}\n"
                for k, name in enumerate(names)))


def pick_queries(pool_path: Path, db_path: Path, lengths, per_length: int) -> dict:
    """``per_length`` Swiss-Prot records closest to each target length, by name."""
    from swdask.sequences.store import load_sequences

    pool = load_sequences(pool_path)
    db = load_sequences(db_path)
    records = [(pool.names[k], pool.alphabet.decode(pool.codes(k))) for k in range(len(pool))]
    records += [(db.names[k], db.alphabet.decode(db.codes(k))) for k in range(len(db))
                if db.lengths[k] > 1165]
    chosen = {}
    for target in lengths:
        ranked = sorted((r for r in records if r[0].split()[0] not in chosen),
                        key=lambda r: (abs(len(r[1]) - target), r[0]))
        for name, seq in ranked[:per_length]:
            chosen[name.split()[0]] = seq
    return chosen


def kernel_only(store, queries: dict, scoring, max_hits: int, repeats: int):
    """Median (over repeats) of the summed score-kernel seconds of all partitions, and
    the median costs per partition of what a score task does besides its kernels."""
    from swdask.kernels.cuda.launcher import DeviceSubjects
    from swdask.sequences.batch import list_arrays
    from swdask.sequences.store import SequenceStore, read_part

    store = SequenceStore.open(store.path)
    codes = [scoring.alphabet.encode(seq) for seq in queries.values()]
    reads, uploads = [], []
    for path in store.files:  # a score task's read, as the task does it
        tick = time.perf_counter()
        table = read_part(path, ["seq_id", "length", "residues"])
        table.column("seq_id").to_numpy()
        list_arrays(table.column("residues"))
        reads.append(time.perf_counter() - tick)
    partitions = []
    for part in store.iter_partitions():
        tick = time.perf_counter()
        subjects = DeviceSubjects(part.residues, part.offsets)
        subjects.stream.synchronize()
        uploads.append(time.perf_counter() - tick)
        partitions.append(subjects)
    for subjects in partitions:  # warm-up: compiles the kernels of every shape
        subjects.top_many(codes, scoring.matrix, scoring.gap_open, scoring.gap_extend, max_hits)
    runs, walls, cells32 = [], [], 0
    for _ in range(repeats):
        seconds = wall = 0.0
        for subjects in partitions:
            tick = time.perf_counter()
            _, stats = subjects.top_many(codes, scoring.matrix, scoring.gap_open,
                                         scoring.gap_extend, max_hits)
            wall += time.perf_counter() - tick
            seconds += stats.seconds
            cells32 += stats.cells_32bit
        runs.append(seconds)
        walls.append(wall)
    del partitions
    costs = {"read_seconds": statistics.median(reads),
             "upload_seconds": statistics.median(uploads),
             "top_many_wall_seconds": statistics.median(walls) / len(uploads),
             "kernel_seconds": statistics.median(runs) / len(uploads)}
    return runs, cells32 / repeats, costs


def most_at_once(runs) -> int:
    """The largest number of ``(start, stop)`` intervals that overlap."""
    edges = sorted([(a, 1) for a, _ in runs] + [(b, -1) for _, b in runs])
    running = most = 0
    for _, step in edges:  # a stop sorts before a start at the same instant
        running += step
        most = max(most, running)
    return most


def phases(records, t0: float, t1: float) -> str:
    """Where the wall time of one search went, from Dask's task stream: when the first
    task started, how long the score tasks (read + kernels) kept the worker busy, over
    which span and how many at once, the traceback tasks, and the time from the last
    task to the result."""
    spans = {}
    for record in records:
        key = str(record["key"])
        kind = ("score" if "swdask_score" in key else "traceback" if "_traceback_batch" in key
                else "merge" if "_merge_candidates" in key else "other")
        for part in record["startstops"]:
            if part["action"] == "compute":
                spans.setdefault(kind, []).append((part["start"], part["stop"]))
    first = min(start for runs in spans.values() for start, _ in runs)
    last = max(stop for runs in spans.values() for _, stop in runs)
    out = [f"to first task {first - t0:.3f} s"]
    for kind in ("score", "merge", "traceback", "other"):
        if kind in spans:
            runs = spans[kind]
            out.append(f"{kind} {len(runs)} task(s) busy {sum(b - a for a, b in runs):.3f} s "
                       f"from {min(a for a, _ in runs) - t0:.3f} to {max(b for _, b in runs) - t0:.3f} s"
                       f" (at most {most_at_once(runs)} at once)")
    out.append(f"last task to result {t1 - last:.3f} s")
    return "; ".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=ROOT / "tests" / "data" / "sprot12071.fasta.gz")
    parser.add_argument("--queries", default=ROOT / "tests" / "data" / "sprot196.fasta")
    parser.add_argument("--lengths", default="375,1000,2000,5000")
    parser.add_argument("--per-length", type=int, default=4)
    parser.add_argument("--min-residues", type=float, default=100e6)
    parser.add_argument("--max-hits", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scratch", help="folder for the store (default: a temporary one)")
    parser.add_argument("--json", help="also write the results as JSON")
    args = parser.parse_args(argv)

    import swdask
    from swdask.cluster import compute, shutdown
    from swdask.sequences.store import load_sequences

    scoring = swdask.Scoring()
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="swdask-bench-"))
    scratch.mkdir(parents=True, exist_ok=True)
    base = load_sequences(args.db)
    copies = max(1, int(np.ceil(args.min_residues / base.residues.size)))
    tick = time.perf_counter()
    fasta = scratch / "db.fasta.gz"
    replicate(Path(args.db), copies, fasta)
    store = swdask.ingest(fasta, scratch / "db.store", force=True)
    ingest_seconds = time.perf_counter() - tick
    queries = pick_queries(Path(args.queries), Path(args.db),
                           [int(x) for x in args.lengths.split(",")], args.per_length)
    query_residues = sum(len(s) for s in queries.values())
    cells = query_residues * store.n_residues

    from numba import cuda

    if hasattr(cuda, "get_current_device"):
        device = cuda.get_current_device()
        gpu = device.name.decode() if isinstance(device.name, bytes) else device.name
    else:  # the CUDA simulator (smoke runs)
        gpu = "CUDA simulator"
    print("# swdask end-to-end GPU search through Dask\n")
    print(f"- GPU: {gpu}; host {platform.node()}")
    print(f"- database: {args.db} x {copies}: {store.n_records:,} sequences, "
          f"{store.n_residues:,} residues in {len(store.files)} partitions "
          f"(written and ingested in {ingest_seconds:.1f} s, not counted)")
    print(f"- queries: {len(queries)} ({args.per_length} per length {args.lengths}), "
          f"{query_residues:,} residues; {cells:,} cells; BLOSUM62 11/1, local, "
          f"top {args.max_hits} per query, all traced back\n")

    kernel_runs, cells32, costs = kernel_only(store, queries, scoring, args.max_hits,
                                              args.repeats)
    kernel_gcups = cells / statistics.median(kernel_runs) / 1e9
    print(f"kernel only: {statistics.median(kernel_runs):.3f} s, {kernel_gcups:.1f} GCUPS "
          f"(32-bit cells {100 * cells32 / cells:.3f}%)", flush=True)
    print(f"a score task's parts, median per partition: read and decode "
          f"{costs['read_seconds']:.3f} s, device upload {costs['upload_seconds']:.3f} s, "
          f"top_many {costs['top_many_wall_seconds']:.3f} s of which kernels "
          f"{costs['kernel_seconds']:.3f} s", flush=True)

    client = swdask.cluster(device="gpu")
    try:
        workers = client.scheduler_info()["workers"]
        print(f"cluster: {type(client.cluster).__name__}, {len(workers)} worker(s) of "
              f"{sorted({w['nthreads'] for w in workers.values()})} thread(s), resources "
              f"{sorted({str(w.get('resources')) for w in workers.values()})}, "
              f"dashboard {client.dashboard_link}", flush=True)
        reference = None
        walls, runs = [], []
        for attempt in range(args.repeats + 1):  # the first one is the warm-up
            from distributed import get_task_stream

            with get_task_stream(client) as stream:
                t0, tick = time.time(), time.perf_counter()
                hits, stats = compute(*swdask.search(queries, store, scoring=scoring,
                                                     device="gpu", max_hits=args.max_hits,
                                                     return_stats=True), client=client)
                wall = time.perf_counter() - tick
                t1 = time.time()
            if reference is None:
                reference = hits
            elif not hits.equals(reference):
                print("the hits differ between repeats", file=sys.stderr)
                return 1
            if attempt:
                walls.append(wall)
                runs.append(dict(wall_seconds=wall, score_seconds=stats.score_seconds,
                                 traceback_seconds=stats.traceback_seconds,
                                 total_seconds=stats.total_seconds, n_hits=stats.n_hits,
                                 device=stats.device))
            print(f"{'warm-up' if not attempt else f'run {attempt}'}: wall {wall:.3f} s, "
                  f"score tasks {stats.score_seconds:.3f} s, traceback {stats.traceback_seconds:.3f} s, "
                  f"{stats.n_hits:,} hits on {stats.device}\n  {phases(stream.data, t0, t1)}",
                  flush=True)
    finally:
        shutdown(client)
    e2e_gcups = cells / statistics.median(walls) / 1e9
    ratio = e2e_gcups / kernel_gcups
    print(f"\n| workload | kernel-only GCUPS | end-to-end GCUPS (Dask, traceback of top "
          f"{args.max_hits}) | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| {len(queries)} queries x {store.n_residues / 1e6:.1f} M residues | "
          f"{kernel_gcups:.1f} | {e2e_gcups:.1f} | {100 * ratio:.1f}% |")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(
            gpu=gpu, host=platform.node(), copies=copies, residues=store.n_residues,
            sequences=store.n_records, partitions=len(store.files), queries=list(queries),
            query_residues=query_residues, cells=cells, max_hits=args.max_hits,
            kernel_seconds=kernel_runs, kernel_gcups=kernel_gcups, task_parts=costs, runs=runs,
            end_to_end_gcups=e2e_gcups, ratio=ratio), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
