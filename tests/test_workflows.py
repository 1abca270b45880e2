"""Workflows are executed, not just stored: smoke runs of the benchmark scripts."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_cpu_search_benchmark_smoke(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "workflows" / "benchmarks" / "cpu_search.py"),
         "--queries", str(ROOT / "tests" / "data" / "sprot_queries.fasta"),
         "--db", str(ROOT / "tests" / "data" / "sprot_db.fasta.gz"),
         "--lengths", "144,375", "--repeats", "1", "--bin-size", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    assert "| query set | query residues | swdask kernel GCUPS" in result.stdout
    assert "scores agree on" in result.stdout
    report = json.loads(out.read_text())
    assert len(report["rows"]) == 4  # a single query and a bin for each of two lengths
    assert report["workload"] and report["machine"]


def test_significance_benchmark_smoke(tmp_path):
    """The PSSE benchmark on the shortest Swiss-Prot records, the GPU path in the CUDA
    simulator (the root conftest sets NUMBA_ENABLE_CUDASIM for the subprocess too)."""
    out = tmp_path / "significance.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "workflows" / "benchmarks" / "significance.py"), "--quick",
         "--device", "gpu", "--query-file", str(ROOT / "tests" / "data" / "sprot196.fasta"),
         "--subject-file", str(ROOT / "tests" / "data" / "sprot12071.fasta.gz"),
         "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    assert "GCUPS effective" in result.stdout and "check: gpu = cpu on the slice" in result.stdout
    report = json.loads(out.read_text())
    assert report["main"]["pairs"] == 6 and report["main"]["cells"] > 0
    assert report["workload"]["shuffles"] == 10
