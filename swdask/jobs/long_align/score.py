"""Long alignment's score pass: the tiles as a Dask DAG over CPU and GPU workers.

Each tile is one task that takes the bottom boundary of the tile above and the right
boundary of the tile on its left and returns its own, plus its best cell; a task picks
its kernel by whether the worker that took it has the resource ``GPU``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...kernels.cpu.threads import kernel_threads
from ...kernels.tile_contract import better, matrix_boundaries
from ..base import import_beside, progress_bar

if TYPE_CHECKING:
    from distributed import Client, Future

    from ...scoring import Scoring
    from .plan import TilePlan

__all__ = ["TileResult", "client_workers", "local_cluster", "local_workers", "row_workers",
           "score_here", "score_pass", "select_worker_gpu", "worker_counts"]


@dataclass(frozen=True)
class TileResult:
    """What a tile task returns: its bottom and right boundaries and its best cell
    (whole-matrix coordinates), and which kernel ran it in how many seconds."""

    bottom_h: np.ndarray
    bottom_f: np.ndarray
    right_h: np.ndarray
    right_e: np.ndarray
    best: tuple
    kind: str
    seconds: float


def select_worker_gpu() -> bool:
    """Whether this task runs on a worker with the resource ``GPU``; if so, make that
    worker's GPU (``gpu-<index>`` workers of :func:`local_cluster`, else GPU 0) current
    for this thread."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return False
    if not worker.state.total_resources.get("GPU", 0):
        return False
    name = str(worker.name)
    gpu = int(name.rsplit("-", 1)[1]) if name.startswith("gpu-") and name[4:].isdigit() else 0
    from ...kernels.cuda import compile, driver

    if gpu and not compile.simulated():  # GPU 0 is every thread's default device
        driver.select_device(gpu)  # the tile kernels launch through the driver layer
    return True


def _tile_task(a, b, r0, r1, c0, c1, top, left, matrix, gap_open, gap_extend, force_cpu,
               here=False):
    """One tile: boundaries from the neighbours' results (None on the matrix border); on
    the GPU when the worker that took it has one, or, ``here`` (no Dask worker), unless
    ``force_cpu``."""
    h, w = r1 - r0, c1 - c0
    top_h, top_f, left_h, left_e = matrix_boundaries(h, w)
    if top is not None:
        top_h, top_f = top.bottom_h, top.bottom_f
    if left is not None:
        left_h, left_e = left.right_h, left.right_e
    started = time.perf_counter()
    if not force_cpu and (here or select_worker_gpu()):
        from ...kernels.cuda.tile import score_tile_gpu

        out = score_tile_gpu(a[r0:r1], b[c0:c1], matrix, gap_open, gap_extend,
                             top_h, top_f, left_h, left_e)
        kind = "gpu"
    else:
        from ...kernels.cpu.tile import score_tile  # Numba: CPU tiles only

        out = score_tile(a[r0:r1], b[c0:c1], matrix, gap_open, gap_extend,
                         top_h, top_f, left_h, left_e)
        kind = "cpu"
    bottom_h, bottom_f, right_h, right_e, score, i, j = out
    best = (int(score), r0 + int(i), c0 + int(j)) if score > 0 else (0, 0, 0)
    return TileResult(bottom_h, bottom_f, right_h, right_e, best, kind,
                      time.perf_counter() - started)


def _tile_summary(result: TileResult):
    return result.best, result.kind, result.seconds


def local_workers(device: str, gpus: int) -> dict[str, dict[str, Any]]:
    """The workers of :func:`local_cluster` (name -> options): ``gpus`` GPU workers (one
    thread, resource ``GPU=1``) and, unless ``device == "gpu"``, one CPU worker with a
    thread per remaining core (Numba's thread count: the cores, unless
    ``NUMBA_NUM_THREADS`` or ``--threads``).

    Examples
    --------
    >>> sorted(local_workers("gpu", 2))
    ['gpu-0', 'gpu-1']
    """
    workers = {}
    if device in ("gpu", "both"):
        for g in range(gpus):
            workers[f"gpu-{g}"] = {"nthreads": 1, "resources": {"GPU": 1}, "dashboard": False}
    if device in ("cpu", "both"):
        workers["cpu"] = {"nthreads": max(1, kernel_threads() - len(workers)),
                          "dashboard": False}
    return workers


def worker_counts(workers: dict[str, dict[str, Any]]) -> tuple[int, int]:
    """``(GPU workers, threads of the other workers)`` of workers described as
    :func:`local_workers` or a scheduler's ``scheduler_info()["workers"]`` describe them
    (``nthreads``, ``resources``)."""
    gpus = sum(1 for w in workers.values() if w.get("resources", {}).get("GPU", 0) > 0)
    threads = sum(w["nthreads"] for w in workers.values()
                  if not w.get("resources", {}).get("GPU", 0))
    return gpus, threads


def local_cluster(device: str, gpus: int) -> Client:
    """An in-process Dask cluster of :func:`local_workers`."""
    from distributed import Client, Scheduler, SpecCluster, Worker

    workers = {name: {"cls": Worker, "options": options}
               for name, options in local_workers(device, gpus).items()}
    cluster = SpecCluster(workers=workers, scheduler={
        "cls": Scheduler, "options": {"dashboard_address": ":0"}},
        silence_logs=40)
    return Client(cluster, set_as_default=False)


def score_here(a: np.ndarray, b: np.ndarray, scoring: Scoring, on_gpu: bool,
               progress: bool, desc: str = "align-long") -> tuple[tuple[int, int, int],
                                                                 dict[str, Any]]:
    """A one-tile plan's score pass in this process, without a Dask cluster: the best
    cell ``(score, i, j)`` and where the tile ran (``tiles_on`` and ``busy_seconds``, as
    :func:`score_pass` gives them).

    What a one-tile plan gains from Dask is nothing, and its start is not: importing
    ``distributed`` (0.58 s) and starting the in-process cluster (0.1-0.4 s) were a third
    of the first run of a 1 Mb pair on an H100 host, whose plan is one GPU tile.
    """
    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    with progress_bar(progress, desc=desc, unit="cell", unit_scale=True,
                      total=len(a) * len(b)) as bar:
        if on_gpu:
            import_beside("pandas")  # pyarrow's first pa.array (the one-row table) imports it
        result = _tile_task(a, b, 0, len(a), 0, len(b), None, None, matrix, scoring.gap_open,
                            scoring.gap_extend, force_cpu=not on_gpu, here=True)
        bar.update(len(a) * len(b))
    kinds = {"cpu": 0, "gpu": 0}
    busy = {"cpu": 0.0, "gpu": 0.0}
    kinds[result.kind] += 1
    busy[result.kind] += result.seconds
    return result.best, {"tiles_on": kinds, "busy_seconds": busy}


def client_workers(client: Client) -> tuple[int, int]:
    """``(GPU workers, threads of the other workers)`` of ``client``'s cluster."""
    return worker_counts(client.scheduler_info(n_workers=-1)["workers"])


def row_workers(client: Client, plan: TilePlan, device: str) -> list[str | None]:
    """The worker each tile row of ``plan`` runs on (its address), or None where any
    worker may take the row's tiles.

    Tile rows are dealt out in turn (row ``p`` to slot ``p`` modulo the slots): for a
    ``"gpu"`` job, and the GPU rows of a ``"both"`` job, over the GPU workers (a tile
    takes a whole GPU); for a ``"cpu"`` job over every worker, a slot per thread.  Left
    to itself, Dask puts a tile where its neighbours' boundaries are, so the tiles
    follow the first ones (on 2 one-thread CPU workers, 34 and 66 of 100 tiles; a plan
    of one tile row per GPU could leave a GPU idle).  Dealt out, the rows run as a
    pipeline on every worker (a tile waits for the one above, on the previous worker,
    and one boundary moves).  The CPU rows of a ``"both"`` job stay free: the
    GPUs take some of them too.  Workers are taken in the order of their names.

    Examples
    --------
    >>> class Cluster:
    ...     def scheduler_info(self, n_workers):
    ...         return {"workers": {"tcp://b": {"name": 1, "nthreads": 2, "resources": {}},
    ...                             "tcp://a": {"name": 0, "nthreads": 1, "resources": {}}}}
    >>> from swdask.jobs.long_align.plan import TilePlan
    >>> row_workers(Cluster(), TilePlan((0, 1, 2, 3, 4), (0, 4)), "cpu")
    ['tcp://a', 'tcp://b', 'tcp://b', 'tcp://a']
    """
    info = client.scheduler_info(n_workers=-1)["workers"]
    names = sorted(info, key=lambda address: (str(info[address].get("name", "")), address))
    gpus = [a for a in names if info[a].get("resources", {}).get("GPU", 0) > 0]
    threads = [int(info[a].get("nthreads", 1)) for a in names]
    cpu_slots = [a for t in range(max(threads, default=0))
                 for a, n in zip(names, threads) if n > t]
    rows = []
    for p in range(plan.shape[0]):
        if device == "gpu" or (device == "both" and p < plan.gpu_rows):
            pool = gpus
        elif device == "cpu":
            pool = cpu_slots
        else:
            pool = []
        rows.append(pool[p % len(pool)] if pool else None)
    return rows


def score_pass(
    client: Client, a_future: Future, b_future: Future, plan: TilePlan, scoring: Scoring,
    device: str, progress: bool, desc: str = "align-long",
) -> tuple[dict[tuple[int, int], Future], tuple[int, int, int], dict[str, Any]]:
    """Submit the tile DAG; return the futures (by tile ``(p, q)``), the best cell
    ``(score, i, j)`` and where the tiles ran (``tiles_on`` and ``busy_seconds`` by kind).
    ``progress`` shows the cells of the tiles done (:func:`swdask.jobs.base.progress_bar`,
    labelled ``desc``)."""
    from dask.base import tokenize
    from distributed import as_completed

    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    n_p, n_q = plan.shape
    token = tokenize(a_future.key, b_future.key, plan, scoring.gap_open, scoring.gap_extend,
                     device, time.time_ns())
    futures = {}
    # Each tile row on its worker (row_workers); loosely, so that a worker lost takes no
    # row with it.
    placed = [{} if w is None else {"workers": [w], "allow_other_workers": True}
              for w in row_workers(client, plan, device)]
    for d in range(n_p + n_q - 1):
        for p in range(max(0, d - n_q + 1), min(n_p, d + 1)):
            q = d - p
            if device == "gpu" or (device == "both" and p < plan.gpu_rows):
                resources = {"GPU": 1}
            else:
                resources = None
            futures[p, q] = client.submit(
                _tile_task, a_future, b_future, plan.rows[p], plan.rows[p + 1], plan.cols[q],
                plan.cols[q + 1], futures.get((p - 1, q)), futures.get((p, q - 1)), matrix,
                scoring.gap_open, scoring.gap_extend, device == "cpu",
                key=f"swdask-tile-{token}-{p}-{q}", priority=-d, resources=resources,
                **placed[p])
    summaries = {client.submit(_tile_summary, f, key=f"swdask-tile-best-{token}-{p}-{q}",
                               priority=-(p + q)): (p, q) for (p, q), f in futures.items()}
    import_beside("pandas")  # pyarrow's first pa.array (the one-row table) imports it
    # Progress in cells: each tile weighs its own (the tiles of a row's end are smaller).
    with progress_bar(progress, desc=desc, unit="cell", unit_scale=True,
                      total=plan.rows[-1] * plan.cols[-1]) as bar:
        for done in as_completed(summaries, loop=client.loop):
            p, q = summaries[done]
            bar.update((plan.rows[p + 1] - plan.rows[p]) * (plan.cols[q + 1] - plan.cols[q]))
    best = (0, 0, 0)
    kinds = {"cpu": 0, "gpu": 0}
    busy = {"cpu": 0.0, "gpu": 0.0}
    for (score, i, j), kind, seconds in client.gather(list(summaries)):
        kinds[kind] += 1
        busy[kind] += seconds
        if score > 0 and better(score, i, j, best[0], best[1], best[2]):
            best = (score, i, j)
    return futures, best, {"tiles_on": kinds, "busy_seconds": busy}
