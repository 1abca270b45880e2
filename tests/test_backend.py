"""Where kernels run (swdask.backend): the CUDA driver probe, which finds no GPU without
importing numba.cuda where it can tell."""


def test_cuda_driver_probe(monkeypatch):
    """No loadable libcuda on Linux: no GPU, found without importing numba.cuda; the
    probe defers to Numba wherever it cannot tell."""
    import ctypes
    import sys

    from swdask import backend

    def no_library(path, *args, **kwargs):
        raise OSError(f"{path}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_library)
    monkeypatch.delenv("NUMBA_CUDA_DRIVER", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    assert backend.cuda_driver_loadable() is False
    assert backend.check_device("auto") == "cpu"
    monkeypatch.setenv("NUMBA_CUDA_DRIVER", "/opt/driver/libcuda.so")
    assert backend.cuda_driver_loadable() is True
    monkeypatch.delenv("NUMBA_CUDA_DRIVER")
    monkeypatch.setattr(sys, "platform", "win32")
    assert backend.cuda_driver_loadable() is True
