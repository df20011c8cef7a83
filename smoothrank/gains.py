"""The gain and discount vocabulary shared by metrics and losses.

DCG@k = sum_{r=1..k} gain(label at rank r) * discount(r).

Gains (``gain=``):
    ``"exp2"``    2^rel - 1 (Burges et al.; LightGBM, allRank, the LETOR scripts)
    ``"linear"``  rel (trec_eval; NDCG^beta of Jin & Geng)
    a mapping     {label: gain}, e.g. LightGBM's ``label_gain``; an unmapped label is an error
    a callable    ``f(labels: Tensor) -> Tensor``, elementwise

Discounts (``discount=``), for 1-based ranks r:
    ``"log2"``    1 / log2(1 + r)
    ``"letor"``   1 at r = 1, 2 and 1 / log2(r) after (Jarvelin & Kekalainen; LETOR 4.0 scripts)
    ``"linear"``  |S| - r, the NDCG^beta weights of the ECML/PKDD 2010 Discovery Challenge
                  (Jin & Geng, eq. 1), |S| the number of real items in the list
    a callable    ``f(ranks: Tensor) -> Tensor``, elementwise on 1-based float ranks
    a mapping     ``{"shallow": ALPHA, "n": N}``: SoftRank's shallower training discount
                  :func:`smoothrank.softrank.shallow_discount` ``(ALPHA, N)`` (section 4.7), the
                  form a config file holds
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

__all__ = ["DISCOUNT_NAMES", "GAIN_NAMES", "DiscountLike", "GainLike", "check_discount", "check_gain",
           "discount", "first_infinite_gain", "gain", "shallow_from_mapping"]

GainLike = str | Mapping[float, float] | Callable[[Tensor], Tensor]
DiscountLike = str | Mapping[str, float] | Callable[[Tensor], Tensor]

GAIN_NAMES = ("exp2", "linear")
DISCOUNT_NAMES = ("log2", "letor", "linear")


def check_gain(spec: GainLike, *, argument: str = "gain") -> None:
    """Raise ``ValueError`` naming ``argument`` if ``spec`` is not a valid gain."""
    if isinstance(spec, str):
        if spec not in GAIN_NAMES:
            raise ValueError(f"{argument}: unknown gain {spec!r}; expected one of {GAIN_NAMES}, "
                             "a mapping {label: gain} or a callable")
    elif isinstance(spec, Mapping):
        for key, value in spec.items():
            for what, number in (("label", key), ("gain", value)):
                ok = not isinstance(number, bool | str | bytes)
                try:
                    ok = ok and math.isfinite(float(number))
                except (TypeError, ValueError):
                    ok = False
                if not ok:
                    raise ValueError(f"{argument}: the mapping's {what}s must be finite numbers, "
                                     f"got {key!r}: {value!r}")
    elif not callable(spec):
        raise ValueError(f"{argument}: expected a name, a mapping or a callable, "
                         f"got {type(spec).__name__}")


def check_discount(spec: DiscountLike, *, argument: str = "discount") -> None:
    """Raise ``ValueError`` naming ``argument`` if ``spec`` is not a valid discount."""
    if isinstance(spec, str):
        if spec not in DISCOUNT_NAMES:
            raise ValueError(f"{argument}: unknown discount {spec!r}; expected one of "
                             f"{DISCOUNT_NAMES}, {{'shallow': ALPHA, 'n': N}} or a callable")
    elif isinstance(spec, Mapping):
        shallow_from_mapping(spec, argument=argument)
    elif not callable(spec):
        raise ValueError(f"{argument}: expected a name, {{'shallow': ALPHA, 'n': N}} or a callable, "
                         f"got {type(spec).__name__}")


def shallow_from_mapping(spec: Mapping[str, float], *, argument: str = "discount"
                         ) -> Callable[[Tensor], Tensor]:
    """The discount ``{"shallow": ALPHA, "n": N}`` stands for: ``shallow_discount(ALPHA, N)``."""
    if set(spec) != {"shallow", "n"}:
        raise ValueError(f"{argument}: expected a name or {{shallow: ALPHA, n: N}} (SoftRank's shallower "
                         f"discounts) as a mapping, got {dict(spec)!r}")
    from smoothrank.softrank.discounts import shallow_discount

    return shallow_discount(spec["shallow"], spec["n"])  # its errors name alpha or n


def gain(labels: Tensor, spec: GainLike = "exp2") -> Tensor:
    """Elementwise gain of ``labels`` (any shape, floating dtype preserved)."""
    check_gain(spec)
    labels = labels if labels.is_floating_point() else labels.to(torch.get_default_dtype())
    if spec == "exp2":
        return torch.exp2(labels) - 1.0
    if spec == "linear":
        return labels
    if isinstance(spec, Mapping):
        out = torch.full_like(labels, float("nan"))
        # Labels read in float32 (load_letor's dtype) and widened to float64 are the float32 roundings
        # of their keys (0.1 is read as 0.10000000149...): such a label takes its key's gain, unless
        # another key equals it exactly (the second pass, which wins).
        for exact in (False, True):
            for key, value in spec.items():
                value_t = torch.as_tensor(float(value), dtype=labels.dtype, device=labels.device)
                target = float(key) if exact else _float32_rounding(float(key))
                out = torch.where(labels == target, value_t, out)
        if torch.isnan(out).any():
            missing = torch.unique(labels[torch.isnan(out)]).tolist()
            raise ValueError(f"gain: labels {missing} have no entry in the gain mapping")
        return out
    return spec(labels)  # type: ignore[operator]


def _float32_rounding(x: float) -> float:
    """``x`` rounded to the nearest float32 (inf beyond its range, which no finite label equals)."""
    return float(torch.tensor(x, dtype=torch.float64).to(torch.float32))


def first_infinite_gain(labels: Any, spec: GainLike = "exp2", *,
                        dtype: torch.dtype = torch.float32) -> int | None:
    """Index of the first of the flat ``labels`` (array or tensor) whose gain under ``spec`` is not
    finite in ``dtype``, or None. Labels a mapping does not cover are left to :func:`gain` to report."""
    if getattr(getattr(labels, "flags", None), "writeable", True) is False:  # a memory-mapped dataset's
        labels = labels.copy()  # torch warns of read-only arrays
    values = torch.as_tensor(labels).reshape(-1).to(dtype)
    distinct, position = torch.unique(values, return_inverse=True)
    try:
        finite = torch.isfinite(torch.as_tensor(gain(distinct, spec), dtype=dtype))
    except ValueError:
        return None
    if finite.shape != distinct.shape:  # not elementwise: gain()'s callers report it
        return None
    bad = ~finite[position]
    return int(bad.nonzero()[0, 0]) if bool(bad.any()) else None


def discount(ranks: Tensor, spec: DiscountLike = "log2", *, list_size: Tensor | int | None = None
             ) -> Tensor:
    """Elementwise discount of 1-based ``ranks``.

    ``list_size`` (broadcastable to ``ranks``) is required by ``"linear"`` only: the number of
    real items |S| of each list.
    """
    check_discount(spec)
    ranks = ranks if ranks.is_floating_point() else ranks.to(torch.get_default_dtype())
    if spec == "log2":
        return 1.0 / torch.log2(ranks + 1.0)
    if spec == "letor":
        deep = 1.0 / torch.log2(ranks.clamp_min(2.0))
        return torch.where(ranks <= 2.0, torch.ones_like(ranks), deep)
    if spec == "linear":
        if list_size is None:
            raise ValueError("discount: 'linear' needs list_size (the number of items |S|)")
        return torch.as_tensor(list_size, dtype=ranks.dtype, device=ranks.device) - ranks
    if isinstance(spec, Mapping):
        return shallow_from_mapping(spec)(ranks)
    return spec(ranks)  # type: ignore[operator]
