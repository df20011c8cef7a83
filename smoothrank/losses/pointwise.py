"""Pointwise baseline: RMSE of a bounded relevance prediction (NeuralNDCG paper, section 5.4)."""

from __future__ import annotations

import torch
from torch import Tensor

from smoothrank.errors import SmoothrankError
from smoothrank.losses import _common as C


def rmse(scores: Tensor, labels: Tensor, *, mask: Tensor | None = None, reduction: str = "mean",
         n_levels: int = 5) -> Tensor:
    r"""Root mean squared error of ``n_levels * sigmoid(s)`` against the labels, per query.

    .. math::
        \ell = \sqrt{\tfrac{1}{m} \sum_i \big(L\,\mathrm{sigmoid}(s_i) - y_i\big)^2}

    over the m real items, L = ``n_levels`` (the number of relevance levels: 5 for grades 0-4,
    3 for MQ2008's 0-2). The square root's gradient is taken as zero at an exact fit instead of
    infinite. Queries without a relevant document contribute 0, as for every loss here.
    """
    C.check_reduction(reduction)
    levels = C.check_positive(n_levels, "n_levels")
    scores, labels, mask = C.check_inputs(scores, labels, mask)
    if levels > torch.finfo(scores.dtype).max:  # levels * sigmoid(s) would be inf, its gradient NaN
        raise SmoothrankError(f"n_levels: {n_levels!r} is beyond the range of {scores.dtype} (largest "
                              f"{torch.finfo(scores.dtype).max:.4g}), the dtype the loss computes in")
    valid = C.has_relevant(labels, mask)
    diff = torch.where(mask, levels * torch.sigmoid(scores) - labels, torch.zeros_like(scores))
    # Squared relative to the row's largest error (as hypot does), so that errors past 1e19 in
    # float32 do not overflow to an infinite loss with a zero gradient. sqrt(mean) is homogeneous,
    # so the detached scale leaves value and gradient exact; a power of two, so not even rounding
    # changes.
    largest = diff.detach().abs().amax(-1, keepdim=True)
    scale = torch.ldexp(torch.full_like(largest, 0.5), torch.frexp(largest).exponent)  # 2^(e-1), finite
    scale = torch.where(torch.isfinite(scale) & (largest > 0), scale, torch.ones_like(scale))
    m = mask.sum(-1).to(scores.dtype)
    mse = C.safe_divide(((diff / scale) ** 2).sum(-1), m, m > 0)
    per_query = torch.sqrt(mse.clamp_min(torch.finfo(scores.dtype).tiny)) * scale.squeeze(-1)
    return C.reduce(per_query, valid, reduction)
