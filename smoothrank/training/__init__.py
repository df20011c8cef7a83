"""Training: configuration, the trainer, learning-rate protocols, model artifacts, the demo."""

from smoothrank.training.artifact import RankingModel, load_model, save_model
from smoothrank.training.config import Config, load_config
from smoothrank.training.inference import evaluate_model, predict_scores
from smoothrank.training.trainer import TrainResult, train

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
