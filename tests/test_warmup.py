"""``swdask warmup`` on the CPU: each job runs once, each step is timed in the report
(the GPU lane's ``swdask warmup --device gpu`` builds the CUDA kernels)."""
import pytest

from swdask.warmup import kernel_specs, warmup


def test_cpu_warmup_runs_every_job():
    said = []
    report = warmup("cpu", progress=said.append)
    assert report.device == "cpu"
    assert list(report.seconds) == ["search", "significance", "all-pairs"]
    assert all(seconds > 0 for seconds in report.seconds.values())
    assert [line.split(" kernels ready")[0] for line in said] == list(report.seconds)
    assert report.summary().startswith("warmup on cpu: search ")


@pytest.mark.parametrize("default", ["scan", "ends"])
def test_gpu_warmup_builds_the_default_search_kernel_only(default, monkeypatch):
    """The 16-bit local search kernel that searches launch (``SEARCH_KERNEL``) is built
    ahead, not the other one (46 shapes of the kernel with end cells went unused once the
    scan kernel became the default), and the scan kernel's global variant either way (a
    global search runs it whichever is named); the rest of the list is the same."""
    from swdask.kernels.cuda import codegen, inter_task, launcher

    monkeypatch.setattr(inter_task, "has_dpx", lambda: True)  # no GPU in CI: say Hopper
    monkeypatch.setattr(codegen, "has_dpx", lambda: True)
    monkeypatch.setattr(launcher, "SEARCH_KERNEL", default)
    specs = kernel_specs()
    local = {family for family, shape in specs if shape.get("mode", "local") == "local"}
    other = {"scan": "inter_task_dpx", "ends": "inter_task_dpx_scan"}[default]
    assert launcher.PACKED_FAMILIES[default] in local and other not in local
    assert {family for family, shape in specs if shape.get("mode") == "global"} == {
        "inter_task_dpx_scan"}
    assert {"inter_task", "intra_task", "all_pairs", "tile"} <= local
