"""Regenerate the test data (tests/data/) and the demo data (swdask/data/).

Every file is a subset of the real public data in ``/work/shared/data`` (see its
README.md for provenance and licences), chosen by fixed rules and a fixed seed, so the
output is byte-for-byte reproducible (gzip files are written with mtime 0 and no name).
Records are copied unchanged, line wrapping included.

Usage::

    python tests/data/make_data.py [--source /work/shared/data]
"""
from __future__ import annotations

import argparse
import gzip
import io
import random
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEMO = REPO / "swdask" / "data"
SEED = 20240501

#: Target lengths of the 12 test queries; the record of sprot196 closest to each is taken.
QUERY_TARGETS = [50, 75, 100, 144, 200, 250, 300, 375, 450, 600, 800, 1000]
#: The test queries whose own records go into the test database (true hits).
QUERIES_IN_DB = [144, 375, 1000]
#: Target lengths of the 5 demo queries.
DEMO_TARGETS = [100, 200, 300, 450, 600]


def read_blocks(path: Path) -> list[tuple[str, str, str]]:
    """``(name, sequence, raw text)`` of every record of a FASTA file, in file order."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="ascii") as handle:
        text = handle.read()
    records = []
    for chunk in re.split(r"^(?=>)", text, flags=re.MULTILINE):
        if not chunk:
            continue
        header, _, body = chunk.partition("\n")
        records.append((header[1:].split()[0], body.replace("\n", ""), chunk))
    return records


def closest(records, targets, exclude=()):
    """Indices of the records whose lengths are closest to each target (first wins ties)."""
    chosen = []
    for target in targets:
        best = min(
            (i for i in range(len(records)) if i not in chosen and i not in exclude),
            key=lambda i: (abs(len(records[i][1]) - target), i),
        )
        chosen.append(best)
    return chosen


def write_fasta(path: Path, records) -> None:
    data = "".join(raw for _, _, raw in records).encode("ascii")
    if path.suffix == ".gz":
        buffer = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as gz:
            gz.write(data)
        data = buffer.getvalue()
    path.write_bytes(data)
    print(f"{path.relative_to(REPO)}: {len(records)} records, {len(data):,} bytes")


def make_test_data(source: Path) -> None:
    rng = random.Random(SEED)
    sprot196 = read_blocks(source / "sprot196.fasta")
    sprot = read_blocks(source / "sprot12071.fasta.gz")

    query_idx = closest(sprot196, QUERY_TARGETS)
    queries = [sprot196[i] for i in query_idx]
    write_fasta(HERE / "sprot_queries.fasta", queries)

    # Database: the own records of 3 queries (true hits), every record with B or Z,
    # 8 records with X, the rest drawn at random; no other sprot196 record.
    by_name = {name: i for i, (name, _, _) in enumerate(sprot)}
    query_names = {name for name, _, _ in sprot196}
    hit_names = [queries[QUERY_TARGETS.index(t)][0] for t in QUERIES_IN_DB]
    keep = {by_name[name] for name in hit_names}
    keep |= {i for i, (_, seq, _) in enumerate(sprot) if "B" in seq or "Z" in seq}
    with_x = [i for i, (name, seq, _) in enumerate(sprot) if "X" in seq and i not in keep and name not in query_names]
    keep |= set(rng.sample(with_x, 8))
    rest = [i for i, (name, _, _) in enumerate(sprot) if i not in keep and name not in query_names]
    keep |= set(rng.sample(rest, 400 - len(keep)))
    write_fasta(HERE / "sprot_db.fasta.gz", [sprot[i] for i in sorted(keep)])

    # 16S: 20 records with IUPAC codes or N, 180 others at random.
    rrna = read_blocks(source / "refseq_16S.fna.gz")
    ambiguous = [i for i, (_, seq, _) in enumerate(rrna) if re.search("[^ACGTN]", seq)]
    with_n = [i for i, (_, seq, _) in enumerate(rrna) if "N" in seq and i not in ambiguous]
    keep = set(rng.sample(ambiguous, 12)) | set(rng.sample(with_n, 8))
    rest = [i for i in range(len(rrna)) if i not in keep]
    keep |= set(rng.sample(rest, 200 - len(keep)))
    write_fasta(HERE / "16S_200.fna.gz", [rrna[i] for i in sorted(keep)])


def make_demo_data(source: Path) -> None:
    rng = random.Random(SEED + 1)
    sprot196 = read_blocks(source / "sprot196.fasta")
    sprot = read_blocks(source / "sprot12071.fasta.gz")
    queries = [sprot196[i] for i in closest(sprot196, DEMO_TARGETS)]
    write_fasta(DEMO / "demo_queries.fasta", queries)
    by_name = {name: i for i, (name, _, _) in enumerate(sprot)}
    keep = {by_name[name] for name, _, _ in queries}  # every sprot196 record is in sprot12071
    rest = [i for i in range(len(sprot)) if i not in keep]
    keep |= set(rng.sample(rest, 2000 - len(keep)))
    write_fasta(DEMO / "demo_db.fasta.gz", [sprot[i] for i in sorted(keep)])


#: The chromosome window of the long-alignment tests: 0-based start and length.
WINDOW_START, WINDOW_LENGTH = 1_200_000, 40_000


def make_chromosome_window(source: Path) -> None:
    """40 kb of the NCTC 11397 chromosome, wrapped at 80 like the source."""
    (name, sequence, raw), = read_blocks(source / "NCTC11397_chromosome.fna.gz")
    window = sequence[WINDOW_START:WINDOW_START + WINDOW_LENGTH]
    header = (f">{name}:{WINDOW_START + 1}-{WINDOW_START + WINDOW_LENGTH} Corynebacterium "
              "diphtheriae NCTC11397 chromosome, window")
    body = "".join(window[k:k + 80] + "\n" for k in range(0, len(window), 80))
    write_fasta(HERE / "NCTC11397_window40k.fna.gz", [(name, window, header + "\n" + body)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=Path("/work/shared/data"))
    args = parser.parse_args()
    DEMO.mkdir(exist_ok=True)
    make_test_data(args.source)
    make_demo_data(args.source)
    make_chromosome_window(args.source)


if __name__ == "__main__":
    main()
