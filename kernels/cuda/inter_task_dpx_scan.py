"""Smith-Waterman scores only, two queries at once in 16-bit halves (Hopper DPX): the
search's scan kernel.

What it changes
---------------
The layout, the packed profile, the launch arguments and the launch plan are those of
:mod:`~swdask.kernels.cuda.inter_task_dpx` (a group of ``G`` lanes per subject, ``R``
query rows per lane in registers, query A in the low and query B in the high 16 bits of
every register).  The column step is cut to what a score needs:

- **Score only.** One running packed maximum, ``best2 = max3(best2, h_k, h_k+1)`` every
  two rows; no column maximum, no end cell, no row scan.  The end cells of a search's
  candidates come from the exact 32-bit kernel run on those subjects only (the
  launcher's end pass, the mechanism of the overflow re-score), which also checks the
  score.  ``out_qend``/``out_send`` get :data:`NO_END`.
- **No per-column branch.** Columns before a lane's first (fill) and past a subject's
  end (drain) read a pad code whose staged profile row is :data:`PAD16` in both halves
  (one more shared row than the profile has).  Lane 0 alone reads the subject's code and
  hands it down the group with H and F (a third shuffle).
- **Four columns a loop trip** (:data:`UNROLL`), written out in the text: Numba has no
  unroll pragma, and with the copies ptxas renames the rotating registers instead of
  moving them.  Counters are int32, indices unsigned (Numba adds a wrap-around test to
  every signed index and types int32 + int32 as int64).
- **Five operations a cell**, in the operand order that ptxas turns into ``VIADD`` +
  ``VIMNMX3.RELU`` + ``VIADD`` + 2 ``VIADDMNMX``::

      h = max3_relu(e, f, diag + s)       # __vimax3_s16x2_relu (inner max of E and F)
      t = h - (open + extend)
      e = max(e - extend, t)              # __viaddmax_s16x2
      f = max(f - extend, t)              # __viaddmax_s16x2

  The order matters: ``max3_relu(diag + s, e, f)`` compiles to the fused add-max plus a
  max (two ALU-pipe instructions instead of one).
- ``R`` is a multiple of 4 and the profile offset is computed in the kernel, so ptxas can
  prove 16-byte alignment and read four rows with one ``LDS.128``; registers are capped
  at :func:`register_cap` (four blocks of 128 threads a multiprocessor) and the DPX
  helpers are linked with LTO explicitly (without it they stay calls through local
  memory).

Why fill and drain columns are harmless
---------------------------------------
In a fill column of lane ``L > 0`` the lane's state is its start state (``h = 0``,
``e = -oe``, diagonal 0) and so is its input (H 0, F ``-oe``, the pad code): then
``h = max(-oe, -oe, 0 + PAD16, 0) = 0``, ``t = -oe``, ``e = f = -oe``: the state and what
the lane hands on are unchanged.  In a drain column (past the subject's end, rounded up
to a whole trip), ``h = max(e, f, diag + PAD16, 0)`` with ``diag + PAD16 < diag``; every
E and F is at most an H computed before it minus ``oe > 0``, so by induction no drain H
exceeds the largest H computed before it: the maximum is never raised, and no real cell
reads a drain cell (real columns come first).  ``diag >= 0``, so ``diag + PAD16`` cannot
wrap.

Overflow
--------
The rule of :mod:`~swdask.kernels.cuda.inter_task_dpx`: every H goes into ``best2``, and
``diag + s`` can wrap only after an H above the launch's ``limit``
(:func:`~swdask.kernels.cuda.inter_task_dpx.overflow_limit`), so a half whose best is above
it comes back as ``-1``, counted in ``n_overflow``, and is re-scored exactly in 32 bits by
the launcher.  E and F stay within
16 bits by :func:`~swdask.kernels.cuda.inter_task_dpx.fits_16bit`.

Global variant
--------------
A global search's end cell is fixed, ``(m, n)``, so the same column step serves it
(:func:`global_source`, ``mode="global"``; the launch arguments of the global kernel with
end cells, :data:`~swdask.kernels.cuda.inter_task_dpx.SIGNATURE_END`): the cell without
the floor at 0 (``max3`` for ``max3_relu``), each query in the last rows of the passes
(:func:`~swdask.kernels.cuda.inter_task.end_rows`), column 0 and row 0 at their gap
costs, and the score read from the group's last lane's last register row after the
last pass (its state after the subject's last column).  Fill and drain columns are
skipped instead (one compare a column, not a cell): global cells are negative, so a pad
column would change a lane's state.  The running maximum of every H and the lower bound
on H decide, as in the kernel with end cells, whether a half may have wrapped
(:func:`~swdask.kernels.cuda.inter_task_dpx.end_bounds`); such a pair comes back as
:data:`~swdask.kernels.cuda.inter_task_dpx.OVERFLOW` and is re-scored in 32 bits.  No end
pass follows: the ends are ``(m, n)``.

Twin
----
In the CUDA simulator the same text calls the pure-Python twins of the DPX helpers
(:data:`~swdask.kernels.cuda.inter_task_dpx.TWINS` and :func:`twin_max3_relu`), and lanes
exchange through shared memory and block barriers.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from . import codegen, inter_task, inter_task_dpx
from .compile import Rendered, simulated
from .inter_task import PAD_SCORE, mode_shape, threads_per_block
from .inter_task_dpx import OVERFLOW, SHARED_BYTES, packed_constant

#: The family's name in :data:`swdask.kernels.cuda.compile.FAMILIES`.
FAMILY = "inter_task_dpx_scan"
#: Score of the pad code's profile row (both halves): negative, and ``0 + PAD16`` cannot
#: wrap.
PAD16 = PAD_SCORE
#: Columns a loop trip, written out in the text.
UNROLL = 4
#: Register cap of a thread (``cuda.jit(max_registers=...)``): four blocks of 128 threads
#: a multiprocessor, for shapes of up to :data:`TALL_ROWS` rows; taller ones get
#: :data:`TALL_REGISTERS` (three blocks).  Static SASS for sm_90: 113 registers at 16 rows,
#: 115 at 20, no spills; 24 rows need 155 and 28 rows 147 (at 128, 24 rows spill).
MAX_REGISTERS = 128
TALL_ROWS = 20
TALL_REGISTERS = 168
#: What ``out_qend``/``out_send`` hold: the kernel computes no end cells.
NO_END = -1

#: The DPX helper the scan adds to :data:`~swdask.kernels.cuda.inter_task_dpx.DPX16_SOURCE`:
#: ``max(a, b, c, 0)`` per half (one ``VIMNMX3.RELU``).
MAX3_RELU_SOURCE = """extern "C" __device__ int sw16_max3_relu(int* out, int a, int b, int c)
{ *out = (int)__vimax3_s16x2_relu(U(a), U(b), U(c)); return 0; }
"""
#: The linked helper source.
SCAN16_SOURCE = inter_task_dpx.DPX16_SOURCE + MAX3_RELU_SOURCE
#: The helpers the text calls: name -> (symbol, Numba signature).
HELPERS = {name: inter_task_dpx._SIGNATURES[name]
           for name in ("add", "addmax", "max3", "max2", "lo16", "hi16")}
HELPERS["max3_relu"] = ("sw16_max3_relu", "int32(int32, int32, int32)")
#: The global variant's helpers and linked source: ``join16`` sets column 0 per half.
GLOBAL_HELPERS = {**{name: HELPERS[name] for name in HELPERS if name != "max3_relu"},
                  **inter_task_dpx._END_SIGNATURES}
GLOBAL_SOURCE = inter_task_dpx.DPX16_END_SOURCE
#: Modes with a variant of this kernel (semiglobal keeps the kernel with end cells).
MODES = ("local", "global")


def twin_max3_relu(a: int, b: int, c: int) -> np.int32:
    """The simulator's ``max3_relu``: ``max(a, b, c, 0)`` per 16-bit half.

    Examples
    --------
    >>> got = twin_max3_relu(inter_task_dpx.pack(-4, 9), inter_task_dpx.pack(-2, 3),
    ...                      inter_task_dpx.pack(-1, -7))
    >>> int(inter_task_dpx.TWINS["lo16"](got)), int(inter_task_dpx.TWINS["hi16"](got))
    (0, 9)
    """
    twins = inter_task_dpx.TWINS
    return twins["max_relu"](twins["max2"](a, b), c)


#: Pure-Python twins of :data:`HELPERS` and :data:`GLOBAL_HELPERS` (wrapping 16-bit
#: halves, like the hardware).
TWINS = {name: inter_task_dpx.TWINS[name] for name in {**HELPERS, **GLOBAL_HELPERS}
         if name != "max3_relu"}
TWINS["max3_relu"] = twin_max3_relu


def shared_fits(rows: int, group: int, alphabet: int) -> bool:
    """Whether a pass's packed profile and the pad row fit the block's static shared
    memory."""
    return (alphabet + 1) * rows * group * 4 <= SHARED_BYTES


def _stage_profile(span: int, threads: int, alphabet: int, pad_row: bool) -> list[str]:
    """A pass's start: the block stages the pass's packed profile (and, with ``pad_row``,
    the pad code's row of :data:`PAD16`) in shared memory."""
    lines = ["        cuda.syncthreads()",
             f"        for idx in range(tx, n_codes * {span}, {threads}):",
             f"            sprof[idx] = profile[idx // {span}, p * {span} + idx % {span}]"]
    if pad_row:
        lines += [f"        for idx in range(tx, {span}, {threads}):",
                  f"            sprof[{alphabet * span} + idx] = PADPACK"]
    return lines + ["        cuda.syncthreads()",
                    "        later = p > 0",
                    "        more = p + 1 < passes"]


def _cell_rows(indent: str, rows: int, cell_max: str, running: str) -> list[str]:
    """One column of a lane's ``rows`` register rows: the five operations a cell (the
    cell's maximum by ``cell_max``: ``max3_relu`` local, ``max3`` global), every H into
    the packed maximum ``running`` two rows at a time, and what the lane hands on."""
    lines = []
    for k in range(rows):
        lines += [f"{indent}h = {cell_max}(e{k}, f, add(diag, sprof[base + U{k}]))",
                  f"{indent}t = add(h, neg_oe)",
                  f"{indent}diag = h{k}",
                  f"{indent}h{k} = h",
                  f"{indent}e{k} = addmax(e{k}, neg_e, t)",
                  f"{indent}f = addmax(f, neg_e, t)"]
        if k % 2 == 1:
            lines += [f"{indent}{running} = max3({running}, h{k - 1}, h{k})"]
    if rows % 2:
        lines += [f"{indent}{running} = max2({running}, h{rows - 1})"]
    return lines + [f"{indent}out_h = h{rows - 1}", f"{indent}out_f = f",
                    f"{indent}out_c = in_c"]


def _keep_last_row(indent: str, last: int) -> list[str]:
    """The group's last lane keeps its last row (H and F of column ``st - last``) in
    ``boundary`` for the next pass."""
    return [f"{indent}jl = int32(st - {last})",
            f"{indent}if lane == {last} and more and jl >= 0 and jl < ns32:",
            f"{indent}    at = bslot + uint64(2 * jl)",
            f"{indent}    boundary[at] = out_h",
            f"{indent}    boundary[at + uint64(1)] = out_f"]


def _group_max(name: str, group: int, threads: int, shuffles: bool) -> list[str]:
    """The packed maximum ``name`` over the group's lanes, both halves at once, in lane 0."""
    lines = ["    cuda.syncwarp()" if shuffles else "    cuda.syncthreads()"]
    shift = 1
    while shift < group:
        lines += codegen.shuffle_down(name, shift, shuffles=shuffles, scratch="xch[0, {}]",
                                      guard=f"tx + {shift} < {threads}")
        lines += [f"    if lane + {shift} < {group}:", f"        {name} = max2({name}, o_{name})"]
        shift *= 2
    return lines


def kernel_source(rows: int, group: int, threads: int, shuffles: bool, alphabet: int) -> str:
    """Source of the scan kernel for ``rows`` register rows per lane and groups of
    ``group`` lanes (``shuffles``: warp shuffles on a GPU; shared memory and barriers in
    the simulator).  Launch configuration and arguments: as
    :func:`swdask.kernels.cuda.inter_task_dpx.kernel_source` (local), ``pad_code``
    unused (the pad code is ``alphabet``, whose row the kernel stages itself)."""
    span = rows * group
    last = group - 1
    in_pass, in_trip = " " * 8, " " * 12
    lines = ["def kernel(profile, passes, s_res, s_off, order, warp_len, warp_base, pad_code, "
             "neg_oe,",
             "           neg_e, limit, boundary, out_score, out_qend, out_send, n_overflow):",
             f"    sprof = cuda.shared.array({(alphabet + 1) * span}, int32)"]
    lines += codegen.thread_pair(group, threads, shuffles=shuffles, exchange_rows=3)
    lines += [
        "    zero = int32(0)",
        "    neg_oe = int32(neg_oe)",
        "    neg_e = int32(neg_e)",
        f"    lbase = uint32(lane * {rows})",
        "    n32 = int32(n)",
        "    ns32 = int32(n_steps)",
        # Fill columns of the last lane, rounded up to whole trips (the rest are drain).
        f"    total = int32((ns32 + {last + UNROLL - 1}) // {UNROLL} * {UNROLL})",
        "    bslot = uint64(2 * slot)",
        "    best2 = zero",
        "    for p in range(passes):",
    ]
    lines += _stage_profile(span, threads, alphabet, pad_row=True)
    lines += [f"{in_pass}h{k} = zero" for k in range(rows)]
    lines += [f"{in_pass}e{k} = neg_oe" for k in range(rows)]
    lines += [f"{in_pass}out_h = zero", f"{in_pass}out_f = neg_oe", f"{in_pass}out_c = PADCODE",
              f"{in_pass}diag_in = zero", f"{in_pass}step = int32(0)",
              f"{in_pass}while step < total:"]
    for u in range(UNROLL):
        lines += [f"{in_trip}st = int32(step + {u})"]
        lines += codegen.lane_exchange(in_trip, shuffles=shuffles, lane="lane",
                                       single=group == 1, names=("h", "f", "c"))
        lines += [f"{in_trip}if lane == 0:",
                  f"{in_trip}    in_c = int32(s_res[uint64(start) + uint64(st)]) if st < n32 "
                  "else PADCODE",
                  f"{in_trip}    in_h = zero",
                  f"{in_trip}    in_f = neg_oe",
                  f"{in_trip}    if later and st < ns32:",
                  f"{in_trip}        at = bslot + uint64(2 * st)",
                  f"{in_trip}        in_h = boundary[at]",
                  f"{in_trip}        in_f = boundary[at + uint64(1)]",
                  f"{in_trip}diag = diag_in",
                  f"{in_trip}diag_in = in_h",
                  f"{in_trip}f = in_f",
                  f"{in_trip}base = uint32(in_c) * USPAN + lbase"]
        lines += _cell_rows(in_trip, rows, "max3_relu", "best2")
        lines += _keep_last_row(in_trip, last)
    lines += [f"{in_trip}step = int32(step + {UNROLL})"]
    lines += _group_max("best2", group, threads, shuffles)
    lines += ["    if valid and lane == 0:"]
    for row, get in ((0, "lo16"), (1, "hi16")):
        lines += [f"        best = {get}(best2)",
                  "        if best > limit:  # may have wrapped: re-scored in 32 bits",
                  f"            out_score[{row}, pair] = -1",
                  f"            cuda.atomic.add(n_overflow, {row}, 1)",
                  "        else:",
                  f"            out_score[{row}, pair] = best",
                  f"        out_qend[{row}, pair] = {NO_END}",
                  f"        out_send[{row}, pair] = {NO_END}"]
    return "\n".join(lines) + "\n"


def global_source(rows: int, group: int, threads: int, shuffles: bool, alphabet: int) -> str:
    """Source of the scan kernel's global variant (see the module's notes): arguments of
    :data:`~swdask.kernels.cuda.inter_task_dpx.SIGNATURE_END`; ``pad_code`` unused."""
    span = rows * group
    last = group - 1
    in_pass, in_trip, in_cell = " " * 8, " " * 12, " " * 16
    left = inter_task._left
    lines = ["def kernel(profile, passes, s_res, s_off, order, warp_len, warp_base, pad_code, "
             "neg_oe,",
             "           neg_e, limit, m_a, m_b, gap_o, gap_e, floor16, boundary, out_score, "
             "out_qend,",
             "           out_send, n_overflow):",
             f"    sprof = cuda.shared.array({(alphabet + 1) * span}, int32)"]
    lines += codegen.thread_pair(group, threads, shuffles=shuffles, exchange_rows=3)
    lines += [
        "    zero = int32(0)",
        "    neg_oe = int32(neg_oe)",
        "    neg_e = int32(neg_e)",
        "    gap_o = int32(gap_o)",
        "    gap_e = int32(gap_e)",
        f"    lbase = uint32(lane * {rows})",
        "    n32 = int32(n)",
        "    ns32 = int32(n_steps)",
        f"    total = int32((ns32 + {last + UNROLL - 1}) // {UNROLL} * {UNROLL})",
        "    bslot = uint64(2 * slot)",
        f"    pre_a = passes * {span} - m_a",
        f"    pre_b = passes * {span} - m_b",
        # Every H of the subject's columns (both halves): with the lower bound it says
        # whether a half may have wrapped.
        f"    tmax = int32({int(packed_constant(-32768))})",
        "    score2 = zero",
        "    for p in range(passes):",
    ]
    lines += _stage_profile(span, threads, alphabet, pad_row=False)
    lines += [f"{in_pass}row0 = (p * {group} + lane) * {rows}"]
    # Column 0 of every row at its gap cost (the rows above the query repeat row 0:
    # inter_task.end_rows), E from the H beside it; row 0 counts down by e a column.
    lines += [f"{in_pass}h{k} = join16({left(f'(row0 + {k + 1} - pre_a)', 'global')}, "
              f"{left(f'(row0 + {k + 1} - pre_b)', 'global')})" for k in range(rows)]
    lines += [f"{in_pass}e{k} = add(h{k}, neg_oe)" for k in range(rows)]
    lines += [f"{in_pass}diag_in = join16({left('(row0 - pre_a)', 'global')}, "
              f"{left('(row0 - pre_b)', 'global')})",
              f"{in_pass}top = join16(int32(-gap_o), int32(-gap_o))",
              # What a lane hands on before its first column: its last row's column 0,
              # the diagonal of the next lane's first cell.
              f"{in_pass}out_h = h{rows - 1}", f"{in_pass}out_f = neg_oe",
              f"{in_pass}out_c = PADCODE", f"{in_pass}step = int32(0)",
              f"{in_pass}while step < total:"]
    for u in range(UNROLL):
        lines += [f"{in_trip}st = int32(step + {u})"]
        lines += codegen.lane_exchange(in_trip, shuffles=shuffles, lane="lane",
                                       single=group == 1, names=("h", "f", "c"))
        lines += [f"{in_trip}if lane == 0:",
                  f"{in_trip}    in_c = int32(s_res[uint64(start) + uint64(st)]) if st < n32 "
                  "else PADCODE",
                  f"{in_trip}    top = add(top, neg_e)",
                  f"{in_trip}    in_h = top",
                  f"{in_trip}    if later and st < ns32:",
                  f"{in_trip}        at = bslot + uint64(2 * st)",
                  f"{in_trip}        in_h = boundary[at]",
                  f"{in_trip}        in_f = boundary[at + uint64(1)]",
                  f"{in_trip}    else:",
                  f"{in_trip}        in_f = add(in_h, neg_oe)",
                  f"{in_trip}diag = diag_in",
                  f"{in_trip}diag_in = in_h",
                  f"{in_trip}jc = int32(st - lane)",
                  f"{in_trip}if jc >= 0 and jc < n32:  # a column of the subject",
                  f"{in_cell}f = in_f",
                  f"{in_cell}base = uint32(in_c) * USPAN + lbase"]
        lines += _cell_rows(in_cell, rows, "max3", "tmax")
        lines += _keep_last_row(in_trip, last)
    lines += [f"{in_trip}step = int32(step + {UNROLL})",
              # Columns past the subject are skipped, so the last row's register holds
              # its last column: after the last pass, the last lane's is H(m, n) of both
              # queries (read once a pass, not tested for in every column).
              f"{in_pass}score2 = h{rows - 1}"]
    lines += _group_max("tmax", group, threads, shuffles)
    if group > 1:  # the score, from the group's last lane
        lines += codegen.shuffle_down("score2", last, shuffles=shuffles, scratch="xch[0, {}]",
                                      guard=f"tx + {last} < {threads}")
        lines += ["    score2 = o_score2"]
    lines += ["    if valid and lane == 0:"]
    for row, half, get in ((0, "a", "lo16"), (1, "b", "hi16")):
        lines += [
            "        if n == 0:  # H(m, 0)",
            f"            out_score[{row}, pair] = 0 if m_{half} == 0 else "
            f"-(gap_o + m_{half} * gap_e)",
            f"        elif {get}(tmax) > limit or -(2 * gap_o + (m_{half} + n) * gap_e) < floor16:",
            f"            out_score[{row}, pair] = {OVERFLOW}  # re-scored in 32 bits",
            f"            cuda.atomic.add(n_overflow, {row}, 1)",
            "        else:",
            f"            out_score[{row}, pair] = {get}(score2)",
            f"        out_qend[{row}, pair] = m_{half}",
            f"        out_send[{row}, pair] = n"]
    return "\n".join(lines) + "\n"


def render(rows: int, group: int, alphabet: int, threads: int,
           mode: str = "local") -> Rendered:
    """The scan kernel's text for a shape, for :func:`swdask.kernels.cuda.compile.get_kernel`
    (``family="inter_task_dpx_scan"``): DPX helpers linked with LTO and registers capped on
    a GPU, their twins in the simulator.  ``mode``: ``"local"`` or ``"global"`` (named in
    the shape only when not local, :func:`~swdask.kernels.cuda.inter_task.mode_shape`).

    Raises
    ------
    ValueError
        If ``rows`` is not a positive multiple of 4 (the profile's vector loads), a pass's
        packed profile would not fit the block's shared memory, or ``mode`` has no variant.
    """
    from numba import cuda  # rendering is for compiling: Numba is needed then

    if mode not in MODES:
        raise ValueError(f"the scan kernel has no {mode!r} variant; modes: {', '.join(MODES)}")
    if rows <= 0 or rows % 4:
        raise ValueError(f"the scan kernel needs rows a multiple of 4, not {rows}")
    if not shared_fits(rows, group, alphabet):
        raise ValueError(f"{rows} rows x {group} lanes x {alphabet + 1} codes exceed "
                         f"{SHARED_BYTES} bytes of shared memory")
    in_simulator = simulated()
    namespace = {"cuda": cuda, "int32": np.int32, "uint32": np.uint32, "uint64": np.uint64,
                 "USPAN": np.uint32(rows * group), "PADPACK": packed_constant(PAD16),
                 "PADCODE": np.int32(alphabet)}
    namespace.update({f"U{k}": np.uint32(k) for k in range(rows)})
    local = mode == "local"
    helpers, linked = (HELPERS, SCAN16_SOURCE) if local else (GLOBAL_HELPERS, GLOBAL_SOURCE)
    if in_simulator:
        namespace.update({name: TWINS[name] for name in helpers})
        link, options = (), {}
    else:
        for name, (symbol, declared) in helpers.items():
            namespace[name] = cuda.declare_device(symbol, declared)
        link, options = (linked,), {"lto": True, "max_registers": register_cap(rows)}
    source = (kernel_source if local else global_source)(
        rows, group, threads, shuffles=not in_simulator, alphabet=alphabet)
    suffix = "" if local else f"-{mode}"
    return Rendered(name=f"{FAMILY}-R{rows}-G{group}-A{alphabet}-T{threads}{suffix}",
                    source=source, namespace=namespace, link=link, options=options)


def register_cap(rows: int) -> int:
    """Registers a thread of a shape of ``rows`` rows may use.

    Examples
    --------
    >>> register_cap(20), register_cap(24)
    (128, 168)
    """
    return MAX_REGISTERS if rows <= TALL_ROWS else TALL_REGISTERS


def signature(mode: str = "local", **shape: Any) -> str:
    """The argument types of a launch: those of the 16-bit kernel with end cells of the
    same mode (:func:`swdask.kernels.cuda.inter_task_dpx.signature`)."""
    return inter_task_dpx.signature(mode)


#: Speed of each tile height for the shape chooser: padded rows a second (thousands) of a
#: query pair against 102.6 M residues, end pass taken out, measured on an H200 of a
#: 2 x H200 host, 2026-11-28 (``workflows/benchmarks/gpu_search.py --variants
#: 16scanr16,16scanr20,16scanr24,16scanr28``, the 20 CUDASW++ queries): 16.8 at 16 rows
#: (static SASS had predicted 16 within 5% of 20), 25.7-26.2 at 20, 23.8-25.1 at 24,
#: 24.2-27.1 at 28.  20 rows are the fastest a row; 24 pad short queries less (a 375-residue
#: query: one pass of 384 rows against two of 320), 1.44-1.54 x as fast on the pairs of
#: 144-375 residues.  16 and 28 never win by enough to be worth their compiled shapes.
ROW_RATES = {20: 25.9, 24: 24.1}


def choose_shape(m: int, alphabet: int) -> tuple[int, int]:
    """``(rows, group)`` for a query pair whose longer query has ``m`` residues:
    :func:`swdask.kernels.cuda.inter_task_dpx.choose_shape` with this kernel's heights
    (:data:`ROW_RATES`) and its shared memory (the pad row, :func:`shared_fits`)."""
    return inter_task_dpx.choose_shape(m, alphabet, ROW_RATES, shared_fits)


def shapes(alphabets: Iterable[int], longest: int = 8192,
           modes: Iterable[str] = MODES) -> list[dict[str, Any]]:
    """Every shape :func:`choose_shape` picks for queries of 1 to ``longest`` residues, in
    each of ``modes``, as ``render`` arguments."""
    threads = threads_per_block()
    found = {(choose_shape(m, a), a) for a in alphabets for m in range(1, longest + 1)}
    return [{"rows": r, "group": g, "alphabet": a, "threads": threads, **mode_shape(mode)}
            for mode in modes for (r, g), a in sorted(found)]
