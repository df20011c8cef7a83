"""Atomic writes of the run directory (see :mod:`smoothrank._atomic`), and reading its torch files."""

from __future__ import annotations

import io
import warnings
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
        # The loader's own warnings (e.g. "Detected pickle protocol 4" for any plain pickle) are
        # held back: a file that is not a torch file gets the one clear error below, and the
        # warnings of a file that loads are given again.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            blob = torch.load(path, map_location="cpu", weights_only=True)
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return blob
    except OSError as err:
        if err.filename is not None:
            raise
        reason = err.strerror or type(err).__name__  # the zip reader's "Invalid argument" on a cut file
    except Exception as err:  # the weights-only unpickler trips anywhere (UnpicklingError, EOFError, ...)
        reason = type(err).__name__
    raise DataFormatError(f"{path}: {what} ({reason})") from None
