"""Shared q-grams of sequence pairs on the GPU: the all-pairs pre-filter of GPU runs.

The same count as :func:`swdask.kernels.cpu.qgram.count_shared` (the merge and the need
are the CPU module's plain-Python functions, compiled here for the device), so the pairs
kept are identical on every backend.  One thread per pair, in a grid-stride loop: pair
``p`` finds its run by a binary search of ``pair_start`` (the layout of
:mod:`swdask.kernels.cuda.all_pairs`), then merges the two sorted code lists, stopping
once the pair's need is out of reach.  The codes are made on the CPU
(:func:`~swdask.kernels.cpu.qgram.qgram_codes`, a block at a time, kept for the next block
pairs) and copied with the block pair: a 2,048-gene block of 16S is 12 MB of int32 codes.

Before the count, a screen (:func:`screen_and_count_gpu`) drops most pairs with one
matrix product per block pair: every sequence's q-gram tokens (a q-gram's ``k``-th window
is token ``(code, k)``) counted into ``buckets`` hashed buckets
(:func:`~swdask.kernels.cpu.qgram.token_bucket`), and the rows of the two blocks
multiplied by cuBLAS (float32, exact for whole numbers below 2**24).  A pair's dot product
is at least its exact count (the bound is proved at
:func:`swdask.kernels.cpu.qgram.bucket_vectors`), so a pair whose dot product is below
its need cannot reach it and is dropped without merging; the survivors are merged as
before.  Token sets, not q-gram counts: the product of plain counts would count a
q-gram repeated ``c`` times ``c * c`` times.  On 3,000 RefSeq 16S genes at 0.97 the
screen at 16,384 buckets keeps 21,476 of the 1,969,019 pairs the lengths allow (the exact
count keeps 10,897): the merge runs on about 1 % of the pairs (docs/allpairs.md).
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

__all__ = ["THREADS", "count_shared_gpu", "screen_and_count_gpu"]

#: Threads per block (the simulator runs a Python thread each: few there).
THREADS = 256
SIMULATOR_THREADS = 32
#: Blocks per multiprocessor of the grid-stride launch.
BLOCKS_PER_SM = 8

_need_of = cuda.jit(device=True)(cpu_qgram.need_of)
_merge_count = cuda.jit(device=True)(cpu_qgram.merge_count)
_token_bucket = cuda.jit(device=True)(cpu_qgram.token_bucket)
_screen_passes = cuda.jit(device=True)(cpu_qgram.screen_passes)


@cuda.jit(device=True)
def _pair_of(p, q_list, s_lo, pair_start):
    """``(query, subject)`` of pair ``p`` in run order: the last run starting at or
    before ``p``, by binary search."""
    lo = 0
    hi = q_list.shape[0] - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if pair_start[mid] <= p:
            lo = mid
        else:
            hi = mid - 1
    return q_list[lo], s_lo[lo] + p - pair_start[lo]


@jit
def _count_kernel(q_codes, q_code_off, s_codes, s_code_off, q_len, s_len, q_list, s_lo,
                  pair_start, which, q, num, den, shared):
    """``shared[t]`` of pair ``which[t]`` (run order), as the CPU kernel's count (one
    thread a pair)."""
    t = cuda.grid(1)
    while t < which.shape[0]:
        qi, sj = _pair_of(which[t], q_list, s_lo, pair_start)
        need = _need_of(q_len[qi], s_len[sj], q, num, den)
        count = _merge_count(q_codes, q_code_off[qi], q_code_off[qi + 1], s_codes,
                             s_code_off[sj], s_code_off[sj + 1], need)
        shared[t] = count if count >= need else -1
        t += cuda.gridsize(1)


@jit
def _bucket_kernel(codes, code_off, vectors):
    """:func:`swdask.kernels.cpu.qgram.bucket_vectors` (one thread a sequence, its own
    row: no two threads write one cell)."""
    i = cuda.grid(1)
    buckets = vectors.shape[1]
    while i < code_off.shape[0] - 1:
        k = 0
        for p in range(code_off[i], code_off[i + 1]):
            k = k + 1 if p > code_off[i] and codes[p - 1] == codes[p] else 0
            vectors[i, _token_bucket(codes[p], k, buckets)] += 1
        i += cuda.gridsize(1)


@jit
def _screen_kernel(dots, q_code_off, s_code_off, q_len, s_len, q_list, s_lo, pair_start,
                   q, num, den, passed):
    """``passed[p]`` = 1 where pair ``p`` passes the screen
    (:func:`~swdask.kernels.cpu.qgram.screen_passes`), else 0."""
    p = cuda.grid(1)
    while p < pair_start[q_list.shape[0]]:
        qi, sj = _pair_of(p, q_list, s_lo, pair_start)
        tokens = ((q_code_off[qi + 1] - q_code_off[qi])
                  * (s_code_off[sj + 1] - s_code_off[sj]))
        need = _need_of(q_len[qi], s_len[sj], q, num, den)
        passed[p] = 1 if _screen_passes(dots[qi, sj], tokens, need) else 0
        p += cuda.gridsize(1)


def _grid(total: int) -> tuple[int, int]:
    """``(blocks, threads)`` of a grid-stride launch over ``total`` items."""
    threads = SIMULATOR_THREADS if config.ENABLE_CUDASIM else THREADS
    if config.ENABLE_CUDASIM:
        return max(1, min(2, math.ceil(total / threads))), threads
    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    return max(1, min(sms * BLOCKS_PER_SM, math.ceil(total / threads))), threads


def _array_module():
    """cupy on a real GPU (zeroed device arrays, cuBLAS's matrix product, compaction);
    numpy in Numba's simulator, whose kernels take host arrays.  None where cupy is not
    installed: then no screen."""
    if config.ENABLE_CUDASIM:
        return np
    try:
        import cupy
    except ImportError:  # the [gpu] extra brings it; without it every pair is merged
        return None
    return cupy


def screen_available() -> bool:
    """Whether :func:`screen_and_count_gpu` can screen here (cupy, or the simulator)."""
    return _array_module() is not None


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
    host = (q_codes, q_code_off, s_codes, s_code_off, q_len, s_len, q_list, s_lo, pair_start,
            np.arange(total, dtype=np.int64))
    device = [cuda.to_device(np.ascontiguousarray(x)) for x in host]
    d_shared = cuda.device_array(total, dtype=np.int32)
    cuda.synchronize()
    tick = time.perf_counter()
    _count_kernel[_grid(total)](*device, q, num, den, d_shared)
    cuda.synchronize()
    seconds = time.perf_counter() - tick
    return d_shared.copy_to_host(), seconds


def screen_and_count_gpu(q_codes: np.ndarray, q_code_off: np.ndarray, s_codes: np.ndarray,
                         s_code_off: np.ndarray, q_len: np.ndarray, s_len: np.ndarray,
                         q_list: np.ndarray, s_lo: np.ndarray, pair_start: np.ndarray,
                         q: int, num: int, den: int, buckets: int,
                         same_block: bool = False) -> tuple[npt.NDArray[np.int64],
                                                            npt.NDArray[np.int32], float]:
    """The pairs (run order) that reach their need: the screen, then the exact count of
    the pairs it keeps, on the GPU.

    Parameters are :func:`count_shared_gpu`'s, and ``buckets`` (the width of the token
    vectors) and ``same_block`` (the query and subject blocks are one: one set of
    vectors).

    Returns
    -------
    kept : numpy.ndarray of int64
        Positions, in run order, of the pairs whose exact count reaches their need.
    counts : numpy.ndarray of int32
        Their shared counts.
    seconds : float
        Of the kernels and the matrix product.
    """
    xp = _array_module()
    total = int(pair_start[-1])
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int32), 0.0
    if xp is None:
        raise RuntimeError("the q-gram screen needs cupy (pip install 'swdask[gpu]')")

    def upload(*arrays):
        arrays = [np.ascontiguousarray(x) for x in arrays]
        return arrays if xp is np else [cuda.to_device(x) for x in arrays]

    d_qc, d_qo, d_ql, d_qlist, d_slo, d_ps = upload(q_codes, q_code_off, q_len, q_list, s_lo,
                                                    pair_start)
    d_sc, d_so, d_sl = (d_qc, d_qo, d_ql) if same_block else upload(s_codes, s_code_off, s_len)
    cuda.synchronize()
    tick = time.perf_counter()
    vectors = []
    for codes, offsets in ((d_qc, d_qo),) if same_block else ((d_qc, d_qo), (d_sc, d_so)):
        rows = len(offsets) - 1
        v = xp.zeros((rows, buckets), dtype=np.float32)
        _bucket_kernel[_grid(rows)](codes, offsets, v)
        vectors.append(v)
    # cuBLAS (numpy in the simulator): float32, exact below EXACT_DOT (see its note).
    dots = vectors[0] @ vectors[-1].T
    passed = xp.zeros(total, dtype=np.uint8)
    _screen_kernel[_grid(total)](dots, d_qo, d_so, d_ql, d_sl, d_qlist, d_slo, d_ps, q, num,
                                 den, passed)
    which = xp.flatnonzero(passed).astype(np.int64)
    del vectors, dots, passed
    shared = xp.zeros(len(which), dtype=np.int32)
    if len(which):
        _count_kernel[_grid(len(which))](d_qc, d_qo, d_sc, d_so, d_ql, d_sl, d_qlist, d_slo,
                                         d_ps, which, q, num, den, shared)
    cuda.synchronize()
    seconds = time.perf_counter() - tick
    which, shared = (x if xp is np else x.get() for x in (which, shared))
    reached = shared >= 0
    return which[reached], shared[reached], seconds
