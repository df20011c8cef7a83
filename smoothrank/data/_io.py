"""Small file helpers: transparent gzip reading; atomic writing lives in :mod:`smoothrank._atomic`."""

from __future__ import annotations

import contextlib
import gzip
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from smoothrank._atomic import atomic_writer, write_bytes_atomic
from smoothrank.errors import DataFormatError

__all__ = ["atomic_writer", "gzip_errors", "is_gzip", "open_binary", "read_bytes", "write_bytes_atomic"]

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


@contextlib.contextmanager
def gzip_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Turn a damaged gzip stream read inside the block into a :class:`DataFormatError` naming ``path``.

    gzip only notices truncation or a bad CRC when it reaches the damage (often the very end), so
    the whole read must be inside the block.
    """
    try:
        yield
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise DataFormatError(f"{path}: corrupt or truncated gzip file ({err})") from None


#: The UTF-8 byte order mark that Windows tools put at the start of "UTF-8" text files.
BOM = b"\xef\xbb\xbf"


def without_bom(data: bytes) -> bytes:
    """``data`` without a leading UTF-8 byte order mark (read as text, it would join the first token)."""
    return data[len(BOM):] if data.startswith(BOM) else data


def read_bytes(path: Path) -> bytes:
    """The whole (decompressed) content of ``path``, without a leading byte order mark; a damaged
    gzip file is a DataFormatError."""
    with gzip_errors(path), open_binary(path) as handle:
        return without_bom(handle.read())
