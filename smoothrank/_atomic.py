"""Atomic file writes, shared by every writer of the package.

A temporary file in the destination folder is written, flushed to disk and renamed over the
destination with ``os.replace``: a reader (or a resumed run) sees either the previous complete file
or the new complete one, never a half-written file, even if the process is killed mid-write.

An existing destination that is neither a regular file nor a directory (``/dev/null``, a FIFO, a
terminal) is written in place instead: renaming over it would replace the device by a regular
file (as root, ``--out /dev/null`` would destroy ``/dev/null``), and a stream has no half-written
state to protect. A symbolic link is written through: its target is replaced, the link is kept.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import math
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from smoothrank.errors import SmoothrankError


def _mode(path: Path) -> int | None:
    """``st_mode`` of what ``path`` points to, or None where nothing can be stat'ed."""
    try:
        return os.stat(path).st_mode
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def folder_lock(folder: Path, what: str) -> Iterator[None]:
    """Hold an exclusive advisory lock on the existing ``folder`` (flock on the folder itself: no
    lock file is left behind); a second holder is refused at once with a :class:`SmoothrankError`
    naming the folder. Two processes writing one run or experiment folder would run everything
    twice, and a resuming one removed the other's temporary files mid-write. Without ``fcntl``
    (Windows) nothing is locked."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SmoothrankError(f"{folder} is in use by another smoothrank process ({what}); wait for "
                                  "it to end, or use another folder") from None
        except OSError:  # a file system without locks (some network mounts): go on unlocked
            pass
        yield
    finally:
        os.close(fd)


def is_device_or_fifo(path: Path) -> bool:
    """Whether ``path`` is an existing device or FIFO (e.g. ``/dev/null``), written in place."""
    mode = _mode(path)
    return mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def blocking_file(folder: Path) -> Path | None:
    """The nearest of ``folder`` and its ancestors that exists, if it is not a directory."""
    for candidate in (folder, *folder.parents):
        mode = _mode(candidate)
        if mode is not None:
            return None if stat.S_ISDIR(mode) else candidate
    return None


def check_destination(path: str | os.PathLike[str], option: str | None = None, *,
                      inputs: Mapping[str, str | os.PathLike[str]] | None = None) -> Path:
    """``path`` as a Path, or a :class:`SmoothrankError` naming it (and ``option``, e.g. ``"--out"``)
    if :func:`atomic_writer` cannot write it: empty, a directory, or in a folder that does not exist;
    or if it is one of the command's ``inputs`` (``{"DATA": path}``), which the write would replace.

    The writer itself would fail too, but with errors that name its temporary file; callers taking
    a path from the user check it first, before any expensive work.
    """
    prefix = f"{option}: " if option else ""
    text = os.fspath(path)
    if not text:
        raise SmoothrankError(f"{prefix}empty output path")
    out = Path(text)
    mode = _mode(out)
    if mode is not None and stat.S_ISDIR(mode):
        raise SmoothrankError(f"{prefix}{out} is a directory, not a file")
    for name, source in (inputs or {}).items():
        if mode is not None and _same_file(out, Path(source)):
            raise SmoothrankError(f"{prefix}{out} is the {name} file this command reads; writing the "
                                  "output there would destroy it")
    folder = out.parent
    folder_mode = _mode(folder)
    if mode is None and (folder_mode is None or not stat.S_ISDIR(folder_mode)):
        blocker = blocking_file(folder)
        why = (f"{blocker} is not a directory" if blocker is not None
               else f"the folder {folder} does not exist")
        raise SmoothrankError(f"{prefix}cannot write {out}: {why}")
    return out


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # b missing or unreadable: its own command reports it
        return False


def _with_path(err: OSError, path: Path) -> OSError:
    """``err`` (same type and errno) naming ``path`` instead of the temporary file."""
    return type(err)(err.errno, err.strerror, str(path))


def _naming(err: OSError, path: Path, tmp_name: str | None = None) -> OSError:
    """``err`` naming ``path`` where it names no file (a full disk on ``write``) or the temporary
    file; an error about another file (the writer's body reads one) is left as it is."""
    if err.errno is not None and err.filename in (None, tmp_name):
        return _with_path(err, path)
    return err


@contextlib.contextmanager
def _encoded(raw: IO[bytes], path: Path) -> Iterator[IO[bytes]]:
    """``raw``, gzip-compressed with mtime 0 (byte-reproducible) for a ``.gz`` destination."""
    if path.suffix == ".gz":
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped:
            yield cast(IO[bytes], zipped)
    else:
        yield raw


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """Yield a binary handle on a temporary file that replaces ``path`` only on success.

    A failed write leaves the old file untouched and removes the temporary file. A ``.gz``
    destination is gzip-compressed with mtime 0 (byte-reproducible). The file gets the
    permissions a plain ``open()`` would give it. An interrupt (KeyboardInterrupt) at any point
    after the temporary file exists removes it too. Errors
    name ``path``, never the temporary file. A device or FIFO is written in place (module docstring).
    """
    if not os.fspath(path):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "")  # as open("") says
    path = Path(path)
    # What the path points to, links followed, before resolving them: /dev/stdout on a pipe is a
    # link to /proc/PID/fd/1, whose "target" pipe:[N] is no path, yet open() writes into the pipe.
    mode = _mode(path)
    if path.is_symlink() and (mode is None or stat.S_ISREG(mode)):
        path = Path(os.path.realpath(path))
        mode = _mode(path)
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
    if mode is not None and not stat.S_ISREG(mode):
        try:
            with open(path, "wb") as raw, _encoded(raw, path) as handle:
                yield handle
        except OSError as err:
            raise _naming(err, path) from None
        return
    folder = path.parent if str(path.parent) else Path(".")
    # The name is fixed before the file exists, so that an interrupt at any point after its
    # creation (a worker's KeyboardInterrupt on SIGTERM) finds it to remove: with mkstemp, one
    # between its return and the ``try`` left the temporary file behind.
    tmp_name = os.path.join(folder, f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        # O_EXCL: a file of that name (64 random bits collided) is not ours; mode 0o666 under the
        # umask gives the permissions a plain open() would
        fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        with os.fdopen(fd, "wb") as raw:
            with _encoded(raw, path) as handle:
                yield handle
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp_name, path)
    except OSError as err:
        if not (isinstance(err, FileExistsError) and err.filename == tmp_name):
            with contextlib.suppress(OSError):  # e.g. never created: the folder is missing
                os.unlink(tmp_name)
        raise _naming(err, path, tmp_name) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_writer`)."""
    with atomic_writer(path) as handle:
        handle.write(data)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`atomic_writer`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def strict_json(value: Any, *, indent: int | None = None) -> str:
    """``value`` as strict JSON: NaN and infinite floats (an undefined metric, a DCG overflowed
    under exponential gains) become null, numpy scalars plain numbers; never ``NaN``/``Infinity``."""
    return json.dumps(_json_safe(value), indent=indent, allow_nan=False)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    return value
