"""Dask clusters for searches: GPUs, CPUs, or a scheduler that is already running.

:func:`cluster` returns a ``distributed.Client`` (and makes it Dask's default, so that
``swdask.search(...).compute()`` runs on it):

- with GPUs, a dask-cuda ``LocalCUDACluster``: one worker per GPU, each pinned to its GPU
  and given the resource ``GPU=1``;
- without, a ``distributed.LocalCluster`` of worker processes, each with its share of the
  cores for the Numba kernels;
- given ``scheduler=ADDRESS``, a client of that scheduler: a multi-node cluster of stock
  ``dask scheduler``, ``dask cuda worker`` and ``dask worker`` processes
  (``workflows/multinode.md``), reached over TCP or TLS, every wait bounded
  (``swdask.scheduler-timeout``).

**GPU routing.**  Workers that have a GPU advertise it as the resource ``GPU=1`` (``dask
cuda worker --resources GPU=1`` on a multi-node cluster).  A task says itself that it runs
GPU kernels: its function is a :class:`swdask.backend.KernelTask` of ``device="gpu"``.
The scheduler reads that off each task it is given (:class:`TaskRouting`, a scheduler
plugin that :func:`cluster` and :func:`compute` install) and sends such a task to a worker
with ``GPU``, asking for a share of it (:func:`gpu_resources`); the merge and traceback
tasks go anywhere.  Dask drops ``dask.annotate`` once a graph goes through a DataFrame,
and task keys are names, not contracts: neither plays a part.

**Faults.**  A worker that dies takes its running tasks with it; Dask runs them again on
another worker (``distributed.scheduler.allowed-failures`` times), and a kernel task that
raises runs again (``swdask.task-retries``: kernel tasks are pure).  When the cluster
cannot go on, :func:`session` and :func:`compute` say why in one line
(:class:`swdask.errors.ClusterError`).

dask-cuda is imported only when a GPU cluster is started (it comes with ``swdask[gpu]``).
"""
from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import SchedulerPlugin

from . import backend
from .errors import ClusterError, ClusterStartError, DeviceError, InputNotFoundError
from .options import DEVICES, check_choice, tunable

if TYPE_CHECKING:
    from dask._task_spec import GraphNode
    from dask.typing import Key
    from distributed import Client
    from distributed.scheduler import Scheduler
    from distributed.security import Security

__all__ = ["TaskRouting", "check_main_guard", "cluster", "cluster_error", "compute", "connect",
           "faults", "gpu_resources", "largest_first", "route_tasks", "session", "shutdown",
           "tls_security", "work_progress", "work_topic", "worker_count"]

logger = logging.getLogger(__name__)

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
            security: Security | None = None, timeout: str | float | None = None,
            **kwargs: Any) -> Client:
    """A Dask client for searches: a new GPU or CPU cluster here, or a running scheduler.

    Parameters
    ----------
    n_workers : int, optional
        Workers of a new local cluster.  Default: one per visible GPU for a GPU cluster;
        for a CPU cluster, Dask's split of the cores into processes
        (``distributed.deploy.utils.nprocesses_nthreads``: 2 workers on 2 cores, 4 on 16).
    scheduler : str, optional
        The address of a running scheduler (``tcp://host:8786``, ``tls://host:8786``) or
        its scheduler file: connect to it instead of starting a cluster (:func:`connect`:
        every wait bounded by ``swdask.scheduler-timeout``).  ``n_workers``,
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
    security : distributed.security.Security, optional
        TLS settings (:func:`tls_security`).  Default: Dask's configuration
        (``distributed.comm.tls.*``); for a new cluster, none.
    timeout : str or float, optional
        How long a scheduler given by address has to answer (default
        ``swdask.scheduler-timeout``, 10 s).
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
    ClusterError
        The scheduler cannot be reached or does not answer in time, or the workers of a
        new cluster cannot start.

    Notes
    -----
    The Numba kernels of a worker (a GPU worker's too: the q-gram codes, the all-pairs
    path counts, the CPU traceback) use ``NUMBA_NUM_THREADS`` threads: the cores divided
    by the workers, unless the environment sets it.  GPU workers get ``GPU=1``.  The client's scheduler routes GPU work by the tasks themselves
    (:func:`route_tasks`).

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
        client = connect(options["address"], security=security, timeout=timeout)
        route_tasks(client)
        logger.info("connected to the Dask scheduler %s: %d workers", options["address"],
                    worker_count(client))
        return client
    if security is not None:
        kwargs = dict(kwargs, security=security)
    check_main_guard()
    if kind == "cuda":
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            raise DeviceError("a GPU cluster needs dask-cuda: pip install 'swdask[gpu]' (or use "
                              "device='cpu')") from None
        client = Client(_started(LocalCUDACluster, options, kwargs, dashboard_address))
        client.run(warm_worker, True)  # now, not in each worker's first task
    else:
        from distributed import LocalCluster

        client = Client(_started(LocalCluster, options, kwargs, dashboard_address))
        client.run(warm_worker)
    route_tasks(client)
    logger.info("started a %s of %d workers (%s); dashboard %s", type(client.cluster).__name__,
                worker_count(client), ", ".join(f"{k}={v}" for k, v in sorted(options.items())),
                client.dashboard_link)
    return client


def _started(cluster_class, options: dict, kwargs: dict, dashboard_address):
    """``cluster_class(**options, **kwargs)``, the caller's ``kwargs`` first (their ``env``
    added to swdask's: ``env={"NUMBA_NUM_THREADS": "1"}`` sets the workers' kernel threads).
    When the dashboard port was swdask's choice (``dashboard_address=None``) and another
    process took it between the check and the start (two test processes, two notebooks),
    the cluster starts on a free port instead of failing with "Port 8787 is already in
    use".  Workers that cannot start (Dask's "Nanny failed to start", or a timeout) are a
    :class:`ClusterError` naming the cause."""
    import dask.config

    env = {**options.get("env", {}), **kwargs.get("env", {})}
    options = {key: value for key, value in options.items() if key not in kwargs and key != "env"}
    kwargs = {key: value for key, value in kwargs.items() if key != "env"}
    # Through Dask's configuration, not ``env=``: dask-cuda replaces a worker's ``env``
    # with its own (CUDA_VISIBLE_DEVICES), and its CPU-affinity plugin may leave every
    # worker all of the cores, so each GPU worker's Numba would start a thread per core.
    # The nannies read it while the cluster starts.
    environ = {**dask.config.get("distributed.nanny.environ", {}), **env}
    try:
        with dask.config.set({"distributed.nanny.environ": environ}):
            try:
                return cluster_class(**options, **kwargs)
            except RuntimeError as exc:
                if dashboard_address is not None or "already in use" not in str(exc):
                    raise
                return cluster_class(**dict(options, dashboard_address=":0"), **kwargs)
    except (RuntimeError, TimeoutError, OSError) as exc:
        raise ClusterError(f"the local Dask cluster ({options.get('n_workers')} worker(s)) could "
                           f"not start: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    """An exception and its causes as one line: ``"Nanny failed to start: MemoryError: ..."``."""
    parts = []
    while exc is not None and len(parts) < 4:
        text = " ".join(str(exc).split()) or type(exc).__name__
        if text not in parts:
            parts.append(text)
        exc = exc.__cause__ or exc.__context__
    return ": ".join(parts)


# --------------------------------------------------------------------------------------
# a scheduler given by address: bounded waits, TLS
# --------------------------------------------------------------------------------------


def tls_security(ca_file: os.PathLike | str | None = None, cert: os.PathLike | str | None = None,
                 key: os.PathLike | str | None = None) -> Security:
    """Dask's ``Security`` for a TLS scheduler, from the CLI's ``--tls-ca-file``,
    ``--tls-cert`` and ``--tls-key``; with none of them, Dask's configuration
    (``distributed.comm.tls.ca-file``, ``.client.cert``, ``.client.key`` in a Dask config
    file or ``DASK_DISTRIBUTED__COMM__TLS__...`` variables).

    Parameters
    ----------
    ca_file : path, optional
        The certificate authority that signed the scheduler's certificate.
    cert : path, optional
        This client's certificate (it may hold the key too).
    key : path, optional
        This client's private key, when not in ``cert``.

    Returns
    -------
    distributed.security.Security

    Raises
    ------
    InputNotFoundError
        A file that does not exist.
    ValueError
        ``key`` without ``cert``, or ``cert`` without ``ca_file``.
    """
    from distributed.security import Security

    given = {"--tls-ca-file": ca_file, "--tls-cert": cert, "--tls-key": key}
    if not any(given.values()):
        return Security()
    for flag, path in given.items():
        if path is not None and not os.path.isfile(path):
            raise InputNotFoundError(f"{path}: no such file ({flag})")
    if key is not None and cert is None:
        raise ValueError("--tls-key needs --tls-cert (the certificate it belongs to)")
    if ca_file is None:
        raise ValueError("--tls-cert and --tls-key need --tls-ca-file (the authority that "
                         "signed the scheduler's certificate)")
    return Security(tls_ca_file=str(ca_file), tls_client_cert=cert and str(cert),
                    tls_client_key=key and str(key), require_encryption=True)


def _scheduler_address(target: str) -> str:
    """``target``, or the address in the scheduler file ``target``."""
    if not os.path.isfile(target):
        return target
    try:
        with open(target, encoding="utf-8") as handle:
            return str(json.load(handle)["address"])
    except (OSError, ValueError, KeyError, TypeError):
        raise ClusterError(f"{target}: not a Dask scheduler file (JSON with an 'address')") \
            from None


async def _identity(address: str, timeout: float, connection_args: dict):
    from distributed.comm import connect as dask_connect

    comm = await dask_connect(address, timeout=timeout, **connection_args)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


#: What every "no scheduler answered" message ends with.
_LONGER = "check the address, or allow longer with --scheduler-timeout (swdask.scheduler-timeout)"


def _reach(address: str, deadline: float, timeout: float) -> None:
    """Wait until something takes a TCP connection at ``address`` (a scheduler may still be
    starting), or raise a :class:`ClusterError` saying why not by ``deadline``."""
    import time

    from distributed.comm import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme not in ("tcp", "tls"):
        return  # other transports: Dask's own connect, under the same deadline
    host, port = parse_host_port(location)
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(left, 0.01)):
                return
        except socket.gaierror as exc:
            raise ClusterError(f"{address}: unknown host {host!r} ({exc.strerror})") from None
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
        if time.monotonic() + 0.1 >= deadline:
            raise ClusterError(f"{address}: no Dask scheduler answered within {timeout:g} s: "
                               f"{reason.lower()} ({_LONGER})")
        time.sleep(0.1)


def _ask_identity(address: str, timeout: float, security) -> dict:
    """The scheduler's answer to ``identity``, or a :class:`ClusterError` within
    ``timeout`` seconds.  Dask's own connect retries for its timeout but then waits for the
    handshake without a limit (a server that takes the connection and never answers hangs
    it), so the exchange runs under one deadline, on a thread of its own (the caller may
    be inside an event loop: Jupyter)."""
    import time

    connection_args = security.get_connection_args("client")
    if address.startswith("tls://") and connection_args.get("ssl_context") is None:
        raise ClusterError(f"{address}: a TLS scheduler needs TLS settings: --tls-ca-file, "
                           "--tls-cert and --tls-key, or distributed.comm.tls.* in a Dask "
                           "config file")
    deadline = time.monotonic() + timeout
    _reach(address, deadline, timeout)
    outcome = {}

    def ask():
        left = max(deadline - time.monotonic(), 0.01)
        try:
            outcome["reply"] = asyncio.run(asyncio.wait_for(
                _identity(address, left, connection_args), left))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=ask, name="swdask-scheduler-probe", daemon=True)
    thread.start()
    thread.join()
    error = outcome.get("error")
    if error is None:
        return outcome["reply"]
    if isinstance(error, TimeoutError):  # asyncio's too, since Python 3.11
        raise ClusterError(f"{address}: no Dask scheduler answered within {timeout:g} s: "
                           f"something took the connection but sent nothing back ({_LONGER})") \
            from None
    if isinstance(error, (OSError, ValueError, TypeError)):
        raise ClusterError(f"{address}: cannot talk to the Dask scheduler: {_reason(error)}") \
            from None
    raise error


def connect(scheduler: str, *, security: Security | None = None,
            timeout: str | float | None = None) -> Client:
    """A client of a running scheduler, found and checked within a bounded time.

    Parameters
    ----------
    scheduler : str
        Its address (``tcp://host:8786``, ``tls://host:8786``) or scheduler file.
    security : distributed.security.Security, optional
        TLS settings (:func:`tls_security`); default Dask's configuration.
    timeout : str or float, optional
        How long it has to answer; default ``swdask.scheduler-timeout`` (10 s).

    Returns
    -------
    distributed.Client
        Dask's default client from now on.

    Raises
    ------
    ClusterError
        Nothing answers (an address nobody listens on, or a server that takes the
        connection and never answers), the TLS settings are missing or refused, or the
        address is a Dask worker's; the message is one line and names the address.
    """
    from dask.utils import parse_timedelta
    from distributed import Client
    from distributed.security import Security

    address = _scheduler_address(str(scheduler))
    seconds = parse_timedelta(tunable("scheduler-timeout") if timeout is None else timeout, "s")
    security = Security() if security is None else security
    reply = _ask_identity(address, seconds, security)
    kind = reply.get("type") if isinstance(reply, dict) else None
    if kind != "Scheduler":
        raise ClusterError(f"{address}: that is a Dask {kind or 'server'}, not a scheduler")
    try:
        return Client(address, timeout=seconds, security=security)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ClusterError(f"{address}: cannot connect to the Dask scheduler: {_reason(exc)}") \
            from None


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


#: What every worker of a cluster swdask starts (or preloads) imports before its first
#: task.  Every job's result is a Dask DataFrame, and the first of its partitions that a
#: worker made imported ``dask.dataframe`` there: 0.8-1.5 s on a 2-core machine, after the
#: job's last traceback (the task stream of ``workflows/benchmarks/scaling.py``).
WORKER_IMPORTS = ("dask.dataframe",)


def warm_worker(gpu: bool = False) -> int:
    """Make a worker ready before its first task: :data:`WORKER_IMPORTS` imported and,
    with ``gpu``, :func:`warm_gpu_worker`.  Returns the CUDA kernels loaded (0 without
    ``gpu``)."""
    import importlib

    for name in WORKER_IMPORTS:
        importlib.import_module(name)
    return warm_gpu_worker() if gpu else 0


def warm_gpu_worker() -> int:
    """Make a GPU worker ready before its first task: Numba's CUDA target imported, the
    worker's CUDA context created, and every kernel compiled on this machine before
    loaded from the kernel cache (:mod:`swdask.kernels.cuda.compile`).  Returns the
    kernels loaded."""
    from numba import cuda

    from .kernels.cuda.compile import preload

    cuda.current_context()
    return preload()


def dask_setup(server) -> None:
    """Dask's preload hook (``--preload swdask.cluster``).  On ``dask scheduler``: GPU work
    is routed by the tasks (:class:`TaskRouting`).  On ``dask worker`` or ``dask cuda
    worker``: the worker is warmed as :func:`cluster` warms its own (:func:`warm_worker`,
    with its GPU where it sees one)."""
    from distributed import Scheduler

    if isinstance(server, Scheduler):
        server.add_plugin(TaskRouting(retries=tunable("task-retries")), idempotent=True)
    else:
        warm_worker(backend.gpu_available() and not backend.simulator_enabled())


def _plan(n_workers, scheduler, device, threads_per_worker, dashboard_address, *, gpus: int,
          simulator: bool) -> tuple[str, dict]:
    """Which cluster :func:`cluster` starts: ``("connect" | "cuda" | "local", options)``.

    Examples
    --------
    >>> kind, options = _plan(None, None, "auto", None, ":0", gpus=2, simulator=False)
    >>> kind, {key: value for key, value in options.items() if key != "env"}
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
        workers = n_workers or gpus
        options = {"n_workers": workers, "threads_per_worker": threads,
                   "dashboard_address": dashboard, "resources": dict(GPU_RESOURCE)}
        if "NUMBA_NUM_THREADS" not in os.environ:  # host kernels: a share of the cores each
            options["env"] = {"NUMBA_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // workers))}
        return "cuda", options
    if device == "gpu" and not simulator:
        raise DeviceError("device='gpu': no CUDA GPU is visible to the CUDA driver; start the cluster on "
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


# --------------------------------------------------------------------------------------
# GPU routing, read off the tasks
# --------------------------------------------------------------------------------------


def _spread_tasks(node):
    """The :class:`~swdask.backend.KernelTask` and :class:`~swdask.backend.SpreadTask`
    functions a Dask task runs: its own, those of the tasks fused into it (their subgraph
    is an argument) and of tasks nested in its arguments."""
    from dask._task_spec import GraphNode, Task

    if isinstance(node, Task):
        if isinstance(node.func, (backend.KernelTask, backend.SpreadTask)):
            yield node.func
        parts = list(node.args) + list(node.kwargs.values())
        while parts:
            part = parts.pop()
            if isinstance(part, GraphNode):
                yield from _spread_tasks(part)
            elif isinstance(part, dict):  # a fused subgraph: {key: task}
                parts.extend(part.values())
            elif isinstance(part, (list, tuple)):
                parts.extend(part)


def _kernel_tasks(node):
    """The :class:`~swdask.backend.KernelTask` functions a Dask task runs (as
    :func:`_spread_tasks`)."""
    return (task for task in _spread_tasks(node) if isinstance(task, backend.KernelTask))


def gpu_resources(task: GraphNode) -> dict[str, float]:
    """The resources a task needs: :data:`GPU_TASK_SHARE` (half a GPU) where it runs GPU
    kernels, none otherwise.

    A task runs GPU kernels when its function, or the function of a task fused into it,
    is a :class:`swdask.backend.KernelTask` of ``device="gpu"``: the score tasks of a
    search, the block pairs of all-pairs and the batches of significance, for a job of
    ``device="gpu"``.  The scheduler asks this of every task it is given
    (:class:`TaskRouting`), so that they go to workers with the resource ``GPU`` and
    merge and traceback tasks go anywhere.  A GPU worker (``GPU=1``) runs two such tasks
    at once: one reads its partition while the other's kernels run.

    Parameters
    ----------
    task : dask._task_spec.GraphNode
        A node of a Dask graph (``dask._task_spec.GraphNode``, what the scheduler holds as
        ``TaskState.run_spec``), not a key: keys are names, and route nothing.

    Returns
    -------
    dict of str to float
        ``{"GPU": 0.5}`` or ``{}``.

    Raises
    ------
    TypeError
        ``task`` is not a Dask task (a key, say: ``resources=swdask.gpu_resources`` given
        to ``client.compute`` routes nothing now; use :func:`compute`, or a client from
        :func:`swdask.cluster`).

    Examples
    --------
    >>> import dask
    >>> from swdask.backend import KernelTask
    >>> score = dask.delayed(KernelTask(max, "gpu"))(1, 2, dask_key_name="any-name")
    >>> gpu_resources(score.__dask_graph__()["any-name"])
    {'GPU': 0.5}
    >>> total = dask.delayed(sum)([1, 2], dask_key_name="swdask_score_gpu-looks-like-one")
    >>> gpu_resources(total.__dask_graph__()["swdask_score_gpu-looks-like-one"])
    {}
    """
    from dask._task_spec import GraphNode

    if not isinstance(task, GraphNode):
        raise TypeError(f"gpu_resources takes a Dask task (a graph node), not {task!r}: GPU "
                        "work is routed by the task's function; compute with "
                        "swdask.cluster.compute or on a client from swdask.cluster()")
    gpu = any(kernel.device == "gpu" for kernel in _kernel_tasks(task))
    return dict(GPU_TASK_SHARE) if gpu else {}


def worker_count(client: Client) -> int:
    """How many workers ``client``'s cluster has now."""
    return len(client.scheduler_info(n_workers=-1)["workers"])


class TaskRouting(SchedulerPlugin):
    """A scheduler plugin: what each new task needs, read off the task itself.

    For every task the scheduler is given (any client, ``dask.compute``,
    ``client.compute``, ``persist``, ``submit``) whose function is a
    :class:`swdask.backend.KernelTask`:

    - its resources are :func:`gpu_resources` (GPU work to GPU workers), where a worker
      of the cluster advertises ``GPU`` (else there is nothing to route to, and a
      resource no worker has would leave the task waiting for ever);
    - it may run ``retries`` more times where it raises (kernel tasks are pure);
    - the kernel tasks of a graph start largest ``work`` first: they take the graph's
      priorities of kernel tasks among themselves, the highest going to the most work
      (:func:`largest_first`), so that the last tasks to finish are small and the workers
      finish together (a search's score tasks, significance's batches);
    - for a client that watches its work (:func:`work_progress`), its ``work`` is told to
      that client when the graph arrives (``{"total": ...}``) and when the task is done
      (``{"done": ...}``), as events of the topic :func:`work_topic`.

    **Dealt out by weight** (issue 18).  Tasks of a kernel task's ``work`` or a
    :class:`swdask.backend.SpreadTask`'s ``weight`` are dealt out to the workers when
    their graph arrives (:meth:`deal`): the tasks of each function heaviest first, each
    to the worker with the least weight of that function still to do (longest processing
    time first), which then runs them largest first.  Dask alone puts a task where its
    inputs are (every score task of a search on the worker that held the job: on 2 GPUs the
    second one idle for the first third of the run, 11 of 38 tasks) and shares pushed
    tasks out by count, not by size; its work stealing moves tasks only once their
    estimated time is large (0.2 s of a worker's queue), which a short GPU search's is
    not.  A dealt task is held to its worker loosely (Dask's ``loose_restrictions``): if
    that worker leaves, any worker takes it, and an idle worker may still steal it.  Only
    tasks every running worker could run are dealt (a GPU task on a cluster of GPU and
    CPU workers is left to Dask), and none once a worker joins that could not run them.

    Restrictions and retries given by the caller are kept: a task given its workers
    (``client.compute(..., workers=...)``) is not dealt.  :func:`route_tasks` installs
    it (:func:`cluster`, :func:`compute`, and every job planned while a client is
    current: :func:`swdask.backend.job_device`); ``dask scheduler --preload
    swdask.cluster`` does too.
    """

    name = "swdask-task-routing"
    idempotent = True

    def __init__(self, retries: int = 0) -> None:
        self.retries = int(retries)
        self.scheduler = None
        self.watching = set()  # clients told of their kernel tasks' work
        self.work = {}  # key -> (client, work) of their tasks not done yet
        self.dealt = {}  # key -> (kind, worker address, weight) of dealt tasks not done yet

    def update_graph(self, scheduler: Scheduler, *, tasks: Iterable[Key] = (),
                     client: str | None = None, **kwargs: Any) -> None:
        self.scheduler = scheduler
        gpu_workers = any(ws.resources.get("GPU", 0) > 0 for ws in scheduler.workers.values())
        watched = client in self.watching
        total = 0
        weighed = []  # (work, task) of the graph's kernel tasks
        spread = {}  # kind -> [(weight, task)] to deal out
        for key in tasks:
            ts = scheduler.tasks.get(key)
            if ts is None or ts.state != "released" or ts.run_spec is None:
                continue  # computed, or running already: an earlier graph's task
            shared = list(_spread_tasks(ts.run_spec))
            if not shared:
                continue
            kernels = [task for task in shared if isinstance(task, backend.KernelTask)]
            if kernels:
                if gpu_workers and not ts.resource_restrictions:
                    resources = gpu_resources(ts.run_spec)
                    if resources:
                        ts.resource_restrictions = resources
                if not ts.retries:
                    ts.retries = self.retries
                work = sum(kernel.work for kernel in kernels)
                weighed.append((work, ts))
                if work and watched:
                    self.work[key] = (client, work)
                    total += work
            weight = sum(task.weight for task in shared)
            if weight > 0:
                spread.setdefault(_kind(shared[0].function), []).append((weight, ts))
        largest_first(weighed)
        for kind, items in spread.items():
            self.deal(scheduler, kind, items)
        if total:
            scheduler.log_event(work_topic(client), {"total": total})

    def deal(self, scheduler: Scheduler, kind: str, items: list[tuple[int, Any]]) -> None:
        """Deal tasks of one kind (``(weight, TaskState)``) out to the running workers,
        heaviest first, each to the worker with the least weight of ``kind`` dealt to it
        and not done yet (ties: the worker's address); see the class docstring."""
        running = {ws.address: ws for ws in scheduler.running}
        if len(running) < 2:
            return
        loads = dict.fromkeys(running, 0)
        for other, address, weight in self.dealt.values():
            if other == kind and address in loads:
                loads[address] += weight
        for weight, ts in sorted(items, key=lambda item: (-item[0], item[1].priority or ())):
            if ts.worker_restrictions or ts.host_restrictions:
                continue  # the caller's choice
            valid = scheduler.valid_workers(ts)
            if valid is not None and {ws.address for ws in valid} != set(running):
                continue  # not every worker can run it: Dask's choice among those that can
            address = min(loads, key=lambda a: (loads[a], a))
            ts.worker_restrictions = {address}
            ts.loose_restrictions = True
            loads[address] += weight
            self.dealt[ts.key] = (kind, address, weight)

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        """A worker that cannot run every dealt task joined: those not done yet are held
        to their workers no longer (a loose restriction whose worker left would let Dask
        give a GPU task to that worker)."""
        ws = scheduler.workers.get(worker)
        if ws is None or not self.dealt:
            return
        for key in list(self.dealt):
            ts = scheduler.tasks.get(key)
            if ts is None:
                del self.dealt[key]
                continue
            needs = ts.resource_restrictions or {}
            if any(ws.resources.get(name, 0) < amount for name, amount in needs.items()):
                ts.worker_restrictions = None
                ts.loose_restrictions = False
                del self.dealt[key]

    def transition(self, key: Key, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish != "memory" and finish != "forgotten" and finish != "erred":
            return  # every task's transitions: be quick
        self.dealt.pop(key, None)
        if finish == "erred":
            return
        entry = self.work.pop(key, None)
        if entry is not None and finish == "memory":
            self.scheduler.log_event(work_topic(entry[0]), {"done": entry[1]})

    def watch(self, client: str, on: bool) -> None:
        """Tell ``client`` of its kernel tasks' work from now (``on``), or no longer."""
        if on:
            self.watching.add(client)
            return
        self.watching.discard(client)
        for key in [key for key, (owner, _) in self.work.items() if owner == client]:
            del self.work[key]


def _kind(function: Callable) -> str:
    """The name a task's function is dealt out under (its module and name)."""
    return f"{getattr(function, '__module__', '')}.{getattr(function, '__qualname__', function)}"


def largest_first(weighed: list[tuple[int, Any]]) -> None:
    """Give tasks (``(work, TaskState)`` pairs of one graph) their own priorities again,
    the highest to the most work (ties: in their own order).

    The scheduler starts the tasks that are ready in priority order, each worker taking
    the next as it is free, so the workers start on the largest and end on small ones
    (greedy longest-first).  The priorities Dask gives (``dask.order``) follow the graph's
    shape, not the tasks' sizes: on 2 workers a search's 18 score tasks of 6-12 K
    residues started 11, 9, 8, 14, ... 17, 16, 7, 5, ... 0, the largest (0) last.  Only
    the tasks' own priorities are exchanged, so the graph keeps its place among others.

    Examples
    --------
    >>> class Task:
    ...     def __init__(self, priority):
    ...         self.priority = priority
    >>> tasks = [(5, Task((0, 1, 1))), (9, Task((0, 1, 2))), (7, Task((0, 1, 3)))]
    >>> largest_first(tasks)
    >>> [(work, task.priority) for work, task in tasks]
    [(5, (0, 1, 3)), (9, (0, 1, 1)), (7, (0, 1, 2))]
    """
    weighed = [(work, ts) for work, ts in weighed if ts.priority is not None]
    if len({work for work, _ in weighed}) < 2:
        return  # nothing to order by
    slots = sorted(ts.priority for _, ts in weighed)
    order = sorted(weighed, key=lambda item: (-item[0], item[1].priority))
    for priority, (_, ts) in zip(slots, order):
        ts.priority = priority


def route_tasks(client: Client) -> None:
    """Install :class:`TaskRouting` on ``client``'s scheduler (once; later calls do
    nothing)."""
    client.register_plugin(TaskRouting(retries=tunable("task-retries")))


def work_topic(client: str) -> str:
    """The topic of the events that tell ``client`` (its id) of its tasks' work."""
    return f"swdask-work-{client}"


def _watch(client: str, on: bool, dask_scheduler=None) -> bool:
    """On the scheduler: :meth:`TaskRouting.watch`; False where the plugin is not there."""
    watch = getattr(dask_scheduler.plugins.get(TaskRouting.name), "watch", None)
    if watch is None:  # not installed yet (or another version's, preloaded)
        return False
    watch(client, on)
    return True


def _kernel_work(node) -> int:
    """The work of the kernel tasks in a Dask task (``KernelTask.work``, fused ones too)."""
    return sum(kernel.work for kernel in _kernel_tasks(node))


@contextlib.contextmanager
def work_progress(client: Client, bar: Any) -> Iterator[None]:
    """Count into ``bar`` the work of the kernel tasks that ``client`` computes meanwhile.

    Each kernel task says its work (:class:`swdask.backend.KernelTask`, e.g. the cells of
    a score task); :class:`TaskRouting` tells the client the total of each graph it gets
    and each task's work when the task is done, so that ``bar`` counts cells, not tasks,
    and a task of many cells weighs as much as it costs.  At a success the bar is filled
    (a task recomputed after a worker died is counted once; one computed earlier, not at
    all).
    """
    state = {"bar": bar}

    def handle(event) -> None:  # on the client's event loop
        bar = state["bar"]
        if bar is None:  # an event that came after the end
            return
        message = event[1]
        if "total" in message:
            bar.total = (bar.total or 0) + message["total"]
            bar.refresh()
        else:
            bar.update(min(message["done"], max((bar.total or 0) - bar.n, 0)))

    client.subscribe_topic(work_topic(client.id), handle)
    if not client.run_on_scheduler(_watch, client.id, True):
        route_tasks(client)
        client.run_on_scheduler(_watch, client.id, True)
    try:
        yield
    finally:
        state["bar"] = None
    with contextlib.suppress(Exception):  # counting is done; the run's outcome stands
        client.run_on_scheduler(_watch, client.id, False)
    if bar.total:
        bar.update(bar.total - bar.n)


class _LocalWork:
    """:func:`work_progress` for Dask's threads in this process: a Dask callback that
    counts each kernel task's work when it finishes."""

    def __init__(self, bar):
        from dask.callbacks import Callback

        self.bar = bar
        self.callback = Callback(start_state=self._start, posttask=self._done)

    def _start(self, dsk, state) -> None:
        self.bar.total = sum(_kernel_work(node) for node in dsk.values()) or None
        self.bar.refresh()

    def _done(self, key, result, dsk, state, worker_id) -> None:
        work = _kernel_work(dsk[key])
        if work:
            self.bar.update(work)


def compute(*collections: Any, client: Client | None = None, progress: bool = False,
            desc: str = "swdask") -> tuple[Any, ...]:
    """Compute Dask collections of a job, as the command line does.

    On ``client`` (a ``distributed.Client``; default: the current one, if any) GPU work
    goes to the workers with a ``GPU`` resource, if there are any, read off the tasks
    (:func:`route_tasks`).  Without a client the collections run on Dask's threads in
    this process.  ``progress`` shows progress on the standard error
    (:func:`swdask.jobs.base.progress_bar`: a bar on a terminal or in Jupyter, a line
    every ``swdask.progress-interval`` elsewhere) that counts the kernel tasks' work
    (cells: :func:`work_progress`), not tasks.

    Parameters
    ----------
    *collections
        Dask collections, e.g. the hits and stats of ``search(..., return_stats=True)``.
    client : distributed.Client, optional
    progress : bool, default False
    desc : str, default "swdask"
        What the progress says is done (``"search"``).

    Returns
    -------
    tuple
        The computed collections, in order.

    Raises
    ------
    ClusterError
        The cluster cannot go on: the workers running a task kept dying (Dask's
        ``KilledWorker``).

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

    from .jobs.base import progress_bar

    client = client or backend.current_client()
    with progress_bar(progress, desc=desc, unit="cell", unit_scale=True, leave=False) as bar:
        if client is None:
            if not progress:
                return dask.compute(*collections)
            with _LocalWork(bar).callback:
                return dask.compute(*collections)
        route_tasks(client)
        with faults(), work_progress(client, bar) if progress else contextlib.nullcontext():
            futures = client.compute(list(collections))
            return tuple(client.gather(futures))


def cluster_error(exc: BaseException, then: str = "") -> ClusterError | None:
    """The one-line :class:`ClusterError` of an exception that means the cluster cannot go
    on, else None.  ``then`` is added to the message (what is kept, how to go on)."""
    from distributed import KilledWorker

    if isinstance(exc, ClusterError):
        return ClusterError(f"{exc}{then}") if then else exc
    if isinstance(exc, KilledWorker):
        return ClusterError(
            f"the Dask cluster cannot go on: {exc.allowed_failures + 1} workers died while "
            f"running task {exc.task!r} (the last one {exc.last_worker.address}); a worker dies "
            "when it runs out of memory or is killed: see the workers' logs "
            f"(distributed.scheduler.allowed-failures is {exc.allowed_failures}){then}")
    return None


@contextlib.contextmanager
def faults(then: Callable[[], str] | None = None) -> Iterator[None]:
    """Turn the errors of a cluster that cannot go on into one line (:func:`cluster_error`).

    Parameters
    ----------
    then : callable, optional
        Called at the failure; returns what to add to the message (a resumable job says
        what it kept).

    Raises
    ------
    ClusterError
        In place of an exception that means the cluster cannot go on.
    """
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - re-raised unless it is a cluster's failure
        error = cluster_error(exc)
        if error is None:
            raise
        if then is not None:
            error = cluster_error(error, then())
        raise error from exc


@contextlib.contextmanager
def session(n_workers: int | None = None, *, scheduler: str | None = None,
            device: str = "auto", announce: Callable[[str], object] | None = None,
            security: Security | None = None,
            timeout: str | float | None = None) -> Iterator[Client | None]:
    """The Dask client of one command-line run, closed at the end.

    No ``n_workers`` and no ``scheduler``: None (Dask's threads in this process).
    Otherwise a client from :func:`cluster` (``security`` and ``timeout`` for a scheduler
    given by address); its
    dashboard link is passed to ``announce`` (e.g. ``print``) at the start, and at the end
    a cluster started here is shut down and a scheduler given by address is left running.
    A cluster that cannot go on ends the run in one line (:func:`faults`).
    """
    if n_workers is None and scheduler is None:
        yield None
        return
    # A cluster started here logs nothing below CRITICAL: a run's errors are its one line.
    quiet = {"silence_logs": logging.CRITICAL} if scheduler is None else {}
    client = cluster(n_workers, scheduler=scheduler, device=device, security=security,
                     timeout=timeout, **quiet)
    try:
        if announce is not None:
            announce(f"dask dashboard: {client.dashboard_link}")
        with faults():
            yield client
    finally:
        shutdown(client, cluster_too=scheduler is None)


def shutdown(client: Client, *, cluster_too: bool = True) -> None:
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
