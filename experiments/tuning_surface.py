"""How far validation's order of a grid of settings carries to the test split.

Reads an experiment's ``summary.csv`` and, for the methods whose label matches ``--methods`` (a
regular expression), prints a Markdown table of their mean validation and test metrics (ordered
by the validation metric, as the selection rule orders them) and Spearman's rank correlation of
mean validation and mean test ``--metric`` over those methods (``scipy.stats.spearmanr``).

    python experiments/tuning_surface.py runs/experiments/mq2008_boosted_trees/summary.csv \\
        --methods '^lightgbm-list_mle-curv(-l\\d+-m\\d+)?\\+ens5$'
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

REPORTED = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")
Means = dict[str, dict[tuple[str, str], float]]  # {method: {(split, metric): mean over folds}}


def read_means(path: Path, pattern: re.Pattern[str]) -> Means:
    """``{method: {(split, metric): mean over folds}}`` for the methods matching ``pattern``."""
    means: Means = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            if pattern.search(row["method"]):
                means.setdefault(row["method"], {})[(row["split"], row["metric"])] = float(row["mean"])
    return means


def surface_table(means: Means, metric: str) -> str:
    """Markdown table: method, validation ``metric``, then the test metrics; best validation first."""
    order = sorted(means, key=lambda m: -means[m][("valid", metric)])
    tested = [m for m in REPORTED if any(("test", m) in v for v in means.values())]
    lines = [f"| method | validation {metric} | " + " | ".join(f"test {m}" for m in tested) + " |",
             "|---|---" + "|---" * len(tested) + "|"]
    for method in order:
        cells = [f"{means[method][('test', m)]:.4f}" for m in tested]
        lines.append(f"| {method} | {means[method][('valid', metric)]:.4f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def validation_test_spearman(means: Means, metric: str) -> tuple[float, float]:
    """Spearman's rho (and its two-sided p-value) of mean validation against mean test ``metric``."""
    from scipy.stats import spearmanr

    methods = sorted(means)
    valid = [means[m][("valid", metric)] for m in methods]
    result = spearmanr(valid, [means[m][("test", metric)] for m in methods])
    return float(result.statistic), float(result.pvalue)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("summary", type=Path, help="an experiment's summary.csv")
    parser.add_argument("--methods", required=True, help="regular expression over method labels")
    parser.add_argument("--metric", default="ndcg@10", help="the selection metric (default ndcg@10)")
    args = parser.parse_args(argv)
    try:
        pattern = re.compile(args.methods)
    except re.error as exc:
        parser.error(f"--methods: {exc}")
    if not args.summary.is_file():
        parser.error(f"{args.summary}: no such file")
    means = read_means(args.summary, pattern)
    needed = {("valid", args.metric), ("test", args.metric)}
    incomplete = [m for m, v in means.items() if not needed <= v.keys()]
    if len(means) - len(incomplete) < 3:
        parser.error(f"{args.summary}: fewer than 3 methods match {args.methods!r} with validation and test "
                     f"{args.metric}")
    for method in incomplete:
        del means[method]
    print(surface_table(means, args.metric))
    rho, p = validation_test_spearman(means, args.metric)
    print(f"\nSpearman rho of validation and test {args.metric} over {len(means)} methods: "
          f"{rho:.3f} (p = {p:.3g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
