"""What the subcommands share: argument types, option groups, the scoring from the flags,
the run here or on Dask, and the summary lines.

Like every module of the command line it imports its libraries where a command runs, not
at the top: ``--help`` and a usage error stay quick.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from ..options import ALPHABETS, BINARY_OUTFMTS, MODES

if TYPE_CHECKING:  # for the annotations only: the modules load pandas and Numba
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any

    import pandas as pd
    from distributed import Client

    from ..jobs.search import SearchStats
    from ..scoring import Scoring
    from ..sequences.batch import SequencesLike
    from ..sequences.store import SequenceStore

#: The exit status of a usage error and of every error on bad input.
EXIT_BAD_INPUT = 2
#: The path that stands for the standard input (queries) or output (text formats).
STANDARD_STREAM = "-"

#: The exit statuses after SIGINT (Ctrl-C) and SIGTERM: 128 + the signal's number.
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C's KeyboardInterrupt is, so that the same clean-up runs
    (temporaries removed, outputs left as they were); the command exits with 143."""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line with exit status 2, like every other error."""

    def error(self, message: str) -> None:
        self.exit(EXIT_BAD_INPUT, f"swdask: error: {message} (see '{self.prog} --help')\n")


# -- argument types ------------------------------------------------------------------------


def number(text: str, kind: type = float, *, accept: Callable[[int | float], bool] | None = None,
           wanted: str = "") -> int | float:
    """``text`` read as a number, for an argparse ``type``; the message says what was wanted.

    Parameters
    ----------
    text : str
        The argument as typed.
    kind : {float, int}, default float
        The type of the value; ``int`` takes whole numbers only.
    accept : callable, optional
        True for the values allowed; default None: every value of ``kind``.
    wanted : str, default ""
        What an allowed value is ("a positive number"), for the message when ``accept``
        refuses one.

    Returns
    -------
    int or float

    Raises
    ------
    argparse.ArgumentTypeError
        ``text`` is not a number of ``kind``, or ``accept`` refuses it.

    Examples
    --------
    >>> number("0.5", accept=lambda v: 0 < v <= 1, wanted="in (0, 1]")
    0.5
    >>> number("2", accept=lambda v: 0 < v <= 1, wanted="in (0, 1]")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be in (0, 1], got '2'
    """
    try:
        value = kind(text)
    except ValueError:
        noun = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"must be {noun}, got {text!r}") from None
    if accept is not None and not accept(value):
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
    return value


def whole(text: str) -> int:
    """A whole number (argparse ``type``); see :func:`number`."""
    return number(text, int)


def positive(text: str) -> int:
    """A whole number >= 1 (argparse ``type``); see :func:`number`."""
    return number(text, int, accept=lambda value: value >= 1, wanted="a positive whole number")


def cores() -> int:
    """The cores this process may run on (its CPU affinity), as Numba counts them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform (macOS)
        return os.cpu_count() or 1


def thread_count(text: str) -> int:
    """A thread count from 1 to :func:`cores` (argparse ``type``); see :func:`number`."""
    n = cores()
    return number(text, int, accept=lambda value: 1 <= value <= n,
                  wanted=f"a whole number from 1 to {n} (the cores here)")


def positive_number(text: str) -> float:
    """A finite number > 0 (argparse ``type``); see :func:`number`."""
    return number(text, accept=lambda value: 0 < value < math.inf, wanted="a positive number")


# -- option groups -------------------------------------------------------------------------


def add_scoring(parser: argparse.ArgumentParser, *, mode: bool = True) -> argparse._ArgumentGroup:
    """Add the scoring options (and ``--mode`` unless ``mode=False``).

    Returns
    -------
    argparse._ArgumentGroup
        Their group, to which a command with other modes adds its own ``--mode``.
    """
    group = parser.add_argument_group("scoring (a gap of k residues costs OPEN + k * EXTEND)")
    group.add_argument("--matrix", help="BLOSUM45/50/62/80/90, PAM30/70/250, NUC.4.4, or an "
                       "NCBI-format matrix file (default: BLOSUM62 for protein)")
    group.add_argument("--gap-open", type=whole,
                       help="gap open cost, >= 0 (default 11 protein, 5 DNA)")
    group.add_argument("--gap-extend", type=whole,
                       help="cost per gap residue, >= 1 (default 1 protein, 2 DNA)")
    group.add_argument("--match", type=whole, help="DNA match score (default 2)")
    group.add_argument("--mismatch", type=whole, help="DNA mismatch score (default -3)")
    if mode:
        group.add_argument("--mode", default="local", choices=MODES,
                           help="local (Smith-Waterman, default), global (Needleman-Wunsch), or "
                           "semiglobal (end gaps free)")
    return group


def add_input_options(parser: argparse.ArgumentParser, *, map_unknown: bool = True) -> None:
    """Add ``--alphabet`` (and ``--map-unknown`` unless ``map_unknown=False``)."""
    parser.add_argument("--alphabet", default="auto", choices=ALPHABETS,
                        help="residue alphabet of the input (default: detected)")
    if map_unknown:
        parser.add_argument("--map-unknown", action="store_true",
                            help="read letters outside the alphabet as X (protein) or N (DNA) "
                            "instead of failing")


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--workers`` and ``--scheduler``, in their own group."""
    group = parser.add_argument_group("Dask (default: no Dask, every core of this process)")
    group.add_argument("--workers", type=positive, metavar="N",
                       help="start a local Dask cluster of N workers (one per GPU on a GPU "
                       "machine) and print its dashboard link")
    group.add_argument("--scheduler", metavar="ADDRESS",
                       help="run on a running Dask scheduler (tcp://host:8786, tls://host:8786 "
                       "or a scheduler file); the database must be a store its workers can read")
    add_scheduler_options(group)
    add_threads(parser)


def add_threads(parser: argparse.ArgumentParser) -> None:
    """Add ``--threads``: Numba's thread count for the run (see :func:`cpu_threads`)."""
    parser.add_argument("--threads", type=thread_count, metavar="N",
                        help="threads of the CPU kernels in this process, or in each local Dask "
                        "worker (default: every core, shared among the local workers); "
                        "Numba's NUMBA_NUM_THREADS for the run")


def add_scheduler_options(group: argparse._ActionsContainer) -> None:
    """Add how ``--scheduler`` is reached: ``--scheduler-timeout`` and the TLS files."""
    group.add_argument("--scheduler-timeout", type=positive_number, metavar="SECONDS",
                       help="how long the scheduler has to answer (default 10, or "
                       "swdask.scheduler-timeout in Dask's configuration)")
    group.add_argument("--tls-ca-file", metavar="FILE", help="TLS: the authority that signed the "
                       "scheduler's certificate (default: distributed.comm.tls.* in Dask's "
                       "configuration)")
    group.add_argument("--tls-cert", metavar="FILE", help="TLS: this client's certificate")
    group.add_argument("--tls-key", metavar="FILE",
                       help="TLS: this client's private key (if not in --tls-cert)")


def add_job_options(parser: argparse.ArgumentParser, *,
                    force_help: str = "replace an existing output file") -> None:
    """Add the options that close a job's command: cluster, input, ``--force``, ``--quiet``,
    ``--summary-json``."""
    add_cluster_options(parser)
    add_input_options(parser)
    parser.add_argument("--force", action="store_true", help=force_help)
    add_report_options(parser)


def add_report_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--quiet`` and ``--summary-json`` (:func:`check_summary`, :func:`write_summary`)."""
    parser.add_argument("--quiet", action="store_true", help="no progress and no summary on "
                        "the standard error")
    parser.add_argument("--summary-json", metavar="FILE", help="also write the summary's "
                        "figures (cells, GCUPS, seconds, device, ...) as a JSON object to FILE, or "
                        "- for the standard output where the output does not go there; with "
                        "--quiet too")


# -- what the commands do alike ------------------------------------------------------------

_FLAGS = {"gap_open": "--gap-open", "gap_extend": "--gap-extend",
          "match/mismatch": "--match/--mismatch", "mismatch": "--mismatch", "match": "--match"}


def scoring_from_args(args: argparse.Namespace, alphabet: str | None) -> Scoring:
    """The :class:`swdask.Scoring` of the scoring flags (``alphabet`` picks the defaults).

    Raises
    ------
    ScoringError
        The flags do not make a scoring; the message names the flags.
    """
    from ..errors import ScoringError
    from ..scoring import Scoring

    dna_scores = args.match is not None or args.mismatch is not None
    try:
        return Scoring(args.matrix, gap_open=args.gap_open, gap_extend=args.gap_extend,
                       match=args.match, mismatch=args.mismatch,
                       alphabet=None if (args.matrix or dna_scores) else alphabet)
    except ScoringError as exc:  # name the command-line flags, not the Python parameters
        message = str(exc)
        for name, flag in _FLAGS.items():  # whole words only: "match" is in "mismatch"
            message = re.sub(rf"(?<![\w/-]){re.escape(name)}(?![\w/])", flag, message)
        raise ScoringError(message) from None


def database_alphabet(path: str, alphabet: str) -> str:
    """``alphabet``, or where it is ``"auto"`` the alphabet of the store or file ``path``."""
    from ..sequences.fastx import check_readable, sniff_alphabet
    from ..sequences.store import SequenceStore

    if alphabet != "auto":
        return alphabet
    if os.path.isdir(path):
        return SequenceStore.open(path).alphabet.name
    check_readable(path)
    return sniff_alphabet([path]).name


def file_alphabet(args: argparse.Namespace) -> str | None:
    """The alphabet of the files among ``args.a`` and ``args.b``; None when neither is one."""
    from ..sequences.fastx import sniff_alphabet

    paths = [x for x in (args.a, args.b) if os.path.isfile(x)]
    return sniff_alphabet(paths).name if paths else None


@contextlib.contextmanager
def cpu_threads(args: argparse.Namespace) -> Iterator[None]:
    """Numba's thread count for the run of a command with ``--threads N``.

    ``NUMBA_NUM_THREADS=N`` in the environment, before this process imports Numba (the
    command imports it only when it runs) and for the processes it starts (local Dask
    workers, the kernel build helper): their kernels take N threads.  Where Numba was
    imported already (the command run from Python, as the tests do), this thread's count
    is set instead.  Both are restored at the end.

    Raises
    ------
    ValueError
        ``--threads`` with ``--scheduler``: the workers of a running scheduler were
        started with their own.
    """
    threads = getattr(args, "threads", None)
    if threads is None:
        yield
        return
    if getattr(args, "scheduler", None):
        raise ValueError("--threads: the workers of a running scheduler keep their own thread "
                         "count (set NUMBA_NUM_THREADS where they are started)")
    before = os.environ.get("NUMBA_NUM_THREADS")
    os.environ["NUMBA_NUM_THREADS"] = str(threads)
    numba = sys.modules.get("numba")
    previous = numba.get_num_threads() if numba is not None else None
    try:
        if numba is not None:
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        yield
    finally:
        if before is None:
            os.environ.pop("NUMBA_NUM_THREADS", None)
        else:
            os.environ["NUMBA_NUM_THREADS"] = before
        if previous is not None:
            numba.set_num_threads(previous)


def to_stdout(path: str, outfmt: str = "parquet", *, option: str = "-o",
              instead: str = "give a file name") -> bool:
    """Whether the output ``path`` is ``-``, the standard output, which takes text only.

    Raises
    ------
    ValueError
        ``-`` for Parquet or BAM: one line that says what to give ``instead``.
    """
    if path != STANDARD_STREAM:
        return False
    if outfmt in BINARY_OUTFMTS:
        name = {"parquet": "Parquet", "bam": "BAM"}[outfmt]
        raise ValueError(f"{option} -: {name} does not go to the standard output; {instead}")
    return True


@contextlib.contextmanager
def standard_input(path: str) -> Iterator[str]:
    """``path``; for ``-``, the standard input (FASTA/FASTQ, plain or gzip) copied to a
    temporary file that is removed at the end.  Errors name ``<stdin>``, not that file.

    Raises
    ------
    ValueError
        ``-`` while the standard input is a terminal: nothing was piped in.
    """
    if path != STANDARD_STREAM:
        yield path
        return
    import shutil
    import tempfile

    from ..jobs.base import temporary_folder

    if sys.stdin is None or sys.stdin.isatty():
        raise ValueError("-: the standard input is a terminal; pipe FASTA/FASTQ into it or "
                         "give a file")
    # The temporaries' one mechanism: a copy left by a killed run is reclaimed by the next.
    folder = temporary_folder(Path(tempfile.gettempdir()) / "swdask-stdin")
    copy = os.path.join(folder, "stdin")
    try:
        with open(copy, "wb") as handle:
            shutil.copyfileobj(sys.stdin.buffer, handle)
        try:
            yield copy
        except (ValueError, FileNotFoundError) as exc:
            if copy not in str(exc):
                raise
            raise type(exc)(str(exc).replace(copy, "<stdin>")) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def write_stdout(lines: Iterable[str]) -> None:
    """Write ``lines`` to the standard output; a reader that stops early (``| head``)
    ends the writing quietly, as it ends ``cat``."""
    try:
        sys.stdout.writelines(lines)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the pipe again when it flushes stdout at exit.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stays open until the exit


def to_stderr(line: str) -> None:
    """Print ``line`` to the standard error."""
    print(line, file=sys.stderr)


def progress_wanted(args: argparse.Namespace) -> bool:
    """Whether to show progress (:func:`swdask.jobs.base.progress_bar`: a bar on a terminal,
    a line every ``swdask.progress-interval`` elsewhere): unless ``--quiet``."""
    return not getattr(args, "quiet", False)


def check_summary(args: argparse.Namespace, *, inputs: Iterable[object] = (),
                  outputs: Iterable[os.PathLike | str | None] = (),
                  stdout: bool = False) -> None:
    """Check ``--summary-json`` before any work, as every output is
    (:func:`swdask.jobs.base.check_output`; ``--force`` replaces it too).

    Raises
    ------
    ValueError
        ``--summary-json -`` where the command's output goes to the standard output
        (``stdout``).
    OutputExistsError, OutputError, InputNotFoundError
        As :func:`swdask.jobs.base.check_output`.
    """
    path = args.summary_json
    if path is None:
        return
    if path == STANDARD_STREAM:
        if stdout:
            raise ValueError("--summary-json -: the output goes to the standard output; give "
                             "the summary a file name")
        return
    from ..jobs.base import check_output

    check_output(path, force=args.force, inputs=inputs, outputs=outputs)


def write_summary(args: argparse.Namespace, command: str, figures: dict) -> None:
    """Write ``--summary-json``: the command, swdask's version and ``figures`` (those of the
    summary line) as one JSON object, under a temporary name renamed into place when
    complete, or to the standard output for ``-``."""
    path = args.summary_json
    if path is None:
        return
    import json

    from .. import __version__

    text = json.dumps({"command": command, "version": __version__, **figures}, indent=2,
                      default=lambda value: value.item()) + "\n"  # NumPy's numbers
    if path == STANDARD_STREAM:
        write_stdout([text])
        return
    from ..jobs.base import atomic_path

    with atomic_path(path, force=args.force) as temporary:
        temporary.write_text(text, encoding="utf-8")


def where_ran(client: Client | None = None) -> dict:
    """Where a job ran, for its summary: ``{"threads": N}`` (Numba's threads in this
    process) without a Dask ``client``, else ``{"dask_workers": N}`` (its workers now)."""
    if client is None:
        from ..kernels.cpu.threads import kernel_threads

        return {"threads": kernel_threads()}
    from ..cluster import worker_count

    return {"dask_workers": worker_count(client)}


def where_text(figures: dict) -> str:
    """The summary line's words for :func:`where_ran`'s figures: "2 threads", "1 Dask worker"."""
    if "dask_workers" in figures:
        return _count(figures["dask_workers"], "Dask worker")
    return _count(figures["threads"], "thread")


def command_line(args: argparse.Namespace) -> str | None:
    """The command as typed (for SAM's ``@PG CL``), or None when it is not known."""
    import shlex

    argv = getattr(args, "argv", None)
    return None if argv is None else shlex.join(["swdask", *argv])


def in_process(args: argparse.Namespace) -> bool:
    """True when the command runs without Dask: neither ``--workers`` nor ``--scheduler``
    (a command without ``--workers`` has only the second)."""
    return getattr(args, "workers", None) is None and args.scheduler is None


def start_gpu_early(args: argparse.Namespace, *, auto: bool, one_gpu: bool) -> None:
    """Begin the GPU's first use on a thread (:func:`swdask.backend.start_early`: the CUDA
    driver and context, 0.47-0.48 s on a 2 x H200 host) so that it overlaps the imports
    and the reading of the input, for a run in this process on ``--device gpu`` or
    ``both``, and on ``auto`` where the job takes any GPU it sees (``auto``; a search's
    ``auto`` weighs the work first, and a probe for nothing would cost it 0.3 s).  Nothing
    where no CUDA driver library can be loaded.

    ``one_gpu``: the run uses device 0 alone (a search or significance in this process,
    not the long alignment, which takes every GPU).  Then, for the installed command
    (``args.owns_process``) where ``CUDA_VISIBLE_DEVICES`` is not set, the driver is shown
    that GPU alone (``CUDA_VISIBLE_DEVICES=0``, the same device 0): ``cuInit`` took
    0.31-0.44 s with both GPUs of a 2 x H200 host visible and 0.13 s with one (a bare
    process, four runs each, 2026-11-28), time a command spent before its first kernel
    for a GPU it never used.  The setting reaches only the command's process and what it
    starts; ``swdask.cli.main(argv)`` called from Python changes no environment."""
    if not in_process(args) or args.device == "cpu" or (args.device == "auto" and not auto):
        return
    from ..kernels.cuda import driver  # ctypes only: the driver starts before NumPy loads

    if (one_gpu and getattr(args, "owns_process", False)
            and "CUDA_VISIBLE_DEVICES" not in os.environ and not driver.simulated()):
        os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    driver.start_early()
    from ..backend import cuda_driver_loadable, start_early

    if cuda_driver_loadable():
        start_early()


def job_session(args: argparse.Namespace) -> AbstractContextManager:
    """The Dask session of ``--workers`` / ``--scheduler`` for a job on ``args.device``;
    it announces the cluster on the standard error unless ``--quiet``.  Without either
    flag the session is None and Dask's distributed is not imported (it took 0.30 s of
    the start of an all-pairs run on a 2-core machine)."""
    if in_process(args):
        scheduler_access(args)  # refuses the flags of --scheduler without it
        return contextlib.nullcontext(None)
    from ..cluster import session

    return session(args.workers, scheduler=args.scheduler, device=args.device,
                   announce=None if args.quiet else to_stderr, **scheduler_access(args))


def scheduler_access(args: argparse.Namespace) -> dict:
    """``security`` and ``timeout`` of :func:`swdask.cluster.session` from the flags of
    :func:`add_scheduler_options` (which apply to ``--scheduler`` only)."""
    flags = {"--scheduler-timeout": args.scheduler_timeout, "--tls-ca-file": args.tls_ca_file,
             "--tls-cert": args.tls_cert, "--tls-key": args.tls_key}
    if args.scheduler is None:
        given = [flag for flag, value in flags.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: options of --scheduler")
        return {}
    from ..cluster import tls_security

    return {"security": tls_security(args.tls_ca_file, args.tls_cert, args.tls_key),
            "timeout": args.scheduler_timeout}


def search_here(queries: SequencesLike, database: str | os.PathLike | SequenceStore,
                **options: Any) -> pd.DataFrame | tuple[pd.DataFrame, SearchStats]:
    """A search without ``--workers`` or ``--scheduler``: the in-process engine
    (:func:`swdask.search_in_process`, the same hits as the Dask graph), whose result it
    returns (the hits, and their statistics with ``return_stats=True``).  Its kernels take
    every core already, so Dask's threads would add only their start-up: importing Dask
    takes about a second on a small machine, longer than a whole small search."""
    if options.get("device", "auto") != "gpu":
        from ..kernels.cpu import prebuild

        # Before the heavy imports: on a first run the helper has a head start.
        prebuild.start(prebuild.SEARCH)
    from ..jobs.search import search_in_process

    return search_in_process(queries, database, **options)


def search_figures(stats: SearchStats, *, dask_workers: int | None = None) -> dict:
    """The figures of a search's summary line (:func:`search_summary`) and JSON summary.

    Parameters
    ----------
    stats : SearchStats
    dask_workers : int, optional
        The workers of the Dask cluster that ran the search; default None: it ran in
        this process (``stats.workers`` is then Numba's thread count).
    """
    if dask_workers is None:
        where = {"threads": stats.workers}
    else:  # stats.workers: those that ran score tasks (one per database partition at most)
        where = {"dask_workers": dask_workers, "score_task_workers": stats.workers}
    return {"queries": stats.n_queries, "strands": stats.strands, "subjects": stats.n_subjects,
            "cells": stats.cells, "score_seconds": stats.score_seconds,
            "kernel_gcups": stats.kernel_gcups, "traceback_seconds": stats.traceback_seconds,
            "seconds": stats.total_seconds, "gcups": stats.gcups, "device": stats.device,
            "device_reason": stats.device_reason, **where, "hits": stats.n_hits,
            "max_hits": stats.max_hits, "queries_at_max_hits": stats.queries_at_max_hits}


def search_summary(stats: SearchStats, *, dask_workers: int | None = None,
                   cap: bool = True) -> str:
    """The one-line summary of a search's :class:`swdask.SearchStats`, from
    :func:`search_figures` (same parameters).  ``cap``: say how many queries reached
    ``--max-hits`` (the demo has no such option)."""
    f = search_figures(stats, dask_workers=dask_workers)
    where = where_text(f)
    if "score_task_workers" in f and f["score_task_workers"] != f["dask_workers"]:
        where += f" (score tasks on {f['score_task_workers']})"
    strands = " (both strands)" if f["strands"] == 2 else ""
    reason = f" ({f['device_reason']})" if f["device_reason"] else ""
    line = (f"{f['queries']:,} queries{strands} x {f['subjects']:,} subjects, "
            f"{f['cells']:,} cells: score pass {f['score_seconds']:.2f} s "
            f"({f['kernel_gcups']:.2f} GCUPS), traceback {f['traceback_seconds']:.2f} s, "
            f"total {f['seconds']:.2f} s ({f['gcups']:.2f} GCUPS) on {f['device']}{reason}, "
            f"{where}")
    if cap and f["queries_at_max_hits"]:
        line += (f"; {_count(f['queries_at_max_hits'], 'query', 'queries')} reached "
                 f"--max-hits {f['max_hits']}: raise it to see more")
    return line


def _count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
