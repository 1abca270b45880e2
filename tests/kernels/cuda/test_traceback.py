"""The GPU traceback (kernels/cuda/traceback.py) against the CPU traceback, in Numba's
CUDA simulator: the same start cells and the same operations for every pair, on real
protein and 16S windows, at the boundaries of the kernel's layout (8 rows a lane, 256
rows a pass), with gaps, ties, X/N letters, scores of 0 and empty rectangles.  The GPU
lane checks whole search hit lists on a real card (tests/kernels/cuda/test_traceback_gpu.py)."""
import numpy as np
import pytest
from numba import config

from swdask.kernels.cpu.reference import mode_code
from swdask.kernels.cpu.score import score_all
from swdask.kernels.cpu.traceback import traceback_pair
from swdask.kernels.cuda import traceback as gpu_traceback
from swdask.scoring import Scoring
from swdask.sequences.store import load_sequences
from tests.helpers import RRNA, SPROT_DB

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="simulator lane only")

PROTEIN = load_sequences(SPROT_DB)
DNA = load_sequences(RRNA)


def local_end(query, subject, scoring):
    """Score and end cell of the best local alignment by the CPU score kernel."""
    scores, q_end, s_end = score_all(query, np.array([0, len(query)]), subject,
                                     np.array([0, len(subject)]), scoring.matrix,
                                     scoring.gap_open, scoring.gap_extend)
    return int(scores[0, 0]), int(q_end[0, 0]), int(s_end[0, 0])


def cpu_end(query, subject, scoring, mode):
    """Score and end cell where each mode's traceback starts: the CPU score kernel's best
    local cell; the corner (m, n) in global mode; the CPU traceback's own choice on the
    last row or column in semiglobal mode."""
    if mode == "local":
        return local_end(query, subject, scoring)
    if mode == "global":
        return None, len(query), len(subject)
    score, _, qe, _, se, _ = traceback_pair(
        query, subject, np.ascontiguousarray(scoring.matrix, np.int32), scoring.gap_open,
        scoring.gap_extend, mode_code(mode), -1, -1)
    return int(score), int(qe), int(se)


def check_pairs(pairs, scoring, label, budget=gpu_traceback.DIRECTION_BYTES, mode="local",
                banded=False):
    """The GPU's paths, starts and scores of ``pairs`` are the CPU traceback's; with
    ``banded``, the GPU is given the optimal scores (global mode's band).  Returns the
    GPU call's stats."""
    ends, wanted = [], []
    for query, subject in pairs:
        _, qe, se = cpu_end(query, subject, scoring, mode)
        ends.append((qe, se))
        wanted.append(traceback_pair(
            query, subject, np.ascontiguousarray(scoring.matrix, np.int32), scoring.gap_open,
            scoring.gap_extend, mode_code(mode), qe, se))
    stats = {}
    scores, starts, ops = gpu_traceback.trace_paths(
        [q for q, _ in pairs], [s for _, s in pairs], np.array(ends), scoring.matrix,
        scoring.gap_open, scoring.gap_extend, mode=mode, budget=budget, stats=stats,
        known_scores=[w[0] for w in wanted] if banded else None)
    for k, (score, qs, _, ss, _, path) in enumerate(wanted):
        where = (f"{label} {mode}, pair {k} (lengths {len(pairs[k][0])} x {len(pairs[k][1])}, "
                 f"end {ends[k]})")
        assert (starts[k, 0], starts[k, 1]) == (qs, ss), where
        np.testing.assert_array_equal(ops[k], path, err_msg=where)
        assert scores[k] == score, where
    return stats


def windows(source, rng, count, low, high):
    out = []
    for _ in range(count):
        codes = source.codes(int(rng.integers(len(source))))
        n = int(rng.integers(low, min(high, len(codes)) + 1))
        start = int(rng.integers(0, len(codes) - n + 1))
        out.append(codes[start:start + n].copy())
    return out


def mutated(codes, rng, alphabet_size, rate=0.15):
    """A related copy: substitutions, and an insertion and a deletion."""
    out = codes.copy()
    hits = rng.random(len(out)) < rate
    out[hits] = rng.integers(0, alphabet_size, hits.sum())
    cut = len(out) // 3
    return np.concatenate([out[:cut], out[cut + 3:2 * cut], rng.integers(0, alphabet_size, 4)
                           .astype(np.uint8), out[2 * cut:]]).astype(np.uint8)


@pytest.mark.parametrize("scoring", [Scoring(), Scoring("PAM30", gap_open=9, gap_extend=1)],
                         ids=["BLOSUM62-11-1", "PAM30-9-1"])
@pytest.mark.parametrize("mode", ["local", "global", "semiglobal"])
def test_gpu_traceback_matches_cpu_on_real_proteins(scoring, mode):
    rng = np.random.default_rng(7)
    pairs = []
    for query in windows(PROTEIN, rng, 3, 7, 24):  # 7-9 rows: a lane's word boundary
        pairs.append((query, mutated(query, rng, 20)))
    queries = windows(PROTEIN, rng, 2, 2, 20)
    subjects = windows(PROTEIN, rng, 2, 1, 20)
    pairs += list(zip(queries, subjects))  # unrelated: short alignments, ties, stops
    pairs.append((queries[0], np.zeros(0, np.uint8)))  # no columns
    pairs.append((np.zeros(0, np.uint8), subjects[0]))  # no rows
    pairs.append((np.array([22, 22, 22], np.uint8), np.array([22, 22], np.uint8)))  # X only
    pairs.append((np.zeros(0, np.uint8), np.zeros(0, np.uint8)))  # nothing at all
    check_pairs(pairs, scoring, repr(scoring), mode=mode)


@pytest.mark.parametrize("mode", ["local", "global", "semiglobal"])
def test_gpu_traceback_several_passes_and_dna(mode):
    """Queries longer than a pass (256 rows) against short subjects; DNA with N: the
    pass boundary carries H and F, and in global mode the first column's gap too."""
    scoring = Scoring(alphabet="dna")
    gene = DNA.codes(3)
    query = gene[:300].copy()
    query[[5, 140, 257]] = 4  # N: never an identity, a mismatch against everything
    subject = np.concatenate([gene[250:262], gene[100:106]]).astype(np.uint8)
    pairs = [(query, subject), (query[:257].copy(), gene[240:258].copy()),
             (gene[:256].copy(), gene[250:256].copy())]
    check_pairs(pairs, scoring, "DNA 2/-3 5/2", mode=mode)


def test_global_band_holds_the_optimal_paths_and_narrows_with_the_score():
    """The band of :func:`global_band` on real 16S pairs: the CPU's optimal path stays
    inside it; the end cell's offset is always in it; a better score narrows it; a
    scoring whose gap columns lose nothing gets the whole rectangle."""
    from swdask.kernels.directions import global_band

    scoring = Scoring(None, match=2, mismatch=-3, gap_open=5, gap_extend=2, alphabet="dna")
    matrix = scoring.matrix.astype(np.int32)
    rng = np.random.default_rng(11)
    for gene in windows(DNA, rng, 12, 30, 400):
        copy = mutated(gene, rng, 4, rate=float(rng.uniform(0.0, 0.2)))
        score, qs, _, ss, _, path = traceback_pair(gene, copy, matrix, 5, 2, mode_code("global"),
                                                   -1, -1)
        (lo,), (hi,) = global_band([len(gene)], [len(copy)], [score], matrix, 5, 2)
        i = j = 0
        for op in path:  # the path's offsets j - i, cell by cell
            i += op != 2  # OP_DEL (2) moves along the subject only
            j += op != 1  # OP_INS (1) along the query only
            assert lo <= j - i <= hi, (len(gene), len(copy), lo, hi, j - i)
        assert lo <= len(copy) - len(gene) <= hi
    lo, hi = global_band([100, 100], [100, 90], [200, 140], matrix, 5, 2)
    assert (lo[0], hi[0]) == (0, 0)  # identical: no room for any gap
    assert lo[1] < -10 and hi[1] > 0
    free = global_band([50], [60], [0], np.full((4, 4), -2), 5, 0)
    assert (free[0][0], free[1][0]) == (-50, 60)


@pytest.mark.parametrize("scoring", [Scoring(None, match=2, mismatch=-3, gap_open=5,
                                             gap_extend=2, alphabet="dna"),
                                     Scoring("PAM30", gap_open=9, gap_extend=1)],
                         ids=["DNA-2-3-5-2", "PAM30-9-1"])
def test_banded_global_traceback_walks_the_full_rectangles_paths(scoring):
    """Given the optimal scores, the GPU computes only the band: the same paths, starts
    and scores as the CPU's full rectangles, for related pairs (narrow bands, across the
    256-row pass and the 8-row strips), pairs of different lengths, unrelated pairs (wide
    bands), single residues and empty sides."""
    rng = np.random.default_rng(5)
    dna = scoring.alphabet.name == "dna"
    source, letters = (DNA, 4) if dna else (PROTEIN, 20)
    pairs = []
    if dna:  # 264 rows: two passes of 256, the second a strip and a bit
        gene = DNA.codes(7)[:264].copy()
        pairs.append((gene, mutated(gene, rng, letters, rate=0.02)))
        # Identical: a band of one diagonal, on which every pass begins at its first lane's
        # first column, whose diagonal comes from the previous pass.
        pairs.append((gene, gene.copy()))
    for gene in windows(source, rng, 2, 30, 70):
        pairs.append((gene, mutated(gene, rng, letters, rate=0.03)))
        pairs.append((mutated(gene, rng, letters, rate=0.1)[:-9].copy(), gene))
    queries = windows(source, rng, 3, 1, 40)
    subjects = windows(source, rng, 3, 1, 40)
    pairs += list(zip(queries, subjects))
    pairs += [(queries[0][:1].copy(), queries[0][:1].copy()),
              (queries[1], np.zeros(0, np.uint8)), (np.zeros(0, np.uint8), subjects[1])]
    stats = check_pairs(pairs, scoring, repr(scoring), mode="global", banded=True)
    if dna:  # the 264-row pair's narrow band outweighs the short pairs' whole strips
        assert stats["band_cells"] < stats["cells"] / 2


def test_gpu_traceback_batches_under_a_small_budget():
    """A budget smaller than one pair: every pair is a launch of its own."""
    rng = np.random.default_rng(3)
    query = windows(PROTEIN, rng, 1, 20, 20)[0]
    pairs = [(query, mutated(query, rng, 20)), (query, query.copy()), (query[:9], query[3:12])]
    check_pairs(pairs, Scoring(), "budget 1", budget=1)


def test_gpu_traceback_refuses_a_matrix_beyond_int16():
    scoring = Scoring(alphabet="dna")
    with pytest.raises(ValueError, match="at most 32 codes and entries within"):
        gpu_traceback.trace_paths([np.zeros(1, np.uint8)], [np.zeros(1, np.uint8)],
                                  np.array([[1, 1]]), scoring.matrix * 10000, 5, 2)


def test_the_launching_module_imports_no_numba():
    """The kernels live in traceback_kernels, imported only to compile one: a process whose
    kernels are kept compiled launches the traceback without importing Numba."""
    import os
    import subprocess
    import sys

    script = ("import sys; import swdask.kernels.cuda.traceback as t; "
              "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numba'))")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
