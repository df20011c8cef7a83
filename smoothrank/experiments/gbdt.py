"""Gradient-boosted tree baselines (LightGBM, XGBoost) on the same :class:`~smoothrank.data.Dataset` folds.

Objectives:

* LightGBM ``lambdarank`` (Burges, "From RankNet to LambdaRank to LambdaMART", 2010) and
  ``rank_xendcg`` (Bruch, "An alternative cross entropy loss for learning-to-rank", 2021);
* XGBoost ``rank:pairwise`` (RankNet-style pairs) and ``rank:ndcg`` (LambdaMART).

The objective may also be any registered smoothrank loss (``objective="neural_ndcg"``, with its
``loss_options``): the booster then fits the loss's gradient and Hessian (:mod:`smoothrank.boosting`,
``hessian="constant"``, ``"diagonal"`` or ``"curvature"``), so that trees optimise NeuralNDCG,
SoftNDCG or any other surrogate directly.

Both libraries are optional dependencies, imported only when a baseline runs. Queries are passed
as group sizes (LightGBM, PITFALLS 19) or per-row query indices on rows kept contiguous
(XGBoost, PITFALLS 20): a :class:`Dataset` keeps each query's rows in one block, so no
re-sorting is needed and predictions come back in dataset row order.

Early stopping watches the validation split only; the test split is never shown to the booster.
By default it watches the library's own NDCG@``eval_at`` (LightGBM/XGBoost convention: exp2 gain,
log2(1 + r) discount, an empty query scores 1); with ``select=`` (the experiment runner passes
the spec's ``select_by`` under the spec's convention) it watches that function of the
validation scores instead, so boosters and neural runs are selected by the same criterion.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from smoothrank._checks import check_int_count
from smoothrank.errors import ConfigError, SmoothrankError

__all__ = ["GBDT_OBJECTIVES", "GBDTResult", "canonical_param", "check_gbdt", "fit_gbdt", "is_loss_objective",
           "reserved_param", "unknown_params"]

#: library -> objectives supported here.
GBDT_OBJECTIVES: dict[str, tuple[str, ...]] = {
    "lightgbm": ("lambdarank", "rank_xendcg"),
    "xgboost": ("rank:pairwise", "rank:ndcg"),
}

# Parameters the harness sets itself from the spec (objective, seeds, rounds, early stopping,
# eval_at, num_threads): a user value would break the fold protocol or be ignored. Both libraries
# also take some of them under aliases (num_trees, early_stopping, application, n_jobs, ...), which
# are refused with them (:func:`reserved_param`).
RESERVED_PARAMS = {"objective", "metric", "eval_metric", "eval_at", "ndcg_eval_at", "seed", "random_state",
                   "early_stopping_round", "early_stopping_rounds", "num_iterations", "num_boost_round",
                   "n_estimators", "num_trees", "num_threads", "nthread", "n_jobs",
                   "early_stopping_min_delta", "first_metric_only"}

# Parameters the harness sets by default and a user may override under their own name only:
# LightGBM lets that name win over an alias, so an alias (verbose) would be silently ignored.
_OVERRIDABLE = {"lightgbm": {"verbosity", "deterministic"}, "xgboost": set()}

# XGBoost's aliases (its C++ parameter declarations); LightGBM lists its own (_lightgbm_names).
_XGBOOST_ALIASES = {"eta": "learning_rate", "gamma": "min_split_loss", "lambda": "reg_lambda",
                    "alpha": "reg_alpha", "random_state": "seed", "n_jobs": "nthread"}


@dataclass
class GBDTResult:
    """A fitted booster and what model selection saw.

    ``predict(dataset)`` gives one float64 score per row, in dataset row order, using the
    iteration that was best on validation.
    """

    library: str
    objective: str
    booster: Any
    best_iteration: int
    rounds_run: int
    history: list[dict[str, float]] = field(default_factory=list)

    def predict(self, dataset: Any) -> np.ndarray:
        features = np.ascontiguousarray(dataset.features, dtype=np.float32)
        if self.library == "lightgbm":
            out = self.booster.predict(features, num_iteration=self.best_iteration)
        else:
            import xgboost as xgb

            out = self.booster.predict(xgb.DMatrix(features),
                                       iteration_range=(0, self.best_iteration))
        scores = np.asarray(out, dtype=np.float64).reshape(-1)
        if scores.shape[0] != dataset.n_docs or not np.isfinite(scores).all():
            raise SmoothrankError(f"{self.library} {self.objective}: non-finite or missing predictions")
        return scores


def is_loss_objective(library: str, objective: str) -> bool:
    """Whether ``objective`` names a smoothrank loss (a custom objective) rather than one of the
    library's own objectives."""
    return objective not in GBDT_OBJECTIVES.get(library, ())


def check_gbdt(library: str, objective: str, params: Mapping[str, Any] | None = None, *,
               where: str = "gbdt", probe: bool = True, loss_options: Mapping[str, Any] | None = None,
               hessian: str = "constant", min_hessian: float | None = None) -> None:
    """Raise :class:`ConfigError` (naming ``where``) for an unknown library/objective, reserved params,
    or, with ``probe``, params the library refuses (see :func:`_params_complaint`) and loss options
    the loss refuses (computed once on a tiny batch)."""
    if library not in GBDT_OBJECTIVES:
        raise ConfigError(f"{where}.library: expected one of {sorted(GBDT_OBJECTIVES)}, got {library!r}")
    if is_loss_objective(library, objective):
        _check_loss_objective(library, objective, dict(loss_options or {}), hessian, where=where, probe=probe,
                              min_hessian=min_hessian)
    elif loss_options or hessian != "constant" or min_hessian is not None:
        key = "options" if loss_options else "hessian" if hessian != "constant" else "min_hessian"
        raise ConfigError(f"{where}.{key}: only for a smoothrank loss as the objective, not {library}'s "
                          f"own {objective!r}")
    params = dict(params or {})
    if library == "lightgbm":
        _check_label_gain(params, where)
    clash = [_named(library, key) for key in params if reserved_param(library, key) is not None]
    if clash:
        raise ConfigError(f"{where}.params: {clash} are set by the harness (use the spec's num_boost_round, "
                          "early_stopping_rounds, eval_at, seeds and num_threads instead)")
    twice = _aliased_twice(library, params)
    if twice:
        raise ConfigError(f"{where}.params: {twice} name one {library} parameter more than once; "
                          "give it once")
    shadowed = [key for key in params if canonical_param(library, key) in _OVERRIDABLE[library] - {key}]
    if shadowed:
        names = sorted({canonical_param(library, key) for key in shadowed})
        raise ConfigError(f"{where}.params: {[_named(library, key) for key in shadowed]} would be ignored: "
                          f"the harness sets {names} itself, which {library} takes over an alias; write "
                          f"{' and '.join(names)} instead")
    by_query = [k for k in params if canonical_param(library, k) == "bagging_by_query" and params[k]]
    if library == "lightgbm" and is_loss_objective(library, objective) and by_query:
        # LightGBM then grows one-leaf trees for any custom objective (its own lambdarank splits).
        raise ConfigError(f"{where}.params: {by_query[0]}: LightGBM grows only one-leaf trees with it for a "
                          "custom objective such as a smoothrank loss; use bagging_fraction instead")
    if not probe:
        return
    _import(library, where=where)  # missing: refused with the spec, not after hours of neural runs
    unknown = unknown_params(library, params)
    complaint, unused = _params_complaint(library, objective, params)
    if unknown or unused:
        raise ConfigError(f"{where}.params: {unknown or unused} not {library} parameter(s) that it uses here "
                          f"(misspelt? {library} would only warn and ignore them, and the runs would not "
                          "differ)")
    if complaint is not None:
        raise ConfigError(f"{where}.params: {library} refuses them: {complaint}")


def reserved_param(library: str, key: str) -> str | None:
    """The parameter the harness sets that ``key`` names (itself or an alias of it: LightGBM's
    ``num_round`` is ``num_iterations``, XGBoost's ``n_jobs`` is ``nthread``), or None."""
    if key in RESERVED_PARAMS:
        return key
    canonical = canonical_param(library, key)
    return canonical if canonical in RESERVED_PARAMS else None


def canonical_param(library: str, key: str) -> str:
    """The library's own name for ``key`` when it is one of its aliases (LightGBM ``num_leaf`` ->
    ``num_leaves``, XGBoost ``eta`` -> ``learning_rate``), else ``key``."""
    names = _lightgbm_names() if library == "lightgbm" else _XGBOOST_ALIASES
    return (names or {}).get(key, key)


def unknown_params(library: str, params: Mapping[str, Any]) -> list[str]:
    """Names in ``params`` that LightGBM knows neither as a parameter nor as an alias (a misspelling,
    which LightGBM would only warn of and ignore). Empty where LightGBM is not installed or cannot
    list its parameters, and for XGBoost, whose unused keys depend on the booster and objective:
    :func:`check_gbdt` finds those by configuring a booster with them."""
    names = _lightgbm_names() if library == "lightgbm" else None
    return [] if names is None else [key for key in params if key not in names]


@functools.cache
def _lightgbm_names() -> dict[str, str] | None:
    """Every LightGBM parameter name and alias -> the parameter's name, as the library lists them
    (``LGBM_DumpParamAliases``, LightGBM >= 4.0); None without LightGBM or that listing."""
    try:
        table = _import("lightgbm").basic._ConfigAliases._get_all_param_aliases()
    except (SmoothrankError, AttributeError):
        return None
    return {alias: name for name, aliases in table.items() for alias in (name, *aliases)}


def _named(library: str, key: str) -> str:
    """``key``, followed by the parameter it is an alias of."""
    canonical = canonical_param(library, key)
    return key if canonical == key else f"{key} (= {canonical})"


def _aliased_twice(library: str, params: Mapping[str, Any]) -> list[str]:
    """Keys of ``params`` that name the same parameter as another key (``num_leaves`` and ``num_leaf``)."""
    canonical = [canonical_param(library, key) for key in params]
    return [_named(library, key) for key, name in zip(params, canonical, strict=True)
            if canonical.count(name) > 1]


def _check_loss_objective(library: str, objective: str, loss_options: dict[str, Any], hessian: str, *,
                          where: str, probe: bool, min_hessian: float | None = None) -> None:
    from smoothrank import losses
    from smoothrank.boosting import HESSIANS, check_min_hessian, check_objective

    if objective not in losses.available():
        raise ConfigError(f"{where}.objective: expected one of {library}'s objectives "
                          f"{GBDT_OBJECTIVES[library]} or a smoothrank loss {losses.available()}, "
                          f"got {objective!r}")
    if hessian not in HESSIANS:
        raise ConfigError(f"{where}.hessian: expected one of {HESSIANS}, got {hessian!r}")
    if min_hessian is not None:
        try:
            check_min_hessian(min_hessian)
        except SmoothrankError as err:
            raise ConfigError(f"{where}.{err}") from None
    if not probe:
        return
    from smoothrank.training.config import check_loss_options

    try:
        check_loss_options(objective, loss_options)
    except ConfigError as err:
        raise ConfigError(f"{where}.options: {err}") from None
    try:  # a loss autograd cannot differentiate twice fails here, not in training
        check_objective(objective, hessian=hessian, **_floor(min_hessian), **loss_options)
    except SmoothrankError as err:
        raise ConfigError(f"{where}.hessian: {err}") from None


def _floor(min_hessian: float | None) -> dict[str, Any]:
    """``min_hessian`` as a keyword for smoothrank.boosting, or none for its default."""
    return {} if min_hessian is None else {"min_hessian": float(min_hessian)}


def _library_errors(module: Any, library: str) -> tuple[type[Exception], ...]:
    """What the library raises for parameters it refuses (its own error; ValueError/TypeError
    from its Python side)."""
    own = module.basic.LightGBMError if library == "lightgbm" else module.core.XGBoostError
    return own, ValueError, TypeError


def _library_message(err: Exception) -> str:
    """The first line of a library error, without the C++ source location."""
    line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    line = re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", line)  # XGBoost: "[12:00:00] src/learner.cc:806: "
    return re.sub(r" at \S+, line \d+ \.?$", "", line).strip()  # LightGBM: " at src/x.cpp, line 349 ."


def _params_complaint(library: str, objective: str, params: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The library's complaint about ``params`` (None: it takes them) and, for XGBoost, the keys of
    ``params`` it reports as not used; checked without training.

    LightGBM parses and checks its parameters when a Dataset is constructed, XGBoost when a
    Booster is configured: both take milliseconds on a four-row array. Parameters that depend on
    the data (e.g. ``monotone_constraints`` against the feature count) are only checked in
    training. Without the library installed, :func:`check_gbdt` has refused the spec already.
    """
    try:
        module = _import(library)
    except SmoothrankError:
        return None, []
    if is_loss_objective(library, objective):
        objective = _CUSTOM[library]  # the parameters' check does not depend on the loss
    features = np.zeros((4, 1), dtype=np.float32)
    labels, sizes = np.array([1.0, 0.0, 1.0, 0.0]), np.array([2, 2])
    # Both libraries print what they raise; XGBoost warns of keys it does not use (a misspelling),
    # at verbosity 1 or more: a global setting, which a user's `verbosity: 0` must not turn off here.
    with _silenced(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if library == "lightgbm":
                module.Dataset(features, label=labels, group=sizes,
                               params=_lightgbm_params(objective, params, num_threads=1)).construct()
            else:
                data = module.DMatrix(features, label=labels, qid=np.repeat([0, 1], sizes))
                probed = {**_xgboost_params(objective, params, num_threads=1), "verbosity": 1}
                with module.config_context(verbosity=1):
                    module.Booster(probed, [data]).num_boosted_rounds()
        except _library_errors(module, library) as err:
            return _library_message(err), []
    # Only the user's keys: the harness's own (tree_method under gblinear) are not the user's doing.
    unused = [name for warning in caught for name in _xgboost_unused(str(warning.message)) if name in params]
    return None, unused


def _xgboost_unused(message: str) -> list[str]:
    """The keys of XGBoost's 'Parameters: { "a", "b" } are not used.' warning (none in other messages)."""
    match = re.search(r"Parameters: \{(.*?)\} are not used", message, flags=re.DOTALL)
    return re.findall(r'"([^"]*)"', match.group(1)) if match else []


@contextlib.contextmanager
def _silenced() -> Iterator[None]:
    """No output on stdout or stderr, file descriptors included: LightGBM's C++ writes
    "[LightGBM] [Fatal] ..." to the stderr descriptor before it raises."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr descriptor: nothing to silence there
        saved = None
    try:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(io.StringIO()):
            if saved is not None:
                os.dup2(null.fileno(), 2)
            yield
    finally:
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)


# The libraries' objective parameter under a custom (smoothrank loss) objective: LightGBM takes the
# callable itself (``"custom"`` when it only checks parameters); XGBoost takes the callable as
# ``obj=`` and needs an identity-link objective here, with ``base_score`` 0 (every list starts tied).
_CUSTOM = {"lightgbm": "custom", "xgboost": "reg:squarederror"}


def _lightgbm_params(objective: Any, params: Mapping[str, Any], *, eval_at: int = 10, seed: int = 0,
                     num_threads: int = 1) -> dict[str, Any]:
    return {"objective": objective, "metric": "ndcg", "eval_at": [eval_at], "seed": seed,
            "deterministic": True, "num_threads": num_threads, "verbosity": -1, **params}


def _xgboost_params(objective: str, params: Mapping[str, Any], *, eval_at: int = 10, seed: int = 0,
                    num_threads: int = 1) -> dict[str, Any]:
    custom = {"base_score": 0.0} if objective == _CUSTOM["xgboost"] else {}
    return {"objective": objective, "eval_metric": f"ndcg@{eval_at}", "seed": seed,
            "nthread": num_threads, "tree_method": "hist", **custom, **params}


def _import(library: str, *, where: str | None = None) -> Any:
    try:
        if library == "lightgbm":
            import lightgbm

            return lightgbm
        import xgboost

        return xgboost
    except ImportError:
        package = "lightgbm" if library == "lightgbm" else "xgboost-cpu"
        why = (f"the {library} baseline needs the optional dependency {library} (pip install {package}, "
               "or pip install 'smoothrank[gbdt]'; bash scripts/test installs it)")
        if where is not None:
            raise ConfigError(f"{where}.library: {why}") from None
        raise SmoothrankError(why) from None


def _label_levels(library: str, params: Mapping[str, Any]) -> int | None:
    """The largest label the library's gain table takes (None: no limit), from ``params``."""
    if library == "lightgbm":
        gains = params.get("label_gain")
        if gains is None:
            return 30  # the default label_gain: 2^i - 1 for i = 0..30
        return len(gains.split(",") if isinstance(gains, str) else list(gains)) - 1
    exp_gain = params.get("ndcg_exp_gain", True)
    if isinstance(exp_gain, str):
        exp_gain = exp_gain.strip().lower() not in ("false", "0")
    return 31 if exp_gain else None  # XGBoost's exponential gain 2^i - 1 stops at 31


def _check_labels(dataset: Any, split: str, *, library: str, objective: str,
                  params: Mapping[str, Any]) -> None:
    """Refuse labels the booster cannot grade, naming the file and line (PITFALLS 20).

    Both libraries take integer relevance levels >= 0 with gains 2^i - 1 from a fixed table:
    LightGBM's default ``label_gain`` covers 0..30, XGBoost's exponential NDCG gain 0..31. Left
    to the library, a larger label fails deep inside training without naming the file or row.
    """
    labels = np.asarray(dataset.labels, dtype=np.float64)
    top = _label_levels(library, params)
    bad = (labels < 0) | (labels != np.round(labels))
    if top is not None:
        bad |= labels > top
    if not bad.any():
        return
    row = int(np.flatnonzero(bad)[0])
    value = labels[row]
    hint = ""
    if top is not None and value > top and value == np.round(value):
        hint = ("; pass params={'label_gain': [2**i - 1 for i in range(L + 1)]} for labels up to L"
                if library == "lightgbm" else "; params={'ndcg_exp_gain': False} (linear gain) takes more")
    levels = f"0..{top}" if top is not None else ">= 0"
    where = f"{dataset.source}:{int(dataset.line_numbers[row])}"
    raise SmoothrankError(f"{where}: label {value:g} ({split} split): {library} {objective} takes integer "
                          f"relevance labels {levels}{hint}")


def _check_interaction_constraints(params: Mapping[str, Any], *, n_features: int) -> None:
    """Refuse LightGBM ``interaction_constraints`` that name features the data lacks.

    LightGBM 4.7 does not check them: a group of only such features kills the process with a
    segmentation fault in training (on MQ2008, ``[[100]]`` or ``[[0, 1], [2, 3], [46]]``), and a
    mixed group is silently trimmed. Feature indices are 0-based here as in LightGBM.
    """
    groups = params.get("interaction_constraints")
    if groups is None:
        return
    shape = "a list of lists of 0-based feature indices"
    if isinstance(groups, str):  # LightGBM's own text form, "[0,1],[2,3]"
        try:
            texts = re.findall(r"\[([^\]]*)\]", groups)
            groups = [[int(i) for i in text.split(",") if i.strip()] for text in texts]
        except ValueError:
            raise ConfigError(f"params.interaction_constraints: expected {shape}, got {groups!r}") from None
    if not isinstance(groups, Sequence):
        raise ConfigError(f"params.interaction_constraints: expected {shape}, got {groups!r}")
    for group in groups:
        if isinstance(group, str) or not isinstance(group, Sequence):
            raise ConfigError(f"params.interaction_constraints: expected {shape}, got the group {group!r}")
        for index in group:
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n_features:
                raise ConfigError(f"params.interaction_constraints: feature {index!r} is not a feature index "
                                  f"of the training data (0..{n_features - 1})")


# The largest seed each library keeps apart from the others: LightGBM reads its seed as a 32-bit
# signed integer (2^31 gives the model of seed 0), XGBoost keeps the low 32 bits (2^32 gives seed 0's).
SEED_LIMITS = {"lightgbm": 2**31 - 1, "xgboost": 2**32 - 1}


def check_seed(library: str, seed: Any) -> None:
    """Refuse a seed the library would alias to another (a seed ensemble of identical models)."""
    limit = SEED_LIMITS.get(library, 2**63 - 1)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= limit:
        raise ConfigError(f"seed: {library} keeps seeds 0..{limit} apart (a larger one gives the model of a "
                          f"smaller one), got {seed!r}")


def _selected(select: Callable[[np.ndarray], float], preds: Any) -> float:
    """``select(preds)`` as a float; NaN or inf is an error (a library would skip or pick it silently)."""
    value = float(select(np.asarray(preds, dtype=np.float64)))
    if not math.isfinite(value):
        raise ConfigError(f"select: returned {value} for the validation scores; it must give a finite number "
                          "(higher is better)")
    return value


def _positive_int(value: Any, name: str) -> int:
    return check_int_count(value, name, error=ConfigError)


def _check_label_gain(params: Mapping[str, Any], where: str) -> None:
    """LightGBM's ``label_gain``: a list of gains >= 0 (or their comma-separated text), one per label."""
    gains = params.get("label_gain")
    if gains is None:
        return
    try:
        values = [float(g) for g in (gains.split(",") if isinstance(gains, str) else gains)]
    except (TypeError, ValueError):
        values = None
    if (isinstance(gains, bool | int | float) or not values
            or not all(math.isfinite(v) and v >= 0 for v in values)):
        raise ConfigError(f"{where}.params.label_gain: expected a list of gains >= 0, one per label "
                          f"(e.g. [0, 1, 3, 7]), got {gains!r}")


def fit_gbdt(train: Any, valid: Any | None, *, library: str, objective: str,
             params: Mapping[str, Any] | None = None, num_boost_round: int = 500,
             early_stopping_rounds: int | None = 50, eval_at: int = 10, seed: int = 0,
             num_threads: int = 1, select: Callable[[np.ndarray], float] | None = None,
             select_name: str = "select", loss_options: Mapping[str, Any] | None = None,
             hessian: str = "constant", min_hessian: float | None = None) -> GBDTResult:
    """Fit one GBDT ranker on ``train``, early-stopped on ``valid``'s NDCG@``eval_at``.

    Parameters
    ----------
    train, valid : Dataset
        ``valid=None`` trains all ``num_boost_round`` rounds (no selection).
    library, objective : see :data:`GBDT_OBJECTIVES`; or ``objective`` a registered smoothrank loss
        (a custom objective, :mod:`smoothrank.boosting`) with ``loss_options``, ``hessian`` and
        ``min_hessian`` (None: the booster module's default)
    params : extra booster parameters (e.g. ``learning_rate``, ``num_leaves``, ``max_depth``)
    num_boost_round, early_stopping_rounds, eval_at, seed, num_threads : int
    select : callable, optional
        ``select(valid_scores) -> float`` (higher is better; ``valid_scores`` in ``valid`` row
        order) replaces the library's NDCG@``eval_at`` for early stopping; logged as ``select_name``.
    """
    # the library's refusal is caught below; a loss's refusal is a SmoothrankError naming it
    check_gbdt(library, objective, params, probe=False, loss_options=loss_options, hessian=hessian,
               min_hessian=min_hessian)
    check_seed(library, seed)
    if params is not None and not isinstance(params, Mapping):
        raise ConfigError(f"params: expected a mapping of booster parameters, got {type(params).__name__}")
    num_boost_round = _positive_int(num_boost_round, "num_boost_round")
    if early_stopping_rounds is not None:
        early_stopping_rounds = _positive_int(early_stopping_rounds, "early_stopping_rounds")
    eval_at, num_threads = _positive_int(eval_at, "eval_at"), _positive_int(num_threads, "num_threads")
    # The gain table bounds the labels of the library's own objectives and NDCG metric; a smoothrank
    # loss objective selected by ``select`` uses neither.
    if not (is_loss_objective(library, objective) and (select is not None or valid is None)):
        for split, dataset in (("train", train), ("valid", valid)):
            if dataset is not None:
                _check_labels(dataset, split, library=library, objective=objective, params=params or {})
    if library == "lightgbm":
        _check_interaction_constraints(params or {}, n_features=int(train.features.shape[1]))
    module = _import(library)
    fit = _fit_lightgbm if library == "lightgbm" else _fit_xgboost
    custom = None
    if is_loss_objective(library, objective):
        from smoothrank import boosting

        make = boosting.lightgbm_objective if library == "lightgbm" else boosting.xgboost_objective
        custom = make(objective, hessian=hessian, **_floor(min_hessian), **dict(loss_options or {}))
    try:
        with _torch_state(num_threads, seed) if custom is not None else contextlib.nullcontext():
            return fit(module, train, valid, objective=objective, params=dict(params or {}),
                       num_boost_round=num_boost_round, early_stopping_rounds=early_stopping_rounds,
                       eval_at=eval_at, seed=seed, num_threads=num_threads, select=select,
                       select_name=select_name, custom=custom)
    except SmoothrankError:
        raise
    except _library_errors(module, library) as err:
        # What the parameter check above cannot see (data-dependent parameters): a failed run
        # with the library's message, not a traceback that stops the grid.
        raise SmoothrankError(f"{library} {objective}: {_library_message(err)}") from None


@contextlib.contextmanager
def _torch_state(num_threads: int, seed: int) -> Iterator[None]:
    """PyTorch's threads and random numbers while a smoothrank loss computes the booster's gradients:
    a loss that draws (ListMLE's tie-breaks, stochastic NeuralNDCG) draws from ``seed``, so the run
    is the same for a seed whatever the caller's generator did before, and that generator is left
    as it was."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    finally:
        torch.set_num_threads(previous)


def _fit_lightgbm(lgb: Any, train: Any, valid: Any | None, *, objective: str, params: dict[str, Any],
                  num_boost_round: int, early_stopping_rounds: int | None, eval_at: int, seed: int,
                  num_threads: int, select: Callable[[np.ndarray], float] | None,
                  select_name: str, custom: Callable[..., Any] | None) -> GBDTResult:
    full = _lightgbm_params(custom if custom is not None else objective, params, eval_at=eval_at, seed=seed,
                            num_threads=num_threads)
    feval = None
    key = f"ndcg@{eval_at}"
    if select is not None:
        full["metric"] = "None"  # only the custom criterion, so early stopping watches it

        def feval(preds: np.ndarray, _data: Any) -> tuple[str, float, bool]:
            return select_name, _selected(select, preds), True

        key = select_name
    # Labels are within the label_gain table (checked by _check_labels above).
    train_set = lgb.Dataset(train.features, label=train.labels, group=train.list_sizes,
                            free_raw_data=False)
    evals: dict[str, Any] = {}
    callbacks = [lgb.record_evaluation(evals)]
    valid_sets, names = [], []
    if valid is not None:
        valid_sets.append(lgb.Dataset(valid.features, label=valid.labels, group=valid.list_sizes,
                                      reference=train_set, free_raw_data=False))
        names.append("valid")
        if early_stopping_rounds is not None:
            callbacks.append(lgb.early_stopping(early_stopping_rounds, first_metric_only=True, verbose=False))
    booster = lgb.train(full, train_set, num_boost_round=num_boost_round, valid_sets=valid_sets,
                        valid_names=names, callbacks=callbacks, feval=feval)
    curve = evals.get("valid", {}).get(key, [])
    history = [{"iteration": i + 1, f"valid_{key}": float(v)} for i, v in enumerate(curve)]
    # After early stopping current_iteration() reports the best iteration, not the rounds run.
    rounds = len(curve) if curve else booster.current_iteration()
    best = booster.best_iteration if booster.best_iteration > 0 else rounds
    return GBDTResult("lightgbm", objective, booster, int(best), int(rounds), history)


def _fit_xgboost(xgb: Any, train: Any, valid: Any | None, *, objective: str, params: dict[str, Any],
                 num_boost_round: int, early_stopping_rounds: int | None, eval_at: int, seed: int,
                 num_threads: int, select: Callable[[np.ndarray], float] | None,
                 select_name: str, custom: Callable[..., Any] | None) -> GBDTResult:
    full = _xgboost_params(_CUSTOM["xgboost"] if custom is not None else objective, params, eval_at=eval_at,
                           seed=seed, num_threads=num_threads)
    metric = None
    key = f"ndcg@{eval_at}"
    if select is not None:
        del full["eval_metric"]
        full["disable_default_eval_metric"] = 1

        def metric(preds: np.ndarray, _data: Any) -> tuple[str, float]:
            return select_name, _selected(select, preds)

        key = select_name
    # qid per row; rows of a query are contiguous and queries ascending, as XGBoost requires.
    dtrain = xgb.DMatrix(train.features, label=train.labels, qid=train.query_of_row())
    evals: list[Any] = []
    evals_result: dict[str, Any] = {}
    if valid is not None:
        evals.append((xgb.DMatrix(valid.features, label=valid.labels, qid=valid.query_of_row()), "valid"))
    booster = xgb.train(full, dtrain, num_boost_round=num_boost_round, evals=evals, obj=custom,
                        evals_result=evals_result, verbose_eval=False, custom_metric=metric,
                        maximize=True if metric is not None else None,
                        early_stopping_rounds=early_stopping_rounds if evals else None)
    curve = evals_result.get("valid", {}).get(key, [])
    history = [{"iteration": i + 1, f"valid_{key}": float(v)} for i, v in enumerate(curve)]
    rounds = booster.num_boosted_rounds()
    best_attr = booster.attributes().get("best_iteration")
    # XGBoost's best_iteration is 0-based; iteration_range's end is exclusive.
    best = int(best_attr) + 1 if best_attr is not None else rounds
    return GBDTResult("xgboost", objective, booster, best, int(rounds), history)


#: The file name of a saved booster, by library: each library's own format.
BOOSTER_FILES = {"lightgbm": "model.txt", "xgboost": "model.json"}


def save_booster(fitted: GBDTResult, folder: str | os.PathLike[str]) -> Path:
    """Save ``fitted``'s booster, cut at its selected iteration, in its library's own format
    (LightGBM's text model ``model.txt``, XGBoost's JSON model ``model.json``) into ``folder``,
    atomically; returns the path. The saved model predicts what ``fitted.predict`` does, in the
    library's own tools (``lightgbm.Booster(model_file=...)``, ``xgboost.Booster(model_file=...)``)
    and in ``smoothrank predict``."""
    from smoothrank._atomic import write_bytes_atomic

    path = Path(folder) / BOOSTER_FILES[fitted.library]
    if fitted.library == "lightgbm":
        text = fitted.booster.model_to_string(num_iteration=fitted.best_iteration)
        write_bytes_atomic(path, text.encode("utf-8"))
    else:
        cut = fitted.booster[: fitted.best_iteration]
        write_bytes_atomic(path, bytes(cut.save_raw(raw_format="json")))
    return path


def booster_library(path: str | os.PathLike[str]) -> str | None:
    """The library of a saved booster file (by its first bytes): "lightgbm" (text model starting
    ``tree``), "xgboost" (JSON with a ``learner``), or None for anything else."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    if head.startswith(b"tree\n") or head.startswith(b"tree\r\n"):
        return "lightgbm"
    if head.lstrip().startswith(b"{") and b'"learner"' in head:
        return "xgboost"
    return None


@dataclass
class SavedBooster:
    """A booster read from its library's own file: ``predict(dataset)`` gives one float64 score
    per row, in row order (all of its trees: a saved booster is cut at its selected iteration)."""

    library: str
    booster: Any
    n_features: int
    source: str

    def predict(self, dataset: Any) -> np.ndarray:
        features = np.ascontiguousarray(dataset.features, dtype=np.float32)
        if self.library == "lightgbm":
            out = self.booster.predict(features)
        else:
            import xgboost as xgb

            out = self.booster.predict(xgb.DMatrix(features, missing=np.nan))
        scores = np.asarray(out, dtype=np.float64).reshape(-1)
        if scores.shape[0] != dataset.n_docs or not np.isfinite(scores).all():
            raise SmoothrankError(f"{self.source}: the booster gave non-finite or missing predictions")
        return scores


def load_booster(path: str | os.PathLike[str]) -> SavedBooster:
    """Read a LightGBM text model or an XGBoost JSON model (as :func:`save_booster` writes them);
    a file of neither kind, or one its library refuses, is an error naming it."""
    library = booster_library(path)
    if library is None:
        raise SmoothrankError(f"{path}: not a LightGBM text model or an XGBoost JSON model")
    module = _import(library)
    try:
        with _silenced():
            if library == "lightgbm":
                booster = module.Booster(model_file=str(path))
                n_features = booster.num_feature()
            else:
                booster = module.Booster(model_file=str(path))
                n_features = booster.num_features()
    except _library_errors(module, library) as err:
        raise SmoothrankError(f"{path}: {library} cannot read this model ({_library_message(err)})") from None
    return SavedBooster(library, booster, int(n_features), str(path))

