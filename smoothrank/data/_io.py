"""Small file helpers: transparent gzip reading and atomic writing."""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

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


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """Yield a binary handle on a temporary file that replaces ``path`` only on success.

    The temporary file lives in the destination folder so that ``os.replace`` is a rename on
    one file system: a reader never sees a half-written file, and a failed write leaves the old
    file untouched. A ``.gz`` destination is gzip-compressed with mtime 0 (byte-reproducible).
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as raw:
            if path.suffix == ".gz":
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped:
                    yield zipped
            else:
                yield raw
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_writer`)."""
    with atomic_writer(path) as handle:
        handle.write(data)
