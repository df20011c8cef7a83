"""Statistics of an experiment: mean and spread over folds, the paired t-test per query, and
the adjustment of p-values for comparing many methods against one baseline.

The SoftRank paper (Taylor et al., WSDM 2008, section 5) calls a difference significant under a
paired t-test at the 5% level, pairing the two systems' metric values query by query. Here the
pairs are the per-query test values of two methods on the same (dataset, fold, query); a query scored by
one method only, or skipped (NaN) by the convention, is left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from smoothrank.errors import SmoothrankError

__all__ = ["CORRECTIONS", "TTest", "adjust_pvalues", "fold_mean_standard_error", "mean_std", "paired_ttest"]

# Metric differences below this are rounding noise (metrics live in [0, 1]): a spread this small
# is a constant difference, not a distribution.
_CONSTANT = 1e-12


@dataclass(frozen=True)
class TTest:
    """Result of a two-sided paired t-test of ``a - b``.

    ``statistic = mean(d) / (std(d, ddof=1) / sqrt(n))`` over the ``n`` pairs ``d = a - b``;
    ``pvalue`` from Student's t with ``n - 1`` degrees of freedom (two-sided).
    """

    statistic: float
    pvalue: float
    n: int
    mean_difference: float
    #: Standard error of the mean difference, ``std(d, ddof=1) / sqrt(n)`` (NaN for fewer than 2 pairs).
    standard_error: float = math.nan

    def confidence_interval(self, alpha: float = 0.05) -> tuple[float, float]:
        """The two-sided ``1 - alpha`` interval of the mean difference, ``mean(d) ± t_{n-1} SE``
        (the interval whose exclusion of 0 is ``significant(alpha)``); NaNs when undefined."""
        if self.n < 2 or math.isnan(self.standard_error):
            return math.nan, math.nan
        from scipy import stats

        # isf(alpha/2), not ppf(1 - alpha/2): 1 - 1e-17 rounds to 1, whose quantile is infinite.
        half = float(stats.t.isf(alpha / 2.0, self.n - 1)) * self.standard_error
        return self.mean_difference - half, self.mean_difference + half

    def significant(self, alpha: float = 0.05) -> bool:
        return not math.isnan(self.pvalue) and self.pvalue < alpha

    def direction(self, alpha: float = 0.05) -> int:
        """+1 if ``a`` is significantly higher, -1 if significantly lower, else 0."""
        if not self.significant(alpha):
            return 0
        return 1 if self.mean_difference > 0 else -1


def paired_ttest(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> TTest:
    """Two-sided paired t-test of per-query values ``a`` against ``b`` (``scipy.stats.ttest_rel``).

    Pairs with a NaN on either side are dropped. Degenerate cases are answered without
    scipy's warnings: fewer than 2 pairs gives ``pvalue = nan``; all differences 0 gives
    ``statistic = 0, pvalue = 1``; a constant non-zero difference gives ``pvalue = 0``
    (constant: a spread of at most 1e-12, rounding noise for metric values).
    """
    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise SmoothrankError(f"paired_ttest: a and b must pair up, got {x.shape[0]} and {y.shape[0]} values")
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    n = int(x.shape[0])
    if n < 2:
        return TTest(math.nan, math.nan, n, float(np.mean(x - y)) if n else math.nan)
    d = x - y
    mean = float(d.mean())
    if float(np.ptp(d)) <= _CONSTANT:
        # (Numerically) zero variance: scipy would divide 0 by 0 (or mean by ~0) and warn.
        if abs(mean) <= _CONSTANT:
            return TTest(0.0, 1.0, n, 0.0, 0.0)
        return TTest(math.copysign(math.inf, mean), 0.0, n, mean, 0.0)
    from scipy import stats

    result = stats.ttest_rel(x, y)
    return TTest(float(result.statistic), float(result.pvalue), n, mean, float(d.std(ddof=1)) / math.sqrt(n))


def mean_std(values: Iterable[float]) -> tuple[float, float, int]:
    """``(mean, sample std (ddof=1), n)`` of the non-NaN values; std is NaN for fewer than 2."""
    v = np.asarray(list(values), dtype=np.float64)
    v = v[~np.isnan(v)]
    n = int(v.shape[0])
    if n == 0:
        return math.nan, math.nan, 0
    return float(v.mean()), float(v.std(ddof=1)) if n > 1 else math.nan, n


def fold_mean_standard_error(folds: Iterable[Sequence[float] | np.ndarray]) -> float:
    r"""Standard error, over queries, of the mean over folds of each fold's mean per-query value.

    .. math::
        \mathrm{SE} = \frac{1}{F} \sqrt{\sum_{f=1}^{F} \frac{s_f^2}{n_f}}

    with ``s_f`` the sample standard deviation (ddof = 1) of the ``n_f`` non-NaN per-query values of
    fold ``f``: the folds' test queries are independent samples (on MQ2008 they partition the
    queries), so the variances of the fold means add. It measures how far the reported mean could
    move with another draw of test queries, which the standard deviation over folds overstates by
    about sqrt(F). NaN when a fold has fewer than 2 values, or there is no fold.
    """
    variances = []
    for values in folds:
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        v = v[~np.isnan(v)]
        if v.shape[0] < 2:
            return math.nan
        variances.append(float(v.var(ddof=1)) / v.shape[0])
    if not variances:
        return math.nan
    return math.sqrt(sum(variances)) / len(variances)


CORRECTIONS = ("none", "holm", "bh")


def check_correction(method: str) -> None:
    """Refuse a ``correction`` that is not one of :data:`CORRECTIONS`."""
    if method not in CORRECTIONS:
        raise SmoothrankError(f"correction: expected one of {', '.join(CORRECTIONS)}, got {method!r}")


def adjust_pvalues(pvalues: Sequence[float] | np.ndarray, method: str = "holm") -> np.ndarray:
    """P-values adjusted for testing them together (NaN entries are left out and stay NaN).

    ``"holm"``: Holm's step-down (Holm, 1979), controls the family-wise error rate; the i-th
    smallest of m p-values becomes ``max_{j <= i} min(1, (m - j + 1) p_(j))``. ``"bh"``:
    Benjamini-Hochberg (1995), controls the false discovery rate (``scipy.stats.false_discovery_control``).
    ``"none"``: unchanged. Compare the adjusted values with alpha as usual.
    """
    check_correction(method)
    p = np.asarray(pvalues, dtype=np.float64).reshape(-1)
    out = p.copy()
    keep = ~np.isnan(p)
    if method == "none" or not keep.any():
        return out
    if ((p[keep] < 0) | (p[keep] > 1)).any():
        raise SmoothrankError("pvalues: expected values in [0, 1]")
    q = p[keep]
    if method == "holm":
        order = np.argsort(q, kind="stable")
        m = q.shape[0]
        stepped = np.minimum(1.0, (m - np.arange(m)) * q[order])
        adjusted = np.empty(m)
        adjusted[order] = np.maximum.accumulate(stepped)
    else:
        from scipy import stats

        adjusted = stats.false_discovery_control(q, method="bh")
    out[keep] = adjusted
    return out
