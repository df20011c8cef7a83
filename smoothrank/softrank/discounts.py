"""The shallow training discounts of SoftRank (Taylor et al., WSDM 2008, section 4.7, Figure 5).

The paper trains with discounts that decay more slowly than NDCG's and draws a family indexed by
``alpha`` from "convex" (-1: flat at the top, falling fast at the bottom) through linear (0) to
the usual log discount (1), without a formula. This module fixes one. For a list of ``n`` items
and 1-based ranks ``r`` in ``[1, n]``, with the usual discount ``D(r) = 1 / log2(1 + r)``:

    L(r) = 1 - (1 - D(n)) (r - 1) / (n - 1)           the chord from (1, 1) to (n, D(n))
    M(r) = 1 + D(n) - D(n + 1 - r)                     D reflected through the chord's midpoint

    S_alpha(r) = alpha D(r) + (1 - alpha) L(r)          for 0 <= alpha <= 1
    S_alpha(r) = -alpha M(r) + (1 + alpha) L(r)         for -1 <= alpha < 0

Every member decreases from ``S(1) = 1`` to ``S(n) = D(n)``; ``S_1`` is exactly the usual discount,
``S_0`` is linear and ``S_{-1}`` is the point reflection of the log discount (concave in ``r``:
it stays near 1 over the top of the list and drops at the end), so ``alpha`` moves weight from
the top of the list (1) to its tail (-1). Ranks beyond ``n`` keep the floor value ``D(n)``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from smoothrank.errors import SmoothrankError


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
    >>> discount(torch.tensor([1.0, 5.0]), d)  # doctest: +SKIP
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
