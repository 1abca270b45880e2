"""swdask against CUDASW++4.0 (issue 16, item 5): reading ``align``'s output, the ratio
table of ``gpu_search.py``, and a whole ``gpu_search.py --cudasw4`` run with stand-ins for
CUDASW++'s binaries (CI has no GPU and no CUDASW++; the GPU machine runs the real ones)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import swdask
from tests.helpers import ROOT, SPROT_DB, benchmark_module

BENCHMARKS = ROOT / "workflows" / "benchmarks"


@pytest.fixture(scope="module")
def common():
    """``workflows/benchmarks/common.py``, imported as the scripts import it."""
    module = benchmark_module("common")
    assert module.__file__ == str(BENCHMARKS / "common.py")
    return module


@pytest.fixture(scope="module")
def gpu_search(common):
    return benchmark_module("gpu_search")


#: FIXTURE, not a capture of a real run: standard output of ``align --verbose`` written by
#: hand from the print statements of CUDASW++4.0's src/main.cu, src/options.cpp and
#: src/cudasw4.cuh (commit 37a394c).  Option and database lines as noise; a query line
#: split by a warning; C++ stream doubles in fixed and exponent form and ``inf``; a query
#: printed without its timing (no ``--verbose`` for it), which must not take the next
#: query's; two-digit query numbers; then the total.
ALIGN_STDOUT = """\
Selected options:
verbose: 1
numTopOutputs: 10
gop: -11
gex: -1
queryFile 0 : queries.fasta
Will use GPU 0
Reading Database:
253491 sequences, 102680000 characters
Min length 3, max length 5890, avg length 404
Transferred DB data in advance to GPU(s) 0
Processing query file queries.fasta
Processing query 0 ... Done. Scan time: 0.00352891 s, 4187.9 GCUPS
Processing query 1 ... Warning. copy buffer size too small. skipped a db portion
Done. Scan time: 1.23457e-05 s, 1.57e+06 GCUPS
Processing query 2 ... Done. Scan time: 0 s, inf GCUPS
Processing query 3 ... Done.
Processing query 10 ... Done. Scan time: 0.138765 s, 4050.12 GCUPS
Total time: 1.93077 s, 4068.52 GCUPS
"""


def test_cudasw4_scans_read_every_timed_query(common):
    scans = common.cudasw4_scans(ALIGN_STDOUT)
    assert [s["query"] for s in scans] == [0, 1, 2, 10]  # query 3 has no timing
    assert scans[0] == {"query": 0, "seconds": 0.00352891, "gcups": 4187.9}
    assert scans[1]["seconds"] == 1.23457e-05 and scans[1]["gcups"] == 1.57e6
    assert scans[2]["seconds"] == 0 and scans[2]["gcups"] == float("inf")
    assert scans[3] == {"query": 10, "seconds": 0.138765, "gcups": 4050.12}
    assert common.cudasw4_total(ALIGN_STDOUT) == (1.93077, 4068.52)
    assert common.cudasw4_total("Processing query 0 ... Done.\n") == (None, None)
    assert common.cudasw4_scans("") == []


def test_cudasw4_top_scores_and_agreement(common, tmp_path):
    tsv = tmp_path / "hits.tsv"
    # FIXTURE: the --tsv table's layout (src/main.cu), a reference header with a tab.
    tsv.write_text("Query number\tQuery length\tQuery header\tResult number\tResult score\t"
                   "Reference length\tReference header\tReference ID in DB\n"
                   "0\t144\tq0 desc\t0\t250\t150\tsp|A\t7\n"
                   "0\t144\tq0 desc\t1\t99\t300\tsp|B\twith\ta tab\t3\n"
                   "1\t189\tq1\t0\t80\t189\tsp|C\t0\n"
                   "0\t144\tq0 desc\t2\t120\t90\tsp|D\t9\n")
    theirs = common.cudasw4_top_scores(tsv)
    assert theirs == {0: [250, 120, 99], 1: [80]}
    ours = {0: [250, 120, 98], 1: [80, 70], 2: [5]}
    # Query 0: 2 of 3 ranks; query 1: 1 of 2 (a hit CUDASW++ lacks); query 2: 0 of 1.
    assert common.scores_agree(ours, theirs) == (3, 6)
    assert common.scores_agree({q: s[:1] for q, s in ours.items()},
                               {q: s[:1] for q, s in theirs.items()}) == (2, 3)
    assert common.CUDASW4_GAPS == (10, 1)


def test_cudasw4_commands(common, tmp_path):
    for name in ("makedb", "align"):
        (tmp_path / name).write_text("#!/bin/sh\n")
    with pytest.raises(FileNotFoundError, match="makedb: no CUDASW"):
        common.cudasw4_programs(tmp_path)  # not executable yet
    for name in ("makedb", "align"):
        (tmp_path / name).chmod(0o755)
    assert common.cudasw4_makedb_command(tmp_path, "db.fasta", "out/db") == [
        str(tmp_path / "makedb"), "db.fasta", "out/db"]
    align = common.cudasw4_align_command(tmp_path, "q.fasta", "out/db", "hits.tsv", top=3)
    assert align[0] == str(tmp_path / "align")
    options = dict(zip(align[1::2], align[2::2]))
    assert options["--query"] == "q.fasta" and options["--db"] == "out/db"
    assert options["--top"] == "3" and align[-2:] == ["--of", "hits.tsv"]
    assert {"--verbose", "--uploadFull", "--tsv"} <= set(align)


def test_ratio_table(gpu_search):
    rows = [{"lengths": [100, 200], "seconds": 0.5, "end_to_end_seconds": 1.0,
             "queries": [0, 1]},
            {"lengths": [700], "seconds": 2.0, "end_to_end_seconds": 2.0, "queries": [2]}]
    table = gpu_search.ratio_table(rows, [0.25, 0.5, 1.0], 1_000_000)
    first, second, total = table
    assert [t["overall"] for t in table] == [False, False, True]
    assert first["cells"] == 300_000_000 and first["cudasw4_seconds"] == 0.75
    assert first["swdask_gcups"] == pytest.approx(0.6)
    assert first["cudasw4_gcups"] == pytest.approx(0.4)
    assert first["ratio"] == pytest.approx(1.5)  # swdask 1.5 x faster
    assert first["end_to_end_gcups"] == pytest.approx(0.3)
    assert first["end_to_end_ratio"] == pytest.approx(0.75)
    assert second["ratio"] == pytest.approx(0.5) and second["lengths"] == [700]
    # Overall: all cells over all seconds, not a mean of the rows' ratios.
    assert total["lengths"] == [100, 200, 700] and total["cells"] == 1_000_000_000
    assert total["swdask_seconds"] == 2.5 and total["cudasw4_seconds"] == 1.75
    assert total["swdask_gcups"] == pytest.approx(0.4)
    assert total["cudasw4_gcups"] == pytest.approx(1 / 1.75)
    assert total["ratio"] == pytest.approx(0.7)
    assert total["end_to_end_ratio"] == pytest.approx(1.75 / 3.0)
    zero = gpu_search.ratio_table([{**rows[1], "seconds": 0.0}], [0, 0, 1.0], 10)[0]
    assert zero["swdask_gcups"] == float("inf") and zero["ratio"] == float("inf")


#: A stand-in for CUDASW++4.0's ``makedb``: the "database" is the FASTA's path.
MAKEDB_STAND_IN = """#!{python}
import os, sys
with open(sys.argv[2], "w") as handle:
    handle.write(os.path.abspath(sys.argv[1]))
"""

#: A stand-in for CUDASW++4.0's ``align`` (tests/workflows/test_cudasw4.py): its
#: ``--verbose`` lines and ``--tsv`` table in the layout of src/main.cu, scores from
#: swdask's CPU kernel at BLOSUM62 10/1, a made-up scan time per query.
ALIGN_STAND_IN = """#!{python}
import sys
import numpy as np
from swdask.kernels.cpu.score import score_all
from swdask.scoring import Scoring
from swdask.sequences.store import load_sequences

args = sys.argv[1:]
option = lambda name: args[args.index(name) + 1]
db = load_sequences(open(option("--db")).read())
queries = load_sequences(option("--query"))
residues = int(db.lengths.sum())
scores = score_all(queries.residues, queries.offsets, db.residues, db.offsets,
                   Scoring().matrix, 10, 1, "local")[0]
print("Selected options:")
print("Processing query file " + option("--query"))
with open(option("--of"), "w") as out:
    out.write("Query number\\tQuery length\\tQuery header\\tResult number\\tResult score\\t"
              "Reference length\\tReference header\\tReference ID in DB\\n")
    for q in range(len(queries)):
        seconds = 0.001 * (1 + q % 3)
        length = int(queries.lengths[q])
        print(f"Processing query {{q}} ... ", end="")
        print(f"Done. Scan time: {{seconds:g}} s, {{length * residues / 1e9 / seconds:g}} GCUPS")
        for rank, s in enumerate(np.argsort(-scores[q], kind="stable")[:int(option("--top"))]):
            out.write(f"{{q}}\\t{{length}}\\t{{queries.names[q]}}\\t{{rank}}\\t{{scores[q, s]}}\\t"
                      f"{{db.lengths[s]}}\\t{{db.names[s]}}\\t{{s}}\\n")
print("Total time: 0.5 s, 1.5 GCUPS")
"""


def test_gpu_search_against_cudasw4_stand_in(tmp_path):
    """``gpu_search.py --cudasw4`` end to end in the CUDA simulator, CUDASW++ replaced by
    stand-ins: the database replicated twice for both, every query of the file in rows
    of two (the last row one), the comparison table, scores agreeing at 10/1."""
    folder = tmp_path / "cudasw4"
    folder.mkdir()
    for name, text in (("makedb", MAKEDB_STAND_IN), ("align", ALIGN_STAND_IN)):
        (folder / name).write_text(text.format(python=sys.executable))
        (folder / name).chmod(0o755)
    source = swdask.load_sequences(SPROT_DB)
    db, queries = tmp_path / "db.fasta", tmp_path / "q.fasta"
    db.write_text("".join(f">s{k}\n{source.alphabet.decode(source.codes(k))[:12 + k]}\n"
                          for k in range(6)))  # 87 residues
    queries.write_text(">q1\nMKVLAAGIV\n>q2\nWWHEAGAWGK\n>q3\nGSHMLEDPVXAF\n")
    out = tmp_path / "gpu.json"
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_search.py"), "--db", str(db), "--queries",
         str(queries), "--min-residues", "100", "--repeats", "2", "--cudasw4", str(folder),
         "--scratch", str(tmp_path / "scratch"), "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BLOSUM62 10/1" in result.stdout and "MISMATCH" not in result.stdout
    assert "| variant | queries | lengths | swdask kernel s |" in result.stdout
    assert "top-hit scores agree on 3 of 3 queries" in result.stdout
    assert "WARNING" not in result.stdout
    report = json.loads(out.read_text())
    assert report["copies"] == 2 and report["residues"] == 174 and report["gaps"] == [10, 1]
    assert [r["lengths"] for r in report["results"]] == [[9, 10], [12]]
    theirs = report["cudasw4"]
    assert theirs["passes"] == 3 and theirs["fasta"].endswith("db_x2.fasta.gz")
    assert [q["length"] for q in theirs["scans"]] == [9, 10, 12]
    # The stand-in's times: 1, 2, 3 ms for queries 0, 1, 2 of each pass (3 queries a pass).
    assert [q["pass_seconds"] for q in theirs["scans"]] == [[0.001, 0.001, 0.001],
                                                            [0.002, 0.002, 0.002],
                                                            [0.003, 0.003, 0.003]]
    assert theirs["residues_implied"] == pytest.approx(174, rel=1e-5)
    compared = theirs["compared"]["16scan"]  # the default variant: the search's kernel
    assert (compared["top_hit_agree"], compared["top_hit_compared"]) == (3, 3)
    assert compared["top_agree"] == compared["top_compared"] > 3
    first, second, total = compared["table"]
    assert first["cudasw4_seconds"] == pytest.approx(0.003)
    assert second["cudasw4_seconds"] == pytest.approx(0.003) and total["overall"]
    assert total["cells"] == 31 * 174
    assert total["ratio"] == pytest.approx(0.006 / total["swdask_seconds"])
    row = report["results"][0]
    assert row["cudasw4_ratio"] == pytest.approx(first["ratio"])


def test_shuffled_copies_keep_lengths_and_compositions(gpu_search, tmp_path):
    """``--shuffle`` (issue 16, item 5: a database of Swiss-Prot's lengths that is not one
    sequence set repeated): each copy after the first holds every sequence's residues in an
    order drawn from (seed, copy); the FASTA that CUDASW++ reads holds exactly the copies
    swdask scores; the first copy is the database itself (the CPU check reads it)."""
    from gpu_dask_search import replicate, shuffled_copy

    db = swdask.load_sequences(SPROT_DB)
    out = tmp_path / "db.fasta.gz"
    replicate(SPROT_DB, 3, out, shuffle=5)
    written = swdask.load_sequences(out)
    assert len(written) == 3 * len(db)
    for copy in range(3):
        residues = shuffled_copy(db.residues, db.offsets, copy, 5)
        assert np.array_equal(residues, shuffled_copy(db.residues, db.offsets, copy, 5))
        rows = [k for k, name in enumerate(written.names) if name.endswith(f"/{copy}")]
        assert np.array_equal(np.concatenate([written.codes(k) for k in rows]), residues)
        moved = 0
        for k in range(len(db)):
            piece = residues[db.offsets[k]:db.offsets[k + 1]]
            assert np.array_equal(np.sort(piece), np.sort(db.codes(k)))
            moved += not np.array_equal(piece, db.codes(k))
        assert moved == 0 if copy == 0 else moved >= 0.9 * len(db)
    assert not np.array_equal(shuffled_copy(db.residues, db.offsets, 1, 5),
                              shuffled_copy(db.residues, db.offsets, 2, 5))


def test_swdask_scores_the_database_cudasw4_reads(gpu_search, tmp_path):
    """With ``--shuffle`` both tools search one database: every sequence of the FASTA
    written for CUDASW++ is, as often, a subject of the arrays swdask scores (the shuffle
    was once drawn after sorting by length for swdask and in file order for CUDASW++, so
    the shuffled copies differed and the top-10 scores disagreed)."""
    from gpu_dask_search import replicate

    min_residues = 2.5 * swdask.load_sequences(SPROT_DB).residues.size
    db, copies, residues, offsets = gpu_search.search_database(SPROT_DB, min_residues, 5)
    assert copies == 3 and np.array_equal(db.lengths, np.sort(db.lengths))
    out = tmp_path / "db.fasta.gz"
    replicate(SPROT_DB, copies, out, shuffle=5)
    written = swdask.load_sequences(out)
    theirs = sorted(written.codes(k).tobytes() for k in range(len(written)))
    ours = sorted(residues[offsets[k]:offsets[k + 1]].tobytes() for k in range(len(offsets) - 1))
    assert ours == theirs
    first = [residues[offsets[k * copies]:offsets[k * copies + 1]] for k in range(len(db))]
    assert all(np.array_equal(f, db.codes(k)) for k, f in enumerate(first))
