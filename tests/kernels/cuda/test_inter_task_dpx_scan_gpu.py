"""The GPU lane of the score-only scan kernel (kernels/cuda/inter_task_dpx_scan.py) and the
launcher's end pass: run on a machine with an NVIDIA GPU with ``python -m pytest -m gpu``.

The scan kernel must give today's 16-bit kernel's scores on whole real sets, and a search
with it the same candidates, scores and end cells.
"""
import numpy as np
import pytest

from swdask.kernels.cpu.score import score_all
from swdask.scoring import Scoring
from swdask.sequences.store import load_sequences
from tests.helpers import SPROT196, SPROT12071, identical_40kb_dna

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("scoring", [Scoring(), Scoring("PAM30", gap_open=9, gap_extend=1)],
                         ids=["BLOSUM62-11-1", "PAM30-9-1"])
def test_scan_equals_todays_kernel_on_sprot(device, scoring):
    """Every score of Swiss-Prot's 196 queries against its 12,071 records, scan kernel
    against today's 16-bit kernel and the CPU (ends from the end pass); then the top hits
    of both kernels are identical."""
    from swdask.kernels.cuda.launcher import DeviceSubjects

    queries = load_sequences(SPROT196)
    db = load_sequences(SPROT12071).sorted_by_length()
    batch = [queries.codes(k) for k in range(len(queries))]
    subjects = DeviceSubjects(db.residues, db.offsets)
    gaps = (scoring.gap_open, scoring.gap_extend)
    *scan, scan_stats = subjects.score_many(batch, scoring.matrix, *gaps, kernel="scan")
    *ends, _ = subjects.score_many(batch, scoring.matrix, *gaps, kernel="ends")
    cpu = score_all(queries.residues, queries.offsets, db.residues, db.offsets,
                    scoring.matrix, *gaps)
    for name, s, e, c in zip(("score", "query_end", "subject_end"), scan, ends, cpu):
        mismatch = np.argwhere((s != e) | (s != c))
        assert mismatch.size == 0, (name, len(mismatch), mismatch[:5].tolist())
    assert scan_stats.cells_ends == scan_stats.cells and scan_stats.cells_32bit == 0
    found = {kernel: subjects.top_many(batch, scoring.matrix, *gaps, 50, kernel=kernel)
             for kernel in ("scan", "ends")}
    (scan_hits, scan_stats), (ends_hits, _) = found["scan"], found["ends"]
    for q, (a, b) in enumerate(zip(scan_hits, ends_hits)):
        order_a, order_b = np.argsort(a[0]), np.argsort(b[0])
        for name, x, y in zip(("column", "score", "query_end", "subject_end"), a, b):
            np.testing.assert_array_equal(x[order_a], y[order_b], err_msg=f"query {q}: {name}")
    assert 0 < scan_stats.cells_ends < scan_stats.cells / 10  # the candidates only


def test_scan_overflow_of_a_long_identical_pair(device):
    """An identical 40 kb DNA pair scores 80,000: the scan flags it, the 32-bit re-run and
    the end pass give the exact score and end cell."""
    from swdask.kernels.cuda.launcher import DeviceSubjects

    gene, other = identical_40kb_dna()
    s_res = np.concatenate([other, gene])
    s_off = np.array([0, 39_000, 79_000], np.int64)
    scoring = Scoring(alphabet="dna")
    subjects = DeviceSubjects(s_res, s_off, intra_threshold=1 << 62)
    found, stats = subjects.top_many([gene, other[:5000]], scoring.matrix, 5, 2, 2,
                                     kernel="scan")
    columns, scores, q_end, s_end = found[0]
    best = int(np.argmax(scores))
    assert (columns[best], scores[best], q_end[best], s_end[best]) == (1, 80_000, 40_000,
                                                                      40_000)
    assert stats.rescored == 1
