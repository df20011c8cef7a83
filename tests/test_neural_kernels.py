"""NeuralNDCG's compiled CPU kernel (smoothrank.neural_kernels) against the PyTorch path of
``smoothrank.sorting`` (``neural_kernels.USE_KERNELS = False``), and its autograd contract."""

from __future__ import annotations

import pytest
import torch

from smoothrank import losses, neural_kernels
from smoothrank._autograd import NotTwiceDifferentiable


def _inputs(dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(7, 23, generator=gen, dtype=torch.float64).to(dtype)
    labels = torch.randint(0, 5, (7, 23), generator=gen).to(dtype)
    mask = torch.rand(7, 23, generator=gen) > 0.3  # padding anywhere in a row
    mask[0] = False  # a fully padded row
    mask[1] = False
    mask[1, 5] = True  # one real item
    labels[2] = 0.0  # no relevant document
    scores[3, 2:9] = 0.5  # ties
    return scores, labels, mask


def _value_and_grad(fn, scores, labels, mask, use: bool, **options):
    neural_kernels.USE_KERNELS = use
    try:
        x = scores.clone().requires_grad_(True)
        value = fn(x, labels, mask=mask, reduction="none", **options)
        value.sum().backward()
        return value.detach(), x.grad
    finally:
        neural_kernels.USE_KERNELS = True


OPTIONS = [{}, {"k": 5}, {"temperature": 0.1}, {"sinkhorn": False}, {"gain": "linear", "discount": "letor"},
           {"max_iter": 4, "tol": 0.0}, {"temperature": 1e-4}]


@pytest.mark.parametrize("name", ["neural_ndcg", "neural_ndcg_transposed"])
@pytest.mark.parametrize("options", OPTIONS, ids=str)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_kernel_equals_the_pytorch_path(name, options, dtype):
    fn = getattr(losses, name)
    scores, labels, mask = _inputs(dtype)
    assert neural_kernels.covers(scores)
    v1, g1 = _value_and_grad(fn, scores, labels, mask, True, **options)
    v0, g0 = _value_and_grad(fn, scores, labels, mask, False, **options)
    assert v1.dtype == v0.dtype == g1.dtype == dtype
    # float64: round-off; float32: the PyTorch path rounds P-hat and runs Sinkhorn in float32
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    torch.testing.assert_close(v1, v0, rtol=tol, atol=tol)
    torch.testing.assert_close(g1, g0, rtol=tol, atol=tol * float(g0.abs().max()))
    assert (g1[~mask] == 0).all() and (g1[:3] == 0).all()  # padding, one item, no relevant document


def test_stochastic_draws_the_same_noise():
    scores, labels, mask = _inputs(torch.float64)
    opts = {"stochastic": True, "n_samples": 3, "generator": 5}
    v1, g1 = _value_and_grad(losses.neural_ndcg, scores, labels, mask, True, **opts)
    v0, g0 = _value_and_grad(losses.neural_ndcg, scores, labels, mask, False, **opts)
    torch.testing.assert_close(v1, v0, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g1, g0, rtol=1e-12, atol=1e-12)


def test_gradcheck_and_no_second_derivative():
    scores, labels, mask = _inputs(torch.float64, seed=1)
    x = (scores * 0.7).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda s: losses.neural_ndcg(s, labels, mask=mask, reduction="sum",
                                                                 tol=0.0), (x,))
    value = losses.neural_ndcg(x, labels, mask=mask, reduction="sum")
    (grad,) = torch.autograd.grad(value, x, create_graph=True)
    with pytest.raises(NotTwiceDifferentiable):
        grad.sum().backward()


def test_values_without_a_gradient_and_thread_invariance():
    scores, labels, mask = _inputs(torch.float32, seed=2)
    with torch.no_grad():
        plain = losses.neural_ndcg(scores, labels, mask=mask, reduction="none")
    v, g = _value_and_grad(losses.neural_ndcg, scores, labels, mask, True)
    assert torch.equal(plain, v)
    import numba

    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        v1, g1 = _value_and_grad(losses.neural_ndcg, scores, labels, mask, True)
    finally:
        numba.set_num_threads(before)
    assert torch.equal(v, v1) and torch.equal(g, g1)


def test_not_covered_off_the_cpu_float_range():
    assert not neural_kernels.covers(torch.tensor([[1e300, 0.0]], dtype=torch.float64))
    assert not neural_kernels.covers(torch.zeros(2, 3, dtype=torch.bfloat16))
    assert neural_kernels.covers(torch.zeros(0, 3))
