"""LETOR 3.0's ``NULL`` feature values: filled with a number (with a note saying how many), or kept
as missing (NaN) for the boosters that handle missing values (LightGBM, XGBoost).

A :class:`~smoothrank.data.Dataset` holds finite features only. A file read with
``null_value="nan"`` is therefore a :class:`WithMissing`: the dataset read with NULL as 0.0, and
the positions of its NULLs, whose ``features`` have NaN there; the GBDT baselines take it where
they take a dataset. The positions are found by reading the file with two fill values (0 and 1):
the values that differ are the NULLs.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from smoothrank.data._io import gzip_errors, open_binary
from smoothrank.data.dataset import Dataset
from smoothrank.errors import ConfigError, SmoothrankWarning

#: ``null_value`` when none is given: a NULL is read as 0.0, the value of an absent sparse feature.
DEFAULT_NULL_VALUE = 0.0
#: The ``null_value`` that keeps NULLs missing (NaN).
KEEP_MISSING = "nan"


def check_null_value(value: Any, where: str) -> float | str | None:
    """``value`` as a fill number, :data:`KEEP_MISSING` (``"nan"``, any case, or a float NaN), or
    None (the default fill); anything else (inf, a bool, other text) is a ConfigError naming
    ``where``."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() == KEEP_MISSING:
        return KEEP_MISSING
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: expected a number (the fill value of NULL features) or 'nan' (keep them "
                          f"missing, for the GBDT baselines), got {value!r}")
    if math.isnan(value):
        return KEEP_MISSING
    if math.isinf(value):
        raise ConfigError(f"{where}: expected a finite fill value or 'nan', got {value!r}")
    return float(value)


_NULL_TOKEN = b":NULL"


def count_nulls(path: str | os.PathLike[str], *, chunk: int = 1 << 24) -> int:
    """The number of ``NULL`` feature values in a LETOR file (plain or gzip), read ``chunk`` bytes at
    a time (memory: a chunk, whatever the file's size)."""
    keep = len(_NULL_TOKEN) - 1  # a token split between two chunks is counted once, in the second
    count, tail = 0, b""
    with gzip_errors(path), open_binary(Path(path)) as handle:
        while block := handle.read(chunk):
            data = tail + block
            count += data.count(_NULL_TOKEN)
            tail = data[-keep:]
    return count


class WithMissing:
    """A dataset whose NULL features are missing: ``features`` is NaN at ``missing`` (a bool mask
    of the features' shape), every other attribute the filled ``dataset``'s."""

    def __init__(self, dataset: Dataset, missing: np.ndarray) -> None:
        self.dataset, self.missing = dataset, missing

    @property
    def features(self) -> np.ndarray:
        return np.where(self.missing, np.float32(np.nan), self.dataset.features)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.dataset, name)


def apply_null_value(path: str | os.PathLike[str], read: Any, null_value: float | str | None, where: str,
                     *, missing_ok: bool) -> Dataset | WithMissing:
    """Read ``path`` with ``read(null_value=...)`` (a ``load_letor`` with the other options bound)
    under the NULL policy ``null_value`` (checked by :func:`check_null_value`).

    A number (None: 0.0) fills the NULLs, and a :class:`SmoothrankWarning` says how many were
    filled, naming ``where`` and the file. ``"nan"`` keeps them missing: a :class:`WithMissing`
    where the file has NULLs and ``missing_ok`` (the GBDT baselines), a ConfigError naming
    ``where`` where it has them and not ``missing_ok`` (the neural models need a number).
    """
    nulls = count_nulls(path)
    if null_value != KEEP_MISSING:
        fill = DEFAULT_NULL_VALUE if null_value is None else float(null_value)
        dataset = read(null_value=fill)
        if nulls:
            warnings.warn(f"{where}: {nulls} NULL feature value(s) of {path} filled with {fill:g} "
                          "(null_value; 'nan' keeps them missing for the GBDT baselines)", SmoothrankWarning,
                          stacklevel=2)
        return dataset
    if not nulls:
        return read(null_value=DEFAULT_NULL_VALUE)
    if not missing_ok:
        raise ConfigError(f"{where}: {path} has {nulls} NULL feature value(s) and null_value is 'nan' (keep "
                          "them missing), which only the GBDT baselines take; the neural models need a fill "
                          "value: give null_value a number (e.g. 0)")
    zero, one = read(null_value=0.0), read(null_value=1.0)
    return WithMissing(zero, zero.features != one.features)
