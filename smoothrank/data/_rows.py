"""What the LETOR readers collect chunk by chunk, and the assembly of a dataset from it.

Both readers (the compiled scanner and the strict parser of :mod:`smoothrank.data.letor`) hand each
chunk's rows to a :class:`Rows` accumulator: per-row arrays (features, labels, line numbers, doc ids)
go to a sink, in memory (:class:`MemorySink`) or appended to files of a store entry being written
(:class:`DiskSink`, bounded memory for any input size); queries are kept as runs of equal qids.
:func:`assemble` then makes the final arrays, in memory or as ``.npy`` files of the entry, and makes
the query-level checks that both readers share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from smoothrank.data.dataset import F32_EXACT_INT, Dataset, dataset_from_parts
from smoothrank.errors import DataFormatError, IndexBaseError

if TYPE_CHECKING:
    from smoothrank.data._options import ReaderOptions
    from smoothrank.data.store import EntryWriter

#: The per-row arrays a sink holds.
ROW_ARRAYS = ("features", "labels", "line_numbers", "doc_ids")
#: Rows copied at a time where arrays are reordered (regroup) or widened.
_ROW_BLOCK = 1 << 16


class MemorySink:
    """Per-row arrays of each chunk, kept in memory."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {name: [] for name in ROW_ARRAYS}

    def add(self, name: str, array: np.ndarray) -> None:
        self.parts[name].append(array)

    def dtypes(self, name: str) -> list[np.dtype]:
        return [a.dtype for a in self.parts[name]]

    def chunks(self, name: str) -> Iterator[np.ndarray]:
        """The chunks of ``name`` in order, each released once consumed."""
        parts = self.parts[name]
        while parts:
            yield parts.pop(0)

    def allocate(self, name: str, dtype: np.dtype | str, shape: tuple[int, ...]) -> np.ndarray:
        return np.zeros(shape, dtype=dtype)

    def discard(self, name: str) -> None:
        """Forget a temporary array made by :meth:`allocate` (nothing to do in memory)."""

    def close(self) -> None:
        """Nothing to close in memory."""


class DiskSink:
    """Per-row arrays of each chunk, appended to raw files in the temporary folder of a store entry;
    the final arrays are ``.npy`` files of the entry (:meth:`allocate`)."""

    def __init__(self, writer: EntryWriter) -> None:
        self.writer = writer
        self.handles = {name: open(writer.path(f"{name}.raw"), "wb") for name in ROW_ARRAYS}
        self.meta: dict[str, list[tuple[np.dtype, tuple[int, ...]]]] = {name: [] for name in ROW_ARRAYS}

    def add(self, name: str, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        array.tofile(self.handles[name])
        self.meta[name].append((array.dtype, array.shape))

    def dtypes(self, name: str) -> list[np.dtype]:
        return [dtype for dtype, _ in self.meta[name]]

    def chunks(self, name: str) -> Iterator[np.ndarray]:
        handle = self.handles[name]
        handle.close()
        path = self.writer.path(f"{name}.raw")
        with open(path, "rb") as raw:
            for dtype, shape in self.meta[name]:
                yield np.fromfile(raw, dtype=dtype, count=int(np.prod(shape))).reshape(shape)
        path.unlink()

    def allocate(self, name: str, dtype: np.dtype | str, shape: tuple[int, ...]) -> np.ndarray:
        return self.writer.allocate(name, dtype, shape)

    def discard(self, name: str) -> None:
        self.writer.arrays.pop(name, None)
        self.writer.path(f"{name}.npy").unlink(missing_ok=True)

    def close(self) -> None:
        for handle in self.handles.values():
            handle.close()


@dataclass
class Rows:
    """What the line loop collects, chunk by chunk."""

    sink: MemorySink | DiskSink = field(default_factory=MemorySink)
    n_rows: int = 0
    run_starts: list[int] = field(default_factory=list)  # first row of each run of equal qids
    run_qids: list[bytes | None] = field(default_factory=list)
    run_lines: list[int] = field(default_factory=list)  # line of the run's first row
    run_end_lines: list[int] = field(default_factory=list)  # line of the run's last row
    first_zero_line: int | None = None
    first_limit_line: int | None = None  # first line using index == n_features
    max_index: int = -1
    has_null: bool = False
    labels_integer: bool = True  # every label an integer of at most 2^24
    labels_nonneg: bool = True

    def add_rows(self, lines: np.ndarray, labels: np.ndarray, doc_ids: np.ndarray, block: np.ndarray) -> None:
        """One chunk's rows: lines (int64), labels as parsed (float64), doc ids (str), features."""
        self.labels_integer = self.labels_integer and bool(
            np.all(labels == np.round(labels)) and np.all(np.abs(labels) <= F32_EXACT_INT))
        self.labels_nonneg = self.labels_nonneg and not bool(np.any(labels < 0))
        self.sink.add("line_numbers", np.asarray(lines, dtype=np.int64))
        self.sink.add("labels", labels.astype(np.float32))
        self.sink.add("doc_ids", doc_ids)
        self.sink.add("features", block)
        self.n_rows += int(lines.shape[0])

    def add_runs(self, first_rows: np.ndarray, qids: list[bytes | None], lines: np.ndarray) -> None:
        """Runs of one chunk (before its rows are added): the chunk's row index of each run's first
        row, its qid, and the chunk's line numbers. A first run with the previous chunk's last qid
        continues it."""
        n = int(lines.shape[0])
        ends = np.r_[first_rows[1:], n] - 1
        for start, qid, end in zip(first_rows.tolist(), qids, ends.tolist(), strict=True):
            if start == 0 and self.run_qids and qid is not None and self.run_qids[-1] == qid:
                self.run_end_lines[-1] = int(lines[end])
                continue
            self.run_starts.append(self.n_rows + start)
            self.run_qids.append(qid)
            self.run_lines.append(int(lines[start]))
            self.run_end_lines.append(int(lines[end]))


@dataclass
class Parsed:
    """The arrays of a parsed input (in memory, or memory maps of an entry being written) and what
    the store records about the parse (:func:`parse_info`)."""

    arrays: dict[str, Any]
    info: dict[str, Any]

    def dataset(self, source: str) -> Dataset:
        return Dataset(source=source, **self.arrays)


def assemble(acc: Rows, *, source: str, options: ReaderOptions, query_sizes: np.ndarray | None,
             query_source: str | None) -> Parsed:
    """The dataset's arrays from ``acc`` (allocated by its sink), after the query-level checks."""
    offsets, qids, order = _queries(acc, source=source, options=options, query_sizes=query_sizes,
                                    query_source=query_source)
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
    n, sink = acc.n_rows, acc.sink

    def columns(block: np.ndarray) -> np.ndarray:
        return block[:, first_col:first_col + width]

    arrays: dict[str, Any] = {"features": _fill(sink, "features", np.float32, (n, width), order, columns)}
    arrays["labels"] = _fill(sink, "labels", np.float32, (n,), order)
    widest = max((d.itemsize for d in sink.dtypes("doc_ids")), default=4) // 4
    arrays["doc_ids"] = _fill(sink, "doc_ids", f"<U{max(widest, 1)}", (n,), order)
    arrays["line_numbers"] = _fill(sink, "line_numbers", np.int64, (n,), order)
    arrays["qids"] = qids
    arrays["offsets"] = offsets
    arrays["index_base"] = first_col
    info = {"index_base": first_col, "n_features": width, "max_index": acc.max_index,
            "has_zero": acc.first_zero_line is not None, "has_null": acc.has_null,
            "null_value": options.null_value, "labels_integer": acc.labels_integer,
            "labels_nonneg": acc.labels_nonneg, "regrouped": order is not None,
            "n_docs": n, "n_queries": int(offsets.shape[0] - 1)}
    return Parsed(arrays, info)


def _fill(sink: MemorySink | DiskSink, name: str, dtype: Any, shape: tuple[int, ...],
          order: np.ndarray | None, columns: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """The final array ``name`` from the sink's chunks (``columns`` picks the columns of a 2-D chunk),
    rows reordered by ``order`` where given."""
    target = "_unordered_" + name if order is not None else name
    out = sink.allocate(target, dtype, shape)
    r = 0
    for chunk in sink.chunks(name):
        part = columns(chunk) if columns is not None else chunk
        rows = part.shape[0]
        if out.ndim == 2:
            out[r:r + rows, :part.shape[1]] = part
        else:
            out[r:r + rows] = part
        r += rows
    if order is None:
        return out
    final = sink.allocate(name, dtype, shape)
    for start in range(0, shape[0], _ROW_BLOCK):
        final[start:start + _ROW_BLOCK] = out[order[start:start + _ROW_BLOCK]]
    del out
    sink.discard(target)
    return final


def _queries(acc: Rows, *, source: str, options: ReaderOptions, query_sizes: np.ndarray | None,
             query_source: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(offsets, qids, order)`` of the queries (``order``: the row permutation of a regroup, else
    None), after the checks: missing or unexpected qids, group sizes, interleaved queries."""
    n_rows = acc.n_rows
    if query_sizes is not None:
        with_qid = [i for i, q in enumerate(acc.run_qids) if q is not None]
        if with_qid:
            raise DataFormatError(f"{source}:{acc.run_lines[with_qid[0]]}: has 'qid:' although group sizes "
                                  f"were given ({query_source}); use one or the other")
        if int(query_sizes.sum()) != n_rows:
            raise DataFormatError(f"{query_source}: the group sizes add up to {int(query_sizes.sum())} "
                                  f"but {source} has {n_rows} data lines")
        offsets = np.concatenate([[0], np.cumsum(query_sizes)]).astype(np.int64)
        return offsets, np.arange(query_sizes.shape[0]).astype(np.str_), None
    missing = [i for i, q in enumerate(acc.run_qids) if q is None]
    if missing:
        raise DataFormatError(f"{source}:{acc.run_lines[missing[0]]}: missing 'qid:' (expected "
                              "'<label> qid:<id> <index>:<value> ...'; for a LightGBM file without qid "
                              "put its query sizes in <file>.query beside it, which is read "
                              "automatically, or give load_letor(..., query_file=<the .query file>))")
    run_qids = [q for q in acc.run_qids if q is not None]  # all of them: a missing qid is refused above
    first_block: dict[bytes, int] = {}
    regroup_needed = False
    for b, q in enumerate(run_qids):
        if q in first_block:
            if not options.regroup:
                earlier = first_block[q]
                raise DataFormatError(
                    f"{source}:{acc.run_lines[b]}: qid {show(q)} reappears after other queries "
                    f"(its earlier rows end at line {acc.run_end_lines[earlier]}); rows of one query must be "
                    "contiguous: sort the file by qid, or pass regroup=True (--regroup of "
                    "smoothrank predict and evaluate)")
            regroup_needed = True
        else:
            first_block[q] = b
    qid_order = list(first_block)
    qids = np.asarray([qid_text(q, source, acc.run_lines[first_block[q]]) for q in qid_order],
                      dtype=np.str_)
    run_bounds = np.asarray([*acc.run_starts, n_rows], dtype=np.int64)
    run_sizes = run_bounds[1:] - run_bounds[:-1]
    if not regroup_needed:
        return np.r_[0, np.cumsum(run_sizes)].astype(np.int64), qids, None
    rank = {q: r for r, q in enumerate(qid_order)}
    run_rank = np.asarray([rank[q] for q in run_qids], dtype=np.int64)
    row_rank = np.repeat(run_rank, run_sizes)
    order = np.argsort(row_rank, kind="stable")
    sizes = np.bincount(row_rank, minlength=len(qid_order))
    return np.r_[0, np.cumsum(sizes)].astype(np.int64), qids, order


# --------------------------------------------------------------------------------- text for messages
def decode(raw: bytes, source: str, line: int, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DataFormatError(f"{source}:{line}: the {what} {raw!r} is not valid UTF-8") from None


def qid_text(raw: bytes, source: str, line: int) -> str:
    """The qid ``raw`` as text. One holding ':' or non-ASCII whitespace is a qid run into the next token,
    typically across a non-breaking space, which ``bytes.split`` does not split on (``qid:1\\xa01:1`` is
    qid '1\\xa01:1' and no features): refused here, where both readers share the check."""
    text = decode(raw, source, line, "qid")
    if b":" not in raw and raw.isascii():
        return text  # the common case: one scan
    space = wide_space(text)
    if space:
        why = f"{space}, which does not separate tokens: use an ASCII space or tab"
    elif b":" in raw:
        why = "':' (a space missing before a feature?); a qid must not contain ':'"
    else:
        return text
    raise DataFormatError(f"{source}:{line}: the qid {show(raw, hint=False)} contains {why}")


def wide_space(text: str) -> str:
    """The name of the first non-ASCII whitespace character in ``text``, or ""."""
    space = next((c for c in text if c.isspace() and ord(c) > 127), None)
    if space is None:
        return ""
    return ("a non-breaking space (U+00A0, bytes C2 A0)" if space == "\xa0"
            else f"non-ASCII whitespace (U+{ord(space):04X})")


def show(raw: bytes, *, hint: bool = True) -> str:
    """``raw`` for an error message; a token run into the next across a non-breaking (or other
    non-ASCII) space, which does not split tokens, says so (unless ``hint`` is False)."""
    text = raw.decode("utf-8", "replace")
    shown = repr(text if len(text) <= 40 else text[:37] + "...")
    space = wide_space(text) if hint and not raw.isascii() else ""
    return f"{shown} (holding {space}, which does not separate tokens: use an ASCII space or tab)" if space \
        else shown


def stored_dataset(arrays: dict[str, Any], source: str) -> Dataset:
    """A dataset over the arrays of a store entry (memory maps); their values were checked when the
    entry was written, so only the invariants of the layout are checked again, not every value."""
    return dataset_from_parts(source=source, **arrays)
