"""What the training configuration and the experiment specification share: their pydantic base, the
short form of a list of named items, and one way of reporting every problem of a document at once.

No torch import, so that loading a spec stays light (see also :mod:`smoothrank._config_types`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from smoothrank.errors import ConfigError

__all__ = ["NamedItems", "StrictModel", "named_items", "problems_error", "validation_problems"]


class StrictModel(BaseModel):
    """A section of a document: unknown keys are errors (a typo is not a silently ignored option), and
    the validated value is immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def named_items(value: Any) -> Any:
    """The short form of a list of named items: each bare string ``s`` of a list as ``{"name": s}``
    (``[standardize]`` for ``[{name: standardize}]``); anything else unchanged (the schema reports it)."""
    if isinstance(value, list):
        return [{"name": item} if isinstance(item, str) else item for item in value]
    return value


#: A list field that takes the short form of :func:`named_items`:
#: ``Annotated[list[Item], NamedItems]``.
NamedItems = BeforeValidator(named_items)

_MESSAGES = {"extra_forbidden": "unknown key", "missing": "required key missing"}


def validation_problems(err: ValidationError, *, show_input: bool = False,
                        tagged_unions: Mapping[str, Collection[str]] | None = None) -> list[str]:
    """One ``key.path: message`` line per error of ``err``.

    The path is dotted (``(top level)`` when empty), without pydantic's validator steps; under a field
    of ``tagged_unions`` (field name -> its tags) the tag pydantic adds to the path of a discriminated
    union is left out (``model.mlp.hidden`` -> ``model.hidden``). Messages are the validators' own
    (without pydantic's ``Value error,``), ``unknown key`` and ``required key missing``; with
    ``show_input`` a message about a value (not a mapping) ends with ``(got VALUE)``.
    """
    tags = tagged_unions or {}
    lines = []
    for item in err.errors():
        parts = [str(part) for part in item["loc"] if not str(part).startswith("function-after")]
        parts = [part for i, part in enumerate(parts) if not (i and part in tags.get(parts[i - 1], ()))]
        message = _MESSAGES.get(item["type"], item["msg"]).removeprefix("Value error, ")
        if show_input and item["type"] not in _MESSAGES and not isinstance(item.get("input"), dict):
            message += f" (got {item['input']!r})"
        lines.append(f"{'.'.join(parts) or '(top level)'}: {message}")
    return lines


def problems_error(source: str, document: str, problems: list[str]) -> ConfigError:
    """The one error that lists every problem of a document: ``SOURCE: N problem(s) in the DOCUMENT:``
    and a ``  - problem`` line each."""
    return ConfigError(f"{source}: {len(problems)} problem(s) in the {document}:\n"
                       + "\n".join(f"  - {problem}" for problem in problems))
