"""The exact Rank-Binomial distribution (Taylor et al., SoftRank, WSDM 2008, eqs. 11-12).

The 0-based rank of document ``j`` is the number of competitors that beat it, a sum of
independent Bernoulli(pi_ij) variables under the pairwise-contest approximation. Its
distribution follows from the convolution recursion, adding one competitor ``i`` at a time:

    p_j^(1)(r) = delta(r)
    p_j^(i)(r) = p_j^(i-1)(r - 1) pi_ij + p_j^(i-1)(r) (1 - pi_ij)            (eq. 12)

Truncation: ranks ``r < R`` only read ranks ``< R`` of the previous step, so a cutoff ``R``
(SoftNDCG@k needs ``R = k``) is exact and costs ``O(n^2 R)`` per query instead of ``O(n^3)``.

Gradients (:class:`RankBinomial`): plain autograd through the recursion would keep ``n``
intermediate ``(batch, n, R)`` tensors (3.5 GB at 64 x 240 in float32). The backward pass here
is the adjoint of the recursion, run in reverse over the competitors:

    a^(i-1)(r) = a^(i)(r) (1 - pi_ij) + a^(i)(r + 1) pi_ij
    dL/dpi_ij  = sum_r a^(i)(r) (p_j^(i-1)(r - 1) - p_j^(i-1)(r))

starting from ``a^(N) = dL/dp_j``. It needs the forward states ``p_j^(i-1)`` in reverse order.
Recovering them by dividing out a Bernoulli factor is unstable (the division by ``1 - pi`` or
``pi`` blows up when ``pi`` is near 1 or 0, and amplifies rounding when it is near 0.5), so the
states are recomputed instead:

* CPU (Numba kernels, :mod:`smoothrank.softrank._numba`): every (query, document) recursion is
  independent. For all documents (:class:`BlockedRankBinomial`) the recursions of a block of 64
  documents of one query run side by side, documents in the vectorised inner loop; the backward
  keeps a checkpoint every ``sqrt(n)`` steps per block and regenerates each segment from it
  (``O(threads (sqrt(n) + n / sqrt(n)) R 64)`` memory); the contests are formed a few queries,
  or a block of one long query's document columns, at a time. For a few selected documents (the
  hybrid) one recursion per document forms its own contests, keeps its ``n x R`` states (or, on
  long lists, ``sqrt(n)`` checkpoints) and sweeps back through them.
* ``backend="torch"`` (pure PyTorch): the batch is swept competitor by competitor; the backward
  stores a checkpoint every ``c = ceil(sqrt(n))`` steps during a recomputed forward and
  regenerates each segment of ``c`` states from its checkpoint: ``O(sqrt(n))`` tensors of shape
  (batch, n, R). Its ``3n`` sequential steps make it launch- and bandwidth-bound on a GPU.
* GPUs (``backend="fft"``, the default off the CPU): no recursion at all. The rank distribution
  is the coefficient list of the polynomial ``prod_i (1 - pi_ij + pi_ij x)``, so its discrete
  Fourier transform at the ``N``-th roots of unity ``w^k`` (odd ``N >= n``) is a product:

      F_j(k) = sum_r p_j(r) w^(-k r) = prod_i (1 + pi_ij z_k),   z_k = w^(-k) - 1,   w = e^(2 pi i / N)

  computed as ``exp(sum_i log(1 + pi_ij z_k))`` for the ``(N + 1) / 2`` non-redundant ``k``
  (``p`` is real) and inverted with one real inverse FFT. Its gradient is closed-form,

      dL/dpi_ij = Re sum_k c_k G_j(k) F_j(k) z_k / (N (1 + pi_ij z_k)),   G_j(k) = sum_r dL/dp_j(r) w^(k r),

  with ``c_0 = 1`` and ``c_k = 2`` otherwise (the conjugate half). ``1 + pi z_k`` never vanishes:
  it would need ``pi = 1/2`` and ``w^-k = -1``, which an odd ``N`` excludes. Every (document,
  competitor, frequency) term is independent, so a whole batch is a handful of large kernels;
  the work runs in blocks of documents of bounded size, and only ``F`` (``batch x n x N/2``
  complex numbers) is kept for the backward. Rounding: the sum of ``n`` logarithms carries about
  ``n`` ulps, so float32 inputs give probabilities to about ``1e-6`` absolute (float64 inputs:
  ``1e-14``); values that are exactly 0 may come out as tiny negative numbers of that size.

The adjoint is equivalent to the paper's forward-mode derivative recursion (eq. 18) contracted
with ``dL/dp`` (reverse mode costs one sweep instead of one per score ``m``); the tests compare
both.
"""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from smoothrank._autograd import first_derivative_only
from smoothrank._devices import wide_dtype
from smoothrank.errors import SmoothrankError
from smoothrank.softrank.pairwise import check_contest_matrix, contest_block, pair_mask

BACKENDS = ("auto", "numba", "torch", "fft")



_KERNELS = ("forward", "backward", "fused_forward", "fused_backward", "blocked_forward", "blocked_backward")
_JACOBIAN_KERNELS = ("expected_discounts", "jacobian_transpose_product")  # of smoothrank._softrank_numba
_loaded: list[SimpleNamespace | None] = []  # once loaded (a plain global: Dynamo warns of lru_cache)
_excluded: list[SimpleNamespace] = []  # the same kernels excluded from torch.compile, once Dynamo is loaded


def _kernels() -> SimpleNamespace | None:
    """The compiled kernels of :mod:`smoothrank.softrank._numba` and the per-query exact kernels of
    :mod:`smoothrank._softrank_numba`, imported on first use (Numba brings
    llvmlite and takes a second or two to import), or None where Numba cannot be imported: it is a
    declared dependency, but the pure-PyTorch path stays usable without it.

    Once Dynamo is loaded (``torch.compile`` imports it), each kernel is excluded from compilation (a
    graph break): Dynamo cannot trace Numba's dispatcher, and a compiled first call failed inside it.
    Until then they are called as they are: nothing can compile without Dynamo, and importing it only
    to wrap them cost 70 MiB and 2 s on a first eager call."""
    if not _loaded:
        try:
            from smoothrank import _softrank_numba
            from smoothrank.softrank import _numba
        except ImportError:  # pragma: no cover - depends on the environment
            _loaded.append(None)
        else:
            found = {name: getattr(_numba, name) for name in _KERNELS}
            found.update({name: getattr(_softrank_numba, name) for name in _JACOBIAN_KERNELS})
            _loaded.append(SimpleNamespace(**found))
    kernels = _loaded[0]
    if kernels is None or "torch._dynamo" not in sys.modules:
        return kernels
    if not _excluded:
        excluded = {name: torch.compiler.disable(fn) for name, fn in vars(kernels).items()}
        _excluded.append(SimpleNamespace(**excluded))
    return _excluded[0]


def _loaded_kernels() -> SimpleNamespace:
    """:func:`_kernels` on the Numba path, which :func:`resolve_backend` takes only where they load."""
    kernels = _kernels()
    assert kernels is not None, "the numba path is taken only where numba imports"
    return kernels


def __getattr__(name: str) -> Any:
    # HAVE_NUMBA: whether the compiled kernels can be used (importing it loads them).
    if name == "HAVE_NUMBA":
        return _kernels() is not None
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _use_numba(pi: Tensor, backend: str) -> bool:
    return resolve_backend(pi, backend) == "numba"


def check_backend(backend: str) -> str:
    """``backend`` if it is one of :data:`BACKENDS` (checked by every method, also where the normal
    approximation does not use it, so that a typo is never silently accepted)."""
    if backend not in BACKENDS:
        raise SmoothrankError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    return backend


def resolve_backend(pi: Tensor, backend: str) -> str:
    """The path ``backend`` takes for ``pi``: ``"auto"`` is the Numba kernel for float32/float64 CPU
    tensors and the FFT form elsewhere (GPUs), or the PyTorch recursion for other dtypes."""
    check_backend(backend)
    floating = pi.dtype in (torch.float32, torch.float64)
    # The kernel module is loaded only when a CPU float tensor could take it.
    kernel_ok = (pi.device.type == "cpu" and floating and backend in ("auto", "numba")
                 and _kernels() is not None)
    if backend == "numba" and not kernel_ok:
        raise SmoothrankError("backend: 'numba' needs numba and a float32/float64 CPU tensor")
    if backend == "fft" and not floating:
        raise SmoothrankError(f"backend: 'fft' needs a float32/float64 tensor, got {pi.dtype}")
    if backend != "auto":
        return backend
    if kernel_ok:
        return "numba"
    return "fft" if floating and pi.device.type != "cpu" else "torch"


# ----------------------------------------------------------------------------- pure PyTorch path
def _step(p: Tensor, w: Tensor) -> Tensor:
    """One convolution step of eq. 12 for every column: ``p(r) (1 - w) + p(r - 1) w``."""
    shifted = torch.nn.functional.pad(p[..., :-1], (1, 0))
    return p + (shifted - p) * w


def _torch_forward(pi: Tensor, n_ranks: int) -> Tensor:
    """Distributions of all columns ``j`` of ``pi`` (batch, n_i, n_j) -> (batch, n_j, R)."""
    batch, n_i, n_j = pi.shape
    p = pi.new_zeros(batch, n_j, n_ranks)
    p[..., 0] = 1.0
    for i in range(n_i):
        p = _step(p, pi[:, i, :, None])
    return p


def _torch_backward(pi: Tensor, grad_p: Tensor) -> Tensor:
    """Adjoint sweep with sqrt(n) checkpoints of the recomputed forward states."""
    batch, n_i, n_j = pi.shape
    n_ranks = grad_p.shape[-1]
    every = max(1, math.ceil(math.sqrt(n_i)))
    checkpoints: list[Tensor] = []
    p = pi.new_zeros(batch, n_j, n_ranks)
    p[..., 0] = 1.0
    for i in range(n_i):
        if i % every == 0:
            checkpoints.append(p)
        p = _step(p, pi[:, i, :, None])
    grad_pi = torch.zeros_like(pi)
    adj = grad_p
    for seg in range(len(checkpoints) - 1, -1, -1):
        start = seg * every
        stop = min(n_i, start + every)
        states = [checkpoints[seg]]
        for i in range(start, stop - 1):
            states.append(_step(states[-1], pi[:, i, :, None]))
        for i in range(stop - 1, start - 1, -1):
            old = states[i - start]
            shifted_old = torch.nn.functional.pad(old[..., :-1], (1, 0))
            grad_pi[:, i, :] = (adj * (shifted_old - old)).sum(-1)
            w = pi[:, i, :, None]
            adj_next = torch.nn.functional.pad(adj[..., 1:], (0, 1))
            adj = adj + (adj_next - adj) * w
    return grad_pi


# ----------------------------------------------------------------------------- FFT path
# Complex entries per block of the (documents, competitors, frequencies) work: 256 MiB of
# complex64 on a GPU, 32 MiB on the CPU (where the path runs only when asked for).
_FFT_BLOCK_ENTRIES = {"cpu": 1 << 22, "other": 1 << 25}


def _fft_points(n: int) -> int:
    """The odd number of DFT points ``N >= n`` (odd, so that ``1 + pi z_k`` cannot vanish)."""
    return n if n % 2 == 1 else n + 1


def _fft_frequencies(n_points: int, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """``z_k = exp(-2 pi i k / N) - 1`` for k = 0..(N-1)/2 and the weights ``c_k`` of the conjugate half."""
    # float64 where the device has it (Apple's MPS has neither float64 nor complex128)
    k = torch.arange((n_points + 1) // 2, device=device, dtype=wide_dtype(torch.float32, device))
    angle = 2.0 * math.pi * k / n_points
    z = torch.complex(torch.cos(angle) - 1.0, -torch.sin(angle))
    weight = torch.full_like(k, 2.0)
    weight[0] = 1.0
    complex_dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    return z.to(complex_dtype), weight.to(dtype)


def _fft_blocks(rows: int, n_competitors: int, n_freq: int, device: torch.device) -> list[slice]:
    budget = _FFT_BLOCK_ENTRIES["cpu" if device.type == "cpu" else "other"]
    per = max(1, budget // max(1, n_competitors * n_freq))
    return [slice(start, min(rows, start + per)) for start in range(0, rows, per)]


def _fft_forward(pi: Tensor, n_ranks: int) -> tuple[Tensor, Tensor]:
    """``p`` (batch, n_j, R) and the transform ``F`` (batch, n_j, K) from pi (batch, n_i, n_j)."""
    batch, n_i, n_j = pi.shape
    n_points = _fft_points(n_i)
    z, _ = _fft_frequencies(n_points, pi.dtype, pi.device)
    rows = pi.transpose(1, 2).reshape(batch * n_j, n_i)  # one row of competitors per document
    transform = torch.empty(batch * n_j, z.shape[0], dtype=z.dtype, device=pi.device)
    for block in _fft_blocks(rows.shape[0], n_i, z.shape[0], pi.device):
        terms = torch.log(1.0 + rows[block, :, None] * z)
        transform[block] = torch.exp(terms.sum(1))
    transform = transform.reshape(batch, n_j, z.shape[0])
    if transform.numel() == 0:  # an empty batch: the FFT libraries refuse zero-length batches
        return pi.new_zeros(batch, n_j, n_ranks), transform
    p = torch.fft.irfft(transform, n=n_points)[..., :n_ranks]
    return p.to(pi.dtype), transform


def _fft_backward(pi: Tensor, transform: Tensor, grad_p: Tensor) -> Tensor:
    batch, n_i, n_j = pi.shape
    if pi.numel() == 0:
        return torch.zeros_like(pi)
    n_points = _fft_points(n_i)
    z, weight = _fft_frequencies(n_points, pi.dtype, pi.device)
    # G_j(k) = sum_r g_j(r) w^(k r): the conjugate of the (real) incoming gradient's DFT
    spectrum = torch.conj(torch.fft.rfft(grad_p.to(pi.dtype), n=n_points))
    scaled = (spectrum * transform * z / n_points).reshape(batch * n_j, -1)
    rows = pi.transpose(1, 2).reshape(batch * n_j, n_i)
    grad_rows = torch.empty_like(rows)
    for block in _fft_blocks(rows.shape[0], n_i, z.shape[0], pi.device):
        terms = scaled[block, None, :] / (1.0 + rows[block, :, None] * z)
        grad_rows[block] = torch.real(terms) @ weight
    return grad_rows.reshape(batch, n_j, n_i).transpose(1, 2)


# ----------------------------------------------------------------------------- autograd Function
class RankBinomial(torch.autograd.Function):
    """``pi (batch, n, n), mask, select, R -> p (batch, n, R)`` with the adjoint backward above.

    ``pi[b, i, j]`` must be zero on the diagonal and wherever ``i`` or ``j`` is padding.
    ``select[b, j]`` picks the documents whose distribution is computed (others get zeros).
    """

    @staticmethod
    def forward(ctx: Any, pi: Tensor, mask: Tensor, select: Tensor, n_ranks: int, path: str) -> Tensor:
        ctx.path = path
        if path == "fft":
            p, transform = _fft_forward(pi.detach(), n_ranks)
            ctx.save_for_backward(pi, mask, select, transform)
            return p * (mask & select)[..., None].to(p.dtype)
        ctx.save_for_backward(pi, mask, select)
        numba = path == "numba"
        if numba:
            if bool((select | ~mask).all()):  # every real document: blocked kernel
                kernels = _loaded_kernels()
                out = kernels.blocked_forward(pi.detach().contiguous().numpy(), mask.numpy(), n_ranks)
                return torch.from_numpy(out) * mask[..., None].to(pi.dtype)
            pi_t = pi.detach().transpose(1, 2).contiguous().numpy()
            out = _loaded_kernels().forward(pi_t, mask.cpu().numpy(), select.cpu().numpy(), n_ranks)
            return torch.from_numpy(out)
        cols = mask & select
        p = _torch_forward(pi.detach(), n_ranks)
        return p * cols[..., None].to(p.dtype)

    @staticmethod
    @first_derivative_only("SoftNDCG (its rank distributions)")
    def backward(ctx: Any, grad_p: Tensor) -> tuple[Tensor | None, None, None, None, None]:
        pi, mask, select, *transform = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        cols = mask & select
        grad_p = grad_p * cols[..., None].to(grad_p.dtype)
        if ctx.path == "fft":
            grad_pi = _fft_backward(pi.detach(), transform[0], grad_p)
        elif ctx.path == "numba" and bool((select | ~mask).all()):
            g = _loaded_kernels().blocked_backward(pi.detach().contiguous().numpy(), mask.numpy(),
                                                   grad_p.contiguous().numpy())
            grad_pi = torch.from_numpy(g)
        elif ctx.path == "numba":
            pi_t = pi.detach().transpose(1, 2).contiguous().numpy()
            g = _loaded_kernels().backward(pi_t, mask.numpy(), select.numpy(), grad_p.contiguous().numpy())
            grad_pi = torch.from_numpy(g).transpose(1, 2)
        else:
            grad_pi = _torch_backward(pi.detach(), grad_p)
        # Contests that do not exist (diagonal, padding) carry no gradient.
        return grad_pi * pair_mask(mask).to(grad_pi.dtype), None, None, None, None


def rank_distributions(pi: Tensor, *, mask: Tensor | None = None, max_rank: int | None = None,
                       select: Tensor | None = None, backend: str = "auto") -> Tensor:
    """Exact Rank-Binomial distributions ``p[b, j, r] = P(rank of j = r)`` from contest probabilities.

    Parameters
    ----------
    pi : Tensor, shape (batch, n, n)
        ``pi[b, i, j] = P(i beats j)`` (see :func:`~smoothrank.softrank.pairwise_probabilities`).
        Entries on the diagonal and for padded items are ignored.
    mask : Tensor of bool, shape (batch, n), optional
        True for real items; padding may sit anywhere. Padded items neither compete nor receive
        a distribution (their rows of the result are zero).
    max_rank : int, optional
        Number ``R`` of leading 0-based ranks computed (exact truncation); default ``n``.
    select : Tensor of bool, shape (batch, n), optional
        Documents whose distribution is computed; the others get zero rows (used by the hybrid).
    backend : {"auto", "numba", "torch", "fft"}
        The compiled CPU kernel, the pure-PyTorch recursion or the Fourier form (module
        docstring); ``"auto"`` takes the kernel for float32/float64 CPU tensors and the Fourier
        form on other devices.

    Returns
    -------
    Tensor, shape (batch, n, R)
        Each real row sums to 1 when ``R >= n_real``; differentiable with respect to ``pi``.
    """
    contests, mask, n_ranks = check_contest_matrix(pi, mask, max_rank)  # half precision: in float32
    if select is not None and (not isinstance(select, Tensor) or select.shape != mask.shape):
        shape = tuple(select.shape) if isinstance(select, Tensor) else type(select).__name__
        raise SmoothrankError(f"select: expected a bool tensor of shape {tuple(mask.shape)}, got {shape}")
    return _rank_distributions(contests, mask, n_ranks, select=select, backend=backend).to(pi.dtype)


def _rank_distributions(pi: Tensor, mask: Tensor, n_ranks: int, *, select: Tensor | None = None,
                        backend: str = "auto") -> Tensor:
    """:func:`rank_distributions` on checked inputs (``pi`` zero on its diagonal and padding)."""
    batch, n, _ = pi.shape
    select = mask if select is None else select.to(device=pi.device, dtype=torch.bool) & mask
    if n == 0:
        return pi.new_zeros(batch, 0, n_ranks)
    return RankBinomial.apply(pi, mask, select, n_ranks, resolve_backend(pi, backend))


class FusedRankBinomial(torch.autograd.Function):
    """``scores (batch, n) -> p (rows, R)`` of a few documents in one compiled CPU kernel.

    ``rows`` (int64) are the flat indices ``b n + j`` of the real documents wanted; ``p[t]`` is the
    distribution of document ``rows[t]``. Same recursion and adjoint as :class:`RankBinomial`, but
    the contest probabilities are formed inside the kernel and the backward returns the score
    gradient directly (eq. 20), so that no ``(batch, n, n)`` tensor is ever allocated: the extra
    memory is ``O(rows R)`` for ``p``, not ``O(batch n R)``.
    """

    @staticmethod
    def forward(ctx: Any, scores: Tensor, mask: Tensor, rows: Tensor, sigma: float, n_ranks: int) -> Tensor:
        ctx.save_for_backward(scores, mask, rows)
        ctx.sigma = sigma
        s = scores.detach().contiguous().numpy()
        kernels = _loaded_kernels()
        return torch.from_numpy(kernels.fused_forward(s, mask.numpy(), rows.numpy(), sigma, n_ranks))

    @staticmethod
    @first_derivative_only("SoftNDCG (its rank distributions)")
    def backward(ctx: Any, grad_p: Tensor) -> tuple[Tensor | None, None, None, None, None]:
        scores, mask, rows = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        kernels = _loaded_kernels()
        g = kernels.fused_backward(scores.detach().contiguous().numpy(), mask.numpy(), rows.numpy(),
                                   ctx.sigma, grad_p.detach().contiguous().numpy())
        return torch.from_numpy(g).to(scores.dtype), None, None, None, None


# Entries of the contest matrices formed at a time on the blocked path (2 MiB in float32): whole
# queries (9 at n = 240) or, for a long list, a block of its documents' columns, so that the
# temporaries never grow with the batch or with n^2 and stay small enough that the allocator hands
# them back.
CHUNK_ENTRIES = 1 << 19
# SIMD blocks of 64 documents per kernel call on a long list at least: parallel tasks for up to 8
# threads (a 512-column block of a list of n = 10^4 is 5M entries, 20 MB in float32).
COLUMN_TASKS = 8


def _column_blocks(batch: int, n: int) -> list[tuple[slice, slice]]:
    """(queries, documents) slices: a few whole queries while ``n^2 <= CHUNK_ENTRIES``, else one
    query's documents in column blocks of about ``CHUNK_ENTRIES / n``, a multiple of the kernels'
    SIMD block and at least ``COLUMN_TASKS`` of them (the kernels parallelise over SIMD blocks).
    The blocks do not depend on the thread count, so neither does the gradient's summation order."""
    if n * n <= CHUNK_ENTRIES:
        per = max(1, CHUNK_ENTRIES // max(n * n, 1))
        return [(slice(lo, lo + per), slice(None)) for lo in range(0, batch, per)]
    from smoothrank.softrank._numba import BLOCK

    width = max(BLOCK * COLUMN_TASKS, CHUNK_ENTRIES // n // BLOCK * BLOCK)
    return [(slice(q, q + 1), slice(lo, lo + width)) for q in range(batch) for lo in range(0, n, width)]


def _contest_columns(scores: Tensor, mask: Tensor, sigma: float, cols: slice
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """The contests of the documents of columns ``cols`` against every competitor, contiguous for
    the kernels (:func:`~smoothrank.softrank.pairwise.contest_block`)."""
    pi, diff, real = contest_block(scores, mask, sigma, cols=cols)
    return pi.contiguous(), diff, real


class BlockedRankBinomial(torch.autograd.Function):
    """``scores (batch, n) -> p (batch, n, R)`` through the blocked compiled kernels, a block at a time.

    The contests are formed (vectorised, in PyTorch) for a few whole queries, or a block of one
    long query's documents, at a time (:func:`_column_blocks`) and dropped after the kernel has read
    them; the backward recomputes them, gets ``dL/dpi`` from the adjoint kernel and turns it into
    the score gradient with eq. 20:
    ``dL/ds_k = sum_j G_kj phi_kj - sum_i G_ik phi_ik``, ``phi_ij = N(s_i - s_j | 0, 2 sigma^2)``.
    Memory beyond ``p`` is a few tensors of at most ``max(CHUNK_ENTRIES, 64 COLUMN_TASKS n)``
    entries: a list with ``n^2 > CHUNK_ENTRIES`` never has its (n, n) matrix formed, and SoftNDCG@k
    of a long list costs ``O(batch n k)``.
    """

    @staticmethod
    def forward(ctx: Any, scores: Tensor, mask: Tensor, sigma: float, n_ranks: int) -> Tensor:
        ctx.save_for_backward(scores, mask)
        ctx.sigma = sigma
        batch, n = scores.shape
        out = scores.new_empty(batch, n, n_ranks)
        s = scores.detach()
        kernels = _loaded_kernels()
        for q, cols in _column_blocks(batch, n):
            pi, _, _ = _contest_columns(s[q], mask[q], sigma, cols)
            out[q, cols] = torch.from_numpy(kernels.blocked_forward(pi.numpy(), mask[q].numpy(), n_ranks))
        return out.mul_(mask[..., None].to(out.dtype))

    @staticmethod
    @first_derivative_only("SoftNDCG (its rank distributions)")
    def backward(ctx: Any, grad_p: Tensor) -> tuple[Tensor | None, None, None, None]:
        scores, mask = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        sigma = ctx.sigma
        batch, n = scores.shape
        grad_p = grad_p.detach() * mask[..., None].to(grad_p.dtype)  # read as NumPy
        grad = torch.zeros_like(scores)
        s = scores.detach()
        # d pi_ij / d s_i = exp(-x^2) / (2 sigma sqrt(pi)), x = (s_i - s_j) / (2 sigma)
        dens_scale = 1.0 / (2.0 * sigma * math.sqrt(math.pi))
        for q, cols in _column_blocks(batch, n):
            m = mask[q]
            pi, diff, real = _contest_columns(s[q], m, sigma, cols)
            g = torch.from_numpy(_loaded_kernels().blocked_backward(pi.numpy(), m.numpy(),
                                                                    grad_p[q, cols].contiguous().numpy()))
            del pi
            # w = G phi on the real pairs, in place on the block's own temporaries (a long list's
            # blocks are millions of entries: each extra copy was tens of MB)
            w = diff.mul_(0.5 / sigma).square_().neg_().exp_().mul_(g).mul_(dens_scale)
            w.masked_fill_(~real, 0.0)
            grad[q] += w.sum(2)
            grad[q, cols] -= w.sum(1)
        return grad, None, None, None


def can_fuse(scores: Tensor, backend: str) -> bool:
    """Whether :func:`score_rank_distributions` would use the fused compiled kernel."""
    return _use_numba(scores, backend)


def score_rank_distributions(scores: Tensor, *, sigma: float, mask: Tensor, max_rank: int,
                             select: Tensor | None = None) -> Tensor:
    """Exact Rank-Binomial distributions from scores on the CPU kernels: :class:`BlockedRankBinomial`
    for all documents, :class:`FusedRankBinomial` for a ``select``-ed few (zero rows elsewhere)."""
    mask = mask.to(torch.bool).contiguous()
    n_ranks = min(int(max_rank), max(scores.shape[-1], 1))
    if select is None:
        # All documents: their recursions run side by side (blocked kernels).
        return BlockedRankBinomial.apply(scores.contiguous(), mask, float(sigma), n_ranks)
    # A few selected documents (hybrid): one recursion per selected document, contests in-kernel.
    batch, n = scores.shape
    index = _selected_rows(select, mask)
    p = FusedRankBinomial.apply(scores, mask, index, float(sigma), n_ranks)
    return p.new_zeros(batch * n, n_ranks).index_copy(0, index, p).view(batch, n, n_ranks)


def _selected_rows(select: Tensor, mask: Tensor) -> Tensor:
    """Flat indices ``b n + j`` of the real selected documents, in row-major order."""
    return (select.to(torch.bool) & mask).flatten().nonzero(as_tuple=True)[0].contiguous()


def score_selected_rank_distributions(scores: Tensor, *, sigma: float, mask: Tensor, max_rank: int,
                                      select: Tensor) -> Tensor:
    """Exact distributions ``(rows, R)`` of the real ``select``-ed documents only, in row-major order
    of ``select``, on the fused CPU kernel: memory ``O(rows R)`` however long the list."""
    mask = mask.to(torch.bool).contiguous()
    n_ranks = min(int(max_rank), max(scores.shape[-1], 1))
    return FusedRankBinomial.apply(scores, mask, _selected_rows(select, mask), float(sigma), n_ranks)


# Contest pairs (batch n^2) up to which exact SoftNDCG takes the per-query kernel with its Jacobian
# (a (batch, n, n) array in the scores' dtype: 32 MiB in float32 at the bound); longer lists keep
# the blocked path, whose memory does not grow with n^2.
JACOBIAN_ENTRIES = 1 << 23


class ExactExpectedDiscount(torch.autograd.Function):
    """``scores (batch, n) -> E[D(r_j)] (batch, n)`` under the exact Rank-Binomial distributions, in
    one compiled pass a query (:mod:`smoothrank._softrank_numba`): the forward computes each
    document's distribution, its expectation of the discount and, when the scores need a gradient,
    the row ``dE_j / ds`` of the Jacobian (the adjoint of the recursion, while its states are still
    in memory); the backward is the product ``J^T grad``."""

    @staticmethod
    def forward(ctx: Any, scores: Tensor, mask: Tensor, discounts: Tensor, sigma: float,
                select: Tensor) -> Tensor:
        kernels = _loaded_kernels()
        want = bool(ctx.needs_input_grad[0])
        ed, jac = kernels.expected_discounts(scores.detach().contiguous().numpy(), mask.numpy(),
                                             discounts.detach().contiguous().numpy(), sigma, want,
                                             select.numpy())
        # Saved as tensors (the scores too): the refusal of second derivatives hangs on them.
        ctx.save_for_backward(scores, torch.from_numpy(jac) if jac is not None else scores.new_empty(0))
        return torch.from_numpy(ed)

    @staticmethod
    @first_derivative_only("SoftNDCG (its rank distributions)")
    def backward(ctx: Any, grad_ed: Tensor) -> tuple[Tensor | None, None, None, None, None]:
        _, jac = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        weight = grad_ed.detach().contiguous().numpy()
        grad = _loaded_kernels().jacobian_transpose_product(jac.numpy(), weight)
        return torch.from_numpy(grad).to(grad_ed.dtype), None, None, None, None


# Ranks times documents of one query up to which its states are all kept (LANES of them per thread:
# 32 MiB in float32 at the bound).
JACOBIAN_STATES = 1 << 18


def can_use_jacobian(scores: Tensor, n_ranks: int, backend: str) -> bool:
    """Whether :func:`score_exact_expected_discounts` applies: the CPU kernels (:func:`can_fuse`), at
    most :data:`JACOBIAN_ENTRIES` contest pairs and :data:`JACOBIAN_STATES` states a query."""
    batch, n = scores.shape
    return batch * n * n <= JACOBIAN_ENTRIES and n * n_ranks <= JACOBIAN_STATES and can_fuse(scores, backend)


def score_exact_expected_discounts(scores: Tensor, discounts: Tensor, *, sigma: float,
                                   mask: Tensor, select: Tensor | None = None) -> Tensor:
    """``E[D(r_j)] = sum_r D(r + 1) p_j(r)`` (batch, n) under the exact distributions of ranks
    ``r < R`` (``discounts``: (batch, R), the discounts of ranks ``1..R``; zero rows for padding),
    differentiable with respect to ``scores``, on the per-query kernel (:class:`ExactExpectedDiscount`).
    The distributions are the same bits as :func:`score_rank_distributions`' up to the contests'
    rounding (formed in float64 here). ``select`` (bool, (batch, n); default every real document):
    the documents whose ``E`` is computed, the others' being 0 (a loss that weights them by 0 need
    not pay for them; every real document is still a competitor)."""
    if select is not None and select.shape != scores.shape:
        raise SmoothrankError(f"select: shape {tuple(select.shape)} differs from scores "
                              f"{tuple(scores.shape)}")
    mask = mask.to(torch.bool).contiguous()
    select = mask if select is None else (select.to(torch.bool) & mask).contiguous()
    disc = discounts.detach().to(scores.dtype).contiguous()
    return ExactExpectedDiscount.apply(scores, mask, disc, float(sigma), select)
