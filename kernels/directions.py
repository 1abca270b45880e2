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

import numpy as np

from .cpu.reference import OP_DEL, OP_INS, OP_MATCH

if TYPE_CHECKING:
    import numpy.typing as npt

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

def global_band(rows: npt.ArrayLike, cols: npt.ArrayLike, scores: npt.ArrayLike,
                matrix: np.ndarray, gap_open: int, gap_extend: int,
                ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The diagonal band that holds every decision a global traceback reads, given the
    optimal score: offsets ``lo <= j - i <= hi`` of DP cells ``(i, j)``, per pair.

    A traceback that computes only the band (cells outside it count as -inf) walks the
    same path as one over the whole ``rows x cols`` rectangle, so the GPU traceback of
    all-pairs candidates (:func:`swdask.kernels.cuda.traceback.trace_paths` with
    ``known_scores``) writes decisions for the band only: a tenth of the cells at 16S
    lengths and identity 0.97.

    Parameters
    ----------
    rows, cols : array-like of int
        The pairs' lengths (the whole pair: global mode ends at ``(rows, cols)``).
    scores : array-like of int
        Each pair's optimal global score, from a score kernel.
    matrix : numpy.ndarray of int
    gap_open, gap_extend : int
        A gap of k residues costs ``gap_open + k * gap_extend``.

    Returns
    -------
    lo, hi : numpy.ndarray of int64
        The band of each pair; ``(-rows, cols)`` (the whole rectangle) where no band
        applies (a scoring whose gap columns cost nothing below the best pair's score).

    Notes
    -----
    *The loss of an alignment.*  Let ``a = max(matrix)`` and give every column the loss
    ``a * (residues in the column) / 2 - (its score)``, and every gap run its opening
    ``o`` on top.  An aligned column loses ``a - s >= 0``, a gap column ``a/2 + e``.  The
    columns hold all ``rows + cols`` residues, so every global alignment has
    ``score = a (rows + cols) / 2 - loss``: the optimal ones lose exactly
    ``D = a (rows + cols) / 2 - S``, and losses only add up along a path.

    *The band.*  A path through a cell of offset ``k = j - i`` has at least ``|k|`` gap
    columns before it and ``|delta - k|`` after it (``delta = cols - rows``), so it loses
    at least ``g (|k| + |delta - k|) + o`` (``g = a/2 + e > 0``; no ``o`` if it has no
    gap).  Every cell of every optimal path, in every state (H, E, F), therefore has an
    offset with ``g (|k| + |delta - k|) + o <= D`` (or ``k = delta = 0``): those offsets
    are the band.

    *The same path.*  Computed inside the band, a cell's value is the best over the paths
    that stay inside, so it is never above the full matrix's, and it equals it wherever
    an optimal prefix stays inside, which is every cell, in every state, that lies on an
    optimal path.  Walk back from ``(rows, cols)``, which is on all of them: at a cell of
    the walk the full traceback picks, among the sources that reach the cell's value, the
    first by the tie order (:func:`decision`); that source lies on an optimal path, so its
    value is exact in the band, and every source before it in the tie order is below the
    cell's value in the full matrix, hence in the band too.  The band picks the same
    source at every step, and the walk is the same.  (The GPU kernel widens the band to
    whole strips of rows; any wider region keeps the argument.)
    """
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.int64)
    best = int(np.max(matrix))
    # Doubled, so that a/2 stays an integer: g2 = 2g, loss2 = 2D.
    g2 = best + 2 * int(gap_extend)
    full = (-rows, cols.copy())
    if g2 <= 0 or gap_open < 0:
        return full
    loss2 = best * (rows + cols) - 2 * scores
    most_gaps = np.maximum(0, (loss2 - 2 * int(gap_open)) // g2)
    delta = cols - rows
    spare = np.maximum(0, (most_gaps - np.abs(delta)) // 2)
    lo = np.minimum(0, delta) - spare
    hi = np.maximum(0, delta) + spare
    return np.maximum(lo, -rows), np.minimum(hi, cols)


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
