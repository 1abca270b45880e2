"""The exact q-gram pre-filter of all-pairs: it never drops a pair whose reported alignment
reaches the threshold (hypothesis, against the traceback), whole runs equal the unfiltered
ones on real genes (CPU and the GPU kernel in the simulator), its switch and statistics."""
import dataclasses
import json
import random
from collections import Counter
from fractions import Fraction

import dask
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import swdask
from swdask.jobs.allpairs import IdentityBound, all_pairs, read_all_pairs, write_all_pairs
from swdask.jobs.allpairs import plan as ap_plan
from swdask.jobs.allpairs.filter import QgramFilter, pairs_of, runs_of
from swdask.kernels.cpu.traceback import align_codes
from swdask.sequences.alphabet import DNA as DNA_LETTERS
from swdask.sequences.alphabet import PROTEIN
from swdask.sequences.batch import SequenceBatch
from swdask.sequences.store import load_sequences
from swdask.testing import mutated_copy
from tests.helpers import QUERIES, RRNA, pack, run_cli, write_fasta

DNA = swdask.Scoring(match=2, mismatch=-3, gap_open=5, gap_extend=2)
THRESHOLDS = [Fraction(1, 2), Fraction(4, 5), Fraction(9, 10), Fraction(95, 100),
              Fraction(97, 100), Fraction(99, 100), Fraction(1)]


def shared_exactly(a: str, b: str, q: int) -> int:
    """Sum over q-grams without N of the smaller count: the plain-Python truth."""
    def grams(s):
        return Counter(s[i:i + q] for i in range(len(s) - q + 1) if "N" not in s[i:i + q])
    return sum((grams(a) & grams(b)).values())


def batch_of(*seqs: str) -> SequenceBatch:
    """A batch of ``seqs`` (empty ones too, which a store can hold and as_batch refuses)."""
    residues, offsets = pack([DNA_LETTERS.encode(s) if s else [] for s in seqs])
    return SequenceBatch(np.arange(len(seqs)), [f"s{i}" for i in range(len(seqs))],
                         [""] * len(seqs), np.diff(offsets), offsets, residues, DNA_LETTERS)


def kept(f: QgramFilter, a: str, b: str) -> bool:
    """Whether the filter (its kernel) keeps the pair ``(a, b)``."""
    qa, sb = batch_of(a), batch_of(b)
    runs = (np.array([0]), np.array([0]), np.array([1]))
    if not f.can_drop(qa.lengths, sb.lengths, runs):
        return True
    return len(f.keep(f.codes(qa), f.codes(sb), qa.lengths, sb.lengths, runs)[0]) == 1


@st.composite
def related_pairs(draw):
    """DNA with N (and other IUPAC letters, read as N), a copy with substitutions, indels
    and N; lengths 0, 1, short and around q come up, and pairs at high identity."""
    letters = draw(st.sampled_from(["ACGT", "ACGTN", "ACGTNRY"]))
    a = draw(st.text(alphabet=letters, min_size=0, max_size=draw(st.sampled_from([3, 9, 40, 90]))))
    rng = random.Random(draw(st.integers(0, 2**32)))
    b = mutated_copy(a, draw(st.sampled_from([0, 0.01, 0.03, 0.06, 0.15])), rng,
                     indels=draw(st.sampled_from([0, 0.2, 0.6])), letters=letters)
    match = draw(st.integers(1, 5))
    scoring = swdask.Scoring(match=match, mismatch=draw(st.integers(-6, match - 1)),
                             gap_open=draw(st.integers(0, 8)), gap_extend=draw(st.integers(1, 4)))
    return a, b, scoring, draw(st.integers(1, 9)), draw(st.sampled_from([1, 3, 64, 16384]))


@settings(max_examples=250, deadline=None, derandomize=True)
@given(related_pairs())
def test_the_filter_never_drops_a_pair_that_reaches_the_threshold(case):
    a, b, scoring, q, buckets = case
    a, b = (DNA_LETTERS.decode(DNA_LETTERS.encode(s, map_unknown=True)) for s in (a, b))
    r = align_codes(a, b, scoring, "global")  # the reported alignment
    shared = shared_exactly(a, b, q)
    # The q-gram lemma for this very alignment, with its own non-identity columns.
    edits = r["align_length"] - r["matches"]
    assert shared >= max(len(a), len(b)) - q + 1 - q * edits, (a, b, r)
    for t in THRESHOLDS:
        bound = IdentityBound.from_scoring(scoring, t, "global")
        f = QgramFilter(q, t, DNA_LETTERS.size, DNA_LETTERS.unknown_code)
        if bound.identity_passes(r["matches"], r["align_length"]):
            assert edits <= (1 - t) * (len(a) + len(b)) / (1 + t)  # the edit bound
            assert shared >= f.need(len(a), len(b)), (a, b, t, q)
            assert kept(f, a, b), (a, b, t, q)  # the kernel keeps it
        # The kernel's decision is the count against the need, nothing else.
        assert kept(f, a, b) == (shared >= f.need(len(a), len(b))), (a, b, t, q)
        # The bucket screen before the count changes nothing, at any width.
        screened = dataclasses.replace(f, buckets=buckets)
        assert kept(screened, a, b) == kept(f, a, b), (a, b, t, q, buckets)


def test_n_makes_no_shared_qgram():
    f = QgramFilter(3, Fraction(1), DNA_LETTERS.size, DNA_LETTERS.unknown_code)
    assert shared_exactly("NNNNNN", "NNNNNN", 3) == 0
    assert f.need(6, 6) == 4 and not kept(f, "NNNNNN", "NNNNNN")  # identity 0: dropped
    # IUPAC codes are N: a pair of R runs shares nothing either.
    assert not kept(f, "ACRRRT", "ACRRRT") and kept(f, "ACGGGT", "ACGGGT")


@pytest.mark.parametrize("buckets", [1, 257, 16384])
def test_the_screen_keeps_what_the_count_keeps_on_16s(buckets):
    """Every pair of 16S_200 the lengths allow at 0.97 and 0.9, in two blocks with holes in
    the runs: the screened filter keeps exactly the pairs the count keeps, and at 16,384
    buckets the screen alone already drops most of the pairs the count drops."""
    genes = load_sequences(RRNA, alphabet="dna").sorted_by_length()
    qa, sb = genes.take(np.arange(0, 100)), genes.take(np.arange(60, 200))
    for t in (Fraction(97, 100), Fraction(9, 10)):
        bound = IdentityBound.from_scoring(DNA, t)
        runs = ap_plan.pair_ranges(qa.lengths, sb.lengths, False, bound)
        qi, sj = pairs_of(runs)
        runs = runs_of(qi[::3], sj[::3])  # holes: not every subject of a query
        exact = QgramFilter.for_job(bound, DNA_LETTERS)
        exact = dataclasses.replace(exact, buckets=0)
        screened = dataclasses.replace(exact, buckets=buckets)
        args = (exact.codes(qa), exact.codes(sb), qa.lengths, sb.lengths, runs)
        kept_exactly = exact.kept(*args)
        assert np.array_equal(screened.kept(*args), kept_exactly)
        assert 0 < len(kept_exactly) < int(runs[2].sum())
        if t == Fraction(97, 100):  # the screen on its own, where the need is high
            passed = len(screened._screen(*args, same_block=False))
            if buckets == 16384:  # wide: few more pairs than the count keeps
                assert passed < 2 * len(kept_exactly) + 50, (passed, len(kept_exactly))
            if buckets == 1:  # one bucket: every pair
                assert passed == int(runs[2].sum())


def test_runs_and_pairs_round_trip():
    rng = np.random.default_rng(3)
    qi = np.sort(rng.integers(0, 20, 300))
    sj = np.concatenate([np.sort(rng.choice(50, np.count_nonzero(qi == q), replace=False))
                         for q in np.unique(qi)])
    runs = runs_of(qi, sj)
    assert all(np.array_equal(x, y) for x, y in zip(pairs_of(runs), (qi, sj)))
    assert len(runs[0]) < len(qi)  # consecutive subjects merged into runs
    empty = runs_of(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert [len(x) for x in empty] == [0, 0, 0]


def test_the_filter_is_off_where_it_cannot_drop(monkeypatch):
    local = IdentityBound.from_scoring(DNA, 0.97, "local")
    assert QgramFilter.for_job(local, DNA_LETTERS) is None
    assert QgramFilter.for_job(IdentityBound.from_scoring(DNA, 0), DNA_LETTERS) is None
    f = QgramFilter.for_job(IdentityBound.from_scoring(DNA, 0.97), DNA_LETTERS)
    assert (f.q, f.threshold, f.base, f.unknown) == (7, Fraction(97, 100), 5, 4)
    assert QgramFilter.for_job(IdentityBound.from_scoring(swdask.Scoring(), 0.9), PROTEIN).q == 4
    with dask.config.set({"swdask.allpairs-qgram": 9}):
        assert QgramFilter.for_job(IdentityBound.from_scoring(DNA, 0.97), DNA_LETTERS).q == 9
    with pytest.raises(ValueError, match="from 1 to 26 for dna, got 27"):
        QgramFilter.for_job(IdentityBound.from_scoring(DNA, 0.97), DNA_LETTERS, q=27)
    with pytest.raises(ValueError, match="got 0"):
        QgramFilter.for_job(IdentityBound.from_scoring(DNA, 0.97), DNA_LETTERS, q=0)
    # The screen's width: 16,384 by default, 0 turns it off, a bad one is one clear line.
    bound = IdentityBound.from_scoring(DNA, 0.97)
    assert f.buckets == 16384
    with dask.config.set({"swdask.allpairs-screen-buckets": 0}):
        assert QgramFilter.for_job(bound, DNA_LETTERS).buckets == 0
    for bad in (-1, 2.5, "many", 1 << 20, True):
        with dask.config.set({"swdask.allpairs-screen-buckets": bad}), \
                pytest.raises(ValueError, match=r"^swdask.allpairs-screen-buckets must be a whole "
                              r"number from 0 \(no screen\) to 131,072, got "):
            QgramFilter.for_job(bound, DNA_LETTERS)
    # At 0.8, 16S-length pairs need nothing: the filter steps aside before counting.
    low = QgramFilter.for_job(IdentityBound.from_scoring(DNA, 0.8), DNA_LETTERS)
    lengths = np.arange(1400, 1600, dtype=np.int64)
    runs = ap_plan.pair_ranges(lengths, lengths, True, IdentityBound.from_scoring(DNA, 0.8))
    assert not low.can_drop(lengths, lengths, runs)
    assert f.can_drop(lengths, lengths, ap_plan.pair_ranges(
        lengths, lengths, True, IdentityBound.from_scoring(DNA, 0.97)))


# --------------------------------------------------------------------------------------
# whole runs: the filtered output is the unfiltered output
# --------------------------------------------------------------------------------------


def _run(path, t, prefilter, **options):
    frame, stats = all_pairs(path, scoring=DNA, min_identity=t, cigar=True, device="cpu",
                             prefilter=prefilter, return_stats=True, **options)
    return dask.compute(frame, stats)


@pytest.fixture(scope="module")
def first60(tmp_path_factory):
    """The first 60 genes of 16S_200 (649 to 1,651 bp, 11 with IUPAC letters or N)."""
    batch = load_sequences(RRNA, alphabet="dna")
    records = [(batch.names[i], batch.alphabet.decode(batch.codes(i))) for i in range(60)]
    return write_fasta(tmp_path_factory.mktemp("first60") / "genes.fasta", records)


@pytest.mark.parametrize("t, block_size", [(0.97, 64), (0.9, 16), (0.8, 60)])
def test_16s_filtered_run_equals_the_unfiltered_run(t, block_size, first60):
    path = RRNA if t == 0.97 else first60  # all 200 genes at 0.97, where unfiltered is cheap
    (table, stats), (plain, plain_stats) = (_run(path, t, p, block_size=block_size)
                                            for p in (True, False))
    assert table.equals(plain) and stats.hits == plain_stats.hits == len(table)
    assert plain_stats.pairs_filtered == 0 and plain_stats.filter_seconds == 0
    assert stats.pairs_scored + stats.pairs_filtered == plain_stats.pairs_scored
    assert stats.cells < plain_stats.cells or stats.pairs_filtered == 0
    if t == 0.97:
        # 16S_200 at 0.97: 8,428 pairs the lengths allow, 4 in the output.
        assert len(table) == 4 and stats.pairs_scored < 100 < stats.pairs_filtered
    if t == 0.9:
        assert stats.pairs_filtered > 0 and len(table) > 0
    if t == 0.8:
        assert len(table) > 0 and stats.pairs_filtered == 0  # the filter stepped aside


def test_protein_filtered_run_equals_the_unfiltered_run(tmp_path):
    """Protein (q = 4, X never an identity): real Swiss-Prot records and their mutants."""
    batch = load_sequences(QUERIES, alphabet="protein")
    rng = random.Random(8)
    records = []
    for i in range(4):
        seq = batch.alphabet.decode(batch.codes(i))[:120]
        records += [(f"p{i}m{k}", mutated_copy(seq, 0.04 * k, rng, letters="ACDEFGHIKLMNPQRSTVWYX"))
                    for k in range(3)]
    path = write_fasta(tmp_path / "proteins.fasta", records)
    options = dict(scoring=swdask.Scoring("BLOSUM62"), min_identity=0.9, cigar=True,
                   device="cpu", return_stats=True)
    (table, stats), (plain, _) = (dask.compute(*all_pairs(path, prefilter=p, **options))
                                  for p in (True, False))
    assert table.equals(plain) and len(table) >= 4 and stats.pairs_filtered > 0


def test_simulated_gpu_scores_the_filtered_runs_as_the_cpu(tmp_path):
    """Runs with holes (a query's subjects not consecutive) reach the GPU kernel."""
    rng = random.Random(5)
    genes = ["".join(rng.choice("ACGT") for _ in range(40)) for _ in range(3)]
    records = [(f"g{g}c{k}", mutated_copy(genes[g], 0.03 * k, rng))
               for k in range(3) for g in range(3)]  # one gene's copies not side by side
    path = write_fasta(tmp_path / "copies.fasta", records)
    cpu, cpu_stats = _run(path, 0.9, True)
    plain, _ = _run(path, 0.9, False)
    gpu = all_pairs(path, scoring=DNA, min_identity=0.9, cigar=True, device="gpu").compute(
        scheduler="sync")
    with dask.config.set({"swdask.allpairs-filter-device": "cpu"}):  # GPU scores, CPU counts
        mixed, mixed_stats = dask.compute(*all_pairs(path, scoring=DNA, min_identity=0.9,
                                                     cigar=True, device="gpu",
                                                     return_stats=True), scheduler="sync")
    assert cpu.equals(plain) and cpu.equals(gpu) and cpu.equals(mixed) and len(cpu) >= 3
    assert cpu_stats.pairs_filtered == mixed_stats.pairs_filtered > 0


def test_resume_with_the_filter_switched_changes_nothing(tmp_path):
    genes = write_fasta(tmp_path / "g.fasta", [(f"r{i}", s) for i, s in enumerate(
        mutated_copy("ACGTTGCAAGCT" * 6, 0.02 * (i % 4), random.Random(i)) for i in range(12))])
    options = dict(scoring=DNA, min_identity=0.95, block_size=3, device="cpu")
    write_all_pairs(genes, tmp_path / "plain", prefilter=False, **options)
    write_all_pairs(genes, tmp_path / "out", **options)
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["prefilter"] == {"q": 7}
    manifest["done"] = dict(list(manifest["done"].items())[:2])  # as if killed after two
    manifest["finished"] = False
    (tmp_path / "out" / "_manifest.json").write_text(json.dumps(manifest))
    stats = write_all_pairs(genes, tmp_path / "out", resume=True, prefilter=False, **options)
    assert read_all_pairs(tmp_path / "out").equals(read_all_pairs(tmp_path / "plain"))
    assert stats.hits == len(read_all_pairs(tmp_path / "plain")) > 0


def test_cli_no_prefilter_and_the_summary(tmp_path, capsys):
    out, plain = tmp_path / "out", tmp_path / "plain"
    common = ["allpairs", RRNA, "--device", "cpu", "--block-size", "100"]
    status, _, err = run_cli(capsys, *common, "-o", out, "--summary-json", tmp_path / "s.json")
    assert status == 0 and "dropped by shared q-grams" in err
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["pairs_filtered"] > 8000 and summary["filter_seconds"] > 0
    assert summary["pairs_scored"] + summary["pairs_filtered"] == 8428
    status, _, err = run_cli(capsys, *common, "-o", plain, "--no-prefilter")
    assert status == 0 and "0 dropped by shared q-grams (0.0 s), 8,428 scored" in err
    assert read_all_pairs(out).equals(read_all_pairs(plain)) and len(read_all_pairs(out)) == 4
