"""Atomic writes of the run directory (see :mod:`smoothrank._atomic`)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from smoothrank._atomic import write_bytes_atomic as atomic_write_bytes
from smoothrank._atomic import write_text_atomic as atomic_write_text

__all__ = ["atomic_torch_save", "atomic_write_bytes", "atomic_write_text"]


def atomic_torch_save(path: str | Path, obj: Any) -> None:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write_bytes(path, buffer.getvalue())
