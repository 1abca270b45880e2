"""Shared q-grams of sequence pairs on the GPU: the all-pairs pre-filter of GPU runs.

The same count as :func:`swdask.kernels.cpu.qgram.count_shared` (the merge and the need
are the CPU module's plain-Python functions, compiled here for the device), so the pairs
kept are identical on every backend.  One thread per pair, in a grid-stride loop: pair
``p`` finds its run by a binary search of ``pair_start`` (the layout of
:mod:`swdask.kernels.cuda.all_pairs`), then merges the two sorted code lists, stopping
once the pair's need is out of reach.  The codes are made on the CPU
(:func:`~swdask.kernels.cpu.qgram.qgram_codes`, a block at a time, kept for the next block
pairs) and copied with the block pair: a 2,048-gene block of 16S is 12 MB of int32 codes.

Why a thread per pair and not the tensor cores' count-vector products: the product counts
``sum count_a * count_b``, which over-counts repeated q-grams and so keeps pairs the
exact sum of minima drops, and the merge stops early on pairs that cannot pass.  Whether a warp per query (its codes in shared memory) is faster is
for measurement on the card (issue 17).
"""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import numpy as np
from numba import config, cuda

from ..cpu import qgram as cpu_qgram
from .compile import jit

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["THREADS", "count_shared_gpu"]

#: Threads per block (the simulator runs a Python thread each: few there).
THREADS = 256
SIMULATOR_THREADS = 32
#: Blocks per multiprocessor of the grid-stride launch.
BLOCKS_PER_SM = 8

_need_of = cuda.jit(device=True)(cpu_qgram.need_of)
_merge_count = cuda.jit(device=True)(cpu_qgram.merge_count)


@jit
def _count_kernel(q_codes, q_code_off, s_codes, s_code_off, q_len, s_len, q_list, s_lo,
                  pair_start, q, num, den, shared):
    """``shared[p]`` of every pair ``p``, as the CPU kernel's (one thread a pair)."""
    n_runs = q_list.shape[0]
    total = pair_start[n_runs]
    p = cuda.grid(1)
    stride = cuda.gridsize(1)
    while p < total:
        lo = 0
        hi = n_runs - 1
        while lo < hi:  # the last run starting at or before p
            mid = (lo + hi + 1) // 2
            if pair_start[mid] <= p:
                lo = mid
            else:
                hi = mid - 1
        qi = q_list[lo]
        sj = s_lo[lo] + p - pair_start[lo]
        need = _need_of(q_len[qi], s_len[sj], q, num, den)
        count = _merge_count(q_codes, q_code_off[qi], q_code_off[qi + 1], s_codes,
                             s_code_off[sj], s_code_off[sj + 1], need)
        shared[p] = count if count >= need else -1
        p += stride


def count_shared_gpu(q_codes: np.ndarray, q_code_off: np.ndarray, s_codes: np.ndarray,
                     s_code_off: np.ndarray, q_len: np.ndarray, s_len: np.ndarray,
                     q_list: np.ndarray, s_lo: np.ndarray, pair_start: np.ndarray, q: int,
                     num: int, den: int) -> tuple[npt.NDArray[np.int32], float]:
    """:func:`swdask.kernels.cpu.qgram.count_shared` on the GPU: the counts (host int32
    array, one per pair in run order, -1 where a pair cannot reach its need) and the
    kernel's seconds."""
    total = int(pair_start[-1])
    if total == 0:
        return np.zeros(0, np.int32), 0.0
    threads = SIMULATOR_THREADS if config.ENABLE_CUDASIM else THREADS
    if config.ENABLE_CUDASIM:
        blocks = max(1, min(2, math.ceil(total / threads)))
    else:
        sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
        blocks = max(1, min(sms * BLOCKS_PER_SM, math.ceil(total / threads)))
    host = (q_codes, q_code_off, s_codes, s_code_off, q_len, s_len, q_list, s_lo, pair_start)
    device = [cuda.to_device(np.ascontiguousarray(x)) for x in host]
    d_shared = cuda.device_array(total, dtype=np.int32)
    cuda.synchronize()
    tick = time.perf_counter()
    _count_kernel[blocks, threads](*device, q, num, den, d_shared)
    cuda.synchronize()
    seconds = time.perf_counter() - tick
    return d_shared.copy_to_host(), seconds
