"""Differentiable ranking losses, all with one signature.

``loss(scores, labels, *, mask=None, reduction="mean", **options) -> Tensor`` with scores and
labels of shape (batch, list_size), a boolean mask (True = real item; padding anywhere in a row)
and keyword-only options. Losses are minimised: NDCG surrogates return minus the smoothed metric.
Queries without a relevant document, and fully padded rows, contribute exactly 0 with a zero
gradient and are left out of ``reduction="mean"``.

Registry: :func:`register` (with what the package needs to know about a loss, :class:`LossInfo`),
:func:`unregister`, :func:`get`, :func:`available`, :func:`options`, :func:`info`;
:func:`informative_queries` (the queries ``reduction="mean"`` counts, e.g. for a global mean under
DDP). Every other part of the package (boosting, the command line, training configs) reads the
registry, so a loss registered here works everywhere a built-in one does.
"""

from smoothrank.losses._registry import (
    FAMILIES,
    RELEVANCES,
    BoundLoss,
    LossInfo,
    available,
    find,
    get,
    info,
    informative_queries,
    options,
    register,
    resolve_config_forms,
    unregister,
)
from smoothrank.losses.listwise import approx_ndcg, list_mle, list_net, list_net_hessian_diagonal
from smoothrank.losses.neural import neural_ndcg, neural_ndcg_transposed
from smoothrank.losses.pairwise import (
    lambda_rank,
    lambda_rank_hessian_diagonal,
    rank_net,
    rank_net_hessian_diagonal,
)
from smoothrank.losses.pointwise import rmse
from smoothrank.losses.softrank import soft_ndcg

for _name, _fn in (("neural_ndcg", neural_ndcg), ("neural_ndcg_transposed", neural_ndcg_transposed),
                   ("soft_ndcg", soft_ndcg)):
    register(_name, _fn, family="ndcg", relevance="gain", constant_on_equal_labels=True)
register("approx_ndcg", approx_ndcg, family="ndcg", relevance="gain", constant_on_equal_labels=True,
         twice_differentiable=True)
register("lambda_rank", lambda_rank, family="pairwise", relevance="gain", distinct_labels=True,
         constant_on_equal_labels=True, hessian_diagonal=lambda_rank_hessian_diagonal,
         twice_differentiable=True)
register("rank_net", rank_net, family="pairwise", distinct_labels=True, constant_on_equal_labels=True,
         hessian_diagonal=rank_net_hessian_diagonal, twice_differentiable=True)
register("list_net", list_net, family="listwise", hessian_diagonal=list_net_hessian_diagonal,
         twice_differentiable=True)
register("list_mle", list_mle, family="listwise", twice_differentiable=True, random=True)
register("rmse", rmse, family="pointwise", twice_differentiable=True)

__all__ = [
    "FAMILIES",
    "RELEVANCES",
    "BoundLoss",
    "LossInfo",
    "approx_ndcg",
    "available",
    "find",
    "get",
    "info",
    "informative_queries",
    "lambda_rank",
    "lambda_rank_hessian_diagonal",
    "list_mle",
    "list_net",
    "list_net_hessian_diagonal",
    "neural_ndcg",
    "neural_ndcg_transposed",
    "options",
    "rank_net",
    "rank_net_hessian_diagonal",
    "register",
    "resolve_config_forms",
    "rmse",
    "soft_ndcg",
    "unregister",
]
