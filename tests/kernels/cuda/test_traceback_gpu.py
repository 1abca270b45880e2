"""The GPU lane of the GPU traceback (kernels/cuda/traceback.py, ``python -m pytest -m gpu``):
the alignments of whole search hit lists and a long DNA pair equal the CPU's."""
import numpy as np
import pytest

from swdask.kernels.cpu.score import score_all
from swdask.scoring import Scoring
from tests.helpers import SPROT196, SPROT12071

pytestmark = pytest.mark.gpu


def test_gpu_traceback_of_search_hits_equals_cpu(device):
    """The top 100 hits of 196 Swiss-Prot queries against 12,071 proteins (full-length
    self hits, homologues, and weak hits with ties): the GPU traceback gives the CPU's
    alignments, every column of the hits table equal."""
    import swdask

    args = (SPROT196, SPROT12071)
    cpu = swdask.search_in_process(*args, device="cpu", max_hits=100)
    gpu = swdask.search_in_process(*args, device="gpu", max_hits=100)
    assert len(cpu) == 19_600
    assert cpu.equals(gpu)


def test_gpu_traceback_of_a_long_dna_pair_equals_cpu(device):
    """A 12 kb gene against a copy with substitutions and indels: 47 passes of 256 rows,
    a 72 MB decision matrix on the device."""
    from swdask.kernels.cpu.reference import mode_code
    from swdask.kernels.cpu.traceback import traceback_pair
    from swdask.kernels.cuda.traceback import trace_local

    rng = np.random.default_rng(12)
    gene = rng.integers(0, 4, 12_000).astype(np.uint8)
    copy = gene.copy()
    hits = rng.random(copy.size) < 0.05
    copy[hits] = rng.integers(0, 4, hits.sum())
    copy = np.concatenate([copy[:3000], copy[3040:8000], rng.integers(0, 4, 25).astype(np.uint8),
                           copy[8000:]]).astype(np.uint8)
    scoring = Scoring(alphabet="dna")
    scores, q_end, s_end = score_all(gene, np.array([0, gene.size]), copy,
                                     np.array([0, copy.size]), scoring.matrix, 5, 2)
    end = (int(q_end[0, 0]), int(s_end[0, 0]))
    want = traceback_pair(gene, copy, scoring.matrix.astype(np.int32), 5, 2, mode_code("local"),
                          *end)
    got_scores, starts, ops = trace_local([gene], [copy], np.array([end]), scoring.matrix, 5, 2)
    assert got_scores[0] == scores[0, 0] == want[0]
    assert (starts[0, 0], starts[0, 1]) == (want[1], want[3])
    np.testing.assert_array_equal(ops[0], want[5])
