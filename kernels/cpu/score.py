"""Inter-sequence score-only kernels for the CPU: many subjects per vector, all cores.

Layout
------
Subjects of similar length (the store sorts them) are taken a vector at a time; lane
``k`` of a vector holds subject ``k`` of the group.  For each group a *subject profile*
``sprof[j, a, k] = matrix[a, subject_k[j]]`` is built once and reused for every query,
so the inner loop reads one contiguous vector per cell (Rognes' SWIPE arrangement,
with the profile on the subject side because the queries are the many-times-reused
axis here).  Columns past a lane's end get a strongly negative pad score.

Each DP column is swept by :data:`swdask.kernels.cpu.simd.column_sweep` in vector IR.
Local scores run first in saturating 8-bit lanes (32 per AVX2 register, the profile
biased by ``-min(matrix)``); pairs that may have saturated are recomputed in 16-bit lanes
(16 per register), and those that saturate again in 32-bit lanes (8 per register), so
every score is exact.  When only a few small pairs saturate and the wider kernel is not
loaded in the process yet, the traceback kernel (exact int32, the same end rule) rescores
them instead (:func:`_rescore_exactly`): a first search then compiles one score kernel,
not two.  Global and semiglobal scores (negative and unbounded below) run in 32-bit lanes,
in a kernel of their own.  On AVX2 the 8-bit profile columns are built with byte shuffles
(:data:`swdask.kernels.cpu.simd.profile_u8`).

Ends follow the reference rule (smallest subject end, then smallest query end): columns
are swept in order and a new best is taken only when strictly greater; the query end is
the first row of that column holding the new best.

Threads: the kernels are plain ``@njit(nogil=True)`` functions that Python threads run
at once (Numba's thread count, ``numba.set_num_threads``), each taking groups one at a
time from a shared atomic counter, longest groups first.  A ``parallel=True`` (prange)
kernel took 8.5-9.7 s to compile on 2 cores, a plain one 3.4-4.5 s, for the same scoring
speed.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numba
import numpy as np
from numba import njit

from ..directions import NEG, SCORE_LIMIT, global_band
from . import prebuild
from .prebuild import read_only
from .reference import GLOBAL, LOCAL, mode_code
from .simd import HAS_AVX2, LANES, column_sweep, first_rows, next_index, profile_u8
from .threads import kernel_threads
from .traceback import traceback_pair

if TYPE_CHECKING:
    import numpy.typing as npt

INT16_MAX = np.iinfo(np.int16).max
#: Most cells (all pairs together) that :func:`_rescore` takes instead of a wider kernel
#: that is not loaded yet: about 0.1 s on one core (the traceback kernel's 0.3-0.45 GCUPS,
#: one Zen 3 core), against over a second to compile the 16-bit kernel.
EXACT_RESCORE_CELLS = 50_000_000
#: Largest pair (cells, i.e. bytes of its direction matrix) that :func:`_rescore` takes.
EXACT_PAIR_CELLS = 1 << 24
#: Build 8-bit profile columns with AVX2 byte shuffles (else portable scalar code).
USE_SHUFFLE = HAS_AVX2


@njit(boundscheck=False, nogil=True, inline="always")
def _group_lengths(g, s_off, s_idx, lengths):
    """``(first, count, n_max)`` of group ``g``: its first column, its number of
    subjects and its longest subject; ``lengths[k]`` of every lane (0 past ``count``).
    Inlined into the kernels."""
    lanes = lengths.shape[0]
    first = g * lanes
    count = min(lanes, s_idx.shape[0] - first)
    n_max = 0
    for k in range(lanes):
        lengths[k] = 0
        if k < count:
            s = s_idx[first + k]
            lengths[k] = s_off[s + 1] - s_off[s]
            n_max = max(n_max, lengths[k])
    return first, count, n_max


@njit(boundscheck=False, nogil=True, inline="always")
def _next_group(order, counter, s_off, s_idx, lengths):
    """:func:`_group_lengths` of the next group this thread takes,
    ``order[next_index(counter)]``; ``count`` 0 once ``order`` has run out.  Inlined into
    the kernels."""
    t = next_index(counter)
    if t >= order.shape[0]:
        return 0, 0, 0
    return _group_lengths(order[t], s_off, s_idx, lengths)


@njit(boundscheck=False, nogil=True, inline="always")
def _query_rows(q_res, q_off, qi, hcol, ecol):
    """``(query, m, hc, ec)``: query ``qi`` and the first ``m`` rows of the work columns.
    Inlined into the kernels."""
    query = q_res[q_off[qi]:q_off[qi + 1]]
    m = query.shape[0]
    return query, m, hcol[:m], ecol[:m]


@njit(boundscheck=False, nogil=True, inline="always")
def _store_group(qi, first, count, best, best_i, best_j, scores, q_end, s_end):
    """Write the group's best cells to columns ``first ..`` of query ``qi``'s outputs.
    Inlined into the kernels."""
    for k in range(count):
        scores[qi, first + k] = best[k]
        q_end[qi, first + k] = best_i[k]
        s_end[qi, first + k] = best_j[k]


@njit(boundscheck=False, nogil=True, inline="always")
def _profile_shuffled(first, n_max, s_res, s_off, s_idx, shuffle_tables, sprof, lengths,
                      column_codes):
    """The group's 8-bit subject profile, ``sprof[:n_max]``, built with byte shuffles."""
    for j in range(n_max):
        for k in range(lengths.shape[0]):
            # Code 31 past a subject's end: its table entries hold the pad score.
            column_codes[k] = s_res[s_off[s_idx[first + k]] + j] if j < lengths[k] else 31
        profile_u8(shuffle_tables, column_codes, sprof[j])


@njit(boundscheck=False, nogil=True, inline="always")
def _profile_scalar(first, n_max, s_res, s_off, s_idx, matrix, pad, sprof, lengths):
    """The group's subject profile, ``sprof[:n_max]``, by scalar loops; ``pad`` past each
    subject's end."""
    for j in range(n_max):
        for k in range(lengths.shape[0]):
            if j < lengths[k]:
                code = s_res[s_off[s_idx[first + k]] + j]
                for a in range(matrix.shape[0]):
                    sprof[j, a, k] = matrix[a, code]
            else:
                for a in range(matrix.shape[0]):
                    sprof[j, a, k] = pad


@njit(boundscheck=False, nogil=True, cache=True)
def _local_kernel(q_res, q_off, s_res, s_off, s_idx, matrix, gap_open, gap_extend, floor,
                  pad, sentinel, lowest, shuffle_tables, order, counter, sprof, hcol, ecol,
                  out, target, first_row, state, column_codes, scores, q_end, s_end):
    """Local scores and ends of every query against the groups this thread takes.

    ``matrix``'s dtype (uint8, int16 or int32) picks the score width; the work arrays'
    second axis is the lanes of that width (:data:`swdask.kernels.cpu.simd.LANES`).
    ``floor``, ``pad`` (the profile score past a subject's end), ``sentinel`` and
    ``lowest`` (the dtype's minimum) are the width's values, see :func:`_width_constants`.
    Subjects are taken in the order ``s_idx`` in groups of ``lanes``; results go to
    column ``c`` of the outputs for subject ``s_idx[c]``.  Groups are taken one at a
    time, ``order[next_index(counter)]``, until ``order`` runs out: several threads run
    this at once on one ``counter`` (the GIL is released), each with its own work arrays
    (``sprof``: [longest subject, alphabet, lanes]; ``hcol``, ``ecol``: [longest query,
    lanes]; ``out``: [2, lanes]; ``target``: [lanes]; ``first_row``: int32[lanes];
    ``state``: int64[4, lanes]; ``column_codes``: uint8[lanes]).  The caller allocates
    them: an allocation here would cost Numba a compilation of its own, which a first run
    pays.  ``shuffle_tables`` (uint8[alphabet, 32], see
    :func:`swdask.kernels.cpu.simd.profile_u8`) builds 8-bit profile columns with byte
    shuffles; None means scalar code.
    """
    dtype = matrix.dtype
    lanes = hcol.shape[1]
    oe = dtype.type(gap_open + gap_extend)
    ge = dtype.type(gap_extend)
    fl = dtype.type(floor)
    zero = dtype.type(0)
    lengths, best, best_i, best_j = state[0], state[1], state[2], state[3]
    while True:
        first, count, n_max = _next_group(order, counter, s_off, s_idx, lengths)
        if count == 0:
            break
        # Built once per group, read by every query.  Whether ``shuffle_tables`` is None
        # is settled when Numba compiles the kernel, which keeps one of the two ways:
        # the scalar loops cost the 8-bit kernel almost a second more to compile.
        if shuffle_tables is None:
            _profile_scalar(first, n_max, s_res, s_off, s_idx, matrix, pad, sprof, lengths)
        else:
            _profile_shuffled(first, n_max, s_res, s_off, s_idx, shuffle_tables, sprof,
                              lengths, column_codes)
        for qi in range(q_off.shape[0] - 1):
            query, m, hc, ec = _query_rows(q_res, q_off, qi, hcol, ecol)
            for i in range(m):
                for k in range(lanes):
                    hc[i, k] = 0
                    ec[i, k] = lowest
            for k in range(lanes):
                best[k], best_i[k], best_j[k] = 0, 0, 0
            for j in range(n_max):
                column_sweep(query, sprof[j], hc, ec, zero, zero, oe, ge, fl, out)
                improved = False
                for k in range(count):
                    if out[0, k] > best[k]:
                        improved = True
                if improved:
                    # First row of this column holding the new best, all lanes at once.
                    for k in range(lanes):
                        target[k] = out[0, k] if k < count and out[0, k] > best[k] else sentinel
                    first_rows(hc, target, first_row)
                    for k in range(count):
                        if out[0, k] > best[k]:
                            best[k], best_i[k], best_j[k] = out[0, k], first_row[k] + 1, j + 1
            _store_group(qi, first, count, best, best_i, best_j, scores, q_end, s_end)


@njit(boundscheck=False, nogil=True, cache=True)
def _end_kernel(q_res, q_off, s_res, s_off, s_idx, matrix, gap_open, gap_extend, mode, floor,
                pad, lowest, order, counter, sprof, hcol, ecol, out, state, scores, q_end,
                s_end):
    """Global or semiglobal (``mode``) scores and ends: :func:`_local_kernel`'s scheme in
    32-bit lanes (``matrix`` int32), where the end lies on the last row or column.  A
    kernel of its own so that a local search, the common case, compiles none of this."""
    dtype = matrix.dtype
    lanes = hcol.shape[1]
    oe = dtype.type(gap_open + gap_extend)
    ge = dtype.type(gap_extend)
    fl = dtype.type(floor)
    lengths, best, best_i, best_j = state[0], state[1], state[2], state[3]
    while True:
        first, count, n_max = _next_group(order, counter, s_off, s_idx, lengths)
        if count == 0:
            break
        _profile_scalar(first, n_max, s_res, s_off, s_idx, matrix, pad, sprof, lengths)
        for qi in range(q_off.shape[0] - 1):
            query, m, hc, ec = _query_rows(q_res, q_off, qi, hcol, ecol)
            for i in range(m):
                for k in range(lanes):
                    hc[i, k] = -(gap_open + (i + 1) * gap_extend) if mode == GLOBAL else 0
                    ec[i, k] = lowest
            for k in range(lanes):
                if mode == GLOBAL:  # what a subject of length 0 keeps
                    best[k] = -(gap_open + m * gap_extend) if m > 0 else 0
                    best_i[k], best_j[k] = m, 0
                else:  # semiglobal: cell (m, 0) is the first candidate; (0, 0) when n = 0
                    best[k] = 0
                    best_i[k], best_j[k] = (m, 0) if lengths[k] > 0 else (0, 0)
            for j in range(n_max):
                hdiag0 = 0
                hup0 = 0
                if mode == GLOBAL:
                    hdiag0 = 0 if j == 0 else -(gap_open + j * gap_extend)
                    hup0 = -(gap_open + (j + 1) * gap_extend)
                column_sweep(query, sprof[j], hc, ec, dtype.type(hdiag0), dtype.type(hup0),
                             oe, ge, fl, out)
                if mode == GLOBAL:
                    for k in range(count):
                        if j + 1 == lengths[k]:
                            best[k], best_i[k], best_j[k] = out[1, k], m, j + 1
                else:
                    for k in range(count):
                        if j + 1 < lengths[k]:
                            if m > 0 and out[1, k] > best[k]:
                                best[k], best_i[k], best_j[k] = out[1, k], m, j + 1
                        elif j + 1 == lengths[k]:
                            for i in range(m):  # column n, rows in order
                                if hc[i, k] > best[k]:
                                    best[k], best_i[k], best_j[k] = hc[i, k], i + 1, j + 1
            _store_group(qi, first, count, best, best_i, best_j, scores, q_end, s_end)


def _width_constants(bits, code, matrix):
    """``(matrix as the width's dtype, floor, pad, sentinel, limit)`` for a score width.

    ``limit``: a local score at or above it may have saturated and is recomputed in the
    next width (None: exact).
    """
    if bits == 8:
        bias = -int(matrix.min())
        return (matrix + bias).astype(np.uint8), bias, 0, 255, 255 - bias
    dtype = np.int16 if bits == 16 else np.int32
    lowest = int(np.iinfo(dtype).min)
    floor = 0 if code == LOCAL else lowest
    limit = INT16_MAX if bits == 16 else None
    return matrix.astype(dtype), floor, lowest // 2, lowest, limit


def _widths(matrix, gap_open, gap_extend, code):
    """Score widths to try, narrowest first: 8 and 16 bits only for local scores, and
    only while the penalties and the pad stay far inside the type."""
    if code != LOCAL:
        return [32]
    widths = []
    span = int(matrix.max()) - int(matrix.min())
    if int(matrix.min()) < 0 and span < 64 and gap_open + gap_extend < 255:
        widths.append(8)
    if np.abs(matrix).max() < 1000 and gap_open + gap_extend < 8000:
        widths.append(16)
    return widths + [32]


def _run_width(bits, q_res, q_off, s_res, s_off, subjects, matrix, gap_open, gap_extend,
               code):
    kernel, arguments, outputs, limit, n_groups = _width_call(
        bits, q_res, q_off, s_res, s_off, subjects, matrix, gap_open, gap_extend, code)
    if code == LOCAL:
        prebuild.wait(f"local{bits}")

    def work():
        kernel(*arguments())  # each thread its own work arrays

    _run_threads(work, min(kernel_threads(), n_groups))
    return (*outputs, limit)


def _width_call(bits, q_res, q_off, s_res, s_off, subjects, matrix, gap_open, gap_extend,
                code):
    """What :func:`_run_width` runs: ``(kernel, arguments, (scores, query_end,
    subject_end), limit, groups)``, where ``arguments()`` gives a thread's arguments of
    ``kernel`` (the shared ones and its own work arrays)."""
    table, floor, pad, sentinel, limit = _width_constants(bits, code, matrix)
    shuffle_tables = None
    if bits == 8 and USE_SHUFFLE and table.shape[0] <= 31:
        shuffle_tables = np.full((table.shape[0], 32), pad, np.uint8)
        shuffle_tables[:, :table.shape[1]] = table
    shape = (q_off.shape[0] - 1, subjects.shape[0])
    outputs = (np.zeros(shape, np.int32), np.zeros(shape, np.int32), np.zeros(shape, np.int32))
    lanes = LANES[bits]
    dtype = table.dtype
    lowest = int(np.iinfo(dtype).min)
    order, longest = _group_order(s_off, subjects, lanes)
    counter = np.zeros(1, np.int64)
    max_m = max(1, int(np.diff(q_off).max(initial=0)))
    head = (q_res, q_off, s_res, s_off, subjects, table, int(gap_open), int(gap_extend))

    def arguments():
        sprof = np.empty((longest, table.shape[0], lanes), dtype)
        hcol, ecol = np.empty((max_m, lanes), dtype), np.empty((max_m, lanes), dtype)
        out, state = np.zeros((2, lanes), dtype), np.zeros((4, lanes), np.int64)
        column_codes = np.zeros(lanes, np.uint8)
        if code == LOCAL:
            return (*head, floor, pad, sentinel, lowest, shuffle_tables, order, counter, sprof,
                    hcol, ecol, out, np.zeros(lanes, dtype), np.zeros(lanes, np.int32), state,
                    column_codes, *outputs)
        return (*head, code, floor, pad, lowest, order, counter, sprof, hcol, ecol, out, state,
                *outputs)

    kernel = _local_kernel if code == LOCAL else _end_kernel
    return kernel, arguments, outputs, limit, order.shape[0]


def _group_order(s_off, subjects, lanes):
    """Groups of ``lanes`` subjects, longest first (a group costs its longest subject's
    length times the queries, and starting with the dearest keeps threads from finishing
    one long group alone at the end), and the longest subject."""
    n_groups = -(-subjects.shape[0] // lanes)
    lengths = np.zeros(n_groups * lanes, np.int64)
    lengths[:subjects.shape[0]] = s_off[subjects + 1] - s_off[subjects]
    longest = lengths.reshape(n_groups, lanes).max(axis=1) if n_groups else lengths[:0]
    return np.argsort(-longest, kind="stable").astype(np.int64), int(longest.max(initial=0))


def _run_threads(work, threads):
    """Run ``work()`` on ``threads`` threads at once (this one included): the kernels
    release the GIL and share their work through an atomic counter."""
    if threads <= 1:
        work()
        return
    errors = []

    def guarded():
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            errors.append(exc)

    helpers = [threading.Thread(target=guarded, name=f"swdask-score-{k}", daemon=True)
               for k in range(threads - 1)]
    for t in helpers:
        t.start()
    guarded()
    for t in helpers:
        t.join()
    if errors:
        raise errors[0]


def banded_global_scores(q_res: npt.NDArray[np.uint8], q_off: npt.NDArray[np.int64],
                         s_res: npt.NDArray[np.uint8], s_off: npt.NDArray[np.int64],
                         pairs_q: npt.ArrayLike, pairs_s: npt.ArrayLike,
                         lowest: npt.ArrayLike, matrix: np.ndarray, gap_open: int,
                         gap_extend: int) -> npt.NDArray[np.int64]:
    """Global scores of the pairs ``(pairs_q[k], pairs_s[k])`` that reach ``lowest[k]``,
    computed only in the band of diagonals a path of that score can visit.

    Every optimal path of a pair scoring at least ``lowest`` lies in the band that
    :func:`swdask.kernels.directions.global_band` gives for ``lowest`` (a higher score only
    narrows it), so the band's best path is optimal and its score exact; a pair below
    ``lowest`` gets its band's best score, which is below ``lowest`` too.  All-pairs keeps
    the pairs reaching its identity bound this way, scoring a tenth of their cells at 16S
    lengths and identity 0.97.

    Parameters
    ----------
    q_res, s_res : numpy.ndarray of uint8
    q_off, s_off : numpy.ndarray of int64
        As :func:`score_all`.
    pairs_q, pairs_s : array-like of int
        Query and subject of each pair.
    lowest : array-like of int
        The score each pair must reach to matter.
    matrix : numpy.ndarray of int
    gap_open, gap_extend : int

    Returns
    -------
    numpy.ndarray of int64
        The exact global score of each pair that reaches ``lowest``; below ``lowest``
        (not its score) for the others.
    """
    pairs_q = np.asarray(pairs_q, dtype=np.int64)
    pairs_s = np.asarray(pairs_s, dtype=np.int64)
    m = q_off[pairs_q + 1] - q_off[pairs_q]
    n = s_off[pairs_s + 1] - s_off[pairs_s]
    # Far bounds only widen the band to the whole matrix or narrow it to the corner's
    # diagonals: clipped, so that the band's integer arithmetic cannot overflow.
    lowest = np.clip(np.asarray(lowest, dtype=np.int64), -(1 << 40), 1 << 40)
    lo, hi = global_band(m, n, lowest, matrix, gap_open, gap_extend)
    out = np.zeros(len(pairs_q), np.int64)
    work = np.zeros(1, np.int64)  # the next pair to score, shared by the threads
    threads = max(1, min(kernel_threads(), len(pairs_q)))
    _run_threads(lambda: _banded_global(
        q_res, q_off, s_res, s_off, pairs_q, pairs_s, lo, hi,
        np.ascontiguousarray(matrix, dtype=np.int32), np.int64(gap_open + gap_extend),
        np.int64(gap_extend), work, out), threads)
    return out


@njit(cache=True, nogil=True)
def _banded_global(q_res, q_off, s_res, s_off, pairs_q, pairs_s, lo, hi, matrix, gap_oe,
                   gap_e, work, out):
    # Gotoh's global recurrences, row by row over the columns i + lo .. i + hi; H and F of
    # the row above in arrays, cells outside the band at -inf (NEG).
    neg = np.int64(NEG)
    while True:
        k = next_index(work)
        if k >= pairs_q.shape[0]:
            return
        q = q_res[q_off[pairs_q[k]]:q_off[pairs_q[k] + 1]]
        s = s_res[s_off[pairs_s[k]]:s_off[pairs_s[k] + 1]]
        m, n = q.shape[0], s.shape[0]
        h = np.full(n + 1, neg, np.int64)
        f = np.full(n + 1, neg, np.int64)
        h[0] = 0
        for j in range(1, min(n, hi[k]) + 1):
            h[j] = -(gap_oe + (j - 1) * gap_e)
        for i in range(1, m + 1):
            first = max(1, i + lo[k])
            last = min(n, i + hi[k])
            # The cell left of the band: column 0's leading gap, else -inf.
            left = -(gap_oe + (i - 1) * gap_e) if first == 1 else neg
            diag = h[first - 1]
            if first > 1:
                h[first - 1] = neg  # left the band: -inf for the rows below
                f[first - 1] = neg
            else:
                h[0] = left
            e = neg
            row = matrix[q[i - 1]]
            for j in range(first, last + 1):
                up = h[j]
                f_val = max(f[j] - gap_e, up - gap_oe)
                e = max(e - gap_e, left - gap_oe)
                value = max(diag + row[s[j - 1]], max(e, f_val))
                diag = up
                h[j] = value
                f[j] = f_val
                left = value
        out[k] = h[n]


def score_all(
    q_res: npt.NDArray[np.uint8], q_off: npt.NDArray[np.int64], s_res: npt.NDArray[np.uint8],
    s_off: npt.NDArray[np.int64], matrix: np.ndarray, gap_open: int, gap_extend: int,
    mode: str = "local", subjects: npt.NDArray[np.int64] | None = None,
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32]]:
    """Scores and end cells of every query against every subject.

    Parameters
    ----------
    q_res, s_res : numpy.ndarray of uint8
        Residue codes of all queries (subjects), concatenated.
    q_off, s_off : numpy.ndarray of int64
        Offsets into ``q_res`` (``s_res``): sequence ``i`` is ``res[off[i]:off[i+1]]``.
    matrix : numpy.ndarray of int
        Substitution scores by code.
    gap_open, gap_extend : int
        A gap of k residues costs ``gap_open + k * gap_extend``.
    mode : {"local", "global", "semiglobal"}, default "local"
    subjects : numpy.ndarray of int64, optional
        Indices of the subjects to score, in the order to group them (default: all, in
        stored order, which the store sorts by length).

    Returns
    -------
    scores, query_end, subject_end : numpy.ndarray of int32, shape (n_queries, n_subjects)
        Column ``c`` belongs to subject ``subjects[c]``; ends are exclusive (0-based
        half-open coordinates) and follow the reference kernel's tie rule.

    Notes
    -----
    Local scores run first in 8-bit lanes (32 subjects per AVX2 register), then the
    pairs that may have saturated in 16-bit lanes, then those in 32-bit lanes; global
    and semiglobal scores run in 32-bit lanes.
    """
    code = mode_code(mode)
    matrix = np.asarray(matrix)
    # Read-only views: one compiled kernel whether the arrays come from Arrow (read-only)
    # or from NumPy (see prebuild.read_only).
    q_res, s_res = read_only(q_res), read_only(s_res)
    q_off, s_off = read_only(q_off, np.int64), read_only(s_off, np.int64)
    if subjects is None:
        subjects = np.arange(s_off.shape[0] - 1, dtype=np.int64)
    subjects = read_only(subjects, np.int64)
    widths = _widths(matrix, gap_open, gap_extend, code)
    scores, q_end, s_end, limit = _run_width(widths[0], q_res, q_off, s_res, s_off, subjects,
                                             matrix, gap_open, gap_extend, code)
    for bits in widths[1:]:
        if limit is None or scores.size == 0:
            break
        redo = scores >= limit
        if not redo.any():
            break
        rows, cols = np.nonzero(redo)
        if _rescore_exactly(rows, cols, bits, q_off, s_off, subjects, matrix, gap_open,
                            gap_extend):
            _rescore(rows, cols, q_res, q_off, s_res, s_off, subjects, matrix, gap_open,
                     gap_extend, scores, q_end, s_end)
            break
        next_limit = None
        for qi in np.unique(rows):
            cols = np.flatnonzero(redo[qi])
            query = q_res[q_off[qi]:q_off[qi + 1]]
            *exact, next_limit = _run_width(bits, query, read_only([0, query.shape[0]], np.int64),
                                            s_res, s_off, subjects[cols], matrix, gap_open,
                                            gap_extend, code)
            scores[qi, cols], q_end[qi, cols], s_end[qi, cols] = (x[0] for x in exact)
        limit = next_limit
    return scores, q_end, s_end


def load_kernel(matrix: np.ndarray, gap_open: int, gap_extend: int,
                mode: str = "local") -> None:
    """Load (or compile) the kernel that :func:`score_all` runs first for this scoring.

    A tiny call of it: what follows then times the scoring alone.  The first call of a
    Numba kernel in a process also sets Numba up (about 0.3 to 0.7 s on 2 cores, a
    compilation on an empty cache), which a search's score pass used to count as kernel
    time: a 2-query search of Swiss-Prot 12k reported 2.4 GCUPS where the kernel runs
    at 15.
    """
    code = mode_code(mode)
    matrix = np.asarray(matrix)
    bits = _widths(matrix, gap_open, gap_extend, code)[0]
    codes, offsets = read_only(np.zeros(1, np.uint8)), read_only([0, 1], np.int64)
    kernel, arguments, *_ = _width_call(bits, codes, offsets, codes, offsets,
                                        read_only([0], np.int64), matrix, gap_open, gap_extend,
                                        code)
    if code == LOCAL:
        prebuild.wait(f"local{bits}")
    kernel(*arguments())


def _rescore_exactly(rows, cols, bits, q_off, s_off, subjects, matrix, gap_open, gap_extend):
    """Whether to rescore the pairs ``(rows, cols)`` that may have saturated with
    :func:`_rescore` rather than in ``bits``-bit lanes.

    Yes when the ``bits``-bit kernel is not loaded in this process yet and the pairs are
    few and small: at most :data:`EXACT_RESCORE_CELLS` cells in all, each pair's direction
    matrix at most :data:`EXACT_PAIR_CELLS` bytes, and scores safely inside int32.  A
    first search then compiles no second width of the score kernel (over a second of
    compilation) for the handful of pairs that score over 250 (true hits, self hits).
    """
    if _loaded(bits):
        return False
    m = (q_off[rows + 1] - q_off[rows]).astype(np.int64)
    n = (s_off[subjects[cols] + 1] - s_off[subjects[cols]]).astype(np.int64)
    cells = (m + 1) * (n + 1)
    worst = int(np.abs(matrix).max()) + int(gap_open) + int(gap_extend)
    return (int(cells.sum()) <= EXACT_RESCORE_CELLS and int(cells.max()) <= EXACT_PAIR_CELLS
            and (int((m + n).max()) + 1) * worst < SCORE_LIMIT)


def _loaded(bits) -> bool:
    """Whether this process has the local kernel of that width compiled or loaded."""
    dtype = numba.from_dtype(np.int16 if bits == 16 else np.int32)
    return any(sig[5].dtype == dtype for sig in _local_kernel.signatures)


def _rescore(rows, cols, q_res, q_off, s_res, s_off, subjects, matrix, gap_open, gap_extend,
             scores, q_end, s_end):
    """Exact local scores and ends of the pairs ``(rows, cols)``, written in place: the
    traceback kernel (int32, whole matrix, the reference's end rule; a search compiles
    it anyway), largest pairs first on the score kernel's threads."""
    table = np.ascontiguousarray(matrix, dtype=np.int32)
    m = q_off[rows + 1] - q_off[rows]
    n = s_off[subjects[cols] + 1] - s_off[subjects[cols]]
    order = np.argsort(-(m * n), kind="stable")
    counter = iter(order.tolist())
    lock = threading.Lock()

    def work():
        while True:
            with lock:
                k = next(counter, None)
            if k is None:
                return
            qi, c = int(rows[k]), int(cols[k])
            s = int(subjects[c])
            found = traceback_pair(q_res[q_off[qi]:q_off[qi + 1]], s_res[s_off[s]:s_off[s + 1]],
                                   table, gap_open, gap_extend, LOCAL, -1, -1)
            scores[qi, c], q_end[qi, c], s_end[qi, c] = found[0], found[2], found[4]

    _run_threads(work, min(kernel_threads(), order.shape[0]))


def _prebuild_examples():
    """``{name: (kernel, arguments)}``: a tiny call of the 8-bit local kernel with the
    argument types of every real call (see :mod:`swdask.kernels.cpu.prebuild`)."""
    codes = read_only(np.zeros(2, np.uint8))
    offsets = read_only([0, 2], np.int64)
    matrix = np.array([[1, -1], [-1, 1]], np.int32)
    kernel, arguments, *_ = _width_call(8, codes, offsets, codes, offsets,
                                        read_only([0], np.int64), matrix, 1, 1, LOCAL)
    return {"local8": (kernel, arguments())}
