"""Tests of swdask.search_in_process (the single-process engine, the reference of the Dask
search): the hits table, ranking, scores checked against the reference kernel, input
forms, partitions, threads and statistics.  tests/jobs/search/test_dask.py checks that
swdask.search gives the same hits."""
from __future__ import annotations

import random
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import swdask
from swdask.jobs.search import SearchStats
from swdask.kernels.cpu.reference import OP_DEL, OP_INS, OP_MATCH, align_reference, score_reference
from swdask.kernels.cpu.traceback import rescore
from swdask.options import MAX_HITS
from swdask.output import hits_table
from swdask.parquet_schemas import HITS
from swdask.scoring import Scoring
from swdask.testing import path_summary
from tests.helpers import QUERIES, SPROT_DB, read_fasta, write_fasta

DB_RESIDUES = 171_138
SEED = 20240501

_CIGAR = re.compile(r"(\d+)([=XID])")


def parse_cigar(cigar):
    """``[(count, letter)]`` of a CIGAR; the whole string must parse."""
    runs = [(int(n), op) for n, op in _CIGAR.findall(cigar)]
    assert "".join(f"{n}{op}" for n, op in runs) == cigar, cigar
    return runs


def cigar_ops(cigar):
    """Path operations (reference codes) of a CIGAR: ``=``/``X`` -> match, ``I``, ``D``."""
    code = {"=": OP_MATCH, "X": OP_MATCH, "I": OP_INS, "D": OP_DEL}
    return [code[op] for n, op in parse_cigar(cigar) for _ in range(n)]


def cigar_of_path(query, subject, query_start, subject_start, ops, unknown):
    """The CIGAR of a reference path, written independently of the kernels."""
    return path_summary(query, subject, query_start, subject_start, ops, unknown)[0]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return swdask.ingest(SPROT_DB, tmp_path_factory.mktemp("search") / "sprot.store")


@pytest.fixture(scope="module")
def result(store):
    return swdask.search_in_process(QUERIES, store, return_stats=True)


@pytest.fixture(scope="module")
def hits(result):
    return result[0]


@pytest.fixture(scope="module")
def sequences():
    """Residue codes by name (queries and database) and the database's codes by seq_id."""
    queries = swdask.load_sequences(QUERIES)
    database = swdask.load_sequences(SPROT_DB)
    by_name = {name: database.codes(k) for k, name in enumerate(database.names)}
    by_name.update({name: queries.codes(k) for k, name in enumerate(queries.names)})
    by_id = {int(i): database.codes(k) for k, i in enumerate(database.seq_id)}
    return by_name, by_id


# -- the table ----------------------------------------------------------------------------


def test_frame_matches_hits_schema(hits):
    assert isinstance(hits, pd.DataFrame)
    assert list(hits.columns) == HITS.names
    # swdask's dtypes (swdask.tables): nullable integers of their width, NumPy floats
    assert (hits.dtypes["query"], hits.dtypes["score"], hits.dtypes["evalue"],
            hits.dtypes["query_id"]) == (pd.StringDtype(), pd.Int32Dtype(), np.dtype("float64"),
                                         pd.Int64Dtype())
    assert pa.Table.from_pandas(hits, schema=HITS, preserve_index=False).schema.equals(HITS)
    assert hits_table(hits).schema.equals(HITS)
    plain = pa.Table.from_pandas(hits, preserve_index=False).schema
    # pandas' string dtype converts to large_string: the same column, the wider offsets.
    widen = {pa.string(): pa.large_string()}
    assert [(f.name, f.type) for f in plain] == [(f.name, widen.get(f.type, f.type)) for f in HITS]
    assert hits["strand"].isna().all()  # protein has no strand
    # BLOSUM62 11/1, local: BLAST's statistics apply
    assert not hits.drop(columns="strand").isna().any().any()
    assert (hits["evalue"] >= 0).all() and (hits["bitscore"] > 0).all()


def test_hits_are_ranked(hits):
    names = list(read_fasta(QUERIES))
    assert list(dict.fromkeys(hits["query"])) == names  # queries in input order
    for query_id, group in hits.groupby("query_id", sort=False):
        assert set(group["query"]) == {names[query_id]}
        assert group["rank"].tolist() == list(range(1, len(group) + 1))
        assert 1 <= len(group) <= MAX_HITS
        rows = list(zip(group["score"], group["subject_id"]))
        for (s1, id1), (s2, id2) in zip(rows, rows[1:]):
            assert s1 > s2 or (s1 == s2 and id1 < id2), (names[query_id], rows)
        assert group["subject_id"].is_unique
    assert (hits["score"] >= 1).all()  # local: score 0 is no alignment


def test_cigars_rescore_and_agree_with_counts(hits, sequences):
    by_name, _ = sequences
    scoring = Scoring()
    matrix, unknown = scoring.matrix, scoring.alphabet.unknown_code
    for row in hits.itertuples(index=False):
        q, s = by_name[row.query], by_name[row.subject]
        runs = parse_cigar(row.cigar)
        count = {op: sum(n for n, o in runs if o == op) for op in "=XID"}
        assert row.query_end - row.query_start == count["="] + count["X"] + count["I"]
        assert row.subject_end - row.subject_start == count["="] + count["X"] + count["D"]
        assert 0 <= row.query_start < row.query_end <= row.query_length == len(q)
        assert 0 <= row.subject_start < row.subject_end <= row.subject_length == len(s)
        assert row.align_length == sum(count.values())
        assert row.mismatches == count["X"]
        assert row.gap_opens == sum(1 for _, op in runs if op in "ID")
        assert row.identity == count["="] / row.align_length
        ops = cigar_ops(row.cigar)
        assert rescore(q, s, row.query_start, row.subject_start, ops, matrix, 11, 1) == row.score
        assert cigar_of_path(q, s, row.query_start, row.subject_start, ops, unknown) == row.cigar
        # a local alignment starts and ends on aligned columns
        assert runs[0][1] in "=X" and runs[-1][1] in "=X"


def test_scores_and_paths_equal_the_reference(hits, sequences):
    by_name, _ = sequences
    scoring = Scoring()
    matrix = scoring.matrix.tolist()
    small = hits[hits["query_length"] * hits["subject_length"] <= 60_000]
    rng = random.Random(SEED)
    sample = rng.sample(range(len(small)), 12)
    for k in sample:
        row = small.iloc[k]
        q, s = by_name[row["query"]], by_name[row["subject"]]
        score, qs, qe, ss, se, ops = align_reference(q.tolist(), s.tolist(), matrix, 11, 1)
        where = (row["query"], row["subject"])
        assert (score, qs, qe, ss, se) == (row["score"], row["query_start"], row["query_end"],
                                           row["subject_start"], row["subject_end"]), where
        assert cigar_of_path(q, s, qs, ss, ops, scoring.alphabet.unknown_code) == row["cigar"], where


@pytest.mark.parametrize("mode, scoring", [
    ("local", Scoring()),
    ("semiglobal", Scoring("BLOSUM50", gap_open=13, gap_extend=2)),
])
def test_top_hits_equal_brute_force(tmp_path, mode, scoring):
    """Search 2 queries against 60 database records; rank every pair with the reference."""
    queries = read_fasta(QUERIES)
    picked_queries = {name: queries[name] for name in ("sp|Q6GZU6|030R_FRG3G", "sp|Q197D0|030L_IIV3")}
    if mode != "local":
        picked_queries.pop("sp|Q197D0|030L_IIV3")  # keep the slow oracle quick
    records = list(read_fasta(SPROT_DB).items())
    rng = random.Random(SEED)
    short = [k for k, (name, seq) in enumerate(records) if len(seq) <= 300
             and name != "sp|Q197D0|030L_IIV3"]
    chosen = sorted(rng.sample(short, 59) + [next(k for k, (n, _) in enumerate(records)
                                                  if n == "sp|Q197D0|030L_IIV3")])
    subset = [records[k] for k in chosen]
    database = write_fasta(tmp_path / "subset.fasta", subset)
    max_hits = 10
    found = swdask.search_in_process(picked_queries, database, scoring=scoring, mode=mode, max_hits=max_hits)
    alphabet = scoring.alphabet
    matrix = scoring.matrix.tolist()
    for name, seq in picked_queries.items():
        q = alphabet.encode(seq).tolist()
        scored = []
        for index, (subject, s_seq) in enumerate(subset):
            score, _, _ = score_reference(q, alphabet.encode(s_seq).tolist(), matrix,
                                          scoring.gap_open, scoring.gap_extend, mode)
            if mode != "local" or score >= 1:
                scored.append((-score, index, subject))
        expected = [(subject, -neg) for neg, _, subject in sorted(scored)[:max_hits]]
        mine = found[found["query"] == name]
        assert list(zip(mine["subject"], mine["score"])) == expected, (name, mode)


def test_ties_are_broken_by_subject_id(tmp_path):
    """Identical subjects spread over many partitions: the first ones in input order win."""
    rng = random.Random(SEED)
    target = "MKVLAWQERTYIPASDFGHKLCVNM"
    records = []
    for k in range(40):
        if k % 5 == 2:
            records.append((f"copy{k}", target))
        else:
            records.append((f"other{k}", "".join(rng.choice("ACDEFGHIKLMNPQRSTVWY")
                                                 for _ in range(rng.randint(20, 40)))))
    database = write_fasta(tmp_path / "ties.fasta", records)
    store = swdask.ingest(database, tmp_path / "ties.store", partition_residues=30)
    assert len(store.partitions) > 10
    found = swdask.search_in_process({"q": target}, store, max_hits=3)
    assert found["subject"].tolist() == ["copy2", "copy7", "copy12"]
    assert found["subject_id"].tolist() == [2, 7, 12]
    assert found["score"].nunique() == 1


# -- input forms, partitions, workers -----------------------------------------------------


def test_queries_as_dict_and_list(store, tmp_path):
    picked = list(read_fasta(QUERIES).items())[:4]
    from_file = swdask.search_in_process(write_fasta(tmp_path / "q.fasta", picked), store, max_hits=5)
    from_dict = swdask.search_in_process(dict(picked), store, max_hits=5)
    pd.testing.assert_frame_equal(from_dict, from_file)
    from_list = swdask.search_in_process([seq for _, seq in picked], store, max_hits=5)
    renamed = {f"query_{k + 1}": name for k, (name, _) in enumerate(picked)}
    assert set(from_list["query"]) == set(renamed)
    from_list["query"] = from_list["query"].map(renamed).astype(from_file["query"].dtype)
    pd.testing.assert_frame_equal(from_list, from_file)


def test_store_and_fasta_database_agree(hits, store):
    pd.testing.assert_frame_equal(swdask.search_in_process(QUERIES, SPROT_DB), hits)
    opened = swdask.SequenceStore.open(store.path)
    pd.testing.assert_frame_equal(swdask.search_in_process(QUERIES, opened), hits)


def test_threads_do_not_change_the_result(store):
    one = swdask.search_in_process(QUERIES, store, threads=1, max_hits=20)
    two = swdask.search_in_process(QUERIES, store, threads=2, max_hits=20)
    pd.testing.assert_frame_equal(one, two)


def test_many_partitions_give_the_one_partition_result(hits, store, tmp_path):
    assert len(store.partitions) == 1
    many = swdask.ingest(SPROT_DB, tmp_path / "many.store", partition_residues=4_000)
    assert len(many.partitions) > 20
    pd.testing.assert_frame_equal(swdask.search_in_process(QUERIES, many), hits)


def test_global_mode_has_no_score_floor(store):
    found = swdask.search_in_process({"q": "MKVLAWQERT"}, store, mode="global", max_hits=400)
    assert len(found) == 400  # every subject, however negative
    assert (found["query_start"] == 0).all() and (found["query_end"] == 10).all()
    assert (found["subject_end"] == found["subject_length"]).all()
    assert (found["score"] < 0).any()


def test_min_score_filters(hits, store):
    found = swdask.search_in_process(QUERIES, store, min_score=70)
    pd.testing.assert_frame_equal(found, hits[hits["score"] >= 70].reset_index(drop=True))


def test_evalue_filters_and_ranks_what_it_keeps(hits, store):
    found = swdask.search_in_process(QUERIES, store, evalue=1.0)
    kept = hits[hits["evalue"] <= 1.0].reset_index(drop=True)
    assert 0 < len(kept) < len(hits)
    ranks = kept.groupby("query_id", sort=False).cumcount() + 1
    assert (found["rank"].to_numpy() == ranks.to_numpy()).all()
    pd.testing.assert_frame_equal(found.drop(columns="rank"), kept.drop(columns="rank"))


def test_no_evalues_outside_local_mode(store):
    found = swdask.search_in_process({"q": "MKVLAWQERT"}, store, mode="semiglobal", max_hits=3)
    assert found["evalue"].isna().all() and found["bitscore"].isna().all()
    with pytest.raises(ValueError, match="^evalue applies to local alignments, not to mode "
                       "'semiglobal'$"):
        swdask.search_in_process({"q": "MKVLAWQERT"}, store, mode="semiglobal", evalue=1e-3)


# -- statistics ---------------------------------------------------------------------------


def test_stats(result):
    hits, stats = result
    assert isinstance(stats, SearchStats)
    query_residues = sum(len(seq) for seq in read_fasta(QUERIES).values())
    assert query_residues == 4_276
    assert stats.cells == query_residues * DB_RESIDUES
    assert (stats.n_queries, stats.n_subjects, stats.n_hits) == (12, 400, len(hits))
    assert stats.workers >= 1
    assert 0 <= stats.score_seconds <= stats.total_seconds
    assert 0 <= stats.traceback_seconds <= stats.total_seconds
    assert stats.gcups > 0 and stats.kernel_gcups >= stats.gcups
    assert np.isclose(stats.gcups, stats.cells / stats.total_seconds / 1e9)


def test_without_stats_returns_the_frame_only(store):
    found = swdask.search_in_process({"q": "MKVLAWQERT"}, store, max_hits=2)
    assert isinstance(found, pd.DataFrame)


def test_imports_beside_the_gpu_lower_the_switch_interval_while_any_runs(monkeypatch):
    """pandas is imported beside a GPU search's score passes with a 0.2 ms switch interval;
    two such imports that overlap (two searches in threads; the first to start ends first)
    leave the interval as it was."""
    import sys
    import threading

    from swdask.jobs import base

    inside = [threading.Event(), threading.Event()]
    leave = [threading.Event(), threading.Event()]
    seen = {}

    def slow_import(name):
        k = int(name)
        seen[k] = sys.getswitchinterval()
        inside[k].set()
        leave[k].wait(10)

    before = sys.getswitchinterval()
    monkeypatch.setattr(base.importlib, "import_module", slow_import)
    monkeypatch.setattr(base, "_started", set())
    threads = [base.import_beside(str(k)) for k in range(2)]
    assert base.import_beside("0", "1") is None  # asked for already: no third thread
    assert inside[0].wait(10)
    assert inside[1].wait(10)
    leave[0].set()
    threads[0].join(10)
    assert sys.getswitchinterval() == pytest.approx(2e-4)  # the other still imports
    leave[1].set()
    threads[1].join(10)
    assert seen == {0: pytest.approx(2e-4), 1: pytest.approx(2e-4)}
    assert sys.getswitchinterval() == before


def test_store_files_scored_at_once_give_the_one_at_a_time_result(tmp_path, monkeypatch):
    """On a GPU the store files are scored in runs (api._gpu_groups), on a real GPU
    api.GPU_SCORE_LANES runs at once on threads.  With the CPU's score pass standing in for
    the GPU's, every candidate is the one a file-at-a-time pass finds, the runs cover the
    store in order, and never more runs are in flight than lanes."""
    import threading
    import time

    from swdask.jobs.search import api, plan, tasks

    many = swdask.ingest(SPROT_DB, tmp_path / "many.store", partition_residues=20_000)
    assert len(many.partitions) >= 6
    job = plan.prepare(QUERIES, many, scoring=Scoring(), mode="local", max_hits=5,
                       min_score=None, evalue=None, device="cpu", alphabet="auto",
                       map_unknown=False, owner="caller")
    cpu_pass, lock, flight = tasks.score_pass, threading.Lock(), [0, 0]

    def score_pass(device, *args):
        with lock:
            flight[0] += 1
            flight[1] = max(flight[1], flight[0])
        time.sleep(0.02)  # long enough for the lanes to overlap
        try:
            return cpu_pass("cpu", *args)
        finally:
            with lock:
                flight[0] -= 1

    monkeypatch.setattr(tasks, "score_pass", score_pass)
    monkeypatch.setattr(api.backend, "simulator_enabled", lambda: False)
    monkeypatch.setattr(plan, "GPU_TASK_RESIDUES", 50_000)  # runs of two or three files

    def run(device):
        found, order, spans = {}, [], []
        for part, passes, span in api._scored(job, many.iter_partitions(), device):
            order += part.seq_id.tolist()
            spans.append(span)
            for q0, _q1, candidates, _ in passes:
                for row, hit in enumerate(candidates):
                    keep, scores, q_end, s_end = tasks.best_of(hit, part.seq_id, 10**6)
                    for key in zip(part.seq_id[keep].tolist(), scores.tolist(), q_end.tolist(),
                                   s_end.tolist()):
                        found.setdefault(q0 + row, set()).add(key)
        return found, order, spans

    serial, serial_order, serial_spans = run("cpu")
    assert flight[1] == 1 and len(serial_spans) == len(many.partitions)
    lanes, order, spans = run("gpu")
    assert flight[1] == api.GPU_SCORE_LANES
    assert 2 < len(spans) < len(many.partitions)  # the first file alone, then runs
    assert lanes == serial and order == serial_order
    # The score pass's seconds: the time any run was being scored.
    assert api._covered(spans) <= spans[-1][1] - spans[0][0] + 1e-9
    assert api._covered(spans) < sum(end - start for start, end in spans)


def test_gpu_runs_of_store_files():
    """The first file alone, then consecutive files up to the bound (at least one each)."""
    from swdask.jobs.search import api
    from swdask.sequences.batch import SequenceBatch

    files = [SequenceBatch.from_records([(f"s{k}", "", np.ones(n, np.uint8))], "protein")
             for k, n in enumerate([5, 4, 4, 3, 9, 2, 2])]
    runs = list(api._gpu_groups(iter(files), limit=8))
    assert [r.names for r in runs] == [("s0",), ("s1", "s2"), ("s3",), ("s4",), ("s5", "s6")]
    assert runs[0] is files[0] and runs[3] is files[4]  # a file alone is not copied
    assert list(api._gpu_groups(iter([]))) == []
    read = []  # the first file goes to the GPU before the second is read

    def reading():
        for f in files:
            read.append(f)
            yield f

    assert next(api._gpu_groups(reading(), limit=8)) is files[0] and read == files[:1]


def test_queries_with_the_same_seq_id_are_refused(tmp_path):
    from swdask.sequences.batch import SequenceBatch

    records = [("a", "", np.ones(5, np.uint8)), ("b", "", np.ones(6, np.uint8)),
               ("c", "", np.ones(7, np.uint8))]
    store = swdask.ingest(SPROT_DB, tmp_path / "db.store")
    swdask.search_in_process(SequenceBatch.from_records(records, "protein", seq_ids=[3, 1, 2]),
                             store, max_hits=1, device="cpu")
    with pytest.raises(ValueError, match="queries: two queries have the same seq_id"):
        swdask.search_in_process(SequenceBatch.from_records(records, "protein", seq_ids=[3, 1, 3]),
                                 store, max_hits=1, device="cpu")
