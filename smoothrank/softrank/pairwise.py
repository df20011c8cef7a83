"""Score smoothing and pairwise contests (Taylor et al., SoftRank, WSDM 2008, section 3.2).

Every score is smoothed into a Gaussian with a shared standard deviation ``sigma`` (eq. 8),
``S_j ~ N(s_j, sigma^2)``. The probability that document ``i`` beats document ``j`` is (eq. 9)

    pi_ij = P(S_i > S_j) = Phi((s_i - s_j) / (sigma * sqrt(2)))

and the expected 0-based rank of ``j`` is the expected number of documents beating it (eq. 10)

    E[r_j] = sum_{i != j} pi_ij.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from smoothrank._checks import check_mask, check_positive, check_positive_int, check_scores_mask, within_dtype
from smoothrank.errors import SmoothrankError


def check_sigma(sigma: float) -> float:
    """Return ``sigma`` as a float, or raise naming the argument if it is not a finite number > 0
    (a string or a bool is refused, as for every scale option)."""
    return check_positive(sigma, "sigma")


def default_mask(scores: Tensor, mask: Tensor | None) -> Tensor:
    """The boolean mask (True = real item), all True when ``mask`` is None; checks the shape."""
    return check_mask(mask, scores)


def pair_mask(mask: Tensor) -> Tensor:
    """``(batch, n, n)`` mask of the real contests: both items real and ``i != j``."""
    n = mask.shape[-1]
    off_diagonal = ~torch.eye(n, dtype=torch.bool, device=mask.device)
    return mask[:, :, None] & mask[:, None, :] & off_diagonal


def check_contest_matrix(pi: object, mask: Tensor | None, max_rank: object) -> tuple[Tensor, Tensor, int]:
    """Checked ``(pi, mask, R)`` for the functions that take contest probabilities.

    ``pi`` must be a floating ``(batch, n, n)`` tensor whose contests between real items are
    probabilities (finite, in [0, 1] up to 1e-3); its diagonal and padded rows and columns are ignored
    (returned as zeros), and half precision is widened to float32. ``R`` is ``min(max_rank, n)``
    (``n`` when None; at least 1).
    """
    if not isinstance(pi, Tensor):
        raise SmoothrankError(f"pi: expected a torch.Tensor, got {type(pi).__name__}")
    if pi.dim() != 3 or pi.shape[1] != pi.shape[2]:
        raise SmoothrankError(f"pi: expected shape (batch, n, n), got {tuple(pi.shape)}")
    if not pi.is_floating_point():
        raise SmoothrankError(f"pi: expected a floating dtype, got {pi.dtype}")
    mask = check_mask(mask, pi.diagonal(dim1=1, dim2=2), name="pi's lists")
    real = pair_mask(mask)
    contests = pi.detach()[real]
    if not bool(torch.isfinite(contests).all()):
        raise SmoothrankError("pi: NaN or infinite contest probability between real items")
    # A rounding or gradcheck's perturbation (1e-6) past 0 or 1 is not refused.
    low, high = (float(contests.amin()), float(contests.amax())) if contests.numel() else (0.0, 1.0)
    if not (-1e-3 <= low and high <= 1.0 + 1e-3):
        raise SmoothrankError(f"pi: contest probabilities must lie in [0, 1], got values from {low:g} "
                              f"to {high:g}")
    n = pi.shape[-1]
    n_ranks = n if max_rank is None else check_positive_int(max_rank, "max_rank")
    if pi.dtype in (torch.float16, torch.bfloat16):
        # Sums over a long list in half precision lose whole ranks (bfloat16 rows of n = 1000 summed
        # to 1 +- 0.065): the distributions are computed in float32, and returned in pi's dtype.
        pi = pi.float()
    return torch.where(real, pi, torch.zeros_like(pi)), mask, min(n_ranks, max(n, 1))


def normal_cdf(x: Tensor) -> Tensor:
    """The standard normal CDF ``Phi(x) = erfc(-x / sqrt 2) / 2``, accurate to rounding in the lower
    tail too. ``torch.special.ndtr`` on the CPU (torch 2.13) loses it: in float32 it gives 2.98e-8 for
    Phi(-5.5) = 1.90e-8 and 0 from -6 on, in float64 5.55e-17 for Phi(-8.36) = 3.14e-17; the
    contests of well separated documents and the normal approximation's tails live there, while
    the gradients use the density, exactly."""
    return 0.5 * torch.special.erfc(x * (-1.0 / math.sqrt(2.0)))


def contest_block(scores: Tensor, mask: Tensor, sigma: float, *, rows: slice = slice(None),
                  cols: slice = slice(None)) -> tuple[Tensor, Tensor, Tensor]:
    """A block ``pi[b, i, j]`` of the contests, ``i`` in ``rows`` and ``j`` in ``cols`` (zero off the
    real pairs, ``i != j``), with the score differences and the real pairs: what the blocked SoftRank
    paths form one block of a long list at a time (``scores`` finite at padded positions)."""
    diff = scores[:, rows, None] - scores[:, None, cols]
    pi = normal_cdf(diff * (1.0 / (sigma * math.sqrt(2.0))))
    index = torch.arange(scores.shape[-1], device=scores.device)
    real = mask[:, rows, None] & mask[:, None, cols] & (index[rows, None] != index[None, cols])
    return torch.where(real, pi, torch.zeros_like(pi)), diff, real


def pairwise_probabilities(scores: Tensor, *, sigma: float = 1.0, mask: Tensor | None = None) -> Tensor:
    """Probability ``pi[b, i, j] = P(S_i > S_j)`` that item ``i`` beats item ``j`` (eq. 9).

    Parameters
    ----------
    scores : Tensor, shape (batch, n)
        Score means ``s_j``.
    sigma : float
        Shared standard deviation of the score smoothing (eq. 8); ``S_i - S_j`` has variance
        ``2 sigma^2``.
    mask : Tensor of bool, shape (batch, n), optional
        True for real items. Padded items neither beat nor are beaten: their rows and columns
        are zero, as is the diagonal (an item does not compete with itself).

    Returns
    -------
    Tensor, shape (batch, n, n)
        ``Phi((s_i - s_j) / (sigma sqrt 2))`` on real pairs, 0 elsewhere. :func:`normal_cdf`
        saturates cleanly to 0 or 1 on huge gaps, so values and gradients stay finite.

    Examples
    --------
    >>> import torch
    >>> from smoothrank.softrank import pairwise_probabilities
    >>> pairwise_probabilities(torch.tensor([[2.0, 1.0, 0.0]]), sigma=0.5).shape
    torch.Size([1, 3, 3])
    """
    mask = check_scores_mask(scores, mask)
    if scores.dtype in (torch.float16, torch.bfloat16):
        # In float32, returned in the scores' dtype: float16's density / (sigma sqrt 2) overflowed at
        # sigma below 4e-6, and tied scores got inf - inf = NaN gradients.
        return pairwise_probabilities(scores.float(), sigma=sigma, mask=mask).to(scores.dtype)
    sigma = within_dtype(check_sigma(sigma), scores.dtype, divides=True)
    # Padded scores may hold anything (even inf/nan): neutralise them before differencing so
    # that no NaN can leak into the gradient of the real items through torch.where.
    safe = torch.where(mask, scores, torch.zeros_like(scores))
    diff = (safe[:, :, None] - safe[:, None, :]) / (sigma * math.sqrt(2.0))
    pi = normal_cdf(diff)
    return torch.where(pair_mask(mask), pi, torch.zeros_like(pi))


def expected_ranks(scores: Tensor, *, sigma: float = 1.0, mask: Tensor | None = None) -> Tensor:
    """Expected 0-based rank ``E[r_j] = sum_{i != j} pi_ij`` of every item (eq. 10); 0 on padding.

    Examples
    --------
    >>> import torch
    >>> from smoothrank.softrank import expected_ranks
    >>> expected_ranks(torch.tensor([[2.0, 1.0, 0.0]]), sigma=0.5).round(decimals=3)
    tensor([[0.0810, 1.0000, 1.9190]])
    """
    return pairwise_probabilities(scores, sigma=sigma, mask=mask).sum(dim=1)
