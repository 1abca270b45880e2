"""Source-text pieces shared by the generated CUDA kernels.

The wavefront kernels (:mod:`~swdask.kernels.cuda.inter_task`,
:mod:`~swdask.kernels.cuda.inter_task_dpx`, :mod:`~swdask.kernels.cuda.intra_task`,
:mod:`~swdask.kernels.cuda.tile`, :mod:`~swdask.kernels.cuda.all_pairs`) are generated as
Python text, unrolled over the rows a lane keeps in registers, and compiled by Numba.
They share two moves, written once here:

- the *lane exchange*: each lane hands H and F of its last row (``out_h``, ``out_f``) to
  the next lane, which reads them as ``in_h``, ``in_f``;
- the *best-cell reduction*: lanes combine their ``(score, column, row)`` bests,
  highest score first, then the smallest column, then the smallest row (the tie rule of
  every swdask kernel), by shifts of 1, 2, 4, ...

On a GPU both go through warp shuffles.  Numba's CUDA simulator has no warp shuffles, so
there the same text goes through a shared-memory array and block barriers; nothing else
differs, which is what lets CI check the GPU kernels' logic in the simulator.
"""
from __future__ import annotations


def lane_exchange(pad: str, *, shuffles: bool, lane: str = "tx", single: bool = False) -> list:
    """Lines that set ``in_h``/``in_f`` to the previous lane's ``out_h``/``out_f``.

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
    """
    if single:
        return [f"{pad}in_h = out_h", f"{pad}in_f = out_f"]
    if shuffles:
        return [f"{pad}in_h = cuda.shfl_up_sync(0xFFFFFFFF, out_h, 1)",
                f"{pad}in_f = cuda.shfl_up_sync(0xFFFFFFFF, out_f, 1)"]
    return [f"{pad}xch[0, tx] = out_h", f"{pad}xch[1, tx] = out_f", f"{pad}cuda.syncthreads()",
            f"{pad}in_h = xch[0, tx - 1] if {lane} > 0 else out_h",
            f"{pad}in_f = xch[1, tx - 1] if {lane} > 0 else out_f", f"{pad}cuda.syncthreads()"]


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


def take_better(names, shift: int, width: int) -> list:
    """Lines that take the ``o_`` values of ``names = (score, column, row)`` when the lane
    ``shift`` further on (within ``width`` lanes) holds a better cell: higher score, then
    smaller column, then smaller row."""
    s, j, i = names
    return [
        f"    if lane + {shift} < {width} and (o_{s} > {s} or (o_{s} == {s} and "
        f"(o_{j} < {j} or (o_{j} == {j} and o_{i} < {i})))):",
        f"        {s} = o_{s}",
        f"        {j} = o_{j}",
        f"        {i} = o_{i}",
    ]


def best_reduction(width: int, down, names=("best", "best_j", "best_i")) -> list:
    """The whole reduction over ``width`` lanes (shifts 1, 2, 4, ... below ``width``):
    ``down(name, shift)`` gives the lines of :func:`shuffle_down` for the kernel."""
    lines = []
    shift = 1
    while shift < width:
        for name in names:
            lines += down(name, shift)
        lines += take_better(names, shift, width)
        shift *= 2
    return lines


def thread_pair(group: int) -> list:
    """Lines that place thread ``tid`` of an inter-task kernel (a group of ``group`` lanes
    a pair): its ``pair`` and ``lane``, whether it is ``valid`` (past the last pair a
    thread idles on the last subject with ``n = 0`` columns), its subject's ``start``
    and length ``n``, and its warp's ``n_steps`` and boundary ``slot`` (from the launch
    plan's ``warp_len``/``warp_base``)."""
    return [
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
        f"    slot = warp_base[warp] + ((tid % 32) // {group}) * n_steps if warp < warp_len.shape[0] else 0",
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
