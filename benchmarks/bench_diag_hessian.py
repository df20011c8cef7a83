"""How many list positions should share one backward pass of the exact diagonal Hessian?

``smoothrank.boosting`` computes ``hessian="diagonal"`` with one backward pass per list position,
``block`` positions at a time in one vectorised pass, ``block = budget // (queries x width^2)`` for
each chunk of similar-length queries. This times ``boosting_gradients(loss, hessian="diagonal")``
on MQ2008 Fold1's training split at random N(0, 1) scores for one position a pass and for several
budgets, interleaved over ``--reps`` repetitions (medians), and checks every budget gives the same
Hessian as one position a pass.

    .venv/bin/python benchmarks/bench_diag_hessian.py --reps 3 --budgets 16,17,18,19,20

Needs the test environment (``bash scripts/test``) for the MQ2008 reader's data path.
"""

from __future__ import annotations

import argparse
import statistics
import time

LOSSES = ("lambda_rank", "list_net", "list_mle", "approx_ndcg", "rank_net", "rmse")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--budgets", default="16,17,18,19,20", help="comma-separated powers of two")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import numpy as np
    import torch

    from smoothrank import boosting
    from smoothrank.datasets import load_mq2008

    torch.set_num_threads(args.threads)
    train = load_mq2008(fold=1, split="train")
    labels = np.asarray(train.labels, dtype=np.float64)
    sizes = np.asarray(train.list_sizes)
    scores = np.random.default_rng(0).normal(size=labels.shape[0])
    configs = [("1 position", 1, boosting._DIAG_PAIR_BUDGET)]
    configs += [(f"2^{k}", 0, 1 << int(k)) for k in args.budgets.split(",")]
    seconds: dict[tuple[str, str], list[float]] = {(loss, c[0]): [] for loss in LOSSES for c in configs}
    saved = boosting._DIAG_BLOCK, boosting._DIAG_PAIR_BUDGET
    try:
        for _ in range(args.reps):
            for loss in LOSSES:
                reference = None
                for label, block, budget in configs:
                    boosting._DIAG_BLOCK, boosting._DIAG_PAIR_BUDGET = block, budget
                    torch.manual_seed(0)  # ListMLE's tie-breaks
                    started = time.perf_counter()
                    _, hess = boosting.boosting_gradients(loss, scores, labels, sizes, hessian="diagonal")
                    seconds[(loss, label)].append(time.perf_counter() - started)
                    if reference is None:
                        reference = hess
                    elif not np.allclose(hess, reference, rtol=1e-12, atol=1e-14):
                        raise SystemExit(f"{loss}: budget {label} gives a different Hessian")
    finally:
        boosting._DIAG_BLOCK, boosting._DIAG_PAIR_BUDGET = saved
    print(f"MQ2008 Fold1 train ({train.n_queries} queries), {args.threads} thread(s), median of {args.reps}; "
          "ms per boosting_gradients call")
    print("| loss | " + " | ".join(c[0] for c in configs) + " |")
    print("|---|" + "---|" * len(configs))
    for loss in LOSSES:
        cells = [f"{1000 * statistics.median(seconds[(loss, c[0])]):.0f}" for c in configs]
        print(f"| {loss} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
