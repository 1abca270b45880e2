"""Pairwise statistical significance benchmark: effective GCUPS of shuffles + scores + fits.

Workload (issue 6): ``--queries`` Swiss-Prot queries (the first records of
``sprot196.fasta``) x ``--subjects`` Swiss-Prot subjects (a seeded random sample of
``sprot12071.fasta.gz``) x ``--shuffles`` shuffles of every subject, every query against
every subject (``pairs="all"``), BLOSUM62 11/1, local.

It prints the device (GPU name), the workload, and for the main run (median of
``--repeats`` runs after a warm-up):

- wall time of :func:`swdask.jobs.significance.significance_in_process` (shuffles made on the
  device, scores, censored Gumbel fits, P-values back on the host), and its effective
  GCUPS: query length x subject length x (shuffles + 1), summed over pairs, / wall seconds;
- kernel time (score kernels only, CUDA events) and its GCUPS, and the shuffle and fit
  kernel times.

Then the CPU figure on a small slice (``--cpu-slice QUERIES,SUBJECTS,SHUFFLES``, default
2,20,100), and on that slice a check that the main device gives the CPU's numbers
(scores exactly, fits to 1e-9): it fails loudly on a difference.

Run from the repository root on a GPU machine::

    python workflows/benchmarks/significance.py --queries 100 --subjects 3000 \\
        --shuffles 1000 --device gpu --json significance.json

``--quick`` runs a seconds-long smoke version (CPU, or the CUDA simulator).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"


def _default(name):
    path = SHARED / name
    return path if path.exists() else ROOT / "tests" / "data" / name


def _device_name(device):
    if device != "gpu":
        return f"CPU: {platform.processor() or platform.machine()}"
    from numba import config, cuda

    if config.ENABLE_CUDASIM:
        return "CUDA simulator"
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def _workload(queries, subjects, n_queries, n_subjects, seed=0, max_length=None):
    """The first ``n_queries`` queries and a seeded sample of ``n_subjects`` subjects;
    with ``max_length``, the shortest queries and subjects of at most that length."""
    rng = np.random.default_rng(seed)
    q_ok = np.arange(len(queries))
    s_ok = np.arange(len(subjects))
    if max_length is not None:
        q_ok = np.argsort(queries.lengths, kind="stable")
        s_ok = s_ok[subjects.lengths <= max_length]
    q = {queries.names[i]: queries.alphabet.decode(queries.codes(int(i))) for i in q_ok[:n_queries]}
    picks = np.sort(rng.choice(s_ok, min(n_subjects, len(s_ok)), replace=False))
    s = {subjects.names[i]: subjects.alphabet.decode(subjects.codes(int(i))) for i in picks}
    return q, s


def _run(q, s, shuffles, device, repeats, seed=1):
    from swdask.jobs.significance import significance_in_process

    significance_in_process(q, s, shuffles=shuffles, seed=seed, device=device)  # warm-up
    runs = []
    for _ in range(repeats):
        tick = time.perf_counter()
        frame, stats = significance_in_process(q, s, shuffles=shuffles, seed=seed, device=device)
        runs.append((time.perf_counter() - tick, frame, stats))
    runs.sort(key=lambda r: r[0])
    wall, frame, stats = runs[len(runs) // 2]
    return {
        "pairs": len(frame),
        "cells": stats.cells,
        "wall_seconds": wall,
        "wall_seconds_all": [r[0] for r in runs],
        "effective_gcups": stats.cells / wall / 1e9,
        "kernel_seconds": stats.kernel_seconds,
        "kernel_gcups": stats.cells / stats.kernel_seconds / 1e9 if stats.kernel_seconds else 0.0,
        "shuffle_seconds": stats.shuffle_seconds,
        "fit_seconds": stats.fit_seconds,
        "median_p_value": float(np.median(frame.p_value.to_numpy(float))),
    }, frame


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--query-file", default=_default("sprot196.fasta"))
    parser.add_argument("--subject-file", default=_default("sprot12071.fasta.gz"))
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--subjects", type=int, default=3000)
    parser.add_argument("--shuffles", type=int, default=1000)
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs after a warm-up")
    parser.add_argument("--cpu-slice", default="2,20,100",
                        help="QUERIES,SUBJECTS,SHUFFLES of the CPU figure and the check")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 2 queries x 3 subjects x 10 shuffles of the shortest "
                        "sequences, slice 1,2,10")
    parser.add_argument("--json", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.queries, args.subjects, args.shuffles, args.repeats = 2, 3, 10, 1
        args.cpu_slice = "1,2,10"

    from swdask.sequences.store import load_sequences

    queries = load_sequences(args.query_file)
    subjects = load_sequences(args.subject_file)
    device = _device_name(args.device)
    short = 30 if args.quick else None  # the simulator runs a Python thread per GPU thread
    q, s = _workload(queries, subjects, args.queries, args.subjects, max_length=short)
    q_res = sum(len(v) for v in q.values())
    s_res = sum(len(v) for v in s.values())
    print(f"device: {device}")
    layout = {}
    if args.device == "gpu":
        from swdask.kernels.cuda import psse as gpu_psse

        lengths = np.array([len(v) for v in s.values()])
        chunks = gpu_psse.chunk_subjects(np.sort(lengths)[::-1], args.shuffles)
        layout = {"resident_threads": gpu_psse.resident_threads(), "chunks": len(chunks),
                  "copies_per_chunk": [len(c) * (args.shuffles + 1) for c in chunks]}
        print(f"GPU layout: {layout['resident_threads']:,} resident threads; {len(chunks)} "
              f"chunk(s) of {', '.join(f'{c:,}' for c in layout['copies_per_chunk'])} "
              "subject copies (a thread group of 1-32 lanes each)")
    print(f"workload: {len(q)} queries ({q_res:,} residues) x {len(s)} subjects "
          f"({s_res:,} residues) x {args.shuffles} shuffles (+ the real subject), "
          f"BLOSUM62 11/1, local")
    main_run, _ = _run(q, s, args.shuffles, args.device, args.repeats)
    print(f"{args.device}: {main_run['pairs']:,} pairs, {main_run['cells']:,} cells: "
          f"wall {main_run['wall_seconds']:.2f} s = {main_run['effective_gcups']:.1f} GCUPS "
          f"effective; score kernels {main_run['kernel_seconds']:.2f} s = "
          f"{main_run['kernel_gcups']:.1f} GCUPS; shuffles {main_run['shuffle_seconds']:.3f} s, "
          f"fits {main_run['fit_seconds']:.3f} s (median of {args.repeats})")

    nq, ns, nsh = (int(x) for x in args.cpu_slice.split(","))
    sq, ss = _workload(queries, subjects, nq, ns, max_length=short)
    cpu_run, cpu_frame = _run(sq, ss, nsh, "cpu", 1)
    print(f"cpu slice: {nq} x {ns} x {nsh} shuffles, {cpu_run['cells']:,} cells: wall "
          f"{cpu_run['wall_seconds']:.2f} s = {cpu_run['effective_gcups']:.2f} GCUPS effective")
    check = "skipped (main device is the CPU)"
    if args.device != "cpu":
        from swdask.jobs.significance import significance_in_process

        dev_frame, _ = significance_in_process(sq, ss, shuffles=nsh, seed=1, device=args.device)
        if dev_frame.score.tolist() != cpu_frame.score.tolist():
            sys.exit("FAILED: scores differ between the CPU and the device on the slice")
        for column in ("mu", "lambda", "p_value"):
            a = cpu_frame[column].to_numpy(float)
            b = dev_frame[column].to_numpy(float)
            if not np.allclose(a, b, rtol=1e-9, atol=0, equal_nan=True):
                sys.exit(f"FAILED: {column} differs between the CPU and the device on the slice")
        check = f"{args.device} = cpu on the slice ({len(cpu_frame)} pairs)"
    print(f"check: {check}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "device": device, "machine": platform.platform(),
            "workload": {"queries": len(q), "query_residues": q_res, "subjects": len(s),
                         "subject_residues": s_res, "shuffles": args.shuffles,
                         "query_file": str(args.query_file),
                         "subject_file": str(args.subject_file)},
            "main": {"device": args.device, **main_run},
            "cpu_slice": {"queries": nq, "subjects": ns, "shuffles": nsh, **cpu_run},
            "check": check, "gpu_layout": layout,
        }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
