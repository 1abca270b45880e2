"""What a score task's table costs on the host, and what cudf could save of it (issue 16,
item 4).

A Dask search's score task ends with its table (schema ``SCORES``): each query's
``max_hits`` best candidates of its subjects (``tasks.candidates_frame``), merged up a tree
(``tasks.merge_candidates``).  The GPU selects the candidates on the device and ships back
only those, so the table is small: at most queries x ``max_hits`` rows a task.  This times,
on synthetic candidates of that size (random scores, the task's subjects drawn from
``--db``):

- **pandas** (what the search runs): ``candidates_frame`` of one task, and
  ``merge_candidates`` of ``--tasks`` tables;
- **cudf**, where it imports (a GPU machine with cudf): the same steps on the GPU from
  device arrays: the task's subjects (names, residues) uploaded as a DataFrame; a
  DataFrame of the candidates' columns joined with their subjects (a take); the
  concatenation, sort by query, score, subject and strand, each query's first
  ``max_hits``; that result copied to the host (the traceback's inputs); and
  ``import cudf`` in a fresh process, which each GPU worker would pay once.

The per-task figures bound what cudf score tables could save against the pandas path::

    python workflows/benchmarks/score_tables.py --queries 196 --max-hits 10,500 --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, warm_timings  # noqa: E402  (this folder)


def median_seconds(repeats: int, step, *args) -> float:
    """Median wall seconds of ``step(*args)`` over ``repeats`` runs after one warm-up."""
    return statistics.median(warm_timings(repeats, step, *args))


def synthetic_found(rng, n_rows: int, n_subjects: int, per_row: int) -> list[tuple[int, tuple]]:
    """``(row, found)`` for each query row: ``per_row`` candidates of ``n_subjects`` with
    random scores and ends, as ``tasks.score_pass`` returns them."""
    found_rows = []
    for row in range(n_rows):
        cols = np.sort(rng.choice(n_subjects, size=min(per_row, n_subjects), replace=False))
        scores = rng.integers(20, 400, cols.size).astype(np.int32)
        ends = rng.integers(1, 300, cols.size).astype(np.int32)
        found_rows.append((row, (cols, scores, ends, ends)))
    return found_rows


def cudf_import_seconds() -> float | None:
    """``import cudf`` in a fresh process (None where it does not import)."""
    code = "import time; t = time.perf_counter(); import cudf; print(time.perf_counter() - t)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)
    return float(done.stdout.split()[-1]) if done.returncode == 0 else None


def cudf_steps(tables_np: list[dict], max_hits: int, repeats: int,
               subjects: pa.Table) -> dict:
    """The table's steps on the GPU with cudf, from device arrays: the task's subjects
    (``subjects``: names and residues as a list column) uploaded as a DataFrame; each
    task's DataFrame built and joined with its candidates' names and residues (a take);
    the tables concatenated, sorted by (query, -score, subject, strand), each query's
    first ``max_hits`` kept; and that result copied to the host as Arrow (the traceback
    runs on host arrays).  Returns median seconds: upload per task, build per task,
    merge, to host."""
    import cudf
    import cupy as cp

    def upload():
        meta = cudf.DataFrame.from_arrow(subjects)
        cp.cuda.runtime.deviceSynchronize()
        return meta

    meta = upload()
    rng = np.random.default_rng(0)
    device = [{name: cp.asarray(column) for name, column in table.items()} for table in tables_np]
    taken = [cp.asarray(rng.integers(0, subjects.num_rows, len(table["query_id"])))
             for table in tables_np]
    cp.cuda.runtime.deviceSynchronize()

    def build():
        frames = []
        for columns, at in zip(device, taken):
            frame = cudf.DataFrame(columns)
            joined = meta.take(at).reset_index(drop=True)
            frame["subject"] = joined["name"]
            frame["residues"] = joined["residues"]
            frames.append(frame)
        cp.cuda.runtime.deviceSynchronize()
        return frames

    frames = build()

    def merge():
        table = cudf.concat(frames, ignore_index=True)
        table["neg"] = -table["score"]
        table = table.sort_values(["query_id", "neg", "subject_id", "minus"])
        best = table.groupby("query_id", sort=False).head(max_hits)
        cp.cuda.runtime.deviceSynchronize()
        return best

    best = merge()
    return {"upload_per_task_s": median_seconds(repeats, upload),
            "build_per_task_s": median_seconds(repeats, build) / len(device),
            "merge_s": median_seconds(repeats, merge), "rows_merged": len(best),
            "to_host_s": median_seconds(repeats, best.to_arrow)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default=str(ROOT / "tests" / "data" / "sprot12071.fasta.gz"))
    parser.add_argument("--queries", type=int, default=196, help="query rows of a task")
    parser.add_argument("--max-hits", default="10,500", help="comma list")
    parser.add_argument("--subjects", type=int, default=12000,
                        help="subjects of a task (default: about Swiss-Prot 12k)")
    parser.add_argument("--tasks", type=int, default=8, help="tables merged at once")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import swdask
    from swdask.jobs.search import plan, tasks
    from swdask.sequences.batch import list_arrays
    from swdask.sequences.store import SequenceStore, read_part

    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory(prefix="swdask-score-tables-") as scratch:
        store_path = Path(scratch) / "db.store"
        swdask.ingest(args.db, store_path)
        store = SequenceStore.open(store_path)
        table = pa.concat_tables(read_part(path) for path in store.files)
        table = table.slice(0, min(args.subjects, table.num_rows))
        seq_id = table.column("seq_id").to_numpy()
        offsets, residues = list_arrays(table.column("residues"))
        names = table.column("name")
        queries = {f"q{k}": "MKVLAAGIVALLLAAGCSSSKEETPAEQ"[: 8 + k % 20] for k in range(args.queries)}
        rows = []
        for max_hits in (int(v) for v in args.max_hits.split(",")):
            job = plan.prepare(queries, store_path, scoring=None, mode="local", max_hits=max_hits,
                               min_score=None, evalue=None, device="cpu", alphabet="auto",
                               map_unknown=False, owner="caller")
            found = synthetic_found(rng, args.queries, len(seq_id), max_hits)
            build = median_seconds(args.repeats, tasks.candidates_frame, job, found, seq_id,
                                   offsets, residues, names)
            parts = [tasks.Candidates(tasks.candidates_frame(
                job, synthetic_found(rng, args.queries, len(seq_id), max_hits), seq_id, offsets,
                residues, names), tasks.ScoreStats()) for _ in range(args.tasks)]
            merge = median_seconds(args.repeats, tasks.merge_candidates, job, *parts)
            row = {"max_hits": max_hits, "rows_per_task": len(parts[0].table),
                   "pandas_build_per_task_s": build, "pandas_merge_s": merge}
            numeric = [{name: part.table[name].to_numpy() for name in
                        ("query_id", "subject_id", "score", "query_end", "subject_end",
                         "subject_length", "minus")} for part in parts]
            try:
                subjects = pa.table({"name": names.combine_chunks(),
                                     "residues": pa.ListArray.from_arrays(
                                         offsets.astype(np.int32), residues)})
                gpu = cudf_steps(numeric, max_hits, args.repeats, subjects)
            except ImportError as exc:
                gpu = {"error": f"cudf not importable: {exc}"}
            row["cudf"] = gpu
            rows.append(row)
    imported = cudf_import_seconds()
    report = {"machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                          "python": platform.python_version()},
              "queries": args.queries, "subjects": len(seq_id), "tasks_merged": args.tasks,
              "repeats": args.repeats, "cudf_import_s": imported, "rows": rows}
    print(f"# score tables: pandas (the search's) and cudf\n\n- {report['machine']}; "
          f"{args.queries} query rows x {len(seq_id):,} subjects a task; {args.tasks} tables a "
          f"merge; medians of {args.repeats}\n- import cudf in a fresh process: "
          f"{'not importable' if imported is None else f'{imported:.2f} s'}\n")
    print("| max_hits | rows a task | pandas: build a task ms | pandas: merge ms | "
          "cudf: subjects up, a task ms | cudf: build a task ms | cudf: merge ms | "
          "cudf: merged to host ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        gpu = row["cudf"]
        steps = ("upload_per_task_s", "build_per_task_s", "merge_s", "to_host_s")
        cells = (["n/a"] * len(steps) if "error" in gpu else
                 [f"{gpu[step] * 1e3:.2f}" for step in steps])
        print(f"| {row['max_hits']} | {row['rows_per_task']:,} | "
              f"{row['pandas_build_per_task_s'] * 1e3:.2f} | {row['pandas_merge_s'] * 1e3:.2f} | "
              + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
