"""The GPU lane of the kernel cache: a second process loads every kernel it needs
without compiling, a damaged entry is rebuilt, and an empty cache takes the package's
compiled kernels (``python -m pytest -m gpu``)."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

#: A GPU search of the bundled demo data in a fresh process; prints the hits' digest and
#: the kernel room's counters.
SCRIPT = """
import hashlib, json
from importlib.resources import files
import swdask
from swdask.kernels.cuda import compile as room
data = files("swdask") / "data"
preloaded = room.preload() if PRELOAD else 0
hits = swdask.search_in_process(str(data / "demo_queries.fasta"), str(data / "demo_db.fasta.gz"),
                                device="gpu", max_hits=5)
digest = hashlib.sha256(hits.to_csv(index=False).encode()).hexdigest()
print(json.dumps({"hits": digest, "preloaded": preloaded, **room.STATS}))
"""


def run(cache, preload=False, **environ):
    """The search in a fresh process with cache folder ``cache``; kernels are compiled,
    not taken from the package, unless ``SWDASK_SHIPPED_KERNELS="1"``."""
    env = dict(os.environ, SWDASK_CACHE_DIR=str(cache), **{"SWDASK_SHIPPED_KERNELS": "0",
                                                            **environ})
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    script = f"PRELOAD = {preload}\n" + SCRIPT
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_without_compiling(tmp_path):
    first = run(tmp_path)
    # Compiled here, or in the search's parallel build processes and loaded here.
    entries = list((tmp_path / "cuda").glob("*.nbk"))
    assert entries and len(entries) == first["compiled"] + first["loaded"]
    second = run(tmp_path)
    assert second["compiled"] == 0, second
    # What it launches; the first process also built ahead kernels this search did not
    # launch (a GPU traceback of five hits runs on the CPU).
    assert 0 < second["loaded"] <= len(entries)
    assert second["hits"] == first["hits"]
    # A worker's warm-up loads them all before any task (swdask.cluster.warm_gpu_worker).
    warmed = run(tmp_path, preload=True)
    assert warmed["preloaded"] == len(entries) and warmed["compiled"] == 0
    assert warmed["hits"] == first["hits"]
    # Damaged entries are deleted and rebuilt, with the same results.
    for path in entries:
        path.write_bytes(path.read_bytes()[:100])
    third = run(tmp_path)
    # Each damaged entry it reads (those the second process loaded) is discarded and rebuilt:
    # here at a launch, or by the search's build processes when the loading thread
    # discarded it first (compile.load_ahead).
    assert third["discarded"] == second["loaded"]
    assert third["hits"] == first["hits"]
    fourth = run(tmp_path)
    assert fourth["discarded"] == fourth["compiled"] == 0 and fourth["hits"] == first["hits"]


def test_search_kernels_load_ahead_on_a_thread(tmp_path):
    """With a filled cache, a fresh process's load_search_kernels puts every saved kernel
    of the search on the GPU before its first launch (their CUDA functions are there and
    loaded into the context) without importing Numba, and
    the search's hits are those of a process that loads them at the first launch."""
    run(tmp_path)  # fills the cache
    script = """
import json, sys
from importlib.resources import files
import numpy as np
import swdask
from swdask import backend
from swdask.kernels.cuda import compile as room
from swdask.sequences.store import load_sequences
data = files("swdask") / "data"
queries = load_sequences(str(data / "demo_queries.fasta"))
backend.start_gpu()
thread = backend.load_search_kernels(queries.lengths, swdask.Scoring())
thread.join()
numba_imported = "numba" in sys.modules  # the driver layer loads kept kernels without it
from swdask.kernels.cuda import launcher
kernels = [room.resolve(f, s)[0] for f, s in launcher.SEARCH_KERNELS] + list(room._KERNELS.values())
compiled = [c for k in kernels for c in k._compiled.values()]
loaded = bool(compiled) and all(c._functions for c in compiled)
# Resident in the context, not only found: CUDA's lazy loading would load them at launch.
resident = [f.loaded() for c in compiled for f in c._functions.values()]
print(json.dumps({"kernels": len(compiled), "loaded": loaded, "resident": all(resident),
                  "numba": numba_imported, **room.STATS}))
"""
    env = dict(os.environ, SWDASK_CACHE_DIR=str(tmp_path))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["kernels"] > 0 and got["loaded"] and got["resident"] and got["compiled"] == 0, got
    assert not got["numba"], got
    assert run(tmp_path, SWDASK_LOAD_AHEAD="0")["hits"] == run(tmp_path)["hits"]


def test_the_shipped_kernels_are_current():
    """The package carries machine code for this GPU's compute capability, built from these
    kernel sources; else ``python workflows/ship_kernels.py`` must run again on this GPU."""
    from swdask.kernels.cuda import compile as room
    from swdask.kernels.cuda import driver

    cc = driver.compute_capability()
    if cc[0] != 9:
        pytest.skip(f"the package ships machine code for compute capability 9.x, not {cc}")
    path = room.shipped_archive_path(cc)
    assert path is not None, "no kernels shipped for this GPU: run workflows/ship_kernels.py"
    archive = room.ShippedArchive(path)
    assert archive.current, (f"{path} was built from other kernel sources: run "
                             "python workflows/ship_kernels.py on this GPU")
    assert len(archive.manifest["entries"]) >= 20


def test_an_empty_cache_takes_the_shipped_kernels(tmp_path):
    """A first process on an empty cache compiles nothing the package carries, and its hits
    are those of kernels compiled here; the next process loads them from its cache."""
    shipped = run(tmp_path / "shipped", SWDASK_SHIPPED_KERNELS="1")
    assert shipped["compiled"] == shipped["loaded"] == 0 and shipped["shipped"] > 0, shipped
    compiled = run(tmp_path / "compiled")
    assert compiled["compiled"] + compiled["loaded"] > 0 and compiled["shipped"] == 0, compiled
    assert shipped["hits"] == compiled["hits"]
    again = run(tmp_path / "shipped", SWDASK_SHIPPED_KERNELS="1")
    assert again["compiled"] == again["shipped"] == 0 and again["loaded"] > 0, again
    assert again["hits"] == shipped["hits"]
