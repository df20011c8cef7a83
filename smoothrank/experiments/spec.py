"""The experiment specification: a validated YAML description of a grid of runs.

A spec names datasets (the bundled MQ2008 folds or LETOR files), neural methods (every loss
crossed with every model, trained by :func:`smoothrank.training.train` with shared settings),
GBDT baselines, seeds, the metric convention, and the baseline of the paired t-test::

    name: mq2008
    convention: letor4              # letor4 | lightgbm | trec (smoothrank.metrics conventions)
    metrics: [ndcg@1, ndcg@3, ndcg@5, ndcg@10, map]
    select_by: ndcg@10              # validation metric of model selection
    baseline: lightgbm-lambdarank   # method label the t-test compares against
    alpha: 0.05
    correction: none                # none | holm | bh: p-values adjusted over the methods, per metric
    seeds: [0]
    datasets:
      - {name: mq2008, mq2008_folds: [1, 2, 3, 4, 5]}
      - {name: lgb, train: data/rank.train, test: data/rank.test, valid: data/rank.test}
    neural:                         # smoothrank.training.Config sections shared by neural runs
      training: {epochs: 50, list_size: 240}
    losses:
      - neural_ndcg
      - {name: neural_ndcg, label: neural_ndcg@5, options: {k: 5}, model_options: {output_activation: tanh}}
      - {name: list_mle, models: [mlp], overrides: {optimizer: {lr: 0.01}}}   # only with these models
      - {name: approx_ndcg, grid: {options.alpha: [1, 10], overrides.optimizer.lr: [0.001, 0.01]}}  # 4 losses
    models:
      - {label: mlp, kind: mlp, hidden: [64]}
    gbdt:
      - {library: lightgbm, objective: lambdarank, num_boost_round: 500}
      - {library: lightgbm, objective: list_mle, hessian: curvature,        # 4 methods, one per
         grid: {num_leaves: [7, 31], min_data_in_leaf: [20, 50]}}          # combination of params
    ensemble: false                 # true: also <method>+ens<N>, the seed ensembles (N = len(seeds) >= 2)
    ensemble_normalize: zscore      # zscore | rank | none (smoothrank.experiments.ensemble)
    refit: false                    # true: after selection, retrain on train + valid (runner docs)
    blends:                         # cross-method ensembles, each method weighted equally ...
      - {label: blend, members: [neural_ndcg-mlp, lightgbm-lambdarank]}
      - {label: stack, members: [neural_ndcg-mlp, lightgbm-lambdarank], weights: learned,
         learner: {loss: list_net, l2: 0.001, cv: 5}}   # ... or fit on validation (stacking)

Relative file paths are relative to the spec file. Every problem is reported at once as a
:class:`~smoothrank.errors.ConfigError` naming the spec file and the key.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from smoothrank._config import NamedItems, StrictModel, problems_error, validation_problems
from smoothrank._config_types import Bool as _Bool
from smoothrank._config_types import Float as _Float
from smoothrank._config_types import Int as _Int
from smoothrank._config_types import MetricName as _MetricName
from smoothrank._config_types import Seed as _Seed
from smoothrank._yaml import safe_load
from smoothrank.errors import ConfigError, SmoothrankError

__all__ = ["Cell", "ExperimentSpec", "expand", "load_spec", "spec_from_dict"]

_LABEL_CHARS = "A-Za-z0-9_.@+-"  # what a method label (a run folder's name) may hold
_LABEL = rf"^[A-Za-z0-9][{_LABEL_CHARS}]*$"


class _Strict(StrictModel, BaseModel):  # BaseModel named too: ruff (RUF012) knows pydantic models by it
    """A section of the spec (unknown keys refused, immutable)."""


_ENV_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(path: str) -> str:
    """``path`` with each ``${NAME}`` replaced by the environment variable NAME, and each
    ``${NAME:-DEFAULT}`` by NAME if it is set and not empty, else DEFAULT (the shell's forms).

    An unset NAME without a default is an error; any other ``$`` is left as it is.
    """
    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = os.environ.get(name)
        if found:
            return found
        if default is not None:
            return default
        raise ValueError(f"environment variable {name} is not set (write ${{{name}:-DEFAULT}} for a default)")

    return _ENV_VAR.sub(value, path)


class DatasetSpec(_Strict):
    """The bundled MQ2008 folds, one train/valid/test triple of LETOR files, or one triple per fold.

    File paths may name environment variables, ``${NAME}`` or ``${NAME:-DEFAULT}`` (see
    :func:`expand_env`); relative paths are relative to the spec file. With ``folds`` (e.g.
    ``[1, 2, 3, 4, 5]``) the paths hold ``{fold}``, replaced by each fold number: one dataset of
    several folds, summarised as the MQ2008 folds are. ``null_value``: LETOR 3.0's NULL features,
    a fill number or ``"nan"`` (kept missing, GBDT baselines only; see ``docs/data.md``).
    """

    name: Annotated[str, Field(pattern=_LABEL)]
    mq2008_folds: list[Annotated[_Int, Field(ge=1, le=5)]] | None = None
    folds: list[Annotated[_Int, Field(ge=0)]] | None = None
    train: str | None = None
    valid: str | None = None
    test: str | None = None
    n_features: Annotated[_Int, Field(ge=1)] | None = None
    null_value: float | str | None = None

    @field_validator("train", "valid", "test", mode="after")
    @classmethod
    def _expand_env(cls, value: str | None) -> str | None:
        return expand_env(value) if value is not None else None

    @field_validator("null_value", mode="after")
    @classmethod
    def _null_value(cls, value: Any) -> Any:
        from smoothrank.data.missing import check_null_value

        return check_null_value(value, "null_value")

    def fold_list(self) -> list[int | None]:
        """The folds of this dataset's cells: the MQ2008 folds, the ``folds`` of its file pattern,
        or [None] (one triple of files)."""
        if self.mq2008_folds is not None:
            return list(self.mq2008_folds)
        return list(self.folds) if self.folds is not None else [None]

    def path(self, split: str, fold: int | None) -> str | None:
        """The file of ``split`` (train, valid, test) in ``fold``: ``{fold}`` replaced by its number."""
        path = getattr(self, split)
        if path is None or fold is None or self.folds is None:
            return path
        return path.replace("{fold}", str(fold))


class LossSpec(_Strict):
    name: str
    label: Annotated[str, Field(pattern=_LABEL)] | None = None
    options: dict[str, Any] = {}
    # Deep-merged into the shared ``neural`` settings for this loss only (e.g. its own lr).
    overrides: dict[str, Any] = {}
    # Merged into every model's options for this loss only: the NeuralNDCG paper puts a tanh on
    # the output for NeuralNDCG(T) and no activation for the other losses (section 5.2).
    model_options: dict[str, Any] = {}
    # The model labels this loss is trained with (default: every model of the spec), e.g. to give
    # a linear model its own learning rate through ``overrides`` under the same loss tag.
    models: list[str] | None = None
    # Settings to vary, by dotted path into options / overrides / model_options: each combination
    # of the lists is one loss of the grid (see variants()).
    grid: dict[str, Annotated[list[Any], Field(min_length=1)]] = {}

    @property
    def tag(self) -> str:
        return self.label or self.name

    def variants(self) -> list[LossSpec]:
        """The losses of this item: itself without a ``grid``; with one, a copy per combination of the
        grid's values (first key outermost), each value set at its path (``options.tau``,
        ``overrides.optimizer.lr``, ``model_options.dropout``) and the label
        ``<tag>-<last key><value>...``. A copy's cells, fingerprints included, are those of the same
        loss written out as its own item."""
        if not self.grid or _grid_size(self.grid) > MAX_GRID or _loss_grid_path_problems(self, "grid"):
            return [self]  # a bad grid is reported by the spec's checks, not expanded
        keys = list(self.grid)
        copies = []
        for values in itertools.product(*(self.grid[key] for key in keys)):
            sections = {name: copy.deepcopy(getattr(self, name)) for name in _LOSS_GRID_SECTIONS}
            for key, value in zip(keys, values, strict=True):
                section, *path = key.split(".")
                _set_path(sections[section], path, value)
            label = self.tag + "".join(f"-{key.rsplit('.', 1)[-1]}{_label_text(value)}"
                                       for key, value in zip(keys, values, strict=True))
            copies.append(self.model_copy(update={**sections, "label": label, "grid": {}}))
        return copies


_LOSS_GRID_SECTIONS = ("options", "overrides", "model_options")


def _set_path(mapping: dict[str, Any], path: list[str], value: Any) -> None:
    """``mapping[p0][p1]...[pn] = value``, creating the mappings on the way (checked by the spec)."""
    for part in path[:-1]:
        mapping = mapping.setdefault(part, {})
    mapping[path[-1]] = value


def _path_problem(mapping: dict[str, Any], path: list[str]) -> str | None:
    """Why ``path`` cannot be varied in ``mapping``: it is set there already, or runs through a value
    that is not a mapping; None if it can."""
    for depth, part in enumerate(path):
        if part not in mapping:
            return None
        if depth == len(path) - 1:
            return "also set in the item; give it in one place"
        mapping = mapping[part]
        if not isinstance(mapping, dict):
            return f"{'.'.join(path[:depth + 1])} is not a mapping"
    return None


class ModelSpec(_Strict):
    model_config = ConfigDict(extra="allow", frozen=True)  # the rest is smoothrank.training model config

    label: Annotated[str, Field(pattern=_LABEL)]
    kind: Literal["linear", "mlp", "context_aware"]

    def model_config_dict(self) -> dict[str, Any]:
        data = self.model_dump()
        data.pop("label")
        return data


class GBDTSpec(_Strict):
    library: Literal["lightgbm", "xgboost"]
    # The library's own objective, or a smoothrank loss name (a custom objective: smoothrank.boosting)
    # with its ``options`` and the ``hessian`` the booster is given.
    objective: str
    label: Annotated[str, Field(pattern=_LABEL)] | None = None
    options: dict[str, Any] = {}
    hessian: str = "constant"
    # the floor of the diagonal and curvature Hessians (smoothrank.boosting's min_hessian); null: its
    # default, and no key in the cell's settings (a cell holds only the settings that are set)
    min_hessian: _Float | None = None
    params: dict[str, Any] = {}
    num_boost_round: Annotated[_Int, Field(ge=1)] = 500
    early_stopping_rounds: Annotated[_Int, Field(ge=1)] | None = 50
    eval_at: Annotated[_Int, Field(ge=1)] = 10
    # Early stopping criterion: "spec" = the spec's select_by under its convention (as neural runs);
    # "library" = the booster's own NDCG@eval_at.
    select: Literal["spec", "library"] = "spec"
    # Booster parameters to vary: each combination of the lists is one method (see variants()).
    grid: dict[str, Annotated[list[Any], Field(min_length=1)]] = {}

    @property
    def tag(self) -> str:
        return self.label or f"{self.library}-{self.objective.replace(':', '_')}"

    def variants(self) -> list[GBDTSpec]:
        """The methods of this item: itself without a ``grid``; with one, a copy per combination of
        the grid's values (first key outermost), those values added to ``params`` and the label
        ``<tag>-<key><value>-<key><value>...``. A copy's cells, fingerprints included, are those of
        the same method written out as its own item."""
        if not self.grid or _grid_size(self.grid) > MAX_GRID:
            return [self]  # a grid too large is reported by the spec's checks, not expanded
        keys = list(self.grid)
        copies = []
        for values in itertools.product(*(self.grid[key] for key in keys)):
            combo = dict(zip(keys, values, strict=True))
            label = self.tag + "".join(f"-{key}{_label_text(value)}" for key, value in combo.items())
            copies.append(self.model_copy(update={"params": {**self.params, **combo}, "label": label,
                                                  "grid": {}}))
        return copies


def _label_text(value: Any) -> str:
    """A grid value as it appears in a method label: strings as they are, numbers, booleans and null
    as in JSON (0.05, true, null), anything else (a list, a mapping, a YAML date) by its repr, which
    no label can hold: the spec's checks refuse it."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    return repr(value)


# More combinations than this in one item's grid is refused (a typo, not a plan): each one is
# checked against the library or the trainer before anything runs.
MAX_GRID = 10_000


def _grid_size(grid: dict[str, list[Any]]) -> int:
    return math.prod(len(values) for values in grid.values())


class LearnerSpec(_Strict):
    """How a ``weights: learned`` blend fits its weights on validation (smoothrank.experiments.stacking)."""

    loss: str = "list_net"
    options: dict[str, Any] = {}
    l2: Annotated[_Float, Field(ge=0.0)] = 1e-3
    cv: Annotated[_Int, Field(ge=2)] = 5


class BlendSpec(_Strict):
    """A cross-method ensemble: per fold, the members' per-query normalised scores (``normalize``, by
    default the spec's ``ensemble_normalize``) combined, each member
    method weighing the same whatever its number of seed runs (smoothrank.experiments.ensemble),
    or, with ``weights: learned``, with non-negative weights fit on the fold's validation split
    (smoothrank.experiments.stacking)."""

    label: Annotated[str, Field(pattern=_LABEL)]
    members: Annotated[list[str], Field(min_length=2)]
    normalize: Literal["zscore", "rank", "none"] | None = None  # None: the spec's ensemble_normalize
    weights: Literal["equal", "learned"] = "equal"
    learner: LearnerSpec | None = None  # only with weights: learned; None: the defaults


class ExperimentSpec(_Strict):
    """A whole spec (see the module docstring); :func:`expand` lists its cells."""

    name: Annotated[str, Field(pattern=_LABEL)]
    convention: Literal["letor4", "lightgbm", "trec"] = "letor4"
    metrics: list[_MetricName] = ["ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map"]
    select_by: _MetricName = "ndcg@10"
    baseline: str | None = None
    alpha: Annotated[_Float, Field(gt=0.0, lt=1.0)] = 0.05
    # Adjustment of the baseline t-tests' p-values over the methods, per metric (stats.adjust_pvalues);
    # a reporting choice, not part of any cell.
    correction: Literal["none", "holm", "bh"] = "none"
    seeds: list[_Seed] = [0]
    num_threads: Annotated[_Int, Field(ge=1)] = 1
    datasets: list[DatasetSpec]
    neural: dict[str, Any] = {}
    losses: Annotated[list[LossSpec], NamedItems] = []  # [neural_ndcg]: [{name: neural_ndcg}]
    models: list[ModelSpec] = []
    gbdt: list[GBDTSpec] = []
    # Seed ensembles ``<method>+ens<N>`` of every method (smoothrank.experiments.ensemble); they are
    # not cells: they change no run's settings or fingerprint.
    ensemble: _Bool = False
    ensemble_normalize: str = "zscore"
    blends: list[BlendSpec] = []
    # After selection on validation, retrain each run on training + validation for the selected
    # number of epochs / boosting rounds and score the test split with that model (runner docs).
    refit: _Bool = False
    # Set by load_spec: the folder relative paths are resolved against (not part of the YAML).
    base_dir: str = "."

    def loss_methods(self) -> list[LossSpec]:
        """Every loss of the grid, each ``losses`` item's grid expanded (:meth:`LossSpec.variants`)."""
        return [variant for item in self.losses for variant in item.variants()]

    def neural_pairs(self) -> list[tuple[LossSpec, ModelSpec]]:
        """Every (loss, model) of the grid: each loss with every model, or with its ``models``."""
        return [(loss, model) for loss in self.loss_methods() for model in self.models
                if loss.models is None or model.label in loss.models]

    def gbdt_methods(self) -> list[GBDTSpec]:
        """Every GBDT method, each ``gbdt`` item's grid expanded (:meth:`GBDTSpec.variants`)."""
        return [variant for item in self.gbdt for variant in item.variants()]

    def method_labels(self) -> list[str]:
        """Every method label, neural (``loss-model``) then GBDT."""
        return [f"{loss.tag}-{model.label}" for loss, model in self.neural_pairs()] + \
               [g.tag for g in self.gbdt_methods()]

    def ensemble_labels(self) -> list[str]:
        """The seed-ensemble method labels ``<method>+ens<N>`` (none unless ``ensemble: true``)."""
        if not self.ensemble:
            return []
        return [f"{label}+ens{len(self.seeds)}" for label in self.method_labels()]

    def blend_labels(self) -> list[str]:
        """The labels of the cross-method ensembles (``blends:``)."""
        return [blend.label for blend in self.blends]


# ------------------------------------------------------------------------------ cells
class Cell(_Strict):
    """One run of the grid: a dataset fold, a method, a seed; ``settings`` fixes the result."""

    dataset: str
    fold: int | None
    method: str
    kind: Literal["neural", "gbdt"]
    seed: int
    settings: dict[str, Any]

    @property
    def run_id(self) -> str:
        fold = f"fold{self.fold}" if self.fold is not None else "files"
        return f"{self.dataset}--{fold}--{self.method}--seed{self.seed}"

    def identity(self) -> dict[str, Any]:
        """Everything that determines the result, as JSON: the cell with each data file replaced by
        the SHA-256 of its contents (so that an experiment folder and its data can move to another
        checkout or machine and still resume)."""
        dumped = self.model_dump(mode="json")
        settings = dumped["settings"]
        for data in (settings.get("data"), settings.get("config", {}).get("data")):
            if isinstance(data, dict):
                for split in ("train", "valid", "test"):
                    if isinstance(data.get(split), str):
                        data[split] = _file_digest(data[split])
        return dumped

    def fingerprint(self) -> str:
        """SHA-256 of :meth:`identity` (a finished or interrupted run with another is stale)."""
        blob = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()


def _file_digest(path: str) -> str:
    """``sha256:<hex>`` of a data file's bytes (cached per path, size and modification time), followed
    by ``;query:sha256:<hex>`` of the ``.query`` side file that the reader takes its query sizes from,
    where it reads one (two queries merged there change the results as much as the data)."""
    from smoothrank.data.letor import auto_query_file

    digest = _content_digest(path)
    side = auto_query_file(path) if not digest.startswith("missing:") else None
    return digest if side is None else f"{digest};query:{_content_digest(str(side))}"


def _content_digest(path: str) -> str:
    try:
        stat = Path(path).stat()
    except OSError:
        return f"missing:{path}"  # the run itself reports the missing file
    return _cached_file_digest(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _cached_file_digest(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _data_section(ds: DatasetSpec, fold: int | None, base: Path) -> dict[str, Any]:
    if ds.mq2008_folds is not None:
        return {"mq2008_fold": fold}
    out: dict[str, Any] = {}
    for split in ("train", "valid", "test"):
        path = ds.path(split, fold)
        if path is not None:
            out[split] = str((base / path).resolve())
    if ds.n_features is not None:
        out["n_features"] = ds.n_features
    if ds.null_value is not None:  # only when set: the cells of specs without it are unchanged
        out["null_value"] = ds.null_value
    return out


def neural_config_dict(spec: ExperimentSpec, loss: LossSpec, model: ModelSpec, ds: DatasetSpec,
                       fold: int | None, seed: int) -> dict[str, Any]:
    """The :class:`smoothrank.training.Config` mapping of one neural cell."""
    config = _deep_merge(spec.neural, loss.overrides)
    config.pop("output", None)
    config["seed"] = seed
    config["data"] = _data_section(ds, fold, Path(spec.base_dir))
    config["model"] = {**model.model_config_dict(), **loss.model_options}
    config["loss"] = {"name": loss.name, "options": dict(loss.options)}
    config.setdefault("training", {})
    config["training"] = {**config["training"], "num_threads": spec.num_threads}
    config["evaluation"] = {**config.get("evaluation", {}), "metrics": list(spec.metrics),
                            "select_by": spec.select_by, "convention": spec.convention}
    return config


def _refit_setting(spec: ExperimentSpec) -> dict[str, Any]:
    # Only present when on: a cell (and its fingerprint) holds only the settings that are set.
    return {"refit": True} if spec.refit else {}


def expand(spec: ExperimentSpec) -> list[Cell]:
    """Every cell of the grid, datasets outermost, seeds innermost."""
    cells: list[Cell] = []
    base = Path(spec.base_dir)
    for ds in spec.datasets:
        for fold in ds.fold_list():
            for loss, model in spec.neural_pairs():
                for seed in spec.seeds:
                    settings = {"config": neural_config_dict(spec, loss, model, ds, fold, seed),
                                "convention": spec.convention, "metrics": list(spec.metrics),
                                **_refit_setting(spec)}
                    cells.append(Cell(dataset=ds.name, fold=fold, method=f"{loss.tag}-{model.label}",
                                      kind="neural", seed=seed, settings=settings))
            for gb in spec.gbdt_methods():
                for seed in spec.seeds:
                    settings = {"data": _data_section(ds, fold, base), "gbdt": _gbdt_settings(gb),
                                "num_threads": spec.num_threads, "convention": spec.convention,
                                "metrics": list(spec.metrics), "select_by": spec.select_by,
                                **_refit_setting(spec)}
                    cells.append(Cell(dataset=ds.name, fold=fold, method=gb.tag, kind="gbdt", seed=seed,
                                      settings=settings))
    return cells


def _gbdt_settings(gb: GBDTSpec) -> dict[str, Any]:
    """A GBDT cell's settings: a library objective's leave out the loss keys, and an unset
    ``min_hessian`` is left out (a cell, and its fingerprint, holds only the settings in use)."""
    from smoothrank.experiments.gbdt import is_loss_objective

    loss_keys = {"min_hessian"} if gb.min_hessian is None else set()
    if not is_loss_objective(gb.library, gb.objective):
        loss_keys |= {"options", "hessian", "min_hessian"}
    # ``grid`` is empty on an expanded method: its values are in ``params``.
    return gb.model_dump(mode="json", exclude={"label", "grid", *loss_keys})


# ------------------------------------------------------------------------------ validation
def _without_validation(spec: ExperimentSpec) -> list[tuple[int, DatasetSpec]]:
    """The file datasets with no validation split (the bundled MQ2008 folds all have one)."""
    return [(i, ds) for i, ds in enumerate(spec.datasets) if ds.mq2008_folds is None and ds.valid is None]


def _valid_is_test(spec: ExperimentSpec) -> list[tuple[int, Any]]:
    """The file datasets whose validation file is their test file (LightGBM's example does that)."""
    base = Path(spec.base_dir)
    return [(i, ds) for i, ds in enumerate(spec.datasets) if ds.valid is not None and ds.test is not None
            and (base / ds.valid).resolve() == (base / ds.test).resolve()]


def _refit_problems(spec: ExperimentSpec) -> list[str]:
    """A refit trains on the validation split, so it must exist and must not be the test split."""
    problems = [f"refit: datasets.{i} ({ds.name}) has no validation split (valid:) to refit on"
                for i, ds in _without_validation(spec)]
    return problems + [f"refit: datasets.{i} ({ds.name}) uses its test file as the validation split; a refit "
                       "would train on the test queries" for i, ds in _valid_is_test(spec)]


# Training settings the spec's own keys set in every neural run's config (neural_config_dict):
# given under ``neural`` or a loss's ``overrides`` they would be silently replaced.
_SPEC_OWNED = {("evaluation", "metrics"): "metrics", ("evaluation", "select_by"): "select_by",
               ("evaluation", "convention"): "convention", ("training", "num_threads"): "num_threads"}


def _spec_owned_problems(settings: dict[str, Any], where: str) -> list[str]:
    return [f"{where}.{section}.{key}: every run uses the spec's top-level {owner}; set it there"
            for (section, key), owner in _SPEC_OWNED.items()
            if isinstance(settings.get(section), dict) and key in settings[section]]


def _seed_problems(spec: ExperimentSpec) -> list[str]:
    if not spec.seeds:
        return ["seeds: at least one seed is required"]
    twice = sorted({seed for seed in spec.seeds if spec.seeds.count(seed) > 1})
    if twice:
        # A repeated seed is the same run twice: it would count twice in the summaries.
        return [f"seeds: {twice} listed twice"]
    from smoothrank.experiments.gbdt import SEED_LIMITS

    for library in sorted({gb.library for gb in spec.gbdt}):
        # Beyond its limit a library folds seeds onto smaller ones: two "different" seeds, one model.
        if max(spec.seeds) > SEED_LIMITS[library]:
            return [f"seeds: {library} keeps seeds 0..{SEED_LIMITS[library]} apart (a larger one gives the "
                    f"model of a smaller one), got {max(spec.seeds)}"]
    return []


def _grid_problems(item: GBDTSpec, where: str) -> list[str]:
    """A key that is not a parameter name, is the harness's, names a parameter that ``params`` or an
    earlier grid key already sets (aliases included), or that LightGBM does not know; then the
    values' problems (:func:`_grid_value_problems`)."""
    from smoothrank.experiments.gbdt import canonical_param, reserved_param, unknown_params

    problems = []
    given = {canonical_param(item.library, key): key for key in item.params}
    varied: dict[str, str] = {}  # parameter -> the first grid key that varies it
    for key in item.grid:
        if not re.fullmatch(r"[A-Za-z0-9_]+", key):
            problems.append(f"{where}.grid.{key!r}: not a booster parameter name (letters, digits and _); "
                            "loss options and other settings cannot be varied by a gbdt grid, write those "
                            "methods out as items")
        elif (reserved := reserved_param(item.library, key)) is not None:
            named = "" if reserved == key else f" (= {reserved})"
            problems.append(f"{where}.grid.{key}{named}: set by the harness (from the spec's objective, "
                            "seeds, num_boost_round, early_stopping_rounds, eval_at and num_threads), not by "
                            "a grid; write such methods out as items")
        elif (other := given.get(canonical_param(item.library, key))) is not None:
            same = "" if other == key else f" (as {other}, the same parameter)"
            problems.append(f"{where}.grid.{key}: also set in params{same}; give it in one place")
        elif (other := varied.setdefault(canonical_param(item.library, key), key)) != key:
            problems.append(f"{where}.grid.{key}: the same parameter as grid key {other}; vary it once")
        elif unknown_params(item.library, {key: None}):  # XGBoost's: in each combination's check
            problems.append(f"{where}.grid.{key}: not a {item.library} parameter (misspelt? {item.library} "
                            "would only warn and ignore it, and the grid's methods would not differ)")
    return problems + _grid_value_problems(item.grid, where)


def _loss_grid_problems(item: LossSpec, where: str) -> list[str]:
    """As :func:`_grid_problems`, for a loss's grid of dotted paths into its options, overrides and
    model options."""
    return _loss_grid_path_problems(item, where) + _grid_value_problems(item.grid, where)


def _loss_grid_path_problems(item: LossSpec, where: str) -> list[str]:
    problems = []
    for key in item.grid:
        section, *path = key.split(".")
        if section not in _LOSS_GRID_SECTIONS or not path or not all(path):
            problems.append(f"{where}.grid.{key}: expected options.<name>, overrides.<section>.<key> or "
                            "model_options.<name>")
        elif (problem := _path_problem(getattr(item, section), path)) is not None:
            problems.append(f"{where}.grid.{key}: {problem}")
        inner = [other for other in item.grid if other.startswith(key + ".")]
        if inner:
            problems.append(f"{where}.grid.{key}: {inner} vary settings inside it; give one or the other")
    return problems


def _grid_value_problems(grid: dict[str, list[Any]], where: str) -> list[str]:
    problems = []
    if (size := _grid_size(grid)) > MAX_GRID:
        problems.append(f"{where}.grid: {size} combinations, more than the {MAX_GRID} one item may have")
    for key, values in grid.items():
        texts = [_label_text(value) for value in values]
        twice = sorted({text for text in texts if texts.count(text) > 1})
        if twice:
            problems.append(f"{where}.grid.{key}: values that give the same label text {twice} more than "
                            "once (a value listed twice?)")
        # 1 and 1.0, true and 1, "1e3" and 1000 are two labels for one setting: the same runs twice.
        equal = [(a, b) for i, a in enumerate(values) for b in values[i + 1:]
                 if _as_number(a) == _as_number(b) and _label_text(a) != _label_text(b)]
        if equal:
            problems.append(f"{where}.grid.{key}: {', '.join(f'{a!r} and {b!r}' for a, b in equal)} are one "
                            "value under two labels (the same setting twice); list it once")
        bad = [value for value in values if not re.fullmatch(rf"[{_LABEL_CHARS}]+", _label_text(value))]
        if bad:
            problems.append(f"{where}.grid.{key}: {bad} cannot be part of a method label (letters, digits, "
                            "_ . @ + - only); write such values out as separate items with a label")
    return problems


def _combination_problems(where: str, found: list[tuple[str, list[str]]]) -> list[str]:
    """The problems of a grid's combinations (``[(label, problems at where)]``), each naming its
    method: ``where (label).key: ...``. A problem that several combinations share word for word
    (a misspelt key, a refused option) is reported once, naming the first and how many more."""
    labels: dict[str, list[str]] = {}
    for label, problems in found:
        for problem in problems:
            labels.setdefault(problem.removeprefix(where), []).append(label)
    return [f"{where} ({names[0]}{f' and {len(names) - 1} more' if len(names) > 1 else ''}){rest}"
            for rest, names in labels.items()]


def _as_number(value: Any) -> Any:
    """A string that reads as a number (PyYAML reads ``1e3``, without a dot, as a string), as that
    number; else the value."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _loss_problems(loss: LossSpec, where: str) -> list[str]:
    """What the trainer would refuse in a loss item of a known loss: keys the grid sets, spec-owned
    settings, model keys, unknown options and option values (computed once on a tiny batch)."""
    from smoothrank import losses as loss_registry
    from smoothrank.training.config import check_loss_options

    problems = [f"{where}.overrides.{key}: set by the grid, not by a loss override"
                for key in sorted(set(loss.overrides) & _GRID_KEYS)]
    problems += _spec_owned_problems(loss.overrides, f"{where}.overrides")
    problems += [f"{where}.model_options.{key}: set by the model, not by a loss"
                 for key in sorted(set(loss.model_options) & {"kind", "label"})]
    unknown = sorted(set(loss.options) - set(loss_registry.options(loss.name)))
    if unknown:
        return [*problems, f"{where}.options: unknown option(s) {unknown} for {loss.name!r}"]
    try:
        check_loss_options(loss.name, loss.options)  # the values too, not hours into the grid
    except (SmoothrankError, TypeError, ValueError) as err:
        problems.append(f"{where}.options: {err}")
    return problems


def _gbdt_problems(gb: GBDTSpec, where: str) -> list[str]:
    """What the library (or smoothrank.boosting) would refuse in a gbdt item, probed on a tiny array."""
    from smoothrank.experiments.gbdt import check_gbdt

    try:
        check_gbdt(gb.library, gb.objective, gb.params, where=where, loss_options=gb.options,
                   hessian=gb.hessian, min_hessian=gb.min_hessian)
    except ConfigError as err:
        return [str(err)]
    return []


def _semantic_problems(spec: ExperimentSpec) -> list[str]:
    """Every problem of a spec that its schema let through, by its focused checkers; a refused grid
    (its problems reported) may lack methods, so references to methods wait until it is sound."""
    problems = [*_metric_problems(spec), *_seed_problems(spec), *_dataset_problems(spec),
                *_grid_shape_problems(spec)]
    loss_problems, refused_losses = _loss_item_problems(spec)
    gbdt_problems, refused_gbdt = _gbdt_item_problems(spec)
    refused_grid = refused_losses or refused_gbdt
    problems += loss_problems + gbdt_problems + _blend_problems(spec, refused_grid=refused_grid)
    if spec.refit:
        problems += _refit_problems(spec)
    problems += _label_problems(spec, refused_grid=refused_grid)
    if not problems and spec.losses:
        problems += _neural_config_problems(spec)
    return problems


def _metric_problems(spec: ExperimentSpec) -> list[str]:
    """Metrics that cannot be computed under the spec's convention or are listed twice, and a
    ``select_by`` that is not among them."""
    from smoothrank.training.config import check_metric

    problems: list[str] = []
    for i, name in enumerate(spec.metrics):
        try:
            check_metric(name, spec.convention)
        except ConfigError as err:
            problems.append(f"metrics.{i}: {err}")
    twice = sorted({m for m in spec.metrics if spec.metrics.count(m) > 1})
    if twice:
        problems.append(f"metrics: {twice} listed twice")
    if spec.select_by not in spec.metrics:
        problems.append(f"select_by: {spec.select_by!r} must be one of metrics {spec.metrics}")
    return problems


def _dataset_problems(spec: ExperimentSpec) -> list[str]:
    """No dataset, a name used twice, MQ2008 folds beside files or repeated, a file dataset without its
    training and test files, or a file that does not exist."""
    problems = [] if spec.datasets else ["datasets: at least one dataset is required"]
    base = Path(spec.base_dir)
    names = [d.name for d in spec.datasets]
    for i, ds in enumerate(spec.datasets):
        if names.count(ds.name) > 1:
            problems.append(f"datasets.{i}.name: {ds.name!r} is used twice")
        files = [s for s in ("train", "valid", "test") if getattr(ds, s) is not None]
        if ds.mq2008_folds is not None:
            if files:
                problems.append(f"datasets.{i}: mq2008_folds and train/valid/test are exclusive")
            if not ds.mq2008_folds or len(set(ds.mq2008_folds)) != len(ds.mq2008_folds):
                problems.append(f"datasets.{i}.mq2008_folds: expected distinct folds among 1..5")
            continue
        if ds.train is None or ds.test is None:
            problems.append(f"datasets.{i}: give mq2008_folds, or train and test files (valid optional)")
        problems += _fold_problems(ds, i, files, base)
    return problems


_GRID_KEYS = {"data", "model", "loss", "seed", "output"}  # training settings that the grid sets


def _grid_shape_problems(spec: ExperimentSpec) -> list[str]:
    """An empty grid, losses without models (or models without losses), and shared ``neural`` settings
    that the grid or the spec's own keys set."""
    problems = []
    if not spec.gbdt and not (spec.losses and spec.models):
        problems.append("losses/models/gbdt: the grid is empty (give losses and models, or gbdt baselines)")
    if spec.losses and not spec.models:
        problems.append("models: losses are given but no model to train them with")
    if spec.models and not spec.losses:
        problems.append("losses: models are given but no loss to train them with")
    problems += [f"neural.{key}: set by the grid (datasets, models, losses, seeds, --out), not by the shared "
                 "neural settings" for key in sorted(set(spec.neural) & _GRID_KEYS)]
    return problems + _spec_owned_problems(spec.neural, "neural")


def _loss_item_problems(spec: ExperimentSpec) -> tuple[list[str], bool]:
    """The problems of the ``losses`` items (their models, grids, names, options, and each combination
    of a sound grid as if written out), and whether a grid was refused."""
    from smoothrank import losses as loss_registry

    problems: list[str] = []
    refused_grid = False
    available = set(loss_registry.available())
    labels = [model.label for model in spec.models]
    for i, item in enumerate(spec.losses):
        unknown_models = [m for m in item.models or [] if m not in labels]
        if unknown_models:
            problems.append(f"losses.{i}.models: {unknown_models} not model label(s) of the spec; models: "
                            f"{labels}")
        elif item.models is not None and not item.models:
            problems.append(f"losses.{i}.models: empty; omit it to train the loss with every model")
        grid_problems = _loss_grid_problems(item, f"losses.{i}")
        refused_grid |= bool(grid_problems)
        problems += grid_problems
        if item.name not in available:
            problems.append(f"losses.{i}.name: unknown loss {item.name!r}; available: {sorted(available)}")
            continue
        own = _loss_problems(item, f"losses.{i}")
        problems += own
        # The item's own problems are reported once, above, not once per combination.
        if item.grid and not grid_problems and not own:
            problems += _combination_problems(f"losses.{i}", [(loss.tag, _loss_problems(loss, f"losses.{i}"))
                                                             for loss in item.variants()])
    return problems, refused_grid


def _gbdt_item_problems(spec: ExperimentSpec) -> tuple[list[str], bool]:
    """The problems of the ``gbdt`` items (their grids, the item without its grid, and each combination
    of a sound grid), and whether a grid was refused."""
    problems: list[str] = []
    refused_grid = False
    for i, item in enumerate(spec.gbdt):
        grid_problems = _grid_problems(item, f"gbdt.{i}")
        refused_grid |= bool(grid_problems)
        own = _gbdt_problems(item, f"gbdt.{i}")
        problems += grid_problems + own
        if item.grid and not grid_problems and not own:
            problems += _combination_problems(f"gbdt.{i}", [(gb.tag, _gbdt_problems(gb, f"gbdt.{i}"))
                                                            for gb in item.variants()])
    return problems, refused_grid


def _blend_problems(spec: ExperimentSpec, *, refused_grid: bool) -> list[str]:
    """Seed ensembles without two seeds, an unknown normalisation, blends of unknown or repeated
    members, learners that are not used or refuse their options, and learned blends on datasets
    without a validation split of their own."""
    from smoothrank import losses as loss_registry
    from smoothrank.training.config import check_loss_options

    problems = []
    if spec.ensemble and len(set(spec.seeds)) < 2:
        problems.append(f"ensemble: a seed ensemble needs at least 2 distinct seeds, got seeds: {spec.seeds}")
    if spec.ensemble_normalize not in ("zscore", "rank", "none"):
        problems.append(f"ensemble_normalize: expected zscore, rank or none, got {spec.ensemble_normalize!r}")
    methods = spec.method_labels()
    for i, blend in enumerate(spec.blends):
        unknown = [m for m in blend.members if m not in methods]
        if unknown and not refused_grid:
            problems.append(f"blends.{i}.members: {unknown} not method(s) of the grid (seed ensembles and "
                            f"blends cannot be members); methods: {methods}")
        twice = sorted({m for m in blend.members if blend.members.count(m) > 1})
        if twice:
            problems.append(f"blends.{i}.members: {twice} listed twice")
        if blend.learner is not None:
            if blend.weights != "learned":
                problems.append(f"blends.{i}.learner: only with weights: learned")
            try:
                check_loss_options(blend.learner.loss, blend.learner.options)
            except ConfigError as err:
                key = "options" if blend.learner.loss in loss_registry.available() else "loss"
                problems.append(f"blends.{i}.learner.{key}: {err}")
    if any(b.weights == "learned" for b in spec.blends):
        if _without_validation(spec):
            problems.append("blends: a learned blend fits its weights on the validation split; every dataset "
                            "needs one (valid:)")
        problems += [f"blends: datasets.{i} ({ds.name}) uses its test file as the validation split; a "
                     "learned blend would fit its weights on the test queries"
                     for i, ds in _valid_is_test(spec)]
    return problems


def _label_problems(spec: ExperimentSpec, *, refused_grid: bool) -> list[str]:
    """Method labels that are not valid run folder names or are used twice, dataset names holding the
    folder names' separator, and a baseline that is not a method."""
    methods = spec.method_labels()
    # A grid's labels are built from its keys and values, which are checked by then; this is the guard
    # that no label (a run folder's name) escapes the pattern whatever made it.
    problems = [f"losses/gbdt: method label {label!r} is not a valid label (letters, digits, _ . @ + -)"
                for label in methods if not re.fullmatch(_LABEL, label)]
    labels = methods + spec.ensemble_labels() + spec.blend_labels()
    # "--" joins the parts of a run folder's name (dataset--fold--method--seed): inside a part it
    # would let two cells share one folder.
    problems += [f"datasets.{i}.name: {ds.name!r} holds '--', the separator of run folder names"
                 for i, ds in enumerate(spec.datasets) if "--" in ds.name]
    problems += [f"losses/gbdt/blends: method label {label!r} holds '--', the separator of run folder names"
                 for label in dict.fromkeys(labels) if "--" in label]
    problems += [f"losses/models/gbdt/blends: method label {label!r} is used twice (set label:)"
                 for label in sorted({x for x in labels if labels.count(x) > 1})]
    if spec.baseline is not None and spec.baseline not in labels and not refused_grid:
        problems.append(f"baseline: {spec.baseline!r} is not a method of the grid; methods: {labels}")
    return problems


def _neural_config_problems(spec: ExperimentSpec) -> list[str]:
    """Each loss x model training config validated now, not hours into the grid (on the first dataset,
    fold and seed; the loss options were probed once per loss already)."""
    from smoothrank.training.config import config_from_dict, inherited_schedule_options

    problems = []
    ds = spec.datasets[0]
    fold = ds.fold_list()[0] if ds.fold_list() else None
    for loss, model in spec.neural_pairs():
        try:
            config = neural_config_dict(spec, loss, model, ds, fold, spec.seeds[0])
            config_from_dict(config, source=f"neural settings of {loss.tag}-{model.label}", probe_loss=False,
                             inherited_schedule=inherited_schedule_options(spec.neural, loss.overrides))
        except ConfigError as err:
            problems.append(str(err).replace("\n", "\n    "))
    return problems


def _fold_problems(ds: DatasetSpec, i: int, files: list[str], base: Path) -> list[str]:
    """A file dataset's folds and paths: ``{fold}`` in every path exactly when ``folds`` is given
    (else each fold would read the same files), distinct folds, and each fold's files exist."""
    problems: list[str] = []
    if ds.folds is not None:
        if not ds.folds or len(set(ds.folds)) != len(ds.folds):
            problems.append(f"datasets.{i}.folds: expected distinct fold numbers")
        same = [s for s in files if "{fold}" not in getattr(ds, s)]
        problems += [f"datasets.{i}.{s}: folds are given but the path has no {{fold}} to put them in"
                     for s in same]
        if same:
            return problems
    else:
        problems += [f"datasets.{i}.{s}: {{fold}} in the path needs folds: [1, 2, ...] beside it"
                     for s in files if "{fold}" in getattr(ds, s)]
    for fold in ds.fold_list():
        for split in files:
            path = base / str(ds.path(split, fold))
            if not path.is_file():
                where = f" (fold {fold})" if fold is not None else ""
                problems.append(f"datasets.{i}.{split}: no such file{where}: {path}")
    return problems


def _validated(data: dict[str, Any], base_dir: str | Path) -> tuple[Any, list[str]]:
    """The spec and every problem of ``data``. Unknown top-level keys are problems of their own:
    the rest of the spec is still checked (a misspelt key must not hide its other errors)."""
    unknown = [k for k in data if k not in ExperimentSpec.model_fields or k == "base_dir"]
    problems = [f"{k}: unknown key" for k in unknown]
    try:
        spec = ExperimentSpec.model_validate({**{k: v for k, v in data.items() if k not in unknown},
                                              "base_dir": str(base_dir)})
    except ValidationError as err:
        return None, problems + validation_problems(err)
    return spec, problems + _semantic_problems(spec)


def spec_from_dict(data: Any, *, source: str = "spec", base_dir: str | Path = ".") -> ExperimentSpec:
    """Validate a mapping; raise :class:`ConfigError` listing every problem, prefixed by ``source``."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    spec, problems = _validated(data, base_dir)
    if problems:
        raise problems_error(source, "experiment spec", problems)
    return spec


def load_spec(path: str | Path) -> ExperimentSpec:
    """Read and validate a YAML spec; relative data paths are taken from the spec's folder."""
    from smoothrank.training.config import read_text_file

    path = Path(path)
    text = read_text_file(path)  # names the path if missing or not UTF-8
    try:
        data = safe_load(text, name=str(path))
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    return spec_from_dict(data, source=str(path), base_dir=path.resolve().parent)
