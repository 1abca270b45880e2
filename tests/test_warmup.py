"""``swdask warmup`` on the CPU: each job runs once, each step is timed in the report
(the GPU lane's ``swdask warmup --device gpu`` builds the CUDA kernels)."""
from swdask.warmup import warmup


def test_cpu_warmup_runs_every_job():
    said = []
    report = warmup("cpu", progress=said.append)
    assert report.device == "cpu"
    assert list(report.seconds) == ["search", "significance", "all-pairs"]
    assert all(seconds > 0 for seconds in report.seconds.values())
    assert [line.split(" kernels ready")[0] for line in said] == list(report.seconds)
    assert report.summary().startswith("warmup on cpu: search ")
