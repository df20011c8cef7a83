"""What a torch device can compute: the few device facts that numerics depend on."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch

_F = TypeVar("_F", bound=Callable[..., Any])


def has_float64(device: torch.device) -> bool:
    """Whether ``device`` computes in float64 (every device but Apple's MPS)."""
    return device.type != "mps"


def wide_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """float64 where the device has it, else ``dtype``: for sums that cancel (see NeuralSort)."""
    return torch.float64 if has_float64(device) else dtype


def autocast_off(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """Turn ``torch.autocast`` off on ``device``'s type where it is on, so that products run in their
    inputs' dtype: an autocast bfloat16 matmul moved NeuralNDCG's loss by 3e-4 and its gradient by 3%."""
    kind = device.type
    if torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind):
        return torch.autocast(kind, enabled=False)
    return contextlib.nullcontext()


def without_autocast(fn: _F) -> _F:
    """Run ``fn`` with autocast off on the device of its first tensor argument (also for an autograd
    Function's backward, which runs under the autocast state of the ``backward()`` call)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        if first is None:
            return fn(*args, **kwargs)
        with autocast_off(first.device):
            return fn(*args, **kwargs)
    return cast(_F, wrapper)  # functools.wraps keeps fn's signature
