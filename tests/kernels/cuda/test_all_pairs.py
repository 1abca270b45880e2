"""The all-pairs score kernel (kernels/cuda/all_pairs.py, a warp per pair): every global
score against the reference and the on-device identity-bound filter and early abandon, at
the lengths around a pass (simulator); on a real card (``-m gpu``) every pair of 16S_200
against the CPU SIMD kernel, for several tile heights, DPX or not."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from swdask.jobs.allpairs import IdentityBound
from swdask.kernels.cpu.score import score_all
from swdask.kernels.cuda import all_pairs as gpu_kernel
from swdask.scoring import Scoring
from swdask.sequences.store import load_sequences
from tests.helpers import RRNA

DNA = Scoring(match=2, mismatch=-3, gap_open=5, gap_extend=2)


def test_gpu_kernel_scores_and_filter_in_the_simulator():
    """Lengths 0, 1, 31, 32, 33, 40 (one row per lane: 32-row passes, so 31/32/33 end at,
    before and after a pass boundary), N letters, all mismatches; every global score
    against the reference, and the on-device filter."""
    from swdask.kernels.cpu.reference import score_reference

    rng = np.random.default_rng(3)
    seqs = [np.zeros(0, np.uint8), np.array([4], np.uint8), rng.integers(0, 4, 31).astype(np.uint8),
            rng.integers(0, 5, 32).astype(np.uint8), np.full(33, 1, np.uint8)]
    seqs.append(np.concatenate([seqs[3][:20], seqs[2][:20]]))  # 40, shares a piece with two
    first = 5  # pairs among the first five: one row per lane; the rest: two
    res = np.concatenate(seqs)
    off = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
    n = len(seqs)
    ref = {(a, b): score_reference(seqs[a].tolist(), seqs[b].tolist(), DNA.matrix.tolist(), 5, 2,
                                   "global")[0] for a in range(n) for b in range(a + 1, n)}
    q_list = np.arange(n - 1, dtype=np.int64)
    s_lo = q_list + 1
    count = n - 1 - q_list
    unbounded = IdentityBound.from_scoring(DNA, 0).params
    qi, sj, score, _, _, _, abandoned = gpu_kernel.score_passing_pairs(
        res, off, res, off, q_list[:first - 1], s_lo[:first - 1], first - 1 - q_list[:first - 1],
        DNA.matrix, 5, 2, unbounded, rows=1)
    assert {(int(a), int(b)): int(s) for a, b, s in zip(qi, sj, score)} == \
        {k: v for k, v in ref.items() if k[1] < first}
    assert abandoned == 0  # nothing to abandon without a bound
    # With a bound and a score floor only the pairs over both come back (the four
    # longest sequences, two rows per lane).
    bound = IdentityBound.from_scoring(DNA, Fraction(1, 2))
    qi, sj, score, _, _, _, abandoned = gpu_kernel.score_passing_pairs(
        res, off, res, off, q_list[2:], s_lo[2:], count[2:], DNA.matrix, 5, 2, bound.params,
        min_score=-40, rows=2)
    want = {k: v for k, v in ref.items() if k[0] >= 2 and v >= -40
            and v >= bound.lowest_scores(len(seqs[k[0]]), len(seqs[k[1]]))}
    assert {(int(a), int(b)): int(s) for a, b, s in zip(qi, sj, score)} == want
    assert 0 < len(want) < len(ref)
    # Early abandon after the first 32-row pass: all A against all C cannot reach 0.9, a
    # near-identical pair can and is kept.
    a40, c40 = np.zeros(40, np.uint8), np.ones(40, np.uint8)
    near = a40.copy()
    near[35] = 2
    res = np.concatenate([a40, c40, near])
    off = np.array([0, 40, 80, 120], np.int64)
    bound = IdentityBound.from_scoring(DNA, 0.9)
    qi, sj, score, _, _, _, abandoned = gpu_kernel.score_passing_pairs(
        res, off, res, off, np.array([0]), np.array([1]), np.array([2]), DNA.matrix, 5, 2,
        bound.params, rows=1)
    assert (qi.tolist(), sj.tolist(), score.tolist(), abandoned) == ([0], [2], [39 * 2 - 3], 1)


def test_gpu_kernel_local_scores_and_ends_in_the_simulator():
    """Local mode: every pair's Smith-Waterman score and end cell equal the CPU kernel's
    (the best cell, the smallest column then row among equals), around a pass boundary
    (one and two rows a lane: 32- and 64-row passes) and with the rows past a query's
    end in the last pass; pairs scoring below ``max(1, min_score)`` stay out."""
    rng = np.random.default_rng(5)
    core = rng.integers(0, 4, 24).astype(np.uint8)
    seqs = [np.zeros(0, np.uint8), np.array([4], np.uint8), np.array([2], np.uint8),
            rng.integers(0, 5, 31).astype(np.uint8),
            np.concatenate([rng.integers(0, 4, 10), core, rng.integers(0, 4, 3)]).astype(np.uint8),
            np.concatenate([core[:12], [1, 1], core[12:], core]).astype(np.uint8),  # 50: ties
            np.full(33, 3, np.uint8), rng.integers(0, 4, 70).astype(np.uint8)]
    res = np.concatenate(seqs)
    off = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
    n = len(seqs)
    scores, q_end, s_end = score_all(res, off, res, off, DNA.matrix, 5, 2, "local")
    q_list = np.arange(n - 1, dtype=np.int64)
    local = IdentityBound.from_scoring(DNA, Fraction(1, 2), mode="local")
    for rows, floor in ((1, None), (2, 12)):
        qi, sj, score, qe, se, _, abandoned = gpu_kernel.score_passing_pairs(
            res, off, res, off, q_list, q_list + 1, n - 1 - q_list, DNA.matrix, 5, 2,
            local.params, min_score=floor, rows=rows)
        a, b = np.triu_indices(n, 1)
        keep = scores[a, b] >= max(1, floor or 1)
        want = {(int(x), int(y)): (int(scores[x, y]), int(q_end[x, y]), int(s_end[x, y]))
                for x, y in zip(a[keep], b[keep])}
        got = {(int(x), int(y)): (int(s), int(i), int(j))
               for x, y, s, i, j in zip(qi, sj, score, qe, se)}
        assert got == want, rows
        assert abandoned == 0 and 0 < len(want) < len(a)


# -- GPU lane ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def genes():
    return load_sequences(RRNA, alphabet="dna").sorted_by_length()


@pytest.fixture(scope="module")
def cpu_scores(genes):
    scores, _, _ = score_all(genes.residues, genes.offsets, genes.residues, genes.offsets,
                             DNA.matrix, 5, 2, "global")
    return scores


@pytest.mark.gpu
@pytest.mark.parametrize("rows, dpx", [(12, True), (12, False), (8, True), (16, True), (1, True)])
def test_every_16s_pair_scores_as_the_cpu_kernel(device, genes, cpu_scores, rows, dpx):
    """All 19,900 pairs of 16S_200 (649-1,651 bp, IUPAC codes as N), no bound: every
    global score identical to the CPU kernel, for several tile heights, DPX or not."""
    from swdask.kernels.cuda.all_pairs import score_passing_pairs

    n = len(genes)
    q_list = np.arange(n - 1, dtype=np.int64)
    unbounded = IdentityBound.from_scoring(DNA, 0).params
    qi, sj, score, _, _, seconds, abandoned = score_passing_pairs(
        genes.residues, genes.offsets, genes.residues, genes.offsets, q_list, q_list + 1,
        n - 1 - q_list, DNA.matrix, 5, 2, unbounded, rows=rows, dpx=dpx)
    assert len(qi) == n * (n - 1) // 2 and seconds > 0 and abandoned == 0
    np.testing.assert_array_equal(score, cpu_scores[qi, sj])


@pytest.mark.gpu
def test_on_device_filter_keeps_exactly_the_pairs_over_the_bound(device, genes, cpu_scores):
    from swdask.kernels.cuda.all_pairs import score_passing_pairs

    bound = IdentityBound.from_scoring(DNA, 0.9)
    n = len(genes)
    q_list = np.arange(n - 1, dtype=np.int64)
    qi, sj, score, _, _, _, abandoned = score_passing_pairs(
        genes.residues, genes.offsets, genes.residues, genes.offsets, q_list, q_list + 1,
        n - 1 - q_list, DNA.matrix, 5, 2, bound.params, min_score=100)
    a, b = np.triu_indices(n, 1)
    low = bound.lowest_scores(genes.lengths[a], genes.lengths[b])
    keep = (cpu_scores[a, b] >= low) & (cpu_scores[a, b] >= 100)
    assert set(zip(qi.tolist(), sj.tolist())) == set(zip(a[keep].tolist(), b[keep].tolist()))
    assert 0 < keep.sum() < len(a) // 4
    assert abandoned > len(a) // 2  # most pairs are stopped after a pass or two
