"""Shared q-grams of sequence pairs on the CPU: the all-pairs exact pre-filter's kernels.

Two kernels, both plain integer code:

- :func:`qgram_codes`: every q-gram of every sequence as one integer (the q residue codes
  read as the digits of a number in base ``alphabet size``), q-grams holding the unknown
  code (``N``/``X``, never an identity) left out, each sequence's codes sorted ascending;
- :func:`count_shared`: for pairs given as runs of consecutive subjects per query (the
  all-pairs planner's layout), the number of q-grams the two sequences share counted with
  multiplicity (``sum over q-grams w of min(count_a(w), count_b(w))``), by merging the two
  sorted code lists; each pair stops as soon as it can no longer reach its ``need``.

Why sorted lists and a merge, not count vectors and a matrix product: the product counts
``sum count_a(w) * count_b(w)``, an over-count that keeps pairs the exact count drops
(sequences with repeated q-grams count them squared); the merge counts the exact sum of
minima in ``len_a + len_b`` steps at most, and a pair stops as soon as it cannot reach its
need (docs/allpairs.md has the measurements).  A dense table of counts per query
(``alphabet**q`` counters, 78,125 at DNA's q = 7) would be the other exact way, with random
reads instead of sequential ones; it is not measured against the merge.

Why the count never loses a pair (docs/allpairs.md has the proof): an alignment with
``e`` non-identity columns leaves at least ``length - q + 1 - q*e`` q-grams of each
sequence inside runs of identity columns; each of them is a q-gram of the other sequence
too, at its own position (the alignment pairs positions one to one), and holds no unknown
residue.  So a q-gram left out for holding ``N`` never was one of them.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["EXACT_DOT", "MAX_CODE", "bucket_vectors", "count_shared", "merge_count", "need_of",
           "qgram_codes", "screen_pairs", "screen_passes", "screen_runs", "token_bucket"]

#: Codes must stay below this (int64 with room): ``alphabet_size ** q <= MAX_CODE``.
MAX_CODE = 1 << 62
#: float32 holds every whole number below this exactly: a bucket screen's dot product of
#: two sequences is exact (in any order of summation) when the product of their q-gram
#: counts is below it, since every partial sum of the non-negative whole terms is at most
#: the whole dot product, which is at most that product.
EXACT_DOT = 1 << 24


@njit(parallel=True, nogil=True, cache=True)
def qgram_codes(residues: np.ndarray, offsets: np.ndarray, q: int, base: int,
                unknown: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted q-gram codes of each sequence, without those holding ``unknown``.

    Parameters
    ----------
    residues : numpy.ndarray of uint8
        Residue codes of all sequences, concatenated (each below ``base``).
    offsets : numpy.ndarray of int64
        Sequence ``i`` is ``residues[offsets[i]:offsets[i + 1]]``.
    q : int
        The q-gram length (at least 1, ``base ** q`` at most :data:`MAX_CODE`).
    base : int
        The alphabet size.
    unknown : int
        The code never counted as an identity (its q-grams are left out).

    Returns
    -------
    codes, code_offsets : numpy.ndarray of int64
        Sequence ``i``'s q-grams are ``codes[code_offsets[i]:code_offsets[i + 1]]``,
        ascending, with repeats (a q-gram occurring twice is there twice).
    """
    n = offsets.shape[0] - 1
    counts = np.zeros(n + 1, np.int64)
    for i in prange(n):
        run = 0  # residues since the last unknown
        found = 0
        for p in range(offsets[i], offsets[i + 1]):
            run = 0 if residues[p] == unknown else run + 1
            if run >= q:
                found += 1
        counts[i + 1] = found
    code_offsets = np.cumsum(counts)
    codes = np.empty(code_offsets[n], np.int64)
    top = np.int64(base) ** (q - 1)  # the weight of a window's first digit
    for i in prange(n):
        k = code_offsets[i]
        run = 0
        code = np.int64(0)
        for p in range(offsets[i], offsets[i + 1]):
            c = residues[p]
            if c == unknown:
                run = 0
                code = 0
                continue
            if run >= q:  # drop the digit that leaves the window
                code -= residues[p - q] * top
            code = code * base + c
            run += 1
            if run >= q:
                codes[k] = code
                k += 1
        codes[code_offsets[i]:k].sort()
    return codes, code_offsets


def need_of(m, n, q, num, den):
    """The fewest shared q-grams of lengths ``m``, ``n`` at identity ``num / den``:
    ``max(m, n) - q + 1 - q * floor((den - num) * (m + n) / (den + num))`` (at most 0:
    the pair cannot be ruled out).  The reference: ``QgramFilter.need`` in
    :mod:`swdask.jobs.allpairs.filter`.  Plain Python, compiled here and for the GPU
    (:mod:`swdask.kernels.cuda.qgram`)."""
    edits = ((den - num) * (m + n)) // (den + num)
    return max(m, n) - q + 1 - q * edits


def merge_count(a, a0, a1, b, b0, b1, need):
    """Sum of minima of the counts of the sorted runs ``a[a0:a1]`` and ``b[b0:b1]``, or
    a smaller number once ``need`` is out of reach (every match still to come takes one
    element of each run, so the shorter rest bounds what can be added).  Plain Python,
    compiled here and for the GPU."""
    i = a0
    j = b0
    shared = 0
    while i < a1 and j < b1:
        x = a[i]
        y = b[j]
        if x == y:
            shared += 1
            i += 1
            j += 1
        else:
            if x < y:
                i += 1
            else:
                j += 1
            if shared + min(a1 - i, b1 - j) < need:
                break
    return shared


def token_bucket(code, occurrence, buckets):
    """The bucket of q-gram ``code``'s ``occurrence``-th window (0 the first) in a
    sequence: a fixed 32-bit mix of the two, modulo ``buckets``.  Plain Python, compiled
    here and for the GPU, so every backend builds the same vectors.

    Counting a sequence's windows as tokens ``(code, occurrence)`` turns the sum of
    minima into the size of an intersection of sets: two sequences share exactly
    ``min(c_x(w), c_y(w))`` tokens of q-gram ``w``.  Which bucket a token lands in only
    decides how loose the screen is, never whether it is safe.

    Examples
    --------
    >>> token_bucket(7, 0, 16384) != token_bucket(7, 1, 16384)
    True
    """
    code = int(code)
    h = ((code & 0xFFFFFFFF) ^ (code >> 32) ^ (occurrence * 0x9E3779B9)) & 0xFFFFFFFF
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h % buckets


def screen_passes(dot, tokens, need):
    """Whether a pair passes the bucket screen: its dot product reaches its need, or its
    tokens' product (``len_a * len_b`` of its code lists) reaches :data:`EXACT_DOT`, where
    float32 could have rounded the dot product down.  Plain Python, compiled here and for
    the GPU."""
    return dot >= need or tokens >= EXACT_DOT


_need_of = njit(nogil=True, cache=True, inline="always")(need_of)
_screen_passes = njit(nogil=True, cache=True, inline="always")(screen_passes)
_token_bucket = njit(nogil=True, cache=True, inline="always")(token_bucket)
_merge_count = njit(nogil=True, cache=True, inline="always")(merge_count)


@njit(parallel=True, nogil=True, cache=True)
def count_shared(q_codes: np.ndarray, q_code_off: np.ndarray, s_codes: np.ndarray,
                 s_code_off: np.ndarray, q_len: np.ndarray, s_len: np.ndarray,
                 q_list: np.ndarray, s_lo: np.ndarray, pair_start: np.ndarray, q: int,
                 num: int, den: int, shared: np.ndarray) -> None:
    """Shared q-grams of every pair of the runs that reach their need, into ``shared``.

    Run ``k`` is query ``q_list[k]`` against subjects ``s_lo[k], s_lo[k] + 1, ...``; its
    pairs are ``shared[pair_start[k]:pair_start[k + 1]]`` (int32).  A pair gets its
    exact count when that reaches the pair's :func:`need_of` (``num / den`` the identity
    threshold), and -1 otherwise: the merge stops once the need is out of reach, so a
    smaller count is never known.  With ``num = 0`` (no need above 0) every count is
    exact.
    """
    for k in prange(q_list.shape[0]):
        qi = q_list[k]
        a0, a1 = q_code_off[qi], q_code_off[qi + 1]
        for p in range(pair_start[k], pair_start[k + 1]):
            sj = s_lo[k] + p - pair_start[k]
            need = _need_of(q_len[qi], s_len[sj], q, num, den)
            count = _merge_count(q_codes, a0, a1, s_codes, s_code_off[sj],
                                 s_code_off[sj + 1], need)
            shared[p] = count if count >= need else -1


@njit(parallel=True, nogil=True, cache=True)
def bucket_vectors(codes: np.ndarray, code_offsets: np.ndarray, vectors: np.ndarray) -> None:
    """Each sequence's q-gram tokens counted per bucket, into the zeroed rows of ``vectors``.

    Sequence ``i``'s sorted codes ``codes[code_offsets[i]:code_offsets[i + 1]]``
    (:func:`qgram_codes`) add 1 to ``vectors[i, token_bucket(code, k, B)]`` for the
    ``k``-th window reading each code (``B`` the row width).  The dot product of two rows
    is at least the pair's shared count: each shared token adds 1 to the same bucket of
    both rows, and a bucket holding ``c`` shared tokens holds at least ``c`` of each
    sequence's, so adds at least ``c * c >= c``.  The screen
    (:meth:`swdask.jobs.allpairs.filter.QgramFilter.screen`) rests on this.
    """
    buckets = vectors.shape[1]
    for i in prange(code_offsets.shape[0] - 1):
        k = 0
        for p in range(code_offsets[i], code_offsets[i + 1]):
            k = k + 1 if p > code_offsets[i] and codes[p - 1] == codes[p] else 0
            vectors[i, _token_bucket(codes[p], k, buckets)] += 1


@njit(parallel=True, nogil=True, cache=True)
def screen_runs(dots: np.ndarray, q_code_off: np.ndarray, s_code_off: np.ndarray,
                q_len: np.ndarray, s_len: np.ndarray, q_list: np.ndarray, s_lo: np.ndarray,
                pair_start: np.ndarray, q: int, num: int, den: int, passed: np.ndarray) -> None:
    """``passed[p]`` = 1 for each pair ``p`` of the runs (as :func:`count_shared` lays
    them out) that :func:`screen_passes`, 0 for the others: ``dots[i, j]`` is the dot
    product of query ``i``'s and subject ``j``'s :func:`bucket_vectors`."""
    for k in prange(q_list.shape[0]):
        qi = q_list[k]
        for p in range(pair_start[k], pair_start[k + 1]):
            sj = s_lo[k] + p - pair_start[k]
            tokens = (q_code_off[qi + 1] - q_code_off[qi]) * (s_code_off[sj + 1] - s_code_off[sj])
            need = _need_of(q_len[qi], s_len[sj], q, num, den)
            passed[p] = 1 if _screen_passes(dots[qi, sj], tokens, need) else 0


def screen_pairs(q_codes: np.ndarray, q_code_off: np.ndarray, s_codes: np.ndarray,
                 s_code_off: np.ndarray, q_len: np.ndarray, s_len: np.ndarray,
                 q_list: np.ndarray, s_lo: np.ndarray, pair_start: np.ndarray, q: int,
                 num: int, den: int, buckets: int,
                 same_block: bool = False) -> np.ndarray:
    """Positions, in run order, of the pairs of the runs that pass the bucket screen: the
    CPU twin of :func:`swdask.kernels.cuda.qgram.screen_and_count_gpu`'s screen.

    Both blocks' :func:`bucket_vectors` (``buckets`` wide; one set when ``same_block``),
    their product by BLAS (float32, exact below :data:`EXACT_DOT`), then
    :func:`screen_runs`.  Parameters as :func:`count_shared`'s.
    """
    vectors = []
    for codes, offsets in ((q_codes, q_code_off),) if same_block else (
            (q_codes, q_code_off), (s_codes, s_code_off)):
        v = np.zeros((len(offsets) - 1, buckets), np.float32)
        bucket_vectors(codes, offsets, v)
        vectors.append(v)
    dots = vectors[0] @ vectors[-1].T
    passed = np.zeros(int(pair_start[-1]), np.uint8)
    screen_runs(dots, q_code_off, s_code_off, q_len, s_len, q_list, s_lo, pair_start, q, num,
                den, passed)
    return np.flatnonzero(passed)
