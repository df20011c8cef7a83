"""Linear NDCG (Jin & Geng): the theorem dDCG^beta = R(f), ties, O(n log n) R(f) vs O(n^2)."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import torch

from smoothrank.metrics import dcg_beta, dcg_error, ndcg_beta, pairwise_error

F64 = torch.float64


def pairwise_ref(scores, labels):
    """R(f) by its definition (eq. 4): every pair, O(n^2)."""
    total = 0.0
    for i, j in itertools.permutations(range(len(scores)), 2):
        if labels[i] > labels[j] and scores[i] < scores[j]:
            total += labels[i] - labels[j]
    return total


def z_ref(labels):
    return sum(1 for i, j in itertools.combinations(range(len(labels)), 2) if labels[i] != labels[j])


def dcg_beta_ref(labels_in_order):
    n = len(labels_in_order)
    return sum(r * (n - i) for i, r in enumerate(labels_in_order, start=1))


@pytest.mark.parametrize("levels", [2, 3, 4, 5, 6])
def test_theorem_dcg_error_equals_pairwise_error(levels):
    rng = np.random.default_rng(levels)
    for _ in range(60):
        n = int(rng.integers(1, 25))
        labels = rng.integers(0, levels, n).astype(float)
        scores = rng.permutation(n).astype(float)  # tie-free
        order = np.argsort(-scores)
        ideal = dcg_beta_ref(sorted(labels, reverse=True))
        actual = dcg_beta_ref(labels[order])
        r = pairwise_ref(scores, labels)
        assert ideal - actual == r  # the theorem, by definitions only
        assert dcg_error(scores, labels, dtype=F64).item() == r
        assert pairwise_error(scores, labels, dtype=F64).item() == r
        assert dcg_beta(scores, labels, dtype=F64).item() == actual
        if ideal > 0:
            assert ndcg_beta(scores, labels, dtype=F64).item() == pytest.approx(actual / ideal, rel=1e-14)


def test_with_ties_r_is_the_optimistic_error():
    # Observed and asserted relation: R(f) ignores tied pairs (strict indicator), so
    #   dDCG(optimistic) = R(f) <= dDCG(input order) <= dDCG(pessimistic) = R(f) + T,
    # T = sum over tied-score pairs of |y_i - y_j|. The theorem holds exactly only without ties.
    rng = np.random.default_rng(7)
    strict_seen = False
    for _ in range(100):
        n = int(rng.integers(2, 15))
        labels = rng.integers(0, 4, n).astype(float)
        scores = rng.integers(0, 4, n).astype(float)  # many ties
        r = pairwise_ref(scores, labels)
        tied = sum(abs(labels[i] - labels[j]) for i, j in itertools.combinations(range(n), 2)
                   if scores[i] == scores[j])
        opt = dcg_error(scores, labels, ties="optimistic", dtype=F64).item()
        pes = dcg_error(scores, labels, ties="pessimistic", dtype=F64).item()
        inp = dcg_error(scores, labels, ties="input", dtype=F64).item()
        assert pairwise_error(scores, labels, dtype=F64).item() == r
        assert opt == r
        assert pes == r + tied
        assert opt <= inp <= pes
        strict_seen |= inp != r
    assert strict_seen  # ties do break the equality for the input order


def test_normalized_and_batched_with_padding():
    rng = np.random.default_rng(3)
    S = torch.tensor(rng.normal(size=(4, 10)))
    Y = torch.tensor(rng.integers(0, 3, (4, 10)).astype(float))
    M = torch.tensor(rng.random((4, 10)) > 0.3)
    Y[3] = 1.0  # all labels equal: Z = 0 -> skipped
    got = pairwise_error(S, Y, mask=M, normalize=True, reduction="none")
    for q in range(3):
        s, y = S[q][M[q]].tolist(), Y[q][M[q]].tolist()
        assert got[q].item() == pytest.approx(pairwise_ref(s, y) / z_ref(y), rel=1e-14)
    assert torch.isnan(got[3])
    unnorm = pairwise_error(S, Y, mask=M, reduction="none")
    assert unnorm[3].item() == 0.0


def test_real_valued_labels():
    rng = np.random.default_rng(5)
    s, y = rng.normal(size=30), rng.random(30) * 3
    assert pairwise_error(s, y, dtype=F64).item() == pytest.approx(pairwise_ref(s, y), rel=1e-12)


def test_pairwise_error_scales_n_log_n():
    # 20,000 items: the O(n^2) loop would take minutes; the Fenwick pass is linearithmic.
    rng = np.random.default_rng(0)
    n = 20_000
    s, y = rng.normal(size=n), rng.integers(0, 5, n).astype(float)
    start = time.perf_counter()
    got = pairwise_error(s, y, dtype=F64).item()
    elapsed = time.perf_counter() - start
    # The tie-free theorem gives an independent O(n log n) check of the value.
    assert got == dcg_error(s, y, dtype=F64).item()
    assert elapsed < 10.0
