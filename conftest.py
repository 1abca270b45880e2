"""Root pytest configuration: the two test lanes of docs/design.md.

``python -m pytest`` (CI, laptops) runs everything on the CPU, the CUDA kernels in
Numba's CUDA simulator; ``python -m pytest -m gpu`` runs the GPU lane on a real card.
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


if "NUMBA_ENABLE_CUDASIM" not in os.environ and not _gpu_lane(sys.argv):
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"


# Compiled kernels and rendered kernel text go to a cache of this test session, not the
# user's (the kernel cache's own tests point it elsewhere per test).
if "SWDASK_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["SWDASK_CACHE_DIR"] = tempfile.mkdtemp(prefix="swdask-test-cache-")
