"""The device-side selection of a search's top hits: the hand-written kernels that
:mod:`~swdask.kernels.cuda.launcher` launches between and after the score kernels.

They live apart from the launcher so that the launcher imports no Numba: a search whose
kernels are all kept in the cache launches them through the driver layer, and this module
(with Numba) is imported only to compile one (:func:`swdask.kernels.cuda.compile.hand_written`).
"""
from __future__ import annotations

from numba import cuda

from .compile import jit
from .launcher import HIST_BINS


@jit(signatures=("void(int32[:, ::1], int64)",))
def _fill(array, value):
    """``array[...] = value`` for a 2-D array, any grid (grid-stride loop)."""
    n = array.shape[1]
    for i in range(cuda.grid(1), array.shape[0] * n, cuda.gridsize(1)):
        array[i // n, i % n] = value


@jit(signatures=("void(int32[:, ::1], int32[:, ::1])",))
def _histogram(scores, hist):
    """``hist[q, min(score, HIST_BINS - 1)] += 1`` over a (queries, subjects) table; a
    16-bit overflow's ``-1`` counts in bin 0 (its query's row is redone after the re-run)."""
    n = scores.shape[1]
    for i in range(cuda.grid(1), scores.shape[0] * n, cuda.gridsize(1)):
        q = i // n
        cuda.atomic.add(hist, (q, max(min(scores[q, i % n], HIST_BINS - 1), 0)), 1)


@jit(signatures=("void(int32[:, ::1])",))
def _start_range(ranges):
    """``ranges[q] = (HIGHEST, LOWEST - 1)``: an empty range of scores per query."""
    for q in range(cuda.grid(1), ranges.shape[0], cuda.gridsize(1)):
        ranges[q, 0] = 2147483647
        ranges[q, 1] = -2147483648


@jit(signatures=("void(int32[:, ::1], int32, int32[:, ::1])",))
def _score_range(scores, floor, ranges):
    """``ranges[q] = (lowest, highest)`` of query ``q``'s scores of at least ``floor``
    (at least :data:`LOWEST`: a 16-bit overflow's mark is never counted)."""
    n = scores.shape[1]
    for i in range(cuda.grid(1), scores.shape[0] * n, cuda.gridsize(1)):
        q = i // n
        value = scores[q, i % n]
        if value >= floor:
            cuda.atomic.min(ranges, (q, 0), value)
            cuda.atomic.max(ranges, (q, 1), value)


@jit(signatures=("void(int32[:, ::1], int32[:, ::1], int32[:, ::1])",))
def _range_histogram(scores, ranges, hist):
    """Histogram of each query's scores within its range ``ranges[q] = (lo, hi)`` in
    ``HIST_BINS`` bins of width ``(hi - lo) // HIST_BINS + 1`` from ``lo`` (see
    :func:`range_cut`)."""
    n = scores.shape[1]
    bins = hist.shape[1]
    for i in range(cuda.grid(1), scores.shape[0] * n, cuda.gridsize(1)):
        q = i // n
        value = scores[q, i % n]
        low = ranges[q, 0]
        if value >= low:
            width = (ranges[q, 1] - low) // bins + 1
            cuda.atomic.add(hist, (q, (value - low) // width), 1)


@jit(signatures=("void(int32[:, ::1], int32[:, ::1], int32[:, ::1], int32[::1], int64[::1], "
                  "int64[::1], int64[::1], int32[::1], int32[::1], int32[::1])",))
def _select(scores, q_end, s_end, cuts, starts, found, columns, out_score, out_qend, out_send):
    """Append each subject scoring at least its query's cut to that query's slice
    (``starts[q]`` on); order within a slice is not kept."""
    n = scores.shape[1]
    for i in range(cuda.grid(1), scores.shape[0] * n, cuda.gridsize(1)):
        q = i // n
        c = i % n
        if scores[q, c] >= cuts[q]:
            slot = starts[q] + cuda.atomic.add(found, q, 1)
            if slot < starts[q + 1]:
                columns[slot] = c
                out_score[slot] = scores[q, c]
                out_qend[slot] = q_end[q, c]
                out_send[slot] = s_end[q, c]


@jit(signatures=("void(int64[::1], int32[::1], int32[::1], int32[::1], int32[::1], int32[::1], "
                  "int32[::1])",))
def _scatter(where, score, qend, send, out_score, out_qend, out_send):
    """Write re-scored pairs back into a query's row of the score tables."""
    i = cuda.grid(1)
    if i < where.shape[0]:
        out_score[where[i]] = score[i]
        out_qend[where[i]] = qend[i]
        out_send[where[i]] = send[i]
