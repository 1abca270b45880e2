"""Writing results: the hits table as Parquet, BLAST tabular, SAM or BAM, atomically.

Every writer builds its file under a temporary name in the destination folder and
renames it into place at the end, so an interrupted or failed run leaves no partial
output and never clobbers an existing file unless asked to.

The format of a file is the one its extension stands for (``.tsv``/``.tab``/``.m8``: BLAST
tabular, ``.sam``: SAM, ``.bam``: BAM, ``.parquet``/``.pq``: Parquet; any other: Parquet)
unless given, and a format that its extension contradicts is refused (:func:`output_format`).
Names are written into text outputs with their unprintable characters escaped
(:func:`text_name`); Parquet keeps them as they are.

Coordinates are 0-based half-open in the hits table (Parquet) and 1-based inclusive in
BLAST tabular and SAM output, as those formats define.  The hits table's ``cigar`` uses
``=`` (identity), ``X`` (substitution), ``I`` (a query residue against a gap: consumes
the query) and ``D`` (a subject residue against a gap: consumes the subject) over
exactly the aligned region.  That is SAM's convention with the query as the read and
the subject as the reference, so both exports write these operations unchanged; SAM
adds soft clips for the unaligned ends of the query.

A DNA hit on the minus strand (``strand == "minus"``) keeps its coordinates on the
sequences as given, and its CIGAR runs along the subject (over the query's reverse
complement): BLAST tabular writes it as blastn does (``sstart > send``; ``qseq``, ``sseq``
and ``btop`` with the query as given and the subject reverse complemented), SAM with FLAG 16.

Identity has one convention per output, named so: ``identity`` in the hits table is a
fraction (matches / alignment columns, in [0, 1]); ``pident`` in BLAST tabular is a percent,
as BLAST prints it.

BLAST tabular columns that show residues (``qseq``, ``sseq``, ``btop``) or count positives
(``positive``, ``ppos``) read them from the queries and the database searched (``queries=``,
``subjects=``; the hits table keeps only ids), scoring them with ``scoring=``.  BAM is
written through pysam (the ``[bam]`` extra), record by record from the SAM text, so every
tag keeps its SAM type.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import __version__
from .errors import MissingDependencyError
from .jobs.base import atomic_path, check_output
from .options import (
    BLAST6_COLUMNS,
    BLAST_KEYWORDS,
    OUTFMT_EXTENSIONS,
    OUTFMTS,
    SEQUENCE_KEYWORDS,
    check_choice,
)
from .parquet_schemas import HITS
from .tables import check_table, for_file, to_arrow

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable, Iterator, Sequence
    from types import ModuleType

    import dask.dataframe as dd
    import pandas as pd

    from .scoring import Scoring
    from .sequences.alphabet import Alphabet
    from .sequences.batch import SequencesLike
    from .sequences.store import SequenceStore

    #: BLAST keywords, as a sequence or one string separated by white space.
    ColumnsLike = str | Sequence[str]

#: The SAM specification version that :func:`sam_lines` writes (``@HD VN``).
SAM_VERSION = "1.6"


def check_outfmt(outfmt: str) -> str:
    """Return ``outfmt`` if known; raise ValueError naming the known formats otherwise."""
    return check_choice("output format", outfmt, OUTFMTS)


def output_format(path: os.PathLike | str, outfmt: str | None = None) -> str:
    """The format of the output file ``path``: ``outfmt``, or where it is None the one the
    extension stands for.

    Parameters
    ----------
    path : str or os.PathLike
        The output file.
    outfmt : {"parquet", "blast6", "sam", "bam"}, optional
        The format asked for.  Default (None): the one of ``path``'s extension, case
        aside (:data:`swdask.options.OUTFMT_EXTENSIONS`: ``.tsv``, ``.tab``, ``.m8``,
        ``.blast6``, ``.outfmt6`` BLAST tabular; ``.sam`` SAM; ``.bam`` BAM; ``.parquet``,
        ``.pq`` Parquet), Parquet for any other extension.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        Unknown ``outfmt``, or one that the extension of ``path`` contradicts.

    Examples
    --------
    >>> output_format("hits.tsv"), output_format("hits.SAM"), output_format("hits.out")
    ('blast6', 'sam', 'parquet')
    >>> output_format("hits.bam")
    'bam'
    >>> output_format("hits.tsv", "blast6")
    'blast6'
    >>> output_format("hits.tsv", "parquet")
    Traceback (most recent call last):
    ...
    ValueError: hits.tsv: the extension .tsv stands for blast6, but this output is parquet
    """
    suffix = Path(path).suffix.lower()
    meant = OUTFMT_EXTENSIONS.get(suffix)
    if outfmt is None:
        return meant or "parquet"
    check_outfmt(outfmt)
    if meant is not None and meant != outfmt:
        raise ValueError(f"{path}: the extension {suffix} stands for {meant}, but this output "
                         f"is {outfmt}")
    return outfmt


def text_name(name: str) -> str:
    r"""A sequence name as text outputs write it: unprintable characters escaped, visibly.

    A character that :meth:`str.isprintable` rejects (the C0 and C1 control characters
    such as tab, escape or DEL; format characters such as U+202E; line and paragraph
    separators; spaces other than the ASCII space) is written as a Python string literal
    writes it (``\xHH``, ``\uHHHH``, ``\UHHHHHHHH``), and a backslash as two, so that
    no name can pass for another.  Other names are written as they are.

    Examples
    --------
    >>> text_name("sp|P69905|HBA_HUMAN")
    'sp|P69905|HBA_HUMAN'
    >>> print(text_name("q\x1b[31mred\x07"), text_name("a\\x07"), text_name("\u202eabc"))
    q\x1b[31mred\x07 a\\x07 \u202eabc
    """
    if name.isprintable() and "\\" not in name:
        return name
    return "".join(_ESCAPES.get(c) or (c if c.isprintable() else _escape(c)) for c in name)


_ESCAPES = {"\\": "\\\\"}


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 \
        else f"\\U{code:08x}"


def blast_columns(columns: ColumnsLike | None = None) -> tuple[str, ...]:
    """The BLAST tabular columns that ``columns`` asks for, ``std`` expanded.

    Parameters
    ----------
    columns : str or sequence of str, optional
        BLAST ``-outfmt "6 ..."`` keywords, as a sequence or one string separated by
        white space.  ``std`` stands for the 12 standard columns
        (:data:`BLAST6_COLUMNS`) where it appears; other keywords are those of
        :data:`BLAST_KEYWORDS`.  Default (None, or no keyword at all, as BLAST's plain
        ``-outfmt 6``): the 12 standard columns.

    Returns
    -------
    tuple of str
        The keywords in output order; a keyword given twice is written twice.

    Raises
    ------
    ValueError
        A keyword is not one of ``std`` and :data:`BLAST_KEYWORDS`.

    Notes
    -----
    The keywords of :data:`swdask.options.SEQUENCE_KEYWORDS` (``positive``, ``ppos``,
    ``qseq``, ``sseq``, ``btop``) need the residues: the writer must be given the queries
    and the database searched (see :func:`blast6_lines`).  ``nident`` and ``gaps`` are
    counted from the CIGAR (its ``=`` columns, its ``I`` plus ``D`` columns).  BLAST+ has
    no ``cigar`` keyword (its tabular traceback is ``btop``); swdask adds one, as
    DIAMOND's tabular output does: the hits table's ``cigar`` unchanged.  ``sstrand`` is
    BLAST's: ``plus`` or ``minus`` for DNA, ``N/A`` for protein.

    Examples
    --------
    >>> blast_columns("std qlen slen cigar")[-4:]
    ('bitscore', 'qlen', 'slen', 'cigar')
    >>> blast_columns(["qseqid", "sseqid", "score"])
    ('qseqid', 'sseqid', 'score')
    >>> blast_columns() == blast_columns("std") == BLAST6_COLUMNS
    True
    >>> blast_columns("std staxids")
    Traceback (most recent call last):
    ...
    ValueError: unknown BLAST column 'staxids'; choose from: std, qseqid, ...
    """
    if columns is None:
        return BLAST6_COLUMNS
    if isinstance(columns, str):
        columns = columns.split()
    chosen = []
    for keyword in columns:
        if keyword == "std":
            chosen.extend(BLAST6_COLUMNS)
        elif keyword in BLAST_KEYWORDS:
            chosen.append(keyword)
        else:
            raise ValueError(f"unknown BLAST column {keyword!r}; choose from: std, "
                             f"{', '.join(BLAST_KEYWORDS)}")
    return tuple(chosen) or BLAST6_COLUMNS


def check_format(outfmt: str, columns: ColumnsLike | None = None, *,
                 header: bool = False) -> tuple[str, ...] | None:
    """Check an output format, its BLAST columns and header together, before any work is
    done; for BAM, that pysam can be imported.

    Returns
    -------
    tuple of str or None
        The BLAST columns to write (see :func:`blast_columns`) for ``"blast6"``; None
        for the other formats.

    Raises
    ------
    ValueError
        Unknown ``outfmt`` or column, or ``columns`` or ``header`` given with a format
        other than ``"blast6"``.
    MissingDependencyError
        ``"bam"`` without pysam installed (an ``ImportError``).

    Examples
    --------
    >>> check_format("blast6", "qseqid sseqid evalue")
    ('qseqid', 'sseqid', 'evalue')
    >>> check_format("sam") is None
    True
    >>> check_format("sam", "std")
    Traceback (most recent call last):
    ...
    ValueError: columns apply to the blast6 output format only, not to 'sam'
    >>> check_format("sam", header=True)
    Traceback (most recent call last):
    ...
    ValueError: a header applies to the blast6 output format only, not to 'sam'
    """
    check_outfmt(outfmt)
    if outfmt != "blast6":
        for what, given in (("columns apply", columns is not None), ("a header applies", header)):
            if given:
                raise ValueError(f"{what} to the blast6 output format only, not to {outfmt!r}")
        if outfmt == "bam":
            pysam_module()
        return None
    return blast_columns(columns)


def pysam_module() -> ModuleType:
    """pysam, imported; :class:`MissingDependencyError` in one line when it is not installed.

    BAM goes through pysam (htslib's writer) rather than a writer of our own; it is the
    optional extra ``swdask[bam]``.
    """
    try:
        import pysam
    except ImportError:
        raise MissingDependencyError("BAM output needs pysam: pip install 'swdask[bam]' (or "
                                     "write SAM: --outfmt sam, -o hits.sam)") from None
    return pysam


def sequence_columns(columns: Iterable[str] | None) -> tuple[str, ...]:
    """The keywords of ``columns`` that need the residues
    (:data:`swdask.options.SEQUENCE_KEYWORDS`), each once, in order.

    Examples
    --------
    >>> sequence_columns(("qseqid", "qseq", "ppos", "qseq")), sequence_columns(None)
    (('qseq', 'ppos'), ())
    """
    return tuple(dict.fromkeys(k for k in columns or () if k in SEQUENCE_KEYWORDS))


def hits_table(hits: dd.DataFrame | pd.DataFrame | pa.Table) -> pa.Table:
    """The hits as an Arrow table checked against :data:`swdask.parquet_schemas.HITS`.

    A lazy Dask DataFrame (what :func:`swdask.search` returns) is computed first.
    """
    if hasattr(hits, "__dask_graph__"):
        hits = hits.compute()
    return check_table(to_arrow(hits), HITS, where="hits")


def write_hits(hits: dd.DataFrame | pd.DataFrame | pa.Table, path: os.PathLike | str, *,
               outfmt: str | None = None, columns: ColumnsLike | None = None,
               header: bool = False, command_line: str | None = None,
               queries: SequencesLike | None = None,
               subjects: SequenceStore | SequencesLike | None = None,
               scoring: Scoring | None = None, force: bool = False) -> Path:
    """Write a hits table.

    Parameters
    ----------
    hits : dask.dataframe.DataFrame, pandas.DataFrame or pyarrow.Table
        Columns of :data:`swdask.parquet_schemas.HITS`; a Dask DataFrame (the lazy
        result of :func:`swdask.search`) is computed here.
    path : str or os.PathLike
        Output file.
    outfmt : {"parquet", "blast6", "sam", "bam"}, optional
        ``parquet``: the hits table, 0-based half-open coordinates.  ``blast6``: BLAST
        tabular (``-outfmt 6``), 1-based inclusive coordinates, one line per hit (see
        :func:`blast6_lines`).  ``sam``: SAM v1.6 with the queries as reads and the
        subjects as references, 1-based (see :func:`sam_lines`).  ``bam``: the same
        records as BAM, through pysam (``pip install 'swdask[bam]'``; see
        :func:`write_bam`).  Default: the format of ``path``'s extension, Parquet for an
        extension of none of them (see :func:`output_format`).
    columns : str or sequence of str, optional
        ``blast6`` only: BLAST keywords of the columns, ``std`` for the 12 standard ones
        (see :func:`blast_columns`).  Default: the 12 standard columns.
    header : bool, default False
        ``blast6`` only: a first line of the column keywords after a ``#``.
    command_line : str, optional
        ``sam``/``bam`` only (ignored otherwise): the command that produced the hits,
        written as ``CL`` of the ``@PG`` header line.
    queries : path, SequenceBatch, dict or list of str, optional
        The queries searched, as :func:`swdask.search` takes them: for the SEQ of DNA
        reads (``sam``/``bam``; default SEQ ``*``) and for the columns that show residues
        (``blast6``: ``qseq``, ``btop``, ``positive`` ...).
    subjects : path, SequenceStore, SequenceBatch or dict, optional
        ``blast6`` only: the database searched (a store or FASTA/FASTQ file, as
        :func:`swdask.search` took it), for the columns that show residues; only the
        records of the hits are read.
    scoring : Scoring, optional
        ``blast6`` only: the scoring of the search, for ``positive`` and ``ppos``.
        Default: BLAST's default for the hits' alphabet.
    force : bool, default False
        Replace an existing file (a file only, never a folder), once the new one is
        complete.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        Unknown ``outfmt`` or column, ``outfmt`` not the format of ``path``'s extension,
        ``columns`` or ``header`` with a format other than ``blast6``, columns that show
        residues without ``queries`` and ``subjects`` (raised before a lazy ``hits`` is
        computed), ``queries`` or ``subjects`` that are not those searched, or (``sam``,
        ``bam``) a name that SAM cannot hold or a CIGAR that disagrees with the
        coordinates.  Nothing is written.
    MissingDependencyError
        ``bam`` without pysam (before the hits are computed).
    OutputExistsError
        ``path`` exists and ``force`` is False, or it is not a file; raised before a lazy
        ``hits`` is computed.
    OutputError, InputNotFoundError
        The folder of ``path`` is not writable, or does not exist (also before the
        hits are computed).
    SchemaError
        ``hits`` lacks a column of the schema or has one of the wrong type.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> from importlib.resources import files
    >>> from swdask import search
    >>> data = files("swdask") / "data"
    >>> queries, database = data / "demo_queries.fasta", data / "demo_db.fasta.gz"
    >>> hits = search(queries, database, max_hits=2)
    >>> tmp = tempfile.mkdtemp()
    >>> out = write_hits(hits, os.path.join(tmp, "hits.tsv"), columns="std qlen slen cigar")
    >>> out.read_text().splitlines()[1].split("\\t")[8:]
    ['323', '348', '2.4', '23.5', '100', '1442', '1=1X1=1X1=1X1=2X1=1X2=1X2=4D1X1=1X1=1X1=']
    >>> out = write_hits(hits, os.path.join(tmp, "hits.sam"))
    >>> record = out.read_text().splitlines()[-1].split("\\t")
    >>> record[:6]
    ['sp|Q6GZN8|087L_FRG3G', '256', 'sp|P25100|ADA1D_HUMAN', '26', '255', '12S4=2X...1=1X2=538S']
    >>> record[6:]
    ['*', '0', '0', '*', '*', 'AS:i:70', 'NM:i:35', 'ZE:f:1.02e-01', 'ZB:f:31.6']
    >>> write_hits(hits, os.path.join(tmp, "more.tsv"), columns="std ppos")
    Traceback (most recent call last):
    ...
    ValueError: columns ppos show residues: give the queries and the database searched ...
    >>> out = write_hits(hits, os.path.join(tmp, "seqs.tsv"), header=True, queries=queries,
    ...                  subjects=database, columns="sseqid pident qcovhsp positive ppos btop")
    >>> print(*out.read_text().splitlines()[:3], sep="\\n")
    #sseqid	pident	qcovhsp	positive	ppos	btop
    sp|Q91G65|032R_IIV6	100.000	100	100	100.00	100
    sp|Q55DQ2|ABCGB_DICDI	46.154	22	16	61.54	1PT1LI1NS1SYNQ1IS2LI2-V-F-D-KEV1LV1RE1
    >>> sorted(os.listdir(tmp))  # the failed write left nothing behind
    ['hits.sam', 'hits.tsv', 'seqs.tsv']
    >>> shutil.rmtree(tmp)
    """
    outfmt = output_format(path, outfmt)
    fields = check_format(outfmt, columns, header=header)
    check_sequences(fields, queries, subjects)
    check_output(path, force=force)  # before a lazy table is computed
    table = hits_table(hits)
    with atomic_path(path, force=force) as tmp:
        if outfmt == "parquet":
            pq.write_table(for_file(table), tmp, compression="zstd")
        elif outfmt == "bam":
            write_bam(sam_lines(table, command_line=command_line, queries=queries), tmp)
        else:
            lines = hit_lines(table, outfmt, columns=fields, header=header,
                              command_line=command_line, queries=queries, subjects=subjects,
                              scoring=scoring)
            with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
                handle.writelines(lines)
    return Path(path)


def check_sequences(columns: Iterable[str] | None, queries: SequencesLike | None,
                    subjects: SequenceStore | SequencesLike | None) -> None:
    """Raise ValueError when ``columns`` show residues (:func:`sequence_columns`) and the
    queries or the database searched are not given."""
    needed = sequence_columns(columns)
    if needed and (queries is None or subjects is None):
        raise ValueError(f"columns {' '.join(needed)} show residues: give the queries and the "
                         "database searched (queries=, subjects=)")


def hit_lines(table: pa.Table, outfmt: str, *, columns: ColumnsLike | None = None,
              header: bool = False, command_line: str | None = None,
              queries: SequencesLike | None = None,
              subjects: SequenceStore | SequencesLike | None = None,
              scoring: Scoring | None = None) -> Iterator[str]:
    """The lines of a text output (``blast6`` or ``sam``) of a hits table: what
    :func:`write_hits` writes, for a caller that writes them elsewhere (the standard
    output).  Arguments as :func:`write_hits`'s.
    """
    if outfmt == "blast6":
        return blast6_lines(table, columns, header=header, queries=queries, subjects=subjects,
                            scoring=scoring)
    if outfmt == "sam":
        return sam_lines(table, command_line=command_line, queries=queries)
    raise ValueError(f"{outfmt} is not a text output format")


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _number(value, fmt):
    return "NA" if _missing(value) else format(value, fmt)


def blast_evalue(value: float) -> str:
    """An E-value as BLAST+'s tabular output writes it.

    Under 1e-180 ``0.0``; under 0.0009 ``%.2e``; under 0.1 ``%.3f``; under 1 ``%.2f``;
    under 10 ``%.1f``; else ``%.0f`` (NCBI C++ Toolkit, ``CBlastTabularInfo::SetScores``
    and ``CAlignFormatUtil::GetScoreString``).

    Examples
    --------
    >>> [blast_evalue(e) for e in (1e-200, 1.234e-50, 0.0123, 0.456, 3.21, 123.4)]
    ['0.0', '1.23e-50', '0.012', '0.46', '3.2', '123']
    """
    if value < 1e-180:
        return "0.0"
    for below, fmt in ((0.0009, ".2e"), (0.1, ".3f"), (1.0, ".2f"), (10.0, ".1f")):
        if value < below:
            return format(value, fmt)
    return format(value, ".0f")


def _minus(row) -> bool:
    return row["strand"] == "minus"


_CIGAR_RUN = re.compile(r"(\d+)([=XID])")


def _cigar_runs(cigar: str) -> list[tuple[int, str]]:
    """``[(length, op)]`` of a hits-table CIGAR; ValueError unless all of it parses."""
    runs = _CIGAR_RUN.findall(cigar)
    if "".join(n + op for n, op in runs) != cigar:
        raise ValueError(f"cigar {cigar!r} is not a run of =/X/I/D operations")
    return [(int(n), op) for n, op in runs]


def _cigar_count(cigar: str, ops: str) -> int:
    return sum(n for n, op in _cigar_runs(cigar) if op in ops)


#: How each BLAST keyword is written from one row of the hits table.
_BLAST_FIELDS = {
    "qseqid": lambda r: text_name(r["query"]),
    "sseqid": lambda r: text_name(r["subject"]),
    "pident": lambda r: f"{100 * r['identity']:.3f}",
    "length": lambda r: str(r["align_length"]),
    "mismatch": lambda r: str(r["mismatches"]),
    "gapopen": lambda r: str(r["gap_opens"]),
    "qstart": lambda r: str(r["query_start"] + 1),
    "qend": lambda r: str(r["query_end"]),
    # blastn writes a minus-strand hit's subject interval from its end: sstart > send.
    "sstart": lambda r: str(r["subject_end"] if _minus(r) else r["subject_start"] + 1),
    "send": lambda r: str(r["subject_start"] + 1 if _minus(r) else r["subject_end"]),
    "evalue": lambda r: "NA" if _missing(r["evalue"]) else blast_evalue(r["evalue"]),
    "bitscore": lambda r: _number(r["bitscore"], ".1f"),
    "score": lambda r: str(r["score"]),
    "nident": lambda r: str(_cigar_count(r["cigar"], "=")),
    "gaps": lambda r: str(_cigar_count(r["cigar"], "ID")),
    "qlen": lambda r: str(r["query_length"]),
    "slen": lambda r: str(r["subject_length"]),
    "cigar": lambda r: r["cigar"] or "*",
    "sstrand": lambda r: r["strand"] or "N/A",  # BLAST's N/A: protein has no strand
    "qcovs": lambda r: str(r["qcovs"]),
    "qcovhsp": lambda r: str(blast_coverage(r["query_end"] - r["query_start"], r["query_length"])),
    # Filled in by blast6_lines from the residues (aligned_rows):
    "positive": lambda r: str(r["positive"]),
    "ppos": lambda r: f"{100 * r['positive'] / r['align_length'] if r['align_length'] else 0:.2f}",
    "qseq": lambda r: r["qseq"] or "*",
    "sseq": lambda r: r["sseq"] or "*",
    "btop": lambda r: r["btop"] or "*",
}
assert tuple(_BLAST_FIELDS) == BLAST_KEYWORDS


def blast_coverage(covered: int, query_length: int) -> int:
    """A query coverage as BLAST+ writes ``qcovhsp`` and ``qcovs``: the percent of the
    query's residues covered, rounded to an integer, except that it is truncated from 99 on
    (only a query covered whole reads 100).

    NCBI C++ Toolkit: ``CBlastTabularInfo::x_SetQueryCovSeqalign`` (``qcovhsp``) and
    ``CBlastFormatUtil::InsertSubjectScores`` (``qcovs``): ``100.0 * covered / length``,
    plus 0.5 when under 99, then ``(int)``.

    Examples
    --------
    >>> [blast_coverage(n, 1000) for n in (1000, 999, 994, 985, 984, 3)]
    [100, 99, 99, 99, 98, 0]
    """
    percent = 100.0 * covered / query_length
    if percent < 99:
        percent += 0.5
    return int(percent)


def query_coverages(rows: Sequence[dict]) -> list[int]:
    """BLAST+'s ``qcovs`` of each row: the query coverage of all the rows of the same query
    and subject (both strands of a DNA subject count together, as in blastn), each query
    residue counted once (:func:`blast_coverage` of the union of the query intervals)."""
    intervals = {}
    for row in rows:
        key = (row["query_id"], row["subject_id"])
        intervals.setdefault(key, []).append((row["query_start"], row["query_end"]))
    covered = {}
    for key, spans in intervals.items():
        total, reach = 0, 0
        for start, end in sorted(spans):
            start = max(start, reach)
            if end > start:
                total += end - start
                reach = end
        covered[key] = total
    return [blast_coverage(covered[(row["query_id"], row["subject_id"])], row["query_length"])
            for row in rows]


_GAP = -1  # a gap in a row of aligned_rows


def aligned_rows(row: dict, query: np.ndarray,
                 subject: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two rows of a hit's alignment as BLAST shows them: residue codes, -1 for a gap.

    Parameters
    ----------
    row : dict
        A row of the hits table (``cigar``, coordinates, ``query_length``, ``strand``).
    query, subject : numpy.ndarray
        The whole query and subject as uint8 codes, as searched (the query as given).

    Returns
    -------
    tuple of numpy.ndarray
        int16 arrays of the alignment's length.  On the minus strand, as blastn shows
        it: the query as given and the subject reverse complemented (the hits table's
        CIGAR runs along the subject, over the query's reverse complement: both rows are
        reversed and complemented).

    Raises
    ------
    ValueError
        The CIGAR does not cover the hit's query and subject regions.
    """
    from .sequences.alphabet import reverse_complement

    runs = _cigar_runs(row["cigar"]) if row["cigar"] else []
    ops = np.repeat(np.frombuffer("".join(op for _, op in runs).encode(), np.uint8),
                    [n for n, _ in runs])
    minus = _minus(row)
    start, end, length = row["query_start"], row["query_end"], row["query_length"]
    if minus:
        query, start, end = reverse_complement(query), length - end, length - start
    rows = []
    for codes, skip, (a, b) in ((query, ord("D"), (start, end)),
                                (subject, ord("I"), (row["subject_start"], row["subject_end"]))):
        takes = ops != skip
        if int(takes.sum()) != b - a:
            raise ValueError(f"hit {row['query']!r} x {row['subject']!r}: cigar {row['cigar']!r} "
                             f"covers {int(takes.sum())} residues of a region of {b - a}")
        aligned = np.full(len(ops), _GAP, np.int16)
        aligned[takes] = codes[a:b]
        if minus:
            flipped = aligned[::-1].copy()
            flipped[flipped != _GAP] = reverse_complement(codes[a:b])
            aligned = flipped
        rows.append(aligned)
    return rows[0], rows[1]


def residue_columns(query_row: np.ndarray, subject_row: np.ndarray, alphabet: Alphabet,
                    matrix: np.ndarray) -> dict:
    """BLAST's residue columns of an alignment (:func:`aligned_rows`): ``qseq`` and ``sseq``
    (letters, ``-`` for a gap), ``btop`` and ``positive``.

    As BLAST+ counts them (``CBlastTabularInfo::SetFields``): a column of two equal
    letters is an identity in ``btop`` and a positive, whatever the matrix says of it
    (``X`` against ``X``, ``N`` against ``N``); another pair of residues is positive when
    the matrix scores it above 0.  BTOP: the length of each run of identities, and each
    other column as its query letter then its subject letter (``-`` for a gap).

    Examples
    --------
    >>> from swdask.scoring import Scoring
    >>> scoring = Scoring("BLOSUM50", gap_open=8, gap_extend=2)
    >>> q, s = np.array([0, 17, 7, 8, 6]), np.array([0, 17, -1, 8, 6])  # AWGHE / AW-HE
    >>> residue_columns(q, s, scoring.alphabet, scoring.matrix)
    {'qseq': 'AWGHE', 'sseq': 'AW-HE', 'btop': '2G-2', 'positive': 4}
    """
    letters = np.append(alphabet.letters_array, np.uint8(ord("-")))  # code -1: the last
    query_letters = letters[query_row].tobytes().decode("ascii")
    subject_letters = letters[subject_row].tobytes().decode("ascii")
    same = query_row == subject_row  # a gap never faces a gap
    pairs = (query_row != _GAP) & (subject_row != _GAP)
    positive = same | (pairs & (matrix[query_row.clip(0), subject_row.clip(0)] > 0))
    btop, last = [], 0
    for k in np.flatnonzero(~same):
        if k > last:
            btop.append(str(k - last))
        btop.append(query_letters[k] + subject_letters[k])
        last = k + 1
    if len(same) > last:
        btop.append(str(len(same) - last))
    return {"qseq": query_letters, "sseq": subject_letters, "btop": "".join(btop),
            "positive": int(positive.sum())}


def blast6_lines(table: pa.Table, columns: ColumnsLike | None = None, *, header: bool = False,
                 queries: SequencesLike | None = None,
                 subjects: SequenceStore | SequencesLike | None = None,
                 scoring: Scoring | None = None) -> Iterator[str]:
    """Lines of BLAST tabular output (``-outfmt 6``) for a hits table.

    Parameters
    ----------
    table : pyarrow.Table
        A hits table (see :func:`hits_table`).
    columns : str or sequence of str, optional
        BLAST keywords (see :func:`blast_columns`); default the 12 standard columns.
    header : bool, default False
        Start with one line of the keywords, tab-separated, after a ``#``
        (``#qseqid<TAB>sseqid...``): one line that names the columns, which readers of
        BLAST tabular that skip ``#`` lines (``-outfmt 7``'s comments) skip too.
    queries : path, SequenceBatch, dict or list of str, optional
        The queries searched (as :func:`swdask.search` took them): needed, with
        ``subjects``, by ``qseq``, ``sseq``, ``btop``, ``positive`` and ``ppos``.
    subjects : path, SequenceStore, SequenceBatch or dict, optional
        The database searched (a store or FASTA/FASTQ file); only the hits' records are
        read (:func:`swdask.sequences.store.fetch_sequences`).
    scoring : Scoring, optional
        The search's scoring, for ``positive`` and ``ppos``.  Default: BLAST's default
        for the hits' alphabet.

    Yields
    ------
    str
        The header line if asked for, then one tab-separated line per hit, each ending in
        a newline.

    Raises
    ------
    ValueError
        Columns that show residues without ``queries`` and ``subjects``, or a hit whose
        query or subject is not among them (by id, name and length).

    Notes
    -----
    ``qstart qend sstart send`` are 1-based inclusive (``query_start + 1``,
    ``query_end``, ...).  A DNA hit on the minus strand is written as blastn writes it:
    ``qstart < qend`` on the query as given, ``sstart > send`` (``sstart`` is
    ``subject_end``, ``send`` is ``subject_start + 1``).  ``pident`` is written with three
    decimals, ``evalue`` as BLAST+ writes it (:func:`blast_evalue`), ``bitscore`` as
    ``%.1f``; a null E-value or bit score is written ``NA``.  ``qseqid`` and ``sseqid`` are
    the names with unprintable characters escaped (:func:`text_name`).
    ``cigar`` is the hits table's CIGAR (``=``/``X``/``I``/``D``, ``I`` consuming the
    query and ``D`` the subject, no clips: it covers ``qstart..qend`` and
    ``sstart..send``); an alignment of no columns (possible with a minimum score of 0)
    has the CIGAR ``*`` (and ``qseq``, ``sseq``, ``btop`` ``*``).

    The columns BLAST+ defines are written as it writes them (NCBI C++ Toolkit,
    ``CBlastTabularInfo``): ``qcovhsp`` the percent of the query the hit covers,
    ``qcovs`` the percent covered by all the hits of the same query and subject (with
    one hit per subject and strand, they differ only where a DNA subject has hits on both
    strands), both integers as :func:`blast_coverage` rounds them; ``qseq`` and ``sseq``
    the aligned letters with ``-`` for gaps; ``btop`` BLAST's traceback operations;
    ``positive`` the columns of equal letters or of a positive matrix score, ``ppos``
    100 x positive / length with two decimals (:func:`residue_columns`).  On the minus
    strand ``qseq``, ``sseq`` and ``btop`` show the query as given and the subject's
    reverse complement, as blastn does.

    Examples
    --------
    >>> from swdask.parquet_schemas import HITS
    >>> row = {"query": "q1", "subject": "s1", "score": 26, "evalue": None, "bitscore": None,
    ...        "identity": 0.8, "align_length": 5, "mismatches": 0, "gap_opens": 1,
    ...        "query_start": 4, "query_end": 9, "subject_start": 1, "subject_end": 5,
    ...        "cigar": "2=1I2=", "query_length": 10, "subject_length": 7,
    ...        "query_id": 0, "subject_id": 0, "rank": 1}
    >>> table = pa.Table.from_pylist([row], schema=HITS)
    >>> next(blast6_lines(table, "qseqid sseqid qstart qend sstart send nident gaps cigar"))
    'q1\\ts1\\t5\\t9\\t2\\t5\\t4\\t1\\t2=1I2=\\n'
    >>> from swdask.scoring import Scoring
    >>> lines = blast6_lines(table, "qseq sseq btop positive ppos qcovhsp", header=True,
    ...                      queries={"q1": "HEAGAWGHEE"}, subjects={"s1": "PAWHEAE"},
    ...                      scoring=Scoring("BLOSUM50", gap_open=8, gap_extend=2))
    >>> print("".join(lines).replace("\\t", " "), end="")
    #qseq sseq btop positive ppos qcovhsp
    AWGHE AW-HE 2G-2 4 80.00 50
    """
    fields = blast_columns(columns)
    writers = [_BLAST_FIELDS[keyword] for keyword in fields]
    if header:
        yield "#" + "\t".join(fields) + "\n"
    rows = table.to_pylist()
    if "qcovs" in fields:
        for row, coverage in zip(rows, query_coverages(rows)):
            row["qcovs"] = coverage
    if sequence_columns(fields):
        check_sequences(fields, queries, subjects)
        alphabet = _hits_alphabet(rows, scoring)
        if scoring is None:
            from .scoring import Scoring

            scoring = Scoring.default(alphabet.name)
        query_codes = _residues(queries, rows, "query", alphabet)
        subject_codes = _residues(subjects, rows, "subject", alphabet)
        for row in rows:
            aligned = aligned_rows(row, query_codes[row["query_id"]],
                                   subject_codes[row["subject_id"]])
            row.update(residue_columns(*aligned, alphabet, scoring.matrix))
    for row in rows:
        yield "\t".join(write(row) for write in writers) + "\n"


def sam_cigar(cigar: str, query_start: int, query_end: int, query_length: int) -> str:
    """The SAM CIGAR of a hit, the query as the read: soft clips added at both ends.

    Parameters
    ----------
    cigar : str
        The hits table's CIGAR (``=``/``X``/``I``/``D`` over the aligned region).
    query_start, query_end : int
        The aligned query region, 0-based half-open.
    query_length : int
        Length of the whole query.

    Returns
    -------
    str
        ``{query_start}S`` + ``cigar`` + ``{query_length - query_end}S``, each clip left
        out when it is 0.  Its ``M/I/S/=/X`` lengths sum to ``query_length``.

    Raises
    ------
    ValueError
        ``cigar`` is not made of ``=``/``X``/``I``/``D`` runs, or the query residues it
        covers are not ``query_end - query_start``, or the region is not inside the query.

    Notes
    -----
    SAM's ``I`` consumes the read (here the query) and ``D`` the reference (the
    subject), as in the hits table, so the operations are kept as they are; ``=`` and
    ``X`` stay distinct (SAM v1.4 and later).  Gaps at the ends of a global or
    semiglobal alignment stay ``I``/``D`` next to the clips, so the CIGAR's reference
    length is always ``subject_end - subject_start``.

    Examples
    --------
    >>> sam_cigar("3=1X2=", 2, 8, 10)
    '2S3=1X2=2S'
    >>> sam_cigar("2=1I2=", 4, 9, 10)
    '4S2=1I2=1S'
    >>> sam_cigar("5=", 0, 5, 5)
    '5='
    >>> sam_cigar("2=1D2=", 0, 4, 6)
    '2=1D2=2S'
    """
    used = _cigar_count(cigar, "=XI")
    if not 0 <= query_start <= query_end <= query_length:
        raise ValueError(f"query region {query_start}..{query_end} is not inside a query of "
                         f"length {query_length}")
    if used != query_end - query_start:
        raise ValueError(f"cigar {cigar!r} covers {used} query residues, but query_end - "
                         f"query_start is {query_end - query_start}")
    head = f"{query_start}S" if query_start else ""
    tail = f"{query_length - query_end}S" if query_end < query_length else ""
    return head + cigar + tail


#: SAM v1.6 section 1.4: QNAME, and RNAME (= an @SQ SN) other than ``*``.
_SAM_QNAME = re.compile(r"[!-?A-~]{1,254}")
_SAM_RNAME = re.compile(r"[0-9A-Za-z!#$%&+./:;?@^_|~-][0-9A-Za-z!#$%&*+./:;=?@^_|~-]*")


def _sam_float(value, fmt):
    if value is None or not math.isfinite(value):
        return None
    return format(value, fmt)


def sam_lines(table: pa.Table, *, command_line: str | None = None,
              queries: SequencesLike | None = None) -> Iterator[str]:
    """Lines of SAM (v1.6) for a hits table: the queries as reads, the subjects as references.

    Parameters
    ----------
    table : pyarrow.Table
        A hits table (see :func:`hits_table`).
    command_line : str, optional
        Written as ``CL`` of the ``@PG`` line (tabs and line breaks become spaces).
    queries : path, SequenceBatch, dict or list of str, optional
        The queries searched (what :func:`swdask.search` took), matched to the hits by
        ``query_id`` and name: DNA reads then get their SEQ.

    Yields
    ------
    str
        The header, then one record per hit in table order, each ending in a newline.

    Raises
    ------
    ValueError
        A query name is not a valid SAM QNAME or a subject name not a valid reference
        name (SAM v1.6, section 1.4), one subject name stands for two database records,
        a CIGAR disagrees with the hit's coordinates, or ``queries`` are not the queries
        of the hits.

    Notes
    -----
    Names are escaped as in BLAST tabular (:func:`text_name`), and must then be valid
    SAM names: a control character in a query name is written as ``\\xHH``; a subject
    name with one cannot be a SAM reference name (no backslash allowed) and is refused.

    Header: ``@HD VN:1.6 SO:unsorted``; one ``@SQ SN:subject LN:subject_length`` per
    subject that has a hit, in database order (``subject_id``); ``@PG ID:swdask
    PN:swdask VN:version`` (and ``CL``).

    Record: QNAME the query; FLAG 0 for the hit of the smallest ``rank`` of its query
    (the primary line) and 256 (secondary) for the others, plus 16 for a hit on the
    minus strand (DNA: the read's reverse complement aligned); RNAME the subject; POS
    ``subject_start + 1``, the leftmost reference base whatever the strand; MAPQ 255
    (not available); CIGAR from :func:`sam_cigar`, along the reference (on the minus
    strand the hits table's CIGAR already is, and the soft clips of the query's ends
    trade places), so that its query length is ``query_length`` and its reference
    length ``subject_end - subject_start``; RNEXT ``*``, PNEXT 0, TLEN 0.  SEQ: with
    ``queries`` of DNA, the read on the primary and the unmapped line (reverse
    complemented under FLAG 16, as SAM defines it), ``*`` on secondary lines (as the
    spec allows, and minimap2 and BWA do); ``*`` otherwise (the hits table keeps no
    residues; protein has no SEQ in BAM).  QUAL ``*`` (stores keep no qualities).
    Tags: ``AS:i`` the score, ``NM:i`` the
    substitutions plus gap columns (``X`` + ``I`` + ``D`` of the CIGAR), and, where
    not null, ``ZE:f`` the E-value and ``ZB:f`` the bit score (``Z`` tags are the
    spec's namespace for local tags).

    A hit of no aligned columns (possible with a minimum score of 0) is no alignment
    and gets no record; a query whose hits are all such gets one unmapped record
    (FLAG 4, RNAME ``*``, POS 0, CIGAR ``*``).

    References
    ----------
    .. [1] The SAM/BAM Format Specification Working Group, "Sequence Alignment/Map
       Format Specification", v1.6, https://samtools.github.io/hts-specs/SAMv1.pdf

    Examples
    --------
    >>> from swdask.parquet_schemas import HITS
    >>> row = {"query": "q1", "subject": "s1", "score": 26, "evalue": 1.5e-3, "bitscore": 15.4,
    ...        "identity": 0.8, "align_length": 5, "mismatches": 0, "gap_opens": 1,
    ...        "query_start": 4, "query_end": 9, "subject_start": 1, "subject_end": 5,
    ...        "cigar": "2=1I2=", "query_length": 10, "subject_length": 7,
    ...        "query_id": 0, "subject_id": 0, "rank": 1}
    >>> table = pa.Table.from_pylist([row], schema=HITS)
    >>> for line in sam_lines(table, command_line="swdask search q.fa db -o out.sam"):
    ...     print(line.rstrip("\\n").replace("\\t", " "))
    @HD VN:1.6 SO:unsorted
    @SQ SN:s1 LN:7
    @PG ID:swdask PN:swdask VN:... CL:swdask search q.fa db -o out.sam
    q1 0 s1 2 255 4S2=1I2=1S * 0 0 * * AS:i:26 NM:i:1 ZE:f:1.50e-03 ZB:f:15.4
    """
    rows = table.to_pylist()
    reads = _sam_reads(queries, rows)
    for row in rows:  # escaped as in every text output; the rules below then apply
        row["query"], row["subject"] = text_name(row["query"]), text_name(row["subject"])
    primary = {}  # query name -> index of its primary record
    references = {}  # subject name -> (subject_id, subject_length)
    for k, row in enumerate(rows):
        if not _SAM_QNAME.fullmatch(row["query"]):
            raise ValueError(f"query name {row['query']!r} is not a valid SAM QNAME "
                             "(1 to 254 printable characters other than '@')")
        if not row["cigar"]:
            continue
        best = primary.get(row["query"])
        if best is None or row["rank"] < rows[best]["rank"]:
            primary[row["query"]] = k
        name = row["subject"]
        if not _SAM_RNAME.fullmatch(name):
            raise ValueError(f"subject name {name!r} is not a valid SAM reference name "
                             "(SAM v1.6, section 1.2.1)")
        seen = references.setdefault(name, (row["subject_id"], row["subject_length"]))
        if seen[0] != row["subject_id"]:
            raise ValueError(f"subject name {name!r} stands for two database records "
                             f"(subject_id {seen[0]} and {row['subject_id']}); SAM needs "
                             "one reference per name")

    yield f"@HD\tVN:{SAM_VERSION}\tSO:unsorted\n"
    for name, (_, length) in sorted(references.items(), key=lambda item: item[1][0]):
        yield f"@SQ\tSN:{name}\tLN:{length}\n"
    program = f"@PG\tID:swdask\tPN:swdask\tVN:{__version__}"
    if command_line:
        program += "\tCL:" + text_name(re.sub(r"[\t\r\n]", " ", command_line))
    yield program + "\n"

    unmapped = set()
    for k, row in enumerate(rows):
        query = row["query"]
        if not row["cigar"]:
            if query not in primary and query not in unmapped:
                unmapped.add(query)
                seq = _sam_seq(reads, row, False)
                yield f"{query}\t4\t*\t0\t0\t*\t*\t0\t0\t{seq}\t*\n"
            continue
        where = f"hit {query!r} x {row['subject']!r} (rank {row['rank']})"
        minus = _minus(row)
        start, end, length = row["query_start"], row["query_end"], row["query_length"]
        if minus:  # the CIGAR walks the read's reverse complement: its clips trade places
            start, end = length - end, length - start
        try:
            cigar = sam_cigar(row["cigar"], start, end, length)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        runs = _cigar_runs(row["cigar"])
        span = sum(n for n, op in runs if op in "=XD")
        if span != row["subject_end"] - row["subject_start"]:
            raise ValueError(f"{where}: cigar {row['cigar']!r} covers {span} subject residues, "
                             f"but subject_end - subject_start is "
                             f"{row['subject_end'] - row['subject_start']}")
        edits = sum(n for n, op in runs if op in "XID")
        flag = (0 if primary[query] == k else 256) | (16 if minus else 0)
        seq = "*" if flag & 256 else _sam_seq(reads, row, minus)
        fields = [query, str(flag), row["subject"], str(row["subject_start"] + 1), "255", cigar,
                  "*", "0", "0", seq, "*", f"AS:i:{row['score']}", f"NM:i:{edits}"]
        evalue = _sam_float(row["evalue"], ".2e")
        bitscore = _sam_float(row["bitscore"], ".1f")
        if evalue is not None:
            fields.append(f"ZE:f:{evalue}")
        if bitscore is not None:
            fields.append(f"ZB:f:{bitscore}")
        yield "\t".join(fields) + "\n"


def write_bam(lines: Iterable[str], path: os.PathLike | str) -> None:
    """Write SAM lines (:func:`sam_lines`: the header, then the records) as BAM, with pysam.

    Each record is parsed by htslib from its SAM text (``AlignedSegment.fromstring``),
    so it is the record a SAM-to-BAM conversion (``samtools view -b``) would give: every
    tag keeps its SAM type (``AS:i``/``NM:i`` integers, stored in the smallest integer
    type that holds them, as BAM does; ``ZE:f``/``ZB:f`` floats).  BAM's floats have 32
    bits: an E-value under about 1e-38 reads back from BAM as 0 (and from SAM as written);
    the hits table (Parquet) keeps every E-value in 64 bits.

    Parameters
    ----------
    lines : iterable of str
        SAM lines, each ending in a newline.
    path : str or os.PathLike
        The BAM file, replaced.

    Raises
    ------
    MissingDependencyError
        pysam is not installed.
    ValueError
        A line htslib cannot parse.
    """
    pysam = pysam_module()
    lines = iter(lines)
    header, first = [], None
    for line in lines:
        if not line.startswith("@"):
            first = line
            break
        header.append(line)
    bam_header = pysam.AlignmentHeader.from_text("".join(header))
    with pysam.AlignmentFile(str(path), "wb", header=bam_header) as out:
        for line in ([first] if first is not None else []):
            out.write(pysam.AlignedSegment.fromstring(line.rstrip("\n"), bam_header))
        for line in lines:
            out.write(pysam.AlignedSegment.fromstring(line.rstrip("\n"), bam_header))


def _sam_reads(queries, rows) -> dict | None:
    """``{query_id: (alphabet, codes)}`` of the DNA queries that have hits in ``rows``;
    None without queries or for protein (BAM keeps no protein SEQ)."""
    if queries is None or not rows or not rows[0]["strand"]:
        return None
    from .sequences.alphabet import DNA

    return {query_id: (DNA, codes)
            for query_id, codes in _residues(queries, rows, "query", DNA).items()}


def _hits_alphabet(rows, scoring):
    """The alphabet of the hits: the scoring's, else DNA where hits have a strand."""
    from .sequences.alphabet import DNA, PROTEIN

    if scoring is not None:
        return scoring.alphabet
    return DNA if any(row["strand"] for row in rows) else PROTEIN


def _residues(source, rows, key: str, alphabet) -> dict:
    """``{id: codes}`` of the ``key`` (``"query"`` or ``"subject"``) sequences of ``rows``,
    read from ``source`` and checked against the hits by id, name and length."""
    from .sequences.store import fetch_sequences

    # Leniently: the search already refused (or, asked to, mapped) unknown letters, so
    # this reads the codes it searched.
    batch = fetch_sequences(source, [row[f"{key}_id"] for row in rows], alphabet=alphabet,
                            map_unknown=True)
    where = {int(seq_id): k for k, seq_id in enumerate(batch.seq_id)}
    found = {}
    for row in rows:
        seq_id = row[f"{key}_id"]
        k = where.get(seq_id)
        if k is None or batch.names[k] != row[key] or batch.lengths[k] != row[f"{key}_length"]:
            given, whole = ("queries", "the queries that were searched") if key == "query" \
                else ("subjects", "the database that was searched")
            raise ValueError(f"{given}: {key} {row[key]!r} ({key}_id {seq_id}, "
                             f"{row[f'{key}_length']} residues) of the hits is not among them; "
                             f"give {whole}")
        found[seq_id] = batch.codes(k)
    return found


def _sam_seq(reads, row, minus: bool) -> str:
    """SEQ of a record: the read, reverse complemented on the minus strand; ``*`` without
    reads."""
    if reads is None:
        return "*"
    from .sequences.alphabet import reverse_complement

    alphabet, codes = reads[row["query_id"]]
    return alphabet.decode(reverse_complement(codes) if minus else codes)
