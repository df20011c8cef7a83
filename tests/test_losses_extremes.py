"""Hypothesis: every registered loss, on any finite scores (extremes of the dtype included), gives
a finite value and gradient equal to a float64 reference computed on the same scores, or refuses
them with an error naming ``scores`` where the exact value is beyond the dtype's range.

The reference is the loss computed in float64 on the float32 scores, so both see the same numbers;
scores run from +-3.4e38 down to float32's smallest subnormal (1e-45), mixed within one list.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from smoothrank import losses
from smoothrank.errors import SmoothrankError

_EXTREMES = [3.4e38, -3.4e38, 3e38, -3e38, 1e38, -1e38, 1e30, -1e30, 1e20, 1e10, -1e10, 1e6, 1e6 + 1.0,
             1.0, -1.0, 0.0, 0.5, 1e-6, 1e-38, 1e-45, -1e-45, 2e-45]


def _options(name: str) -> list[dict]:
    if name == "list_mle":
        return [{"generator": 0}]
    if name.startswith("neural_ndcg"):
        return [{}, {"k": 2}, {"sinkhorn": False}, {"temperature": 1e-3}]
    if name == "soft_ndcg":
        # The hybrid's exact documents are chosen by expected rank, a choice near-ties can flip
        # between dtypes: with n_exact >= n every document is exact.
        return [{}, {"method": "normal"}, {"method": "hybrid"}, {"k": 2}]
    if name in ("rank_net", "lambda_rank"):
        return [{}, {"k": 2}]
    return [{}]


_CASES = [(name, opts) for name in losses.available() for opts in _options(name)]


@st.composite
def _batches(draw):
    b, n = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    values = st.one_of(st.sampled_from(_EXTREMES), st.floats(width=32, allow_nan=False,
                                                               allow_infinity=False))
    scores = torch.tensor(draw(st.lists(values, min_size=b * n, max_size=b * n)),
                          dtype=torch.float32).reshape(b, n)
    labels = torch.tensor(draw(st.lists(st.integers(0, 3), min_size=b * n, max_size=b * n)),
                          dtype=torch.float32).reshape(b, n)
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=b * n, max_size=b * n))).reshape(b, n)
    return scores, labels, mask


def _value_and_gradient(name: str, opts: dict, scores: torch.Tensor, labels: torch.Tensor,
                        mask: torch.Tensor, reduction: str):
    x = scores.clone().requires_grad_()
    try:
        value = losses.get(name, **opts)(x, labels.to(scores.dtype), mask=mask, reduction=reduction)
    except SmoothrankError as err:
        return err
    (grad,) = torch.autograd.grad(value.sum(), x)
    return value.detach().double(), grad.double()


def _check_against_reference(name: str, opts: dict, scores, labels, mask, reduction: str) -> None:
    got = _value_and_gradient(name, opts, scores, labels, mask, reduction)
    want = _value_and_gradient(name, opts, scores.double(), labels, mask, reduction)
    if isinstance(got, SmoothrankError):
        # Refused: only where the exact value is beyond float32's range, and naming the scores.
        assert "scores" in str(got), (name, got)
        per_query = _value_and_gradient(name, opts, scores.double(), labels, mask, "none")
        assert isinstance(per_query, SmoothrankError) or not bool(
            (per_query[0].abs() <= torch.finfo(torch.float32).max).all()), (name, got, per_query)
        return
    assert not isinstance(want, SmoothrankError), (name, want)
    value, grad = got
    assert torch.isfinite(value).all() and torch.isfinite(grad).all(), (name, opts, value, grad)
    assert torch.all(grad[~mask] == 0), (name, grad)
    torch.testing.assert_close(value, want[0], rtol=1e-4, atol=1e-5, msg=lambda m: f"{name} {opts}: {m}")
    scale = want[1].abs().amax().clamp_min(1.0)
    torch.testing.assert_close(grad / scale, want[1] / scale, rtol=1e-4, atol=1e-4,
                               msg=lambda m: f"{name} {opts} gradient: {m}")


@pytest.mark.parametrize(("name", "opts"), _CASES, ids=[f"{n}-{o}" for n, o in _CASES])
@settings(max_examples=15, deadline=None)
@given(batch=_batches(), reduction=st.sampled_from(["mean", "none"]))
def test_extreme_finite_scores_give_the_float64_value_or_a_clear_refusal(name, opts, batch, reduction):
    _check_against_reference(name, opts, *batch, reduction)


@pytest.mark.parametrize("name", ["list_net", "list_mle", "rank_net", "lambda_rank"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_loss_beyond_the_dtype_is_refused_naming_the_scores(name: str, dtype: torch.dtype) -> None:
    # These losses grow with the score gaps: a gap of twice the dtype's largest number has a loss
    # no dtype's rounding can hold (it was inf with a finite gradient).
    big = torch.finfo(dtype).max
    scores = torch.tensor([[big, -big, -big, -big, -big]], dtype=dtype)
    labels = torch.tensor([[0.0, 1.0, 1.0, 1.0, 1.0]], dtype=dtype)
    with pytest.raises(SmoothrankError, match=r"scores: .*beyond the range"):
        losses.get(name, **({"generator": 0} if name == "list_mle" else {}))(scores, labels)


def test_a_mean_whose_sum_overflows_is_computed_in_the_wide_dtype() -> None:
    # Two queries of loss ~3e38 each: their float32 sum overflows, their mean does not.
    scores = torch.tensor([[-3e38, 0.0], [-3e38, 0.0]], requires_grad=True)
    labels = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    value = losses.list_net(scores, labels)
    (grad,) = torch.autograd.grad(value, scores)
    wide = scores.detach().double().requires_grad_()
    want = losses.list_net(wide, labels.double())
    (want_grad,) = torch.autograd.grad(want, wide)
    assert float(scores.sum(-1).detach().abs().max()) * 1.2 > torch.finfo(torch.float32).max  # would overflow
    torch.testing.assert_close(value.double(), want, rtol=1e-6, atol=0)
    torch.testing.assert_close(grad.double(), want_grad, rtol=1e-6, atol=1e-7)
    with pytest.raises(SmoothrankError, match="scores: the sum"):
        losses.list_net(scores, labels, reduction="sum")
