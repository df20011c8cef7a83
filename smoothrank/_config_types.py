"""Pydantic field types shared by the training config and the experiment spec (no torch import,
so that loading a spec stays light)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

#: Seeds are unsigned 64-bit integers (torch.manual_seed takes no more).
SEED_MAX = 2**64 - 1


def _no_bool(expected: str) -> BeforeValidator:
    """Refuse a boolean where a number is expected: bool is an int subclass, so YAML's true/false
    would pass as 1/0 (``epochs: true`` -> 1 epoch)."""
    def check(value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"expected {expected}, not a boolean")
        return value
    return BeforeValidator(check)


def in_seed_range(value: int) -> int:
    # A bound of its own: pydantic would print 2**64 - 1 rounded to a float.
    if not 0 <= value <= SEED_MAX:
        raise ValueError(f"expected an integer from 0 to 2**64 - 1 = {SEED_MAX}")
    return value


Int = Annotated[int, _no_bool("a number")]
#: Floats of a config: no booleans, no infinity or NaN.
Float = Annotated[float, _no_bool("a number"), Field(allow_inf_nan=False)]
Seed = Annotated[int, _no_bool("an integer"), AfterValidator(in_seed_range)]
#: A metric name as ``smoothrank.metrics.evaluate`` keys its results (``" NDCG@3"`` -> ``"ndcg@3"``),
#: so that the names a config lists are the keys it later looks up.
MetricName = Annotated[str, AfterValidator(lambda name: name.strip().lower())]
