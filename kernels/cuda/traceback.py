"""Traceback of alignments on the GPU (local, global, semiglobal): 4 bits of decisions a
cell, paths walked on the device.

The score kernels give each hit its score and end cell; this module recovers the path.
It follows :func:`swdask.kernels.cpu.traceback.traceback_pair` to the bit (the same
recurrences over the same prefix rectangle ``end_i x end_j``, the same decision bits
with the same tie preferences, the same walk), so a GPU search reports the alignments a
CPU search reports.  The three modes of the CPU kernels: local (the search's GPU hits),
global (all-pairs' candidates) and semiglobal; they differ only in the matrix's first row
and column, the floor of H (0 in local mode) and what the walk does at the border.

Layout
------
One warp (one block of 32 threads) per pair.  Lane ``t`` holds query rows
``[(p*32 + t)*8, (p*32 + t + 1)*8)`` of pass ``p`` in registers (H and E of each row) and
the lanes sweep the subject as a wavefront, handing H and F of their last row to the next
lane by warp shuffle, as :mod:`~swdask.kernels.cuda.inter_task` does; a query longer than
256 rows takes several passes through a boundary row (H and F per column) in global
memory.  The query profile of each pass sits in shared memory (int16).

For every cell the kernel writes the decision nibble of the CPU kernel (bits 0-1: source
of H, 0 diagonal, 1 E, 2 F, 3 local stop; bit 2: E extends; bit 3: F extends).  The eight
nibbles of a lane's rows at one column make one 32-bit word, stored at
``directions[base + strip * width + j - first]`` (strip = row // 8; ``first`` the strip's
first computed column, ``width`` the words a strip keeps: :func:`strip_columns`): a lane
writes consecutive words as it sweeps, so the writes of a warp merge in L2.

A pair may come with a band of diagonals (``known_scores`` in global mode,
:func:`swdask.kernels.directions.global_band`): the lanes then compute only their strip's
part of the band, the cells outside count as -inf, and a pass sweeps only the columns its
strips' bands cover; without one the band is the whole rectangle (``width`` = columns).
A pair costs half a byte per cell of its band: 8 GB hold 16 x 10^9 cells, and
:func:`trace_paths` batches pairs under a memory budget.

A second kernel, one thread per pair, walks the nibbles from the end cell with the CPU
kernel's state machine and writes the operations in reverse; the host reverses them and
describes the path (:func:`~swdask.kernels.paths.summarize_path`).

The kernels are in :mod:`~swdask.kernels.cuda.traceback_kernels`; this module launches
them through the driver layer (:func:`~swdask.kernels.cuda.compile.device_api`), so a
process whose kernels are kept compiled imports no Numba for its traceback (a GPU search
imported Numba's CUDA target for it: 0.57 s on its import thread, beside the score pass).
In Numba's CUDA simulator (which has no warp shuffles) the lanes exchange values
through shared memory and block barriers; everything else is the same code.
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..cpu.reference import GLOBAL, mode_code
from ..directions import global_band
from .compile import device_api, hand_written, simulated

if TYPE_CHECKING:
    import numpy.typing as npt

#: Query rows per lane: the eight decision nibbles of a lane's rows make one 32-bit word.
ROWS = 8
#: Lanes per pair (a warp): rows of one pass = ``LANES * ROWS``.
LANES = 32
PASS_ROWS = ROWS * LANES
#: Largest alphabet whose pass profile fits the kernel's shared array.
MAX_CODES = 32
#: Device memory for the decision words of one launch (several launches when the pairs
#: need more).  8 GiB: the top 100 hits of 16 long queries fit in one or two launches.
DIRECTION_BYTES = 8 * 2**30
#: Profile entries must fit int16 (shared memory); PAD_SCORE lies far below real cells.
PAD_SCORE = -(1 << 14)

def strip_columns(strip, band_lo, band_hi, cols):
    """First and last 0-based column that the kernel computes in ``strip`` (DP rows
    ``8 * strip + 1 .. 8 * strip + 8``) of a pair of ``cols`` columns whose band holds the
    offsets ``band_lo .. band_hi`` (``j - i`` of DP cell ``(i, j)``): the union of the band
    over the strip's eight rows, inside the matrix.  The strip's decision words are stored
    from its first column on, as many as :func:`direction_words` gives it."""
    first = max(0, strip * ROWS + band_lo)
    last = min(cols - 1, strip * ROWS + ROWS - 1 + band_hi)
    return first, last


class _Marks:
    """Times between marks on a stream: CUDA events on a GPU, the host clock in the
    simulator (which has no event timing)."""

    def __init__(self, stream):
        self.stream = stream
        self.events = []

    def mark(self):
        if simulated():
            self.events.append(time.perf_counter())
        else:
            event = device_api().event()
            event.record(self.stream)
            self.events.append(event)

    def seconds(self) -> list:
        """Seconds between consecutive marks (call after the stream synchronized)."""
        pairs = zip(self.events, self.events[1:])
        if simulated():
            return [b - a for a, b in pairs]
        return [a.elapsed_time(b) / 1e3 for a, b in pairs]


def fits(matrix: npt.ArrayLike) -> bool:
    """Whether the GPU traceback takes this matrix: at most :data:`MAX_CODES` codes and
    entries that fit the int16 shared profile."""
    matrix = np.asarray(matrix)
    return matrix.shape[0] <= MAX_CODES and int(np.abs(matrix).max(initial=0)) < -PAD_SCORE


def direction_words(ends: npt.ArrayLike, band_lo: npt.ArrayLike,
                    band_hi: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Decision words per strip (the strip's band, at most the columns) and in all of each
    pair's rectangle ``ends`` (shape (n, 2)) inside its band."""
    ends = np.asarray(ends, dtype=np.int64).reshape(-1, 2)
    rows, cols = ends[:, 0], ends[:, 1]
    width = np.minimum(np.asarray(band_hi, np.int64) - band_lo + ROWS, cols)
    return width, ((rows + ROWS - 1) // ROWS) * width


def trace_paths(
    queries: Sequence[np.ndarray], subjects: Sequence[np.ndarray], ends: npt.ArrayLike,
    matrix: np.ndarray, gap_open: int, gap_extend: int, *, mode: str = "local",
    known_scores: npt.ArrayLike | None = None, budget: int = DIRECTION_BYTES,
    stats: dict[str, float] | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], list[npt.NDArray[np.uint8]]]:
    """Paths of alignments whose end cells are known, computed on the GPU.

    Parameters
    ----------
    queries, subjects : sequence of numpy.ndarray of uint8
        Residue codes of pair ``k``'s query and subject (pairs given the same query array
        object share one profile on the device).
    ends : numpy.ndarray of int, shape (n, 2)
        ``(query_end, subject_end)`` of each pair's end cell, as a score kernel found it
        (exclusive ends; ``(0, 0)`` for a local pair of score 0; ``(m, n)``, the whole
        pair, in global mode).
    matrix : numpy.ndarray of int
        Substitution scores by code (see :func:`fits`).
    gap_open, gap_extend : int
        A gap of k residues costs ``gap_open + k * gap_extend``.
    mode : {"local", "global", "semiglobal"}, default "local"
        As :func:`swdask.kernels.cpu.traceback.traceback_pair`: the paths, starts and
        scores are that function's for the same end cells.
    known_scores : array-like of int, optional
        The pairs' optimal scores, from a score kernel.  In global mode the kernel then
        computes only the diagonal band that the optimal paths can visit
        (:func:`swdask.kernels.directions.global_band`): the same paths, from a fraction
        of the cells and decision words.
    budget : int, default DIRECTION_BYTES
        Device bytes of decision words per launch; pairs are launched in batches under it
        (a pair larger than the budget gets a launch of its own).
    stats : dict, optional
        Filled with ``cells`` (of the rectangles), ``band_cells`` (decisions written),
        ``launches``, ``forward_seconds`` and ``walk_seconds`` (CUDA events) and
        ``seconds`` (wall time of the call).

    Returns
    -------
    scores : numpy.ndarray of int64
        H of each end cell, recomputed on the device: the caller checks it against the
        score kernels' score.
    starts : numpy.ndarray of int64, shape (n, 2)
        ``(query_start, subject_start)`` of each path.
    ops : list of numpy.ndarray of uint8
        Each path's operations (``OP_MATCH``/``OP_INS``/``OP_DEL``) in forward order.

    Raises
    ------
    ValueError
        A matrix the kernel cannot hold (see :func:`fits`), or an unknown mode.
    """
    started = time.perf_counter()
    code = mode_code(mode)
    ends = np.asarray(ends, dtype=np.int64).reshape(-1, 2)
    n = len(ends)
    matrix = np.ascontiguousarray(matrix, dtype=np.int32)
    if not fits(matrix):
        raise ValueError(f"the GPU traceback takes at most {MAX_CODES} codes and "
                         f"entries within +-{-PAD_SCORE - 1}")
    starts = np.zeros((n, 2), np.int64)
    paths = [np.zeros(0, np.uint8)] * n
    scores = np.zeros(n, np.int64)
    band_lo, band_hi = -ends[:, 0], ends[:, 1].copy()
    if known_scores is not None and code == GLOBAL:
        band_lo, band_hi = global_band(ends[:, 0], ends[:, 1], known_scores, matrix,
                                       gap_open, gap_extend)
    timing = {"cells": int((ends[:, 0] * ends[:, 1]).sum()), "band_cells": 0, "launches": 0,
              "forward_seconds": 0.0, "walk_seconds": 0.0}
    width, words = direction_words(ends, band_lo, band_hi)
    batch, used = [], 0
    for k in np.argsort(-words, kind="stable"):
        if batch and used + 4 * words[k] > budget:
            _launch(batch, queries, subjects, ends, matrix, gap_open, gap_extend, code,
                    (band_lo, band_hi, width, words), (scores, starts, paths), timing)
            batch, used = [], 0
        batch.append(int(k))
        used += 4 * int(words[k])
    if batch:
        _launch(batch, queries, subjects, ends, matrix, gap_open, gap_extend, code,
                (band_lo, band_hi, width, words), (scores, starts, paths), timing)
    if stats is not None:
        stats.update(timing, seconds=time.perf_counter() - started)
    return scores, starts, paths


def _launch(batch, queries, subjects, ends, matrix, gap_open, gap_extend, code, bands, out,
            timing):
    """One forward launch and one walk launch over the pairs ``batch``, inside their
    ``bands`` (lo, hi, words per strip, words); results into ``out`` (scores, starts,
    paths)."""
    band_lo, band_hi, width, words = bands
    scores, starts, paths = out
    n_codes = matrix.shape[0]
    count = len(batch)
    e_i = ends[batch, 0].astype(np.int32)
    e_j = ends[batch, 1].astype(np.int32)
    # Profiles: one per distinct query array object (pairs of one query share it).
    profile_of = {}
    profile_parts, profile_base, profile_rows = [], np.zeros(count, np.int64), np.zeros(count, np.int32)
    at = 0
    for slot, k in enumerate(batch):
        q = queries[k]
        key = id(q)
        if key not in profile_of:
            q = np.asarray(q, dtype=np.uint8)
            padded = max(PASS_ROWS, math.ceil(len(q) / PASS_ROWS) * PASS_ROWS)
            profile = np.full((n_codes, padded), PAD_SCORE, np.int32)
            profile[:, :len(q)] = matrix[:, q]
            profile_of[key] = (at, padded)
            profile_parts.append(profile.ravel())
            at += profile.size
        profile_base[slot], profile_rows[slot] = profile_of[key]
    s_start = np.zeros(count, np.int64)
    np.cumsum(e_j[:-1], out=s_start[1:])
    subject_parts = [np.asarray(subjects[k], dtype=np.uint8)[:cols]
                     for k, cols in zip(batch, e_j.tolist())]
    dir_words = words[batch]
    dir_base = np.concatenate([[0], np.cumsum(dir_words)[:-1]]).astype(np.int64)
    bound_len = np.where((e_i > PASS_ROWS) & (e_j > 0), 2 * e_j.astype(np.int64), 0)
    bound_base = np.concatenate([[0], np.cumsum(bound_len)[:-1]]).astype(np.int64)
    ops_len = (e_i.astype(np.int64) + e_j)
    ops_base = np.concatenate([[0], np.cumsum(ops_len)[:-1]]).astype(np.int64)

    cuda = device_api()  # the driver layer: no Numba where the kernels are kept compiled
    stream = cuda.stream()
    d_prof = cuda.to_device(np.concatenate(profile_parts), stream=stream)
    d_res = cuda.to_device(np.concatenate(subject_parts + [np.zeros(1, np.uint8)]), stream=stream)
    d_dirs = cuda.device_array(max(1, int(dir_words.sum())), np.uint32, stream=stream)
    d_bound = cuda.device_array(max(1, int(bound_len.sum())), np.int32, stream=stream)
    d_ops = cuda.device_array(max(1, int(ops_len.sum())), np.uint8, stream=stream)
    (d_prof_base, d_prof_rows, d_s_start, d_ei, d_ej, d_lo, d_hi, d_width, d_dir_base,
     d_bound_base, d_ops_base) = (
        cuda.to_device(a, stream=stream)
        for a in (profile_base, profile_rows, s_start, e_i, e_j, band_lo[batch].astype(np.int32),
                  band_hi[batch].astype(np.int32), width[batch].astype(np.int32), dir_base,
                  bound_base, ops_base))
    d_score = cuda.to_device(np.zeros(count, np.int32), stream=stream)
    marks = _Marks(stream)
    threads = 32 if simulated() else 128
    marks.mark()
    _kernel("_forward_kernel")[count, LANES, stream](
        d_prof, d_prof_base, d_prof_rows, d_res, d_s_start, d_ei, d_ej, d_lo, d_hi, d_width,
        d_dir_base, d_bound_base, np.int32(n_codes), np.int32(gap_open + gap_extend),
        np.int32(gap_extend), np.int32(code), d_dirs, d_bound, d_score)
    marks.mark()
    out_len = cuda.device_array(count, np.int32, stream=stream)
    out_i = cuda.device_array(count, np.int32, stream=stream)
    out_j = cuda.device_array(count, np.int32, stream=stream)
    _kernel("_walk_kernel")[max(1, math.ceil(count / threads)), threads, stream](
        d_dirs, d_dir_base, d_width, d_lo, d_hi, d_ei, d_ej, d_ops_base, d_ops, np.int32(code),
        out_len, out_i, out_j)
    marks.mark()
    end_scores = d_score.copy_to_host(stream=stream)
    lengths = out_len.copy_to_host(stream=stream)
    first_i = out_i.copy_to_host(stream=stream)
    first_j = out_j.copy_to_host(stream=stream)
    all_ops = d_ops.copy_to_host(stream=stream)
    stream.synchronize()
    timing["launches"] += 1
    timing["band_cells"] += ROWS * int(dir_words.sum())  # a word holds eight cells
    forward, walk = marks.seconds()
    timing["forward_seconds"] += forward
    timing["walk_seconds"] += walk
    if (lengths < 0).any():
        # The band's proof says this cannot happen; the guard keeps the walk in its memory.
        raise AssertionError(f"{int((lengths < 0).sum())} traceback walks left their band")
    if code == GLOBAL:
        # An empty rectangle runs no forward pass: its score is the border's one gap.
        empty = (e_i == 0) | (e_j == 0)
        gap = e_i.astype(np.int64) + e_j
        end_scores = np.where(empty & (gap > 0), -(gap_open + gap * gap_extend), end_scores)
    scores[batch] = end_scores
    starts[batch, 0] = first_i
    starts[batch, 1] = first_j
    for k, base, length in zip(batch, ops_base.tolist(), lengths.tolist()):
        paths[k] = all_ops[base:base + length][::-1].copy()


def _kernel(name: str):
    """A kernel of :mod:`~swdask.kernels.cuda.traceback_kernels`, without importing it
    (:func:`~swdask.kernels.cuda.compile.hand_written`): a process whose kernels are kept
    compiled imports no Numba for its traceback."""
    return hand_written(f"{__package__}.traceback_kernels:{name}")
