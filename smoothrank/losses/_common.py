"""Shared helpers of the losses: input checks, masking, ideal DCG from hard labels, reduction.

Behaviour common to every loss (documented once here):

* A query is *informative* when it has at least one real item and at least one real item with a
  positive gain (a relevant document); pairwise losses also need a pair with different labels.
  Other queries (no relevant document, fully padded rows) contribute a loss of exactly 0 with a
  zero gradient, and ``backward()`` works even when the whole batch is such queries.
* ``reduction="none"`` returns the per-query losses, shape (batch,); ``"sum"`` their sum;
  ``"mean"`` their sum divided by the number of informative queries (0 if there are none).
* Inputs are checked at the real positions: NaN or infinite scores, non-finite labels, an empty
  list (list_size 0), and, for the NDCG-based losses, gains that are negative or not finite and
  discounts that are not finite are errors naming the argument. Padded positions may hold
  anything. A negative label is a real label (padding is the mask, never a sentinel label): the
  pairwise, listwise and pointwise losses take it as it is, and the NDCG-based ones need a gain
  that maps it to a gain >= 0 (e.g. ``gain={-1: 0, 0: 0, 1: 1, 2: 3}``).
* float16 and bfloat16 scores are computed in float32 and the loss is returned in float32, as
  ``torch.autocast`` does for losses: a half-precision exponential or pair difference overflows
  long before the scores do, and a float16 loss scaled by a gradient scaler would overflow too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from smoothrank import gains as _gains
from smoothrank._checks import REDUCTIONS, check_k, check_mask, check_positive, check_reduction
from smoothrank._devices import wide_dtype
from smoothrank.errors import SmoothrankError

__all__ = ["REDUCTIONS", "NdcgTerms", "check_inputs", "check_k", "check_positive", "check_reduction",
           "has_relevant", "ideal_dcg", "ndcg_loss", "ndcg_terms", "predicted_ranks", "rank_discounts",
           "real_gains", "reduce", "reduce_rows", "refuse_beyond_range", "safe_divide"]


def check_inputs(scores: Any, labels: Any, mask: Any) -> tuple[Tensor, Tensor, Tensor]:
    """Validate and normalise ``(scores, labels, mask)`` to 2-D tensors on the scores' device.

    1-D inputs are one query. Labels are cast to the scores' floating dtype (float32 for
    half-precision scores, which are cast too). Padded positions may hold any label (even NaN):
    they are replaced by 0 so that nothing non-finite leaks into sums.
    """
    if not isinstance(scores, Tensor):
        raise SmoothrankError(f"scores: expected a torch.Tensor, got {type(scores).__name__}")
    if not scores.is_floating_point():
        raise SmoothrankError(f"scores: expected a floating dtype, got {scores.dtype}")
    if scores.dtype in (torch.float16, torch.bfloat16):
        scores = scores.float()
    try:
        labels = torch.as_tensor(labels, device=scores.device)
    except (TypeError, ValueError, RuntimeError) as err:
        if isinstance(labels, Tensor):  # numbers, but on a device they cannot be copied from (meta)
            raise SmoothrankError(f"labels: cannot be moved from {labels.device} to the scores' device "
                                  f"{scores.device} ({type(err).__name__})") from None
        raise SmoothrankError(f"labels: expected numbers, got {type(labels).__name__}") from None
    if scores.dim() == 1:
        scores = scores.unsqueeze(0)
        labels = labels.unsqueeze(0) if labels.dim() == 1 else labels
        # A tensor or a numpy mask, as check_mask takes both: a 1-D mask of one query is unsqueezed
        # with the scores.
        mask = mask[None] if isinstance(mask, Tensor | np.ndarray) and mask.ndim == 1 else mask
    if scores.dim() != 2:
        raise SmoothrankError(f"scores: expected shape (batch, list_size), got {tuple(scores.shape)}")
    if scores.shape[-1] == 0:
        raise SmoothrankError("scores: empty list (list_size 0)")
    if labels.shape != scores.shape:
        raise SmoothrankError(f"labels: shape {tuple(labels.shape)} differs from scores "
                              f"{tuple(scores.shape)}")
    mask = check_mask(mask, scores)
    if labels.is_complex():
        raise SmoothrankError(f"labels: expected real numbers, got {labels.dtype}")
    labels = labels.to(scores.dtype)
    real_scores = scores.detach()[mask]
    if not bool(torch.isfinite(real_scores).all()):  # one check on the common path, two on failure
        if bool(torch.isnan(real_scores).any()):
            raise SmoothrankError("scores: NaN at a real (unmasked) position")
        raise SmoothrankError("scores: infinite value at a real (unmasked) position")
    real_labels = labels[mask]
    if not bool(torch.isfinite(real_labels).all()):
        raise SmoothrankError("labels: non-finite value at a real (unmasked) position (read in "
                              f"{scores.dtype}, the scores' dtype)")

    labels = torch.where(mask, labels, torch.zeros_like(labels))
    # Padded scores may be anything (inf, NaN): replace them so no arithmetic sees them; the
    # replacement is outside the graph of the real items.
    scores = torch.where(mask, scores, torch.zeros_like(scores))
    return scores, labels, mask


def real_gains(labels: Tensor, mask: Tensor, gain: Any) -> Tensor:
    """Gains of the real items, 0 at padded positions (the gain is never evaluated on padding,
    so a mapping need not cover the filler label). As for the metrics: a callable must be
    elementwise and every real gain finite (``2^200 - 1`` overflows float32); and >= 0, since
    NDCG with a negative gain (``2^-1 - 1`` for a label -1) is no longer a normalised metric.

    Each query's gains come scaled by a power of two (largest in [0.5, 1)): every loss using them
    is a ratio of sums of gains, unchanged to the bit, and no sum of finite gains overflows."""
    g = _gains.real_gains(labels, mask, gain)
    if bool((g < 0).any()):
        label = labels[g < 0].min().item()
        raise SmoothrankError(f"gain: label {label:g} has a negative gain; the NDCG-based losses need gains "
                              ">= 0 (map negative labels with a gain mapping, e.g. gain={-1: 0, 0: 0, 1: 1})")
    return _gains.scale_rows_to_unit(g)


def rank_discounts(mask: Tensor, discount: Any, k: int | None, dtype: torch.dtype) -> Tensor:
    """Discount of rank r = 1..n per query, shape (batch, n); zero beyond min(k, m) (m real items)."""
    n = mask.shape[-1]
    m = mask.sum(-1, keepdim=True)
    ranks = torch.arange(1, n + 1, device=mask.device, dtype=dtype).expand(mask.shape[0], n)
    d = _gains.discount(ranks, discount, list_size=m.to(dtype))
    d = torch.as_tensor(d, dtype=dtype, device=mask.device)
    if d.shape != ranks.shape:
        raise SmoothrankError("discount: a callable discount must be elementwise (same shape in and out)")
    used = ranks <= (m if k is None else m.clamp(max=k)).to(dtype)
    if not bool((torch.isfinite(d[used]) & (d[used] >= 0)).all()):
        # A negative discount makes ideal DCGs <= 0: every query would silently count as empty.
        raise SmoothrankError("discount: the discount of some rank is not finite or is negative")
    return torch.where(used, d, torch.zeros_like(d))


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
    if not bool(torch.isfinite(total)) and bool(torch.isfinite(per_query).all()):
        # Finite losses whose sum overflows: summed in the wide dtype, where the mean (or even the
        # sum) may be representable; refused where it is not.
        return _reduce_wide(per_query, valid, reduction)
    if reduction == "sum":
        return total
    return total / valid.sum().clamp_min(1).to(per_query.dtype)


def _reduce_wide(per_query: Tensor, valid: Tensor, reduction: str) -> Tensor:
    wide = wide_dtype(per_query.dtype, per_query.device)
    total = per_query.to(wide).sum()
    if reduction == "mean":
        total = total / valid.sum().clamp_min(1).to(wide)
    out = total.to(per_query.dtype)
    if not bool(torch.isfinite(out)):
        finfo = torch.finfo(per_query.dtype)
        value = float(total.detach())
        raise SmoothrankError(f"scores: the {reduction} of the batch's losses ({value:.4g}) is beyond the "
                              f"range of {per_query.dtype} (largest {finfo.max:.4g}); scale the scores down, "
                              "or take reduction='none'")
    return out


def reduce_rows(per_item: Tensor, valid: Tensor, reduction: str) -> Tensor:
    """(batch, n) per-item values of each query (e.g. a Hessian diagonal) scaled as :func:`reduce`
    scales the queries' losses: 0 on uninformative queries, divided by their count under "mean"
    ("none" and "sum" leave each row as it is)."""
    weight = valid.to(per_item.dtype)
    if reduction == "mean":
        weight = weight / valid.sum().clamp_min(1).to(per_item.dtype)
    return per_item * weight.unsqueeze(-1)


def safe_divide(num: Tensor, den: Tensor, valid: Tensor) -> Tensor:
    """``num / den`` where valid, 0 elsewhere, with no NaN in either the forward or backward pass."""
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


class NdcgTerms(NamedTuple):
    """What every NDCG surrogate starts from, each of shape (batch, n) or (batch,).

    ``scores``, ``labels`` and ``mask`` as :func:`check_inputs` returns them; ``gains`` the real
    items' gains (:func:`real_gains`); ``discounts`` the discount of ranks 1..n, zero beyond
    min(k, m) (:func:`rank_discounts`); ``ideal`` the ideal DCG@k; ``valid`` the queries counted
    (a relevant document and a positive ideal DCG); ``k`` the checked cutoff.
    """

    scores: Tensor
    labels: Tensor
    mask: Tensor
    gains: Tensor
    discounts: Tensor
    ideal: Tensor
    valid: Tensor
    k: int | None


def ndcg_terms(scores: Any, labels: Any, mask: Any, *, gain: Any, discount: Any, k: Any) -> NdcgTerms:
    """Check ``gain``, ``discount``, ``k`` and the inputs, and compute the :class:`NdcgTerms`."""
    _gains.check_gain_discount(gain, discount)
    k = check_k(k)
    scores, labels, mask = check_inputs(scores, labels, mask)
    g = real_gains(labels, mask, gain)
    disc = rank_discounts(mask, discount, k, scores.dtype)  # (batch, n), zero beyond min(k, n_b)
    ideal = ideal_dcg(g, mask, disc)
    valid = has_relevant(g, mask) & (ideal > 0)
    return NdcgTerms(scores, labels, mask, g, disc, ideal, valid, k)


def ndcg_loss(scores: Any, labels: Any, mask: Any, *, reduction: Any, gain: Any, discount: Any, k: Any,
              smoothed_dcg: Callable[[NdcgTerms], Tensor]) -> Tensor:
    """Minus ``smoothed_dcg(terms) / ideal DCG@k`` per query, reduced: the skeleton of the NDCG surrogates.

    ``smoothed_dcg`` gets the checked :class:`NdcgTerms` and returns the loss's smoothed DCG@k of
    each query, shape (batch,). Queries that are not ``valid`` contribute 0 with a zero gradient
    and are left out of ``reduction="mean"``.
    """
    reduction = check_reduction(reduction)
    terms = ndcg_terms(scores, labels, mask, gain=gain, discount=discount, k=k)
    dcg = smoothed_dcg(terms)
    return reduce(-safe_divide(dcg, terms.ideal, terms.valid), terms.valid, reduction)


def refuse_beyond_range(per_query: Tensor, valid: Tensor, scores: Tensor, loss: str) -> None:
    """Raise naming ``scores`` where a counted query's loss is not finite.

    For the losses that grow with the score gaps (ListNet, ListMLE, RankNet, LambdaRank), computed
    in the widest dtype the device has: a non-finite value there means the exact value is beyond
    the range of the scores' dtype, which no rounding can return. ``per_query``: (batch,), in the
    scores' dtype; ``scores``: the checked (batch, n) scores with padding zeroed.
    """
    bad = valid & ~torch.isfinite(per_query.detach())
    if not bool(bad.any()):
        return
    row = int(torch.nonzero(bad)[0, 0])
    s = scores.detach()[row]
    finfo = torch.finfo(per_query.dtype)
    wider = " or compute in float64" if finfo.bits < 64 else ""
    raise SmoothrankError(f"scores: {loss}'s value for query {row} (row of the batch) is beyond the range of "
                          f"{per_query.dtype} (largest {finfo.max:.4g}): its scores span "
                          f"{float(s.min()):.4g} to {float(s.max()):.4g}; scale the scores down{wider}")
