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
"""
__version__ = "0.1.0"

from .align import Alignment, align  # noqa: E402
from .allpairs import AllPairsStats, all_pairs, read_all_pairs, write_all_pairs  # noqa: E402
from .cluster import cluster, gpu_resources  # noqa: E402
from .errors import SwdaskError  # noqa: E402
from .long_align import LongAlignment, align_long  # noqa: E402
from .output import write_hits  # noqa: E402
from .scoring import Scoring  # noqa: E402
from .search import SearchStats, search, search_in_process  # noqa: E402
from .significance import significance, significance_in_process  # noqa: E402
from .store import SequenceBatch, SequenceStore, ingest, load_sequences  # noqa: E402

__all__ = ["AllPairsStats", "Alignment", "LongAlignment", "Scoring", "SearchStats",
           "SequenceBatch", "SequenceStore", "SwdaskError", "align", "align_long", "all_pairs",
           "cluster", "gpu_resources", "ingest", "load_sequences", "read_all_pairs", "search",
           "search_in_process", "significance", "significance_in_process", "write_all_pairs",
           "write_hits", "__version__"]
