"""Run by run, do two output folders of one experiment hold the same results?

A reproducibility check: the same spec run on two machines, at two thread counts (`num_threads`),
or with two library versions. Runs are matched by (dataset, fold, method, seed); for each pair it
prints the selected epoch (neural) or number of trees (GBDT) on each side and the largest absolute
difference of the per-query test values over every stored metric. Exit status 0 when every run
has its partner and every pair is identical (same selection, equal per-query test values), 1
otherwise, and 2 when there is nothing to compare (a folder that is not an output folder, a
damaged result file, no finished run on either side), so that a script can tell a broken folder
from a real difference.

    python experiments/run_diff.py OUT_A OUT_B [--ensembles]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from smoothrank.errors import SmoothrankError
from smoothrank.experiments import load_results

Key = tuple[str, Any, str, Any]  # (dataset, fold, method, seed)


def index_runs(results: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    """``{(dataset, fold, method, seed): result}``."""
    return {(r["dataset"], r["fold"], r["method"], r["seed"]): r for r in results}


def selected(result: dict[str, Any]) -> Any:
    """The epoch or iteration that model selection kept (None: an ensemble or blend)."""
    selection = result.get("selection") or {}
    return selection.get("best_epoch", selection.get("best_iteration"))


def query_differences(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, int]:
    """(largest |a - b| over the per-query test values of every metric both runs stored, number of
    queries where any of them differs); (inf, all) when the runs' test queries differ."""
    qa, qb = a["per_query"], b["per_query"]
    if list(qa.get("qids", [])) != list(qb.get("qids", [])):
        return float("inf"), max(len(qa.get("qids", [])), len(qb.get("qids", [])))
    metrics = sorted((set(qa) & set(qb)) - {"qids"})
    if not metrics:
        return 0.0, 0
    values_a, values_b = (np.array([q[m] for m in metrics], dtype=float) for q in (qa, qb))
    gaps = np.abs(values_a - values_b)
    return float(gaps.max(initial=0.0)), int((gaps > 0).any(axis=0).sum())


def diff_table(runs_a: dict[Key, dict[str, Any]], runs_b: dict[Key, dict[str, Any]]) -> tuple[str, int, int]:
    """Markdown table of every run of either side; returns (table, identical pairs, all rows)."""
    lines = ["| dataset | fold | method | seed | selected (A / B) | largest per-query test difference "
             "| queries differing | same |", "|---|---|---|---|---|---|---|---|"]
    same = 0
    keys = sorted(set(runs_a) | set(runs_b), key=lambda k: tuple(str(part) for part in k))
    for key in keys:
        a, b = runs_a.get(key), runs_b.get(key)
        # A file dataset has no fold; an ensemble or blend has no seed and no selection of its own.
        key = tuple("-" if part is None else part for part in key)
        if a is None or b is None:
            side = "A" if b is None else "B"
            lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | only in {side} | - | - | no |")
            continue
        gap, queries = query_differences(a, b)
        equal = gap == 0.0 and selected(a) == selected(b)
        same += equal
        n_queries = len(a["per_query"].get("qids", []))
        picks = " / ".join("-" if selected(r) is None else str(selected(r)) for r in (a, b))
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {picks} | "
                     f"{gap:.3g} | {queries} of {n_queries} | {'yes' if equal else 'no'} |")
    return "\n".join(lines), same, len(keys)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_a", type=Path, help="an experiment's --out folder")
    parser.add_argument("out_b", type=Path, help="the same experiment's folder from the other setting")
    parser.add_argument("--ensembles", action="store_true", help="also compare the seed ensembles and blends")
    args = parser.parse_args(argv)
    for out in (args.out_a, args.out_b):
        if not (out / "runs").is_dir():
            parser.error(f"{out}: no runs/ folder (not an output folder of `smoothrank experiment`)")
    try:
        runs_a = index_runs(load_results(args.out_a, ensembles=args.ensembles))
        runs_b = index_runs(load_results(args.out_b, ensembles=args.ensembles))
    except SmoothrankError as err:  # a damaged result.json, named by the reader
        parser.error(str(err))
    if not runs_a and not runs_b:
        parser.error(f"no finished run in {args.out_a} or {args.out_b}: nothing to compare")
    table, same, total = diff_table(runs_a, runs_b)
    print(table)
    print(f"\n{same} of {total} run(s) identical (same selection, equal per-query test values)")
    return 0 if same == total else 1


if __name__ == "__main__":
    sys.exit(main())
