"""``swdask demo``: the bundled Swiss-Prot queries against the bundled database."""
from __future__ import annotations

import argparse
import time
from importlib.resources import files
from typing import TYPE_CHECKING

from .. import __version__
from .common import (
    add_cluster_options,
    in_process,
    positive,
    search_here,
    search_summary,
    to_stdout,
)

if TYPE_CHECKING:
    import pandas as pd

NAME = "demo"
HELP = "search bundled Swiss-Prot queries against a bundled database and print the best hits"
DESCRIPTION = """The main job on bundled real data: 5 Swiss-Prot queries against 2,000
Swiss-Prot proteins (UniProt, CC BY 4.0)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``swdask demo`` to its ``parser``."""
    parser.add_argument("--hits", type=positive, default=3, help="hits shown per query (default 3)")
    add_cluster_options(parser)
    parser.add_argument("-o", "--output", metavar="OUT", help="also write the hits: Parquet, or "
                        "the format OUT's extension says (.tsv: BLAST tabular, .sam: SAM, .bam: "
                        "BAM)")
    parser.add_argument("--force", action="store_true", help="replace an existing output file")


def hits_shown(hits: pd.DataFrame) -> pd.DataFrame:
    """The demo's table of hits, for a person: BLAST tabular's names and conventions
    (``pident`` in percent, ``qstart qend sstart send`` 1-based inclusive), E-values as
    numbers, long CIGARs cut."""
    import pandas as pd

    return pd.DataFrame({
        "query": hits["query"], "subject": hits["subject"], "score": hits["score"],
        "evalue": hits["evalue"], "pident": (100 * hits["identity"]).round(1),
        "qstart": hits["query_start"] + 1, "qend": hits["query_end"],
        "sstart": hits["subject_start"] + 1, "send": hits["subject_end"],
        "cigar": hits["cigar"].map(lambda c: c if len(c) <= 24 else c[:21] + "..."),
    })


def run(args: argparse.Namespace) -> None:
    """Search the bundled data and print the best hits and the summary."""
    from ..jobs.base import check_output
    from ..output import check_format, output_format, write_hits

    if args.output:
        to_stdout(args.output)
        check_output(args.output, force=args.force)
        check_format(output_format(args.output))  # .bam without pysam: before the search
    data = files("swdask") / "data"
    queries, database = data / "demo_queries.fasta", data / "demo_db.fasta.gz"
    print(f"swdask {__version__} demo: {queries.name} against {database.name} "
          "(Swiss-Prot, UniProt CC BY 4.0), BLOSUM62 11/1, local")
    started = time.perf_counter()
    dask_workers = None
    if in_process(args):
        hits, stats = search_here(queries, database, max_hits=max(args.hits, 1),
                                  return_stats=True)
    else:
        from ..cluster import compute, session, worker_count
        from ..jobs.search import search

        with session(args.workers, scheduler=args.scheduler, announce=print) as client:
            hits, stats = compute(*search(queries, database, max_hits=max(args.hits, 1),
                                          return_stats=True), client=client)
            dask_workers = worker_count(client)
    print(hits_shown(hits[hits["rank"] <= args.hits]).to_string(index=False))
    print(search_summary(stats, dask_workers=dask_workers, cap=False))
    print(f"(wall time {time.perf_counter() - started:.1f} s, including one-time JIT "
          "compilation on a first run)")
    if args.output:
        write_hits(hits, args.output, force=args.force)
        print(f"wrote {len(hits)} hits to {args.output}")
