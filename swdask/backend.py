"""Where a job's kernels run, decided once per job; the one kernel lock; the GPU calls.

Every job asks the same questions of the machine, and asks them here:

- :func:`check_device`: is the device name known, does the job's mode have a GPU kernel
  (:class:`GpuKernels`), and (``here=True``) can this process run it: ``"auto"`` becomes
  ``"gpu"`` where a real GPU is visible, else ``"cpu"``.
- :func:`job_device`: the same for a job's tasks, once, where the job is set up.
  Without a ``distributed`` client the tasks run in this process and ``"auto"`` is
  decided here; with one, ``"gpu"`` needs a worker that sees a GPU, and ``"auto"`` stays
  ``"auto"``: each worker's tasks use its GPU if it has one, so a cluster of GPU and CPU
  workers scores on both.
- :func:`task_device`: a task reads the job's device; only ``"auto"`` on a cluster is
  resolved where the task runs, and ``"gpu"`` is checked there (the error names the
  worker).  :func:`trace_device` is the traceback's choice, which never fails.
- :func:`auto_device` and :func:`choose_device`: ``"auto"`` for a search in this
  process, by expected time; :func:`tile_device` for long alignment's ``"both"``.

:func:`start_gpu` is CUDA's first use in a process, done where a job decides to run its
kernels here, before any task does (see its Notes).  :class:`KernelTask` is how a task
says that it runs a job's kernels, and on which device: the cluster routes GPU work by
it (:mod:`swdask.cluster`).

:data:`KERNEL_LOCK` lets one kernel run at a time in a process.  Numba's CUDA target is
imported only here and only when asked for, so the CPU backend starts without it.  With
``NUMBA_ENABLE_CUDASIM=1`` the same kernels run in Numba's CUDA simulator on the CPU
(slowly: for tests), and ``device="gpu"`` then uses it.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import DeviceError
from .options import DEVICES, LONG_DEVICES, check_choice

if TYPE_CHECKING:
    import numpy.typing as npt
    from distributed import Client

    from .kernels.cuda.launcher import KernelStats
    from .scoring import Scoring

__all__ = ["ALLPAIRS_GPU", "KERNEL_LOCK", "LOCAL_GPU", "SEARCH_GPU", "GpuKernels", "KernelTask",
           "auto_device",
           "load_search_kernels", "score_pass_lock", "score_passes_at_once",
           "SpreadTask", "check_device", "check_long_device", "choose_device", "cluster_gpus",
           "cuda_driver_loadable", "current_client", "gpu_available", "gpu_here", "job_device",
           "kernel_workers", "require_gpu", "score_all_gpu", "simulator_enabled",
           "start_early", "start_gpu", "task_device", "tile_device", "top_hits_gpu",
           "trace_device", "visible_gpus", "worker_name"]

#: One kernel at a time in a process.  A CPU kernel takes all of Numba's threads and a GPU
#: kernel the whole device, so two at once only share them; and Numba's workqueue threading
#: layer (where neither TBB nor OpenMP is installed) aborts the process when two Python
#: threads enter its ``parallel=True`` kernels at once.  Tasks on Dask's threads still
#: overlap the rest of their work (reading, decoding, traceback), and kernel seconds stay
#: the kernel's own.
KERNEL_LOCK = threading.Lock()


def score_passes_at_once(device: str) -> bool:
    """Whether a search's score passes on ``device`` may run at the same time in one
    process: on a real GPU only.  There a score pass runs on streams of its own, and it is
    host work (reading tables back, selecting, the next batch's profiles) as much as
    kernels: two at once let one's host work overlap the other's kernels, where one at a
    time left the GPU idle about 45% of a 20-query search's score pass (cli_timeline, H200
    host, 2026-11-28: 0.25 s a store file for 0.136 s of kernels).  CPU kernels take all
    of Numba's threads, and the simulator runs one kernel at a time."""
    return device == "gpu" and not simulator_enabled()


def score_pass_lock(device: str) -> contextlib.AbstractContextManager:
    """What a search's score task holds around its score pass: :data:`KERNEL_LOCK`, or
    nothing where :func:`score_passes_at_once`."""
    return contextlib.nullcontext() if score_passes_at_once(device) else KERNEL_LOCK

#: The thread of :func:`start_early`, once started.
_early_start: threading.Thread | None = None
#: Held by every first use of CUDA in this process (:func:`gpu_available`, :func:`start_gpu`):
#: Numba's driver start is not safe to enter from two threads at once.
_CUDA_START = threading.Lock()
#: Whether :func:`start_gpu` has made this process's CUDA context.
_gpu_started = False


@dataclass(frozen=True)
class GpuKernels:
    """The alignment modes a job's GPU kernels compute, and how a refusal names them.

    Examples
    --------
    >>> str(LOCAL_GPU.refusal_for("global"))
    '--device gpu: the GPU kernels compute local alignments; run --mode global with --device cpu (or auto)'
    """

    modes: tuple
    computes: str

    def refusal_for(self, mode: str) -> DeviceError:
        """The error of ``--device gpu`` with a ``mode`` these kernels do not compute."""
        return DeviceError(f"--device gpu: {self.computes}; run --mode {mode} with --device cpu "
                           "(or auto)")


#: Significance: Smith-Waterman kernels.
LOCAL_GPU = GpuKernels(("local",), "the GPU kernels compute local alignments")
#: Search: the score kernels and the traceback compute every mode.
SEARCH_GPU = GpuKernels(("local", "global", "semiglobal"), "the search's GPU kernels compute "
                        "local, global and semiglobal alignments")
#: All-against-all: the warp-per-pair kernel computes Needleman-Wunsch or Smith-Waterman.
ALLPAIRS_GPU = GpuKernels(("global", "local"), "the all-pairs GPU kernel computes global and "
                          "local alignments")


@dataclass(frozen=True)
class KernelTask:
    """A Dask task's function that runs a job's kernels: how a task declares its needs.

    Calling it calls ``function``.  A job builds its score tasks with it (``dask.delayed(
    KernelTask(score_partition, job.device))``), and the scheduler reads it off each task
    (:func:`swdask.cluster.gpu_resources`): a task of ``device="gpu"`` runs CUDA kernels and
    goes to a worker with the resource ``GPU``; every kernel task is pure (the same inputs
    give the same result, and what it writes it writes atomically), so a task that failed
    may run again (``swdask.task-retries``).  Keys and names play no part.  A task also
    says how much work it is (``work``, e.g. the cells it scores): a progress bar counts
    that when the task completes (:func:`swdask.cluster.compute`), not one per task.

    Parameters
    ----------
    function : callable
        The task's function (a module-level function: it is pickled by reference).
    device : {"auto", "cpu", "gpu"}, default "cpu"
        The job's device (:func:`job_device`).
    work : int, default 0
        The work of one call, in the unit of the job's progress bar (cells).

    Examples
    --------
    >>> KernelTask(max, "gpu", work=12)(3, 4)
    4
    """

    function: Callable
    device: str = "cpu"
    work: int = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    @property
    def weight(self) -> int:
        """What the cluster shares out by (:class:`SpreadTask`): the task's work."""
        return self.work


@dataclass(frozen=True)
class SpreadTask:
    """A Dask task's function whose calls a cluster shares out among its workers by
    ``weight``, not by where their inputs lie: a search's traceback batches.

    Dask puts a task on the worker that holds its inputs, so every task that reads one
    small result (the merged candidates of a search) would queue on the worker that made
    it.  The scheduler reads this off each task, as it reads :class:`KernelTask` (whose
    ``work`` is its weight), and deals the tasks of each function out to the workers,
    heaviest first, each to the worker with the least weight of that function still to
    do (:class:`swdask.cluster.TaskRouting`).  Calling it calls ``function``.

    Parameters
    ----------
    function : callable
        The task's function (a module-level function: it is pickled by reference).
    weight : int, default 1
        The task's cost relative to the other calls of ``function`` (e.g. residues).

    Examples
    --------
    >>> SpreadTask(max, weight=3)(3, 4)
    4
    """

    function: Callable
    weight: int = 1

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)


# --------------------------------------------------------------------------------------
# the device of a job
# --------------------------------------------------------------------------------------


def check_device(device: str, mode: str = "local", *, here: bool = True,
                 kernels: GpuKernels = LOCAL_GPU) -> str:
    """The device that runs a job's kernels in this process: ``"gpu"`` or ``"cpu"``.

    Parameters
    ----------
    device : {"auto", "cpu", "gpu"}
        The device asked for.  ``"auto"`` takes a real GPU when Numba sees one and the
        mode has a GPU kernel, else the CPU; ``"gpu"`` insists (the CUDA simulator
        counts, for tests).
    mode : str, default "local"
        The job's alignment mode.
    here : bool, default True
        False when the kernels run on a cluster's workers: only the name and the mode
        are checked, and ``device`` is returned as it is.
    kernels : GpuKernels, default LOCAL_GPU
        The modes the job's GPU kernels compute.

    Returns
    -------
    str
        ``"gpu"`` or ``"cpu"``; with ``here=False``, ``device`` as it was given.

    Raises
    ------
    ValueError
        ``device`` is not one of :data:`swdask.options.DEVICES`.
    DeviceError
        ``"gpu"`` with a mode the GPU kernels do not compute, or (``here=True``) with
        no GPU visible.

    Examples
    --------
    >>> check_device("cpu", "global")
    'cpu'
    >>> check_device("gpu", "global", here=False, kernels=ALLPAIRS_GPU)
    'gpu'
    """
    check_choice("device", device, DEVICES)
    if device == "gpu" and mode not in kernels.modes:
        raise kernels.refusal_for(mode)
    if not here:
        return device
    if device == "gpu":
        require_gpu()
    elif not (device == "auto" and mode in kernels.modes and gpu_here()):
        return "cpu"
    start_gpu()  # here, before any task of the job: see start_gpu's Notes
    return "gpu"


def job_device(device: str, mode: str = "local", *, kernels: GpuKernels = LOCAL_GPU,
               client: Client | None = None) -> str:
    """The device of a job's tasks, decided once, where the job is set up.

    Parameters
    ----------
    device, mode, kernels
        As :func:`check_device`.
    client : distributed.Client, optional
        The client whose workers run the tasks (:func:`current_client` for a lazy Dask
        job).  None: the tasks run in this process, and the device is decided here, as
        :func:`check_device` does.  With a client ``"gpu"`` needs a worker that sees a
        GPU, and ``"auto"`` is left to each task's worker (:func:`task_device`); the
        client's scheduler routes the job's tasks by what they declare
        (:func:`swdask.cluster.route_tasks`), however the job is computed.

    Returns
    -------
    str
        ``"gpu"`` or ``"cpu"``; with a client, also ``"auto"``.

    Raises
    ------
    ValueError, DeviceError
        As :func:`check_device`; ``"gpu"`` when no worker of the client sees a GPU.
    """
    if client is None:
        return check_device(device, mode, kernels=kernels)
    check_device(device, mode, here=False, kernels=kernels)
    from .cluster import route_tasks

    route_tasks(client)
    if device == "gpu":
        seen = client.run(gpu_available)
        if not any(seen.values()):
            raise DeviceError(
                f"--device gpu: no worker of the Dask cluster at {client.scheduler.address} sees "
                f"a CUDA GPU ({len(seen)} worker(s)); start GPU workers with 'dask cuda worker', "
                "or use --device cpu")
    return device


def kernel_workers(client: Client, device: str) -> int:
    """How many workers of ``client``'s cluster run a job's kernel tasks: for a ``"gpu"``
    job the workers that advertise the resource ``GPU``, where some do (the scheduler
    routes its kernel tasks to them), else every worker; at least 1.  A job cuts its work
    into enough tasks for them (``swdask.jobs.search.plan.score_pieces``)."""
    workers = list(client.scheduler_info(n_workers=-1)["workers"].values())
    gpus = [w for w in workers if w.get("resources", {}).get("GPU", 0) > 0]
    return max(1, len(gpus) if device == "gpu" and gpus else len(workers))


def task_device(device: str, mode: str = "local", *, kernels: GpuKernels = LOCAL_GPU) -> str:
    """The device a task runs its kernels on, from its job's ``device``.

    ``"cpu"`` as it is; ``"gpu"`` checked on this worker; ``"auto"`` (a job on a cluster)
    decided by this worker's GPU.

    Raises
    ------
    DeviceError
        ``"gpu"`` on a worker without a GPU; the message names the worker.
    """
    if device == "cpu":
        return "cpu"
    try:
        return check_device(device, mode, kernels=kernels)
    except DeviceError as exc:
        raise DeviceError(f"{worker_name()}: {exc}") from None


def trace_device(device: str, mode: str) -> str:
    """Where a search's traceback runs: the GPU when the job may use one and this worker
    has one (every mode), else the CPU.  Unlike a score task it never fails for want of
    a GPU: both tracebacks give the same alignments."""
    if device == "cpu" or simulator_enabled():
        # Numba's CUDA simulator would take minutes over what the CPU traces in
        # milliseconds; tests/kernels/cuda/test_traceback.py checks the GPU traceback against the
        # CPU's in the simulator, and the GPU lane checks whole searches on a real card.
        return "cpu"
    try:
        return check_device(device, mode, kernels=SEARCH_GPU)
    except DeviceError:
        return "cpu"


def check_long_device(device: str) -> str:
    """``device`` if it is one of :data:`swdask.options.LONG_DEVICES`; else a ValueError
    naming them.

    Examples
    --------
    >>> check_long_device("both")
    'both'
    """
    return check_choice("device", device, LONG_DEVICES)


def tile_device(device: str, gpus: int, *, missing: str) -> str:
    """Long alignment's device once its GPUs are counted: ``"auto"`` is ``"both"`` with
    a GPU, else ``"cpu"``; ``"gpu"`` and ``"both"`` need one.

    Parameters
    ----------
    device : {"auto", "cpu", "gpu", "both"}
    gpus : int
        The GPUs (or GPU workers) there are.
    missing : str
        What a ``"gpu"`` or ``"both"`` without GPUs needs, for the message.

    Raises
    ------
    DeviceError
        ``"gpu"`` or ``"both"`` and no GPU.

    Examples
    --------
    >>> tile_device("auto", 0, missing="a GPU"), tile_device("auto", 2, missing="a GPU")
    ('cpu', 'both')
    """
    if device == "auto":
        return "both" if gpus else "cpu"
    if device in ("gpu", "both") and not gpus:
        raise DeviceError(f"device={device!r} needs {missing}")
    return device


def cluster_gpus(device: str) -> int:
    """The GPU workers of a cluster started here for ``device``: one per visible GPU;
    under the simulator one stands in for a GPU where ``device`` asks for one.  Where
    there are any (their threads are this process's), CUDA is started here first
    (:func:`start_gpu`)."""
    if simulator_enabled():
        gpus = 1 if device in ("gpu", "both") else 0
    else:
        gpus = visible_gpus() if device != "cpu" else 0
    if gpus:
        start_gpu()
    return gpus


# --------------------------------------------------------------------------------------
# this machine and this process
# --------------------------------------------------------------------------------------


def simulator_enabled() -> bool:
    """Whether Numba's CUDA simulator stands in for a GPU (``NUMBA_ENABLE_CUDASIM=1``),
    told without importing Numba (:func:`swdask.kernels.cuda.driver.simulated`)."""
    from .kernels.cuda.driver import simulated

    return simulated()


def start_early() -> None:
    """Begin this process's first use of the GPU on a thread, so that it overlaps the work
    the caller does meanwhile (imports, reading the queries and the store).

    On a GPU that is the CUDA driver and device 0's primary context (0.25-0.3 s on an H100
    host), made through :mod:`swdask.kernels.cuda.driver`, whose calls release the GIL; a
    search launches its cached kernels through that layer, so nothing on its way to the
    first kernel imports Numba (0.55-0.65 s of imports holding the GIL).  Under the
    simulator it is Numba's simulated context.  :func:`gpu_available` (every GPU check)
    waits for the thread, so nothing else touches CUDA while it runs.  It does nothing
    when started already; errors are left to the caller's own check.
    """
    global _early_start
    if _early_start is None:
        _early_start = threading.Thread(target=_first_use, name="swdask-gpu-start", daemon=True)
        _early_start.start()


def _first_use() -> None:
    try:
        if simulator_enabled():
            from numba import cuda

            with _CUDA_START:
                cuda.current_context()
        else:
            _driver_start()
    except Exception:  # noqa: BLE001, S110 - no GPU: gpu_available() says so, in the caller's thread
        pass


def _driver_start() -> None:
    """Start the CUDA driver and make device 0's primary context current through
    :mod:`swdask.kernels.cuda.driver` (ctypes), before Numba is imported.

    ``cuInit`` and ``cuDevicePrimaryCtxRetain`` are what Numba's start calls first, and
    they take 0.25-0.3 s on an H100 host.  Called through :mod:`ctypes` they release the
    GIL, so they run while Python imports Numba; Numba then finds the driver started and
    retains the same context, which the driver layer keeps for the process (its launches
    of cached kernels use it).  Nothing is done under the simulator or off Linux; a
    failing call leaves the error to Numba's own start, which says why.
    """
    if simulator_enabled() or not sys.platform.startswith("linux"):
        return
    from .kernels.cuda import driver

    try:
        driver.context()
    except driver.CudaError:
        pass


def gpu_available() -> bool:
    """Whether a CUDA GPU (or the simulator) is usable: on a GPU, the driver starts and
    counts a device (:func:`swdask.kernels.cuda.driver.device_count`), and Numba, which
    compiles what the cache lacks, is installed.  It makes no context (a process or Dask
    worker that only asks holds no GPU memory; :func:`start_gpu` makes it) and imports no
    Numba.  Calls from several threads take turns (see :func:`start_gpu`).
    """
    if _early_start is not None:
        _early_start.join()
    try:
        with _CUDA_START:
            if simulator_enabled():
                from numba import cuda

                return bool(cuda.is_available())
            import importlib.util

            from .kernels.cuda import driver

            return importlib.util.find_spec("numba") is not None and driver.device_count() > 0
    except Exception:  # noqa: BLE001 - a broken driver or toolkit install means: no GPU
        return False


def start_gpu() -> None:
    """CUDA's first use in this process, done in the calling thread: the driver started
    and device 0's primary context made (:mod:`swdask.kernels.cuda.driver`), and Numba's
    context too where Numba's CUDA target is imported already.  Once per process (later
    calls return at once); calls from several threads take turns.

    Raises
    ------
    DeviceError
        The context cannot be made (the message gives the driver's reason).

    Notes
    -----
    Numba's CUDA driver object marks itself started *before* it calls ``cuInit``
    (``Driver.ensure_initialized`` in numba-cuda 0.30; numba issue #7387).  When a job's
    first CUDA call came from Dask's threads (the lazy APIs on Dask's default scheduler
    left the device to the tasks), two score tasks entered the driver at once: one called
    ``cuInit`` while the other, finding the driver "started", called ``cuCtxGetCurrent``
    before ``cuInit`` had returned and failed with ``CUDA_ERROR_NOT_INITIALIZED``
    (issue 20, class 8, on an H100).  Every job decides its device where it is called
    (:func:`job_device`, :func:`cluster_gpus`), and where the kernels will run in this
    process that decision calls this function, so the driver is started and the context
    exists before any task runs: Numba's start later finds ``cuInit`` done.  Under
    Numba's CUDA simulator this makes the simulator's context.
    """
    global _gpu_started
    if _gpu_started:
        return
    if _early_start is not None:
        _early_start.join()
    with _CUDA_START:
        if _gpu_started:
            return
        try:
            if simulator_enabled() or "numba.cuda" in sys.modules:
                from numba import cuda

                cuda.current_context()
            else:
                from .kernels.cuda import driver

                driver.context()
        except Exception as exc:  # the driver's CudaError, numba's CudaSupportError: one line
            raise DeviceError(f"--device gpu: CUDA could not start in process {os.getpid()}: "
                              f"{' '.join(str(exc).split())}") from None
        _gpu_started = True


def require_gpu() -> None:
    """Raise :class:`DeviceError` unless a GPU (or the simulator) is usable."""
    if not gpu_available():
        raise DeviceError(
            "--device gpu: no CUDA GPU is visible (the CUDA driver could not start device 0, "
            "or Numba is not installed); install swdask[gpu] on a machine with an NVIDIA GPU, "
            "or use --device cpu")


def gpu_here() -> bool:
    """Whether a real CUDA GPU (not the simulator) is usable here: found without importing
    Numba's CUDA target where no driver can be loaded (:func:`cuda_driver_loadable`)."""
    return not simulator_enabled() and cuda_driver_loadable() and gpu_available()


def visible_gpus() -> int:
    """Real CUDA GPUs this process sees (0 under the simulator), counted by the driver
    (:func:`swdask.kernels.cuda.driver.device_count`) without a context or Numba."""
    if simulator_enabled():
        return 0
    from .kernels.cuda import driver

    with _CUDA_START:
        return driver.device_count()


def cuda_driver_loadable() -> bool:
    """False when no CUDA driver library can be loaded on Linux (so there is no GPU),
    found without importing Numba's CUDA target (about 0.2 s of a CPU run's start);
    True wherever that cannot be told so cheaply (then :func:`gpu_available` decides).
    Looks where Numba does (:func:`swdask.kernels.cuda.driver.library`)."""
    if not sys.platform.startswith("linux") or os.environ.get("NUMBA_CUDA_DRIVER"):
        return True
    from .kernels.cuda import driver

    return driver.library() is not None


def current_client() -> Client | None:
    """The default ``distributed`` client, or None (without importing ``distributed``)."""
    if "distributed" not in sys.modules:
        return None
    from distributed import default_client

    try:
        return default_client()
    except ValueError:
        return None


def worker_name() -> str:
    """The address of the Dask worker running this, else ``"process PID"``."""
    if "distributed" in sys.modules:
        from distributed import get_worker

        try:
            return get_worker().address
        except ValueError:
            pass
    return f"process {os.getpid()}"


# --------------------------------------------------------------------------------------
# the GPU calls
# --------------------------------------------------------------------------------------


def score_all_gpu(
    q_res: npt.NDArray[np.uint8], q_off: npt.NDArray[np.int64], s_res: npt.NDArray[np.uint8],
    s_off: npt.NDArray[np.int64], matrix: np.ndarray, gap_open: int, gap_extend: int,
    subjects: npt.NDArray[np.int64] | None = None, *, packed: bool | None = None,
    intra_threshold: int | None = None, mode: str = "local",
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32], KernelStats]:
    """:func:`swdask.kernels.cpu.score.score_all` on the GPU, in ``mode`` (``"local"``,
    ``"global"`` or ``"semiglobal"``; default local).

    The subjects go to the device once; the queries are scored in batches (two per
    launch by the 16-bit kernel where it applies, subjects of at least
    ``intra_threshold`` residues by the block-per-pair kernel; default
    :data:`swdask.kernels.cuda.intra_task.INTRA_THRESHOLD`; see
    :mod:`swdask.kernels.cuda.launcher`).  Returns ``scores, query_end, subject_end``
    (int32, queries x subjects) and the :class:`~swdask.kernels.cuda.launcher.KernelStats`.
    """
    from .kernels.cuda.launcher import DeviceSubjects

    device_subjects = DeviceSubjects(s_res, s_off, subjects, intra_threshold=intra_threshold)
    queries = [q_res[q_off[qi]:q_off[qi + 1]] for qi in range(len(q_off) - 1)]
    return device_subjects.score_many(queries, matrix, gap_open, gap_extend, packed=packed,
                                      mode=mode)


def top_hits_gpu(
    q_res: npt.NDArray[np.uint8], q_off: npt.NDArray[np.int64], s_res: npt.NDArray[np.uint8],
    s_off: npt.NDArray[np.int64], matrix: npt.ArrayLike, gap_open: int, gap_extend: int,
    max_hits: int, min_score: int | None, mode: str = "local",
    ties: npt.NDArray[np.int64] | None = None,
) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], float]:
    """Each query's candidate hits against a partition, selected on the GPU.

    Only the subjects that can be among a query's ``max_hits`` best (scores of at least
    ``min_score``, ties at the cut included; with ``ties``, a key per subject, only the
    ``max_hits`` best by score and then key) in ``mode`` come back from the device; see
    :meth:`swdask.kernels.cuda.launcher.DeviceSubjects.top_many`.  Returns one
    ``(columns, scores, query_ends, subject_ends)`` per query and the kernel seconds.
    """
    from .kernels.cuda.launcher import DeviceSubjects

    queries = [q_res[q_off[qi]:q_off[qi + 1]] for qi in range(len(q_off) - 1)]
    candidates, stats = DeviceSubjects(s_res, s_off).top_many(
        queries, np.asarray(matrix), gap_open, gap_extend, max_hits, min_score, mode=mode,
        ties=ties)
    return candidates, stats.seconds


def load_search_kernels(lengths: npt.ArrayLike, scoring: Scoring,
                        mode: str = "local") -> threading.Thread | None:
    """Begin loading, on a thread, the saved GPU kernels a search of queries of
    ``lengths`` in ``mode`` launches in this process
    (:func:`swdask.kernels.cuda.launcher.load_search_kernels`); returns the thread (None
    where nothing loads ahead), for the caller to join before it returns.  Call it after
    :func:`check_device` has found the GPU (CUDA started in this process)."""
    from .kernels.cuda.launcher import load_search_kernels as load

    return load(np.asarray(lengths).tolist(), scoring.matrix, scoring.gap_open,
                scoring.gap_extend, mode)


# --------------------------------------------------------------------------------------
# device="auto" by expected time
# --------------------------------------------------------------------------------------


#: Rates and fixed costs of the ``device="auto"`` choice (:func:`choose_device`).
#: CPU: the 8-bit SIMD kernel's GCUPS per Numba thread (12.6 GCUPS on two Zen cores,
#: ``workflows/benchmarks/cpu_search.py``).  GPU: the 16-bit kernel's whole-card rate on
#: an H100 (2,000-2,600 GCUPS, ``gpu_search.py``), the first use of the GPU in a process
#: (CUDA context, numba.cuda, loading the kernels, the first upload: 1.8 s measured as
#: the first in-process search minus the second, 20 queries x 102.6 M residues, H100),
#: and a kernel compiled for the first time on this machine (2-7 s each, measured by
#: ``swdask warmup``; built in parallel processes, one per core).
CPU_GCUPS_PER_THREAD = 6.0
GPU_GCUPS = 2000.0
GPU_FIRST_USE_SECONDS = 1.8
COMPILE_SECONDS = 6.0


def choose_device(cells: int, threads: int, kernels_due: int = 0,
                  compile_jobs: int | None = None) -> tuple[str, str]:
    """``("gpu" | "cpu", reason)`` for ``device="auto"``: the GPU only where its expected
    time (first use in this process, kernels still to compile, the kernels) beats the
    CPU kernels' on ``threads`` threads.  ``kernels_due`` kernels not yet compiled on
    this machine are built ``compile_jobs`` at a time (default: one per core).

    Examples
    --------
    >>> choose_device(4_284_806_223_096, 16)[0]  # 20 queries x 102.6 M residues
    'gpu'
    >>> choose_device(28_000_000_000, 16)[0]  # 22 queries x a 2,100-protein proteome
    'cpu'
    >>> choose_device(4_284_806_223_096, 16, kernels_due=5, compile_jobs=16)[1]
    'auto: GPU expected 9.9 s (5 kernels to compile), CPU 45 s'
    """
    cpu = cells / (CPU_GCUPS_PER_THREAD * 1e9 * max(threads, 1))
    jobs = compile_jobs or os.cpu_count() or 1
    compile_seconds = -(-kernels_due // jobs) * COMPILE_SECONDS if kernels_due else 0.0
    gpu = GPU_FIRST_USE_SECONDS + compile_seconds + cells / (GPU_GCUPS * 1e9)
    due = f" ({kernels_due} kernels to compile)" if kernels_due else ""
    reason = f"auto: GPU expected {gpu:.2g} s{due}, CPU {cpu:.2g} s"
    return ("gpu" if gpu < cpu else "cpu"), reason


def auto_device(lengths: np.ndarray, db_residues: int, scoring: Scoring, mode: str,
                threads: int) -> tuple[str, str]:
    """``device="auto"`` for a search in this process: the GPU or the CPU by expected time
    (:func:`choose_device`), and why.

    Work the CPU finishes before a GPU could start is not weighed further: no CUDA
    import, no context.  ``lengths`` are the queries' lengths, ``db_residues`` the
    database's residues.
    """
    cells = int(lengths.sum()) * db_residues
    cpu = cells / (CPU_GCUPS_PER_THREAD * 1e9 * threads)
    if cpu < GPU_FIRST_USE_SECONDS:
        return "cpu", (f"auto: CPU expected {cpu:.2g} s, less than a GPU's start "
                       f"({GPU_FIRST_USE_SECONDS:g} s)")
    if check_device("auto", mode, kernels=SEARCH_GPU) != "gpu":
        return "cpu", ""
    from .kernels.cuda.launcher import kernels_due

    due = kernels_due(lengths, scoring.matrix, scoring.gap_open, scoring.gap_extend, mode)
    return choose_device(cells, threads, due)
