"""Learning-rate protocols of the papers, as small state machines with ``state_dict``.

* :class:`StepDecay` -- ``lr_e = lr_0 * gamma ** floor(e / step_size)`` for 0-based epoch e; the
  NeuralNDCG paper (Pobrotyn & Bialobrzeski 2021, section 5.3) trains 100 epochs with Adam at
  0.001 and multiplies the rate by 0.1 after 50 epochs.
* :class:`SoftRankProtocol` -- Taylor et al. 2008 (section 4.5): the rate is multiplied by 0.8
  each time the end-of-epoch training NDCG@10 does not improve, and the weights are
  re-initialised when it has not improved for 16 epochs.

Both are driven by :meth:`step` once per finished epoch and return the action to take.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torch.optim import Optimizer


def set_lr(optimizer: Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group of ``optimizer`` to ``lr``."""
    for group in optimizer.param_groups:
        group["lr"] = lr


@dataclass
class ScheduleAction:
    """What a schedule says after an epoch: the next epoch's learning rate, and whether to
    re-initialise the weights (with a fresh optimiser)."""

    lr: float
    reinitialize: bool = False


class ConstantLR:
    """No schedule."""

    def __init__(self, base_lr: float) -> None:
        self.lr = base_lr

    def step(self, epoch: int, train_metric: float | None = None) -> ScheduleAction:
        return ScheduleAction(self.lr)

    def state_dict(self) -> dict[str, Any]:
        return {"lr": self.lr}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lr = float(state["lr"])

    needs_train_metric = False


class StepDecay(ConstantLR):
    """``lr = base_lr * gamma ** ((epoch + 1) // step_size)`` after finished 0-based ``epoch``."""

    def __init__(self, base_lr: float, *, step_size: int = 50, gamma: float = 0.1) -> None:
        super().__init__(base_lr)
        self.base_lr, self.step_size, self.gamma = base_lr, step_size, gamma

    def step(self, epoch: int, train_metric: float | None = None) -> ScheduleAction:
        self.lr = self.base_lr * self.gamma ** ((epoch + 1) // self.step_size)
        return ScheduleAction(self.lr)


class SoftRankProtocol(ConstantLR):
    """x``factor`` on no improvement of the training metric; re-initialise after ``reinit_patience``.

    After a re-initialisation the improvement tracking starts afresh (the new weights are compared
    with themselves, not with the best of the previous start); the rate keeps its decayed value.
    """

    needs_train_metric = True

    def __init__(self, base_lr: float, *, factor: float = 0.8, reinit_patience: int | None = 16) -> None:
        super().__init__(base_lr)
        self.factor, self.reinit_patience = factor, reinit_patience
        self.best = -math.inf
        self.stale = 0

    def step(self, epoch: int, train_metric: float | None = None) -> ScheduleAction:
        if train_metric is None or math.isnan(train_metric):
            raise ValueError("the softrank schedule needs the end-of-epoch training metric")
        if train_metric > self.best:
            self.best, self.stale = train_metric, 0
            return ScheduleAction(self.lr)
        self.stale += 1
        self.lr *= self.factor
        if self.reinit_patience is not None and self.stale >= self.reinit_patience:
            self.best, self.stale = -math.inf, 0
            return ScheduleAction(self.lr, reinitialize=True)
        return ScheduleAction(self.lr)

    def state_dict(self) -> dict[str, Any]:
        return {"lr": self.lr, "best": self.best, "stale": self.stale}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lr, self.best, self.stale = float(state["lr"]), float(state["best"]), int(state["stale"])


def build_schedule(spec: Any, base_lr: float) -> ConstantLR:
    """From a :class:`~smoothrank.training.config.ScheduleConfig`."""
    if spec.name == "step":
        return StepDecay(base_lr, step_size=spec.step_size, gamma=spec.gamma)
    if spec.name == "softrank":
        return SoftRankProtocol(base_lr, factor=spec.factor, reinit_patience=spec.reinit_patience)
    return ConstantLR(base_lr)
