"""Bit scores and E-values of local alignment scores, as NCBI BLAST+ computes them.

Gapped scores have no closed-form statistics: BLAST uses Karlin-Altschul parameters
(lambda, K, H) and length-correction slopes (alpha, beta) that were estimated by simulation
for each matrix and pair of gap costs and published in its source, ``blast_stat.c``.  This
module carries those tables for the scorings BLAST supports and nothing else: a scoring
without a published row gets no statistics (:func:`karlin_altschul` returns ``None``),
never an extrapolated guess.

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

import numpy as np
import pandas as pd

# Gapped protein rows of blast_stat.c (<matrix>_values), one per supported (gap_open,
# gap_extend): lambda, K, H, alpha, beta, then Spouge's alpha_v and sigma (the table's
# columns 10 and 11; its decline-to-align and C columns are not used).  The row with
# gaps None is BLAST's ungapped row, whose alpha and alpha_v enter Spouge's correction.
_PROTEIN = {
    "BLOSUM45": [
        (None, None, 0.2291, 0.0924, 0.2514, 0.9113, -5.7, 9.611060, 9.611060),
        (13, 3, 0.207, 0.049, 0.14, 1.5, -22, 35.855900, 35.963900),
        (12, 3, 0.199, 0.039, 0.11, 1.8, -34, 45.693600, 45.851700),
        (11, 3, 0.190, 0.031, 0.095, 2.0, -38, 62.874100, 63.103700),
        (10, 3, 0.179, 0.023, 0.075, 2.4, -51, 88.286800, 88.639100),
        (16, 2, 0.210, 0.051, 0.14, 1.5, -24, 36.279800, 36.452400),
        (15, 2, 0.203, 0.041, 0.12, 1.7, -31, 44.825700, 45.060400),
        (14, 2, 0.195, 0.032, 0.10, 1.9, -36, 60.736200, 61.102300),
        (13, 2, 0.185, 0.024, 0.084, 2.2, -45, 85.148100, 85.689400),
        (12, 2, 0.171, 0.016, 0.061, 2.8, -65, 127.758000, 128.582000),
        (19, 1, 0.205, 0.040, 0.11, 1.9, -43, 53.071400, 53.828200),
        (18, 1, 0.198, 0.032, 0.10, 2.0, -43, 72.342400, 73.403900),
        (17, 1, 0.189, 0.024, 0.079, 2.4, -57, 103.055000, 104.721000),
        (16, 1, 0.176, 0.016, 0.063, 2.8, -67, 170.100000, 173.003000),
    ],
    "BLOSUM50": [
        (None, None, 0.2318, 0.112, 0.3362, 0.6895, -4.0, 5.388310, 5.388310),
        (13, 3, 0.212, 0.063, 0.19, 1.1, -16, 18.113800, 18.202800),
        (12, 3, 0.206, 0.055, 0.17, 1.2, -18, 22.654600, 22.777700),
        (11, 3, 0.197, 0.042, 0.14, 1.4, -25, 29.861100, 30.045700),
        (10, 3, 0.186, 0.031, 0.11, 1.7, -34, 42.393800, 42.674000),
        (9, 3, 0.172, 0.022, 0.082, 2.1, -48, 66.069600, 66.516400),
        (16, 2, 0.215, 0.066, 0.20, 1.05, -15, 17.951800, 18.092100),
        (15, 2, 0.210, 0.058, 0.17, 1.2, -20, 21.940100, 22.141800),
        (14, 2, 0.202, 0.045, 0.14, 1.4, -27, 28.681200, 28.961900),
        (13, 2, 0.193, 0.035, 0.12, 1.6, -32, 42.059500, 42.471600),
        (12, 2, 0.181, 0.025, 0.095, 1.9, -41, 63.747600, 64.397300),
        (19, 1, 0.212, 0.057, 0.18, 1.2, -21, 26.311200, 26.923300),
        (18, 1, 0.207, 0.050, 0.15, 1.4, -28, 34.903700, 35.734800),
        (17, 1, 0.198, 0.037, 0.12, 1.6, -33, 48.895800, 50.148600),
        (16, 1, 0.186, 0.025, 0.10, 1.9, -42, 76.469100, 78.443000),
        (15, 1, 0.171, 0.015, 0.063, 2.7, -76, 140.053000, 144.160000),
    ],
    "BLOSUM62": [
        (None, None, 0.3176, 0.134, 0.4012, 0.7916, -3.2, 4.964660, 4.964660),
        (11, 2, 0.297, 0.082, 0.27, 1.1, -10, 12.673800, 12.757600),
        (10, 2, 0.291, 0.075, 0.23, 1.3, -15, 16.474000, 16.602600),
        (9, 2, 0.279, 0.058, 0.19, 1.5, -19, 22.751900, 22.950000),
        (8, 2, 0.264, 0.045, 0.15, 1.8, -26, 35.483800, 35.821300),
        (7, 2, 0.239, 0.027, 0.10, 2.5, -46, 61.238300, 61.886000),
        (6, 2, 0.201, 0.012, 0.061, 3.3, -58, 140.417000, 141.882000),
        (13, 1, 0.292, 0.071, 0.23, 1.2, -11, 19.506300, 19.893100),
        (12, 1, 0.283, 0.059, 0.19, 1.5, -19, 27.856200, 28.469900),
        (11, 1, 0.267, 0.041, 0.14, 1.9, -30, 42.602800, 43.636200),
        (10, 1, 0.243, 0.024, 0.10, 2.5, -44, 83.178700, 85.065600),
        (9, 1, 0.206, 0.010, 0.052, 4.0, -87, 210.333000, 214.842000),
    ],
    "BLOSUM80": [
        (None, None, 0.3430, 0.177, 0.6568, 0.5222, -1.6, 1.918130, 1.918130),
        (25, 2, 0.342, 0.17, 0.66, 0.52, -1.6, 1.731000, 1.731300),
        (13, 2, 0.336, 0.15, 0.57, 0.59, -3, 2.673470, 2.692300),
        (9, 2, 0.319, 0.11, 0.42, 0.76, -6, 5.576090, 5.667860),
        (8, 2, 0.308, 0.090, 0.35, 0.89, -9, 7.536950, 7.686230),
        (7, 2, 0.293, 0.070, 0.27, 1.1, -14, 11.586600, 11.840400),
        (6, 2, 0.268, 0.045, 0.19, 1.4, -19, 19.958100, 20.441200),
        (11, 1, 0.314, 0.095, 0.35, 0.90, -9, 8.808610, 9.223320),
        (10, 1, 0.299, 0.071, 0.27, 1.1, -14, 13.833800, 14.533400),
        (9, 1, 0.279, 0.048, 0.20, 1.4, -19, 24.252000, 25.490400),
    ],
    "BLOSUM90": [
        (None, None, 0.3346, 0.190, 0.7547, 0.4434, -1.4, 1.377760, 1.377760),
        (9, 2, 0.310, 0.12, 0.46, 0.67, -6, 4.232290, 4.334170),
        (8, 2, 0.300, 0.099, 0.39, 0.76, -7, 5.797020, 5.961420),
        (7, 2, 0.283, 0.072, 0.30, 0.93, -11, 9.040880, 9.321600),
        (6, 2, 0.259, 0.048, 0.22, 1.2, -16, 16.024400, 16.531600),
        (11, 1, 0.302, 0.093, 0.39, 0.78, -8, 7.143250, 7.619190),
        (10, 1, 0.290, 0.075, 0.28, 1.04, -15, 11.483900, 12.269800),
        (9, 1, 0.265, 0.044, 0.20, 1.3, -19, 21.408300, 22.840900),
    ],
    "PAM250": [
        (None, None, 0.2252, 0.0868, 0.2223, 0.98, -5.0, 11.754300, 11.754300),
        (15, 3, 0.205, 0.049, 0.13, 1.6, -23, 34.578400, 34.928000),
        (14, 3, 0.200, 0.043, 0.12, 1.7, -26, 43.353000, 43.443800),
        (13, 3, 0.194, 0.036, 0.10, 1.9, -31, 50.948500, 51.081700),
        (12, 3, 0.186, 0.029, 0.085, 2.2, -41, 69.606500, 69.793600),
        (11, 3, 0.174, 0.020, 0.070, 2.5, -48, 98.653500, 98.927100),
        (17, 2, 0.204, 0.047, 0.12, 1.7, -28, 41.583800, 41.735800),
        (16, 2, 0.198, 0.038, 0.11, 1.8, -29, 51.635200, 51.843900),
        (15, 2, 0.191, 0.031, 0.087, 2.2, -44, 67.256700, 67.558500),
        (14, 2, 0.182, 0.024, 0.073, 2.5, -53, 96.315100, 96.756800),
        (13, 2, 0.171, 0.017, 0.059, 2.9, -64, 135.653000, 136.339000),
        (21, 1, 0.205, 0.045, 0.11, 1.8, -34, 48.728200, 49.218800),
        (20, 1, 0.199, 0.037, 0.10, 1.9, -35, 60.832000, 61.514100),
        (19, 1, 0.192, 0.029, 0.083, 2.3, -52, 84.019700, 84.985600),
        (18, 1, 0.183, 0.021, 0.070, 2.6, -60, 113.829000, 115.184000),
        (17, 1, 0.171, 0.014, 0.052, 3.3, -86, 175.071000, 177.196000),
    ],
    "PAM30": [
        (None, None, 0.3400, 0.283, 1.754, 0.1938, -0.3, 0.161818, 0.161818),
        (7, 2, 0.305, 0.15, 0.87, 0.35, -3, 1.014010, 1.162730),
        (6, 2, 0.287, 0.11, 0.68, 0.42, -4, 1.688060, 1.951430),
        (5, 2, 0.264, 0.079, 0.45, 0.59, -7, 3.377010, 3.871950),
        (10, 1, 0.309, 0.15, 0.88, 0.35, -3, 1.372050, 1.788770),
        (9, 1, 0.294, 0.11, 0.61, 0.48, -6, 2.463920, 3.186150),
        (8, 1, 0.270, 0.072, 0.40, 0.68, -10, 5.368130, 6.763480),
    ],
    "PAM70": [
        (None, None, 0.3345, 0.229, 1.029, 0.3250, -0.7, 0.633439, 0.633439),
        (8, 2, 0.301, 0.12, 0.54, 0.56, -5, 2.881650, 3.025710),
        (7, 2, 0.286, 0.093, 0.43, 0.67, -7, 4.534540, 4.785780),
        (6, 2, 0.264, 0.064, 0.29, 0.90, -12, 7.942630, 8.402720),
        (11, 1, 0.305, 0.12, 0.52, 0.59, -6, 3.681400, 4.108020),
        (10, 1, 0.291, 0.091, 0.41, 0.71, -9, 6.002970, 6.716570),
        (9, 1, 0.270, 0.060, 0.28, 0.97, -14, 11.360800, 12.636700),
    ],
}

# blastn rows of blast_stat.c (blastn_values_<match>_<-mismatch>): gap_open, gap_extend,
# lambda, K, H, alpha, beta.  The (0, 0) rows are for megablast's greedy, non-affine
# gap scoring, which no affine Scoring equals, so they are left out.
_BLASTN = {
    (1, -5): [(3, 3, 1.39, 0.747, 1.38, 1.00, 0)],
    (1, -4): [(1, 2, 1.36, 0.67, 1.2, 1.1, 0), (0, 2, 1.26, 0.43, 0.90, 1.4, -1),
              (2, 1, 1.35, 0.61, 1.1, 1.2, -1), (1, 1, 1.22, 0.35, 0.72, 1.7, -3)],
    (2, -7): [(2, 4, 0.68, 0.67, 1.2, 0.55, 0), (0, 4, 0.63, 0.43, 0.90, 0.7, -1),
              (4, 2, 0.675, 0.62, 1.1, 0.6, -1), (2, 2, 0.61, 0.35, 0.72, 1.7, -3)],
    (1, -3): [(2, 2, 1.37, 0.70, 1.2, 1.1, 0), (1, 2, 1.35, 0.64, 1.1, 1.2, -1),
              (0, 2, 1.25, 0.42, 0.83, 1.5, -2), (2, 1, 1.34, 0.60, 1.1, 1.2, -1),
              (1, 1, 1.21, 0.34, 0.71, 1.7, -2)],
    (2, -5): [(2, 4, 0.67, 0.59, 1.1, 0.6, -1), (0, 4, 0.62, 0.39, 0.78, 0.8, -2),
              (4, 2, 0.67, 0.61, 1.0, 0.65, -2), (2, 2, 0.56, 0.32, 0.59, 0.95, -4)],
    (1, -2): [(2, 2, 1.33, 0.62, 1.1, 1.2, 0), (1, 2, 1.30, 0.52, 0.93, 1.4, -2),
              (0, 2, 1.19, 0.34, 0.66, 1.8, -3), (3, 1, 1.32, 0.57, 1.0, 1.3, -1),
              (2, 1, 1.29, 0.49, 0.92, 1.4, -1), (1, 1, 1.14, 0.26, 0.52, 2.2, -5)],
    (2, -3): [(4, 4, 0.63, 0.42, 0.84, 0.75, -2), (2, 4, 0.615, 0.37, 0.72, 0.85, -3),
              (0, 4, 0.55, 0.21, 0.46, 1.2, -5), (3, 3, 0.615, 0.37, 0.68, 0.9, -3),
              (6, 2, 0.63, 0.42, 0.84, 0.75, -2), (5, 2, 0.625, 0.41, 0.78, 0.8, -2),
              (4, 2, 0.61, 0.35, 0.68, 0.9, -3), (2, 2, 0.515, 0.14, 0.33, 1.55, -9)],
    (3, -4): [(6, 3, 0.389, 0.25, 0.56, 0.7, -5), (5, 3, 0.375, 0.21, 0.47, 0.8, -6),
              (4, 3, 0.351, 0.14, 0.35, 1.0, -9), (6, 2, 0.362, 0.16, 0.45, 0.8, -4),
              (5, 2, 0.330, 0.092, 0.28, 1.2, -13), (4, 2, 0.281, 0.046, 0.16, 1.8, -23)],
    (4, -5): [(6, 5, 0.28, 0.21, 0.47, 0.6, -7), (5, 5, 0.27, 0.17, 0.39, 0.7, -9),
              (4, 5, 0.25, 0.10, 0.31, 0.8, -10), (3, 5, 0.23, 0.065, 0.25, 0.9, -11)],
    (1, -1): [(3, 2, 1.09, 0.31, 0.55, 2.0, -2), (2, 2, 1.07, 0.27, 0.49, 2.2, -3),
              (1, 2, 1.02, 0.21, 0.36, 2.8, -6), (0, 2, 0.80, 0.064, 0.17, 4.8, -16),
              (4, 1, 1.08, 0.28, 0.54, 2.0, -2), (3, 1, 1.06, 0.25, 0.46, 2.3, -4),
              (2, 1, 0.99, 0.17, 0.30, 3.3, -10)],
    (3, -2): [(5, 5, 0.208, 0.030, 0.072, 2.9, -47)],
    (5, -4): [(10, 6, 0.163, 0.068, 0.16, 1.0, -19), (8, 6, 0.146, 0.039, 0.11, 1.3, -29)],
}
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


def karlin_altschul(scoring) -> KarlinAltschul | None:
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


def bitscore(score, params: KarlinAltschul):
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


def evalue(score, params: KarlinAltschul, query_length, db_residues: int, db_sequences: int,
           *, subject_length=None):
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


def annotate(hits: pd.DataFrame, scoring, *, db_residues: int, db_sequences: int) -> pd.DataFrame:
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
        ``bitscore`` and ``evalue`` as nullable ``Float64``; null when BLAST publishes no
        parameters for ``scoring``.

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
        out["bitscore"] = pd.array([pd.NA] * len(out), dtype="Float64")
        out["evalue"] = pd.array([pd.NA] * len(out), dtype="Float64")
        return out
    score = out["score"].to_numpy(dtype=np.int64)
    subject_length = (out["subject_length"].to_numpy(dtype=np.int64)
                      if params.spouge is not None else None)
    out["bitscore"] = pd.array(bitscore(score, params), dtype="Float64")
    out["evalue"] = pd.array(
        evalue(score, params, out["query_length"].to_numpy(dtype=np.int64), db_residues,
               db_sequences, subject_length=subject_length), dtype="Float64")
    return out
