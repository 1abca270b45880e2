"""All-pairs as a lazy Dask DataFrame: one task per block pair."""
from __future__ import annotations

import os
import uuid
from fractions import Fraction
from typing import TYPE_CHECKING

from ... import backend
from ...parquet_schemas import ALLPAIRS
from ...scoring import Scoring
from ...sequences.store import SequenceStore
from ...tables import on_backend, to_pandas
from ..base import lazy_value
from . import tasks
from .plan import BLOCK_SIZE, block_pair_work, prepare

if TYPE_CHECKING:
    import dask.dataframe as dd

__all__ = ["all_pairs"]


def all_pairs(source: str | os.PathLike | SequenceStore, *, scoring: Scoring | None = None,
              mode: str = "global", min_identity: float | Fraction = 0.97,
              min_score: int | None = None, device: str = "auto", cigar: bool = False,
              block_size: int = BLOCK_SIZE, alphabet: str = "auto", map_unknown: bool = False,
              prefilter: bool = True, return_stats: bool = False) -> dd.DataFrame | tuple[dd.DataFrame, dd.Scalar]:
    """Every unordered pair of a sequence set with identity at least ``min_identity``:
    a lazy Dask DataFrame.

    One task per block pair (see the module docstring): the q-gram pre-filter, score
    pass with the identity bound, traceback of the pairs over it, exact identity filter.  Nothing is computed
    until the result is (``.compute()``, ``client.compute(...)``, ``.to_parquet(...)``);
    the arguments are checked at once.

    Parameters
    ----------
    source : path or SequenceStore
        A sequence store, or a FASTA/FASTQ file (ingested into a temporary store at once).
    scoring : Scoring, optional
        Default: BLAST's default for the alphabet (DNA 2/-3, gaps 5/2).
    mode : {"global", "local"}, default "global"
        Needleman-Wunsch (the identity bound skips blocks and pairs) or Smith-Waterman
        (only a score of at least 1 is implied; give ``min_score``).
    min_identity : float or Fraction, default 0.97
        Identity threshold ``t`` (see :func:`as_threshold`); 0 keeps every pair.
    min_score : int, optional
        Also require at least this score (default: no such limit).
    device : {"auto", "cpu", "gpu"}, default "auto"
        Where the score pass runs: ``"auto"`` a GPU when one is visible and the mode is
        global.  Scores are identical on every device.
    cigar : bool, default False
        Fill the ``cigar`` column (null otherwise).
    block_size : int, default 2048
        Sequences per block; a block pair is one task.
    alphabet : {"auto", "protein", "dna"}, default "auto"
    map_unknown : bool, default False
        As :func:`swdask.ingest`.
    prefilter : bool, default True
        In global mode, drop the pairs that share too few q-grams to reach
        ``min_identity`` before scoring them (:mod:`swdask.jobs.allpairs.filter`; exact:
        the rows are the same without it, only slower).
    return_stats : bool, default False
        Also return a lazy :class:`AllPairsStats` (a ``dask.dataframe.Scalar``).

    Returns
    -------
    dask.dataframe.DataFrame
        Schema :data:`swdask.parquet_schemas.ALLPAIRS`, one partition per block pair
        scored, rows sorted by ``(query_id, subject_id)`` inside a partition: pandas
        partitions, or cudf partitions under ``dask.config.set({"dataframe.backend":
        "cudf"})`` (:func:`swdask.tables.on_backend`).  With ``return_stats``,
        ``(frame, stats)``.

    Raises
    ------
    ValueError
        A bad mode, threshold, block size or device name.
    DeviceError
        ``device="gpu"`` with no GPU, or in local mode.
    InputNotFoundError, StoreError, SequenceFormatError, InvalidSequenceError
        As :func:`swdask.sequences.ingest.open_database`.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> genes = {"a": "ACGTACGTTGCA" * 4, "b": "ACGTACGTTGCA" * 4 + "A", "c": "TTTTGGGGCCCC" * 4}
    >>> path = Path(tempfile.mkdtemp()) / "genes.fasta"
    >>> _ = path.write_text("".join(f">{k}\\n{v}\\n" for k, v in genes.items()))
    >>> table = all_pairs(path, min_identity=0.9).compute()
    >>> table[["query", "subject", "score", "identity", "align_length"]].values.tolist()
    [['a', 'b', 89, 0.9795918367346939, 49]]
    """
    import dask
    import dask.dataframe as dd

    job = prepare(source, scoring=scoring, mode=mode, min_identity=min_identity,
                  min_score=min_score, device=device, cigar=cigar, block_size=block_size,
                  alphabet=alphabet, map_unknown=map_unknown, rows=None,
                  client=backend.current_client(), prefilter=prefilter)
    meta = to_pandas(ALLPAIRS.empty_table())
    token = uuid.uuid4().hex[:8]
    job_node = dask.delayed(job, name=f"swdask-allpairs-job-{token}")
    # The task declares its kernels' device (the cluster routes GPU work by it) and its
    # cells (progress counts them, and on a cluster the scheduler starts the block pairs
    # by them, most first: swdask.cluster.largest_first).
    work = block_pair_work(job, job.block_pairs)
    parts = [dask.delayed(backend.KernelTask(tasks.block_frame, job.device, work=work[a, b][1]),
                          nout=2, pure=True)(
                 job_node, a, b, dask_key_name=f"swdask-allpairs-{token}-{a}-{b}")
             for a, b in job.block_pairs]
    frames = [frame for frame, _ in parts]
    if not frames:
        frames = [dask.delayed(to_pandas, pure=True)(ALLPAIRS.empty_table())]
    frame = on_backend(dd.from_delayed(frames, meta=meta, verify_meta=False,
                                       prefix=f"swdask-allpairs-{token}"))
    if not return_stats:
        return frame
    stats = dask.delayed(tasks.allpairs_stats, pure=True)(job_node, [s for _, s in parts])
    return frame, lazy_value(stats, tasks.AllPairsStats, name=f"swdask-allpairs-stats-{token}")
