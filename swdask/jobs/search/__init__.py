"""Database search: queries against a store, each query's best hits with full alignments.

- :mod:`.plan`: the arguments checked, the inputs opened, the device decided: the
  :class:`~.plan.SearchJob` every task gets, and :class:`~.plan.SearchStats`;
- :mod:`.tasks`: the score pass of a partition, the merge tree, the traceback of a batch
  of queries, and their typed statistics;
- :mod:`.api`: :func:`~.api.search` (a lazy Dask DataFrame) and
  :func:`~.api.search_in_process` (the same search here, without Dask).
"""
from .api import search, search_in_process
from .plan import SearchStats

__all__ = ["SearchStats", "search", "search_in_process"]
