"""The ``swdask`` command line: ingest, search, align, demo, warmup, allpairs, significance,
align-long.

Every error on bad input prints one line (``swdask: error: ...``) naming the file,
record and position where there is one, exits with status 2, and leaves no partial
output behind.

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
import sys

from .. import __version__
from ..errors import SwdaskError
from . import align, align_long, allpairs, demo, ingest, search, significance, warmup
from .common import EXIT_BAD_INPUT, Parser, cpu_threads

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
        0 on success, 2 on a usage error or bad input, 130 when interrupted.

    Notes
    -----
    As the installed command (``argv=None``) it ends the process itself once the command
    is done, output flushed and exit handlers run: Python's own shutdown then frees the
    modules of pandas, pyarrow and Numba one by one, which took 0.4 to 0.7 s of every
    run on a 2-core machine.
    """
    status = _main(argv)
    if argv is None:
        _exit(status)
    return status


def _exit(status: int) -> None:
    """End the process now with ``status``: flush the standard streams, run the
    ``atexit`` handlers (which remove temporary stores), and skip the interpreter's
    clean-up of its modules, which has nothing left to write."""
    import atexit

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing to keep
            pass
    atexit._run_exitfuncs()
    os._exit(status)


def _main(argv) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # usage errors, --help, --version
        return exit_.code if isinstance(exit_.code, int) else EXIT_BAD_INPUT
    args.argv = [str(a) for a in (sys.argv[1:] if argv is None else argv)]  # for SAM's @PG CL
    try:
        with cpu_threads(args):
            COMMANDS[args.command](args)
    except (SwdaskError, ValueError, FileNotFoundError, FileExistsError) as exc:
        print(f"swdask: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("swdask: interrupted; no output written", file=sys.stderr)
        return 130
    return 0
