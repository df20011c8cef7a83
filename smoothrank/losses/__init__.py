"""Differentiable ranking losses, all with one signature.

``loss(scores, labels, *, mask=None, reduction="mean", **options) -> Tensor`` with scores and
labels of shape (batch, list_size), a boolean mask (True = real item; padding anywhere in a row)
and keyword-only options. Losses are minimised: NDCG surrogates return minus the smoothed metric.
Queries without a relevant document, and fully padded rows, contribute exactly 0 with a zero
gradient and are left out of ``reduction="mean"``.

Registry: :func:`get`, :func:`available`, :func:`register`, :func:`options`; :func:`informative_queries`
(the queries ``reduction="mean"`` counts, e.g. for a global mean under DDP).
"""

from smoothrank.losses import softrank as softrank  # registers soft_ndcg
from smoothrank.losses._registry import (
    BoundLoss,
    available,
    get,
    informative_queries,
    options,
    register,
    resolve_config_forms,
)
from smoothrank.losses.listwise import approx_ndcg, list_mle, list_net
from smoothrank.losses.neural import neural_ndcg, neural_ndcg_transposed
from smoothrank.losses.pairwise import lambda_rank, rank_net
from smoothrank.losses.pointwise import rmse
from smoothrank.losses.softrank import soft_ndcg

for _name, _fn in (("neural_ndcg", neural_ndcg), ("neural_ndcg_transposed", neural_ndcg_transposed),
                   ("approx_ndcg", approx_ndcg), ("list_net", list_net), ("list_mle", list_mle),
                   ("rank_net", rank_net), ("lambda_rank", lambda_rank), ("rmse", rmse)):
    register(_name, _fn)

# Further loss modules register themselves on import (one import line each, as softrank above).

__all__ = [
    "BoundLoss",
    "approx_ndcg",
    "available",
    "get",
    "informative_queries",
    "lambda_rank",
    "list_mle",
    "list_net",
    "neural_ndcg",
    "neural_ndcg_transposed",
    "options",
    "rank_net",
    "register",
    "resolve_config_forms",
    "rmse",
    "soft_ndcg",
]
