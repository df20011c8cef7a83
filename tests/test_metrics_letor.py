"""The official LETOR 4.0 convention (Eval-Score-4.0.pl) on real MQ2008 data.

``perl_like`` below is an independent, literal Python transcription of the script's per-query
logic (documents sorted by prediction with file order kept on ties; DCG over the whole list with
topN = number of documents, so NDCG@k is undefined, counted 0, past the list; ideal DCG 0 -> 0;
P@k with missing ranks non-relevant; AP 0 without relevant documents). Facts from
../shared/data/README.md are asserted on top.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from smoothrank.data import load_letor
from smoothrank.metrics import LETOR4_METRICS, evaluate_flat, mean_metrics

NDCG_GAIN = {0: 0.0, 1: 1.0, 2: 3.0}
REL = {0: 0, 1: 1, 2: 1}


def perl_like(labels: list[int], preds: list[float]) -> dict[str, float]:
    order = sorted(range(len(labels)), key=lambda i: -preds[i])  # Python's sort is stable
    rates = [labels[i] for i in order]
    n = len(rates)
    out: dict[str, float] = {}
    hits = 0
    for pos in range(10):
        r = rates[pos] if pos < n else 0
        hits += REL[r]
        out[f"p@{pos + 1}"] = hits / (pos + 1)
    n_rel, ap = 0, 0.0
    for pos, r in enumerate(rates):
        if REL[r]:
            n_rel += 1
            ap += n_rel / (pos + 1)
    out["map"] = ap / n_rel if n_rel else 0.0

    def dcg(rs):
        acc, values = 0.0, []
        for pos in range(n):
            g = NDCG_GAIN[rs[pos]]
            acc += g if pos < 2 else g * math.log(2.0) / math.log(pos + 1.0)
            values.append(acc)
        return values

    actual, best = dcg(rates), dcg(sorted(rates, key=lambda r: -NDCG_GAIN[r]))
    for pos in range(10):
        if pos >= n:
            value = 0.0  # the script never defines NDCG past the list: it averages as 0
        else:
            value = actual[pos] / best[pos] if best[pos] != 0 else 0.0
        out[f"ndcg@{pos + 1}"] = value
    return out


@pytest.fixture(scope="module")
def mq2008_test(shared_dir):
    return load_letor(shared_dir / "data" / "MQ2008" / "Fold1" / "test.txt.gz")


@pytest.mark.parametrize("feature", [0, 7, 38])  # raw feature columns as scorers: many ties
def test_letor4_matches_the_script_per_query(mq2008_test, feature):
    ds = mq2008_test
    scores = ds.features[:, feature].astype(np.float64)
    per = evaluate_flat(scores, ds.labels, offsets=ds.offsets, metrics=LETOR4_METRICS, convention="letor4")
    for q in range(ds.n_queries):
        a, b = ds.offsets[q], ds.offsets[q + 1]
        want = perl_like([int(v) for v in ds.labels[a:b]], scores[a:b].tolist())
        for name in LETOR4_METRICS:
            assert per[name][q].item() == pytest.approx(want[name], abs=1e-12), (q, name)


def test_letor4_readme_facts(mq2008_test):
    ds = mq2008_test
    sizes = np.diff(ds.offsets)
    rng = np.random.default_rng(0)
    scores = ds.features[:, 0].astype(np.float64) + 1e-9 * rng.random(ds.n_docs)
    per = evaluate_flat(scores, ds.labels, offsets=ds.offsets, metrics=LETOR4_METRICS, convention="letor4")
    # NDCG@k of a query with fewer than k documents counts 0.
    assert (per["ndcg@10"][sizes < 10] == 0).all()
    assert (per["ndcg@8"][sizes < 8] == 0).all()
    # A query with no relevant document scores 0 everywhere (and is counted in the mean).
    bounds = list(zip(ds.offsets[:-1], ds.offsets[1:], strict=True))
    has_rel = np.array([(ds.labels[a:b] > 0).any() for a, b in bounds])
    assert (~has_rel).sum() > 0
    for name in LETOR4_METRICS:
        assert (per[name][~has_rel] == 0).all(), name
    means = mean_metrics(per)
    # Because of the short lists NDCG@10 is about half of NDCG@8 (README).
    assert 0.35 < means["ndcg@10"] / means["ndcg@8"] < 0.65
    # P@k counts missing ranks as non-relevant: P@10 <= number of relevant docs / 10.
    n_rel = np.array([(ds.labels[a:b] > 0).sum() for a, b in bounds])
    assert (per["p@10"].numpy() <= n_rel / 10 + 1e-12).all()
    # The same scores under LightGBM's convention: empty queries now score 1, short lists are scored.
    lgbm = mean_metrics(evaluate_flat(scores, ds.labels, offsets=ds.offsets, metrics=["ndcg@10"],
                                      convention="lightgbm"))
    assert lgbm["ndcg@10"] > 2 * means["ndcg@10"]
