"""A binary cache of parsed datasets, keyed by the input's content hash and the reader's options.

Entries are uncompressed ``.npz`` files (no pickles) in ``$SMOOTHRANK_CACHE`` or, when that is
unset, ``~/.cache/smoothrank``. They are written atomically, so concurrent readers and writers
never see a partial entry; a damaged entry is ignored and rewritten. Changing the file's bytes,
its ``.query`` side file or any reader option changes the key, so a stale entry is never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from smoothrank.data._io import atomic_writer
from smoothrank.errors import SmoothrankWarning

#: Bump when the parser's output for the same input and options changes, including when it starts
#: refusing an input it used to read (2: integer labels beyond 2^24; 3: the file's index base is kept;
#: 4: a qid holding ':' or non-ASCII whitespace is refused).
FORMAT_VERSION = 4
_FIELDS = ("features", "labels", "qids", "doc_ids", "offsets", "line_numbers", "index_base")


def cache_dir() -> Path:
    """The cache folder: ``$SMOOTHRANK_CACHE`` if set, else ``~/.cache/smoothrank``."""
    env = os.environ.get("SMOOTHRANK_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "smoothrank"


def file_digest(path: Path, *, chunk: int = 1 << 22) -> str:
    """BLAKE2b digest of the raw bytes of ``path`` (read in chunks: no whole-file copy)."""
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            h.update(block)
    return h.hexdigest()


def cache_key(digests: Iterable[str], options: Mapping[str, object]) -> str:
    """The entry name for inputs with the given content digests, read with ``options``."""
    payload = json.dumps({"v": FORMAT_VERSION, "inputs": list(digests), "options": dict(options)},
                         sort_keys=True, default=str)
    return hashlib.blake2b(payload.encode(), digest_size=20).hexdigest()


def load_entry(key: str) -> dict[str, Any] | None:
    """The arrays stored under ``key``, or None if absent or unreadable."""
    path = cache_dir() / f"{key}.npz"
    if not path.is_file():
        return None
    try:
        # our own handle: np.load leaves the file it opened unclosed when the zip is damaged
        with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as npz:
            arrays: dict[str, Any] = {name: npz[name] for name in _FIELDS}
        base = int(arrays["index_base"])  # stored as a number, -1 for None
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, EOFError):
        return None  # a damaged entry: parse again and overwrite it
    arrays["index_base"] = None if base < 0 else base
    return arrays


def store_entry(key: str, arrays: Mapping[str, Any]) -> None:
    """Store ``arrays`` under ``key``; a cache that cannot be written only warns."""
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_writer(folder / f"{key}.npz") as handle:
            base = arrays.get("index_base")
            np.savez(handle, **{name: arrays[name] for name in _FIELDS if name != "index_base"},
                     index_base=np.asarray(-1 if base is None else base, dtype=np.int64))
    except OSError as err:
        warnings.warn(f"could not write the dataset cache in {folder}: {err}", SmoothrankWarning,
                      stacklevel=3)
