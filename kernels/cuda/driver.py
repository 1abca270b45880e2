"""The CUDA driver through :mod:`ctypes`: what a launch of a cached kernel needs, without
Numba.

Why
---
Importing Numba and its CUDA target takes 0.55-0.65 s on an H100 host (``python -c
"import numba.cuda"``: 0.61-0.66 s as a whole process, three runs, 2026-11-28) and holds
the interpreter lock all along, so beside a command's own imports it took 1.0 s before
the first kernel of a CLI search could start.  A kernel whose machine code is in the
cache (:mod:`~swdask.kernels.cuda.compile`) needs none of it: this module loads the
cubin and launches it with Numba's argument layout, and Numba is imported only to
compile a kernel the cache lacks.

What is here
------------
The device's primary context (the one Numba uses, so memory and streams pass between
the two), modules and functions, launches, streams, events, device memory and
page-locked host memory, and :class:`DeviceArray`, a device array with the part of
Numba's API that the launchers use.  Device 0 is the device, as for Numba: a worker of
a GPU cluster sees one GPU (``CUDA_VISIBLE_DEVICES``).

Freeing follows Numba's rule: memory whose array is gone is freed in batches (freeing
synchronizes the device), never inside :func:`defer_cleanup`, and not at all at exit,
where the driver's teardown frees everything at once.

Importing this module costs a few milliseconds (ctypes; NumPy loads with the first array),
so that a command can start the driver (:func:`start_early`) before its own imports.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import os
import sys
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

_P = ctypes.c_void_p
_SIZE = ctypes.c_size_t
_INT = ctypes.c_int
_UINT = ctypes.c_uint
_DEVPTR = ctypes.c_uint64
#: cuLaunchKernel's ``extra`` keys: the parameters as one buffer, and its size.
_LAUNCH_BUFFER_POINTER, _LAUNCH_BUFFER_SIZE = 1, 2

#: Argument types of the driver functions used (CUDA 12 names; ``CUdeviceptr`` is 64-bit).
_PROTOTYPES = {
    "cuInit": (_UINT,),
    "cuGetErrorName": (_INT, ctypes.POINTER(ctypes.c_char_p)),
    "cuDriverGetVersion": (ctypes.POINTER(_INT),),
    "cuDeviceGet": (ctypes.POINTER(_INT), _INT),
    "cuDeviceGetCount": (ctypes.POINTER(_INT),),
    "cuDeviceGetAttribute": (ctypes.POINTER(_INT), _INT, _INT),
    "cuDevicePrimaryCtxRetain": (ctypes.POINTER(_P), _INT),
    "cuCtxSetCurrent": (_P,),
    "cuModuleLoadData": (ctypes.POINTER(_P), _P),
    "cuModuleGetFunction": (ctypes.POINTER(_P), _P, ctypes.c_char_p),
    "cuFuncGetParamInfo": (_P, _SIZE, ctypes.POINTER(_SIZE), ctypes.POINTER(_SIZE)),
    "cuFuncLoad": (_P,),
    "cuFuncIsLoaded": (ctypes.POINTER(_INT), _P),
    "cuLaunchKernel": (_P, _UINT, _UINT, _UINT, _UINT, _UINT, _UINT, _UINT, _P,
                       ctypes.POINTER(_P), ctypes.POINTER(_P)),
    "cuLaunchCooperativeKernel": (_P, _UINT, _UINT, _UINT, _UINT, _UINT, _UINT, _UINT, _P,
                                  ctypes.POINTER(_P)),
    "cuMemAlloc_v2": (ctypes.POINTER(_DEVPTR), _SIZE),
    "cuMemFree_v2": (_DEVPTR,),
    "cuMemHostAlloc": (ctypes.POINTER(_P), _SIZE, _UINT),
    "cuMemFreeHost": (_P,),
    "cuMemcpyHtoDAsync_v2": (_DEVPTR, _P, _SIZE, _P),
    "cuMemcpyDtoHAsync_v2": (_P, _DEVPTR, _SIZE, _P),
    "cuStreamCreate": (ctypes.POINTER(_P), _UINT),
    "cuStreamDestroy_v2": (_P,),
    "cuStreamSynchronize": (_P,),
    "cuStreamWaitEvent": (_P, _P, _UINT),
    "cuEventCreate": (ctypes.POINTER(_P), _UINT),
    "cuEventDestroy_v2": (_P,),
    "cuEventRecord": (_P, _P),
    "cuEventSynchronize": (_P,),
    "cuEventElapsedTime": (ctypes.POINTER(ctypes.c_float), _P, _P),
}
#: ``cuDeviceGetAttribute`` codes.
ATTRIBUTES = {"multiprocessors": 16, "threads_per_multiprocessor": 39, "cc_major": 75,
              "cc_minor": 76}
_EVENT_DISABLE_TIMING = 2
#: Pending frees that trigger a batch (count, bytes): Numba's defaults.
_FLUSH_COUNT = 10
_FLUSH_BYTES = 1 << 30


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


_lock = threading.RLock()
_library = None
#: Primary contexts made by this layer, by device index (kept for the process).
_contexts: dict[int, int] = {}
_thread = threading.local()
#: The thread of :func:`start_early`, once started, and its own lock (``_lock`` is held
#: through the driver's start).
_early: threading.Thread | None = None
_early_lock = threading.Lock()


def simulated() -> bool:
    """Whether Numba's CUDA simulator stands in for a GPU, told without importing Numba
    where it is not imported yet (``NUMBA_ENABLE_CUDASIM``, which Numba reads)."""
    configured = getattr(sys.modules.get("numba.core.config"), "ENABLE_CUDASIM", None)
    if configured is not None:  # (not while another thread is still importing Numba)
        return bool(configured)
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def start_early() -> None:
    """Start the driver and device 0's primary context (:func:`context`) on a daemon
    thread, at once: ``cuInit`` and ``cuDevicePrimaryCtxRetain`` take 0.47-0.48 s on a
    2 x H200 host and release the GIL, so they run beside whatever the caller imports
    next.  A command calls this first (``swdask.cli.common.start_gpu_early``): through
    ``swdask.backend``, which imports NumPy and the kernel cache's module first, the
    driver started 0.12-0.18 s into a search and the search waited for it until 0.66 s
    (``cli_timeline.py``).  Every later :func:`context` call waits for this one (the
    layer's lock); a failure is left to them.  Nothing under the simulator, where no
    driver library loads, or when started already."""
    global _early
    with _early_lock:
        if _early is not None or simulated():
            return
        _early = threading.Thread(target=_quiet_context, name="swdask-cuda-init", daemon=True)
        _early.start()


def _quiet_context() -> None:
    try:
        context()
    except CudaError:
        pass


def library() -> ctypes.CDLL | None:
    """The CUDA driver library where Numba looks for it on Linux (``NUMBA_CUDA_DRIVER``,
    else ``libcuda.so`` and ``libcuda.so.1`` on the loader's path and in ``/usr/lib`` and
    ``/usr/lib64``), with its prototypes set; None where none loads."""
    global _library
    if _library is not None:
        return _library
    if not sys.platform.startswith("linux"):
        return None
    if os.environ.get("NUMBA_CUDA_DRIVER"):
        paths = [os.environ["NUMBA_CUDA_DRIVER"]]
    else:
        paths = [path for name in ("libcuda.so", "libcuda.so.1")
                 for path in (name, f"/usr/lib/{name}", f"/usr/lib64/{name}")]
    for path in paths:
        try:
            found = ctypes.CDLL(path)
        except OSError:
            continue
        for name, argtypes in _PROTOTYPES.items():
            function = getattr(found, name, None)
            if function is not None:
                function.argtypes = argtypes
                function.restype = _INT
        _library = found
        return found
    return None


def _call(name: str, *args: Any) -> None:
    lib = library()
    if lib is None:
        raise CudaError("no CUDA driver library (libcuda.so) could be loaded")
    result = getattr(lib, name)(*args)
    if result:
        raise CudaError(f"{name} failed: {error_name(result)}")


def error_name(code: int) -> str:
    """The driver's name of error ``code`` (``CUDA_ERROR_OUT_OF_MEMORY``...)."""
    name = ctypes.c_char_p()
    lib = library()
    if lib is not None and not lib.cuGetErrorName(code, ctypes.byref(name)) and name.value:
        return name.value.decode()
    return f"CUDA error {code}"


def select_device(index: int) -> None:
    """Make GPU ``index`` (of those this process sees) the calling thread's device: the
    layer's later calls on this thread use its primary context.  Device 0 is every
    thread's default (a GPU worker process sees only its own GPU, as device 0; the long
    alignment's in-process workers ``gpu-<index>`` select theirs)."""
    _thread.device = int(index)


def current_device() -> int:
    """The calling thread's device (:func:`select_device`; 0 by default)."""
    return getattr(_thread, "device", 0)


def context() -> int:
    """The calling thread's device's primary context (made on the first call, kept for
    the process), current on the calling thread; returns its handle."""
    index = getattr(_thread, "device", 0)
    handle = _contexts.get(index)
    if handle is None:
        with _lock:
            handle = _contexts.get(index)
            if handle is None:
                device, made = _INT(), _P()
                _call("cuInit", 0)
                _call("cuDeviceGet", ctypes.byref(device), index)
                _call("cuDevicePrimaryCtxRetain", ctypes.byref(made), device)
                handle = _contexts[index] = made.value
    if getattr(_thread, "context", None) != handle:
        _call("cuCtxSetCurrent", _P(handle))
        _thread.context = handle
    return handle


def attribute(name: str) -> int:
    """An attribute of the calling thread's device (:data:`ATTRIBUTES`), asked once per
    process and device: the launcher reads the multiprocessors each batch and the compute
    capability each launch plan."""
    return _attribute(name, current_device())


@functools.cache
def _attribute(name: str, index: int) -> int:
    value, device = _INT(), _INT()
    context()
    _call("cuDeviceGet", ctypes.byref(device), index)
    _call("cuDeviceGetAttribute", ctypes.byref(value), ATTRIBUTES[name], device)
    return value.value


def compute_capability() -> tuple[int, int]:
    """The calling thread's device's compute capability, e.g. ``(9, 0)``."""
    return attribute("cc_major"), attribute("cc_minor")


def device_count() -> int:
    """The CUDA devices this process sees (``CUDA_VISIBLE_DEVICES``); 0 without a driver
    or where it cannot start."""
    count = _INT()
    try:
        _call("cuInit", 0)
        _call("cuDeviceGetCount", ctypes.byref(count))
    except CudaError:
        return 0
    return count.value


def driver_version() -> int:
    """The CUDA driver's version as an integer (12080 for 12.8)."""
    version = _INT()
    _call("cuDriverGetVersion", ctypes.byref(version))
    return version.value


# --------------------------------------------------------------------------------------
# Modules and launches.

class Function:
    """One kernel of a loaded cubin, and the byte sizes of its parameters."""

    def __init__(self, cubin: bytes, name: str) -> None:
        context()
        self._image = ctypes.create_string_buffer(cubin, len(cubin))
        module, function = _P(), _P()
        _call("cuModuleLoadData", ctypes.byref(module), ctypes.cast(self._image, _P))
        _call("cuModuleGetFunction", ctypes.byref(function), module, name.encode())
        self.module, self.handle, self.name = module.value, function.value, name
        # Under CUDA's lazy loading (the default) the machine code would reach the GPU at
        # the first launch, while the GPU waits; load it now (CUDA 12.4 and newer).
        load = getattr(library(), "cuFuncLoad", None)
        if load is not None:
            load(_P(self.handle))

    def loaded(self) -> bool:
        """Whether the machine code is in the context (True where the driver cannot tell)."""
        state = _INT(1)
        check = getattr(library(), "cuFuncIsLoaded", None)
        if check is not None:
            check(ctypes.byref(state), _P(self.handle))
        return state.value == 1

    def parameter_info(self) -> list[tuple[int, int]]:
        """``(offset, size)`` in bytes of each parameter, as the machine code declares
        them (empty where the driver cannot tell: before CUDA 12.4)."""
        info = []
        get = getattr(library(), "cuFuncGetParamInfo", None)
        offset, size = _SIZE(), _SIZE()
        while get is not None and not get(_P(self.handle), len(info), ctypes.byref(offset),
                                          ctypes.byref(size)):
            info.append((offset.value, size.value))
        return info

    def launch(self, grid: tuple[int, int, int], block: tuple[int, int, int], stream: int,
               buffer: bytes, offsets: Sequence[int] = (), shared: int = 0,
               cooperative: bool = False) -> None:
        """Launch with the parameters packed in ``buffer``, each at its offset
        (:func:`swdask.kernels.cuda.compile.buffer_layout`; ``offsets`` are needed only
        by a cooperative launch, which takes a pointer to each)."""
        context()
        data = ctypes.create_string_buffer(buffer, max(len(buffer), 1))
        if cooperative:
            base = ctypes.addressof(data)
            pointers = (_P * max(len(offsets), 1))(*[base + at for at in offsets])
            _call("cuLaunchCooperativeKernel", _P(self.handle), *grid, *block, shared,
                  _P(stream), pointers)
            return
        size = _SIZE(len(buffer))
        extra = (_P * 5)(_LAUNCH_BUFFER_POINTER, ctypes.addressof(data),
                         _LAUNCH_BUFFER_SIZE, ctypes.addressof(size), None)
        _call("cuLaunchKernel", _P(self.handle), *grid, *block, shared, _P(stream), None,
              extra)


# --------------------------------------------------------------------------------------
# Streams and events.

def stream_handle(stream: Any) -> int:
    """The handle of ``stream``: one of this module's, a Numba stream, an integer, or
    None / 0 for the default stream."""
    return int(stream) if stream else 0


class Stream:
    """A CUDA stream (synchronizing with the legacy default stream, as Numba's are)."""

    def __init__(self) -> None:
        context()
        handle = _P()
        _call("cuStreamCreate", ctypes.byref(handle), 0)
        self.handle = handle.value
        _finalize(self, "cuStreamDestroy_v2", _P(self.handle))

    def __int__(self) -> int:
        return self.handle

    def synchronize(self) -> None:
        _call("cuStreamSynchronize", _P(self.handle))


def stream() -> Stream:
    """A new stream (Numba's ``cuda.stream()``)."""
    return Stream()


class Event:
    """A CUDA event; with ``timing`` it can measure the time to another."""

    def __init__(self, timing: bool = True) -> None:
        context()
        handle = _P()
        _call("cuEventCreate", ctypes.byref(handle), 0 if timing else _EVENT_DISABLE_TIMING)
        self.handle = handle.value
        _finalize(self, "cuEventDestroy_v2", _P(self.handle))

    def record(self, stream: Any = 0) -> None:
        _call("cuEventRecord", _P(self.handle), _P(stream_handle(stream)))

    def wait(self, stream: Any = 0) -> None:
        """Make ``stream`` wait for this event."""
        _call("cuStreamWaitEvent", _P(stream_handle(stream)), _P(self.handle), 0)

    def synchronize(self) -> None:
        _call("cuEventSynchronize", _P(self.handle))

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event to ``end`` (both recorded and done)."""
        milliseconds = ctypes.c_float()
        _call("cuEventElapsedTime", ctypes.byref(milliseconds), _P(self.handle),
              _P(end.handle))
        return milliseconds.value


def event(timing: bool = True) -> Event:
    """A new event (Numba's ``cuda.event()``)."""
    return Event(timing)


def _finalize(owner: object, name: str, *args: Any) -> None:
    """Call driver function ``name`` when ``owner`` is collected, not at exit."""
    def release():
        lib = library()
        if lib is not None:
            getattr(lib, name)(*args)

    weakref.finalize(owner, release).atexit = False


# --------------------------------------------------------------------------------------
# Memory.

#: (driver function, pointer, bytes, context) of the memory to free.
_pending: list[tuple[str, int, int, int]] = []
_deferring = 0


def _release(name: str, pointer: int, size: int, owner: int) -> None:
    with _lock:
        _pending.append((name, pointer, size, owner))


def _flush(force: bool = False) -> None:
    """Free the pending memory (freeing synchronizes the device): when there is enough of
    it, or ``force``, and never inside :func:`defer_cleanup`."""
    with _lock:
        if _deferring or not _pending:
            return
        if not force and len(_pending) < _FLUSH_COUNT \
                and sum(entry[2] for entry in _pending) < _FLUSH_BYTES:
            return
        batch = list(_pending)
        _pending.clear()
    for name, pointer, _, owner in batch:
        if getattr(_thread, "context", None) != owner:  # freed in the context it came from
            _call("cuCtxSetCurrent", _P(owner))
            _thread.context = owner  # context() makes the thread's own current again
        _call(name, _DEVPTR(pointer) if name == "cuMemFree_v2" else _P(pointer))


@contextlib.contextmanager
def defer_cleanup() -> Iterator[None]:
    """Free no memory inside (freeing would synchronize the device mid-pipeline)."""
    global _deferring
    with _lock:
        _deferring += 1
    try:
        yield
    finally:
        with _lock:
            _deferring -= 1


class _Memory:
    """An allocation, freed (later, in a batch) when no array uses it any more."""

    def __init__(self, size: int, pinned: bool):
        owner = context()
        _flush()
        context()  # a flush may have freed another device's memory in its context
        size = max(int(size), 1)
        for attempt in (0, 1):
            try:
                if pinned:
                    pointer = _P()
                    _call("cuMemHostAlloc", ctypes.byref(pointer), size, 0)
                else:
                    pointer = _DEVPTR()
                    _call("cuMemAlloc_v2", ctypes.byref(pointer), size)
                break
            except CudaError:
                if attempt:
                    raise
                _flush(force=True)  # what is pending may make room
                context()
        self.pointer, self.size = pointer.value, size
        weakref.finalize(self, _release, "cuMemFreeHost" if pinned else "cuMemFree_v2",
                         self.pointer, size, owner).atexit = False


def pinned_array(shape: Any, dtype: Any = "float64") -> np.ndarray:
    """An uninitialised page-locked NumPy array (asynchronous copies need one)."""
    import numpy as np

    dtype = np.dtype(dtype)
    shape = (shape,) if np.isscalar(shape) else tuple(shape)
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    memory = _Memory(size, pinned=True)
    buffer = (ctypes.c_byte * max(size, 1)).from_address(memory.pointer)
    buffer.memory = memory  # the array's base keeps the allocation
    return np.frombuffer(buffer, dtype=np.uint8, count=size).view(dtype).reshape(shape)


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


class DeviceArray:
    """An array in device memory, with the part of Numba's device-array API the
    launchers use: ``shape``, ``dtype``, ``size``, ``copy_to_host``, indexing by a row or
    a slice of rows, and ``__cuda_array_interface__``."""

    def __init__(self, shape: Any, dtype: Any, *, pointer: int | None = None,
                 strides: tuple[int, ...] | None = None, memory: _Memory | None = None) -> None:
        import numpy as np

        self.shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.ndim = len(self.shape)
        self.size = math.prod(self.shape)  # (np.prod: 13 us, a tenth of a launch)
        self.nbytes = self.size * self.dtype.itemsize
        self.strides = strides or _c_strides(self.shape, self.dtype.itemsize)
        if pointer is None:
            memory = _Memory(self.nbytes, pinned=False)
            pointer = memory.pointer
        self.pointer, self._memory = pointer, memory

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype})"

    @functools.cached_property
    def launch_argument(self) -> tuple[tuple, tuple]:
        """Its parameter type and parameter values as a kernel argument
        (:func:`swdask.kernels.cuda.compile.argument`), worked out once: an array's
        pointer, shape and strides never change."""
        from .compile import array_argument

        return array_argument(self.pointer, self.shape, self.strides, self.dtype)

    @property
    def is_c_contiguous(self) -> bool:
        want = _c_strides(self.shape, self.dtype.itemsize)
        return all(s == w or n <= 1 for s, w, n in zip(self.strides, want, self.shape))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "version": 3,
                "data": (self.pointer, False),
                "strides": None if self.is_c_contiguous else self.strides}

    def __getitem__(self, index: Any) -> DeviceArray:
        """A view: integers and slices of step 1, one per leading dimension."""
        import numpy as np

        items = index if isinstance(index, tuple) else (index,)
        if len(items) > self.ndim:
            raise IndexError(f"{len(items)} indices for a {self.ndim}-d device array")
        pointer, shape, strides = self.pointer, [], []
        for item, extent, stride in zip(items, self.shape, self.strides):
            if isinstance(item, (int, np.integer)):
                at = int(item) + (extent if item < 0 else 0)
                if not 0 <= at < extent:
                    raise IndexError(f"index {item} of {extent}")
                pointer += at * stride
            elif isinstance(item, slice):
                start, stop, step = item.indices(extent)
                if step != 1:
                    raise IndexError("device arrays are sliced with step 1 only")
                pointer += start * stride
                shape.append(max(stop - start, 0))
                strides.append(stride)
            else:
                raise IndexError(f"unsupported device-array index {item!r}")
        shape += self.shape[len(items):]
        strides += self.strides[len(items):]
        if not shape:
            raise IndexError("a device array's single elements are not read one at a time")
        return DeviceArray(shape, self.dtype, strides=tuple(strides), pointer=pointer,
                           memory=self._memory)

    def reshape(self, *shape: Any) -> DeviceArray:
        """The same contiguous memory as an array of ``shape``."""
        import numpy as np

        shape = tuple(shape[0]) if len(shape) == 1 and not np.isscalar(shape[0]) else shape
        if int(np.prod(shape, dtype=np.int64)) != self.size or not self.is_c_contiguous:
            raise ValueError(f"cannot view {self.shape} as {tuple(shape)}")
        return DeviceArray(shape, self.dtype, pointer=self.pointer, memory=self._memory)

    def copy_to_host(self, ary: np.ndarray | None = None, stream: Any = 0) -> np.ndarray:
        """Copy to ``ary`` (a new array when None); asynchronous on ``stream`` when
        ``ary`` is page-locked, else done on return."""
        if not self.is_c_contiguous:
            raise ValueError("only contiguous device arrays are copied to the host")
        if ary is None:
            import numpy as np

            ary = np.empty(self.shape, self.dtype)
        if ary.nbytes != self.nbytes or not ary.flags.c_contiguous:
            raise ValueError(f"cannot copy {self.nbytes} device bytes into {ary.nbytes} "
                             "host bytes (or a non-contiguous array)")
        if self.nbytes:
            context()
            _call("cuMemcpyDtoHAsync_v2", _P(ary.ctypes.data), _DEVPTR(self.pointer),
                  self.nbytes, _P(stream_handle(stream)))
            if not stream:
                _call("cuStreamSynchronize", _P(0))
        return ary

    def copy_to_device(self, ary: np.ndarray, stream: Any = 0) -> None:
        """Copy host array ``ary`` (same size) here, on ``stream``."""
        import numpy as np

        ary = np.ascontiguousarray(ary, dtype=self.dtype)
        if ary.nbytes != self.nbytes or not self.is_c_contiguous:
            raise ValueError(f"cannot copy {ary.nbytes} host bytes into {self.nbytes} "
                             "device bytes (or a non-contiguous array)")
        if self.nbytes:
            context()
            _call("cuMemcpyHtoDAsync_v2", _DEVPTR(self.pointer), _P(ary.ctypes.data),
                  self.nbytes, _P(stream_handle(stream)))
            if not stream:
                _call("cuStreamSynchronize", _P(0))


def device_array(shape: Any, dtype: Any = "float64", stream: Any = 0) -> DeviceArray:
    """An uninitialised device array (``stream`` is accepted as Numba's is; allocation
    is not stream-ordered)."""
    return DeviceArray(shape, dtype)


def to_device(ary: Any, stream: Any = 0) -> DeviceArray:
    """A device copy of host array ``ary``, made on ``stream``."""
    import numpy as np

    ary = np.ascontiguousarray(ary)
    device = DeviceArray(ary.shape, ary.dtype)
    device.copy_to_device(ary, stream)
    return device
