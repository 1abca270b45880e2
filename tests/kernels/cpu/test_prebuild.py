"""Tests of swdask.kernels.cpu.prebuild: kernels compiled in a helper process land in
Numba's cache and are loaded, not compiled again, by the process that waits for them.

Each test runs a fresh interpreter on an empty cache folder (Numba reads
``NUMBA_CACHE_DIR`` once, at import).
"""
from __future__ import annotations

import os
import subprocess
import sys

from swdask.kernels.cpu import prebuild
from tests.helpers import QUERIES, SPROT_DB


def run_fresh(code, cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_helper_builds_a_kernel_this_process_then_loads(tmp_path):
    code = """
from swdask.kernels.cpu import prebuild, traceback
from swdask.scoring import Scoring
kernel, arguments = traceback._prebuild_examples()["traceback"]
print(prebuild.cached(kernel, arguments))
print(prebuild.start(["traceback"]), prebuild.start(["traceback"]))
aln = traceback.align_codes("HEAGAWGHEE", "PAWHEAE", Scoring("BLOSUM50", gap_open=8, gap_extend=2))
stats = traceback._traceback_kernel.stats
print(aln["score"], sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
print(prebuild.cached(kernel, arguments), prebuild.start(["traceback"]))
import gc, warnings
warnings.simplefilter("error")
helper = prebuild._Helper(["traceback"])
prebuild._helpers["traceback"] = helper
prebuild.wait("traceback")
print(helper.process.stdout.closed, helper.process.returncode)
del helper
gc.collect()
"""
    assert run_fresh(code, tmp_path) == [
        "False",             # an empty cache
        "['traceback']", "[]",  # handed to a helper, once
        "26", "1", "0",      # the alignment, with the kernel loaded from the helper's entry
        "True", "[]",        # cached now: nothing more to start
        "True", "0"]         # a helper waited for to the end: its pipe closed, it is reaped


def test_search_hands_its_traceback_kernel_over(tmp_path):
    code = f"""
import swdask
from swdask.kernels.cpu import traceback
hits = swdask.search_in_process({str(QUERIES)!r},
                                {str(SPROT_DB)!r}, max_hits=3)
stats = traceback._traceback_kernel.stats
print(len(hits), sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
"""
    assert run_fresh(code, tmp_path) == ["36", "1", "0"]


def test_helper_command():
    assert prebuild.main(["no-such-kernel"]) == 2
    assert prebuild.main([]) == 0


def test_wait_without_a_helper_returns_at_once():
    prebuild.wait("no-such-kernel")
    prebuild.wait("traceback")


def test_switched_off(monkeypatch):
    monkeypatch.setenv("SWDASK_PREBUILD", "0")
    assert prebuild.start(["traceback"]) == []
