"""The ``swdask`` command line: ingest, search, align, demo, warmup.

Every error on bad input prints one line (``swdask: error: ...``) naming the file,
record and position where there is one, exits with status 2, and leaves no partial
output behind.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from importlib.resources import files

from . import __version__
from .errors import SwdaskError
from .options import DEVICES, LONG_DEVICES

EXIT_BAD_INPUT = 2


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None


def _positive(text: str) -> int:
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return value


def _positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _add_scoring(parser, *, mode: bool = True):
    """The scoring options (and ``--mode`` unless ``mode=False``); returns their group, to
    which a command with other modes adds its own ``--mode``."""
    group = parser.add_argument_group("scoring (a gap of k residues costs OPEN + k * EXTEND)")
    group.add_argument("--matrix", help="BLOSUM45/50/62/80/90, PAM30/70/250, NUC.4.4, or an "
                       "NCBI-format matrix file (default: BLOSUM62 for protein)")
    group.add_argument("--gap-open", type=_whole, help="gap open cost, >= 0 (default 11 protein, 5 DNA)")
    group.add_argument("--gap-extend", type=_whole, help="cost per gap residue, >= 1 (default 1 protein, 2 DNA)")
    group.add_argument("--match", type=_whole, help="DNA match score (default 2)")
    group.add_argument("--mismatch", type=_whole, help="DNA mismatch score (default -3)")
    if mode:
        group.add_argument("--mode", default="local", choices=("local", "global", "semiglobal"),
                           help="local (Smith-Waterman, default), global (Needleman-Wunsch), or "
                           "semiglobal (end gaps free)")
    return group


def _add_input_options(parser):
    parser.add_argument("--alphabet", default="auto", choices=("auto", "protein", "dna"),
                        help="residue alphabet of the input (default: detected)")
    parser.add_argument("--map-unknown", action="store_true",
                        help="read letters outside the alphabet as X (protein) or N (DNA) "
                        "instead of failing")


def _add_cluster_options(parser):
    group = parser.add_argument_group("Dask (default: no Dask, every core of this process)")
    group.add_argument("--workers", type=_positive, metavar="N",
                       help="start a local Dask cluster of N workers (one per GPU on a GPU "
                       "machine) and print its dashboard link")
    group.add_argument("--scheduler", metavar="ADDRESS",
                       help="run on a running Dask scheduler (tcp://host:8786 or a scheduler "
                       "file); the database must be a store its workers can read")


_FLAGS = {"gap_open": "--gap-open", "gap_extend": "--gap-extend", "match/mismatch": "--match/--mismatch"}


def _scoring(args, alphabet):
    from .errors import ScoringError
    from .scoring import Scoring

    dna_scores = args.match is not None or args.mismatch is not None
    try:
        return Scoring(args.matrix, gap_open=args.gap_open, gap_extend=args.gap_extend,
                       match=args.match, mismatch=args.mismatch,
                       alphabet=None if (args.matrix or dna_scores) else alphabet)
    except ScoringError as exc:  # name the command-line flags, not the Python parameters
        message = str(exc)
        for name, flag in _FLAGS.items():
            message = message.replace(name, flag)
        raise ScoringError(message) from None


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line with exit status 2, like every other error."""

    def error(self, message):
        self.exit(EXIT_BAD_INPUT, f"swdask: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``swdask`` command."""
    parser = _Parser(
        prog="swdask",
        description="Exact Smith-Waterman / Needleman-Wunsch alignment, fast on CPUs "
        "and NVIDIA GPUs, scaled with Dask.")
    parser.add_argument("--version", action="version", version=f"swdask {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)

    p = sub.add_parser("ingest", help="FASTA/FASTQ (plain or gzip) -> Parquet sequence store",
                       description="Read FASTA/FASTQ files, check every letter, and write a "
                       "Parquet sequence store sorted by length.")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="FASTA/FASTQ files, plain or .gz")
    p.add_argument("-o", "--output", required=True, metavar="STORE", help="store folder to create")
    _add_input_options(p)
    p.add_argument("--partition-residues", type=_positive, default=16_777_216, metavar="N",
                   help="residues per Parquet file (default 16777216)")
    p.add_argument("--force", action="store_true", help="replace an existing store")
    p.add_argument("--quiet", action="store_true", help="no progress bar")

    p = sub.add_parser("search", help="search queries against a database",
                       description="Exact search of every query against every database "
                       "sequence; full alignments of each query's best hits.")
    p.add_argument("queries", metavar="QUERIES", help="FASTA/FASTQ file or sequence store")
    p.add_argument("database", metavar="DB", help="sequence store, or FASTA/FASTQ file "
                   "(ingested to a temporary store)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="output file")
    from .output import BLAST_KEYWORDS, OUTFMTS

    p.add_argument("--outfmt", default="parquet", choices=OUTFMTS,
                   help="parquet (hits table, 0-based half-open), blast6 (BLAST -outfmt 6, "
                   "1-based inclusive) or sam (SAM v1.6: queries as reads, subjects as "
                   "references, 1-based); default parquet")
    p.add_argument("--columns", metavar='"KEYWORD ..."',
                   help="blast6 columns, BLAST's -outfmt \"6 ...\" keywords, e.g. \"std qlen slen "
                   "cigar\"; std = the 12 standard columns (the default); keywords: "
                   f"{' '.join(BLAST_KEYWORDS)}")
    _add_scoring(p)
    p.add_argument("--max-hits", type=_positive, default=50, metavar="N",
                   help="hits kept per query (default 50)")
    p.add_argument("--min-score", type=_whole, metavar="S",
                   help="report only hits scoring at least S (default 1 for local mode)")
    p.add_argument("--evalue", type=_positive_number, metavar="E",
                   help="report only hits with an E-value of at most E (local mode; BLAST's "
                   "Karlin-Altschul statistics for the scoring and the database size)")
    p.add_argument("--device", default="auto", choices=DEVICES,
                   help="auto (default: a GPU when one is visible, local mode), cpu, or gpu")
    _add_cluster_options(p)
    _add_input_options(p)
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")

    p = sub.add_parser("align", help="align one pair and print the alignment",
                       description="Align two sequences (literal letters, or the first record "
                       "of a FASTA/FASTQ file) and print the alignment.")
    p.add_argument("a", metavar="A", help="query: a sequence or a FASTA/FASTQ file")
    p.add_argument("b", metavar="B", help="subject: a sequence or a FASTA/FASTQ file")
    _add_scoring(p)
    _add_input_options(p)
    p.add_argument("--width", type=_positive, default=60, help="columns per block (default 60)")

    p = sub.add_parser("demo", help="search bundled Swiss-Prot queries against a bundled "
                       "database and print the best hits",
                       description="The main job on bundled real data: 5 Swiss-Prot queries "
                       "against 2,000 Swiss-Prot proteins (UniProt, CC BY 4.0).")
    p.add_argument("--hits", type=_positive, default=3, help="hits shown per query (default 3)")
    _add_cluster_options(p)
    p.add_argument("-o", "--output", metavar="OUT", help="also write the hits table (Parquet)")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    p = sub.add_parser("warmup", help="build every kernel now, so that later runs start "
                       "without compiling",
                       description="Compile every CUDA kernel shape the jobs can launch (in "
                       "parallel processes) and run each job once on the bundled data, so "
                       "that later processes on this machine load the compiled kernels "
                       "instead of compiling them. The kernels are kept in SWDASK_CACHE_DIR "
                       "(default: the user's cache folder).")
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="the kernels to build (default auto: the GPU's when one is visible)")
    p.add_argument("--jobs", type=_positive, default=None,
                   help="processes compiling at once (default: the CPU cores)")
    _add_allpairs_parser(sub)


    _add_significance_parser(sub)


    _add_align_long_parser(sub)
    return parser


def _tile_arg(text: str):
    return "auto" if text == "auto" else _positive(text)


def _add_align_long_parser(sub):
    p = sub.add_parser("align-long", help="best local alignment of two long sequences "
                       "(megabase DNA), tiled over CPU and GPU Dask workers",
                       description="Exact Smith-Waterman of two long sequences (the first "
                       "record of each file): the matrix cut into tiles that Dask runs on GPU "
                       "and CPU workers at once; with --traceback the alignment, recovered in "
                       "bounded memory.")
    p.add_argument("a", metavar="A", help="query: FASTA/FASTQ file (first record)")
    p.add_argument("b", metavar="B", help="subject: FASTA/FASTQ file (first record)")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="one-row Parquet table (schema long_alignments)")
    p.add_argument("--tile", type=_tile_arg, default="auto", metavar="auto|N",
                   help="tile side in residues, or auto (default: from the cost model)")
    p.add_argument("--device", default="auto", choices=LONG_DEVICES,
                   help="auto (default: both when a GPU is visible, else cpu), cpu, gpu, or both")
    p.add_argument("--traceback", action="store_true",
                   help="also recover the alignment: CIGAR, identity (and --sam)")
    p.add_argument("--sam", metavar="SAM", help="with --traceback, also write the alignment as SAM")
    p.add_argument("--reverse-complement", action="store_true",
                   help="also align A to B's reverse complement (DNA); report the better strand")
    _add_scoring(p, mode=False)  # local alignment only
    p.add_argument("--alphabet", default="auto", choices=("auto", "protein", "dna"),
                   help="residue alphabet of the input (default: detected)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run the tiles on a running Dask "
                   "scheduler (GPU workers with --resources GPU=1); default: workers in this process")
    p.add_argument("--force", action="store_true", help="replace existing output files")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")


def _cmd_align_long(args):
    import shlex

    import pyarrow.parquet as pq

    from .long_align import align_long
    from .output import atomic_path, check_output

    check_output(args.output, force=args.force)
    if args.sam and not args.traceback:
        raise ValueError("--sam needs --traceback")
    if args.sam:
        check_output(args.sam, force=args.force)
    alphabet = args.alphabet if args.alphabet != "auto" else _file_alphabet(args)
    scoring = _scoring(args, alphabet or "dna")
    client = None
    if args.scheduler:
        from .cluster import cluster

        client = cluster(scheduler=args.scheduler)
    try:
        result = align_long(args.a, args.b, scoring=scoring, tile=args.tile, device=args.device,
                            traceback=args.traceback, reverse_complement=args.reverse_complement,
                            client=client, progress=_progress_wanted(args))
    finally:
        if client is not None:
            client.close()
    argv = getattr(args, "argv", None)
    with atomic_path(args.output, force=args.force) as tmp:
        pq.write_table(result.to_table(), tmp)
        if args.sam:
            with atomic_path(args.sam, force=args.force) as sam_tmp:
                with open(sam_tmp, "w") as handle:
                    handle.writelines(result.sam_lines(
                        None if argv is None else shlex.join(["swdask", *argv])))
    if not args.quiet:
        where = (f"query {result.query_start}..{result.query_end}, subject "
                 f"{result.subject_start}..{result.subject_end}" if args.traceback else
                 f"ends at query {result.query_end}, subject {result.subject_end}")
        extra = f", {result.pident:.2f}% identity, CIGAR of {len(result.cigar):,} characters" \
            if args.traceback else ""
        gcups = result.cells / result.score_seconds / 1e9 if result.score_seconds else 0.0
        print(f"score {result.score} on strand {result.strand}: {where}{extra}", file=sys.stderr)
        print(f"{result.cells:,} cells in {result.score_seconds:.2f} s ({gcups:.2f} GCUPS) on "
              f"{result.device}, {result.tile_rows} x {result.tile_cols} tiles; wrote "
              f"{args.output}" + (f" and {args.sam}" if args.sam else ""), file=sys.stderr)


def _database_alphabet(path, alphabet):
    from .fastx import check_readable, sniff_alphabet
    from .store import SequenceStore

    if alphabet != "auto":
        return alphabet
    if os.path.isdir(path):
        return SequenceStore.open(path).alphabet.name
    check_readable(path)
    return sniff_alphabet([path]).name


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _progress_wanted(args) -> bool:
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


def _cmd_ingest(args):
    from .store import ingest

    store = ingest(args.inputs, args.output, alphabet=args.alphabet,
                   partition_residues=args.partition_residues, map_unknown=args.map_unknown,
                   force=args.force, progress=_progress_wanted(args))
    print(f"wrote {store.path}: {store.n_records:,} {store.alphabet.name} sequences, "
          f"{store.n_residues:,} residues in {len(store.partitions)} Parquet file(s)")


def _summary(stats):
    return (f"{stats.n_queries:,} queries x {stats.n_subjects:,} subjects, "
            f"{stats.cells:,} cells: score pass {stats.score_seconds:.2f} s "
            f"({stats.kernel_gcups:.2f} GCUPS), traceback {stats.traceback_seconds:.2f} s, "
            f"total {stats.total_seconds:.2f} s ({stats.gcups:.2f} GCUPS) on {stats.device}"
            f"{f' ({stats.device_reason})' if stats.device_reason else ''}, "
            f"{stats.workers} worker(s)")


def _cmd_search(args):
    import shlex

    here = args.workers is None and args.scheduler is None
    if here and args.device == "gpu":
        from . import gpu

        # The GPU's first use (0.6 s) overlaps the imports and the reading of the input;
        # search_in_process checks the GPU once it has read them.
        gpu.start_early()
    from .output import check_format, check_output, write_hits
    from .search import check_device

    check_output(args.output, force=args.force)
    check_format(args.outfmt, args.columns)
    # Names and mode only: probing for a GPU here cost "auto" 0.3 s (the CUDA import and
    # driver) even where its cost rule then picks the CPU without touching CUDA.
    check_device(args.device, args.mode, here=False)
    db_alphabet = _database_alphabet(args.database, args.alphabet)
    scoring = _scoring(args, db_alphabet)
    if scoring.alphabet.name != db_alphabet:
        # Without this a DNA FASTA database would be read as protein under a protein matrix.
        from .errors import InvalidSequenceError

        how = " (detected)" if args.alphabet == "auto" else ""
        raise InvalidSequenceError(
            f"{args.database}: the database is {db_alphabet}{how} but the scoring "
            f"({scoring.name}) is for {scoring.alphabet.name}")
    options = dict(scoring=scoring, mode=args.mode, max_hits=args.max_hits,
                   min_score=args.min_score, evalue=args.evalue, device=args.device,
                   alphabet=args.alphabet, map_unknown=args.map_unknown, return_stats=True)
    if args.workers is None and args.scheduler is None:
        hits, stats = _search_here(args.queries, args.database, progress=_progress_wanted(args),
                                   **options)
    else:
        from .cluster import compute, session
        from .search import search

        with session(args.workers, scheduler=args.scheduler, device=args.device,
                     announce=None if args.quiet else _to_stderr) as client:
            hits, stats = compute(*search(args.queries, args.database, **options),
                                  client=client, progress=_progress_wanted(args))
    argv = getattr(args, "argv", None)
    write_hits(hits, args.output, outfmt=args.outfmt, columns=args.columns, force=args.force,
               command_line=None if argv is None else shlex.join(["swdask", *argv]))
    if not args.quiet:
        print(f"wrote {len(hits):,} hits to {args.output} ({args.outfmt})", file=sys.stderr)
        print(_summary(stats), file=sys.stderr)


def _cmd_align(args):
    from .align import align

    alphabet = None if args.alphabet == "auto" else args.alphabet
    scoring = None
    if args.matrix or args.match is not None or args.mismatch is not None \
            or args.gap_open is not None or args.gap_extend is not None:
        if alphabet is None and not args.matrix and args.match is None and args.mismatch is None:
            from .alphabet import detect_alphabet

            sample = "".join(x for x in (args.a, args.b) if not os.path.exists(x))
            alphabet = _file_alphabet(args) or detect_alphabet(sample.encode()).name
        scoring = _scoring(args, alphabet)
    aln = align(args.a, args.b, scoring=scoring, mode=args.mode, alphabet=alphabet,
                map_unknown=args.map_unknown)
    print(aln.format(width=args.width))


def _file_alphabet(args):
    from .fastx import sniff_alphabet

    paths = [x for x in (args.a, args.b) if os.path.isfile(x)]
    return sniff_alphabet(paths).name if paths else None


def _search_here(queries, database, **options):
    """A search without ``--workers`` or ``--scheduler``: the in-process engine
    (:func:`swdask.search_in_process`, the same hits as the Dask graph).  Its kernels take
    every core already, so Dask's threads would add only their start-up: importing Dask
    takes about a second on a small machine, longer than a whole small search."""
    if options.get("device", "auto") != "gpu":
        from .kernels.cpu import prebuild

        # Before the heavy imports: on a first run the helper has a head start.
        prebuild.start(prebuild.SEARCH)
    from .search import search_in_process

    return search_in_process(queries, database, **options)


def _cmd_demo(args):
    from .output import check_output, write_hits

    if args.output:
        check_output(args.output, force=args.force)
    data = files("swdask") / "data"
    queries, database = data / "demo_queries.fasta", data / "demo_db.fasta.gz"
    print(f"swdask {__version__} demo: {queries.name} against {database.name} "
          "(Swiss-Prot, UniProt CC BY 4.0), BLOSUM62 11/1, local")
    started = time.perf_counter()
    if args.workers is None and args.scheduler is None:
        hits, stats = _search_here(queries, database, max_hits=max(args.hits, 1),
                                   return_stats=True)
    else:
        from .cluster import compute, session
        from .search import search

        with session(args.workers, scheduler=args.scheduler, announce=print) as client:
            hits, stats = compute(*search(queries, database, max_hits=max(args.hits, 1),
                                          return_stats=True), client=client)
    shown = hits[hits["rank"] <= args.hits]
    columns = ["query", "subject", "score", "identity", "query_start", "query_end",
               "subject_start", "subject_end", "cigar"]
    table = shown[columns].copy()
    table["identity"] = (100 * table["identity"].astype(float)).round(1)
    table["cigar"] = table["cigar"].map(lambda c: c if len(c) <= 24 else c[:21] + "...")
    print(table.to_string(index=False))
    print(_summary(stats))
    print(f"(wall time {time.perf_counter() - started:.1f} s, including one-time JIT "
          "compilation on a first run)")
    if args.output:
        write_hits(hits, args.output, force=args.force)
        print(f"wrote {len(hits)} hits to {args.output}")


def _cmd_warmup(args):
    from .warmup import warmup

    started = time.perf_counter()
    report = warmup(args.device, jobs=args.jobs, progress=print)
    print(f"{report.summary()}; {time.perf_counter() - started:.1f} s in all")


COMMANDS = {"ingest": _cmd_ingest, "search": _cmd_search, "align": _cmd_align, "demo": _cmd_demo,
            "warmup": _cmd_warmup}
COMMANDS["align-long"] = _cmd_align_long


# --------------------------------------------------------------------------------------
# swdask allpairs: all-against-all alignment above an identity threshold
# --------------------------------------------------------------------------------------


def _identity(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text!r}")
    return value


def _add_allpairs_parser(sub):
    p = sub.add_parser("allpairs", help="every pair of a sequence set above an identity threshold",
                       description="All-against-all alignment (e.g. 16S genes): exact scores of "
                       "every pair the lengths allow, traceback of the pairs over the identity "
                       "bound, and the pairs whose alignment reaches --min-identity; one Parquet "
                       "file per block pair in OUT, resumable with --resume.")
    p.add_argument("source", metavar="STORE_OR_FASTA", help="sequence store or FASTA/FASTQ file")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="output folder (one Parquet file per block pair and _manifest.json)")
    group = _add_scoring(p, mode=False)
    group.add_argument("--mode", default="global", choices=("global", "local"),
                       help="global (Needleman-Wunsch, default; the identity bound skips pairs "
                       "and blocks) or local (Smith-Waterman; give --min-score)")
    p.add_argument("--min-identity", type=_identity, default=0.97, metavar="T",
                   help="keep pairs whose alignment has matches / columns >= T (default 0.97)")
    p.add_argument("--min-score", type=_whole, metavar="S", help="and a score of at least S")
    p.add_argument("--cigar", action="store_true", help="fill the cigar column")
    p.add_argument("--block-size", type=_positive, default=2048, metavar="N",
                   help="sequences per block; a block pair is one task and one file (default 2048)")
    p.add_argument("--device", default="auto", choices=DEVICES,
                   help="auto (default: a GPU when one is visible and the mode is global), cpu, gpu")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in OUT, skipping block pairs already written")
    _add_cluster_options(p)
    _add_input_options(p)
    p.add_argument("--force", action="store_true", help="replace an existing OUT")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")


def _cmd_allpairs(args):
    from .allpairs import _check_device, write_all_pairs
    from .cluster import session

    if os.path.exists(args.output) and not (args.resume or args.force):
        from .errors import OutputExistsError

        raise OutputExistsError(f"{args.output}: already exists (use --resume to continue it, or --force)")
    _check_device(args.device, args.mode, here=args.workers is None and args.scheduler is None)
    alphabet = _database_alphabet(args.source, args.alphabet)
    scoring = _scoring(args, alphabet)
    started = time.perf_counter()
    with session(args.workers, scheduler=args.scheduler, device=args.device,
                 announce=None if args.quiet else _to_stderr) as client:
        stats = write_all_pairs(args.source, args.output, scoring=scoring, mode=args.mode,
                                min_identity=args.min_identity, min_score=args.min_score,
                                device=args.device, cigar=args.cigar, block_size=args.block_size,
                                alphabet=args.alphabet, map_unknown=args.map_unknown,
                                resume=args.resume, force=args.force, client=client,
                                progress=_progress_wanted(args))
    wall = time.perf_counter() - started
    if not args.quiet:
        print(f"wrote {stats.hits:,} pairs to {args.output}: {stats.n_sequences:,} sequences, "
              f"{stats.pairs:,} pairs, {stats.pairs_scored:,} scored ({stats.cells:,} cells, "
              f"{stats.kernel_gcups:.2f} GCUPS in the kernel), {stats.candidates:,} traced back, "
              f"{stats.block_pairs_skipped:,} of {stats.block_pairs + stats.block_pairs_skipped:,} "
              f"block pairs skipped by length, {wall:.1f} s ({stats.pairs / max(wall, 1e-9):,.0f} "
              f"pairs/s) on {stats.device}", file=sys.stderr)


COMMANDS["allpairs"] = _cmd_allpairs


def main(argv=None) -> int:
    """Run the ``swdask`` command; returns the exit status.

    As the installed command (``argv=None``) it ends the process itself once the command
    is done, output flushed and exit handlers run: Python's own shutdown then frees the
    modules of pandas, pyarrow and Numba one by one, which took 0.4 to 0.7 s of every
    run on a 2-core machine.
    """
    status = _main(argv)
    if argv is None:
        _exit(status)
    return status


def _exit(status: int) -> None:
    """End the process now with ``status``: flush the standard streams, run the
    ``atexit`` handlers (which remove temporary stores), and skip the interpreter's
    clean-up of its modules, which has nothing left to write."""
    import atexit

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing to keep
            pass
    atexit._run_exitfuncs()
    os._exit(status)


def _main(argv) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # usage errors, --help, --version
        return exit_.code if isinstance(exit_.code, int) else EXIT_BAD_INPUT
    args.argv = [str(a) for a in (sys.argv[1:] if argv is None else argv)]  # for SAM's @PG CL
    try:
        COMMANDS[args.command](args)
    except (SwdaskError, ValueError, FileNotFoundError, FileExistsError) as exc:
        print(f"swdask: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("swdask: interrupted; no output written", file=sys.stderr)
        return 130
    return 0




# -- significance (pairwise statistical significance) -----------------------------------


def _add_significance_parser(sub):
    p = sub.add_parser("significance", help="P-values of (query, subject) pairs from "
                       "shuffled subjects (PSSE)",
                       description="Pairwise statistical significance: each subject of a "
                       "pair shuffled N times (composition kept), the query aligned to every "
                       "shuffle, a Gumbel fitted by censored maximum likelihood, and the real "
                       "score's P-value. Writes a Parquet table (query, subject, score, mu, "
                       "lambda, p_value, n_shuffles, seed).")
    p.add_argument("queries", metavar="QUERIES", help="FASTA/FASTQ file or sequence store")
    p.add_argument("subjects", metavar="SUBJECTS", help="FASTA/FASTQ file or sequence store")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="output Parquet file")
    p.add_argument("--shuffles", type=_positive, default=1000, metavar="N",
                   help="shuffles of each subject, >= 2 (default 1000)")
    p.add_argument("--seed", type=_whole, default=0, metavar="S",
                   help="seed of the shuffles, 0 <= S < 2**63 (default 0)")
    p.add_argument("--pairs", default="all", metavar="all|PAIRS.tsv|HITS.parquet",
                   help="all (every query x every subject, the default), a file of two "
                   "tab-separated record names per line (query, subject; no header), or a "
                   "search's hits table (.parquet) to re-rank its hits")
    p.add_argument("--pssm", metavar="FILE", help="PSI-BLAST ASCII PSSM (-out_ascii_pssm) of "
                   "a query: replaces the matrix for the query whose sequence it is")
    _add_scoring(p)
    p.add_argument("--device", default="auto", choices=DEVICES,
                   help="auto (default: a GPU when one is visible), cpu, or gpu")
    _add_cluster_options(p)
    _add_input_options(p)
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")


def _cmd_significance(args):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .cluster import compute, session
    from .output import atomic_path, check_output
    from .parquet_schemas import SIGNIFICANCE, check_table
    from .significance import _check_options, significance

    check_output(args.output, force=args.force)
    if args.mode != "local":
        raise ValueError(f"--mode {args.mode}: significance uses local (Smith-Waterman) scores")
    _check_options(args.shuffles, args.seed, args.device, args.pairs)
    scoring = _scoring(args, _database_alphabet(args.queries, args.alphabet))
    tick = time.perf_counter()
    with session(args.workers, scheduler=args.scheduler, device=args.device,
                 announce=None if args.quiet else _to_stderr) as client:
        frame = significance(args.queries, args.subjects, scoring=scoring, shuffles=args.shuffles,
                             seed=args.seed, pairs=args.pairs, pssm=args.pssm, device=args.device,
                             alphabet=args.alphabet, map_unknown=args.map_unknown)
        (table,) = compute(frame, client=client, progress=_progress_wanted(args))
    table = check_table(pa.Table.from_pandas(table, preserve_index=False), SIGNIFICANCE,
                        where="significance")
    with atomic_path(args.output, force=args.force) as tmp:
        pq.write_table(table, tmp)
    if not args.quiet:
        print(f"wrote {table.num_rows:,} pairs to {args.output} ({args.shuffles} shuffles each, "
              f"{time.perf_counter() - tick:.2f} s)", file=sys.stderr)


COMMANDS["significance"] = _cmd_significance


if __name__ == "__main__":
    sys.exit(main())
