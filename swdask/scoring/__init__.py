"""Substitution scores and affine gap penalties: the one :class:`Scoring` object.

Gap convention
--------------
A gap of length ``k`` costs ``gap_open + k * gap_extend`` (NCBI BLAST's convention and
that of the Gotoh papers' ``rho + k * sigma``).  The defaults are BLOSUM62 with 11/1 for
protein and match 2, mismatch -3 with 5/2 for DNA, BLAST's defaults.

parasail, Biopython's ``PairwiseAligner`` and EMBOSS count the first gap residue inside
their open penalty.  Our ``(gap_open, gap_extend)`` is therefore their
``(gap_open + gap_extend, gap_extend)``:

==============================  =====================================================
tool                            same scoring as ``Scoring(gap_open=o, gap_extend=e)``
==============================  =====================================================
parasail                        ``open = o + e``, ``extend = e``
Biopython ``PairwiseAligner``   ``open_gap_score = -(o + e)``, ``extend_gap_score = -e``
EMBOSS water/needle             ``-gapopen (o + e) -gapextend e``
BLAST                           ``-gapopen o -gapextend e``
==============================  =====================================================

Matrices come from Biopython's ``Bio.Align.substitution_matrices`` (names in
:data:`MATRICES`) or from a file in NCBI format.  ``gap_open`` may be 0 (linear gaps);
``gap_extend`` must be at least 1 so that gaps always cost something.

Ranges
------
Every score is checked here, before any work, against what the kernels hold
(:data:`SCORE_RANGE`, :data:`GAP_OPEN_RANGE`, :data:`GAP_EXTEND_RANGE`): substitution
scores (matrix entries, ``match``, ``mismatch``, PSSM entries) from -32,768 to 32,767 and
gap costs up to 32,767.  That is BLAST's own bound for matrix files (``BLAST_SCORE_MIN`` /
``BLAST_SCORE_MAX``) and the int16 range of the GPU's shared profiles.  The 8- and 16-bit
kernels pick themselves only for scorings they hold (CPU: a matrix span under 64 and
``o + e < 255`` for 8 bits, entries under 1,000 and ``o + e < 8,000`` for 16 bits; GPU DPX:
entries and gaps up to 8,192) and re-run a saturated pair in 32 bits, so the binding limit
is the 32-bit kernels': every cell must stay above their minus-infinity sentinels
(``-2**29`` in the GPU kernels, ``-2**30`` on the CPU) and inside the traceback's exact
range, which :meth:`Scoring.check_lengths` checks for the longest pair of a job:
``(m + n + 1) * (max|s| + o + e) < 2**30 - 2**20`` (BLOSUM62 11/1: ``m + n`` up to 46
million residues).

U, O and J
----------
UniProt writes selenocysteine as ``U``, pyrrolysine as ``O`` and "I or L" as ``J``; the
protein alphabet holds them (codes 24-26) and keeps them in every output.  A matrix that
defines them scores them as it says.  Otherwise they are scored as BLAST+ scores them
(``blast_stat.c``, ``BlastScoreBlkProteinMatrixLoad``): ``U`` with ``C``'s scores, ``O``
with ``X``'s.  ``J``: with BLOSUM62, BLAST's own scores (its BLOSUM62 table has a ``J`` row,
which Biopython ships as the ``BLASTP`` matrix; U, O and J are taken from there, so with the
default matrix all three score exactly as in blastp); with any other matrix, as SSEARCH
(FASTA 36, ``init_altpam``) scores it, the better of ``I``'s and ``L``'s score.
"""
from __future__ import annotations

import numbers
import os
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ScoringError
from ..kernels.directions import SCORE_LIMIT, cell_bound
from ..sequences.alphabet import DNA, PROTEIN, Alphabet, get_alphabet

if TYPE_CHECKING:
    import numpy.typing as npt
    import parasail
    from Bio.Align.substitution_matrices import Array

#: Matrices loaded by name from Biopython, and the alphabet each scores.
MATRICES = {
    "BLOSUM45": PROTEIN,
    "BLOSUM50": PROTEIN,
    "BLOSUM62": PROTEIN,
    "BLOSUM80": PROTEIN,
    "BLOSUM90": PROTEIN,
    "PAM30": PROTEIN,
    "PAM70": PROTEIN,
    "PAM250": PROTEIN,
    "NUC.4.4": DNA,
}
#: (gap_open, gap_extend) used when none is given.
DEFAULT_GAPS = {"protein": (11, 1), "dna": (5, 2)}
DEFAULT_MATCH, DEFAULT_MISMATCH = 2, -3
# Letters a user's matrix may leave out: B, Z, X, * and N are scored with the matrix's
# minimum, U, O and J as BLAST does (see the module docstring).
_OPTIONAL_LETTERS = {"protein": "BZX*UOJ", "dna": "N"}

#: Allowed substitution scores (matrix and PSSM entries, match, mismatch), inclusive.
SCORE_RANGE = (-32768, 32767)
#: Allowed ``gap_open`` and ``gap_extend``, inclusive.
GAP_OPEN_RANGE = (0, 32767)
GAP_EXTEND_RANGE = (1, 32767)
#: Cells of a pair stay exact while their bound is below this (the 32-bit kernels' limit,
#: see :meth:`Scoring.check_lengths`).
CELL_LIMIT = SCORE_LIMIT


def _whole_number(value, what: str, allowed: tuple) -> int:
    low, high = allowed
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ScoringError(f"{what} must be a whole number, got {value!r}")
    if value != value or value in (float("inf"), float("-inf")) or value != int(value):
        raise ScoringError(f"{what} must be a whole number, got {value!r}")
    if not low <= value <= high:
        raise ScoringError(f"{what} must be a whole number from {low} to {high}, got {value!r}")
    return int(value)


def check_score(value: float, what: str) -> int:
    """``value`` as an int, if it is a whole number in :data:`SCORE_RANGE`.

    Parameters
    ----------
    value : int or float
        A substitution score.
    what : str
        Names it in the message (``"PAM.mat: line 4: score of A/R"``).

    Returns
    -------
    int

    Raises
    ------
    ScoringError
        Not a whole number, infinite, NaN, or out of range; the message gives the range.

    Examples
    --------
    >>> check_score(3.0, "match")
    3
    >>> check_score(1e9, "match")
    Traceback (most recent call last):
    ...
    swdask.errors.ScoringError: match must be a whole number from -32768 to 32767, got 1000000000.0
    """
    return _whole_number(value, what, SCORE_RANGE)


class Scoring:
    """Substitution matrix plus affine gap penalties, over one alphabet.

    Parameters
    ----------
    matrix : str, path or Bio.Align.substitution_matrices.Array, optional
        A matrix name from :data:`MATRICES` (case-insensitive), the path of an NCBI-format
        matrix file, or a Biopython matrix.  Default: BLOSUM62 for protein; for DNA,
        ``match``/``mismatch`` scores.
    gap_open : int, optional
        Cost of opening a gap, >= 0.  Default 11 (protein) or 5 (DNA).
    gap_extend : int, optional
        Cost of each gap residue, >= 1.  Default 1 (protein) or 2 (DNA).
    match, mismatch : int, optional
        DNA scores for identical and different nucleotides (default 2 and -3).  ``N``
        scores ``mismatch`` against everything, itself included.  Not combined with
        ``matrix``.
    alphabet : {"protein", "dna"} or Alphabet, optional
        Needed only when neither ``matrix`` nor ``match``/``mismatch`` tells it.
        Default "protein".

    Raises
    ------
    ScoringError
        Unknown matrix name, unreadable or non-integer matrix file, a matrix that misses
        letters of the alphabet, a negative gap_open, a gap_extend below 1, non-integer
        penalties, or ``matrix`` together with ``match``/``mismatch``.

    Examples
    --------
    >>> Scoring()
    Scoring(matrix='BLOSUM62', gap_open=11, gap_extend=1, alphabet='protein')
    >>> Scoring(alphabet="dna").score("ACGT", "ACGA")
    3
    >>> Scoring(matrix="BLOSUM50", gap_open=13, gap_extend=2).parasail_gaps
    (15, 2)
    """

    def __init__(self, matrix: str | os.PathLike | Array | None = None, *,
                 gap_open: int | None = None, gap_extend: int | None = None,
                 match: int | None = None, mismatch: int | None = None,
                 alphabet: str | Alphabet | None = None) -> None:
        if matrix is not None and (match is not None or mismatch is not None):
            raise ScoringError("give either a matrix or match/mismatch scores, not both")
        if match is not None or mismatch is not None:
            if alphabet is not None and get_alphabet(alphabet) is not DNA:
                raise ScoringError("match/mismatch scores are for the dna alphabet")
            alphabet = DNA
        if matrix is None:
            alphabet = get_alphabet(alphabet or "protein")
            if alphabet is PROTEIN:
                matrix = "BLOSUM62"
        if matrix is None:
            match = DEFAULT_MATCH if match is None else check_score(match, "match")
            mismatch = DEFAULT_MISMATCH if mismatch is None else check_score(mismatch, "mismatch")
            if match <= 0 or mismatch >= match:
                raise ScoringError(f"need match > 0 and mismatch < match, got {match} and {mismatch}")
            table = np.full((DNA.size, DNA.size), mismatch, dtype=np.int32)
            np.fill_diagonal(table[:4, :4], match)
            self.name = f"match {match} mismatch {mismatch}"
            self._spec = {"match": match, "mismatch": mismatch}
        else:
            table, alphabet, self.name = _load_matrix(matrix, alphabet)
            self._spec = {"matrix": self.name}
        self.alphabet: Alphabet = alphabet
        self.matrix: np.ndarray = table
        self.matrix.setflags(write=False)
        default_open, default_extend = DEFAULT_GAPS[alphabet.name]
        self.gap_open = _whole_number(default_open if gap_open is None else gap_open, "gap_open",
                                      GAP_OPEN_RANGE)
        self.gap_extend = _whole_number(default_extend if gap_extend is None else gap_extend,
                                        "gap_extend", GAP_EXTEND_RANGE)

    def check_lengths(self, m: int, n: int, what: str = "a pair") -> None:
        """Refuse a job whose longest pair, ``m`` x ``n`` residues, could leave the kernels'
        exact 32-bit range: ``(m + n + 1) * (max|s| + o + e)`` must stay below
        :data:`CELL_LIMIT` (the bound every traceback checks, here before any work).

        Raises
        ------
        ScoringError
            The bound is reached; the message names the lengths and the limit.
        """
        bound = cell_bound(m, n, self.matrix, self.gap_open, self.gap_extend)
        if bound >= CELL_LIMIT:
            raise ScoringError(
                f"{what} of {int(m):,} x {int(n):,} residues may reach scores of {bound:,} with "
                f"{self.name} and gaps {self.gap_open}/{self.gap_extend}, beyond the exact 32-bit "
                f"range of the kernels ({CELL_LIMIT:,}); use smaller scores or shorter sequences")

    @classmethod
    def default(cls, alphabet: str | Alphabet) -> Scoring:
        """BLAST's default scoring for ``alphabet`` ("protein" or "dna")."""
        return cls(alphabet=alphabet)

    @property
    def max_score(self) -> int:
        """Largest substitution score."""
        return int(self.matrix.max())

    @property
    def min_score(self) -> int:
        """Smallest substitution score."""
        return int(self.matrix.min())

    @property
    def parasail_gaps(self) -> tuple[int, int]:
        """``(open, extend)`` that give parasail (and EMBOSS) this scoring."""
        return self.gap_open + self.gap_extend, self.gap_extend

    @cached_property
    def letters_matrix(self) -> np.ndarray:
        """Scores indexed by ASCII letters (upper case), 256 x 256, for checks and tools."""
        full = np.full((256, 256), self.min_score, dtype=np.int32)
        codes = self.alphabet.letters_array
        full[np.ix_(codes, codes)] = self.matrix
        return full

    def gap_cost(self, length: int) -> int:
        """Cost of a gap of ``length`` residues (0 for length 0)."""
        return self.gap_open + length * self.gap_extend if length > 0 else 0

    def score(self, a: str, b: str) -> int:
        """Sum of substitution scores of two equal-length, gapless sequences."""
        ca, cb = self.alphabet.encode(a), self.alphabet.encode(b)
        if ca.size != cb.size:
            raise ValueError("score() takes sequences of equal length")
        return int(self.matrix[ca, cb].sum())

    def query_profile(self, codes: npt.ArrayLike, dtype: npt.DTypeLike = np.int32) -> np.ndarray:
        """Query profile: ``profile[a, i]`` is the score of query residue i against code a.

        Shape ``(alphabet.size, len(codes))``, C order, so a kernel walking the subject
        reads one contiguous row per subject residue.
        """
        codes = np.asarray(codes, dtype=np.uint8)
        return np.ascontiguousarray(self.matrix[:, codes].astype(dtype))

    def to_parasail(self) -> parasail.Matrix:
        """A parasail matrix with this scoring's scores (needs ``parasail`` installed)."""
        import parasail

        letters = self.alphabet.letters
        pm = parasail.matrix_create(letters, 0, 0)
        for i in range(len(letters)):
            for j in range(len(letters)):
                pm[i, j] = int(self.matrix[i, j])
        return pm

    def __eq__(self, other):
        return (isinstance(other, Scoring) and self.alphabet is other.alphabet
                and self.gap_open == other.gap_open and self.gap_extend == other.gap_extend
                and np.array_equal(self.matrix, other.matrix))

    def __hash__(self):
        return hash((self.alphabet.name, self.gap_open, self.gap_extend, self.matrix.tobytes()))

    def __reduce__(self):
        return (_rebuild, (self.alphabet.name, self.name, self._spec, self.matrix.copy(),
                           self.gap_open, self.gap_extend))

    def __repr__(self):
        spec = ", ".join(f"{k}={v!r}" for k, v in self._spec.items())
        return (f"Scoring({spec}, gap_open={self.gap_open}, gap_extend={self.gap_extend}, "
                f"alphabet={self.alphabet.name!r})")


def _rebuild(alphabet, name, spec, matrix, gap_open, gap_extend):
    scoring = Scoring.__new__(Scoring)
    scoring.alphabet = get_alphabet(alphabet)
    scoring.name = name
    scoring._spec = spec
    scoring.matrix = matrix
    scoring.matrix.setflags(write=False)
    scoring.gap_open, scoring.gap_extend = gap_open, gap_extend
    return scoring


def _load_matrix(matrix, alphabet):
    from Bio.Align import substitution_matrices

    if isinstance(matrix, substitution_matrices.Array):
        source, name = matrix, "custom"
    elif isinstance(matrix, (str, os.PathLike)) and str(matrix).upper() in MATRICES:
        name = str(matrix).upper()
        source = substitution_matrices.load(name)
    elif isinstance(matrix, (str, os.PathLike)) and os.path.isfile(matrix):
        name = str(matrix)
        try:
            source = substitution_matrices.read(os.fspath(matrix))
        except Exception as exc:  # noqa: BLE001 - Biopython raises assorted types on bad files
            detail = str(exc) or type(exc).__name__
            raise ScoringError(f"{matrix}: not a readable NCBI-format matrix ({detail})") from None
    else:
        raise ScoringError(
            f"unknown matrix {str(matrix)!r}; choose one of: {', '.join(MATRICES)}, "
            "or give the path of an NCBI-format matrix file"
        )
    letters = "".join(source.alphabet) if not isinstance(source.alphabet, str) else source.alphabet
    if name in MATRICES:
        detected = MATRICES[name]
    elif set(PROTEIN.letters[:20]) <= set(letters.upper()):
        detected = PROTEIN
    elif set("ACGT") <= set(letters.upper()):
        detected = DNA
    else:
        raise ScoringError(f"{name}: matrix letters {letters!r} cover neither protein nor dna")
    if alphabet is not None and get_alphabet(alphabet) is not detected:
        raise ScoringError(f"matrix {name} scores {detected.name}, not {get_alphabet(alphabet).name}")
    values = np.asarray(source, dtype=np.float64)
    if source.ndim != 2:
        raise ScoringError(f"{name}: not a square substitution matrix")
    low, high = SCORE_RANGE
    bad = ~np.isfinite(values) | (values != np.round(values)) | (values < low) | (values > high)
    if bad.any():
        i, j = (int(k) for k in np.argwhere(bad)[0])
        value = float(values[i, j])
        value = int(value) if value.is_integer() and abs(value) < 2**53 else value
        where = _row_line(matrix, letters[i]) if name not in MATRICES and name != "custom" else name
        check_score(value, f"{where}: score of {letters[i]}/{letters[j]}")
    index = {c.upper(): k for k, c in enumerate(letters)}
    missing = [c for c in detected.letters if c not in index]
    required_missing = [c for c in missing if c not in _OPTIONAL_LETTERS[detected.name]]
    if required_missing:
        raise ScoringError(f"{name}: matrix lacks letters {''.join(required_missing)}")
    floor = int(values.min())
    table = np.full((detected.size, detected.size), floor, dtype=np.int32)
    for a, la in enumerate(detected.letters):
        for b, lb in enumerate(detected.letters):
            if la in index and lb in index:
                table[a, b] = int(values[index[la], index[lb]])
    if detected is PROTEIN:
        _score_rare_letters(table, name, [c for c in "UOJ" if c not in index])
    return table, detected, name


def _row_line(path, letter: str) -> str:
    """``"PATH: line N"`` of the row of ``letter`` in an NCBI-format matrix file (the first
    data line whose first field is the letter; the file itself where none is found)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            header = False
            for number, line in enumerate(handle, 1):
                fields = line.split("#", 1)[0].split()
                if not fields:
                    continue
                if header and fields[0].upper() == letter.upper():
                    return f"{path}: line {number}"
                header = True
    except OSError:
        pass
    return str(path)


def _score_rare_letters(table: np.ndarray, name: str, missing: list) -> None:
    """Scores of U, O and J where the matrix lacks them, in place (module docstring)."""
    if not missing:
        return
    code = {c: k for k, c in enumerate(PROTEIN.letters)}
    if name == "BLOSUM62":
        from Bio.Align import substitution_matrices

        # BLAST's own BLOSUM62 scores of U, O and J (Biopython's copy of blastp's table).
        blast = substitution_matrices.load("BLASTP")
        for rare in missing:
            for other in PROTEIN.letters:
                table[code[rare], code[other]] = int(blast[rare, other])
                table[code[other], code[rare]] = int(blast[other, rare])
        return
    for rare, like in (("U", "C"), ("O", "X")):  # BLAST: U as C, O as X
        if rare in missing:
            table[code[rare], :] = table[code[like], :]
            table[:, code[rare]] = table[:, code[like]]
    if "J" in missing:  # SSEARCH: the better of I and L
        ile, leu, j = code["I"], code["L"], code["J"]
        table[j, :] = np.maximum(table[ile, :], table[leu, :])
        table[:, j] = np.maximum(table[:, ile], table[:, leu])
        table[j, j] = max(table[ile, ile], table[leu, leu])
