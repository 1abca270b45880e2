"""Long pair alignment (swdask.jobs.long_align, ``swdask align-long``): the traceback of
align_long equal to the full-matrix traceback, CPU / GPU / mixed Dask runs giving the same
answer, a planted answer on a real chromosome window, the cost model, the command line.
The tile kernels are tested in tests/kernels/cpu/test_tile.py and
tests/kernels/cuda/test_tile.py.  The megabase planted answer runs in the GPU lane
(``pytest -m gpu``)."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import swdask
from swdask.cli import main
from swdask.jobs import long_align as la
from swdask.jobs.long_align import score as la_score
from swdask.jobs.long_align import traceback as la_trace
from swdask.kernels.cpu.reference import align_reference
from swdask.kernels.cpu.traceback import align_codes
from swdask.parquet_schemas import LONG_ALIGNMENTS
from swdask.scoring import Scoring
from swdask.sequences.alphabet import DNA
from swdask.testing import planted_copy
from tests.helpers import CHROMOSOME, QUERIES, related_pair, window_codes


@pytest.fixture(scope="module")
def cpu_client():
    client = la_score.local_cluster("cpu", 0)
    yield client
    cluster = client.cluster
    client.close()
    cluster.close()


# -- align_long end to end -----------------------------------------------------------------

def test_align_long_traceback_equals_align_codes(cpu_client, monkeypatch):
    """Tiles much smaller than the sequences, a path crossing many of them, and the
    traceback's grids forced (tiny leaves, at most 3 x 3 tiles a grid, so grids within
    grids): the alignment of align_codes."""
    monkeypatch.setattr(la_trace, "LEAF_CELLS", 300)
    monkeypatch.setattr(la_trace, "TRACE_MAX_SPLIT", 3)
    codes = window_codes()
    scoring = Scoring(alphabet="dna")
    a = codes[:1500]
    b, _, _ = planted_copy(codes[300:1200], scoring, spacing=60, seed=4)
    b = np.concatenate([codes[5000:5100], b, codes[7000:7061]])
    ref = align_codes(a, b, scoring)
    for tile in (61, 250):
        r = la.align_long(a, b, scoring=scoring, tile=tile, device="cpu", traceback=True,
                          client=cpu_client)
        got = (r.score, r.query_start, r.query_end, r.subject_start, r.subject_end, r.cigar,
               r.matches, r.mismatches, r.gap_opens, r.align_length)
        want = tuple(ref[k] for k in ("score", "query_start", "query_end", "subject_start",
                                      "subject_end", "cigar", "matches", "mismatches",
                                      "gap_opens", "align_length"))
        assert got == want, tile
        assert r.pident == pytest.approx(100 * ref["identity"])
        assert r.tile_rows == -(-1500 // tile) and r.device == "cpu"
        counters = r.stats["traceback"]
        assert counters["grids"]["cpu"] > 0 and counters["depth"] >= (3 if tile == 250 else 2)
        assert counters["leaf_cells"] < counters["grid_cells"] and counters["boundary_bytes"] == 0


def test_align_long_random_pairs_and_edges(cpu_client):
    rng = np.random.default_rng(8)
    scoring = Scoring(alphabet="dna")
    for m, n, tile in [(1, 1, 1), (1, 40, 7), (33, 1, 32), (120, 95, 31), (0, 10, 4)]:
        a, b = related_pair(rng, m, n)
        r = la.align_long(a, b, scoring=scoring, tile=tile, device="cpu", traceback=True,
                          client=cpu_client)
        ref = align_reference(a.tolist(), b.tolist(), scoring.matrix, 5, 2)
        assert (r.score, r.query_start, r.query_end, r.subject_start, r.subject_end) == ref[:5]


def test_planted_answer_on_a_chromosome_window(cpu_client):
    """20 kb of NCTC 11397 against a 14 kb stretch of it with 68 planted mutations: the
    score is the planted one, the ends and the mutations are found."""
    codes = window_codes()
    scoring = Scoring(alphabet="dna")
    a = codes[:20_000]
    b, score, ops = planted_copy(a[3000:17_000], scoring, spacing=200, seed=1)
    r = la.align_long(a, b, scoring=scoring, device="cpu", traceback=True, client=cpu_client)
    assert r.score == score
    assert (r.query_start, r.query_end, r.subject_start, r.subject_end) == (3000, 17_000, 0, len(b))
    n_mut = len(range(200, 14_000 - 200, 200))
    assert r.gap_opens == 2 * (n_mut // 3) + (n_mut % 3 == 2)
    assert r.mismatches == (n_mut + 2) // 3
    assert r.tile_rows * r.tile_cols > 1


def test_reverse_complement_reports_the_better_strand(cpu_client):
    codes = window_codes()
    scoring = Scoring(alphabet="dna")
    a = codes[:600]
    b = np.concatenate([codes[9000:9100], la.reverse_complement(a[100:400]), codes[9500:9550]])
    r = la.align_long(a, b, scoring=scoring, tile=128, device="cpu", traceback=True,
                      reverse_complement=True, client=cpu_client)
    ref = align_codes(a, la.reverse_complement(b), scoring)
    assert r.strand == "-" and r.score == ref["score"] >= 600 and r.cigar == ref["cigar"]
    # Coordinates on the reverse complement of b, where the copy starts 50 residues in.
    assert (r.query_start, r.query_end, r.subject_start, r.subject_end) == \
        (ref["query_start"], ref["query_end"], ref["subject_start"], ref["subject_end"])
    assert abs(r.subject_start - 50) <= 3 and abs(r.query_start - 100) <= 3
    fields = r.sam_lines()[-1].split("\t")
    assert fields[1] == "16" and int(fields[3]) == len(b) - r.subject_end + 1
    assert fields[5] == f"{600 - r.query_end}S{r.cigar}{r.query_start}S"  # one run: reversed = same
    forward = la.align_long(a, b, scoring=scoring, tile=128, device="cpu", client=cpu_client)
    assert forward.strand == "+" and forward.score < r.score
    with pytest.raises(swdask.SwdaskError, match="needs DNA"):
        la.align_long("MKV", "MKV", scoring=Scoring(), reverse_complement=True, client=cpu_client)


def test_cpu_gpu_and_mixed_give_identical_results_in_the_simulator():
    """The same tiles on a CPU worker, on a (simulated) GPU worker, and on both at once."""
    codes = window_codes()
    scoring = Scoring(alphabet="dna")
    a = codes[1000:1040]
    b = np.concatenate([codes[3000:3008], codes[1010:1034], codes[3100:3106]])
    ref = align_codes(a, b, scoring)
    results = {}
    for device in ("cpu", "gpu", "both"):
        r = la.align_long(a, b, scoring=scoring, tile=24, device=device, traceback=True)
        results[device] = r
        assert (r.score, r.query_start, r.query_end, r.subject_start, r.subject_end, r.cigar) == \
            (ref["score"], ref["query_start"], ref["query_end"], ref["subject_start"],
             ref["subject_end"], ref["cigar"]), device
    assert results["gpu"].device == "gpu" and results["cpu"].device == "cpu"



@pytest.mark.parametrize("device", ["cpu", "gpu", "both"])
def test_a_one_tile_plan_runs_here_without_dask(device, cpu_client, monkeypatch):
    """Without a client and traceback, a pair the plan leaves whole is scored in this
    process (on the GPU, the simulator's here, for "gpu" and a GPU row of "both"), both
    strands too: the best cell of the Dask path and of the reference, and no cluster."""
    codes = window_codes()
    scoring = Scoring(alphabet="dna")
    a = codes[2000:2050]  # small: the simulator runs every GPU lane as a Python thread
    b = np.concatenate([codes[4000:4010], DNA.encode("ACGT" * 2), codes[2010:2042]])
    monkeypatch.setattr(la_score, "local_cluster", lambda *args: pytest.fail("a cluster"))
    for rc in (False, True):
        here = la.align_long(a, b, scoring=scoring, device=device, reverse_complement=rc)
        assert (here.tile_rows, here.tile_cols) == (1, 1)
        gpu_tile = device == "gpu" or (device == "both" and here.stats["plan"].gpu_rows == 1)
        assert here.device == ("gpu" if gpu_tile else "cpu")
        dask = la.align_long(a, b, scoring=scoring, tile=len(a), device="cpu",
                             reverse_complement=rc, client=cpu_client)
        assert (here.score, here.query_end, here.subject_end, here.strand) == \
            (dask.score, dask.query_end, dask.subject_end, dask.strand), rc
        assert here.cells == len(a) * len(b) * (2 if rc else 1) and here.score_seconds > 0
    score, _, query_end, _, subject_end, _ = align_reference(
        a, b, scoring.matrix, scoring.gap_open, scoring.gap_extend)
    forward = la.align_long(a, b, scoring=scoring, device=device)
    assert (forward.score, forward.query_end, forward.subject_end) == \
        (score, query_end, subject_end)


def test_tile_rows_are_dealt_out_to_every_worker():
    """On 2 one-thread workers the tile rows alternate between them (row_workers), so both
    score tiles the whole time instead of the tiles following their neighbours' data to
    one worker; the result is the one-worker result."""
    from distributed import Client, LocalCluster, get_task_stream

    scoring = Scoring(alphabet="dna")
    codes = window_codes()
    a, b = codes[:600], codes[300:900]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        plan = la.plan_tiles(len(a), len(b), tile=100)
        placed = la_score.row_workers(client, plan, "cpu")
        assert len(set(placed)) == 2 and placed[0] != placed[1] and placed[0] == placed[2]
        with get_task_stream(client) as stream:
            two = la.align_long(a, b, scoring=scoring, tile=100, device="cpu", client=client)
        ran = {}
        for record in stream.data:
            parts = str(record["key"]).split("-")
            if parts[:2] == ["swdask", "tile"] and parts[2] != "best":
                ran[int(parts[-2]), int(parts[-1])] = record["worker"]
        assert len(ran) == 36 and all(ran[p, q] == placed[p] for p, q in ran)
    one = la.align_long(a, b, scoring=scoring, tile=100, device="cpu")
    assert (two.score, two.query_end, two.subject_end) == (one.score, one.query_end,
                                                            one.subject_end)


#: Workers that ran a tile of the traceback's walk (in-process workers: the same module).
_TRACED_ON = []


def _recording_trace_tile(*args):
    from distributed import get_worker

    _TRACED_ON.append(get_worker().name)  # raises ValueError outside a worker
    return la_trace.trace_tile_of_walk(*args)


def test_traceback_runs_on_the_gpu_worker_in_the_simulator(monkeypatch):
    """``device="gpu"``: each tile of the traceback's walk is a task on the (simulated) GPU
    worker, the first grid on that worker's GPU; ``device="cpu"``: tasks on the CPU worker,
    CPU grids only.  The client process runs no grid."""
    from swdask.kernels.cuda import tile as gpu_tile

    monkeypatch.setattr(la_trace, "LEAF_CELLS", 40)
    monkeypatch.setattr(la_trace, "GPU_TRACE_CELLS", 400)
    monkeypatch.setattr(gpu_tile, "grid_shape", lambda h, w: (1, 4))
    monkeypatch.setattr(la_trace, "trace_tile_of_walk", la_trace._trace_tile, raising=False)
    monkeypatch.setattr(la_trace, "_trace_tile", _recording_trace_tile)
    codes = window_codes()
    scoring = Scoring(alphabet="dna")
    a = codes[540:580]
    b = np.concatenate([codes[700:702], a[22:31], a[33:38]])
    for device, worker in (("gpu", "gpu-0"), ("cpu", "cpu")):
        _TRACED_ON.clear()
        r = la.align_long(a, b, scoring=scoring, tile=64, device=device, traceback=True)
        assert (r.score, r.query_start, r.query_end, r.subject_start, r.subject_end,
                r.cigar) == (19, 22, 38, 2, 16, "9=2I5="), device
        assert _TRACED_ON and set(_TRACED_ON) == {worker}, device
        grids = r.stats["traceback"]["grids"]
        assert grids["gpu"] == (1 if device == "gpu" else 0) and grids["cpu"] >= 1, device

# -- cost model ----------------------------------------------------------------------------

def test_cost_model_plans():
    model = la.CostModel()
    cpu = la.plan_tiles(1_000_000, 2_460_000, cpu_threads=16, model=model)
    assert cpu.rows[0] == 0 and cpu.rows[-1] == 1_000_000 and cpu.cols[-1] == 2_460_000
    assert cpu.shape[0] >= 4  # enough tiles on a diagonal for 16 threads
    gpu = la.plan_tiles(1_000_000, 2_460_000, gpus=1, cpu_threads=0, model=model)
    both = la.plan_tiles(1_000_000, 2_460_000, gpus=1, cpu_threads=15, model=model)
    assert both.predicted <= gpu.predicted  # "no CPU" is one of the mixed candidates
    assert gpu.gpu_rows == 1 and both.gpu_rows == 1
    # A slow GPU makes CPU tiles pay: the plan then gives rows to the CPUs.
    slow = la.CostModel(gpu_gcups=20.0, gpu_warp_gcups=20.0 / 2112)
    assert la.plan_tiles(100_000, 100_000, gpus=1, cpu_threads=16, model=slow).shape[0] > 1
    assert la.simulate(la.plan_tiles(10, 10, tile=5), model, 0, 0) == float("inf")


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.integers(1, 5_000), min_size=1, max_size=6),
       cols=st.lists(st.integers(1, 5_000), min_size=1, max_size=6),
       gpu_rows=st.integers(0, 6), gpus=st.integers(0, 2), cpu_threads=st.integers(0, 4),
       slow_gpu=st.booleans())
def test_the_makespan_bound_never_exceeds_the_simulation(rows, cols, gpu_rows, gpus,
                                                         cpu_threads, slow_gpu):
    """plan_tiles skips the candidates whose bound is above its best: that is exact only
    if the bound is one (list scheduling never beats the critical path or the GPU work)."""
    model = la.CostModel(gpu_gcups=0.5, gpu_warp_gcups=0.01) if slow_gpu else la.CostModel()
    plan = la.TilePlan(tuple(np.cumsum([0, *rows]).tolist()),
                       tuple(np.cumsum([0, *cols]).tolist()),
                       gpu_rows=min(gpu_rows, len(rows)) if gpus else 0)
    made = la.simulate(plan, model, gpus, cpu_threads)
    assert la.plan.makespan_bound(plan, model, gpus, cpu_threads) <= made * (1 + 1e-12)


@pytest.mark.parametrize("m, n", [(1_000_000, 1_000_029), (2_460_000, 1_000_000),
                                  (50_000, 3_000_000), (20_000, 20_000), (3_000, 700)])
@pytest.mark.parametrize("gpus, cpu_threads", [(0, 16), (1, 15), (2, 30), (1, 1)])
@pytest.mark.parametrize("slow_gpu", [False, True])
def test_pruned_plans_are_the_full_searchs(monkeypatch, m, n, gpus, cpu_threads, slow_gpu):
    """The bound only saves time (0.65 s -> 0.08 s for a 1 Mb pair with 15 threads): the
    plan is the one simulating every candidate picks."""
    model = la.CostModel(gpu_gcups=20.0, gpu_warp_gcups=20.0 / 2112) if slow_gpu \
        else la.CostModel()
    pruned = la.plan_tiles(m, n, gpus=gpus, cpu_threads=cpu_threads, model=model)
    monkeypatch.setattr(la.plan, "makespan_bound", lambda *args: -np.inf)
    full = la.plan_tiles(m, n, gpus=gpus, cpu_threads=cpu_threads, model=model)
    assert pruned == full


def test_plans_for_two_gpus_are_never_slower_than_for_one():
    """A tile row per GPU made 1 Mb x 1 Mb slower on 2 GPUs than on one, and 4 x 2 tiles
    the whole 2.46 Mb chromosome against its copy (each tile restarts the kernel's
    wavefront); one tile in all is a candidate, so those stay on one GPU, and only a
    larger pair is cut."""
    model = la.CostModel()
    for m, n in ((1_000_000, 1_000_000), (2_460_000, 1_000_000), (2_460_000, 2_460_000),
                 (5_000_000, 5_000_000)):
        one = la.plan_tiles(m, n, gpus=1, cpu_threads=0, model=model)
        two = la.plan_tiles(m, n, gpus=2, cpu_threads=0, model=model)
        assert two.predicted <= one.predicted, (m, n)
        row_per_gpu = la.TilePlan(tuple(range(0, m + 1, m // 2)), (0, n), gpu_rows=2)
        assert two.predicted <= la.simulate(row_per_gpu, model, 2, 0), (m, n)
        if m < 5_000_000:  # measured slower when cut (2 x H200, 2026-11-28)
            assert two.shape == (1, 1), (m, n)
    assert two.shape[0] > 1 and two.predicted < 0.85 * one.predicted  # 5 Mb squared


def test_calibrate_cpu():
    model = la.calibrate(kinds=("cpu",), size=256, repeats=1)
    assert model.cpu_gcups > 0 and model.cpu_overhead >= 0
    assert model.gpu_gcups == la.CostModel().gpu_gcups


def test_errors(cpu_client):
    with pytest.raises(ValueError, match=r"^unknown device 'tpu'; choose one of: auto, cpu, gpu, both$"):
        la.align_long("ACGT", "ACGT", device="tpu")
    with pytest.raises(ValueError, match="tile must be"):
        la.align_long("ACGT", "ACGT", tile=0)
    with pytest.raises(ValueError, match="beyond the exact 32-bit range"):
        la.check_score_range(600_000_000, 600_000_000, Scoring(alphabet="dna"))
    with pytest.raises(swdask.errors.DeviceError, match="needs a Dask worker with the resource GPU=1"):
        la.align_long("ACGT", "ACGT", device="gpu", client=cpu_client)
    with pytest.raises(swdask.errors.InvalidSequenceError, match="not in the dna alphabet"):
        la.align_long(QUERIES, "ACGT", scoring=Scoring(alphabet="dna"),
                      client=cpu_client)


# -- command line --------------------------------------------------------------------------

def test_cli_align_long(tmp_path, capsys):
    codes = window_codes()
    a_path, b_path = tmp_path / "a.fa", tmp_path / "b.fa"
    a_path.write_text(">win\n" + DNA.decode(codes[:800]) + "\n")
    b, score, _ = planted_copy(codes[200:700], Scoring(alphabet="dna"), spacing=100, seed=2)
    b_path.write_text(">copy mutated\n" + DNA.decode(b) + "\n")
    out, sam = tmp_path / "out.parquet", tmp_path / "out.sam"
    argv = ["align-long", str(a_path), str(b_path), "-o", str(out), "--tile", "128",
            "--device", "cpu", "--traceback", "--sam", str(sam)]
    assert main(argv) == 0
    table = pq.read_table(out)
    assert table.schema.equals(LONG_ALIGNMENTS, check_metadata=False)
    row = table.to_pylist()[0]
    assert (row["query"], row["subject"], row["score"], row["query_start"], row["query_end"]) == \
        ("win", "copy", score, 200, 700)
    lines = sam.read_text().splitlines()
    assert lines[0].startswith("@HD") and lines[1] == f"@SQ\tSN:copy\tLN:{len(b)}"
    record = lines[-1].split("\t")
    assert record[0] == "win" and record[2] == "copy" and record[5].startswith("200S")
    # The summary counts from 1, inclusive, as BLAST prints (the table: 0-based half-open).
    summary = capsys.readouterr().err
    assert (f"score {score} on strand +: query 201..700, subject {row['subject_start'] + 1}.."
            f"{row['subject_end']} (1-based), ") in summary
    # B reverse complemented: the same alignment on strand -, its subject interval on B as
    # given counted from its end (start > end, as blastn's sstart > send).
    rc_path, rc_out = tmp_path / "rc.fa", tmp_path / "rc.parquet"
    rc = DNA.decode(b)[::-1].translate(str.maketrans("ACGTN", "TGCAN"))
    rc_path.write_text(f">copy\n{rc}\n")
    assert main(["align-long", str(a_path), str(rc_path), "-o", str(rc_out), "--tile", "128",
                 "--device", "cpu", "--traceback", "--reverse-complement"]) == 0
    first, last = len(b) - row["subject_start"], len(b) - row["subject_end"] + 1
    assert (f"score {score} on strand -: query 201..700, subject {first}..{last} (1-based; "
            "subject reverse complemented), ") in capsys.readouterr().err
    # Errors: one line, exit 2, nothing written.
    assert main(argv) == 2
    assert "already exists" in capsys.readouterr().err
    bad = tmp_path / "bad.parquet"
    assert main(["align-long", str(a_path), str(b_path), "-o", str(bad), "--tile", "0"]) == 2
    assert main(["align-long", str(a_path), str(b_path), "-o", str(bad), "--sam", "x.sam"]) == 2
    err = capsys.readouterr().err
    assert err.count("swdask: error:") == 2 and "--sam needs --traceback" in err
    assert not bad.exists() and not list(tmp_path.glob(".*.tmp"))


# -- GPU lane ------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_megabase_planted_answer():
    """1 Mb of the real chromosome against a mutated copy of 600 kb of it: the planted
    score on the GPU alone, and on GPU and CPU workers at once; the traceback's path."""
    from swdask.sequences.store import load_sequences

    assert CHROMOSOME.is_file(), (f"{CHROMOSOME}: the whole NCTC 11397 chromosome is not "
                                  "here; set SWDASK_CHROMOSOME to its path "
                                  "(../shared/data/NCTC11397_chromosome.fna.gz)")
    codes = load_sequences(CHROMOSOME).codes(0)
    scoring = Scoring(alphabet="dna")
    a = codes[:1_000_000]
    b, score, ops = planted_copy(a[200_000:800_000], scoring, spacing=1000, seed=3)
    results = {}
    for device in ("gpu", "both"):
        r = la.align_long(a, b, scoring=scoring, device=device, traceback=device == "gpu")
        assert r.score == score, device
        assert (r.query_end, r.subject_end) == (800_000, len(b)), device
        results[device] = r
    r = results["gpu"]
    assert (r.query_start, r.subject_start) == (200_000, 0)
    n_mut = len(range(1000, 600_000 - 1000, 1000))
    assert r.mismatches == (n_mut + 2) // 3
    assert r.gap_opens == 2 * (n_mut // 3) + (n_mut % 3 == 2)


@pytest.mark.gpu
def test_calibrate_gpu_on_a_real_gpu():
    """The GPU fit: a warp's rate from one strip, the GPU's from a wide tile, and a model
    that predicts the wide tile's time it was fitted to."""
    model = la.calibrate(kinds=("gpu",), repeats=3)
    assert 0 < model.gpu_warp_gcups < model.gpu_gcups
    assert 0 < model.gpu_launch <= la.CostModel().gpu_launch
    assert model.cpu_gcups == la.CostModel().cpu_gcups
    assert model.gpu_overhead >= la.CostModel().gpu_overhead
