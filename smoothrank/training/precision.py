"""Mixed precision for training: ``training.precision`` as an autocast context and a gradient scaler.

``float32`` trains in full precision. ``bfloat16`` and ``float16`` run the model's forward pass and
the loss under :func:`torch.autocast` (matrix products in the half type, the losses in float32, as
they compute under autocast); the weights, the optimizer's state and the gradients stay float32.
float16's narrow range needs a gradient scaler (:class:`torch.amp.GradScaler`): the loss is
multiplied before the backward pass so that small gradients do not flush to zero, and a step whose
gradients overflowed is skipped. ``bfloat16`` has float32's range and needs none. Autocast to
bfloat16 exists on CUDA and on the CPU; float16 is for CUDA (the CPU's float16 matrix products are
emulated and slow, and the scaler is CUDA's).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from smoothrank.errors import ConfigError

__all__ = ["PRECISIONS", "autocast", "check_precision", "grad_scaler"]

#: ``training.precision`` values: the autocast dtype of each (None: no autocast).
PRECISIONS: dict[str, torch.dtype | None] = {"float32": None, "bfloat16": torch.bfloat16,
                                             "float16": torch.float16}


def check_precision(precision: str, device: torch.device) -> None:
    """Refuse a ``training.precision`` the device cannot train in, naming the option.

    Parameters
    ----------
    precision : {"float32", "bfloat16", "float16"}
    device : torch.device
        The training device (``training.device``).
    """
    if precision not in PRECISIONS:
        raise ConfigError(f"training.precision: expected one of {sorted(PRECISIONS)}, got {precision!r}")
    if precision == "float32" or device.type == "cuda":
        return
    if device.type == "cpu" and precision == "float16":
        raise ConfigError("training.precision: float16 needs a CUDA device (training.device: cuda); on the "
                          "CPU use bfloat16")
    if device.type != "cpu":
        raise ConfigError(f"training.precision: {precision} is supported on cuda and (bfloat16) cpu, not "
                          f"on {device.type}; use float32 there")


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The context to run the forward pass and the loss in: autocast to ``precision``'s type, or none."""
    dtype = PRECISIONS[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    """A gradient scaler, enabled for float16 only (disabled, its calls pass the loss and step through)."""
    return torch.amp.GradScaler(device.type, enabled=precision == "float16")
