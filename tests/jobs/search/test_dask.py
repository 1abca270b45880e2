"""The Dask search (swdask.jobs.search) against the single-process engine (search_in_process):
the same hits on Dask's threads, with 1 and 2 workers, with a worker killed mid-search,
on a multi-node cluster started here, and with the CUDA kernels in the simulator; GPU
routing; schema errors."""
from __future__ import annotations

import dataclasses
import gc
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import dask
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed.diagnostics.plugin import WorkerPlugin
from numba import config

import swdask
from swdask.cli import main
from swdask.cluster import shutdown
from swdask.errors import DeviceError, SchemaError
from swdask.parquet_schemas import HITS
from swdask.tables import to_pandas
from tests.helpers import QUERIES, SPROT_DB, FirstAssignment, first_assignments

search_module = importlib.import_module("swdask.jobs.search.plan")
cluster_module = importlib.import_module("swdask.cluster")


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
    assert sum(1 for name in names if name.startswith("swdask_score-")) == 1  # 15 tasks
    assert any(name.startswith("merge_candidates") for name in names)
    assert any(name.startswith("traceback_batch") for name in names)


def test_only_the_score_tasks_read_the_store(store, reference, monkeypatch):
    """4 traceback tasks read no store file: each candidate carries its subject's name and
    residues from its score task, so every read is a score task's, each piece once; the
    hits are the in-process ones."""
    tasks_module = importlib.import_module("swdask.jobs.search.tasks")
    reads, outside = [], []
    scoring = set()  # threads inside a score task
    real_read, real_score = tasks_module.read_part, tasks_module.score_partition

    def counted(path, *args, **kwargs):
        item = (str(path), tuple(kwargs.get("row_groups") or ()))
        (reads if threading.get_ident() in scoring else outside).append(item)
        return real_read(path, *args, **kwargs)

    def score(*args, **kwargs):
        scoring.add(threading.get_ident())
        try:
            return real_score(*args, **kwargs)
        finally:
            scoring.discard(threading.get_ident())

    monkeypatch.setattr(tasks_module, "read_part", counted)
    monkeypatch.setattr(tasks_module, "score_partition", score)
    monkeypatch.setattr(search_module, "TRACEBACK_QUERIES", 3)  # 12 queries: 4 tasks
    hits = swdask.search(QUERIES, store, max_hits=10)
    assert hits.npartitions == 4
    same_hits(hits.compute(), reference)
    assert reads and len(reads) == len(set(reads)) and not outside
    assert {path for path, _ in reads} == {str(path) for path in store.files}


def test_score_tasks_cut_into_chunks_of_queries_give_the_same_hits(store, reference,
                                                                   monkeypatch):
    """A score table bound that allows one query row a chunk: each chunk's candidates are
    cut to their best at once, and the task's table is the chunks' tables end to end."""
    plan_module = importlib.import_module("swdask.jobs.search.plan")
    monkeypatch.setattr(plan_module, "SCORE_TABLE_BYTES", 1)
    same_hits(swdask.search(QUERIES, store, max_hits=10).compute(), reference)


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


def test_both_engines_count_the_queries_that_reached_max_hits(store, small_batches):
    """Three queries have 3 or more hits of E <= 1 (counted from the table here), spread
    over the three traceback tasks' batches of 5 queries."""
    options = {"max_hits": 3, "evalue": 1.0}
    table, stats = dask.compute(*swdask.search(QUERIES, store, return_stats=True, **options))
    _, here = swdask.search_in_process(QUERIES, store, return_stats=True, **options)
    counts = table.groupby("query_id").size()
    assert stats.queries_at_max_hits == here.queries_at_max_hits == (counts == 3).sum() == 3
    assert stats.max_hits == here.max_hits == 3


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


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="simulator lane only")
@pytest.mark.parametrize("mode", ["local", "global", "semiglobal"])
def test_search_device_gpu_in_the_simulator_matches_cpu(tmp_path, mode):
    """``search(device="gpu")`` runs the CUDA kernels (here simulated): identical hits, in
    every mode (8 of the 10 global hits score below 0)."""
    queries = {"q1": "MKVLAAGIVGLLLAWHEEGK", "q2": "WWHEAGAWGHEE"}
    db = tmp_path / "db.fasta"
    source = swdask.load_sequences(SPROT_DB)
    with open(db, "w") as handle:
        for k in range(12):
            seq = source.alphabet.decode(source.codes(k))[:25]
            handle.write(f">{source.names[k]}\n{seq}\n")
        handle.write(">self\nMKVLAAGIVGLLLAWHEEGK\n")
    cpu = swdask.search(queries, db, device="cpu", max_hits=5, mode=mode).compute()
    gpu, stats = dask.compute(*swdask.search(queries, db, device="gpu", max_hits=5, mode=mode,
                                             return_stats=True))
    assert stats.device == "gpu"
    assert len(cpu) == 10
    if mode == "global":
        assert (cpu["score"] < 0).sum() == 8
    assert cpu.equals(gpu)


@pytest.mark.parametrize("mode", ["local", "global", "semiglobal"])
def test_cli_device_gpu_in_the_simulator_matches_cpu(tiny, tmp_path, capsys, mode):
    """``--device gpu`` in every mode (global and semiglobal were refused before the GPU
    kernels had them): the CPU's hits, here and on Dask."""
    queries, store = tiny
    tables = {}
    for device in ("cpu", "gpu"):
        out = tmp_path / f"{device}.parquet"
        assert main(["search", str(queries), str(store.path), "-o", str(out), "--device", device,
                     "--max-hits", "4", "--mode", mode, "--quiet"]) == 0, capsys.readouterr().err
        tables[device] = pq.read_table(out)
    assert tables["gpu"].num_rows == 8
    assert tables["gpu"].equals(tables["cpu"])
    hits, stats = swdask.search(queries, store, device="gpu", max_hits=4, mode=mode,
                                return_stats=True)
    table, stats = dask.compute(hits, stats)
    assert stats.device == "gpu"
    assert pa.Table.from_pandas(table, schema=HITS, preserve_index=False).equals(tables["cpu"])


def test_both_search_engines_rank_ties_on_the_gpu_by_seq_id(tiny, monkeypatch):
    """The GPU's selection gets each partition's seq_id (``top_many(ties=)``), in the Dask
    flow and in one process, so that the scan kernel's end pass runs on each query's best
    ``max_hits`` alone; the hits stay the CPU's."""
    from swdask.kernels.cuda import launcher

    queries, store = tiny
    seen = []
    original = launcher.DeviceSubjects.top_many

    def spy(self, *args, ties=None, **kwargs):
        seen.append(None if ties is None else (len(ties), len(self.subjects)))
        return original(self, *args, ties=ties, **kwargs)

    monkeypatch.setattr(launcher.DeviceSubjects, "top_many", spy)
    cpu = swdask.search_in_process(queries, store, device="cpu", max_hits=2)
    one = swdask.search_in_process(queries, store, device="gpu", max_hits=2)
    flow = swdask.search(queries, store, device="gpu", max_hits=2).compute()
    # In one process one call for the first file and one for the run of the other four
    # (api._gpu_groups); on Dask one a score task (the GPU's two per worker, each reading
    # several partitions).
    assert len(store.partitions) == 5
    assert len(seen) == 2 + search_module.GPU_TASKS_PER_WORKER
    assert all(s is not None and s[0] == s[1] for s in seen)
    assert cpu.equals(one) and cpu.equals(flow.reset_index(drop=True))


def test_gpu_score_tasks_declare_their_device(tiny):
    """What the scheduler routes by (swdask.gpu_resources): the score tasks of a "gpu"
    search, read off the tasks of the graph that is computed, and nothing else."""
    queries, store = tiny
    graph = dict(swdask.search(queries, store, device="gpu").optimize().__dask_graph__())
    routed = {key for key, task in graph.items() if swdask.gpu_resources(task)}
    # The score tasks and nothing else: two for the one worker, each reading several of
    # the 5 partitions (GPU_TASKS_PER_WORKER).
    assert len(routed) == search_module.GPU_TASKS_PER_WORKER == 2
    assert all(key[1] in range(2) for key in routed)
    cpu_graph = swdask.search(queries, store, device="cpu").__dask_graph__()
    assert not any(swdask.gpu_resources(task) for task in cpu_graph.values())


# -- on clusters ---------------------------------------------------------------------------


def test_device_gpu_needs_a_worker_that_sees_one(monkeypatch, store):
    from distributed import Client, LocalCluster

    import swdask.backend

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
    # The score tasks are dealt out to both workers (swdask.cluster.TaskRouting): before,
    # Dask put them all on the worker holding the job, and on a loaded 2-core machine
    # none was stolen in some runs.
    _scheduler_idle(client)
    table, found = client.gather(client.compute([hits, stats]))
    same_hits(table, reference)
    assert found.n_hits == len(reference) and found.workers == 2
    table, found = cluster_module.compute(hits, stats, client=client)  # what the CLI runs
    same_hits(table, reference)


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    """sprot_db in 5 files, 4 of 11 or 12 row groups and one of 4 (about 4,000 residues a
    row group): files that the score tasks of a search on 2 workers are cut into."""
    ingest_module = importlib.import_module("swdask.sequences.ingest")
    path = tmp_path_factory.mktemp("grouped") / "sprot.store"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ingest_module, "ROW_GROUP_RESIDUES", 4_000)
        store = swdask.ingest(SPROT_DB, path, partition_residues=40_000)
    groups = [pq.ParquetFile(f).metadata.num_row_groups for f in store.files]
    assert len(groups) == 5 and min(groups[:4]) >= 11 and groups[4] >= 2
    return store


def test_score_pieces_cover_each_file_once_largest_first(grouped):
    from swdask.sequences.store import row_group_sizes

    files = [str(f) for f in grouped.files]
    residues = [p["n_residues"] for p in grouped.partitions]
    one = search_module.score_pieces(files, residues, workers=1)
    assert sorted(p.number for p in one) == [0, 1, 2, 3, 4]  # one per file, as stored
    assert all(p.row_groups is None and p.first_row == 0 for p in one)
    even = sum(residues) / 2
    assert search_module.longest_share(residues, 2) > 1.05 * even  # so the files are cut
    pieces = search_module.score_pieces(files, residues, workers=2)
    assert len(pieces) > len(files)
    assert [p.residues for p in pieces] == sorted((p.residues for p in pieces), reverse=True)
    # Cut until the workers' shares are even (or into single row groups, the finest cut).
    assert (search_module.longest_share([p.residues for p in pieces], 2) <= 1.05 * even
            or all(p.row_groups is not None and len(p.row_groups) == 1 for p in pieces))
    for number, path in enumerate(files):
        rows, group_residues = row_group_sizes(path)
        mine = sorted((p for p in pieces if p.number == number), key=lambda p: p.first_row)
        groups = [list(range(len(rows))) if p.row_groups is None else list(p.row_groups)
                  for p in mine]  # None: the whole file (one no larger than a piece)
        assert [g for run in groups for g in run] == list(range(len(rows)))
        assert [p.first_row for p in mine] == [int(rows[:run[0]].sum()) for run in groups]
        assert [p.residues for p in mine] == [int(group_residues[run].sum()) for run in groups]


def test_gpu_tasks_read_several_pieces_with_the_same_candidates(grouped):
    """A GPU search gives each worker two score tasks (GPU_TASKS_PER_WORKER), each reading
    several pieces of the store (a GPU task's host work is per batch of queries, whatever
    its subjects): every piece once, largest task first, and candidates (scores, ends,
    file and row of each subject) identical to those of one task a piece."""
    tasks_module = importlib.import_module("swdask.jobs.search.tasks")
    options = dict(scoring=None, mode="local", max_hits=10, min_score=None, evalue=None,
                   alphabet="auto", map_unknown=False, owner="caller", workers=2)
    gpu = search_module.prepare(QUERIES, grouped, device="gpu", **options)
    cpu = search_module.prepare(QUERIES, grouped, device="cpu", **options)
    assert gpu.pieces == cpu.pieces and len(cpu.tasks) == len(cpu.pieces) > 4
    assert len(gpu.tasks) == search_module.GPU_TASKS_PER_WORKER * 2
    assert sorted(k for task in gpu.tasks for k in task) == list(range(len(gpu.pieces)))
    cells = [gpu.task_cells(t) for t in range(len(gpu.tasks))]
    assert cells == sorted(cells, reverse=True) and sum(cells) == gpu.cells
    grouped_job = dataclasses.replace(cpu, tasks=gpu.tasks)  # scored on the CPU here
    merged = [tasks_module.merge_candidates(job, *(tasks_module.score_partition(job, t)
                                                   for t in range(len(job.tasks)))).table
              for job in (cpu, grouped_job)]
    assert len(merged[0]) > 0
    pd.testing.assert_frame_equal(merged[0], merged[1])
    # A large database makes more tasks than two a worker: at most GPU_TASK_RESIDUES each.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search_module, "GPU_TASK_RESIDUES", grouped.n_residues // 6)
        capped = search_module.prepare(QUERIES, grouped, device="gpu", **options)
    assert len(capped.tasks) in (6, 7) and len(capped.pieces) > 7
    assert sorted(k for task in capped.tasks for k in task) == list(range(len(capped.pieces)))


def test_two_workers_cut_files_into_pieces_with_the_same_hits(client, grouped,
                                                               small_batches):
    reference = swdask.search_in_process(QUERIES, grouped, max_hits=10)
    job = search_module.prepare(QUERIES, grouped, scoring=None, mode="local", max_hits=10,
                                min_score=None, evalue=None, device="cpu", alphabet="auto",
                                map_unknown=False, owner="caller", workers=2)
    assert len(job.pieces) > len(grouped.files)
    assert job.batch_size == 4 and job.n_batches == 3  # 12 queries: 4, 4, 4 (not 5, 5, 2)
    assert search_module.traceback_batch_size(3, workers=2) == 2  # 2 tasks, not 1
    _scheduler_idle(client)
    hits, stats = swdask.search(QUERIES, grouped, max_hits=10, return_stats=True)
    assert hits.npartitions == 3
    table, found = cluster_module.compute(hits, stats, client=client)
    same_hits(table, reference)
    assert found.n_hits == len(reference) and found.cells == job.cells
    keys = hits.__dask_graph__().keys()
    assert sum(1 for key in keys if isinstance(key, tuple)
               and str(key[0]).startswith("swdask_score-")) == len(job.tasks) == len(job.pieces)


def test_two_workers_are_dealt_the_score_and_traceback_tasks_by_size(client, grouped,
                                                                     small_batches):
    """Issue 18: every task of a search reads one job task, so Dask gave them all to the
    worker holding it (on 2 GPUs the second idled for a third of the run).  The scheduler
    deals the score tasks out by their cells now, longest first (each worker's share that
    of greedy LPT), and the traceback tasks by their queries: both workers get both from
    the start; the hits do not change."""
    reference = swdask.search_in_process(QUERIES, grouped, max_hits=10)
    job = search_module.prepare(QUERIES, grouped, scoring=None, mode="local", max_hits=10,
                                min_score=None, evalue=None, device="cpu", alphabet="auto",
                                map_unknown=False, owner="caller", workers=2)
    workers = sorted(client.scheduler_info()["workers"])
    _scheduler_idle(client)
    client.register_plugin(FirstAssignment())
    hits, stats = swdask.search(QUERIES, grouped, max_hits=10, return_stats=True)
    table, found = cluster_module.compute(hits, stats, client=client)
    same_hits(table, reference)
    first = first_assignments(client)
    keys = [key for key in hits.__dask_graph__() if isinstance(key, tuple)]
    cells = dict.fromkeys(workers, 0)
    for key in keys:
        if str(key[0]).startswith("swdask_score-"):
            cells[first[key]] += job.task_cells(key[1])
    assert set(cells) == set(workers) and sum(cells.values()) == job.cells
    sizes = [job.task_cells(t) for t in range(len(job.tasks))]
    assert max(cells.values()) == search_module.longest_share(sizes, 2), cells
    traced = sorted(first[key] for key in keys if str(key[0]).startswith("traceback_batch-"))
    assert len(traced) == job.n_batches == 3 and set(traced) == set(workers)
    assert found.workers == 2


def test_score_tasks_start_largest_first(grouped, monkeypatch):
    """The scheduler deals a search's score tasks out by their cells, and each worker
    starts them largest first (cluster.largest_first gives them their priorities by size,
    not dask.order's order of the merge tree); the hits are the in-process ones."""
    from distributed import Client, LocalCluster, get_task_stream

    monkeypatch.setattr(search_module, "MERGE_FAN_IN", 2)  # a deep tree: dask.order's groups
    monkeypatch.setattr(search_module, "SPLIT_TOLERANCE", 0.0)  # cut the files finely
    reference = swdask.search_in_process(QUERIES, grouped, max_hits=10)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        hits = swdask.search(QUERIES, grouped, max_hits=10)
        tasks = search_module.prepare(
            QUERIES, grouped, scoring=None, mode="local", max_hits=10, min_score=None,
            evalue=None, device="cpu", alphabet="auto", map_unknown=False, owner="caller",
            workers=2).tasks
        with get_task_stream(client) as stream:
            table = hits.compute()
    same_hits(table, reference)
    started = {}  # worker -> its score tasks in the order they started
    for _, worker, key in sorted((r["startstops"][0]["start"], r["worker"], r["key"])
                                 for r in stream.data if isinstance(r["key"], tuple)
                                 and str(r["key"][0]).startswith("swdask_score-")):
        started.setdefault(worker, []).append(key[1])
    assert sum(map(len, started.values())) == len(tasks) > 8 and len(started) == 2
    # Tasks are numbered largest first.  A one-thread worker starts the first task it is
    # sent at once, before the others arrive (up to two, in the scheduler's own order);
    # from then on it starts each next one by priority: largest first.
    for order in started.values():
        assert order[2:] == sorted(order[2:]), started


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
        assert "dask dashboard: http://127.0.0.1:" in err
        assert "on gpu, 2 Dask workers (score tasks on 1)" in err
        assert pq.read_table(outputs["cluster"]).equals(pq.read_table(outputs["local"]))
        with Client(address, set_as_default=False) as watcher:
            assert len(watcher.scheduler_info()["workers"]) == 2  # both still there
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            process.wait(timeout=60)
