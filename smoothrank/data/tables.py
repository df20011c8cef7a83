"""Ranking data from Parquet and Arrow (IPC / Feather v2) tables: one row per document, with a label
column, a query id column and feature columns. Needs pyarrow (``pip install 'smoothrank[parquet]'``).

The table is read a batch of rows at a time into the same accumulator as the LETOR readers, so it
goes through the dataset store like a LETOR file (bounded memory; read-only memory maps; identity
and eviction as in :mod:`smoothrank.data.store`). Problems name the file, the row (1-based) and the
column.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from smoothrank._checks import check_bool
from smoothrank.data import store
from smoothrank.data._options import ReaderOptions
from smoothrank.data._rows import DiskSink, Parsed, Rows, assemble
from smoothrank.data.dataset import F32_EXACT_INT, F32_LIMIT, Dataset
from smoothrank.data.letor import AUTO_CACHE_BYTES, commit_entry, open_entry, serves
from smoothrank.errors import DataFormatError, SmoothrankError

__all__ = ["load_table"]

_BATCH_ROWS = 1 << 16
_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow"}


def load_table(path: str | os.PathLike[str], *, label: str = "label", qid: str = "qid",
               features: Sequence[str] | None = None, doc_id: str | None = None, regroup: bool = False,
               allow_real_labels: bool = False, allow_negative_labels: bool = False,
               cache: bool | None = None) -> Dataset:
    """Read a Parquet or Arrow table of documents as a :class:`Dataset`.

    Parameters
    ----------
    path
        A ``.parquet``/``.pq`` file, or an Arrow IPC / Feather v2 file (``.arrow``, ``.feather``,
        ``.ipc``); other names are told apart by their magic bytes.
    label, qid
        The label and query id columns (query ids of any type, compared as text).
    features
        The feature columns, in order; default every other numeric column, in table order.
    doc_id
        A document id column (default: the row number, 1-based).
    regroup, allow_real_labels, allow_negative_labels, cache
        As for :func:`smoothrank.data.load_letor`.

    Returns
    -------
    Dataset
        ``features`` float32 (n_docs, n_features), rows in table order (queries contiguous unless
        ``regroup``); ``line_numbers`` are row numbers; ``index_base`` is None.
    """
    try:
        import pyarrow.dataset as pads
    except ImportError:
        raise SmoothrankError("reading Parquet/Arrow tables needs pyarrow: "
                              "pip install 'smoothrank[parquet]'") from None
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(2, "No such file or directory", str(path))
    table = pads.dataset(path, format=_format(path))
    columns = _columns(table.schema, path, label, qid, features, doc_id)
    options = ReaderOptions(n_features=len(columns), zero_based=True, regroup=check_bool(regroup, "regroup"),
                            allow_real_labels=allow_real_labels, allow_negative_labels=allow_negative_labels)
    use_cache = check_bool(cache, "cache") if cache is not None else path.stat().st_size >= AUTO_CACHE_BYTES
    source = str(path)
    if not use_cache:
        return _read(table, path, label, qid, columns, doc_id, options, Rows()).dataset(source)
    identity = {**store.source_identity(path), "options": {"table": [label, qid, columns, doc_id]}}
    for entry, manifest in store.find(identity):
        if serves(manifest.get("parse", {}), options):
            if (ds := open_entry(entry, manifest, source)) is not None:
                store.touch(entry)
                return ds
    with store.EntryWriter(identity, source) as writer:
        parsed = _read(table, path, label, qid, columns, doc_id, options, Rows(sink=DiskSink(writer)))
        entry = commit_entry(writer, parsed)
    store.evict(keep=entry)
    dataset = open_entry(entry, store.read_manifest(entry) or {}, source)
    if dataset is None:  # pragma: no cover - just written
        raise SmoothrankError(f"{entry}: the dataset cache entry just written cannot be read back")
    return dataset


def _format(path: Path) -> str:
    kind = _FORMATS.get(path.suffix.lower())
    if kind is not None:
        return kind
    with open(path, "rb") as handle:
        head = handle.read(6)
    if head[:4] == b"PAR1":
        return "parquet"
    if head == b"ARROW1":
        return "arrow"
    raise DataFormatError(f"{path}: neither a Parquet nor an Arrow IPC file (by its name and first bytes)")


def _columns(schema: Any, path: Path, label: str, qid: str, features: Sequence[str] | None,
             doc_id: str | None) -> list[str]:
    import pyarrow as pa

    names = list(schema.names)
    for option, name in (("label", label), ("qid", qid), ("doc_id", doc_id)):
        if name is not None and name not in names:
            raise DataFormatError(f"{path}: no column {name!r} ({option}=); the columns are {names}")
    if features is None:
        taken = {label, qid, doc_id}
        chosen = [n for n in names if n not in taken
                  and (pa.types.is_integer(schema.field(n).type) or pa.types.is_floating(schema.field(n).type)
                       or pa.types.is_boolean(schema.field(n).type))]
    else:
        if isinstance(features, str):
            raise SmoothrankError(f"features: expected a list of column names, got {features!r}")
        chosen = list(features)
        missing = [n for n in chosen if n not in names]
        if missing:
            raise DataFormatError(f"{path}: no column(s) {missing} (features=); the columns are {names}")
    if not chosen:
        raise DataFormatError(f"{path}: no numeric feature columns besides {label!r} and {qid!r}")
    return chosen


def _read(table: Any, path: Path, label: str, qid: str, columns: list[str], doc_id: str | None,
          options: ReaderOptions, acc: Rows) -> Parsed:
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = list(dict.fromkeys([label, qid, *columns, *([doc_id] if doc_id else [])]))
    for batch in table.to_batches(columns=wanted, batch_size=_BATCH_ROWS):
        n = batch.num_rows
        if n == 0:
            continue
        lines = np.arange(acc.n_rows + 1, acc.n_rows + n + 1, dtype=np.int64)
        for name in wanted:
            column = batch.column(name)
            if column.null_count:
                row = int(np.argmax(np.asarray(column.is_null())))
                raise DataFormatError(f"{path}: row {lines[row]}: column {name!r} is null")
        labels = _numbers(batch.column(label), path, label, lines).astype(np.float64)
        _check_labels(labels, path, label, lines, options)
        block = np.empty((n, len(columns)), dtype=np.float32)
        for j, name in enumerate(columns):
            values = _numbers(batch.column(name), path, name, lines).astype(np.float64)
            bad = ~(np.abs(values) < F32_LIMIT)
            if bad.any():
                row = int(np.argmax(bad))
                raise DataFormatError(f"{path}: row {lines[row]}: column {name!r} is "
                                      f"{float(values[row])!r}, not a finite float32")
            block[:, j] = values
        qids = np.asarray(pc.cast(batch.column(qid), pa.string()).to_numpy(zero_copy_only=False),
                          dtype=object)
        first_rows = np.flatnonzero(np.r_[True, qids[1:] != qids[:-1]])
        acc.add_runs(first_rows, [str(qids[i]).encode() for i in first_rows.tolist()], lines)
        doc_ids = lines.astype(np.str_) if doc_id is None else np.asarray(
            pc.cast(batch.column(doc_id), pa.string()).to_numpy(zero_copy_only=False).tolist(), dtype=np.str_)
        acc.add_rows(lines, labels, doc_ids, block)
    if not acc.n_rows:
        raise DataFormatError(f"{path}: no rows")
    acc.max_index, acc.first_zero_line = len(columns) - 1, 1
    try:
        parsed = assemble(acc, source=str(path), options=options, query_sizes=None, query_source=None)
    finally:
        acc.sink.close()
    parsed.arrays["index_base"] = None
    parsed.info["table"] = True
    return parsed


def _numbers(column: Any, path: Path, name: str, lines: np.ndarray) -> np.ndarray:
    import pyarrow as pa

    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        raise DataFormatError(f"{path}: column {name!r} holds {kind}, not numbers")
    return np.asarray(column.to_numpy(zero_copy_only=False))


def _check_labels(labels: np.ndarray, path: Path, name: str, lines: np.ndarray,
                  options: ReaderOptions) -> None:
    finite = np.isfinite(labels)
    real = finite & ((labels != np.round(labels)) | (np.abs(labels) > F32_EXACT_INT))
    negative = finite & (labels < 0)
    checks = [(~finite, "not finite"),
              (real if not options.allow_real_labels else None,
               "not an integer grade of at most 2^24 (allow_real_labels=True reads real labels)"),
              (negative if not options.allow_negative_labels else None,
               "negative (allow_negative_labels=True reads negative labels)")]
    for bad, why in checks:
        if bad is not None and bad.any():
            row = int(np.argmax(bad))
            raise DataFormatError(f"{path}: row {lines[row]}: label ({name!r}) {float(labels[row])!r} "
                                  f"is {why}")
