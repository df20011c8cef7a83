"""Summaries of an experiment: mean and std over folds, paired t-tests, Markdown and CSV.

Aggregation: for each (dataset, method, split, metric), the values of the seeds of one fold are
averaged first, then the mean and the sample standard deviation (ddof = 1) are taken over the
folds. The t-test pairs the per-query test values of a method with those of the spec's
baseline on the same (fold, query), seeds averaged per query, all folds pooled (on MQ2008 the
five test folds partition the 784 queries, so each query counts once).

Seed ensembles (``kind`` "ensemble", method ``<method>+ens<N>``) are one result per fold and are
summarised like any method; one may be the t-test baseline.

Markdown marks a mean with ``▲`` (``▼``) when the method is significantly better (worse) than
the baseline at level ``alpha`` on that metric.
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from smoothrank._atomic import write_text_atomic
from smoothrank.experiments.stats import TTest, mean_std, paired_ttest

__all__ = ["CSV_COLUMNS", "format_markdown", "published_baselines", "summarize", "write_reports"]

CSV_COLUMNS = ("dataset", "method", "kind", "split", "metric", "mean", "std", "n_folds", "n_runs",
               "baseline", "p_value", "t_statistic", "n_queries", "significant")


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def _per_query(results: Iterable[dict[str, Any]], metric: str) -> dict[tuple[Any, str], float]:
    """(fold, qid) -> test value of ``metric``, averaged over seeds."""
    acc: dict[tuple[Any, str], list[float]] = defaultdict(list)
    for r in results:
        pq = r.get("per_query") or {}
        for qid, value in zip(pq.get("qids", []), pq.get(metric, []), strict=False):
            acc[(r["fold"], qid)].append(_num(value))
    return {key: float(np.nanmean(v)) if not all(math.isnan(x) for x in v) else math.nan
            for key, v in acc.items()}


def summarize(results: Sequence[dict[str, Any]], *, metrics: Sequence[str], baseline: str | None = None,
              alpha: float = 0.05) -> list[dict[str, Any]]:
    """One row per (dataset, method, split, metric), in the order methods first appear.

    Test rows carry the paired t-test against ``baseline`` (none for the baseline itself).
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["dataset"], r["method"]), []).append(r)
    rows: list[dict[str, Any]] = []
    for (dataset, method), runs in groups.items():
        base_runs = groups.get((dataset, baseline)) if baseline is not None and method != baseline else None
        folds = sorted({r["fold"] for r in runs}, key=lambda f: (f is None, f))
        for split in ("test", "train", "valid"):
            for metric in metrics:
                per_fold = []
                for fold in folds:
                    vals = [_num((r["metrics"].get(split) or {}).get(metric))
                            for r in runs if r["fold"] == fold]
                    vals = [v for v in vals if not math.isnan(v)]
                    per_fold.append(float(np.mean(vals)) if vals else math.nan)
                mean, std, n_folds = mean_std(per_fold)
                if n_folds == 0:
                    continue  # e.g. no validation split
                row: dict[str, Any] = {"dataset": dataset, "method": method, "kind": runs[0]["kind"],
                                       "split": split, "metric": metric, "mean": mean, "std": std,
                                       "n_folds": n_folds, "n_runs": len(runs), "baseline": "",
                                       "p_value": math.nan, "t_statistic": math.nan, "n_queries": 0,
                                       "significant": 0}
                if split == "test" and base_runs:
                    test = _compare(runs, base_runs, metric)
                    row.update(baseline=baseline, p_value=test.pvalue, t_statistic=test.statistic,
                               n_queries=test.n, significant=test.direction(alpha))
                rows.append(row)
    return rows


def _compare(runs: list[dict[str, Any]], base_runs: list[dict[str, Any]], metric: str) -> TTest:
    a, b = _per_query(runs, metric), _per_query(base_runs, metric)
    keys = sorted(set(a) & set(b), key=str)
    return paired_ttest([a[k] for k in keys], [b[k] for k in keys])


# ------------------------------------------------------------------------------ formatting
def published_baselines(dataset_names: Iterable[str], convention: str) -> dict[str, dict[str, float]]:
    """The published LETOR 4.0 MQ2008 baselines, when they apply (an ``mq2008`` dataset, letor4)."""
    if convention != "letor4" or not any("mq2008" in name.lower() for name in dataset_names):
        return {}
    try:
        from smoothrank.published import MQ2008_BASELINES
    except ImportError:
        return {}
    return dict(MQ2008_BASELINES)


def _cell(row: dict[str, Any] | None) -> str:
    if row is None or math.isnan(row["mean"]):
        return "–"
    text = f"{row['mean']:.4f}"
    if not math.isnan(row["std"]):
        text += f" ± {row['std']:.4f}"
    return text + {1: " ▲", -1: " ▼"}.get(row["significant"], "")


def format_markdown(rows: Sequence[dict[str, Any]], *, metrics: Sequence[str], title: str, convention: str,
                    baseline: str | None, alpha: float, command: str | None = None) -> str:
    """Markdown tables: per dataset, test and training metrics (mean ± std over folds)."""
    lines = [f"# {title}", ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    lines.append(f"Convention `{convention}`; mean ± sample std over folds; model selection on the "
                 "validation split only.")
    if baseline:
        lines.append(f"▲/▼: significantly better/worse than `{baseline}` (paired t-test over test queries, "
                     f"two-sided, p < {alpha:g}).")
    if any(r.get("kind") == "ensemble" for r in rows):
        lines.append("`<method>+ens<N>`: the seed ensemble of `<method>`: per fold, the mean of its N seed "
                     "runs' per-query standardised scores, evaluated as one run.")
    lines.append("")
    index = {(r["dataset"], r["method"], r["split"], r["metric"]): r for r in rows}
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    for dataset in datasets:
        methods = list(dict.fromkeys(r["method"] for r in rows if r["dataset"] == dataset))
        n_folds = max((r["n_folds"] for r in rows if r["dataset"] == dataset), default=0)
        for split, label in (("test", "test"), ("valid", "validation"), ("train", "training")):
            if not any(r["split"] == split for r in rows if r["dataset"] == dataset):
                continue  # e.g. no validation split
            lines += [f"## {dataset}: {label} set ({n_folds} fold(s))", "",
                      "| method | " + " | ".join(metrics) + " |",
                      "|---|" + "---|" * len(metrics)]
            for method in methods:
                cells = [_cell(index.get((dataset, method, split, m))) for m in metrics]
                lines.append(f"| {method} | " + " | ".join(cells) + " |")
            if split == "test":
                published = published_baselines([dataset], convention)
                for name, values in published.items():
                    cells = [f"{values[m]:.4f}" if m in values else "–" for m in metrics]
                    lines.append(f"| {name} (published) | " + " | ".join(cells) + " |")
            lines.append("")
        if published_baselines([dataset], convention):
            from smoothrank.published import SOURCE

            note = "" if n_folds == 5 else (f" This experiment has {n_folds} fold(s) of {dataset}: "
                                            "compare with care.")
            lines += [f"Published rows: {SOURCE}; test sets, 5-fold average.{note}", ""]
    return "\n".join(lines)


def format_csv(rows: Sequence[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else
                             (f"{v:.6g}" if isinstance(v, float) else v)) for k, v in row.items()})
    return buffer.getvalue()




def write_reports(results: Sequence[dict[str, Any]], out_dir: str | Path, *, metrics: Sequence[str],
                  title: str, convention: str, baseline: str | None = None, alpha: float = 0.05,
                  command: str | None = None) -> list[dict[str, Any]]:
    """Write ``summary.md``, ``summary.csv`` and ``summary.json`` into ``out_dir``; return the rows."""
    from smoothrank.experiments.runner import write_json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = summarize(results, metrics=metrics, baseline=baseline, alpha=alpha)
    markdown = format_markdown(rows, metrics=metrics, title=title, convention=convention,
                               baseline=baseline, alpha=alpha, command=command)
    write_text_atomic(out / "summary.md", markdown)
    write_text_atomic(out / "summary.csv", format_csv(rows))
    write_json(out / "summary.json", {"title": title, "convention": convention, "baseline": baseline,
                                      "alpha": alpha, "rows": rows})
    return rows
