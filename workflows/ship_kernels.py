"""Build every CUDA kernel the jobs launch on this GPU and pack them into the package, so
that any machine with a GPU of this compute capability starts without compiling.

Run it on a machine with the GPU to ship for, after the last change to a kernel source::

    python workflows/ship_kernels.py            # writes kernels/cuda/shipped/sm_<cc>.zip

It builds into an empty scratch cache (``swdask warmup``: every generated shape, then a small
run of each job for the hand-written kernels), then packs what was built with
:func:`swdask.kernels.cuda.compile.pack_shipped`.  An archive is keyed by the sources of
``kernels/`` except its host-only modules (``HOST_MODULES``): after a change to a kernel,
a device function or a constant it reads, the archive is ignored (kernels compile as before)
until this is run again; the GPU lane's ``test_the_shipped_kernels_are_current`` fails
meanwhile.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="where to write sm_<cc>.zip (default: the package's "
                             "kernels/cuda/shipped)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="build processes at once (default: the CPU cores)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="swdask-ship-") as scratch:
        # Before swdask is imported: everything is built, nothing taken from an old archive.
        os.environ["SWDASK_CACHE_DIR"] = scratch
        os.environ["SWDASK_SHIPPED_KERNELS"] = "0"
        from swdask.kernels.cuda import compile as room
        from swdask.kernels.cuda import driver
        from swdask.warmup import warmup

        start = time.perf_counter()
        report = warmup("gpu", jobs=args.jobs, progress=print)
        print(report.summary())
        cc = driver.compute_capability()
        out = (args.out_dir or room.SHIPPED_DIR) / f"sm_{cc[0]}{cc[1]}.zip"
        manifest = room.pack_shipped(room.kernel_dir(), out, cc)
        count = sum(len(members) for members in manifest["entries"].values())
        print(f"wrote {out}: {count} compiled specialisations of {len(manifest['entries'])} "
              f"kernels for compute capability {cc[0]}.{cc[1]}, "
              f"{out.stat().st_size / 2**20:.1f} MiB, in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
