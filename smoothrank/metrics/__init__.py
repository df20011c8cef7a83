"""Exact rank metrics (float64 on request) under explicit, named conventions.

Batched over queries: ``scores`` and ``labels`` of shape ``(batch, list_size)`` with a boolean
``mask`` (True = real item, padding anywhere in a row); 1-D inputs are one query and give a scalar.
numpy arrays are accepted. See :mod:`smoothrank.metrics.conventions` for the presets ``letor4``,
``lightgbm`` and ``trec``, and ``docs/metrics.md``.
"""

from smoothrank.metrics.binary import average_precision, precision, reciprocal_rank
from smoothrank.metrics.conventions import LETOR4, LIGHTGBM, PRESETS, TREC, Convention, get_convention
from smoothrank.metrics.evaluate import (
    LETOR4_METRICS,
    evaluate,
    evaluate_flat,
    mean_metrics,
    pad_groups,
    parse_metric,
)
from smoothrank.metrics.linear import dcg_beta, dcg_error, ndcg_beta, pairwise_error
from smoothrank.metrics.ndcg import dcg, ndcg

__all__ = [
    "LETOR4",
    "LETOR4_METRICS",
    "LIGHTGBM",
    "PRESETS",
    "TREC",
    "Convention",
    "average_precision",
    "dcg",
    "dcg_beta",
    "dcg_error",
    "evaluate",
    "evaluate_flat",
    "get_convention",
    "mean_metrics",
    "ndcg",
    "ndcg_beta",
    "pad_groups",
    "pairwise_error",
    "parse_metric",
    "precision",
    "reciprocal_rank",
]
