"""The in-memory query-list dataset shared by the reader, the batchers and the writers."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from smoothrank.errors import SmoothrankError

if TYPE_CHECKING:
    import torch

#: The largest integer up to which float32 holds every integer exactly: integer labels above it
#: would change in the cast to float32 (16777217 -> 16777216), so the reader and from_arrays refuse them.
F32_EXACT_INT = 2**24
#: Doubles below this round to a finite float32 (the largest float32 and its 9-digit text, as
#: write_letor prints it, included); at it and above they round to inf: half of float32's last gap
#: (2^104) above its largest value, whose mantissa is odd. The readers refuse values from here on.
F32_LIMIT = float(np.finfo(np.float32).max) + 2.0**103


@dataclass(frozen=True, eq=False)
class Dataset:
    """Documents grouped into queries, in file order.

    Query ``q`` owns rows ``offsets[q]:offsets[q + 1]``. Rows keep the order of the source file
    unless the reader was asked to regroup interleaved queries; ``line_numbers`` always gives
    each row's 1-based source line, so predictions can be mapped back to the file.

    Attributes
    ----------
    features : np.ndarray
        float32, shape (n_docs, n_features); features absent from a sparse line are 0.
    labels : np.ndarray
        float32, shape (n_docs,).
    qids : np.ndarray
        str, shape (n_queries,).
    doc_ids : np.ndarray
        str, shape (n_docs,); LETOR's ``#docid = ...`` when present, else the line number.
    offsets : np.ndarray
        int64, shape (n_queries + 1,), ``offsets[0] == 0``, strictly increasing (every query
        has at least one document).
    line_numbers : np.ndarray
        int64, shape (n_docs,), 1-based source lines.
    source : str
        Where the data came from (a path or a description), used in messages.
    index_base : int or None
        The first feature index of the source file as the reader read it: 0 (zero-based: index ``i``
        is column ``i``) or 1 (index ``i`` is column ``i - 1``); None for data not read from a LETOR
        file. Files scored by one model must be read with the same base, which is why
        :func:`smoothrank.datasets.load_splits` and ``smoothrank predict`` reuse the training file's.

    Examples
    --------
    >>> from smoothrank.data import parse_letor
    >>> d = parse_letor(b"2 qid:1 1:0.5\\n0 qid:1 1:0.1\\n1 qid:2 1:0.3\\n")
    >>> d.n_queries, d.n_docs, d.n_features
    (2, 3, 1)
    """

    features: np.ndarray
    labels: np.ndarray
    qids: np.ndarray
    doc_ids: np.ndarray
    offsets: np.ndarray
    line_numbers: np.ndarray
    source: str = "<memory>"
    index_base: int | None = None

    def __post_init__(self) -> None:
        _validate(self)
        check_finite_features(self, "Dataset: features")

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_arrays(
        cls,
        features: np.ndarray,
        labels: np.ndarray,
        query_ids: Sequence[object] | np.ndarray,
        *,
        doc_ids: Sequence[object] | np.ndarray | None = None,
        source: str = "<arrays>",
    ) -> Dataset:
        """Build a dataset from per-row arrays; rows of one query must be contiguous.

        ``query_ids`` has one entry per row (any type; converted to ``str``).
        """
        features = np.asarray(features)
        labels = np.asarray(labels)
        per_row = np.asarray([str(q) for q in np.asarray(query_ids).tolist()], dtype=np.str_)
        n = per_row.shape[0]
        if features.ndim != 2 or features.shape[0] != n or labels.shape != (n,):
            raise SmoothrankError(
                f"from_arrays: features must be (n_docs, n_features) and labels and query_ids (n_docs,); "
                f"got features {features.shape}, labels {labels.shape}, query_ids ({n},)")
        if n == 0:
            raise SmoothrankError("from_arrays: no rows")
        starts = np.flatnonzero(np.r_[True, per_row[1:] != per_row[:-1]])
        qids = per_row[starts]
        if np.unique(qids).shape[0] != qids.shape[0]:
            raise SmoothrankError("from_arrays: query_ids: rows of one query must be contiguous")
        offsets = np.r_[starts, n].astype(np.int64)
        lines = np.arange(1, n + 1, dtype=np.int64)
        if doc_ids is None:
            docs = lines.astype(np.str_)
        else:
            docs = np.asarray([str(d) for d in np.asarray(doc_ids).tolist()], dtype=np.str_)
        features32, labels32 = _finite_float32(features, "features"), _finite_float32(labels, "labels")
        _check_integer_labels(labels, labels32)
        return cls(features32, labels32, qids, docs, offsets, lines, source)

    # ----------------------------------------------------------------- sizes
    @property
    def n_docs(self) -> int:
        return int(self.features.shape[0])

    @property
    def n_queries(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def list_sizes(self) -> np.ndarray:
        """int64 (n_queries,): the number of documents of each query."""
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return self.n_queries

    # ----------------------------------------------------------------- access
    def rows(self, q: int) -> slice:
        """The row slice of query ``q``."""
        q = self._check_query(q)
        return slice(int(self.offsets[q]), int(self.offsets[q + 1]))

    def query(self, q: int) -> tuple[np.ndarray, np.ndarray]:
        """``(features, labels)`` of query ``q`` (views, not copies)."""
        sl = self.rows(q)
        return self.features[sl], self.labels[sl]

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Iterate over queries, yielding ``(features, labels)``."""
        for q in range(self.n_queries):
            yield self.query(q)

    def query_of_row(self) -> np.ndarray:
        """int64 (n_docs,): the query index of every row."""
        return np.repeat(np.arange(self.n_queries, dtype=np.int64), self.list_sizes)

    def with_features(self, new_features: np.ndarray) -> Dataset:
        """The same queries with ``new_features`` (n_docs rows, any number of columns)."""
        if not isinstance(new_features, np.ndarray):  # a memory map stays one
            new_features = np.asarray(new_features)
        if new_features.ndim != 2 or new_features.shape[0] != self.n_docs:
            raise SmoothrankError(f"with_features: new_features must have shape ({self.n_docs}, F), "
                                  f"got {new_features.shape}")
        with np.errstate(over="ignore"):  # beyond float32 becomes inf, refused below with its line
            features = new_features.astype(np.float32, copy=False)
        check_finite_features(self, "with_features: new_features", features)
        # Other columns: the file's index base no longer maps indices to them.
        return Dataset(features, self.labels, self.qids, self.doc_ids, self.offsets, self.line_numbers,
                       self.source)

    def subset(self, queries: Sequence[int] | np.ndarray) -> Dataset:
        """A dataset of the given queries, in the given order: integer indices (negative ones count from
        the end) or a boolean mask with one entry per query."""
        idx = _query_indices(queries, self.n_queries)
        if idx.min() < -self.n_queries or idx.max() >= self.n_queries:
            raise SmoothrankError(f"subset: queries out of range for {self.n_queries} queries")
        idx = idx % self.n_queries
        sizes = self.list_sizes[idx]
        rows = np.concatenate([np.arange(self.offsets[q], self.offsets[q + 1]) for q in idx])
        return Dataset(self.features[rows], self.labels[rows], self.qids[idx], self.doc_ids[rows],
                       np.r_[0, np.cumsum(sizes)].astype(np.int64), self.line_numbers[rows], self.source,
                       self.index_base)

    def _check_query(self, q: int) -> int:
        if not -self.n_queries <= int(q) < self.n_queries:
            raise IndexError(f"query index {q} out of range for {self.n_queries} queries")
        return int(q) % self.n_queries

    def __repr__(self) -> str:
        return (f"Dataset(source={self.source!r}, n_queries={self.n_queries}, n_docs={self.n_docs}, "
                f"n_features={self.n_features})")


def concat_datasets(datasets: Sequence[Dataset], *, source: str | None = None) -> Dataset:
    """The queries of ``datasets`` one after another (e.g. training plus validation for a refit).

    Every part must have the same number of features. Rows keep their source line numbers, so
    ``source`` (default: the parts' sources joined by ``" + "``) names several files.

    Lists are never merged across parts: a query id present in two parts (a split by document,
    or the ids ``"0", "1", ...`` numbered per file from ``.query`` side files) stays two lists,
    as each part gave them to training. Query ids are therefore unique only within a part.
    """
    parts = list(datasets)
    if not parts:
        raise SmoothrankError("concat_datasets: no datasets")
    widths = {d.n_features for d in parts}
    if len(widths) > 1:
        raise SmoothrankError("concat_datasets: the datasets have different numbers of features: "
                              + ", ".join(f"{d.source} {d.n_features}" for d in parts))
    starts = np.cumsum([0] + [d.n_docs for d in parts[:-1]])
    shifted = [d.offsets[1:] + start for d, start in zip(parts, starts, strict=True)]
    offsets = np.concatenate([parts[0].offsets[:1], *shifted])
    return Dataset(np.concatenate([d.features for d in parts]), np.concatenate([d.labels for d in parts]),
                   np.concatenate([d.qids for d in parts]), np.concatenate([d.doc_ids for d in parts]),
                   offsets.astype(np.int64), np.concatenate([d.line_numbers for d in parts]),
                   source if source is not None else " + ".join(d.source for d in parts),
                   bases.pop() if len(bases := {d.index_base for d in parts}) == 1 else None)


def dataset_from_parts(*, features: np.ndarray, labels: np.ndarray, qids: np.ndarray, doc_ids: np.ndarray,
                       offsets: np.ndarray, line_numbers: np.ndarray, source: str,
                       index_base: int | None) -> Dataset:
    """A :class:`Dataset` whose feature values are known to be finite (a store entry the reader wrote:
    it refuses NaN and inf), so only the layout is checked: no pass over every feature value, which
    on a memory-mapped store would read it whole."""
    ds = object.__new__(Dataset)
    for name, value in (("features", features), ("labels", labels), ("qids", qids), ("doc_ids", doc_ids),
                        ("offsets", offsets), ("line_numbers", line_numbers), ("source", source),
                        ("index_base", index_base)):
        object.__setattr__(ds, name, value)
    _validate(ds)
    return ds


def _query_indices(queries: Sequence[int] | np.ndarray, n_queries: int) -> np.ndarray:
    """``queries`` of :meth:`Dataset.subset` as int64 indices; a float is refused, not truncated
    (``[0.7]`` was query 0)."""
    raw = np.asarray(queries)
    if raw.size == 0:
        raise SmoothrankError("subset: queries is empty")
    if raw.dtype == np.bool_:
        if raw.shape != (n_queries,):
            raise SmoothrankError(f"subset: queries: a boolean mask needs one entry per query ({n_queries}), "
                                  f"got shape {raw.shape}")
        if not raw.any():
            raise SmoothrankError("subset: queries: the boolean mask selects no query")
        return np.flatnonzero(raw)
    if raw.dtype.kind not in "iu":
        first = raw.reshape(-1)[:1].tolist()[0]
        raise SmoothrankError(f"subset: queries: expected integer query indices or a boolean mask, got "
                              f"{raw.dtype} (e.g. {first!r})")
    return raw.astype(np.int64).reshape(-1)


def _check_integer_labels(labels: np.ndarray, labels32: np.ndarray) -> None:
    """Integer labels (of an integer dtype, or integer-valued floats) must survive the cast to float32:
    16777217 would silently become 16777216. Real-valued labels round as reals do."""
    # (object and complex labels never get here: _finite_float32 refuses them)
    # |x| in float64: no overflow of abs(-2^63) in int64, no cast of 2^24 to float16
    magnitude = np.abs(labels.astype(np.float64))
    idx = np.flatnonzero(magnitude > F32_EXACT_INT)
    if idx.size == 0:
        return
    sub, sub32 = labels[idx], labels32[idx]
    if labels.dtype.kind == "f":  # compared in the labels' own dtype (longdouble too): exact
        changed = (np.floor(sub) == sub) & (sub32.astype(sub.dtype) != sub)
    else:  # integers: exact in float64 up to 2^53, as Python ints beyond
        changed = np.zeros(idx.size, dtype=bool)
        small = magnitude[idx] < 2.0**53  # exact in float64 below 2^53 (2^53 + 1 reads as 2^53)
        changed[small] = sub32[small].astype(np.float64) != sub[small].astype(np.float64)
        for i in np.flatnonzero(~small):
            changed[i] = int(sub[i]) != int(sub32[i])
    if changed.any():
        j = int(np.argmax(changed))
        raise SmoothrankError(f"from_arrays: labels[{int(idx[j])}] is {int(sub[j])}, beyond 2^24 = 16777216: "
                              f"float32 would hold it as {int(sub32[j])} (integer labels above 2^24 "
                              "are exact only where float32 has them)")


def _finite_float32(values: np.ndarray, name: str) -> np.ndarray:
    """``values`` as float32, or a SmoothrankError naming the first NaN/inf (also one made by the cast)."""
    if values.dtype.kind not in "biuf":
        raise SmoothrankError(f"from_arrays: {name}: expected numbers, got dtype {values.dtype}")
    with np.errstate(over="ignore"):
        out = values.astype(np.float32, copy=False)
    bad = ~np.isfinite(out)
    if bad.any():
        where = np.unravel_index(int(np.argmax(bad)), out.shape)
        raise SmoothrankError(f"from_arrays: {name}{list(map(int, where))} is {float(values[where])!r}, "
                              "not a finite float32 (NaN, inf or beyond its range); fill or drop it first")
    return out


def check_finite_features(ds: Dataset, what: str, features: np.ndarray | None = None) -> None:
    """Raise a SmoothrankError naming the first NaN/inf of ``features`` (default ``ds.features``) by its
    source line and column: one would turn every value of its query or column into NaN downstream
    (QueryMinMax, Standardize, the losses) without a word."""
    f = ds.features if features is None else features
    # min and max propagate NaN and hold any inf: two cheap reductions, no n_docs x F temporary
    if f.size == 0 or (np.isfinite(f.min()) and np.isfinite(f.max())):
        return
    row, col = (int(i) for i in np.unravel_index(int(np.argmax(~np.isfinite(f))), f.shape))
    raise SmoothrankError(f"{what}: {ds.source}:{int(ds.line_numbers[row])}: column {col} (row {row}) is "
                          f"{float(f[row, col])!r}; features must be finite float32: fill or drop NaN/inf "
                          "first (e.g. np.log of 0 is -inf: use np.log1p or a SignedLog1p transform)")


def check_label_gains(ds: Dataset, what: str, gain: Any, *, option: str, dtype: torch.dtype) -> None:
    """Raise a SmoothrankError naming the first label of ``ds`` (source line) whose gain under ``gain``
    (a :mod:`smoothrank.gains` spec, the value of ``option``) is not finite in ``dtype``: the loss or
    metric computing it would stop at its first batch with an error that names no line (2^y - 1 is
    inf from label 128 in float32, 1024 in float64)."""
    from smoothrank.gains import first_infinite_gain  # torch is loaded by the caller anyway

    row = first_infinite_gain(ds.labels, gain, dtype=dtype)
    if row is None:
        return
    label = float(ds.labels[row])
    raise SmoothrankError(f"{what}: {ds.source}:{int(ds.line_numbers[row])}: label {label:g} has no finite "
                          f"gain under {option} ({gain!r}) in {str(dtype).removeprefix('torch.')}; use "
                          "smaller grades or another gain")


def _validate(ds: Dataset) -> None:
    """Check the invariants that every consumer relies on; raise SmoothrankError otherwise."""
    f, y, o = ds.features, ds.labels, ds.offsets
    if not isinstance(f, np.ndarray) or f.dtype != np.float32 or f.ndim != 2:
        raise SmoothrankError("Dataset: features must be a float32 array of shape (n_docs, n_features)")
    n = f.shape[0]
    if not isinstance(y, np.ndarray) or y.dtype != np.float32 or y.shape != (n,):
        raise SmoothrankError(f"Dataset: labels must be a float32 array of shape ({n},)")
    if not isinstance(o, np.ndarray) or o.dtype != np.int64 or o.ndim != 1 or o.shape[0] < 1:
        raise SmoothrankError("Dataset: offsets must be an int64 array of shape (n_queries + 1,)")
    if o[0] != 0 or o[-1] != n or (o.shape[0] > 1 and np.any(np.diff(o) <= 0)):
        raise SmoothrankError("Dataset: offsets must start at 0, end at n_docs and increase strictly")
    nq = o.shape[0] - 1
    if not isinstance(ds.qids, np.ndarray) or ds.qids.shape != (nq,) or ds.qids.dtype.kind != "U":
        raise SmoothrankError(f"Dataset: qids must be a str array of shape ({nq},)")
    if not isinstance(ds.doc_ids, np.ndarray) or ds.doc_ids.shape != (n,) or ds.doc_ids.dtype.kind != "U":
        raise SmoothrankError(f"Dataset: doc_ids must be a str array of shape ({n},)")
    lines = ds.line_numbers
    if not isinstance(lines, np.ndarray) or lines.dtype != np.int64 or lines.shape != (n,):
        raise SmoothrankError(f"Dataset: line_numbers must be an int64 array of shape ({n},)")
