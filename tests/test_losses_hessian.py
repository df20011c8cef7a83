"""The Hessian diagonals in closed form (``rank_net_hessian_diagonal``, ``lambda_rank_hessian_diagonal``,
``list_net_hessian_diagonal``) against autograd's full Hessian in float64, and the boosters'
``hessian="diagonal"`` that uses them against the generic diagonal (one backward pass per position)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from smoothrank import boosting, losses
from smoothrank.errors import SmoothrankError
from smoothrank.losses.listwise import list_net_hessian_diagonal
from smoothrank.losses.pairwise import lambda_rank_hessian_diagonal, rank_net_hessian_diagonal

PAIRS = [(losses.rank_net, rank_net_hessian_diagonal), (losses.lambda_rank, lambda_rank_hessian_diagonal)]
OPTIONS = [{}, {"sigma": 0.4}, {"sigma": 3.0, "k": 3}, {"k": 1}]
LAMBDA_ONLY = [{"gain": "linear", "discount": "log2"},
               {"gain": "exp2", "discount": lambda r: 1.0 / r, "k": 4}]


def _batch(negative: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Six queries; the last has negative labels (pairs, no relevant document) where ``negative``,
    else none relevant (LambdaRank refuses the negative gains of 2^y - 1)."""
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(6, 8, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 4, (6, 8), generator=g).double()
    mask = torch.ones(6, 8, dtype=torch.bool)
    labels[5] = torch.tensor([-1.0, 0.0, -1.0, -2.0, 0.0, -1.0, -2.0, 0.0]) if negative else 0.0
    mask[1, 2] = mask[1, 6:] = False  # padding in the middle and at the end
    labels[2] = 0.0  # no relevant document
    labels[3] = 2.0  # all labels equal
    scores[4, :4] = 0.7  # tied scores
    mask[0, 1:] = False  # a list of one real item
    return scores, labels, mask


def _autograd_diagonal(loss, scores, labels, mask, reduction, options) -> torch.Tensor:
    """The diagonal of autograd's full Hessian of the (summed, for "none") loss."""
    def total(x: torch.Tensor) -> torch.Tensor:
        value = loss(x.reshape(scores.shape), labels, mask=mask, reduction=reduction, **options)
        return value.sum()

    full = torch.autograd.functional.hessian(total, scores.reshape(-1).clone())
    return torch.diagonal(full).reshape(scores.shape)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("options", OPTIONS, ids=str)
@pytest.mark.parametrize(("loss", "diagonal"), PAIRS, ids=["rank_net", "lambda_rank"])
def test_the_closed_form_is_the_diagonal_of_autograds_hessian(loss, diagonal, options, reduction):
    scores, labels, mask = _batch(negative=loss is losses.rank_net)
    expected = _autograd_diagonal(loss, scores, labels, mask, reduction, options)
    got = diagonal(scores, labels, mask=mask, reduction=reduction, **options)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-15)
    # padded items, the one-item list and the queries the loss ignores: exactly 0
    assert not got[~mask].any() and not got[0].any() and not got[2].any() and not got[3].any()
    assert not got[5].any()
    assert (got[4] > 0).any()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_list_nets_closed_form_is_the_diagonal_of_autograds_hessian(reduction):
    scores, labels, mask = _batch()
    scores[4, 5] = 40.0  # one item far above the rest: q close to 1, 1 - q kept exact
    expected = _autograd_diagonal(losses.list_net, scores, labels, mask, reduction, {})
    got = list_net_hessian_diagonal(scores, labels, mask=mask, reduction=reduction)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-15)
    # padded items, the one-item list (q = 1) and the queries without a relevant document: 0
    assert not got[~mask].any() and not got[0].any() and not got[2].any() and not got[5].any()
    assert (got[3] > 0).all()  # equal labels: ListNet still learns from them


@pytest.mark.parametrize("options", LAMBDA_ONLY, ids=["linear-gain", "custom-discount"])
def test_lambda_ranks_closed_form_follows_its_gain_and_discount(options):
    scores, labels, mask = _batch(negative=False)
    expected = _autograd_diagonal(losses.lambda_rank, scores, labels, mask, "sum", options)
    got = lambda_rank_hessian_diagonal(scores, labels, mask=mask, reduction="sum", **options)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-15)


ALL = [*PAIRS, (losses.list_net, list_net_hessian_diagonal)]


@pytest.mark.parametrize(("loss", "diagonal"), ALL, ids=["rank_net", "lambda_rank", "list_net"])
def test_the_closed_form_keeps_shape_and_dtype_and_builds_no_graph(loss, diagonal):
    scores = torch.tensor([0.3, -1.0, 2.0, 0.5], requires_grad=True)
    labels = torch.tensor([1.0, 0.0, 2.0, 0.0])
    got = diagonal(scores, labels)
    assert got.shape == (4,) and got.dtype == torch.float32 and not got.requires_grad
    s64, y64 = scores.detach().double()[None], labels.double()[None]
    expected = _autograd_diagonal(loss, s64, y64, None, "mean", {})
    torch.testing.assert_close(got, expected[0].float())
    half = diagonal(scores.detach().half(), labels)
    assert half.dtype == torch.float16 and torch.isfinite(half).all()


@pytest.mark.parametrize(("loss", "diagonal"), ALL, ids=["rank_net", "lambda_rank", "list_net"])
def test_the_closed_form_is_finite_at_extreme_scores(loss, diagonal):
    labels = torch.tensor([[2.0, 0.0, 1.0, 0.0]])
    for scale in (1e-30, 1e30, 3e38):
        scores = torch.tensor([[1.0, -1.0, 0.5, -0.5]]) * scale
        got = diagonal(scores, labels)
        assert torch.isfinite(got).all(), scale
    # a gap of 1e30: every pair is decided, no curvature left
    assert not diagonal(torch.tensor([[3e30, -1e30, 1e30, -3e30]]), labels).any()


@pytest.mark.parametrize("diagonal", [rank_net_hessian_diagonal, lambda_rank_hessian_diagonal,
                                      list_net_hessian_diagonal])
def test_the_closed_form_checks_its_arguments_as_the_loss_does(diagonal):
    if diagonal is not list_net_hessian_diagonal:
        with pytest.raises(SmoothrankError, match="sigma"):
            diagonal(torch.zeros(1, 3), torch.zeros(1, 3), sigma=-1.0)
    with pytest.raises(SmoothrankError, match="reduction"):
        diagonal(torch.zeros(1, 3), torch.zeros(1, 3), reduction="max")
    with pytest.raises(SmoothrankError, match="NaN"):
        diagonal(torch.tensor([[0.0, float("nan")]]), torch.zeros(1, 2))


def _long_lists() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    sizes = np.array([3, 40, 1, 17, 120, 9, 64])
    n = int(sizes.sum())
    return rng.normal(size=n), rng.integers(0, 5, size=n).astype(float), sizes


@pytest.mark.parametrize(("name", "options"), [("rank_net", {}), ("rank_net", {"sigma": 2.0, "k": 10}),
                                               ("lambda_rank", {}), ("lambda_rank", {"sigma": 2.0, "k": 10}),
                                               ("list_net", {})], ids=str)
@pytest.mark.parametrize("bound", [False, True], ids=["by-name", "bound"])
def test_boosting_uses_the_closed_form_and_gets_the_generic_diagonal(name, options, bound, monkeypatch):
    scores, labels, sizes = _long_lists()
    loss = losses.get(name, **options) if bound else name
    kwargs = {} if bound else options
    generic_calls = []
    real = boosting._diagonal_in_blocks

    def generic(*args, **kw):
        generic_calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(boosting, "_diagonal_in_blocks", generic)
    grad, hess = boosting.boosting_gradients(loss, scores, labels, sizes, hessian="diagonal", **kwargs)
    assert not generic_calls  # the closed form, not one backward pass per position
    monkeypatch.setattr(boosting, "_closed_form_diagonal", lambda fn: None)
    grad0, hess0 = boosting.boosting_gradients(loss, scores, labels, sizes, hessian="diagonal", **kwargs)
    assert generic_calls
    # The closed form's gradient comes from the compiled kernel (smoothrank.boosting_kernels), the
    # generic one's from autograd: equal to float64 round-off.
    np.testing.assert_allclose(grad, grad0, rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(hess, hess0, rtol=1e-12, atol=1e-15)


def test_the_registered_function_itself_uses_the_closed_form(monkeypatch):
    monkeypatch.setattr(boosting, "_diagonal_in_blocks", lambda *a, **k: pytest.fail("generic diagonal"))
    scores, labels, sizes = _long_lists()
    _, hess = boosting.boosting_gradients(losses.lambda_rank, scores, labels, sizes, hessian="diagonal")
    assert (hess > 0).any()
    # a loss of one's own still gets the generic diagonal
    with pytest.raises(pytest.fail.Exception, match="generic diagonal"):
        boosting.boosting_gradients(lambda s, y, **kw: losses.rank_net(s, y, **kw), scores, labels, sizes,
                                    hessian="diagonal")


def _dense_reference(scores: np.ndarray, labels: np.ndarray, sigma: float, lambda_rank: bool) -> np.ndarray:
    """Independent O(n^2) NumPy formula for one query, reduction "sum": sigma^2 sum_j w_ij rho (1 - rho)
    over the pairs of different labels (RankNet: w = 1 / #pairs; LambdaRank: |Delta NDCG|, exp2
    gains, log2 discounts at the current ranks, ties in input order)."""
    rho = 1.0 / (1.0 + np.exp(sigma * (scores[:, None] - scores[None, :])))
    differ = labels[:, None] != labels[None, :]
    if lambda_rank:
        gains = 2.0 ** labels - 1.0
        ranks = np.empty(len(scores))
        ranks[np.argsort(-scores, kind="stable")] = np.arange(1, len(scores) + 1)
        disc = 1.0 / np.log2(1.0 + ranks)
        ideal = (np.sort(gains)[::-1] / np.log2(2.0 + np.arange(len(scores)))).sum()
        w = np.abs(gains[:, None] - gains[None, :]) * np.abs(disc[:, None] - disc[None, :]) / ideal
    else:
        w = np.full(rho.shape, 1.0 / (differ.sum() / 2))
    return sigma**2 * np.where(differ, w * rho * (1 - rho), 0.0).sum(-1)


@pytest.mark.parametrize(("name", "diagonal"), [("rank_net", rank_net_hessian_diagonal),
                                                ("lambda_rank", lambda_rank_hessian_diagonal)])
def test_a_list_longer_than_one_block_matches_a_dense_formula(name, diagonal):
    # 1100^2 pairs exceed smoothrank._blocks.CHUNK_ELEMENTS: the pair matrices go a block of rows at a time
    rng = np.random.default_rng(2)
    scores, labels = rng.normal(size=1100), rng.integers(0, 3, size=1100).astype(float)
    got = diagonal(torch.tensor(scores)[None], torch.tensor(labels)[None], reduction="sum", sigma=1.5)
    np.testing.assert_allclose(got[0].numpy(), _dense_reference(scores, labels, 1.5, name == "lambda_rank"),
                               rtol=1e-10, atol=1e-16)


@pytest.mark.parametrize("name", ["rank_net", "lambda_rank"])
def test_a_huge_sigma_is_as_finite_as_autograds_diagonal(name, monkeypatch):
    # sigma^2 / #pairs is representable where sigma^2 is not: divided before, as the gradient is
    scores, labels, sizes = np.zeros(300), (np.arange(300) % 2).astype(float), [300]
    _, hess = boosting.boosting_gradients(name, scores, labels, sizes, hessian="diagonal", sigma=1e154)
    monkeypatch.setattr(boosting, "_closed_form_diagonal", lambda fn: None)
    _, expected = boosting.boosting_gradients(name, scores, labels, sizes, hessian="diagonal", sigma=1e154)
    assert np.isfinite(hess).all()
    np.testing.assert_allclose(hess, expected, rtol=1e-10)


def test_a_loss_of_ones_own_need_not_be_hashable():
    @dataclasses.dataclass  # eq=True: instances are unhashable
    class MyLoss:
        def __call__(self, s, y, *, mask=None, reduction="mean"):
            return losses.rank_net(s, y, mask=mask, reduction=reduction)

    scores, labels = np.array([0.3, -0.2, 1.0, 0.1]), np.array([1.0, 0.0, 2.0, 0.0])
    _, hess = boosting.boosting_gradients(MyLoss(), scores, labels, [4], hessian="diagonal")
    _, expected = boosting.boosting_gradients("rank_net", scores, labels, [4], hessian="diagonal")
    np.testing.assert_allclose(hess, expected, rtol=1e-12)
    boosting.lightgbm_objective(MyLoss(), hessian="diagonal")  # built, checked: no TypeError
