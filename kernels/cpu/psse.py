"""Pairwise statistical significance on the CPU: shuffles, a profile scorer, the Gumbel fit.

The functions of :mod:`swdask.kernels.psse_math` (the RNG, the shuffles and the censored
Gumbel fit, written once as plain Python) compiled with ``@njit``, and the parallel
loops over a chunk's copies and pairs.  The same integer arithmetic as the GPU's gives
the same shuffles, to the residue, on every backend and for every launch geometry.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..psse_math import (  # noqa: F401  (the plain functions, also read from here)
    chunk_subjects,
    fisher_yates,
    gumbel_fit,
    gumbel_sf,
    pair_significance,
    philox,
    with_globals,
    write_copy,
)

philox_njit = njit(inline="always", cache=True)(philox)
fisher_yates_njit = njit(cache=True)(with_globals(fisher_yates, philox=philox_njit))
write_copy_njit = njit(inline="always")(with_globals(write_copy, fisher_yates=fisher_yates_njit))
gumbel_fit_njit = njit(cache=True)(gumbel_fit)
gumbel_sf_njit = njit(cache=True)(gumbel_sf)
pair_significance_njit = njit(cache=True)(with_globals(
    pair_significance, gumbel_fit=gumbel_fit_njit, gumbel_sf=gumbel_sf_njit))


@njit(parallel=True, cache=True, nogil=True)
def shuffle_chunk(res: np.ndarray, src_off: np.ndarray, lengths: np.ndarray, base: np.ndarray,
                  keys: np.ndarray, n_shuffles: int | np.integer, seed: int | np.integer,
                  out: np.ndarray, out_off: np.ndarray) -> None:
    """Fill ``out`` with each subject of a chunk followed by its ``n_shuffles`` shuffles.

    Subject ``b`` (``res[src_off[b]:src_off[b]+lengths[b]]``) takes copies
    ``b*(n_shuffles+1) .. (b+1)*(n_shuffles+1)-1``: copy 0 is the subject itself, copy
    ``k`` its shuffle ``k-1``; copy ``k`` starts at ``base[b] + k*lengths[b]`` and
    ``out_off`` gets every copy's start and the end.
    """
    copies = n_shuffles + 1
    total = lengths.shape[0] * copies
    for c in prange(total):
        write_copy_njit(res, src_off, lengths, base, keys, copies, seed, out, out_off, c)
    if total > 0:
        last = lengths.shape[0] - 1
        out_off[total] = base[last] + copies * lengths[last]


@njit(parallel=True, cache=True, nogil=True)
def fit_pairs(scores: np.ndarray, copies: int | np.integer, mu: np.ndarray, lam: np.ndarray,
              p_value: np.ndarray) -> None:
    """For each pair ``b`` (``scores[b*copies]`` its real score, the next ``copies - 1``
    its shuffles' scores): the censored Gumbel fit and the P-value of the real score."""
    for b in prange(mu.shape[0]):
        mu[b], lam[b], p_value[b] = pair_significance_njit(scores, b * copies, copies)


@njit(parallel=True, cache=True, nogil=True)
def score_profile(profile: np.ndarray, s_res: np.ndarray, s_off: np.ndarray, order: np.ndarray,
                  gap_open: int, gap_extend: int, scores: np.ndarray) -> None:
    """Local (Smith-Waterman, Gotoh) scores of one query profile ``profile[code, row]``
    against subjects ``order`` (``scores[c]`` for subject ``order[c]``); a gap of k costs
    ``gap_open + k * gap_extend``.  For position-specific scoring (a PSSM), where the
    SIMD kernels of :mod:`~swdask.kernels.cpu.score` take a substitution matrix."""
    m = profile.shape[1]
    oe = gap_open + gap_extend
    neg = -(1 << 30)
    for c in prange(order.shape[0]):
        s = order[c]
        h = np.zeros(m + 1, np.int64)
        e = np.full(m + 1, neg, np.int64)
        best = 0
        for j in range(s_off[s], s_off[s + 1]):
            code = s_res[j]
            diag = 0
            f = neg
            up = 0
            for i in range(1, m + 1):
                e[i] = max(e[i] - gap_extend, h[i] - oe)
                f = max(f - gap_extend, up - oe)
                v = max(diag + profile[code, i - 1], e[i], f, 0)
                diag = h[i]
                h[i] = v
                up = v
                best = max(best, v)
        scores[c] = best
