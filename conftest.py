"""Root pytest configuration: the two test lanes of docs/design.md.

``python -m pytest`` (CI, laptops) runs everything on the CPU, the CUDA kernels in
Numba's CUDA simulator, in up to four processes (pytest-xdist, ``-n auto`` in
``pyproject.toml``); ``python -m pytest -m gpu`` runs the GPU lane on a real card, in one
process.
Numba reads ``NUMBA_ENABLE_CUDASIM`` once, when it is first imported, so the choice is
made here, before any test module imports it.  A value set by the caller is kept.
"""
import os
import sys


def _gpu_lane(argv) -> bool:
    for k, arg in enumerate(argv):
        expression = None
        if arg == "-m" and k + 1 < len(argv):
            expression = argv[k + 1]
        elif arg.startswith("-m") and len(arg) > 2:
            expression = arg[2:]
        if expression and "gpu" in expression and "not gpu" not in expression:
            return True
    return False


def pytest_xdist_auto_num_workers(config):
    """Processes for ``-n auto``: one per core, at most four, on the CI lane (its tests
    are CPU-bound: Numba compiles and the simulator); none apart on the GPU lane, whose
    tests share one card (``-n N`` asks for workers there, which the environment set
    below keeps off the simulator)."""
    if _gpu_lane(sys.argv):
        return 0
    return max(1, min(4, os.cpu_count() or 1))


# The GPU lane says so in the environment too: pytest-xdist's workers (``-m gpu -n 4``)
# inherit it but not the arguments, and without it they would run the GPU tests in the
# simulator, where the ``device`` fixture fails every one of them.
if "NUMBA_ENABLE_CUDASIM" not in os.environ:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if _gpu_lane(sys.argv) else "1"


# Compiled kernels and rendered kernel text go to a cache of this test session, not the
# user's (the kernel cache's own tests point it elsewhere per test).
if "SWDASK_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["SWDASK_CACHE_DIR"] = tempfile.mkdtemp(prefix="swdask-test-cache-")

# Progress lines on a standard error that is not a terminal come every 10 s: the suite's
# commands print none (their standard error is compared line by line), except where a test
# sets swdask.progress-interval itself (tests/cli/test_progress.py).
os.environ.setdefault("DASK_SWDASK__PROGRESS_INTERVAL", "1h")
if "dask.config" in sys.modules:  # loaded already (a plugin): read the environment again
    import dask.config

    dask.config.refresh()
