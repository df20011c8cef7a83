"""Exact metrics: brute force over explicit orders, masks anywhere, conventions, bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from smoothrank.errors import SmoothrankError
from smoothrank.metrics import (
    average_precision,
    dcg,
    evaluate,
    evaluate_flat,
    mean_metrics,
    ndcg,
    ndcg_beta,
    pad_groups,
    pairwise_error,
    precision,
    reciprocal_rank,
)

F64 = torch.float64


# ---------- independent pure-Python references ----------

def ref_order(scores, labels, ties="input"):
    """Ranking by descending score; ties by input index, or by label (pessimistic/optimistic)."""
    def key(i):
        tie = {"input": 0, "pessimistic": labels[i], "optimistic": -labels[i]}[ties]
        return (-scores[i], tie, i)
    return sorted(range(len(scores)), key=key)


def ref_gain(y, gain):
    return 2.0 ** y - 1.0 if gain == "exp2" else float(y)


def ref_disc(r, discount, n):
    if discount == "log2":
        return 1.0 / math.log2(1 + r)
    if discount == "letor":
        return 1.0 if r <= 2 else 1.0 / math.log2(r)
    return float(n - r)


def ref_dcg_of_order(labels_in_order, k, gain, discount):
    n = len(labels_in_order)
    top = labels_in_order[: n if k is None else min(k, n)]
    return sum(ref_gain(y, gain) * ref_disc(r, discount, n) for r, y in enumerate(top, start=1))


def ref_ndcg(scores, labels, k=None, gain="exp2", discount="log2", empty="one", ties="input", short="list"):
    order = ref_order(scores, labels, ties)
    actual = ref_dcg_of_order([labels[i] for i in order], k, gain, discount)
    # The ideal: the best DCG over every permutation (brute force, not a sort).
    ideal = max(ref_dcg_of_order(list(p), k, gain, discount) for p in itertools.permutations(labels))
    if ideal <= 0:
        return {"one": 1.0, "zero": 0.0, "skip": math.nan}[empty]
    if short == "zero" and k is not None and len(labels) < k:
        return 0.0
    return actual / ideal


lists = st.integers(1, 7).flatmap(lambda n: st.tuples(
    st.lists(st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0]), min_size=n, max_size=n),  # many ties
    st.lists(st.integers(0, 3), min_size=n, max_size=n)))


@settings(max_examples=40, deadline=None)
@given(lists, st.sampled_from([None, 1, 3, 5, 9]), st.sampled_from(["exp2", "linear"]),
       st.sampled_from(["log2", "letor", "linear"]), st.sampled_from(["input", "pessimistic", "optimistic"]),
       st.sampled_from(["list", "zero"]))
def test_ndcg_equals_brute_force(data, k, gain, discount, ties, short):
    scores, labels = data
    got = ndcg(scores, labels, k=k, gain=gain, discount=discount, ties=ties, short=short, empty="zero",
               dtype=F64)
    want = ref_ndcg(scores, [float(y) for y in labels], k, gain, discount, "zero", ties, short)
    assert got.item() == pytest.approx(want, abs=1e-12)
    # DCG alone, and its short-list rule (0 for a list shorter than k under short="zero").
    order = ref_order(scores, [float(y) for y in labels], ties)
    want_dcg = ref_dcg_of_order([float(labels[i]) for i in order], k, gain, discount)
    if short == "zero" and k is not None and len(labels) < k:
        want_dcg = 0.0
    got_dcg = dcg(scores, labels, k=k, gain=gain, discount=discount, ties=ties, short=short, dtype=F64)
    assert got_dcg.item() == pytest.approx(want_dcg, abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(lists, st.sampled_from([None, 2, 4, 8]), st.integers(0, 5), st.integers(0, 3))
def test_padding_anywhere_changes_nothing(data, k, pad_before, pad_after):
    scores, labels = data
    n = len(scores)
    # Padded slots carry garbage (huge score, NaN, a huge label) at the front and the back.
    s = [1e30] * pad_before + scores + [math.nan] * pad_after
    y = [99.0] * pad_before + [float(v) for v in labels] + [-5.0] * pad_after
    m = [False] * pad_before + [True] * n + [False] * pad_after
    # A second row shuffles the padding into the middle.
    mid = n // 2
    s2 = [*scores[:mid], 1e30, math.nan, *scores[mid:]]
    y2 = [float(v) for v in labels[:mid]] + [99.0, -1.0] + [float(v) for v in labels[mid:]]
    m2 = [True] * mid + [False, False] + [True] * (n - mid)
    width = max(len(s), len(s2))

    def pad(row, fill):
        return row + [fill] * (width - len(row))

    S = torch.tensor([pad(s, 0.0), pad(s2, 0.0)], dtype=F64)
    Y = torch.tensor([pad(y, 0.0), pad(y2, 0.0)], dtype=F64)
    M = torch.tensor([pad(m, False), pad(m2, False)])
    plain = torch.tensor([scores], dtype=F64), torch.tensor([labels], dtype=F64)
    # Every discount: the linear one depends on the list length |S|, which padding must not change.
    for fn, discount in itertools.product((ndcg, dcg), ("log2", "letor", "linear")):
        got = fn(S, Y, mask=M, k=k, discount=discount, reduction="none")
        want = fn(*plain, k=k, discount=discount, reduction="none")
        torch.testing.assert_close(got, want.expand(2), rtol=0, atol=1e-14)
    for fn, cut in itertools.product((precision, average_precision, reciprocal_rank), (k, None)):
        # k=None: P over the real items, not over the padded width
        torch.testing.assert_close(fn(S, Y, mask=M, reduction="none", k=cut),
                                   fn(*plain, reduction="none", k=cut).expand(2), rtol=0, atol=1e-14)


def test_large_finite_gains_do_not_overflow_the_ideal_dcg():
    # Label 127's float32 gain 2^127 - 1 is finite, three of them sum to inf: NDCG was NaN, and then
    # left out of the mean as if the query were empty (fuzz review of 2026-11-25).
    scores = torch.tensor([[0.3, 0.2, 0.1], [0.3, 0.2, 0.1]])
    labels = torch.tensor([[127.0, 127, 126], [0, 0, 1]])
    for k in (None, 2):
        got = ndcg(scores, labels, k=k, reduction="none")
        want = ndcg(scores.double(), labels.double(), k=k, reduction="none")
        torch.testing.assert_close(got.double(), want)
        assert torch.isfinite(got).all()
    assert ndcg_beta(scores, torch.tensor([[3e38, 3e38, 1.0], [0, 0, 1]]), reduction="none")[0] == 1.0


def test_worked_example():
    # labels in ranked order [3, 2, 3, 0, 1, 2] (a classic textbook example, gain = label).
    labels = [3.0, 2.0, 3.0, 0.0, 1.0, 2.0]
    scores = [6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    want_dcg = 3 + 2 / math.log2(3) + 3 / 2 + 0 + 1 / math.log2(6) + 2 / math.log2(7)
    want_idcg = 3 + 3 / math.log2(3) + 2 / 2 + 2 / math.log2(5) + 1 / math.log2(6)
    assert dcg(scores, labels, gain="linear", dtype=F64).item() == pytest.approx(want_dcg, rel=1e-14)
    assert ndcg(scores, labels, gain="linear", dtype=F64).item() == pytest.approx(want_dcg / want_idcg,
                                                                                   rel=1e-14)


def test_conventions_empty_ties_short():
    s = torch.tensor([[1.0, 1.0, 0.0]], dtype=F64)
    y = torch.tensor([[0.0, 2.0, 1.0]], dtype=F64)
    inp = ndcg(s, y, k=1, ties="input").item()
    pes = ndcg(s, y, k=1, ties="pessimistic").item()
    opt = ndcg(s, y, k=1, ties="optimistic").item()
    assert (inp, pes, opt) == (0.0, 0.0, 1.0)
    y0 = torch.zeros(1, 3, dtype=F64)
    assert ndcg(s, y0, empty="one").item() == 1.0
    assert ndcg(s, y0, empty="zero").item() == 0.0
    assert math.isnan(ndcg(s, y0, empty="skip", reduction="none").item())
    # "skip" leaves the empty query out of the mean.
    both_s = torch.cat([s, s]); both_y = torch.cat([y, y0])  # noqa: E702
    assert ndcg(both_s, both_y, empty="skip").item() == pytest.approx(ndcg(s, y).item())
    assert ndcg(s, y, k=5, short="zero").item() == 0.0
    assert ndcg(s, y, k=5, short="list").item() == ndcg(s, y).item()


def test_each_ndcg_convention_changes_the_number_by_hand():
    """PITFALLS 10: NDCG differs on ties, empty queries, gains, k beyond the list and the discount.

    One hand-computed value per choice, then the presets that bundle them (a number is only
    meaningful with its convention, which ``Convention.describe`` states in full)."""
    from smoothrank.metrics import evaluate_flat, get_convention

    l3 = 1 / math.log2(3)
    # Ties: two tied scores, the relevant document second in the input.
    s, y = [1.0, 1.0], [0.0, 1.0]
    assert ndcg(s, y, ties="input").item() == pytest.approx(l3, abs=1e-15)
    assert ndcg(s, y, ties="pessimistic").item() == pytest.approx(l3, abs=1e-15)
    assert ndcg(s, y, ties="optimistic").item() == 1.0
    # ... and trec_eval's order of tied scores, by docno descending: "d2" (relevant) comes first.
    offsets = np.array([0, 2])
    with pytest.warns(UserWarning, match="no doc_ids were given"):
        by_input = evaluate_flat(s, y, offsets=offsets, metrics="ndcg", convention="trec")["ndcg"]
    by_docno = evaluate_flat(s, y, offsets=offsets, metrics="ndcg", convention="trec", doc_ids=["d1", "d2"])
    assert by_input.item() == pytest.approx(l3, abs=1e-15) and by_docno["ndcg"].item() == 1.0
    # Only trec orders ties by docno: letor4 and lightgbm keep the input order even given doc ids
    # (the experiment runner always passes them).
    for name in ("letor4", "lightgbm"):
        kept = evaluate_flat([1.0, 1.0, 1.0], [0.0, 0.0, 1.0], offsets=np.array([0, 3]), metrics="ndcg,map",
                             convention=name, doc_ids=["d1", "d2", "d3"])
        assert kept["map"].item() == pytest.approx(1 / 3, abs=1e-15), name
        assert kept["ndcg"].item() < 1.0, name
    # No relevant document: 1, 0 or left out.
    assert ndcg([2.0, 1.0], [0.0, 0.0], empty="one").item() == 1.0
    assert ndcg([2.0, 1.0], [0.0, 0.0], empty="zero").item() == 0.0
    assert math.isnan(ndcg([2.0, 1.0], [0.0, 0.0], empty="skip", reduction="none").item())
    # Gains: 2^y - 1 or y (scores put label 1 above label 2).
    s, y = [2.0, 1.0], [1.0, 2.0]
    exp2 = (1 + 3 * l3) / (3 + 1 * l3)
    linear = (1 + 2 * l3) / (2 + 1 * l3)
    assert ndcg(s, y, gain="exp2", dtype=F64).item() == pytest.approx(exp2, abs=1e-15)
    assert ndcg(s, y, gain="linear", dtype=F64).item() == pytest.approx(linear, abs=1e-15)
    # k beyond the list: the value over the list, or 0 (the LETOR 4.0 script).
    assert ndcg(s, y, k=5, short="list", dtype=F64).item() == pytest.approx(exp2, abs=1e-15)
    assert ndcg(s, y, k=5, short="zero", dtype=F64).item() == 0.0
    # Discount: 1/log2(1 + r), or LETOR's 1 at ranks 1-2 then 1/log2(r).
    s, y = [2.0, 3.0, 1.0], [1.0, 0.0, 0.0]  # the relevant document at rank 2
    assert ndcg(s, y, discount="log2", dtype=F64).item() == pytest.approx(l3, abs=1e-15)
    assert ndcg(s, y, discount="letor", dtype=F64).item() == 1.0
    s = [1.0, 3.0, 2.0]  # at rank 3
    assert ndcg(s, y, discount="log2", dtype=F64).item() == pytest.approx(0.5, abs=1e-15)
    assert ndcg(s, y, discount="letor", dtype=F64).item() == pytest.approx(l3, abs=1e-15)
    # The presets on one batch: a short list with a misordered pair, and an empty query.
    scores, labels, offsets = [2.0, 1.0, 5.0, 4.0], [1.0, 2.0, 0.0, 0.0], np.array([0, 2, 4])
    per = {name: evaluate_flat(scores, labels, offsets=offsets, metrics="ndcg@5", convention=name)["ndcg@5"]
           for name in ("letor4", "lightgbm", "trec")}
    assert per["letor4"].tolist() == [0.0, 0.0]  # n < k counts 0; an empty query 0
    assert per["lightgbm"].tolist() == pytest.approx([exp2, 1.0], abs=1e-15)
    assert per["trec"].tolist() == pytest.approx([linear, 0.0], abs=1e-15)
    for name in ("letor4", "lightgbm", "trec"):
        text = get_convention(name).describe()
        for choice in ("gain", "discount", "ties", "no-relevant", "n<k"):
            assert choice in text, (name, choice)


def test_ndcg_ideal_is_cut_at_k_and_full_without_k_by_hand():
    """PITFALLS 12: trec_eval's ``ndcg`` divides by the ideal DCG over every judged document,
    ``ndcg_cut.k`` by the ideal DCG of the top k only; mixing them (DCG@k over the full ideal)
    gives a different number."""
    scores = [5.0, 4.0, 3.0, 2.0, 1.0]
    labels = [1.0, 0.0, 3.0, 2.0, 0.0]  # gain = label (trec_eval), ranked as listed
    l3, l5 = 1 / math.log2(3), 1 / math.log2(5)
    dcg2, ideal2 = 1.0, 3 + 2 * l3
    dcg_all, ideal_all = 1 + 3 / 2 + 2 * l5, 3 + 2 * l3 + 1 / 2
    got_cut = ndcg(scores, labels, k=2, gain="linear", empty="zero", dtype=F64).item()
    got_all = ndcg(scores, labels, gain="linear", empty="zero", dtype=F64).item()
    assert got_cut == pytest.approx(dcg2 / ideal2, abs=1e-15)
    assert got_all == pytest.approx(dcg_all / ideal_all, abs=1e-15)
    assert abs(got_cut - dcg2 / ideal_all) > 0.02  # the mixed-up variant is another number


def test_precision_ap_rr_by_hand():
    scores = [5.0, 4.0, 3.0, 2.0]
    labels = [0.0, 2.0, 0.0, 1.0]  # relevant at ranks 2 and 4
    assert precision(scores, labels, k=2).item() == 0.5
    assert precision(scores, labels, k=8).item() == 2 / 8  # past the end counts non-relevant
    assert precision(scores, labels, k=8, short="list").item() == 2 / 4
    assert average_precision(scores, labels, dtype=F64).item() == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert average_precision(scores, labels, k=3, dtype=F64).item() == pytest.approx((1 / 2) / 2)
    assert average_precision(scores, labels, k=1, denominator="min_k_relevant").item() == 0.0
    # MRR takes the first relevant item (label 1 counts), not the first top-grade item (PITFALLS 11).
    assert reciprocal_rank([5.0, 4.0, 3.0], [0.0, 1.0, 2.0]).item() == 0.5
    assert reciprocal_rank(scores, labels, k=1).item() == 0.0
    assert reciprocal_rank(scores, labels, k=2).item() == 0.5  # the first relevant item at exactly rank k
    assert reciprocal_rank([3.0, 2.0, 1.0], [0.0, 0.0, 1.0], k=3).item() == pytest.approx(1 / 3)
    assert reciprocal_rank(scores, labels, threshold=2).item() == 0.5
    # "no relevant item" is per query, not over the batch (PITFALLS 11).
    S = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    Y = torch.tensor([[0.0, 0.0], [0.0, 1.0]])
    assert reciprocal_rank(S, Y, empty="one", reduction="none").tolist() == [1.0, 0.5]
    assert average_precision(S, Y, empty="zero", reduction="none").tolist() == [0.0, 0.5]


def test_robustness_extremes():
    s = torch.tensor([[1e300, -1e300, math.inf, -math.inf, 0.0]], dtype=F64)
    y = torch.tensor([[1.0, 0.0, 2.0, 0.0, 1.0]], dtype=F64)
    v = ndcg(s, y, reduction="none")
    assert torch.isfinite(v).all() and v.item() == 1.0
    assert ndcg([3.0], [1.0]).item() == 1.0  # list of length 1
    assert ndcg([3.0], [0.0], empty="zero").item() == 0.0
    # float32 inputs stay float32; dtype=float64 on request.
    assert ndcg(torch.rand(2, 3), torch.ones(2, 3)).dtype == torch.float32
    assert ndcg(torch.rand(2, 3), torch.ones(2, 3), dtype=F64).dtype == F64
    # numpy and integer labels
    assert ndcg(np.array([0.1, 0.2]), np.array([1, 0])).dtype == F64


def test_batched_equals_per_row():
    g = torch.Generator().manual_seed(0)
    S = torch.randn(6, 9, generator=g, dtype=F64).round(decimals=1)
    Y = torch.randint(0, 4, (6, 9), generator=g).to(F64)
    M = torch.rand(6, 9, generator=g) > 0.3
    M[:, 0] = True
    rows = [ndcg(S[i][M[i]], Y[i][M[i]], k=4).item() for i in range(6)]
    assert ndcg(S, Y, mask=M, k=4, reduction="none").tolist() == pytest.approx(rows, abs=1e-15)
    assert ndcg(S, Y, mask=M, k=4, reduction="sum").item() == pytest.approx(sum(rows))


def test_evaluate_and_mean_metrics():
    S = torch.tensor([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])
    Y = torch.tensor([[2.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    per = evaluate(S, Y, metrics="ndcg@2, p@1, MAP, mrr", convention="lightgbm")
    assert set(per) == {"ndcg@2", "p@1", "map", "mrr"}
    assert per["ndcg@2"].shape == (2,) and per["ndcg@2"][1].item() == 1.0  # LightGBM: empty -> 1
    means = mean_metrics({"a": torch.tensor([1.0, math.nan, 0.0])})
    assert means == {"a": 0.5}
    per = evaluate(S, Y, metrics=["ndcg@2"], convention="trec")
    assert per["ndcg@2"][1].item() == 0.0  # trec_eval: empty -> 0


def test_pad_groups():
    vals, mask = pad_groups(np.array([1.0, 2.0, 3.0, 4.0]), [0, 1, 1, 4])
    assert mask.tolist() == [[True, False, False], [False, False, False], [True, True, True]]
    assert vals[2].tolist() == [2.0, 3.0, 4.0]
    # A (n_docs, M) feature matrix keeps its trailing axis; the mask stays (n_queries, max_list).
    feats, fmask = pad_groups(np.arange(8.0).reshape(4, 2), [0, 1, 1, 4], fill=-1.0)
    assert feats.shape == (3, 3, 2) and torch.equal(fmask, mask)
    assert feats[2].tolist() == [[2.0, 3.0], [4.0, 5.0], [6.0, 7.0]] and feats[1].eq(-1.0).all()



def test_integer_scores_past_float32_stay_distinct():
    # Timestamps as int64 scores: float32 (the old default for integer inputs) merged them into a
    # tie broken by input order (NDCG 0.63 instead of 1, RR 1/2 instead of 1).
    scores, labels = torch.tensor([1_700_000_000, 1_700_000_001]), torch.tensor([0, 1])
    assert ndcg(scores, labels).item() == 1.0
    assert ndcg(np.array([1_700_000_000, 1_700_000_001]), np.array([0, 1])).item() == 1.0
    assert reciprocal_rank(scores, labels).item() == 1.0
    assert pairwise_error(torch.tensor([2**24, 2**24 + 1]), torch.tensor([1, 0])).item() == 1.0
    # Float scores still set the dtype: float32 in, float32 out.
    assert ndcg(torch.rand(2, 3), torch.tensor([[0, 1, 2], [2, 1, 0]])).dtype == torch.float32


def test_flat_evaluation_keeps_integer_scores_past_2_to_the_53_distinct():
    # evaluate_flat cast scores to float64 first, merging nanosecond timestamps into ties (ndcg@1 0,
    # MRR 1/2) where evaluate reads them by their order: both now take dense ranks
    t0 = 1_732_000_000_000_000_000
    s, y = np.array([t0, t0 + 1, 7, 5, 5], np.int64), np.array([0, 1, 2, 1, 0])
    flat = evaluate_flat(s, y, offsets=[0, 2, 5], metrics=["ndcg@1", "mrr"], convention="lightgbm")
    assert flat["ndcg@1"].tolist() == [1.0, 1.0] and flat["mrr"].tolist() == [1.0, 1.0]
    padded = evaluate(torch.tensor([[t0, t0 + 1, 0], [7, 5, 5]]), torch.tensor([[0, 1, 0], [2, 1, 0]]),
                      mask=torch.tensor([[True, True, False], [True, True, True]]),
                      metrics=["ndcg@3", "map"], convention="lightgbm")
    again = evaluate_flat(s, y, offsets=[0, 2, 5], metrics=["ndcg@3", "map"], convention="lightgbm")
    assert {m: v.tolist() for m, v in again.items()} == {m: v.tolist() for m, v in padded.items()}


def test_flat_evaluation_takes_model_outputs_as_they_come():
    # A model's output (requires grad, bfloat16) passed straight to evaluate_flat / pad_groups.
    s, y, offsets = torch.tensor([0.5, 0.25, 0.125, 0.75, 0.375]), torch.tensor([0.0, 1, 2, 1, 0]), [0, 3, 5]
    want = evaluate_flat(s.numpy(), y.numpy(), offsets=offsets, metrics=["ndcg@2", "map"])
    for scores in (s.clone().requires_grad_(True), s.bfloat16(), s.double()):
        got = evaluate_flat(scores, y, offsets=offsets, metrics=["ndcg@2", "map"])
        assert {m: v.tolist() for m, v in got.items()} == {m: v.tolist() for m, v in want.items()}
    padded, mask = pad_groups(s.clone().requires_grad_(True), offsets)
    assert padded.tolist()[1][:2] == [0.75, 0.375] and mask.tolist() == [[True] * 3, [True, True, False]]
    with pytest.raises(SmoothrankError, match="scores"):
        evaluate_flat(["a", "b"], [0.0, 1.0], offsets=[0, 2])
    for complex_scores in (torch.tensor([1 + 5j, 2]), np.array([1 + 5j, 2])):
        with pytest.raises(SmoothrankError, match="scores: expected real numbers"):
            evaluate_flat(complex_scores, [0.0, 1.0], offsets=[0, 2])


@pytest.mark.parametrize(("call", "argument"), [
    (lambda: ndcg(torch.rand(2, 3), torch.rand(2, 4)), "labels"),
    (lambda: ndcg(torch.tensor([1.0, math.nan]), torch.tensor([1.0, 0.0])), "scores"),
    (lambda: ndcg(torch.tensor([1.0, 2.0]), torch.tensor([1.0, -1.0])), "labels"),
    (lambda: ndcg(torch.tensor([1.0, 2.0]), torch.tensor([1.0, math.nan])), "labels"),
    (lambda: ndcg([1.0, 2.0], [1.0, 0.0], k=0), "k"),
    (lambda: ndcg([1.0, 2.0], [1.0, 0.0], k=-3), "k"),
    (lambda: ndcg([1.0, 2.0], [1.0, 0.0], k=2.5), "k"),
    (lambda: ndcg([1.0, 2.0], [1.0, 0.0], gain="exp"), "gain"),
    (lambda: ndcg([1.0, 2.0], [1.0, 0.0], discount="log"), "discount"),
    (lambda: ndcg([1.0, 2.0], [1.0, 0.0], empty="nan"), "empty"),
    (lambda: ndcg([1.0, 2.0], [1.0, 0.0], ties="random"), "ties"),
    (lambda: ndcg([1.0, 2.0], [1.0, 0.0], reduction="avg"), "reduction"),
    (lambda: ndcg([1.0, 2.0], [1.0, 0.0], mask=[1, 0]), "mask"),
    (lambda: ndcg(torch.rand(2, 2, 2), torch.rand(2, 2, 2)), "scores"),
    (lambda: ndcg(torch.randn(3), torch.tensor([1j, 0, 0])), "labels"),
    (lambda: ndcg(np.array([1j, 0]), [1.0, 0.0]), "scores"),
    (lambda: ndcg([1.0, 2.0], [1.0, 3.0], gain={0: 0.0, 1: 1.0}), "gain"),
    (lambda: precision([1.0], [1.0], k=2, threshold=0), "threshold"),
    (lambda: evaluate([1.0], [1.0], metrics="ndgc@3"), "metrics"),
    (lambda: evaluate([1.0], [1.0], metrics="p"), "metrics"),
    (lambda: evaluate([1.0], [1.0], convention="letor3"), "convention"),
])
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(SmoothrankError, match=rf"^{argument}\b"):
        call()


def test_mapping_gain_ignores_padding_labels():
    # The padded slot's label (7) has no entry in the mapping; it must not be looked up.
    v = ndcg(torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[1.0, 0.0, 7.0]]),
             mask=torch.tensor([[True, True, False]]), gain={0: 0.0, 1: 10.0})
    assert v.item() == pytest.approx(1 / math.log2(3))
