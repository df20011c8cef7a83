"""The training loop: the papers' protocols, validation-only model selection, exact resume.

Determinism: the model is initialised from ``torch.manual_seed(seed)``; every epoch then draws
its own seeds from ``numpy.random.SeedSequence([seed, epoch])`` (one for torch -- dropout,
re-initialisation -- one for the list sampling of :func:`smoothrank.data.training_batches`).
So a checkpoint written after epoch e (the :class:`~smoothrank.training.checkpoint.LoopState`: model,
optimiser, schedule, best-so-far, early-stopping counters, the metric history) determines epochs
e+1.. completely, and ``resume`` ends with the same weights and metrics as an uninterrupted run.

The loop, in :func:`train`: prepare (check everything, load and transform the data), start (build
or resume the state), then per epoch: train one epoch, close it (evaluate, select, step the
schedule, write the log and the checkpoint); finish (the selected weights evaluated and saved).

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
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from smoothrank._atomic import blocking_file, folder_lock, strict_json
from smoothrank.data.transforms import transformed
from smoothrank.errors import ConfigError, ShortEpochWarning, SmoothrankError, TrainingError, TrainingWarning
from smoothrank.models import build_model, reinitialize, score_in_length_groups
from smoothrank.training._io import atomic_write_text
from smoothrank.training.artifact import save_model
from smoothrank.training.blocks import (
    build_loss,
    build_optimizer,
    build_transform,
    load_splits,
    resolve_device,
)
from smoothrank.training.checkpoint import (
    CHECKPOINT,
    CONFIG_FILE,
    METRICS_LOG,
    MODEL_FILE,
    SUMMARY_FILE,
    LoopState,
    check_resumed_data,
    resumed_checkpoint,
    save_checkpoint,
)
from smoothrank.training.config import Config, TrainingConfig, dump_config
from smoothrank.training.distributed import Group, agree, all_gather_objects, broadcast_object, current
from smoothrank.training.inference import (
    NonFiniteScoreError,
    evaluate_model,
    per_query_metrics,
    predict_scores,
)
from smoothrank.training.precision import autocast, check_precision, grad_scaler
from smoothrank.training.schedules import build_schedule, set_lr

__all__ = [
    "CHECKPOINT",
    "CONFIG_FILE",
    "METRICS_LOG",
    "MODEL_FILE",
    "SUMMARY_FILE",
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


@dataclass
class TrainResult:
    """What :func:`train` returns; ``model`` holds the selected (best-on-validation) weights, ``run_dir``
    the run directory written (config, history, model, summary)."""

    model: nn.Module
    best_epoch: int
    best_value: float
    history: list[dict[str, Any]]
    valid_metrics: dict[str, float] = field(default_factory=dict)
    test_metrics: dict[str, float] = field(default_factory=dict)
    run_dir: Path | None = None


@dataclass
class _Run:
    """A run as :func:`_prepare` checked it: what the loop reads and never changes."""

    config: Config
    run_path: Path
    loss: Callable[..., Tensor]
    loss_name: str
    device: torch.device
    splits: dict[str, Any]  # transformed
    n_features: int
    index_base: int | None  # the training file's (predict reads data files with the same base)
    transform: Any | None  # fitted
    saved: dict[str, Any] | None  # the checkpoint resumed from
    writer_cls: Any | None  # TensorBoard's SummaryWriter
    group: Group | None = None  # the torchrun process group (None: one process)

    @property
    def writes(self) -> bool:
        """Whether this process writes the run folder: the only one, or process 0 of a group."""
        return self.group is None or self.group.is_main

    @property
    def evaluation(self) -> dict[str, Any]:
        """The keyword arguments of :func:`evaluate_model` for the configured metrics."""
        ev = self.config.evaluation
        return {"metrics": ev.metrics, "convention": ev.convention, "batch_size": ev.batch_size}


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
        run = _prepare(config, held, run_dir=run_dir, resume=resume, splits=splits, loss_fn=loss_fn)
        with _torch_settings(config.training):
            state = _start(run, held)
            interrupted = _run_epochs(run, state, quiet=quiet, stop_after_epoch=stop_after_epoch,
                                      on_epoch=on_epoch)
            return interrupted if interrupted is not None else _finish(run, state)


# --- prepare: everything that can be checked is checked before the run directory is touched -------

def _prepare(config: Config, held: contextlib.ExitStack, *, run_dir: str | Path | None, resume: bool,
             splits: Mapping[str, Any] | None, loss_fn: Callable[..., Tensor] | None) -> _Run:
    group = current()
    saved, error = None, None
    try:  # under torchrun, a check failed on any process stops them all (agree), none waits
        if group is not None and loss_fn is not None:
            raise ConfigError("loss_fn: a custom loss cannot train under torchrun (the exact global mean "
                              "needs losses.informative_queries, which knows the built-in losses); set "
                              "loss.name in the config")
        run_path = _run_path(run_dir if run_dir is not None else config.output.run_dir)
        loss = loss_fn if loss_fn is not None else build_loss(config)
        writer_cls = _tensorboard_writer(config)
        if group is None or group.is_main:  # process 0 owns the run folder
            saved = resumed_checkpoint(run_path, config, held, resume=resume, paths=splits is None)
        device = _process_device(resolve_device(config.training.device), group)
        check_precision(config.training.precision, device)
        checked = _checked_splits(config, splits)
        if saved is not None:
            check_resumed_data(saved, checked, run_path)
        with warnings.catch_warnings():
            if group is not None and not group.is_main:  # warned once, by process 0
                warnings.simplefilter("ignore")
            _check_data(checked, config, custom_loss=loss_fn is not None)
    except Exception as err:
        if group is None:
            raise
        error = err
    agree(error, group)
    saved = broadcast_object(saved, group)  # process 0's checkpoint: every process resumes from it
    n_features, index_base = checked["train"].n_features, checked["train"].index_base
    transform = build_transform(config)
    if transform is not None:
        # Fitted in streaming passes, applied to each batch's rows (no transformed copy of a split);
        # every split is transformed once here, so that a value it refuses is an error before the run.
        transform.fit(checked["train"])
        checked = {name: transformed(transform, dataset) for name, dataset in checked.items()}
    # A custom loss_fn is named as itself, not as the config's (unused) loss.name.
    loss_name = config.loss.name if loss_fn is None else getattr(loss_fn, "__name__", "loss_fn")
    return _Run(config=config, run_path=run_path, loss=loss, loss_name=loss_name, device=device,
                splits=checked, n_features=n_features, index_base=index_base, transform=transform,
                saved=saved, writer_cls=writer_cls, group=group)


def _process_device(device: torch.device, group: Group | None) -> torch.device:
    """``training.device`` for this process: under torchrun, ``cuda`` is the local rank's GPU."""
    if group is not None and device.type == "cuda" and device.index is None:
        return torch.device("cuda", group.local_rank)
    return device


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


def _tensorboard_writer(config: Config) -> Any | None:
    """TensorBoard's ``SummaryWriter`` class when ``output.tensorboard`` asks for it."""
    if not config.output.tensorboard:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError("output.tensorboard: TensorBoard is not installed "
                          "(pip install tensorboard)") from None
    return SummaryWriter


def _checked_splits(config: Config, splits: Mapping[str, Any] | None) -> dict[str, Any]:
    """The splits given (else those of ``config.data``), a training split with features among them,
    every split as wide as it."""
    splits = dict(splits) if splits is not None else load_splits(config)
    if "train" not in splits:
        raise ConfigError("data: a training split is required")
    n_features = splits["train"].n_features
    if n_features == 0:  # else the model builder's "n_features: expected a positive count"
        raise ConfigError(f"data.train ({splits['train'].source}): no feature columns (no line has an "
                          "index:value pair); a model needs at least one feature")
    for name, dataset in splits.items():
        if dataset.n_features != n_features:
            raise ConfigError(f"data.{name}: {dataset.n_features} features, but the training split "
                              f"has {n_features}")
    return splits


def _check_data(splits: Mapping[str, Any], config: Config, *, custom_loss: bool) -> None:
    """Warn of data that cannot teach or select; refuse labels without a finite gain and transforms
    of columns the data lacks. Warnings point at :func:`train` (stacklevel 3 from here)."""
    _warn_unrankable(splits, config.evaluation.select_by)
    if config.training.list_size == 1 and not custom_loss and config.loss.name != "rmse":
        # (A custom loss_fn may be pointwise: not warned of.)
        warnings.warn("training.list_size=1: every training list holds one document, so a ranking loss is "
                      "constant and the model does not learn (only a pointwise loss such as rmse does)",
                      TrainingWarning, stacklevel=3)
    _check_gains(splits, config, custom_loss=custom_loss)
    if "valid" not in splits and config.training.early_stopping_patience is not None:
        warnings.warn("training.early_stopping_patience: there is no validation split (data.valid) to stop "
                      "on, so every epoch runs and the last one is kept", TrainingWarning, stacklevel=3)
    n_features = splits["train"].n_features
    for i, step in enumerate(config.transforms):
        beyond = [j for j in step.features or [] if j >= n_features]
        if beyond:
            raise ConfigError(f"transforms.{i}.features: column(s) {beyond} out of range for the training "
                              f"data's {n_features} features (0-based columns 0..{n_features - 1})")


#: Fewer optimiser steps than this in an epoch are warned of (:class:`ShortEpochWarning`).
FEW_STEPS = 5
#: The steps an epoch of the batch size the warning suggests has, about.
SUGGESTED_STEPS = 10


def warn_short_epochs(n_queries: int, batch_size: int, *, stacklevel: int = 2) -> None:
    """Warn (:class:`ShortEpochWarning`) when an epoch of ``n_queries`` training queries at
    ``batch_size`` is fewer than :data:`FEW_STEPS` optimiser steps; the experiment runner calls it
    for every neural run. The defaults are left as they are, so that results stay comparable
    (batch 64 on MQ2008's 471 training queries a fold is 8 steps, the specs' 32 is 15: no
    warning); the warning names a batch size that gives about :data:`SUGGESTED_STEPS` steps."""
    steps = math.ceil(n_queries / batch_size) if n_queries else 0
    if 0 < steps < FEW_STEPS:
        suggest = max(1, n_queries // SUGGESTED_STEPS)
        warnings.warn(f"training.batch_size={batch_size}: an epoch is {steps} optimiser step(s) "
                      f"({n_queries} training queries), so the epoch selected on validation is a coarse, "
                      f"partly chance choice; training.batch_size={suggest} gives "
                      f"{math.ceil(n_queries / suggest)} steps an epoch (give more epochs to train as long)",
                      ShortEpochWarning, stacklevel=stacklevel + 1)


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
                      "gradient, so the model will not learn", TrainingWarning, stacklevel=4)
    if valid_set is not None and not _labels_vary(valid_set).any():
        warnings.warn(f"data.valid ({valid_set.source}): no query has documents with different labels, so "
                      f"valid_{select_by} is the same at every epoch and the first epoch is selected",
                      TrainingWarning, stacklevel=4)


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


@contextlib.contextmanager
def _torch_settings(training: TrainingConfig) -> Iterator[None]:
    """The thread count and deterministic algorithms of torch as ``training`` asks, restored afterwards."""
    previous_threads = torch.get_num_threads()
    previous_deterministic = torch.are_deterministic_algorithms_enabled()
    previous_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    if training.num_threads is not None:
        torch.set_num_threads(training.num_threads)
    if training.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.set_num_threads(previous_threads)
        torch.use_deterministic_algorithms(previous_deterministic, warn_only=previous_warn_only)


# --- start: a new state (the run folder created, locked, its config written) or the resumed one ---

def _start(run: _Run, held: contextlib.ExitStack) -> LoopState:
    config = run.config
    torch.manual_seed(config.seed)
    model = build_model(config.model, run.n_features).to(run.device)
    schedule = build_schedule(config.schedule, config.optimizer.lr)
    optimizer = build_optimizer(config, model, config.optimizer.lr)
    scaler = grad_scaler(config.training.precision, run.device)
    if run.saved is not None:
        state = LoopState.from_dict(run.saved, model=model, optimizer=optimizer, schedule=schedule,
                                    scaler=scaler)
    else:
        error = None
        try:
            if run.writes:
                _create_run_folder(run, held)
        except Exception as err:
            if run.group is None:
                raise
            error = err
        agree(error, run.group)
        state = LoopState(model=model, optimizer=optimizer, schedule=schedule,
                          best_state=copy.deepcopy(model.state_dict()), scaler=scaler)
    if run.group is not None:
        device_ids = [run.device.index] if run.device.type == "cuda" else None
        state.scorer = nn.parallel.DistributedDataParallel(
            _Scorer(model, config.training.length_groups), device_ids=device_ids)
    return state


def _create_run_folder(run: _Run, held: contextlib.ExitStack) -> None:
    """A new run's folder, locked, with its ``config.yaml``."""
    run.run_path.mkdir(parents=True, exist_ok=True)
    held.enter_context(folder_lock(run.run_path, "a training run"))
    if (run.run_path / CHECKPOINT).exists():  # another process started this run since the first check
        raise ConfigError(f"{run.run_path} already holds a run; pass --resume to continue it or choose "
                          "another output.run_dir")
    atomic_write_text(run.run_path / CONFIG_FILE, dump_config(run.config))


class _Scorer(nn.Module):
    """The model scored in length groups as one forward pass: what DistributedDataParallel wraps
    (it expects one forward per backward)."""

    def __init__(self, model: nn.Module, groups: int) -> None:
        super().__init__()
        self.model, self.groups = model, groups

    def forward(self, features: Tensor, mask: Tensor) -> Tensor:
        return score_in_length_groups(self.model, features, mask, groups=self.groups)


# --- the epochs --------------------------------------------------------------------------------

def _run_epochs(run: _Run, state: LoopState, *, quiet: bool, stop_after_epoch: int | None,
                on_epoch: Callable[[dict[str, Any]], None] | None) -> TrainResult | None:
    """Train the remaining epochs; a :class:`TrainResult` of the current state when ``stop_after_epoch``
    interrupts the run, else None (the run is to be finished)."""
    config = run.config
    epochs = config.training.epochs
    writer = (run.writer_cls(str(run.run_path / "tensorboard"))
              if run.writer_cls is not None and run.writes else None)
    steps = math.ceil(run.splits["train"].n_queries / config.training.batch_size)
    progress = _Progress(epochs, state.epoch, steps, quiet=quiet or not run.writes,
                         metric=config.evaluation.select_by,
                         desc=f"{run.loss_name} [{config.evaluation.convention}]")
    try:
        for epoch in range(state.epoch, epochs):
            if state.stopped:
                break
            started = time.perf_counter()
            row = _train_epoch(run, state, epoch, progress)
            _close_epoch(run, state, row, epoch, started)
            if writer is not None:
                for key, val in row.items():
                    if isinstance(val, float):
                        writer.add_scalar(key, val, epoch + 1)
            progress.epoch_done(row)
            if on_epoch is not None:
                on_epoch(row)
            if stop_after_epoch is not None and epoch + 1 >= stop_after_epoch and epoch + 1 < epochs:
                return TrainResult(model=state.model, best_epoch=state.best_epoch,
                                   best_value=state.best_value, history=state.history, run_dir=run.run_path)
    finally:
        progress.close()
        if writer is not None:
            writer.close()
    return None


def _epoch_seeds(seed: int, epoch: int) -> tuple[int, int]:
    torch_seed, data_seed = np.random.SeedSequence([seed, epoch]).generate_state(2, dtype=np.uint32)
    return int(torch_seed), int(data_seed)


def _train_epoch(run: _Run, state: LoopState, epoch: int, progress: _Progress) -> dict[str, Any]:
    """One pass over the training lists of 0-based ``epoch``; the start of its log row."""
    from smoothrank.data import training_batches

    training = run.config.training
    torch_seed, data_seed = _epoch_seeds(run.config.seed, epoch)
    if run.group is not None and run.group.rank > 0:  # dropout: other draws on every process
        rank_seeds = np.random.SeedSequence([run.config.seed, epoch, run.group.rank])
        torch_seed = int(rank_seeds.generate_state(1, dtype=np.uint32)[0])
    torch.manual_seed(torch_seed)
    lr = state.optimizer.param_groups[0]["lr"]
    state.model.train()
    total, count = 0.0, 0
    for step, batch in enumerate(training_batches(
            run.splits["train"], list_size=training.list_size, batch_size=training.batch_size, shuffle=True,
            seed_or_generator=data_seed, sampling=training.sampling, pad=training.pad,
            shard=run.group.shard if run.group is not None else None)):
        total += _training_step(run, state, batch, epoch, step)
        count += 1
        progress.step(epoch + 1, total / count)
    if not all(bool(torch.isfinite(p).all()) for p in state.model.parameters()):
        # The last step's update overflowed: evaluating or saving these weights would
        # give NaN scores (or a NaN model.pt without a validation or test split).
        raise TrainingError(_diverged(run.config, "the model's weights became infinite or NaN",
                                      epoch, count - 1))
    return {"epoch": epoch + 1, "lr": lr, "loss": total / max(count, 1)}


def _training_step(run: _Run, state: LoopState, batch: Any, epoch: int, step: int) -> float:
    """One optimiser step on ``batch``; the loss before it."""
    config, model = run.config, state.model
    features, mask = batch.features.to(run.device), batch.mask.to(run.device)
    if state.scorer is not None and features.shape[0] == 0:
        # An empty share of a short last batch: one list of one zero document stands in (a model may
        # not take a batch of no lists), scored for the gradients' all-reduce, its loss zero.
        features = torch.zeros((1, *features.shape[1:]), device=run.device)
        mask = torch.zeros((1, features.shape[1]), dtype=torch.bool, device=run.device)
        mask[0, 0] = True
    try:
        with autocast(config.training.precision, run.device):
            if state.scorer is not None:
                scores = state.scorer(features, mask)
            else:
                scores = score_in_length_groups(model, features, mask, groups=config.training.length_groups)
            if run.group is None:
                value = logged = run.loss(scores, batch.labels.to(run.device), mask=mask)
            else:
                value, logged = _global_mean(run.loss, run.group, scores, batch.labels.to(run.device), mask)
    except SmoothrankError:
        # The losses refuse non-finite scores; if that is why, say when and why. Checked
        # only here, so that the training step itself pays nothing for it.
        if bool((torch.isfinite(scores) | ~mask).all()):
            raise
        raise TrainingError(_diverged(config, "the model's scores became infinite or NaN",
                                      epoch, step)) from None
    if not torch.isfinite(logged):
        raise TrainingError(_diverged(config, f"the loss {run.loss_name!r} became {logged.item()}",
                                      epoch, step))
    state.optimizer.zero_grad(set_to_none=True)
    scaler = state.scaler
    if scaler is None:
        value.backward()
    else:
        scaler.scale(value).backward()  # float16: scaled; else as it is
    if config.training.grad_clip is not None:
        if scaler is not None:
            scaler.unscale_(state.optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), config.training.grad_clip)
    if scaler is None:
        state.optimizer.step()
    else:
        scaler.step(state.optimizer)
        scaler.update()
    return float(logged.detach())


def _global_mean(loss: Callable[..., Tensor], group: Group, scores: Tensor, labels: Tensor, mask: Tensor
                 ) -> tuple[Tensor, Tensor]:
    """This process's share of the global batch's loss, scaled so that DistributedDataParallel's
    average of the processes' gradients is the gradient of the mean over the global batch's
    informative queries (what ``reduction="mean"`` gives one process); and that mean, for the log.

    Each process sums its queries' losses; the count of informative queries and the sums are
    all-reduced, and the share is ``sum * world_size / n``. A process whose share of a short last
    batch is empty contributes a zero loss that still reaches every weight, so that every process
    joins the gradients' all-reduce.
    """
    from smoothrank import losses

    if labels.shape[0] == 0:  # the stand-in of an empty share
        local = scores.float().sum() * 0.0
        n_local = torch.zeros((), device=scores.device)
    else:
        dtype = scores.dtype if scores.dtype in (torch.float32, torch.float64) else torch.float32
        n_local = losses.informative_queries(loss, labels, mask=mask, dtype=dtype).sum()
        local = loss(scores, labels, mask=mask, reduction="sum")
    totals = torch.stack([n_local.double(), local.detach().double()])
    torch.distributed.all_reduce(totals)
    n = totals[0].clamp_min(1)
    return local * (group.world_size / n).to(local.dtype), totals[1] / n


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
    except NonFiniteScoreError as err:
        raise TrainingError(f"the weights of epoch {epoch + 1} scored {err.where} {err.score}: the run "
                            f"diverged (optimizer.lr={config.optimizer.lr:g}; try a smaller optimizer.lr or "
                            "training.grad_clip), or that document's features are too large for the "
                            "model's arithmetic") from None


def _close_epoch(run: _Run, state: LoopState, row: dict[str, Any], epoch: int, started: float) -> None:
    """Evaluate the epoch's weights, select, step the schedule, log and checkpoint."""
    train_metric, current = _evaluate_epoch(run, state, row, epoch)
    _select(state, current, has_valid="valid" in run.splits, epoch=epoch)
    action = state.schedule.step(epoch, train_metric)
    set_lr(state.optimizer, action.lr)
    if action.reinitialize:
        reinitialize(state.model)
        if run.group is not None:  # process 0's draws on every process
            for tensor in state.model.state_dict().values():
                torch.distributed.broadcast(tensor, src=0)
        # fresh moments for fresh weights
        state.optimizer = build_optimizer(run.config, state.model, action.lr)
    row["reinitialized"] = action.reinitialize
    row["best_epoch"] = state.best_epoch
    row["seconds"] = round(time.perf_counter() - started, 3)
    patience = run.config.training.early_stopping_patience
    state.stopped = "valid" in run.splits and patience is not None and state.stale >= patience
    row["early_stopped"] = state.stopped
    state.history.append(row)
    state.epoch = epoch + 1
    if run.writes:
        atomic_write_text(run.run_path / METRICS_LOG, "".join(json.dumps(r) + "\n" for r in state.history))
        save_checkpoint(run.run_path / CHECKPOINT, state, config=run.config, splits=run.splits)


def _evaluate_epoch(run: _Run, state: LoopState, row: dict[str, Any], epoch: int
                    ) -> tuple[float | None, float]:
    """The schedule's training metric (if it reads one) and the validation metrics, into ``row``;
    returns the training metric and the selection metric's value (NaN without a validation split)."""
    config = run.config
    train_metric = None
    if state.schedule.needs_train_metric:
        metric = config.schedule.metric
        with _scoring_after(config, epoch):
            train_metric = _evaluate(run, state.model, run.splits["train"], **{
                **run.evaluation, "metrics": [metric]})[metric]
        row[f"train_{metric}"] = train_metric
    if "valid" not in run.splits:
        return train_metric, math.nan  # no validation split: no selection, the last epoch is kept
    with _scoring_after(config, epoch):
        valid = _evaluate(run, state.model, run.splits["valid"], **run.evaluation)
    row.update({f"valid_{k}": v for k, v in valid.items()})
    return train_metric, valid[config.evaluation.select_by]


def _evaluate(run: _Run, model: nn.Module, dataset: Any, **evaluation: Any) -> dict[str, float]:
    """:func:`evaluate_model`; under torchrun each process scores a contiguous share of the queries and
    the per-query values are gathered, so that the means are over all queries, as one process has them."""
    if run.group is None:
        return evaluate_model(model, dataset, **evaluation)
    from smoothrank.data.batching import share_bounds
    from smoothrank.metrics import mean_metrics
    from smoothrank.metrics.evaluate import metric_list

    start, stop = share_bounds(dataset.n_queries, run.group.world_size, run.group.rank)
    if stop > start:
        mine = per_query_metrics(model, dataset.subset(np.arange(start, stop)), **evaluation)
    else:
        mine = {name: torch.zeros(0, dtype=torch.float64) for name in metric_list(evaluation["metrics"])}
    shares = all_gather_objects(mine, run.group)
    per_query = {name: torch.cat([share[name] for share in shares]) for name in mine}
    return {name: float(value) for name, value in mean_metrics(per_query).items()}


def _select(state: LoopState, current: float, *, has_valid: bool, epoch: int) -> None:
    """Keep the weights of 0-based ``epoch`` if they are the best so far. The first epoch is always a
    candidate, so a NaN metric (every query skipped by the convention) cannot leave the untrained
    initial weights selected."""
    if not has_valid or state.best_epoch == 0 or current > state.best_value:
        state.best_value, state.best_epoch, state.stale = current, epoch + 1, 0
        state.best_state = copy.deepcopy(state.model.state_dict())
    else:
        state.stale += 1


# --- finish --------------------------------------------------------------------------------------

def _finish(run: _Run, state: LoopState) -> TrainResult:
    """The selected weights evaluated on valid and test, saved as ``model.pt``, summarised."""
    config, model = run.config, state.model
    model.load_state_dict(state.best_state)
    model.eval()
    valid_set, test_set = run.splits.get("valid"), run.splits.get("test")
    with _scoring_after(config, state.best_epoch - 1):
        valid_metrics = _evaluate(run, model, valid_set, **run.evaluation) if valid_set is not None else {}
        test_metrics = _evaluate(run, model, test_set, **run.evaluation) if test_set is not None else {}
    if not run.writes:  # process 0 saves the model and the summary
        return TrainResult(model=model, best_epoch=state.best_epoch, best_value=state.best_value,
                           history=state.history, valid_metrics=valid_metrics, test_metrics=test_metrics,
                           run_dir=run.run_path)
    save_model(run.run_path / MODEL_FILE, model, config=config, n_features=run.n_features,
               transform_state=run.transform.state_dict() if run.transform is not None else None,
               metadata={"best_epoch": state.best_epoch, "valid": valid_metrics}, index_base=run.index_base)
    select = config.evaluation.select_by
    selected_by = f"valid_{select}" if valid_set is not None else "last epoch (no validation split)"
    summary = {"best_epoch": state.best_epoch, "epochs_run": len(state.history), "selected_by": selected_by,
               "convention": config.evaluation.convention, "valid": valid_metrics, "test": test_metrics}
    # strict JSON: an undefined or overflowed metric (inf DCG under lightgbm's gains) is null
    atomic_write_text(run.run_path / SUMMARY_FILE, strict_json(summary, indent=2) + "\n")
    return TrainResult(model=model, best_epoch=state.best_epoch, best_value=state.best_value,
                       history=state.history, valid_metrics=valid_metrics, test_metrics=test_metrics,
                       run_dir=run.run_path)


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
