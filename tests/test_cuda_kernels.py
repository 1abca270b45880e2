"""The CUDA score kernel against the CPU kernel, in Numba's CUDA simulator.

The simulator runs each CUDA thread as a Python thread, so the inputs are small; they
sit at the boundaries that matter: query lengths around the rows a lane holds and the
rows a group holds (one pass, several passes), groups of 1 to 32 lanes, subjects of
length 0 and 1, a partial last warp.  The GPU lane (``-m gpu``) checks whole real
databases on a real card.
"""
import numpy as np
import pytest
from numba import config

from swdask.kernels.cpu.score import score_all
from swdask.kernels.cuda import inter_task
from swdask.scoring import Scoring
from swdask.store import load_sequences

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="simulator lane only")


def pack(seqs):
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    residues = np.concatenate([np.asarray(s, np.uint8) for s in seqs]) if seqs else np.zeros(0, np.uint8)
    return residues.astype(np.uint8), offsets


def check(query, subjects, scoring, rows, group, label):
    s_res, s_off = pack(subjects)
    order = np.argsort([len(s) for s in subjects], kind="stable").astype(np.int64)
    got = inter_task.score_pairs(query, s_res, s_off, order, scoring.matrix, scoring.gap_open,
                                 scoring.gap_extend, rows=rows, group=group)
    want = score_all(query, np.array([0, len(query)]), s_res, s_off, scoring.matrix,
                     scoring.gap_open, scoring.gap_extend, subjects=order)
    for name, g, w in zip(("score", "query_end", "subject_end"), got, want):
        np.testing.assert_array_equal(g, w[0], err_msg=f"{label}: {name}")


@pytest.mark.parametrize("rows,group,m", [
    (4, 1, 0), (4, 1, 1), (4, 1, 4), (4, 1, 9),      # one lane; several passes
    (4, 2, 7), (4, 2, 8), (4, 2, 9),                  # a pass boundary at 8 rows
    (2, 4, 15), (2, 4, 17), (2, 8, 31), (2, 8, 33),   # around 16 and 32 rows
    (16, 32, 40),                                     # the GPU's shape, one pass
])
def test_simulated_kernel_matches_cpu_on_real_proteins(rows, group, m):
    rng = np.random.default_rng(rows * 100 + group * 10 + m)
    queries = load_sequences("tests/data/sprot_queries.fasta")
    db = load_sequences("tests/data/sprot_db.fasta.gz")
    q = queries.codes(int(rng.integers(len(queries))))
    start = int(rng.integers(0, max(1, len(q) - m)))
    query = q[start:start + m].copy()
    subjects = [np.zeros(0, np.uint8), db.codes(0)[:1].copy()]
    for _ in range(7):  # real windows, enough pairs for a partial last warp at small groups
        codes = db.codes(int(rng.integers(len(db))))
        n = int(rng.integers(2, min(30, len(codes)) + 1))
        s0 = int(rng.integers(0, len(codes) - n + 1))
        subjects.append(codes[s0:s0 + n].copy())
    subjects.append(query[::-1].copy())  # a related subject: positive scores, gaps
    check(query, subjects, Scoring(), rows, group, f"R={rows} G={group} m={m}")


def test_simulated_kernel_dna_ties_and_gaps():
    """A small alphabet makes ties everywhere: the end rule must hold across lanes."""
    rng = np.random.default_rng(3)
    scoring = Scoring(alphabet="dna", gap_open=0, gap_extend=1)
    query = rng.integers(0, 2, 13).astype(np.uint8)
    subjects = [rng.integers(0, 2, n).astype(np.uint8) for n in (5, 12, 13, 14, 20)]
    check(query, subjects, scoring, 2, 4, "dna ties")


def test_search_device_gpu_in_the_simulator_matches_cpu(tmp_path):
    """``search(device="gpu")`` runs the CUDA kernels (here simulated): identical hits."""
    import swdask

    queries = {"q1": "MKVLAAGIVGLLLAWHEEGK", "q2": "WWHEAGAWGHEE"}
    db = tmp_path / "db.fasta"
    source = load_sequences("tests/data/sprot_db.fasta.gz")
    with open(db, "w") as handle:
        for k in range(12):
            seq = source.alphabet.decode(source.codes(k))[:25]
            handle.write(f">{source.names[k]}\n{seq}\n")
        handle.write(">self\nMKVLAAGIVGLLLAWHEEGK\n")
    cpu = swdask.search(queries, db, device="cpu", max_hits=5)
    gpu, stats = swdask.search(queries, db, device="gpu", max_hits=5, return_stats=True)
    assert stats.device == "gpu"
    assert cpu.equals(gpu)


@pytest.mark.parametrize("shared,dpx", [(True, False), (True, True), (False, True)])
def test_simulated_variants_match_cpu(shared, dpx):
    """The shared-memory profile and the DPX formulation (its pure-Numba twin here)."""
    rng = np.random.default_rng(17)
    db = load_sequences("tests/data/sprot_db.fasta.gz")
    query = db.codes(5)[:19].copy()
    subjects = [db.codes(k)[:int(rng.integers(1, 25))].copy() for k in range(10, 19)]
    s_res, s_off = pack(subjects)
    order = np.argsort([len(x) for x in subjects], kind="stable").astype(np.int64)
    scoring = Scoring()
    got = inter_task.score_pairs(query, s_res, s_off, order, scoring.matrix, 11, 1, rows=2,
                                 group=4, shared=shared, dpx=dpx)
    want = score_all(query, np.array([0, len(query)]), s_res, s_off, scoring.matrix, 11, 1,
                     subjects=order)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w[0])


@pytest.mark.parametrize("max_hits,min_score", [(3, None), (1, 20), (50, None), (2, 5000)])
def test_device_top_hits_keep_every_candidate(max_hits, min_score):
    """The device keeps every subject that can rank among the best (ties at the cut
    included) and nothing under ``min_score``; the host's ranking is then exact."""
    rng = np.random.default_rng(max_hits)
    db = load_sequences("tests/data/sprot_db.fasta.gz")
    query = db.codes(3)[:16].copy()
    subjects = [db.codes(k)[:int(rng.integers(4, 20))].copy() for k in range(20, 31)]
    subjects += [query.copy(), query.copy()]  # a tie at the top
    s_res, s_off = pack(subjects)
    scoring = Scoring()
    device = inter_task.DeviceSubjects(s_res, s_off)
    cols, scores, q_end, s_end, _ = device.top(query, scoring.matrix, 11, 1, max_hits, min_score,
                                               rows=2, group=4)
    want = score_all(query, np.array([0, len(query)]), s_res, s_off, scoring.matrix, 11, 1)
    all_scores = want[0][0]
    floor = 1 if min_score is None else min_score
    eligible = np.flatnonzero(all_scores >= floor)
    ranked = sorted(eligible, key=lambda c: (-all_scores[c], c))[:max_hits]
    assert set(ranked) <= set(cols.tolist())
    assert all(all_scores[c] >= floor for c in cols)
    order = np.argsort(cols)
    np.testing.assert_array_equal(scores[order], all_scores[np.sort(cols)])
    np.testing.assert_array_equal(q_end[order], want[1][0][np.sort(cols)])
    np.testing.assert_array_equal(s_end[order], want[2][0][np.sort(cols)])
