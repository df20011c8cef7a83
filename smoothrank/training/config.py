"""The training configuration: one validated document (YAML or TOML) for a whole run.

Every section forbids unknown keys, so a typo is an error, not a silently ignored option. All
problems of a document are reported together in one :class:`~smoothrank.errors.ConfigError`
before anything is written or trained. Any option can be overridden from the command line with
a dotted path, ``optimizer.lr=0.0005`` or ``model.hidden=[32,16]`` (values are parsed as YAML).
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_validator, model_validator

from smoothrank._config import NamedItems, StrictModel, problems_error, validation_problems
from smoothrank._config_types import SEED_MAX as SEED_MAX
from smoothrank._config_types import Bool as _Bool
from smoothrank._config_types import Float as _Float
from smoothrank._config_types import Int as _Int
from smoothrank._config_types import MetricName as _MetricName
from smoothrank._config_types import Seed as _Seed
from smoothrank._yaml import safe_load
from smoothrank.errors import ConfigError

__all__ = [
    "Config",
    "apply_overrides",
    "check_loss_options",
    "check_metric",
    "config_from_dict",
    "dump_config",
    "load_config",
]


class _Section(StrictModel, BaseModel):  # BaseModel named too: ruff (RUF012) knows pydantic models by it
    """A section of the configuration (unknown keys refused, immutable)."""


class DataConfig(_Section):
    """Where the splits come from: LETOR files (or BM25F statistics folders, docs/bm25f.md), or the
    bundled MQ2008 fold (``mq2008_fold``)."""

    train: str | None = None
    valid: str | None = None
    test: str | None = None
    mq2008_fold: Annotated[_Int, Field(ge=1, le=5)] | None = None
    n_features: Annotated[_Int, Field(ge=1)] | None = None
    # LETOR 3.0's NULL features: a fill number (default 0.0, with a note), or "nan" (GBDT only).
    null_value: float | str | None = None

    @field_validator("null_value", mode="after")
    @classmethod
    def _null_value(cls, value: Any) -> Any:
        from smoothrank.data.missing import check_null_value

        return check_null_value(value, "null_value")

    @model_validator(mode="after")
    def _one_source(self) -> DataConfig:
        from smoothrank.datasets import data_section_problem

        problem = data_section_problem(self.model_dump())
        if problem is not None:
            raise ValueError(problem)
        return self


class TransformConfig(_Section):
    """One feature transform, fitted on the training split (``smoothrank.data.transforms``)."""

    name: Literal["standardize", "signed_log1p", "query_minmax"]
    #: 0-based columns (column j holds LETOR feature j + 1 of a one-based file)
    features: list[Annotated[_Int, Field(ge=0)]] | None = None

    @model_validator(mode="after")
    def _features_only_where_used(self) -> TransformConfig:
        # Only signed_log1p takes a column subset; elsewhere it would be silently ignored.
        if self.features is not None and self.name != "signed_log1p":
            raise ValueError(f"features: only signed_log1p takes a column subset; {self.name} "
                             "always transforms every column")
        return self


class LinearModelConfig(_Section):
    kind: Literal["linear"]


class MLPModelConfig(_Section):
    kind: Literal["mlp"]
    hidden: list[Annotated[_Int, Field(ge=1)]] = [64]
    activation: Literal["relu", "tanh", "sigmoid", "gelu", "leaky_relu", "identity"] = "relu"
    dropout: Annotated[_Float, Field(ge=0.0, lt=1.0)] = 0.0
    norm: Literal["none", "batch", "layer"] = "none"
    output_activation: Literal["relu", "tanh", "sigmoid", "gelu", "leaky_relu", "identity"] | None = None


class ContextAwareModelConfig(_Section):
    """Defaults: the NeuralNDCG paper's Web30K architecture (section 5.2)."""

    kind: Literal["context_aware"]
    input_dim: Annotated[_Int, Field(ge=1)] = 96
    n_blocks: Annotated[_Int, Field(ge=1)] = 2
    n_heads: Annotated[_Int, Field(ge=1)] = 1
    hidden: Annotated[_Int, Field(ge=1)] = 384
    dropout: Annotated[_Float, Field(ge=0.0, lt=1.0)] = 0.1
    input_activation: Literal["relu", "tanh", "gelu", "identity"] | None = "relu"
    output_activation: Literal["relu", "tanh", "sigmoid", "gelu", "leaky_relu", "identity"] | None = "tanh"

    @model_validator(mode="after")
    def _heads_divide_the_width(self) -> ContextAwareModelConfig:
        # Found when the model is built otherwise: hours into an experiment grid.
        if self.input_dim % self.n_heads != 0:
            raise ValueError(f"input_dim ({self.input_dim}) must be divisible by n_heads ({self.n_heads})")
        return self


class BM25FModelConfig(_Section):
    """Learnable BM25F (:class:`smoothrank.models.BM25F`) on a BM25F statistics folder (docs/bm25f.md)."""

    kind: Literal["bm25f"]
    fields: Annotated[list[str], Field(min_length=1)]
    k1: Annotated[_Float, Field(gt=0.0)] = 1.2
    b: Annotated[_Float, Field(ge=0.0, le=1.0)] | list[Annotated[_Float, Field(ge=0.0, le=1.0)]] | dict[
        str, Annotated[_Float, Field(ge=0.0, le=1.0)]] = 0.75
    weights: Annotated[_Float, Field(ge=0.0)] | list[Annotated[_Float, Field(ge=0.0)]] | dict[
        str, Annotated[_Float, Field(ge=0.0)]] = 1.0
    query_independent: Annotated[_Int, Field(ge=0)] = 0
    hidden: Annotated[_Int, Field(ge=1)] | None = None
    learn: list[Literal["weights", "b", "k1"]] = ["weights", "b", "k1"]

    @model_validator(mode="after")
    def _values_per_field(self) -> BM25FModelConfig:
        if len(set(self.fields)) != len(self.fields):
            raise ValueError(f"fields: expected distinct names, got {self.fields}")
        for name in ("b", "weights"):
            value = getattr(self, name)
            if isinstance(value, list) and len(value) != len(self.fields):
                raise ValueError(f"{name}: {len(value)} values for {len(self.fields)} fields {self.fields}")
            if isinstance(value, dict) and set(value) != set(self.fields):
                raise ValueError(f"{name}: expected one value for each of the fields {self.fields}, "
                                 f"got {sorted(value)}")
        return self


ModelConfig = Annotated[LinearModelConfig | MLPModelConfig | ContextAwareModelConfig | BM25FModelConfig,
                        Field(discriminator="kind")]
_MODEL_KINDS = ("linear", "mlp", "context_aware", "bm25f")


class LossConfig(_Section):
    """A loss from the registry (``smoothrank losses`` lists the names and their options)."""

    name: str = "neural_ndcg"
    options: dict[str, Any] = {}


class OptimizerConfig(_Section):
    name: Literal["adam", "sgd"] = "adam"
    lr: Annotated[_Float, Field(gt=0.0)] = 1e-3
    weight_decay: Annotated[_Float, Field(ge=0.0)] = 0.0
    momentum: Annotated[_Float, Field(ge=0.0, lt=1.0)] = 0.0

    @model_validator(mode="after")
    def _momentum_only_for_sgd(self) -> OptimizerConfig:
        # Adam has no momentum option (its moments are betas): a value would be silently ignored.
        if self.momentum != 0.0 and self.name != "sgd":
            raise ValueError(f"momentum: only the sgd optimizer takes it, not {self.name}")
        return self


class ScheduleConfig(_Section):
    """Learning-rate protocol.

    ``none``; ``step``: ``lr * gamma ** (epoch // step_size)`` (NeuralNDCG paper: x0.1 after 50 of
    100 epochs); ``softrank``: ``lr * factor`` whenever the end-of-epoch training ``metric`` does not
    improve, and re-initialised weights after ``reinit_patience`` epochs without improvement
    (Taylor et al. 2008, section 4.5: 0.8, NDCG@10, 16).
    """

    name: Literal["none", "step", "softrank"] = "none"
    step_size: Annotated[_Int, Field(ge=1)] = 50
    gamma: Annotated[_Float, Field(gt=0.0, le=1.0)] = 0.1
    factor: Annotated[_Float, Field(gt=0.0, le=1.0)] = 0.8
    metric: _MetricName = "ndcg@10"
    reinit_patience: Annotated[_Int, Field(ge=1)] | None = 16

    @model_validator(mode="after")
    def _options_of_the_named_schedule(self, info: ValidationInfo) -> ScheduleConfig:
        # An option of another schedule would be silently ignored ({step_size: 10} alone keeps name
        # "none"), as momentum would be with Adam. A default value is no choice (a saved config
        # holds every field). An option inherited from a base whose schedule an overlay renamed
        # (config_from_dict's inherited_schedule) was chosen for the base's schedule: it is reset to
        # its default, which is what this schedule does with it, so the resolved config says so and
        # loads again.
        inherited = (info.context or {}).get("inherited_schedule", ())
        reset = {}
        for option, owner in SCHEDULE_OPTIONS.items():
            default = ScheduleConfig.model_fields[option].default
            if owner == self.name or getattr(self, option) == default:
                continue
            if option not in inherited:
                raise ValueError(f"{option}: only the {owner} schedule takes it, not {self.name!r} "
                                 f"(set name: {owner})")
            reset[option] = default
        return self.model_copy(update=reset) if reset else self


#: Which schedule each option of :class:`ScheduleConfig` belongs to.
SCHEDULE_OPTIONS = {"step_size": "step", "gamma": "step", "factor": "softrank", "metric": "softrank",
                    "reinit_patience": "softrank"}


def inherited_schedule_options(base: Any, overlay: Any) -> frozenset[str]:
    """The ``schedule`` options of ``base`` (a config file, an experiment's shared ``neural``
    settings) that ``overlay`` (command-line overrides, a loss's ``overrides``) leaves alone while it
    renames the schedule: options of the base's own schedule, chosen for it and not for the new one,
    so not refused as options of another schedule (an option the overlay sets, or one the base held
    for a schedule it did not name, still is)."""
    old = base.get("schedule") if isinstance(base, Mapping) else None
    new = overlay.get("schedule") if isinstance(overlay, Mapping) else None
    if not isinstance(old, Mapping) or not isinstance(new, Mapping) or "name" not in new:
        return frozenset()
    old_name = old.get("name", "none")
    if new["name"] == old_name:
        return frozenset()
    return frozenset(k for k in old if k not in new and SCHEDULE_OPTIONS.get(k) == old_name)


class TrainingConfig(_Section):
    epochs: Annotated[_Int, Field(ge=1)] = 100
    batch_size: Annotated[_Int, Field(ge=1)] = 64
    list_size: Annotated[_Int, Field(ge=1)] = 240
    sampling: Literal["random", "softrank"] = "random"
    pad: Literal["list_size", "longest"] = "list_size"
    length_groups: Annotated[_Int, Field(ge=1)] = 1
    grad_clip: Annotated[_Float, Field(gt=0.0)] | None = None
    early_stopping_patience: Annotated[_Int, Field(ge=1)] | None = None
    num_threads: Annotated[_Int, Field(ge=1)] | None = None
    deterministic: _Bool = True
    device: str = "cpu"
    precision: Literal["float32", "bfloat16", "float16"] = "float32"
    distributed_timeout: Annotated[_Float, Field(gt=0.0)] = 600.0


class EvaluationConfig(_Section):
    """Validation metrics; ``select_by`` picks the best epoch (validation split only)."""

    metrics: list[_MetricName] = ["ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map"]
    select_by: _MetricName = "ndcg@10"
    convention: Literal["letor4", "lightgbm", "trec"] = "letor4"
    batch_size: Annotated[_Int, Field(ge=1)] = 256

    @model_validator(mode="after")
    def _selected_is_computed(self) -> EvaluationConfig:
        if self.select_by not in self.metrics:
            raise ValueError(f"evaluation.select_by {self.select_by!r} must be one of evaluation.metrics "
                             f"{self.metrics}")
        return self


class OutputConfig(_Section):
    run_dir: str = "runs/run"
    tensorboard: _Bool = False

    @field_validator("run_dir")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():  # "" would write the run into the current directory
            raise ValueError("expected a directory path, got an empty one")
        return value


class Config(_Section):
    """The whole run; the resolved version is saved as ``config.yaml`` in the run directory."""

    seed: _Seed = 0
    data: DataConfig
    transforms: Annotated[list[TransformConfig], NamedItems] = []  # [standardize]: [{name: standardize}]
    model: ModelConfig = MLPModelConfig(kind="mlp")
    loss: LossConfig = LossConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    training: TrainingConfig = TrainingConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    output: OutputConfig = OutputConfig()

    @field_validator("model", mode="before")
    @classmethod
    def _default_model_kind(cls, value: Any) -> Any:
        # ``model: {hidden: [32]}`` means the default kind (an MLP).
        if isinstance(value, dict) and "kind" not in value:
            return {"kind": "mlp", **value}
        return value

    @model_validator(mode="after")
    def _bm25f_fields_are_the_data_fields(self) -> Config:
        # Fields named in another order than the statistics' would train (the counts agree) and
        # export each field's parameters under another field's name.
        if isinstance(self.model, BM25FModelConfig) and self.data.train is not None:
            from smoothrank.data.bm25f import folder_fields

            fields = folder_fields(self.data.train)
            if fields is not None and list(fields) != list(self.model.fields):
                raise ValueError(f"model.fields {self.model.fields}, but the statistics of data.train "
                                 f"({self.data.train}) have the fields {list(fields)}, in this order")
        return self


# Errors of a loss or metric refusing an option value (SmoothrankError is a ValueError).
_PROBE_ERRORS = (TypeError, ValueError, ArithmeticError, RuntimeError)


def _probe_batch() -> tuple[Any, Any]:
    import torch

    # One query of two items with distinct scores and labels: every loss and metric takes it.
    return torch.tensor([[0.5, -0.5]]), torch.tensor([[1.0, 0.0]])


def check_loss_options(name: str, options: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` if loss ``name`` refuses ``options``, names or values.

    Binding a loss checks only the option names; the values are checked by the loss when it is
    called, so it is called once here on a tiny batch, before anything is written or trained.
    """
    import torch

    from smoothrank import losses

    try:
        loss = losses.get(name, **options)
        with torch.random.fork_rng(devices=[]):  # a stochastic loss must not move the global RNG
            loss(*_probe_batch())
    except _PROBE_ERRORS as err:
        raise ConfigError(str(err)) from None


def check_metric(name: str, convention: str = "letor4") -> None:
    """Raise :class:`ConfigError` unless metric ``name`` can be computed under ``convention``.

    The metric is computed once on a tiny batch, so that a name the parser takes but the metric
    cannot compute fails now, not after the run directory is written.
    """
    from smoothrank.metrics import evaluate, parse_metric

    try:
        parse_metric(name)
        evaluate(*_probe_batch(), metrics=[name], convention=convention)
    except _PROBE_ERRORS as err:
        raise ConfigError(str(err).removeprefix("metrics: ")) from None


def _section(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    return value if isinstance(value, dict) else {}  # not a mapping: the schema reports it


def _loss_problems(data: dict[str, Any], *, probe: bool = True) -> list[str]:
    """Unknown loss names and options, checked against the registry (``smoothrank losses``), and
    with ``probe`` the option values, checked by the loss itself."""
    loss = data.get("loss", {})
    if not isinstance(loss, dict):
        return []  # the schema reports it
    name, options = loss.get("name", LossConfig().name), loss.get("options", {})
    if not isinstance(name, str) or not isinstance(options, dict):
        return []
    from smoothrank import losses

    available = losses.available()
    if name not in available:
        return [f"loss.name: unknown loss {name!r}; available: {', '.join(sorted(available))}"]
    known = losses.options(name)
    unknown = sorted(set(options) - set(known))
    if unknown:
        return [f"loss.options: unknown option(s) {', '.join(unknown)} for loss {name!r}; "
                f"it takes {', '.join(sorted(known)) or 'no options'}"]
    if probe:
        try:
            check_loss_options(name, options)
        except ConfigError as err:
            return [f"loss.options: {err}"]
    return []


def _metric_problems(data: dict[str, Any]) -> list[str]:
    """Metric names given in ``evaluation.metrics`` and ``schedule.metric`` that cannot be computed."""
    evaluation, schedule = _section(data, "evaluation"), _section(data, "schedule")
    convention = evaluation.get("convention", "letor4")
    if convention not in ("letor4", "lightgbm", "trec"):
        convention = "letor4"  # the schema reports it; the names are still checked
    names = evaluation.get("metrics", [])
    given = list(enumerate(names)) if isinstance(names, list) else []
    keyed = [(f"evaluation.metrics.{i}", name) for i, name in given]
    if "metric" in schedule:
        keyed.append(("schedule.metric", schedule["metric"]))
    problems = []
    for key, name in keyed:
        if isinstance(name, str):  # another type: the schema reports it
            try:
                check_metric(name, convention)
            except ConfigError as err:
                problems.append(f"{key}: {err}")
    return problems


def config_from_dict(data: Any, *, source: str = "config", probe_loss: bool = True,
                     inherited_schedule: Collection[str] = ()) -> Config:
    """Validate a plain mapping; raise :class:`ConfigError` listing every problem.

    Besides the schema, the loss name and option names are checked against the loss registry,
    and the loss option values and metric names by computing them once on a tiny batch.
    ``probe_loss=False`` leaves the loss option values to the caller (experiment specs, whose
    option forms such as ``discount: {shallow: A, n: N}`` are resolved before the loss is built).
    ``inherited_schedule``: ``schedule`` options not refused when they belong to another schedule
    than ``schedule.name`` (see :func:`inherited_schedule_options`).
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    problems = _loss_problems(data, probe=probe_loss) + _metric_problems(data)
    config = None
    try:
        config = Config.model_validate(data, context={"inherited_schedule": frozenset(inherited_schedule)})
    except ValidationError as err:
        problems = validation_problems(err, show_input=True, tagged_unions={"model": _MODEL_KINDS}) + problems
    if problems:
        raise problems_error(source, "configuration", problems)
    assert config is not None
    return config


def read_text_file(path: Path) -> str:
    """The UTF-8 text of a config or spec file; :class:`ConfigError` naming the file if it is not UTF-8."""
    try:
        # utf-8-sig: a byte order mark (Windows editors) is dropped; tomllib would refuse it
        return path.read_text(encoding="utf-8-sig")  # FileNotFoundError names the path
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset "
                          f"{err.start})") from None


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML (``.yaml``/``.yml``) or TOML (``.toml``) document into a dict."""
    path = Path(path)
    text = read_text_file(path)
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        else:
            data = safe_load(text, name=str(path))
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as err:
        kind = "TOML" if path.suffix == ".toml" else "YAML"
        raise ConfigError(f"{path}: not valid {kind}: {err}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with ``key.sub=value`` overrides applied (values parsed as YAML)."""
    result = copy.deepcopy(data)
    problems = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            problems.append(f"  - {item!r}: expected KEY.SUB=VALUE")
            continue
        try:
            value = safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        node = result
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = value
    if problems:
        raise ConfigError("bad command-line override(s):\n" + "\n".join(problems))
    return result


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read, override and validate a configuration (one message lists every problem)."""
    base = read_config_file(path) if path is not None else {}
    data = apply_overrides(base, list(overrides or []))
    overlay = apply_overrides({}, list(overrides or []))  # what the overrides set, alone
    return config_from_dict(data, source=str(path) if path is not None else "config",
                            inherited_schedule=inherited_schedule_options(base, overlay))


def dump_config(config: Config) -> str:
    """The resolved configuration as YAML (every default written out); it loads back as a config."""
    from smoothrank._yaml import safe_dump

    return safe_dump(_number_keys(config.model_dump(mode="json"), config.model_dump()), sort_keys=False)


def _number_keys(dumped: Any, native: Any) -> Any:
    """``dumped`` (JSON mode) with the number keys of ``native`` (Python mode) put back: JSON mode
    writes a gain mapping ``{0: 0.0, 1: 1.0}`` with string labels, which YAML would keep as strings
    and the gain check would refuse: with the numbers put back, a run's config.yaml loads again as a
    config."""
    if isinstance(dumped, dict) and isinstance(native, dict):
        by_text = {str(key): key for key in native}
        out = {}
        for key, value in dumped.items():
            original = by_text.get(key, key)
            number = isinstance(original, int | float) and not isinstance(original, bool)
            out[original if number else key] = _number_keys(value, native.get(original))
        return out
    if isinstance(dumped, list) and isinstance(native, list | tuple) and len(dumped) == len(native):
        return [_number_keys(a, b) for a, b in zip(dumped, native, strict=True)]
    return dumped
