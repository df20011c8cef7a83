"""Cross-checks against independent, established implementations, for every preset they implement.

- LightGBM's own ``ndcg@k`` and ``map@k`` (preset ``lightgbm``), read through a booster whose custom
  objective has zero gradients, so that the validation scores are exactly ``init_score``.
- pytrec_eval (trec_eval itself), ir-measures and ranx (preset ``trec``); trec_eval orders tied
  scores by docno, descending, which ``evaluate_flat(doc_ids=...)`` reproduces.
- scikit-learn's ``ndcg_score`` (gain = label, log2 discount, k over the list, empty -> 0): equal
  to ``trec`` without ties; with ties it averages over the orders of tied items, which we check
  against the mean of our input-order NDCG over every permutation of the input.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch

from smoothrank.errors import SmoothrankError
from smoothrank.metrics import evaluate, evaluate_flat, mean_metrics, ndcg, pad_groups

lgb = pytest.importorskip("lightgbm")  # a declared test dependency; importorskip only guards the name
pytrec_eval = pytest.importorskip("pytrec_eval")
ir_measures = pytest.importorskip("ir_measures")
ranx = pytest.importorskip("ranx")


def random_queries(seed, *, ties, n_queries=40, max_size=14, levels=4):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_size + 1, n_queries)
    n = int(sizes.sum())
    labels = rng.integers(0, levels, n).astype(np.float64)
    labels[rng.random(n) < 0.4] = 0.0  # many queries with no relevant document
    scores = rng.integers(0, 4, n).astype(np.float64) if ties else rng.normal(size=n)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return scores, labels, offsets


def lightgbm_metrics(scores, labels, offsets, ks):
    sizes = np.diff(offsets)
    features = np.random.default_rng(0).normal(size=(scores.shape[0], 2))
    data = lgb.Dataset(features, labels, group=sizes, init_score=scores, free_raw_data=False)
    record: dict = {}

    def zero_objective(preds, _data):
        return np.zeros_like(preds), np.ones_like(preds)

    params = {"objective": zero_objective, "metric": ["ndcg", "map"], "eval_at": list(ks),
              "verbosity": -1, "min_data_in_leaf": 1}
    lgb.train(params, data, num_boost_round=1, valid_sets=[data], valid_names=["v"],
              callbacks=[lgb.record_evaluation(record)])
    return {name: values[-1] for name, values in record["v"].items()}


@pytest.mark.parametrize("ties", [False, True])
def test_lightgbm_ndcg_and_map(ties):
    scores, labels, offsets = random_queries(1 + ties, ties=ties)
    ks = (1, 3, 5, 10, 20)  # 20 > every list: LightGBM scores the list there
    theirs = lightgbm_metrics(scores, labels, offsets, ks)
    names = [f"ndcg@{k}" for k in ks] + [f"map@{k}" for k in ks]
    ours = mean_metrics(evaluate_flat(scores, labels, offsets=offsets, metrics=names, convention="lightgbm"))
    for name in names:
        assert ours[name] == pytest.approx(theirs[name], abs=1e-12), name


def trec_inputs(scores, labels, offsets):
    qrels, run = {}, {}
    for q in range(len(offsets) - 1):
        rows = range(offsets[q], offsets[q + 1])
        qrels[f"q{q}"] = {f"d{i:05d}": int(labels[i]) for i in rows}
        run[f"q{q}"] = {f"d{i:05d}": float(scores[i]) for i in rows}
    doc_ids = [f"d{i:05d}" for i in range(len(scores))]
    return qrels, run, doc_ids


@pytest.mark.parametrize("ties", [False, True])
def test_pytrec_eval_per_query(ties):
    scores, labels, offsets = random_queries(3 + ties, ties=ties)
    qrels, run, doc_ids = trec_inputs(scores, labels, offsets)
    measures = {"ndcg_cut.1", "ndcg_cut.3", "ndcg_cut.10", "ndcg", "P.5", "P.20", "map", "recip_rank"}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    ours = evaluate_flat(scores, labels, offsets=offsets, convention="trec", doc_ids=doc_ids,
                         metrics="ndcg@1,ndcg@3,ndcg@10,ndcg,p@5,p@20,map,mrr")
    pairs = {"ndcg@1": "ndcg_cut_1", "ndcg@3": "ndcg_cut_3", "ndcg@10": "ndcg_cut_10", "ndcg": "ndcg",
             "p@5": "P_5", "p@20": "P_20", "map": "map", "mrr": "recip_rank"}
    for q in range(len(offsets) - 1):
        for mine, trec in pairs.items():
            assert ours[mine][q].item() == pytest.approx(theirs[f"q{q}"][trec], abs=1e-12), (q, mine)


def test_ties_need_docno_order_for_trec_eval():
    # The same tied scores in file order give a different number from trec_eval: the convention matters.
    scores, labels, offsets = random_queries(4, ties=True)
    qrels, run, _ = trec_inputs(scores, labels, offsets)
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.3"}).evaluate(run)
    with pytest.warns(UserWarning, match="no doc_ids were given"):  # and says so
        file_order = evaluate_flat(scores, labels, offsets=offsets, convention="trec", metrics="ndcg@3")
    diffs = [abs(file_order["ndcg@3"][q].item() - theirs[f"q{q}"]["ndcg_cut_3"])
             for q in range(len(offsets) - 1)]
    assert max(diffs) > 1e-3


def test_trec_eval_ties_scores_that_differ_only_past_float32():
    # trec_eval reads run scores as C floats: these two tie there and go by docno ("d9" before "d31"),
    # while the trec preset orders them in float64 (docs/metrics.md); rounded to float32 they agree.
    scores, labels, offsets = np.array([-0.1, -0.10000000000000009]), np.array([2.0, 0.0]), np.array([0, 2])
    qrels, run = {"q": {"d31": 2, "d9": 0}}, {"q": {"d31": scores[0], "d9": scores[1]}}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"P.1", "recip_rank"}).evaluate(run)["q"]
    assert (theirs["P_1"], theirs["recip_rank"]) == (0.0, 0.5)
    ours = [evaluate_flat(s, labels, offsets=offsets, convention="trec", doc_ids=["d31", "d9"],
                          metrics="p@1,mrr") for s in (scores, scores.astype(np.float32))]
    assert (ours[0]["p@1"].item(), ours[0]["mrr"].item()) == (1.0, 1.0)
    assert (ours[1]["p@1"].item(), ours[1]["mrr"].item()) == (0.0, 0.5)


def test_ir_measures_and_ranx_means():
    scores, labels, offsets = random_queries(5, ties=False)
    qrels, run, doc_ids = trec_inputs(scores, labels, offsets)
    ours = mean_metrics(evaluate_flat(scores, labels, offsets=offsets, convention="trec", doc_ids=doc_ids,
                                      metrics="ndcg@3,ndcg@10,p@5,map,mrr"))
    agg = ir_measures.calc_aggregate([ir_measures.nDCG @ 3, ir_measures.nDCG @ 10, ir_measures.P @ 5,
                                      ir_measures.AP, ir_measures.RR], qrels, run)
    assert ours["ndcg@3"] == pytest.approx(agg[ir_measures.nDCG @ 3], abs=1e-12)
    assert ours["ndcg@10"] == pytest.approx(agg[ir_measures.nDCG @ 10], abs=1e-12)
    assert ours["p@5"] == pytest.approx(agg[ir_measures.P @ 5], abs=1e-12)
    assert ours["map"] == pytest.approx(agg[ir_measures.AP], abs=1e-12)
    assert ours["mrr"] == pytest.approx(agg[ir_measures.RR], abs=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba type-safety warnings inside ranx
        res = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run),
                            ["ndcg@3", "ndcg@10", "precision@5", "map", "mrr"], make_comparable=True)
    assert ours["ndcg@3"] == pytest.approx(res["ndcg@3"], abs=1e-12)
    assert ours["ndcg@10"] == pytest.approx(res["ndcg@10"], abs=1e-12)
    assert ours["p@5"] == pytest.approx(res["precision@5"], abs=1e-12)
    assert ours["map"] == pytest.approx(res["map"], abs=1e-12)
    assert ours["mrr"] == pytest.approx(res["mrr"], abs=1e-12)


def test_sklearn_ndcg_score_without_and_with_ties():
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(11)
    for _ in range(20):
        n = int(rng.integers(2, 6))
        y = rng.integers(0, 4, n).astype(float)
        for k in (None, 2, 9):
            s = rng.normal(size=n)
            want = ndcg_score(y[None], s[None], k=k)
            got = ndcg(s, y, k=k, gain="linear", discount="log2", empty="zero", dtype=torch.float64).item()
            assert got == pytest.approx(want, abs=1e-12)
            # Ties: sklearn averages over the orders of tied items = our mean over all input orders.
            s_tied = rng.integers(0, 2, n).astype(float)
            want = ndcg_score(y[None], s_tied[None], k=k)
            perms = list(itertools.permutations(range(n)))
            got = np.mean([ndcg(s_tied[list(p)], y[list(p)], k=k, gain="linear", empty="zero",
                                dtype=torch.float64).item() for p in perms])
            assert got == pytest.approx(want, abs=1e-12)


def test_trec_ndcg_and_ndcg_cut_use_their_own_ideal():
    """PITFALLS 12: for ``ndcg`` trec_eval's ideal DCG runs over every judged document, for
    ``ndcg_cut.k`` over the top k only. Relevant documents beyond k make the two ideals differ;
    ours match trec_eval on both, and neither equals DCG@k over the full ideal."""
    labels = np.array([1.0, 0.0, 3.0, 2.0, 0.0, 1.0])
    scores = np.array([6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
    offsets = np.array([0, 6])
    qrels, run, doc_ids = trec_inputs(scores, labels, offsets)
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg", "ndcg_cut.2", "ndcg_cut.3"}).evaluate(run)["q0"]
    ours = evaluate_flat(scores, labels, offsets=offsets, convention="trec", doc_ids=doc_ids,
                         metrics="ndcg,ndcg@2,ndcg@3")
    assert ours["ndcg"].item() == pytest.approx(theirs["ndcg"], abs=1e-12)
    assert ours["ndcg@2"].item() == pytest.approx(theirs["ndcg_cut_2"], abs=1e-12)
    assert ours["ndcg@3"].item() == pytest.approx(theirs["ndcg_cut_3"], abs=1e-12)
    full_ideal = 3 + 2 / np.log2(3) + 1 / 2 + 1 / np.log2(5)
    assert abs(theirs["ndcg_cut_2"] - 1.0 / full_ideal) > 0.02  # DCG@2 / full ideal: the mix-up


def test_evaluate_takes_doc_ids_for_trec_ties_as_evaluate_flat_does():
    # evaluate had no doc_ids: on padded batches with tied scores it could not match trec_eval.
    scores, labels, offsets = random_queries(4, ties=True)
    qrels, run, doc_ids = trec_inputs(scores, labels, offsets)
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.3", "map"}).evaluate(run)
    s_pad, mask = pad_groups(np.asarray(scores), offsets)
    y_pad, _ = pad_groups(np.asarray(labels), offsets)
    ids = np.full(tuple(mask.shape), "", dtype=object)
    for q in range(len(offsets) - 1):
        ids[q, : offsets[q + 1] - offsets[q]] = doc_ids[offsets[q]:offsets[q + 1]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ids given: no warning
        ours = evaluate(s_pad, y_pad, mask=mask, convention="trec", metrics="ndcg@3,map", doc_ids=ids)
    for q in range(len(offsets) - 1):
        assert ours["ndcg@3"][q].item() == pytest.approx(theirs[f"q{q}"]["ndcg_cut_3"], abs=1e-12)
        assert ours["map"][q].item() == pytest.approx(theirs[f"q{q}"]["map"], abs=1e-12)
    with pytest.raises(SmoothrankError, match=r"^doc_ids: shape"):
        evaluate(s_pad, y_pad, mask=mask, convention="trec", doc_ids=ids[:, :1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no tie among the real items: no warning either
        evaluate(torch.tensor([[1.0, 2.0, 0.0]]), torch.tensor([[1.0, 0.0, 0.0]]),
                 mask=torch.tensor([[True, True, False]]), convention="trec")
        evaluate(torch.tensor([[1.0, 1.0]]), torch.tensor([[1.0, 0.0]]), convention="letor4")  # not trec


def test_doc_ids_move_the_mask_with_the_scores_and_only_real_ties_warn():
    # Padding in the middle of a row, with an id that sorts first: the mask must travel with it.
    s = torch.tensor([[1.0, 9.0, 1.0, 0.5]], dtype=torch.float64)
    y = torch.tensor([[0.0, 0.0, 2.0, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[True, False, True, True]])
    ids = np.array([["d1", "zzz", "d3", "d0"]])
    got = evaluate(s, y, mask=mask, convention="trec", metrics="ndcg@1,map", doc_ids=ids)
    want = evaluate_flat([1.0, 1.0, 0.5], [0.0, 2.0, 1.0], offsets=[0, 3], convention="trec",
                         metrics="ndcg@1,map", doc_ids=["d1", "d3", "d0"])
    assert got["ndcg@1"].item() == want["ndcg@1"].item() == 1.0  # d3 (relevant) before d1 in the tie
    assert got["map"].item() == pytest.approx(want["map"].item(), abs=1e-15)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a real score tied with a padded one is no tie
        evaluate(torch.tensor([[1.0, 1.0, 2.0]]), torch.tensor([[1.0, 0.0, 0.0]]),
                 mask=torch.tensor([[True, False, True]]), convention="trec")
    with pytest.warns(UserWarning, match="no doc_ids were given") as record:  # 1-D: one query
        evaluate(torch.tensor([1.0, 1.0]), torch.tensor([1.0, 0.0]), convention="trec")
    assert record[0].filename == __file__  # reported at the caller, not inside the library
    with pytest.warns(UserWarning, match="no doc_ids were given") as record:
        evaluate_flat([1.0, 1.0], [1.0, 0.0], offsets=[0, 2], convention="trec")
    assert record[0].filename == __file__
    with pytest.raises(SmoothrankError, match=r"^doc_ids: expected an array"):
        evaluate(s, y, mask=mask, convention="trec", doc_ids=[["a", "b"], ["c"]])
