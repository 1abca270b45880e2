"""GPU search benchmark: kernel and end-to-end GCUPS of the CUDA score kernel.

Workload (issue 3): the Swiss-Prot database ``tests/data/sprot12071.fasta.gz`` replicated
until it holds at least ``--min-residues`` residues (default 100 million; 12k sequences
are far too few to fill a GPU), sorted by length as a store is; one query each of about
144, 375, 1,000, 2,000 and 5,000 residues, taken from Swiss-Prot (``sprot196.fasta`` up
to 1,000 residues, the database beyond).  Scoring BLOSUM62 11/1, local.

Per query it prints the kernel GCUPS (CUDA events around the launch; median of
``--repeats`` runs after a warm-up) and the end-to-end GCUPS (host clock around one
``DeviceSubjects.score`` call: profile upload, launch, copying all scores back), with
GCUPS = query length x database residues / seconds / 1e9.  It checks the scores and end
positions of a sample of subjects against the CPU kernel and fails loudly on any
difference.  All cells are computed in 32-bit lanes (the 16-bit path is not written yet).

Run from the repository root on a GPU machine::

    python workflows/benchmarks/gpu_search.py --json gpu_search.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=ROOT / "tests" / "data" / "sprot12071.fasta.gz")
    parser.add_argument("--queries", default=ROOT / "tests" / "data" / "sprot196.fasta")
    parser.add_argument("--lengths", default="144,375,1000,2000,5000")
    parser.add_argument("--min-residues", type=float, default=100e6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", default="sd",
                        help="comma-separated kernel variants: rows per lane (default: chosen "
                        "per query), then 's' for the shared-memory profile and 'd' for DPX "
                        "(e.g. sd,8,8s,8sd,12sd)")
    parser.add_argument("--group", type=int, default=None, help="lanes per pair (1..32)")
    parser.add_argument("--check", type=int, default=3000, help="subjects checked on the CPU")
    parser.add_argument("--json", help="also write the results as JSON")
    args = parser.parse_args(argv)

    from numba import cuda

    from swdask.kernels.cpu.score import score_all
    from swdask.kernels.cuda.inter_task import DeviceSubjects, choose_group, choose_shape
    from swdask.scoring import Scoring
    from swdask.store import load_sequences

    variants = []
    for text in args.variants.split(","):
        digits = "".join(c for c in text if c.isdigit())
        variants.append((int(digits) if digits else None, "s" in text, "d" in text, text))
    scoring = Scoring()
    db = load_sequences(args.db).sorted_by_length()
    copies = max(1, int(np.ceil(args.min_residues / db.residues.size)))
    lengths = np.repeat(db.lengths.astype(np.int64), copies)  # keep length order
    order = np.repeat(np.arange(len(db)), copies)
    s_off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    s_res = np.concatenate([db.codes(int(i)) for i in order])
    if hasattr(cuda, "get_current_device"):
        device = cuda.get_current_device()
        name = device.name.decode() if isinstance(device.name, bytes) else device.name
        sms = device.MULTIPROCESSOR_COUNT
    else:  # the CUDA simulator (smoke runs)
        name, sms = "CUDA simulator", 0
    tick = time.perf_counter()
    subjects = DeviceSubjects(s_res, s_off)
    upload = time.perf_counter() - tick

    pool = load_sequences(args.queries)
    records = [(pool.names[k], pool.codes(k)) for k in range(len(pool))]
    records += [(db.names[k], db.codes(k)) for k in range(len(db)) if db.lengths[k] > 1165]
    print("# swdask GPU search benchmark\n")
    print(f"- GPU: {name}, {sms} SMs; host {platform.node()}")
    print(f"- database: {args.db} x {copies}: {len(lengths):,} sequences, {s_res.size:,} "
          f"residues (upload {upload:.2f} s)")
    print(f"- scoring: BLOSUM62 11/1, local; kernel: int32; median of {args.repeats} runs after "
          "a warm-up; all cells 32-bit (no 16-bit path yet); variant = rows per lane, "
          "s = shared-memory profile, d = DPX\n")
    print("| variant | query | length | group | passes | kernel s | kernel GCUPS | end-to-end s | "
          "end-to-end GCUPS | CPU check |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    results = []
    rng = np.random.default_rng(0)
    check_idx = np.sort(rng.choice(len(db), size=min(args.check, len(db)), replace=False))
    jobs = [(v, int(x)) for v in variants for x in args.lengths.split(",")]
    for (rows, shared, dpx, label), target in jobs:
        qname, query = min(records, key=lambda r: abs(len(r[1]) - target))
        if rows is None:
            rows, chosen = choose_shape(len(query))
        else:
            chosen = choose_group(len(query), rows)
        group = args.group or chosen
        options = dict(rows=rows, shared=shared, dpx=dpx)
        passes = int(np.ceil(len(query) / (group * rows)))
        subjects.score(query, scoring.matrix, 11, 1, group=group, **options)  # warm-up
        kernel, total = [], []
        for _ in range(args.repeats):
            tick = time.perf_counter()
            scores, q_end, s_end, seconds = subjects.score(query, scoring.matrix, 11, 1,
                                                           group=group, **options)
            total.append(time.perf_counter() - tick)
            kernel.append(seconds)
        # The first copy of the database holds subject k of the sorted set at index k*copies.
        want = score_all(query, np.array([0, len(query)]), db.residues, db.offsets,
                         scoring.matrix, 11, 1, subjects=check_idx)
        got = [x[check_idx * copies] for x in (scores, q_end, s_end)]
        ok = all(np.array_equal(g, w[0]) for g, w in zip(got, want))
        cells = len(query) * s_res.size
        try:  # what the compiler made of the register tiles
            from swdask.kernels.cuda.inter_task import get_kernel

            compiled = next(iter(get_kernel(group=group, alphabet=25, **options).overloads.values()))
            resources = (f"{compiled.get_regs_per_thread()} regs, "
                         f"{compiled.get_local_mem_per_thread()} B local")
        except Exception as exc:  # the simulator has no compiled kernels
            resources = type(exc).__name__
        row = dict(variant=label, query=qname, length=len(query), group=group, passes=passes, rows=rows,
                   cells=cells, kernel_seconds=kernel, end_to_end_seconds=total,
                   kernel_gcups=cells / statistics.median(kernel) / 1e9,
                   end_to_end_gcups=cells / statistics.median(total) / 1e9, cpu_check=ok,
                   resources=resources)
        results.append(row)
        print(f"| {label} | {qname[:24]} | {len(query)} | {group} | {passes} | "
              f"{statistics.median(kernel):.4f} | {row['kernel_gcups']:.1f} | "
              f"{statistics.median(total):.4f} | {row['end_to_end_gcups']:.1f} | "
              f"{'identical' if ok else 'MISMATCH'} ({len(check_idx)} subjects); {resources} |",
              flush=True)
        if not ok:
            print("scores differ from the CPU kernel", file=sys.stderr)
            return 1
    if args.json:
        Path(args.json).write_text(json.dumps(dict(gpu=name, sms=sms,
                                                    residues=int(s_res.size), copies=copies,
                                                    results=results), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
