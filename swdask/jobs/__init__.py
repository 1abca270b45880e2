"""The jobs: database search, all-against-all, pairwise significance, long alignment, and
one pair.

Each job is planned once where it is called (:class:`swdask.jobs.base.Job`), runs as
tasks (on Dask, or in this process), and adds up its tasks' typed statistics.  No job
imports another job's private names; what they share is in :mod:`swdask.jobs.base` and
:mod:`swdask.backend`.
"""
