"""The loss registry: names used by configs and the command line.

A registered loss is a function ``fn(scores, labels, *, mask=None, reduction="mean", **options)``;
its options are its other keyword-only parameters (with their defaults).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from torch import Tensor

from smoothrank.errors import ConfigError

#: A loss: ``fn(scores, labels, *, mask=None, reduction="mean", **options) -> Tensor``.
LossFn = Callable[..., Tensor]

_LOSSES: dict[str, LossFn] = {}
_NOT_OPTIONS = ("mask", "reduction")


def register(name: str, fn: LossFn) -> LossFn:
    """Register ``fn`` under ``name`` (re-registering the same function is allowed); returns fn."""
    if not isinstance(name, str) or not name:
        raise ValueError("register: name must be a non-empty string")
    if name in _LOSSES and _LOSSES[name] is not fn:
        raise ValueError(f"register: a different loss is already registered as {name!r}")
    params = inspect.signature(fn).parameters
    for required in ("mask", "reduction"):
        if required not in params or params[required].kind is not inspect.Parameter.KEYWORD_ONLY:
            raise ValueError(f"register: {name!r} must take keyword-only {required!r}")
    _LOSSES[name] = fn
    return fn


def available() -> list[str]:
    """Names of the registered losses, sorted."""
    return sorted(_LOSSES)


def _lookup(name: str) -> LossFn:
    if name not in _LOSSES:
        raise ConfigError(f"loss: unknown loss {name!r}; available: {', '.join(available())}")
    return _LOSSES[name]


def options(name: str) -> dict[str, Any]:
    """The options of loss ``name`` and their defaults (keyword-only parameters but mask, reduction)."""
    fn = _lookup(name)
    return {p.name: p.default for p in inspect.signature(fn).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in _NOT_OPTIONS}


def resolve_config_forms(opts: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Option forms a YAML/TOML config can hold, turned into objects; returns ``(opts, changed)``.

    ``discount: {shallow: ALPHA, n: N}`` becomes :func:`smoothrank.softrank.shallow_discount`
    ``(ALPHA, N)``, the shallower training discounts of SoftRank section 4.7 (a config file cannot
    hold a callable). Training configs, experiment specs and :func:`get` all accept it.
    """
    form = opts.get("discount")
    if not isinstance(form, dict):
        return opts, False
    if set(form) != {"shallow", "n"}:
        raise ConfigError(f"options.discount: expected a name or {{shallow: ALPHA, n: N}}, got {form!r}")
    from smoothrank.softrank import shallow_discount

    return {**opts, "discount": shallow_discount(form["shallow"], form["n"])}, True


def get(name: str, **opts: Any) -> LossFn:
    """Loss ``name`` with ``opts`` bound: ``callable(scores, labels, *, mask=None, reduction="mean")``.

    Unknown option names raise :class:`smoothrank.errors.ConfigError` naming them; option values
    are checked by the loss itself when called.
    """
    fn = _lookup(name)
    known = options(name)
    unknown = sorted(set(opts) - set(known))
    if unknown:
        raise ConfigError(f"loss {name!r}: unknown option(s) {', '.join(unknown)}; "
                          f"expected some of: {', '.join(known) or '(none)'}")
    opts, _ = resolve_config_forms(opts)
    if "generator" in opts and isinstance(opts["generator"], int) and not isinstance(opts["generator"], bool):
        # A seed from a config: one generator for the life of the bound loss, so successive
        # batches draw different (but reproducible) random numbers.
        import torch

        opts["generator"] = torch.Generator().manual_seed(opts["generator"])

    @functools.wraps(fn)
    def bound(scores: Any, labels: Any, *, mask: Any = None, reduction: str = "mean") -> Any:
        return fn(scores, labels, mask=mask, reduction=reduction, **opts)

    bound.loss_name = name  # type: ignore[attr-defined]
    bound.options = dict(opts)  # type: ignore[attr-defined]
    return bound
