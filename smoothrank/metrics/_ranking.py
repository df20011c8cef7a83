"""Input checking and sorting under masks and tie policies, shared by every metric.

All metrics see the same tensor convention: ``scores`` and ``labels`` of shape
``(batch, list_size)`` and a boolean ``mask`` (True = real item; padding may sit anywhere in a row).
A 1-D input is one query. numpy arrays are accepted and converted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from smoothrank._checks import REDUCTIONS, check_choice, check_k
from smoothrank._devices import wide_dtype
from smoothrank.errors import SmoothrankError
from smoothrank.gains import check_gain_discount, real_gains, scale_rows_to_unit

__all__ = ["REDUCTIONS", "TIES", "Prepared", "check_choice", "check_gain_discount", "check_k", "exact_order",
           "positions", "prepare", "real_gains", "reduce", "scale_rows_to_unit", "sort_order"]

TIES = ("input", "pessimistic", "optimistic")


@dataclass(frozen=True)
class Prepared:
    """Checked inputs: 2-D float ``scores``/``labels`` in ``dtype``, a 2-D bool ``mask``."""

    scores: Tensor
    labels: Tensor
    mask: Tensor
    one_query: bool  # the caller passed 1-D arrays: results are squeezed to a scalar


def _to_tensor(x: Any, name: str) -> Tensor:
    if isinstance(x, Tensor):
        t = x.detach()
    else:
        try:
            arr = np.asarray(x)
        except Exception as err:  # pragma: no cover - numpy's own message is kept
            raise SmoothrankError(f"{name}: cannot be read as an array ({err})") from err
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
            raise SmoothrankError(f"{name}: expected numbers, got an array of dtype {arr.dtype}")
        arr = np.ascontiguousarray(arr)
        if not arr.flags.writeable:  # a memory map of the dataset store: torch warns of read-only arrays
            arr = arr.copy()
        t = torch.from_numpy(arr)
    if t.is_complex():  # casting would drop the imaginary part with only a warning
        raise SmoothrankError(f"{name}: expected real numbers, got {t.dtype}")
    return t


def _float_dtype(scores: Tensor, labels: Tensor, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is not None:
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise SmoothrankError(f"dtype: expected a floating torch.dtype, got {dtype!r}")
        # evaluate's default float64 on a device without it (Apple's MPS): its widest, float32
        if dtype == torch.float64:
            return wide_dtype(torch.float32, scores.device)
        # Half precision cannot count ranks (below): an explicit float16/bfloat16 is widened too
        # (in float16, precision(..., k=2500) of an all-relevant list would be 1.001).
        return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    # Follow the inputs; float64 wins so that exact inputs are never rounded. Half precision is
    # widened to float32: it cannot even count ranks past 256 (bfloat16) or 2048 (float16).
    # Integer scores (timestamps, counts) are exact too: float64 where the device has it, since
    # float32 would merge integers past 2^24 into ties.
    candidates = [t.dtype for t in (scores, labels) if t.is_floating_point()]
    if torch.float64 in candidates or not scores.is_floating_point():
        return wide_dtype(torch.float32, scores.device)
    return torch.float32 if candidates[0] in (torch.float16, torch.bfloat16) else candidates[0]


def exact_order(scores: Tensor) -> Tensor:
    """``scores`` as the metrics read them, only through their order and ties: integer (and bool)
    scores are replaced by their dense ranks over the whole tensor, since nanosecond timestamps pass
    2^53, where float64 merges neighbours; floating scores are returned as they are."""
    if scores.is_floating_point() or scores.is_complex():
        return scores
    return torch.unique(scores, return_inverse=True)[1]


def prepare(scores: Any, labels: Any, mask: Any = None, *, dtype: torch.dtype | None = None,
            negative_labels: bool = False) -> Prepared:
    """Check and convert metric inputs.

    Raises
    ------
    SmoothrankError
        naming the argument: mismatched shapes, more than 2 dimensions, NaN scores, NaN, infinite
        or (unless ``negative_labels``: a gain mapping or callable that the caller checks) negative
        labels (on real items), a mask that is not boolean.
    """
    s = _to_tensor(scores, "scores")
    y = _to_tensor(labels, "labels")
    if s.dim() not in (1, 2):
        raise SmoothrankError("scores: expected shape (list_size,) or (batch, list_size), "
                              f"got {tuple(s.shape)}")
    if s.shape[-1] == 0:
        raise SmoothrankError("scores: empty list (list_size 0)")
    if y.shape != s.shape:
        raise SmoothrankError(f"labels: shape {tuple(y.shape)} does not match scores {tuple(s.shape)}")
    if mask is None:
        m = torch.ones(s.shape, dtype=torch.bool, device=s.device)
    else:
        m = _to_tensor(mask, "mask")
        if m.dtype != torch.bool:
            raise SmoothrankError(f"mask: expected a boolean tensor (True = real item), got dtype {m.dtype}")
        if m.shape != s.shape:
            raise SmoothrankError(f"mask: shape {tuple(m.shape)} does not match scores {tuple(s.shape)}")
        m = m.to(s.device)
    one_query = s.dim() == 1
    if one_query:
        s, y, m = s.unsqueeze(0), y.unsqueeze(0), m.unsqueeze(0)
    dt = _float_dtype(s, y, dtype)
    s = exact_order(s).to(dtype=dt)
    y = y.to(dtype=dt, device=s.device)
    if torch.isnan(s[m]).any():
        raise SmoothrankError("scores: NaN among the real items (mask=True)")
    real_labels = y[m]
    if not torch.isfinite(real_labels).all():
        raise SmoothrankError("labels: NaN or infinite label among the real items (mask=True)")
    if not negative_labels and (real_labels < 0).any():
        raise SmoothrankError(
            f"labels: negative label {real_labels.min().item():g}; relevance labels must be >= 0 "
            "(mark padding with mask=False, never with a sentinel label)")
    # Padding values are arbitrary (NaN allowed): neutralise them so no arithmetic sees them.
    s = torch.where(m, s, torch.zeros((), dtype=dt, device=s.device))
    y = torch.where(m, y, torch.zeros((), dtype=dt, device=s.device))
    return Prepared(s, y, m, one_query)


def sort_order(scores: Tensor, mask: Tensor, *, ties: str = "input", labels: Tensor | None = None) -> Tensor:
    """Indices that rank each row: real items by descending score, padding last.

    Ties in scores are broken by ``ties``: ``"input"`` keeps the input (file) order, ``"pessimistic"``
    puts the least relevant item first, ``"optimistic"`` the most relevant; equal scores with equal
    labels keep input order. Implemented as successive stable sorts (least significant key first),
    so it is exact for any finite or infinite score and O(n log n).
    """
    n = scores.shape[-1]
    order = torch.arange(n, device=scores.device).expand_as(scores)
    if ties != "input":
        if labels is None:
            raise ValueError("sort_order: labels are needed for pessimistic/optimistic ties")
        _, idx = torch.sort(labels, dim=-1, descending=(ties == "optimistic"), stable=True)
        order = idx
    key = torch.gather(scores, -1, order)
    _, idx = torch.sort(key, dim=-1, descending=True, stable=True)
    order = torch.gather(order, -1, idx)
    # Last, the most significant key: real items before padding.
    real = torch.gather(mask, -1, order).to(torch.uint8)
    _, idx = torch.sort(real, dim=-1, descending=True, stable=True)
    return torch.gather(order, -1, idx)


def reduce(values: Tensor, reduction: str, *, one_query: bool) -> Tensor:
    """Reduce per-query ``values`` (NaN = skipped query) with ``reduction``.

    ``"mean"`` and ``"sum"`` ignore skipped queries; the mean over no query at all is NaN
    (nothing to average), the sum 0.
    """
    if reduction == "none":
        return values[0] if one_query else values
    kept = values[~torch.isnan(values)]
    if reduction == "sum":
        return kept.sum()
    if kept.numel() == 0:
        return torch.full((), float("nan"), dtype=values.dtype, device=values.device)
    return kept.mean()


def positions(like: Tensor) -> Tensor:
    """1-based rank of each position, shaped like ``like`` (batch, list_size)."""
    n = like.shape[-1]
    return torch.arange(1, n + 1, dtype=like.dtype, device=like.device).expand_as(like)


Fn = Callable[..., Tensor]
