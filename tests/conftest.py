"""Fixtures shared by the tests (the lanes themselves are chosen in the root conftest.py)."""
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def device():
    """The CUDA device of the GPU lane; fails (rather than skips) where none is usable."""
    from numba import config, cuda

    assert not config.ENABLE_CUDASIM, "the GPU lane needs a real GPU, not the simulator"
    assert cuda.is_available(), "no CUDA GPU visible"
    return cuda.get_current_device()


def _writable(folder: Path) -> bool:
    probe = folder / ".swdask-test-probe"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError:
        return False
    probe.unlink()
    return True


@pytest.fixture
def unwritable_folder(tmp_path):
    """A folder this process cannot write in: one of mode 0555, or, for root (whom modes
    do not stop), ``/sys/fs``, which the kernel refuses to everyone."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        for candidate in (folder, Path("/sys/fs")):
            if candidate.is_dir() and not _writable(candidate):
                yield candidate
                return
        pytest.fail("no folder here refuses to be written")
    finally:
        folder.chmod(0o755)
