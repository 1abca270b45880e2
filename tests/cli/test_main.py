"""The ``swdask`` command itself (swdask.cli): the version, the installed command and its
exit, the demo, and a start-up that imports no heavy library."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest

import swdask
from swdask.cli import main
from tests.helpers import N_QUERIES, QUERIES, RRNA, SPROT_DB


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"swdask {swdask.__version__}\n"


def test_installed_demo_command():
    result = subprocess.run(["swdask", "demo"], capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"swdask {swdask.__version__} demo:")
    header = lines[1].split()
    # BLAST's names and conventions, for a person: pident a percent, positions 1-based.
    assert header == ["query", "subject", "score", "evalue", "pident", "qstart", "qend",
                      "sstart", "send", "cigar"]
    hits = [dict(zip(header, line.split())) for line in lines[2:]
            if line.startswith(" ") or line.startswith("sp|")]
    self_hits = [h for h in hits if h["query"] == h["subject"]]
    assert self_hits and all(h["pident"] == "100.0" and h["qstart"] == h["sstart"] == "1"
                             and h["cigar"] == f"{h['qend']}=" for h in self_hits)
    # Against the Python search, 0-based: the first hit of another subject.
    data = swdask.__path__[0] + "/data/"
    table = swdask.search_in_process(data + "demo_queries.fasta", data + "demo_db.fasta.gz",
                                     max_hits=3)
    other = table[table["query"] != table["subject"]].iloc[0]
    (shown,) = [h for h in hits if (h["query"], h["subject"]) == (other["query"],
                                                                  other["subject"])]
    assert (int(shown["qstart"]), int(shown["qend"]), int(shown["sstart"]), int(shown["send"])) \
        == (other["query_start"] + 1, other["query_end"], other["subject_start"] + 1,
            other["subject_end"])
    assert float(shown["pident"]) == round(100 * other["identity"], 1)
    assert float(shown["evalue"]) == pytest.approx(other["evalue"], rel=1e-6)
    assert re.fullmatch(r"\d\.\d{6}e-\d+", self_hits[0]["evalue"])  # not 0.0
    assert any("GCUPS" in line for line in lines)


def test_import_loads_no_heavy_library():
    code = ("import sys, swdask, swdask.cli; "
            "print(sorted(m for m in ('dask', 'numba', 'pandas', 'pyarrow') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=True)
    assert done.stdout.strip() == "[]"


def test_package_names_stay_functions():
    """``swdask.search`` is the function even once the module of that name is imported."""
    import importlib

    for name, module in (("align", "jobs.align"), ("cluster", "cluster"), ("search", "jobs.search"),
                         ("significance", "jobs.significance")):
        importlib.import_module(f"swdask.{module}")
        assert callable(getattr(swdask, name)), name
    assert "search_in_process" in dir(swdask)
    with pytest.raises(AttributeError):
        _ = swdask.no_such_name


def test_installed_command_exit_status_and_output(tmp_path):
    """The command ends its process itself (see ``cli._exit``): statuses and every line
    of output must come through."""
    def swdask_cli(*argv):
        return subprocess.run([sys.executable, "-m", "swdask.cli", *map(str, argv)],
                              capture_output=True, text=True, timeout=600, check=False)

    done = swdask_cli("--version")
    assert (done.returncode, done.stdout) == (0, f"swdask {swdask.__version__}\n")
    done = swdask_cli("search", tmp_path / "missing.fasta", SPROT_DB, "-o", tmp_path / "x.tsv")
    assert done.returncode == 2
    assert done.stderr.startswith("swdask: error:") and "missing.fasta" in done.stderr
    out = tmp_path / "hits.tsv"
    done = swdask_cli("search", QUERIES, SPROT_DB, "-o", out, "--outfmt", "blast6",
                      "--max-hits", 1, "--device", "cpu")
    assert done.returncode == 0, done.stderr
    assert len(out.read_text().splitlines()) == N_QUERIES
    assert done.stderr.splitlines()[0] == f"wrote {N_QUERIES} hits to {out} (blast6)"


def test_python_m_swdask_and_pipes(tmp_path):
    """``python -m swdask``; queries from the standard input (``-``) and BLAST tabular to
    the standard output (``-o -``), the same lines as a file gets; a reader that stops after
    one line ends the command quietly."""
    command = [sys.executable, "-m", "swdask"]
    done = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=300,
                          check=True)
    assert done.stdout == f"swdask {swdask.__version__}\n"
    search = ["search", "-", str(SPROT_DB), "--outfmt", "blast6", "--max-hits", "3",
              "--device", "cpu", "--quiet"]
    done = subprocess.run([*command, *search, "-o", "-"], input=QUERIES.read_text(),
                          capture_output=True, text=True, timeout=600, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    out = tmp_path / "hits.tsv"
    subprocess.run([*command, *search[:1], str(QUERIES), *search[2:], "-o", str(out)],
                   timeout=600, check=True)
    assert done.stdout == out.read_text() and len(done.stdout.splitlines()) == 3 * N_QUERIES
    with subprocess.Popen([*command, "search", str(QUERIES), str(SPROT_DB), "-o", "-",
                           "--outfmt", "sam", "--device", "cpu", "--quiet"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        assert process.stdout.readline().startswith("@HD\tVN:1.6")
        process.stdout.close()  # as `| head -1` does
        assert process.wait(timeout=600) == 0
        assert process.stderr.read() == ""


def test_threads_sets_numbas_thread_count_for_the_run(capsys, monkeypatch):
    """``--threads N``: NUMBA_NUM_THREADS for this process (before it imports Numba) and the
    processes it starts; where Numba is loaded already, this thread's count.  Restored."""
    import argparse
    import os

    import numba

    from swdask.cli.common import cores, cpu_threads

    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    before = numba.get_num_threads()
    with cpu_threads(argparse.Namespace(threads=1, scheduler=None)):
        assert os.environ["NUMBA_NUM_THREADS"] == "1" and numba.get_num_threads() == 1
    assert "NUMBA_NUM_THREADS" not in os.environ and numba.get_num_threads() == before
    for argv, message in (
            (["--threads", "0"], f"argument --threads: must be a whole number from 1 to "
             f"{cores()} (the cores here), got '0' (see 'swdask search --help')"),
            (["--threads", str(cores() + 1)], f"argument --threads: must be a whole number from "
             f"1 to {cores()} (the cores here), got '{cores() + 1}' (see 'swdask search --help')"),
            (["--threads", "1", "--scheduler", "tcp://127.0.0.1:1"], "--threads: the workers of a "
             "running scheduler keep their own thread count (set NUMBA_NUM_THREADS where they "
             "are started)")):
        assert main(["search", str(QUERIES), str(SPROT_DB), "-o", "x.tsv", *argv]) == 2
        assert capsys.readouterr().err == f"swdask: error: {message}\n"


def test_threads_in_a_fresh_process():
    """The command in a process of its own with ``--threads 1``: its kernels ran on one
    thread."""
    for command in (["search", str(QUERIES), str(SPROT_DB), "-o", "-", "--outfmt", "blast6",
                     "--max-hits", "1", "--device", "cpu"], ["demo"]):
        done = subprocess.run([sys.executable, "-m", "swdask", *command, "--threads", "1"],
                              capture_output=True,
                              text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr
        summary = next(line for line in (done.stdout + done.stderr).splitlines()
                       if " cells: score pass " in line)
        assert re.search(r"\) on cpu.*, 1 thread(;|$)", summary), summary


def _command_with_exit_probe(printed: str, argv: list) -> subprocess.CompletedProcess:
    """Run the installed command ``swdask ARGV`` in a fresh process that prints
    ``printed`` (the arguments of a ``print``, evaluated with ``sys`` in scope) from an
    exit hook: the command ends its process itself (``os._exit``), so what it loaded is
    asked there."""
    code = ("import atexit, sys, runpy\n"
            f"atexit.register(lambda: print({printed}, flush=True))\n"
            "sys.argv = ['swdask'] + sys.argv[1:]\n"
            "try:\n"
            "    runpy.run_module('swdask', run_name='__main__')\n"
            "except SystemExit:\n"
            "    pass\n")
    return subprocess.run([sys.executable, "-c", code, *map(str, argv)], capture_output=True,
                          text=True, timeout=600, check=False)


def test_command_skips_numbas_scipy_probe_and_only_that():
    """The installed command refuses ``scipy.linalg`` to Numba's start-up BLAS probe alone:
    a search's process never loads it (0.1-0.27 s on 2 cores), while Numba's ``np.dot``
    (which imports SciPy when it compiles) and a plain import of it still work there."""
    pytest.importorskip("scipy")
    done = _command_with_exit_probe(
        "'LOADED', 'scipy.linalg' in sys.modules, 'numba.np.arraymath' in sys.modules",
        ["search", QUERIES, SPROT_DB, "-o", "-", "--outfmt", "blast6", "--max-hits", "1",
         "--device", "cpu"])
    assert done.returncode == 0, done.stderr
    assert "LOADED False True" in done.stdout  # Numba's CPU target ran, SciPy's linalg not
    after = ("import numpy as np, numba, scipy.linalg\n"
             "f = numba.njit(lambda a, b: np.dot(a, b))\n"
             "print('DOT', f(np.ones(3), np.ones(3)))\n")
    code = ("import sys\nfrom swdask.cli import _skip_numba_blas_probe\n"
            "_skip_numba_blas_probe()\nimport numba.np.arraymath\n"
            "assert 'scipy.linalg' not in sys.modules\n" + after)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "DOT 3.0"


def test_a_job_in_this_process_never_imports_distributed(tmp_path):
    """Without ``--workers`` or ``--scheduler`` an all-pairs run is not a Dask job: the
    command never loads Dask's distributed (0.30 s of its start on 2 cores), as a search
    and a long alignment do not."""
    done = _command_with_exit_probe("'DISTRIBUTED', 'distributed' in sys.modules",
                                    ["allpairs", RRNA, "-o", tmp_path / "pairs", "--device",
                                     "cpu", "--quiet"])
    assert done.returncode == 0, done.stderr
    assert "DISTRIBUTED False" in done.stdout
    assert (tmp_path / "pairs" / "_manifest.json").exists()


def test_the_search_path_imports_pandas_only_for_its_table():
    """The search's modules load without pandas (0.25-0.3 s): a GPU search imports it on a
    thread while the GPU works, a CPU search when it builds the hits table."""
    code = ("import sys, swdask.cli.search, swdask.jobs.search.api, swdask.output; "
            "print('pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=True)
    assert done.stdout.strip() == "False"


def _heavy_imports_outside_the_simulator(modules: str, heavy: tuple[str, ...]) -> list[str]:
    """The modules of the packages ``heavy`` that importing ``modules`` (a comma list)
    imports, in a fresh process on the GPU path (the simulator off)."""
    code = (f"import sys, {modules}, swdask.kernels.cuda.compile as room\n"
            "assert not room.simulated()\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}))")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout)


def test_the_gpu_search_path_to_its_first_kernel_imports_no_numba():
    """A GPU search with its kernels in the cache launches them through the CUDA driver
    layer: none of the modules on its way to the first kernel imports Numba (0.55-0.65 s
    of imports holding the GIL on an H100 host), and only the simulator makes the room
    import it.  The GPU lane checks a fresh process's kernels load without it
    (tests/kernels/cuda/test_compile_gpu.py)."""
    modules = ("swdask.cli.search, swdask.jobs.search.api, swdask.jobs.search.tasks, "
               "swdask.backend, swdask.output, swdask.kernels.cuda.launcher")
    assert _heavy_imports_outside_the_simulator(modules, ("numba", "pandas")) == []


def test_the_significance_launcher_imports_no_numba():
    """The GPU significance launcher (and the shuffle arithmetic it shares with the CPU)
    launches kept kernels through the driver layer as the search does: its kernels and
    Numba are imported only to compile one."""
    modules = "swdask.kernels.cuda.psse, swdask.kernels.psse_math, swdask.cli.significance"
    assert _heavy_imports_outside_the_simulator(modules, ("numba", "pandas")) == []


def test_the_long_alignment_imports_numba_only_for_cpu_tiles():
    """A long alignment's GPU tiles launch through the driver layer; its modules, the
    tile contract and the GPU tile kernel load without Numba (0.41 s of a 1 Mb pair's
    first run on an H100 host), which only its CPU tiles, their rate's calibration and
    the traceback's walk import."""
    modules = ("swdask.cli.align_long, swdask.jobs.long_align, swdask.jobs.long_align.api, "
               "swdask.jobs.long_align.score, swdask.kernels.tile_contract, "
               "swdask.kernels.cuda.tile")
    assert _heavy_imports_outside_the_simulator(modules, ("numba", "pandas")) == []


def test_an_in_process_long_alignment_imports_no_distributed(tmp_path):
    """Without ``--scheduler`` a long pair that fits one tile runs in this process: the
    command imports no Dask ``distributed`` (0.37 s of a 1 Mb pair's first run on a
    2 x H200 host when it opened a session of no cluster)."""
    rng = __import__("numpy").random.default_rng(7)
    for name in "ab":
        bases = "".join(rng.choice(list("ACGT"), 600))
        (tmp_path / f"{name}.fasta").write_text(f">{name}\n{bases}\n")
    code = ("import sys; from swdask.cli import main; "
            f"main(['align-long', {str(tmp_path / 'a.fasta')!r}, {str(tmp_path / 'b.fasta')!r}, "
            f"'-o', {str(tmp_path / 'out.parquet')!r}, '--device', 'cpu', '--quiet']); "
            "print('distributed' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"
    assert (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize("device,auto,scheduler,loadable,started", [
    ("gpu", False, None, True, True),     # a search that insists on the GPU
    ("auto", False, None, True, False),   # a search's auto weighs the work first
    ("auto", True, None, True, True),     # significance, align-long: auto takes the GPU
    ("both", True, None, True, True),
    ("cpu", True, None, True, False),
    ("gpu", True, "tcp://host:8786", True, False),  # the workers have the GPUs
    ("gpu", True, None, False, False),    # no CUDA driver library on this machine
])
def test_the_gpu_starts_early_only_where_the_run_takes_it(device, auto, scheduler, loadable,
                                                          started, monkeypatch):
    """``start_gpu_early`` begins CUDA on a thread for a run in this process that will
    use the GPU, and only then (a CPU run that started CUDA would hold GPU memory and,
    for a search's ``auto``, pay 0.3 s for nothing): the driver first, before NumPy and
    the backend are imported, then the backend's start, which waits for it."""
    import argparse

    from swdask import backend
    from swdask.cli.common import start_gpu_early
    from swdask.kernels.cuda import driver

    calls = []
    monkeypatch.setattr(driver, "start_early", lambda: calls.append("driver"))
    monkeypatch.setattr(backend, "start_early", lambda: calls.append("backend"))
    monkeypatch.setattr(backend, "cuda_driver_loadable", lambda: loadable)
    monkeypatch.setattr(driver, "simulated", lambda: False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    start_gpu_early(argparse.Namespace(device=device, scheduler=scheduler, owns_process=True),
                    auto=auto, one_gpu=False)
    wanted = device != "cpu" and scheduler is None and (auto or device != "auto")
    assert calls == (["driver", "backend"] if started else ["driver"] if wanted else [])
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # a run on every GPU sees them all


@pytest.mark.parametrize("device,owns,set_before,simulated,shown", [
    ("gpu", True, None, False, "0"),     # one GPU used: the driver starts that one alone
    ("gpu", True, "1", False, "1"),      # the user's choice stands
    ("gpu", False, None, False, None),   # main(argv) from Python: the caller's environment
    ("gpu", True, None, True, None),     # the simulator has no GPUs to hide
    ("cpu", True, None, False, None),    # no GPU run, no change
])
def test_a_one_gpu_run_shows_the_driver_one_gpu(device, owns, set_before, simulated, shown,
                                                 monkeypatch):
    import argparse

    from swdask import backend
    from swdask.cli.common import start_gpu_early
    from swdask.kernels.cuda import driver

    monkeypatch.setattr(driver, "start_early", lambda: None)
    monkeypatch.setattr(backend, "start_early", lambda: None)
    monkeypatch.setattr(driver, "simulated", lambda: simulated)
    if set_before is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", set_before)
    start_gpu_early(argparse.Namespace(device=device, scheduler=None, owns_process=owns),
                    auto=True, one_gpu=True)
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == shown

