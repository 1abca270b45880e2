"""``swdask ingest``: FASTA/FASTQ files to a Parquet sequence store."""
from __future__ import annotations

import argparse

from .common import add_input_options, positive, progress_wanted

NAME = "ingest"
HELP = "FASTA/FASTQ (plain or gzip) -> Parquet sequence store"
DESCRIPTION = """Read FASTA/FASTQ files, check every letter, and write a Parquet sequence store
sorted by length."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``swdask ingest`` to its ``parser``."""
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="FASTA/FASTQ files, plain or .gz")
    parser.add_argument("-o", "--output", required=True, metavar="STORE",
                        help="store folder to create")
    add_input_options(parser)
    parser.add_argument("--partition-residues", type=positive, default=16_777_216, metavar="N",
                        help="residues per Parquet file (default 16777216)")
    parser.add_argument("--force", action="store_true", help="replace an existing store (only "
                        "a store) once the new one is complete")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> None:
    """Ingest ``args.inputs`` into the store ``args.output`` and print what it holds."""
    from ..sequences.ingest import ingest

    store = ingest(args.inputs, args.output, alphabet=args.alphabet,
                   partition_residues=args.partition_residues, map_unknown=args.map_unknown,
                   force=args.force, progress=progress_wanted(args))
    print(f"wrote {store.path}: {store.n_records:,} {store.alphabet.name} sequences, "
          f"{store.n_residues:,} residues in {len(store.partitions)} Parquet file(s)")
