"""Pairwise statistical significance (swdask.jobs.significance): subject keys, scores, PSSMs,
P-values, API, CLI.  The kernels' RNG, shuffles and Gumbel fit are tested with the kernels
(tests/kernels/cpu/test_psse.py, tests/kernels/cuda/test_psse.py).

CUDA kernels run in the simulator here (tiny inputs); the ``gpu`` tests at the end run the
same comparisons on a real card at a useful size.
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from swdask import Scoring
from swdask.errors import EmptyInputError, InputNotFoundError, SchemaError, ScoringError
from swdask.jobs.significance import (
    PSSM_LETTERS,
    read_pssm,
    significance,
    significance_in_process,
    subject_key,
)
from swdask.kernels.cpu.reference import score_reference
from swdask.sequences.store import load_sequences
from tests.helpers import PSSM_FILE, SPROT12071
from tests.helpers import SMALL_QUERIES as QUERIES
from tests.helpers import SMALL_SUBJECTS as SUBJECTS


@pytest.fixture(scope="module")
def sprot():
    return load_sequences(SPROT12071)


# -- subject keys -----------------------------------------------------------------------


def test_subject_key_is_stable():
    assert subject_key("a") == subject_key("a") and subject_key("a") != subject_key("b")
    # Pinned: a change of the key would silently change every published P-value.
    assert int(subject_key("sp|P69905|HBA_HUMAN")) == 0xA9E4B6B562B52B23


# -- scores: CPU, simulator, reference --------------------------------------------------


def _pairs_frame(frame):
    return frame.sort_values(["query", "subject"]).reset_index(drop=True)


def test_cpu_and_simulator_agree_to_the_bit():
    cpu, _ = significance_in_process(QUERIES, SUBJECTS, shuffles=6, seed=11, device="cpu")
    sim, _ = significance_in_process(QUERIES, SUBJECTS, shuffles=6, seed=11, device="gpu")
    pd.testing.assert_frame_equal(cpu, sim, check_exact=False, rtol=1e-12)
    assert cpu.score.tolist() == sim.score.tolist()
    scoring = Scoring()
    for row in cpu.itertuples():
        q = scoring.alphabet.encode(QUERIES[row.query])
        s = scoring.alphabet.encode(SUBJECTS[row.subject])
        assert row.score == score_reference(q, s, scoring.matrix, 11, 1)[0], row


# -- PSSM -------------------------------------------------------------------------------


def test_pssm_parser_on_a_real_file():
    pssm = read_pssm(PSSM_FILE)
    assert len(pssm) == 40 and pssm.sequence == "GAAAAMSICPHIQQVFQNEKSKDGVLKTCNAARYILNHSV"
    assert pssm.scores.shape == (40, 20)
    assert pssm.scores[8, PSSM_LETTERS.index("C")] == 10  # position 9, C: 10
    assert pssm.scores[39].tolist() == [-1, 1, -2, -1, -2, -1, 1, -3, 1, 1, 1, 1, -1, -2, -1,
                                        0, -1, -3, -2, 2]
    assert pssm.lambdas["PSI Gapped"] == (0.0406, 0.267)
    profile = pssm.profile(Scoring())
    letters = Scoring().alphabet.letters
    assert profile[letters.index("B"), 22] == (4 + 3) // 2  # mean of N and D, rounded down
    assert profile[letters.index("X"), 0] == Scoring().score("G", "X")


def test_pssm_errors(tmp_path):
    with pytest.raises(InputNotFoundError, match="no such PSSM file"):
        read_pssm(tmp_path / "missing.pssm")
    bad = tmp_path / "bad.pssm"
    bad.write_text("hello\n")
    with pytest.raises(ScoringError, match="not a PSI-BLAST ASCII PSSM"):
        read_pssm(bad)
    lines = PSSM_FILE.read_text().splitlines()
    lines[5] = "    3 A     2   0  -1  -2  x"
    bad.write_text("\n".join(lines))
    with pytest.raises(ScoringError, match=r"line 6: expected position 3, a letter and 20 scores"):
        read_pssm(bad)


def test_pssm_scores_against_the_expanded_reference():
    """The profile scorer (CPU) and the kernels (simulator) with the PSSM as query profile,
    against the reference with the PSSM expanded to a position x letter matrix."""
    scoring = Scoring()
    pssm = read_pssm(PSSM_FILE)
    profile = pssm.profile(scoring)
    subjects = {"self": pssm.sequence, **SUBJECTS}
    for device in ("cpu", "gpu"):
        frame, _ = significance_in_process({"p": pssm.sequence, "other": "MKV"}, subjects,
                                           pssm=PSSM_FILE, shuffles=4, seed=2, device=device)
        rows = frame[frame["query"] == "p"]
        for row in rows.itertuples():
            s = scoring.alphabet.encode(subjects[row.subject])
            expected = score_reference(np.arange(40), s, profile.T, 11, 1)[0]
            assert row.score == expected, (device, row.subject)
        # A query that is not the PSSM's keeps the substitution matrix.
        other = frame[(frame["query"] == "other") & (frame["subject"] == "s33")].score.item()
        assert other == score_reference(scoring.alphabet.encode("MKV"),
                                        scoring.alphabet.encode(SUBJECTS["s33"]),
                                        scoring.matrix, 11, 1)[0]
    with pytest.raises(ScoringError, match="matches none of the queries"):
        significance_in_process({"x": "MKV"}, SUBJECTS, pssm=PSSM_FILE, shuffles=4, device="cpu")


# -- calibration ------------------------------------------------------------------------


def _unrelated_pairs(sprot, n, seed):
    """``n`` disjoint pairs of Swiss-Prot proteins of 60-200 residues whose two members
    differ in gene mnemonic (first 3 letters) and species: unrelated in all but rare
    cases."""
    rng = np.random.default_rng(seed)
    pool = rng.permutation(np.flatnonzero((sprot.lengths >= 60) & (sprot.lengths <= 200)))
    pairs, k = [], 0
    while len(pairs) < n:
        i, j = int(pool[k]), int(pool[k + 1])
        k += 2
        (gi, si), (gj, sj) = (sprot.names[x].split("|")[-1].split("_") for x in (i, j))
        if gi[:3] != gj[:3] and si != sj:
            pairs.append((i, j))
    return pairs


def test_p_values_of_unrelated_proteins_are_uniform(sprot):
    pairs = _unrelated_pairs(sprot, 500, seed=11)
    decode = sprot.alphabet.decode
    queries = {sprot.names[i]: decode(sprot.codes(i)) for i, _ in pairs}
    subjects = {sprot.names[j]: decode(sprot.codes(j)) for _, j in pairs}
    frame, stats_ = significance_in_process(
        queries, subjects, pairs=[(sprot.names[i], sprot.names[j]) for i, j in pairs],
        shuffles=200, seed=7, device="cpu")
    assert len(frame) == 500 and stats_.pairs == 500
    result = stats.kstest(frame.p_value.to_numpy(float), "uniform")
    assert result.pvalue > 0.01, result


def test_related_pairs_are_significant(sprot):
    """A protein against a copy with 30% of its residues substituted and two indels."""
    rng = np.random.default_rng(5)
    picks = rng.choice(np.flatnonzero((sprot.lengths >= 80) & (sprot.lengths <= 400)), 8,
                       replace=False)
    queries, subjects, pairs = {}, {}, []
    for i in picks:
        codes = sprot.codes(int(i)).copy()
        flip = rng.random(len(codes)) < 0.3
        codes[flip] = rng.integers(0, 20, flip.sum())
        at = rng.integers(10, len(codes) - 10, 2)
        codes = np.concatenate([codes[:at[0]], rng.integers(0, 20, 3).astype(np.uint8),
                                np.delete(codes[at[0]:], slice(at[1] - at[0], at[1] - at[0] + 2))
                                if at[1] > at[0] else codes[at[0]:]])
        name = sprot.names[int(i)]
        queries[name] = sprot.alphabet.decode(sprot.codes(int(i)))
        subjects[name + "_mutant"] = sprot.alphabet.decode(codes)
        pairs.append((name, name + "_mutant"))
    frame, _ = significance_in_process(queries, subjects, pairs=pairs, shuffles=200, seed=1,
                                       device="cpu")
    assert (frame.p_value < 1e-6).all(), frame


# -- API, pairs, CLI --------------------------------------------------------------------


def test_lazy_frame_equals_in_process_and_is_reproducible():
    import dask.dataframe as dd

    lazy = significance(QUERIES, SUBJECTS, shuffles=8, seed=5, device="cpu", queries_per_task=2)
    assert isinstance(lazy, dd.DataFrame) and lazy.npartitions == 2
    assert list(lazy.columns) == ["query", "subject", "score", "mu", "lambda", "p_value",
                                  "n_shuffles", "seed"]
    here, _ = significance_in_process(QUERIES, SUBJECTS, shuffles=8, seed=5, device="cpu")
    pd.testing.assert_frame_equal(lazy.compute().reset_index(drop=True), here)
    other, _ = significance_in_process(QUERIES, SUBJECTS, shuffles=8, seed=6, device="cpu")
    assert not np.allclose(other["lambda"].to_numpy(float), here["lambda"].to_numpy(float))
    # Keyed on the subject's name: the subject set around a pair does not matter.
    alone, _ = significance_in_process({"q33": QUERIES["q33"]}, {"s2": SUBJECTS["s2"]},
                                       shuffles=8, seed=5, device="cpu")
    pd.testing.assert_frame_equal(alone, here[(here["query"] == "q33") & (here.subject == "s2")]
                                  .reset_index(drop=True))


def test_parallel_kernels_take_turns_on_dask_threads():
    """Numba's workqueue threading layer (the one where neither TBB nor OpenMP is
    installed) aborts the process when two threads enter its ``parallel=True`` kernels at
    once (kernels/cpu/psse.py): significance tasks on Dask's threads must take turns
    (swdask.backend.KERNEL_LOCK).  Without the lock this process dies with SIGABRT."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import dask, pandas as pd, swdask
        queries = {f"q{k}": "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ"[k:] + "WWHEAG" for k in range(8)}
        subjects = {f"s{k}": "GSHMLEDPVDAFQGRAGWMKTAYIAKQRQ"[k:] * 3 for k in range(6)}
        options = dict(shuffles=400, seed=1, device="cpu")
        here, _ = swdask.significance_in_process(queries, subjects, **options)
        lazy = swdask.significance(queries, subjects, queries_per_task=1, **options)
        with dask.config.set(scheduler="threads", num_workers=4):
            for _ in range(3):
                pd.testing.assert_frame_equal(lazy.compute().reset_index(drop=True), here)
        import numba
        print(numba.threading_layer(), len(here))
    """)
    env = {**os.environ, "NUMBA_THREADING_LAYER": "workqueue"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["workqueue", "48"]


def test_pairs_from_tsv_and_hits(tmp_path):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("q1\ts2\nq33\ts33\nq33\ts33\n\n")
    frame, _ = significance_in_process(QUERIES, SUBJECTS, pairs=tsv, shuffles=5, device="cpu")
    assert list(zip(frame["query"], frame.subject)) == [("q33", "s33"), ("q1", "s2")]
    hits = tmp_path / "hits.parquet"
    pq.write_table(pa.table({"query": ["qx", "q1"], "subject": ["sxy", "s40"],
                             "score": [1, 2]}), hits)
    frame, _ = significance_in_process(QUERIES, SUBJECTS, pairs=hits, shuffles=5, device="cpu")
    assert list(zip(frame["query"], frame.subject)) == [("q1", "s40"), ("qx", "sxy")]
    # A DNA search's minus-strand hits would be scored on the wrong strand: refused.
    pq.write_table(pa.table({"query": ["qx", "q1"], "subject": ["sxy", "s40"],
                             "strand": ["plus", "minus"]}), hits)
    with pytest.raises(SchemaError, match=r"hits.parquet: 1 hit\(s\) on the minus strand; "
                       r"significance aligns each query as given"):
        significance_in_process(QUERIES, SUBJECTS, pairs=hits, shuffles=5, device="cpu")
    tsv.write_text("q1 s2\n")
    with pytest.raises(SchemaError, match=r"pairs.tsv: line 1: expected two tab-separated names"):
        significance_in_process(QUERIES, SUBJECTS, pairs=tsv, shuffles=5, device="cpu")
    tsv.write_text("q1\tnope\n")
    with pytest.raises(EmptyInputError, match="pairs: subject 'nope' is not among the subjects"):
        significance_in_process(QUERIES, SUBJECTS, pairs=tsv, shuffles=5, device="cpu")
    with pytest.raises(InputNotFoundError, match="no such pairs file"):
        significance_in_process(QUERIES, SUBJECTS, pairs=tmp_path / "x.tsv", device="cpu")


@pytest.mark.parametrize("kwargs, message", [
    ({"shuffles": 1}, "shuffles must be a whole number >= 2, got 1"),
    ({"seed": -1}, r"seed must be a whole number in \[0, 2\*\*63\), got -1"),
    ({"device": "tpu"}, "unknown device 'tpu'; choose one of: auto, cpu, gpu"),
])
def test_option_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        significance(QUERIES, SUBJECTS, **kwargs)


def test_cli_writes_parquet_and_fails_cleanly(tmp_path, capsys):
    from swdask.cli import main

    queries = tmp_path / "q.fasta"
    queries.write_text("".join(f">{k}\n{v}\n" for k, v in QUERIES.items()))
    subjects = tmp_path / "s.fasta"
    subjects.write_text("".join(f">{k}\n{v}\n" for k, v in SUBJECTS.items()))
    out = tmp_path / "out.parquet"
    assert main(["significance", str(queries), str(subjects), "-o", str(out), "--shuffles", "7",
                 "--seed", "3", "--device", "cpu", "--quiet"]) == 0
    table = pq.read_table(out)
    assert table.schema.metadata[b"swdask.schema"] == b"significance"
    assert table.num_rows == 12 and set(table.column("n_shuffles").to_pylist()) == {7}
    here, _ = significance_in_process(queries, subjects, shuffles=7, seed=3, device="cpu")
    assert table.column("p_value").to_pylist() == here.p_value.tolist()
    bad = tmp_path / "bad.parquet"
    assert main(["significance", str(queries), str(subjects), "-o", str(bad),
                 "--shuffles", "1"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("swdask: error: ")
    assert not bad.exists()
    assert main(["significance", str(queries), str(subjects), "-o", str(out), "--shuffles", "7",
                 "--device", "cpu"]) == 2  # exists, no --force
    assert "exists" in capsys.readouterr().err


# -- GPU lane ---------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_equals_cpu_on_swissprot(sprot):
    """Same seed, same numbers: 6 queries x 40 subjects x 100 shuffles on a real GPU
    (16-bit kernel on Hopper, else 32-bit) against the CPU path."""
    rng = np.random.default_rng(1)
    picks = rng.choice(len(sprot), 46, replace=False)
    decode = sprot.alphabet.decode
    queries = {sprot.names[i]: decode(sprot.codes(int(i))) for i in picks[:6]}
    subjects = {sprot.names[i]: decode(sprot.codes(int(i))) for i in picks[6:]}
    cpu, _ = significance_in_process(queries, subjects, shuffles=100, seed=9, device="cpu")
    gpu, stats_ = significance_in_process(queries, subjects, shuffles=100, seed=9, device="gpu")
    assert cpu.score.tolist() == gpu.score.tolist()
    pd.testing.assert_frame_equal(cpu, gpu, check_exact=False, rtol=1e-9)
    assert stats_.cells > 0


@pytest.mark.gpu
def test_gpu_pssm():
    test_pssm_scores_against_the_expanded_reference()


def test_on_a_dask_cluster():
    """The lazy frame on a distributed cluster (threads), through swdask's compute."""
    from distributed import Client, LocalCluster

    from swdask.cluster import compute

    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as local, \
            Client(local) as client:
        lazy = significance(QUERIES, SUBJECTS, shuffles=5, seed=2, device="cpu",
                            queries_per_task=1)
        (frame,) = compute(lazy, client=client)
    here, _ = significance_in_process(QUERIES, SUBJECTS, shuffles=5, seed=2, device="cpu")
    pd.testing.assert_frame_equal(frame.reset_index(drop=True), here)
