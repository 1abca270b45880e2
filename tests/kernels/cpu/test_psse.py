"""The significance kernels on the CPU (kernels/cpu/psse.py): Philox known answers, keyed
Fisher-Yates shuffles (and their simulator twins), the shuffle layout, the censored
Gumbel fit against scipy, and a pair's P-value."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from swdask.kernels.cpu import psse

U64 = np.uint64


# -- RNG and shuffles -------------------------------------------------------------------

#: Random123's known-answer vectors for Philox4x32-10 (counter, key, result).
PHILOX_KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter, key, expected", PHILOX_KAT)
def test_philox_known_answers(counter, key, expected):
    args = [U64(v) for v in (*counter, *key)]
    assert tuple(int(v) for v in psse.philox_njit(*args)) == expected
    assert tuple(int(v) for v in psse.philox(*args)) == expected  # the simulator's path


def test_fisher_yates_permutes_and_is_keyed():
    res = np.arange(50, dtype=np.uint8)
    draws = {}
    for seed, key, shuffle in itertools.product((0, 1), (5, 2**63 + 7), (0, 1, 999)):
        out = np.zeros(50, np.uint8)
        psse.fisher_yates_njit(res, 0, 50, out, 0, U64(seed), U64(key), shuffle)
        assert sorted(out.tolist()) == res.tolist()
        twin = np.zeros(50, np.uint8)
        psse.fisher_yates(res, 0, 50, twin, 0, U64(seed), U64(key), shuffle)
        assert out.tolist() == twin.tolist(), (seed, key, shuffle)
        draws[(seed, key, shuffle)] = out.tobytes()
    assert len(set(draws.values())) == len(draws)  # every counter gives its own shuffle


def test_fisher_yates_is_uniform():
    """All 24 permutations of 4 residues, 24,000 shuffles: chi-square."""
    res = np.arange(4, dtype=np.uint8)
    lengths = np.array([4], np.int64)
    n = 24_000
    out = np.zeros(4 * (n + 1), np.uint8)
    off = np.zeros(n + 2, np.int64)
    psse.shuffle_chunk(res, np.array([0], np.int64), lengths, np.array([0], np.int64),
                       np.array([123], np.uint64), np.int64(n), U64(42), out, off)
    perms = out[4:].reshape(n, 4)
    index = {p: k for k, p in enumerate(itertools.permutations(range(4)))}
    counts = np.bincount([index[tuple(p)] for p in perms.tolist()], minlength=24)
    assert stats.chisquare(counts).pvalue > 0.001, counts


def test_shuffle_chunk_layout_edge_lengths():
    lengths = np.array([33, 1, 0, 2], np.int64)
    src_off = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    res = (np.arange(int(lengths.sum())) % 24).astype(np.uint8)
    n_shuffles = 3
    sizes = lengths * (n_shuffles + 1)
    base = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    out = np.zeros(int(sizes.sum()), np.uint8)
    off = np.zeros(len(lengths) * (n_shuffles + 1) + 1, np.int64)
    keys = np.array([1, 2, 3, 4], np.uint64)
    psse.shuffle_chunk(res, src_off, lengths, base, keys, np.int64(n_shuffles), U64(9), out, off)
    for b, n in enumerate(lengths):
        subject = res[src_off[b]:src_off[b] + n]
        for k in range(n_shuffles + 1):
            c = b * (n_shuffles + 1) + k
            copy = out[off[c]:off[c + 1]]
            assert len(copy) == n
            if k == 0:
                assert copy.tolist() == subject.tolist()
            else:
                assert sorted(copy.tolist()) == sorted(subject.tolist())
    assert off[-1] == len(out)


# -- Gumbel fit -------------------------------------------------------------------------


@pytest.mark.parametrize("mu, lam, size, seed", [(30.0, 0.27, 2000, 1), (12.0, 1.1, 500, 2),
                                                 (55.0, 0.08, 5000, 3), (0.0, 0.5, 100, 4)])
def test_censored_fit_matches_scipy(mu, lam, size, seed):
    """The estimator against scipy.stats.gumbel_r.fit on the same censored sample."""
    x = stats.gumbel_r.rvs(loc=mu, scale=1 / lam, size=size, random_state=seed)
    cutoff = math.floor(x.mean()) + 0.5
    data = stats.CensoredData(uncensored=x[x > cutoff], left=np.full((x <= cutoff).sum(), cutoff))
    loc, scale = stats.gumbel_r.fit(data)
    fit_mu, fit_lam = psse.gumbel_fit_njit(x, 0, size)
    assert fit_mu == pytest.approx(loc, rel=1e-4, abs=1e-4 / lam), (mu, lam, size)
    assert fit_lam == pytest.approx(1 / scale, rel=1e-4), (mu, lam, size)
    assert psse.gumbel_fit(x, 0, size) == pytest.approx((fit_mu, fit_lam), rel=1e-12)


@pytest.mark.parametrize("mu, lam", [(25.0, 0.3), (40.0, 0.2), (8.0, 0.7)])
def test_fit_recovers_parameters_of_integer_scores(mu, lam):
    """Rounded (integer) Gumbel samples, as scores are: the half-integer cutoff keeps the
    estimate unbiased."""
    x = np.round(stats.gumbel_r.rvs(loc=mu, scale=1 / lam, size=40_000, random_state=7))
    fit_mu, fit_lam = psse.gumbel_fit_njit(x.astype(np.int64), 0, len(x))
    assert fit_lam == pytest.approx(lam, rel=0.04)
    assert fit_mu == pytest.approx(mu, abs=0.1 / lam)


def test_pair_significance_tail_body_and_degenerate():
    rng = np.random.default_rng(3)
    shuffles = np.round(stats.gumbel_r.rvs(loc=20, scale=1 / 0.3, size=500, random_state=rng))
    for real in (80, 30, 10):
        scores = np.concatenate([[real], shuffles]).astype(np.int64)
        mu, lam, p = psse.pair_significance_njit(scores, 0, len(scores))
        cutoff = math.floor(shuffles.mean()) + 0.5
        if real > cutoff:
            assert p == pytest.approx(-math.expm1(-math.exp(-lam * (real - mu))), rel=1e-12)
        else:  # the body: the shuffles' own mid-P
            assert p == ((shuffles > real).sum() + 0.5 * (shuffles == real).sum()) / 500
    flat = np.full(11, 4, np.int64)
    mu, lam, p = psse.pair_significance_njit(flat, 0, 11)
    assert math.isnan(mu) and math.isnan(lam) and p == 0.5
