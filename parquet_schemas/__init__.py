"""Arrow schemas of every table swdask reads or writes.

One schema per table, with a version number stored in the Parquet key-value
metadata (``swdask.schema`` / ``swdask.schema_version``).  :func:`check_table`
is the one place that checks a table against its schema; it names the first
column that is missing or of the wrong type.
"""
from __future__ import annotations

import pyarrow as pa

from swdask.errors import SchemaError

SEQUENCES_VERSION = 1
HITS_VERSION = 1
SCORES_VERSION = 2

#: A sequence store's rows: one per input record, sorted by ``length`` then ``seq_id``.
SEQUENCES = pa.schema(
    [
        pa.field("seq_id", pa.int64(), nullable=False),  # 0-based record number over all inputs
        pa.field("name", pa.string(), nullable=False),  # header up to the first white space
        pa.field("description", pa.string(), nullable=False),  # rest of the header ("" if none)
        pa.field("length", pa.int32(), nullable=False),
        pa.field("residues", pa.list_(pa.uint8()), nullable=False),  # codes, see swdask.alphabet
    ],
    metadata={"swdask.schema": "sequences", "swdask.schema_version": str(SEQUENCES_VERSION)},
)

#: Alignment hits: one row per (query, subject) reported. Coordinates are 0-based half-open.
HITS = pa.schema(
    [
        pa.field("query", pa.string(), nullable=False),
        pa.field("subject", pa.string(), nullable=False),
        pa.field("score", pa.int32(), nullable=False),
        pa.field("evalue", pa.float64(), nullable=True),  # null until statistics are known
        pa.field("bitscore", pa.float64(), nullable=True),  # null until statistics are known
        pa.field("identity", pa.float64(), nullable=False),  # matches / alignment columns
        pa.field("align_length", pa.int32(), nullable=False),  # alignment columns
        pa.field("mismatches", pa.int32(), nullable=False),
        pa.field("gap_opens", pa.int32(), nullable=False),
        pa.field("query_start", pa.int32(), nullable=False),
        pa.field("query_end", pa.int32(), nullable=False),
        pa.field("subject_start", pa.int32(), nullable=False),
        pa.field("subject_end", pa.int32(), nullable=False),
        pa.field("cigar", pa.string(), nullable=False),  # =/X/I/D; I consumes query, D subject
        pa.field("query_length", pa.int32(), nullable=False),
        pa.field("subject_length", pa.int32(), nullable=False),
        pa.field("query_id", pa.int64(), nullable=False),  # seq_id of the query
        pa.field("subject_id", pa.int64(), nullable=False),  # seq_id in the database store
        pa.field("rank", pa.int32(), nullable=False),  # 1 = best hit of its query
    ],
    metadata={"swdask.schema": "hits", "swdask.schema_version": str(HITS_VERSION)},
)

#: A search's score table: one row per (query, subject) candidate that survives a
#: partition's top-k and score threshold (swdask.search's map_partitions output).  Small:
#: at most ``max_hits`` rows per query and partition, never an all-pairs matrix.
SCORES = pa.schema(
    [
        pa.field("query_id", pa.int64(), nullable=False),  # seq_id of the query
        pa.field("subject_id", pa.int64(), nullable=False),  # seq_id in the database store
        pa.field("score", pa.int32(), nullable=False),
        pa.field("query_end", pa.int32(), nullable=False),  # end cell of the best alignment,
        pa.field("subject_end", pa.int32(), nullable=False),  # exclusive (0-based half-open)
        pa.field("subject_length", pa.int32(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),  # store partition holding the subject
        pa.field("row", pa.int64(), nullable=False),  # the subject's row in that partition's file
    ],
    metadata={"swdask.schema": "scores", "swdask.schema_version": str(SCORES_VERSION)},
)

SCHEMAS = {"sequences": SEQUENCES, "hits": HITS, "scores": SCORES}

#: A long pair alignment (swdask.align_long, ``swdask align-long``): one row.  Coordinates
#: are 0-based half-open on the sequences as aligned (strand "-": on the subject's reverse
#: complement); the path's columns are null without traceback.
LONG_ALIGNMENTS_VERSION = 1
LONG_ALIGNMENTS = pa.schema(
    [
        pa.field("query", pa.string(), nullable=False),
        pa.field("subject", pa.string(), nullable=False),
        pa.field("strand", pa.string(), nullable=False),  # "+" or "-" (reverse complement)
        pa.field("score", pa.int32(), nullable=False),
        pa.field("query_start", pa.int64(), nullable=True),
        pa.field("query_end", pa.int64(), nullable=False),
        pa.field("subject_start", pa.int64(), nullable=True),
        pa.field("subject_end", pa.int64(), nullable=False),
        pa.field("query_length", pa.int64(), nullable=False),
        pa.field("subject_length", pa.int64(), nullable=False),
        pa.field("cigar", pa.string(), nullable=True),  # =/X/I/D; I consumes query, D subject
        pa.field("matches", pa.int64(), nullable=True),
        pa.field("mismatches", pa.int64(), nullable=True),
        pa.field("gap_opens", pa.int64(), nullable=True),
        pa.field("align_length", pa.int64(), nullable=True),
        pa.field("pident", pa.float64(), nullable=True),  # BLAST pident: 100 * matches / columns
        pa.field("cells", pa.int64(), nullable=False),  # matrix cells of the score pass(es)
        pa.field("score_seconds", pa.float64(), nullable=False),
        pa.field("traceback_seconds", pa.float64(), nullable=True),
        pa.field("device", pa.string(), nullable=False),  # kernels that ran tiles: cpu, gpu, cpu+gpu
        pa.field("tile_rows", pa.int32(), nullable=False),
        pa.field("tile_cols", pa.int32(), nullable=False),
    ],
    metadata={"swdask.schema": "long_alignments",
              "swdask.schema_version": str(LONG_ALIGNMENTS_VERSION)},
)
SCHEMAS["long_alignments"] = LONG_ALIGNMENTS


def check_table(table: pa.Table, schema: pa.Schema, *, where: str = "table") -> pa.Table:
    """Check that ``table`` has every column of ``schema`` with its type; return it cast.

    Extra columns are dropped; column order follows the schema.

    Raises
    ------
    SchemaError
        A column is missing, of another type, or null where the schema forbids it.
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

    Raises
    ------
    SchemaError
        A column is missing or of another type; the message names it.

    Examples
    --------
    >>> wanted = pa.schema([SEQUENCES.field("seq_id")])
    >>> check_schema(pa.schema([("seq_id", pa.int64()), ("other", pa.int8())]), wanted)
    >>> check_schema(pa.schema([("seq_id", pa.string())]), wanted, where="part-00000.parquet")
    Traceback (most recent call last):
    ...
    swdask.errors.SchemaError: part-00000.parquet: column 'seq_id' has type string, expected int64
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


ALLPAIRS_VERSION = 1

#: All-against-all alignment (swdask.all_pairs): one row per unordered pair of a set whose
#: reported alignment reaches the identity threshold.  ``query`` comes first in the store
#: (shorter, or as long with a smaller seq_id); no self pairs.  Coordinates 0-based half-open.
ALLPAIRS = pa.schema(
    [
        pa.field("query", pa.string(), nullable=False),
        pa.field("subject", pa.string(), nullable=False),
        pa.field("query_id", pa.int64(), nullable=False),  # seq_id in the store
        pa.field("subject_id", pa.int64(), nullable=False),
        pa.field("score", pa.int32(), nullable=False),
        pa.field("identity", pa.float64(), nullable=False),  # matches / align_length
        pa.field("matches", pa.int32(), nullable=False),  # identity columns (N/X never count)
        pa.field("align_length", pa.int32(), nullable=False),  # alignment columns
        pa.field("mismatches", pa.int32(), nullable=False),
        pa.field("gap_opens", pa.int32(), nullable=False),
        pa.field("query_start", pa.int32(), nullable=False),
        pa.field("query_end", pa.int32(), nullable=False),
        pa.field("subject_start", pa.int32(), nullable=False),
        pa.field("subject_end", pa.int32(), nullable=False),
        pa.field("query_length", pa.int32(), nullable=False),
        pa.field("subject_length", pa.int32(), nullable=False),
        pa.field("cigar", pa.string(), nullable=True),  # =/X/I/D; null unless asked for
    ],
    metadata={"swdask.schema": "allpairs", "swdask.schema_version": str(ALLPAIRS_VERSION)},
)
SCHEMAS["allpairs"] = ALLPAIRS


# -- pairwise statistical significance (swdask.significance) ----------------------------

SIGNIFICANCE_VERSION = 1

#: Pairwise statistical significance: one row per (query, subject) pair asked for.
#: ``mu``/``lambda`` are the Gumbel fitted (censored ML) to the scores of the query
#: against ``n_shuffles`` shuffles of the subject; null when no shuffle scored above the
#: censoring cutoff (all shuffles scored the same).  ``p_value`` is the fitted tail's
#: P(S >= score) above the cutoff, the shuffles' own mid-P at or below it (and when the
#: fit is null): see swdask.significance.
SIGNIFICANCE = pa.schema(
    [
        pa.field("query", pa.string(), nullable=False),
        pa.field("subject", pa.string(), nullable=False),
        pa.field("score", pa.int32(), nullable=False),  # local (Smith-Waterman) score
        pa.field("mu", pa.float64(), nullable=True),  # Gumbel location
        pa.field("lambda", pa.float64(), nullable=True),  # Gumbel scale 1/beta
        pa.field("p_value", pa.float64(), nullable=False),  # P(S >= score) under the fit
        pa.field("n_shuffles", pa.int32(), nullable=False),
        pa.field("seed", pa.int64(), nullable=False),
    ],
    metadata={"swdask.schema": "significance", "swdask.schema_version": str(SIGNIFICANCE_VERSION)},
)
SCHEMAS["significance"] = SIGNIFICANCE
