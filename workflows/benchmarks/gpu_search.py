"""GPU search benchmark: kernel and end-to-end GCUPS of the CUDA score pass.

Workload (issue 3): the Swiss-Prot database ``tests/data/sprot12071.fasta.gz`` replicated
until it holds at least ``--min-residues`` residues (default 100 million; 12k sequences
are far too few to fill a GPU), sorted by length as a store is.  Queries come in pairs of
about 144, 375, 1,000, 2,000 and 5,000 residues, taken from Swiss-Prot (``sprot196.fasta``
up to 1,000 residues, the database beyond): the 16-bit kernel scores two queries per
launch, so each row of the table is the two queries closest to its length.  Scoring
BLOSUM62 11/1, local (``--mode``: one or more of local, global and semiglobal,
comma-separated; each mode is a column of rows, so ``--mode local,global`` compares the
global kernels with the local ones on one card in one run).

Per row it prints:

- kernel GCUPS: cells / score-kernel time (CUDA events around the launches, 32-bit
  re-runs of overflowing pairs included), median of ``--repeats`` runs after a warm-up;
- end-to-end GCUPS: cells / host time of one ``DeviceSubjects.top_many`` call, what a
  search partition does: profile upload, kernels, score histograms, keeping the top
  ``--max-hits`` per query on the device and copying only those back;
- the share of cells computed in 32 bits (overflow re-runs, or the 32-bit variant),

with cells = query length x database residues for every pair, and which kernel scored
how many subjects per query (``inter``: the thread-group kernels; ``intra``: the
block-per-pair kernel for subjects of at least ``--intra-threshold`` residues).  It checks
every score and end cell of a sample of subjects against the CPU kernel and fails loudly
on a difference.  ``--queries-per-row`` above 2 makes several pipelined batches per call
(the launcher's ``BATCH_QUERIES``), so end-to-end vs kernel time shows the overlap.

Variants (``--variants``, comma-separated): ``16`` the 16-bit DPX kernel with the shape
chosen per query, ``16r8``/``16r12``/``16r16`` with that many rows per lane, ``32`` the
32-bit kernel (the path of GPUs without DPX).

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
    parser.add_argument("--max-hits", type=int, default=100)
    parser.add_argument("--variants", default="16")
    parser.add_argument("--mode", default="local",
                        help="alignment modes, comma-separated: local, global, semiglobal "
                        "(default local)")
    parser.add_argument("--order", choices=("ascending", "descending"), default="descending",
                        help="launch order of the subjects by length (descending, the default, is "
                        "ascending; descending starts the longest first)")
    parser.add_argument("--check", type=int, default=3000, help="subjects checked on the CPU")
    parser.add_argument("--queries-per-row", type=int, default=2)
    parser.add_argument("--intra-threshold", type=int, default=None,
                        help="subjects at least this long go to the intra-task kernel "
                        "(default: the launcher's INTRA_THRESHOLD)")
    parser.add_argument("--json", help="also write the results as JSON")
    args = parser.parse_args(argv)
    modes = args.mode.split(",")
    for mode in modes:
        if mode not in ("local", "global", "semiglobal"):
            parser.error(f"--mode: unknown mode {mode!r}; choose from local, global, semiglobal")

    from numba import cuda

    from swdask.kernels.cpu.score import score_all
    from swdask.kernels.cuda import inter_task_dpx
    from swdask.kernels.cuda.launcher import DeviceSubjects
    from swdask.scoring import Scoring
    from swdask.sequences.store import load_sequences

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
    launch = np.arange(len(lengths), dtype=np.int64)
    subjects = DeviceSubjects(s_res, s_off, launch if args.order == "ascending" else launch[::-1],
                              intra_threshold=args.intra_threshold)
    subjects.stream.synchronize()
    upload = time.perf_counter() - tick
    rng = np.random.default_rng(0)
    check_idx = np.sort(rng.choice(len(db), size=min(args.check, len(db)), replace=False))
    # The first copy of the database holds subject k of the sorted set at index k*copies.
    sample = DeviceSubjects(s_res, s_off, check_idx * copies,
                            intra_threshold=args.intra_threshold)

    pool = load_sequences(args.queries)
    records = [(pool.names[k], pool.codes(k)) for k in range(len(pool))]
    records += [(db.names[k], db.codes(k)) for k in range(len(db)) if db.lengths[k] > 1165]
    print("# swdask GPU search benchmark\n")
    print(f"- GPU: {name}, {sms} SMs; host {platform.node()}")
    print(f"- database: {args.db} x {copies}: {len(lengths):,} sequences, {s_res.size:,} "
          f"residues, launched in {args.order} length order (upload {upload:.2f} s)")
    print(f"- scoring: BLOSUM62 11/1, {', '.join(modes)}; {args.queries_per_row} queries per row; "
          f"median of {args.repeats} runs after a warm-up; end to end keeps the top "
          f"{args.max_hits} per query\n")
    print("| mode | variant | queries | lengths | kernel s | kernel GCUPS | end-to-end s | "
          "end-to-end GCUPS | 32-bit cells | subjects per query (inter / intra) | CPU check |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---|")
    results = []
    saved_rates = dict(inter_task_dpx.ROW_RATES)
    for mode, label in ((m, v) for m in modes for v in args.variants.split(",")):
        packed = label.startswith("16")
        if "r" in label:
            inter_task_dpx.ROW_RATES = {int(label.split("r")[1]): 1.0}
        for target in (int(x) for x in args.lengths.split(",")):
            ranked = sorted(records, key=lambda r: (abs(len(r[1]) - target), r[0]))[
                :args.queries_per_row]
            queries = [codes for _, codes in ranked]
            run = dict(packed=packed, mode=mode)
            subjects.top_many(queries, scoring.matrix, 11, 1, args.max_hits, **run)  # warm-up
            kernel, total, stats = [], [], None
            for _ in range(args.repeats):
                tick = time.perf_counter()
                _, stats = subjects.top_many(queries, scoring.matrix, 11, 1, args.max_hits,
                                             **run)
                total.append(time.perf_counter() - tick)
                kernel.append(stats.seconds)
            *got, _ = sample.score_many(queries, scoring.matrix, 11, 1, **run)
            q_off = np.concatenate([[0], np.cumsum([len(q) for q in queries])]).astype(np.int64)
            want = score_all(np.concatenate(queries), q_off, db.residues, db.offsets,
                             scoring.matrix, 11, 1, mode, subjects=check_idx)
            ok = all(np.array_equal(g, w) for g, w in zip(got, want))
            cells = stats.cells
            row = dict(mode=mode, variant=label, queries=[n for n, _ in ranked],
                       lengths=[len(q) for q in queries], cells=cells, kernel_seconds=kernel,
                       end_to_end_seconds=total,
                       kernel_gcups=cells / statistics.median(kernel) / 1e9,
                       end_to_end_gcups=cells / statistics.median(total) / 1e9,
                       cells_32bit_share=stats.cells_32bit / cells, rescored=stats.rescored,
                       subjects_inter=stats.pairs_inter // len(queries),
                       subjects_intra=stats.pairs_intra // len(queries), cpu_check=ok)
            results.append(row)
            print(f"| {mode} | {label} | {', '.join(n[:20] for n, _ in ranked)} | "
                  f"{'+'.join(str(len(q)) for q in queries)} | {statistics.median(kernel):.4f} | "
                  f"{row['kernel_gcups']:.1f} | {statistics.median(total):.4f} | "
                  f"{row['end_to_end_gcups']:.1f} | {100 * row['cells_32bit_share']:.3f}% | "
                  f"{row['subjects_inter']:,} / {row['subjects_intra']:,} | "
                  f"{'identical' if ok else 'MISMATCH'} ({len(check_idx)} subjects) |",
                  flush=True)
            if not ok:
                print("scores differ from the CPU kernel", file=sys.stderr)
                return 1
        inter_task_dpx.ROW_RATES = dict(saved_rates)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(gpu=name, sms=sms,
                                                    residues=int(s_res.size), copies=copies,
                                                    results=results), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
