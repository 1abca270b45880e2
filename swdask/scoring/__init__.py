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
"""
from __future__ import annotations

import numbers
import os
from functools import cached_property

import numpy as np

from ..errors import ScoringError
from ..sequences.alphabet import DNA, PROTEIN, Alphabet, get_alphabet

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
# Letters a user's matrix may leave out: they are scored with the matrix's minimum.
_OPTIONAL_LETTERS = {"protein": "BZX*", "dna": "N"}


def _whole_number(value, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ScoringError(f"{what} must be a whole number, got {value!r}")
    if value != int(value):
        raise ScoringError(f"{what} must be a whole number, got {value!r}")
    if value < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise ScoringError(f"{what} must be {kind}, got {value!r}")
    return int(value)


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
    alphabet : {"protein", "dna"}, optional
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

    def __init__(self, matrix=None, *, gap_open=None, gap_extend=None, match=None,
                 mismatch=None, alphabet=None):
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
            match = DEFAULT_MATCH if match is None else _whole_number(match, "match", -10**6)
            mismatch = DEFAULT_MISMATCH if mismatch is None else _whole_number(mismatch, "mismatch", -10**6)
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
        self.gap_open = _whole_number(default_open if gap_open is None else gap_open, "gap_open", 0)
        self.gap_extend = _whole_number(default_extend if gap_extend is None else gap_extend,
                                        "gap_extend", 1)

    @classmethod
    def default(cls, alphabet) -> Scoring:
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

    def query_profile(self, codes, dtype=np.int32) -> np.ndarray:
        """Query profile: ``profile[a, i]`` is the score of query residue i against code a.

        Shape ``(alphabet.size, len(codes))``, C order, so a kernel walking the subject
        reads one contiguous row per subject residue.
        """
        codes = np.asarray(codes, dtype=np.uint8)
        return np.ascontiguousarray(self.matrix[:, codes].astype(dtype))

    def to_parasail(self):
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
    if source.ndim != 2 or not np.array_equal(values, np.round(values)):
        raise ScoringError(f"{name}: matrix scores must be whole numbers")
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
    return table, detected, name
