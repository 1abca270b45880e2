"""The score-only scan kernel (kernels/cuda/inter_task_dpx_scan.py) and the launcher's end
pass, against the CPU kernel, in Numba's CUDA simulator.

The simulator runs each CUDA thread as a Python thread, so the inputs are small and sit
where the kernel's logic changes: one pass and several, a query of one residue and an
empty one, subjects of length 0 and 1 and around a group's span (fill and drain columns),
a partial trip of four columns, 16-bit overflows, other matrices and linear gaps.  Every
check compares scores and both end cells (the ends come from the 32-bit end pass).
"""
import os

import numpy as np
import pytest
from numba import config

from swdask.kernels.cpu.score import score_all
from swdask.kernels.cuda import inter_task_dpx, inter_task_dpx_scan, launcher
from swdask.scoring import Scoring
from swdask.sequences.store import load_sequences
from tests.helpers import (
    SPROT_DB,
    assert_top_hits,
    check_score_many,
    pack,
    protein_windows,
)

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="simulator lane only")


def check_scan(queries, subjects, scoring, label):
    """``score_many`` with the scan kernel equals the CPU kernel (scores and ends);
    returns the stats."""
    return check_score_many(queries, subjects, scoring, label, kernel="scan")


@pytest.mark.parametrize("rows,group,lengths", [
    (4, 1, (1, 0)),            # one lane, a query of one residue paired with an empty one
    (4, 1, (9, 5)),            # one lane, three passes
    (4, 2, (17, 8)),           # three passes of a group; the shorter query in one
    (4, 8, (31, 33)),          # a warp-sized span: one pass and two
    (8, 4, (32, 1)),           # an exact span; length 1 in the other half
])
def test_scan_matches_cpu_at_pass_and_span_boundaries(rows, group, lengths, monkeypatch):
    monkeypatch.setattr(inter_task_dpx_scan, "choose_shape", lambda m, alphabet: (rows, group))
    rng = np.random.default_rng(rows * 100 + group * 10 + sum(lengths))
    db = load_sequences(SPROT_DB)
    queries = protein_windows(db, rng, lengths)
    # Empty and one-residue subjects, lengths around the span and a trip of four columns
    # (drain columns), related subjects (positive scores and gaps).
    subjects = [np.zeros(0, np.uint8), db.codes(1)[:1].copy()]
    subjects += protein_windows(db, rng, (3, 4, 5, rows * group - 1, rows * group + 1))
    subjects += [q[::-1].copy() for q in queries if len(q)] + [queries[0].copy()]
    stats = check_scan(queries, subjects, Scoring(), f"R={rows} G={group} lengths={lengths}")
    assert stats.cells_ends == stats.cells and stats.seconds_ends > 0


@pytest.mark.parametrize("rows,group,lengths", [
    (4, 1, (1, 0)),            # a query of one residue paired with an empty one: H(m, 0)
    (4, 1, (9, 5)),            # one lane, three passes; the shorter query sits lower
    (4, 2, (17, 8)),           # three passes of a group
    (4, 8, (31, 33)),          # a warp-sized span: one pass and two
    (8, 4, (32, 1)),           # an exact span; length 1 in the other half
])
@pytest.mark.parametrize("scoring", [Scoring(), Scoring("BLOSUM50", gap_open=0, gap_extend=3)],
                         ids=["BLOSUM62-11-1", "BLOSUM50-0-3"])
def test_global_scan_matches_cpu_at_pass_and_span_boundaries(rows, group, lengths, scoring,
                                                              monkeypatch):
    """The global variant: column 0 and row 0 at their gap costs, the rows above a
    shorter query, fill and drain columns skipped (global cells are negative), the score
    from the last lane of the last pass in column n; no end pass (the ends are (m, n))."""
    monkeypatch.setattr(inter_task_dpx_scan, "choose_shape", lambda m, alphabet: (rows, group))
    rng = np.random.default_rng(rows * 100 + group * 10 + sum(lengths) + len(scoring.name))
    db = load_sequences(SPROT_DB)
    queries = protein_windows(db, rng, lengths)
    subjects = [np.zeros(0, np.uint8), db.codes(1)[:1].copy()]
    subjects += protein_windows(db, rng, (3, 4, 5, rows * group - 1, rows * group + 1, 40))
    subjects += [q[::-1].copy() for q in queries if len(q)] + [queries[0].copy()]
    stats = check_score_many(queries, subjects, scoring, f"global R={rows} G={group} "
                             f"lengths={lengths}", kernel="scan", mode="global")
    assert stats.cells_ends == 0 and stats.rescored == 0


def test_global_scan_dna_and_overflow():
    """DNA with N, and scores past 16 bits both ways (match 8,000 above; gap costs
    8,000 + 190 below): such pairs come back as OVERFLOW and are re-scored exactly."""
    rng = np.random.default_rng(12)
    dna = Scoring(alphabet="dna")
    queries = [rng.integers(0, 5, n).astype(np.uint8) for n in (23, 7)]
    subjects = [rng.integers(0, 5, n).astype(np.uint8) for n in (0, 1, 9, 30, 41)]
    subjects.append(queries[0].copy())
    check_score_many(queries, subjects, dna, "global dna", kernel="scan", mode="global")
    high = Scoring(alphabet="dna", match=8000, mismatch=-8000, gap_open=5, gap_extend=2)
    a = np.array([0, 1, 2, 3, 0, 1, 2], np.uint8)
    stats = check_score_many([a[:3], a.copy()], [a[:3].copy(), a.copy(), a[:1].copy()], high,
                             "global 8,000", kernel="scan", mode="global")
    assert stats.rescored > 0
    deep = Scoring(alphabet="dna", gap_open=8000, gap_extend=190)
    stats = check_score_many([a[:3]], [rng.integers(0, 4, 150).astype(np.uint8)], deep,
                             "global 8,000 + 190", kernel="scan", mode="global")
    assert stats.rescored == 1


def test_scan_shape_chooser_at_warp_boundaries():
    """The chooser's own shapes (rows a multiple of 4, a pad row within shared memory),
    queries around a warp of rows."""
    rng = np.random.default_rng(7)
    db = load_sequences(SPROT_DB)
    queries = protein_windows(db, rng, (33, 31, 32))
    subjects = protein_windows(db, rng, (1, 2, 31, 32, 33)) + [queries[0][5:].copy()]
    for m in (1, 31, 32, 33, 5000):
        rows, group = inter_task_dpx_scan.choose_shape(m, 24)
        assert rows % 4 == 0 and inter_task_dpx_scan.shared_fits(rows, group, 24)
    check_scan(queries, subjects, Scoring(), "chosen shapes")


def test_scan_overflow_is_rescored_exactly_in_32_bits():
    """Scores past 16 bits come back as -1 from the scan and are re-scored exactly (match
    8,000: four identities pass the limit of 24,767); the end pass agrees with them."""
    scoring = Scoring(alphabet="dna", match=8000, mismatch=-8000, gap_open=5, gap_extend=2)
    a = np.array([0, 1, 2, 3, 0, 1, 2], np.uint8)
    queries = [a[:3], a[:4], a.copy(), np.array([3, 3], np.uint8)]
    subjects = [a[:3].copy(), a[:4].copy(), a.copy(), np.array([2, 0, 1, 2, 3, 0], np.uint8),
                np.array([3], np.uint8)]
    stats = check_scan(queries, subjects, scoring, "overflow")
    assert stats.rescored > 0 and 0 < stats.cells_32bit < stats.cells


@pytest.mark.parametrize("scoring", [
    Scoring("PAM30", gap_open=9, gap_extend=1), Scoring(alphabet="dna", gap_open=0, gap_extend=1)],
    ids=["PAM30", "dna-linear"])
def test_scan_other_scorings(scoring, monkeypatch):
    monkeypatch.setattr(inter_task_dpx_scan, "choose_shape", lambda m, alphabet: (4, 2))
    rng = np.random.default_rng(5)
    if scoring.alphabet.name == "dna":
        queries = [rng.integers(0, 2, n).astype(np.uint8) for n in (13, 6)]
        subjects = [rng.integers(0, 2, n).astype(np.uint8) for n in (5, 12, 14)]
    else:
        db = load_sequences(SPROT_DB)
        queries = [db.codes(k)[:n].copy() for k, n in ((11, 15), (12, 9))]
        subjects = [db.codes(k)[:int(rng.integers(1, 20))].copy() for k in range(30, 34)]
        subjects.append(queries[0].copy())
    check_scan(queries, subjects, scoring, scoring.name)


@pytest.mark.parametrize("intra_threshold", [None, 20], ids=["inter", "with-intra"])
def test_top_hits_with_the_scan_kernel_match_cpu(intra_threshold):
    """The search path: candidates, scores and end cells equal the CPU's; the end pass
    runs on the inter-task candidates only (the intra-task kernel gives its own ends)."""
    rng = np.random.default_rng(11)
    db = load_sequences(SPROT_DB)
    queries = [db.codes(3)[:16].copy(), db.codes(8)[:11].copy(), db.codes(9)[:5].copy()]
    subjects = [db.codes(k)[:int(rng.integers(4, 20))].copy() for k in range(20, 29)]
    subjects += [queries[0].copy(), queries[0].copy(), np.concatenate([queries[1]] * 3)]
    s_res, s_off = pack(subjects)
    device = launcher.DeviceSubjects(s_res, s_off, intra_threshold=intra_threshold)
    scoring = Scoring()
    found, stats = device.top_many(queries, scoring.matrix, 11, 1, 3, kernel="scan")
    q_res, q_off = pack(queries)
    want = score_all(q_res, q_off, s_res, s_off, scoring.matrix, 11, 1)
    assert_top_hits(found, want, 1, 3)
    inter = [device.n_intra <= np.flatnonzero(np.isin(device.subjects, cols))
             for cols, *_ in found]
    kept = sum(len(q) * int(device.lengths[np.isin(device.subjects, cols)][ok].sum())
               for q, (cols, *_), ok in zip(queries, found, inter))
    assert stats.cells_ends == kept > 0
    assert (device.n_intra > 0) == (intra_threshold is not None)


@pytest.mark.parametrize("kernel", ["scan", "ends"])
@pytest.mark.parametrize("intra_threshold", [None, 20], ids=["inter", "with-intra"])
def test_ties_keep_each_querys_best_and_end_pass_only_those(kernel, intra_threshold):
    """A database of copies ties many times at the cut: with a key per subject, each
    query gets exactly its ``max_hits`` best by score and then smallest key (the
    search's rule by seq_id), with the CPU's ends, and the end pass runs on those alone."""
    rng = np.random.default_rng(12)
    db = load_sequences(SPROT_DB)
    queries = [db.codes(3)[:16].copy(), db.codes(8)[:24].copy()]
    distinct = [db.codes(k)[:int(rng.integers(4, 30))].copy() for k in range(20, 26)]
    distinct += [queries[0].copy(), np.concatenate([queries[1]] * 2)]
    subjects = [s.copy() for s in distinct for _ in range(5)]  # 5 copies of each
    s_res, s_off = pack(subjects)
    keys = rng.permutation(len(subjects)).astype(np.int64)
    device = launcher.DeviceSubjects(s_res, s_off, intra_threshold=intra_threshold)
    scoring = Scoring()
    max_hits = 3
    found, stats = device.top_many(queries, scoring.matrix, 11, 1, max_hits, kernel=kernel,
                                   ties=keys)
    q_res, q_off = pack(queries)
    scores, q_end, s_end = score_all(q_res, q_off, s_res, s_off, scoring.matrix, 11, 1)
    for q, (columns, got, got_q_end, got_s_end) in enumerate(found):
        best = np.lexsort((keys, -scores[q].astype(np.int64)))[:max_hits]
        assert sorted(columns) == sorted(best)
        order = np.argsort(columns)
        np.testing.assert_array_equal(got[order], scores[q][np.sort(columns)])
        np.testing.assert_array_equal(got_q_end[order], q_end[q][np.sort(columns)])
        np.testing.assert_array_equal(got_s_end[order], s_end[q][np.sort(columns)])
    with pytest.raises(ValueError, match=r"ties holds 3 keys for 40 subjects"):
        device.top_many(queries, scoring.matrix, 11, 1, max_hits, ties=keys[:3])
    if kernel == "scan":
        inter = [columns[np.flatnonzero(device.n_intra <= np.argsort(device.subjects)[columns])]
                 for columns, *_ in found]
        assert stats.cells_ends == sum(len(q) * int((s_off[c + 1] - s_off[c]).sum())
                                       for q, c in zip(queries, inter))


def test_end_pass_disagreeing_with_the_scan_raises(monkeypatch):
    """The end pass checks the scan's scores: a 32-bit score that differs is an error,
    never a silent difference."""
    original = launcher.DeviceSubjects._launch_intra

    def off_by_one(self, *args, pairs=None, **kwargs):
        original(self, *args, pairs=pairs, **kwargs)
        if pairs is not None:  # the end pass (the long subjects' launches give none)
            scores = args[4][0]
            scores.copy_to_device(scores.copy_to_host() + 1)

    monkeypatch.setattr(launcher.DeviceSubjects, "_launch_intra", off_by_one)
    db = load_sequences(SPROT_DB)
    query = db.codes(3)[:6].copy()
    s_res, s_off = pack([query.copy(), db.codes(4)[:5].copy()])
    with pytest.raises(RuntimeError, match=r"scan kernel and end pass disagree on 2 of 2 "
                                           r"candidates \(query of 6 residues"):
        launcher.DeviceSubjects(s_res, s_off).top_many([query], Scoring().matrix, 11, 1, 5,
                                                       min_score=0, kernel="scan")


def test_search_kernel_choice(monkeypatch):
    """The scan kernel is the default (unless SWDASK_SEARCH_KERNEL names another for the
    process); a name outside the table is an error that lists the choices; global and
    semiglobal searches keep their kernels; the end pass builds the block-per-pair kernel
    per query."""
    assert launcher.SEARCH_KERNEL == os.environ.get("SWDASK_SEARCH_KERNEL", "scan")
    monkeypatch.setattr(launcher, "SEARCH_KERNEL", "ends")
    assert launcher.scan_kernel(None) is False
    monkeypatch.setattr(launcher, "SEARCH_KERNEL", "scan")
    assert launcher.scan_kernel(None) is True
    monkeypatch.setattr(launcher, "SEARCH_KERNEL", "fastest")
    with pytest.raises(ValueError, match=r"'fastest' \(SWDASK_SEARCH_KERNEL\)"):
        launcher.scan_kernel(None)
    assert launcher.scan_kernel("scan") and not launcher.scan_kernel("scan", "semiglobal")
    with pytest.raises(ValueError, match="^unknown search kernel 'fast'; expected one of "
                                         "ends, scan$"):
        launcher.scan_kernel("fast")
    specs = launcher.search_specs([40, 30, 7], Scoring().matrix, True, scan=True)
    families = [family for family, _ in specs[len(launcher.SEARCH_KERNELS):]]
    assert families == ["inter_task_dpx_scan"] * 2 + ["intra_task"] * 3  # + the end pass


def test_scan_render_checks_its_shape():
    with pytest.raises(ValueError, match="rows a multiple of 4, not 6"):
        inter_task_dpx_scan.render(6, 2, 24, 32)
    with pytest.raises(ValueError, match="exceed 49152 bytes"):
        inter_task_dpx_scan.render(20, 32, 24, 128)
    rendered = inter_task_dpx_scan.render(4, 2, 5, 32)
    assert rendered.link == () and rendered.options == {}  # the simulator: twins, no options
    assert "max3_relu(e0, f, add(diag, sprof[base + U0]))" in rendered.source
    assert rendered.source.count("while step < total:") == 1
    assert rendered.source.count("st = int32(step + ") == inter_task_dpx_scan.UNROLL


def test_max3_relu_twin_wraps_like_the_hardware():
    twin = inter_task_dpx_scan.TWINS["max3_relu"]
    lo, hi = inter_task_dpx.TWINS["lo16"], inter_task_dpx.TWINS["hi16"]
    got = twin(inter_task_dpx.pack(32767, -5), inter_task_dpx.pack(-32768, -7),
               inter_task_dpx.pack(1, -1))
    assert (lo(got), hi(got)) == (32767, 0)
    add = inter_task_dpx.TWINS["add"]
    wrapped = add(inter_task_dpx.pack(32767, 3), inter_task_dpx.pack(1, 4))  # (-32768, 7)
    got = twin(wrapped, inter_task_dpx.pack(-3, 2), inter_task_dpx.pack(-9, 5))
    assert (lo(got), hi(got)) == (0, 7)
