"""Writing results: the hits table as Parquet or BLAST tabular, atomically.

Every writer builds its file under a temporary name in the destination folder and
renames it into place at the end, so an interrupted or failed run leaves no partial
output and never clobbers an existing file unless asked to.
"""
from __future__ import annotations

import contextlib
import math
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import InputNotFoundError, OutputExistsError
from .parquet_schemas import HITS, check_table

OUTFMTS = ("parquet", "blast6")
#: BLAST's 12 standard tabular columns (outfmt 6), in order.
BLAST6_COLUMNS = ("qseqid", "sseqid", "pident", "length", "mismatch", "gapopen", "qstart",
                  "qend", "sstart", "send", "evalue", "bitscore")


def check_outfmt(outfmt: str) -> str:
    """Return ``outfmt`` if known; raise ValueError naming the known formats otherwise."""
    if outfmt not in OUTFMTS:
        raise ValueError(f"unknown output format {outfmt!r}; choose one of: {', '.join(OUTFMTS)}")
    return outfmt


def check_output(path, *, force: bool = False) -> Path:
    """Fail early if ``path`` cannot be written: it exists (without ``force``), or its
    folder does not exist.

    Raises
    ------
    OutputExistsError, InputNotFoundError
    """
    path = Path(path)
    if path.exists() and not force:
        raise OutputExistsError(f"{path}: already exists (use --force to overwrite)")
    if path.is_dir():
        raise OutputExistsError(f"{path}: is a directory; give a file name")
    if not path.parent.resolve().is_dir():
        raise InputNotFoundError(f"{path}: folder {path.parent} does not exist")
    return path


@contextlib.contextmanager
def atomic_path(path, *, force: bool = False):
    """Yield a temporary path beside ``path``; on success rename it to ``path``.

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    path = check_output(path, force=force)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        if path.exists() and not force:  # appeared while we worked
            raise OutputExistsError(f"{path}: already exists (use --force to overwrite)")
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def hits_table(hits) -> pa.Table:
    """The hits as an Arrow table checked against :data:`swdask.parquet_schemas.HITS`."""
    if not isinstance(hits, pa.Table):
        hits = pa.Table.from_pandas(hits, preserve_index=False)
    return check_table(hits, HITS, where="hits")


def write_hits(hits, path, *, outfmt: str = "parquet", force: bool = False) -> Path:
    """Write a hits table.

    Parameters
    ----------
    hits : pandas.DataFrame or pyarrow.Table
        Columns of :data:`swdask.parquet_schemas.HITS`.
    path : str or os.PathLike
        Output file.
    outfmt : {"parquet", "blast6"}, default "parquet"
        ``parquet``: the hits table, 0-based half-open coordinates.  ``blast6``: BLAST
        tabular (``-outfmt 6``) with its 12 standard columns, 1-based inclusive
        coordinates, no header; null E-values and bit scores are written as ``NA``.
    force : bool, default False
        Replace an existing file.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    OutputExistsError
        ``path`` exists and ``force`` is False.
    SchemaError
        ``hits`` lacks a column of the schema or has one of the wrong type.
    """
    check_outfmt(outfmt)
    table = hits_table(hits)
    with atomic_path(path, force=force) as tmp:
        if outfmt == "parquet":
            pq.write_table(table, tmp, compression="zstd")
        else:
            with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
                handle.writelines(blast6_lines(table))
    return Path(path)


def _number(value, fmt):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "NA"
    return format(value, fmt)


def blast6_lines(table: pa.Table):
    """Lines of BLAST tabular output (``-outfmt 6``) for a hits table."""
    cols = table.to_pydict()
    for k in range(table.num_rows):
        evalue = cols["evalue"][k]
        yield "\t".join((
            cols["query"][k], cols["subject"][k],
            f"{100 * cols['identity'][k]:.3f}", str(cols["align_length"][k]),
            str(cols["mismatches"][k]), str(cols["gap_opens"][k]),
            str(cols["query_start"][k] + 1), str(cols["query_end"][k]),
            str(cols["subject_start"][k] + 1), str(cols["subject_end"][k]),
            _number(evalue, ".2e" if evalue is not None and evalue >= 1e-180 else "g"),
            _number(cols["bitscore"][k], ".1f"),
        )) + "\n"
