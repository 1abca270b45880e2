"""The GPU q-gram count of the all-pairs pre-filter, and the bucket screen before it, equal
the CPU kernel's: small inputs in the simulator (runs with holes, N, lengths 0 and 1;
numpy's product stands in for cuBLAS there), every pair of 16S_200 on a card."""
import random
from fractions import Fraction

import numpy as np
import pytest

from swdask.jobs.allpairs import IdentityBound
from swdask.jobs.allpairs.filter import QgramFilter, runs_of
from swdask.jobs.allpairs.plan import pair_ranges
from swdask.kernels.cpu.qgram import count_shared
from swdask.kernels.cuda.qgram import count_shared_gpu, screen_and_count_gpu
from swdask.scoring import Scoring
from swdask.sequences.alphabet import DNA
from swdask.sequences.store import load_sequences
from swdask.testing import mutated_copy
from tests.helpers import RRNA, pack


def both_counts(f: QgramFilter, residues, offsets, runs):
    codes = f.codes(_Batch(residues, offsets))
    lengths = np.diff(offsets)
    q_list, s_lo, s_count = runs
    starts = np.concatenate([[0], np.cumsum(s_count)]).astype(np.int64)
    args = (codes[0], codes[1], codes[0], codes[1], lengths, lengths, q_list, s_lo, starts, f.q,
            f.threshold.numerator, f.threshold.denominator)
    cpu = np.zeros(int(starts[-1]), np.int32)
    count_shared(*args, cpu)
    gpu, _ = count_shared_gpu(*args)
    # The screen, then the count of what it keeps: the same pairs and counts, at any width.
    for buckets in (1, 64, 16384):
        for same in (False, True):
            which, shared, _ = screen_and_count_gpu(*args, buckets, same_block=same)
            assert np.array_equal(which, np.flatnonzero(cpu >= 0)), (buckets, same)
            assert np.array_equal(shared, cpu[cpu >= 0])
    return cpu, gpu


class _Batch:
    """What QgramFilter.codes reads of a batch."""

    def __init__(self, residues, offsets):
        self.residues, self.offsets = residues, offsets


@pytest.mark.parametrize("t", [Fraction(0), Fraction(9, 10), Fraction(97, 100)])
def test_simulated_gpu_counts_as_the_cpu(t):
    rng = random.Random(4)
    base = "".join(rng.choice("ACGT") for _ in range(60))
    seqs = ["", "A", "ACGTNNACGT", base] + [mutated_copy(base, d, rng, letters="ACGTN")
                                            for d in (0, 0.02, 0.05, 0.1, 0.3)]
    seqs += ["".join(rng.choice("ACGT") for _ in range(n)) for n in (6, 7, 8, 61)]
    residues, offsets = pack([DNA.encode(s) if s else [] for s in seqs])
    f = QgramFilter(5, t, DNA.size, DNA.unknown_code)
    n = len(seqs)
    # Every pair, then pairs with holes: a query's subjects not consecutive.
    every = runs_of(np.repeat(np.arange(n), n), np.tile(np.arange(n), n))
    holes = runs_of(np.array([3, 3, 3, 4, 4, 8]), np.array([4, 6, 7, 0, 5, 12]))
    for runs in (every, holes):
        cpu, gpu = both_counts(f, residues, offsets, runs)
        assert np.array_equal(cpu, gpu)
    if t == 0:
        assert (cpu >= 0).all()  # t = 0: every count exact
    else:
        assert (cpu == -1).any() and (cpu > 0).any()


@pytest.mark.gpu
def test_gpu_counts_every_16s_pair_as_the_cpu():
    batch = load_sequences(RRNA, alphabet="dna").sorted_by_length()
    for t in (0.97, 0.9):
        bound = IdentityBound.from_scoring(Scoring(match=2, mismatch=-3, gap_open=5,
                                                   gap_extend=2), t)
        f = QgramFilter.for_job(bound, DNA)
        runs = pair_ranges(batch.lengths, batch.lengths, True, bound)
        cpu, gpu = both_counts(f, batch.residues, batch.offsets, runs)
        assert np.array_equal(cpu, gpu) and len(cpu) > 8000
