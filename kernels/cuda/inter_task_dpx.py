"""Smith-Waterman (and global or semiglobal) scores of two queries at once, in 16-bit
halves (Hopper DPX).

Layout
------
The arrangement of :mod:`swdask.kernels.cuda.inter_task` (a group of ``G`` lanes per
subject, ``R`` query rows per lane in registers, a shuffle wavefront along the subject,
a global boundary row between passes), with every 32-bit register holding the same cell
of two queries: query A in the low 16 bits, query B in the high 16 bits.  One
instruction then advances two cells, and the profile needs no shuffling of halves: the
host packs ``(profile_A[c, i], profile_B[c, i])`` into one int32 word per (code, row),
staged pass by pass in shared memory.  Queries are paired by length (the launcher's
job), so the shorter query of a pair pads few rows.

Per cell (all operations per 16-bit half, DPX instructions on Hopper)::

    h = max(diag + s, max(e, f, 0), 0)       # __viaddmax_s16x2_relu, __vimax_s16x2_relu
    t = h - (open + extend)                  # one add
    e = max(e - extend, t)                   # __viaddmax_s16x2: E for the next column
    f = max(f - extend, t)                   # __viaddmax_s16x2: F for the next row

and every two rows one ``__vimax3_s16x2`` for the column maximum that the end rule needs
(see :mod:`~swdask.kernels.cuda.inter_task` for the rule and the group reduction).

Overflow
--------
The halves wrap at 32,767 and are never saturated, so a wrap is detected instead: cells
are non-negative and no larger than the pair's final best score, so ``diag + s`` can wrap
only where the best exceeds ``32767 - max(matrix)`` (:func:`overflow_limit`).  Such pairs
come back as score ``-1``, counted per query in ``n_overflow``; the launcher re-scores them exactly in
32-bit (:mod:`~swdask.kernels.cuda.inter_task`).  E and F stay within 16 bits because the
gap costs and matrix entries are bounded (:func:`fits_16bit`); scorings outside the bounds
use the 32-bit kernel.  A score is never capped.

Global and semiglobal kernels (:func:`_end_source`: the same cell without the floor at 0,
the end cells of :mod:`~swdask.kernels.cuda.inter_task`'s end kernels per half) cannot use
that argument: their cells are negative and do not grow towards the end cell.  Each lane
keeps the maximum of every H it computes, and H is bounded below a priori; a pair whose
maximum or bound leaves room for a wrap comes back as :data:`OVERFLOW` and is re-scored in
32 bits (:func:`end_bounds` proves the rule exact).

Twin
----
The DPX helpers are linked CUDA C++ (:data:`DPX16_SOURCE`).  The CUDA simulator cannot
run them, so there the same kernel text calls pure-Python twins with the same wrapping
16-bit semantics (:data:`TWINS`): CI checks the kernel's logic, overflow path included.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from . import codegen, inter_task
from .compile import Rendered, simulated
from .inter_task import LOW, PAD_SCORE, end_rows, threads_per_block

if TYPE_CHECKING:
    import numpy.typing as npt

#: Largest 16-bit value.
MAX16 = 32767
#: Bounds on matrix entries and on ``gap_open + gap_extend`` for the 16-bit kernel: with
#: them ``e - extend``, ``h - (open + extend)`` and ``diag + s`` of any non-overflowing pair
#: stay within 16 bits.
MAX_ABS_ENTRY = 8192
MAX_GAP = 8192
#: Score of a global or semiglobal pair that may have wrapped (a local one comes back as
#: ``-1``): below every score the traceback's range allows.
OVERFLOW = -(2**31)
#: Static shared memory per block (bytes) that the packed profile may take.
SHARED_BYTES = 48 * 1024



def fits_16bit(matrix: npt.ArrayLike, gap_open: int, gap_extend: int) -> bool:
    """Whether a scoring can use the 16-bit kernel (entries and gaps within bounds)."""
    matrix = np.asarray(matrix)
    return (matrix.size > 0 and int(np.abs(matrix).max()) <= MAX_ABS_ENTRY
            and 0 < gap_open + gap_extend <= MAX_GAP and gap_extend <= MAX_GAP)


def overflow_limit(matrix: npt.ArrayLike) -> int:
    """The highest 16-bit score that proves no cell of the pair wrapped."""
    return MAX16 - max(int(np.asarray(matrix).max()), 0)


#: Where the low half of an int32 lies in a pair of int16 (``pack`` and ``pair_profile``
#: build the words as int16 pairs, one pass per half instead of five over int64 arrays:
#: 0.95 -> 0.62 ms for a pair of 5.4 k-residue queries on a 2-core development machine).
_LOW = 0 if sys.byteorder == "little" else 1


def pack(low: npt.ArrayLike, high: npt.ArrayLike) -> npt.NDArray[np.int32]:
    """int32 words holding ``low`` in the low and ``high`` in the high 16 bits (numpy),
    each taken modulo 2**16.

    Examples
    --------
    >>> pack(np.array([-1, 5]), np.array([2, -3])).tolist()
    [196607, -196603]
    """
    low, high = np.broadcast_arrays(np.asarray(low), np.asarray(high))
    halves = np.empty((*low.shape, 2), np.int16)
    halves[..., _LOW] = low.astype(np.int64).astype(np.int16)
    halves[..., 1 - _LOW] = high.astype(np.int64).astype(np.int16)
    words = halves.view(np.int32).reshape(low.shape)
    return words[()] if words.ndim == 0 else words  # a scalar for scalars, as numpy


def pair_profile(query_a: np.ndarray, query_b: np.ndarray, matrix: npt.ArrayLike,
                 rows_total: int, mode: str = "local", gap_extend: int = 0) -> npt.NDArray[np.int32]:
    """Packed profile ``[code, row]``: query A's score low, query B's high; rows past
    each query score :data:`PAD_SCORE`.  There is no row for a pad code: columns past a
    subject's end read any code and the kernel ignores them (see :func:`kernel_source`).
    Global and semiglobal ``mode``: each query in the last rows
    (:func:`swdask.kernels.cuda.inter_task.end_rows`)."""
    matrix = np.asarray(matrix)
    alpha, rows = matrix.shape[0], max(rows_total, 1)
    halves = np.empty((alpha, rows, 2), np.int16)
    for half, query in ((_LOW, query_a), (1 - _LOW, query_b)):
        if mode != "local":
            halves[..., half] = end_rows(query, matrix, rows, mode, gap_extend).astype(np.int16)
            continue
        halves[..., half] = PAD_SCORE
        halves[:, :len(query), half] = matrix[:, np.asarray(query, np.intp)].astype(np.int16)
    return halves.view(np.int32).reshape(alpha, rows)


def packed_constant(value: int) -> np.int32:
    """``value`` in both halves of an int32."""
    return np.int32(pack(value, value))


# ---------------------------------------------------------------------------------------
# The helpers: DPX on Hopper, and their pure-Python twins for the simulator.

#: Linked into the GPU kernel.  Numba's foreign-function convention: the result goes
#: through the first pointer.  Every helper is one instruction (or a shift) after inlining.
DPX16_SOURCE = """
#define U(x) ((unsigned int)(x))
extern "C" __device__ int sw16_addmax(int* out, int a, int b, int c)
{ *out = (int)__viaddmax_s16x2(U(a), U(b), U(c)); return 0; }
extern "C" __device__ int sw16_addmax_relu(int* out, int a, int b, int c)
{ *out = (int)__viaddmax_s16x2_relu(U(a), U(b), U(c)); return 0; }
extern "C" __device__ int sw16_max_relu(int* out, int a, int b)
{ *out = (int)__vimax_s16x2_relu(U(a), U(b)); return 0; }
extern "C" __device__ int sw16_max3(int* out, int a, int b, int c)
{ *out = (int)__vimax3_s16x2(U(a), U(b), U(c)); return 0; }
extern "C" __device__ int sw16_max2(int* out, int a, int b)
{ *out = (int)__vmaxs2(U(a), U(b)); return 0; }
extern "C" __device__ int sw16_add(int* out, int a, int b)
{ *out = (int)__vadd2(U(a), U(b)); return 0; }
extern "C" __device__ int sw16_lo(int* out, int a)
{ *out = (int)(short)(a & 0xFFFF); return 0; }
extern "C" __device__ int sw16_hi(int* out, int a)
{ *out = a >> 16; return 0; }
"""

#: The global and semiglobal kernels' one more helper: two 32-bit values' low 16 bits
#: as the halves of a word (one ``PRMT``).
DPX16_END_SOURCE = DPX16_SOURCE + """extern "C" __device__ int sw16_join(int* out, int lo, int hi)
{ *out = (int)__byte_perm(U(lo), U(hi), 0x5410); return 0; }
"""

_SIGNATURES = {
    "addmax": ("sw16_addmax", "int32(int32, int32, int32)"),
    "addmax_relu": ("sw16_addmax_relu", "int32(int32, int32, int32)"),
    "max_relu": ("sw16_max_relu", "int32(int32, int32)"),
    "max3": ("sw16_max3", "int32(int32, int32, int32)"),
    "max2": ("sw16_max2", "int32(int32, int32)"),
    "add": ("sw16_add", "int32(int32, int32)"),
    "lo16": ("sw16_lo", "int32(int32)"),
    "hi16": ("sw16_hi", "int32(int32)"),
}
_END_SIGNATURES = {"join16": ("sw16_join", "int32(int32, int32)")}


def _wrap16(v):
    return ((int(v) + 0x8000) & 0xFFFF) - 0x8000


def _halves(x):
    x = int(x)
    return _wrap16(x), _wrap16(x >> 16)


def _join(low, high):
    return np.int32(_wrap16(high) * 65536 + (low & 0xFFFF))


def _twin_addmax(a, b, c):
    (a0, a1), (b0, b1), (c0, c1) = _halves(a), _halves(b), _halves(c)
    return _join(max(_wrap16(a0 + b0), c0), max(_wrap16(a1 + b1), c1))


def _twin_addmax_relu(a, b, c):
    (a0, a1), (b0, b1), (c0, c1) = _halves(a), _halves(b), _halves(c)
    return _join(max(_wrap16(a0 + b0), c0, 0), max(_wrap16(a1 + b1), c1, 0))


def _twin_max_relu(a, b):
    (a0, a1), (b0, b1) = _halves(a), _halves(b)
    return _join(max(a0, b0, 0), max(a1, b1, 0))


def _twin_max3(a, b, c):
    (a0, a1), (b0, b1), (c0, c1) = _halves(a), _halves(b), _halves(c)
    return _join(max(a0, b0, c0), max(a1, b1, c1))


def _twin_max2(a, b):
    (a0, a1), (b0, b1) = _halves(a), _halves(b)
    return _join(max(a0, b0), max(a1, b1))


def _twin_add(a, b):
    (a0, a1), (b0, b1) = _halves(a), _halves(b)
    return _join(_wrap16(a0 + b0), _wrap16(a1 + b1))


#: Pure-Python twins of the DPX helpers (wrapping 16-bit halves, like the hardware).
TWINS = {
    "addmax": _twin_addmax,
    "addmax_relu": _twin_addmax_relu,
    "max_relu": _twin_max_relu,
    "max3": _twin_max3,
    "max2": _twin_max2,
    "add": _twin_add,
    "lo16": lambda x: _halves(x)[0],
    "hi16": lambda x: _halves(x)[1],
    "join16": lambda low, high: _join(int(low), int(high)),
}


# ---------------------------------------------------------------------------------------
# The kernel.

def _head(signature: list, rows: int, group: int, threads: int, shuffles: bool,
          alphabet: int) -> list:
    """The lines every packed kernel begins with: its ``signature`` lines, the shared
    profile, the lane's place in its group and the common constants."""
    lines = signature + [f"    sprof = cuda.shared.array({alphabet * group * rows}, int32)"]
    lines += codegen.thread_pair(group, threads, shuffles=shuffles)
    return lines + [
        "    zero = int32(0)",
        f"    lbase = uint32(lane * {rows})",
        "    neg_oe = int32(neg_oe)",
        "    neg_e = int32(neg_e)",
    ]


def kernel_source(rows: int, group: int, threads: int, shuffles: bool, alphabet: int,
                  mode: str = "local") -> str:
    """Source of the packed kernel for ``rows`` register rows per lane and groups of
    ``group`` lanes (``shuffles``: warp shuffles on a GPU; shared memory and barriers in
    the simulator, as :func:`swdask.kernels.cuda.inter_task._kernel_source`).

    Columns past a subject's end (the warp runs to its longest subject) read code
    ``pad_code``, any real code, and never update the best: that saves the shared-memory
    row a pad code would take, which lets 16-row lanes form a whole warp for proteins.
    The profile is indexed with unsigned integers: Numba adds a negative-index
    wrap-around (compare and select) to every signed index.  Global and semiglobal
    ``mode``: :func:`_end_source`.
    """
    if mode != "local":
        return _end_source(rows, group, threads, shuffles, alphabet, mode)
    r = range(rows)
    span = group * rows
    in_pass, in_step, in_col = " " * 8, " " * 12, " " * 16  # the loops' bodies
    lines = _head(["def kernel(profile, passes, s_res, s_off, order, warp_len, warp_base, "
                   "pad_code, neg_oe,",
                   "           neg_e, limit, boundary, out_score, out_qend, out_send, "
                   "n_overflow):"], rows, group, threads, shuffles, alphabet)
    lines += [
        "    best_a = 0",
        "    best_ai = 0",
        "    best_aj = 0",
        "    best_b = 0",
        "    best_bi = 0",
        "    best_bj = 0",
        "    for p in range(passes):",
        f"        row0 = (p * {group} + lane) * {rows}",
        # This pass's best per half: columns only grow within a pass, so a strictly
        # greater column maximum is the only news; passes merge by the full rule below.
        "        best2 = zero",
        "        pass_a = 0",
        "        pass_ai = 0",
        "        pass_aj = 0",
        "        pass_b = 0",
        "        pass_bi = 0",
        "        pass_bj = 0",
    ]
    lines += codegen.stage_profile(in_pass, span, threads)
    # E of the first column and F below the top row are 0 - (open + extend).
    lines += codegen.pass_registers(in_pass, rows, "neg_oe")
    lines += codegen.wavefront(in_pass, f"n_steps + {group} - 1", "lane", shuffles=shuffles,
                               single=group == 1)
    lines += [f"{in_step}if lane == 0:"]
    lines += codegen.edge_load(in_col, "p > 0 and j < n_steps", "2 * (slot + j)", "neg_oe")
    lines += [f"{in_step}if j >= 0 and j < n_steps:",
              f"{in_col}code = s_res[uint64(start + j)] if j < n else pad_code"]
    lines += codegen.column_start(in_col, up=False, cmax=False)
    lines += [f"{in_col}base = uint32(code) * USPAN + lbase"]
    for k in r:
        # H = max(hd, F) with hd = max(diag + s, E, 0), and F' = max(F - e, H - oe)
        # = max(F - e, hd - oe) because F - oe <= F - e: from row to row the chain is the
        # one instruction F' = addmax(F, -e, hd - oe), not four (measured a little faster).
        lines += [
            f"                hd = addmax_relu(diag, sprof[base + U{k}], e{k})",
            "                td = add(hd, neg_oe)",
            "                h = max2(hd, f)",
            f"                diag = h{k}",
            f"                h{k} = h",
            f"                e{k} = addmax(e{k}, neg_e, add(h, neg_oe))",
            "                f = addmax(f, neg_e, td)",
        ]
    # Column maximum, two rows per instruction.
    terms = [f"h{k}" for k in r]
    cmax = terms[0]
    rest = terms[1:]
    if not rest:
        lines += [f"                cmax = {cmax}"]
    while rest:
        if len(rest) >= 2:
            lines += [f"                cmax = max3({cmax}, {rest[0]}, {rest[1]})"]
            rest = rest[2:]
        else:
            lines += [f"                cmax = max2({cmax}, {rest[0]})"]
            rest = []
        cmax = "cmax"
    lines += codegen.hand_on(in_col, f"h{rows - 1}")
    lines += codegen.edge_store(in_col, f"lane == {group - 1} and p + 1 < passes",
                                "2 * (slot + j)", "out_h")
    lines += [
        "                raised = max2(best2, cmax)",
        "                if raised != best2 and j < n:  # a new best (rare after the start)",
        "                    best2 = raised",
    ]
    for half, get in (("a", "lo16"), ("b", "hi16")):
        lines += [
            f"                    c = {get}(cmax)",
            f"                    if c > pass_{half}:",
            f"                        pass_{half} = c",
            f"                        pass_{half}j = j + 1",
            f"                        pass_{half}i = row0 + {rows}",
        ]
        for k in reversed(r):  # the first row holding the maximum wins
            lines += [f"                        if {get}(h{k}) == c:",
                      f"                            pass_{half}i = row0 + {k + 1}"]
    for half in ("a", "b"):  # an equal score at a smaller column of a later pass wins
        lines += [
            (f"        if pass_{half} > best_{half} or (pass_{half} == best_{half} and "
            f"pass_{half}j < best_{half}j):"),
            f"            best_{half} = pass_{half}",
            f"            best_{half}i = pass_{half}i",
            f"            best_{half}j = pass_{half}j",
        ]
    lines += ["        cuda.syncwarp()" if shuffles else "        cuda.syncthreads()"]
    # The group's best cell per half, by the tie rule.
    lines += codegen.best_reduction(group, shuffles=shuffles, threads=threads,
                                    names=[(f"best_{h}", f"best_{h}j", f"best_{h}i") for h in "ab"])
    lines += ["    if valid and lane == 0:"]
    for row, half in ((0, "a"), (1, "b")):
        lines += [
            f"        if best_{half} > limit:  # may have wrapped: re-scored in 32 bits",
            f"            out_score[{row}, pair] = -1",
            f"            cuda.atomic.add(n_overflow, {row}, 1)",
            f"        elif best_{half} == 0:",
            f"            out_score[{row}, pair] = 0",
            f"            out_qend[{row}, pair] = 0",
            f"            out_send[{row}, pair] = 0",
            "        else:",
            f"            out_score[{row}, pair] = best_{half}",
            f"            out_qend[{row}, pair] = best_{half}i",
            f"            out_send[{row}, pair] = best_{half}j",
        ]
    return "\n".join(lines) + "\n"


def _column_max(rows: int, pad: str) -> list:
    """Lines that set ``cmax`` to the maximum of the lane's H registers, two rows per
    instruction."""
    terms = [f"h{k}" for k in range(rows)]
    if len(terms) == 1:
        return [f"{pad}cmax = h0"]
    lines, cmax, rest = [], terms[0], terms[1:]
    while rest:
        if len(rest) >= 2:
            lines.append(f"{pad}cmax = max3({cmax}, {rest[0]}, {rest[1]})")
            rest = rest[2:]
        else:
            lines.append(f"{pad}cmax = max2({cmax}, {rest[0]})")
            rest = []
        cmax = "cmax"
    return lines


def _end_source(rows: int, group: int, threads: int, shuffles: bool, alphabet: int,
                mode: str) -> str:
    """Source of the packed global or semiglobal (``mode``) kernel.

    The arrangement and the cell of :func:`kernel_source` without the floor at 0, with
    each query in the last rows of the passes (:func:`pair_profile`), so that both
    queries' row ``m`` is the group's last register row, and with the end cells and
    boundaries of :func:`swdask.kernels.cuda.inter_task._end_source`, per half.  H of
    column 0 is set per row and half (``join16``), H of row 0 counts down by ``e`` a
    column.  Each lane keeps the maximum of every H it computes in the subject's columns
    (``tmax``, both halves in one word, one ``max3`` per two rows as the local kernel's
    column maximum); the group's maximum decides, with the lengths, whether a half may
    have wrapped (:func:`end_bounds`), and such a pair comes back as :data:`OVERFLOW`.
    """
    r = range(rows)
    span = group * rows
    last = f"lane == {group - 1} and p == passes - 1"
    in_pass, in_step, in_col = " " * 8, " " * 12, " " * 16  # the loops' bodies
    left = inter_task._left
    lines = _head(["def kernel(profile, passes, s_res, s_off, order, warp_len, warp_base, "
                   "pad_code, neg_oe,",
                   "           neg_e, limit, m_a, m_b, gap_o, gap_e, floor16, boundary, "
                   "out_score, out_qend,",
                   "           out_send, n_overflow):"], rows, group, threads, shuffles, alphabet)
    lines += [
        "    gap_o = int32(gap_o)",
        "    gap_e = int32(gap_e)",
        f"    pre_a = passes * {span} - m_a",
        f"    pre_b = passes * {span} - m_b",
        f"    tmax = int32({int(packed_constant(-32768))})",
        "    rbest2 = zero",
    ]
    for half in "ab":
        lines += [f"    best_{half}j = 0", f"    best_{half}i = m_{half}"]
        if mode == "global":
            lines += [f"    best_{half} = int32({LOW})", "    if n == 0:",
                      f"        best_{half} = zero if m_{half} == 0 else "
                      f"int32(-(gap_o + m_{half} * gap_e))"]
        else:
            lines += [f"    best_{half} = zero", "    if n == 0:", f"        best_{half}i = 0"]
    lines += ["    for p in range(passes):", f"        row0 = (p * {group} + lane) * {rows}"]
    lines += codegen.stage_profile(in_pass, span, threads)
    if mode == "global":
        lines += [f"{in_pass}h{k} = join16({left(f'(row0 + {k + 1} - pre_a)', mode)}, "
                  f"{left(f'(row0 + {k + 1} - pre_b)', mode)})" for k in r]
        lines += [f"{in_pass}e{k} = add(h{k}, neg_oe)" for k in r]
        lines += [f"{in_pass}diag_in = join16({left('(row0 - pre_a)', mode)}, "
                  f"{left('(row0 - pre_b)', mode)})",
                  f"{in_pass}top = join16(int32(-gap_o), int32(-gap_o))"]
    else:
        lines += [f"{in_pass}h{k} = zero" for k in r] + [f"{in_pass}e{k} = neg_oe" for k in r]
        lines += [f"{in_pass}diag_in = zero"]
    lines += [f"{in_pass}out_h = zero", f"{in_pass}out_f = neg_oe"]
    lines += codegen.wavefront(in_pass, f"n_steps + {group} - 1", "lane", shuffles=shuffles,
                               single=group == 1)
    top = ([f"{in_col}    top = add(top, neg_e)", f"{in_col}    in_h = top"]
           if mode == "global" else [f"{in_col}    in_h = zero"])
    lines += [f"{in_step}if lane == 0:",
              f"{in_col}if p > 0 and j < n_steps:",
              f"{in_col}    in_h = boundary[2 * (slot + j)]",
              f"{in_col}    in_f = boundary[2 * (slot + j) + 1]",
              f"{in_col}else:"] + top + [f"{in_col}    in_f = add(in_h, neg_oe)"]
    lines += [f"{in_step}if j >= 0 and j < n_steps:",
              f"{in_col}code = s_res[uint64(start + j)] if j < n else pad_code"]
    lines += codegen.column_start(in_col, up=False, cmax=False)
    lines += [f"{in_col}base = uint32(code) * USPAN + lbase"]
    for k in r:  # the local cell (see kernel_source) without the floor at 0
        lines += [
            f"{in_col}hd = addmax(diag, sprof[base + U{k}], e{k})",
            f"{in_col}td = add(hd, neg_oe)",
            f"{in_col}h = max2(hd, f)",
            f"{in_col}diag = h{k}",
            f"{in_col}h{k} = h",
            f"{in_col}e{k} = addmax(e{k}, neg_e, add(h, neg_oe))",
            f"{in_col}f = addmax(f, neg_e, td)",
        ]
    lines += _column_max(rows, in_col)
    lines += codegen.hand_on(in_col, f"h{rows - 1}")
    lines += codegen.edge_store(in_col, f"lane == {group - 1} and p + 1 < passes",
                                "2 * (slot + j)", "out_h")
    lines += [f"{in_col}if j < n:", f"{in_col}    tmax = max2(tmax, cmax)"]
    pad = in_col + "    "
    if mode == "global":
        lines += [f"{pad}if {last} and j == n - 1:"]
        for half, get in (("a", "lo16"), ("b", "hi16")):
            lines += [f"{pad}    best_{half} = {get}(h{rows - 1})", f"{pad}    best_{half}j = n",
                      f"{pad}    best_{half}i = m_{half}"]
    else:
        # Row m: a new maximum of the row in either half (rare after the start), then the
        # tie rule against the lane's best (an earlier pass's column n may hold a tie).
        lines += [f"{pad}if {last}:", f"{pad}    raised = max2(rbest2, h{rows - 1})",
                  f"{pad}    if raised != rbest2:", f"{pad}        rbest2 = raised"]
        for half, get in (("a", "lo16"), ("b", "hi16")):
            lines += [
                f"{pad}        c = {get}(h{rows - 1})",
                f"{pad}        if c > best_{half} or (c == best_{half} and j + 1 < best_{half}j):",
                f"{pad}            best_{half} = c",
                f"{pad}            best_{half}j = j + 1",
                f"{pad}            best_{half}i = m_{half}",
            ]
        lines += [f"{pad}if j == n - 1:  # column n: the first row holding each half's maximum"]
        for half, get in (("a", "lo16"), ("b", "hi16")):
            lines += [f"{pad}    c = {get}(cmax)", f"{pad}    i = row0 + {rows}"]
            for k in reversed(r):
                lines += [f"{pad}    if {get}(h{k}) == c:", f"{pad}        i = row0 + {k + 1}"]
            lines += [
                f"{pad}    i = i - pre_{half}",
                (f"{pad}    if c > best_{half} or (c == best_{half} and (n < best_{half}j or "
                 f"(n == best_{half}j and i < best_{half}i))):"),
                f"{pad}        best_{half} = c",
                f"{pad}        best_{half}j = n",
                f"{pad}        best_{half}i = i",
            ]
    lines += ["        cuda.syncwarp()" if shuffles else "        cuda.syncthreads()"]
    # The group's maximum H (both halves at once), then its best cells by the tie rule.
    shift = 1
    while shift < group:
        lines += codegen.shuffle_down("tmax", shift, shuffles=shuffles, scratch="xch[0, {}]",
                                      guard=f"tx + {shift} < {threads}")
        lines += [f"    if lane + {shift} < {group}:", "        tmax = max2(tmax, o_tmax)"]
        shift *= 2
    lines += codegen.best_reduction(group, shuffles=shuffles, threads=threads,
                                    names=[(f"best_{h}", f"best_{h}j", f"best_{h}i") for h in "ab"])
    lines += ["    if valid and lane == 0:"]
    for row, half, get in ((0, "a", "lo16"), (1, "b", "hi16")):
        low = (f"-(2 * gap_o + (m_{half} + n) * gap_e)" if mode == "global"
               else f"-(gap_o + min(m_{half}, n) * gap_e)")
        lines += [
            f"        if n > 0 and ({get}(tmax) > limit or {low} < floor16):",
            f"            out_score[{row}, pair] = {OVERFLOW}  # re-scored in 32 bits",
            f"            cuda.atomic.add(n_overflow, {row}, 1)",
            "        else:",
            f"            out_score[{row}, pair] = best_{half}",
            f"            out_qend[{row}, pair] = best_{half}i",
            f"            out_send[{row}, pair] = best_{half}j",
        ]
    return "\n".join(lines) + "\n"


def end_bounds(matrix: npt.ArrayLike, gap_open: int, gap_extend: int,
               mode: str) -> tuple[int, int]:
    """``(limit, floor16)`` of a global or semiglobal 16-bit launch: a pair is exact when
    the largest H of its matrix is at most ``limit`` and the lower bound of every H
    (see Notes) is at least ``floor16``; otherwise it comes back as :data:`OVERFLOW`.

    Notes
    -----
    The cells wrap, so the kernel proves that none did.  Take the first operation of a
    pair that wrapped, in the order of the recurrence: every value before it is exact.
    The operations, with ``o + e = oe``, ``s`` a profile score and ``H``, ``E``, ``F``
    exact values, are ``H + s`` (the diagonal), ``E - e``, ``F - e``, ``H - oe`` and
    ``hd - oe`` with ``hd = max(H + s, E)``; the maxima do not wrap.  Each ``E(i,j)`` is
    at least ``H(i,j-1) - oe`` and each ``F(i,j)`` at least ``H(i-1,j) - oe`` (the kernels
    start both from the H beside them, never from a sentinel), and no E or F exceeds the
    largest H.  So every value lies in ``[Hmin - D, Hmax + max(s, 0)]`` with
    ``D = max(2 oe, -min(s))``, and a wrap needs an exact H above ``32767 - max(s, 0)``
    (``limit``, the local kernel's :func:`overflow_limit`) or below ``-32768 + D``
    (``floor16``).  Above: the kernel keeps the maximum of every H it computes in the
    subject's columns, boundary rows included (a maximum never wraps, and a larger
    value only flags a pair that did not need it), so an H above ``limit`` is seen.
    Below: H is bounded a priori.  Global: ``H(i,j) >= H(i,0) - o - j e = -(2 o + (i +
    j) e)``, the E chain from column 0; semiglobal: ``H(i,j) >= -(o + min(i,j) e)``, a
    gap from row 0 or column 0 (both 0).  The rows above the query
    (:func:`swdask.kernels.cuda.inter_task.end_rows`) hold ``-(o + j e)`` or 0, within
    these bounds.  So a pair whose maximum is at most ``limit`` and whose bound
    ``-(2 o + (m + n) e)`` (global) or ``-(o + min(m, n) e)`` (semiglobal) is at least
    ``floor16`` has no wrapped value; the others are re-scored in 32 bits.  An empty
    subject is exact either way (its end cell is set, not computed).

    Examples
    --------
    >>> end_bounds(np.array([[5, -4], [-4, 5]]), 11, 1, "global")
    (32762, -32744)
    """
    matrix = np.asarray(matrix)
    lowest = min(int(matrix.min()), -int(gap_extend) if mode == "global" else 0)
    spread = max(2 * (int(gap_open) + int(gap_extend)), -lowest)
    return overflow_limit(matrix), -32768 + spread


def shared_fits(rows: int, group: int, alphabet: int) -> bool:
    """Whether a pass's packed profile fits the block's static shared memory."""
    return alphabet * rows * group * 4 <= SHARED_BYTES


#: Argument types of a launch (:mod:`~swdask.kernels.cuda.launcher`), for building ahead:
#: profile, passes, s_res, s_off, order, warp_len, warp_base, pad_code, neg_oe, neg_e,
#: limit, boundary, out_score, out_qend, out_send, n_overflow.
SIGNATURE = ("void(int32[:, ::1], int64, uint8[::1], int64[::1], int64[::1], int64[::1], "
             "int64[::1], int64, int32, int32, int32, int32[::1], int32[:, ::1], "
             "int32[:, ::1], int32[:, ::1], int32[::1])")
#: The global and semiglobal kernels' argument types: after ``limit``, the queries'
#: lengths ``m_a``, ``m_b`` (int64), ``gap_o``, ``gap_e`` and ``floor16`` (int32,
#: :func:`end_bounds`).
SIGNATURE_END = ("void(int32[:, ::1], int64, uint8[::1], int64[::1], int64[::1], int64[::1], "
                 "int64[::1], int64, int32, int32, int32, int64, int64, int32, int32, int32, "
                 "int32[::1], int32[:, ::1], int32[:, ::1], int32[:, ::1], int32[::1])")


def render(rows: int, group: int, alphabet: int, threads: int, mode: str = "local") -> Rendered:
    """The packed kernel's text for a shape, for :func:`swdask.kernels.cuda.compile.get_kernel`
    (``family="inter_task_dpx"``): DPX helpers linked on a GPU, their twins in the simulator.
    ``mode`` as :func:`swdask.kernels.cuda.inter_task.render` (named only when not local).

    Raises
    ------
    ValueError
        If a pass's packed profile would not fit the block's shared memory.
    """
    from numba import cuda  # rendering is for compiling: Numba is needed then

    in_simulator = simulated()
    if not shared_fits(rows, group, alphabet):
        raise ValueError(f"{rows} rows x {group} lanes x {alphabet} codes exceed "
                         f"{SHARED_BYTES} bytes of shared memory")
    namespace = {"cuda": cuda, "int32": np.int32, "uint32": np.uint32, "uint64": np.uint64,
                 "USPAN": np.uint32(rows * group)}
    namespace.update({f"U{k}": np.uint32(k) for k in range(rows)})
    local = mode == "local"
    helpers = _SIGNATURES if local else {**_SIGNATURES, **_END_SIGNATURES}
    if in_simulator:
        namespace.update({name: TWINS[name] for name in helpers})
    else:
        for name, (symbol, declared) in helpers.items():
            namespace[name] = cuda.declare_device(symbol, declared)
    link = () if in_simulator else (DPX16_SOURCE if local else DPX16_END_SOURCE,)
    suffix = "" if local else f"-{mode}"
    return Rendered(name=f"inter_task_dpx-R{rows}-G{group}-A{alphabet}-T{threads}{suffix}",
                    source=kernel_source(rows, group, threads, shuffles=not in_simulator,
                                         alphabet=alphabet, mode=mode),
                    namespace=namespace, link=link)


def signature(mode: str = "local", **shape: Any) -> str:
    """The argument types of a launch (the same for every shape of a mode); see the
    launcher."""
    return SIGNATURE if mode == "local" else SIGNATURE_END


def shapes(alphabets: Iterable[int], longest: int = 8192) -> list[dict[str, Any]]:
    """Every shape :func:`choose_shape` picks for queries of 1 to ``longest`` residues
    (past a warp's span only the padding changes), as ``render`` arguments."""
    threads = threads_per_block()
    found = {(choose_shape(m, a), a) for a in alphabets for m in range(1, longest + 1)}
    return [{"rows": r, "group": g, "alphabet": a, "threads": threads} for (r, g), a in sorted(found)]


#: GCUPS of each tile height (rows per lane), net of padded rows, measured on an H100
#: with BLOSUM62 against 102.6 M Swiss-Prot residues (``workflows/benchmarks/
#: gpu_search.py --variants 16r12,16r18,...``, pairs of queries of 144 to 5,058
#: residues).  Heights of 8, 14, 16, 17 and 22 rows measured 1,700, 2,090, 2,000, 2,260
#: and 2,120 and are left out; 32 rows (1,560) fewer warps fit.  The
#: shape chooser weighs the padded rows of a pass with these rates.
ROW_RATES = {12: 2080.0, 18: 2300.0, 20: 2400.0, 21: 2400.0, 24: 2150.0}


def choose_shape(m: int, alphabet: int, rates: dict[int, float] | None = None,
                 fits: Callable[[int, int, int], bool] | None = None) -> tuple[int, int]:
    """``(rows, group)`` for a query pair whose longer query has ``m`` residues: per tile
    height the smallest group holding the query (at most a warp, and within the shared
    memory a pass's profile may take, ``fits``: default :func:`shared_fits`), then the
    height with the least time per ``rates`` (default :data:`ROW_RATES`) over the rows it
    computes, padding included.  The scan kernel's chooser is this one with its own
    heights and shared memory (:mod:`~swdask.kernels.cuda.inter_task_dpx_scan`)."""
    rates = ROW_RATES if rates is None else rates
    fits = shared_fits if fits is None else fits
    best = None
    for rows, rate in rates.items():
        group = 1
        while group < 32 and group * rows < m and fits(rows, 2 * group, alphabet):
            group *= 2
        if not fits(rows, group, alphabet):
            continue
        span = rows * group
        cost = max(1, -(-m // span)) * span / rate
        if best is None or cost < best[0]:
            best = (cost, rows, group)
    return best[1], best[2]
