"""A job's lazy result on Dask's configured DataFrame backend (issue 16, item 4): pandas
by default, cudf under ``dataframe.backend = "cudf"`` with the same rows; a clear error
where cudf is asked for and missing.  The cudf half runs in the GPU lane (``-m gpu``), where
the ``[gpu]`` extra installs cudf."""
from __future__ import annotations

import sys

import dask
import dask.dataframe as dd
import pandas as pd
import pytest

import swdask
from swdask.errors import MissingDependencyError, SwdaskError
from swdask.parquet_schemas import ALLPAIRS, HITS, SIGNIFICANCE
from swdask.tables import check_table, dataframe_backend, on_backend, to_arrow, to_pandas
from tests.helpers import QUERIES, RRNA, SMALL_QUERIES, SMALL_SUBJECTS, SPROT_DB


def test_results_are_pandas_by_default():
    frame = dd.from_pandas(pd.DataFrame({"score": [1, 2]}), npartitions=1)
    assert dataframe_backend() == "pandas"
    assert on_backend(frame) is frame
    assert isinstance(swdask.search(QUERIES, SPROT_DB, device="cpu").compute(), pd.DataFrame)


def test_a_backend_other_than_pandas_or_cudf_is_refused():
    with dask.config.set({"dataframe.backend": "polars"}), \
            pytest.raises(SwdaskError, match="dataframe.backend is 'polars': swdask's results "
                                             "come as pandas or cudf DataFrames"):
        dataframe_backend()


def test_cudf_asked_for_without_dask_cudf_fails_at_once_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "dask_cudf", None)  # its import raises ImportError
    with dask.config.set({"dataframe.backend": "cudf"}), \
            pytest.raises(MissingDependencyError) as caught:
        swdask.search(QUERIES, SPROT_DB, device="cpu")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("dataframe.backend is 'cudf' but dask-cudf does not import")
    assert "pip install 'swdask[gpu]'" in message


def as_schema(frame, schema) -> pd.DataFrame:
    """A computed result (pandas or cudf) in swdask's pandas dtypes, index dropped."""
    return to_pandas(check_table(to_arrow(frame), schema))


@pytest.mark.gpu
def test_cudf_results_hold_the_pandas_rows(device, tmp_path):
    """Search (GPU), all-pairs and significance under the cudf backend: cudf partitions,
    the same rows as pandas; the writers take them."""
    import cudf

    searched = swdask.search(QUERIES, SPROT_DB, device="gpu", max_hits=20)
    pairs = swdask.all_pairs(RRNA, min_identity=0.9)
    shuffled = swdask.significance(SMALL_QUERIES, SMALL_SUBJECTS, shuffles=50, seed=1)
    on_pandas = dask.compute(searched, pairs, shuffled)
    with dask.config.set({"dataframe.backend": "cudf"}):
        searched = swdask.search(QUERIES, SPROT_DB, device="gpu", max_hits=20)
        lazy = [searched, swdask.all_pairs(RRNA, min_identity=0.9),
                swdask.significance(SMALL_QUERIES, SMALL_SUBJECTS, shuffles=50, seed=1)]
        on_cudf = dask.compute(*lazy)
        swdask.write_hits(searched, tmp_path / "hits.parquet")
    assert len(on_pandas[0]) > 0
    for mine, theirs, schema in zip(on_cudf, on_pandas, (HITS, ALLPAIRS, SIGNIFICANCE)):
        assert isinstance(mine, cudf.DataFrame)
        assert as_schema(mine, schema).equals(as_schema(theirs, schema))
    written = pd.read_parquet(tmp_path / "hits.parquet")
    assert written.equals(as_schema(on_pandas[0], HITS))
