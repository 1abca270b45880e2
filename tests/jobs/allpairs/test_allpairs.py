"""All-against-all alignment: the identity bound, real 16S genes against parasail and
Biopython, CPU and simulated GPU agreement, resume after a kill, the command line."""
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from fractions import Fraction

import dask
import numpy as np
import pandas as pd
import parasail
import pytest
from Bio import Align
from hypothesis import given, settings
from hypothesis import strategies as st

import swdask
from swdask.cli import main
from swdask.errors import OutputExistsError, StoreError
from swdask.jobs.allpairs import (
    IdentityBound,
    all_pairs,
    as_threshold,
    read_all_pairs,
    write_all_pairs,
)
from swdask.jobs.allpairs import output as ap_output
from swdask.jobs.allpairs import plan as ap_plan
from swdask.kernels.cpu.traceback import align_codes
from swdask.kernels.cuda import all_pairs as gpu_kernel
from swdask.sequences.store import load_sequences
from tests.helpers import RRNA, dying_workers, gene_windows, write_fasta

DNA = swdask.Scoring(match=2, mismatch=-3, gap_open=5, gap_extend=2)
#: Genes of 16S_200.fna.gz in four pairs of at least 97 % identity (found by tracing back
#: every pair of the file), so that the 0.97 threshold has passing pairs.
CLOSE_PAIRS = ("NR_041085.1", "NR_112331.1", "NR_119197.1", "NR_113242.1", "NR_112344.1",
               "NR_113905.1", "NR_113574.1")


#: The dtypes of an all-pairs frame: swdask's one policy (swdask.tables), as in the hits.
ALLPAIRS_DTYPES = {
    "query": pd.StringDtype(), "subject": pd.StringDtype(),
    "query_id": pd.Int64Dtype(), "subject_id": pd.Int64Dtype(), "score": pd.Int32Dtype(),
    "identity": np.dtype("float64"),
    **dict.fromkeys(["matches", "align_length", "mismatches", "gap_opens", "query_start",
                     "query_end", "subject_start", "subject_end", "query_length",
                     "subject_length"], pd.Int32Dtype()),
    "cigar": pd.StringDtype(),
}


@pytest.fixture(scope="module")
def genes16s(tmp_path_factory):
    """28 real 16S genes of 1,380-1,560 bp: the close pairs and others drawn at random."""
    batch = load_sequences(RRNA, alphabet="dna")
    names = list(batch.names)
    pool = [i for i, n in enumerate(names)
            if 1380 <= batch.lengths[i] <= 1560 and n not in CLOSE_PAIRS]
    chosen = [names.index(n) for n in CLOSE_PAIRS] + random.Random(7).sample(pool, 21)
    records = [(names[i], batch.alphabet.decode(batch.codes(i))) for i in sorted(chosen)]
    return write_fasta(tmp_path_factory.mktemp("16s") / "genes.fasta", records)


def _truth(records, scoring, t, mode="global"):
    """Every pair the bound cannot rule out, traced back one by one: the expected rows."""
    bound = IdentityBound.from_scoring(scoring, t, mode)
    rows = {}
    for x in range(len(records)):
        for y in range(x + 1, len(records)):
            q, s = records[x][1], records[y][1]
            if not bound.lengths_can_pass(len(q), len(s)):
                continue  # identity <= shorter / longer < t: a theorem, tested below
            r = align_codes(q, s, scoring, mode)
            if bound.identity_passes(r["matches"], r["align_length"]):
                rows[(records[x][0], records[y][0])] = (r["score"], r["identity"], r["cigar"])
    return rows


def _records(path):
    batch = load_sequences(path, alphabet="dna").sorted_by_length()
    return [(batch.names[i], batch.alphabet.decode(batch.codes(i))) for i in range(len(batch))]


# --------------------------------------------------------------------------------------
# the bound
# --------------------------------------------------------------------------------------


def _mutant(draw, seq, alphabet):
    out = list(seq)
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from("sid"))
        pos = draw(st.integers(0, len(out)))
        if kind == "i" or not out:
            out.insert(pos, draw(st.sampled_from(alphabet)))
        elif kind == "d":
            del out[min(pos, len(out) - 1)]
        else:
            out[min(pos, len(out) - 1)] = draw(st.sampled_from(alphabet))
    return "".join(out)


@st.composite
def _cases(draw):
    protein = draw(st.booleans())
    if protein:
        scoring = swdask.Scoring(draw(st.sampled_from(["BLOSUM62", "BLOSUM45", "PAM30"])),
                                 gap_open=draw(st.integers(0, 12)), gap_extend=draw(st.integers(1, 3)))
        letters = "ARNDCQEGHILKMFPSTWYVX"
    else:
        match = draw(st.integers(1, 5))
        scoring = swdask.Scoring(match=match, mismatch=draw(st.integers(-6, match - 1)),
                                 gap_open=draw(st.integers(0, 8)), gap_extend=draw(st.integers(1, 4)))
        letters = "ACGTN"
    a = draw(st.text(alphabet=letters, min_size=0, max_size=30))
    b = _mutant(draw, a, letters)
    t = draw(st.sampled_from([0, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.97, 1, Fraction(2, 3)]))
    return scoring, a, b, t, draw(st.sampled_from(["global", "local"]))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_cases())
def test_bound_never_drops_a_passing_pair(case):
    scoring, a, b, t, mode = case
    bound = IdentityBound.from_scoring(scoring, t, mode)
    r = align_codes(a, b, scoring, mode)
    low = bound.lowest_score(len(a), len(b))
    where = (scoring, a, b, t, mode, r["score"], r["matches"], r["align_length"], low)
    if bound.identity_passes(r["matches"], r["align_length"]):
        assert low is not None and r["score"] >= low, where  # the filter keeps it
    elif low is None:
        assert mode == "global"  # lengths rule t out: no alignment reaches it
    # The integer formulas of the CPU path and of the GPU kernel equal the exact one.
    fast = int(bound.lowest_scores(len(a), len(b)))
    device = gpu_kernel.lowest_score(len(a), len(b), *bound.params)
    expected = {None: ap_plan.CANNOT_PASS, -np.inf: ap_plan.NO_BOUND}.get(low, low)
    assert fast == device == expected, where


def test_bound_of_the_16s_scoring():
    bound = IdentityBound.from_scoring(DNA, 0.97)
    assert (bound.identity_score, bound.penalty, bound.threshold) == (2, 7, Fraction(97, 100))
    # The corner (t*n, n) decides for equal lengths: 0.97*n matches, 0.03*n columns at -7.
    assert bound.lowest_score(1000, 1000) == 1730
    assert bound.lowest_score(969, 1000) is None  # 969/1000 < 0.97
    assert bound.lowest_score(970, 1000) == min(1730, 970 * 2 - 30 * 7, -(-970 * 173 // 97))
    # N is never an identity: its diagonal does not lower the identity score.
    assert IdentityBound.from_scoring(DNA, 0.5).identity_score == 2
    protein = IdentityBound.from_scoring(swdask.Scoring("BLOSUM62"), 0.9)
    # 'O' against 'O' (scored as X against X, as BLAST does; X itself is never an identity)
    assert protein.identity_score == -1
    assert protein.penalty == 12  # a gap column (11 + 1) costs more than any mismatch (-4)


@pytest.mark.parametrize("value, expected", [
    (0.97, Fraction(97, 100)), (1, Fraction(1)), (0, Fraction(0)), ("0.5", Fraction(1, 2)),
    (1 / 3, Fraction(1, 3)), (Fraction(2, 3), Fraction(2, 3))])
def test_threshold(value, expected):
    assert as_threshold(value) == expected


@pytest.mark.parametrize("value", [1.5, -0.1, "x", float("nan"), None])
def test_threshold_errors(value):
    with pytest.raises(ValueError, match=r"^min_identity must be a number between 0 and 1, got "):
        as_threshold(value)


def test_mode_error_names_the_modes():
    with pytest.raises(ValueError) as info:
        all_pairs(RRNA, mode="semiglobal")
    assert str(info.value) == "unknown all-pairs mode 'semiglobal'; choose one of: global, local"


def test_local_mode_on_the_simulated_gpu_equals_the_cpu(tmp_path):
    """Local all-pairs on the GPU (its kernel and traceback in the simulator): the CPU's
    rows, with a score floor and without."""
    rng = random.Random(13)
    base = "".join(rng.choice("ACGT") for _ in range(30))
    records = [("g0", base), ("g1", "TT" + base[5:25] + "GG"), ("g2", base[::-1]),
               ("g3", "N" + base[10:] + "CCCC"), ("g4", "A")]
    path = write_fasta(tmp_path / "local.fasta", records)
    for floor in (None, 20):
        options = dict(scoring=DNA, mode="local", min_identity=0.8, min_score=floor, cigar=True)
        cpu = all_pairs(path, device="cpu", **options).compute()
        gpu = all_pairs(path, device="gpu", **options).compute(scheduler="sync")
        pd.testing.assert_frame_equal(cpu, gpu)
        assert len(cpu) >= 2


# --------------------------------------------------------------------------------------
# real 16S genes: the output is exactly the traced-back truth, scores as parasail's
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("t", [0.97, 0.8])
def test_16s_all_pairs_equal_tracing_back_every_pair(genes16s, t):
    records = _records(genes16s)
    expected = _truth(records, DNA, t)
    table, stats = _compute(genes16s, t)
    got = {(r.query, r.subject): (r.score, r.identity, r.cigar) for r in table.itertuples()}
    assert got == expected
    assert len(table) == len(set(zip(table["query_id"], table["subject_id"])))  # each pair once
    assert (table["query_id"] != table["subject_id"]).all()
    assert stats.hits == len(expected) and stats.pairs == len(records) * (len(records) - 1) // 2
    planned = stats.pairs_scored + stats.pairs_filtered  # the pairs the lengths allow
    assert stats.candidates >= stats.hits and planned <= stats.pairs
    if t == 0.97:
        assert len(expected) == 4 and stats.candidates < planned // 10
    sequences = dict(records)
    pm = DNA.to_parasail()
    aligner = Align.PairwiseAligner(mode="global", match_score=2, mismatch_score=-3,
                                    open_gap_score=-7, extend_gap_score=-2)
    for k, row in enumerate(table.itertuples()):
        q, s = sequences[row.query], sequences[row.subject]
        assert parasail.nw_scan_32(q, s, *DNA.parasail_gaps, pm).score == row.score, row
        if k < 3 and "N" not in q + s:  # Biopython scores N-N as a match: only N-free pairs
            assert aligner.score(q, s) == row.score
        # The identity is that of the CIGAR's alignment, whose score is the optimum.
        assert _cigar_identity(q, s, row.cigar) == (row.matches, row.align_length)
        assert row.identity == row.matches / row.align_length >= t


def _compute(path, t):
    import dask

    frame, stats = all_pairs(path, scoring=DNA, min_identity=t, cigar=True, block_size=8,
                             device="cpu", return_stats=True)
    return dask.compute(frame, stats)


def _cigar_identity(q, s, cigar):
    import re

    i = j = matches = columns = 0
    for count, op in re.findall(r"(\d+)([=XID])", cigar):
        count = int(count)
        for _ in range(count):
            if op in "=X":
                assert (q[i] == s[j] and q[i] != "N") == (op == "=")
                matches += op == "="
                i, j = i + 1, j + 1
            elif op == "I":
                i += 1
            else:
                j += 1
        columns += count
    assert (i, j) == (len(q), len(s))
    return matches, columns


def test_blocks_are_skipped_by_length(genes16s):
    job = ap_plan.prepare(genes16s, scoring=DNA, mode="global", min_identity=0.97,
                          min_score=None, device="cpu", cigar=False, block_size=4, alphabet="dna",
                          map_unknown=False, rows=None, client=None)
    n = len(job.blocks)
    assert len(job.block_pairs) + job.skipped == n * (n + 1) // 2 and job.skipped > 0
    for a, b in job.block_pairs:
        assert a <= b
    for a in range(n):  # a skipped block pair has no pair whose lengths allow 0.97
        for b in range(a, n):
            if (a, b) not in job.block_pairs:
                x, y = job.blocks[a], job.blocks[b]
                assert x.max_length * 100 < 97 * y.min_length or y.max_length * 100 < 97 * x.min_length


def test_pair_ranges_are_exact():
    bound = IdentityBound.from_scoring(DNA, 0.9)
    q_len = np.array([9, 10, 10, 11, 20, 30])
    s_len = np.array([8, 9, 10, 11, 12, 20, 22, 23, 34])
    for diagonal, subjects in ((False, s_len), (True, q_len)):
        q_list, lo, count = ap_plan.pair_ranges(q_len, subjects, diagonal, bound)
        got = {(int(q), int(j)) for q, low, c in zip(q_list, lo, count) for j in range(low, low + c)}
        want = {(q, j) for q in range(len(q_len)) for j in range(len(subjects))
                if bound.lengths_can_pass(q_len[q], subjects[j]) and (not diagonal or j > q)}
        assert got == want


def test_local_mode_and_min_score(short16s):
    short = _records(short16s)[:8]
    path = write_fasta(short16s.parent / "first8.fasta", short)
    table = all_pairs(path, scoring=DNA, mode="local", min_identity=0.9, min_score=150,
                      device="cpu").compute()
    expected = {}
    for x in range(len(short)):
        for y in range(x + 1, len(short)):
            r = align_codes(short[x][1], short[y][1], DNA, "local")
            if r["score"] >= 150 and r["matches"] * 10 >= 9 * r["align_length"]:
                expected[(short[x][0], short[y][0])] = r["score"]
    assert {(r.query, r.subject): r.score for r in table.itertuples()} == expected
    assert 0 < len(expected) < 28


# --------------------------------------------------------------------------------------
# CPU and GPU (its kernel in the simulator) agree
# --------------------------------------------------------------------------------------


def test_cpu_and_simulated_gpu_all_pairs_agree(tmp_path):
    rng = random.Random(11)
    base = "".join(rng.choice("ACGT") for _ in range(36))
    records = [("g0", base), ("g1", base[:20] + "T" + base[21:]), ("g2", base[:-1]),
               ("g3", base + "N")]
    path = write_fasta(tmp_path / "tiny.fasta", records)
    lazy = all_pairs(path, scoring=DNA, min_identity=0.9, cigar=True, device="cpu")
    assert lazy.dtypes.to_dict() == ALLPAIRS_DTYPES
    cpu = lazy.compute()
    assert cpu.dtypes.to_dict() == ALLPAIRS_DTYPES
    # In this process, not on Dask's threads: the simulator runs a Python thread per lane.
    gpu = all_pairs(path, scoring=DNA, min_identity=0.9, cigar=True, device="gpu").compute(
        scheduler="sync")
    pd.testing.assert_frame_equal(cpu, gpu)
    assert len(cpu) >= 3


# --------------------------------------------------------------------------------------
# resumable output
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def short16s(tmp_path_factory):
    """Windows of 10 real 16S genes, 30 short records: many cheap block pairs."""
    return write_fasta(tmp_path_factory.mktemp("short") / "short.fasta", gene_windows(10, 3))


def test_a_gpu_job_that_screens_warms_the_screen_before_reading(monkeypatch):
    """The GPU screen's first use (cupy, cuBLAS) starts before the sequences are read, and
    only for a GPU job in this process whose q-gram filter screens: global mode, identity
    above 0, the pre-filter on, screen buckets above 0."""
    events = []
    monkeypatch.setattr(ap_plan, "warm_screen_beside", lambda: events.append("warm"))
    opened = ap_plan.open_database
    monkeypatch.setattr(ap_plan, "open_database",
                        lambda *a, **k: events.append("read") or opened(*a, **k))
    source = str(RRNA)  # a FASTA: prepare reads (ingests) it itself

    def warmed(device="gpu", mode="global", min_identity=0.97, prefilter=True):
        events.clear()
        ap_plan.prepare(source, scoring=DNA, mode=mode, min_identity=min_identity,
                        min_score=None, device=device, cigar=False, block_size=64,
                        alphabet="dna", map_unknown=False, rows=None, client=None,
                        prefilter=prefilter)
        return events[:]

    assert warmed() == ["warm", "read"]
    assert warmed(device="cpu") == ["read"]
    assert warmed(mode="local") == ["read"]
    assert warmed(min_identity=0) == ["read"]
    assert warmed(prefilter=False) == ["read"]
    with dask.config.set({"swdask.allpairs-screen-buckets": 0}):
        assert warmed() == ["read"]


def short_job(source) -> ap_plan.AllPairsJob:
    """The plan of the runs of ``source`` at identity 0.8 in blocks of 8 (CPU)."""
    return ap_plan.prepare(source, scoring=DNA, mode="global", min_identity=0.8,
                           min_score=None, device="cpu", cigar=False, block_size=8,
                           alphabet="auto", map_unknown=False, rows=None, client=None)


def test_resume_after_an_interruption_equals_the_uninterrupted_run(short16s, tmp_path, monkeypatch):
    options = dict(scoring=DNA, min_identity=0.8, block_size=4, device="cpu", cigar=True)
    full = write_all_pairs(short16s, tmp_path / "full", **options)
    expected = read_all_pairs(tmp_path / "full")
    assert len(expected) > 5 and full.hits == len(expected)
    assert expected.dtypes.to_dict() == ALLPAIRS_DTYPES
    assert expected.equals(all_pairs(short16s, **options).compute().reset_index(drop=True))

    calls = []
    real = ap_output.write_block_pair

    def dies_after_three(*args):
        if len(calls) == 3:
            raise KeyboardInterrupt  # as a kill would, between two block pairs
        calls.append(args[1:3])
        return real(*args)

    monkeypatch.setattr(ap_output, "write_block_pair", dies_after_three)
    out = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        write_all_pairs(short16s, out, **options)
    monkeypatch.undo()
    assert len(list(out.glob("pairs-*.parquet"))) == 3
    with pytest.raises(StoreError, match="not finished"):
        read_all_pairs(out)
    # A kill while writing leaves a temporary file; one done file is damaged on disk.
    (out / ".pairs-00000-00005.parquet.1.2.tmp").write_bytes(b"PAR1 partial")
    a, b = calls[0]
    (out / ap_output.block_file(a, b)).write_bytes(b"not parquet")
    with pytest.raises(OutputExistsError):
        write_all_pairs(short16s, out, **options)
    stats = write_all_pairs(short16s, out, resume=True, **options)
    assert not list(out.glob(".*.tmp"))
    result = read_all_pairs(out)
    pd.testing.assert_frame_equal(result, expected)
    assert stats.hits == full.hits and stats.pairs_scored == full.pairs_scored
    # Another threshold cannot resume this folder.
    with pytest.raises(StoreError, match="made with other min_identity"):
        write_all_pairs(short16s, out, resume=True, **{**options, "min_identity": 0.9})


def test_cli_killed_and_resumed(short16s, tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "swdask.cli", "allpairs", str(short16s), "-o", str(out),
               "--min-identity", "0.8", "--block-size", "2", "--device", "cpu", "--quiet"]
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as process:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if len(list(out.glob("pairs-*.parquet"))) >= 3:
                os.kill(process.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
        errors = process.stderr.read().decode()  # the pipe closes with the block
    assert process.returncode == -signal.SIGKILL, errors
    manifest = json.loads((out / ap_output.MANIFEST).read_text())
    assert not manifest["finished"]
    result = subprocess.run(command + ["--resume"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    expected = all_pairs(short16s, scoring=DNA, min_identity=0.8, device="cpu",
                         block_size=2).compute().reset_index(drop=True)
    pd.testing.assert_frame_equal(read_all_pairs(out), expected)


def test_cli_errors(short16s, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["allpairs", str(short16s), "-o", str(out), "--min-identity", "0.95",
                 "--device", "cpu", "--quiet"]) == 0
    assert pd.read_parquet(out).shape[1] == len(swdask.parquet_schemas.ALLPAIRS)
    capsys.readouterr()
    cases = [
        (["-o", str(out)], f"swdask: error: {out}: already exists (use --resume to continue it, or --force)"),
        (["-o", str(out), "--resume", "--min-identity", "0.9"],
         f"swdask: error: {out}: made with other min_identity; resume with the same parameters, "
         "or use --force to start again"),
        (["-o", str(tmp_path / "x"), "--min-identity", "1.5"],
         "swdask: error: argument --min-identity: must be between 0 and 1, got '1.5' "
         "(see 'swdask allpairs --help')"),
    ]
    for extra, message in cases:
        assert main(["allpairs", str(short16s), "--device", "cpu", "--quiet", *extra]) == 2
        err = capsys.readouterr().err
        assert err.strip() == message, err
        assert not (tmp_path / "x").exists()


def test_run_on_a_dask_cluster_equals_the_run_here(short16s, tmp_path):
    from distributed import Client, LocalCluster

    options = dict(scoring=DNA, min_identity=0.8, block_size=8, device="cpu")
    here = write_all_pairs(short16s, tmp_path / "here", **options)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        there = write_all_pairs(short16s, tmp_path / "there", client=client, **options)
    pd.testing.assert_frame_equal(read_all_pairs(tmp_path / "here"), read_all_pairs(tmp_path / "there"))
    assert here.hits == there.hits > 0 and here.cells == there.cells


def test_a_cluster_that_cannot_go_on_keeps_what_finished(short16s, tmp_path, capsys):
    """The workers die on every try of the last block pair to start (Dask's KilledWorker):
    the run ends in one line that says what it kept; --resume (here, without the cluster)
    finishes it, equal to an uninterrupted run."""
    out = tmp_path / "out"
    command = ["allpairs", str(short16s), "-o", str(out), "--min-identity", "0.8",
               "--block-size", "8", "--device", "cpu", "--quiet"]
    job = short_job(short16s)
    # The last to start (the fewest cells): no other block pair waits on the worker then,
    # to share the blame for its deaths.
    a, b = ap_plan.largest_first(ap_plan.block_pair_work(job, job.block_pairs))[-1]
    with dying_workers(f"-write-{a}-{b}-") as address:
        assert main([*command, "--scheduler", address]) == 2
    err = capsys.readouterr().err
    manifest = json.loads((out / ap_output.MANIFEST).read_text())
    assert [a, b] in manifest["block_pairs"] and not manifest["finished"]
    done = len(manifest["done"])
    assert f"{a}-{b}" not in manifest["done"]
    # Dask blames the tasks on the worker when it died: the dying block pair, or the one
    # before it whose end the worker had not yet reported; either was not kept.
    named = re.match(r"swdask: error: the Dask cluster cannot go on: 2 workers died while "
                     r"running task 'swdask-allpairs-write-(\d+)-(\d+)-", err)
    assert named and "-".join(named.groups()) not in manifest["done"], err
    assert err.endswith(f"; the {done} of {len(manifest['block_pairs'])} block pairs finished "
                        f"are kept in {out}: run again with --resume to finish\n"), err
    assert err.count("\n") == 1 and done > 0
    assert main([*command, "--resume"]) == 0, capsys.readouterr().err
    expected = all_pairs(short16s, scoring=DNA, min_identity=0.8, device="cpu",
                         block_size=8).compute().reset_index(drop=True)
    pd.testing.assert_frame_equal(read_all_pairs(out), expected)


def test_block_pairs_start_largest_first_on_a_cluster(short16s, tmp_path):
    """On a cluster the block pairs start by cells, most first (plan.largest_first), not
    in the store's order; the folder reads back as the run here."""
    from distributed import Client, LocalCluster, get_task_stream

    options = dict(scoring=DNA, min_identity=0.8, block_size=8, device="cpu")
    write_all_pairs(short16s, tmp_path / "here", **options)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        with get_task_stream(client) as stream:
            write_all_pairs(short16s, tmp_path / "there", client=client, **options)
    started = [tuple(int(x) for x in str(r["key"]).split("-")[3:5])
               for r in sorted(stream.data, key=lambda r: r["startstops"][0]["start"])]
    job = short_job(short16s)
    expected = ap_plan.largest_first(ap_plan.block_pair_work(job, job.block_pairs))
    assert started == expected and expected != list(job.block_pairs)
    pd.testing.assert_frame_equal(read_all_pairs(tmp_path / "there"),
                                  read_all_pairs(tmp_path / "here"))


def test_a_worker_killed_mid_run_changes_nothing(short16s, tmp_path):
    """A worker process dies in a block pair (once): Dask runs the block pair again on the
    worker its nanny starts, and the output equals the run here."""
    from distributed import Client

    options = dict(scoring=DNA, min_identity=0.8, block_size=8, device="cpu")
    write_all_pairs(short16s, tmp_path / "here", **options)
    killed = tmp_path / "killed"
    with dying_workers("-write-1-2-", once=killed) as address, Client(address) as client:
        write_all_pairs(short16s, tmp_path / "there", client=client, **options)
    assert killed.exists()
    pd.testing.assert_frame_equal(read_all_pairs(tmp_path / "there"),
                                  read_all_pairs(tmp_path / "here"))
