"""NeuralNDCG's smoothed DCG and its gradient, per query, compiled (Numba, float64, CPU).

Imported on first use (:mod:`smoothrank.neural_kernels`, :mod:`smoothrank.boosting_kernels`): importing
the losses does not load Numba.

For one query of ``m`` documents, the computation of
:func:`smoothrank.sorting.neural_sort_bilinear` (``left^T scale(P-hat) right``, with NeuralSort's
P-hat, Sinkhorn scaling and the adjoint of both), on that query's own ``m x m`` matrix, which
stays in the processor's cache for every Sinkhorn iteration and the backward pass; the queries run
in parallel (``prange``). Everything is in float64: scores, logits, P-hat and the Sinkhorn
iterates. The formulas, the tie rule of ``B_j = sum_k |s_j - s_k|`` (a run of tied scores at its
last position), the floor of empty columns and the stopping rule are those of the PyTorch code,
so the results equal its float64 results to round-off. Each query's result depends on that query
alone: the same bits on any number of threads.

Layout: flat arrays, one entry a document, each query's documents contiguous, ``offsets`` (int64,
``n_queries + 1``) its boundaries; ``disc`` holds, at the position of a query's ``r``-th document,
the discount of rank ``r + 1`` (zero beyond the cutoff).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from smoothrank._exp_numba import exp_nonpositive

__all__ = ["ideal_dcg", "neural_dcg"]

_FASTMATH = {"reassoc", "contract", "nsz"}  # vectorised sums; no assumption about inf or NaN


def neural_dcg(scores: np.ndarray, gains: np.ndarray, disc: np.ndarray, offsets: np.ndarray, *,
               temperature: float, max_iter: int, tol: float, transposed: bool,
               grad_scale: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Each query's smoothed DCG and, with ``grad_scale``, ``grad_scale[q] d DCG_q / d s``.

    Parameters
    ----------
    scores, gains, disc : float64 arrays, shape (n_docs,), in the layout above
    offsets : int64 array, shape (n_queries + 1,)
    temperature : NeuralSort's tau (> 0)
    max_iter, tol : Sinkhorn's iterations and tolerance; ``max_iter=0`` without Sinkhorn
    transposed : NeuralNDCG-transposed (Sinkhorn on P-hat^T, gains on its rows)
    grad_scale : float64 array, shape (n_queries,), or None for the values alone; a query whose
        scale is 0 gets no backward pass (its gradient is 0)

    Returns
    -------
    (dcg, grad) : shape (n_queries,) and (n_docs,) (None without ``grad_scale``)
    """
    values = np.zeros(offsets.shape[0] - 1)
    want = grad_scale is not None
    grad = np.zeros_like(scores)
    scale = grad_scale if want else np.zeros(offsets.shape[0] - 1)
    with nb.parallel_chunksize(1):  # dynamic: a thread held up by another process holds up no other
        _neural_kernel(scores, gains, disc, offsets, float(temperature), int(max_iter), float(tol),
                       bool(transposed), scale, values, grad)
    return values, (grad if want else None)


@nb.njit(cache=True, nogil=True)
def ideal_dcg(g, d):  # pragma: no cover - compiled
    """Gains sorted descending times the discounts of ranks 1..m."""
    ordered = np.sort(g)
    m = g.shape[0]
    total = 0.0
    for r in range(m):
        total += ordered[m - 1 - r] * d[r]
    return total


@nb.njit(cache=True, nogil=True)
def _abs_diff_sums(s, order, last, b):  # pragma: no cover - compiled
    """``B_j = sum_k |s_j - s_k|`` via the sorted scores' prefix sums, each run of tied scores at
    its last position (``sorting._abs_diff_row_sums``); fills ``order`` and ``last``."""
    m = s.shape[0]
    order[:] = np.argsort(s, kind="mergesort")
    a = s[order]
    prefix = np.cumsum(a)
    total = prefix[m - 1]
    p = m - 1
    for q in range(m - 1, -1, -1):
        if q < m - 1 and a[q] != a[q + 1]:
            p = q
        last[q] = p
        b[order[q]] = a[q] * (2.0 * p + 2.0 - m) - 2.0 * prefix[p] + total


@nb.njit(cache=True, nogil=True)
def _abs_diff_sums_backward(order, last, gb, gs):  # pragma: no cover - compiled
    """Adds the gradient through ``_abs_diff_sums`` of ``gb`` (d/dB) to ``gs`` (d/ds)."""
    m = order.shape[0]
    g_prefix = np.zeros(m)
    g_total = 0.0
    g_a = np.zeros(m)
    for q in range(m):
        gq = gb[order[q]]
        p = last[q]
        g_a[q] += gq * (2.0 * p + 2.0 - m)
        g_prefix[p] -= 2.0 * gq
        g_total += gq
    run = 0.0
    for q in range(m - 1, -1, -1):
        run += g_prefix[q]
        gs[order[q]] += g_a[q] + run + g_total


@nb.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _rows_times(p, x, out):  # pragma: no cover - compiled
    """``out = P x``."""
    m = p.shape[0]
    for r in range(m):
        acc = 0.0
        for j in range(m):
            acc += p[r, j] * x[j]
        out[r] = acc


@nb.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _cols_times(p, x, out):  # pragma: no cover - compiled
    """``out = P^T x``."""
    m = p.shape[0]
    out[:] = 0.0
    for r in range(m):
        xr = x[r]
        for j in range(m):
            out[j] += p[r, j] * xr


@nb.njit(inline="always")
def _k_times(p, x, out, transposed):  # pragma: no cover - compiled
    """``K x`` with K = P, or P^T for the transposed form."""
    if transposed:
        _cols_times(p, x, out)
    else:
        _rows_times(p, x, out)


@nb.njit(inline="always")
def _kt_times(p, x, out, transposed):  # pragma: no cover - compiled
    """``K^T x``."""
    if transposed:
        _rows_times(p, x, out)
    else:
        _cols_times(p, x, out)


@nb.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _phat(s, b, tau, p, filled):  # pragma: no cover - compiled
    """P-hat (ranks x items): row r the softmax over j of ``((m - 1 - 2r) s_j - B_j) / tau``, each
    row shifted to a maximum of 0; columns whose mass underflowed (all below eps^2) set to eps^2
    (``sorting._fill_empty_columns``; only when ``filled`` has room for them)."""
    m = s.shape[0]
    z = np.empty(m)
    scratch = np.empty(2 * m, dtype=np.int64)
    for r in range(m):
        coef = m - 1.0 - 2.0 * r
        top = -np.inf
        for j in range(m):
            z[j] = coef * s[j] - b[j]
            top = max(top, z[j])
        for j in range(m):
            z[j] = (z[j] - top) / tau
        row = p[r]
        exp_nonpositive(z, row, scratch)
        total = 0.0
        for j in range(m):
            total += row[j]
        for j in range(m):
            row[j] /= total
    if filled.shape[0] == m:
        floor = np.finfo(np.float64).eps ** 2
        for j in range(m):
            most = 0.0
            for r in range(m):
                most = max(most, p[r, j])
            filled[j] = most < floor
            if filled[j]:
                p[:, j] = floor


@nb.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _sinkhorn(p, transposed, max_iter, tol, us, vs):  # pragma: no cover - compiled
    """``sorting._sinkhorn_chunk`` for one query: the iterates u_t (``us[t]``), v_t (``vs[t + 1]``,
    ``vs[0] = 1``), stopping after the first iteration whose marginal error is below ``tol``;
    returns the number of iterations run."""
    m = p.shape[0]
    tiny = np.finfo(np.float64).tiny
    kv = np.empty(m)
    ktu = np.empty(m)
    vs[0, :] = 1.0
    _k_times(p, vs[0], kv, transposed)
    for t in range(max_iter):
        u, v = us[t], vs[t + 1]
        for i in range(m):
            u[i] = 1.0 / max(kv[i], tiny)
        _kt_times(p, u, ktu, transposed)
        for i in range(m):
            v[i] = 1.0 / max(ktu[i], tiny)
        _k_times(p, v, kv, transposed)
        err = 0.0
        for i in range(m):
            err = max(err, abs(u[i] * kv[i] - 1.0), abs(v[i] * ktu[i] - 1.0))
        if not err >= tol:
            return t + 1
    return max_iter


@nb.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _adjoint(p, transposed, steps, us, vs, lv, rv, g, left, right):  # pragma: no cover - compiled
    """The gradient of ``g (u * lv)^T K (v * rv)`` for K as 2 steps + 1 outer products
    ``sum_c left[c] right[c]^T`` (``sorting._sinkhorn_adjoint_chunk`` and the direct term)."""
    m = p.shape[0]
    u, v = us[steps - 1], vs[steps]
    x = np.empty(m)
    y = np.empty(m)
    bu = np.empty(m)
    bv = np.empty(m)
    for i in range(m):
        x[i] = v[i] * rv[i]
        y[i] = u[i] * lv[i]
    _k_times(p, x, bu, transposed)
    _kt_times(p, y, bv, transposed)
    for i in range(m):
        bu[i] *= g * lv[i]
        bv[i] *= g * rv[i]
    w_bar = np.empty(m)
    kw = np.empty(m)
    for t in range(steps - 1, -1, -1):
        u_t, v_t, v_prev = us[t], vs[t + 1], vs[t]
        for i in range(m):
            w_bar[i] = -bv[i] * v_t[i] * v_t[i]
        _k_times(p, w_bar, kw, transposed)
        for i in range(m):
            bu[i] += kw[i]
            left[2 * t, i] = u_t[i]
            right[2 * t, i] = w_bar[i]
            left[2 * t + 1, i] = -bu[i] * u_t[i] * u_t[i]
            right[2 * t + 1, i] = v_prev[i]
        _kt_times(p, left[2 * t + 1], bv, transposed)
        bu[:] = 0.0
    for i in range(m):
        left[2 * steps, i] = g * u[i] * lv[i]
        right[2 * steps, i] = x[i]


@nb.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _softmax_backward(p, filled, left, right, n_terms, transposed, tau, gs, gb):  # pragma: no cover
    """From dK = sum_c left[c] right[c]^T (dP = dK, or dK^T transposed; 0 at filled entries), the
    softmax backward of each rank row: ``gs_j += sum_r coef_r dlogit_rj / tau``, ``gb_j = -sum_r
    dlogit_rj / tau``."""
    m = p.shape[0]
    row = np.empty(m)
    acc_s = np.zeros(m)
    acc_b = np.zeros(m)
    for r in range(m):
        row[:] = 0.0
        for c in range(n_terms):
            # dP[r, :] = sum_c left[c, r] right[c, :] (dK's row r), or right[c, r] left[c, :]
            a = right[c, r] if transposed else left[c, r]
            vec = left[c] if transposed else right[c]
            for j in range(m):
                row[j] += a * vec[j]
        dot = 0.0
        for j in range(m):
            if filled.shape[0] == m and filled[j]:
                row[j] = 0.0
            dot += row[j] * p[r, j]
        coef = m - 1.0 - 2.0 * r
        for j in range(m):
            d = (row[j] - dot) * p[r, j]
            acc_s[j] += coef * d
            acc_b[j] += d
    for j in range(m):
        gs[j] += acc_s[j] / tau
        gb[j] = -acc_b[j] / tau


@nb.njit(cache=True, nogil=True)
def _neural_query(x, g, d, tau, max_iter, tol, transposed, scale, out):  # pragma: no cover - compiled
    """The smoothed DCG of one query; ``scale`` times its gradient into ``out`` unless scale is 0."""
    m = x.shape[0]
    lv, rv = (g, d) if transposed else (d, g)
    if m == 0 or not (g.max() > 0 and d.max() > 0):
        return 0.0  # every term is a product with a zero gain or discount
    s = x - x.sum() / m
    order = np.empty(m, dtype=np.int64)
    last = np.empty(m, dtype=np.int64)
    b = np.empty(m)
    _abs_diff_sums(s, order, last, b)
    p = np.empty((m, m))
    filled = np.zeros(m if max_iter > 0 else 0, dtype=np.bool_)
    _phat(s, b, tau, p, filled)
    steps = 0
    us = np.ones((max(max_iter, 1), m))
    vs = np.ones((max_iter + 1, m))
    if max_iter > 0:
        steps = _sinkhorn(p, transposed, max_iter, tol, us, vs)
    u, v = us[max(steps - 1, 0)], vs[steps]
    x_r = np.empty(m)
    k_x = np.empty(m)
    for i in range(m):
        x_r[i] = v[i] * rv[i]
    _k_times(p, x_r, k_x, transposed)
    value = 0.0
    for i in range(m):
        value += u[i] * lv[i] * k_x[i]
    if scale == 0.0:
        return value
    left = np.empty((2 * steps + 1, m))
    right = np.empty((2 * steps + 1, m))
    if steps > 0:
        _adjoint(p, transposed, steps, us, vs, lv, rv, scale, left, right)
    else:
        for i in range(m):
            left[0, i] = scale * lv[i]
            right[0, i] = rv[i]
    gs = np.zeros(m)
    gb = np.empty(m)
    _softmax_backward(p, filled, left, right, 2 * steps + 1, transposed, tau, gs, gb)
    _abs_diff_sums_backward(order, last, gb, gs)
    out[:] = gs
    return value


@nb.njit(parallel=True, cache=True, nogil=True)
def _neural_kernel(s, gains, disc, offsets, tau, max_iter, tol, transposed, scale, values,
                   grad):  # pragma: no cover - compiled
    for q in nb.prange(offsets.shape[0] - 1):
        lo, hi = offsets[q], offsets[q + 1]
        values[q] = _neural_query(s[lo:hi], gains[lo:hi], disc[lo:hi], tau, max_iter, tol, transposed,
                                  scale[q], grad[lo:hi])
