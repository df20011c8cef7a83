"""Compiled per-query gradients and Hessians for :mod:`smoothrank.boosting` (Numba, float64, CPU).

A booster hands over flat arrays: one score and one label per document, the documents of a query
contiguous, and the query sizes. The kernels here run over the queries in parallel (``prange``),
each on its own ``m`` documents, never padded to the longest query: the O(m^2) pair sums of
LambdaRank, ListNet's softmax, and NeuralNDCG's NeuralSort relaxation with its Sinkhorn scaling
and the adjoint of both, a query's ``m x m`` matrix held in cache.

Each kernel computes what the loss's PyTorch code computes with ``reduction="sum"`` in float64
(the same formulas, the same tie rules, the same stopping rule of Sinkhorn), so the gradients
and Hessians equal the PyTorch path's to float64 round-off (``tests/test_boosting_kernels.py``
compares them). :func:`flat_gradients` returns None for what it does not cover (another loss, a
stochastic NeuralNDCG, a gain or discount that is not elementwise and finite, another dtype or
device), and the booster then takes the PyTorch path, which also reports bad input by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numba as nb
import numpy as np
import torch

from smoothrank import gains as _gains
from smoothrank._neural_numba import ideal_dcg, neural_dcg
from smoothrank._softrank_numba import flat_soft_dcg_gradient

__all__ = ["KERNEL_LOSSES", "flat_gradients", "loss_options"]

#: The losses with a compiled kernel, and their Hessians ("curvature" is any kernel's gradient
#: differenced along itself, as :mod:`smoothrank.boosting` does it).
KERNEL_LOSSES = {"lambda_rank": ("constant", "diagonal", "curvature"),
                 "list_net": ("constant", "diagonal", "curvature"),
                 "neural_ndcg": ("constant", "curvature"),
                 "neural_ndcg_transposed": ("constant", "curvature"),
                 "soft_ndcg": ("constant", "curvature")}
_MAX_QUERY = 4096  # longer queries go to PyTorch's path: an m x m float64 matrix per thread
_SOFT_MAX_STATES = 1 << 17  # SoftNDCG: documents x ranks of a query, kept for 32 lanes (32 MiB a thread)
_FASTMATH = {"reassoc", "contract", "nsz"}  # vectorised sums; no assumption about inf or NaN
_CURVATURE_STEP = 1e-2  # as smoothrank.boosting's


def loss_options(fn: Callable[..., Any]) -> tuple[str, dict[str, Any]] | None:
    """``(name, options)`` of a registered loss (the function or bound by ``losses.get``) with every
    option at its bound value or default; None for any other callable."""
    from smoothrank import losses

    wrapped = getattr(fn, "__wrapped__", None)
    bound = getattr(fn, "options", None) if isinstance(fn, losses.BoundLoss) else None
    for name in KERNEL_LOSSES:
        registered = getattr(losses, name)
        if fn is registered or (bound is not None and wrapped is registered):
            return name, {**losses.options(name), **(bound or {})}
    return None


def flat_gradients(fn: Callable[..., Any], scores: np.ndarray, labels: np.ndarray, sizes: np.ndarray, *,
                   hessian: str, dtype: torch.dtype, device: Any
                   ) -> tuple[np.ndarray, np.ndarray | None] | None:
    """Per-document gradient of ``sum_q fn(s_q, y_q)`` and its Hessian (the raw diagonal, or each
    query's curvature along its gradient; None for ``"constant"``), from the compiled kernels.

    Parameters
    ----------
    fn : the loss (see :func:`loss_options`)
    scores, labels : float64 arrays, shape (n_docs,), each query's documents contiguous
    sizes : int64 array, shape (n_queries,), every size >= 1, summing to n_docs
    hessian, dtype, device : as :func:`smoothrank.boosting.boosting_gradients` takes them

    Returns
    -------
    (grad, hess) : float64 arrays of shape (n_docs,) (``hess`` None for the constant Hessian), or
        None where no kernel covers the case (the caller computes it with PyTorch).
    """
    found = loss_options(fn)
    if found is None or dtype != torch.float64 or (device is not None and torch.device(device).type != "cpu"):
        return None
    name, opts = found
    if hessian not in KERNEL_LOSSES[name] or int(sizes.max()) > _MAX_QUERY:
        return None
    if name.startswith("neural_ndcg") and opts["stochastic"]:
        return None
    _check_options(fn)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    gradient = _gradient_function(name, opts, labels, sizes, offsets)
    if gradient is None:
        return None
    try:
        if hessian == "curvature":
            return _with_curvature(gradient, scores, offsets)
        if hessian == "diagonal":
            return gradient(scores, True)
        return gradient(scores, False)[0], None
    except _NotCovered:
        return None


def _check_options(fn: Callable[..., Any]) -> None:
    """The loss's own option checks (errors naming the option), on a query of two documents."""
    with torch.no_grad():
        fn(torch.tensor([[0.5, 0.0]], dtype=torch.float64), torch.tensor([[1.0, 0.0]], dtype=torch.float64),
           reduction="sum")


def _gradient_function(name: str, opts: dict[str, Any], labels: np.ndarray, sizes: np.ndarray,
                       offsets: np.ndarray) -> Callable[[np.ndarray, bool], tuple[np.ndarray, Any]] | None:
    """``gradient(scores, diagonal) -> (grad, diag or None)`` for the loss, or None (not covered)."""
    if name == "list_net":
        return lambda s, diag: _list_net(s, labels, offsets, diag)
    parts = _ndcg_parts(labels, sizes, offsets, opts["gain"], opts["discount"], opts["k"])
    if parts is None:
        return None
    gains, disc = parts
    if name == "lambda_rank":
        sigma, k = float(opts["sigma"]), 0 if opts["k"] is None else int(opts["k"])
        return lambda s, diag: _lambda_rank(s, labels, gains, disc, offsets, sigma, k, diag)
    ideal = np.zeros(sizes.shape[0])
    _ideals(gains, disc, offsets, ideal)
    valid = (np.maximum.reduceat(gains, offsets[:-1]) > 0) & (ideal > 0)
    scale = np.where(valid, -1.0 / np.where(valid, ideal, 1.0), 0.0)  # d(-DCG / IDCG) / d DCG
    if name == "soft_ndcg":
        return _soft_ndcg(opts, gains, disc, sizes, offsets, scale)
    tau = float(opts["temperature"])
    tau = max(tau, float(np.finfo(np.float64).tiny))  # as within_dtype(divides=True) holds it
    iters = int(opts["max_iter"]) if opts["sinkhorn"] else 0
    transposed = name == "neural_ndcg_transposed"

    def neural(s: np.ndarray, diag: bool) -> tuple[np.ndarray, None]:
        if not _safe_for_logits(s, sizes):
            raise _NotCovered
        _, grad = neural_dcg(s, gains, disc, offsets, temperature=tau, max_iter=iters, tol=float(opts["tol"]),
                             transposed=transposed, grad_scale=scale)
        assert grad is not None, "neural_dcg returns a gradient when given grad_scale"
        return grad, None

    return neural


def _soft_ndcg(opts: dict[str, Any], gains: np.ndarray, disc: np.ndarray, sizes: np.ndarray,
               offsets: np.ndarray, scale: np.ndarray
               ) -> Callable[[np.ndarray, bool], tuple[np.ndarray, Any]] | None:
    """SoftNDCG (``losses.soft_ndcg``, exact Rank-Binomial distributions, no Sinkhorn): the gradient of
    ``-sum_j g_j E[D(r_j)] / IDCG`` per query (:mod:`smoothrank._softrank_numba`), or None for the
    other methods and backends."""
    if opts["method"] != "exact" or opts["sinkhorn"] or opts["backend"] not in ("auto", "numba"):
        return None
    longest = int(sizes.max())
    n_ranks = longest if opts["k"] is None else min(int(opts["k"]), longest)
    if longest * n_ranks > _SOFT_MAX_STATES:
        return None
    sigma = float(opts["sigma"])
    coef = gains * np.repeat(scale, sizes)

    def soft(s: np.ndarray, diag: bool) -> tuple[np.ndarray, None]:
        return flat_soft_dcg_gradient(s, offsets, disc, coef, sigma, n_ranks)[1], None

    return soft


class _NotCovered(Exception):
    """Raised inside a gradient function: the PyTorch path must take this call."""


def _safe_for_logits(s: np.ndarray, sizes: np.ndarray) -> bool:
    """Scores far inside float64's range, where NeuralSort's logits need no shrinking (the PyTorch
    path's ``_overflow_shrink`` is 1 there)."""
    return float(np.abs(s).max(initial=0.0)) * 4.0 * float(sizes.max()) < 1e300


def _ndcg_parts(labels: np.ndarray, sizes: np.ndarray, offsets: np.ndarray, gain: Any, discount: Any,
                k: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """Each document's gain (scaled per query by a power of two, as ``real_gains`` scales it) and
    each query's discount of rank ``1 + position`` (zero beyond ``min(k, m)``), flat; None unless
    every gain is finite and >= 0 and every used discount finite and >= 0 (PyTorch's path then
    names the problem)."""
    if not isinstance(gain, str | dict) or not isinstance(discount, str):
        return None
    try:
        g = _gains.gain(torch.from_numpy(labels), gain).numpy().astype(np.float64)
    except ValueError:
        return None
    if g.shape != labels.shape or not (np.isfinite(g).all() and (g >= 0).all()):
        return None
    starts = offsets[:-1]
    top = np.maximum.reduceat(g, starts)
    _, exponent = np.frexp(top)  # top = f 2^e with f in [0.5, 1): scaled by 2^-e (0 stays 0)
    g = g * np.repeat(np.ldexp(1.0, np.clip(-exponent, -1022, 1023)), sizes)
    size_of = np.repeat(sizes, sizes)
    ranks = np.arange(labels.shape[0]) - np.repeat(starts, sizes) + 1
    d = _gains.discount(torch.from_numpy(ranks.astype(np.float64)), discount,
                        list_size=torch.from_numpy(size_of.astype(np.float64))).numpy()
    used = ranks <= (size_of if k is None else np.minimum(size_of, int(k)))
    if not (np.isfinite(d[used]).all() and (d[used] >= 0).all()):
        return None
    return g, np.where(used, d, 0.0)


def _with_curvature(gradient: Callable[[np.ndarray, bool], tuple[np.ndarray, Any]], scores: np.ndarray,
                    offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gradient, and each query's curvature along it by central differences (as
    ``smoothrank.boosting._batch_grad_curvature`` computes it), broadcast over its documents."""
    grad = gradient(scores, False)[0]
    starts, sizes = offsets[:-1], np.diff(offsets)
    norm = np.repeat(np.sqrt(np.add.reduceat(grad * grad, starts)), sizes)
    with np.errstate(invalid="ignore", divide="ignore"):
        direction = np.where(norm > 0, grad / np.maximum(norm, np.finfo(np.float64).tiny), 0.0)
    spread = np.maximum(np.repeat(np.maximum.reduceat(np.abs(scores), starts), sizes), 1.0)
    step = _CURVATURE_STEP * spread
    along = (gradient(scores + step * direction, False)[0] - gradient(scores - step * direction, False)[0]
             ) / (2.0 * step)
    curvature = np.add.reduceat(direction * along, starts)
    return grad, np.repeat(curvature, sizes)


# --------------------------------------------------------------------------- ListNet
def _list_net(s: np.ndarray, y: np.ndarray, offsets: np.ndarray, diagonal: bool
              ) -> tuple[np.ndarray, np.ndarray | None]:
    grad = np.zeros_like(s)
    diag = np.zeros_like(s) if diagonal else np.zeros(0)
    _list_net_kernel(s, y, offsets, grad, diag, diagonal)
    return grad, (diag if diagonal else None)


@nb.njit(parallel=True, cache=True, nogil=True, fastmath=_FASTMATH)
def _list_net_kernel(s, y, offsets, grad, diag, diagonal):  # pragma: no cover - compiled
    """ListNet (``listwise.list_net``): ``d/ds_i = p_i sum_j t_j - t_i`` over the targets t_j > 0
    (t = softmax(y), p = softmax(s)); diagonal ``p_i (1 - p_i)`` with 1 - p as -expm1(log p)."""
    for q in nb.prange(offsets.shape[0] - 1):
        lo, hi = offsets[q], offsets[q + 1]
        relevant = False
        for i in range(lo, hi):
            relevant |= y[i] > 0
        if not relevant:
            continue
        ymax, smax = y[lo], s[lo]
        for i in range(lo, hi):
            ymax, smax = max(ymax, y[i]), max(smax, s[i])
        ysum = 0.0
        ssum = 0.0
        for i in range(lo, hi):
            ysum += math.exp(y[i] - ymax)
            ssum += math.exp(s[i] - smax)
        log_ssum = math.log(ssum)
        tsum = 0.0
        for i in range(lo, hi):
            tsum += math.exp(y[i] - ymax) / ysum
        for i in range(lo, hi):
            log_p = s[i] - smax - log_ssum
            t = math.exp(y[i] - ymax) / ysum
            grad[i] = math.exp(log_p) * tsum - t
            if diagonal:
                diag[i] = math.exp(log_p) * -math.expm1(log_p)


# --------------------------------------------------------------------------- LambdaRank
def _lambda_rank(s: np.ndarray, y: np.ndarray, gains: np.ndarray, disc: np.ndarray, offsets: np.ndarray,
                 sigma: float, k: int, diagonal: bool) -> tuple[np.ndarray, np.ndarray | None]:
    grad = np.zeros_like(s)
    diag = np.zeros_like(s) if diagonal else np.zeros(0)
    _lambda_rank_kernel(s, y, gains, disc, offsets, sigma, k, grad, diag, diagonal)
    return grad, (diag if diagonal else None)


@nb.njit(parallel=True, cache=True, nogil=True)
def _ideals(gains, disc, offsets, out):  # pragma: no cover - compiled
    for q in nb.prange(offsets.shape[0] - 1):
        out[q] = ideal_dcg(gains[offsets[q]:offsets[q + 1]], disc[offsets[q]:offsets[q + 1]])


@nb.njit(inline="always")
def _sigmoid(x):  # pragma: no cover - compiled
    return 1.0 / (1.0 + math.exp(-x))


@nb.njit(parallel=True, cache=True, nogil=True)
def _lambda_rank_kernel(s, y, gains, disc, offsets, sigma, k, grad, diag, diagonal):  # pragma: no cover
    """LambdaRank (``pairwise.lambda_rank``): for y_i > y_j (one of them in the top k when k > 0),
    ``w = |g_i - g_j| |d(r_i) - d(r_j)|``, ``c = w sigmoid(-sigma (s_i - s_j))``; ``d/ds_i`` gets
    ``-sigma c / IDCG``, ``d/ds_j`` ``+sigma c / IDCG``; the diagonal ``sigma^2 sum w rho (1 - rho)
    / IDCG`` on both."""
    for q in nb.prange(offsets.shape[0] - 1):
        lo, hi = offsets[q], offsets[q + 1]
        m = hi - lo
        g, d_rank, sq, yq = gains[lo:hi], disc[lo:hi], s[lo:hi], y[lo:hi]
        ideal = ideal_dcg(g, d_rank)
        if not (g.max() > 0 and ideal > 0 and yq.max() > yq.min()):
            continue
        order = np.argsort(-sq, kind="mergesort")  # descending, ties in input order
        d_item = np.empty(m)
        top = np.empty(m, dtype=np.bool_)
        for r in range(m):
            d_item[order[r]] = d_rank[r]
            top[order[r]] = k == 0 or r < k
        net = np.zeros(m)
        curv = np.zeros(m)
        for i in range(m):
            for j in range(m):
                if yq[i] > yq[j] and (top[i] or top[j]):
                    w = abs(g[i] - g[j]) * abs(d_item[i] - d_item[j])
                    if w > 0:
                        x = -sigma * (sq[i] - sq[j])
                        c = w * _sigmoid(x)
                        net[i] += c
                        net[j] -= c
                        if diagonal:
                            h = w * (_sigmoid(x) * _sigmoid(-x))
                            curv[i] += h
                            curv[j] += h
        scale = 1.0 / ideal
        for i in range(m):
            grad[lo + i] = net[i] * -sigma * scale
            if diagonal:
                h = curv[i] / ideal
                diag[lo + i] = h * sigma * sigma if h > 0 else 0.0
