"""Published LETOR 4.0 baselines on MQ2008, for comparison with runs of this package.

Source: the official LETOR 4.0 baseline results (Qin & Liu, "Introducing LETOR 4.0 Datasets",
arXiv:1306.2597, 2013), test sets averaged over the 5 folds, scored with the official
``Eval-Score-4.0.pl`` (gain 2^label - 1; discount 1 at ranks 1 and 2 and 1/log2(r) after; NDCG@k
of a query with fewer than k documents counts as 0; a query with no relevant document has NDCG 0;
MAP of such a query is 0) -- ``convention="letor4"`` in :func:`smoothrank.metrics.evaluate`.
"""

from __future__ import annotations

from collections.abc import Sequence

from smoothrank.errors import SmoothrankError

SOURCE = ("LETOR 4.0 official baselines, MQ2008, 5-fold test average, Eval-Score-4.0.pl "
          "(Qin & Liu, arXiv:1306.2597, 2013)")
PER_FOLD_SOURCE = ("LETOR 4.0 official baselines, MQ2008, per-fold test sets, Eval-Score-4.0.pl "
                   "(Qin & Liu, arXiv:1306.2597, 2013)")
CONVENTION = "letor4"
COLUMNS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "p@1", "map")

MQ2008_BASELINES: dict[str, dict[str, float]] = {
    "RankSVM-Struct": {"ndcg@1": 0.3627, "ndcg@3": 0.4286, "ndcg@5": 0.4695, "ndcg@10": 0.2279,
                       "p@1": 0.4273, "map": 0.4696},
    "RankBoost": {"ndcg@1": 0.3856, "ndcg@3": 0.4288, "ndcg@5": 0.4666, "ndcg@10": 0.2255,
                  "p@1": 0.4579, "map": 0.4775},
    "AdaRank-NDCG": {"ndcg@1": 0.3826, "ndcg@3": 0.4420, "ndcg@5": 0.4821, "ndcg@10": 0.2307,
                     "p@1": 0.4515, "map": 0.4824},
    "AdaRank-MAP": {"ndcg@1": 0.3754, "ndcg@3": 0.4370, "ndcg@5": 0.4794, "ndcg@10": 0.2288,
                    "p@1": 0.4426, "map": 0.4764},
    "ListNet": {"ndcg@1": 0.3754, "ndcg@3": 0.4324, "ndcg@5": 0.4747, "ndcg@10": 0.2303,
                "p@1": 0.4451, "map": 0.4775},
}

PER_FOLD_COLUMNS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")
"""The metrics published per fold (P@1 is published only as the five-fold average)."""


def _fold_rows(*rows: tuple[float, float, float, float, float]) -> dict[int, dict[str, float]]:
    return {fold: dict(zip(PER_FOLD_COLUMNS, row, strict=True)) for fold, row in enumerate(rows, 1)}


MQ2008_BASELINES_PER_FOLD: dict[str, dict[int, dict[str, float]]] = {
    "RankSVM-Struct": _fold_rows((0.3611, 0.4088, 0.4469, 0.2117, 0.4502),
                                 (0.3036, 0.3761, 0.4224, 0.1738, 0.4213),
                                 (0.3461, 0.4082, 0.4452, 0.2494, 0.4529),
                                 (0.4161, 0.4909, 0.5290, 0.2892, 0.5284),
                                 (0.3864, 0.4589, 0.5042, 0.2155, 0.4950)),
    "RankBoost": _fold_rows((0.3846, 0.4328, 0.4709, 0.2176, 0.4666),
                            (0.3609, 0.3801, 0.4146, 0.1695, 0.4380),
                            (0.3694, 0.3710, 0.4161, 0.2340, 0.4472),
                            (0.4225, 0.5040, 0.5291, 0.2892, 0.5342),
                            (0.3907, 0.4560, 0.5025, 0.2170, 0.5016)),
    "AdaRank-NDCG": _fold_rows((0.3590, 0.4282, 0.4712, 0.2139, 0.4638),
                               (0.3312, 0.3836, 0.4200, 0.1751, 0.4353),
                               (0.3715, 0.4082, 0.4503, 0.2464, 0.4560),
                               (0.4437, 0.5005, 0.5374, 0.2943, 0.5366),
                               (0.4076, 0.4893, 0.5318, 0.2236, 0.5201)),
    "AdaRank-MAP": _fold_rows((0.3526, 0.4344, 0.4768, 0.2155, 0.4627),
                              (0.3248, 0.3807, 0.4152, 0.1712, 0.4232),
                              (0.3843, 0.4090, 0.4539, 0.2454, 0.4582),
                              (0.4076, 0.4764, 0.5192, 0.2868, 0.5180),
                              (0.4076, 0.4847, 0.5320, 0.2250, 0.5198)),
    "ListNet": _fold_rows((0.3483, 0.4215, 0.4565, 0.2108, 0.4504),
                          (0.3248, 0.3855, 0.4266, 0.1714, 0.4379),
                          (0.3652, 0.4031, 0.4519, 0.2557, 0.4523),
                          (0.4352, 0.4823, 0.5257, 0.2903, 0.5317),
                          (0.4034, 0.4696, 0.5128, 0.2234, 0.5150)),
}
"""The same baselines per fold's test set (LETOR 4.0's per-fold result rows; RankSVM-Struct's rows,
labelled by the chosen C, taken as Fold1..5 in order), for comparing a run of some folds with the
same folds' rows: the fold-to-fold spread (NDCG@1 from 0.30 to 0.44 for one method) is larger than
the differences between methods."""


def baselines_for_folds(folds: Sequence[int]) -> dict[str, dict[str, float]]:
    """The published rows of ``folds``: each metric's mean over those folds' test sets.

    P@1 (published only as a five-fold average) is included when ``folds`` are all five folds.

    Examples
    --------
    >>> round(baselines_for_folds([1])["ListNet"]["ndcg@10"], 4)
    0.2108
    >>> round(baselines_for_folds([1, 2, 3, 4, 5])["ListNet"]["ndcg@10"], 4)
    0.2303
    """
    chosen = sorted(set(folds))
    if not chosen or len(chosen) != len(folds) or any(fold not in range(1, 6) for fold in chosen):
        raise SmoothrankError(f"folds: expected distinct folds among 1..5, got {list(folds)}")
    rows: dict[str, dict[str, float]] = {}
    for name, per_fold in MQ2008_BASELINES_PER_FOLD.items():
        rows[name] = {m: sum(per_fold[f][m] for f in chosen) / len(chosen) for m in PER_FOLD_COLUMNS}
        if len(chosen) == 5:
            rows[name]["p@1"] = MQ2008_BASELINES[name]["p@1"]
    return rows
