"""Oracles and known-answer inputs for testing swdask, shared by its tests and benchmarks.

Written the obvious way and independent of the kernels they check, so that a result of
swdask can be compared with them:

- :func:`path_summary`: the CIGAR and counts of an alignment path, column by column (the
  oracle of :func:`swdask.kernels.paths.summarize_path` and of the hits' CIGARs);
- :func:`planted_copy`: a copy of a sequence with known mutations, and the score of the
  planted alignment (the known answer of a long alignment);
- :func:`long_subjects`: titin-like subjects of chosen lengths made of real records (the
  long subjects that the GPU search routes to its block-per-pair kernel).

The slow reference of every kernel's scores and paths is
:mod:`swdask.kernels.cpu.reference`.
"""
from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .kernels.cpu.reference import OP_DEL, OP_INS, OP_MATCH
from .kernels.cpu.traceback import rescore

if TYPE_CHECKING:
    import numpy.typing as npt

    from .scoring import Scoring
    from .sequences.batch import SequenceBatch

__all__ = ["long_subjects", "mutated_copy", "path_summary", "planted_copy"]


def path_summary(query: Sequence[int] | np.ndarray, subject: Sequence[int] | np.ndarray,
                 query_start: int, subject_start: int, ops: Iterable[int],
                 unknown: int) -> tuple[str, int, int, int, int]:
    """The CIGAR and counts of an alignment path, one column at a time in plain Python.

    Parameters
    ----------
    query, subject : sequence of int
        Codes of the two sequences, whole.
    query_start, subject_start : int
        The path's first cell, 0-based.
    ops : iterable of int
        The path, first column first: ``OP_MATCH``, ``OP_INS`` (a query residue against a
        gap) or ``OP_DEL`` (a subject residue against a gap) of
        :mod:`swdask.kernels.cpu.reference`.
    unknown : int
        The code of ``X`` (protein) or ``N`` (DNA): two unknowns are not an identity.

    Returns
    -------
    tuple
        ``(cigar, matches, mismatches, gap_opens, align_length)``: the CIGAR as a string
        of ``=``, ``X``, ``I`` (query only) and ``D`` (subject only) runs, the ``=``
        columns, the ``X`` columns, the runs of ``I`` and of ``D``, and all columns.

    Examples
    --------
    >>> from swdask.kernels.cpu.reference import OP_DEL, OP_INS, OP_MATCH
    >>> path_summary([0, 1, 2, 3], [0, 2, 1, 3], 0, 0,
    ...              [OP_MATCH, OP_INS, OP_MATCH, OP_MATCH, OP_DEL], unknown=22)
    ('1=1I1=1X1D', 2, 1, 2, 5)
    """
    columns, i, j = [], query_start, subject_start
    for op in ops:
        if op == OP_MATCH:
            columns.append("=" if query[i] == subject[j] and query[i] != unknown else "X")
            i, j = i + 1, j + 1
        elif op == OP_INS:
            columns.append("I")
            i += 1
        else:
            columns.append("D")
            j += 1
    runs = []
    for c in columns:
        if runs and runs[-1][1] == c:
            runs[-1][0] += 1
        else:
            runs.append([1, c])
    cigar = "".join(f"{k}{c}" for k, c in runs)
    gap_opens = sum(1 for _, c in runs if c in "ID")
    return cigar, columns.count("="), columns.count("X"), gap_opens, len(columns)


def planted_copy(codes: npt.ArrayLike, scoring: Scoring, *, spacing: int = 200,
                 seed: int = 0) -> tuple[npt.NDArray[np.uint8], int, npt.NDArray[np.uint8]]:
    """A copy of ``codes`` with known substitutions and indels, and its alignment's score.

    Every ``spacing`` residues (none within ``spacing`` of either end) one mutation, in
    turn: a substitution, an insertion of 1-3 random residues into the copy, a deletion
    of 1-3 residues from it.  With mutations this sparse in real sequence, the planted
    alignment of ``codes`` against the copy is the best local one, end to end.

    Parameters
    ----------
    codes : array-like of int
        DNA codes (ACGT = 0-3); taken as uint8.
    scoring : Scoring
    spacing : int, default 200
    seed : int, default 0
        Seed of the NumPy generator that draws the mutations.

    Returns
    -------
    tuple
        ``(copy, score, ops)``: the mutated copy (uint8 codes), the planted alignment's
        score (by :func:`swdask.kernels.cpu.traceback.rescore`) and its operations (uint8
        ``OP_*`` codes).

    Examples
    --------
    >>> from swdask.scoring import Scoring
    >>> seq = np.random.default_rng(1).integers(0, 4, 1000).astype(np.uint8)
    >>> copy, score, ops = planted_copy(seq, Scoring(alphabet="dna"), spacing=300)
    >>> len(copy) != len(seq) or score < 2 * len(seq)
    True
    """
    rng = np.random.default_rng(seed)
    codes = np.asarray(codes, dtype=np.uint8)
    pieces, ops = [], []
    pos = 0
    for k, site in enumerate(range(spacing, len(codes) - spacing, spacing)):
        pieces.append(codes[pos:site])
        ops.append(np.full(site - pos, OP_MATCH, dtype=np.uint8))
        kind = k % 3
        if kind == 0:  # substitution
            pieces.append(np.array([(codes[site] + rng.integers(1, 4)) % 4], dtype=np.uint8))
            ops.append(np.array([OP_MATCH], dtype=np.uint8))
            pos = site + 1
        elif kind == 1:  # insertion into the copy: a gap in the query ('D')
            size = int(rng.integers(1, 4))
            pieces.append(rng.integers(0, 4, size).astype(np.uint8))
            ops.append(np.full(size, OP_DEL, dtype=np.uint8))
            pos = site
        else:  # deletion from the copy: a gap in the subject ('I')
            size = int(rng.integers(1, 4))
            ops.append(np.full(size, OP_INS, dtype=np.uint8))
            pos = site + size
    pieces.append(codes[pos:])
    ops.append(np.full(len(codes) - pos, OP_MATCH, dtype=np.uint8))
    copy = np.concatenate(pieces)
    ops = np.concatenate(ops)
    score = rescore(codes, copy, 0, 0, ops, np.asarray(scoring.matrix), scoring.gap_open,
                    scoring.gap_extend)
    return copy, int(score), ops


def mutated_copy(sequence: str, divergence: float, rng: random.Random, *,
                 indels: float = 0.2, letters: str = "ACGT") -> str:
    """A copy of ``sequence`` with ``round(divergence * len(sequence))`` random edits.

    Each edit, at a uniform position of the copy so far, is a substitution by another of
    ``letters`` (probability ``1 - indels``), or an insertion or a deletion of one residue
    (``indels / 2`` each).  Edits may fall on one another (a deletion of an inserted
    residue), so the copy's divergence is at most ``divergence``.  The all-pairs data
    maker (``workflows/make_16s_large.py``) and tests draw their mutants here.

    Examples
    --------
    >>> copy = mutated_copy("ACGT" * 50, 0.05, random.Random(1))
    >>> copy != "ACGT" * 50 and abs(len(copy) - 200) <= 10
    True
    """
    residues = list(sequence)
    for _ in range(round(divergence * len(sequence))):
        kind = rng.random()
        if kind < indels / 2 or not residues:
            residues.insert(rng.randrange(len(residues) + 1), rng.choice(letters))
            continue
        at = rng.randrange(len(residues))
        if kind < indels:
            del residues[at]
        else:
            residues[at] = rng.choice([c for c in letters if c != residues[at].upper()])
    return "".join(residues)


def long_subjects(batch: SequenceBatch, lengths: Iterable[int],
                  rng: np.random.Generator) -> list[npt.NDArray[np.uint8]]:
    """Titin-like subjects: random records of ``batch`` end to end, cut to each length.

    Parameters
    ----------
    batch : SequenceBatch
        Where the records come from (real proteins: real composition, real repeats).
    lengths : iterable of int
        The length of each subject.
    rng : numpy.random.Generator
        Draws the records, one after another, in order.

    Returns
    -------
    list of numpy.ndarray of uint8
        One array of codes a length.

    Examples
    --------
    >>> from swdask.sequences.batch import as_batch
    >>> batch = as_batch({"a": "MKV", "b": "WWHEAG"})
    >>> [len(s) for s in long_subjects(batch, [10, 1], np.random.default_rng(0))]
    [10, 1]
    """
    out = []
    for n in lengths:
        parts, have = [], 0
        while have < n:
            parts.append(batch.codes(int(rng.integers(len(batch)))))
            have += len(parts[-1])
        out.append(np.concatenate(parts)[:int(n)].copy())
    return out
