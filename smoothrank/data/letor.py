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
dense float64 copy). A binary cache (:mod:`smoothrank.data.cache`) makes a second load of a
large file much faster.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from smoothrank._checks import check_bool
from smoothrank.data import cache as _cache
from smoothrank.data._io import BOM, HEAD_BYTES, check_readable, gzip_errors, open_binary, without_bom
from smoothrank.data.dataset import F32_EXACT_INT, F32_LIMIT, Dataset
from smoothrank.errors import DataFormatError, IndexBaseError, SmoothrankError

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


def _check_zero_based(value: object) -> bool | str:
    """True, False or ``"auto"``; ``zero_based=0`` (a dataset's index base) would mean False and shift
    every column, so an integer is refused with the expression to pass instead."""
    if isinstance(value, str) and value == "auto":
        return value
    if isinstance(value, bool | np.bool_):
        return bool(value)
    hint = "; for a dataset's index base (0 or 1) pass zero_based=(index_base == 0)" \
        if isinstance(value, int | np.integer) else ""
    raise SmoothrankError(f"zero_based: expected True, False or 'auto', got {value!r}{hint}")


@dataclass(frozen=True)
class ReaderOptions:
    """The reader's options (documented in :func:`load_letor`); part of the cache key."""

    n_features: int | None = None
    zero_based: bool | str = "auto"
    null_value: float | None = 0.0
    allow_real_labels: bool = False
    allow_negative_labels: bool = False
    regroup: bool = False

    def __post_init__(self) -> None:
        if self.n_features is not None and (not isinstance(self.n_features, int | np.integer)
                                            or isinstance(self.n_features, bool) or self.n_features < 1):
            raise SmoothrankError(f"n_features: expected a positive integer or None, got {self.n_features!r}")
        # np.bool_ (from a comparison) is kept as a plain bool: the options are also a cache key
        object.__setattr__(self, "zero_based", _check_zero_based(self.zero_based))
        for name in ("allow_real_labels", "allow_negative_labels", "regroup"):
            object.__setattr__(self, name, check_bool(getattr(self, name), name))
        if self.null_value is not None and not np.isfinite(float(self.null_value)):
            raise SmoothrankError(f"null_value: expected a finite number or None, got {self.null_value!r}")

    def as_dict(self) -> dict[str, object]:
        return {"n_features": self.n_features, "zero_based": self.zero_based,
                "null_value": self.null_value, "allow_real_labels": self.allow_real_labels,
                "allow_negative_labels": self.allow_negative_labels, "regroup": self.regroup}


# --------------------------------------------------------------------------------- public API
def cached_dataset(key: str, source: str) -> Dataset | None:
    """The cache's entry ``key`` as a :class:`Dataset`, or None where there is none or it is damaged:
    unreadable, or readable but inconsistent (offsets that do not cover the documents, ...), which
    the caller parses again and overwrites."""
    entry = _cache.load_entry(key)
    if entry is None:
        return None
    try:
        return Dataset(source=source, **entry)
    except SmoothrankError:
        return None


def load_letor(
    path: str | os.PathLike[str],
    *,
    n_features: int | None = None,
    query_file: str | os.PathLike[str] | None = "auto",
    zero_based: bool | str = "auto",
    null_value: float | None = 0.0,
    allow_real_labels: bool = False,
    allow_negative_labels: bool = False,
    regroup: bool = False,
    cache: bool | None = None,
) -> Dataset:
    """Read a LETOR / SVMlight ranking file (plain or gzip, LF or CRLF) into a :class:`Dataset`.

    Parameters
    ----------
    path
        The file. gzip is recognised by its magic bytes, whatever the suffix; bz2, xz, zip, zstd and
        UTF-16 files are refused by theirs (decompress or convert them first).
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
        Use the binary cache (:mod:`smoothrank.data.cache`). ``None``: only for files of at
        least 1 MiB.

    Returns
    -------
    Dataset
        Rows in file order; ``doc_ids`` from a ``#docid = X`` comment, else the line number.
    """
    path = Path(path)
    if not path.is_file():
        if path.exists():
            raise SmoothrankError(f"{path}: not a file")
        raise FileNotFoundError(2, "No such file or directory", str(path))
    options = ReaderOptions(n_features, zero_based, null_value, allow_real_labels, allow_negative_labels,
                            regroup)
    if cache is not None:
        check_bool(cache, "cache")
    side = _find_query_file(path, query_file)
    use_cache = cache if cache is not None else path.stat().st_size >= AUTO_CACHE_BYTES
    key = None
    if use_cache:
        digests = [_cache.file_digest(path)] + ([_cache.file_digest(side)] if side else [])
        key = _cache.cache_key(digests, options.as_dict())
        if (cached := cached_dataset(key, str(path))) is not None:
            return cached
    sizes = _read_query_file(side) if side is not None else None
    context = {"source": str(path), "options": options, "query_sizes": sizes,
               "query_source": str(side) if side else None}
    dataset = None
    with gzip_errors(path), _memory_errors(path):
        if path.stat().st_size >= FAST_MIN_BYTES:
            with open_binary(path) as handle:
                dataset = _fast_parse(_file_chunks(handle, _CHUNK_BYTES), **context)
        if dataset is None:  # small, or something the scanner leaves to the strict parser
            with open_binary(path) as handle:
                dataset = _parse_stream(handle, **context)
    if key is not None:
        _cache.store_entry(key, _arrays(dataset))
    return dataset


def parse_letor(
    data: bytes | bytearray | memoryview | mmap.mmap,
    *,
    source: str = "<bytes>",
    query_sizes: Sequence[int] | None = None,
    **options: object,
) -> Dataset:
    """Parse LETOR text already in memory (the options are those of :func:`load_letor` except
    ``cache`` and ``query_file``: give the query sizes as ``query_sizes``).

    ``data`` is bytes or a buffer of them (bytearray, memoryview, mmap: copied once); text (``str``)
    must be encoded first.
    """
    data = _input_bytes(data)
    opts = ReaderOptions(**options)  # type: ignore[arg-type]
    check_readable(data[:HEAD_BYTES], source, gzip_ok=False, reads="parse_letor reads plain text")
    data = without_bom(data)
    sizes = None if query_sizes is None else _check_query_sizes(query_sizes)
    context = {"source": source, "options": opts, "query_sizes": sizes, "query_source": "query_sizes"}
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
    """Read clean input with the compiled scanner; None when the strict parser must look at it.

    The scanner accepts only what the strict parser reads the same way (see
    :mod:`smoothrank.data._letor_kernel`); the checks it does not make (labels, indices against
    ``n_features`` and ``zero_based``, UTF-8 of ids) are made here, vectorised, and any failure
    also returns None, so that every error message comes from the strict parser. Query-level
    checks (missing or interleaved qids, group sizes) are shared: :func:`_assemble`.
    """
    kernel = _kernel()
    if kernel is None:
        return None  # pragma: no cover
    acc = _Rows()
    null_ok = options.null_value is not None
    null = float(options.null_value) if null_ok else 0.0
    limit = options.n_features
    line_offset = 0
    for chunk in chunks:
        buf = np.frombuffer(chunk, dtype=np.uint8)
        max_rows = int(np.count_nonzero(buf == ord("\n"))) + 1
        max_tok = int(np.count_nonzero(buf == ord(":")))
        row_line = np.empty(max_rows, dtype=np.int64)
        row_label = np.empty(max_rows, dtype=np.float64)
        row_q = np.empty((max_rows, 2), dtype=np.int64)
        row_d = np.empty((max_rows, 2), dtype=np.int64)
        row_same = np.empty(max_rows, dtype=np.bool_)
        tok_row = np.empty(max_tok, dtype=np.int32)
        tok_col = np.empty(max_tok, dtype=np.int32)
        tok_val = np.empty(max_tok, dtype=np.float32)
        slow = np.empty((max_tok + max_rows, 3), dtype=np.int64)
        status, n_rows, n_tok, n_slow, max_index, n_lines = kernel.scan_chunk(
            buf, null, null_ok, row_line, row_label, row_q, row_d, row_same, tok_row, tok_col, tok_val, slow)
        if status != kernel.OK:
            return None
        if n_rows == 0:
            line_offset += n_lines
            continue
        lines = row_line[:n_rows] + line_offset
        line_offset += n_lines
        # numbers outside the scanner's exact fast path: Python's correctly rounded float()
        for start, end, target in slow[:n_slow].tolist():
            value = float(bytes(chunk[start:end]))
            if target < 0:
                row_label[-1 - target] = value
            elif not abs(value) < F32_LIMIT:  # also NaN
                return None
            else:
                tok_val[target] = value
        labels = row_label[:n_rows]
        if not _labels_ok(labels, options):
            return None
        cols = tok_col[:n_tok]
        rows = tok_row[:n_tok]
        if n_tok:
            if options.zero_based is False and not cols.all():
                return None
            if limit is None and max_index > MAX_INFERRED_FEATURES:
                return None  # the strict parser names the line
            if limit is not None:
                if max_index > limit:
                    return None
                if options.zero_based is not False and acc.first_limit_line is None and max_index == limit:
                    acc.first_limit_line = int(lines[rows[int(np.argmax(cols == limit))]])
            if acc.first_zero_line is None and not cols.all():
                acc.first_zero_line = int(lines[rows[int(np.argmin(cols))]])
        acc.max_index = max(acc.max_index, max_index)
        block = np.zeros((n_rows, max_index + 1), dtype=np.float32)
        kernel.scatter(block, rows, cols, tok_val[:n_tok])
        acc.blocks.append(block)
        acc.labels.append(labels.astype(np.float32))
        acc.lines.extend(lines.tolist())
        try:
            _collect_ids(chunk, row_q[:n_rows], row_same[:n_rows], row_d[:n_rows], lines, acc)
        except UnicodeDecodeError:
            return None
    if not acc.lines:
        return None
    return _assemble(acc, source=source, options=options, query_sizes=query_sizes, query_source=query_source)


def _labels_ok(values: np.ndarray, options: ReaderOptions) -> bool:
    """The label rules of :func:`_parse_labels`, as one yes/no."""
    if not np.all(np.abs(values) < F32_LIMIT):  # also catches NaN and inf
        return False
    if not options.allow_real_labels and (np.any(values != np.round(values))
                                          or np.any(np.abs(values) > F32_EXACT_INT)):
        return False
    return options.allow_negative_labels or not np.any(values < 0)


def _collect_ids(chunk: bytes | memoryview, spans_q: np.ndarray, same: np.ndarray, spans_d: np.ndarray,
                 lines: np.ndarray, acc: _Rows) -> None:
    """Per-row qid bytes (one object per run of equal qids) and doc ids (docid, else line number)."""
    qid: bytes | None = None
    for (start, end), repeat in zip(spans_q.tolist(), same.tolist(), strict=True):
        if start < 0:
            qid = None
        elif not repeat:
            qid = bytes(chunk[start:end])
        acc.qids.append(qid)
    for (start, end), line in zip(spans_d.tolist(), lines.tolist(), strict=True):
        acc.doc_ids.append(bytes(chunk[start:end]).decode("utf-8") if start >= 0 else str(line))


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
                                      f"(at most {_MAX_GROUP}), got {_show(text)}")
            sizes.append(int(text))
    if not sizes:
        raise DataFormatError(f"{path}: no group sizes")
    return np.asarray(sizes, dtype=np.int64)


# --------------------------------------------------------------------------------- parsing
@dataclass
class _Rows:
    """What the line loop collects, chunk by chunk."""

    labels: list[np.ndarray] = field(default_factory=list)
    qids: list[bytes | None] = field(default_factory=list)
    doc_ids: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    blocks: list[np.ndarray] = field(default_factory=list)
    first_zero_line: int | None = None
    first_limit_line: int | None = None  # first line using index == n_features
    max_index: int = -1


def _parse_stream(handle, *, source: str, options: ReaderOptions, query_sizes: np.ndarray | None,
                  query_source: str | None, chunk_bytes: int = 1 << 24) -> Dataset:
    def chunks():
        # bytes.splitlines, as parse_letor splits: a lone CR ends a line in both readers
        for block in _file_chunks(handle, chunk_bytes):
            yield block.splitlines(keepends=True)
    return _parse_lines(chunks(), source=source, options=options, query_sizes=query_sizes,
                        query_source=query_source)


def _parse_lines(chunks, *, source: str, options: ReaderOptions, query_sizes: np.ndarray | None,
                 query_source: str | None) -> Dataset:
    acc = _Rows()
    lineno = 0
    for lines in chunks:
        label_tok: list[bytes] = []
        feat_tok: list[bytes] = []
        counts: list[int] = []
        chunk_lines: list[int] = []
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
            acc.qids.append(qid)
            acc.doc_ids.append(_decode(match.group(1), source, lineno, "docid") if match else str(lineno))
            feat_tok.extend(feats)
            counts.append(len(feats))
            chunk_lines.append(lineno)
        if not chunk_lines:
            continue
        acc.lines.extend(chunk_lines)
        acc.labels.append(_parse_labels(label_tok, chunk_lines, source, options))
        _parse_features(feat_tok, counts, chunk_lines, source, options, acc)
    if not acc.lines:
        raise DataFormatError(f"{source}: no data lines")
    return _assemble(acc, source=source, options=options, query_sizes=query_sizes, query_source=query_source)


def _parse_labels(tokens: list[bytes], lines: list[int], source: str, options: ReaderOptions) -> np.ndarray:
    values = _fast_floats(b" ".join(tokens), len(tokens))
    if values is None:
        for tok, line in zip(tokens, lines, strict=True):
            if not _NUMBER.fullmatch(tok):
                raise DataFormatError(f"{source}:{line}: the label {_show(tok)} is not a number")
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
        raise DataFormatError(f"{source}:{lines[i]}: the label {_show(tokens[i])} {why}")
    if np.any(np.abs(values) >= F32_LIMIT):
        i = int(np.argmax(np.abs(values) >= F32_LIMIT))
        raise DataFormatError(f"{source}:{lines[i]}: the label {_show(tokens[i])} overflows float32")
    if not options.allow_real_labels and np.any(np.abs(values) > F32_EXACT_INT):
        # float32 holds every integer up to 2^24 only: 16777217 would silently become 16777216.
        i = int(np.argmax(np.abs(values) > F32_EXACT_INT))
        raise DataFormatError(f"{source}:{lines[i]}: the label {_show(tokens[i])} is beyond 2^24 = "
                              f"{F32_EXACT_INT}, the largest integer label float32 holds exactly")
    return values.astype(np.float32)


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
                    options: ReaderOptions, acc: _Rows) -> None:
    """Parse ``index:value`` tokens of one chunk into a dense float32 block (columns = raw index)."""
    n_rows, n_tok = len(counts), len(tokens)
    if n_tok == 0:
        acc.blocks.append(np.zeros((n_rows, 0), dtype=np.float32))
        return
    joined = b" ".join(tokens)
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
        raise error(f"{source}:{lines[rows[t]]}: {message.format(tok=_show(tokens[t]))}")

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
    acc.blocks.append(block)


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
                raise DataFormatError(f"{where}: expected <index>:<value>, got {_show(tok)}")
            if not index.isdigit():
                raise DataFormatError(f"{where}: the feature index in {_show(tok)} is not a non-negative "
                                      "integer")
            if value == b"NULL":
                raise DataFormatError(f"{where}: NULL (missing) value in {_show(tok)}; pass "
                                      "null_value=<number> to fill missing values")
            if not _NUMBER.fullmatch(value):
                raise DataFormatError(f"{where}: the feature value in {_show(tok)} is not a number")
        t += count
    raise DataFormatError(f"{source}: malformed feature tokens")  # pragma: no cover - defensive


def _assemble(acc: _Rows, *, source: str, options: ReaderOptions, query_sizes: np.ndarray | None,
              query_source: str | None) -> Dataset:
    n_rows = len(acc.lines)
    lines = np.asarray(acc.lines, dtype=np.int64)
    # ---- query boundaries
    if query_sizes is None:
        missing = [i for i, q in enumerate(acc.qids) if q is None]
        if missing:
            raise DataFormatError(f"{source}:{lines[missing[0]]}: missing 'qid:' (expected "
                                  "'<label> qid:<id> <index>:<value> ...'; for a LightGBM file without qid "
                                  "put its query sizes in <file>.query beside it, which is read "
                                  "automatically, or give load_letor(..., query_file=<the .query file>))")
        per_row = acc.qids
    else:
        with_qid = [i for i, q in enumerate(acc.qids) if q is not None]
        if with_qid:
            raise DataFormatError(f"{source}:{lines[with_qid[0]]}: has 'qid:' although group sizes were "
                                  f"given ({query_source}); use one or the other")
        if int(query_sizes.sum()) != n_rows:
            raise DataFormatError(f"{query_source}: the group sizes add up to {int(query_sizes.sum())} "
                                  f"but {source} has {n_rows} data lines")
        per_row = None
    if per_row is not None:
        starts = [0] + [i for i in range(1, n_rows) if per_row[i] != per_row[i - 1]]
        block_qids = [per_row[s] for s in starts]
        first_block: dict[bytes, int] = {}
        regroup_needed = False
        for b, q in enumerate(block_qids):
            if q in first_block:
                if not options.regroup:
                    earlier = first_block[q]
                    end = starts[earlier + 1] - 1
                    raise DataFormatError(
                        f"{source}:{lines[starts[b]]}: qid {_show(q)} reappears after other queries "
                        f"(its earlier rows end at line {lines[end]}); rows of one query must be "
                        "contiguous: sort the file by qid, or pass regroup=True (--regroup of "
                        "smoothrank predict and evaluate)")
                regroup_needed = True
            else:
                first_block[q] = b
        qid_order = list(first_block)
        qids = np.asarray([_qid_text(q, source, int(lines[starts[first_block[q]]])) for q in qid_order],
                          dtype=np.str_)
        if regroup_needed:
            rank = {q: r for r, q in enumerate(qid_order)}
            row_rank = np.asarray([rank[q] for q in per_row], dtype=np.int64)
            order = np.argsort(row_rank, kind="stable")
            sizes = np.bincount(row_rank, minlength=len(qid_order))
        else:
            order = None
            sizes = np.diff(np.asarray([*starts, n_rows], dtype=np.int64))
    else:
        order = None
        sizes = query_sizes
        qids = np.arange(sizes.shape[0]).astype(np.str_)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    # ---- feature columns
    zero_based = options.zero_based if options.zero_based != "auto" else acc.first_zero_line is not None
    first_col = 0 if zero_based else 1
    inferred = acc.max_index + 1 - first_col if acc.max_index >= 0 else 0
    if options.n_features is not None:
        if zero_based and acc.first_limit_line is not None:
            why = ("zero_based=True" if options.zero_based is True
                   else f"index 0 occurs on line {acc.first_zero_line}")
            raise IndexBaseError(f"{source}:{acc.first_limit_line}: feature index {options.n_features} is "
                                 f"beyond n_features={options.n_features} (indices are zero-based: {why})")
        width = options.n_features
    else:
        width = inferred
    features = np.zeros((n_rows, width), dtype=np.float32)
    r = 0
    while acc.blocks:
        block = acc.blocks.pop(0)  # free each block as soon as it is copied
        cols = block[:, first_col:first_col + width]
        features[r:r + block.shape[0], :cols.shape[1]] = cols
        r += block.shape[0]
    labels = np.concatenate(acc.labels)
    doc_ids = np.asarray(acc.doc_ids, dtype=np.str_)
    if order is not None:
        features, labels, doc_ids, lines = features[order], labels[order], doc_ids[order], lines[order]
    return Dataset(features, labels, qids, doc_ids, offsets, lines, source, first_col)


def _arrays(dataset: Dataset) -> dict[str, Any]:
    return {"features": dataset.features, "labels": dataset.labels, "qids": dataset.qids,
            "doc_ids": dataset.doc_ids, "offsets": dataset.offsets, "line_numbers": dataset.line_numbers,
            "index_base": dataset.index_base}


def _decode(raw: bytes, source: str, line: int, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DataFormatError(f"{source}:{line}: the {what} {raw!r} is not valid UTF-8") from None


def _qid_text(raw: bytes, source: str, line: int) -> str:
    """The qid ``raw`` as text. One holding ':' or non-ASCII whitespace is a qid run into the next token,
    typically across a non-breaking space, which ``bytes.split`` does not split on (``qid:1\\xa01:1`` is
    qid '1\\xa01:1' and no features): refused here, where both readers share the check."""
    text = _decode(raw, source, line, "qid")
    if b":" not in raw and raw.isascii():
        return text  # the common case: one scan
    space = _wide_space(text)
    if space:
        why = f"{space}, which does not separate tokens: use an ASCII space or tab"
    elif b":" in raw:
        why = "':' (a space missing before a feature?); a qid must not contain ':'"
    else:
        return text
    raise DataFormatError(f"{source}:{line}: the qid {_show(raw, hint=False)} contains {why}")


def _wide_space(text: str) -> str:
    """The name of the first non-ASCII whitespace character in ``text``, or ""."""
    space = next((c for c in text if c.isspace() and ord(c) > 127), None)
    if space is None:
        return ""
    return ("a non-breaking space (U+00A0, bytes C2 A0)" if space == "\xa0"
            else f"non-ASCII whitespace (U+{ord(space):04X})")


def _show(raw: bytes, *, hint: bool = True) -> str:
    """``raw`` for an error message; a token run into the next across a non-breaking (or other
    non-ASCII) space, which does not split tokens, says so (unless ``hint`` is False)."""
    text = raw.decode("utf-8", "replace")
    shown = repr(text if len(text) <= 40 else text[:37] + "...")
    space = _wide_space(text) if hint and not raw.isascii() else ""
    return f"{shown} (holding {space}, which does not separate tokens: use an ASCII space or tab)" if space \
        else shown
