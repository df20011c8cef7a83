"""``smoothrank compare``: paired t-test between two methods of a finished experiment.

Reads ``OUT/runs/*/result.json`` (and seed ensembles) and prints, per metric, both methods' mean
test value over their common queries, the mean difference, t and the two-sided p-value.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from smoothrank.cli import CLIError


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compare", help="paired t-test between two methods of an experiment output folder",
        description="Paired per-query t-test (test split, all folds pooled) between two methods.")
    parser.add_argument("out", help="the --out folder of `smoothrank experiment`")
    parser.add_argument("method_a", help="method label, e.g. neural_ndcg-car")
    parser.add_argument("method_b", help="method label, e.g. approx_ndcg-car")
    parser.add_argument("--metrics", default="ndcg@1,ndcg@3,ndcg@5,ndcg@10,map",
                        help="comma-separated metrics stored by the experiment")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--format", default="table", choices=("table", "json"))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from smoothrank.experiments import load_results
    from smoothrank.experiments.report import compare_methods

    out = Path(args.out)
    if not (out / "runs").is_dir():
        raise CLIError(f"{out}: not an experiment output folder (no runs/ inside)")
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    tests = compare_methods(load_results(out, ensembles=True), args.method_a, args.method_b, metrics=metrics)
    if args.format == "json":
        print(json.dumps({m: {"mean_difference": t.mean_difference, "t": t.statistic, "p_value": t.pvalue,
                              "n_queries": t.n} for m, t in tests.items()}, indent=2))
        return 0
    print(f"{args.method_a} - {args.method_b}, paired t-test over test queries (two-sided)")
    print("| metric | mean difference | t | p | queries | significant |")
    print("|---|---|---|---|---|---|")
    for metric, t in tests.items():
        verdict = "yes" if t.significant(args.alpha) else "no"
        print(f"| {metric} | {t.mean_difference:+.4f} | {t.statistic:.2f} | {t.pvalue:.3g} | {t.n} "
              f"| {verdict} |")
    return 0
