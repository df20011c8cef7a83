"""The vectorised exp and erfc of the compiled kernels (smoothrank._exp_numba) against math's."""

from __future__ import annotations

import math

import numpy as np

from smoothrank._exp_numba import erfc_exp_nonnegative, exp_nonpositive


def test_vectorised_exp_is_within_one_ulp_of_math_exp() -> None:
    # The softmax rows' exp: every regime of z <= 0 (near 0, the range of the reduction's k, the
    # subnormal results, the underflow to 0, -inf), against math.exp.
    rng = np.random.default_rng(0)
    z = np.concatenate([-rng.exponential(30.0, 20000), -rng.uniform(0, 1e-6, 500),
                        -rng.uniform(700, 760, 2000),
                        [0.0, -0.0, -1e-300, -np.log(2.0), -708.4, -744.4, -745.1, -745.2, -746.0, -1e5,
                         -np.inf]])
    out = np.full_like(z, np.nan)
    exp_nonpositive(z, out, np.empty(2 * z.size, dtype=np.int64))
    ref = np.array([math.exp(v) for v in z])
    normal = ref >= np.finfo(np.float64).tiny
    ulp = np.spacing(ref[normal])
    assert (np.abs(out - ref)[normal] <= ulp).all()
    step = np.finfo(np.float64).smallest_subnormal  # the spacing of the subnormal results
    assert (np.abs(out - ref)[~normal] <= step).all()
    assert (out[ref == 0] == 0).all() and (out[ref > 0] > 0).all()
    assert out[z == 0].tolist() == [1.0, 1.0] and out[-1] == 0.0


def test_vectorised_erfc_is_close_to_math_erfc() -> None:
    # SoftRank's contests: erfc(x) and exp(-x^2) for x >= 0, from 0 to past erfc's underflow.
    rng = np.random.default_rng(1)
    x = np.concatenate([np.abs(rng.normal(0, 1.5, 20000)), np.linspace(0, 30, 6001),
                        rng.uniform(0, 1e-8, 200), [0.0, 1e-300, 26.0, 27.2, 27.3, 27.5, 1e5, np.inf]])
    erfc, dens = np.full_like(x, np.nan), np.full_like(x, np.nan)
    erfc_exp_nonnegative(x, erfc, dens, np.empty_like(x), np.empty(2 * x.size, dtype=np.int64))
    ref = np.array([math.erfc(v) for v in x])
    ref_dens = np.array([math.exp(-v * v) for v in x])
    assert np.isfinite(erfc).all() and (erfc >= 0).all() and (erfc[x == 0] == 1.0).all()
    for limit, bound in ((3.0, 3e-15), (6.0, 6e-15), (26.0, 1e-13)):
        near = (x <= limit) & (ref >= 1e-300)
        assert (np.abs(erfc - ref)[near] <= bound * ref[near]).all(), limit
    assert (np.abs(erfc - ref)[ref < 1e-300] <= 1e-300).all()
    normal = ref_dens >= np.finfo(np.float64).tiny
    assert (np.abs(dens - ref_dens)[normal] <= np.spacing(ref_dens[normal])).all()
