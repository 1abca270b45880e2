"""How many threads a CPU kernel call uses, told without importing Numba where it is not
imported yet (a GPU search never needs Numba's CPU side before its first kernel)."""
from __future__ import annotations

import os
import sys


def kernel_threads() -> int:
    """Threads of a score kernel call: Numba's thread count (``numba.set_num_threads``).

    Read from the configuration until Numba's threading layer has started: starting it
    only to ask costs a few tens of milliseconds at start-up, and nothing can have
    changed the count before it starts.  Before Numba is imported, its default is worked
    out as Numba does: ``NUMBA_NUM_THREADS``, else the CPUs this process may run on.
    """
    if "numba" not in sys.modules:
        configured = os.environ.get("NUMBA_NUM_THREADS")
        if configured:
            return int(configured)
        affinity = getattr(os, "sched_getaffinity", None)
        return max(1, len(affinity(0)) if affinity else os.cpu_count() or 1)
    import numba
    from numba.np.ufunc import parallel

    if not getattr(parallel, "_is_initialized", True):
        return numba.config.NUMBA_NUM_THREADS
    return numba.get_num_threads()
