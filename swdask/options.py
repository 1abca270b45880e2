"""The one table of choices (devices, modes, alphabets, output formats), and the one check
of a choice.

Every job, the cluster helper and the command line take their choices from here, so a new
device or mode is added once and every error names the same allowed values.  The module
imports nothing heavy: the command line builds its ``--help`` from it.

Examples
--------
>>> check_choice("device", "gpu", DEVICES)
'gpu'
>>> check_choice("device", "tpu", DEVICES)
Traceback (most recent call last):
...
ValueError: unknown device 'tpu'; choose one of: auto, cpu, gpu
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# The kernels' own table: the order of MODES gives the mode codes the kernels take.
from .kernels.cpu.reference import MODES

__all__ = ["ALLPAIRS_MODES", "ALPHABETS", "BINARY_OUTFMTS", "BLAST6_COLUMNS", "BLAST_KEYWORDS",
           "DEVICES", "LOG_LEVELS", "LONG_DEVICES", "MAX_HITS", "MODES", "OUTFMTS",
           "OUTFMT_EXTENSIONS", "SEQUENCE_KEYWORDS", "STRANDS", "TUNABLES", "check_choice",
           "check_strand", "tunable"]

#: Where a job's kernels run: ``"auto"`` decides by availability and expected time.
DEVICES = ("auto", "cpu", "gpu")
#: Long alignment can also split one pair's tiles over CPU and GPU workers at once.
LONG_DEVICES = DEVICES + ("both",)
#: All-against-all alignment: global (where the identity bound skips pairs) or local.
ALLPAIRS_MODES = ("global", "local")
#: Residue alphabets of an input; ``"auto"`` detects it from the letters.
ALPHABETS = ("auto", "protein", "dna")
#: Strands of a DNA search's queries (blastn's ``-strand``): the query as given (``plus``),
#: its reverse complement (``minus``), or both, the default for DNA.  Protein: ``plus`` only.
STRANDS = ("both", "plus", "minus")
#: Hits kept per query by default: BLAST+'s ``-max_target_seqs`` default.  A search reports
#: how many queries reached it (``SearchStats.queries_at_max_hits``).
MAX_HITS = 500
#: Levels of ``swdask --log-level`` (the standard library's ``logging`` levels).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: Formats of a search's hits file (``bam`` needs pysam: the ``[bam]`` extra).
OUTFMTS = ("parquet", "blast6", "sam", "bam")
#: The format an output's extension stands for (lower case); any other extension is Parquet's.
OUTFMT_EXTENSIONS = {".parquet": "parquet", ".pq": "parquet", ".tsv": "blast6", ".tab": "blast6",
                     ".m8": "blast6", ".blast6": "blast6", ".outfmt6": "blast6", ".sam": "sam",
                     ".bam": "bam"}
#: Formats that do not go to the standard output (binary).
BINARY_OUTFMTS = ("parquet", "bam")
#: BLAST's 12 standard tabular columns (outfmt 6), in order: what ``std`` stands for.
BLAST6_COLUMNS = ("qseqid", "sseqid", "pident", "length", "mismatch", "gapopen", "qstart",
                  "qend", "sstart", "send", "evalue", "bitscore")
#: BLAST tabular keywords computed from the residues: the writer needs the queries and the
#: database searched (and the scoring, for positives).
SEQUENCE_KEYWORDS = ("positive", "ppos", "qseq", "sseq", "btop")
#: Every BLAST tabular keyword that ``columns=`` / ``--columns`` accepts besides ``std``.
BLAST_KEYWORDS = BLAST6_COLUMNS + ("score", "nident", "gaps", "qlen", "slen", "cigar", "sstrand",
                                   "qcovs", "qcovhsp") + SEQUENCE_KEYWORDS


def check_choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    """``value`` if it is one of ``allowed``; else a ValueError naming them all.

    Parameters
    ----------
    name : str
        What is chosen, for the message ("device", "mode").
    value : object
        The choice given.
    allowed : sequence of str
        The allowed values, in the order the message lists them.

    Returns
    -------
    str
        ``value``, unchanged.

    Raises
    ------
    ValueError
        ``value`` is not one of ``allowed``.
    """
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")
    return value


def check_strand(strand: str | None, alphabet: str | None = None) -> str | None:
    """The strands a search takes: ``strand`` checked, and, once the ``alphabet`` of the
    queries is known, its default (``"both"`` for DNA) or its refusal (protein has one).

    Parameters
    ----------
    strand : {"both", "plus", "minus"} or None
        As given; None for the default.
    alphabet : {"protein", "dna"}, optional
        The queries' alphabet; without it only the name is checked.

    Returns
    -------
    str or None
        ``strand``, or with ``alphabet`` its default: ``"both"`` for DNA, ``"plus"`` for
        protein.

    Raises
    ------
    ValueError
        ``strand`` is not one of :data:`STRANDS`, or is ``"both"``/``"minus"`` for protein.

    Examples
    --------
    >>> check_strand(None, "dna"), check_strand("minus", "dna"), check_strand(None, "protein")
    ('both', 'minus', 'plus')
    >>> check_strand("both", "protein")
    Traceback (most recent call last):
    ...
    ValueError: strand 'both' applies to DNA; a protein search has one strand (plus)
    """
    if strand is not None:
        check_choice("strand", strand, STRANDS)
    if alphabet is None:
        return strand
    if alphabet != "dna":
        if strand not in (None, "plus"):
            raise ValueError(f"strand {strand!r} applies to DNA; a {alphabet} search has one "
                             "strand (plus)")
        return "plus"
    return strand or "both"
#: Tunables read through Dask's configuration as ``swdask.NAME`` (a Dask YAML file such as
#: ``~/.config/dask/swdask.yaml``, the environment: ``DASK_SWDASK__SCHEDULER_TIMEOUT=30s``,
#: or ``dask.config.set``), and their defaults.
TUNABLES = {
    # How long a scheduler given by address (--scheduler) has to answer: connecting, the
    # handshake, the first reply.  Dask's own connect waits 30 s and its handshake forever.
    "scheduler-timeout": "10s",
    # How many more times the scheduler runs a kernel task that raised.  Kernel tasks are
    # pure (swdask.backend.KernelTask), so running one again is safe; a task whose worker
    # died is rerun by Dask itself (distributed.scheduler.allowed-failures, 3).  Read once
    # per scheduler, when swdask's routing is installed on it.
    "task-retries": 1,
    # How often a command whose standard error is not a terminal (a log file, a pipe, a batch
    # job) prints its one-line progress: done, rate and time left.  On a terminal a bar
    # redraws itself instead.
    "progress-interval": "10s",
    # The q-gram length of the all-pairs pre-filter (swdask.jobs.allpairs.filter); None: by
    # alphabet (DNA 7, protein 4, measured in docs/allpairs.md).  Results never change,
    # only how many pairs the filter drops.
    "allpairs-qgram": None,
    # Width of the token vectors of the all-pairs q-gram screen (one matrix product per block
    # pair before the exact count; swdask.jobs.allpairs.filter.SCREEN_BUCKETS); None: that
    # default, 0: no screen.  Results never change, only the time.
    "allpairs-screen-buckets": None,
    # Where a GPU run's all-pairs pre-filter counts: "gpu" (with the score pass) or "cpu"
    # (the host's cores, while the GPU scores the previous block pair); for measuring.
    "allpairs-filter-device": "gpu",
}


def tunable(name: str) -> Any:
    """The value of the tunable ``swdask.NAME`` (see :data:`TUNABLES`).

    Parameters
    ----------
    name : str
        A key of :data:`TUNABLES`.

    Returns
    -------
    object
        The configured value (as Dask's configuration holds it: a string such as
        ``"10s"``, a number), else the default in :data:`TUNABLES`.

    Examples
    --------
    >>> import dask
    >>> with dask.config.set({"swdask.task-retries": 3}):
    ...     tunable("task-retries")
    3
    """
    import dask.config

    return dask.config.get(f"swdask.{name}", default=TUNABLES[name])
