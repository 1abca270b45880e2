"""The traceback encoding that every traceback kernel shares, on the CPU and the GPU.

A traceback kernel computes the DP of a rectangle once, keeps for every cell only the
decision that produced it, and walks those decisions back from the end cell with the
reference's state machine (:mod:`swdask.kernels.cpu.reference`).  The CPU kernels
(:mod:`swdask.kernels.cpu.traceback`, one pair; :mod:`swdask.kernels.cpu.tile`, one tile
of a long pair) keep a byte a cell, the GPU kernel (:mod:`swdask.kernels.cuda.traceback`)
a nibble; the bits are the same:

====  =====================================================================
bits  meaning
====  =====================================================================
0-1   source of H: :data:`SRC_DIAG` diagonal, :data:`SRC_E` E ('D'),
      :data:`SRC_F` F ('I'), :data:`SRC_STOP` local stop (H == 0)
2     :data:`E_EXTENDS`: E extends ``E(i, j-1)`` (0: E opens from ``H(i, j-1)``)
3     :data:`F_EXTENDS`: F extends ``F(i-1, j)`` (0: F opens from ``H(i-1, j)``)
====  =====================================================================

The ties are resolved when the bits are written (:func:`decision`), with the reference's
preferences: diagonal before E before F for H, opening before extending inside a gap.
The walk (:func:`walk_step`) is then a plain state machine over :data:`STATE_H`,
:data:`STATE_E` and :data:`STATE_F`.

:func:`decision` and :func:`walk_step` are plain Python, compiled by each target: inlined
``@njit`` functions in :mod:`swdask.kernels.cpu.traceback`, CUDA device functions in
:mod:`swdask.kernels.cuda.traceback` (as :mod:`swdask.kernels.cpu.psse` shares its
shuffles).  Scores are exact int32 (:data:`NEG`, :data:`SCORE_LIMIT`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .cpu.reference import OP_DEL, OP_INS, OP_MATCH

if TYPE_CHECKING:
    import numpy as np

#: Stands for the reference's -inf: E of column 0 and F of row 0.  Only ever lowered by
#: one gap_extend before a max() with a finite value discards it, so it cannot wrap
#: around, and it lies below every reachable score (see :data:`SCORE_LIMIT`).
NEG = -(1 << 30)
#: Reachable scores stay this far inside the sentinel: callers check ``|score|`` below it.
SCORE_LIMIT = (1 << 30) - (1 << 20)


def cell_bound(m: int, n: int, matrix: np.ndarray, gap_open: int, gap_extend: int) -> int:
    """The largest ``|H|``, ``|E|`` or ``|F|`` a pair of ``m`` x ``n`` residues can reach:
    ``(m + n + 1) * (max|s| + o + e)`` (one column of a path costs at most that much).
    Exact kernels need it below :data:`SCORE_LIMIT`."""
    worst = max(abs(int(matrix.max())), abs(int(matrix.min()))) + int(gap_open) + int(gap_extend)
    return (int(m) + int(n) + 1) * worst

#: Source of H in bits 0-1 of a decision.
SRC_DIAG, SRC_E, SRC_F, SRC_STOP = 0, 1, 2, 3
SRC_MASK = 3
#: Bit 2: E extends; bit 3: F extends.
E_EXTENDS = 4
F_EXTENDS = 8

#: States of the walk: in H, inside a gap in the query (E), inside a gap in the subject (F).
STATE_H, STATE_E, STATE_F = 0, 1, 2


def decision(h, e_val, f_val, via_diag, e_open, f_open, local):
    """The decision bits of a cell whose H is ``h``, E ``e_val``, F ``f_val``.

    ``via_diag`` is the diagonal's candidate ``H(i-1, j-1) + s``; ``e_open`` and ``f_open``
    are E and F opened from the H on the left and above (``H - o - e``): a gap extends
    only when strictly better than opening.  ``local``: H of 0 stops the walk.
    """
    # Selects rather than branches, so that a CPU row of decisions vectorises.
    src = SRC_F
    src = SRC_E if h == e_val else src
    src = SRC_DIAG if h == via_diag else src
    if local:
        src = SRC_STOP if h == 0 else src
    e_bit = E_EXTENDS if e_val != e_open else 0
    f_bit = F_EXTENDS if f_val != f_open else 0
    return src | e_bit | f_bit


def walk_step(bits, state, i, j, ops, k):
    """One move of the walk, at cell ``(i, j)`` in ``state``, whose decision is ``bits``.

    The operation it emits (``OP_MATCH``, ``OP_DEL`` or ``OP_INS`` of
    :mod:`~swdask.kernels.cpu.reference`; none when H turns into a gap state) goes to
    ``ops[k]``.  Returns ``(state, i, j, k, stop)``: the next state and cell, the next
    free index of ``ops``, and whether the walk stopped at a local start (H of 0 in state
    H; the cell is then unchanged).  The caller checks the rectangle's edges.
    """
    if state == STATE_H:
        src = bits & SRC_MASK
        if src == SRC_STOP:
            return state, i, j, k, True
        if src == SRC_DIAG:
            ops[k] = OP_MATCH
            return state, i - 1, j - 1, k + 1, False
        return (STATE_E if src == SRC_E else STATE_F), i, j, k, False
    if state == STATE_E:
        ops[k] = OP_DEL
        return (STATE_E if bits & E_EXTENDS else STATE_H), i, j - 1, k + 1, False
    ops[k] = OP_INS
    return (STATE_F if bits & F_EXTENDS else STATE_H), i - 1, j, k + 1, False


def border_gap(i, j, ops, k):
    """The end of a global path's walk at the matrix's first row or column (cell
    ``(i, j)``, one of them 0): the ``j`` deletions or ``i`` insertions that lead to
    ``(0, 0)``, written to ``ops`` from ``k`` on (in reverse order, as the walk's).
    Returns the next free index of ``ops``."""
    for _ in range(j):
        ops[k] = OP_DEL
        k += 1
    for _ in range(i):
        ops[k] = OP_INS
        k += 1
    return k
