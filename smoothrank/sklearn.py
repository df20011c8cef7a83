"""A scikit-learn estimator over smoothrank's models and losses: :class:`SmoothRanker`.

``SmoothRanker(loss="neural_ndcg").fit(X, y, qid=qid).predict(X_test, qid=qid_test)``, in a
``Pipeline``, ``GridSearchCV`` or ``cross_validate`` with ``GroupKFold``. Requires scikit-learn
(``pip install smoothrank[sklearn]``). See ``docs/sklearn.md``.

Queries
    ``qid`` gives one query id per row (XGBoost's form; any hashable values). The rows of a query
    need not be contiguous: rows are grouped by query id, queries in the order of their first row,
    rows of a query in input order. ``group`` gives query sizes of contiguous rows (LightGBM's form).
    With neither, all the rows are one query.
Predictions
    :meth:`SmoothRanker.predict` returns one score per row, in input order. The linear and MLP
    models score each document on its own, so ``qid`` changes nothing for them unless a transform
    is query-level (``query_minmax``); the Context-Aware Ranker scores a document within its list,
    so pass the ``qid`` of the rows (without it, all rows are one list).
Files
    ``fit`` leaves nothing on disk unless ``run_dir`` is given: the trainer's per-epoch checkpoint
    goes to a temporary folder that is removed when ``fit`` returns. With ``run_dir``, the run
    folder of ``smoothrank train`` is written there (``model.pt``, ``metrics.jsonl``, ...).
"""

from __future__ import annotations

import math
import re
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from smoothrank.errors import ConfigError, SmoothrankError
from smoothrank.models.scoring import query_order

__all__ = ["SmoothRanker", "query_order"]

_MODEL_KINDS = ("linear", "mlp", "context_aware")

#: Config keys as the estimator's parameters name them (in the errors of an invalid setting).
_PARAMETERS = {
    "optimizer.lr": "learning_rate", "optimizer.weight_decay": "weight_decay", "training.epochs": "epochs",
    "training.batch_size": "batch_size", "training.list_size": "list_size",
    "training.early_stopping_patience": "early_stopping_patience", "training.num_threads": "num_threads",
    "training.device": "device", "loss.options": "loss_options", "loss.name": "loss",
    "evaluation.convention": "convention", "evaluation.metrics": "ndcg_k", "evaluation.select_by": "ndcg_k",
    "seed": "random_state", "model.kind": "model", "model.hidden": "hidden",
}


def _as_parameters(message: str) -> str:
    """A config error's message with the keys that the estimator sets named as its parameters."""
    for key, name in _PARAMETERS.items():
        message = re.sub(rf"(?<![\w.]){re.escape(key)}(?![\w])", name, message)
    return message.replace("model.", "model_options.")


class SmoothRanker(BaseEstimator):
    """Learning to rank with smoothrank's losses and models, as a scikit-learn estimator.

    Parameters
    ----------
    loss : str
        A loss of :func:`smoothrank.losses.available` (``"neural_ndcg"``, ``"softndcg"``,
        ``"lambdarank"``, ...).
    loss_options : dict, optional
        Options of the loss (:func:`smoothrank.losses.options`).
    model : {"linear", "mlp", "context_aware"}
        The scoring model (:mod:`smoothrank.models`).
    hidden : sequence of int or int, optional
        Hidden sizes: the MLP's layer widths (default ``(64,)``), the Context-Aware Ranker's
        feed-forward width (default 384). Not taken by ``"linear"``.
    model_options : dict, optional
        Further options of the model (``activation``, ``dropout``, ``norm``, ``input_dim``,
        ``n_blocks``, ...).
    transforms : sequence of str or dict
        Feature transforms fitted on the training rows and applied before the model:
        ``"standardize"``, ``"query_minmax"``, ``"signed_log1p"`` or
        ``{"name": "signed_log1p", "features": [...]}``.
    epochs, batch_size, list_size : int
        Training epochs, queries per step, documents per training list (longer queries are sampled).
    learning_rate, weight_decay : float
        Adam's learning rate and weight decay.
    early_stopping_patience : int, optional
        Stop after this many epochs without improvement of the validation NDCG@``ndcg_k``
        (needs ``eval_set``); the best epoch's weights are kept.
    ndcg_k : int
        The cutoff of :meth:`score` and of the validation metric.
    convention : {"letor4", "lightgbm", "trec"}
        The NDCG convention of :meth:`score` and validation (:mod:`smoothrank.metrics.conventions`).
    random_state : int, RandomState or None
        Seed of the initial weights, the list sampling and dropout; an int makes ``fit`` repeat exactly.
    device : str
        Where ``fit`` trains: ``"cpu"``, ``"cuda"``, ... The fitted ``model_`` is moved to the CPU,
        where ``predict`` and ``score`` run.
    num_threads : int, optional
        Torch CPU threads during ``fit`` (None: torch's setting).
    run_dir : str or path, optional
        Write the training run folder there (``smoothrank train``'s files, ``model.pt`` among them).
    verbose : bool
        A progress bar on a terminal.

    Examples
    --------
    >>> from smoothrank.datasets import make_synthetic
    >>> from smoothrank.sklearn import SmoothRanker
    >>> data = make_synthetic(6, 8, 4, seed=0)      # 6 queries of 8 documents, 4 features
    >>> ranker = SmoothRanker(loss="list_net", model="linear", epochs=2, random_state=0)
    >>> ranker = ranker.fit(data.features, data.labels, qid=data.query_ids)
    >>> scores = ranker.predict(data.features, qid=data.query_ids)
    >>> scores.shape, scores.dtype
    ((48,), dtype('float64'))
    >>> 0.0 <= ranker.score(data.features, data.labels, qid=data.query_ids) <= 1.0   # mean NDCG@10
    True
    """

    def __init__(self, loss: str = "neural_ndcg", loss_options: Mapping[str, Any] | None = None, *,
                 model: str = "mlp", hidden: Sequence[int] | int | None = None,
                 model_options: Mapping[str, Any] | None = None,
                 transforms: Sequence[str | Mapping[str, Any]] = ("standardize",),
                 epochs: int = 100, batch_size: int = 64, list_size: int = 240, learning_rate: float = 1e-3,
                 weight_decay: float = 0.0, early_stopping_patience: int | None = None, ndcg_k: int = 10,
                 convention: str = "letor4", random_state: Any = None, device: str = "cpu",
                 num_threads: int | None = None, run_dir: str | Path | None = None, verbose: bool = False
                 ) -> None:
        self.loss = loss
        self.loss_options = loss_options
        self.model = model
        self.hidden = hidden
        self.model_options = model_options
        self.transforms = transforms
        self.epochs = epochs
        self.batch_size = batch_size
        self.list_size = list_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.early_stopping_patience = early_stopping_patience
        self.ndcg_k = ndcg_k
        self.convention = convention
        self.random_state = random_state
        self.device = device
        self.num_threads = num_threads
        self.run_dir = run_dir
        self.verbose = verbose

    # ------------------------------------------------------------------ configuration
    def _model_section(self) -> dict[str, Any]:
        if self.model not in _MODEL_KINDS:
            raise ConfigError(f"model: expected one of {list(_MODEL_KINDS)}, got {self.model!r}")
        section: dict[str, Any] = {"kind": self.model, **dict(self.model_options or {})}
        if self.hidden is not None:
            if self.model == "linear":
                raise ConfigError("hidden: the linear model has no hidden layer")
            hidden = self.hidden
            if self.model == "mlp":
                hidden = [hidden] if isinstance(hidden, int | np.integer) else list(hidden)
            section["hidden"] = hidden
        return section

    def _config(self, seed: int) -> Any:
        from smoothrank.training.config import config_from_dict

        metric = f"ndcg@{self.ndcg_k}"
        transforms = [t if isinstance(t, str) else dict(t) for t in self.transforms]
        try:
            return self._validated(config_from_dict, seed, metric, transforms)
        except ConfigError as err:
            raise ConfigError(_as_parameters(str(err))) from None

    def _validated(self, config_from_dict: Any, seed: int, metric: str, transforms: list[Any]) -> Any:
        return config_from_dict({
            "seed": seed,
            "data": {"train": "<arrays>"},
            "transforms": transforms,
            "model": self._model_section(),
            "loss": {"name": self.loss, "options": dict(self.loss_options or {})},
            "optimizer": {"name": "adam", "lr": self.learning_rate, "weight_decay": self.weight_decay},
            "training": {"epochs": self.epochs, "batch_size": self.batch_size, "list_size": self.list_size,
                         "early_stopping_patience": self.early_stopping_patience,
                         "num_threads": self.num_threads, "device": self.device},
            "evaluation": {"metrics": [metric], "select_by": metric, "convention": self.convention},
        }, source="SmoothRanker")

    def _seed(self) -> int:
        if isinstance(self.random_state, int | np.integer) and not isinstance(self.random_state, bool):
            return int(self.random_state)
        return int(check_random_state(self.random_state).randint(0, 2**31 - 1))

    # ------------------------------------------------------------------ data
    def _dataset(self, X: Any, y: Any | None, qid: Any, group: Any, *, reset: bool,
                 names: tuple[str, str] = ("qid", "group"), source: str = "X") -> tuple[Any, np.ndarray]:
        """A :class:`smoothrank.data.Dataset` of the rows grouped by query, and the grouping order."""
        from smoothrank.data import Dataset

        if y is None:
            X = validate_data(self, X, reset=reset, dtype=np.float32, ensure_min_samples=1)
            labels = np.zeros(X.shape[0], dtype=np.float32)
        else:
            X, labels = validate_data(self, X, y, reset=reset, dtype=np.float32, y_numeric=True)
            labels = np.asarray(labels, dtype=np.float64)
            if labels.ndim != 1:
                raise SmoothrankError(f"y: expected one relevance label per row, got shape {labels.shape}")
            if (labels < 0).any():
                raise SmoothrankError(f"y: relevance labels must be >= 0, got {labels.min():g}")
        order, query = query_order(X.shape[0], qid, group, names=names)
        dataset = Dataset.from_arrays(X[order], labels[order], query, source=source)
        return dataset, order

    def _eval_dataset(self, eval_set: Any, eval_qid: Any, eval_group: Any) -> Any | None:
        if eval_set is None:
            if eval_qid is not None or eval_group is not None:
                raise SmoothrankError("eval_qid/eval_group given without eval_set")
            return None
        if isinstance(eval_set, list):  # XGBoost's and LightGBM's form: a list of (X, y) pairs
            if len(eval_set) != 1:
                raise SmoothrankError(f"eval_set: expected one (X, y) pair, got {len(eval_set)}")
            eval_set = eval_set[0]
        eval_qid, eval_group = (v[0] if isinstance(v, list) and len(v) == 1 and np.ndim(v[0]) == 1 else v
                                for v in (eval_qid, eval_group))
        if not isinstance(eval_set, tuple) or len(eval_set) != 2:
            raise SmoothrankError("eval_set: expected an (X, y) pair")
        dataset, _ = self._dataset(*eval_set, eval_qid, eval_group, reset=False,
                                   names=("eval_qid", "eval_group"), source="eval_set")
        return dataset

    # ------------------------------------------------------------------ estimator API
    def fit(self, X: Any, y: Any, *, qid: Any = None, group: Any = None, eval_set: Any = None,
            eval_qid: Any = None, eval_group: Any = None) -> SmoothRanker:
        """Train on ``X`` (n_rows, n_features) with relevance labels ``y`` (n_rows,).

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
        y : array-like of shape (n_rows,)
            Relevance grades (>= 0; integers for the usual gains).
        qid : array-like of shape (n_rows,), optional
            The query id of each row (see the module docstring).
        group : array-like of int, optional
            Query sizes of contiguous rows, instead of ``qid``.
        eval_set : (X_valid, y_valid), optional
            Validation rows (or a list holding one such pair): the epoch of the best validation
            NDCG@``ndcg_k`` is kept, and ``early_stopping_patience`` stops on it.
        eval_qid, eval_group : array-like, optional
            The validation rows' queries, as ``qid`` / ``group``.

        Returns
        -------
        self
        """
        from smoothrank.training import train

        train_set, _ = self._dataset(X, y, qid, group, reset=True)
        splits = {"train": train_set}
        valid_set = self._eval_dataset(eval_set, eval_qid, eval_group)
        if valid_set is not None:
            splits["valid"] = valid_set
        config = self._config(self._seed())
        with warnings.catch_warnings():
            if valid_set is None:  # patience without eval_set: the trainer's warning names its config keys
                warnings.filterwarnings("ignore", message="training.early_stopping_patience")
            if self.run_dir is not None:
                result = train(config, run_dir=self.run_dir, quiet=not self.verbose, splits=splits)
            else:
                with tempfile.TemporaryDirectory(prefix="smoothranker-") as folder:
                    result = train(config, run_dir=Path(folder) / "run", quiet=not self.verbose,
                                   splits=splits)
        self.model_ = result.model.cpu().eval()
        self.transform_state_ = self._fitted_transform_state(config, train_set)
        self.seed_ = config.seed
        self.best_epoch_ = result.best_epoch
        self.best_score_ = result.best_value if valid_set is not None else math.nan
        self.history_ = result.history
        return self

    @staticmethod
    def _fitted_transform_state(config: Any, train_set: Any) -> dict[str, Any] | None:
        from smoothrank.training.blocks import build_transform

        transform = build_transform(config)
        return None if transform is None else transform.fit(train_set).state_dict()

    def _prepared(self, X: Any, y: Any | None, qid: Any) -> tuple[Any, np.ndarray]:
        from smoothrank.data.transforms import transform_from_state

        check_is_fitted(self, "model_")
        dataset, order = self._dataset(X, y, qid, None, reset=False)
        if self.transform_state_ is not None:
            dataset = transform_from_state(self.transform_state_).transform(dataset)
        return dataset, order

    def predict(self, X: Any, *, qid: Any = None) -> np.ndarray:
        """One score per row of ``X``, in input order (higher: ranked first).

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
        qid : array-like of shape (n_rows,), optional
            The rows' queries; without it all rows are one query (see the module docstring).

        Returns
        -------
        ndarray of float64, shape (n_rows,)
        """
        from smoothrank.training.inference import predict_scores

        dataset, order = self._prepared(X, None, qid)
        scores = np.empty(dataset.n_docs, dtype=np.float64)
        scores[order] = predict_scores(self.model_, dataset)
        return scores

    def score(self, X: Any, y: Any, *, qid: Any = None) -> float:
        """Mean NDCG@``ndcg_k`` over the queries of ``X`` under ``convention``.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
        y : array-like of shape (n_rows,)
        qid : array-like of shape (n_rows,), optional

        Returns
        -------
        float
        """
        from smoothrank.training.inference import evaluate_model

        dataset, _ = self._prepared(X, y, qid)
        metric = f"ndcg@{self.ndcg_k}"
        return evaluate_model(self.model_, dataset, metrics=[metric], convention=self.convention)[metric]

    def save_model(self, path: str | Path) -> None:
        """Write the fitted model as a ``model.pt`` artifact (for ``smoothrank predict`` and ``export``)."""
        from smoothrank.training import save_model

        check_is_fitted(self, "model_")
        save_model(path, self.model_, config=self._config(self.seed_), n_features=self.n_features_in_,
                   transform_state=self.transform_state_, metadata={"best_epoch": self.best_epoch_})

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.non_deterministic = self.random_state is None
        return tags
