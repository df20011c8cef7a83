"""The building blocks of a run, each made from its section of a :class:`Config`: the data splits, the
feature transforms, the loss, the device and the optimiser."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from smoothrank.errors import ConfigError
from smoothrank.training.config import Config

__all__ = ["build_loss", "build_optimizer", "build_transform", "load_splits", "resolve_device"]


def load_splits(config: Config) -> dict[str, Any]:
    """The train/valid/test :class:`smoothrank.data.Dataset` objects named by ``config.data``
    (:func:`smoothrank.datasets.load_splits`)."""
    from smoothrank.datasets import load_splits as load_data_section

    return load_data_section(config.data.model_dump())


def build_transform(config: Config) -> Any | None:
    """An unfitted transform pipeline from ``config.transforms`` (None when empty)."""
    if not config.transforms:
        return None
    from smoothrank.data import transforms as T

    steps: list[T.Transform] = []
    for spec in config.transforms:
        if spec.name == "standardize":
            steps.append(T.Standardize())
        elif spec.name == "signed_log1p":
            steps.append(T.SignedLog1p(features=spec.features))
        else:
            steps.append(T.QueryMinMax())
    return T.Compose(steps)


def build_loss(config: Config) -> Callable[..., Tensor]:
    """The registry loss ``config.loss.name`` with ``config.loss.options`` (checked up front)."""
    from smoothrank import losses

    name, options = config.loss.name, dict(config.loss.options)
    available = losses.available()
    if name not in available:
        raise ConfigError(f"loss.name: unknown loss {name!r}; available: {', '.join(sorted(available))}")
    known = losses.options(name)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(f"loss.options: unknown option(s) {unknown} for loss {name!r}; "
                          f"it takes {sorted(known)}")
    try:
        return losses.get(name, **options)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"loss.options: {err}") from None


def resolve_device(name: str) -> torch.device:
    """``training.device`` as a ``torch.device`` this machine can use, else :class:`ConfigError`."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"training.device: unknown device {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"training.device: {name!r} requested but CUDA is not available")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"training.device: {name!r} requested but MPS (Apple GPU) is not available")
    if device.type == "meta":  # tensors without data: nothing can be trained or scored there
        raise ConfigError(f"training.device: {name!r} holds no data; use cpu, cuda or mps")
    try:
        # Another device ("xla", "cuda:7" on a one-GPU machine) fails only when a tensor is placed there.
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError) as err:
        reason = str(err).split(". ")[0].splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"training.device: {name!r} cannot be used here ({reason})") from None
    return device


def build_optimizer(config: Config, model: nn.Module, lr: float) -> torch.optim.Optimizer:
    """The optimiser ``config.optimizer`` over ``model``'s parameters, at learning rate ``lr``."""
    spec = config.optimizer
    if spec.name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=spec.momentum,
                               weight_decay=spec.weight_decay)
    return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=spec.weight_decay)
