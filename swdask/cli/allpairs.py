"""``swdask allpairs``: every pair of a sequence set above an identity threshold."""
from __future__ import annotations

import argparse
import sys
import time

from ..options import ALLPAIRS_MODES, DEVICES
from .common import (
    add_job_options,
    add_scoring,
    check_summary,
    database_alphabet,
    in_process,
    job_session,
    number,
    positive,
    progress_wanted,
    scoring_from_args,
    start_gpu_early,
    to_stdout,
    where_ran,
    where_text,
    whole,
    write_summary,
)

NAME = "allpairs"
HELP = "every pair of a sequence set above an identity threshold"
DESCRIPTION = """All-against-all alignment (e.g. 16S genes): exact scores of every pair the
lengths and the shared q-grams allow (global mode), traceback of the pairs over the identity bound, and the pairs whose alignment
reaches --min-identity; one Parquet file per block pair in OUT, resumable with --resume."""


def identity(text: str) -> float:
    """An identity threshold in [0, 1] (argparse ``type``); see :func:`.common.number`."""
    return number(text, accept=lambda value: 0 <= value <= 1, wanted="between 0 and 1")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``swdask allpairs`` to its ``parser``."""
    parser.add_argument("source", metavar="STORE_OR_FASTA",
                        help="sequence store or FASTA/FASTQ file")
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="output folder (one Parquet file per block pair and _manifest.json)")
    group = add_scoring(parser, mode=False)
    group.add_argument("--mode", default="global", choices=ALLPAIRS_MODES,
                       help="global (Needleman-Wunsch, default; the identity bound skips pairs "
                       "and blocks) or local (Smith-Waterman; give --min-score)")
    parser.add_argument("--min-identity", type=identity, default=0.97, metavar="T",
                        help="keep pairs whose alignment has matches / columns >= T (default 0.97)")
    parser.add_argument("--min-score", type=whole, metavar="S", help="and a score of at least S")
    parser.add_argument("--cigar", action="store_true", help="fill the cigar column")
    parser.add_argument("--block-size", type=positive, default=2048, metavar="N",
                        help="sequences per block; a block pair is one task and one file "
                        "(default 2048)")
    parser.add_argument("--device", default="auto", choices=DEVICES,
                        help="auto (default: a GPU when one is visible and the mode is global), "
                        "cpu, or gpu (global mode)")
    parser.add_argument("--no-prefilter", dest="prefilter", action="store_false",
                        help="score every pair the lengths allow, without first dropping the "
                        "pairs that share too few q-grams to reach T (same output, slower; for "
                        "comparison)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in OUT, skipping block pairs already written")
    add_job_options(parser, force_help="replace an existing all-pairs OUT (only that) once the "
                    "new run is complete")


def run(args: argparse.Namespace) -> None:
    """Write the pairs to the folder ``args.output`` and (unless ``--quiet``) the summary."""
    start_gpu_early(args, auto=True, one_gpu=True)  # in this process the GPU is device 0
    from ..jobs.allpairs import check_all_pairs_output, check_device, write_all_pairs

    to_stdout(args.output, instead="give a folder name")
    inputs = [args.source, args.matrix]
    check_all_pairs_output(args.output, resume=args.resume, force=args.force, inputs=inputs)
    check_summary(args, inputs=inputs, outputs=[args.output])
    check_device(args.device, args.mode, here=in_process(args))
    alphabet = database_alphabet(args.source, args.alphabet)
    scoring = scoring_from_args(args, alphabet)
    started = time.perf_counter()
    with job_session(args) as client:
        stats = write_all_pairs(args.source, args.output, scoring=scoring, mode=args.mode,
                                min_identity=args.min_identity, min_score=args.min_score,
                                device=args.device, cigar=args.cigar, block_size=args.block_size,
                                alphabet=args.alphabet, map_unknown=args.map_unknown,
                                resume=args.resume, force=args.force, client=client,
                                progress=progress_wanted(args), prefilter=args.prefilter)
        where = where_ran(client)
    wall = time.perf_counter() - started
    f = {"output": args.output, "sequences": stats.n_sequences, "pairs": stats.pairs,
         "pairs_filtered": stats.pairs_filtered, "filter_seconds": stats.filter_seconds,
         "pairs_scored": stats.pairs_scored, "cells": stats.cells,
         "kernel_seconds": stats.kernel_seconds, "kernel_gcups": stats.kernel_gcups,
         "candidates": stats.candidates, "traceback_seconds": stats.traceback_seconds,
         "traceback_kernel_seconds": stats.traceback_kernel_seconds, "hits": stats.hits,
         "block_pairs": stats.block_pairs + stats.block_pairs_skipped,
         "block_pairs_skipped": stats.block_pairs_skipped, "seconds": wall,
         "pairs_per_second": stats.pairs / max(wall, 1e-9), "device": stats.device, **where}
    if not args.quiet:
        print(f"wrote {f['hits']:,} pairs to {args.output}: {f['sequences']:,} sequences, "
              f"{f['pairs']:,} pairs, {f['pairs_filtered']:,} dropped by shared q-grams "
              f"({f['filter_seconds']:.1f} s), {f['pairs_scored']:,} scored ({f['cells']:,} cells, "
              f"{f['kernel_gcups']:.2f} GCUPS in the kernel), {f['candidates']:,} traced back "
              f"({f['traceback_seconds']:.1f} s summed over tasks), "
              f"{f['block_pairs_skipped']:,} of {f['block_pairs']:,} block pairs skipped by "
              f"length, {wall:.1f} s ({f['pairs_per_second']:,.0f} pairs/s) on {f['device']}, "
              f"{where_text(f)}", file=sys.stderr)
    write_summary(args, "allpairs", f)
