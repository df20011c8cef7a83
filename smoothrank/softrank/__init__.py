"""SoftRank (Taylor, Guiver, Robertson & Minka, WSDM 2008): rank distributions from smoothed scores.

* :func:`pairwise_probabilities`, :func:`expected_ranks`: score smoothing and contests (eqs. 8-10).
* :func:`rank_distributions`: the exact Rank-Binomial (eqs. 11-12) with an adjoint backward pass
  (compiled Numba kernel on the CPU; on other devices ``backend="auto"`` takes the Fourier form,
  ``"torch"`` the PyTorch recursion).
* :func:`normal_rank_distributions`, :func:`hybrid_rank_distributions`: section 3.6.
* :func:`soft_rank`: all of the above from scores, with optional Sinkhorn scaling (section 3.2).
* :func:`shallow_discount`: the shallower training discounts of section 4.7 (a picklable
  :class:`ShallowDiscount`).

The loss is :func:`smoothrank.losses.softrank.soft_ndcg` (registry name ``"soft_ndcg"``).
"""

from smoothrank.softrank.api import METHODS, sinkhorn_rank_matrix, soft_rank
from smoothrank.softrank.discounts import ShallowDiscount, shallow_discount
from smoothrank.softrank.normal import hybrid_rank_distributions, normal_rank_distributions
from smoothrank.softrank.pairwise import expected_ranks, pairwise_probabilities
from smoothrank.softrank.rank_binomial import RankBinomial, rank_distributions

__all__ = [
    "METHODS",
    "RankBinomial",
    "ShallowDiscount",
    "expected_ranks",
    "hybrid_rank_distributions",
    "normal_rank_distributions",
    "pairwise_probabilities",
    "rank_distributions",
    "shallow_discount",
    "sinkhorn_rank_matrix",
    "soft_rank",
]
