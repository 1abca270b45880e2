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
import os
import signal
import sys

from .. import __version__
from ..errors import SwdaskError
from . import align, align_long, allpairs, demo, ingest, search, significance, warmup
from .common import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED, Parser, Terminated

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
    previous = _on_sigterm(_terminate)
    try:
        status = _main(argv)
    finally:
        if argv is not None:  # called from Python: leave SIGTERM as it was
            _on_sigterm(previous)
    if argv is None:
        _exit(status)
    return status


def _terminate(signum, frame):
    raise Terminated


def _on_sigterm(handler):
    """Set the SIGTERM handler; returns the one before (None where it cannot be set: not
    the main thread)."""
    if handler is None:
        return None
    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return None


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


def _main(argv) -> int:
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:  # usage errors, --help, --version
            return exit_.code if isinstance(exit_.code, int) else EXIT_BAD_INPUT
        args.argv = [str(a) for a in (sys.argv[1:] if argv is None else argv)]  # SAM's @PG CL
        COMMANDS[args.command](args)
    except (SwdaskError, ValueError, FileNotFoundError, FileExistsError) as exc:
        print(f"swdask: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        # Notes say what was written in full before the signal, or what was kept.
        what = "; ".join(getattr(exc, "__notes__", ())) or "no output written"
        terminated = isinstance(exc, Terminated)
        print(f"swdask: {'terminated' if terminated else 'interrupted'}; {what}",
              file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    return 0
