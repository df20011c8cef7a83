"""Straightforward reference implementations (tests and benchmark only, never shipped).

Unrolled autograd through every Sinkhorn iteration of the dense matrix, written directly from
Pobrotyn & Bialobrzeski (2021), equations 3, 5 and 6, for unpadded or masked inputs.
"""

from __future__ import annotations

import torch


def naive_sinkhorn(k: torch.Tensor, row_mask: torch.Tensor, col_mask: torch.Tensor, n_iter: int
                   ) -> torch.Tensor:
    """Alternate row/column normalisation of the masked matrix, autograd through all iterations."""
    keep = (row_mask.unsqueeze(-1) & col_mask.unsqueeze(-2)).to(k.dtype)
    p = k * keep
    for _ in range(n_iter):
        p = p / p.sum(-1, keepdim=True).clamp_min(1e-30) * keep
        p = p / p.sum(-2, keepdim=True).clamp_min(1e-30) * keep
    return p


def naive_neural_sort(s: torch.Tensor, tau: float) -> torch.Tensor:
    """Equation 3 for unpadded lists: softmax(((n + 1 - 2i) s - A_s 1) / tau) row by row."""
    n = s.shape[-1]
    a = (s.unsqueeze(-1) - s.unsqueeze(-2)).abs()
    b = a.sum(-1)
    i = torch.arange(1, n + 1, dtype=s.dtype, device=s.device)
    return torch.softmax(((n + 1 - 2 * i).unsqueeze(-1) * s.unsqueeze(-2) - b.unsqueeze(-2)) / tau, dim=-1)


def naive_neural_ndcg(s: torch.Tensor, y: torch.Tensor, *, tau: float = 1.0, n_iter: int = 30,
                      transposed: bool = False) -> torch.Tensor:
    """Mean of minus NeuralNDCG (exp2 gain, log2 discount, whole list) for unpadded lists."""
    n = s.shape[-1]
    p = naive_neural_sort(s, tau)
    full = torch.ones_like(s, dtype=torch.bool)
    g = 2.0 ** y - 1.0
    d = 1.0 / torch.log2(torch.arange(2, n + 2, dtype=s.dtype, device=s.device))
    ideal = (torch.sort(g, descending=True).values * d).sum(-1)
    if transposed:
        pt = naive_sinkhorn(p.transpose(-1, -2), full, full, n_iter)
        dcg = (g * (pt @ d)).sum(-1)
    else:
        dcg = ((naive_sinkhorn(p, full, full, n_iter) @ g.unsqueeze(-1)).squeeze(-1) * d).sum(-1)
    return -(dcg / ideal).mean()
