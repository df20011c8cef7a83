"""Linear NDCG (Jin & Geng): the theorem dDCG^beta = R(f), ties, R(f) against pair-by-pair references."""

from __future__ import annotations

import itertools
import math

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


def pairwise_fenwick(scores: np.ndarray, labels: np.ndarray) -> float:
    """R(f) of one query in O(n log n), pair by pair (the reference for long lists).

    Items are visited by descending score, one group of equal scores at a time; a Fenwick tree
    indexed by label rank holds the count and the label sum of the items already visited (all
    with a strictly higher score). Each item i then adds ``sum_{j above, y_j < y_i} (y_i - y_j)``
    = ``y_i * count_below - sum_below``. Tied items are inserted only after their whole group is
    queried, so no tied pair is counted (the indicator in eq. 4 is strict).
    """
    n = scores.shape[0]
    levels, rank = np.unique(labels, return_inverse=True)
    m = levels.shape[0]
    count = [0] * (m + 1)
    total = [0.0] * (m + 1)
    order = np.argsort(-scores, kind="stable")
    s_sorted = scores[order]
    out = 0.0
    start = 0
    while start < n:
        stop = start
        while stop < n and s_sorted[stop] == s_sorted[start]:
            stop += 1
        group = order[start:stop]
        for i in group:
            pos, cnt, acc = int(rank[i]), 0, 0.0  # prefix over label ranks < rank[i]
            while pos > 0:
                cnt += count[pos]
                acc += total[pos]
                pos -= pos & -pos
            out += float(labels[i]) * cnt - acc
        for i in group:
            pos = int(rank[i]) + 1
            while pos <= m:
                count[pos] += 1
                total[pos] += float(labels[i])
                pos += pos & -pos
        start = stop
    return out


def _pair_count(labels: np.ndarray) -> float:
    """Z = number of pairs with different labels = (n^2 - sum_a |S_a|^2) / 2."""
    _, counts = np.unique(labels, return_counts=True)
    n = labels.shape[0]
    return float(n * n - int((counts.astype(np.int64) ** 2).sum())) / 2.0


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


def test_dcg_beta_and_ndcg_beta_ignore_padding_anywhere():
    # |S| of the linear discount is the number of real items: padding (here in the middle and at
    # the end) must not lengthen the list (a mutation review found only pairwise_error tested so).
    s, y = [3.0, 2.0, 1.0], [0.0, 2.0, 1.0]
    S = torch.tensor([[3.0, 9.0, 2.0, 1.0, 0.0]], dtype=F64)
    Y = torch.tensor([[0.0, 5.0, 2.0, 1.0, 0.0]], dtype=F64)
    M = torch.tensor([[True, False, True, True, False]])
    # By hand, |S| = 3: the ranking puts labels 0, 2, 1 at ranks 1..3, weights 2, 1, 0.
    assert dcg_beta(s, y).item() == 2.0
    assert dcg_beta(S, Y, mask=M).item() == 2.0
    assert ndcg_beta(S, Y, mask=M).item() == pytest.approx(ndcg_beta(s, y).item(), abs=1e-15)
    assert ndcg_beta(s, y).item() == pytest.approx(2.0 / 5.0)  # ideal: 2*2 + 1*1


def test_real_valued_labels():
    rng = np.random.default_rng(5)
    s, y = rng.normal(size=30), rng.random(30) * 3
    assert pairwise_error(s, y, dtype=F64).item() == pytest.approx(pairwise_ref(s, y), rel=1e-12)


def test_long_lists_against_a_fenwick_reference():
    # 20,000 items (the O(n^2) loop would take minutes): a pair-by-pair O(n log n) reference, with
    # many tied scores, in float32 input (R(f) is accumulated in float64 whatever the input dtype).
    rng = np.random.default_rng(0)
    n = 20_000
    s, y = rng.integers(0, 3000, n).astype(np.float32), rng.integers(0, 5, n).astype(np.float32)
    want = pairwise_fenwick(s.astype(float), y.astype(float))
    got = pairwise_error(torch.from_numpy(s), torch.from_numpy(y))
    assert got.dtype == torch.float32 and got.item() == pytest.approx(want, rel=1e-7)
    assert pairwise_error(s, y, dtype=F64).item() == want  # exact for integer labels
    _, counts = np.unique(y, return_counts=True)
    z = (n * n - int((counts.astype(np.int64) ** 2).sum())) / 2
    assert pairwise_error(s, y, normalize=True, dtype=F64).item() == pytest.approx(want / z, rel=1e-15)


def test_batched_padded_queries_against_the_references():
    rng = np.random.default_rng(11)
    S = rng.integers(0, 6, (6, 40)).astype(float)  # ties
    Y = rng.integers(0, 4, (6, 40)).astype(float)
    M = rng.random((6, 40)) > 0.25
    M[4] = False
    M[4, 0] = True  # one real item: R = 0, Z = 0
    M[5] = False  # no real item
    got = pairwise_error(S, Y, mask=M, reduction="none", dtype=F64)
    norm = pairwise_error(S, Y, mask=M, normalize=True, reduction="none", dtype=F64)
    for q in range(6):
        s, y = S[q][M[q]], Y[q][M[q]]
        r = pairwise_ref(s.tolist(), y.tolist())
        assert got[q].item() == r == pairwise_fenwick(s, y)
        z = z_ref(y.tolist())
        assert (math.isnan(norm[q].item()) if z == 0 else norm[q].item() == pytest.approx(r / z, rel=1e-15))
    assert got[4].item() == 0.0 and got[5].item() == 0.0


def test_float64_sums_run_on_the_cpu_for_a_device_without_float64():
    from smoothrank.metrics.linear import _float64_device

    assert _float64_device(torch.device("mps")) == torch.device("cpu")  # MPS has no float64
    assert _float64_device(torch.device("cpu")) == torch.device("cpu")
    assert _float64_device(torch.device("cuda", 1)) == torch.device("cuda", 1)


def test_dcg_error_of_float32_inputs_is_summed_in_float64():
    # DCG^beta_ideal - DCG^beta of a near-ideal ranking cancels two sums of order n^2 * max label:
    # in float32 (the default for float32 inputs) 20,000 items with one misordered adjacent pair
    # gave 64 (and 100,000 gave -1024) for the theorem's R(f) = 1, while pairwise_error, summed in
    # float64, gave 1. Two labels of 3e38 overflowed the float32 sums: inf - inf = NaN.
    rng = np.random.default_rng(0)
    n = 20_000
    y = np.sort(rng.integers(0, 5, n).astype(np.float32))[::-1].copy()
    i = int(np.where(np.diff(y) < 0)[0][-1])
    y[i], y[i + 1] = y[i + 1], y[i]  # one misordered pair, label difference 1
    s = -np.arange(n, dtype=np.float32)  # tie-free, ranks in input order
    got = dcg_error(torch.from_numpy(s), torch.from_numpy(y))
    assert got.dtype == torch.float32
    assert got.item() == pairwise_error(s, y).item() == dcg_error(s, y, dtype=F64).item() == 1.0
    big = dcg_error(np.float32([3.0, 2.0, 1.0]), np.float32([3e38, 3e38, 0.0]), reduction="none")
    assert big.item() == 0.0  # the ideal order: no error, not NaN
