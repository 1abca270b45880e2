"""All-against-all alignment of a sequence set: every pair above an identity threshold.

The job of metagenomics groups clustering or de-replicating marker genes (16S rRNA):
every unordered pair of a set whose alignment has at least ``min_identity`` identity
(Truong et al. 2014's LazyRScan workflow, here with affine gaps and any matrix).

Flow
----
1. **Work split.**  The store is sorted by length; its sequences are cut into *blocks* of
   at most ``block_size`` consecutive sequences (each a length range, inside one store
   partition).  The block pairs ``(a, b)``, ``a <= b``, form a triangle; each is one task.
   In global mode a block pair whose length ranges make an identity of ``t`` impossible
   (``identity <= shorter / longer``, see :class:`IdentityBound`) is skipped whole, and
   inside a block pair only the pairs whose lengths allow ``t`` are scored: since blocks
   are sorted by length, those of one query form one contiguous range of subjects.
2. **Pre-filter** (global mode, :mod:`.filter`).  Of those pairs, the ones whose two
   sequences share fewer q-grams than any alignment at identity ``t`` keeps are dropped
   (exact: proof in :class:`~.filter.QgramFilter`); the rest, as runs of subjects per
   query, go on.  ``prefilter=False`` / ``--no-prefilter`` scores every pair instead.
3. **Score pass.**  Exact scores of the pairs left: on the GPU by the warp-per-pair kernel
   of :mod:`swdask.kernels.cuda.all_pairs`, which filters on the device and ships back
   only passing ``(query, subject, score)`` rows; on the CPU by the SIMD kernel
   :func:`swdask.kernels.cpu.score.score_all` (queries in chunks against the union of
   their subject ranges), filtered at once.  The filter is the score bound
   ``score >= max(L(m, n), min_score)`` of :class:`IdentityBound`.
4. **Traceback** (CPU, on every core) of the pairs that pass, the exact identity of the
   reported alignment, and the rows whose identity is at least the threshold.
5. **Output.**  A lazy Dask DataFrame (:func:`all_pairs`), or one Parquet file per block
   pair written atomically, resumable (:func:`write_all_pairs`, ``swdask allpairs``).

Which alignment, which identity
-------------------------------
The reported alignment of a pair is the one the traceback kernels return for the pair's
exact optimal score (swdask's one tie rule, :mod:`swdask.kernels.cpu.reference`); its
identity is ``matches / alignment columns`` (BLAST's pident / 100, ``N``/``X`` never an
identity).  A pair is in the output when that identity is at least the threshold ``t``,
decided exactly in integers (``matches * den >= num * columns`` for ``t = num / den``)
and its score is at least ``min_score``.  The score filter and the pre-filter drop only
pairs that cannot be in the output (proofs in :class:`IdentityBound` and
:class:`~.filter.QgramFilter`), so the output is exactly what tracing every pair back and
filtering would give.  Pairs are unordered and never self pairs: the
``query`` of a row is the sequence that comes first in the store (shorter, or as long with
a smaller ``seq_id``).

References
----------
Truong, Nguyen, Hoang, Le (2014). LazyRScan, all-pairs global alignment of 16S rDNA on
GPUs with an identity cut-off (97 %).

Modules
-------
- :mod:`.plan`: the identity threshold and its score bound (:class:`IdentityBound`), the
  blocks and block pairs, the :class:`~.plan.AllPairsJob`;
- :mod:`.filter`: the q-gram pre-filter (:class:`~.filter.QgramFilter`) and the pair runs;
- :mod:`.tasks`: one block pair (score pass, traceback, identity filter) and its typed
  statistics; :class:`AllPairsStats`;
- :mod:`.output`: the resumable output folder (:func:`write_all_pairs`,
  :func:`read_all_pairs`);
- :mod:`.api`: :func:`all_pairs`, the lazy DataFrame.
"""
from .api import all_pairs
from .output import check_all_pairs_output, read_all_pairs, write_all_pairs
from .plan import ALLPAIRS_MODES, IdentityBound, as_threshold, check_allpairs_mode, check_device
from .tasks import AllPairsStats

__all__ = ["ALLPAIRS_MODES", "AllPairsStats", "IdentityBound", "all_pairs", "as_threshold",
           "check_all_pairs_output", "check_allpairs_mode", "check_device", "read_all_pairs",
           "write_all_pairs"]
