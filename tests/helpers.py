"""Plain-Python helpers and data shared by the tests: the test data's paths, found from this
file (so the tests run from any folder, or from a copy of ``tests/``), and small readers,
writers and generators written the obvious way, independent of the code they check.  The
oracles of swdask's own results are public: :mod:`swdask.testing`."""
from __future__ import annotations

import contextlib
import gzip
import importlib
import itertools
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

from swdask.cli import main
from swdask.kernels.cpu.tile import matrix_boundaries, score_tile
from swdask.sequences.alphabet import DNA

#: The repository (or the folder the tests were copied to, with ``tests/`` in it).
ROOT = Path(__file__).resolve().parents[1]
#: The test data (provenance in its README.md).
DATA = Path(__file__).resolve().parent / "data"
#: 12 Swiss-Prot queries of 50 to 970 residues.
QUERIES = DATA / "sprot_queries.fasta"
N_QUERIES = 12
#: 400 Swiss-Prot records, the own records of 3 queries among them.
SPROT_DB = DATA / "sprot_db.fasta.gz"
#: 200 16S rRNA genes (RefSeq), IUPAC codes in 53 of them.
RRNA = DATA / "16S_200.fna.gz"
#: Whole Swiss-Prot files for the GPU lane: 196 queries, 12,071 records.
SPROT196 = DATA / "sprot196.fasta"
SPROT12071 = DATA / "sprot12071.fasta.gz"
#: 40 kb of the NCTC 11397 chromosome: real DNA for long alignments.
WINDOW = DATA / "NCTC11397_window40k.fna.gz"
#: The whole chromosome (not in the repository) for the megabase GPU test.
CHROMOSOME = Path(os.environ.get("SWDASK_CHROMOSOME", ROOT.parent / "shared" / "data"
                                 / "NCTC11397_chromosome.fna.gz"))
#: A PSI-BLAST ASCII PSSM of 40 positions.
PSSM_FILE = DATA / "sl_pseaac_example40.pssm"

#: Proteins at the edges of the significance kernels: 33 residues (a warp and one), a
#: single residue, X/B/Z letters; the subjects one of each and a 40-residue PSSM query's.
SMALL_QUERIES = {"q33": "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", "q1": "W", "qx": "GSHMLEDPVXAFQGRBZW"}
SMALL_SUBJECTS = {"s33": "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", "s2": "WW",
                  "sxy": "PEPTIDEXXBZCWWHK", "s40": "GAAAAMSICPHIQQVFQNEKSKDGVLKTCNAARYILNHSV"}


# -- sequences: files and arrays ----------------------------------------------------------


def benchmark_module(name: str):
    """``workflows/benchmarks/<name>.py``, imported as the scripts import each other (their
    folder on the path while it loads)."""
    folder = str(ROOT / "workflows" / "benchmarks")
    sys.path.insert(0, folder)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(folder)


def fasta_records(path) -> list[tuple[str, str, str]]:
    """``[(name, description, sequence)]`` in file order, by a plain-Python parser,
    independent of needletail."""
    opener = gzip.open if str(path).endswith(".gz") else open
    records = []
    with opener(path, "rt") as handle:
        for line in handle:
            line = line.rstrip("\n")
            if line.startswith(">"):
                name, _, description = line[1:].partition(" ")
                records.append([name, description.strip(), []])
            elif line:
                records[-1][2].append(line)
    return [(n, d, "".join(s)) for n, d, s in records]


def read_fasta(path) -> dict[str, str]:
    """``{name: sequence}`` in file order."""
    return {name: sequence for name, _, sequence in fasta_records(path)}


def gene_windows(genes: int, seed: int) -> list[tuple[str, str]]:
    """Windows of ``genes`` real 16S genes of :data:`RRNA` chosen by ``seed``: for each,
    bases 300-400 and two windows shifted by a few bases (close pairs), ``NAME_k``: short
    records, many cheap block pairs for all-pairs runs."""
    import random

    from swdask.sequences.store import load_sequences

    batch = load_sequences(RRNA, alphabet="dna")
    records = []
    for i in random.Random(seed).sample(range(len(batch)), genes):
        gene = batch.alphabet.decode(batch.codes(i))
        for k, (start, stop) in enumerate(((300, 400), (303, 404), (296, 398))):
            records.append((f"{batch.names[i]}_{k}", gene[start:stop]))
    return records


def revcomp(letters: str) -> str:
    """Reverse complement of DNA letters, written plainly: A-T, C-G, anything else N."""
    pairs = {"A": "T", "C": "G", "G": "C", "T": "A"}
    return "".join(pairs.get(c, "N") for c in reversed(letters))


def strand_reads() -> dict[str, str]:
    """Reads of 16S genes of :data:`RRNA`: forward, reverse-complemented, and a chimera of
    a forward and a reverse-complemented piece (hits on both strands, primary and
    secondary)."""
    genes = list(read_fasta(RRNA).values())
    s0, s64 = genes[0], genes[64]
    return {"fwd": s0[100:400], "rev": revcomp(s64[200:500]),
            "chimera": s0[600:750] + revcomp(s64[900:1050])}


def write_fasta(path: Path, records) -> Path:
    """``records`` (``(name, sequence)`` pairs) as FASTA at ``path``."""
    path.write_text("".join(f">{name}\n{seq}\n" for name, seq in records))
    return path


def write_file(path: Path, text: str, *, compress: bool = False) -> Path:
    """``text`` at ``path``, gzip-compressed (reproducibly: mtime 0) if asked."""
    data = text.encode("ascii")
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return path


def pack(seqs) -> tuple[np.ndarray, np.ndarray]:
    """Sequences of codes as the kernels take them: residues end to end, and offsets."""
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    residues = (np.concatenate([np.asarray(s, np.uint8) for s in seqs]) if seqs
                else np.zeros(0, np.uint8))
    return residues.astype(np.uint8), offsets


def check_score_many(queries, subjects, scoring, label, **options):
    """Every score and end of the GPU launcher's ``score_many`` (``options``: its
    keywords, e.g. ``packed``, ``kernel``, ``mode``) equals the CPU kernel's in the same
    mode; returns the stats."""
    from swdask.kernels.cpu.score import score_all
    from swdask.kernels.cuda import launcher

    s_res, s_off = pack(subjects)
    q_res, q_off = pack(queries)
    *got, stats = launcher.DeviceSubjects(s_res, s_off).score_many(
        queries, scoring.matrix, scoring.gap_open, scoring.gap_extend, **options)
    want = score_all(q_res, q_off, s_res, s_off, scoring.matrix, scoring.gap_open,
                     scoring.gap_extend, options.get("mode", "local"))
    for name, g, w in zip(("score", "query_end", "subject_end"), got, want):
        np.testing.assert_array_equal(g, w, err_msg=f"{label}: {name}")
    return stats


def protein_windows(db, rng, lengths) -> list[np.ndarray]:
    """Real windows of ``lengths`` from the records of ``db`` (a ``load_sequences`` set),
    at random records and starts (a record repeated where too short)."""
    out = []
    for n in lengths:
        codes = db.codes(int(rng.integers(len(db))))
        while len(codes) < n:
            codes = np.concatenate([codes, codes])
        s0 = int(rng.integers(0, len(codes) - n + 1))
        out.append(codes[s0:s0 + n].copy())
    return out


def window_codes() -> np.ndarray:
    """The codes of :data:`WINDOW`."""
    with gzip.open(WINDOW, "rt") as handle:
        return DNA.encode("".join(line.strip() for line in handle if not line.startswith(">")))


def identical_40kb_dna():
    """``(gene, other)``: a random 40 kb DNA gene and an unrelated 39 kb sequence (seed
    40): the gene against itself scores 80,000 (DNA 2/-3 5/2), past 16 bits."""
    rng = np.random.default_rng(40)
    return (rng.integers(0, 4, 40_000).astype(np.uint8),
            rng.integers(0, 4, 39_000).astype(np.uint8))


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


def batch_in_input_order(store):
    """A store's sequences in the order of its input (a store sorts them by length)."""
    batch = store.read_all()
    return batch.take(np.argsort(batch.seq_id))


def assert_matches(batch, records, alphabet):
    """``batch`` holds ``records`` (``fasta_records``), letters as ``alphabet`` reads them."""
    assert batch.names == tuple(n for n, _, _ in records)
    assert batch.descriptions == tuple(d for _, d, _ in records)
    assert batch.seq_id.tolist() == list(range(len(records)))
    for i, (_, _, seq) in enumerate(records):
        expected = seq.upper()
        if alphabet is DNA:
            expected = expected.replace("U", "T").translate(str.maketrans("RYKMSWBDHV", "N" * 10))
        assert alphabet.decode(batch.codes(i)) == expected, batch.names[i]


def error_of(exc_type, func, *args, **kwargs) -> str:
    """The message of the ``exc_type`` that ``func(*args, **kwargs)`` must raise."""
    with pytest.raises(exc_type) as info:
        func(*args, **kwargs)
    return str(info.value)


# -- the command line ---------------------------------------------------------------------


def run_cli(capsys, *argv):
    """``(status, stdout, stderr)`` of ``swdask ARGV``, run in this process."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


# -- tiles of long alignments: boundaries composed the slow way ----------------------------


def related(rng, alphabet, m, n):
    """Two random sequences sharing a mutated stretch with an indel (gaps, a real best)."""
    a = rng.integers(0, alphabet, m).astype(np.uint8)
    b = rng.integers(0, alphabet, n).astype(np.uint8)
    k = min(m, n) * 2 // 3
    piece = a[m // 6:m // 6 + k].copy()
    piece[::6] = (piece[::6] + 1) % alphabet
    piece = np.delete(piece, np.arange(4, len(piece), 13))
    b[n // 7:n // 7 + len(piece)] = piece[:n - n // 7]
    return a, b


def upstream_boundaries(a, b, matrix, o, e, r0, c0):
    """The exact boundaries of the rectangle from ``(r0, c0)`` to the end of the matrix:
    the bottom row of the rows above it, the right column of the columns on its left."""
    above = score_tile(a[:r0], b, matrix, o, e, *matrix_boundaries(r0, len(b)))
    left = score_tile(a, b[:c0], matrix, o, e, *matrix_boundaries(len(a), c0))
    return above[0][c0:].copy(), above[1][c0:].copy(), left[2][r0:].copy(), left[3][r0:].copy()


def tiles_one_by_one(a, b, matrix, o, e, bounds, rows, cols):
    """The grid's cut boundaries by composing score_tile calls, the slow way."""
    top_h, top_f, left_h, left_e = bounds
    h, w = len(a), len(b)
    row_h = np.zeros((len(rows) - 2, w + 1), dtype=np.int32)
    row_f = np.zeros((len(rows) - 2, w), dtype=np.int32)
    col_h = np.zeros((len(cols) - 2, h), dtype=np.int32)
    col_e = np.zeros((len(cols) - 2, h), dtype=np.int32)
    bottoms, rights = {}, {}
    for p, q in itertools.product(range(len(rows) - 1), range(len(cols) - 1)):
        r0, r1, c0, c1 = rows[p], rows[p + 1], cols[q], cols[q + 1]
        t_h, t_f = bottoms[p - 1, q] if p else (top_h[c0:c1 + 1], top_f[c0:c1])
        l_h, l_e = rights[p, q - 1] if q else (left_h[r0:r1], left_e[r0:r1])
        out = score_tile(a[r0:r1], b[c0:c1], matrix, o, e, np.ascontiguousarray(t_h),
                         np.ascontiguousarray(t_f), np.ascontiguousarray(l_h),
                         np.ascontiguousarray(l_e))
        bottoms[p, q], rights[p, q] = out[:2], out[2:4]
        if p < len(rows) - 2:
            row_h[p, c0:c1 + 1], row_f[p, c0:c1] = out[0], out[1]
        if q < len(cols) - 2:
            col_h[q, r0:r1], col_e[q, r0:r1] = out[2], out[3]
    return row_h, row_f, col_h, col_e


def assert_grids_equal(got, want, where):
    for name, x, y in zip(("row_h", "row_f", "col_h", "col_e"), got[:4], want[:4]):
        np.testing.assert_array_equal(x, y, err_msg=f"{name}, {where}")


def tile_inputs(scoring, h, w, r0, c0, *, seed):
    """An ``h x w`` tile at ``(r0, c0)`` of a related random pair: its residues, the
    scoring's arrays, and its exact upstream boundaries."""
    a, b = related(np.random.default_rng(seed), scoring.matrix.shape[0] - 1, r0 + h, c0 + w)
    matrix = np.ascontiguousarray(scoring.matrix, dtype=np.int32)
    o, e = scoring.gap_open, scoring.gap_extend
    bounds = upstream_boundaries(a, b, matrix, o, e, r0, c0)
    return a[r0:], b[c0:], matrix, o, e, bounds


# -- Dask faults -------------------------------------------------------------------------


class KillOn(WorkerPlugin):
    """Kills its worker process when a task whose key holds ``part`` starts: every time,
    or with ``once`` (a file that the first kill creates) only the first time."""

    name = "swdask-test-kill-on"

    def __init__(self, part, once=None):
        self.part = part
        self.once = None if once is None else str(once)

    def transition(self, key, start, finish, **kwargs):
        if finish != "executing" or self.part not in str(key):
            return
        if self.once is not None:
            try:
                os.close(os.open(self.once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
        os._exit(1)


@contextlib.contextmanager
def dying_workers(part, allowed_failures=1, once=None):
    """A cluster of one worker process that dies when it starts a task whose key holds
    ``part`` (:class:`KillOn`; its nanny starts a new one); the scheduler gives up on a task
    after ``allowed_failures + 1`` deaths.  Yields the scheduler's address."""
    import cloudpickle
    import dask
    from distributed import Client, LocalCluster

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        with dask.config.set({"distributed.scheduler.allowed-failures": allowed_failures}), \
                LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                             dashboard_address=":0", silence_logs=50) as local, \
                Client(local, set_as_default=False) as watcher:
            watcher.register_plugin(KillOn(part, once))
            yield local.scheduler_address
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


class FirstAssignment(SchedulerPlugin):
    """Records the worker the scheduler first gives each task to (before any stealing):
    ``client.register_plugin(FirstAssignment())``, then :func:`first_assignments`."""

    name = "swdask-test-first-assignment"

    def __init__(self):
        self.first = {}

    async def start(self, scheduler):
        self.scheduler = scheduler

    def transition(self, key, start, finish, *args, **kwargs):
        if finish == "processing":
            self.first.setdefault(key, self.scheduler.tasks[key].processing_on.address)


def first_assignments(client) -> dict:
    """``{key: worker address}`` of the tasks :class:`FirstAssignment` saw assigned."""
    return client.run_on_scheduler(
        lambda dask_scheduler: dict(dask_scheduler.plugins[FirstAssignment.name].first))


def assert_top_hits(found, want, floor, max_hits):
    """Each query's candidates ``found`` (``(columns, scores, query_ends, subject_ends)``,
    as ``DeviceSubjects.top_many`` returns them) hold its ``max_hits`` best subjects of
    score at least ``floor`` (ties by the smaller column) and only subjects of such
    scores, with the scores and ends of ``want`` (``score_all``'s three arrays)."""
    for q, (cols, scores, q_end, s_end) in enumerate(found):
        all_scores = want[0][q]
        eligible = np.flatnonzero(all_scores >= floor)
        ranked = sorted(eligible, key=lambda c: (-all_scores[c], c))[:max_hits]
        assert set(ranked) <= set(cols.tolist())
        assert all(all_scores[c] >= floor for c in cols)
        order = np.argsort(cols)
        np.testing.assert_array_equal(scores[order], all_scores[np.sort(cols)])
        np.testing.assert_array_equal(q_end[order], want[1][q][np.sort(cols)])
        np.testing.assert_array_equal(s_end[order], want[2][q][np.sort(cols)])
