r"""Gradient-boosting objectives from any smoothrank loss (LightGBM and XGBoost custom objectives).

A GBDT fits each tree to per-document gradients and Hessians of the training loss at the current
scores. For a smoothrank loss L (any registered loss, e.g. NeuralNDCG or SoftNDCG), summed over
the training queries,

.. math::
    g_i = \frac{\partial}{\partial s_i} \sum_q L(s_q, y_q), \qquad
    h_i = \begin{cases} 1 & \texttt{hessian="constant"} \\
          \max(|\partial^2 \sum_q L / \partial s_i^2|, h_{\min}) & \texttt{hessian="diagonal"} \\
          \max(|\hat g_q^\top H_q \hat g_q|, h_{\min}),\ i \in q & \texttt{hessian="curvature"}
          \end{cases}

and the booster's Newton step gives a leaf the value ``-sum(g) / (sum(h) + lambda)``. With the
constant Hessian the trees follow the plain gradient (first-order boosting, which works for
every loss); ``"diagonal"`` is the exact diagonal of the Hessian, taken in absolute value as in
saddle-free Newton (Dauphin et al. 2014) since the NDCG surrogates are not convex. For a loss
registered with a ``hessian_diagonal`` (:func:`smoothrank.losses.register`; ``rank_net``,
``lambda_rank`` and ``list_net``, by name, bound by ``losses.get``, or the registered functions) it
is computed in closed form, O(n^2) a query for the pairwise losses, O(n) for ListNet
(:func:`smoothrank.losses.rank_net_hessian_diagonal`, ``lambda_rank_hessian_diagonal``,
``list_net_hessian_diagonal``). Otherwise it needs a loss that autograd
can differentiate twice (``list_mle``, ``approx_ndcg``, ``rmse``, or a loss of one's own) and costs
one extra backward pass per list position (blocks of positions share one vectorised pass).
For ``lambda_rank`` it is LambdaMART's own Hessian, ``sigma^2 sum_j |Delta NDCG_ij| rho_ij
(1 - rho_ij)``, so ``lambda_rank`` with ``hessian="diagonal"`` reproduces LightGBM's
``lambdarank`` objective (with ``lambdarank_norm=false`` and no truncation), as the tests check.

``"curvature"`` works for every loss, including those with a hand-written first derivative
(NeuralNDCG, SoftNDCG): every document of query q gets the loss's curvature along the query's
gradient direction, ``c_q = ghat_q^T H_q ghat_q`` with ``ghat_q = g_q / ||g_q||``, taken from two
more gradient passes by central differences, ``H_q ghat_q ~ (g(s + eps ghat) - g(s - eps ghat))
/ (2 eps)`` (``eps = 0.01 max(1, max|s_q|)``, a secant over the size of a boosting step, well above
the losses' own error, e.g. Sinkhorn's stopping tolerance; the three passes draw the same random
numbers, so a loss that draws, e.g. ListMLE's tie-breaks, is differenced at fixed draws). A leaf
holding whole queries then takes ``-sum g / sum c``, the curvature-weighted mean of each query's
Newton step along its gradient (``-g_q / c_q``): the step is in the loss's own scale, whatever
the surrogate's temperature or smoothing width, where the constant Hessian's step is the raw
gradient's.

A query whose loss does not depend on its scores (no relevant document under an NDCG loss, or
all labels equal) gets a zero gradient *and* a zero Hessian, so it neither pulls a leaf nor
dilutes it, as in LambdaMART. Under a loss registered with ``constant_on_equal_labels`` (the NDCG
surrogates, ``lambda_rank``, ``rank_net``: :attr:`smoothrank.losses.LossInfo.constant_on_equal_labels`)
a query whose labels
are all equal is such a query even where the surrogate still moves with the scores (NeuralNDCG by
Sinkhorn's residual, about 1e-6; ApproxNDCG and SoftNDCG by their smoothing): the metric they
stand for is constant there. Row weights (LightGBM's ``weight``, XGBoost's ``weight``)
multiply both.

Three adapters wrap :func:`boosting_gradients` in the calling convention each library expects
(PITFALLS 19):

* :func:`lightgbm_objective` for ``lightgbm.train(params={"objective": fn, ...})``, reading the
  query sizes from the training ``Dataset``'s ``group``;
* :func:`lgbm_ranker_objective` for ``lightgbm.LGBMRanker(objective=fn)``, which hands a custom
  objective the query sizes only when it takes exactly four positional parameters
  ``(y_true, y_pred, weight, group)``;
* :func:`xgboost_objective` for ``xgboost.train(params, dtrain, obj=fn)`` (``XGBRanker`` refuses
  callable objectives), reading the query boundaries from the ``DMatrix``'s ``qid``/``group``.

``lambda_rank`` (every Hessian), ``list_net`` (every Hessian), ``neural_ndcg`` and
``neural_ndcg_transposed`` (constant and curvature Hessians; not stochastic) in float64 on the CPU
(the defaults) are computed by compiled per-query kernels on the flat, query-grouped arrays
(:mod:`smoothrank.boosting_kernels`), equal to the PyTorch code's results to float64 round-off.
Everything else is computed with PyTorch in ``dtype`` on ``device``, a batch of similar-length
queries at a time. Both hand back float64 NumPy arrays.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from smoothrank import losses
from smoothrank._autograd import NotTwiceDifferentiable
from smoothrank.data.batching import length_buckets
from smoothrank.errors import SmoothrankError

__all__ = ["HESSIANS", "boosting_gradients", "check_min_hessian", "check_objective", "lgbm_ranker_objective",
           "lightgbm_objective", "xgboost_objective"]

#: The Hessian choices of :func:`boosting_gradients`.
HESSIANS = ("constant", "diagonal", "curvature")

_MIN_HESSIAN = 1e-6  # the default floor of the diagonal and curvature Hessians
_CHUNK_ITEMS = 1 << 10  # padded (query, position) slots per batch of queries (fastest on MQ2008)
# The central differences' half-step, relative to max(1, max |s_q|): a secant curvature over a step
# of the size a boosting round takes. Smaller steps drown in the losses' own error: Sinkhorn stops at
# a tolerance (1e-6), so NeuralNDCG's gradient is piecewise smooth at that level.
_CURVATURE_STEP = 1e-2
# The diagonal Hessian by autograd (every loss without a closed form) takes one backward pass per
# list position; a block of positions shares one vectorised pass. Blocks are sized as if the loss
# were pairwise (block * rows * width^2 slots), which bounds the memory of the quadratic losses; 2^18
# is the largest budget that slows none of the twice-differentiable losses on MQ2008, RankNet and
# LambdaRank by autograd included (0.9-1.7x the speed of one position a pass; bigger blocks help the
# listwise losses and hurt the quadratic ones; docs/BENCHMARKS.md). _DIAG_BLOCK > 0 fixes it.
_DIAG_PAIR_BUDGET = 1 << 18
_DIAG_BLOCK = 0
# The compiled kernels of smoothrank.boosting_kernels where they cover the loss (False: PyTorch only).
_FLAT_KERNELS = True


def _bind(loss: str | Callable[..., Any], options: dict[str, Any]) -> Callable[..., Any]:
    if isinstance(loss, str):
        return losses.get(loss, **options)
    if not callable(loss):
        raise SmoothrankError(f"loss: expected a loss name or a callable, got {type(loss).__name__}")
    if options:
        raise SmoothrankError(f"loss: options {sorted(options)} are for a loss given by name; bind them "
                              "with smoothrank.losses.get(name, ...) for a callable")
    return loss


def _loss_name(loss: Callable[..., Any]) -> str:
    return str(getattr(loss, "loss_name", getattr(loss, "__name__", "the loss")))


def _flat(values: Any, argument: str, n: int | None = None) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise SmoothrankError(f"{argument}: expected numbers, got {type(values).__name__}") from None
    if sum(d > 1 for d in array.shape) > 1:  # (n, 1) and (1, n) are one value a document; (n, k) is not
        raise SmoothrankError(f"{argument}: expected one value per document (a 1-D array), got shape "
                              f"{array.shape} (a booster with several outputs, e.g. num_class > 1?)")
    out = array.reshape(-1)
    if n is not None and out.shape[0] != n:
        raise SmoothrankError(f"{argument}: {out.shape[0]} values for {n} documents")
    if not np.isfinite(out).all():
        bad = int(np.flatnonzero(~np.isfinite(out))[0])
        raise SmoothrankError(f"{argument}: value {out[bad]} at document {bad} is not finite")
    return out


def _sizes(group_sizes: Any, n_docs: int) -> np.ndarray:
    """The query sizes, without the empty queries: LightGBM and XGBoost accept a group of size 0
    (``np.bincount`` of query ids with a gap gives one), which holds no document and adds nothing."""
    try:
        sizes = np.asarray(group_sizes).reshape(-1)
    except ValueError:  # ragged nesting
        raise SmoothrankError("group_sizes: expected a flat sequence of non-negative integer query sizes"
                              ) from None
    if sizes.size == 0 or not np.issubdtype(sizes.dtype, np.number) or (sizes != np.round(sizes)).any() \
            or (sizes < 0).any() or (sizes > n_docs).any():
        raise SmoothrankError("group_sizes: expected non-negative integer query sizes, none above the "
                              f"{n_docs} documents")
    sizes = sizes.astype(np.int64)
    if int(sizes.sum()) != n_docs:
        raise SmoothrankError(f"group_sizes: the queries hold {int(sizes.sum())} documents, the scores "
                              f"{n_docs}")
    return sizes[sizes > 0]


def _check_dtype_device(dtype: Any, device: Any) -> None:
    """Raise :class:`SmoothrankError` naming ``dtype`` or ``device`` unless they are a floating
    ``torch.dtype`` and a device torch can parse (whether it is present is the probe's to find)."""
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise SmoothrankError(f"dtype: expected a floating torch.dtype (e.g. torch.float64), got {dtype!r}")
    if device is not None:
        try:
            torch.device(device)
        except (RuntimeError, TypeError, ValueError) as err:
            raise SmoothrankError(f"device: {err}") from None


def check_min_hessian(min_hessian: Any) -> None:
    """Raise :class:`SmoothrankError` naming ``min_hessian`` unless it is a positive finite number."""
    kinds = int | float | np.integer | np.floating
    number = not isinstance(min_hessian, bool) and isinstance(min_hessian, kinds)
    if not (number and 0 < min_hessian < float("inf")):
        raise SmoothrankError(f"min_hessian: expected a positive finite number, got {min_hessian!r}")


def boosting_gradients(loss: str | Callable[..., Any], scores: Any, labels: Any, group_sizes: Any, *,
                       weights: Any = None, hessian: str = "constant",
                       min_hessian: float = _MIN_HESSIAN,
                       dtype: torch.dtype = torch.float64, device: str | torch.device | None = None,
                       chunk_items: int = _CHUNK_ITEMS, **options: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-document gradient and Hessian of ``sum_q loss(s_q, y_q)`` for a booster.

    Parameters
    ----------
    loss : a registered loss name (``options`` are its options) or a bound loss
        (``smoothrank.losses.get(...)``, or any ``fn(scores, labels, *, mask, reduction)``)
    scores, labels : flat arrays, one value per document; a query's documents are contiguous
    group_sizes : the number of documents of each query, in order (LightGBM's ``group``)
    weights : optional per-document weights multiplying the gradient and the Hessian (taken as
        given, as LightGBM takes them: a negative weight gives a negative Hessian)
    hessian : ``"constant"`` (1 for every document of a query the loss depends on),
        ``"diagonal"`` (``max(|d^2 L / d s_i^2|, min_hessian)``; in closed form for a loss registered
        with a ``hessian_diagonal`` (``rank_net``, ``lambda_rank``, ``list_net``), else by
        autograd, which needs a twice-differentiable loss)
        or ``"curvature"`` (the query's curvature along its gradient, floored at ``min_hessian``,
        for each of its documents; any loss, two more gradient passes)
    min_hessian : the floor of the diagonal and curvature Hessians (> 0). At its default, a
        ``RuntimeWarning`` says when most queries' curvature is below it (their steps are then
        bounded by the floor alone); any other value is taken as a chosen bound and not warned
        of (the default passed explicitly is the default).
    dtype, device : where the loss is computed
    chunk_items : padded slots per batch of similar-length queries (memory bound)

    Returns
    -------
    (grad, hess) : float64 arrays of the documents' length
    """
    fn = _bind(loss, options)
    if hessian not in HESSIANS:
        raise SmoothrankError(f"hessian: expected one of {HESSIANS}, got {hessian!r}")
    check_min_hessian(min_hessian)
    _check_dtype_device(dtype, device)
    if not isinstance(chunk_items, int | np.integer) or isinstance(chunk_items, bool) or chunk_items < 1:
        raise SmoothrankError(f"chunk_items: expected a positive integer, got {chunk_items!r}")
    s = _flat(scores, "scores")
    y = _flat(labels, "labels", s.shape[0])
    w = None if weights is None else _flat(weights, "weights", s.shape[0])
    sizes = _sizes(group_sizes, s.shape[0])
    raw = None
    # Compiled per-query kernels on the flat arrays (smoothrank.boosting_kernels); the diagonal only
    # where the loss has it in closed form.
    if _FLAT_KERNELS and (hessian != "diagonal" or _closed_form_diagonal(fn) is not None):
        from smoothrank import boosting_kernels

        raw = boosting_kernels.flat_gradients(fn, s, y, sizes, hessian=hessian, dtype=dtype, device=device)
    if raw is None:
        raw = _padded_gradients(fn, s, y, sizes, hessian, dtype, device, chunk_items)
    described = losses.find(fn)
    ndcg_like = described is not None and described.constant_on_equal_labels
    curvature = hessian == "curvature"
    grad, hess, flat_queries, live_queries = _finish(raw, y, sizes, ndcg_like=ndcg_like,
                                                     min_hessian=min_hessian, curvature=curvature)
    if w is not None:
        with np.errstate(over="ignore"):  # an overflow is refused just below, by name
            grad, hess = grad * w, hess * w
    if not (np.isfinite(grad).all() and np.isfinite(hess).all()):  # after the weights: 1e308 * 2 is inf
        what = "these scores" if w is None else "these scores and weights"
        raise SmoothrankError(f"{_loss_name(fn)}: the gradient or Hessian is not finite at {what}")
    # A few flat queries are harmless (a leaf weighs each query by its curvature); most of them flat
    # leave the leaves' steps bounded by min_hessian alone, which a caller who set it has chosen.
    if flat_queries and 2 * flat_queries >= live_queries and min_hessian == _MIN_HESSIAN:
        # No counts in the text: one warning per call site, not one per boosting round.
        warnings.warn(f"hessian='curvature': most queries of {_loss_name(fn)} have a curvature along their "
                      f"gradient below min_hessian={min_hessian:g} (the loss is about linear along it, "
                      "e.g. RMSE at tied scores), so their Newton step is bounded by min_hessian alone; use "
                      "hessian='constant' or 'diagonal' for this loss, or a larger min_hessian to bound the "
                      "step (a min_hessian set by the caller is not warned of)",
                      RuntimeWarning, stacklevel=2)
    return grad, hess


def _padded_gradients(fn: Callable[..., Any], s: np.ndarray, y: np.ndarray, sizes: np.ndarray, hessian: str,
                      dtype: torch.dtype, device: Any, chunk_items: int
                      ) -> tuple[np.ndarray, np.ndarray | None]:
    """The flat gradient and raw Hessian (None for the constant one) from the loss's PyTorch code,
    on batches of similar-length queries padded to their longest."""
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    grad = np.zeros_like(s)
    hess = None if hessian == "constant" else np.zeros_like(s)
    for group in length_buckets(sizes, max_items=chunk_items):
        queries = np.asarray(group)
        width = int(sizes[queries].max())
        pos = np.arange(width)
        mask_np = pos[None, :] < sizes[queries][:, None]
        rows = np.where(mask_np, offsets[queries][:, None] + pos[None, :], 0)
        mask = torch.as_tensor(mask_np, device=device)
        s_b = torch.as_tensor(s[rows], dtype=dtype, device=device).requires_grad_(True)
        y_b = torch.as_tensor(y[rows], dtype=dtype, device=device)
        g_b, h_b = _batch_grad_hess(fn, s_b, y_b, mask, hessian)
        grad[rows[mask_np]] = g_b.detach().to("cpu", torch.float64).numpy()[mask_np]
        if hess is not None and h_b is not None:
            hess[rows[mask_np]] = h_b.detach().to("cpu", torch.float64).numpy()[mask_np]
    return grad, hess


def _finish(raw: tuple[np.ndarray, np.ndarray | None], y: np.ndarray, sizes: np.ndarray, *, ndcg_like: bool,
            min_hessian: float, curvature: bool) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The booster's gradient and Hessian from the loss's raw ones, and the counts of live queries
    and of those whose curvature is below ``min_hessian`` (for the curvature Hessian's warning)."""
    grad, diag = raw
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))

    def per_doc(per_query: np.ndarray) -> np.ndarray:
        return np.repeat(per_query, sizes)

    # Equal labels under an NDCG loss: NDCG is constant, whatever residual the surrogate leaves.
    tied = ndcg_like & (np.minimum.reduceat(y, starts) == np.maximum.reduceat(y, starts))
    grad = np.where(per_doc(tied), 0.0, grad)
    # A query whose loss ignores its scores gets no Hessian either (LambdaMART's convention).
    live = np.logical_or.reduceat(grad != 0, starts)
    if diag is None:
        return grad, per_doc(live).astype(np.float64), 0, 0
    diag = np.abs(diag)
    live |= np.logical_or.reduceat(diag != 0, starts) & ~tied
    hess = np.where(per_doc(live), np.maximum(diag, min_hessian), 0.0)
    if not curvature:
        return grad, hess, 0, 0
    # The curvature is one value a query, each of its documents holding it.
    return grad, hess, int((live & (diag[starts] < min_hessian)).sum()), int(live.sum())


def _batch_grad_hess(fn: Callable[..., Any], scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor,
                     hessian: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    if hessian == "curvature":
        return _batch_grad_curvature(fn, scores, labels, mask)
    second = hessian == "diagonal"
    value = fn(scores, labels, mask=mask, reduction="sum")
    if not value.requires_grad:  # no query of the batch depends on its scores
        zeros = torch.zeros_like(scores)
        return zeros, (zeros if second else None)
    closed_form = _closed_form_diagonal(fn) if second else None
    if closed_form is not None:  # O(n^2) a query (pairwise), O(n) (ListNet), not n backward passes
        (grad,) = torch.autograd.grad(value, scores)
        return grad, closed_form(scores.detach(), labels, mask=mask, reduction="sum")
    (grad,) = torch.autograd.grad(value, scores, create_graph=second)
    if not second:
        return grad, None
    if not grad.requires_grad:
        raise SmoothrankError(f"hessian='diagonal': {_loss_name(fn)} is not twice differentiable here; "
                              "use hessian='constant'")
    n_rows, width = scores.shape
    block = _DIAG_BLOCK or max(1, min(width, _DIAG_PAIR_BUDGET // (n_rows * width * width)))
    try:
        return grad.detach(), _hessian_diagonal(grad, scores, block)
    except NotTwiceDifferentiable:  # a hand-written first derivative met (smoothrank._autograd)
        raise SmoothrankError(f"hessian='diagonal': {_loss_name(fn)} is not twice differentiable here; "
                              "use hessian='constant'") from None


def _closed_form_diagonal(fn: Callable[..., Any]) -> Callable[..., torch.Tensor] | None:
    """The loss's Hessian diagonal in closed form, its options bound, where it is registered with one."""
    described = losses.find(fn)
    if described is None or described.hessian_diagonal is None:
        return None
    if isinstance(fn, losses.BoundLoss):
        return functools.partial(described.hessian_diagonal, **fn.options)
    return described.hessian_diagonal


def _hessian_diagonal(grad: torch.Tensor, scores: torch.Tensor, block: int) -> torch.Tensor:
    """The derivative d grad_ij / d s_ij for every (query i, position j), from a differentiable ``grad``."""
    try:
        return _diagonal_in_blocks(grad, scores, block)
    except RuntimeError:
        if block == 1:
            raise
        # A loss with an op that vmap cannot batch: one position per backward pass.
        return _diagonal_in_blocks(grad, scores, 1)


def _diagonal_in_blocks(grad: torch.Tensor, scores: torch.Tensor, block: int) -> torch.Tensor:
    # Queries are independent, so the Hessian is block-diagonal over the rows: the backward pass of
    # position j of every row gives row j of each query's Hessian, whose j-th entry is the diagonal.
    # ``block`` positions share one vectorised backward pass (is_grads_batched).
    n_rows, width = scores.shape
    diag = torch.zeros_like(scores)
    eye = torch.eye(width, dtype=scores.dtype, device=scores.device)
    for start in range(0, width, block):
        stop = min(start + block, width)
        tangents = eye[start:stop, None, :].expand(stop - start, n_rows, width)
        if block == 1:
            (rows,) = torch.autograd.grad(grad, scores, grad_outputs=tangents[0], retain_graph=True,
                                          allow_unused=True)
            rows = None if rows is None else rows[None]
        else:
            (rows,) = torch.autograd.grad(grad, scores, grad_outputs=tangents, retain_graph=True,
                                          allow_unused=True, is_grads_batched=True)
        if rows is not None:
            k = torch.arange(stop - start, device=scores.device)
            diag[:, start:stop] = rows[k, :, start + k].T
    return diag


def _batch_grad_curvature(fn: Callable[..., Any], scores: torch.Tensor, labels: torch.Tensor,
                          mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradient, and each query's curvature along it (broadcast over its real documents)."""
    # Common random numbers: the three gradient passes replay one draw, so that a loss that draws
    # is differenced at fixed draws instead of across two independent samples. A loss bound to its
    # own generator (``generator=0``) draws from it, not from the global one: it is rewound too.
    seed = int(torch.randint(0, 2**62, (), device="cpu"))
    generators = _bound_generators(fn)
    start = [g.get_state() for g in generators]

    def gradient(at: torch.Tensor) -> torch.Tensor:
        for g, state in zip(generators, start, strict=True):
            g.set_state(state)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            at = at.detach().requires_grad_(True)
            value = fn(at, labels, mask=mask, reduction="sum")
            if not value.requires_grad:  # no query of the batch depends on its scores
                return torch.zeros_like(at)
            (grad,) = torch.autograd.grad(value, at)
            return grad

    grad = gradient(scores)
    norm = torch.linalg.vector_norm(grad, dim=-1, keepdim=True)
    direction = torch.where(norm > 0, grad / norm.clamp_min(torch.finfo(grad.dtype).tiny), 0.0)
    spread = scores.detach().abs().masked_fill(~mask, 0.0).amax(-1, keepdim=True).clamp_min(1.0)
    step = _CURVATURE_STEP * spread
    along = (gradient(scores + step * direction) - gradient(scores - step * direction)) / (2.0 * step)
    curvature = (direction * along).sum(-1, keepdim=True)
    return grad, curvature.expand_as(grad).masked_fill(~mask, 0.0)


def _bound_generators(fn: Any) -> list[torch.Generator]:
    """The ``torch.Generator`` options a bound loss (``losses.get``) draws from."""
    return [v for v in getattr(fn, "options", {}).values() if isinstance(v, torch.Generator)]


def check_objective(loss: str | Callable[..., Any], *, hessian: str = "constant",
                    min_hessian: float = _MIN_HESSIAN, dtype: torch.dtype = torch.float64,
                    device: str | torch.device | None = None, **options: Any) -> None:
    """Raise :class:`SmoothrankError` if ``loss`` (with ``options``) cannot give a booster ``hessian``.

    The loss is computed once on a tiny problem, so that a bad option value, or a loss that autograd
    cannot differentiate twice under ``hessian="diagonal"``, fails before training. A loss that
    draws random numbers draws them from a forked generator, and its own generator (bound, or given
    in ``options``) is rewound: the caller's draws are left as they were.
    """
    generators = _bound_generators(loss) + [v for v in options.values() if isinstance(v, torch.Generator)]
    start = [g.get_state() for g in generators]
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            # the flat-curvature warning is about training data, not about this probe
            warnings.filterwarnings("ignore", "hessian='curvature'", RuntimeWarning)
            try:
                boosting_gradients(loss, [0.5, 0.0, -0.5], [1.0, 0.0, 2.0], [3], hessian=hessian,
                                   min_hessian=min_hessian, dtype=dtype, device=device, **options)
            except (RuntimeError, AssertionError) as err:  # torch's own: e.g. a device not present
                if device is None:
                    raise
                raise SmoothrankError(f"device: {device!r} cannot compute the loss ({err})") from None
    finally:
        for g, state in zip(generators, start, strict=True):
            g.set_state(state)


def _check_caller(data: Any, builder: str, expected: str, xgboost: bool) -> None:
    """Name the right builder when an objective is handed to the wrong library or API (PITFALLS 19):
    each calls its objective with other arguments, which would fail deep inside as an AttributeError
    or a misleading error (a DMatrix has a ``get_group`` too, but no ``None`` for absent weights)."""
    is_dmatrix = hasattr(data, "get_uint_info")
    if is_dmatrix if xgboost else (hasattr(data, "get_group") and not is_dmatrix):
        return
    if is_dmatrix:
        hint = "this is XGBoost's DMatrix: use xgboost_objective with xgboost.train(..., obj=fn)"
    elif hasattr(data, "get_group"):
        hint = "this is LightGBM's Dataset: use lightgbm_objective with lightgbm.train"
    elif isinstance(data, np.ndarray):
        hint = ("an array is what scikit-learn style wrappers pass (fn(y_true, y_pred, ...)): use "
                "lgbm_ranker_objective for lightgbm.LGBMRanker, and xgboost.train with "
                "xgboost_objective for XGBoost")
    else:
        hint = "see docs/boosting.md for the builder of each library and API"
    raise SmoothrankError(f"{builder}: the objective was called with {type(data).__name__}, not "
                          f"{expected}; {hint}")


def lightgbm_objective(loss: str | Callable[..., Any], *, hessian: str = "constant",
                       min_hessian: float = _MIN_HESSIAN, dtype: torch.dtype = torch.float64,
                       device: str | torch.device | None = None, **options: Any
                       ) -> Callable[[np.ndarray, Any], tuple[np.ndarray, np.ndarray]]:
    """``fn(preds, train_data) -> (grad, hess)`` for ``lightgbm.train(params={"objective": fn})``.

    The query sizes come from the training ``lightgbm.Dataset``'s ``group``; labels and weights
    from its ``label`` and ``weight``.
    """
    fn = _bind(loss, options)
    check_objective(fn, hessian=hessian, min_hessian=min_hessian, dtype=dtype, device=device)

    def objective(preds: np.ndarray, train_data: Any) -> tuple[np.ndarray, np.ndarray]:
        _check_caller(train_data, "lightgbm_objective", "a lightgbm.Dataset", xgboost=False)
        group = train_data.get_group()
        if group is None:
            raise SmoothrankError("lightgbm objective: the training Dataset has no group (query sizes)")
        return boosting_gradients(fn, preds, train_data.get_label(), group, weights=train_data.get_weight(),
                                  hessian=hessian, min_hessian=min_hessian, dtype=dtype, device=device)

    return objective


def lgbm_ranker_objective(loss: str | Callable[..., Any], *, hessian: str = "constant",
                          min_hessian: float = _MIN_HESSIAN, dtype: torch.dtype = torch.float64,
                          device: str | torch.device | None = None, **options: Any
                          ) -> Callable[[np.ndarray, np.ndarray, Any, Any], tuple[np.ndarray, np.ndarray]]:
    """``fn(y_true, y_pred, weight, group)`` for ``lightgbm.LGBMRanker(objective=fn)``.

    The four positional parameters are deliberate: LightGBM's scikit-learn wrapper passes ``group``
    to a custom objective only when it has exactly four (PITFALLS 19). The objective is an
    estimator parameter, so it pickles (``pickle``, ``joblib``, a parallel ``GridSearchCV``) when
    the loss is given by name or bound by :func:`smoothrank.losses.get` (which pickles by name and
    options); a plain function pickles when pickle can import it by name.
    """
    return _RankerObjective(loss, options, hessian=hessian, min_hessian=min_hessian, dtype=dtype,
                            device=device)


class _RankerObjective:
    """The callable :func:`lgbm_ranker_objective` returns (a class, not a closure: picklable)."""

    def __init__(self, loss: str | Callable[..., Any], options: dict[str, Any], *, hessian: str,
                 min_hessian: float, dtype: torch.dtype, device: str | torch.device | None) -> None:
        self.loss, self.options = loss, dict(options)
        self.hessian, self.min_hessian, self.dtype, self.device = hessian, min_hessian, dtype, device
        self._fn = _bind(loss, self.options)
        check_objective(self._fn, hessian=hessian, min_hessian=min_hessian, dtype=dtype, device=device)

    def __call__(self, y_true: np.ndarray, y_pred: np.ndarray, weight: Any, group: Any
                 ) -> tuple[np.ndarray, np.ndarray]:
        if group is None:
            raise SmoothrankError("LGBMRanker objective: no group (query sizes) was passed to fit()")
        return boosting_gradients(self._fn, y_pred, y_true, group, weights=weight, hessian=self.hessian,
                                  min_hessian=self.min_hessian, dtype=self.dtype, device=self.device)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_fn"}  # bound again on loading

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._fn = _bind(self.loss, self.options)

    def __repr__(self) -> str:
        return f"lgbm_ranker_objective({self.loss!r}, hessian={self.hessian!r})"


def xgboost_objective(loss: str | Callable[..., Any], *, hessian: str = "constant",
                      min_hessian: float = _MIN_HESSIAN, dtype: torch.dtype = torch.float64,
                      device: str | torch.device | None = None, **options: Any
                      ) -> Callable[[np.ndarray, Any], tuple[np.ndarray, np.ndarray]]:
    """``fn(preds, dtrain) -> (grad, hess)`` for ``xgboost.train(params, dtrain, obj=fn)``.

    The query boundaries come from the ``DMatrix``'s ``qid`` (or ``group``), its rows sorted by
    query as XGBoost requires; labels from its ``label``, and weights from its ``weight``: one per
    query (XGBoost refuses one per row on a ranking ``DMatrix``), rescaled to a mean of 1 as
    XGBoost's own ranking objectives do, so that ``rank:ndcg`` is reproduced with weights too and a
    common factor of the weights changes nothing. Give the booster ``base_score: 0`` so that every
    list starts tied at 0 and the intercept does not move.
    """
    fn = _bind(loss, options)
    check_objective(fn, hessian=hessian, min_hessian=min_hessian, dtype=dtype, device=device)

    def objective(preds: np.ndarray, dtrain: Any) -> tuple[np.ndarray, np.ndarray]:
        _check_caller(dtrain, "xgboost_objective", "an xgboost.DMatrix", xgboost=True)
        ptr = np.asarray(dtrain.get_uint_info("group_ptr"), dtype=np.int64)
        if ptr.size < 2:
            raise SmoothrankError("xgboost objective: the DMatrix has no qid or group (query boundaries)")
        sizes = np.diff(ptr)
        weight = np.asarray(dtrain.get_weight(), dtype=np.float64)
        if weight.size:
            if weight.size != sizes.size:
                raise SmoothrankError(f"xgboost objective: {weight.size} weights for {sizes.size} queries; "
                                      "XGBoost's ranking weights are one per query")
            total = weight.sum()
            if not total > 0:
                raise SmoothrankError("xgboost objective: the query weights sum to "
                                      f"{total:g}; they must be >= 0 with a positive sum")
            # XGBoost's lambdarank multiplies each query's weight by n_queries / sum(weights).
            weight = np.repeat(weight * (sizes.size / total), sizes)
        return boosting_gradients(fn, preds, dtrain.get_label(), sizes,
                                  weights=weight if weight.size else None, hessian=hessian,
                                  min_hessian=min_hessian, dtype=dtype, device=device)

    return objective
