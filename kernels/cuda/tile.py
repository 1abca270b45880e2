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

Checkpoints (:func:`score_grid_gpu`, for the traceback of :mod:`swdask.jobs.long_align`): the
same sweep also keeps the boundaries of a grid of tiles over the tile, the layout of
:class:`swdask.kernels.cpu.tile.GridBoundaries`.  Row cuts lie on strip boundaries
(multiples of ``32 * R``), column cuts on sub-tile boundaries (multiples of ``SW``).  Two
int32 arrays ``row_slot`` (one entry a strip) and ``col_slot`` (one a sub-tile column)
give the checkpoint each strip / sub-tile column writes, or -1; four 2-D device arrays
receive them:

============  ======================  =======================================================
array         shape                   written by
============  ======================  =======================================================
``ck_row_h``  (row cuts, ``w + 1``)   lane 31 of strip ``p`` (its last row, ``(p+1) * 32R``),
                                      column by column beside ``row_h``: ``H(r, 1 .. w)``
                                      at indices ``1 .. w``; index 0, the rectangle's left
                                      boundary ``left_h[r - 1]``, is filled by the host
``ck_row_f``  (row cuts, ``w``)       the same lane, ``F(r, 1 .. w)`` at ``0 .. w-1``
``ck_col_h``  (column cuts, ``h``)    every lane of sub-tile column ``qc`` at the sub-tile's
                                      end (column ``(qc+1) * SW``), beside ``col_h``:
                                      ``H(1 .. h, c)`` at ``0 .. h-1``
``ck_col_e``  (column cuts, ``h``)    the same, ``E(1 .. h, c)``
============  ======================  =======================================================

Each value is written once, by the warp that computes it, so the checkpoints need no
synchronisation either; the kernel without them (the score pass) is generated without
those writes.

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
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..tile_contract import NEG, GridBoundaries, grid_lines
from . import codegen, driver
from .compile import Rendered, device_api, get_kernel, simulated

#: Query rows per lane (registers) and columns per sub-tile on a GPU.  Not tuned on a GPU
#: yet: 8 rows is the best height of the inter-task kernel (kernels/cuda/inter_task.py),
#: and 512 columns keep the 31-step fill of a warp's wavefront under 6 % of its steps.
ROWS = 8
WIDTH = 512
#: Warps (independent sub-tiles) per block on a GPU.
WARPS_PER_BLOCK = 4
#: Rows per lane and width of the sub-tiles of smaller grids (:func:`grid_shape`): 128 x 128
#: sub-tiles, 8 times as many as 256 x 512 ones, so 8 times as many warps in flight on a
#: tile too small to fill the GPU with the score pass's shape.  Not measured on a GPU yet.
GRID_ROWS = 4
GRID_WIDTH = 128
#: The same in the simulator: small, so that CI runs many sub-tiles on tiny tiles.
SIMULATOR_ROWS = 2
SIMULATOR_WIDTH = 8


#: Hopper DPX instructions of the recurrence (those of the inter-task kernel), linked into
#: the GPU kernel when asked for.
DPX_NAMES = ("viaddmax", "vimax3_relu")
DPX_SOURCE = codegen.dpx32_source("swt", DPX_NAMES)


def _kernel_source(rows: int, width: int, shuffles: bool, dpx: bool, warps: int,
                   checkpoints: bool = False) -> str:
    """Source of the anti-diagonal kernel for ``rows`` register rows per lane.

    ``shuffles``: lanes exchange by warp shuffles (GPU), else through shared memory and
    block barriers (simulator, one warp a block); nothing else differs.  ``dpx``:
    Hopper's fused max.  ``checkpoints``: the kernel also takes ``row_slot``/``col_slot``
    and the four checkpoint arrays (module docstring) and writes the cut rows and columns
    beside the borders; without, its text is the score pass's, unchanged.
    """
    r = range(rows)
    span = 32 * rows
    threads = 32 * warps

    def cell(k, pad):
        # Unsigned offsets: Numba's signed indexing adds a negative-index wrap (five
        # instructions a cell in this kernel's SASS).
        return codegen.gotoh_cell(k, pad, f"smat[q{k} + code]", dpx=dpx, h="hv")

    extra = (",\n           row_slot, col_slot, ck_row_h, ck_row_f, ck_col_h, ck_col_e"
             if checkpoints else "")
    lines = [
        "def kernel(a, b, matrix, h_rows, w_cols, d, p_lo, p_hi, n_q, gap_oe, gap_e,",
        "           row_h, row_f, col_h, col_e, corner, best_out" + extra + "):",
        "    tx = cuda.threadIdx.x",
        "    lane = tx % 32",
        "    n_codes = matrix.shape[0]",
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
        # int32 step counters and unsigned score-table offsets (cell, above): with these
        # the 2.46 Mb x 1 Mb score pass took 3.44 s instead of 4.41 on an H200.
        "    wq32 = int32(wq)",
        "    lane32 = int32(lane)",
        # The sub-tile's subject codes and the H and F above it, staged in shared memory
        # before the sweep rather than read from global memory at each step (the 2.46 Mb x
        # 1 Mb score pass: 4.60 -> 4.41 s on an H200; Nsight Compute then showed the warp
        # bound by its instruction count, not loads: docs/benchmarks.md).  All reads
        # precede lane 31's writes of row_h/row_f, as in the unstaged sweep.
        "    slot = uint32(tx // 32)",
        f"    s_code = cuda.shared.array(({warps}, {width}), int32)",
        f"    s_up_h = cuda.shared.array(({warps}, {width}), int32)",
        f"    s_up_f = cuda.shared.array(({warps}, {width}), int32)",
        "    for idx in range(lane, wq, 32):",
        "        s_code[slot, idx] = int32(b[c0 + idx])",
        "        s_up_h[slot, idx] = row_h[c0 + idx + 1]",
        "        s_up_f[slot, idx] = row_f[c0 + idx + 1]",
        "    cuda.syncwarp()" if shuffles else "    cuda.syncthreads()",
    ]
    lines += codegen.scalars()
    if checkpoints:  # which checkpoint row / column this sub-tile writes, -1 for none
        lines += ["    rslot = row_slot[p]", "    cslot = col_slot[qc]"]
    for k in r:  # registers: query code offsets, H and E of the column on the left
        lines += [
            f"    q{k} = uint32(a[rb + {k}]) * uint32(n_codes) if {k} < nv else uint32(0)",
            f"    h{k} = col_h[rb + {k + 1}] if {k} < nv else zero",
            f"    e{k} = col_e[rb + {k + 1}] if {k} < nv else int32({NEG})",
        ]
    lines += [
        "    diag_in = corner[p] if lane == 0 else (col_h[rb] if rb <= h_rows else zero)",
        "    new_corner = zero",
        "    out_h = zero",
        f"    out_f = int32({NEG})",
    ]
    in_col = " " * 12  # the body of a column's step
    lines += codegen.wavefront("    ", "int32(wq32 + 31)", "lane32", shuffles=shuffles,
                               lane="lane")
    lines += [
        "        if j >= 0 and j < wq32:",
        f"{in_col}if lane == 0:",
        f"{in_col}    in_h = s_up_h[slot, uint32(j)]",
        f"{in_col}    in_f = s_up_f[slot, uint32(j)]",
        f"{in_col}    if j == wq32 - 1:",
        f"{in_col}        new_corner = in_h",
        f"{in_col}code = uint32(s_code[slot, uint32(j)])",
    ]
    lines += codegen.column_start(in_col) + [f"{in_col}if full:"]
    for k in r:
        lines += cell(k, in_col + "    ")
    lines += [f"{in_col}else:"]
    for k in r:
        lines += [f"{in_col}    if {k} < nv:"] + cell(k, in_col + "        ")
    lines += codegen.hand_on(in_col) + [
        f"{in_col}if lane == 31:",
        f"{in_col}    row_h[c0 + j + 1] = up",
        f"{in_col}    row_f[c0 + j + 1] = f",
    ]
    if checkpoints:  # lane 31 holds the strip's last row: a row cut when strip p ends on one
        lines += [
            "                if rslot >= 0:",
            "                    ck_row_h[rslot, c0 + j + 1] = up",
            "                    ck_row_f[rslot, c0 + j] = f",
        ]
    # Columns come in increasing order: only a greater maximum is a new best.
    lines += codegen.best_update(in_col, rows, "c0 + j + 1", "rb", passes=False,
                                 guard=" and {k} < nv")
    for k in r:
        lines += [f"    if {k} < nv:", f"        col_h[rb + {k + 1}] = h{k}",
                  f"        col_e[rb + {k + 1}] = e{k}"]
        if checkpoints:  # the sub-tile's last column, a column cut when it ends on one
            lines += ["        if cslot >= 0:", f"            ck_col_h[cslot, rb + {k}] = h{k}",
                      f"            ck_col_e[cslot, rb + {k}] = e{k}"]
    lines += ["    cuda.syncwarp()" if shuffles else "    cuda.syncthreads()"]
    # The warp's best cell, by the tie rule.
    lines += codegen.best_reduction(32, shuffles=shuffles, scratch="xch64[{}]",
                                    guard="lane + {shift} < 32")
    lines += [
        "    if lane == 0:",
        "        corner[p] = new_corner",
        "        old = best_out[p, 0]",
        ("        if best > 0 and (best > old or (best == old and (best_j < best_out[p, 2] or "
        "(best_j == best_out[p, 2] and best_i < best_out[p, 1])))):"),
        "            best_out[p, 0] = best",
        "            best_out[p, 1] = best_i",
        "            best_out[p, 2] = best_j",
    ]
    return "\n".join(lines) + "\n"


def shape() -> tuple[int, int, int]:
    """``(rows per lane, sub-tile width, warps per block)`` here: small in the simulator."""
    if simulated():
        return SIMULATOR_ROWS, SIMULATOR_WIDTH, 1
    return ROWS, WIDTH, WARPS_PER_BLOCK


def grid_shape(h: int, w: int) -> tuple[int, int]:
    """``(rows per lane, sub-tile width)`` for sweeping an ``h x w`` tile here.

    The score pass's shape (:data:`ROWS`, :data:`WIDTH`) when the tile's longest
    anti-diagonals hold at least half as many of its sub-tiles as the GPU runs at once
    (16 warps a multiprocessor, the cost model's slots): the regime where it was measured
    at 527 GCUPS on an H100 (1,953 sub-tiles a diagonal for 2,112 slots).  Smaller tiles
    use :data:`GRID_ROWS` x :data:`GRID_WIDTH`: ``(h + w) / 128`` launches instead of
    ``h / 256 + w / 512``, but each 6.8 times shorter (159 steps of 4 rows against 543 of
    8), so a square tile's critical path is 2.5 times shorter, with 8 times as many
    sub-tiles in flight.  The simulator's shape in the simulator.
    """
    if simulated():
        return SIMULATOR_ROWS, SIMULATOR_WIDTH
    slots = driver.attribute("multiprocessors") * 16
    if 2 * min(h // (32 * ROWS), w // WIDTH) >= slots:
        return ROWS, WIDTH
    return GRID_ROWS, GRID_WIDTH


#: Argument types of a launch (:func:`score_grid_gpu`), for building ahead; a kernel with
#: checkpoints takes :data:`CHECKPOINT_ARGUMENTS` more.
SIGNATURE = ("uint8[::1], uint8[::1], int32[:, ::1], int64, int64, int64, int64, int64, int64, "
             "int64, int64, int32[::1], int32[::1], int32[::1], int32[::1], int32[::1], "
             "int64[:, ::1]")
CHECKPOINT_ARGUMENTS = "int32[::1], int32[::1], int32[:, ::1], int32[:, ::1], int32[:, ::1], int32[:, ::1]"


def render(rows: int, width: int, warps: int, *, dpx: bool = False,
           checkpoints: bool = False) -> Rendered:
    """The anti-diagonal kernel's text for a shape, for
    :func:`swdask.kernels.cuda.compile.get_kernel` (``family="tile"``)."""
    from numba import cuda

    in_simulator = simulated()
    use_dpx = dpx and not in_simulator
    namespace = {"cuda": cuda, "int32": np.int32, "int64": np.int64, "uint32": np.uint32}
    link = codegen.link_dpx32(namespace, "swt", DPX_NAMES) if use_dpx else ()
    source = _kernel_source(rows, width, shuffles=not in_simulator, dpx=use_dpx, warps=warps,
                            checkpoints=checkpoints)
    return Rendered(name=f"tile-R{rows}-W{width}-warps{warps}-dpx{int(use_dpx)}"
                         f"-checkpoints{int(checkpoints)}",
                    source=source, namespace=namespace, link=link)


def signature(checkpoints: bool = False, **shape: Any) -> str:
    """The argument types of a launch, with or without checkpoint outputs."""
    return f"void({SIGNATURE}, {CHECKPOINT_ARGUMENTS})" if checkpoints else f"void({SIGNATURE})"


def shapes(dpx: bool) -> list[dict[str, Any]]:
    """The shapes :func:`shape` can choose (the score pass's and the grids'), with and
    without checkpoints, as ``render`` arguments."""
    return [{"rows": r, "width": w, "warps": WARPS_PER_BLOCK, "dpx": dpx, "checkpoints": c}
            for r, w in ((ROWS, WIDTH), (GRID_ROWS, GRID_WIDTH)) for c in (False, True)]


def score_tile_gpu(
    a: np.ndarray, b: np.ndarray, matrix: np.ndarray, gap_open: int, gap_extend: int,
    top_h: np.ndarray, top_f: np.ndarray, left_h: np.ndarray, left_e: np.ndarray, *,
    rows: int | None = None, width: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.int64, int, int]:
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
        and integers (``best`` a numpy.int64).

    Notes
    -----
    Uploads the two residue slices and the four boundaries (``O(h + w)``), launches
    one kernel per anti-diagonal of sub-tiles (``P + Q - 1`` launches, ``P`` strips of
    ``32 * rows`` rows, ``Q`` sub-tiles of ``width`` columns), and downloads the
    boundaries and ``P`` strip bests.  An empty tile is left to the CPU kernel.
    """
    return score_grid_gpu(a, b, matrix, gap_open, gap_extend, top_h, top_f, left_h, left_e,
                          rows=rows, width=width).tile


def score_grid_gpu(
    a: np.ndarray, b: np.ndarray, matrix: np.ndarray, gap_open: int, gap_extend: int,
    top_h: np.ndarray, top_f: np.ndarray, left_h: np.ndarray, left_e: np.ndarray,
    row_cuts: Sequence[int] = (), col_cuts: Sequence[int] = (), *, rows: int | None = None,
    width: int | None = None,
) -> GridBoundaries:
    """:func:`swdask.kernels.cpu.tile.score_grid` on the GPU: a tile and the boundaries of
    every tile of a grid over it, from one sweep of the tile.

    Parameters
    ----------
    a, b, matrix, gap_open, gap_extend, top_h, top_f, left_h, left_e
        As :func:`~swdask.kernels.cpu.tile.score_tile` (host arrays).
    row_cuts, col_cuts : sequence of int, default ()
        Interior cuts: row cuts multiples of the strip height ``32 * rows``, column cuts
        multiples of ``width``, increasing, inside the tile.
    rows, width : int, optional
        As :func:`score_tile_gpu`.

    Returns
    -------
    swdask.kernels.cpu.tile.GridBoundaries
        Host arrays; equal to :func:`~swdask.kernels.cpu.tile.score_grid`'s.

    Raises
    ------
    ValueError
        A cut off the strip / sub-tile multiples or outside the tile; an alphabet of more
        than 32 codes.

    Notes
    -----
    The sweep of :func:`score_tile_gpu` with the checkpointing kernel (module docstring),
    when there are cuts: ``(P + Q - 1)`` launches in all, the cut boundaries written as
    they pass, ``8 * (h * column cuts + w * row cuts)`` more bytes on the device.
    """
    h, w = int(a.shape[0]), int(b.shape[0])
    default_rows, default_width, warps = shape()
    rows = default_rows if rows is None else int(rows)
    width = default_width if width is None else int(width)
    span = 32 * rows
    row_lines = grid_lines(row_cuts, h, span)
    col_lines = grid_lines(col_cuts, w, width)
    if h == 0 or w == 0:  # no cuts fit: the CPU kernel's empty tile
        from ..cpu.tile import score_grid  # (Numba: only here)

        return score_grid(a, b, matrix, gap_open, gap_extend, top_h, top_f, left_h, left_e)
    matrix = np.ascontiguousarray(matrix, dtype=np.int32)
    if matrix.shape[0] > 32:
        raise ValueError(f"the GPU tile kernel takes alphabets of at most 32 codes, not {matrix.shape[0]}")
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
    use_dpx = codegen.has_dpx()
    cuda = device_api()  # the driver on a GPU (no Numba), the simulator in CI
    d_a = cuda.to_device(np.ascontiguousarray(a, dtype=np.uint8))
    d_b = cuda.to_device(np.ascontiguousarray(b, dtype=np.uint8))
    d_m = cuda.to_device(matrix)
    d_row_h, d_row_f = cuda.to_device(row_h), cuda.to_device(row_f)
    d_col_h, d_col_e = cuda.to_device(col_h), cuda.to_device(col_e)
    d_corner = cuda.to_device(corner)
    d_best = cuda.to_device(np.zeros((n_p, 3), dtype=np.int64))
    r_cuts = np.asarray(row_lines[1:-1], dtype=np.int64)
    c_cuts = np.asarray(col_lines[1:-1], dtype=np.int64)
    checkpoints = bool(len(r_cuts) or len(c_cuts))
    extra = ()
    if checkpoints:
        # Strip p ends on row cut k when (p + 1) * span == r_cuts[k]; sub-tile column qc
        # ends on column cut k when (qc + 1) * width == c_cuts[k].
        row_slot = np.full(n_p, -1, dtype=np.int32)
        row_slot[r_cuts // span - 1] = np.arange(len(r_cuts))
        col_slot = np.full(n_q, -1, dtype=np.int32)
        col_slot[c_cuts // width - 1] = np.arange(len(c_cuts))
        # At least one row each: the kernel takes no empty arrays, and writes none of these
        # when the slots say -1.
        d_ck = [cuda.device_array((max(len(r_cuts), 1), w + 1), dtype=np.int32),
                cuda.device_array((max(len(r_cuts), 1), w), dtype=np.int32),
                cuda.device_array((max(len(c_cuts), 1), h), dtype=np.int32),
                cuda.device_array((max(len(c_cuts), 1), h), dtype=np.int32)]
        extra = (cuda.to_device(row_slot), cuda.to_device(col_slot), *d_ck)
    kernel = get_kernel("tile", rows=rows, width=width, warps=warps, dpx=use_dpx,
                        checkpoints=checkpoints)
    threads = 32 * warps
    o_e = int(gap_open) + int(gap_extend)
    for d in range(n_p + n_q - 1):
        p_lo = max(0, d - n_q + 1)
        p_hi = min(n_p - 1, d)
        blocks = math.ceil((p_hi - p_lo + 1) / warps)
        kernel[blocks, threads](d_a, d_b, d_m, h, w, d, p_lo, p_hi, n_q, o_e, int(gap_extend),
                                d_row_h, d_row_f, d_col_h, d_col_e, d_corner, d_best, *extra)
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
    tile = (bottom_h, bottom_f, col_h[1:].copy(), col_e[1:].copy(), np.int64(best), best_i, best_j)
    if checkpoints:
        ck_row_h, ck_row_f, ck_col_h, ck_col_e = (x.copy_to_host() for x in d_ck)
        ck_row_h, ck_row_f = ck_row_h[:len(r_cuts)], ck_row_f[:len(r_cuts)]
        ck_col_h, ck_col_e = ck_col_h[:len(c_cuts)], ck_col_e[:len(c_cuts)]
        ck_row_h[:, 0] = np.asarray(left_h)[r_cuts - 1]  # the left boundary, as bottom_h[0]
    else:
        ck_row_h = np.empty((0, w + 1), dtype=np.int32)
        ck_row_f = np.empty((0, w), dtype=np.int32)
        ck_col_h = np.empty((0, h), dtype=np.int32)
        ck_col_e = np.empty((0, h), dtype=np.int32)
    return GridBoundaries(ck_row_h, ck_row_f, ck_col_h, ck_col_e, tile)
