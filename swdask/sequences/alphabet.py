"""Residue alphabets and their uint8 codes.

Protein residues are coded in NCBI matrix order ``ARNDCQEGHILKMFPSTWYVBZX*`` (A=0 ...
``*``=23), followed by the letters real UniProt holds that the matrices rarely define:
``U`` (selenocysteine, 24), ``O`` (pyrrolysine, 25) and ``J`` (I or L, 26).  They were
appended rather than inserted so that the codes of stores written before them keep their
meaning (:data:`PROTEIN_V1` is the alphabet those stores were written with); how they are
scored is in :mod:`swdask.scoring`.  DNA is coded in ``ACGTN`` (A=0 ... N=4).  Lower case
is accepted (soft masking is not kept), ``U`` is read as ``T`` in DNA, and the IUPAC
ambiguity codes ``RYKMSWBDHV`` are stored and scored as ``N``.  Any other letter is an input error,
unless the caller asks to map unknown letters to the alphabet's unknown residue
(``X`` or ``N``).  ASCII white space inside a sequence is layout and is dropped
before validation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InvalidSequenceError

if TYPE_CHECKING:
    import numpy.typing as npt

INVALID = 255
_WHITESPACE = b" \t\r\n\v\f"


@dataclass(frozen=True)
class Alphabet:
    """A residue alphabet: letters, their codes and how input letters map to codes.

    Parameters
    ----------
    name : str
        ``"protein"`` or ``"dna"``.
    letters : str
        The canonical letters; the code of a letter is its index.
    unknown : str
        The letter that stands for an unknown residue (``X`` or ``N``).
    aliases : dict of str to str, optional
        Extra input letters read as one of ``letters`` (``U`` -> ``T``, IUPAC -> ``N``).
    """

    name: str
    letters: str
    unknown: str
    aliases: dict = field(default_factory=dict)

    def __post_init__(self):
        table = np.full(256, INVALID, dtype=np.uint8)
        for code, letter in enumerate(self.letters):
            table[ord(letter)] = code
            table[ord(letter.lower())] = code
        for alias, target in self.aliases.items():
            table[ord(alias)] = self.letters.index(target)
            table[ord(alias.lower())] = self.letters.index(target)
        object.__setattr__(self, "_table", table)
        lenient = table.copy()
        lenient[lenient == INVALID] = self.letters.index(self.unknown)
        object.__setattr__(self, "_lenient_table", lenient)

    @property
    def size(self) -> int:
        """Number of residue codes."""
        return len(self.letters)

    @property
    def unknown_code(self) -> int:
        """Code of the unknown residue (``X`` or ``N``); never counted as an identity."""
        return self.letters.index(self.unknown)

    def encode(self, sequence: str | bytes, *, map_unknown: bool = False,
               where: str = "sequence") -> npt.NDArray[np.uint8]:
        """Encode a sequence into uint8 residue codes.

        Parameters
        ----------
        sequence : str or bytes
            Residue letters; ASCII white space is dropped.
        map_unknown : bool, default False
            Read letters outside the alphabet as the unknown residue instead of failing.
        where : str, default "sequence"
            Names the record in the error message (e.g. ``"q.fa, record 3 'sp|P1|X'"``).

        Returns
        -------
        numpy.ndarray
            uint8 codes, one per residue.

        Raises
        ------
        InvalidSequenceError
            A letter is not in the alphabet; the message gives the 1-based position.
        """
        raw = sequence.encode("ascii", "replace") if isinstance(sequence, str) else bytes(sequence)
        if any(ws in raw for ws in _WHITESPACE):
            raw = raw.translate(None, _WHITESPACE)
        data = np.frombuffer(raw, dtype=np.uint8)
        if map_unknown:
            # Non-letters (digits, '-', '.') are still errors: they are not residues at all.
            codes = self._lenient_table[data]
            bad = np.flatnonzero(~_is_residue_char(data) & (self._table[data] == INVALID))
        else:
            codes = self._table[data]
            bad = np.flatnonzero(codes == INVALID)
        if bad.size:
            pos = int(bad[0])
            letter = chr(data[pos]) if 32 < data[pos] < 127 else f"\\x{data[pos]:02x}"
            hint = "" if map_unknown else f" (use map_unknown / --map-unknown to read it as {self.unknown})"
            raise InvalidSequenceError(
                f"{where}, position {pos + 1}: letter {letter!r} is not in the {self.name} "
                f"alphabet {self.letters}{hint}"
            )
        return codes

    def decode(self, codes: npt.ArrayLike) -> str:
        """Letters of a code array (IUPAC codes come back as ``N``)."""
        return np.asarray(self.letters_array[np.asarray(codes, dtype=np.uint8)]).tobytes().decode("ascii")

    @property
    def letters_array(self) -> np.ndarray:
        """The letters as a uint8 array indexed by code."""
        return np.frombuffer(self.letters.encode("ascii"), dtype=np.uint8)

    def valid_fraction(self, sequence: bytes) -> float:
        """Fraction of letters of ``sequence`` that this alphabet accepts (for detection)."""
        data = np.frombuffer(sequence, dtype=np.uint8)
        return float(np.mean(self._table[data] != INVALID)) if data.size else 1.0


def _is_residue_char(data: np.ndarray) -> np.ndarray:
    upper = data & 0xDF
    return ((upper >= ord("A")) & (upper <= ord("Z"))) | (data == ord("*"))


PROTEIN = Alphabet("protein", "ARNDCQEGHILKMFPSTWYVBZX*UOJ", "X")
#: The protein letters before U, O and J were added: the codes of stores that record no
#: letters of their own (:mod:`swdask.sequences.store`).
PROTEIN_V1 = PROTEIN.letters[:24]
DNA = Alphabet("dna", "ACGTN", "N", {c: "N" for c in "RYKMSWBDHV"} | {"U": "T"})
ALPHABETS = {"protein": PROTEIN, "dna": DNA}

# Codes of the complement of each DNA code: A<->T, C<->G; N (and the IUPAC codes stored
# as N) stays N.
_COMPLEMENT = np.array([DNA.letters.index(c) for c in "TGCAN"], dtype=np.uint8)


def reverse_complement(codes: npt.ArrayLike) -> npt.NDArray[np.uint8]:
    """Reverse complement of DNA codes (``ACGTN`` order; N stays N).

    Parameters
    ----------
    codes : array_like of uint8
        DNA codes, concatenated sequences included: the reverse complement of a
        concatenation is the concatenation of the reverse complements in reverse order.

    Returns
    -------
    numpy.ndarray
        A new uint8 array.

    Examples
    --------
    >>> DNA.decode(reverse_complement(DNA.encode("AACGRN")))
    'NNCGTT'
    """
    return _COMPLEMENT[np.asarray(codes, dtype=np.uint8)][::-1].copy()


def get_alphabet(name: str | Alphabet) -> Alphabet:
    """The alphabet called ``name`` (``"protein"`` or ``"dna"``); an Alphabet passes through.

    Raises
    ------
    ValueError
        ``name`` is not a known alphabet; the message lists the known ones.
    """
    if isinstance(name, Alphabet):
        return name
    try:
        return ALPHABETS[name]
    except (KeyError, TypeError):
        raise InvalidSequenceError(
            f"unknown alphabet {name!r}; choose one of: {', '.join(ALPHABETS)}"
        ) from None


def detect_alphabet(sample: bytes) -> Alphabet:
    """Guess the alphabet of a sample of residue letters.

    DNA when every letter is a nucleotide (IUPAC included) and at least 90% are
    ``ACGTUN``; protein otherwise.
    """
    data = np.frombuffer(bytes(sample).upper().translate(None, _WHITESPACE), dtype=np.uint8)
    if data.size == 0:
        return PROTEIN
    if DNA.valid_fraction(data.tobytes()) == 1.0:
        core = np.isin(data, np.frombuffer(b"ACGTUN", dtype=np.uint8)).mean()
        if core >= 0.9:
            return DNA
    return PROTEIN
