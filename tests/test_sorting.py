"""NeuralSort and Sinkhorn: the paper's worked example, masks, the custom backward, stability."""

from __future__ import annotations

import math

import pytest
import torch
from reference_neuralndcg import naive_neural_sort, naive_sinkhorn

from smoothrank import sorting
from smoothrank.errors import SmoothrankError

F64 = torch.float64


# ----------------------------------------------------------------------------- NeuralSort
@pytest.mark.parametrize(("tau", "row"), [
    (0.01, [4, 4, 3, 2, 0.99992, 0.00012339]),
    (0.1, [3.9995, 3.8909, 2.8239, 1.9730, 0.9989, 0.3136]),
    (1.0, [3.3893, 2.9820, 2.4965, 2.0191, 1.6097, 1.2815]),
])
def test_table1_of_the_neuralndcg_paper(tau: float, row: list[float]) -> None:
    y = torch.tensor([4, 2, 1, 0, 4, 3], dtype=F64)
    s = torch.tensor([[0.5, 0.2, 0.1, 0.01, 0.65, 0.3]], dtype=F64)
    quasi = (sorting.neural_sort(s, temperature=tau) @ y)[0]
    for got, printed in zip(quasi.tolist(), row, strict=True):
        text = repr(printed)
        decimals = len(text.split(".")[1]) if "." in text else 0
        # "3" in the tau = 0.01 row is 2.99995: printed digits mean agreement to 4 decimals there.
        decimals = max(decimals, 4)
        assert abs(got - printed) <= 0.5 * 10 ** -decimals + 1e-12, (tau, quasi.tolist())
    # The printed sums are sums of the rounded entries (the paper's 10.388 for tau = 1 is a misprint
    # of 13.778: its own row adds up to 13.7781).
    assert abs(sum(row) - quasi.sum().item()) < 1e-3


def test_neural_sort_matches_equation_3_and_is_row_stochastic() -> None:
    torch.manual_seed(0)
    s = torch.randn(3, 7, dtype=F64) * 3
    for tau in (0.05, 1.0, 10.0):
        p = sorting.neural_sort(s, temperature=tau)
        torch.testing.assert_close(p, naive_neural_sort(s, tau))
        torch.testing.assert_close(p.sum(-1), torch.ones(3, 7, dtype=F64))


def _pad(x: torch.Tensor, where: str, fill: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad the last dim of x with 3 entries at the front, middle or end; return (padded, mask, idx)."""
    n = x.shape[-1]
    positions = {"front": [0, 1, 2], "middle": [1, 3, 4], "end": [n, n + 1, n + 2]}[where]
    total = n + 3
    mask = torch.ones(total, dtype=torch.bool)
    mask[positions] = False
    idx = torch.nonzero(mask).squeeze(-1)
    out = torch.full((*x.shape[:-1], total), fill, dtype=x.dtype)
    out[..., idx] = x
    return out, mask.expand(*x.shape[:-1], total).clone(), idx


@pytest.mark.parametrize("where", ["front", "middle", "end"])
def test_neural_sort_and_sinkhorn_are_invariant_to_padding_position(where: str) -> None:
    torch.manual_seed(1)
    s = torch.randn(2, 6, dtype=F64)
    ref_p = sorting.neural_sort(s, temperature=0.5)
    ref = sorting.sinkhorn(ref_p)
    padded, mask, idx = _pad(s, where, fill=123.0)
    p = sorting.neural_sort(padded, mask=mask, temperature=0.5)
    m = 6
    torch.testing.assert_close(p[:, :m][:, :, idx], ref_p)
    assert torch.all(p[:, m:] == 0) and torch.all(p[:, :, ~mask[0]] == 0)
    got = sorting.sinkhorn(p, mask=(sorting.rank_mask(mask), mask))
    torch.testing.assert_close(got[:, :m][:, :, idx], ref)
    assert torch.all(got[:, m:] == 0) and torch.all(got[:, :, ~mask[0]] == 0)


def test_neural_sort_finite_at_extremes() -> None:
    s = torch.tensor([[1e4, -1e4, 0.0, 0.0, 5.0], [3.0, 3.0, 3.0, 3.0, 3.0]], requires_grad=True)
    for tau in (1e-3, 1.0, 100.0):
        p = sorting.neural_sort(s, temperature=tau)
        assert torch.isfinite(p).all()
        (p * torch.randn_like(p)).sum().backward()
        assert torch.isfinite(s.grad).all()
        s.grad = None
    # Ties split the mass evenly.
    p = sorting.neural_sort(s.detach()[1:], temperature=1e-3)
    torch.testing.assert_close(p, torch.full((1, 5, 5), 0.2))


@pytest.mark.parametrize("name", ["neural_ndcg", "neural_ndcg_transposed"])
def test_scores_near_the_float64_limit_give_the_exact_ndcg(name: str) -> None:
    # sum_k |s_j - s_k| (and the centre) overflowed to inf once n max|s| passed 1.8e308: NaN loss and
    # gradients. The scores are now scaled by a power of two, and tau with them.
    from smoothrank import losses
    from smoothrank.metrics import ndcg

    cases = [(torch.tensor([[1e308, -1e308, 1.0]], dtype=torch.float64), torch.tensor([[0.0, 1, 2]])),
             ((torch.arange(10.0, dtype=torch.float64) - 4.5)[None] * 1e307, torch.arange(10.0)[None] % 3)]
    for scores, labels in cases:
        labels = labels.double()
        x = scores.clone().requires_grad_()
        loss = losses.get(name)(x, labels)
        (g,) = torch.autograd.grad(loss, x)
        assert loss.item() == pytest.approx(-ndcg(scores, labels).item(), abs=1e-12)
        assert torch.isfinite(g).all()
        p = sorting.neural_sort(scores)
        assert torch.equal(p.argmax(-1), scores.argsort(-1, descending=True))


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("where", ["front", "middle", "end"])
@pytest.mark.parametrize("scale", [1e7, 1e16, 1e30])
def test_padding_does_not_tie_with_the_top_item_at_huge_scores(dtype, where, scale) -> None:
    # Regression: padded slots once sorted by the filler max + 1, which rounds onto the max when the
    # scores span 2^53 (float64) and ties with the top real item: that item's tie run reached the
    # padded slot, it took two ranks, another none, and Sinkhorn's backward gave NaN.
    from smoothrank import losses

    s = torch.tensor([[3.0, 1.0, 2.0, -1.0]], dtype=dtype) * scale
    labels = torch.tensor([[2.0, 0.0, 1.0, 0.0]])
    padded, mask, idx = _pad(s, where, fill=0.0)
    padded_labels, _, _ = _pad(labels, where, fill=0.0)
    p = sorting.neural_sort(padded, mask=mask, temperature=1.0)
    torch.testing.assert_close(p[:, :4][:, :, idx], sorting.neural_sort(s, temperature=1.0))
    hard = torch.zeros(1, 4, 4, dtype=dtype)
    hard[0, [0, 1, 2, 3], [0, 2, 1, 3]] = 1.0
    torch.testing.assert_close(sorting.neural_sort(s, temperature=1.0), hard)
    for name in ("neural_ndcg", "neural_ndcg_transposed"):
        for sinkhorn in (True, False):
            x = padded.clone().requires_grad_(True)
            loss = losses.get(name, sinkhorn=sinkhorn)(x, padded_labels, mask=mask)
            loss.backward()
            assert loss.item() == pytest.approx(-1.0) and torch.equal(x.grad, torch.zeros_like(x))


def test_neural_sort_fully_padded_row_and_length_one() -> None:
    s = torch.tensor([[0.3, 0.1], [2.0, 7.0]], requires_grad=True)
    mask = torch.tensor([[False, False], [False, True]])
    p = sorting.neural_sort(s, mask=mask)
    assert torch.equal(p[0], torch.zeros(2, 2))
    assert p[1, 0, 1] == 1 and p[1].sum() == 1
    p.sum().backward()
    assert torch.isfinite(s.grad).all()


def test_stochastic_neural_sort_layout_and_masks() -> None:
    s = torch.randn(3, 5)
    mask = torch.tensor([[True] * 5, [False, True, True, False, True], [True, False, False, False, False]])
    gen = torch.Generator().manual_seed(0)
    p = sorting.stochastic_neural_sort(s, mask=mask, n_samples=4, generator=gen)
    assert p.shape == (4, 3, 5, 5)
    for sample in range(4):
        for q in range(3):
            m = int(mask[q].sum())
            assert torch.all(p[sample, q][:, ~mask[q]] == 0)
            assert torch.all(p[sample, q][m:] == 0)
            torch.testing.assert_close(p[sample, q][:m].sum(-1), torch.ones(m))
    # beta -> large makes the Gumbel noise negligible: back to the deterministic relaxation.
    det = sorting.neural_sort(s * 1e6, mask=mask, temperature=1e6)
    sto = sorting.stochastic_neural_sort(s, mask=mask, n_samples=2, beta=1e6, temperature=1e6,
                                         generator=gen)
    torch.testing.assert_close(sto[0], det, atol=1e-4, rtol=0)


def _perturbed(where: str, seeded: bool, masked: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``gumbel_perturb`` of a batch padded by three items at ``where``, and the real positions."""
    s = torch.randn(2, 6, generator=torch.Generator().manual_seed(3), dtype=F64)
    padded, mask, idx = _pad(s, where, fill=123.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4)
        gen = torch.Generator().manual_seed(4) if seeded else None
        opts = {"mask": mask} if masked else {}
        return sorting.gumbel_perturb(padded, n_samples=3, beta=0.5, generator=gen, **opts), idx


@pytest.mark.parametrize("seeded", [True, False])
def test_gumbel_noise_of_a_real_item_does_not_depend_on_the_padding(seeded: bool) -> None:
    """Real item number k of a row gets the noise drawn at position k: the same for padding at the
    front, in the middle and at the end; with the padding at the end, every value is the one drawn
    without a mask (as before the masked draws existed)."""
    end, idx = _perturbed("end", seeded)
    for where in ("front", "middle"):
        got, got_idx = _perturbed(where, seeded)
        assert torch.equal(got[..., got_idx], end[..., idx]), where
    assert torch.equal(end, _perturbed("end", seeded, masked=False)[0])


@pytest.mark.parametrize("where", ["front", "middle"])
def test_stochastic_neural_sort_samples_do_not_depend_on_the_padding(where: str) -> None:
    """The same generator seed gives the same relaxed permutations of the real items (and gradients)
    wherever the padding sits; NeuralSort only rounds differently at other positions."""
    s = torch.randn(2, 6, generator=torch.Generator().manual_seed(3), dtype=F64)
    weights = torch.randn(3, 2, 6, 6, generator=torch.Generator().manual_seed(5), dtype=F64)
    out = []
    for pos in ("end", where):
        padded, mask, idx = _pad(s, pos, fill=123.0)
        x = padded.clone().requires_grad_()
        p = sorting.stochastic_neural_sort(x, mask=mask, n_samples=3, temperature=0.4,
                                           generator=torch.Generator().manual_seed(6))[..., :6, :][..., idx]
        (grad,) = torch.autograd.grad((p * weights).sum(), x)
        out.append((p.detach(), grad[:, idx]))
    torch.testing.assert_close(out[1][0], out[0][0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out[1][1], out[0][1], rtol=1e-12, atol=1e-12)


def test_neural_sort_errors_name_the_argument() -> None:
    s = torch.randn(2, 3)
    with pytest.raises(SmoothrankError, match="temperature"):
        sorting.neural_sort(s, temperature=0)
    with pytest.raises(SmoothrankError, match="mask"):
        sorting.neural_sort(s, mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(SmoothrankError, match="scores"):
        sorting.neural_sort(torch.randn(3))
    with pytest.raises(SmoothrankError, match="n_samples"):
        sorting.stochastic_neural_sort(s, n_samples=0)
    for bad in ("x", None, True):
        with pytest.raises(SmoothrankError, match="temperature"):
            sorting.neural_sort(s, temperature=bad)
    for beta in (None, float("inf"), 0.0):
        with pytest.raises(SmoothrankError, match="beta"):
            sorting.stochastic_neural_sort(s, beta=beta)
    for max_iter in (None, 0, 1.5):
        with pytest.raises(SmoothrankError, match="max_iter"):
            sorting.sinkhorn(torch.rand(1, 3, 3), max_iter=max_iter)
    with pytest.raises(SmoothrankError, match="tol"):
        sorting.sinkhorn(torch.rand(1, 3, 3), tol="x")


# ----------------------------------------------------------------------------- Sinkhorn
def _masked_problem(seed: int = 0, dtype: torch.dtype = F64):
    torch.manual_seed(seed)
    s = torch.randn(4, 9, dtype=dtype)
    mask = torch.ones(4, 9, dtype=torch.bool)
    mask[1, [0, 4]] = False
    mask[2, [8]] = False
    mask[3, 2:] = False
    p = sorting.neural_sort(s, mask=mask, temperature=0.7)
    return p, sorting.rank_mask(mask), mask


@pytest.mark.parametrize("n_iter", [1, 3, 30])
def test_sinkhorn_equals_unrolled_autograd_values_and_gradients(n_iter: int) -> None:
    p, rows, cols = _masked_problem()
    k1 = p.detach().clone().requires_grad_()
    k2 = p.detach().clone().requires_grad_()
    got = sorting.sinkhorn(k1, mask=(rows, cols), max_iter=n_iter, tol=0.0)
    ref = naive_sinkhorn(k2, rows, cols, n_iter)
    torch.testing.assert_close(got, ref)
    w = torch.randn_like(got)
    (g1,) = torch.autograd.grad((got * w).sum(), k1)
    (g2,) = torch.autograd.grad((ref * w).sum(), k2)
    keep = rows.unsqueeze(-1) & cols.unsqueeze(-2)
    torch.testing.assert_close(g1 * keep, g2 * keep)


def test_sinkhorn_gradcheck_float64() -> None:
    p, rows, cols = _masked_problem(seed=3)
    k = p.detach().clone().requires_grad_()

    def f(k):
        u, v, _ = sorting.sinkhorn_scaling(k, mask=(rows, cols), max_iter=5, tol=0.0)
        return u, v

    assert torch.autograd.gradcheck(f, (k,))


def test_sinkhorn_marginals_error_and_per_query_stopping() -> None:
    p, rows, cols = _masked_problem(seed=2)
    out, err = sorting.sinkhorn_with_info(p, mask=(rows, cols), max_iter=500, tol=1e-9)
    assert torch.all(err <= 1e-9)
    row_sums, col_sums = out.sum(-1), out.sum(-2)
    torch.testing.assert_close(row_sums, rows.to(F64), atol=1e-8, rtol=0)
    torch.testing.assert_close(col_sums, cols.to(F64), atol=1e-8, rtol=0)
    # A query's result does not depend on its batch companions (each stops on its own).
    for q in range(4):
        alone, err_q = sorting.sinkhorn_with_info(p[q:q + 1], mask=(rows[q:q + 1], cols[q:q + 1]),
                                                  max_iter=500, tol=1e-9)
        torch.testing.assert_close(alone[0], out[q], atol=0, rtol=0)
        assert err_q.item() == err[q].item()
    # The reported error is the true marginal error after the last iteration.
    out2, err2 = sorting.sinkhorn_with_info(p, mask=(rows, cols), max_iter=2, tol=0.0)
    true = torch.maximum((out2.sum(-1) - rows.to(F64)).abs().amax(-1),
                         (out2.sum(-2) - cols.to(F64)).abs().amax(-1))
    torch.testing.assert_close(err2, true, atol=1e-12, rtol=0)
    assert err2[0] > 1e-6


@pytest.mark.parametrize(("chunk", "check_every"), [(1, 1), (3, 7), (10_000, 5)])
def test_results_do_not_depend_on_chunking_or_the_convergence_check_interval(monkeypatch, chunk: int,
                                                                              check_every: int) -> None:
    """A GPU runs the whole batch as one chunk and reads the stop flag every few iterations; the CPU
    runs cache-sized chunks and checks every iteration. Values and gradients must not change."""
    scores = torch.randn(9, 13, generator=torch.Generator().manual_seed(4), dtype=F64) * 3
    mask = torch.rand(9, 13, generator=torch.Generator().manual_seed(5)) > 0.2
    left = torch.rand(9, 13, dtype=F64)
    right = torch.rand(9, 13, dtype=F64)

    def run() -> tuple[torch.Tensor, ...]:
        s = scores.clone().requires_grad_()
        value, err = sorting.neural_sort_bilinear(s, left, right, mask=mask, temperature=0.5, tol=1e-7)
        (grad,) = torch.autograd.grad(value.sum(), s)
        k = sorting.neural_sort(scores, mask=mask, temperature=0.5).requires_grad_()
        out, err_k = sorting.sinkhorn_with_info(k, mask=(sorting.rank_mask(mask), mask), tol=1e-7)
        (grad_k,) = torch.autograd.grad((out * right.unsqueeze(-1)).sum(), k)
        return value, err, grad, out, err_k, grad_k

    reference = run()
    monkeypatch.setattr(sorting, "_chunk_size", lambda n, dtype, device: chunk)
    monkeypatch.setattr(sorting, "_check_every", lambda device: check_every)
    for got, want in zip(run(), reference, strict=True):
        torch.testing.assert_close(got, want, atol=1e-13, rtol=0)


def test_sinkhorn_stable_at_small_temperature_and_padded_rows() -> None:
    s = torch.randn(3, 50) * 5
    s[1, 10:20] = 0.25  # ties
    mask = torch.ones(3, 50, dtype=torch.bool)
    mask[2] = False
    for tau in (1e-3, 1e-2, 100.0):
        k = sorting.neural_sort(s, mask=mask, temperature=tau).requires_grad_()
        out, err = sorting.sinkhorn_with_info(k, mask=(sorting.rank_mask(mask), mask))
        assert torch.isfinite(out).all() and torch.isfinite(err).all()
        assert torch.all(out[2] == 0) and err[2] == 0
        (out * torch.randn_like(out)).sum().backward()
        assert torch.isfinite(k.grad).all()


def test_sinkhorn_backward_does_not_store_per_iteration_matrices() -> None:
    """PITFALL 5: autograd through 30 linear-domain iterations saves ~60 (batch, n, n) tensors."""
    b, n = 4, 64
    k = sorting.neural_sort(torch.randn(b, n), temperature=1.0).detach().requires_grad_()
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        sorting.sinkhorn(k, max_iter=30, tol=0.0)
    full = b * n * n
    # K (referenced twice), diag(u) K for the final product, and O(T n) vectors per query.
    assert sum(saved) <= 4.5 * full, sum(saved) / full
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        naive_sinkhorn(k, torch.ones(b, n, dtype=torch.bool), torch.ones(b, n, dtype=torch.bool), 30)
    assert sum(saved) >= 60 * full  # the pitfall this design avoids


def test_sinkhorn_errors() -> None:
    with pytest.raises(SmoothrankError, match="matrix"):
        sorting.sinkhorn(torch.rand(2, 3, 4))
    with pytest.raises(SmoothrankError, match="mask"):
        sorting.sinkhorn(torch.rand(2, 3, 3), mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(SmoothrankError, match="max_iter"):
        sorting.sinkhorn(torch.rand(2, 3, 3), max_iter=0)
    with pytest.raises(SmoothrankError, match="mask"):
        rows = torch.tensor([[True, True, False]])
        sorting.sinkhorn(torch.rand(1, 3, 3), mask=(rows, torch.ones(1, 3, dtype=torch.bool)))


def test_sinkhorn_refuses_a_matrix_with_an_empty_real_column():
    # No doubly stochastic scaling exists; silently it would overflow and give NaN gradients.
    matrix = torch.rand(2, 4, 4) + 0.1
    matrix[1, :, 2] = 0.0
    with pytest.raises(SmoothrankError, match="column 2 of query 1"):
        sorting.sinkhorn(matrix)
    # The same column is fine when it is padding.
    mask = torch.tensor([[True] * 4, [True, True, False, True]])
    out = sorting.sinkhorn(matrix, mask=mask)
    assert torch.isfinite(out).all()
    assert torch.allclose(out[1][mask[1]][:, mask[1]].sum(-1), torch.ones(3), atol=1e-4)


def test_sinkhorn_reports_the_true_marginal_error_when_the_tolerance_is_out_of_reach() -> None:
    """PITFALLS 5: at 240 items the paper's tol = 1e-6 is not reached in 50 iterations (marginal
    error about 5e-3). The error returned is the true one of the returned matrix (so the shortfall
    is visible, never a silent claim of convergence), and given enough iterations a query does
    reach the tolerance and stops there."""
    s = torch.randn(2, 240, generator=torch.Generator().manual_seed(0), dtype=F64)
    p = sorting.neural_sort(s, temperature=1.0)

    def true_error(out: torch.Tensor) -> torch.Tensor:
        return torch.maximum((out.sum(-1) - 1).abs().amax(-1), (out.sum(-2) - 1).abs().amax(-1))

    out, err = sorting.sinkhorn_with_info(p, max_iter=50, tol=1e-6)
    torch.testing.assert_close(err, true_error(out), atol=1e-12, rtol=0)
    assert torch.all(err > 1e-3), err  # far from the tolerance: reported, not hidden
    out, err = sorting.sinkhorn_with_info(p, max_iter=10_000, tol=1e-6)
    torch.testing.assert_close(err, true_error(out), atol=1e-12, rtol=0)
    assert torch.all(err < 1e-6), err


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_exact_ties_split_evenly_at_any_temperature(dtype: torch.dtype) -> None:
    """PITFALLS 8 (small smoothing strength): tied scores must stay symmetric. With the tie broken by
    rounding alone, at tau <= 1e-8 one tied item took both of the pair's ranks, the other's column
    was empty, and Sinkhorn overflowed into NaN gradients. The limit is the hand-computed
    relaxation: each of the two ranks of the pair split 1/2 : 1/2, every other item a permutation."""
    s = torch.tensor([[0.1, 0.1, 0.7, 5.0, -3.0], [0.3, 0.3, -2.0, 1e3, 0.31]], dtype=dtype)
    # ranks (rows) of the tied pair (columns 0 and 1): 3 and 4 in row 0, 3 and 4 in row 1
    want = torch.zeros(2, 5, 5, dtype=dtype)
    for q, order in enumerate([[3, 2, None, None, 4], [3, 4, None, None, 2]]):
        for rank, item in enumerate(order):
            if item is None:
                want[q, rank, :2] = 0.5
            else:
                want[q, rank, item] = 1.0
    for tau in (1e-6, 1e-8, 1e-12, 1e-20):
        p = sorting.neural_sort(s, temperature=tau)
        assert torch.equal(p[..., 0], p[..., 1]), tau  # bitwise identical columns
        torch.testing.assert_close(p, want, atol=1e-6, rtol=0)
        x = s.clone().requires_grad_()
        value, _ = sorting.neural_sort_bilinear(x, torch.rand_like(s), torch.rand_like(s), temperature=tau)
        (grad,) = torch.autograd.grad(value.sum(), x)
        assert torch.isfinite(value).all() and torch.isfinite(grad).all(), tau


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("tau", [1e-50, 1e-320])
def test_neural_sort_temperature_below_the_dtype_is_the_hard_sort(dtype: torch.dtype, tau: float) -> None:
    # 1e-50 is 0 in float32 and 1e-320 subnormal in float64: held at the smallest normal number,
    # P-hat is the sorting permutation, with finite gradients, also through Sinkhorn.
    scores = torch.tensor([[0.3, 2.0, -1.0, 0.7]], dtype=dtype, requires_grad=True)
    p = sorting.neural_sort(scores, temperature=tau)
    hard = torch.eye(4, dtype=dtype)[torch.argsort(scores.detach(), descending=True)]
    assert torch.equal(p.detach(), hard)
    left = torch.tensor([[1.0, 0.6, 0.5, 0.4]], dtype=dtype)
    right = torch.tensor([[1.0, 0.0, 3.0, 1.0]], dtype=dtype)
    value, _ = sorting.neural_sort_bilinear(scores, left, right, temperature=tau)
    (g,) = torch.autograd.grad(value.sum(), scores)
    assert torch.isfinite(value).all() and torch.isfinite(g).all()


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_gumbel_noise_of_half_precision_scores_is_drawn_in_float32(half):
    # An audit (2026-11-25): bfloat16 uniforms stop at 0.992, which cut the Gumbel tail at 4.84, and a
    # gap of 6 won 3.4 times too rarely (0.00072 against Plackett-Luce's 0.00247).
    scores = torch.tensor([[0.0, 6.0]], dtype=half)
    g = sorting.gumbel_perturb(scores, n_samples=200_000, beta=1.0, generator=0)
    assert g.dtype == torch.float32
    wins = float((g[:, 0, 0] > g[:, 0, 1]).double().mean())
    expected = 1.0 / (1.0 + math.exp(6.0))  # P(the lower item is sampled first)
    assert abs(wins - expected) < 5 * math.sqrt(expected / 200_000), wins
    # the same draws as float32 scores
    torch.testing.assert_close(g, sorting.gumbel_perturb(scores.float(), n_samples=200_000, beta=1.0,
                                                         generator=0))
    p = sorting.stochastic_neural_sort(scores, n_samples=3, generator=0, temperature=0.5)
    assert p.dtype == half and torch.isfinite(p).all()


@pytest.mark.parametrize("bad", [[[[1.0]]], None, 3.0])
def test_sinkhorn_refuses_what_is_not_a_tensor_by_name(bad):
    for fn in (sorting.sinkhorn, sorting.sinkhorn_scaling, sorting.sinkhorn_with_info):
        with pytest.raises(SmoothrankError, match=r"matrix: expected a torch\.Tensor"):
            fn(bad)


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_bilinear_gradient_of_half_precision_scores_at_a_tiny_temperature_is_not_nan(half):
    # An audit (2026-11-25): the backward divided by tau in float16, overflowed to inf, and inf - inf
    # then gave NaN to every item, including those whose gradient is 0. The true gradient (3e6 on
    # two items) overflows float16: +-inf there, as neural_sort's own gradient gives, and 0 elsewhere.
    # (bfloat16 has float32's range and never overflowed here: that case guards the same result.)
    mask = torch.tensor([[True, True, True, True, False]])
    wide = torch.tensor([[1.0, 1.0, 1.0, 0.0, 2.0]])
    left, right = torch.ones(1, 5), torch.arange(5.0).unsqueeze(0)
    grads = {}
    for dtype in (half, torch.float32):
        scores = wide.to(dtype).requires_grad_(True)
        value, _ = sorting.neural_sort_bilinear(scores, left.to(dtype), right.to(dtype), mask=mask,
                                                temperature=1e-6, sinkhorn=False)
        (grads[dtype],) = torch.autograd.grad(value.sum(), scores)
    reference, got = grads[torch.float32], grads[half].float()
    assert not torch.isnan(got).any() and (reference != 0).sum() == 2
    big = reference.abs() > torch.finfo(half).max
    assert torch.equal(got[big], reference[big].sign() * math.inf)
    torch.testing.assert_close(got[~big], reference[~big], rtol=1e-2, atol=0.0)
