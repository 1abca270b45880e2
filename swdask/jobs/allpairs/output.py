"""All-pairs output: one Parquet file per block pair in a folder, written atomically and
resumable (:func:`write_all_pairs`), read back by :func:`read_all_pairs`."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ... import backend
from ...errors import OutputError, OutputExistsError, StoreError
from ...parquet_schemas import ALLPAIRS
from ...scoring import Scoring
from ...sequences.store import SequenceStore
from ...tables import for_file, to_pandas
from ..base import OutputKind, atomic_dir, atomic_path, check_output, progress_bar
from .plan import BLOCK_SIZE, AllPairsJob, block_pair_work, largest_first, prepare
from .tasks import AllPairsStats, BlockStats, allpairs_stats, block_pair

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["ALLPAIRS_OUTPUT", "MANIFEST", "MANIFEST_VERSION", "block_file",
           "check_all_pairs_output", "read_all_pairs", "write_all_pairs",
           "write_block_pair"]

logger = logging.getLogger(__name__)

MANIFEST = "_manifest.json"
MANIFEST_VERSION = 1


def _is_all_pairs(path: Path) -> bool:
    try:
        return json.loads((path / MANIFEST).read_text()).get("schema") == "allpairs"
    except (OSError, ValueError, AttributeError):
        return False


#: What ``allpairs --force`` may replace: an all-pairs output folder (or an empty folder),
#: never a folder of other files, a store or a file.
ALLPAIRS_OUTPUT = OutputKind("all-pairs output folder", folder=True, recognise=_is_all_pairs)



def block_file(a: int, b: int) -> str:
    """The name of block pair ``(a, b)``'s file in an output folder."""
    return f"pairs-{a:05d}-{b:05d}.parquet"


def _manifest(job: AllPairsJob, store: SequenceStore) -> dict:
    """The parameters that determine the output (a resumed run must have the same)."""
    return {
        "schema": "allpairs", "version": MANIFEST_VERSION,
        "store": {"path": str(Path(job.store_path).resolve()) if job.keep is None else None,
                  "n_records": store.n_records, "n_residues": store.n_residues,
                  "files": [p["file"] for p in store.partitions]},
        "scoring": {"name": job.scoring.name, "matrix": np.asarray(job.scoring.matrix).tolist(),
                    "gap_open": job.scoring.gap_open, "gap_extend": job.scoring.gap_extend},
        "mode": job.mode, "min_identity": str(job.bound.threshold), "min_score": job.min_score,
        "cigar": job.cigar,
        "blocks": [[b.partition, b.start, b.stop] for b in job.blocks],
        "block_pairs": [list(p) for p in job.block_pairs], "block_pairs_skipped": job.skipped,
        # For the record only: the pre-filter changes no row (a resume need not match it).
        "prefilter": None if job.prefilter is None else {"q": job.prefilter.q},
    }


def _same_run(old: dict, new: dict) -> list:
    keys = ("schema", "version", "scoring", "mode", "min_identity", "min_score", "cigar", "blocks",
            "block_pairs")
    differ = [k for k in keys if old.get(k) != new.get(k)]
    if {k: v for k, v in old.get("store", {}).items() if k != "path"} != \
            {k: v for k, v in new["store"].items() if k != "path"}:
        differ.append("store")
    return differ


def write_block_pair(job: AllPairsJob, a: int, b: int, out: str) -> BlockStats:
    """Compute block pair ``(a, b)`` and write its file atomically; returns its record."""
    table, stats = block_pair(job, a, b)
    with atomic_path(Path(out) / block_file(a, b), force=True) as tmp:
        pq.write_table(for_file(table), tmp)
    return stats


def _write_json(path: Path, data: dict) -> None:
    with atomic_path(path, force=True) as tmp:
        tmp.write_text(json.dumps(data, indent=1) + "\n")


def _complete(path: Path) -> bool:
    """Whether a block-pair file was written completely (renamed into place after the
    last byte, so a readable footer with our schema means complete)."""
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException):
        return False
    return (schema.metadata or {}).get(b"swdask.schema") == b"allpairs"


def check_all_pairs_output(output: str | os.PathLike, *, resume: bool = False,
                           force: bool = False,
                           inputs: Iterable[object] = ()) -> Literal["new", "replace", "resume"]:
    """Check, before any work, that a run of :func:`write_all_pairs` may write the folder
    ``output``; return how it will: ``"new"``, ``"replace"`` or ``"resume"``.

    Raises
    ------
    OutputExistsError
        ``output`` exists, without ``resume`` or ``force``; or, with ``force``, it is not
        an all-pairs output folder (nor an empty folder).
    StoreError
        ``resume`` into something that is not an all-pairs output folder.
    OutputError, InputNotFoundError
        ``output`` is an input or inside one; its folder (or, to resume, itself) is not
        writable; its folder does not exist.
    """
    output = Path(output)
    present = os.path.lexists(output)
    if present and not (resume or force):
        raise OutputExistsError(f"{output}: already exists (use --resume to continue it, or "
                                "--force)")
    if present and resume:
        check_output(output, force=True, kind=None, inputs=inputs)
        if output.is_symlink() or not _is_all_pairs(output):
            raise StoreError(f"{output}: not an all-pairs output folder ({MANIFEST} missing or "
                             "damaged)")
        check_output(output / MANIFEST, force=True, kind=None)  # writable inside
        return "resume"
    check_output(output, force=force, kind=ALLPAIRS_OUTPUT, inputs=inputs)
    return "replace" if present else "new"


def write_all_pairs(source: str | os.PathLike | SequenceStore, output: str | os.PathLike, *,
                    scoring: Scoring | None = None, mode: str = "global",
                    min_identity: float | Fraction = 0.97, min_score: int | None = None,
                    device: str = "auto", cigar: bool = False, block_size: int = BLOCK_SIZE,
                    alphabet: str = "auto", map_unknown: bool = False, resume: bool = False,
                    force: bool = False, client: Client | None = None, progress: bool = False,
                    gpu_rows: int | None = None, prefilter: bool = True) -> AllPairsStats:
    """Run :func:`all_pairs` into a folder: one Parquet file per block pair, resumable.

    Each block pair's rows go to ``OUTPUT/pairs-AAAAA-BBBBB.parquet``, written under a
    temporary name and renamed when complete; ``OUTPUT/_manifest.json`` records the
    parameters, and at the end the run's statistics (``"finished": true``).  With
    ``resume`` the block pairs whose file is complete are skipped, so a run killed at any
    moment and resumed gives exactly the files of an uninterrupted run (every file is a
    deterministic function of its block pair: no duplicates, nothing lost).  Read the
    result with :func:`read_all_pairs` (or ``pandas.read_parquet(OUTPUT)``).

    Parameters
    ----------
    source, scoring, mode, min_identity, min_score, device, cigar, block_size, alphabet, map_unknown, prefilter
        As :func:`all_pairs`.  ``prefilter`` changes no row, so a run may be resumed
        with the other choice.
    output : str or os.PathLike
        The folder to create (or to resume).  A new folder is made, with its manifest,
        before the first block pair, so that of two runs into one new folder one fails at
        the start; while a run writes a folder, another cannot resume it.
    resume : bool, default False
        Continue a run in ``output`` made with the same parameters.
    force : bool, default False
        Replace an existing all-pairs output folder (or an empty folder; never any other
        folder or file): the new run is written to a temporary folder beside it, which
        takes its place only when complete, so an interrupted run leaves the old result
        as it was.
    client : distributed.Client, optional
        Run the block pairs on this cluster (GPU tasks on GPU workers); default: in this
        process (one block pair at a time on the CPU, which uses every core; two at a
        time with a GPU, so that one traces back while the other is on the GPU).
    progress : bool, default False
        A progress bar on stderr over the pairs to score, with rate and ETA.
    gpu_rows : int, optional
        Query rows per lane of the GPU kernel (default
        :data:`swdask.kernels.cuda.all_pairs.ROWS`); for tuning, results do not change.

    Returns
    -------
    AllPairsStats
        Of the whole run (block pairs done earlier included, their kernel time as
        recorded then).

    Raises
    ------
    OutputExistsError
        ``output`` exists, without ``resume`` or ``force``, or is not an all-pairs
        output folder (with ``force``); or another run made it meanwhile.
    StoreError
        ``resume`` into a folder made with other parameters (the message names them), or
        into something else than an all-pairs output folder.
    OutputError
        ``output`` is the input (or inside it), or is not writable, or another run is
        writing it.
    ValueError, DeviceError, InputNotFoundError
        As :func:`all_pairs`; a missing parent folder.
    """
    output = Path(output)
    how = check_all_pairs_output(output, resume=resume, force=force, inputs=[source])
    job = prepare(source, scoring=scoring, mode=mode, min_identity=min_identity,
                  min_score=min_score, device=device, cigar=cigar, block_size=block_size,
                  alphabet=alphabet, map_unknown=map_unknown, rows=gpu_rows, client=client,
                  prefilter=prefilter)
    store = SequenceStore.open(job.store_path)
    manifest = _manifest(job, store)
    if how == "replace":
        with _locked(output), atomic_dir(output, force=True, kind=ALLPAIRS_OUTPUT) as folder:
            with _noting(f"{output} kept as it was"):
                stats = _write_run(job, manifest, folder, {}, client, progress)
        return stats
    done_infos = {}
    if how == "new":
        # The claim: the folder appears with its manifest, and of two runs only one makes it.
        with atomic_dir(output, kind=ALLPAIRS_OUTPUT) as folder:
            _write_json(folder / MANIFEST, {**manifest, "done": {}, "finished": False})
    else:
        old = json.loads((output / MANIFEST).read_text())
        differ = _same_run(old, manifest)
        if differ:
            raise StoreError(f"{output}: made with other {', '.join(differ)}; resume with the "
                             "same parameters, or use --force to start again")
        done_infos = {tuple(map(int, k.split("-"))): BlockStats.from_json(v)
                      for k, v in old.get("done", {}).items()}
    with _locked(output), _noting(f"{output} keeps the block pairs finished so far: continue "
                                  "with --resume"):
        return _write_run(job, manifest, output, done_infos, client, progress)


@contextlib.contextmanager
def _noting(note: str):
    """Make ``note`` what a KeyboardInterrupt (Ctrl-C, SIGTERM) that passes says (the
    command line prints it): the notes of the run's own files (a manifest written in full)
    say nothing to a user."""
    try:
        yield
    except KeyboardInterrupt as exc:
        exc.__notes__ = [note]
        raise


@contextlib.contextmanager
def _locked(folder: Path):
    """Hold an exclusive lock on ``folder`` (``flock``, released when the process ends,
    however it ends) while a run writes it; a second run fails at once."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    handle = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputError(f"{folder}: another run is writing it; wait for it to end") from None
        except OSError:  # a file system without locks: go on without one
            pass
        yield
    finally:
        os.close(handle)


def _write_run(job: AllPairsJob, manifest: dict, output: Path, done_infos: dict, client,
               progress: bool) -> AllPairsStats:
    """Write the block pairs not done yet into the folder ``output`` and the manifest."""
    for pattern in (".pairs-*.tmp", f".{MANIFEST}.*.tmp"):  # partial files of a killed run
        for stale in output.glob(pattern):
            stale.unlink(missing_ok=True)
    manifest["done"] = {f"{a}-{b}": v.to_json() for (a, b), v in done_infos.items()}
    manifest["finished"] = False
    _write_json(output / MANIFEST, manifest)
    todo, infos = [], dict(done_infos)
    for a, b in job.block_pairs:
        if (a, b) in infos and _complete(output / block_file(a, b)):
            continue
        infos.pop((a, b), None)
        todo.append((a, b))
    work = block_pair_work(job, todo)
    weights = {pair: pairs for pair, (pairs, _) in work.items()}
    # Most cells first (plan.largest_first).  The output does not change: each block pair
    # has its own file, read back in the manifest's order.
    todo = largest_first(work)
    done = sum(v.pairs_planned for v in infos.values())
    logger.info("all pairs: %d sequences, %d block pairs to run (%d done before), %s pairs "
                "to score, on %s", job.n_sequences, len(todo), len(infos),
                f"{sum(weights.values()):,}", "Dask" if client is not None else "this process")
    def kept() -> str:  # what a cluster that cannot go on leaves: the run is resumable
        return (f"; the {len(infos)} of {len(job.block_pairs)} block pairs finished are kept "
                f"in {output}: run again with --resume to finish")

    with progress_bar(progress, desc="all pairs", unit="pair", unit_scale=True,
                      total=sum(weights.values()) + done, initial=done, leave=True,
                      smoothing=0.1) as bar, _faults(client, kept):
        for (a, b), info in _run_blocks(job, todo, str(output), client):
            infos[(a, b)] = info
            manifest["done"][f"{a}-{b}"] = info.to_json()
            _write_json(output / MANIFEST, manifest)  # what finished, for the stats of a resume
            bar.update(weights[(a, b)])
    stats = allpairs_stats(job, infos.values())
    manifest["finished"] = True
    manifest["stats"] = {k: getattr(stats, k) for k in AllPairsStats.__dataclass_fields__}
    _write_json(output / MANIFEST, manifest)
    return stats


def _faults(client, then):
    """On a cluster, its failures in one line saying what was kept (swdask.cluster.faults)."""
    if client is None:
        return contextlib.nullcontext()
    from ...cluster import faults

    return faults(then)


def _run_blocks(job: AllPairsJob, todo, out: str, client):
    """Yield ``((a, b), info)`` as block pairs finish (in any order)."""
    if client is not None:
        from distributed import as_completed

        from ...cluster import route_tasks

        route_tasks(client)  # GPU work to GPU workers, retries: read off each task
        task = backend.KernelTask(write_block_pair, job.device)
        # The job goes with each task (it is small), not scattered: data scattered to a
        # worker that dies is lost, and every task that needed it with it.  The block
        # pairs are fed to the cluster in the order of ``todo`` (most cells first), a few
        # more than its threads at a time, the next as one finishes: each worker takes the
        # next as it is free, whatever each one's time (issue 18).  All at once, Dask
        # pushed them to the workers by count (GPU tasks: it queues only tasks without
        # restrictions), and a block pair's time follows the pairs that pass the
        # pre-filter, not its cells.
        queue = list(reversed(todo))
        futures = {}

        def submit():
            a, b = queue.pop()
            future = client.submit(task, job, a, b, out, pure=False,
                                   key=f"swdask-allpairs-write-{a}-{b}-{os.getpid()}"
                                   f"-{time.monotonic_ns()}", priority=len(queue))
            futures[future] = (a, b)
            return future

        running = as_completed([submit() for _ in range(min(len(queue),
                                                            _in_flight(client, job)))])
        for future in running:
            yield futures.pop(future), future.result()
            if queue:
                running.add(submit())
        return
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    workers = 2 if job.device == "gpu" else 1
    if workers == 1:
        for a, b in todo:
            yield (a, b), write_block_pair(job, a, b, out)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="swdask-allpairs-block") as pool:
        pending = {}
        queue = list(todo)
        while queue or pending:
            while queue and len(pending) < workers:
                a, b = queue.pop(0)
                pending[pool.submit(write_block_pair, job, a, b, out)] = (a, b)
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                yield pending.pop(future), future.result()


def _in_flight(client, job: AllPairsJob) -> int:
    """Block pairs a cluster is given at once: its workers' threads (those of its GPU
    workers for a GPU job) and one more per worker, queued behind its running ones so
    that none waits for the next one to be sent."""
    workers = list(client.scheduler_info(n_workers=-1)["workers"].values())
    gpus = [w for w in workers if w.get("resources", {}).get("GPU", 0) > 0]
    if job.device == "gpu" and gpus:
        workers = gpus
    return max(1, sum(int(w.get("nthreads", 1)) + 1 for w in workers))


def read_all_pairs(output: str | os.PathLike) -> pd.DataFrame:
    """The rows of a :func:`write_all_pairs` folder, in block-pair order (pandas).

    Raises
    ------
    StoreError
        The folder has no manifest, or the run is not finished.
    """
    output = Path(output)
    try:
        manifest = json.loads((output / MANIFEST).read_text())
    except (OSError, ValueError):
        raise StoreError(f"{output}: not an all-pairs output folder ({MANIFEST} missing)") from None
    if not manifest.get("finished"):
        raise StoreError(f"{output}: the run is not finished; run it again with --resume")
    tables = [pq.read_table(output / block_file(a, b), schema=ALLPAIRS)
              for a, b in manifest["block_pairs"]]
    return to_pandas(pa.concat_tables(tables) if tables else ALLPAIRS.empty_table())
