"""Small file helpers: transparent gzip reading; atomic writing lives in :mod:`smoothrank._atomic`."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import IO

from smoothrank._atomic import atomic_writer, write_bytes_atomic

__all__ = ["atomic_writer", "is_gzip", "open_binary", "read_bytes", "write_bytes_atomic"]

GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: Path) -> bool:
    """True if ``path`` starts with the gzip magic bytes (the suffix is not trusted)."""
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC


def open_binary(path: Path) -> IO[bytes]:
    """Open ``path`` for reading bytes, decompressing it on the fly if it is gzip."""
    if is_gzip(path):
        return gzip.open(path, "rb")
    return open(path, "rb")


def read_bytes(path: Path) -> bytes:
    """The whole (decompressed) content of ``path``."""
    with open_binary(path) as handle:
        return handle.read()
