"""The exact q-gram pre-filter of global all-pairs: pairs that cannot reach the identity
threshold dropped by counting shared q-grams, before the score pass.

A pair of lengths ``m``, ``n`` whose reported alignment has identity at least ``t`` shares
at least :meth:`QgramFilter.need` q-grams (counted with multiplicity, q-grams holding an
unknown residue left out); the filter counts them (:mod:`swdask.kernels.cpu.qgram`) and
keeps only the pairs that reach it, so no pair of the output is ever dropped.  The proof is
in :class:`QgramFilter` and in docs/allpairs.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from ... import backend
from ...kernels.cpu.qgram import MAX_CODE, count_shared, qgram_codes, screen_pairs
from ...options import tunable

if TYPE_CHECKING:
    import numpy.typing as npt

    from ...sequences.alphabet import Alphabet
    from ...sequences.batch import SequenceBatch
    from .plan import IdentityBound

__all__ = ["MAX_SCREEN_BUCKETS", "QGRAM", "SCREEN_BUCKETS", "QgramFilter", "Runs", "pairs_of",
           "runs_of"]

#: The q of each alphabet, by measurement (docs/allpairs.md: on 2,000 RefSeq 16S genes at
#: identity 0.97, q = 6, 7 and 8 keep 5,116, 5,088 and 5,449 of the 874,171 pairs the
#: lengths allow; q = 4 keeps 21,560, q = 12 7,356).  Protein's is not measured (no
#: protein set with many close pairs here): 4 keeps 27**4 codes apart.  The tunable
#: ``swdask.allpairs-qgram`` overrides both.
QGRAM = {"dna": 7, "protein": 4}

#: Width of the screen's token vectors (:meth:`QgramFilter.kept`), by measurement: on
#: 3,000 RefSeq 16S genes at 0.97 (1,969,019 pairs the lengths allow, 10,897 reaching
#: their need) 4,096 buckets keep 294,980, 16,384 keep 21,476 and 32,768 keep 15,912;
#: the product's cost grows with the width.  The tunable ``swdask.allpairs-screen-buckets``
#: overrides it; 0 turns the screen off.
SCREEN_BUCKETS = 16384
#: The widest screen: a block's token matrix is ``block size x buckets`` float32 (1 GiB
#: at 2,048 x 131,072).
MAX_SCREEN_BUCKETS = 1 << 17

#: Runs of pairs: per entry a query index, its first subject and how many consecutive
#: subjects (int64 arrays ``q_list, s_lo, s_count``), the planner's and the kernels' layout.
Runs = tuple["npt.NDArray[np.int64]", "npt.NDArray[np.int64]", "npt.NDArray[np.int64]"]


def filters(mode: str, threshold: float | Fraction) -> bool:
    """Whether an all-pairs job of ``mode`` and identity ``threshold`` has a q-gram
    filter (:meth:`QgramFilter.for_job`): global mode and a threshold above 0.

    Examples
    --------
    >>> filters("global", 0.97), filters("local", 0.97), filters("global", 0)
    (True, False, False)
    """
    return mode == "global" and threshold > 0


def screen_buckets() -> int:
    """Width of the screen's token vectors: the tunable ``swdask.allpairs-screen-buckets``,
    else :data:`SCREEN_BUCKETS`; 0 means no screen.

    Raises
    ------
    ValueError
        If the tunable is not a whole number from 0 to :data:`MAX_SCREEN_BUCKETS`.
    """
    buckets = tunable("allpairs-screen-buckets")
    buckets = SCREEN_BUCKETS if buckets is None else buckets
    if (isinstance(buckets, bool) or not isinstance(buckets, (int, float))
            or int(buckets) != buckets or not 0 <= buckets <= MAX_SCREEN_BUCKETS):
        raise ValueError(f"swdask.allpairs-screen-buckets must be a whole number from 0 (no "
                         f"screen) to {MAX_SCREEN_BUCKETS:,}, got {buckets!r}")
    return int(buckets)


@dataclass(frozen=True)
class QgramFilter:
    """Shared q-grams a pair needs to reach identity ``t`` in global mode: the pre-filter.

    Parameters
    ----------
    q : int
        The q-gram length.
    threshold : fractions.Fraction
        ``t`` (above 0).
    base : int
        The alphabet size (q-gram codes are numbers in this base).
    unknown : int
        The code never counted as an identity (``N``/``X``): q-grams holding it are left
        out of the counts.
    buckets : int
        Width of the screen's token vectors; 0: no screen, every pair merged.

    Notes
    -----
    Identity is ``M / C``: ``M`` identity columns (two equal codes other than the
    unknown) of the alignment's ``C`` columns, gap columns included.  Let ``A`` be a
    global alignment of ``x`` (length ``m``) and ``y`` (length ``n``) with ``M >= t*C``
    and ``e = C - M`` non-identity columns (``X`` aligned ones, mismatches or pairs with
    the unknown, and ``G`` gap columns, ``e = X + G``).

    *At most* ``E = floor((1 - t)(m + n) / (1 + t))`` *non-identity columns.*  Every
    residue is in one column: ``m + n = 2M + 2X + G = 2M + X + e >= 2M + e``; with
    ``M >= t(M + e)``, ``M >= t*e / (1 - t)`` (``t < 1``), so
    ``m + n >= e(1 + t) / (1 - t)``; ``e`` is whole.  (``t = 1`` gives ``e = 0``.)  This
    is tighter than ``(1 - t)(m + n) / (2t)``, since ``1 + t >= 2t``.

    *q-gram lemma, with multiplicity.*  Call a window ``x[i:i+q]`` intact when its ``q``
    residues lie in ``q`` consecutive columns of ``A`` that are all identity columns.
    Then ``y`` holds the same ``q`` residues at consecutive positions ``y[j:j+q]``
    (each identity column takes one residue of each), none of them the unknown code,
    and ``i -> j`` is one to one (``A`` is monotone).  A window is broken only by a
    non-identity column between the columns of its first and its last residue; a column
    holding ``x[p]`` lies in at most ``q`` windows (those containing ``p``), a column
    between ``x[p]`` and ``x[p+1]`` in at most ``q - 1``.  So at least
    ``m - q + 1 - q*e`` windows of ``x`` are intact, and they are matched one to one to
    equal windows of ``y`` without the unknown: for each q-gram ``w``, the intact
    windows reading ``w`` are at most ``min(c_x(w), c_y(w))`` (``c`` counting the
    windows without the unknown).  Summing over ``w``, the shared count
    ``sum_w min(c_x(w), c_y(w)) >= m - q + 1 - q*e``; by symmetry also with ``n``, so

        ``shared >= need(m, n) = max(m, n) - q + 1 - q*E``.

    *No pair of the output is dropped.*  A pair is output only when its reported
    alignment reaches ``t``: that alignment then has ``e <= E``, and the pair shares at
    least ``need`` q-grams.  The filter drops only pairs sharing fewer.  Counting more
    than the sum of minima (hashing, a dot product) would only keep more pairs; the
    kernel counts the sum exactly, and its early stop (:func:`count_shared`) happens
    only once the count can no longer reach the need.  Leaving out windows with the
    unknown loses no intact window (an intact window's residues are identities).
    Where ``need <= 0`` nothing can be dropped and nothing is counted.

    Examples
    --------
    >>> f = QgramFilter(7, Fraction(97, 100), 5, 4)
    >>> f.need(1500, 1500), f.need(1400, 1500), f.need(10, 10)
    (1179, 1186, 4)
    """

    q: int
    threshold: Fraction
    base: int
    unknown: int
    buckets: int = 0

    @classmethod
    def for_job(cls, bound: IdentityBound, alphabet: Alphabet,
                q: int | None = None) -> QgramFilter | None:
        """The filter of an all-pairs job, or None where it cannot drop anything (local
        mode, whose alignments have no length constraint; identity threshold 0).

        Parameters
        ----------
        bound : IdentityBound
            The job's threshold and mode.
        alphabet : Alphabet
            The sequences' alphabet (its size and unknown code).
        q : int, optional
            Default: the tunable ``swdask.allpairs-qgram``, else :data:`QGRAM`.

        Raises
        ------
        ValueError
            ``q`` below 1, or so large that codes overflow (``size**q`` over 2**62).
        """
        if not filters(bound.mode, bound.threshold):
            return None
        buckets = screen_buckets()
        if q is None:
            q = tunable("allpairs-qgram") or QGRAM[alphabet.name]
        if isinstance(q, bool) or int(q) != q or q < 1 or alphabet.size ** int(q) > MAX_CODE:
            limit = int(math.log(MAX_CODE, alphabet.size))
            raise ValueError(f"the all-pairs q-gram length must be a whole number from 1 to "
                             f"{limit} for {alphabet.name}, got {q!r}")
        return cls(int(q), bound.threshold, alphabet.size, alphabet.unknown_code, int(buckets))

    def need(self, m: int, n: int) -> int:
        """``max(m, n) - q + 1 - q*floor((1 - t)(m + n) / (1 + t))`` in exact rational
        arithmetic: the reference of the kernels' integer formula
        (:func:`swdask.kernels.cpu.qgram.need_of`); 0 where it is below."""
        t = self.threshold
        edits = math.floor((1 - t) * (m + n) / (1 + t))
        return max(0, max(m, n) - self.q + 1 - self.q * edits)

    def needs(self, m: npt.ArrayLike, n: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """:meth:`need` of many pairs (numpy broadcasting), int64, at least 0."""
        num, den = self.threshold.numerator, self.threshold.denominator
        m = np.asarray(m, dtype=np.int64)
        n = np.asarray(n, dtype=np.int64)
        edits = ((den - num) * (m + n)) // (den + num)
        return np.maximum(np.maximum(m, n) - self.q + 1 - self.q * edits, 0)

    def codes(self, batch: SequenceBatch) -> tuple[np.ndarray, npt.NDArray[np.int64]]:
        """The sorted q-gram codes of each sequence of ``batch`` and their offsets
        (:func:`swdask.kernels.cpu.qgram.qgram_codes`); int32 where they fit (DNA up to
        q = 13), halving the memory and the merge's reads."""
        with backend.KERNEL_LOCK:  # a parallel Numba kernel: one at a time per process
            codes, offsets = qgram_codes(batch.residues, batch.offsets, self.q, self.base,
                                         self.unknown)
        if self.base ** self.q <= np.iinfo(np.int32).max:
            codes = codes.astype(np.int32)
        return codes, offsets

    def can_drop(self, q_len: npt.ArrayLike, s_len: npt.ArrayLike, runs: Runs) -> bool:
        """Whether some pair of ``runs`` may need a shared q-gram; if not, counting is
        waste (at low thresholds the need is 0 for every pair) and the filter steps aside.

        ``s_len`` ascending (a block of the length-sorted store): a run's pairs then need
        at most ``max(m, n_last) - q + 1 - q*floor((1 - t)(m + n_first) / (1 + t))``.
        Were it not sorted, the answer could only be a wrong False: the filter would
        step aside and keep every pair, never drop one.
        """
        q_list, s_lo, s_count = runs
        if len(q_list) == 0:
            return False
        num, den = self.threshold.numerator, self.threshold.denominator
        m = np.asarray(q_len, dtype=np.int64)[q_list]
        s_len = np.asarray(s_len, dtype=np.int64)
        first, last = s_len[s_lo], s_len[s_lo + s_count - 1]
        most = np.maximum(m, last) - self.q + 1 - self.q * (((den - num) * (m + first))
                                                            // (den + num))
        return bool(most.max() > 0)

    def shared(self, q_codes: tuple, s_codes: tuple, q_len: npt.ArrayLike,
               s_len: npt.ArrayLike, runs: Runs, device: str = "cpu") -> npt.NDArray[np.int32]:
        """Shared q-gram counts of the pairs of ``runs``, in run order (int32): exact
        where a pair reaches its need, -1 where it does not (the kernel's early stop,
        :func:`swdask.kernels.cpu.qgram.count_shared`, or on ``device="gpu"``
        :func:`swdask.kernels.cuda.qgram.count_shared_gpu`: the same counts).
        ``q_codes`` / ``s_codes`` are :meth:`codes` of the two blocks."""
        q_list, s_lo, s_count = runs
        pair_start = _starts(s_count)
        t = self.threshold
        arguments = (q_codes[0], q_codes[1], s_codes[0], s_codes[1],
                     np.asarray(q_len, dtype=np.int64), np.asarray(s_len, dtype=np.int64),
                     q_list, s_lo, pair_start, self.q, t.numerator, t.denominator)
        with backend.KERNEL_LOCK:  # one kernel at a time per process (all cores, or the GPU)
            if device == "gpu":
                from ...kernels.cuda.qgram import count_shared_gpu

                return count_shared_gpu(*arguments)[0]
            out = np.zeros(int(pair_start[-1]), np.int32)
            count_shared(*arguments, out)
        return out

    def kept(self, q_codes: tuple, s_codes: tuple, q_len: npt.ArrayLike, s_len: npt.ArrayLike,
             runs: Runs, device: str = "cpu", same_block: bool = False) -> npt.NDArray[np.int64]:
        """Positions, in run order, of the pairs of ``runs`` that share at least their
        need, counted on ``device``.  Ask :meth:`can_drop` first: where it says no, this
        counts for nothing.

        With :attr:`buckets`, a screen goes first: each sequence's q-gram tokens (its
        ``k``-th window reading ``w`` is token ``(w, k)``, so two sequences share
        exactly the sum of minima of tokens) are counted into ``buckets`` hashed
        buckets (:func:`~swdask.kernels.cpu.qgram.bucket_vectors`), and the two
        blocks' vectors multiplied, one matrix product per block pair.  A pair's dot
        product is at least its exact count, so where it is below the need the count is
        too, and the pair is dropped unmerged (:func:`~swdask.kernels.cpu.qgram.screen_runs`;
        where float32 could round, it is kept).  The pairs left are counted exactly:
        the screen changes the time, never the pairs kept.  ``same_block``: the query
        and subject blocks are one (one set of vectors).
        """
        q_list, s_lo, s_count = runs
        if self.buckets and device == "gpu":
            from ...kernels.cuda.qgram import screen_and_count_gpu, screen_available

            if screen_available():
                t = self.threshold
                with backend.KERNEL_LOCK:  # one kernel at a time per process (the GPU)
                    which, _, _ = screen_and_count_gpu(
                        q_codes[0], q_codes[1], s_codes[0], s_codes[1],
                        np.asarray(q_len, dtype=np.int64), np.asarray(s_len, dtype=np.int64),
                        q_list, s_lo, _starts(s_count), self.q, t.numerator, t.denominator,
                        self.buckets, same_block)
                return which
        which = None
        if self.buckets:
            which = self._screen(q_codes, s_codes, q_len, s_len, runs, same_block)
            runs = runs_of(*pairs_of(runs, which))
        kept = np.flatnonzero(self.shared(q_codes, s_codes, q_len, s_len, runs, device) >= 0)
        return kept if which is None else which[kept]

    def _screen(self, q_codes, s_codes, q_len, s_len, runs: Runs,
                same_block: bool) -> npt.NDArray[np.int64]:
        """Positions, in run order, of the pairs of ``runs`` that pass the screen (CPU,
        :func:`~swdask.kernels.cpu.qgram.screen_pairs`)."""
        q_list, s_lo, s_count = runs
        t = self.threshold
        with backend.KERNEL_LOCK:  # parallel Numba kernels and BLAS: all cores
            return screen_pairs(q_codes[0], q_codes[1], s_codes[0], s_codes[1],
                                np.asarray(q_len, dtype=np.int64),
                                np.asarray(s_len, dtype=np.int64), q_list, s_lo,
                                _starts(s_count), self.q, t.numerator, t.denominator,
                                self.buckets, same_block)

    def keep(self, q_codes: tuple, s_codes: tuple, q_len: npt.ArrayLike, s_len: npt.ArrayLike,
             runs: Runs, device: str = "cpu", same_block: bool = False) -> Runs:
        """The runs of the pairs of ``runs`` that share at least their need, in order
        (:meth:`kept`)."""
        return runs_of(*pairs_of(runs, self.kept(q_codes, s_codes, q_len, s_len, runs, device,
                                                 same_block)))


def _starts(s_count: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Where each run's pairs start in run order, and the total at the end."""
    starts = np.zeros(len(s_count) + 1, np.int64)
    np.cumsum(s_count, out=starts[1:])
    return starts


def pairs_of(runs: Runs, which: npt.ArrayLike | None = None,
             ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The ``(query, subject)`` index arrays of the pairs of ``runs`` at positions
    ``which`` in run order (default: every pair); :func:`runs_of` undoes it.

    Examples
    --------
    >>> runs = (np.array([0, 2]), np.array([3, 1]), np.array([2, 1]))
    >>> [x.tolist() for x in pairs_of(runs)], [x.tolist() for x in pairs_of(runs, [2])]
    ([[0, 0, 2], [3, 4, 1]], [[2], [1]])
    """
    q_list, s_lo, s_count = runs
    starts = _starts(s_count)
    which = np.arange(starts[-1]) if which is None else np.asarray(which, dtype=np.int64)
    run = np.searchsorted(starts, which, side="right") - 1
    return q_list[run], s_lo[run] + which - starts[run]


def runs_of(qi: npt.NDArray[np.int64], sj: npt.NDArray[np.int64]) -> Runs:
    """Pairs ``(qi[k], sj[k])``, in order, as runs of consecutive subjects of one query.

    Examples
    --------
    >>> [r.tolist() for r in runs_of(np.array([0, 0, 0, 2]), np.array([3, 4, 6, 1]))]
    [[0, 0, 2], [3, 6, 1], [2, 1, 1]]
    """
    qi = np.asarray(qi, dtype=np.int64)
    sj = np.asarray(sj, dtype=np.int64)
    if len(qi) == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty.copy(), empty.copy()
    starts = np.flatnonzero(np.concatenate([[True], (qi[1:] != qi[:-1]) | (sj[1:] != sj[:-1] + 1)]))
    counts = np.diff(np.concatenate([starts, [len(qi)]]))
    return qi[starts], sj[starts], counts.astype(np.int64)
