"""Arrow schemas of every table swdask reads or writes.

Installed as ``swdask.parquet_schemas``: ``pyproject.toml`` maps this top-level folder into
the package with setuptools' ``package-dir``.  It needs only pyarrow and imports nothing
from ``swdask``, so that anyone reading our Parquet files can check them with it alone.

One schema per table, with a version number stored in the Parquet key-value metadata
(``swdask.schema`` / ``swdask.schema_version``); :data:`SCHEMAS` lists every one by that
name.  :func:`check_table` is the one place that checks a table against its schema, and
:func:`check_schema` a file's schema before it is read; both name the first column that is
missing or of the wrong type.

Errors
------
A table that does not match raises this package's :class:`SchemaError`, a ``ValueError``.
swdask calls these checks through ``swdask.tables``, which raises
``swdask.errors.SchemaError`` instead, with the same message: that class is both a
``SwdaskError`` and a ``ValueError``, so that ``except SwdaskError`` around any swdask call
and the command line's one-line errors cover schema errors as they cover every other bad
input.  It cannot simply be this class: ``swdask.errors`` is imported by ``import swdask``
and the command line before pyarrow is (they load no heavy library), and this package
cannot subclass ``SwdaskError`` without importing swdask.  ``except ValueError`` catches
both.
"""
from __future__ import annotations

import pyarrow as pa

__all__ = [
    "ALLPAIRS", "ALLPAIRS_VERSION", "HITS", "HITS_VERSION", "LONG_ALIGNMENTS",
    "LONG_ALIGNMENTS_VERSION", "SCHEMAS", "SCORES", "SCORES_VERSION", "SEQUENCES",
    "SEQUENCES_VERSION", "SIGNIFICANCE", "SIGNIFICANCE_VERSION", "SchemaError", "check_schema",
    "check_table", "empty_table",
]


class SchemaError(ValueError):
    """A table or a file's schema does not match its schema here."""


SEQUENCES_VERSION = 1
SCORES_VERSION = 4
HITS_VERSION = 2
ALLPAIRS_VERSION = 1
SIGNIFICANCE_VERSION = 1
LONG_ALIGNMENTS_VERSION = 1

def _fields(type_: pa.DataType, *names: str, nullable: bool = False) -> list[pa.Field]:
    """Fields of one type and nullability, in the order given."""
    return [pa.field(name, type_, nullable=nullable) for name in names]


def _schema(name: str, version: int, fields: list[pa.Field]) -> pa.Schema:
    return pa.schema(fields, metadata={"swdask.schema": name, "swdask.schema_version": str(version)})


# Columns that several tables share, with one meaning everywhere.
_NAMES = _fields(pa.string(), "query", "subject")  # record names (header to the first space)
_IDS = _fields(pa.int64(), "query_id", "subject_id")  # seq_ids: the query's; the subject's
_SCORE = pa.field("score", pa.int32(), nullable=False)  # the raw alignment score
_PATH = ("align_length", "mismatches", "gap_opens")  # alignment columns, substitutions, gap runs
_COORDINATES = ("query_start", "query_end", "subject_start", "subject_end")  # 0-based half-open
_LENGTHS = ("query_length", "subject_length")  # full sequence lengths

#: A sequence store's rows: one per input record, sorted by ``length`` then ``seq_id``:
#: ``seq_id`` the 0-based record number over all inputs, ``name`` the header up to the
#: first white space and ``description`` the rest ("" if none), ``residues`` the codes
#: (see swdask.alphabet).
SEQUENCES = _schema("sequences", SEQUENCES_VERSION, [
    pa.field("seq_id", pa.int64(), nullable=False), *_fields(pa.string(), "name", "description"),
    pa.field("length", pa.int32(), nullable=False),
    pa.field("residues", pa.list_(pa.uint8()), nullable=False),
])

#: Alignment hits: one row per (query, subject, strand) reported.  ``evalue`` and
#: ``bitscore`` are null until statistics are known; ``identity`` is a fraction in [0, 1],
#: matches / alignment columns (BLAST tabular's ``pident`` is 100 x it); ``cigar`` uses
#: =/X/I/D, I consuming the query and D the subject; ``rank`` 1 is the best hit of its
#: query.  ``strand`` (DNA; null for protein) is BLAST's ``sstrand``:
#: ``plus``, or ``minus`` where the query's reverse complement aligned to the subject as
#: stored.  Coordinates count on the sequences as given whatever the strand (the query's
#: on the query, not on its reverse complement); ``cigar`` runs along the subject as
#: stored, so on the minus strand it walks the query's reverse complement (as SAM does).
HITS = _schema("hits", HITS_VERSION, [
    *_NAMES, _SCORE, *_fields(pa.float64(), "evalue", "bitscore", nullable=True),
    pa.field("identity", pa.float64(), nullable=False),
    *_fields(pa.int32(), *_PATH, *_COORDINATES), pa.field("strand", pa.string(), nullable=True),
    pa.field("cigar", pa.string(), nullable=False),
    *_fields(pa.int32(), *_LENGTHS), *_IDS, pa.field("rank", pa.int32(), nullable=False),
])

#: A search's score table: one row per (query, subject) candidate that survives a
#: partition's top-k and score threshold (swdask.search's map_partitions output).  Small:
#: at most ``max_hits`` rows per query and partition, never an all-pairs matrix.
#: ``query_end``/``subject_end`` are the best alignment's end cell, exclusive (0-based
#: half-open); ``minus`` is 1 where the query's reverse complement was scored (DNA), else 0,
#: and ``query_end`` then counts on that reverse complement; ``subject`` and ``residues``
#: are the subject's name and codes as stored, which the traceback aligns.
SCORES = _schema("scores", SCORES_VERSION, [
    *_IDS, _SCORE, *_fields(pa.int32(), "query_end", "subject_end", "subject_length", "minus"),
    pa.field("subject", pa.string(), nullable=False),
    pa.field("residues", pa.large_binary(), nullable=False),
])

#: All-against-all alignment (swdask.all_pairs): one row per unordered pair of a set whose
#: reported alignment reaches the identity threshold.  ``query`` comes first in the store
#: (shorter, or as long with a smaller seq_id); no self pairs.  ``identity`` is a fraction
#: in [0, 1], matches / align_length, ``matches`` the identity columns (N/X never count);
#: ``cigar`` (as in HITS) is null unless asked for.
ALLPAIRS = _schema("allpairs", ALLPAIRS_VERSION, [
    *_NAMES, *_IDS, _SCORE, pa.field("identity", pa.float64(), nullable=False),
    *_fields(pa.int32(), "matches", *_PATH, *_COORDINATES, *_LENGTHS),
    pa.field("cigar", pa.string(), nullable=True),
])

#: Pairwise statistical significance: one row per (query, subject) pair asked for.
#: ``score`` is the local (Smith-Waterman) score; ``mu``/``lambda`` are the Gumbel's
#: location and scale 1/beta, fitted (censored ML) to the scores of the query against
#: ``n_shuffles`` shuffles of the subject; null when no shuffle scored above the
#: censoring cutoff (all shuffles scored the same).  ``p_value`` is the fitted tail's
#: P(S >= score) above the cutoff, the shuffles' own mid-P at or below it (and when the
#: fit is null): see swdask.significance.
SIGNIFICANCE = _schema("significance", SIGNIFICANCE_VERSION, [
    *_NAMES, _SCORE, *_fields(pa.float64(), "mu", "lambda", nullable=True),
    pa.field("p_value", pa.float64(), nullable=False),
    pa.field("n_shuffles", pa.int32(), nullable=False), pa.field("seed", pa.int64(), nullable=False),
])

#: A long pair alignment (swdask.align_long, ``swdask align-long``): one row.  Coordinates
#: are 0-based half-open on the sequences as aligned (strand "+", or "-": on the subject's
#: reverse complement); the path's columns (the starts, ``cigar`` as in HITS, the counts
#: and ``pident``, a percent: BLAST's 100 * matches / columns) are null without traceback.  ``cells``
#: counts the matrix cells of the score pass(es); ``device`` names the kernels that ran
#: tiles: cpu, gpu or cpu+gpu.
LONG_ALIGNMENTS = _schema("long_alignments", LONG_ALIGNMENTS_VERSION, [
    *_NAMES, pa.field("strand", pa.string(), nullable=False), _SCORE,
    pa.field("query_start", pa.int64(), nullable=True),
    pa.field("query_end", pa.int64(), nullable=False),
    pa.field("subject_start", pa.int64(), nullable=True),
    pa.field("subject_end", pa.int64(), nullable=False),
    *_fields(pa.int64(), *_LENGTHS), pa.field("cigar", pa.string(), nullable=True),
    *_fields(pa.int64(), "matches", "mismatches", "gap_opens", "align_length", nullable=True),
    pa.field("pident", pa.float64(), nullable=True), pa.field("cells", pa.int64(), nullable=False),
    pa.field("score_seconds", pa.float64(), nullable=False),
    pa.field("traceback_seconds", pa.float64(), nullable=True),
    pa.field("device", pa.string(), nullable=False), *_fields(pa.int32(), "tile_rows", "tile_cols"),
])

#: Every schema above, by its ``swdask.schema`` name.
SCHEMAS = {schema.metadata[b"swdask.schema"].decode(): schema
           for schema in (SEQUENCES, HITS, SCORES, LONG_ALIGNMENTS, ALLPAIRS, SIGNIFICANCE)}


def check_table(table: pa.Table, schema: pa.Schema, *, where: str = "table") -> pa.Table:
    """Check that ``table`` has every column of ``schema`` with its type; return it cast.

    Extra columns are dropped; column order follows the schema.

    Parameters
    ----------
    table : pyarrow.Table
    schema : pyarrow.Schema
        One of :data:`SCHEMAS`, or a selection of its fields.
    where : str, default "table"
        What the table is (a file name, a table's name): the start of every message.

    Returns
    -------
    pyarrow.Table
        The columns of ``schema``, cast to its types, with its metadata.

    Raises
    ------
    SchemaError
        A column is missing, of a type that does not cast, or null where the schema
        forbids it.

    Examples
    --------
    >>> table = pa.table({"length": pa.array([3], pa.int64()), "seq_id": [7], "other": [0]})
    >>> check_table(table, pa.schema([SEQUENCES.field("seq_id"), SEQUENCES.field("length")]))
    pyarrow.Table
    seq_id: int64 not null
    length: int32 not null
    ----
    seq_id: [[7]]
    length: [[3]]
    """
    columns = []
    for field in schema:
        if field.name not in table.column_names:
            raise SchemaError(f"{where}: column {field.name!r} is missing (expected {field.type})")
        column = table.column(field.name)
        if column.type != field.type:
            try:
                column = column.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise SchemaError(
                    f"{where}: column {field.name!r} has type {column.type}, expected {field.type}"
                ) from None
        if not field.nullable and column.null_count:
            raise SchemaError(f"{where}: column {field.name!r} has nulls, which its schema forbids")
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def check_schema(schema: pa.Schema, expected: pa.Schema, *, where: str = "table") -> None:
    """Check, before reading, that a file's ``schema`` has every column of ``expected``
    with exactly its type (extra columns are allowed).

    Parameters
    ----------
    schema : pyarrow.Schema
        The file's schema (``pyarrow.parquet.read_schema``).
    expected : pyarrow.Schema
        One of :data:`SCHEMAS`, or a selection of its fields.
    where : str, default "table"
        The file's name: the start of every message.

    Raises
    ------
    SchemaError
        A column is missing or of another type; the message names it.

    Examples
    --------
    >>> wanted = pa.schema([SEQUENCES.field("seq_id")])
    >>> check_schema(pa.schema([("seq_id", pa.int64()), ("other", pa.int8())]), wanted)
    >>> try:
    ...     check_schema(pa.schema([("seq_id", pa.string())]), wanted, where="part-00000.parquet")
    ... except SchemaError as exc:
    ...     print(exc)
    part-00000.parquet: column 'seq_id' has type string, expected int64
    """
    for field in expected:
        index = schema.get_field_index(field.name)
        if index < 0:
            raise SchemaError(f"{where}: column {field.name!r} is missing (expected {field.type})")
        found = schema.field(index).type
        if found != field.type:
            raise SchemaError(f"{where}: column {field.name!r} has type {found}, expected {field.type}")


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table with no rows and the given schema."""
    return schema.empty_table()
