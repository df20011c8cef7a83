"""Atomic file writes, shared by every writer of the package.

A temporary file in the destination folder is written, flushed to disk and renamed over the
destination with ``os.replace``: a reader (or a resumed run) sees either the previous complete file
or the new complete one, never a half-written file, even if the process is killed mid-write.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """Yield a binary handle on a temporary file that replaces ``path`` only on success.

    A failed write leaves the old file untouched and removes the temporary file. A ``.gz``
    destination is gzip-compressed with mtime 0 (byte-reproducible). The file gets the
    permissions a plain ``open()`` would give it (``mkstemp`` alone makes it private).
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        os.chmod(tmp_name, 0o666 & ~_umask())
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


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`atomic_writer`)."""
    write_bytes_atomic(path, text.encode("utf-8"))
