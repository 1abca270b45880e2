"""The schemas (swdask.parquet_schemas) and swdask's side of them (swdask.tables): every
schema listed, the schema package standing alone, schema errors as swdask errors, and one
pandas dtype per Arrow type in every table."""
import ast
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import swdask
from swdask import parquet_schemas
from swdask.errors import SchemaError, SwdaskError
from swdask.tables import check_schema, check_table, numpy_dtype, numpy_of, pandas_dtype, to_pandas
from tests.helpers import SPROT_DB

#: The pandas dtype of each Arrow type the schemas use, written out.
DTYPES = {
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.float64(): np.dtype("float64"),  # not Float64, which shows 1.6e-73 as 0.0
    pa.string(): pd.StringDtype(),  # pandas' "string" with pd.NA, not the default "str"
    pa.list_(pa.uint8()): pd.ArrowDtype(pa.list_(pa.uint8())),
    pa.large_binary(): pd.ArrowDtype(pa.large_binary()),  # a score table's residues
}


def test_schemas_lists_every_schema_by_its_name():
    defined = {name: value for name, value in vars(parquet_schemas).items()
               if isinstance(value, pa.Schema)}
    assert sorted(defined) == ["ALLPAIRS", "HITS", "LONG_ALIGNMENTS", "SCORES", "SEQUENCES",
                               "SIGNIFICANCE"]
    assert sorted(parquet_schemas.SCHEMAS) == ["allpairs", "hits", "long_alignments", "scores",
                                               "sequences", "significance"]
    for name, schema in defined.items():
        key = schema.metadata[b"swdask.schema"].decode()
        assert parquet_schemas.SCHEMAS[key] is schema, name
        version = getattr(parquet_schemas, f"{name}_VERSION")
        assert schema.metadata[b"swdask.schema_version"] == str(version).encode(), name


def test_schema_package_imports_only_pyarrow():
    """It stands alone: no import of swdask (nor a relative one), at the top or in a function."""
    tree = ast.parse(Path(parquet_schemas.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {"." * node.level + (node.module or "") for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    assert imported == {"__future__", "pyarrow"}


def test_schema_errors_are_swdask_errors_with_the_schema_packages_message():
    table = pa.table({"seq_id": pa.array(["7"])})
    wanted = pa.schema([parquet_schemas.SEQUENCES.field("seq_id")])
    message = "part-1.parquet: column 'seq_id' has type string, expected int64"
    # The schema package alone: its own class, a ValueError only.
    with pytest.raises(parquet_schemas.SchemaError) as own:
        parquet_schemas.check_schema(table.schema, wanted, where="part-1.parquet")
    assert str(own.value) == message
    assert isinstance(own.value, ValueError) and not isinstance(own.value, SwdaskError)
    # Through swdask: swdask's class, with the same message.
    for check in (lambda: check_schema(table.schema, wanted, where="part-1.parquet"),
                  lambda: check_table(pa.table({"seq_id": [None]}), wanted, where="part-1.parquet")):
        with pytest.raises(SchemaError) as exc:
            check()
        assert isinstance(exc.value, SwdaskError) and isinstance(exc.value, ValueError)
        assert type(pickle.loads(pickle.dumps(exc.value))) is SchemaError  # crosses workers
    assert str(exc.value) == "part-1.parquet: column 'seq_id' has nulls, which its schema forbids"
    with pytest.raises(SchemaError, match=f"^{message}$"):
        check_schema(table.schema, wanted, where="part-1.parquet")
    assert swdask.errors.SchemaError is SchemaError


@pytest.mark.parametrize("name", sorted(parquet_schemas.SCHEMAS))
def test_every_column_of_every_table_has_swdasks_dtype(name):
    schema = parquet_schemas.SCHEMAS[name]
    frame = to_pandas(schema.empty_table())
    assert list(frame.columns) == schema.names
    for field in schema:
        assert pandas_dtype(field.type) == DTYPES[field.type], (name, field.name)
        assert frame[field.name].dtype == DTYPES[field.type], (name, field.name)


@pytest.mark.parametrize("arrow_type", [pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(),
                                        pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(),
                                        pa.float16(), pa.float32(), pa.float64()])
def test_numpy_dtype_is_pyarrows_without_pandas(arrow_type):
    assert numpy_dtype(arrow_type) == np.dtype(arrow_type.to_pandas_dtype())


@pytest.mark.parametrize("arrow_type", [pa.string(), pa.list_(pa.uint8()), pa.timestamp("s"),
                                        pa.decimal128(5, 2)])
def test_numpy_dtype_refuses_what_is_not_a_fixed_width_number(arrow_type):
    with pytest.raises(TypeError, match="not a fixed-width number"):
        numpy_dtype(arrow_type)


NUMBER_TYPES = [pa.bool_(), pa.int8(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64(),
                pa.float32(), pa.float64()]


@given(st.sampled_from(NUMBER_TYPES), st.lists(st.integers(0, 127), max_size=40),
       st.lists(st.integers(0, 40), max_size=4), st.integers(0, 40), st.integers(0, 40))
def test_numpy_of_equals_pyarrows_conversion(arrow_type, values, cuts, start, length):
    """Any chunking and any slice (an offset into the buffer, bits for booleans)."""
    array = pa.array(values, pa.int64()).cast(arrow_type)
    cuts = sorted({min(c, len(values)) for c in cuts} | {0, len(values)})
    chunked = pa.chunked_array([array.slice(a, b - a) for a, b in zip(cuts, cuts[1:])],
                               arrow_type)
    want = array.to_numpy(zero_copy_only=False)
    for got in (numpy_of(array), numpy_of(chunked)):
        assert got.dtype == numpy_dtype(arrow_type) and np.array_equal(got, want)
    piece = array.slice(start, length)
    assert np.array_equal(numpy_of(piece), piece.to_numpy(zero_copy_only=False))


def test_numpy_of_refuses_nulls_and_other_types():
    with pytest.raises(ValueError, match="1 nulls"):
        numpy_of(pa.array([1, None], pa.int32()))
    with pytest.raises(TypeError, match="not a fixed-width number"):
        numpy_of(pa.array(["a"]))


def test_reading_a_store_loads_no_pandas(tmp_path):
    """A GPU search reads its first partition while Numba's CUDA target loads: pandas (which
    pyarrow's to_numpy imports) would take the GIL from it."""
    swdask.ingest(SPROT_DB, tmp_path / "db", partition_residues=20_000)
    # Asked for, not refused: pyarrow reads on without pandas where its import fails.
    code = ("import sys, importlib.abc\n"
            "asked = []\n"
            "class Watch(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        asked.append(name)\n"
            "sys.meta_path.insert(0, Watch())\n"
            "from swdask.sequences.store import SequenceStore\n"
            f"store = SequenceStore.open({str(tmp_path / 'db')!r})\n"
            "parts = list(store.iter_partitions(read_ahead=True))\n"
            "print(len(parts) > 1 and sum(len(p) for p in parts) == store.n_records,\n"
            "      'pandas' in asked)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True False"


def test_nulls_stay_nulls_and_integers_keep_their_width():
    table = pa.table({"i": pa.array([1, None], pa.int32()), "j": pa.array([2**40, None]),
                      "f": pa.array([0.5, None]), "s": pa.array(["a", None]),
                      "r": pa.array([[1, 2], None], pa.list_(pa.uint8()))})
    frame = to_pandas(table)
    assert frame.dtypes.tolist() == [DTYPES[t] for t in table.schema.types]
    assert frame.iloc[1].isna().all()
    assert frame["j"][0] == 2**40 and frame["r"][0] == [1, 2]
    assert pa.Table.from_pandas(frame, preserve_index=False).column("i").type == pa.int32()
