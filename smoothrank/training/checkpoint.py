"""The run folder's checkpoint: the loop's state after each epoch, and whether a run can resume.

A checkpoint (``checkpoint.pt``, written atomically after every epoch) holds :meth:`LoopState.to_dict`
plus the run's comparable config (:func:`comparable_config`), the smoothrank version and the shape of
each data split. ``--resume`` continues a run only with the same config (the run folder, the thread
count and the device aside) and data of the same shape; before the first checkpoint, the
``config.yaml`` the run wrote is the config compared.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from smoothrank import __version__
from smoothrank._atomic import folder_lock
from smoothrank.errors import ConfigError, DataFormatError, SmoothrankError
from smoothrank.training._io import atomic_torch_save, load_torch_file
from smoothrank.training.config import SCHEDULE_OPTIONS, Config
from smoothrank.training.schedules import ConstantLR

__all__ = [
    "CHECKPOINT",
    "CONFIG_FILE",
    "METRICS_LOG",
    "MODEL_FILE",
    "SUMMARY_FILE",
    "LoopState",
    "check_resumed_data",
    "checkpoint_changes",
    "comparable_config",
    "config_differences",
    "load_checkpoint",
    "resumed_checkpoint",
    "save_checkpoint",
]

#: The files of a run folder.
CHECKPOINT = "checkpoint.pt"
METRICS_LOG = "metrics.jsonl"
MODEL_FILE = "model.pt"
CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"

_KEYS = ("epoch", "model", "optimizer", "schedule", "best_state", "best_value", "best_epoch", "stale",
         "stopped", "history", "config")
_OWN_TMP = re.compile(r"\..+\.[0-9a-f]{16}\.tmp")  # smoothrank._atomic's temporary files
_UNSET = object()
_DATA_PATHS = ("train", "valid", "test")
#: training options a resumed run may change
_RUNTIME_KEYS = ("num_threads", "device", "distributed_timeout")


@dataclass
class LoopState:
    """The training loop's state between epochs: what a checkpoint stores of it.

    ``epoch`` counts the epochs done; ``best_state`` holds the weights of ``best_epoch`` (1-based, 0
    before the first epoch), whose selection metric is ``best_value``; ``stale`` counts the epochs
    since, for early stopping; ``stopped`` says early stopping ended the run; ``history`` holds one log
    row per epoch (``metrics.jsonl``).
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: ConstantLR
    best_state: dict[str, Tensor]
    epoch: int = 0
    best_value: float = -math.inf
    best_epoch: int = 0
    stale: int = 0
    stopped: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)
    #: float16's gradient scaler (``training.precision``); disabled for the other precisions
    scaler: torch.amp.GradScaler | None = None
    #: what the training step calls to score a batch: DistributedDataParallel around the model under
    #: torchrun, else None (the model itself); not saved
    scorer: nn.Module | None = None

    def to_dict(self) -> dict[str, Any]:
        """The state as plain containers and tensors (``torch.save``-able, ``weights_only`` loadable)."""
        return {"epoch": self.epoch, "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "schedule": self.schedule.state_dict(),
                "best_state": self.best_state,
                "best_value": self.best_value, "best_epoch": self.best_epoch, "stale": self.stale,
                "stopped": self.stopped, "history": self.history,
                "scaler": self.scaler.state_dict() if self.scaler is not None else {}}

    @classmethod
    def from_dict(cls, saved: Mapping[str, Any], *, model: nn.Module, optimizer: torch.optim.Optimizer,
                  schedule: ConstantLR, scaler: torch.amp.GradScaler | None = None) -> LoopState:
        """The state :meth:`to_dict` gave; its model, optimiser, schedule and scaler states are loaded
        into those given."""
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        if scaler is not None and saved.get("scaler"):
            scaler.load_state_dict(saved["scaler"])
        return cls(model=model, optimizer=optimizer, schedule=schedule, best_state=saved["best_state"],
                   epoch=saved["epoch"], best_value=saved["best_value"], best_epoch=saved["best_epoch"],
                   stale=saved["stale"], stopped=saved["stopped"], history=saved["history"], scaler=scaler)


def save_checkpoint(path: str | Path, state: LoopState, *, config: Config, splits: Mapping[str, Any]) -> None:
    """Write ``state`` with the run's comparable config, the version and the data shapes, atomically."""
    atomic_torch_save(path, {**state.to_dict(), "config": comparable_config(config), "version": __version__,
                             "data": _data_shapes(splits)})


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """The state a training run saved in ``path`` after each epoch; a damaged file, or another kind
    of file (a model artifact copied over it), is a :class:`DataFormatError` naming the path."""
    what = "damaged or not a smoothrank training checkpoint"
    try:
        state = load_torch_file(path, what)
    except DataFormatError as err:
        raise DataFormatError(f"{err}; delete it to train the run from the start") from None
    missing = [k for k in _KEYS if k not in state] if isinstance(state, dict) else ["all"]
    if missing:
        reason = f"no {', '.join(missing[:3])}" if missing != ["all"] else "not a dictionary"
        raise DataFormatError(f"{path}: {what} ({reason}); delete it to train the run from the start")
    return state


def resumed_checkpoint(run_path: Path, config: Config, held: contextlib.ExitStack, *, resume: bool,
                       paths: bool) -> dict[str, Any] | None:
    """The checkpoint a run in ``run_path`` continues from (None: the run starts from epoch 1).

    ``--resume`` of a run interrupted before its first checkpoint starts it again, with the settings of
    its ``config.yaml``; a resumed run's folder is locked in ``held`` and the temporary files of an
    interrupted write are removed. A new run refuses a folder that holds one. ``paths=False`` leaves
    the data file paths out of the comparison: a caller that hands the splits over vouches for the
    data (the experiment runner compares the files' contents).
    """
    checkpoint_path = run_path / CHECKPOINT
    if resume and not checkpoint_path.is_file() and (run_path / CONFIG_FILE).is_file():
        _refuse_changes(run_path, _saved_config_changes(run_path, config, paths=paths))
        resume = False
    if not resume:
        if checkpoint_path.exists():
            raise ConfigError(f"{run_path} already holds a run; pass --resume to continue it or choose "
                              "another output.run_dir")
        return None
    if not checkpoint_path.is_file():
        raise ConfigError(f"--resume: no checkpoint in {run_path}")
    state = load_checkpoint(checkpoint_path)
    _refuse_changes(run_path, _config_changes(state, config, paths=paths))
    held.enter_context(folder_lock(run_path, "a training run"))  # before touching its files
    # A run killed while writing leaves a hidden temporary file; the previous file is intact.
    for stale_tmp in run_path.glob(".*.tmp"):
        if _OWN_TMP.fullmatch(stale_tmp.name) and stale_tmp.is_file():  # never a user's own file
            stale_tmp.unlink()
    return state


def _refuse_changes(run_path: Path, changes: str) -> None:
    if changes:
        raise ConfigError(f"--resume: the configuration differs from the one of the run in {run_path} "
                          f"({changes}); give the run's settings, or start a new run elsewhere")


def _data_shapes(splits: Mapping[str, Any]) -> dict[str, list[int]]:
    """(documents, queries, features) per split: what a resume checks the data against."""
    return {name: [int(ds.n_docs), int(ds.n_queries), int(ds.n_features)] for name, ds in splits.items()}


def check_resumed_data(state: Mapping[str, Any], splits: Mapping[str, Any], run_path: Path) -> None:
    """Refuse to resume on data of another shape than the run's. A checkpoint without data shapes
    is not checked here: its model's input width is, by loading it."""
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


def comparable_config(config: Config) -> dict[str, Any]:
    """``config`` as a checkpoint stores it: without what does not change the model (where the run
    lives, TensorBoard, the thread count, the device: bit-identity holds on one device only, and how
    long the processes of a torchrun job wait for each other)."""
    dumped = config.model_dump(mode="json")
    dumped.pop("output")
    for key in _RUNTIME_KEYS:
        dumped["training"].pop(key)
    return dumped


def _string_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _string_keys(item) for key, item in value.items()}
    return [_string_keys(item) for item in value] if isinstance(value, list) else value


def _saved_config_changes(run_path: Path, config: Config, *, paths: bool) -> str:
    """How ``config`` differs from the ``config.yaml`` a run wrote before its first checkpoint. The
    file is compared as written (as a checkpoint's config is), not validated again: a resolved config
    need not pass validation as a new document (it may hold a gain mapping's labels as strings, or a
    schedule option its schedule does not read)."""
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
    if isinstance(training, dict):  # as comparable_config leaves them out
        saved["training"] = {k: v for k, v in training.items() if k not in _RUNTIME_KEYS}
    return _config_changes({"config": saved}, config, paths=paths)


def _without_data_paths(dumped: Any) -> Any:
    if not (isinstance(dumped, dict) and isinstance(dumped.get("data"), dict)):
        return dumped
    return {**dumped, "data": {k: v for k, v in dumped["data"].items() if k not in _DATA_PATHS}}


def _schedules_in_use(run: Any, now: Any) -> tuple[Any, Any]:
    """``run`` and ``now`` without the schedule options that their (same) schedule does not read: a
    saved config may hold one (an inherited ``step_size: 10`` under ``name: none``) that the resolved
    config resets to its default; neither changes the training, so neither blocks a resume. Schedules
    of different names are left whole (their difference is reported)."""
    old = run.get("schedule") if isinstance(run, dict) else None
    new = now.get("schedule") if isinstance(now, dict) else None
    if not (isinstance(old, dict) and isinstance(new, dict)) or old.get("name") != new.get("name"):
        return run, now
    name = new.get("name")

    def in_use(schedule: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in schedule.items() if SCHEDULE_OPTIONS.get(k, name) == name}

    return {**run, "schedule": in_use(old)}, {**now, "schedule": in_use(new)}


def _config_changes(state: Mapping[str, Any], config: Config, *, paths: bool = True) -> str:
    """How ``config`` differs from the one a checkpoint ``state`` was saved with ("" if it does not)."""
    run, now = _schedules_in_use(state.get("config"), comparable_config(config))
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
