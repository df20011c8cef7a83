"""NeuralNDCG's smoothed DCG on the CPU by the compiled per-query kernel of smoothrank._neural_numba.

:func:`neural_dcg_tensor` is what :func:`smoothrank.losses.neural_ndcg` and
:func:`~smoothrank.losses.neural_ndcg_transposed` compute on the CPU (:func:`covers`): each query's
real items gathered (no padding), its ``m x m`` NeuralSort matrix, Sinkhorn iterates and adjoint
in float64 in the processor's cache, the queries in parallel, the gradient computed in the same
pass as the value when the scores need one. It is the same computation as
:func:`smoothrank.sorting.neural_sort_bilinear` (equal to its float64 results to round-off; for
float32 scores, more precise than its float32 Sinkhorn), first-derivative only, as that is.
Numba is loaded on the first call.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from smoothrank._autograd import first_derivative_only

__all__ = ["USE_KERNELS", "covers", "neural_dcg_tensor"]

#: Whether the losses use these kernels on the CPU (False: PyTorch's path of ``sorting``).
USE_KERNELS = True


def covers(scores: torch.Tensor) -> bool:
    """Whether :func:`neural_dcg_tensor` takes these scores: float32 or float64 on the CPU, far
    inside float64's range (where ``sorting``'s overflow shrink is 1), with the kernels enabled."""
    if not (USE_KERNELS and scores.device.type == "cpu" and scores.dtype in (torch.float32, torch.float64)):
        return False
    if scores.numel() == 0:
        return True
    return float(scores.detach().abs().amax()) * 4.0 * max(scores.shape[-1], 1) < 1e300


def neural_dcg_tensor(scores: torch.Tensor, gains: torch.Tensor, disc: torch.Tensor, mask: torch.Tensor, *,
                      temperature: float, max_iter: int, tol: float, transposed: bool) -> torch.Tensor:
    """Per-query ``disc^T scale(P-hat) gains`` (or the transposed form), shape (batch,), differentiable
    in ``scores`` (batch, n) once (``gains`` and ``disc`` are constants).

    ``mask`` (batch, n) marks the real items, anywhere in a row; ``gains`` are per item, ``disc``
    per rank (its first ``m`` entries for the ``m`` real items). ``temperature`` is held as the
    PyTorch path holds it (at or above the scores' dtype's smallest normal number).
    """
    return _NeuralDCG.apply(scores, gains.detach(), disc.detach(), mask, float(temperature), int(max_iter),
                            float(tol), bool(transposed))


class _NeuralDCG(torch.autograd.Function):
    """The kernel's value; its gradient, computed in the same pass when the scores need one."""

    @staticmethod
    def forward(ctx: Any, scores: Tensor, gains: Tensor, disc: Tensor, mask: Tensor, tau: float,
                max_iter: int, tol: float, transposed: bool) -> Tensor:
        mask = mask.to(torch.bool)
        sizes = mask.sum(-1)
        ranks = torch.arange(mask.shape[-1], device=mask.device) < sizes.unsqueeze(-1)
        offsets = np.concatenate(([0], np.cumsum(sizes.numpy()))).astype(np.int64)
        x = scores.detach()[mask].to(torch.float64).numpy()
        g = gains[mask].to(torch.float64).numpy()
        d = disc[ranks].to(torch.float64).numpy()
        want = ctx.needs_input_grad[0]
        scale = np.ones(mask.shape[0]) if want else None
        from smoothrank._neural_numba import neural_dcg

        values, grad = neural_dcg(x, g, d, offsets, temperature=tau, max_iter=max_iter, tol=tol,
                                  transposed=transposed, grad_scale=scale)
        if want:
            full = torch.zeros(mask.shape, dtype=torch.float64)
            full[mask] = torch.from_numpy(grad)
            ctx.save_for_backward(scores, full)  # the scores: a second derivative through them is refused
        return torch.from_numpy(values).to(scores.dtype)

    @staticmethod
    @first_derivative_only("NeuralNDCG (NeuralSort and Sinkhorn)")
    def backward(ctx: Any, gval: Tensor) -> tuple[Tensor, None, None, None, None, None, None, None]:
        _, full = ctx.saved_tensors
        grad = (gval.to(torch.float64).unsqueeze(-1) * full).to(gval.dtype)
        return grad, None, None, None, None, None, None, None
