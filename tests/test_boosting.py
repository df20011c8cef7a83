"""GBDT objectives from smoothrank losses (smoothrank.boosting): gradients and Hessians against
autograd and finite differences, and LightGBM's and XGBoost's own LambdaMART reproduced through
the ``lambda_rank`` loss (PITFALLS 19 for the calling conventions)."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
import torch

from smoothrank import boosting, losses
from smoothrank.boosting import (
    boosting_gradients,
    lgbm_ranker_objective,
    lightgbm_objective,
    xgboost_objective,
)
from smoothrank.errors import SmoothrankError

SIZES = np.array([5, 1, 7, 3, 4, 6])


@pytest.fixture(scope="module")
def problem() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    n = int(SIZES.sum())
    scores, labels = rng.normal(size=n), rng.integers(0, 3, size=n).astype(float)
    labels[5] = 0.0                 # the one-document query
    labels[16:20] = 0.0             # a query with no relevant document
    labels[0:2] = 2.0               # a tie among labels
    return scores, labels


def _total(name: str, scores: torch.Tensor, labels: np.ndarray, **options) -> torch.Tensor:
    """The summed loss, one query at a time (no padding, no batching): the reference."""
    fn = losses.get(name, **options)
    out, start = scores.new_zeros(()), 0
    for size in SIZES:
        part = slice(start, start + size)
        out = out + fn(scores[part][None], torch.as_tensor(labels[part])[None], reduction="sum")
        start += size
    return out


# losses whose value is a deterministic function of the scores (ListMLE draws its tie-breaks)
DETERMINISTIC = [name for name in losses.available() if not losses.info(name).random]
TWICE_DIFFERENTIABLE = [name for name in DETERMINISTIC if losses.info(name).twice_differentiable]


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_the_gradient_is_autograds_of_the_summed_loss(problem, name):
    scores, labels = problem
    s = torch.tensor(scores, requires_grad=True)
    (expected,) = torch.autograd.grad(_total(name, s, labels), s)
    grad, hess = boosting_gradients(name, scores, labels, SIZES)
    np.testing.assert_allclose(grad, expected.numpy(), rtol=1e-10, atol=1e-12)
    # the constant Hessian: 1 on the documents of every query the loss depends on
    live = np.repeat([np.any(grad[a:b] != 0) for a, b in zip(np.r_[0, SIZES.cumsum()[:-1]], SIZES.cumsum(),
                                                             strict=True)], SIZES)
    np.testing.assert_array_equal(hess, np.where(live, 1.0, 0.0))


@pytest.mark.parametrize("name", ["neural_ndcg", "soft_ndcg", "list_net"])
def test_the_gradient_matches_float64_finite_differences(problem, name):
    scores, labels = problem
    grad, _ = boosting_gradients(name, scores, labels, SIZES)
    eps = 1e-6
    for i in range(scores.shape[0]):
        up, down = scores.copy(), scores.copy()
        up[i] += eps
        down[i] -= eps
        difference = _total(name, torch.tensor(up), labels) - _total(name, torch.tensor(down), labels)
        numeric = difference / (2 * eps)
        assert grad[i] == pytest.approx(float(numeric), abs=1e-6), i


@pytest.mark.parametrize("block", [1, 3, 64])
@pytest.mark.parametrize("name", TWICE_DIFFERENTIABLE)
def test_the_diagonal_hessian_is_the_absolute_diagonal_of_autograds_hessian(problem, name, block,
                                                                           monkeypatch):
    # block: list positions per vectorised backward pass, one to more than the longest list
    monkeypatch.setattr(boosting, "_DIAG_BLOCK", block)
    scores, labels = problem
    full = torch.autograd.functional.hessian(lambda s: _total(name, s, labels), torch.tensor(scores)).numpy()
    grad, hess = boosting_gradients(name, scores, labels, SIZES, hessian="diagonal", min_hessian=1e-9)
    live = hess > 0
    expected = np.maximum(np.abs(np.diag(full)), 1e-9)
    np.testing.assert_allclose(hess[live], expected[live], rtol=1e-10, atol=1e-14)
    # what is left out is a query whose loss ignores its scores: no gradient, no curvature
    assert not grad[~live].any() and not np.diag(full)[~live].any()
    assert live.sum() >= SIZES.sum() - SIZES[4] - SIZES[1]


def test_the_diagonal_falls_back_to_one_position_a_pass_when_vmap_cannot_batch(problem, monkeypatch):
    scores, labels = problem
    expected = boosting_gradients("rmse", scores, labels, SIZES, hessian="diagonal")[1]
    real_grad = torch.autograd.grad
    batched_calls = []

    def grad_without_vmap(*args, **kwargs):
        if kwargs.get("is_grads_batched"):
            batched_calls.append(1)
            raise RuntimeError("vmap: no batching rule")  # as for an op without one
        return real_grad(*args, **kwargs)

    monkeypatch.setattr(boosting.torch.autograd, "grad", grad_without_vmap)
    got = boosting_gradients("rmse", scores, labels, SIZES, hessian="diagonal")[1]
    assert batched_calls  # the vectorised pass was tried first
    np.testing.assert_array_equal(got, expected)


def test_approx_ndcgs_diagonal_is_vectorised() -> None:
    """ApproxNDCG's ranks are a custom autograd Function: its first-order backward, differentiated
    again by the diagonal's batched pass, must be vmappable (a view of the whole incoming gradient
    is an alias, which vmap cannot batch: every batch fell back to one position a pass)."""
    torch.manual_seed(0)
    x = torch.randn(4, 12, dtype=torch.float64, requires_grad=True)
    value = losses.approx_ndcg(x, torch.randint(0, 3, (4, 12)).double(), reduction="sum")
    (grad,) = torch.autograd.grad(value, x, create_graph=True)
    batched = boosting._diagonal_in_blocks(grad, x, 4)  # raised RuntimeError (aten::alias)
    torch.testing.assert_close(batched, boosting._diagonal_in_blocks(grad, x, 1), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("method", ["normal", "hybrid"])
def test_soft_ndcgs_normal_approximation_is_refused_for_the_diagonal(method: str) -> None:
    """SoftNDCG's normal and hybrid methods have hand-written first derivatives too (ContestMoments,
    NormalFromMoments, NormalExpectedDiscount): their backward passes, recorded under create_graph,
    gave a silently wrong diagonal (normal: 0.078 for a finite-difference 0.058; hybrid: all 0)
    instead of the refusal that the exact method and the docs give."""
    with pytest.raises(SmoothrankError, match="not twice differentiable"):
        boosting_gradients("soft_ndcg", [0.3, -1.2, 0.8, 0.1, 2.0, -0.4], [3.0, 0.0, 1.0, 2.0, 0.0, 1.0], [6],
                           hessian="diagonal", method=method)
    with pytest.raises(SmoothrankError, match="not twice differentiable"):
        xgboost_objective("soft_ndcg", hessian="diagonal", method=method)
    # the other Hessians still work
    grad, hess = boosting_gradients("soft_ndcg", [0.3, -1.2, 0.8], [1.0, 0.0, 2.0], [3], method=method,
                                    hessian="curvature")
    assert np.isfinite(grad).all() and np.any(grad != 0) and (hess > 0).all()


@pytest.mark.parametrize("options", [{"backend": "torch"}, {"backend": "fft"}, {"backend": "fft", "k": 2},
                                     {"method": "hybrid", "n_exact": 1, "backend": "torch"},
                                     {"sinkhorn": True}, {"sinkhorn": True, "backend": "torch"},
                                     {"method": "normal", "sinkhorn": True}])
def test_soft_ndcg_on_every_backend_is_refused_for_the_diagonal(options: dict) -> None:
    """Hand-written backward passes under create_graph: torch.autograd.grad prunes the node that
    ``once_differentiable`` puts on them, and the contests formed by PyTorch outside SoftRank's
    Function on the torch and Fourier paths (the GPU default) are differentiated anyway. The
    diagonal was then up to 10x off the finite differences (0.0051 for 0.0596) on those paths, and
    all min_hessian with Sinkhorn on the CPU kernels, both silently, where the CPU default refused."""
    scores, labels = [0.3, -1.2, 0.8, 0.1, 2.0, -0.4], [2.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    with pytest.raises(SmoothrankError, match="not twice differentiable"):
        boosting_gradients("soft_ndcg", scores, labels, [6], hessian="diagonal", **options)
    with pytest.raises(SmoothrankError, match="not twice differentiable"):
        xgboost_objective("soft_ndcg", hessian="diagonal", **options)
    # Plain autograd: differentiating the gradient raises instead of returning a wrong number.
    s = torch.tensor([scores], dtype=torch.float64, requires_grad=True)
    value = losses.soft_ndcg(s, torch.tensor([labels]), **options)
    (grad,) = torch.autograd.grad(value, s, create_graph=True)
    with pytest.raises(SmoothrankError, match="not twice differentiable"):
        torch.autograd.grad(grad[0, 0], s)
    # First derivatives are unchanged (no graph is recorded without create_graph).
    grad_1, hess = boosting_gradients("soft_ndcg", scores, labels, [6], hessian="curvature", **options)
    (plain,) = torch.autograd.grad(losses.soft_ndcg(s, torch.tensor([labels]), reduction="sum", **options), s)
    np.testing.assert_allclose(grad_1, plain[0].numpy(), rtol=1e-12, atol=0)
    assert (hess > 0).all()


def test_a_loss_built_on_a_hand_written_gradient_refuses_a_second_derivative_in_any_composition() -> None:
    """NeuralNDCG times RankNet: the incoming gradient of NeuralNDCG's Function has a graph, and
    once_differentiable's refusal, hung on a detached copy of it, was pruned by autograd.grad: the
    second derivative silently lacked NeuralNDCG's part."""
    x = torch.tensor([[0.3, -1.2, 0.8, 0.1, 2.0]], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([[2.0, 0.0, 1.0, 0.0, 1.0]])
    (grad,) = torch.autograd.grad(losses.neural_ndcg(x, y) * losses.rank_net(x, y), x, create_graph=True)
    with pytest.raises(SmoothrankError, match="not twice differentiable"):
        torch.autograd.grad(grad[0, 0], x)


def _queries() -> list[slice]:
    ends = SIZES.cumsum()
    return [slice(int(e - n), int(e)) for n, e in zip(SIZES, ends, strict=True)]


@pytest.mark.parametrize("name", TWICE_DIFFERENTIABLE)
def test_the_curvature_is_the_gradient_directions_curvature_under_autograds_hessian(problem, name):
    """``hessian="curvature"``: every document of a query gets |ghat^T H ghat|, ghat the query's unit
    gradient, with H autograd's exact Hessian (to the central differences' O(eps^2) over eps = 0.01)."""
    scores, labels = problem
    full = torch.autograd.functional.hessian(lambda s: _total(name, s, labels), torch.tensor(scores)).numpy()
    grad, hess = boosting_gradients(name, scores, labels, SIZES, hessian="curvature", min_hessian=1e-12)
    for q in _queries():
        g = grad[q]
        if not g.any():
            assert not hess[q].any()  # a query the loss ignores: no pull, no weight
            continue
        d = g / np.linalg.norm(g)
        expected = max(abs(d @ full[q, q] @ d), 1e-12)
        np.testing.assert_allclose(hess[q], expected, rtol=1e-3, atol=1e-9)


@pytest.mark.parametrize("name", ["neural_ndcg", "neural_ndcg_transposed", "soft_ndcg"])
def test_the_curvature_of_a_hand_differentiated_loss_is_its_secant_from_the_loss_value(problem, name):
    """NeuralNDCG and SoftNDCG have hand-written first derivatives (no double backward), and
    Sinkhorn's stopping tolerance makes NeuralNDCG's derivative kinked at small scales: the curvature
    is the documented secant, (f'(eps) - f'(-eps)) / (2 eps) along the unit gradient with eps =
    0.01 max(1, max|s_q|). Here f' comes from float64 differences of the loss *value*, so the
    check uses none of the losses' derivative code."""
    scores, labels = problem
    grad, hess = boosting_gradients(name, scores, labels, SIZES, hessian="curvature", min_hessian=1e-12)
    fn = losses.get(name)
    for q in _queries():
        if not grad[q].any():
            continue
        d = grad[q] / np.linalg.norm(grad[q])
        lab = torch.as_tensor(labels[q])[None]
        eps, h = 1e-2 * max(1.0, np.abs(scores[q]).max()), 1e-6

        def slope(t: float, q=q, d=d, lab=lab, h=h) -> float:
            up, down = (fn(torch.tensor(scores[q] + x * d)[None], lab, reduction="sum")
                        for x in (t + h, t - h))
            return float(up - down) / (2 * h)

        secant = (slope(eps) - slope(-eps)) / (2 * eps)
        np.testing.assert_allclose(hess[q], max(abs(secant), 1e-12), rtol=1e-4, atol=1e-6)


def test_the_curvature_of_a_loss_that_draws_is_differenced_at_fixed_draws():
    """ListMLE breaks label ties at random: the three gradient passes replay one draw, so the
    curvature is that of one sampled permutation's likelihood (finite, positive, and the same for a
    seed), not the difference of two independent samples."""
    rng = np.random.default_rng(1)
    sizes = np.array([6, 9, 4])
    scores, labels = rng.normal(size=sizes.sum()), rng.integers(0, 2, size=sizes.sum()).astype(float)
    torch.manual_seed(0)
    first = boosting_gradients("list_mle", scores, labels, sizes, hessian="curvature")
    torch.manual_seed(0)
    again = boosting_gradients("list_mle", scores, labels, sizes, hessian="curvature")
    np.testing.assert_array_equal(first[1], again[1])
    # ListMLE is convex in the scores, so a fixed permutation's curvature is positive, and bounded by
    # the sum of its n - 1 softmax covariances' largest eigenvalues (each at most 1/2).
    assert (first[1] > 1e-3).all() and (first[1] <= np.repeat(sizes - 1, sizes) / 2).all()


def test_a_loss_linear_along_its_gradient_is_warned_of_under_the_curvature_hessian():
    """RMSE at tied scores is a cone along its gradient (the error vector only scales), so its
    curvature there is about 0 and the Newton step along the gradient is bounded by min_hessian
    alone: on MQ2008 every query's step was 1e5 score units, and the boosted model collapsed. The
    caller is told when most queries are flat; a loss with curvature there, or a few flat queries
    among many (a leaf weighs each query by its curvature), is not warned of."""
    rng = np.random.default_rng(2)
    sizes = np.array([5, 8])
    labels = rng.integers(0, 3, size=sizes.sum()).astype(float)
    with pytest.warns(RuntimeWarning, match="most queries of rmse have a curvature along their gradient"):
        boosting_gradients("rmse", np.zeros(sizes.sum()), labels, sizes, hessian="curvature", n_levels=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # a floor the caller set is the step bound they chose: bounded steps, no warning
        _, hess = boosting_gradients("rmse", np.zeros(sizes.sum()), labels, sizes, hessian="curvature",
                                     n_levels=3, min_hessian=0.5)
        np.testing.assert_array_equal(hess, 0.5)
        for name in ("list_net", "list_mle", "neural_ndcg"):
            boosting_gradients(name, np.zeros(sizes.sum()), labels, sizes, hessian="curvature")
        # one saturated query (scores of +-1e30: no curvature left) beside two ordinary ones
        mixed = np.r_[np.zeros(sizes.sum()), [1e30, -1e30, 0.0]]
        boosting_gradients("list_net", mixed, np.r_[labels, [1.0, 0.0, 2.0]], [*sizes, 3],
                           hessian="curvature")


def test_a_query_without_a_relevant_document_neither_pulls_nor_dilutes_a_leaf(problem):
    scores, labels = problem
    for hessian in ("constant", "diagonal", "curvature"):
        name = "approx_ndcg"
        grad, hess = boosting_gradients(name, scores, labels, SIZES, hessian=hessian)
        assert not grad[16:20].any() and not hess[16:20].any()
        assert (hess[:5] > 0).all()


@pytest.mark.parametrize("name", [name for name in losses.available()
                                  if losses.info(name).constant_on_equal_labels])
def test_a_query_of_equal_labels_neither_pulls_nor_dilutes_a_leaf_under_an_ndcg_loss(name):
    # NDCG is constant there; NeuralNDCG left Sinkhorn's residual (1e-6) and a Hessian of 1 (a
    # review found it), ApproxNDCG and SoftNDCG their smoothing's gradient.
    scores = np.array([0.3, -0.2, 1.0, 0.5, 0.1] * 2)
    labels = np.array([2, 2, 2, 2, 2, 2, 0, 1, 0, 0], dtype=float)
    for hessian in ("constant", "curvature"):
        grad, hess = boosting_gradients(name, scores, labels, [5, 5], hessian=hessian)
        assert not grad[:5].any() and not hess[:5].any()
        assert grad[5:].any() and (hess[5:] > 0).all()
    # A loss that is not an NDCG surrogate still learns from such a query (ListNet: equal scores).
    grad, _ = boosting_gradients("list_net", scores, labels, [5, 5])
    assert grad[:5].any()


def test_weights_batches_and_dtype_do_not_change_the_result_beyond_scaling(problem):
    scores, labels = problem
    grad, hess = boosting_gradients("neural_ndcg", scores, labels, SIZES)
    for chunk in (1, 7, 1 << 16):  # one query per batch, a few, all at once
        g, h = boosting_gradients("neural_ndcg", scores, labels, SIZES, chunk_items=chunk)
        np.testing.assert_allclose(g, grad, rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(h, hess)
    weights = np.linspace(0.5, 2.0, scores.shape[0])
    g, h = boosting_gradients("neural_ndcg", scores, labels, SIZES, weights=weights)
    np.testing.assert_allclose(g, grad * weights, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(h, hess * weights)
    g32, _ = boosting_gradients("neural_ndcg", scores, labels, SIZES, dtype=torch.float32)
    np.testing.assert_allclose(g32, grad, atol=1e-5)


def test_a_bound_loss_and_a_name_with_options_agree(problem):
    scores, labels = problem
    by_name = boosting_gradients("neural_ndcg", scores, labels, SIZES, k=3, temperature=0.5)
    bound = boosting_gradients(losses.get("neural_ndcg", k=3, temperature=0.5), scores, labels, SIZES)
    np.testing.assert_array_equal(by_name[0], bound[0])


def test_ties_huge_scores_and_a_single_document_give_finite_values():
    labels = np.array([2.0, 1.0, 0.0, 1.0, 0.0])
    for scores in (np.zeros(5), np.array([1e30, -1e30, 0.0, 1e30, 3.0])):
        for name in [*DETERMINISTIC, "list_mle"]:
            for hessian in ("constant", "curvature"):
                with warnings.catch_warnings():
                    # saturated lists (scores of 1e30) have no curvature left: warned of, by design
                    warnings.filterwarnings("ignore", "hessian='curvature'", RuntimeWarning)
                    grad, hess = boosting_gradients(name, scores, labels, [4, 1], hessian=hessian)
                assert np.isfinite(grad).all() and np.isfinite(hess).all(), (name, hessian)
                assert grad[4] == 0.0 and hess[4] == 0.0  # one document: nothing to rank


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"hessian": "exact"}, "hessian: expected one of"),
    ({"min_hessian": 0.0}, "min_hessian"),
    ({"chunk_items": 0}, "chunk_items"),
    ({"group_sizes": [3, 3]}, "group_sizes: the queries hold 6 documents, the scores 5"),
    ({"group_sizes": [2, -1, 4]}, "group_sizes: expected non-negative integer"),
    # finite gradients times weights near the float64 limit: the check comes after the weights
    # (labels without ties: ListMLE breaks ties at random, and this gradient of 2 overflows only under
    # some tie-breaks; an audit of 2026-11-25 saw the case fail when run alone)
    ({"weights": [1e308] * 5, "scores": [300.0, 200.0, 100.0, 0.0, 50.0], "labels": [1.0, 0.0, 0.0, 2.0, 1.0],
      "loss": "list_mle"}, "list_mle: the gradient or Hessian is not finite at these scores and weights"),
    # A 2-D prediction (a booster with several outputs) was flattened and the labels blamed.
    ({"scores": np.zeros((5, 2))}, r"scores: expected one value per document .*got shape \(5, 2\)"),
    ({"scores": [0.0, np.nan, 0.0, 0.0, 0.0]}, "scores: value nan at document 1"),
    ({"labels": [0.0, 1.0]}, "labels: 2 values for 5 documents"),
    ({"weights": [1.0] * 4}, "weights: 4 values for 5 documents"),
    ({"hessian": "diagonal", "loss": "neural_ndcg"}, "neural_ndcg is not twice differentiable"),
    ({"loss": "no_such_loss"}, "unknown loss 'no_such_loss'"),
    ({"temperature": 1.0, "loss": losses.get("neural_ndcg")}, "options ['temperature'] are for a loss given"),
    ({"loss": 3}, "loss: expected a loss name or a callable"),
    # A review found these reached torch or numpy (TypeError, "inhomogeneous shape", a cast warning).
    ({"dtype": "float32"}, "dtype: expected a floating torch.dtype"),
    ({"dtype": torch.int64}, "dtype: expected a floating torch.dtype"),
    ({"device": "gpu0"}, "device: "),
    ({"group_sizes": [[2], [3, 0]]}, "group_sizes: expected a flat sequence"),
    ({"group_sizes": [1e30]}, "group_sizes: expected non-negative integer query sizes, none above"),
])
def test_bad_arguments_are_named(kwargs, message):
    args = {"loss": "list_net", "scores": np.zeros(5), "labels": [1.0, 0.0, 0.0, 2.0, 0.0],
            "group_sizes": [2, 3], **kwargs}
    with pytest.raises(SmoothrankError, match=message.replace("[", r"\[").replace("]", r"\]")):
        boosting_gradients(args.pop("loss"), args.pop("scores"), args.pop("labels"), args.pop("group_sizes"),
                           **args)


# ------------------------------------------------------------------------------ the libraries
@pytest.fixture(scope="module")
def mq2008_part():
    from smoothrank.datasets import load_mq2008

    train = load_mq2008(fold=1, split="train")
    part = train.subset(np.arange(150))
    return np.asarray(part.features), np.asarray(part.labels, dtype=np.float64), np.asarray(part.list_sizes)


# LightGBM's lambdarank without its normalisation (lambdarank_norm) and truncation: all pairs,
# each weighted by |Delta NDCG| with exp2 gains and log2 discounts, sigmoid 1.
LIGHTGBM_LAMBDARANK = {"objective": "lambdarank", "lambdarank_norm": False,
                       "lambdarank_truncation_level": 10_000, "sigmoid": 1.0}
TREES = {"learning_rate": 0.1, "num_leaves": 15, "min_data_in_leaf": 10, "verbosity": -1,
         "deterministic": True, "num_threads": 1, "seed": 0}


def test_lambda_rank_with_its_hessian_is_lightgbms_lambdarank(mq2008_part):
    lgb = pytest.importorskip("lightgbm")
    features, labels, sizes = mq2008_part
    data = lgb.Dataset(features, label=labels, group=sizes, free_raw_data=False)
    builtin = lgb.train({**TREES, **LIGHTGBM_LAMBDARANK}, data, num_boost_round=10)
    ours = lgb.train({**TREES, "objective": lightgbm_objective("lambda_rank", hessian="diagonal")}, data,
                     num_boost_round=10)
    expected = builtin.predict(features)
    # LightGBM's sigmoid is a lookup table: agreement to its resolution, not to the last bit
    np.testing.assert_allclose(ours.predict(features), expected, atol=1e-4 * np.abs(expected).max())
    # the constant Hessian is another booster
    other = lgb.train({**TREES, "objective": lightgbm_objective("lambda_rank")}, data, num_boost_round=10)
    assert np.abs(other.predict(features) - expected).max() > 1e-2


def test_lgbm_ranker_gets_the_query_sizes_through_four_positional_parameters(mq2008_part):
    # PITFALLS 19: LGBMRanker passes `group` only to an objective with exactly four positional
    # parameters (y_true, y_pred, weight, group).
    lgb = pytest.importorskip("lightgbm")
    objective = lgbm_ranker_objective("lambda_rank", hessian="diagonal")
    params = [p for p in inspect.signature(objective).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert len(params) == 4
    features, labels, sizes = mq2008_part
    trees = {k: v for k, v in TREES.items() if k != "seed"}
    ranker = lgb.LGBMRanker(objective=objective, n_estimators=10, random_state=0, **trees)
    ranker.fit(features, labels, group=sizes)
    data = lgb.Dataset(features, label=labels, group=sizes, free_raw_data=False)
    builtin = lgb.train({**TREES, **LIGHTGBM_LAMBDARANK}, data, num_boost_round=10)
    expected = builtin.predict(features)
    np.testing.assert_allclose(ranker.predict(features), expected, atol=1e-4 * np.abs(expected).max())


def test_an_lgbm_ranker_with_a_smoothrank_objective_pickles(mq2008_part):
    # The objective is an estimator parameter: a closure made pickle, joblib and parallel
    # GridSearchCV fail (a review found it).
    import pickle

    lgb = pytest.importorskip("lightgbm")
    features, labels, sizes = mq2008_part
    trees = {k: v for k, v in TREES.items() if k != "seed"}
    ranker = lgb.LGBMRanker(objective=lgbm_ranker_objective("list_net", hessian="curvature"), n_estimators=3,
                            random_state=0, **trees)
    ranker.fit(features, labels, group=sizes)
    loaded = pickle.loads(pickle.dumps(ranker))
    np.testing.assert_array_equal(loaded.predict(features), ranker.predict(features))
    loaded.fit(features, labels, group=sizes)  # the objective is bound again on loading
    np.testing.assert_array_equal(loaded.predict(features), ranker.predict(features))


def test_lambda_rank_is_xgboosts_rank_ndcg_whose_pair_hessian_is_doubled(mq2008_part):
    # XGBoost refuses callables in XGBRanker (PITFALLS 19): the objective goes to xgboost.train(obj=).
    xgb = pytest.importorskip("xgboost")
    with pytest.raises(ValueError, match="not supported by XGBRanker"):
        xgb.XGBRanker(objective=xgboost_objective("lambda_rank")).fit(np.zeros((2, 1)), [1, 0], qid=[0, 0])
    features, labels, sizes = mq2008_part
    data = xgb.DMatrix(features, label=labels, qid=np.repeat(np.arange(sizes.shape[0]), sizes))
    trees = {"eta": 0.1, "max_depth": 4, "tree_method": "hist", "nthread": 1, "seed": 0, "base_score": 0.0}
    builtin = xgb.train({**trees, "objective": "rank:ndcg", "lambdarank_pair_method": "topk",
                         "lambdarank_num_pair_per_sample": 10_000, "lambdarank_normalization": False,
                         "lambdarank_score_normalization": False}, data, num_boost_round=10)
    objective = xgboost_objective("lambda_rank", hessian="diagonal")

    def doubled(preds, dtrain):
        grad, hess = objective(preds, dtrain)
        return grad, 2.0 * hess  # XGBoost's lambdarank counts each pair's Hessian twice

    ours = xgb.train({**trees, "objective": "reg:squarederror"}, data, num_boost_round=10, obj=doubled)
    expected = builtin.predict(data, output_margin=True)
    np.testing.assert_allclose(ours.predict(data, output_margin=True), expected,
                               atol=1e-5 * np.abs(expected).max())
    # With query weights too: XGBoost rescales them to a mean of 1, so a common factor changes nothing.
    weights = np.random.default_rng(0).uniform(0.2, 3.0, size=sizes.shape[0])
    for factor in (1.0, 4.0):
        data.set_weight(weights * factor)
        builtin = xgb.train({**trees, "objective": "rank:ndcg", "lambdarank_pair_method": "topk",
                             "lambdarank_num_pair_per_sample": 10_000, "lambdarank_normalization": False,
                             "lambdarank_score_normalization": False}, data, num_boost_round=10)
        ours = xgb.train({**trees, "objective": "reg:squarederror"}, data, num_boost_round=10, obj=doubled)
        expected = builtin.predict(data, output_margin=True)
        np.testing.assert_allclose(ours.predict(data, output_margin=True), expected,
                                   atol=1e-5 * np.abs(expected).max())


def test_the_adapters_hand_the_library_what_boosting_gradients_computes(mq2008_part):
    lgb = pytest.importorskip("lightgbm")
    xgb = pytest.importorskip("xgboost")
    features, labels, sizes = mq2008_part
    scores = np.random.default_rng(1).normal(size=labels.shape[0])
    expected = boosting_gradients("neural_ndcg", scores, labels, sizes, k=5)
    weights = np.repeat(np.linspace(1.0, 2.0, sizes.shape[0]), sizes)
    lgb_data = lgb.Dataset(features, label=labels, group=sizes, weight=weights).construct()
    for got, scale in ((lightgbm_objective("neural_ndcg", k=5)(scores, lgb_data), weights),
                       (lgbm_ranker_objective("neural_ndcg", k=5)(labels, scores, None, sizes), 1.0)):
        np.testing.assert_allclose(got[0], expected[0] * scale)
        np.testing.assert_allclose(got[1], expected[1] * scale)
    query_weights = np.linspace(1.0, 2.0, sizes.shape[0])  # XGBoost: one weight per query
    xgb_data = xgb.DMatrix(features, label=labels, qid=np.repeat(np.arange(sizes.shape[0]), sizes),
                           weight=query_weights)
    got = xgboost_objective("neural_ndcg", k=5)(scores, xgb_data)
    mean_one = weights / query_weights.mean()  # rescaled to a mean of 1 over the queries, as XGBoost does
    np.testing.assert_allclose(got[0], expected[0] * mean_one)
    np.testing.assert_allclose(got[1], expected[1] * mean_one)


def test_an_adapter_refuses_bad_options_when_made_and_missing_groups_when_called():
    with pytest.raises(SmoothrankError, match="unknown option"):
        lightgbm_objective("neural_ndcg", sharpness=3)
    with pytest.raises(SmoothrankError, match="not twice differentiable"):
        xgboost_objective("soft_ndcg", hessian="diagonal")

    class NoGroup:
        def get_group(self):
            return None

    with pytest.raises(SmoothrankError, match="has no group"):
        lightgbm_objective("list_net")(np.zeros(3), NoGroup())
    with pytest.raises(SmoothrankError, match="no group"):
        lgbm_ranker_objective("list_net")(np.zeros(3), np.zeros(3), None, None)


def test_boosting_a_smooth_ndcg_learns_to_rank(mq2008_part):
    lgb = pytest.importorskip("lightgbm")
    from smoothrank.metrics import evaluate_flat, mean_metrics

    features, labels, sizes = mq2008_part
    data = lgb.Dataset(features, label=labels, group=sizes)
    booster = lgb.train({**TREES, "learning_rate": 0.5, "objective": lightgbm_objective("neural_ndcg", k=5)},
                        data, num_boost_round=20)
    offsets = np.r_[0, sizes.cumsum()]

    def ndcg5(scores):
        return mean_metrics(evaluate_flat(scores, labels, offsets=offsets, metrics=["ndcg@5"],
                                          convention="lightgbm"))["ndcg@5"]

    # the training lists, from tied scores (file order) to the boosted ones
    assert ndcg5(booster.predict(features)) > ndcg5(np.zeros_like(labels)) + 0.1


# ------------------------------------------------------------------------------ in the experiment harness
@pytest.fixture(scope="module")
def letor_files(tmp_path_factory):
    from conftest import write_synthetic_folds

    return write_synthetic_folds(tmp_path_factory.mktemp("letor"), seed=0, queries=(40, 15, 15), docs=10,
                                 n_features=5, noise=0.3)


@pytest.mark.parametrize(("library", "params"), [("lightgbm", {"min_data_in_leaf": 5, "learning_rate": 0.3}),
                                                 ("xgboost", {"eta": 0.3})])
def test_fit_gbdt_boosts_a_smoothrank_loss_selected_on_validation(letor_files, library, params):
    pytest.importorskip(library)
    from smoothrank.data import load_letor
    from smoothrank.experiments.gbdt import fit_gbdt
    from smoothrank.metrics import evaluate_flat, mean_metrics

    train, valid, test = (load_letor(letor_files / f"{s}.txt") for s in ("train", "vali", "test"))

    def ndcg5(scores, data=valid):
        return mean_metrics(evaluate_flat(scores, data.labels, offsets=data.offsets, metrics=["ndcg@5"],
                                          convention="letor4"))["ndcg@5"]

    fitted = fit_gbdt(train, valid, library=library, objective="neural_ndcg", loss_options={"k": 5},
                      params=params, num_boost_round=30, early_stopping_rounds=10, select=ndcg5,
                      select_name="v")
    assert 1 <= fitted.best_iteration <= fitted.rounds_run <= 30
    curve = [row["valid_v"] for row in fitted.history]
    assert ndcg5(fitted.predict(valid)) == pytest.approx(max(curve))  # the selected round is the best one
    # the label is a noisy threshold of feature 1: the boosted ranking must beat its reverse by far
    assert ndcg5(fitted.predict(test), test) > ndcg5(-test.features[:, 0], test) + 0.2


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_threads": 0}, "num_threads: expected a positive integer"),
    ({"num_threads": "2"}, "num_threads: expected a positive integer"),
    ({"eval_at": 2.5}, "eval_at: expected a positive integer"),
    ({"num_boost_round": "10"}, "num_boost_round: expected a positive integer"),
    ({"num_boost_round": True}, "num_boost_round: expected a positive integer"),
    ({"params": [("a", 1)]}, "params: expected a mapping"),
    ({"params": {"label_gain": 5}}, "params.label_gain: expected a list of gains"),
    ({"select": lambda scores: float("nan")}, "select: returned nan"),
])
def test_fit_gbdt_names_bad_arguments(letor_files, kwargs, message):
    # A review found these accepted silently (all cores for num_threads=0, ndcg@2.5), or failing deep
    # inside (TypeError from label_gain: 5, after the spec check had passed it).
    from smoothrank.data import load_letor
    from smoothrank.errors import ConfigError
    from smoothrank.experiments.gbdt import check_gbdt, fit_gbdt

    train = load_letor(letor_files / "train.txt")
    with pytest.raises(ConfigError, match=message):
        fit_gbdt(train, train, library="lightgbm", objective="lambdarank", **{"num_boost_round": 3, **kwargs})
    with pytest.raises(ConfigError, match=r"gbdt\.params\.label_gain"):
        check_gbdt("lightgbm", "lambdarank", {"label_gain": 5})
    check_gbdt("lightgbm", "lambdarank", {"label_gain": [0, 1, 3]})
    check_gbdt("lightgbm", "lambdarank", {"label_gain": "0,1,3"})


def test_a_boosted_loss_that_draws_is_the_same_for_a_seed_and_leaves_the_global_generator(letor_files):
    # ListMLE breaks label ties at random: a run drew from whatever state torch's global generator
    # was in, so one seed gave different models.
    from smoothrank.data import load_letor
    from smoothrank.experiments.gbdt import fit_gbdt

    train, valid = load_letor(letor_files / "train.txt"), load_letor(letor_files / "vali.txt")

    def scores(global_seed: int, seed: int) -> np.ndarray:
        torch.manual_seed(global_seed)
        fitted = fit_gbdt(train, None, library="lightgbm", objective="list_mle", num_boost_round=10,
                          seed=seed, params={"min_data_in_leaf": 5, "learning_rate": 0.5})
        return fitted.predict(valid)

    first = scores(0, seed=3)
    np.testing.assert_array_equal(scores(1, seed=3), first)
    torch.manual_seed(7)
    before = torch.random.get_rng_state()
    fit_gbdt(train, None, library="lightgbm", objective="list_mle", num_boost_round=3, seed=3,
             params={"min_data_in_leaf": 5})
    assert torch.equal(torch.random.get_rng_state(), before)
    assert np.abs(scores(0, seed=4) - first).max() > 0  # another seed, other tie-breaks


def test_an_experiment_runs_gbdt_with_smoothrank_losses_and_resumes(letor_files, tmp_path):
    from conftest import two_method_spec

    from smoothrank.experiments import expand, load_results, run_experiment, spec_from_dict

    spec = spec_from_dict(two_method_spec(letor_files, losses=[], models=[], seeds=[0], refit=True, gbdt=[
        {"library": "lightgbm", "objective": "lambdarank", "num_boost_round": 5,
         "params": {"min_data_in_leaf": 3}},
        {"library": "lightgbm", "objective": "neural_ndcg", "options": {"k": 5}, "num_boost_round": 5,
         "params": {"min_data_in_leaf": 3}},
        {"library": "xgboost", "objective": "lambda_rank", "hessian": "diagonal", "label": "xgb-lambda",
         "num_boost_round": 5},
    ]))
    cells = expand(spec)
    assert [c.method for c in cells] == ["lightgbm-lambdarank", "lightgbm-neural_ndcg", "xgb-lambda"]
    # a library objective's cell has no loss keys: its fingerprint is the one of older specs
    assert set(cells[0].settings["gbdt"]) >= {"objective", "params"}
    assert not {"options", "hessian"} & set(cells[0].settings["gbdt"])
    assert cells[1].settings["gbdt"]["options"] == {"k": 5}
    assert cells[2].settings["gbdt"]["hessian"] == "diagonal"
    first = run_experiment(spec, tmp_path / "out")
    assert sorted(first.ran) == sorted(c.run_id for c in cells)
    results = load_results(tmp_path / "out")
    assert sorted(r["method"] for r in results) == [c.method for c in cells]
    for r in results:
        assert r["refit"]["rounds"] == r["selection"]["best_iteration"]
    again = run_experiment(spec, tmp_path / "out")  # finished: nothing is redone
    assert again.ran == [] and sorted(again.skipped) == sorted(first.ran)
    assert [r["metrics"] for r in again.results] == [r["metrics"] for r in first.results]


@pytest.mark.parametrize(("gbdt", "fragment"), [
    ({"library": "lightgbm", "objective": "no_such"},
     "gbdt.0.objective: expected one of lightgbm's objectives ('lambdarank', 'rank_xendcg') or a smoothrank"),
    ({"library": "lightgbm", "objective": "lambdarank", "options": {"k": 5}},
     "gbdt.0.options: only for a smoothrank loss as the objective, not lightgbm's own 'lambdarank'"),
    ({"library": "xgboost", "objective": "rank:ndcg", "hessian": "diagonal"}, "gbdt.0.hessian: only for"),
    ({"library": "lightgbm", "objective": "neural_ndcg", "hessian": "diagonal"},
     "gbdt.0.hessian: hessian='diagonal': neural_ndcg is not twice differentiable"),
    ({"library": "lightgbm", "objective": "neural_ndcg", "hessian": "newton"},
     "gbdt.0.hessian: expected one of"),
    ({"library": "lightgbm", "objective": "neural_ndcg", "options": {"temperature": 0}},
     "gbdt.0.options: temperature"),
    ({"library": "lightgbm", "objective": "neural_ndcg", "options": {"sharpness": 1}},
     "gbdt.0.options: loss 'neural_ndcg': unknown option(s) sharpness"),
    ({"library": "lightgbm", "objective": "neural_ndcg", "params": {"num_leaves": -3}}, "gbdt.0.params"),
    ({"library": "lightgbm", "objective": "lambdarank", "min_hessian": 0.1},
     "gbdt.0.min_hessian: only for a smoothrank loss as the objective"),
    ({"library": "lightgbm", "objective": "rmse", "hessian": "curvature", "min_hessian": 0},
     "gbdt.0.min_hessian"),
    ({"library": "lightgbm", "objective": "rmse", "hessian": "curvature", "min_hessian": -1e-3},
     "gbdt.0.min_hessian"),
    ({"library": "lightgbm", "objective": "rmse", "hessian": "curvature", "min_hessian": float("inf")},
     "gbdt.0.min_hessian"),
    ({"library": "lightgbm", "objective": "rmse", "hessian": "curvature", "min_hessian": "big"},
     "gbdt.0.min_hessian"),
])
def test_the_spec_check_names_bad_loss_objectives(letor_files, gbdt, fragment):
    from conftest import assert_spec_problems, two_method_spec

    assert_spec_problems(two_method_spec(letor_files, gbdt=[gbdt]), [fragment])


def test_a_spec_sets_the_hessian_floor_of_a_loss_objective(letor_files, tmp_path, monkeypatch):
    """``min_hessian`` reaches the booster's objective; unset, the cell and its fingerprint are those
    of a spec written before the key existed."""
    from conftest import two_method_spec

    from smoothrank import boosting
    from smoothrank.experiments import expand, run_experiment, spec_from_dict

    entry = {"library": "lightgbm", "objective": "rmse", "hessian": "curvature", "num_boost_round": 3,
             "params": {"min_data_in_leaf": 3}}
    plain = expand(spec_from_dict(two_method_spec(letor_files, losses=[], models=[], seeds=[0],
                                                  gbdt=[entry])))[0]
    floored_spec = spec_from_dict(two_method_spec(letor_files, losses=[], models=[], seeds=[0],
                                                  gbdt=[{**entry, "min_hessian": 0.5}]))
    floored = expand(floored_spec)[0]
    assert "min_hessian" not in plain.settings["gbdt"]
    assert floored.settings["gbdt"]["min_hessian"] == 0.5
    assert floored.run_id == plain.run_id and floored.fingerprint() != plain.fingerprint()

    floors = []
    real = boosting.lightgbm_objective

    def recording(loss, **kwargs):
        floors.append(kwargs.get("min_hessian"))
        return real(loss, **kwargs)

    monkeypatch.setattr(boosting, "lightgbm_objective", recording)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a floor set in the spec is not warned of
        run_experiment(floored_spec, tmp_path / "out")
    assert floors == [0.5]


def test_curvature_replays_a_bound_generator_across_its_three_passes():
    # A loss bound to its own generator (generator=0) drew new tie-breaks in each of the three passes,
    # so the secant measured the noise between two samples (up to 50x the curvature).
    from smoothrank.boosting import check_objective

    rng = np.random.default_rng(0)
    s, y = rng.normal(size=18), rng.integers(0, 2, size=18).astype(float)  # ties: ListMLE draws
    got = boosting_gradients(losses.get("list_mle", generator=0), s, y, [6, 6, 6], hessian="curvature")
    fn = losses.get("list_mle", generator=0)
    generator = fn.options["generator"]
    start = generator.get_state()
    scores, labels = torch.tensor(s).view(3, 6), torch.tensor(y).view(3, 6)

    def grad(at: torch.Tensor) -> torch.Tensor:  # every pass from the same generator state
        generator.set_state(start)
        at = at.detach().requires_grad_()
        return torch.autograd.grad(fn(at, labels, reduction="sum"), at)[0]

    g0 = grad(scores)
    norm = g0.norm(dim=-1, keepdim=True)
    direction = torch.where(norm > 0, g0 / norm.clamp_min(1e-300), 0.0)
    step = 0.01 * scores.abs().amax(-1, keepdim=True).clamp_min(1.0)
    curvature = (direction * (grad(scores + step * direction) - grad(scores - step * direction))
                 / (2 * step)).sum(-1)
    np.testing.assert_allclose(got[0], g0.flatten().numpy(), rtol=1e-12)
    live = norm.squeeze(-1).numpy() > 0  # a query without gradient (equal labels) gets no Hessian
    want = np.where(live, np.maximum(curvature.abs().numpy(), 1e-6), 0.0)
    assert live.sum() == 2
    np.testing.assert_allclose(got[1].reshape(3, 6)[:, 0], want, rtol=1e-10)
    # The adapters' up-front probe leaves a bound generator where it was.
    before = generator.get_state()
    check_objective(fn, hessian="curvature")
    assert torch.equal(generator.get_state(), before)
    # And a generator given with the loss name (the review of 2026-11-24 found that one advanced).
    check_objective("neural_ndcg", hessian="curvature", stochastic=True, generator=generator)
    assert torch.equal(generator.get_state(), before)


def test_the_adapters_refuse_a_bad_dtype_or_device_when_made():
    # They accepted dtype="float32" and failed with torch's TypeError inside the booster's callback.
    for make in (boosting.lightgbm_objective, boosting.lgbm_ranker_objective, boosting.xgboost_objective):
        with pytest.raises(SmoothrankError, match=r"dtype: expected a floating torch\.dtype"):
            make("list_net", dtype="float32")
        with pytest.raises(SmoothrankError, match="device: "):
            make("list_net", device="gpu0")


def test_empty_queries_are_skipped_as_the_boosters_do(mq2008_part):
    # LightGBM and XGBoost train with a group of size 0 (np.bincount of query ids with a gap gives
    # one); the objectives refused it.
    import lightgbm as lgb
    import xgboost as xgb

    X, y, sizes = mq2008_part
    with_gap = np.insert(sizes, [0, 2, len(sizes)], 0)
    scores = np.random.default_rng(0).normal(size=len(y))
    for hessian in ("constant", "diagonal"):
        expected = boosting_gradients("lambda_rank", scores, y, sizes, hessian=hessian)
        got = boosting_gradients("lambda_rank", scores, y, with_gap, hessian=hessian)
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
    params = {"objective": lightgbm_objective("list_net"), "verbosity": -1, "num_threads": 1,
              "min_data_in_leaf": 5}
    gap = lgb.train(params, lgb.Dataset(X, label=y, group=with_gap), 3).predict(X)
    plain = lgb.train(params, lgb.Dataset(X, label=y, group=sizes), 3).predict(X)
    np.testing.assert_array_equal(gap, plain)
    booster = xgb.train({"base_score": 0, "nthread": 1}, xgb.DMatrix(X, label=y, group=with_gap), 2,
                        obj=xgboost_objective("list_net"))
    assert np.isfinite(booster.predict(xgb.DMatrix(X))).all()


def test_an_objective_handed_to_the_wrong_api_names_the_right_builder(mq2008_part):
    # PITFALLS 19: each library and API calls its objective with other arguments; these were raw
    # AttributeErrors (or, for a DMatrix given to lightgbm_objective, a misleading weights error).
    import lightgbm as lgb
    import xgboost as xgb

    X, y, sizes = mq2008_part
    with pytest.raises(SmoothrankError, match=r"lightgbm_objective: .*ndarray.*use lgbm_ranker_objective"):
        lgb.LGBMRanker(objective=lightgbm_objective("list_net"), n_estimators=1, verbosity=-1).fit(
            X, y, group=sizes)
    with pytest.raises(SmoothrankError, match=r"xgboost_objective: .*ndarray.*xgboost.train"):
        xgb.XGBRegressor(objective=xgboost_objective("list_net"), n_estimators=1).fit(X, y)
    with pytest.raises(SmoothrankError, match=r"xgboost_objective: .*Dataset.*use lightgbm_objective"):
        lgb.train({"objective": xgboost_objective("list_net"), "verbosity": -1},
                  lgb.Dataset(X, label=y, group=sizes), 1)
    with pytest.raises(SmoothrankError, match=r"lightgbm_objective: .*DMatrix.*use xgboost_objective"):
        xgb.train({}, xgb.DMatrix(X, label=y, group=sizes), 1, obj=lightgbm_objective("list_net"))
