"""The training loop: the papers' protocols, validation-only model selection, exact resume.

Determinism: the model is initialised from ``torch.manual_seed(seed)``; every epoch then draws
its own seeds from ``numpy.random.SeedSequence([seed, epoch])`` (one for torch -- dropout,
re-initialisation -- one for the list sampling of :func:`smoothrank.data.training_batches`).
So a checkpoint written after epoch e (model, optimiser, schedule, best-so-far, early-stopping
counters, the metric history) determines epochs e+1.. completely, and ``resume`` ends with the
same weights and metrics as an uninterrupted run.

Run directory (every file written atomically: temporary file + ``os.replace``):
``config.yaml`` (resolved config), ``metrics.jsonl`` (one JSON object per epoch),
``checkpoint.pt`` (after every epoch), ``model.pt`` (the best model on validation, a
self-contained artifact, see :mod:`smoothrank.training.artifact`), ``summary.json``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from smoothrank import __version__
from smoothrank._atomic import blocking_file, folder_lock, strict_json
from smoothrank.errors import ConfigError, DataFormatError, SmoothrankError, SmoothrankWarning
from smoothrank.models import build_model, reinitialize, score_in_length_groups
from smoothrank.training._io import atomic_torch_save, atomic_write_text, load_torch_file
from smoothrank.training.artifact import RankingModel, save_model
from smoothrank.training.config import SCHEDULE_OPTIONS, Config, dump_config
from smoothrank.training.precision import autocast, check_precision, grad_scaler
from smoothrank.training.schedules import build_schedule, set_lr

__all__ = [
    "TrainResult",
    "TrainingError",
    "TrainingWarning",
    "build_loss",
    "build_transform",
    "evaluate_model",
    "load_splits",
    "predict_scores",
    "train",
]

CHECKPOINT = "checkpoint.pt"
METRICS_LOG = "metrics.jsonl"
MODEL_FILE = "model.pt"
CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"


class TrainingError(SmoothrankError):
    """Training cannot go on (e.g. the loss became NaN); the message says where."""


class _NonFiniteScore(TrainingError):
    """A real document scored inf or NaN (the message names its file and line)."""

    def __init__(self, where: str, score: float) -> None:
        super().__init__(f"{where}: the model scored this document {score} (its features are too large "
                         "for the model's arithmetic, or the weights are not finite)")
        self.where, self.score = where, score


class TrainingWarning(SmoothrankWarning):
    """The run will train, but not usefully (e.g. no query of the training split can be ranked)."""


@dataclass
class TrainResult:
    """What :func:`train` returns; ``model`` holds the selected (best-on-validation) weights."""

    model: nn.Module
    best_epoch: int
    best_value: float
    history: list[dict[str, Any]]
    valid_metrics: dict[str, float] = field(default_factory=dict)
    test_metrics: dict[str, float] = field(default_factory=dict)
    # last, as before, so that positional construction keeps its meaning; ``train`` always sets it
    # (the run directory it wrote: config, history, model, summary)
    run_dir: Path | None = None


def _epoch_seeds(seed: int, epoch: int) -> tuple[int, int]:
    torch_seed, data_seed = np.random.SeedSequence([seed, epoch]).generate_state(2, dtype=np.uint32)
    return int(torch_seed), int(data_seed)


# --- building blocks -------------------------------------------------------------------------

def load_splits(config: Config) -> dict[str, Any]:
    """The train/valid/test :class:`smoothrank.data.Dataset` objects named by ``config.data``
    (:func:`smoothrank.datasets.load_splits`)."""
    from smoothrank.datasets import load_splits as load_data_section

    return load_data_section(config.data.model_dump())


def build_transform(config: Config) -> Any | None:
    """An unfitted transform pipeline from ``config.transforms`` (None when empty)."""
    if not config.transforms:
        return None
    from smoothrank.data import transforms as T

    steps = []
    for spec in config.transforms:
        if spec.name == "standardize":
            steps.append(T.Standardize())
        elif spec.name == "signed_log1p":
            steps.append(T.SignedLog1p(features=spec.features))
        else:
            steps.append(T.QueryMinMax())
    return T.Compose(steps)


def build_loss(config: Config) -> Callable[..., Tensor]:
    """The registry loss ``config.loss.name`` with ``config.loss.options`` (checked up front)."""
    from smoothrank import losses

    name, options = config.loss.name, dict(config.loss.options)
    available = losses.available()
    if name not in available:
        raise ConfigError(f"loss.name: unknown loss {name!r}; available: {', '.join(sorted(available))}")
    known = losses.options(name)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(f"loss.options: unknown option(s) {unknown} for loss {name!r}; "
                          f"it takes {sorted(known)}")
    try:
        return losses.get(name, **options)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"loss.options: {err}") from None


def resolve_device(name: str) -> torch.device:
    """``training.device`` as a ``torch.device`` this machine can use, else :class:`ConfigError`."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"training.device: unknown device {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"training.device: {name!r} requested but CUDA is not available")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"training.device: {name!r} requested but MPS (Apple GPU) is not available")
    if device.type == "meta":  # tensors without data: nothing can be trained or scored there
        raise ConfigError(f"training.device: {name!r} holds no data; use cpu, cuda or mps")
    try:
        # Another device ("xla", "cuda:7" on a one-GPU machine) fails only when a tensor is placed there.
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError) as err:
        reason = str(err).split(". ")[0].splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"training.device: {name!r} cannot be used here ({reason})") from None
    return device


def _build_optimizer(config: Config, model: nn.Module, lr: float) -> torch.optim.Optimizer:
    spec = config.optimizer
    if spec.name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=spec.momentum,
                               weight_decay=spec.weight_decay)
    return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=spec.weight_decay)


def _placement(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    """Where and in which float type ``model`` computes: that of its first floating parameter, so
    that a float64 or GPU model of one's own is fed alike (CPU float32 for one without any)."""
    for param in model.parameters():
        if param.is_floating_point():
            return param.device, param.dtype
    return torch.device("cpu"), torch.get_default_dtype()


@torch.no_grad()
def _scored_batches(model: nn.Module | RankingModel, dataset: Any, *, batch_size: int
                    ) -> Iterable[tuple[Any, Tensor]]:
    from smoothrank.data import evaluation_batches

    if isinstance(model, RankingModel):  # a loaded artifact: checked, and its transforms applied first
        dataset, model = model.prepared(dataset), model.model
    was_training = model.training
    device, dtype = _placement(model)
    model.eval()  # dropout off, batch norm running statistics (PITFALLS 16)
    try:
        for batch in evaluation_batches(dataset, batch_size=batch_size):
            scores = model(batch.features.to(device, dtype), batch.mask.to(device)).cpu()
            bad = ~torch.isfinite(scores) & batch.mask
            if bool(bad.any()):
                _refuse_scores(dataset, batch, scores, bad)
            yield batch, scores
    finally:
        model.train(was_training)


def _refuse_scores(dataset: Any, batch: Any, scores: Tensor, bad: Tensor) -> None:
    """A non-finite score of a real document: an error naming the data file and the document's line
    (the metrics would otherwise refuse "scores" with no word of where they came from)."""
    b, j = (int(i) for i in torch.nonzero(bad)[0])
    row = int(batch.rows[b, j])
    lines = getattr(dataset, "line_numbers", None)
    where = f"{dataset.source}:{int(lines[row])}" if lines is not None and row >= 0 else str(dataset.source)
    raise _NonFiniteScore(where, float(scores[b, j]))


def predict_scores(model: nn.Module | RankingModel, dataset: Any, *, batch_size: int = 256) -> np.ndarray:
    """One float64 score per dataset row (row order of ``dataset``); a loaded :class:`RankingModel`
    (:func:`load_model`) first applies its training-time feature transforms."""
    scores = np.full(dataset.n_docs, np.nan, dtype=np.float64)
    for batch, batch_scores in _scored_batches(model, dataset, batch_size=batch_size):
        rows = batch.rows.numpy()
        real = rows >= 0
        scores[rows[real]] = batch_scores.double().numpy()[real]
    if np.isnan(scores).any():
        raise TrainingError("the model produced NaN scores (or evaluation_batches skipped rows)")
    return scores


def evaluate_model(model: nn.Module | RankingModel, dataset: Any, *, metrics: str | Iterable[str],
                   convention: str = "letor4", batch_size: int = 256) -> dict[str, float]:
    """Mean of each metric over the queries of ``dataset`` (:func:`smoothrank.metrics.evaluate`),
    keyed as ``evaluate`` keys them (``"NDCG@3"`` -> ``"ndcg@3"``). Under a convention that orders
    tied scores by document id (``trec``) the dataset's ``doc_ids`` are passed along, so that the
    values are those of :func:`smoothrank.metrics.evaluate_flat` (and trec_eval)."""
    from smoothrank.metrics import evaluate, get_convention, mean_metrics
    from smoothrank.metrics.evaluate import _metric_list

    metrics = _metric_list(metrics)
    doc_ids = getattr(dataset, "doc_ids", None) if get_convention(convention).docno_ties else None
    per_query = {name: torch.full((dataset.n_queries,), math.nan, dtype=torch.float64) for name in metrics}
    for batch, scores in _scored_batches(model, dataset, batch_size=batch_size):
        ids = None
        if doc_ids is not None:
            rows = batch.rows.numpy()
            ids = np.where(rows >= 0, np.asarray(doc_ids)[np.maximum(rows, 0)], "")
        values = evaluate(scores, batch.labels, mask=batch.mask, metrics=tuple(metrics),
                          convention=convention, doc_ids=ids)
        for name in metrics:
            per_query[name][batch.query_index] = torch.as_tensor(values[name]).double().cpu()
    return {name: float(value) for name, value in mean_metrics(per_query).items()}


# --- the loop ----------------------------------------------------------------------------------

class _Progress:
    """tqdm over training steps on stderr (live loss, last validation metric); silent when quiet or
    when stderr is not a terminal."""

    def __init__(self, epochs: int, start_epoch: int, steps_per_epoch: int, *, quiet: bool, desc: str,
                 metric: str) -> None:
        self.bar = None
        self.postfix: dict[str, str] = {}
        self.metric = metric
        if not quiet and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=epochs * steps_per_epoch, initial=start_epoch * steps_per_epoch, desc=desc,
                            unit="step", file=sys.stderr, dynamic_ncols=True, leave=False)

    def step(self, epoch: int, running_loss: float) -> None:
        if self.bar is not None:
            self.postfix.update(epoch=str(epoch), loss=f"{running_loss:.4f}")
            self.bar.set_postfix(self.postfix, refresh=False)
            self.bar.update(1)

    def epoch_done(self, row: Mapping[str, Any]) -> None:
        value = row.get(f"valid_{self.metric}")
        if self.bar is not None and value is not None:
            self.postfix[f"valid_{self.metric}"] = f"{value:.4f}"
            self.bar.set_postfix(self.postfix)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _diverged(config: Config, what: str, epoch: int, step: int) -> str:
    """The message of a run that diverged at 0-based ``epoch`` and ``step``."""
    return (f"{what} at epoch {epoch + 1}, step {step + 1} (optimizer.lr={config.optimizer.lr:g}); "
            "try a smaller optimizer.lr or training.grad_clip")


@contextlib.contextmanager
def _scoring_after(config: Config, epoch: int) -> Iterator[None]:
    """Evaluation of the weights of 0-based ``epoch``: a non-finite score there names the epoch and the
    learning rate too, since weights that grew huge without overflowing (a diverging run) score finite
    features as inf as surely as features too large for the model do."""
    try:
        yield
    except _NonFiniteScore as err:
        raise TrainingError(f"the weights of epoch {epoch + 1} scored {err.where} {err.score}: the run "
                            f"diverged (optimizer.lr={config.optimizer.lr:g}; try a smaller optimizer.lr or "
                            "training.grad_clip), or that document's features are too large for the "
                            "model's arithmetic") from None


_OWN_TMP = re.compile(r"\..+\.[0-9a-f]{16}\.tmp")  # smoothrank._atomic's temporary files


def _data_shapes(splits: Mapping[str, Any]) -> dict[str, list[int]]:
    """(documents, queries, features) per split: what a resume checks the data against."""
    return {name: [int(ds.n_docs), int(ds.n_queries), int(ds.n_features)] for name, ds in splits.items()}


def _check_resumed_data(state: Mapping[str, Any], splits: Mapping[str, Any], run_path: Path) -> None:
    """Refuse to resume on data of another shape than the run's (a checkpoint from before
    2026-11-25 recorded none: only its model's input width is checked, by loading it)."""
    saved = state.get("data")
    if not isinstance(saved, Mapping):
        return
    now = _data_shapes(splits)
    for name in sorted(set(saved) | set(now)):
        if name not in now or name not in saved:
            where = "now has" if name in now else "no longer has"
            raise ConfigError(f"--resume: the run in {run_path} was trained with other splits: the data "
                              f"{where} a {name} split")
        if list(saved[name]) != now[name]:
            (d0, q0, f0), (d1, q1, f1) = saved[name], now[name]
            raise ConfigError(f"--resume: data.{name} has changed since the run in {run_path} started "
                              f"({d0} documents, {q0} queries, {f0} features then; {d1}, {q1}, {f1} now); "
                              "resume on the run's data, or start a new run elsewhere")


def _string_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _string_keys(item) for key, item in value.items()}
    return [_string_keys(item) for item in value] if isinstance(value, list) else value


def _saved_config_changes(run_path: Path, config: Config, *, paths: bool) -> str:
    """How ``config`` differs from the ``config.yaml`` a run wrote before its first checkpoint. The
    file is compared as written (as a checkpoint's config is), not validated again: a resolved
    config need not pass validation as a new document (a file written before 2026-12-01 holds a gain
    mapping's labels as strings; an older file may hold an inherited schedule option)."""
    from smoothrank.training.config import read_config_file

    path = run_path / CONFIG_FILE
    try:
        saved = read_config_file(path)
    except (ConfigError, OSError) as err:
        raise ConfigError(f"--resume: the run's configuration cannot be read: {err}\n(the run has no "
                          "checkpoint yet: delete its folder to start it again)") from None
    saved = _string_keys(saved)  # as JSON mode writes a gain mapping's labels (a file may hold numbers)
    saved.pop("output", None)
    training = saved.get("training")
    if isinstance(training, dict):  # as _comparable leaves them out
        saved["training"] = {k: v for k, v in training.items() if k not in ("num_threads", "device")}
    return _config_changes({"config": saved}, config, paths=paths)


def _labels_vary(dataset: Any) -> np.ndarray:
    """Per query: whether its documents have different labels (a query that can be ranked)."""
    if dataset.n_queries == 0:
        return np.zeros(0, dtype=bool)
    starts = np.asarray(dataset.offsets[:-1])
    labels = np.asarray(dataset.labels)
    return np.maximum.reduceat(labels, starts) > np.minimum.reduceat(labels, starts)


def _warn_unrankable(splits: Mapping[str, Any], select_by: str) -> None:
    """Warn when a split has no query whose documents differ in label: nothing to learn from
    (train) or nothing to select by (valid). Not an error: a pointwise loss (rmse) still fits."""
    train_set, valid_set = splits["train"], splits.get("valid")
    if not _labels_vary(train_set).any():
        warnings.warn(f"data.train ({train_set.source}): no query has documents with different labels "
                      "(each has one document, or all labels equal, e.g. all 0); ranking losses get no "
                      "gradient, so the model will not learn", TrainingWarning, stacklevel=3)
    if valid_set is not None and not _labels_vary(valid_set).any():
        warnings.warn(f"data.valid ({valid_set.source}): no query has documents with different labels, so "
                      f"valid_{select_by} is the same at every epoch and the first epoch is selected",
                      TrainingWarning, stacklevel=3)


def _check_gains(splits: Mapping[str, Any], config: Config, *, custom_loss: bool) -> None:
    """Refuse a label whose gain is infinite where a gain of it is computed, naming its split, file
    and line, before the run folder is touched: the loss's gain (a built-in loss with a ``gain``
    option) in the model's float32 on the training split, and the evaluation convention's in the
    metrics' float64 on the splits that NDCG/DCG metrics score."""
    from smoothrank import losses
    from smoothrank.data.dataset import check_label_gains
    from smoothrank.metrics import get_convention
    from smoothrank.metrics.evaluate import uses_gain

    checks = []  # (split, option, gain, dtype)
    loss_options = {} if custom_loss else losses.options(config.loss.name)
    if "gain" in loss_options:
        loss_gain = {**loss_options, **config.loss.options}["gain"]
        checks.append(("train", "loss.options.gain", loss_gain, torch.float32))
    convention = ("evaluation.convention", get_convention(config.evaluation.convention).gain, torch.float64)
    if uses_gain(config.evaluation.metrics):
        checks += [(split, *convention) for split in ("valid", "test")]
    schedule = build_schedule(config.schedule, config.optimizer.lr)
    if schedule.needs_train_metric and uses_gain([config.schedule.metric]):
        checks.append(("train", *convention))
    for split, option, gain, dtype in checks:
        if split in splits:
            check_label_gains(splits[split], f"data.{split}", gain, option=option, dtype=dtype)


def _write_log(run_dir: Path, history: list[dict[str, Any]]) -> None:
    atomic_write_text(run_dir / METRICS_LOG, "".join(json.dumps(row) + "\n" for row in history))


def _comparable(config: Config) -> dict[str, Any]:
    # Where the run lives and whether it is logged to TensorBoard do not change the model.
    dumped = config.model_dump(mode="json")
    dumped.pop("output")
    dumped["training"].pop("num_threads")
    dumped["training"].pop("device")  # resuming elsewhere is allowed (bit-identity only on one device)
    return dumped


_UNSET = object()
_DATA_PATHS = ("train", "valid", "test")


def _without_data_paths(dumped: Any) -> Any:
    if not (isinstance(dumped, dict) and isinstance(dumped.get("data"), dict)):
        return dumped
    return {**dumped, "data": {k: v for k, v in dumped["data"].items() if k not in _DATA_PATHS}}


def _schedules_in_use(run: Any, now: Any) -> tuple[Any, Any]:
    """``run`` and ``now`` without the schedule options that their (same) schedule does not read: a
    run saved before 2026-11-25 may hold an inherited ``step_size: 10`` under ``name: none``, which the
    resolved config now resets to its default; neither changes the training, so neither blocks a
    resume. Schedules of different names are left whole (their difference is reported)."""
    old = run.get("schedule") if isinstance(run, dict) else None
    new = now.get("schedule") if isinstance(now, dict) else None
    if not (isinstance(old, dict) and isinstance(new, dict)) or old.get("name") != new.get("name"):
        return run, now
    name = new.get("name")

    def in_use(schedule: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in schedule.items() if SCHEDULE_OPTIONS.get(k, name) == name}

    return {**run, "schedule": in_use(old)}, {**now, "schedule": in_use(new)}


def _config_changes(state: dict[str, Any], config: Config, *, paths: bool = True) -> str:
    """How ``config`` differs from the one a checkpoint ``state`` was saved with ("" if it does not).
    ``paths=False`` leaves the data file paths out: a caller that hands the splits over vouches for
    the data (the experiment runner compares the files' contents)."""
    run, now = _schedules_in_use(state.get("config"), _comparable(config))
    if not paths:
        run, now = _without_data_paths(run), _without_data_paths(now)
    if run == now:
        return ""
    return "; ".join(config_differences(run, now))


def checkpoint_changes(config: Config, run_dir: str | Path) -> str:
    """How ``config`` differs from the one of the checkpoint in ``run_dir`` ("" if it does not, or
    if there is no checkpoint): a resume would refuse it."""
    path = Path(run_dir) / CHECKPOINT
    if not path.is_file():
        return ""
    try:
        state = load_checkpoint(path)
    except (OSError, SmoothrankError):  # a damaged checkpoint is the resume's to report
        return ""
    return _config_changes(state, config)


_CHECKPOINT_KEYS = ("epoch", "model", "optimizer", "schedule", "best_state", "best_value", "best_epoch",
                    "stale", "stopped", "history", "config")


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """The state a training run saved in ``path`` after each epoch; a damaged file, or another kind
    of file (a model artifact copied over it), is a :class:`DataFormatError` naming the path."""
    what = "damaged or not a smoothrank training checkpoint"
    try:
        state = load_torch_file(path, what)
    except DataFormatError as err:
        raise DataFormatError(f"{err}; delete it to train the run from the start") from None
    missing = [k for k in _CHECKPOINT_KEYS if k not in state] if isinstance(state, dict) else ["all"]
    if missing:
        reason = f"no {', '.join(missing[:3])}" if missing != ["all"] else "not a dictionary"
        raise DataFormatError(f"{path}: {what} ({reason}); delete it to train the run from the start")
    return state


def config_differences(run: Any, now: Any, prefix: str = "", limit: int = 5) -> list[str]:
    """``key: X in the run, Y now`` for the first ``limit`` dotted keys where two configs differ."""
    if isinstance(run, dict) and isinstance(now, dict):
        found: list[str] = []
        for key in sorted(set(run) | set(now), key=str):
            found += config_differences(run.get(key, _UNSET), now.get(key, _UNSET), f"{prefix}{key}.", limit)
        return found[:limit]
    if run == now:
        return []
    run_text, now_text = ("unset" if v is _UNSET else json.dumps(v, default=str) for v in (run, now))
    return [f"{prefix.rstrip('.') or 'config'}: {run_text} in the run, {now_text} now"]


def _run_path(run_dir: str | Path) -> Path:
    """The run directory, refused (nothing written) if it cannot be one: an empty path (it would
    fill the current directory) or a path that is, or lies under, something other than a folder."""
    if not os.fspath(run_dir).strip():
        raise ConfigError("the run directory is an empty path (--run-dir or output.run_dir)")
    run_path = Path(run_dir)
    blocker = blocking_file(run_path)
    if blocker == run_path:
        raise ConfigError(f"the run directory {run_path} exists and is not a directory")
    if blocker is not None:
        raise ConfigError(f"the run directory {run_path} cannot be created: {blocker} is not a directory")
    return run_path


def train(config: Config, *, run_dir: str | Path | None = None, resume: bool = False, quiet: bool = False,
          splits: Mapping[str, Any] | None = None, loss_fn: Callable[..., Tensor] | None = None,
          stop_after_epoch: int | None = None,
          on_epoch: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
    """Train ``config`` end to end; see the module docstring for the run directory.

    Parameters
    ----------
    config : Config
    run_dir : path, optional
        Defaults to ``config.output.run_dir``.
    resume : bool
        Continue from ``run_dir/checkpoint.pt`` (the config must match the saved one; with
        ``splits``, all but ``data.train/valid/test``, which are not read then).
    splits : mapping, optional
        Pre-loaded datasets ``{"train", "valid"?, "test"?}`` instead of ``config.data``.
    loss_fn : callable, optional
        Overrides the registry loss (``fn(scores, labels, *, mask) -> Tensor``).
    stop_after_epoch : int, optional
        Return right after the checkpoint of this (1-based) epoch: an injected interruption.
    on_epoch : callable, optional
        Called with each epoch's log row (the demo's progress lines).
    """
    # The run folder is locked from the moment it is touched until the run returns or fails.
    with contextlib.ExitStack() as held:
        return _train(config, held, run_dir=run_dir, resume=resume, quiet=quiet, splits=splits,
                      loss_fn=loss_fn, stop_after_epoch=stop_after_epoch, on_epoch=on_epoch)


def _train(config: Config, held: contextlib.ExitStack, *, run_dir: str | Path | None, resume: bool,
           quiet: bool, splits: Mapping[str, Any] | None, loss_fn: Callable[..., Tensor] | None,
           stop_after_epoch: int | None, on_epoch: Callable[[dict[str, Any]], None] | None) -> TrainResult:
    run_path = _run_path(run_dir if run_dir is not None else config.output.run_dir)
    # Everything that can be checked is checked before the run directory is touched.
    loss = loss_fn if loss_fn is not None else build_loss(config)
    writer_cls = None
    if config.output.tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter as writer_cls
        except ImportError:
            raise ConfigError("output.tensorboard: TensorBoard is not installed "
                              "(pip install tensorboard)") from None
    checkpoint_path = run_path / CHECKPOINT
    state = None
    if resume and not checkpoint_path.is_file() and (run_path / CONFIG_FILE).is_file():
        # Interrupted before the first epoch's checkpoint: nothing to resume, start from epoch 1 (the
        # message after the interruption told the user to pass --resume), with the run's own settings.
        changes = _saved_config_changes(run_path, config, paths=splits is None)
        if changes:
            raise ConfigError(f"--resume: the configuration differs from the one of the run in {run_path} "
                              f"({changes}); give the run's settings, or start a new run elsewhere")
        resume = False
    if resume:
        if not checkpoint_path.is_file():
            raise ConfigError(f"--resume: no checkpoint in {run_path}")
        state = load_checkpoint(checkpoint_path)
        changes = _config_changes(state, config, paths=splits is None)
        if changes:
            raise ConfigError(f"--resume: the configuration differs from the one of the run in {run_path} "
                              f"({changes}); give the run's settings, or start a new run elsewhere")
        held.enter_context(folder_lock(run_path, "a training run"))  # before touching its files
        # A run killed while writing leaves a hidden temporary file; the previous file is intact.
        for stale_tmp in run_path.glob(".*.tmp"):
            if _OWN_TMP.fullmatch(stale_tmp.name) and stale_tmp.is_file():  # never a user's own file
                stale_tmp.unlink()
    elif checkpoint_path.exists():
        raise ConfigError(f"{run_path} already holds a run; pass --resume to continue it or choose another "
                          "output.run_dir")
    device = resolve_device(config.training.device)
    check_precision(config.training.precision, device)
    if splits is None:
        splits = load_splits(config)
    splits = dict(splits)
    if "train" not in splits:
        raise ConfigError("data: a training split is required")
    n_features = splits["train"].n_features
    if n_features == 0:  # else the model builder's "n_features: expected a positive count"
        raise ConfigError(f"data.train ({splits['train'].source}): no feature columns (no line has an "
                          "index:value pair); a model needs at least one feature")
    index_base = splits["train"].index_base  # predict reads data files with the same base
    for name, dataset in splits.items():
        if dataset.n_features != n_features:
            raise ConfigError(f"data.{name}: {dataset.n_features} features, but the training split "
                              f"has {n_features}")
    if state is not None:
        _check_resumed_data(state, splits, run_path)

    _warn_unrankable(splits, config.evaluation.select_by)
    if config.training.list_size == 1 and loss_fn is None and config.loss.name != "rmse":
        # (A custom loss_fn may be pointwise: not warned of.)
        warnings.warn("training.list_size=1: every training list holds one document, so a ranking loss is "
                      "constant and the model does not learn (only a pointwise loss such as rmse does)",
                      TrainingWarning, stacklevel=2)
    _check_gains(splits, config, custom_loss=loss_fn is not None)
    if "valid" not in splits and config.training.early_stopping_patience is not None:
        warnings.warn("training.early_stopping_patience: there is no validation split (data.valid) to stop "
                      "on, so every epoch runs and the last one is kept", TrainingWarning, stacklevel=2)
    for i, step in enumerate(config.transforms):
        beyond = [j for j in step.features or [] if j >= n_features]
        if beyond:
            raise ConfigError(f"transforms.{i}.features: column(s) {beyond} out of range for the training "
                              f"data's {n_features} features (0-based columns 0..{n_features - 1})")
    transform = build_transform(config)
    if transform is not None:
        transform.fit(splits["train"])
        splits = {name: transform.transform(dataset) for name, dataset in splits.items()}
    train_set, valid_set, test_set = splits["train"], splits.get("valid"), splits.get("test")

    previous_threads = torch.get_num_threads()
    previous_deterministic = torch.are_deterministic_algorithms_enabled()
    previous_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    if config.training.num_threads is not None:
        torch.set_num_threads(config.training.num_threads)
    if config.training.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        torch.manual_seed(config.seed)
        model = build_model(config.model, n_features).to(device)
        schedule = build_schedule(config.schedule, config.optimizer.lr)
        optimizer = _build_optimizer(config, model, config.optimizer.lr)
        scaler = grad_scaler(config.training.precision, device)
        history: list[dict[str, Any]] = []
        best_state = copy.deepcopy(model.state_dict())
        best_value, best_epoch, stale, start_epoch, stopped = -math.inf, 0, 0, 0, False
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            schedule.load_state_dict(state["schedule"])
            if state.get("scaler"):
                scaler.load_state_dict(state["scaler"])
            best_state, best_value, best_epoch = state["best_state"], state["best_value"], state["best_epoch"]
            stale, start_epoch, stopped = state["stale"], state["epoch"], state["stopped"]
            history = state["history"]
        else:
            run_path.mkdir(parents=True, exist_ok=True)
            held.enter_context(folder_lock(run_path, "a training run"))
            if checkpoint_path.exists():  # another process started this run since the check above
                raise ConfigError(f"{run_path} already holds a run; pass --resume to continue it or choose "
                                  "another output.run_dir")
            atomic_write_text(run_path / CONFIG_FILE, dump_config(config))
        writer = writer_cls(str(run_path / "tensorboard")) if writer_cls is not None else None

        from smoothrank.data import training_batches

        select = config.evaluation.select_by
        epochs = config.training.epochs
        steps = math.ceil(train_set.n_queries / config.training.batch_size)
        # A custom loss_fn is named as itself, not as the config's (unused) loss.name.
        loss_name = config.loss.name if loss_fn is None else getattr(loss_fn, "__name__", "loss_fn")
        progress = _Progress(epochs, start_epoch, steps, quiet=quiet, metric=select,
                             desc=f"{loss_name} [{config.evaluation.convention}]")
        try:
            for epoch in range(start_epoch, epochs):
                if stopped:
                    break
                started = time.perf_counter()
                torch_seed, data_seed = _epoch_seeds(config.seed, epoch)
                torch.manual_seed(torch_seed)
                lr = optimizer.param_groups[0]["lr"]
                model.train()
                total, count = 0.0, 0
                for step, batch in enumerate(training_batches(
                        train_set, list_size=config.training.list_size, batch_size=config.training.batch_size,
                        shuffle=True, seed_or_generator=data_seed, sampling=config.training.sampling,
                        pad=config.training.pad)):
                    mask = batch.mask.to(device)
                    try:
                        with autocast(config.training.precision, device):
                            scores = score_in_length_groups(model, batch.features.to(device), mask,
                                                            groups=config.training.length_groups)
                            value = loss(scores, batch.labels.to(device), mask=mask)
                    except SmoothrankError:
                        # The losses refuse non-finite scores; if that is why, say when and why. Checked
                        # only here, so that the training step itself pays nothing for it.
                        if bool((torch.isfinite(scores) | ~mask).all()):
                            raise
                        raise TrainingError(_diverged(config, "the model's scores became infinite or NaN",
                                                      epoch, step)) from None
                    if not torch.isfinite(value):
                        raise TrainingError(_diverged(config, f"the loss {loss_name!r} became "
                                                      f"{value.item()}", epoch, step))
                    optimizer.zero_grad(set_to_none=True)
                    scaler.scale(value).backward()  # float16: scaled; else as it is
                    if config.training.grad_clip is not None:
                        scaler.unscale_(optimizer)
                        nn.utils.clip_grad_norm_(model.parameters(), config.training.grad_clip)
                    scaler.step(optimizer)
                    scaler.update()
                    total += float(value.detach())
                    count += 1
                    progress.step(epoch + 1, total / count)
                if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
                    # The last step's update overflowed: evaluating or saving these weights would
                    # give NaN scores (or a NaN model.pt without a validation or test split).
                    raise TrainingError(_diverged(config, "the model's weights became infinite or NaN",
                                                  epoch, count - 1))
                row: dict[str, Any] = {"epoch": epoch + 1, "lr": lr, "loss": total / max(count, 1)}
                train_metric = None
                if schedule.needs_train_metric:
                    with _scoring_after(config, epoch):
                        train_metric = evaluate_model(
                            model, train_set, metrics=[config.schedule.metric],
                            convention=config.evaluation.convention,
                            batch_size=config.evaluation.batch_size)[config.schedule.metric]
                    row[f"train_{config.schedule.metric}"] = train_metric
                if valid_set is not None:
                    with _scoring_after(config, epoch):
                        valid = evaluate_model(model, valid_set, metrics=config.evaluation.metrics,
                                               convention=config.evaluation.convention,
                                               batch_size=config.evaluation.batch_size)
                    row.update({f"valid_{k}": v for k, v in valid.items()})
                    current = valid[select]
                else:
                    current = math.nan  # no validation split: no selection, the last epoch is kept
                # The first epoch is always a candidate, so a NaN metric (every query skipped by the
                # convention) cannot leave the untrained initial weights selected.
                if valid_set is None or best_epoch == 0 or current > best_value:
                    best_value, best_epoch, stale = current, epoch + 1, 0
                    best_state = copy.deepcopy(model.state_dict())
                else:
                    stale += 1
                action = schedule.step(epoch, train_metric)
                set_lr(optimizer, action.lr)
                if action.reinitialize:
                    reinitialize(model)
                    optimizer = _build_optimizer(config, model, action.lr)  # fresh moments for fresh weights
                row["reinitialized"] = action.reinitialize
                row["best_epoch"] = best_epoch
                row["seconds"] = round(time.perf_counter() - started, 3)
                patience = config.training.early_stopping_patience
                stopped = valid_set is not None and patience is not None and stale >= patience
                row["early_stopped"] = stopped
                history.append(row)
                _write_log(run_path, history)
                atomic_torch_save(checkpoint_path, {
                    "epoch": epoch + 1, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "schedule": schedule.state_dict(), "scaler": scaler.state_dict(),
                    "best_state": best_state, "best_value": best_value, "best_epoch": best_epoch,
                    "stale": stale, "stopped": stopped, "history": history,
                    "config": _comparable(config), "version": __version__, "data": _data_shapes(splits),
                })
                if writer is not None:
                    for key, val in row.items():
                        if isinstance(val, float):
                            writer.add_scalar(key, val, epoch + 1)
                progress.epoch_done(row)
                if on_epoch is not None:
                    on_epoch(row)
                if stop_after_epoch is not None and epoch + 1 >= stop_after_epoch and epoch + 1 < epochs:
                    return TrainResult(model=model, best_epoch=best_epoch, best_value=best_value,
                                       history=history, run_dir=run_path)
        finally:
            progress.close()
            if writer is not None:
                writer.close()

        model.load_state_dict(best_state)
        model.eval()
        metric_names = config.evaluation.metrics
        kwargs = {"metrics": metric_names, "convention": config.evaluation.convention,
                  "batch_size": config.evaluation.batch_size}
        with _scoring_after(config, best_epoch - 1):
            valid_metrics = evaluate_model(model, valid_set, **kwargs) if valid_set is not None else {}
            test_metrics = evaluate_model(model, test_set, **kwargs) if test_set is not None else {}
        save_model(run_path / MODEL_FILE, model, config=config, n_features=n_features,
                   transform_state=transform.state_dict() if transform is not None else None,
                   metadata={"best_epoch": best_epoch, "valid": valid_metrics}, index_base=index_base)
        selected_by = f"valid_{select}" if valid_set is not None else "last epoch (no validation split)"
        summary = {"best_epoch": best_epoch, "epochs_run": len(history), "selected_by": selected_by,
                   "convention": config.evaluation.convention, "valid": valid_metrics, "test": test_metrics}
        # strict JSON: an undefined or overflowed metric (inf DCG under lightgbm's gains) is null
        atomic_write_text(run_path / SUMMARY_FILE, strict_json(summary, indent=2) + "\n")
        return TrainResult(model=model, best_epoch=best_epoch, best_value=best_value, history=history,
                           valid_metrics=valid_metrics, test_metrics=test_metrics, run_dir=run_path)
    finally:
        torch.set_num_threads(previous_threads)
        torch.use_deterministic_algorithms(previous_deterministic, warn_only=previous_warn_only)
