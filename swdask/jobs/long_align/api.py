"""Long pair alignment's API: :func:`align_long` and the :class:`LongAlignment` it returns."""
from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from ... import backend
from ...errors import InvalidSequenceError, ScoringError
from ...scoring import Scoring
from ...sequences.alphabet import reverse_complement
from ...sequences.batch import one_sequence
from .plan import CostModel, plan_tiles
from .score import (
    client_workers,
    local_cluster,
    local_workers,
    score_here,
    score_pass,
    worker_counts,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from distributed import Client

__all__ = ["LongAlignment", "align_long", "check_score_range", "reverse_complement"]

logger = logging.getLogger(__name__)

#: Reachable scores stay this far inside the int32 sentinel of the kernels.
_SCORE_LIMIT = (1 << 30) - (1 << 20)


@dataclass(frozen=True)
class LongAlignment:
    """The best local alignment of a long pair: ends always, the path with traceback.

    Coordinates are 0-based half-open, on the sequences as aligned: for
    ``strand == "-"`` the query was aligned to the reverse complement of the subject, and
    ``subject_start``/``subject_end`` count on that reverse complement (the forward
    interval is ``[subject_length - subject_end, subject_length - subject_start)``, as
    the SAM record gives it).  ``query_start``, ``subject_start`` and the path's columns
    are None without traceback.  ``pident`` is BLAST's percent identity: 100 x identical
    columns / alignment columns.
    """

    query: str
    subject: str
    strand: str
    score: int
    query_start: int | None
    query_end: int
    subject_start: int | None
    subject_end: int
    query_length: int
    subject_length: int
    cigar: str | None = None
    matches: int | None = None
    mismatches: int | None = None
    gap_opens: int | None = None
    align_length: int | None = None
    pident: float | None = None
    cells: int = 0
    score_seconds: float = 0.0
    traceback_seconds: float | None = None
    device: str = "cpu"
    tile_rows: int = 0
    tile_cols: int = 0
    stats: dict = field(default_factory=dict, compare=False, repr=False)

    def to_table(self) -> pa.Table:
        """The one-row Arrow table (:data:`swdask.parquet_schemas.LONG_ALIGNMENTS`)."""
        import pyarrow as pa

        from ...parquet_schemas import LONG_ALIGNMENTS
        from ...tables import check_table

        row = {k: v for k, v in asdict(self).items() if k != "stats"}
        table = pa.Table.from_pylist([row], schema=LONG_ALIGNMENTS)
        return check_table(table, LONG_ALIGNMENTS, where="long alignment")

    def sam_lines(self, command_line: str | None = None) -> list[str]:
        """SAM v1.6 lines: header, then the query as the read against the subject.

        Raises
        ------
        ValueError
            No traceback was made (``cigar`` is None).
        """
        from ... import __version__
        from ...output import sam_cigar, text_name

        if self.cigar is None:
            raise ValueError("SAM needs the alignment: run with traceback=True (--traceback)")
        query, subject = text_name(self.query), text_name(self.subject)
        lines = ["@HD\tVN:1.6\tSO:unsorted\n", f"@SQ\tSN:{subject}\tLN:{self.subject_length}\n"]
        pg = f"@PG\tID:swdask\tPN:swdask\tVN:{__version__}"
        if command_line:
            pg += "\tCL:" + text_name(" ".join(command_line.split()))
        lines.append(pg + "\n")
        if not self.align_length:
            lines.append(f"{query}\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*\tAS:i:0\n")
            return lines
        if self.strand == "+":
            flag, cigar = 0, sam_cigar(self.cigar, self.query_start, self.query_end, self.query_length)
        else:
            # The read is reported reverse-complemented against the forward subject: the
            # path reversed, the clips swapped.
            runs = _cigar_runs(self.cigar)[::-1]
            flag = 16
            cigar = sam_cigar("".join(f"{n}{op}" for n, op in runs),
                              self.query_length - self.query_end,
                              self.query_length - self.query_start, self.query_length)
        pos = self.subject_start + 1 if self.strand == "+" else self.subject_length - self.subject_end + 1
        nm = self.align_length - self.matches
        lines.append(f"{query}\t{flag}\t{subject}\t{pos}\t255\t{cigar}"
                     f"\t*\t0\t0\t*\t*\tAS:i:{self.score}\tNM:i:{nm}\n")
        return lines


def _cigar_runs(cigar: str):
    import re

    return [(int(n), op) for n, op in re.findall(r"(\d+)([=XID])", cigar)]


def check_score_range(m: int, n: int, scoring: Scoring) -> None:
    """Refuse a pair whose local scores could leave the kernels' exact int32 range.

    Every local ``H`` lies in ``[0, max(s) * min(m, n)]`` and every ``E``/``F`` at most
    ``o + e`` below a non-negative ``H``; the bound must stay under ``2^30 - 2^20``: about
    537 million residues for DNA at match 2, 97 million for BLOSUM62 (max 11).

    Raises
    ------
    ValueError
    """
    bound = max(scoring.max_score, 0) * min(m, n) + scoring.gap_open + scoring.gap_extend
    if bound >= _SCORE_LIMIT:
        raise ValueError(f"pair of {m:,} x {n:,} residues may reach scores of {bound:,}, "
                         f"beyond the exact 32-bit range of the tile kernels ({_SCORE_LIMIT:,})")


def _sequence(value, alphabet, name):
    from ...sequences.alphabet import get_alphabet

    seq_name, codes, seq_alphabet = one_sequence(value, alphabet or "auto", False, name)
    if isinstance(codes, str):
        codes = get_alphabet(alphabet or "dna").encode(codes, where=seq_name)
    return seq_name, np.ascontiguousarray(codes, dtype=np.uint8), seq_alphabet


def align_long(a: str | os.PathLike | np.ndarray, b: str | os.PathLike | np.ndarray, *,
               scoring: Scoring | None = None, tile: int | Literal["auto"] = "auto",
               device: str = "auto", traceback: bool = False, reverse_complement: bool = False,
               client: Client | None = None, model: CostModel | None = None,
               progress: bool = False) -> LongAlignment:
    """Best local alignment of two long sequences, tiled over Dask's CPU and GPU workers.

    Parameters
    ----------
    a, b : str, path or numpy.ndarray
        Query and subject: letters, the path of a FASTA/FASTQ file (its first record),
        or residue codes of ``scoring.alphabet``.
    scoring : Scoring, optional
        Default: the alphabet's default (DNA: match 2, mismatch -3, gaps 5/2; protein
        BLOSUM62 11/1); the alphabet is detected from the files when not given.
    tile : "auto" or int, default "auto"
        Tile side; ``"auto"`` asks :func:`plan_tiles` and the cost model.
    device : {"auto", "cpu", "gpu", "both"}, default "auto"
        ``"cpu"``: every tile on the CPU kernel; ``"gpu"``: every tile on GPU workers;
        ``"both"``: GPU tile rows on GPU workers, the others on whichever worker takes
        them, each picking its kernel by whether it has a GPU; ``"auto"``: ``"both"``
        when a GPU (or a GPU worker) is there, else ``"cpu"``.
    traceback : bool, default False
        Also recover the alignment (CIGAR, identity) in bounded memory.
    reverse_complement : bool, default False
        Also align ``a`` to the reverse complement of ``b`` (DNA) and report the better
        strand (``"+"`` on a tie).
    client : distributed.Client, optional
        A Dask client whose workers run the tiles (GPU workers advertise ``GPU=1``).
        Default: an in-process cluster here, closed at the end.
    model : CostModel, optional
        Default :class:`CostModel` ().
    progress : bool, default False
        Progress of the score pass on the standard error, in cells
        (:func:`swdask.jobs.base.progress_bar`).

    Returns
    -------
    LongAlignment

    Raises
    ------
    ValueError
        Unknown device, a tile below 1, scores beyond int32, or reverse complement of
        protein.
    DeviceError
        ``device="gpu"`` or ``"both"`` with no GPU (or GPU worker).
    InvalidSequenceError
        A letter outside the alphabet, or an alphabet that does not match the scoring.

    Notes
    -----
    The score pass is exact Smith-Waterman (:mod:`swdask.kernels.cpu.reference`): the
    score and end equal the reference's, ties broken by the smallest subject end, then
    the smallest query end; the traceback's path is the reference's too.

    References
    ----------
    .. [1] Zou, H. et al. (2018). ASW: accelerating Smith-Waterman on coupled CPU-GPU
       architecture. Heterogeneous computing of the tiled DP as a DAG with a tile-size
       cost model.
    .. [2] de O. Sandes, E. F. & de Melo, A. C. M. A. (2013). Retrieving Smith-Waterman
       alignments with optimizations for megabase biological sequences using GPU
       (CUDAlign 2.0). IEEE TPDS 24(5).

    Examples
    --------
    >>> r = align_long("TTACGTACGTAA", "GGACGTACGTGG", tile=4, device="cpu", traceback=True)
    >>> r.score, r.query_start, r.query_end, r.cigar
    (16, 2, 10, '8=')
    """
    from ...sequences.alphabet import get_alphabet

    backend.check_long_device(device)
    if tile != "auto" and (isinstance(tile, bool) or int(tile) < 1):
        raise ValueError(f"tile must be 'auto' or a positive whole number, not {tile!r}")
    alphabet = scoring.alphabet.name if scoring is not None else None
    a_name, a_codes, a_alpha = _sequence(a, alphabet, "query")
    b_name, b_codes, b_alpha = _sequence(b, alphabet, "subject")
    if scoring is None:
        scoring = Scoring.default((a_alpha or b_alpha or get_alphabet("dna")).name)
    for seq_alpha, name in ((a_alpha, a_name), (b_alpha, b_name)):
        if seq_alpha is not None and seq_alpha is not scoring.alphabet:
            raise InvalidSequenceError(f"{name}: the sequence is {seq_alpha.name} but the "
                                       f"scoring is for {scoring.alphabet.name}")
    if reverse_complement and scoring.alphabet.name != "dna":
        raise ScoringError("--reverse-complement needs DNA sequences and scoring")
    m, n = len(a_codes), len(b_codes)
    check_score_range(m, n, scoring)

    own = client is None
    if own:
        gpus = backend.cluster_gpus(device)
        device = backend.tile_device(device, gpus,
                                     missing="a GPU; none is visible (use device='cpu')")
        # Planned for the workers the in-process cluster will have, before starting it:
        # one tile without traceback runs here without a cluster.
        n_gpus, cpu_threads = _kinds(device, *worker_counts(local_workers(device, gpus)))
        plan = plan_tiles(m, n, tile=tile, gpus=n_gpus, cpu_threads=cpu_threads, model=model)
        if plan.shape == (1, 1) and not traceback:
            return _one_tile(a_name, b_name, a_codes, b_codes, scoring, plan, device,
                             n_gpus, cpu_threads, reverse_complement, progress)
        client = local_cluster(device, gpus)
    try:
        if not own:  # the caller's cluster: planned for its workers
            n_gpus, cpu_threads = client_workers(client)
            device = backend.tile_device(device, n_gpus,
                                         missing="a Dask worker with the resource GPU=1")
            n_gpus, cpu_threads = _kinds(device, n_gpus, cpu_threads)
            plan = plan_tiles(m, n, tile=tile, gpus=n_gpus, cpu_threads=cpu_threads,
                              model=model)
        logger.info("align-long: %s x %s residues in %d x %d tiles on %s (%d GPU workers, %d CPU "
                    "threads), predicted %.2f s a strand", f"{m:,}", f"{n:,}", *plan.shape,
                    device, n_gpus, cpu_threads, plan.predicted)
        a_future = client.scatter(a_codes, broadcast=True, hash=False)
        strands = [("+", b_codes)]
        if reverse_complement:
            strands.append(("-", _rc(b_codes)))
        results = []
        for strand, subject in strands:
            b_future = client.scatter(subject, broadcast=True, hash=False)
            started = time.perf_counter()
            futures, best, stats = score_pass(
                client, a_future, b_future, plan, scoring, device, progress,
                desc="align-long" if len(strands) == 1 else f"align-long (strand {strand})")
            results.append((best, strand, subject, b_future, futures,
                            time.perf_counter() - started, stats))
        # The better strand: higher score, then '+'.
        best, strand, subject, b_future, futures, _, stats = max(
            results, key=lambda r: (r[0][0], r[1] == "+"))
        for other in results:
            if other[1] != strand:
                client.cancel(list(other[4].values()))
        fields = {}
        tb_seconds = None
        if traceback:
            from .traceback import trace_on_workers  # Numba: the CPU's walk

            started = time.perf_counter()
            path = trace_on_workers(client, futures, plan, a_future, b_future, a_codes, subject,
                                    scoring, best, gpu_grids=n_gpus > 0)
            tb_seconds = time.perf_counter() - started
            path.pop("ops")
            stats["traceback"] = path.pop("stats")
            fields = path
        client.cancel(list(futures.values()))
    finally:
        if own:
            cluster = client.cluster
            client.close()
            cluster.close()
    score, ei, ej = best
    qs = fields.get("query_start")
    ss = fields.get("subject_start")
    devices = {k: v for k, v in stats["tiles_on"].items() if v}
    return LongAlignment(
        query=a_name, subject=b_name, strand=strand, score=int(score),
        query_start=qs, query_end=int(ei), subject_start=ss, subject_end=int(ej),
        query_length=m, subject_length=n, cigar=fields.get("cigar"),
        matches=fields.get("matches"), mismatches=fields.get("mismatches"),
        gap_opens=fields.get("gap_opens"), align_length=fields.get("align_length"),
        pident=fields.get("pident"), cells=m * n * len(strands),
        score_seconds=sum(r[5] for r in results),  # both strands' cells, both strands' time
        traceback_seconds=tb_seconds, device="+".join(sorted(devices)) or device,
        tile_rows=plan.shape[0], tile_cols=plan.shape[1],
        stats={**stats, "predicted_seconds": plan.predicted, "plan": plan,
               "gpu_workers": n_gpus, "cpu_threads": cpu_threads})


def _kinds(device: str, gpus: int, cpu_threads: int) -> tuple[int, int]:
    """The GPU workers and CPU threads a ``device`` job uses of those there are."""
    return (0 if device == "cpu" else gpus), (0 if device == "gpu" else cpu_threads)


def _one_tile(a_name, b_name, a_codes, b_codes, scoring, plan, device, n_gpus, cpu_threads,
              reverse_complement, progress) -> LongAlignment:
    """:func:`align_long` of a one-tile plan, scored here (:func:`score_here`): on the
    GPU when the plan's tile row is a GPU row or the job is GPU-only."""
    on_gpu = n_gpus > 0 and (device == "gpu" or plan.gpu_rows > 0)
    strands = [("+", b_codes)] + ([("-", _rc(b_codes))] if reverse_complement else [])
    results = []
    for strand, subject in strands:
        started = time.perf_counter()
        best, stats = score_here(a_codes, subject, scoring, on_gpu, progress,
                                 desc="align-long" if len(strands) == 1
                                 else f"align-long (strand {strand})")
        results.append((best, strand, time.perf_counter() - started, stats))
    (score, ei, ej), strand, _, stats = max(results, key=lambda r: (r[0][0], r[1] == "+"))
    m, n = len(a_codes), len(b_codes)
    devices = {k: v for k, v in stats["tiles_on"].items() if v}
    return LongAlignment(
        query=a_name, subject=b_name, strand=strand, score=int(score), query_start=None,
        query_end=int(ei), subject_start=None, subject_end=int(ej), query_length=m,
        subject_length=n, cells=m * n * len(strands),
        score_seconds=sum(r[2] for r in results), device="+".join(sorted(devices)) or device,
        tile_rows=1, tile_cols=1,
        stats={**stats, "predicted_seconds": plan.predicted, "plan": plan,
               "gpu_workers": 1 if on_gpu else 0, "cpu_threads": 0 if on_gpu else cpu_threads})


_rc = reverse_complement
