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


def test_gpu_traceback_benchmark_smoke(tmp_path):
    """The GPU traceback benchmark, its kernels in the CUDA simulator (root conftest)."""
    out = tmp_path / "traceback.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "workflows" / "benchmarks" / "gpu_traceback.py"), "--quick",
         "--pool", str(ROOT / "tests" / "data" / "sprot_db.fasta.gz"), "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    assert "| GPU kernels (forward + walk), 4 pairs |" in result.stdout
    report = json.loads(out.read_text())
    assert report["device"] == "CUDA simulator" and report["pairs"] == 4 and report["cells"] > 0
