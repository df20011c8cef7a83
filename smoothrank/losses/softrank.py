"""The SoftNDCG loss (Taylor, Guiver, Robertson & Minka, SoftRank, WSDM 2008, eqs. 13-15)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from smoothrank._checks import check_bool, check_nonnegative, check_positive_int, within_dtype
from smoothrank.losses import _common as C
from smoothrank.softrank.api import check_method, check_n_exact, soft_rank
from smoothrank.softrank.normal import score_hybrid_expected_discounts, score_normal_expected_discounts
from smoothrank.softrank.pairwise import check_sigma
from smoothrank.softrank.rank_binomial import (
    can_fuse,
    can_use_jacobian,
    check_backend,
    score_exact_expected_discounts,
)


def soft_ndcg(scores: Tensor, labels: Tensor, *, mask: Tensor | None = None, reduction: str = "mean",
              sigma: float = 1.0, k: int | None = None, method: str = "exact", sinkhorn: bool = False,
              n_exact: int = 10, gain: Any = "exp2", discount: Any = "log2", max_iter: int = 30,
              tol: float = 1e-6, backend: str = "auto") -> Tensor:
    r"""Minus SoftNDCG@k: the expected NDCG under SoftRank's rank distributions.

    .. math::
        \mathcal{G}_k = G_{k,\max}^{-1} \sum_j g(y_j)\, \mathbb{E}[D(r_j)]
                      = G_{k,\max}^{-1} \sum_j g(y_j) \sum_{r=0}^{k-1} D(r + 1)\, p_j(r)   \qquad (14, 15)

    where ``p_j(r)`` is the Rank-Binomial distribution of item ``j`` (eq. 12) induced by Gaussian
    score smoothing (eqs. 8-9), ``D`` the discount of 1-based ranks (zero beyond ``k``) and
    ``G_{k,max}`` the ideal DCG@k of the hard labels. It is the expectation of the discount, never
    the discount of the expected rank. Ranks ``>= k`` carry no discount, so only ranks ``< k`` are
    computed: ``O(n^2 k)`` per query instead of ``O(n^3)``.

    Parameters
    ----------
    scores, labels : Tensor, shape (batch, n)
    mask : bool Tensor (batch, n), optional
        True = real item; padding may sit anywhere and neither competes nor is scored.
    reduction : "mean" | "sum" | "none"
        Queries without a relevant document (or fully padded) contribute 0 with a zero gradient
        and are not counted by "mean" (see :mod:`smoothrank.losses._common`).
    sigma : float > 0
        Standard deviation of the score smoothing. As ``sigma -> 0`` the loss tends to minus the
        exact NDCG@k (for tie-free scores); scaling every score by ``c`` equals dividing ``sigma``
        by ``c`` (section 3.5).
    k : int, optional
        Cutoff; None = the whole list.
    method : "exact" | "normal" | "hybrid"
        Exact Rank-Binomial; its normal approximation (mean ``sum pi``, variance
        ``sum pi (1 - pi)``, continuity-corrected; section 3.6); or exact for the ``n_exact``
        documents with the best and the ``n_exact`` with the worst expected ranks, normal for the
        rest.
    n_exact : int >= 0
        The hybrid's exact documents at each end of the expected ranking (default 10 + 10).
    sinkhorn : bool
        Scale the document-by-rank matrix to doubly stochastic (section 3.2; all ranks are then
        computed, in float64 where the device has it). ``max_iter`` and ``tol`` are passed to
        :func:`smoothrank.sorting.sinkhorn`.
    gain, discount
        The :mod:`smoothrank.gains` vocabulary; for the paper's shallower training discounts pass
        ``discount=smoothrank.gains.shallow_discount(alpha, n)``.
    backend : "auto" | "numba" | "torch" | "fft"
        The exact distribution's implementation: the compiled CPU kernel, the pure-PyTorch
        recursion, or the Fourier form (:mod:`smoothrank.softrank.rank_binomial`); ``"auto"``
        takes the kernel on the CPU and the Fourier form on a GPU. Checked with every ``method``;
        ``"normal"`` uses none of them.

    Returns
    -------
    Tensor
        ``-SoftNDCG`` per query (``reduction="none"``, shape (batch,)) or reduced.
    """
    sigma = check_sigma(sigma)
    check_method(method)
    check_backend(backend)
    check_n_exact(n_exact)
    check_bool(sinkhorn, "sinkhorn")
    max_iter, tol = check_positive_int(max_iter, "max_iter"), check_nonnegative(tol, "tol")

    def smoothed_dcg(t: C.NdcgTerms) -> Tensor:
        scores, mask, disc = t.scores, t.mask, t.discounts
        n = scores.shape[-1]
        n_ranks = n if t.k is None else min(t.k, n)
        if method == "normal" and not sinkhorn:
            # E[D(r_j)] straight from the normal moments: no (batch, n, R) distributions, O(batch n)
            # memory however long the list (checked against the distributions' expectation).
            expected_discount = score_normal_expected_discounts(
                scores, disc[:, :n_ranks], sigma=within_dtype(sigma, scores.dtype, divides=True), mask=mask)
        elif method == "hybrid" and not sinkhorn and can_fuse(scores, backend):
            # The same for the hybrid on the CPU kernels: exact distributions of the end documents only.
            expected_discount = score_hybrid_expected_discounts(
                scores, disc[:, :n_ranks], sigma=within_dtype(sigma, scores.dtype, divides=True), mask=mask,
                n_exact=n_exact)
        elif method == "exact" and not sinkhorn and can_use_jacobian(scores, n_ranks, backend):
            # Exact distributions, their expected discounts and the Jacobian in one pass a query.
            expected_discount = score_exact_expected_discounts(
                scores, disc[:, :n_ranks], sigma=within_dtype(sigma, scores.dtype, divides=True), mask=mask,
                select=t.gains.detach() != 0)  # a document of gain 0 adds nothing: not computed
        else:
            p = soft_rank(scores, sigma=sigma, mask=mask, max_rank=n_ranks, method=method, n_exact=n_exact,
                          sinkhorn=bool(sinkhorn), max_iter=max_iter, tol=tol, backend=backend)
            expected_discount = (p * disc[:, None, :n_ranks]).sum(-1)  # E[D(r_j)], eq. 15
        return (t.gains * expected_discount).sum(-1)

    return C.ndcg_loss(scores, labels, mask, reduction=reduction, gain=gain, discount=discount, k=k,
                       smoothed_dcg=smoothed_dcg)
