"""Source-text pieces shared by the generated CUDA kernels.

The wavefront kernels (:mod:`~swdask.kernels.cuda.inter_task`,
:mod:`~swdask.kernels.cuda.inter_task_dpx`, :mod:`~swdask.kernels.cuda.intra_task`,
:mod:`~swdask.kernels.cuda.tile`, :mod:`~swdask.kernels.cuda.all_pairs`) are generated as
Python text, unrolled over the rows a lane keeps in registers, and compiled by Numba.
They are one recurrence in five arrangements, and share its steps, written once here:

- the *pass start* (:func:`pass_registers`): H and E of the lane's rows, and what the lane
  hands on, before the first column;
- the *wavefront* (:func:`wavefront`): the step loop, each lane ``lag`` steps behind the
  first, and the *lane exchange* (:func:`lane_exchange`): each lane hands H and F of its
  last row (``out_h``, ``out_f``) to the next lane, which reads them as ``in_h``,
  ``in_f``; the first lane reads an edge row instead (:func:`edge_load`);
- the *column step* (:func:`column_start`, :func:`gotoh_cell`, :func:`hand_on`,
  :func:`edge_store`): one subject column down the lane's rows (Gotoh, affine gaps),
  optionally with Hopper's fused max instructions (:func:`link_dpx32`);
- the *best cell* (:func:`best_update`, :func:`best_reduction`, :func:`write_best`):
  lanes keep their best ``(score, column, row)`` and combine them, highest score first,
  then the smallest column, then the smallest row (the tie rule of every swdask kernel),
  by shifts of 1, 2, 4, ...

On a GPU lanes exchange through warp shuffles.  Numba's CUDA simulator has no warp
shuffles, so there the same text goes through a shared-memory array and block barriers;
nothing else differs, which is what lets CI check the GPU kernels' logic in the simulator.

Every sum in the text is cast back to int32: Numba types int32 + int32 as int64, and
64-bit integer arithmetic costs the GPU two instructions per operation.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from . import driver
from .compile import simulated

#: Hopper's 32-bit DPX instructions the kernel text may call, by the name it calls them.
DPX32 = {
    "viaddmax": "__viaddmax_s32",     # max(a + b, c)
    "vimax3": "__vimax3_s32",         # max(a, b, c)
    "vimax3_relu": "__vimax3_s32_relu",  # max(a, b, c, 0)
}


def has_dpx() -> bool:
    """Whether the current GPU has Hopper's DPX instructions (compute capability >= 9.0);
    never in the simulator."""
    if simulated():
        return False
    return driver.compute_capability() >= (9, 0)


def dpx32_source(prefix: str, names: Iterable[str]) -> str:
    """CUDA C++ wrapping the :data:`DPX32` instructions ``names`` as ``<prefix>_<name>``,
    for linking into a kernel.  Numba's foreign-function convention: the result goes
    through the first pointer."""
    return "\n" + "".join(
        f'extern "C" __device__ int {prefix}_{name}(int* out, int a, int b, int c)\n'
        f"{{ *out = {DPX32[name]}(a, b, c); return 0; }}\n" for name in names)


def link_dpx32(namespace: dict[str, Any], prefix: str, names: Sequence[str]) -> tuple[str]:
    """Declare the wrappers of :func:`dpx32_source` in a kernel's ``namespace`` under the
    names the text calls; returns the kernel's ``link`` (the wrappers' source)."""
    from numba import cuda

    for name in names:
        namespace[name] = cuda.declare_device(f"{prefix}_{name}", "int32(int32, int32, int32)")
    return (dpx32_source(prefix, names),)


def scalars(pad: str = "    ", *, best: bool = True) -> list:
    """Lines that make the kernel's scalars int32 (``zero``, the gap costs ``gap_oe`` and
    ``gap_e``, ``neg_e = -gap_e``) and, with ``best``, start its best cell at
    ``(0, 0, 0)``."""
    lines = ["zero = int32(0)", "gap_oe = int32(gap_oe)", "gap_e = int32(gap_e)",
             "neg_e = int32(-gap_e)"]
    if best:
        lines += ["best = zero", "best_i = 0", "best_j = 0"]
    return [pad + line for line in lines]


def stage_profile(pad: str, span: int, threads: int, *, flat: bool = True) -> list:
    """Lines by which the block copies the pass's ``span`` rows of ``profile[code, row]``
    (pass ``p``) to the shared ``sprof``, flat (``sprof[code * span + row]``) or 2-D,
    between two block barriers."""
    at = "idx" if flat else f"idx // {span}, idx % {span}"
    return [f"{pad}cuda.syncthreads()",
            f"{pad}for idx in range(tx, n_codes * {span}, {threads}):",
            f"{pad}    sprof[{at}] = profile[idx // {span}, p * {span} + idx % {span}]",
            f"{pad}cuda.syncthreads()"]


def pass_registers(pad: str, rows: int, neg: str) -> list:
    """Lines that start a pass: H of the lane's ``rows`` register rows 0, their E
    ``neg``, nothing handed on yet (H 0, F ``neg``) and the diagonal 0."""
    return ([f"{pad}h{k} = zero" for k in range(rows)] + [f"{pad}e{k} = {neg}" for k in range(rows)]
            + [f"{pad}out_h = zero", f"{pad}out_f = {neg}", f"{pad}diag_in = zero"])


def lane_exchange(pad: str, *, shuffles: bool, lane: str = "tx", single: bool = False,
                  names: Sequence[str] = ("h", "f")) -> list:
    """Lines that set ``in_h``/``in_f`` to the previous lane's ``out_h``/``out_f`` (or
    ``in_<name>`` to ``out_<name>`` for each of ``names``).

    Parameters
    ----------
    pad : str
        Indentation of the lines.
    shuffles : bool
        Warp shuffles (GPU); else the shared array ``xch`` (two rows, one slot a thread
        ``tx``) between two block barriers (simulator).
    lane : str, default "tx"
        The expression of the lane whose predecessor is read: lane 0 keeps its own values
        (the caller overwrites them from its top boundary).
    single : bool, default False
        One lane a group: the lane is its own predecessor.
    names : sequence of str, default ("h", "f")
        The values handed on; the simulator's ``xch`` needs a row for each
        (:func:`thread_pair`'s ``exchange_rows``).
    """
    if single:
        return [f"{pad}in_{name} = out_{name}" for name in names]
    if shuffles:
        return [f"{pad}in_{name} = cuda.shfl_up_sync(0xFFFFFFFF, out_{name}, 1)"
                for name in names]
    return ([f"{pad}xch[{r}, tx] = out_{name}" for r, name in enumerate(names)]
            + [f"{pad}cuda.syncthreads()"]
            + [f"{pad}in_{name} = xch[{r}, tx - 1] if {lane} > 0 else out_{name}"
               for r, name in enumerate(names)]
            + [f"{pad}cuda.syncthreads()"])


def wavefront(pad: str, steps: str, lag: str, *, shuffles: bool, lane: str = "tx",
              single: bool = False, barrier: int = 0) -> list:
    """The head of the step loop: ``for step in range(steps)``, the lane's column
    ``j = step - lag`` and the :func:`lane_exchange` (``lane``, ``single``); with
    ``barrier``, a block barrier every ``barrier`` steps first (the intra-task ring)."""
    inner = pad + "    "
    lines = [f"{pad}for step in range({steps}):"]
    if barrier:
        lines += [f"{inner}if step % {barrier} == 0:  # the chunk barrier orders the rings",
                  f"{inner}    cuda.syncthreads()"]
    lines += [f"{inner}j = step - {lag}"]
    return lines + lane_exchange(inner, shuffles=shuffles, lane=lane, single=single)


def edge_load(pad: str, cond: str, at: str, neg: str) -> list:
    """Lines by which the first lane reads H and F above its rows from ``boundary[at]``
    and ``boundary[at + 1]`` when ``cond`` (a later pass), else the matrix's top row
    (H 0, F ``neg``)."""
    return [f"{pad}if {cond}:", f"{pad}    in_h = boundary[{at}]",
            f"{pad}    in_f = boundary[{at} + 1]", f"{pad}else:", f"{pad}    in_h = zero",
            f"{pad}    in_f = {neg}"]


def column_start(pad: str, *, up: bool = True, cmax: bool = True) -> list:
    """Lines that begin a column: the diagonal is what came from above one step ago, H
    and F from above (``up``, ``f``) what the previous lane handed on; ``cmax`` starts
    the column's maximum."""
    lines = ["diag = diag_in", "diag_in = in_h"] + (["up = in_h"] if up else []) + ["f = in_f"]
    return [pad + line for line in lines + (["cmax = zero"] if cmax else [])]


def gotoh_cell(k: int, pad: str, score: str, *, dpx: bool, local: bool = True, h: str = "h",
               cmax: bool = True) -> list:
    """Lines of one cell of register row ``k``: E from the row's H and E of the column
    on the left, F from ``up`` and ``f`` above, H (into ``h``) from the diagonal plus
    ``score``, E and F, and 0 when ``local``; then the cell becomes the next row's ``up``
    and the column maximum ``cmax`` takes it.  ``dpx``: Hopper's fused max (``viaddmax``,
    ``vimax3_relu`` or ``vimax3``, see :func:`link_dpx32`)."""
    via_diag = f"int32(diag + {score})"
    if dpx:  # max(a + b, c) and max(a, b, c[, 0]) are one instruction each on Hopper
        lines = [f"e{k} = viaddmax(e{k}, neg_e, int32(h{k} - gap_oe))",
                 "f = viaddmax(f, neg_e, int32(up - gap_oe))",
                 f"{h} = {'vimax3_relu' if local else 'vimax3'}({via_diag}, e{k}, f)"]
    else:
        lines = [f"e{k} = max(int32(e{k} - gap_e), int32(h{k} - gap_oe))",
                 "f = max(int32(f - gap_e), int32(up - gap_oe))",
                 f"{h} = max(max({via_diag}, zero), max(e{k}, f))" if local
                 else f"{h} = max({via_diag}, max(e{k}, f))"]
    lines += [f"diag = h{k}", f"h{k} = {h}", f"up = {h}"]
    return [pad + line for line in lines + ([f"cmax = max(cmax, {h})"] if cmax else [])]


def hand_on(pad: str, h: str = "up") -> list:
    """Lines that hand H (``h``) and F of the lane's last row to the next lane."""
    return [f"{pad}out_h = {h}", f"{pad}out_f = f"]


def edge_store(pad: str, cond: str, at: str, h: str = "up") -> list:
    """Lines by which the last lane keeps H (``h``) and F of its last row in
    ``boundary[at]`` and ``boundary[at + 1]`` when ``cond`` (the next pass reads them)."""
    return [f"{pad}if {cond}:", f"{pad}    boundary[{at}] = {h}",
            f"{pad}    boundary[{at} + 1] = f"]


def best_update(pad: str, rows: int, col: str, row0: str, *, passes: bool = True,
                guard: str = "") -> list:
    """Lines that take the column's maximum ``cmax`` at column ``col`` as the lane's best
    when greater, or, with ``passes``, equal at a smaller column (a later pass sweeps the
    columns again); its row is the first of the lane's rows (``row0 + 1`` on) holding it,
    found by scanning the registers from the last row up.  ``guard`` (e.g.
    ``" and {k} < nv"``, ``{k}`` the row) keeps rows out of the scan."""
    cond = f"cmax > best or (cmax == best and {col} < best_j)" if passes else "cmax > best"
    lines = [f"{pad}if {cond}:", f"{pad}    best = cmax", f"{pad}    best_j = {col}",
             f"{pad}    best_i = {row0} + {rows}"]
    for k in reversed(range(rows)):  # the first row holding the maximum wins: scan upwards
        lines += [f"{pad}    if h{k} == cmax{guard.format(k=k)}:",
                  f"{pad}        best_i = {row0} + {k + 1}"]
    return lines


def shuffle_down(name: str, shift: int, *, shuffles: bool, scratch: str, guard: str) -> list:
    """Lines that set ``o_<name>`` to ``name`` of the lane ``shift`` further on.

    Parameters
    ----------
    name : str
        The variable.
    shift : int
    shuffles : bool
        A warp shuffle (GPU); else through ``scratch`` between block barriers (simulator).
    scratch : str
        The shared-memory slot of thread ``tx``, with ``{}`` for the thread index (e.g.
        ``"xch[0, {}]"``).
    guard : str
        When the lane ``shift`` further on exists (simulator), else ``name`` itself.
    """
    if shuffles:
        return [f"    o_{name} = cuda.shfl_down_sync(0xFFFFFFFF, {name}, {shift})"]
    return [f"    {scratch.format('tx')} = {name}", "    cuda.syncthreads()",
            f"    o_{name} = {scratch.format(f'tx + {shift}')} if {guard} else {name}",
            "    cuda.syncthreads()"]


def take_better(names: tuple[str, str, str], shift: int, width: int) -> list[str]:
    """Lines that take the ``o_`` values of ``names = (score, column, row)`` when the lane
    ``shift`` further on (within ``width`` lanes) holds a better cell: higher score, then
    smaller column, then smaller row."""
    s, j, i = names
    return [
        (f"    if lane + {shift} < {width} and (o_{s} > {s} or (o_{s} == {s} and "
        f"(o_{j} < {j} or (o_{j} == {j} and o_{i} < {i})))):"),
        f"        {s} = o_{s}",
        f"        {j} = o_{j}",
        f"        {i} = o_{i}",
    ]


def best_reduction(
    width: int, *, shuffles: bool, scratch: str = "xch[0, {}]",
    guard: str = "tx + {shift} < {threads}", threads: int = 0,
    names: Sequence[tuple[str, str, str]] = (("best", "best_j", "best_i"),),
) -> list[str]:
    """The whole reduction over ``width`` lanes (shifts 1, 2, 4, ... below ``width``) of
    each ``(score, column, row)`` triple of ``names``, by :func:`shuffle_down` (``scratch``,
    and ``guard`` with ``{shift}`` and ``{threads}`` for the simulator) and
    :func:`take_better`."""
    lines = []
    shift = 1
    while shift < width:
        for triple in names:
            for name in triple:
                lines += shuffle_down(name, shift, shuffles=shuffles, scratch=scratch,
                                      guard=guard.format(shift=shift, threads=threads))
            lines += take_better(triple, shift, width)
        shift *= 2
    return lines


def thread_pair(group: int, threads: int, *, shuffles: bool, exchange_rows: int = 2) -> list:
    """Lines that place thread ``tid`` (``tx`` in its block of ``threads``) of an
    inter-task kernel (a group of ``group`` lanes a pair): its ``pair`` and ``lane``,
    whether it is ``valid`` (past the last pair a thread idles on the last subject with
    ``n = 0`` columns), its subject's ``start`` and length ``n``, and its warp's
    ``n_steps`` and boundary ``slot`` (from the launch plan's ``warp_len``/``warp_base``);
    without ``shuffles``, the exchange array ``xch`` of :func:`lane_exchange`
    (``exchange_rows`` values a thread)."""
    return [
        "    tid = cuda.grid(1)",
        "    tx = cuda.threadIdx.x",
        (f"    xch = cuda.shared.array(({exchange_rows}, {threads}), int32)" if not shuffles
         else "    pass"),
        "    n_codes = profile.shape[0]",
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
        (f"    slot = warp_base[warp] + ((tid % 32) // {group}) * n_steps"
        " if warp < warp_len.shape[0] else 0"),
    ]


def write_best(pad: str) -> list:
    """Lines that write a pair's best cell to ``out_score``/``out_qend``/``out_send``
    (ends 0 when nothing scored above 0: no alignment)."""
    return [
        f"{pad}if best == 0:",
        f"{pad}    best_i = 0",
        f"{pad}    best_j = 0",
        f"{pad}out_score[pair] = best",
        f"{pad}out_qend[pair] = best_i",
        f"{pad}out_send[pair] = best_j",
    ]
