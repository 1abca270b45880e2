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
- **Compile once per machine**: a :class:`Kernel` wraps Numba's dispatcher.  After a
  launch that compiled a new specialisation, the specialisation is saved, machine code
  (cubin) included, as one file ``<key>-<types>.nbk``; the next process loads it
  (about 7 ms a kernel, measured) instead of compiling.  A linked CUDA C++ source is
  part of the key, and the cubin is already linked, so the refusal above does not apply
  to what is saved.
- **Key**: a SHA-256 over everything that changes the machine code: the rendered text,
  the values it reads from its namespace, the linked sources, the jit options, the
  source of every module of ``swdask.kernels`` (device functions live there), the
  argument types, the device's compute capability, and the versions of Numba,
  numba-cuda, the CUDA driver and NVVM.  An entry whose header does not match its key,
  that fails its checksum or does not unpickle is deleted and rebuilt, never trusted.
- **Safe for concurrent writers**: an entry is written to a temporary name in the same
  folder and renamed into place (atomic on POSIX); readers never see a partial entry.
  Two processes compiling the same kernel both write it; the last rename wins, and both
  wrote the same thing.
- **Bounded**: after a write the folder (entries, and the rendered texts and their
  bytecode under ``source/``) is pruned to 75% of ``SWDASK_KERNEL_CACHE_MB`` (default
  1024) by least recent use (a load refreshes a file's time).
- **Parallel builds**: :func:`build` compiles missing kernels in worker processes
  (Numba holds one compiler lock per process, so threads would take turns); a job calls
  it with the shapes it will launch, ``swdask warmup`` with every shape there is.

The cache lives in ``platformdirs.user_cache_dir("swdask")/cuda`` unless
``SWDASK_CACHE_DIR`` names another root.  In Numba's CUDA simulator nothing is compiled,
so nothing is cached; kernels are still rendered to files and run from there.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import logging
import marshal
import os
import pickle
import struct
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numba import config, cuda

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from numba.cuda.dispatcher import CUDADispatcher

#: Bump when the entry layout changes: older entries then stop matching their key.
FORMAT = 1
#: Environment variables read here.
ENV_CACHE_DIR = "SWDASK_CACHE_DIR"
ENV_DUMP = "SWDASK_DUMP_KERNELS"
ENV_MAX_MB = "SWDASK_KERNEL_CACHE_MB"
#: ``0`` turns :func:`load_ahead` off (kernels then load at their first launch).
ENV_LOAD_AHEAD = "SWDASK_LOAD_AHEAD"
DEFAULT_MAX_MB = 1024
_MAGIC = b"SWDK"
_SUFFIX = ".nbk"

#: Kernel families: name -> module (in this package) whose ``render(**shape)`` returns a
#: :class:`Rendered` and whose ``SIGNATURE`` gives the argument types a launch passes.
FAMILIES = {
    "inter_task": "inter_task",
    "inter_task_dpx": "inter_task_dpx",
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
    """

    name: str
    source: str
    namespace: dict = field(default_factory=dict)
    link: tuple = ()


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


_SHARED_KEY = None


def kernels_digest(package: Path | None = None) -> str:
    """SHA-256 of every source file of ``swdask.kernels`` (or of ``package``): device
    functions, constants and generators live there, so an edit to any of them must miss
    the cache."""
    package = package or Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _toolchain() -> dict:
    """Versions that change the machine code for the same kernel text."""
    import numba

    facts = {"format": FORMAT, "numba": numba.__version__}
    try:
        from importlib.metadata import version

        facts["numba-cuda"] = version("numba-cuda")
    except Exception:  # numba's bundled CUDA target: numba's version covers it
        facts["numba-cuda"] = None
    from numba.cuda.cudadrv import nvvm
    from numba.cuda.cudadrv.driver import driver

    facts["driver"] = driver.get_version()
    facts["nvvm"] = nvvm.NVVM().get_version()
    return facts


def _shared_key() -> str:
    """The part of every key that is the same for all kernels of this process."""
    global _SHARED_KEY
    if _SHARED_KEY is None:
        _SHARED_KEY = json.dumps({"kernels": kernels_digest(), **_toolchain()},
                                 sort_keys=True, default=str)
    return _SHARED_KEY


def _describe(value) -> str:
    """A namespace value as key text: constants by value, code objects by name (their
    source is in :func:`kernels_digest`)."""
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, (int, float, str, bytes, bool)) or hasattr(value, "dtype"):
        return f"{type(value).__name__} {value!r}"
    name = getattr(value, "__qualname__", None) or getattr(getattr(value, "py_func", None),
                                                           "__qualname__", None)
    if name is None and hasattr(value, "name"):  # a declared external function
        name = f"extern {value.name}"
    return f"{type(value).__name__} {getattr(value, '__module__', '')}.{name}"


# ---------------------------------------------------------------------------------------
# Entries on disk.

def entry_bytes(key: str, signature: str, payload: bytes,
                spec: dict[str, Any] | None = None) -> bytes:
    """An entry: magic, header length, a JSON header (format, key, argument types, the
    payload's SHA-256, and ``spec``, what re-creates the kernel for :func:`preload`),
    the payload."""
    header = json.dumps({"format": FORMAT, "key": key, "signature": signature, "spec": spec,
                         "sha256": hashlib.sha256(payload).hexdigest()}).encode()
    return _MAGIC + struct.pack("<I", len(header)) + header + payload


def read_entry(path: Path, key: str) -> tuple[str, bytes] | None:
    """``(signature, payload)`` of an entry, or None (and the entry deleted) when it is
    corrupted, truncated or written for another key."""
    try:
        data = path.read_bytes()
        if data[:4] != _MAGIC:
            raise ValueError("not an entry")
        (size,) = struct.unpack("<I", data[4:8])
        header = json.loads(data[8:8 + size])
        payload = data[8 + size:]
        if (header.get("format") != FORMAT or header.get("key") != key
                or hashlib.sha256(payload).hexdigest() != header.get("sha256")):
            raise ValueError("foreign or corrupted entry")
        return header["signature"], payload
    except FileNotFoundError:
        return None
    except Exception:
        _discard(path)
        return None


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


def _pack(kernel) -> bytes:
    """A compiled Numba ``_Kernel`` as bytes: its state and its code library's, the
    cubin for this device included.  The library's linked files are left out (the cubin
    is already linked; Numba refuses to pickle them) and so is its LLVM IR (two thirds
    of the bytes; nothing needs it once there is a cubin)."""
    library = kernel._codelibrary
    library.get_cubin(library._ensure_cc(None))
    linked = library._linking_files
    library._linking_files = set()
    try:
        library_state = library._reduce_states()
    finally:
        library._linking_files = linked
    library_state["llvm_strs"] = []
    kernel_state = dict(kernel._reduce_states(), codelibrary=None)
    return pickle.dumps((kernel_state, library_state), protocol=pickle.HIGHEST_PROTOCOL)


def _unpack(payload: bytes):
    """The inverse of :func:`_pack`: a launchable ``_Kernel`` (nothing compiled)."""
    from numba.cuda.codegen import CUDACodeLibrary
    from numba.cuda.dispatcher import _Kernel

    kernel_state, library_state = pickle.loads(payload)
    library = CUDACodeLibrary._rebuild(**library_state)
    return _Kernel._rebuild(**dict(kernel_state, codelibrary=library))


# ---------------------------------------------------------------------------------------
# Kernels.

#: Counters of this process (``swdask warmup`` and the tests read them).
STATS = {"compiled": 0, "loaded": 0, "discarded": 0, "compile_seconds": 0.0}


class Kernel:
    """A CUDA kernel whose compiled specialisations persist across processes.

    Launch it as a Numba kernel: ``kernel[grid, block, stream](*args)``.  The first launch
    in a process loads every specialisation saved for this kernel and device; a launch
    that makes Numba compile a new one saves it.  In the simulator it only records the
    argument types of each launch (:attr:`launched`), which the tests compare with the
    declared signatures.

    Parameters
    ----------
    dispatcher : numba.cuda.dispatcher.CUDADispatcher
        Numba's kernel (compiles lazily; unused until the first launch).
    identity : str
        Everything besides the shared toolchain facts that decides the machine code.
    spec : dict, optional
        How to get this kernel again (``{"family": ..., "shape": ...}`` or
        ``{"kernel": "module:qualname"}``), kept in its entries for :func:`preload`.
    """

    def __init__(self, dispatcher: CUDADispatcher, identity: str,
                 spec: dict[str, Any] | None = None) -> None:
        self.dispatcher = dispatcher
        self.identity = identity
        self.spec = spec
        self.simulated = bool(config.ENABLE_CUDASIM)
        self.launched = set()
        self._key = None
        self._loaded = False
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"Kernel({self.identity.splitlines()[0]!r})"

    @property
    def py_func(self) -> Callable[..., Any]:
        return self.dispatcher.py_func

    def key(self) -> str:
        """The entry key: SHA-256 of the identity, the toolchain and the device's
        compute capability."""
        if self._key is None:
            cc = cuda.get_current_device().compute_capability
            text = "\n".join([self.identity, _shared_key(), f"cc {cc}"])
            self._key = hashlib.sha256(text.encode()).hexdigest()
        return self._key

    def _path(self, signature: str) -> Path:
        tag = hashlib.sha256(signature.encode()).hexdigest()[:16]
        return kernel_dir() / f"{self.key()}-{tag}{_SUFFIX}"

    def load(self) -> int:
        """Add the saved specialisations the dispatcher lacks; returns how many."""
        if self.simulated:
            return 0
        with self._lock:
            self._loaded = True
            have = {str(tuple(argtypes)) for argtypes in self.dispatcher.overloads}
            loaded = 0
            for path in kernel_dir().glob(f"{self.key()}-*{_SUFFIX}"):
                entry = read_entry(path, self.key())
                if entry is None:
                    STATS["discarded"] += 1
                    continue
                if entry[0] in have:
                    continue
                try:
                    kernel = _unpack(entry[1])
                    self.dispatcher.add_overload(kernel, kernel.argument_types)
                except Exception:
                    _discard(path)
                    STATS["discarded"] += 1
                    continue
                try:
                    os.utime(path)  # least recently used goes first when pruning
                except OSError:
                    pass
                loaded += 1
            STATS["loaded"] += loaded
            logger.debug("kernel %s: %d compiled shapes loaded from the cache", self.identity,
                         loaded)
            return loaded

    def save_new(self) -> int:
        """Save the specialisations compiled since the last load or save."""
        with self._lock:
            saved = 0
            for argtypes, kernel in list(self.dispatcher.overloads.items()):
                signature = str(tuple(argtypes))
                path = self._path(signature)
                if path.exists():
                    continue
                try:
                    write_atomic(path, entry_bytes(self.key(), signature, _pack(kernel),
                                                   self.spec))
                    saved += 1
                except Exception:  # noqa: BLE001 - the cache is an optimisation only
                    # A read-only or full cache, or a kernel Numba will not serialise,
                    # costs a compile in a later process, never this launch.
                    pass
        if saved:
            try:
                prune()
            except OSError:
                pass
        return saved

    def compile(self, signature: str) -> None:
        """Make the specialisation for ``signature`` ready (load or compile, then save)."""
        if self.simulated:
            return
        self._ensure_loaded()
        from numba.core import sigutils

        argtypes, _ = sigutils.normalize_signature(signature)
        if tuple(argtypes) not in self.dispatcher.overloads:
            start = time.perf_counter()
            self.dispatcher.compile(tuple(argtypes))
            STATS["compiled"] += 1
            STATS["compile_seconds"] += time.perf_counter() - start
            logger.info("compiled CUDA kernel %s in %.1f s", self.identity,
                        time.perf_counter() - start)
            self.save_new()

    def _ensure_loaded(self):
        if not self._loaded:
            self.load()

    def warm(self) -> None:
        """Load the saved specialisations and put their machine code on the current GPU
        (the CUDA module a first launch would load), so that a first launch only launches.
        :func:`load_ahead` calls it on a thread; a launch of this kernel meanwhile waits
        for it (the kernel's lock), so a module is never loaded twice."""
        if self.simulated:
            return
        with self._lock:
            self._ensure_loaded()
            for compiled in list(self.dispatcher.overloads.values()):
                _make_resident(compiled._codelibrary.get_cufunc())

    def __getitem__(self, launch_config):
        if self.simulated:
            return _RecordingLaunch(self, self.dispatcher[launch_config])
        self._ensure_loaded()
        with quiet_occupancy():  # Numba may say it as the grid is set, or at the launch
            return _Launch(self, self.dispatcher[launch_config])


def _make_resident(cufunc) -> None:
    """Load a kernel's machine code into the current context now.

    numba-cuda 0.30 keeps a kernel as a CUDA library kernel (``CUkernel``); under CUDA's
    lazy loading (the driver's default) finding it loads nothing, and its first launch
    loads it while the GPU waits: in a cProfile of a first and a second 20-query search in
    one process (H100, 2026-11-27) the 156 launches of the first took 0.38 s of their own
    time, those of the second 0.01 s.  ``cuFuncLoad`` on the context's function does the
    load here, on :func:`load_ahead`'s thread.  Anything unexpected (another handle
    type, an older driver) leaves the load to the launch.
    """
    try:
        from cuda.bindings import driver as cu

        error, function = cu.cuKernelGetFunction(cufunc.handle)
        if error == cu.CUresult.CUDA_SUCCESS:
            cu.cuFuncLoad(function)
    except Exception:  # noqa: BLE001, S110 - an optimisation: the launch loads it
        pass


@contextlib.contextmanager
def quiet_occupancy() -> Iterator[None]:
    """Silence Numba's note that a grid is small (``NumbaPerformanceWarning``: "Grid size
    ... under-utilization"): small launches are legitimate here (a small database, the
    last few pairs of a block), and the note reached a command's standard error.  Every
    launch of a kernel of this room runs under it (:class:`_Launch`)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Grid size .* under-utilization")
        yield


class _Launch:
    """A configured launch that saves any specialisation it made Numba compile."""

    __slots__ = ("kernel", "configured")

    def __init__(self, kernel, configured):
        self.kernel = kernel
        self.configured = configured

    def __call__(self, *args):
        dispatcher = self.kernel.dispatcher
        before = len(dispatcher.overloads)
        start = time.perf_counter()
        # Not while load_ahead's thread loads this kernel's module.
        with self.kernel._lock, quiet_occupancy():
            self.configured(*args)
        if len(dispatcher.overloads) != before:
            seconds = time.perf_counter() - start
            STATS["compiled"] += len(dispatcher.overloads) - before
            STATS["compile_seconds"] += seconds
            logger.info("compiled CUDA kernel %s in %.1f s (saved for later processes)",
                        self.kernel.identity, seconds)
            self.kernel.save_new()


class _RecordingLaunch(_Launch):
    """A simulator launch that records its argument types (nothing is compiled)."""

    def __call__(self, *args):
        from numba import typeof

        self.kernel.launched.add(tuple(typeof(getattr(a, "_ary", a)) for a in args))
        self.configured(*args)


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


def identity_text(kind: str, name: str, source: str, namespace: dict[str, Any],
                  link: Iterable[str], options: dict[str, Any]) -> str:
    """What decides a kernel's machine code besides the shared toolchain facts: its text,
    the values its text reads, the linked sources and the jit options."""
    lines = [f"{kind} {name}", source]
    lines += [f"{k} = {_describe(v)}" for k, v in sorted(namespace.items())]
    lines += [f"link {text}" for text in link]
    lines += [f"option {k} = {v!r}" for k, v in sorted(options.items())]
    return "\n".join(lines)


def get_kernel(family: str, **shape: Any) -> Kernel:
    """The kernel of ``family`` for ``shape`` (rendered and wrapped once per process).

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
    key = (family, tuple(sorted(shape.items())), bool(config.ENABLE_CUDASIM))
    with _KERNELS_LOCK:
        kernel = _KERNELS.get(key)
        if kernel is None:
            module = _family_module(family)
            rendered = module.render(**shape)
            identity = identity_text("family", rendered.name, rendered.source,
                                 rendered.namespace, rendered.link, {})
            digest = hashlib.sha256(identity.encode()).hexdigest()
            path = _source_file(rendered, digest)
            namespace = dict(rendered.namespace, __name__=f"swdask_kernel_{rendered.name}",
                             __file__=str(path))
            # The one exec of kernel text in the package: compiled from the real file's
            # name, so tracebacks and inspect read the file.
            exec(_code_of(rendered.source, path), namespace)
            function = namespace["kernel"]
            if rendered.link:
                dispatcher = cuda.jit(link=[cuda.CUSource(s) for s in rendered.link])(function)
            else:
                dispatcher = cuda.jit(function)
            kernel = _KERNELS[key] = Kernel(dispatcher, identity,
                                            {"family": family, "shape": dict(shape)})
        return kernel


def jit(function: Callable[..., Any] | None = None, *, signatures: Sequence[str] = (),
        **options: Any) -> Kernel | Callable[[Callable[..., Any]], Kernel]:
    """``numba.cuda.jit`` for a hand-written kernel, with its compiled code kept on disk.

    Use as ``@jit`` or ``@jit(signatures=(...), **options)`` at module level; nothing is
    compiled or read until the first launch.  ``signatures`` are the argument types its
    launches pass, so that :func:`build` can compile it ahead (spec
    ``("kernel", {"name": "module:qualname"})``).
    """
    def wrap(function):
        import inspect

        identity = identity_text("kernel", f"{function.__module__}.{function.__qualname__}",
                                 inspect.getsource(function), {}, (), options)
        kernel = Kernel(cuda.jit(**options)(function), identity,
                        {"kernel": f"{function.__module__}:{function.__qualname__}"})
        kernel.signatures = tuple(signatures)
        return kernel

    return wrap(function) if function is not None else wrap


def resolve(family: str, shape: dict[str, Any]) -> tuple[Kernel, tuple[str, ...]]:
    """``(kernel, signatures)`` of a build spec: a family's kernel for a shape, or a
    hand-written kernel (``family="kernel"``, ``shape={"name": "module:qualname"}``)."""
    if family == "kernel":
        module, _, name = shape["name"].partition(":")
        kernel = getattr(importlib.import_module(module), name)
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
    """Load every kernel saved in the cache for this device into this process (a Dask
    worker at start-up, so that its first task launches at once); returns how many
    specialisations were loaded.  Entries of other devices or toolchains stay on disk
    (their keys do not match), damaged ones are deleted."""
    if config.ENABLE_CUDASIM:
        return 0
    before = STATS["loaded"]
    seen = set()
    for path in kernel_dir().glob(f"*{_SUFFIX}"):
        spec = (_header(path) or {}).get("spec")
        if not spec or json.dumps(spec, sort_keys=True) in seen:
            continue
        seen.add(json.dumps(spec, sort_keys=True))
        try:
            if "family" in spec:
                kernel = get_kernel(spec["family"], **spec["shape"])
            else:
                module, _, name = spec["kernel"].partition(":")
                kernel = getattr(importlib.import_module(module), name)
            kernel.load()
        except Exception:  # a kernel renamed or removed since: its entries age out
            continue
    return STATS["loaded"] - before


def load_ahead(specs: Iterable[tuple[str, dict[str, Any]]]) -> threading.Thread | None:
    """Load the saved kernels of build ``specs`` onto the current GPU on a thread
    (:meth:`Kernel.warm`), in order, while the caller goes on.

    A first launch of a kernel in a process loads its CUDA module: 0.36 s for the 11
    kernels of a 20-query search on an H200 host (cProfile of a first and a second search
    in one process, 2026-11-27), paid one launch at a time while the GPU waits.  On this
    thread the loads overlap the caller's reading and uploading and the GPU's work on the
    first kernels.  Call it once the process's CUDA context exists (the thread makes it
    current; starting the driver from two threads at once is what
    :func:`swdask.backend.start_gpu` prevents).  Returns the thread, or None in the
    simulator or with ``SWDASK_LOAD_AHEAD=0``.  A failure only leaves the loads to the
    launches.
    """
    if config.ENABLE_CUDASIM or os.environ.get(ENV_LOAD_AHEAD) == "0":
        return None
    specs = list(specs)

    def run():
        try:
            cuda.current_context()
            for family, shape in specs:
                resolve(family, shape)[0].warm()
        except Exception:  # noqa: BLE001 - an optimisation: the launches load what is missing
            logger.debug("loading kernels ahead failed", exc_info=True)

    thread = threading.Thread(target=run, name="swdask-kernel-load", daemon=True)
    thread.start()
    return thread


def _family_module(family: str):
    if family not in FAMILIES:
        raise ValueError(f"unknown kernel family {family!r}; expected one of "
                         f"{', '.join(sorted(FAMILIES))}")
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
    if kernel.simulated:
        return True
    from numba.core import sigutils

    for declared in signatures:
        argtypes = tuple(sigutils.normalize_signature(declared)[0])
        if argtypes not in kernel.dispatcher.overloads and \
                not kernel._path(str(argtypes)).exists():
            return False
    return True


def _build_one(family: str, shape: dict) -> tuple:
    """Compile and save one build spec's kernel; ``(family, shape, seconds)``."""
    start = time.perf_counter()
    kernel, signatures = resolve(family, shape)
    for declared in signatures:
        kernel.compile(declared)
    return family, shape, time.perf_counter() - start


_BUILDING = threading.Lock()


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
    RuntimeError
        If a build process fails (its last error line is in the message).
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
            import sys

            shares = [missing[k::jobs] for k in range(jobs)]
            children = [subprocess.Popen([sys.executable, "-m", "swdask.kernels.cuda.compile",
                                          json.dumps(share)],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True) for share in shares]
            for child in children:
                out, err = child.communicate()
                for line in out.splitlines():
                    if line.startswith("{"):
                        done = json.loads(line)
                        built.append((done["family"], done["shape"], done["seconds"]))
                        if progress:
                            progress(*built[-1])
                if child.returncode != 0:
                    last = (err.strip().splitlines() or ["no output"])[-1]
                    raise RuntimeError(f"building CUDA kernels failed: {last}")
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
    import sys

    # Through the package's module, not this ``__main__`` copy: one table of kernels.
    from swdask.kernels.cuda.compile import _main as main

    sys.exit(main(sys.argv[1:]))
