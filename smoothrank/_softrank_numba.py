"""Exact SoftRank expected discounts and their score Jacobian, per query, compiled (Numba, CPU).

Imported on first use (:mod:`smoothrank.softrank.rank_binomial`, :mod:`smoothrank.boosting_kernels`).

For one query of ``m`` real documents this computes, for every document ``j``, the expected
discount ``E_j = sum_r D(r) p_j(r)`` under its exact Rank-Binomial distribution (Taylor et al.,
SoftRank, WSDM 2008, eqs. 12 and 15) and the row ``J[j, i] = dE_j / ds_i`` of its Jacobian. The
SoftNDCG loss and its gradient are then ``sum_j c_j E_j`` and ``J^T c``; the booster knows ``c``
(gains over the ideal DCG) up front, the loss gets it in its backward pass.

In one pass forward and one back over a block of ``LANES`` documents, the states kept in between:

* each lane's contests ``pi_ij = Phi((s_i - s_j) / (sigma sqrt 2)) = erfc((s_j - s_i) / (2 sigma)) / 2``
  with the ``t``-th document of its list and the densities ``exp(-x^2)``, formed in float64 a row
  at a time (``erfc(|x|)`` and ``exp`` vectorised, :mod:`smoothrank._exp_numba`; the smaller
  probability of a pair is ``erfc(|x|) / 2``, the larger ``1`` minus it, both 1/2 at a tie) into
  the lanes' rows: a probability of 0 is an identity step (the document itself, and past the end
  of a shorter list);
* the recursions of the lanes run side by side, the lanes in the vectorised inner loop (ordered by
  decreasing score, so that the lanes' rank ranges overlap);
* forward: ``p^(t+1)(r) = p^(t)(r) (1 - pi) + p^(t)(r - 1) pi`` (eq. 12), every state kept;
* backward: the adjoint ``a^(t)(r) = a^(t+1)(r) (1 - pi) + a^(t+1)(r + 1) pi`` from ``a = D``, with
  ``dE/dpi_t = sum_r a^(t+1)(r) (p^(t)(r - 1) - p^(t)(r))``, turned into score derivatives with
  ``dpi_ij / ds_i = exp(-x^2) / (2 sigma sqrt(pi))``, ``x = (s_i - s_j) / (2 sigma)`` (eq. 20).

The states are flushed to zero below the smallest normal number over the machine epsilon with the
arithmetic of :mod:`smoothrank.softrank._numba`, so the distributions are the same bits as its
kernels' for the same contests. The range ``[lo, hi]`` of ranks where some lane's state is nonzero
is tracked and only it is stored and swept: the entries outside it are exactly zero, so skipping
them changes no bit. The adjoint is needed on every rank below ``min(t, R - 1)``. A lane's results
depend on its own contests alone: the same bits on any number of threads and in any block.

Only the documents whose ``E`` is wanted take a lane (every document still competes): the loss
passes the documents of nonzero gain (``select``), the booster its documents of nonzero coefficient,
packed into blocks across queries of similar length. Memory: the kept states, at most
``n R LANES`` values per thread (7 MB in float32 at ``n = R = 240``), and, for the loss, the
``(batch, n, n)`` Jacobian.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from smoothrank._exp_numba import erfc_exp_nonnegative

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
def _lane_contests(sq, idx, m, j, jj, steps, half_inv_sigma, rows, dens, row_buf):  # pragma: no cover
    """Lane ``jj``'s contests ``P(idx[t] beats j)`` and densities ``exp(-x^2)``, ``x = (s_j -
    s_idx[t]) / (2 sigma)``, at its steps ``t < m`` (formed in float64, cast to ``rows``' dtype;
    ``erfc`` and ``exp`` a row at a time), 0 for ``j`` itself, past ``m`` and in an empty lane
    (``j < 0``); ``row_buf``: the rows of :func:`erfc_exp_nonnegative`."""
    gap, small, density, work, scratch = row_buf
    sj = np.float64(sq[j]) if j >= 0 else 0.0
    if j >= 0:
        for t in range(m):
            gap[t] = abs((sj - np.float64(sq[idx[t]])) * half_inv_sigma)
        erfc_exp_nonnegative(gap[:m], small[:m], density[:m], work, scratch)
    for t in range(steps):
        at = t * LANES + jj
        if j >= 0 and t < m and idx[t] != j:
            half = 0.5 * small[t]  # the smaller probability of the pair; 1/2 at a tie
            rows[at] = half if sj >= np.float64(sq[idx[t]]) else 1.0 - half
            dens[at] = density[t]
        else:
            rows[at] = 0
            dens[at] = 0


@nb.njit(cache=True, nogil=True)
def _lane_forward(rows, steps, w, n_ranks, st, base, org, ext, los, his, one, tiny):  # pragma: no cover
    """The states of the recursions of ``w`` lanes, every step kept: step ``t`` applies the contest
    ``rows[t * LANES + jj]`` to lane ``jj`` (0 is an identity step: the lane's own document, or past
    the end of its list); state ``t`` (before step ``t``) holds ranks ``org[t]..ext[t]`` at
    ``st[base[t]:]``, ``LANES`` values a rank, nonzero on ``los[t]..his[t]`` only (in any lane)."""
    uw = nb.uint64(LANES)
    base[0] = 0
    org[0] = 0
    ext[0] = 0
    los[0] = 0
    his[0] = 0
    for jj in range(ULANES):
        st[jj] = one if jj < w else one - one
    for t in range(steps):
        pt = nb.uint64(t) * uw
        lo, hi = los[t], his[t]
        nbase = base[t] + nb.uint64(ext[t] - org[t] + 1) * uw
        base[t + 1] = nbase
        if lo > hi:  # all zero stays all zero
            org[t + 1], ext[t + 1], los[t + 1], his[t + 1] = 0, -1, 1, 0
            continue
        top = min(hi + 1, n_ranks - 1)
        ob = base[t] + nb.uint64(lo - org[t]) * uw
        for jj in range(ULANES):
            st[nbase + jj] = _ftz(st[ob + jj] * (one - rows[pt + jj]), tiny)
        for k in range(1, hi - lo + 1):
            o = ob + nb.uint64(k) * uw
            n = nbase + nb.uint64(k) * uw
            for jj in range(ULANES):
                st[n + jj] = _ftz(st[o + jj] * (one - rows[pt + jj]) + st[o - uw + jj] * rows[pt + jj], tiny)
        if hi + 1 < n_ranks:
            o = ob + nb.uint64(hi - lo) * uw
            n = nbase + nb.uint64(hi + 1 - lo) * uw
            for jj in range(ULANES):
                st[n + jj] = _ftz(st[o + jj] * rows[pt + jj], tiny)
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
def _lane_backward(rows, dens, steps, w, n_ranks, lane_disc, dens_scale, st, base, org, los, his, adj, acc,
                   out, one):  # pragma: no cover - compiled
    """The adjoint sweep over the states of :func:`_lane_forward` from ``a = lane_disc`` (``R``
    ranks x ``LANES``): ``out[t * LANES + jj] = dE_jj / ds`` of the competitor of step ``t``
    (``dE/dpi`` times ``dens_scale`` times ``dens[t * LANES + jj]``, which holds ``exp(-x^2)``)."""
    uw = nb.uint64(LANES)
    for r in range(n_ranks * LANES):
        adj[r] = lane_disc[r]
    for t in range(steps - 1, -1, -1):
        pt = nb.uint64(t) * uw
        _lane_dot(adj, st, base[t] + nb.uint64(los[t] - org[t]) * uw, los[t], his[t], n_ranks, acc)
        for jj in range(w):
            out[pt + jj] = np.float64(acc[jj]) * dens_scale * np.float64(dens[pt + jj])
        # a(r) <- a(r) (1 - pi) + a(r + 1) pi on the ranks 0..min(t, R - 1) of the states before
        top = min(t, n_ranks - 1)
        for r in range(min(top, n_ranks - 2) + 1):
            a = nb.uint64(r) * uw
            for jj in range(ULANES):
                adj[a + jj] = adj[a + jj] * (one - rows[pt + jj]) + adj[a + uw + jj] * rows[pt + jj]
        if top == n_ranks - 1:
            a = nb.uint64(top) * uw
            for jj in range(ULANES):
                adj[a + jj] = adj[a + jj] * (one - rows[pt + jj])


@nb.njit(cache=True, nogil=True)
def _lane_block(rows, dens, lane_disc, steps, w, n_ranks, dens_scale, want, st, ed, out, one,
                tiny):  # pragma: no cover - compiled
    """``ed[jj] = E`` of lane ``jj < w`` and, with ``want``, its derivatives ``out`` (see
    :func:`_lane_backward`), from the lanes' contests ``rows`` and densities ``dens`` (``steps x
    LANES``) and discounts ``lane_disc`` (``R x LANES``); ``st``: the states' buffer, at least
    ``(steps + 1) R LANES`` values (a thread's, reused: fresh pages cost a fault each)."""
    base = np.empty(steps + 1, dtype=np.uint64)
    org = np.empty(steps + 1, dtype=np.int64)
    ext = np.empty(steps + 1, dtype=np.int64)
    los = np.empty(steps + 1, dtype=np.int64)
    his = np.empty(steps + 1, dtype=np.int64)
    _lane_forward(rows, steps, w, n_ranks, st, base, org, ext, los, his, one, tiny)
    uw = nb.uint64(LANES)
    for jj in range(w):
        total = 0.0
        for r in range(los[steps], his[steps] + 1):
            total += (np.float64(lane_disc[nb.uint64(r) * uw + jj])
                      * np.float64(st[base[steps] + nb.uint64(r - org[steps]) * uw + jj]))
        ed[jj] = total
    if want:
        adj = np.empty(n_ranks * LANES, dtype=rows.dtype)
        acc = np.empty(LANES, dtype=rows.dtype)
        _lane_backward(rows, dens, steps, w, n_ranks, lane_disc, dens_scale, st, base, org, los, his, adj,
                       acc, out, one)


# ----------------------------------------------------------------------------- the loss: padded batch
@nb.njit(parallel=True, cache=True, nogil=True)
def _batch_order(scores, mask, select, idx, counts, order, selected):  # pragma: no cover - compiled
    """Each query's real documents ``idx[b, :counts[b]]`` (the competitors, in list order) and its
    selected ones by decreasing score, ``order[b, :selected[b]]`` (so that a lane block's rank
    ranges overlap)."""
    batch, n = scores.shape
    for b in nb.prange(batch):
        m = 0
        for i in range(n):
            if mask[b, i]:
                idx[b, m] = i
                m += 1
        counts[b] = m
        key = np.empty(m)
        for u in range(m):
            key[u] = -np.float64(scores[b, idx[b, u]])
        perm = np.argsort(key, kind="mergesort")
        k = 0
        for u in range(m):
            if select[b, idx[b, perm[u]]]:
                order[b, k] = idx[b, perm[u]]
                k += 1
        selected[b] = k


@nb.njit(cache=True, nogil=True)
def _padded_block(sq, jac, idx, m, docs, w, disc, half_inv_sigma, ed, want, buf, one,
                  tiny):  # pragma: no cover - compiled
    """The lane block of the documents ``docs[:w]`` of one padded query (scores ``sq``):
    ``ed[j]`` and (``want``) the rows ``jac[j] = dE_j / ds``; ``buf``: the thread's states, lanes'
    contests, densities, discounts, expected discounts, derivatives and contest rows."""
    st, rows, dens, lane_disc, e, out, row_buf = buf
    n_ranks = disc.shape[0]
    for jj in range(LANES):
        _lane_contests(sq, idx, m, docs[jj] if jj < w else -1, jj, m, half_inv_sigma, rows, dens, row_buf)
    for r in range(n_ranks):
        for jj in range(LANES):
            lane_disc[r * LANES + jj] = disc[r]
    _lane_block(rows, dens, lane_disc, m, w, n_ranks, half_inv_sigma / math.sqrt(math.pi), want, st, e, out,
                one, tiny)
    for jj in range(w):
        j = docs[jj]
        ed[j] = e[jj]
        if want:
            grad_self = 0.0
            for t in range(m - 1, -1, -1):
                i = idx[t]
                if i != j:
                    g = out[t * LANES + jj]
                    jac[j, i] = g
                    grad_self -= g
            jac[j, j] = grad_self


@nb.njit(parallel=True, cache=True, nogil=True)
def _batch_lanes(scores, jac, idx, counts, order, tasks, disc, half_inv_sigma, ed, want, n_chunks, one,
                 tiny):  # pragma: no cover - compiled
    n = scores.shape[1]
    n_ranks = disc.shape[1]
    n_tasks = tasks.shape[0]
    per = (n_tasks + n_chunks - 1) // n_chunks
    for c in nb.prange(n_chunks):  # a chunk of tasks a thread, its buffers allocated once
        dtype = scores.dtype
        buf = (np.empty((n + 1) * n_ranks * LANES, dtype=dtype), np.empty(n * LANES, dtype=dtype),
               np.empty(n * LANES, dtype=dtype), np.empty(n_ranks * LANES, dtype=dtype),
               np.empty(LANES), np.empty(n * LANES),
               (np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(2 * n, dtype=np.int64)))
        for k in range(c * per, min(n_tasks, (c + 1) * per)):
            b, start, w = tasks[k, 0], tasks[k, 1], tasks[k, 2]
            _padded_block(scores[b], jac[b], idx[b], counts[b], order[b, start:start + w], w, disc[b],
                          half_inv_sigma, ed[b], want, buf, one, tiny)


def expected_discounts(scores: np.ndarray, mask: np.ndarray, disc: np.ndarray, sigma: float,
                       want_jacobian: bool, select: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray | None]:
    """Exact ``E[D(r_j)]`` of every selected document and, with ``want_jacobian``, ``J[b, j, i] =
    dE_j / ds_i``.

    Parameters
    ----------
    scores : float32 or float64 array, shape (batch, n) (the working dtype of the recursion)
    mask : bool array, shape (batch, n); True = real document
    disc : array, shape (batch, R), the scores' dtype: the discount of 1-based rank ``r + 1``
    sigma : the score smoothing's standard deviation (> 0)
    want_jacobian : whether to compute ``J``
    select : bool array, shape (batch, n), or None (= ``mask``): the real documents whose ``E`` and
        row of ``J`` are wanted (every real document is still a competitor of each)

    Returns
    -------
    (ed, jac) : ``ed`` (batch, n) and ``jac`` (batch, n, n) in the scores' dtype (``jac`` None
        without ``want_jacobian``); zero for padded and unselected documents.
    """
    batch, n = scores.shape
    dtype = scores.dtype
    ed = np.zeros((batch, n), dtype=dtype)
    jac = np.zeros((batch, n, n) if want_jacobian else (batch, 0, 0), dtype=dtype)
    idx = np.empty((batch, n), dtype=np.int64)
    order = np.empty((batch, n), dtype=np.int64)
    counts = np.empty(batch, dtype=np.int64)
    selected = np.empty(batch, dtype=np.int64)
    select = mask if select is None else select & mask
    _batch_order(scores, mask, select, idx, counts, order, selected)
    tasks = np.array([(b, start, min(LANES, int(selected[b]) - start)) for b in range(batch)
                      for start in range(0, int(selected[b]), LANES)], dtype=np.int64).reshape(-1, 3)
    one, tiny = _one_tiny(dtype)
    with nb.parallel_chunksize(1):  # dynamic: a thread held up by another process holds up no other
        _batch_lanes(scores, jac, idx, counts, order, tasks, np.ascontiguousarray(disc, dtype=dtype),
                     0.5 / sigma, ed, want_jacobian, _chunks(len(tasks)), one, tiny)
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
#: Lanes a task of the booster's kernel fills (a few blocks): a task's queries are one thread's, so
#: their values and gradients are summed without races, and few lanes of a task stay empty.
TASK_LANES = 4 * LANES


@nb.njit(cache=True, nogil=True)
def _task_lanes(s, offsets, coef, queries):  # pragma: no cover - compiled
    """The documents of nonzero coefficient of ``queries``, ordered by their place in their query's
    descending scores (so that a lane block's rank ranges overlap), ties by query: ``(docs, query)``."""
    total = 0
    for q in queries:
        total += offsets[q + 1] - offsets[q]
    docs = np.empty(total, dtype=np.int64)
    owner = np.empty(total, dtype=np.int64)
    place = np.empty(total, dtype=np.int64)
    n = 0
    for q in queries:
        lo, hi = offsets[q], offsets[q + 1]
        order = np.argsort(-s[lo:hi], kind="mergesort")
        for u in range(hi - lo):
            if coef[lo + order[u]] != 0:
                docs[n], owner[n], place[n] = lo + order[u], q, u
                n += 1
    by_place = np.argsort(place[:n], kind="mergesort")
    return docs[by_place], owner[by_place]


@nb.njit(cache=True, nogil=True)
def _flat_buffers(longest, n_ranks):  # pragma: no cover - compiled
    """A thread's buffers for :func:`_flat_block`: the states, the lanes' contests, densities,
    discounts, expected discounts and derivatives, the contest rows, and ``0..longest - 1``."""
    row_buf = (np.empty(longest), np.empty(longest), np.empty(longest), np.empty(longest),
               np.empty(2 * longest, dtype=np.int64))
    return (np.empty((longest + 1) * n_ranks * LANES), np.empty(longest * LANES), np.empty(longest * LANES),
            np.empty(n_ranks * LANES), np.empty(LANES), np.empty(longest * LANES), row_buf,
            np.arange(longest))


@nb.njit(cache=True, nogil=True)
def _flat_lane_rows(s, offsets, disc, half_inv_sigma, docs, owner, steps, n_ranks, buf):  # pragma: no cover
    """Each lane's contests, densities and discounts into ``buf``: lane ``jj`` is document ``docs[jj]``
    of query ``owner[jj]``, its competitors that query's documents in list order."""
    rows, dens, lane_disc, row_buf, ident = buf[1], buf[2], buf[3], buf[6], buf[7]
    w = docs.shape[0]
    for jj in range(LANES):
        lo = offsets[owner[jj]] if jj < w else 0
        m = offsets[owner[jj] + 1] - lo if jj < w else 0
        j = docs[jj] - lo if jj < w else -1
        _lane_contests(s[lo:lo + m], ident, m, j, jj, steps, half_inv_sigma, rows, dens, row_buf)
        for r in range(n_ranks):
            lane_disc[r * LANES + jj] = disc[lo + r] if r < m else 0.0


@nb.njit(cache=True, nogil=True)
def _flat_block(s, offsets, disc, coef, half_inv_sigma, n_ranks_cap, docs, owner, values, grad, buf,
                tiny):  # pragma: no cover - compiled
    """One lane block of the booster's kernel: the documents ``docs`` (each of query ``owner``; at
    most ``LANES``) add ``coef_j E_j`` to their query's value and ``coef_j dE_j / ds`` to the
    gradient. Shorter queries' lanes take identity steps past their ends."""
    st, rows, dens, lane_disc, e, out = buf[0], buf[1], buf[2], buf[3], buf[4], buf[5]
    w = docs.shape[0]
    steps = 0
    for jj in range(w):
        steps = max(steps, offsets[owner[jj] + 1] - offsets[owner[jj]])
    n_ranks = min(n_ranks_cap, steps)
    _flat_lane_rows(s, offsets, disc, half_inv_sigma, docs, owner, steps, n_ranks, buf)
    _lane_block(rows, dens, lane_disc, steps, w, n_ranks, half_inv_sigma / math.sqrt(math.pi), True, st, e,
                out, 1.0, tiny)
    for jj in range(w):
        lo = offsets[owner[jj]]
        j = docs[jj] - lo
        c = coef[docs[jj]]
        values[owner[jj]] += c * e[jj]
        grad_self = 0.0
        for t in range(offsets[owner[jj] + 1] - lo - 1, -1, -1):
            if t != j:
                g = out[t * LANES + jj]
                grad[lo + t] += c * g
                grad_self -= g
        grad[docs[jj]] += c * grad_self


@nb.njit(parallel=True, cache=True, nogil=True)
def _flat_kernel(s, offsets, disc, coef, half_inv_sigma, n_ranks_cap, task_queries, task_starts, values, grad,
                 n_chunks, tiny):  # pragma: no cover - compiled
    longest = 0
    for q in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[q + 1] - offsets[q])
    n_tasks = task_starts.shape[0] - 1
    per = (n_tasks + n_chunks - 1) // n_chunks
    for c in nb.prange(n_chunks):  # a chunk of tasks a thread, its buffers allocated once
        buf = _flat_buffers(longest, min(n_ranks_cap, longest))
        for k in range(c * per, min(n_tasks, (c + 1) * per)):
            docs, owner = _task_lanes(s, offsets, coef, task_queries[task_starts[k]:task_starts[k + 1]])
            for start in range(0, docs.shape[0], LANES):
                stop = min(docs.shape[0], start + LANES)
                _flat_block(s, offsets, disc, coef, half_inv_sigma, n_ranks_cap, docs[start:stop],
                            owner[start:stop], values, grad, buf, tiny)


def _flat_tasks(offsets: np.ndarray, coef: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The queries with a nonzero coefficient, longest first, cut into tasks of about
    :data:`TASK_LANES` such documents: ``(queries, starts)``, task ``k`` being
    ``queries[starts[k]:starts[k + 1]]``."""
    sizes = np.diff(offsets)
    wanted = np.add.reduceat((coef != 0).astype(np.int64), offsets[:-1]) if sizes.size else sizes
    queries = np.argsort(-sizes, kind="stable")
    queries = queries[wanted[queries] > 0]
    filled = np.cumsum(wanted[queries])
    task_of = (filled - 1) // TASK_LANES  # a task ends with the query that fills its lanes
    starts = np.flatnonzero(np.diff(task_of, prepend=-1))
    return queries.astype(np.int64), np.append(starts, queries.size).astype(np.int64)


def flat_soft_dcg_gradient(scores: np.ndarray, offsets: np.ndarray, disc: np.ndarray, coef: np.ndarray,
                           sigma: float, n_ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """``values[q] = sum_j coef_j E_j`` and its score gradient over flat, query-grouped arrays.

    The documents of coefficient 0 add nothing to either and are not computed (they are still every
    other document's competitors). The others run in lane blocks that may mix queries of similar
    length.

    Parameters
    ----------
    scores, coef : float64 arrays, shape (n_docs,), each query's documents contiguous
    offsets : int64 array, shape (n_queries + 1,), the queries' boundaries (every query nonempty)
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
    queries, starts = _flat_tasks(offsets, coef)
    n_chunks = _chunks(starts.size - 1)
    with nb.parallel_chunksize(1):
        _flat_kernel(scores, offsets, disc, coef, 0.5 / sigma, int(n_ranks), queries, starts, values, grad,
                     n_chunks, _one_tiny(np.dtype(np.float64))[1])
    return values, grad
