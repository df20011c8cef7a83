"""A strict, fast reader of LETOR / SVMlight ranking files.

Line format (LETOR 3.0/4.0, MSLR-WEB, Istella, Yahoo)::

    <label> qid:<query id> <index>:<value> <index>:<value> ... [# comment]

LightGBM-style files omit ``qid:``; their query boundaries come from a ``.query`` side file
holding one group size per line.

Strict by default: every problem is reported as ``DataFormatError("<file>:<line>: ...")``.
Refused: a non-numeric or non-finite label or value, a missing ``qid:``, a feature index
repeated on one line, an index beyond ``n_features``, a qid that reappears after another
qid's block (unless ``regroup=True``), a qid holding ':' or non-ASCII whitespace (a non-breaking
space after it), fractional or negative labels (unless allowed).

Speed: inputs of at least :data:`FAST_MIN_BYTES` go first through a compiled scanner
(:mod:`smoothrank.data._letor_kernel`, Numba) that reads the clean case, 16 MiB at a time, and
gives up on anything doubtful; the input is then read again by the strict parser below, whose
lines are split in Python and whose numbers are parsed and checked by vectorised NumPy code,
and which names the file and line of the problem. Both store the features once, as float32 (no
dense float64 copy). With the cache, both write the on-disk store (:mod:`smoothrank.data.store`)
chunk by chunk while they parse, so a file of any size is read with bounded memory, and a second
load memory-maps it.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import mmap
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from smoothrank._checks import check_bool
from smoothrank.data import store
from smoothrank.data._io import BOM, HEAD_BYTES, check_readable, gzip_errors, open_binary, without_bom
from smoothrank.data._options import ReaderOptions
from smoothrank.data._rows import (
    ROW_ARRAYS,
    DiskSink,
    Parsed,
    Rows,
    assemble,
    decode,
    show,
    stored_dataset,
)
from smoothrank.data.dataset import F32_EXACT_INT, F32_LIMIT, Dataset, concat_datasets
from smoothrank.errors import DataFormatError, IndexBaseError, SmoothrankError, SmoothrankWarning

_DOCID = re.compile(rb"docid\s*=\s*(\S+)")
_NULL = re.compile(rb":NULL(?= |$)")
_NUMBER = re.compile(rb"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|nan|inf|infinity)",
                     re.IGNORECASE)
_MAX_INDEX = 2**31 - 2
_MAX_GROUP = 2**40  # far beyond any file; keeps the sum of group sizes inside int64
#: Files at least this large (raw bytes) are cached when ``cache=None``.
AUTO_CACHE_BYTES = 1 << 20
#: Inputs at least this large (bytes on disk, or in memory) try the compiled scanner first; smaller
#: ones are parsed in a few milliseconds anyway and need not import Numba.
FAST_MIN_BYTES = 1 << 16
#: Without ``n_features``, a feature index above this is refused: the features are stored dense, so
#: one stray index (``1000000000:1``) would otherwise make an n_docs x 1e9 float32 matrix. LETOR
#: datasets have at most ~700 features; wider (hashed) files pass ``n_features`` to confirm.
MAX_INFERRED_FEATURES = 1 << 16
_CHUNK_BYTES = 1 << 24


# --------------------------------------------------------------------------------- public API
def load_letor(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    n_features: int | None = None,
    query_file: str | os.PathLike[str] | None = "auto",
    zero_based: bool | str = "auto",
    null_value: float | None = 0.0,
    allow_real_labels: bool = False,
    allow_negative_labels: bool = False,
    regroup: bool = False,
    cache: bool | None = None,
    verify: bool = False,
) -> Dataset:
    """Read a LETOR / SVMlight ranking file (plain or gzip, LF or CRLF) into a :class:`Dataset`.

    Parameters
    ----------
    path
        The file. gzip is recognised by its magic bytes, whatever the suffix; bz2, xz, zip, zstd and
        UTF-16 files are refused by theirs (decompress or convert them first). Several files (shards)
        are read as one dataset, queries in file order: a list of paths, or a glob pattern such as
        ``"train-*.txt"`` (files in sorted order). The first file then fixes the feature count and
        index base of the others (unless given), and a query id in two files stays two lists.
    n_features
        The declared feature count; an index beyond it is an error. ``None``: the largest index.
    query_file
        A LightGBM ``.query`` side file (one group size per line) for files without ``qid:``.
        ``"auto"`` (default) uses ``<path without .gz>.query`` or ``<path>.query`` when the
        first data line has no ``qid:`` and such a file exists. Query ids are then ``"0", "1", ...``.
    zero_based
        Whether feature index 0 is the first column. ``"auto"``: zero-based iff index 0 occurs.
        ``False`` makes index 0 an error.
    null_value
        Fill policy for LETOR 3.0's literal ``NULL`` values (missing features): they are read as
        this number (default 0.0, the value of an absent sparse feature). ``None``: an error.
    allow_real_labels, allow_negative_labels
        By default labels must be non-negative integers (graded relevance).
    regroup
        Rows of one qid must be contiguous. With ``regroup=True`` interleaved rows are grouped
        (stably, queries in order of first appearance); ``Dataset.line_numbers`` still gives
        each row's source line, and :func:`~smoothrank.data.write_predictions` with
        ``dataset=`` writes scores back in file order.
    cache
        Use the on-disk dataset store (:mod:`smoothrank.data.store`): the first read writes it while
        it parses (bounded memory), later reads memory-map it; the returned arrays are then read-only
        memory maps. ``None``: only for files of at least 1 MiB.
    verify
        With the cache: also compare a BLAKE2b hash of the file's bytes with the one recorded in
        the store (a read of the whole file); by default its size, modification time and inode are.

    Returns
    -------
    Dataset
        Rows in file order; ``doc_ids`` from a ``#docid = X`` comment, else the line number.
    """
    options = ReaderOptions(n_features, zero_based, null_value, allow_real_labels, allow_negative_labels,
                            regroup)
    if cache is not None:
        check_bool(cache, "cache")
    verify = check_bool(verify, "verify")
    shards = _shard_paths(path)
    if shards is not None:
        if query_file not in (None, "auto"):
            raise SmoothrankError("query_file: give one per file: with several files, each file's .query "
                                  "side file is found beside it (query_file='auto')")
        return _load_shards(shards, options, query_file=query_file, cache=cache, verify=verify)
    path = Path(path)  # type: ignore[arg-type]  # several paths took the shards branch above
    if not path.is_file():
        if path.exists():
            raise SmoothrankError(f"{path}: not a file")
        raise FileNotFoundError(2, "No such file or directory", str(path))
    side = _find_query_file(path, query_file)
    use_cache = cache if cache is not None else path.stat().st_size >= AUTO_CACHE_BYTES
    if use_cache:
        dataset = _through_store(path, side, options, verify)
        if dataset is not None:
            return dataset
    with gzip_errors(path), _memory_errors(path):
        parsed = _parse_file(path, side, options, Rows)
    return parsed.dataset(str(path))


_GLOB = re.compile(r"[*?\[]")


def _shard_paths(path: object) -> list[Path] | None:
    """The files of a list of paths, or of a glob pattern (a string with ``*``, ``?`` or ``[`` that
    is not an existing file), sorted; None for one file."""
    if isinstance(path, list | tuple):
        if not path:
            raise SmoothrankError("path: an empty list of files")
        return [Path(p) for p in path]
    if isinstance(path, str) and _GLOB.search(path) and not Path(path).exists():
        matches = sorted(Path(p) for p in glob.glob(path) if Path(p).is_file())
        if not matches:
            raise FileNotFoundError(2, "No file matches the pattern", path)
        return matches
    return None


def _load_shards(paths: list[Path], options: ReaderOptions, *, query_file: str | None, cache: bool | None,
                 verify: bool) -> Dataset:
    """Several LETOR files read as one dataset, queries in file order. The first file fixes the
    feature count of the others (unless ``n_features`` is given) and the index base (unless
    ``zero_based`` is), as :func:`smoothrank.datasets.load_splits` does for a config's splits; a
    query id in two files stays two lists (as :func:`concat_datasets`). Through the store, the
    result is one more entry (copied from the files' entries a block of rows at a time)."""
    parts: list[Dataset] = []
    for path in paths:
        first = parts[0] if parts else None
        width = first.n_features if first is not None and options.n_features is None else options.n_features
        base = options.zero_based
        if first is not None and base == "auto" and first.index_base is not None:
            base = first.index_base == 0
        parts.append(load_letor(path, n_features=width, query_file=query_file, zero_based=base,
                                null_value=options.null_value, allow_real_labels=options.allow_real_labels,
                                allow_negative_labels=options.allow_negative_labels, regroup=options.regroup,
                                cache=cache, verify=verify))
    if len(parts) == 1:
        return parts[0]
    if not all(isinstance(p.features, np.memmap) for p in parts):
        return concat_datasets(parts)
    identity = {"path": None, "size": None, "mtime_ns": None, "inode": None, "bundled": None, "side": None,
                "shards": [store.source_identity(p, None) for p in paths], "options": options.as_dict()}
    source = " + ".join(str(p) for p in paths)
    for entry, manifest in store.find(identity):
        if (dataset := open_entry(entry, manifest, source)) is not None:
            store.touch(entry)
            return dataset
        store.remove(entry)
    try:
        with store.EntryWriter(identity, source) as writer:
            entry = _write_concatenation(writer, parts)
    except OSError as err:
        warnings.warn(f"could not write the dataset cache in {store.cache_dir()}: {err}; concatenating "
                      "in memory", SmoothrankWarning, stacklevel=3)
        return concat_datasets(parts)
    store.evict(keep=entry)
    dataset = open_entry(entry, store.read_manifest(entry) or {}, source)
    if dataset is None:  # pragma: no cover - just written
        raise SmoothrankError(f"{entry}: the dataset cache entry just written cannot be read back")
    return dataset


def _write_concatenation(writer: store.EntryWriter, parts: list[Dataset]) -> Path:
    n = sum(p.n_docs for p in parts)
    for name in ROW_ARRAYS:
        arrays = [getattr(p, name) for p in parts]
        dtype = np.result_type(*arrays)
        out = writer.allocate(name, dtype, (n, *arrays[0].shape[1:]))
        r = 0
        for array in arrays:
            for start in range(0, array.shape[0], 1 << 16):
                block = array[start:start + (1 << 16)]
                out[r:r + block.shape[0]] = block
                r += block.shape[0]
        out.flush()
        del out
    starts = np.cumsum([0] + [p.n_docs for p in parts[:-1]])
    offsets = np.concatenate([parts[0].offsets[:1]] + [p.offsets[1:] + s for p, s in zip(parts, starts,
                                                                                          strict=True)])
    writer.array("offsets", offsets.astype(np.int64), mmap=False)
    writer.array("qids", np.concatenate([p.qids for p in parts]), mmap=False)
    bases = {p.index_base for p in parts}
    return writer.commit({"parse": {"index_base": bases.pop() if len(bases) == 1 else None,
                                    "n_features": parts[0].n_features, "shards": len(parts)}})


def _parse_file(path: Path, side: Path | None, options: ReaderOptions,
                new_rows: Callable[[], Rows]) -> Parsed:
    """Parse the file ``path`` into the rows ``new_rows()`` gives (the compiled scanner first, then,
    if it gives up, the strict parser into fresh rows)."""
    sizes = _read_query_file(side) if side is not None else None
    context: dict[str, Any] = {"source": str(path), "options": options, "query_sizes": sizes,
               "query_source": str(side) if side else None}
    if path.stat().st_size >= FAST_MIN_BYTES:
        acc = new_rows()
        try:
            with open_binary(path) as handle:
                if _fast_scan(_file_chunks(handle, _CHUNK_BYTES), acc, options):
                    return assemble(acc, **context)
        finally:
            acc.sink.close()
    # small, or something the scanner leaves to the strict parser
    acc = new_rows()
    try:
        with open_binary(path) as handle:
            _strict_scan(_line_chunks(handle, _CHUNK_BYTES), acc, source=str(path), options=options)
        return assemble(acc, **context)
    finally:
        acc.sink.close()


def _through_store(path: Path, side: Path | None, options: ReaderOptions, verify: bool) -> Dataset | None:
    """``path`` from its store entry, converted into one first where none serves ``options``; None
    where the store cannot be written (a warning says why; the caller reads into memory)."""
    identity = store.source_identity(path, side)
    digest = _source_digest(path, side) if verify else None
    for entry, manifest in store.find(identity):
        recorded = manifest["source"].get("digest")
        if verify and recorded != digest:
            if recorded is not None:
                store.remove(entry)  # same size and time, other bytes
            continue
        if serves(manifest.get("parse", {}), options):
            dataset = open_entry(entry, manifest, str(path))
            if dataset is not None:
                store.touch(entry)
                return dataset
            store.remove(entry)  # damaged: rebuilt below
    try:
        with gzip_errors(path), store.EntryWriter({**identity, "digest": digest}, str(path)) as writer:
            parsed = _parse_file(path, side, options, lambda: Rows(sink=DiskSink(writer)))
            if store.source_identity(path, side) != identity:
                warnings.warn(f"{path} changed while it was read; not cached", SmoothrankWarning,
                              stacklevel=3)
                return parsed.dataset(str(path))
            entry = commit_entry(writer, parsed)
    except OSError as err:
        if err.filename is not None and os.path.realpath(err.filename) == identity["path"]:
            raise  # about the source itself, not the store
        warnings.warn(f"could not write the dataset cache in {store.cache_dir()}: {err}; reading {path} "
                      "into memory", SmoothrankWarning, stacklevel=3)
        return None
    store.evict(keep=entry)
    dataset = open_entry(entry, store.read_manifest(entry) or {}, str(path))
    if dataset is None:  # pragma: no cover - just written
        raise SmoothrankError(f"{entry}: the dataset cache entry just written cannot be read back")
    return dataset


def commit_entry(writer: store.EntryWriter, parsed: Parsed) -> Path:
    """Write the parsed query arrays, flush the row arrays and commit the entry; returns its folder."""
    for name in ("qids", "offsets"):
        writer.array(name, parsed.arrays[name], mmap=False)
    for name in ROW_ARRAYS:
        parsed.arrays[name].flush()
    return writer.commit({"parse": parsed.info})


def open_entry(entry: Path, manifest: dict[str, Any], source: str) -> Dataset | None:
    """The dataset of a store entry (memory maps), or None where it is damaged or inconsistent."""
    arrays = store.open_arrays(entry, manifest)
    if arrays is None:
        return None
    try:
        info = manifest["parse"]
        base = None if info.get("table") else info["index_base"]  # a table has no index base
        return stored_dataset({**arrays, "index_base": base}, source)
    except (SmoothrankError, KeyError, TypeError):
        return None


def _source_digest(path: Path, side: Path | None) -> str:
    return "+".join(store.file_digest(p) for p in (path, side) if p is not None)


def serves(info: dict[str, Any], options: ReaderOptions) -> bool:
    """Whether an entry whose parse is described by ``info`` (``_rows.assemble``) holds what
    reading its source with ``options`` gives, and that read would raise no error (which only the
    parser names with its line)."""
    try:
        has_zero, max_index = bool(info["has_zero"]), int(info["max_index"])
        if options.zero_based is False and has_zero:
            return False
        auto_base = 0 if has_zero else 1
        base = {True: 0, False: 1}.get(options.zero_based, auto_base)  # type: ignore[arg-type]  # "auto"
        if options.n_features is None:
            if max_index > MAX_INFERRED_FEATURES:
                return False
            width = max_index + 1 - base if max_index >= 0 else 0
        else:
            if max_index > options.n_features or (base == 0 and max_index == options.n_features):
                return False
            width = options.n_features
        return (base == info["index_base"] and width == info["n_features"]
                and (not info["has_null"] or options.null_value == info["null_value"])
                and (options.allow_real_labels or info["labels_integer"])
                and (options.allow_negative_labels or info["labels_nonneg"])
                and (options.regroup or not info["regrouped"]))
    except (KeyError, TypeError, ValueError):
        return False


def load_stored_text(name: str, text: bytes, *, source: str, cache: bool = True) -> Dataset:
    """Text known by ``name`` (unique to its content, e.g. checksums: bundled data), parsed with the
    default options, from the store where an entry is there; parsed and stored otherwise."""
    identity = {"path": None, "size": None, "mtime_ns": None, "inode": None, "bundled": name, "side": None}
    if cache:
        for entry, manifest in store.find(identity):
            if (dataset := open_entry(entry, manifest, source)) is not None:
                store.touch(entry)
                return dataset
            store.remove(entry)
    options = ReaderOptions()
    acc = Rows()
    if not (len(text) >= FAST_MIN_BYTES and _fast_scan(_memory_chunks(text, _CHUNK_BYTES), acc, options)):
        acc = Rows()
        _strict_scan((bytes(c).splitlines(keepends=True) for c in _memory_chunks(text, _CHUNK_BYTES)), acc,
                     source=source, options=options)
    parsed = assemble(acc, source=source, options=options, query_sizes=None, query_source=None)
    dataset = parsed.dataset(source)
    if cache:
        try:
            with store.EntryWriter(identity, source) as writer:
                for field_name in (*ROW_ARRAYS, "qids", "offsets"):
                    writer.array(field_name, parsed.arrays[field_name])
                store.evict(keep=writer.commit({"parse": parsed.info}))
        except (OSError, SmoothrankError) as err:
            warnings.warn(f"could not write the dataset cache in {store.cache_dir()}: {err}",
                          SmoothrankWarning, stacklevel=2)
    return dataset


def parse_letor(
    data: bytes | bytearray | memoryview | mmap.mmap,
    *,
    source: str = "<bytes>",
    query_sizes: Sequence[int] | None = None,
    **options: Any,
) -> Dataset:
    """Parse LETOR text already in memory (the options are those of :func:`load_letor` except
    ``cache`` and ``query_file``: give the query sizes as ``query_sizes``).

    ``data`` is bytes or a buffer of them (bytearray, memoryview, mmap: copied once); text (``str``)
    must be encoded first.

    Examples
    --------
    >>> from smoothrank.data import parse_letor
    >>> d = parse_letor(b"2 qid:1 1:0.5 2:1.0\\n0 qid:1 1:0.1 2:0.2\\n1 qid:2 1:0.3 2:0.0\\n")
    >>> d
    Dataset(source='<bytes>', n_queries=2, n_docs=3, n_features=2)
    >>> d.labels
    array([2., 0., 1.], dtype=float32)
    >>> d.offsets
    array([0, 2, 3])
    """
    data = _input_bytes(data)
    opts = ReaderOptions(**options)  # ReaderOptions checks each
    check_readable(data[:HEAD_BYTES], source, gzip_ok=False, reads="parse_letor reads plain text")
    data = without_bom(data)
    sizes = None if query_sizes is None else _check_query_sizes(query_sizes)
    context: dict[str, Any] = {"source": source, "options": opts, "query_sizes": sizes,
                               "query_source": "query_sizes"}
    with _memory_errors(source):
        if len(data) >= FAST_MIN_BYTES:
            dataset = _fast_parse(_memory_chunks(data, _CHUNK_BYTES), **context)
            if dataset is not None:
                return dataset
        # in chunks of whole lines, as load_letor reads a file: one list of the input's lines and
        # tokens, as bytes objects, was about 20x the input (1.2 GB for 58 MB of MSLR lines)
        chunks = (bytes(chunk).splitlines(keepends=True) for chunk in _memory_chunks(data, _CHUNK_BYTES))
        return _parse_lines(chunks, **context)


def _input_bytes(data: object) -> bytes:
    """``data`` as bytes: the parser hashes qid slices (a bytearray's are unhashable) and splits lines."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview | mmap.mmap):
        return bytes(data)
    if isinstance(data, str):
        raise SmoothrankError("data: expected bytes, got str; encode the text, e.g. text.encode()")
    raise SmoothrankError("data: expected bytes (or a bytearray, memoryview or mmap), "
                          f"got {type(data).__name__}")


def _check_query_sizes(query_sizes: Sequence[int]) -> np.ndarray:
    """``query_sizes`` as int64, or a SmoothrankError naming the argument (not a broken Dataset later)."""
    sizes = np.asarray(query_sizes)
    if sizes.ndim != 1 or sizes.shape[0] == 0 or sizes.dtype.kind not in "iuf" \
            or not np.all(np.isfinite(sizes)) or np.any(sizes != np.round(sizes)) or np.any(sizes < 1):
        raise SmoothrankError(f"query_sizes: expected a non-empty 1-D sequence of positive integers, "
                              f"got {query_sizes!r}")
    return sizes.astype(np.int64)


@contextlib.contextmanager
def _memory_errors(source: str | os.PathLike[str]) -> Iterator[None]:
    """A failed allocation of the dense float32 features as an error naming the input."""
    try:
        yield
    except MemoryError as err:
        raise SmoothrankError(f"{source}: not enough memory for its dense float32 features ({err}); "
                              "check n_features and the largest feature index") from None


# --------------------------------------------------------------------------------- fast path
@functools.cache
def _kernel():
    """The compiled scanner module, or None where Numba cannot be imported."""
    try:
        from smoothrank.data import _letor_kernel
    except ImportError:  # pragma: no cover - numba is a dependency
        return None
    return _letor_kernel


def _memory_chunks(data: bytes, size: int) -> Iterator[memoryview]:
    """Views of ``data`` of about ``size`` bytes, each ending at a line end (or at the end)."""
    view, n, start = memoryview(data), len(data), 0
    while start < n:
        stop = start + size
        if stop >= n:
            end = n
        else:
            newline = data.find(b"\n", stop - 1)
            end = n if newline < 0 else newline + 1
        yield view[start:end]
        start = end


def _file_chunks(handle, size: int) -> Iterator[bytes]:
    """Blocks of about ``size`` bytes read from ``handle``, each ending at a line end (or at EOF);
    a byte order mark at the start of the file is dropped."""
    carry = without_bom(handle.read(len(BOM)))
    while block := handle.read(size):
        if carry:
            block = carry + block
        newline = block.rfind(b"\n")
        if newline < 0:
            carry = block
            continue
        carry = block[newline + 1:]
        yield block[:newline + 1]
    if carry:
        yield carry


def _fast_parse(chunks: Iterable[bytes | memoryview], *, source: str, options: ReaderOptions,
                query_sizes: np.ndarray | None, query_source: str | None) -> Dataset | None:
    """Read clean input with the compiled scanner into memory; None when the strict parser must look
    at it (:func:`_fast_scan`)."""
    acc = Rows()
    if not _fast_scan(chunks, acc, options):
        return None
    return assemble(acc, source=source, options=options, query_sizes=query_sizes,
                    query_source=query_source).dataset(source)


def _fast_scan(chunks: Iterable[bytes | memoryview], acc: Rows, options: ReaderOptions) -> bool:
    """Read clean input with the compiled scanner into ``acc``; False when the strict parser must
    look at it.

    The scanner accepts only what the strict parser reads the same way (see
    :mod:`smoothrank.data._letor_kernel`); the checks it does not make (labels, indices against
    ``n_features`` and ``zero_based``, UTF-8 of ids) are made here, vectorised, and any failure
    also returns False, so that every error message comes from the strict parser. Query-level
    checks (missing or interleaved qids, group sizes) are shared: :func:`_rows.assemble`.
    """
    kernel = _kernel()
    if kernel is None:
        return False  # pragma: no cover
    line_offset = 0
    for chunk in chunks:
        scanned = _scan(kernel, chunk, options)
        if scanned is None:
            return False
        n_lines, n_rows = scanned["n_lines"], scanned["n_rows"]
        if n_rows == 0:
            line_offset += n_lines
            continue
        lines = scanned["row_line"][:n_rows] + line_offset
        line_offset += n_lines
        labels = scanned["row_label"][:n_rows]
        if not _labels_ok(labels, options) or not _check_indices(scanned, lines, acc, options):
            return False
        block = np.zeros((n_rows, scanned["max_index"] + 1), dtype=np.float32)
        n_tok = scanned["n_tok"]
        kernel.scatter(block, scanned["tok_row"][:n_tok], scanned["tok_col"][:n_tok],
                       scanned["tok_val"][:n_tok])
        try:
            doc_ids = _collect_ids(chunk, scanned["row_q"][:n_rows], scanned["row_same"][:n_rows],
                                   scanned["row_d"][:n_rows], lines, acc)
        except UnicodeDecodeError:
            return False
        acc.has_null = acc.has_null or b"NULL" in chunk
        acc.max_index = max(acc.max_index, scanned["max_index"])
        acc.add_rows(lines, labels, doc_ids, block)
    return acc.n_rows > 0


def _scan(kernel: Any, chunk: bytes | memoryview, options: ReaderOptions) -> dict[str, Any] | None:
    """The compiled scanner's output for one chunk (slow numbers parsed), or None if it gave up."""
    buf = np.frombuffer(chunk, dtype=np.uint8)
    max_rows = int(np.count_nonzero(buf == ord("\n"))) + 1
    max_tok = int(np.count_nonzero(buf == ord(":")))
    out = {"row_line": np.empty(max_rows, dtype=np.int64), "row_label": np.empty(max_rows, dtype=np.float64),
           "row_q": np.empty((max_rows, 2), dtype=np.int64), "row_d": np.empty((max_rows, 2), dtype=np.int64),
           "row_same": np.empty(max_rows, dtype=np.bool_), "tok_row": np.empty(max_tok, dtype=np.int32),
           "tok_col": np.empty(max_tok, dtype=np.int32), "tok_val": np.empty(max_tok, dtype=np.float32)}
    slow = np.empty((max_tok + max_rows, 3), dtype=np.int64)
    null_ok = options.null_value is not None
    null = float(options.null_value) if options.null_value is not None else 0.0
    status, n_rows, n_tok, n_slow, max_index, n_lines = kernel.scan_chunk(
        buf, null, null_ok, out["row_line"], out["row_label"], out["row_q"], out["row_d"], out["row_same"],
        out["tok_row"], out["tok_col"], out["tok_val"], slow)
    if status != kernel.OK:
        return None
    # numbers outside the scanner's exact fast path: Python's correctly rounded float()
    for start, end, target in slow[:n_slow].tolist():
        value = float(bytes(chunk[start:end]))
        if target < 0:
            out["row_label"][-1 - target] = value
        elif not abs(value) < F32_LIMIT:  # also NaN
            return None
        else:
            out["tok_val"][target] = value
    out.update(n_rows=n_rows, n_tok=n_tok, max_index=max_index, n_lines=n_lines)
    return out


def _check_indices(scanned: dict[str, Any], lines: np.ndarray, acc: Rows, options: ReaderOptions) -> bool:
    """The index rules the scanner does not check (``zero_based``, ``n_features``), as one yes/no;
    notes the first lines with index 0 and with index ``n_features`` in ``acc``."""
    n_tok, max_index = scanned["n_tok"], scanned["max_index"]
    if not n_tok:
        return True
    cols, rows = scanned["tok_col"][:n_tok], scanned["tok_row"][:n_tok]
    limit = options.n_features
    if options.zero_based is False and not cols.all():
        return False
    if limit is None and max_index > MAX_INFERRED_FEATURES:
        return False  # the strict parser names the line
    if limit is not None:
        if max_index > limit:
            return False
        if options.zero_based is not False and acc.first_limit_line is None and max_index == limit:
            acc.first_limit_line = int(lines[rows[int(np.argmax(cols == limit))]])
    if acc.first_zero_line is None and not cols.all():
        acc.first_zero_line = int(lines[rows[int(np.argmin(cols))]])
    return True


def _labels_ok(values: np.ndarray, options: ReaderOptions) -> bool:
    """The label rules of :func:`_parse_labels`, as one yes/no."""
    if not np.all(np.abs(values) < F32_LIMIT):  # also catches NaN and inf
        return False
    if not options.allow_real_labels and (np.any(values != np.round(values))
                                          or np.any(np.abs(values) > F32_EXACT_INT)):
        return False
    return options.allow_negative_labels or not np.any(values < 0)


def _collect_ids(chunk: bytes | memoryview, spans_q: np.ndarray, same: np.ndarray, spans_d: np.ndarray,
                 lines: np.ndarray, acc: Rows) -> np.ndarray:
    """Adds the chunk's runs of equal qids to ``acc``; returns its doc ids (docid, else line number)."""
    has = spans_q[:, 0] >= 0
    # a row continues its run if it has the previous row's qid, or neither has one
    cont = same.copy()
    cont[1:] |= ~has[1:] & ~has[:-1]
    cont[0] = False
    first_rows = np.flatnonzero(~cont)
    qids = [bytes(chunk[s:e]) if s >= 0 else None for s, e in spans_q[first_rows].tolist()]
    acc.add_runs(first_rows, qids, lines)
    if not np.any(spans_d[:, 0] >= 0):
        return lines.astype(f"<U{len(str(int(lines.max())))}")
    ids = [bytes(chunk[start:end]).decode("utf-8") if start >= 0 else str(line)
           for (start, end), line in zip(spans_d.tolist(), lines.tolist(), strict=True)]
    return np.asarray(ids, dtype=np.str_)


# --------------------------------------------------------------------------------- side files
def auto_query_file(path: str | os.PathLike[str]) -> Path | None:
    """The side file (``<file>.query``) that ``load_letor(path)`` reads the query sizes from, or None
    (the file has ``qid:`` tokens, there is no side file, or the file cannot be read: the reader
    reports that itself). Part of a file's identity wherever its content is fingerprinted."""
    try:
        return _find_query_file(Path(path), "auto")
    except (OSError, SmoothrankError):
        return None


def _find_query_file(path: Path, query_file: str | os.PathLike[str] | None) -> Path | None:
    if query_file is None:
        return None
    if isinstance(query_file, str) and query_file == "auto":
        if _first_line_has_qid(path):
            return None
        stem = path.with_suffix("") if path.suffix == ".gz" else path
        for candidate in (Path(f"{stem}.query"), Path(f"{path}.query")):
            if candidate.is_file():
                return candidate
        return None
    side = Path(query_file)
    if not side.is_file():
        if side.exists():
            raise SmoothrankError(f"query_file: {side} is not a file")
        raise FileNotFoundError(2, "No such file or directory (query_file)", str(side))
    return side


def _first_line_has_qid(path: Path) -> bool:
    with gzip_errors(path), open_binary(path) as handle:
        for raw in handle:
            parts = without_bom(raw).split(b"#", 1)[0].split()
            if parts:
                return len(parts) > 1 and parts[1].startswith(b"qid:")
    return True


def _read_query_file(path: Path) -> np.ndarray:
    """Group sizes, one positive integer per line (blank lines ignored)."""
    sizes = []
    with gzip_errors(path), open_binary(path) as handle:  # gzip like the data file
        for lineno, raw in enumerate(handle, 1):
            text = (without_bom(raw) if lineno == 1 else raw).strip()
            if not text:
                continue
            if not text.isdigit() or not 0 < int(text) <= _MAX_GROUP:
                raise DataFormatError(f"{path}:{lineno}: a group size must be a positive integer "
                                      f"(at most {_MAX_GROUP}), got {show(text)}")
            sizes.append(int(text))
    if not sizes:
        raise DataFormatError(f"{path}: no group sizes")
    return np.asarray(sizes, dtype=np.int64)


# --------------------------------------------------------------------------------- parsing
def _parse_stream(handle, *, source: str, options: ReaderOptions, query_sizes: np.ndarray | None,
                  query_source: str | None, chunk_bytes: int = 1 << 24) -> Dataset:
    return _parse_lines(_line_chunks(handle, chunk_bytes), source=source, options=options,
                        query_sizes=query_sizes, query_source=query_source)


def _line_chunks(handle, chunk_bytes: int = 1 << 24) -> Iterator[list[bytes]]:
    # bytes.splitlines, as parse_letor splits: a lone CR ends a line in both readers
    for block in _file_chunks(handle, chunk_bytes):
        yield block.splitlines(keepends=True)


def _parse_lines(chunks, *, source: str, options: ReaderOptions, query_sizes: np.ndarray | None,
                 query_source: str | None) -> Dataset:
    acc = Rows()
    _strict_scan(chunks, acc, source=source, options=options)
    return assemble(acc, source=source, options=options, query_sizes=query_sizes,
                    query_source=query_source).dataset(source)


def _strict_scan(chunks, acc: Rows, *, source: str, options: ReaderOptions) -> None:
    """Parse chunks of lines into ``acc``; every problem is a DataFormatError naming the line."""
    lineno = 0
    for lines in chunks:
        label_tok: list[bytes] = []
        feat_tok: list[bytes] = []
        counts: list[int] = []
        chunk_lines: list[int] = []
        qids: list[bytes | None] = []
        doc_ids: list[str] = []
        for raw in lines:
            lineno += 1
            hash_at = raw.find(b"#")
            if hash_at >= 0:
                body = raw[:hash_at]
                match = _DOCID.search(raw, hash_at)
            else:
                body, match = raw, None
            parts = body.split()
            if not parts:
                continue  # blank or comment-only line
            if len(parts) > 1 and parts[1].startswith(b"qid:"):
                qid = parts[1][4:]
                if not qid:
                    raise DataFormatError(f"{source}:{lineno}: empty query id in 'qid:'")
                feats = parts[2:]
            else:
                qid = None
                feats = parts[1:]
            label_tok.append(parts[0])
            qids.append(qid)
            doc_ids.append(decode(match.group(1), source, lineno, "docid") if match else str(lineno))
            feat_tok.extend(feats)
            counts.append(len(feats))
            chunk_lines.append(lineno)
        if not chunk_lines:
            continue
        labels = _parse_labels(label_tok, chunk_lines, source, options)
        block = _parse_features(feat_tok, counts, chunk_lines, source, options, acc)
        line_array = np.asarray(chunk_lines, dtype=np.int64)
        changes = [i for i in range(1, len(qids)) if qids[i] != qids[i - 1]]
        first_rows = np.asarray([0, *changes], dtype=np.int64)
        acc.add_runs(first_rows, [qids[i] for i in first_rows.tolist()], line_array)
        acc.add_rows(line_array, labels, np.asarray(doc_ids, dtype=np.str_), block)
    if not acc.n_rows:
        raise DataFormatError(f"{source}: no data lines")


def _parse_labels(tokens: list[bytes], lines: list[int], source: str, options: ReaderOptions) -> np.ndarray:
    values = _fast_floats(b" ".join(tokens), len(tokens))
    if values is None:
        for tok, line in zip(tokens, lines, strict=True):
            if not _NUMBER.fullmatch(tok):
                raise DataFormatError(f"{source}:{line}: the label {show(tok)} is not a number")
        raise DataFormatError(f"{source}: unreadable labels")  # pragma: no cover - defensive
    bad = ~np.isfinite(values)
    if not options.allow_real_labels:
        bad |= values != np.round(values)
    if not options.allow_negative_labels:
        bad |= values < 0
    if bad.any():
        i = int(np.argmax(bad))
        v = values[i]
        if not np.isfinite(v):
            why = "is not finite"
        elif v != round(v):
            # the hint names the Python option: the CLI's train and evaluate read relevance grades only
            why = ("is not an integer (relevance labels are integer grades; from Python, "
                   "load_letor(..., allow_real_labels=True) reads real-valued labels)")
        else:
            why = ("is negative (relevance labels are grades from 0; from Python, "
                   "load_letor(..., allow_negative_labels=True) reads negative labels)")
        raise DataFormatError(f"{source}:{lines[i]}: the label {show(tokens[i])} {why}")
    if np.any(np.abs(values) >= F32_LIMIT):
        i = int(np.argmax(np.abs(values) >= F32_LIMIT))
        raise DataFormatError(f"{source}:{lines[i]}: the label {show(tokens[i])} overflows float32")
    if not options.allow_real_labels and np.any(np.abs(values) > F32_EXACT_INT):
        # float32 holds every integer up to 2^24 only: 16777217 would silently become 16777216.
        i = int(np.argmax(np.abs(values) > F32_EXACT_INT))
        raise DataFormatError(f"{source}:{lines[i]}: the label {show(tokens[i])} is beyond 2^24 = "
                              f"{F32_EXACT_INT}, the largest integer label float32 holds exactly")
    return values


def _fast_floats(text: bytes, expected: int) -> np.ndarray | None:
    """Parse ``expected`` whitespace-separated numbers, or return None if that is not exactly it."""
    if expected == 0:
        return np.zeros(0, dtype=np.float64)
    try:
        values = np.fromstring(text, dtype=np.float64, sep=" ")
    except ValueError:
        return None
    return values if values.shape[0] == expected else None


def _parse_features(tokens: list[bytes], counts: list[int], lines: list[int], source: str,
                    options: ReaderOptions, acc: Rows) -> np.ndarray:
    """Parse ``index:value`` tokens of one chunk into a dense float32 block (columns = raw index)."""
    n_rows, n_tok = len(counts), len(tokens)
    if n_tok == 0:
        return np.zeros((n_rows, 0), dtype=np.float32)
    joined = b" ".join(tokens)
    acc.has_null = acc.has_null or b"NULL" in joined
    if b"NULL" in joined and options.null_value is not None:
        joined = _NULL.sub(b":" + repr(float(options.null_value)).encode(), joined)
    buf = np.frombuffer(joined, dtype=np.uint8)
    is_sep = (buf == ord(":")) | (buf == ord(" "))
    seps = buf[is_sep]
    # Every token must be exactly "<digits>:<number>": separators alternate ':' ' ' ':' ...
    ok = seps.shape[0] == 2 * n_tok - 1 and bool(np.all(seps[0::2] == ord(":"))) \
        and bool(np.all(seps[1::2] == ord(" ")))
    if ok:
        # Bytes after an even number of separators (and not separators) belong to an index.
        parity = np.cumsum(is_sep, dtype=np.uint8) & 1
        index_bytes = buf[(~is_sep) & (parity == 0)]
        ok = bool(np.all((index_bytes >= ord("0")) & (index_bytes <= ord("9"))))
    numbers = _fast_floats(joined.replace(b":", b" "), 2 * n_tok) if ok else None
    if numbers is None:
        _locate_token_error(tokens, counts, lines, source, options)
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), counts)
    index = numbers[0::2]
    values = numbers[1::2]

    def fail(mask: np.ndarray, message: str, error: type[DataFormatError] = DataFormatError) -> None:
        t = int(np.argmax(mask))
        raise error(f"{source}:{lines[rows[t]]}: {message.format(tok=show(tokens[t]))}")

    if np.any(index > _MAX_INDEX):
        fail(index > _MAX_INDEX, "feature index too large in {tok}")
    if options.n_features is None and np.any(index > MAX_INFERRED_FEATURES):
        fail(index > MAX_INFERRED_FEATURES,
             f"feature index in {{tok}} is above {MAX_INFERRED_FEATURES}, the largest read without "
             "n_features (features are stored dense: n_docs x n_features float32); pass "
             "n_features=<feature count> (--n-features on the command line, data.n_features in a "
             "training config) to confirm a file this wide")
    index = index.astype(np.int64)
    if not np.all(np.isfinite(values)):
        fail(~np.isfinite(values), "non-finite feature value in {tok}")
    if np.any(np.abs(values) >= F32_LIMIT):
        fail(np.abs(values) >= F32_LIMIT, "feature value out of the float32 range in {tok}")
    if options.zero_based is False and np.any(index == 0):
        fail(index == 0, "feature index 0 in {tok}, but zero_based=False (indices start at 1)",
             IndexBaseError)
    if options.n_features is not None:
        limit = options.n_features
        if np.any(index > limit):
            fail(index > limit, f"feature index in {{tok}} is beyond n_features={limit}")
        if options.zero_based is not False and acc.first_limit_line is None and np.any(index == limit):
            acc.first_limit_line = lines[rows[int(np.argmax(index == limit))]]
    if acc.first_zero_line is None and np.any(index == 0):
        acc.first_zero_line = lines[rows[int(np.argmax(index == 0))]]
    # Duplicates: within a row indices normally increase; only if not, look closer.
    same_row = rows[1:] == rows[:-1]
    if np.any(same_row & (index[1:] <= index[:-1])):
        order = np.lexsort((np.arange(n_tok), index, rows))
        dup = (rows[order][1:] == rows[order][:-1]) & (index[order][1:] == index[order][:-1])
        if dup.any():
            t = int(np.min(order[1:][dup]))
            raise DataFormatError(f"{source}:{lines[rows[t]]}: feature index {index[t]} repeated on one line")
    width = int(index.max()) + 1
    acc.max_index = max(acc.max_index, width - 1)
    block = np.zeros((n_rows, width), dtype=np.float32)
    block[rows, index] = values
    return block


def _locate_token_error(tokens: list[bytes], counts: list[int], lines: list[int], source: str,
                        options: ReaderOptions) -> NoReturn:
    """Find the first malformed ``index:value`` token and raise its file:line message."""
    t = 0
    for count, line in zip(counts, lines, strict=True):
        for tok in tokens[t:t + count]:
            index, colon, value = tok.partition(b":")
            where = f"{source}:{line}"
            if tok.startswith(b"qid:"):
                raise DataFormatError(f"{where}: 'qid:' must be the second token of the line")
            if not colon or b":" in value:
                raise DataFormatError(f"{where}: expected <index>:<value>, got {show(tok)}")
            if not index.isdigit():
                raise DataFormatError(f"{where}: the feature index in {show(tok)} is not a non-negative "
                                      "integer")
            if value == b"NULL":
                raise DataFormatError(f"{where}: NULL (missing) value in {show(tok)}; pass "
                                      "null_value=<number> to fill missing values")
            if not _NUMBER.fullmatch(value):
                raise DataFormatError(f"{where}: the feature value in {show(tok)} is not a number")
        t += count
    raise DataFormatError(f"{source}: malformed feature tokens")  # pragma: no cover - defensive
