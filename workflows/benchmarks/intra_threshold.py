"""Where the block-per-pair (intra-task) kernel overtakes the inter-task kernels.

Measures the subject length at or above which the launcher should send subjects to
:mod:`swdask.kernels.cuda.intra_task` (``INTRA_THRESHOLD``), and the copy/compute overlap
of the pipelined launcher.

Workload
--------
- **Bands**: one database per subject length band (default 1k, 2k, 4k, 8k, 16k, 32k
  residues), each of about ``--band-residues`` residues (default 16 million).  A band
  holds real Swiss-Prot records of 0.8-1.25 times its length where the database has at
  least 20 of them (replicated to the band's size), else records made by concatenating
  random real records and cutting the result to a length drawn uniformly from the same
  range (seeded).  Queries: two per length (default 375 and 2,000 residues), windows of
  real records at least that long, so every row has the same cells.
- Per band and query length, the kernel time (CUDA events) of the same ``top_many`` call
  with every subject routed to the inter-task kernel (``inter16``: the 16-bit DPX kernel,
  the launcher's default path; ``inter32``: the 32-bit one) and to the intra-task kernel
  (``intra``), median of ``--repeats`` after a warm-up; GCUPS = query length x band
  residues x 2 / seconds.  The crossover is the shortest band from which ``intra`` beats
  ``inter16`` in every longer band too.
- **Realistic case**: ``sprot12071.fasta.gz`` plus ``--long`` long subjects (10k-35k
  residues, concatenated real records, titin-like), 16 queries of ~375 residues: kernel
  and end-to-end time (host clock around ``top_many``: uploads, kernels, histograms,
  selection, copies) with no routing, with the current ``INTRA_THRESHOLD`` and with the
  measured crossover, in batches of ``BATCH_QUERIES``, and once more with all queries in
  one batch (nothing to pipeline).  Kernel / end-to-end shows what the pipeline hides.

Every routing's scores and ends are checked against the CPU kernel on a sample of
subjects (``--check``, the shortest of each band) and the run fails on a difference.

Run from the repository root on a GPU machine::

    python workflows/benchmarks/intra_threshold.py --json intra_threshold.json

``--quick`` runs a tiny version (seconds on a GPU; about a minute in the CUDA simulator,
which CI uses as a smoke test): each timing runs once, without a warm-up, and the realistic
case has no row of the measured crossover, which simulated timings cannot decide.
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
NEVER = 1 << 62  # a threshold no subject reaches: everything to the inter-task kernels


def band_database(db, length, residues, rng, min_real=20):
    """Subjects of ``0.8 * length`` to ``1.25 * length`` residues, about ``residues`` in
    all: real records where there are at least ``min_real``, else concatenated real
    records."""
    from swdask.testing import long_subjects

    lo, hi = int(0.8 * length), int(1.25 * length)
    real = np.flatnonzero((db.lengths >= lo) & (db.lengths <= hi))
    seqs = []
    total = 0
    if len(real) >= min_real:
        kind = "real"
        while total < residues:
            k = int(real[len(seqs) % len(real)])
            seqs.append(db.codes(k))
            total += len(seqs[-1])
    else:
        kind = "concatenated"
        while total < residues:
            n = int(rng.integers(lo, hi + 1))
            seqs += long_subjects(db, [n], rng)
            total += n
    return seqs, kind


def pack(seqs):
    lengths = np.array([len(s) for s in seqs], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return np.concatenate(seqs).astype(np.uint8), offsets


def query_windows(db, length, count, rng):
    """``count`` windows of ``length`` residues of distinct real records at least that
    long (the longest records repeated when there are too few)."""
    long = np.flatnonzero(db.lengths >= length)
    if len(long) == 0:
        long = np.array([int(np.argmax(db.lengths))])
    picks = rng.choice(long, size=count, replace=len(long) < count)
    out = []
    for k in picks:
        codes = db.codes(int(k))
        while len(codes) < length:
            codes = np.concatenate([codes, codes])
        start = int(rng.integers(0, len(codes) - length + 1))
        out.append(codes[start:start + length].copy())
    return out


def timed(device, queries, matrix, repeats, *, packed, max_hits=100, warm_up=True):
    """Median kernel and end-to-end seconds of ``top_many``, and the last stats.  Ties are
    ranked by subject, as a search ranks them by ``seq_id`` (the scan kernel's end pass
    then covers each query's ``max_hits`` best).  ``warm_up``: one untimed call first."""
    ties = np.arange(len(device), dtype=np.int64)
    if warm_up:
        device.top_many(queries, matrix, 11, 1, max_hits, packed=packed, ties=ties)
    kernel, total, stats = [], [], None
    for _ in range(repeats):
        tick = time.perf_counter()
        _, stats = device.top_many(queries, matrix, 11, 1, max_hits, packed=packed,
                                   ties=ties)
        total.append(time.perf_counter() - tick)
        kernel.append(stats.seconds)
    return statistics.median(kernel), statistics.median(total), stats


def check(s_res, s_off, sample, queries, matrix, threshold, packed):
    """Whether ``score_many`` on ``sample`` with this routing equals the CPU kernel."""
    from swdask.kernels.cpu.score import score_all
    from swdask.kernels.cuda.launcher import DeviceSubjects

    device = DeviceSubjects(s_res, s_off, sample, intra_threshold=threshold)
    *got, _ = device.score_many(queries, matrix, 11, 1, packed=packed)
    q_res, q_off = pack(queries)
    want = score_all(q_res, q_off, s_res, s_off, matrix, 11, 1, subjects=sample)
    return all(np.array_equal(g, w) for g, w in zip(got, want))


def crossover(rows):
    """The shortest band from which the intra-task kernel beats ``inter16`` in every
    longer band (None if it never does)."""
    found = None
    for row in sorted(rows, key=lambda r: r["band"], reverse=True):
        if row["intra_gcups"] > row["inter16_gcups"]:
            found = row["band"]
        else:
            break
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=ROOT / "tests" / "data" / "sprot12071.fasta.gz")
    parser.add_argument("--bands", default="1000,2000,4000,8000,16000,32000")
    parser.add_argument("--band-residues", type=float, default=16e6)
    parser.add_argument("--query-lengths", default="375,2000")
    parser.add_argument("--long", type=int, default=8,
                        help="long subjects added to the database in the realistic case")
    parser.add_argument("--realistic-queries", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--check", type=int, default=4, help="subjects per band checked on the CPU")
    parser.add_argument("--min-real", type=int, default=20,
                        help="real records a band needs, else it is made of concatenated ones")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run (the CUDA simulator in CI)")
    parser.add_argument("--max-hits", type=int, default=100, help="top hits kept per query")
    parser.add_argument("--json", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.max_hits = 3  # the simulator's end pass: a few hits, not every subject
        args.bands, args.band_residues, args.query_lengths = "24,40", 100, "12"
        args.min_real = 50  # 47 real records of 19-30 residues: the first band concatenates
        args.long, args.realistic_queries, args.repeats, args.check = 1, 3, 1, 2

    from numba import config, cuda

    from swdask.kernels.cuda import intra_task, launcher
    from swdask.kernels.cuda.launcher import DeviceSubjects
    from swdask.scoring import Scoring
    from swdask.sequences.store import load_sequences
    from swdask.testing import long_subjects

    if config.ENABLE_CUDASIM:
        name, sms = "CUDA simulator", 0
    else:
        device = cuda.get_current_device()
        name = device.name.decode() if isinstance(device.name, bytes) else device.name
        sms = device.MULTIPROCESSOR_COUNT
    matrix = Scoring().matrix
    db = load_sequences(args.db)
    rng = np.random.default_rng(2026)
    bands = [int(b) for b in args.bands.split(",")]
    lengths = [int(x) for x in args.query_lengths.split(",")]
    queries = {m: query_windows(db, m, 2, rng) for m in lengths}
    print("# swdask intra-task threshold benchmark\n")
    print(f"- GPU: {name}, {sms} SMs; host {platform.node()}")
    print(f"- subjects from {args.db}; BLOSUM62 11/1, local; 2 queries per row; kernel time "
          f"from CUDA events, median of {args.repeats} after a warm-up")
    print(f"- current INTRA_THRESHOLD = {intra_task.INTRA_THRESHOLD}, BATCH_QUERIES = "
          f"{launcher.BATCH_QUERIES}\n")
    print("| query | band | subjects | kind | residues | inter16 GCUPS | inter32 GCUPS | "
          "intra GCUPS | intra / inter16 | CPU check |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---|")
    rows = []
    for band in bands:
        seqs, kind = band_database(db, band, args.band_residues, rng, args.min_real)
        s_res, s_off = pack(seqs)
        sample = np.argsort([len(s) for s in seqs], kind="stable")[:args.check].astype(np.int64)
        devices = {label: DeviceSubjects(s_res, s_off, intra_threshold=t)
                   for label, t in (("inter", NEVER), ("intra", 1))}
        for m in lengths:
            qs = queries[m]
            cells = sum(len(q) for q in qs) * int(s_res.size)
            once = dict(max_hits=args.max_hits, warm_up=not args.quick)
            k16, _, _ = timed(devices["inter"], qs, matrix, args.repeats, packed=True, **once)
            k32, _, _ = timed(devices["inter"], qs, matrix, args.repeats, packed=False, **once)
            ki, _, stats = timed(devices["intra"], qs, matrix, args.repeats, packed=True,
                                 **once)
            assert stats.pairs_intra == len(qs) * len(seqs) and stats.pairs_inter == 0
            ok = all(check(s_res, s_off, sample, qs, matrix, t, p)
                     for t, p in ((NEVER, True), (1, True)))
            row = dict(query_length=m, band=band, subjects=len(seqs), kind=kind,
                       residues=int(s_res.size), cells=cells,
                       inter16_seconds=k16, inter32_seconds=k32, intra_seconds=ki,
                       inter16_gcups=cells / k16 / 1e9, inter32_gcups=cells / k32 / 1e9,
                       intra_gcups=cells / ki / 1e9, cpu_check=ok)
            rows.append(row)
            print(f"| {m} | {band} | {len(seqs):,} | {kind} | {s_res.size:,} | "
                  f"{row['inter16_gcups']:.1f} | {row['inter32_gcups']:.1f} | "
                  f"{row['intra_gcups']:.1f} | {row['intra_gcups'] / row['inter16_gcups']:.2f} | "
                  f"{'identical' if ok else 'MISMATCH'} ({len(sample)} subjects) |", flush=True)
            if not ok:
                print("scores differ from the CPU kernel", file=sys.stderr)
                return 1
    cross = {m: crossover([r for r in rows if r["query_length"] == m]) for m in lengths}
    print()
    for m in lengths:
        c = cross[m]
        print(f"- crossover for {m}-residue queries: "
              + (f"the intra-task kernel wins from the {c}-residue band on" if c
                 else "the intra-task kernel never wins"))
    measured = [c for c in cross.values() if c]
    # Subjects of the lowest band edge (0.8 x band) and longer go to the intra kernel only
    # if it wins there for every query length.
    suggested = int(0.8 * max(measured)) if len(measured) == len(lengths) else None
    print(f"- suggested INTRA_THRESHOLD: {suggested if suggested else 'none (keep routing off)'}")

    # The realistic case: Swiss-Prot plus a few titin-like subjects, 16 queries.
    long_lengths = rng.integers(10_000, 35_001, args.long) if not args.quick else [60] * args.long
    extra = long_subjects(db, long_lengths, rng)
    base = [db.codes(k) for k in range(len(db))] if not args.quick else [
        db.codes(k)[:30] for k in range(10)]
    s_res, s_off = pack(base + extra)
    qs = query_windows(db, 375 if not args.quick else 12, args.realistic_queries, rng)
    cells = sum(len(q) for q in qs) * int(s_res.size)
    current = intra_task.INTRA_THRESHOLD if not args.quick else 50
    thresholds = [("no routing", NEVER, None), ("INTRA_THRESHOLD", current, None)]
    if suggested and not args.quick:  # the simulator's timings decide nothing
        thresholds.append(("measured crossover", suggested, None))
    # The same routing with every query in one batch: nothing to overlap with.
    thresholds.append(("INTRA_THRESHOLD, one batch", current, len(qs)))
    if args.quick:
        thresholds[1] = ("routing at 50", 50, None)
        thresholds[-1] = ("routing at 50, one batch", 50, len(qs))
    print(f"\nRealistic case: {len(base):,} Swiss-Prot records + {len(extra)} long subjects "
          f"({', '.join(str(len(e)) for e in extra)} residues), {len(qs)} queries of "
          f"{len(qs[0])} residues, top {args.max_hits} each\n")
    print("| routing | threshold | intra pairs | kernel s | kernel GCUPS | end-to-end s | "
          "end-to-end GCUPS | kernel / end-to-end |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    realistic = []
    for label, t, batch in thresholds:
        device = DeviceSubjects(s_res, s_off, intra_threshold=t)
        saved = launcher.BATCH_QUERIES
        launcher.BATCH_QUERIES = batch or saved
        try:
            kernel, total, stats = timed(device, qs, matrix, args.repeats, packed=True,
                                         max_hits=args.max_hits, warm_up=not args.quick)
        finally:
            launcher.BATCH_QUERIES = saved
        row = dict(routing=label, threshold=t if t != NEVER else None,
                   batch_queries=batch or saved,
                   pairs_intra=stats.pairs_intra, pairs_inter=stats.pairs_inter, cells=cells,
                   kernel_seconds=kernel, end_to_end_seconds=total,
                   kernel_gcups=cells / kernel / 1e9, end_to_end_gcups=cells / total / 1e9,
                   overlap=kernel / total)
        realistic.append(row)
        print(f"| {label} | {t if t != NEVER else '-'} | {stats.pairs_intra:,} | {kernel:.4f} | "
              f"{row['kernel_gcups']:.1f} | {total:.4f} | {row['end_to_end_gcups']:.1f} | "
              f"{100 * row['overlap']:.1f}% |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(
            gpu=name, sms=sms, intra_threshold=intra_task.INTRA_THRESHOLD,
            batch_queries=launcher.BATCH_QUERIES, bands=rows,
            crossover={str(m): c for m, c in cross.items()}, suggested_threshold=suggested,
            realistic=realistic), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
