"""One tile of a long local alignment on the GPU: sub-tiles swept along anti-diagonals.

The tile, its boundaries and its results are those of :mod:`swdask.kernels.cpu.tile`
(``top_h``/``top_f``/``left_h``/``left_e`` in, ``bottom_h``/``bottom_f``/``right_h``/
``right_e`` and the best cell out); :func:`score_tile_gpu` returns exactly what
:func:`swdask.kernels.cpu.tile.score_tile` returns.

Layout
------
The tile is cut into sub-tiles of ``32 * R`` rows (a *strip*) by ``SW`` columns.  One
warp computes one sub-tile: lane ``t`` holds rows ``[t*R, (t+1)*R)`` of the strip in
registers (H and E of each, ``R`` unrolled in the generated source) and the lanes sweep
the sub-tile's columns as a wavefront: at step ``k`` lane ``t`` computes column
``k - t`` and hands H and F of its last row to lane ``t + 1`` by a warp shuffle (the
arrangement of :mod:`swdask.kernels.cuda.inter_task`).  Sub-tiles ``(p, q)`` with
``p + q = d`` are independent; one launch computes a whole anti-diagonal ``d``, a warp
per sub-tile, ``P + Q - 1`` launches per tile.

Between launches the borders live in four global arrays that each launch reads and
overwrites in place: H and F of the last row computed in every column (``w + 1``
entries), H and E of the last column computed in every row (``h + 1``), and the corner
``H(r0, c0)`` of the next sub-tile of every strip (written by the strip's previous
sub-tile, which read it as the last cell of its top row, before the sub-tile above-right
overwrote it).  Sub-tiles of one diagonal touch disjoint columns and rows, so a launch
needs no synchronisation between warps and no per-sub-tile storage: the tile's whole
working memory is ``O(h + w)``.

Rows past the tile's end (a last strip shorter than ``32 * R``) are *transparent*:
they pass the H and F from above through unchanged and never count for the best cell,
so the last lane hands on the last real row.  Ends follow the rule of every swdask kernel
(smallest subject end, then smallest query end): lanes keep the column maximum, take a
new best only when greater (columns come in increasing order), find its first row, and
the warp reduces ``(score, column, row)`` lexicographically into the strip's running
best; the host reduces the ``P`` strips.

Scores are exact int32 (see :mod:`swdask.kernels.cpu.tile`).  In Numba's CUDA simulator
(no warp shuffles) a block is one warp exchanging through shared memory and block
barriers; the text of the kernel is otherwise the same, so CI checks its logic.
"""
from __future__ import annotations

import math

import numpy as np
from numba import config, cuda

from ..cpu.tile import NEG, score_tile

#: Query rows per lane (registers) and columns per sub-tile on a GPU.  Not tuned on a GPU
#: yet: 8 rows is the best height of the inter-task kernel (kernels/cuda/inter_task.py),
#: and 512 columns keep the 31-step fill of a warp's wavefront under 6 % of its steps.
ROWS = 8
WIDTH = 512
#: Warps (independent sub-tiles) per block on a GPU.
WARPS_PER_BLOCK = 4
#: The same in the simulator: small, so that CI runs many sub-tiles on tiny tiles.
SIMULATOR_ROWS = 2
SIMULATOR_WIDTH = 8

_KERNELS = {}

#: Hopper DPX instructions (as in kernels/cuda/inter_task.py; copied, not imported, so
#: that this module does not depend on that one's internals).
DPX_SOURCE = """
extern "C" __device__ int swt_viaddmax(int* out, int a, int b, int c)
{ *out = __viaddmax_s32(a, b, c); return 0; }
extern "C" __device__ int swt_vimax3_relu(int* out, int a, int b, int c)
{ *out = __vimax3_s32_relu(a, b, c); return 0; }
"""


def _kernel_source(rows: int, width: int, shuffles: bool, dpx: bool, warps: int) -> str:
    """Source of the anti-diagonal kernel for ``rows`` register rows per lane.

    ``shuffles``: lanes exchange by warp shuffles (GPU), else through shared memory and
    block barriers (simulator, one warp a block).  ``dpx``: Hopper's fused max.
    """
    r = range(rows)
    span = 32 * rows
    threads = 32 * warps

    def exchange(pad):
        if shuffles:
            return [f"{pad}in_h = cuda.shfl_up_sync(0xFFFFFFFF, out_h, 1)",
                    f"{pad}in_f = cuda.shfl_up_sync(0xFFFFFFFF, out_f, 1)"]
        return [f"{pad}xch[0, tx] = out_h", f"{pad}xch[1, tx] = out_f", f"{pad}cuda.syncthreads()",
                f"{pad}in_h = xch[0, tx - 1] if lane > 0 else out_h",
                f"{pad}in_f = xch[1, tx - 1] if lane > 0 else out_f", f"{pad}cuda.syncthreads()"]

    def down(name, shift):
        if shuffles:
            return [f"    o_{name} = cuda.shfl_down_sync(0xFFFFFFFF, {name}, {shift})"]
        return [f"    xch64[tx] = {name}", "    cuda.syncthreads()",
                f"    o_{name} = xch64[tx + {shift}] if lane + {shift} < 32 else {name}",
                "    cuda.syncthreads()"]

    def cell(k, pad):
        if dpx:
            body = [f"{pad}e{k} = viaddmax(e{k}, neg_e, int32(h{k} - gap_oe))",
                    f"{pad}f = viaddmax(f, neg_e, int32(up - gap_oe))",
                    f"{pad}hv = vimax3_relu(int32(diag + smat[q{k} + code]), e{k}, f)"]
        else:
            body = [f"{pad}e{k} = max(int32(e{k} - gap_e), int32(h{k} - gap_oe))",
                    f"{pad}f = max(int32(f - gap_e), int32(up - gap_oe))",
                    f"{pad}hv = max(max(int32(diag + smat[q{k} + code]), zero), max(e{k}, f))"]
        return body + [f"{pad}diag = h{k}", f"{pad}h{k} = hv", f"{pad}up = hv",
                       f"{pad}cmax = max(cmax, hv)"]

    lines = [
        "def kernel(a, b, matrix, h_rows, w_cols, d, p_lo, p_hi, n_q, gap_oe, gap_e,",
        "           row_h, row_f, col_h, col_e, corner, best_out):",
        "    tx = cuda.threadIdx.x",
        "    lane = tx % 32",
        f"    n_codes = matrix.shape[0]",
        "    smat = cuda.shared.array(1024, int32)",
        f"    for idx in range(tx, n_codes * n_codes, {threads}):",
        "        smat[idx] = matrix[idx // n_codes, idx % n_codes]",
        "    cuda.syncthreads()",
        f"    xch = cuda.shared.array((2, {threads}), int32)" if not shuffles else "    pass",
        f"    xch64 = cuda.shared.array({threads}, int64)" if not shuffles else "    pass",
        f"    p = p_lo + (cuda.blockIdx.x * {threads} + tx) // 32",
        "    if p > p_hi:",
        "        return",
        "    qc = d - p",
        f"    c0 = qc * {width}",
        f"    wq = min({width}, w_cols - c0)",
        f"    r0 = p * {span}",
        f"    rb = r0 + lane * {rows}",
        f"    nv = min(max(h_rows - rb, 0), {rows})",
        f"    full = r0 + {span} <= h_rows",
        "    zero = int32(0)",
        "    gap_oe = int32(gap_oe)",
        "    gap_e = int32(gap_e)",
        "    neg_e = int32(-gap_e)",
    ]
    for k in r:  # registers: query code offsets, H and E of the column on the left
        lines += [
            f"    q{k} = int32(a[rb + {k}]) * n_codes if {k} < nv else 0",
            f"    h{k} = col_h[rb + {k + 1}] if {k} < nv else zero",
            f"    e{k} = col_e[rb + {k + 1}] if {k} < nv else int32({NEG})",
        ]
    lines += [
        "    diag_in = corner[p] if lane == 0 else (col_h[rb] if rb <= h_rows else zero)",
        "    new_corner = zero",
        "    out_h = zero",
        f"    out_f = int32({NEG})",
        "    best = zero",
        "    best_i = 0",
        "    best_j = 0",
        "    for step in range(wq + 31):",
        "        j = step - lane",
    ]
    lines += exchange("        ")
    lines += [
        "        if j >= 0 and j < wq:",
        "            if lane == 0:",
        "                in_h = row_h[c0 + j + 1]",
        "                in_f = row_f[c0 + j + 1]",
        "                if j == wq - 1:",
        "                    new_corner = in_h",
        "            code = int32(b[c0 + j])",
        "            diag = diag_in",
        "            diag_in = in_h",
        "            up = in_h",
        "            f = in_f",
        "            cmax = zero",
        "            if full:",
    ]
    for k in r:
        lines += cell(k, "                ")
    lines += ["            else:"]
    for k in r:
        lines += [f"                if {k} < nv:"] + cell(k, "                    ")
    lines += [
        "            out_h = up",
        "            out_f = f",
        "            if lane == 31:",
        "                row_h[c0 + j + 1] = up",
        "                row_f[c0 + j + 1] = f",
        "            if cmax > best:",
        "                best = cmax",
        "                best_j = c0 + j + 1",
        f"                best_i = rb + {rows}",
    ]
    for k in reversed(r):  # the first row holding the maximum wins: scan upwards
        lines += [f"                if h{k} == cmax and {k} < nv:",
                  f"                    best_i = rb + {k + 1}"]
    for k in r:
        lines += [f"    if {k} < nv:", f"        col_h[rb + {k + 1}] = h{k}",
                  f"        col_e[rb + {k + 1}] = e{k}"]
    lines += ["    cuda.syncwarp()" if shuffles else "    cuda.syncthreads()"]
    shift = 1
    while shift < 32:  # warp reduction: highest score, then smallest column, then row
        lines += down("best", shift) + down("best_j", shift) + down("best_i", shift)
        lines += [
            f"    if lane + {shift} < 32 and (o_best > best or (o_best == best and "
            "(o_best_j < best_j or (o_best_j == best_j and o_best_i < best_i)))):",
            "        best = o_best",
            "        best_j = o_best_j",
            "        best_i = o_best_i",
        ]
        shift *= 2
    lines += [
        "    if lane == 0:",
        "        corner[p] = new_corner",
        "        old = best_out[p, 0]",
        "        if best > 0 and (best > old or (best == old and (best_j < best_out[p, 2] or "
        "(best_j == best_out[p, 2] and best_i < best_out[p, 1])))):",
        "            best_out[p, 0] = best",
        "            best_out[p, 1] = best_i",
        "            best_out[p, 2] = best_j",
    ]
    return "\n".join(lines) + "\n"


def shape() -> tuple[int, int, int]:
    """``(rows per lane, sub-tile width, warps per block)`` here: small in the simulator."""
    if config.ENABLE_CUDASIM:
        return SIMULATOR_ROWS, SIMULATOR_WIDTH, 1
    return ROWS, WIDTH, WARPS_PER_BLOCK


def get_kernel(rows: int, width: int, warps: int, *, dpx: bool = False):
    """The compiled anti-diagonal kernel of a shape (compiled once per process)."""
    simulated = bool(config.ENABLE_CUDASIM)
    use_dpx = dpx and not simulated
    key = (rows, width, warps, use_dpx, simulated)
    if key not in _KERNELS:
        namespace = {"cuda": cuda, "int32": np.int32, "int64": np.int64}
        link = []
        if use_dpx:
            namespace["viaddmax"] = cuda.declare_device("swt_viaddmax", "int32(int32, int32, int32)")
            namespace["vimax3_relu"] = cuda.declare_device("swt_vimax3_relu",
                                                           "int32(int32, int32, int32)")
            link = [cuda.CUSource(DPX_SOURCE)]
        source = _kernel_source(rows, width, shuffles=not simulated, dpx=use_dpx, warps=warps)
        name = f"<swdask tile kernel R={rows} W={width} warps={warps} dpx={use_dpx}>"
        exec(compile(source, name, "exec"), namespace)
        jit = cuda.jit(link=link) if link else cuda.jit
        _KERNELS[key] = jit(namespace["kernel"])
    return _KERNELS[key]


def has_dpx() -> bool:
    """Whether the current GPU has Hopper's DPX instructions (compute capability >= 9.0)."""
    if config.ENABLE_CUDASIM:
        return False
    return tuple(cuda.get_current_device().compute_capability) >= (9, 0)


def score_tile_gpu(a, b, matrix, gap_open, gap_extend, top_h, top_f, left_h, left_e, *,
                   rows=None, width=None):
    """:func:`swdask.kernels.cpu.tile.score_tile` on the GPU (same arguments, same result).

    Parameters
    ----------
    a, b, matrix, gap_open, gap_extend, top_h, top_f, left_h, left_e
        As :func:`~swdask.kernels.cpu.tile.score_tile` (host arrays).
    rows, width : int, optional
        Rows per lane and sub-tile width; default :func:`shape` (8 and 512 on a GPU,
        2 and 8 in the simulator).

    Returns
    -------
    tuple
        ``(bottom_h, bottom_f, right_h, right_e, best, best_i, best_j)`` as host arrays
        and ints.

    Notes
    -----
    Uploads the two residue slices and the four boundaries (``O(h + w)``), launches
    one kernel per anti-diagonal of sub-tiles (``P + Q - 1`` launches, ``P`` strips of
    ``32 * rows`` rows, ``Q`` sub-tiles of ``width`` columns), and downloads the
    boundaries and ``P`` strip bests.  An empty tile is left to the CPU kernel.
    """
    h, w = int(a.shape[0]), int(b.shape[0])
    if h == 0 or w == 0:
        return score_tile(a, b, matrix, gap_open, gap_extend, top_h, top_f, left_h, left_e)
    default_rows, default_width, warps = shape()
    rows = default_rows if rows is None else int(rows)
    width = default_width if width is None else int(width)
    matrix = np.ascontiguousarray(matrix, dtype=np.int32)
    if matrix.shape[0] > 32:
        raise ValueError(f"the GPU tile kernel takes alphabets of at most 32 codes, not {matrix.shape[0]}")
    span = 32 * rows
    n_p = math.ceil(h / span)
    n_q = math.ceil(w / width)
    row_h = np.ascontiguousarray(top_h, dtype=np.int32).copy()
    row_f = np.empty(w + 1, dtype=np.int32)
    row_f[0] = NEG
    row_f[1:] = top_f
    col_h = np.empty(h + 1, dtype=np.int32)
    col_h[0] = top_h[0]
    col_h[1:] = left_h
    col_e = np.empty(h + 1, dtype=np.int32)
    col_e[0] = NEG
    col_e[1:] = left_e
    corner = col_h[np.arange(n_p) * span].copy()  # H(r0, c0) of every strip's first sub-tile
    use_dpx = has_dpx()
    kernel = get_kernel(rows, width, warps, dpx=use_dpx)
    d_a = cuda.to_device(np.ascontiguousarray(a, dtype=np.uint8))
    d_b = cuda.to_device(np.ascontiguousarray(b, dtype=np.uint8))
    d_m = cuda.to_device(matrix)
    d_row_h, d_row_f = cuda.to_device(row_h), cuda.to_device(row_f)
    d_col_h, d_col_e = cuda.to_device(col_h), cuda.to_device(col_e)
    d_corner = cuda.to_device(corner)
    d_best = cuda.to_device(np.zeros((n_p, 3), dtype=np.int64))
    threads = 32 * warps
    o_e = int(gap_open) + int(gap_extend)
    for d in range(n_p + n_q - 1):
        p_lo = max(0, d - n_q + 1)
        p_hi = min(n_p - 1, d)
        blocks = math.ceil((p_hi - p_lo + 1) / warps)
        kernel[blocks, threads](d_a, d_b, d_m, h, w, d, p_lo, p_hi, n_q, o_e, int(gap_extend),
                                d_row_h, d_row_f, d_col_h, d_col_e, d_corner, d_best)
    bottom_h = d_row_h.copy_to_host()
    bottom_h[0] = left_h[h - 1]
    bottom_f = d_row_f.copy_to_host()[1:].copy()
    col_h = d_col_h.copy_to_host()
    col_e = d_col_e.copy_to_host()
    bests = d_best.copy_to_host()
    best, best_i, best_j = 0, 0, 0
    for score, i, j in bests:  # strips in order; the rule picks among them
        if score > best or (score == best and score > 0 and (j < best_j or (j == best_j and i < best_i))):
            best, best_i, best_j = int(score), int(i), int(j)
    return bottom_h, bottom_f, col_h[1:].copy(), col_e[1:].copy(), np.int64(best), best_i, best_j
