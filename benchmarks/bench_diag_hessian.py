"""The exact diagonal Hessian (``hessian="diagonal"``): autograd's block size, and the closed forms
against autograd.

``smoothrank.boosting`` computes ``hessian="diagonal"`` of RankNet, LambdaRank and ListNet in closed
form (``rank_net_hessian_diagonal``, ``lambda_rank_hessian_diagonal``: O(n^2) a query;
``list_net_hessian_diagonal``: O(n)), and of the other twice-differentiable losses by autograd, one
backward pass per list position, ``block`` positions at a time in one vectorised pass, ``block =
budget // (queries x width^2)`` for each chunk of similar-length queries.

Part 1 times ``boosting_gradients(loss, hessian="diagonal")`` on MQ2008 Fold1's training split at
random N(0, 1) scores: the closed form (where the loss has one), and autograd at one position a pass
and at several budgets, interleaved over ``--reps`` repetitions (medians). Every way must give the
same Hessian.

Part 2 (``--lengths``) times one query of n documents (labels 0-4, N(0, 1) scores) for RankNet and
LambdaRank: the constant Hessian (the gradient alone), the closed-form diagonal and autograd's
diagonal, and checks the two diagonals agree.

    .venv/bin/python benchmarks/bench_diag_hessian.py --reps 3 --budgets 16,17,18,19,20
    .venv/bin/python benchmarks/bench_diag_hessian.py --reps 3 --budgets 18 --lengths 250,500,1000

Needs the test environment (``bash scripts/test``) for the MQ2008 reader's data path.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from _args import positive_int, set_threads

LOSSES = ("lambda_rank", "list_net", "list_mle", "approx_ndcg", "rank_net", "rmse")
PAIRWISE = ("rank_net", "lambda_rank")
CLOSED_FORM = (*PAIRWISE, "list_net")


def _lengths(text: str) -> list[int]:
    return [positive_int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--reps", type=positive_int, default=3)
    parser.add_argument("--budgets", default="16,17,18,19,20", help="comma-separated powers of two")
    parser.add_argument("--threads", type=positive_int, default=1)
    parser.add_argument("--lengths", type=_lengths, default=[],
                        help="comma-separated list lengths for part 2 (one query each); none: part 1 only")
    args = parser.parse_args()

    import numpy as np
    import torch

    from smoothrank import boosting

    set_threads(args.threads)  # as bench_boosting.py
    closed_form = boosting._closed_form_diagonal
    saved = boosting._DIAG_BLOCK, boosting._DIAG_PAIR_BUDGET

    def run(loss: str, scores: Any, labels: Any, sizes: Any, *, hessian: str = "diagonal",
            block: int = 0, budget: int = saved[1], autograd: bool = False) -> tuple[float, np.ndarray]:
        boosting._DIAG_BLOCK, boosting._DIAG_PAIR_BUDGET = block, budget
        boosting._closed_form_diagonal = (lambda fn: None) if autograd else closed_form
        torch.manual_seed(0)  # ListMLE's tie-breaks
        started = time.perf_counter()
        _, hess = boosting.boosting_gradients(loss, scores, labels, sizes, hessian=hessian)
        return time.perf_counter() - started, hess

    try:
        _part1(args, run)
        if args.lengths:
            _part2(args, run)
    finally:
        boosting._DIAG_BLOCK, boosting._DIAG_PAIR_BUDGET = saved
        boosting._closed_form_diagonal = closed_form


def _part1(args: argparse.Namespace, run: Callable[..., Any]) -> None:
    import numpy as np

    from smoothrank.datasets import load_mq2008

    train = load_mq2008(fold=1, split="train")
    labels = np.asarray(train.labels, dtype=np.float64)
    sizes = np.asarray(train.list_sizes)
    scores = np.random.default_rng(0).normal(size=labels.shape[0])
    configs = [("closed form", {}), ("1 position", {"block": 1, "autograd": True})]
    configs += [(f"2^{k}", {"budget": 1 << int(k), "autograd": True}) for k in args.budgets.split(",")]
    seconds: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.reps):
        for loss in LOSSES:
            reference = None
            for label, how in configs:
                if label == "closed form" and loss not in CLOSED_FORM:
                    continue
                took, hess = run(loss, scores, labels, sizes, **how)
                seconds.setdefault((loss, label), []).append(took)
                if reference is None:
                    reference = hess
                elif not np.allclose(hess, reference, rtol=1e-12, atol=1e-14):
                    raise SystemExit(f"{loss}: {label} gives a different Hessian")
    print(f"MQ2008 Fold1 train ({train.n_queries} queries), {args.threads} thread(s), median of {args.reps}; "
          "ms per boosting_gradients call; autograd at one position a pass and at block budgets")
    print("| loss | " + " | ".join(c[0] for c in configs) + " |")
    print("|---|" + "---|" * len(configs))
    for loss in LOSSES:
        cells = [f"{1000 * statistics.median(seconds[(loss, c[0])]):.0f}" if (loss, c[0]) in seconds else "-"
                 for c in configs]
        print(f"| {loss} | " + " | ".join(cells) + " |")


def _part2(args: argparse.Namespace, run: Callable[..., Any]) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    problems = {n: (rng.normal(size=n), rng.integers(0, 5, size=n).astype(float), np.array([n]))
                for n in args.lengths}
    ways = {"constant": {"hessian": "constant"}, "closed form": {}, "autograd": {"autograd": True}}
    seconds: dict[tuple[str, int, str], list[float]] = {}
    for _ in range(args.reps):
        for loss in PAIRWISE:
            for n, problem in problems.items():
                diagonals = {}
                for way, how in ways.items():
                    took, hess = run(loss, *problem, **how)
                    seconds.setdefault((loss, n, way), []).append(took)
                    diagonals[way] = hess
                if not np.allclose(diagonals["closed form"], diagonals["autograd"], rtol=1e-10, atol=1e-14):
                    raise SystemExit(f"{loss}, one list of {n}: the closed form differs from autograd's")
    print(f"\nOne query of n documents, {args.threads} thread(s), median of {args.reps}; "
          "seconds per boosting_gradients call")
    print("| loss | n | constant | diagonal, closed form | diagonal, autograd | autograd / closed form |")
    print("|---|---|---|---|---|---|")
    for loss in PAIRWISE:
        for n in problems:
            m = {way: statistics.median(seconds[(loss, n, way)]) for way in ways}
            print(f"| {loss} | {n} | {m['constant']:.3f} | {m['closed form']:.3f} | {m['autograd']:.3f} | "
                  f"{m['autograd'] / m['closed form']:.0f} |")


if __name__ == "__main__":
    main()
