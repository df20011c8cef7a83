"""Binary-relevance metrics: precision at k, average precision, reciprocal rank.

An item is relevant when its label is ``>= threshold`` (default 1: every graded label above 0, as
in trec_eval's ``relevance_level`` and the LETOR scripts, where labels 1 and 2 are relevant).

For one query ranked by descending score, with ``rel_r`` = 1 if the item at rank r is relevant::

    P@k    = (1/k) sum_{r<=k} rel_r                     (short="pad": ranks past the end count 0)
    AP@k   = (1/R) sum_{r<=k} rel_r * P@r               R = number of relevant items in the list
    RR@k   = 1 / (rank of the first relevant item), 0 if none within the top k

(Manning, Raghavan & Schutze, "Introduction to Information Retrieval", ch. 8; trec_eval's ``P``,
``map`` and ``recip_rank``.) A query with no relevant item gets ``empty``: ``"zero"`` (trec_eval
and the LETOR scripts), ``"one"`` or ``"skip"`` (NaN, left out of the mean and the sum).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from smoothrank.errors import SmoothrankError
from smoothrank.metrics import _ranking as R

EMPTY = ("zero", "one", "skip")
PRECISION_SHORT = ("pad", "list", "zero")
AP_DENOMINATORS = ("relevant", "min_k_relevant")


def _check_threshold(threshold: Any) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise SmoothrankError(f"threshold: expected a number, got {threshold!r}")
    if not threshold > 0:
        raise SmoothrankError(f"threshold: must be > 0 (labels >= threshold are relevant), got {threshold}")
    return float(threshold)


def _ranked_relevance(p: R.Prepared, threshold: float, ties: str) -> tuple[Tensor, Tensor, Tensor]:
    """Relevance (0/1 in the compute dtype) in ranked order, ranked real-item mask, count relevant."""
    rel = ((p.labels >= threshold) & p.mask).to(p.scores.dtype)
    order = R.sort_order(p.scores, p.mask, ties=ties, labels=rel)
    ranked = torch.gather(rel, -1, order)
    return ranked, torch.gather(p.mask, -1, order), rel.sum(dim=-1)


def _finish(value: Tensor, n_rel: Tensor, empty: str, reduction: str, one_query: bool) -> Tensor:
    fill = {"one": 1.0, "zero": 0.0, "skip": float("nan")}[empty]
    value = torch.where(n_rel == 0, torch.full_like(value, fill), value)
    return R.reduce(value, reduction, one_query=one_query)


def _common(k: Any, threshold: Any, ties: Any, empty: Any, reduction: Any) -> tuple[int | None, float]:
    k = R.check_k(k)
    threshold = _check_threshold(threshold)
    R.check_choice(ties, R.TIES, "ties")
    R.check_choice(empty, EMPTY, "empty")
    R.check_choice(reduction, R.REDUCTIONS, "reduction")
    return k, threshold


def precision(scores: Any, labels: Any, *, mask: Any = None, k: int | None = None, threshold: float = 1.0,
              ties: str = "input", short: str = "pad", empty: str = "zero", reduction: str = "mean",
              dtype: torch.dtype | None = None) -> Tensor:
    """Precision at ``k``: the fraction of the top ``k`` that is relevant.

    ``short`` sets the value for a query with fewer than ``k`` items: ``"pad"`` divides by k, the
    missing ranks counting as non-relevant (trec_eval, LETOR 4.0); ``"list"`` divides by the list
    length; ``"zero"`` gives 0. ``k=None`` is the whole list. Other parameters as in
    :func:`smoothrank.metrics.ndcg`.

    Examples
    --------
    >>> import torch
    >>> from smoothrank.metrics import precision
    >>> precision(torch.tensor([[0.3, 0.2, 0.1]]), torch.tensor([[0, 1, 2]]), k=2)
    tensor(0.5000)
    """
    k, threshold = _common(k, threshold, ties, empty, reduction)
    R.check_choice(short, PRECISION_SHORT, "short")
    p = R.prepare(scores, labels, mask, dtype=dtype)
    ranked, _, n_rel = _ranked_relevance(p, threshold, ties)
    n_real = p.mask.sum(dim=-1)
    ranks = R.positions(ranked)
    if k is None:
        hits = ranked.sum(dim=-1)
        denom = n_real.to(ranked.dtype).clamp(min=1)
    else:
        hits = (ranked * (ranks <= k)).sum(dim=-1)
        denom = torch.full_like(hits, float(k))
        if short == "list":
            denom = torch.minimum(denom, n_real.to(ranked.dtype)).clamp(min=1)
    value = hits / denom
    if short == "zero" and k is not None:
        value = torch.where(n_real < k, torch.zeros_like(value), value)
    return _finish(value, n_rel, empty, reduction, p.one_query)


def average_precision(scores: Any, labels: Any, *, mask: Any = None, k: int | None = None,
                      threshold: float = 1.0, ties: str = "input", empty: str = "zero",
                      denominator: str = "relevant", reduction: str = "mean",
                      dtype: torch.dtype | None = None) -> Tensor:
    """Average precision (MAP is its mean over queries), truncated at ``k``.

    ``AP@k = (1/D) sum_{r <= k, item r relevant} P@r`` with ``D`` = R, the number of relevant items
    in the list (``denominator="relevant"``: trec_eval ``map`` / ``map_cut``, LETOR 4.0), or
    ``min(R, k)`` (``"min_k_relevant"``: LightGBM's ``map@k``).

    Examples
    --------
    >>> import torch
    >>> from smoothrank.metrics import average_precision
    >>> average_precision(torch.tensor([[0.3, 0.2, 0.1]]), torch.tensor([[0, 1, 2]]))
    tensor(0.5833)
    """
    k, threshold = _common(k, threshold, ties, empty, reduction)
    R.check_choice(denominator, AP_DENOMINATORS, "denominator")
    p = R.prepare(scores, labels, mask, dtype=dtype)
    ranked, _, n_rel = _ranked_relevance(p, threshold, ties)
    ranks = R.positions(ranked)
    prec_at_r = torch.cumsum(ranked, dim=-1) / ranks
    used = ranked if k is None else ranked * (ranks <= k)
    total = (used * prec_at_r).sum(dim=-1)
    denom = n_rel if (k is None or denominator == "relevant") else n_rel.clamp(max=k)
    value = total / denom.clamp(min=1)
    return _finish(value, n_rel, empty, reduction, p.one_query)


def reciprocal_rank(scores: Any, labels: Any, *, mask: Any = None, k: int | None = None,
                    threshold: float = 1.0, ties: str = "input", empty: str = "zero",
                    reduction: str = "mean", dtype: torch.dtype | None = None) -> Tensor:
    """Reciprocal rank of the first relevant item (label >= ``threshold``, not the top grade).

    ``RR@k = 1 / r*`` with r* the rank of the first relevant item, 0 if it lies beyond ``k``
    (trec_eval ``recip_rank``; MRR is the mean over queries).

    Examples
    --------
    >>> import torch
    >>> from smoothrank.metrics import reciprocal_rank
    >>> reciprocal_rank(torch.tensor([[0.3, 0.2, 0.1]]), torch.tensor([[0, 1, 2]]))
    tensor(0.5000)
    """
    k, threshold = _common(k, threshold, ties, empty, reduction)
    p = R.prepare(scores, labels, mask, dtype=dtype)
    ranked, _, n_rel = _ranked_relevance(p, threshold, ties)
    ranks = R.positions(ranked)
    # argmax returns the first maximum: the first relevant rank (0 when there is none, fixed below).
    first = torch.gather(ranks, -1, ranked.argmax(dim=-1, keepdim=True)).squeeze(-1)
    value = torch.where(n_rel > 0, 1.0 / first, torch.zeros_like(first))
    if k is not None:
        value = torch.where(first <= k, value, torch.zeros_like(value))
    return _finish(value, n_rel, empty, reduction, p.one_query)
