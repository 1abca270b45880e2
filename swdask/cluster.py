"""Dask clusters for searches: GPUs, CPUs, or a scheduler that is already running.

:func:`cluster` returns a ``distributed.Client`` (and makes it Dask's default, so that
``swdask.search(...).compute()`` runs on it):

- with GPUs, a dask-cuda ``LocalCUDACluster``: one worker per GPU, each pinned to its GPU
  and given the resource ``GPU=1``;
- without, a ``distributed.LocalCluster`` of worker processes, each with its share of the
  cores for the Numba kernels;
- given ``scheduler=ADDRESS``, a client of that scheduler: a multi-node cluster of stock
  ``dask scheduler``, ``dask cuda worker`` and ``dask worker`` processes
  (``workflows/multinode.md``).

Workers that have a GPU advertise it as the resource ``GPU=1`` (``dask cuda worker
--resources GPU=1`` on a multi-node cluster).  Where GPU and CPU workers are mixed, the
score tasks of a ``device="gpu"`` search must go to GPU workers: Dask ignores
``dask.annotate`` while a DataFrame graph is built, so they are routed when the graph is
submitted, with ``client.compute(hits, resources=gpu_resources)`` (what :func:`compute`
and the command line do).

dask-cuda is imported only when a GPU cluster is started (it comes with ``swdask[gpu]``).
"""
from __future__ import annotations

import ast
import contextlib
import os
import socket
import sys

from . import backend
from .errors import ClusterStartError, DeviceError
from .options import DEVICES, check_choice

__all__ = ["check_main_guard", "cluster", "compute", "gpu_resources", "has_gpu_workers",
           "session", "shutdown", "worker_count"]

#: The port of Dask's dashboard when it is free.
DASHBOARD_PORT = 8787
#: The resource that GPU workers advertise.
GPU_RESOURCE = {"GPU": 1}
#: Dask threads of a GPU worker: one feeds the GPU while the other reads the next partition
#: (measured on an H100: see README, Benchmarks).
GPU_WORKER_THREADS = 2
#: What a GPU task asks for: a share of ``GPU_RESOURCE``, so that a GPU worker runs
#: ``GPU_WORKER_THREADS`` of them at once.  Asking for the whole GPU would let Dask run one
#: at a time whatever the worker's threads (seen on an H100: the score tasks never
#: overlapped).  Their kernels still take turns (one lock per worker process); what
#: overlaps is the rest of a task: reading and decoding a partition, building its table.
GPU_TASK_SHARE = {"GPU": 1 / GPU_WORKER_THREADS}


def cluster(n_workers: int | None = None, *, scheduler: str | None = None, device: str = "auto",
            threads_per_worker: int | None = None, dashboard_address: str | None = None,
            **kwargs):
    """A Dask client for searches: a new GPU or CPU cluster here, or a running scheduler.

    Parameters
    ----------
    n_workers : int, optional
        Workers of a new local cluster.  Default: one per visible GPU for a GPU cluster;
        for a CPU cluster, Dask's split of the cores into processes
        (``distributed.deploy.utils.nprocesses_nthreads``: 2 workers on 2 cores, 4 on 16).
    scheduler : str, optional
        The address of a running scheduler (``tcp://host:8786``) or its scheduler file:
        connect to it instead of starting a cluster.  ``n_workers``,
        ``threads_per_worker``, ``dashboard_address`` and ``kwargs`` do not apply then.
    device : {"auto", "cpu", "gpu"}, default "auto"
        ``"auto"``: a ``LocalCUDACluster`` when Numba sees a GPU, else a ``LocalCluster``.
        ``"gpu"``: a ``LocalCUDACluster``, or, under Numba's CUDA simulator
        (``NUMBA_ENABLE_CUDASIM=1``, no GPU), a ``LocalCluster`` whose workers advertise
        ``GPU=1`` and run the CUDA kernels in the simulator (for tests).  ``"cpu"``: a
        ``LocalCluster`` even where there are GPUs.
    threads_per_worker : int, optional
        Dask threads per worker: default 2 on a GPU worker, 1 on a CPU worker.  Tasks of
        one worker take turns on its GPU (or its kernel threads), so a second thread reads
        and decodes the next partition while the GPU scores the current one.
    dashboard_address : str, optional
        Where the dashboard listens; default ``":8787"``, or any free port when 8787 is
        taken.  ``client.dashboard_link`` gives its address.
    **kwargs
        Passed to ``LocalCUDACluster`` or ``LocalCluster`` (``memory_limit``, ...).

    Returns
    -------
    distributed.Client
        Dask's default scheduler from now on.  For a cluster that this function started,
        ``client.cluster`` is it: ``client.close(); client.cluster.close()`` stops it
        (``client.shutdown()`` too, less quietly); for a scheduler given by address
        ``client.close()`` leaves it running.

    Raises
    ------
    ValueError
        An unknown ``device``, a bad ``n_workers`` or ``threads_per_worker``, options
        of a new cluster given with ``scheduler``, or more workers than GPUs.
    DeviceError
        ``device="gpu"`` without a GPU (and without the simulator), or GPUs without
        dask-cuda (``pip install 'swdask[gpu]'``).
    ClusterStartError
        A new cluster started from the top level of a script, outside
        ``if __name__ == "__main__":`` (see :func:`check_main_guard`).

    Notes
    -----
    The Numba kernels of a CPU worker use ``NUMBA_NUM_THREADS`` threads: the cores
    divided by the workers, unless the environment sets it.  GPU workers get
    ``GPU=1`` (see :func:`gpu_resources`).

    Examples
    --------
    >>> client = cluster(1, device="cpu", dashboard_address=":0")
    >>> type(client.cluster).__name__, len(client.scheduler_info()["workers"])
    ('LocalCluster', 1)
    >>> client.dashboard_link  # doctest: +ELLIPSIS
    'http://127.0.0.1:.../status'
    >>> client.close(); client.cluster.close()
    """
    from distributed import Client

    kind, options = _plan(n_workers, scheduler, device, threads_per_worker, dashboard_address,
                          gpus=backend.visible_gpus(),
                          simulator=backend.simulator_enabled())
    if kind == "connect":
        if kwargs:
            raise ValueError(f"{', '.join(sorted(kwargs))}: options of a new cluster, not of a "
                             f"scheduler given by address")
        target = options["address"]
        if os.path.isfile(target):
            return Client(scheduler_file=target)
        return Client(target)
    check_main_guard()
    if kind == "cuda":
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            raise DeviceError("a GPU cluster needs dask-cuda: pip install 'swdask[gpu]' (or use "
                              "device='cpu')") from None
        client = Client(_started(LocalCUDACluster, options, kwargs, dashboard_address))
        client.run(warm_gpu_worker)  # now, not in each worker's first task
        return client
    from distributed import LocalCluster

    return Client(_started(LocalCluster, options, kwargs, dashboard_address))


def _started(cluster_class, options: dict, kwargs: dict, dashboard_address):
    """``cluster_class(**options, **kwargs)``.  When the dashboard port was swdask's choice
    (``dashboard_address=None``) and another process took it between the check and the
    start (two test processes, two notebooks), the cluster starts on a free port instead of
    failing with "Port 8787 is already in use"."""
    try:
        return cluster_class(**options, **kwargs)
    except RuntimeError as exc:
        if dashboard_address is not None or "already in use" not in str(exc):
            raise
        return cluster_class(**dict(options, dashboard_address=":0"), **kwargs)


def check_main_guard() -> None:
    """Refuse to start worker processes from the top level of a script that they would run
    again.

    Dask starts worker processes with Python's ``spawn`` method, which runs the main
    script again in each new process before the worker starts.  Unguarded, a script's
    ``swdask.cluster()`` then runs again in every worker: each fails with Python's
    "bootstrapping phase" error, and the script waited for them until Dask's timeout
    (120 s) to fail with it.  This fails at once instead, with what to do: in the script,
    where the call is outside ``if __name__ == "__main__":``; in a worker process that
    runs the script again (where the script's own check could not tell), at once, so
    that the cluster's start fails in a second.

    A notebook, ``python -c``, a guarded script or a function called from one pass, as do
    a package's ``__main__`` module (``python -m swdask``) and Dask's ``fork`` start
    method (``distributed.worker.multiprocessing-method``), which spawn runs nothing of.

    Raises
    ------
    ClusterStartError
        The script's line that is running is outside the guard; the message names it.
    """
    import dask

    if dask.config.get("distributed.worker.multiprocessing-method", "spawn") == "fork":
        return
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals
                                     .get("__name__") in ("__main__", "__mp_main__")):
        frame = frame.f_back
    if frame is None:  # not while a script runs: a notebook, a function called later, ...
        return
    path, line = frame.f_code.co_filename, frame.f_lineno
    if frame.f_globals["__name__"] == "__main__":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        if spec is not None and (spec.name == "__main__" or spec.name.endswith(".__main__")):
            return  # a package's __main__ (python -m swdask): spawn does not run it again
        if _under_main_guard(path, line):
            return
    raise ClusterStartError(
        f"{path}, line {line}: a Dask cluster started at the top level of a script, which "
        "every worker process runs again as it starts; put the script's code under "
        "'if __name__ == \"__main__\":'")


def _under_main_guard(path: str, line: int) -> bool:
    """Whether ``line`` of the script ``path`` is inside an ``if __name__ == "__main__":``
    block (True also where the file cannot be read as Python: nothing to tell)."""
    try:
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return True
    for node in ast.walk(tree):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and len(node.test.ops) == 1):
            continue
        sides = {_name(node.test.left), _name(node.test.comparators[0])}
        op = type(node.test.ops[0])
        if sides != {"__name__", "'__main__'"} or op not in (ast.Eq, ast.NotEq):
            continue
        block = node.body if op is ast.Eq else node.orelse
        if block and block[0].lineno <= line <= block[-1].end_lineno:
            return True
    return False


def _name(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return repr(node.value)
    return None


def warm_gpu_worker() -> int:
    """Make a GPU worker ready before its first task: Numba's CUDA target imported, the
    worker's CUDA context created, and every kernel compiled on this machine before
    loaded from the kernel cache (:mod:`swdask.kernels.cuda.compile`).  Returns the
    kernels loaded."""
    from numba import cuda

    from .kernels.cuda.compile import preload

    cuda.current_context()
    return preload()


def dask_setup(worker) -> None:
    """Dask's preload hook (``dask cuda worker ... --preload swdask.cluster``): a worker
    that sees a GPU is warmed as :func:`cluster` warms its own (:func:`warm_gpu_worker`)."""
    if backend.gpu_available() and not backend.simulator_enabled():
        warm_gpu_worker()


def _plan(n_workers, scheduler, device, threads_per_worker, dashboard_address, *, gpus: int,
          simulator: bool) -> tuple[str, dict]:
    """Which cluster :func:`cluster` starts: ``("connect" | "cuda" | "local", options)``.

    Examples
    --------
    >>> _plan(None, None, "auto", None, ":0", gpus=2, simulator=False)
    ('cuda', {'n_workers': 2, 'threads_per_worker': 2, 'dashboard_address': ':0', 'resources': {'GPU': 1}})
    >>> _plan(None, "tcp://10.0.0.1:8786", "gpu", None, None, gpus=0, simulator=False)
    ('connect', {'address': 'tcp://10.0.0.1:8786'})
    """
    check_choice("device", device, DEVICES)
    for name, value in (("n_workers", n_workers), ("threads_per_worker", threads_per_worker)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    if scheduler is not None:
        given = [name for name, value in (("n_workers", n_workers),
                                          ("threads_per_worker", threads_per_worker),
                                          ("dashboard_address", dashboard_address))
                 if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: options of a new cluster, not of a scheduler "
                             f"given by address")
        return "connect", {"address": str(scheduler)}
    dashboard = dashboard_address if dashboard_address is not None else _free_dashboard()
    if device != "cpu" and gpus:
        threads = threads_per_worker or GPU_WORKER_THREADS
        if n_workers is not None and n_workers > gpus:
            raise ValueError(f"n_workers={n_workers}, but {gpus} GPU(s) are visible: a GPU "
                             "cluster runs one worker per GPU")
        return "cuda", {"n_workers": n_workers or gpus, "threads_per_worker": threads,
                        "dashboard_address": dashboard, "resources": dict(GPU_RESOURCE)}
    if device == "gpu" and not simulator:
        raise DeviceError("device='gpu': no CUDA GPU is visible to Numba; start the cluster on "
                          "a machine with an NVIDIA GPU (and swdask[gpu]), or use device='cpu'")
    from distributed.deploy.utils import nprocesses_nthreads

    threads = threads_per_worker or 1
    cores = os.cpu_count() or 1
    workers = n_workers or nprocesses_nthreads(cores)[0]
    options = {"n_workers": workers, "threads_per_worker": threads, "processes": True,
               "dashboard_address": dashboard}
    if "NUMBA_NUM_THREADS" not in os.environ:
        options["env"] = {"NUMBA_NUM_THREADS": str(max(1, cores // workers))}
    if device == "gpu":  # the simulator stands in for a GPU on every worker
        options["resources"] = dict(GPU_RESOURCE)
    return "local", options


def _free_dashboard() -> str:
    """``":8787"`` when nothing listens there, else ``":0"`` (any free port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("", DASHBOARD_PORT))
        except OSError:
            return ":0"
    return f":{DASHBOARD_PORT}"


def gpu_resources(key) -> dict:
    """The resources a task of a search graph needs: :data:`GPU_TASK_SHARE` (half a GPU)
    for the score tasks of a ``device="gpu"`` search, none for the others.

    Give it to ``client.compute(..., resources=gpu_resources)`` on a cluster of GPU and
    CPU workers: the scheduler calls it for every task, so the score tasks (which read
    their partition and run the CUDA kernel) go to workers with the resource ``GPU``
    and the merge and traceback tasks go anywhere.  A worker advertising ``GPU=1`` runs
    two score tasks at once: one reads its partition while the other's kernels run.

    Parameters
    ----------
    key : str or tuple
        A task key.

    Returns
    -------
    dict

    Examples
    --------
    >>> gpu_resources(("swdask-to_string_dtype-swdask_score_gpu-0123abcd", 3))
    {'GPU': 0.5}
    >>> gpu_resources("_traceback_batch-0123abcd")
    {}
    """
    name = key[0] if isinstance(key, tuple) else key
    return dict(GPU_TASK_SHARE) if "swdask_score_gpu" in str(name) else {}


def worker_count(client) -> int:
    """How many workers ``client``'s cluster has now."""
    return len(client.scheduler_info(n_workers=-1)["workers"])


def has_gpu_workers(client) -> bool:
    """Whether a worker of ``client`` advertises the resource ``GPU``."""
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    return any(w.get("resources", {}).get("GPU", 0) > 0 for w in workers)


def compute(*collections, client=None, progress: bool = False):
    """Compute Dask collections of a search, as the command line does.

    On ``client`` (a ``distributed.Client``) GPU score tasks are routed to the workers
    with a ``GPU`` resource, if there are any (:func:`gpu_resources`), and ``progress``
    shows Dask's progress bar on stderr (a widget in Jupyter).  Without a client the
    collections run on Dask's default scheduler (threads in this process, or the
    default client), ``progress`` showing ``dask.diagnostics.ProgressBar`` on stderr.

    Parameters
    ----------
    *collections
        Dask collections, e.g. the hits and stats of ``search(..., return_stats=True)``.
    client : distributed.Client, optional
    progress : bool, default False

    Returns
    -------
    tuple
        The computed collections, in order.

    Examples
    --------
    >>> from importlib.resources import files
    >>> from swdask import search
    >>> data = files("swdask") / "data"
    >>> hits, stats = search(data / "demo_queries.fasta", data / "demo_db.fasta.gz", max_hits=1,
    ...                      return_stats=True)
    >>> table, stats = compute(hits, stats)
    >>> len(table), stats.n_hits, stats.cells
    (5, 5, 1321782470)
    """
    import dask

    if client is None:
        if not progress:
            return dask.compute(*collections)
        from dask.diagnostics import ProgressBar

        with ProgressBar(out=sys.stderr):
            return dask.compute(*collections)
    resources = gpu_resources if has_gpu_workers(client) else None
    futures = client.compute(list(collections), resources=resources)
    if progress:
        from distributed import progress as show_progress

        with contextlib.redirect_stdout(sys.stderr):
            show_progress(futures)
    return tuple(client.gather(futures))


@contextlib.contextmanager
def session(n_workers: int | None = None, *, scheduler: str | None = None,
            device: str = "auto", announce=None):
    """The Dask client of one command-line run, closed at the end.

    No ``n_workers`` and no ``scheduler``: None (Dask's threads in this process).
    Otherwise a client from :func:`cluster`; its dashboard link is passed to
    ``announce`` (e.g. ``print``) at the start, and at the end a cluster started here is
    shut down and a scheduler given by address is left running.
    """
    if n_workers is None and scheduler is None:
        yield None
        return
    client = cluster(n_workers, scheduler=scheduler, device=device)
    try:
        if announce is not None:
            announce(f"dask dashboard: {client.dashboard_link}")
        yield client
    finally:
        shutdown(client, cluster_too=scheduler is None)


def shutdown(client, *, cluster_too: bool = True) -> None:
    """Close ``client`` and, with ``cluster_too``, the cluster it started (workers first,
    then the scheduler: no lost heartbeats).

    A worker process that is slow to exit (on a loaded machine it can take more than the
    nanny's 5 s) is killed by its nanny, which then raises ``TimeoutError`` from the
    cluster's close; by then the job's work is done and written, so that is not an error of
    the job and is not raised.

    Examples
    --------
    >>> client = cluster(1, device="cpu", dashboard_address=":0")
    >>> shutdown(client)
    >>> client.status
    'closed'
    """
    started = client.cluster if cluster_too else None
    client.close()
    if started is not None:
        try:
            started.close()
        except TimeoutError:
            pass
