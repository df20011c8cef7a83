"""smoothrank.sklearn.SmoothRanker: scikit-learn's estimator checks, queries, routing, no files."""

from __future__ import annotations

import pickle
import tempfile
from pathlib import Path

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")

from sklearn.base import clone  # noqa: E402
from sklearn.metrics import ndcg_score  # noqa: E402
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_validate  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

from smoothrank.errors import SmoothrankError  # noqa: E402
from smoothrank.sklearn import SmoothRanker, query_order  # noqa: E402

FAST = {"epochs": 2, "random_state": 0, "num_threads": 1}


def _data(seed: int = 0, n_queries: int = 30, docs: int = 10, n_features: int = 5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_queries * docs, n_features))
    y = np.digitize(X[:, 0] + 0.3 * rng.normal(size=X.shape[0]), [0.3, 1.0])
    qid = np.repeat(np.arange(100, 100 + n_queries), docs)
    return X, y, qid


def _context_aware(**kwargs):
    return SmoothRanker(model="context_aware", hidden=8, model_options={"input_dim": 4, "n_blocks": 1},
                        **FAST, **kwargs)


def _expected_failures(estimator):
    if estimator.model == "context_aware":
        # predict without qid scores all rows as one list, and the Context-Aware Ranker scores a
        # document within its list (self-attention): a subset of the rows is another list
        return {"check_methods_subset_invariance": "a document's score depends on the other documents "
                                                   "of its list (self-attention over the list)",
                "check_methods_sample_order_invariance": "self-attention sums over the list in the rows' "
                                                         "order: float32 rounding moves scores by ~1e-7, "
                                                         "beyond the check's rtol of 1e-7"}
    return {}


@parametrize_with_checks([SmoothRanker(hidden=(8,), **FAST), _context_aware()],
                         expected_failed_checks=_expected_failures)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_fit_predict_score_repeat_exactly_and_learn():
    X, y, qid = _data(n_queries=20)
    X_test, y_test, qid_test = _data(seed=1, n_queries=20)
    ranker = SmoothRanker(loss="neural_ndcg", hidden=(16,), epochs=8, learning_rate=0.01, random_state=0,
                          num_threads=1)
    scores = ranker.fit(X, y, qid=qid).predict(X_test, qid=qid_test)
    assert scores.shape == (X_test.shape[0],) and scores.dtype == np.float64
    again = clone(ranker).fit(X, y, qid=qid).predict(X_test, qid=qid_test)
    np.testing.assert_array_equal(scores, again)
    other = clone(ranker).set_params(random_state=1).fit(X, y, qid=qid).predict(X_test, qid=qid_test)
    assert not np.array_equal(scores, other)
    # the labels follow feature 0: a trained ranker is well above a random ordering's NDCG@10
    random_ndcg = np.mean([ndcg_score([y_test[qid_test == q]], [np.random.default_rng(0).random(10)], k=10)
                           for q in np.unique(qid_test)])
    assert ranker.set_params(convention="trec").score(X_test, y_test, qid=qid_test) > random_ndcg + 0.1


def test_score_is_mean_ndcg_at_k_as_scikit_learn_computes_it():
    # trec convention: gain = label, 1/log2(1 + r), ideal over the top k, a query without relevant
    # document 0: sklearn.metrics.ndcg_score's definition on tie-free scores
    X, y, qid = _data(n_queries=12)
    ranker = SmoothRanker(convention="trec", ndcg_k=5, hidden=(8,), **FAST).fit(X, y, qid=qid)
    scores = ranker.predict(X, qid=qid)
    expected = np.mean([ndcg_score([y[qid == q]], [scores[qid == q]], k=5) for q in np.unique(qid)])
    assert ranker.score(X, y, qid=qid) == pytest.approx(expected, abs=1e-12)


def test_query_order_groups_rows_by_first_appearance():
    order, query = query_order(6, qid=np.array(["b", "a", "b", "c", "a", "b"]))
    assert order.tolist() == [0, 2, 5, 1, 4, 3] and query.tolist() == [0, 0, 0, 1, 1, 2]
    order, query = query_order(5, group=[2, 3])
    assert order.tolist() == [0, 1, 2, 3, 4] and query.tolist() == [0, 0, 1, 1, 1]
    with pytest.raises(SmoothrankError, match="not both"):
        query_order(5, qid=np.zeros(5), group=[5])
    with pytest.raises(SmoothrankError, match="group: expected positive integer query sizes summing to"):
        query_order(5, group=[2, 2])
    with pytest.raises(SmoothrankError, match=r"qid: expected one query id per row \(5,\)"):
        query_order(5, qid=np.zeros(4))


def test_interleaved_qids_group_and_qid_give_the_same_model():
    X, y, qid = _data(n_queries=8)
    sizes = np.unique(qid, return_counts=True)[1]
    by_group = SmoothRanker(hidden=(8,), **FAST).fit(X, y, group=sizes)
    by_qid = SmoothRanker(hidden=(8,), **FAST).fit(X, y, qid=qid)
    np.testing.assert_array_equal(by_group.predict(X), by_qid.predict(X))
    # rows of a query apart from each other (query 100's rows interleaved with 101's) train the same
    perm = np.arange(X.shape[0])
    perm[:20] = np.ravel(np.column_stack([np.arange(10), np.arange(10, 20)]))
    shuffled = SmoothRanker(hidden=(8,), **FAST).fit(X[perm], y[perm], qid=qid[perm])
    np.testing.assert_allclose(shuffled.predict(X), by_qid.predict(X), rtol=0, atol=1e-6)


def test_context_aware_predict_follows_qid_and_input_order():
    X, y, qid = _data(n_queries=6)
    ranker = _context_aware().fit(X, y, qid=qid)
    scores = ranker.predict(X, qid=qid)
    perm = np.random.default_rng(3).permutation(X.shape[0])  # queries interleaved, rows reordered
    np.testing.assert_allclose(ranker.predict(X[perm], qid=qid[perm]), scores[perm], rtol=0, atol=1e-6)
    # one query on its own scores as within the batch
    first = qid == qid[0]
    np.testing.assert_allclose(ranker.predict(X[first]), scores[first], rtol=0, atol=1e-6)
    # without qid all rows are one list: other scores
    assert not np.allclose(ranker.predict(X), scores, atol=1e-4)


def test_pickle_clone_pandas_and_pipeline():
    pd = pytest.importorskip("pandas")
    X, y, qid = _data(n_queries=6)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    ranker = SmoothRanker(hidden=(8,), transforms=("signed_log1p", "query_minmax"), **FAST)
    ranker.fit(frame, pd.Series(y), qid=pd.Series(qid))
    assert list(ranker.feature_names_in_) == list(frame.columns) and ranker.n_features_in_ == 5
    restored = pickle.loads(pickle.dumps(ranker))
    np.testing.assert_array_equal(restored.predict(frame, qid=qid), ranker.predict(frame, qid=qid))
    assert clone(ranker).get_params() == ranker.get_params()
    pipe = make_pipeline(StandardScaler(), SmoothRanker(hidden=(8,), transforms=(), **FAST))
    pipe.fit(X, y, smoothranker__qid=qid)
    assert pipe.predict(X).shape == (X.shape[0],)


def test_metadata_routing_through_grid_search_and_cross_validate():
    X, y, qid = _data(n_queries=9)
    seen = []

    class Spy(SmoothRanker):
        def fit(self, X, y, *, qid=None, group=None, eval_set=None, eval_qid=None, eval_group=None):
            seen.append(("fit", X.shape[0], None if qid is None else len(qid)))
            return super().fit(X, y, qid=qid)

        def score(self, X, y, *, qid=None):
            seen.append(("score", X.shape[0], None if qid is None else len(qid)))
            return super().score(X, y, qid=qid)

    with sklearn.config_context(enable_metadata_routing=True):
        spy = Spy(hidden=(8,), **FAST).set_fit_request(qid=True).set_score_request(qid=True)
        search = GridSearchCV(spy, {"learning_rate": [1e-3, 1e-2]}, cv=GroupKFold(3), refit=False)
        search.fit(X, y, qid=qid, groups=qid)
        assert np.isfinite(search.best_score_)
        # every fit and score got the qid of its own rows (3 folds x 2 settings)
        assert len(seen) == 12 and all(n_rows == n_qid for _, n_rows, n_qid in seen)
        assert sorted({n for kind, n, _ in seen if kind == "score"}) == [30]
        seen.clear()
        result = cross_validate(spy, X, y, params={"qid": qid, "groups": qid}, cv=GroupKFold(3))
        assert len(result["test_score"]) == 3 and all(n_qid == n for _, n, n_qid in seen)


def test_no_files_unless_run_dir(tmp_path, monkeypatch):
    X, y, qid = _data(n_queries=6)
    work, temp = tmp_path / "work", tmp_path / "temp"
    work.mkdir()
    temp.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # this test's own temporary folder
    made, real = [], tempfile.TemporaryDirectory

    def spy(*args, **kwargs):
        folder = real(*args, **kwargs)
        made.append(Path(folder.name))
        return folder

    monkeypatch.setattr(tempfile, "TemporaryDirectory", spy)
    ranker = SmoothRanker(hidden=(8,), **FAST).fit(X, y, qid=qid)
    assert list(work.iterdir()) == []
    # the trainer's checkpoints went to a temporary folder, removed when fit returned
    assert made and all(folder.parent == temp and not folder.exists() for folder in made)
    run = tmp_path / "run"
    SmoothRanker(hidden=(8,), run_dir=run, **FAST).fit(X, y, qid=qid)
    assert (run / "model.pt").is_file() and (run / "metrics.jsonl").is_file()
    from smoothrank.data import Dataset
    from smoothrank.training import load_model

    ranker.save_model(tmp_path / "model.pt")
    loaded = load_model(tmp_path / "model.pt")
    dataset = Dataset.from_arrays(X, np.zeros(len(y)), qid)
    np.testing.assert_allclose(loaded.score(dataset), ranker.predict(X, qid=qid), rtol=0, atol=1e-6)


def test_eval_set_selects_and_stops_early():
    X, y, qid = _data(n_queries=10)
    Xv, yv, qv = _data(seed=2, n_queries=5)
    ranker = SmoothRanker(hidden=(8,), epochs=30, early_stopping_patience=2, learning_rate=0.05,
                          random_state=0, num_threads=1)
    ranker.fit(X, y, qid=qid, eval_set=[(Xv, yv)], eval_qid=[qv])
    assert len(ranker.history_) < 30  # stopped
    best = ranker.history_[ranker.best_epoch_ - 1]["valid_ndcg@10"]
    assert ranker.best_score_ == best == max(row["valid_ndcg@10"] for row in ranker.history_)
    assert ranker.score(Xv, yv, qid=qv) == pytest.approx(best, abs=1e-12)


@pytest.mark.parametrize(("params", "fit_kwargs", "message"), [
    ({"model": "tree"}, {}, "model: expected one of"),
    # the config's keys as the estimator's parameters
    ({"learning_rate": 0}, {}, "  - learning_rate: Input should be greater than 0"),
    ({"hidden": [0]}, {}, r"  - hidden\.0: Input should be greater than or equal to 1"),
    ({"model_options": {"dropout": 2}}, {}, "  - model_options.dropout: Input should be less than 1"),
    ({"model": "linear", "hidden": 4}, {}, "hidden: the linear model has no hidden layer"),
    ({"loss": "nope"}, {}, "nope"),
    ({}, {"eval_qid": [1]}, "eval_qid/eval_group given without eval_set"),
    ({}, {"group": [3, 3]}, "group: expected positive integer query sizes"),
])
def test_bad_arguments_are_named(params, fit_kwargs, message):
    X, y, qid = _data(n_queries=3)
    kwargs = {} if "group" in fit_kwargs else {"qid": qid}
    with pytest.raises(SmoothrankError, match=message):
        SmoothRanker(**{**FAST, **params}).fit(X, y, **kwargs, **fit_kwargs)


def test_negative_labels_are_refused():
    X, y, qid = _data(n_queries=3)
    with pytest.raises(SmoothrankError, match="y: relevance labels must be >= 0"):
        SmoothRanker(**FAST).fit(X, y - 1, qid=qid)
