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
every score is exact.  Global and semiglobal scores (negative and unbounded below) run
in 32-bit lanes.  On AVX2 the 8-bit profile columns are built with byte shuffles
(:data:`swdask.kernels.cpu.simd.profile_u8`).

Ends follow the reference rule (smallest subject end, then smallest query end): columns
are swept in order and a new best is taken only when strictly greater; the query end is
the first row of that column holding the new best.

Threads: groups are spread over Numba's threads (``numba.set_num_threads``) with dynamic
chunking, since groups of long subjects cost far more than groups of short ones.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from .reference import GLOBAL, LOCAL, mode_code
from .simd import HAS_AVX2, LANES, column_sweep, first_rows, profile_u8

INT16_MAX = np.iinfo(np.int16).max
#: Build 8-bit profile columns with AVX2 byte shuffles (else portable scalar code).
USE_SHUFFLE = HAS_AVX2


@njit(parallel=True, boundscheck=False, nogil=True, cache=True)
def _group_kernel(q_res, q_off, s_res, s_off, s_idx, matrix, gap_open, gap_extend, mode,
                  lanes, floor, pad, sentinel, shuffle_tables, scores, q_end, s_end):
    """Score every query against every subject, ``lanes`` subjects per vector.

    ``matrix``'s dtype (uint8, int16 or int32) picks the score width and must agree with
    ``lanes`` (:data:`swdask.kernels.cpu.simd.LANES`); ``floor``, ``pad`` (the profile
    score past a subject's end) and ``sentinel`` are the width's values, see
    :func:`_width_constants`.  Subjects are taken in the order ``s_idx`` in groups of
    ``lanes``; results go to column ``c`` of the outputs for subject ``s_idx[c]``.
    ``shuffle_tables`` (uint8[alphabet, 32], see :func:`swdask.kernels.cpu.simd.profile_u8`)
    builds 8-bit profile columns with byte shuffles; an empty array means scalar code.
    """
    dtype = matrix.dtype
    n_query = q_off.shape[0] - 1
    n_subject = s_idx.shape[0]
    n_groups = (n_subject + lanes - 1) // lanes
    alpha = matrix.shape[0]
    lowest = np.iinfo(dtype).min
    oe = gap_open + gap_extend
    max_m = 1
    for qi in range(n_query):
        max_m = max(max_m, q_off[qi + 1] - q_off[qi])
    for g in prange(n_groups):
        first = g * lanes
        count = min(lanes, n_subject - first)
        lengths = np.zeros(lanes, np.int64)
        n_max = 0
        for k in range(count):
            s = s_idx[first + k]
            lengths[k] = s_off[s + 1] - s_off[s]
            n_max = max(n_max, lengths[k])
        # Subject profile: built once per group, read by every query.
        sprof = np.empty((n_max, alpha, lanes), dtype)
        if shuffle_tables.shape[0] > 0:
            column_codes = np.empty(lanes, np.uint8)
            for j in range(n_max):
                for k in range(lanes):
                    # Code 31 past a subject's end: its table entries hold the pad score.
                    column_codes[k] = s_res[s_off[s_idx[first + k]] + j] if j < lengths[k] else 31
                profile_u8(shuffle_tables, column_codes, sprof[j])
        else:
            for j in range(n_max):
                for k in range(lanes):
                    if j < lengths[k]:
                        code = s_res[s_off[s_idx[first + k]] + j]
                        for a in range(alpha):
                            sprof[j, a, k] = matrix[a, code]
                    else:
                        for a in range(alpha):
                            sprof[j, a, k] = pad
        hcol = np.empty((max_m, lanes), dtype)
        ecol = np.empty((max_m, lanes), dtype)
        out = np.zeros((2, lanes), dtype)
        target = np.zeros(lanes, dtype)
        first_row = np.zeros(lanes, np.int32)
        best = np.zeros(lanes, np.int64)
        best_i = np.zeros(lanes, np.int64)
        best_j = np.zeros(lanes, np.int64)
        for qi in range(n_query):
            query = q_res[q_off[qi]:q_off[qi + 1]]
            m = query.shape[0]
            hc = hcol[:m]
            ec = ecol[:m]
            for i in range(m):
                for k in range(lanes):
                    hc[i, k] = -(gap_open + (i + 1) * gap_extend) if mode == GLOBAL else 0
                    ec[i, k] = lowest
            for k in range(lanes):
                if mode == LOCAL:
                    best[k], best_i[k], best_j[k] = 0, 0, 0
                elif mode == GLOBAL:  # what a subject of length 0 keeps
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
                             dtype.type(oe), dtype.type(gap_extend), dtype.type(floor), out)
                if mode == LOCAL:
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
                elif mode == GLOBAL:
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
            for k in range(count):
                col = first + k
                scores[qi, col] = best[k]
                q_end[qi, col] = best_i[k]
                s_end[qi, col] = best_j[k]


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
    table, floor, pad, sentinel, limit = _width_constants(bits, code, matrix)
    shuffle_tables = np.zeros((0, 32), np.uint8)
    if bits == 8 and USE_SHUFFLE and table.shape[0] <= 31:
        shuffle_tables = np.full((table.shape[0], 32), pad, np.uint8)
        shuffle_tables[:, :table.shape[1]] = table
    shape = (q_off.shape[0] - 1, subjects.shape[0])
    scores = np.zeros(shape, np.int32)
    q_end = np.zeros(shape, np.int32)
    s_end = np.zeros(shape, np.int32)
    with numba.parallel_chunksize(1):
        _group_kernel(q_res, q_off, s_res, s_off, subjects, table, gap_open, gap_extend,
                      code, LANES[bits], floor, pad, sentinel, shuffle_tables, scores,
                      q_end, s_end)
    return scores, q_end, s_end, limit


def score_all(q_res, q_off, s_res, s_off, matrix, gap_open, gap_extend, mode="local",
              subjects=None):
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
    q_res = np.ascontiguousarray(q_res, dtype=np.uint8)
    s_res = np.ascontiguousarray(s_res, dtype=np.uint8)
    q_off = np.ascontiguousarray(q_off, dtype=np.int64)
    s_off = np.ascontiguousarray(s_off, dtype=np.int64)
    if subjects is None:
        subjects = np.arange(s_off.shape[0] - 1, dtype=np.int64)
    subjects = np.ascontiguousarray(subjects, dtype=np.int64)
    widths = _widths(matrix, gap_open, gap_extend, code)
    scores, q_end, s_end, limit = _run_width(widths[0], q_res, q_off, s_res, s_off, subjects,
                                             matrix, gap_open, gap_extend, code)
    for bits in widths[1:]:
        if limit is None or scores.size == 0:
            break
        redo = scores >= limit
        next_limit = None
        for qi in np.flatnonzero(redo.any(axis=1)):
            cols = np.flatnonzero(redo[qi])
            query = q_res[q_off[qi]:q_off[qi + 1]]
            *exact, next_limit = _run_width(bits, query, np.array([0, query.shape[0]], np.int64),
                                            s_res, s_off, subjects[cols], matrix, gap_open,
                                            gap_extend, code)
            scores[qi, cols], q_end[qi, cols], s_end[qi, cols] = (x[0] for x in exact)
        limit = next_limit if redo.any() else None
    return scores, q_end, s_end
