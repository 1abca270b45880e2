"""Whole-process start-up of the CPU path: ``swdask demo`` on an empty Numba cache, and
``swdask search --device cpu`` against ``ssearch36`` (FASTA package) on Swiss-Prot 12k.

What is measured
----------------
Wall time of whole processes (start to exit), medians of ``--repeats`` runs, the two
commands of a comparison alternating (A B A B ...) so that a busy neighbour on the
machine slows both alike:

demo, first run
    ``swdask demo`` with ``NUMBA_CACHE_DIR`` set to a new empty folder (every kernel
    compiled), then again with the same folder (every kernel loaded from the cache).
search
    ``swdask search QUERIES STORE -o OUT --device cpu --force`` (a warm Numba cache) and
    ``ssearch36 -T 2 -f -11 -g -1 QUERIES DB.fasta`` (2 threads, gap penalties 11/1 as
    FASTA counts them, its default matrix BLOSUM50; output to /dev/null), for the two
    queries of ``--queries`` closest to 1,000 residues and the two closest to 150 (first
    in file order on ties).  The store is ingested once beforehand (``swdask ingest``),
    untimed, and so is a warm-up run of each command.  The ratio swdask / ssearch36 is of
    the medians.

The search's own summary line gives its score pass speed (GCUPS over the kernel's
seconds); it is reported next to the speed of the same score kernel called in this
process (``score_all`` on the store's residues, median of ``--repeats`` calls after one
warm-up), which the command line's score pass should match.

Usage (about 3 minutes on 2 cores)::

    python workflows/benchmarks/cpu_startup.py --repeats 5 --json cpu_startup.json

``--ssearch PATH`` names the ``ssearch36`` binary (default: found on ``PATH``; Debian
package ``fasta3``); without it the comparison is skipped with a message.  ``--swdask``
gives the command to time (default: this interpreter's ``-m swdask.cli``); ``--before
CMD`` adds another swdask command (e.g. an older checkout: ``env PYTHONPATH=OLD python -m
swdask.cli``), timed in the same alternation.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, package_version, warm_timings  # noqa: E402  (this folder)

from swdask.cli.common import positive  # the command line's argument type

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_QUERIES = ROOT / "tests" / "data" / "sprot196.fasta"
DEFAULT_DB = ROOT / "tests" / "data" / "sprot12071.fasta.gz"
#: Query lengths of the two search workloads (two queries each).
TARGETS = (1000, 150)
#: The bars of issue 14 (2-core machine): demo seconds, and swdask / ssearch36 per target.
BARS = {"demo_first_run_seconds": 5.0, "search_ratio": {1000: 1.0, 150: 2.0}}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cpu_startup.py", description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=Path, default=DEFAULT_QUERIES,
                        help="query FASTA (default: %(default)s)")
    parser.add_argument("--db", type=Path, default=DEFAULT_DB,
                        help="database FASTA(.gz) (default: %(default)s)")
    parser.add_argument("--repeats", type=positive, default=5,
                        help="timed runs of each command (default: 5)")
    parser.add_argument("--ssearch", default=shutil.which("ssearch36"),
                        help="the ssearch36 binary (default: ssearch36 on PATH)")
    parser.add_argument("--swdask", default=f"{shlex.quote(sys.executable)} -m swdask.cli",
                        help="the swdask command (default: %(default)s)")
    parser.add_argument("--before", metavar="CMD",
                        help="another swdask command to time alongside (e.g. an older version)")
    parser.add_argument("--skip-demo", action="store_true", help="time the searches only")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the results here")
    return parser


# --------------------------------------------------------------------------------------
# workload
# --------------------------------------------------------------------------------------


def read_fasta(path: Path) -> list:
    """``[(header, sequence)]`` in file order (plain or gzip)."""
    opener = gzip.open if path.suffix == ".gz" else open
    records = []
    with opener(path, "rt") as handle:
        for line in handle:
            line = line.rstrip("\n")
            if line.startswith(">"):
                records.append([line[1:], []])
            elif line:
                records[-1][1].append(line.strip())
    return [(header, "".join(parts)) for header, parts in records]


def closest(records, target: int, count: int = 2) -> list:
    """The ``count`` records closest in length to ``target`` (first in file order on ties)."""
    order = sorted(range(len(records)), key=lambda k: (abs(len(records[k][1]) - target), k))
    return [records[k] for k in sorted(order[:count])]


def write_fasta(path: Path, records) -> Path:
    with open(path, "w") as handle:
        for header, seq in records:
            handle.write(f">{header}\n")
            handle.writelines(seq[i:i + 60] + "\n" for i in range(0, len(seq), 60))
    return path


# --------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------


#: Where the timed commands run: not in a checkout, whose ``swdask`` folder ``python -m``
#: would import ahead of the one the command names (set by :func:`main`).
WORKDIR = None


def timed(command, env=None, stdout=subprocess.DEVNULL) -> tuple[float, subprocess.CompletedProcess]:
    """Wall seconds of one whole process, and the process (its stderr kept)."""
    tick = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True,
                          check=False, cwd=WORKDIR)
    seconds = time.perf_counter() - tick
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {shlex.join(command)}\n{done.stderr}")
    return seconds, done


def score_pass_gcups(stderr: str) -> float | None:
    """The ``score pass ... (N GCUPS)`` of a search's summary line."""
    for line in stderr.splitlines():
        if "score pass" in line:
            return float(line.split("score pass", 1)[1].split("(", 1)[1].split()[0])
    return None


def load_average() -> list:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def measure_demo(commands: dict, repeats, scratch: Path) -> dict:
    """For each command in turn: a first run (new empty cache), then a second run (the
    same cache); ``repeats`` rounds."""
    runs = {label: {"first_run_seconds": [], "second_run_seconds": []} for label in commands}
    for k in range(repeats):
        for label, command in commands.items():
            cache = scratch / f"demo-cache-{label}-{k}"
            env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
            runs[label]["first_run_seconds"].append(timed([*command, "demo"], env)[0])
            runs[label]["second_run_seconds"].append(timed([*command, "demo"], env)[0])
            shutil.rmtree(cache, ignore_errors=True)
    for row in runs.values():
        row["first_run_median"] = statistics.median(row["first_run_seconds"])
        row["second_run_median"] = statistics.median(row["second_run_seconds"])
    return runs


def in_process_gcups(query_file: Path, store: Path, repeats: int) -> dict:
    """The score kernel on the store's residues in this process (after one warm-up)."""
    from swdask.kernels.cpu.score import score_all
    from swdask.scoring import Scoring
    from swdask.sequences.ingest import open_database
    from swdask.sequences.store import load_sequences

    queries = load_sequences(query_file)
    db = open_database(store).read_all()
    scoring = Scoring()
    args = (queries.residues, queries.offsets, db.residues, db.offsets, scoring.matrix,
            scoring.gap_open, scoring.gap_extend)
    seconds = warm_timings(repeats, score_all, *args)
    cells = int(queries.lengths.sum()) * int(db.offsets[-1])
    return {"seconds": seconds, "cells": cells, "gcups": cells / statistics.median(seconds) / 1e9}


def measure_search(commands: dict, ssearch, query_file, store, db_fasta, repeats, scratch,
                   env) -> dict:
    """Each swdask command, then ssearch36, in turn; ``repeats`` rounds after a warm-up."""
    out = scratch / "hits.parquet"
    searches = {label: [*command, "search", str(query_file), str(store), "-o", str(out),
                        "--device", "cpu", "--force"] for label, command in commands.items()}
    other = ([ssearch, "-T", "2", "-f", "-11", "-g", "-1", str(query_file), str(db_fasta)]
             if ssearch else None)
    for search in searches.values():
        timed(search, env)  # warm-up: loads (or compiles) the kernels into the cache
    if other:
        timed(other)  # warm-up: the page cache
    row = {"ssearch_command": shlex.join(other) if other else None, "ssearch_seconds": []}
    for label, search in searches.items():
        row[label] = {"command": shlex.join(search), "seconds": [], "score_pass_gcups": []}
    for _ in range(repeats):
        for label, search in searches.items():
            seconds, done = timed(search, env)
            row[label]["seconds"].append(seconds)
            row[label]["score_pass_gcups"].append(score_pass_gcups(done.stderr))
        if other:
            row["ssearch_seconds"].append(timed(other)[0])
    if other:
        row["ssearch_median"] = statistics.median(row["ssearch_seconds"])
    for label in searches:
        one = row[label]
        one["median"] = statistics.median(one["seconds"])
        one["score_pass_gcups_median"] = statistics.median(one["score_pass_gcups"])
        if other:
            one["ratio"] = one["median"] / row["ssearch_median"]
    return row


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------


def ssearch_version(ssearch) -> str | None:
    if not ssearch:
        return None
    done = subprocess.run([ssearch], capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)
    for line in (done.stdout + done.stderr).splitlines():
        if "version" in line:
            return line.strip()
    return "unknown"


def render(info: dict) -> str:
    m, w = info["machine"], info["workload"]
    out = ["# swdask CPU start-up benchmark", "",
           f"- machine: {m['cpu']}, os.cpu_count() = {m['cpu_count']}; load average "
           f"{m['load_average_at_start']} at start, {m['load_average_at_end']} at end",
           f"- versions: {', '.join(f'{k} {v}' for k, v in info['versions'].items())}; "
           f"Python {m['python']}; scipy installed: {m['scipy_installed']}",
           *(f"- command {label}: `{command}`" for label, command in info["commands"].items()),
           f"- database: {w['db_file']}: {w['db_records']:,} records, "
           f"{w['db_residues']:,} residues (store ingested once, untimed)",
           f"- medians of {w['repeats']} whole-process runs, commands alternating", ""]
    demo = info.get("demo")
    if demo:
        out += ["## swdask demo", "", f"Bar for the first run: {BARS['demo_first_run_seconds']:.1f} s.",
                "", "| command | first run (empty cache), median s | runs | second run, median s "
                "| runs |", "|---|---:|---|---:|---|"]
        for label, row in demo.items():
            out.append(f"| {label} | {row['first_run_median']:.2f} "
                       f"| {', '.join(f'{s:.2f}' for s in row['first_run_seconds'])} "
                       f"| {row['second_run_median']:.2f} "
                       f"| {', '.join(f'{s:.2f}' for s in row['second_run_seconds'])} |")
        out.append("")
    out += ["## swdask search --device cpu against ssearch36", ""]
    if not info.get("ssearch"):
        out += ["ssearch36 not found (install the Debian package fasta3, or give --ssearch "
                "PATH): swdask times only.", ""]
    out += ["| queries | residues | command | swdask s (median) | ssearch36 s (median) "
            "| swdask / ssearch36 | bar | CLI score pass GCUPS | in-process kernel GCUPS |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for row in info["search"]:
        ss = row.get("ssearch_median")
        for label in info["commands"]:
            one = row[label]
            ratio = one.get("ratio")
            out.append(
                f"| {', '.join(row['queries'])} ({'+'.join(map(str, row['query_lengths']))} aa)"
                f" | {row['query_residues']:,} | {label} | {one['median']:.2f} "
                f"| {'-' if ss is None else f'{ss:.2f}'} "
                f"| {'-' if ratio is None else f'{ratio:.2f}'} | {row['bar']:.1f} "
                f"| {one['score_pass_gcups_median']:.2f} "
                f"| {row['in_process']['gcups']:.2f} |")
    out += ["", "In-process kernel GCUPS: this checkout's score_all in the benchmark's process."]
    return "\n".join(out)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.queries, args.db = args.queries.resolve(), args.db.resolve()
    swdask = shlex.split(args.swdask)
    commands = {"swdask": swdask}
    if args.before:
        commands["before"] = shlex.split(args.before)
    ssearch = args.ssearch if args.ssearch and shutil.which(args.ssearch) else None
    if args.ssearch and not ssearch:
        print(f"ssearch36 not found at {args.ssearch!r}: skipping the comparison",
              file=sys.stderr)
    elif not ssearch:
        print("ssearch36 not found on PATH (Debian package fasta3; or give --ssearch PATH): "
              "skipping the comparison", file=sys.stderr)
    info = {"machine": {"cpu": cpu_model(), "cpu_count": os.cpu_count(),
                        "load_average_at_start": load_average(),
                        "platform": platform.platform(), "python": platform.python_version(),
                        "scipy_installed": package_version("scipy") != "not installed"},
            "versions": {name: package_version(name) for name in ("swdask", "numba", "numpy",
                                                           "pyarrow", "pandas")},
            "ssearch": ssearch_version(ssearch)}
    records = read_fasta(args.queries)
    db_records = read_fasta(args.db)
    info["commands"] = {label: shlex.join(command) for label, command in commands.items()}
    info["workload"] = {"swdask": shlex.join(swdask), "queries_file": str(args.queries),
                        "db_file": str(args.db), "db_records": len(db_records),
                        "db_residues": sum(len(s) for _, s in db_records),
                        "repeats": args.repeats}
    global WORKDIR
    with tempfile.TemporaryDirectory(prefix="swdask-startup-") as scratch:
        scratch = WORKDIR = Path(scratch)
        db_fasta = write_fasta(scratch / "db.fasta", db_records)
        store = scratch / "db.store"
        cache = scratch / "search-cache"
        env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
        timed([*swdask, "ingest", str(args.db), "-o", str(store), "--quiet"], env)
        if not args.skip_demo:
            info["demo"] = measure_demo(commands, args.repeats, scratch)
        info["search"] = []
        for target in TARGETS:
            chosen = closest(records, target)
            query_file = write_fasta(scratch / f"queries-{target}.fasta", chosen)
            row = measure_search(commands, ssearch, query_file, store, db_fasta, args.repeats,
                                 scratch, env)
            row.update(target=target, bar=BARS["search_ratio"][target],
                       queries=[h.split()[0] for h, _ in chosen],
                       query_lengths=[len(s) for _, s in chosen],
                       query_residues=sum(len(s) for _, s in chosen),
                       in_process=in_process_gcups(query_file, store, args.repeats))
            info["search"].append(row)
    info["machine"]["load_average_at_end"] = load_average()
    print(render(info))
    if args.json:
        args.json.write_text(json.dumps(info, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
