"""Both strands of a DNA search (``strand=``): a reverse-complemented read finds its gene
with the forward read's score, minus-strand hits against the reference kernel on the
reverse complement, ``minus`` as ``plus`` of the reverse complements, ``both`` as the best
of the two, cells of both strands, protein unchanged, the Dask search equal to the
in-process one, and the CUDA kernels (simulator) equal to the CPU's."""
from __future__ import annotations

import importlib

import dask
import pandas as pd
import pytest
from numba import config

import swdask
from swdask.kernels.cpu.reference import align_reference
from swdask.scoring import Scoring
from swdask.sequences.alphabet import DNA
from swdask.testing import path_summary
from tests.helpers import QUERIES, RRNA, SPROT_DB, read_fasta, write_fasta

search_module = importlib.import_module("swdask.jobs.search.plan")

#: Residues of 16S_200.fna.gz (tests/data/README.md).
RRNA_RESIDUES = 287_612
#: The mirror image of a hit of a query on one strand is the hit of its reverse complement
#: on the other: same subject, score, subject interval, CIGAR and statistics.
SAME = ["subject", "score", "evalue", "bitscore", "identity", "align_length", "mismatches",
        "gap_opens", "subject_start", "subject_end", "cigar", "query_length", "subject_length",
        "subject_id"]


def revcomp(letters: str) -> str:
    """Reverse complement of DNA letters, written plainly: A-T, C-G, anything else N."""
    pairs = {"A": "T", "C": "G", "G": "C", "T": "A"}
    return "".join(pairs.get(c, "N") for c in reversed(letters.upper()))


@pytest.fixture(scope="module")
def genes():
    return list(read_fasta(RRNA).items())


@pytest.fixture(scope="module")
def reads(genes):
    """300-nt reads taken from database genes (plain ACGT ones: records 0 and 64), forward
    and reverse-complemented; one with IUPAC codes (R, Y, N) reverse-complemented; a
    chimera of a forward and a reverse-complemented piece (hits on both strands); and a
    palindrome (its own reverse complement: every hit ties with its other strand)."""
    s0, s64 = genes[0][1], genes[64][1]
    assert set(s0) == set(s64) == set("ACGT")
    mixed = s64[500:800]
    mixed = mixed[:40] + "R" + mixed[41:150] + "N" + mixed[151:220] + "Y" + mixed[221:]
    return {"g0_fwd": s0[100:400], "g0_rev": revcomp(s0[100:400]),
            "g64_rev": revcomp(s64[200:500]), "mixed_rev": revcomp(mixed),
            "chimera": s0[600:750] + revcomp(s64[900:1050]),
            "palindrome": s0[100:200] + revcomp(s0[100:200])}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The 16S genes in several partitions: a merge tree in the Dask search."""
    store = swdask.ingest(RRNA, tmp_path_factory.mktemp("strands") / "16S.store",
                          partition_residues=40_000)
    assert len(store.partitions) > 4
    return store


@pytest.fixture(scope="module")
def both(reads, store):
    return swdask.search_in_process(reads, store, max_hits=8, return_stats=True)


def mirrored(hits: pd.DataFrame) -> pd.DataFrame:
    """``hits`` as the other strand sees them: strand swapped, query interval mirrored."""
    out = hits.copy()
    out["strand"] = hits["strand"].map({"plus": "minus", "minus": "plus"}).astype("string")
    out["query_start"] = hits["query_length"] - hits["query_end"]
    out["query_end"] = hits["query_length"] - hits["query_start"]
    return out


def by_hit(hits: pd.DataFrame) -> pd.DataFrame:
    """Hits in the search's order whatever their ranks: score, subject, plus first."""
    return hits.sort_values(["score", "subject_id", "strand"], ascending=[False, True, False],
                            ignore_index=True)


# -- the bar ------------------------------------------------------------------------


def test_a_reverse_complemented_read_finds_its_gene_with_the_forward_score(both, genes):
    hits, _ = both
    gene = genes[0][0]
    fwd = hits[(hits["query"] == "g0_fwd") & (hits["rank"] == 1)].iloc[0]
    rev = hits[(hits["query"] == "g0_rev") & (hits["rank"] == 1)].iloc[0]
    assert (fwd["subject"], fwd["strand"], fwd["score"], fwd["cigar"]) == (gene, "plus", 600,
                                                                           "300=")
    assert (rev["subject"], rev["strand"], rev["score"], rev["cigar"]) == (gene, "minus", 600,
                                                                           "300=")
    for row in (fwd, rev):  # the read's whole length, on gene residues 100..400
        assert (row["query_start"], row["query_end"], row["subject_start"],
                row["subject_end"]) == (0, 300, 100, 400)
    assert (rev["evalue"], rev["bitscore"]) == (fwd["evalue"], fwd["bitscore"])
    g64 = hits[(hits["query"] == "g64_rev") & (hits["rank"] == 1)].iloc[0]
    assert (g64["subject"], g64["strand"], g64["score"], g64["subject_start"]) == (
        genes[64][0], "minus", 600, 200)


def test_a_read_and_its_reverse_complement_have_mirrored_hits(both):
    hits, _ = both
    fwd = hits[hits["query"] == "g0_fwd"]
    rev = hits[hits["query"] == "g0_rev"]
    pd.testing.assert_frame_equal(by_hit(mirrored(fwd))[SAME + ["strand", "query_start",
                                                               "query_end"]],
                                  by_hit(rev)[SAME + ["strand", "query_start", "query_end"]])


# -- minus against the reference and against plus -------------------------------------------


def test_minus_strand_hits_equal_the_reference_on_the_reverse_complement(both, reads, genes):
    hits, _ = both
    subjects = dict(genes)
    scoring = Scoring(alphabet="dna")
    matrix = scoring.matrix.tolist()
    minus = hits[hits["strand"] == "minus"]
    picked = [minus[minus["query"] == name].iloc[k] for name, k in
              (("chimera", 0), ("mixed_rev", 0), ("g64_rev", 1))]
    for row in picked:
        query = DNA.encode(revcomp(reads[row["query"]]))  # the read as the minus strand sees it
        subject = DNA.encode(subjects[row["subject"]])
        score, qs, qe, ss, se, ops = align_reference(query.tolist(), subject.tolist(), matrix,
                                                     scoring.gap_open, scoring.gap_extend)
        m = len(query)
        where = (row["query"], row["subject"])
        assert (score, m - qe, m - qs, ss, se) == (
            row["score"], row["query_start"], row["query_end"], row["subject_start"],
            row["subject_end"]), where
        cigar = path_summary(query, subject, qs, ss, ops, DNA.unknown_code)[0]
        assert cigar == row["cigar"], where


def test_minus_is_plus_of_the_reverse_complements(reads, store):
    minus = swdask.search_in_process(reads, store, max_hits=6, strand="minus")
    flipped = swdask.search_in_process({name: revcomp(seq) for name, seq in reads.items()},
                                       store, max_hits=6, strand="plus")
    assert set(minus["strand"]) == {"minus"} and set(flipped["strand"]) == {"plus"}
    pd.testing.assert_frame_equal(mirrored(minus), flipped)


def test_both_is_the_best_of_plus_and_minus(reads, store, both):
    hits, _ = both
    parts = [swdask.search_in_process(reads, store, max_hits=8, strand=strand)
             for strand in ("plus", "minus")]
    union = pd.concat(parts, ignore_index=True)
    for name in reads:
        mine = hits[hits["query"] == name].reset_index(drop=True)
        assert mine["rank"].tolist() == list(range(1, 9))
        best = by_hit(union[union["query"] == name]).iloc[:8].reset_index(drop=True)
        best["rank"] = pd.array(range(1, 9), dtype="Int32")
        pd.testing.assert_frame_equal(mine, best)
    chimera = hits[hits["query"] == "chimera"]
    assert set(chimera["strand"]) == {"plus", "minus"}
    # A palindrome scores the same on both strands of a subject: plus first, then minus.
    palindrome = hits[hits["query"] == "palindrome"]
    assert palindrome["strand"].tolist() == ["plus", "minus"] * 4
    assert palindrome["subject"].tolist()[::2] == palindrome["subject"].tolist()[1::2]
    assert palindrome["score"].tolist()[::2] == palindrome["score"].tolist()[1::2]


def test_cells_count_both_strands(both, reads, store):
    _, stats = both
    residues = sum(len(seq) for seq in reads.values())
    assert stats.strands == 2 and stats.n_queries == len(reads)
    assert stats.cells == 2 * residues * RRNA_RESIDUES
    _, plus = swdask.search_in_process(reads, store, max_hits=1, strand="plus",
                                       return_stats=True)
    assert plus.strands == 1 and plus.cells == residues * RRNA_RESIDUES


# -- protein and bad strands ----------------------------------------------------------------


def test_protein_has_no_strand(tmp_path):
    queries = dict(list(read_fasta(QUERIES).items())[:2])
    hits = swdask.search_in_process(queries, SPROT_DB, max_hits=3)
    assert hits["strand"].isna().all()
    assert swdask.search_in_process(queries, SPROT_DB, max_hits=3, strand="plus").equals(hits)
    for strand in ("both", "minus"):
        for run in (swdask.search_in_process, swdask.search):
            with pytest.raises(ValueError) as exc:
                run(queries, SPROT_DB, strand=strand)
            assert str(exc.value) == (f"strand {strand!r} applies to DNA; a protein search "
                                      "has one strand (plus)")


@pytest.mark.parametrize("run", [swdask.search_in_process, swdask.search])
def test_unknown_strand(run, reads, store):
    with pytest.raises(ValueError) as exc:
        run(reads, store, strand="reverse")
    assert str(exc.value) == "unknown strand 'reverse'; choose one of: both, plus, minus"


# -- the Dask search and the CUDA kernels ---------------------------------------------------


def test_dask_search_equals_in_process(reads, store, both, monkeypatch):
    monkeypatch.setattr(search_module, "TRACEBACK_QUERIES", 3)  # 2 traceback tasks
    expected, in_process = both
    lazy, lazy_stats = swdask.search(reads, store, max_hits=8, return_stats=True)
    assert lazy.npartitions == 2
    hits, stats = dask.compute(lazy, lazy_stats)
    pd.testing.assert_frame_equal(hits.reset_index(drop=True), expected)
    assert (stats.cells, stats.strands, stats.n_hits) == (in_process.cells, 2, len(expected))


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="simulator lane only")
def test_gpu_kernels_in_the_simulator_equal_the_cpu(genes, tmp_path):
    """Both strands through the CUDA kernels (simulated): tiny, as the simulator is slow."""
    pieces = [(name, seq[:48]) for name, seq in genes[:6]]
    db = write_fasta(tmp_path / "db.fna", pieces + [("rc_copy", revcomp(genes[7][1][:30]))])
    queries = {"a": genes[7][1][:30], "b": revcomp(genes[2][1][5:37])}
    cpu = swdask.search(queries, db, device="cpu", max_hits=3).compute()
    gpu, stats = dask.compute(*swdask.search(queries, db, device="gpu", max_hits=3,
                                             return_stats=True))
    assert stats.device == "gpu" and stats.strands == 2
    pd.testing.assert_frame_equal(gpu, cpu)
    top = cpu[cpu["rank"] == 1].set_index("query")
    assert (top.loc["a", "subject"], top.loc["a", "strand"], top.loc["a", "score"]) == (
        "rc_copy", "minus", 60)
    assert (top.loc["b", "subject"], top.loc["b", "strand"], top.loc["b", "score"]) == (
        genes[2][0], "minus", 64)
