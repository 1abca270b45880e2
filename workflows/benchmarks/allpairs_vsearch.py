"""All-pairs on the CPU against vsearch: paired whole-process runs (issue 17's CPU bar).

Workload: ``--genes`` (2,000) RefSeq 16S genes drawn seeded from ``--fasta`` (the draw of
``allpairs.py``), every unordered pair at identity >= ``--min-identity`` (0.97).

- swdask: ``swdask allpairs GENES.fasta -o OUT --device cpu --mode global --match 2
  --mismatch -3 --gap-open 5 --gap-extend 2 --min-identity T`` (the FASTA ingested inside
  the process, as a user runs it; the q-gram pre-filter on, and with ``--no-prefilter``
  once more where ``--without-prefilter`` asks);
- vsearch: ``vsearch --allpairs_global GENES.fasta --id T --iddef 1 --threads CORES
  --userout PAIRS.tsv`` (``--iddef 1`` counts every column, as swdask does; vsearch's own
  scoring, 2/-4 with its gap penalties: the two choose different alignments for some
  borderline pairs).

Each command runs once untimed on 64 of the genes (Numba's cache, page cache), then the
timed runs alternate swdask, vsearch, swdask, ... (``--repeats`` of each) so that a busy
neighbour slows both alike; the ratio is of the medians of whole-process wall times.  The
pairs are compared by name: both, swdask only, vsearch only (with their identities).

Usage (about 25 minutes on 2 cores, nearly all of it vsearch)::

    python workflows/benchmarks/allpairs_vsearch.py --json allpairs_vsearch.json
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from allpairs import DEFAULT_FASTA, ROOT, subset_fasta  # noqa: E402  (this folder)
from common import cpu_model, package_version  # noqa: E402

SWDASK = [sys.executable, "-m", "swdask.cli"]


def timed(command: list) -> tuple[float, subprocess.CompletedProcess]:
    """Wall seconds of one whole process, and the process."""
    tick = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - tick
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(map(str, command))}\n"
                         f"{done.stderr}")
    return seconds, done


def swdask_run(fasta: Path, out: Path, t: float, prefilter: bool) -> tuple[float, dict]:
    """One ``swdask allpairs`` process: its wall seconds and its summary's figures."""
    summary = out.with_suffix(".json")
    command = [*SWDASK, "allpairs", str(fasta), "-o", str(out), "--device", "cpu", "--mode",
               "global", "--match", "2", "--mismatch", "-3", "--gap-open", "5", "--gap-extend",
               "2", "--min-identity", str(t), "--force", "--quiet", "--summary-json",
               str(summary)] + ([] if prefilter else ["--no-prefilter"])
    seconds, _ = timed(command)
    return seconds, json.loads(summary.read_text())


def vsearch_run(vsearch: str, fasta: Path, tsv: Path, t: float) -> float:
    """One ``vsearch --allpairs_global`` process: its wall seconds."""
    seconds, _ = timed([vsearch, "--allpairs_global", str(fasta), "--id", str(t), "--iddef", "1",
                        "--threads", str(os.cpu_count() or 1), "--userout", str(tsv),
                        "--userfields", "query+target+id+alnlen", "--quiet"])
    return seconds


def compare(out: Path, tsv: Path) -> dict:
    """The pairs of the two outputs by name: in both, only in one (with identities)."""
    import swdask

    ours = {frozenset((r.query, r.subject)): r.identity
            for r in swdask.read_all_pairs(out).itertuples()}
    theirs = {}
    with open(tsv, newline="") as handle:
        for query, target, ident, _ in csv.reader(handle, delimiter="\t"):
            theirs[frozenset((query, target))] = float(ident) / 100
    only_ours = sorted((sorted(k), round(v, 4)) for k, v in ours.items() if k not in theirs)
    only_theirs = sorted((sorted(k), v) for k, v in theirs.items() if k not in ours)
    return {"swdask": len(ours), "vsearch": len(theirs), "both": len(ours.keys() & theirs.keys()),
            "swdask_only": only_ours, "vsearch_only": only_theirs}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fasta", type=Path, default=DEFAULT_FASTA)
    parser.add_argument("--genes", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--min-identity", type=float, default=0.97)
    parser.add_argument("--repeats", type=int, default=1, help="timed runs of each command")
    parser.add_argument("--vsearch", default=shutil.which("vsearch"), help="vsearch binary")
    parser.add_argument("--without-prefilter", action="store_true",
                        help="also time swdask with --no-prefilter (slow: minutes per 1,000 "
                        "genes)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 40 genes of tests/data/16S_200.fna.gz")
    args = parser.parse_args(argv)
    if args.quick:
        args.fasta, args.genes = ROOT / "tests" / "data" / "16S_200.fna.gz", 40
    if not args.vsearch:
        raise SystemExit("vsearch not found: give --vsearch PATH")
    version = subprocess.run([args.vsearch, "--version"], capture_output=True, text=True,
                             check=False).stderr.splitlines()[0]
    scratch = Path(tempfile.mkdtemp(prefix="swdask-allpairs-vsearch-"))
    t = args.min_identity
    runs = {"swdask": [], "vsearch": [], "swdask --no-prefilter": []}
    try:
        fasta, n = subset_fasta(args.fasta, args.genes, args.seed, scratch)
        (scratch / "warm").mkdir()
        warm, _ = subset_fasta(fasta, min(n, 64), args.seed, scratch / "warm")
        swdask_run(warm, scratch / "warm-out", t, True)
        vsearch_run(args.vsearch, warm, scratch / "warm.tsv", t)
        load = [os.getloadavg()]
        summary = None
        for _ in range(max(1, args.repeats)):
            seconds, summary = swdask_run(fasta, scratch / "out", t, True)
            runs["swdask"].append(seconds)
            runs["vsearch"].append(vsearch_run(args.vsearch, fasta, scratch / "v.tsv", t))
            if args.without_prefilter:
                runs["swdask --no-prefilter"].append(
                    swdask_run(fasta, scratch / "out-nf", t, False)[0])
        load.append(os.getloadavg())
        pairs = compare(scratch / "out", scratch / "v.tsv")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    median = {k: statistics.median(v) for k, v in runs.items() if v}
    report = {
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "swdask": package_version("swdask"),
                    "vsearch": version, "load_average_before_after": load},
        "workload": {"fasta": str(args.fasta), "genes": n, "seed": args.seed, "min_identity": t,
                     "swdask": "global, 2/-3, gaps 5/2", "vsearch": "--iddef 1, its scoring"},
        "wall_s": runs, "median_s": median,
        "vsearch_over_swdask": median["vsearch"] / median["swdask"],
        "swdask_summary": summary, "pairs": pairs,
    }
    print(f"machine: {report['machine']['cpu']}, {os.cpu_count()} cores; {version}")
    print(f"workload: {n:,} genes of {args.fasta.name}, identity >= {t}")
    for name, seconds in median.items():
        print(f"{name}: median {seconds:.1f} s wall of {len(runs[name])} run(s)")
    print(f"vsearch / swdask: {report['vsearch_over_swdask']:.1f} x")
    print(f"pairs: swdask {pairs['swdask']}, vsearch {pairs['vsearch']}, both {pairs['both']}, "
          f"swdask only {pairs['swdask_only']}, vsearch only {pairs['vsearch_only']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
