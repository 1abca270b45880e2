"""The hand-written kernels of pairwise statistical significance on the GPU: the shuffles,
the order of a block's copies, the Gumbel fits, a scatter.

The device functions are the plain-Python ones of :mod:`swdask.kernels.psse_math`,
compiled with ``@cuda.jit(device=True)`` (the CPU's are the same functions under
``@njit``).  They live apart from :mod:`~swdask.kernels.cuda.psse`, which launches them,
so that a run whose kernels are kept in the cache imports no Numba: this module is
imported only to compile one (:func:`swdask.kernels.cuda.compile.hand_written`).
"""
from __future__ import annotations

from numba import cuda

from .. import psse_math
from .compile import jit

_philox = cuda.jit(device=True)(psse_math.philox)
# Device functions call device functions: fisher_yates gets the device Philox.
_fisher_yates = cuda.jit(device=True)(psse_math.with_globals(psse_math.fisher_yates,
                                                            philox=_philox))
_gumbel_fit = cuda.jit(device=True)(psse_math.gumbel_fit)
_gumbel_sf = cuda.jit(device=True)(psse_math.gumbel_sf)
_write_copy = cuda.jit(device=True)(psse_math.with_globals(psse_math.write_copy,
                                                        fisher_yates=_fisher_yates))
_pair_significance = cuda.jit(device=True)(psse_math.with_globals(
    psse_math.pair_significance, gumbel_fit=_gumbel_fit, gumbel_sf=_gumbel_sf))


@jit
def _shuffle_kernel(res, src_off, lengths, base, keys, n_shuffles, seed, out, out_off):
    """One thread per copy (``subjects x (n_shuffles + 1)``): copy 0 of a block is the
    subject, copy ``k`` its shuffle ``k - 1``; layout as
    :func:`swdask.kernels.cpu.psse.shuffle_chunk`."""
    c = cuda.grid(1)
    copies = n_shuffles + 1
    total = lengths.shape[0] * copies
    if c < total:
        end = _write_copy(res, src_off, lengths, base, keys, copies, seed, out, out_off, c)
        if c == total - 1:
            out_off[total] = end


@jit
def _order_kernel(blocks, copies, order):
    """``order`` lists the copies of the subject blocks ``blocks``, block by block."""
    i = cuda.grid(1)
    if i < order.shape[0]:
        order[i] = blocks[i // copies] * copies + i % copies


@jit
def _fit_kernel(scores, copies, out_score, mu, lam, p_value):
    """One thread per pair ``b``: fit its ``copies - 1`` shuffle scores (from
    ``scores[b*copies + 1]``) and the P-value of its real score ``scores[b*copies]``."""
    b = cuda.grid(1)
    if b < mu.shape[0]:
        m, la, p = _pair_significance(scores, b * copies, copies)
        mu[b] = m
        lam[b] = la
        p_value[b] = p
        out_score[b] = scores[b * copies]


@jit
def _scatter(where, values, out):
    i = cuda.grid(1)
    if i < where.shape[0]:
        out[where[i]] = values[i]
