"""``swdask search``: queries against a database, hits to Parquet, BLAST tabular or SAM."""
from __future__ import annotations

import argparse
import sys

from ..options import BLAST_KEYWORDS, DEVICES, MAX_HITS, OUTFMTS, STRANDS, check_strand
from .common import (
    add_job_options,
    add_scoring,
    check_summary,
    command_line,
    database_alphabet,
    in_process,
    job_session,
    positive,
    positive_number,
    progress_wanted,
    scoring_from_args,
    search_figures,
    search_here,
    search_summary,
    standard_input,
    start_gpu_early,
    to_stdout,
    whole,
    write_stdout,
    write_summary,
)

NAME = "search"
HELP = "search queries against a database"
DESCRIPTION = """Exact search of every query against every database sequence; full alignments of
each query's best hits."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``swdask search`` to its ``parser``."""
    parser.add_argument("queries", metavar="QUERIES", help="FASTA/FASTQ file (- for the standard "
                        "input) or sequence store")
    parser.add_argument("database", metavar="DB", help="sequence store, or FASTA/FASTQ file "
                        "(ingested to a temporary store)")
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="output file; - for the standard output (blast6 and sam)")
    parser.add_argument("--outfmt", choices=OUTFMTS,
                        help="parquet (hits table, 0-based half-open), blast6 (BLAST -outfmt 6, "
                        "1-based inclusive), sam (SAM v1.6: queries as reads, subjects as "
                        "references, 1-based) or bam (SAM's records as BAM, through pysam: "
                        "pip install 'swdask[bam]'); default: OUT's extension says (.tsv, "
                        ".tab, .m8: blast6; .sam: sam; .bam: bam), else parquet")
    parser.add_argument("--columns", metavar='"KEYWORD ..."',
                        help="blast6 columns, BLAST's -outfmt \"6 ...\" keywords, e.g. \"std "
                        "qlen slen cigar\"; std = the 12 standard columns (the default); keywords: "
                        f"{' '.join(BLAST_KEYWORDS)}")
    parser.add_argument("--header", action="store_true",
                        help="blast6: a first line naming the columns, '#' then the keywords, "
                        "tab-separated")
    add_scoring(parser)
    parser.add_argument("--max-hits", type=positive, default=MAX_HITS, metavar="N",
                        help=f"hits kept per query, the best scores (default {MAX_HITS}, as "
                        "BLAST's -max_target_seqs); the summary says how many queries reached it")
    parser.add_argument("--min-score", type=whole, metavar="S",
                        help="report only hits scoring at least S (default 1 for local mode)")
    parser.add_argument("--evalue", type=positive_number, metavar="E",
                        help="report only hits with an E-value of at most E (local mode; BLAST's "
                        "Karlin-Altschul statistics for the scoring and the database size)")
    parser.add_argument("--strand", choices=STRANDS,
                        help="DNA query strands searched, as blastn's -strand: both (the "
                        "default for DNA), plus (as given) or minus (reverse complement); "
                        "protein: plus only")
    parser.add_argument("--device", default="auto", choices=DEVICES,
                        help="auto (default: a GPU when one is visible and its expected time "
                        "beats the CPU's), cpu, or gpu (every mode)")
    add_job_options(parser)


def run(args: argparse.Namespace) -> None:
    """Search, write the hits file, and (unless ``--quiet``) print the summary."""
    # search_in_process checks the GPU once it has read the input.
    start_gpu_early(args, auto=False, one_gpu=True)
    from ..backend import SEARCH_GPU, check_device
    from ..jobs.base import check_output
    from ..output import check_format, output_format, sequence_columns, write_hits

    outfmt = output_format(args.output, args.outfmt)  # "-" has no extension: Parquet
    stdout = to_stdout(args.output, outfmt,
                       instead="give --outfmt blast6 or sam, or a file name")
    inputs = [args.queries, args.database, args.matrix]
    if not stdout:
        check_output(args.output, force=args.force, inputs=inputs)
    check_summary(args, inputs=inputs, outputs=[args.output], stdout=stdout)
    fields = check_format(outfmt, args.columns, header=args.header)
    # Names and mode only: probing for a GPU here cost "auto" 0.3 s (the CUDA import and
    # driver) even where its cost rule then picks the CPU without touching CUDA.
    check_device(args.device, args.mode, here=False, kernels=SEARCH_GPU)
    db_alphabet = database_alphabet(args.database, args.alphabet)
    scoring = scoring_from_args(args, db_alphabet)
    if scoring.alphabet.name != db_alphabet:
        # Without this a DNA FASTA database would be read as protein under a protein matrix.
        from ..errors import InvalidSequenceError

        how = " (detected)" if args.alphabet == "auto" else ""
        raise InvalidSequenceError(
            f"{args.database}: the database is {db_alphabet}{how} but the scoring "
            f"({scoring.name}) is for {scoring.alphabet.name}")
    options = {"scoring": scoring, "mode": args.mode, "max_hits": args.max_hits,
               "min_score": args.min_score, "evalue": args.evalue, "device": args.device,
               "alphabet": args.alphabet, "map_unknown": args.map_unknown,
               "strand": args.strand, "return_stats": True}
    check_strand(args.strand, db_alphabet)  # before a FASTA database is ingested
    dask_workers = None
    with standard_input(args.queries) as queries:
        if outfmt in ("sam", "bam") or sequence_columns(fields):
            # Read once: the search's queries are SAM's reads (SEQ) and qseq's residues.
            from ..sequences.batch import as_batch

            queries = as_batch(queries, alphabet=args.alphabet, map_unknown=args.map_unknown)
        if in_process(args):
            hits, stats = search_here(queries, args.database, progress=progress_wanted(args),
                                      **options)
        else:
            from ..cluster import compute, worker_count
            from ..jobs.search import search

            with job_session(args) as client:
                hits, stats = compute(*search(queries, args.database, **options),
                                      client=client, progress=progress_wanted(args),
                                      desc="search")
                dask_workers = worker_count(client)
    # The database's records of the hits, for the columns that show residues.
    sequences = {"command_line": command_line(args), "queries": queries,
                 "subjects": args.database, "scoring": scoring}
    if stdout:
        from ..output import hit_lines, hits_table

        write_stdout(hit_lines(hits_table(hits), outfmt, columns=fields, header=args.header,
                               **sequences))
    else:
        write_hits(hits, args.output, outfmt=outfmt, columns=fields, header=args.header,
                   force=args.force, **sequences)
    if not args.quiet:
        where = "the standard output" if stdout else args.output
        print(f"wrote {len(hits):,} hits to {where} ({outfmt})", file=sys.stderr)
        print(search_summary(stats, dask_workers=dask_workers), file=sys.stderr)
    write_summary(args, "search", {"output": args.output, "format": outfmt,
                                   **search_figures(stats, dask_workers=dask_workers)})
