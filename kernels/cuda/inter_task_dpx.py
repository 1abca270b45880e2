"""Smith-Waterman scores of two queries at once, in 16-bit halves (Hopper DPX).

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

Twin
----
The DPX helpers are linked CUDA C++ (:data:`DPX16_SOURCE`).  The CUDA simulator cannot
run them, so there the same kernel text calls pure-Python twins with the same wrapping
16-bit semantics (:data:`TWINS`): CI checks the kernel's logic, overflow path included.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
from numba import config, cuda

from . import codegen
from .compile import Rendered
from .inter_task import PAD_SCORE, threads_per_block

if TYPE_CHECKING:
    import numpy.typing as npt

#: Largest 16-bit value.
MAX16 = 32767
#: Bounds on matrix entries and on ``gap_open + gap_extend`` for the 16-bit kernel: with
#: them ``e - extend``, ``h - (open + extend)`` and ``diag + s`` of any non-overflowing pair
#: stay within 16 bits.
MAX_ABS_ENTRY = 8192
MAX_GAP = 8192
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


def pack(low: npt.ArrayLike, high: npt.ArrayLike) -> npt.NDArray[np.int32]:
    """int32 words holding ``low`` in the low and ``high`` in the high 16 bits (numpy).

    Examples
    --------
    >>> pack(np.array([-1, 5]), np.array([2, -3])).tolist()
    [196607, -196603]
    """
    low = np.asarray(low, np.int64) & 0xFFFF
    high = np.asarray(high, np.int64).astype(np.int16).astype(np.int64)
    return (high * 65536 + low).astype(np.int32)


def pair_profile(query_a: np.ndarray, query_b: np.ndarray, matrix: npt.ArrayLike,
                 rows_total: int) -> npt.NDArray[np.int32]:
    """Packed profile ``[code, row]``: query A's score low, query B's high; rows past
    each query score :data:`PAD_SCORE`.  There is no row for a pad code: columns past a
    subject's end read any code and the kernel ignores them (see :func:`kernel_source`)."""
    matrix = np.asarray(matrix)
    alpha = matrix.shape[0]
    halves = []
    for query in (query_a, query_b):
        profile = np.full((alpha, max(rows_total, 1)), PAD_SCORE, dtype=np.int64)
        profile[:alpha, :len(query)] = matrix[:, np.asarray(query, np.intp)]
        halves.append(profile)
    return pack(*halves)


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
}


# ---------------------------------------------------------------------------------------
# The kernel.

def kernel_source(rows: int, group: int, threads: int, shuffles: bool, alphabet: int) -> str:
    """Source of the packed kernel for ``rows`` register rows per lane and groups of
    ``group`` lanes (``shuffles``: warp shuffles on a GPU; shared memory and barriers in
    the simulator, as :func:`swdask.kernels.cuda.inter_task._kernel_source`).

    Columns past a subject's end (the warp runs to its longest subject) read code
    ``pad_code``, any real code, and never update the best: that saves the shared-memory
    row a pad code would take, which lets 16-row lanes form a whole warp for proteins.
    The profile is indexed with unsigned integers: Numba adds a negative-index
    wrap-around (compare and select) to every signed index.
    """
    r = range(rows)
    span = group * rows
    in_pass, in_step, in_col = " " * 8, " " * 12, " " * 16  # the loops' bodies
    lines = [
        "def kernel(profile, passes, s_res, s_off, order, warp_len, warp_base, pad_code, neg_oe,",
        "           neg_e, limit, boundary, out_score, out_qend, out_send, n_overflow):",
        f"    sprof = cuda.shared.array({alphabet * span}, int32)",
    ]
    lines += codegen.thread_pair(group, threads, shuffles=shuffles)
    lines += [
        "    zero = int32(0)",
        f"    lbase = uint32(lane * {rows})",
        "    neg_oe = int32(neg_oe)",
        "    neg_e = int32(neg_e)",
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


def shared_fits(rows: int, group: int, alphabet: int) -> bool:
    """Whether a pass's packed profile fits the block's static shared memory."""
    return alphabet * rows * group * 4 <= SHARED_BYTES


#: Argument types of a launch (:mod:`~swdask.kernels.cuda.launcher`), for building ahead:
#: profile, passes, s_res, s_off, order, warp_len, warp_base, pad_code, neg_oe, neg_e,
#: limit, boundary, out_score, out_qend, out_send, n_overflow.
SIGNATURE = ("void(int32[:, ::1], int64, uint8[::1], int64[::1], int64[::1], int64[::1], "
             "int64[::1], int64, int32, int32, int32, int32[::1], int32[:, ::1], "
             "int32[:, ::1], int32[:, ::1], int32[::1])")


def render(rows: int, group: int, alphabet: int, threads: int) -> Rendered:
    """The packed kernel's text for a shape, for :func:`swdask.kernels.cuda.compile.get_kernel`
    (``family="inter_task_dpx"``): DPX helpers linked on a GPU, their twins in the simulator.

    Raises
    ------
    ValueError
        If a pass's packed profile would not fit the block's shared memory.
    """
    simulated = bool(config.ENABLE_CUDASIM)
    if not shared_fits(rows, group, alphabet):
        raise ValueError(f"{rows} rows x {group} lanes x {alphabet} codes exceed "
                         f"{SHARED_BYTES} bytes of shared memory")
    namespace = {"cuda": cuda, "int32": np.int32, "uint32": np.uint32, "uint64": np.uint64,
                 "USPAN": np.uint32(rows * group)}
    namespace.update({f"U{k}": np.uint32(k) for k in range(rows)})
    if simulated:
        namespace.update(TWINS)
    else:
        for name, (symbol, declared) in _SIGNATURES.items():
            namespace[name] = cuda.declare_device(symbol, declared)
    return Rendered(name=f"inter_task_dpx-R{rows}-G{group}-A{alphabet}-T{threads}",
                    source=kernel_source(rows, group, threads, shuffles=not simulated,
                                         alphabet=alphabet),
                    namespace=namespace, link=() if simulated else (DPX16_SOURCE,))


def signature(**shape: Any) -> str:
    """The argument types of a launch (the same for every shape); see the launcher."""
    return SIGNATURE


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


def choose_shape(m: int, alphabet: int) -> tuple[int, int]:
    """``(rows, group)`` for a query pair whose longer query has ``m`` residues: per tile
    height the smallest group holding the query (at most a warp, and within the shared
    memory a pass's profile may take), then the height with the least time per
    :data:`ROW_RATES` over the rows it computes, padding included."""
    best = None
    for rows, rate in ROW_RATES.items():
        group = 1
        while group < 32 and group * rows < m and shared_fits(rows, 2 * group, alphabet):
            group *= 2
        if not shared_fits(rows, group, alphabet):
            continue
        span = rows * group
        cost = max(1, -(-m // span)) * span / rate
        if best is None or cost < best[0]:
            best = (cost, rows, group)
    return best[1], best[2]
