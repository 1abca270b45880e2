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
    from swdask.kernels.cuda.traceback import trace_paths

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
    got_scores, starts, ops = trace_paths([gene], [copy], np.array([end]), scoring.matrix, 5, 2)
    assert got_scores[0] == scores[0, 0] == want[0]
    assert (starts[0, 0], starts[0, 1]) == (want[1], want[3])
    np.testing.assert_array_equal(ops[0], want[5])


@pytest.mark.parametrize("mode", ["global", "semiglobal"])
def test_gpu_traceback_of_16s_pairs_in_every_mode_equals_cpu(device, mode):
    """60 pairs of real 16S genes (related and unrelated, 1.2-1.6 kb: six passes of 256
    rows, and N letters) aligned end to end (global) or with free end gaps (semiglobal):
    the GPU's paths, starts and scores are the CPU traceback's."""
    from swdask.kernels.cpu.reference import mode_code
    from swdask.kernels.cpu.traceback import traceback_pair
    from swdask.kernels.cuda.traceback import trace_paths
    from swdask.sequences.store import load_sequences
    from tests.helpers import RRNA

    genes = load_sequences(RRNA)
    scoring = Scoring(None, match=2, mismatch=-3, gap_open=5, gap_extend=2, alphabet="dna")
    matrix = scoring.matrix.astype(np.int32)
    rng = np.random.default_rng(16)
    picks = rng.choice(len(genes), (60, 2))
    pairs = [(genes.codes(int(a)), genes.codes(int(b))) for a, b in picks]
    code = mode_code(mode)
    want = [traceback_pair(q, s, matrix, 5, 2, code, -1, -1) for q, s in pairs]
    ends = np.array([(w[2], w[4]) for w in want])
    scores, starts, ops = trace_paths([q for q, _ in pairs], [s for _, s in pairs], ends,
                                      scoring.matrix, 5, 2, mode=mode)
    for k, (score, qs, _, ss, _, path) in enumerate(want):
        assert scores[k] == score, k
        assert (starts[k, 0], starts[k, 1]) == (qs, ss), k
        np.testing.assert_array_equal(ops[k], path, err_msg=str(k))
