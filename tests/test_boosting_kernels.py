"""The compiled boosting kernels (smoothrank.boosting_kernels) against the losses' PyTorch path.

Every case computes ``boosting_gradients`` twice, with the kernels and with PyTorch alone
(``boosting._FLAT_KERNELS = False``), on queries of varied sizes: size 1, ties in the scores, a
query of all-zero labels and one of equal positive labels.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from conftest import on_one_and_two_numba_threads

from smoothrank import boosting, boosting_kernels, losses
from smoothrank.boosting import boosting_gradients
from smoothrank.errors import SmoothrankError

SIZES = np.array([1, 2, 5, 17, 40, 3, 8, 60, 1, 12, 2, 9])


def _problem(seed: int = 1, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = int(SIZES.sum())
    labels = rng.integers(0, 5, n).astype(np.float64)
    labels[3:8] = 0.0  # a query of all-zero labels
    labels[8:25] = 1.0  # a query of equal positive labels
    scores = scale * rng.normal(size=n)
    scores[30:36] = 0.25  # ties
    scores[70:75] = scores[75]
    return scores, labels


def _both(loss: object, hessian: str, scores: np.ndarray, labels: np.ndarray, **options: object
          ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    fast = boosting_gradients(loss, scores, labels, SIZES, hessian=hessian, **options)
    try:
        boosting._FLAT_KERNELS = False
        slow = boosting_gradients(loss, scores, labels, SIZES, hessian=hessian, **options)
    finally:
        boosting._FLAT_KERNELS = True
    return fast, slow


Pair = tuple[np.ndarray, np.ndarray]


def _assert_close(fast: Pair, slow: Pair, rtol: float) -> None:
    for a, b in zip(fast, slow, strict=True):
        scale = max(float(np.abs(b).max()), 1e-300)
        assert np.abs(a - b).max() <= rtol * scale, np.abs(a - b).max() / scale
        assert ((a == 0) == (b == 0)).all()  # the same documents without gradient or Hessian


CASES = [
    ("lambda_rank", "constant", {}),
    ("lambda_rank", "diagonal", {}),
    ("lambda_rank", "curvature", {}),
    ("lambda_rank", "diagonal", {"k": 3, "sigma": 2.0, "gain": "linear", "discount": "letor"}),
    ("lambda_rank", "constant", {"k": 5, "discount": "linear", "gain": {0: 0, 1: 1, 2: 3, 3: 7, 4: 15}}),
    ("list_net", "constant", {}),
    ("list_net", "diagonal", {}),
    ("list_net", "curvature", {}),
    ("neural_ndcg", "constant", {}),
    ("neural_ndcg", "constant", {"k": 5, "temperature": 0.3}),
    ("neural_ndcg", "constant", {"sinkhorn": False}),
    ("neural_ndcg", "constant", {"max_iter": 3, "tol": 0.0, "gain": "linear"}),
    ("neural_ndcg", "curvature", {}),
    ("neural_ndcg_transposed", "constant", {}),
    ("neural_ndcg_transposed", "constant", {"k": 4, "temperature": 0.1}),
    ("soft_ndcg", "constant", {}),
    ("soft_ndcg", "constant", {"k": 10, "sigma": 0.3}),
    ("soft_ndcg", "constant", {"k": 3, "gain": "linear", "discount": "letor"}),
    ("soft_ndcg", "curvature", {}),
]


@pytest.mark.parametrize(("loss", "hessian", "options"), CASES, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in
                                                                     enumerate(CASES)])
def test_kernels_equal_the_pytorch_path(loss: str, hessian: str, options: dict) -> None:
    scores, labels = _problem()
    bound = losses.get(loss, **options)
    assert boosting_kernels.flat_gradients(bound, scores, labels, SIZES, hessian=hessian, dtype=torch.float64,
                                           device=None) is not None  # the kernel ran
    fast, slow = _both(loss, hessian, scores, labels, **options)
    assert np.abs(fast[0]).max() > 0
    _assert_close(fast, slow, 1e-10 if hessian == "curvature" else 1e-12)


@pytest.mark.parametrize("cutoff", [None, 5])
def test_soft_ndcg_kernel_equals_each_query_alone(cutoff: int | None) -> None:
    # The booster's kernel packs the documents of nonzero coefficient of several queries of similar
    # length into one lane block and several blocks into a task: against each query computed alone
    # by the loss's kernel, every document, coefficients applied after.
    from smoothrank._softrank_numba import TASK_LANES, expected_discounts, flat_soft_dcg_gradient

    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 70, 50)
    sizes[:4] = [1, 69, 2, 33]
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    scores = rng.normal(size=offsets[-1])
    scores[70:90] = 0.3  # ties
    coef = np.where(rng.random(offsets[-1]) < 0.4, -rng.uniform(0.1, 1.0, offsets[-1]), 0.0)
    coef[offsets[3]:offsets[4]] = 0.0  # a query of nothing wanted
    ranks = np.arange(offsets[-1]) - np.repeat(offsets[:-1], sizes)
    disc = np.where(ranks < (cutoff or 10**9), 1.0 / np.log2(ranks + 2.0), 0.0)
    n_ranks = int(sizes.max()) if cutoff is None else cutoff
    assert (coef != 0).sum() > 3 * TASK_LANES  # several tasks
    values, grad = flat_soft_dcg_gradient(scores, offsets, disc, coef, 0.8, n_ranks)
    for q, (lo, hi) in enumerate(itertools.pairwise(offsets)):
        r = min(n_ranks, hi - lo)
        mask = np.ones((1, hi - lo), dtype=bool)
        ed, jac = expected_discounts(scores[None, lo:hi], mask, disc[None, lo:lo + r], 0.8, True)
        assert jac is not None
        c = coef[lo:hi]
        ref = c @ jac[0]
        assert abs(values[q] - c @ ed[0]) <= 1e-14
        assert np.abs(grad[lo:hi] - ref).max(initial=0.0) <= 1e-13 * max(np.abs(ref).max(initial=0.0), 1e-3)
        assert ((grad[lo:hi] == 0) == (ref == 0)).all()


def test_soft_ndcg_kernel_gives_the_same_bits_on_any_number_of_threads() -> None:
    # Tasks (whole queries) are cut from the data alone, and a task's blocks run in order on one thread.
    scores, labels = _problem(seed=5)
    bound = losses.get("soft_ndcg")
    results = on_one_and_two_numba_threads(lambda: boosting_kernels.flat_gradients(
        bound, scores, labels, SIZES, hessian="constant", dtype=torch.float64, device=None))
    assert results[0] is not None and results[1] is not None
    np.testing.assert_array_equal(results[0][0], results[1][0])


@pytest.mark.parametrize("loss", ["lambda_rank", "neural_ndcg", "list_net", "soft_ndcg"])
@pytest.mark.parametrize("scale", [0.0, 1e-3, 30.0])
def test_tied_tiny_and_wide_scores(loss: str, scale: float) -> None:
    # All scores tied (a booster's first round), nearly tied, and spread far apart (NeuralSort's
    # P-hat saturated, Sinkhorn's empty columns floored).
    scores, labels = _problem(seed=2, scale=scale)
    _assert_close(*_both(loss, "constant", scores, labels), 1e-10)


def test_weights_and_the_registered_function() -> None:
    scores, labels = _problem(seed=3)
    weights = np.random.default_rng(0).uniform(0.5, 2.0, scores.shape[0])
    args = (losses.lambda_rank, scores, labels, SIZES)
    fast = boosting_gradients(*args, weights=weights, hessian="diagonal")
    boosting._FLAT_KERNELS = False
    try:
        slow = boosting_gradients(*args, weights=weights, hessian="diagonal")
    finally:
        boosting._FLAT_KERNELS = True
    _assert_close(fast, slow, 1e-12)


def test_uncovered_cases_take_the_pytorch_path() -> None:
    scores, labels = _problem()
    f = losses.get("neural_ndcg", stochastic=True, generator=0)
    assert boosting_kernels.flat_gradients(f, scores, labels, SIZES, hessian="constant", dtype=torch.float64,
                                           device=None) is None
    for loss, kw in (("lambda_rank", {"dtype": torch.float32}), ("approx_ndcg", {}),
                     ("neural_ndcg", {"hessian": "diagonal"}), ("soft_ndcg", {"hessian": "diagonal"})):
        opts = {"hessian": "constant", "dtype": torch.float64, "device": None, **kw}
        assert boosting_kernels.flat_gradients(losses.get(loss), scores, labels, SIZES, **opts) is None
    for options in ({"method": "normal"}, {"method": "hybrid"}, {"sinkhorn": True}, {"backend": "torch"}):
        assert boosting_kernels.flat_gradients(losses.get("soft_ndcg", **options), scores, labels, SIZES,
                                               hessian="constant", dtype=torch.float64, device=None) is None
    # A gain that is negative for a label: the PyTorch path's error names it.
    with pytest.raises(SmoothrankError, match="negative gain"):
        boosting_gradients("lambda_rank", scores, labels - 1.0, SIZES)


@pytest.mark.parametrize(("loss", "options", "name"), [("lambda_rank", {"sigma": -1.0}, "sigma"),
                                                       ("neural_ndcg", {"temperature": 0.0}, "temperature"),
                                                       ("neural_ndcg", {"k": 0}, "k")])
def test_bad_options_are_named(loss: str, options: dict, name: str) -> None:
    scores, labels = _problem()
    with pytest.raises(SmoothrankError, match=name):
        boosting_gradients(loss, scores, labels, SIZES, **options)
