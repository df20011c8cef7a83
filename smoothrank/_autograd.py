"""Hand-written first derivatives that refuse to be differentiated again.

``torch.autograd.function.once_differentiable`` does not do this reliably. Its refusing node hangs
on detached copies of the incoming gradients, so ``torch.autograd.grad(grad, scores)`` prunes it
(no path to ``scores`` runs through it) and returns the second derivative of the rest of the graph
alone, without an error; only ``.backward()`` meets the node. And where no incoming gradient
requires grad it adds nothing at all, while the PyTorch operations that formed the Function's
inputs (SoftRank's contests, NeuralSort's centred scores) are still differentiated. Both gave
boosters silently wrong diagonal Hessians (SoftNDCG on the torch and Fourier backends up to 10x
off; with ``sinkhorn=True`` on the CPU kernels, zero). :func:`first_derivative_only` hangs the
refusing node on the Function's saved tensors and incoming gradients that have a graph, so every
second derivative through the Function raises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from smoothrank.errors import SmoothrankError


class NotTwiceDifferentiable(SmoothrankError):
    """A second derivative was asked of a hand-written first derivative."""


class _Refuse(torch.autograd.Function):
    """``grad`` (a copy) whose backward raises ``message``; ``anchors`` only connect it to a graph."""

    @staticmethod
    def forward(ctx: Any, message: str, grad: Tensor, *anchors: Tensor) -> Tensor:
        ctx.message = message
        return grad.clone()

    @staticmethod
    def backward(ctx: Any, *_: Tensor) -> Any:
        raise NotTwiceDifferentiable(ctx.message)


class _SavedOnce:
    """A backward's ``ctx`` whose saved tensors were unpacked once, by the wrapper: a second
    ``ctx.saved_tensors`` inside one backward is refused by ``torch.utils.checkpoint``'s
    non-reentrant mode ("Unpack is being triggered for a tensor that was already unpacked once")
    and runs any other saved-tensor unpack hook twice."""

    __slots__ = ("_ctx", "saved_tensors")

    def __init__(self, ctx: Any, saved: tuple[Tensor, ...]) -> None:
        object.__setattr__(self, "_ctx", ctx)
        object.__setattr__(self, "saved_tensors", saved)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._ctx, name, value)


def first_derivative_only(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a ``torch.autograd.Function.backward`` (below ``@staticmethod``), in place of
    ``once_differentiable``: the backward runs without recording a graph, and under
    ``create_graph=True`` its gradients carry a node that raises :class:`NotTwiceDifferentiable` saying
    that ``what`` is not twice differentiable when anything differentiates them."""
    message = (f"{what} is not twice differentiable (a hand-written first derivative; create_graph=True, "
               "a booster's hessian='diagonal'): use hessian='constant' or 'curvature'")

    def decorate(backward: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(backward)
        def wrapper(ctx: Any, *grads: Any) -> Any:
            if not torch.is_grad_enabled():  # no create_graph: the backward as written
                return backward(ctx, *grads)
            saved = ctx.saved_tensors  # unpacked once, for the backward and the anchors
            with torch.no_grad():
                outputs = backward(_SavedOnce(ctx, saved), *grads)
            anchors = [t for t in (*saved, *grads) if isinstance(t, Tensor) and t.requires_grad]
            if not anchors:  # nothing upstream has a graph: a constant gradient is the exact answer
                return outputs
            single = not isinstance(outputs, tuple)
            marked = tuple(_Refuse.apply(message, out, *anchors)
                           if isinstance(out, Tensor) and out.is_floating_point() else out
                           for out in ((outputs,) if single else outputs))
            return marked[0] if single else marked

        return wrapper

    return decorate
