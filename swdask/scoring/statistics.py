"""Bit scores and E-values of local alignment scores, as NCBI BLAST+ computes them.

Gapped scores have no closed-form statistics: BLAST uses Karlin-Altschul parameters
(lambda, K, H) and length-correction slopes (alpha, beta) that were estimated by simulation
for each matrix and pair of gap costs and published in its source, ``blast_stat.c``.  This
module reads those tables, for the scorings BLAST supports and nothing else, from the
package's data file ``data/blast_gapped_params.tsv`` (its header gives their source and
columns): a scoring without a published row gets no statistics (:func:`karlin_altschul`
returns ``None``), never an extrapolated guess.

Gap costs here are BLAST's (a gap of ``k`` costs ``gap_open + k * gap_extend``), so the
tables are keyed on :class:`~swdask.scoring.Scoring`'s ``gap_open`` and ``gap_extend``
as they are.

What BLAST+ does, and therefore what :func:`evalue` does:

- bit score ``(lambda * S - ln K) / ln 2`` from the raw score, for every program;
- blastn: ``E = K * m' * n' * exp(-lambda * S)`` on the length-adjusted search space
  (query ``m' = m - l``, database ``n' = n - N * l``; ``l`` from
  ``BLAST_ComputeLengthAdjustment``).  For 2/-3, 2/-5, 2/-7 and 3/-4 the score is first
  rounded down to even, as their table rows are only valid for even scores;
- gapped protein search (blastp): Spouge's finite-size correction, which uses the
  subject's length instead of the length adjustment (``BLAST_SpougeStoE``; BLAST+ skips
  it only for blastn, or when the ``OLD_FSC`` environment variable is set).  Without a
  subject length, :func:`evalue` falls back to the Karlin-Altschul formula above.

Checked against BLAST+ 2.12.0 (blastp ``-comp_based_stats 0 -seg no``, blastn ``-task
blastn -dust no``) for every combination in the tables: same lambda, K, H, length
adjustment and search space, and E-values and bit scores to the 6 digits it prints.

Composition-based statistics (blastp's default ``-comp_based_stats 2``) rescale lambda for
each subject from its residue composition; they are not reproduced: compare with
``blastp -comp_based_stats 0``.

References
----------
.. [1] Karlin S, Altschul SF. Methods for assessing the statistical significance of
   molecular sequence features by using general scoring schemes. PNAS 87:2264 (1990).
.. [2] Altschul SF, Bundschuh R, Olsen R, Hwa T. The estimation of statistical parameters
   for local alignment score distributions. Nucleic Acids Res 29:351 (2001).
.. [3] Park Y, Sheetlin S, Ma N, Madden TL, Spouge JL. New finite-size correction for
   local alignment score distributions. BMC Res Notes 5:286 (2012).
.. [4] NCBI C++ Toolkit, ``src/algo/blast/core/blast_stat.c`` (tables,
   ``BLAST_ComputeLengthAdjustment``, ``BLAST_SpougeStoE``), ``blast_setup.c``
   (``BLAST_CalcEffLengths``) and ``blast_hits.c`` (``Blast_HSPListGetEvalues``).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from importlib.resources import files
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt
    import pandas as pd

    from . import Scoring


def _read_tables(name: str = "blast_gapped_params.tsv") -> tuple[dict, dict]:
    """BLAST's tables, from the package's data file (its header gives their source).

    Returns the protein rows by matrix name (``blosum62_values`` -> ``"BLOSUM62"``) and the
    blastn rows by ``(match, mismatch)`` (``blastn_values_2_3`` -> ``(2, -3)``), each row a
    tuple ``(gap_open, gap_extend, lambda, K, H, alpha, beta[, alpha_v, sigma])`` in the
    file's order; the ungapped protein rows have gap costs None.
    """
    protein, blastn = {}, {}
    lines = (files("swdask") / "data" / name).read_text().splitlines()
    rows = [line.split("\t") for line in lines if line and not line.startswith("#")]
    for table, *values in rows[1:]:  # rows[0] names the columns
        row = tuple(None if v == "-" else int(v) for v in values[:2])
        row += tuple(float(v) for v in values[2:] if v != "-")
        if table.startswith("blastn_values_"):
            reward, penalty = table.removeprefix("blastn_values_").split("_")
            blastn.setdefault((int(reward), -int(penalty)), []).append(row)
        else:
            protein.setdefault(table.removesuffix("_values").upper(), []).append(row)
    return protein, blastn


# Gapped protein rows by matrix: gap_open, gap_extend, lambda, K, H, alpha, beta, then
# Spouge's alpha_v and sigma; the first row, gaps None, is BLAST's ungapped row, whose
# alpha and alpha_v enter Spouge's correction.  blastn rows by (match, mismatch):
# gap_open, gap_extend, lambda, K, H, alpha, beta.  Read once, with the module (~2 ms).
_PROTEIN, _BLASTN = _read_tables()

# Pairs whose rows hold for even scores only (s_GetNuclValuesArray sets round_down).
_ROUND_DOWN = {(2, -7), (2, -5), (2, -3), (3, -4)}


@dataclass(frozen=True)
class Spouge:
    """Spouge's finite-size correction terms of one gapped protein scoring.

    ``a * S + b`` is the mean alignment length of a score ``S`` alignment,
    ``alpha_v * S + beta_v`` its variance and ``sigma * S + tau`` the covariance of its
    two lengths; the ``b``, ``beta_v`` and ``tau`` intercepts follow from the gapped and
    ungapped slopes and the cost of a one-residue gap (``Blast_GumbelBlkLoadFromTables``).
    """

    a: float
    b: float
    alpha_v: float
    beta_v: float
    sigma: float
    tau: float


@dataclass(frozen=True)
class KarlinAltschul:
    """Published statistical parameters of one scoring (a row of BLAST's tables).

    Attributes
    ----------
    lambda_, k, h : float
        Karlin-Altschul lambda (per score unit), K and relative entropy H (nats per pair).
    alpha, beta : float
        An alignment of score ``S`` is about ``alpha * S + beta`` pairs long; the length
        adjustment (and Spouge's correction) subtract that from the sequence lengths.
    source : str
        The table and row the numbers come from.
    round_down : bool
        E-values of odd scores are computed from the even score below (some blastn pairs).
    spouge : Spouge or None
        Finite-size correction terms; protein matrices only.
    """

    lambda_: float
    k: float
    h: float
    alpha: float
    beta: float
    source: str
    round_down: bool = False
    spouge: Spouge | None = field(default=None, repr=False)


def karlin_altschul(scoring: Scoring) -> KarlinAltschul | None:
    """The published gapped Karlin-Altschul parameters of a scoring, or None.

    Protein scorings are looked up by matrix name (one of BLAST's BLOSUM45/50/62/80/90,
    PAM30/70/250; a matrix read from a file or passed as an array has none) and gap costs.
    DNA scorings are looked up by the match and mismatch scores of their ``ACGT`` block,
    reduced by their greatest common divisor as BLAST does (4/-6 uses the 2/-3 rows,
    lambda halved, gap costs doubled), so ``NUC.4.4`` finds the 5/-4 rows.

    Parameters
    ----------
    scoring : Scoring

    Returns
    -------
    KarlinAltschul or None
        None when BLAST publishes no gapped parameters for this matrix and gap costs.

    Examples
    --------
    >>> from swdask.scoring import Scoring
    >>> karlin_altschul(Scoring())
    KarlinAltschul(lambda_=0.267, k=0.041, h=0.14, alpha=1.9, beta=-30.0,
                   source='blast_stat.c blosum62_values, gaps 11/1', round_down=False)
    >>> karlin_altschul(Scoring(alphabet="dna")).source
    'blast_stat.c blastn_values_2_3, gaps 5/2'
    >>> karlin_altschul(Scoring(gap_open=3, gap_extend=3)) is None
    True
    """
    gaps = (scoring.gap_open, scoring.gap_extend)
    if scoring.alphabet.name == "protein":
        rows = _PROTEIN.get(scoring.name)
        row = _find(rows, gaps)
        if row is None:
            return None
        ungapped = rows[0]
        g = scoring.gap_open + scoring.gap_extend  # cost of a one-residue gap
        lambda_, k, h, alpha, beta, alpha_v, sigma = row[2:]
        spouge = Spouge(a=alpha, b=2 * g * (ungapped[5] - alpha), alpha_v=alpha_v,
                        beta_v=2 * g * (ungapped[7] - alpha_v), sigma=sigma,
                        tau=2 * g * (ungapped[7] - sigma))
        source = f"blast_stat.c {scoring.name.lower()}_values, gaps {gaps[0]}/{gaps[1]}"
        return KarlinAltschul(*map(float, (lambda_, k, h, alpha, beta)), source, spouge=spouge)
    pair = _match_mismatch(scoring.matrix)
    if pair is None:
        return None
    divisor = math.gcd(*pair)
    base = (pair[0] // divisor, pair[1] // divisor)
    # BLAST scales a table row to a multiple of its scores: gap costs up, lambda and alpha down.
    rows = [(o * divisor, e * divisor, lam / divisor, k, h, alpha / divisor, beta)
            for o, e, lam, k, h, alpha, beta in _BLASTN.get(base, [])]
    row = _find(rows, gaps)
    if row is None:
        return None
    source = f"blast_stat.c blastn_values_{base[0]}_{-base[1]}, gaps {gaps[0]}/{gaps[1]}"
    if divisor > 1:
        source += f" (scores scaled by {divisor})"
    return KarlinAltschul(*map(float, row[2:]), source=source, round_down=base in _ROUND_DOWN)


def _find(rows, gaps):
    return next((row for row in rows or () if row[:2] == gaps), None)


def _match_mismatch(matrix):
    """(match, mismatch) when the ACGT block scores that way, else None."""
    block = np.asarray(matrix)[:4, :4]
    match, mismatch = int(block[0, 0]), int(block[0, 1])
    expected = np.where(np.eye(4, dtype=bool), match, mismatch)
    return (match, mismatch) if np.array_equal(block, expected) and mismatch < 0 < match else None


def bitscore(score: npt.ArrayLike, params: KarlinAltschul) -> float | np.ndarray:
    """Bit score ``(lambda * S - ln K) / ln 2`` of raw scores.

    Parameters
    ----------
    score : int or array_like of int
    params : KarlinAltschul

    Returns
    -------
    float or numpy.ndarray
        Of the shape of ``score``.

    Examples
    --------
    >>> from swdask.scoring import Scoring
    >>> round(bitscore(36, karlin_altschul(Scoring())), 4)  # blastp 2.12.0 says 18.4754
    18.4754
    >>> bitscore([36, 37], karlin_altschul(Scoring())).round(2)
    array([18.48, 18.86])
    """
    bits = (params.lambda_ * np.asarray(score, dtype=np.float64) - math.log(params.k)) / math.log(2)
    return float(bits) if bits.ndim == 0 else bits


def length_adjustment(params: KarlinAltschul, query_length: int, db_residues: int,
                      db_sequences: int) -> int:
    """BLAST's length adjustment ``l``: the whole part of the fixed point of
    ``l = alpha / lambda * ln(K * (m - l) * (n - N * l)) + beta``.

    ``m`` is the query length, ``n`` the database residues and ``N`` its sequences.  The
    iteration, its bounds and its 20 steps are those of ``BLAST_ComputeLengthAdjustment``,
    so that the result matches BLAST's "Length adjustment" even where it has not converged.

    Examples
    --------
    >>> from swdask.scoring import Scoring
    >>> length_adjustment(karlin_altschul(Scoring()), 50, 171138, 400)  # as blastp 2.12.0
    24
    """
    m, n, big_n = float(query_length), float(db_residues), float(db_sequences)
    k, log_k = params.k, math.log(params.k)
    slope = params.alpha / params.lambda_
    # Largest l with K (m - l)(n - N l) > max(m, n): the search space must stay non-trivial.
    c = n * m - max(m, n) / k
    if c < 0:
        return 0
    b = m * big_n + n
    ell_max = 2 * c / (b + math.sqrt(b * b - 4 * big_n * c))
    ell_min, ell_next, converged = 0.0, 0.0, False
    for i in range(1, 21):
        ell = ell_next
        ell_bar = slope * (log_k + math.log((m - ell) * (n - big_n * ell))) + params.beta
        if ell_bar >= ell:  # ell is at or below the fixed point
            ell_min = ell
            if ell_bar - ell_min <= 1.0:
                converged = True
                break
            if ell_min == ell_max:
                break
        else:
            ell_max = ell
        if ell_min <= ell_bar <= ell_max:
            ell_next = ell_bar
        else:
            ell_next = ell_max if i == 1 else (ell_min + ell_max) / 2
    if not converged:
        return int(ell_min)
    # floor(ell_min) is the answer unless ceil(ell_min) is still below the fixed point.
    ceil = math.ceil(ell_min)
    if ceil <= ell_max:
        ss = (m - ceil) * (n - big_n * ceil)
        if slope * (log_k + math.log(ss)) + params.beta >= ceil:
            return int(ceil)
    return int(ell_min)


def evalue(score: npt.ArrayLike, params: KarlinAltschul, query_length: npt.ArrayLike,
           db_residues: int, db_sequences: int, *,
           subject_length: npt.ArrayLike | None = None) -> float | np.ndarray:
    """Expected number of chance hits scoring at least ``score`` in the whole database.

    Parameters
    ----------
    score : int or array_like of int
        Raw local alignment scores.
    params : KarlinAltschul
    query_length : int or array_like of int
        Query lengths, broadcast against ``score``.
    db_residues, db_sequences : int
        Residues and sequences in the database searched.
    subject_length : int or array_like of int, optional
        Subject lengths.  With them, protein parameters get Spouge's finite-size
        correction, as BLAST+'s gapped blastp; without them, or for DNA, the
        Karlin-Altschul formula on the length-adjusted search space, as blastn.

    Returns
    -------
    float or numpy.ndarray
        Of the broadcast shape of the inputs.

    Raises
    ------
    ValueError
        ``db_residues`` or ``db_sequences`` below 1.

    Notes
    -----
    Karlin-Altschul: ``E = K (m - l)(n - N l) exp(-lambda S)`` with ``l`` from
    :func:`length_adjustment` (``BLAST_CalcEffLengths``); scores are first rounded down to
    even where ``params.round_down``.  Spouge: ``E = K exp(-lambda S) * area(S, m, s)
    * n / s``, where ``area`` is the expected product of the lengths left to start an
    alignment of score ``S`` in a query of length ``m`` and a subject of length ``s``
    (``BLAST_SpougeStoE``).

    Examples
    --------
    >>> from swdask.scoring import Scoring
    >>> params = karlin_altschul(Scoring())
    >>> print(f"{evalue(36, params, 50, 171138, 400, subject_length=644):.5f}")  # blastp 6.72559
    6.72559
    >>> print(f"{evalue(36, params, 50, 171138, 400):.4f}")  # K(50-24)(171138-400*24)e^(-.267*36)
    11.5237
    """
    if db_residues < 1 or db_sequences < 1:
        raise ValueError(f"need a database of at least one residue and one sequence, got "
                         f"{db_residues} residues in {db_sequences} sequences")
    s = np.asarray(score, dtype=np.float64)
    m = np.asarray(query_length, dtype=np.float64)
    if subject_length is not None and params.spouge is not None:
        e = _spouge(s, params, m, np.asarray(subject_length, dtype=np.float64), db_residues)
    else:
        if params.round_down:
            s = np.floor(s / 2) * 2
        lengths, where = np.unique(m, return_inverse=True)
        ell = np.array([length_adjustment(params, int(q), db_residues, db_sequences)
                        for q in lengths], dtype=np.float64)[where].reshape(m.shape)
        space = (db_residues - db_sequences * ell) * (m - ell)
        e = space * params.k * np.exp(-params.lambda_ * s)
    return float(e) if e.ndim == 0 else e


_normal_cdf = np.frompyfunc(lambda x: 0.5 * math.erfc(-x / math.sqrt(2.0)), 1, 1)


def _spouge(s, params, m, n, db_residues):
    g, lam = params.spouge, params.lambda_

    def room(length):
        # E[length left for an alignment of score s to start], lengths ~ Normal(mean, var).
        mean_left = length - (g.a * s + g.b)
        sd = np.sqrt(np.maximum(2 * g.alpha_v / lam, g.alpha_v * s + g.beta_v))
        z = mean_left / sd
        p = np.asarray(_normal_cdf(z), dtype=np.float64)
        return mean_left * p + sd * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi), p

    p1, pm = room(m)
    p2, pn = room(n)
    covariance = np.maximum(2 * g.sigma / lam, g.sigma * s + g.tau)
    area = p1 * p2 + covariance * pm * pn
    return area * params.k * np.exp(-lam * s) * (db_residues / n)


def annotate(hits: pd.DataFrame, scoring: Scoring, *, db_residues: int,
             db_sequences: int) -> pd.DataFrame:
    """A copy of a hits table with ``bitscore`` and ``evalue`` filled in, as BLAST+ would.

    Parameters
    ----------
    hits : pandas.DataFrame
        Columns ``score`` and ``query_length``, and ``subject_length`` for protein
        scorings (schema ``swdask.parquet_schemas.HITS``).
    scoring : Scoring
        The scoring the hits were found with.
    db_residues, db_sequences : int
        Residues and sequences of the whole database searched (not of one partition).

    Returns
    -------
    pandas.DataFrame
        ``bitscore`` and ``evalue`` as ``float64`` (swdask's dtype of a float column,
        :func:`swdask.tables.pandas_dtype`); NaN (null) when BLAST publishes no parameters
        for ``scoring``.

    Warns
    -----
    UserWarning
        Once, when BLAST publishes no parameters for ``scoring``: the columns stay null.

    Examples
    --------
    >>> import pandas as pd
    >>> from swdask.scoring import Scoring
    >>> hits = pd.DataFrame({"score": [36, 28], "query_length": 50, "subject_length": 644})
    >>> annotate(hits, Scoring(), db_residues=171138, db_sequences=400).round(4)
       score  query_length  subject_length  bitscore   evalue
    0     36            50             644   18.4754   6.7256
    1     28            50             644   15.3938  94.0409
    """
    out = hits.copy()
    params = karlin_altschul(scoring)
    if params is None:
        warnings.warn(f"no published Karlin-Altschul parameters for {scoring.name} with gap costs "
                      f"{scoring.gap_open}/{scoring.gap_extend}; E-values left empty",
                      UserWarning, stacklevel=2)
        out["bitscore"] = np.full(len(out), np.nan)
        out["evalue"] = np.full(len(out), np.nan)
        return out
    score = out["score"].to_numpy(dtype=np.int64)
    subject_length = (out["subject_length"].to_numpy(dtype=np.int64)
                      if params.spouge is not None else None)
    out["bitscore"] = np.asarray(bitscore(score, params), dtype=np.float64)
    out["evalue"] = np.asarray(
        evalue(score, params, out["query_length"].to_numpy(dtype=np.int64), db_residues,
               db_sequences, subject_length=subject_length), dtype=np.float64)
    return out
