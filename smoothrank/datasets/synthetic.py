"""Synthetic ranking data with planted relevance, for tests, benchmarks and examples.

Each document has latent factors ``z ~ N(0, 1)`` (one per feature). Its relevance score is
``z @ w / |w|`` plus a per-query shift and noise, and its label is the grade whose band of scores
it falls in: the band edges are the quantiles of the score's distribution that give the requested
label distribution. The observed features are monotone functions of ``z``: "count" columns are
``round(exp(1 + 1.5 z))`` (non-negative, heavy tailed, like term counts and page ranks), the
others ``z`` rounded to ``decimals`` places. A ranker can recover the planted ranking from them;
``signed_log1p`` straightens the count columns.

Data is generated in blocks of :data:`BLOCK_QUERIES` queries, each from its own random stream
(``seed`` and the block's index), so :func:`make_synthetic` and :func:`write_synthetic_letor`
give the same numbers, and a file of any size is written with bounded memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any, NamedTuple

import numpy as np

from smoothrank._atomic import atomic_writer
from smoothrank.data.dataset import Dataset
from smoothrank.errors import SmoothrankError

__all__ = ["BLOCK_QUERIES", "MSLR_LABEL_DISTRIBUTION", "SyntheticRanking", "make_synthetic",
           "write_synthetic_letor"]

#: Queries per random block (part of the generator's definition: changing it changes the data).
BLOCK_QUERIES = 256
#: The share of each grade 0..4 among MSLR-WEB30K's documents.
MSLR_LABEL_DISTRIBUTION = (0.515, 0.325, 0.134, 0.018, 0.008)
_QUERY_SHIFT = 0.5  # standard deviation of the per-query shift of scores


class SyntheticRanking(NamedTuple):
    """Arrays of :func:`make_synthetic`.

    Attributes
    ----------
    features : np.ndarray
        float32, shape (n_docs, n_features).
    labels : np.ndarray
        float32, shape (n_docs,), grades ``0 .. label_levels - 1``.
    query_ids : np.ndarray
        int64, shape (n_docs,), ``1 .. n_queries``; rows of a query are contiguous.
    weights : np.ndarray
        float64, shape (n_features,), the planted relevance weights (on the latent factors).
    """

    features: np.ndarray
    labels: np.ndarray
    query_ids: np.ndarray
    weights: np.ndarray

    def to_dataset(self, source: str = "<synthetic>") -> Dataset:
        """The arrays as a :class:`~smoothrank.data.Dataset`."""
        return Dataset.from_arrays(self.features, self.labels, self.query_ids, source=source)


@dataclass(frozen=True)
class _Spec:
    n_queries: int
    sizes: tuple[int, int]
    n_features: int
    thresholds: np.ndarray
    weights: np.ndarray
    noise: float
    count_columns: np.ndarray
    decimals: int
    seed: int


def make_synthetic(n_queries: int, docs_per_query: int | tuple[int, int], n_features: int, *,
                   label_levels: int = 5, label_distribution: Sequence[float] | None = None,
                   relevance_weights: Sequence[float] | np.ndarray | None = None, noise: float = 0.5,
                   count_fraction: float = 0.5, decimals: int = 3, seed: int = 0) -> SyntheticRanking:
    """Synthetic ranking data with planted relevance, deterministic for a given ``seed``.

    Parameters
    ----------
    n_queries
        Number of queries.
    docs_per_query
        Documents per query: a number, or ``(low, high)`` for sizes drawn uniformly from ``low..high``.
    n_features
        Number of features.
    label_levels
        Number of grades (labels ``0 .. label_levels - 1``).
    label_distribution
        The expected share of each grade (``label_levels`` non-negative numbers, normalised); default
        :data:`MSLR_LABEL_DISTRIBUTION` for 5 levels, else equal shares.
    relevance_weights
        The planted weights, shape (n_features,), on the latent factors; default: standard normal
        weights on a random 30% of the features (at least one), drawn from ``seed``.
    noise
        Standard deviation of the score noise (the planted signal has standard deviation 1).
    count_fraction
        The share of "count" columns (non-negative integers, heavy tailed).
    decimals
        Decimal places of the other columns (what the LETOR file holds exactly).
    seed
        Seed of every random draw.

    Returns
    -------
    SyntheticRanking
        ``features`` (n_docs, n_features) float32, ``labels`` (n_docs,) float32, ``query_ids``
        (n_docs,) int64, ``weights`` (n_features,) float64.

    Examples
    --------
    >>> from smoothrank.datasets import make_synthetic
    >>> data = make_synthetic(4, 5, 3, seed=0)
    >>> data.features.shape, data.labels.shape
    ((20, 3), (20,))
    """
    spec = _spec(n_queries, docs_per_query, n_features, label_levels, label_distribution,
                 relevance_weights, noise, count_fraction, decimals, seed)
    parts = list(_blocks(spec))
    return SyntheticRanking(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                            np.concatenate([p[2] for p in parts]), spec.weights.copy())


def write_synthetic_letor(path: str | os.PathLike[str], n_queries: int,
                          docs_per_query: int | tuple[int, int], n_features: int, **options: Any) -> Path:
    """Write :func:`make_synthetic`'s data (same arguments in ``options``) as a LETOR file.

    Lines are ``<label> qid:<q> 1:<v> ... <n_features>:<v>`` (every feature written, one-based,
    as MSLR-WEB files are); reading the file back gives exactly :func:`make_synthetic`'s arrays.
    The file is written block by block (bounded memory) and atomically.

    Returns
    -------
    Path
        ``path``.
    """
    spec = _spec(n_queries, docs_per_query, n_features, **options)
    cells = ["{:.0f}" if is_count else f"{{:.{spec.decimals}f}}" for is_count in spec.count_columns]
    template = "{:.0f} qid:{} " + " ".join(f"{j + 1}:{cell}" for j, cell in enumerate(cells)) + "\n"
    fmt = template.format
    path = Path(path)
    with atomic_writer(path) as handle:
        for features, labels, qids in _blocks(spec):
            values = features.astype(np.float64).tolist()
            text = "".join(fmt(y, q, *row) for y, q, row in zip(labels.tolist(), qids.tolist(), values,
                                                                 strict=True))
            handle.write(text.encode())
    return path


def _spec(n_queries: int, docs_per_query: int | tuple[int, int], n_features: int, label_levels: int = 5,
          label_distribution: Sequence[float] | None = None,
          relevance_weights: Sequence[float] | np.ndarray | None = None, noise: float = 0.5,
          count_fraction: float = 0.5, decimals: int = 3, seed: int = 0) -> _Spec:
    for name, value in (("n_queries", n_queries), ("n_features", n_features), ("label_levels", label_levels)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise SmoothrankError(f"{name}: expected a positive integer, got {value!r}")
    sizes = _sizes(docs_per_query)
    if not (isinstance(seed, int | np.integer) and not isinstance(seed, bool) and seed >= 0):
        raise SmoothrankError(f"seed: expected a non-negative integer, got {seed!r}")
    if not (isinstance(decimals, int) and 0 <= decimals <= 6):
        raise SmoothrankError(f"decimals: expected an integer from 0 to 6, got {decimals!r}")
    if not (np.isfinite(noise) and noise >= 0):
        raise SmoothrankError(f"noise: expected a finite number >= 0, got {noise!r}")
    if not 0 <= count_fraction <= 1:
        raise SmoothrankError(f"count_fraction: expected a number from 0 to 1, got {count_fraction!r}")
    shares = _shares(label_levels, label_distribution)
    rng = np.random.default_rng([int(seed), 0])
    if relevance_weights is None:
        weights = rng.standard_normal(n_features) * (rng.random(n_features) < 0.3)
        if not weights.any():
            weights[rng.integers(n_features)] = 1.0
    else:
        weights = np.asarray(relevance_weights, dtype=np.float64)
        if weights.shape != (n_features,) or not np.all(np.isfinite(weights)) or not weights.any():
            raise SmoothrankError(f"relevance_weights: expected {n_features} finite numbers, not all 0")
    count_columns = rng.random(n_features) < count_fraction
    spread = float(np.sqrt(1.0 + _QUERY_SHIFT**2 + noise**2))
    dist = NormalDist(0.0, spread)
    edges = np.cumsum(shares)[:-1]
    thresholds = np.asarray([dist.inv_cdf(min(max(p, 1e-12), 1 - 1e-12)) for p in edges])
    return _Spec(int(n_queries), sizes, int(n_features), thresholds, weights, float(noise), count_columns,
                 decimals, int(seed))


def _sizes(docs_per_query: int | tuple[int, int]) -> tuple[int, int]:
    low_high = (docs_per_query, docs_per_query) if isinstance(docs_per_query, int | np.integer) \
        else tuple(docs_per_query)
    integers = all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in low_high)
    if len(low_high) != 2 or not integers or not 1 <= low_high[0] <= low_high[1]:
        raise SmoothrankError(f"docs_per_query: expected a positive integer or (low, high) with "
                              f"1 <= low <= high, got {docs_per_query!r}")
    return int(low_high[0]), int(low_high[1])


def _shares(levels: int, distribution: Sequence[float] | None) -> np.ndarray:
    if distribution is None:
        return np.asarray(MSLR_LABEL_DISTRIBUTION) if levels == 5 else np.full(levels, 1.0 / levels)
    shares = np.asarray(distribution, dtype=np.float64)
    if shares.shape != (levels,) or not np.all(np.isfinite(shares)) or np.any(shares < 0) \
            or shares.sum() <= 0:
        raise SmoothrankError(f"label_distribution: expected {levels} non-negative numbers (label_levels), "
                              f"not all 0, got {distribution!r}")
    return shares / shares.sum()


def _blocks(spec: _Spec) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(features, labels, query ids) of each block of :data:`BLOCK_QUERIES` queries."""
    norm = float(np.linalg.norm(spec.weights))
    for b, first in enumerate(range(0, spec.n_queries, BLOCK_QUERIES)):
        n_q = min(BLOCK_QUERIES, spec.n_queries - first)
        rng = np.random.default_rng([spec.seed, 1, b])
        sizes = rng.integers(spec.sizes[0], spec.sizes[1] + 1, size=n_q)
        n = int(sizes.sum())
        z = rng.standard_normal((n, spec.n_features))
        shift = np.repeat(rng.standard_normal(n_q) * _QUERY_SHIFT, sizes)
        score = z @ spec.weights / norm + shift + rng.standard_normal(n) * spec.noise
        labels = np.searchsorted(spec.thresholds, score).astype(np.float32)
        scale = 10.0**spec.decimals
        features = np.round(z * scale) / scale
        counts = spec.count_columns
        features[:, counts] = np.round(np.exp(1.0 + 1.5 * z[:, counts]))
        qids = np.repeat(np.arange(first + 1, first + n_q + 1, dtype=np.int64), sizes)
        yield features.astype(np.float32), labels, qids
