"""CPU database-search speed of swdask against parasail, on the same work in the same run.

What is measured
----------------
Every number is in GCUPS: billions of DP cells per second, where the cells of a query set
are ``sum(query lengths) * total database residues``.  Each timing is the median of
``--repeats`` runs that follow one warm-up run (the warm-up loads Numba's compiled
kernels and fills the caches); the same ``--threads`` are used on both sides.

For each target length of ``--lengths`` two query sets are searched against the whole
database:

- *single*: the query of ``--queries`` whose length is closest to the target (first in
  file order on ties);
- *bin*: up to ``--bin-size`` queries within +-15% of the target (closest first), searched
  together as one batch, since that is how swdask amortises the subject profile it builds
  for every group of 16 subjects over all queries of the batch.

Three measurements per query set:

swdask kernel
    :func:`swdask.kernels.cpu.score.score_all` (local mode, BLOSUM62 11/1) over every residue of
    the database, already in memory (``open_database(...).read_all()``), on
    ``numba.set_num_threads(threads)`` threads.  Only the call is timed.
swdask end-to-end
    :func:`swdask.search_in_process` ``(queries, store, max_hits=50, threads=threads,
    return_stats=True)`` (the single-process engine, no Dask): reads the store's Parquet
    partitions, scores, keeps the top 50 per query and traces back those hits.  Its own
    ``total_seconds`` is timed.
parasail
    ``parasail.sw_striped_profile_sat`` with the same scoring (``Scoring().to_parasail()``,
    gaps ``Scoring().parasail_gaps``: parasail counts the first gap residue in its open
    penalty, so our 11/1 is its 12/1), one profile per query
    (``parasail.profile_create_sat``), spread over ``threads`` worker processes.  The
    database, in the store's length order, is cut into ``8 * threads`` contiguous chunks
    dealt to the workers in snake order (0, 1, .., t-1, t-1, .., 0, ...) so that each
    gets a similar mix of lengths.  Timed: the wall time of the parallel map, profile
    creation included (it is per query); the pool's start-up is not.

Every parasail score of the run is compared with swdask's score of the same
(query, subject) pair; any difference stops the benchmark with exit status 1.

Full run (as reported; about 40 s on 2 cores)::

    python workflows/benchmarks/cpu_search.py --repeats 3 --json cpu_search.json

which reads ``sprot196.fasta`` (queries) and ``sprot12071.fasta.gz`` (12,071 Swiss-Prot
proteins, 4,886,913 residues) from ``../shared/data`` beside the repository.  CI smoke
run on the repository's tiny test data (well under 30 s)::

    python workflows/benchmarks/cpu_search.py --queries tests/data/sprot_queries.fasta \\
        --db tests/data/sprot_db.fasta.gz --lengths 144,375 --repeats 1 --bin-size 2

Notes
-----
The machine should be otherwise idle: the header prints the load average at the start.
``--db-fraction`` keeps an evenly spaced subset (in length order) of the database, so a
quick run still sees the whole length distribution.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
from common import cpu_model, package_version  # noqa: E402  (this folder)

from swdask.cli.common import number, positive  # the command line's argument types
from swdask.errors import SwdaskError
from swdask.jobs.search import search_in_process
from swdask.kernels.cpu.score import score_all
from swdask.scoring import Scoring
from swdask.sequences.ingest import open_database
from swdask.sequences.store import load_sequences

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
DEFAULT_QUERIES = DATA / "sprot196.fasta"
DEFAULT_DB = DATA / "sprot12071.fasta.gz"
#: Half-width of a length bin, as a fraction of the target length.
BIN_WIDTH = 0.15
#: Contiguous database chunks per parasail worker (dealt in snake order).
CHUNKS_PER_WORKER = 8


# --------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------


def _lengths(text: str) -> list:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"must be positive lengths, got {text!r}")
    return values


def _fraction(text: str) -> float:
    return number(text, accept=lambda value: 0.0 < value <= 1.0, wanted="in (0, 1]")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cpu_search.py",
        description="CPU search GCUPS of swdask (score kernel and end-to-end) against "
                    "parasail's striped SW on the same queries, database and threads.",
        epilog="Full run: python workflows/benchmarks/cpu_search.py --repeats 3",
    )
    parser.add_argument("--queries", type=Path, default=DEFAULT_QUERIES,
                        help="query FASTA (default: %(default)s)")
    parser.add_argument("--db", type=Path, default=DEFAULT_DB,
                        help="database FASTA(.gz) or sequence store (default: %(default)s)")
    parser.add_argument("--lengths", type=_lengths, default=[144, 375, 1000],
                        help="target query lengths, comma-separated (default: 144,375,1000)")
    parser.add_argument("--bin-size", type=positive, default=8,
                        help="most queries in a bin of +-15%% around each target (default: 8)")
    parser.add_argument("--threads", type=positive, default=os.cpu_count(),
                        help="threads (swdask) and processes (parasail) (default: all cores, "
                             "%(default)s)")
    parser.add_argument("--repeats", type=positive, default=3,
                        help="timed runs after one warm-up; the median is reported "
                             "(default: 3)")
    parser.add_argument("--db-fraction", type=_fraction, default=1.0,
                        help="use only this fraction of the database, evenly spaced in "
                             "length order, for smoke tests (default: 1.0)")
    parser.add_argument("--max-hits", type=positive, default=50,
                        help="hits per query traced back in the end-to-end search (default: 50)")
    parser.add_argument("--skip-parasail", action="store_true",
                        help="time swdask only (no parasail columns, no score check)")
    parser.add_argument("--json", type=Path, metavar="OUT",
                        help="also write the results as JSON to OUT")
    return parser


# --------------------------------------------------------------------------------------
# workload
# --------------------------------------------------------------------------------------


def pick_query_sets(lengths: np.ndarray, targets, bin_size: int) -> list:
    """For each target: the closest query, and a bin of up to ``bin_size`` within +-15%.

    Returns dicts with ``label``, ``kind`` ("single" or "bin"), ``target`` and
    ``indices`` (into the query file, in file order).  A bin that holds no query is left
    out.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    sets = []
    for target in targets:
        distance = np.abs(lengths - target)
        closest = int(np.argmin(distance))  # first in file order on ties
        sets.append({"label": f"~{target}: 1 query, {lengths[closest]} aa", "kind": "single",
                     "target": target, "indices": [closest]})
        inside = np.flatnonzero(distance <= BIN_WIDTH * target)
        chosen = inside[np.lexsort((inside, distance[inside]))][:bin_size]
        if chosen.size:
            chosen = np.sort(chosen)
            span = f"{lengths[chosen].min()}-{lengths[chosen].max()} aa"
            noun = "query" if chosen.size == 1 else "queries"
            sets.append({"label": f"~{target} +-15%: {chosen.size} {noun}, {span}",
                         "kind": "bin", "target": target, "indices": chosen.tolist()})
    return sets


def subset_database(store, fraction: float, directory: Path):
    """A temporary store of ``fraction`` of ``store``'s records, evenly spaced in length order."""
    batch = store.read_all()
    keep = max(1, round(fraction * len(batch)))
    picked = np.unique(np.linspace(0, len(batch) - 1, keep).round().astype(np.int64))
    fasta = directory / "subset.fasta"
    with open(fasta, "w", encoding="ascii") as handle:
        for i in picked:
            handle.write(f">{batch.names[i]}\n{batch.alphabet.decode(batch.codes(int(i)))}\n")
    return open_database(fasta, alphabet=batch.alphabet.name, tmpdir=directory)


# --------------------------------------------------------------------------------------
# parasail workers (a process pool; module-level so that "spawn" can import them)
# --------------------------------------------------------------------------------------

_WORKER = {}


def _parasail_init(subjects, chunks, scoring):
    import parasail

    _WORKER["parasail"] = parasail
    _WORKER["subjects"] = subjects
    _WORKER["chunks"] = chunks
    _WORKER["matrix"] = scoring.to_parasail()
    _WORKER["gaps"] = scoring.parasail_gaps


def _parasail_task(task):
    """Scores of ``queries`` against worker ``index``'s chunks: one int32 array per query."""
    index, queries = task
    parasail = _WORKER["parasail"]
    subjects = _WORKER["subjects"]
    gap_open, gap_extend = _WORKER["gaps"]
    align = parasail.sw_striped_profile_sat
    out = []
    for query in queries:
        profile = parasail.profile_create_sat(query, _WORKER["matrix"])
        scores = [align(profile, subjects[s], gap_open, gap_extend).score
                  for first, last in _WORKER["chunks"][index] for s in range(first, last)]
        out.append(np.array(scores, dtype=np.int32))
    return out


def plan_chunks(n_subjects: int, workers: int) -> list:
    """Contiguous ``(first, last)`` chunks per worker, dealt in snake order."""
    n_chunks = min(n_subjects, CHUNKS_PER_WORKER * workers)
    bounds = np.linspace(0, n_subjects, n_chunks + 1).round().astype(int)
    plan = [[] for _ in range(workers)]
    for c in range(n_chunks):
        round_, position = divmod(c, workers)
        worker = position if round_ % 2 == 0 else workers - 1 - position
        plan[worker].append((int(bounds[c]), int(bounds[c + 1])))
    return plan


# --------------------------------------------------------------------------------------
# measurement
# --------------------------------------------------------------------------------------


def _timed(repeats, run):
    """Run once to warm up, then ``repeats`` times; (seconds of each timed run, last result)."""
    run()
    seconds, result = [], None
    for _ in range(repeats):
        elapsed, result = run()
        seconds.append(elapsed)
    return seconds, result


def measure(qset, queries, db, store, scoring, args, pool, chunk_plan):
    batch = queries.take(qset["indices"])
    q_residues = int(batch.lengths.sum())
    cells = q_residues * db.n_residues

    def kernel():
        tick = time.perf_counter()
        scores = score_all(batch.residues, batch.offsets, db.residues, db.offsets,
                           scoring.matrix, scoring.gap_open, scoring.gap_extend, "local")[0]
        return time.perf_counter() - tick, scores

    def end_to_end():
        _, stats = search_in_process(batch, store, scoring=scoring, max_hits=args.max_hits,
                                     threads=args.threads, return_stats=True)
        if stats.cells != cells:
            raise AssertionError(f"search counted {stats.cells} cells, expected {cells}")
        return stats.total_seconds, stats

    numba.set_num_threads(args.threads)
    kernel_s, swdask_scores = _timed(args.repeats, kernel)
    e2e_s, stats = _timed(args.repeats, end_to_end)
    row = dict(label=qset["label"], kind=qset["kind"], target=qset["target"],
               queries=list(batch.names), query_lengths=batch.lengths.tolist(),
               query_residues=q_residues, cells=cells,
               swdask_kernel_seconds=kernel_s, swdask_end_to_end_seconds=e2e_s,
               swdask_score_seconds_in_search=stats.score_seconds,
               swdask_traceback_seconds_in_search=stats.traceback_seconds,
               swdask_hits=stats.n_hits)
    row["swdask_kernel_gcups"] = cells / statistics.median(kernel_s) / 1e9
    row["swdask_end_to_end_gcups"] = cells / statistics.median(e2e_s) / 1e9

    if pool is not None:
        strings = [queries.alphabet.decode(batch.codes(i)) for i in range(len(batch))]
        tasks = [(w, strings) for w in range(args.threads)]

        def parasail_run():
            tick = time.perf_counter()
            parts = pool.map(_parasail_task, tasks, chunksize=1)
            return time.perf_counter() - tick, parts

        para_s, parts = _timed(args.repeats, parasail_run)
        order = np.concatenate([np.arange(first, last, dtype=np.int64)
                                for plan in chunk_plan for first, last in plan])
        para_scores = np.empty_like(swdask_scores)
        for qi in range(len(batch)):
            para_scores[qi, order] = np.concatenate([part[qi] for part in parts])
        check_scores(swdask_scores, para_scores, batch, db)
        row["parasail_seconds"] = para_s
        row["parasail_gcups"] = cells / statistics.median(para_s) / 1e9
        row["pairs_checked"] = int(para_scores.size)
    return row


def check_scores(swdask_scores, para_scores, batch, db):
    bad = np.argwhere(swdask_scores != para_scores)
    if bad.size:
        lines = [f"{batch.names[q]} vs {db.names[s]}: swdask {swdask_scores[q, s]}, "
                 f"parasail {para_scores[q, s]}" for q, s in bad[:10]]
        raise ScoreMismatch(f"{len(bad)} of {para_scores.size} scores differ from parasail:\n  "
                            + "\n  ".join(lines))


class ScoreMismatch(AssertionError):
    """swdask and parasail disagree on a score."""


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------


def header(args, queries, db) -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "machine": {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "threads": args.threads,
                    "numba_threading_layer": numba.threading_layer(),
                    "load_average_at_start": [round(x, 2) for x in load],
                    "platform": platform.platform(), "python": platform.python_version()},
        "versions": {name: package_version(name) for name in ("swdask", "numba", "parasail", "numpy")},
        "workload": {"queries_file": str(args.queries.resolve()),
                     "db_file": str(args.db.resolve()), "db_fraction": args.db_fraction,
                     "db_records": len(db), "db_residues": int(db.n_residues),
                     "query_records": len(queries), "scoring": "BLOSUM62, gap 11 + k*1 (local)",
                     "repeats": args.repeats, "max_hits": args.max_hits},
    }


def _fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def render(info, rows) -> str:
    m, v, w = info["machine"], info["versions"], info["workload"]
    load = ", ".join(f"{x:.2f}" for x in m["load_average_at_start"])
    out = [
        "# swdask CPU search benchmark",
        "",
        f"- machine: {m['cpu']}, os.cpu_count() = {m['cpu_count']}, threads used = "
        f"{m['threads']} (numba layer {m['numba_threading_layer']}); load average at start "
        f"{load}",
        f"- versions: swdask {v['swdask']}, numba {v['numba']}, parasail {v['parasail']}, "
        f"numpy {v['numpy']}; Python {m['python']}",
        f"- database: {w['db_file']} (fraction {w['db_fraction']:g}): {w['db_records']:,} "
        f"records, {w['db_residues']:,} residues",
        f"- queries: {w['queries_file']}: {w['query_records']} records",
        f"- scoring: {w['scoring']}; medians of {w['repeats']} runs after a warm-up; "
        f"end-to-end keeps and traces back {w['max_hits']} hits per query",
        "",
        "| query set | query residues | swdask kernel GCUPS | swdask end-to-end GCUPS "
        "| parasail GCUPS | swdask / parasail |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        para = r.get("parasail_gcups")
        ratio = r["swdask_kernel_gcups"] / para if para else None
        out.append(f"| {r['label']} | {r['query_residues']:,} | {_fmt(r['swdask_kernel_gcups'])}"
                   f" | {_fmt(r['swdask_end_to_end_gcups'])} | {_fmt(para)} | {_fmt(ratio)} |")
    out += ["", "swdask / parasail: swdask kernel GCUPS over parasail GCUPS. Median seconds:",
            "",
            "| query set | cells | swdask kernel s | swdask end-to-end s | parasail s |",
            "|---|---:|---:|---:|---:|"]
    for r in rows:
        para = r.get("parasail_seconds")
        out.append(f"| {r['label']} | {r['cells']:,} "
                   f"| {_fmt(statistics.median(r['swdask_kernel_seconds']), 3)} "
                   f"| {_fmt(statistics.median(r['swdask_end_to_end_seconds']), 3)} "
                   f"| {_fmt(statistics.median(para) if para else None, 3)} |")
    return "\n".join(out)


def write_json(path: Path, payload: dict) -> None:
    """Write ``payload`` to ``path`` through a temporary name, so no partial file is left."""
    path = path.resolve()
    handle = tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.",
                                         suffix=".tmp", delete=False, encoding="utf-8")
    try:
        with handle:
            json.dump(payload, handle, indent=2)
            handle.write("\n")
        os.replace(handle.name, path)
    except BaseException:
        os.unlink(handle.name)
        raise


# --------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------


def run(args) -> int:
    started = time.perf_counter()
    if args.threads > numba.config.NUMBA_NUM_THREADS:
        raise SwdaskError(f"--threads {args.threads}: Numba allows at most "
                          f"{numba.config.NUMBA_NUM_THREADS} (set NUMBA_NUM_THREADS)")
    scoring = Scoring()
    queries = load_sequences(args.queries, alphabet="protein")
    scratch = Path(tempfile.mkdtemp(prefix="swdask-bench-"))
    pool = None
    try:
        store = open_database(args.db, alphabet="protein", tmpdir=scratch)
        if args.db_fraction < 1.0:
            store = subset_database(store, args.db_fraction, scratch)
        # search() deletes a temporary store when it is done; this one lives in scratch.
        store.temporary = False
        db = store.read_all()
        qsets = pick_query_sets(queries.lengths, args.lengths, args.bin_size)
        chunk_plan = plan_chunks(len(db), args.threads)
        if not args.skip_parasail:
            db_strings = [db.alphabet.decode(db.codes(i)) for i in range(len(db))]
            context = multiprocessing.get_context("spawn")  # no fork of Numba's threads
            pool = context.Pool(args.threads, initializer=_parasail_init,
                                initargs=(db_strings, chunk_plan, scoring))
            pool.map(_parasail_task, [(w, []) for w in range(args.threads)], chunksize=1)
        numba.set_num_threads(args.threads)
        score_all(queries.residues[:queries.offsets[1]], queries.offsets[:2], db.residues,
                  db.offsets[:2], scoring.matrix, scoring.gap_open, scoring.gap_extend)
        info = header(args, queries, db)
        rows = []
        for k, qset in enumerate(qsets, start=1):
            print(f"[{k}/{len(qsets)}] {qset['label']}", file=sys.stderr, flush=True)
            rows.append(measure(qset, queries, db, store, scoring, args, pool, chunk_plan))
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
        shutil.rmtree(scratch, ignore_errors=True)

    print(render(info, rows))
    if pool is not None:
        checked = sum(r["pairs_checked"] for r in rows)
        print(f"\nscores agree on {checked:,} sampled pairs (every query x subject pair "
              "of every parasail run)")
    elapsed = time.perf_counter() - started
    print(f"\nbenchmark wall time: {elapsed:.1f} s", file=sys.stderr)
    if args.json is not None:
        info["rows"] = rows
        info["benchmark_seconds"] = elapsed
        write_json(args.json, info)
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except ScoreMismatch as exc:
        print(f"cpu_search.py: SCORES DISAGREE: {exc}", file=sys.stderr)
        return 1
    except (SwdaskError, OSError) as exc:
        print(f"cpu_search.py: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
