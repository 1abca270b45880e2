"""Wall-clock benchmark of the ``swdask`` command line: what a user waits for, process and all.

Issue 14, item 6.  Every timed run is a whole ``swdask ...`` process started with
``subprocess.run`` (interpreter start, imports, JIT or cache load, reading the input,
the work, writing the output); the summary line swdask prints on stderr is kept too.
The child processes get ``SWDASK_CACHE_DIR`` (root of swdask's on-disk caches: compiled
CUDA kernels) and ``NUMBA_CACHE_DIR`` (Numba's cache of compiled CPU functions) pointing
into the scratch folder, so that the first run sees an empty cache and later runs the
cache it filled.  Cases (``--cases``, comma list, run in this order):

``search``
    Database: ``--db`` (default ``tests/data/sprot12071.fasta.gz``, 4.9 M residues)
    replicated ``--copies`` times (default 21: 102.6 M residues, record names made unique
    with ``/copy``, as ``gpu_dask_search.replicate``), ingested once with
    ``swdask ingest`` (timed apart, not counted).  Queries: ``--queries`` (default
    ``tests/data/sprot_queries.fasta``; the 20 CUDASW++ queries are
    ``cudasw4/allqueries.fasta``).  Command: ``swdask search QUERIES STORE -o OUT.parquet
    --device D --max-hits 10 --gap-open O --gap-extend E --force``.  Rows: (a) empty
    cache (fresh cache folders), with the kernels the package ships for this GPU, and on a
    GPU once more with ``SWDASK_SHIPPED_KERNELS=0`` (every kernel compiled); (b) filled cache (the same command again, median of
    ``--repeats``); (c) warm in one process: one Python process runs the search twice
    through the API the command line uses (``swdask.search_in_process(...,
    return_stats=True)``, then ``swdask.write_hits``) and the second
    run is timed (the first is reported too); (d) with ``--cudasw4 DIR``: CUDASW++4.0's
    ``makedb`` on the same replicated FASTA (not counted), then its ``align --top 10``
    with the DPX kernels as a whole process (median of ``--repeats``) and the GCUPS it
    reports.  CUDASW++ always scores a gap of k residues as 10 + k (BLOSUM62), so with
    ``--cudasw4`` the search runs with ``--gap-open 10 --gap-extend 1`` and the top-10
    scores of both are compared.  If the installed swdask has a ``warmup`` command, an
    extra row times ``swdask warmup --device D`` on an empty cache of its own.
    GCUPS = sum of query lengths x database residues / wall seconds.
    Bars: (b) - (c) <= 1.0 s; (a) <= 15 s; the ratio (b) / (d) is printed.
``small``
    22 queries of 349-4,613 residues (from the records of ``--db`` after the first
    2,100, evenly spaced in the sorted lengths) against the first 2,100 records of
    ``--db``; ``--device auto`` against ``--device cpu``, filled cache (one untimed run
    of each first; the search case's cache folders when it ran), median of ``--repeats``;
    which device ``auto`` chose, from the summary line.  Bar: auto <= cpu.
``allpairs``
    ``--allpairs-genes`` (6,000) genes drawn at random (seeded) from ``--genes`` (default
    ``tests/data/16S_200.fna.gz``; give the full RefSeq 16S file on the GPU machine):
    ``swdask allpairs GENES.fasta -o OUT --mode global --min-identity 0.97 --match 2
    --mismatch -3 --gap-open 5 --gap-extend 2 --device D --force``.
``significance``
    100 (query, subject) pairs of Swiss-Prot records (200 distinct records of ``--db``
    drawn at random, seeded; pair k is record k against record 100 + k) x
    ``--shuffles`` (3,000) shuffles: ``swdask significance Q.fasta S.fasta --pairs
    PAIRS.tsv --shuffles N --device D``.  Cells = query x subject x (shuffles + 1).
``align-long``
    A ``--window`` (1 Mb) window of ``--chromosome`` (default the 40 kb test window, so
    the pair is as long as that file allows) against a planted mutated copy of it (a
    mutation every 1,000 residues, ``swdask.testing.planted_copy`` as in
    ``long_align.py``): ``swdask align-long A.fasta B.fasta -o OUT.parquet --device D``
    (score pass, no traceback); the planted score is checked.  Cells = m x n.

For ``allpairs``, ``significance`` and ``align-long``: one untimed run fills the cache
(its wall time is reported as the empty-cache row), then "first" = the command in a fresh
process with the filled cache (median of ``--repeats``) and "warm" = the second of two
runs through the same API calls in one process.  Bar: first <= 1.3 x warm.  On the GPU
the run also times the process floor (:data:`FLOOR_CODE`: a fresh process that starts the
CUDA driver and context and exits, median of at least 3), which a first run pays and a
warm one does not, and prints it under each of these bars beside 0.3 x warm.

The machine (CPU model, cores, GPU name from ``nvidia-smi``), the workload of every case
and every run go to ``--json`` (rewritten after each case, so a cut-off run keeps what
it finished).  The bars are reported, not enforced: the exit status is 0 unless a command
fails or a check (planted score) does.

Run from the repository root on the GPU machine (one case or a few per run keeps each
under the machine's 10-minute limit; CUDASW++ built first with
``bash .anchors/build-cudasw4.sh``, see that script's header)::

    python workflows/benchmarks/cli_wall.py --cases search \\
        --queries .anchors/cudasw4/allqueries.fasta --cudasw4 .anchors/cudasw4 \\
        --json cli_wall_search.json
    python workflows/benchmarks/cli_wall.py --cases small,allpairs,significance,align-long \\
        --genes .data/refseq_16S.fna.gz --chromosome .data/NCTC11397_chromosome.fna.gz \\
        --json cli_wall_rest.json

``--quick`` is a smoke run for CI (``--cases search,small``: about 50 s on 2 cores):
tiny inputs, every case on the CPU, one repeat.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
CASES = ("search", "small", "allpairs", "significance", "align-long")
SWDASK_CACHE = "SWDASK_CACHE_DIR"
NUMBA_CACHE = "NUMBA_CACHE_DIR"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402  (this folder)
    CUDASW4_GAPS,
    cpu_model,
    cudasw4_align_command,
    cudasw4_makedb_command,
    cudasw4_programs,
    cudasw4_top_scores,
    cudasw4_total,
    gpu_names,
    one_gpu,
    scores_agree,
)
from gpu_dask_search import replicate  # noqa: E402  (the GPU benchmark's database)

# --------------------------------------------------------------------------------------
# the machine, the command, the runs
# --------------------------------------------------------------------------------------


def machine() -> dict:
    """The machine: CPU model and cores, GPU names (``nvidia-smi``), Python, swdask.

    Returns
    -------
    dict
        ``cpu``, ``cores``, ``gpus`` (list, empty without ``nvidia-smi``), ``platform``,
        ``python``, ``swdask`` (version) and ``commit`` (of this checkout, if a git one).
    """
    cpu = cpu_model()
    gpus = gpu_names()
    try:  # the GPU machine's copy of the checkout may have no git
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    import swdask

    return {"cpu": cpu, "cores": os.cpu_count(), "gpus": gpus, "platform": platform.platform(),
            "python": platform.python_version(), "swdask": swdask.__version__,
            "commit": commit or None}


def swdask_command() -> list[str]:
    """The ``swdask`` console script of this Python (beside ``sys.executable``), or
    ``python -m swdask.cli`` where it is not installed (``pip install --target``)."""
    script = Path(sys.executable).parent / "swdask"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "swdask.cli"]


def fresh_caches(scratch: Path, tag: str) -> dict:
    """A new pair of empty cache folders: the environment entries of a child process."""
    folder = Path(tempfile.mkdtemp(prefix=f"cache-{tag}-", dir=scratch))
    env = {SWDASK_CACHE: str(folder / "swdask"), NUMBA_CACHE: str(folder / "numba")}
    for path in env.values():
        os.makedirs(path)
    return env


class Runner:
    """Runs whole processes and keeps the record of each.

    Parameters
    ----------
    command : list of str
        How to start ``swdask`` (see :func:`swdask_command`).
    timeout : float
        Seconds a process may take before it is killed (and the benchmark fails).
    """

    def __init__(self, command: list[str], timeout: float):
        self.command = command
        self.timeout = timeout

    def run(self, argv, caches: dict, *, label: str, program=None, check: bool = True,
            quiet: bool = False) -> dict:
        """Run ``swdask ARGV`` (or ``program``) with ``caches`` in its environment.

        Parameters
        ----------
        argv : list
            Arguments (paths are turned into strings).
        caches : dict
            ``SWDASK_CACHE_DIR`` and ``NUMBA_CACHE_DIR`` of the child.
        label : str
            What the run is, for the log.
        program : list of str, optional
            Run this instead of the ``swdask`` command.
        check : bool, default True
            Exit with the child's stderr when it fails.
        quiet : bool, default False
            Do not log the run.

        Returns
        -------
        dict
            ``label``, ``wall_s`` (of ``subprocess.run``), ``returncode``, ``summary``
            (swdask's last stderr line), ``stdout`` and ``stderr``.
        """
        args = [*(program or self.command), *map(str, argv)]
        env = {**os.environ, **caches}
        tick = time.perf_counter()
        done = subprocess.run(args, capture_output=True, text=True, env=env, check=False,
                              timeout=self.timeout)
        wall = time.perf_counter() - tick
        lines = [x for x in done.stderr.splitlines() if x.strip()]
        record = {"label": label, "wall_s": wall, "returncode": done.returncode,
                  "summary": lines[-1] if lines else "", "stdout": done.stdout,
                  "stderr": done.stderr}
        if not quiet:
            print(f"  {label}: {wall:.2f} s" + (f"  [{record['summary'][:150]}]"
                                                 if record["summary"] else ""), flush=True)
        if check and done.returncode != 0:
            sys.exit(f"FAILED ({done.returncode}): {' '.join(args)}\n{done.stdout[-3000:]}"
                     f"\n{done.stderr[-3000:]}")
        return record

    def warm(self, spec: dict, caches: dict, *, label: str) -> dict:
        """Run the API twice in one child process (:func:`child`); its timings."""
        record = self.run(["--child", json.dumps(spec)], caches, label=label,
                          program=[sys.executable, str(Path(__file__).resolve())])
        for line in record["stdout"].splitlines():
            if line.startswith("CHILD_RESULT "):
                record.update(json.loads(line[len("CHILD_RESULT "):]))
        print(f"    in one process: import {record['import_s']:.2f} s, first run "
              f"{record['runs_s'][0]:.2f} s, second run {record['runs_s'][1]:.2f} s", flush=True)
        return record


def slim(record: dict) -> dict:
    """A run's record without its full output (for the JSON)."""
    return {k: v for k, v in record.items() if k not in ("stdout", "stderr")}


def seconds_in(summary: str, pattern: str):
    """The number the regular expression ``pattern`` captures in ``summary``, or None."""
    found = re.search(pattern, summary)
    return float(found.group(1).replace(",", "")) if found else None


# --------------------------------------------------------------------------------------
# the warm runs: the command line's API calls, twice in one process
# --------------------------------------------------------------------------------------


def child(spec: dict) -> None:
    """Run one case's work twice through the API, as its command does; print the times.

    Called in a fresh process (``cli_wall.py --child SPEC``).  The calls are those of
    ``swdask.cli``: ``search_in_process`` + ``write_hits`` (a search without a cluster); ``write_all_pairs``;
    ``significance`` + ``compute`` + a Parquet write; ``align_long`` + a Parquet write.

    Parameters
    ----------
    spec : dict
        ``case``, ``device``, the inputs and options of the case, and ``output``.
    """
    tick = time.perf_counter()
    import pyarrow as pa
    import pyarrow.parquet as pq

    import swdask
    from swdask.cluster import compute

    import_s = time.perf_counter() - tick
    case, device, out = spec["case"], spec["device"], spec["output"]
    runs = []
    for _ in range(2):
        tick = time.perf_counter()
        if case == "search":
            from swdask.output import write_hits

            scoring = swdask.Scoring(None, gap_open=spec["gap_open"],
                                     gap_extend=spec["gap_extend"], alphabet="protein")
            # What ``swdask search`` without --workers/--scheduler runs (swdask.cli).
            hits, stats = swdask.search_in_process(spec["queries"], spec["database"],
                                                   scoring=scoring, mode="local",
                                                   max_hits=spec["max_hits"], device=device,
                                                   return_stats=True)
            write_hits(hits, out, force=True)
        elif case == "allpairs":
            scoring = swdask.Scoring(None, match=2, mismatch=-3, gap_open=5, gap_extend=2)
            swdask.write_all_pairs(spec["source"], out, scoring=scoring, mode="global",
                                   min_identity=spec["min_identity"], device=device, force=True)
        elif case == "significance":
            scoring = swdask.Scoring(None, alphabet="protein")
            frame = swdask.significance(spec["queries"], spec["subjects"], scoring=scoring,
                                        shuffles=spec["shuffles"], seed=0, pairs=spec["pairs"],
                                        device=device)
            (table,) = compute(frame)
            pq.write_table(pa.Table.from_pandas(table, preserve_index=False), out)
        elif case == "align-long":
            scoring = swdask.Scoring(None, alphabet="dna")
            result = swdask.align_long(spec["a"], spec["b"], scoring=scoring, tile="auto",
                                       device=device)
            pq.write_table(result.to_table(), out)
        else:
            raise ValueError(f"unknown case {case!r}")
        runs.append(time.perf_counter() - tick)
    print("CHILD_RESULT " + json.dumps({"import_s": import_s, "runs_s": runs}), flush=True)


# --------------------------------------------------------------------------------------
# workloads
# --------------------------------------------------------------------------------------


def write_fasta(path: Path, records) -> Path:
    """Write ``(name, sequence)`` records, one line each; returns ``path``."""
    with open(path, "w") as handle:
        handle.writelines(f">{name}\n{seq}\n" for name, seq in records)
    return path


def records_of(batch, indices):
    """``(first word of the name, letters)`` of the records ``indices`` of a batch."""
    return [(batch.names[int(i)].split()[0], batch.alphabet.decode(batch.codes(int(i))))
            for i in indices]


def residues_of(path) -> tuple[int, list[int]]:
    """Total residues and the lengths of a FASTA file's records."""
    from swdask.sequences.store import load_sequences

    lengths = [int(x) for x in load_sequences(path).lengths]
    return sum(lengths), lengths


def write_genes(genes: Path, count: int, seed: int, out: Path) -> tuple[Path, int]:
    """``count`` records of the DNA file ``genes`` drawn at random (seeded; all of them when
    ``count`` is 0 or at least their number), in file order, written to ``out``.

    Returns
    -------
    tuple
        ``(out, records written)``.
    """
    import random

    from swdask.sequences.store import load_sequences

    batch = load_sequences(genes, alphabet="dna", map_unknown=True)
    n = len(batch)
    chosen = sorted(random.Random(seed).sample(range(n), count)) if 0 < count < n else range(n)
    write_fasta(out, records_of(batch, chosen))
    return out, len(chosen)


def planted_pair(chromosome: Path, window: int, start: int, spacing: int, scoring):
    """A ``window`` of the first record of ``chromosome`` from ``start`` (both cut to what
    the record holds) and a copy of it with a planted mutation every ``spacing``
    (:func:`swdask.testing.planted_copy`, seed 7).

    Returns
    -------
    tuple
        ``(a, b, planted score, start)``: the window's codes, the copy's, the score of the
        planted alignment, and where the window starts.
    """
    from swdask.sequences.store import load_sequences
    from swdask.testing import planted_copy

    codes = load_sequences(chromosome).codes(0)
    window = min(window, len(codes))
    start = max(0, min(start, len(codes) - window))
    a = codes[start:start + window]
    b, expected, _ = planted_copy(a, scoring, spacing=spacing, seed=7)
    return a, b, int(expected), start


# --------------------------------------------------------------------------------------
# the cases
# --------------------------------------------------------------------------------------


def case_search(args, runner: Runner, scratch: Path, has_warmup: bool, shared: dict) -> dict:
    """Rows (a)-(d) of the search case and its bars; its caches go to ``shared``."""
    from swdask.sequences.store import SequenceStore, load_sequences

    queries = Path(args.queries)
    if args.quick:  # a few queries
        batch = load_sequences(queries)
        queries = write_fasta(scratch / "search_queries.fasta", records_of(batch, range(3)))
    query_residues, query_lengths = residues_of(queries)
    tick = time.perf_counter()
    fasta = scratch / "search_db.fasta.gz"
    replicate(Path(args.db), args.copies, fasta)
    write_s = time.perf_counter() - tick
    store = scratch / "search_db.store"
    ingest = runner.run(["ingest", fasta, "-o", store, "--force", "--quiet"], {},
                        label="swdask ingest (not counted)")
    db = SequenceStore.open(store)
    cells = query_residues * db.n_residues
    gaps = CUDASW4_GAPS if args.cudasw4 else (args.gap_open, args.gap_extend)
    workload = {"db": str(args.db), "copies": args.copies, "db_sequences": db.n_records,
                "db_residues": db.n_residues, "queries": str(args.queries),
                "n_queries": len(query_lengths), "query_residues": query_residues,
                "cells": cells, "scoring": f"BLOSUM62 {gaps[0]}/{gaps[1]}, local",
                "max_hits": 10, "device": args.device, "fasta_write_s": write_s,
                "ingest_s": ingest["wall_s"]}
    print(f"search: {len(query_lengths)} queries ({query_residues:,} residues) x "
          f"{db.n_records:,} sequences ({db.n_residues:,} residues, {args.db} x {args.copies}),"
          f" {cells:,} cells, BLOSUM62 {gaps[0]}/{gaps[1]}, top 10, --device {args.device}",
          flush=True)
    out = scratch / "search_hits.parquet"
    argv = ["search", queries, store, "-o", out, "--device", args.device, "--max-hits", "10",
            "--gap-open", gaps[0], "--gap-extend", gaps[1], "--force"]
    rows, runs = [], {"ingest": slim(ingest)}

    def row(name, wall, reported=None, gcups=None):
        rows.append({"case": "search", "run": name, "wall_s": wall, "reported_s": reported,
                     "gcups": cells / wall / 1e9 if gcups is None and wall else gcups})

    reported = r"total ([\d.]+) s"
    if has_warmup:
        warmup = runner.run(["warmup", "--device", args.device], fresh_caches(scratch, "warmup"),
                            label="swdask warmup, empty cache")
        runs["warmup"] = slim(warmup)
        rows.append({"case": "search", "run": "swdask warmup, empty cache",
                     "wall_s": warmup["wall_s"], "reported_s": None, "gcups": None})
    if args.device != "cpu":  # every kernel compiled, as on a GPU the package has none for
        unshipped = runner.run(argv, {**fresh_caches(scratch, "unshipped"),
                                      "SWDASK_SHIPPED_KERNELS": "0"},
                               label="(a) empty cache, shipped kernels off")
        row("(a) empty cache, SWDASK_SHIPPED_KERNELS=0", unshipped["wall_s"],
            seconds_in(unshipped["summary"], reported))
        runs["unshipped"] = slim(unshipped)
    caches = shared["search"] = fresh_caches(scratch, "search")
    empty = runner.run(argv, caches, label="(a) empty cache")
    row("(a) empty cache", empty["wall_s"], seconds_in(empty["summary"], reported))
    filled = [runner.run(argv, caches, label=f"(b) filled cache, run {k + 1}")
              for k in range(args.repeats)]
    filled_s = statistics.median(r["wall_s"] for r in filled)
    row(f"(b) filled cache (median of {args.repeats})", filled_s,
        statistics.median(seconds_in(r["summary"], reported) or 0 for r in filled))
    spec = {"case": "search", "device": args.device, "queries": str(queries),
            "database": str(store), "max_hits": 10, "gap_open": gaps[0], "gap_extend": gaps[1],
            "output": str(scratch / "search_hits_warm.parquet")}
    warm = runner.warm(spec, caches, label="(c) warm in one process")
    row("(c) warm in one process (2nd run)", warm["runs_s"][1])
    row("    (c) its 1st run", warm["runs_s"][0])
    runs.update(empty=slim(empty), filled=[slim(r) for r in filled], warm=slim(warm))
    bars = {"b_minus_c_s": filled_s - warm["runs_s"][1], "b_minus_c_ok":
            filled_s - warm["runs_s"][1] <= 1.0, "a_s": empty["wall_s"],
            "a_ok": empty["wall_s"] <= 15.0}
    if args.cudasw4:
        d = cudasw4(args, runner, fasta, queries, scratch, out, cells)
        rows.extend({"case": "search", **r} for r in d.pop("rows"))
        runs["cudasw4"] = d
        bars["b_over_d"] = filled_s / d["wall_s"]
    return {"workload": workload, "rows": rows, "runs": runs, "bars": bars}


def cudasw4(args, runner: Runner, fasta: Path, queries: Path, scratch: Path,
            swdask_hits: Path, cells: int) -> dict:
    """Row (d): CUDASW++4.0 on the same database and queries, and the top-10 agreement.

    ``makedb`` once (not counted), then ``align`` with the options of its own
    benchmark scripts (:func:`common.cudasw4_align_command`), ``--top 10``, as a whole
    process.
    """
    import pandas as pd

    db_prefix = scratch / "cudasw4_db" / "db"
    db_prefix.parent.mkdir(exist_ok=True)
    made = runner.run([], {}, label="CUDASW++ makedb (not counted)",
                      program=cudasw4_makedb_command(args.cudasw4, fasta, db_prefix))
    tsv = scratch / "cudasw4_top10.tsv"
    command = cudasw4_align_command(args.cudasw4, queries, db_prefix, tsv, top=10)
    runs = [runner.run([], one_gpu(), label=f"(d) CUDASW++ align, run {k + 1}", program=command)
            for k in range(args.repeats)]
    wall = statistics.median(r["wall_s"] for r in runs)
    reported, gcups = zip(*(cudasw4_total(r["stdout"]) for r in runs))
    theirs = cudasw4_top_scores(tsv)
    ours = pd.read_parquet(swdask_hits, columns=["query_id", "score"])
    ours = {int(q): sorted(g["score"].astype(int).tolist(), reverse=True)[:10]
            for q, g in ours.groupby("query_id")}
    agree, compared = scores_agree(ours, {q: s[:10] for q, s in theirs.items()})
    print(f"  top-10 scores: {agree} of {compared} agree (swdask vs CUDASW++, rank by rank)",
          flush=True)
    med = lambda xs: statistics.median(x for x in xs if x is not None) \
        if any(x is not None for x in xs) else None  # noqa: E731
    return {"makedb_s": made["wall_s"], "runs": [slim(r) for r in runs], "wall_s": wall,
            "reported_s": list(reported), "reported_gcups": list(gcups), "top10_agree": agree,
            "top10_compared": compared,
            "rows": [{"run": f"(d) CUDASW++4.0 align (median of {args.repeats})",
                      "wall_s": wall, "reported_s": med(reported), "gcups": cells / wall / 1e9},
                     {"run": "    (d) its own GCUPS (scan only)", "wall_s": None,
                      "reported_s": None, "gcups": med(gcups)}]}


def case_small(args, runner: Runner, scratch: Path, shared: dict) -> dict:
    """``--device auto`` against ``--device cpu`` on a small search (in the search
    case's caches, when it ran: the same commands, so the fill runs are short)."""
    import numpy as np

    from swdask.sequences.store import load_sequences

    n_db, n_q, low, high = (300, 4, 349, 4613) if args.quick else (2100, 22, 349, 4613)
    pool = load_sequences(args.small_db)
    rest = [k for k in range(n_db, len(pool)) if low <= pool.lengths[k] <= high]
    rest.sort(key=lambda k: (int(pool.lengths[k]), k))
    picks = [rest[int(round(x))] for x in np.linspace(0, len(rest) - 1, n_q)]
    queries = write_fasta(scratch / "small_queries.fasta", records_of(pool, picks))
    db = write_fasta(scratch / "small_db.fasta", records_of(pool, range(n_db)))
    store = scratch / "small_db.store"
    runner.run(["ingest", db, "-o", store, "--force", "--quiet"], {}, label="swdask ingest (not counted)")
    q_res = int(sum(pool.lengths[k] for k in picks))
    d_res = int(pool.lengths[:n_db].sum())
    cells = q_res * d_res
    lengths = sorted(int(pool.lengths[k]) for k in picks)
    workload = {"db": str(args.small_db), "db_records": n_db, "db_residues": d_res,
                "n_queries": n_q, "query_residues": q_res,
                "query_lengths": [lengths[0], lengths[-1]], "cells": cells, "max_hits": 10}
    print(f"small: {n_q} queries of {lengths[0]:,}-{lengths[-1]:,} residues x the first "
          f"{n_db:,} records of {Path(args.small_db).name} ({d_res:,} residues), "
          f"{cells:,} cells", flush=True)
    caches = shared.get("search") or fresh_caches(scratch, "small")
    rows, runs, walls, chosen = [], {}, {}, {}
    for device in ("auto", "cpu"):
        argv = ["search", queries, store, "-o", scratch / f"small_{device}.parquet",
                "--device", device, "--max-hits", "10", "--force"]
        fill = runner.run(argv, caches, label=f"--device {device}, filling the cache (not counted)")
        timed = [runner.run(argv, caches, label=f"--device {device}, run {k + 1}")
                 for k in range(args.repeats)]
        walls[device] = statistics.median(r["wall_s"] for r in timed)
        found = re.search(r" on (cpu\+gpu|cpu|gpu)\b", timed[-1]["summary"])
        chosen[device] = found.group(1) if found else "?"
        runs[device] = {"fill": slim(fill), "timed": [slim(r) for r in timed]}
        rows.append({"case": "small", "run": f"--device {device} -> {chosen[device]} (median of "
                     f"{args.repeats})", "wall_s": walls[device],
                     "reported_s": statistics.median(
                         seconds_in(r["summary"], r"total ([\d.]+) s") or 0 for r in timed),
                     "gcups": cells / walls[device] / 1e9})
    bars = {"auto_s": walls["auto"], "cpu_s": walls["cpu"], "auto_chose": chosen["auto"],
            "auto_le_cpu_ok": walls["auto"] <= walls["cpu"]}
    return {"workload": workload, "rows": rows, "runs": runs, "bars": bars}


def first_vs_warm(args, runner: Runner, scratch: Path, case: str, argv: list, spec: dict,
                  cells, reported: str, workload: dict) -> dict:
    """The measure of ``allpairs``, ``significance`` and ``align-long``: an untimed run
    fills the cache, then the command in fresh processes (median) against the second
    run of the same work in one process."""
    caches = fresh_caches(scratch, case)
    empty = runner.run(argv, caches, label="empty cache (fills it)")
    first = [runner.run(argv, caches, label=f"first in a fresh process, filled cache, run {k + 1}")
             for k in range(args.repeats)]
    warm = runner.warm(spec, caches, label="warm in one process")
    first_s = statistics.median(r["wall_s"] for r in first)
    warm_s = warm["runs_s"][1]
    if callable(cells):
        cells = cells(first[-1])
    def gcups(seconds):
        return cells / seconds / 1e9 if cells and seconds else None

    rows = [{"case": case, "run": "empty cache", "wall_s": empty["wall_s"],
             "reported_s": seconds_in(empty["summary"], reported), "gcups": gcups(empty["wall_s"])},
            {"case": case, "run": f"first, filled cache (median of {args.repeats})",
             "wall_s": first_s, "reported_s": statistics.median(
                 seconds_in(r["summary"], reported) or 0 for r in first), "gcups": gcups(first_s)},
            {"case": case, "run": "warm in one process (2nd run)", "wall_s": warm_s,
             "reported_s": None, "gcups": gcups(warm_s)},
            {"case": case, "run": "    warm: its 1st run", "wall_s": warm["runs_s"][0],
             "reported_s": None, "gcups": gcups(warm["runs_s"][0])}]
    workload = {**workload, "cells": cells, "device": args.device}
    return {"workload": workload, "rows": rows,
            "runs": {"empty": slim(empty), "first": [slim(r) for r in first], "warm": slim(warm)},
            "bars": {"first_s": first_s, "warm_s": warm_s, "first_over_warm": first_s / warm_s,
                     "first_le_1_3_warm_ok": first_s <= 1.3 * warm_s}}


#: A fresh process that starts the CUDA driver and device 0's context through swdask's
#: driver layer and leaves as the command does (``os._exit``): what any first GPU run
#: pays that a warm one does not, before any import of the job.
FLOOR_CODE = ("import os\nfrom swdask.kernels.cuda import driver\ndriver.context()\n"
              "os._exit(0)\n")


def process_floor(args, runner: Runner) -> dict | None:
    """The median wall time of :data:`FLOOR_CODE` in fresh processes (GPU runs only):
    a first run of a job can be no faster than its warm run plus this.

    Returns
    -------
    dict or None
        ``floor_s`` (median), ``runs_s``; None on the CPU.
    """
    if args.device != "gpu":
        return None
    runs = [runner.run([], {}, label=f"process floor (interpreter, CUDA context, exit), run "
                       f"{k + 1}", program=[sys.executable, "-c", FLOOR_CODE])["wall_s"]
            for k in range(max(3, args.repeats))]
    return {"floor_s": statistics.median(runs), "runs_s": runs}


def case_allpairs(args, runner: Runner, scratch: Path) -> dict:
    """Every pair of ``--allpairs-genes`` 16S genes above 97% identity, global."""
    fasta, count = write_genes(args.genes, 40 if args.quick else args.allpairs_genes,
                               args.seed, scratch / "genes.fasta")
    out = scratch / "allpairs_out"
    argv = ["allpairs", fasta, "-o", out, "--mode", "global", "--min-identity", 0.97,
            "--match", 2, "--mismatch", -3, "--gap-open", 5, "--gap-extend", 2,
            "--device", args.device, "--force"]
    spec = {"case": "allpairs", "device": args.device, "source": str(fasta),
            "min_identity": 0.97, "output": str(scratch / "allpairs_warm")}
    print(f"allpairs: {count:,} genes of {Path(args.genes).name} (seed {args.seed}), "
          f"{count * (count - 1) // 2:,} pairs, global, DNA 2/-3 5/2, identity >= 0.97",
          flush=True)
    workload = {"genes_file": str(args.genes), "genes": count, "seed": args.seed,
                "pairs": count * (count - 1) // 2, "mode": "global",
                "scoring": "DNA 2/-3, gaps 5/2", "min_identity": 0.97}
    return first_vs_warm(args, runner, scratch, "allpairs", argv, spec,
                         lambda r: seconds_in(r["summary"], r"\(([\d,]+) cells"),
                         r", ([\d.]+) s \([\d,]+ pairs/s\)", workload)


def case_significance(args, runner: Runner, scratch: Path) -> dict:
    """P-values of 100 Swiss-Prot pairs from ``--shuffles`` shuffles each."""
    import numpy as np

    from swdask.sequences.store import load_sequences

    n_pairs, shuffles = (4, 20) if args.quick else (args.pairs, args.shuffles)
    pool = load_sequences(args.db)
    ok = np.flatnonzero(pool.lengths <= (300 if args.quick else 10**9))
    picks = np.random.default_rng(args.seed).choice(ok, 2 * n_pairs, replace=False)
    queries = records_of(pool, picks[:n_pairs])
    subjects = records_of(pool, picks[n_pairs:])
    q_file = write_fasta(scratch / "sig_queries.fasta", queries)
    s_file = write_fasta(scratch / "sig_subjects.fasta", subjects)
    pairs = scratch / "sig_pairs.tsv"
    pairs.write_text("".join(f"{q[0]}\t{s[0]}\n" for q, s in zip(queries, subjects)))
    cells = sum(len(q[1]) * len(s[1]) for q, s in zip(queries, subjects)) * (shuffles + 1)
    argv = ["significance", q_file, s_file, "-o", scratch / "sig.parquet", "--pairs", pairs,
            "--shuffles", shuffles, "--device", args.device, "--force"]
    spec = {"case": "significance", "device": args.device, "queries": str(q_file),
            "subjects": str(s_file), "pairs": str(pairs), "shuffles": shuffles,
            "output": str(scratch / "sig_warm.parquet")}
    print(f"significance: {n_pairs} pairs of {Path(args.db).name} records x {shuffles:,} "
          f"shuffles, BLOSUM62 11/1, {cells:,} cells", flush=True)
    workload = {"db": str(args.db), "pairs": n_pairs, "shuffles": shuffles, "seed": args.seed,
                "query_residues": sum(len(q[1]) for q in queries),
                "subject_residues": sum(len(s[1]) for s in subjects)}
    return first_vs_warm(args, runner, scratch, "significance", argv, spec, cells,
                         r", ([\d.]+) s\)", workload)


def case_align_long(args, runner: Runner, scratch: Path) -> dict:
    """A window of a chromosome against a planted mutated copy of it."""
    import swdask

    scoring = swdask.Scoring(alphabet="dna")
    spacing = 150 if args.quick else 1000
    a, b, expected, start = planted_pair(args.chromosome, 3000 if args.quick else args.window,
                                         args.window_start, spacing, scoring)
    a_file = write_fasta(scratch / "long_a.fasta", [("A", scoring.alphabet.decode(a))])
    b_file = write_fasta(scratch / "long_b.fasta", [("B", scoring.alphabet.decode(b))])
    cells = len(a) * len(b)
    argv = ["align-long", a_file, b_file, "-o", scratch / "long.parquet", "--device",
            args.device, "--force"]
    spec = {"case": "align-long", "device": args.device, "a": str(a_file), "b": str(b_file),
            "output": str(scratch / "long_warm.parquet")}
    print(f"align-long: {len(a):,} residues of {Path(args.chromosome).name} from {start:,} x "
          f"a copy with a mutation every {spacing} ({len(b):,} residues, planted score "
          f"{expected:,}), {cells:,} cells", flush=True)
    workload = {"chromosome": str(args.chromosome), "window_start": start, "a": len(a),
                "b": len(b), "spacing": spacing, "planted_score": int(expected)}
    result = first_vs_warm(args, runner, scratch, "align-long", argv, spec, cells,
                           r"cells in ([\d.]+) s", workload)
    import pandas as pd

    score = int(pd.read_parquet(scratch / "long.parquet")["score"].iloc[0])
    result["bars"]["planted_score_ok"] = score == expected
    if score != expected:
        print(f"PLANTED SCORE MISSED: {score} != {expected}", flush=True)
    return result


# --------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------


def report_table(results: dict, floor: dict | None = None) -> None:
    """Print every case's rows as one table, then the bars (with ``floor``, the
    :func:`process_floor` of the run, under each first-vs-warm bar)."""
    print("\n| case | wall s | GCUPS | run | swdask's own time s |")
    print("|---|---:|---:|---|---:|")
    for name, result in results.items():
        for r in result["rows"]:
            wall = "" if r["wall_s"] is None else f"{r['wall_s']:.2f}"
            gcups = "" if r["gcups"] is None else f"{r['gcups']:,.0f}" if r["gcups"] >= 100 \
                else f"{r['gcups']:.3g}"
            own = "" if not r.get("reported_s") else f"{r['reported_s']:.2f}"
            print(f"| {name} | {wall} | {gcups} | {r['run']} | {own} |")
    print()
    verdict = lambda ok: "PASS" if ok else "FAIL"  # noqa: E731
    if "search" in results:
        b = results["search"]["bars"]
        print(f"bar search (b) - (c) <= 1.0 s: {b['b_minus_c_s']:.2f} s {verdict(b['b_minus_c_ok'])}")
        print(f"bar search (a) <= 15 s: {b['a_s']:.2f} s {verdict(b['a_ok'])}")
        if "b_over_d" in b:
            d = results["search"]["runs"]["cudasw4"]
            print(f"ratio search (b) / (d) CUDASW++: {b['b_over_d']:.2f}; top-10 scores agree "
                  f"{d['top10_agree']} of {d['top10_compared']}")
    if "small" in results:
        b = results["small"]["bars"]
        print(f"bar small auto ({b['auto_chose']}) <= cpu: {b['auto_s']:.2f} s vs "
              f"{b['cpu_s']:.2f} s {verdict(b['auto_le_cpu_ok'])}")
    for name in ("allpairs", "significance", "align-long"):
        if name in results:
            b = results[name]["bars"]
            print(f"bar {name} first <= 1.3 x warm: {b['first_s']:.2f} s vs {b['warm_s']:.2f} s "
                  f"(x{b['first_over_warm']:.2f}) {verdict(b['first_le_1_3_warm_ok'])}")
            if floor:
                print(f"    a fresh process may add 0.3 x warm = {0.3 * b['warm_s']:.2f} s; it "
                      f"added {b['first_s'] - b['warm_s']:.2f} s; the process floor alone is "
                      f"{floor['floor_s']:.2f} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"comma list of {', '.join(CASES)} (default: all)")
    parser.add_argument("--device", choices=("cpu", "gpu"),
                        help="device of every case (default: gpu if nvidia-smi exists, else cpu)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs of each fresh-process measure (median)")
    parser.add_argument("--db", type=Path, help="Swiss-Prot FASTA of the search database, the "
                        "small case and the significance pairs (default "
                        "tests/data/sprot12071.fasta.gz)")
    parser.add_argument("--copies", type=int, default=21, help="replicas of --db (default 21)")
    parser.add_argument("--queries", type=Path, default=DATA / "sprot_queries.fasta",
                        help="search queries (default tests/data/sprot_queries.fasta)")
    parser.add_argument("--gap-open", type=int, default=11, help="search gap open (default 11; "
                        "10 with --cudasw4)")
    parser.add_argument("--gap-extend", type=int, default=1)
    parser.add_argument("--cudasw4", type=Path, help="folder of CUDASW++4.0's makedb and align")
    parser.add_argument("--genes", type=Path, default=DATA / "16S_200.fna.gz",
                        help="16S FASTA of the allpairs case")
    parser.add_argument("--allpairs-genes", type=int, default=6000)
    parser.add_argument("--pairs", type=int, default=100, help="significance pairs (default 100)")
    parser.add_argument("--shuffles", type=int, default=3000)
    parser.add_argument("--chromosome", type=Path, default=DATA / "NCTC11397_window40k.fna.gz",
                        help="DNA FASTA of the align-long case (first record)")
    parser.add_argument("--window", type=int, default=1_000_000)
    parser.add_argument("--window-start", type=int, default=700_000)
    parser.add_argument("--seed", type=int, default=20261123, help="seed of the random draws")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per process")
    parser.add_argument("--scratch", type=Path, help="work folder (default: a temporary one, "
                        "removed at the end)")
    parser.add_argument("--quick", action="store_true",
                        help="CI smoke run: tiny inputs, every case on the CPU, one repeat")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return 0
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    cases = [c for c in CASES if c in cases]  # search first: its (a) is the empty cache
    args.small_db = args.db or DATA / "sprot12071.fasta.gz"
    if args.quick:
        args.device, args.repeats, args.copies = "cpu", 1, 1
        args.db = args.db or DATA / "sprot_db.fasta.gz"
        args.cudasw4 = None
    args.db = args.db or DATA / "sprot12071.fasta.gz"
    if args.cudasw4:
        try:
            cudasw4_programs(args.cudasw4)
        except FileNotFoundError as error:
            parser.error(f"--cudasw4: {error}")
    if args.device is None:
        args.device = "gpu" if shutil.which("nvidia-smi") else "cpu"

    runner = Runner(swdask_command(), args.timeout)
    info = machine()
    has_warmup = runner.run(["warmup", "--help"], {}, label="swdask warmup --help",
                            check=False, quiet=True)["returncode"] == 0
    print(f"# swdask command line, wall clock\n\nmachine: {info['cpu']}, {info['cores']} cores; "
          f"GPU: {', '.join(info['gpus']) or 'none'}; swdask {info['swdask']} "
          f"({info['commit']}); Python {info['python']}")
    print(f"command: {' '.join(runner.command)}; device {args.device}; repeats {args.repeats}; "
          f"swdask warmup {'found' if has_warmup else 'not found'}; caches: {SWDASK_CACHE}, "
          f"{NUMBA_CACHE} fresh per case (small: those of search)\n", flush=True)
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="swdask-cli-wall-"))
    scratch.mkdir(parents=True, exist_ok=True)
    report = {"machine": info, "command": runner.command, "device": args.device,
              "repeats": args.repeats, "quick": args.quick, "warmup_command": has_warmup,
              "cases": {}}
    shared = {}
    run_case = {"search": lambda: case_search(args, runner, scratch, has_warmup, shared),
                "small": lambda: case_small(args, runner, scratch, shared),
                "allpairs": lambda: case_allpairs(args, runner, scratch),
                "significance": lambda: case_significance(args, runner, scratch),
                "align-long": lambda: case_align_long(args, runner, scratch)}
    try:
        for case in cases:
            tick = time.perf_counter()
            report["cases"][case] = run_case[case]()
            report["cases"][case]["case_s"] = time.perf_counter() - tick
            print(f"({case}: {report['cases'][case]['case_s']:.0f} s in all)\n", flush=True)
            if args.json:
                args.json.write_text(json.dumps(report, indent=1, default=str) + "\n")
    finally:
        if args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    if set(cases) & {"allpairs", "significance", "align-long"}:
        floor = process_floor(args, runner)
        if floor:
            report["floor"] = floor
            print(f"(process floor: {floor['floor_s']:.2f} s, median)\n", flush=True)
            if args.json:
                args.json.write_text(json.dumps(report, indent=1, default=str) + "\n")
    report_table(report["cases"], report.get("floor"))
    checks = [r["bars"].get("planted_score_ok", True) for r in report["cases"].values()]
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
