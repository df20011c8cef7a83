"""SoftRank rank distributions: exact Rank-Binomial, kernels, gradients, normal approximation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from conftest import on_one_and_two_numba_threads
from hypothesis import given, settings
from hypothesis import strategies as st

from smoothrank.errors import SmoothrankError
from smoothrank.gains import discount
from smoothrank.softrank import (
    expected_ranks,
    hybrid_rank_distributions,
    normal_rank_distributions,
    pairwise_probabilities,
    rank_distributions,
    shallow_discount,
    soft_rank,
)
from smoothrank.softrank.rank_binomial import HAVE_NUMBA

BACKENDS = (["numba"] if HAVE_NUMBA else []) + ["torch", "fft"]
F64 = torch.float64


def brute_force(pi: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Enumerate all 2^(m-1) win/lose outcomes of each real document's contests."""
    n = pi.shape[0]
    out = np.zeros((n, n))
    real = [i for i in range(n) if mask[i]]
    for j in real:
        others = [i for i in real if i != j]
        for outcome in itertools.product((0, 1), repeat=len(others)):
            prob = 1.0
            for i, beaten in zip(others, outcome, strict=True):
                prob *= pi[i, j] if beaten else 1.0 - pi[i, j]
            out[j, sum(outcome)] += prob
    return out


def random_case(n: int, seed: int, *, pad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(1, n, generator=g, dtype=F64) * 2
    mask = torch.rand(1, n, generator=g) > 0.25 if pad else torch.ones(1, n, dtype=torch.bool)
    mask[0, int(torch.randint(n, (1,), generator=g))] = True
    return scores, mask


# ----------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 10])
def test_matches_brute_force_enumeration(n: int, backend: str) -> None:
    scores, mask = random_case(n, seed=n, pad=n > 2)
    pi = pairwise_probabilities(scores, sigma=0.8, mask=mask)
    p = rank_distributions(pi, mask=mask, backend=backend)[0].numpy()
    ref = brute_force(pi[0].numpy(), mask[0].numpy())
    np.testing.assert_allclose(p, ref, rtol=0, atol=1e-12)
    # from the scores: the fused kernel (contests formed inside) on the numba backend
    fused = soft_rank(scores, sigma=0.8, mask=mask, backend=backend)[0].numpy()
    np.testing.assert_allclose(fused, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_brute_force_with_arbitrary_probabilities(backend: str) -> None:
    # Contest probabilities not induced by scores (the recursion does not assume pi_ij + pi_ji = 1).
    g = torch.Generator().manual_seed(3)
    pi = torch.rand(1, 7, 7, generator=g, dtype=F64)
    pi[0, 2, :] = 1.0  # certain wins
    pi[0, :, 4] = 0.0  # certain losses
    p = rank_distributions(pi, backend=backend)[0].numpy()
    ref = brute_force(pi[0].numpy(), np.ones(7, dtype=bool))
    np.testing.assert_allclose(p, ref, rtol=0, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 12), seed=st.integers(0, 10_000), sigma=st.floats(1e-3, 10.0))
def test_rows_sum_to_one_and_mean_is_expected_rank(n: int, seed: int, sigma: float) -> None:
    scores, mask = random_case(n, seed)
    p = soft_rank(scores, sigma=sigma, mask=mask)
    m = int(mask.sum())
    sums = p.sum(-1)
    torch.testing.assert_close(sums, mask.to(F64), rtol=0, atol=1e-12)
    ranks = torch.arange(n, dtype=F64)
    mean = (p * ranks).sum(-1)
    torch.testing.assert_close(mean, expected_ranks(scores, sigma=sigma, mask=mask), rtol=0, atol=1e-10)
    assert float(p[..., m:].abs().sum()) == 0.0  # no mass beyond the real ranks


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncation_is_a_prefix_of_the_full_distribution(backend: str) -> None:
    scores = torch.randn(3, 15, dtype=F64)
    mask = torch.rand(3, 15) > 0.3
    pi = pairwise_probabilities(scores, sigma=0.5, mask=mask)
    full = rank_distributions(pi, mask=mask, backend=backend)
    for r in (1, 4, 15):
        torch.testing.assert_close(rank_distributions(pi, mask=mask, max_rank=r, backend=backend),
                                   full[..., :r], rtol=0, atol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_anywhere_equals_the_compacted_list(backend: str) -> None:
    g = torch.Generator().manual_seed(5)
    scores = torch.randn(2, 9, generator=g, dtype=F64)
    mask = torch.tensor([[False, True, True, False, True, True, False, True, True],
                         [True, False, False, False, False, False, False, False, True]])
    scores_padded = torch.where(mask, scores, torch.full_like(scores, 1e30))  # junk padding
    p = soft_rank(scores_padded, sigma=0.7, mask=mask, backend=backend)
    for b in range(2):
        compact = soft_rank(scores[b][mask[b]][None], sigma=0.7, backend=backend)[0]
        m = compact.shape[0]
        torch.testing.assert_close(p[b][mask[b]][:, :m], compact, rtol=0, atol=1e-14)
        assert float(p[b][~mask[b]].abs().sum()) == 0.0


def test_fully_padded_rows_and_empty_lists() -> None:
    scores = torch.randn(2, 4, dtype=F64, requires_grad=True)
    mask = torch.tensor([[False] * 4, [True, False, True, True]])
    p = soft_rank(scores, mask=mask)
    assert float(p[0].detach().abs().sum()) == 0.0
    (p * torch.randn_like(p)).sum().backward()
    assert torch.isfinite(scores.grad).all() and float(scores.grad[0].abs().sum()) == 0.0
    assert soft_rank(torch.zeros(3, 0)).shape == (3, 0, 0)


# ----------------------------------------------------------------------------- kernels and gradients
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is a declared dependency; needed to compare kernels")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("max_rank", [None, 3])
def test_numba_and_torch_paths_agree(dtype: torch.dtype, max_rank: int | None) -> None:
    g = torch.Generator().manual_seed(11)
    scores = torch.randn(4, 23, generator=g, dtype=dtype) * 3
    mask = torch.rand(4, 23, generator=g) > 0.3
    select = torch.rand(4, 23, generator=g) > 0.5
    pi = pairwise_probabilities(scores, sigma=1.0, mask=mask).requires_grad_()
    weights = torch.randn(4, 23, 23 if max_rank is None else max_rank, generator=g, dtype=dtype)
    out, grads = [], []
    for backend in ("numba", "torch", "fft"):
        p = rank_distributions(pi, mask=mask, max_rank=max_rank, select=select, backend=backend)
        (grad,) = torch.autograd.grad((p * weights).sum(), pi)
        out.append(p)
        grads.append(grad)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for other in (1, 2):
        torch.testing.assert_close(out[other], out[0], rtol=0, atol=tol)
        torch.testing.assert_close(grads[other], grads[0], rtol=0, atol=tol * 10)
    assert all(o.dtype == dtype for o in out) and all(g.dtype == dtype for g in grads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fourier_path_in_blocks_and_at_the_extremes(dtype: torch.dtype,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The FFT form against the recursion: documents cut into many blocks, contests of exactly 0, 1
    and 1/2 (one-hot rank distributions and the frequency where 1 + pi z_k is smallest), an even
    and an odd list length, a list of one."""
    from smoothrank.softrank import rank_binomial

    for n in (1, 2, 9, 40):
        g = torch.Generator().manual_seed(n)
        pi = torch.rand(3, n, n, generator=g, dtype=dtype)
        pi[0] = (pi[0] > 0.5).to(dtype)  # deterministic contests
        pi[1, : n // 2] = 0.5
        mask = torch.ones(3, n, dtype=torch.bool)
        mask[2, n // 3:] = n < 3
        weights = torch.randn(3, n, n, generator=g, dtype=dtype)
        results = []
        for backend, block in (("torch", None), ("fft", 1 << 22), ("fft", max(1, n))):
            monkeypatch.setitem(rank_binomial._FFT_BLOCK_ENTRIES, "cpu", block or 1 << 22)
            x = pi.clone().requires_grad_()
            p = rank_distributions(x, mask=mask, backend=backend)
            (grad,) = torch.autograd.grad((p * weights).sum(), x)
            assert torch.isfinite(p).all() and torch.isfinite(grad).all()
            results.append((p, grad))
        tol = 1e-5 if dtype == torch.float32 else 1e-12
        for p, grad in results[1:]:
            torch.testing.assert_close(p, results[0][0], rtol=0, atol=tol)
            torch.testing.assert_close(grad, results[0][1], rtol=0, atol=tol * max(10, n))


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is a declared dependency; needed to compare kernels")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("max_rank", [None, 7])
def test_blocked_chunked_kernel_matches_the_torch_path(dtype: torch.dtype, max_rank: int | None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Scores -> p on the blocked kernels (documents in SIMD lanes, several blocks per query, the batch
    cut into query chunks) against the pure-PyTorch recursion with autograd through the contests."""
    from smoothrank.softrank import _numba, rank_binomial

    n = _numba.BLOCK + 37  # two blocks, the second one partial
    monkeypatch.setattr(rank_binomial, "CHUNK_ENTRIES", 2 * n * n)  # chunks of 2 queries
    g = torch.Generator().manual_seed(12)
    scores = (torch.randn(5, n, generator=g, dtype=dtype) * 2).requires_grad_()
    mask = torch.rand(5, n, generator=g) > 0.2
    mask[3] = False  # a fully padded query
    weights = torch.randn(5, n, n if max_rank is None else max_rank, generator=g, dtype=dtype)
    out, grads = [], []
    for backend in ("numba", "torch"):
        p = soft_rank(scores, sigma=0.7, mask=mask, max_rank=max_rank, backend=backend)
        (grad,) = torch.autograd.grad((p * weights).sum(), scores)
        out.append(p.detach())
        grads.append(grad)
    tol = 2e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(out[0], out[1], rtol=0, atol=tol)
    torch.testing.assert_close(grads[0], grads[1], rtol=tol, atol=tol * 10)
    assert float(grads[0][3].abs().sum()) == 0.0
    if dtype == torch.float64 and max_rank is not None:  # float64 gradcheck across both blocks
        x = scores[:1].detach().clone().requires_grad_()
        torch.autograd.gradcheck(lambda s: soft_rank(s, sigma=0.7, mask=mask[:1], max_rank=3), (x,))


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is a declared dependency; needed to compare kernels")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("max_rank", [None, 7])
def test_blocked_kernel_on_column_blocks_of_a_long_list(dtype: torch.dtype, max_rank: int | None,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A long list's contests are formed a block of its documents' columns at a time, never (n, n):
    the distributions are bit-identical to whole queries (each column's recursion is the same) and
    the gradient equal to rounding (its sums over the columns are split)."""
    from smoothrank.softrank import _numba, rank_binomial

    n = _numba.BLOCK + 37
    g = torch.Generator().manual_seed(21)
    scores = (torch.randn(3, n, generator=g, dtype=dtype) * 2).requires_grad_()
    mask = torch.rand(3, n, generator=g) > 0.2
    weights = torch.randn(3, n, n if max_rank is None else max_rank, generator=g, dtype=dtype)
    out, grads = [], []
    for chunk in (rank_binomial.CHUNK_ENTRIES, 1):  # whole queries, then columns of one SIMD block
        monkeypatch.setattr(rank_binomial, "CHUNK_ENTRIES", chunk)
        monkeypatch.setattr(rank_binomial, "COLUMN_TASKS", 1)
        assert len(rank_binomial._column_blocks(3, n)) == (1 if chunk > 1 else 6)  # 64 + 37 columns a query
        p = soft_rank(scores, sigma=0.7, mask=mask, max_rank=max_rank, backend="numba")
        (grad,) = torch.autograd.grad((p * weights).sum(), scores)
        out.append(p.detach())
        grads.append(grad)
    torch.testing.assert_close(out[1], out[0], rtol=0, atol=0)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(grads[1], grads[0], rtol=tol, atol=tol)


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is a declared dependency; needed to compare kernels")
@pytest.mark.parametrize("method", ["exact", "hybrid"])
def test_kernels_give_the_same_bits_on_any_number_of_threads(method: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Column blocks of a long list and the hybrid's chunks of documents are fixed, not sized by the
    thread count: distributions and gradients are bit-identical on 1 and 2 threads (the first
    version's column width grew with the threads, and the gradient's float32 sums with it)."""

    from smoothrank.softrank import _numba, rank_binomial

    monkeypatch.setattr(rank_binomial, "CHUNK_ENTRIES", 1)  # every list "long": column blocks
    monkeypatch.setattr(rank_binomial, "COLUMN_TASKS", 1)
    monkeypatch.setattr(_numba, "FUSED_CHUNKS", 5)  # several chunks of documents, queries shared
    g = torch.Generator().manual_seed(31)
    scores = torch.randn(4, 3 * _numba.BLOCK + 9, generator=g)
    mask = torch.rand(scores.shape, generator=g) > 0.1
    weights = torch.randn(*scores.shape, 10, generator=g)

    def compute() -> tuple[torch.Tensor, torch.Tensor]:
        x = scores.clone().requires_grad_()
        p = soft_rank(x, sigma=0.8, mask=mask, max_rank=10, method=method, n_exact=3)
        (grad,) = torch.autograd.grad((p * weights).sum(), x)
        return p.detach(), grad

    results = on_one_and_two_numba_threads(compute)
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is a declared dependency; needed to compare kernels")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 2, 40, 49])  # segments of ceil(sqrt(n)) steps, the last one partial
@pytest.mark.parametrize("max_rank", [None, 3])  # R >= every, and R < every (checkpoints clipped to R)
def test_hybrid_backward_from_checkpoints_equals_keeping_every_state(n: int, dtype: torch.dtype,
                                                                     max_rank: int | None,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-document kernel's backward keeps the states of a long recursion only every sqrt(n)
    steps and regenerates each segment: the gradient is bit-identical to keeping them all."""
    from smoothrank.softrank import _numba

    g = torch.Generator().manual_seed(n)
    scores = torch.randn(2, n, generator=g, dtype=dtype) * 1.5
    mask = torch.rand(2, n, generator=g) > 0.2
    mask[:, 0] = True
    weights = torch.randn(2, n, n if max_rank is None else min(max_rank, n), generator=g, dtype=dtype)
    grads = []
    for states in (_numba.FUSED_STATES, 1):  # all states kept; checkpoints
        monkeypatch.setattr(_numba, "FUSED_STATES", states)
        x = scores.clone().requires_grad_()
        p = soft_rank(x, sigma=0.8, mask=mask, method="hybrid", n_exact=3, max_rank=max_rank)
        (grad,) = torch.autograd.grad((p * weights).sum(), x)
        grads.append(grad)
    assert torch.equal(grads[0], grads[1])
    if dtype == torch.float64 and n == 40 and max_rank is None:
        x = scores[:1, :12].clone().requires_grad_()
        torch.autograd.gradcheck(lambda s: soft_rank(s, sigma=0.8, method="hybrid", n_exact=2), (x,))


@pytest.mark.parametrize("chunk", [1 << 20, 500, 7])  # whole queries; row blocks of one query
def test_normal_and_hybrid_from_scores_match_the_autograd_formulas(chunk: int,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocked moment and normal Functions (no (batch, n, n) tensor kept) against autograd
    through pi, whole queries or a few rows of one query at a time."""
    from smoothrank import _blocks

    monkeypatch.setattr(_blocks, "CHUNK_ELEMENTS", chunk)
    g = torch.Generator().manual_seed(13)
    scores = torch.randn(3, 40, generator=g, dtype=F64).requires_grad_()
    mask = torch.rand(3, 40, generator=g) > 0.25
    weights = torch.randn(3, 40, 40, generator=g, dtype=F64)
    for method in ("normal", "hybrid"):
        p = soft_rank(scores, sigma=0.9, mask=mask, method=method, n_exact=3)
        (grad,) = torch.autograd.grad((p * weights).sum(), scores)
        pi = pairwise_probabilities(scores, sigma=0.9, mask=mask)
        ref = (normal_rank_distributions(pi, mask=mask) if method == "normal"
               else hybrid_rank_distributions(pi, mask=mask, n_exact=3))
        (ref_grad,) = torch.autograd.grad((ref * weights).sum(), scores)
        torch.testing.assert_close(p, ref, rtol=0, atol=1e-13)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("max_rank", [None, 2])
def test_gradcheck_exact(backend: str, max_rank: int | None) -> None:
    scores = torch.randn(2, 6, dtype=F64, requires_grad=True)
    mask = torch.tensor([[True, False, True, True, True, True], [True, True, True, False, True, False]])
    torch.autograd.gradcheck(
        lambda s: soft_rank(s, sigma=0.9, mask=mask, max_rank=max_rank, backend=backend), (scores,))


def test_gradcheck_normal_hybrid_and_sinkhorn() -> None:
    scores = torch.randn(2, 7, dtype=F64, requires_grad=True)
    mask = torch.tensor([[True] * 7, [True, False, True, True, False, True, True]])
    torch.autograd.gradcheck(lambda s: soft_rank(s, sigma=1.3, mask=mask, method="normal"), (scores,))
    torch.autograd.gradcheck(
        lambda s: soft_rank(s, sigma=1.3, mask=mask, method="hybrid", n_exact=1), (scores,))
    torch.autograd.gradcheck(
        lambda s: soft_rank(s, sigma=1.3, mask=mask, sinkhorn=True, max_iter=5), (scores,))


def eq18_jacobian(scores: np.ndarray, sigma: float) -> np.ndarray:
    """The paper's forward-mode recursion (eq. 18, with psi^(i-1) on the right) for dp_j(r)/ds_m.

    Independent of the adjoint backward: psi_{m,j}^(i)(r) = psi^(i-1)(r-1) pi_ij
    + psi^(i-1)(r) (1 - pi_ij) + (p^(i-1)(r-1) - p^(i-1)(r)) dpi_ij/ds_m, with eq. 20 for dpi/ds.
    """
    n = len(scores)
    c = sigma * math.sqrt(2.0)

    def pi_(i: int, j: int) -> float:
        return 0.5 * math.erfc(-(scores[i] - scores[j]) / c / math.sqrt(2.0))

    def dens(x: float) -> float:  # N(0 | x, 2 sigma^2)
        return math.exp(-x * x / (2 * c * c)) / (c * math.sqrt(2 * math.pi))

    jac = np.zeros((n, n, n))  # [j, r, m]
    for j in range(n):
        for m in range(n):
            p = np.zeros(n)
            p[0] = 1.0
            psi = np.zeros(n)
            for i in range(n):
                if i == j:
                    continue
                pij = pi_(i, j)
                if m == i:
                    dpi = dens(scores[m] - scores[j])
                elif m == j:
                    dpi = -dens(scores[i] - scores[m])
                else:
                    dpi = 0.0
                p_shift = np.concatenate([[0.0], p[:-1]])
                psi_shift = np.concatenate([[0.0], psi[:-1]])
                psi = psi_shift * pij + psi * (1 - pij) + (p_shift - p) * dpi
                p = p_shift * pij + p * (1 - pij)
            jac[j, :, m] = psi
    return jac


@pytest.mark.parametrize("backend", BACKENDS)
def test_adjoint_matches_the_papers_derivative_recursion(backend: str) -> None:
    scores = torch.tensor([0.3, -1.2, 0.9, 0.35, 2.0], dtype=F64)
    sigma = 0.6
    jac = torch.autograd.functional.jacobian(
        lambda s: soft_rank(s[None], sigma=sigma, backend=backend)[0], scores)
    np.testing.assert_allclose(jac.numpy(), eq18_jacobian(scores.numpy(), sigma), rtol=0, atol=1e-12)


@pytest.mark.parametrize("sigma", [1e-4, 1e-2, 1.0, 1e2])
@pytest.mark.parametrize("method", ["exact", "normal", "hybrid"])
def test_finite_gradients_on_ties_and_huge_gaps(sigma: float, method: str) -> None:
    scores = torch.tensor([[0.0, 0.0, 0.0, 1e6, -1e6, 3.0, 3.0, 1e-9]], requires_grad=True)
    p = soft_rank(scores, sigma=sigma, method=method, n_exact=1)
    assert torch.isfinite(p).all()
    (p * torch.arange(8.0)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    torch.testing.assert_close(p.sum(-1), torch.ones(1, 8), rtol=0, atol=1e-5)


def test_rejects_bad_options() -> None:
    s = torch.randn(2, 4)
    with pytest.raises(SmoothrankError, match="sigma"):
        soft_rank(s, sigma=0.0)
    with pytest.raises(SmoothrankError, match="sigma"):
        soft_rank(s, sigma=float("nan"))
    with pytest.raises(SmoothrankError, match="method"):
        soft_rank(s, method="approx")
    with pytest.raises(SmoothrankError, match="n_exact"):
        soft_rank(s, method="hybrid", n_exact=-1)
    with pytest.raises(SmoothrankError, match="max_rank"):
        soft_rank(s, max_rank=0)
    with pytest.raises(SmoothrankError, match="max_rank"):
        soft_rank(s, max_rank="x")
    with pytest.raises(SmoothrankError, match="sinkhorn"):
        soft_rank(s, sinkhorn="yes")
    with pytest.raises(SmoothrankError, match="max_iter"):
        soft_rank(s, sinkhorn=True, max_iter=None)
    with pytest.raises(SmoothrankError, match="sigma"):
        soft_rank(s, sigma="1")
    with pytest.raises(SmoothrankError, match="mask"):
        soft_rank(s, mask=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(SmoothrankError, match="backend"):
        soft_rank(s, backend="cuda")


# ----------------------------------------------------------------------------- approximations
def test_sinkhorn_moves_the_pairwise_approximation_towards_the_true_process() -> None:
    """Monte Carlo of the exact generative process (sample scores, sort, histogram the ranks).

    Measured (n = 8, sigma = 0.5, 200k samples, three queries): mean |p - p_MC| about 0.023-0.035
    for the Rank-Binomial and 0.014-0.019 after Sinkhorn scaling; MC noise is about 1e-3.
    """
    n, sigma, n_samples = 8, 0.5, 200_000
    gen = torch.Generator().manual_seed(0)
    for _trial in range(3):
        scores = torch.randn(1, n, generator=gen, dtype=F64)
        plain = soft_rank(scores, sigma=sigma)[0]
        scaled = soft_rank(scores, sigma=sigma, sinkhorn=True, max_iter=200, tol=1e-10)[0]
        samples = scores + sigma * torch.randn(n_samples, n, generator=gen, dtype=F64)
        ranks = samples.argsort(dim=1, descending=True).argsort(dim=1)
        mc = torch.zeros(n, n, dtype=F64).scatter_add_(1, ranks.T.contiguous(),
                                                        torch.ones(n, n_samples, dtype=F64)) / n_samples
        err_plain = float((plain - mc).abs().mean())
        err_scaled = float((scaled - mc).abs().mean())
        print(f"MC mean abs error: rank-binomial {err_plain:.4f}, with sinkhorn {err_scaled:.4f}")
        assert 0.005 < err_plain < 0.15  # a real, but moderate, approximation error
        assert err_scaled < 0.85 * err_plain


def test_normal_approximation_error_shrinks_with_n() -> None:
    """Max |p_normal - p_exact| over documents and ranks, reported for n = 10, 30, 100, 240.

    Measured (scores ~ N(0, 1), sigma = 1): about 0.085, 0.048, 0.015, 0.0077.
    """
    gen = torch.Generator().manual_seed(1)
    errors = []
    for n in (10, 30, 100, 240):
        scores = torch.randn(2, n, generator=gen, dtype=F64)
        pi = pairwise_probabilities(scores, sigma=1.0)
        exact = rank_distributions(pi)
        approx = normal_rank_distributions(pi)
        torch.testing.assert_close(approx.sum(-1), torch.ones(2, n, dtype=F64), rtol=0, atol=1e-12)
        errors.append(float((exact - approx).abs().max()))
    print("normal approximation max error for n = 10, 30, 100, 240:", [f"{e:.4f}" for e in errors])
    assert all(a > b for a, b in itertools.pairwise(errors))
    assert errors[-1] < 0.01


def test_hybrid_is_exact_at_both_ends_and_normal_in_between() -> None:
    scores = torch.arange(12, dtype=F64)[None] * 0.3
    pi = pairwise_probabilities(scores, sigma=1.0)
    exact = rank_distributions(pi)
    approx = normal_rank_distributions(pi)
    hybrid = hybrid_rank_distributions(pi, n_exact=2)
    # expected ranks: the highest scores (indices 11, 10) and the lowest (0, 1) are exact.
    for j in (0, 1, 10, 11):
        torch.testing.assert_close(hybrid[0, j], exact[0, j], rtol=0, atol=0)
    for j in range(2, 10):
        torch.testing.assert_close(hybrid[0, j], approx[0, j], rtol=0, atol=0)
    torch.testing.assert_close(hybrid_rank_distributions(pi, n_exact=6), exact, rtol=0, atol=0)


def test_hybrid_by_default_is_exact_for_ten_documents_at_each_end() -> None:
    # The documented default n_exact=10 of soft_rank itself (soft_ndcg passes its own); a mutation
    # review found no test depending on it.
    shuffle = torch.randperm(30, generator=torch.Generator().manual_seed(0))
    scores = torch.linspace(-3, 3, 30, dtype=F64)[shuffle]
    hybrid = soft_rank(scores[None], sigma=1.0, method="hybrid")[0]
    exact = soft_rank(scores[None], sigma=1.0, method="exact")[0]
    normal = soft_rank(scores[None], sigma=1.0, method="normal")[0]
    by_rank = torch.argsort(scores, descending=True)
    for j in (*by_rank[:10].tolist(), *by_rank[-10:].tolist()):
        torch.testing.assert_close(hybrid[j], exact[j], rtol=0, atol=1e-12)
    for j in by_rank[10:-10].tolist():
        torch.testing.assert_close(hybrid[j], normal[j], rtol=0, atol=1e-12)


def test_hybrid_treats_identical_documents_alike() -> None:
    # Twins (same score, same label) straddling the n_exact boundary: one was exact, the other
    # normal, and their gradients differed (-0.0156 vs -0.0167).
    from smoothrank.losses import soft_ndcg

    scores = torch.tensor([[3.0, 0, 0, -2, 1.5, 2.5, 1]], dtype=F64, requires_grad=True)
    labels = torch.tensor([[0.0, 4, 4, 1, 0, 2, 1]], dtype=F64)
    soft_ndcg(scores, labels, method="hybrid", n_exact=2).backward()
    assert scores.grad[0, 1].item() == scores.grad[0, 2].item()
    pi = pairwise_probabilities(scores.detach(), sigma=1.0)
    hybrid, exact = hybrid_rank_distributions(pi, n_exact=2), rank_distributions(pi)
    for j in (0, 1, 2, 3, 5):  # both twins tie with the second lowest score: both exact
        torch.testing.assert_close(hybrid[0, j], exact[0, j], rtol=0, atol=0)
    for j in (4, 6):  # the middle: normal
        assert not torch.allclose(hybrid[0, j], exact[0, j])


def test_hybrid_keeps_its_cost_bound_when_many_documents_tie() -> None:
    # Taking every twin of the boundary document made a list with 1500 equal documents nearly all
    # exact (7x the time); such a group is now left whole to the normal approximation.
    from smoothrank.softrank.normal import _extreme_documents

    mean = torch.cat([torch.full((1500,), -20.0), torch.linspace(-10, 10, 500)])[None].to(F64)
    mask = torch.ones_like(mean, dtype=torch.bool)
    chosen = _extreme_documents(mean, mask, 10)[0]
    assert not chosen[:1500].any()  # the tied group at the low end is treated alike: approximated
    assert chosen[-10:].all() and int(chosen.sum()) == 10  # the high end's 10 distinct documents
    # A small group at the boundary is taken whole: 8 distinct lowest, then 4 twins at the 10th place.
    mean = torch.cat([torch.arange(8.0), torch.full((4,), 8.0), torch.arange(9.0, 100.0)])[None].to(F64)
    chosen = _extreme_documents(mean, torch.ones_like(mean, dtype=torch.bool), 10)[0]
    assert chosen[:12].all() and int(chosen.sum()) == 22


# ----------------------------------------------------------------------------- shallow discounts
def test_shallow_discount_family() -> None:
    n = 60
    ranks = torch.arange(1, n + 1, dtype=F64)
    torch.testing.assert_close(discount(ranks, shallow_discount(1.0, n)), discount(ranks, "log2"),
                               rtol=0, atol=1e-15)
    floor = 1.0 / math.log2(n + 1)
    curves = {a: discount(ranks, shallow_discount(a, n)) for a in (-1.0, -0.5, 0.0, 0.5, 1.0)}
    for a, d in curves.items():
        assert abs(float(d[0]) - 1.0) < 1e-12 and abs(float(d[-1]) - floor) < 1e-12, a
        assert bool((d[1:] <= d[:-1]).all()), a  # non-increasing
    second = {a: d[2:] - 2 * d[1:-1] + d[:-2] for a, d in curves.items()}
    assert float(second[0.0].abs().max()) < 1e-12  # linear
    assert bool((second[1.0] > 0).all()) and bool((second[-1.0] < 0).all())  # log-shaped / reflected
    # alpha moves weight towards the tail monotonically
    means = [float(curves[a].mean()) for a in (1.0, 0.5, 0.0, -0.5, -1.0)]
    assert all(x < y for x, y in itertools.pairwise(means))
    assert float(discount(torch.tensor([100.0]), shallow_discount(0.3, n))) == pytest.approx(floor)
    assert float(discount(torch.tensor([1.0]), shallow_discount(-1.0, 1))) == 1.0
    for bad in (1.5, -2, float("nan"), "x"):
        with pytest.raises(SmoothrankError, match="alpha"):
            shallow_discount(bad, 10)  # type: ignore[arg-type]
    with pytest.raises(SmoothrankError, match="n"):
        shallow_discount(0.0, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("method", ["exact", "normal", "hybrid"])
def test_sigma_below_the_dtype_gives_finite_rank_distributions(dtype: torch.dtype, method: str) -> None:
    # 1e-320 is 0 in float32 and subnormal in float64; held at the smallest normal number. Ties
    # (1.0, 1.0) would meet 0 * inf = NaN at sigma = 0.
    scores = torch.tensor([[0.3, 1.0, 1.0, -2.0]], dtype=dtype, requires_grad=True)
    p = soft_rank(scores, sigma=1e-320, method=method)
    (g,) = torch.autograd.grad((p * torch.arange(4, dtype=dtype)).sum(), scores)
    assert torch.isfinite(p).all() and torch.isfinite(g).all()
    pi = pairwise_probabilities(scores.detach(), sigma=1e-320)
    assert torch.isfinite(pi).all() and pi[0, 1, 0] == 1.0 and pi[0, 1, 2] == 0.5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_contests_and_normal_tails_are_accurate_far_from_the_mean(dtype: torch.dtype) -> None:
    """Phi deep in the lower tail, against SciPy: the contests of well separated documents and the
    normal approximation's bins live there. torch.special.ndtr (CPU, as (1 + erf) / 2) gave
    Phi(-5.5) = 2.98e-8 instead of 1.90e-8 in float32 and 0 from -6 on."""
    from scipy.stats import norm

    from smoothrank.softrank.normal import NormalFromMoments, normal_from_moments

    low = -12.0 if dtype == torch.float32 else -35.0  # float32's normal range ends near Phi(-13)
    gaps = torch.linspace(low, 0.0, 60, dtype=F64)
    scores = torch.cat([torch.zeros(1, dtype=F64), gaps]).to(dtype).unsqueeze(0)
    pi = pairwise_probabilities(scores, sigma=1 / math.sqrt(2.0))  # pi[i, 0] = Phi(s_i - s_0)
    want = norm.cdf(scores[0, 1:].double().numpy())
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    np.testing.assert_allclose(pi[0, 1:, 0].double().numpy(), want, rtol=tol)
    # The normal approximation's first bin of a document whose mean rank is 7 with variance 1:
    # Phi(0.5 - 7) = Phi(-6.5), folded lower tail.
    mean = torch.tensor([[7.0] + [0.0] * 14], dtype=dtype)
    real = torch.ones_like(mean, dtype=torch.bool)
    for p in (normal_from_moments(mean, torch.ones_like(mean), real, 15),
              NormalFromMoments.apply(mean, torch.ones_like(mean), real, 15)):
        np.testing.assert_allclose(float(p[0, 0, 0]), norm.cdf(-6.5), rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("method", ["exact", "normal"])
def test_half_precision_scores_are_ranked_in_float32(dtype: torch.dtype, method: str) -> None:
    """soft_rank on float16/bfloat16 scores computes in float32 and returns the scores' dtype (the
    half-precision moments of a long list were 30-50% off)."""
    g = torch.Generator().manual_seed(4)
    scores = torch.randn(2, 400, generator=g).to(dtype)
    got = soft_rank(scores, sigma=0.5, method=method, max_rank=20)
    want = soft_rank(scores.float(), sigma=0.5, method=method, max_rank=20)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), want, rtol=0, atol=float(torch.finfo(dtype).eps))


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_contest_functions_compute_half_precision_in_float32(half):
    # An audit (2026-11-25): rank_distributions and the normal and hybrid forms computed in pi's
    # dtype; bfloat16 rows of n = 1000 summed to 1 +- 0.065 and mean ranks were off by 52.7 ranks.
    pi = pairwise_probabilities(torch.randn(1, 300, generator=torch.Generator().manual_seed(0),
                                            dtype=torch.float64)).to(half)
    for fn in (rank_distributions, normal_rank_distributions, hybrid_rank_distributions):
        got = fn(pi)
        want = fn(pi.float())  # the same rounded contests, in float32
        assert got.dtype == half
        torch.testing.assert_close(got.float(), want, rtol=0, atol=float(torch.finfo(half).eps))
        assert float((got.float().sum(-1) - 1).abs().max()) < 0.02, fn.__name__


def test_tied_half_precision_scores_have_finite_contest_gradients_at_a_small_sigma():
    # float16 divided by sigma sqrt 2 in its own dtype: density 2.8e5 > 65504, tied pairs inf - inf = NaN
    for half in (torch.float16, torch.bfloat16):
        y = torch.tensor([[1.0, 1.0, 0.0]], dtype=half, requires_grad=True)
        expected_ranks(y, sigma=1e-6).float().sum().backward()
        assert y.grad is not None and torch.isfinite(y.grad).all() and not y.grad.any(), (half, y.grad)
        assert pairwise_probabilities(y.detach(), sigma=1e-6).dtype == half


@pytest.mark.skipif(not HAVE_NUMBA, reason="the compiled kernels need numba")
@pytest.mark.parametrize("kernel", ["blocked", "per_document", "fused"])
def test_the_kernels_leave_no_subnormal_probabilities(kernel: str) -> None:
    """The tails of a rank distribution decay through the subnormal range (float32: below 1.2e-38,
    after about 126 contests at pi = 1/2), and Intel cores take a microcode assist on every
    subnormal operand: exact SoftNDCG at 64 x 240 took 2.3 s on an Intel Xeon, 0.18 s with the
    states flushed (docs/softrank.md). The kernels flush to zero below tiny / eps; what that drops
    is far below float32's last digit of a distribution that sums to 1."""
    from smoothrank.softrank import _numba

    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 240, generator=gen) * 0.3  # close contests: long, slowly decaying tails
    mask = torch.ones(2, 240, dtype=torch.bool)
    pi = pairwise_probabilities(scores, sigma=1.0)
    if kernel == "blocked":
        p = _numba.blocked_forward(pi.contiguous().numpy(), mask.numpy(), 240)
    elif kernel == "per_document":
        p = _numba.forward(pi.transpose(1, 2).contiguous().numpy(), mask.numpy(), mask.numpy(), 240)
    else:
        rows = np.arange(2 * 240, dtype=np.int64)
        p = _numba.fused_forward(scores.numpy(), mask.numpy(), rows, 1.0, 240)
    info = np.finfo(np.float32)
    assert p.dtype == np.float32
    assert not np.any((p > 0) & (p < info.tiny / info.eps))  # every entry 0 or comfortably normal
    assert np.count_nonzero(p == 0) > 0  # the tails were there to flush
    np.testing.assert_allclose(p.reshape(-1, 240).sum(-1), 1.0, rtol=0, atol=1e-5)
    exact = rank_distributions(pi.double(), mask=mask, backend="torch").numpy().reshape(p.shape)
    np.testing.assert_allclose(p, exact, rtol=0, atol=1e-6)


@pytest.mark.skipif(not HAVE_NUMBA, reason="the compiled kernels need numba")
@pytest.mark.parametrize("kernel", ["blocked", "per_document"])
def test_the_flush_to_zero_keeps_negative_states_of_contests_just_past_0_or_1(kernel: str) -> None:
    """check_contest_matrix accepts contests up to 1e-3 past 0 or 1 (a rounding, gradcheck's step
    at saturated contests); their states are slightly negative. The kernels' flush (``_ftz``) took
    every state below tiny / eps to 0, negatives included: a contest at 1.0005 gave rows summing to
    1.0005, 5e-4 off the torch backend, and gradcheck at saturated contests failed."""
    from smoothrank.softrank import _numba

    s = torch.arange(5, dtype=torch.float64)
    pi = (s[:, None] > s[None, :]).double()[None].clone()  # saturated: exactly 0 or 1
    pi[0, 3, 1], pi[0, 1, 3] = 1.0005, -0.0005
    mask = np.ones((1, 5), dtype=bool)
    if kernel == "blocked":
        p = _numba.blocked_forward(pi.numpy(), mask, 5)
    else:
        p = _numba.forward(pi.transpose(1, 2).contiguous().numpy(), mask, mask, 5)
    exact = rank_distributions(pi, backend="torch").numpy()
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(p, exact, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(lambda x: rank_distributions(x, backend="numba"),
                                    ((s[:, None] > s[None, :]).double()[None].requires_grad_(),))


def _blocked_expected_discounts(scores: torch.Tensor, mask: torch.Tensor, disc: torch.Tensor, sigma: float,
                                weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """E[D(r_j)] and the gradient of ``sum(weights * E)`` through the blocked kernels' distributions."""
    from smoothrank.softrank.rank_binomial import score_rank_distributions

    x = scores.clone().requires_grad_()
    p = score_rank_distributions(x, sigma=sigma, mask=mask, max_rank=disc.shape[-1])
    ed = (p * disc[:, None, :]).sum(-1)
    (grad,) = torch.autograd.grad((ed * weights).sum(), x)
    return ed.detach(), grad


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is a declared dependency; needed to compare kernels")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("n", "max_rank"), [(1, 1), (2, 2), (7, 3), (45, 45), (70, 10), (70, 70)])
def test_jacobian_kernel_equals_the_blocked_distributions(n: int, max_rank: int, dtype: torch.dtype) -> None:
    """The per-query kernel (expected discounts and their Jacobian in one pass, more than one lane
    block at n = 45 and 70) against the blocked kernels' distributions: padding anywhere, tied
    scores, a fully padded query, a query of one document, well separated scores (contests of 0
    and 1, states flushed to zero at both ends)."""
    from smoothrank.softrank.rank_binomial import score_exact_expected_discounts

    g = torch.Generator().manual_seed(n * 100 + max_rank)
    scores = torch.randn(5, n, generator=g, dtype=torch.float64)
    scores[1, : n // 2] = 0.25  # ties
    scores[3] = torch.arange(n, dtype=torch.float64) * 9.0  # well separated
    mask = torch.rand(5, n, generator=g) > 0.2
    mask[0] = True
    mask[2] = False
    mask[4] = False
    mask[4, n - 1] = True
    scores = scores.to(dtype)
    disc = (1.0 / torch.log2(torch.arange(max_rank, dtype=torch.float64) + 2.0)).expand(5, max_rank).to(dtype)
    weights = torch.randn(5, n, generator=g, dtype=dtype)
    ref_ed, ref_grad = _blocked_expected_discounts(scores, mask, disc, 0.7, weights)
    x = scores.clone().requires_grad_()
    ed = score_exact_expected_discounts(x, disc, sigma=0.7, mask=mask)
    (grad,) = torch.autograd.grad((ed * weights).sum(), x)
    tol = 2e-6 if dtype == torch.float32 else 1e-13
    torch.testing.assert_close(ed.detach(), ref_ed, rtol=tol, atol=tol)
    torch.testing.assert_close(grad, ref_grad, rtol=tol, atol=tol * float(ref_grad.abs().max()))
    assert not bool(ed[~mask].any()) and not bool(grad[~mask].any())


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is a declared dependency; needed to compare kernels")
def test_jacobian_kernel_gives_the_same_bits_on_any_number_of_threads() -> None:

    from smoothrank.softrank.rank_binomial import score_exact_expected_discounts

    g = torch.Generator().manual_seed(5)
    scores = torch.randn(3, 80, generator=g)
    mask = torch.rand(scores.shape, generator=g) > 0.1
    disc = (1.0 / torch.log2(torch.arange(80) + 2.0)).expand(3, 80)
    weights = torch.randn(3, 80, generator=g)

    def compute() -> tuple[torch.Tensor, torch.Tensor]:
        x = scores.clone().requires_grad_()
        ed = score_exact_expected_discounts(x, disc, sigma=1.0, mask=mask)
        (grad,) = torch.autograd.grad((ed * weights).sum(), x)
        return ed.detach(), grad

    results = on_one_and_two_numba_threads(compute)
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is a declared dependency; needed to compare kernels")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_jacobian_kernel_selected_rows_are_the_full_rows(dtype: torch.dtype) -> None:
    """``select``: the selected documents' expected discounts and Jacobian rows are the bits of the
    computation over every document (unselected ones still compete); the others are zero."""
    from smoothrank._softrank_numba import expected_discounts

    g = torch.Generator().manual_seed(11)
    scores = torch.randn(4, 70, generator=g).to(dtype)
    scores[1, :20] = 0.5  # ties
    mask = torch.rand(4, 70, generator=g) > 0.15
    select = torch.rand(4, 70, generator=g) > 0.6
    select[3] = False  # nothing wanted
    disc = (1.0 / torch.log2(torch.arange(70) + 2.0)).expand(4, 70).to(dtype).contiguous().numpy()
    full_ed, full_jac = expected_discounts(scores.numpy(), mask.numpy(), disc, 0.8, True)
    ed, jac = expected_discounts(scores.numpy(), mask.numpy(), disc, 0.8, True, select.numpy())
    assert full_jac is not None and jac is not None
    keep = (select & mask).numpy()
    assert keep.sum() > 40 and (mask & ~select).sum() > 100
    np.testing.assert_array_equal(ed[keep], full_ed[keep])
    np.testing.assert_array_equal(jac[keep], full_jac[keep])
    assert not ed[~keep].any() and not jac[~keep].any()


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is a declared dependency; needed to compare kernels")
def test_exact_expected_discounts_select_zeroes_the_others_and_checks_its_shape() -> None:
    from smoothrank.softrank.rank_binomial import score_exact_expected_discounts

    scores = torch.randn(2, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    mask = torch.ones(2, 6, dtype=torch.bool)
    disc = (1.0 / torch.log2(torch.arange(6) + 2.0)).expand(2, 6).double()
    select = torch.tensor([[True, False] * 3, [False] * 6])
    full = score_exact_expected_discounts(scores, disc, sigma=0.5, mask=mask)
    ed = score_exact_expected_discounts(scores, disc, sigma=0.5, mask=mask, select=select)
    assert torch.equal(ed[select], full[select]) and not ed[~select].any()
    with pytest.raises(SmoothrankError, match=r"select: shape \(2, 5\) differs from scores \(2, 6\)"):
        score_exact_expected_discounts(scores, disc, sigma=0.5, mask=mask, select=select[:, :5])
