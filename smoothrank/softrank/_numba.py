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
FUSED_STATES = 1 << 18  # states (n x R entries) of one recursion that the fused backward keeps whole
FUSED_CHUNKS = 64  # chunks of the fused backward's documents: parallel tasks, fixed for reproducibility


def _one_tiny(dtype: np.dtype) -> tuple[np.floating, np.floating]:
    """1 and the flush threshold in ``dtype`` (its smallest normal number / epsilon, see ``_ftz``)."""
    info = np.finfo(dtype)
    return dtype.type(1), dtype.type(info.tiny / info.eps)


def _n_chunks(total: int) -> int:
    return max(1, min(total, nb.get_num_threads() * _CHUNKS_PER_THREAD))


@nb.njit(inline="always")
def _ftz(x, tiny):  # pragma: no cover - compiled
    """``x``, or 0 where it is below ``tiny`` (a probability in a rank distribution's tail).

    Flush to zero by hand: the tails of a rank distribution decay through the subnormal range on
    their way to 0, and Intel cores take a microcode assist on every subnormal result or operand
    (exact SoftNDCG at 64 x 240, 2 threads, took 2.4 s on an Intel Xeon; 0.17 s flushed). ``tiny``
    is the smallest normal number over the machine epsilon (1e-31 in float32, 1e-292 in float64),
    so that neither a state nor its products with the adjoint or the next contest go subnormal;
    a distribution sums to 1, so what is dropped is far below its last digit. NaN is kept, and so
    is the sign: a contest perturbed past 0 or 1 (gradcheck's steps) makes states negative, and
    flushing those changed the polynomial the recursion computes."""
    return x - x if abs(x) < tiny else x


@nb.njit(inline="always")
def _doc_step(old, new, p, s, n_ranks, one, tiny):  # pragma: no cover - compiled
    """One step of the Rank-Binomial recursion (eq. 11) for one document: ``old`` holds
    ``p^(s)(r)`` for ranks ``0..min(s, R-1)``; ``new`` receives ``p^(s+1)`` after a contest won
    with probability ``p``: ``p^(s+1)(r) = p^(s)(r) (1 - p) + p^(s)(r - 1) p`` (flushed, see _ftz)."""
    q = one - p
    top = min(s, n_ranks - 1)
    new[0] = _ftz(old[0] * q, tiny)
    for r in range(1, top + 1):
        new[r] = _ftz(old[r] * q + old[r - 1] * p, tiny)
    if s + 1 < n_ranks:
        new[s + 1] = _ftz(old[s] * p, tiny)


@nb.njit(parallel=True, cache=True, nogil=True)
def _forward(pi_t, mask, select, out, one, tiny, n_chunks):  # pragma: no cover - compiled
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
                _doc_step(old, new, pi_t[b, j, i], s, n_ranks, one, tiny)
                old, new = new, old
                s += 1
            for r in range(min(s, n_ranks - 1) + 1):
                dest[r] = old[r]


@nb.njit(parallel=True, cache=True, nogil=True)
def _backward(pi_t, mask, select, grad_out, grad_pi_t, one, tiny, n_chunks):  # pragma: no cover - compiled
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
                _doc_step(states[s], states[s + 1], pi_t[b, j, idx[s]], s, n_ranks, one, tiny)
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
    _forward(pi_t, mask, select, out, *_one_tiny(pi_t.dtype), _n_chunks(batch * n))
    return out


def backward(pi_t: np.ndarray, mask: np.ndarray, select: np.ndarray, grad_out: np.ndarray) -> np.ndarray:
    """Gradient with respect to ``pi_t`` of ``sum(grad_out * forward(...))``."""
    grad_pi_t = np.empty_like(pi_t)
    batch, n, _ = pi_t.shape
    _backward(pi_t, mask, select, grad_out, grad_pi_t, *_one_tiny(pi_t.dtype), _n_chunks(batch * n))
    return grad_pi_t


# ----------------------------------------------------------------------------- fused: scores -> p
# The contests are computed inside the kernels from the scores, pi_ij = Phi((s_i - s_j) / (sigma
# sqrt 2)) = erfc((s_j - s_i) / (2 sigma)) / 2, and the backward pass turns dL/dpi_ij straight into
# dL/ds_i += g phi_ij, dL/ds_j -= g phi_ij with phi_ij = N(0 | s_i - s_j, 2 sigma^2) (eq. 20).
# No (batch, n, n) array exists at any point. Each chunk of selected documents accumulates its score
# gradients in its own rows of `gacc`, one row per query it touches (no write races between threads;
# O(batch + chunks) rows in all), added up afterwards. The chunks are fixed (FUSED_CHUNKS of them,
# whatever the thread count), so the gradient is the same to the bit on any number of threads.


@nb.njit(parallel=True, cache=True, nogil=True)
def _fused_forward(scores, mask, rows, half_inv_sigma, out, one, tiny, n_chunks):  # pragma: no cover
    n = scores.shape[1]
    n_ranks = out.shape[1]
    total = rows.shape[0]
    per_chunk = (total + n_chunks - 1) // n_chunks
    for chunk in nb.prange(n_chunks):
        buf_a = np.empty(n_ranks, dtype=out.dtype)
        buf_b = np.empty(n_ranks, dtype=out.dtype)
        pis = np.empty(n, dtype=out.dtype)
        for t in range(chunk * per_chunk, min(total, (chunk + 1) * per_chunk)):
            b = rows[t] // n
            j = rows[t] % n
            dest = out[t]
            dest[:] = 0
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
                _doc_step(old, new, pis[s_], s, n_ranks, one, tiny)
                old, new = new, old
                s += 1
            for r in range(min(s, n_ranks - 1) + 1):
                dest[r] = old[r]


@nb.njit(parallel=True, cache=True, nogil=True)
def _fused_backward(scores, mask, rows, half_inv_sigma, grad_out, gacc, first, base, one, tiny, per_chunk,
                    every):  # pragma: no cover - compiled
    n = scores.shape[1]
    n_ranks = grad_out.shape[1]
    total = rows.shape[0]
    n_chunks = first.shape[0]
    # d pi / d s_i = exp(-x^2) / (2 sigma sqrt(pi)) with x = (s_i - s_j) / (2 sigma)
    dens_scale = half_inv_sigma / math.sqrt(math.pi)
    n_ck = (n + every - 1) // every + 1
    for chunk in nb.prange(n_chunks):
        # The states of one recursion a segment of `every` steps at a time, regenerated from a
        # checkpoint each: O((n / every + every) R) per thread instead of O(n R).
        checkpoints = np.empty((n_ck, n_ranks), dtype=grad_out.dtype)
        seg = np.empty((every, n_ranks), dtype=grad_out.dtype)
        buf_a = np.empty(n_ranks, dtype=grad_out.dtype)
        buf_b = np.empty(n_ranks, dtype=grad_out.dtype)
        adj = np.empty(n_ranks, dtype=grad_out.dtype)
        idx = np.empty(n, dtype=np.int64)
        pis = np.empty(n, dtype=grad_out.dtype)
        acc_row = gacc[base[chunk]:base[chunk + 1]]  # row b - first[chunk] for query b
        q0 = first[chunk]
        for t in range(chunk * per_chunk, min(total, (chunk + 1) * per_chunk)):
            b = rows[t] // n
            j = rows[t] % n
            sj = np.float64(scores[b, j])
            m = 0
            for i in range(n):
                if i != j and mask[b, i]:
                    idx[m] = i
                    pis[m] = 0.5 * math.erfc((sj - scores[b, i]) * half_inv_sigma)
                    m += 1
            # Forward to the start of the last segment, keeping the state before steps 0, every, ...
            n_seg = max(1, (m + every - 1) // every)
            last_start = (n_seg - 1) * every
            old = buf_a
            new = buf_b
            old[0] = one
            for s in range(last_start + 1):
                if s % every == 0:
                    for r in range(min(s, n_ranks - 1) + 1):
                        checkpoints[s // every, r] = old[r]
                if s < last_start:
                    _doc_step(old, new, pis[s], s, n_ranks, one, tiny)
                    old, new = new, old
            for r in range(n_ranks):
                adj[r] = grad_out[t, r]
            grad_j = 0.0
            for s in range(m - 1, -1, -1):
                start = (s // every) * every
                if s == m - 1 or s % every == every - 1:  # entering a segment: regenerate its states
                    for r in range(min(start, n_ranks - 1) + 1):
                        seg[0, r] = checkpoints[s // every, r]
                    for u in range(start, s):
                        _doc_step(seg[u - start], seg[u - start + 1], pis[u], u, n_ranks, one, tiny)
                p = pis[s]
                q = one - p
                old = seg[s - start]
                top = min(s, n_ranks - 1)
                acc = -adj[0] * old[0]
                for r in range(1, top + 1):
                    acc += adj[r] * (old[r - 1] - old[r])
                if s + 1 < n_ranks:
                    acc += adj[s + 1] * old[s]
                i = idx[s]
                x = (scores[b, i] - sj) * half_inv_sigma
                g = np.float64(acc) * dens_scale * math.exp(-x * x)
                acc_row[b - q0, i] += g
                grad_j -= g
                last = min(top, n_ranks - 2)
                for r in range(last + 1):
                    adj[r] = adj[r] * q + adj[r + 1] * p
                if top == n_ranks - 1:
                    adj[top] = adj[top] * q
            acc_row[b - q0, j] += grad_j


def fused_forward(scores: np.ndarray, mask: np.ndarray, rows: np.ndarray, sigma: float,
                  n_ranks: int) -> np.ndarray:
    """Rank distributions straight from the scores (see the comment above) of the real documents
    ``rows`` (flat indices ``b n + j``, int64): ``out[t, r]`` for document ``rows[t]``, ``r < n_ranks``."""
    out = np.empty((rows.shape[0], n_ranks), dtype=scores.dtype)
    _fused_forward(scores, mask, rows, 0.5 / sigma, out, *_one_tiny(scores.dtype), _n_chunks(rows.shape[0]))
    return out


def fused_backward(scores: np.ndarray, mask: np.ndarray, rows: np.ndarray, sigma: float,
                   grad_out: np.ndarray) -> np.ndarray:
    """Gradient with respect to the scores of ``sum(grad_out * fused_forward(...))`` (float64)."""
    batch, n = scores.shape
    total = rows.shape[0]
    grad = np.zeros((batch, n), dtype=np.float64)
    if total == 0:
        return grad
    per = -(-total // min(total, FUSED_CHUNKS))
    starts = np.arange(0, total, per)
    query = rows // n
    first = query[starts]
    sizes = query[np.minimum(starts + per, total) - 1] - first + 1  # queries a chunk touches
    base = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    gacc = np.zeros((int(base[-1]), n), dtype=np.float64)
    # One segment (all states kept, no recomputation) while they are small; sqrt(n) checkpoints on
    # long lists, where the n x R states of SoftNDCG over all ranks were 400 MB per thread at n = 10^4.
    every = max(n, 1) if n * grad_out.shape[1] <= FUSED_STATES else max(1, math.ceil(math.sqrt(n)))
    _fused_backward(scores, mask, rows, 0.5 / sigma, grad_out, gacc, first.astype(np.int64), base,
                    *_one_tiny(scores.dtype), per, every)
    np.add.at(grad, np.concatenate([np.arange(f, f + k) for f, k in zip(first, sizes, strict=True)]), gacc)
    return grad


# ------------------------------------------------------------------ blocked: documents in SIMD lanes
# For short rank ranges (SoftNDCG@10) the per-document kernels above spend their time on loop
# overhead: every competitor step is a loop of only k ranks. The blocked kernels below run the
# recursions of a block of ``BLOCK`` documents of one query side by side, with the documents in
# the innermost (contiguous, vectorised) loop: state ``P[r, jj]`` for ranks ``r`` and documents
# ``j0 + jj``, and the contest row ``pi[b, i, j0:j0 + w]`` of competitor ``i`` read contiguously.
# The diagonal (``pi_jj = 0``) is an identity step, so no branch is needed per document.
# Support trimming is per block: after ``s`` real competitors every state lives on ranks ``0..s``.
# The backward keeps checkpoints every ``every`` steps and regenerates each segment from its
# checkpoint: ``O((m / every + every) R BLOCK)`` floats per thread (16 MB at n = R = 1000).

BLOCK = 64


@nb.njit(inline="always")
def _block_step(old, new, row, s, n_ranks, w, one, tiny):  # pragma: no cover - compiled
    """``new = step(old)`` on ranks ``0..min(s + 1, R - 1)``; reads ``old`` on ``0..min(s, R - 1)``."""
    top_old = min(s, n_ranks - 1)
    for jj in range(w):
        new[0, jj] = _ftz(old[0, jj] * (one - row[jj]), tiny)
    for r in range(1, top_old + 1):
        for jj in range(w):
            new[r, jj] = _ftz(old[r, jj] * (one - row[jj]) + old[r - 1, jj] * row[jj], tiny)
    if s + 1 < n_ranks:
        for jj in range(w):
            new[s + 1, jj] = _ftz(old[s, jj] * row[jj], tiny)


@nb.njit(parallel=True, cache=True, nogil=True)
def _blocked_forward(pi, mask, out, one, tiny):  # pragma: no cover - compiled
    batch, n, n_cols = pi.shape
    n_ranks = out.shape[2]
    n_blocks = (n_cols + BLOCK - 1) // BLOCK
    for t in nb.prange(batch * n_blocks):
        b = t // n_blocks
        j0 = (t % n_blocks) * BLOCK
        w = min(BLOCK, n_cols - j0)
        buf_a = np.zeros((n_ranks, BLOCK), dtype=out.dtype)
        buf_b = np.zeros((n_ranks, BLOCK), dtype=out.dtype)
        old = buf_a
        new = buf_b
        for jj in range(w):
            old[0, jj] = one
        s = 0
        for i in range(n):
            if not mask[b, i]:
                continue
            _block_step(old, new, pi[b, i, j0:j0 + w], s, n_ranks, w, one, tiny)
            old, new = new, old
            s += 1
        top = min(s, n_ranks - 1)
        for jj in range(w):
            dest = out[b, j0 + jj]
            for r in range(n_ranks):
                dest[r] = old[r, jj] if r <= top else 0


@nb.njit(parallel=True, cache=True, nogil=True)
def _blocked_backward(pi, mask, grad_out, grad_pi, one, tiny, every):  # pragma: no cover - compiled
    batch, n, n_cols = pi.shape
    n_ranks = grad_out.shape[2]
    n_blocks = (n_cols + BLOCK - 1) // BLOCK
    n_ck = (n + every - 1) // every + 1
    for t in nb.prange(batch * n_blocks):
        b = t // n_blocks
        j0 = (t % n_blocks) * BLOCK
        w = min(BLOCK, n_cols - j0)
        idx = np.empty(n, dtype=np.int64)
        m = 0
        for i in range(n):
            if mask[b, i]:
                idx[m] = i
                m += 1
        checkpoints = np.zeros((n_ck, n_ranks, BLOCK), dtype=grad_out.dtype)
        seg = np.zeros((every, n_ranks, BLOCK), dtype=grad_out.dtype)
        adj = np.empty((n_ranks, BLOCK), dtype=grad_out.dtype)
        acc = np.empty(BLOCK, dtype=grad_out.dtype)
        # Forward, keeping the state before steps 0, every, 2 every, ...
        for jj in range(w):
            seg[0, 0, jj] = one
        cur = 0
        for s in range(m):
            if s % every == 0:
                top = min(s, n_ranks - 1)
                for r in range(top + 1):
                    for jj in range(w):
                        checkpoints[s // every, r, jj] = seg[cur, r, jj]
            nxt = 1 - cur
            _block_step(seg[cur], seg[nxt], pi[b, idx[s], j0:j0 + w], s, n_ranks, w, one, tiny)
            cur = nxt
        for r in range(n_ranks):
            for jj in range(w):
                adj[r, jj] = grad_out[b, j0 + jj, r]
        # Reverse sweep, one segment at a time (states regenerated from the segment's checkpoint).
        for k in range((m + every - 1) // every - 1, -1, -1):
            start = k * every
            stop = min(m, start + every)
            top = min(start, n_ranks - 1)
            for r in range(top + 1):
                for jj in range(w):
                    seg[0, r, jj] = checkpoints[k, r, jj]
            for s in range(start, stop - 1):
                _block_step(seg[s - start], seg[s - start + 1], pi[b, idx[s], j0:j0 + w], s, n_ranks, w, one,
                            tiny)
            for s in range(stop - 1, start - 1, -1):
                old = seg[s - start]
                row = pi[b, idx[s], j0:j0 + w]
                top_old = min(s, n_ranks - 1)
                # dL/dpi = sum_r a(r) (p_old(r - 1) - p_old(r))
                for jj in range(w):
                    acc[jj] = -adj[0, jj] * old[0, jj]
                for r in range(1, top_old + 1):
                    for jj in range(w):
                        acc[jj] += adj[r, jj] * (old[r - 1, jj] - old[r, jj])
                if s + 1 < n_ranks:
                    for jj in range(w):
                        acc[jj] += adj[s + 1, jj] * old[s, jj]
                dest = grad_pi[b, idx[s]]
                for jj in range(w):
                    dest[j0 + jj] = acc[jj]
                # a_old(r) = a(r) (1 - pi) + a(r + 1) pi, needed on the support of p_old only
                for r in range(min(top_old, n_ranks - 2) + 1):
                    for jj in range(w):
                        adj[r, jj] = adj[r, jj] * (one - row[jj]) + adj[r + 1, jj] * row[jj]
                if top_old == n_ranks - 1:
                    for jj in range(w):
                        adj[top_old, jj] = adj[top_old, jj] * (one - row[jj])


def blocked_forward(pi: np.ndarray, mask: np.ndarray, n_ranks: int) -> np.ndarray:
    """Rank distributions ``out[b, c, r]``, ``r < n_ranks``, of the document of every column ``c`` of
    ``pi[b, i, c] = P(competitor i beats it)`` (zero where ``i`` is that document, and for padding):
    all ``n`` documents (square ``pi``) or a block of them. ``mask`` (batch, n) marks the real
    competitors. Rows of padded documents are garbage-free but not zeroed: mask them."""
    batch, _, n_cols = pi.shape
    out = np.empty((batch, n_cols, n_ranks), dtype=pi.dtype)
    _blocked_forward(pi, mask, out, *_one_tiny(pi.dtype))
    return out


def blocked_backward(pi: np.ndarray, mask: np.ndarray, grad_out: np.ndarray) -> np.ndarray:
    """Gradient ``grad_pi[b, i, c]`` of ``sum(grad_out * blocked_forward(pi, ...))`` (zero rows for
    padded competitors ``i``), for square ``pi`` or a block of its columns."""
    n = pi.shape[1]
    grad_pi = np.zeros_like(pi)
    every = max(1, math.ceil(math.sqrt(max(n, 1))))
    _blocked_backward(pi, mask, grad_out, grad_pi, *_one_tiny(pi.dtype), every)
    return grad_pi
