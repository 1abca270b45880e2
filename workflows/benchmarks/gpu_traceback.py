"""Traceback of search hits on the GPU against the CPU traceback.

Workload: the hits a search traces back, in the shape of the GPU benchmark's workload:
``--per-length`` Swiss-Prot queries closest to each length of ``--lengths`` (default 4
each of 375, 1,000, 2,000 and 5,000 residues), each against ``--hits`` (default 100)
related subjects (the query with 15% substitutions, a deletion and an insertion, as a
search's top hits are), local alignment, BLOSUM62 11/1, the end cells from the CPU score
kernel.  It prints, for the GPU (:func:`swdask.kernels.cuda.traceback.trace_paths`): the
forward kernel's and the walk's CUDA-event time and the wall time of the call (uploads,
profiles, copies back), as GCUPS over the cells of the traced rectangles; for the CPU
(the search's traceback on every core): the wall time of ``--cpu-pairs`` pairs, as GCUPS.
Every GPU path is checked against the CPU's on the pairs the CPU traced.

    python workflows/benchmarks/gpu_traceback.py --repeats 3
    python workflows/benchmarks/gpu_traceback.py --quick        # seconds, in the simulator
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def mutated(codes, rng, rate=0.15):
    out = codes.copy()
    hits = rng.random(out.size) < rate
    out[hits] = rng.integers(0, 20, hits.sum())
    a, b = sorted(rng.integers(0, max(1, out.size), 2))
    return np.concatenate([out[:a], out[a + 5:b], rng.integers(0, 20, 7).astype(np.uint8),
                           out[b:]]).astype(np.uint8)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pool", default=str(ROOT / "tests/data/sprot12071.fasta.gz"))
    parser.add_argument("--lengths", default="375,1000,2000,5000")
    parser.add_argument("--per-length", type=int, default=4)
    parser.add_argument("--hits", type=int, default=100)
    parser.add_argument("--cpu-pairs", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (simulator smoke run)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths, args.per_length, args.hits, args.cpu_pairs, args.repeats = "9,14", 1, 2, 4, 1

    from numba import config, cuda

    from swdask.jobs.search.tasks import hit_row, trace
    from swdask.kernels.cpu.score import score_all
    from swdask.kernels.cuda.traceback import trace_paths
    from swdask.scoring import Scoring
    from swdask.sequences.store import load_sequences

    pool = load_sequences(args.pool)
    rng = np.random.default_rng(2026)
    queries = []
    for target in (int(x) for x in args.lengths.split(",")):
        order = np.argsort(np.abs(pool.lengths - target), kind="stable")[:args.per_length]
        queries += [pool.codes(int(k)).copy() for k in order]
    scoring = Scoring()
    pairs, ends = [], []
    for query in queries:
        subjects = [mutated(query, rng) for _ in range(args.hits)]
        s_len = np.array([len(s) for s in subjects])
        s_off = np.concatenate([[0], np.cumsum(s_len)]).astype(np.int64)
        scores, q_end, s_end = score_all(query, np.array([0, len(query)]),
                                         np.concatenate(subjects), s_off, scoring.matrix, 11, 1)
        for c, subject in enumerate(subjects):
            pairs.append((query, subject, int(scores[0, c])))
            ends.append((int(q_end[0, c]), int(s_end[0, c])))
    ends = np.array(ends, np.int64)
    cells = int((ends[:, 0] * ends[:, 1]).sum())
    device = "CUDA simulator" if config.ENABLE_CUDASIM else cuda.get_current_device().name
    device = device.decode() if isinstance(device, bytes) else device
    print(f"# GPU traceback vs CPU traceback\n- device: {device}; host {platform.node()}, "
          f"{os.cpu_count()} cores\n- {len(queries)} queries ({args.lengths} x {args.per_length})"
          f" x {args.hits} related subjects: {len(pairs)} pairs, {cells:,} cells")

    gpu_runs = []
    warm_up = 0 if args.quick else 1  # the simulator compiles nothing
    for attempt in range(1 - warm_up, args.repeats + 1):
        stats = {}
        scores, starts, paths = trace_paths([p[0] for p in pairs], [p[1] for p in pairs], ends,
                                            scoring.matrix, 11, 1, stats=stats)
        assert all(int(scores[k]) == pairs[k][2] for k in range(len(pairs))), "score mismatch"
        if attempt:
            gpu_runs.append(stats)
            print(f"gpu run {attempt}: forward {stats['forward_seconds']:.4f} s, walk "
                  f"{stats['walk_seconds']:.4f} s, call {stats['seconds']:.4f} s "
                  f"({stats['launches']} launch(es))")
    forward = statistics.median(r["forward_seconds"] for r in gpu_runs)
    walk = statistics.median(r["walk_seconds"] for r in gpu_runs)
    call = statistics.median(r["seconds"] for r in gpu_runs)

    # The CPU: the search's own traceback (all cores), on an even sample of the pairs.
    sample = np.linspace(0, len(pairs) - 1, min(args.cpu_pairs, len(pairs))).astype(int)
    work = [("q", 0, pairs[k][0], "s", int(k), pairs[k][1], pairs[k][2], int(ends[k, 0]),
             int(ends[k, 1]), 1) for k in sample]
    trace(work[:1], scoring, "local")  # compile
    tick = time.perf_counter()
    rows = trace(work, scoring, "local")
    cpu_seconds = time.perf_counter() - tick
    cpu_cells = int((ends[sample, 0] * ends[sample, 1]).sum())
    for row, k in zip(rows, sample):
        want = hit_row("q", 0, pairs[k][0], "s", int(k), pairs[k][1], pairs[k][2],
                        int(ends[k, 0]), int(ends[k, 1]), 1, scoring, "local")
        assert row == want
        assert (row[7], row[9]) == (int(starts[k, 0]), int(starts[k, 1]))
    gpu_rows = trace(work, scoring, "local", device="gpu")
    assert gpu_rows == rows, "the GPU and CPU tracebacks differ"

    result = {
        "device": device, "host": platform.node(), "cores": os.cpu_count(), "pairs": len(pairs),
        "cells": cells, "gpu_forward_seconds": forward, "gpu_walk_seconds": walk,
        "gpu_call_seconds": call, "gpu_kernel_gcups": cells / (forward + walk) / 1e9,
        "gpu_call_gcups": cells / call / 1e9, "cpu_pairs": len(sample), "cpu_cells": cpu_cells,
        "cpu_seconds": cpu_seconds, "cpu_gcups": cpu_cells / cpu_seconds / 1e9,
        "runs": gpu_runs}
    print(f"\n| traceback | seconds | GCUPS |\n|---|---:|---:|\n"
          f"| GPU kernels (forward + walk), {len(pairs)} pairs | {forward + walk:.4f} | "
          f"{result['gpu_kernel_gcups']:.1f} |\n"
          f"| GPU call (uploads, kernels, copies, paths) | {call:.4f} | {result['gpu_call_gcups']:.1f} |\n"
          f"| CPU, {os.cpu_count()} cores, {len(sample)} pairs | {cpu_seconds:.4f} | "
          f"{result['cpu_gcups']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
