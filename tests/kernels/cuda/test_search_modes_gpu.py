"""The GPU lane of the global and semiglobal search kernels (``python -m pytest -m gpu``).

Every score and both end cells of every pair, 16-bit with its 32-bit re-runs, 32-bit, and
the block-per-pair kernel for long subjects, must equal the CPU kernel's in the same mode
(:func:`swdask.kernels.cpu.score.score_all`).  The simulator lane checks the same kernels
at their boundaries on small inputs (``tests/kernels/cuda/test_search_modes.py``).
"""
import numpy as np
import pytest

from swdask.kernels.cpu.score import score_all
from swdask.scoring import Scoring
from swdask.sequences.store import load_sequences
from tests.helpers import QUERIES, SPROT12071, identical_40kb_dna

pytestmark = pytest.mark.gpu

MODES = ["global", "semiglobal"]


def assert_identical(gpu, cpu, label):
    for name, g, c in zip(("score", "query_end", "subject_end"), gpu, cpu):
        mismatch = np.argwhere(g != c)
        assert mismatch.size == 0, (label, name, len(mismatch), mismatch[:5].tolist())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("packed", [True, False], ids=["16bit-dpx", "32bit"])
@pytest.mark.parametrize("scoring", [Scoring(), Scoring("BLOSUM50", gap_open=13, gap_extend=2)],
                         ids=["BLOSUM62-11-1", "BLOSUM50-13-2"])
def test_queries_against_sprot12071_bit_identical(device, mode, packed, scoring):
    """12 queries of 50 to 970 residues against 12,071 Swiss-Prot records of up to 5,890
    residues: global scores far below 0, within 16 bits."""
    from swdask.backend import score_all_gpu

    queries = load_sequences(QUERIES)
    db = load_sequences(SPROT12071).sorted_by_length()
    *gpu, stats = score_all_gpu(queries.residues, queries.offsets, db.residues, db.offsets,
                                scoring.matrix, scoring.gap_open, scoring.gap_extend,
                                packed=packed, mode=mode)
    cpu = score_all(queries.residues, queries.offsets, db.residues, db.offsets, scoring.matrix,
                    scoring.gap_open, scoring.gap_extend, mode)
    assert_identical(gpu, cpu, f"{mode} {scoring.name}")
    if mode == "global":
        assert cpu[0].min() < -5000
    if not packed:
        assert stats.cells_32bit == stats.cells


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("routing", ["inter", "intra"])
@pytest.mark.parametrize("packed", [True, False], ids=["16bit-dpx", "32bit"])
def test_identical_40kb_dna_pair(device, mode, packed, routing):
    """An identical 40 kb DNA pair scores 80,000 (global and semiglobal alike): the
    16-bit kernel flags it and the 32-bit re-run is exact, as it is for the global pairs
    of 40 kb against 300 residues (scores below -32,768); with routing from 8,192
    residues both long subjects go to the block-per-pair kernel instead."""
    from swdask.backend import score_all_gpu

    gene, other = identical_40kb_dna()
    s_res = np.concatenate([other, gene, gene[:300]])
    s_off = np.array([0, 39_000, 79_000, 79_300], np.int64)
    scoring = Scoring(alphabet="dna")
    queries = np.concatenate([gene, other[:5000], gene[1000:1300]])
    q_off = np.array([0, 40_000, 45_000, 45_300])
    scores, q_end, s_end, stats = score_all_gpu(
        queries, q_off, s_res, s_off, scoring.matrix, 5, 2, packed=packed, mode=mode,
        intra_threshold=1 << 62 if routing == "inter" else 8192)
    assert (scores[0, 1], q_end[0, 1], s_end[0, 1]) == (80_000, 40_000, 40_000)
    want = score_all(queries, q_off, s_res, s_off, scoring.matrix, 5, 2, mode)
    assert_identical((scores, q_end, s_end), want, f"{mode} {routing}")
    if mode == "global":
        assert scores[0, 2] < -32_768
    if routing == "intra":
        assert stats.pairs_intra == 3 * 2
    elif packed:
        assert stats.rescored > 0
