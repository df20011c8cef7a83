"""The options of the LETOR readers, as one value (part of what a dataset store entry records)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from smoothrank._checks import check_bool
from smoothrank.errors import SmoothrankError


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
