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

import torch
from torch import Tensor, nn

from smoothrank.errors import SmoothrankError
from smoothrank.models import ContextAwareRanker, LinearScorer, MLPScorer

__all__ = ["ScoringModule", "needs_mask", "scoring_module", "transform_module"]


class _Standardize(nn.Module):
    def __init__(self, mean: Any, std: Any) -> None:
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float64))
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float64))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return ((x.double() - self.mean) / self.std).float()


class _SignedLog1p(nn.Module):
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

    The fitted transforms, then the network, in evaluation mode. Without a mask every slot is real.
    """

    def __init__(self, network: nn.Module, transforms: nn.ModuleList, n_features: int) -> None:
        super().__init__()
        if not isinstance(network, LinearScorer | MLPScorer | ContextAwareRanker):
            raise SmoothrankError("scoring_module: expected a smoothrank model, got "
                                  f"{type(network).__name__}")
        self.network = network.eval()
        self.transforms = transforms
        self.n_features = n_features

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        if mask is None:
            mask = torch.ones(features.shape[:2], dtype=torch.bool, device=features.device)
        x = features.float()
        for step in self.transforms:
            x = step(x, mask)
        network = self.network
        if isinstance(network, ContextAwareRanker):
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
            attend = mask | ~mask.any(dim=1, keepdim=True)
            hidden = network.encoder(network.input(x), src_key_padding_mask=~attend)
            scores = network.output(hidden).squeeze(-1)
        else:
            flat = x.reshape(-1, self.n_features)
            scores = network.net(flat).reshape(features.shape[0], features.shape[1])
        return scores.masked_fill(~mask, 0.0)


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
