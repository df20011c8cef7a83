"""``smoothrank compare``: paired t-test between two methods of a finished experiment.

Reads ``OUT/runs/*/result.json`` (and seed ensembles and blends) and prints, per metric, the mean
difference over the two methods' common test queries, t, the two-sided p-value, the ``1 - alpha``
confidence interval of the difference (Student's t over the paired differences), and the metric
convention (letor4, lightgbm, trec) the runs were scored under (header line; a ``convention``
key in each metric's JSON object). With
``--b-out OUT_B`` the second method comes from another experiment on the same data (e.g. a linear
scorer of one grid against an MLP of another): queries are paired on (dataset, fold, query id), and the two
experiments must share the dataset names and the metric convention. Several datasets are pooled into
one test (named in the output) unless ``--dataset`` picks one.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from smoothrank.cli import CLIError

PLAN_FILE = "plan.json"  # = smoothrank.experiments.runner.PLAN_FILE (not imported: CLI start-up)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compare", help="paired t-test between two methods of an experiment output folder",
        description="Paired per-query t-test (test split, all folds pooled) between two methods.")
    parser.add_argument("out", help="the --out folder of `smoothrank experiment`")
    parser.add_argument("method_a", help="method label, e.g. neural_ndcg-car")
    parser.add_argument("method_b", help="method label, e.g. approx_ndcg-car")
    parser.add_argument("--b-out", default=None,
                        help="read method_b from this other experiment output folder (same data)")
    parser.add_argument("--metrics", default=None,
                        help="comma-separated metrics stored by the experiment (default: every one stored)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level, in (0, 1)")
    parser.add_argument("--format", default="table", choices=("table", "json"))
    parser.add_argument("--dataset", default=None,
                        help="test on this dataset of the experiment only, as the summary does (default: "
                             "every dataset both methods ran on, pooled, named in the output)")
    parser.add_argument("--all-runs", action="store_true",
                        help="use every run in the folder, also those of earlier specs written into it "
                             "(default: the runs of the last experiment, as its summary)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from smoothrank._atomic import strict_json
    from smoothrank.experiments.report import compare_methods, compared_datasets, on_dataset

    if not 0.0 < args.alpha < 1.0:  # also refuses nan
        raise CLIError(f"--alpha: expected a number between 0 and 1 (exclusive), got {args.alpha}")
    results, left_out = _results(Path(args.out), all_runs=args.all_runs)
    _check_present(results, left_out, args.method_a, "method_a", args.out)
    if args.b_out is None:
        _check_present(results, left_out, args.method_b, "method_b", args.out)
    method_b = args.method_b
    if args.b_out is not None:
        if not any(r["method"] == args.method_a for r in results):
            raise CLIError(f"method_a: no finished run of {args.method_a!r} in {args.out}; methods: "
                           f"{sorted({r['method'] for r in results})}")
        results_b, left_out_b = _results(Path(args.b_out), all_runs=args.all_runs)
        _check_present(results_b, left_out_b, args.method_b, "method_b", args.b_out)
        method_b = f"{args.method_b} ({args.b_out})"
        results = [r for r in results if r["method"] == args.method_a] + \
                  [{**r, "method": method_b} for r in results_b if r["method"] == args.method_b]
        if not any(r["method"] == method_b for r in results):
            raise CLIError(f"method_b: no finished run of {args.method_b!r} in {args.b_out}; methods: "
                           f"{sorted({r['method'] for r in results_b})}")
    if args.dataset is not None:  # first: --b-out's experiments need to share this dataset only
        results = on_dataset(results, args.method_a, method_b, args.dataset, argument="--dataset")
    # One folder may hold runs of several specs (other methods, other conventions): pair only the same.
    _check_same_data(results, args.method_a, method_b, "--b-out" if args.b_out is not None else "compare")
    metrics = _metrics(args.metrics, results, args.method_a, method_b)
    tests = compare_methods(results, args.method_a, method_b, metrics=metrics)
    convention = _convention(results, args.method_a, method_b)
    datasets = compared_datasets(results, args.method_a, method_b)
    if args.format == "json":
        # Strict JSON has no NaN or infinity: an undefined value (fewer than 2 pairs) is null.
        # "convention": the metric convention of the values (null: not recorded in result.json),
        # inside each metric's object, so that every top-level key stays a metric.
        # "interval": the 1 - alpha confidence interval of the mean difference, [low, high].
        # "datasets": the datasets whose queries were paired (several: pooled into one test).
        print(strict_json({m: {"mean_difference": t.mean_difference, "t": t.statistic, "p_value": t.pvalue,
                               "n_queries": t.n, "convention": convention,
                               "interval": list(t.confidence_interval(args.alpha)), "datasets": datasets}
                           for m, t in tests.items()}, indent=2))
        return 0
    level = f"{100 * (1 - args.alpha):g}%"
    pooled = (f", datasets {', '.join(datasets)} pooled (--dataset NAME tests one, as the summary does)"
              if len(datasets) > 1 else "")
    print(f"{args.method_a} - {method_b}, paired t-test over test queries (two-sided), "
          f"convention {convention or 'not recorded'}{pooled}")
    print(f"| metric | mean difference | t | p | queries | significant | {level} interval |")
    print("|---|---|---|---|---|---|---|")
    for metric, t in tests.items():
        verdict = "yes" if t.significant(args.alpha) else "no"
        low, high = t.confidence_interval(args.alpha)
        interval = "n/a" if math.isnan(low) else f"[{low:+.4f}, {high:+.4f}]"
        print(f"| {metric} | {_shown(t.mean_difference, '+.4f')} | {_shown(t.statistic, '.2f')} "
              f"| {_shown(t.pvalue, '.3g')} | {t.n} | {verdict} | {interval} |")
    return 0


def _metrics(text: str | None, results: list[dict[str, Any]], method_a: str,
             method_b: str) -> list[str] | None:
    """``--metrics`` as a list, each stored by both methods' runs; None (not given): all stored."""
    from smoothrank.experiments.report import method_runs, stored_metrics, unstored_metrics_message

    if text is None:
        return None
    metrics = [m.strip() for m in text.split(",") if m.strip()]
    runs_a, runs_b = method_runs(results, method_a, method_b)
    problem = unstored_metrics_message(metrics, stored_metrics(runs_a + runs_b), method_a, method_b)
    if problem is not None:
        raise CLIError(f"--metrics: {problem}")
    return metrics


def _convention(results: list[dict[str, Any]], method_a: str, method_b: str) -> str | None:
    """The metric convention of the two methods' runs (each ``result.json`` records it); None if none
    does. With ``--b-out`` the two experiments' conventions were checked to be the same."""
    found = sorted({str(r["convention"]) for r in results
                    if r["method"] in (method_a, method_b) and r.get("convention") is not None})
    return ", ".join(found) or None


def _shown(value: float, spec: str) -> str:
    # NaN: fewer than 2 query pairs with a value (or none at all): no difference or test to show.
    return "n/a" if math.isnan(value) else format(value, spec)


def _results(out: Path, *, all_runs: bool = False) -> tuple[list[dict[str, Any]], set[str]]:
    """The folder's results, limited to the runs and ensembles of the last experiment written into it
    (``plan.json``, written with ``spec.yaml``) unless ``all_runs``, as the summary is; and the
    methods of the runs left out. Runs of seeds, folds or methods that the spec no longer has stay in
    ``runs/`` (the runner never deletes). A folder without ``plan.json`` (made before 2026-11-24, or
    by the Python API) is read whole."""
    from smoothrank.experiments import load_results

    if not (out / "runs").is_dir():
        raise CLIError(f"{out}: not an experiment output folder (no runs/ inside)")
    results = load_results(out, ensembles=True)
    plan_path = out / PLAN_FILE
    if all_runs or not plan_path.exists():  # a folder in its place is damage, named below
        return results, set()
    try:
        plan = json.loads(plan_path.read_text(encoding="utf-8"))
        wanted = set(plan["runs"]) | set(plan["ensembles"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CLIError(f"{plan_path}: damaged ({err}); delete it, or pass --all-runs") from None
    kept = [r for r in results if r.get("run_id") in wanted]
    return kept, {r["method"] for r in results if r.get("run_id") not in wanted}


def _check_present(results: list[dict[str, Any]], left_out: set[str], method: str, argument: str,
                   out: str) -> None:
    if method in left_out and not any(r["method"] == method for r in results):
        raise CLIError(f"{argument}: the runs of {method!r} in {out} are not in the last experiment written "
                       f"there ({Path(out) / PLAN_FILE} lists its runs); pass --all-runs to use them")


def _check_same_data(results: list[dict[str, Any]], method_a: str, method_b: str, where: str) -> None:
    """Queries pair only on the same datasets under the same metric convention (of one method's runs
    too: runs of one label written by two specs into one folder)."""
    def facts(method: str, key: str) -> set[Any]:  # None: not recorded (runs written before the key)
        return {r.get(key) for r in results if r["method"] == method} - {None}

    for method in (method_a, method_b):
        found = facts(method, "convention")
        if len(found) > 1:
            raise CLIError(f"{where}: the runs of {method} were scored under several metric conventions "
                           f"{sorted(map(str, found))}; their values cannot be averaged or paired")
    for key in ("dataset", "convention"):
        a, b = facts(method_a, key), facts(method_b, key)
        if key == "dataset" and where != "--b-out":
            continue  # in one folder, pairs are formed within each dataset
        if a and b and a != b:
            raise CLIError(f"{where}: {method_a} has {key} {sorted(map(str, a))} but {method_b} has "
                           f"{sorted(map(str, b))}; per-query values pair only on the same data")
