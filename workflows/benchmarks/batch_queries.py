"""How many queries one GPU score batch should hold: the search of issue 18 in one
process at several values of the launcher's ``BATCH_QUERIES``.

A GPU score pass scores its queries in batches (``kernels/cuda/launcher.py``): each batch
costs host work whatever its size (its profiles, one histogram copy, the cut of each
query, the selection launch and copy, the end pass's upload and launches, their waits),
pipelined against the next batch's kernels.  With the scan kernel's speed a batch of 8
short queries is a few milliseconds of kernels, so that host work may be what the GPU
waits on.  This runs ``swdask.search_in_process`` (the CLI's search; store files scored
two at a time as a GPU worker's two score tasks are) on ``--queries`` against ``--db`` x
``--copies``, once per value of ``--sizes`` and round, sizes rotated each round, and
prints per size the median wall time, score-pass time, kernel seconds (summed over
passes, as ``KernelStats``; two passes at once each count the other's kernels too, so
this may exceed the score pass) and traceback time, with the hits checked identical across
sizes.  One warm-up search first (kernels loaded, the store's pages cached).

On a GPU machine, from the repository root::

    python workflows/benchmarks/batch_queries.py --sizes 8,16,32,64 --json batch.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_wall import machine  # noqa: E402  (this folder)
from gpu_dask_search import replicate  # noqa: E402
from scaling import fingerprint  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=Path, default=DATA / "sprot196.fasta")
    parser.add_argument("--db", type=Path, default=DATA / "sprot12071.fasta.gz")
    parser.add_argument("--copies", type=int, default=21)
    parser.add_argument("--max-hits", type=int, default=10)
    parser.add_argument("--sizes", default="8,16,32,64",
                        help="values of BATCH_QUERIES, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="gpu")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    import swdask
    from swdask.jobs.search import tasks
    from swdask.kernels.cuda import launcher
    from swdask.sequences.store import load_sequences

    kernel_seconds = []
    score_pass = tasks.score_pass

    def counted(*a, **k):  # the kernel seconds every pass reports
        found, seconds = score_pass(*a, **k)
        kernel_seconds.append(seconds)
        return found, seconds

    tasks.score_pass = counted
    default = launcher.BATCH_QUERIES
    with tempfile.TemporaryDirectory() as scratch:
        fasta = Path(scratch) / "db.fasta.gz"
        replicate(args.db, args.copies, fasta)
        store = swdask.ingest(fasta, Path(scratch) / "db.store", force=True)
        queries = load_sequences(args.queries)
        print(f"{args.queries.name} x {args.db.name} x {args.copies} ({store.n_residues:,} "
              f"residues, {len(store.files)} files), max {args.max_hits} hits; "
              f"{machine()}", flush=True)

        def search(size):
            launcher.BATCH_QUERIES = size
            kernel_seconds.clear()
            tick = time.perf_counter()
            hits, stats = swdask.search_in_process(queries, store, device=args.device,
                                                   max_hits=args.max_hits, return_stats=True)
            wall = time.perf_counter() - tick
            return {"wall_s": wall, "score_s": stats.score_seconds,
                    "kernel_s": sum(kernel_seconds), "traceback_s": stats.traceback_seconds,
                    "cells": stats.cells, "hits": fingerprint(hits)}

        search(default)  # warm-up
        runs = {size: [] for size in sizes}
        for r in range(args.repeats):
            for size in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
                runs[size].append(search(size))
    launcher.BATCH_QUERIES = default
    rows = []
    print("\n| queries a batch | wall s | score pass s | kernel s | traceback s | "
          "score GCUPS | hits |\n|---:|---:|---:|---:|---:|---:|---|")
    reference = runs[sizes[0]][0]["hits"]
    same = True
    for size in sizes:
        median = {key: statistics.median(run[key] for run in runs[size])
                  for key in ("wall_s", "score_s", "kernel_s", "traceback_s")}
        agree = all(run["hits"] == reference for run in runs[size])
        same &= agree
        gcups = runs[size][0]["cells"] / median["score_s"] / 1e9
        rows.append({"batch_queries": size, **median, "score_gcups": gcups, "identical": agree,
                     "runs": runs[size]})
        print(f"| {size} | {median['wall_s']:.3f} | {median['score_s']:.3f} | "
              f"{median['kernel_s']:.3f} | {median['traceback_s']:.3f} | {gcups:,.0f} | "
              f"{'identical' if agree else 'DIFFER'} |")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "queries": str(args.queries),
                                         "db": str(args.db), "copies": args.copies,
                                         "max_hits": args.max_hits, "rows": rows}, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
