"""Clusters (swdask.cluster): the plans of swdask.cluster() for each device and option, a
LocalCUDACluster where GPUs are visible, GPU tasks taking a share of a worker's GPU so that
one worker runs two at once, GPU work routed by the tasks themselves on a cluster of GPU and
CPU workers, kernel tasks run again after a passing fault, and a scheduler given by address:
a silent one, an unreachable one, TLS."""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dask
import pandas as pd
import pyarrow.parquet as pq
import pytest
from dask._task_spec import TaskRef
from distributed.diagnostics.plugin import SchedulerPlugin

import swdask
from swdask.backend import KernelTask, SpreadTask
from swdask.cli import main
from swdask.cluster import shutdown
from swdask.errors import ClusterError, DeviceError
from tests.helpers import SPROT_DB, FirstAssignment, dying_workers, first_assignments

cluster_module = importlib.import_module("swdask.cluster")
plan_module = importlib.import_module("swdask.jobs.search.plan")


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

    share = cluster_module.GPU_TASK_SHARE
    assert 0 < share["GPU"] * cluster_module.GPU_WORKER_THREADS <= 1
    _BARRIER["gpu share"] = threading.Barrier(2)  # the workers are threads of this process
    with LocalCluster(n_workers=1, threads_per_worker=cluster_module.GPU_WORKER_THREADS,
                      processes=False, resources=dict(cluster_module.GPU_RESOURCE),
                      dashboard_address=":0") as local, Client(local) as client:
        cluster_module.route_tasks(client)  # the share is read off each task
        futures = [client.submit(KernelTask(_meet, "gpu"), "gpu share", key=f"score-{k}")
                   for k in range(2)]
        assert client.gather(futures) == [True, True]
        assert client.run_on_scheduler(lambda dask_scheduler: [
            dask_scheduler.tasks[f"score-{k}"].resource_restrictions for k in range(2)]) \
            == [share, share]


def _busy(job, seconds):
    time.sleep(seconds)
    return seconds


def test_tasks_are_dealt_out_by_work_not_to_where_their_input_is():
    """Issue 18: tasks that all read one input (a search's job or merged candidates) went
    to the worker holding it, and Dask's stealing moves none while the queue looks short:
    the second GPU idled.  Kernel tasks are dealt out by their work, longest first, each to
    the worker with the least work of their function (SpreadTask: its weight), whatever
    their inputs; a task whose caller names its workers keeps them."""
    import dask
    from distributed import Client, LocalCluster

    from swdask.jobs.search.plan import longest_share

    sizes = [9, 8, 7, 7, 5, 4, 3, 2, 2, 1]
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=False,
                      resources=dict(cluster_module.GPU_RESOURCE),
                      dashboard_address=":0") as local, Client(local) as client:
        cluster_module.route_tasks(client)
        client.register_plugin(FirstAssignment())
        workers = sorted(client.scheduler_info()["workers"])
        job = dask.delayed({"queries": "shared by every task"}, name="the-job")
        kernels = [dask.delayed(KernelTask(_busy, "gpu", work=size), pure=True)(
                       job, size / 1000, dask_key_name=f"kernel-{k}")
                   for k, size in enumerate(sizes)]
        spread = [dask.delayed(SpreadTask(_busy, weight=3), pure=True)(
                      job, 0.001, dask_key_name=f"spread-{k}") for k in range(4)]
        assert client.compute([*kernels, *spread], sync=True) == [s / 1000 for s in sizes] \
            + [0.001] * 4
        first = first_assignments(client)
        work = dict.fromkeys(workers, 0)
        for k, size in enumerate(sizes):
            work[first[f"kernel-{k}"]] += size
        # Longest first, each to the least loaded: the loads of greedy LPT.
        assert max(work.values()) == longest_share(sizes, 2), work
        assert sorted(first[f"spread-{k}"] for k in range(4)) == sorted(workers * 2)
        # A caller's own choice of workers stands.
        mine = [dask.delayed(KernelTask(_busy, "gpu", work=size), pure=True)(
                    job, 0.001, dask_key_name=f"mine-{k}") for k, size in enumerate(sizes)]
        client.compute(mine, workers=[workers[1]], sync=True)
        assert {first_assignments(client)[f"mine-{k}"] for k in range(len(sizes))} \
            == {workers[1]}


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
        got["environ"] = dask.config.get("distributed.nanny.environ")
        return LocalCluster(n_workers=1, processes=False, dashboard_address=":0")

    fake = type(sys)("dask_cuda")
    fake.LocalCUDACluster = local_cuda_cluster
    monkeypatch.setitem(sys.modules, "dask_cuda", fake)
    monkeypatch.setattr(swdask.backend, "visible_gpus", lambda: 2)
    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    client = swdask.cluster(dashboard_address=":0")
    try:
        # Each worker's Numba gets half the cores, through the nannies' environment
        # (dask-cuda would replace an env= with its own); no env= reaches dask-cuda.
        assert got == {"n_workers": 2, "threads_per_worker": 2, "dashboard_address": ":0",
                       "resources": {"GPU": 1}, "environ": {"NUMBA_NUM_THREADS": "16"}}
        assert "NUMBA_NUM_THREADS" not in dask.config.get("distributed.nanny.environ")
    finally:
        shutdown(client)
    monkeypatch.setitem(sys.modules, "dask_cuda", None)  # not installed
    with pytest.raises(DeviceError, match=r"needs dask-cuda: pip install 'swdask\[gpu\]'"):
        swdask.cluster(dashboard_address=":0")


# distributed leaves a socket of the failed first start open (a ResourceWarning when
# collected); the retry is what this test is about.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_dashboard_port_taken_after_the_check_falls_back_to_a_free_one(monkeypatch):
    """Another process binds the port swdask checked as free before the cluster starts."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(cluster_module, "_free_dashboard", lambda: f":{port}")
        client = swdask.cluster(1, device="cpu")
        try:
            assert client.dashboard_link and f":{port}/" not in client.dashboard_link
        finally:
            shutdown(client)
            import gc

            gc.collect()  # the leaked socket is reported here, under this test's filters


_SCRIPT_CALL = 'client = swdask.cluster(1, device="cpu", dashboard_address=":0")\n'


def _run_script(tmp_path, text):
    import subprocess
    import time

    script = tmp_path / "job.py"
    script.write_text(text)
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, check=False, cwd=tmp_path)
    return done, time.monotonic() - started


def test_a_script_without_the_main_guard_fails_at_once(tmp_path):
    """Dask's worker processes run the main script again (spawn): unguarded, the script
    used to wait for them 120 s and fail with Python's "bootstrapping phase" error."""
    done, seconds = _run_script(tmp_path, f"import swdask\n\n{_SCRIPT_CALL}print('started')\n")
    assert done.returncode == 1 and "started" not in done.stdout
    assert done.stderr.splitlines()[-1] == (
        f"swdask.errors.ClusterStartError: {tmp_path / 'job.py'}, line 3: a Dask cluster started "
        "at the top level of a script, which every worker process runs again as it starts; put "
        "the script's code under 'if __name__ == \"__main__\":'")
    assert "bootstrapping phase" not in done.stderr
    assert seconds < 60  # no worker was started: the import and the check


def test_a_guarded_script_starts_its_cluster(tmp_path):
    """... whose worker has imported dask.dataframe before its first task (WORKER_IMPORTS)."""
    done, _ = _run_script(tmp_path, (
        "import sys\n\nimport swdask\n\n\ndef main():\n    " + _SCRIPT_CALL
        + "    print(len(client.scheduler_info()['workers']), 'worker')\n"
        "    print(*client.run(lambda: 'dask.dataframe' in sys.modules).values())\n"
        "    client.close()\n    client.cluster.close()\n\n\n"
        "if __name__ == '__main__':\n    main()\n"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "1 worker\nTrue\n"


def test_a_packages_main_module_needs_no_guard(tmp_path):
    """``python -m pkg`` runs ``pkg/__main__.py``, which spawn does not run again (as the
    ``swdask`` command's own ``python -m swdask``): no refusal there."""
    import subprocess

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__main__.py").write_text(
        f"import swdask\n\n{_SCRIPT_CALL}print(len(client.scheduler_info()['workers']))\n"
        "client.close()\nclient.cluster.close()\n")
    done = subprocess.run([sys.executable, "-m", "pkg"], capture_output=True, text=True,
                          timeout=300, check=False, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr


@pytest.mark.parametrize("source,line,guarded", [
    ("import swdask\nif __name__ == '__main__':\n    c = swdask.cluster()\n", 3, True),
    ("import swdask\nif '__main__' == __name__:\n    main()\n", 3, True),
    ("if __name__ != '__main__':\n    pass\nelse:\n    main()\n", 4, True),
    ("if __name__ != '__main__':\n    main()\n", 2, False),
    ("import swdask\nc = swdask.cluster()\nif __name__ == '__main__':\n    pass\n", 2, False),
    ("if __name__ == 'other':\n    main()\n", 2, False),
    ("def main():\n    pass\nmain()\n", 3, False),
    ("def broken(:\n", 1, True),  # nothing to tell: the workers' own check answers
])
def test_main_guard_lines(tmp_path, source, line, guarded):
    script = tmp_path / "script.py"
    script.write_text(source)
    assert cluster_module._under_main_guard(str(script), line) is guarded


def test_a_worker_running_the_script_again_refuses_at_once():
    """In a worker process that runs the script again (its module is ``__mp_main__``) the
    call is always outside the guard, whatever the parent could read of the script."""
    from swdask.errors import ClusterStartError

    code = compile("check_main_guard()\n", "/nowhere/job.py", "exec")
    with pytest.raises(ClusterStartError, match=r"^/nowhere/job\.py, line 1: a Dask cluster"):
        exec(code, {"__name__": "__mp_main__",  # noqa: S102 - a module frame, as spawn runs it
                    "check_main_guard": cluster_module.check_main_guard})
    exec(code, {"__name__": "not_main", "check_main_guard": cluster_module.check_main_guard})
# -- GPU routing: read off the tasks, not their keys -------------------------------------------


def _flaky(marker):
    """Fails the first time (per marker file), then returns the worker's address."""
    from distributed import get_worker

    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return get_worker().address
    raise OSError("a passing fault")


def test_gpu_work_is_read_off_the_task_not_its_key():
    from dask._task_spec import Task

    gpu_task = Task("anything", KernelTask(max, "gpu"), 1, 2)
    cpu_task = Task("swdask_score_gpu-0123abcd", KernelTask(max, "cpu"), 1, 2)
    plain = Task("swdask_score_gpu-4567", max, 1, 2)
    assert swdask.gpu_resources(gpu_task) == cluster_module.GPU_TASK_SHARE
    assert swdask.gpu_resources(cpu_task) == swdask.gpu_resources(plain) == {}
    # A task fused with others (its subgraph is an argument) keeps the need.
    fused = Task.fuse(gpu_task, Task("sum", sum, TaskRef("anything")), key="fused")
    assert swdask.gpu_resources(fused) == cluster_module.GPU_TASK_SHARE
    with pytest.raises(TypeError, match="takes a Dask task .* not 'swdask_score_gpu-0123'"):
        swdask.gpu_resources("swdask_score_gpu-0123")


@pytest.fixture(scope="module")
def mixed_cluster():
    """A "GPU" worker (the simulator, GPU=1) and a CPU worker whose process cannot run
    CUDA kernels (no simulator, no GPU): a GPU task that lands there fails."""
    from distributed import Nanny, Scheduler, SpecCluster

    def worker(gpu):
        env = {"NUMBA_ENABLE_CUDASIM": "1" if gpu else "0", "NUMBA_NUM_THREADS": "1"}
        options = {"nthreads": 1, "env": env, "dashboard": False}
        return {"cls": Nanny, "options": dict(options, resources={"GPU": 1}) if gpu else options}

    spec = SpecCluster(workers={"gpu": worker(True), "cpu": worker(False)},
                       scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}},
                       silence_logs=40)
    client = swdask.cluster(scheduler=spec.scheduler_address)
    client.wait_for_workers(2, timeout=120)
    client.register_plugin(WhereTasksRan())
    names = {info["name"]: address for address, info
             in client.scheduler_info(n_workers=-1)["workers"].items()}
    yield client, names
    client.close()
    spec.close(timeout=60)


class WhereTasksRan(SchedulerPlugin):
    """Records, for every task that finishes, its worker and its resource restrictions."""

    name = "swdask-test-where"

    def __init__(self):
        self.ran = {}

    async def start(self, scheduler):
        self.scheduler = scheduler

    def transition(self, key, start, finish, *args, **kwargs):
        if finish == "memory" and kwargs.get("worker"):
            needs = self.scheduler.tasks[key].resource_restrictions
            self.ran[key] = (kwargs["worker"], dict(needs or {}))


def _where_tasks_ran(client):
    """``{key: (worker, resource restrictions)}`` of the tasks finished so far."""
    return client.run_on_scheduler(
        lambda dask_scheduler: dict(dask_scheduler.plugins[WhereTasksRan.name].ran))


def test_score_tasks_run_on_the_gpu_worker_and_the_rest_anywhere(mixed_cluster, tmp_path):
    """A search and a significance run of device="gpu" on a GPU worker and a CPU worker:
    every task that runs a kernel asks for the GPU and runs on the GPU worker (on the CPU
    worker it would fail), merges and tracebacks ask for nothing; the results equal the
    CPU's."""
    client, names = mixed_cluster
    queries = {"q1": "MKVLAAGIVGLLLAWHEEGK", "q2": "WWHEAGAWGHEE"}
    source = swdask.load_sequences(SPROT_DB)
    with open(tmp_path / "db.fasta", "w") as handle:
        for k in range(14):
            handle.write(f">{source.names[k]}\n{source.alphabet.decode(source.codes(k))[:24]}\n")
    store = swdask.ingest(tmp_path / "db.fasta", tmp_path / "db.store", partition_residues=80)
    expected = swdask.search(queries, store, device="cpu", max_hits=4).compute(scheduler="sync")
    hits = swdask.search(queries, store, device="gpu", max_hits=4)
    futures = client.compute(hits)  # plain Dask: the scheduler reads the tasks itself
    got = futures.result()
    ran = _where_tasks_ran(client)
    score = {key: value for key, value in ran.items()
             if isinstance(key, tuple) and key[0].startswith("swdask_score-")}
    # The GPU worker's 2 score tasks, each reading several of the 5 partitions.
    assert len(score) == plan_module.GPU_TASKS_PER_WORKER < len(store.partitions)
    assert {worker for worker, _ in score.values()} == {names["gpu"]}
    assert all(need == cluster_module.GPU_TASK_SHARE for _, need in score.values())
    others = [need for key, (_, need) in ran.items() if key not in score]
    assert others and not any(others)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expected.reset_index(drop=True))
    del futures

    subjects = {source.names[k]: source.alphabet.decode(source.codes(k))[:30] for k in range(3)}
    lazy = swdask.significance(queries, subjects, shuffles=4, seed=1, device="gpu",
                               queries_per_task=1)
    (frame,) = cluster_module.compute(lazy, client=client)
    here, _ = swdask.significance_in_process(queries, subjects, shuffles=4, seed=1, device="cpu")
    pd.testing.assert_frame_equal(frame.reset_index(drop=True), here)


def test_a_kernel_task_that_fails_once_runs_again(mixed_cluster, tmp_path):
    """Kernel tasks are pure: the scheduler runs one that raised again
    (swdask.task-retries); a plain task fails at once."""
    import dask

    client, names = mixed_cluster
    marker = str(tmp_path / "failed-once")
    task = dask.delayed(KernelTask(_flaky, "cpu"), pure=False)(marker)
    assert dask.compute(task)[0] in names.values()
    assert os.path.exists(marker)
    plain = dask.delayed(_flaky, pure=False)(str(tmp_path / "plain"))
    with pytest.raises(OSError, match="a passing fault"):
        dask.compute(plain)


# -- a scheduler given by address: every wait bounded, TLS ----------------------------------------


@pytest.fixture
def silent_socket():
    """A plain TCP server that takes connections and never answers."""
    import socket
    import threading

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    taken = []

    def accept():
        while True:
            try:
                taken.append(server.accept()[0])
            except OSError:  # closed
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for connection in taken:
        connection.close()


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _search_cli(tmp_path, *options):
    """``swdask search`` of the demo data with ``options``; (status, stderr lines)."""
    from importlib.resources import files

    data = files("swdask") / "data"
    return main(["search", str(data / "demo_queries.fasta"), str(data / "demo_db.fasta.gz"),
                 "-o", str(tmp_path / "hits.parquet"), "--quiet", *options])


def test_a_silent_scheduler_ends_in_one_line(silent_socket, tmp_path, capsys):
    """A server that takes the connection and never answers hung Dask's client for ever;
    now the wait ends at --scheduler-timeout (or swdask.scheduler-timeout)."""
    import time

    import dask

    started = time.monotonic()
    assert _search_cli(tmp_path, "--scheduler", silent_socket, "--scheduler-timeout", "1") == 2
    assert time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert err == (f"swdask: error: {silent_socket}: no Dask scheduler answered within 1 s: "
                   "something took the connection but sent nothing back (check the address, "
                   "or allow longer with --scheduler-timeout (swdask.scheduler-timeout))\n")
    assert not (tmp_path / "hits.parquet").exists()
    with dask.config.set({"swdask.scheduler-timeout": "0.5s"}), \
            pytest.raises(ClusterError, match="within 0.5 s: something took the connection"):
        swdask.cluster(scheduler=silent_socket)


def test_an_unreachable_scheduler_ends_in_one_line(tmp_path, capsys):
    address = f"tcp://127.0.0.1:{_free_port()}"
    assert _search_cli(tmp_path, "--scheduler", address, "--scheduler-timeout", "1") == 2
    assert capsys.readouterr().err == (
        f"swdask: error: {address}: no Dask scheduler answered within 1 s: connection refused "
        "(check the address, or allow longer with --scheduler-timeout "
        "(swdask.scheduler-timeout))\n")
    (tmp_path / "scheduler.json").write_text("{}")
    assert _search_cli(tmp_path, "--scheduler", str(tmp_path / "scheduler.json")) == 2
    assert capsys.readouterr().err == (f"swdask: error: {tmp_path / 'scheduler.json'}: not a Dask "
                                       "scheduler file (JSON with an 'address')\n")


def test_tls_options_and_their_errors(tmp_path, capsys):
    address = f"tls://127.0.0.1:{_free_port()}"
    assert _search_cli(tmp_path, "--scheduler", address) == 2
    assert capsys.readouterr().err == (
        f"swdask: error: {address}: a TLS scheduler needs TLS settings: --tls-ca-file, "
        "--tls-cert and --tls-key, or distributed.comm.tls.* in a Dask config file\n")
    for options, message in (
            (["--tls-ca-file", "nowhere.pem"], "nowhere.pem: no such file (--tls-ca-file)"),
            (["--workers", "1", "--scheduler-timeout", "3"], "--scheduler-timeout: options of "
             "--scheduler")):
        extra = [] if "--workers" in options else ["--scheduler", address]
        assert _search_cli(tmp_path, *extra, *options) == 2
        assert capsys.readouterr().err == f"swdask: error: {message}\n"


def _self_signed(folder: Path, name: str) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (it is its own authority) and its key."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return str(cert), str(key)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_search_on_a_tls_scheduler(tmp_path, capsys):
    """A real TLS cluster (scheduler and worker speak only TLS, with a certificate made
    here): the search given --tls-* equals the one here; without them, or with another
    authority, one line."""
    from distributed import LocalCluster
    from distributed.security import Security

    cert, key = _self_signed(tmp_path, "cluster")
    other, _ = _self_signed(tmp_path, "other")
    security = Security(tls_ca_file=cert, tls_scheduler_cert=cert, tls_scheduler_key=key,
                        tls_worker_cert=cert, tls_worker_key=key, tls_client_cert=cert,
                        tls_client_key=key, require_encryption=True)
    assert _search_cli(tmp_path, "--device", "cpu") == 0
    here = pq.read_table(tmp_path / "hits.parquet")
    (tmp_path / "hits.parquet").unlink()
    with LocalCluster(n_workers=1, processes=False, protocol="tls://", security=security,
                      dashboard_address=":0", host="127.0.0.1") as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tls://")
        assert _search_cli(tmp_path, "--scheduler", address, "--device", "cpu", "--tls-ca-file",
                           cert, "--tls-cert", cert, "--tls-key", key) == 0, \
            capsys.readouterr().err
        assert pq.read_table(tmp_path / "hits.parquet").equals(here)
        for options in ([], ["--tls-ca-file", other, "--tls-cert", cert, "--tls-key", key]):
            assert _search_cli(tmp_path, "--scheduler", address, "--device", "cpu", "--force",
                               "--scheduler-timeout", "3", *options) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"swdask: error: {address}: ") and err.count("\n") == 1, err


# -- a cluster that cannot go on: one line ----------------------------------------------------


def test_workers_that_keep_dying_end_in_one_line(tmp_path, capsys):
    """Every worker that starts a score task dies: Dask's KilledWorker, in one line."""
    with dying_workers("swdask_score-") as address:
        assert _search_cli(tmp_path, "--scheduler", address, "--device", "cpu") == 2
    err = capsys.readouterr().err
    assert err.startswith("swdask: error: the Dask cluster cannot go on: 2 workers died while "
                          "running task ('swdask_score-"), err
    assert err.endswith("(distributed.scheduler.allowed-failures is 1)\n") and err.count("\n") == 1
    assert not (tmp_path / "hits.parquet").exists()


def test_workers_that_cannot_start_end_in_one_line(tmp_path, capsys):
    """Dask's "Nanny failed to start" (here: a worker preload that is not there)."""
    import dask

    with dask.config.set({"distributed.worker.preload": ["swdask_test_no_such_module"]}):
        assert _search_cli(tmp_path, "--workers", "1", "--device", "cpu") == 2
    assert capsys.readouterr().err == (
        "swdask: error: the local Dask cluster (1 worker(s)) could not start: Nanny failed to "
        "start.: No module named 'swdask_test_no_such_module'\n")
    assert not (tmp_path / "hits.parquet").exists()
