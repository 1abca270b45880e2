"""Benchmark of the long pair aligner (swdask.align_long): a chromosome against a mutated
window of itself, GCUPS of the score pass on GPU, CPU and both, and the traceback.

Default workload (issue 7): A = the whole NCTC 11397 chromosome (2.46 Mb), B = a 1 Mb
window of it (from 700,000) with a planted mutation every 1,000 residues (substitutions,
insertions and deletions of 1-3 residues: ``swdask.testing.planted_copy``), so the
best score is known and checked.  GCUPS = m x n / seconds of the score pass (the tile
DAG, from submission to the best cell, JIT warm-up excluded by a warm-up run).  With
``--traceback``: the traceback's seconds (after a warm-up traceback of a tenth of the
path, which compiles its kernels), peak resident memory during the run, GPU memory in
use, and the cells it recomputed (grid sweeps and leaf walks, ``stats["traceback"]``).

    python workflows/benchmarks/long_align.py --a PATH/NCTC11397_chromosome.fna.gz \\
        --devices gpu,both --traceback --json out.json
    python workflows/benchmarks/long_align.py --quick        # seconds, CPU or simulator

CPU-only on the full workload would take many minutes, so the ``cpu`` device runs on
the first ``--cpu-rows`` residues of A (a rate, GCUPS, is what is compared).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_A = ROOT.parent / "shared" / "data" / "NCTC11397_chromosome.fna.gz"
QUICK_A = ROOT / "tests" / "data" / "NCTC11397_window40k.fna.gz"


def real_gpu() -> bool:
    from swdask.backend import gpu_available, simulator_enabled

    return gpu_available() and not simulator_enabled()


def gpu_name() -> str:
    if not real_gpu():
        return "none"
    from numba import cuda

    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def gpu_memory_used() -> int | None:
    if not real_gpu():
        return None
    from numba import cuda

    free, total = cuda.current_context().get_memory_info()
    return int(total - free)


class RssPeak:
    """Peak resident memory of this process while the block runs, sampled every 20 ms
    from /proc (Linux) by a thread; ``before`` is the resident memory at the start."""

    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.before = self.peak = 0
        self._stop = threading.Event()

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _sample(self):
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.rss())

    def __enter__(self):
        self.before = self.peak = self.rss()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, help=f"query FASTA (default {DEFAULT_A})")
    parser.add_argument("--b", type=Path, help="subject FASTA (default: a mutated window of A)")
    parser.add_argument("--window", type=int, default=1_000_000,
                        help="length of the mutated window of A used as B (default 1000000)")
    parser.add_argument("--window-start", type=int, default=700_000)
    parser.add_argument("--spacing", type=int, default=1000, help="residues between planted mutations")
    parser.add_argument("--devices", default="auto",
                        help="comma list of cpu, gpu, both (default: gpu,both,cpu with a GPU, else cpu)")
    parser.add_argument("--tile", default="auto", help="tile side or auto (default auto)")
    parser.add_argument("--cpu-rows", type=int, default=100_000,
                        help="rows of A for the cpu device (default 100000; 0 = all)")
    parser.add_argument("--traceback", action="store_true", help="time the traceback too")
    parser.add_argument("--reverse-complement", action="store_true")
    parser.add_argument("--calibrate", action="store_true",
                        help="measure the cost model here first and plan tiles with it")
    parser.add_argument("--sub-rows", type=int, help="GPU kernel: rows per lane (default 8)")
    parser.add_argument("--sub-width", type=int, help="GPU kernel: sub-tile width (default 512)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs after a warm-up (median)")
    parser.add_argument("--quick", action="store_true",
                        help="3 kb against a 2 kb mutated window of the test data, tiles of 512")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)

    import swdask
    from swdask.jobs import long_align as la
    from swdask.kernels.cuda import tile as gpu_tile
    from swdask.sequences.store import load_sequences
    from swdask.testing import planted_copy

    if args.sub_rows:
        gpu_tile.ROWS = args.sub_rows
    if args.sub_width:
        gpu_tile.WIDTH = args.sub_width
    scoring = swdask.Scoring(alphabet="dna")
    a_path = args.a or (QUICK_A if args.quick else DEFAULT_A)
    a = load_sequences(a_path).codes(0)
    if args.quick:
        a = a[:3000]
        args.window, args.window_start, args.spacing = 2000, 500, 150
        args.tile = args.tile if args.tile != "auto" else "512"
        args.cpu_rows = 0
    expected = None
    if args.b:
        b = load_sequences(args.b).codes(0)
        workload = f"{a_path.name} ({len(a):,}) x {args.b.name} ({len(b):,})"
    else:
        window = a[args.window_start:args.window_start + args.window]
        b, expected, _ = planted_copy(window, scoring, spacing=args.spacing, seed=7)
        workload = (f"{a_path.name} ({len(a):,} residues) x a {len(window):,}-residue window of "
                    f"it from {args.window_start:,} with a mutation every {args.spacing} "
                    f"({len(b):,} residues, planted score {expected:,})")
    if args.devices == "auto":
        devices = ["gpu", "both", "cpu"] if real_gpu() else ["cpu"]
    else:
        devices = args.devices.split(",")
    model = la.calibrate(kinds=("cpu", "gpu")) if args.calibrate else la.CostModel()
    tile = args.tile if args.tile == "auto" else int(args.tile)
    print(f"GPU: {gpu_name()}; CPU: {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores; swdask {swdask.__version__}")
    print(f"workload: {workload}")
    print(f"cost model: {model}")
    rows = []
    for device in devices:
        a_run = a[:args.cpu_rows] if device == "cpu" and args.cpu_rows else a
        times, result = [], None
        for k in range(args.repeats + 1):  # the first run warms up (JIT, cluster start)
            result = la.align_long(a_run, b, scoring=scoring, tile=tile, device=device,
                                   reverse_complement=args.reverse_complement, model=model)
            if k:
                times.append(result.score_seconds)
        seconds = statistics.median(times) if times else result.score_seconds
        cells = len(a_run) * len(b) * (2 if args.reverse_complement else 1)
        row = {"device": device, "rows": len(a_run), "cols": len(b), "cells": cells,
               "score": result.score, "query_end": result.query_end,
               "subject_end": result.subject_end, "score_seconds": seconds,
               "gcups": cells / seconds / 1e9, "ran_on": result.device,
               "tiles": [result.tile_rows, result.tile_cols],
               "predicted_seconds": result.stats["predicted_seconds"],
               "tiles_on": result.stats["tiles_on"], "busy_seconds": result.stats["busy_seconds"]}
        if expected is not None and len(a_run) == len(a):
            row["planted_score_ok"] = result.score == expected
        rows.append(row)
        print(f"| {device:4} | {len(a_run):>10,} x {len(b):>10,} | score {result.score:>9,} | "
              f"score pass {seconds:8.2f} s | {row['gcups']:8.2f} GCUPS | tiles "
              f"{result.tile_rows} x {result.tile_cols} on {result.device} | predicted "
              f"{row['predicted_seconds']:.3g} s")
    traceback = None
    if args.traceback:
        device = devices[0]
        # Warm-up: compiles the traceback's kernels on a tenth of the path (planted: the
        # window's start in A against B's; otherwise the sequences' first tenths).
        start = args.window_start if args.b is None else 0
        la.align_long(a[start:start + len(a) // 10], b[:len(b) // 10], scoring=scoring,
                      device=device, traceback=True, model=model)
        gpu_before = gpu_memory_used()
        with RssPeak() as rss:  # a sampling thread: no cost to the traced code
            started = time.perf_counter()
            result = la.align_long(a, b, scoring=scoring, tile=tile, device=device,
                                   traceback=True, model=model)
            wall = time.perf_counter() - started
        gpu_after = gpu_memory_used()
        traceback = {"device": device, "wall_seconds": wall,
                     "score_seconds": result.score_seconds,
                     "traceback_seconds": result.traceback_seconds,
                     "rss_before_bytes": rss.before, "peak_rss_bytes": rss.peak,
                     "gpu_memory_used_bytes": gpu_after,
                     "gpu_memory_before_bytes": gpu_before,
                     "query": [result.query_start, result.query_end],
                     "subject": [result.subject_start, result.subject_end],
                     "pident": result.pident, "gap_opens": result.gap_opens,
                     "mismatches": result.mismatches, "score": result.score,
                     "recomputed": result.stats["traceback"]}
        print(f"traceback on {device}: {result.traceback_seconds:.2f} s (wall {wall:.2f} s with "
              f"the score pass), peak RSS {rss.peak / 2**20:.0f} MiB (before {rss.before / 2**20:.0f} "
              f"MiB), GPU memory in use "
              f"{'n/a' if gpu_after is None else f'{gpu_after / 2**20:.0f} MiB'}; alignment "
              f"query {result.query_start:,}..{result.query_end:,}, subject "
              f"{result.subject_start:,}..{result.subject_end:,}, {result.pident:.3f}% identity, "
              f"{result.mismatches} mismatches, {result.gap_opens} gap opens")
        counts = result.stats["traceback"]
        cells = len(a) * len(b)
        print(f"traceback recomputed {counts['grid_cells']:,} cells in "
              f"{sum(counts['grids'].values()):,} grid sweeps ({counts['grids']['gpu']:,} on "
              f"the GPU; {counts['grid_cells'] / cells:.2f} x the matrix) and "
              f"{counts['leaf_cells']:,} cells in {counts['leaves']:,} leaf walks; "
              f"{counts['depth']} levels of grids; peak cut boundaries held "
              f"{counts['peak_boundary_bytes'] / 2**20:.2f} MiB")
    ok = all(r.get("planted_score_ok", True) for r in rows)
    if expected is not None:
        print("planted score found on every full run" if ok else "PLANTED SCORE MISSED")
    if args.json:
        args.json.write_text(json.dumps({
            "workload": workload, "gpu": gpu_name(), "machine": platform.platform(),
            "cores": os.cpu_count(), "cost_model": dataclasses.asdict(model), "rows": rows,
            "traceback": traceback, "expected_score": expected}, indent=2, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
