"""Build the large all-pairs set of issue 17: every 16S gene and seven seeded mutants of it.

From the 26,877 RefSeq 16S genes (``refseq_16S.fna.gz``) it writes 215,016 sequences:
each gene as it is, then ``--copies`` (7) copies of it, copy ``k`` of gene ``g`` with
divergence ``d`` drawn uniformly from [``--min-divergence``, ``--max-divergence``]
(0.5 % to 6 %) and ``round(d * length)`` edits, 80 % substitutions and 10 % each
one-residue insertions and deletions (:func:`swdask.testing.mutated_copy`).  Copy ``k`` of
gene ``g`` is named ``NAME_mK``; its edits come from ``random.Random(f"{seed}:{g}:{k}")``,
so the file is the same on every run and machine (gzip with mtime 0), and any one copy can
be rebuilt alone.  Letters are read as swdask reads them (IUPAC codes other than ACGT as
``N``): the mutants of a gene with ``N`` keep them, and an ``N`` may be substituted.

A realistic marker-gene set: clusters of close sequences (the mutants of one gene are
within about 12 % of each other, most pairs of a cluster within 3 %: what 97 % OTU
clustering sees), between clusters the real genes' own diversity.

Usage (about a minute)::

    python workflows/make_16s_large.py /work/shared/data/refseq_16S.fna.gz -o 16s_large.fna.gz
    python workflows/benchmarks/allpairs.py --fasta 16s_large.fna.gz --device gpu --repeats 1
"""
from __future__ import annotations

import argparse
import gzip
import random
import sys
from pathlib import Path


def make(source: Path, output: Path, *, copies: int = 7, seed: int = 17,
         divergence: tuple[float, float] = (0.005, 0.06)) -> int:
    """Write the set to ``output`` (gzip FASTA); returns the number of sequences."""
    from swdask.sequences.alphabet import DNA
    from swdask.sequences.fastx import iter_records
    from swdask.testing import mutated_copy

    written = 0
    with open(output, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as out:
        for g, (name, _, codes) in enumerate(iter_records(source, alphabet=DNA, map_unknown=True)):
            gene = DNA.decode(codes)
            records = [(name, gene)]
            for k in range(1, copies + 1):
                rng = random.Random(f"{seed}:{g}:{k}")
                d = rng.uniform(*divergence)
                records.append((f"{name}_m{k}", mutated_copy(gene, d, rng)))
            out.write("".join(f">{n}\n{s}\n" for n, s in records).encode())
            written += len(records)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="16S genes (FASTA, plain or gzip)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="gzip FASTA to write")
    parser.add_argument("--copies", type=int, default=7, help="mutants per gene (default 7)")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--min-divergence", type=float, default=0.005)
    parser.add_argument("--max-divergence", type=float, default=0.06)
    args = parser.parse_args(argv)
    if args.output.exists():
        raise SystemExit(f"{args.output}: already exists")
    n = make(args.source, args.output, copies=args.copies, seed=args.seed,
             divergence=(args.min_divergence, args.max_divergence))
    print(f"wrote {n:,} sequences to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
