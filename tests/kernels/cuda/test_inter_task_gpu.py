"""The GPU lane of the search kernels (kernels/cuda/inter_task.py, inter_task_dpx.py, through
the launcher): run on a machine with an NVIDIA GPU with ``python -m pytest -m gpu``.

Every score and both end positions of every pair must be identical to the CPU kernel's.
"""
import numpy as np
import pytest

from swdask.kernels.cpu.score import score_all
from swdask.scoring import Scoring
from swdask.sequences.store import load_sequences
from tests.helpers import QUERIES, SPROT196, SPROT12071, identical_40kb_dna

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("packed", [True, False], ids=["16bit-dpx", "32bit"])
def test_sprot196_against_sprot12071_bit_identical(device, packed):
    from swdask.backend import score_all_gpu

    queries = load_sequences(SPROT196)
    db = load_sequences(SPROT12071).sorted_by_length()
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

    queries = load_sequences(QUERIES)
    db = load_sequences(SPROT12071).sorted_by_length()
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

    gene, other = identical_40kb_dna()
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
