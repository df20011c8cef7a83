"""Pairwise losses: RankNet and LambdaRank (Burges et al. 2005; Burges 2010, "From RankNet to
LambdaRank to LambdaMART"; the RankNet-to-LambdaRank note in the spec folder).

For a pair (i, j) of real items with y_i > y_j and score gap s_ij = s_i - s_j, the RankNet cost is
``C_ij = log(1 + exp(-sigma s_ij)) = softplus(-sigma s_ij)``, evaluated as a softplus so that a gap
of 100 (or 1e4) neither overflows nor loses its gradient. Its derivative is the lambda of the note,
``dC/ds_i = -sigma / (1 + exp(sigma s_ij))``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from smoothrank import _blocks
from smoothrank._checks import within_dtype
from smoothrank._devices import wide_dtype
from smoothrank.losses import _common as C


class _PairFactors(NamedTuple):
    """What the pair weights of a loss are built from, each of shape (batch, n) or (batch,).

    ``w_ij = [y_i > y_j, both real, top_i or top_j] |g_i - g_j| |d_i - d_j| / den``, with the top-k
    condition dropped when ``top`` is None and the gain/discount factor when ``gains`` is None.
    ``winners`` and ``losers`` are the labels with padding at -inf and +inf, so one comparison
    ``winners_i > losers_j`` finds the pairs of real items. Kept instead of the (batch, n, n)
    weights so that memory stays O(batch n).
    """

    winners: Tensor
    losers: Tensor
    top: Tensor | None
    gains: Tensor | None
    discounts: Tensor | None
    den: Tensor


def _pair_factors(labels: Tensor, mask: Tensor, den: Tensor, *, top: Tensor | None = None,
                  gains: Tensor | None = None, discounts: Tensor | None = None) -> _PairFactors:
    return _PairFactors(labels.masked_fill(~mask, float("-inf")), labels.masked_fill(~mask, float("inf")),
                        top, gains, discounts, den)


def _flags_only(f: _PairFactors) -> bool:
    """Whether the weights are 0/1 flags (times 1/den): no gain or discount factor."""
    return f.gains is None or f.discounts is None


def _block_weights(f: _PairFactors, q: slice, r: slice) -> Tensor:
    """``den * w_ij`` for queries q, rows i in r, all columns j, shape (queries, rows, n): a bool
    tensor without gains, floating with them."""
    pairs = f.winners[q, r].unsqueeze(-1) > f.losers[q].unsqueeze(-2)
    if f.top is not None:
        pairs &= f.top[q, r].unsqueeze(-1) | f.top[q].unsqueeze(-2)
    if f.gains is None or f.discounts is None:  # flags only
        return pairs
    g, d = f.gains[q], f.discounts[q]
    gaps = (g[:, r].unsqueeze(-1) - g.unsqueeze(-2)).abs_()
    return gaps.mul_((d[:, r].unsqueeze(-1) - d.unsqueeze(-2)).abs_()).masked_fill_(~pairs, 0.0)


def _weigh(w: Tensor, x: Tensor) -> Tensor:
    """``w * x`` where ``w > 0``, else 0 (never 0 * inf = NaN); in place on x."""
    if w.dtype == torch.bool:
        return x.masked_fill_(~w, 0.0)
    return x.mul_(w).masked_fill_(w <= 0, 0.0)


def _pair_differences(scores: Tensor, q: slice, r: slice) -> Tensor:
    s = scores[q]
    return s[:, r].unsqueeze(-1) - s.unsqueeze(-2)


# softplus(x) is taken as x from here on. PyTorch's default, 20, drops log1p(exp(-x)) of up to 2e-9,
# float64's 9th digit (a cost of 21 for 21.000000000758); past 40 the dropped term is below float64's
# resolution at x, and exp(40) is far inside float32's range (pair costs are never half precision).
_SOFTPLUS_LINEAR = 40.0


def _pair_cost_sums(scores: Tensor, sigma: float, f: _PairFactors, dtype: torch.dtype,
                    kept: Tensor | None) -> Tensor:
    """(batch,) ``sum_ij den w_ij softplus(-sigma (s_i - s_j))``, the pair matrices formed a block at
    a time; the weights go to ``kept`` when given. Summed in ``dtype``: in float32, n^2 pair costs of
    1e36 overflow where their mean does not."""
    total = scores.new_zeros(scores.shape[0], dtype=dtype)
    for q, r in _blocks.blocks(*scores.shape):
        w = _block_weights(f, q, r)
        # A gap times sigma beyond the dtype's range is an inf cost; where no pair is weighed it
        # must count 0, not 0 * inf = NaN.
        cost = _weigh(w, F.softplus(_pair_differences(scores, q, r).mul_(-sigma), threshold=_SOFTPLUS_LINEAR))
        total[q] += cost.sum((-1, -2), dtype=dtype)
        if kept is not None:  # written block by block (a list then torch.cat holds it twice)
            kept[q] = w
    return total


class _WeightedPairCost(torch.autograd.Function):
    """Per-query ``sum_ij w_ij softplus(-sigma (s_i - s_j))`` with constant weights w.

    A custom function so that the pair matrices are formed a block at a time and only O(batch n)
    tensors (the scores and the factors of the weights) are kept for the backward pass, plus the
    weights of a small batch (see ``smoothrank._blocks``). The gradient is
    ``d/ds_i = -sigma (sum_j c_ij - sum_j c_ji)`` with ``c_ij = w_ij sigmoid(-sigma (s_i - s_j))``.
    """

    @staticmethod
    def forward(ctx, scores, sigma, *factors):
        f = _PairFactors(*factors)
        b, n = scores.shape
        kept_dtype = torch.bool if _flags_only(f) else scores.dtype
        kept = scores.new_empty(b, n, n, dtype=kept_dtype) if _blocks.keeps(b, n) else None
        wide = wide_dtype(scores.dtype, scores.device)
        total = _pair_cost_sums(scores, sigma, f, wide, kept)
        if wide != scores.dtype and not bool(torch.isfinite(total).all()):
            # A score gap beyond the dtype's range (6e38 in float32) is an inf cost although the
            # query's mean cost may be representable: the gaps again, in the wide dtype.
            total = _pair_cost_sums(scores.to(wide), sigma, f, wide, None)
        ctx.save_for_backward(scores, kept, *factors)
        ctx.sigma = sigma
        return (total / f.den).to(scores.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        scores, kept, *factors = ctx.saved_tensors
        f = _PairFactors(*factors)
        none = (None,) * (1 + len(factors))
        scale = grad_out / f.den
        if torch.is_grad_enabled():
            # create_graph=True (a booster's Hessian, smoothrank.boosting): the same gradient from
            # out-of-place operations on the whole (batch, n, n) matrices, which autograd
            # differentiates once more.
            whole = (slice(None), slice(None))
            c = torch.sigmoid(-ctx.sigma * _pair_differences(scores, *whole)) * _block_weights(f, *whole)
            return -ctx.sigma * (c.sum(-1) - c.sum(-2)) * scale.unsqueeze(-1), *none
        net = torch.zeros_like(scores)
        for q, r in _blocks.blocks(*scores.shape):
            w = _block_weights(f, q, r) if kept is None else kept[q]
            c = _weigh(w, torch.sigmoid(_pair_differences(scores, q, r).mul_(-ctx.sigma)))
            net[q, r] += c.sum(-1)
            net[q] -= c.sum(-2)
        # sigma applied after the sums: at a huge sigma a sum may overflow to inf, never to
        # inf - inf = NaN.
        return net.mul_(-ctx.sigma).mul_(scale.unsqueeze(-1)), *none


def _weighted_pair_cost(scores: Tensor, sigma: float, f: _PairFactors) -> Tensor:
    return _WeightedPairCost.apply(scores, sigma, *(None if t is None else t.detach() for t in f))


def _pair_curvature_sums(scores: Tensor, sigma: float, f: _PairFactors) -> Tensor:
    """(batch, n) ``sigma^2 sum_j (w_ij + w_ji) rho_ij (1 - rho_ij) / den``, rho_ij = sigmoid(-sigma
    (s_i - s_j)): the diagonal of the Hessian of ``sum_ij w_ij softplus(-sigma (s_i - s_j)) / den`` per
    query (the weights held constant), its pair matrices formed a block at a time."""
    out = torch.zeros_like(scores)
    for q, r in _blocks.blocks(*scores.shape):
        x = _pair_differences(scores, q, r).mul_(-sigma)
        c = _weigh(_block_weights(f, q, r), torch.sigmoid(x).mul_(torch.sigmoid(x.neg_())))
        out[q, r] += c.sum(-1)  # i the higher-labelled item of the pair
        out[q] += c.sum(-2)  # i the lower one: rho (1 - rho) is symmetric in the pair
    # 1/den before sigma, and sigma twice rather than sigma^2, as the gradient scales its sums: no
    # overflow where the result is representable; only where a sum is positive: 0 * inf is NaN.
    out = out / f.den.unsqueeze(-1)
    return torch.where(out > 0, out * sigma * sigma, 0.0)


def _diagonal(scores: Tensor, sigma: float, f: _PairFactors, valid: Tensor, reduction: str) -> Tensor:
    """The Hessian diagonal of ``C.reduce(_weighted_pair_cost(scores, sigma, f), valid, reduction)``."""
    with torch.no_grad():
        return C.reduce_rows(_pair_curvature_sums(scores.detach(), sigma, f), valid, reduction)


def _count_lower(labels: Tensor, among: Tensor) -> Tensor:
    """(batch, n): for each item i, the number of items j with ``among[j]`` and y_j < y_i."""
    ranked = torch.sort(labels.masked_fill(~among, float("inf")), dim=-1).values
    return torch.searchsorted(ranked, labels.contiguous(), side="left")


def _count_pairs(labels: Tensor, mask: Tensor, top: Tensor | None) -> Tensor:
    """(batch,) the number of pairs of real items with y_i > y_j (and i or j in the top k)."""
    pairs = torch.where(mask, _count_lower(labels, mask), 0).sum(-1)
    if top is None:
        return pairs
    below = mask & ~top
    return pairs - torch.where(below, _count_lower(labels, below), 0).sum(-1)


def _top_k(scores: Tensor, mask: Tensor, k: int | None) -> Tensor | None:
    """(batch, n) bool: items in the predicted top k (None without a cutoff)."""
    return None if k is None else C.predicted_ranks(scores, mask) <= k


def _rank_net_terms(scores: Tensor, labels: Tensor, mask: Tensor | None, reduction: str, sigma: float,
                    k: int | None) -> tuple[Tensor, float, _PairFactors, Tensor]:
    """RankNet's checked scores, sigma, pair weights and counted queries."""
    sigma = C.check_positive(sigma, "sigma")
    k = C.check_k(k)
    C.check_reduction(reduction)
    scores, labels, mask = C.check_inputs(scores, labels, mask)
    sigma = within_dtype(sigma, scores.dtype, divides=False)
    top = _top_k(scores, mask, k)
    n_pairs = _count_pairs(labels, mask, top).to(scores.dtype)
    # No relevant document (every label <= 0, e.g. negative labels): 0, as for every other loss.
    valid = (n_pairs > 0) & C.has_relevant(labels, mask)
    return scores, sigma, _pair_factors(labels, mask, n_pairs.clamp_min(1.0), top=top), valid


def rank_net(scores: Tensor, labels: Tensor, *, mask: Tensor | None = None, reduction: str = "mean",
             sigma: float = 1.0, k: int | None = None) -> Tensor:
    r"""RankNet: the mean logistic pair cost of a query.

    .. math::
        \ell = \frac{1}{|I|} \sum_{(i,j) \in I} \log\big(1 + e^{-\sigma (s_i - s_j)}\big)

    over the pairs I of real items with y_i > y_j. With a cutoff ``k`` only pairs with *at least
    one* item in the predicted top k (by the current scores, ties in input order) are kept, so a
    relevant document ranked k+1 below an irrelevant one in the top k still gets a gradient.
    A query with no such pair (or no relevant document) contributes 0 and is not counted by
    ``reduction="mean"``. The diagonal of its Hessian, in closed form: :func:`rank_net_hessian_diagonal`.

    Examples
    --------
    >>> import torch
    >>> from smoothrank.losses import rank_net
    >>> round(rank_net(torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([[0.0, 1.0, 2.0]])).item(), 4)
    1.5845
    """
    scores, sigma, factors, valid = _rank_net_terms(scores, labels, mask, reduction, sigma, k)
    per_query = _weighted_pair_cost(scores, sigma, factors)
    C.refuse_beyond_range(per_query, valid, scores, "rank_net")
    return C.reduce(per_query, valid, reduction)


def rank_net_hessian_diagonal(scores: Tensor, labels: Tensor, *, mask: Tensor | None = None,
                              reduction: str = "mean", sigma: float = 1.0, k: int | None = None) -> Tensor:
    r"""The diagonal of the Hessian of :func:`rank_net` (same arguments), in closed form.

    .. math::
        \frac{\partial^2 \ell}{\partial s_i^2} = \frac{\sigma^2}{|I|} \sum_{j:\,(i,j) \in I \text{ or }
        (j,i) \in I} \rho_{ij} (1 - \rho_{ij}), \qquad \rho_{ij} = \frac{1}{1 + e^{\sigma (s_i - s_j)}}

    with the pair set I (and its top-k condition) held at the current scores, as autograd holds it.
    Equal to the diagonal autograd gives by one backward pass per list position, in O(n^2) per
    query instead of O(n^3); a GBDT's Newton step (:mod:`smoothrank.boosting`) needs nothing more.
    Shape and dtype of ``scores``; no graph (the scores are read, not differentiated). Zero on
    padded items and on the queries the loss does not count; ``reduction`` scales it as it scales
    the loss (``"none"`` and ``"sum"`` give the same matrix, each row its own query's diagonal).
    """
    shape, dtype = scores.shape if isinstance(scores, Tensor) else None, getattr(scores, "dtype", None)
    scores, sigma, factors, valid = _rank_net_terms(scores, labels, mask, reduction, sigma, k)
    return _diagonal(scores, sigma, factors, valid, reduction).reshape(shape).to(dtype)


def _lambda_rank_terms(scores: Tensor, labels: Tensor, mask: Tensor | None, reduction: str, sigma: float,
                       k: int | None, gain: Any, discount: Any) -> tuple[Tensor, float, _PairFactors, Tensor]:
    """LambdaRank's checked scores, sigma, pair weights (|Delta NDCG| at the current ranks) and counted
    queries."""
    sigma = C.check_positive(sigma, "sigma")
    C.check_reduction(reduction)
    t = C.ndcg_terms(scores, labels, mask, gain=gain, discount=discount, k=k)
    scores, labels, mask, g, disc_by_rank = t.scores, t.labels, t.mask, t.gains, t.discounts
    ideal, valid = t.ideal, t.valid
    sigma = within_dtype(sigma, scores.dtype, divides=False)
    ranks = C.predicted_ranks(scores, mask)
    d_item = torch.gather(disc_by_rank, -1, (ranks - 1).clamp(max=mask.shape[-1] - 1))
    d_item = torch.where(mask, d_item, torch.zeros_like(d_item))
    ideal_safe = torch.where(valid, ideal, torch.ones_like(ideal))
    factors = _pair_factors(labels, mask, ideal_safe, gains=g, discounts=d_item)
    # All labels equal: no pair, not counted by "mean".
    valid = valid & (factors.winners.amax(-1) > factors.losers.amin(-1))
    return scores, sigma, factors, valid


def lambda_rank(scores: Tensor, labels: Tensor, *, mask: Tensor | None = None, reduction: str = "mean",
                sigma: float = 1.0, k: int | None = None, gain: Any = "exp2", discount: Any = "log2"
                ) -> Tensor:
    r"""LambdaRank: RankNet pair costs weighted by ``|Delta NDCG@k|`` of swapping the pair.

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
    by ``reduction="mean"``. The diagonal of its Hessian, LambdaMART's Hessian, in closed form:
    :func:`lambda_rank_hessian_diagonal`.

    Examples
    --------
    >>> import torch
    >>> from smoothrank.losses import lambda_rank
    >>> round(lambda_rank(torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([[0.0, 1.0, 2.0]])).item(), 4)
    1.1069
    """
    scores, sigma, f, valid = _lambda_rank_terms(scores, labels, mask, reduction, sigma, k, gain, discount)
    per_query = _weighted_pair_cost(scores, sigma, f)
    C.refuse_beyond_range(per_query, valid, scores, "lambda_rank")
    return C.reduce(per_query, valid, reduction)


def lambda_rank_hessian_diagonal(scores: Tensor, labels: Tensor, *, mask: Tensor | None = None,
                                 reduction: str = "mean", sigma: float = 1.0, k: int | None = None,
                                 gain: Any = "exp2", discount: Any = "log2") -> Tensor:
    r"""The diagonal of the Hessian of :func:`lambda_rank` (same arguments), in closed form.

    It is LambdaMART's Hessian (Burges 2010, section 7),

    .. math::
        \frac{\partial^2 \ell}{\partial s_i^2} = \sigma^2 \sum_{j:\,y_i \ne y_j}
        |\Delta \mathrm{NDCG}_{ij}|\, \rho_{ij} (1 - \rho_{ij}), \qquad
        \rho_{ij} = \frac{1}{1 + e^{\sigma (s_i - s_j)}}

    with ``|Delta NDCG|`` (and the top-k condition) held at the current ranking, as autograd holds it.
    O(n^2) per query instead of the O(n^3) of one backward pass per list position. Shape, dtype,
    padding and ``reduction`` as in :func:`rank_net_hessian_diagonal`.
    """
    shape, dtype = scores.shape if isinstance(scores, Tensor) else None, getattr(scores, "dtype", None)
    scores, sigma, f, valid = _lambda_rank_terms(scores, labels, mask, reduction, sigma, k, gain, discount)
    return _diagonal(scores, sigma, f, valid, reduction).reshape(shape).to(dtype)
