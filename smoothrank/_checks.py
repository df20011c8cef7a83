"""Argument checks shared by the functional core (sorting, losses, SoftRank).

Each returns the normalised value or raises :class:`~smoothrank.errors.SmoothrankError` naming
the argument, whatever the bad value is (None, a string, NaN, inf): never a TypeError or
OverflowError from deep inside.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from smoothrank.errors import SmoothrankError


def check_bool(value: Any, name: str) -> bool:
    """``value`` as a plain bool (a NumPy bool from a comparison too); anything else, 0/1 or a truthy
    ``"no"`` included, is refused by name."""
    if not isinstance(value, bool | np.bool_):
        raise SmoothrankError(f"{name}: expected True or False, got {value!r}")
    return bool(value)


def _as_float(value: Any, name: str, expected: str) -> float:
    if isinstance(value, bool | str | bytes):  # float("3") would pass a string from a config
        raise SmoothrankError(f"{name}: {expected}, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SmoothrankError(f"{name}: {expected}, got {value!r}") from None


def check_positive(value: Any, name: str) -> float:
    """A finite number > 0 (temperatures, sigmas, scales)."""
    v = _as_float(value, name, "must be a positive number")
    if not (v > 0 and math.isfinite(v)):
        raise SmoothrankError(f"{name}: must be a positive finite number, got {value!r}")
    return v


def within_dtype(scale: float, dtype: torch.dtype, *, divides: bool) -> float:
    """A checked scale option (> 0, finite) held inside the normal range of ``dtype``.

    A temperature or smoothing width that *divides* score gaps is raised to the dtype's smallest
    normal number (1.2e-38 in float32); a sharpness that *multiplies* them is lowered to that
    number's inverse (2^126 = 8.5e37). Beyond these bounds ``1 / scale`` or ``scale * gap`` is inf
    or 0 in the dtype, and ``0 * inf`` at tied or padded pairs is NaN. The relaxations have long
    reached their hard limit there for every gap the dtype holds as a normal number, so the
    bounds change no result a finite computation could give. Half-precision dtypes use float32's
    bounds (the losses compute in float32).
    """
    if dtype in (torch.float16, torch.bfloat16):
        dtype = torch.float32
    tiny = torch.finfo(dtype).tiny
    return max(scale, tiny) if divides else min(scale, 1.0 / tiny)


def check_nonnegative(value: Any, name: str) -> float:
    """A finite number >= 0 (tolerances)."""
    v = _as_float(value, name, "must be a number >= 0")
    if not (v >= 0 and math.isfinite(v)):
        raise SmoothrankError(f"{name}: must be a finite number >= 0, got {value!r}")
    return v


def check_positive_int(value: Any, name: str) -> int:
    """An integer >= 1 (3.0 is accepted as 3; True, 2.5, NaN and inf are not)."""
    v = _as_float(value, name, "must be a positive integer")
    if not (math.isfinite(v) and v == int(v) and v >= 1):
        raise SmoothrankError(f"{name}: must be a positive integer, got {value!r}")
    return int(v)


def check_int_count(value: Any, name: str, *, error: type[SmoothrankError] = SmoothrankError) -> int:
    """An integer >= 1 given as a Python or NumPy int (no floats, no bools): a count read from a config."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise error(f"{name}: expected a positive integer, got {value!r}")
    return int(value)


# A cutoff beyond every list means the whole list; capped so that torch can hold it (int64).
K_LIMIT = 2**62

#: The reductions of the losses and metrics: per query, their sum, their mean.
REDUCTIONS = ("mean", "sum", "none")


def check_k(k: Any, *, argument: str = "k") -> int | None:
    """A cutoff: a positive integer (3.0 is 3), or None for the whole list; capped at :data:`K_LIMIT`.

    Raises
    ------
    SmoothrankError
        Naming ``argument`` for anything else (a bool, 2.5, NaN, inf, a string, 0).
    """
    if k is None:
        return None
    if isinstance(k, float | np.floating) and float(k).is_integer():
        k = int(k)
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise SmoothrankError(f"{argument}: expected a positive integer or None, got {k!r}")
    return min(int(k), K_LIMIT)  # exact for any int (float() would round or overflow a huge one)


def check_choice(value: Any, choices: tuple[str, ...], argument: str, *,
                 error: type[SmoothrankError] = SmoothrankError) -> str:
    """``value`` if it is one of the strings ``choices``; else ``error`` naming ``argument``."""
    if not isinstance(value, str) or value not in choices:
        raise error(f"{argument}: expected one of {choices}, got {value!r}")
    return value


def check_reduction(reduction: Any) -> str:
    """One of :data:`REDUCTIONS`."""
    return check_choice(reduction, REDUCTIONS, "reduction")


def check_mask(mask: Any, scores: torch.Tensor, *, name: str = "scores") -> torch.Tensor:
    """The boolean mask (True = real item) on the scores' device; all True when ``mask`` is None."""
    if mask is None:
        return torch.ones_like(scores, dtype=torch.bool)
    if isinstance(mask, np.ndarray) and mask.dtype == np.bool_:  # as the metrics take it
        mask = torch.from_numpy(np.ascontiguousarray(mask))
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise SmoothrankError("mask: expected a boolean torch.Tensor or numpy array (True = real item)")
    if mask.shape != scores.shape:
        raise SmoothrankError(f"mask: shape {tuple(mask.shape)} differs from {name} {tuple(scores.shape)}")
    return mask.to(scores.device)


def check_scores_mask(scores: Any, mask: Any, *, name: str = "scores") -> torch.Tensor:
    """The boolean mask of ``scores`` (all True when None) after checking that ``scores`` is a floating
    (batch, list_size) tensor, finite at its real positions; errors name ``name``."""
    if not isinstance(scores, torch.Tensor):
        raise SmoothrankError(f"{name}: expected a torch.Tensor, got {type(scores).__name__}")
    if scores.dim() != 2:
        raise SmoothrankError(f"{name}: expected shape (batch, list_size), got {tuple(scores.shape)}")
    if not scores.is_floating_point():
        raise SmoothrankError(f"{name}: expected a floating dtype, got {scores.dtype}")
    mask = check_mask(mask, scores, name=name)
    if not bool(torch.isfinite(scores.detach()[mask]).all()):
        raise SmoothrankError(f"{name}: NaN or infinite value at a real (unmasked) position")
    return mask


def check_generator(generator: Any) -> torch.Generator | None:
    """A ``torch.Generator``, None, or an int seed (a fresh CPU generator seeded with it)."""
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, int | np.integer) and not isinstance(generator, bool):
        if not -(2**63) <= int(generator) < 2**64:  # what torch.Generator.manual_seed takes
            raise SmoothrankError(f"generator: an int seed must lie in [-2^63, 2^64), got {generator}")
        return torch.Generator().manual_seed(int(generator))
    raise SmoothrankError(f"generator: expected a torch.Generator, an int seed or None, got {generator!r}")
