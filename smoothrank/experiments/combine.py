"""Per-query score normalisation and combination: the maths of seed ensembles, blends and stacking.

Scores are flat (one float per document, no padding), grouped into queries by ``offsets``
(``offsets[q]:offsets[q+1]`` are the rows of query q).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from smoothrank.errors import SmoothrankError

__all__ = ["NORMALIZATIONS", "check_offsets", "combine_scores", "normalize_scores", "query_index"]

NORMALIZATIONS = ("zscore", "rank", "none")
# A query whose scores spread less than this fraction of their magnitude is constant up to rounding
# (float32 model outputs differ by >= 2**-24 ~ 6e-8 of their magnitude, far above it).
_CONSTANT_RTOL = 1e-10


def check_offsets(offsets: Any, n_docs: int) -> np.ndarray:
    """``offsets`` as int64 after checking that they delimit ``n_docs`` flat rows: 1-D integers,
    non-decreasing from 0 to ``n_docs``; shape ``(n_queries + 1,)``."""
    off = np.asarray(offsets)
    if off.ndim != 1 or off.size < 1 or not np.issubdtype(off.dtype, np.integer):
        raise SmoothrankError(f"offsets: expected a 1-D integer array (n_queries + 1,), got dtype "
                              f"{off.dtype} and shape {off.shape}")
    off = off.astype(np.int64)
    if off[0] != 0 or off[-1] != n_docs or np.any(np.diff(off) < 0):
        raise SmoothrankError(f"offsets: expected non-decreasing values from 0 to the number of scores "
                              f"({n_docs}), got {off[0]} .. {off[-1]}")
    return off


def query_index(off: np.ndarray) -> np.ndarray:
    """The query of every row, shape ``(off[-1],)``, from checked offsets (:func:`check_offsets`)."""
    return np.repeat(np.arange(off.size - 1), np.diff(off))


def normalize_scores(scores: Any, offsets: Any, *, normalize: str = "zscore") -> np.ndarray:
    """Standardise one run's scores within each query (float64, same shape).

    For a query q with scores :math:`s_1..s_n`:

    * ``"zscore"``: :math:`z_i = (s_i - \\bar s) / \\sigma` with the population standard deviation
      :math:`\\sigma = \\sqrt{\\tfrac1n \\sum_j (s_j - \\bar s)^2}`. The floor: when
      :math:`\\max_i |s_i - \\bar s| \\le 10^{-10} \\max_i |s_i|` (the scores are constant up to
      rounding; always for n = 1) every :math:`z_i = 0`: the run expresses no preference on q.
      The query is first divided by :math:`\\max_i |s_i|` (z is scale-invariant), so huge or
      tiny scores neither overflow nor underflow.
    * ``"rank"``: :math:`r_i = (R_i - 1) / (n - 1)` where :math:`R_i` is the 1-based ascending rank
      of :math:`s_i` in q, tied scores sharing their average rank; :math:`r_i \\in [0, 1]`, the
      highest score gets 1, a query of one document (or of ties only) gets 0.5.
    * ``"none"``: the raw scores.

    ``"zscore"`` and ``"rank"`` are invariant to a per-query shift and positive scaling of the
    scores, and both keep each query's order (ties included). Queries are the rows
    ``offsets[q]:offsets[q+1]`` (flat, no padding; an empty query is allowed).
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise SmoothrankError(f"scores: expected a 1-D array of per-document scores, got shape {s.shape}")
    if not np.isfinite(s).all():
        raise SmoothrankError(f"scores: {int((~np.isfinite(s)).sum())} non-finite score(s)")
    off = check_offsets(offsets, s.size)
    if normalize == "none":
        return s.copy()
    n_queries = off.size - 1
    qidx = query_index(off)
    sizes = np.diff(off)
    if normalize == "zscore":
        magnitude = np.zeros(n_queries)
        np.maximum.at(magnitude, qidx, np.abs(s))
        u = s / np.where(magnitude > 0, magnitude, 1.0)[qidx]  # in [-1, 1] per query
        mean = np.bincount(qidx, weights=u, minlength=n_queries) / np.maximum(sizes, 1)
        centred = u - mean[qidx]
        spread = np.zeros(n_queries)
        np.maximum.at(spread, qidx, np.abs(centred))
        varying = spread > _CONSTANT_RTOL  # u has magnitude 1, so this is the relative floor
        c = centred / np.where(varying, spread, 1.0)[qidx]  # in [-1, 1]: its square cannot underflow to 0
        std = np.sqrt(np.bincount(qidx, weights=c * c, minlength=n_queries) / np.maximum(sizes, 1))
        return np.where(varying[qidx], c / np.where(varying, std, 1.0)[qidx], 0.0)
    if normalize == "rank":
        order = np.lexsort((s, qidx))  # by query, then ascending score
        sorted_s, sorted_q = s[order], qidx[order]
        position = np.arange(s.size) - off[sorted_q]  # 0-based position within its query
        new_group = np.ones(s.size, dtype=bool)
        new_group[1:] = (sorted_q[1:] != sorted_q[:-1]) | (sorted_s[1:] != sorted_s[:-1])
        group = np.cumsum(new_group) - 1
        mean_position = (np.bincount(group, weights=position) / np.bincount(group))[group]
        denominator = (sizes - 1)[sorted_q].astype(np.float64)
        out = np.empty(s.size)
        several = denominator > 0
        out[order] = np.where(several, mean_position / np.where(several, denominator, 1.0), 0.5)
        return out
    raise SmoothrankError(f"normalize: expected one of {list(NORMALIZATIONS)}, got {normalize!r}")


def combine_scores(score_arrays: Sequence[Any], offsets: Any, *, normalize: str = "zscore",
                   weights: Sequence[float] | None = None) -> np.ndarray:
    """The ensemble score of every document: the (weighted) mean of the runs' standardised scores.

    .. math:: e_i = \\sum_{m=1}^{M} w_m N_q(s^{(m)})_i, \\qquad w_m = 1/M \\text{ by default}

    where :math:`s^{(m)}` are the scores of run m (all runs score the same documents in the same
    row order), q the query of document i, and :math:`N_q` the per-query standardisation of
    :func:`normalize_scores` (``"zscore"``, ``"rank"`` or ``"none"``). Standardising first puts
    runs whose scores live on different scales on an equal footing (a run with 10x larger scores
    would otherwise dominate the mean); it is the score-level analogue of CombSUM over
    normalised scores (Fox and Shaw, "Combination of multiple searches", TREC-2, 1994).

    Parameters
    ----------
    score_arrays : sequence of 1-D arrays
        One array of per-document scores per run, each of length ``offsets[-1]``.
    offsets : 1-D integer array
        ``offsets[q]:offsets[q+1]`` are the rows of query q (flat, no padding).
    normalize : {"zscore", "rank", "none"}
    weights : sequence of float, optional
        One non-negative weight per run, not all zero; divided by their sum. Default: equal.

    Returns
    -------
    np.ndarray
        float64, shape ``(offsets[-1],)``.
    """
    if normalize not in NORMALIZATIONS:
        raise SmoothrankError(f"normalize: expected one of {list(NORMALIZATIONS)}, got {normalize!r}")
    if isinstance(score_arrays, np.ndarray) and score_arrays.ndim == 1:
        raise SmoothrankError("score_arrays: expected a sequence of per-run score arrays, got one 1-D array")
    arrays = [np.asarray(a, dtype=np.float64) for a in score_arrays]
    if not arrays:
        raise SmoothrankError("score_arrays: at least one run's scores are required")
    for m, a in enumerate(arrays):
        if a.shape != arrays[0].shape:
            raise SmoothrankError(f"score_arrays[{m}]: shape {a.shape} differs from score_arrays[0] "
                                  f"{arrays[0].shape}")
    w = None if weights is None else _check_weights(weights, len(arrays))
    total = np.zeros(arrays[0].shape, dtype=np.float64)
    for m, a in enumerate(arrays):
        try:
            z = normalize_scores(a, offsets, normalize=normalize)
        except SmoothrankError as err:
            raise SmoothrankError(f"score_arrays[{m}]: {err}") from None
        total += z if w is None else w[m] * z
    return total / len(arrays) if w is None else total


def _check_weights(weights: Sequence[float], n_runs: int) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n_runs,):
        raise SmoothrankError(f"weights: expected one weight per run ({n_runs}), got shape {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise SmoothrankError(f"weights: expected finite non-negative weights, not all zero, "
                              f"got {w.tolist()}")
    return w / w.sum()
