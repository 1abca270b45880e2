"""Traceback of one pair on the CPU: scores in linear memory, directions in one byte a cell.

:func:`traceback_pair` follows :mod:`swdask.kernels.cpu.reference` to the bit: the same
Gotoh recurrences and boundaries, the same end-cell rule, the same path tie rule and the
same coordinates.  It is the engine behind every full alignment swdask reports; the
score kernels find which pairs (and which end cells) deserve one.

Layout and memory
-----------------
The DP covers a rectangle of ``rows x cols`` cells: the whole ``m x n`` matrix, or, when
the caller already knows the end cell ``(end_i, end_j)`` from a score kernel, only the
prefix ``end_i x end_j`` (no cell after the end can lie on the path, and the values of a
prefix do not depend on anything outside it).

- Scores: int32 rows of ``cols + 1`` cells: H of the previous and the current row, F
  of the previous row, E, and "H before E" of the current row (see below), plus a
  subject profile of ``alphabet x (cols + 1)`` int32 and H of the last column
  (``rows + 1``): about ``(20 + 4 * alphabet) * cols`` bytes.  The scores are never
  kept, only the decisions taken.
- Directions: one uint8 per cell, C order, ``(rows + 1) x (cols + 1)`` bytes (row 0 and
  column 0 are never read; keeping them makes the index arithmetic that of the
  reference).  ``direction[i, j]`` holds the decision bits of
  :mod:`swdask.kernels.directions` (source of H, E extends, F extends), the ties resolved
  when they are written, with the reference's preferences.

Each row is swept four times so that only one short chain runs serially: (1) F and the
diagonal, which need only the row above; (2) E, whose recurrence runs along the row; (3) H;
(4) the direction bits.  Sweeps 1, 3 and 4 vectorise (about 0.3 GCUPS on one core, two to
three times one fused scalar sweep).

A pair therefore costs about one byte per cell; :data:`MAX_TRACEBACK_CELLS` (10^9, one
GB) bounds what :func:`align_codes` accepts.  Longer pairs belong to the tiled long-pair
aligner, which keeps only tile borders.  Scores are exact int32: :func:`align_codes`
refuses a pair whose scores could leave ``+-2^30`` (only absurdly long, narrow ones).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numba import njit

from ..directions import (
    NEG,
    SCORE_LIMIT,
    STATE_H,
    border_gap,
    cell_bound,
    decision,
    global_band,
    walk_step,
)
from ..paths import cigar_string, summarize_path
from . import prebuild
from .prebuild import read_only
from .reference import GLOBAL, LOCAL, OP_INS, OP_MATCH, SEMIGLOBAL, mode_code

if TYPE_CHECKING:
    import numpy.typing as npt

    from swdask.scoring import Scoring

#: Largest direction matrix (cells, i.e. bytes) that :func:`align_codes` builds.
MAX_TRACEBACK_CELLS = 1_000_000_000

#: The decisions and the walk of every traceback kernel, compiled for the CPU and inlined
#: into the kernels that call them (no compilation of their own).
decision_njit = njit(inline="always")(decision)
walk_step_njit = njit(inline="always")(walk_step)
border_gap_njit = njit(inline="always")(border_gap)

@njit(cache=True, nogil=True, inline="always")
def fill_profile(matrix: np.ndarray, subject: np.ndarray, cols: int, profile: np.ndarray) -> None:
    """Fill ``profile[a, j] = s(a, subject[j - 1])`` for ``j`` in ``1 .. cols`` (column 0
    is 0): a row of the DP then reads its substitution scores contiguously, and vectorises.
    Inlined into the kernels that call it (no compilation of its own)."""
    for a in range(matrix.shape[0]):
        profile[a, 0] = 0
        for j in range(cols):
            profile[a, j + 1] = matrix[a, subject[j]]


@njit(cache=True, nogil=True)
def subject_profile(matrix: np.ndarray, subject: np.ndarray, cols: int) -> npt.NDArray[np.int32]:
    """``profile[a, j] = s(a, subject[j - 1])`` for ``j`` in ``1 .. cols`` (column 0 is 0),
    a new int32 array (see :func:`fill_profile`)."""
    profile = np.empty((matrix.shape[0], cols + 1), dtype=np.int32)
    fill_profile(matrix, subject, cols, profile)
    return profile


@njit(cache=True, nogil=True, inline="always")
def row_best(h_row: np.ndarray, cols: int, row_max: int, i: int, best: int, best_i: int,
             best_j: int) -> tuple[int, int, int]:
    """The best cell after row ``i`` (maximum ``row_max``): a later row wins a tie only
    at a smaller column, the reference's column-major rule.  Returns
    ``(best, best_i, best_j)``.  Inlined into its callers (no compilation of its own)."""
    if row_max > 0 and row_max >= best:
        for j in range(1, cols + 1):
            if h_row[j] == row_max:
                if row_max > best or j < best_j:
                    best = row_max
                    best_i = i
                    best_j = j
                break
    return best, best_i, best_j

def traceback_pair(query: npt.NDArray[np.uint8], subject: npt.NDArray[np.uint8],
                   matrix: np.ndarray, gap_open: int, gap_extend: int, mode_code: int, end_i: int,
                   end_j: int, band: tuple[int, int] | None = None,
                   ) -> tuple[int, int, int, int, int, npt.NDArray[np.uint8]]:
    """Align one pair with affine gaps and trace the path back, as the reference does.

    Parameters
    ----------
    query, subject : numpy.ndarray of uint8
        Residue codes (rows of ``matrix`` for the query, columns for the subject).
    matrix : numpy.ndarray of int, 2-D
        Substitution scores indexed by codes (used as int32).
    gap_open, gap_extend : int
        A gap of k residues costs ``gap_open + k * gap_extend``.
    mode_code : int
        :data:`LOCAL` (0), :data:`GLOBAL` (1) or :data:`SEMIGLOBAL` (2).
    end_i, end_j : int
        The end cell when ``end_i >= 0`` (as found by a score kernel; only the prefix
        rectangle ``end_i x end_j`` is computed).  When ``end_i < 0`` the whole matrix is
        computed and the end cell chosen by the reference's rule.
    band : tuple of int, optional
        ``(lo, hi)``: compute only the cells of diagonals ``lo <= j - i <= hi``, the
        others at -inf (global mode, with the band of the pair's optimal score,
        :func:`swdask.kernels.directions.global_band`: the same path).  Default: every
        cell.

    Returns
    -------
    tuple
        ``(score, query_start, query_end, subject_start, subject_end, ops)``, with ``ops``
        a uint8 array of ``OP_MATCH``/``OP_INS``/``OP_DEL`` in forward order.

    Notes
    -----
    The work arrays are allocated here and the DP runs in :func:`_traceback_kernel`
    (which releases the GIL): an allocation inside a Numba kernel costs a compilation of
    its own, which a first run pays.  No size or range checks here: :func:`align_codes`
    makes them before calling.
    """
    args = _traceback_args(query, subject, matrix, gap_open, gap_extend, mode_code, end_i,
                           end_j, band)
    prebuild.wait("traceback")
    score, qs, qe, ss, se, k = _traceback_kernel(*args)
    return score, qs, qe, ss, se, args[-1][:k][::-1].copy()


def _traceback_args(query, subject, matrix, gap_open, gap_extend, mode_code, end_i, end_j,
                    band=None):
    """The arguments of :func:`_traceback_kernel` for :func:`traceback_pair`'s, work
    arrays included, of the same types whoever calls (one compilation)."""
    end_i, end_j = int(end_i), int(end_j)
    query, subject = read_only(query), read_only(subject)
    matrix = read_only(matrix, np.int32)
    rows, cols = (end_i, end_j) if end_i >= 0 else (query.shape[0], subject.shape[0])
    lo, hi = (-rows, cols) if band is None else (int(band[0]), int(band[1]))
    return (query, subject, matrix, int(gap_open), int(gap_extend), int(mode_code), end_i,
            end_j, lo, hi, np.empty((matrix.shape[0], cols + 1), dtype=np.int32),
            np.empty((5, cols + 1), dtype=np.int32), np.empty(rows + 1, dtype=np.int32),
            np.empty((rows + 1, cols + 1), dtype=np.uint8), np.empty(rows + cols, dtype=np.uint8))


@njit(cache=True, nogil=True)  # tracebacks of a worker's threads run at once
def _traceback_kernel(query, subject, matrix, gap_open, gap_extend, mode_code, end_i, end_j,
                      band_lo, band_hi, profile, rows_work, last_col, direction, ops_rev):
    """The DP and the walk of :func:`traceback_pair`, in arrays the caller allocates.

    ``profile``: int32[alphabet, cols + 1]; ``rows_work``: int32[5, cols + 1];
    ``last_col``: int32[rows + 1]; ``direction``: uint8[rows + 1, cols + 1];
    ``ops_rev``: uint8[rows + cols], where ``rows x cols`` is the rectangle computed; only
    the cells of diagonals ``band_lo <= j - i <= band_hi`` are, the others count as -inf
    (``(-rows, cols)``: all of them).
    Returns ``(score, query_start, query_end, subject_start, subject_end, k)``: the path is
    ``ops_rev[:k]`` reversed.

    Notes
    -----
    One thread, row by row: H, E and F in linear memory (int32), the decisions in a
    ``(rows + 1) x (cols + 1)`` uint8 direction matrix (see the module docstring).  The
    traceback then walks the direction bits from the end cell with the reference's state
    machine: state H follows bits 0-1, states E and F follow their extend bits.  Row 0 and
    column 0 end the walk: a global alignment emits its boundary gap there, a semiglobal
    one stops; a local one stops earlier, at its first cell with ``H == 0``.
    """
    m = query.shape[0]
    n = subject.shape[0]
    o = np.int32(gap_open)
    e = np.int32(gap_extend)
    oe = np.int32(o + e)
    local = mode_code == LOCAL
    glob = mode_code == GLOBAL
    if end_i >= 0:
        rows = end_i
        cols = end_j
    else:
        rows = m
        cols = n

    fill_profile(matrix, subject, cols, profile)
    h_prev = rows_work[0]
    h_cur = rows_work[1]
    f_row = rows_work[2]
    e_row = rows_work[3]
    # max(diagonal, F [, 0]) of the current row: H before E is known.
    h_no_e = rows_work[4]
    for j in range(cols + 1):
        h_prev[j] = 0
        h_cur[j] = 0
        f_row[j] = NEG
        e_row[j] = NEG
    # last_col: H of the last column, row by row: the semiglobal end may lie there.
    if glob:
        for j in range(1, cols + 1):
            h_prev[j] = -(o + j * e) if j <= band_hi else np.int32(NEG)
    last_col[0] = h_prev[cols]
    floor = np.int32(0) if local else np.int32(NEG)

    # Local end when the caller gave none: the first strict maximum in column-major order,
    # i.e. among equal scores the smallest j, then the smallest i.  Rows are swept in
    # increasing i, so a later row wins a tie only with a smaller j.  (0, 0) holds 0.
    best = np.int32(0)
    best_i = 0
    best_j = 0
    for i in range(1, rows + 1):
        prow = profile[query[i - 1]]
        # The row's band; the cell left of it is column 0 (its gap) or -inf.
        first = max(1, i + band_lo)
        last = min(cols, i + band_hi)
        h_left = np.int32(-(o + i * e)) if glob else np.int32(0)
        if first > 1:
            h_left = np.int32(NEG)
        h_cur[first - 1] = h_left
        h_no_e[first - 1] = h_left
        dir_row = direction[i]
        # The row in four sweeps, so that only the E recurrence runs serially.  Numba
        # widens int32 arithmetic to int64; the np.int32() casts keep the vector lanes
        # 32-bit (no value leaves the int32 range, see align_codes' range check).
        # 1. F (from the row above) and the diagonal: no dependency along the row.
        for j in range(first, last + 1):
            f_val = max(np.int32(f_row[j] - e), np.int32(h_prev[j] - oe))
            f_row[j] = f_val
            h_no_e[j] = max(max(np.int32(h_prev[j - 1] + prow[j]), f_val), floor)
        # 2. E(i,j) = max(E(i,j-1) - e, H(i,j-1) - o - e).  H(i,j-1) - o - e may be taken
        #    without E(i,j-1) in it: E(i,j-1) - o - e <= E(i,j-1) - e as o >= 0, so the
        #    value is the same and the chain is one subtraction and one max a cell.
        e_val = np.int32(NEG)
        for j in range(first, last + 1):
            e_val = max(np.int32(e_val - e), np.int32(h_no_e[j - 1] - oe))
            e_row[j] = e_val
        # 3. H; its maximum over the row serves the local end.
        row_max = np.int32(0)
        for j in range(first, last + 1):
            h = max(h_no_e[j], e_row[j])
            h_cur[j] = h
            row_max = max(row_max, h)
        # 4. The decision bits, with the reference's preferences: diagonal, then E, then
        #    F for H; inside a gap extend only when strictly better than opening.
        for j in range(first, last + 1):
            dir_row[j] = decision_njit(h_cur[j], e_row[j], f_row[j],
                                       np.int32(h_prev[j - 1] + prow[j]),
                                       np.int32(h_cur[j - 1] - oe), np.int32(h_prev[j] - oe),
                                       local)
        if local:
            best, best_i, best_j = row_best(h_cur, cols, row_max, i, best, best_i, best_j)
        if last < cols:  # right of the band: -inf for the row below
            h_cur[last + 1] = np.int32(NEG)
            f_row[last + 1] = np.int32(NEG)
        last_col[i] = h_cur[cols]
        h_prev, h_cur = h_cur, h_prev
    # h_prev now holds the last row computed (row 0 when rows == 0).

    if end_i >= 0:
        ei = end_i
        ej = end_j
        score = h_prev[cols]
    elif glob:
        ei = m
        ej = n
        score = h_prev[n]
    elif local:
        ei = best_i
        ej = best_j
        score = best
    else:
        # Semiglobal: row m (j < n) first, then column n, first strict maximum wins.
        ei = 0
        ej = 0
        score = np.int32(NEG)
        found = False
        for j in range(n):
            if not found or h_prev[j] > score:
                score = h_prev[j]
                ei = m
                ej = j
                found = True
        for i in range(m + 1):
            if not found or last_col[i] > score:
                score = last_col[i]
                ei = i
                ej = n
                found = True

    # Walk back.  The path has at most i + j operations; collect them in reverse.
    k = 0
    i = ei
    j = ej
    state = STATE_H
    while True:
        if state == STATE_H and (i == 0 or j == 0):
            if glob:
                k = border_gap_njit(i, j, ops_rev, k)
                i = 0
                j = 0
            break
        state, i, j, k, stop = walk_step_njit(direction[i, j], state, i, j, ops_rev, k)
        if stop:
            break
    return np.int64(score), i, ei, j, ej, k


#: Columns of :func:`path_counts`' table.
COUNT_MATCHES, COUNT_MISMATCHES, COUNT_GAP_OPENS, COUNT_COLUMNS = 0, 1, 2, 3


def path_counts(query_residues: npt.NDArray[np.uint8], query_at: npt.ArrayLike,
                subject_residues: npt.NDArray[np.uint8], subject_at: npt.ArrayLike,
                starts: npt.ArrayLike, paths: Sequence[npt.NDArray[np.uint8]],
                unknown_code: int) -> npt.NDArray[np.int64]:
    """The counts of :func:`~swdask.kernels.paths.summarize_path` (``matches``, ``mismatches``, ``gap_opens``,
    ``align_length``) of many paths at once, without their CIGARs: all-pairs counts every
    candidate's identity this way and describes only the paths that pass (about 1 in 7
    of the 16S set's; a description of each took 45 us a path).

    Parameters
    ----------
    query_residues, subject_residues : numpy.ndarray of uint8
        Residue codes of many sequences, concatenated.
    query_at, subject_at : array-like of int
        Where path ``k``'s query and subject begin in them.
    starts : array-like of int, shape (n, 2)
        ``(query_start, subject_start)`` of each path, in its own sequences.
    paths : sequence of numpy.ndarray of uint8
        Each path's operations in forward order.
    unknown_code : int
        As :func:`~swdask.kernels.paths.summarize_path`.

    Returns
    -------
    numpy.ndarray of int64, shape (n, 4)
        Columns :data:`COUNT_MATCHES`, :data:`COUNT_MISMATCHES`, :data:`COUNT_GAP_OPENS`
        and :data:`COUNT_COLUMNS`.
    """
    n = len(paths)
    lengths = np.fromiter((len(p) for p in paths), dtype=np.int64, count=n)
    bounds = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=bounds[1:])
    ops = np.concatenate(list(paths) + [np.zeros(0, np.uint8)]).astype(np.uint8, copy=False)
    starts = np.ascontiguousarray(np.asarray(starts, dtype=np.int64).reshape(-1, 2))
    counts = np.zeros((n, 4), np.int64)
    _count_paths(ops, bounds, query_residues, np.asarray(query_at, dtype=np.int64),
                 subject_residues, np.asarray(subject_at, dtype=np.int64), starts,
                 np.int64(unknown_code), counts)
    return counts


@njit(cache=True, nogil=True)
def _count_paths(ops, bounds, q_res, q_at, s_res, s_at, starts, unknown, counts):
    # summarize_path's rule, one pass a path: = when both codes are equal and known, X for
    # every other aligned column, a gap open where a run of I or of D begins.
    for k in range(bounds.shape[0] - 1):
        i = q_at[k] + starts[k, 0]
        j = s_at[k] + starts[k, 1]
        previous = -1
        for at in range(bounds[k], bounds[k + 1]):
            op = ops[at]
            if op == OP_MATCH:
                a = q_res[i]
                if a == s_res[j] and a != unknown:
                    counts[k, COUNT_MATCHES] += 1
                else:
                    counts[k, COUNT_MISMATCHES] += 1
                i += 1
                j += 1
            else:
                if op != previous:
                    counts[k, COUNT_GAP_OPENS] += 1
                if op == OP_INS:
                    i += 1
                else:
                    j += 1
            previous = op
        counts[k, COUNT_COLUMNS] = bounds[k + 1] - bounds[k]


def check_traceback_size(rows: int, cols: int) -> int:
    """Cells of the direction matrix of a ``rows x cols`` rectangle; raise when too many.

    Raises
    ------
    ValueError
        The direction matrix would exceed :data:`MAX_TRACEBACK_CELLS`.
    """
    cells = (int(rows) + 1) * (int(cols) + 1)
    if cells > MAX_TRACEBACK_CELLS:
        raise ValueError(
            f"pair of {rows} x {cols} residues needs {cells:,} traceback cells, over the "
            f"limit of {MAX_TRACEBACK_CELLS:,}; align it with the tiled long-pair aligner, "
            "or cut it into shorter regions"
        )
    return cells


def check_score_range(m: int, n: int, scoring: Scoring) -> None:
    """Refuse a pair whose cell scores could leave the kernels' exact int32 range.

    Every cell's ``|H|``, ``|E|``, ``|F|`` is at most ``(m + n) * (|s|max + o + e)`` (one
    column of the path costs at most that much), which must stay below ``2^30 - 2^20``.

    Raises
    ------
    ValueError
        The bound is exceeded.
    """
    bound = cell_bound(m, n, scoring.matrix, scoring.gap_open, scoring.gap_extend)
    if bound >= SCORE_LIMIT:
        raise ValueError(
            f"pair of {m} x {n} residues may reach scores of {bound:,}, beyond the exact "
            f"32-bit range of the traceback kernel ({SCORE_LIMIT:,})"
        )


def _codes(sequence, scoring) -> np.ndarray:
    if isinstance(sequence, (str, bytes)):
        return scoring.alphabet.encode(sequence)
    return np.ascontiguousarray(sequence, dtype=np.uint8)


def align_codes(query: np.ndarray | str, subject: np.ndarray | str, scoring: Scoring,
                mode: str = "local", end: tuple[int, int] | None = None,
                known_score: int | None = None) -> dict[str, Any]:
    """Align one pair and describe the alignment: the traceback entry point of the API.

    Parameters
    ----------
    query, subject : numpy.ndarray of uint8 or str
        Residue codes of ``scoring.alphabet`` (a ``str`` is encoded first).
    scoring : swdask.scoring.Scoring
        Matrix and gap penalties (a gap of k residues costs ``gap_open + k*gap_extend``).
    mode : {"local", "global", "semiglobal"}, default "local"
    end : tuple of int, optional
        ``(query_end, subject_end)`` of the end cell, when a score kernel already found
        it: only the prefix rectangle is computed.  Default None: the whole matrix, the
        end chosen by the reference's rule.  A global end must be ``(m, n)``, a
        semiglobal one must lie on row ``m`` or column ``n``.
    known_score : int, optional
        The pair's optimal score, from a score kernel.  In global mode only the band of
        diagonals its optimal paths can visit is computed
        (:func:`swdask.kernels.directions.global_band`): the same alignment, fewer cells.
        Ignored in the other modes.

    Returns
    -------
    dict
        ``score``, ``query_start``, ``query_end``, ``subject_start``, ``subject_end``
        (0-based, half-open), ``ops`` (uint8 array), ``cigar`` (str), ``matches``,
        ``mismatches``, ``gap_opens``, ``align_length`` and ``identity``
        (``matches / align_length``, 0.0 for an empty alignment).

    Raises
    ------
    ValueError
        Unknown mode, an end outside the matrix or not allowed by the mode, a direction
        matrix over :data:`MAX_TRACEBACK_CELLS` cells, or scores that could leave the
        int32 range (see :func:`check_score_range`).

    Examples
    --------
    >>> from swdask.scoring import Scoring
    >>> r = align_codes("TTACGTAA", "ACGTACGT", Scoring(alphabet="dna"))
    >>> r["score"], r["query_start"], r["query_end"], r["cigar"]
    (10, 2, 7, '5=')
    """
    code = mode_code(mode)
    q = _codes(query, scoring)
    s = _codes(subject, scoring)
    m, n = q.shape[0], s.shape[0]
    if end is None:
        end_i, end_j = -1, -1
        check_traceback_size(m, n)
    else:
        end_i, end_j = (int(x) for x in end)
        if not (0 <= end_i <= m and 0 <= end_j <= n):
            raise ValueError(f"end {(end_i, end_j)} lies outside the {m} x {n} matrix")
        if code == GLOBAL and (end_i, end_j) != (m, n):
            raise ValueError(f"a global alignment ends at {(m, n)}, not {(end_i, end_j)}")
        if code == SEMIGLOBAL and end_i != m and end_j != n:
            raise ValueError(
                f"a semiglobal alignment ends on row {m} or column {n}, not at {(end_i, end_j)}"
            )
        check_traceback_size(end_i, end_j)
    check_score_range(m, n, scoring)
    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    band = None
    if known_score is not None and code == GLOBAL:
        (lo,), (hi,) = global_band([m], [n], [int(known_score)], matrix, scoring.gap_open,
                                   scoring.gap_extend)
        band = (int(lo), int(hi))
    score, qs, qe, ss, se, ops = traceback_pair(
        q, s, matrix, scoring.gap_open, scoring.gap_extend, code, end_i, end_j, band
    )
    return describe(q, s, score, (qs, ss), (qe, se), ops, scoring.alphabet.unknown_code)


def describe(query: npt.NDArray[np.uint8], subject: npt.NDArray[np.uint8], score: int,
             start: tuple[int, int], end: tuple[int, int], ops: npt.NDArray[np.uint8],
             unknown_code: int) -> dict[str, Any]:
    """The dict of :func:`align_codes` for a path found by any traceback kernel (this
    module's or the GPU's, :func:`swdask.kernels.cuda.traceback.trace_paths`).

    Parameters
    ----------
    query, subject : numpy.ndarray of uint8
        The whole sequences' codes.
    score : int
    start, end : tuple of int
        ``(query, subject)`` positions where the path starts and ends (0-based, the end
        exclusive).
    ops : numpy.ndarray of uint8
        The path, in forward order.
    unknown_code : int
        As :func:`~swdask.kernels.paths.summarize_path`.

    Returns
    -------
    dict
        As :func:`align_codes`.
    """
    cigar, matches, mismatches, gap_opens, length = summarize_path(
        query, subject, start[0], start[1], ops, unknown_code
    )
    return {
        "score": int(score),
        "query_start": int(start[0]),
        "query_end": int(end[0]),
        "subject_start": int(start[1]),
        "subject_end": int(end[1]),
        "ops": ops,
        "cigar": cigar_string(cigar),
        "matches": int(matches),
        "mismatches": int(mismatches),
        "gap_opens": int(gap_opens),
        "align_length": int(length),
        "identity": matches / length if length else 0.0,
    }


def rescore(query: Sequence[int] | np.ndarray, subject: Sequence[int] | np.ndarray,
            query_start: int, subject_start: int, ops: Iterable[int],
            matrix: Sequence[Sequence[int]] | np.ndarray, gap_open: int, gap_extend: int) -> int:
    """Score of a path: substitutions minus ``gap_open + k * gap_extend`` per gap run.

    Parameters
    ----------
    query, subject : sequence of int
        The whole sequences' codes.
    query_start, subject_start : int
        Where the path starts (0-based).
    ops : iterable of int
        ``OP_MATCH``/``OP_INS``/``OP_DEL`` in forward order.
    matrix : 2-D array-like of int
    gap_open, gap_extend : int

    Returns
    -------
    int
        The path's score.  A run of ``I`` next to a run of ``D`` is two gaps.
    """
    score = 0
    i, j = int(query_start), int(subject_start)
    previous = None
    for op in ops:
        op = int(op)
        if op == OP_MATCH:
            score += int(matrix[query[i]][subject[j]])
            i += 1
            j += 1
        else:
            if op != previous:
                score -= gap_open
            score -= gap_extend
            if op == OP_INS:
                i += 1
            else:
                j += 1
        previous = op
    return score


def _prebuild_examples():
    """``{name: (kernel, arguments)}``: tiny calls of the kernels of this module with the
    argument types of every real call (see :mod:`swdask.kernels.cpu.prebuild`)."""
    codes = np.zeros(2, np.uint8)
    matrix = np.eye(2, dtype=np.int32)
    return {
        "traceback": (_traceback_kernel,
                      _traceback_args(codes, codes, matrix, 1, 1, LOCAL, -1, -1)),
    }
