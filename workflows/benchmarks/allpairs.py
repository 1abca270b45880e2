"""All-against-all benchmark: every pair of a set of 16S genes above an identity threshold.

Workload (issues 5, 17): the genes of ``refseq_16S.fna.gz`` (26,877 RefSeq 16S rRNA genes,
about 361 million unordered pairs), or a seeded random subset of ``--genes N`` of them, or
the ~215,000-sequence set of ``workflows/make_16s_large.py`` (``--fasta``); global
alignment, DNA match 2, mismatch -3, gaps 5/2 (a gap of k costs 5 + 2k), identity at least
``--min-identity`` (0.97).  The genes are ingested into a store first (timed apart), then
:func:`swdask.write_all_pairs` runs in this process exactly as ``swdask allpairs`` does:
the q-gram pre-filter, score pass with the identity bound (GPU kernel or CPU SIMD kernel),
traceback of the pairs over the bound on every core, one Parquet file per block pair.
``--prefilter both`` runs it with and without the pre-filter and checks that the two
outputs are identical.

It prints the GPU name (or the CPU), the workload, and per run:

- end-to-end wall time (store to finished output folder) and **pairs/s** = all unordered
  pairs / that time (the issue's bar: 100,000 pairs/s on one H100/H200 for the whole set);
- kernel time (score kernel only, summed over block pairs) and kernel GCUPS = cells / kernel
  time, with cells = m x n summed over every pair actually scored (the pairs whose
  lengths allow the threshold); end-to-end GCUPS = the same cells / wall time;
- the pre-filter's time and the pairs it dropped (of those the lengths allow), pairs
  scored, pairs the GPU kernel abandoned early (their cells still counted whole: the GCUPS
  are effective ones), pairs traced back, passing pairs, block pairs skipped.

A warm-up run on a small subset compiles the kernels first; then ``--repeats`` timed runs,
and the median of each figure.  ``--quick`` is a seconds-long smoke run (CI): 40 genes of
``tests/data/16S_200.fna.gz`` on the CPU.

Run from the repository root on a GPU machine::

    python workflows/benchmarks/allpairs.py --fasta PATH/refseq_16S.fna.gz --device gpu \\
        --repeats 1 --json allpairs_gpu.json
    python workflows/benchmarks/allpairs.py --fasta PATH/refseq_16S.fna.gz --device cpu \\
        --genes 2000 --repeats 1 --json allpairs_cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FASTA = ROOT.parent / "shared" / "data" / "refseq_16S.fna.gz"


def subset_fasta(fasta: Path, genes: int | None, seed: int, folder: Path) -> tuple[Path, int]:
    """A FASTA of ``genes`` records drawn at random (seeded) from ``fasta``, in file order."""
    from swdask.sequences.store import load_sequences

    batch = load_sequences(fasta, alphabet="dna", map_unknown=True)
    n = len(batch)
    chosen = sorted(random.Random(seed).sample(range(n), genes)) if genes and genes < n else range(n)
    path = folder / "genes.fasta"
    with open(path, "w") as out:
        for i in chosen:
            out.write(f">{batch.names[i]}\n{batch.alphabet.decode(batch.codes(i))}\n")
    return path, len(chosen)


def _device_name(device: str) -> str:
    if device == "gpu":
        from numba import cuda

        name = cuda.get_current_device().name
        return name.decode() if isinstance(name, bytes) else str(name)
    return f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def _run(store, out: Path, args, prefilter: bool = True) -> dict:
    import swdask

    scoring = swdask.Scoring(match=2, mismatch=-3, gap_open=5, gap_extend=2)
    if out.exists():
        shutil.rmtree(out)
    tick = time.perf_counter()
    stats = swdask.write_all_pairs(store, out, scoring=scoring, mode="global",
                                   min_identity=args.min_identity, device=args.device,
                                   block_size=args.block_size, gpu_rows=args.rows,
                                   progress=args.progress, prefilter=prefilter)
    wall = time.perf_counter() - tick
    return {
        "prefilter": prefilter, "wall_s": wall, "filter_s": stats.filter_seconds,
        "pairs_filtered": stats.pairs_filtered, "kernel_s": stats.kernel_seconds, "traceback_s": stats.traceback_seconds,
        "traceback_kernel_s": stats.traceback_kernel_seconds,
        "pairs": stats.pairs, "pairs_per_s": stats.pairs / wall,
        "pairs_scored": stats.pairs_scored, "cells": stats.cells,
        "kernel_gcups": stats.kernel_gcups, "end_to_end_gcups": stats.cells / wall / 1e9,
        "abandoned_early": stats.pairs_abandoned, "traced_back": stats.candidates, "passing_pairs": stats.hits,
        "block_pairs": stats.block_pairs, "block_pairs_skipped": stats.block_pairs_skipped,
        "device": stats.device,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fasta", type=Path, default=DEFAULT_FASTA,
                        help="16S genes (default: ../shared/data/refseq_16S.fna.gz beside the repo)")
    parser.add_argument("--genes", type=int, help="a seeded random subset of N genes (default: all)")
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    parser.add_argument("--min-identity", type=float, default=0.97)
    parser.add_argument("--block-size", type=int, default=2048)
    parser.add_argument("--rows", type=int, help="query rows per lane of the GPU kernel")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs after the warm-up")
    parser.add_argument("--prefilter", choices=("on", "off", "both"), default="on",
                        help="the q-gram pre-filter: on (default), off, or both (and check "
                        "that the outputs are identical)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    parser.add_argument("--progress", action="store_true", help="progress bar with ETA")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 40 genes of tests/data/16S_200.fna.gz on the CPU")
    args = parser.parse_args(argv)
    if args.quick:
        args.fasta, args.genes, args.device = ROOT / "tests" / "data" / "16S_200.fna.gz", 40, "cpu"
        args.block_size, args.prefilter = 16, "both"
    import swdask

    folder = Path(tempfile.mkdtemp(prefix="swdask-allpairs-bench-"))
    try:
        fasta, n_genes = subset_fasta(args.fasta, args.genes, args.seed, folder)
        tick = time.perf_counter()
        store = swdask.ingest(fasta, folder / "store", alphabet="dna", map_unknown=True)
        ingest_s = time.perf_counter() - tick
        (folder / "warm").mkdir()
        warm_fasta, _ = subset_fasta(fasta, min(n_genes, 64), args.seed, folder / "warm")
        warm = swdask.ingest(warm_fasta, folder / "warm-store", alphabet="dna")
        _run(warm, folder / "warm-out", argparse.Namespace(**{**vars(args), "progress": False}))
        choices = {"on": [True], "off": [False], "both": [True, False]}[args.prefilter]
        runs, identical = {}, None
        for prefilter in choices:
            out = folder / f"out-{prefilter}"
            runs[prefilter] = [_run(store, out, args, prefilter) for _ in range(max(1, args.repeats))]
        if len(choices) == 2:
            identical = bool(swdask.read_all_pairs(folder / "out-True").equals(
                swdask.read_all_pairs(folder / "out-False")))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    medians = [{k: statistics.median(r[k] for r in group)
                if isinstance(group[0][k], (int, float)) and not isinstance(group[0][k], bool)
                else group[0][k] for k in group[0]} for group in runs.values()]
    report = {
        "device": _device_name(args.device),
        "workload": {"fasta": str(args.fasta), "genes": n_genes, "seed": args.seed,
                     "mode": "global", "scoring": "DNA 2/-3, gaps 5/2 (gap of k = 5 + 2k)",
                     "min_identity": args.min_identity, "block_size": args.block_size,
                     "rows": args.rows},
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": os.cpu_count(), "swdask": swdask.__version__},
        "ingest_s": ingest_s, "runs": [r for group in runs.values() for r in group],
        "median": medians[0], "medians": medians, "outputs_identical": identical,
    }
    print(f"device: {report['device']}")
    print(f"workload: {n_genes:,} genes of {args.fasta.name}, {medians[0]['pairs']:,} pairs, "
          f"global, DNA 2/-3 5/2, identity >= {args.min_identity}")
    print(f"ingest: {ingest_s:.1f} s; median of {args.repeats} run(s) after a warm-up:")
    print("| pre-filter | wall s | pairs/s | filter s | kernel s | kernel GCUPS | end-to-end GCUPS "
          "| traceback s (its kernels) | dropped by filter | pairs scored | abandoned early "
          "| traced back | passing pairs | block pairs skipped |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m in medians:
        print(f"| {'on' if m['prefilter'] else 'off'} | {m['wall_s']:.1f} | "
              f"{m['pairs_per_s']:,.0f} | {m['filter_s']:.1f} | {m['kernel_s']:.1f} | "
              f"{m['kernel_gcups']:.1f} | {m['end_to_end_gcups']:.1f} | "
              f"{m['traceback_s']:.1f} ({m['traceback_kernel_s']:.1f}) | "
              f"{m['pairs_filtered']:,} | {m['pairs_scored']:,} | {m['abandoned_early']:,} | "
              f"{m['traced_back']:,} | {m['passing_pairs']:,} | {m['block_pairs_skipped']} of "
              f"{m['block_pairs'] + m['block_pairs_skipped']} |")
    if identical is not None:
        print(f"outputs with and without the pre-filter identical: {'yes' if identical else 'NO'}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
