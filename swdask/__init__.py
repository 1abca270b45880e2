"""swdask: exact Smith-Waterman / Needleman-Wunsch sequence alignment, fast, scaled with Dask.

Main entry points:

- :func:`ingest` FASTA/FASTQ into a Parquet sequence store;
- :func:`search` queries against a database (store or FASTA): a lazy Dask DataFrame of
  hits; :func:`search_in_process` the same search in this process, without Dask;
- :func:`cluster` a Dask client: GPU or CPU workers here, or a running scheduler;
- :func:`align` one pair, with the full alignment; :func:`align_long` two long sequences
  (megabases) as a Dask DAG of tiles on CPU and GPU workers;
- :func:`all_pairs` every pair of a set above an identity threshold (metagenomics);
- :func:`significance` P-values of pairs from shuffled subjects (PSSE);
- :class:`Scoring` for matrices and gap penalties (a gap of k costs open + k * extend).

The names are imported on first use: ``import swdask`` (and the command line, which
imports it) loads neither pandas, Dask nor Numba until a command needs them.
"""
from __future__ import annotations

import importlib
import sys
import types

__version__ = "0.1.0"

#: Where each public name lives.
_EXPORTS = {
    "Alignment": "jobs.align", "align": "jobs.align",
    "AllPairsStats": "jobs.allpairs", "all_pairs": "jobs.allpairs",
    "read_all_pairs": "jobs.allpairs", "write_all_pairs": "jobs.allpairs",
    "cluster": "cluster", "gpu_resources": "cluster",
    "SwdaskError": "errors",
    "LongAlignment": "jobs.long_align", "align_long": "jobs.long_align",
    "write_hits": "output",
    "Scoring": "scoring",
    "SearchStats": "jobs.search", "search": "jobs.search", "search_in_process": "jobs.search",
    "significance": "jobs.significance", "significance_in_process": "jobs.significance",
    "SequenceBatch": "sequences.batch", "SequenceStore": "sequences.store",
    "ingest": "sequences.ingest", "load_sequences": "sequences.store",
}

__all__ = sorted(_EXPORTS, key=str.lower) + ["__version__"]


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'swdask' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


class _Package(types.ModuleType):
    """The ``swdask`` module: ``swdask.cluster`` stays the function once ``swdask.cluster``
    the module is imported (as eager imports of the functions used to leave it).

    The import system binds a submodule to its package's attribute on first import; for a
    public name that is also a submodule's name (``cluster``; the jobs' functions live in
    ``swdask.jobs``, whose modules bind there) that binding is skipped, and the module
    stays in ``sys.modules``.
    """

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and name in _EXPORTS:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
