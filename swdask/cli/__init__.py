"""The ``swdask`` command line: ingest, search, align, demo, warmup, allpairs, significance,
align-long.

Every error on bad input prints one line (``swdask: error: ...``) naming the file,
record and position where there is one, exits with status 2, and leaves no partial
output behind.  SIGINT (Ctrl-C) and SIGTERM stop a command the same way, with one line
and the status 130 or 143: temporaries removed, existing outputs as they were (or, where
the signal came while they were put in place, complete).

One module per subcommand, each with ``NAME``, ``HELP`` (its line in ``swdask --help``),
``DESCRIPTION`` (prose that argparse reflows), ``add_arguments(parser)`` and ``run(args)``;
what several share (argument types, option groups, the scoring from the flags, summaries)
is in :mod:`swdask.cli.common`, and every choice comes from :mod:`swdask.options`.  The
modules import their libraries inside ``run``, so that ``--help`` and a usage error load
neither pandas, Dask nor Numba.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys

from .. import __version__
from ..errors import SwdaskError
from ..options import LOG_LEVELS
from . import align, align_long, allpairs, demo, ingest, search, significance, warmup
from .common import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Parser,
    Terminated,
    cpu_threads,
)

__all__ = ["COMMANDS", "EXIT_BAD_INPUT", "build_parser", "main"]

#: The subcommands, in the order ``--help`` lists them.
SUBCOMMANDS = (ingest, search, align, demo, warmup, allpairs, significance, align_long)
#: The function that runs each subcommand, by name.
COMMANDS = {module.NAME: module.run for module in SUBCOMMANDS}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``swdask`` command."""
    parser = Parser(
        prog="swdask",
        description="Exact Smith-Waterman / Needleman-Wunsch alignment, fast on CPUs "
        "and NVIDIA GPUs, scaled with Dask.")
    parser.add_argument("--version", action="version", version=f"swdask {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log what swdask does on the standard error: -v for INFO, -vv for "
                        "DEBUG (loggers swdask.*)")
    parser.add_argument("--log-level", choices=LOG_LEVELS, type=str.upper, metavar="LEVEL",
                        help=f"the level of swdask's log: {', '.join(LOG_LEVELS)} (default "
                        "WARNING, or what -v says)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                       parser_class=Parser)
    for module in SUBCOMMANDS:
        module.add_arguments(subparsers.add_parser(module.NAME, help=module.HELP,
                                                   description=module.DESCRIPTION))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``swdask`` command; returns the exit status.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after the command name; default None: ``sys.argv[1:]``, as the
        installed command.

    Returns
    -------
    int
        0 on success, 2 on a usage error or bad input, 130 when interrupted (SIGINT,
        Ctrl-C), 143 when terminated (SIGTERM).

    Notes
    -----
    As the installed command (``argv=None``) it ends the process itself once the command
    is done, output flushed and exit handlers run: Python's own shutdown then frees the
    modules of pandas, pyarrow and Numba one by one, which took 0.4 to 0.7 s of every
    run on a 2-core machine.
    """
    if argv is None:
        _skip_numba_blas_probe()
    stops = _Stops()
    stops.install()
    try:
        status = _main(argv, stops)
    finally:
        stops.done = True
        if argv is not None:  # called from Python: signals and logging as they were
            stops.restore()
    if argv is None:
        _exit(status)
    return status


class _NumbaBlasProbe:
    """An import hook that refuses ``scipy.linalg`` to one caller alone: the probe Numba
    runs when its CPU target first loads (``numba.np.arraymath._check_blas``), which
    imports SciPy's linear algebra, 0.1-0.27 s of every run on 2 cores where SciPy is
    installed (profiled, 2026-11-27), for no kernel of swdask's.

    The probe's answer only picks how one rarely used ``np.inner``-like helper is built
    (a loop instead of BLAS); ``np.dot`` and ``np.linalg`` in compiled code import SciPy
    themselves when they compile, and any other import of SciPy goes through.
    """

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001 - importlib's protocol
        if name == "scipy.linalg" or name.startswith("scipy.linalg."):
            frame = sys._getframe(1)
            while frame is not None:
                code = frame.f_code
                if code.co_name == "_check_blas" and code.co_filename.endswith(
                        os.path.join("numba", "np", "arraymath.py")):
                    raise ModuleNotFoundError(f"{name}: not for Numba's start-up probe")
                frame = frame.f_back
        return None


def _skip_numba_blas_probe() -> None:
    """Install :class:`_NumbaBlasProbe`, in the ``swdask`` command's own process only."""
    if "numba.np.arraymath" not in sys.modules:
        sys.meta_path.insert(0, _NumbaBlasProbe())


class _Stops:
    """SIGINT (Ctrl-C) and SIGTERM while a command runs.

    Each raises KeyboardInterrupt (:class:`Terminated` for SIGTERM), so that every clean-up
    runs, and silences logging: what Dask says while its cluster shuts down after a stop (a
    gather's "Task exception was never retrieved", workers "losing" data) is noise beside
    the command's one line.  Once the command is over (``done``) a signal changes nothing:
    its outputs are complete.  A stop raised where Python cannot let it out (a weakref
    callback, a ``__del__``: Python prints "Exception ignored" and goes on) is signalled
    again, to be raised in the code that runs next; once a stopped command is over, what
    its cut-short work fails to clean up is not reported.
    """

    def __init__(self):
        self.done = False
        self.number = None  # the signal of the last stop
        self.previous = {}
        self.hook = sys.unraisablehook

    def install(self) -> None:
        try:
            self.previous = {number: signal.signal(number, self.stop)
                             for number in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread: Python's own handling
            return
        self.hook, sys.unraisablehook = sys.unraisablehook, self.unraisable

    def restore(self) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)
        sys.unraisablehook = self.hook
        logging.disable(logging.NOTSET)

    def stop(self, signum, frame) -> None:
        if self.done:
            return
        self.number = signum
        logging.disable(logging.CRITICAL)
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    def unraisable(self, unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and self.number is not None:
            if not self.done:
                signal.raise_signal(self.number)
            return
        if self.done and self.number is not None:
            # After a stop, what the stopped work left half made (an llvmlite object whose
            # __init__ the stop cut short) fails in its __del__: noise after the one line.
            return
        self.hook(unraisable)


#: The format of swdask's log lines on the standard error.
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"


@contextlib.contextmanager
def logged(args: argparse.Namespace):
    """swdask's loggers (``swdask.*``) to the standard error at the level of ``--log-level``
    or ``-v`` (INFO; ``-vv`` DEBUG; default WARNING) while a command runs, as they were
    afterwards.  Other libraries' loggers (Dask's) are left as they are configured; a
    command's error is its one line whatever the level."""
    level = args.log_level or ("WARNING", "INFO", "DEBUG")[min(args.verbose, 2)]
    logger = logging.getLogger("swdask")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    before = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False  # once, here: not again through a handler of the root logger
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before[0])
        logger.propagate = before[1]


def _state(path) -> tuple | None:
    """What is at ``path`` now (a new output is a new file or folder: another inode)."""
    try:
        info = os.lstat(path)
    except (OSError, TypeError, ValueError):
        return None
    return info.st_dev, info.st_ino, info.st_mtime_ns


def _exit(status: int) -> None:
    """End the process now with ``status``: flush the standard streams, run the
    ``atexit`` handlers (which remove temporary stores), and skip the interpreter's
    clean-up of its modules, which has nothing left to write."""
    import atexit

    for number in (signal.SIGINT, signal.SIGTERM):  # the status is decided: let it out
        signal.signal(number, signal.SIG_IGN)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing to keep
            pass
    atexit._run_exitfuncs()
    os._exit(status)


def _main(argv, stops: _Stops) -> int:
    outputs = {}
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:  # usage errors, --help, --version
            return exit_.code if isinstance(exit_.code, int) else EXIT_BAD_INPUT
        args.argv = [str(a) for a in (sys.argv[1:] if argv is None else argv)]  # SAM's @PG CL
        # The installed command owns its process (its environment, its exit); main(argv)
        # called from Python leaves the caller's as they are.
        args.owns_process = argv is None
        outputs = {path: _state(path) for path in (getattr(args, "output", None),
                                                   getattr(args, "sam", None)) if path}
        with logged(args), cpu_threads(args):
            COMMANDS[args.command](args)
        stops.done = True
    except (SwdaskError, ValueError, FileNotFoundError, FileExistsError) as exc:
        stops.done = True
        print(f"swdask: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        stops.done = True
        # What was written in full before the stop, or kept: the notes of the writers,
        # else the outputs that changed (each is renamed into place whole).
        written = [path for path, state in outputs.items() if _state(path) != state]
        what = ("; ".join(getattr(exc, "__notes__", ()))
                or (f"wrote {', '.join(written)} in full" if written else "no output written"))
        terminated = isinstance(exc, Terminated)
        print(f"swdask: {'terminated' if terminated else 'interrupted'}; {what}",
              file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    return 0
