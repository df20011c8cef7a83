"""Learned blends (stacking): member methods' standardised scores combined with weights fit on validation.

An equal-weight blend (:mod:`smoothrank.experiments.ensemble`) averages its member methods. A
*learned* blend (``weights: learned`` in a spec's ``blends:``) instead scores document i of query q

.. math:: b_i = \\sum_{m=1}^{M} w_m\\, x^{(m)}_i, \\qquad w_m \\ge 0,

where :math:`x^{(m)}` is member method m's feature: its seed runs combined as a seed ensemble
(:func:`~smoothrank.experiments.combine.combine_scores`), then standardised per query again
(:func:`~smoothrank.experiments.combine.normalize_scores`), so that every feature has the same
spread whatever its number of seeds. The weights minimise a ranking loss of the project on the
*validation* split,

.. math::
    \\hat w = \\arg\\min_{w \\ge 0}\\;
        \\frac{1}{|Q|} \\sum_{q \\in Q} \\ell(X_q w, y_q) + \\lambda \\lVert w \\rVert^2,

by L-BFGS-B (bounds ``w >= 0``) with the gradient from PyTorch's autodiff in float64. The default
loss is ListNet (Cao et al., ICML 2007), convex in w for a linear scorer, so the fit is unique up to
ties and needs no seed; the ridge term keeps the optimum finite when one member alone orders every
query perfectly. This is stacked generalisation (Wolpert, 1992) with a ranking loss; the weights
are reported normalised to sum 1 (a positive rescaling changes no ranking).

The training split is not used: the members' training scores are in-sample (a GBDT's nearly
perfect), so weights fit there would favour the member that overfits most. The blend's own
*validation* scores would be in-sample too, so they are **cross-fitted**: the validation queries
are dealt into ``cv`` parts (query j to part ``j mod cv``) and each part is scored with weights
fit on the others. Its validation metrics (and so model selection among the grid's methods) are
therefore honest estimates; its training and test scores use the weights fit on all the
validation queries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from smoothrank.errors import SmoothrankError
from smoothrank.experiments.combine import check_offsets, combine_scores, normalize_scores, query_index

__all__ = ["BlendFit", "blend_features", "cross_fit_blend", "cross_fit_scores", "fit_blend",
           "fit_blend_weights"]


@dataclass(frozen=True)
class BlendFit:
    """What :func:`fit_blend` returns: the weights and how L-BFGS-B ended.

    ``converged`` is SciPy's ``success`` (False e.g. when ``max_iter`` was reached); ``message``
    is its reason; ``iterations`` its iteration count. ``fallback`` is True when the optimum was
    w = 0 and the equal weights were returned instead.
    """

    weights: np.ndarray
    converged: bool
    iterations: int
    message: str
    fallback: bool = False

    def summary(self) -> dict[str, Any]:
        """JSON-ready: everything but the weights."""
        return {"converged": self.converged, "iterations": self.iterations, "message": self.message,
                "fallback": self.fallback}


def blend_features(method_runs: Sequence[Sequence[Any]], offsets: Any, *,
                   normalize: str = "zscore") -> np.ndarray:
    """The (n_docs, M) feature matrix of a learned blend: one column per member method.

    Column m is :func:`normalize_scores` of the seed ensemble of method m's runs
    (``method_runs[m]``, one 1-D score array per seed run).
    """
    if not method_runs:
        raise SmoothrankError("method_runs: at least one member method is required")
    columns = []
    for m, runs in enumerate(method_runs):
        try:
            columns.append(normalize_scores(combine_scores(runs, offsets, normalize=normalize), offsets,
                                            normalize=normalize))
        except SmoothrankError as err:
            raise SmoothrankError(f"member method {m}: {err}") from None
    return np.stack(columns, axis=1)


def _check(features: Any, labels: Any, offsets: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:

    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] < 1:
        raise SmoothrankError(f"features: expected shape (n_docs, n_members), got {x.shape}")
    if y.shape != (x.shape[0],):
        raise SmoothrankError(f"labels: expected shape ({x.shape[0]},), one per feature row, got {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise SmoothrankError("features/labels: non-finite values")
    return x, y, check_offsets(offsets, x.shape[0])


def fit_blend_weights(features: Any, labels: Any, offsets: Any, *, loss: str = "list_net",
                      options: Mapping[str, Any] | None = None, l2: float = 1e-3,
                      max_iter: int = 500) -> np.ndarray:
    """Non-negative member weights minimising ``loss`` of the blended scores plus ``l2 * ||w||^2``:
    :func:`fit_blend`'s weights (see there for the parameters and the returned weights)."""
    return fit_blend(features, labels, offsets, loss=loss, options=options, l2=l2, max_iter=max_iter).weights


def fit_blend(features: Any, labels: Any, offsets: Any, *, loss: str = "list_net",
              options: Mapping[str, Any] | None = None, l2: float = 1e-3, max_iter: int = 500) -> BlendFit:
    """Non-negative member weights minimising ``loss`` of the blended scores plus ``l2 * ||w||^2``,
    and whether L-BFGS-B converged.

    Parameters
    ----------
    features : array, shape (n_docs, M)
        Per-document member scores (see :func:`blend_features`).
    labels : array, shape (n_docs,)
        Relevance labels of the same documents.
    offsets : 1-D integer array
        ``offsets[q]:offsets[q+1]`` are the rows of query q.
    loss : str
        A registered loss (:func:`smoothrank.losses.available`); ``options`` are its options. The
        loss is re-bound at every evaluation, so an int ``generator`` option draws the same random
        numbers each time and the objective stays deterministic; a loss that draws (ListMLE's
        tie-breaks, stochastic NeuralNDCG) without one is given ``generator=0``, so that the fit
        (and its experiment's fingerprint) is reproducible.
    l2 : float
        Ridge coefficient, >= 0.
    max_iter : int
        L-BFGS-B's iteration limit, >= 1.

    Returns
    -------
    BlendFit
        ``weights``: float64, shape (M,), non-negative and summing to 1. Should the optimum be
        w = 0 (no member orders the labels better than a constant), the equal weights 1/M are
        returned (``fallback``).
    """
    import torch
    from scipy.optimize import minimize

    from smoothrank import losses
    from smoothrank.metrics import pad_groups

    x, y, off = _check(features, labels, offsets)
    if not (isinstance(l2, (int, float)) and np.isfinite(l2) and l2 >= 0):
        raise SmoothrankError(f"l2: expected a finite number >= 0, got {l2!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise SmoothrankError(f"max_iter: expected an integer >= 1, got {max_iter!r}")
    opts = dict(options or {})
    losses.get(loss, **opts)  # unknown loss or option: a ConfigError now
    if "generator" in losses.options(loss) and opts.get("generator") is None:
        opts["generator"] = 0  # a fresh draw per evaluation would move the objective under L-BFGS-B
    n_members = x.shape[1]
    if off.size < 2:
        raise SmoothrankError("offsets: a learned blend needs at least one validation query")
    xs, mask = pad_groups(torch.from_numpy(x), off)
    ys, _ = pad_groups(torch.from_numpy(y), off)

    def objective(w_np: np.ndarray) -> tuple[float, np.ndarray]:
        w = torch.tensor(w_np, dtype=torch.float64, requires_grad=True)
        value = losses.get(loss, **opts)(xs @ w, ys, mask=mask, reduction="mean") + l2 * (w * w).sum()
        if not torch.isfinite(value):
            raise SmoothrankError(f"learned blend: loss {loss!r} is not finite at weights {w_np.tolist()}")
        (grad,) = torch.autograd.grad(value, w)
        return float(value.detach()), grad.numpy().astype(np.float64)

    fit = minimize(objective, np.ones(n_members), jac=True, method="L-BFGS-B",
                   bounds=[(0.0, None)] * n_members, options={"maxiter": int(max_iter)})
    w = np.clip(np.asarray(fit.x, dtype=np.float64), 0.0, None)
    fallback = not np.isfinite(w).all() or w.sum() <= 0
    weights = np.full(n_members, 1.0 / n_members) if fallback else w / w.sum()
    return BlendFit(weights, bool(fit.success), int(fit.nit), str(fit.message), fallback)


def cross_fit_scores(features: Any, labels: Any, offsets: Any, *, cv: int = 5, loss: str = "list_net",
                     options: Mapping[str, Any] | None = None, l2: float = 1e-3
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-part blended scores of the documents, and the weights fit on each part's complement.

    Query j goes to part ``j mod cv`` (``cv`` is lowered to the number of queries); the scores of
    part p's documents use :func:`fit_blend_weights` on every other part. Returns
    ``(scores, weights)``: float64 arrays of shapes (n_docs,) and (cv, M).
    """
    scores, fits = cross_fit_blend(features, labels, offsets, cv=cv, loss=loss, options=options, l2=l2)
    return scores, np.stack([f.weights for f in fits])


def cross_fit_blend(features: Any, labels: Any, offsets: Any, *, cv: int = 5, loss: str = "list_net",
                    options: Mapping[str, Any] | None = None, l2: float = 1e-3
                    ) -> tuple[np.ndarray, list[BlendFit]]:
    """:func:`cross_fit_scores` with each part's whole :class:`BlendFit` instead of its weights."""
    x, y, off = _check(features, labels, offsets)
    n_queries = off.size - 1
    if isinstance(cv, bool) or not isinstance(cv, (int, np.integer)) or cv < 2:
        raise SmoothrankError(f"cv: expected an integer >= 2, got {cv!r}")
    if n_queries < 2:
        raise SmoothrankError(f"cross-fitting needs at least 2 queries, got {n_queries}")
    parts = min(int(cv), n_queries)
    part_of = np.arange(n_queries) % parts
    sizes = np.diff(off)
    row_part = part_of[query_index(off)]
    scores = np.empty(x.shape[0])
    fits = []
    for p in range(parts):
        fit_rows = row_part != p
        fit_offsets = np.concatenate([[0], np.cumsum(sizes[part_of != p])]).astype(np.int64)
        fits.append(fit_blend(x[fit_rows], y[fit_rows], fit_offsets, loss=loss, options=options, l2=l2))
        scores[~fit_rows] = x[~fit_rows] @ fits[-1].weights
    return scores, fits
