"""The one place CUDA kernels are rendered, compiled, cached and loaded.

Why
---
A generated search kernel takes 5-6 s to compile on an H100 host (measured: Numba's typing
and lowering 5.1 s, NVVM to PTX 0.7 s, linking the DPX helpers and ``ptxas`` 0.4 s), and a
search needs five of them: before this module every process, Dask worker and notebook
paid about 30 s before its first score.  Numba's own on-disk cache cannot help: it finds
no source file for text run through ``exec`` ("no locator available"), and it refuses to
pickle a kernel that links CUDA C++ (``Cannot pickle CUDACodeLibrary with linking
files``), which every DPX kernel does.

What this module does
---------------------
- **Render**: each kernel family (:data:`FAMILIES`) turns a shape into
  :class:`Rendered` text; it is written as a real file under the cache
  (``source/``) and compiled from there, so tracebacks, ``inspect`` and profilers show
  real lines.  ``SWDASK_DUMP_KERNELS=DIR`` also copies every rendered kernel to
  ``DIR/<name>.py`` for reading and diffing.
- **Compile once per machine**: a :class:`Kernel` is a build spec (family and shape,
  or a hand-written kernel's name).  Numba compiles a specialisation the first time a
  launch or a build needs it; its cubin is kept with its entry symbol and parameter
  types as one file ``<key>-<types>.nbk``, and later processes load the cubin and
  launch it through the CUDA driver (:mod:`~swdask.kernels.cuda.driver`, Numba's
  argument layout): loading and launching a kept kernel need no part of Numba, whose
  import (0.55-0.65 s on an H100 host) a launch then never waits for.  Numba's own
  serialisation is not used: it refuses a kernel that links CUDA C++ (``Cannot pickle
  CUDACodeLibrary with linking files``), and a cubin is linked already.
- **Key**: a SHA-256 of the build spec, the source of every module of ``swdask.kernels``
  (renderers, device functions and hand-written kernels live there and read nothing
  else of swdask), the versions of Numba, numba-cuda and the CUDA driver, and the
  device's compute capability.  An entry whose header does not match its key, or that
  fails its checksum, is deleted and rebuilt, never trusted; a loaded kernel's
  parameter sizes are checked against its machine code's.
- **Safe for concurrent writers**: an entry is written to a temporary name in the same
  folder and renamed into place (atomic on POSIX); readers never see a partial entry.
  Two processes compiling the same kernel both write it; the last rename wins, and both
  wrote the same thing.
- **Bounded**: after a write the folder (entries, and the rendered texts and their
  bytecode under ``source/``) is pruned to 75% of ``SWDASK_KERNEL_CACHE_MB`` (default
  1024) by least recent use (a load refreshes a file's time).
- **Shipped**: the package carries the compiled kernels of every job for compute
  capability 9.0 (``shipped/sm_90.zip``, built by ``workflows/ship_kernels.py``); an
  empty cache takes them (:meth:`Kernel._take_shipped`) instead of compiling: a first
  search 24.6 -> 2.7 s on an H200 host.  Keyed by the kernels' sources without the
  host-only modules (:func:`shipped_digest`); one that the driver refuses compiles.
- **Parallel builds**: :func:`build` compiles missing kernels in worker processes
  (Numba holds one compiler lock per process, so threads would take turns); a job calls
  it with the shapes it will launch, ``swdask warmup`` with every shape there is.

The cache lives in ``platformdirs.user_cache_dir("swdask")/cuda`` unless
``SWDASK_CACHE_DIR`` names another root.  In Numba's CUDA simulator nothing is compiled,
so nothing is cached; kernels are still rendered to files and run from there.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import json
import logging
import marshal
import os
import struct
import sys
import threading
import time
import types
import warnings
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import driver
from .driver import simulated

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from numba.cuda.dispatcher import CUDADispatcher

#: Bump when the entry layout changes: older entries then stop matching their key.
FORMAT = 2
#: Modules of ``swdask.kernels`` with host code only (building, loading, launching,
#: planning): they change no kernel's machine code, so the digest that keys the kernels
#: shipped in the package (:func:`shipped_digest`) leaves them out, and a change to how
#: kernels are launched does not orphan them.  A module that defines a kernel or a
#: device function must not be listed.
HOST_MODULES = ("cuda/compile.py", "cuda/driver.py", "cuda/launcher.py", "cuda/psse.py",
                "cuda/traceback.py")
#: Compiled kernels shipped in the package, one archive per compute capability
#: (``sm_90.zip``: :func:`pack_shipped`).
SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"
#: Environment variables read here.
ENV_CACHE_DIR = "SWDASK_CACHE_DIR"
ENV_DUMP = "SWDASK_DUMP_KERNELS"
ENV_MAX_MB = "SWDASK_KERNEL_CACHE_MB"
#: ``0`` turns :func:`load_ahead` off (kernels then load at their first launch).
ENV_LOAD_AHEAD = "SWDASK_LOAD_AHEAD"
#: ``0``: take no compiled kernel from the package (:data:`SHIPPED_DIR`); compile them.
ENV_SHIPPED = "SWDASK_SHIPPED_KERNELS"
DEFAULT_MAX_MB = 1024
_MAGIC = b"SWDK"
_SUFFIX = ".nbk"

#: Kernel families: name -> module (in this package) whose ``render(**shape)`` returns a
#: :class:`Rendered` and whose ``SIGNATURE`` gives the argument types a launch passes.
FAMILIES = {
    "inter_task": "inter_task",
    "inter_task_dpx": "inter_task_dpx",
    "inter_task_dpx_scan": "inter_task_dpx_scan",
    "intra_task": "intra_task",
    "all_pairs": "all_pairs",
    "tile": "tile",
}


@dataclass(frozen=True)
class Rendered:
    """A generated kernel: its text and what the text needs.

    Attributes
    ----------
    name : str
        Readable and unique per shape, e.g. ``"inter_task_dpx-R21-G16-A24-T128"``; the
        file name of the rendered source.
    source : str
        Python text defining ``kernel``.
    namespace : dict
        The globals the text reads (``cuda``, numpy types, constants, device functions).
    link : tuple of str
        CUDA C++ sources linked into the kernel (Hopper DPX helpers), empty in the
        simulator.
    options : dict
        More ``numba.cuda.jit`` options (e.g. ``lto``, ``max_registers``), empty in the
        simulator (its ``jit`` takes none of them).  They are set by the family's module,
        whose source is part of every key (:func:`kernels_digest`).
    """

    name: str
    source: str
    namespace: dict = field(default_factory=dict)
    link: tuple = ()
    options: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# Where entries live, and what every key shares.

def cache_root() -> Path:
    """swdask's cache folder: ``SWDASK_CACHE_DIR`` or the user's cache folder."""
    root = os.environ.get(ENV_CACHE_DIR)
    if root:
        return Path(root).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("swdask", appauthor=False))


def kernel_dir() -> Path:
    """The folder of compiled CUDA kernels (``<cache root>/cuda``)."""
    return cache_root() / "cuda"


def max_bytes() -> int:
    """The size bound of :func:`kernel_dir` in bytes (``SWDASK_KERNEL_CACHE_MB``)."""
    return int(float(os.environ.get(ENV_MAX_MB, DEFAULT_MAX_MB)) * 2**20)


def device_api() -> types.ModuleType:
    """The device API of the launchers: :mod:`swdask.kernels.cuda.driver` on a GPU
    (streams, events, memory; no Numba), Numba's ``cuda`` module in the simulator, which
    has the same names (``to_device``, ``device_array``, ``stream``, ``event``...)."""
    if simulated():
        from numba import cuda

        return cuda
    return driver


def kernels_digest(package: Path | None = None, *, leave_out: Sequence[str] = ()) -> str:
    """SHA-256 of every source file of ``swdask.kernels`` (or of ``package``): renderers,
    device functions, constants and hand-written kernels live there and import nothing
    else of swdask, so with a build spec this decides a kernel's text.  ``leave_out``:
    paths relative to the package not to read (:data:`HOST_MODULES`)."""
    package = package or Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        if name in leave_out:
            continue
        digest.update(name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _toolchain() -> dict:
    """Versions that change the machine code for the same kernel text, read without
    importing Numba (package metadata and the driver)."""
    from importlib.metadata import PackageNotFoundError, version

    facts = {"format": FORMAT}
    for package in ("numba", "numba-cuda"):
        try:
            facts[package] = version(package)
        except PackageNotFoundError:  # numba's bundled CUDA target: numba's version covers it
            facts[package] = None
    facts["driver"] = driver.driver_version()
    return facts


_SHARED_KEY = None


def _shared_key() -> str:
    """The part of every key that is the same for all kernels of this process."""
    global _SHARED_KEY
    if _SHARED_KEY is None:
        _SHARED_KEY = json.dumps({"kernels": kernels_digest(), **_toolchain()},
                                 sort_keys=True, default=str)
    return _SHARED_KEY


def kernel_key(spec: dict[str, Any], shared: str, cc: tuple[int, int]) -> str:
    """An entry key: SHA-256 of the build spec (family and shape, or the hand-written
    kernel's name), the shared facts (:func:`kernels_digest`, versions) and the device's
    compute capability."""
    text = json.dumps({"spec": spec, "shared": shared, "cc": list(cc)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------------------------
# Entries on disk.

def entry_bytes(key: str, header: dict[str, Any], payload: bytes) -> bytes:
    """An entry: magic, header length, a JSON header (``header`` with the format, the key
    and the payload's SHA-256), the payload (a cubin)."""
    header = json.dumps({**header, "format": FORMAT, "key": key,
                         "sha256": hashlib.sha256(payload).hexdigest()}).encode()
    return _MAGIC + struct.pack("<I", len(header)) + header + payload


def read_entry(path: Path, key: str) -> tuple[dict[str, Any], bytes] | None:
    """``(header, payload)`` of an entry, or None (and the entry deleted) when it is
    corrupted, truncated or written for another key."""
    try:
        return parse_entry(path.read_bytes(), key)
    except FileNotFoundError:
        return None
    except Exception:
        _discard(path)
        return None


def parse_entry(data: bytes, key: str) -> tuple[dict[str, Any], bytes]:
    """``(header, payload)`` of an entry's bytes; ValueError when they are corrupted,
    truncated or written for another key."""
    if data[:4] != _MAGIC:
        raise ValueError("not an entry")
    (size,) = struct.unpack("<I", data[4:8])
    header = json.loads(data[8:8 + size])
    payload = data[8 + size:]
    if (header.get("format") != FORMAT or header.get("key") != key
            or hashlib.sha256(payload).hexdigest() != header.get("sha256")):
        raise ValueError("foreign or corrupted entry")
    return header, payload


def _discard(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a
    rename, so a reader sees the old entry, the new one, or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        _discard(tmp)
        raise


def prune(folder: Path | None = None, limit: int | None = None) -> int:
    """Delete the least recently used entries until ``folder`` holds at most 75% of
    ``limit`` bytes (when it holds more than ``limit``); also stale temporary files.

    Returns the number of files deleted.
    """
    folder = folder or kernel_dir()
    limit = max_bytes() if limit is None else limit
    entries = []
    removed = 0
    now = time.time()
    listing = []
    for where in (folder, folder / "source"):  # entries; rendered text and its bytecode
        try:
            listing += list(os.scandir(where))
        except FileNotFoundError:
            pass
    for item in listing:
        try:
            stat = item.stat()
        except OSError:
            continue
        if item.name.endswith(".tmp") and now - stat.st_mtime > 3600:
            _discard(Path(item.path))  # left by a killed writer
            removed += 1
        elif item.name.endswith((_SUFFIX, ".py", ".code")) and item.is_file():
            # A pruned text or bytecode is written again by the next process that needs it.
            entries.append((stat.st_mtime, stat.st_size, item.path))
    total = sum(size for _, size, _ in entries)
    if total <= limit:
        return removed
    for _, size, path in sorted(entries):
        if total <= 0.75 * limit:
            break
        _discard(Path(path))
        total -= size
        removed += 1
    return removed


# ---------------------------------------------------------------------------------------
# Compiled kernels shipped in the package.
#
# A search's kernels took 16-23 s to build on an empty cache (H200 host, 2026-11-28): one
# scan-kernel shape alone 22.7 s, 11.7 s of it in NVVM.  Loading and launching need no
# Numba (:class:`Compiled`), so machine code built once for a compute capability serves
# every machine with that GPU: the package carries it, and a first process copies what it
# launches into its cache instead of compiling.

def shipped_digest() -> str:
    """The digest that keys shipped kernels: :func:`kernels_digest` without
    :data:`HOST_MODULES`."""
    return kernels_digest(leave_out=HOST_MODULES)


def shipped_key(spec: dict[str, Any], digest: str, cc: Sequence[int]) -> str:
    """A shipped entry's key: :func:`kernel_key` with the shipped digest in place of the
    shared facts.  No toolchain is in it: the machine code is that of the toolchain that
    packed it, and the driver that loads it says whether it can run it
    (:meth:`Kernel._function`)."""
    shared = json.dumps({"kernels": digest, "format": FORMAT}, sort_keys=True)
    return kernel_key(spec, shared, tuple(cc))


def _spec_text(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True)


def parameters_tag(parameters: Sequence[tuple]) -> str:
    """The part of an entry's file name (in the cache and in an archive) that tells its
    specialisations apart."""
    return hashlib.sha256(json.dumps(parameters).encode()).hexdigest()[:16]


def shipped_archive_path(cc: Sequence[int], folder: Path | None = None) -> Path | None:
    """The archive whose machine code runs on compute capability ``cc``: same major
    version, the highest minor not above ``cc``'s (a cubin for 8.0 runs on 8.6 and 8.9,
    none runs across major versions); None if the package has none."""
    best = None
    for path in (folder or SHIPPED_DIR).glob("sm_*.zip"):
        number = path.stem[3:]
        if not number.isdigit():
            continue
        major, minor = divmod(int(number), 10)
        if major == cc[0] and minor <= cc[1] and (best is None or minor > best[0]):
            best = (minor, path)
    return best[1] if best else None


class ShippedArchive:
    """An archive of shipped kernels (:func:`pack_shipped`): ``manifest.json`` (format,
    shipped digest, compute capability, the toolchain that built them, the members of each
    build spec) and one entry per compiled specialisation, keyed by :func:`shipped_key`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._zip = zipfile.ZipFile(self.path)
        self.manifest = json.loads(self._zip.read("manifest.json"))
        self._lock = threading.Lock()  # one reader of the file at a time

    @property
    def current(self) -> bool:
        """Whether these kernels were built from this package's kernel sources."""
        return (self.manifest.get("format") == FORMAT
                and self.manifest.get("digest") == shipped_digest())

    def entries(self, spec: dict[str, Any],
                skip: Iterable[str] = ()) -> list[tuple[dict[str, Any], bytes]]:
        """``(header, payload)`` of each shipped specialisation of ``spec`` but those whose
        :func:`parameters_tag` is in ``skip`` (not read); a damaged member is left out (it
        then compiles)."""
        key = shipped_key(spec, self.manifest["digest"], self.manifest["cc"])
        skip = set(skip)
        found = []
        for member in self.manifest["entries"].get(_spec_text(spec), ()):
            if member[:-len(_SUFFIX)].rsplit("-", 1)[-1] in skip:
                continue
            try:
                with self._lock:
                    data = self._zip.read(member)
                found.append(parse_entry(data, key))
            except (KeyError, ValueError, OSError, zipfile.BadZipFile) as exc:
                logger.warning("%s: member %s unreadable (%s); that kernel compiles instead",
                               self.path, member, exc)
        return found


_SHIPPED: dict[tuple, ShippedArchive | None] = {}
_SHIPPED_LOCK = threading.Lock()
#: Set when the driver refused a shipped kernel: none is taken again in this process.
_SHIPPED_REFUSED = []


def shipped_archive(cc: Sequence[int]) -> ShippedArchive | None:
    """The package's archive for compute capability ``cc`` if its kernels were built from
    these sources, else None (also with ``SWDASK_SHIPPED_KERNELS=0``, or after the driver
    refused one of them); opened once per process."""
    if os.environ.get(ENV_SHIPPED) == "0" or _SHIPPED_REFUSED:
        return None
    cc = tuple(cc)
    with _SHIPPED_LOCK:
        if cc not in _SHIPPED:
            archive, path = None, shipped_archive_path(cc)
            if path is not None:
                try:
                    archive = ShippedArchive(path)
                except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
                    logger.warning("%s: unreadable (%s); kernels compile instead", path, exc)
                else:
                    if not archive.current:
                        logger.info("%s: built from other kernel sources; kernels compile "
                                    "instead", path)
                        archive = None
            _SHIPPED[cc] = archive
        return _SHIPPED[cc]


def pack_shipped(folder: Path, out: Path, cc: Sequence[int]) -> dict[str, Any]:
    """Write the entries of cache folder ``folder`` that this process's kernel sources and
    toolchain made for compute capability ``cc`` as a shipped archive ``out`` (atomically;
    ``workflows/ship_kernels.py`` builds them first).  Entries of other sources,
    toolchains or devices are left out.  Returns the manifest."""
    cc, digest, shared = tuple(cc), shipped_digest(), _shared_key()
    members: dict[str, list[str]] = {}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
            for path in sorted(Path(folder).glob(f"*{_SUFFIX}")):
                spec = (_header(path) or {}).get("spec")
                found = spec and read_entry(path, kernel_key(spec, shared, cc))
                if not found:
                    continue
                header, payload = found
                key = shipped_key(spec, digest, cc)
                member = f"{key[:32]}-{path.stem.rsplit('-', 1)[-1]}{_SUFFIX}"
                archive.writestr(member, entry_bytes(key, {**header, "shipped": True},
                                                     payload))
                members.setdefault(_spec_text(spec), []).append(member)
            manifest = {"format": FORMAT, "digest": digest, "cc": list(cc),
                        "toolchain": _toolchain(), "entries": members}
            archive.writestr("manifest.json", json.dumps(manifest, indent=1, sort_keys=True))
        os.replace(tmp, out)
    except BaseException:
        _discard(tmp)
        raise
    return manifest


# ---------------------------------------------------------------------------------------
# Parameter types, and Numba's layout of a launch's parameters.
#
# A parameter type is ``("a", dtype, ndim, layout)`` for an array (NumPy's dtype string,
# Numba's layout letter) or ``("s", dtype)`` for a scalar: what Numba's ``typeof`` makes
# of a launch's arguments, said without Numba.

#: struct codes of the scalar parameters (Numba passes a boolean as one byte).
_SCALARS = {"|b1": "?", "|i1": "b", "|u1": "B", "<i2": "h", "<u2": "H", "<i4": "i",
            "<u4": "I", "<i8": "q", "<u8": "Q", "<f4": "f", "<f8": "d"}
#: struct codes of an array parameter's values before its shape and strides: two null
#: pointers (Numba's meminfo and parent), the item count, the item size, the data pointer.
_ARRAY_HEAD = "QQqqQ"


def _layout(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> str:
    """Numba's layout letter of an array: ``C``, ``F`` or ``A``."""
    def contiguous(order):
        step = itemsize
        for extent, stride in order:
            if extent > 1 and stride != step:
                return False
            step *= extent
        return True

    pairs = list(zip(shape, strides))
    if contiguous(reversed(pairs)):
        return "C"
    return "F" if contiguous(pairs) else "A"


def _array_facts(value: Any) -> tuple[int, tuple, tuple, np.dtype] | None:
    """``(pointer, shape, strides, dtype)`` of a device array with
    ``__cuda_array_interface__`` (Numba's, CuPy's, ...), or None for anything else."""
    interface = getattr(value, "__cuda_array_interface__", None)
    if interface is None:
        return None
    dtype = np.dtype(interface["typestr"])
    shape = tuple(interface["shape"])
    strides = interface.get("strides") or driver._c_strides(shape, dtype.itemsize)
    return interface["data"][0], shape, tuple(strides), dtype


def array_argument(pointer: int, shape: tuple, strides: tuple,
                   dtype: np.dtype) -> tuple[tuple, tuple]:
    """:func:`argument` of a device array: its parameter type and its values in Numba's
    array model (:data:`_ARRAY_HEAD`, then the shape and the strides)."""
    count = 1
    for extent in shape:
        count *= extent
    kind = ("a", dtype.str, len(shape), _layout(shape, strides, dtype.itemsize))
    return kind, (0, 0, count, dtype.itemsize, pointer, *shape, *strides)


def argument(value: Any) -> tuple[tuple, tuple | None]:
    """``(parameter type, values)`` of launch argument ``value``: the type Numba gives it,
    and what it puts in the kernel's parameters (a scalar itself; a device array the
    values of :func:`array_argument`, kept by this package's arrays; None for a host
    array, copied to the device at launch)."""
    if type(value) is driver.DeviceArray:
        return value.launch_argument
    facts = _array_facts(value)
    if facts is not None:
        return array_argument(*facts)
    if isinstance(value, np.ndarray):
        return ("a", value.dtype.str, value.ndim,
                _layout(value.shape, value.strides, value.itemsize)), None
    if isinstance(value, (bool, np.bool_)):
        return ("s", "|b1"), (bool(value),)
    if isinstance(value, np.generic):
        return ("s", value.dtype.str), (value.item(),)
    if isinstance(value, int):
        return ("s", "<i8"), (value,)  # Numba types a Python int as int64
    if isinstance(value, float):
        return ("s", "<f8"), (value,)
    raise TypeError(f"a CUDA kernel cannot take {type(value).__name__} {value!r}")


def parameter_type(value: Any) -> tuple:
    """The parameter type Numba gives launch argument ``value``."""
    return argument(value)[0]


def _parameter_types(argtypes: Sequence[Any]) -> tuple:
    """Parameter types of Numba types (a compiled kernel's signature)."""
    from numba.core import types as nbtypes
    from numba.np.numpy_support import as_dtype

    out = []
    for kind in argtypes:
        if isinstance(kind, nbtypes.Array):
            out.append(("a", as_dtype(kind.dtype).str, kind.ndim, kind.layout))
        elif isinstance(kind, (nbtypes.Integer, nbtypes.Float, nbtypes.Boolean)):
            out.append(("s", as_dtype(kind).str))
        else:
            raise TypeError(f"kernel parameter type {kind} is not one swdask launches")
    return tuple(out)


def _numba_types(parameters: Sequence[tuple]) -> tuple:
    """The Numba types of parameter types (what a launch makes Numba compile)."""
    from numba import from_dtype
    from numba.core import types as nbtypes

    return tuple(nbtypes.Array(from_dtype(np.dtype(p[1])), p[2], p[3]) if p[0] == "a"
                 else from_dtype(np.dtype(p[1])) for p in parameters)


def conversions(declared: Sequence[tuple], launched: Sequence[tuple]) -> int | None:
    """How many arguments of a launch with types ``launched`` a kernel compiled for
    ``declared`` converts, or None when it cannot take them: Numba's rule for picking a
    compiled specialisation, an array of any layout for layout ``A`` and a scalar by a
    safe cast."""
    if len(declared) != len(launched):
        return None
    count = 0
    for want, have in zip(declared, launched):
        if want == have:
            continue
        if want[0] != have[0]:
            return None
        if want[0] == "a":
            if want[1:3] != have[1:3] or want[3] != "A":
                return None
        elif not np.can_cast(np.dtype(have[1]), np.dtype(want[1]), "safe"):
            return None
        count += 1
    return count


def _codes(parameters: Sequence[tuple]) -> str:
    """struct codes of the kernel parameters that ``parameters`` become (an array is
    seven values and two per dimension: Numba's array model)."""
    return "".join(_ARRAY_HEAD + "q" * (2 * p[2]) if p[0] == "a" else _SCALARS[p[1]]
                   for p in parameters)


def parameter_sizes(parameters: Sequence[tuple]) -> list[int]:
    """Byte size of each kernel parameter that ``parameters`` become."""
    return [struct.calcsize(code) for code in _codes(parameters)]


def buffer_offsets(parameters: Sequence[tuple]) -> list[int]:
    """Each kernel parameter's offset in the parameter buffer as CUDA lays it out: each
    value aligned to its size."""
    offsets, at = [], 0
    for size in parameter_sizes(parameters):
        offsets.append(-(-at // size) * size)
        at = offsets[-1] + size
    return offsets


def buffer_layout(parameters: Sequence[tuple],
                  offsets: Sequence[int] | None = None) -> struct.Struct:
    """The layout of a launch's parameter buffer: each parameter at its offset
    (``offsets``, as the machine code declares them; default :func:`buffer_offsets`)."""
    offsets = buffer_offsets(parameters) if offsets is None else offsets
    fmt, at = "<", 0
    for k, code in enumerate(_codes(parameters)):
        size = struct.calcsize(code)
        offset = offsets[k]
        if offset < at:
            raise ValueError(f"parameter {k} at byte {offset}, before the end of the last")
        fmt += "x" * (offset - at) + code
        at = offset + size
    return struct.Struct(fmt)


def pack(layout: struct.Struct, described: Sequence[tuple[tuple, tuple | None]],
         args: Sequence[Any], stream: int) -> tuple[bytes, list]:
    """A launch's parameter buffer (``layout``, from the arguments' :func:`argument`
    descriptions), and the (device, host) pairs to copy back after it: a host array is
    copied to the device for the launch and back after it, as Numba does."""
    values, writeback = [], []
    for (_, given), value in zip(described, args):
        if given is None:
            host = np.asarray(value)
            if not host.flags.c_contiguous:
                raise ValueError("a host array passed to a kernel must be contiguous")
            device = driver.to_device(host, stream)
            if host.flags.writeable:
                writeback.append((device, host))
            given = device.launch_argument[1]
        values += given
    return layout.pack(*values), writeback


@dataclass
class Compiled:
    """One compiled specialisation of a kernel: its cubin, entry symbol and parameter
    types, as kept in an entry; :meth:`function` loads it into the context."""

    parameters: tuple
    name: str
    cubin: bytes
    cooperative: bool = False
    declared: tuple = ()
    shipped: bool = False  # machine code from the package (:func:`shipped_archive`)
    _functions: dict = field(default_factory=dict)  # by context: one load per GPU
    #: The parameter buffer's layout (:func:`buffer_layout`) and each parameter's offset
    #: in it, set by :meth:`function`.
    layout: struct.Struct | None = None
    offsets: list | None = None

    def header(self, spec: dict[str, Any] | None,
               signatures: Sequence[str] = ()) -> dict[str, Any]:
        """The entry's header; ``signatures`` are all those the kernel declares (what a
        process that has not imported a hand-written kernel's module checks for)."""
        return {"parameters": [list(p) for p in self.parameters], "name": self.name,
                "cooperative": self.cooperative, "declared": list(self.declared),
                "signatures": list(signatures), "spec": spec, "shipped": self.shipped}

    @classmethod
    def from_entry(cls, header: dict[str, Any], payload: bytes) -> Compiled:
        return cls(tuple(tuple(p) for p in header["parameters"]), header["name"], payload,
                   bool(header["cooperative"]), tuple(header.get("declared") or ()),
                   bool(header.get("shipped")))

    @classmethod
    def from_numba(cls, kernel: Any, declared: Sequence[str] = ()) -> Compiled:
        """From a Numba ``_Kernel`` just compiled."""
        library = kernel._codelibrary
        if getattr(library, "_setup_functions", None):
            raise TypeError(f"kernel {kernel.entry_name} needs module set-up functions")
        cubin = library.get_cubin(library._ensure_cc(None))
        cubin = getattr(cubin, "code", cubin)  # numba-cuda 0.30: cuda.core's ObjectCode
        if not isinstance(cubin, (bytes, bytearray)):
            raise TypeError(f"kernel {kernel.entry_name}: no cubin bytes ({type(cubin)})")
        return cls(_parameter_types(kernel.argument_types),
                   getattr(library, "_entry_name", None) or kernel.entry_name, bytes(cubin),
                   bool(kernel.cooperative), tuple(declared))

    def function(self) -> driver.Function:
        """The kernel loaded into the current context (once), its parameters checked
        against the machine code's where the driver can tell them (CUDA 12.4 and newer),
        and the layout of its parameter buffer (:attr:`layout`) taken from there."""
        function = self._functions.get(driver.context())
        if function is None:
            function = driver.Function(self.cubin, self.name)
            found = function.parameter_info()
            if found and [size for _, size in found] != parameter_sizes(self.parameters):
                raise driver.CudaError(
                    f"kernel {self.name}: parameter sizes {[size for _, size in found]} "
                    f"are not Numba's {parameter_sizes(self.parameters)}")
            self.offsets = [offset for offset, _ in found] if found else \
                buffer_offsets(self.parameters)
            self.layout = buffer_layout(self.parameters, self.offsets)
            self._functions[driver.context()] = function
        return function


# ---------------------------------------------------------------------------------------
# Kernels.

#: Counters of this process (``swdask warmup`` and the tests read them).
STATS = {"compiled": 0, "loaded": 0, "shipped": 0, "discarded": 0, "compile_seconds": 0.0}


class Kernel:
    """A CUDA kernel whose compiled specialisations persist across processes.

    Launch it as a Numba kernel: ``kernel[grid, block, stream](*args)``.  On a GPU every
    launch goes through :mod:`~swdask.kernels.cuda.driver`: the specialisation for the
    arguments' types comes from this process, from the cache, or from Numba (imported
    only then), which compiles it and whose cubin is saved for later processes.  In the
    simulator the launch is Numba's, and records its argument types (:attr:`launched`),
    which the tests compare with the declared signatures.

    Parameters
    ----------
    spec : dict
        How to get this kernel again (``{"family": ..., "shape": ...}`` or
        ``{"kernel": "module:qualname"}``): with the shared facts it makes the key.
    make : callable
        Returns Numba's dispatcher for the kernel; called at the first compile or
        simulated launch only (rendering and Numba's import wait until then).
    """

    def __init__(self, spec: dict[str, Any], make: Callable[[], CUDADispatcher]) -> None:
        self.spec = spec
        self.signatures: tuple[str, ...] = ()
        self.simulated = simulated()
        self.launched = set()
        self._make = make
        self._dispatcher = None
        self._key = None
        self._compiled: dict[tuple, Compiled] = {}
        self._loaded = False
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"Kernel({json.dumps(self.spec, sort_keys=True)})"

    @property
    def dispatcher(self) -> CUDADispatcher:
        """Numba's dispatcher (made at the first use: rendering and importing Numba)."""
        with self._lock:
            if self._dispatcher is None:
                self._dispatcher = self._make()
            return self._dispatcher

    @property
    def py_func(self) -> Callable[..., Any]:
        return self.dispatcher.py_func

    def key(self) -> str:
        """The entry key (:func:`kernel_key`) on this device."""
        if self._key is None:
            self._key = kernel_key(self.spec, _shared_key(), driver.compute_capability())
        return self._key

    def _path(self, parameters: tuple) -> Path:
        return kernel_dir() / f"{self.key()}-{parameters_tag(parameters)}{_SUFFIX}"

    def load(self) -> int:
        """Read the saved specialisations this process lacks; returns how many."""
        if self.simulated:
            return 0
        with self._lock:
            self._loaded = True
            loaded = 0
            for path in kernel_dir().glob(f"{self.key()}-*{_SUFFIX}"):
                entry = read_entry(path, self.key())
                if entry is None:
                    STATS["discarded"] += 1
                    continue
                try:
                    compiled = Compiled.from_entry(*entry)
                    if not self.signatures:  # a hand-written kernel's module not imported
                        self.signatures = tuple(entry[0].get("signatures") or ())
                except (KeyError, TypeError, ValueError):
                    _discard(path)
                    STATS["discarded"] += 1
                    continue
                if compiled.parameters in self._compiled:
                    continue
                self._compiled[compiled.parameters] = compiled
                _touch(path)  # least recently used goes first when pruning
                loaded += 1
            STATS["loaded"] += loaded
            logger.debug("kernel %r: %d compiled shapes loaded from the cache", self, loaded)
            return loaded + self._take_shipped()

    def _take_shipped(self) -> int:
        """Copy the package's specialisations of this kernel that the cache lacks into
        this process and the cache; returns how many."""
        archive = shipped_archive(driver.compute_capability())
        have = [parameters_tag(parameters) for parameters in self._compiled]
        taken = 0
        for header, payload in archive.entries(self.spec, skip=have) if archive else ():
            compiled = Compiled.from_entry(header, payload)
            if compiled.parameters in self._compiled:
                continue
            if not self.signatures:
                self.signatures = tuple(header.get("signatures") or ())
            self._compiled[compiled.parameters] = compiled
            self._save(compiled)
            taken += 1
        STATS["shipped"] += taken
        return taken

    def _save(self, compiled: Compiled) -> None:
        try:
            write_atomic(self._path(compiled.parameters),
                         entry_bytes(self.key(), compiled.header(self.spec, self.signatures),
                                     compiled.cubin))
        except OSError:  # a read-only or full cache costs a compile in a later process
            return
        try:
            prune()
        except OSError:
            pass

    def _compile(self, parameters: tuple, declared: Sequence[str] = ()) -> Compiled:
        """Compile the specialisation for ``parameters`` with Numba and save it."""
        start = time.perf_counter()
        compiled = Compiled.from_numba(self.dispatcher.compile(_numba_types(parameters)),
                                       declared)
        seconds = time.perf_counter() - start
        STATS["compiled"] += 1
        STATS["compile_seconds"] += seconds
        logger.info("compiled CUDA kernel %r in %.1f s (saved for later processes)", self,
                    seconds)
        self._compiled[compiled.parameters] = compiled
        self._save(compiled)
        return compiled

    def compile(self, signature: str) -> None:
        """Make the specialisation of a declared ``signature`` ready (load or compile,
        then save)."""
        if self.simulated:
            return
        from numba.core import sigutils

        with self._lock:
            self._ensure_loaded()
            if any(signature in c.declared for c in self._compiled.values()):
                return
            argtypes = sigutils.normalize_signature(signature)[0]
            parameters = _parameter_types(argtypes)
            compiled = self._compiled.get(parameters)
            if compiled is None:
                self._compile(parameters, (signature,))
            else:  # compiled at a launch: say it is the declared one too
                compiled.declared += (signature,)
                self._save(compiled)

    def has(self, signature: str) -> bool:
        """Whether the specialisation of a declared ``signature`` is saved or here."""
        with self._lock:
            self._ensure_loaded()
            return any(signature in c.declared for c in self._compiled.values())

    def _ensure_loaded(self):
        if not self._loaded:
            self.load()

    def specialisation(self, parameters: tuple) -> Compiled:
        """The compiled specialisation a launch with argument types ``parameters`` runs:
        the exact one, else the one needing the fewest conversions (Numba's choice), else
        a new one compiled now."""
        with self._lock:
            self._ensure_loaded()
            compiled = self._compiled.get(parameters)
            if compiled is None:
                ranked = [(n, i) for i, c in enumerate(self._compiled.values())
                          if (n := conversions(c.parameters, parameters)) is not None]
                if ranked:
                    compiled = list(self._compiled.values())[min(ranked)[1]]
                    self._compiled[parameters] = compiled  # the same choice next time
                else:
                    compiled = self._compile(parameters)
            return self._function(compiled)

    def _function(self, compiled: Compiled) -> Compiled:
        """``compiled``, loaded into the current context.  One from the package that the
        driver refuses (a driver older than the toolchain that built it) is deleted and
        compiled here instead, and no shipped kernel is taken again by this process."""
        try:
            compiled.function()
            return compiled
        except driver.CudaError as exc:
            if not compiled.shipped:
                raise
            logger.warning("the CUDA driver refused a kernel shipped in the package (%s); "
                           "compiling the kernels instead", exc)
            _SHIPPED_REFUSED.append(str(exc))
        for parameters in [p for p, c in self._compiled.items() if c is compiled]:
            del self._compiled[parameters]
        _discard(self._path(compiled.parameters))
        fresh = self._compile(compiled.parameters, compiled.declared)
        fresh.function()
        return fresh

    def warm(self) -> None:
        """Load the saved specialisations and their machine code into the current
        context, so that a first launch only launches.  :func:`load_ahead` calls it on a
        thread; a launch of this kernel meanwhile waits for it (the kernel's lock)."""
        if self.simulated:
            return
        with self._lock:
            self._ensure_loaded()
            for compiled in list(self._compiled.values()):
                self._function(compiled)

    def __getitem__(self, launch_config):
        if self.simulated:
            with quiet_occupancy():
                return _SimulatedLaunch(self, self.dispatcher[launch_config])
        return _Launch(self, *launch_config)


@contextlib.contextmanager
def quiet_occupancy() -> Iterator[None]:
    """Silence Numba's note that a grid is small (``NumbaPerformanceWarning``: "Grid size
    ... under-utilization"): small launches are legitimate here (a small database, the
    last few pairs of a block), and the note reached a command's standard error."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Grid size .* under-utilization")
        yield


def _dims(value: Any) -> tuple[int, int, int]:
    dims = (int(value),) if np.isscalar(value) else tuple(int(v) for v in value)
    return (*dims, 1, 1)[:3]


class _Launch:
    """A configured launch through the driver (see :class:`Kernel`)."""

    __slots__ = ("kernel", "grid", "block", "stream", "shared")

    def __init__(self, kernel, grid, block, stream=0, shared=0):
        self.kernel = kernel
        self.grid, self.block = _dims(grid), _dims(block)
        self.stream, self.shared = driver.stream_handle(stream), int(shared)

    def __call__(self, *args):
        # What a launch costs the host: a long pair's score pass is 5,860 launches, which
        # took 2.6-2.9 s of its 3 s (H100 host) while each made a ctypes object per kernel
        # parameter (75 of them) and read Numba arrays' interfaces twice; one pass over
        # the arguments and one struct-packed buffer now.
        described = [argument(a) for a in args]
        compiled = self.kernel.specialisation(tuple(kind for kind, _ in described))
        buffer, writeback = pack(compiled.layout, described, args, self.stream)
        compiled.function().launch(self.grid, self.block, self.stream, buffer,
                                   compiled.offsets, self.shared, compiled.cooperative)
        for device, host in writeback:  # on the legacy stream: after this launch
            device.copy_to_host(host)


class _SimulatedLaunch:
    """A simulator launch that records its argument types."""

    __slots__ = ("kernel", "configured")

    def __init__(self, kernel, configured):
        self.kernel = kernel
        self.configured = configured

    def __call__(self, *args):
        from numba import typeof

        yield_in_simulated_blocks()
        self.kernel.launched.add(tuple(typeof(getattr(a, "_ary", a)) for a in args))
        with quiet_occupancy():
            self.configured(*args)


#: The statements of the CUDA simulator's block loop (``BlockManager.run``) that
#: :func:`yield_in_simulated_blocks` relies on, spaces removed.
_POLLING_LOOP = ("t=BlockThread(target,self,grid_point,block_point,self._debug)",
                 "whilelivethreads:", "iflivethreads==blockedthreads:",
                 "livethreads=set([tfortinlivethreadsift.is_alive()])")
_YIELDING = False


def yield_in_simulated_blocks() -> bool:
    """Make the CUDA simulator's block loop give up the GIL while its threads run, once
    a process; returns whether the loop yields.

    The simulator runs a block's threads as Python threads, and the main thread polls
    them for ``syncthreads`` in a loop without pause.  That loop holds the GIL until the
    interpreter's switch interval forces it off, at each of a block's barriers: on the
    2-core CI machine it was 61 of the 93 s of ``intra_threshold.py --quick`` (cProfile:
    ``Thread.is_alive``).  The loop here is the simulator's own with ``time.sleep(0)``
    in each round that finds a thread still running: 12 s, identical results.  Only a
    loop whose statements are the ones this was written against (:data:`_POLLING_LOOP`)
    is replaced; another Numba keeps its own.
    """
    global _YIELDING
    if _YIELDING:
        return True
    import inspect

    from numba.cuda.simulator import kernel as simulator

    manager = simulator.BlockManager
    try:
        text = "".join(inspect.getsource(manager.run).split())
    except (OSError, TypeError):  # no source to check against
        return False
    if not all(statement in text for statement in _POLLING_LOOP):
        return False

    def run(self, grid_point, *args):
        threads, live, blocked = set(), set(), set()
        for block_point in np.ndindex(*self._block_dim):
            def target():
                self._f(*args)
            thread = simulator.BlockThread(target, self, grid_point, block_point,
                                           self._debug)
            thread.start()
            threads.add(thread)
            live.add(thread)
        while live:
            for thread in live:
                if thread.syncthreads_blocked:
                    blocked.add(thread)
                elif thread.exception:  # abort the block, as the simulator does
                    for other in threads:
                        other.abort = True
                        other.syncthreads_blocked = False
                        other.syncthreads_event.set()
                    raise thread.exception[0].with_traceback(thread.exception[1])
            if live == blocked:  # every live thread at the barrier: release them
                for thread in blocked:
                    thread.syncthreads_blocked = False
                    thread.syncthreads_event.set()
                blocked = set()
            else:
                time.sleep(0)  # the GIL to the threads still running
            live = {thread for thread in live if thread.is_alive()}
        for thread in threads:
            if thread.exception:
                raise thread.exception[0].with_traceback(thread.exception[1])

    manager.run = run
    _YIELDING = True
    return True


_KERNELS = {}
_KERNELS_LOCK = threading.RLock()


def _source_file(rendered: Rendered, digest: str) -> Path:
    """Write ``rendered`` as a real file (once) and return its path."""
    folder = kernel_dir() / "source"
    path = folder / f"{rendered.name}-{digest[:12]}.py"
    if not path.exists():
        write_atomic(path, rendered.source.encode())
    else:
        _touch(path)
    dump = os.environ.get(ENV_DUMP)
    if dump:
        target = Path(dump) / f"{rendered.name}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(rendered.source)
    return path


def _touch(path: Path) -> None:
    """Mark a file of the cache as used now (:func:`prune` drops the least recently used)."""
    try:
        os.utime(path)
    except OSError:
        pass


def _code_of(source: str, path: Path) -> types.CodeType:
    """``compile(source, path)``, kept as bytecode beside the file (``.code``: the
    interpreter's magic number, then ``marshal``) for the next process, as Python keeps
    a module's ``.pyc``.  The file's name holds the digest of its text, so an entry
    never goes stale; one from another interpreter or unreadable is compiled anew."""
    cached = path.with_suffix(".code")
    magic = importlib.util.MAGIC_NUMBER
    try:
        data = cached.read_bytes()
        if data[:len(magic)] == magic:
            code = marshal.loads(data[len(magic):])
            if isinstance(code, types.CodeType) and code.co_filename == str(path):
                _touch(cached)
                return code
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = compile(source, str(path), "exec")
    try:
        write_atomic(cached, magic + marshal.dumps(code))
    except OSError:  # a read-only cache: compiled again next time
        pass
    return code


def get_kernel(family: str, **shape: Any) -> Kernel:
    """The kernel of ``family`` for ``shape`` (one per process; rendered, and Numba
    imported, only when it must compile or is simulated).

    Parameters
    ----------
    family : str
        One of :data:`FAMILIES`.
    **shape
        The family's ``render`` arguments.

    Returns
    -------
    Kernel
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown kernel family {family!r}; expected one of "
                         f"{', '.join(sorted(FAMILIES))}")
    shape = {k: v.item() if isinstance(v, np.generic) else v for k, v in shape.items()}
    key = (family, tuple(sorted(shape.items())), simulated())
    with _KERNELS_LOCK:
        kernel = _KERNELS.get(key)
        if kernel is None:
            kernel = _KERNELS[key] = Kernel({"family": family, "shape": dict(shape)},
                                            functools.partial(_render, family, shape))
        return kernel


def _render(family: str, shape: dict[str, Any]) -> CUDADispatcher:
    """Numba's dispatcher of a family's kernel: rendered to a real file and compiled from
    there."""
    from numba import cuda

    rendered = _family_module(family).render(**shape)
    path = _source_file(rendered, hashlib.sha256(rendered.source.encode()).hexdigest())
    namespace = dict(rendered.namespace, __name__=f"swdask_kernel_{rendered.name}",
                     __file__=str(path))
    # The one exec of kernel text in the package: compiled from the real file's name, so
    # tracebacks and inspect read the file.
    exec(_code_of(rendered.source, path), namespace)
    function = namespace["kernel"]
    if rendered.link:
        return cuda.jit(link=[cuda.CUSource(s) for s in rendered.link],
                        **rendered.options)(function)
    return cuda.jit(**rendered.options)(function)


def jit(function: Callable[..., Any] | None = None, *, signatures: Sequence[str] = (),
        **options: Any) -> Kernel | Callable[[Callable[..., Any]], Kernel]:
    """``numba.cuda.jit`` for a hand-written kernel, with its compiled code kept on disk.

    Use as ``@jit`` or ``@jit(signatures=(...), **options)`` at module level; nothing is
    compiled or read until the first launch.  ``signatures`` are the argument types its
    launches pass, so that :func:`build` can compile it ahead (spec
    ``("kernel", {"name": "module:qualname"})``).  The kernel is the one
    :func:`hand_written` gives for that name.
    """
    def wrap(function):
        def make():
            from numba import cuda

            return cuda.jit(**options)(function)

        kernel = hand_written(f"{function.__module__}:{function.__qualname__}")
        kernel._make, kernel.signatures = make, tuple(signatures)
        return kernel

    return wrap(function) if function is not None else wrap


def hand_written(name: str) -> Kernel:
    """The hand-written kernel ``module:qualname`` (a :func:`jit` kernel) of this process,
    without importing its module: a launch whose specialisation is kept in the cache runs
    it through the driver, and the module (which imports Numba) is imported only when the
    kernel must compile, or to learn its signatures when the cache has none."""
    key = ("kernel", name, simulated())
    with _KERNELS_LOCK:
        kernel = _KERNELS.get(key)
        if kernel is None:
            module, _, attribute = name.partition(":")
            kernel = getattr(sys.modules.get(module), attribute, None)  # imported already
            if not isinstance(kernel, Kernel):
                kernel = Kernel({"kernel": name}, functools.partial(_import_kernel, name))
            _KERNELS[key] = kernel
        return kernel


def _import_kernel(name: str) -> CUDADispatcher:
    """Import a hand-written kernel's module and return its Numba dispatcher."""
    module, _, attribute = name.partition(":")
    declared = getattr(importlib.import_module(module), attribute)
    kernel = hand_written(name)
    if not isinstance(declared, Kernel):
        raise TypeError(f"{name} is not a kernel of swdask.kernels.cuda.compile.jit")
    if declared is not kernel:  # the table of kernels was replaced since (the tests)
        kernel._make, kernel.signatures = declared._make, declared.signatures
    return kernel._make()


def resolve(family: str, shape: dict[str, Any]) -> tuple[Kernel, tuple[str, ...]]:
    """``(kernel, signatures)`` of a build spec: a family's kernel for a shape, or a
    hand-written kernel (``family="kernel"``, ``shape={"name": "module:qualname"}``),
    whose signatures come from the cache where it holds them, else from its module."""
    if family == "kernel":
        kernel = hand_written(shape["name"])
        if not kernel.signatures and not kernel.simulated:
            kernel.load()
        if not kernel.signatures:
            _import_kernel(shape["name"]) if kernel.simulated else kernel.dispatcher
        return kernel, kernel.signatures
    return get_kernel(family, **shape), (signature(family, **shape),)


def _header(path: Path):
    """The JSON header of an entry, or None."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            if head[:4] != _MAGIC:
                return None
            return json.loads(handle.read(struct.unpack("<I", head[4:8])[0]))
    except (OSError, ValueError):
        return None


def preload() -> int:
    """Load every kernel saved in the cache for this device into this process and its
    CUDA context (a Dask worker at start-up, so that its first task launches at once);
    returns how many specialisations were loaded.  Entries of other devices or
    toolchains stay on disk (their keys do not match), damaged ones are deleted."""
    if simulated():
        return 0
    before = STATS["loaded"]
    seen = set()
    for path in kernel_dir().glob(f"*{_SUFFIX}"):
        spec = (_header(path) or {}).get("spec")
        if not spec or json.dumps(spec, sort_keys=True) in seen:
            continue
        seen.add(json.dumps(spec, sort_keys=True))
        try:
            kernel = (get_kernel(spec["family"], **spec["shape"]) if "family" in spec
                      else hand_written(spec["kernel"]))
            kernel.warm()
        except Exception:  # noqa: BLE001 - a kernel renamed or removed since: its entries age out
            continue
    return STATS["loaded"] - before


def load_ahead(specs: Iterable[tuple[str, dict[str, Any]]]) -> threading.Thread | None:
    """Load the saved kernels of build ``specs`` onto the current GPU on a thread
    (:meth:`Kernel.warm`), in order, while the caller goes on.

    A first launch of a kernel in a process loads its CUDA module: 0.36 s for the 11
    kernels of a 20-query search on an H200 host (cProfile of a first and a second search
    in one process, 2026-11-27), paid one launch at a time while the GPU waits.  On this
    thread the loads overlap the caller's reading and uploading and the GPU's work on the
    first kernels.  Returns the thread, or None in the simulator or with
    ``SWDASK_LOAD_AHEAD=0``.  A failure only leaves the loads to the launches.
    """
    if simulated() or os.environ.get(ENV_LOAD_AHEAD) == "0":
        return None
    specs = list(specs)

    def run():
        try:
            for family, shape in specs:
                resolve(family, shape)[0].warm()
        except Exception:  # noqa: BLE001 - an optimisation: the launches load what is missing
            logger.debug("loading kernels ahead failed", exc_info=True)

    thread = threading.Thread(target=run, name="swdask-kernel-load", daemon=True)
    thread.start()
    return thread


def _family_module(family: str):
    return importlib.import_module(f"{__package__}.{FAMILIES[family]}")


def signature(family: str, **shape: Any) -> str:
    """The argument types a launch of ``family`` passes (the family's ``signature``)."""
    return _family_module(family).signature(**shape)


# ---------------------------------------------------------------------------------------
# Building ahead of time, in parallel.

def is_cached(family: str, **shape: Any) -> bool:
    """Whether the kernel of a build spec is saved for this device, for every declared
    signature (or nothing needs compiling: the simulator)."""
    kernel, signatures = resolve(family, shape)
    return kernel.simulated or all(kernel.has(declared) for declared in signatures)


def _build_one(family: str, shape: dict) -> tuple:
    """Compile and save one build spec's kernel; ``(family, shape, seconds)``."""
    start = time.perf_counter()
    kernel, signatures = resolve(family, shape)
    for declared in signatures:
        kernel.compile(declared)
    return family, shape, time.perf_counter() - start


_BUILDING = threading.Lock()


def build_command(share: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The command line of one build process for ``share`` (``(family, shape)`` pairs).

    ``-P``: the working folder is not put first on the child's ``sys.path``.  Run from a
    source checkout over an installed package, the checkout's ``swdask/`` (which holds no
    ``kernels``) would otherwise shadow the package, and every child would fail.
    """
    return [sys.executable, "-P", "-m", "swdask.kernels.cuda.compile", json.dumps(share)]


def build(
    specs: Iterable[tuple[str, dict[str, Any]]], *, jobs: int | None = None,
    progress: Callable[[str, dict[str, Any], float], object] | None = None,
) -> list[tuple[str, dict[str, Any], float]]:
    """Compile the kernels of ``specs`` that are not saved yet, in parallel processes.

    Numba compiles under one lock per process, so parallel builds need processes; they
    are plain subprocesses (``python -m swdask.kernels.cuda.compile``), which also work
    inside Dask's daemonic worker processes, where ``multiprocessing`` may not start
    children.

    Parameters
    ----------
    specs : iterable of (str, dict)
        ``(family, shape)`` pairs, or ``("kernel", {"name": "module:qualname"})`` for a
        hand-written kernel with declared signatures (:func:`jit`).
    jobs : int, optional
        Processes (default: the CPU cores, at most the kernels missing).  With one
        kernel missing it is compiled in this process.
    progress : callable, optional
        Called with ``(family, shape, seconds)`` as each kernel is built.

    Returns
    -------
    list of (str, dict, float)
        What was built and how long each took.

    Raises
    ------
    Exception
        A kernel's compile error: a kernel whose build process failed is compiled again
        in this process, which raises what the compiler raised.
    """
    unique = {(family, tuple(sorted(shape.items()))) for family, shape in specs}
    with _BUILDING:  # threads of one process wait for one build, not start their own
        missing = [(f, dict(s)) for f, s in sorted(unique) if not is_cached(f, **dict(s))]
        if not missing:
            return []
        jobs = max(1, min(jobs or os.cpu_count() or 1, len(missing)))
        built = []
        if jobs == 1:
            for family, shape in missing:
                built.append(_build_one(family, shape))
                if progress:
                    progress(*built[-1])
        else:
            import subprocess

            shares = [missing[k::jobs] for k in range(jobs)]
            children = [subprocess.Popen(build_command(share), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True) for share in shares]
            failed = []
            for child, share in zip(children, shares):  # every child waited for and closed
                out, err = child.communicate()
                for line in out.splitlines():
                    if line.startswith("{"):
                        done = json.loads(line)
                        built.append((done["family"], done["shape"], done["seconds"]))
                        if progress:
                            progress(*built[-1])
                if child.returncode != 0:
                    last = (err.strip().splitlines() or ["no output"])[-1]
                    failed.append((share, last))
            # A build process makes a CUDA context, and many processes at once can run out
            # of device memory for them (8 test processes x 32 builds on one GPU did:
            # cuDevicePrimaryCtxRetain, CUDA_ERROR_OUT_OF_MEMORY): what a process left
            # unbuilt is built here, one kernel at a time; a kernel that cannot compile
            # raises its own error.
            for share, last in failed:
                logger.warning("a CUDA kernel build process failed (%s); building its %d "
                               "kernels in this process", last, len(share))
                for family, shape in share:
                    resolve(family, shape)[0].load()  # what the process saved before failing
                    if not is_cached(family, **shape):
                        built.append(_build_one(family, shape))
                        if progress:
                            progress(*built[-1])
        for family, shape, _ in built:
            resolve(family, shape)[0].load()
        return built


def _main(argv) -> int:
    """Build the kernels of a JSON list of ``[family, shape]`` (one :func:`build` share),
    printing a JSON line per kernel."""
    for family, shape in json.loads(argv[0]):
        family, shape, seconds = _build_one(family, shape)
        print(json.dumps({"family": family, "shape": shape, "seconds": round(seconds, 3)}),
              flush=True)
    return 0


if __name__ == "__main__":
    # Through the package's module, not this ``__main__`` copy: one table of kernels.
    from swdask.kernels.cuda.compile import _main as main

    sys.exit(main(sys.argv[1:]))
