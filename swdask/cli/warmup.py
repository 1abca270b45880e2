"""``swdask warmup``: build every kernel now, so that later runs load them."""
from __future__ import annotations

import argparse
import time

from ..options import DEVICES
from .common import positive

NAME = "warmup"
HELP = "build every kernel now, so that later runs start without compiling"
DESCRIPTION = """Compile every CUDA kernel shape the jobs can launch (in parallel processes) and
run each job once on the bundled data, so that later processes on this machine load the compiled
kernels instead of compiling them. The kernels are kept in SWDASK_CACHE_DIR (default: the user's
cache folder)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``swdask warmup`` to its ``parser``."""
    parser.add_argument("--device", choices=DEVICES, default="auto",
                        help="the kernels to build (default auto: the GPU's when one is visible)")
    parser.add_argument("--jobs", type=positive, default=None,
                        help="processes compiling at once (default: the CPU cores)")


def run(args: argparse.Namespace) -> None:
    """Build the kernels of ``args.device`` and print what was built."""
    from ..warmup import warmup

    started = time.perf_counter()
    report = warmup(args.device, jobs=args.jobs, progress=print)
    print(f"{report.summary()}; {time.perf_counter() - started:.1f} s in all")
