"""Reference Gotoh aligner in plain Python: slow, obvious, and the oracle of every kernel.

All kernels in swdask follow the rules written here, to the bit.

Recurrences (1-based ``i`` over the query, ``j`` over the subject, ``s`` the substitution
score, a gap of ``k`` residues costing ``o + k*e``)::

    E(i,j) = max(E(i,j-1) - e, H(i,j-1) - o - e)   gap in the query: 'D' (consumes subject)
    F(i,j) = max(F(i-1,j) - e, H(i-1,j) - o - e)   gap in the subject: 'I' (consumes query)
    H(i,j) = max(H(i-1,j-1) + s(q_i, t_j), E(i,j), F(i,j) [, 0 when local])

Boundaries: local and semiglobal have ``H = 0`` on row 0 and column 0; global has
``H(0,j) = -(o + j*e)`` and ``H(i,0) = -(o + i*e)`` (``H(0,0) = 0``).

End cell (the one tie-breaking rule for ends, on every backend): among the candidate
cells holding the best score, the one with the smallest subject end ``j``, then the
smallest query end ``i``.  Candidates: every cell (local); ``(m, n)`` (global); row ``m``
and column ``n``, corners included (semiglobal: end gaps are free on both sequences).
Semiglobal equals Biopython's global mode with ``end_gap_score = 0``; parasail's ``sg``
agrees except when every alignment scores below 0, where it reports the best negative
score while this rule takes a corner cell: score 0, an empty alignment.

Path (the one tie-breaking rule for paths): from the end cell in state H, prefer the
diagonal, then E ('D'), then F ('I'); inside a gap prefer opening (back to H) over
extending.  Local alignments stop at the first cell whose H is 0, so the reported local
alignment is the shortest one with the best score ending at the end cell; semiglobal
ones stop on row 0 or column 0.  An empty local alignment (score 0) is reported at
``(0, 0)`` with an empty path.

Coordinates are 0-based half-open: the alignment covers ``query[query_start:query_end]``
and ``subject[subject_start:subject_end]``.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

NEG = float("-inf")
#: The alignment modes, and the one table from their names to the kernels' codes.
MODES = ("local", "global", "semiglobal")
LOCAL, GLOBAL, SEMIGLOBAL = 0, 1, 2
MODE_CODES = {name: code for code, name in enumerate(MODES)}

#: Path operation codes shared by every traceback kernel.
OP_MATCH, OP_INS, OP_DEL = 0, 1, 2


def align_reference(query: Iterable[int], subject: Iterable[int],
                    matrix: Sequence[Sequence[int]] | np.ndarray, gap_open: int, gap_extend: int,
                    mode: str = "local") -> tuple[int, int, int, int, int, list[int]]:
    """Align two code sequences with affine gaps, full matrices, plain Python.

    Parameters
    ----------
    query, subject : iterable of int
        Residue codes (rows of ``matrix`` for the query, columns for the subject).
    matrix : 2-D array-like of int
        Substitution scores indexed by codes.
    gap_open, gap_extend : int
        A gap of k residues costs ``gap_open + k * gap_extend``.
    mode : {"local", "global", "semiglobal"}, default "local"

    Returns
    -------
    tuple
        ``(score, query_start, query_end, subject_start, subject_end, ops)`` where
        ``ops`` is a list of :data:`OP_MATCH`, :data:`OP_INS`, :data:`OP_DEL` from the
        alignment's start to its end.

    Examples
    --------
    >>> M = [[2, -3], [-3, 2]]
    >>> align_reference([0, 1, 1, 0], [1, 1], M, 5, 2)
    (4, 1, 3, 0, 2, [0, 0])
    """
    mode_code(mode)
    q, t = list(query), list(subject)
    m, n = len(q), len(t)
    o, e = gap_open, gap_extend
    H = [[0] * (n + 1) for _ in range(m + 1)]
    E = [[NEG] * (n + 1) for _ in range(m + 1)]
    F = [[NEG] * (n + 1) for _ in range(m + 1)]
    if mode == "global":
        for j in range(1, n + 1):
            H[0][j] = E[0][j] = -(o + j * e)
        for i in range(1, m + 1):
            H[i][0] = F[i][0] = -(o + i * e)
    for i in range(1, m + 1):
        for j in range(1, n + 1):
            E[i][j] = max(E[i][j - 1] - e, H[i][j - 1] - o - e)
            F[i][j] = max(F[i - 1][j] - e, H[i - 1][j] - o - e)
            h = max(H[i - 1][j - 1] + matrix[q[i - 1]][t[j - 1]], E[i][j], F[i][j])
            H[i][j] = max(h, 0) if mode == "local" else h

    if mode == "global":
        end = (m, n)
    else:
        if mode == "local":
            candidates = ((i, j) for j in range(n + 1) for i in range(m + 1))
        else:
            candidates = [(m, j) for j in range(n)] + [(i, n) for i in range(m + 1)]
        end, best = (0, 0), NEG
        for i, j in candidates:  # column-major order: the first strict maximum wins
            if H[i][j] > best:
                best, end = H[i][j], (i, j)
    score = H[end[0]][end[1]]

    ops = []
    i, j = end
    state = "H"
    while True:
        if state == "H":
            if i == 0 or j == 0:
                if mode == "global":
                    ops.extend([OP_DEL] * j + [OP_INS] * i)
                    i = j = 0
                break
            if mode == "local" and H[i][j] == 0:
                break
            if H[i][j] == H[i - 1][j - 1] + matrix[q[i - 1]][t[j - 1]]:
                ops.append(OP_MATCH)
                i, j = i - 1, j - 1
            elif H[i][j] == E[i][j]:
                state = "E"
            else:
                state = "F"
        elif state == "E":
            ops.append(OP_DEL)
            state = "H" if E[i][j] == H[i][j - 1] - o - e else "E"
            j -= 1
        else:
            ops.append(OP_INS)
            state = "H" if F[i][j] == H[i - 1][j] - o - e else "F"
            i -= 1
    ops.reverse()
    return int(score), i, end[0], j, end[1], ops


def mode_code(mode: str) -> int:
    """Kernel code of a mode name (:data:`MODE_CODES`).

    Raises
    ------
    ValueError
        ``mode`` is not one of :data:`MODES`; the message lists them.

    Examples
    --------
    >>> mode_code("global")
    1
    """
    try:
        return MODE_CODES[mode]
    except (KeyError, TypeError):
        raise ValueError(f"unknown mode {mode!r}; choose one of: {', '.join(MODES)}") from None


def score_reference(query: Iterable[int], subject: Iterable[int],
                    matrix: Sequence[Sequence[int]] | np.ndarray, gap_open: int,
                    gap_extend: int, mode: str = "local") -> tuple[int, int, int]:
    """``(score, query_end, subject_end)`` of :func:`align_reference`."""
    score, _, qe, _, se, _ = align_reference(query, subject, matrix, gap_open, gap_extend, mode)
    return score, qe, se
