"""Pairwise statistical significance, written once: the shuffles, the Gumbel fit, the chunks.

The random shuffles and the censored Gumbel fit are plain Python functions of scalars
and arrays (:func:`philox`, :func:`fisher_yates`, :func:`gumbel_fit`), compiled twice:
with ``@njit`` in :mod:`swdask.kernels.cpu.psse` and with ``@cuda.jit(device=True)`` in
:mod:`swdask.kernels.cuda.psse_kernels`. This module imports no Numba, so that a GPU run
whose kernels are kept in the cache plans its chunks and launches them without it (Numba
and its CUDA target took 0.53 s of a 2 s ``swdask significance`` on an H100 host). The
same integer arithmetic on both sides gives the same shuffles, to the residue, on every
backend and for every launch geometry.

RNG
---
Philox4x32-10 (Salmon et al. 2011), counter-based: the 128-bit counter is
``(block, shuffle, key_lo, key_hi)`` (``key`` a 64-bit id of the subject, ``block`` the
index of the 4-word block of the stream) and the 64-bit Philox key is the user's
``seed``.  All arithmetic holds 32-bit values in uint64 variables: a 32 x 32-bit product
fits in 64 bits, so nothing ever wraps (the CUDA simulator, which runs device code as
numpy scalars, would warn on a wrap).  Bounded integers use Lemire's multiply-shift with
rejection (exactly uniform; a rejected word takes the next word of the stream).

Fisher-Yates
------------
For ``i = n-1 .. 1`` swap ``a[i]`` with ``a[j]``, ``j`` uniform in ``[0, i]``: every
permutation equally likely, so each shuffle keeps the subject's composition exactly.

Gumbel fit
----------
Censored maximum likelihood (Eddy, ``esl_gumbel_FitCensored``): scores at or below the
cutoff ``phi`` are only counted (``z`` of them), the ``n`` scores above it are used.
With ``mu`` eliminated by its own likelihood equation, ``lambda`` solves::

    1/lambda - mean(x_obs) + S1/S0 = 0,
    S0 = sum(exp(-lambda x_i)) + z exp(-lambda phi),
    S1 = sum(x_i exp(-lambda x_i)) + z phi exp(-lambda phi)

which decreases monotonically in ``lambda`` (one root); it is solved by Newton's method
safeguarded by bisection, then ``mu = -log(S0 / n) / lambda``.  The low side is
censored because a local-alignment score distribution is Gumbel only in its right tail:
low scores pile up near zero (short alignments, the max(0, .) of Smith-Waterman), and
the right tail is what a P-value reads.  The cutoff is ``phi = floor(mean) + 0.5``: scores
are integers, so it is the boundary between the last censored score and the first
observed one (censoring at an integer score would treat the observed score ``phi + 1``
as the continuous value it rounds, and biases lambda low by ~10%).  It censors about
57% of a Gumbel sample (P(X <= mean) = exp(-exp(-0.5772))).
"""
from __future__ import annotations

import math
from types import FunctionType
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

#: Philox4x32 round multipliers and Weyl key increments (Salmon et al. 2011).
PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
MASK32 = 0xFFFFFFFF


def philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of the counter ``(c0, c1, c2, c3)`` under the key ``(k0, k1)``.

    Every argument and result is a 32-bit value held in a uint64.

    Examples
    --------
    Known-answer vector of the Random123 distribution (counter and key all ones):

    >>> [hex(x) for x in philox(*[np.uint64(0xFFFFFFFF)] * 6)]
    ['0x408f276d', '0x41c83b0e', '0xa20bc7c6', '0x6d5451fd']
    """
    m0 = np.uint64(PHILOX_M0)
    m1 = np.uint64(PHILOX_M1)
    w0 = np.uint64(PHILOX_W0)
    w1 = np.uint64(PHILOX_W1)
    mask = np.uint64(MASK32)
    s32 = np.uint64(32)
    for _ in range(10):
        p0 = m0 * c0
        p1 = m1 * c2
        n0 = (p1 >> s32) ^ c1 ^ k0
        n1 = p1 & mask
        n2 = (p0 >> s32) ^ c3 ^ k1
        n3 = p0 & mask
        c0, c1, c2, c3 = n0, n1, n2, n3
        k0 = (k0 + w0) & mask
        k1 = (k1 + w1) & mask
    return c0, c1, c2, c3


def fisher_yates(res, start, n, out, out_start, seed, key, shuffle):
    """Write a uniformly random permutation of ``res[start:start+n]`` to
    ``out[out_start:out_start+n]``, drawn from Philox keyed on ``(seed, key, shuffle)``.

    ``seed`` and ``key`` are uint64; ``shuffle`` the shuffle number (< 2**32).
    """
    mask = np.uint64(MASK32)
    s32 = np.uint64(32)
    k0 = np.uint64(seed) & mask
    k1 = np.uint64(seed) >> s32
    c1 = np.uint64(shuffle) & mask
    c2 = np.uint64(key) & mask
    c3 = np.uint64(key) >> s32
    for t in range(n):
        out[out_start + t] = res[start + t]
    block = np.uint64(0)
    r0, r1, r2, r3 = philox(block, c1, c2, c3, k0, k1)
    used = 0
    i = n - 1
    while i > 0:
        bound = np.uint64(i + 1)
        # Lemire: the high word of x * bound is uniform in [0, bound) once the low words
        # below threshold = (2**32 - bound) % bound are rejected.  threshold < bound, so
        # the (slow, 64-bit) modulo is needed only when the low word is below bound:
        # rarely, the acceptance decisions are the same.
        threshold = bound
        while True:
            if used == 4:
                block += np.uint64(1)
                r0, r1, r2, r3 = philox(block, c1, c2, c3, k0, k1)
                used = 0
            x = r0 if used == 0 else (r1 if used == 1 else (r2 if used == 2 else r3))
            used += 1
            m = x * bound
            low = m & mask
            if low >= threshold:
                break
            if threshold == bound:
                threshold = (np.uint64(1 << 32) - bound) % bound
                if low >= threshold:
                    break
        j = int(m >> s32)
        a = out[out_start + i]
        out[out_start + i] = out[out_start + j]
        out[out_start + j] = a
        i -= 1


def write_copy(res, src_off, lengths, base, keys, copies, seed, out, out_off, c):
    """Write copy ``c`` of a chunk of subjects and their shuffles (layout of
    :func:`shuffle_chunk`): copy ``c % copies`` of subject ``c // copies``, 0 the subject
    itself, ``k`` its shuffle ``k - 1`` (:func:`fisher_yates`).  Sets ``out_off[c]`` and
    returns where the copy ends."""
    b = c // copies
    k = c % copies
    at = base[b] + k * lengths[b]
    out_off[c] = at
    if k == 0:
        for t in range(lengths[b]):
            out[at + t] = res[src_off[b] + t]
    else:
        fisher_yates(res, src_off[b], lengths[b], out, at, seed, keys[b], k - 1)
    return at + lengths[b]


def gumbel_fit(x, start, count):
    """Censored ML Gumbel fit of ``x[start:start+count]`` (scores), censored below
    ``phi = floor(mean) + 0.5`` (see the module notes).

    Returns ``(mu, lambda)``; ``(nan, nan)`` when no score lies above the cutoff.
    """
    total = 0.0
    for t in range(count):
        total += x[start + t]
    phi = math.floor(total / count) + 0.5 if count > 0 else 0.0
    n = 0
    obs_sum = 0.0
    sq = 0.0
    for t in range(count):
        v = float(x[start + t])
        sq += (v - total / count) * (v - total / count)
        if v > phi:
            n += 1
            obs_sum += v
    if n == 0:
        return math.nan, math.nan
    z = count - n
    mean_obs = obs_sum / n
    sd = math.sqrt(sq / count)
    # Start from the moment estimate of the whole sample, then bracket the root.
    lam = 1.2825 / sd if sd > 0 else 1.0  # pi / sqrt(6) / sd
    lo = 0.0
    hi = math.inf
    for _ in range(100):
        # Sums relative to phi: every exponent is <= 0, so nothing overflows.
        s0 = float(z)
        s1 = 0.0
        s2 = 0.0
        for t in range(count):
            v = float(x[start + t])
            if v > phi:
                d = v - phi
                w = math.exp(-lam * d)
                s0 += w
                s1 += d * w
                s2 += d * d * w
        ratio = s1 / s0
        f = 1.0 / lam - (mean_obs - phi) + ratio
        if f > 0:
            lo = lam
        else:
            hi = lam
        slope = -1.0 / (lam * lam) - (s2 / s0 - ratio * ratio)
        step = lam - f / slope
        if not (step > lo and step < hi):  # Newton left the bracket: bisect (or expand)
            step = 0.5 * (lo + hi) if hi < math.inf else 2.0 * lam
        if abs(step - lam) <= 1e-12 * lam:
            lam = step
            break
        lam = step
    s0 = float(z)
    for t in range(count):
        v = float(x[start + t])
        if v > phi:
            s0 += math.exp(-lam * (v - phi))
    mu = phi - math.log(s0 / n) / lam
    return mu, lam


def gumbel_sf(score, mu, lam):
    """P(S >= score) under the fitted Gumbel: ``1 - exp(-exp(-lam (score - mu)))``."""
    return -math.expm1(-math.exp(-lam * (score - mu)))


def pair_significance(scores, start, copies):
    """``(mu, lambda, p_value)`` of one pair: ``scores[start]`` its real score, the next
    ``copies - 1`` its shuffles' scores.

    Above the censoring cutoff the P-value is the fitted Gumbel's tail,
    ``1 - exp(-exp(-lambda (score - mu)))``.  At or below it (P-values above about 0.4)
    the censored fit knows only how many shuffles lie there, not how they are spread,
    so the P-value is the shuffles' own: ``(#{x > score} + #{x == score} / 2) / N`` (the
    mid-P of discrete scores, as the Gumbel's continuous tail is of the fitted ones).
    When the fit is impossible (no shuffle above the cutoff: all scores equal) ``mu``
    and ``lambda`` are NaN and the P-value is the shuffles' own too.
    """
    n = copies - 1
    mu, lam = gumbel_fit(scores, start + 1, n)
    real = scores[start]
    total = 0.0
    for t in range(1, copies):
        total += scores[start + t]
    cutoff = math.floor(total / n) + 0.5 if n > 0 else 0.0
    if lam == lam and real > cutoff:  # noqa: PLR0124 - not NaN, on both targets
        return mu, lam, gumbel_sf(float(real), mu, lam)
    above = 0.0
    for t in range(1, copies):
        if scores[start + t] > real:
            above += 1.0
        elif scores[start + t] == real:
            above += 0.5
    return mu, lam, above / n if n > 0 else 1.0


def chunk_subjects(lengths: npt.ArrayLike, n_shuffles: int,
                   budget: int) -> list[npt.NDArray[np.int64]]:
    """Split subjects (already in launch order) into chunks of at most ``budget``
    residues over all their copies; returns a list of index arrays.  A subject longer
    than the budget gets a chunk of its own.

    Plain Python in this Numba-free module: the CPU path plans its chunks without
    Numba's CUDA target (0.26 s of a 1.1 s CLI run, 2 cores), the GPU path without Numba.
    """
    chunks, current, used = [], [], 0
    for i, n in enumerate(np.asarray(lengths, np.int64)):
        size = int(n) * (n_shuffles + 1)
        if current and used + size > budget:
            chunks.append(np.array(current, np.int64))
            current, used = [], 0
        current.append(i)
        used += size
    if current:
        chunks.append(np.array(current, np.int64))
    return chunks


def with_globals(function: FunctionType, **names: object) -> FunctionType:
    """``function`` with some of its global names bound to other objects: how the
    plain-Python :func:`fisher_yates` calls the compiled Philox of its target (``@njit`` in
    :mod:`swdask.kernels.cpu.psse`, a CUDA device function in
    :mod:`swdask.kernels.cuda.psse_kernels`), and
    :func:`write_copy` its :func:`fisher_yates`."""
    namespace = dict(function.__globals__, **names)
    return type(function)(function.__code__, namespace, function.__name__)
