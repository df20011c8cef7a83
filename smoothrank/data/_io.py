"""Small file helpers: transparent gzip reading; atomic writing lives in :mod:`smoothrank._atomic`."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path

from smoothrank._atomic import atomic_writer, write_bytes_atomic
from smoothrank.errors import DataFormatError

__all__ = ["atomic_writer", "check_readable", "gzip_errors", "is_gzip", "open_binary", "read_bytes",
           "sniff_format", "write_bytes_atomic"]

GZIP_MAGIC = b"\x1f\x8b"
#: Enough leading bytes to tell every format below.
HEAD_BYTES = 10
#: Leading bytes of formats the readers do not read: read as text, they make a baffling first error
#: ("the label 'BZh91AY&SY...' is not a number"). bz2 is "BZh", a block size digit, then the magic of
#: a block (pi) or of the stream's end (sqrt(pi), an empty stream), so no text line matches it.
_MAGIC = ((GZIP_MAGIC, "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"PK\x03\x04", "zip"), (b"PK\x05\x06", "zip"),
          (b"(\xb5/\xfd", "zstd"), (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))
_BZ2_BLOCK = (b"1AY&SY", b"\x17rE8P\x90")


def sniff_format(head: bytes) -> str | None:
    """The format the first bytes of an input show when it is not plain text: "gzip", "bz2", "xz",
    "zip", "zstd" or "UTF-16" (by its byte order mark, or without one by a zero byte at every other
    position: text of ASCII characters in UTF-16, which no LETOR line holds); None for anything else."""
    if head[:3] == b"BZh" and head[3:4].isdigit() and head[4:10] in _BZ2_BLOCK:
        return "bz2"
    kind = next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)
    if kind is None and len(head) >= 2 and (not any(head[1::2]) or not any(head[0::2])):
        return "UTF-16"
    return kind


def check_readable(head: bytes, where: str, *, gzip_ok: bool = True,
                   reads: str = "only plain and gzip files are read") -> None:
    """Raise a DataFormatError naming ``where`` if ``head`` starts a compressed (gzip too unless
    ``gzip_ok``) or UTF-16 input, which the readers would take for malformed text."""
    kind = sniff_format(head)
    if kind is None or (kind == "gzip" and gzip_ok):
        return
    if kind == "UTF-16":
        raise DataFormatError(f"{where}: UTF-16 text; convert it to UTF-8/ASCII "
                              "(e.g. iconv -f UTF-16 -t UTF-8)")
    raise DataFormatError(f"{where}: {kind}-compressed; {reads}: decompress it first")


def is_gzip(path: Path) -> bool:
    """True if ``path`` starts with the gzip magic bytes (the suffix is not trusted)."""
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC


def open_binary(path: Path) -> io.BufferedIOBase:
    """Open ``path`` for reading bytes, decompressing it on the fly if it is gzip; other compressed
    or UTF-16 files are a DataFormatError (a damaged gzip stream may raise what :func:`gzip_errors`
    turns into one)."""
    # A pipe (``--predictions /dev/stdin``, ``<(cmd)``) can be read once only: opened again after
    # the sniff, it had lost the bytes the sniff's buffer took. It is read whole instead.
    with open(path, "rb") as handle:
        data = handle.read() if _is_stream(path) else None
        head = handle.read(HEAD_BYTES) if data is None else data[:HEAD_BYTES]
    check_readable(head, str(path))
    if not head.startswith(GZIP_MAGIC):
        return open(path, "rb") if data is None else io.BytesIO(data)
    stream = gzip.open(path, "rb") if data is None else gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb")
    try:  # the same mistakes inside the gzip (a gzip of UTF-16 text, a file gzipped twice)
        check_readable(stream.peek(HEAD_BYTES)[:HEAD_BYTES], f"{path} (decompressed)", gzip_ok=False,
                       reads="a gzip file must hold plain text")
    except BaseException:
        stream.close()
        raise
    return stream


def _is_stream(path: Path) -> bool:
    """Whether ``path`` is an existing FIFO, socket or character device (links followed)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False  # open() reports it
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


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
