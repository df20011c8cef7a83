"""The gain and discount vocabulary shared by metrics and losses.

DCG@k = sum_{r=1..k} gain(label at rank r) * discount(r).

Gains (``gain=``)::

    ``"exp2"``    2^rel - 1 (Burges et al.; LightGBM, allRank, the LETOR scripts)
    ``"linear"``  rel (trec_eval; NDCG^beta of Jin & Geng)
    a mapping     {label: gain}, e.g. LightGBM's ``label_gain``; an unmapped label is an error
    a callable    ``f(labels: Tensor) -> Tensor``, elementwise

Discounts (``discount=``), for 1-based ranks r::

    ``"log2"``    1 / log2(1 + r)
    ``"letor"``   1 at r = 1, 2 and 1 / log2(r) after (Jarvelin & Kekalainen; LETOR 4.0 scripts)
    ``"linear"``  |S| - r, the NDCG^beta weights of the ECML/PKDD 2010 Discovery Challenge
                  (Jin & Geng, eq. 1), |S| the number of real items in the list
    a callable    ``f(ranks: Tensor) -> Tensor``, elementwise on 1-based float ranks
    a mapping     ``{"shallow": ALPHA, "n": N}``: SoftRank's shallower training discount
                  :func:`shallow_discount` ``(ALPHA, N)`` (section 4.7), the form a config file
                  holds

Every check raises :class:`~smoothrank.errors.SmoothrankError` naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from smoothrank.errors import SmoothrankError

__all__ = ["DISCOUNT_NAMES", "GAIN_NAMES", "DiscountLike", "GainLike", "ShallowDiscount", "check_discount",
           "check_gain", "check_gain_discount", "discount", "first_infinite_gain", "gain", "real_gains",
           "scale_rows_to_unit", "shallow_discount", "shallow_from_mapping"]

GainLike = str | Mapping[float, float] | Callable[[Tensor], Tensor]
DiscountLike = str | Mapping[str, Any] | Callable[[Tensor], Tensor]

GAIN_NAMES = ("exp2", "linear")
DISCOUNT_NAMES = ("log2", "letor", "linear")


def check_gain(spec: GainLike, *, argument: str = "gain") -> None:
    """Raise :class:`SmoothrankError` naming ``argument`` if ``spec`` is not a valid gain."""
    if isinstance(spec, str):
        if spec not in GAIN_NAMES:
            raise SmoothrankError(f"{argument}: unknown gain {spec!r}; expected one of {GAIN_NAMES}, "
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
                    raise SmoothrankError(f"{argument}: the mapping's {what}s must be finite numbers, "
                                     f"got {key!r}: {value!r}")
    elif not callable(spec):
        raise SmoothrankError(f"{argument}: expected a name, a mapping or a callable, "
                         f"got {type(spec).__name__}")


def check_discount(spec: DiscountLike, *, argument: str = "discount") -> None:
    """Raise :class:`SmoothrankError` naming ``argument`` if ``spec`` is not a valid discount."""
    if isinstance(spec, str):
        if spec not in DISCOUNT_NAMES:
            raise SmoothrankError(f"{argument}: unknown discount {spec!r}; expected one of "
                             f"{DISCOUNT_NAMES}, {{'shallow': ALPHA, 'n': N}} or a callable")
    elif isinstance(spec, Mapping):
        shallow_from_mapping(spec, argument=argument)
    elif not callable(spec):
        raise SmoothrankError(f"{argument}: expected a name, {{'shallow': ALPHA, 'n': N}} or a callable, "
                         f"got {type(spec).__name__}")


def check_gain_discount(gain: Any, discount: Any) -> None:
    """Raise :class:`SmoothrankError` naming ``gain`` or ``discount`` unless both are valid."""
    check_gain(gain, argument="gain")
    check_discount(discount, argument="discount")


def shallow_from_mapping(spec: Mapping[str, Any], *, argument: str = "discount",
                         error: type[SmoothrankError] = SmoothrankError) -> ShallowDiscount:
    """The discount ``{"shallow": ALPHA, "n": N}`` stands for: ``shallow_discount(ALPHA, N)``.

    Another mapping raises ``error`` naming ``argument``; a bad ALPHA or N raises
    :class:`SmoothrankError` naming ``alpha`` or ``n``.
    """
    if set(spec) != {"shallow", "n"}:
        raise error(f"{argument}: expected a name or {{shallow: ALPHA, n: N}} (SoftRank's shallower "
                    f"discounts) as a mapping, got {dict(spec)!r}")
    return shallow_discount(spec["shallow"], spec["n"])


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
            raise SmoothrankError(f"gain: labels {missing} have no entry in the gain mapping")
        return out
    assert callable(spec), spec  # check_gain refuses any other name
    return spec(labels)


def _float32_rounding(x: float) -> float:
    """``x`` rounded to the nearest float32 (inf beyond its range, which no finite label equals)."""
    return float(torch.tensor(x, dtype=torch.float64).to(torch.float32))


#: Labels checked at a time by :func:`first_infinite_gain` (its memory is a block's, not the labels').
_GAIN_BLOCK = 1 << 20


def first_infinite_gain(labels: Any, spec: GainLike = "exp2", *,
                        dtype: torch.dtype = torch.float32) -> int | None:
    """Index of the first of the flat ``labels`` (array or tensor) whose gain under ``spec`` is not
    finite in ``dtype``, or None. Labels a mapping does not cover are left to :func:`gain` to report.
    Read a block of 2^20 labels at a time (a memory-mapped dataset's are not copied whole)."""
    flat: Any = labels.reshape(-1) if hasattr(labels, "reshape") else torch.as_tensor(labels).reshape(-1)
    for start in range(0, max(int(flat.shape[0]), 1), _GAIN_BLOCK):
        block = flat[start:start + _GAIN_BLOCK]
        if getattr(getattr(block, "flags", None), "writeable", True) is False:  # a memory-mapped dataset's
            block = block.copy()  # torch warns of read-only arrays
        values = torch.as_tensor(block).reshape(-1).to(dtype)
        distinct, position = torch.unique(values, return_inverse=True)
        try:
            finite = torch.isfinite(torch.as_tensor(gain(distinct, spec), dtype=dtype))
        except SmoothrankError:
            return None
        if finite.shape != distinct.shape:  # not elementwise: gain()'s callers report it
            return None
        bad = ~finite[position]
        if bool(bad.any()):
            return start + int(bad.nonzero()[0, 0])
    return None


def discount(ranks: Tensor, spec: DiscountLike = "log2", *, list_size: Tensor | int | None = None
             ) -> Tensor:
    """Elementwise discount of 1-based ``ranks``.

    ``list_size`` (broadcastable to ``ranks``) is required by ``"linear"`` only: the number of
    real items ``|S|`` of each list.
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
            raise SmoothrankError("discount: 'linear' needs list_size (the number of items |S|)")
        return torch.as_tensor(list_size, dtype=ranks.dtype, device=ranks.device) - ranks
    if isinstance(spec, Mapping):
        return shallow_from_mapping(spec)(ranks)
    assert callable(spec), spec  # check_discount refuses any other name
    return spec(ranks)


def real_gains(labels: Tensor, mask: Tensor, spec: Any) -> Tensor:
    """Gain of each real item, 0 at padding (padding labels never reach a mapping or callable)."""
    out = torch.zeros_like(labels)
    values = gain(labels[mask], spec)
    values = torch.as_tensor(values, dtype=labels.dtype, device=labels.device)
    if values.shape != labels[mask].shape:
        raise SmoothrankError("gain: a callable gain must be elementwise (same shape in and out)")
    if not torch.isfinite(values).all():
        raise SmoothrankError("gain: the gain of some label is not finite (label too large for 'exp2'?)")
    out[mask] = values
    return out


#: float dtype -> (integer dtype of its width, mantissa bits, exponent bias).
_FLOAT_LAYOUT = {torch.float32: (torch.int32, 23, 127), torch.float64: (torch.int64, 52, 1023)}


def scale_rows_to_unit(gains: Tensor) -> Tensor:
    """Each row of ``gains`` times the power of two that brings its largest value into [0.5, 1).

    For anything that is a ratio of sums of gains (NDCG, its surrogates, LambdaRank's ΔNDCG) this
    changes nothing, exactly: a power of two rescales without rounding (short of subnormals), and
    numerator and denominator move together. What it changes is overflow: 2^127 - 1 is a finite
    float32 gain (label 127 under ``exp2``) but the sum of two is not, and IDCG = inf would make
    NDCG NaN. The power is built from its bits, so it is exact on every device. Rows whose largest value
    is not positive, and dtypes other than float32 and float64, are returned unchanged.
    """
    layout = _FLOAT_LAYOUT.get(gains.dtype)
    if layout is None or gains.numel() == 0:
        return gains
    int_dtype, mantissa_bits, bias = layout
    top = gains.amax(-1, keepdim=True)
    # frexp's exponent (top = m 2^e, m in [0.5, 1)) read off the bits, as torch.frexp is missing on
    # some devices (Apple's MPS); a subnormal top reads as -(bias - 1), which the clamp allows.
    field = (top.view(int_dtype) >> mantissa_bits) & (2 * bias + 1)
    exponent = field - (bias - 1)
    # 2^-exponent must be a normal number: exponent in [-bias, bias - 1].
    exponent = torch.where(top > 0, exponent, torch.zeros_like(exponent)).clamp(-bias, bias - 1)
    return gains * ((bias - exponent) << mantissa_bits).view(gains.dtype)


# ----------------------------------------------------------------------------- SoftRank's shallow discounts
# The shallow training discounts of SoftRank (Taylor et al., WSDM 2008, section 4.7, Figure 5).
#
# The paper trains with discounts that decay more slowly than NDCG's and draws a family indexed by
# ``alpha`` from "convex" (-1: flat at the top, falling fast at the bottom) through linear (0) to
# the usual log discount (1), without a formula. The definition here fixes one. For a list of ``n`` items
# and 1-based ranks ``r`` in ``[1, n]``, with the usual discount ``D(r) = 1 / log2(1 + r)``:
#
#     L(r) = 1 - (1 - D(n)) (r - 1) / (n - 1)           the chord from (1, 1) to (n, D(n))
#     M(r) = 1 + D(n) - D(n + 1 - r)                     D reflected through the chord's midpoint
#
#     S_alpha(r) = alpha D(r) + (1 - alpha) L(r)          for 0 <= alpha <= 1
#     S_alpha(r) = -alpha M(r) + (1 + alpha) L(r)         for -1 <= alpha < 0
#
# Every member decreases from ``S(1) = 1`` to ``S(n) = D(n)``; ``S_1`` is exactly the usual discount,
# ``S_0`` is linear and ``S_{-1}`` is the point reflection of the log discount (concave in ``r``:
# it stays near 1 over the top of the list and drops at the end), so ``alpha`` moves weight from
# the top of the list (1) to its tail (-1). Ranks beyond ``n`` keep the floor value ``D(n)``.


def _log_discount(ranks: Tensor) -> Tensor:
    return 1.0 / torch.log2(ranks + 1.0)


def shallow_discount(alpha: float, n: int) -> ShallowDiscount:
    """Return the discount ``S_alpha`` for lists of ``n`` items, usable as ``discount=`` anywhere.

    Parameters
    ----------
    alpha : float in [-1, 1]
        1 = the usual ``1 / log2(1 + r)``, 0 = linear, -1 = the reflected (convex-shaped) one.
    n : int >= 1
        Length of the lists the discount spans (e.g. the training list size). Ranks are clamped
        to ``[1, n]``.

    The result is a :class:`ShallowDiscount`: a callable ``f(ranks) -> Tensor`` that pickles
    (a loss bound with it can be sent to other processes) and compares equal to another of the
    same ``(alpha, n)``.

    Examples
    --------
    >>> import torch
    >>> from smoothrank.gains import discount
    >>> d = shallow_discount(0.0, 5)
    >>> discount(torch.tensor([1.0, 5.0]), d)
    tensor([1.0000, 0.3869])
    """
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise SmoothrankError(f"alpha: expected a number in [-1, 1], got {alpha!r}") from None
    if not (math.isfinite(a) and -1.0 <= a <= 1.0):
        raise SmoothrankError(f"alpha: expected a number in [-1, 1], got {alpha!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SmoothrankError(f"n: expected an integer >= 1, got {n!r}")
    return ShallowDiscount(a, int(n))


class ShallowDiscount:
    """The discount ``S_alpha`` for lists of ``n`` items; build it with :func:`shallow_discount`.

    A class rather than a closure so that it pickles with the loss it is bound to.
    """

    def __init__(self, alpha: float, n: int) -> None:
        self.alpha, self.n = alpha, n
        self.__name__ = f"shallow_discount(alpha={alpha}, n={n})"

    def __call__(self, ranks: Tensor) -> Tensor:
        ranks = ranks if ranks.is_floating_point() else ranks.to(torch.get_default_dtype())
        a, n = self.alpha, self.n
        if n == 1:
            return torch.ones_like(ranks)
        floor = 1.0 / math.log2(n + 1.0)
        r = ranks.clamp(1.0, float(n))
        chord = 1.0 - (1.0 - floor) * (r - 1.0) / (n - 1.0)
        if a >= 0.0:
            return a * _log_discount(r) + (1.0 - a) * chord
        reflected = 1.0 + floor - _log_discount(n + 1.0 - r)
        return -a * reflected + (1.0 + a) * chord

    def __repr__(self) -> str:
        return self.__name__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ShallowDiscount):
            return NotImplemented
        return (self.alpha, self.n) == (other.alpha, other.n)

    def __hash__(self) -> int:
        return hash((ShallowDiscount, self.alpha, self.n))
