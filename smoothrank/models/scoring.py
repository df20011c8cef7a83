"""Raw features in, scores out: a trained network with its fitted feature transforms as torch ops.

:func:`scoring_module` builds, from a network and the JSON state of its fitted transforms
(:meth:`smoothrank.data.transforms.Transform.state_dict`), one ``nn.Module``
``(features (B, L, F) float32, mask (B, L) bool) -> scores (B, L) float32``. It is what
``smoothrank export`` writes (ONNX, TorchScript, ``torch.export``) and what a loaded model scores
arrays with (:meth:`smoothrank.training.artifact.RankingModel.predict`).

The transforms compute as :mod:`smoothrank.data.transforms` does on a dataset: in float64, rounded
to float32 once at the end of each. ``query_minmax`` takes the minimum and maximum over the real
items of a list only (``mask``). The per-item networks (linear, MLP) run on every slot
(shapes never depend on the mask's values, so the graph exports with dynamic batch and list
sizes); padded slots score 0 when a mask is given.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from smoothrank.errors import SmoothrankError
from smoothrank.models import ContextAwareRanker, LinearScorer, MLPScorer

__all__ = ["ScoringModule", "needs_mask", "query_order", "score_rows", "scoring_module", "transform_module"]


class _Standardize(nn.Module):
    mean: Tensor
    std: Tensor

    def __init__(self, mean: Any, std: Any) -> None:
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float64))
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float64))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return ((x.double() - self.mean) / self.std).float()


class _SignedLog1p(nn.Module):
    columns: Tensor

    def __init__(self, columns: list[int] | None, n_features: int) -> None:
        super().__init__()
        chosen = torch.ones(n_features, dtype=torch.bool)
        if columns is not None:
            if any(j >= n_features for j in columns):
                raise SmoothrankError(f"SignedLog1p: features: column {max(columns)} is out of range for "
                                      f"{n_features} features")
            chosen = torch.zeros(n_features, dtype=torch.bool)
            chosen[list(columns)] = True
        self.register_buffer("columns", chosen)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        wide = x.double()
        logged = (torch.sign(wide) * torch.log1p(torch.abs(wide))).float()
        return torch.where(self.columns, logged, x)


class _QueryMinMax(nn.Module):
    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        wide = x.double()
        real = mask.unsqueeze(-1)
        lo = torch.where(real, wide, torch.inf).amin(dim=1, keepdim=True)
        span = torch.where(real, wide, -torch.inf).amax(dim=1, keepdim=True) - lo
        scale = torch.where(span > 0, span, torch.ones_like(span))
        return torch.where(real, (wide - lo) / scale, torch.zeros_like(wide)).float()


def _parts(state: dict[str, Any]) -> list[dict[str, Any]]:
    if not isinstance(state, dict) or "type" not in state:
        raise SmoothrankError(f"transform state: expected a transform's state_dict, got {state!r:.80}")
    if state["type"] == "Compose":
        return [part for sub in state.get("transforms", []) for part in _parts(sub)]
    return [state]


def transform_module(state: dict[str, Any] | None, n_features: int) -> nn.ModuleList:
    """The fitted transforms of ``state`` (a ``state_dict``; None: none) as torch modules, in order.

    Each module maps ``(x (B, L, F) float32, mask (B, L) bool) -> (B, L, F) float32``.
    """
    modules = nn.ModuleList()
    for part in [] if state is None else _parts(state):
        kind = part["type"]
        if kind == "Standardize":
            if len(part["mean"]) != n_features:
                raise SmoothrankError(f"Standardize: fitted on {len(part['mean'])} features, the model "
                                      f"takes {n_features}")
            modules.append(_Standardize(part["mean"], part["std"]))
        elif kind == "SignedLog1p":
            modules.append(_SignedLog1p(part.get("features"), n_features))
        elif kind == "QueryMinMax":
            modules.append(_QueryMinMax())
        else:
            raise SmoothrankError(f"transform state: unknown transform {kind!r}")
    return modules


def needs_mask(network: nn.Module, transform_state: dict[str, Any] | None) -> bool:
    """Whether scores depend on which slots are real: a list-wise network or a query-level transform."""
    query_level = any(p["type"] == "QueryMinMax" for p in ([] if transform_state is None
                                                            else _parts(transform_state)))
    return isinstance(network, ContextAwareRanker) or query_level


class ScoringModule(nn.Module):
    """``(features (B, L, F) float32, mask (B, L) bool or None) -> scores (B, L) float32``.

    The fitted transforms, then the network, in evaluation mode. Without a mask every slot is real
    (and the Context-Aware Ranker attends without a padding mask).
    """

    transforms: nn.ModuleList

    def __init__(self, network: nn.Module, transforms: nn.ModuleList, n_features: int) -> None:
        super().__init__()
        if not isinstance(network, LinearScorer | MLPScorer | ContextAwareRanker):
            raise SmoothrankError("scoring_module: expected a smoothrank model, got "
                                  f"{type(network).__name__}")
        self.network = network.eval()
        self.transforms = transforms
        self.n_features = n_features

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        padded = mask is not None
        if mask is None:
            mask = torch.ones(features.shape[:2], dtype=torch.bool, device=features.device)
        x = features.float()
        for step in self.transforms:
            x = step(x, mask)
        network = self.network
        if isinstance(network, ContextAwareRanker):
            if padded:
                x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
                attend = mask | ~mask.any(dim=1, keepdim=True)
                hidden = network.encoder(network.input(x), src_key_padding_mask=~attend)
            else:  # every slot real: attention without a padding mask (the same weights)
                hidden = network.encoder(network.input(x))
            scores = network.output(hidden).squeeze(-1)
        else:
            flat = x.reshape(-1, self.n_features)
            scores = network.net(flat).reshape(features.shape[0], features.shape[1])
        return scores.masked_fill(~mask, 0.0) if padded else scores


class _FeaturesOnly(nn.Module):
    """A :class:`ScoringModule` with one input, ``features``: for models whose scores need no mask."""

    def __init__(self, inner: ScoringModule) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, features: Tensor) -> Tensor:
        return self.inner(features)


def scoring_module(network: nn.Module, transform_state: dict[str, Any] | None, n_features: int, *,
                   with_mask: bool | None = None) -> nn.Module:
    """The network and its fitted transforms as one module, in float32 evaluation mode, on the CPU.

    Parameters
    ----------
    network : LinearScorer, MLPScorer or ContextAwareRanker
    transform_state : dict or None
        The fitted transforms' ``state_dict`` (as a model artifact stores it).
    n_features : int
    with_mask : bool, optional
        Whether the module takes ``(features, mask)`` (True) or ``features`` only (False). Default:
        :func:`needs_mask`.

    Returns
    -------
    nn.Module
        ``forward(features (B, L, F)[, mask (B, L)]) -> scores (B, L)``.
    """
    import copy

    network = copy.deepcopy(network).float().cpu().eval()
    module = ScoringModule(network, transform_module(transform_state, n_features), n_features).eval()
    if with_mask is None:
        with_mask = needs_mask(network, transform_state)
    return module if with_mask else _FeaturesOnly(module).eval()


def _as_ids(values: Any, n_rows: int, name: str) -> np.ndarray:
    """``values`` as a 1-D array of ``n_rows`` query ids."""
    ids = np.asarray(values)
    if ids.ndim != 1 or ids.shape[0] != n_rows:
        raise SmoothrankError(f"{name}: expected one query id per row ({n_rows},), got shape {ids.shape}")
    return ids


def query_order(n_rows: int, qid: Any = None, group: Any = None, *, names: tuple[str, str] = ("qid", "group")
                ) -> tuple[np.ndarray, np.ndarray]:
    """The row order that makes each query's rows contiguous, and the query number of each sorted row.

    Parameters
    ----------
    n_rows : int
    qid : array-like of shape (n_rows,), optional
        A query id per row; queries in the order of their first row, rows of a query in input order.
    group : array-like of int, optional
        Sizes of consecutive queries (summing to ``n_rows``).
    names : (str, str)
        The argument names used in error messages.

    Returns
    -------
    order : ndarray of int64, shape (n_rows,)
        ``rows[order]`` groups the queries.
    query : ndarray of int64, shape (n_rows,)
        The 0-based query number of each row of ``rows[order]`` (non-decreasing).
    """
    if qid is not None and group is not None:
        raise SmoothrankError(f"give {names[0]} (a query id per row) or {names[1]} (query sizes), not both")
    if group is not None:
        sizes = np.asarray(group)
        if sizes.ndim != 1 or sizes.dtype.kind not in "iu" or (sizes < 1).any() or sizes.sum() != n_rows:
            raise SmoothrankError(f"{names[1]}: expected positive integer query sizes summing to the "
                                  f"{n_rows} rows, got {sizes.tolist()[:10]!r:.120}")
        return np.arange(n_rows, dtype=np.int64), np.repeat(np.arange(sizes.shape[0]), sizes).astype(np.int64)
    if qid is None:
        return np.arange(n_rows, dtype=np.int64), np.zeros(n_rows, dtype=np.int64)
    ids = _as_ids(qid, n_rows, names[0])
    try:
        _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    except TypeError as err:  # mixed types that do not compare
        raise SmoothrankError(f"{names[0]}: query ids must be comparable values ({err})") from None
    first_row = first[inverse.reshape(-1)]  # each row's query, named by its first row
    order = np.argsort(first_row, kind="stable").astype(np.int64)
    sorted_first = first_row[order]
    query = np.r_[0, np.cumsum(sorted_first[1:] != sorted_first[:-1])].astype(np.int64)
    return order, query


def _checked_features(features: Any, n_features: int) -> np.ndarray:
    """``features`` as a C-ordered float32 (n_rows, n_features) array of finite values."""
    x = np.asarray(features)
    if x.ndim != 2 or x.shape[1] != n_features:
        raise SmoothrankError(f"features: expected shape (n_rows, {n_features}) (the model's {n_features} "
                              f"features), got {x.shape}")
    if x.dtype.kind not in "biuf":
        raise SmoothrankError(f"features: expected numbers, got dtype {x.dtype}")
    with np.errstate(over="ignore"):
        x32 = np.ascontiguousarray(x, dtype=np.float32)
    bad = ~np.isfinite(x32)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        raise SmoothrankError(f"features[{row}, {col}] is {x[row, col]} (not a finite float32 number)")
    return x32


@torch.no_grad()
def score_rows(module: ScoringModule, features: Any, qid: Any = None, *, n_features: int,
               batch_size: int = 256) -> np.ndarray:
    """Score rows of raw features with a :class:`ScoringModule` taking ``(features, mask)``.

    Parameters
    ----------
    module : ScoringModule
    features : array-like of shape (n_rows, n_features)
    qid : array-like of shape (n_rows,), optional
        The query of each row (rows of a query need not be contiguous); None: one query.
    n_features : int
    batch_size : int
        Queries per forward pass (each padded to its longest list).

    Returns
    -------
    ndarray of float64, shape (n_rows,)
        One score per row, in input order.
    """
    x = _checked_features(features, n_features)
    if qid is None and x.shape[0] > 0:  # one query: no grouping, no padding
        batch, mask = torch.from_numpy(x)[None], torch.ones((1, x.shape[0]), dtype=torch.bool)
        scores = module(batch)[0].double().numpy()
        if not np.isfinite(scores).all():
            _refuse(module, batch, mask, np.arange(x.shape[0])[None], x)
        return scores
    order, query = query_order(x.shape[0], qid)
    n_queries = int(query[-1]) + 1 if query.size else 0
    starts = np.searchsorted(query, np.arange(n_queries + 1))
    position = np.arange(x.shape[0]) - starts[query]
    scores = np.empty(x.shape[0], dtype=np.float64)
    for first in range(0, n_queries, batch_size):
        last = min(first + batch_size, n_queries)
        rows = slice(starts[first], starts[last])
        q, pos = query[rows] - first, position[rows]
        width = int(pos.max()) + 1
        batch = torch.zeros((last - first, width, n_features), dtype=torch.float32)
        mask = torch.zeros((last - first, width), dtype=torch.bool)
        batch[q, pos] = torch.from_numpy(x[order[rows]])
        mask[q, pos] = True
        out = module(batch, mask)[q, pos].double().numpy()
        if not np.isfinite(out).all():
            slots = np.full(tuple(mask.shape), -1)
            slots[q, pos] = order[rows]
            _refuse(module, batch, mask, slots, x)
        scores[order[rows]] = out
    return scores


def _refuse(module: ScoringModule, batch: Tensor, mask: Tensor, rows: np.ndarray, x: np.ndarray) -> None:
    """An error naming the first input row (``rows``: the input row of each slot, -1 for padding) whose
    transformed features or score are not finite, and the transform that made them so."""
    current = batch
    for step in module.transforms:
        current = step(current, mask)
        bad = ~torch.isfinite(current) & mask.unsqueeze(-1)
        if bool(bad.any()):
            b, j, col = (int(i) for i in torch.nonzero(bad)[0])
            row = int(rows[b, j])
            name = type(step).__name__.strip("_")
            raise SmoothrankError(f"features[{row}, {col}] ({x[row, col]:g}) is {float(current[b, j, col])} "
                                  f"after the fitted {name} transform (beyond float32)")
    scores = module(batch, mask)
    b, j = (int(i) for i in torch.nonzero(~torch.isfinite(scores) & mask)[0])
    raise SmoothrankError(f"features[{int(rows[b, j])}]: the model scored this row {float(scores[b, j])} "
                          "(its features are too large for the model's arithmetic)")
