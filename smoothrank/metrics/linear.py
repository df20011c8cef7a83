"""Linear NDCG (NDCG^beta) and the multipartite pairwise error of Jin & Geng.

Xiao-Bo Jin and Guang-Gang Geng, "Linear NDCG and Pair-wise Loss" (arXiv, the evaluation measure
of the ECML/PKDD 2010 Discovery Challenge). For a query of ``|S|`` items ranked by the scores f, with
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

import torch
from torch import Tensor

from smoothrank._devices import has_float64
from smoothrank.errors import SmoothrankError
from smoothrank.metrics import _ranking as R
from smoothrank.metrics.ndcg import EMPTY, _dcg_and_ideal


def _beta_parts(scores: Any, labels: Any, mask: Any, ties: str, dtype: torch.dtype | None, *,
                ratio: bool = False, wide: bool = False) -> tuple[Tensor, Tensor, R.Prepared]:
    """DCG^beta and its ideal per query, and the prepared inputs; ``wide``: summed in float64 (for
    differences of the two, which cancel), on the device :func:`_wide` picks."""
    R.check_choice(ties, R.TIES, "ties")
    p = R.prepare(scores, labels, mask, dtype=dtype)
    value, ideal, _ = _dcg_and_ideal(_wide(p) if wide else p, k=None, gain="linear", discount="linear",
                                     ties=ties, ratio=ratio)
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
    weight ``|S| - 1`` is 0): ``"one"``, ``"zero"`` or ``"skip"`` (NaN).
    """
    R.check_choice(reduction, R.REDUCTIONS, "reduction")
    R.check_choice(empty, EMPTY, "empty")
    value, ideal, p = _beta_parts(scores, labels, mask, ties, dtype, ratio=True)
    is_empty = ideal <= 0
    out = value / torch.where(is_empty, torch.ones_like(ideal), ideal)
    fill = {"one": 1.0, "zero": 0.0, "skip": float("nan")}[empty]
    out = torch.where(is_empty, torch.full_like(out, fill), out)
    return R.reduce(out, reduction, one_query=p.one_query)


def dcg_error(scores: Any, labels: Any, *, mask: Any = None, ties: str = "input", reduction: str = "mean",
              dtype: torch.dtype | None = None) -> Tensor:
    """The DCG error ``DCG^beta_ideal - DCG^beta`` (Jin & Geng, section 1); >= 0.

    A difference of two sums of order ``n^2 * max label`` that are nearly equal for a good ranking:
    as for :func:`pairwise_error`, scores and labels are taken in ``dtype`` (ties are those of
    ``dtype``), the sums are accumulated in float64 and the result is returned in ``dtype``. In
    float32 the difference lost every digit from a few thousand items on (1e5 items, one misordered
    pair: -1024 for 1) and two large labels' sums overflowed to inf - inf = NaN.
    """
    R.check_choice(reduction, R.REDUCTIONS, "reduction")
    value, ideal, p = _beta_parts(scores, labels, mask, ties, dtype, wide=True)
    out = (ideal - value).clamp_min(0.0)  # >= 0 in exact arithmetic; real labels may round below
    return R.reduce(out.to(p.scores.device, p.scores.dtype), reduction, one_query=p.one_query)


def _wide(p: R.Prepared) -> R.Prepared:
    """``p`` in float64, on a device that has it (the CPU for Apple's MPS), for sums that cancel."""
    where = _float64_device(p.scores.device)
    return R.Prepared(p.scores.to(where, torch.float64), p.labels.to(where, torch.float64), p.mask.to(where),
                      p.one_query)


def pairwise_error(scores: Any, labels: Any, *, mask: Any = None, normalize: bool = False,
                   reduction: str = "mean", dtype: torch.dtype | None = None) -> Tensor:
    """The multipartite pairwise error R(f) (Jin & Geng, eq. 4), or R-hat(f) = R(f)/Z (eq. 3).

    ``R(f) = sum over pairs (i, j) with y_i > y_j and f(x_i) < f(x_j) of (y_i - y_j)``: each
    strictly misordered pair weighted by its label difference; tied scores count nothing.

    Computed by the paper's theorem (eq. 5) rather than over pairs: R(f) is the DCG^beta error of
    the ranking, and since a tied pair counts nothing in R(f), it is the error of the *optimistic*
    order of tied scores (higher label first), where tied pairs cost nothing either. That is a
    sort per query, O(n log n), batched on the inputs' device. Scores and labels are taken in
    ``dtype`` (default: the inputs' floating dtype), the sums are accumulated in float64 (exact
    for integer labels while n^2 * max label < 2^53), and the result is returned in ``dtype`` on
    the inputs' device. On a device without float64 (Apple's MPS) the sums run on the CPU.
    ``Z`` (pairs with different labels) comes from the sorted labels the same way.

    With ``normalize=True`` a query with Z = 0 (all labels equal) is NaN and skipped by the
    reductions.

    Examples
    --------
    >>> import torch
    >>> from smoothrank.metrics import pairwise_error
    >>> pairwise_error(torch.tensor([[0.3, 0.2, 0.1]]), torch.tensor([[0, 1, 2]]))
    tensor(4.)
    """
    R.check_choice(reduction, R.REDUCTIONS, "reduction")
    if not isinstance(normalize, bool):
        raise SmoothrankError(f"normalize: expected True or False, got {normalize!r}")
    p = R.prepare(scores, labels, mask, dtype=dtype)
    wide = _wide(p)
    value, ideal, _ = _dcg_and_ideal(wide, k=None, gain="linear", discount="linear", ties="optimistic")
    out = (ideal - value).clamp_min(0.0)  # >= 0 in exact arithmetic; real labels may round below
    if normalize:
        z = _pair_counts(wide.labels, wide.mask)
        out = torch.where(z > 0, out / z.clamp_min(1.0), torch.full_like(out, float("nan")))
    return R.reduce(out.to(p.scores.device, p.scores.dtype), reduction, one_query=p.one_query)


def _float64_device(device: torch.device) -> torch.device:
    """Where float64 sums can run: the inputs' device, or the CPU for one without float64 (MPS)."""
    return device if has_float64(device) else torch.device("cpu")


def _pair_counts(labels: Tensor, mask: Tensor) -> Tensor:
    """Z per query: pairs of real items with different labels, n(n-1)/2 minus the equal pairs.

    Labels are sorted (padding last, as +inf); each real item's number of equal items before it
    is its position minus the first position of its value (``searchsorted``).
    """
    inf = torch.full((), float("inf"), dtype=labels.dtype, device=labels.device)
    ordered = torch.sort(torch.where(mask, labels, inf), dim=-1).values
    first = torch.searchsorted(ordered, ordered, right=False)
    position = torch.arange(ordered.shape[-1], device=labels.device).expand_as(ordered)
    n = mask.sum(dim=-1)
    real = position < n.unsqueeze(-1)
    equal_pairs = torch.where(real, position - first, torch.zeros_like(first)).sum(dim=-1)
    return (n * (n - 1) // 2 - equal_pairs).to(labels.dtype)
