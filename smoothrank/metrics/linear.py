"""Linear NDCG (NDCG^beta) and the multipartite pairwise error of Jin & Geng.

Xiao-Bo Jin and Guang-Gang Geng, "Linear NDCG and Pair-wise Loss" (arXiv, the evaluation measure
of the ECML/PKDD 2010 Discovery Challenge). For a query of |S| items ranked by the scores f, with
labels r in {0, ..., L-1} (here any labels >= 0)::

    DCG^beta   = sum_{i=1}^{|S|} r_(i) (|S| - i)                       (eq. 1)
    NDCG^beta  = DCG^beta / DCG^beta_ideal
    dDCG^beta  = DCG^beta_ideal - DCG^beta                              (the DCG error)
    R(f)       = sum_{a<b} sum_{i in S_b, j in S_a} (b - a) I[f(x_i) < f(x_j)]     (eq. 4)
    R-hat(f)   = R(f) / Z,   Z = sum_{a<b} |S_a| |S_b|                  (eq. 3)

The paper's theorem (eq. 5): dDCG^beta = R(f) for a ranking without ties. With tied scores R(f)
counts no tied pair (the indicator is strict) while the DCG depends on how the tie is ordered: R(f)
equals the DCG error of the optimistic order, and the pessimistic order's error exceeds it by the
sum of |r_i - r_j| over tied pairs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from smoothrank.errors import SmoothrankError
from smoothrank.metrics import _ranking as R
from smoothrank.metrics.ndcg import EMPTY, _dcg_and_ideal


def _beta_parts(scores: Any, labels: Any, mask: Any, ties: str, dtype: torch.dtype | None
                ) -> tuple[Tensor, Tensor, R.Prepared]:
    R.check_choice(ties, R.TIES, "ties")
    p = R.prepare(scores, labels, mask, dtype=dtype)
    value, ideal, _ = _dcg_and_ideal(p, k=None, gain="linear", discount="linear", ties=ties)
    return value, ideal, p


def dcg_beta(scores: Any, labels: Any, *, mask: Any = None, ties: str = "input", reduction: str = "mean",
             dtype: torch.dtype | None = None) -> Tensor:
    """``DCG^beta = sum_i r_(i) (|S| - i)`` (Jin & Geng, eq. 1): linear gain, linear discount."""
    R.check_choice(reduction, R.REDUCTIONS, "reduction")
    value, _, p = _beta_parts(scores, labels, mask, ties, dtype)
    return R.reduce(value, reduction, one_query=p.one_query)


def ndcg_beta(scores: Any, labels: Any, *, mask: Any = None, ties: str = "input", empty: str = "one",
              reduction: str = "mean", dtype: torch.dtype | None = None) -> Tensor:
    """``NDCG^beta = DCG^beta / DCG^beta_ideal`` (Jin & Geng, eq. 1).

    ``empty`` is the value when the ideal DCG^beta is 0 (no relevant item, or a single item whose
    weight |S| - 1 is 0): ``"one"``, ``"zero"`` or ``"skip"`` (NaN).
    """
    R.check_choice(reduction, R.REDUCTIONS, "reduction")
    R.check_choice(empty, EMPTY, "empty")
    value, ideal, p = _beta_parts(scores, labels, mask, ties, dtype)
    is_empty = ideal <= 0
    out = value / torch.where(is_empty, torch.ones_like(ideal), ideal)
    fill = {"one": 1.0, "zero": 0.0, "skip": float("nan")}[empty]
    out = torch.where(is_empty, torch.full_like(out, fill), out)
    return R.reduce(out, reduction, one_query=p.one_query)


def dcg_error(scores: Any, labels: Any, *, mask: Any = None, ties: str = "input", reduction: str = "mean",
              dtype: torch.dtype | None = None) -> Tensor:
    """The DCG error ``DCG^beta_ideal - DCG^beta`` (Jin & Geng, section 1); >= 0."""
    R.check_choice(reduction, R.REDUCTIONS, "reduction")
    value, ideal, p = _beta_parts(scores, labels, mask, ties, dtype)
    return R.reduce(ideal - value, reduction, one_query=p.one_query)


def _fenwick_pairwise(scores: np.ndarray, labels: np.ndarray) -> float:
    """R(f) of one query in O(n log n).

    Items are visited by descending score, one group of equal scores at a time; a Fenwick tree
    indexed by label rank holds the count and the label sum of the items already visited (all
    with a strictly higher score). Each item i then adds ``sum_{j above, y_j < y_i} (y_i - y_j)``
    = ``y_i * count_below - sum_below``. Tied items are inserted only after their whole group is
    queried, so no tied pair is counted (the indicator in eq. 4 is strict).
    """
    n = scores.shape[0]
    levels, rank = np.unique(labels, return_inverse=True)
    m = levels.shape[0]
    count = [0] * (m + 1)
    total = [0.0] * (m + 1)
    order = np.argsort(-scores, kind="stable")
    s_sorted = scores[order]
    out = 0.0
    start = 0
    while start < n:
        stop = start
        while stop < n and s_sorted[stop] == s_sorted[start]:
            stop += 1
        group = order[start:stop]
        for i in group:
            pos, cnt, acc = int(rank[i]), 0, 0.0  # prefix over label ranks < rank[i]
            while pos > 0:
                cnt += count[pos]
                acc += total[pos]
                pos -= pos & -pos
            out += float(labels[i]) * cnt - acc
        for i in group:
            pos = int(rank[i]) + 1
            while pos <= m:
                count[pos] += 1
                total[pos] += float(labels[i])
                pos += pos & -pos
        start = stop
    return out


def _pair_count(labels: np.ndarray) -> float:
    """Z = number of pairs with different labels = (n^2 - sum_a |S_a|^2) / 2."""
    _, counts = np.unique(labels, return_counts=True)
    n = labels.shape[0]
    return float(n * n - int((counts.astype(np.int64) ** 2).sum())) / 2.0


def pairwise_error(scores: Any, labels: Any, *, mask: Any = None, normalize: bool = False,
                   reduction: str = "mean", dtype: torch.dtype | None = None) -> Tensor:
    """The multipartite pairwise error R(f) (Jin & Geng, eq. 4), or R-hat(f) = R(f)/Z (eq. 3).

    ``R(f) = sum over pairs (i, j) with y_i > y_j and f(x_i) < f(x_j) of (y_i - y_j)``: each
    strictly misordered pair weighted by its label difference; tied scores count nothing.
    Computed in O(n log n) per query (Fenwick tree over label ranks), exactly in float64 and
    returned in ``dtype`` (default: the inputs' floating dtype).

    With ``normalize=True`` a query with Z = 0 (all labels equal) is NaN and skipped by the
    reductions.
    """
    R.check_choice(reduction, R.REDUCTIONS, "reduction")
    if not isinstance(normalize, bool):
        raise SmoothrankError(f"normalize: expected True or False, got {normalize!r}")
    p = R.prepare(scores, labels, mask, dtype=dtype)
    s = p.scores.detach().cpu().to(torch.float64).numpy()
    y = p.labels.detach().cpu().to(torch.float64).numpy()
    m = p.mask.detach().cpu().numpy()
    values = np.empty(s.shape[0], dtype=np.float64)
    for q in range(s.shape[0]):
        sq, yq = s[q][m[q]], y[q][m[q]]
        value = _fenwick_pairwise(sq, yq)
        if normalize:
            z = _pair_count(yq)
            value = value / z if z > 0 else float("nan")
        values[q] = value
    out = torch.from_numpy(values).to(dtype=p.scores.dtype, device=p.scores.device)
    return R.reduce(out, reduction, one_query=p.one_query)
