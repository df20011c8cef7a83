"""Feature transforms, fitted on the training split only and saved with a model.

Each transform has ``fit(dataset) -> self``, ``transform(dataset) -> Dataset`` and a JSON-able
``state_dict()``; :func:`transform_from_state` rebuilds it. Column indices are 0-based
(column j holds LETOR feature j + 1 of a one-based file).
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

    def fit(self, dataset: Dataset) -> Transform:
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

    def fit(self, dataset: Dataset) -> Standardize:
        check_finite_features(dataset, "Standardize.fit")  # an inf makes the mean inf, every value NaN
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
            z = (x[rows].astype(np.float64) - self.mean) / self.std
            with np.errstate(over="ignore"):
                out[rows] = z
            if not np.isfinite(out[rows]).all():
                row, col = (int(i) for i in np.argwhere(~np.isfinite(out[rows]))[0])
                line, value = int(dataset.line_numbers[rows.start + row]), x[rows.start + row, col]
                raise SmoothrankError(
                    f"{dataset.source}:{line}: column {col} ({value:g}) standardises to {z[row, col]:.3g}, "
                    f"beyond float32 (training mean {self.mean[col]:.3g}, std {self.std[col]:.3g}); a "
                    "signed_log1p transform before standardize tames such values")
        return dataset.with_features(out)

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
        cols = slice(None) if self.features is None else self.features
        if self.features is not None and self.features and max(self.features) >= dataset.n_features:
            raise SmoothrankError(f"SignedLog1p: features: column {max(self.features)} is out of range for "
                                  f"{dataset.n_features} features")
        out = _output(dataset.features)
        for rows in _row_blocks(*dataset.features.shape):  # float32 arithmetic, as on the whole array
            x = np.array(dataset.features[rows])
            x[:, cols] = np.sign(x[:, cols]) * np.log1p(np.abs(x[:, cols]))
            out[rows] = x
        return dataset.with_features(out)

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
        # arithmetic is float64, a block of rows at a time (no float64 copy of the split).
        lo = np.minimum.reduceat(x, starts, axis=0).astype(np.float64)
        span = np.maximum.reduceat(x, starts, axis=0).astype(np.float64) - lo
        scale = np.where(span > 0, span, 1.0)
        q = dataset.query_of_row()
        out = _output(x)
        for rows in _row_blocks(*x.shape):
            out[rows] = (x[rows].astype(np.float64) - lo[q[rows]]) / scale[q[rows]]
        return dataset.with_features(out)

    def state_dict(self) -> dict[str, Any]:
        return {"type": "QueryMinMax"}


class Compose(Transform):
    """Apply transforms in order; ``fit`` fits each on the output of the previous ones."""

    def __init__(self, transforms: Sequence[Transform]) -> None:
        self.transforms = list(transforms)

    def fit(self, dataset: Dataset) -> Compose:
        for t in self.transforms:
            dataset = t.fit(dataset).transform(dataset)
        return self

    def transform(self, dataset: Dataset) -> Dataset:
        for t in self.transforms:
            dataset = t.transform(dataset)
        return dataset

    def state_dict(self) -> dict[str, Any]:
        return {"type": "Compose", "transforms": [t.state_dict() for t in self.transforms]}


def _check_width(dataset: Dataset, width: int, name: str) -> None:
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
