"""Feature transforms, fitted on the training split only and saved with a model.

Each transform has ``fit(dataset) -> self``, ``transform(dataset) -> Dataset`` and a JSON-able
``state_dict()``; :func:`transform_from_state` rebuilds it. Column indices are 0-based
(column j holds LETOR feature j + 1 of a one-based file).

:func:`transformed` applies a fitted transform lazily instead: a :class:`TransformedDataset`
whose ``features[rows]`` are the transformed rows, computed when a batch gathers them, so that
training and scoring with a saved model (``smoothrank predict``) never hold a transformed copy of
a split. ``Compose.fit`` fits each step on such a view of the previous ones (one streaming pass per
statistic).
"""

from __future__ import annotations

import mmap
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from smoothrank.data import store
from smoothrank.data.dataset import Dataset, check_finite_features
from smoothrank.errors import SmoothrankError


class Transform:
    """Base class: stateless transforms need no fit."""

    def fit(self, dataset: Dataset | TransformedDataset) -> Transform:
        return self

    def transform(self, dataset: Dataset) -> Dataset:
        raise NotImplementedError

    def fit_transform(self, dataset: Dataset) -> Dataset:
        return self.fit(dataset).transform(dataset)

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError


# Rows per block of the float64 arithmetic: about 2^16 values (512 KiB), so a transform's memory
# is its float32 output plus a block, never a float64 copy of the split (PITFALLS 15).
_BLOCK_VALUES = 1 << 16


def _output(features: np.ndarray) -> np.ndarray:
    """A float32 array for the transform of ``features``: in memory, or, for memory-mapped features (a
    dataset store entry), a map of an unlinked temporary file (:func:`store.scratch_array`), so that
    transforming a split larger than memory makes no copy of it in the process's memory."""
    if _file_backed(features):
        return store.scratch_array(features.shape, np.float32)
    return np.empty(features.shape, dtype=np.float32)


def _file_backed(array: np.ndarray) -> bool:
    """Whether ``array`` is (a view of) a memory map of a file."""
    node: object = array  # then its bases: arrays, or the mmap.mmap or other buffer a view holds
    while node is not None:
        if isinstance(node, np.memmap) or isinstance(node, mmap.mmap):
            return True
        node = getattr(node, "base", None)
    return False


def _row_blocks(n_rows: int, n_cols: int) -> list[slice]:
    step = max(1, _BLOCK_VALUES // max(n_cols, 1))
    return [slice(i, min(i + step, n_rows)) for i in range(0, n_rows, step)]


def _column_sums(blocks: Any) -> np.ndarray:
    """Sum over rows of float64 blocks, in row order: the same additions, in the same order, as
    ``np.sum(all_rows, axis=0)``, whose axis-0 sum of a C-ordered array of two or more columns runs
    row after row (a single column, or Fortran order, NumPy sums pairwise: the last bit may differ)."""
    total: np.ndarray | None = None
    for block in blocks:
        total = block.sum(axis=0) if total is None else np.vstack([total[None], block]).sum(axis=0)
    assert total is not None
    return total


class Standardize(Transform):
    """x -> (x - mean) / std per feature, with mean and std of the training documents.

    A constant feature (std 0) is only centred (std taken as 1), so it maps to 0, not NaN.
    Statistics and the arithmetic are float64 (the result float32), computed block by block of rows:
    the same numbers as on a float64 copy of the split (for C-ordered features of two or more
    columns; see :func:`_column_sums`), without making one.
    """

    def __init__(self) -> None:
        self.mean: np.ndarray | None = None
        self.std: np.ndarray | None = None

    def fit(self, dataset: Dataset | TransformedDataset) -> Standardize:
        _check_finite_input(dataset, "Standardize.fit")  # an inf makes the mean inf, every value NaN
        x = dataset.features
        if x.shape[0] == 0:
            raise SmoothrankError(f"Standardize.fit: {dataset.source} has no documents")
        blocks = _row_blocks(*x.shape)
        mean = _column_sums(x[b].astype(np.float64) for b in blocks) / x.shape[0]
        variance = _column_sums((x[b].astype(np.float64) - mean) ** 2 for b in blocks) / x.shape[0]
        std = np.sqrt(variance)
        self.mean, self.std = mean, np.where(std > 0, std, 1.0)
        return self

    def transform(self, dataset: Dataset) -> Dataset:
        if self.mean is None or self.std is None:
            raise SmoothrankError("Standardize: call fit(train_dataset) before transform")
        _check_width(dataset, self.mean.shape[0], "Standardize")
        check_finite_features(dataset, "Standardize")  # else reported as standardised beyond float32
        x = dataset.features
        out = _output(x)
        for rows in _row_blocks(*x.shape):
            out[rows] = self.apply_rows(x[rows], dataset, np.arange(rows.start, rows.stop))
        return dataset.with_features(out)

    def apply_rows(self, x: np.ndarray, dataset: Dataset, rows: np.ndarray) -> np.ndarray:
        """The transform of ``x`` (float32 (n, F)), the features of ``dataset``'s rows ``rows``
        (int64 (n,); they name the line of a value standardised beyond float32)."""
        assert self.mean is not None and self.std is not None
        z = (x.astype(np.float64) - self.mean) / self.std
        with np.errstate(over="ignore"):
            out = z.astype(np.float32)
        if not np.isfinite(out).all():
            row, col = (int(i) for i in np.argwhere(~np.isfinite(out))[0])
            line, value = int(dataset.line_numbers[rows[row]]), x[row, col]
            raise SmoothrankError(
                f"{dataset.source}:{line}: column {col} ({value:g}) standardises to {z[row, col]:.3g}, "
                f"beyond float32 (training mean {self.mean[col]:.3g}, std {self.std[col]:.3g}); a "
                "signed_log1p transform before standardize tames such values")
        return out

    def state_dict(self) -> dict[str, Any]:
        if self.mean is None or self.std is None:
            raise SmoothrankError("Standardize: not fitted")
        return {"type": "Standardize", "mean": self.mean.tolist(), "std": self.std.tolist()}


class SignedLog1p(Transform):
    """x -> sign(x) * log(1 + |x|) on the chosen columns (all when ``features`` is None).

    The NeuralNDCG protocol (Pobrotyn & Bialobrzeski 2021) log-transforms selected MSLR
    features before standardisation; the signed form is defined for negative values too.
    """

    def __init__(self, features: Sequence[int] | None = None) -> None:
        if features is not None:
            if isinstance(features, str | bytes):  # "12" is not the columns [1, 2]
                raise TypeError(f"SignedLog1p: features: expected column indices, got {features!r}")
            features = [operator.index(j) for j in features]  # 1.7 is no column either
            if any(j < 0 for j in features):
                raise SmoothrankError("SignedLog1p: features: expected 0-based column indices, "
                                      f"got {features}")
        self.features = features

    def transform(self, dataset: Dataset) -> Dataset:
        check_finite_features(dataset, "SignedLog1p")
        if self.features is not None and self.features and max(self.features) >= dataset.n_features:
            raise SmoothrankError(f"SignedLog1p: features: column {max(self.features)} is out of range for "
                                  f"{dataset.n_features} features")
        out = _output(dataset.features)
        for rows in _row_blocks(*dataset.features.shape):  # float32 arithmetic, as on the whole array
            out[rows] = self.apply_rows(dataset.features[rows], dataset, np.arange(rows.start, rows.stop))
        return dataset.with_features(out)

    def apply_rows(self, x: np.ndarray, dataset: Dataset, rows: np.ndarray) -> np.ndarray:
        """The transform of ``x`` (float32 (n, F)), the features of ``dataset``'s rows ``rows``."""
        cols = slice(None) if self.features is None else self.features
        x = np.array(x, dtype=np.float32)
        x[:, cols] = np.sign(x[:, cols]) * np.log1p(np.abs(x[:, cols]))
        return x

    def state_dict(self) -> dict[str, Any]:
        return {"type": "SignedLog1p", "features": self.features}


class QueryMinMax(Transform):
    """Per-query min-max normalisation (LETOR's QueryLevelNorm): x -> (x - min_q) / (max_q - min_q).

    A feature constant within a query maps to 0 there.
    """

    def transform(self, dataset: Dataset) -> Dataset:
        check_finite_features(dataset, "QueryMinMax")  # an inf makes the span inf: its query all NaN
        x = dataset.features
        if x.shape[0] == 0:
            return dataset.with_features(x.copy())
        starts = dataset.offsets[:-1]
        # Extremes are exact in float32; the span of two float32 values can overflow it, so the
        # arithmetic is float64 (scale_rows), a block of rows at a time (no float64 copy of the split).
        lo, hi = np.minimum.reduceat(x, starts, axis=0), np.maximum.reduceat(x, starts, axis=0)
        q = dataset.query_of_row()
        out = _output(x)
        for rows in _row_blocks(*x.shape):
            out[rows] = self.scale_rows(x[rows], lo[q[rows]], hi[q[rows]])
        return dataset.with_features(out)

    @staticmethod
    def scale_rows(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """``(x - lo) / (hi - lo)`` in float64 (a span of 0 taken as 1), as float32: ``x`` float32
        (n, F), ``lo`` and ``hi`` the float32 extremes of each row's query (n, F)."""
        lo64 = lo.astype(np.float64)
        span = hi.astype(np.float64) - lo64
        return ((x.astype(np.float64) - lo64) / np.where(span > 0, span, 1.0)).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"type": "QueryMinMax"}


class Compose(Transform):
    """Apply transforms in order; ``fit`` fits each on the output of the previous ones."""

    def __init__(self, transforms: Sequence[Transform]) -> None:
        self.transforms = list(transforms)

    def fit(self, dataset: Dataset | TransformedDataset) -> Compose:
        """Fit each step on the output of the previous ones, read through a :class:`TransformedDataset`
        (no transformed copy of ``dataset``)."""
        if self.transforms:  # the views below read finite features only (each step checks its input)
            first = self.transforms[0]
            _check_finite_input(dataset, "Standardize.fit" if isinstance(first, Standardize)
                                else type(first).__name__)
        if not _batchable(self):  # a transform of one's own: fitted on the output of transform()
            for t in self.transforms:
                dataset = t.fit(dataset).transform(dataset)  # type: ignore[arg-type]
            return self
        for i, t in enumerate(self.transforms):
            t.fit(TransformedDataset(dataset, Compose(self.transforms[:i]), checked=True) if i else dataset)
        return self

    def transform(self, dataset: Dataset) -> Dataset:
        for t in self.transforms:
            dataset = t.transform(dataset)
        return dataset

    def state_dict(self) -> dict[str, Any]:
        return {"type": "Compose", "transforms": [t.state_dict() for t in self.transforms]}


def _check_width(dataset: Dataset | TransformedDataset, width: int, name: str) -> None:
    if dataset.n_features != width:
        raise SmoothrankError(f"{name}: fitted on {width} features, the dataset has {dataset.n_features}")


def _standardize_state(state: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``mean`` and ``std`` of a saved state, checked: a NaN or 0 there makes every feature NaN/inf."""
    try:
        mean = np.asarray(state["mean"], dtype=np.float64)
        std = np.asarray(state["std"], dtype=np.float64)
    except (KeyError, TypeError, ValueError) as err:
        raise SmoothrankError(f"transform_from_state: Standardize needs numeric 'mean' and 'std' ({err})") \
            from None
    if mean.ndim != 1 or mean.shape != std.shape or not np.all(np.isfinite(mean)) \
            or not np.all(np.isfinite(std)) or np.any(std <= 0):
        raise SmoothrankError("transform_from_state: Standardize needs 'mean' and 'std' of one finite "
                              "number per feature, std > 0")
    return mean, std


def transform_from_state(state: dict[str, Any]) -> Transform:
    """Rebuild a transform from its :meth:`state_dict`."""
    kind = state.get("type") if isinstance(state, dict) else None
    if kind == "Standardize":
        t = Standardize()
        t.mean, t.std = _standardize_state(state)
        return t
    if kind == "SignedLog1p":
        try:
            return SignedLog1p(state.get("features"))
        except (TypeError, ValueError) as err:  # columns that are not integers
            raise SmoothrankError(f"transform_from_state: SignedLog1p needs integer 'features' ({err})") \
                from None
    if kind == "QueryMinMax":
        return QueryMinMax()
    if kind == "Compose":
        parts = state.get("transforms")
        if not isinstance(parts, list):
            raise SmoothrankError(f"transform_from_state: Compose needs a list of 'transforms', got "
                                  f"{type(parts).__name__}")
        return Compose([transform_from_state(s) for s in parts])
    raise SmoothrankError(f"transform_from_state: unknown transform state {state!r:.80}")


# --- transforms applied per batch ----------------------------------------------------------------

def _batchable(transform: Transform) -> bool:
    """Whether ``transform`` is made of the built-in transforms, which :func:`transformed` applies."""
    if isinstance(transform, Compose):
        return all(_batchable(t) for t in transform.transforms)
    return isinstance(transform, Standardize | SignedLog1p | QueryMinMax)


def _steps(transform: Transform | None) -> list[Transform]:
    """The steps of ``transform`` in order (nested Compose flattened; None: none)."""
    if transform is None:
        return []
    if isinstance(transform, Compose):
        return [step for t in transform.transforms for step in _steps(t)]
    if not isinstance(transform, Standardize | SignedLog1p | QueryMinMax):
        raise SmoothrankError(f"transformed: {type(transform).__name__} cannot be applied a batch at a time "
                              "(Standardize, SignedLog1p, QueryMinMax or a Compose of them)")
    if isinstance(transform, Standardize) and (transform.mean is None or transform.std is None):
        raise SmoothrankError("Standardize: call fit(train_dataset) before transform")
    return [transform]


def _apply_steps(steps: Sequence[Transform], dataset: Any, rows: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``steps`` applied to ``x`` (float32 (n, F)), the raw features of ``dataset``'s rows ``rows``."""
    for i, step in enumerate(steps):
        if isinstance(step, QueryMinMax):
            lo, hi = _query_extremes(steps[:i], dataset, rows)
            x = step.scale_rows(x, lo, hi)
        else:
            assert isinstance(step, Standardize | SignedLog1p)
            x = step.apply_rows(x, dataset, rows)
    return x


def _query_extremes(steps: Sequence[Transform], dataset: Any, rows: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``rows``: the float32 minimum and maximum (n, F) over its whole query of the features
    after ``steps``, computed from the query's rows (a training slate may hold only some of them)."""
    if rows.shape[0] == 0:
        empty = np.zeros((0, dataset.n_features), dtype=np.float32)
        return empty, empty
    offsets = dataset.offsets
    query = np.searchsorted(offsets, rows, side="right") - 1
    queries, where = np.unique(query, return_inverse=True)
    starts, stops = offsets[queries], offsets[queries + 1]
    full = np.concatenate([np.arange(a, b) for a, b in zip(starts.tolist(), stops.tolist(), strict=True)])
    x = _apply_steps(steps, dataset, full, np.asarray(dataset.features[full], dtype=np.float32))
    local = np.r_[0, np.cumsum(stops - starts)[:-1]]
    lo, hi = np.minimum.reduceat(x, local, axis=0), np.maximum.reduceat(x, local, axis=0)
    return lo[where], hi[where]


class TransformedFeatures:
    """The features of a :class:`TransformedDataset`: ``features[rows]`` (a slice or 1-D integer
    array of rows) gathers those rows of the source features and transforms them (float32 (n, F)).
    Nothing is stored: every read computes its rows again."""

    dtype = np.dtype(np.float32)
    ndim = 2

    def __init__(self, dataset: Dataset | TransformedDataset, steps: Sequence[Transform]) -> None:
        self._dataset, self._steps = dataset, list(steps)

    @property
    def shape(self) -> tuple[int, int]:
        rows, cols = self._dataset.features.shape
        return rows, cols

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: Any) -> np.ndarray:
        n, width = self.shape
        if isinstance(index, slice):
            rows = np.arange(*index.indices(n), dtype=np.int64)
        else:
            rows = np.asarray(index)
            if rows.ndim != 1 or rows.dtype.kind not in "iu":
                raise SmoothrankError("TransformedFeatures: index with a slice or a 1-D array of row "
                                      f"indices, got {index!r:.80}")
            rows = np.where(rows < 0, rows + n, rows).astype(np.int64)
        out = np.empty((rows.shape[0], width), dtype=np.float32)
        source = self._dataset.features
        contiguous = isinstance(index, slice) and index.indices(n)[2] == 1
        # A block of rows at a time: the float64 arithmetic's temporaries are a block's, not the batch's.
        for block in _row_blocks(rows.shape[0], width):
            part = rows[block]
            raw = source[int(part[0]):int(part[-1]) + 1] if contiguous else source[part]
            out[block] = _apply_steps(self._steps, self._dataset, part, np.asarray(raw, dtype=np.float32))
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """Every row transformed (a copy of the split: for small data and inspection)."""
        out = np.concatenate([self[rows] for rows in _row_blocks(*self.shape)] or
                             [np.zeros((0, self.shape[1]), np.float32)])
        return out if dtype is None else out.astype(dtype)


class TransformedDataset:
    """A dataset whose features are those of ``dataset`` under a fitted ``transform``, computed when
    read (:class:`TransformedFeatures`): batches gather and transform only their rows.

    Every other attribute (``labels``, ``qids``, ``offsets``, ``line_numbers``, ``n_docs``, ...) is
    ``dataset``'s; :meth:`subset` keeps the transform. Made by :func:`transformed`.
    """

    def __init__(self, dataset: Dataset | TransformedDataset, transform: Transform | None, *,
                 checked: bool = False) -> None:
        if not checked:
            _check_finite_input(dataset, "transformed")
        steps = _steps(transform)
        for step in steps:  # else an IndexError or a broadcast error at the first batch
            if isinstance(step, Standardize):
                assert step.mean is not None
                _check_width(dataset, step.mean.shape[0], "Standardize")
            elif isinstance(step, SignedLog1p) and step.features and max(step.features) >= dataset.n_features:
                raise SmoothrankError(f"SignedLog1p: features: column {max(step.features)} is out of range "
                                      f"for {dataset.n_features} features")
        self.dataset = dataset
        self.transform = transform
        self.features = TransformedFeatures(dataset, steps)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def subset(self, queries: Sequence[int] | np.ndarray) -> TransformedDataset:
        """The queries ``queries`` (as :meth:`Dataset.subset`), transformed alike."""
        return TransformedDataset(self.dataset.subset(queries), self.transform, checked=True)

    def check(self) -> TransformedDataset:
        """Transform every row once, a block at a time, keeping nothing: the errors a transform
        raises (a value standardised beyond float32, naming its line) come here, in row order,
        not from a batch later. Returns ``self``."""
        for rows in _row_blocks(*self.features.shape):
            self.features[rows]
        return self

    def __repr__(self) -> str:
        return f"TransformedDataset({self.dataset!r})"


def transformed(transform: Transform | None, dataset: Dataset, *, check: bool = True) -> TransformedDataset:
    """``dataset`` under the fitted ``transform``, applied to the rows a batch reads.

    Parameters
    ----------
    transform : Transform or None
        A fitted :class:`Standardize`, :class:`SignedLog1p`, :class:`QueryMinMax` or a
        :class:`Compose` of them (None: the features as they are).
    dataset : Dataset
        Features (n_docs, n_features), in memory or memory-mapped.
    check : bool
        Transform every row once first, a block at a time, keeping nothing
        (:meth:`TransformedDataset.check`), so that a value the transform refuses is reported now.

    Returns
    -------
    TransformedDataset
        ``features[rows]`` is float32 (len(rows), n_features): the values of
        ``transform.transform(dataset).features[rows]``, bit for bit, with no transformed copy made.
    """
    view = TransformedDataset(dataset, transform)
    return view.check() if check else view


def _check_finite_input(dataset: Dataset | TransformedDataset, what: str) -> None:
    """A Dataset's features checked for NaN/inf; a view's source was checked when it was made, and
    the transforms make no NaN/inf of finite values (a Standardize overflow is refused by name)."""
    if not isinstance(dataset, TransformedDataset):
        check_finite_features(dataset, what)
