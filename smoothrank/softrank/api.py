"""Rank distributions from scores: smoothing, contests, Rank-Binomial (exact/normal/hybrid), Sinkhorn."""

from __future__ import annotations

import torch
from torch import Tensor

from smoothrank._checks import (
    check_bool,
    check_nonnegative,
    check_positive_int,
    check_scores_mask,
    within_dtype,
)
from smoothrank._devices import wide_dtype
from smoothrank.errors import SmoothrankError
from smoothrank.softrank.normal import (
    _hybrid_rank_distributions,
    check_n_exact,
    score_hybrid_rank_distributions,
    score_normal_rank_distributions,
)
from smoothrank.softrank.pairwise import check_sigma, default_mask, pairwise_probabilities
from smoothrank.softrank.rank_binomial import (
    _rank_distributions,
    can_fuse,
    check_backend,
    score_rank_distributions,
)

METHODS = ("exact", "normal", "hybrid")


def check_method(method: str) -> str:
    if method not in METHODS:
        raise SmoothrankError(f"method: expected one of {METHODS}, got {method!r}")
    return method


def sinkhorn_rank_matrix(p: Tensor, mask: Tensor | None = None, *, max_iter: int = 30,
                         tol: float = 1e-6) -> Tensor:
    """Sinkhorn scaling of the ``[p_j(r)]`` matrix to doubly stochastic (SoftRank section 3.2).

    Rows are the real documents, columns the real ranks ``0..n_b - 1`` of each query; the scaling
    is the shared :func:`smoothrank.sorting.sinkhorn` of NeuralNDCG, with separate row and column
    masks so that padding may sit anywhere in the row. ``p`` must be square (all ranks).

    Every real entry is raised by ``eps**2`` of the dtype first (about 1e-14 in float32): on long
    lists the probabilities of extreme ranks underflow, a rank column can be exactly zero, and a
    matrix with an empty column has no doubly stochastic scaling (the scaling vectors overflow and
    the gradient becomes NaN). The floor changes no probability above it by more than rounding.
    """
    from smoothrank.sorting import rank_mask, sinkhorn

    if not isinstance(p, Tensor) or p.dim() != 3 or not p.is_floating_point():
        raise SmoothrankError("p: expected a floating tensor of shape (batch, n, n)")
    if p.shape[-1] != p.shape[-2]:
        raise SmoothrankError("sinkhorn: needs the full rank distributions (max_rank = n)")
    mask = default_mask(p[..., 0], mask)
    ranks = rank_mask(mask)
    real = mask.unsqueeze(-1) & ranks.unsqueeze(-2)
    floor = torch.finfo(p.dtype).eps ** 2
    p = p + floor * real.to(p.dtype)
    return sinkhorn(p, mask=(mask, ranks), max_iter=max_iter, tol=tol)


def soft_rank(scores: Tensor, *, sigma: float = 1.0, mask: Tensor | None = None,
              max_rank: int | None = None, method: str = "exact", n_exact: int = 10,
              sinkhorn: bool = False, max_iter: int = 30, tol: float = 1e-6,
              backend: str = "auto") -> Tensor:
    """SoftRank rank distributions ``p[b, j, r] = P(rank of item j = r)`` (0-based ``r``).

    Scores are smoothed into ``N(s_j, sigma^2)`` (eq. 8), turned into contest probabilities (eq. 9)
    and into rank distributions: the exact Rank-Binomial recursion (eqs. 11-12, ``method="exact"``),
    its normal approximation (section 3.6, ``"normal"``) or the hybrid (``"hybrid"``: ``n_exact``
    documents exact at each end of the expected ranking). ``sinkhorn=True`` then scales the
    document-by-rank matrix to doubly stochastic (section 3.2; computed over all ranks and cut to
    ``max_rank`` afterwards, in float64 wherever the device has it: Sinkhorn magnifies what a
    narrower dtype loses in the tails).

    Returns
    -------
    Tensor, shape (batch, n, R), ``R = min(max_rank, n)``; zero rows for padded items.

    Examples
    --------
    >>> import torch
    >>> from smoothrank.softrank import soft_rank
    >>> r = soft_rank(torch.tensor([[2.0, 1.0, 0.0]]), sigma=0.5)
    >>> r.shape
    torch.Size([1, 3, 3])
    >>> r.sum(-1).round(decimals=4)
    tensor([[1., 1., 1.]])
    """
    mask = check_scores_mask(scores, mask)  # NaN or inf at a real position is refused, as by the losses
    if scores.dtype in (torch.float16, torch.bfloat16):
        # As the losses do: contests summed over a long list in half precision lose whole ranks
        # (the moments of n = 1500 were 30-50% off); compute in float32, return the scores' dtype.
        return soft_rank(scores.float(), sigma=sigma, mask=mask, max_rank=max_rank, method=method,
                         n_exact=n_exact, sinkhorn=sinkhorn, max_iter=max_iter, tol=tol,
                         backend=backend).to(scores.dtype)
    sigma = within_dtype(check_sigma(sigma), scores.dtype, divides=True)
    check_method(method)
    check_backend(backend)
    check_n_exact(n_exact)
    mask = default_mask(scores, mask)
    n = scores.shape[-1]
    if max_rank is not None:
        max_rank = check_positive_int(max_rank, "max_rank")
    check_bool(sinkhorn, "sinkhorn")
    max_iter, tol = check_positive_int(max_iter, "max_iter"), check_nonnegative(tol, "tol")
    n_ranks = n if max_rank is None else min(max_rank, n)
    inner_ranks = n if sinkhorn else n_ranks
    if n == 0:
        return scores.new_zeros(scores.shape[0], 0, 0)
    wide = wide_dtype(scores.dtype, scores.device)
    if sinkhorn and scores.dtype != wide:
        # Sinkhorn scales the rank columns by up to the inverse of their mass, which on long lists
        # is tiny at the extreme ranks: it magnified what float32 loses there (the eps^2 floor,
        # underflowed tails) into a loss 3e-3 and gradients 94% off float64's at n = 300. The whole
        # computation runs in float64 (half-precision scores too, whatever the backend) and returns
        # in the scores' dtype.
        return soft_rank(scores.to(wide), sigma=sigma, mask=mask, max_rank=max_rank, method=method,
                         n_exact=n_exact, sinkhorn=True, max_iter=max_iter, tol=tol,
                         backend=backend).to(scores.dtype)
    safe = torch.where(mask, scores, torch.zeros_like(scores))
    p = None
    if method == "exact" and can_fuse(scores, backend):
        # Compiled kernels, contests formed a chunk of queries at a time and never kept.
        p = score_rank_distributions(safe, sigma=sigma, mask=mask, max_rank=inner_ranks)
    elif method == "normal":
        # Moments by a chunked custom Function: no (batch, n, n) tensor kept for the backward.
        p = score_normal_rank_distributions(safe, sigma=sigma, mask=mask, max_rank=inner_ranks)
    elif method == "hybrid" and can_fuse(scores, backend):
        p = score_hybrid_rank_distributions(safe, sigma=sigma, mask=mask, max_rank=inner_ranks,
                                            n_exact=n_exact)
    if p is not None:
        if sinkhorn:
            p = sinkhorn_rank_matrix(p, mask, max_iter=max_iter, tol=tol)[..., :n_ranks]
        return p
    pi = pairwise_probabilities(scores, sigma=sigma, mask=mask)  # valid, 0 on the diagonal and padding
    if method == "exact":
        p = _rank_distributions(pi, mask, inner_ranks, backend=backend)
    else:
        p = _hybrid_rank_distributions(pi, mask, inner_ranks, n_exact=n_exact, backend=backend)
    if sinkhorn:
        p = sinkhorn_rank_matrix(p, mask, max_iter=max_iter, tol=tol)[..., :n_ranks]
    return p


__all__ = ["METHODS", "sinkhorn_rank_matrix", "soft_rank"]
