"""One dtype policy for every table swdask hands out (issue 19, item 7): lazy results (the
Dask DataFrames of search, all-pairs and significance), in-process results and the files
they are written to, read back by pandas, Dask and pyarrow.  A tiny E-value or P-value
(pandas' nullable ``Float64`` showed 1.6e-73 as ``0.0``) shows as a number in ``repr``,
``to_string`` and the HTML that Jupyter renders."""
from __future__ import annotations

import re
import warnings

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import swdask
from swdask.parquet_schemas import SCHEMAS
from swdask.tables import for_file, to_pandas
from tests.helpers import QUERIES, SMALL_QUERIES, SMALL_SUBJECTS, SPROT_DB, run_cli

#: The tables swdask writes as result files (through swdask.tables.for_file); a store's
#: files are read through SequenceStore, and score tables are never written.
RESULT_FILES = ("allpairs", "hits", "long_alignments", "significance")
#: pandas' scientific notation, as a float column of NumPy's float64 shows small values.
SCIENTIFIC = re.compile(r"\d\.\d+e[-+]\d+")


def views(frame: pd.DataFrame) -> list[str]:
    """How a person sees ``frame``: its repr, ``to_string`` and Jupyter's HTML, all columns."""
    with pd.option_context("display.width", 10_000, "display.max_columns", None,
                           "display.max_rows", None):
        return [repr(frame), frame.to_string(), frame._repr_html_()]


def assert_shown(frame: pd.DataFrame, column: str) -> float:
    """The smallest positive value of ``column`` (below 1e-6, as fixed point loses it) is
    readable, to 6 digits, in every view of ``frame``; returns it."""
    values = frame[column].to_numpy(dtype=float)
    tiny = float(np.nanmin(values[values > 0]))
    assert tiny < 1e-6, f"no value of {column} small enough to test ({tiny})"
    for text in views(frame):
        shown = [float(token) for token in SCIENTIFIC.findall(text)]
        assert any(abs(value - tiny) <= 1e-5 * tiny for value in shown), \
            f"{column} {tiny!r} is not shown in:\n{text[:2000]}"
    return tiny


def assert_policy(frame: pd.DataFrame, schema: pa.Schema) -> None:
    """The columns of ``schema``, each of swdask's dtype: floats NumPy's float64."""
    expected = to_pandas(schema.empty_table()).dtypes
    assert frame.dtypes.equals(expected), pd.concat({"got": frame.dtypes, "want": expected},
                                                    axis=1)
    for field in schema:
        if pa.types.is_floating(field.type):
            assert frame[field.name].dtype == np.float64, field.name


def read_back(path) -> list[pd.DataFrame]:
    """A Parquet file (or folder) as pandas, Dask and pyarrow read it."""
    with warnings.catch_warnings():
        # Dask's Parquet reader calls reset_index(inplace=True), deprecated by pandas 3.1.
        warnings.filterwarnings("ignore", "The inplace keyword", Warning)
        lazy = dd.read_parquet(path).compute().reset_index(drop=True)
    return [pd.read_parquet(path), lazy, pq.read_table(path).to_pandas()]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_schema_shows_small_floats_and_reads_back_its_dtypes(name, tmp_path):
    """A row of every table, its floats 1.6e-73, through to_pandas and through a file."""
    schema = SCHEMAS[name]
    row = {}
    for field in schema:
        kind = field.type
        row[field.name] = (1.6e-73 if pa.types.is_floating(kind) else 7 if pa.types.is_integer(
            kind) else "x" if pa.types.is_string(kind) else b"\x01\x02" if pa.types.is_large_binary(
            kind) else [1, 2])
    table = pa.Table.from_pylist([row, {f.name: (row[f.name] if not f.nullable else None)
                                        for f in schema}], schema=schema)
    frame = to_pandas(table)
    assert_policy(frame, schema)
    for field in schema:
        if pa.types.is_floating(field.type):
            assert assert_shown(frame, field.name) == 1.6e-73
            assert all("1.600000e-73" in text for text in views(frame))
    if name not in RESULT_FILES:
        return
    path = tmp_path / f"{name}.parquet"
    pq.write_table(for_file(table), path)
    assert pq.read_schema(path).metadata[b"swdask.schema"] == name.encode()  # kept
    for back in read_back(path):
        pd.testing.assert_frame_equal(back, frame)


@pytest.fixture(scope="module")
def hits_in_process():
    return swdask.search_in_process(QUERIES, SPROT_DB, max_hits=5)


def test_search_lazy_in_process_and_files_agree(hits_in_process, tmp_path):
    lazy = swdask.search(QUERIES, SPROT_DB, max_hits=5)
    computed = lazy.compute().reset_index(drop=True)
    assert lazy.dtypes.equals(computed.dtypes)  # the graph's meta is what comes out
    for frame in (computed, hits_in_process):
        assert_policy(frame, SCHEMAS["hits"])
        assert_shown(frame, "evalue")  # e.g. 3.6e-85 for a query's own record
    pd.testing.assert_frame_equal(computed, hits_in_process)
    swdask.write_hits(lazy, tmp_path / "hits.parquet")
    for back in read_back(tmp_path / "hits.parquet"):
        pd.testing.assert_frame_equal(back, hits_in_process)
        assert_shown(back, "evalue")


def test_hits_without_statistics_are_nan_and_count_as_missing(hits_in_process):
    frame = swdask.search_in_process(QUERIES, SPROT_DB, max_hits=2, mode="global")
    assert frame["evalue"].dtype == np.float64 and frame["evalue"].isna().all()
    # Written back, a NaN is a null, as the HITS schema has it.
    table = swdask.output.hits_table(frame)
    assert table.column("evalue").null_count == len(frame)


def test_significance_lazy_in_process_and_file_agree(tmp_path, capsys):
    options = {"shuffles": 200, "seed": 1}
    here, _ = swdask.significance_in_process(SMALL_QUERIES, SMALL_SUBJECTS, **options)
    lazy = swdask.significance(SMALL_QUERIES, SMALL_SUBJECTS, **options)
    computed = lazy.compute().reset_index(drop=True)
    assert lazy.dtypes.equals(computed.dtypes)
    for frame in (here, computed):
        assert_policy(frame, SCHEMAS["significance"])
        assert assert_shown(frame, "p_value") < 1e-15  # q33 against itself
    pd.testing.assert_frame_equal(computed, here)
    queries, subjects = tmp_path / "q.fasta", tmp_path / "s.fasta"
    queries.write_text("".join(f">{k}\n{v}\n" for k, v in SMALL_QUERIES.items()))
    subjects.write_text("".join(f">{k}\n{v}\n" for k, v in SMALL_SUBJECTS.items()))
    out = tmp_path / "sig.parquet"
    code, _, err = run_cli(capsys, "significance", queries, subjects, "-o", out,
                           "--shuffles", "200", "--seed", "1", "--quiet")
    assert code == 0, err
    for back in read_back(out):
        pd.testing.assert_frame_equal(back, here)


def test_all_pairs_lazy_and_files_agree(tmp_path):
    genes = tmp_path / "genes.fasta"
    base = "ACGTTGCAAGGCTTACCGATGCATGCCGTAAGCTTGACCATGGA" * 3
    genes.write_text(f">a\n{base}\n>b\n{base[:60]}T{base[61:]}\n>c\n{base[::-1]}\n"
                     f">d\n{base[:-2]}\n")
    lazy = swdask.all_pairs(genes, min_identity=0.9, cigar=True)
    computed = lazy.compute().reset_index(drop=True)
    assert lazy.dtypes.equals(computed.dtypes) and len(computed) >= 2
    assert_policy(computed, SCHEMAS["allpairs"])
    swdask.write_all_pairs(genes, tmp_path / "pairs", min_identity=0.9, cigar=True)
    for back in [swdask.read_all_pairs(tmp_path / "pairs"), *read_back(tmp_path / "pairs")]:
        pd.testing.assert_frame_equal(back, computed)
