"""``swdask significance``: P-values of (query, subject) pairs from shuffled subjects."""
from __future__ import annotations

import argparse
import sys
import time

from ..options import DEVICES
from .common import (
    add_job_options,
    add_scoring,
    check_summary,
    database_alphabet,
    in_process,
    job_session,
    positive,
    progress_wanted,
    scoring_from_args,
    standard_input,
    start_gpu_early,
    to_stdout,
    where_ran,
    where_text,
    whole,
    write_summary,
)

NAME = "significance"
HELP = "P-values of (query, subject) pairs from shuffled subjects (PSSE)"
DESCRIPTION = """Pairwise statistical significance: each subject of a pair shuffled N times
(composition kept), the query aligned to every shuffle, a Gumbel fitted by censored maximum
likelihood, and the real score's P-value. Writes a Parquet table (query, subject, score, mu,
lambda, p_value, n_shuffles, seed)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``swdask significance`` to its ``parser``."""
    parser.add_argument("queries", metavar="QUERIES", help="FASTA/FASTQ file (- for the standard "
                        "input) or sequence store")
    parser.add_argument("subjects", metavar="SUBJECTS", help="FASTA/FASTQ file or sequence store")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="output Parquet file")
    parser.add_argument("--shuffles", type=positive, default=1000, metavar="N",
                        help="shuffles of each subject, >= 2 (default 1000)")
    parser.add_argument("--seed", type=whole, default=0, metavar="S",
                        help="seed of the shuffles, 0 <= S < 2**63 (default 0)")
    parser.add_argument("--pairs", default="all", metavar="all|PAIRS.tsv|HITS.parquet",
                        help="all (every query x every subject, the default), a file of two "
                        "tab-separated record names per line (query, subject; no header), or a "
                        "search's hits table (.parquet) to re-rank its hits")
    parser.add_argument("--pssm", metavar="FILE", help="PSI-BLAST ASCII PSSM (-out_ascii_pssm) of "
                        "a query: replaces the matrix for the query whose sequence it is")
    add_scoring(parser, mode=False)  # the shuffles are scored by Smith-Waterman: local only
    parser.add_argument("--device", default="auto", choices=DEVICES,
                        help="auto (default: a GPU when one is visible), cpu, or gpu")
    add_job_options(parser)


def run(args: argparse.Namespace) -> None:
    """Write the P-values to ``args.output`` and (unless ``--quiet``) one summary line."""
    # The CUDA driver and context started on the main thread 0.27 s into a first run of
    # 100 pairs, and took 0.45 s there (2 x H200).
    start_gpu_early(args, auto=True, one_gpu=True)
    import pyarrow.parquet as pq

    from ..jobs.base import atomic_path, check_output
    from ..jobs.significance import check_options, significance, significance_table
    from ..output import output_format
    from ..parquet_schemas import SIGNIFICANCE
    from ..tables import check_table, for_file, to_arrow

    to_stdout(args.output)
    inputs = [args.queries, args.subjects, args.pairs, args.pssm, args.matrix]
    check_output(args.output, force=args.force, inputs=inputs)
    output_format(args.output, "parquet")  # refuses a .tsv or .sam name
    check_summary(args, inputs=inputs, outputs=[args.output])
    check_options(args.shuffles, args.seed, args.device, args.pairs)
    with standard_input(args.queries) as queries:
        scoring = scoring_from_args(args, database_alphabet(queries, args.alphabet))
        tick = time.perf_counter()
        options = {"scoring": scoring, "shuffles": args.shuffles, "seed": args.seed,
                   "pairs": args.pairs, "pssm": args.pssm, "device": args.device,
                   "alphabet": args.alphabet, "map_unknown": args.map_unknown}
        if in_process(args):
            # The same frame as the Dask graph's, without importing Dask and building a
            # graph: a fresh process took 3.5 s for work done in 0.5 s once warm (H100 host).
            # Arrow throughout: pandas (0.24-0.37 s) is not imported.
            table, stats = significance_table(queries, args.subjects,
                                              progress=progress_wanted(args), **options)
            where = where_ran()
        else:
            from ..cluster import compute  # Dask and distributed: 0.3 s, only for a cluster

            with job_session(args) as client:
                lazy = significance(queries, args.subjects, return_stats=True, **options)
                frame, stats = compute(*lazy, client=client, progress=progress_wanted(args),
                                       desc="significance")
                table = to_arrow(frame)
                where = where_ran(client)
    table = check_table(table, SIGNIFICANCE, where="significance")
    with atomic_path(args.output, force=args.force) as tmp:
        pq.write_table(for_file(table), tmp)
    seconds = time.perf_counter() - tick
    f = {"output": args.output, "pairs": table.num_rows, "shuffles": args.shuffles,
         "cells": stats.cells, "seconds": seconds, "gcups": stats.cells / seconds / 1e9,
         "kernel_seconds": stats.kernel_seconds, "device": stats.device or args.device, **where}
    if not args.quiet:
        print(f"wrote {f['pairs']:,} pairs to {args.output} ({f['shuffles']} shuffles each): "
              f"{f['cells']:,} cells in {seconds:.2f} s ({f['gcups']:.2f} GCUPS) on "
              f"{f['device']}, {where_text(f)}", file=sys.stderr)
    write_summary(args, "significance", f)
