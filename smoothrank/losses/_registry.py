"""The loss registry: names used by configs and the command line, with what the package needs to
know about each loss.

A registered loss is a function ``fn(scores, labels, *, mask=None, reduction="mean", **options)``;
its options are its other keyword-only parameters (with their defaults). Its :class:`LossInfo`
says which queries it counts (:func:`informative_queries`), whether a closed-form Hessian diagonal
exists (:mod:`smoothrank.boosting`), and what kind of loss it is (the ``smoothrank losses`` listing).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from smoothrank._checks import check_choice, check_generator
from smoothrank.errors import ConfigError
from smoothrank.gains import shallow_from_mapping
from smoothrank.losses import _common as C

#: A loss: ``fn(scores, labels, *, mask=None, reduction="mean", **options) -> Tensor``.
LossFn = Callable[..., Tensor]

#: The kinds of loss :func:`register` takes (``family=``).
FAMILIES = ("ndcg", "pairwise", "listwise", "pointwise", "other")
#: What makes a query count (``relevance=``): a real item of positive label, or a positive ideal DCG
#: under the loss's bound ``gain``, ``discount`` and ``k``.
RELEVANCES = ("label", "gain")

_NOT_OPTIONS = ("mask", "reduction")


@dataclass(frozen=True)
class LossInfo:
    """What the package knows about a registered loss.

    Attributes
    ----------
    name : str
        The registered name.
    fn : callable
        The loss function.
    family : str
        One of :data:`FAMILIES`: ``"ndcg"`` (an NDCG surrogate), ``"pairwise"``, ``"listwise"``,
        ``"pointwise"`` or ``"other"``.
    relevance : str
        One of :data:`RELEVANCES`: a query counts when it has a real item with a positive label
        (``"label"``) or a positive ideal DCG under the loss's ``gain``, ``discount`` and ``k``
        options (``"gain"``; their defaults ``"exp2"``, ``"log2"`` and None where the loss has no
        such option).
    distinct_labels : bool
        A query also needs two real items of different labels (a pair to order).
    constant_on_equal_labels : bool
        The metric the loss stands for does not change with the scores of a query whose labels
        are all equal (NDCG, its pairs): :mod:`smoothrank.boosting` gives such a query no
        gradient, whatever residual the surrogate leaves.
    hessian_diagonal : callable or None
        The diagonal of the loss's Hessian in closed form, with the loss's signature, returning
        a tensor shaped like ``scores`` (:mod:`smoothrank.boosting` uses it for
        ``hessian="diagonal"``).
    twice_differentiable : bool
        Autograd can differentiate the loss twice (a generic Hessian diagonal exists).
    random : bool
        The loss draws random numbers at its default options.
    """

    name: str
    fn: LossFn
    family: str = "other"
    relevance: str = "label"
    distinct_labels: bool = False
    constant_on_equal_labels: bool = False
    hessian_diagonal: LossFn | None = None
    twice_differentiable: bool = False
    random: bool = False


_LOSSES: dict[str, LossInfo] = {}


def register(name: str, fn: LossFn, *, family: str = "other", relevance: str = "label",
             distinct_labels: bool = False, constant_on_equal_labels: bool = False,
             hessian_diagonal: LossFn | None = None, twice_differentiable: bool = False,
             random: bool = False) -> LossFn:
    """Register ``fn`` under ``name`` with what the package needs to know about it; returns ``fn``.

    Re-registering the same function with the same description is allowed. The keyword arguments
    are the fields of :class:`LossInfo`; a loss registered without them counts the queries with a
    positive label, as :func:`informative_queries` documents, and has no closed-form Hessian.

    Raises
    ------
    ConfigError
        For an empty name, a name taken by another loss or description, a function without
        keyword-only ``mask`` and ``reduction``, or an unknown ``family`` or ``relevance``.
    """
    if not isinstance(name, str) or not name:
        raise ConfigError("register: name must be a non-empty string")
    params = inspect.signature(fn).parameters
    for required in _NOT_OPTIONS:
        if required not in params or params[required].kind is not inspect.Parameter.KEYWORD_ONLY:
            raise ConfigError(f"register: {name!r} must take keyword-only {required!r}")
    check_choice(family, FAMILIES, "family", error=ConfigError)
    check_choice(relevance, RELEVANCES, "relevance", error=ConfigError)
    if hessian_diagonal is not None and not callable(hessian_diagonal):
        raise ConfigError(f"register: hessian_diagonal of {name!r} must be callable or None")
    info = LossInfo(name, fn, family=family, relevance=relevance, distinct_labels=bool(distinct_labels),
                    constant_on_equal_labels=bool(constant_on_equal_labels),
                    hessian_diagonal=hessian_diagonal, twice_differentiable=bool(twice_differentiable),
                    random=bool(random))
    if name in _LOSSES and _LOSSES[name] != info:
        raise ConfigError(f"register: a different loss is already registered as {name!r}")
    _LOSSES[name] = info
    return fn


def unregister(name: str) -> None:
    """Remove loss ``name`` from the registry (a :class:`ConfigError` if there is none)."""
    _lookup(name)
    del _LOSSES[name]


def available() -> list[str]:
    """Names of the registered losses, sorted.

    Examples
    --------
    >>> from smoothrank import losses
    >>> "neural_ndcg" in losses.available()
    True
    """
    return sorted(_LOSSES)


def _lookup(name: str) -> LossInfo:
    if not isinstance(name, str) or name not in _LOSSES:
        raise ConfigError(f"loss: unknown loss {name!r}; available: {', '.join(available())}")
    return _LOSSES[name]


def info(loss: str | LossFn) -> LossInfo:
    """The :class:`LossInfo` of a loss given by name, as its registered function, or bound by :func:`get`.

    Raises
    ------
    ConfigError
        If ``loss`` is none of these.

    Examples
    --------
    >>> from smoothrank import losses
    >>> losses.info("neural_ndcg").family
    'ndcg'
    """
    if isinstance(loss, str):
        return _lookup(loss)
    if isinstance(loss, BoundLoss):
        return _lookup(loss.loss_name)
    for registered in _LOSSES.values():
        if registered.fn is loss:  # by identity: a loss of one's own need not be hashable
            return registered
    raise ConfigError("loss: expected a loss name, a registered loss or a loss bound by losses.get")


def find(loss: Any) -> LossInfo | None:
    """:func:`info` of ``loss``, or None where it is no registered loss (any other callable)."""
    try:
        return info(loss)
    except ConfigError:
        return None


def options(name: str) -> dict[str, Any]:
    """The options of loss ``name`` and their defaults (keyword-only parameters but mask, reduction).

    Examples
    --------
    >>> from smoothrank import losses
    >>> losses.options("rank_net")
    {'sigma': 1.0, 'k': None}
    """
    fn = _lookup(name).fn
    return {p.name: p.default for p in inspect.signature(fn).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in _NOT_OPTIONS}


def resolve_config_forms(opts: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Option forms a YAML/TOML config can hold, turned into objects; returns ``(opts, changed)``.

    ``discount: {shallow: ALPHA, n: N}`` becomes :func:`smoothrank.gains.shallow_discount`
    ``(ALPHA, N)``, the shallower training discounts of SoftRank section 4.7 (a config file cannot
    hold a callable). Training configs, experiment specs and :func:`get` all accept it.
    """
    form = opts.get("discount")
    if not isinstance(form, dict):
        return opts, False
    shallow = shallow_from_mapping(form, argument="options.discount", error=ConfigError)
    return {**opts, "discount": shallow}, True


def get(name: str, **opts: Any) -> LossFn:
    """Loss ``name`` with ``opts`` bound: ``callable(scores, labels, *, mask=None, reduction="mean")``.

    Unknown option names raise :class:`smoothrank.errors.ConfigError` naming them; option values
    are checked by the loss itself when called. Two config forms are read here (not by the loss
    functions themselves): ``discount={"shallow": ALPHA, "n": N}`` (:func:`resolve_config_forms`),
    and an int ``generator``, which becomes one generator for the life of the bound loss, so that
    successive calls draw different but reproducible noise (the function called with the same int
    seed draws the same noise on every call).

    Examples
    --------
    >>> import torch
    >>> from smoothrank import losses
    >>> loss_fn = losses.get("neural_ndcg", temperature=0.5)
    >>> round(loss_fn(torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([[0.0, 1.0, 2.0]])).item(), 4)
    -0.6065
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
        fn = _lookup(name).fn
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


def informative_queries(loss: str | LossFn, labels: Tensor, *, mask: Tensor | None = None,
                        dtype: torch.dtype = torch.float32) -> Tensor:
    """(batch,) bool: the queries that ``reduction="mean"`` of ``loss`` divides by.

    A query counts when it has a real item of positive gain, as the loss's :class:`LossInfo` says:
    a positive label (``relevance="label"``: ``list_net``, ``list_mle``, ``rmse``, ``rank_net`` and
    losses registered without a description) or a positive ideal DCG under the bound ``gain``,
    ``discount`` and ``k`` (``relevance="gain"``: the NDCG-based losses); and, where
    ``distinct_labels`` (``rank_net``, ``lambda_rank``), two real items of different labels.
    ``dtype`` is the scores' dtype, in which the losses read the labels (float32 for
    half-precision scores): two labels 1 apart beyond 2^24 are one label in float32. It depends on
    the labels only, so every process of a distributed job can count its queries before the
    forward pass. The exact global mean, under DistributedDataParallel (which averages the
    processes' gradients)::

        n = informative_queries(loss, labels, mask=mask, dtype=scores.dtype).sum()
        torch.distributed.all_reduce(n)  # in place: the count over every process
        value = loss(scores, labels, mask=mask, reduction="sum") * world_size / n.clamp_min(1)

    Parameters
    ----------
    loss : str or callable
        A registered loss's name, its function, or the loss bound by :func:`get` (whose options
        are used).
    labels : Tensor, shape (batch, list_size)
    mask : bool Tensor, shape (batch, list_size), optional
        True = real item.
    dtype : torch.dtype
        The scores' floating dtype.

    Returns
    -------
    Tensor
        Shape (batch,), bool.
    """
    described = info(loss)
    opts = {**options(described.name), **(loss.options if isinstance(loss, BoundLoss) else {})}
    if not isinstance(labels, Tensor) or labels.dim() not in (1, 2):
        shape = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ConfigError(f"labels: expected a tensor of shape (batch, list_size), got {shape}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ConfigError(f"dtype: expected a floating torch.dtype (the scores'), got {dtype!r}")
    # The losses' own input checks, on stand-in scores of the scores' dtype.
    stand_in = torch.zeros(labels.shape, dtype=dtype, device=labels.device)
    if described.relevance == "gain":
        terms = C.ndcg_terms(stand_in, labels, mask, gain=opts.get("gain", "exp2"),
                             discount=opts.get("discount", "log2"), k=opts.get("k"))
        labels, mask, valid = terms.labels, terms.mask, terms.valid
    else:
        _, labels, mask = C.check_inputs(stand_in, labels, mask)
        valid = C.has_relevant(labels, mask)
    if described.distinct_labels:
        highest = labels.masked_fill(~mask, float("-inf")).amax(-1)
        lowest = labels.masked_fill(~mask, float("inf")).amin(-1)
        valid = valid & (highest > lowest)
    return valid
