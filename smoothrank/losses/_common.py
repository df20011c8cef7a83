"""Shared helpers of the losses: input checks, masking, ideal DCG from hard labels, reduction.

Behaviour common to every loss (documented once here):

* A query is *informative* when it has at least one real item and at least one real item with a
  positive gain (a relevant document); pairwise losses also need a pair with different labels.
  Other queries (no relevant document, fully padded rows) contribute a loss of exactly 0 with a
  zero gradient, and ``backward()`` works even when the whole batch is such queries.
* ``reduction="none"`` returns the per-query losses, shape (batch,); ``"sum"`` their sum;
  ``"mean"`` their sum divided by the number of informative queries (0 if there are none).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from smoothrank import gains as _gains
from smoothrank.errors import SmoothrankError

REDUCTIONS = ("mean", "sum", "none")


def check_inputs(scores: Any, labels: Any, mask: Any) -> tuple[Tensor, Tensor, Tensor]:
    """Validate and normalise ``(scores, labels, mask)`` to 2-D tensors on the scores' device.

    1-D inputs are one query. Labels are cast to the scores' floating dtype. Padded positions may
    hold any label (even NaN): they are replaced by 0 so that nothing non-finite leaks into sums.
    """
    if not isinstance(scores, Tensor):
        raise SmoothrankError(f"scores: expected a torch.Tensor, got {type(scores).__name__}")
    if not scores.is_floating_point():
        raise SmoothrankError(f"scores: expected a floating dtype, got {scores.dtype}")
    labels = torch.as_tensor(labels, device=scores.device)
    if scores.dim() == 1:
        scores = scores.unsqueeze(0)
        labels = labels.unsqueeze(0) if labels.dim() == 1 else labels
        mask = mask.unsqueeze(0) if isinstance(mask, Tensor) and mask.dim() == 1 else mask
    if scores.dim() != 2:
        raise SmoothrankError(f"scores: expected shape (batch, list_size), got {tuple(scores.shape)}")
    if labels.shape != scores.shape:
        raise SmoothrankError(f"labels: shape {tuple(labels.shape)} differs from scores "
                              f"{tuple(scores.shape)}")
    if mask is None:
        mask = torch.ones_like(scores, dtype=torch.bool)
    else:
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            raise SmoothrankError("mask: expected a boolean torch.Tensor (True = real item)")
        if mask.shape != scores.shape:
            raise SmoothrankError(f"mask: shape {tuple(mask.shape)} differs from scores "
                                  f"{tuple(scores.shape)}")
        mask = mask.to(scores.device)
    labels = labels.to(scores.dtype)
    if bool(torch.isnan(scores.detach()[mask]).any()):
        raise SmoothrankError("scores: NaN at a real (unmasked) position")
    if not bool(torch.isfinite(labels[mask]).all()):
        raise SmoothrankError("labels: non-finite value at a real (unmasked) position")
    labels = torch.where(mask, labels, torch.zeros_like(labels))
    # Padded scores may be anything (inf, NaN): replace them so no arithmetic sees them; the
    # replacement is outside the graph of the real items.
    scores = torch.where(mask, scores, torch.zeros_like(scores))
    return scores, labels, mask


def check_reduction(reduction: Any) -> str:
    if reduction not in REDUCTIONS:
        raise SmoothrankError(f"reduction: expected one of {REDUCTIONS}, got {reduction!r}")
    return reduction


def check_k(k: Any) -> int | None:
    if k is None:
        return None
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise SmoothrankError(f"k: must be a positive integer or None, got {k!r}")
    return int(k)


def check_positive(value: Any, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SmoothrankError(f"{name}: must be a positive number, got {value!r}") from None
    if not (v > 0 and v != float("inf")):
        raise SmoothrankError(f"{name}: must be a positive finite number, got {value!r}")
    return v


def check_gain_discount(gain: Any, discount: Any) -> None:
    try:
        _gains.check_gain(gain)
        _gains.check_discount(discount)
    except SmoothrankError:
        raise
    except ValueError as err:
        raise SmoothrankError(str(err)) from None


def real_gains(labels: Tensor, mask: Tensor, gain: Any) -> Tensor:
    """Gains of the real items, 0 at padded positions (the gain is never evaluated on padding,
    so a mapping need not cover the filler label)."""
    try:
        g_real = _gains.gain(labels[mask], gain)
    except SmoothrankError:
        raise
    except ValueError as err:
        raise SmoothrankError(str(err)) from None
    g = torch.zeros_like(labels)
    g[mask] = torch.as_tensor(g_real, dtype=labels.dtype, device=labels.device)
    return g


def rank_discounts(mask: Tensor, discount: Any, k: int | None, dtype: torch.dtype) -> Tensor:
    """Discount of rank r = 1..n per query, shape (batch, n); zero beyond min(k, m) (m real items)."""
    n = mask.shape[-1]
    m = mask.sum(-1, keepdim=True)
    ranks = torch.arange(1, n + 1, device=mask.device, dtype=dtype).expand(mask.shape[0], n)
    try:
        d = _gains.discount(ranks, discount, list_size=m.to(dtype))
    except SmoothrankError:
        raise
    except ValueError as err:
        raise SmoothrankError(str(err)) from None
    d = torch.as_tensor(d, dtype=dtype, device=mask.device)
    limit = m if k is None else m.clamp(max=k)
    return torch.where(ranks <= limit.to(dtype), d, torch.zeros_like(d))


def ideal_dcg(gains: Tensor, mask: Tensor, discounts: Tensor) -> Tensor:
    """Ideal DCG from hard labels: real gains sorted descending times ``discounts`` (batch, n)."""
    sorted_g = torch.sort(gains.masked_fill(~mask, float("-inf")), dim=-1, descending=True).values
    sorted_g = torch.where(torch.isfinite(sorted_g), sorted_g, torch.zeros_like(sorted_g))
    return (sorted_g * discounts).sum(-1)


def has_relevant(gains: Tensor, mask: Tensor) -> Tensor:
    """(batch,) True where a query has a real item with positive gain."""
    return ((gains > 0) & mask).any(-1)


def reduce(per_query: Tensor, valid: Tensor, reduction: str) -> Tensor:
    """Zero the uninformative queries (keeping the graph) and apply ``reduction``."""
    per_query = torch.where(valid, per_query, torch.zeros_like(per_query))
    if reduction == "none":
        return per_query
    total = per_query.sum()
    if reduction == "sum":
        return total
    return total / valid.sum().clamp_min(1).to(per_query.dtype)


def safe_divide(num: Tensor, den: Tensor, valid: Tensor) -> Tensor:
    """num / den where valid, 0 elsewhere, with no NaN in either the forward or backward pass."""
    den = torch.where(valid, den, torch.ones_like(den))
    return torch.where(valid, num / den, torch.zeros_like(num))


def predicted_ranks(scores: Tensor, mask: Tensor) -> Tensor:
    """1-based rank of each item by descending score among the real items (ties: input order).

    Padded items get ranks after every real item. No gradient flows through ranks.
    """
    s = scores.detach().masked_fill(~mask, float("-inf"))
    order = torch.sort(s, dim=-1, descending=True, stable=True).indices
    ranks = torch.empty_like(order)
    positions = torch.arange(1, s.shape[-1] + 1, device=s.device).expand_as(order)
    ranks.scatter_(-1, order, positions)
    return ranks
