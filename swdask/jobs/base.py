"""What every job shares: the job object, typed task statistics, temporary stores,
progress bars and atomic writes.

A job (search, all-pairs, significance, long alignment) is planned once where it is
called: its arguments checked, its inputs opened, its device decided
(:func:`swdask.backend.job_device`).  The plan is a :class:`Job`: small, immutable and
picklable, shipped once to every worker.  Each task returns its data and, beside it, a
:class:`TaskStats` record of what it did; the job adds the records up (``a + b``, field
by field) into the statistics it reports.  Nothing travels in ``DataFrame.attrs``, which
pandas does not promise to keep through its operations.

Outputs are written under a temporary name beside the destination and renamed into
place when complete (:func:`atomic_path`, :func:`atomic_dir`), so a failed or
interrupted run leaves no partial output; they are created with the user's umask.
"""
from __future__ import annotations

import contextlib
import math
import operator
import os
import secrets
import shutil
import sys
import tempfile
import weakref
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar

from .. import backend
from ..errors import InputNotFoundError, OutputExistsError

__all__ = ["Job", "TaskStats", "TemporaryStore", "atomic_dir", "atomic_path", "check_output",
           "lazy_value", "progress_bar", "stat"]


# --------------------------------------------------------------------------------------
# the job object
# --------------------------------------------------------------------------------------


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

    def __init__(self, path):
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


def stat(reduce: str = "sum", default=None):
    """A field of a :class:`TaskStats` record that adds up by ``reduce``: ``"sum"``,
    ``"min"`` (a start time), ``"max"`` (an end time), ``"union"`` (a frozenset of
    names) or ``"join"`` (names joined by ``+``, e.g. ``"cpu+gpu"``).  Its default is
    the rule's zero unless given."""
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


def lazy_value(value, meta, *, name: str):
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


def progress_bar(enabled: bool, *, desc: str, unit: str, total=None, initial: int = 0,
                 leave: bool = False, **options):
    """A tqdm progress bar on stderr (a widget in Jupyter), or a disabled one that shows
    nothing.  Use it as a context manager or ``close()`` it; ``update(n)`` counts."""
    if enabled:
        from tqdm.auto import tqdm  # imports IPython where it is installed: only when shown
    else:
        from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, file=sys.stderr,
                leave=leave, disable=not enabled, **options)


# --------------------------------------------------------------------------------------
# atomic writes
# --------------------------------------------------------------------------------------


def check_output(path, *, force: bool = False) -> Path:
    """Fail early if ``path`` cannot be written: it exists (without ``force``), or its
    folder does not exist.

    Raises
    ------
    OutputExistsError, InputNotFoundError
    """
    path = Path(path)
    if path.exists() and not force:
        raise OutputExistsError(f"{path}: already exists (use --force to overwrite)")
    if path.is_dir():
        raise OutputExistsError(f"{path}: is a directory; give a file name")
    if not path.parent.resolve().is_dir():
        raise InputNotFoundError(f"{path}: folder {path.parent} does not exist")
    return path


def _beside(path: Path, make) -> Path:
    """A new hidden name ``.NAME.RANDOM.tmp`` beside ``path``, created by ``make`` (which
    raises FileExistsError when the name is taken)."""
    while True:
        candidate = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            make(candidate)
        except FileExistsError:
            continue
        return candidate


def _new_file(path: Path) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # 0o666 & ~umask


@contextlib.contextmanager
def atomic_path(path, *, force: bool = False):
    """Yield a temporary path beside ``path``; on success rename it to ``path``.

    The temporary file exists (empty) when yielded, with the permissions the user's
    umask gives a new file.  On an exception it is removed and ``path`` is left as it
    was.

    Raises
    ------
    OutputExistsError, InputNotFoundError
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
    path = check_output(path, force=force)
    tmp = _beside(path, _new_file)
    try:
        yield tmp
        if path.exists() and not force:  # appeared while we worked
            raise OutputExistsError(f"{path}: already exists (use --force to overwrite)")
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@contextlib.contextmanager
def atomic_dir(path):
    """Yield a new temporary folder beside ``path``; on success it becomes ``path``.

    An existing ``path`` is replaced only once the new folder is complete (the caller
    checks first that it may be).  On an exception the temporary folder is removed and
    ``path`` is left as it was.  The folder has the permissions the user's umask gives.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _beside(path, lambda name: os.mkdir(name, 0o777))
    try:
        yield tmp
        _replace_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _replace_dir(tmp: Path, output: Path) -> None:
    """Rename ``tmp`` to ``output``, replacing an existing ``output`` only after success."""
    if not (output.exists() or output.is_symlink()):
        os.rename(tmp, output)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".old", dir=output.parent))
    os.rename(output, old / "store")
    try:
        os.rename(tmp, output)
    except BaseException:
        os.rename(old / "store", output)
        old.rmdir()
        raise
    shutil.rmtree(old, ignore_errors=True)
