"""Hypothesis: every loss gives finite values and gradients on awkward inputs.

Ties and near-ties (500 and 500.0001: distinct in float32, within rounding of NeuralSort's
float32 logits), scores up to +-1e4, lists of length 1, temperatures from 1e-8 to 100, all-zero
labels, fully padded rows and padding anywhere in a row, in float32 and float64, and in float16 and
bfloat16 (computed in float32) for temperatures from 1e-2.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from smoothrank import losses

NAMES = ["neural_ndcg", "neural_ndcg_transposed", "approx_ndcg", "rank_net", "lambda_rank", "list_net",
         "list_mle", "rmse"]


@st.composite
def batches(draw):
    b = draw(st.integers(1, 3))
    n = draw(st.integers(1, 7))
    # A small pool of values makes ties likely; extremes test overflow.
    pool = draw(st.lists(st.sampled_from([0.0, 1.0, -1.0, 0.5, 1e4, -1e4, 37.25, 1e-6, 500.0, 500.0001]),
                         min_size=1, max_size=4))
    scores = draw(st.lists(st.one_of(st.sampled_from(pool), st.floats(-1e4, 1e4, allow_nan=False)),
                           min_size=b * n, max_size=b * n))
    labels = draw(st.lists(st.integers(0, 4), min_size=b * n, max_size=b * n))
    if draw(st.booleans()):
        labels = [0] * (b * n)
    mask = draw(st.lists(st.booleans(), min_size=b * n, max_size=b * n))
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16]))
    # The gradients grow like 1/tau at ties; in half precision they would exceed float16's largest
    # number (65504) below tau ~ 1e-2, which no computation in float32 can undo.
    half = dtype in (torch.float16, torch.bfloat16)
    log_tau = draw(st.floats(-2 if half else -8, 2))
    k = draw(st.sampled_from([None, 1, 3]))
    return (torch.tensor(scores, dtype=dtype).reshape(b, n), torch.tensor(labels, dtype=dtype).reshape(b, n),
            torch.tensor(mask).reshape(b, n), 10.0 ** log_tau, k)


def _options(name: str, tau: float, k):
    if name.startswith("neural_ndcg"):
        return {"temperature": tau, "k": k}
    if name in ("rank_net", "lambda_rank"):
        return {"k": k}
    if name == "approx_ndcg":
        return {"alpha": 1.0 / tau}
    return {}


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=30, deadline=None)
@given(batch=batches())
def test_finite_loss_and_gradient(name: str, batch) -> None:
    scores, labels, mask, tau, k = batch
    s = scores.clone().requires_grad_()
    for reduction in ("mean", "none"):
        loss = losses.get(name, **_options(name, tau, k))(s, labels, mask=mask, reduction=reduction)
        assert torch.isfinite(loss).all(), (name, loss)
        (g,) = torch.autograd.grad(loss.sum(), s)
        assert torch.isfinite(g).all(), (name, g)
        assert torch.all(g[~mask] == 0)
        # A query without a relevant real item contributes nothing.
        empty = ~((labels > 0) & mask).any(-1)
        assert torch.all(g[empty] == 0)


@settings(max_examples=15, deadline=None)
@given(batch=batches())
def test_stochastic_neural_ndcg_finite(batch) -> None:
    scores, labels, mask, tau, k = batch
    s = scores.clone().requires_grad_()
    loss = losses.neural_ndcg_transposed(s, labels, mask=mask, temperature=tau, k=k, stochastic=True,
                                         n_samples=3, generator=torch.Generator().manual_seed(0))
    (g,) = torch.autograd.grad(loss, s)
    assert torch.isfinite(loss) and torch.isfinite(g).all()
