"""Where kernels run (swdask.backend): the CUDA driver probe, which finds no GPU without
importing numba.cuda where it can tell; CUDA's first use in each job's calling thread."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba import config

import swdask
from swdask import load_sequences
from tests.helpers import QUERIES, RRNA, SPROT_DB, WINDOW


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


class _FakeDriver:
    """Stands in for libcuda: records the calls, and fails the one named in ``fail``."""

    def __init__(self, fail=None):
        self.calls, self.fail = [], fail

    def __getattr__(self, name):
        if not name.startswith("cu"):
            raise AttributeError(name)

        def call(*args):
            self.calls.append(name)
            if name == "cuDevicePrimaryCtxRetain":
                args[0]._obj.value = 0x1234  # the context's handle
            elif name == "cuDeviceGetCount":
                args[0]._obj.value = 2
            return 100 if name == self.fail else 0
        return call


@pytest.fixture
def fake_driver(monkeypatch):
    """A fake libcuda behind kernels/cuda/driver.py, with no context made yet."""
    import threading

    from swdask.kernels.cuda import driver

    def install(fail=None):
        fake = _FakeDriver(fail)
        monkeypatch.setattr(driver, "_library", fake)
        monkeypatch.setattr(driver, "_contexts", {})
        monkeypatch.setattr(driver, "_thread", threading.local())
        return fake
    return install


@pytest.mark.parametrize("fail", [None, "cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain"])
def test_driver_start_makes_device_0s_primary_context_current(monkeypatch, fake_driver, fail):
    """The early start calls the driver in Numba's order and makes the context current on
    its thread; a failing call is left to Numba's own start (nothing raised)."""
    from swdask import backend
    from swdask.kernels.cuda import driver

    fake = fake_driver(fail)
    monkeypatch.setattr(backend, "simulator_enabled", lambda: False)
    monkeypatch.setattr(sys, "platform", "linux")
    backend._driver_start()
    order = ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent"]
    if fail is not None:
        assert fake.calls == [*order[:order.index(fail) + 1], "cuGetErrorName"]
        assert not driver._contexts
        return
    assert fake.calls == order and driver._contexts == {0: 0x1234}
    driver.context()  # kept for the process, current on this thread: no more calls
    assert fake.calls == order


def test_asking_for_a_gpu_makes_no_context(monkeypatch, fake_driver):
    """gpu_available() and visible_gpus() count devices through the driver and make no
    context: a Dask worker or a cluster's client that only asks holds no GPU memory."""
    from swdask import backend

    fake = fake_driver()
    monkeypatch.setattr(backend, "simulator_enabled", lambda: False)
    assert backend.gpu_available() and backend.visible_gpus() == 2
    assert "cuDevicePrimaryCtxRetain" not in fake.calls and "cuDeviceGetCount" in fake.calls


def test_driver_start_does_nothing_under_the_simulator_or_without_a_driver(monkeypatch,
                                                                           fake_driver):
    from swdask import backend
    from swdask.kernels.cuda import driver

    fake = fake_driver()
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(backend, "simulator_enabled", lambda: True)
    backend._driver_start()
    assert fake.calls == []
    monkeypatch.setattr(backend, "simulator_enabled", lambda: False)
    monkeypatch.setattr(driver, "_library", None)
    monkeypatch.setattr(driver, "library", lambda: None)
    backend._driver_start()  # no driver library: nothing raised


#: A fresh process: CUDA started with or without the early start (argv[1]), then Numba's
#: one retain of device 0's primary context given back; prints whether the context was
#: active before and after.
EARLY_START = r"""
import json, os, sys
from swdask import backend
if sys.argv[1] == "early":
    backend.start_early()
assert backend.gpu_available()
from numba import cuda
from cuda.bindings import driver as cu
cuda.current_context().memalloc(1 << 20)
_, device = cu.cuDeviceGet(0)
_, _, during = cu.cuDevicePrimaryCtxGetState(device)
cuda.get_current_device().release_primary_context()
_, _, after = cu.cuDevicePrimaryCtxGetState(device)
print(json.dumps({"during": int(during), "after": int(after)}), flush=True)
os._exit(0)  # Numba's own exit would release the context again
"""


@pytest.mark.gpu
def test_the_driver_layer_keeps_the_context_for_the_process():
    """On a GPU: the early start makes the context through the driver layer
    (kernels/cuda/driver.py), which keeps it for the process (its launches use it): Numba
    giving its retain back leaves it active.  The GPU's check alone makes none: without
    the early start Numba's retain is the context's last."""
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    states = {}
    for how in ("plain", "early"):
        done = subprocess.run([sys.executable, "-c", EARLY_START, how], env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        states[how] = json.loads(done.stdout.strip().splitlines()[-1])
    assert states["plain"] == {"during": 1, "after": 0}, states
    assert states["early"] == {"during": 1, "after": 1}, states


# -- CUDA's first use: in the job's calling thread, before any task (issue 20, class 8) -----

#: A fresh process whose first CUDA use is a job's API with device="gpu", computed on Dask's
#: threads: records the threads that start CUDA (swdask.backend.start_gpu), then compares
#: the result with the CPU's.  argv: job, size ("tiny" for the simulator), data paths.
FIRST_USE = r"""
import json, sys, threading

import dask
import pandas as pd
from numba import config, cuda

import swdask

started = []
real = cuda.current_context


def watched(*args, **kwargs):
    started.append(threading.current_thread().name)
    return real(*args, **kwargs)


cuda.current_context = watched
job, size, *data = sys.argv[1:]
tiny = size == "tiny"
if job == "align_long":
    window = swdask.load_sequences(data[0], alphabet="dna")
    text = window.alphabet.decode(window.codes(0))
    a, b = (text[1000:1040], text[3000:3008] + text[1010:1034]) if tiny else \
        (text[:20000], text[5000:25000])
    tile = 24 if tiny else "auto"
    gpu = swdask.align_long(a, b, device="gpu", tile=tile, traceback=True)
    before = list(started)
    cpu = swdask.align_long(a, b, device="cpu", tile=tile, traceback=True)
    same = (gpu.score, gpu.query_end, gpu.subject_end, gpu.cigar) == \
        (cpu.score, cpu.query_end, cpu.subject_end, cpu.cigar)
else:
    def lazy(device):
        if job == "search":
            return swdask.search(data[0], data[1], device=device, max_hits=5)
        if job == "all_pairs":
            return swdask.all_pairs(data[0], min_identity=0.9 if tiny else 0.97, device=device)
        return swdask.significance(data[0], data[1], shuffles=8 if tiny else 100, seed=1,
                                   device=device)
    frame = lazy("gpu")
    before = list(started)
    # The simulator runs a Python thread per lane: its all-pairs kernel stays off Dask's
    # threads (as in tests/jobs/allpairs); a real GPU runs every job on them.
    scheduler = "sync" if config.ENABLE_CUDASIM and job == "all_pairs" else "threads"
    (gpu,) = dask.compute(frame, scheduler=scheduler)
    (cpu,) = dask.compute(lazy("cpu"))
    # Scores and alignments to the bit; the Gumbel fits of significance to 1e-9.
    pd.testing.assert_frame_equal(gpu.reset_index(drop=True), cpu.reset_index(drop=True),
                                  check_exact=job != "significance", rtol=1e-9)
    same = len(cpu) > 0
print(json.dumps({"before": before, "same": bool(same)}))
"""


def _first_use_data(job: str, tiny: bool, folder: Path) -> list:
    """The inputs of ``job`` for :data:`FIRST_USE` (small ones for the simulator)."""
    if job == "align_long":
        return [str(WINDOW)]
    if job == "all_pairs":
        store = folder / "genes.store"
        if tiny:
            genes = load_sequences(RRNA, alphabet="dna")
            with open(folder / "genes.fasta", "w") as handle:
                for k in range(3):
                    text = genes.alphabet.decode(genes.codes(k))[100:160]
                    handle.write(f">g{k}\n{text}\n>g{k}b\n{text[:-1]}\n")
            swdask.ingest(folder / "genes.fasta", store, alphabet="dna")
        else:
            swdask.ingest(RRNA, store, alphabet="dna")
        return [str(store)]
    if job == "search" and not tiny:
        return [str(QUERIES), str(SPROT_DB)]
    # 2 queries and 5 subjects of 24 residues for the simulator; 4 and 40 whole proteins.
    source = load_sequences(SPROT_DB)
    queries, length = (2, 24) if tiny else (4, None)
    subjects = 4 if tiny else 39
    with open(folder / "q.fasta", "w") as q, open(folder / "db.fasta", "w") as db:
        for k in range(queries + subjects):
            text = source.alphabet.decode(source.codes(k))[:length]
            (q if k < queries else db).write(f">{source.names[k]}\n{text}\n")
        db.write(f">copy\n{source.alphabet.decode(source.codes(0))[:length]}\n")
    return [str(folder / "q.fasta"), str(folder / "db.fasta")]


def _first_use(job: str, tiny: bool, folder: Path) -> dict:
    env = dict(os.environ)
    if not tiny:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    done = subprocess.run([sys.executable, "-c", FIRST_USE, job, "tiny" if tiny else "full",
                           *_first_use_data(job, tiny, folder)], env=env, capture_output=True,
                          text=True, timeout=900, cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


JOBS = ("search", "all_pairs", "significance", "align_long")


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="simulator lane only")
@pytest.mark.parametrize("job", JOBS)
def test_a_job_starts_cuda_in_its_calling_thread(job, tmp_path):
    """The CPU-checkable part of the fix: with device="gpu" each job's API makes CUDA's
    context in the thread that calls it, before any task runs on Dask's threads (here the
    simulator's context), and the job then gives the CPU's result."""
    found = _first_use(job, True, tmp_path)
    assert found == {"before": ["MainThread"], "same": True}


@pytest.mark.gpu
@pytest.mark.parametrize("job", JOBS)
def test_each_job_api_is_the_first_cuda_use_of_a_fresh_process(job, tmp_path):
    """Issue 20, class 8 (H100): ``dask.compute(swdask.all_pairs(..., device="gpu"))`` as a
    process's first CUDA use failed in a Dask thread with CUDA_ERROR_NOT_INITIALIZED.  Each
    job's API, in a fresh process, on a real GPU: CUDA starts in the calling thread, and the
    result equals the CPU's."""
    found = _first_use(job, False, tmp_path)
    assert found == {"before": ["MainThread"], "same": True}


def test_score_pass_lock_leaves_a_real_gpus_score_passes_concurrent(monkeypatch):
    """CPU kernels (and the simulator) run one at a time in a process; a real GPU's score
    passes run on their own streams, two tasks of a worker at once."""
    from swdask import backend

    assert backend.score_pass_lock("cpu") is backend.KERNEL_LOCK
    monkeypatch.setattr(backend, "simulator_enabled", lambda: True)
    assert backend.score_pass_lock("gpu") is backend.KERNEL_LOCK
    monkeypatch.setattr(backend, "simulator_enabled", lambda: False)
    lock = backend.score_pass_lock("gpu")
    assert lock is not backend.KERNEL_LOCK
    with lock, lock:  # re-entered from two tasks: never blocks
        pass


def test_the_driver_starts_early_on_its_own_thread_once(monkeypatch, fake_driver):
    """``driver.start_early`` makes device 0's primary context on a thread of its own
    (cuInit first), once; the context is then the process's, and a later ``context()``
    on another thread only makes it current there."""
    import threading

    from swdask.kernels.cuda import driver

    fake = fake_driver()
    monkeypatch.setattr(driver, "simulated", lambda: False)
    monkeypatch.setattr(driver, "_early", None)
    driver.start_early()
    first = driver._early
    first.join(timeout=30)
    driver.start_early()
    assert driver._early is first and first.name == "swdask-cuda-init"
    assert fake.calls == ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent"]
    assert driver._contexts == {0: 0x1234}
    seen = []
    other = threading.Thread(target=lambda: seen.append(driver.context()))
    other.start()
    other.join(timeout=30)
    assert seen == [0x1234] and fake.calls[4:] == ["cuCtxSetCurrent"]


def test_the_driver_does_not_start_early_under_the_simulator(monkeypatch, fake_driver):
    from swdask.kernels.cuda import driver

    fake = fake_driver()
    monkeypatch.setattr(driver, "simulated", lambda: True)
    monkeypatch.setattr(driver, "_early", None)
    driver.start_early()
    assert driver._early is None and fake.calls == []


def test_the_driver_module_imports_without_numpy():
    """What lets a command start the driver before its own imports: the module loads with
    ctypes alone (NumPy with the first array)."""
    code = ("import sys; import swdask.kernels.cuda.driver as d; "
            "print('numpy' in sys.modules, d.simulated() in (True, False))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
