"""Long pair alignment (swdask.jobs.long_align, ``swdask align-long``): tiles composed into the
whole matrix against the reference and the full-matrix traceback, the CUDA tile kernel in
the simulator against the CPU tile kernel, CPU / GPU / mixed Dask runs giving the same
answer, a planted answer on a real chromosome window, the cost model, the command line.
The megabase planted answer runs in the GPU lane (``pytest -m gpu``)."""
from __future__ import annotations

import gzip
import itertools
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import swdask
from swdask.jobs import long_align as la
from swdask.jobs.long_align import score as la_score
from swdask.jobs.long_align import traceback as la_trace
from swdask.sequences.alphabet import DNA
from swdask.cli import main
from swdask.kernels.cpu.reference import align_reference
from swdask.kernels.cpu.tile import better, matrix_boundaries, score_tile
from swdask.kernels.cpu.traceback import align_codes
from swdask.parquet_schemas import LONG_ALIGNMENTS
from swdask.scoring import Scoring

DATA = Path(__file__).parents[2] / "data"
WINDOW = DATA / "NCTC11397_window40k.fna.gz"
SCORINGS = [Scoring(alphabet="dna"), Scoring(match=1, mismatch=-1, gap_open=0, gap_extend=1),
            Scoring(match=5, mismatch=-4, gap_open=10, gap_extend=1)]


def window_codes() -> np.ndarray:
    with gzip.open(WINDOW, "rt") as handle:
        return DNA.encode("".join(line.strip() for line in handle if not line.startswith(">")))


def tiled(a, b, scoring, rows, cols, tile_fn=score_tile):
    """The whole matrix's best cell by composing tiles in wavefront order, no Dask."""
    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    bottoms, rights, best = {}, {}, (0, 0, 0)
    for p, q in itertools.product(range(len(rows) - 1), range(len(cols) - 1)):
        r0, r1, c0, c1 = rows[p], rows[p + 1], cols[q], cols[q + 1]
        t_h, t_f, l_h, l_e = matrix_boundaries(r1 - r0, c1 - c0)
        if p:
            t_h, t_f = bottoms[p - 1, q]
        if q:
            l_h, l_e = rights[p, q - 1]
        out = tile_fn(a[r0:r1], b[c0:c1], matrix, scoring.gap_open, scoring.gap_extend,
                      t_h, t_f, l_h, l_e)
        bottoms[p, q], rights[p, q] = out[:2], out[2:4]
        if out[4] > 0 and better(out[4], r0 + out[5], c0 + out[6], *best):
            best = (int(out[4]), r0 + int(out[5]), c0 + int(out[6]))
    return best


def related_pair(rng, m, n):
    """Random DNA with a shared, mutated stretch (so alignments have gaps), N included."""
    a = rng.integers(0, 4, m).astype(np.uint8)
    b = rng.integers(0, 4, n).astype(np.uint8)
    if m > 8 and n > 8:
        k = min(m, n) // 2
        piece = a[m // 4:m // 4 + k].copy()
        piece[::7] = (piece[::7] + 1) % 4
        piece = np.delete(piece, np.arange(3, len(piece), 11))
        b[n // 5:n // 5 + len(piece)] = piece[:n - n // 5]
    a[rng.integers(0, max(m, 1), 2) if m else []] = 4  # N scores mismatch everywhere
    return a, b


@pytest.fixture(scope="module")
def cpu_client():
    client = la_score.local_cluster("cpu", 0)
    yield client
    cluster = client.cluster
    client.close()
    cluster.close()


# -- tiles against the reference -----------------------------------------------------------

@pytest.mark.parametrize("scoring", SCORINGS, ids=["dna", "linear", "5-4"])
def test_tiles_compose_to_the_reference(scoring):
    rng = np.random.default_rng(11)
    for m, n in [(0, 5), (1, 1), (1, 9), (9, 1), (31, 33), (47, 40), (64, 65)]:
        a, b = related_pair(rng, m, n)
        ref = align_reference(a.tolist(), b.tolist(), scoring.matrix, scoring.gap_open,
                              scoring.gap_extend)
        for th, tw in [(1, 1), (3, 7), (7, 3), (16, 16), (100, 100)]:
            rows = tuple(range(0, m, th)) + (m,)
            cols = tuple(range(0, n, tw)) + (n,)
            got = tiled(a, b, scoring, rows, cols)
            assert got == (ref[0], ref[2], ref[4]), (scoring, m, n, th, tw)


def test_tiles_on_kilobase_real_pairs_match_the_full_matrix():
    """Two 16S genes (2 kb class) cut in tiles of odd sizes: score and ends of the
    traceback kernel's whole-matrix pass (itself checked against the reference)."""
    from swdask.sequences.store import load_sequences

    batch = load_sequences(DATA / "16S_200.fna.gz")
    scoring = Scoring(alphabet="dna")
    for x, y in [(0, 1), (5, 17)]:
        a, b = batch.codes(x), batch.codes(y)
        ref = align_codes(a, b, scoring)
        for t in (97, 211, 1000):
            rows = tuple(range(0, len(a), t)) + (len(a),)
            cols = tuple(range(0, len(b), t + 6)) + (len(b),)
            got = tiled(a, b, scoring, rows, cols)
            assert got == (ref["score"], ref["query_end"], ref["subject_end"]), (x, y, t)


def test_protein_tiles_match_the_reference():
    rng = np.random.default_rng(5)
    scoring = Scoring("BLOSUM62")
    for m, n in [(30, 45), (50, 40)]:
        a = rng.integers(0, 24, m).astype(np.uint8)
        b = np.concatenate([rng.integers(0, 24, 5), a[5:25], rng.integers(0, 24, n - 25)]).astype(np.uint8)
        ref = align_reference(a.tolist(), b.tolist(), scoring.matrix, 11, 1)
        assert tiled(a, b, scoring, (0, 13, m), (0, 8, 20, n)) == (ref[0], ref[2], ref[4])


# -- the CUDA tile kernel in the simulator -------------------------------------------------

def test_gpu_tile_kernel_matches_cpu_tile_kernel_in_the_simulator():
    """Ragged strips and sub-tiles, boundaries from an upstream tile, a protein matrix."""
    from swdask.kernels.cuda.tile import score_tile_gpu

    rng = np.random.default_rng(3)
    cases = [(Scoring(alphabet="dna"), 9, 13, 1, 3), (Scoring(match=1, mismatch=-1, gap_open=0,
             gap_extend=1), 70, 11, 1, 4), (Scoring("BLOSUM62"), 5, 17, 2, 8)]
    for scoring, h, w, rows, width in cases:
        alpha = scoring.matrix.shape[0] - 1
        a = rng.integers(0, alpha, h + 6).astype(np.uint8)
        b = rng.integers(0, alpha, w + 6).astype(np.uint8)
        k = min(len(a), w + 3)
        b[3:3 + k] = a[:k]  # related: the tile has gaps and a real best cell
        matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
        o, e = scoring.gap_open, scoring.gap_extend
        # Boundaries of the tile starting at (6, 6): from the real tiles above and left.
        up = score_tile(a[:6], b[6:], matrix, o, e, *matrix_boundaries(6, w))
        left = score_tile(a[6:], b[:6], matrix, o, e, *matrix_boundaries(h, 6))
        top_h = up[0].copy()
        top_h[0] = 0
        args = (a[6:], b[6:], matrix, o, e, top_h, up[1], left[2], left[3])
        want = score_tile(*args)
        got = score_tile_gpu(*args, rows=rows, width=width)
        for x, y in zip(want, got):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=str((h, w, rows, width)))


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
    b, _, _ = la.planted_copy(codes[300:1200], scoring, spacing=60, seed=4)
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
    b, score, ops = la.planted_copy(a[3000:17_000], scoring, spacing=200, seed=1)
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
        la.align_long(DATA / "sprot_queries.fasta", "ACGT", scoring=Scoring(alphabet="dna"),
                      client=cpu_client)


# -- command line --------------------------------------------------------------------------

def test_cli_align_long(tmp_path, capsys):
    codes = window_codes()
    a_path, b_path = tmp_path / "a.fa", tmp_path / "b.fa"
    a_path.write_text(">win\n" + DNA.decode(codes[:800]) + "\n")
    b, score, _ = la.planted_copy(codes[200:700], Scoring(alphabet="dna"), spacing=100, seed=2)
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
    assert "score" in capsys.readouterr().err
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
    chromosome = Path(os.environ.get("SWDASK_CHROMOSOME", Path(__file__).resolve().parents[4]
                                     / "shared" / "data" / "NCTC11397_chromosome.fna.gz"))
    from swdask.sequences.store import load_sequences

    codes = load_sequences(chromosome).codes(0)
    scoring = Scoring(alphabet="dna")
    a = codes[:1_000_000]
    b, score, ops = la.planted_copy(a[200_000:800_000], scoring, spacing=1000, seed=3)
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
def test_gpu_tile_kernel_matches_cpu_on_a_real_gpu():
    from swdask.kernels.cuda.tile import score_tile_gpu

    codes = window_codes()
    scoring = Scoring(alphabet="dna")
    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    a = codes[:12_345]
    b, _, _ = la.planted_copy(codes[20_000:38_000], scoring, spacing=150, seed=9)
    b = np.concatenate([b, codes[1000:4000]])
    for h, w in [(12_345, len(b)), (257, 513), (4000, 1)]:
        args = (a[:h], b[:w], matrix, 5, 2, *matrix_boundaries(h, w))
        for x, y in zip(score_tile(*args), score_tile_gpu(*args)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=str((h, w)))


@pytest.mark.gpu
def test_calibrate_gpu_on_a_real_gpu():
    """The GPU fit: a warp's rate from one strip, the GPU's from a wide tile, and a model
    that predicts the wide tile's time it was fitted to."""
    model = la.calibrate(kinds=("gpu",), repeats=1)
    assert 0 < model.gpu_warp_gcups < model.gpu_gcups
    assert model.cpu_gcups == la.CostModel().cpu_gcups
    assert model.gpu_overhead >= la.CostModel().gpu_overhead
