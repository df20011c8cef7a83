"""Pairwise losses: RankNet and LambdaRank (Burges et al. 2005; Burges 2010, "From RankNet to
LambdaRank to LambdaMART"; the RankNet-to-LambdaRank note in the spec folder).

For a pair (i, j) of real items with y_i > y_j and score gap s_ij = s_i - s_j, the RankNet cost is
``C_ij = log(1 + exp(-sigma s_ij)) = softplus(-sigma s_ij)``, evaluated as a softplus so that a gap
of 100 (or 1e4) neither overflows nor loses its gradient. Its derivative is the lambda of the note,
``dC/ds_i = -sigma / (1 + exp(sigma s_ij))``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from smoothrank._checks import within_dtype
from smoothrank.losses import _common as C


def _pairs(labels: Tensor, mask: Tensor) -> Tensor:
    """(batch, n, n) bool: real i, real j with y_i > y_j."""
    real = mask.unsqueeze(-1) & mask.unsqueeze(-2)
    return real & (labels.unsqueeze(-1) > labels.unsqueeze(-2))


_CHUNK_ELEMENTS = 1 << 20  # pair entries per chunk: a few MiB of temporaries at a time


class _WeightedPairCost(torch.autograd.Function):
    """Per-query ``sum_ij w_ij softplus(-sigma (s_i - s_j))`` with constant weights w.

    Written as a custom function so that only the scores and the weights are kept for the
    backward pass (autograd would also keep the (batch, n, n) differences and costs), and the
    pair matrices are formed a chunk of queries at a time. The gradient is
    ``d/ds_i = -sigma (sum_j c_ij - sum_j c_ji)`` with ``c_ij = w_ij sigmoid(-sigma (s_i - s_j))``.
    """

    @staticmethod
    def forward(ctx, scores, weights, sigma):  # type: ignore[override]
        b, n = scores.shape
        chunk = max(1, _CHUNK_ELEMENTS // max(1, n * n))
        out = scores.new_zeros(b)
        for lo in range(0, b, chunk):
            s = scores[lo:lo + chunk]
            diff = s.unsqueeze(-1) - s.unsqueeze(-2)
            w = weights[lo:lo + chunk]
            # A gap times sigma beyond the dtype's range is an inf cost; where no pair is weighed
            # (w = 0) it must count 0, not 0 * inf = NaN.
            cost = torch.where(w > 0, w * F.softplus(diff.mul_(-sigma)), 0.0)
            out[lo:lo + chunk] = cost.sum((-1, -2))
        ctx.save_for_backward(scores, weights)
        ctx.sigma, ctx.chunk = sigma, chunk
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        scores, weights = ctx.saved_tensors
        if torch.is_grad_enabled():
            # create_graph=True (a booster's Hessian, smoothrank.boosting): the same gradient from
            # out-of-place operations that autograd differentiates once more.
            c = torch.sigmoid(-ctx.sigma * (scores.unsqueeze(-1) - scores.unsqueeze(-2))) * weights
            return -ctx.sigma * (c.sum(-1) - c.sum(-2)) * grad_out.unsqueeze(-1), None, None
        grad = torch.zeros_like(scores)
        for lo in range(0, scores.shape[0], ctx.chunk):
            s = scores[lo:lo + ctx.chunk]
            diff = s.unsqueeze(-1) - s.unsqueeze(-2)
            c = torch.sigmoid(diff.mul_(-ctx.sigma)).mul_(weights[lo:lo + ctx.chunk])
            # sigma applied after the sums: at a huge sigma a sum may overflow to inf, never to
            # inf - inf = NaN.
            net = (c.sum(-1) - c.sum(-2)).mul_(-ctx.sigma)
            grad[lo:lo + ctx.chunk] = net * grad_out[lo:lo + ctx.chunk].unsqueeze(-1)
        return grad, None, None


def _weighted_pair_cost(scores: Tensor, weights: Tensor, sigma: float) -> Tensor:
    return _WeightedPairCost.apply(scores, weights.detach(), sigma)


def _in_top_k(scores: Tensor, mask: Tensor, k: int | None) -> Tensor:
    """(batch, n, n) bool: pairs with at least one item in the predicted top k (all if k is None)."""
    if k is None:
        return torch.ones(*mask.shape, mask.shape[-1], dtype=torch.bool, device=mask.device)
    top = C.predicted_ranks(scores, mask) <= k
    return top.unsqueeze(-1) | top.unsqueeze(-2)


def rank_net(scores: Tensor, labels: Tensor, *, mask: Tensor | None = None, reduction: str = "mean",
             sigma: float = 1.0, k: int | None = None) -> Tensor:
    r"""RankNet: the mean logistic pair cost of a query.

    .. math::
        \ell = \frac{1}{|I|} \sum_{(i,j) \in I} \log\big(1 + e^{-\sigma (s_i - s_j)}\big)

    over the pairs I of real items with y_i > y_j. With a cutoff ``k`` only pairs with *at least
    one* item in the predicted top k (by the current scores, ties in input order) are kept, so a
    relevant document ranked k+1 below an irrelevant one in the top k still gets a gradient.
    A query with no such pair (or no relevant document) contributes 0 and is not counted by
    ``reduction="mean"``.
    """
    sigma = C.check_positive(sigma, "sigma")
    k = C.check_k(k)
    C.check_reduction(reduction)
    scores, labels, mask = C.check_inputs(scores, labels, mask)
    sigma = within_dtype(sigma, scores.dtype, divides=False)
    pairs = _pairs(labels, mask) & _in_top_k(scores, mask, k)
    n_pairs = pairs.sum((-1, -2)).to(scores.dtype)
    # No relevant document (every label <= 0, e.g. negative labels): 0, as for every other loss.
    valid = (n_pairs > 0) & C.has_relevant(labels, mask)
    weights = pairs.to(scores.dtype) / n_pairs.clamp_min(1.0).view(-1, 1, 1)
    per_query = _weighted_pair_cost(scores, weights, sigma)
    return C.reduce(per_query, valid, reduction)


def lambda_rank(scores: Tensor, labels: Tensor, *, mask: Tensor | None = None, reduction: str = "mean",
                sigma: float = 1.0, k: int | None = None, gain: Any = "exp2", discount: Any = "log2"
                ) -> Tensor:
    r"""LambdaRank: RankNet pair costs weighted by |Delta NDCG@k| of swapping the pair.

    .. math::
        \ell = \sum_{y_i > y_j} |\Delta \mathrm{NDCG}_{ij}| \log\big(1 + e^{-\sigma (s_i - s_j)}\big),
        \qquad |\Delta \mathrm{NDCG}_{ij}| = \frac{|g_i - g_j|\,|d(r_i) - d(r_j)|}{\mathrm{IDCG@k}}

    with r the current predicted ranks (ties in input order, no gradient through them) and d
    zeroed beyond rank k. Its gradient is exactly the lambdas of the note:
    ``d ell / d s_i = sum_j lambda_ij`` with
    ``lambda_ij = -sigma |Delta NDCG_ij| / (1 + exp(sigma (s_i - s_j)))`` for y_i > y_j
    (and the opposite sign for the lower item). Truncation at k keeps every pair with
    an item in the top k, including a relevant document at rank k+1 below an irrelevant one in the
    top k. The per-query value is a sum over pairs (already normalised by IDCG@k); queries without
    a relevant document, or without a pair of different labels, contribute 0 and are not counted
    by ``reduction="mean"``.
    """
    sigma = C.check_positive(sigma, "sigma")
    k = C.check_k(k)
    C.check_reduction(reduction)
    C.check_gain_discount(gain, discount)
    scores, labels, mask = C.check_inputs(scores, labels, mask)
    sigma = within_dtype(sigma, scores.dtype, divides=False)
    g = C.real_gains(labels, mask, gain)
    disc_by_rank = C.rank_discounts(mask, discount, k, scores.dtype)
    ideal = C.ideal_dcg(g, mask, disc_by_rank)
    valid = C.has_relevant(g, mask) & (ideal > 0)
    ranks = C.predicted_ranks(scores, mask)
    d_item = torch.gather(disc_by_rank, -1, (ranks - 1).clamp(max=mask.shape[-1] - 1))
    d_item = torch.where(mask, d_item, torch.zeros_like(d_item))
    ideal_safe = torch.where(valid, ideal, torch.ones_like(ideal)).unsqueeze(-1).unsqueeze(-1)
    delta = ((g.unsqueeze(-1) - g.unsqueeze(-2)).abs() * (d_item.unsqueeze(-1) - d_item.unsqueeze(-2)).abs()
             / ideal_safe)
    pairs = _pairs(labels, mask)
    valid = valid & pairs.any(-1).any(-1)  # all labels equal: no pair, not counted by "mean"
    weights = torch.where(pairs, delta, torch.zeros_like(delta))
    per_query = _weighted_pair_cost(scores, weights, sigma)
    return C.reduce(per_query, valid, reduction)
