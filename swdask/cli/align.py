"""``swdask align``: one pair, the alignment printed."""
from __future__ import annotations

import argparse
import os

from .common import add_input_options, add_scoring, file_alphabet, positive, scoring_from_args

NAME = "align"
HELP = "align one pair and print the alignment"
DESCRIPTION = """Align two sequences (literal letters, or the first record of a FASTA/FASTQ
file) and print the alignment."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``swdask align`` to its ``parser``."""
    parser.add_argument("a", metavar="A", help="query: a sequence or a FASTA/FASTQ file")
    parser.add_argument("b", metavar="B", help="subject: a sequence or a FASTA/FASTQ file")
    add_scoring(parser)
    add_input_options(parser)
    parser.add_argument("--width", type=positive, default=60, help="columns per block (default 60)")


def run(args: argparse.Namespace) -> None:
    """Align ``args.a`` with ``args.b`` and print the alignment."""
    from ..jobs.align import align

    alphabet = None if args.alphabet == "auto" else args.alphabet
    scoring = None
    if args.matrix or args.match is not None or args.mismatch is not None \
            or args.gap_open is not None or args.gap_extend is not None:
        if alphabet is None and not args.matrix and args.match is None and args.mismatch is None:
            from ..sequences.alphabet import detect_alphabet

            sample = "".join(x for x in (args.a, args.b) if not os.path.exists(x))
            alphabet = file_alphabet(args) or detect_alphabet(sample.encode()).name
        scoring = scoring_from_args(args, alphabet)
    aln = align(args.a, args.b, scoring=scoring, mode=args.mode, alphabet=alphabet,
                map_unknown=args.map_unknown)
    print(aln.format(width=args.width))
