"""The soft_ndcg loss: definition, limits, registry, robustness and errors."""

from __future__ import annotations

import math

import pytest
import torch

import smoothrank.losses as losses
from smoothrank.errors import SmoothrankError
from smoothrank.gains import discount as discount_fn
from smoothrank.losses.softrank import soft_ndcg
from smoothrank.softrank import expected_ranks, shallow_discount, soft_rank
from smoothrank.softrank.rank_binomial import HAVE_NUMBA

F64 = torch.float64
METHODS = ["exact", "normal", "hybrid"]


def manual_soft_ndcg(scores: torch.Tensor, labels: torch.Tensor, sigma: float, k: int | None) -> torch.Tensor:
    """Eq. 15 written out from the rank distributions: sum_j g_j sum_r D(r+1) p_j(r) / IDCG@k."""
    n = scores.shape[-1]
    p = soft_rank(scores, sigma=sigma)
    d = 1.0 / torch.log2(torch.arange(n, dtype=F64) + 2.0)
    if k is not None:
        d[k:] = 0.0
    g = 2.0**labels - 1.0
    ideal = (torch.sort(g, descending=True).values * d).sum(-1)
    return (g[..., None] * p * d).sum((-1, -2)) / ideal


def test_registered_with_its_options() -> None:
    assert "soft_ndcg" in losses.available()
    opts = losses.options("soft_ndcg")
    assert opts["sigma"] == 1.0 and opts["k"] is None and opts["method"] == "exact"
    assert opts["sinkhorn"] is False and opts["gain"] == "exp2" and opts["discount"] == "log2"
    s, y = torch.randn(3, 6, dtype=F64), torch.randint(0, 3, (3, 6)).to(F64)
    bound = losses.get("soft_ndcg", sigma=0.5, k=3)
    torch.testing.assert_close(bound(s, y), soft_ndcg(s, y, sigma=0.5, k=3))


@pytest.mark.parametrize("k", [None, 1, 3])
def test_equals_the_expected_discount_formula(k: int | None) -> None:
    g = torch.Generator().manual_seed(2)
    scores = torch.randn(4, 7, generator=g, dtype=F64)
    labels = torch.randint(0, 4, (4, 7), generator=g).to(F64)
    labels[:, 0] = 2.0  # every query has a relevant document
    per_query = soft_ndcg(scores, labels, sigma=0.7, k=k, reduction="none")
    torch.testing.assert_close(per_query, -manual_soft_ndcg(scores, labels, 0.7, k), rtol=0, atol=1e-12)
    torch.testing.assert_close(soft_ndcg(scores, labels, sigma=0.7, k=k), per_query.mean())
    torch.testing.assert_close(soft_ndcg(scores, labels, sigma=0.7, k=k, reduction="sum"), per_query.sum())


def test_is_not_the_discount_of_the_expected_rank() -> None:
    """PITFALLS 9: E[D(r)] is used, not D(E[r]); the two differ (Jensen) on an uncertain ranking."""
    scores = torch.tensor([[0.0, 0.1, 0.2, 0.3]], dtype=F64)
    labels = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=F64)
    soft = -soft_ndcg(scores, labels, sigma=1.0)
    plug_in = 1.0 / torch.log2(expected_ranks(scores, sigma=1.0)[0, 0] + 2.0)  # ideal DCG is 1
    assert abs(float(soft) - float(plug_in)) > 0.02
    assert float(soft) > float(plug_in)  # D is convex in r, so E[D(r)] >= D(E[r])


@pytest.mark.parametrize("k", [None, 2, 5])
@pytest.mark.parametrize("method", ["exact", "hybrid"])
def test_small_sigma_limit_is_the_exact_ndcg(k: int | None, method: str) -> None:
    from smoothrank.metrics import ndcg

    g = torch.Generator().manual_seed(7)
    scores = torch.randperm(40, generator=g).reshape(5, 8).to(F64) * 0.1  # tie-free, gaps >= 0.1
    labels = torch.randint(0, 5, (5, 8), generator=g).to(F64)
    labels[:, 3] = 4.0
    mask = torch.rand(5, 8, generator=g) > 0.2
    mask[:, 3] = True
    loss = soft_ndcg(scores, labels, mask=mask, sigma=1e-3, k=k, method=method, n_exact=2, reduction="none")
    exact = ndcg(scores, labels, mask=mask, k=k, reduction="none")
    torch.testing.assert_close(-loss, exact.to(F64), rtol=0, atol=1e-10)
    # and a shallow training discount goes through the same path
    d = shallow_discount(0.0, 8)
    loss_d = soft_ndcg(scores, labels, mask=mask, sigma=1e-3, k=k, discount=d, reduction="none")
    exact_d = ndcg(scores, labels, mask=mask, k=k, discount=d, reduction="none")
    torch.testing.assert_close(-loss_d, exact_d.to(F64), rtol=0, atol=1e-10)


def test_large_sigma_limits() -> None:
    """pi -> 1/2: the Rank-Binomial becomes Binomial(n - 1, 1/2) (the pairwise approximation is not
    uniform); Sinkhorn scaling turns that common row into the uniform distribution of a random ranking."""
    scores = torch.tensor([[3.0, 1.0, 2.0]], dtype=F64)
    labels = torch.tensor([[0.0, 1.0, 0.0]], dtype=F64)
    d = discount_fn(torch.arange(1.0, 4.0, dtype=F64), "log2")
    binomial = float((torch.tensor([0.25, 0.5, 0.25], dtype=F64) * d).sum())
    assert float(-soft_ndcg(scores, labels, sigma=1e6)) == pytest.approx(binomial, abs=1e-6)
    uniform = float(d.mean())
    assert float(-soft_ndcg(scores, labels, sigma=1e6, sinkhorn=True)) == pytest.approx(uniform, abs=1e-6)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("sinkhorn", [False, True])
def test_gradcheck(method: str, sinkhorn: bool) -> None:
    scores = torch.randn(2, 6, dtype=F64, requires_grad=True)
    labels = torch.tensor([[0, 1, 2, 0, 1, 0], [3, 0, 0, 1, 0, 0]], dtype=F64)
    mask = torch.tensor([[True] * 6, [True, False, True, True, True, False]])
    torch.autograd.gradcheck(lambda s: soft_ndcg(s, labels, mask=mask, sigma=0.8, k=3, method=method,
                                                 n_exact=1, sinkhorn=sinkhorn, max_iter=5), (scores,))


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is a declared dependency; needed to compare kernels")
def test_backends_agree_on_loss_and_gradient() -> None:
    scores = torch.randn(6, 30, requires_grad=True)
    labels = torch.randint(0, 3, (6, 30)).float()
    mask = torch.rand(6, 30) > 0.2
    grads = []
    for backend in ("numba", "torch"):
        loss = soft_ndcg(scores, labels, mask=mask, k=10, backend=backend)
        (grad,) = torch.autograd.grad(loss, scores)
        grads.append((loss.detach(), grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=0, atol=1e-6)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=0, atol=1e-6)


def test_padding_anywhere_matches_the_unpadded_queries() -> None:
    g = torch.Generator().manual_seed(4)
    scores = torch.randn(3, 10, generator=g)
    labels = torch.randint(0, 3, (3, 10), generator=g).float()
    mask = torch.rand(3, 10, generator=g) > 0.4
    mask[:, 5] = True
    labels[:, 5] = 2.0
    junk_scores = torch.where(mask, scores, torch.full_like(scores, float("nan")))
    junk_labels = torch.where(mask, labels, torch.full_like(labels, -7.0))
    per_query = soft_ndcg(junk_scores, junk_labels, mask=mask, k=4, reduction="none")
    for b in range(3):
        alone = soft_ndcg(scores[b][mask[b]], labels[b][mask[b]], k=4, reduction="none")
        torch.testing.assert_close(per_query[b], alone[0], rtol=0, atol=1e-6)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("sigma", [1e-4, 1e-2, 1.0, 1e2])
def test_finite_on_degenerate_inputs(method: str, sigma: float) -> None:
    scores = torch.tensor([[0.0, 0.0, 0.0, 5e5, -5e5, 1.0],   # ties and huge gaps
                           [0.3, 0.0, 0.0, 0.0, 0.0, 0.0],    # a single real item
                           [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],    # no relevant document
                           [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]],   # fully padded
                          requires_grad=True)
    labels = torch.tensor([[1.0, 0.0, 2.0, 0.0, 1.0, 0.0], [2.0, 0, 0, 0, 0, 0], [0.0] * 6, [1.0] * 6])
    mask = torch.tensor([[True] * 6, [True] + [False] * 5, [True] * 6, [False] * 6])
    for sinkhorn in (False, True):
        for k in (None, 2):
            per_query = soft_ndcg(scores, labels, mask=mask, sigma=sigma, method=method, k=k,
                                  sinkhorn=sinkhorn, n_exact=1, reduction="none")
            values = per_query.detach()
            assert torch.isfinite(values).all()
            assert float(values[1]) == pytest.approx(-1.0)  # a single item is always first
            assert float(values[2]) == 0.0 and float(values[3]) == 0.0
            (grad,) = torch.autograd.grad(per_query.sum(), scores)
            assert torch.isfinite(grad).all() and float(grad[1:].abs().sum()) == 0.0


def test_batch_without_relevant_documents_still_backpropagates() -> None:
    """PITFALLS 3: a graph is kept even when every query is uninformative."""
    for reduction in ("mean", "sum", "none"):
        scores = torch.randn(2, 5, requires_grad=True)
        loss = soft_ndcg(scores, torch.zeros(2, 5), reduction=reduction)
        assert torch.all(loss.detach() == 0.0)
        loss.sum().backward()
        assert float(scores.grad.abs().sum()) == 0.0


def test_descent_improves_the_ranking() -> None:
    torch.manual_seed(0)
    scores = torch.randn(1, 12, requires_grad=True)
    labels = torch.tensor([[0, 0, 1, 0, 2, 0, 0, 3, 0, 1, 0, 0]], dtype=torch.float32)
    start = soft_ndcg(scores, labels, sigma=0.3, k=5).item()
    opt = torch.optim.SGD([scores], lr=1.0)
    for _ in range(60):
        opt.zero_grad()
        soft_ndcg(scores, labels, sigma=0.3, k=5).backward()
        opt.step()
    assert soft_ndcg(scores, labels, sigma=0.3, k=5).item() < start - 0.2


def test_errors_name_the_argument() -> None:
    s, y = torch.randn(2, 4), torch.ones(2, 4)
    cases = [({"sigma": -1.0}, "sigma"), ({"k": 0}, "k"), ({"method": "fast"}, "method"),
             ({"n_exact": 1.5}, "n_exact"), ({"reduction": "avg"}, "reduction"), ({"gain": "cubic"}, "gain"),
             ({"discount": "log10"}, "discount"), ({"backend": "gpu"}, "backend")]
    for options, name in cases:
        with pytest.raises(SmoothrankError, match=name):
            soft_ndcg(s, y, **options)
    with pytest.raises(SmoothrankError, match="scores"):
        soft_ndcg(torch.tensor([[0.0, math.inf]]), torch.ones(1, 2))
    with pytest.raises(SmoothrankError, match="labels"):
        soft_ndcg(s, torch.ones(2, 5))


def test_sinkhorn_on_a_long_list_with_underflowing_ranks_has_finite_gradients():
    # At n = 1000 in float32 the probabilities of extreme ranks underflow and whole rank columns
    # are zero; without the floor in sinkhorn_rank_matrix the scaling overflowed and gave NaN.
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(1, 1000, generator=gen).requires_grad_()
    labels = torch.randint(0, 5, (1, 1000), generator=gen).float()
    loss = losses.get("soft_ndcg", sinkhorn=True)(scores, labels)
    loss.backward()
    assert torch.isfinite(loss) and -1.0 <= loss.item() <= 0.0
    assert torch.isfinite(scores.grad).all() and scores.grad.abs().sum() > 0


def test_sinkhorn_on_a_long_list_computes_float32_as_float64() -> None:
    # Sinkhorn scales each rank column by up to the inverse of its mass, tiny at the extreme ranks of
    # a long list: in float32 it magnified the eps^2 floor and underflowed tails into a loss 3.2e-3
    # and gradients 94% away from float64's on these inputs (scaling review, 2026-11-24).
    g = torch.Generator().manual_seed(0)
    scores, labels = torch.randn(1, 300, generator=g), torch.randint(0, 5, (1, 300), generator=g).float()
    mask = torch.rand(1, 300, generator=g) > 0.3
    out = {}
    for dtype in (torch.float32, torch.float64):
        x = scores.to(dtype).detach().clone().requires_grad_()
        value = soft_ndcg(x, labels.to(dtype), mask=mask, sinkhorn=True)
        value.backward()
        out[dtype] = value.detach().double(), x.grad.double()
    (v32, g32), (v64, g64) = out[torch.float32], out[torch.float64]
    assert abs(v32 - v64).item() < 1e-6
    assert ((g32 - g64).abs().max() / g64.abs().max()).item() < 1e-5


@pytest.mark.parametrize("chunk", [1 << 20, 300, 5])  # whole queries; row blocks of one query
@pytest.mark.parametrize("k", [None, 3])
@pytest.mark.parametrize("method", ["normal", "hybrid"])
def test_normal_and_hybrid_soft_ndcg_are_expectations_of_their_distributions(
        chunk: int, k: int | None, method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """method="normal" takes E[D(r_j)] straight from the moments (summation by parts over the
    edges, never the (batch, n, R) distributions), "hybrid" the same plus the exact distributions of
    the end documents alone: each must equal sum_r D(r + 1) p_j(r) of soft_rank's distributions,
    value and gradient, for any blocking."""
    from smoothrank import _blocks

    monkeypatch.setattr(_blocks, "CHUNK_ELEMENTS", chunk)
    g = torch.Generator().manual_seed(21)
    scores = torch.randn(3, 30, generator=g, dtype=torch.float64) * 2
    labels = torch.randint(0, 4, (3, 30), generator=g).double()
    mask = torch.rand(3, 30, generator=g) > 0.3
    mask[2, 20:] = False
    for discount in ("log2", "linear"):
        x, ref = scores.clone().requires_grad_(), scores.clone().requires_grad_()
        got = soft_ndcg(x, labels, mask=mask, k=k, method=method, sigma=0.8, discount=discount,
                        n_exact=3, reduction="none")
        n_ranks = 30 if k is None else k
        p = soft_rank(ref, sigma=0.8, mask=mask, method=method, n_exact=3, max_rank=n_ranks)
        ranks = torch.arange(1.0, n_ranks + 1, dtype=torch.float64).expand(3, n_ranks)
        n_real = mask.sum(-1, keepdim=True).double()
        d = discount_fn(ranks, discount, list_size=n_real)
        d = torch.where(ranks <= (n_real if k is None else n_real.clamp(max=k)), d, torch.zeros_like(d))
        gains = torch.where(mask, 2 ** labels - 1, torch.zeros_like(labels))
        ideal = (gains.sort(-1, descending=True).values[:, :n_ranks] * d).sum(-1)
        want = -(gains * (p * d[:, None, :]).sum(-1)).sum(-1) / ideal
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
        weights = torch.arange(1.0, 4.0, dtype=torch.float64)
        (got * weights).sum().backward()
        (want * weights).sum().backward()
        torch.testing.assert_close(x.grad, ref.grad, rtol=1e-10, atol=1e-13)
    x = scores[:2, :8].clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda s: soft_ndcg(s, labels[:2, :8], k=k, method=method, n_exact=2, reduction="none"), (x,))
