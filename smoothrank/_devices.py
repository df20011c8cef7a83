"""What a torch device can compute: the few device facts that numerics depend on."""

from __future__ import annotations

import torch


def has_float64(device: torch.device) -> bool:
    """Whether ``device`` computes in float64 (every device but Apple's MPS)."""
    return device.type != "mps"


def wide_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """float64 where the device has it, else ``dtype``: for sums that cancel (see NeuralSort)."""
    return torch.float64 if has_float64(device) else dtype
