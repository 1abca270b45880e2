"""Memory of a Dask search: peak RSS of the workers against the size of the database.

A search streams the store partition by partition: a score task holds one partition and
returns only its candidates, and nothing after the score tasks holds more than
``max_hits`` candidates per query.  So a worker's memory should depend on the partition
size, not on the database size.  This script measures it: for each store size (a number
of partitions of ``--partition-residues`` random protein residues, lengths 50-1,000) it
starts a fresh ``LocalCluster`` (``swdask.cluster(device="cpu")``) whose workers have a
Dask ``memory_limit`` (Dask pauses a worker at 80% of it and restarts it at 95%, failing
its tasks, so a search that needed more would not finish), searches one query and reports
each worker's peak resident set size (``getrusage`` ``ru_maxrss``) next to the store's size.

Usage (the numbers quoted in README.md)::

    python workflows/benchmarks/dask_memory.py --partitions 4,16,160 --workers 2 \\
        --memory-limit 512MiB --json dask_memory.json

CI smoke-runs it on a few small partitions (tests/workflows/test_benchmarks.py).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import swdask
from swdask.cluster import shutdown

LETTERS = np.frombuffer(b"ACDEFGHIKLMNPQRSTVWY", dtype=np.uint8)
SEED = 20261122


def write_fasta(path: Path, residues: int, rng) -> None:
    """Random protein records of 50-1,000 residues, ``residues`` in all."""
    done = 0
    k = 0
    with open(path, "wb") as handle:
        while done < residues:
            lengths = rng.integers(50, 1001, 4096)
            lengths = lengths[np.cumsum(lengths) + done <= residues]
            if lengths.size == 0:
                lengths = np.array([residues - done])
            codes = LETTERS[rng.integers(0, 20, int(lengths.sum()))]
            start = 0
            chunks = []
            for n in lengths.tolist():
                chunks.append(b">r%d\n" % k + codes[start:start + n].tobytes() + b"\n")
                start += n
                k += 1
            handle.write(b"".join(chunks))
            done += int(lengths.sum())


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def measure(store, query: str, workers: int, memory_limit: str) -> dict:
    client = swdask.cluster(workers, device="cpu", memory_limit=memory_limit,
                            dashboard_address=":0")
    try:
        warm = swdask.search({"warm-up": query[:20]}, store.path, max_hits=1)
        client.compute(warm, workers=None).result()  # loads the kernels in the workers
        baseline = client.run(_rss)
        hits, stats = swdask.search({"query": query}, store, max_hits=50, return_stats=True)
        started = time.perf_counter()
        table, stats = client.gather(client.compute([hits, stats]))
        seconds = time.perf_counter() - started
        peaks = client.run(_peak_rss)
        limits = [w["memory_limit"] for w in client.scheduler_info()["workers"].values()]
    finally:
        shutdown(client)
    return {
        "store_residues": store.n_residues,
        "partitions": len(store.partitions),
        "store_bytes_on_disk": sum(f.stat().st_size for f in store.files),
        "hits": len(table),
        "cells": stats.cells,
        "seconds": seconds,
        "workers": workers,
        "worker_memory_limit_bytes": min(limits),
        "baseline_worker_rss_bytes": max(baseline.values()),
        "peak_worker_rss_bytes": max(peaks.values()),
    }


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def table(rows) -> str:
    lines = ["| store residues | partitions | store on disk | worker memory limit | "
             "worker RSS before | peak worker RSS | store residues / peak RSS |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['store_residues']:,} | {r['partitions']} | {_mib(r['store_bytes_on_disk'])} | "
            f"{_mib(r['worker_memory_limit_bytes'])} | {_mib(r['baseline_worker_rss_bytes'])} | "
            f"{_mib(r['peak_worker_rss_bytes'])} | "
            f"{r['store_residues'] / r['peak_worker_rss_bytes']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dask_memory.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--partition-residues", type=int, default=16_777_216,
                        help="residues per store partition (default 16777216, ingest's default)")
    parser.add_argument("--partitions", default="4,16,160",
                        help="store sizes in partitions, comma-separated (default 4,16,160)")
    parser.add_argument("--workers", type=int, default=2, help="Dask workers (default 2)")
    parser.add_argument("--memory-limit", default="512MiB",
                        help="Dask memory_limit of each worker (default 512MiB)")
    parser.add_argument("--query-length", type=int, default=50,
                        help="residues of the random query (default 50)")
    parser.add_argument("--scratch", help="folder for the stores (default: a temporary one)")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(SEED)
    query = LETTERS[rng.integers(0, 20, args.query_length)].tobytes().decode()
    scratch = Path(tempfile.mkdtemp(prefix="swdask-memory-", dir=args.scratch))
    rows = []
    try:
        for count in (int(x) for x in args.partitions.split(",")):
            fasta = scratch / f"db{count}.fasta"
            write_fasta(fasta, count * args.partition_residues, np.random.default_rng(SEED + count))
            store = swdask.ingest(fasta, scratch / f"db{count}.store",
                                  partition_residues=args.partition_residues)
            fasta.unlink()
            rows.append({"requested_partitions": count,
                         **measure(store, query, args.workers, args.memory_limit)})
            shutil.rmtree(store.path)
            print(f"{count} partitions: done", file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("# swdask Dask search memory\n")
    print(f"one random {args.query_length}-residue query, max_hits 50, {args.workers} worker(s), "
          f"{args.partition_residues:,} residues per partition\n")
    print(table(rows))
    if args.json:
        report = {"rows": rows, "machine": {"platform": platform.platform(),
                                            "cpus": os.cpu_count(),
                                            "python": sys.version.split()[0]},
                  "arguments": vars(args)}
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
