"""Learnable BM25F: the formula against direct references, gradients against float64 finite differences,
padding, the constrained parameters, the config, the engine export, and recovery of planted parameters."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from smoothrank.data.bm25f import packed_width
from smoothrank.errors import ConfigError, SmoothrankError
from smoothrank.losses import get as get_loss
from smoothrank.metrics import evaluate
from smoothrank.models import BM25F, build_model, reinitialize
from smoothrank.models.bm25f import K1_MIN, bm25f_scores, pack_bm25f, unpack_bm25f
from smoothrank.models.bm25f_export import combined_fields_snippet, most_fields_snippet
from smoothrank.training.config import config_from_dict


def _inputs(n_batch=2, n_docs=5, n_terms=3, n_fields=2, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 30, (n_batch, n_docs, n_fields), generator=g).to(dtype)
    rate = torch.full((n_batch, n_docs, n_terms, n_fields), 1.5)
    tf = torch.minimum(torch.poisson(rate, generator=g).to(dtype), lengths.unsqueeze(2))
    avg = torch.rand(n_fields, generator=g, dtype=dtype) * 20 + 2
    idf = torch.rand(n_batch, n_terms, generator=g, dtype=dtype) * 3 + 0.1
    return tf, lengths, avg, idf


def _direct_bm25f(tf, lengths, avg, idf, w, b, k1, term_mask=None):
    """The formula term by term, in Python floats."""
    n_batch, n_docs, n_terms, n_fields = tf.shape
    out = torch.zeros(n_batch, n_docs, dtype=torch.float64)
    tf, lengths, avg, idf = tf.tolist(), lengths.tolist(), avg.tolist(), idf.tolist()
    for q in range(n_batch):
        for d in range(n_docs):
            total = 0.0
            for t in range(n_terms):
                if term_mask is not None and not term_mask[q, t]:
                    continue
                pseudo = sum(w[f] * tf[q][d][t][f] / (1 - b[f] + b[f] * lengths[q][d][f] / avg[f])
                             for f in range(n_fields))
                total += idf[q][t] * pseudo / (k1 + pseudo)
            out[q, d] = total
    return out


def test_one_field_with_weight_one_is_classic_bm25():
    tf, lengths, avg, idf = _inputs(n_fields=1)
    k1, b = 1.2, 0.75
    ours = bm25f_scores(tf, lengths, avg, idf, weights=torch.ones(1, dtype=torch.float64),
                        b=torch.tensor([b], dtype=torch.float64), k1=torch.tensor(k1, dtype=torch.float64))
    # Robertson's BM25, idf * tf (k1 + 1) / (tf + k1 (1 - b + b dl / avgdl)), over (k1 + 1): a constant factor
    for q in range(tf.shape[0]):
        for d in range(tf.shape[1]):
            dl, expected = float(lengths[q, d, 0]), 0.0
            for t in range(tf.shape[2]):
                f = float(tf[q, d, t, 0])
                expected += float(idf[q, t]) * f * (k1 + 1) / (f + k1 * (1 - b + b * dl / float(avg[0])))
            assert float(ours[q, d]) * (k1 + 1) == pytest.approx(expected, rel=1e-12)


def test_several_fields_match_the_formula_term_by_term_and_masks_drop_terms_and_docs():
    tf, lengths, avg, idf = _inputs(n_fields=3)
    w, b, k1 = [2.0, 0.5, 1.0], [0.2, 0.9, 0.0], 1.7
    term_mask = torch.tensor([[True, False, True], [True, True, False]])
    doc_mask = torch.ones(2, 5, dtype=torch.bool)
    doc_mask[1, 2] = False
    ours = bm25f_scores(tf, lengths, avg, idf, weights=torch.tensor(w, dtype=torch.float64),
                        b=torch.tensor(b, dtype=torch.float64), k1=torch.tensor(k1, dtype=torch.float64),
                        term_mask=term_mask, doc_mask=doc_mask)
    expected = _direct_bm25f(tf, lengths, avg, idf, w, b, k1, term_mask).masked_fill(~doc_mask, 0.0)
    torch.testing.assert_close(ours, expected, rtol=1e-12, atol=1e-12)


def test_field_weight_two_with_b_zero_is_the_title_repeated_twice():
    # The BM25F paper's reading of a field weight: a document with its title written twice.
    tf, lengths, avg, idf = _inputs(n_fields=2)
    zero = torch.zeros(2, dtype=torch.float64)
    ours = bm25f_scores(tf, lengths, avg, idf, weights=torch.tensor([2.0, 1.0], dtype=torch.float64), b=zero,
                        k1=torch.tensor(1.2, dtype=torch.float64))
    merged = (2 * tf[..., 0] + tf[..., 1]).unsqueeze(-1)
    single = bm25f_scores(merged, lengths[..., :1], avg[:1], idf, weights=torch.ones(1, dtype=torch.float64),
                          b=zero[:1], k1=torch.tensor(1.2, dtype=torch.float64))
    torch.testing.assert_close(ours, single, rtol=1e-12, atol=1e-12)


def test_gradients_match_float64_finite_differences():
    tf, lengths, avg, idf = _inputs(n_docs=3, n_terms=2, n_fields=2)
    term_mask = torch.tensor([[True, False], [True, True]])
    doc_mask = torch.tensor([[True, True, False], [True, True, True]])

    def f(w, b, k1, avg_, idf_):
        return bm25f_scores(tf, lengths, avg_, idf_, weights=w, b=b, k1=k1, term_mask=term_mask,
                            doc_mask=doc_mask)

    args = (torch.tensor([1.3, 0.4], dtype=torch.float64, requires_grad=True),
            torch.tensor([0.25, 0.8], dtype=torch.float64, requires_grad=True),
            torch.tensor(1.1, dtype=torch.float64, requires_grad=True),
            avg.clone().requires_grad_(), idf.clone().requires_grad_())
    assert torch.autograd.gradcheck(f, args)
    assert torch.autograd.gradgradcheck(f, args)


def test_model_gradients_through_the_parameterisation_match_finite_differences():
    tf, lengths, avg, idf = _inputs()
    x = pack_bm25f(tf, lengths, avg, idf)
    model = BM25F(x.shape[-1], fields=["title", "body"], weights=[2.0, 0.5], b=[0.3, 0.9], k1=1.5,
                  query_independent=0).double()
    params = [model.raw_weights, model.raw_b, model.raw_k1]

    def f(*raw):
        named = dict(zip(["raw.weights", "raw.b", "raw.k1"], raw, strict=True))
        return torch.func.functional_call(model, named, (x,))

    assert torch.autograd.gradcheck(f, tuple(p.detach().clone().requires_grad_() for p in params))


def test_pack_unpack_round_trip_and_padding_anywhere():
    tf, lengths, avg, idf = _inputs()
    term_mask = torch.tensor([[True, True, False], [True, True, True]])
    x = pack_bm25f(tf, lengths, avg, idf, term_mask)
    parts = unpack_bm25f(x)
    torch.testing.assert_close(parts["tf"], tf)
    torch.testing.assert_close(parts["idf"][:, 0], idf)
    assert torch.equal(parts["term_mask"][:, 0], term_mask)
    model = BM25F(x.shape[-1], fields=["a", "b"]).double()
    plain = model(x)
    padded = torch.full((2, 8, x.shape[-1]), float("nan"), dtype=torch.float64)
    where = torch.tensor([0, 2, 3, 5, 7])
    padded[:, where] = x
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[:, where] = True
    out = model(padded, mask)
    torch.testing.assert_close(out[:, where], plain)
    assert torch.all(out[~mask] == 0)
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    assert model(x[:, :0], mask[:, :0]).shape == (2, 0)


def test_initial_values_are_the_given_ones_and_stay_in_range():
    model = BM25F(packed_width(2, 2), fields=["title", "body"], k1=2.0, b={"title": 0.0, "body": 1.0},
                  weights={"title": 3.0, "body": 0.0})
    params = model.parameters_dict()
    assert params["k1"] == pytest.approx(2.0)
    assert params["fields"]["title"]["weight"] == pytest.approx(3.0)
    assert params["fields"]["body"]["weight"] == pytest.approx(0.0, abs=1e-5)
    assert params["fields"]["title"]["b"] == pytest.approx(0.0, abs=1e-5)
    assert params["fields"]["body"]["b"] == pytest.approx(1.0, abs=1e-5)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 50)
    assert (model.weights >= 0).all() and ((model.b >= 0) & (model.b <= 1)).all() and model.k1 > 0
    reinitialize(model)  # the SoftRank schedule's re-initialisation: back to the initial values
    assert model.parameters_dict() == params


def test_config_builds_the_model_and_refuses_bad_options():
    config = config_from_dict({"data": {"train": "x"}, "model": {"kind": "bm25f", "fields": ["title", "body"],
                                                                 "b": [0.5, 0.7], "learn": ["b"]}})
    model = build_model(config.model, 3 + 2 * 2 + 2 * 2 + 2 * 2)  # 2 terms
    assert model.n_terms == 2 and model.parameters_dict()["fields"]["body"]["b"] == pytest.approx(0.7)
    assert [p.requires_grad for p in (model.raw_weights, model.raw_b, model.raw_k1)] == [False, True, False]
    bad = [({"b": 1.5}, "model.b"), ({"b": [0.5]}, "model: b: 1 values for 2 fields"),
           ({"weights": {"title": 1.0}}, "model: weights"), ({"k1": 0}, "model.k1"),
           ({"fields": []}, "model.fields"), ({"learn": ["w"]}, "model.learn")]
    for options, message in bad:
        spec = {"kind": "bm25f", "fields": ["title", "body"], **options}
        with pytest.raises(ConfigError, match=message):
            config_from_dict({"data": {"train": "x"}, "model": spec})
    with pytest.raises(ConfigError, match="not a packed BM25F layout"):
        build_model({"kind": "bm25f", "fields": ["title", "body"]}, 12)


def test_inputs_that_cannot_be_bm25f_rows_are_clear_errors():
    tf, lengths, avg, idf = _inputs()
    x = pack_bm25f(tf, lengths, avg, idf)
    model = BM25F(x.shape[-1], fields=["title", "body"]).double()
    with pytest.raises(SmoothrankError, match=r"rows of 3 fields, 3 terms .* but the model has 2 fields"):
        model(x.index_fill(-1, torch.tensor([0]), 3.0))  # another header: data of other fields
    y = x.clone()
    y[..., 3] = -1.0
    with pytest.raises(SmoothrankError, match="negative term frequency"):
        model(y)
    y = x.clone()
    y[0, 1, 3 + 3 * 2 + 2] = 0.0  # the first average length of one document
    with pytest.raises(SmoothrankError, match="average field length <= 0"):
        model(y)
    other = BM25F(x.shape[-1] + 1, fields=["title", "body"], query_independent=1).double()
    with pytest.raises(SmoothrankError, match="0 query-independent features, but the model has"):
        other(torch.cat([x, x[..., :1]], dim=-1))


def test_query_independent_features_feed_a_small_net():
    tf, lengths, avg, idf = _inputs()
    qi = torch.randn(2, 5, 2, dtype=torch.float64)
    x = pack_bm25f(tf, lengths, avg, idf, query_independent=qi)
    model = BM25F(x.shape[-1], fields=["title", "body"], query_independent=2, hidden=3).double()
    assert sum(p.numel() for p in model.combine.parameters()) == 3 * 3 + 3 + 3 + 1
    scores = model(x)
    assert scores.shape == (2, 5)
    scores.sum().backward()
    assert model.raw_b.grad is not None and model.raw_b.grad.abs().sum() > 0


def _lucene_bm25(tf, dl, avgdl, idf, k1, b):
    return idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))


def test_most_fields_snippet_is_exact_when_each_term_is_in_one_field():
    params = {"k1": 1.6, "fields": {"title": {"weight": 3.0, "b": 0.4}, "body": {"weight": 0.8, "b": 0.85}}}
    snippet = most_fields_snippet(params)
    similarity = snippet["settings"]["index"]["similarity"]
    tf, lengths, avg, idf = _inputs()
    tf[..., 0, 1] = 0  # term 0 in the title only, the others in the body only
    tf[..., 1:, 0] = 0
    ours = bm25f_scores(tf, lengths, avg, idf, weights=torch.tensor([3.0, 0.8], dtype=torch.float64),
                        b=torch.tensor([0.4, 0.85], dtype=torch.float64),
                        k1=torch.tensor(1.6, dtype=torch.float64))
    lucene = torch.zeros_like(ours)
    for f, name in enumerate(["title", "body"]):
        k1_f, b_f = similarity[f"bm25f_{name}"]["k1"], similarity[f"bm25f_{name}"]["b"]
        lucene += _lucene_bm25(tf[..., f], lengths[..., f:f + 1], avg[f], idf.unsqueeze(1), k1_f, b_f).sum(-1)
    torch.testing.assert_close(ours, lucene, rtol=1e-12, atol=1e-12)
    assert snippet["mappings"]["properties"]["body"]["similarity"] == "bm25f_body"


def test_combined_fields_snippet_rescales_boosts_to_one_with_k1():
    params = {"k1": 1.2, "fields": {"title": {"weight": 2.5, "b": 0.5}, "body": {"weight": 0.5, "b": 0.5}}}
    snippet = combined_fields_snippet(params)
    assert snippet["query"]["combined_fields"]["fields"] == ["title^5", "body^1"]
    k1 = snippet["settings"]["index"]["similarity"]["default"]["k1"]
    assert k1 == pytest.approx(2.4)
    tf, lengths, avg, idf = _inputs()
    half = torch.tensor([0.5, 0.5], dtype=torch.float64)
    a = bm25f_scores(tf, lengths, avg, idf, weights=torch.tensor([2.5, 0.5], dtype=torch.float64), b=half,
                     k1=torch.tensor(1.2, dtype=torch.float64))
    scaled = bm25f_scores(tf, lengths, avg, idf, weights=torch.tensor([5.0, 1.0], dtype=torch.float64),
                          b=half, k1=torch.tensor(k1, dtype=torch.float64))
    torch.testing.assert_close(a, scaled)  # the same BM25F: w and k1 scaled together


# --- planted parameters -------------------------------------------------------------------------

PLANTED = {"weights": torch.tensor([4.0, 1.0]), "b": torch.tensor([0.3, 0.9]), "k1": torch.tensor(2.0)}


def planted_corpus(n_queries, n_docs, seed, n_terms=3):
    """Two fields (a short title, a long body); relevance: the planted BM25F score plus noise (10% of
    its spread), cut per query into labels 0/1/2 at its 70% and 90% quantiles."""
    g = torch.Generator().manual_seed(seed)
    avg = torch.tensor([6.0, 100.0])
    lengths = (avg * torch.exp(0.5 * torch.randn(n_queries, n_docs, 2, generator=g))).round().clamp(min=1)
    rate = torch.rand(n_queries, n_docs, n_terms, 1, generator=g) ** 2 * torch.tensor([0.3, 0.05])
    tf = torch.minimum(torch.poisson(rate * lengths.unsqueeze(2), generator=g), lengths.unsqueeze(2))
    idf = 0.5 + 3 * torch.rand(n_queries, n_terms, generator=g)
    planted = bm25f_scores(tf, lengths, avg, idf, **PLANTED)
    noisy = planted + 0.1 * planted.std() * torch.randn(planted.shape, generator=g)
    cuts = torch.quantile(noisy, torch.tensor([0.7, 0.9]), dim=1).T
    labels = (noisy.unsqueeze(-1) > cuts.unsqueeze(1)).sum(-1).float()
    return pack_bm25f(tf, lengths, avg, idf), labels, planted


def _ndcg10(scores, labels):
    return float(evaluate(scores, labels, metrics=["ndcg@10"], convention="letor4")["ndcg@10"].mean())


@pytest.fixture
def one_thread():
    # small tensors: threads only add contention on a loaded machine
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_training_recovers_the_planted_ranking_quality_and_parameters(seed, one_thread):
    x, y, _ = planted_corpus(80, 12, seed)
    x_test, y_test, planted_test = planted_corpus(200, 20, 100 + seed)
    torch.manual_seed(seed)
    model = BM25F(x.shape[-1], fields=["title", "body"])  # defaults: k1 1.2, b 0.75, w 1
    loss = get_loss("soft_ndcg", sigma=0.1, method="normal")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    with torch.no_grad():
        default = _ndcg10(model(x_test), y_test)
    for _ in range(100):
        optimizer.zero_grad()
        loss(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        tuned = _ndcg10(model(x_test), y_test)
    planted = _ndcg10(planted_test, y_test)
    assert planted - default > 0.04  # the defaults are far off ...
    assert tuned > planted - 0.01  # ... and training closes the gap to the planted parameters
    params = model.parameters_dict()["fields"]
    # identifiable: the ratio of the field weights (and w / k1, loosely), b of the long field
    assert params["title"]["weight"] / params["body"]["weight"] == pytest.approx(4.0, rel=0.3)
    assert params["body"]["b"] == pytest.approx(0.9, abs=0.15)
    assert params["title"]["weight"] / model.parameters_dict()["k1"] == pytest.approx(2.0, rel=0.5)
    assert math.isfinite(params["title"]["b"])


@pytest.mark.parametrize(("option", "value"), [
    ("b", True), ("weights", False), ("b", [0.5, True]), ("weights", "12"),
    ("weights", {"title": "x", "body": 1.0}), ("b", None), ("weights", [1.0]),
])
def test_bm25f_refuses_non_numeric_per_field_values(option, value):
    with pytest.raises(ConfigError, match=f"model.{option}"):
        BM25F(packed_width(2, 2), fields=["title", "body"], **{option: value})


def test_bm25f_takes_numpy_numbers_per_field():
    model = BM25F(packed_width(2, 2), fields=["title", "body"], weights=[np.float32(2.0), np.int64(1)],
                  b=np.float64(0.5))
    weights = torch.nn.functional.softplus(model.raw.weights.detach())
    assert torch.allclose(weights, torch.tensor([2.0, 1.0]), atol=1e-5)


def test_k1_stays_positive_where_softplus_underflows():
    model = BM25F(packed_width(2, 2), fields=["title", "body"])
    with torch.no_grad():
        model.raw.k1.fill_(-200.0)  # softplus(-200) is 0 in float32
    assert model.k1.item() == pytest.approx(K1_MIN)
    tf = torch.zeros(1, 3, 2, 2)  # no term in any field: each score is 0, not 0 / 0
    tf[0, 0, 0, 0] = 1.0
    lengths = torch.full((1, 3, 2), 5.0)
    scores = bm25f_scores(tf, lengths, torch.tensor([5.0, 5.0]), torch.ones(1, 2), weights=model.weights,
                          b=model.b, k1=model.k1)
    scores.sum().backward()
    assert torch.isfinite(scores).all() and scores[0, 1:].eq(0).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
