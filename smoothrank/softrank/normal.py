"""Normal approximation of the Rank-Binomial, and the exact/normal hybrid (SoftRank, section 3.6).

The rank of document ``j`` is a sum of independent Bernoulli(pi_ij) variables, so for long
lists it is close to a normal with

    mu_j = sum_{i != j} pi_ij,      v_j = sum_{i != j} pi_ij (1 - pi_ij).

Discretisation (continuity correction): rank ``r`` of a list with ``n_b`` real items receives the
normal mass of the interval ``[r - 1/2, r + 1/2)``; the two tails are folded into the end ranks
(rank 0 takes ``(-inf, 1/2)``, rank ``n_b - 1`` takes ``[n_b - 3/2, inf)``), so that every row sums
to exactly 1 over the ``n_b`` possible ranks:

    p_j(r) = Phi((r + 1/2 - mu_j) / sd_j) - Phi((r - 1/2 - mu_j) / sd_j),   sd_j = sqrt(max(v_j, eps)).

``eps = 1e-6`` (a standard deviation of 1/1000 of a rank) keeps a deterministic document (all
``pi`` at 0 or 1, ``v = 0``) finite: its mass then sits on the nearest rank, as it should.

Hybrid: the exact recursion for the ``n_exact`` documents with the best expected ranks and the
``n_exact`` with the worst (where the normal shape is poorest: the Rank-Binomial is skewed against
the ends of the list), the normal approximation for the others.
"""

from __future__ import annotations

import torch
from torch import Tensor

from smoothrank.softrank.pairwise import default_mask
from smoothrank.softrank.rank_binomial import rank_distributions

VARIANCE_FLOOR = 1e-6


def normal_rank_distributions(pi: Tensor, *, mask: Tensor | None = None,
                              max_rank: int | None = None) -> Tensor:
    """Discretised normal approximation of every Rank-Binomial distribution.

    Parameters
    ----------
    pi : Tensor, shape (batch, n, n)
        Contest probabilities ``pi[b, i, j] = P(i beats j)``, zero on the diagonal and padding.
    mask : Tensor of bool, shape (batch, n), optional
        True for real items.
    max_rank : int, optional
        Number of leading ranks returned; default ``n``.

    Returns
    -------
    Tensor, shape (batch, n, R)
        Zero rows for padded documents and zero columns for ranks ``>= n_b`` (the number of real
        items of the query); differentiable through ``pi`` by autograd (``O(batch n R)`` memory).
    """
    n = pi.shape[-1]
    mask = default_mask(pi[:, 0, :], mask)
    n_ranks = n if max_rank is None else min(int(max_rank), n)
    mean = pi.sum(dim=1)
    var = (pi * (1.0 - pi)).sum(dim=1)
    sd = var.clamp_min(VARIANCE_FLOOR).sqrt()
    n_real = mask.sum(dim=1, keepdim=True)  # (batch, 1)
    ranks = torch.arange(n_ranks + 1, device=pi.device, dtype=pi.dtype) - 0.5  # edges r - 1/2
    z = (ranks[None, None, :] - mean[..., None]) / sd[..., None]
    cdf = torch.special.ndtr(z)
    edge_index = torch.arange(n_ranks + 1, device=pi.device)
    # Fold the tails: the lower edge of rank 0 is -inf, the upper edge of rank n_b - 1 is +inf.
    cdf = torch.where(edge_index[None, None, :] == 0, torch.zeros_like(cdf), cdf)
    upper = (edge_index[None, :] >= n_real)[:, None, :]  # edges at or beyond n_b - 1/2
    cdf = torch.where(upper, torch.ones_like(cdf), cdf)
    p = cdf[..., 1:] - cdf[..., :-1]
    return p * mask[..., None].to(p.dtype)


def hybrid_rank_distributions(pi: Tensor, *, mask: Tensor | None = None, max_rank: int | None = None,
                              n_exact: int = 10, backend: str = "auto") -> Tensor:
    """Exact distributions for the ``n_exact`` best and ``n_exact`` worst documents, normal otherwise.

    "Best" and "worst" are by expected rank ``sum_i pi_ij`` among the real items of each query;
    with ``2 n_exact >= n_b`` every document of the query is exact. Gradients flow through both
    parts (the choice of documents itself is piecewise constant).
    """
    mask = default_mask(pi[:, 0, :], mask)
    with torch.no_grad():
        mean = pi.sum(dim=1)
        big = torch.finfo(mean.dtype).max
        best_key = torch.where(mask, mean, torch.full_like(mean, big))
        worst_key = torch.where(mask, -mean, torch.full_like(mean, big))
        order_best = best_key.argsort(dim=1, stable=True).argsort(dim=1, stable=True)
        order_worst = worst_key.argsort(dim=1, stable=True).argsort(dim=1, stable=True)
        select = ((order_best < n_exact) | (order_worst < n_exact)) & mask
    exact = rank_distributions(pi, mask=mask, max_rank=max_rank, select=select, backend=backend)
    approx = normal_rank_distributions(pi, mask=mask, max_rank=max_rank)
    return torch.where(select[..., None], exact, approx)
