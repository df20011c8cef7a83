"""Pydantic field types shared by the training config and the experiment spec (no torch import,
so that loading a spec stays light)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, Strict

#: Seeds are unsigned 32-bit integers: torch.manual_seed takes 64 bits, but its CPU generator keeps the
#: low 32, so seed 2**32 would initialise a model exactly as seed 0 does.
SEED_MAX = 2**32 - 1


def _no_bool(expected: str) -> BeforeValidator:
    """Refuse a boolean or a string where a number is expected: bool is an int subclass, so YAML's
    true/false would pass as 1/0 (``epochs: true`` -> 1 epoch), and pydantic's lax mode would read a
    quoted ``"0.01"`` as a number (the docs say a wrong type is an error)."""
    def check(value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"expected {expected}, not a boolean")
        if isinstance(value, str | bytes):
            raise ValueError(f"expected {expected}, not a string")  # the error shows the value
        return value
    return BeforeValidator(check)


def in_seed_range(value: int) -> int:
    # A bound of its own, with its reason.
    if not 0 <= value <= SEED_MAX:
        raise ValueError(f"expected an integer from 0 to 2**32 - 1 = {SEED_MAX} (torch's CPU generator "
                         "keeps 32 bits of a seed: 2**32 would initialise as 0)")
    return value


Int = Annotated[int, _no_bool("a number")]
#: Floats of a config: no booleans, no infinity or NaN.
Float = Annotated[float, _no_bool("a number"), Field(allow_inf_nan=False)]
Seed = Annotated[int, _no_bool("an integer"), AfterValidator(in_seed_range)]
#: A yes/no option: only YAML's true/false (pydantic's lax mode would also take 0/1, "off", "no").
Bool = Annotated[bool, Strict()]
#: A metric name as ``smoothrank.metrics.evaluate`` keys its results (``" NDCG@3"`` -> ``"ndcg@3"``),
#: so that the names a config lists are the keys it later looks up.
MetricName = Annotated[str, AfterValidator(lambda name: name.strip().lower())]
