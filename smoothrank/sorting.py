"""Differentiable sorting: the NeuralSort relaxation and masked Sinkhorn scaling.

Conventions: ``scores`` has shape ``(batch, n)``; ``mask`` is a boolean tensor of the same shape,
True for a real item (padding may sit anywhere in a row). A relaxed permutation matrix has shape
``(batch, n, n)``: row ``r`` is rank ``r + 1`` and column ``j`` is the item at input position ``j``.
With ``m`` real items in a row, ranks ``1..m`` occupy rows ``0..m-1``; the rows of padded ranks
and the columns of padded items are exactly zero, so the real block is the ``m x m`` relaxation of
the real items alone wherever the padding sits.

References
----------
Grover, Wang, Zweig, Ermon. "Stochastic Optimization of Sorting Networks via Continuous
Relaxations", ICLR 2019 (NeuralSort).
Pobrotyn, Bialobrzeski. "NeuralNDCG: Direct Optimisation of a Ranking Metric via Differentiable
Relaxation of Sorting", 2021, section 4.1 and 4.2 (Sinkhorn scaling of P-hat).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from smoothrank._autograd import first_derivative_only
from smoothrank._checks import (
    check_generator,
    check_mask,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_scores_mask,
    within_dtype,
)
from smoothrank._devices import wide_dtype, without_autocast
from smoothrank.errors import SmoothrankError

__all__ = [
    "gumbel_perturb",
    "neural_sort",
    "neural_sort_bilinear",
    "rank_mask",
    "sinkhorn",
    "sinkhorn_scaling",
    "sinkhorn_with_info",
    "stochastic_neural_sort",
]

# Bytes of matrix processed per Sinkhorn chunk. On the CPU: a few queries whose (n, n) blocks stay
# in the processor's cache for all iterations, instead of sweeping the whole batch tensor
# (memory-bound) once per iteration. On a GPU the cost is the number of kernel launches, not memory
# traffic: chunks are as large as a bounded temporary allows (the whole batch at the usual sizes).
_CHUNK_BYTES = 1 << 22
_DEVICE_CHUNK_BYTES = 1 << 28
# A GPU stalls at every host read of a convergence flag: check it only every few iterations there
# (stopped queries are frozen either way, so the result does not depend on this).
_DEVICE_CHECK_EVERY = 5


# --------------------------------------------------------------------------- validation helpers
def _check_temperature(temperature: float) -> float:
    return check_positive(temperature, "temperature")


def rank_mask(mask: Tensor) -> Tensor:
    """Boolean ``(batch, n)`` mask of the real *ranks*: True at rows ``0..m-1``, m = real items."""
    m = mask.sum(-1, keepdim=True)
    return torch.arange(mask.shape[-1], device=mask.device) < m


# --------------------------------------------------------------------------- NeuralSort
def _abs_diff_row_sums(scores: Tensor, mask: Tensor) -> Tensor:
    """``B_j = sum_{k real} |s_j - s_k|`` for every item j, in O(n log n) per row.

    With the real scores sorted ascending, a_0 <= ... <= a_{m-1}, and inclusive prefix sums c_p,
    ``B(a_p) = a_p (2p + 2 - m) - 2 c_p + c_{m-1}``. This avoids a (batch, n, n) matrix of
    differences (and its saved tensors) in the forward and backward pass. Padded items receive
    a finite value that is masked out by the caller.
    """
    m = mask.sum(-1, keepdim=True).to(scores.dtype)
    # Padded items sort after every real one: the sort key (outside autograd) puts +inf there. A
    # finite filler such as max + 1 rounds onto the max once the scores span 2^53 (2^24 without
    # float64), ties with the top real item, and hands that item's run to a padded slot.
    key, order = torch.sort(scores.detach().masked_fill(~mask, float("inf")), dim=-1, stable=True)
    sorted_s = scores.gather(-1, order)
    # Exactly tied scores must get bitwise equal B: evaluated at each item's own position, the
    # formula rounds differently for tied items, and at a small temperature that rounding alone
    # hands both ranks of a tied pair to one item, leaving the other's column empty (Sinkhorn then
    # overflows into NaN gradients; PITFALLS 8). So every member of a run of equal values uses the
    # run's last position p (all tied partners counted below it: a valid subgradient of |.|).
    key = key.contiguous()
    last = torch.searchsorted(key, key, right=True) - 1  # real items: never a padded (+inf) slot
    real_sorted = torch.arange(scores.shape[-1], device=scores.device) < m
    sorted_s = torch.where(real_sorted, sorted_s, torch.zeros_like(sorted_s))
    prefix = torch.cumsum(sorted_s, dim=-1)
    total = prefix[..., -1:]
    p = last.to(scores.dtype)
    b_sorted = sorted_s * (2.0 * p + 2.0 - m) - 2.0 * prefix.gather(-1, last) + total
    return torch.zeros_like(b_sorted).scatter(-1, order, b_sorted)


def _overflow_shrink(x: Tensor, mask: Tensor) -> float:
    """A power of two <= 1 by which to scale ``x`` so that sums of ``4 n`` of its real entries
    (the centre, ``B_j``, ``coef_r s_j``) stay finite in its dtype; 1.0 but near the dtype's limit
    (float64 scores beyond about 1e305 / n). Scaling by it is exact, and tau is scaled alike."""
    top = float(torch.where(mask, x.detach().abs(), torch.zeros_like(x)).amax()) if x.numel() else 0.0
    limit = torch.finfo(x.dtype).max
    if not math.isfinite(top) or top * 4.0 * x.shape[-1] < limit:
        return 1.0
    return 2.0 ** -math.ceil(math.log2(top) + math.log2(4.0 * x.shape[-1]) - math.log2(limit) + 1)


def _neural_sort_parts(scores: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor, float]:
    """Centred scores s, ``B_j = sum_k |s_j - s_k|``, the per-rank coefficients ``m + 1 - 2r`` and
    the factor ``shrink`` by which s is scaled (``_overflow_shrink``; the logits are then
    ``(coef_r s_j - B_j) / (tau * shrink)``), in float64 (where the device has it) whatever the
    scores' dtype.

    The logits of equation 3 are ``(coef_r s_j - B_j) / tau``. Each term is of the order of
    ``m * (score range)`` while what decides between two items is their score gap: in float32
    the rounding of the terms (m * range * 6e-8) divided by a small tau outweighs a small gap,
    hands two ranks to one item and none to another, and Sinkhorn then divides by an empty
    column (NaN gradients). float64 pushes that limit about 10^9 times further; the logits and
    their softmax are formed in float64 too, and only P-hat (entries in [0, 1]) is rounded back.
    """
    wide = wide_dtype(scores.dtype, scores.device)
    x = scores.to(wide)
    # Only scores as wide as the logits can come near the overflow; the check costs a device sync.
    shrink = _overflow_shrink(x, mask) if wide == scores.dtype else 1.0
    if shrink != 1.0:
        x = x * shrink
    # P-hat is invariant to a shift of the scores (it adds a constant per row); centring on the
    # real items' mean reduces cancellation in (m + 1 - 2r) s_j - B_j for large scores.
    m_count = mask.sum(-1, keepdim=True)
    centre = (torch.where(mask, x.detach(), torch.zeros_like(x)).sum(-1, keepdim=True)
              / m_count.clamp_min(1).to(wide))
    s = torch.where(mask, x - centre, torch.zeros_like(x))
    b = _abs_diff_row_sums(s, mask)
    r = torch.arange(1, scores.shape[-1] + 1, device=scores.device, dtype=wide)
    coef = m_count.to(wide) + 1.0 - 2.0 * r  # (batch, n): one coefficient per rank row
    return s, b, coef, shrink


def _neural_sort_logits(scores: Tensor, mask: Tensor, temperature: float) -> Tensor:
    """Masked logits of equation 3: ``((m + 1 - 2r) s_j - B_j) / tau`` for rank r = 1..m."""
    s, b, coef, shrink = _neural_sort_parts(scores, mask)
    raw = coef.unsqueeze(-1) * s.unsqueeze(-2) - b.unsqueeze(-2)
    rows = rank_mask(mask)
    # Real rows: padded columns get -inf (no mass). Padded rows: all-zero logits (a finite
    # uniform softmax, zeroed afterwards) so that neither forward nor backward meets inf - inf.
    raw = raw.masked_fill(~mask.unsqueeze(-2), float("-inf"))
    logits = _shift_to_zero_max(raw, scores.dtype) / (temperature * shrink)
    return torch.where(rows.unsqueeze(-1), logits, torch.zeros_like(logits))


def _shift_to_zero_max(raw: Tensor, scores_dtype: torch.dtype) -> Tensor:
    """Rows shifted to a maximum of 0 (the softmax is unchanged) when the logits are no wider than
    the scores (float64 scores, or a device without float64): at a tiny tau a logit may then reach
    -inf (probability 0) but never +inf, whose softmax is NaN. Wider logits need no shift: with
    tau held at or above the scores' smallest normal number, raw / tau stays far inside float64
    (|raw| < 2 n max|s| < 1e42 for float32 scores), and the common path pays nothing. A row of
    -inf only (no real column) is left as it is."""
    if raw.dtype != scores_dtype:
        return raw
    top = raw.detach().amax(-1, keepdim=True)
    return raw - torch.where(torch.isfinite(top), top, torch.zeros_like(top))


def _phat_chunk(s: Tensor, b: Tensor, coef: Tensor, rf: Tensor, cf: Tensor, tau: float) -> Tensor:
    """P-hat of a chunk of queries from the parts of ``_neural_sort_parts`` (no autograd, in place),
    formed in the parts' (wide) dtype and returned in the dtype of ``rf``."""
    logits = coef.unsqueeze(-1) * s.unsqueeze(-2)
    logits.sub_(b.unsqueeze(-2))
    logits.masked_fill_(cf.unsqueeze(-2) == 0, float("-inf"))
    logits = _shift_to_zero_max(logits, rf.dtype).div_(tau)
    logits.masked_fill_(rf.unsqueeze(-1) == 0, 0.0)
    p = torch.softmax(logits, dim=-1).to(rf.dtype)
    return p.mul_(rf.unsqueeze(-1))


@without_autocast
def neural_sort(scores: Tensor, *, mask: Tensor | None = None, temperature: float = 1.0) -> Tensor:
    r"""NeuralSort relaxation P-hat of the permutation matrix sorting ``scores`` descending.

    Equation 3 of Pobrotyn & Bialobrzeski (2021), after Grover et al. (2019):

    .. math::
        \hat P[r, :] = \mathrm{softmax}\big(((m + 1 - 2r)\, s - A_s \mathbf 1) / \tau\big),
        \qquad A_s[i, j] = |s_i - s_j|,

    over the ``m`` real items of each row, r = 1..m. Each real row is a distribution over the real
    items (row-stochastic), unimodal, and tends to the exact sorting permutation as tau -> 0.

    Parameters
    ----------
    scores : Tensor, shape (batch, n)
    mask : bool Tensor, shape (batch, n), optional
        True for real items. Padded items get no mass and do not change the real items' rows.
    temperature : float
        tau > 0.

    Returns
    -------
    Tensor, shape (batch, n, n)
        Row r-1 is rank r, column j is input position j; padded ranks/items are zero rows/columns.

    Examples
    --------
    >>> import torch
    >>> from smoothrank.sorting import neural_sort
    >>> neural_sort(torch.tensor([[0.1, 2.0, 1.0]]), temperature=0.1).round(decimals=3)
    tensor([[[0., 1., 0.],
             [0., 0., 1.],
             [1., 0., 0.]]])
    """
    mask = check_scores_mask(scores, mask)
    tau = within_dtype(_check_temperature(temperature), scores.dtype, divides=True)
    logits = _neural_sort_logits(scores, mask, tau)  # float64 where the device has it
    p_hat = torch.softmax(logits, dim=-1).to(scores.dtype)
    return p_hat * rank_mask(mask).unsqueeze(-1).to(p_hat.dtype)


def stochastic_neural_sort(scores: Tensor, *, mask: Tensor | None = None, temperature: float = 1.0,
                           n_samples: int = 1, beta: float = 1.0,
                           generator: torch.Generator | int | None = None) -> Tensor:
    r"""Stochastic NeuralSort: P-hat of Gumbel-perturbed scores (a Plackett-Luce sampler).

    Grover et al. (2019) perturb positive Plackett-Luce weights ``w`` as ``beta log w + g`` with
    i.i.d. standard Gumbel ``g``. Scores here are real-valued (possibly non-positive), so they are
    read as *log*-weights, ``w = exp(s)``: the perturbed scores are ``beta * s + g``, defined for
    every real score (no log of a non-positive number is ever taken). The Gumbel location does not
    matter since P-hat is shift-invariant. Real item number k of a row (its index among the row's
    real items) gets the noise drawn at position k (:func:`gumbel_perturb`), so for a given
    generator state the samples do not depend on where the padding sits.

    Returns
    -------
    Tensor, shape (n_samples, batch, n, n)
        Sample-major; every sample of query b uses query b's mask. Half-precision scores are
        perturbed and sorted in float32 (:func:`gumbel_perturb`); P-hat is returned in their dtype.
    """
    mask = check_scores_mask(scores, mask)
    tau = _check_temperature(temperature)
    n_samples = check_positive_int(n_samples, "n_samples")
    beta = check_positive(beta, "beta")
    generator = check_generator(generator)
    shape = (n_samples, *scores.shape)
    if scores.shape[-1] == 0:  # lists of no item, as neural_sort
        return scores.new_zeros(n_samples, scores.shape[0], 0, 0)
    perturbed = gumbel_perturb(scores, n_samples=n_samples, beta=beta, generator=generator, mask=mask)
    flat_mask = mask.unsqueeze(0).expand(shape).reshape(-1, scores.shape[-1])
    p = neural_sort(perturbed.reshape(-1, scores.shape[-1]), mask=flat_mask, temperature=tau)
    return p.reshape(*shape, scores.shape[-1]).to(scores.dtype)


def gumbel_perturb(scores: Tensor, *, n_samples: int, beta: float,
                   generator: torch.Generator | int | None = None, mask: Tensor | None = None) -> Tensor:
    """``beta * scores + g`` with independent standard Gumbel noise g, shape ``(n_samples, *scores.shape)``.

    Half-precision scores are perturbed in float32, and the result is float32: bfloat16 cannot hold
    the noise (its uniform draws stop at 0.992, which cut the Gumbel tail at 4.8 and made a gap of 6
    win 3.4 times too rarely).

    The noise is drawn on the generator's device (the scores' device without a generator) and moved
    to the scores' device, so that a CPU generator gives the same noise whatever the scores' device.
    With a ``mask`` (True = real item), real item number k of a row (its index among the row's real
    items) gets the noise drawn at position k: the noise of the real items does not depend on where
    the padding sits, and with the padding at the end of every row it is the noise drawn without a mask.
    """
    if not isinstance(scores, Tensor) or not scores.is_floating_point():
        what = scores.dtype if isinstance(scores, Tensor) else type(scores).__name__
        raise SmoothrankError(f"scores: expected a floating torch.Tensor, got {what}")
    n_samples = check_positive_int(n_samples, "n_samples")
    beta = check_positive(beta, "beta")
    generator = check_generator(generator)
    real = None if mask is None else check_mask(mask, scores)
    if not bool(torch.isfinite(scores.detach() if real is None else scores.detach()[real]).all()):
        raise SmoothrankError("scores: NaN or infinite value at a real (unmasked) position")
    if scores.dtype in (torch.float16, torch.bfloat16):
        scores = scores.float()
    shape = (n_samples, *scores.shape)
    device = generator.device if generator is not None else scores.device
    u = torch.rand(shape, generator=generator, dtype=scores.dtype, device=device).to(scores.device)
    if real is not None:
        u = u.gather(-1, real_first_slots(real).expand(shape))
    finfo = torch.finfo(scores.dtype)
    gumbel = -torch.log(-torch.log(u.clamp(finfo.tiny, 1.0 - finfo.eps)))
    perturbed = float(beta) * scores.unsqueeze(0) + gumbel
    kept = perturbed.detach() if real is None else perturbed.detach()[:, real]
    if not bool(torch.isfinite(kept).all()):
        largest = float((scores.detach() if real is None else scores.detach()[real]).abs().max())
        raise SmoothrankError(f"beta: beta * scores overflows {scores.dtype} (beta = {beta:g}, largest "
                              f"|score| {largest:.4g}); lower beta or rescale the scores")
    return perturbed


def real_first_slots(mask: Tensor) -> Tensor:
    """Slot of every position once each row's real items are moved, in order, before its padded ones.

    Returns an int64 tensor of the mask's shape: real item number k of a row (k = its index among the
    row's real items) has slot k, and the j-th padded position of a row with m real items has slot
    m + j. A permutation of ``0..n-1`` per row, the identity where the padding is at the end. The
    randomized losses draw their noise for slot k and give it to the item in slot k, so that a real
    item's noise does not depend on where the padding sits.
    """
    real = mask.cumsum(-1)
    padded = torch.arange(1, mask.shape[-1] + 1, device=mask.device) - real
    return torch.where(mask, real - 1, real[..., -1:] + padded - 1)


# --------------------------------------------------------------------------- Sinkhorn
#: Sinkhorn refuses entries below -NEGATIVE_SLACK x the matrix's largest entry.
NEGATIVE_SLACK = 1e-3


def _split_mask(matrix: Tensor, mask: Tensor | tuple[Tensor, Tensor] | None) -> tuple[Tensor, Tensor]:
    if not isinstance(matrix, Tensor):
        raise SmoothrankError(f"matrix: expected a torch.Tensor, got {type(matrix).__name__}")
    if matrix.dim() != 3 or matrix.shape[-1] != matrix.shape[-2]:
        raise SmoothrankError(f"matrix: expected shape (batch, n, n), got {tuple(matrix.shape)}")
    if not matrix.is_floating_point():
        raise SmoothrankError(f"matrix: expected a floating dtype, got {matrix.dtype}")
    b, n, _ = matrix.shape
    if mask is None:
        full = torch.ones(b, n, dtype=torch.bool, device=matrix.device)
        return full, full
    if isinstance(mask, tuple | list) and len(mask) != 2:
        raise SmoothrankError(f"mask: expected one boolean mask or a pair (row_mask, col_mask), "
                              f"got {len(mask)}")
    row_mask, col_mask = mask if isinstance(mask, tuple | list) else (mask, mask)
    for name, mk in (("row mask", row_mask), ("column mask", col_mask)):
        if not isinstance(mk, Tensor) or mk.dtype != torch.bool or mk.shape != (b, n):
            raise SmoothrankError(f"mask: the {name} must be a boolean tensor of shape {(b, n)}")
    if not torch.equal(row_mask.sum(-1), col_mask.sum(-1)):
        raise SmoothrankError("mask: every row must have as many real rows as real columns")
    return row_mask.to(matrix.device), col_mask.to(matrix.device)


def _vecmat(u: Tensor, k: Tensor) -> Tensor:
    """Batched ``u^T K``. ``K v`` is computed as ``v^T K^T`` on a contiguous copy of K^T: on CPU the
    row-vector-times-matrix product of a batch runs several times faster than matrix-times-vector."""
    return torch.matmul(u.unsqueeze(-2), k).squeeze(-2)


def _check_every(device: torch.device) -> int:
    return 1 if device.type == "cpu" else _DEVICE_CHECK_EVERY


def _sinkhorn_chunk(kc: Tensor, ktc: Tensor, rf: Tensor, cf: Tensor, max_iter: int, tol: float
                    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Sinkhorn iterations on one chunk of queries (K and a contiguous K^T), no autograd.

    Returns the final (u, v, marginal error) and the iterates u_1..u_T, v_0..v_T and the
    per-step activity flags (False once a query has stopped) needed by the adjoint pass.
    """
    c, n, _ = kc.shape
    tiny = torch.finfo(kc.dtype).tiny
    us = kc.new_zeros(c, max_iter, n)
    vs = kc.new_zeros(c, max_iter + 1, n)
    active = torch.zeros(c, max_iter, dtype=torch.bool, device=kc.device)
    v = cf.clone()
    u = torch.zeros_like(rf)
    vs[:, 0] = v
    kv = _vecmat(v, ktc)
    act = torch.ones(c, dtype=torch.bool, device=kc.device)
    e = kc.new_zeros(c)
    check_every = _check_every(kc.device)
    for t in range(max_iter):
        u_new = rf / kv.clamp_min(tiny)
        ktu = _vecmat(u_new, kc)
        v_new = cf / ktu.clamp_min(tiny)
        kv = _vecmat(v_new, ktc)
        # Column sums are exactly one after the column step; rows are off by u * (K v) - 1.
        e_new = torch.maximum((u_new * kv - rf).abs().amax(-1), (v_new * ktu - cf).abs().amax(-1))
        a = act.unsqueeze(-1)
        u = torch.where(a, u_new, u)
        v = torch.where(a, v_new, v)
        e = torch.where(act, e_new, e)
        us[:, t] = u
        vs[:, t + 1] = v
        active[:, t] = act
        act = act & (e_new >= tol)  # strict '< tol' stops; tol = 0 never stops
        if (t + 1) % check_every == 0 and not bool(act.any()):
            break
    return u, v, e, us, vs, active


def _sinkhorn_adjoint_chunk(kc: Tensor, ktc: Tensor, us: Tensor, vs: Tensor, active: Tensor,
                            bu: Tensor, bv: Tensor, extra: int = 0) -> tuple[Tensor, Tensor]:
    """Reverse pass of the iterations for adjoints (bu, bv) of the final (u, v).

    Returns matrices (A, B) of shape (c, n, 2 T + extra) with dL/dK = A @ B^T: the gradient for K
    is a sum of outer products of per-iteration vectors, gathered into one batched product. The
    last ``extra`` columns are left zero for the caller's own outer products.
    """
    c, n, _ = kc.shape
    steps = active.sum(-1)
    t_max = int(steps.max()) if c > 0 else 0
    left = kc.new_zeros(c, n, 2 * t_max + extra)
    right = kc.new_zeros(c, n, 2 * t_max + extra)
    bu, bv = bu.clone(), bv.clone()
    for t in range(t_max - 1, -1, -1):
        a = active[:, t].unsqueeze(-1).to(kc.dtype)
        u_t, v_t, v_prev = us[:, t], vs[:, t + 1], vs[:, t]
        # v_t = 1 / (K^T u_t):  wbar = -vbar * v_t^2, contributes u_t wbar^T to dK.
        w_bar = -a * bv * v_t * v_t
        bu = bu + _vecmat(w_bar, ktc)
        # u_t = 1 / (K v_{t-1}):  zbar = -ubar * u_t^2, contributes zbar v_{t-1}^T to dK.
        z_bar = -a * bu * u_t * u_t
        left[..., 2 * t] = u_t
        right[..., 2 * t] = w_bar
        left[..., 2 * t + 1] = z_bar
        right[..., 2 * t + 1] = v_prev
        # A stopped query's later steps are identities: its adjoints pass through unchanged.
        bv = a * _vecmat(z_bar, kc) + (1.0 - a) * bv
        bu = (1.0 - a) * bu
    return left, right


def _chunk_size(n: int, dtype: torch.dtype, device: torch.device) -> int:
    budget = _CHUNK_BYTES if device.type == "cpu" else _DEVICE_CHUNK_BYTES
    return max(1, budget // max(1, n * n * torch.empty((), dtype=dtype).element_size()))


class _SinkhornScaling(torch.autograd.Function):
    """Scaling vectors (u, v) with diag(u) K diag(v) doubly stochastic; see ``sinkhorn_scaling``."""

    @staticmethod
    def forward(ctx, k, row_f, col_f, max_iter, tol, chunk):
        batch, n, _ = k.shape
        us = k.new_zeros(batch, max_iter, n)
        vs = k.new_zeros(batch, max_iter + 1, n)  # v_0 .. v_T
        active = torch.zeros(batch, max_iter, dtype=torch.bool, device=k.device)
        err, u_out, v_out = k.new_zeros(batch), k.new_zeros(batch, n), k.new_zeros(batch, n)
        for lo in range(0, batch, chunk):
            hi = min(lo + chunk, batch)
            kc = k[lo:hi]
            u, v, e, us[lo:hi], vs[lo:hi], active[lo:hi] = _sinkhorn_chunk(
                kc, kc.transpose(-1, -2).contiguous(), row_f[lo:hi], col_f[lo:hi], max_iter, tol)
            u_out[lo:hi], v_out[lo:hi], err[lo:hi] = u, v, e
        ctx.save_for_backward(k, us, vs, active)
        ctx.chunk = chunk
        ctx.mark_non_differentiable(err)
        return u_out, v_out, err

    @staticmethod
    @first_derivative_only("Sinkhorn scaling")
    @without_autocast
    def backward(ctx, gu, gv, _gerr):
        k, us, vs, active = ctx.saved_tensors
        gu = torch.zeros_like(us[:, 0]) if gu is None else gu
        gv = torch.zeros_like(vs[:, 0]) if gv is None else gv
        grad_k = torch.empty_like(k)
        for lo in range(0, k.shape[0], ctx.chunk):
            hi = min(lo + ctx.chunk, k.shape[0])
            kc = k[lo:hi]
            left, right = _sinkhorn_adjoint_chunk(kc, kc.transpose(-1, -2).contiguous(), us[lo:hi],
                                                  vs[lo:hi], active[lo:hi], gu[lo:hi], gv[lo:hi])
            grad_k[lo:hi] = torch.matmul(left, right.transpose(-1, -2))
        return grad_k, None, None, None, None, None


@without_autocast
def sinkhorn_scaling(matrix: Tensor, *, mask: Tensor | tuple[Tensor, Tensor] | None = None,
                     max_iter: int = 30, tol: float = 1e-6, columns_first: bool = False
                     ) -> tuple[Tensor, Tensor, Tensor]:
    r"""Sinkhorn-Knopp scaling vectors of a nonnegative matrix K.

    Alternately normalises rows and columns (Sinkhorn 1964; NeuralNDCG section 4.2), written on
    scaling vectors: with ``v_0 = 1``,

    .. math::
        u_t = 1 / (K v_{t-1}), \qquad v_t = 1 / (K^\top u_t), \qquad P = \mathrm{diag}(u) K \mathrm{diag}(v),

    for ``t = 1..max_iter``, stopping a query as soon as every real row and column sum of P is
    less than ``tol`` away from one (so ``tol=0`` runs exactly ``max_iter`` iterations); a
    stopped query's later iterations are identities. ``columns_first`` normalises
    columns first (the scaling of K^T, returned for K).

    Memory and time: the forward pass keeps only the O(T n) iterates u_t, v_t, never a
    (batch, n, n) matrix per iteration. The backward pass (a custom autograd function) runs the
    adjoint recursion on vectors and gathers the gradient for K, a sum of 2T outer products
    ``u_t wbar_t^T + zbar_t v_{t-1}^T``, into one batched matrix product. It is the exact gradient
    of the unrolled iterations (equal to autograd through them), not an implicit approximation.
    Work runs in chunks of queries: small enough to stay in cache on the CPU, the whole batch on
    a GPU (where kernel launches, not memory traffic, are the cost).

    Parameters
    ----------
    matrix : Tensor (batch, n, n), nonnegative
    mask : bool Tensor (batch, n), or a pair (row_mask, col_mask), optional
        Real rows/columns; the others are excluded (zero scaling). Each query must have as many
        real rows as real columns; the real block is scaled to doubly stochastic.
    max_iter, tol : the iteration budget and the marginal tolerance (paper: 30 and 1e-6).

    Raises
    ------
    SmoothrankError
        If a real row or column of the matrix has no positive entry (no scaling exists).

    Returns
    -------
    (u, v, marginal_error): u, v of shape (batch, n) (zero at masked positions) and the largest
    deviation of a real row or column sum from one after the last iteration, shape (batch,).
    """
    row_mask, col_mask = _split_mask(matrix, mask)
    max_iter = check_positive_int(max_iter, "max_iter")
    tol = check_nonnegative(tol, "tol")
    if columns_first:
        v, u, err = sinkhorn_scaling(matrix.transpose(-1, -2).contiguous(), mask=(col_mask, row_mask),
                                     max_iter=max_iter, tol=tol)
        return u, v, err
    dtype = matrix.dtype
    if matrix.shape[-1] == 0:  # lists of no item: nothing to scale
        empty = matrix.new_zeros(matrix.shape[:2])
        return empty, empty.clone(), matrix.new_zeros(len(matrix))
    keep = (row_mask.unsqueeze(-1) & col_mask.unsqueeze(-2))
    k = matrix if bool(keep.all()) else torch.where(keep, matrix, torch.zeros((), dtype=dtype,
                                                                               device=matrix.device))
    # Negative entries are refused, bar rounding and perturbation (probabilities computed by FFT,
    # SoftRank's default off the CPU, come out as small as -180 eps in float32 at n = 300, and
    # gradcheck moves near-zero entries by -1e-6): below -1e-3 x the largest entry of their query.
    # k is zero outside the real block. One check, one device sync, on the common path.
    kd = k.detach()
    top = kd.abs().amax((-1, -2), keepdim=True)
    if not bool((torch.isfinite(kd) & (kd >= -NEGATIVE_SLACK * top)).all()):
        if not bool(torch.isfinite(kd).all()):
            raise SmoothrankError("matrix: NaN or infinite entry in the real block (no Sinkhorn scaling)")
        raise SmoothrankError("matrix: negative entry in the real block (Sinkhorn scales nonnegative ones)")
    # A real row or column with no positive entry has no doubly stochastic scaling: the scaling
    # vectors would overflow and the gradient turn NaN. Refuse it instead of returning garbage; and
    # a row or column whose sum overflows (all zeros came back).
    row_sums, col_sums = k.detach().sum(-1), k.detach().sum(-2)
    bad_rows = ((row_sums <= 0) | ~torch.isfinite(row_sums)) & row_mask
    bad_cols = ((col_sums <= 0) | ~torch.isfinite(col_sums)) & col_mask
    if bool(bad_rows.any() | bad_cols.any()):
        rows_bad = bool(bad_rows.any())
        kind, where, sums = ("row", bad_rows, row_sums) if rows_bad else ("column", bad_cols, col_sums)
        query, index = (int(i) for i in where.nonzero()[0])
        if not bool(torch.isfinite(sums[query, index])):
            raise SmoothrankError(f"matrix: the sum of real {kind} {index} of query {query} overflows "
                                  f"{dtype}; scale the matrix down (Sinkhorn's result does not change)")
        raise SmoothrankError(f"matrix: real {kind} {index} of query {query} has no positive entry, so it "
                              "cannot be scaled to doubly stochastic (raise tiny entries, e.g. by a floor)")
    chunk = _chunk_size(matrix.shape[-1], dtype, matrix.device)
    u, v, err = _SinkhornScaling.apply(k, row_mask.to(dtype), col_mask.to(dtype), int(max_iter),
                                       float(tol), chunk)
    return u, v, err


def sinkhorn_with_info(matrix: Tensor, *, mask: Tensor | tuple[Tensor, Tensor] | None = None,
                       max_iter: int = 30, tol: float = 1e-6) -> tuple[Tensor, Tensor]:
    """Sinkhorn scaling of ``matrix`` to a doubly stochastic matrix, plus the reached marginal error.

    See :func:`sinkhorn_scaling` for the algorithm, masking and the memory-light backward pass.

    Returns
    -------
    (P, marginal_error): P of shape (batch, n, n), zero outside the real block, and the largest
    ``|row or column sum - 1|`` of each query, shape (batch,) (below ``tol`` unless ``max_iter`` ran out).
    """
    row_mask, col_mask = _split_mask(matrix, mask)
    u, v, err = sinkhorn_scaling(matrix, mask=(row_mask, col_mask), max_iter=max_iter, tol=tol)
    keep = row_mask.unsqueeze(-1) & col_mask.unsqueeze(-2)  # padded entries may hold NaN or inf
    real = matrix if bool(keep.all()) else torch.where(keep, matrix, torch.zeros((), dtype=matrix.dtype,
                                                                                 device=matrix.device))
    return u.unsqueeze(-1) * real * v.unsqueeze(-2), err


def sinkhorn(matrix: Tensor, *, mask: Tensor | tuple[Tensor, Tensor] | None = None,
             max_iter: int = 30, tol: float = 1e-6) -> Tensor:
    """Sinkhorn scaling of a nonnegative ``(batch, n, n)`` matrix; see :func:`sinkhorn_with_info`.

    Examples
    --------
    >>> import torch
    >>> from smoothrank.sorting import sinkhorn
    >>> ds = sinkhorn(torch.tensor([[[1.0, 2.0], [3.0, 4.0]]]))
    >>> ds.sum(-1).round(decimals=4), ds.sum(-2).round(decimals=4)
    (tensor([[1., 1.]]), tensor([[1., 1.]]))
    """
    return sinkhorn_with_info(matrix, mask=mask, max_iter=max_iter, tol=tol)[0]


def _fill_empty_columns(p: Tensor, rf: Tensor, cf: Tensor) -> Tensor:
    """Set the real entries of every real item column of P-hat whose mass underflowed (all below
    eps^2) to eps^2, in place; return the mask of entries set.

    At a tiny tau an item one rounding error below another loses both ranks to it (float64 scores
    have no wider dtype for the logits; see ``_neural_sort_parts``). Sinkhorn would divide by that
    empty column and return NaN; with the floor (SoftRank's, ``sinkhorn_rank_matrix``) the two
    items share their ranks, as tied items do. Columns with any mass are left bit for bit.
    """
    floor = torch.finfo(p.dtype).eps ** 2
    empty = (p.amax(-2) < floor) & (cf > 0)
    filled = empty.unsqueeze(-2) & (rf > 0).unsqueeze(-1)
    p.masked_fill_(filled, floor)
    return filled


class _NeuralSortBilinear(torch.autograd.Function):
    """Per-query ``left^T scale(P-hat) right``; see ``neural_sort_bilinear``."""

    @staticmethod
    def _operands(p, rows_f, cols_f, left, right, transposed):
        # Eq. 6 scales P-hat^T: run the same row-first scaling on K = P-hat^T (items x ranks).
        if transposed:
            return p.transpose(-1, -2).contiguous(), p, cols_f, rows_f, right, left
        return p, p.transpose(-1, -2).contiguous(), rows_f, cols_f, left, right

    @staticmethod
    def forward(ctx, s, b, coef, rows_f, cols_f, left, right, tau, sinkhorn, transposed, max_iter, tol,
                chunk):
        # s, b, coef are in the wide dtype (P-hat's logits); everything else is in the scores' dtype.
        batch, n = s.shape
        value, err = left.new_zeros(batch), left.new_zeros(batch)
        steps = max_iter if sinkhorn else 0
        us, vs = left.new_zeros(batch, steps, n), left.new_zeros(batch, steps + 1, n)
        active = torch.zeros(batch, steps, dtype=torch.bool, device=s.device)
        u_fin, v_fin = left.new_zeros(batch, n), left.new_zeros(batch, n)
        for lo in range(0, batch, chunk):
            sl = slice(lo, min(lo + chunk, batch))
            p = _phat_chunk(s[sl], b[sl], coef[sl], rows_f[sl], cols_f[sl], tau)
            if sinkhorn:
                _fill_empty_columns(p, rows_f[sl], cols_f[sl])
            k, kt, rf, cf, lv, rv = _NeuralSortBilinear._operands(p, rows_f[sl], cols_f[sl], left[sl],
                                                                  right[sl], transposed)
            if sinkhorn:
                u, v, err[sl], us[sl], vs[sl], active[sl] = _sinkhorn_chunk(k, kt, rf, cf, max_iter, tol)
                u_fin[sl], v_fin[sl] = u, v
                value[sl] = (u * lv * _vecmat(v * rv, kt)).sum(-1)
            else:
                value[sl] = (lv * _vecmat(rv, kt)).sum(-1)
        ctx.save_for_backward(s, b, coef, rows_f, cols_f, left, right, us, vs, active, u_fin, v_fin)
        ctx.opts = (tau, sinkhorn, transposed, chunk)
        ctx.mark_non_differentiable(err)
        return value, err

    @staticmethod
    @first_derivative_only("NeuralNDCG (NeuralSort and Sinkhorn)")
    @without_autocast
    def backward(ctx, gval, _gerr):
        s, b, coef, rows_f, cols_f, left, right, us, vs, active, u_fin, v_fin = ctx.saved_tensors
        tau, sinkhorn, transposed, chunk = ctx.opts
        grad_s, grad_b = torch.zeros_like(s), torch.zeros_like(b)
        for lo in range(0, s.shape[0], chunk):
            sl = slice(lo, min(lo + chunk, s.shape[0]))
            # Recompute P-hat for this chunk instead of keeping the whole batch's matrices alive.
            p = _phat_chunk(s[sl], b[sl], coef[sl], rows_f[sl], cols_f[sl], tau)
            filled = _fill_empty_columns(p, rows_f[sl], cols_f[sl]) if sinkhorn else None
            k, kt, _, _, lv, rv = _NeuralSortBilinear._operands(p, rows_f[sl], cols_f[sl], left[sl],
                                                                right[sl], transposed)
            g = gval[sl].unsqueeze(-1)
            if sinkhorn:
                u, v = u_fin[sl], v_fin[sl]
                bu = g * lv * _vecmat(v * rv, kt)
                bv = g * rv * _vecmat(u * lv, k)
                a_cols, b_cols = _sinkhorn_adjoint_chunk(k, kt, us[sl], vs[sl], active[sl], bu, bv, extra=1)
                # value = (u * lv)^T K (v * rv): its direct K-gradient is one more outer product.
                a_cols[..., -1] = g * u * lv
                b_cols[..., -1] = v * rv
                dk = torch.matmul(a_cols, b_cols.transpose(-1, -2))
            else:
                dk = (g * lv).unsqueeze(-1) * rv.unsqueeze(-2)
            dp = dk.transpose(-1, -2) if transposed else dk
            # The floor does not depend on the scores. (Only where there is one: the copy would
            # change the layout of dp, hence the order of its sums below, in the last bits.)
            if filled is not None and bool(filled.any()):
                dp = dp.masked_fill(filled, 0.0)
            # Softmax backward row by row; padded rows and columns have p = 0 and get nothing.
            dlogits = (dp - (dp * p).sum(-1, keepdim=True)).mul_(p)
            # Divided by tau in the logits' wide dtype: in half precision a small tau overflowed the
            # quotient to inf, and inf - inf further down made NaN of every item's gradient.
            grad_s[sl] = _vecmat(coef[sl].to(dlogits.dtype), dlogits).to(s.dtype) / tau
            grad_b[sl] = -dlogits.sum(-2).to(s.dtype) / tau
        return grad_s, grad_b, *([None] * 11)


@without_autocast
def neural_sort_bilinear(scores: Tensor, left: Tensor, right: Tensor, *, mask: Tensor | None = None,
                         temperature: float = 1.0, sinkhorn: bool = True, transposed: bool = False,
                         max_iter: int = 30, tol: float = 1e-6) -> tuple[Tensor, Tensor]:
    r"""Per-query ``left^T scale(P-hat) right`` without keeping any (batch, n, n) tensor for backward.

    With P-hat = :func:`neural_sort` (rows = ranks, columns = items), ``left`` a per-rank vector
    (e.g. discounts) and ``right`` a per-item vector (e.g. gains):

    * ``transposed=False``: ``left^T scale(P-hat) right`` (NeuralNDCG's DCG, equation 5);
    * ``transposed=True``:  ``right^T scale(P-hat^T) left`` (NeuralNDCG^T's DCG, equation 6:
      Sinkhorn applied to P-hat^T, i.e. items normalised first);

    scale() being Sinkhorn scaling (:func:`sinkhorn_scaling`) or the identity (``sinkhorn=False``).

    The computation runs in chunks of queries (cache-sized on the CPU, the batch on a GPU); the
    backward pass recomputes each chunk's P-hat, runs the Sinkhorn adjoint recursion on vectors
    and gathers the matrix gradient with one batched product, then applies the softmax backward
    and returns gradients for the scores only (``left`` and ``right`` are treated as constants).
    The gradient is exactly that of the unrolled computation.

    Returns
    -------
    (value, marginal_error), both of shape (batch,); the error is 0 without Sinkhorn.
    """
    mask = check_scores_mask(scores, mask)
    tau = within_dtype(_check_temperature(temperature), scores.dtype, divides=True)
    for name, vec in (("left", left), ("right", right)):
        if not isinstance(vec, Tensor) or vec.shape != scores.shape:
            raise SmoothrankError(f"{name}: expected a tensor of shape {tuple(scores.shape)}")
    max_iter = check_positive_int(max_iter, "max_iter")
    tol = check_nonnegative(tol, "tol")
    s, b, coef, shrink = _neural_sort_parts(scores, mask)
    dtype = scores.dtype
    rows_f, cols_f = rank_mask(mask).to(dtype), mask.to(dtype)
    left = left.detach().to(dtype) * rows_f
    right = right.detach().to(dtype) * cols_f
    return _NeuralSortBilinear.apply(s, b, coef, rows_f, cols_f, left, right, tau * shrink, bool(sinkhorn),
                                     bool(transposed), int(max_iter), float(tol),
                                     _chunk_size(scores.shape[-1], dtype, scores.device))
