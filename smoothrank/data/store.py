"""The on-disk dataset store: parsed datasets as ``.npy`` files, opened as read-only memory maps.

An entry is a folder in :func:`cache_dir` holding one ``.npy`` file per array and a JSON
``manifest.json``. The reader writes an entry while it parses, chunk by chunk, into a temporary
folder (``.tmp-<pid>-<random>``); the manifest is written last (temporary file + rename) and the
folder is then renamed into place, so an interrupted conversion leaves no entry that looks complete
(a folder without a manifest is never served, and is removed). Opening an entry reads neither the
source nor the arrays: they are memory-mapped, and several processes share their pages.

Identity: an entry's name is derived from its source's real path (and the path of its ``.query``
side file); its manifest records the source's path, size, modification time (ns) and inode. On open
these are compared with the source as it is now (one ``stat``), and an entry that does not match (the
file changed, or the entry was copied from another file's) is refused, removed and rebuilt. A full
BLAKE2b hash of the source is compared too where it is asked for (``verify=True``).

Size: the store keeps at most :func:`cache_limit` bytes (``$SMOOTHRANK_CACHE_SIZE``, e.g. ``20G``,
``500M``; default 10 GiB); the least recently used entries are evicted first (the one just opened or
written is kept even when larger than the limit).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from smoothrank.errors import SmoothrankError

__all__ = ["STORE_FORMAT", "EntryInfo", "EntryWriter", "cache_dir", "cache_limit", "clear", "entries",
           "evict", "file_digest", "find", "open_arrays", "remove", "scratch_array", "source_identity",
           "touch"]

#: Bump when an entry's layout, or the parser's output for the same input and options, changes.
STORE_FORMAT = 5
MANIFEST = "manifest.json"
_USED = "used"  # an empty file whose modification time is the entry's last use
_TMP = ".tmp-"
DEFAULT_LIMIT = 10 << 30
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def cache_dir() -> Path:
    """The store's folder: ``$SMOOTHRANK_CACHE`` if set, else ``~/.cache/smoothrank``."""
    env = os.environ.get("SMOOTHRANK_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "smoothrank"


def cache_limit() -> int:
    """The store's size limit in bytes: ``$SMOOTHRANK_CACHE_SIZE`` (a number of bytes, or with a
    suffix K, M, G or T: powers of 1024), default 10 GiB."""
    text = os.environ.get("SMOOTHRANK_CACHE_SIZE", "").strip()
    if not text:
        return DEFAULT_LIMIT
    return parse_size(text, "SMOOTHRANK_CACHE_SIZE")


def parse_size(text: str, what: str) -> int:
    """``"10G"``, ``"500M"``, ``"123"`` as a number of bytes; a SmoothrankError naming ``what`` otherwise."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?", text.strip(), re.IGNORECASE)
    if match is None:
        raise SmoothrankError(f"{what}: expected a size such as 500M or 20G, got {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def file_digest(path: Path, *, chunk: int = 1 << 22) -> str:
    """BLAKE2b digest of the raw bytes of ``path`` (read in chunks: no whole-file copy)."""
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            h.update(block)
    return h.hexdigest()


def source_identity(path: Path, side: Path | None = None) -> dict[str, Any]:
    """What identifies a source file cheaply: real path, size, modification time (ns) and inode, and
    the same of its ``.query`` side file (None without one)."""
    def one(p: Path) -> dict[str, Any]:
        st = os.stat(p)
        return {"path": os.path.realpath(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                "inode": st.st_ino}
    return {**one(path), "side": one(side) if side is not None else None}


def entry_prefix(identity: Mapping[str, Any]) -> str:
    """The name stem of the entries of a source: a hash of its path and its side file's path."""
    side = identity.get("side")
    shards = [s.get("path") for s in identity.get("shards") or []]
    key = json.dumps([STORE_FORMAT, identity.get("path"), side and side.get("path"), identity.get("bundled"),
                      shards, identity.get("options")], sort_keys=True)
    return hashlib.blake2b(key.encode(), digest_size=10).hexdigest()


def _same_source(recorded: Mapping[str, Any] | None, current: Mapping[str, Any]) -> bool:
    if not isinstance(recorded, Mapping):
        return False
    fields = ("path", "size", "mtime_ns", "inode", "bundled")
    if any(recorded.get(f) != current.get(f) for f in fields):
        return False
    if recorded.get("options") != current.get("options"):
        return False
    shards, now_shards = recorded.get("shards") or [], current.get("shards") or []
    if len(shards) != len(now_shards) or not all(_same_source(a, b) for a, b in zip(shards, now_shards,
                                                                                      strict=True)):
        return False
    side, now = recorded.get("side"), current.get("side")
    if side is None or now is None:
        return side is None and now is None
    return all(side.get(f) == now.get(f) for f in fields)


def read_manifest(entry: Path) -> dict[str, Any] | None:
    """The manifest of ``entry``, or None where it is missing, unreadable or of another format."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != STORE_FORMAT:
        return None
    return manifest


def find(identity: Mapping[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The complete entries of the source ``identity`` as ``(folder, manifest)``. An entry under the
    source's name whose manifest does not match the source as it is now (changed since, copied from
    another file's entry, damaged, of another format) is removed, not served."""
    folder = cache_dir()
    prefix = entry_prefix(identity)
    try:
        candidates = sorted(folder.glob(f"{prefix}-*"))
    except OSError:
        return
    for entry in candidates:
        manifest = read_manifest(entry)
        if manifest is None or not _same_source(manifest.get("source"), identity):
            remove(entry)
            continue
        yield entry, manifest


def open_arrays(entry: Path, manifest: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
    """The arrays of ``entry`` as read-only memory maps (small ones read into memory), or None when a
    file is missing or does not hold what the manifest says."""
    arrays = {}
    try:
        for name, meta in manifest["arrays"].items():
            path = entry / meta["file"]
            array = np.load(path, mmap_mode="r", allow_pickle=False) if meta.get("mmap", True) \
                else np.load(path, allow_pickle=False)
            if list(array.shape) != list(meta["shape"]) or str(array.dtype) != meta["dtype"]:
                return None
            arrays[name] = array
    except (OSError, ValueError, KeyError, TypeError, EOFError):
        return None
    return arrays


def touch(entry: Path) -> None:
    """Record a use of ``entry`` (for least-recently-used eviction); a read-only store is fine."""
    with contextlib.suppress(OSError):
        os.utime(entry / _USED)


def remove(entry: Path) -> None:
    """Remove ``entry`` (renamed aside first, so no reader finds it half removed); open memory maps
    of it stay valid."""
    aside = entry.with_name(f"{_TMP}{os.getpid()}-{secrets.token_hex(4)}-rm")
    try:
        os.rename(entry, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)


@dataclass(frozen=True)
class EntryInfo:
    """One entry of the store, as ``smoothrank cache list`` shows it."""

    path: Path
    source: str
    bytes: int
    last_used: float
    n_docs: int
    n_features: int


def _size(entry: Path) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for item in entry.iterdir():
            with contextlib.suppress(OSError):
                total += item.stat().st_size
    return total


def _last_used(entry: Path) -> float:
    try:
        return (entry / _USED).stat().st_mtime
    except OSError:
        return 0.0


def entries() -> list[EntryInfo]:
    """The complete entries of the store, most recently used first."""
    found = []
    folder = cache_dir()
    if not folder.is_dir():
        return []
    for entry in folder.iterdir():
        if entry.name.startswith(_TMP) or not entry.is_dir():
            continue
        manifest = read_manifest(entry)
        if manifest is None:
            continue
        source = manifest.get("source", {})
        shape = manifest.get("arrays", {}).get("features", {}).get("shape", [0, 0])
        shards = " + ".join(str(s.get("path")) for s in source.get("shards") or [])
        name = str(source.get("bundled") or source.get("path") or shards)
        found.append(EntryInfo(entry, name, _size(entry), _last_used(entry), int(shape[0]), int(shape[1])))
    return sorted(found, key=lambda e: e.last_used, reverse=True)


def _writer_alive(name: str) -> bool:
    """Whether the process that made the temporary folder ``name`` still runs."""
    try:
        pid = int(name[len(_TMP):].split("-", 1)[0])
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except OSError:  # exists, another user's
        return True
    return True


def _remove_leftovers(folder: Path) -> int:
    """Remove the temporary folders of writers that no longer run, and incomplete entries."""
    removed = 0
    for item in folder.iterdir():
        if item.name.startswith(_TMP):
            if not _writer_alive(item.name):
                if item.is_dir():
                    shutil.rmtree(item, ignore_errors=True)
                else:  # a scratch file its process did not get to unlink
                    with contextlib.suppress(OSError):
                        item.unlink()
                removed += 1
        elif item.is_dir() and read_manifest(item) is None:
            remove(item)
            removed += 1
    return removed


def clear() -> int:
    """Remove every entry (and what interrupted conversions left, and the ``.npz`` entries of the
    cache's earlier format); returns the number removed."""
    folder = cache_dir()
    if not folder.is_dir():
        return 0
    count = _remove_leftovers(folder)
    for old in folder.glob("*.npz"):
        with contextlib.suppress(OSError):
            old.unlink()
            count += 1
    for info in entries():
        remove(info.path)
        count += 1
    return count


def evict(limit: int | None = None, *, keep: Path | None = None) -> list[Path]:
    """Remove the least recently used entries until the store holds at most ``limit`` bytes (default
    :func:`cache_limit`); ``keep`` is never removed. Returns the removed entries."""
    limit = cache_limit() if limit is None else limit
    folder = cache_dir()
    if not folder.is_dir():
        return []
    with contextlib.suppress(OSError):
        _remove_leftovers(folder)
    listed = entries()
    total = sum(e.bytes for e in listed)
    removed = []
    for info in reversed(listed):  # least recently used first
        if total <= limit:
            break
        if keep is not None and info.path == keep:
            continue
        remove(info.path)
        total -= info.bytes
        removed.append(info.path)
    return removed


def scratch_array(shape: tuple[int, ...], dtype: npt.DTypeLike = np.float32) -> np.ndarray:
    """A zeroed array of ``shape`` backed by an unlinked temporary file in the store's folder (its pages
    live in the page cache, not in the process's anonymous memory; the file is gone when the array is):
    where a transform of memory-mapped features writes its output. Space is reserved first, so a full
    disk is a SmoothrankError, not a crash. Falls back to memory where the folder cannot be written."""
    folder = cache_dir()
    path = folder / f"{_TMP}{os.getpid()}-{secrets.token_hex(6)}-scratch"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        with open(path, "wb+") as handle:
            if nbytes and hasattr(os, "posix_fallocate"):
                os.posix_fallocate(handle.fileno(), 0, nbytes)
            elif nbytes:
                handle.truncate(nbytes)
        array = np.memmap(path, dtype=dtype, mode="r+", shape=shape) if nbytes else np.zeros(shape, dtype)
    except OSError as err:
        with contextlib.suppress(OSError):
            path.unlink()
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _space_error(err, folder, "transformed features") from None
        return np.zeros(shape, dtype=dtype)
    with contextlib.suppress(OSError):
        path.unlink()  # the map keeps the pages; nothing is left behind
    return array


def _space_error(err: OSError, folder: Path, what: str) -> SmoothrankError:
    return SmoothrankError(
        f"{folder}: no space left on the device while storing {what} in the dataset cache ({err.strerror}); "
        "free some space, or point SMOOTHRANK_CACHE at another disk, lower SMOOTHRANK_CACHE_SIZE, or read "
        "without the cache (cache=False, --no-cache)")


class EntryWriter:
    """Writes one entry into a temporary folder; :meth:`commit` makes it visible, leaving it
    (an exception, an interrupt) removes it. A full disk is a SmoothrankError naming the folder.

    Use as a context manager::

        with EntryWriter(identity, "train.txt") as writer:
            spill = writer.spill("features")       # append raw chunks
            ...
            writer.array("labels", labels)          # or whole arrays
            entry = writer.commit(manifest_fields)
    """

    def __init__(self, identity: Mapping[str, Any], what: str) -> None:
        self.identity = dict(identity)
        self.what = what
        self.folder = cache_dir()
        self.tmp: Path | None = None
        self.arrays: dict[str, dict[str, Any]] = {}

    def __enter__(self) -> EntryWriter:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.tmp = self.folder / f"{_TMP}{os.getpid()}-{secrets.token_hex(6)}"
        self.tmp.mkdir()
        return self

    def __exit__(self, kind, value, tb) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
        if isinstance(value, OSError) and value.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _space_error(value, self.folder, self.what) from None

    def path(self, name: str) -> Path:
        assert self.tmp is not None
        return self.tmp / name

    def allocate(self, name: str, dtype: np.dtype | str, shape: tuple[int, ...], *,
                 mmap: bool = True) -> np.memmap:
        """A new ``name.npy`` of ``shape``, its blocks reserved on disk (a full disk is an error here,
        not a crash when a page of the map is written), open for writing."""
        path = self.path(f"{name}.npy")
        array = np.lib.format.open_memmap(path, mode="w+", dtype=np.dtype(dtype), shape=shape)
        size = os.path.getsize(path)
        if size:
            fd = os.open(path, os.O_RDWR)
            try:
                if hasattr(os, "posix_fallocate"):
                    os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
        self.arrays[name] = {"file": f"{name}.npy", "dtype": str(np.dtype(dtype)), "shape": list(shape),
                             "mmap": mmap}
        return array

    def array(self, name: str, values: np.ndarray, *, mmap: bool = True) -> None:
        """Store ``values`` as ``name.npy``."""
        out = self.allocate(name, values.dtype, values.shape, mmap=mmap)
        if values.size:
            out[...] = values
        out.flush()
        del out

    def commit(self, fields: Mapping[str, Any]) -> Path:
        """Write the manifest (last, atomically) and move the entry into place; returns its folder."""
        assert self.tmp is not None
        manifest = {"format": STORE_FORMAT, "source": self.identity, "arrays": self.arrays,
                    "created": time.time(), **fields}
        tmp_manifest = self.tmp / f"{MANIFEST}.tmp"
        with open(tmp_manifest, "w") as handle:
            json.dump(manifest, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        (self.tmp / _USED).touch()
        os.replace(tmp_manifest, self.tmp / MANIFEST)
        final = self.folder / f"{entry_prefix(self.identity)}-{secrets.token_hex(4)}"
        os.rename(self.tmp, final)
        self.tmp = None
        return final
