"""``exp`` and ``erfc`` of rows of float64 numbers, vectorised (Numba, CPU).

The compiled kernels' softmax rows and Gaussian densities take ``exp(z)`` of ``z <= 0`` by the
thousand; LLVM does not vectorise a loop that calls ``math.exp``, so this computes it in three
vectorised loops: ``k = round(-z / ln 2)``, ``r = z + k ln 2`` (Cody and Waite's two-part ``ln 2``,
``|r| <= ln 2 / 2``), the degree-13 Taylor polynomial of ``exp(r)``, times ``2^-k`` made from its
exponent bits (in two factors, so that each is a normal number and the product is rounded once).
At most one unit in the last place from the correctly rounded value (checked against ``math.exp``
in the tests); 0 below ``-745.5``, where ``exp`` is 0 in float64.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

__all__ = ["erfc_exp_nonnegative", "exp_nonpositive"]

_LN2_HI = 6.93147180369123816490e-01  # ln 2's leading bits: k * _LN2_HI is exact for k < 2^20
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.4426950408889634
_LOWEST = -745.5  # exp(z) rounds to 0 below this


@nb.njit(cache=True, nogil=True, fastmath={"contract", "nsz"})
def exp_nonpositive(z, out, scratch):  # pragma: no cover - compiled
    """``out[j] = exp(z[j])`` for ``z[j] <= 0``; ``scratch``: int64, at least ``2 len(z)`` values.
    ``out`` is another array than ``z`` (the loops vectorise only then)."""
    n = z.shape[0]
    k = scratch[:n]
    for j in range(n):
        x = max(z[j], _LOWEST)
        kf = math.floor(x * -_INV_LN2 + 0.5)
        r = (x + kf * _LN2_HI) + kf * _LN2_LO
        p = 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        p = p * r + 1.0
        out[j] = p if z[j] >= _LOWEST else 0.0
        k[j] = kf
    low = scratch[n:2 * n]
    for j in range(n):  # 2^-k = 2^-(k - k // 2) 2^-(k // 2), each factor's exponent bits
        half = k[j] >> 1
        low[j] = (1023 - (k[j] - half)) << 52
        k[j] = (1023 - half) << 52
    high_scale = k.view(np.float64)
    low_scale = low.view(np.float64)
    for j in range(n):
        out[j] = (out[j] * high_scale[j]) * low_scale[j]


_ERFCX_DEGREE = 6  # with Johnson's 100 pieces, within the fit's rounding of scipy's erfcx


def _erfcx_table() -> np.ndarray:
    """Chebyshev coefficients (degree ``_ERFCX_DEGREE``) of ``erfcx(x) = exp(x^2) erfc(x)`` on the
    intervals ``k <= 400 / (4 + x) < k + 1`` (``k = 12..99``, i.e. ``0 <= x <= 29``; S. G.
    Johnson's mapping in the Faddeeva package), fitted at 64 Chebyshev nodes to
    :func:`scipy.special.erfcx`."""
    from numpy.polynomial import chebyshev
    from scipy.special import erfcx

    table = np.zeros((100, _ERFCX_DEGREE + 1))
    nodes = np.cos(np.pi * (np.arange(64) + 0.5) / 64)
    for k in range(12, 100):
        table[k] = chebyshev.chebfit(nodes, erfcx(400.0 / ((nodes + 2 * k + 1) / 2) - 4.0), _ERFCX_DEGREE)
    return table


_ERFCX = _erfcx_table()
_ERFC_ZERO = 27.5  # erfc(x) is 0 in float64 beyond about 27.3


@nb.njit(cache=True, nogil=True, fastmath={"contract", "nsz"})
def erfc_exp_nonnegative(x, erfc_out, exp_out, work, scratch):  # pragma: no cover - compiled
    """``erfc_out[j] = erfc(x[j])`` and ``exp_out[j] = exp(-x[j]^2)`` for ``x[j] >= 0``, as
    ``exp(-x^2) erfcx(x)``; ``work``: float64, ``scratch``: int64, at least ``len(x)`` and
    ``2 len(x)`` values; the outputs other arrays than ``x``. Within about 3e-15 of ``math.erfc``
    relatively where ``erfc(x) >= 1e-300`` (the tests check it), 0 where it underflows, 1 at 0."""
    n = x.shape[0]
    for j in range(n):
        work[j] = -x[j] * x[j]
    exp_nonpositive(work[:n], exp_out, scratch)
    table = _ERFCX
    for j in range(n):
        y = 400.0 / (4.0 + min(x[j], _ERFC_ZERO))
        k = min(nb.int64(y), 99)
        t = 2.0 * y - (2 * k + 1)
        c = table[k]
        b1 = c[_ERFCX_DEGREE]  # Clenshaw's recurrence
        b2 = 0.0
        for i in range(_ERFCX_DEGREE - 1, 0, -1):
            b1, b2 = 2.0 * t * b1 - b2 + c[i], b1
        erfc_out[j] = (t * b1 - b2 + c[0]) * exp_out[j] if x[j] > 0 else 1.0  # tied scores: 1/2 exactly
