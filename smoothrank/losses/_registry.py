"""The loss registry: names used by configs and the command line.

A registered loss is a function ``fn(scores, labels, *, mask=None, reduction="mean", **options)``;
its options are its other keyword-only parameters (with their defaults).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from smoothrank._checks import check_generator
from smoothrank.errors import ConfigError, SmoothrankError

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
    from smoothrank.gains import shallow_from_mapping

    try:
        return {**opts, "discount": shallow_from_mapping(form, argument="options.discount")}, True
    except SmoothrankError:
        raise  # shallow_discount's own, naming alpha or n
    except ValueError as err:
        raise ConfigError(str(err)) from None


def get(name: str, **opts: Any) -> LossFn:
    """Loss ``name`` with ``opts`` bound: ``callable(scores, labels, *, mask=None, reduction="mean")``.

    Unknown option names raise :class:`smoothrank.errors.ConfigError` naming them; option values
    are checked by the loss itself when called. Two config forms are read here (not by the loss
    functions themselves): ``discount={"shallow": ALPHA, "n": N}`` (:func:`resolve_config_forms`),
    and an int ``generator``, which becomes one generator for the life of the bound loss, so that
    successive calls draw different but reproducible noise (the function called with the same int
    seed draws the same noise on every call).
    """
    known = options(name)
    unknown = sorted(set(opts) - set(known))
    if unknown:
        raise ConfigError(f"loss {name!r}: unknown option(s) {', '.join(unknown)}; "
                          f"expected some of: {', '.join(known) or '(none)'}")
    opts, _ = resolve_config_forms(opts)
    if "generator" in opts and isinstance(opts["generator"], int) and not isinstance(opts["generator"], bool):
        # A seed from a config: one generator for the life of the bound loss, so successive
        # batches draw different (but reproducible) random numbers.
        opts["generator"] = check_generator(opts["generator"])

    return BoundLoss(name, opts)


class BoundLoss:
    """A registered loss with its options bound: what :func:`get` returns.

    ``bound(scores, labels, *, mask=None, reduction="mean")``; ``loss_name`` and ``options`` say
    what it is. It shows its own signature (the options are bound: passing one again is a
    ``TypeError``) and the loss's docstring. It pickles by name and options, so it can be sent to
    other processes (``torch.multiprocessing.spawn``, ``joblib``) whose registry holds the same
    name; a bound generator travels with its state.
    """

    def __init__(self, name: str, options: dict[str, Any]) -> None:
        # Options as get() resolved them (config forms read, an int generator made a Generator).
        fn = _lookup(name)
        self.loss_name, self.options, self._fn = name, dict(options), fn
        self.__name__, self.__qualname__ = fn.__name__, fn.__qualname__
        self.__doc__, self.__wrapped__ = fn.__doc__, fn
        call = inspect.signature(BoundLoss.__call__)
        self.__signature__ = call.replace(parameters=list(call.parameters.values())[1:])  # without self
        self.__annotations__ = dict(BoundLoss.__call__.__annotations__)

    def __call__(self, scores: Tensor, labels: Tensor, *, mask: Tensor | None = None,
                 reduction: str = "mean") -> Tensor:
        return self._fn(scores, labels, mask=mask, reduction=reduction, **self.options)

    def __reduce__(self) -> tuple[Any, ...]:
        return BoundLoss, (self.loss_name, self.options)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={'<torch.Generator>' if isinstance(v, torch.Generator) else repr(v)}"
                          for k, v in self.options.items())
        return f"losses.get({self.loss_name!r}{', ' if shown else ''}{shown})"


#: Losses whose informative queries are those with a positive ideal DCG (gains and discount as bound).
_NDCG_BASED = ("neural_ndcg", "neural_ndcg_transposed", "approx_ndcg", "soft_ndcg", "lambda_rank")
_PAIRWISE = ("rank_net", "lambda_rank")
_LABEL_BASED = ("list_net", "list_mle", "rmse", "rank_net")


def _name_and_options(loss: str | LossFn) -> tuple[str, dict[str, Any]]:
    if isinstance(loss, str):
        _lookup(loss)
        return loss, {}
    if hasattr(loss, "loss_name"):  # bound by get()
        return loss.loss_name, dict(getattr(loss, "options", {}))  # type: ignore[attr-defined]
    named = [name for name, fn in _LOSSES.items() if fn is loss]
    if not named:
        raise ConfigError("loss: expected a loss name, a registered loss or a loss bound by losses.get")
    return named[0], {}


def informative_queries(loss: str | LossFn, labels: Tensor, *, mask: Tensor | None = None,
                        dtype: torch.dtype = torch.float32) -> Tensor:
    """(batch,) bool: the queries that ``reduction="mean"`` of ``loss`` divides by.

    A query counts when it has a real item of positive gain (a positive label for ``list_net``,
    ``list_mle``, ``rmse`` and ``rank_net``; a positive ideal DCG under the bound ``gain``,
    ``discount`` and ``k`` for the NDCG-based losses) and, for ``rank_net`` and ``lambda_rank``, two
    real items of different labels. ``dtype`` is the scores' dtype, in which the losses read the
    labels (float32 for half-precision scores): two labels 1 apart beyond 2^24 are one label in
    float32. It depends on the labels only, so every process of a distributed job can count its
    queries before the forward pass. The exact global mean, under DistributedDataParallel (which
    averages the processes' gradients)::

        n = informative_queries(loss, labels, mask=mask, dtype=scores.dtype).sum()
        torch.distributed.all_reduce(n)  # in place: the count over every process
        value = loss(scores, labels, mask=mask, reduction="sum") * world_size / n.clamp_min(1)

    ``loss``: a built-in loss's name, its function, or the loss bound by :func:`get` (whose options
    are used).
    """
    from smoothrank.losses import _common as C

    name, bound = _name_and_options(loss)
    if name not in _NDCG_BASED + _LABEL_BASED:
        raise ConfigError(f"loss: informative_queries knows the built-in losses, not {name!r}")
    opts = {**options(name), **bound}
    if not isinstance(labels, Tensor) or labels.dim() not in (1, 2):
        shape = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ConfigError(f"labels: expected a tensor of shape (batch, list_size), got {shape}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ConfigError(f"dtype: expected a floating torch.dtype (the scores'), got {dtype!r}")
    # The losses' own input checks, on stand-in scores of the scores' dtype.
    stand_in = torch.zeros(labels.shape, dtype=dtype, device=labels.device)
    _, labels, mask = C.check_inputs(stand_in, labels, mask)
    if name in _NDCG_BASED:
        gains = C.real_gains(labels, mask, opts["gain"])
        discounts = C.rank_discounts(mask, opts["discount"], opts.get("k"), gains.dtype)
        valid = C.has_relevant(gains, mask) & (C.ideal_dcg(gains, mask, discounts) > 0)
    else:
        valid = C.has_relevant(labels, mask)
    if name in _PAIRWISE:
        highest = labels.masked_fill(~mask, float("-inf")).amax(-1)
        lowest = labels.masked_fill(~mask, float("inf")).amin(-1)
        valid = valid & (highest > lowest)
    return valid
