"""Scoring and evaluating a model on a dataset: what training, the model artifact, ``smoothrank
predict``/``evaluate`` and the experiment runner score with.

A model is scored in evaluation mode (dropout off, batch norm's running statistics: PITFALLS 16),
on the device and in the float type of its first floating parameter, over full query lists
(:func:`smoothrank.data.evaluation_batches`). A non-finite score of a real document is refused
with an error naming its data file and line.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor, nn

from smoothrank._checks import check_positive_int
from smoothrank.errors import TrainingError

__all__ = ["QUERIES_PER_CHUNK", "NonFiniteScoreError", "Scorable", "evaluate_model", "per_query_metrics",
           "predict_scores", "scored_batches", "scored_chunks"]


class NonFiniteScoreError(TrainingError):
    """A real document scored inf or NaN (the message names its file and line)."""

    def __init__(self, where: str, score: float) -> None:
        super().__init__(f"{where}: the model scored this document {score} (its features are too large "
                         "for the model's arithmetic, or the weights are not finite)")
        self.where, self.score = where, score


class Scorable(Protocol):
    """A loaded model artifact (:class:`smoothrank.training.artifact.RankingModel`): a network and
    what turns a dataset into its input."""

    model: nn.Module

    def prepared(self, dataset: Any, *, source: str = ...) -> Any:
        """``dataset`` checked against the network and transformed as at training time."""


def _placement(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    """Where and in which float type ``model`` computes: that of its first floating parameter, so
    that a float64 or GPU model of one's own is fed alike (CPU float32 for one without any)."""
    for param in model.parameters():
        if param.is_floating_point():
            return param.device, param.dtype
    return torch.device("cpu"), torch.get_default_dtype()


@torch.no_grad()
def scored_batches(model: nn.Module | Scorable, dataset: Any, *, batch_size: int
                   ) -> Iterator[tuple[Any, Tensor]]:
    """``(batch, scores)`` over the full query lists of ``dataset``
    (:func:`smoothrank.data.evaluation_batches`); ``scores`` of shape ``(batch, list_size)`` on the CPU,
    finite for every real document. A loaded artifact is checked and its transforms applied first."""
    from smoothrank.data import evaluation_batches

    if not isinstance(model, nn.Module):  # a loaded artifact
        dataset, model = model.prepared(dataset), model.model
    was_training = model.training
    device, dtype = _placement(model)
    model.eval()
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
    raise NonFiniteScoreError(where, float(scores[b, j]))


def predict_scores(model: nn.Module | Scorable, dataset: Any, *, batch_size: int = 256) -> np.ndarray:
    """One float64 score per dataset row.

    Parameters
    ----------
    model : nn.Module or RankingModel
        A network ``model(features, mask) -> scores``, or a loaded artifact
        (:func:`smoothrank.training.load_model`), which first applies its training-time transforms.
    dataset : Dataset
    batch_size : int
        Queries scored at once.

    Returns
    -------
    numpy.ndarray
        Shape ``(dataset.n_docs,)``, in the row order of ``dataset``.
    """
    scores = np.empty(dataset.n_docs, dtype=np.float64)
    _fill_scores(model, dataset, scores, batch_size)
    _check_filled(scores)
    return scores


def _fill_scores(model: nn.Module | Scorable, dataset: Any, out: np.ndarray, batch_size: int) -> None:
    """``out[row]`` = the score of each dataset row, in :func:`scored_batches`' batches; NaN first, so
    that a row no batch scored shows (:func:`_check_filled`)."""
    out[:] = np.nan
    for batch, batch_scores in scored_batches(model, dataset, batch_size=batch_size):
        rows = batch.rows.numpy()
        real = rows >= 0
        out[rows[real]] = batch_scores.double().numpy()[real]


def _check_filled(scores: np.ndarray) -> None:
    if np.isnan(scores).any():
        raise TrainingError("the model produced NaN scores (or evaluation_batches skipped rows)")


#: Queries whose scores :func:`scored_chunks` yields at a time (``smoothrank predict`` writes them).
QUERIES_PER_CHUNK = 2048


def scored_chunks(model: nn.Module | Scorable, dataset: Any, *, batch_size: int = 256, source: str = "data",
                  queries_per_chunk: int | None = None) -> Iterator[tuple[int, int, np.ndarray]]:
    """The scores of ``dataset``'s rows a range of queries at a time, for writing them as they come
    (:func:`smoothrank.data.writers.write_scores`), without holding every score in memory.

    The scores are those of :func:`predict_scores`, to the bit: computed in its batches (a model's
    score of a document can differ in the last bit with the other lists of its batch, so the batches
    are not formed per range), into a file-backed scratch array
    (:func:`smoothrank.data.store.scratch_array`: pages of the page cache, not of the process's
    memory), then read back a range at a time.

    Parameters
    ----------
    model : nn.Module or RankingModel
        As in :func:`predict_scores` (a loaded artifact's transforms are applied to each batch's rows,
        every row checked once first: :meth:`RankingModel.prepared`).
    dataset : Dataset
    batch_size : int
        Queries per forward pass.
    source : str
        Names the data in a feature-count error.
    queries_per_chunk : int, optional
        Queries a range (default :data:`QUERIES_PER_CHUNK`).

    Yields
    ------
    (int, int, numpy.ndarray)
        ``(first, stop, scores)``: queries ``first..stop-1``, in order, and the float64 scores of their
        rows (n_rows,), in row order.
    """
    from smoothrank.data import store

    step = QUERIES_PER_CHUNK if queries_per_chunk is None else check_positive_int(queries_per_chunk,
                                                                                   "queries_per_chunk")
    if not isinstance(model, nn.Module):  # a loaded artifact
        dataset, model = model.prepared(dataset, source=source), model.model
    held = store.scratch_array((dataset.n_docs,), np.float64)
    _fill_scores(model, dataset, held, batch_size)
    for first in range(0, dataset.n_queries, step):
        stop = min(first + step, dataset.n_queries)
        scores = np.array(held[int(dataset.offsets[first]):int(dataset.offsets[stop])])
        _check_filled(scores)
        yield first, stop, scores


def evaluate_model(model: nn.Module | Scorable, dataset: Any, *, metrics: str | Iterable[str],
                   convention: str = "letor4", batch_size: int = 256) -> dict[str, float]:
    """Mean of each metric over the queries of ``dataset`` (:func:`smoothrank.metrics.evaluate`).

    Keyed as ``evaluate`` keys them (``"NDCG@3"`` -> ``"ndcg@3"``). Under a convention that orders
    tied scores by document id (``trec``) the dataset's ``doc_ids`` are passed along, so that the
    values are those of :func:`smoothrank.metrics.evaluate_flat` (and trec_eval).

    Parameters
    ----------
    model : nn.Module or RankingModel
        As in :func:`predict_scores`.
    dataset : Dataset
    metrics : str or iterable of str
        Metric names, or one comma-separated string.
    convention : str
        A metric convention (:func:`smoothrank.metrics.get_convention`).
    batch_size : int
        Queries scored at once.

    Returns
    -------
    dict[str, float]
        Metric name -> mean over the queries the convention does not skip.
    """
    from smoothrank.metrics import mean_metrics

    per_query = per_query_metrics(model, dataset, metrics=metrics, convention=convention,
                                  batch_size=batch_size)
    return {name: float(value) for name, value in mean_metrics(per_query).items()}


def per_query_metrics(model: nn.Module | Scorable, dataset: Any, *, metrics: str | Iterable[str],
                      convention: str = "letor4", batch_size: int = 256) -> dict[str, Tensor]:
    """Each metric of each query of ``dataset``, as :func:`evaluate_model` averages them.

    Parameters
    ----------
    model, dataset, metrics, convention, batch_size
        As in :func:`evaluate_model`.

    Returns
    -------
    dict[str, Tensor]
        Metric name -> float64 ``(n_queries,)``, NaN for a query the convention skips.
    """
    from smoothrank import metrics as metrics_module
    from smoothrank.metrics.evaluate import metric_list

    names = metric_list(metrics)
    docno_ties = metrics_module.get_convention(convention).docno_ties
    doc_ids = getattr(dataset, "doc_ids", None) if docno_ties else None
    per_query = {name: torch.full((dataset.n_queries,), math.nan, dtype=torch.float64) for name in names}
    for batch, scores in scored_batches(model, dataset, batch_size=batch_size):
        ids = None
        if doc_ids is not None:
            rows = batch.rows.numpy()
            ids = np.where(rows >= 0, np.asarray(doc_ids)[np.maximum(rows, 0)], "")
        values = metrics_module.evaluate(scores, batch.labels, mask=batch.mask, metrics=tuple(names),
                                         convention=convention, doc_ids=ids)
        for name in names:
            per_query[name][batch.query_index] = torch.as_tensor(values[name]).double().cpu()
    return per_query
