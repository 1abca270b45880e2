"""Workflows are executed, not just stored: smoke runs of the benchmark scripts."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import swdask
from tests.helpers import QUERIES, ROOT, RRNA, SPROT196, SPROT12071, SPROT_DB, benchmark_module


def run_benchmark(script: str, *args, simulator: bool = False) -> subprocess.CompletedProcess:
    """``workflows/benchmarks/SCRIPT ARGS`` in a fresh process (with ``simulator``, its CUDA
    kernels in Numba's simulator); fails on a non-zero exit with the process's output."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"} if simulator else None
    result = subprocess.run([sys.executable, str(ROOT / "workflows" / "benchmarks" / script),
                             *map(str, args)], capture_output=True, text=True, timeout=600,
                            check=False, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_cpu_search_benchmark_smoke(tmp_path):
    out = tmp_path / "bench.json"
    result = run_benchmark("cpu_search.py", "--queries", QUERIES, "--db", SPROT_DB, "--lengths",
                           "144,375", "--repeats", "1", "--bin-size", "2", "--json", out)
    assert "| query set | query residues | swdask kernel GCUPS" in result.stdout
    assert "scores agree on" in result.stdout
    report = json.loads(out.read_text())
    assert len(report["rows"]) == 4  # a single query and a bin for each of two lengths
    assert report["workload"] and report["machine"]


def test_gpu_traceback_benchmark_smoke(tmp_path):
    """The GPU traceback benchmark, its kernels in the CUDA simulator (root conftest)."""
    out = tmp_path / "traceback.json"
    result = run_benchmark("gpu_traceback.py", "--quick", "--pool", SPROT_DB, "--json", out)
    assert "| GPU kernels (forward + walk), 4 pairs |" in result.stdout
    report = json.loads(out.read_text())
    assert report["device"] == "CUDA simulator" and report["pairs"] == 4 and report["cells"] > 0


def test_intra_threshold_benchmark_smoke(tmp_path):
    """The intra-task threshold benchmark on tiny bands (the CUDA simulator in CI)."""

    out = tmp_path / "intra.json"
    result = run_benchmark("intra_threshold.py", "--quick", "--json", out, simulator=True)
    assert "| query | band | subjects | kind |" in result.stdout
    assert "MISMATCH" not in result.stdout
    report = json.loads(out.read_text())
    assert [r["band"] for r in report["bands"]] == [24, 40]
    assert {r["kind"] for r in report["bands"]} == {"real", "concatenated"}
    assert all(r["cpu_check"] for r in report["bands"])
    routed = {r["routing"]: r["pairs_intra"] for r in report["realistic"]}
    # No "measured crossover" row in a --quick run: simulated timings cannot decide one.
    assert routed == {"no routing": 0, "routing at 50": 3, "routing at 50, one batch": 3}


def test_allpairs_benchmark_smoke(tmp_path):
    out = tmp_path / "allpairs.json"
    result = run_benchmark("allpairs.py", "--quick", "--repeats", "1", "--json", out)
    assert "| pre-filter | wall s | pairs/s | filter s | kernel s | kernel GCUPS |" in result.stdout
    report = json.loads(out.read_text())
    filtered, plain = report["runs"]  # --quick runs with and without the pre-filter
    assert report["workload"]["genes"] == 40 and plain["pairs"] == 40 * 39 // 2
    assert (filtered["prefilter"], plain["prefilter"]) == (True, False)
    assert 0 < plain["pairs_scored"] <= plain["pairs"] and plain["cells"] > 0
    assert filtered["pairs_scored"] + filtered["pairs_filtered"] == plain["pairs_scored"]
    assert filtered["pairs_filtered"] > 0 and plain["pairs_filtered"] == 0
    assert report["outputs_identical"] is True and "identical: yes" in result.stdout
    assert plain["passing_pairs"] <= plain["traced_back"] and report["device"].startswith("CPU")


#: A stand-in for vsearch where it is not installed (CI installs only the project's own
#: dependencies): it answers ``--version`` and writes an empty ``--userout`` table, so the
#: smoke run checks the benchmark's own work (runs, timing, comparison, report).
VSEARCH_STAND_IN = """#!{python}
import sys
if "--version" in sys.argv:
    print("vsearch stand-in (tests/workflows/test_benchmarks.py)", file=sys.stderr)
else:
    open(sys.argv[sys.argv.index("--userout") + 1], "w").close()
"""


def test_allpairs_vsearch_benchmark_smoke(tmp_path):
    out = tmp_path / "vsearch.json"
    vsearch = shutil.which("vsearch")
    if vsearch is None:
        vsearch = tmp_path / "vsearch"
        vsearch.write_text(VSEARCH_STAND_IN.format(python=sys.executable))
        vsearch.chmod(0o755)
    result = run_benchmark("allpairs_vsearch.py", "--quick", "--json", out, "--vsearch", vsearch)
    report = json.loads(out.read_text())
    assert report["workload"]["genes"] == 40 and report["median_s"]["vsearch"] > 0
    assert report["pairs"]["both"] <= report["pairs"]["swdask"]
    assert "vsearch / swdask:" in result.stdout


def test_make_16s_large(tmp_path):
    """The data maker on 16S_200: eight records per gene, mutants within the divergence
    asked for, the same bytes on a second run."""
    import random

    from swdask.kernels.cpu.traceback import align_codes
    from swdask.sequences.store import load_sequences

    script = ROOT / "workflows" / "make_16s_large.py"
    for name in ("a.fna.gz", "b.fna.gz"):
        done = subprocess.run([sys.executable, str(script), str(RRNA), "-o", str(tmp_path / name),
                               "--copies", "2"], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "a.fna.gz").read_bytes() == (tmp_path / "b.fna.gz").read_bytes()
    batch = load_sequences(tmp_path / "a.fna.gz", alphabet="dna")
    original = load_sequences(RRNA, alphabet="dna")
    assert len(batch) == 3 * len(original) and batch.names[:3] == (
        original.names[0], f"{original.names[0]}_m1", f"{original.names[0]}_m2")
    scoring = swdask.Scoring(match=2, mismatch=-3, gap_open=5, gap_extend=2)
    for g in random.Random(2).sample(range(len(original)), 3):
        gene = batch.alphabet.decode(batch.codes(3 * g))
        for k in (1, 2):
            r = align_codes(gene, batch.alphabet.decode(batch.codes(3 * g + k)), scoring, "global")
            assert 0.93 <= r["identity"] < 1


def test_make_sprot_shuffled(tmp_path):
    """The shuffled database: K copies of every record named NAME_sK, each the original's
    residues (same multiset) in the order ``random.Random(f"{seed}:{i}:{k}")`` gives, the
    same bytes on a second run; by default the fewest copies that reach --min-residues."""
    import random

    from tests.helpers import fasta_records

    script = ROOT / "workflows" / "make_sprot_shuffled.py"
    original = [(name, seq.upper()) for name, _, seq in fasta_records(SPROT196)]
    residues = sum(len(seq) for _, seq in original)
    assert residues == 42_089
    for name in ("a.fasta.gz", "b.fasta.gz"):
        done = subprocess.run([sys.executable, str(script), str(SPROT196), "-o",
                               str(tmp_path / name), "--copies", "2", "--seed", "5"],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "a.fasta.gz").read_bytes() == (tmp_path / "b.fasta.gz").read_bytes()
    written = [(name, seq) for name, _, seq in fasta_records(tmp_path / "a.fasta.gz")]
    assert len(written) == 2 * len(original)
    moved = 0
    for i, (name, seq) in enumerate(original):
        for k in (1, 2):
            copy_name, copy = written[2 * i + k - 1]
            assert copy_name == f"{name}_s{k}"
            assert sorted(copy) == sorted(seq), (name, k)
            letters = list(seq)
            random.Random(f"5:{i}:{k}").shuffle(letters)
            assert copy == "".join(letters), (name, k)
            moved += copy != seq
    assert moved >= 0.99 * 2 * len(original)  # shuffled, not copied
    # A different seed, different copies.
    done = subprocess.run([sys.executable, str(script), str(SPROT196), "-o",
                           str(tmp_path / "c.fasta.gz"), "--copies", "2"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert fasta_records(tmp_path / "c.fasta.gz")[0][2] != written[0][1]
    # Default copies: 100,000 residues need 3 copies of 42,089 (2 make 84,178).
    done = subprocess.run([sys.executable, str(script), str(SPROT196), "-o",
                           str(tmp_path / "d.fasta.gz"), "--min-residues", "100000"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "(3 shuffled copies of each), 126,267 residues" in done.stdout
    names = [name for name, _, _ in fasta_records(tmp_path / "d.fasta.gz")]
    assert len(names) == 3 * len(original) and names[:3] == [
        f"{original[0][0]}_s{k}" for k in (1, 2, 3)]
    # An existing output is not replaced.
    again = subprocess.run([sys.executable, str(script), str(SPROT196), "-o",
                            str(tmp_path / "d.fasta.gz")], capture_output=True, text=True,
                           check=False)
    assert again.returncode != 0 and "already exists" in again.stderr


def test_make_sprot_shuffled_default_copies():
    """The 100 M default, computed from the input: Swiss-Prot 12k (4,886,913 residues,
    counted here) needs 21 copies (20 make 97.7 M)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_sprot_shuffled", ROOT / "workflows" / "make_sprot_shuffled.py")
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    residues = maker.count_residues(SPROT12071)
    assert residues == 4_886_913
    assert maker.MIN_RESIDUES == 100_000_000
    assert maker.default_copies(residues) == 21
    assert 20 * residues < 100_000_000 <= 21 * residues
    assert maker.default_copies(50, 100) == 2 and maker.default_copies(51, 100) == 2
    assert maker.default_copies(100, 100) == 1 and maker.default_copies(10**9) == 1
    with pytest.raises(ValueError, match="no residues"):
        maker.default_copies(0)


def test_significance_benchmark_smoke(tmp_path):
    """The PSSE benchmark on the shortest Swiss-Prot records, the GPU path in the CUDA
    simulator (the root conftest sets NUMBA_ENABLE_CUDASIM for the subprocess too)."""
    out = tmp_path / "significance.json"
    result = run_benchmark("significance.py", "--quick", "--device", "gpu", "--query-file",
                           SPROT196, "--subject-file", SPROT12071, "--json", out)
    assert "GCUPS effective" in result.stdout and "check: gpu = cpu on the slice" in result.stdout
    report = json.loads(out.read_text())
    assert report["main"]["pairs"] == 6 and report["main"]["cells"] > 0
    assert report["workload"]["shuffles"] == 10


def test_long_align_benchmark_smoke(tmp_path):
    out = tmp_path / "long.json"
    result = run_benchmark("long_align.py", "--quick", "--repeats", "1", "--traceback", "--json",
                           out)
    assert "planted score found on every full run" in result.stdout
    assert "GCUPS" in result.stdout and "traceback on cpu" in result.stdout
    report = json.loads(out.read_text())
    traceback = report["traceback"]
    assert report["rows"][0]["planted_score_ok"]
    assert traceback["peak_rss_bytes"] >= traceback["rss_before_bytes"] > 0


def test_cli_wall_benchmark_smoke(tmp_path):
    """The command-line wall-clock benchmark, search and small cases on tiny inputs (CPU)."""
    out = tmp_path / "cli_wall.json"
    result = run_benchmark("cli_wall.py", "--quick", "--device", "cpu", "--cases", "search,small",
                           "--json", out)
    assert "| case | wall s | GCUPS |" in result.stdout
    assert "bar search (b) - (c) <= 1.0 s" in result.stdout
    report = json.loads(out.read_text())
    assert report["machine"]["cores"] and "gpus" in report["machine"]
    assert report["device"] == "cpu" and set(report["cases"]) == {"search", "small"}
    search, small = report["cases"]["search"], report["cases"]["small"]
    assert search["workload"]["n_queries"] == 3 and search["workload"]["cells"] > 0
    runs = [r["run"] for r in search["rows"]]
    assert runs[0] == "swdask warmup, empty cache"
    assert runs[1].startswith("(a) empty cache") and runs[2].startswith("(b) filled cache")
    assert all(r["wall_s"] > 0 for r in search["rows"])
    assert len(search["runs"]["warm"]["runs_s"]) == 2
    assert {"b_minus_c_s", "a_s"} <= set(search["bars"])
    assert small["bars"]["auto_chose"] == "cpu" and small["workload"]["n_queries"] == 4


def test_cli_wall_process_floor():
    """The floor under the first-vs-warm bars: a median over at least three fresh
    processes of the driver-and-context program, on the GPU only."""
    from types import SimpleNamespace

    cli_wall = benchmark_module("cli_wall")

    class Runner:
        def __init__(self):
            self.programs, self.walls = [], iter([0.31, 0.12, 0.25])

        def run(self, argv, caches, *, label, program=None, **_):
            self.programs.append(program)
            return {"wall_s": next(self.walls)}

    runner = Runner()
    floor = cli_wall.process_floor(SimpleNamespace(device="gpu", repeats=1), runner)
    assert floor == {"floor_s": 0.25, "runs_s": [0.31, 0.12, 0.25]}
    assert all(p == [sys.executable, "-c", cli_wall.FLOOR_CODE] for p in runner.programs)
    compile(cli_wall.FLOOR_CODE, "floor", "exec")
    assert "driver.context()" in cli_wall.FLOOR_CODE
    assert cli_wall.process_floor(SimpleNamespace(device="cpu", repeats=3), Runner()) is None


def test_cli_timeline_smoke(tmp_path):
    """The timeline of a CPU search run twice in one process: its stages and imports, in
    order, with the command's own output and status."""
    report = tmp_path / "timeline.txt"
    result = run_benchmark("cli_timeline.py", "--repeat", "2", "--min-ms", "0", "--out", report,
                           "--", "search", QUERIES, SPROT_DB, "-o", tmp_path / "hits.parquet",
                           "--device", "cpu", "--max-hits", "2", "--force")
    assert "GCUPS" in result.stderr and (tmp_path / "hits.parquet").exists()
    lines = report.read_text().splitlines()
    totals = lines.index("# stages: seconds, calls, thread, stage")
    events = [line.split(None, 4) for line in lines[2:totals]]
    whats = [e[4] for e in events]
    assert whats.index("run 1 starts") < whats.index("swdask.jobs.search.api:search_in_process")
    assert "import numba" in whats and "swdask.jobs.search.tasks:score_pass" in whats
    assert sum(w.startswith("run 2 ends after") for w in whats) == 1
    starts = [float(e[0]) for e in events]
    assert starts == sorted(starts) and all(float(e[1]) >= float(e[0]) for e in events)
    stages = lines[totals + 1:]
    assert any(line.split()[1] == "2" and line.endswith("search_in_process") for line in stages)


def test_memory_benchmark_smoke(tmp_path):
    out = tmp_path / "memory.json"
    result = run_benchmark("dask_memory.py", "--partition-residues", "20000", "--partitions", "2,6",
                           "--workers", "1", "--memory-limit", "2GiB", "--scratch", tmp_path,
                           "--json", out)
    report = json.loads(out.read_text())
    assert [row["requested_partitions"] for row in report["rows"]] == [2, 6]
    assert report["rows"][1]["partitions"] >= 6
    assert all(row["peak_worker_rss_bytes"] > 0 for row in report["rows"])
    assert "| store residues | partitions |" in result.stdout


def test_scaling_benchmark_smoke(tmp_path):
    """The scaling benchmark's CPU version (issue 18): each job on 1 and 2 LocalCluster
    workers, outputs identical, and every worker of the 2-worker runs busy with kernel
    tasks (the work split reaches both)."""
    out = tmp_path / "scaling.json"
    streams = tmp_path / "streams"
    result = run_benchmark("scaling.py", "--device", "cpu", "--quick", "--json", out,
                           "--task-stream", streams)
    assert "| job | 1 worker s | 2 workers s | ratio | outputs identical |" in result.stdout
    report = json.loads(out.read_text())
    assert report["machine"]["cores"] and "gpus" in report["machine"]
    assert report["device"] == "cpu" and report["workers"] == 2 and report["cpu_threads"] == 1
    assert set(report["jobs"]) == {"search", "allpairs", "long"}
    for name, job in report["jobs"].items():
        assert job["identical"] and job["checks_ok"] and job["ratio"] > 0, name
        assert job["workload"]
        assert [len(job["runs"][n]["busy"]) for n in ("1", "2")] == [1, 2], name
        for n in ("1", "2"):
            run = job["runs"][n]
            assert run["wall_s"] > 0 and run["output"], name
            for worker in run["busy"]:
                assert 0 < worker["kernel_busy_share"] <= worker["busy_share"] <= 1, (name, n)
                assert worker["kernel_tasks"] > 0 and len(worker["timeline"]) == 60, (name, n)
        assert (streams / f"{name}_2w.csv").read_text().startswith("worker,key,kind,kernel,")
    assert report["jobs"]["long"]["runs"]["2"]["stats"]["planted_score_ok"]
    assert report["jobs"]["search"]["workload"]["store_files"] > 2


def test_gpu_search_benchmark_smoke_modes(tmp_path):
    """The GPU search benchmark with ``--mode local,global`` (the CUDA simulator in CI):
    a row per mode, each checked against the CPU kernel of its mode, on three copies of
    the database, the last two shuffled (``--shuffle``)."""

    source = swdask.load_sequences(SPROT_DB)
    db, queries = tmp_path / "db.fasta", tmp_path / "q.fasta"
    db.write_text("".join(f">s{k}\n{source.alphabet.decode(source.codes(k))[:12 + k]}\n"
                          for k in range(6)))
    queries.write_text(">q1\nMKVLAAGIV\n>q2\nWWHEAGAWG\n")
    out = tmp_path / "gpu.json"
    result = run_benchmark("gpu_search.py", "--db", db, "--queries", queries, "--lengths", "9",
                           "--repeats", "1", "--mode", "local,global", "--min-residues", "200",
                           "--shuffle", "3", "--json", out, simulator=True)
    assert "| mode | variant |" in result.stdout and "MISMATCH" not in result.stdout
    assert "copies after the first shuffled (seed 3)" in result.stdout
    report = json.loads(out.read_text())
    assert (report["copies"], report["shuffle"]) == (3, 3)  # 6 sequences, 87 residues
    assert [r["mode"] for r in report["results"]] == ["local", "global"]
    assert all(r["cpu_check"] for r in report["results"])


def test_score_tables_benchmark_smoke(tmp_path):
    """The score-table benchmark's pandas rows (cudf is not installed in CI)."""
    out = tmp_path / "tables.json"
    result = run_benchmark("score_tables.py", "--db", SPROT_DB, "--queries", 12, "--max-hits",
                           "3,40", "--subjects", 300, "--tasks", 3, "--repeats", 1, "--json", out)
    assert "| max_hits | rows a task | pandas: build a task ms |" in result.stdout
    report = json.loads(out.read_text())
    assert [row["max_hits"] for row in report["rows"]] == [3, 40]
    assert [row["rows_per_task"] for row in report["rows"]] == [36, 480]
    assert all(row["pandas_merge_s"] > 0 for row in report["rows"])


def test_batch_queries_benchmark_smoke(tmp_path):
    """The batch-size benchmark end to end on the CPU (where the batch size is the GPU
    launcher's alone, so every size must give the same hits)."""
    out = tmp_path / "batch.json"
    result = run_benchmark("batch_queries.py", "--device", "cpu", "--queries", QUERIES, "--db",
                           SPROT_DB, "--copies", 1, "--sizes", "2,8", "--repeats", 1, "--json", out)
    assert "| queries a batch | wall s | score pass s |" in result.stdout
    report = json.loads(out.read_text())
    assert [row["batch_queries"] for row in report["rows"]] == [2, 8]
    assert all(row["identical"] and row["wall_s"] > 0 for row in report["rows"])


def test_cli_exit_benchmark_smoke(tmp_path):
    """The exit benchmark splits a whole CPU search process into its steps, which add up
    to the process's wall time."""
    out = tmp_path / "exit.json"
    result = run_benchmark("cli_exit.py", "--repeats", 1, "--json", out, "--", "search",
                           QUERIES, SPROT_DB, "-o", tmp_path / "hits.tsv", "--device", "cpu",
                           "--max-hits", 3, "--quiet")
    assert "| as installed, median |" in result.stdout
    (run,) = json.loads(out.read_text())["runs"]["installed"]
    steps = sum(seconds for step, seconds in run.items() if step != "wall")
    assert run["command"] > 0 and abs(steps - run["wall"]) < 1e-6
    assert (tmp_path / "hits.tsv").read_text().count("\n") > 0


#: nvdisasm -c lines in the shape ptxas lays out a kernel: a pass loop around a column loop,
#: the column loop's divergent shuffle placed after it and jumping back into its middle,
#: and a spill outside the loops.
SASS_SAMPLE = """
        /*0000*/                   STL [R1], R9 ;
.L_x_1:
        /*0010*/                   LDS.128 R40, [R7] ;
.L_x_2:
        /*0020*/                   BRA.DIV UR5, `(.L_x_9) ;
        /*0030*/                   SHFL.UP PT, R3, R3, 0x1, RZ ;
.L_x_3:
        /*0040*/                   VIADDMNMX.S16x2 R2, R2, R5, R4 ;
        /*0050*/                   VIMNMX3.S16x2.RELU R6, R2, R8, R10 ;
        /*0060*/              @!P4 BRA `(.L_x_2) ;
        /*0070*/              @P1 BRA `(.L_x_1) ;
        /*0080*/                   LDL R9, [R1] ;
        /*0090*/                   EXIT ;
.L_x_9:
        /*00a0*/                   WARPSYNC.COLLECTIVE R0, `(.L_x_3) ;
        /*00b0*/                   BRA `(.L_x_3) ;
"""


def test_sass_static_finds_the_column_loop():
    """``sass_static.py`` (run where numba-cuda is installed, no GPU needed) reads the
    disassembly: the column loop is the longest innermost loop, the out-of-line shuffle's
    jump back is no loop, and spills are counted."""
    sass_static = benchmark_module("sass_static")

    found = sass_static.loops(SASS_SAMPLE)
    assert [(loop.label, loop.start, loop.end, loop.size) for loop in found] == [
        (".L_x_1", 0x10, 0x70, 7), (".L_x_2", 0x20, 0x60, 5)]
    hot = sass_static.hot_loop(found)
    assert hot.label == ".L_x_2" and hot.opcodes["VIADDMNMX.S16x2"] == 1
    assert hot.opcodes["BRA"] == 1 and hot.opcodes["BRA.DIV"] == 1
    assert sass_static.spills(SASS_SAMPLE) == 2 and sass_static.spills(SASS_SAMPLE, hot) == 0
    assert sass_static.opcode("@!UP1 VIADD.16x2 R1, R2, R3") == "VIADD.16x2"
