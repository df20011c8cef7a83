"""Evaluate several metrics at once under one named :class:`Convention`.

Metric names (case-insensitive): ``ndcg@k``, ``ndcg`` (whole list), ``dcg@k``, ``p@k``
(``precision@k``), ``map`` / ``map@k`` (``ap``), ``mrr`` / ``mrr@k`` (``rr``), ``ndcg_beta``,
``dcg_beta``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from smoothrank.errors import SmoothrankError
from smoothrank.metrics._ranking import _to_tensor, exact_order
from smoothrank.metrics.binary import average_precision, precision, reciprocal_rank
from smoothrank.metrics.conventions import Convention, get_convention
from smoothrank.metrics.linear import dcg_beta, ndcg_beta
from smoothrank.metrics.ndcg import dcg, ndcg

LETOR4_METRICS: tuple[str, ...] = (*(f"ndcg@{k}" for k in range(1, 11)),
                                   *(f"p@{k}" for k in range(1, 11)), "map")

_NAME = re.compile(r"^(ndcg|dcg|p|precision|map|ap|mrr|rr|ndcg_beta|dcg_beta)(?:@(\d+))?$")
_ALIASES = {"precision": "p", "ap": "map", "rr": "mrr"}


def parse_metric(name: str) -> tuple[str, int | None]:
    """Split ``"ndcg@10"`` into ``("ndcg", 10)``; raise naming ``metrics`` for an unknown name.

    Examples
    --------
    >>> from smoothrank.metrics import parse_metric
    >>> parse_metric("ndcg@10")
    ('ndcg', 10)
    >>> parse_metric("map")
    ('map', None)
    """
    match = _NAME.match(name.strip().lower()) if isinstance(name, str) else None
    if match is None:
        raise SmoothrankError(
            f"metrics: unknown metric {name!r}; expected ndcg@k, ndcg, dcg@k, p@k, map, map@k, mrr, "
            "mrr@k, ndcg_beta or dcg_beta")
    kind = _ALIASES.get(match.group(1), match.group(1))
    k = None if match.group(2) is None else int(match.group(2))
    if k is not None and k <= 0:
        raise SmoothrankError(f"metrics: the cutoff of {name!r} must be >= 1")
    if kind == "p" and k is None:
        raise SmoothrankError(f"metrics: {name!r} needs a cutoff, e.g. p@10")
    if kind in ("ndcg_beta", "dcg_beta") and k is not None:
        raise SmoothrankError(f"metrics: {name!r} takes no cutoff (NDCG^beta uses the whole list)")
    return kind, k


def uses_gain(metrics: Iterable[str]) -> bool:
    """Whether any of the metric names computes gains (NDCG, DCG): the metrics whose labels must have
    a finite gain under the convention."""
    return any(parse_metric(name)[0] in ("ndcg", "dcg") for name in metrics)


def _one(kind: str, k: int | None, conv: Convention, args: tuple, common: dict[str, Any]) -> Tensor:
    if kind == "ndcg":
        return ndcg(*args, k=k, gain=conv.gain, discount=conv.discount, empty=conv.ndcg_empty,
                    ties=conv.ties, short=conv.ndcg_short, **common)
    if kind == "dcg":
        return dcg(*args, k=k, gain=conv.gain, discount=conv.discount, ties=conv.ties,
                   short=conv.ndcg_short, **common)
    if kind == "p":
        return precision(*args, k=k, threshold=conv.threshold, ties=conv.ties, short=conv.precision_short,
                         empty=conv.binary_empty, **common)
    if kind == "map":
        return average_precision(*args, k=k, threshold=conv.threshold, ties=conv.ties, empty=conv.map_empty,
                                 denominator=conv.ap_denominator, **common)
    if kind == "mrr":
        return reciprocal_rank(*args, k=k, threshold=conv.threshold, ties=conv.ties, empty=conv.binary_empty,
                               **common)
    if kind == "ndcg_beta":
        return ndcg_beta(*args, ties=conv.ties, empty=conv.ndcg_empty, **common)
    return dcg_beta(*args, ties=conv.ties, **common)


def metric_list(metrics: str | Iterable[str]) -> list[str]:
    """Metric names as :func:`evaluate` keys them: stripped, lower case; ``metrics`` may be one
    comma-separated string. Names are not parsed (:func:`parse_metric` does); none at all is refused."""
    if isinstance(metrics, str):
        metrics = [m for m in metrics.split(",") if m.strip()]
    try:
        names = [m.strip().lower() for m in metrics]
    except (TypeError, AttributeError):
        raise SmoothrankError(f"metrics: expected metric names (e.g. ['ndcg@10', 'map']), "
                              f"got {metrics!r}") from None
    if not names:
        raise SmoothrankError("metrics: no metric requested")
    return names


def evaluate(scores: Any, labels: Any, *, mask: Any = None, metrics: str | Iterable[str] = ("ndcg@10", "map"),
             convention: str | Convention = "letor4", doc_ids: Any = None, dtype: torch.dtype = torch.float64
             ) -> dict[str, Tensor]:
    """Per-query values of several metrics under one convention.

    Parameters
    ----------
    scores, labels, mask : as in :func:`smoothrank.metrics.ndcg` (1-D = one query)
    metrics : names such as ``"ndcg@5"``, ``"p@3"``, ``"map"``, ``"mrr"`` (or a comma-separated str)
    convention : ``"letor4"``, ``"lightgbm"``, ``"trec"`` or a :class:`Convention`
    doc_ids : array-like of str, the shape of ``scores``, optional
        Document ids. A convention with ``docno_ties`` (``"trec"``) orders tied scores by
        descending id, as trec_eval does; without ids it keeps the input order and warns
        (``UserWarning``) when real scores tie, since trec_eval's values may then differ.
    dtype : computation dtype, float64 by default (exact)

    Returns
    -------
    dict[str, Tensor]
        name -> per-query values of shape (batch,) (1 for a 1-D input); NaN where the convention
        skips the query. Average with :func:`mean_metrics`.

    Examples
    --------
    >>> from smoothrank.metrics import evaluate
    >>> out = evaluate([[0.3, 0.2, 0.1]], [[0, 1, 2]], metrics=["ndcg@2", "map"])
    >>> {name: round(value.item(), 4) for name, value in out.items()}
    {'ndcg@2': 0.25, 'map': 0.5833}
    """
    conv = get_convention(convention)
    if conv.docno_ties and doc_ids is None:
        _warn_if_ties(scores, mask, conv.name, stacklevel=2)
    elif conv.docno_ties:
        scores, labels, mask = _docno_tie_order(scores, labels, mask, doc_ids)
    return _evaluate(scores, labels, mask, metrics, conv, dtype)


def _warn_if_ties(scores: Any, mask: Any, name: str, *, stacklevel: int) -> None:
    """Warn when real scores tie and no ids can order them, reported ``stacklevel`` frames above the
    caller (2: the caller's caller, the user of ``evaluate``)."""
    s = _to_tensor(scores, "scores")
    m = None if mask is None else _to_tensor(mask, "mask")
    if s.dim() in (1, 2) and s.numel() and (m is None or m.shape == s.shape) and _real_scores_tie(s, m):
        warnings.warn(f"evaluate: convention {name!r} breaks ties in scores by document id, and no "
                      "doc_ids were given: tied scores keep the input order, so values may differ "
                      "from trec_eval's (pass doc_ids=)", UserWarning, stacklevel=stacklevel + 1)


def _docno_tie_order(scores: Any, labels: Any, mask: Any, doc_ids: Any) -> tuple[Any, Any, Any]:
    """``scores, labels, mask`` with each row's items put in descending ``doc_ids`` order."""
    s = _to_tensor(scores, "scores")
    m = None if mask is None else _to_tensor(mask, "mask")
    try:
        ids = np.asarray(doc_ids, dtype=str)
    except ValueError:
        raise SmoothrankError("doc_ids: expected an array of ids of the scores' shape") from None
    if ids.shape != tuple(s.shape):
        raise SmoothrankError(f"doc_ids: shape {ids.shape} does not match scores {tuple(s.shape)}")
    _, rank = np.unique(ids, return_inverse=True)
    order = torch.from_numpy(np.argsort(-rank.reshape(ids.shape), axis=-1, kind="stable"))
    y = _to_tensor(labels, "labels")
    if y.shape != s.shape:
        return scores, labels, mask  # refused by the metrics, naming the argument
    m = torch.ones(s.shape, dtype=torch.bool) if m is None else m
    if m.shape != s.shape:
        return scores, labels, mask
    return (s.gather(-1, order.to(s.device)), y.gather(-1, order.to(y.device)),
            m.gather(-1, order.to(m.device)))


def _real_scores_tie(s: Tensor, mask: Tensor | None) -> bool:
    """Whether two real items of a row have equal scores."""
    rows = s.reshape(-1, s.shape[-1]).double()
    if mask is not None:
        rows = torch.where(mask.reshape(rows.shape).to(torch.bool), rows, torch.nan)
    ordered = rows.sort(dim=-1).values  # NaN (padding) last, never equal to anything
    return bool((ordered[:, 1:] == ordered[:, :-1]).any())


def _evaluate(scores: Any, labels: Any, mask: Any, metrics: str | Iterable[str], conv: Convention,
              dtype: torch.dtype) -> dict[str, Tensor]:
    names = metric_list(metrics)
    parsed = [parse_metric(n) for n in names]
    common = {"mask": mask, "reduction": "none", "dtype": dtype}
    out: dict[str, Tensor] = {}
    for name, (kind, k) in zip(names, parsed, strict=True):
        value = _one(kind, k, conv, (scores, labels), common)
        out[name] = value.reshape(-1)
    return out


def mean_metrics(per_query: dict[str, Tensor]) -> dict[str, float]:
    """Mean of each metric over the queries it scores (NaN = skipped; NaN if all are skipped).

    Examples
    --------
    >>> import torch
    >>> from smoothrank.metrics import mean_metrics
    >>> mean_metrics({"ndcg@10": torch.tensor([0.5, 1.0])})
    {'ndcg@10': 0.75}
    """
    if not isinstance(per_query, Mapping):
        raise SmoothrankError("per_query: expected a mapping {metric: per-query values} (what evaluate "
                              f"returns), got {type(per_query).__name__}")
    result: dict[str, float] = {}
    for name, values in per_query.items():
        v = torch.as_tensor(values, dtype=torch.float64)
        kept = v[~torch.isnan(v)]
        result[name] = float(kept.mean()) if kept.numel() else float("nan")
    return result


def _checked_offsets(offsets: Any, n: int) -> np.ndarray:
    """``offsets`` as int64, refused unless they are whole numbers going non-decreasingly from 0 to ``n``."""
    problem = f"offsets: expected non-decreasing whole numbers from 0 to {n}"
    try:
        raw = np.asarray(offsets.detach().cpu() if isinstance(offsets, Tensor) else offsets)
        with np.errstate(invalid="ignore"):  # NaN or inf: refused below, as offs != raw
            offs = raw.astype(np.int64)
    except (TypeError, ValueError, OverflowError):
        raise SmoothrankError(problem) from None
    if raw.dtype.kind not in "iuf" or (offs != raw).any() or offs.ndim != 1 or offs.shape[0] < 1 \
            or offs[0] != 0 or offs[-1] != n or (np.diff(offs) < 0).any():
        raise SmoothrankError(problem)
    return offs


def pad_groups(values: Any, offsets: Any, *, fill: float = 0.0) -> tuple[Tensor, Tensor]:
    """Lay flat per-document ``values`` out as (n_queries, max_list) rows with a mask.

    Query q's documents are ``values[offsets[q]:offsets[q+1]]``, in that order. Values of shape
    ``(n_docs, *rest)`` (e.g. a feature matrix) give ``(n_queries, max_list, *rest)``; the mask is always
    (n_queries, max_list).

    Examples
    --------
    >>> from smoothrank.metrics import pad_groups
    >>> values, mask = pad_groups([1.0, 2.0, 3.0], [0, 2, 3])
    >>> values
    tensor([[1., 2.],
            [3., 0.]], dtype=torch.float64)
    >>> mask
    tensor([[ True,  True],
            [ True, False]])
    """
    vals = values.detach() if isinstance(values, Tensor) else torch.as_tensor(np.asarray(values))
    offs = _checked_offsets(offsets, vals.shape[0])
    sizes = np.diff(offs)
    n_q, width = sizes.shape[0], int(sizes.max()) if sizes.size else 0
    query = np.repeat(np.arange(n_q), sizes)
    pos = np.arange(vals.shape[0]) - offs[:-1][query]
    query_t, pos_t = torch.from_numpy(query).to(vals.device), torch.from_numpy(pos).to(vals.device)
    out = torch.full((n_q, max(width, 1), *vals.shape[1:]), fill, dtype=vals.dtype, device=vals.device)
    mask = torch.zeros((n_q, max(width, 1)), dtype=torch.bool, device=vals.device)
    out[query_t, pos_t] = vals
    mask[query_t, pos_t] = True
    return out, mask


def docno_descending_order(doc_ids: Sequence[str], offsets: Any) -> np.ndarray:
    """Row permutation that sorts each query's documents by document id, descending (trec_eval)."""
    ids = np.asarray(doc_ids, dtype=str)
    offs = _checked_offsets(offsets, ids.shape[0])
    sizes = np.diff(offs)
    query = np.repeat(np.arange(sizes.shape[0]), sizes)
    # lexsort: last key most significant; reversing the id order via a descending rank.
    _, id_rank = np.unique(ids, return_inverse=True)
    return np.lexsort((-id_rank.reshape(-1), query))


def _flat_float64(values: Any, name: str) -> np.ndarray:
    """Flat float64 NumPy copy of a tensor (any device, dtype, grad) or array-like, checked as every
    metric's input is (numbers, real)."""
    return _to_tensor(values, name).to(device="cpu", dtype=torch.float64).numpy().reshape(-1)


def _flat_scores(values: Any) -> np.ndarray:
    """:func:`_flat_float64` for scores: integer scores by their dense ranks over the whole array, as
    :func:`evaluate` reads them (their order and ties within each query kept exactly; nanosecond
    timestamps pass 2^53, where float64 merges neighbours)."""
    return exact_order(_to_tensor(values, "scores")).to(device="cpu", dtype=torch.float64).numpy().reshape(-1)


def evaluate_flat(scores: Any, labels: Any, *, offsets: Any, metrics: str | Iterable[str] = LETOR4_METRICS,
                  convention: str | Convention = "letor4", doc_ids: Sequence[str] | None = None,
                  dtype: torch.dtype = torch.float64) -> dict[str, Tensor]:
    """:func:`evaluate` on flat per-document arrays grouped by ``offsets`` (file order kept).

    With ``doc_ids`` and a convention with ``docno_ties`` (``trec``), each query's documents are
    first put in descending document-id order, so that tied scores are ordered as trec_eval
    orders them.
    """
    conv = get_convention(convention)
    s, y = _flat_scores(scores), _flat_float64(labels, "labels")
    if s.shape != y.shape:
        raise SmoothrankError(f"scores: {s.shape[0]} scores for {y.shape[0]} labels")
    if doc_ids is not None and len(doc_ids) != s.shape[0]:
        raise SmoothrankError(f"doc_ids: {len(doc_ids)} document ids for {s.shape[0]} scores")
    if conv.docno_ties and doc_ids is not None:
        perm = docno_descending_order(doc_ids, offsets)
        s, y = s[perm], y[perm]
    s_pad, mask = pad_groups(s, offsets)
    y_pad, _ = pad_groups(y, offsets)
    if conv.docno_ties and doc_ids is None:
        _warn_if_ties(s_pad, mask, conv.name, stacklevel=2)
    return _evaluate(s_pad, y_pad, mask, metrics, conv, dtype)
