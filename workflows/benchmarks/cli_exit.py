"""Where a ``swdask`` command's last fraction of a second goes: from the process's start to
its command, the command itself, the exit handlers, and the exit (``os._exit`` until the
parent sees the process end: the kernel and the CUDA driver tearing the process down).

``cli_timeline.py`` ends at the report; ``cli_wall.py`` times the whole process.  This
splits the difference: the command runs as the installed ``swdask`` does
(``swdask.cli.main()`` with no arguments, so it ends the process itself), in a child
whose ``atexit._run_exitfuncs`` and ``os._exit`` are wrapped to print wall-clock marks on
the standard error; the parent marks the spawn and the end.  Each of ``--repeats`` runs
prints one row; the medians come last.  Run from the repository root::

    python workflows/benchmarks/cli_exit.py --repeats 3 -- search Q.fasta DB.store \\
        -o hits.parquet --device gpu --force
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

#: The child: marks when its code starts, when the exit handlers start and end, and when
#: ``os._exit`` is entered, then runs the command as the installed ``swdask`` does.
CHILD = r"""
import atexit, os, sys, time
print("MARK start", time.time(), file=sys.stderr, flush=True)
run_exitfuncs, real_exit = atexit._run_exitfuncs, os._exit
def handlers():
    print("MARK handlers", time.time(), file=sys.stderr, flush=True)
    run_exitfuncs()
    print("MARK handlers_done", time.time(), file=sys.stderr, flush=True)
def leave(status):
    if os.environ.get("CLI_EXIT_RESET") == "1":  # --reset-context: the context freed first
        print("MARK reset", time.time(), file=sys.stderr, flush=True)
        from swdask.kernels.cuda import driver
        library = driver.library()
        if library is not None and driver._contexts:
            library.cuCtxSynchronize()
            library.cuDevicePrimaryCtxReset(0)
    print("MARK exit", time.time(), file=sys.stderr, flush=True)
    real_exit(status)
atexit._run_exitfuncs, os._exit = handlers, leave
sys.argv = ["swdask", *sys.argv[1:]]
from swdask.cli import main
main()
"""
STEPS = (("spawn", "start", "interpreter start"), ("start", "handlers", "command"),
         ("handlers", "handlers_done", "exit handlers"),
         ("handlers_done", "exit", "flush (and context reset)"),
         ("exit", "end", "os._exit until reaped"))


def one_run(command: list[str], reset: bool = False) -> dict:
    """One whole process: its marks as seconds between steps (:data:`STEPS`); with
    ``reset``, device 0's primary context is synchronised and reset before ``os._exit``."""
    env = {**os.environ, "CLI_EXIT_RESET": "1" if reset else "0"}
    marks = {"spawn": time.time()}
    done = subprocess.run([sys.executable, "-c", CHILD, *command], capture_output=True,
                          text=True, check=False, env=env)
    marks["end"] = time.time()
    if done.returncode != 0:
        raise SystemExit(f"the command failed ({done.returncode}): {done.stderr[-2000:]}")
    for line in done.stderr.splitlines():
        if line.startswith("MARK "):
            _, name, at = line.split()
            marks[name] = float(at)
    return {label: marks[b] - marks[a] for a, b, label in STEPS} | {
        "wall": marks["end"] - marks["spawn"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reset-context", action="store_true",
                        help="also runs that reset the CUDA context before os._exit "
                             "(an experiment: does freeing it first shorten the exit?)")
    parser.add_argument("--json", help="write the runs here")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the swdask command after --, e.g. -- search Q DB -o OUT")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    variants = [False, True] if args.reset_context else [False]
    runs = {reset: [] for reset in variants}
    for _ in range(args.repeats):  # alternating, so that drift hits both alike
        for reset in variants:
            runs[reset].append(one_run(command, reset))
    labels = [label for _, _, label in STEPS] + ["wall"]
    print("| run | " + " | ".join(f"{label} s" for label in labels) + " |")
    print("|---|" + "---:|" * len(labels))
    for reset in variants:
        name = "context reset first" if reset else "as installed"
        for k, run in enumerate(runs[reset], start=1):
            print(f"| {name} {k} | " + " | ".join(f"{run[label]:.3f}" for label in labels)
                  + " |")
        print(f"| {name}, median | " + " | ".join(
            f"{statistics.median(r[label] for r in runs[reset]):.3f}" for label in labels)
            + " |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"command": command,
                       "runs": {("reset" if k else "installed"): v for k, v in runs.items()}},
                      out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
