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

import math
from typing import Any

import torch
from torch import Tensor

from smoothrank import _blocks
from smoothrank._autograd import first_derivative_only
from smoothrank.errors import SmoothrankError
from smoothrank.softrank.pairwise import check_contest_matrix, contest_block, normal_cdf
from smoothrank.softrank.rank_binomial import _rank_distributions

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
    return _normal_rank_distributions(*check_contest_matrix(pi, mask, max_rank)).to(pi.dtype)


def _normal_rank_distributions(pi: Tensor, mask: Tensor, n_ranks: int) -> Tensor:
    """:func:`normal_rank_distributions` on checked inputs (``pi`` zero on its diagonal and padding)."""
    return normal_from_moments(pi.sum(dim=1), (pi * (1.0 - pi)).sum(dim=1), mask, n_ranks)


def normal_from_moments(mean: Tensor, var: Tensor, mask: Tensor, n_ranks: int) -> Tensor:
    """The discretised, tail-folded normal distributions (module docstring) of ranks ``0..R-1``."""
    sd = var.clamp_min(VARIANCE_FLOOR).sqrt()
    n_real = mask.sum(dim=1, keepdim=True)  # (batch, 1)
    ranks = torch.arange(n_ranks + 1, device=mean.device, dtype=mean.dtype) - 0.5  # edges r - 1/2
    z = (ranks[None, None, :] - mean[..., None]) / sd[..., None]
    cdf = normal_cdf(z)
    edge_index = torch.arange(n_ranks + 1, device=mean.device)
    # Fold the tails: the lower edge of rank 0 is -inf, the upper edge of rank n_b - 1 is +inf.
    cdf = torch.where(edge_index[None, None, :] == 0, torch.zeros_like(cdf), cdf)
    upper = (edge_index[None, :] >= n_real)[:, None, :]  # edges at or beyond n_b - 1/2
    cdf = torch.where(upper, torch.ones_like(cdf), cdf)
    p = cdf[..., 1:] - cdf[..., :-1]
    return p * mask[..., None].to(p.dtype)


def _extreme_documents(mean: Tensor, mask: Tensor, n_exact: int) -> Tensor:
    """The ``n_exact`` real documents with the lowest and the ``n_exact`` with the highest ``mean``,
    with tie groups kept whole, so that identical documents are treated alike (one exact and its
    twin approximated got different gradients).

    The group tied with the last document of an end is taken whole if that end then holds at most
    ``2 n_exact`` documents, and left out otherwise (a large group of equal documents, e.g. a
    model's constant start, would make nearly the whole list exact and cost up to 7x the time).
    Means within a few rounding errors of each other count as tied, as sums of one set in another
    order may differ in the last bits."""
    big = torch.finfo(mean.dtype).max
    n_real = mask.sum(dim=1, keepdim=True)
    at = (torch.clamp(n_real, max=n_exact) - 1).clamp_min(0)
    slack = 16 * torch.finfo(mean.dtype).eps * mean.abs().amax(dim=1, keepdim=True)
    chosen = torch.zeros_like(mask)
    for key in (mean, -mean):  # the lowest end, then the highest
        edge = torch.where(mask, key, torch.full_like(key, big)).sort(dim=1).values.gather(1, at)
        inside = mask & (key < edge - slack)
        tied = mask & ~inside & (key <= edge + slack)
        whole = (inside.sum(dim=1, keepdim=True) + tied.sum(dim=1, keepdim=True)) <= 2 * n_exact
        chosen |= inside | (tied & whole)
    return chosen


def check_n_exact(n_exact: int) -> int:
    """``n_exact`` if it is an integer >= 0; else a :class:`SmoothrankError` naming it."""
    if isinstance(n_exact, bool) or not isinstance(n_exact, int) or n_exact < 0:
        raise SmoothrankError(f"n_exact: expected an integer >= 0, got {n_exact!r}")
    return n_exact


def hybrid_rank_distributions(pi: Tensor, *, mask: Tensor | None = None, max_rank: int | None = None,
                              n_exact: int = 10, backend: str = "auto") -> Tensor:
    """Exact distributions for the ``n_exact`` best and ``n_exact`` worst documents, normal otherwise.

    "Best" and "worst" are by expected rank ``sum_i pi_ij`` among the real items of each query;
    with ``2 n_exact >= n_b`` every document of the query is exact. Gradients flow through both
    parts (the choice of documents itself is piecewise constant).
    """
    n_exact = check_n_exact(n_exact)
    return _hybrid_rank_distributions(*check_contest_matrix(pi, mask, max_rank), n_exact=n_exact,
                                      backend=backend).to(pi.dtype)


def _hybrid_rank_distributions(pi: Tensor, mask: Tensor, n_ranks: int, *, n_exact: int,
                               backend: str = "auto") -> Tensor:
    """:func:`hybrid_rank_distributions` on checked inputs (``pi`` zero on its diagonal and padding)."""
    if pi.shape[-1] == 0:
        return pi.new_zeros(pi.shape[0], 0, n_ranks)
    with torch.no_grad():
        select = _extreme_documents(pi.sum(dim=1), mask, n_exact)
    exact = _rank_distributions(pi, mask, n_ranks, select=select, backend=backend)
    approx = _normal_rank_distributions(pi, mask, n_ranks)
    return torch.where(select[..., None], exact, approx)


# ----------------------------------------------------------------------------- from scores, chunked
class ContestMoments(torch.autograd.Function):
    """``scores -> (mu, v)``: ``mu_j = sum_i pi_ij``, ``v_j = sum_i pi_ij (1 - pi_ij)``, a block at a time.

    Autograd through ``pairwise_probabilities`` would keep several ``(batch, n, n)`` tensors until
    the backward; here they live one block of queries (or of one long query's competitors) at a
    time (``smoothrank._blocks``) and are recomputed in the backward, with the exact gradient
    ``dL/dpi_ij = g_mu_j + g_v_j (1 - 2 pi_ij)`` turned into score gradients by eq. 20.
    """

    @staticmethod
    def forward(ctx: Any, scores: Tensor, mask: Tensor, sigma: float) -> tuple[Tensor, Tensor]:
        ctx.save_for_backward(scores, mask)
        ctx.sigma = sigma
        batch, n = scores.shape
        mean, var = scores.new_zeros(batch, n), scores.new_zeros(batch, n)
        s = scores.detach()
        for q, r in _blocks.blocks(batch, n):
            pi, _, _ = contest_block(s[q], mask[q], sigma, rows=r)
            mean[q] += pi.sum(dim=1)
            var[q] += (pi * (1.0 - pi)).sum(dim=1)
        return mean, var

    @staticmethod
    @first_derivative_only("SoftNDCG (its rank distributions)")  # a booster's diagonal Hessian is refused
    def backward(ctx: Any, grad_mean: Tensor, grad_var: Tensor) -> tuple[Tensor | None, None, None]:
        scores, mask = ctx.saved_tensors
        sigma = ctx.sigma
        batch, n = scores.shape
        grad = torch.zeros_like(scores)
        s = scores.detach()
        dens_scale = 1.0 / (2.0 * sigma * math.sqrt(math.pi))
        for q, r in _blocks.blocks(batch, n):
            pi, diff, real = contest_block(s[q], mask[q], sigma, rows=r)
            g = grad_mean[q][:, None, :] + grad_var[q][:, None, :] * (1.0 - 2.0 * pi)
            x = diff * (0.5 / sigma)
            w = torch.where(real, g * torch.exp(-(x * x)) * dens_scale, torch.zeros_like(g))
            grad[q, r] += w.sum(2)
            grad[q] -= w.sum(1)
        return grad, None, None


def _edge_cdf(mean: Tensor, sd: Tensor, n_real: Tensor, n_ranks: int) -> tuple[Tensor, Tensor, Tensor]:
    """Edge CDF values ``c_e`` (tails folded), standardised edges ``u_e`` and the unfolded-edge mask,
    for documents ``mean, sd`` of shape (queries, docs) in queries of ``n_real`` (queries, 1) items."""
    edges = torch.arange(n_ranks + 1, device=mean.device, dtype=mean.dtype) - 0.5
    u = (edges[None, None, :] - mean[..., None]) / sd[..., None]
    index = torch.arange(n_ranks + 1, device=mean.device)
    free = (index[None, :] > 0) & (index[None, :] < n_real)  # (queries, R + 1)
    free = free[:, None, :].expand_as(u)
    lower_one = (index[None, :] >= n_real)[:, None, :].expand_as(u)
    cdf = torch.where(free, normal_cdf(u), lower_one.to(u.dtype))
    return cdf, u, free


def _edge_gradient(mean: Tensor, sd: Tensor, n_real: Tensor, n_ranks: int, g_cdf: Tensor
                   ) -> tuple[Tensor, Tensor]:
    """``dL/dmu`` and ``dL/dsd`` from ``g_cdf = dL/dc_e``: ``dc_e/dmu = -phi(u_e) / sd`` and
    ``dc_e/dsd = -phi(u_e) u_e / sd`` on the unfolded edges (the folded ones are constants)."""
    _, u, free = _edge_cdf(mean, sd, n_real, n_ranks)
    dens = torch.where(free, torch.exp(-0.5 * u * u) * (1.0 / math.sqrt(2.0 * math.pi)), torch.zeros_like(u))
    w = g_cdf * dens / sd[..., None]
    return -w.sum(-1), -(w * u).sum(-1)


def _variance_gradient(grad_sd: Tensor, var: Tensor, sd: Tensor) -> Tensor:
    """``dsd/dv = 1 / (2 sd)`` above the variance floor, 0 below it."""
    return torch.where(var > VARIANCE_FLOOR, grad_sd / (2.0 * sd), torch.zeros_like(sd))


class NormalFromMoments(torch.autograd.Function):
    """``(mu, v) -> p`` of :func:`normal_from_moments` with a hand-written backward, a block at a time.

    Autograd would keep about six ``(batch, n, R + 1)`` tensors; here only ``mu, sd`` are kept and
    the backward recomputes the edges a block of queries (or of one long query's documents) at a
    time. With ``c_e = Phi(u_e)``, ``u_e = (e - 1/2 - mu) / sd`` on the unfolded edges and
    ``p_r = c_{r+1} - c_r``: ``dL/dc_e = G_{e-1} - G_e`` (:func:`_edge_gradient`).
    """

    @staticmethod
    def forward(ctx: Any, mean: Tensor, var: Tensor, mask: Tensor, n_ranks: int) -> Tensor:
        sd = var.clamp_min(VARIANCE_FLOOR).sqrt()
        ctx.save_for_backward(mean, var, sd, mask)
        ctx.n_ranks = n_ranks
        batch, n = mean.shape
        n_real = mask.sum(dim=1, keepdim=True)
        out = mean.new_empty(batch, n, n_ranks)
        for q, r in _blocks.blocks(batch, n, n_ranks + 1):
            cdf, _, _ = _edge_cdf(mean[q, r], sd[q, r], n_real[q], n_ranks)
            out[q, r] = (cdf[..., 1:] - cdf[..., :-1]) * mask[q, r][..., None].to(cdf.dtype)
        return out

    @staticmethod
    @first_derivative_only("SoftNDCG (its rank distributions)")  # a booster's diagonal Hessian is refused
    def backward(ctx: Any, grad_p: Tensor) -> tuple[Tensor, Tensor, None, None]:
        mean, var, sd, mask = ctx.saved_tensors
        n_ranks = ctx.n_ranks
        batch, n = mean.shape
        n_real = mask.sum(dim=1, keepdim=True)
        grad_mean, grad_sd = torch.zeros_like(mean), torch.zeros_like(mean)
        for q, r in _blocks.blocks(batch, n, n_ranks + 1):
            g = grad_p[q, r] * mask[q, r][..., None].to(grad_p.dtype)
            g_cdf = torch.nn.functional.pad(g, (1, 0)) - torch.nn.functional.pad(g, (0, 1))
            grad_mean[q, r], grad_sd[q, r] = _edge_gradient(mean[q, r], sd[q, r], n_real[q], n_ranks, g_cdf)
        return grad_mean, _variance_gradient(grad_sd, var, sd), None, None


class NormalExpectedDiscount(torch.autograd.Function):
    """``(mu, v, D) -> E[D(r_j)] = sum_r D_r p_j(r)`` under the normal distributions, without forming p.

    By summation by parts over the edges, ``E_j = sum_e c_e (D_{e-1} - D_e)`` (``D_{-1} = D_R = 0``),
    so one pass over a block of (documents, edges) gives the expectation and the backward is
    :func:`_edge_gradient` with ``dL/dc_e = g_j (D_{e-1} - D_e)``. SoftNDCG over all ranks of a long
    list needs no (batch, n, n) tensor at all. ``discounts`` (batch, R) is a constant.
    """

    @staticmethod
    def forward(ctx: Any, mean: Tensor, var: Tensor, mask: Tensor, discounts: Tensor) -> Tensor:
        sd = var.clamp_min(VARIANCE_FLOOR).sqrt()
        steps = (torch.nn.functional.pad(discounts, (1, 0)) - torch.nn.functional.pad(discounts, (0, 1)))
        ctx.save_for_backward(mean, var, sd, mask, steps)
        batch, n = mean.shape
        n_ranks = discounts.shape[-1]
        n_real = mask.sum(dim=1, keepdim=True)
        out = torch.zeros_like(mean)
        for q, r in _blocks.blocks(batch, n, n_ranks + 1):
            cdf, _, _ = _edge_cdf(mean[q, r], sd[q, r], n_real[q], n_ranks)
            out[q, r] = (cdf * steps[q, None, :]).sum(-1)
        return torch.where(mask, out, torch.zeros_like(out))

    @staticmethod
    @first_derivative_only("SoftNDCG (its rank distributions)")  # a booster's diagonal Hessian is refused
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, None, None]:
        mean, var, sd, mask, steps = ctx.saved_tensors
        batch, n = mean.shape
        n_ranks = steps.shape[-1] - 1
        n_real = mask.sum(dim=1, keepdim=True)
        grad = torch.where(mask, grad, torch.zeros_like(grad))
        grad_mean, grad_sd = torch.zeros_like(mean), torch.zeros_like(mean)
        for q, r in _blocks.blocks(batch, n, n_ranks + 1):
            g_cdf = grad[q, r][..., None] * steps[q, None, :]
            grad_mean[q, r], grad_sd[q, r] = _edge_gradient(mean[q, r], sd[q, r], n_real[q], n_ranks, g_cdf)
        return grad_mean, _variance_gradient(grad_sd, var, sd), None, None


def score_normal_rank_distributions(scores: Tensor, *, sigma: float, mask: Tensor, max_rank: int) -> Tensor:
    """:func:`normal_rank_distributions` of the contests of ``scores`` without any ``(batch, n, n)``
    or ``(batch, n, R)`` intermediate kept for the backward (``scores`` finite at padded positions)."""
    mean, var = ContestMoments.apply(scores, mask, float(sigma))
    return NormalFromMoments.apply(mean, var, mask, min(int(max_rank), scores.shape[-1]))


def score_normal_expected_discounts(scores: Tensor, discounts: Tensor, *, sigma: float, mask: Tensor
                                    ) -> Tensor:
    """``E[D(r_j)]`` (batch, n) under the normal approximation of the contests of ``scores``, for
    ``discounts`` of the 0-based ranks (batch, R), R <= n: SoftNDCG's expectation without the
    ``(batch, n, R)`` distributions (``scores`` finite at padded positions)."""
    mean, var = ContestMoments.apply(scores, mask, float(sigma))
    return NormalExpectedDiscount.apply(mean, var, mask, discounts.detach())


def score_hybrid_expected_discounts(scores: Tensor, discounts: Tensor, *, sigma: float, mask: Tensor,
                                    n_exact: int) -> Tensor:
    """``E[D(r_j)]`` (batch, n) under the hybrid on the CPU kernels, without the ``(batch, n, R)``
    distributions: the exact distributions of the ``2 n_exact`` documents at the ends of each query
    (``(rows, R)``, :func:`~smoothrank.softrank.rank_binomial.score_selected_rank_distributions`),
    the normal expectation of the others (:class:`NormalExpectedDiscount`); ``discounts`` as in
    :func:`score_normal_expected_discounts`."""
    from smoothrank.softrank.rank_binomial import score_selected_rank_distributions

    discounts = discounts.detach()
    mean, var = ContestMoments.apply(scores, mask, float(sigma))
    select = _extreme_documents(mean.detach(), mask, n_exact) & mask
    approx = NormalExpectedDiscount.apply(mean, var, mask, discounts)
    p = score_selected_rank_distributions(scores, sigma=sigma, mask=mask, max_rank=discounts.shape[-1],
                                          select=select)
    queries, docs = select.nonzero(as_tuple=True)  # row-major, the order of p's rows
    exact = (p * discounts[queries, : p.shape[-1]]).sum(-1)
    return approx.index_put((queries, docs), exact)


def score_hybrid_rank_distributions(scores: Tensor, *, sigma: float, mask: Tensor, max_rank: int,
                                    n_exact: int) -> Tensor:
    """:func:`hybrid_rank_distributions` from the scores, exact part on the fused CPU kernel."""
    from smoothrank.softrank.rank_binomial import score_rank_distributions

    mean, var = ContestMoments.apply(scores, mask, float(sigma))
    n_ranks = min(int(max_rank), scores.shape[-1])
    select = _extreme_documents(mean.detach(), mask, n_exact)
    exact = score_rank_distributions(scores, sigma=sigma, mask=mask, max_rank=n_ranks, select=select)
    approx = NormalFromMoments.apply(mean, var, mask, n_ranks)
    return torch.where(select[..., None], exact, approx)
