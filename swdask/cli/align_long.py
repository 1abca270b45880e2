"""``swdask align-long``: the best local alignment of two long sequences, tiled over Dask."""
from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from typing import TYPE_CHECKING

from ..options import LONG_DEVICES
from .common import (
    add_input_options,
    add_report_options,
    add_scheduler_options,
    add_scoring,
    add_threads,
    check_summary,
    command_line,
    file_alphabet,
    positive,
    progress_wanted,
    scheduler_access,
    scoring_from_args,
    start_gpu_early,
    to_stdout,
    write_stdout,
    write_summary,
)

if TYPE_CHECKING:
    from ..jobs.long_align import LongAlignment

NAME = "align-long"
HELP = ("best local alignment of two long sequences (megabase DNA), tiled over CPU and GPU Dask "
        "workers")
DESCRIPTION = """Exact Smith-Waterman of two long sequences (the first record of each file): the
matrix cut into tiles that Dask runs on GPU and CPU workers at once; with --traceback the
alignment, recovered in bounded memory."""


def tile(text: str) -> str | int:
    """``"auto"`` or a tile side >= 1 (argparse ``type``)."""
    return "auto" if text == "auto" else positive(text)


def place(result: LongAlignment) -> str:
    """Where a long alignment lies, as a person reads it: 1-based inclusive, as BLAST prints
    it (the one-row table keeps 0-based half-open).  On the minus strand the subject's
    interval is given on B as given, from its end (start > end, as blastn's
    ``sstart > send``); without traceback, the alignment's last cell.

    Examples
    --------
    >>> from types import SimpleNamespace as Result
    >>> place(Result(strand="+", query_start=199, query_end=700, subject_start=0,
    ...              subject_end=500, subject_length=2000))
    'query 200..700, subject 1..500 (1-based)'
    >>> place(Result(strand="-", query_start=199, query_end=700, subject_start=0,
    ...              subject_end=500, subject_length=2000))
    'query 200..700, subject 2000..1501 (1-based; subject reverse complemented)'
    >>> place(Result(strand="-", query_start=None, query_end=700, subject_start=None,
    ...              subject_end=500, subject_length=2000))
    'ends at query 700, subject 1501 (1-based; subject reverse complemented)'
    """
    minus = result.strand == "-"
    length = result.subject_length
    # On the minus strand the table counts on B's reverse complement: position p there
    # (0-based) is position length - p on B as given (1-based).
    last = length - result.subject_end + 1 if minus else result.subject_end
    note = "1-based; subject reverse complemented" if minus else "1-based"
    if result.query_start is None:
        return f"ends at query {result.query_end}, subject {last} ({note})"
    first = length - result.subject_start if minus else result.subject_start + 1
    return (f"query {result.query_start + 1}..{result.query_end}, subject {first}..{last} "
            f"({note})")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``swdask align-long`` to its ``parser``."""
    parser.add_argument("a", metavar="A", help="query: FASTA/FASTQ file (first record)")
    parser.add_argument("b", metavar="B", help="subject: FASTA/FASTQ file (first record)")
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="one-row Parquet table (schema long_alignments)")
    parser.add_argument("--tile", type=tile, default="auto", metavar="auto|N",
                        help="tile side in residues, or auto (default: from the cost model)")
    parser.add_argument("--device", default="auto", choices=LONG_DEVICES,
                        help="auto (default: both when a GPU is visible, else cpu), cpu, gpu, "
                        "or both")
    parser.add_argument("--traceback", action="store_true",
                        help="also recover the alignment: CIGAR, identity (and --sam)")
    parser.add_argument("--sam", metavar="SAM",
                        help="with --traceback, also write the alignment as SAM (- for the "
                        "standard output)")
    parser.add_argument("--reverse-complement", action="store_true",
                        help="also align A to B's reverse complement (DNA); report the better "
                        "strand")
    add_scoring(parser, mode=False)  # local alignment only
    add_input_options(parser, map_unknown=False)
    parser.add_argument("--scheduler", metavar="ADDRESS", help="run the tiles on a running Dask "
                        "scheduler (GPU workers with --resources GPU=1); default: workers in this "
                        "process")
    add_threads(parser)
    add_scheduler_options(parser)
    parser.add_argument("--force", action="store_true", help="replace existing output files")
    add_report_options(parser)


def run(args: argparse.Namespace) -> None:
    """Align, write the one-row table (and SAM), and (unless ``--quiet``) two summary lines."""
    # The CUDA driver and context started 0.46 s into a 1 Mb pair's first run (2 x H200).
    start_gpu_early(args, auto=True, one_gpu=False)  # a tile row per GPU
    import pyarrow.parquet as pq

    from ..jobs.base import atomic_paths, check_output
    from ..jobs.long_align import align_long
    from ..output import output_format
    from ..tables import for_file

    to_stdout(args.output)
    if args.sam and not args.traceback:
        raise ValueError("--sam needs --traceback")
    sam_stdout = bool(args.sam) and to_stdout(args.sam, "sam")
    inputs = [args.a, args.b, args.matrix]
    sam_file = args.sam if args.sam and not sam_stdout else None
    check_output(args.output, force=args.force, inputs=inputs, outputs=[sam_file])
    output_format(args.output, "parquet")  # refuses a .tsv or .sam name
    if sam_file:
        check_output(sam_file, force=args.force, inputs=inputs, outputs=[args.output])
        output_format(sam_file, "sam")
    check_summary(args, inputs=inputs, outputs=[args.output, sam_file], stdout=sam_stdout)
    alphabet = args.alphabet if args.alphabet != "auto" else file_alphabet(args)
    scoring = scoring_from_args(args, alphabet or "dna")
    if args.scheduler is None:
        # Without a scheduler the job plans its own workers, if any: importing Dask's
        # distributed for a session of none cost a 1 Mb pair's first run 0.37 s (2 x H200).
        session = nullcontext(None)
    else:
        from ..cluster import session as cluster_session

        session = cluster_session(scheduler=args.scheduler, **scheduler_access(args))
    with session as client:
        result = align_long(args.a, args.b, scoring=scoring, tile=args.tile, device=args.device,
                            traceback=args.traceback, reverse_complement=args.reverse_complement,
                            client=client, progress=progress_wanted(args))
    outputs = [args.output] + ([sam_file] if sam_file else [])
    with atomic_paths(outputs, force=args.force) as temporaries:  # both in place, or neither
        pq.write_table(for_file(result.to_table()), temporaries[0])
        if sam_file:
            with open(temporaries[1], "w", encoding="utf-8", newline="\n") as handle:
                handle.writelines(result.sam_lines(command_line(args)))
    if sam_stdout:
        write_stdout(result.sam_lines(command_line(args)))
    f = {"output": args.output, "sam": args.sam, "score": result.score,
         "strand": result.strand, "query_start": result.query_start,
         "query_end": result.query_end, "subject_start": result.subject_start,
         "subject_end": result.subject_end, "pident": result.pident,
         "cigar_length": None if result.cigar is None else len(result.cigar),
         "cells": result.cells, "score_seconds": result.score_seconds,
         "gcups": result.cells / result.score_seconds / 1e9 if result.score_seconds else 0.0,
         "traceback_seconds": result.traceback_seconds, "device": result.device,
         "gpu_workers": result.stats["gpu_workers"], "threads": result.stats["cpu_threads"],
         "tile_rows": result.tile_rows, "tile_cols": result.tile_cols}
    if not args.quiet:
        where = place(result)  # 1-based, as a person reads it; the JSON keeps the table's
        extra = f", {f['pident']:.2f}% identity, CIGAR of {f['cigar_length']:,} characters" \
            if args.traceback else ""
        workers = " and ".join(f"{n:,} {noun}{'s' * (n != 1)}" for n, noun in (
            (f["gpu_workers"], "GPU worker"), (f["threads"], "CPU thread")) if n)
        print(f"score {f['score']} on strand {f['strand']}: {where}{extra}", file=sys.stderr)
        print(f"{f['cells']:,} cells in {f['score_seconds']:.2f} s ({f['gcups']:.2f} GCUPS) on "
              f"{f['device']} ({workers}), {f['tile_rows']} x {f['tile_cols']} tiles; wrote "
              f"{args.output}" + (f" and {args.sam}" if args.sam else ""), file=sys.stderr)
    write_summary(args, "align-long", f)
