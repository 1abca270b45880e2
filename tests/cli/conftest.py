"""Small real inputs for every writing subcommand, made once per test module: the outputs'
guarantees are checked on runs of a few seconds."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from swdask.sequences.alphabet import DNA
from tests.helpers import QUERIES, SPROT_DB, fasta_records, gene_windows, window_codes, write_fasta


def make_inputs(folder: Path) -> SimpleNamespace:
    """Inputs of search (2 Swiss-Prot queries, 400 records as FASTA and as a store),
    significance (the queries, a pairs file), all-pairs (24 windows of 8 16S genes, as FASTA
    and as a store), align-long (2 and 2.5 kb of a chromosome) and ingest."""
    from swdask.sequences.ingest import ingest

    queries = write_fasta(folder / "queries.fasta",
                          [(name, seq) for name, _, seq in fasta_records(QUERIES)[:2]])
    database = folder / "db.fasta.gz"
    database.write_bytes(SPROT_DB.read_bytes())
    store = ingest(database, folder / "db.store").path
    genes = write_fasta(folder / "genes.fasta", gene_windows(8, 5))
    genes_store = ingest(genes, folder / "genes.store").path
    codes = window_codes()
    a = write_fasta(folder / "a.fasta", [("a", DNA.decode(codes[:2000]))])
    b = write_fasta(folder / "b.fasta", [("b", DNA.decode(codes[700:3200]))])
    pairs = folder / "pairs.tsv"
    names = [name for name, _, _ in fasta_records(queries)]
    pairs.write_text(f"{names[0]}\t{names[1]}\n{names[1]}\t{names[0]}\n")
    return SimpleNamespace(queries=queries, database=database, store=store, genes=genes,
                           genes_store=genes_store, a=a, b=b, pairs=pairs)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return make_inputs(tmp_path_factory.mktemp("inputs"))
