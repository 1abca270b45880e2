"""A timeline of one ``swdask`` command as a whole process: when each heavy import and each
stage of the job ran, on which thread, from the process's start.

Whole-process time (``cli_wall.py``) says how long a command takes; this says where the
time before the first kernel and after the last one goes, which a profiler blurs: threads
overlap (the GPU's start runs beside the main thread's imports), and what matters is
which work holds the interpreter (the GIL) while the GPU waits.  Stages are recorded by
wrapping chosen functions as their modules load (:data:`STAGES`), imports by timing each
module's execution (top-level packages of :data:`HEAVY` to depth 3, every swdask module);
nothing is imported ahead of the command, so the imports happen where they would.

Usage::

    python workflows/benchmarks/cli_timeline.py [--repeat N] [--out FILE] [--min-ms M] \\
        -- search QUERIES STORE -o hits.parquet --device gpu --force

prints, after the command's own output, one line per event of at least ``--min-ms``
(start and end in seconds from the script's start, seconds, thread, what), then the total
per (thread, stage).  ``--repeat 2`` runs the command twice in one process (the second is
the warm run of ``cli_wall.py``'s row (c)).  The command's own exit is replaced by a
return, so that the report can be written; the process exits as the command would.
"""
from __future__ import annotations

import argparse
import importlib.abc
import os
import sys
import threading
import time

START = time.perf_counter()
#: (start, end, thread, what) of every event, appended from any thread.
EVENTS: list[tuple[float, float, str, str]] = []
#: Packages whose imports are timed (to three levels), besides swdask's modules.
HEAVY = {"numpy", "pyarrow", "pandas", "numba", "llvmlite", "dask", "distributed", "cupy",
         "scipy", "ml_dtypes", "cuda", "cudf", "rmm", "Bio", "yaml"}
#: The stages timed: module -> functions and methods (``Class.method``) wrapped as it loads.
STAGES = {
    "swdask.cli": ["main"],
    "swdask.backend": ["start_early", "_first_use", "_driver_start", "gpu_available",
                       "start_gpu", "check_device", "load_search_kernels", "top_hits_gpu"],
    "swdask.kernels.cuda.driver": ["_quiet_context"],
    "swdask.kernels.cuda.compile": ["Kernel.load", "Kernel.warm", "load_ahead", "build",
                                    "_Launch.__call__"],
    "swdask.kernels.cuda.launcher": ["DeviceSubjects.__init__", "DeviceSubjects.prepare",
                                     "DeviceSubjects._select_batch",
                                     "DeviceSubjects._end_cells"],
    "swdask.kernels.cuda.traceback": ["trace_paths"],
    "swdask.jobs.base": ["_import_yielding"],
    "swdask.sequences.store": ["read_part", "SequenceStore.read_partition"],
    "swdask.jobs.search.api": ["search_in_process", "_run", "prepare"],
    "swdask.jobs.search.tasks": ["score_pass", "trace", "hits_frame", "statistics"],
    "swdask.output": ["write_hits"],
    "numba.cuda.cudadrv.driver": ["Driver.ensure_initialized", "Device.get_primary_context"],
    "swdask.jobs.long_align.api": ["align_long"],
    "swdask.jobs.long_align.score": ["local_cluster", "client_workers", "score_pass",
                                     "score_here", "_tile_task", "select_worker_gpu"],
    "swdask.kernels.cuda.tile": ["score_grid_gpu"],
    "swdask.jobs.significance": ["_prepare", "_run_batch", "_gpu_chunk"],
    "swdask.kernels.cuda.psse": ["DeviceShuffles.__init__", "DeviceShuffles.significance"],
    "swdask.jobs.allpairs.plan": ["prepare"],
    "swdask.jobs.allpairs.output": ["write_all_pairs", "_write_run", "write_block_pair"],
    "swdask.jobs.allpairs.tasks": ["read_block", "_CodeCache.get", "block_pair", "_score_gpu",
                                   "_score_cpu", "_trace"],
    "swdask.jobs.allpairs.filter": ["QgramFilter.kept", "QgramFilter._screen"],
    "swdask.kernels.cuda.qgram": ["_array_module", "screen_and_count_gpu",
                                  "count_shared_gpu"],
    "swdask.sequences.ingest": ["open_database"],
    "distributed.client": ["Client.__init__", "Client.scatter", "Client.close"],
    "distributed.deploy.spec": ["SpecCluster.__init__", "SpecCluster.close"],
}


def _timed(name: str, function):
    def timed(*args, **kwargs):
        tick = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            EVENTS.append((tick, time.perf_counter(), threading.current_thread().name, name))
    timed.__wrapped__ = function
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(timed, attribute, getattr(function, attribute, None))
    return timed


def _wrap_stages(module) -> None:
    for spec in STAGES.get(module.__name__, ()):
        owner_name, _, attribute = spec.rpartition(".")
        owner = getattr(module, owner_name, None) if owner_name else module
        function = (owner.__dict__.get(attribute) if isinstance(owner, type)
                    else getattr(owner, attribute, None))
        if callable(function):
            setattr(owner, attribute, _timed(f"{module.__name__}:{spec}", function))


class _TimedLoader(importlib.abc.Loader):
    """Runs a module as its own loader would, timing it and wrapping its stages."""

    def __init__(self, loader, name: str):
        self.loader, self.name = loader, name

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        tick = time.perf_counter()
        try:
            self.loader.exec_module(module)
        finally:
            top = self.name.split(".")[0]
            if top == "swdask" or top in HEAVY and self.name.count(".") < 3:
                EVENTS.append((tick, time.perf_counter(), threading.current_thread().name,
                               "import " + self.name))
        _wrap_stages(module)

    def __getattr__(self, name):
        return getattr(self.loader, name)


class _TimedFinder(importlib.abc.MetaPathFinder):
    """Finds modules through the finders after it and hands their loaders a timer."""

    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                if hasattr(spec.loader, "exec_module"):
                    spec.loader = _TimedLoader(spec.loader, name)
                return spec
        return None


def report(out, min_seconds: float) -> None:
    """The events in order of start, then each (thread, stage)'s calls and seconds."""
    events = sorted(EVENTS)
    print(f"# timeline of swdask {' '.join(sys.argv[1:4])} ... "
          f"({time.perf_counter() - START:.3f} s to the report)", file=out)
    print(f"{'start':>8} {'end':>8} {'seconds':>8}  {'thread':22} what", file=out)
    for tick, tock, thread, what in events:
        if tock - tick >= min_seconds or tock == tick:
            print(f"{tick - START:8.3f} {tock - START:8.3f} {tock - tick:8.3f}  "
                  f"{thread[:22]:22} {what}", file=out)
    totals: dict[tuple[str, str], list] = {}
    for tick, tock, thread, what in events:
        if not what.startswith("import ") and tock > tick:
            entry = totals.setdefault((thread, what), [0, 0.0])
            entry[0] += 1
            entry[1] += tock - tick
    print("# stages: seconds, calls, thread, stage", file=out)
    for (thread, what), (calls, seconds) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f"{seconds:8.3f} {calls:6d}  {thread[:22]:22} {what}", file=out)
    out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="%(prog)s [options] -- COMMAND ARGS...")
    parser.add_argument("--repeat", type=int, default=1, help="runs in this process")
    parser.add_argument("--out", help="write the report here (default: standard error)")
    parser.add_argument("--min-ms", type=float, default=8.0,
                        help="shortest event listed, in milliseconds (default 8)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the swdask command after --")
    sys.meta_path.insert(0, _TimedFinder())
    sys.argv = ["swdask", *command]
    from swdask.cli import _skip_numba_blas_probe
    from swdask.cli import main as swdask_main

    _skip_numba_blas_probe()  # as the installed command does before it runs
    status = 0
    for run in range(args.repeat):
        tick = time.perf_counter()
        EVENTS.append((tick, tick, "MainThread", f"run {run + 1} starts"))
        # With arguments the command returns instead of ending the process.
        status = swdask_main(command)
        tock = time.perf_counter()
        EVENTS.append((tock, tock, "MainThread", f"run {run + 1} ends after {tock - tick:.3f} s"))
    if args.out:
        with open(args.out, "a") as out:
            report(out, args.min_ms / 1000)
    else:
        report(sys.stderr, args.min_ms / 1000)
    return status


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as the command ends its own process
