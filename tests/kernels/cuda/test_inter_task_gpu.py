"""The GPU lane: run on a machine with an NVIDIA GPU with ``python -m pytest -m gpu``.

Every score and both end positions of every pair must be identical to the CPU kernel's.
"""
import numpy as np
import pytest

from swdask.cluster import shutdown
from swdask.kernels.cpu.score import score_all
from swdask.scoring import Scoring
from swdask.sequences.store import load_sequences

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def device():
    from numba import config, cuda

    assert not config.ENABLE_CUDASIM, "the GPU lane needs a real GPU, not the simulator"
    assert cuda.is_available(), "no CUDA GPU visible"
    return cuda.get_current_device()


@pytest.mark.parametrize("packed", [True, False], ids=["16bit-dpx", "32bit"])
def test_sprot196_against_sprot12071_bit_identical(device, packed):
    from swdask.backend import score_all_gpu

    queries = load_sequences("tests/data/sprot196.fasta")
    db = load_sequences("tests/data/sprot12071.fasta.gz").sorted_by_length()
    scoring = Scoring()
    *gpu, stats = score_all_gpu(queries.residues, queries.offsets, db.residues, db.offsets,
                                scoring.matrix, 11, 1, packed=packed)
    assert stats.cells_32bit == (0 if packed else stats.cells)
    cpu = score_all(queries.residues, queries.offsets, db.residues, db.offsets,
                    scoring.matrix, 11, 1)
    for name, g, c in zip(("score", "query_end", "subject_end"), gpu, cpu):
        mismatch = np.argwhere(g != c)
        assert mismatch.size == 0, (name, len(mismatch), mismatch[:5].tolist())
    assert cpu[0].max() > 1000  # the queries' own records are in the database


@pytest.mark.parametrize("scoring", [Scoring("BLOSUM50", gap_open=13, gap_extend=2),
                                     Scoring("PAM30", gap_open=9, gap_extend=1)],
                         ids=["BLOSUM50-13-2", "PAM30-9-1"])
def test_other_matrices_bit_identical(device, scoring):
    from swdask.backend import score_all_gpu

    queries = load_sequences("tests/data/sprot_queries.fasta")
    db = load_sequences("tests/data/sprot12071.fasta.gz").sorted_by_length()
    gpu = score_all_gpu(queries.residues, queries.offsets, db.residues, db.offsets,
                        scoring.matrix, scoring.gap_open, scoring.gap_extend)[:3]
    cpu = score_all(queries.residues, queries.offsets, db.residues, db.offsets, scoring.matrix,
                    scoring.gap_open, scoring.gap_extend)
    for g, c in zip(gpu, cpu):
        np.testing.assert_array_equal(g, c)


@pytest.mark.parametrize("routing", ["inter", "intra"])
@pytest.mark.parametrize("packed", [True, False], ids=["16bit-dpx", "32bit"])
def test_identical_40kb_dna_pair_exceeds_16_bits(device, packed, routing):
    """An identical 40 kb pair scores 80,000: the 16-bit kernel flags it and the 32-bit
    re-run gives the exact score; the unrelated pair stays in 16 bits.  With
    routing from 8,192 residues both 39-40 kb subjects go to the (32-bit) intra-task kernel
    instead."""
    from swdask.backend import score_all_gpu

    rng = np.random.default_rng(40)
    gene = rng.integers(0, 4, 40_000).astype(np.uint8)
    other = rng.integers(0, 4, 39_000).astype(np.uint8)
    s_res = np.concatenate([other, gene])
    s_off = np.array([0, 39_000, 79_000], np.int64)
    scoring = Scoring(alphabet="dna")
    queries = np.concatenate([gene, other[:5000]])
    q_off = np.array([0, 40_000, 45_000])
    scores, q_end, s_end, stats = score_all_gpu(queries, q_off, s_res, s_off, scoring.matrix,
                                                5, 2, packed=packed,
                                                intra_threshold=1 << 62 if routing == "inter" else 8192)
    assert (scores[0, 1], q_end[0, 1], s_end[0, 1]) == (80_000, 40_000, 40_000)
    want = score_all(queries, q_off, s_res, s_off, scoring.matrix, 5, 2)
    for g, w in zip((scores, q_end, s_end), want):
        np.testing.assert_array_equal(g, w)
    if routing == "intra":
        assert stats.pairs_intra == 4 and stats.rescored == 0
    elif packed:
        assert stats.rescored == 1 and stats.cells_32bit == 40_000 * 40_000


def test_search_on_gpu_equals_cpu(device):
    import dask

    import swdask

    cpu = swdask.search_in_process("tests/data/sprot_queries.fasta",
                                   "tests/data/sprot_db.fasta.gz", device="cpu")
    gpu, stats = dask.compute(*swdask.search("tests/data/sprot_queries.fasta",
                                             "tests/data/sprot_db.fasta.gz", device="gpu",
                                             return_stats=True))
    assert stats.device == "gpu"
    assert cpu.equals(gpu)


def test_search_on_a_local_cuda_cluster_equals_cpu(device, tmp_path):
    """The Dask flow on dask-cuda's LocalCUDACluster: one worker per GPU, GPU=1."""
    import swdask
    from swdask.cluster import compute

    store = swdask.ingest("tests/data/sprot_db.fasta.gz", tmp_path / "db.store",
                          partition_residues=40_000)
    assert len(store.files) > 1
    cpu = swdask.search_in_process("tests/data/sprot_queries.fasta", store, device="cpu",
                                   max_hits=20)
    client = swdask.cluster(device="gpu", dashboard_address=":0")
    try:
        assert type(client.cluster).__name__ == "LocalCUDACluster"
        hits, stats = compute(*swdask.search("tests/data/sprot_queries.fasta", store,
                                             device="gpu", max_hits=20, return_stats=True),
                              client=client)
    finally:
        shutdown(client)
    assert stats.device == "gpu"
    assert cpu.equals(hits)


def test_gpu_traceback_of_search_hits_equals_cpu(device):
    """The top 100 hits of 196 Swiss-Prot queries against 12,071 proteins (full-length
    self hits, homologues, and weak hits with ties): the GPU traceback gives the CPU's
    alignments, every column of the hits table equal."""
    import swdask

    args = ("tests/data/sprot196.fasta", "tests/data/sprot12071.fasta.gz")
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
