"""The GPU traceback's kernels: decision nibbles of every pair's rectangle (one warp a
pair) and the walk of each path (one thread a pair), with the CPU kernels' decisions and
walk as device functions; the layout is :mod:`~swdask.kernels.cuda.traceback`'s.

They live apart from :mod:`~swdask.kernels.cuda.traceback`, which launches them, so that a
run whose kernels are kept compiled imports no Numba: this module is imported only to
compile one (:func:`swdask.kernels.cuda.compile.hand_written`).  In Numba's CUDA simulator
(which has no warp shuffles) the lanes exchange values through shared memory and block
barriers.
"""
from __future__ import annotations

from numba import config, cuda, int16, int32, uint32

from ..cpu.reference import GLOBAL, LOCAL
from ..directions import NEG, STATE_H, border_gap, decision, walk_step
from .compile import jit
from .traceback import LANES, MAX_CODES, PASS_ROWS, ROWS, strip_columns

_SIMULATED = bool(config.ENABLE_CUDASIM)


# The decisions and the walk of the CPU kernels, and the strips' columns, as device functions.
_decision = cuda.jit(device=True)(decision)
_walk_step = cuda.jit(device=True)(walk_step)
_border_gap = cuda.jit(device=True)(border_gap)
_strip_columns = cuda.jit(device=True)(strip_columns)


if _SIMULATED:
    @cuda.jit(device=True)
    def _from_previous_lane(value, scratch, slot, lane):
        # The simulator has no warp shuffles: exchange through shared memory.
        scratch[slot, lane] = value
        cuda.syncthreads()
        got = scratch[slot, lane - 1] if lane > 0 else value
        cuda.syncthreads()
        return got
else:
    @cuda.jit(device=True)
    def _from_previous_lane(value, scratch, slot, lane):
        return cuda.shfl_up_sync(0xFFFFFFFF, value, 1)


@jit(signatures=(("void(int32[::1], int64[::1], int32[::1], uint8[::1], int64[::1], int32[::1], "
                  "int32[::1], int32[::1], int32[::1], int32[::1], int64[::1], int64[::1], "
                  "int32, int32, int32, int32, uint32[::1], int32[::1], int32[::1])"),))
def _forward_kernel(profiles, profile_base, profile_rows, s_res, s_start, ends_i, ends_j,
                    band_lo, band_hi, dir_width, dir_base, bound_base, n_codes, gap_oe, gap_e,
                    mode, directions, boundary, end_score):
    """Decision nibbles of the prefix rectangle of every pair (one block per pair), in
    ``mode`` (a :func:`~swdask.kernels.cpu.reference.mode_code`), inside its band.

    ``profiles[profile_base[p] + code * profile_rows[p] + row]`` is the int32 score of
    query row ``row`` against ``code``; ``s_res[s_start[p]:]`` the subject's codes;
    ``ends_i/ends_j`` the end cell (rows and columns of the rectangle); cells of offset
    ``j - i`` in ``[band_lo[p], band_hi[p]]`` (widened to whole strips, see
    :func:`strip_columns`) are computed, every other cell counts as -inf; decision words at
    ``directions[dir_base[p] + strip * dir_width[p] + j - first column of the strip]``,
    boundary rows at ``boundary[bound_base[p]:]``; H of the end cell in ``end_score[p]``
    (left as it is for an empty rectangle).
    """
    pair = cuda.blockIdx.x
    lane = cuda.threadIdx.x
    scratch = cuda.shared.array((2, LANES), int32)
    sprof = cuda.shared.array((MAX_CODES, PASS_ROWS), int16)
    h = cuda.local.array(ROWS, int32)
    e = cuda.local.array(ROWS, int32)
    rows = ends_i[pair]
    cols = ends_j[pair]
    strips = (rows + ROWS - 1) // ROWS
    passes = (rows + PASS_ROWS - 1) // PASS_ROWS
    if cols == 0:
        passes = 0
    start = s_start[pair]
    pbase = profile_base[pair]
    prows = profile_rows[pair]
    dbase = dir_base[pair]
    width = dir_width[pair]
    k_lo = band_lo[pair]
    k_hi = band_hi[pair]
    bbase = bound_base[pair]
    last_strip = (rows - 1) // ROWS
    last_k = (rows - 1) % ROWS
    zero = int32(0)
    neg = int32(NEG)
    gap_oe = int32(gap_oe)
    gap_e = int32(gap_e)
    local = mode == LOCAL
    glob = mode == GLOBAL
    floor = zero if local else neg
    for p in range(passes):
        # The block stages this pass's rows of the profile once.
        cuda.syncthreads()
        for idx in range(lane, n_codes * PASS_ROWS, LANES):
            code = idx // PASS_ROWS
            row = idx - code * PASS_ROWS
            sprof[code, row] = int16(profiles[pbase + code * prows + p * PASS_ROWS + row])
        cuda.syncthreads()
        strip = p * LANES + lane
        first, last = _strip_columns(strip, k_lo, k_hi, cols)
        # The columns this pass's lanes sweep, lane t one step behind lane t - 1.
        sweep_from, _ = _strip_columns(p * LANES, k_lo, k_hi, cols)
        _, sweep_to = _strip_columns(min(p * LANES + LANES, strips) - 1, k_lo, k_hi, cols)
        # The last lane of the previous pass left H and F of its row in ``boundary`` for
        # its own columns.
        above_first, above_last = _strip_columns(p * LANES - 1, k_lo, k_hi, cols)
        # The cell left of the lane's first column: column 0's H (0, or -(o + i e) in global
        # mode, a leading gap), or -inf inside the matrix (outside the band).
        for k in range(ROWS):
            h[k] = neg
            if first == 0:
                h[k] = zero
                if glob:
                    h[k] = int32(-(gap_oe + (strip * ROWS + k) * gap_e))
            e[k] = neg
        out_h = neg
        out_f = neg
        # H of the row above at the column before the lane's first: column 0's H, or the
        # previous lane's, which arrives one step before the first column.
        diag_in = zero
        if glob and strip > 0:
            diag_in = int32(-(gap_oe + (strip * ROWS - 1) * gap_e))
        # One step before the first column, so that lane 0 too takes its first diagonal
        # from the row above (the previous pass's last lane) inside the matrix.
        for step in range(sweep_from - 1, sweep_to + LANES):
            j = step - lane
            in_h = _from_previous_lane(out_h, scratch, 0, lane)
            in_f = _from_previous_lane(out_f, scratch, 1, lane)
            if lane == 0:
                if p > 0:
                    in_h = neg
                    in_f = neg
                    if j >= above_first and j <= above_last:
                        in_h = boundary[bbase + 2 * j]
                        in_f = boundary[bbase + 2 * j + 1]
                else:
                    in_h = int32(-(gap_oe + j * gap_e)) if glob else zero  # H(0, j + 1)
                    in_f = neg
            out_h = neg
            out_f = neg
            if j >= first and j <= last:
                code = s_res[start + j]
                diag = diag_in
                up = in_h
                f = in_f
                word = uint32(0)
                at_end = j == cols - 1 and strip == last_strip
                picked = zero
                for k in range(ROWS):
                    left = h[k]
                    e_val = max(int32(e[k] - gap_e), int32(left - gap_oe))
                    f_val = max(int32(f - gap_e), int32(up - gap_oe))
                    via_diag = int32(diag + int32(sprof[code, lane * ROWS + k]))
                    value = max(max(via_diag, floor), max(e_val, f_val))
                    src = _decision(value, e_val, f_val, via_diag, int32(left - gap_oe),
                                    int32(up - gap_oe), local)
                    word |= uint32(src) << uint32(4 * k)
                    if at_end and k == last_k:
                        picked = value
                    diag = left
                    h[k] = value
                    e[k] = e_val
                    up = value
                    f = f_val
                out_h = up
                out_f = f
                if lane == LANES - 1 and p + 1 < passes:
                    boundary[bbase + 2 * j] = up
                    boundary[bbase + 2 * j + 1] = f
                if strip < strips:
                    directions[dbase + strip * width + j - first] = word
                if at_end:
                    end_score[pair] = picked
            if j >= 0:
                diag_in = in_h


@jit(signatures=(("void(uint32[::1], int64[::1], int32[::1], int32[::1], int32[::1], int32[::1], "
                  "int32[::1], int64[::1], uint8[::1], int32, int32[::1], int32[::1], "
                  "int32[::1])"),))
def _walk_kernel(directions, dir_base, dir_width, band_lo, band_hi, ends_i, ends_j, ops_base,
                 ops, mode, out_len, out_i, out_j):
    """The path of every pair from its end cell (one thread per pair), operations in
    reverse order at ``ops[ops_base[p]:]``; the start cell in ``out_i/out_j``.  In global
    mode a path that meets the first row or column goes on along it to (0, 0), as the CPU
    kernel's does.  A walk that would leave its band (never, by the band's proof: see
    :func:`swdask.kernels.directions.global_band`) stops with ``out_len`` -1."""
    pair = cuda.grid(1)
    if pair >= ends_i.shape[0]:
        return
    cols = ends_j[pair]
    base = dir_base[pair]
    width = dir_width[pair]
    k_lo = band_lo[pair]
    k_hi = band_hi[pair]
    obase = ops_base[pair]
    i = ends_i[pair]
    j = cols
    k = 0
    state = STATE_H
    path = ops[obase:]
    while not (state == STATE_H and (i == 0 or j == 0)):
        # Decision of DP cell (i, j), 1-based: strip (i-1)//8, nibble (i-1)%8.
        strip = (i - 1) // ROWS
        first, last = _strip_columns(strip, k_lo, k_hi, cols)
        if j - 1 < first or j - 1 > last:
            out_len[pair] = -1
            return
        word = directions[base + strip * width + j - 1 - first]
        bits = (word >> uint32(4 * ((i - 1) % ROWS))) & uint32(15)
        state, i, j, k, stop = _walk_step(bits, state, i, j, path, k)
        if stop:
            break
    if mode == GLOBAL and state == STATE_H:
        k = _border_gap(i, j, path, k)
        i = 0
        j = 0
    out_len[pair] = k
    out_i[pair] = i
    out_j[pair] = j
