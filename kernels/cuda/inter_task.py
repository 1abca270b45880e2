"""Smith-Waterman (and global or semiglobal) scores on the GPU: a thread group per
(query, subject) pair.

Layout
------
A group of ``G`` consecutive lanes of a warp (G = 1, 2, 4, 8, 16 or 32) aligns the query
against one subject.  Lane ``t`` of the group holds query rows ``[t*R, (t+1)*R)`` of
the current pass in registers (H and E of each row, ``R`` rows unrolled in the
generated source), and the lanes sweep the subject as a wavefront: at step ``k`` lane
``t`` computes column ``k - t`` and hands the H and F of its last row to lane ``t + 1``
with one warp shuffle each.  A query longer than ``G*R`` rows takes several passes;
between passes the last lane's row is kept in a global boundary buffer (H and F per
subject column), which is the only global traffic besides reading the subject.  This
is CUDASW++ 4.0's arrangement: no DP row or column ever lives in global memory for
queries up to ``G*R`` residues.

The query profile (``profile[a, i]``, rows past the query padded with a negative score)
is staged pass by pass in shared memory as int16 (the default; reading it through L1
measured a third slower), and on Hopper the recurrence uses the DPX instructions
``__viaddmax_s32`` and ``__vimax3_s32_relu`` (linked CUDA C++).  Subjects are read byte
by byte from the partition's concatenated residues, all groups of a warp looping to the
warp's longest subject (the store sorts subjects by length, so that is little waste).
Columns past a subject's end read the pad code; any negative pad score keeps every cell
it touches strictly below a real cell, so scores and ends are unchanged.

Ends follow the rule of every swdask kernel (smallest subject end, then smallest query
end): each lane keeps the column maximum of its rows, takes a new best only when it is
greater, or equal at a smaller column, and finds the first row holding it by scanning
its registers; the group then reduces (score, column, row) lexicographically.

Modes
-----
The mode is part of the kernel's text (:func:`render`'s ``mode``, so of its name and cache
key; a local kernel's text does not mention it).  Global and semiglobal kernels
(:func:`_end_source`) put the query in the last rows of its passes (:func:`end_rows`), so
row ``m`` is the last register row of the group's last lane in the last pass and no row
lies past the query; their cells have no floor at 0, H of row 0 and column 0 follows the
mode, and E and F start from the H beside them.  The end cell follows
:mod:`swdask.kernels.cpu.reference`: ``(m, n)`` (global), or the best of row ``m`` and
column ``n`` by the tie rule (semiglobal).  They take the query's length after ``gap_e``
(:data:`SIGNATURE_END`).

Scores are exact 32-bit integers.  Launch: blocks of ``THREADS`` threads, one group per
pair, ``grid = ceil(n_warps * 32 / THREADS)``; the tile shape (rows per lane, lanes per
pair) comes from :func:`choose_shape`.  The host side (uploads, batches of queries, the
16-bit kernel of :mod:`~swdask.kernels.cuda.inter_task_dpx` and its 32-bit re-runs,
choosing the top hits on the device) is :mod:`swdask.kernels.cuda.launcher`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import codegen
from .codegen import has_dpx
from .compile import Rendered, simulated

if TYPE_CHECKING:
    import numpy.typing as npt

THREADS = 128
SIMULATOR_THREADS = 32
#: Query rows per lane (registers per lane grow with it).  Measured on an H100 with the
#: shared profile and DPX (workflows/benchmarks/gpu_search.py, 100 M residues): 8 rows
#: 897/1110/1129 GCUPS for queries of 379/970/5034 residues, 12 rows 1211/987/1084,
#: 10 rows 676/846/1085, 16 rows 718/900/926, 4 rows 756/702/719.  Counting only the rows
#: that are not padding, 12 rows run about 1,220 GCUPS and 8 rows about 1,170.
ROWS = 8
#: Cells per second of each tile height, net of padding (the measurements above): the
#: shape chooser weighs padded rows with them.
ROW_RATES = {8: 1170.0, 12: 1220.0}
#: Score of the pad code and of query rows past the end: far below any real score.
PAD_SCORE = -(1 << 14)  # fits the int16 shared profile; any negative score would do
NEG = -(1 << 29)
#: The DPX instructions of the recurrence (see :mod:`~swdask.kernels.cuda.codegen`), by mode:
#: global and semiglobal cells have no floor at 0.
DPX_NAMES = ("viaddmax", "vimax3_relu")
DPX_NAMES_END = ("viaddmax", "vimax3")
#: Lower than any score a kernel reports (the traceback's range keeps scores above
#: ``-2**30``): the best cell of a lane that holds no end cell in global mode.
LOW = -(2**31) + 1



def _kernel_source(rows: int, group: int, threads: int, shuffles: bool, shared: bool = False,
                   dpx: bool = False, alphabet: int = 25, mode: str = "local") -> str:
    """Source of the kernel for ``rows`` register rows per lane and groups of ``group``.

    With ``shuffles`` the lanes exchange values through warp shuffles (the GPU kernel);
    without, through shared memory and block barriers (the simulator, which has no warp
    shuffles).  ``shared`` stages each pass's slice of the query profile (int16, at most
    ``alphabet`` codes) in shared memory; ``dpx`` writes the recurrence with Hopper's
    fused max instructions (linked CUDA C++, see :data:`DPX_SOURCE`).  Everything else
    is the same text, so the simulator checks the GPU kernel's logic.  ``mode`` global or
    semiglobal writes :func:`_end_source` instead (the local text is this function's).
    """
    if mode != "local":
        return _end_source(rows, group, threads, shuffles, shared, dpx, alphabet, mode)
    span = group * rows
    in_pass, in_step, in_col = " " * 8, " " * 12, " " * 16  # the loops' bodies
    neg = f"int32({NEG})"
    lines = [
        "def kernel(profile, passes, s_res, s_off, order, warp_len, warp_base, pad_code, gap_oe,",
        "           gap_e, boundary, out_score, out_qend, out_send):",
        f"    sprof = cuda.shared.array(({alphabet}, {span}), int16)" if shared else "    pass",
    ]
    lines += codegen.thread_pair(group, threads, shuffles=shuffles) + codegen.scalars()
    lines += ["    for p in range(passes):", f"{in_pass}row0 = (p * {group} + lane) * {rows}"]
    if shared:  # the block loads this pass's rows of the profile once
        lines += codegen.stage_profile(in_pass, span, threads, flat=False)
    lines += codegen.pass_registers(in_pass, rows, neg)
    lines += codegen.wavefront(in_pass, f"n_steps + {group} - 1", "lane", shuffles=shuffles,
                               single=group == 1)
    lines += [f"{in_step}if lane == 0:"]
    lines += codegen.edge_load(in_col, "p > 0 and j < n_steps", "2 * (slot + j)", neg)
    lines += [f"{in_step}if j >= 0 and j < n_steps:",
              f"{in_col}code = s_res[start + j] if j < n else pad_code"]
    lines += codegen.column_start(in_col)
    for k in range(rows):
        load = (f"int32(sprof[code, lane * {rows} + {k}])" if shared
                else f"profile[code, row0 + {k}]")
        lines += [f"{in_col}s = {load}"] + codegen.gotoh_cell(k, in_col, "s", dpx=dpx)
    lines += codegen.hand_on(in_col)
    lines += codegen.edge_store(in_col, f"lane == {group - 1} and p + 1 < passes",
                                "2 * (slot + j)")
    lines += codegen.best_update(in_col, rows, "j + 1", "row0")
    lines += [f"{in_pass}cuda.syncwarp()" if shuffles else f"{in_pass}cuda.syncthreads()"]
    # The group's best cell, by the tie rule.
    lines += codegen.best_reduction(group, shuffles=shuffles, threads=threads)
    lines += ["    if valid and lane == 0:"] + codegen.write_best("        ")
    return "\n".join(lines) + "\n"


def _end_source(rows: int, group: int, threads: int, shuffles: bool, shared: bool, dpx: bool,
                alphabet: int, mode: str) -> str:
    """Source of the global or semiglobal (``mode``) kernel: :func:`_kernel_source`'s
    arrangement with the query at the bottom of its passes' rows (see :func:`end_rows`).

    The query's last row is then the last register row of the group's last lane in the
    last pass, so that lane reads row ``m`` of each column from a fixed register, and no
    row past the query exists.  Cells have no floor at 0; E and F start from the H of the
    boundary (``E(i,1) = H(i,0) - o - e``), so no sentinel bounds the scores.  Global: the
    end is ``(m, n)``, which the last lane reads at column ``n``.  Semiglobal: the last
    lane takes row ``m`` column by column, every lane scans its rows at column ``n``, and
    the group keeps the best by the tie rule (highest, then smallest column, then
    smallest row); ``(m, 0)`` (score 0) is every lane's first candidate.
    """
    span = group * rows
    last = f"lane == {group - 1} and p == passes - 1"
    in_pass, in_step, in_col = " " * 8, " " * 12, " " * 16  # the loops' bodies
    lines = [
        "def kernel(profile, passes, s_res, s_off, order, warp_len, warp_base, pad_code, gap_oe,",
        "           gap_e, m, boundary, out_score, out_qend, out_send):",
        f"    sprof = cuda.shared.array(({alphabet}, {span}), int16)" if shared else "    pass",
    ]
    lines += codegen.thread_pair(group, threads, shuffles=shuffles)
    lines += codegen.scalars(best=False) + end_best("    ", mode, span)
    lines += ["    for p in range(passes):", f"{in_pass}row0 = (p * {group} + lane) * {rows}"]
    if shared:
        lines += codegen.stage_profile(in_pass, span, threads, flat=False)
    lines += end_registers(in_pass, rows, mode)
    lines += codegen.wavefront(in_pass, f"n_steps + {group} - 1", "lane", shuffles=shuffles,
                               single=group == 1)
    lines += [f"{in_step}if lane == 0:"]
    lines += end_edge_load(in_col, "p > 0 and j < n_steps", "2 * (slot + j)", mode)
    lines += [f"{in_step}if j >= 0 and j < n_steps:",
              f"{in_col}code = s_res[start + j] if j < n else pad_code"]
    lines += codegen.column_start(in_col, cmax=False)
    for k in range(rows):
        load = (f"int32(sprof[code, lane * {rows} + {k}])" if shared
                else f"profile[code, row0 + {k}]")
        lines += [f"{in_col}s = {load}"] + codegen.gotoh_cell(k, in_col, "s", dpx=dpx,
                                                               local=False, cmax=False)
    lines += codegen.hand_on(in_col)
    lines += codegen.edge_store(in_col, f"lane == {group - 1} and p + 1 < passes",
                                "2 * (slot + j)")
    lines += end_update(in_col, rows, mode, last, "up")
    lines += [f"{in_pass}cuda.syncwarp()" if shuffles else f"{in_pass}cuda.syncthreads()"]
    lines += codegen.best_reduction(group, shuffles=shuffles, threads=threads)
    lines += ["    if valid and lane == 0:", "        out_score[pair] = best",
              "        out_qend[pair] = best_i", "        out_send[pair] = best_j"]
    return "\n".join(lines) + "\n"


def _left(row: str, mode: str) -> str:
    """Expression of H in column 0 of padded row ``row`` (relative to the query's first
    row, ``row - pre``; see :func:`end_rows`): global ``-(o + i e)`` for query row ``i``,
    0 on the top boundary row and ``-o`` above it; semiglobal 0."""
    if mode == "semiglobal":
        return "zero"
    return (f"(zero if {row} == 0 else (int32(-gap_o) if {row} < 0 else "
            f"int32(-(gap_o + {row} * gap_e))))")


def end_best(pad: str, mode: str, span: int) -> list:
    """Lines that start a global or semiglobal kernel: ``gap_o``, the rows ``pre`` above
    the query (:func:`end_rows`), and each lane's first best cell: semiglobal ``(m, 0)``
    of score 0 (``(0, 0)`` for an empty subject); global :data:`LOW`, or ``H(m, 0)`` for
    an empty subject."""
    lines = ["gap_o = int32(gap_oe - gap_e)", f"pre = passes * {span} - m", "best_j = 0",
             "best_i = m"]
    if mode == "global":
        lines += [f"best = int32({LOW})", "if n == 0:",
                  "    best = zero if m == 0 else int32(-(gap_o + m * gap_e))"]
    else:
        lines += ["best = zero", "if n == 0:", "    best_i = 0"]
    return [pad + line for line in lines]


def end_registers(pad: str, rows: int, mode: str) -> list:
    """Lines that start a pass of a global or semiglobal kernel: H of the lane's rows in
    column 0 (:func:`_left`), E of column 0 such that ``E(i,1) = H(i,0) - o - e``, and the
    diagonal H of the row above in column 0."""
    lines = [f"h{k} = {_left(f'(row0 + {k + 1} - pre)', mode)}" for k in range(rows)]
    lines += [f"e{k} = int32(h{k} - gap_oe)" for k in range(rows)]
    lines += ["out_h = zero", "out_f = zero", f"diag_in = {_left('(row0 - pre)', mode)}"]
    if mode == "global":
        lines += ["top = int32(-gap_o)"]
    return [pad + line for line in lines]


def end_edge_load(pad: str, cond: str, at: str, mode: str) -> list:
    """:func:`swdask.kernels.cuda.codegen.edge_load` for global and semiglobal kernels:
    above the first row, H of row 0 (global ``-(o + j e)``, counted down a step at a
    time in ``top``; semiglobal 0) and ``F = H - o - e``."""
    top = ["    top = int32(top - gap_e)", "    in_h = top"] if mode == "global" else \
        ["    in_h = zero"]
    lines = [f"if {cond}:", f"    in_h = boundary[{at}]", f"    in_f = boundary[{at} + 1]",
             "else:"] + top + ["    in_f = int32(in_h - gap_oe)"]
    return [pad + line for line in lines]


def end_update(pad: str, rows: int, mode: str, last: str, h: str) -> list:
    """Lines after a column of a global or semiglobal kernel: the last lane of the last
    pass (``last``) takes row ``m`` (H ``h`` of its last register row), global at column
    ``n`` only, semiglobal at every column by the tie rule; semiglobal lanes scan their
    rows at column ``n`` for the first one holding their maximum."""
    if mode == "global":
        lines = [f"if {last} and j == n - 1:", f"    best = {h}", "    best_j = n",
                 "    best_i = m"]
        return [pad + line for line in lines]
    lines = [f"if {last} and j < n and ({h} > best or ({h} == best and j + 1 < best_j)):",
             f"    best = {h}", "    best_j = j + 1", "    best_i = m",
             "if j == n - 1:  # column n: the first row holding the lane's maximum",
             "    c = h0"]
    lines += [f"    c = max(c, h{k})" for k in range(1, rows)]
    lines += [f"    r = row0 + {rows}"]
    for k in reversed(range(rows)):
        lines += [f"    if h{k} == c:", f"        r = row0 + {k + 1}"]
    lines += ["    r = r - pre",
              "    if c > best or (c == best and (n < best_j or (n == best_j and r < best_i))):",
              "        best = c", "        best_j = n", "        best_i = r"]
    return [pad + line for line in lines]


def threads_per_block() -> int:
    """Threads per block: 128 on a GPU; 32 in the simulator (a Python thread each)."""
    return SIMULATOR_THREADS if simulated() else THREADS


#: Hopper DPX instructions for the recurrence, linked into the GPU kernel when asked for.
DPX_SOURCE = codegen.dpx32_source("sw", DPX_NAMES)


#: Argument types of a launch (:mod:`~swdask.kernels.cuda.launcher`), for building ahead:
#: profile, passes, s_res, s_off, order, warp_len, warp_base, alpha, gap_oe, gap_e,
#: boundary, out_score, out_qend, out_send.
SIGNATURE = ("void(int32[:, ::1], int64, uint8[::1], int64[::1], int64[::1], int64[::1], "
             "int64[::1], int64, int32, int32, int32[::1], int32[::1], int32[::1], int32[::1])")
#: The global and semiglobal kernels' argument types: the query's length ``m`` (int64)
#: after ``gap_e``.
SIGNATURE_END = ("void(int32[:, ::1], int64, uint8[::1], int64[::1], int64[::1], int64[::1], "
                 "int64[::1], int64, int32, int32, int64, int32[::1], int32[::1], int32[::1], "
                 "int32[::1])")


def render(rows: int = ROWS, group: int = 32, *, shared: bool = False, dpx: bool = False,
           alphabet: int = 25, mode: str = "local") -> Rendered:
    """The 32-bit kernel's text for a shape and variant, for
    :func:`swdask.kernels.cuda.compile.get_kernel` (``family="inter_task"``).

    In the simulator the DPX variant runs its pure-Numba twin (plain max) and the
    exchange goes through shared memory; on a GPU through warp shuffles.  ``mode``
    (``"local"``, ``"global"`` or ``"semiglobal"``) is part of the text, so of the
    kernel's name and cache key; a local kernel's name and text do not mention it.
    """
    from numba import cuda  # rendering is for compiling: Numba is needed then

    in_simulator = simulated()
    use_dpx = dpx and not in_simulator
    namespace = {"cuda": cuda, "int32": np.int32, "int16": np.int16}
    names = DPX_NAMES if mode == "local" else DPX_NAMES_END
    link = codegen.link_dpx32(namespace, "sw", names) if use_dpx else ()
    source = _kernel_source(rows, group, threads_per_block(), shuffles=not in_simulator,
                            shared=shared, dpx=use_dpx, alphabet=alphabet, mode=mode)
    suffix = "" if mode == "local" else f"-{mode}"
    return Rendered(name=f"inter_task-R{rows}-G{group}-A{alphabet}-shared{int(shared)}"
                         f"-dpx{int(use_dpx)}{suffix}", source=source, namespace=namespace,
                    link=link)


def signature(mode: str = "local", **shape: Any) -> str:
    """The argument types of a launch: the same for every shape of a mode."""
    return SIGNATURE if mode == "local" else SIGNATURE_END


def mode_shape(mode: str) -> dict[str, str]:
    """The ``mode`` item of a kernel shape: none for local (every local shape is as it was
    before the kernels had modes, in name, text and cache key), else ``{"mode": mode}``.

    Examples
    --------
    >>> mode_shape("local"), mode_shape("global")
    ({}, {'mode': 'global'})
    """
    return {} if mode == "local" else {"mode": mode}


def shapes(alphabets: Sequence[int], longest: int = 8192) -> list[dict[str, Any]]:
    """The shapes the launcher's 32-bit passes pick (:func:`choose_shape`, the int16
    shared profile, DPX where the GPU has it) for queries of 1 to ``longest`` residues,
    as ``render`` arguments (``alphabets``: matrix sizes; the kernel adds a pad code)."""
    found = {choose_shape(m) for m in range(1, longest + 1)}
    return [{"rows": r, "group": g, "shared": True, "dpx": has_dpx(), "alphabet": a + 1}
            for (r, g) in sorted(found) for a in alphabets]


def choose_shape(m: int) -> tuple[int, int]:
    """``(rows, group)`` for a query of ``m`` residues: for each tile height the smallest
    group holding the query (a warp for long ones), then the height with the least time
    per the measured rates (:data:`ROW_RATES`) over the rows it computes, padding included."""
    best = None
    for rows, rate in ROW_RATES.items():
        group = choose_group(m, rows)
        span = rows * group
        cost = max(1, math.ceil(m / span)) * span / rate
        if best is None or cost < best[0]:
            best = (cost, rows, group)
    return best[1], best[2]


def choose_group(m: int, rows: int = ROWS) -> int:
    """Smallest group whose registers hold the whole query, at most a warp."""
    group = 1
    while group < 32 and group * rows < m:
        group *= 2
    return group


def query_profile(query: np.ndarray, matrix: np.ndarray, rows_total: int, mode: str = "local",
                  gap_extend: int = 0) -> npt.NDArray[np.int32]:
    """int32 profile ``[code, row]`` with a pad code row last: local, pad rows past the
    query; global and semiglobal, the query in the last rows (:func:`end_rows`)."""
    alpha = matrix.shape[0]
    profile = np.full((alpha + 1, max(rows_total, 1)), PAD_SCORE, dtype=np.int32)
    if mode == "local":
        profile[:alpha, :len(query)] = matrix[:, query]
    else:
        profile[:alpha] = end_rows(query, matrix, max(rows_total, 1), mode, gap_extend)
    return profile


def end_rows(query: np.ndarray, matrix: npt.ArrayLike, rows_total: int, mode: str,
             gap_extend: int) -> npt.NDArray[np.int64]:
    """Profile rows ``[code, row]`` of a global or semiglobal kernel: the query in the
    last ``m`` of ``rows_total`` rows, the ``pre = rows_total - m`` rows above it scoring
    0 for every code (semiglobal) or ``-gap_extend`` (global).

    Notes
    -----
    The rows above leave every H of the query's rows as it is, so the kernels' last row
    is the query's row ``m`` and there are no rows past it.  Semiglobal (H 0 on row 0 and
    column 0): a row scoring 0 with H 0 above and on its left has ``E = F = -(o + e)``
    and ``H = max(0, E, F) = 0`` in every column, so row ``pre`` is row 0 again, and the
    F it hands down, ``max(-(o + e) - e, 0 - (o + e))``, is row 0's.  Global: with H of
    column 0 ``-o`` on the rows above (0 on row ``pre``, ``-(o + i e)`` on query row
    ``i``) and H of row 0 ``-(o + j e)`` (``-o`` at ``j = 0``), each row scoring ``-e``
    repeats row 0: the diagonal gives ``-(o + (j-1) e) - e = -(o + j e)``, E and F are at
    most that minus ``o + e`` (E equals it in column 1 of row ``pre``, whose H of column 0
    is 0), and F of each such row is ``H - (o + e)``, so again row ``pre`` is row 0 and
    hands down row 0's F.  Every kernel starts E and F from the H beside them, so this
    holds for 32-bit and wrapping 16-bit cells alike.

    Examples
    --------
    >>> end_rows(np.array([1], np.uint8), np.array([[2, -1], [-1, 3]]), 3, "global", 1).tolist()
    [[-1, -1, -1], [-1, -1, 3]]
    """
    matrix = np.asarray(matrix)
    fill = 0 if mode == "semiglobal" else -int(gap_extend)
    rows = np.full((matrix.shape[0], rows_total), fill, dtype=np.int64)
    if len(query):
        rows[:, rows_total - len(query):] = matrix[:, np.asarray(query, np.intp)]
    return rows


def launch_plan(lengths: np.ndarray, group: int,
                uniform: int = 32) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
    """Per-warp step counts and boundary slots for pairs of these subject lengths, in order.

    Step counts are uniform over ``uniform`` threads: a warp with shuffles, a whole block
    where lanes meet at block barriers (the simulator).
    """
    per_warp = 32 // group
    per_unit = uniform // group
    n_units = max(1, math.ceil(len(lengths) / per_unit))
    padded = np.zeros(n_units * per_unit, dtype=np.int64)
    padded[:len(lengths)] = lengths
    unit_len = padded.reshape(n_units, per_unit).max(axis=1)
    warp_len = np.repeat(unit_len, uniform // 32).astype(np.int64)
    warp_base = np.concatenate([[0], np.cumsum(warp_len * per_warp)[:-1]]).astype(np.int64)
    return warp_len, warp_base, int((warp_len * per_warp).sum())
