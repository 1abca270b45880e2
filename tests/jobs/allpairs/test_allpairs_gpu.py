"""The GPU lane of all-against-all alignment (``python -m pytest -m gpu``): whole all-pairs
runs on the GPU identical to the CPU's, here and on a CUDA cluster (the warp-per-pair
kernel itself: tests/kernels/cuda/test_all_pairs.py)."""

import pandas as pd
import pytest

import swdask
from swdask.jobs.allpairs import all_pairs, read_all_pairs, write_all_pairs
from tests.helpers import RRNA

pytestmark = pytest.mark.gpu

DNA = swdask.Scoring(match=2, mismatch=-3, gap_open=5, gap_extend=2)


@pytest.mark.parametrize("t", [0.97, 0.9])
def test_gpu_all_pairs_equal_the_cpu(device, t):
    path = RRNA
    options = dict(scoring=DNA, min_identity=t, cigar=True, block_size=64)
    gpu = all_pairs(path, device="gpu", **options).compute()
    cpu = all_pairs(path, device="cpu", **options).compute()
    pd.testing.assert_frame_equal(gpu.reset_index(drop=True), cpu.reset_index(drop=True))
    assert len(gpu) > 0


def test_resumable_gpu_run_on_a_cuda_cluster(device, tmp_path):
    path = RRNA
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


def test_gpu_local_all_pairs_equal_the_cpu(device):
    """Local mode on the GPU (Smith-Waterman score pass with end cells, local traceback):
    the CPU's rows for the 200 genes' pairs over a score floor."""
    options = dict(scoring=DNA, mode="local", min_identity=0.9, min_score=1500, cigar=True,
                   block_size=64)
    gpu = all_pairs(RRNA, device="gpu", **options).compute()
    cpu = all_pairs(RRNA, device="cpu", **options).compute()
    pd.testing.assert_frame_equal(gpu.reset_index(drop=True), cpu.reset_index(drop=True))
    assert len(gpu) > 0


def test_the_screen_is_warmed_beside_the_reading(device):
    """The GPU screen's first use (cupy, cuBLAS) runs on a thread of its own, so that the
    first block pair does not pay it (cli_wall.py's allpairs case times what it saves)."""
    import subprocess
    import sys

    code = ("import sys, threading\n"
            "from swdask.jobs.allpairs import plan\n"
            "thread = plan.warm_screen_beside()\n"
            "thread.join(120)\n"
            "print('WARM', not thread.is_alive(), 'cupy' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=True)
    assert "WARM True True" in done.stdout, done.stdout + done.stderr
