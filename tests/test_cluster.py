"""Clusters (swdask.cluster): the plans of swdask.cluster() for each device and option, a
LocalCUDACluster where GPUs are visible, and GPU tasks taking a share of a worker's GPU
so that one worker runs two at once."""
from __future__ import annotations

import importlib
import sys

import pytest

import swdask
from swdask.cluster import shutdown
from swdask.errors import DeviceError

cluster_module = importlib.import_module("swdask.cluster")


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
    done, _ = _run_script(tmp_path, (
        "import swdask\n\n\ndef main():\n    " + _SCRIPT_CALL
        + "    print(len(client.scheduler_info()['workers']), 'worker')\n"
        "    client.close()\n    client.cluster.close()\n\n\n"
        "if __name__ == '__main__':\n    main()\n"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "1 worker\n"


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
