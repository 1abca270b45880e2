"""Needleman-Wunsch scores of many (query, subject) pairs on the GPU, with an on-device
identity-bound filter: the score pass of :func:`swdask.all_pairs`.

Layout
------
One warp per pair (LazyRScan's one thread group per pair, Truong et al. 2014, in the
arrangement of :mod:`swdask.kernels.cuda.inter_task`).  Lane ``t`` holds query rows
``[p*32*R + t*R, p*32*R + (t+1)*R)`` of pass ``p`` in registers (H and E of each row and
the row's offset into the substitution matrix, ``R`` rows unrolled in the generated
source) and the lanes sweep the subject as a wavefront: at step ``k`` lane ``t``
computes column ``k - t`` and hands the H and F of its last row to lane ``t + 1`` with
one warp shuffle each.  A query longer than ``32*R`` rows takes several passes; between
passes the last lane's row (H and F per subject column) is kept in a per-warp slice of a
global boundary buffer, the only global traffic besides reading residues: no DP matrix
and no DP row of the pair ever lives in global memory for queries up to ``32*R``
residues.  After the last column the registers hold column ``n``, so the lane owning
query row ``m`` reads the global score ``H(m, n)`` straight from a register.

Every pair has its own query, so there is no query profile: the substitution matrix
(at most 32 x 32 codes, int32) sits in shared memory and each lane keeps, per register
row, the offset ``code * alphabet`` of its query residue; a cell costs one shared load
(for DNA's 5 x 5 matrix all 25 entries lie in distinct banks).  On Hopper the recurrence
uses the DPX instructions ``__viaddmax_s32`` and ``__vimax3_s32`` (linked CUDA C++).

Pairs are given compactly, as the all-pairs planner produces them: for the ``k``-th
query with work, its index ``q_list[k]``, its first subject ``s_lo[k]`` and the prefix
sum ``pair_start`` of the pair counts; pair ``p`` belongs to the query found by a binary
search of ``pair_start`` and to subject ``s_lo[k] + p - pair_start[k]``.  Warps take pairs
in a grid-stride loop, so the grid (and the boundary buffer) is sized to the GPU, not to
the work.

Filter on the device: every lane computes the identity bound ``L(m, n)`` of the pair
(:func:`lowest_score`, the same integer formula as
:meth:`swdask.jobs.allpairs.plan.IdentityBound.lowest_scores`); when the score is at least
``need = max(L, min_score)`` the owning lane appends ``(query, subject, score)`` to the
output with one atomic add.  Nothing else comes back to the host.

Early abandon (LazyRScan's laziness, made exact): after each pass but the last, the last
lane holds row ``r`` of the matrix and bounds the final score by
``U = max_j H(r, j) + amax*min(m - r, n - j) - e*|(m - r) - (n - j)|`` (any path to
``(m, n)`` crosses row ``r`` with a prefix scoring at most ``H(r, j)``; what is left aligns
at most ``min`` pairs worth at most ``amax = max(matrix max, 0)`` each and has at least
``|difference|`` gap columns costing at least ``e`` each).  When ``U < need`` the pair
cannot pass and the warp moves on to its next pair: for unrelated 16S genes at 97 %
identity that happens after the first or second of four passes.

Scores are exact 32-bit integers (16S genes of 1.5 kb score within +-30,000).
Launch: blocks of :func:`~swdask.kernels.cuda.inter_task.threads_per_block` threads (128 on
a GPU, one warp of 32 Python threads in the simulator, whose lanes exchange through shared
memory and block barriers instead of shuffles: the same generated text otherwise).

References
----------
Truong, Nguyen, Hoang, Le (2014). LazyRScan: an all-pairs global alignment kernel for
16S rRNA clustering on the GPU (6,000 pairs/s on a K20 at 97 % identity).
Huang et al. (2015); CUDASW++ 4.0 (Schmidt et al. 2024): register tiles of query rows.
"""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np
from numba import config, cuda

from . import codegen
from .compile import Rendered, get_kernel
from .inter_task import NEG, threads_per_block

if TYPE_CHECKING:
    import numpy.typing as npt

#: Query rows per lane (unrolled registers).  12 rows give 384-row passes: a 1.5 kb 16S
#: gene takes 4 passes with 6 % padding (the CUDASW++ 4.0 tile height measured best by
#: :mod:`~swdask.kernels.cuda.inter_task` for long queries).
ROWS = 12
#: Rows per lane in the simulator (a Python thread per lane runs every unrolled row).
SIMULATOR_ROWS = 2
#: Lanes per pair: one warp.
GROUP = 32
#: Largest alphabet of the shared matrix (codes 0..31).
MAX_ALPHABET = 32
#: Substitution score of the rows past a query's end (a lane's last pass): far below any
#: real cell, and 383 such rows stay well inside int32.
PAD_SCORE = -(1 << 20)
#: Bound sentinels (int64): "no bound" (every score passes) and "cannot pass".
NO_BOUND = -(1 << 62)
CANNOT_PASS = 1 << 62
#: Warps per SM kept resident by the grid-stride launch (2048 threads per SM on Hopper).
WARPS_PER_SM = 64
#: Simulator: blocks launched (each a warp of 32 Python threads).
SIMULATOR_BLOCKS = 2



def lowest_score(m, n, num, den, ident, penalty, local):
    """The identity bound ``L`` of a pair, in int64 arithmetic (host and device).

    ``num / den`` is the identity threshold, ``ident`` the smallest identity score,
    ``penalty`` the largest penalty of a non-identity column; ``local`` nonzero for
    local mode.  See :class:`swdask.jobs.allpairs.plan.IdentityBound` for the derivation and proof.
    Returns :data:`NO_BOUND` for a zero threshold and :data:`CANNOT_PASS` for a pair whose
    lengths rule it out.
    """
    if num == 0:
        return NO_BOUND
    if local != 0:
        return 1
    short = min(m, n)
    long_ = max(m, n)
    if short * den < num * long_:
        return CANNOT_PASS
    # The three corners of the feasible (matches, columns) triangle, each rounded up.
    x1 = long_ * (num * ident - (den - num) * penalty)
    f1 = -((-x1) // den)
    f2 = short * ident - (long_ - short) * penalty
    x3 = short * ((ident + penalty) * num - penalty * den)
    f3 = -((-x3) // num)
    return min(f1, min(f2, f3))


_lowest_score_device = cuda.jit(device=True)(lowest_score)


def _kernel_source(rows: int, threads: int, shuffles: bool, dpx: bool, local: bool = False) -> str:
    """Source of the kernel for ``rows`` register rows per lane (see the module docstring).

    ``shuffles``: lanes exchange through warp shuffles (GPU) or shared memory and block
    barriers (simulator, whose blocks are one warp).  ``dpx``: Hopper's fused max.
    ``local``: Smith-Waterman (H floored at 0, the best cell and its end kept by each lane
    and combined over the warp by the tie rule of every swdask kernel), else
    Needleman-Wunsch with the early abandon.
    """
    r = range(rows)
    span = GROUP * rows

    sync = "cuda.syncwarp()" if shuffles else "cuda.syncthreads()"
    lines = [
        "def kernel(q_res, q_off, s_res, s_off, q_list, s_lo, pair_start, matrix, alpha,",
        "           gap_oe, gap_e, num, den, ident, penalty, local, min_score, amax, boundary,",
        "           max_n, counter, out_q, out_s, out_score, out_qend, out_send):",
        "    tx = cuda.threadIdx.x",
        # The matrix, then a row of PAD_SCORE for the rows past a query's end (the
        # lane's last pass): they score far below every real cell, so a local maximum
        # never lies there and a global H(m, n) never reads them.
        f"    smat = cuda.shared.array({MAX_ALPHABET * (MAX_ALPHABET + 1)}, int32)",
        f"    xch = cuda.shared.array((2, {threads}), int32)" if not shuffles else "    pass",
        f"    for idx in range(tx, alpha * alpha + alpha, {threads}):",
        f"        smat[idx] = matrix[idx] if idx < alpha * alpha else {PAD_SCORE}",
        "    pad_row = int32(alpha * alpha)",
        "    cuda.syncthreads()",
        f"    lane = tx % {GROUP}",
        f"    warp = (cuda.blockIdx.x * {threads} + tx) // {GROUP}",
        f"    n_warps = (cuda.gridDim.x * {threads}) // {GROUP}",
        "    n_pairs = pair_start[pair_start.shape[0] - 1]",
        "    n_lists = q_list.shape[0]",
        "    base = warp * 2 * max_n",
        "    capacity = out_q.shape[0]",
    ]
    lines += codegen.scalars(best=False)
    lines += [
        "    pair = warp",
        "    while pair < n_pairs:",
        # Binary search: the last k with pair_start[k] <= pair.
        "        lo = 0",
        "        hi = n_lists",
        "        while hi - lo > 1:",
        "            mid = (lo + hi) // 2",
        "            if pair_start[mid] <= pair:",
        "                lo = mid",
        "            else:",
        "                hi = mid",
        "        qi = q_list[lo]",
        "        sj = s_lo[lo] + (pair - pair_start[lo])",
        "        qstart = q_off[qi]",
        "        m = q_off[qi + 1] - qstart",
        "        sstart = s_off[sj]",
        "        n = s_off[sj + 1] - sstart",
        "        result = int32(0)",
        "        if m == 0 and n > 0:",
        "            result = int32(-(gap_oe + (n - 1) * gap_e))",
        "        if n == 0 and m > 0:",
        "            result = int32(-(gap_oe + (m - 1) * gap_e))",
        "        need = max(lowest_score(m, n, num, den, ident, penalty, local), min_score)",
        "        abandoned = False",
        "        owner = 0",
        "        best = zero",
        "        best_i = 0",
        "        best_j = 0",
        "        if m > 0 and n > 0:",
        f"            owner = ((m - 1) % {span}) // {rows}",
        f"        passes = (m + {span} - 1) // {span} if n > 0 else 0",
        "        for p in range(passes):",
        f"            row0 = p * {span} + lane * {rows}",
        # Lane 31's rows end on row r = (p+1)*span: it bounds H(m, n) from that row (below).
        f"            dm = int32(m - (p + 1) * {span})",
        (f"            ubest = int32(-(gap_oe + ((p + 1) * {span} - 1) * gap_e) + amax * min(dm, int32(n))"
        " - gap_e * abs(dm - int32(n)))"),
    ]
    for k in r:  # column 0: H 0 (local) or the leading gap's cost (global)
        lines += [
            f"            qo{k} = int32(int32(q_res[qstart + row0 + {k}]) * alpha) if row0 + {k} < m else pad_row",
            f"            h{k} = zero" if local else
            f"            h{k} = int32(-(gap_oe + (row0 + {k}) * gap_e))",
            f"            e{k} = int32({NEG})",
        ]
    lines += [
        "            diag_in = zero" if local else
        "            diag_in = zero if row0 == 0 else int32(-(gap_oe + (row0 - 1) * gap_e))",
        "            out_h = zero",
        f"            out_f = int32({NEG})",
    ]
    in_pass, in_step, in_col = " " * 12, " " * 16, " " * 20  # the loops' bodies
    lines += codegen.wavefront(in_pass, f"n + {GROUP - 1}", "lane", shuffles=shuffles,
                               lane="lane")
    lines += [
        f"{in_step}if lane == 0:",
        f"{in_col}if p > 0:",
        f"{in_col}    if j < n:",
        f"{in_col}        in_h = boundary[base + 2 * j]",
        f"{in_col}        in_f = boundary[base + 2 * j + 1]",
        f"{in_col}else:  # row 0: H 0 (local) or the leading gap's cost (global)",
        f"{in_col}    in_h = zero" if local else f"{in_col}    in_h = int32(-(gap_oe + j * gap_e))",
        f"{in_col}    in_f = int32({NEG})",
        f"{in_step}if j >= 0 and j < n:",
        f"{in_col}code = int32(s_res[sstart + j])",
    ]
    lines += codegen.column_start(in_col, cmax=local)
    for k in r:  # global: no zero floor, no column maximum
        lines += codegen.gotoh_cell(k, in_col, f"smat[qo{k} + code]", dpx=dpx, local=local,
                                    cmax=local)
    lines += codegen.hand_on(in_col)
    lines += codegen.edge_store(in_col, f"lane == {GROUP - 1} and p + 1 < passes", "base + 2 * j")
    if local:
        lines += codegen.best_update(in_col, rows, "j + 1", "row0", passes=True)
    else:
        lines += [
            "                        dn = int32(n - 1 - j)",
            "                        ubest = max(ubest, int32(up + amax * min(dm, dn) - gap_e * abs(dm - dn)))",
            # After the last column the registers hold column n: the owner of row m reads it.
            "            if p == passes - 1 and lane == owner:",
            f"                last = (m - 1) % {rows}",
        ]
        for k in r:
            lines += [f"                if last == {k}:", f"                    result = h{k}"]
    lines += [
        f"            {sync}",
    ]
    # Early abandon (LazyRScan's lazy evaluation): any path to (m, n) crosses row r at some
    # column j with a prefix scoring at most H(r, j), then aligns at most min(dm, dn)
    # pairs (each <= amax) and has at least |dm - dn| gap columns (each costing >= e), so
    # H(m, n) <= max_j H(r, j) + amax*min(dm, dn) - e*|dm - dn|.  Below the pair's need,
    # the pair cannot pass: the warp stops it.
    if local:
        # No abandon: a local alignment may still begin below any row.  The lanes' best
        # cells are combined (highest score, then smallest column, then smallest row) and
        # lane 0 reports the pair's.
        lines += ["    " + line for line in codegen.best_reduction(
            GROUP, shuffles=shuffles, guard="tx + {shift} < {threads}", threads=threads)]
        lines += [
            "        if lane == 0 and best >= need:",
            "            slot = cuda.atomic.add(counter, 0, 1)",
            "            if slot < capacity:",
            "                out_q[slot] = qi",
            "                out_s[slot] = sj",
            "                out_score[slot] = best",
            "                out_qend[slot] = best_i",
            "                out_send[slot] = best_j",
        ]
    else:
        if shuffles:
            lines += ["            ub = cuda.shfl_sync(0xFFFFFFFF, ubest, 31)"]
        else:
            lines += ["            xch[0, tx] = ubest", "            cuda.syncthreads()",
                      "            ub = xch[0, 31]", "            cuda.syncthreads()"]
        lines += [
            "            if p + 1 < passes and ub < need:",
            "                abandoned = True",
            "                break",
            "        if abandoned and lane == 0:",
            "            cuda.atomic.add(counter, 1, 1)",
            "        if lane == owner and not abandoned:",
            "            if result >= need:",
            "                slot = cuda.atomic.add(counter, 0, 1)",
            "                if slot < capacity:",
            "                    out_q[slot] = qi",
            "                    out_s[slot] = sj",
            "                    out_score[slot] = result",
            "                    out_qend[slot] = m",  # a global alignment ends at (m, n)
            "                    out_send[slot] = n",
        ]
    lines += [
        f"        {sync}",
        "        pair += n_warps",
    ]
    return "\n".join(lines) + "\n"


#: Hopper DPX instructions of the (global) recurrence, linked into the GPU kernel when
#: asked for.
DPX_NAMES = ("viaddmax", "vimax3")
#: The same for the local recurrence (its H is floored at 0 in the same instruction).
LOCAL_DPX_NAMES = ("viaddmax", "vimax3_relu")
DPX_SOURCE = codegen.dpx32_source("ap", DPX_NAMES)


#: Argument types of a launch (:func:`score_passing_pairs`), for building ahead.
SIGNATURE = ("void(uint8[::1], int64[::1], uint8[::1], int64[::1], int64[::1], int64[::1], "
             "int64[::1], int32[::1], int64, int64, int64, int64, int64, int64, int64, int64, "
             "int64, int64, int32[::1], int64, int64[::1], int64[::1], int64[::1], int32[::1], "
             "int32[::1], int32[::1])")


def render(rows: int = ROWS, *, dpx: bool = False, local: bool = False) -> Rendered:
    """The kernel's text for ``rows`` register rows per lane, for
    :func:`swdask.kernels.cuda.compile.get_kernel` (``family="all_pairs"``); ``local``
    for Smith-Waterman, else Needleman-Wunsch.

    In the simulator the DPX variant runs its plain-max twin and lanes exchange through
    shared memory; on a GPU through warp shuffles.
    """
    simulated = bool(config.ENABLE_CUDASIM)
    use_dpx = dpx and not simulated
    namespace = {"cuda": cuda, "int32": np.int32, "lowest_score": _lowest_score_device}
    names = LOCAL_DPX_NAMES if local else DPX_NAMES
    link = codegen.link_dpx32(namespace, "ap", names) if use_dpx else ()
    source = _kernel_source(rows, threads_per_block(), shuffles=not simulated, dpx=use_dpx,
                            local=local)
    return Rendered(name=f"all_pairs-R{rows}-dpx{int(use_dpx)}" + ("-local" if local else ""),
                    source=source, namespace=namespace, link=link)


def signature(**shape: Any) -> str:
    """The argument types of a launch (the same for every shape)."""
    return SIGNATURE


def shapes(dpx: bool) -> list[dict[str, Any]]:
    """The shapes :func:`score_passing_pairs` launches by default (global and local), as
    ``render`` arguments."""
    return [{"rows": ROWS, "dpx": dpx, "local": local} for local in (False, True)]


def _grid(n_pairs: int, threads: int) -> int:
    """Blocks of the grid-stride launch: enough warps to fill the GPU, no more than pairs."""
    warps_per_block = threads // GROUP
    wanted = max(1, math.ceil(n_pairs / warps_per_block))
    if config.ENABLE_CUDASIM:
        return min(wanted, SIMULATOR_BLOCKS)
    device = cuda.get_current_device()
    resident = device.MULTIPROCESSOR_COUNT * WARPS_PER_SM // warps_per_block
    return min(wanted, resident)


def score_passing_pairs(
    q_res: npt.NDArray[np.uint8], q_off: npt.NDArray[np.int64], s_res: npt.NDArray[np.uint8],
    s_off: npt.NDArray[np.int64], q_list: npt.NDArray[np.int64], s_lo: npt.NDArray[np.int64],
    s_count: npt.NDArray[np.int64], matrix: np.ndarray, gap_open: int, gap_extend: int,
    bound: tuple[int, int, int, int, int], *, min_score: int | None = None,
    rows: int | None = None, dpx: bool | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int32],
           npt.NDArray[np.int32], npt.NDArray[np.int32], float, int]:
    """Global (or local) scores of the listed pairs on the GPU; only the pairs passing the
    filter come back, with their end cells.

    Parameters
    ----------
    q_res, s_res : numpy.ndarray of uint8
        Residue codes of the queries (subjects), concatenated.
    q_off, s_off : numpy.ndarray of int64
        Offsets: sequence ``i`` is ``res[off[i]:off[i + 1]]``.
    q_list, s_lo, s_count : numpy.ndarray of int64
        The pairs: query ``q_list[k]`` against subjects ``s_lo[k] .. s_lo[k] + s_count[k] - 1``.
    matrix : numpy.ndarray of int
        Substitution scores by code, at most 32 x 32.
    gap_open, gap_extend : int
        A gap of k residues costs ``gap_open + k * gap_extend``.
    bound : tuple of int
        ``(num, den, ident, penalty, local)`` of :func:`lowest_score`; ``local`` nonzero
        scores local alignments (Smith-Waterman: best cell anywhere, no early abandon),
        else global ones.
    min_score : int, optional
        Keep only scores of at least this too (default: no such limit).
    rows : int, optional
        Query rows per lane (default :data:`ROWS` on a GPU, :data:`SIMULATOR_ROWS` in the
        simulator).
    dpx : bool, optional
        Use Hopper's DPX instructions (default: when the GPU has them).

    Returns
    -------
    query, subject, score : numpy.ndarray
        The passing pairs (int64 indices into the query and subject offsets, int32
        scores), sorted by (query, subject).
    query_end, subject_end : numpy.ndarray of int32
        Each pair's end cell (exclusive ends): ``(m, n)`` in global mode; in local mode
        the best cell, the smallest column then the smallest row among equals, as the CPU
        kernels choose it.
    seconds : float
        Kernel time (launch to synchronisation, uploads excluded).
    abandoned : int
        Pairs stopped early, after a pass whose bound on the final score fell below
        ``max(L, min_score)`` (they cannot pass; see the kernel source's comment).

    Raises
    ------
    ValueError
        An alphabet over :data:`MAX_ALPHABET` codes.
    """
    matrix = np.ascontiguousarray(matrix, dtype=np.int32)
    alpha = matrix.shape[0]
    if alpha > MAX_ALPHABET:
        raise ValueError(f"the all-pairs GPU kernel takes at most {MAX_ALPHABET} codes, got {alpha}")
    q_list = np.ascontiguousarray(q_list, dtype=np.int64)
    s_lo = np.ascontiguousarray(s_lo, dtype=np.int64)
    s_count = np.ascontiguousarray(s_count, dtype=np.int64)
    keep = s_count > 0
    q_list, s_lo, s_count = q_list[keep], s_lo[keep], s_count[keep]
    pair_start = np.zeros(len(q_list) + 1, dtype=np.int64)
    np.cumsum(s_count, out=pair_start[1:])
    n_pairs = int(pair_start[-1])
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32),
             np.zeros(0, np.int32), np.zeros(0, np.int32))
    if n_pairs == 0:
        return (*empty, 0.0, 0)
    if dpx is None:
        dpx = codegen.has_dpx()
    if rows is None:
        rows = SIMULATOR_ROWS if config.ENABLE_CUDASIM else ROWS
    threads = threads_per_block()
    num, den, ident, penalty, local = (int(x) for x in bound)
    kernel = get_kernel("all_pairs", rows=rows, dpx=dpx, local=bool(local))
    grid = _grid(n_pairs, threads)
    n_warps = grid * threads // GROUP
    s_len = np.diff(np.asarray(s_off, dtype=np.int64))
    max_n = max(1, int(s_len.max()) if s_len.size else 1)
    d_q_res = cuda.to_device(np.ascontiguousarray(q_res, dtype=np.uint8))
    d_s_res = cuda.to_device(np.ascontiguousarray(s_res, dtype=np.uint8))
    d_q_off = cuda.to_device(np.ascontiguousarray(q_off, dtype=np.int64))
    d_s_off = cuda.to_device(np.ascontiguousarray(s_off, dtype=np.int64))
    d_q_list = cuda.to_device(q_list)
    d_s_lo = cuda.to_device(s_lo)
    d_start = cuda.to_device(pair_start)
    d_matrix = cuda.to_device(matrix.ravel())
    d_boundary = cuda.device_array(n_warps * 2 * max_n, dtype=np.int32)
    floor = NO_BOUND if min_score is None else int(min_score)
    amax = max(int(matrix.max()), 0)  # the most one aligned pair can add
    capacity = min(n_pairs, 1 << 16)
    seconds = 0.0
    while True:
        d_counter = cuda.to_device(np.zeros(2, dtype=np.int64))  # passing, abandoned
        d_out_q = cuda.device_array(capacity, dtype=np.int64)
        d_out_s = cuda.device_array(capacity, dtype=np.int64)
        d_out_score = cuda.device_array(capacity, dtype=np.int32)
        d_out_qend = cuda.device_array(capacity, dtype=np.int32)
        d_out_send = cuda.device_array(capacity, dtype=np.int32)
        cuda.synchronize()
        tick = time.perf_counter()
        kernel[grid, threads](d_q_res, d_q_off, d_s_res, d_s_off, d_q_list, d_s_lo, d_start,
                              d_matrix, alpha, gap_open + gap_extend, gap_extend, num, den, ident,
                              penalty, local, floor, amax, d_boundary, max_n, d_counter, d_out_q,
                              d_out_s, d_out_score, d_out_qend, d_out_send)
        cuda.synchronize()
        seconds += time.perf_counter() - tick
        found, abandoned = (int(x) for x in d_counter.copy_to_host())
        if found <= capacity:
            break
        capacity = found  # rare: more passing pairs than room; run again with room for all
    out_q = d_out_q.copy_to_host()[:found]
    out_s = d_out_s.copy_to_host()[:found]
    out_score = d_out_score.copy_to_host()[:found]
    out_qend = d_out_qend.copy_to_host()[:found]
    out_send = d_out_send.copy_to_host()[:found]
    order = np.lexsort((out_s, out_q))
    return (out_q[order], out_s[order], out_score[order], out_qend[order], out_send[order],
            seconds, abandoned)
