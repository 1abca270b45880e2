"""Align one pair: :func:`align` and the :class:`Alignment` it returns."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidSequenceError
from ..kernels.cpu.reference import MODES, OP_DEL, OP_INS, OP_MATCH, mode_code
from ..scoring import Scoring
from ..sequences.alphabet import Alphabet, get_alphabet
from ..sequences.batch import one_sequence

__all__ = ["MODES", "Alignment", "align", "alignment_from_codes", "check_mode"]


def check_mode(mode: str) -> str:
    """Return ``mode`` if it is one of :data:`MODES`; raise ValueError naming them otherwise."""
    mode_code(mode)
    return mode


@dataclass(frozen=True)
class Alignment:
    """One pairwise alignment: immutable, picklable, comparable.

    Coordinates are 0-based half-open: the alignment covers
    ``query[query_start:query_end]`` and ``subject[subject_start:subject_end]``.
    ``cigar`` uses ``=`` (identity), ``X`` (substitution), ``I`` (query residue against
    a gap) and ``D`` (subject residue against a gap) over exactly that region.
    ``identity`` is a fraction, ``matches / align_length`` (BLAST's pident / 100); unknown
    residues (``X``, ``N``) are never identities.  ``aligned_query`` and ``aligned_subject``
    are the two gapped rows (``-`` for gaps).  :meth:`format` prints positions 1-based and
    the identity in percent, for a person to read.
    """

    query_name: str
    subject_name: str
    mode: str
    score: int
    query_start: int
    query_end: int
    subject_start: int
    subject_end: int
    cigar: str
    matches: int
    mismatches: int
    gap_opens: int
    align_length: int
    identity: float
    query_length: int
    subject_length: int
    aligned_query: str
    aligned_subject: str
    markup: str

    def format(self, width: int = 60) -> str:
        """The alignment as blocks of three lines (query, markup, subject).

        Markup: ``|`` identity, ``+`` positive substitution score, space otherwise.
        Positions are 1-based inclusive, as in BLAST and EMBOSS output.  Names are
        written with unprintable characters escaped (:func:`swdask.output.text_name`).
        """
        from ..output import text_name

        query_name, subject_name = text_name(self.query_name), text_name(self.subject_name)
        header = (f"{self.mode} alignment of {query_name} ({self.query_length}) and "
                  f"{subject_name} ({self.subject_length})\n"
                  f"score {self.score}, identity {self.matches}/{self.align_length} "
                  f"({100 * self.identity:.1f}%), mismatches {self.mismatches}, "
                  f"gap opens {self.gap_opens}, cigar {self.cigar or '-'}\n")
        label = max(len(query_name), len(subject_name), 5)
        label = min(label, 20)
        digits = len(str(max(self.query_end, self.subject_end, 1)))
        lines = []
        qpos, spos = self.query_start, self.subject_start
        for start in range(0, self.align_length, width):
            q = self.aligned_query[start:start + width]
            s = self.aligned_subject[start:start + width]
            qn = sum(c != "-" for c in q)
            sn = sum(c != "-" for c in s)
            lines.append(f"{query_name[:label]:<{label}} {qpos + 1 if qn else qpos:>{digits}} "
                         f"{q} {qpos + qn}")
            lines.append(f"{'':<{label}} {'':>{digits}} {self.markup[start:start + width]}")
            lines.append(f"{subject_name[:label]:<{label}} {spos + 1 if sn else spos:>{digits}} "
                         f"{s} {spos + sn}")
            lines.append("")
            qpos += qn
            spos += sn
        return header + "\n" + "\n".join(lines)

    def __str__(self):
        return self.format()


def alignment_from_codes(query: np.ndarray, subject: np.ndarray, scoring: Scoring,
                         mode: str = "local", *, end: tuple[int, int] | None = None,
                         query_name: str = "query", subject_name: str = "subject") -> Alignment:
    """Full alignment of two code arrays (the engine under :func:`align` and searches)."""
    from ..kernels.cpu.traceback import align_codes  # Numba: imported when aligning

    result = align_codes(query, subject, scoring, mode, end=end)
    letters = scoring.alphabet.letters_array
    q_codes = np.asarray(query, dtype=np.uint8)[result["query_start"]:result["query_end"]]
    s_codes = np.asarray(subject, dtype=np.uint8)[result["subject_start"]:result["subject_end"]]
    ops = np.asarray(result["ops"])
    n = ops.shape[0]
    row_q = np.full(n, ord("-"), np.uint8)
    row_s = np.full(n, ord("-"), np.uint8)
    takes_q = (ops == OP_MATCH) | (ops == OP_INS)
    takes_s = (ops == OP_MATCH) | (ops == OP_DEL)
    row_q[takes_q] = letters[q_codes]
    row_s[takes_s] = letters[s_codes]
    markup = np.full(n, ord(" "), np.uint8)
    pairs = ops == OP_MATCH
    qc = np.zeros(n, np.int64)
    sc = np.zeros(n, np.int64)
    qc[takes_q] = q_codes
    sc[takes_s] = s_codes
    unknown = scoring.alphabet.unknown_code
    positive = pairs & (scoring.matrix[qc, sc] > 0)
    identical = pairs & (qc == sc) & (qc != unknown)
    markup[positive] = ord("+")
    markup[identical] = ord("|")
    return Alignment(
        query_name=query_name, subject_name=subject_name, mode=mode,
        score=result["score"], query_start=result["query_start"], query_end=result["query_end"],
        subject_start=result["subject_start"], subject_end=result["subject_end"],
        cigar=result["cigar"], matches=result["matches"], mismatches=result["mismatches"],
        gap_opens=result["gap_opens"], align_length=result["align_length"],
        identity=result["identity"], query_length=len(query), subject_length=len(subject),
        aligned_query=row_q.tobytes().decode("ascii"),
        aligned_subject=row_s.tobytes().decode("ascii"),
        markup=markup.tobytes().decode("ascii"),
    )


def align(query: str | os.PathLike | np.ndarray, subject: str | os.PathLike | np.ndarray, *,
          scoring: Scoring | None = None, mode: str = "local",
          alphabet: str | Alphabet | None = None, map_unknown: bool = False) -> Alignment:
    """Align two sequences exactly, with full traceback.

    Parameters
    ----------
    query, subject : str, path or numpy.ndarray
        A sequence as letters, the path of a FASTA/FASTQ file (its first record is used),
        or uint8 residue codes.
    scoring : Scoring, optional
        Default: BLAST's default for the alphabet (BLOSUM62 11/1, or DNA 2/-3 5/2).
    mode : {"local", "global", "semiglobal"}, default "local"
        Smith-Waterman, Needleman-Wunsch, or end gaps free on both sequences.
    alphabet : {"protein", "dna"} or Alphabet, optional
        Default: the scoring's alphabet, else detected from the sequences.
    map_unknown : bool, default False
        Read letters outside the alphabet as ``X``/``N`` instead of failing.

    Returns
    -------
    Alignment

    Raises
    ------
    InvalidSequenceError
        A letter outside the alphabet.
    ValueError
        Unknown mode, or a pair too large for a full traceback in memory.

    Examples
    --------
    >>> aln = align("HEAGAWGHEE", "PAWHEAE", scoring=Scoring("BLOSUM50", gap_open=8, gap_extend=2))
    >>> aln.score, aln.cigar
    (26, '2=1I2=')
    >>> print(aln.aligned_query, aln.aligned_subject, sep="\\n")
    AWGHE
    AW-HE
    """
    from ..sequences.alphabet import detect_alphabet

    check_mode(mode)
    if alphabet is None and scoring is not None:
        alphabet = scoring.alphabet
    qname, q, qa = one_sequence(query, alphabet or "auto", map_unknown, "query")
    sname, s, sa = one_sequence(subject, alphabet or "auto", map_unknown, "subject")
    if alphabet is None:
        alphabet = qa or sa
    if alphabet is None:
        sample = "".join(x for x in (q, s) if isinstance(x, str))
        alphabet = detect_alphabet(sample.encode("ascii", "replace"))
    alphabet = get_alphabet(alphabet)
    scoring = scoring or Scoring.default(alphabet.name)
    if scoring.alphabet is not alphabet:
        raise InvalidSequenceError(
            f"the sequences are {alphabet.name} but the scoring is for {scoring.alphabet.name}")
    if isinstance(q, str):
        q = alphabet.encode(q, map_unknown=map_unknown, where=qname)
    if isinstance(s, str):
        s = alphabet.encode(s, map_unknown=map_unknown, where=sname)
    return alignment_from_codes(q, s, scoring, mode, query_name=qname, subject_name=sname)
