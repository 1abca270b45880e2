"""Smith-Waterman (and global or semiglobal) scores on the GPU for long subjects: a thread
block per (query, subject).

Why
---
The inter-task kernels (:mod:`~swdask.kernels.cuda.inter_task`,
:mod:`~swdask.kernels.cuda.inter_task_dpx`) give each pair at most one warp.  A database of
a few very long subjects (titin-like proteins of 10-35k residues, long DNA) then has too
few warps to fill the GPU, the last long pairs of a launch run alone, and a query longer
than a warp's ``32 * R`` register rows pays a global boundary row per pass.  Here a whole
block of ``W`` warps aligns one pair, so one long pair brings ``W`` warps of work and a
pass covers ``32 * W * R`` query rows.

Layout
------
Thread ``t`` of the block (lane ``t % 32`` of warp ``t // 32``) holds query rows
``[t*R, (t+1)*R)`` of the current pass in registers and sweeps the subject as the
inter-task kernel's lanes do: at step ``k`` it computes column ``k - lag(t)`` and hands
the H and F of its last row to thread ``t + 1``.  Within a warp that is a warp shuffle.
Across a warp boundary it goes through shared memory: the last lane of warp ``w``
writes into a ring of ``2*D`` column slots and the first lane of warp ``w + 1`` reads the
slot ``D`` steps later.  That delay is built into the wavefront, ``lag(t) = t + w*(D-1)``
for ``t`` in warp ``w``, and the block meets at one barrier every ``D`` steps: a value
written in one chunk of ``D`` steps is read in the next chunk and overwritten in the
one after, so one barrier per ``D`` steps (not per step) orders every hand-over and warps
otherwise run freely.  The price is a ramp of ``(W-1)*(D-1)`` extra steps per pass.

A query longer than ``32*W*R`` rows takes several passes; the block's last thread writes
its row (H and F per subject column) to a global boundary buffer that the block's first
thread reads in the next pass; two halves alternate by pass parity, so a pass never
reads a row that it is overwriting.  The pass's slice of the query profile sits in shared
memory in the narrowest integers holding the matrix (int8 for every standard matrix,
which doubles the rows a block can hold next to int16; int16 or int32 for larger
entries), with no pad-code row: every block stops at its own subject's end, so it never
reads a pad column.  Subject residues are read straight from the concatenated
residues: the lanes of a warp read consecutive bytes, one transaction per warp and step.

Ends follow the rule of every swdask kernel (highest score, then smallest subject end,
then smallest query end); each thread keeps its best as the inter-task lanes do and
thread 0 reduces the block's candidates from shared memory (a few hundred compares per
pair, nothing next to the pair's ``m * n`` cells).

Global and semiglobal kernels (``mode``) hold the query in the last rows of their passes
and keep the end cells as the inter-task end kernels do
(:func:`swdask.kernels.cuda.inter_task._end_source`), the block's last thread holding row
``m``.

Scores are exact 32-bit integers.  Launch: one block of ``32*W`` threads per pair,
``grid = n_pairs``; shapes come from :func:`choose_shape`; the launcher
(:mod:`~swdask.kernels.cuda.launcher`) routes subjects of at least
:data:`INTRA_THRESHOLD` residues here.

Twin
----
The simulator has no warp shuffles: there the exchange between lanes goes through shared
memory and a barrier per step (the ring between warps and the chunk barriers stay as on
the GPU), and the warp width is a parameter, so CI checks hand-overs across several
warps with blocks of a few dozen Python threads.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from . import codegen, inter_task
from .compile import Rendered, simulated
from .inter_task import NEG, PAD_SCORE

if TYPE_CHECKING:
    import numpy.typing as npt

#: Subjects of at least this many residues go to this kernel, the others to the
#: inter-task kernels (the one place the threshold lives; the launcher reads it).
#:
#: Measured on an H100 (``workflows/benchmarks/intra_threshold.py``, 2026-11-23, results in
#: ``workflows/benchmarks/results/intra_threshold_2026-11-23_h100.json``), kernel GCUPS of
#: the 16-bit inter-task / 32-bit inter-task / this kernel on 16 M residues of subjects of
#: one length band:
#:
#: ======  ====================  ====================
#: band    375-residue queries   2,000-residue queries
#: ======  ====================  ====================
#: 2,000   2418 / 1299 / 861     2441 / 1192 / 679
#: 8,000   2155 / 1183 / 790     1956 /  970 / 724
#: 16,000  1415 /  858 / 726     1135 /  554 / 679
#: 32,000   736 /  511 / 423      581 /  294 / 605
#: ======  ====================  ====================
#:
#: The inter-task kernels win below 32,000 residues; at 32,000 this kernel first wins, for
#: long queries only, and its share grows with the length (0.28 -> 1.04 of the 16-bit
#: kernel's rate from 2,000 to 32,000 residues).  Routing from 8,192 slowed a realistic
#: search (Swiss-Prot plus 8 subjects of 13-33k residues, 375-residue queries) from 286 to
#: 170 GCUPS.  So only subjects of 65,536 residues and more (past the last measured band,
#: where the trend puts this kernel ahead for every query length) come here.
INTRA_THRESHOLD = 65_536
#: Warps per block at most (one block per pair); registers cap a block near 8 warps of
#: 8-row lanes on Hopper.
MAX_WARPS = 8
#: Query rows per thread (register tile), as the 32-bit inter-task kernel's measured best.
ROWS = 8
#: Steps between block barriers, which is also the extra lag of each warp behind the
#: one before it (the ring between two warps holds ``2 * DELAY`` columns).
DELAY = 16
#: Static shared memory the profile of a pass may take (the ring, the reduction
#: scratch and the simulator's exchange take the rest of the 48 KiB).
PROFILE_BYTES = 40 * 1024
#: Lanes per "warp" in the simulator (no shuffles there): small warps let the CI tests
#: hand values across several warps with few Python threads.  On a GPU a warp is 32.
SIMULATOR_LANES = 8



def kernel_source(rows: int, warps: int, lanes: int, delay: int, shuffles: bool,
                  alphabet: int, dtype: str = "int8", mode: str = "local") -> str:
    """Source of the block-per-pair kernel.

    Parameters
    ----------
    rows : int
        Query rows per thread, unrolled in registers.
    warps : int
        Warps per block.
    lanes : int
        Threads per warp: 32 with ``shuffles`` (the GPU); any positive number without.
    delay : int
        Steps between block barriers (and the extra lag of each warp), at least 1.
    shuffles : bool
        Exchange within a warp by warp shuffles (GPU) or through shared memory with a
        barrier per step (the simulator, which has no shuffles).
    alphabet : int
        Codes of the profile (rows of ``sprof``).
    dtype : str, default "int8"
        Type of the shared profile (``int8``, ``int16`` or ``int32``, see
        :func:`profile_dtype`).
    mode : {"local", "global", "semiglobal"}, default "local"
        Global and semiglobal kernels take the query's length ``m`` after ``gap_e``, hold
        the query in the last rows of their passes and keep the end cells as
        :func:`swdask.kernels.cuda.inter_task._end_source` does (the block's last thread
        holds row ``m``).
    """
    if shuffles and lanes != 32:
        raise ValueError("warp shuffles need 32 lanes per warp")
    if delay < 1 or rows < 1 or warps < 1 or lanes < 1:
        raise ValueError("rows, warps, lanes and delay must be positive")
    local = mode == "local"
    threads = warps * lanes
    span = threads * rows
    ring = 2 * delay
    ramp = threads - 1 + (warps - 1) * (delay - 1)
    lines = [
        "def kernel(profile, passes, s_res, s_off, order, b_off, gap_oe, gap_e, boundary,"
        if local else "def kernel(profile, passes, s_res, s_off, order, b_off, gap_oe, gap_e, m,",
        "           out_score, out_qend, out_send):" if local else
        "           boundary, out_score, out_qend, out_send):",
        "    tx = cuda.threadIdx.x",
        "    pair = cuda.blockIdx.x",
        f"    lane = tx % {lanes}",
        f"    warp = tx // {lanes}",
        f"    sprof = cuda.shared.array({alphabet * span}, {dtype})",
        f"    ring = cuda.shared.array({max(1, warps - 1) * ring * 2}, int32)",
        f"    red = cuda.shared.array((3, {threads}), int32)",
        f"    xch = cuda.shared.array((2, {threads}), int32)" if not shuffles else "    pass",
        "    n_codes = profile.shape[0]",
        "    subject = order[pair]",
        "    start = s_off[subject]",
        "    n = s_off[subject + 1] - start",
        # Two halves of the boundary buffer, (H, F) per column, alternate by pass.
        "    half = boundary.shape[0] // 2",
        "    base = 2 * b_off[pair]",
        f"    lag = tx + warp * {delay - 1}",
        f"    tbase = uint32(tx * {rows})",
        f"    n_steps = n + {ramp}",
    ]
    in_pass, in_step, in_col = " " * 8, " " * 12, " " * 16  # the loops' bodies
    neg = f"int32({NEG})"
    lines += codegen.scalars() if local else (codegen.scalars(best=False)
                                              + inter_task.end_best("    ", mode, span))
    lines += ["    for p in range(passes):", f"{in_pass}row0 = (p * {threads} + tx) * {rows}"]
    lines += codegen.stage_profile(in_pass, span, threads)
    lines += [f"{in_pass}rd = ((p + 1) % 2) * half + base", f"{in_pass}wr = (p % 2) * half + base"]
    lines += (codegen.pass_registers(in_pass, rows, neg) if local
              else inter_task.end_registers(in_pass, rows, mode))
    lines += codegen.wavefront(in_pass, "n_steps", "lag", shuffles=shuffles, lane="lane",
                               barrier=delay)
    lines += [f"{in_step}if lane == 0:", f"{in_col}if warp == 0:"]
    lines += (codegen.edge_load(in_col + "    ", "p > 0 and j >= 0 and j < n", "rd + 2 * j", neg)
              if local else inter_task.end_edge_load(in_col + "    ", "p > 0 and j >= 0 and j < n",
                                                     "rd + 2 * j", mode))
    lines += [
        f"{in_col}else:  # written by the warp before, one chunk ago",
        f"{in_col}    slot = ((warp - 1) * {ring} + (step + {delay}) % {ring}) * 2",
        f"{in_col}    in_h = ring[slot]",
        f"{in_col}    in_f = ring[slot + 1]",
        f"{in_step}if j >= 0 and j < n:",
        f"{in_col}code = s_res[uint64(start + j)]",
        f"{in_col}at = uint32(code) * uint32({span}) + tbase",
    ]
    lines += codegen.column_start(in_col, cmax=local)
    for k in range(rows):
        lines += [f"{in_col}s = int32(sprof[at + U{k}])"]
        lines += (codegen.gotoh_cell(k, in_col, "s", dpx=False) if local else
                  codegen.gotoh_cell(k, in_col, "s", dpx=False, local=False, cmax=False))
    lines += codegen.hand_on(in_col)
    lines += [  # the next warp's first lane reads it one chunk later
        f"{in_col}if lane == {lanes - 1} and warp < {warps - 1}:",
        f"{in_col}    slot = (warp * {ring} + step % {ring}) * 2",
        f"{in_col}    ring[slot] = up",
        f"{in_col}    ring[slot + 1] = f",
    ]
    lines += codegen.edge_store(in_col, f"tx == {threads - 1} and p + 1 < passes", "wr + 2 * j")
    lines += (codegen.best_update(in_col, rows, "j + 1", "row0") if local else
              inter_task.end_update(in_col, rows, mode, f"tx == {threads - 1} and p == passes - 1",
                                    "up"))
    lines += [
        "    red[0, tx] = best",
        "    red[1, tx] = best_j",
        "    red[2, tx] = best_i",
        "    cuda.syncthreads()",
        "    if tx == 0:",
        f"        for t in range(1, {threads}):",
        "            o_best = red[0, t]",
        "            o_j = red[1, t]",
        "            o_i = red[2, t]",
        ("            if o_best > best or (o_best == best and (o_j < best_j or "
        "(o_j == best_j and o_i < best_i))):"),
        "                best = o_best",
        "                best_j = o_j",
        "                best_i = o_i",
    ] + (codegen.write_best("        ") if local else
         ["        out_score[pair] = best", "        out_qend[pair] = best_i",
          "        out_send[pair] = best_j"])
    return "\n".join(lines) + "\n"


def lanes_per_warp() -> int:
    """32 on a GPU; :data:`SIMULATOR_LANES` in the simulator."""
    return SIMULATOR_LANES if simulated() else 32


#: Argument types of a launch (:mod:`~swdask.kernels.cuda.launcher`), for building ahead:
#: profile (``PROFILE``: the profile's integer type), passes, s_res, s_off, order,
#: boundary offsets, gap_oe, gap_e, boundary, out_score, out_qend, out_send.
SIGNATURE = ("void(PROFILE[:, ::1], int64, uint8[::1], int64[::1], int64[::1], int64[::1], "
             "int32, int32, int32[::1], int32[::1], int32[::1], int32[::1])")
#: The global and semiglobal kernels' argument types: the query's length ``m`` (int64)
#: after ``gap_e``.
SIGNATURE_END = ("void(PROFILE[:, ::1], int64, uint8[::1], int64[::1], int64[::1], int64[::1], "
                 "int32, int32, int64, int32[::1], int32[::1], int32[::1], int32[::1])")


def render(rows: int, warps: int, alphabet: int, *, lanes: int | None = None,
           delay: int | None = None, dtype: str = "int8", mode: str = "local") -> Rendered:
    """The block-per-pair kernel's text for a shape and profile type, for
    :func:`swdask.kernels.cuda.compile.get_kernel` (``family="intra_task"``).

    ``lanes`` defaults to :func:`lanes_per_warp` (on a GPU it must be 32), ``delay`` to
    :data:`DELAY`; ``dtype`` is the profile's (:func:`profile_dtype`), by name; ``mode``
    as :func:`swdask.kernels.cuda.inter_task.render` (named only when not local).

    Raises
    ------
    ValueError
        If a pass's profile would not fit :data:`PROFILE_BYTES`.
    """
    from numba import cuda  # rendering is for compiling: Numba is needed then

    in_simulator = simulated()
    lanes = lanes or lanes_per_warp()
    delay = delay or DELAY
    dtype = np.dtype(dtype)
    if not shared_fits(rows, warps * lanes, alphabet, dtype.itemsize):
        raise ValueError(f"{rows} rows x {warps * lanes} threads x {alphabet} codes exceed "
                         f"{PROFILE_BYTES} bytes of shared memory")
    source = kernel_source(rows, warps, lanes, delay, shuffles=not in_simulator,
                           alphabet=alphabet, dtype=dtype.name, mode=mode)
    namespace = {"cuda": cuda, "int32": np.int32, "int16": np.int16, "int8": np.int8,
                 "uint32": np.uint32, "uint64": np.uint64}
    # Unsigned profile indices: Numba adds a negative-index wrap-around (a compare and
    # a select) to every signed index, which cost the 16-bit kernel 30%.
    namespace.update({f"U{k}": np.uint32(k) for k in range(rows)})
    suffix = "" if mode == "local" else f"-{mode}"
    return Rendered(name=f"intra_task-R{rows}-W{warps}-A{alphabet}-L{lanes}-D{delay}-{dtype.name}"
                         f"{suffix}", source=source, namespace=namespace)


def signature(dtype: str = "int8", mode: str = "local", **shape: Any) -> str:
    """The argument types of a launch: the profile's type follows ``dtype``, the query's
    length comes with global and semiglobal ``mode``."""
    return (SIGNATURE if mode == "local" else SIGNATURE_END).replace("PROFILE",
                                                                      np.dtype(dtype).name)


def shapes(alphabets: Iterable[int], longest: int = 65_536) -> list[dict[str, Any]]:
    """The shapes :func:`choose_shape` picks for queries up to ``longest`` residues with
    int8 profiles (every standard matrix), as ``render`` arguments."""
    lanes = lanes_per_warp()
    found = set()
    for a in alphabets:
        m = 1
        while m <= longest:
            found.add((choose_shape(m, a, lanes, 1), a))
            m += max(1, m // 64)
    return [{"rows": r, "warps": w, "alphabet": a, "lanes": lanes, "dtype": "int8"}
            for (r, w), a in sorted(found)]


def shared_fits(rows: int, threads: int, alphabet: int, itemsize: int = 1) -> bool:
    """Whether a pass's profile (``itemsize`` bytes an entry) fits :data:`PROFILE_BYTES`."""
    return alphabet * rows * threads * itemsize <= PROFILE_BYTES


def choose_shape(m: int, alphabet: int, lanes: int = 32, itemsize: int = 1) -> tuple[int, int]:
    """``(rows, warps)`` for a query of ``m`` residues: :data:`ROWS` rows per thread and
    the fewest warps (at most :data:`MAX_WARPS`, and within :data:`PROFILE_BYTES` for
    profile entries of ``itemsize`` bytes) whose rows hold the query, so short queries
    leave no idle warps and long ones take as few passes as the block allows.

    Examples
    --------
    >>> choose_shape(375, 24)
    (8, 2)
    >>> choose_shape(5000, 24)  # six warps of 8-row lanes fill the shared int8 profile
    (8, 6)
    >>> choose_shape(5000, 24, itemsize=2)
    (8, 3)
    >>> choose_shape(5000, 5)
    (8, 8)
    """
    rows = ROWS
    warps = max(1, min(MAX_WARPS, math.ceil(max(m, 1) / (lanes * rows))))
    while warps > 1 and not shared_fits(rows, warps * lanes, alphabet, itemsize):
        warps -= 1
    while rows > 1 and not shared_fits(rows, warps * lanes, alphabet, itemsize):
        rows -= 1
    return rows, warps


#: Score of rows past the query, per profile type: any negative score keeps every cell
#: of those rows below (or, with free gaps, tied at a later row or column with) the real
#: cell it came from, so scores and ends are unchanged.
PAD = {"int8": -128, "int16": PAD_SCORE, "int32": NEG}


def profile_dtype(matrix: npt.ArrayLike, fill: int = 0) -> np.dtype:
    """The narrowest of int8, int16 and int32 holding every entry of ``matrix`` and
    ``fill`` (the score of the rows above a global query, ``-gap_extend``: see
    :func:`swdask.kernels.cuda.inter_task.end_rows`).

    Examples
    --------
    >>> profile_dtype(np.array([[11, -4], [-4, 5]])).name
    'int8'
    >>> profile_dtype(np.array([[8000, -8000], [-8000, 8000]])).name
    'int16'
    """
    matrix = np.asarray(matrix)
    low = min(int(matrix.min(initial=0)), int(fill))
    high = int(matrix.max(initial=0))
    for dtype in (np.int8, np.int16):
        info = np.iinfo(dtype)
        if info.min < low and high <= info.max:
            return np.dtype(dtype)
    return np.dtype(np.int32)


def query_profile(query: np.ndarray, matrix: npt.ArrayLike, rows_total: int,
                  dtype: npt.DTypeLike = None, mode: str = "local",
                  gap_extend: int = 0) -> np.ndarray:
    """Profile ``[code, row]`` of the query in ``dtype`` (default
    :func:`profile_dtype`), rows past it :data:`PAD` (no pad-code row: a block never
    reads past its subject); global and semiglobal (``mode``), the query in the last
    rows (:func:`swdask.kernels.cuda.inter_task.end_rows`).

    Examples
    --------
    >>> query_profile(np.array([1, 0], np.uint8), np.array([[2, -1], [-1, 3]]), 3).tolist()
    [[-1, 2, -128], [3, -1, -128]]
    """
    matrix = np.asarray(matrix)
    dtype = np.dtype(dtype or profile_dtype(matrix))
    if mode != "local":
        return inter_task.end_rows(query, matrix, max(rows_total, 1), mode,
                                   gap_extend).astype(dtype)
    profile = np.full((matrix.shape[0], max(rows_total, 1)), PAD[dtype.name], dtype=dtype)
    profile[:, :len(query)] = matrix[:, np.asarray(query, np.intp)]
    return profile


def boundary_offsets(lengths: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], int]:
    """Start of each pair's columns in the boundary buffer, and the buffer's size (int32
    words: two halves of (H, F) per column of every pair)."""
    lengths = np.asarray(lengths, np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return offsets, int(4 * max(int(lengths.sum()), 1))
