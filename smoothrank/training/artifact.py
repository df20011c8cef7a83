"""A trained model as one self-contained file.

The file (``torch.save`` of plain containers and tensors, loadable with ``weights_only=True``)
holds the weights, the resolved model config, the fitted feature transforms' state, the
feature count, the smoothrank version and the whole resolved training config. Predicting
needs nothing else: :func:`load_model` rebuilds the scorer and the transforms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from smoothrank import __version__
from smoothrank.errors import DataFormatError, SmoothrankError
from smoothrank.models import build_model
from smoothrank.models.scoring import ScoringModule, score_rows, scoring_module
from smoothrank.training._io import atomic_torch_save, load_torch_file
from smoothrank.training.inference import predict_scores

__all__ = ["FORMAT", "FeatureMismatchError", "RankingModel", "load_model", "save_model"]

FORMAT = "smoothrank-model"
FORMAT_VERSION = 1


class FeatureMismatchError(SmoothrankError):
    """The data has a different number of features than the model was trained on."""


@dataclass
class RankingModel:
    """A loaded artifact: ``score(dataset)`` gives one float64 score per dataset row."""

    model: nn.Module
    n_features: int
    config: dict[str, Any]
    transform_state: dict[str, Any] | None = None
    version: str = __version__
    metadata: dict[str, Any] = field(default_factory=dict)
    #: The training file's first feature index (0 or 1; None: not recorded, read each file as it
    #: says). ``smoothrank predict`` reads data files with it.
    index_base: int | None = None
    _scorer: ScoringModule | None = field(default=None, init=False, repr=False, compare=False)

    def transform(self, dataset: Any) -> Any:
        """Apply the fitted training-time feature transforms (none: ``dataset`` unchanged)."""
        if self.transform_state is None:
            return dataset
        from smoothrank.data.transforms import transform_from_state

        return transform_from_state(self.transform_state).transform(dataset)

    def check_features(self, dataset: Any, *, source: str = "data") -> None:
        if dataset.n_features != self.n_features:
            raise FeatureMismatchError(
                f"{source} has {dataset.n_features} features but the model was trained on "
                f"{self.n_features}")

    def prepared(self, dataset: Any, *, source: str = "data") -> Any:
        """``dataset`` as the network takes it: its feature count checked, the fitted transforms applied
        to the rows a batch reads (:func:`smoothrank.data.transforms.transformed`: no transformed copy;
        every row is transformed once first, so that a value the transforms refuse is an error here)."""
        self.check_features(dataset, source=source)
        if self.transform_state is None:
            return dataset
        from smoothrank.data.transforms import transform_from_state, transformed

        return transformed(transform_from_state(self.transform_state), dataset)

    def score(self, dataset: Any, *, batch_size: int = 256, source: str = "data") -> np.ndarray:
        """One float64 score per row of ``dataset`` (shape ``(n_docs,)``), after :meth:`prepared`
        (``source`` names the data in a feature-count error)."""
        return predict_scores(self.model, self.prepared(dataset, source=source), batch_size=batch_size)

    def scoring_module(self) -> ScoringModule:
        """The network with the fitted transforms inside, ``(features (B, L, F), mask (B, L)) -> scores``
        (:func:`smoothrank.models.scoring.scoring_module`; what ``smoothrank export`` writes)."""
        if self._scorer is None:
            module = scoring_module(self.model, self.transform_state, self.n_features, with_mask=True)
            assert isinstance(module, ScoringModule)  # with_mask=True: the module itself, not a wrapper
            self._scorer = module
        return self._scorer

    def predict(self, features: Any, *, qid: Any = None, batch_size: int = 256) -> np.ndarray:
        """Scores of raw feature rows: no labels, no :class:`~smoothrank.data.Dataset`.

        Parameters
        ----------
        features : array-like of shape (n_rows, n_features)
            Raw features (the fitted transforms are applied).
        qid : array-like of shape (n_rows,), optional
            The query of each row; rows of a query need not be contiguous. None: all rows are one
            query (as :meth:`score_query`).
        batch_size : int
            Queries per forward pass.

        Returns
        -------
        ndarray of float64, shape (n_rows,)
            One score per row, in input order: those of :meth:`score` (and ``smoothrank predict``)
            on the same rows grouped by ``qid``, to float32 rounding.
        """
        return score_rows(self.scoring_module(), features, qid, n_features=self.n_features,
                          batch_size=batch_size)

    def score_query(self, features: Any) -> np.ndarray:
        """Scores of one query's documents: ``features`` (n_docs, n_features) -> (n_docs,) float64."""
        return self.predict(features)


def save_model(path: str | Path, model: nn.Module, *, config: Any, n_features: int,
               transform_state: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None,
               index_base: int | None = None) -> None:
    """Write the artifact atomically (``config``: a :class:`~smoothrank.training.config.Config`;
    ``index_base``: the training file's first feature index, :attr:`Dataset.index_base`)."""
    resolved = config.model_dump(mode="json")
    atomic_torch_save(path, {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "smoothrank_version": __version__,
        "n_features": int(n_features),
        "model_config": resolved["model"],
        "config": resolved,
        "transform_state": transform_state,
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "metadata": metadata or {},
        "index_base": index_base,
    })


def _state_dtype(state: Any) -> torch.dtype:
    """float64 for a state dict whose floating tensors are all float64, else float32: a half-precision
    file reloads in float32 (its weights convert exactly, and scores and features are not
    rounded to half precision)."""
    kinds = {v.dtype for v in state.values() if isinstance(v, torch.Tensor) and v.is_floating_point()} \
        if isinstance(state, dict) else set()
    return torch.promote_types(kinds.pop(), torch.float32) if len(kinds) == 1 else torch.float32


def load_model(path: str | Path) -> RankingModel:
    """Read an artifact written by :func:`save_model` (or ``smoothrank train``)."""
    path = Path(path)
    if path.is_dir():
        hint = f" (the model of a run is {path / 'model.pt'})" if (path / "model.pt").is_file() else ""
        raise SmoothrankError(f"{path}: is a directory, not a model file{hint}")
    if not path.is_file():
        raise FileNotFoundError(2, "No such model file", str(path))
    blob = load_torch_file(path, "not a smoothrank model file")
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise DataFormatError(f"{path}: not a smoothrank model file")
    if blob.get("format_version", 0) > FORMAT_VERSION:
        raise DataFormatError(f"{path}: written by a newer smoothrank ({blob.get('smoothrank_version')}); "
                              f"this is {__version__}")
    try:
        model = build_model(blob["model_config"], blob["n_features"])
        # The saved weights' float type (a float64 model reloads as float64: load_state_dict
        # would round its weights into the float32 model that build_model makes).
        model.to(_state_dtype(blob["state_dict"]))
        model.load_state_dict(blob["state_dict"])
    except KeyError as err:
        raise DataFormatError(f"{path}: damaged smoothrank model file (no {err})") from None
    except (RuntimeError, TypeError, ValueError) as err:  # weights that do not fit the stored model config
        reason = str(err).strip().splitlines()[-1].strip()
        raise DataFormatError(f"{path}: damaged smoothrank model file ({reason})") from None
    model.eval()
    if blob.get("transform_state") is not None:  # damaged: named with the file now, not at scoring
        from smoothrank.data import Dataset
        from smoothrank.data.transforms import transform_from_state

        try:
            # applied once to a row of zeros of the model's width: a state fitted on another width,
            # or a column beyond it, is found here too
            probe = Dataset.from_arrays(np.zeros((1, blob["n_features"]), np.float32), np.zeros(1), ["0"])
            transform_from_state(blob["transform_state"]).transform(probe)
        except SmoothrankError as err:
            raise DataFormatError(f"{path}: damaged smoothrank model file ({err})") from None
    return RankingModel(model=model, n_features=blob["n_features"], config=blob.get("config", {}),
                        transform_state=blob.get("transform_state"),
                        version=blob.get("smoothrank_version", "unknown"), metadata=blob.get("metadata", {}),
                        index_base=blob.get("index_base"))
