"""Boosting on a Dask cluster with the smoothrank objectives, queries kept whole.

``lightgbm.dask.DaskLGBMRanker`` and ``xgboost.dask.train`` train one booster with every Dask
worker holding a share of the rows: each worker computes the gradients of the rows it holds with
the objective it was given, and the workers combine their histograms. A smoothrank objective
ranks the documents of a query against each other, so a query split between two partitions (and
so, possibly, two workers) would be ranked as two separate queries, and its gradients would be
wrong without any error. :func:`partition_by_query` lays out features, labels and query ids as
Dask arrays whose row chunks start and end at query boundaries, in the form each library takes::

    parts = partition_by_query(X, y, qid, npartitions=2)
    # LightGBM
    ranker = lightgbm.DaskLGBMRanker(client=client, objective=lgbm_ranker_objective("neural_ndcg"))
    ranker.fit(parts.features, parts.labels, group=parts.group)
    # XGBoost
    dtrain = xgboost.dask.DaskDMatrix(client, parts.features, parts.labels, qid=parts.qid)
    booster = xgboost.dask.train(client, {"base_score": 0}, dtrain, obj=xgboost_objective("list_net"))

A worker concatenates the partitions it holds in partition order, so its rows stay grouped by
query and its query ids increasing, as XGBoost requires (PITFALLS 20). See docs/distributed.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from smoothrank._checks import check_positive_int
from smoothrank.errors import SmoothrankError

try:
    import dask.array as da
except ImportError as err:  # pragma: no cover - the dask extra is missing
    raise ImportError("smoothrank.distributed.dask needs Dask: pip install 'smoothrank[dask]'") from err

__all__ = ["QueryPartitions", "partition_by_query", "query_boundaries"]


@dataclass(frozen=True)
class QueryPartitions:
    """Rows grouped by query, chunked at query boundaries (the result of :func:`partition_by_query`).

    Attributes
    ----------
    features : dask.array.Array
        shape (n_docs, n_features), one chunk of columns; row chunks hold whole queries.
    labels : dask.array.Array
        shape (n_docs,), chunked as the rows of ``features``.
    qid : dask.array.Array
        int64, shape (n_docs,), chunked as the rows: the query's number, 0 .. n_queries - 1,
        non-decreasing (``xgboost.dask.DaskDMatrix(..., qid=)``).
    group : dask.array.Array
        int64, shape (n_queries,), the number of documents of each query, one chunk per partition
        holding that partition's queries (``lightgbm.dask.DaskLGBMRanker.fit(..., group=)``).
    order : np.ndarray
        int64, shape (n_docs,): row ``i`` of the partitioned arrays is row ``order[i]`` of the input.
    queries : np.ndarray
        shape (n_queries,): the input's query id of each query, in the partitioned order.
    """

    features: Any
    labels: Any
    qid: Any
    group: Any
    order: np.ndarray
    queries: np.ndarray

    @property
    def npartitions(self) -> int:
        """The number of partitions."""
        return len(self.group.chunks[0])


def _as_dask(values: Any, name: str) -> Any:
    """A Dask array of a NumPy array, a Dask array or a Dask/pandas frame or series."""
    if hasattr(values, "to_dask_array"):  # a Dask DataFrame or Series: row counts computed
        return values.to_dask_array(lengths=True)
    if isinstance(values, da.Array):
        if any(np.isnan(c) for c in values.chunks[0]):
            raise SmoothrankError(f"{name}: a Dask array of unknown chunk sizes; call "
                                  "compute_chunk_sizes() on it first")
        return values
    if hasattr(values, "to_numpy"):  # pandas
        values = values.to_numpy()
    try:
        array = np.asarray(values)
    except (TypeError, ValueError) as err:
        raise SmoothrankError(f"{name}: expected an array, got {type(values).__name__}") from err
    return da.from_array(array, chunks=-1)


def _query_codes(qid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's query number, queries numbered by first appearance, and the query ids in that order."""
    if qid.ndim != 1:
        raise SmoothrankError(f"qid: expected one query id per row (1-D), got shape {qid.shape}")
    if qid.dtype.kind == "f" and not np.isfinite(qid).all():
        raise SmoothrankError("qid: NaN or infinite query ids")
    if qid.dtype.kind not in "iufUSO":
        raise SmoothrankError(f"qid: expected integer or string query ids, got {qid.dtype}")
    uniques, first, inverse = np.unique(qid, return_index=True, return_inverse=True)
    by_appearance = np.argsort(first, kind="stable")
    rank = np.empty_like(by_appearance)
    rank[by_appearance] = np.arange(by_appearance.size)
    return rank[inverse.reshape(-1)].astype(np.int64), uniques[by_appearance]


def query_boundaries(sizes: Any, npartitions: int) -> np.ndarray:
    """The queries at which ``npartitions`` partitions of about equal document counts start.

    Parameters
    ----------
    sizes : array_like of int, shape (n_queries,)
        The documents of each query, in order.
    npartitions : int
        How many partitions, at most ``n_queries``.

    Returns
    -------
    np.ndarray
        int64, shape (npartitions + 1,): partition ``p`` holds queries ``bounds[p]:bounds[p + 1]``;
        ``bounds[0] == 0``, ``bounds[-1] == n_queries``, strictly increasing.
    """
    sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
    npartitions = check_positive_int(npartitions, "npartitions")
    if npartitions > sizes.size:
        raise SmoothrankError(f"npartitions: {npartitions} partitions for {sizes.size} queries; a partition "
                              "holds whole queries, so at most one partition a query")
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    targets = offsets[-1] * np.arange(1, npartitions) / npartitions
    # the query boundary nearest to each equal share of the documents
    cuts = np.rint(np.interp(targets, offsets, np.arange(offsets.size))).astype(np.int64)
    bounds = np.concatenate([[0], cuts, [sizes.size]])
    for p in range(1, npartitions):  # no empty partition: at least one query each
        bounds[p] = min(max(bounds[p], bounds[p - 1] + 1), sizes.size - (npartitions - p))
    return bounds


def partition_by_query(features: Any, labels: Any, qid: Any, *, npartitions: int = 2) -> QueryPartitions:
    """Features, labels and query ids as Dask arrays whose partitions hold whole queries.

    Parameters
    ----------
    features : array_like or dask.array.Array or dask.dataframe.DataFrame, shape (n_docs, n_features)
        A Dask DataFrame's rows are counted first (``to_dask_array(lengths=True)``).
    labels : array_like or dask array or series, shape (n_docs,)
    qid : array_like or dask array or series, shape (n_docs,)
        The query of each row (integers or strings). The rows of a query need not be adjacent: they
        are gathered in the order of the query's first row, keeping their own order inside it. The
        query ids are computed into memory (one value a row); the features stay lazy, and are
        reordered by Dask only when the rows are not already grouped.
    npartitions : int, default 2
        How many partitions, of about equal document counts (at least one per worker that is to
        train).

    Returns
    -------
    QueryPartitions
    """
    x = _as_dask(features, "features")
    y = _as_dask(labels, "labels")
    q = _as_dask(qid, "qid")
    if x.ndim != 2:
        raise SmoothrankError(f"features: expected a 2-D (n_docs, n_features) array, got shape {x.shape}")
    if y.ndim != 1:
        raise SmoothrankError(f"labels: expected one label per row (1-D), got shape {y.shape}")
    for name, n in (("labels", y.shape[0]), ("qid", q.shape[0])):
        if n != x.shape[0]:
            raise SmoothrankError(f"{name}: {n} values for the {x.shape[0]} rows of features")
    if x.shape[0] == 0:
        raise SmoothrankError("features: no rows")
    codes, queries = _query_codes(np.asarray(q.compute()))
    order = np.argsort(codes, kind="stable").astype(np.int64)
    if not np.array_equal(order, np.arange(order.size)):
        x, y = x[order], y[order]
        codes = codes[order]
    sizes = np.bincount(codes, minlength=queries.size).astype(np.int64)
    bounds = query_boundaries(sizes, npartitions)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    row_chunks = tuple(int(n) for n in np.diff(offsets[bounds]))
    query_chunks = tuple(int(n) for n in np.diff(bounds))
    return QueryPartitions(
        features=x.rechunk((row_chunks, -1)), labels=y.rechunk((row_chunks,)),
        qid=da.from_array(codes, chunks=(row_chunks,)), group=da.from_array(sizes, chunks=(query_chunks,)),
        order=order, queries=queries)
