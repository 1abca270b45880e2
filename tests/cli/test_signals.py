"""The battery of signals and concurrent writers: every writing subcommand run as a real
process, stopped by SIGINT or SIGTERM at seeded random points of its run, and run twice at
once into one new output.

Invariants of a stopped run: exit status 0 (it had finished), 130 (SIGINT) or 143 (SIGTERM);
on a stop one line on stderr and no traceback; the output as it was before, or the complete
new one (never a mix, never lost); no temporary left, in the output's folder or in the
temporary folder.  Of two concurrent writers to one new path exactly one wins; the other
fails with one line and exit 2, and the output is the winner's, whole.  A SIGKILLed run's
temporaries are reclaimed by the next run writing to the same folder.  docs/reliability.md
gives the figures.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from swdask.cli import main
from swdask.jobs.allpairs import read_all_pairs
from swdask.jobs.allpairs.output import MANIFEST, block_file
from swdask.sequences.store import SequenceStore

#: Stops per subcommand, at stratified random points of its run: SIGINT, SIGTERM, then
#: either.  CI runs 2 (the battery stays under a minute or so on 2 cores);
#: SWDASK_SIGNAL_TRIALS=N runs more (docs/reliability.md gives the figures of 8).
TRIALS = int(os.environ.get("SWDASK_SIGNAL_TRIALS", "2"))
SEED = 20


def old_new(command: str, inputs, folder: Path) -> tuple[list, list]:
    """The command lines that write the old output and the new one (other parameters, so
    that the two differ), into ``folder``."""
    if command == "search":  # a FASTA database: a temporary store in TMPDIR too
        line = ["search", inputs.queries, inputs.database, "-o", folder / "hits.tsv",
                "--device", "cpu", "--quiet", "--max-hits"]
        return line + ["1"], line + ["3"]
    if command == "significance":
        line = ["significance", inputs.queries, inputs.queries, "-o", folder / "p.parquet",
                "--shuffles", "30", "--device", "cpu", "--quiet", "--seed"]
        return line + ["1"], line + ["2"]
    if command == "align-long":
        line = ["align-long", inputs.a, inputs.b, "-o", folder / "long.parquet", "--traceback",
                "--sam", folder / "long.sam", "--device", "cpu", "--quiet", "--gap-open"]
        return line + ["3"], line + ["5"]
    if command == "allpairs":
        line = ["allpairs", inputs.genes_store, "-o", folder / "pairs", "--block-size", "4",
                "--device", "cpu", "--quiet", "--min-identity"]
        return line + ["0.9"], line + ["0.8"]
    assert command == "ingest"
    return ([command, inputs.genes, "-o", folder / "db.store"],
            [command, inputs.database, "-o", folder / "db.store"])


def fingerprint(command: str, folder: Path):
    """What the output holds, its deterministic part: equal for equal results."""
    if not any(folder.iterdir()):
        return "missing"
    if command == "search":
        return (folder / "hits.tsv").read_bytes()
    if command == "significance":
        return pq.read_table(folder / "p.parquet").to_pylist()
    if command == "align-long":
        row = pq.read_table(folder / "long.parquet").to_pylist()[0]
        for timing in ("score_seconds", "traceback_seconds", "device", "tile_rows", "tile_cols"):
            del row[timing]
        return row, (folder / "long.sam").read_text()
    if command == "allpairs":
        return read_all_pairs(folder / "pairs").to_csv()
    store = SequenceStore.open(folder / "db.store")
    batch = store.read_all()
    return store.n_records, batch.names, [bytes(batch.codes(i)) for i in range(len(batch))]


def run(argv) -> int:
    return main([str(a) for a in argv])


def start(argv, tmpdir: Path) -> subprocess.Popen:
    """``swdask ARGV`` as a process, its temporary folder ``tmpdir``; returned once it has
    set its signal handlers (Linux: SIGTERM caught in /proc/PID/status), since a signal
    before that meets Python's defaults, not swdask."""
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    process = subprocess.Popen([sys.executable, "-m", "swdask.cli", *map(str, argv)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    status = Path(f"/proc/{process.pid}/status")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            lines = status.read_text().splitlines()
        except OSError:  # ended meanwhile
            break
        caught = next((line for line in lines if line.startswith("SigCgt:")), "SigCgt: 0")
        if int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1:
            break
        time.sleep(0.005)
    return process


def finish(process: subprocess.Popen, timeout: float = 180) -> tuple[int, str]:
    try:
        _, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"hung: {process.args}")
    return process.returncode, err


def leftovers(folder: Path, tmpdir: Path) -> list[str]:
    """Hidden names in the output folder (temporaries; outputs are never hidden), at any
    depth, and anything in the temporary folder."""
    return ([str(p) for p in folder.rglob(".*")]
            + [str(p) for p in tmpdir.iterdir() if p.name != "dask-scratch-space"])


@pytest.mark.parametrize("command", ["search", "significance", "align-long", "allpairs",
                                     "ingest"])
def test_signals_at_random_points(command, inputs, tmp_path):
    """The old output exists and the new run has --force: after the signal, the old one
    whole or the new one whole."""
    rng = random.Random(f"{SEED}-{command}")
    folder, saved, tmpdir = tmp_path / "out", tmp_path / "saved", tmp_path / "tmp"
    folder.mkdir()
    tmpdir.mkdir()
    old_argv, new_argv = old_new(command, inputs, folder)
    assert run(old_argv) == 0
    old = fingerprint(command, folder)
    shutil.copytree(folder, saved, symlinks=True)
    process = start(new_argv + ["--force"], tmpdir)  # the reference run, timed
    began = time.monotonic()
    status, err = finish(process)
    seconds = time.monotonic() - began
    assert status == 0, err
    new = fingerprint(command, folder)
    assert new != old and leftovers(folder, tmpdir) == []
    numbers = [signal.SIGINT, signal.SIGTERM]
    numbers += [rng.choice(numbers) for _ in range(TRIALS - 2)]
    report = []
    for trial, number in enumerate(numbers[:TRIALS]):
        shutil.rmtree(folder)
        shutil.copytree(saved, folder, symlinks=True)
        delay = seconds * (trial + rng.random()) / TRIALS
        process = start(new_argv + ["--force"], tmpdir)
        time.sleep(delay)
        process.send_signal(number)
        status, err = finish(process)
        where = f"{command}, {number.name} after {delay:.2f} s of {seconds:.2f} s: {err!r}"
        report.append([number.name, round(delay, 2), status])
        assert status in (0, 128 + number), where
        if status:
            word = "interrupted" if number == signal.SIGINT else "terminated"
            assert err.startswith(f"swdask: {word}; ") and err.count("\n") == 1, where
        now = fingerprint(command, folder)
        assert now == new if status == 0 else now in (old, new), where
        report[-1].append("new" if now == new else "old")
        assert leftovers(folder, tmpdir) == [], where
    print(command, f"{seconds:.2f} s", report)


# -- concurrent writers ---------------------------------------------------------------------


@pytest.mark.parametrize("command", ["allpairs", "ingest"])
def test_two_writers_one_wins(command, inputs, tmp_path):
    """Folders, the new all-pairs folder and a store (files: tests/jobs/test_base.py)."""
    folder, tmpdir = tmp_path / "out", tmp_path / "tmp"
    folder.mkdir()
    tmpdir.mkdir()
    lines = old_new(command, inputs, folder)
    processes = [start(argv, tmpdir) for argv in lines]
    results = [finish(process) for process in processes]
    statuses = sorted(status for status, _ in results)
    assert statuses == [0, 2], results
    winner = [status for status, _ in results].index(0)
    err = results[1 - winner][1]
    assert err.count("\n") == 1 and err.startswith("swdask: error: ") and \
        "already exists" in err, err
    won = fingerprint(command, folder)
    shutil.rmtree(folder)
    folder.mkdir()
    assert run(lines[winner]) == 0
    assert fingerprint(command, folder) == won  # the winner's output, whole
    assert leftovers(folder, tmpdir) == []


# -- killed runs' temporaries ---------------------------------------------------------------


def test_a_killed_runs_temporaries_are_reclaimed(inputs, tmp_path, monkeypatch):
    """SIGKILL leaves a half-written store (and a search's temporary store); the next run
    writing to the same folder removes them, and only them."""
    folder, tmpdir = tmp_path / "out", tmp_path / "tmp"
    folder.mkdir()
    tmpdir.mkdir()
    (folder / "keep.txt").write_text("precious")
    (folder / ".hidden-but-not-ours.tmp").write_text("precious")
    for _ in range(3):
        # A small ingest may rename its store into place between the sight of its
        # temporary and the kill, leaving none: such a try is run again.
        processes = [start(["ingest", inputs.database, "-o", folder / "db.store"], tmpdir),
                     start(["search", inputs.queries, inputs.database, "-o", folder / "h.tsv"],
                           tmpdir)]
        deadline = time.monotonic() + 120
        waiting = dict(zip(processes, (folder, tmpdir)))
        while waiting and time.monotonic() < deadline:
            for process, where in list(waiting.items()):
                if list(where.glob(".*.*.tmp")):  # at work: killed there
                    process.kill()
                    del waiting[process]
            time.sleep(0.002)
        assert [finish(process)[0] for process in processes] == [-signal.SIGKILL] * 2
        stale = sorted(str(p) for p in leftovers(folder, tmpdir)
                       if not p.endswith("not-ours.tmp"))
        if list(folder.glob(".*db.store*.tmp")):
            break
        shutil.rmtree(folder / "db.store", ignore_errors=True)  # finished before the kill
    assert len(stale) >= 2, stale  # a store in the making, and a temporary store
    monkeypatch.setattr("tempfile.tempdir", str(tmpdir))
    assert run(["search", inputs.queries, inputs.database, "-o", folder / "h.tsv", "--quiet",
                "--device", "cpu"]) == 0
    assert sorted(p.name for p in folder.iterdir()) == [".hidden-but-not-ours.tmp", "h.tsv",
                                                         "keep.txt"]
    assert list(tmpdir.iterdir()) == []


def test_resumable_result_of_a_stopped_new_run(inputs, tmp_path):
    """A new all-pairs run stopped by SIGTERM keeps the block pairs it finished (the
    manifest names only complete files), and --resume completes it."""
    folder, tmpdir = tmp_path / "out", tmp_path / "tmp"
    folder.mkdir()
    tmpdir.mkdir()
    _, argv = old_new("allpairs", inputs, folder)
    process = start(argv, tmpdir)
    out = folder / "pairs"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(out.glob("pairs-*.parquet"))) < 2:
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    status, err = finish(process)
    assert status in (0, 143), err
    if status:
        assert err == (f"swdask: terminated; {out} keeps the block pairs finished so far: "
                       "continue with --resume\n")
        manifest = json.loads((out / MANIFEST).read_text())
        assert not manifest["finished"]
        for key in manifest["done"]:
            a, b = map(int, key.split("-"))
            assert pq.read_schema(out / block_file(a, b)).metadata[b"swdask.schema"] == \
                b"allpairs"
    assert leftovers(folder, tmpdir) == []
    assert run(argv + ["--resume"]) == 0
    shutil.copytree(out, tmp_path / "resumed")
    shutil.rmtree(out)
    assert run(argv) == 0
    assert read_all_pairs(tmp_path / "resumed").equals(read_all_pairs(out))
