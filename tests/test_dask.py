"""The boosting objectives under lightgbm.dask and xgboost.dask on a local two-worker cluster
(loopback only), with the data laid out by ``smoothrank.distributed.dask.partition_by_query``."""

from __future__ import annotations

import dask.array as da
import dask.dataframe as dd
import lightgbm as lgb
import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
import xgboost.dask  # xgb.dask
from distributed import Client, LocalCluster, wait

from smoothrank.boosting import lgbm_ranker_objective, xgboost_objective
from smoothrank.distributed.dask import partition_by_query, query_boundaries
from smoothrank.errors import SmoothrankError
from smoothrank.metrics import evaluate_flat

pytestmark = pytest.mark.filterwarnings("ignore:Parameter n_jobs will be ignored")

LOSSES = ("lambda_rank", "list_net", "neural_ndcg")


def _ranking_data(n_queries: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Queries of 8-20 documents, 6 integer features in 0..7, labels 0/1/2 from two of them plus noise.

    Integer features: each worker sees every feature value, so LightGBM's distributed bin finding
    (each worker bins a share of the features from its own rows) gives the single machine's bins.
    """
    rng = np.random.default_rng(seed)
    sizes = rng.integers(8, 21, size=n_queries)
    x = rng.integers(0, 8, size=(sizes.sum(), 6)).astype(np.float32)
    labels = np.digitize(x[:, 0] + 0.5 * x[:, 1] + rng.normal(0, 2.0, size=sizes.sum()), [6.0, 9.0])
    return x, labels.astype(np.float64), np.repeat(np.arange(n_queries), sizes)


@pytest.fixture(scope="module")
def data():
    train, test = _ranking_data(200, 0), _ranking_data(100, 1)
    # every training query has two labels: no zero Hessian, whose row-count estimates LightGBM's
    # distributed histograms do not share with one machine (docs/BENCHMARKS.md, Boosting on Dask)
    _, y, qid = train
    assert all(np.ptp(y[qid == q]) > 0 for q in np.unique(qid))
    return train, test


def _import_on_worker() -> None:
    import smoothrank.boosting  # noqa: F401


@pytest.fixture(scope="module")
def client():
    """Two worker processes (LightGBM's and XGBoost's collectives are one per process), loopback only."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None, worker_dashboard_address=None) as cluster, Client(cluster) as c:
        c.run(_import_on_worker)  # torch's import, once per worker, before the timed collectives
        yield c


def _ndcg(scores: np.ndarray, labels: np.ndarray, qid: np.ndarray) -> float:
    offsets = np.concatenate([[0], np.cumsum(np.bincount(qid))])
    return float(evaluate_flat(scores, labels, offsets=offsets, metrics=["ndcg@10"])["ndcg@10"].mean())


# ----------------------------------------------------------------------------- the partitions
def _blocks(array) -> list[np.ndarray]:
    return [np.asarray(array.blocks[i].compute()) for i in range(array.numblocks[0])]


def test_partitions_hold_whole_queries_of_interleaved_rows():
    rng = np.random.default_rng(0)
    qid = np.array(["q7", "q2", "q7", "q9", "q2", "q2", "q9", "q1", "q7", "q1"])
    x = rng.normal(size=(qid.size, 3))
    y = np.arange(qid.size, dtype=float)
    parts = partition_by_query(x, y, qid, npartitions=3)
    # queries by first appearance, the rows of each in their input order
    np.testing.assert_array_equal(parts.queries, ["q7", "q2", "q9", "q1"])
    np.testing.assert_array_equal(parts.order, [0, 2, 8, 1, 4, 5, 3, 6, 7, 9])
    np.testing.assert_array_equal(parts.features.compute(), x[parts.order])
    np.testing.assert_array_equal(parts.labels.compute(), y[parts.order])
    assert parts.npartitions == 3
    seen = set()
    for codes, labels, sizes in zip(_blocks(parts.qid), _blocks(parts.labels), _blocks(parts.group),
                                    strict=True):
        assert np.all(np.diff(codes) >= 0)
        np.testing.assert_array_equal(np.bincount(codes - codes[0]), sizes)  # group matches the rows
        whole = qid[labels.astype(int)]  # the input rows of this partition
        for q in set(whole):  # every row of each query it holds
            assert (whole == q).sum() == (qid == q).sum()
            assert q not in seen
            seen.add(q)
    assert seen == set(qid)


def test_dask_inputs_split_mid_query_are_regrouped():
    x, y, qid = _ranking_data(30, 3)
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(x.shape[1])]).assign(label=y, qid=qid)
    ddf = dd.from_pandas(frame, npartitions=4)  # cuts by rows, through queries
    parts = partition_by_query(ddf[[f"f{i}" for i in range(x.shape[1])]], ddf["label"], ddf["qid"],
                               npartitions=4)
    np.testing.assert_array_equal(parts.features.compute(), x)  # already grouped: the same rows
    ends = np.cumsum(parts.features.chunks[0])
    assert set(ends) <= set(np.cumsum(np.bincount(qid)))  # chunks end at query boundaries
    assert max(parts.features.chunks[0]) - min(parts.features.chunks[0]) <= 2 * 20  # balanced
    darr = partition_by_query(da.from_array(x, chunks=(37, 6)), da.from_array(y, chunks=37), qid,
                              npartitions=4)
    np.testing.assert_array_equal(darr.features.chunks[0], parts.features.chunks[0])


def test_query_boundaries_balance_documents_and_keep_every_partition_non_empty():
    np.testing.assert_array_equal(query_boundaries([1, 1, 1, 1], 2), [0, 2, 4])
    np.testing.assert_array_equal(query_boundaries([100, 1, 1, 1], 2), [0, 1, 4])
    np.testing.assert_array_equal(query_boundaries([100, 1, 1, 1], 4), [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(query_boundaries([1, 1, 1, 100], 3), [0, 2, 3, 4])


@pytest.mark.parametrize(("args", "match"), [
    ((np.zeros((4, 2)), np.zeros(3), np.zeros(4)), "labels: 3 values for the 4 rows"),
    ((np.zeros((4, 2)), np.zeros(4), np.zeros(5)), "qid: 5 values for the 4 rows"),
    ((np.zeros(4), np.zeros(4), np.zeros(4)), "features: expected a 2-D"),
    ((np.zeros((4, 2)), np.zeros((4, 1)), np.zeros(4)), "labels: expected one label per row"),
    ((np.zeros((4, 2)), np.zeros(4), np.array([0, 1, np.nan, 2])), "qid: NaN"),
    ((np.zeros((4, 2)), np.zeros(4), np.zeros(4)), "npartitions: 2 partitions for 1 queries"),
])
def test_bad_partition_inputs_are_named(args, match):
    with pytest.raises(SmoothrankError, match=match):
        partition_by_query(*args, npartitions=2)


def _on_both_workers(client, parts) -> None:
    """Persist the partitions and check that each worker holds one (the cluster spreads them)."""
    arrays = client.persist([parts.features, parts.labels, parts.qid, parts.group])
    wait(arrays)
    holders = {w for keys in [client.who_has(a) for a in arrays] for w_list in keys.values() for w in w_list}
    assert len(holders) == 2, holders
    return arrays


TREES = {"n_estimators": 15, "learning_rate": 0.1, "num_leaves": 7, "min_child_samples": 5, "verbosity": -1,
         "deterministic": True, "random_state": 0}


@pytest.mark.parametrize("loss", LOSSES)
def test_dask_lgbm_ranker_gives_the_single_machine_ndcg(client, data, loss):
    (x, y, qid), (x_test, y_test, qid_test) = data
    sizes = np.bincount(qid)
    single = lgb.LGBMRanker(objective=lgbm_ranker_objective(loss), **TREES).fit(x, y, group=sizes)
    parts = partition_by_query(x, y, qid, npartitions=2)
    features, labels, _, group = _on_both_workers(client, parts)
    ranker = lgb.DaskLGBMRanker(client=client, objective=lgbm_ranker_objective(loss), **TREES)
    ranker.fit(features, labels, group=group)
    expected, got = single.predict(x_test), ranker.to_local().predict(x_test)
    # the same gradients of the same queries: the same trees, up to the summation order
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6 * np.abs(expected).max())
    expected, got = _ndcg(expected, y_test, qid_test), _ndcg(got, y_test, qid_test)
    assert abs(got - expected) <= 0.005, (loss, expected, got)


def test_queries_cut_by_rows_give_another_model(client, data):
    """The control: the same rows in two partitions cut mid-query (each piece ranked as a query)."""
    (x, y, qid), (x_test, _, _) = data
    sizes = np.bincount(qid)
    half = x.shape[0] // 2
    cut = np.searchsorted(np.cumsum(sizes), half, side="right")  # the query holding row `half`
    assert np.cumsum(sizes)[cut - 1] < half < np.cumsum(sizes)[cut]
    before = np.cumsum(sizes)[cut] - half
    groups = np.concatenate([sizes[:cut], [sizes[cut] - before], [before], sizes[cut + 1:]])
    rows = ((half, x.shape[0] - half),)
    features, labels = da.from_array(x, chunks=(rows[0], 6)), da.from_array(y, chunks=rows)
    group = da.from_array(groups, chunks=((cut + 1, groups.size - cut - 1),))
    ranker = lgb.DaskLGBMRanker(client=client, objective=lgbm_ranker_objective("list_net"), **TREES)
    ranker.fit(*client.persist([features, labels]), group=group)
    single = lgb.LGBMRanker(objective=lgbm_ranker_objective("list_net"), **TREES).fit(x, y, group=sizes)
    expected = single.predict(x_test)
    assert np.abs(ranker.to_local().predict(x_test) - expected).max() > 1e-4 * np.abs(expected).max()


XGB = {"max_depth": 3, "eta": 0.1, "base_score": 0.0, "seed": 0, "nthread": 1}


@pytest.mark.parametrize("loss", LOSSES)
def test_xgboost_dask_train_gives_the_single_machine_ndcg(client, data, loss):
    (x, y, qid), (x_test, y_test, qid_test) = data
    single = xgb.train(XGB, xgb.DMatrix(x, y, qid=qid), 15, obj=xgboost_objective(loss))
    parts = partition_by_query(x, y, qid, npartitions=2)
    features, labels, qids, _ = _on_both_workers(client, parts)
    dtrain = xgb.dask.DaskDMatrix(client, features, labels, qid=qids)
    booster = xgb.dask.train(client, XGB, dtrain, 15, obj=xgboost_objective(loss))["booster"]
    expected, got = single.predict(xgb.DMatrix(x_test)), booster.predict(xgb.DMatrix(x_test))
    # the same gradients of the same queries: the same trees, up to the summation order
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6 * np.abs(expected).max())
    expected, got = _ndcg(expected, y_test, qid_test), _ndcg(got, y_test, qid_test)
    assert abs(got - expected) <= 0.005, (loss, expected, got)
