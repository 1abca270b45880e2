"""The CUDA driver layer (kernels/cuda/driver.py) against a stand-in for libcuda whose
"device memory" is host memory: views, reshapes, copies both ways, page-locked arrays and
the batched, deferred freeing run in CI; the GPU lane runs the same on a real card
(tests/kernels/cuda/test_driver_gpu.py)."""
import ctypes
import threading

import numpy as np
import pytest

from swdask.kernels.cuda import driver


class FakeCuda:
    """libcuda's calls the layer makes, on host memory; records frees and copies."""

    def __init__(self):
        self.buffers = {}  # address -> ctypes buffer (kept alive until freed)
        self.calls = []

    def _alloc(self, out, size):
        buffer = ctypes.create_string_buffer(int(size.value if hasattr(size, "value")
                                                 else size))
        address = ctypes.addressof(buffer)
        self.buffers[address] = buffer
        out._obj.value = address
        return 0

    def __getattr__(self, name):
        if not name.startswith("cu"):
            raise AttributeError(name)

        def call(*args):
            self.calls.append(name)
            if name in ("cuMemAlloc_v2", "cuMemHostAlloc"):
                return self._alloc(args[0], args[1])
            if name in ("cuMemFree_v2", "cuMemFreeHost"):
                del self.buffers[args[0].value]
            elif name == "cuMemcpyHtoDAsync_v2":
                ctypes.memmove(args[0].value, args[1].value, args[2])
            elif name == "cuMemcpyDtoHAsync_v2":
                ctypes.memmove(args[0].value, args[1].value, args[2])
            elif name == "cuDeviceGet":
                args[0]._obj.value = args[1]
            elif name == "cuDevicePrimaryCtxRetain":
                args[0]._obj.value = 0x1234 + 0x100 * args[1].value  # device 0: 0x1234
            elif name == "cuCtxSetCurrent":
                self.current = args[0].value
            return 0
        return call


@pytest.fixture
def fake(monkeypatch):
    lib = FakeCuda()
    monkeypatch.setattr(driver, "_library", lib)
    monkeypatch.setattr(driver, "_contexts", {})
    monkeypatch.setattr(driver, "_thread", threading.local())
    monkeypatch.setattr(driver, "_pending", [])
    monkeypatch.setattr(driver, "_deferring", 0)
    return lib


def test_copies_views_and_reshapes(fake):
    host = np.arange(4 * 6, dtype=np.int32).reshape(4, 6)
    device = driver.to_device(host)
    assert np.array_equal(device.copy_to_host(), host)
    assert np.array_equal(device[2].copy_to_host(), host[2])
    assert np.array_equal(device[1:3].copy_to_host(), host[1:3])
    assert np.array_equal(device[3, 2:].copy_to_host(), host[3, 2:])
    assert np.array_equal(device[-1].copy_to_host(), host[-1])
    flat = driver.to_device(host.ravel())
    assert np.array_equal(flat[6:18].reshape(2, 6).copy_to_host(), host[1:3])
    assert np.array_equal(flat[6:18].reshape((3, 4)).copy_to_host(), host[1:3].reshape(3, 4))
    columns = device[:, 2:]
    assert columns.shape == (4, 4) and columns.strides == (24, 4)
    assert columns.__cuda_array_interface__["strides"] == (24, 4)
    assert device.__cuda_array_interface__["strides"] is None
    assert np.array_equal(columns[1].copy_to_host(), host[1, 2:])
    with pytest.raises(ValueError, match="contiguous"):
        columns.copy_to_host()
    with pytest.raises(ValueError, match="cannot view"):
        columns.reshape(16)
    with pytest.raises(IndexError):
        device[4]
    with pytest.raises(IndexError):
        device[1, 1]
    with pytest.raises(IndexError):
        device[::2]
    target = driver.device_array((2, 6), np.int32)
    target.copy_to_device(host[2:])
    assert np.array_equal(target.copy_to_host(), host[2:])
    with pytest.raises(ValueError, match="cannot copy"):
        target.copy_to_device(host)


def test_pinned_arrays_are_page_locked_numpy_arrays(fake):
    pinned = driver.pinned_array((3, 2), np.float32)
    assert pinned.shape == (3, 2) and pinned.dtype == np.float32
    assert fake.calls.count("cuMemHostAlloc") == 1
    pinned[...] = 7
    assert driver.to_device(pinned).copy_to_host().sum() == 42


def test_frees_wait_for_a_batch_and_never_inside_defer_cleanup(fake):
    """Freed memory is given back in batches (a free synchronizes the device), not
    inside defer_cleanup, and all of it when an allocation fails."""
    for _ in range(driver._FLUSH_COUNT - 1):
        driver.device_array(8, np.uint8)  # dropped at once: pending
    assert fake.calls.count("cuMemFree_v2") == 0 and len(driver._pending) == 9
    with driver.defer_cleanup():
        driver.device_array(8, np.uint8)
        driver.device_array(8, np.uint8)  # ten pending, but deferred
        assert fake.calls.count("cuMemFree_v2") == 0
    driver.device_array(8, np.uint8)
    assert fake.calls.count("cuMemFree_v2") == 11 and len(driver._pending) == 1
    kept = driver.device_array(8, np.uint8)
    view = kept[2:]
    del kept
    driver._flush(force=True)
    assert view._memory.pointer in fake.buffers  # a view keeps its allocation


def test_a_failing_call_names_the_call_and_the_error(fake, monkeypatch):
    def out_of_memory(*args):
        return 2

    def name(code, out):
        out._obj.value = b"CUDA_ERROR_OUT_OF_MEMORY"
        return 0

    monkeypatch.setattr(fake, "cuMemAlloc_v2", out_of_memory, raising=False)
    monkeypatch.setattr(fake, "cuGetErrorName", name, raising=False)
    with pytest.raises(driver.CudaError, match="^cuMemAlloc_v2 failed: "
                                               "CUDA_ERROR_OUT_OF_MEMORY$"):
        driver.device_array(8, np.uint8)


def test_each_thread_uses_the_device_it_selected(fake):
    """Device 0 by default; a thread that selects device 1 gets device 1's primary
    context, made once and kept, and made current on that thread only."""
    assert driver.context() == 0x1234 and driver.current_device() == 0
    seen = {}

    def worker():
        driver.select_device(1)
        seen["context"] = driver.context()
        seen["again"] = driver.context()
        seen["device"] = driver.current_device()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == {"context": 0x1334, "again": 0x1334, "device": 1}
    assert driver._contexts == {0: 0x1234, 1: 0x1334}
    assert fake.calls.count("cuDevicePrimaryCtxRetain") == 2
    fake.calls.clear()
    assert driver.context() == 0x1234 and fake.calls == []  # still current here


def test_memory_is_freed_in_the_context_it_came_from(fake):
    """A buffer of device 1, dropped, is freed with device 1's context current, and the
    next allocation on device 0 has device 0's current again."""
    done = threading.Event()

    def worker():
        driver.select_device(1)
        array = driver.device_array(10, np.int32)
        del array
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert done.is_set() and driver._pending and driver._pending[0][3] == 0x1334
    fake.calls.clear()
    driver._flush(force=True)
    assert fake.calls == ["cuCtxSetCurrent", "cuMemFree_v2"] and fake.current == 0x1334
    driver.device_array(10, np.int32)
    assert fake.current == 0x1234  # device 0's again for this thread's allocation
