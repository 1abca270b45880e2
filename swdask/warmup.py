"""``swdask warmup``: build every kernel ahead of time, once per machine.

A job builds only the kernels it launches, the first time it launches them on a machine
(:mod:`swdask.kernels.cuda.compile` keeps them, :mod:`numba`'s cache keeps the CPU
ones).  This command builds them all at once, for an image, a shared node or before a
benchmark: every generated CUDA kernel shape the jobs can pick, in parallel processes,
then a small run of each job (the bundled proteins; seeded DNA genes for all-pairs), which
builds the hand-written kernels (selection, traceback, shuffles, the q-gram pre-filter)
and the CPU kernels.
"""
from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any


@dataclass
class WarmupReport:
    """What :func:`warmup` did.

    Attributes
    ----------
    device : str
        ``"gpu"`` or ``"cpu"``.
    built : list of (str, dict, float)
        CUDA kernels compiled ahead: family, shape, seconds (in its build process).
    compiled, loaded : int
        CUDA kernels this process compiled while running the jobs, and loaded from the
        cache.
    shipped : int
        Compiled CUDA kernels taken from the package instead of compiling
        (:data:`swdask.kernels.cuda.compile.SHIPPED_DIR`).
    seconds : dict
        Wall time of each step.
    """

    device: str
    built: list = field(default_factory=list)
    compiled: int = 0
    loaded: int = 0
    shipped: int = 0
    seconds: dict = field(default_factory=dict)

    def summary(self) -> str:
        """One line: what was built and how long it took."""
        steps = ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items())
        kernels = (f"{len(self.built)} CUDA kernel shapes built ahead, {self.shipped} taken "
                   f"from the package, {self.compiled} more compiled and {self.loaded} loaded "
                   "while running the jobs; " if self.device == "gpu" else "")
        return f"warmup on {self.device}: {kernels}{steps}"


def kernel_specs() -> list[tuple[str, dict[str, Any]]]:
    """``(family, shape)`` of every generated CUDA kernel the jobs launch on this GPU: the
    search kernels for the protein and DNA alphabets (the 16-bit local kernel that is the
    default, :data:`swdask.kernels.cuda.launcher.SEARCH_KERNEL`, not the other, and the
    global one), the all-pairs kernel and the long-alignment tiles."""
    from .kernels.cuda import all_pairs, inter_task, inter_task_dpx, intra_task, launcher, tile
    from .scoring import Scoring

    alphabets = sorted({Scoring().matrix.shape[0], Scoring("NUC.4.4").matrix.shape[0]})
    dpx = inter_task.has_dpx()
    scan = launcher.PACKED_FAMILIES["scan"]
    if launcher.scan_kernel(None):  # the default local search launches the scan kernel
        specs = [(scan, s) for s in launcher.inter_task_dpx_scan.shapes(alphabets)]
    else:  # and a global one its global variant, whichever is named
        specs = [("inter_task_dpx", s) for s in inter_task_dpx.shapes(alphabets)]
        specs += [(scan, s) for s in launcher.inter_task_dpx_scan.shapes(alphabets,
                                                                          modes=("global",))]
    specs += [("inter_task", s) for s in inter_task.shapes(alphabets)]
    specs += [("intra_task", s) for s in intra_task.shapes(alphabets)]
    specs += [("all_pairs", s) for s in all_pairs.shapes(dpx)]
    specs += [("tile", s) for s in tile.shapes(dpx)]
    return specs


def warmup(device: str = "auto", *, jobs: int | None = None,
           progress: Callable[[str], object] | None = None) -> WarmupReport:
    """Build the kernels of ``device`` so that later processes start without compiling.

    Parameters
    ----------
    device : {"auto", "cpu", "gpu"}, default "auto"
        ``"auto"``: the GPU when one is visible, else the CPU.
    jobs : int, optional
        Processes that compile CUDA kernels at once (default: the CPU cores).
    progress : callable, optional
        Called with a line of text after each step and each kernel built.

    Returns
    -------
    WarmupReport
    """
    from .backend import check_device

    device = check_device(device)
    say = progress or (lambda line: None)
    report = WarmupReport(device)
    data = files("swdask") / "data"
    queries, database = str(data / "demo_queries.fasta"), str(data / "demo_db.fasta.gz")
    if device == "gpu":
        from .kernels.cuda import compile as kernels

        start = time.perf_counter()
        specs = kernel_specs()
        say(f"{len(specs)} CUDA kernel shapes; building those not in {kernels.kernel_dir()}")

        def built(family, shape, seconds):
            text = " ".join(f"{k}={v}" for k, v in shape.items())
            say(f"  built {family} {text} in {seconds:.1f} s")

        shipped = kernels.STATS["shipped"]
        report.built = kernels.build(specs, jobs=jobs, progress=built)
        report.seconds["generated kernels"] = time.perf_counter() - start
        before = dict(kernels.STATS)
    start = time.perf_counter()
    from .jobs.search import search_in_process

    search_in_process(queries, database, device=device, max_hits=3)
    report.seconds["search"] = time.perf_counter() - start
    say(f"search kernels ready ({report.seconds['search']:.1f} s)")
    start = time.perf_counter()
    from .jobs.significance import significance_in_process
    from .sequences.store import load_sequences

    query, pool = load_sequences(queries), load_sequences(database)
    significance_in_process({query.names[0]: query.alphabet.decode(query.codes(0))},
                            {pool.names[k]: pool.alphabet.decode(pool.codes(k)) for k in range(3)},
                            shuffles=50, device=device)
    report.seconds["significance"] = time.perf_counter() - start
    say(f"significance kernels ready ({report.seconds['significance']:.1f} s)")
    start = time.perf_counter()
    _all_pairs(device)
    report.seconds["all-pairs"] = time.perf_counter() - start
    say(f"all-pairs kernels ready ({report.seconds['all-pairs']:.1f} s)")
    if device == "gpu":
        report.compiled = kernels.STATS["compiled"] - before["compiled"]
        report.loaded = kernels.STATS["loaded"] - before["loaded"]
        report.shipped = kernels.STATS["shipped"] - shipped
    return report


def _all_pairs(device: str) -> None:
    """A small global all-pairs run (seeded DNA genes and close mutants of them), which
    builds what the job launches besides its generated kernel: the q-gram pre-filter, the
    traceback of the candidates and the count of their columns."""
    from .jobs.allpairs import write_all_pairs
    from .scoring import Scoring
    from .testing import mutated_copy

    rng = random.Random(18)
    genes = ["".join(rng.choice("ACGT") for _ in range(300)) for _ in range(8)]
    records = genes + [mutated_copy(g, 0.02, rng) for g in genes for _ in range(3)]
    with tempfile.TemporaryDirectory(prefix="swdask-warmup-") as folder:
        fasta = Path(folder) / "genes.fasta"
        fasta.write_text("".join(f">g{k}\n{seq}\n" for k, seq in enumerate(records)))
        write_all_pairs(fasta, Path(folder) / "pairs", mode="global", min_identity=0.97,
                        scoring=Scoring(None, match=2, mismatch=-3, gap_open=5,
                                        gap_extend=2, alphabet="dna"),
                        device=device, alphabet="dna")
