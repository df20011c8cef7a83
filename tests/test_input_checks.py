"""Numerical limits and argument checks of the functional core, one regression test per defect
found by probing the API: near-tied scores at tiny temperatures, infinities, negative gains,
empty lists and batches, half precision, and arguments of the wrong kind."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from smoothrank import losses, metrics, softrank, sorting
from smoothrank.errors import SmoothrankError

F64 = torch.float64
ALL_LOSSES = losses.available()
GAIN_LOSSES = [name for name in ALL_LOSSES if losses.info(name).relevance == "gain"]


# ----------------------------------------------------------------- NeuralSort at tiny temperatures
@pytest.mark.parametrize("name", ["neural_ndcg", "neural_ndcg_transposed"])
@pytest.mark.parametrize("sinkhorn", [True, False])
def test_near_tied_float32_scores_at_a_tiny_temperature_give_the_exact_ndcg(name, sinkhorn):
    # 500 and 500.0001 differ by 6e-5 in float32, less than the rounding of float32 NeuralSort
    # logits (m * range * 6e-8 ~ 6e-4): there one item took two ranks, another none, the loss was
    # -0.23 instead of -0.67 and the gradient NaN. The logits are now formed in float64.
    s = torch.tensor([[-1000.0, 0.0, 1000.0, 500.0, 500.0001]], requires_grad=True)
    y = torch.tensor([[1.0, 0, 0, 1, 2]])
    loss = losses.get(name, temperature=1e-6, sinkhorn=sinkhorn)(s, y)
    loss.backward()
    exact = metrics.ndcg(s.detach().double(), y.double()).item()
    assert loss.item() == pytest.approx(-exact, abs=1e-6)
    assert torch.isfinite(s.grad).all()
    p_hat = sorting.neural_sort(s.detach(), temperature=1e-6)
    torch.testing.assert_close(p_hat.sum(-2), torch.ones(1, 5))  # every item keeps one rank


def test_neural_ndcg_matches_exact_ndcg_on_wide_float32_scores_at_tiny_temperatures():
    # Random N(0, 1e4) scores, 8 x 200 with 80% real: with float32 logits this batch (seed 0, like
    # 6 of the first 40 seeds) had NaN gradients and a loss 5e-3 away from -NDCG.
    gen = torch.Generator().manual_seed(0)
    s = (torch.randn(8, 200, generator=gen) * 1e4).requires_grad_()
    y = torch.randint(0, 3, (8, 200), generator=gen).float()
    mask = torch.rand(8, 200, generator=gen) < 0.8
    exact = metrics.ndcg(s.detach().double(), y.double(), mask=mask).item()
    for tau in (1e-8, 1e-6, 1e-5):
        s.grad = None
        loss = losses.neural_ndcg(s, y, mask=mask, temperature=tau)
        loss.backward()
        assert loss.item() == pytest.approx(-exact, abs=1e-6), tau
        assert torch.isfinite(s.grad).all(), tau


def test_neural_ndcg_with_huge_scores_and_a_tiny_temperature_is_finite():
    s = torch.tensor([[1e30, -1e30, 0.0, 3e29, -1e30]], requires_grad=True)
    y = torch.tensor([[2.0, 0, 1, 0, 0]])
    loss = losses.neural_ndcg(s, y, temperature=1e-8)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(s.grad).all()


# ------------------------------------------------------------------------------ half precision
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ALL_LOSSES)
def test_half_precision_scores_are_computed_and_returned_in_float32(name, dtype):
    s = torch.tensor([[1.25, -1.05, -1.38, 1.5, -0.09, 2.84]], dtype=dtype, requires_grad=True)
    y = torch.tensor([[2.0, 2, 0, 0, 1, 2]])
    options = {"generator": 0} if name == "list_mle" else {}  # the same random tie-break
    loss = losses.get(name, **options)(s, y)
    want = losses.get(name, **options)(s.detach().float(), y)
    assert loss.dtype == torch.float32
    assert loss.item() == want.item()  # the same computation, on the same (exactly widened) scores
    loss.backward()
    assert s.grad.dtype == dtype and torch.isfinite(s.grad).all()


def test_half_precision_pairwise_losses_do_not_overflow():
    s = torch.tensor([[60000.0, 0.0, -60000.0]], dtype=torch.float16, requires_grad=True)
    y = torch.tensor([[0.0, 1, 2]])
    for name in ("rank_net", "lambda_rank", "list_net", "list_mle", "neural_ndcg"):
        loss = losses.get(name)(s, y)
        (g,) = torch.autograd.grad(loss, s)
        assert torch.isfinite(loss), name
        assert torch.isfinite(g).all(), name


# ---------------------------------------------------------------------- scores, labels and gains
@pytest.mark.parametrize("name", ALL_LOSSES)
@pytest.mark.parametrize("value", [math.inf, -math.inf])
def test_infinite_scores_at_real_positions_are_an_error(name, value):
    s = torch.tensor([[value, 0.0, 1.0]])
    with pytest.raises(SmoothrankError, match="scores: infinite value at a real"):
        losses.get(name)(s, torch.tensor([[1.0, 0, 2]]))
    # ...and are ignored at padded positions.
    loss = losses.get(name)(s, torch.tensor([[1.0, 0, 2]]), mask=torch.tensor([[False, True, True]]))
    assert torch.isfinite(loss)


@pytest.mark.parametrize("name", GAIN_LOSSES)
def test_ndcg_losses_refuse_negative_gains_and_take_a_gain_mapping(name):
    s = torch.tensor([[0.3, 0.2, 0.1]])
    y = torch.tensor([[2.0, -1.0, 1.0]])
    with pytest.raises(SmoothrankError, match="label -1 has a negative gain"):
        losses.get(name)(s, y)
    mapped = losses.get(name, gain={-1: 0.0, 0: 0.0, 1: 1.0, 2: 3.0})(s, y)
    clipped = losses.get(name)(s, y.clamp_min(0))  # the same gains: 3, 0, 1
    assert mapped.item() == pytest.approx(clipped.item(), rel=1e-6)


@pytest.mark.parametrize("name", ["rank_net", "list_net", "list_mle", "rmse"])
def test_losses_without_gains_take_negative_labels(name):
    loss = losses.get(name)(torch.tensor([[0.3, 0.2, 0.1]]), torch.tensor([[2.0, -1.0, 1.0]]))
    assert torch.isfinite(loss)


@pytest.mark.parametrize("name", GAIN_LOSSES)
def test_ndcg_losses_refuse_gains_and_discounts_that_are_not_finite_or_not_elementwise(name):
    s, y = torch.tensor([[0.1, 0.2, 0.3]]), torch.tensor([[200.0, 0, 1]])
    with pytest.raises(SmoothrankError, match="gain: the gain of some label is not finite"):
        losses.get(name)(s, y)  # 2^200 - 1 overflows float32
    y = torch.tensor([[2.0, 0, 1]])
    with pytest.raises(SmoothrankError, match="gain: the gain of some label is not finite"):
        losses.get(name, gain=lambda v: v / 0)(s, y)
    with pytest.raises(SmoothrankError, match="gain: a callable gain must be elementwise"):
        losses.get(name, gain=lambda v: v.sum())(s, y)
    if name != "approx_ndcg":  # ApproxNDCG evaluates its discount at smoothed ranks, not rank numbers
        with pytest.raises(SmoothrankError, match="discount: a callable discount must be elementwise"):
            losses.get(name, discount=lambda r: r[..., :1])(s, y)
        with pytest.raises(SmoothrankError, match="discount: the discount of some rank is not finite"):
            losses.get(name, discount=lambda r: 1.0 / torch.log2(r))(s, y)  # inf at rank 1


def test_lambda_rank_mean_counts_only_queries_with_a_pair():
    s = torch.tensor([[0.1, 0.5, -0.3], [0.2, 0.1, 0.0]])
    y = torch.tensor([[2.0, 0, 1], [1.0, 1, 1]])  # the second query: relevant, but no pair
    for name in ("lambda_rank", "rank_net"):
        per_query = losses.get(name)(s, y, reduction="none")
        assert per_query[1].item() == 0.0
        assert losses.get(name)(s, y).item() == pytest.approx(per_query[0].item(), rel=1e-6), name


@pytest.mark.parametrize("name", ALL_LOSSES)
def test_an_empty_list_is_an_error_naming_it(name):
    with pytest.raises(SmoothrankError, match=r"scores: empty list \(list_size 0\)"):
        losses.get(name)(torch.zeros(2, 0), torch.zeros(2, 0))


@pytest.mark.parametrize("backend", ["torch", "fft"])
def test_an_empty_batch_backpropagates_with_every_softrank_backend(backend):
    s = torch.zeros(0, 6, requires_grad=True)
    loss = losses.get("soft_ndcg", backend=backend)(s, torch.zeros(0, 6))
    loss.backward()
    assert loss.item() == 0.0 and s.grad.shape == (0, 6)
    assert softrank.soft_rank(torch.zeros(0, 6), backend=backend).shape == (0, 6, 6)


# ----------------------------------------------------------------------------- argument checks
@pytest.mark.parametrize("k", [math.nan, math.inf, "3", True, 2.5, 0])
@pytest.mark.parametrize("name", ["neural_ndcg", "soft_ndcg", "rank_net", "lambda_rank"])
def test_bad_cutoffs_name_k(name, k):
    with pytest.raises(SmoothrankError, match=r"^k: expected a positive integer or None, got "):
        losses.get(name, k=k)(torch.zeros(1, 3), torch.ones(1, 3))


@pytest.mark.parametrize(("option", "value", "message"), [
    ("max_iter", None, "max_iter: must be a positive integer"),
    ("max_iter", 2.5, "max_iter: must be a positive integer"),
    ("tol", "x", "tol: must be a number >= 0"),
    ("tol", math.nan, "tol: must be a finite number >= 0"),
    ("n_samples", None, "n_samples: must be a positive integer"),
    ("sinkhorn", "yes", "sinkhorn: expected True or False"),
])
def test_bad_neural_ndcg_options_name_the_option(option, value, message):
    with pytest.raises(SmoothrankError, match=message):
        losses.neural_ndcg(torch.zeros(1, 3), torch.ones(1, 3), **{option: value})


def test_soft_ndcg_sinkhorn_must_be_a_bool():
    with pytest.raises(SmoothrankError, match="sinkhorn: expected True or False"):
        losses.get("soft_ndcg", sinkhorn="yes")(torch.zeros(1, 3), torch.ones(1, 3))


@pytest.mark.parametrize("name", ["neural_ndcg", "list_mle"])
def test_generators_are_checked_and_int_seeds_accepted(name):
    options = {"stochastic": True} if name == "neural_ndcg" else {}
    fn = getattr(losses, name)
    s, y = torch.tensor([[0.3, 0.2, 0.1]]), torch.tensor([[1.0, 1, 0]])
    with pytest.raises(SmoothrankError, match=r"generator: expected a torch\.Generator, an int seed or None"):
        fn(s, y, generator="x", **options)
    assert fn(s, y, generator=5, **options).item() == fn(s, y, generator=5, **options).item()


def test_labels_that_are_not_numbers_are_named():
    with pytest.raises(SmoothrankError, match="labels: expected numbers"):
        losses.rank_net(torch.zeros(1, 3), "abc")


def test_soft_ndcg_is_importable_from_the_package():
    assert losses.soft_ndcg is losses.softrank.soft_ndcg
    assert losses.get("soft_ndcg").__wrapped__ is losses.soft_ndcg


def test_softrank_masks_must_be_boolean():
    with pytest.raises(SmoothrankError, match=r"mask: expected a boolean torch\.Tensor"):
        softrank.soft_rank(torch.zeros(1, 3), mask=torch.tensor([[1, 1, 0]]))
    with pytest.raises(SmoothrankError, match=r"mask: expected a boolean torch\.Tensor"):
        softrank.soft_rank(torch.zeros(1, 3), mask=torch.tensor([[1.0, 0.5, 0.0]]))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_sorting_refuses_non_finite_input(bad):
    with pytest.raises(SmoothrankError, match="scores: NaN or infinite value at a real"):
        sorting.neural_sort(torch.tensor([[0.0, bad, 1.0]]))
    with pytest.raises(SmoothrankError, match="matrix: NaN or infinite entry in the real block"):
        sorting.sinkhorn(torch.tensor([[[1.0, bad], [0.5, 1.0]]]))
    # Padding may hold anything.
    mask = torch.tensor([[True, False, True]])
    assert torch.isfinite(sorting.neural_sort(torch.tensor([[0.0, bad, 1.0]]), mask=mask)).all()
    padded = torch.tensor([[[1.0, bad], [bad, bad]]])
    out = sorting.sinkhorn(padded, mask=torch.tensor([[True, False]]))
    assert torch.isfinite(out).all() and out[0, 0, 0].item() == pytest.approx(1.0)


# ------------------------------------------------------------------------------------- metrics
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_metrics_count_ranks_exactly_for_half_precision_scores(dtype):
    # bfloat16 cannot count past 256 nor float16 past 2048: ranks are counted in float32.
    n, at = 5000, 2049  # the only relevant document sits at rank 2050 (ties keep input order)
    y = torch.zeros(n)
    y[at] = 1
    s = torch.zeros(n, dtype=dtype)
    assert metrics.precision(s, y, k=at).item() == 0.0
    assert metrics.ndcg(s, y, k=at).item() == 0.0
    assert metrics.reciprocal_rank(s, y, k=at).item() == 0.0
    assert metrics.reciprocal_rank(s, y).item() == pytest.approx(1 / (at + 1), rel=1e-6)


def test_evaluate_flat_checks_the_number_of_document_ids():
    with pytest.raises(SmoothrankError, match="doc_ids: 2 document ids for 3 scores"):
        metrics.evaluate_flat(np.zeros(3), np.ones(3), offsets=[0, 3], convention="trec", doc_ids=["a", "b"])


@pytest.mark.parametrize("offsets", [[0, 2], [0, 1.5, 3], [0, float("nan"), 3], [[0, 3]], "ab"])
@pytest.mark.parametrize("convention", ["letor4", "trec"])
def test_evaluate_flat_and_pad_groups_name_bad_offsets(offsets, convention):
    # Under trec, the document-id order read the offsets first: NumPy's "all keys need to be the
    # same shape" (review of 2026-11-24); fractional offsets were truncated.
    with pytest.raises(SmoothrankError, match="offsets: expected non-decreasing whole numbers from 0 to 3"):
        metrics.evaluate_flat([0.1, 0.2, 0.3], [1, 0, 1], offsets=offsets, convention=convention,
                              doc_ids=["a", "b", "c"])
    with pytest.raises(SmoothrankError, match="offsets: "):
        metrics.pad_groups(torch.zeros(3), offsets)


def test_a_cutoff_beyond_every_list_is_the_whole_list_however_large():
    s, y = torch.tensor([[0.3, 0.2, 0.1]]), torch.tensor([[0.0, 1, 2]])
    huge = 10**20  # more than int64 holds: it used to overflow inside torch
    assert metrics.ndcg(s, y, k=huge).item() == metrics.ndcg(s, y).item()
    assert metrics.evaluate(s, y, metrics=[f"map@{huge}"], convention="trec")[f"map@{huge}"].item() == \
        pytest.approx(metrics.evaluate(s, y, metrics=["map"], convention="trec")["map"].item())
    for name in ("neural_ndcg", "soft_ndcg", "rank_net", "lambda_rank"):
        assert losses.get(name, k=huge)(s, y).item() == losses.get(name)(s, y).item(), name


# ----------------------------------------------------------------- an API consistency review
def test_a_bound_loss_shows_its_own_signature_not_the_loss_options():
    # functools.wraps showed every option with its unbound default (k=None) on a loss bound with k=10,
    # and passing one raised TypeError.
    import inspect

    bound = losses.get("neural_ndcg", k=10)
    params = inspect.signature(bound).parameters
    assert list(params) == ["scores", "labels", "mask", "reduction"]
    assert params["mask"].kind is inspect.Parameter.KEYWORD_ONLY and params["reduction"].default == "mean"
    assert bound.__name__ == "neural_ndcg" and bound.options == {"k": 10}
    import typing

    assert set(typing.get_type_hints(bound)) == {"scores", "labels", "mask", "reduction", "return"}


@pytest.mark.parametrize("name", losses.available())
def test_a_bound_loss_pickles_by_name_and_options_and_computes_the_same(name):
    # It was a closure named after the loss function, which pickle refused ("not the same object"),
    # so a bound loss could not reach torch.multiprocessing.spawn workers or joblib.
    import pickle

    known = losses.options(name)
    opts = {"discount": {"shallow": 0.5, "n": 6}} if "discount" in known else {}
    opts |= {"generator": 0} if "generator" in known else {}  # ListMLE's ties are broken at random
    bound = losses.get(name, **opts)
    again = pickle.loads(pickle.dumps(bound))
    assert type(again) is losses.BoundLoss and again.loss_name == name
    s, y = torch.randn(3, 6, dtype=F64), torch.tensor([[0.0, 1, 2, 0, 1, 3]] * 3)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1, 4:] = False
    assert torch.equal(again(s, y, mask=mask), bound(s, y, mask=mask))
    assert repr(again) == repr(bound) and repr(bound).startswith(f"losses.get({name!r}")


def test_a_pickled_bound_generator_draws_on_from_its_state_and_the_shallow_discount_pickles():
    import pickle

    bound = losses.get("neural_ndcg", stochastic=True, n_samples=2, generator=5)
    s, y = torch.randn(2, 5, dtype=F64), torch.tensor([[0.0, 1, 2, 0, 1]] * 2)
    first = bound(s, y)
    again = pickle.loads(pickle.dumps(bound))
    # The copy draws what the original draws next, not the seed's first draw again.
    assert torch.equal(again(s, y), bound(s, y)) and not torch.equal(again(s, y), first)
    d = softrank.shallow_discount(-0.5, 8)
    ranks = torch.arange(1.0, 11.0, dtype=F64)
    assert torch.equal(pickle.loads(pickle.dumps(d))(ranks), d(ranks))
    assert d == softrank.shallow_discount(-0.5, 8) != softrank.shallow_discount(-0.5, 9)
    assert repr(d) == d.__name__ == "shallow_discount(alpha=-0.5, n=8)"


def test_int_seeds_work_wherever_a_generator_is_taken():
    # sorting.gumbel_perturb(generator=0) raised AttributeError while the losses took int seeds.
    s = torch.randn(2, 5, dtype=F64)
    seeded = sorting.gumbel_perturb(s, n_samples=3, beta=1.0, generator=7)
    torch.testing.assert_close(seeded, sorting.gumbel_perturb(s, n_samples=3, beta=1.0,
                                                              generator=torch.Generator().manual_seed(7)))
    p = sorting.stochastic_neural_sort(s, n_samples=2, generator=7)
    torch.testing.assert_close(p, sorting.stochastic_neural_sort(s, n_samples=2,
                                                                 generator=torch.Generator().manual_seed(7)))
    numpy_seed = sorting.gumbel_perturb(s, n_samples=3, beta=1.0, generator=np.int64(7))
    torch.testing.assert_close(numpy_seed, seeded)
    with pytest.raises(SmoothrankError, match="generator"):
        sorting.gumbel_perturb(s, n_samples=1, beta=1.0, generator="seed")
    with pytest.raises(SmoothrankError, match="n_samples"):
        sorting.gumbel_perturb(s, n_samples=0, beta=1.0)


@pytest.mark.parametrize("fn", [softrank.pairwise_probabilities, softrank.expected_ranks, softrank.soft_rank])
def test_softrank_functions_refuse_bad_scores_by_name(fn):
    # 1-D input raised IndexError, a list TypeError from torch.finfo, and NaN passed through silently.
    for bad, message in ((torch.zeros(3), "expected shape"), ([[1.0, 2.0]], "expected a torch.Tensor"),
                         (torch.tensor([[1.0, math.nan]]), "NaN or infinite"),
                         (torch.tensor([[1.0, math.inf]]), "NaN or infinite")):
        with pytest.raises(SmoothrankError, match=rf"^scores: {message}"):
            fn(bad)
    padded = torch.tensor([[1.0, math.nan]])  # NaN padding is fine
    assert torch.isfinite(fn(padded, mask=torch.tensor([[True, False]]))).all()


def test_sinkhorn_rank_matrix_takes_mask_as_an_optional_keyword_like_its_siblings():
    p = softrank.soft_rank(torch.randn(3, 5, dtype=F64), sigma=0.5)
    torch.testing.assert_close(softrank.sinkhorn_rank_matrix(p),
                               softrank.sinkhorn_rank_matrix(p, mask=torch.ones(3, 5, dtype=torch.bool)))
    with pytest.raises(SmoothrankError, match=r"^p: expected a floating tensor"):
        softrank.sinkhorn_rank_matrix(torch.ones(3, 5))


@pytest.mark.parametrize("fn", [metrics.ndcg, metrics.dcg, metrics.average_precision])
def test_a_metric_dtype_that_is_not_a_torch_dtype_is_named(fn):
    with pytest.raises(SmoothrankError, match=r"^dtype: expected a floating torch.dtype, got 'float64'"):
        fn([[1.0, 2.0]], [[0, 1]], dtype="float64")


def test_ndcg_reads_negative_labels_that_a_gain_mapping_covers():
    # The losses took gain={-1: 0, ...} for LETOR's -1 labels, the metrics refused the labels outright.
    s = torch.tensor([[0.3, 0.2, 0.1, 0.4]], dtype=F64)
    mapping = {-1: 0, 0: 0, 1: 1, 2: 3}
    with_junk = torch.tensor([[2.0, -1, 1, -1]], dtype=F64)
    as_zero = torch.tensor([[2.0, 0, 1, 0]], dtype=F64)
    for fn in (metrics.ndcg, metrics.dcg):
        torch.testing.assert_close(fn(s, with_junk, gain=mapping, k=3), fn(s, as_zero, gain=mapping, k=3))
    value = float(losses.neural_ndcg(s, with_junk, gain=mapping, temperature=1e-4))
    assert value == pytest.approx(-float(metrics.ndcg(s, with_junk, gain=mapping)), abs=1e-6)
    with pytest.raises(SmoothrankError, match="mark padding with mask=False"):  # a name: still refused
        metrics.ndcg(s, with_junk)
    with pytest.raises(SmoothrankError, match=r"^gain: label -1 has a negative gain"):
        metrics.ndcg(s, with_junk, gain=lambda y: y)
    with pytest.raises(SmoothrankError, match="mark padding with mask=False"):
        metrics.dcg(s, with_junk, gain="linear")
    # a mapping that gives labels >= 0 negative gains is read as before (DCG of those gains)
    value = metrics.dcg(s, torch.tensor([[0.0, 2, 0, 1]], dtype=F64), gain={0: -1, 1: 0, 2: 1})
    assert float(value) < 0


def test_metrics_take_an_integral_float_cutoff_as_the_losses_do():
    s, y = torch.tensor([[0.3, 0.2, 0.1, 0.4]], dtype=F64), torch.tensor([[2.0, 0, 1, 1]], dtype=F64)
    for fn in (metrics.ndcg, metrics.dcg, metrics.precision, metrics.average_precision):
        torch.testing.assert_close(fn(s, y, k=3.0), fn(s, y, k=3))
        with pytest.raises(SmoothrankError, match=r"^k: expected a positive integer or None, got 2\.5"):
            fn(s, y, k=2.5)
    assert float(losses.lambda_rank(s, y, k=3.0)) == float(losses.lambda_rank(s, y, k=3))


# ----------------------------------------------------------------- a fuzz review (2026-11-25)
def _contests(mask: torch.Tensor) -> torch.Tensor:
    return softrank.pairwise_probabilities(torch.randn(mask.shape, dtype=F64), mask=mask)


@pytest.mark.parametrize("fill", [float("nan"), 0.7])
def test_the_contest_level_softrank_functions_ignore_the_diagonal_and_padding(fill):
    # The normal and hybrid distributions read them (the hybrid's real rows turned NaN), while
    # rank_distributions ignored them as documented.
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0, 5] = False
    pi = _contests(mask)
    dirty = pi.clone()
    dirty[0, 5, :] = dirty[0, :, 5] = fill
    dirty[:, range(6), range(6)] = fill
    for fn in (softrank.rank_distributions, softrank.normal_rank_distributions,
               lambda p, mask: softrank.hybrid_rank_distributions(p, mask=mask, n_exact=1)):
        assert torch.equal(fn(dirty, mask=mask), fn(pi, mask=mask))


@pytest.mark.parametrize(("call", "argument"), [
    (lambda pi: softrank.rank_distributions(pi * 3), "pi: contest probabilities must lie in"),
    (lambda pi: softrank.normal_rank_distributions(-pi), "pi: contest probabilities must lie in"),
    (lambda pi: softrank.hybrid_rank_distributions(pi.masked_fill(pi > 0.5, float("nan"))), "pi: NaN"),
    (lambda pi: softrank.normal_rank_distributions(pi[0]), "pi: expected shape"),
    (lambda pi: softrank.normal_rank_distributions(pi[:, :, :3]), "pi: expected shape"),
    (lambda pi: softrank.rank_distributions(pi > 0.5), "pi: expected a floating dtype"),
    (lambda pi: softrank.hybrid_rank_distributions(pi.long()), "pi: expected a floating dtype"),
    (lambda pi: softrank.normal_rank_distributions(pi, max_rank=0), "max_rank"),
    (lambda pi: softrank.normal_rank_distributions(pi, max_rank=2.5), "max_rank"),
    (lambda pi: softrank.rank_distributions(pi, max_rank=float("nan")), "max_rank"),
    (lambda pi: softrank.rank_distributions(pi, select=torch.ones(3, 3, dtype=torch.bool)), "select"),
    (lambda pi: softrank.hybrid_rank_distributions(pi, n_exact=-1), "n_exact"),
])
def test_the_contest_level_softrank_functions_name_bad_input(call, argument):
    # NaN passed through, values outside [0, 1] gave negative "probabilities", and the others
    # were IndexError, TypeError or RuntimeError from inside, or were silently misread.
    with pytest.raises(SmoothrankError, match=re.escape(argument)):
        call(_contests(torch.ones(2, 4, dtype=torch.bool)))


def test_gradcheck_of_saturated_contests_is_not_refused():
    # At a small sigma the contests are exactly 0 or 1, and gradcheck's perturbations step past them.
    pi = softrank.pairwise_probabilities(torch.tensor([[0.0, 10, 20, 30]], dtype=F64), sigma=0.1)
    for fn in (softrank.rank_distributions, softrank.normal_rank_distributions):
        assert torch.autograd.gradcheck(fn, (pi.clone().requires_grad_(),))


def test_lists_of_no_item_give_empty_results_everywhere():
    # rank_distributions raised IndexError, sinkhorn IndexError, stochastic_neural_sort RuntimeError.
    empty = torch.zeros(2, 0, 0, dtype=F64)
    for fn in (softrank.rank_distributions, softrank.normal_rank_distributions,
               softrank.hybrid_rank_distributions):
        assert fn(empty).shape == (2, 0, 0)
    assert sorting.sinkhorn(empty).shape == (2, 0, 0)
    assert sorting.stochastic_neural_sort(torch.zeros(2, 0), n_samples=3).shape == (3, 2, 0, 0)


def test_sinkhorn_names_negative_entries_and_overflowing_sums():
    # A negative entry gave -inf, entries of 3e38 all zeros and NaN gradients, with no error.
    with pytest.raises(SmoothrankError, match="negative entry"):
        sorting.sinkhorn(torch.tensor([[[-1.0, 1, 1], [1, 1, 1], [1, 1, 1]]]))
    with pytest.raises(SmoothrankError, match="overflows"):
        sorting.sinkhorn(torch.full((1, 3, 3), 3e38))
    with pytest.raises(SmoothrankError, match="pair"):
        sorting.sinkhorn(torch.rand(1, 3, 3), mask=(torch.ones(1, 3, dtype=torch.bool),) * 3)
    # The tolerance is per query: a large query beside it does not let a clearly negative one through.
    bad = torch.tensor([[[-0.5, 1, 1], [1, 1, 1], [1, 1, 1]]])
    with pytest.raises(SmoothrankError, match="negative entry"):
        sorting.sinkhorn(torch.cat([bad, torch.full((1, 3, 3), 1000.0)]))
    # Rounding below zero (FFT-computed probabilities) is not refused.
    p = softrank.rank_distributions(softrank.pairwise_probabilities(torch.randn(4, 40) * 3), backend="fft")
    assert p.min() < 0
    assert torch.isfinite(sorting.sinkhorn(p)).all()


def test_gumbel_perturb_checks_its_arguments_as_stochastic_neural_sort_does():
    for beta in (float("nan"), float("inf"), 0.0, -1.0):
        with pytest.raises(SmoothrankError, match="beta"):
            sorting.gumbel_perturb(torch.zeros(2, 3), n_samples=2, beta=beta)
    for scores in ([1.0, 2.0], torch.arange(3)):
        with pytest.raises(SmoothrankError, match="scores"):
            sorting.gumbel_perturb(scores, n_samples=2, beta=1.0)
    # Non-finite scores went through as NaN noise; at a padded position they are ignored.
    nan_first = torch.tensor([[float("nan"), 1.0]])
    with pytest.raises(SmoothrankError, match="scores: NaN"):
        sorting.gumbel_perturb(nan_first, n_samples=1, beta=1.0, generator=0)
    padded_nan = torch.tensor([[False, True]])
    kept = sorting.gumbel_perturb(nan_first, n_samples=1, beta=1.0, generator=0, mask=padded_nan)
    assert torch.isfinite(kept[..., 1]).all()


def test_stochastic_neural_ndcg_names_beta_when_beta_times_the_scores_overflows():
    # Every score is finite, so the error named scores wrongly before.
    s, y = torch.tensor([[1e38, -1e38, 0.5]]), torch.tensor([[1.0, 0, 2]])
    assert math.isfinite(losses.neural_ndcg(s, y, stochastic=True, beta=1.0, generator=0).item())
    with pytest.raises(SmoothrankError, match=r"beta: beta \* scores overflows torch.float32"):
        losses.neural_ndcg(s, y, stochastic=True, beta=4.0, generator=0)


@pytest.mark.parametrize("loss", ["rank_net", "lambda_rank", "list_net"])
def test_pair_and_list_losses_are_finite_where_the_float32_value_is(loss):
    fn = losses.get(loss)
    # rank_net: 66 pair costs of up to 2e37 summed overflowed float32 before their mean (1.3e37).
    # Gaps of 6e38 (scores of +-3e38) are inf in float32 where the query's loss is not.
    for scores, labels in (([-1e37, 0.0, 1e37] * 4, [2.0, 1, 0] * 4), ([3e38, -3e38, 0.0], [0.0, 2, 1]),
                           ([3e38, -3e38], [1.0, 0])):
        s, y = torch.tensor([scores], requires_grad=True), torch.tensor([labels])
        reference = fn(s.detach().double(), y.double()).item()
        if reference >= torch.finfo(torch.float32).max:  # beyond float32's range: a clear refusal
            with pytest.raises(SmoothrankError, match=r"scores: .* beyond the range of torch.float32"):
                fn(s, y)
            continue
        value = fn(s, y)
        (g,) = torch.autograd.grad(value, s)
        assert torch.isfinite(g).all()
        assert value.item() == pytest.approx(reference, rel=1e-6), (scores, labels)


def test_backend_is_checked_by_every_soft_rank_method():
    s, y = torch.randn(2, 5), torch.tensor([[0.0, 1, 2, 0, 1]] * 2)
    for call in (lambda: losses.soft_ndcg(s, y, method="normal", backend="bogus"),
                 lambda: losses.soft_ndcg(s, y, method="normal", sinkhorn=True, backend="bogus"),
                 lambda: losses.get("soft_ndcg", method="normal", backend="bogus")(s, y),
                 lambda: softrank.soft_rank(s, method="normal", backend="bogus")):
        with pytest.raises(SmoothrankError, match="backend: expected one of"):
            call()


def test_rmse_refuses_n_levels_beyond_the_dtype():
    # levels * sigmoid(s) was inf: an inf loss and an all-NaN gradient, with no error.
    x, y = torch.tensor([[0.3, -0.2, 0.1]]), torch.tensor([[1.0, 0, 2]])
    for dtype in (torch.float32, torch.bfloat16):
        with pytest.raises(SmoothrankError, match=r"n_levels: .* beyond the range"):
            losses.rmse(x.to(dtype), y.to(dtype), n_levels=1e39)
    assert math.isfinite(losses.rmse(x.double(), y.double(), n_levels=1e300).item())


def test_list_net_gives_no_nan_when_a_target_underflows_where_log_p_is_minus_inf():
    for dtype, big in ((torch.float32, 3e38), (F64, 1e308)):
        s = torch.tensor([[big, -big]], dtype=dtype, requires_grad=True)
        value = losses.list_net(s, torch.tensor([[1000.0, 0]], dtype=dtype))
        (g,) = torch.autograd.grad(value, s)
        assert value.item() == 0.0 and torch.equal(g, torch.zeros_like(g))


def test_integer_scores_past_2_53_keep_their_order_in_the_metrics():
    # Nanosecond timestamps: float64 merged them into ties (NDCG 1 for the wrong order).
    s = torch.tensor([[1_700_000_000_000_000_000, 1_700_000_000_000_000_100]])
    y = torch.tensor([[1, 0]])
    assert metrics.ndcg(s, y).item() == pytest.approx(1 / math.log2(3))
    assert metrics.pairwise_error(s, y).item() == 1.0
    assert metrics.evaluate(s, y, metrics=["ndcg@1"])["ndcg@1"].item() == 0.0


def test_small_argument_errors_are_named():
    with pytest.raises(SmoothrankError, match="generator"):
        losses.get("list_mle", generator=2**70)
    with pytest.raises(SmoothrankError, match="metrics"):
        metrics.evaluate(torch.rand(2, 3), torch.ones(2, 3), metrics=None)
    with pytest.raises(SmoothrankError, match="per_query"):
        metrics.mean_metrics([1.0])
    # A negative discount made every ideal DCG <= 0: every query counted as empty, loss 0.
    with pytest.raises(SmoothrankError, match="negative"):
        losses.neural_ndcg(torch.randn(2, 4), torch.ones(2, 4), discount=lambda r: -1.0 / r)
    with pytest.raises(SmoothrankError, match="float32"):  # 1e39 is finite, not in the scores' dtype
        losses.list_net(torch.randn(1, 3), torch.tensor([[1e39, 0, 1]], dtype=F64))


def test_the_shallow_discount_mapping_works_in_direct_calls_too():
    # {"shallow": A, "n": N} worked through losses.get and configs only; a direct call refused it.
    s, y = torch.randn(3, 8, dtype=F64), torch.randint(0, 3, (3, 8)).double()
    form, built = {"shallow": 0.5, "n": 8}, softrank.shallow_discount(0.5, 8)
    for name in ("neural_ndcg", "soft_ndcg", "approx_ndcg", "lambda_rank"):
        fn = getattr(losses, name)
        assert torch.equal(fn(s, y, discount=form), fn(s, y, discount=built)), name
    assert torch.equal(metrics.ndcg(s, y, discount=form), metrics.ndcg(s, y, discount=built))
    for bad, message in (({"alpha": 0.5}, "expected a name or"), ({"shallow": 2, "n": 8}, "alpha"),
                         ({"shallow": 0.5, "n": 0}, "n: expected")):
        with pytest.raises(SmoothrankError, match=message):
            losses.neural_ndcg(s, y, discount=bad)
        with pytest.raises(SmoothrankError, match=message):
            metrics.ndcg(s, y, discount=bad)


def test_the_losses_take_a_numpy_mask_as_the_metrics_do():
    s, y = torch.randn(2, 5), torch.tensor([[2.0, 0, 1, 0, 0], [0, 1, 0, 0, 0]])
    mask = np.array([[True] * 5, [True, True, True, False, False]])
    for name in ("neural_ndcg", "soft_ndcg", "rank_net", "list_mle"):
        fn = losses.get(name, **({"generator": 0} if name == "list_mle" else {}))
        assert torch.equal(fn(s, y, mask=mask), fn(s, y, mask=torch.from_numpy(mask))), name
    with pytest.raises(SmoothrankError, match="mask"):
        losses.neural_ndcg(s, y, mask=mask.astype(int))


def test_labels_on_a_device_they_cannot_leave_are_named_as_such():
    # It said "labels: expected numbers, got Tensor": the right argument, the wrong reason.
    with pytest.raises(SmoothrankError, match="labels: cannot be moved from meta to the scores' device cpu"):
        losses.list_net(torch.randn(2, 3), torch.ones(2, 3, device="meta"))
    with pytest.raises(SmoothrankError, match="labels: expected numbers, got list"):
        losses.list_net(torch.randn(2, 3), [["a", "b", "c"]] * 2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_metrics_count_ranks_exactly_for_an_explicit_half_precision_dtype(dtype):
    # dtype=torch.float16 counted ranks in float16: P@2500 of an all-relevant list was 1.001 and
    # bfloat16's P@300 1.008; an explicit half dtype is widened to float32 as half inputs are.
    s, y = torch.arange(3000.0).flip(0), torch.ones(3000)
    assert metrics.precision(s, y, k=2500, dtype=dtype).item() == 1.0
    assert metrics.precision(s, y, k=300, dtype=dtype).item() == 1.0
    assert metrics.evaluate(s, y, metrics="p@2500", dtype=dtype)["p@2500"].item() == 1.0
    at = 2049
    y = torch.zeros(5000)
    y[at] = 1
    rr = metrics.reciprocal_rank(torch.zeros(5000), y, dtype=dtype).item()
    assert rr == pytest.approx(1 / (at + 1), rel=1e-6)
