"""Compile CPU kernels in a second process while this one works: faster first runs.

Numba compiles one function at a time in a process (one global lock), and with an empty
cache a first search spends most of its time compiling: the score kernel, then the
traceback kernels, one after the other.  :func:`start` hands the kernels a job needs
*later* to a helper process (``python -m swdask.kernels.cpu.prebuild NAME ...``), which
compiles them into Numba's on-disk cache (``cache=True``) on another core while this
process reads its input and compiles the kernel it needs first.  Before its first call of
such a kernel, this process waits for the helper (:func:`wait`, called by the kernels'
wrappers) and then loads the kernel from the cache instead of compiling it again.

Only kernels missing from the cache are handed over, so a warm run starts no helper.
The helper compiles tiny calls whose argument types are those of every real call (the
wrappers pass read-only inputs and int64 scalars, see ``traceback._frozen``): each module
lists them in ``_prebuild_examples()``.  Should the helper fail or be slow, the kernel is
compiled here as it would have been without it; results never depend on it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading

#: The kernels that can be prebuilt: name -> module that lists its example call.
MODULES = {"local8": "score", "traceback": "traceback", "summarize": "traceback"}
#: What a CPU search hands over: it compiles its score kernel itself (it needs it first).
SEARCH = ("traceback", "summarize")
#: The longest wait for a helper before compiling here instead, in seconds.
WAIT_SECONDS = 120.0

_pending: dict[str, subprocess.Popen] = {}
_lock = threading.Lock()


def _examples(names):
    """``{name: (kernel, arguments)}`` of the example calls of ``names``."""
    import importlib

    found = {}
    for module in sorted({MODULES[name] for name in names}):
        examples = importlib.import_module(f"{__package__}.{module}")._prebuild_examples()
        found.update((name, examples[name]) for name in names if name in examples)
    return found


def cached(kernel, arguments) -> bool:
    """Whether Numba's on-disk cache holds ``kernel`` for the types of ``arguments``.

    Reads the cache's index through Numba internals (``Dispatcher._cache``); when they
    are not as expected the answer is True, so that nothing is started.
    """
    try:
        from numba import typeof

        signature = tuple(typeof(a) for a in arguments)
        index = kernel._cache._cache_file._load_index()
        return any(key[0] == signature for key in index)
    except Exception:  # another Numba version: do as if there were no helper
        return True


def start(names) -> list:
    """Start a helper process that compiles the kernels ``names`` missing from the cache.

    Parameters
    ----------
    names : iterable of str
        Keys of :data:`MODULES`, the kernels a job will call after its first one.

    Returns
    -------
    list of str
        The kernels handed to the helper (empty when all are cached, or already being
        built).
    """
    with _lock:
        wanted = [name for name in dict.fromkeys(names) if name not in _pending]
        if not wanted:
            return []
        missing = [name for name, (kernel, arguments) in _examples(wanted).items()
                   if not cached(kernel, arguments)]
        if not missing:
            return []
        try:
            helper = subprocess.Popen(
                [sys.executable, "-m", __name__, *missing], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
        except OSError:  # no helper: each kernel compiles here on first use
            return []
        for name in missing:
            _pending[name] = helper
        return missing


def wait(name: str) -> None:
    """Wait until the helper building kernel ``name`` (if any) has finished.

    Cheap when no helper builds it (the usual case): one dictionary look-up.
    """
    helper = _pending.get(name)
    if helper is None:
        return
    try:
        helper.wait(timeout=WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        pass  # compile here; the helper's result lands in the cache for next time
    with _lock:
        for key in [key for key, value in _pending.items() if value is helper]:
            del _pending[key]


def main(argv=None) -> int:
    """Compile the kernels named in ``argv`` into Numba's cache (the helper process)."""
    names = sys.argv[1:] if argv is None else list(argv)
    unknown = sorted(set(names) - set(MODULES))
    if unknown:
        print(f"unknown kernels: {', '.join(unknown)}", file=sys.stderr)
        return 2
    for kernel, arguments in _examples(names).values():
        kernel(*arguments)
    return 0


if __name__ == "__main__":
    sys.exit(main())
