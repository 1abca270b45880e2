"""A path's CIGAR and counts, on the host: what every aligner reports of the paths its
traceback kernels (CPU or GPU) found.  NumPy only, no Numba: a GPU search describes its
paths without importing Numba.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .cpu.reference import OP_DEL, OP_INS, OP_MATCH

if TYPE_CHECKING:
    import numpy.typing as npt

# Column kinds of summarize_path, in the order of their CIGAR letters "=XID".
_CIGAR_EQ, _CIGAR_X, _CIGAR_I, _CIGAR_D = 0, 1, 2, 3


def summarize_path(query: npt.NDArray[np.uint8], subject: npt.NDArray[np.uint8],
                   query_start: int, subject_start: int, ops: npt.NDArray[np.uint8],
                   unknown_code: int) -> tuple[npt.NDArray[np.uint8], int, int, int, int]:
    """CIGAR and counts of a path.

    Parameters
    ----------
    query, subject : numpy.ndarray of uint8
        The whole sequences' codes.
    query_start, subject_start : int
        Where the path starts (0-based).
    ops : numpy.ndarray of uint8
        ``OP_MATCH``/``OP_INS``/``OP_DEL`` in forward order.
    unknown_code : int
        Code of ``X`` (protein) or ``N`` (DNA): a column of two unknowns is no identity.

    Returns
    -------
    tuple
        ``(cigar, matches, mismatches, gap_opens, align_length)``: ``cigar`` a uint8 array
        of the ASCII CIGAR (``=``, ``X``, ``I``, ``D`` with run lengths; decode with
        ``cigar.tobytes().decode("ascii")``, or use :func:`cigar_string`), ``matches``
        the ``=`` columns, ``mismatches`` the ``X`` columns, ``gap_opens`` the runs of
        ``I`` and of ``D``, ``align_length`` all columns.

    Notes
    -----
    ``I`` consumes the query only, ``D`` the subject only.  A column is ``=`` when both
    codes are equal and not ``unknown_code``; every other aligned column is ``X``.
    Written with NumPy, not Numba: it costs microseconds a path, and a Numba kernel
    would cost a first run half a second of compilation.
    """
    ops = np.asarray(ops, dtype=np.uint8)
    n_ops = int(ops.shape[0])
    if n_ops == 0:
        return np.zeros(0, dtype=np.uint8), 0, 0, 0, 0
    # Query (subject) position of each column: the residues consumed so far, less one.
    rows = int(query_start) - 1 + np.cumsum(ops != OP_DEL)
    cols = int(subject_start) - 1 + np.cumsum(ops != OP_INS)
    aligned = ops == OP_MATCH
    a = np.asarray(query)[rows[aligned]]
    b = np.asarray(subject)[cols[aligned]]
    identical = (a == b) & (a != unknown_code)
    kind = np.where(ops == OP_INS, _CIGAR_I, _CIGAR_D).astype(np.uint8)
    kind[aligned] = np.where(identical, _CIGAR_EQ, _CIGAR_X)
    starts = np.flatnonzero(np.concatenate(([True], kind[1:] != kind[:-1])))
    lengths = np.diff(np.append(starts, n_ops))
    run_kind = kind[starts]
    cigar = "".join(f"{n}{'=XID'[k]}" for n, k in zip(lengths.tolist(), run_kind.tolist()))
    matches = int(np.count_nonzero(identical))
    return (np.frombuffer(cigar.encode("ascii"), dtype=np.uint8).copy(), matches,
            int(a.shape[0]) - matches, int(np.count_nonzero(run_kind >= _CIGAR_I)), n_ops)


def cigar_string(cigar: npt.NDArray[np.uint8]) -> str:
    """The ``str`` of a CIGAR returned by :func:`summarize_path`."""
    return np.asarray(cigar, dtype=np.uint8).tobytes().decode("ascii")
