"""Cost of boosting a smoothrank loss (smoothrank.boosting) against LightGBM's built-in lambdarank.

On MQ2008 Fold1's training split (471 queries, 9,630 documents, lists of 5-121), or with
``--data synthetic`` on MSLR-like synthetic data (``--queries`` queries of ``--docs`` documents on
average, uniform in [docs/2, 3 docs/2], ``--features`` standard normal features, labels 0-4 from a
noisy linear model, about two thirds 0), per boosting round, in one process with ``--threads``
threads for PyTorch, Numba (the compiled kernels) and LightGBM:

* ``gradients``: ``boosting_gradients`` at random scores, the mean of ``--calls`` calls (the
  objective alone);
* ``round``: ``lightgbm.train`` for ``--rounds-per-fit`` rounds (31 leaves, learning rate 0.05, as
  in experiments/mq2008_boosting.yaml) divided by the rounds, i.e. objective + tree;
* the ratio of ``round`` to the built-in lambdarank's, measured in the same repetition.

Cases are interleaved over ``--reps`` repetitions and the table reports medians and, in
brackets, the range over the repetitions. A case ending in ``-torch`` runs the loss's PyTorch
path (``smoothrank.boosting._FLAT_KERNELS = False``) where the other runs the compiled kernels
of ``smoothrank.boosting_kernels``.

    .venv/bin/python benchmarks/bench_boosting.py                     # every loss, 3 repetitions
    .venv/bin/python benchmarks/bench_boosting.py --cases neural_ndcg,lambda_rank-diag --reps 5
    .venv/bin/python benchmarks/bench_boosting.py --data synthetic --threads 2 --rounds-per-fit 5 \
        --cases lambda_rank,lambda_rank-diag,list_net,neural_ndcg,soft_ndcg

Needs the test environment (``bash scripts/test`` installs LightGBM).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

from _args import positive_int, set_threads

CASES = {  # label -> (loss or None for LightGBM's lambdarank, hessian, options)
    "lightgbm lambdarank (built in)": (None, None, {}),
    "neural_ndcg": ("neural_ndcg", "constant", {}),
    "neural_ndcg@5": ("neural_ndcg", "constant", {"k": 5}),
    "neural_ndcg_transposed": ("neural_ndcg_transposed", "constant", {}),
    "soft_ndcg": ("soft_ndcg", "constant", {}),
    "soft_ndcg@10": ("soft_ndcg", "constant", {"k": 10}),
    "approx_ndcg": ("approx_ndcg", "constant", {}),
    "list_net": ("list_net", "constant", {}),
    "list_mle": ("list_mle", "constant", {}),
    "rank_net": ("rank_net", "constant", {}),
    "lambda_rank": ("lambda_rank", "constant", {}),
    "rmse": ("rmse", "constant", {"n_levels": 3}),
    "neural_ndcg-curv": ("neural_ndcg", "curvature", {}),
    "soft_ndcg-curv": ("soft_ndcg", "curvature", {}),
    "approx_ndcg-curv": ("approx_ndcg", "curvature", {}),
    "list_net-curv": ("list_net", "curvature", {}),
    "lambda_rank-curv": ("lambda_rank", "curvature", {}),
}
# the losses' PyTorch path, where the compiled kernels cover them
CASES.update({f"{label}-torch": CASES[label] for label in ("lambda_rank", "list_net", "neural_ndcg",
                                                            "neural_ndcg_transposed", "soft_ndcg",
                                                            "soft_ndcg@10", "soft_ndcg-curv")})
CASES["lambda_rank-diag-torch"] = ("lambda_rank", "diagonal", {})
_TWICE_DIFFERENTIABLE = {"lambda_rank": {}, "list_net": {}, "list_mle": {}, "approx_ndcg": {}, "rank_net": {},
                         "rmse": {"n_levels": 3}}
CASES.update({f"{loss}-diag": (loss, "diagonal", o) for loss, o in _TWICE_DIFFERENTIABLE.items()})
# the diagonal with one list position per backward pass (smoothrank before 2026-11-24)
CASES.update({f"{loss}-diag-1pos": (loss, "diagonal", o) for loss, o in _TWICE_DIFFERENTIABLE.items()})
# the closed-form losses' diagonal by autograd, positions batched (before their closed forms, 2026-11-25)
_CLOSED_FORM = ("rank_net", "lambda_rank", "list_net")
CASES.update({f"{loss}-diag-autograd": (loss, "diagonal", {}) for loss in _CLOSED_FORM})
BUILTIN = "lightgbm lambdarank (built in)"
TREES = {"learning_rate": 0.05, "num_leaves": 31, "min_data_in_leaf": 20, "verbosity": -1,
         "deterministic": True, "seed": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case labels")
    parser.add_argument("--reps", type=positive_int, default=3)
    parser.add_argument("--rounds-per-fit", type=positive_int, default=20)
    parser.add_argument("--calls", type=positive_int, default=5,
                        help="gradient calls averaged per repetition")
    parser.add_argument("--threads", type=positive_int, default=1)
    parser.add_argument("--out", help="also write the medians as JSON here")
    parser.add_argument("--data", choices=("mq2008", "synthetic"), default="mq2008")
    parser.add_argument("--queries", type=positive_int, default=2000, help="synthetic queries")
    parser.add_argument("--docs", type=positive_int, default=100, help="synthetic documents a query, mean")
    parser.add_argument("--features", type=positive_int, default=136, help="synthetic features")
    args = parser.parse_args()
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {list(CASES)}")
    if BUILTIN not in cases:
        cases.insert(0, BUILTIN)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    import lightgbm as lgb
    import numpy as np

    from smoothrank import boosting
    from smoothrank.boosting import boosting_gradients, lightgbm_objective
    from smoothrank.datasets import load_mq2008

    set_threads(args.threads)  # Numba's too: the compiled kernels
    if args.data == "synthetic":
        features, labels, sizes = synthetic(args.queries, args.docs, args.features)
        title = f"synthetic ({sizes.size} queries, {labels.size} documents, {args.features} features)"
    else:
        train = load_mq2008(fold=1, split="train")
        features, labels = np.asarray(train.features), np.asarray(train.labels, dtype=np.float64)
        sizes = np.asarray(train.list_sizes)
        title = f"MQ2008 Fold1 train ({train.n_queries} queries, {train.n_docs} documents)"
    scores = np.random.default_rng(0).normal(size=labels.shape[0])
    params = {**TREES, "num_threads": args.threads}

    def fit_seconds(objective: object) -> float:
        data = lgb.Dataset(features, label=labels, group=sizes, params=params).construct()  # binning: untimed
        started = time.perf_counter()
        lgb.train({**params, "objective": objective}, data, num_boost_round=args.rounds_per_fit)
        return (time.perf_counter() - started) / args.rounds_per_fit

    closed_form = boosting._closed_form_diagonal

    def generic(fn: object) -> None:
        return None

    timings: dict[str, dict[str, list[float]]] = {c: {"gradients": [], "round": [], "ratio": []}
                                                  for c in cases}
    for _ in range(args.reps):
        builtin = fit_seconds("lambdarank")
        timings[BUILTIN]["round"].append(builtin)
        timings[BUILTIN]["ratio"].append(1.0)
        for case in cases:
            loss, hessian, options = CASES[case]
            if loss is None:
                continue
            boosting._DIAG_BLOCK = 1 if case.endswith("-1pos") else 0
            boosting._FLAT_KERNELS = not case.endswith("-torch")
            # -1pos and -autograd: autograd's diagonal even where the loss has a closed form
            boosting._closed_form_diagonal = generic if case.endswith(("-1pos", "-autograd")) else closed_form
            boosting_gradients(loss, scores, labels, sizes, hessian=hessian, **options)  # warm-up
            started = time.perf_counter()
            for _ in range(args.calls):
                boosting_gradients(loss, scores, labels, sizes, hessian=hessian, **options)
            timings[case]["gradients"].append((time.perf_counter() - started) / args.calls)
            per_round = fit_seconds(lightgbm_objective(loss, hessian=hessian, **options))
            timings[case]["round"].append(per_round)
            timings[case]["ratio"].append(per_round / builtin)

    medians = {c: {k: statistics.median(v) if v else None for k, v in t.items()} for c, t in timings.items()}
    print(f"{title}, {args.threads} thread(s), median [range] of {args.reps}, "
          f"{args.rounds_per_fit} rounds a fit")
    print("| objective | hessian | gradients (ms) | boosting round (ms) | x built-in lambdarank |")
    print("|---|---|---|---|---|")

    def shown(values: list[float], scale: float, digits: int) -> str:
        if not values:
            return "-"
        text = f"{scale * statistics.median(values):.{digits}f}"
        low, high = scale * min(values), scale * max(values)
        return text if len(values) < 2 else f"{text} [{low:.{digits}f}-{high:.{digits}f}]"

    for case in cases:
        t, hessian = timings[case], CASES[case][1] or "LambdaMART's"
        print(f"| {case} | {hessian} | {shown(t['gradients'], 1000, 1)} | {shown(t['round'], 1000, 1)} | "
              f"{shown(t['ratio'], 1, 2)} |")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"threads": args.threads, "reps": args.reps, "medians": medians}, fh, indent=2)


def synthetic(n_queries: int, mean_docs: int, n_features: int, seed: int = 0) -> tuple[Any, Any, Any]:
    """MSLR-like data: ``(features (n, f) float32, labels (n,) float64 in 0-4, query sizes)``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    sizes = rng.integers(max(1, mean_docs // 2), mean_docs + mean_docs // 2 + 1, n_queries)
    features = rng.normal(size=(int(sizes.sum()), n_features)).astype(np.float32)
    signal = features @ rng.normal(size=n_features) / np.sqrt(n_features)
    relevance = signal + rng.normal(size=features.shape[0])
    labels = np.clip(np.floor(relevance - 0.4), 0, 4).astype(np.float64)
    return features, labels, sizes


if __name__ == "__main__":
    main()
