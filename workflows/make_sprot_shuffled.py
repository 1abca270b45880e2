"""Build the shuffled Swiss-Prot database of issue 16: real lengths, no repeated sequence.

A replicated database (``gpu_search.py``'s Swiss-Prot x 21) holds every sequence many
times over, which a search engine could exploit and which makes its top hits copies of
one another.  This one keeps what matters for speed, the length spread and residue
composition of real proteins, without repeats: from a protein FASTA (``sprot12071.fasta.gz``)
it writes ``--copies`` copies of every sequence, copy ``k`` (1 ... K) of record ``i``
(0-based, in file order) named ``NAME_sK`` and its residues shuffled by
``random.Random(f"{seed}:{i}:{k}").shuffle``: each copy holds the same residues as its
original (the same multiset), in an order of its own, the same on every run and machine
(gzip with mtime 0), and any one copy can be rebuilt alone.  Letters are written as swdask
reads them (upper case; ``U``, ``O``, ``J``, ``B``, ``Z``, ``X`` kept).

By default ``--copies`` is the fewest that reach ``--min-residues`` (100 million), computed
from the input: Swiss-Prot 12k (4,886,913 residues) gives 21 copies, 253,491 sequences and
102,625,173 residues.

Usage (about 20 s on one core; the comparison with CUDASW++4.0 is in ``docs/benchmarks.md``)::

    python workflows/make_sprot_shuffled.py tests/data/sprot12071.fasta.gz \\
        -o sprot_shuffled.fasta.gz
    python workflows/benchmarks/gpu_search.py --db sprot_shuffled.fasta.gz \\
        --queries .anchors/cudasw4/allqueries.fasta --cudasw4 .anchors/cudasw4
"""
from __future__ import annotations

import argparse
import gzip
import math
import os
import random
import sys
from pathlib import Path

MIN_RESIDUES = 100_000_000


def default_copies(residues: int, min_residues: int = MIN_RESIDUES) -> int:
    """The fewest copies of ``residues`` that hold at least ``min_residues`` (at least 1).

    >>> default_copies(4_886_913)
    21
    >>> default_copies(50, 100), default_copies(51, 100), default_copies(200, 100)
    (2, 2, 1)
    """
    if residues <= 0:
        raise ValueError(f"the input holds no residues ({residues})")
    return max(1, math.ceil(min_residues / residues))


def count_residues(source: Path) -> int:
    """The residues of every record of the protein FASTA ``source``."""
    from swdask.sequences.alphabet import PROTEIN
    from swdask.sequences.fastx import iter_records

    return sum(len(codes) for _, _, codes in iter_records(source, alphabet=PROTEIN))


def make(source: Path, output: Path, *, copies: int | None = None, seed: int = 16,
         min_residues: int = MIN_RESIDUES) -> tuple[int, int, int]:
    """Write the shuffled copies of ``source`` to ``output`` (gzip FASTA).

    Parameters
    ----------
    source : Path
        A protein FASTA (plain or gzip).
    output : Path
        The gzip FASTA to write (through a temporary name beside it: a cut-off run
        leaves no partial file under this name).
    copies : int, optional
        Shuffled copies of every record (default: :func:`default_copies` of the input's
        residues and ``min_residues``).
    seed : int, default 16
        The seed of every copy's generator (``f"{seed}:{i}:{k}"``).
    min_residues : int, default 100,000,000
        What the default ``copies`` must reach.

    Returns
    -------
    tuple of int
        ``(copies, sequences written, residues written)``.
    """
    from swdask.sequences.alphabet import PROTEIN
    from swdask.sequences.fastx import iter_records

    if copies is None:
        copies = default_copies(count_residues(source), min_residues)
    if copies < 1:
        raise ValueError(f"copies must be at least 1, not {copies}")
    partial = output.with_name(output.name + ".part")
    written = residues = 0
    try:
        with open(partial, "wb") as raw, \
                gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as out:
            for i, (name, _, codes) in enumerate(iter_records(source, alphabet=PROTEIN)):
                letters = PROTEIN.decode(codes)
                records = []
                for k in range(1, copies + 1):
                    shuffled = list(letters)
                    random.Random(f"{seed}:{i}:{k}").shuffle(shuffled)
                    records.append(f">{name}_s{k}\n{''.join(shuffled)}\n")
                out.write("".join(records).encode())
                written += copies
                residues += copies * len(letters)
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)
    return copies, written, residues


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="protein FASTA (plain or gzip)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="gzip FASTA to write")
    parser.add_argument("--copies", type=int, default=None,
                        help="shuffled copies of every sequence (default: the fewest that "
                        "reach --min-residues)")
    parser.add_argument("--min-residues", type=float, default=MIN_RESIDUES,
                        help="residues the default --copies reaches (default 1e8)")
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args(argv)
    if args.output.exists():
        raise SystemExit(f"{args.output}: already exists")
    if args.copies is not None and args.copies < 1:
        parser.error(f"--copies must be at least 1, not {args.copies}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    copies, n, residues = make(args.source, args.output, copies=args.copies, seed=args.seed,
                               min_residues=int(args.min_residues))
    print(f"wrote {n:,} sequences ({copies} shuffled copies of each), {residues:,} residues, "
          f"to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
