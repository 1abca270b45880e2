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
choice, not the files': Parquet readers elsewhere pick their own.  It is every table's:
integers in pandas' nullable dtypes of the schema's width (``Int32``, ``Int64``: a null stays
``pd.NA``), strings ``string`` (``pd.StringDtype()``), floats NumPy's ``float64`` (a null is
NaN, which pandas counts as missing), lists Arrow's (:func:`pandas_dtype`).  Floats are not
pandas' nullable ``Float64``: pandas formats a ``Float64`` column in fixed-point notation,
so an E-value of 1.6e-73 showed as ``0.0`` in Jupyter, while NumPy's ``float64`` shows
``1.600000e-73``.

The result files swdask writes (hits, all-pairs, significance and long alignments) carry
the same policy in their pandas metadata (:func:`for_file`), so that ``pandas.read_parquet``,
``dask.dataframe.read_parquet`` and pyarrow's ``to_pandas`` give a file's table the dtypes
the same table has in memory.  The search's internal score table is the one table left in
NumPy dtypes: its task builds it from NumPy arrays, and it is never handed out.

A job's lazy result (a Dask DataFrame) comes on Dask's configured DataFrame backend
(:func:`on_backend`): pandas partitions by default, cudf partitions on GPU memory under
``dask.config.set({"dataframe.backend": "cudf"})``; :func:`to_arrow` takes either back to
Arrow for the writers.  The tasks themselves build pandas tables: the score tables are
small (the GPU keeps each query's best on the device and ships back only those), and
cudf would cost more per task than it saves (docs/search.md, "Score tables").
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from . import parquet_schemas
from .errors import MissingDependencyError, SchemaError, SwdaskError

if TYPE_CHECKING:
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd

__all__ = ["DATAFRAME_BACKENDS", "check_schema", "check_table", "dataframe_backend", "for_file",
           "numpy_dtype", "numpy_of", "on_backend", "pandas_dtype", "to_arrow", "to_pandas"]

#: The values of Dask's ``dataframe.backend`` setting a job's result can be computed in.
DATAFRAME_BACKENDS = ("pandas", "cudf")


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


def numpy_dtype(arrow_type: pa.DataType) -> np.dtype:
    """The NumPy dtype of a fixed-width Arrow number (integers, floats, booleans).

    Not pyarrow's ``DataType.to_pandas_dtype``: some pyarrow versions import pandas for it,
    which took 0.5 to 0.75 s of a GPU search's start in the CLI (it ran on the main thread
    while the GPU's own start imported Numba beside it; H100 host, 2026-11-27).

    Raises
    ------
    TypeError
        Any other type.

    Examples
    --------
    >>> numpy_dtype(pa.int32()), numpy_dtype(pa.uint8()), numpy_dtype(pa.float64())
    (dtype('int32'), dtype('uint8'), dtype('float64'))
    """
    import numpy as np

    if pa.types.is_boolean(arrow_type):
        return np.dtype(bool)
    if pa.types.is_integer(arrow_type):
        sign = "u" if pa.types.is_unsigned_integer(arrow_type) else ""
        return np.dtype(f"{sign}int{arrow_type.bit_width}")
    if pa.types.is_floating(arrow_type):
        return np.dtype(f"float{arrow_type.bit_width}")
    raise TypeError(f"{arrow_type}: not a fixed-width number type")


def numpy_of(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A fixed-width Arrow number array without nulls as a read-only NumPy array: a view
    of its buffer (one chunk) or a copy (several).

    The one way swdask's readers turn Arrow columns into NumPy.  pyarrow's ``to_numpy``
    goes through its pandas conversion, which imports pandas (0.25-0.3 s alone, 0.66 s on
    a GPU search's read thread while Numba's CUDA target loaded beside it: H100 host,
    2026-11-27).

    Raises
    ------
    TypeError
        Not a fixed-width number type (see :func:`numpy_dtype`).
    ValueError
        The array holds nulls.

    Examples
    --------
    >>> numpy_of(pa.chunked_array([[1, 2], [3]], pa.int32()))
    array([1, 2, 3], dtype=int32)
    """
    import numpy as np

    if isinstance(array, pa.ChunkedArray):
        dtype = numpy_dtype(array.type)
        if array.num_chunks == 1:
            return numpy_of(array.chunk(0))
        return np.concatenate([np.empty(0, dtype)] + [numpy_of(c) for c in array.chunks])
    dtype = numpy_dtype(array.type)
    if array.null_count:
        raise ValueError(f"a {array.type} array with {array.null_count:,} nulls")
    if len(array) == 0:
        return np.empty(0, dtype)
    data = array.buffers()[1]
    if dtype.kind == "b":  # one bit a value
        bits = np.frombuffer(data, np.uint8)
        return np.unpackbits(bits, bitorder="little")[array.offset:array.offset + len(array)] \
            .astype(bool)
    return np.frombuffer(data, dtype, count=len(array), offset=array.offset * dtype.itemsize)


def pandas_dtype(arrow_type: pa.DataType) -> pd.api.extensions.ExtensionDtype | np.dtype | None:
    """The pandas dtype of an Arrow type in every table swdask hands out.

    ``int32`` and ``int64`` become pandas' nullable ``Int32`` and ``Int64``; ``float64``
    NumPy's ``float64`` (nulls as NaN); strings ``string`` (``pandas.StringDtype()``,
    missing values ``pd.NA``); lists and binaries (a sequence store's residues, a score
    table's) stay Arrow arrays (``pandas.ArrowDtype``), which pandas reads without a copy
    and without an object array of arrays.

    Parameters
    ----------
    arrow_type : pyarrow.DataType

    Returns
    -------
    pandas.api.extensions.ExtensionDtype, numpy.dtype or None
        None for a type none of swdask's schemas uses: pyarrow's own conversion.

    Notes
    -----
    Not ``Float64``: pandas (3.1) formats a nullable ``Float64`` column without scientific
    notation, so that 1.6e-73 reads ``0.0`` in ``repr(frame)``, ``to_string``
    and Jupyter; NumPy's ``float64`` shows it as ``1.600000e-73``.  A null float is NaN,
    which pandas' ``isna`` counts as missing and pyarrow writes back as a null.

    Examples
    --------
    >>> pandas_dtype(pa.int32()), pandas_dtype(pa.float64()), pandas_dtype(pa.string())
    (Int32Dtype(), dtype('float64'), <StringDtype(na_value=<NA>)>)
    >>> pandas_dtype(pa.list_(pa.uint8()))
    list<item: uint8>[pyarrow]
    """
    import numpy as np
    import pandas as pd

    if pa.types.is_list(arrow_type) or pa.types.is_large_binary(arrow_type):
        return pd.ArrowDtype(arrow_type)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pd.StringDtype()
    return {pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype(),
            pa.float64(): np.dtype("float64")}.get(arrow_type)


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
     'identity': dtype('float64')}
    >>> to_pandas(pa.table({"evalue": [1.6e-73, None]}))
           evalue
    0  1.600000e-73
    1           NaN
    """
    import pandas as pd

    def extension(arrow_type):
        # types_mapper takes extension dtypes only; pyarrow's own conversion already gives
        # NumPy's float64 (nulls as NaN) for float64.
        dtype = pandas_dtype(arrow_type)
        return dtype if isinstance(dtype, pd.api.extensions.ExtensionDtype) else None

    return table.to_pandas(types_mapper=extension)


def for_file(table: pa.Table) -> pa.Table:
    """``table`` with pandas metadata of swdask's dtypes, for writing to a Parquet file.

    ``pandas.read_parquet``, ``dask.dataframe.read_parquet`` and ``pyarrow``'s
    ``to_pandas`` read a file's pandas metadata to choose each column's dtype; with this,
    they give the file's table the dtypes :func:`to_pandas` gives it in memory (without it,
    an integer column with a null would come back as ``float64`` and strings as ``str``).
    The schema's own metadata (``swdask.schema``, ``swdask.schema_version``) is kept.

    Parameters
    ----------
    table : pyarrow.Table
        A table of one of swdask's schemas (checked).

    Returns
    -------
    pyarrow.Table
        The same columns; the schema metadata gains the key ``pandas``.

    Examples
    --------
    >>> import io, pandas as pd, pyarrow.parquet as pq
    >>> from swdask.parquet_schemas import SIGNIFICANCE
    >>> table = check_table(pa.table({"query": ["q"], "subject": ["s"], "score": [40],
    ...     "mu": [None], "lambda": [None], "p_value": [1.6e-73], "n_shuffles": [100],
    ...     "seed": [7]}), SIGNIFICANCE)
    >>> buffer = io.BytesIO()
    >>> pq.write_table(for_file(table), buffer)
    >>> pd.read_parquet(buffer).dtypes.equals(to_pandas(table).dtypes)
    True
    """
    frame = to_pandas(table.schema.empty_table())
    metadata = dict(table.schema.metadata or {})
    metadata[b"pandas"] = pa.Schema.from_pandas(frame, preserve_index=False).metadata[b"pandas"]
    return table.replace_schema_metadata(metadata)


def dataframe_backend() -> str:
    """Dask's configured DataFrame backend (``dataframe.backend``): ``"pandas"`` (the
    default) or ``"cudf"``.

    Raises
    ------
    swdask.errors.SwdaskError
        If it names another backend.
    """
    import dask

    name = dask.config.get("dataframe.backend", None) or "pandas"
    if name not in DATAFRAME_BACKENDS:
        raise SwdaskError(f"dataframe.backend is {name!r}: swdask's results come as pandas "
                          "or cudf DataFrames")
    return name


def on_backend(frame: dd.DataFrame) -> dd.DataFrame:
    """A job's lazy result on Dask's configured DataFrame backend: ``frame`` itself under
    pandas, its partitions converted to cudf on the workers under ``"cudf"`` (the
    columns and their values unchanged; pandas' nullable integers become cudf's columns
    with nulls).

    Raises
    ------
    swdask.errors.MissingDependencyError
        Under ``"cudf"`` where dask-cudf does not import.
    """
    if dataframe_backend() == "pandas":
        return frame
    try:
        import dask_cudf  # noqa: F401  (registers Dask's cudf backend)
    except ImportError as exc:
        raise MissingDependencyError(
            f"dataframe.backend is 'cudf' but dask-cudf does not import ({exc}): "
            "pip install 'swdask[gpu]', or compute the result with pandas") from None
    return frame.to_backend("cudf")


def to_arrow(frame: pd.DataFrame | pa.Table | object) -> pa.Table:
    """A computed result, a pandas or a cudf DataFrame (or an Arrow table), as an Arrow
    table without its index.

    Examples
    --------
    >>> import pandas as pd
    >>> to_arrow(pd.DataFrame({"score": [3, 1]}, index=[5, 6])).to_pydict()
    {'score': [3, 1]}
    """
    if isinstance(frame, pa.Table):
        return frame
    if type(frame).__module__.startswith("cudf"):  # from GPU memory, no pandas copy
        return frame.to_arrow(preserve_index=False)
    return pa.Table.from_pandas(frame, preserve_index=False)
