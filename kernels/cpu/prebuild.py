"""Compile CPU kernels in a second process while this one works: faster first runs.

Numba compiles one function at a time in a process (one global lock), and with an empty
cache a first search spends most of its time compiling: the score kernel, then the
traceback kernels, one after the other.  :func:`start` hands the kernels a job needs
*later* to a helper process (``python -m swdask.kernels.cpu.prebuild NAME ...``), which
compiles them, in order, into Numba's on-disk cache (``cache=True``) on another core
while this process reads its input and compiles the kernel it needs first.  The helper
names each kernel on its standard output once it is in the cache; before its first call
of such a kernel this process waits for that line (:func:`wait`, called by the kernels'
wrappers) and then loads the kernel from the cache instead of compiling it again.

Only kernels missing from the cache are handed over, so a warm run starts no helper.
The helper compiles tiny calls whose argument types are those of every real call (the
wrappers pass read-only inputs and int64 scalars, see :func:`read_only`): each module
lists them in ``_prebuild_examples()``.  Should the helper fail or be slow, the kernel is
compiled here as it would have been without it; results never depend on it.
``SWDASK_PREBUILD=0`` in the environment starts no helper (everything compiles here).

Measured on 2 cores (AMD EPYC, Numba 0.68), a first ``swdask demo`` compiles the 8-bit
score kernel in this process (about 2 s after Numba's own 0.7 s of set-up) while the
helper compiles the traceback kernel (about 1.9 s after its 1.3 s of start-up and
set-up).
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    import numpy.typing as npt
    from numba.core.dispatcher import Dispatcher

#: The kernels that can be prebuilt: name -> module that lists its example call.
MODULES = {"local8": "score", "traceback": "traceback"}
#: What a CPU search hands to the helper: the traceback kernel (it rescores saturated
#: pairs, then aligns the hits).  The search compiles its first kernel, the score kernel,
#: itself.
SEARCH = ("traceback",)
#: The longest wait for a helper before compiling here instead, in seconds.
WAIT_SECONDS = 120.0

_helpers: dict[str, _Helper] = {}  # kernel name -> the helper building it
_lock = threading.Lock()


class _Helper:
    """A helper process and the kernels it has reported done."""

    def __init__(self, names):
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, *names], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=os.environ.copy(),
            text=True)
        self.done: set[str] = set()
        self.lock = threading.Lock()
        timer = threading.Timer(WAIT_SECONDS, self.process.kill)
        timer.daemon = True  # a stuck helper must not outlive the wait it was for
        timer.start()
        self.timer = timer

    def wait(self, name: str) -> None:
        """Read the helper's reports until ``name`` is done or the helper has exited."""
        with self.lock:
            while name not in self.done:
                line = self.process.stdout.readline()
                if not line:  # exited (or killed): whatever is missing compiles here
                    self.process.wait()
                    self.timer.cancel()
                    self.done.add(name)
                    break
                self.done.add(line.strip())

    def close(self) -> None:
        """Close the helper's pipe and reap it (every kernel it was given is in the cache or
        was given up): an open pipe would be left to the garbage collector."""
        self.timer.cancel()
        self.process.stdout.close()
        try:
            self.process.wait(timeout=WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def read_only(values: npt.ArrayLike, dtype: npt.DTypeLike = np.uint8) -> np.ndarray:
    """``values`` as a read-only contiguous array of ``dtype`` (a view where possible).

    Numba compiles a kernel once per argument type, and read-only (Arrow) arrays are
    another type than writable ones: handing every kernel read-only arrays keeps one
    compilation per kernel whichever caller comes first (and lets the helper's example
    call build the one every later call uses).

    Parameters
    ----------
    values : array_like
    dtype : numpy.dtype, default numpy.uint8

    Returns
    -------
    numpy.ndarray
    """
    view = np.ascontiguousarray(values, dtype=dtype).view()
    view.flags.writeable = False
    return view


def _examples(names):
    """``{name: (kernel, arguments)}`` of the example calls of ``names``, in order."""
    import importlib

    found = {}
    for module in dict.fromkeys(MODULES[name] for name in names):
        found.update(importlib.import_module(f"{__package__}.{module}")._prebuild_examples())
    return {name: found[name] for name in names}


def cached(kernel: Dispatcher, arguments: Sequence[object]) -> bool:
    """Whether Numba's on-disk cache holds ``kernel`` for the types of ``arguments``.

    Reads the cache's index through Numba internals (``Dispatcher._cache``); when they
    are not as expected the answer is True, so that nothing is started.
    """
    try:
        from numba import typeof

        signature = tuple(typeof(a) for a in arguments)
        index = kernel._cache._cache_file._load_index()
        return any(key[0] == signature for key in index)
    except Exception:  # noqa: BLE001 - another Numba version: do as if there were no helper
        return True


def start(names: Sequence[str]) -> list[str]:
    """Start a helper process that compiles the kernels ``names`` missing from the cache.

    Parameters
    ----------
    names : sequence of str
        Keys of :data:`MODULES`: the kernels a job calls after its first one, in the
        order it calls them.

    Returns
    -------
    list of str
        The kernels handed to the helper (empty when all are cached or already handed
        to a helper, or when no process could be started).
    """
    if os.environ.get("SWDASK_PREBUILD") == "0":
        return []
    with _lock:
        wanted = [name for name in dict.fromkeys(names) if name not in _helpers]
        if not wanted:
            return []
        missing = [name for name, example in _examples(wanted).items()
                   if not cached(*example)]
        if not missing:
            return []
        try:
            helper = _Helper(missing)
        except OSError:  # no helper: each kernel compiles here on first use
            return []
        _helpers.update((name, helper) for name in missing)
        logger.info("compiling %d CPU kernels missing from Numba's cache in a helper process "
                    "(a first run on this machine): %s", len(missing), ", ".join(missing))
        return missing


def wait(name: str) -> None:
    """Wait until the helper building kernel ``name`` (if any) has it in the cache.

    Cheap when no helper builds it (the usual case): one dictionary look-up.
    """
    helper = _helpers.get(name)
    if helper is not None:
        helper.wait(name)
        with _lock:
            _helpers.pop(name, None)
            last = all(other is not helper for other in _helpers.values())
        if last:
            helper.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Compile the kernels named in ``argv`` into Numba's cache, in order, printing each
    name once it is there (the helper process)."""
    names = sys.argv[1:] if argv is None else list(argv)
    unknown = sorted(set(names) - set(MODULES))
    if unknown:
        print(f"unknown kernels: {', '.join(unknown)}", file=sys.stderr)
        return 2
    for name, (kernel, arguments) in _examples(names).items():
        kernel(*arguments)
        print(name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
