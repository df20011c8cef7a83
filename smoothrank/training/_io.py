"""Atomic writes of the run directory (see :mod:`smoothrank._atomic`), and reading its torch files."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from smoothrank._atomic import write_bytes_atomic as atomic_write_bytes
from smoothrank._atomic import write_text_atomic as atomic_write_text
from smoothrank.errors import DataFormatError

__all__ = ["atomic_torch_save", "atomic_write_bytes", "atomic_write_text", "load_torch_file"]


def atomic_torch_save(path: str | Path, obj: Any) -> None:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_torch_file(path: str | Path, what: str) -> Any:
    """``torch.load(path)`` of tensors and plain containers only (``weights_only``). A file that is
    not such a torch file (damaged, truncated, empty, another format) is a :class:`DataFormatError`
    ``"{path}: {what} ({reason})"``; an error naming a file (permissions, I/O) passes through, for
    the CLI to report with its path."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except OSError as err:
        if err.filename is not None:
            raise
        reason = err.strerror or type(err).__name__  # the zip reader's "Invalid argument" on a cut file
    except Exception as err:  # the weights-only unpickler trips anywhere (UnpicklingError, EOFError, ...)
        reason = type(err).__name__
    raise DataFormatError(f"{path}: {what} ({reason})") from None
