"""Losses: exactness limits, padding invariance, gradients, the registry and the known pitfalls."""

from __future__ import annotations

import functools
import itertools
import math
import random

import numpy as np
import pytest
import torch
from reference_neuralndcg import naive_neural_ndcg, naive_sinkhorn
from torch.utils._python_dispatch import TorchDispatchMode

from smoothrank import losses, sorting
from smoothrank.errors import ConfigError, SmoothrankError
from smoothrank.metrics import ndcg as exact_ndcg

F64 = torch.float64
# SoftNDCG has its own file, tests/test_losses_softrank.py.
NAMES = [name for name in losses.available() if name != "soft_ndcg"]


def tie_free_scores(b: int, n: int, seed: int, dtype=F64) -> torch.Tensor:
    """A random permutation of a grid with gaps >= 0.5 (plus jitter): no near-ties."""
    g = torch.Generator().manual_seed(seed)
    base = torch.stack([torch.randperm(n, generator=g) for _ in range(b)]).to(dtype)
    return base + 0.4 * torch.rand(b, n, generator=g, dtype=dtype)


def random_labels(b: int, n: int, seed: int, levels: int = 5, dtype=F64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, levels, (b, n), generator=g).to(dtype)
    y[:, 0] = torch.clamp(y[:, 0], min=1)  # every query has a relevant document
    return y


def reference_ndcg(scores, labels, mask, k, gain="exp2") -> torch.Tensor:
    """Brute-force NDCG@k per query with log2 discounts (independent of the package)."""
    out = []
    for s, y, m in zip(scores, labels, mask, strict=True):
        s, y = s[m].tolist(), y[m].tolist()
        g = (lambda v: 2.0 ** v - 1.0) if gain == "exp2" else (lambda v: v)
        order = sorted(range(len(s)), key=lambda i: -s[i])
        kk = len(s) if k is None else min(k, len(s))
        dcg = sum(g(y[order[r]]) / math.log2(r + 2) for r in range(kk))
        ideal = sum(g(v) / math.log2(r + 2) for r, v in enumerate(sorted(y, reverse=True)[:kk]))
        out.append(dcg / ideal)
    return torch.tensor(out, dtype=F64)


def pad(x: torch.Tensor, where: str, fill: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = x.shape[-1]
    positions = {"front": [0, 1], "middle": [2, 4], "end": [n, n + 1]}[where]
    mask = torch.ones(n + 2, dtype=torch.bool)
    mask[positions] = False
    idx = torch.nonzero(mask).squeeze(-1)
    out = torch.full((x.shape[0], n + 2), fill, dtype=x.dtype)
    out[:, idx] = x
    return out, mask.expand(x.shape[0], n + 2).clone(), idx


# ----------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("name", ["neural_ndcg", "neural_ndcg_transposed"])
@pytest.mark.parametrize("k", [None, 1, 3, 5])
def test_neural_ndcg_tends_to_exact_ndcg(name: str, k: int | None) -> None:
    s = tie_free_scores(4, 8, seed=0)
    y = random_labels(4, 8, seed=1)
    mask = torch.ones_like(s, dtype=torch.bool)
    mask[2, [1, 5]] = False
    ref = reference_ndcg(s, y, mask, k)
    metric = exact_ndcg(s, y, mask=mask, k=k, reduction="none")
    torch.testing.assert_close(metric.to(F64), ref)  # the package's metric agrees with brute force
    for sinkhorn in (True, False):
        got = -losses.get(name, temperature=1e-3, k=k, sinkhorn=sinkhorn)(s, y, mask=mask, reduction="none")
        assert (got - ref).abs().max() < 1e-6


def test_neural_ndcg_values_match_the_formula_at_moderate_temperature() -> None:
    """Equation 5 written out with the dense naive Sinkhorn, at equal iteration counts (float32)."""
    torch.manual_seed(0)
    s, y = torch.randn(6, 40), torch.randint(0, 5, (6, 40)).float()
    mask = torch.rand(6, 40) > 0.2
    p = sorting.neural_sort(s, mask=mask, temperature=1.0)
    rows = sorting.rank_mask(mask)
    for k in (None, 5):
        g = torch.where(mask, 2.0 ** y - 1, torch.zeros_like(y))
        d = 1 / torch.log2(torch.arange(2, 42).float())
        d = torch.where(rows, d, 0.0)
        if k is not None:
            d[:, k:] = 0
        ideal = (torch.sort(g, descending=True).values * d).sum(-1)
        eq5 = -((naive_sinkhorn(p, rows, mask, 12) @ g.unsqueeze(-1)).squeeze(-1) * d).sum(-1) / ideal
        eq6 = -(g * (naive_sinkhorn(p.transpose(1, 2), mask, rows, 12) @ d.unsqueeze(-1)).squeeze(-1)).sum(-1)
        eq6 = eq6 / ideal
        opts = dict(k=k, max_iter=12, tol=0.0, reduction="none")
        got5 = losses.neural_ndcg(s, y, mask=mask, **opts)
        got6 = losses.neural_ndcg_transposed(s, y, mask=mask, **opts)
        assert ((got5 - eq5).abs() / eq5.abs()).max() < 1e-4
        assert ((got6 - eq6).abs() / eq6.abs()).max() < 1e-4


@pytest.mark.parametrize("transposed", [False, True])
def test_neural_ndcg_equals_unrolled_reference_float32(transposed: bool) -> None:
    """Same value and gradient as autograd through 30 dense iterations (rel. diff < 1e-4)."""
    torch.manual_seed(2)
    s, y = torch.randn(8, 60), torch.randint(0, 5, (8, 60)).float()
    y[:, 0] = 3
    s1, s2 = s.clone().requires_grad_(), s.clone().requires_grad_()
    fn = losses.neural_ndcg_transposed if transposed else losses.neural_ndcg
    got = fn(s1, y, max_iter=30, tol=0.0)
    ref = naive_neural_ndcg(s2, y, n_iter=30, transposed=transposed)
    got.backward()
    ref.backward()
    assert abs(got.item() - ref.item()) / abs(ref.item()) < 1e-4
    assert (s1.grad - s2.grad).norm() / s2.grad.norm() < 1e-4


def test_neural_ndcg_and_transposed_converge_to_one_loss_on_the_whole_list() -> None:
    """Without a cutoff both are g^T P d of one doubly stochastic P: they differ only by Sinkhorn's
    stopping point, so they agree as Sinkhorn converges (and exactly at tied scores)."""
    torch.manual_seed(0)
    s = torch.randn(8, 20, dtype=F64)
    y = torch.randint(0, 5, (8, 20)).to(F64)
    mask = torch.arange(20)[None] < torch.randint(5, 21, (8, 1))

    def value_and_grad(name: str, at: torch.Tensor, **opts: float) -> tuple[torch.Tensor, torch.Tensor]:
        x = at.clone().requires_grad_(True)
        v = losses.get(name, **opts)(x, y, mask=mask, reduction="none")
        (g,) = torch.autograd.grad(v.sum(), x)
        return v.detach(), g

    gaps = []
    for max_iter in (30, 300):
        v1, g1 = value_and_grad("neural_ndcg", s, max_iter=max_iter, tol=1e-12)
        v2, g2 = value_and_grad("neural_ndcg_transposed", s, max_iter=max_iter, tol=1e-12)
        gaps.append(((v1 - v2).abs().max().item(), (g1 - g2).abs().max().item()))
    assert gaps[1][0] < 1e-10 and gaps[1][1] < 1e-9
    assert gaps[0][0] > 10 * gaps[1][0]  # the default 30 iterations leave a visible gap
    v1, g1 = value_and_grad("neural_ndcg", torch.zeros_like(s))
    v2, g2 = value_and_grad("neural_ndcg_transposed", torch.zeros_like(s))
    torch.testing.assert_close(v1, v2, rtol=0, atol=1e-12)
    torch.testing.assert_close(g1, g2, rtol=0, atol=1e-12)


def test_transposed_linear_gain_is_normalised_with_the_same_gain() -> None:
    """PITFALL 2: NeuralNDCG^T with linear gains divided by the exp2 ideal DCG."""
    s = torch.tensor([[3.0, 2.0, 1.0, 0.0]], dtype=F64)
    y = torch.tensor([[3.0, 2.0, 0.0, 1.0]], dtype=F64)
    mask = torch.ones_like(s, dtype=torch.bool)
    for name in ("neural_ndcg", "neural_ndcg_transposed"):
        got = -losses.get(name, temperature=1e-3, gain="linear")(s, y, reduction="none")
        torch.testing.assert_close(got, reference_ndcg(s, y, mask, None, gain="linear"))


def test_stochastic_neural_ndcg_mixed_padding() -> None:
    """PITFALL 1: each sample of query b must use query b's mask (sample-major layout)."""
    s = torch.tensor([[5.0, 1.0, 3.0, 0.0], [0.0, 4.0, 2.0, 9.0], [7.0, 6.0, 0.0, 0.0]], dtype=F64)
    y = torch.tensor([[2.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 2.0], [1.0, 0.0, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[True, True, True, True], [False, True, True, True], [True, True, False, False]])
    ref = reference_ndcg(s, y, mask, None)
    for name in ("neural_ndcg", "neural_ndcg_transposed"):
        # Huge beta: the Gumbel noise is negligible, so every sample sorts like the scores.
        fn = losses.get(name, stochastic=True, n_samples=3, beta=1e4, temperature=1e-2,
                        generator=torch.Generator().manual_seed(0))
        torch.testing.assert_close(-fn(s, y, mask=mask, reduction="none"), ref)
    # A moderate beta gives a genuine Monte Carlo average, still finite and differentiable.
    s2 = s.clone().requires_grad_()
    losses.neural_ndcg(s2, y, mask=mask, stochastic=True, n_samples=8,
                       generator=torch.Generator().manual_seed(1)).backward()
    assert torch.isfinite(s2.grad).all() and torch.all(s2.grad[~mask] == 0)


def test_approx_ndcg_tends_to_exact_ndcg_at_large_alpha() -> None:
    s, y = tie_free_scores(3, 7, seed=4), random_labels(3, 7, seed=5)
    mask = torch.ones_like(s, dtype=torch.bool)
    got = -losses.approx_ndcg(s, y, alpha=200.0, reduction="none")
    torch.testing.assert_close(got, reference_ndcg(s, y, mask, None))


def test_list_net_and_rmse_formulas() -> None:
    s = torch.tensor([[1.0, -2.0, 0.5]], dtype=F64)
    y = torch.tensor([[2.0, 0.0, 1.0]], dtype=F64)
    py, ps = torch.softmax(y, -1), torch.softmax(s, -1)
    torch.testing.assert_close(losses.list_net(s, y), -(py * ps.log()).sum())
    want = torch.sqrt(((5 * torch.sigmoid(s) - y) ** 2).mean())
    torch.testing.assert_close(losses.rmse(s, y), want)
    want3 = torch.sqrt(((3 * torch.sigmoid(s) - y) ** 2).mean())
    torch.testing.assert_close(losses.rmse(s, y, n_levels=3), want3)


def test_list_mle_is_the_plackett_luce_likelihood_with_random_tie_breaks() -> None:
    s = torch.tensor([[0.3, -1.0, 2.0, 0.7]], dtype=F64)
    y = torch.tensor([[1.0, 0.0, 1.0, 2.0]], dtype=F64)  # order: item 3, then {0, 2} in random order, then 1

    def nll(perm):
        e = [math.exp(s[0, i].item()) for i in perm]
        return -sum(math.log(e[r] / sum(e[r:])) for r in range(len(perm)))

    candidates = {nll([3, 0, 2, 1]), nll([3, 2, 0, 1])}
    seen = set()
    gen = torch.Generator().manual_seed(0)
    for _ in range(30):
        v = losses.list_mle(s, y, generator=gen).item()
        assert min(abs(v - c) for c in candidates) < 1e-12
        seen.add(round(v, 9))
    assert len(seen) == 2  # both tie-breaks occur
    a = losses.list_mle(s, y, generator=7).item()
    assert a == losses.list_mle(s, y, generator=7).item()  # an int seed is reproducible


def test_rank_net_matches_pairwise_formula() -> None:
    s = torch.tensor([[0.2, 1.5, -0.3, 0.9]], dtype=F64)
    y = torch.tensor([[1.0, 0.0, 2.0, 1.0]], dtype=F64)
    costs = [math.log1p(math.exp(-2.0 * (s[0, i] - s[0, j]).item()))
             for i, j in itertools.permutations(range(4), 2) if y[0, i] > y[0, j]]
    torch.testing.assert_close(losses.rank_net(s, y, sigma=2.0).item(), sum(costs) / len(costs))


def test_lambda_rank_gradient_equals_closed_form_lambdas() -> None:
    """The note's lambdas: lambda_ij = -sigma |dNDCG_ij| / (1 + exp(sigma (s_i - s_j))), y_i > y_j."""
    s = torch.tensor([[0.5, 2.0, -1.0, 0.1, 1.2]], dtype=F64, requires_grad=True)
    y = torch.tensor([[2.0, 0.0, 1.0, 0.0, 3.0]], dtype=F64)
    sigma = 1.5
    for k in (None, 2):
        scores = s[0].tolist()
        labels = y[0].tolist()
        order = sorted(range(5), key=lambda i: -scores[i])
        rank = {item: r + 1 for r, item in enumerate(order)}
        kk = 5 if k is None else k

        def d(r, kk=kk):
            return 1 / math.log2(1 + r) if r <= kk else 0.0

        ideal = sum((2 ** v - 1) * d(r + 1) for r, v in enumerate(sorted(labels, reverse=True)))
        lam = [0.0] * 5
        for i, j in itertools.permutations(range(5), 2):
            if labels[i] > labels[j]:
                delta = abs((2 ** labels[i] - 2 ** labels[j]) * (d(rank[i]) - d(rank[j]))) / ideal
                l_ij = -sigma * delta / (1 + math.exp(sigma * (scores[i] - scores[j])))
                lam[i] += l_ij
                lam[j] -= l_ij
        (grad,) = torch.autograd.grad(losses.lambda_rank(s, y, sigma=sigma, k=k, reduction="sum"), s)
        torch.testing.assert_close(grad[0], torch.tensor(lam, dtype=F64))


def _pairwise_reference(scores: list[float], labels: list[float], k: int | None, lambdas: bool) -> float:
    """RankNet's mean pair cost over the pairs with an item in the top k, or LambdaRank's |dNDCG@k|-weighted
    sum, written from the docstrings' formulas; ranks break ties by input order."""
    n = len(scores)
    order = sorted(range(n), key=lambda i: (-scores[i], i))
    rank = {item: r + 1 for r, item in enumerate(order)}
    kk = n if k is None else min(k, n)

    def d(r: int) -> float:
        return 1 / math.log2(1 + r) if r <= kk else 0.0

    ideal = sum((2 ** v - 1) * d(r + 1) for r, v in enumerate(sorted(labels, reverse=True)))
    costs, weights = [], []
    for i, j in itertools.permutations(range(n), 2):
        if labels[i] > labels[j]:
            cost = math.log1p(math.exp(-(scores[i] - scores[j])))
            if lambdas:
                weights.append(abs((2 ** labels[i] - 2 ** labels[j]) * (d(rank[i]) - d(rank[j]))) / ideal)
                costs.append(cost)
            elif k is None or rank[i] <= k or rank[j] <= k:
                weights.append(1.0)
                costs.append(cost)
    total = sum(w * c for w, c in zip(weights, costs, strict=True))
    return total if lambdas else total / len(costs)


@pytest.mark.parametrize("k", [None, 1, 2, 3])
def test_pairwise_losses_rank_tied_scores_in_input_order(k: int | None) -> None:
    # Which of two tied items is in the top k decides the pairs (RankNet@k) and the |dNDCG| weights
    # (LambdaRank): ties go by input order, as documented. By hand for k=1: s=[1, 1, 0],
    # y=[0, 2, 1] keeps the pairs of item 0, RankNet (ln 2 + softplus(1)) / 2.
    s, y = torch.tensor([[1.0, 1.0, 0.0]], dtype=F64), torch.tensor([[0.0, 2.0, 1.0]], dtype=F64)
    if k == 1:
        assert losses.rank_net(s, y, k=1).item() == pytest.approx((math.log(2) + math.log1p(math.e)) / 2)
    rng = random.Random(k or 0)
    for _ in range(20):
        n = rng.randint(2, 6)
        scores = [rng.choice([0.0, 0.5, 1.0]) for _ in range(n)]  # many ties
        labels = [float(rng.randint(0, 2)) for _ in range(n)]
        if max(labels) == min(labels):
            continue
        st, yt = torch.tensor([scores], dtype=F64), torch.tensor([labels], dtype=F64)
        for fn, lambdas in ((losses.rank_net, False), (losses.lambda_rank, True)):
            want = _pairwise_reference(scores, labels, k, lambdas)
            assert fn(st, yt, k=k).item() == pytest.approx(want, abs=1e-12), (fn.__name__, scores, labels)


@pytest.mark.parametrize(("chunk", "keep"),
                         [(1 << 20, 1 << 23), (1 << 20, 0), (600, 1 << 23), (50, 0), (1, 0)])
def test_pair_matrix_losses_do_not_depend_on_their_blocks(monkeypatch, chunk: int, keep: int) -> None:
    """RankNet, LambdaRank and ApproxNDCG form their pair matrices a block of queries (or of one
    query's rows) at a time and keep the forward pass's matrix only for small batches: every
    blocking gives the docstrings' values (brute force over the real items) and gradients
    (autograd through the dense formula, finite differences)."""
    from smoothrank import _blocks

    monkeypatch.setattr(_blocks, "CHUNK_ELEMENTS", chunk)  # 600: a query a block; 50, 1: rows
    monkeypatch.setattr(_blocks, "KEEP_ELEMENTS", keep)
    b, n = 3, 23
    s, y = tie_free_scores(b, n, seed=5) / 4, random_labels(b, n, seed=6, levels=3)
    mask = torch.ones(b, n, dtype=torch.bool)
    mask[1, 15:] = False
    mask[2, ::3] = False
    y[2, 1] = 2.0  # a relevant real item in the third query
    for k in (None, 4):
        for fn, lambdas in ((losses.rank_net, False), (losses.lambda_rank, True)):
            got = fn(s, y, mask=mask, k=k, reduction="none")
            want = [_pairwise_reference(s[q][mask[q]].tolist(), y[q][mask[q]].tolist(), k, lambdas)
                    for q in range(b)]
            torch.testing.assert_close(got, torch.tensor(want, dtype=F64), rtol=1e-12, atol=1e-12)
            x = s.clone().requires_grad_()
            assert torch.autograd.gradcheck(lambda x, fn=fn, k=k: fn(x, y, mask=mask, k=k, reduction="none"),
                                            (x,))
    # ApproxNDCG's approximate ranks, against autograd through the dense formula of its docstring.
    x, ref = s.clone().requires_grad_(), s.clone().requires_grad_()
    got = losses.approx_ndcg(x, y, mask=mask, alpha=2.0, reduction="none")
    want = []
    for q in range(b):
        sq, yq = ref[q][mask[q]], y[q][mask[q]]
        pi = 0.5 + torch.sigmoid(2.0 * (sq.unsqueeze(0) - sq.unsqueeze(1))).sum(1)
        ranks = torch.arange(2.0, len(yq) + 2, dtype=F64)
        ideal = ((2 ** yq.sort(descending=True).values - 1) / torch.log2(ranks)).sum()
        want.append(-((2 ** yq - 1) / torch.log2(1 + pi)).sum() / ideal)
    torch.testing.assert_close(got, torch.stack(want), rtol=1e-12, atol=1e-12)
    (got * torch.arange(1.0, b + 1)).sum().backward()
    (torch.stack(want) * torch.arange(1.0, b + 1)).sum().backward()
    torch.testing.assert_close(x.grad, ref.grad, rtol=1e-10, atol=1e-12)
    x = x.detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: losses.approx_ndcg(x, y, mask=mask, reduction="none"), (x,))


@pytest.mark.parametrize("name", ["rank_net", "lambda_rank", "approx_ndcg"])
def test_pair_matrix_losses_keep_memory_linear_in_the_list_for_backward(name: str) -> None:
    """Only O(batch n) tensors are saved for the backward pass of a long list (dense (batch, n, n)
    weights took 3.3 GiB at 2 x 10000); short lists may keep their weights, at most KEEP_ELEMENTS."""
    from smoothrank import _blocks

    def saved_entries(b: int, n: int) -> int:
        sizes: list[int] = []
        s = torch.randn(b, n, requires_grad=True)
        y = torch.randint(0, 3, (b, n)).float()
        with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t, lambda t: t):
            loss = getattr(losses, name)(s, y, **({} if name == "approx_ndcg" else {"k": 10}))
        loss.backward()
        assert torch.isfinite(s.grad).all()
        return sum(sizes)

    assert saved_entries(2, 1500) <= 10 * 2 * 1500
    assert saved_entries(64, 30) <= _blocks.KEEP_ELEMENTS + 10 * 64 * 30


class _LargestAllocation(TorchDispatchMode):
    """Records the largest storage (bytes) that any operation returns, views counted at their base."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


@pytest.mark.parametrize(("name", "options"), [("rank_net", {"k": 10}), ("lambda_rank", {}),
                                               ("approx_ndcg", {}), ("soft_ndcg", {"method": "normal"}),
                                               ("soft_ndcg", {"method": "hybrid"})])
def test_long_lists_never_allocate_a_list_by_list_matrix(name: str, options: dict) -> None:
    """At 1 x 3000 a (n, n) float32 matrix is 36 MB; the pair-matrix losses and SoftNDCG's normal
    approximation and hybrid over all ranks work in blocks of about CHUNK_ELEMENTS entries, forward
    and backward, so nothing they allocate is more than a block (peak memory without a timing test)."""
    from smoothrank import _blocks

    n = 3000
    g = torch.Generator().manual_seed(3)
    s = torch.randn(1, n, generator=g).requires_grad_()
    y = torch.randint(0, 5, (1, n), generator=g).float()
    with _LargestAllocation() as watch:
        getattr(losses, name)(s, y, **options).backward()
    assert torch.isfinite(s.grad).all() and s.grad.abs().sum() > 0
    assert watch.largest <= 2 * 4 * _blocks.CHUNK_ELEMENTS < 4 * n * n


def test_soft_ndcg_at_k_of_a_long_list_never_allocates_a_list_by_list_matrix() -> None:
    """SoftNDCG@10 by the exact recursion forms a long list's contests a block of documents'
    columns at a time (at least one SIMD block of the kernels per thread), forward and backward."""
    from smoothrank.softrank import rank_binomial

    n = 3000
    g = torch.Generator().manual_seed(4)
    s = torch.randn(1, n, generator=g).requires_grad_()
    y = torch.randint(0, 5, (1, n), generator=g).float()
    width = max(c.stop - c.start for _, c in rank_binomial._column_blocks(1, n))
    with _LargestAllocation() as watch:
        losses.soft_ndcg(s, y, k=10, method="exact").backward()
    assert torch.isfinite(s.grad).all() and s.grad.abs().sum() > 0
    assert watch.largest <= 4 * n * width and 2 * width <= n


@pytest.mark.parametrize("name", ["rank_net", "lambda_rank", "approx_ndcg"])
def test_pair_matrix_losses_take_a_batch_of_no_query(name: str) -> None:
    """A (0, n) batch has no block: 0 and an empty gradient, as before the blocks (the kept matrix
    was torch.cat of no block, a ValueError)."""
    x = torch.zeros(0, 4, dtype=F64, requires_grad=True)
    for reduction in ("mean", "sum", "none"):
        value = getattr(losses, name)(x, torch.zeros(0, 4), reduction=reduction)
        assert value.shape == ((0,) if reduction == "none" else ())
        (grad,) = torch.autograd.grad(value.sum(), x)
        assert grad.shape == (0, 4)


# ----------------------------------------------------------------------------- padding, gradients
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("where", ["front", "middle", "end"])
def test_padding_position_does_not_change_loss_or_gradients(name: str, where: str) -> None:
    """PITFALL 4 (and 14: padding is a mask, never a sentinel label)."""
    s = torch.randn(3, 6, dtype=F64)
    y = torch.tensor([[2.0, 0, 1, 0, 3, 4], [1, 0, 0, 0, 0, 0], [0, 1, 2, 3, 4, 5]], dtype=F64)
    opts = {"k": 3} if name in ("neural_ndcg", "neural_ndcg_transposed", "rank_net", "lambda_rank") else {}
    if name == "list_mle":
        # Random tie-breaks come from one (batch, list_size) draw, which the padding widens (other
        # rows get other draws), so compare on tie-free labels; padding moved within the same
        # width is test_randomized_losses_draw_the_same_noise_wherever_the_padding_sits.
        y = torch.tensor([[2.0, 0, 1, 5, 3, 4], [1, 0, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5]], dtype=F64)
    fn = losses.get(name, **opts)
    s_ref = s.clone().requires_grad_()
    ref = fn(s_ref, y, reduction="none")
    (g_ref,) = torch.autograd.grad(ref.sum(), s_ref)
    padded_s, mask, idx = pad(s, where, fill=float("nan"))
    padded_y, _, _ = pad(y, where, fill=-1.0)
    sp = padded_s.clone().requires_grad_()
    got = fn(sp, padded_y, mask=mask, reduction="none")
    (g,) = torch.autograd.grad(got.sum(), sp)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(g[:, idx], g_ref)
    assert torch.all(g[~mask] == 0)


RANDOMIZED = {"list_mle": {}, "neural_ndcg": {"stochastic": True, "n_samples": 4, "temperature": 0.3},
              "neural_ndcg_transposed": {"stochastic": True, "n_samples": 4, "temperature": 0.3}}
# Ties within every row: list_mle's random tie-breaks decide its value.
TIED_LABELS = torch.tensor([[2.0, 0, 1, 0, 1, 0, 1], [1, 1, 1, 0, 0, 0, 0], [0, 0, 2, 2, 1, 1, 0]], dtype=F64)


def _randomized_loss(name: str, where: str, seeded: bool, dtype=F64):
    """Loss per query and gradient of the real items (in their order) of a randomized loss, on
    TIED_LABELS padded by two items at ``where``, with the generator or the global RNG seeded."""
    s = torch.randn(3, 7, generator=torch.Generator().manual_seed(21), dtype=F64)
    sp, mask, idx = pad(s, where, fill=float("nan"))
    yp, _, _ = pad(TIED_LABELS, where, fill=-1.0)
    x = sp.to(dtype).requires_grad_()
    fn = getattr(losses, name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        gen = torch.Generator().manual_seed(5) if seeded else None
        value = fn(x, yp.to(dtype), mask=mask, reduction="none", generator=gen, **RANDOMIZED[name])
    (grad,) = torch.autograd.grad(value.sum(), x)
    assert torch.all(grad[~mask] == 0)
    return value.detach(), grad[:, idx]


@pytest.mark.parametrize("name", sorted(RANDOMIZED))
@pytest.mark.parametrize("seeded", [True, False])
@pytest.mark.parametrize("where", ["front", "middle"])
def test_randomized_losses_draw_the_same_noise_wherever_the_padding_sits(name: str, seeded: bool,
                                                                        where: str) -> None:
    """A real item's random draw (ListMLE's tie-break, the Gumbel noise of stochastic NeuralNDCG)
    depends on its index among its row's real items and on the generator, not on the padding:
    padding at the front or in the middle gives the loss and gradients of padding at the end
    (before, the draw of position j went to the item at position j: ListMLE's first row gave 8.61
    with the padding at the front and 5.91 in the middle instead of 8.88). ListMLE is bit for bit
    the same; NeuralSort rounds differently when the real items sit at other positions."""
    for dtype in (torch.float32, F64):
        want, want_grad = _randomized_loss(name, "end", seeded, dtype)
        got, grad = _randomized_loss(name, where, seeded, dtype)
        if name == "list_mle":
            assert torch.equal(got, want) and torch.equal(grad, want_grad), (got, want)
        else:
            tol = 1e-6 if dtype == torch.float32 else 1e-12
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)
            torch.testing.assert_close(grad, want_grad, rtol=tol, atol=tol)


# Values of the code before the padding-invariant draws, padding at the end: published training
# runs (real items first) must keep their random draws.
END_PADDING_VALUES = {
    "list_mle": [8.880720317956875, 7.4070331084849235, 11.19781820405766],
    "neural_ndcg": [-0.895364155348803, -0.7565382167358594, -0.5985807584173181],
    "neural_ndcg_transposed": [-0.8950074250875582, -0.756605128942863, -0.5985318643080104],
}


@pytest.mark.parametrize("name", sorted(RANDOMIZED))
def test_randomized_losses_keep_their_draws_with_the_padding_at_the_end(name: str) -> None:
    got, _ = _randomized_loss(name, "end", seeded=True)
    torch.testing.assert_close(got, torch.tensor(END_PADDING_VALUES[name], dtype=F64), rtol=1e-12, atol=1e-12)


def _gradcheck_options(name: str) -> list[dict]:
    if name in ("neural_ndcg", "neural_ndcg_transposed"):
        return [dict(temperature=0.7, max_iter=5, tol=0.0), dict(temperature=2.0, k=3, sinkhorn=False),
                dict(temperature=1.0, k=2, max_iter=4, tol=0.0, gain="linear")]
    if name in ("rank_net", "lambda_rank"):
        return [{}, {"k": 2}]
    if name == "approx_ndcg":
        return [{"alpha": 2.0}]
    return [{}]


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck_float64_with_masks(name: str) -> None:
    torch.manual_seed(0)
    s = tie_free_scores(3, 6, seed=3) * 0.3
    y = random_labels(3, 6, seed=2, levels=3)
    mask = torch.tensor([[True] * 6, [True, False, True, True, False, True],
                         [False, True, True, True, True, True]])
    for opts in _gradcheck_options(name):
        fn = losses.get(name, **opts)
        if name == "list_mle":  # the same tie-break at every call: a fresh seeded generator
            fn = functools.partial(losses.list_mle, generator=3)
        x = s.clone().requires_grad_()
        assert torch.autograd.gradcheck(lambda x, fn=fn: fn(x, y, mask=mask, reduction="none"), (x,))
    if name in ("neural_ndcg", "neural_ndcg_transposed"):
        x = s.clone().requires_grad_()

        def stochastic(x):
            return losses.get(name, stochastic=True, n_samples=2, max_iter=3, tol=0.0,
                              generator=torch.Generator().manual_seed(5))(x, y, mask=mask)

        assert torch.autograd.gradcheck(stochastic, (x,))


# ----------------------------------------------------------------------------- empty queries, pitfalls
@pytest.mark.parametrize("name", NAMES)
def test_all_empty_batch_has_a_graph_and_zero_gradient(name: str) -> None:
    """PITFALL 3: a batch of queries without relevant documents (and fully padded rows)."""
    s = torch.randn(3, 5, requires_grad=True)
    y = torch.zeros(3, 5)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[2] = False
    for reduction in ("mean", "sum", "none"):
        loss = losses.get(name)(s, y, mask=mask, reduction=reduction)
        assert torch.all(loss == 0)
        loss.sum().backward()
        assert torch.all(s.grad == 0)
        s.grad = None


@pytest.mark.parametrize("name", NAMES)
def test_mean_ignores_empty_queries(name: str) -> None:
    s = torch.randn(3, 5, dtype=F64)
    y = torch.tensor([[0.0, 1, 2, 0, 1], [0, 0, 0, 0, 0], [1, 0, 0, 0, 2]], dtype=F64)
    mask = torch.ones(3, 5, dtype=torch.bool)
    fn = functools.partial(losses.list_mle, generator=0) if name == "list_mle" else losses.get(name)
    per_query = fn(s, y, mask=mask, reduction="none")
    assert per_query[1] == 0
    torch.testing.assert_close(fn(s, y, mask=mask), (per_query[0] + per_query[2]) / 2)
    torch.testing.assert_close(fn(s, y, mask=mask, reduction="sum"), per_query.sum())


@pytest.mark.parametrize("name", ["rank_net", "list_net", "list_mle", "rmse"])
def test_negative_labels_without_a_relevant_document_are_an_empty_query(name: str) -> None:
    # The losses that take labels as they are: a query whose labels are all <= 0 has no relevant
    # document, so it contributes 0 and is not counted by "mean" (rank_net once scored it).
    s = torch.tensor([[0.3, 0.1, 0.2], [0.5, 0.2, 0.9]], dtype=F64, requires_grad=True)
    y = torch.tensor([[0.0, -1.0, -2.0], [1.0, 0.0, -1.0]], dtype=F64)
    per_query = losses.get(name)(s, y, reduction="none")
    assert per_query[0] == 0 and per_query[1] != 0
    losses.get(name)(s, y).backward()
    assert torch.all(s.grad[0] == 0)
    torch.testing.assert_close(losses.get(name)(s, y), per_query[1])


@pytest.mark.parametrize("name", ["rank_net", "lambda_rank"])
def test_truncated_pairwise_gives_gradient_to_relevant_doc_at_rank_k_plus_1(name: str) -> None:
    """PITFALL 6: pairs with one item in the top k count; zero pairs give 0, not NaN."""
    k = 2
    s = torch.tensor([[3.0, 2.0, 1.0, 0.0]], requires_grad=True)
    y = torch.tensor([[0.0, 0.0, 1.0, 0.0]])  # the only relevant document sits at rank 3 = k + 1
    loss = losses.get(name, k=k)(s, y)
    (g,) = torch.autograd.grad(loss, s)
    assert g[0, 2] < 0  # pushed up
    # No pair with an item in the top k and different labels: loss 0, finite zero gradient.
    s2 = torch.tensor([[3.0, 2.0, 1.0, 0.0]], requires_grad=True)
    y2 = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    loss2 = losses.get(name, k=1)(s2, torch.tensor([[1.0, 1.0, 1.0, 1.0]]))
    loss2.backward()
    assert loss2.item() == 0 and torch.all(s2.grad == 0)
    assert torch.isfinite(losses.get(name, k=k)(s2, y2))


def test_rank_net_and_lambda_rank_stable_at_large_score_gap() -> None:
    """PITFALL 8b: log(1 + exp(-sigma * diff)) overflows at a gap of 100."""
    for gap in (100.0, 1e4):
        s = torch.tensor([[0.0, gap]], requires_grad=True)
        y = torch.tensor([[1.0, 0.0]])
        for fn in (losses.rank_net, losses.lambda_rank):
            loss = fn(s, y)
            (g,) = torch.autograd.grad(loss, s)
            assert torch.isfinite(loss) and torch.isfinite(g).all()
            assert g[0, 0] < 0  # the wrongly ordered relevant document still gets pushed up
            torch.testing.assert_close(g[0, 0], -g[0, 1])
            # The twice-differentiable path (a booster's Hessian) is written in the same stable form.
            (g2,) = torch.autograd.grad(fn(s, y), s, create_graph=True)
            (h,) = torch.autograd.grad(g2[0, 0], s)
            torch.testing.assert_close(g2.detach(), g)
            assert torch.isfinite(h).all()


def test_list_net_keeps_gradient_when_probabilities_underflow() -> None:
    """PITFALL 8c: log(softmax + 1e-10) loses the gradient beyond a gap of about 23."""
    s = torch.tensor([[0.0, 60.0, 61.0]], requires_grad=True)
    y = torch.tensor([[2.0, 0.0, 0.0]])
    (g,) = torch.autograd.grad(losses.list_net(s, y), s)
    assert g[0, 0] < -0.5


def _list_mle_by_pairs(s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """ListMLE from score differences only, sum_r log sum_{q>=r} exp(s_q - s_r), in label order."""
    ss = s[torch.sort(y, descending=True, stable=True).indices]
    return sum(torch.logsumexp(ss[r:] - ss[r], 0) for r in range(ss.shape[0]))


@pytest.mark.parametrize("scale", [1.0, 1e2, 1e4, 1e6, 1e8])
def test_list_mle_gradient_is_accurate_at_large_scores(scale: float) -> None:
    # torch's logcumsumexp backward and float32 tail sums were 2.5% off at scale 1e4 and gave a
    # misranked item no gradient at 1e8; the reference differences scores in float64.
    g = torch.Generator().manual_seed(int(scale))
    s = (torch.randn(30, generator=g, dtype=F64) * scale).float()
    y = torch.randperm(30, generator=g).float()  # distinct labels: no random tie-break
    ref = s.double().requires_grad_(True)
    _list_mle_by_pairs(ref, y.double()).backward()
    for dtype in (torch.float32, F64):
        got = s.to(dtype).clone().requires_grad_(True)
        losses.list_mle(got[None], y.to(dtype)[None], reduction="sum").backward()
        assert got.grad.dtype == dtype
        torch.testing.assert_close(got.grad.double(), ref.grad, atol=2e-6, rtol=0)
    for dtype, big in ((torch.float32, 1e8), (F64, 1e30)):
        pair = torch.tensor([[big, -big]], dtype=dtype, requires_grad=True)
        losses.list_mle(pair, torch.tensor([[0.0, 1.0]], dtype=dtype)).backward()
        assert pair.grad.tolist() == [[1.0, -1.0]]


def test_rmse_of_huge_errors_is_finite_with_its_gradient() -> None:
    # Squaring a 1e20 error overflowed float32: an infinite loss with a zero gradient.
    s = torch.tensor([[0.0, 1.0]], requires_grad=True)
    loss = losses.rmse(s, torch.tensor([[1e20, 0.0]]))
    loss.backward()
    want = 1e20 / math.sqrt(2)
    assert loss.item() == pytest.approx(want, rel=1e-6)
    # d/ds_0 of sqrt(((5 sigmoid(s_0) - 1e20)^2 + e_1^2) / 2) is about -5/4 / sqrt(2).
    assert s.grad[0, 0].item() == pytest.approx(-1.25 / math.sqrt(2), rel=1e-5)
    for dtype, error in ((torch.float32, 1.8e38), (F64, 1e308)):  # past 2^127 (2^1023): the scale too
        x = torch.zeros(1, 2, dtype=dtype, requires_grad=True)
        value = losses.rmse(x, torch.tensor([[error, 0.0]], dtype=dtype))
        (g,) = torch.autograd.grad(value, x)
        assert value.item() == pytest.approx(error / math.sqrt(2), rel=1e-6) and torch.isfinite(g).all()


def test_padding_labels_can_be_anything() -> None:
    """PITFALL 7: padded labels of -1 (or NaN) never reach a loss."""
    s = torch.randn(2, 4, requires_grad=True)
    y = torch.tensor([[1.0, -1.0, 0.0, float("nan")], [2.0, 0.0, -1.0, -1.0]])
    mask = torch.tensor([[True, False, True, False], [True, True, False, False]])
    for name in NAMES:
        loss = losses.get(name)(s, y, mask=mask)
        (g,) = torch.autograd.grad(loss, s)
        assert torch.isfinite(loss) and torch.isfinite(g).all() and torch.all(g[~mask] == 0)


def _bound(name: str, **options):
    if "generator" in losses.options(name):
        options["generator"] = 0  # the stochastic variants draw the same samples in both calls
    return losses.get(name, **options)


@pytest.mark.parametrize("filler", [-1.0, float("nan"), 7.0])
@pytest.mark.parametrize("name", losses.available())
def test_every_registered_loss_ignores_the_label_on_padding(name, filler) -> None:
    """PITFALL 7, over the registry (the test above lists eight losses by hand, and once missed a
    loss that read padding labels: an audit found it by mutation): the loss and its gradient are
    those of the same batch with label 0 on padding, and the padding gets no gradient."""
    g = torch.Generator().manual_seed(0)
    s = torch.randn(2, 5, dtype=F64, generator=g)
    y = torch.tensor([[1.0, 0.0, 2.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[False, True, True, False, True], [True, True, False, False, True]])
    fn = _bound(name)
    clean = s.clone().requires_grad_()
    want = fn(clean, torch.where(mask, y, 0.0), mask=mask, reduction="none")
    (want_grad,) = torch.autograd.grad(want.sum(), clean)
    x = s.clone().requires_grad_()
    got = fn(x, torch.where(mask, y, torch.full_like(y, filler)), mask=mask, reduction="none")
    (grad,) = torch.autograd.grad(got.sum(), x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(grad, want_grad, rtol=0, atol=0)
    assert torch.all(grad[~mask] == 0)


@pytest.mark.parametrize("name", losses.available())
def test_a_real_label_of_minus_one_is_never_taken_for_padding(name) -> None:
    """PITFALL 14, loss by loss: dropping the document labelled -1 from the mask changes the loss, so
    no loss treats -1 as a padding sentinel of its own (the shared input check is tested elsewhere)."""
    s = torch.tensor([[0.5, 2.0, -1.0, 0.3]], dtype=F64)
    y = torch.tensor([[2.0, -1.0, 0.0, 1.0]], dtype=F64)
    gain = {"gain": {-1: 0.0, 0: 0.0, 1: 1.0, 2: 3.0}} if "gain" in losses.options(name) else {}
    fn = _bound(name, **gain)
    with_it = fn(s, y).item()
    without_it = fn(s, y, mask=torch.tensor([[True, False, True, True]])).item()
    assert abs(with_it - without_it) > 1e-6, (with_it, without_it)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("name", ["neural_ndcg", "neural_ndcg_transposed"])
def test_exact_ties_at_tiny_temperatures_keep_finite_losses_and_gradients(name, dtype) -> None:
    """PITFALL 8, at random: three tied scores in random lists at temperatures down to 1e-20 (an
    audit removed both defences against ties, the tie-run fix and the empty-column floor, and got
    NaN in 120 of 2,400 such cases, which the single hand-made case did not catch)."""
    g = torch.Generator().manual_seed(0)
    for _ in range(40):
        s = torch.randn(1, 8, generator=g, dtype=dtype)
        s[0, 1] = s[0, 5] = s[0, 0]
        y = torch.randint(0, 3, (1, 8), generator=g).to(dtype)
        for temperature in (1e-8, 1e-12, 1e-20):
            x = s.clone().requires_grad_()
            loss = losses.get(name, temperature=temperature)(x, y)
            (grad,) = torch.autograd.grad(loss, x)
            assert torch.isfinite(loss) and torch.isfinite(grad).all(), (temperature, s)


# ----------------------------------------------------------------------------- registry and errors
def test_registry() -> None:
    assert set(NAMES) <= set(losses.available())
    assert losses.options("neural_ndcg")["temperature"] == 1.0
    assert losses.options("neural_ndcg")["k"] is None
    assert "mask" not in losses.options("rank_net") and "sigma" in losses.options("rank_net")
    fn = losses.get("rank_net", sigma=2.0)
    s, y = torch.randn(2, 4), torch.randint(0, 3, (2, 4)).float()
    torch.testing.assert_close(fn(s, y), losses.rank_net(s, y, sigma=2.0))
    with pytest.raises(ConfigError, match="temprature"):
        losses.get("neural_ndcg", temprature=1.0)
    with pytest.raises(ConfigError, match="no_such_loss"):
        losses.get("no_such_loss")
    with pytest.raises(ValueError, match="already registered"):
        losses.register("rank_net", losses.list_net)


@pytest.mark.parametrize(("name", "opts", "argument"), [
    ("neural_ndcg", {"temperature": 0.0}, "temperature"),
    ("neural_ndcg", {"k": 0}, "k"),
    ("neural_ndcg", {"gain": "cubic"}, "gain"),
    ("neural_ndcg", {"sinkhorn": "no"}, "sinkhorn"),
    ("neural_ndcg_transposed", {"n_samples": 0, "stochastic": True}, "n_samples"),
    ("approx_ndcg", {"alpha": -1.0}, "alpha"),
    ("rank_net", {"sigma": float("nan")}, "sigma"),
    ("lambda_rank", {"discount": "cubic"}, "discount"),
    ("list_mle", {"generator": "x"}, "generator"),
    ("neural_ndcg", {"generator": "x"}, "generator"),  # checked even when it does not draw
    ("rmse", {"n_levels": 0}, "n_levels"),
    # Found by a review on 2026-11-24: these failed inside float()/int() or were silently accepted.
    ("soft_ndcg", {"sinkhorn": True, "max_iter": None}, "max_iter"),
    ("soft_ndcg", {"sinkhorn": True, "tol": "x"}, "tol"),
    ("soft_ndcg", {"max_iter": 2.5}, "max_iter"),  # checked with or without Sinkhorn
    ("soft_ndcg", {"tol": -1.0}, "tol"),
    ("soft_ndcg", {"sigma": "0.5"}, "sigma"),
    ("soft_ndcg", {"sigma": True}, "sigma"),
    ("neural_ndcg", {"temperature": None}, "temperature"),
    ("neural_ndcg", {"max_iter": None}, "max_iter"),
    ("neural_ndcg", {"gain": {0: 0, 1: float("nan"), 2: 3}}, "gain"),
    ("neural_ndcg", {"gain": {0: 0, 1: "1", 2: 3}}, "gain"),
])
def test_bad_options_raise_errors_naming_them(name: str, opts: dict, argument: str) -> None:
    with pytest.raises(SmoothrankError, match=argument):
        losses.get(name, **opts)(torch.randn(2, 3), torch.ones(2, 3))


def test_bad_inputs_raise_errors_naming_them() -> None:
    s, y = torch.randn(2, 3), torch.ones(2, 3)
    with pytest.raises(SmoothrankError, match="labels"):
        losses.neural_ndcg(s, torch.ones(2, 4))
    with pytest.raises(SmoothrankError, match="mask"):
        losses.rank_net(s, y, mask=torch.ones(2, 3))
    with pytest.raises(SmoothrankError, match="reduction"):
        losses.list_net(s, y, reduction="avg")
    with pytest.raises(SmoothrankError, match="scores"):
        losses.rmse(torch.tensor([[float("nan"), 1.0]]), torch.ones(1, 2))
    with pytest.raises(SmoothrankError, match="scores"):
        losses.approx_ndcg(torch.ones(2, 3, dtype=torch.long), y)


@pytest.mark.parametrize("name", ["neural_ndcg", "neural_ndcg_transposed", "approx_ndcg"])
def test_tiny_smoothing_gives_finite_gradients(name: str) -> None:
    """PITFALL 8 (its analogue here): no NaN gradients as the smoothing strength goes to zero."""
    s = torch.tensor([[0.3, 0.3, -2.0, 1e3, 0.31], [5.0, -5.0, 0.0, 0.0, 0.0]], requires_grad=True)
    y = torch.tensor([[1.0, 2.0, 0.0, 0.0, 3.0], [0.0, 1.0, 0.0, 2.0, 0.0]])
    mask = torch.tensor([[True] * 5, [True, False, True, True, True]])
    for strength in (1e-2, 1e-4, 1e-6):
        opts = {"alpha": 1 / strength} if name == "approx_ndcg" else {"temperature": strength}
        loss = losses.get(name, **opts)(s, y, mask=mask)
        (g,) = torch.autograd.grad(loss, s)
        assert torch.isfinite(loss) and torch.isfinite(g).all()


def test_gain_mapping_and_callable_gain() -> None:
    """LightGBM-style label_gain mappings need not cover the padding filler."""
    s = torch.tensor([[2.0, 1.0, 0.0, 5.0]], dtype=F64)
    y = torch.tensor([[1.0, 2.0, 1.0, -1.0]], dtype=F64)
    mask = torch.tensor([[True, True, True, False]])
    mapping = {1.0: 1.0, 2.0: 3.0}
    for name in ("neural_ndcg", "neural_ndcg_transposed", "lambda_rank", "approx_ndcg"):
        opts = {"temperature": 1e-3} if name.startswith("neural") else {}
        a = losses.get(name, gain=mapping, **opts)(s, y, mask=mask)
        b = losses.get(name, gain="exp2", **opts)(s, y, mask=mask)  # 2^1-1 = 1, 2^2-1 = 3
        torch.testing.assert_close(a, b)
        c = losses.get(name, gain=lambda t: 2.0 ** t - 1.0, **opts)(s, y, mask=mask)
        torch.testing.assert_close(c, b)
    with pytest.raises(SmoothrankError, match="gain"):
        losses.neural_ndcg(s, torch.tensor([[3.0, 2.0, 1.0, 0.0]], dtype=F64), gain=mapping)


@pytest.mark.parametrize("name", NAMES)
def test_minimising_the_loss_improves_exact_ndcg(name: str) -> None:
    """End to end: a linear scorer trained with each loss ranks better than at initialisation."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 12, 5, generator=g)
    w_true = torch.tensor([1.0, -2.0, 0.5, 0.0, 1.5])
    y = torch.bucketize(x @ w_true + 0.3 * torch.randn(16, 12, generator=g), torch.tensor([-1.0, 1.0, 2.5]))
    y = y.float()
    mask = torch.rand(16, 12, generator=g) > 0.15
    w = torch.zeros(5, requires_grad=True)
    with torch.no_grad():
        w.copy_(0.1 * torch.randn(5, generator=g))
    before = exact_ndcg(x @ w.detach(), y, mask=mask, k=5).item()
    opt = torch.optim.Adam([w], lr=0.1)
    fn = losses.get(name, generator=0) if name == "list_mle" else losses.get(name)
    for _ in range(60):
        opt.zero_grad()
        fn(x @ w, y, mask=mask).backward()
        opt.step()
    after = exact_ndcg(x @ w.detach(), y, mask=mask, k=5).item()
    assert after > before + 0.1 and after > 0.85, (before, after)


# ----------------------------------------------------------------------------- the whole registry
def _alone(fn, s: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-query loss and gradient of each row's real items scored alone (no padding at all)."""
    values, grads = [], torch.zeros_like(s)
    for b in range(s.shape[0]):
        if not mask[b].any():
            values.append(torch.zeros((), dtype=s.dtype))
            continue
        x = s[b][mask[b]].clone().unsqueeze(0).requires_grad_()
        value = fn(x, y[b][mask[b]].unsqueeze(0), reduction="none")[0]
        (g,) = torch.autograd.grad(value, x)
        values.append(value.detach())
        grads[b, mask[b]] = g[0]
    return torch.stack(values), grads


@pytest.mark.parametrize("name", losses.available())
def test_every_registered_loss_takes_padding_anywhere_with_real_zero_labels(name: str) -> None:
    """PITFALLS 7 (BCE/ordinal losses fed padding labels crash) and 4 (padding must not be trailing-only).

    Every loss in the registry (not a fixed list), on a batch whose padding sits at the front, in
    the middle and at the end, whose padded slots hold label 0 like real irrelevant documents (no
    sentinel: only the mask tells them apart) and absurd scores: finite values and gradients, zero
    gradient on padding, and each query's loss and gradient equal to those of its real items alone.
    """
    g = torch.Generator().manual_seed(11)
    s = torch.randn(4, 8, generator=g, dtype=F64)
    y = torch.tensor([[0.0, 2, 0, 0, 1, 0, 3, 0],     # real zeros among relevant documents
                      [0.0, 0, 0, 0, 0, 0, 0, 0],     # only real zeros: no relevant document
                      [0.0, 0, 0, 1, 0, 0, 0, 0],     # a single real item
                      [0.0, 0, 0, 0, 0, 0, 0, 0]], dtype=F64)  # fully padded
    mask = torch.tensor([[False, True, True, False, True, True, True, False],
                         [True, False, True, True, False, True, True, False],
                         [False, False, False, True, False, False, False, False],
                         [False] * 8])
    s = torch.where(mask, s, torch.full_like(s, 1e4))  # padding would dominate any ranking it entered
    fn = losses.get(name, generator=0) if "generator" in losses.options(name) else losses.get(name)
    for dtype in (torch.float32, F64):
        x = s.to(dtype).requires_grad_()
        per_query = fn(x, y.to(dtype), mask=mask, reduction="none")
        (grad,) = torch.autograd.grad(per_query.sum(), x)
        assert torch.isfinite(per_query).all() and torch.isfinite(grad).all(), (name, dtype)
        assert torch.all(grad[~mask] == 0)
        assert torch.all(per_query[[1, 3]] == 0) and torch.all(grad[[1, 3]] == 0)  # uninformative queries
        assert torch.isfinite(fn(x, y.to(dtype), mask=mask))  # "mean" over one informative query
    if name == "list_mle":
        return  # its tie-breaks among the zeros come from a (batch, list_size) draw: not a row alone's
    want, want_grad = _alone(fn, s, y, mask)
    x = s.clone().requires_grad_()
    per_query = fn(x, y, mask=mask, reduction="none")
    (grad,) = torch.autograd.grad(per_query.sum(), x)
    torch.testing.assert_close(per_query.detach(), want)
    torch.testing.assert_close(grad, want_grad)


def test_negative_labels_are_real_labels_not_padding() -> None:
    """PITFALLS 14: padding is the mask, never a sentinel label, so a real label of -1 is a label.

    RankNet's pairs on real labels (1, -1, -2) are all three ordered pairs (hand-computed), the
    pair (-1, -2) included; masking the -1 item (not relabelling it) is what removes its pairs. (A
    query whose labels are all <= 0 has no relevant document and contributes 0, as for every loss.)
    """
    s = torch.tensor([[0.5, 2.0, -1.0]], dtype=F64)
    y = torch.tensor([[1.0, -1.0, -2.0]], dtype=F64)

    def cost(i: int, j: int) -> float:
        return math.log1p(math.exp(-(s[0, i] - s[0, j]).item()))

    got = losses.rank_net(s, y).item()
    assert got == pytest.approx((cost(0, 1) + cost(0, 2) + cost(1, 2)) / 3, rel=1e-12)
    masked = losses.rank_net(s, y, mask=torch.tensor([[True, False, True]])).item()
    assert masked == pytest.approx(cost(0, 2), rel=1e-12)


@pytest.mark.parametrize("name", ["neural_ndcg", "neural_ndcg_transposed"])
@pytest.mark.parametrize("stochastic", [False, True])
def test_neural_ndcg_keeps_no_list_by_list_matrix_for_backward(name: str, stochastic: bool) -> None:
    """PITFALLS 5: Sinkhorn unrolled by autograd keeps ~2 (batch, n, n) tensors per iteration (about
    1.45 GiB at 64 x 240, times n_samples when stochastic). Here everything saved for backward,
    at 4 x 240 with 30 iterations and 4 samples, is less than half of ONE such matrix per sample."""
    b, n, samples = 4, 240, 4
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(b, n, generator=gen).requires_grad_()
    y = torch.randint(0, 3, (b, n), generator=gen).float()
    mask = torch.rand(b, n, generator=gen) > 0.1
    opts = {"stochastic": True, "n_samples": samples, "generator": gen} if stochastic else {}
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = losses.get(name, max_iter=30, tol=0.0, **opts)(s, y, mask=mask)
    one_matrix_per_sample = (samples if stochastic else 1) * b * n * n
    assert saved and sum(saved) < 0.5 * one_matrix_per_sample, sum(saved) / one_matrix_per_sample
    loss.backward()
    assert torch.isfinite(s.grad).all()


@pytest.mark.parametrize("name", ["neural_ndcg", "neural_ndcg_transposed"])
def test_scores_one_ulp_apart_at_a_tiny_temperature_stay_finite(name: str) -> None:
    # float64 scores have no wider dtype for the logits: at tau <= 1e-20 the rounding of
    # (m + 1 - 2r) s_j - B_j outweighs a one-ulp gap, one item takes both ranks and the other's
    # column is empty; Sinkhorn divided by it and the loss was NaN. Such a column is now floored.
    hexes = ["-0x1.d212f954dfe86p-1", "-0x1.bc98a6e0e500bp+0", "-0x1.04a6c34e4f95cp+0",
             "-0x1.d212f954dfe87p-1", "0x1.993a79b5e8e45p-2", "-0x1.3694c4df83ff5p-4",
             "0x1.f26bde3ecc0efp+0", "0x1.ab53f1158fbe6p-1", "0x1.e7f5d1afcbb57p-2"]  # 0 and 3: one ulp
    s = torch.tensor([[float.fromhex(h) for h in hexes]], dtype=F64)
    y = torch.tensor([[3.0, 3, 3, 3, 2, 0, 1, 1, 3]], dtype=F64)
    column_sums = sorting.neural_sort(s, temperature=1e-20).sum(-2)
    assert column_sums.min() == 0  # the situation this test is about
    reference = losses.get(name, temperature=1e-16)(s, y).item()  # still resolved at 1e-16
    for tau in (1e-20, 1e-40):
        x = s.clone().requires_grad_()
        loss = losses.get(name, temperature=tau)(x, y)
        (g,) = torch.autograd.grad(loss, x)
        assert torch.isfinite(g).all(), (tau, g)
        assert loss.item() == pytest.approx(reference, abs=0.01), tau


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_tiny_smoothing_with_tied_scores_gives_finite_gradients(dtype: torch.dtype) -> None:
    """PITFALLS 8: no KL regulariser here, so its analogue is the smoothing strength of every NDCG
    surrogate going to zero (NeuralNDCG's temperature, SoftNDCG's sigma, ApproxNDCG's 1/alpha),
    on tied scores next to a huge gap, with and without Sinkhorn, down to 1e-20."""
    s = torch.tensor([[0.3, 0.3, -2.0, 1e3, 0.31, 0.0], [0.1, 0.1, 0.7, 5.0, -3.0, 0.0]], dtype=dtype)
    y = torch.tensor([[1.0, 2.0, 0.0, 0.0, 3.0, 0.0], [0.0, 1.0, 0.0, 2.0, 0.0, 1.0]], dtype=dtype)
    mask = torch.tensor([[True] * 6, [True, True, True, True, True, False]])
    for strength in (1e-6, 1e-8, 1e-12, 1e-20):
        cases = [(name, {"temperature": strength, "sinkhorn": sinkhorn})
                 for name in ("neural_ndcg", "neural_ndcg_transposed") for sinkhorn in (True, False)]
        cases += [("soft_ndcg", {"sigma": strength, "method": method, "sinkhorn": sinkhorn, "n_exact": 1})
                  for method in ("exact", "normal", "hybrid") for sinkhorn in (False, True)]
        cases += [("approx_ndcg", {"alpha": 1 / strength})]
        for name, opts in cases:
            x = s.clone().requires_grad_()
            loss = losses.get(name, **opts)(x, y, mask=mask)
            (g,) = torch.autograd.grad(loss, x)
            assert torch.isfinite(loss) and torch.isfinite(g).all(), (name, opts)


def test_informative_queries_are_what_the_mean_divides_by() -> None:
    # The count a distributed job all-reduces for an exact global mean (docs/losses.md): checked
    # against sum / mean of every loss, with queries of no relevant document, of one label only,
    # fully padded, and with a gain mapping that makes label 0 relevant.
    torch.manual_seed(0)
    b, n = 40, 8
    scores, labels = torch.randn(b, n, dtype=F64), torch.randint(0, 3, (b, n)).to(F64)
    labels[::3] = 0
    labels[1::7] = 1
    mask = torch.rand(b, n) > 0.2
    mask[5] = False
    cases = [(name, {}) for name in losses.available()]
    cases += [(name, {"k": 2}) for name in ("neural_ndcg", "soft_ndcg", "rank_net", "lambda_rank")]
    cases += [(name, {"gain": {0: 1.0, 1: 2.0, 2: 5.0}}) for name in ("approx_ndcg", "lambda_rank")]
    counts = set()
    for name, opts in cases:
        if name == "list_mle":
            opts = {"generator": 0}
        total = losses.get(name, **opts)(scores, labels, mask=mask, reduction="sum")
        mean = losses.get(name, **opts)(scores, labels, mask=mask, reduction="mean")
        count = losses.informative_queries(losses.get(name, **opts), labels, mask=mask, dtype=F64)
        assert count.shape == (b,) and count.dtype == torch.bool
        torch.testing.assert_close(total / count.sum(), mean, rtol=1e-12, atol=0), (name, opts)
        per_query = losses.get(name, **opts)(scores, labels, mask=mask, reduction="none")
        assert bool((per_query[~count] == 0).all()), (name, opts)
        counts.add(int(count.sum()))
    assert len(counts) == 3  # relevant; also two labels (pairwise); every real query (gain of label 0)
    assert torch.equal(losses.informative_queries("rank_net", labels.long(), mask=mask),
                       losses.informative_queries(losses.rank_net, labels, mask=mask))
    # Labels are read in the scores' dtype, as the losses read them: 2^24 + 1 and 2^24 are one label
    # in float32 (no pair), two in float64.
    big = torch.tensor([[16777217.0, 16777216.0]], dtype=F64)
    for dtype, counted in ((torch.float32, False), (F64, True)):
        assert losses.informative_queries("rank_net", big, dtype=dtype).item() is counted
        per_query = losses.rank_net(torch.tensor([[0.0, 1.0]], dtype=dtype), big, reduction="none")
        assert (per_query.item() > 0) is counted
    with pytest.raises(ConfigError, match=r"labels: expected a tensor of shape \(batch, list_size\)"):
        losses.informative_queries("rank_net", torch.zeros(2, 3, 4))
    with pytest.raises(ConfigError, match="expected a loss name, a registered loss"):
        losses.informative_queries(lambda s, y, *, mask=None, reduction="mean": s.sum(), labels)


@pytest.mark.parametrize("name", [*NAMES, "soft_ndcg"])
def test_one_query_takes_a_numpy_mask_as_it_takes_a_tensor_mask(name: str) -> None:
    """1-D inputs are one query, and a numpy bool mask is taken as a tensor: a 1-D numpy mask with
    a 1-D query was refused ("mask: shape (4,) differs from scores (1, 4)", the scores as given
    being (4,)), where the 1-D tensor mask and the metrics' numpy mask are taken."""
    s, y = torch.tensor([0.3, 1.0, -0.5, 2.0]), torch.tensor([1.0, 0, 2, 0])
    mask = np.array([True, True, False, True])
    fn = losses.get(name, **({"generator": 0} if name == "list_mle" else {}))
    tensor_mask = torch.from_numpy(mask)
    assert torch.equal(fn(s, y, mask=mask, reduction="none"), fn(s, y, mask=tensor_mask, reduction="none"))
    assert torch.equal(losses.informative_queries(fn, y, mask=mask),
                       losses.informative_queries(fn, y, mask=tensor_mask))


@pytest.mark.parametrize("name", ["rank_net", "lambda_rank"])
def test_pair_costs_are_exact_in_float64_past_softplus_default_threshold(name: str) -> None:
    """softplus(x) was taken as x past PyTorch's default threshold 20: a misordered pair 21 apart
    cost 21.0 in float64 for log(1 + e^21) = 21.000000000758 (an audit), while the gradient was exact."""
    s = torch.tensor([[0.0, 21.0]], dtype=torch.float64)
    y = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    one = losses.get(name)(s, y, reduction="sum").item()
    double = losses.get(name)(torch.cat([s, s + 1.0]), torch.cat([y, y]), reduction="sum").item()
    assert double == pytest.approx(2 * one, rel=1e-15)  # the pair's cost times its (lambda) weight
    if name == "rank_net":
        assert one == pytest.approx(math.log1p(math.exp(21.0)), rel=1e-15)


@pytest.mark.parametrize(("name", "options"), [("soft_ndcg", {}), ("soft_ndcg", {"backend": "torch"}),
                                               ("soft_ndcg", {"method": "normal"}),
                                               ("soft_ndcg", {"sinkhorn": True}), ("neural_ndcg", {})])
def test_hand_written_gradients_under_non_reentrant_checkpointing_with_create_graph(name: str,
                                                                                    options: dict) -> None:
    """smoothrank._autograd's wrapper read ``ctx.saved_tensors`` a second time under
    create_graph=True, which torch.utils.checkpoint's non-reentrant mode refuses ("Unpack is being
    triggered for a tensor that was already unpacked once"): the first derivative itself failed.
    It must equal the plain gradient, and differentiating it again must raise the refusal."""
    from torch.utils.checkpoint import checkpoint

    s = torch.tensor([[0.3, -1.2, 0.8, 0.1, 2.0, -0.4]], dtype=torch.float64)
    y = torch.tensor([[2.0, 0.0, 1.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    fn = losses.get(name, **options)
    x = s.clone().requires_grad_()
    (plain,) = torch.autograd.grad(fn(x, y), x)
    (grad,) = torch.autograd.grad(checkpoint(lambda a: fn(a * 1.0, y), x, use_reentrant=False), x,
                                  create_graph=True)
    torch.testing.assert_close(grad.detach(), plain, rtol=1e-12, atol=0)
    with pytest.raises(SmoothrankError, match="not twice differentiable"):
        torch.autograd.grad(grad[0, 0], x)
