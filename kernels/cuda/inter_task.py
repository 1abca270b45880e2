"""Smith-Waterman scores on the GPU: a thread group per (query, subject) pair.

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

The query profile (``profile[a, i]``, int32, rows past the query padded with a large
negative score) is read through the L1 cache; subjects are read byte by byte from the
partition's concatenated residues, all groups of a warp looping to the warp's longest
subject (the store sorts subjects by length, so that is little waste).  Columns past a
subject's end read the pad code, whose scores are so negative that they cannot reach
any earlier cell's score, so the result is unchanged.

Ends follow the rule of every swdask kernel (smallest subject end, then smallest query
end): each lane keeps the column maximum of its rows, takes a new best only when it is
greater, or equal at a smaller column, and finds the first row holding it by scanning
its registers; the group then reduces (score, column, row) lexicographically.

Scores are exact 32-bit integers.  Launch: blocks of ``THREADS`` threads, one group per
pair, ``grid = ceil(n_pairs * G / THREADS)``.
"""
from __future__ import annotations

import math

import numpy as np
from numba import config, cuda

THREADS = 128
SIMULATOR_THREADS = 32
#: Query rows per lane (registers per lane grow with it).
ROWS = 16
#: Score of the pad code and of query rows past the end: far below any real score.
PAD_SCORE = -(1 << 20)
NEG = -(1 << 29)

_KERNELS = {}


def _kernel_source(rows: int, group: int, threads: int, shuffles: bool) -> str:
    """Source of the kernel for ``rows`` register rows per lane and groups of ``group``.

    With ``shuffles`` the lanes exchange values through warp shuffles (the GPU kernel);
    without, through shared memory and block barriers (the simulator, which has no warp
    shuffles); everything else is the same text.
    """
    r = range(rows)

    def exchange(pad):
        if group == 1:
            return [f"{pad}in_h = out_h", f"{pad}in_f = out_f"]
        if shuffles:
            return [f"{pad}in_h = cuda.shfl_up_sync(0xFFFFFFFF, out_h, 1)",
                    f"{pad}in_f = cuda.shfl_up_sync(0xFFFFFFFF, out_f, 1)"]
        return [f"{pad}xch[0, tx] = out_h", f"{pad}xch[1, tx] = out_f", f"{pad}cuda.syncthreads()",
                f"{pad}in_h = xch[0, tx - 1] if tx > 0 else out_h",
                f"{pad}in_f = xch[1, tx - 1] if tx > 0 else out_f", f"{pad}cuda.syncthreads()"]

    def down(name, shift):
        if shuffles:
            return [f"    o_{name} = cuda.shfl_down_sync(0xFFFFFFFF, {name}, {shift})"]
        return [f"    xch[0, tx] = {name}", "    cuda.syncthreads()",
                f"    o_{name} = xch[0, tx + {shift}] if tx + {shift} < {threads} else {name}",
                "    cuda.syncthreads()"]

    lines = [
        "def kernel(profile, passes, s_res, s_off, order, warp_len, warp_base, pad_code, gap_oe,",
        "           gap_e, boundary, out_score, out_qend, out_send):",
        "    tid = cuda.grid(1)",
        "    tx = cuda.threadIdx.x",
        f"    xch = cuda.shared.array((2, {threads}), int32)" if not shuffles else "    pass",
        f"    pair = tid // {group}",
        f"    lane = tid % {group}",
        "    n_pairs = order.shape[0]",
        "    valid = pair < n_pairs",
        "    subject = order[pair] if valid else order[n_pairs - 1]",
        "    start = s_off[subject]",
        "    n = s_off[subject + 1] - start",
        "    if not valid:",
        "        n = 0",
        "    warp = tid // 32",
        "    n_steps = warp_len[warp] if warp < warp_len.shape[0] else 0",
        f"    slot = warp_base[warp] + ((tid % 32) // {group}) * n_steps if warp < warp_len.shape[0] else 0",
        "    best = 0",
        "    best_i = 0",
        "    best_j = 0",
        "    for p in range(passes):",
        f"        row0 = (p * {group} + lane) * {rows}",
    ]
    lines += [f"        h{k} = 0" for k in r] + [f"        e{k} = {NEG}" for k in r]
    lines += [
        "        out_h = 0",
        f"        out_f = {NEG}",
        "        diag_in = 0",
        f"        for step in range(n_steps + {group} - 1):",
        "            j = step - lane",
    ]
    lines += exchange("            ")
    lines += [
        "            if lane == 0:",
        "                if p > 0 and j < n_steps:",
        "                    in_h = boundary[2 * (slot + j)]",
        "                    in_f = boundary[2 * (slot + j) + 1]",
        "                else:",
        "                    in_h = 0",
        f"                    in_f = {NEG}",
        "            if j >= 0 and j < n_steps:",
        "                code = s_res[start + j] if j < n else pad_code",
        "                diag = diag_in",
        "                diag_in = in_h",
        "                up = in_h",
        "                f = in_f",
        "                cmax = 0",
    ]
    for k in r:
        lines += [
            f"                s = profile[code, row0 + {k}]",
            f"                e{k} = max(e{k} - gap_e, h{k} - gap_oe)",
            "                f = max(f - gap_e, up - gap_oe)",
            f"                h = max(max(diag + s, 0), max(e{k}, f))",
            f"                diag = h{k}",
            f"                h{k} = h",
            "                up = h",
            "                cmax = max(cmax, h)",
        ]
    lines += [
        "                out_h = up",
        "                out_f = f",
        f"                if lane == {group - 1} and p + 1 < passes:",
        "                    boundary[2 * (slot + j)] = up",
        "                    boundary[2 * (slot + j) + 1] = f",
        "                if cmax > best or (cmax == best and j + 1 < best_j):",
        "                    best = cmax",
        "                    best_j = j + 1",
        f"                    best_i = row0 + {rows}",
    ]
    for k in reversed(r):  # the first row holding the maximum wins: scan upwards
        lines += [f"                    if h{k} == cmax:", f"                        best_i = row0 + {k + 1}"]
    lines += ["        cuda.syncwarp()" if shuffles else "        cuda.syncthreads()"]
    shift = 1
    while shift < group:  # group reduction: highest score, then smallest column, then row
        lines += down("best", shift) + down("best_j", shift) + down("best_i", shift)
        lines += [
            f"    if lane + {shift} < {group} and (o_best > best or (o_best == best and "
            "(o_best_j < best_j or (o_best_j == best_j and o_best_i < best_i)))):",
            "        best = o_best",
            "        best_j = o_best_j",
            "        best_i = o_best_i",
        ]
        shift *= 2
    lines += [
        "    if valid and lane == 0:",
        "        if best == 0:",
        "            best_i = 0",
        "            best_j = 0",
        "        out_score[pair] = best",
        "        out_qend[pair] = best_i",
        "        out_send[pair] = best_j",
    ]
    return "\n".join(lines) + "\n"


def _threads() -> int:
    """Threads per block: 128 on a GPU; 32 in the simulator (a Python thread each)."""
    return SIMULATOR_THREADS if config.ENABLE_CUDASIM else THREADS


def get_kernel(rows: int = ROWS, group: int = 32):
    """The compiled kernel for ``rows`` and ``group`` (compiled once per process)."""
    simulated = bool(config.ENABLE_CUDASIM)
    key = (rows, group, simulated)
    if key not in _KERNELS:
        namespace = {"cuda": cuda, "int32": np.int32}
        source = _kernel_source(rows, group, _threads(), shuffles=not simulated)
        exec(compile(source, f"<swdask sw kernel R={rows} G={group}>", "exec"), namespace)
        _KERNELS[key] = cuda.jit(namespace["kernel"])
    return _KERNELS[key]


def choose_group(m: int, rows: int = ROWS) -> int:
    """Smallest group whose registers hold the whole query, at most a warp."""
    group = 1
    while group < 32 and group * rows < m:
        group *= 2
    return group


def query_profile(query, matrix, rows_total):
    """int32 profile ``[code, row]`` with a pad code row last and pad rows past the query."""
    alpha = matrix.shape[0]
    profile = np.full((alpha + 1, max(rows_total, 1)), PAD_SCORE, dtype=np.int32)
    profile[:alpha, :len(query)] = matrix[:, query]
    return profile


def launch_plan(lengths, group, uniform=32):
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


def score_pairs(query, s_res, s_off, subjects, matrix, gap_open, gap_extend, *, rows=ROWS,
                group=None, stream=0):
    """Local scores and end cells of one query against ``subjects`` on the GPU.

    Parameters
    ----------
    query : numpy.ndarray of uint8
        Query codes.
    s_res, s_off : numpy.ndarray
        Subject residues (uint8, concatenated) and offsets (int64, n + 1).
    subjects : numpy.ndarray of int64
        Subjects to score, in this order (sorted by length for efficiency).
    matrix : numpy.ndarray of int
        Substitution scores.
    gap_open, gap_extend : int
        A gap of k residues costs ``gap_open + k * gap_extend``.

    Returns
    -------
    scores, query_end, subject_end : numpy.ndarray of int32
    """
    m = int(len(query))
    group = group or choose_group(m, rows)
    passes = max(1, math.ceil(m / (group * rows)))
    profile = query_profile(np.asarray(query, np.uint8), np.asarray(matrix), passes * group * rows)
    lengths = s_off[subjects + 1] - s_off[subjects]
    threads = _threads()
    warp_len, warp_base, slots = launch_plan(lengths, group, 32 if not config.ENABLE_CUDASIM else threads)
    n = len(subjects)
    out = [np.zeros(n, np.int32) for _ in range(3)]
    boundary = np.zeros(2 * slots if passes > 1 else 2, np.int32)
    kernel = get_kernel(rows, group)
    blocks = max(1, math.ceil(len(warp_len) * 32 / threads))
    kernel[blocks, threads, stream](profile, passes, s_res, s_off, np.asarray(subjects, np.int64),
                                    warp_len, warp_base, matrix.shape[0], gap_open + gap_extend,
                                    gap_extend, boundary, *out)
    return tuple(out)
