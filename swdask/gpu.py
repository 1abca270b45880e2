"""The GPU backend: is a CUDA device there, and the score pass on it.

Numba's CUDA target is imported only here and only when asked for, so the CPU backend
starts without it.  With ``NUMBA_ENABLE_CUDASIM=1`` the same kernels run in Numba's CUDA
simulator on the CPU (slowly: for tests), and ``device="gpu"`` then uses it.
"""
from __future__ import annotations

import numpy as np

from .errors import DeviceError


def simulator_enabled() -> bool:
    """Whether Numba's CUDA simulator stands in for a GPU (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def gpu_available() -> bool:
    """Whether a CUDA GPU (or the simulator) is usable by Numba."""
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
