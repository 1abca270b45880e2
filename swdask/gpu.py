"""The GPU backend: is a CUDA device there, and the score pass on it.

Numba's CUDA target is imported only here and only when asked for, so the CPU backend
starts without it.  With ``NUMBA_ENABLE_CUDASIM=1`` the same kernels run in Numba's CUDA
simulator on the CPU (slowly: for tests), and ``device="gpu"`` then uses it.
"""
from __future__ import annotations

import threading

import numpy as np

from .errors import DeviceError

#: The thread of :func:`start_early`, once started.
_early_start: threading.Thread | None = None


def simulator_enabled() -> bool:
    """Whether Numba's CUDA simulator stands in for a GPU (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def start_early() -> None:
    """Begin this process's first use of the GPU on a thread, so that it overlaps the work
    the caller does meanwhile (imports, reading the queries and the store).

    The first use costs about 0.6 s on an H100 host (Numba's CUDA target 0.3 s, driver and
    context 0.3 s, measured 2026-11-25): a search with every kernel in the cache takes 4 s
    in all.  The driver calls release the GIL, so the caller's Python work goes on beside
    them.  :func:`gpu_available` (every GPU check) waits for the thread, so nothing else
    touches CUDA while it runs.  It does nothing when started already; errors are left to
    the caller's own check.  Even Numba is imported on the thread.
    """
    global _early_start
    if _early_start is None:
        _early_start = threading.Thread(target=_first_use, name="swdask-gpu-start", daemon=True)
        _early_start.start()


def _first_use() -> None:
    try:
        from numba import cuda

        if cuda.is_available():
            cuda.current_context()
    except Exception:  # no usable GPU: gpu_available() says so, in the caller's thread
        pass


def gpu_available() -> bool:
    """Whether a CUDA GPU (or the simulator) is usable by Numba."""
    if _early_start is not None:
        _early_start.join()
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # a broken driver or toolkit install means: no GPU
        return False


def require_gpu() -> None:
    """Raise :class:`DeviceError` unless a GPU (or the simulator) is usable."""
    if not gpu_available():
        raise DeviceError(
            "--device gpu: no CUDA GPU is visible to Numba (numba.cuda.is_available() is "
            "False); install swdask[gpu] on a machine with an NVIDIA GPU, or use --device cpu")


def score_all_gpu(q_res, q_off, s_res, s_off, matrix, gap_open, gap_extend, subjects=None, *,
                  packed=None, intra_threshold=None):
    """:func:`swdask.kernels.cpu.score.score_all` for local alignment, on the GPU.

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
    return device_subjects.score_many(queries, matrix, gap_open, gap_extend, packed=packed)


def top_hits_gpu(q_res, q_off, s_res, s_off, matrix, gap_open, gap_extend, max_hits,
                 min_score):
    """Each query's candidate hits against a partition, selected on the GPU.

    Only the subjects that can be among a query's ``max_hits`` best (scores of at least
    ``min_score``, ties at the cut included) come back from the device; see
    :meth:`swdask.kernels.cuda.launcher.DeviceSubjects.top_many`.  Returns one
    ``(columns, scores, query_ends, subject_ends)`` per query and the kernel seconds.
    """
    from .kernels.cuda.launcher import DeviceSubjects

    queries = [q_res[q_off[qi]:q_off[qi + 1]] for qi in range(len(q_off) - 1)]
    candidates, stats = DeviceSubjects(s_res, s_off).top_many(
        queries, np.asarray(matrix), gap_open, gap_extend, max_hits, min_score)
    return candidates, stats.seconds


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
    import os

    cpu = cells / (CPU_GCUPS_PER_THREAD * 1e9 * max(threads, 1))
    jobs = compile_jobs or os.cpu_count() or 1
    compile_seconds = -(-kernels_due // jobs) * COMPILE_SECONDS if kernels_due else 0.0
    gpu = GPU_FIRST_USE_SECONDS + compile_seconds + cells / (GPU_GCUPS * 1e9)
    due = f" ({kernels_due} kernels to compile)" if kernels_due else ""
    reason = f"auto: GPU expected {gpu:.2g} s{due}, CPU {cpu:.2g} s"
    return ("gpu" if gpu < cpu else "cpu"), reason
