"""The q-gram kernels of the all-pairs pre-filter against plain-Python counting."""
from collections import Counter
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from swdask.jobs.allpairs.filter import QgramFilter
from swdask.kernels.cpu import qgram
from swdask.kernels.cpu.qgram import (
    EXACT_DOT,
    bucket_vectors,
    count_shared,
    need_of,
    qgram_codes,
    screen_passes,
    token_bucket,
)
from swdask.sequences.alphabet import DNA, PROTEIN
from tests.helpers import pack


def windows(seq: str, q: int, alphabet=DNA) -> Counter:
    """The q-grams of ``seq`` without the unknown letter, as strings, counted."""
    unknown = alphabet.unknown
    return Counter(seq[i:i + q] for i in range(len(seq) - q + 1) if unknown not in seq[i:i + q])


def code_of(gram: str, alphabet) -> int:
    code = 0
    for letter in gram:
        code = code * alphabet.size + alphabet.letters.index(letter)
    return code


def encode(seqs, alphabet=DNA):
    return pack([alphabet.encode(s) for s in seqs])


#: DNA with N, short (lengths 0, 1 and around q come up often).
dna = st.text(alphabet="ACGTN", min_size=0, max_size=24)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(dna, min_size=1, max_size=5), st.integers(1, 9))
def test_codes_are_the_sorted_windows_without_n(seqs, q):
    residues, offsets = encode(seqs)
    codes, code_off = qgram_codes(residues, offsets, q, DNA.size, DNA.unknown_code)
    for i, seq in enumerate(seqs):
        expected = sorted(code_of(g, DNA) for g in windows(seq, q).elements())
        assert codes[code_off[i]:code_off[i + 1]].tolist() == expected, (seq, q)


def test_protein_codes_and_the_largest_q():
    seq = "MKV*XAOJUW"
    residues, offsets = encode([seq], PROTEIN)
    codes, _ = qgram_codes(residues, offsets, 3, PROTEIN.size, PROTEIN.unknown_code)
    assert codes.tolist() == sorted(code_of(g, PROTEIN) for g in windows(seq, 3, PROTEIN))
    # 27**13 < 2**62: 13-grams of protein still fit (no wrap: distinct windows, distinct codes)
    long_seq = "ARNDCQEGHILKMFPSTWYV" * 2
    residues, offsets = encode([long_seq], PROTEIN)
    codes, _ = qgram_codes(residues, offsets, 13, PROTEIN.size, PROTEIN.unknown_code)
    assert len(set(codes.tolist())) == len(windows(long_seq, 13, PROTEIN)) and codes.min() >= 0


def shared_counts(queries, subjects, q, t):
    """count_shared over every (query, subject), as a matrix."""
    qr, qo = encode(queries)
    sr, so = encode(subjects)
    qc = qgram_codes(qr, qo, q, DNA.size, DNA.unknown_code)
    sc = qgram_codes(sr, so, q, DNA.size, DNA.unknown_code)
    n_q, n_s = len(queries), len(subjects)
    out = np.zeros(n_q * n_s, np.int32)
    count_shared(qc[0], qc[1], sc[0], sc[1], np.diff(qo), np.diff(so),
                 np.arange(n_q, dtype=np.int64), np.zeros(n_q, np.int64),
                 np.arange(n_q + 1, dtype=np.int64) * n_s, q, t.numerator, t.denominator, out)
    return out.reshape(n_q, n_s)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(dna, min_size=1, max_size=4), st.lists(dna, min_size=1, max_size=4),
       st.integers(1, 6), st.sampled_from([Fraction(0), Fraction(1, 2), Fraction(9, 10),
                                           Fraction(97, 100), Fraction(1)]))
def test_count_is_the_sum_of_minima_where_it_reaches_the_need(queries, subjects, q, t):
    got = shared_counts(queries, subjects, q, t)
    for i, a in enumerate(queries):
        for j, b in enumerate(subjects):
            exact = sum((windows(a, q) & windows(b, q)).values())
            need = need_of(len(a), len(b), q, t.numerator, t.denominator)
            assert got[i, j] == (exact if exact >= need else -1), (a, b, q, t)


def test_early_stop_and_threshold_zero_on_long_unrelated_sequences():
    rng = np.random.default_rng(5)
    a, b = ("".join(rng.choice(list("ACGT"), 400)) for _ in range(2))
    # At 0.97 two random 400-mers are far below the need: the merge stops early, -1.
    assert shared_counts([a], [b], 7, Fraction(97, 100))[0, 0] == -1
    # With t = 0 nothing is needed: the count is exact.
    exact = sum((windows(a, 7) & windows(b, 7)).values())
    assert shared_counts([a], [b], 7, Fraction(0))[0, 0] == exact
    assert shared_counts([a], [a], 7, Fraction(97, 100))[0, 0] == 394  # itself: every 7-gram


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(0, 5000), st.integers(0, 5000), st.integers(1, 12),
       st.fractions(min_value=Fraction(1, 1000), max_value=1, max_denominator=1000))
def test_integer_need_equals_the_exact_one(m, n, q, t):
    exact = QgramFilter(q, t, 5, 4).need(m, n)
    assert max(0, need_of(m, n, q, t.numerator, t.denominator)) == exact
    assert int(QgramFilter(q, t, 5, 4).needs(m, n)) == exact


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(0, (1 << 62) - 1), st.integers(0, 1 << 20), st.integers(1, 1 << 20))
def test_compiled_token_bucket_equals_plain_python(code, occurrence, buckets):
    b = token_bucket(code, occurrence, buckets)
    assert 0 <= b < buckets and qgram._token_bucket(code, occurrence, buckets) == b


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(dna, min_size=1, max_size=5), st.integers(1, 7), st.integers(1, 40))
def test_bucket_vectors_count_tokens_and_bound_the_shared_count(seqs, q, buckets):
    residues, offsets = encode(seqs)
    codes, code_off = qgram_codes(residues, offsets, q, DNA.size, DNA.unknown_code)
    vectors = np.zeros((len(seqs), buckets), np.float32)
    bucket_vectors(codes, code_off, vectors)
    for i, seq in enumerate(seqs):
        # The k-th window reading a q-gram is token (code, k), counted in its bucket.
        expected = Counter()
        for gram, count in windows(seq, q).items():
            for k in range(count):
                expected[token_bucket(code_of(gram, DNA), k, buckets)] += 1
        assert {b: int(v) for b, v in enumerate(vectors[i]) if v} == dict(expected), (seq, q)
    dots = vectors @ vectors.T
    for i, a in enumerate(seqs):
        for j, b in enumerate(seqs):
            assert dots[i, j] >= sum((windows(a, q) & windows(b, q)).values())


def test_the_screen_keeps_a_pair_whose_dot_product_float32_could_round():
    assert screen_passes(10.0, 100, 10) and not screen_passes(9.0, 100, 10)
    # A product of token counts at 2**24 or more: float32 may have rounded the sum down.
    assert screen_passes(0.0, EXACT_DOT, 10) and not screen_passes(0.0, EXACT_DOT - 1, 10)
    assert float(np.float32(EXACT_DOT + 1)) == EXACT_DOT  # why: the first whole number lost
