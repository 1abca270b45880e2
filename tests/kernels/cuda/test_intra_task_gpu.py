"""GPU lane of the intra-task kernel and the pipelined launcher: ``python -m pytest -m gpu``.

On a real card the warps of a block run freely between the kernel's chunk barriers, which
the simulator (a barrier per step) cannot show: these tests check the ring hand-over
between warps at several delays, multi-pass queries, long real-protein subjects routed by
length and the pipelined top hits, every score and both ends against the CPU kernel.
"""
import numpy as np
import pytest

from swdask.kernels.cpu.score import score_all
from swdask.scoring import Scoring
from swdask.sequences.store import load_sequences
from swdask.testing import long_subjects
from tests.helpers import QUERIES, SPROT196, SPROT12071, SPROT_DB, pack

pytestmark = pytest.mark.gpu

NEVER = 1 << 62


def assert_same(got, want, label):
    for name, g, w in zip(("score", "query_end", "subject_end"), got, want):
        mismatch = np.argwhere(g != w)
        assert mismatch.size == 0, (label, name, len(mismatch), mismatch[:5].tolist())


@pytest.mark.parametrize("delay", [1, 2, 16, 32])
def test_intra_kernel_alone_equals_cpu_at_several_delays(device, delay, monkeypatch):
    """Every Swiss-Prot test query (50-970 residues: one to four warps, one or two passes)
    against the 400-record database, all routed to the intra-task kernel."""
    from swdask.kernels.cuda import intra_task
    from swdask.kernels.cuda.launcher import DeviceSubjects

    monkeypatch.setattr(intra_task, "DELAY", delay)
    queries = load_sequences(QUERIES)
    db = load_sequences(SPROT_DB)
    scoring = Scoring()
    subjects = DeviceSubjects(db.residues, db.offsets, intra_threshold=1)
    q = [queries.codes(k) for k in range(len(queries))]
    *got, stats = subjects.score_many(q, scoring.matrix, 11, 1)
    assert stats.pairs_intra == len(q) * len(db) and stats.pairs_inter == 0
    want = score_all(queries.residues, queries.offsets, db.residues, db.offsets,
                     scoring.matrix, 11, 1)
    assert_same(got, want, f"delay {delay}")


@pytest.mark.parametrize("packed", [True, False], ids=["16bit-dpx", "32bit"])
def test_long_subjects_routed_by_length_bit_identical(device, packed):
    """Swiss-Prot plus six titin-like subjects of 9-35k residues (routed to the intra-task
    kernel from 9,000 residues), 16 queries including two of ~5,000 residues (several
    passes of a block)."""
    from swdask.backend import score_all_gpu

    db = load_sequences(SPROT_DB)
    big = load_sequences(SPROT12071)
    extra = long_subjects(big, [9000, 12000, 16384, 20000, 30000, 35000],
                          np.random.default_rng(7))
    s_res, s_off = pack([db.codes(k) for k in range(len(db))] + extra)
    pool = load_sequences(SPROT196)
    queries = [pool.codes(k) for k in range(0, 196, 14)]
    queries += [big.codes(int(k)) for k in np.argsort(-big.lengths)[:2]]
    q_res, q_off = pack(queries)
    scoring = Scoring()
    *got, stats = score_all_gpu(q_res, q_off, s_res, s_off, scoring.matrix, 11, 1,
                                packed=packed, intra_threshold=9000)
    assert stats.pairs_intra == len(queries) * len(extra)
    want = score_all(q_res, q_off, s_res, s_off, scoring.matrix, 11, 1)
    assert_same(got, want, "routed")


def test_pipelined_top_hits_equal_cpu_ranking(device, monkeypatch):
    """Batches of two queries (six batches in flight over two table sets) with long
    subjects routed to the intra-task kernel on its own stream: every query's best hits
    come back with exact scores and ends."""
    from swdask.kernels.cuda import launcher

    monkeypatch.setattr(launcher, "BATCH_QUERIES", 2)
    queries = load_sequences(QUERIES)
    db = load_sequences(SPROT_DB)
    extra = long_subjects(db, [10000, 15000], np.random.default_rng(3))
    extra.append(np.concatenate([queries.codes(4)] * 50))  # 10,200 residues, high-scoring
    s_res, s_off = pack([db.codes(k) for k in range(len(db))] + extra)
    q = [queries.codes(k) for k in range(len(queries))]
    scoring = Scoring()
    subjects = launcher.DeviceSubjects(s_res, s_off, intra_threshold=9000)
    found, stats = subjects.top_many(q, scoring.matrix, 11, 1, 10)
    assert stats.pairs_intra == len(q) * 3
    want = score_all(queries.residues, queries.offsets, s_res, s_off, scoring.matrix, 11, 1)
    for k, (cols, scores, q_end, s_end) in enumerate(found):
        all_scores = want[0][k]
        ranked = sorted(np.flatnonzero(all_scores >= 1), key=lambda c: (-all_scores[c], c))[:10]
        assert set(ranked) <= set(cols.tolist()), k
        order = np.argsort(cols)
        np.testing.assert_array_equal(scores[order], all_scores[np.sort(cols)])
        np.testing.assert_array_equal(q_end[order], want[1][k][np.sort(cols)])
        np.testing.assert_array_equal(s_end[order], want[2][k][np.sort(cols)])

