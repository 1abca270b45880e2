"""GPU search benchmark: kernel and end-to-end GCUPS of the CUDA score pass.

Workload (issue 3): the Swiss-Prot database ``tests/data/sprot12071.fasta.gz`` replicated
until it holds at least ``--min-residues`` residues (default 100 million; 12k sequences
are far too few to fill a GPU), sorted by length as a store is.  With ``--shuffle SEED``
the copies after the first have each sequence's residues shuffled (``(SEED, copy)``
decides the order): Swiss-Prot's lengths and compositions without identical copies, the
database with a realistic length spread that is not replicated of issue 16, item 5; the
FASTA given to CUDASW++ holds the same copies.  Queries come in pairs of
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

Variants (``--variants``, comma-separated; default ``16scan``, the kernel the search
itself runs, :data:`swdask.kernels.cuda.launcher.SEARCH_KERNEL`): ``16`` the 16-bit DPX
kernel with end cells and the shape chosen per query, ``16r8``/``16r12``/``16r16`` with
that many rows per lane, ``32`` the 32-bit kernel (the path of GPUs without DPX);
``16scan`` (``16scanr16``, ``16scanr20``: rows per lane, a multiple of 4) the score-only
scan kernel (``kernels/cuda/inter_task_dpx_scan.py``), whose candidates' end cells come
from the 32-bit end pass: its time is in the kernel seconds and, apart, in the row's
``seconds_ends``.  A scan variant's CPU check keeps every sample subject as a candidate
(``top_many`` with ``min_score=0``), so the end pass gives every end cell it compares.

Side by side with CUDASW++4.0 (issue 16, item 5): ``--cudasw4 DIR`` (the folder of its
``makedb`` and ``align``, built by ``build-cudasw4.sh``) scores with BLOSUM62 10/1, the
gaps CUDASW++ always uses (``common.CUDASW4_GAPS``), and its rows are by default every
query of ``--queries`` in file order (``--lengths all``; the 20 queries of
``cudasw4/allqueries.fasta`` are in length order), ``--queries-per-row`` at a time.  After
swdask's rows, CUDASW++'s ``makedb`` builds its database from the same FASTA (``--db``
itself, or ``--db`` written ``copies`` times when it is replicated), and one ``align``
process scans the rows' queries ``--repeats`` + 1 times in one query file: the first pass
is its warm-up (CUDA loads a kernel at its first launch), and each query's scan time is the
median of the others, read from the per-query line ``align --verbose`` prints.  A second
table gives per row swdask's kernel GCUPS, CUDASW++'s (the row's cells over the sum of its
queries' scan times) and their ratio, then the overall row (all cells over all seconds for
each); then how many queries' top-hit scores agree, and the top-10 scores rank by rank.
CUDASW++'s scan time is GPU events around a query's whole scan (its query upload, kernels
and top-hit selection), so the table also gives swdask's end-to-end GCUPS and that ratio.

Run from the repository root on a GPU machine::

    python workflows/benchmarks/gpu_search.py --json gpu_search.json
    python workflows/benchmarks/gpu_search.py --queries .anchors/cudasw4/allqueries.fasta \\
        --cudasw4 .anchors/cudasw4 --json gpu_search_cudasw4.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_LENGTHS = "144,375,1000,2000,5000"
TOP = 10  #: hits per query compared with CUDASW++4.0

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402  (this folder)
    CUDASW4_GAPS,
    cudasw4_align_command,
    cudasw4_makedb_command,
    cudasw4_programs,
    cudasw4_scans,
    cudasw4_top_scores,
    cudasw4_total,
    one_gpu,
    scores_agree,
)
from gpu_dask_search import shuffled_copy  # noqa: E402  (this folder)


def ratio_table(rows, theirs_seconds, residues: int) -> list[dict]:
    """swdask's GCUPS against CUDASW++4.0's, row by row and overall.

    Parameters
    ----------
    rows : list of dict
        One per row of queries: ``lengths`` (the row's query lengths), ``seconds``
        (swdask's kernel seconds for the row), ``end_to_end_seconds`` (swdask's host time
        of the row's ``top_many`` call) and ``queries`` (the positions of the row's queries
        in CUDASW++'s query list).
    theirs_seconds : sequence of float
        CUDASW++'s scan seconds of each query of its list.
    residues : int
        Database residues (the same database for both).

    Returns
    -------
    list of dict
        Per row, then one overall row (``overall`` True, every row's queries): ``lengths``,
        ``cells`` (query residues x ``residues``), ``swdask_seconds``, ``swdask_gcups``,
        ``cudasw4_seconds`` (the sum of the row's queries' scan times),
        ``cudasw4_gcups``, ``ratio`` (swdask kernel GCUPS / CUDASW++ GCUPS: above 1, swdask
        is faster), ``end_to_end_seconds``, ``end_to_end_gcups`` and ``end_to_end_ratio``
        (the same with swdask's end-to-end time).  A time of 0 gives an infinite rate.
    """
    def gcups(cells, seconds):
        return cells / seconds / 1e9 if seconds > 0 else float("inf")

    def ratio(theirs, ours):
        return theirs / ours if ours > 0 else float("inf")

    table = [{"overall": False, "lengths": list(row["lengths"]),
              "cells": sum(row["lengths"]) * residues, "swdask_seconds": row["seconds"],
              "end_to_end_seconds": row["end_to_end_seconds"],
              "cudasw4_seconds": sum(theirs_seconds[q] for q in row["queries"])}
             for row in rows]
    total = {"overall": True, "lengths": [n for r in table for n in r["lengths"]]}
    for key in ("cells", "swdask_seconds", "end_to_end_seconds", "cudasw4_seconds"):
        total[key] = sum(r[key] for r in table)
    for row in (*table, total):
        row["swdask_gcups"] = gcups(row["cells"], row["swdask_seconds"])
        row["cudasw4_gcups"] = gcups(row["cells"], row["cudasw4_seconds"])
        row["ratio"] = ratio(row["cudasw4_seconds"], row["swdask_seconds"])
        row["end_to_end_gcups"] = gcups(row["cells"], row["end_to_end_seconds"])
        row["end_to_end_ratio"] = ratio(row["cudasw4_seconds"], row["end_to_end_seconds"])
    return [*table, total]


def pick_rows(args, pool, db) -> list[list[tuple[str, np.ndarray]]]:
    """The queries of each row: ``(name, codes)`` lists of ``--queries-per-row``.

    ``--lengths all``: the records of ``--queries`` in file order, ``--queries-per-row``
    at a time (the last row may hold fewer).  Otherwise, per target length, the records
    closest to it among ``--queries`` and the database records longer than 1,165
    residues (``sprot196.fasta``'s longest), ties by name.
    """
    per_row = args.queries_per_row
    if args.lengths == "all":
        records = [(pool.names[k], pool.codes(k)) for k in range(len(pool))]
        return [records[k:k + per_row] for k in range(0, len(records), per_row)]
    records = [(pool.names[k], pool.codes(k)) for k in range(len(pool))]
    records += [(db.names[k], db.codes(k)) for k in range(len(db)) if db.lengths[k] > 1165]
    return [sorted(records, key=lambda r: (abs(len(r[1]) - target), r[0]))[:per_row]
            for target in (int(x) for x in args.lengths.split(","))]


def run_cudasw4(args, rows, copies: int, residues: int, scratch: Path) -> dict:
    """CUDASW++4.0 on the benchmark's database and the rows' queries (module docstring).

    Parameters
    ----------
    args : argparse.Namespace
        ``cudasw4``, ``db``, ``shuffle`` and ``repeats``.
    rows : list of list of (str, numpy.ndarray)
        The rows' queries; CUDASW++'s query list is them in row order.
    copies : int
        How many times the benchmark replicates ``--db``.
    residues : int
        The replicated database's residues (what CUDASW++'s GCUPS must imply).
    scratch : Path
        Where its database, query file and hits go.

    Returns
    -------
    dict
        ``makedb_s``, ``align_wall_s``, ``passes``, ``total_reported`` (its ``Total time``
        line: seconds, GCUPS), ``scans`` (per query of the list: ``name``, ``length``,
        ``seconds`` (median of the timed passes), every pass's seconds and reported GCUPS),
        ``residues_implied`` (from its GCUPS and times: the database it scanned) and
        ``top`` (its best ``TOP`` scores per query of the list).
    """
    from swdask.sequences.alphabet import PROTEIN

    queries = [q for row in rows for q in row]
    if copies == 1:
        fasta = Path(args.db)
    else:
        from gpu_dask_search import replicate  # the replicated database, as cli_wall.py

        fasta = scratch / f"db_x{copies}.fasta.gz"
        replicate(Path(args.db), copies, fasta, shuffle=args.shuffle)
    prefix = scratch / "cudasw4_db" / "db"
    prefix.parent.mkdir(exist_ok=True)
    tick = time.perf_counter()
    run_program(cudasw4_makedb_command(args.cudasw4, fasta, prefix))
    makedb_s = time.perf_counter() - tick
    # Every query once as a warm-up pass, then once per repeat: one process, so the
    # database is loaded and uploaded once, as swdask's is.
    passes = args.repeats + 1
    query_file = scratch / "cudasw4_queries.fasta"
    with open(query_file, "w") as handle:
        for _ in range(passes):
            handle.writelines(f">{name.split()[0]}\n{PROTEIN.decode(codes)}\n"
                              for name, codes in queries)
    tsv = scratch / "cudasw4_hits.tsv"
    tick = time.perf_counter()
    done = run_program(cudasw4_align_command(args.cudasw4, query_file, prefix, tsv, top=TOP),
                       env=one_gpu())
    wall = time.perf_counter() - tick
    scans = cudasw4_scans(done.stdout)
    if [s["query"] for s in scans] != list(range(passes * len(queries))):
        sys.exit(f"CUDASW++ align printed {len(scans)} per-query timing lines, expected "
                 f"{passes * len(queries)}:\n{done.stdout[-3000:]}")
    n = len(queries)
    per_query = []
    for k, (name, codes) in enumerate(queries):
        timed = scans[k + n::n]  # passes after the warm-up
        per_query.append({"name": name, "length": len(codes),
                          "seconds": statistics.median(s["seconds"] for s in timed),
                          "pass_seconds": [s["seconds"] for s in scans[k::n]],
                          "pass_gcups": [s["gcups"] for s in scans[k::n]]})
    # Its GCUPS are query length x its database's residues / time: they tell which
    # database it scanned (6 digits each, so to about 1e-5).
    implied = [s["gcups"] * 1e9 * s["seconds"] / q["length"]
               for k, q in enumerate(per_query) for s in scans[k::n]
               if q["length"] and 0 < s["seconds"] and np.isfinite(s["gcups"])]
    theirs = cudasw4_top_scores(tsv)
    return {"binaries": str(Path(args.cudasw4).resolve()), "fasta": str(fasta),
            "makedb_s": makedb_s, "align_wall_s": wall, "passes": passes,
            "total_reported": list(cudasw4_total(done.stdout)), "scans": per_query,
            "residues_implied": statistics.median(implied) if implied else None,
            "residues": residues,
            "top": [theirs.get(k, [])[:TOP] for k in range(n)]}


def run_program(command: list[str], env: dict[str, str] | None = None
                ) -> subprocess.CompletedProcess:
    """Run ``command`` (``env``: added to this process's environment); exit with its
    output when it fails."""
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          env={**os.environ, **(env or {})})
    if done.returncode != 0:
        sys.exit(f"FAILED ({done.returncode}): {' '.join(command)}\n{done.stdout[-3000:]}\n"
                 f"{done.stderr[-3000:]}")
    return done


def report_cudasw4(results, rows, theirs: dict) -> dict:
    """Print the comparison tables and agreement of the local rows; their numbers.

    Parameters
    ----------
    results : list of dict
        swdask's rows (``gpu_search`` results); the local ones are compared, a table per
        variant, and get ``cudasw4_gcups``, ``cudasw4_ratio`` and
        ``cudasw4_end_to_end_ratio`` added.
    rows : list of list
        The queries of each row, as CUDASW++ got them.
    theirs : dict
        What :func:`run_cudasw4` returned.

    Returns
    -------
    dict
        Per variant: ``table`` (:func:`ratio_table`), ``top_hit_agree`` and
        ``top_hit_compared`` (queries whose best score is equal), ``top_agree`` and
        ``top_compared`` (the best ``TOP`` scores, rank by rank).
    """
    starts = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    seconds = [q["seconds"] for q in theirs["scans"]]
    print(f"\n## swdask against CUDASW++4.0 (local, BLOSUM62 {CUDASW4_GAPS[0]}/"
          f"{CUDASW4_GAPS[1]}; CUDASW++: median scan time of {theirs['passes'] - 1} passes "
          f"after a warm-up, one align process of {theirs['align_wall_s']:.1f} s)\n")
    print("| variant | queries | lengths | swdask kernel s | swdask kernel GCUPS | CUDASW++ "
          "scan s | CUDASW++ GCUPS | swdask kernel / CUDASW++ | swdask end-to-end GCUPS | "
          "end-to-end / CUDASW++ |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    compared, agreement = {}, []
    for variant in dict.fromkeys(r["variant"] for r in results if r["mode"] == "local"):
        mine = [r for r in results if r["mode"] == "local" and r["variant"] == variant]
        table = ratio_table([{"lengths": r["lengths"],
                              "seconds": statistics.median(r["kernel_seconds"]),
                              "end_to_end_seconds": statistics.median(r["end_to_end_seconds"]),
                              "queries": range(starts[k], starts[k + 1])}
                             for k, r in enumerate(mine)], seconds, theirs["residues"])
        for r, t in zip(mine, table):
            r.update(cudasw4_gcups=t["cudasw4_gcups"], cudasw4_ratio=t["ratio"],
                     cudasw4_end_to_end_ratio=t["end_to_end_ratio"])
        for k, t in enumerate(table):
            names = (f"all {len(t['lengths'])}" if t["overall"]
                     else ", ".join(n[:20] for n in mine[k]["queries"]))
            lengths = (f"{sum(t['lengths']):,} residues" if t["overall"]
                       else "+".join(str(n) for n in t["lengths"]))
            print(f"| {variant} | {names} | {lengths} | {t['swdask_seconds']:.4f} | "
                  f"{t['swdask_gcups']:,.1f} | {t['cudasw4_seconds']:.4f} | "
                  f"{t['cudasw4_gcups']:,.1f} | {t['ratio']:.3f} | "
                  f"{t['end_to_end_gcups']:,.1f} | {t['end_to_end_ratio']:.3f} |")
        ours = [s for r in mine for s in r["top"]]
        hit = scores_agree({k: s[:1] for k, s in enumerate(ours)},
                           {k: s[:1] for k, s in enumerate(theirs["top"])})
        top = scores_agree(dict(enumerate(ours)), dict(enumerate(theirs["top"])))
        compared[variant] = {"table": table, "top_hit_agree": hit[0],
                             "top_hit_compared": hit[1], "top_agree": top[0],
                             "top_compared": top[1]}
        agreement.append(f"{variant}: top-hit scores agree on {hit[0]} of {len(ours)} "
                         f"queries; best {TOP} scores {top[0]} of {top[1]} rank by rank")
    print("\n" + "\n".join(agreement))
    implied = theirs["residues_implied"]
    if implied is not None and abs(implied / theirs["residues"] - 1) > 1e-3:
        print(f"WARNING: CUDASW++'s GCUPS imply {theirs['residues_implied']:,.0f} database "
              f"residues, not {theirs['residues']:,}: not the same database?")
    return compared


def search_database(path, min_residues: float, shuffle: int | None):
    """The benchmark's database: ``path`` copied until it holds ``min_residues``, copies
    after the first shuffled with ``shuffle``, in length order with each sequence's copies
    side by side.

    Returns
    -------
    db : SequenceBatch
        ``path`` sorted by length (the first copy; the CPU check reads it).
    copies : int
    residues, offsets : numpy.ndarray
        Every copy, concatenated: subject ``k * copies + c`` is copy ``c`` of ``db``'s ``k``.
    """
    from swdask.sequences.store import load_sequences

    in_file_order = load_sequences(path)
    by_length = np.lexsort((in_file_order.seq_id, in_file_order.lengths))  # a store's order
    db = in_file_order.take(by_length)
    copies = max(1, int(np.ceil(min_residues / db.residues.size)))
    lengths = np.repeat(db.lengths.astype(np.int64), copies)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    # The shuffle is drawn in file order, as ``replicate`` draws it for CUDASW++'s FASTA,
    # so that both search the same residues; each copy is then put in length order.
    stacked = np.concatenate([
        replace(in_file_order, residues=shuffled_copy(
            in_file_order.residues, in_file_order.offsets, c, shuffle)).take(by_length).residues
        for c in range(copies)])
    block_start = (np.tile(np.arange(copies) * db.residues.size, len(db))
                   + np.repeat(db.offsets[:-1], copies))
    residues = stacked[np.repeat(block_start - offsets[:-1], lengths) + np.arange(offsets[-1])]
    return db, copies, residues, offsets


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=ROOT / "tests" / "data" / "sprot12071.fasta.gz")
    parser.add_argument("--queries", default=ROOT / "tests" / "data" / "sprot196.fasta")
    parser.add_argument("--lengths", default=None,
                        help=f"target query lengths, comma-separated, or 'all': every query "
                        f"of --queries in file order (default {DEFAULT_LENGTHS}; all with "
                        "--cudasw4)")
    parser.add_argument("--min-residues", type=float, default=100e6)
    parser.add_argument("--shuffle", type=int, metavar="SEED",
                        help="copies of --db after the first have each sequence's residues "
                             "shuffled under this seed: Swiss-Prot's lengths and compositions, "
                             "no identical copies (issue 16, item 5)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-hits", type=int, default=100)
    parser.add_argument("--variants", default="16scan",
                        help="comma list (see the module's docstring; default 16scan, the "
                        "search's own kernel: 16 is the kernel with end cells)")
    parser.add_argument("--mode", default="local",
                        help="alignment modes, comma-separated: local, global, semiglobal "
                        "(default local)")
    parser.add_argument("--order", choices=("ascending", "descending"), default="descending",
                        help="launch order of the subjects by length (default descending: the "
                        "longest first, as the search launches them)")
    parser.add_argument("--check", type=int, default=3000, help="subjects checked on the CPU")
    parser.add_argument("--queries-per-row", type=int, default=2)
    parser.add_argument("--intra-threshold", type=int, default=None,
                        help="subjects at least this long go to the intra-task kernel "
                        "(default: the launcher's INTRA_THRESHOLD)")
    parser.add_argument("--cudasw4", type=Path,
                        help="folder of CUDASW++4.0's makedb and align: compare with it "
                        "(gaps 10/1 for both)")
    parser.add_argument("--scratch", type=Path, help="folder for CUDASW++'s database, queries "
                        "and hits (default: a temporary one, removed at the end)")
    parser.add_argument("--json", help="also write the results as JSON")
    args = parser.parse_args(argv)
    modes = args.mode.split(",")
    for mode in modes:
        if mode not in ("local", "global", "semiglobal"):
            parser.error(f"--mode: unknown mode {mode!r}; choose from local, global, semiglobal")
    if args.lengths is None:
        args.lengths = "all" if args.cudasw4 else DEFAULT_LENGTHS
    if args.cudasw4:
        if "local" not in modes:
            parser.error("--cudasw4: CUDASW++4.0 searches in local mode; add local to --mode")
        try:
            cudasw4_programs(args.cudasw4)
        except FileNotFoundError as error:
            parser.error(f"--cudasw4: {error}")
    gap_open, gap_extend = CUDASW4_GAPS if args.cudasw4 else (11, 1)

    from numba import cuda

    from swdask.kernels.cpu.score import score_all
    from swdask.kernels.cuda import inter_task_dpx, inter_task_dpx_scan
    from swdask.kernels.cuda.launcher import DeviceSubjects
    from swdask.scoring import Scoring
    from swdask.sequences.store import load_sequences

    scoring = Scoring()
    db, copies, s_res, s_off = search_database(args.db, args.min_residues, args.shuffle)
    lengths = np.diff(s_off)
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
    rows = pick_rows(args, pool, db)
    print("# swdask GPU search benchmark\n")
    print(f"- GPU: {name}, {sms} SMs; host {platform.node()}")
    shuffled = f", copies after the first shuffled (seed {args.shuffle})" if (
        args.shuffle is not None and copies > 1) else ""
    print(f"- database: {args.db} x {copies}{shuffled}: {len(lengths):,} sequences, {s_res.size:,} "
          f"residues, launched in {args.order} length order (upload {upload:.2f} s)")
    print(f"- scoring: BLOSUM62 {gap_open}/{gap_extend}, {', '.join(modes)}; "
          f"{args.queries_per_row} queries per row; median of {args.repeats} runs after a "
          f"warm-up; end to end keeps the top {args.max_hits} per query\n")
    print("| mode | variant | queries | lengths | kernel s | kernel GCUPS | end-to-end s | "
          "end-to-end GCUPS | 32-bit cells | subjects per query (inter / intra) | CPU check |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---|")
    # Ties ranked by subject, as a search ranks them by seq_id: only each query's best
    # max_hits come back, and only those need end cells.
    ties = np.arange(len(lengths), dtype=np.int64)
    results = []
    saved_rates = dict(inter_task_dpx.ROW_RATES)
    saved_scan_rates = dict(inter_task_dpx_scan.ROW_RATES)
    for mode, label in ((m, v) for m in modes for v in args.variants.split(",")):
        packed = label.startswith("16")
        search_kernel = "scan" if "scan" in label else "ends"
        if "r" in label:
            chooser = inter_task_dpx_scan if search_kernel == "scan" else inter_task_dpx
            chooser.ROW_RATES = {int(label.split("r")[1]): 1.0}
        for ranked in rows:
            queries = [codes for _, codes in ranked]
            run = dict(packed=packed, mode=mode, kernel=search_kernel)
            gaps = (gap_open, gap_extend)
            subjects.top_many(queries, scoring.matrix, *gaps, args.max_hits, ties=ties,
                              **run)  # warm-up
            kernel, total, stats = [], [], None
            for _ in range(args.repeats):
                tick = time.perf_counter()
                found, stats = subjects.top_many(queries, scoring.matrix, *gaps, args.max_hits,
                                                 ties=ties, **run)
                total.append(time.perf_counter() - tick)
                kernel.append(stats.seconds)
            if search_kernel == "scan" and mode == "local":  # every sample subject a candidate
                kept, _ = sample.top_many(queries, scoring.matrix, *gaps, len(check_idx), 0,
                                          **run)
                got = [np.zeros((len(queries), len(check_idx)), np.int32) for _ in range(3)]
                for q, (columns, *values) in enumerate(kept):
                    for table, value in zip(got, values):
                        table[q, columns] = value
            else:
                *got, _ = sample.score_many(queries, scoring.matrix, *gaps, **run)
            q_off = np.concatenate([[0], np.cumsum([len(q) for q in queries])]).astype(np.int64)
            want = score_all(np.concatenate(queries), q_off, db.residues, db.offsets,
                             scoring.matrix, *gaps, mode, subjects=check_idx)
            ok = all(np.array_equal(g, w) for g, w in zip(got, want))
            cells = stats.cells
            row = dict(mode=mode, variant=label, queries=[n for n, _ in ranked],
                       lengths=[len(q) for q in queries], cells=cells, kernel_seconds=kernel,
                       end_to_end_seconds=total,
                       kernel_gcups=cells / statistics.median(kernel) / 1e9,
                       end_to_end_gcups=cells / statistics.median(total) / 1e9,
                       cells_32bit_share=stats.cells_32bit / cells, rescored=stats.rescored,
                       kernel=search_kernel, seconds_ends=stats.seconds_ends,
                       cells_ends=stats.cells_ends,
                       subjects_inter=stats.pairs_inter // len(queries),
                       subjects_intra=stats.pairs_intra // len(queries), cpu_check=ok,
                       top=[sorted(map(int, f[1]), reverse=True)[:TOP] for f in found])
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
        inter_task_dpx_scan.ROW_RATES = dict(saved_scan_rates)
    report = dict(gpu=name, sms=sms, residues=int(s_res.size), copies=copies,
                  shuffle=args.shuffle, gaps=[gap_open, gap_extend], results=results)
    if args.cudasw4:
        scratch = args.scratch or Path(tempfile.mkdtemp(prefix="swdask-gpu-search-"))
        scratch.mkdir(parents=True, exist_ok=True)
        try:
            theirs = run_cudasw4(args, rows, copies, int(s_res.size), scratch)
        finally:
            if args.scratch is None:
                shutil.rmtree(scratch, ignore_errors=True)
        report["cudasw4"] = {**theirs, "compared": report_cudasw4(results, rows, theirs)}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
