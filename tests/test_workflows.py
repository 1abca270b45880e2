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


def test_long_align_benchmark_smoke(tmp_path):
    out = tmp_path / "long.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "workflows" / "benchmarks" / "long_align.py"), "--quick",
         "--repeats", "1", "--traceback", "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    assert "planted score found on every full run" in result.stdout
    assert "GCUPS" in result.stdout and "traceback on cpu" in result.stdout
    report = json.loads(out.read_text())
    assert report["rows"][0]["planted_score_ok"] and report["traceback"]["peak_python_bytes"] > 0
