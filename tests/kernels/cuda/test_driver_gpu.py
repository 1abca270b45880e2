"""The CUDA driver layer (kernels/cuda/driver.py) and the kernel room's launches through
it, on a real GPU (``python -m pytest -m gpu``): memory, copies, views, streams, events,
and launches with this package's arrays, Numba's and host arrays."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def drv():
    from swdask.kernels.cuda import driver

    driver.context()
    return driver


def test_copies_views_and_pinned_memory(drv):
    host = np.arange(3 * 5, dtype=np.int32).reshape(3, 5)
    device = drv.to_device(host)
    assert device.shape == (3, 5) and device.dtype == np.int32 and len(device) == 3
    assert np.array_equal(device.copy_to_host(), host)
    assert np.array_equal(device[1].copy_to_host(), host[1])
    assert np.array_equal(device[1:3].copy_to_host(), host[1:3])
    assert device[2:2].copy_to_host().shape == (0, 5)
    assert np.array_equal(device[1, 2:].copy_to_host(), host[1, 2:])
    columns = device[:, 2:]  # strided: launched, not copied
    assert columns.shape == (3, 3) and columns.strides == (20, 4)
    assert np.array_equal(columns[2].copy_to_host(), host[2, 2:])
    assert np.array_equal(drv.to_device(host.ravel())[5:15].reshape(2, 5).copy_to_host(),
                          host[1:])
    stream = drv.Stream()
    pinned = drv.pinned_array((3, 5), np.int32)
    device[::1].copy_to_host(pinned, stream)
    stream.synchronize()
    assert np.array_equal(pinned, host)
    target = drv.device_array(15, np.int32)
    target.copy_to_device(pinned.ravel(), stream)
    stream.synchronize()
    assert np.array_equal(target.copy_to_host(), host.ravel())
    with pytest.raises(IndexError):
        device[3]
    with pytest.raises(IndexError):
        device[1, 2]  # one element: not read alone
    with pytest.raises(ValueError):
        columns.reshape(9)
    with pytest.raises(ValueError):
        device.copy_to_host(np.empty(4, np.int32))


def test_events_time_and_order_streams(drv):
    first, second = drv.Stream(), drv.Stream()
    start, end = drv.Event(), drv.Event()
    start.record(first)
    data = drv.to_device(np.ones(1 << 20, np.float32), first)
    end.record(first)
    end.wait(second)  # second waits for first's copy
    out = data.copy_to_host(stream=second)
    end.synchronize()
    assert out.sum() == 1 << 20 and start.elapsed_time(end) >= 0


def test_a_kept_kernel_launches_with_any_device_array_and_host_arrays(drv, tmp_path,
                                                                       monkeypatch):
    """The same kernel through the driver with this package's arrays, Numba's and a host
    array (copied there and back, as Numba does), and again from the cache in a fresh
    kernel object: the results agree, and the loaded function's parameters are the
    machine code's."""
    from numba import cuda

    from swdask.kernels.cuda import compile as room

    monkeypatch.setenv(room.ENV_CACHE_DIR, str(tmp_path))
    kernel = room.hand_written("swdask.kernels.cuda.selection:_fill")
    room.resolve("kernel", {"name": kernel.spec["kernel"]})  # its signatures
    monkeypatch.setattr(kernel, "_compiled", {})
    monkeypatch.setattr(kernel, "_loaded", False)
    monkeypatch.setattr(kernel, "_key", None)
    ours = drv.device_array((4, 7), np.int32)
    kernel[2, 64, 0](ours, np.int64(5))
    assert (ours.copy_to_host() == 5).all()
    numbas = cuda.device_array((4, 7), np.int32)
    stream = cuda.stream()
    kernel[2, 64, stream](numbas, np.int64(6))
    stream.synchronize()
    assert (numbas.copy_to_host() == 6).all()
    host = np.zeros((4, 7), np.int32)
    kernel[1, 32, 0](host, 7)  # a Python int: int64, the declared type
    assert (host == 7).all()
    assert len(list((tmp_path / "cuda").glob("*.nbk"))) == 1  # one specialisation
    fresh = room.Kernel(kernel.spec, kernel._make)
    assert fresh.load() == 1
    compiled = fresh.specialisation((("a", "<i4", 2, "C"), ("s", "<i8")))
    info = compiled.function().parameter_info()
    assert [size for _, size in info] == room.parameter_sizes(compiled.parameters) == [8] * 10
    assert [offset for offset, _ in info] == room.buffer_offsets(compiled.parameters)
    assert compiled.layout.size == 80
    fresh[1, 32, 0](ours, np.int64(8))
    assert (ours.copy_to_host() == 8).all()
