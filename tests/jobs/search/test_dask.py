"""The Dask search (swdask.jobs.search) against the single-process engine (search_in_process):
the same hits on Dask's threads, with 1 and 2 workers, with a worker killed mid-search,
on a multi-node cluster started here, and with the CUDA kernels in the simulator; the
cluster helper; schema errors; the interactive notebook."""
from __future__ import annotations

import gc
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dask
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from distributed.diagnostics.plugin import WorkerPlugin

import swdask
from swdask.cli import main
from swdask.cluster import shutdown
from swdask.errors import DeviceError, SchemaError
from swdask.parquet_schemas import HITS
from swdask.tables import to_pandas

search_module = importlib.import_module("swdask.jobs.search.plan")
cluster_module = importlib.import_module("swdask.cluster")

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).parents[2] / "data"
QUERIES = DATA / "sprot_queries.fasta"
SPROT_DB = DATA / "sprot_db.fasta.gz"


def same_hits(dask_result: pd.DataFrame, reference: pd.DataFrame) -> None:
    """Equal hits tables (a computed Dask result has an index per partition)."""
    pd.testing.assert_frame_equal(dask_result.reset_index(drop=True), reference)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """sprot_db in 15 partitions: a merge tree of two levels."""
    path = tmp_path_factory.mktemp("dask") / "sprot.store"
    store = swdask.ingest(SPROT_DB, path, partition_residues=12_000)
    assert len(store.partitions) == 15
    return store


@pytest.fixture(scope="module")
def reference(store):
    return swdask.search_in_process(QUERIES, store, max_hits=10)


@pytest.fixture
def small_batches(monkeypatch):
    """5 queries per traceback task: the 12 queries make 3 partitions of hits."""
    monkeypatch.setattr(search_module, "TRACEBACK_QUERIES", 5)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Queries and a 5-partition store small enough for the CUDA simulator."""
    folder = tmp_path_factory.mktemp("tiny")
    source = swdask.load_sequences(SPROT_DB)
    with open(folder / "db.fasta", "w") as handle:
        for k in range(14):
            handle.write(f">{source.names[k]}\n{source.alphabet.decode(source.codes(k))[:24]}\n")
        handle.write(">self\nMKVLAAGIVGLLLAWHEEGK\n")
    (folder / "q.fasta").write_text(">q1\nMKVLAAGIVGLLLAWHEEGK\n>q2\nWWHEAGAWGHEE\n")
    store = swdask.ingest(folder / "db.fasta", folder / "db.store", partition_residues=80)
    assert len(store.partitions) == 5
    return folder / "q.fasta", store


# -- the Dask flow on Dask's threads -------------------------------------------------------


def test_result_is_lazy_with_the_hits_schema(store, small_batches):
    hits = swdask.search(QUERIES, store, max_hits=10)
    assert hits.npartitions == 3
    assert list(hits.columns) == HITS.names
    meta = to_pandas(HITS.empty_table())
    assert hits.dtypes.to_dict() == meta.dtypes.to_dict()
    names = {key[0] if isinstance(key, tuple) else key for key in hits.__dask_graph__()}
    assert sum(1 for name in names if "swdask_score_cpu" in name) == 1  # one layer of 15 tasks
    assert any(name.startswith("merge_candidates") for name in names)
    assert any(name.startswith("traceback_batch") for name in names)


def test_threads_give_the_in_process_hits_and_stats(store, reference, small_batches):
    hits, stats = swdask.search(QUERIES, store, max_hits=10, return_stats=True)
    table, stats = dask.compute(hits, stats)
    same_hits(table, reference)
    query_residues = int(swdask.load_sequences(QUERIES).lengths.sum())
    assert stats.cells == query_residues * store.n_residues
    assert (stats.n_queries, stats.n_subjects, stats.n_hits) == (12, 400, len(reference))
    assert (stats.workers, stats.device) == (1, "cpu")
    assert 0 < stats.score_seconds and 0 < stats.traceback_seconds
    assert stats.kernel_gcups > 0 and stats.gcups > 0


@pytest.mark.parametrize("options", [
    {"max_hits": 3, "min_score": 40},
    {"mode": "global", "max_hits": 4},
    {"mode": "semiglobal", "scoring": swdask.Scoring("BLOSUM50", gap_open=13, gap_extend=2),
     "max_hits": 2},
    {"evalue": 1.0},
], ids=["min_score", "global", "semiglobal", "evalue"])
def test_options_give_the_in_process_hits(store, options):
    queries = swdask.load_sequences(QUERIES).take(range(4))
    same_hits(swdask.search(queries, store, **options).compute(),
              swdask.search_in_process(queries, store, **options))


def test_ties_across_the_merge_tree(tmp_path, monkeypatch):
    """Identical subjects in many partitions, merged two by two: database order wins."""
    monkeypatch.setattr(search_module, "MERGE_FAN_IN", 2)
    rng = np.random.default_rng(7)
    target = "MKVLAWQERTYIPASDFGHKLCVNM"
    with open(tmp_path / "ties.fasta", "w") as handle:
        for k in range(40):
            seq = target if k % 5 == 2 else "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), 30))
            handle.write(f">s{k}\n{seq}\n")
    store = swdask.ingest(tmp_path / "ties.fasta", tmp_path / "ties.store", partition_residues=30)
    assert len(store.partitions) > 20
    found = swdask.search({"q": target}, store, max_hits=3).compute()
    assert found["subject_id"].tolist() == [2, 7, 12]
    same_hits(found, swdask.search_in_process({"q": target}, store, max_hits=3))


def test_fasta_database_store_lives_as_long_as_the_result(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    hits = swdask.search({"q": "MKVLAWQERTYIPAS"}, SPROT_DB, max_hits=2)
    assert len(list(scratch.iterdir())) == 1
    first = hits.compute()
    same_hits(hits.compute(), first)  # computed twice: the store is still there
    del hits
    gc.collect()
    assert list(scratch.iterdir()) == []


def test_a_partition_that_does_not_match_its_schema(tmp_path):
    store = swdask.ingest(SPROT_DB, tmp_path / "bad.store", partition_residues=50_000)
    path = store.files[1]
    table = pq.read_table(path)
    lengths = pa.array([str(n) for n in table.column("length").to_pylist()])
    pq.write_table(table.set_column(3, "length", lengths), path)
    hits = swdask.search({"q": "MKVLAWQERTYIPAS"}, store)  # lazy: nothing read yet
    with pytest.raises(SchemaError, match=f"^{path}: column 'length' has type string, "
                       "expected int32$"):
        hits.compute()
    pq.write_table(table.drop_columns(["residues"]), path)
    with pytest.raises(SchemaError, match=f"^{path}: column 'residues' is missing"):
        hits.compute()


def test_cli_device_gpu_in_the_simulator_matches_cpu(tiny, tmp_path, capsys):
    queries, store = tiny
    tables = {}
    for device in ("cpu", "gpu"):
        out = tmp_path / f"{device}.parquet"
        assert main(["search", str(queries), str(store.path), "-o", str(out), "--device", device,
                     "--max-hits", "4", "--quiet"]) == 0, capsys.readouterr().err
        tables[device] = pq.read_table(out)
    assert tables["gpu"].num_rows == 8
    assert tables["gpu"].equals(tables["cpu"])
    hits, stats = swdask.search(queries, store, device="gpu", max_hits=4, return_stats=True)
    table, stats = dask.compute(hits, stats)
    assert stats.device == "gpu"
    assert pa.Table.from_pandas(table, schema=HITS, preserve_index=False).equals(tables["cpu"])


def test_gpu_score_tasks_are_routed_by_their_keys(tiny):
    queries, store = tiny
    graph = swdask.search(queries, store, device="gpu").__dask_graph__()
    routed = {key for key in graph if swdask.gpu_resources(key)}
    assert len(routed) == 5  # the score tasks, one per partition, and nothing else
    assert all(key[1] in range(5) for key in routed)
    cpu_graph = swdask.search(queries, store, device="cpu").__dask_graph__()
    assert not any(swdask.gpu_resources(key) for key in cpu_graph)


_BARRIER = {}


def _meet(name):
    """Both tasks must be inside at once, or the barrier times out (BrokenBarrierError)."""
    _BARRIER[name].wait(timeout=20)
    return True


def test_a_gpu_worker_runs_two_score_tasks_at_once():
    """GPU tasks ask for a share of the worker's GPU=1: with the whole GPU, Dask would run
    one at a time however many threads the worker has (what the H100 showed), and no
    partition read could overlap another partition's kernels."""
    import threading

    from distributed import Client, LocalCluster

    key = ("swdask-to_string_dtype-swdask_score_gpu-0123abcd", 0)
    assert 0 < swdask.gpu_resources(key)["GPU"] * cluster_module.GPU_WORKER_THREADS <= 1
    _BARRIER["gpu share"] = threading.Barrier(2)  # the workers are threads of this process
    with LocalCluster(n_workers=1, threads_per_worker=cluster_module.GPU_WORKER_THREADS,
                      processes=False, resources=dict(cluster_module.GPU_RESOURCE),
                      dashboard_address=":0") as local, Client(local) as client:
        futures = [client.submit(_meet, "gpu share", key=f"{key[0]}-{k}",
                                 resources=swdask.gpu_resources(key)) for k in range(2)]
        assert client.gather(futures) == [True, True]


# -- clusters ------------------------------------------------------------------------------


def test_cluster_plans():
    plan = cluster_module._plan
    kind, options = plan(2, None, "cpu", None, ":0", gpus=4, simulator=False)
    assert kind == "local" and options["n_workers"] == 2 and options["processes"]
    assert "resources" not in options
    kind, options = plan(None, None, "gpu", 2, ":0", gpus=0, simulator=True)
    assert (kind, options["resources"], options["threads_per_worker"]) == ("local", {"GPU": 1}, 2)
    with pytest.raises(DeviceError, match="no CUDA GPU is visible"):
        plan(None, None, "gpu", None, ":0", gpus=0, simulator=False)
    with pytest.raises(ValueError, match=r"^n_workers=3, but 2 GPU\(s\) are visible"):
        plan(3, None, "auto", None, ":0", gpus=2, simulator=False)
    with pytest.raises(ValueError, match="^n_workers: options of a new cluster, not of a "
                       "scheduler given by address$"):
        plan(2, "tcp://127.0.0.1:8786", "auto", None, None, gpus=0, simulator=False)
    with pytest.raises(ValueError, match="^unknown device 'tpu'; choose one of: auto, cpu, gpu$"):
        plan(None, None, "tpu", None, None, gpus=0, simulator=False)
    with pytest.raises(ValueError, match="^n_workers must be a positive whole number, got 0$"):
        plan(0, None, "cpu", None, None, gpus=0, simulator=False)


def test_cluster_with_gpus_is_a_local_cuda_cluster(monkeypatch):
    """Without a GPU in CI: pretend two are visible and record what dask-cuda gets."""
    from distributed import LocalCluster

    got = {}

    def local_cuda_cluster(**options):
        got.update(options)
        return LocalCluster(n_workers=1, processes=False, dashboard_address=":0")

    fake = type(sys)("dask_cuda")
    fake.LocalCUDACluster = local_cuda_cluster
    monkeypatch.setitem(sys.modules, "dask_cuda", fake)
    monkeypatch.setattr(swdask.backend, "visible_gpus", lambda: 2)
    client = swdask.cluster(dashboard_address=":0")
    try:
        assert got == {"n_workers": 2, "threads_per_worker": 2, "dashboard_address": ":0",
                       "resources": {"GPU": 1}}
    finally:
        shutdown(client)
    monkeypatch.setitem(sys.modules, "dask_cuda", None)  # not installed
    with pytest.raises(DeviceError, match=r"needs dask-cuda: pip install 'swdask\[gpu\]'"):
        swdask.cluster(dashboard_address=":0")


def test_device_gpu_needs_a_worker_that_sees_one(monkeypatch, store):
    import swdask.backend
    from distributed import Client, LocalCluster

    monkeypatch.setattr(swdask.backend, "gpu_available", lambda: False)
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as local, \
            Client(local):
        with pytest.raises(DeviceError, match=r"no worker of the Dask cluster at \S+ sees "
                           r"a CUDA GPU \(1 worker\(s\)\)"):
            swdask.search(QUERIES, store, device="gpu")


@pytest.fixture(scope="module")
def client():
    """A LocalCluster of 2 worker processes (the workers inherit the CUDA simulator)."""
    client = swdask.cluster(2, device="cpu", dashboard_address=":0")
    yield client
    shutdown(client)


def _scheduler_idle(client, timeout=30.0):
    """Wait until the scheduler has forgotten every task of earlier computations, so that
    the next one recomputes its score tasks instead of reusing results held elsewhere."""
    deadline = time.monotonic() + timeout
    while client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)):
        assert time.monotonic() < deadline, "the scheduler kept tasks of a finished search"
        time.sleep(0.05)


def test_one_and_two_workers_give_the_in_process_hits(client, store, reference, small_batches):
    workers = sorted(client.scheduler_info()["workers"])
    assert len(workers) == 2
    hits, stats = swdask.search(QUERIES, store, max_hits=10, return_stats=True)
    _scheduler_idle(client)
    table, found = client.gather(client.compute([hits, stats], workers=[workers[0]]))
    same_hits(table, reference)
    assert found.workers == 1 and found.n_hits == len(reference)
    # Where the scheduler puts 15 score tasks is its own choice: on a loaded 2-core machine
    # one worker can take them all.  Each try must give the same hits; one of a few tries
    # must have spread the score tasks over both workers.
    used = []
    for _ in range(5):
        _scheduler_idle(client)
        table, found = client.gather(client.compute([hits, stats]))
        same_hits(table, reference)
        assert found.n_hits == len(reference)
        used.append(found.workers)
        if found.workers == 2:
            break
    assert used[-1] == 2, f"score tasks never ran on both workers: {used}"
    table, found = cluster_module.compute(hits, stats, client=client)  # what the CLI runs
    same_hits(table, reference)


class KillOnce(WorkerPlugin):
    """Kills its worker process right after its second score task, once per marker file."""

    name = "swdask-test-kill-once"

    def __init__(self, marker):
        self.marker = str(marker)
        self.scored = 0

    def setup(self, worker):
        self.scored = 0

    def transition(self, key, start, finish, **kwargs):
        if finish != "memory" or "swdask_score" not in str(key):
            return
        self.scored += 1
        if self.scored == 2:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
            os._exit(1)


def test_a_worker_killed_mid_search_changes_nothing(client, store, reference, tmp_path,
                                                     small_batches):
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    marker = tmp_path / "killed"
    client.register_plugin(KillOnce(marker))
    try:
        before = set(client.scheduler_info()["workers"])
        table = swdask.search(QUERIES, store, max_hits=10).compute()
        assert marker.exists()  # a worker died after finishing two of the 15 score tasks
        same_hits(table, reference)
    finally:
        client.unregister_worker_plugin(KillOnce.name)
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    client.wait_for_workers(2, timeout=120)
    assert set(client.scheduler_info()["workers"]) != before  # the nanny started a new one


# -- multi-node, as workflows/multinode.md does it -------------------------------------------


def _start(*argv, env=None):
    return subprocess.Popen([sys.executable, "-m", "dask", *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_multinode_recipe_routes_gpu_tasks(tiny, tmp_path, capsys):
    """A scheduler, a "GPU" worker (the simulator, GPU=1) and a CPU worker whose
    processes cannot run CUDA kernels: ``--device gpu`` works only if every score task
    goes to the GPU worker."""
    from distributed import Client

    queries, store = tiny
    scheduler_file = tmp_path / "scheduler.json"
    processes = [_start("scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address",
                        ":0", "--scheduler-file", str(scheduler_file))]
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(scheduler_file.read_text())["address"]
        worker = ("worker", address, "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1")
        processes.append(_start(*worker, "--resources", "GPU=1",
                                env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}))
        processes.append(_start(*worker, env={**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}))
        with Client(address, set_as_default=False) as watcher:
            watcher.wait_for_workers(2, timeout=120)
        outputs = {}
        for name, options in (("cluster", ["--scheduler", address, "--device", "gpu"]),
                              ("local", ["--device", "cpu"])):
            outputs[name] = tmp_path / f"{name}.parquet"
            status = main(["search", str(queries), str(store.path), "-o", str(outputs[name]),
                           "--max-hits", "4", *options])
            assert status == 0, capsys.readouterr().err
        err = capsys.readouterr().err
        assert f"dask dashboard: http://127.0.0.1:" in err
        assert "on gpu, 1 worker(s)" in err
        assert pq.read_table(outputs["cluster"]).equals(pq.read_table(outputs["local"]))
        with Client(address, set_as_default=False) as watcher:
            assert len(watcher.scheduler_info()["workers"]) == 2  # both still there
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            process.wait(timeout=60)


# -- workflows -----------------------------------------------------------------------------


def test_interactive_scaling_notebook_runs(tmp_path, monkeypatch):
    """workflows/interactive_scaling.ipynb is stored without outputs and runs top to bottom."""
    import nbformat
    from nbclient import NotebookClient

    path = ROOT / "workflows" / "interactive_scaling.ipynb"
    notebook = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") and not cell.get("execution_count")
               for cell in notebook.cells if cell.cell_type == "code")
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("SWDASK_NOTEBOOK_OUTPUT", str(tmp_path))
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    hits = pq.read_table(tmp_path / "hits.parquet")
    assert hits.schema.equals(HITS) and hits.num_rows == 25  # 5 queries x 5 hits
    outputs = "".join(str(output) for cell in notebook.cells for output in cell.get("outputs", []))
    assert "/status" in outputs  # the dashboard link


def test_memory_benchmark_smoke(tmp_path):
    out = tmp_path / "memory.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "workflows" / "benchmarks" / "dask_memory.py"),
         "--partition-residues", "20000", "--partitions", "2,6", "--workers", "1",
         "--memory-limit", "2GiB", "--scratch", str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert [row["requested_partitions"] for row in report["rows"]] == [2, 6]
    assert report["rows"][1]["partitions"] >= 6
    assert all(row["peak_worker_rss_bytes"] > 0 for row in report["rows"])
    assert "| store residues | partitions |" in result.stdout
