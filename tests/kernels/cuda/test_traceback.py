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


def check_pairs(pairs, scoring, label, budget=gpu_traceback.DIRECTION_BYTES, mode="local"):
    ends, wanted = [], []
    for query, subject in pairs:
        _, qe, se = cpu_end(query, subject, scoring, mode)
        ends.append((qe, se))
        wanted.append(traceback_pair(
            query, subject, np.ascontiguousarray(scoring.matrix, np.int32), scoring.gap_open,
            scoring.gap_extend, mode_code(mode), qe, se))
    scores, starts, ops = gpu_traceback.trace_paths(
        [q for q, _ in pairs], [s for _, s in pairs], np.array(ends), scoring.matrix,
        scoring.gap_open, scoring.gap_extend, mode=mode, budget=budget)
    for k, (score, qs, _, ss, _, path) in enumerate(wanted):
        where = (f"{label} {mode}, pair {k} (lengths {len(pairs[k][0])} x {len(pairs[k][1])}, "
                 f"end {ends[k]})")
        assert (starts[k, 0], starts[k, 1]) == (qs, ss), where
        np.testing.assert_array_equal(ops[k], path, err_msg=where)
        assert scores[k] == score, where


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
