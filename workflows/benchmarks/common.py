"""What the benchmark scripts share: the machine they ran on, timing a step after its
warm-up, and how CUDASW++4.0 is run beside swdask and its output read.

The scripts import it from their own folder (``sys.path`` holds a script's folder when it
runs), so nothing here is part of the installed package.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import time
from importlib import metadata
from pathlib import Path


def warm_timings(repeats: int, step, *args) -> list[float]:
    """Wall seconds of ``step(*args)`` in each of ``repeats`` runs after one untimed
    warm-up run (compilation, caches)."""
    step(*args)
    seconds = []
    for _ in range(repeats):
        tick = time.perf_counter()
        step(*args)
        seconds.append(time.perf_counter() - tick)
    return seconds


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_version(package: str) -> str:
    """The installed version of ``package``, or ``"not installed"``."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def gpu_names() -> list:
    """The names of the visible NVIDIA GPUs (``nvidia-smi``); empty without it."""
    if not shutil.which("nvidia-smi"):
        return []
    done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                          capture_output=True, text=True, check=False)
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


# --------------------------------------------------------------------------------------
# CUDASW++4.0, run beside swdask (cli_wall.py, gpu_search.py)
# --------------------------------------------------------------------------------------

#: The gap penalties that make swdask's scores equal CUDASW++4.0's: its ``align`` does not
#: pass ``--gop``/``--gex`` on (``src/main.cu``) and always charges 10 + k for a gap of k
#: residues (BLOSUM62), which is swdask's ``gap_open=10, gap_extend=1``.
CUDASW4_GAPS = (10, 1)

# What ``align --verbose`` prints on stdout (src/main.cu): for each query of a file
# "Processing query N ... " and, after the scan, "Done. Scan time: S s, G GCUPS" on the
# same line; after the file "Total time: S s, G GCUPS".  Numbers are C++ stream doubles
# (6 significant digits, exponent form when small or large, "inf" for a zero time).
# Anything may come between the two halves of a query's line (a warning), but not the next
# query's "Processing".
_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|[-+]?nan)"
_SCAN = re.compile(r"Processing query (\d+) \.\.\. (?:(?!Processing query).)*?"
                   rf"Done\. Scan time: {_NUMBER} s, {_NUMBER} GCUPS", re.DOTALL)
_TOTAL = re.compile(rf"Total time: {_NUMBER} s, {_NUMBER} GCUPS")


def one_gpu() -> dict[str, str]:
    """The environment that shows CUDASW++4.0 one GPU, the one swdask runs on (the first
    visible): its ``align`` spreads a database over every GPU it sees (``src/main.cu``),
    and on a host of two it reported the GCUPS of both (7,775 against about 3,900 for one
    H200, 2026-11-28)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return {"CUDA_VISIBLE_DEVICES": visible or "0"}


def cudasw4_programs(folder) -> tuple[Path, Path]:
    """CUDASW++4.0's ``makedb`` and ``align`` in ``folder`` (as its Makefile builds them).

    Raises
    ------
    FileNotFoundError
        Either is missing or not executable; the message names it.
    """
    folder = Path(folder).resolve()
    programs = folder / "makedb", folder / "align"
    for program in programs:
        if not (program.is_file() and os.access(program, os.X_OK)):
            raise FileNotFoundError(f"{program}: no CUDASW++4.0 binary here (build it with "
                                    "build-cudasw4.sh, see its header)")
    return programs


def cudasw4_makedb_command(folder, fasta, prefix) -> list[str]:
    """The command that builds CUDASW++4.0's database ``prefix`` from ``fasta``."""
    makedb, _ = cudasw4_programs(folder)
    return [str(makedb), str(fasta), str(prefix)]


def cudasw4_align_command(folder, queries, prefix, tsv, *, top: int = 10) -> list[str]:
    """The ``align`` command of a timed CUDASW++4.0 search.

    The options of its own benchmark scripts: the whole database on the GPU before the
    first query (``--uploadFull --prefetchDBFile``), the DPX kernels (16-bit packed, 32-bit
    for the long partitions), BLOSUM62, ``--verbose`` for its timing lines; the best
    ``top`` hits of each query to ``tsv`` (tab-separated, with a header line).

    Parameters
    ----------
    folder : path
        Where ``makedb`` and ``align`` are.
    queries : path
        FASTA of the queries.
    prefix : path
        The database ``makedb`` wrote.
    tsv : path
        The hits table to write.
    top : int, default 10
        Hits per query.

    Returns
    -------
    list of str
    """
    _, align = cudasw4_programs(folder)
    return [str(align), "--query", str(queries), "--db", str(prefix), "--top", str(top),
            "--verbose", "--uploadFull", "--prefetchDBFile", "--mat", "blosum62",
            "--singlePassType", "DPXs16", "--manyPassType_small", "DPXs16",
            "--manyPassType_large", "DPXs32", "--tsv", "--of", str(tsv)]


def cudasw4_scans(stdout: str) -> list[dict]:
    """The per-query timing lines of ``align --verbose``, in the order printed.

    Parameters
    ----------
    stdout : str
        What ``align`` printed on its standard output.

    Returns
    -------
    list of dict
        ``query`` (its 0-based number in the query file), ``seconds`` (scan time, GPU
        events around the query's whole scan) and ``gcups`` (as CUDASW++ computes them:
        query length x database residues / seconds).
    """
    return [{"query": int(m.group(1)), "seconds": float(m.group(2)), "gcups": float(m.group(3))}
            for m in _SCAN.finditer(stdout)]


def cudasw4_total(stdout: str) -> tuple:
    """``(seconds, gcups)`` of the ``Total time`` line of ``align --verbose`` (the last one
    if several query files were given), or ``(None, None)`` without one."""
    found = _TOTAL.findall(stdout)
    if not found:
        return None, None
    seconds, gcups = found[-1]
    return float(seconds), float(gcups)


def cudasw4_top_scores(tsv) -> dict:
    """The hit scores of each query in CUDASW++4.0's ``--tsv`` table, best first.

    Its columns (src/main.cu): Query number, Query length, Query header, Result number,
    Result score, Reference length, Reference header, Reference ID in DB; the first line
    names them.  Only the first five are read: a header with a tab in it moves the rest.

    Returns
    -------
    dict
        Query number (0-based, in the query file) -> list of int scores, highest first.
    """
    scores: dict = {}
    with open(tsv, encoding="utf-8", errors="replace") as handle:
        next(handle, None)
        for line in handle:
            fields = line.rstrip("\n").split("\t")
            if len(fields) >= 5:
                scores.setdefault(int(fields[0]), []).append(int(fields[4]))
    return {q: sorted(s, reverse=True) for q, s in scores.items()}


def scores_agree(ours: dict, theirs: dict) -> tuple[int, int]:
    """Compare two tools' hit scores query by query, rank by rank.

    Parameters
    ----------
    ours, theirs : dict
        Query key -> scores, highest first (already cut to the ranks to compare).

    Returns
    -------
    tuple of int
        ``(agree, compared)``: ranks with equal scores, and ranks compared (per query the
        longer of the two lists: a hit that one tool has and the other lacks disagrees).
    """
    compared = agree = 0
    for q in set(ours) | set(theirs):
        a, b = ours.get(q, []), theirs.get(q, [])
        compared += max(len(a), len(b))
        agree += sum(x == y for x, y in zip(a, b))
    return agree, compared
