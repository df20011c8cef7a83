"""Training: configuration, the trainer, learning-rate protocols, model artifacts, the demo.

The names below are imported on first use, so that loading a model to score with it
(:mod:`smoothrank.training.artifact`) does not import the config validation (pydantic, YAML).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Config",
    "RankingModel",
    "TrainResult",
    "evaluate_model",
    "load_config",
    "load_model",
    "predict_scores",
    "save_model",
    "train",
]

_HOMES = {
    "RankingModel": "artifact", "load_model": "artifact", "save_model": "artifact",
    "Config": "config", "load_config": "config",
    "evaluate_model": "inference", "predict_scores": "inference",
    "TrainResult": "trainer", "train": "trainer",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'smoothrank.training' has no attribute {name!r}")
    return getattr(importlib.import_module(f"smoothrank.training.{home}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
