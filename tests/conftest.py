"""Fixtures shared by the tests (the lanes themselves are chosen in the root conftest.py)."""
import pytest


@pytest.fixture(scope="session")
def device():
    """The CUDA device of the GPU lane; fails (rather than skips) where none is usable."""
    from numba import config, cuda

    assert not config.ENABLE_CUDASIM, "the GPU lane needs a real GPU, not the simulator"
    assert cuda.is_available(), "no CUDA GPU visible"
    return cuda.get_current_device()
