"""What every job shares: the job object, typed task statistics, temporary stores,
progress bars and atomic writes.

A job (search, all-pairs, significance, long alignment) is planned once where it is
called: its arguments checked, its inputs opened, its device decided
(:func:`swdask.backend.job_device`).  The plan is a :class:`Job`: small, immutable and
picklable, shipped once to every worker.  Each task returns its data and, beside it, a
:class:`TaskStats` record of what it did; the job adds the records up (``a + b``, field
by field) into the statistics it reports.  Nothing travels in ``DataFrame.attrs``, which
pandas does not promise to keep through its operations.

Outputs are checked before any work (:func:`check_output`), written under a temporary
name beside the destination and renamed into place when complete (:func:`atomic_path`,
:func:`atomic_paths`, :func:`atomic_dir`), so a failed or interrupted run leaves no
partial output; they are created with the user's umask.  The guarantees and how they
are made: ``docs/reliability.md``.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import importlib
import logging
import math
import operator
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .. import backend
from ..errors import InputNotFoundError, OutputError, OutputExistsError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from typing import TextIO

    import dask.dataframe as dd
    from dask.delayed import Delayed
    from tqdm import tqdm

logger = logging.getLogger(__name__)

__all__ = ["FILE", "Job", "OutputKind", "TaskStats", "TemporaryStore", "atomic_dir",
           "atomic_path", "atomic_paths", "check_output", "lazy_value", "progress_bar",
           "progress_interval", "ProgressLines", "reclaim", "stat", "temporary_folder"]


# --------------------------------------------------------------------------------------
# the job object
# --------------------------------------------------------------------------------------


_BESIDE = threading.Lock()
_beside = 0  # threads of import_beside importing now
_interval = 0.005  # the switch interval before the first of them
_started: set[str] = set()  # modules import_beside was asked for


def import_beside(*modules: str) -> threading.Thread | None:
    """Import ``modules`` on a daemon thread while this one waits for the GPU; returns
    the thread (None when each was imported or asked for already).

    What a job needs only after its GPU work (the traceback's modules, pandas, which
    pyarrow imports at its first ``pa.array``: 0.24-0.4 s) is imported while the GPU
    works instead of after it.  Meanwhile the interpreter switches threads every 0.2 ms
    instead of 5 ms, so that the launching thread gets the GIL back at once each time it
    wants it: with the default interval, pandas' import beside a GPU search's score pass
    made that pass 0.47-0.55 s instead of 0.38-0.42 (H100 host, 2026-11-27), the pass
    taking and releasing the GIL around every launch and every wait.
    """
    with _BESIDE:
        wanted = [m for m in modules if m not in sys.modules and m not in _started]
        _started.update(wanted)
    if not wanted:
        return None
    thread = threading.Thread(target=_import_yielding, args=wanted, daemon=True,
                              name="swdask-import")
    thread.start()
    return thread


def _import_yielding(*modules: str) -> None:
    global _beside, _interval
    with _BESIDE:  # the first of concurrent imports lowers the interval, the last restores it
        if _beside == 0:
            _interval = sys.getswitchinterval()
            sys.setswitchinterval(min(_interval, 2e-4))
        _beside += 1
    try:
        for module in modules:
            importlib.import_module(module)
    finally:
        with _BESIDE:
            _beside -= 1
            if _beside == 0:
                sys.setswitchinterval(_interval)


@dataclass(frozen=True, kw_only=True, eq=False)
class Job:
    """Everything a job's tasks need: small, immutable, picklable.

    ``device`` is decided once, where the job is planned (:func:`swdask.backend.job_device`):
    ``"cpu"``, ``"gpu"``, or, for a job on a Dask cluster, ``"auto"`` (each worker's GPU).
    Subclasses add their own fields and say which modes their GPU kernels compute
    (:attr:`gpu_kernels`).
    """

    scoring: object
    device: str
    #: The modes of the job's GPU kernels (see :class:`swdask.backend.GpuKernels`).
    gpu_kernels: ClassVar[backend.GpuKernels] = backend.LOCAL_GPU

    def task_device(self) -> str:
        """The device a task of this job runs its kernels on, where it runs
        (:func:`swdask.backend.task_device`)."""
        return backend.task_device(self.device, self.mode, kernels=self.gpu_kernels)


class TemporaryStore:
    """Removes a temporary store once nothing refers to it (at exit at the latest).

    A job that ingested a FASTA file keeps one in its plan; a pickled copy (what a worker
    gets) is the path alone, so only the client's object ever removes the store.
    """

    def __init__(self, path: os.PathLike | str) -> None:
        self.path = str(path)
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.path, True)

    def __reduce__(self):
        return (str, (self.path,))


# --------------------------------------------------------------------------------------
# task statistics
# --------------------------------------------------------------------------------------


def _join(a: str, b: str) -> str:
    return "+".join(sorted({name for name in f"{a}+{b}".split("+") if name}))


#: How two values of a statistic add up (the ``reduce`` of :func:`stat`).
_REDUCE = {"sum": operator.add, "min": min, "max": max, "union": operator.or_, "join": _join}
#: The value that changes nothing under each rule: a record of defaults is the zero.
_ZERO = {"sum": 0, "min": math.inf, "max": -math.inf, "union": frozenset(), "join": ""}


def stat(reduce: str = "sum", default: Any = None) -> Any:
    """A field of a :class:`TaskStats` record that adds up by ``reduce``: ``"sum"``,
    ``"min"`` (a start time), ``"max"`` (an end time), ``"union"`` (a frozenset of
    names) or ``"join"`` (names joined by ``+``, e.g. ``"cpu+gpu"``).  Its default is
    the rule's zero unless given.  A ``dataclasses.Field``, typed ``Any`` as
    ``dataclasses.field`` is, so that it stands as the default of a field of any type."""
    return field(default=_ZERO[reduce] if default is None else default,
                 metadata={"reduce": reduce})


@dataclass(frozen=True)
class TaskStats:
    """A typed record of what tasks did, returned by each task beside its data.

    Records of one type add up field by field (each field's rule, :func:`stat`; plain
    fields are summed); the record of defaults is the zero, so ``sum(records, Kind())``
    reduces any number of them.

    Examples
    --------
    >>> @dataclass(frozen=True)
    ... class Work(TaskStats):
    ...     cells: int = 0
    ...     started: float = stat("min")
    ...     device: str = stat("join")
    >>> sum([Work(10, 2.0, "gpu"), Work(5, 1.0, "cpu")], Work())
    Work(cells=15, started=1.0, device='cpu+gpu')
    """

    def __add__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return type(self)(**{
            f.name: _REDUCE[f.metadata.get("reduce", "sum")](getattr(self, f.name),
                                                              getattr(other, f.name))
            for f in fields(self)})


def lazy_value(value: Delayed, meta: Any, *, name: str) -> dd.Scalar:
    """A ``dask.delayed`` value (a job's statistics) as a ``dask.dataframe.Scalar``.

    ``dask.compute(frame, scalar)`` then computes the job's DataFrame and the value in one
    graph, each task once; a Delayed beside a DataFrame would make Dask build the
    DataFrame's graph apart from it (and warn).  ``meta`` is what the value computes to
    (a class will do).
    """
    import dask.dataframe as dd

    return dd.from_graph(dict(value.__dask_graph__()), meta, (None, None), [value.key], name)


# --------------------------------------------------------------------------------------
# progress
# --------------------------------------------------------------------------------------


def progress_bar(enabled: bool, *, desc: str, unit: str, total: int | None = None,
                 initial: int = 0, leave: bool = False, **options: Any) -> tqdm | ProgressLines:
    """Progress on the standard error: a tqdm bar on a terminal (a widget in Jupyter), one
    line every ``swdask.progress-interval`` elsewhere (:class:`ProgressLines`), or nothing.

    Parameters
    ----------
    enabled : bool
        False: a bar that shows nothing (``--quiet``).
    desc, unit : str
        What is done and what it counts (``"search"``, ``"cell"``).
    total : int, optional
        How much there is to do; it may be set later (``bar.total = n``, then
        ``bar.refresh()``).
    initial : int, default 0
        Done already (a resumed run).
    leave : bool, default False
        Whether a terminal's bar stays once closed.
    **options
        More of tqdm's options, for the bar.

    Returns
    -------
    tqdm.tqdm or ProgressLines
        Use it as a context manager or ``close()`` it; ``update(n)`` counts.
    """
    stream = sys.stderr
    if not enabled or stream is None:
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, disable=True)
    if _terminal(stream):
        from tqdm.auto import tqdm  # imports IPython where it is installed: only when shown

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, file=stream,
                    leave=leave, **options)
    return ProgressLines(desc=desc, unit=unit, total=total, initial=initial, stream=stream)


def _terminal(stream) -> bool:
    """Whether ``stream`` shows a bar: a terminal, or the output of a Jupyter kernel (a
    widget), where tqdm's own test (``tqdm.autonotebook``) says so."""
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):  # no isatty, or closed
        return False
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def progress_interval() -> float:
    """Seconds between two lines of :class:`ProgressLines`: the tunable
    ``swdask.progress-interval`` (:data:`swdask.options.TUNABLES`).

    Raises
    ------
    ValueError
        Not a positive duration (``"10s"``, ``"500ms"``, a number of seconds).
    """
    from dask.utils import parse_timedelta

    from ..options import tunable

    value = tunable("progress-interval")
    try:
        seconds = parse_timedelta(value, "s")
    except (ValueError, KeyError, TypeError):
        seconds = None
    if not seconds or seconds <= 0:
        raise ValueError(f"swdask.progress-interval must be a positive duration such as '10s', "
                         f"got {value!r}")
    return float(seconds)


#: Seconds a run lasts before :class:`ProgressLines` reads its interval where neither Dask
#: is loaded nor the environment sets it: reading Dask's configuration imports Dask, 0.3-0.7
#: s of one core that holds the GIL against the run's own Python work.  At 1 s a CLI search
#: of 2-5 s paid it in the middle of its run (seen on 2 cores, 2026-11-27); a configured
#: interval shorter than this applies from then on.
_FIRST_READ = 5.0


class ProgressLines:
    """Progress as one line on the standard error every ``swdask.progress-interval``
    (10 s by default), for a standard error that is not a terminal: a log file, a pipe, a
    batch job's output, where a redrawn bar is noise.  Each line says what is done, the
    rate and the time left::

        search: 1.21G of 4.83G cells (25%) in 00:10, 121M cells/s, ETA 00:30

    A thread prints the lines, so they come while one long task runs too; a run shorter
    than the interval prints none.  Once all is done, the lines keep the time and rate of
    then and say the command is finishing (a search's traceback, writing the output).  It
    counts as tqdm's bar does (``update(n)``, ``total``, ``n``, ``refresh()``, ``close()``,
    a context manager), so callers need not know which of the two they have.

    Parameters
    ----------
    desc, unit : str
        What is done and what it counts.
    total : int, optional
        How much there is to do (may be set later).
    initial : int, default 0
        Done already; the rate counts what is done from now.
    stream : file, optional
        Default: the standard error.
    interval : float, optional
        Seconds between lines; default :func:`progress_interval`.

    Examples
    --------
    >>> with ProgressLines(desc="search", unit="cell", total=4_000_000, interval=3600) as bar:
    ...     bar.update(1_000_000)
    ...     bar.line()
    'search: 1.00M of 4.00M cells (25%) in 00:00, ... cells/s, ETA 00:00'
    """

    def __init__(self, *, desc: str, unit: str, total: int | None = None, initial: int = 0,
                 stream: TextIO | None = None, interval: float | None = None) -> None:
        self.desc, self.unit = desc, unit.strip()
        self.total, self.n = total, initial
        self._initial = initial
        self._done_at = None  # seconds from the start to when n reached the total
        self._stream = sys.stderr if stream is None else stream
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._stop = threading.Event()
        if interval is None and "dask.config" in sys.modules:
            interval = progress_interval()  # a bad value is the caller's one-line error
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True,
                                        name="swdask-progress")
        self._thread.start()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more done."""
        with self._lock:
            self.n += n
            if self._done_at is None and self.total and self.n >= self.total:
                self._done_at = time.monotonic() - self._started

    def refresh(self) -> None:
        """Nothing: the next line shows the new figures (tqdm's bar redraws here)."""

    def close(self) -> None:
        """Stop the lines."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def line(self) -> str:
        """The progress line, now."""
        from tqdm import tqdm

        with self._lock:
            done, total, done_at = self.n, self.total, self._done_at
        elapsed = time.monotonic() - self._started if done_at is None else done_at
        units = self.unit if self.unit.endswith("s") else f"{self.unit}s"
        rate = (done - self._initial) / elapsed if elapsed > 0 else 0.0
        text = f"{self.desc}: {_amount(done)}"
        if total:
            text += f" of {_amount(total)} {units} ({100 * min(done / total, 1):.0f}%)"
        else:
            text += f" {units}"
        text += f" in {tqdm.format_interval(elapsed)}, {_amount(rate)} {units}/s"
        if done_at is not None:
            text += "; finishing"
        elif total:
            left = (total - done) / rate if rate > 0 else None
            text += f", ETA {'?' if left is None else tqdm.format_interval(max(left, 0))}"
        return text

    def _run(self, interval) -> None:
        if interval is None:
            configured = ("dask.config" in sys.modules
                          or "DASK_SWDASK__PROGRESS_INTERVAL" in os.environ)
            if not configured and self._stop.wait(_FIRST_READ):
                return
            try:
                interval = progress_interval()
            except ValueError as exc:
                logger.warning("%s; progress lines every 10 s", exc)
                interval = 10.0
        beat = 1  # lines at whole multiples of the interval from the start, none missed
        while not self._stop.wait(max(self._started + beat * interval - time.monotonic(), 0)):
            beat = int((time.monotonic() - self._started) / interval) + 1
            try:
                print(self.line(), file=self._stream, flush=True)
            except (OSError, ValueError):  # the stream is closed (a reader that stopped)
                return


def _amount(x: float) -> str:
    """``x`` as a progress line writes it: whole numbers up to 99,999, then 3 figures and
    an SI prefix (tqdm's)."""
    from tqdm import tqdm

    if x < 100_000:
        return f"{x:,.0f}" if x >= 10 or float(x).is_integer() else f"{x:.1f}"
    return tqdm.format_sizeof(x)


# --------------------------------------------------------------------------------------
# outputs: checked before the work, built under a temporary name, put in place at the end
# --------------------------------------------------------------------------------------
#
# The guarantees (docs/reliability.md): an output is replaced only by a complete new one of
# the same kind, and only with force; it never replaces an input; of two runs writing the
# same new path one wins and the other fails; SIGINT and SIGTERM never stop a rename
# halfway; the temporaries of a killed run are removed by the next run in that folder.


@dataclass(frozen=True)
class OutputKind:
    """What an output is, so that ``force`` replaces only an output of the same kind.

    A file kind (``folder=False``) is a regular file.  A folder kind is a folder that
    ``recognise`` tells from any other (an empty folder is accepted as well): a sequence
    store is replaced only by a store, never a folder of someone's files.
    """

    name: str
    folder: bool = False
    recognise: Callable[[Path], bool] | None = None


#: A regular file: hits, P-values, a long alignment, SAM.
FILE = OutputKind("file")

#: A temporary of ours: ``.NAME.HOST-PID.RANDOM.tmp``, HOST naming the host and PID namespace.
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]+)\.[0-9a-f]{8}\.tmp")
#: Folders already swept for stale temporaries: (device, inode, pid) -> when.
_SWEPT: dict = {}
_SWEEP_EVERY = 60.0  # seconds: an all-pairs run writes thousands of files into one folder
_AT_FDCWD, _RENAME_NOREPLACE, _RENAME_EXCHANGE = -100, 1, 2


@functools.cache
def _host() -> str:
    """8 hex digits naming this host and PID namespace: where a temporary's PID means
    the process that made it (another container's PID 7 is another process)."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = 0
    return hashlib.sha1(f"{socket.gethostname()}/{namespace}".encode()).hexdigest()[:8]


def _temporary(path: Path, make) -> Path:
    """A new hidden name ``.NAME.HOST-PID.RANDOM.tmp`` beside ``path``, created by ``make``
    (which raises FileExistsError when the name is taken)."""
    stem = path.name[:180]  # room for the marks within the 255 bytes of a name
    while True:
        candidate = path.with_name(f".{stem}.{_host()}-{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            make(candidate)
        except FileExistsError:
            continue
        except OSError as exc:
            raise OutputError(f"{path}: cannot write in folder {_folder(path)}: "
                              f"{exc.strerror or exc}") from None
        return candidate


def _new_file(path: Path) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # 0o666 & ~umask


def _new_folder(path: Path) -> None:
    os.mkdir(path, 0o777)  # 0o777 & ~umask


def _alive(pid: int) -> bool:
    """Whether process ``pid`` (of this host) may still be running; unsure counts as alive."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's process, or no such number
        return True
    return True


def reclaim(folder: os.PathLike | str) -> list[str]:
    """Remove the temporaries that killed runs left in ``folder``; return their names.

    Only what is provably ours and stale goes: a hidden name of the form
    ``.NAME.HOST-PID.RANDOM.tmp`` (:func:`atomic_path`, :func:`atomic_dir`, temporary
    stores) made on this host and in this PID namespace by a process that is gone.  A
    folder is swept at most once a minute by a process.
    """
    folder = Path(folder)
    try:
        info = folder.stat()
    except OSError:
        return []
    key, now = (info.st_dev, info.st_ino, os.getpid()), time.monotonic()
    if now - _SWEPT.get(key, -math.inf) < _SWEEP_EVERY:
        return []
    _SWEPT[key] = now
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        match = _TEMPORARY.fullmatch(entry.name)
        if match is None or match["host"] != _host() or _alive(int(match["pid"])):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:  # reclaimed by another run first, or not ours to remove after all
            continue
        removed.append(entry.name)
    return removed


def temporary_folder(near: os.PathLike | str, *, mode: int = 0o700) -> Path:
    """A new private folder ``.NAME.HOST-PID.RANDOM.tmp`` beside ``near`` (e.g. a temporary
    store in the system's temporary folder), after reclaiming stale ones there.  The
    caller removes it; if the process is killed first, the next call reclaims it."""
    near = Path(near)
    reclaim(_folder(near))
    return _temporary(near, lambda name: os.mkdir(name, mode))


def _folder(path: Path) -> Path:
    return path.parent


def _is_input(path: Path, other) -> str | None:
    """How ``path`` would write over the input ``other``: None where it does not."""
    if not isinstance(other, (str, os.PathLike)) or not os.path.exists(other):
        return None  # not a path (a literal sequence, "all"), or nothing to protect
    if os.path.exists(path):
        if os.path.samefile(path, other):
            return "is"
    elif os.path.realpath(path) == os.path.realpath(other):
        return "is"  # e.g. a dangling symbolic link that would be created over it
    if os.path.isdir(other):
        inside = os.path.realpath(other).rstrip(os.sep) + os.sep
        if os.path.realpath(path).startswith(inside):
            return "is inside"
    return None


def _check_existing(path: Path, force: bool, kind: OutputKind | None, *,
                    meanwhile: bool = False) -> None:
    """Whether what is at ``path`` may be replaced (by force, and of the same kind)."""
    if not os.path.lexists(path):
        return
    if not force:
        how = " (another run wrote it meanwhile)" if meanwhile else ""
        raise OutputExistsError(f"{path}: already exists{how} (use --force to overwrite)")
    if kind is None:
        return
    if not kind.folder:
        if path.is_dir():
            raise OutputExistsError(f"{path}: is a directory; give a file name")
        if path.exists() and not path.is_file():
            raise OutputExistsError(f"{path}: is not a regular file; give a file name")
    elif path.is_symlink() or not path.is_dir() or not (_empty(path) or kind.recognise(path)):
        article = "an" if kind.name[:1] in "aeiou" else "a"
        raise OutputExistsError(f"{path}: exists and is not {article} {kind.name}; refusing to "
                                "overwrite it even with --force")


def _empty(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return next(entries, None) is None


def _check_folder(path: Path) -> Path:
    folder = _folder(path)
    if not os.path.exists(folder):
        raise InputNotFoundError(f"{path}: folder {folder} does not exist")
    if not os.path.isdir(folder):
        raise OutputError(f"{path}: {folder} is not a folder")
    return folder


def check_output(path: os.PathLike | str, *, force: bool = False,
                 kind: OutputKind | None = FILE, inputs: Iterable[object] = (),
                 outputs: Iterable[os.PathLike | str | None] = ()) -> Path:
    """Check, before any work, that an output can be written to ``path``.

    Parameters
    ----------
    path : str or os.PathLike
        The output.
    force : bool, default False
        Whether an existing output may be replaced (once the new one is complete).
    kind : OutputKind or None, default FILE
        What the output is: with ``force``, only a thing of this kind (or an empty
        folder, for a folder kind) is replaced.  None: the caller checks what exists.
    inputs : iterable, default ()
        The run's inputs (paths; anything else is ignored): the output is none of them,
        nor inside an input folder, by any name (symbolic and hard links included).
    outputs : iterable, default ()
        The run's other outputs (paths; None, an output not asked for, is skipped):
        none of them is the same file.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    OutputExistsError
        ``path`` exists and ``force`` is False, or it is not of ``kind``.
    OutputError
        ``path`` is an input or another output, or its folder is not a folder or not
        writable (a file is created there and removed, to be sure).
    InputNotFoundError
        The folder of ``path`` does not exist.

    Notes
    -----
    It also reclaims the temporaries that killed runs left in the folder
    (:func:`reclaim`).
    """
    path = Path(path)
    for other in inputs:
        how = _is_input(path, other)
        if how:
            raise OutputError(f"{path}: {how} the input {other}; an output never replaces an "
                              "input, even with --force")
    for other in outputs:
        if other is not None and os.path.realpath(path) == os.path.realpath(other):
            raise OutputError(f"{path}: given for two outputs; give each its own name")
    _check_existing(path, force, kind)
    folder = _check_folder(path)
    reclaim(folder)
    with _uninterrupted():  # can we write there? (read-only, full, ...)
        os.unlink(_temporary(path, _new_file))
    return path


# -- signals wait while a rename is half done --------------------------------------------


@contextlib.contextmanager
def _uninterrupted(note: str | None = None):
    """SIGINT and SIGTERM wait until the block is done, then act as they would have.

    Python runs signal handlers in the main thread only, and only there can they be
    changed: in another thread this does nothing (the signal goes to the main thread).
    A signal that waited is raised with ``note`` added when the block completed (the
    command line prints it: what was written in full before stopping).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught, previous = [], {}
    for number in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(number)
        if handler not in (signal.SIG_IGN, None):  # None: set outside Python, left alone
            previous[number] = handler
            signal.signal(number, lambda signum, frame: caught.append(signum))
    completed = False
    try:
        yield
        completed = True
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if caught:
            handler = previous[caught[0]]
            try:
                if callable(handler):
                    handler(caught[0], None)
                else:  # SIG_DFL: the default action, now
                    signal.raise_signal(caught[0])
            except KeyboardInterrupt as exc:
                if completed and note:
                    exc.add_note(note)
                raise


# -- renames that do not replace, or that swap -------------------------------------------


@functools.cache
def _renameat2():
    """Linux's ``renameat2`` (glibc 2.28+), or None."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                         ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def _rename2(source: Path, target: Path, flags: int) -> bool:
    """``renameat2(source, target, flags)``: True when done, False where the system or
    the file system does not offer it (then the caller falls back)."""
    function = _renameat2()
    if function is None:
        return False
    import ctypes

    if function(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), os.fspath(source), None, os.fspath(target))


def _rename_noreplace(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target`` unless ``target`` exists (FileExistsError), as one
    step of the file system: checked where the rename happens, not before it.

    Linux: ``renameat2(RENAME_NOREPLACE)``.  Elsewhere, or on a file system without it
    (NFS): a file is hard-linked to its new name (``link`` fails on an existing name),
    then its temporary name removed; a folder is renamed with ``rename``, which fails on
    an existing file or non-empty folder (an empty folder made in the instant between
    the check and the rename would be replaced).
    """
    if _rename2(source, target, _RENAME_NOREPLACE):
        return
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(target))
    if not source.is_dir():
        try:
            os.link(source, target)
        except FileExistsError:
            raise
        except OSError:  # no hard links here (FAT, some FUSE): rename as checked above
            os.rename(source, target)
            return
        os.unlink(source)
        return
    try:
        os.rename(source, target)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST),
                                  os.fspath(target)) from None
        raise


def _exchange(source: Path, target: Path) -> None:
    """Swap the folders ``source`` and ``target``: ``target`` becomes the new one, the old
    one is at ``source``'s name (for the caller to remove).

    Linux: ``renameat2(RENAME_EXCHANGE)``, one step.  Elsewhere: ``target`` is renamed
    aside to ``.NAME.HOST-PID.RANDOM.old`` (a name never reclaimed), ``source`` to
    ``target``, and the old one to ``source``'s name; signals wait meanwhile, so only a
    SIGKILL or a crash between the first two renames can leave the old folder under the
    ``.old`` name, never lose it.
    """
    if _rename2(source, target, _RENAME_EXCHANGE):
        return
    aside = source.with_name(source.name[:-len(".tmp")] + ".old")
    os.rename(target, aside)
    try:
        os.rename(source, target)
    except BaseException:
        os.rename(aside, target)
        raise
    os.rename(aside, source)


# -- the writers' context managers --------------------------------------------------------


@contextlib.contextmanager
def atomic_paths(paths: Iterable[os.PathLike | str], *,
                 force: bool = False) -> Iterator[list[Path]]:
    """Yield temporary files beside ``paths``; when the block ends without an error, put
    them all in place together.

    Each temporary file exists (empty) when yielded, with the permissions the user's
    umask gives a new file.  At the end, with signals waiting, each path is checked again
    and the files renamed into place: without ``force`` a path that appeared meanwhile is
    not replaced (:func:`_rename_noreplace`) and the run fails; with ``force`` a file is
    replaced in one step (``os.replace``).  On an exception (Ctrl-C included) the
    temporary files are removed and every path is left as it was.

    Raises
    ------
    OutputExistsError, OutputError, InputNotFoundError
        As :func:`check_output` (inputs aside), before anything is written; also a path
        that appeared while the caller wrote (without ``force``).
    """
    paths = [Path(p) for p in paths]
    for path in paths:
        _check_existing(path, force, FILE)
        reclaim(_check_folder(path))
    temporaries = []
    try:
        with _uninterrupted():
            for path in paths:
                temporaries.append(_temporary(path, _new_file))
        yield list(temporaries)
        with _uninterrupted(note=f"wrote {', '.join(map(str, paths))} in full"):
            for path in paths:
                _check_existing(path, force, FILE, meanwhile=True)
            for temporary, path in zip(temporaries, paths):
                if force:
                    os.replace(temporary, path)
                    continue
                try:
                    _rename_noreplace(temporary, path)
                except FileExistsError:
                    _check_existing(path, force, FILE, meanwhile=True)
                    raise
    finally:
        with _uninterrupted():
            for temporary in temporaries:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temporary)


@contextlib.contextmanager
def atomic_path(path: os.PathLike | str, *, force: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it to ``path``.

    One file of :func:`atomic_paths`: the temporary file exists (empty) when yielded,
    with the permissions the user's umask gives a new file; on an exception it is
    removed and ``path`` is left as it was.

    Raises
    ------
    OutputExistsError, OutputError, InputNotFoundError
        As :func:`check_output`, before anything is written; also ``path`` appeared
        while the caller wrote (without ``force``).

    Examples
    --------
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> with atomic_path(folder / "out.txt") as tmp:
    ...     _ = tmp.write_text("complete")
    >>> sorted(p.name for p in folder.iterdir()), (folder / "out.txt").read_text()
    (['out.txt'], 'complete')
    """
    with atomic_paths([path], force=force) as (temporary,):
        yield temporary


@contextlib.contextmanager
def atomic_dir(path: os.PathLike | str, *, force: bool = False,
               kind: OutputKind) -> Iterator[Path]:
    """Yield a new temporary folder beside ``path``; on success it becomes ``path``.

    The folder has the permissions the user's umask gives a new folder.  At the end,
    with signals waiting, ``path`` is checked again: a new ``path`` is made by a rename
    that fails if something appeared meanwhile (unless ``force``); an existing one (of
    ``kind``, with ``force``) is swapped with the new folder in one step
    (:func:`_exchange`) and then removed.  On an exception (Ctrl-C included) the
    temporary folder is removed and ``path`` is left as it was.

    Raises
    ------
    OutputExistsError, OutputError, InputNotFoundError
        As :func:`check_output`, before anything is written; also ``path`` appeared
        while the caller wrote (without ``force``), or is no longer of ``kind``.
    """
    path = Path(path)
    _check_existing(path, force, kind)
    reclaim(_check_folder(path))
    temporary = None
    committed = False
    try:
        with _uninterrupted():
            temporary = _temporary(path, _new_folder)
        yield temporary
        note = f"wrote {path} in full"
        with _uninterrupted(note=note):
            _check_existing(path, force, kind, meanwhile=True)
            try:
                _rename_noreplace(temporary, path)
            except FileExistsError:
                _check_existing(path, force, kind, meanwhile=True)
                _exchange(temporary, path)  # the old folder is now at the temporary name
            committed = True
        try:  # the old folder, if any
            shutil.rmtree(temporary, ignore_errors=True)
        except KeyboardInterrupt as exc:  # what is left is reclaimed by the next run here
            exc.add_note(note)
            raise
    finally:
        if temporary is not None and not committed:
            with _uninterrupted():
                shutil.rmtree(temporary, ignore_errors=True)
