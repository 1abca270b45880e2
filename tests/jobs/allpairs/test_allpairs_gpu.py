"""The GPU lane of all-against-all alignment (``python -m pytest -m gpu``): the
warp-per-pair global kernel against the CPU SIMD kernel on real 16S genes, and whole
all-pairs runs on the GPU identical to the CPU's."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import swdask
from swdask.jobs.allpairs import IdentityBound, all_pairs, read_all_pairs, write_all_pairs
from swdask.kernels.cpu.score import score_all
from swdask.sequences.store import load_sequences

pytestmark = pytest.mark.gpu

DATA = Path(__file__).parents[2] / "data"
DNA = swdask.Scoring(match=2, mismatch=-3, gap_open=5, gap_extend=2)


@pytest.fixture(scope="module")
def device():
    from numba import config, cuda

    assert not config.ENABLE_CUDASIM, "the GPU lane needs a real GPU, not the simulator"
    assert cuda.is_available(), "no CUDA GPU visible"
    return cuda.get_current_device()


@pytest.fixture(scope="module")
def genes():
    return load_sequences(DATA / "16S_200.fna.gz", alphabet="dna").sorted_by_length()


@pytest.fixture(scope="module")
def cpu_scores(genes):
    scores, _, _ = score_all(genes.residues, genes.offsets, genes.residues, genes.offsets,
                             DNA.matrix, 5, 2, "global")
    return scores


@pytest.mark.parametrize("rows, dpx", [(12, True), (12, False), (8, True), (16, True), (1, True)])
def test_every_16s_pair_scores_as_the_cpu_kernel(device, genes, cpu_scores, rows, dpx):
    """All 19,900 pairs of 16S_200 (649-1,651 bp, IUPAC codes as N), no bound: every
    global score identical to the CPU kernel, for several tile heights, DPX or not."""
    from swdask.kernels.cuda.all_pairs import score_passing_pairs

    n = len(genes)
    q_list = np.arange(n - 1, dtype=np.int64)
    unbounded = IdentityBound.from_scoring(DNA, 0).params
    qi, sj, score, seconds, abandoned = score_passing_pairs(
        genes.residues, genes.offsets, genes.residues, genes.offsets, q_list, q_list + 1,
        n - 1 - q_list, DNA.matrix, 5, 2, unbounded, rows=rows, dpx=dpx)
    assert len(qi) == n * (n - 1) // 2 and seconds > 0 and abandoned == 0
    np.testing.assert_array_equal(score, cpu_scores[qi, sj])


def test_on_device_filter_keeps_exactly_the_pairs_over_the_bound(device, genes, cpu_scores):
    from swdask.kernels.cuda.all_pairs import score_passing_pairs

    bound = IdentityBound.from_scoring(DNA, 0.9)
    n = len(genes)
    q_list = np.arange(n - 1, dtype=np.int64)
    qi, sj, score, _, abandoned = score_passing_pairs(
        genes.residues, genes.offsets, genes.residues, genes.offsets, q_list, q_list + 1,
        n - 1 - q_list, DNA.matrix, 5, 2, bound.params, min_score=100)
    a, b = np.triu_indices(n, 1)
    low = bound.lowest_scores(genes.lengths[a], genes.lengths[b])
    keep = (cpu_scores[a, b] >= low) & (cpu_scores[a, b] >= 100)
    assert set(zip(qi.tolist(), sj.tolist())) == set(zip(a[keep].tolist(), b[keep].tolist()))
    assert 0 < keep.sum() < len(a) // 4
    assert abandoned > len(a) // 2  # most pairs are stopped after a pass or two


@pytest.mark.parametrize("t", [0.97, 0.9])
def test_gpu_all_pairs_equal_the_cpu(device, t):
    path = DATA / "16S_200.fna.gz"
    options = dict(scoring=DNA, min_identity=t, cigar=True, block_size=64)
    gpu = all_pairs(path, device="gpu", **options).compute()
    cpu = all_pairs(path, device="cpu", **options).compute()
    pd.testing.assert_frame_equal(gpu.reset_index(drop=True), cpu.reset_index(drop=True))
    assert len(gpu) > 0


def test_resumable_gpu_run_on_a_cuda_cluster(device, tmp_path):
    path = DATA / "16S_200.fna.gz"
    options = dict(scoring=DNA, min_identity=0.9, block_size=50)
    here = write_all_pairs(path, tmp_path / "here", device="gpu", **options)
    client = swdask.cluster(device="gpu")
    try:
        there = write_all_pairs(path, tmp_path / "there", device="gpu", client=client, **options)
    finally:
        cluster = client.cluster
        client.close()
        cluster.close()
    pd.testing.assert_frame_equal(read_all_pairs(tmp_path / "here"), read_all_pairs(tmp_path / "there"))
    assert here.hits == there.hits > 0 and here.device == there.device == "gpu"
