"""Exact SoftRank expected discounts and their score Jacobian, per query, compiled (Numba, CPU).

Imported on first use (:mod:`smoothrank.softrank.rank_binomial`, :mod:`smoothrank.boosting_kernels`).

For one query of ``m`` real documents this computes, for every document ``j``, the expected
discount ``E_j = sum_r D(r) p_j(r)`` under its exact Rank-Binomial distribution (Taylor et al.,
SoftRank, WSDM 2008, eqs. 12 and 15) and the row ``J[j, i] = dE_j / ds_i`` of its Jacobian. The
SoftNDCG loss and its gradient are then ``sum_j c_j E_j`` and ``J^T c``; the booster knows ``c``
(gains over the ideal DCG) up front, the loss gets it in its backward pass.

Per query, in one pass forward and one back, the states kept in between:

* the contests ``pi_ij = Phi((s_i - s_j) / (sigma sqrt 2)) = erfc((s_j - s_i) / (2 sigma)) / 2`` and
  the densities ``exp(-x^2)`` are formed once per pair of the query (``erfc(|x|)`` once: the
  smaller probability of a pair is ``erfc(|x|) / 2``, the larger ``1`` minus it), in float64;
* the recursions of ``LANES`` documents run side by side, the documents in the vectorised inner
  loop (the documents taken by decreasing score, so that the lanes' rank ranges overlap); a
  document meets itself as a contest of probability 0, an identity step;
* forward: ``p^(t+1)(r) = p^(t)(r) (1 - pi) + p^(t)(r - 1) pi`` over the competitors in their order
  in the list (eq. 12), every state kept;
* backward: the adjoint ``a^(t)(r) = a^(t+1)(r) (1 - pi) + a^(t+1)(r + 1) pi`` from ``a = D``, with
  ``dE/dpi_t = sum_r a^(t+1)(r) (p^(t)(r - 1) - p^(t)(r))``, turned into score derivatives with
  ``dpi_ij / ds_i = exp(-x^2) / (2 sigma sqrt(pi))``, ``x = (s_i - s_j) / (2 sigma)`` (eq. 20).

The states are flushed to zero below the smallest normal number over the machine epsilon with the
arithmetic of :mod:`smoothrank.softrank._numba`, so the distributions are the same bits as its
kernels' for the same contests. The range ``[lo, hi]`` of ranks where some lane's state is nonzero
is tracked and only it is stored and swept: the entries outside it are exactly zero, so skipping
them changes no bit. The adjoint is needed on every rank below ``min(t, R - 1)``. Each document's
row of ``J`` depends on its query alone: the same bits on any number of threads. Memory: the kept
states, at most ``n R LANES`` values per thread (7 MB in float32 at ``n = R = 240``), and the
``(batch, n, n)`` contests and Jacobian.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

__all__ = ["expected_discounts", "flat_soft_dcg_gradient", "jacobian_transpose_product"]

LANES = 32  # documents whose recursions run side by side (the vectorised inner loop)
ULANES = np.uint64(LANES)


def _chunks(tasks: int) -> int:
    """Chunks of ``tasks`` handed to the threads one at a time: a few per thread."""
    return max(1, min(tasks, 8 * nb.get_num_threads()))


def _one_tiny(dtype: np.dtype) -> tuple[np.floating, np.floating]:
    """1 and the flush threshold in ``dtype`` (its smallest normal number over its epsilon)."""
    info = np.finfo(dtype)
    return dtype.type(1), dtype.type(info.tiny / info.eps)


@nb.njit(inline="always")
def _ftz(x, tiny):  # pragma: no cover - compiled
    """``x``, or 0 below ``tiny`` in magnitude (``smoothrank.softrank._numba._ftz``)."""
    return x - x if abs(x) < tiny else x


@nb.njit(cache=True, nogil=True)
def _contests(sq, idx, m, half_inv_sigma, pi, jac):  # pragma: no cover - compiled
    """``pi[j, i] = P(i beats j)`` (cast to ``pi``'s dtype) and ``jac[j, i] = exp(-x^2)``,
    ``x = (s_j - s_i) / (2 sigma)``, for the real documents ``idx[:m]`` of the scores ``sq``;
    zero diagonals."""
    for u in range(m):
        a = idx[u]
        pi[a, a] = 0
        jac[a, a] = 0
        for v in range(u + 1, m):
            c = idx[v]
            x = (np.float64(sq[a]) - np.float64(sq[c])) * half_inv_sigma
            small = 0.5 * math.erfc(abs(x))
            if x >= 0:
                pi[a, c] = small
                pi[c, a] = 1.0 - small
            else:
                pi[a, c] = 1.0 - small
                pi[c, a] = small
            d = math.exp(-x * x)
            jac[a, c] = d
            jac[c, a] = d


@nb.njit(cache=True, nogil=True)
def _lane_forward(pi, idx, m, docs, w, n_ranks, st, base, org, ext, los, his, rowv, one,
                  tiny):  # pragma: no cover - compiled
    """The states of the recursions of the documents ``docs[:w]`` (one a lane), every step kept:
    state ``t`` (before competitor ``idx[t]``) holds ranks ``org[t]..ext[t]`` at ``st[base[t]:]``,
    ``LANES`` values a rank, nonzero on ``los[t]..his[t]`` only (in any lane). A document meets
    itself as a contest of probability 0, an identity step."""
    uw = nb.uint64(LANES)
    base[0] = 0
    org[0] = 0
    ext[0] = 0
    los[0] = 0
    his[0] = 0
    for jj in range(ULANES):
        st[jj] = one if jj < w else one - one
    for t in range(m):
        i = idx[t]
        for jj in range(w):
            rowv[jj] = pi[docs[jj], i]
        for jj in range(w, LANES):
            rowv[jj] = 0
        lo, hi = los[t], his[t]
        nbase = base[t] + nb.uint64(ext[t] - org[t] + 1) * uw
        base[t + 1] = nbase
        if lo > hi:  # all zero stays all zero
            org[t + 1], ext[t + 1], los[t + 1], his[t + 1] = 0, -1, 1, 0
            continue
        top = min(hi + 1, n_ranks - 1)
        ob = base[t] + nb.uint64(lo - org[t]) * uw
        for jj in range(ULANES):
            st[nbase + jj] = _ftz(st[ob + jj] * (one - rowv[jj]), tiny)
        for k in range(1, hi - lo + 1):
            o = ob + nb.uint64(k) * uw
            n = nbase + nb.uint64(k) * uw
            for jj in range(ULANES):
                st[n + jj] = _ftz(st[o + jj] * (one - rowv[jj]) + st[o - uw + jj] * rowv[jj], tiny)
        if hi + 1 < n_ranks:
            o = ob + nb.uint64(hi - lo) * uw
            n = nbase + nb.uint64(hi + 1 - lo) * uw
            for jj in range(ULANES):
                st[n + jj] = _ftz(st[o + jj] * rowv[jj], tiny)
        new_lo, new_hi = lo, top
        while new_lo <= new_hi and _zero_row(st, nbase + nb.uint64(new_lo - lo) * uw):
            new_lo += 1
        while new_hi >= new_lo and _zero_row(st, nbase + nb.uint64(new_hi - lo) * uw):
            new_hi -= 1
        org[t + 1], ext[t + 1], los[t + 1], his[t + 1] = lo, top, new_lo, new_hi


@nb.njit(inline="always")
def _zero_row(st, at):  # pragma: no cover - compiled
    zero = True
    for jj in range(ULANES):
        zero &= st[at + jj] == 0
    return zero


@nb.njit(inline="always")
def _lane_dot(adj, st, ob, lo, hi, n_ranks, acc):  # pragma: no cover - compiled
    """``acc = dE/dpi = sum_r a(r) (p(r - 1) - p(r))`` of every lane, over the ranks ``lo..hi + 1``
    of a state nonzero on ``lo..hi`` only, stored from rank ``lo`` at ``st[ob:]``."""
    uw = nb.uint64(LANES)
    for jj in range(ULANES):
        acc[jj] = 0
    if lo > hi:
        return
    a0 = nb.uint64(lo) * uw
    for jj in range(ULANES):
        acc[jj] = -adj[a0 + jj] * st[ob + jj]
    for k in range(1, hi - lo + 1):
        o = ob + nb.uint64(k) * uw
        a = a0 + nb.uint64(k) * uw
        for jj in range(ULANES):
            acc[jj] += adj[a + jj] * (st[o - uw + jj] - st[o + jj])
    if hi + 1 < n_ranks:
        o = ob + nb.uint64(hi - lo) * uw
        a = nb.uint64(hi + 1) * uw
        for jj in range(ULANES):
            acc[jj] += adj[a + jj] * st[o + jj]


@nb.njit(cache=True, nogil=True)
def _lane_backward(pi, idx, m, docs, w, n_ranks, disc, dens_scale, jac, st, base, org, los, his, rowv,
                   adj, acc, grad_self, one):  # pragma: no cover - compiled
    """The adjoint sweep over the states of :func:`_lane_forward`: ``jac[j, i]`` (holding
    ``exp(-x^2)``) becomes ``dE_j / ds_i`` for every lane's document ``j``, ``jac[j, j]`` too."""
    uw = nb.uint64(LANES)
    for r in range(n_ranks):
        for jj in range(ULANES):
            adj[nb.uint64(r) * uw + jj] = disc[r]
    for jj in range(ULANES):
        grad_self[jj] = 0.0
    for t in range(m - 1, -1, -1):
        i = idx[t]
        for jj in range(w):
            rowv[jj] = pi[docs[jj], i]
        for jj in range(w, LANES):
            rowv[jj] = 0
        _lane_dot(adj, st, base[t] + nb.uint64(los[t] - org[t]) * uw, los[t], his[t], n_ranks, acc)
        for jj in range(w):
            j = docs[jj]
            if j != i:
                g = np.float64(acc[jj]) * dens_scale * np.float64(jac[j, i])
                jac[j, i] = g
                grad_self[jj] -= g
        # a(r) <- a(r) (1 - pi) + a(r + 1) pi on the ranks 0..min(t, R - 1) of the states before
        top = min(t, n_ranks - 1)
        for r in range(min(top, n_ranks - 2) + 1):
            a = nb.uint64(r) * uw
            for jj in range(ULANES):
                adj[a + jj] = adj[a + jj] * (one - rowv[jj]) + adj[a + uw + jj] * rowv[jj]
        if top == n_ranks - 1:
            a = nb.uint64(top) * uw
            for jj in range(ULANES):
                adj[a + jj] = adj[a + jj] * (one - rowv[jj])
    for jj in range(w):
        jac[docs[jj], docs[jj]] = grad_self[jj]


@nb.njit(cache=True, nogil=True)
def _lane_block(pi, idx, m, docs, w, n_ranks, disc, half_inv_sigma, jac, ed, want, st, one,
                tiny):  # pragma: no cover - compiled
    """``ed[j] = E_j`` and, with ``want``, ``jac[j] = dE_j / ds`` for the documents ``docs[:w]`` of a
    query (``pi``, ``jac`` from :func:`_contests`); ``st``: the states' buffer, at least
    ``(m + 1) R LANES`` values (a thread's, reused: fresh pages cost a fault each)."""
    steps = m + 1
    base = np.empty(steps, dtype=np.uint64)
    org = np.empty(steps, dtype=np.int64)
    ext = np.empty(steps, dtype=np.int64)
    los = np.empty(steps, dtype=np.int64)
    his = np.empty(steps, dtype=np.int64)
    rowv = np.empty(LANES, dtype=pi.dtype)
    _lane_forward(pi, idx, m, docs, w, n_ranks, st, base, org, ext, los, his, rowv, one, tiny)
    uw = nb.uint64(LANES)
    for jj in range(w):
        total = 0.0
        for r in range(los[m], his[m] + 1):
            total += np.float64(disc[r]) * np.float64(st[base[m] + nb.uint64(r - org[m]) * uw + jj])
        ed[docs[jj]] = total
    if want:
        adj = np.empty(n_ranks * LANES, dtype=pi.dtype)
        acc = np.empty(LANES, dtype=pi.dtype)
        grad_self = np.empty(LANES)
        _lane_backward(pi, idx, m, docs, w, n_ranks, disc, half_inv_sigma / math.sqrt(math.pi), jac, st, base,
                       org, los, his, rowv, adj, acc, grad_self, one)


# ----------------------------------------------------------------------------- the loss: padded batch
@nb.njit(parallel=True, cache=True, nogil=True)
def _batch_contests(scores, mask, half_inv_sigma, pi, jac, idx, counts, order):  # pragma: no cover
    batch, n = scores.shape
    for b in nb.prange(batch):
        m = 0
        for i in range(n):
            if mask[b, i]:
                idx[b, m] = i
                m += 1
        counts[b] = m
        if m < n:
            jac[b, :, :] = 0
        _contests(scores[b], idx[b], m, half_inv_sigma, pi[b], jac[b])
        # lanes: the documents by decreasing score, so that a lane block's rank ranges overlap
        key = np.empty(m)
        for u in range(m):
            key[u] = -np.float64(scores[b, idx[b, u]])
        perm = np.argsort(key, kind="mergesort")
        for u in range(m):
            order[b, u] = idx[b, perm[u]]


@nb.njit(parallel=True, cache=True, nogil=True)
def _batch_lanes(pi, idx, counts, order, tasks, disc, half_inv_sigma, jac, ed, want, n_chunks, one,
                 tiny):  # pragma: no cover - compiled
    n_ranks = disc.shape[1]
    n_tasks = tasks.shape[0]
    per = (n_tasks + n_chunks - 1) // n_chunks
    for c in nb.prange(n_chunks):  # a chunk of tasks a thread, its states' buffer allocated once
        st = np.empty((pi.shape[1] + 1) * n_ranks * LANES, dtype=pi.dtype)
        for k in range(c * per, min(n_tasks, (c + 1) * per)):
            b, start = tasks[k, 0], tasks[k, 1]
            m = counts[b]
            w = min(LANES, m - start)
            _lane_block(pi[b], idx[b], m, order[b, start:start + w], w, n_ranks, disc[b], half_inv_sigma,
                        jac[b], ed[b], want, st, one, tiny)


def expected_discounts(scores: np.ndarray, mask: np.ndarray, disc: np.ndarray, sigma: float,
                       want_jacobian: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Exact ``E[D(r_j)]`` of every real document and, with ``want_jacobian``, ``J[b, j, i] =
    dE_j / ds_i``.

    Parameters
    ----------
    scores : float32 or float64 array, shape (batch, n) (the working dtype of the recursion)
    mask : bool array, shape (batch, n); True = real document
    disc : array, shape (batch, R), the scores' dtype: the discount of 1-based rank ``r + 1``
    sigma : the score smoothing's standard deviation (> 0)
    want_jacobian : whether to compute ``J``

    Returns
    -------
    (ed, jac) : ``ed`` (batch, n) and ``jac`` (batch, n, n) in the scores' dtype (``jac`` None
        without ``want_jacobian``); zero for padded documents.
    """
    batch, n = scores.shape
    dtype = scores.dtype
    ed = np.zeros((batch, n), dtype=dtype)
    pi = np.empty((batch, n, n), dtype=dtype)
    jac = np.empty((batch, n, n), dtype=dtype)
    idx = np.empty((batch, n), dtype=np.int64)
    order = np.empty((batch, n), dtype=np.int64)
    counts = np.empty(batch, dtype=np.int64)
    with nb.parallel_chunksize(1):  # dynamic: a thread held up by another process holds up no other
        _batch_contests(scores, mask, 0.5 / sigma, pi, jac, idx, counts, order)
    tasks = np.array([(b, start) for b in range(batch) for start in range(0, int(counts[b]), LANES)],
                     dtype=np.int64).reshape(-1, 2)
    one, tiny = _one_tiny(dtype)
    with nb.parallel_chunksize(1):
        _batch_lanes(pi, idx, counts, order, tasks, np.ascontiguousarray(disc, dtype=dtype), 0.5 / sigma, jac,
                     ed, want_jacobian, _chunks(len(tasks)), one, tiny)
    return ed, (jac if want_jacobian else None)


@nb.njit(parallel=True, cache=True, nogil=True)
def _jt_product(jac, weight, out):  # pragma: no cover - compiled
    batch, n, _ = jac.shape
    for b in nb.prange(batch):
        for i in range(n):
            out[b, i] = 0.0
        for j in range(n):
            w = np.float64(weight[b, j])
            if w != 0:
                for i in range(n):
                    out[b, i] += w * jac[b, j, i]


def jacobian_transpose_product(jac: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``out[b, i] = sum_j weight[b, j] jac[b, j, i]`` in float64, the same bits on any thread count."""
    out = np.empty(weight.shape, dtype=np.float64)
    _jt_product(jac, weight, out)
    return out


# ----------------------------------------------------------------------------- the booster: flat arrays
@nb.njit(parallel=True, cache=True, nogil=True)
def _flat_kernel(s, offsets, disc, coef, half_inv_sigma, n_ranks_cap, values, grad, n_chunks, one,
                 tiny):  # pragma: no cover - compiled
    n_queries = offsets.shape[0] - 1
    longest = 0
    for q in range(n_queries):
        longest = max(longest, offsets[q + 1] - offsets[q])
    per = (n_queries + n_chunks - 1) // n_chunks
    for c in nb.prange(n_chunks):  # a chunk of queries a thread, its states' buffer allocated once
        st = np.empty((longest + 1) * min(n_ranks_cap, longest) * LANES)
        for q in range(c * per, min(n_queries, (c + 1) * per)):
            _flat_query(s, offsets, disc, coef, half_inv_sigma, n_ranks_cap, values, grad, q, st, one, tiny)


@nb.njit(cache=True, nogil=True)
def _flat_query(s, offsets, disc, coef, half_inv_sigma, n_ranks_cap, values, grad, q, st, one,
            tiny):  # pragma: no cover - compiled
    """Query ``q`` of :func:`_flat_kernel`: its value and its documents' gradient."""
    lo, hi = offsets[q], offsets[q + 1]
    m = hi - lo
    n_ranks = min(n_ranks_cap, m)
    sq = s[lo:hi]
    idx = np.arange(m)
    pi = np.empty((m, m))
    jq = np.empty((m, m))
    e = np.empty(m)
    _contests(sq, idx, m, half_inv_sigma, pi, jq)
    want = False
    for a in range(m):
        want |= coef[lo + a] != 0
    order = np.argsort(-sq, kind="mergesort")
    for start in range(0, m, LANES):
        w = min(LANES, m - start)
        _lane_block(pi, idx, m, order[start:start + w], w, n_ranks, disc[lo:lo + n_ranks], half_inv_sigma,
                    jq, e, want, st, one, tiny)
    total = 0.0
    for a in range(m):
        total += coef[lo + a] * e[a]
        grad[lo + a] = 0.0
    values[q] = total
    if want:
        for a in range(m):
            c = coef[lo + a]
            if c != 0:
                for i in range(m):
                    grad[lo + i] += c * jq[a, i]


def flat_soft_dcg_gradient(scores: np.ndarray, offsets: np.ndarray, disc: np.ndarray, coef: np.ndarray,
                           sigma: float, n_ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """``values[q] = sum_j coef_j E_j`` and its score gradient over flat, query-grouped arrays.

    Parameters
    ----------
    scores, coef : float64 arrays, shape (n_docs,), each query's documents contiguous
    offsets : int64 array, shape (n_queries + 1,), the queries' boundaries
    disc : float64 array, shape (n_docs,): at a query's ``r``-th document, the discount of rank
        ``r + 1`` (zero beyond the cutoff)
    sigma : the score smoothing's standard deviation (> 0)
    n_ranks : ranks computed (the cutoff, or the longest query)

    Returns
    -------
    (values, grad) : float64 arrays of shape (n_queries,) and (n_docs,)
    """
    values = np.zeros(offsets.shape[0] - 1)
    grad = np.zeros_like(scores)
    n_chunks = _chunks(offsets.shape[0] - 1)
    with nb.parallel_chunksize(1):
        _flat_kernel(scores, offsets, disc, coef, 0.5 / sigma, int(n_ranks), values, grad, n_chunks,
                     *_one_tiny(np.dtype(np.float64)))
    return values, grad
