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

# The kernels' own table: the order of MODES gives the mode codes the kernels take.
from .kernels.cpu.reference import MODES

__all__ = ["ALLPAIRS_MODES", "ALPHABETS", "BLAST6_COLUMNS", "BLAST_KEYWORDS", "DEVICES",
           "LONG_DEVICES", "MODES", "OUTFMTS", "OUTFMT_EXTENSIONS", "check_choice"]

#: Where a job's kernels run: ``"auto"`` decides by availability and expected time.
DEVICES = ("auto", "cpu", "gpu")
#: Long alignment can also split one pair's tiles over CPU and GPU workers at once.
LONG_DEVICES = DEVICES + ("both",)
#: All-against-all alignment: global (where the identity bound skips pairs) or local.
ALLPAIRS_MODES = ("global", "local")
#: Residue alphabets of an input; ``"auto"`` detects it from the letters.
ALPHABETS = ("auto", "protein", "dna")
#: Formats of a search's hits file.
OUTFMTS = ("parquet", "blast6", "sam")
#: The format an output's extension stands for (lower case); any other extension is Parquet's.
OUTFMT_EXTENSIONS = {".parquet": "parquet", ".pq": "parquet", ".tsv": "blast6", ".tab": "blast6",
                     ".m8": "blast6", ".blast6": "blast6", ".outfmt6": "blast6", ".sam": "sam"}
#: BLAST's 12 standard tabular columns (outfmt 6), in order: what ``std`` stands for.
BLAST6_COLUMNS = ("qseqid", "sseqid", "pident", "length", "mismatch", "gapopen", "qstart",
                  "qend", "sstart", "send", "evalue", "bitscore")
#: Every BLAST tabular keyword that ``columns=`` / ``--columns`` accepts besides ``std``.
BLAST_KEYWORDS = BLAST6_COLUMNS + ("score", "nident", "gaps", "qlen", "slen", "cigar")


def check_choice(name: str, value, allowed) -> str:
    """``value`` if it is one of ``allowed``; else a ValueError naming them all.

    Parameters
    ----------
    name : str
        What is chosen, for the message ("device", "mode").
    value : object
        The choice given.
    allowed : tuple of str
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
