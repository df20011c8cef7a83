"""Compiled CPU kernels of the exact Rank-Binomial recursion and its adjoint (Numba).

Layout: ``pi_t[b, j, i] = pi_ij`` (the transposed contest matrix), so that the competitors of
document ``j`` are contiguous. Every (query, document) pair is an independent recursion over
the competitors ``i`` (eq. 12); the kernels run those recursions in parallel (``prange`` over
chunks of pairs) with a contiguous inner loop over the ranks ``r`` that LLVM vectorises.

Support trimming: after ``s`` competitors the distribution lives on ranks ``0..s``, so step ``s``
touches ``min(s + 1, R)`` ranks instead of ``R``: about half the work of a dense sweep.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

_CHUNKS_PER_THREAD = 8


def _n_chunks(total: int) -> int:
    return max(1, min(total, nb.get_num_threads() * _CHUNKS_PER_THREAD))


@nb.njit(parallel=True, cache=True, nogil=True)
def _forward(pi_t, mask, select, out, one, n_chunks):  # pragma: no cover - compiled
    batch, n, _ = pi_t.shape
    n_ranks = out.shape[2]
    total = batch * n
    per_chunk = (total + n_chunks - 1) // n_chunks
    for chunk in nb.prange(n_chunks):
        buf_a = np.empty(n_ranks, dtype=out.dtype)
        buf_b = np.empty(n_ranks, dtype=out.dtype)
        for t in range(chunk * per_chunk, min(total, (chunk + 1) * per_chunk)):
            b = t // n
            j = t % n
            dest = out[b, j]
            dest[:] = 0
            if not (mask[b, j] and select[b, j]):
                continue
            old = buf_a
            new = buf_b
            old[0] = one
            s = 0  # competitors processed; the support of `old` is 0..min(s, R-1)
            for i in range(n):
                if i == j or not mask[b, i]:
                    continue
                p = pi_t[b, j, i]
                q = one - p
                top = min(s, n_ranks - 1)
                new[0] = old[0] * q
                for r in range(1, top + 1):
                    new[r] = old[r] * q + old[r - 1] * p
                if s + 1 < n_ranks:
                    new[s + 1] = old[s] * p
                old, new = new, old
                s += 1
            for r in range(min(s, n_ranks - 1) + 1):
                dest[r] = old[r]


@nb.njit(parallel=True, cache=True, nogil=True)
def _backward(pi_t, mask, select, grad_out, grad_pi_t, one, n_chunks):  # pragma: no cover - compiled
    batch, n, _ = pi_t.shape
    n_ranks = grad_out.shape[2]
    total = batch * n
    per_chunk = (total + n_chunks - 1) // n_chunks
    for chunk in nb.prange(n_chunks):
        # States of one recursion: O(n R) per thread, never O(n^2 R).
        states = np.empty((n, n_ranks), dtype=grad_out.dtype)
        adj = np.empty(n_ranks, dtype=grad_out.dtype)
        idx = np.empty(n, dtype=np.int64)
        for t in range(chunk * per_chunk, min(total, (chunk + 1) * per_chunk)):
            b = t // n
            j = t % n
            grad_pi_t[b, j, :] = 0
            if not (mask[b, j] and select[b, j]):
                continue
            m = 0
            for i in range(n):
                if i != j and mask[b, i]:
                    idx[m] = i
                    m += 1
            # Forward again, keeping the states the adjoint reads (p^(0) .. p^(m-1)): recomputation
            # per (query, document) instead of O(n^3) storage per query.
            states[0, 0] = one
            for s in range(m - 1):
                p = pi_t[b, j, idx[s]]
                q = one - p
                old = states[s]
                new = states[s + 1]
                top = min(s, n_ranks - 1)
                new[0] = old[0] * q
                for r in range(1, top + 1):
                    new[r] = old[r] * q + old[r - 1] * p
                if s + 1 < n_ranks:
                    new[s + 1] = old[s] * p
            # Adjoint sweep in reverse: a^(s)(r) = a^(s+1)(r) q + a^(s+1)(r+1) p and
            # dL/dpi = sum_r a^(s+1)(r) (p^(s)(r-1) - p^(s)(r)).
            for r in range(n_ranks):
                adj[r] = grad_out[b, j, r]
            for s in range(m - 1, -1, -1):
                p = pi_t[b, j, idx[s]]
                q = one - p
                old = states[s]
                top = min(s, n_ranks - 1)
                acc = -adj[0] * old[0]
                for r in range(1, top + 1):
                    acc += adj[r] * (old[r - 1] - old[r])
                if s + 1 < n_ranks:
                    acc += adj[s + 1] * old[s]
                grad_pi_t[b, j, idx[s]] = acc
                last = min(top, n_ranks - 2)
                for r in range(last + 1):
                    adj[r] = adj[r] * q + adj[r + 1] * p
                if top == n_ranks - 1:
                    adj[top] = adj[top] * q


def forward(pi_t: np.ndarray, mask: np.ndarray, select: np.ndarray, n_ranks: int) -> np.ndarray:
    """Rank distributions ``out[b, j, r]`` for ``r < n_ranks`` (zeros for unselected/padded ``j``)."""
    batch, n, _ = pi_t.shape
    out = np.empty((batch, n, n_ranks), dtype=pi_t.dtype)
    _forward(pi_t, mask, select, out, pi_t.dtype.type(1), _n_chunks(batch * n))
    return out


def backward(pi_t: np.ndarray, mask: np.ndarray, select: np.ndarray, grad_out: np.ndarray) -> np.ndarray:
    """Gradient with respect to ``pi_t`` of ``sum(grad_out * forward(...))``."""
    grad_pi_t = np.empty_like(pi_t)
    batch, n, _ = pi_t.shape
    _backward(pi_t, mask, select, grad_out, grad_pi_t, pi_t.dtype.type(1), _n_chunks(batch * n))
    return grad_pi_t


# ----------------------------------------------------------------------------- fused: scores -> p
# The contests are computed inside the kernels from the scores, pi_ij = Phi((s_i - s_j) / (sigma
# sqrt 2)) = erfc((s_j - s_i) / (2 sigma)) / 2, and the backward pass turns dL/dpi_ij straight into
# dL/ds_i += g phi_ij, dL/ds_j -= g phi_ij with phi_ij = N(0 | s_i - s_j, 2 sigma^2) (eq. 20).
# No (batch, n, n) array exists at any point; each chunk accumulates its score gradients in its
# own row of `gacc` (no write races between threads), summed afterwards.


@nb.njit(parallel=True, cache=True, nogil=True)
def _fused_forward(scores, mask, select, half_inv_sigma, out, one, n_chunks):  # pragma: no cover
    batch, n = scores.shape
    n_ranks = out.shape[2]
    total = batch * n
    per_chunk = (total + n_chunks - 1) // n_chunks
    for chunk in nb.prange(n_chunks):
        buf_a = np.empty(n_ranks, dtype=out.dtype)
        buf_b = np.empty(n_ranks, dtype=out.dtype)
        pis = np.empty(n, dtype=out.dtype)
        for t in range(chunk * per_chunk, min(total, (chunk + 1) * per_chunk)):
            b = t // n
            j = t % n
            dest = out[b, j]
            dest[:] = 0
            if not (mask[b, j] and select[b, j]):
                continue
            sj = np.float64(scores[b, j])
            m = 0
            for i in range(n):
                if i != j and mask[b, i]:
                    pis[m] = 0.5 * math.erfc((sj - scores[b, i]) * half_inv_sigma)  # cast on store
                    m += 1
            old = buf_a
            new = buf_b
            old[0] = one
            s = 0
            for s_ in range(m):
                p = pis[s_]
                q = one - p
                top = min(s, n_ranks - 1)
                new[0] = old[0] * q
                for r in range(1, top + 1):
                    new[r] = old[r] * q + old[r - 1] * p
                if s + 1 < n_ranks:
                    new[s + 1] = old[s] * p
                old, new = new, old
                s += 1
            for r in range(min(s, n_ranks - 1) + 1):
                dest[r] = old[r]


@nb.njit(parallel=True, cache=True, nogil=True)
def _fused_backward(scores, mask, select, half_inv_sigma, grad_out, gacc, one, n_chunks):  # pragma: no cover
    batch, n = scores.shape
    n_ranks = grad_out.shape[2]
    total = batch * n
    per_chunk = (total + n_chunks - 1) // n_chunks
    # d pi / d s_i = exp(-x^2) / (2 sigma sqrt(pi)) with x = (s_i - s_j) / (2 sigma)
    dens_scale = half_inv_sigma / math.sqrt(math.pi)
    for chunk in nb.prange(n_chunks):
        states = np.empty((n, n_ranks), dtype=grad_out.dtype)
        adj = np.empty(n_ranks, dtype=grad_out.dtype)
        idx = np.empty(n, dtype=np.int64)
        pis = np.empty(n, dtype=grad_out.dtype)
        acc_row = gacc[chunk]
        for t in range(chunk * per_chunk, min(total, (chunk + 1) * per_chunk)):
            b = t // n
            j = t % n
            if not (mask[b, j] and select[b, j]):
                continue
            sj = np.float64(scores[b, j])
            m = 0
            for i in range(n):
                if i != j and mask[b, i]:
                    idx[m] = i
                    pis[m] = 0.5 * math.erfc((sj - scores[b, i]) * half_inv_sigma)
                    m += 1
            states[0, 0] = one
            for s in range(m - 1):
                p = pis[s]
                q = one - p
                old = states[s]
                new = states[s + 1]
                top = min(s, n_ranks - 1)
                new[0] = old[0] * q
                for r in range(1, top + 1):
                    new[r] = old[r] * q + old[r - 1] * p
                if s + 1 < n_ranks:
                    new[s + 1] = old[s] * p
            for r in range(n_ranks):
                adj[r] = grad_out[b, j, r]
            grad_j = 0.0
            for s in range(m - 1, -1, -1):
                p = pis[s]
                q = one - p
                old = states[s]
                top = min(s, n_ranks - 1)
                acc = -adj[0] * old[0]
                for r in range(1, top + 1):
                    acc += adj[r] * (old[r - 1] - old[r])
                if s + 1 < n_ranks:
                    acc += adj[s + 1] * old[s]
                i = idx[s]
                x = (scores[b, i] - sj) * half_inv_sigma
                g = np.float64(acc) * dens_scale * math.exp(-x * x)
                acc_row[b, i] += g
                grad_j -= g
                last = min(top, n_ranks - 2)
                for r in range(last + 1):
                    adj[r] = adj[r] * q + adj[r + 1] * p
                if top == n_ranks - 1:
                    adj[top] = adj[top] * q
            acc_row[b, j] += grad_j


def fused_forward(scores: np.ndarray, mask: np.ndarray, select: np.ndarray, sigma: float,
                  n_ranks: int) -> np.ndarray:
    """Rank distributions straight from the scores (see the comment above)."""
    batch, n = scores.shape
    out = np.empty((batch, n, n_ranks), dtype=scores.dtype)
    _fused_forward(scores, mask, select, 0.5 / sigma, out, scores.dtype.type(1), _n_chunks(batch * n))
    return out


def fused_backward(scores: np.ndarray, mask: np.ndarray, select: np.ndarray, sigma: float,
                   grad_out: np.ndarray) -> np.ndarray:
    """Gradient with respect to the scores of ``sum(grad_out * fused_forward(...))`` (float64)."""
    batch, n = scores.shape
    chunks = _n_chunks(batch * n)
    gacc = np.zeros((chunks, batch, n), dtype=np.float64)
    _fused_backward(scores, mask, select, 0.5 / sigma, grad_out, gacc, scores.dtype.type(1), chunks)
    return gacc.sum(axis=0)
