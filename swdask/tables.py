"""Tables as swdask hands them out: checked against their schemas, and read into pandas
with one dtype policy.

Every table swdask reads or writes has its Arrow schema in :mod:`swdask.parquet_schemas`,
which knows nothing of swdask or pandas.  This module is swdask's side of those schemas,
and swdask's modules check and convert their tables only through it:

- :func:`check_table` and :func:`check_schema` are the schema package's checks, raising
  :class:`swdask.errors.SchemaError` (a ``SwdaskError`` and a ``ValueError``, as every
  swdask error is) instead of the schema package's own ``SchemaError``, with the same
  message (why there are two classes: the docstring of :mod:`swdask.parquet_schemas`);
- :func:`to_pandas` is the one way a table becomes a pandas DataFrame: the hits, all-pairs
  and significance tables, a sequence store's partitions, and the ``meta`` of every Dask
  graph built from them.

The dtype policy lives here and not with the schemas because it is the Python API's
choice, not the files': Parquet readers elsewhere pick their own.  It is the hits table's,
now every table's: pandas' nullable dtypes, so that a null stays a null (``evalue``,
``mu`` ...), an integer column keeps its schema's width, and one Arrow type gives one pandas
dtype in every table (:func:`pandas_dtype`).  The search's internal score table is the one
table left in NumPy dtypes: its task builds it from NumPy arrays, and it is never handed out.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from . import parquet_schemas
from .errors import SchemaError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["check_schema", "check_table", "pandas_dtype", "to_pandas"]


def check_table(table: pa.Table, schema: pa.Schema, *, where: str = "table") -> pa.Table:
    """Check ``table`` against ``schema`` and return it cast, as
    :func:`swdask.parquet_schemas.check_table` does.

    Parameters
    ----------
    table : pyarrow.Table
    schema : pyarrow.Schema
    where : str, default "table"
        What the table is (a file name, a table's name): the start of every message.

    Returns
    -------
    pyarrow.Table
        The columns of ``schema``, in its order, cast to its types.

    Raises
    ------
    swdask.errors.SchemaError
        A column is missing, of a type that does not cast, or null where the schema
        forbids it; the message names it.

    Examples
    --------
    >>> from swdask.parquet_schemas import HITS
    >>> check_table(pa.table({"query": ["q"]}), HITS, where="hits.parquet")
    Traceback (most recent call last):
    ...
    swdask.errors.SchemaError: hits.parquet: column 'subject' is missing (expected string)
    """
    try:
        return parquet_schemas.check_table(table, schema, where=where)
    except parquet_schemas.SchemaError as exc:
        raise SchemaError(*exc.args) from None


def check_schema(schema: pa.Schema, expected: pa.Schema, *, where: str = "table") -> None:
    """Check a file's ``schema`` before reading it, as
    :func:`swdask.parquet_schemas.check_schema` does.

    Parameters
    ----------
    schema : pyarrow.Schema
        The file's schema.
    expected : pyarrow.Schema
        The columns it must have, each with exactly its type (extra columns are allowed).
    where : str, default "table"
        The file's name: the start of every message.

    Raises
    ------
    swdask.errors.SchemaError
        A column is missing or of another type; the message names it.
    """
    try:
        parquet_schemas.check_schema(schema, expected, where=where)
    except parquet_schemas.SchemaError as exc:
        raise SchemaError(*exc.args) from None


def pandas_dtype(arrow_type: pa.DataType) -> pd.api.extensions.ExtensionDtype | None:
    """The pandas dtype of an Arrow type in every table swdask hands out.

    ``int32``, ``int64`` and ``float64`` become pandas' nullable ``Int32``, ``Int64`` and
    ``Float64``; strings ``string`` (``pandas.StringDtype()``, missing values ``pd.NA``);
    lists (a sequence store's residues) stay Arrow arrays (``pandas.ArrowDtype``), which
    pandas reads without a copy and without an object array of arrays.

    Parameters
    ----------
    arrow_type : pyarrow.DataType

    Returns
    -------
    pandas.api.extensions.ExtensionDtype or None
        None for a type none of swdask's schemas uses: pyarrow's own conversion.

    Examples
    --------
    >>> pandas_dtype(pa.int32()), pandas_dtype(pa.float64()), pandas_dtype(pa.string())
    (Int32Dtype(), Float64Dtype(), <StringDtype(na_value=<NA>)>)
    >>> pandas_dtype(pa.list_(pa.uint8()))
    list<item: uint8>[pyarrow]
    """
    import pandas as pd

    if pa.types.is_list(arrow_type):
        return pd.ArrowDtype(arrow_type)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pd.StringDtype()
    return {pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype(),
            pa.float64(): pd.Float64Dtype()}.get(arrow_type)


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """``table`` as a pandas DataFrame, each column of the dtype :func:`pandas_dtype` gives.

    Parameters
    ----------
    table : pyarrow.Table

    Returns
    -------
    pandas.DataFrame
        A default (range) index.

    Examples
    --------
    >>> from swdask.parquet_schemas import ALLPAIRS
    >>> to_pandas(ALLPAIRS.empty_table()).dtypes.iloc[:6].to_dict()
    {'query': <StringDtype(na_value=<NA>)>, 'subject': <StringDtype(na_value=<NA>)>,
     'query_id': Int64Dtype(), 'subject_id': Int64Dtype(), 'score': Int32Dtype(),
     'identity': Float64Dtype()}
    """
    return table.to_pandas(types_mapper=pandas_dtype)
