"""Summaries of an experiment: mean and std over folds, paired t-tests, Markdown and CSV.

Aggregation: for each (dataset, method, split, metric), the values of the seeds of one fold are
averaged first, then the mean and the sample standard deviation (ddof = 1) are taken over the
folds. The t-test pairs the per-query test values of a method with those of the spec's
baseline on the same (dataset, fold, query), seeds averaged per query, all folds pooled (on MQ2008 the
five test folds partition the 784 queries, so each query counts once).

Seed ensembles and blends (``kind`` "ensemble", method ``<method>+ens<N>`` or the blend's label) are
one result per fold and are summarised like any method; one may be the t-test baseline.

Markdown marks a mean with ``▲`` (``▼``) when the method is significantly better (worse) than
the baseline at level ``alpha`` on that metric.

Test rows also carry ``se``, the standard error over test queries of the mean over folds
(:func:`~smoothrank.experiments.stats.fold_mean_standard_error`, from the per-query values, seeds
averaged per query): the sampling noise of the reported mean, which the standard deviation over
folds overstates by about sqrt(number of folds).
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from smoothrank._atomic import write_text_atomic
from smoothrank.errors import SmoothrankError
from smoothrank.experiments.stats import (
    TTest,
    adjust_pvalues,
    check_correction,
    fold_mean_standard_error,
    mean_std,
    paired_ttest,
)

__all__ = ["CSV_COLUMNS", "TARGET_METRICS", "compare_methods", "compared_datasets", "format_markdown",
           "method_runs", "on_dataset",
           "published_baselines", "published_comparison", "stored_metrics", "summarize", "write_reports"]

# Columns are only ever appended, so that a reader by position reads any summary.csv; a file may end
# before ``convention`` (the metric convention, e.g. letor4, the same on every row) or ``se`` (standard
# error over test queries of a test row's mean; empty on other splits).
CSV_COLUMNS = ("dataset", "method", "kind", "split", "metric", "mean", "std", "n_folds", "n_runs",
               "baseline", "p_value", "t_statistic", "n_queries", "significant", "p_adjusted", "convention",
               "se")


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def _per_query(results: Iterable[dict[str, Any]], metric: str) -> dict[tuple[Any, Any, str], float]:
    """(dataset, fold, qid) -> test value of ``metric``, averaged over seeds.

    The dataset is part of the key: two datasets of one experiment may share fold numbers and
    query ids (e.g. MQ2007 and MQ2008), and their queries must not pair with each other."""
    acc: dict[tuple[Any, Any, str], list[float]] = defaultdict(list)
    for r in results:
        pq = r.get("per_query") or {}
        for qid, value in zip(pq.get("qids", []), pq.get(metric, []), strict=False):
            acc[(r.get("dataset"), r["fold"], qid)].append(_num(value))
    return {key: float(np.nanmean(v)) if not all(math.isnan(x) for x in v) else math.nan
            for key, v in acc.items()}


def summarize(results: Sequence[dict[str, Any]], *, metrics: Sequence[str], baseline: str | None = None,
              alpha: float = 0.05, correction: str = "none") -> list[dict[str, Any]]:
    """One row per (dataset, method, split, metric), in the order methods first appear.

    Test rows carry the paired t-test against ``baseline`` (none for the baseline itself).
    ``correction`` (:func:`~smoothrank.experiments.stats.adjust_pvalues`: none, holm, bh) adjusts
    the p-values of each (dataset, metric) together, one per method compared with the baseline;
    ``p_adjusted`` and ``significant`` follow it.
    """
    check_correction(correction)  # before any work
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
                                       "p_value": math.nan, "p_adjusted": math.nan, "t_statistic": math.nan,
                                       "n_queries": 0,
                                       "significant": 0}
                ens = runs[0].get("ensemble") or {}
                if isinstance(ens.get("of"), list):  # a blend: the member methods
                    row["blend_of"] = ens["of"]
                    row["blend_normalize"] = ens.get("normalize", "zscore")
                if ens.get("learner"):  # a learned blend: its learner, its weights' mean over folds
                    row["blend_learner"] = ens["learner"]
                    row["blend_weights"] = _mean_weights(runs)
                    row["blend_fits"] = _fit_summaries(runs)
                if split == "test":
                    row["se"] = _standard_error(runs, metric)
                if split == "test" and base_runs:
                    test = _compare(runs, base_runs, metric)
                    # significant and p_adjusted are set per family by _apply_correction below
                    row.update(baseline=baseline, p_value=test.pvalue, t_statistic=test.statistic,
                               n_queries=test.n, mean_difference=test.mean_difference)
                rows.append(row)
    _apply_correction(rows, correction, alpha)
    return rows


def _apply_correction(rows: list[dict[str, Any]], correction: str, alpha: float) -> None:
    """Adjust the test rows' p-values per (dataset, metric) family and redo ``significant``."""
    families: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["split"] == "test" and row["baseline"]:
            families[(row["dataset"], row["metric"])].append(row)
    for family in families.values():
        adjusted = adjust_pvalues([r["p_value"] for r in family], correction)
        for row, p in zip(family, adjusted, strict=True):
            row["p_adjusted"] = float(p)
            test = TTest(row["t_statistic"], float(p), row["n_queries"], row["mean_difference"])
            row["significant"] = test.direction(alpha)


def _standard_error(runs: list[dict[str, Any]], metric: str) -> float:
    """Standard error over test queries of the mean over folds (NaN without per-query values)."""
    by_fold: dict[Any, list[float]] = defaultdict(list)
    for (_, fold, _), value in _per_query(runs, metric).items():
        by_fold[fold].append(value)
    return fold_mean_standard_error(by_fold.values())


def _compare(runs: list[dict[str, Any]], base_runs: list[dict[str, Any]], metric: str) -> TTest:
    a, b = _per_query(runs, metric), _per_query(base_runs, metric)
    keys = sorted(set(a) & set(b), key=str)
    return paired_ttest([a[k] for k in keys], [b[k] for k in keys])


def method_runs(results: Sequence[dict[str, Any]], method_a: str,
                method_b: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The results of ``method_a`` and of ``method_b``; an error naming a method with none."""
    present = {r["method"] for r in results}
    for name, method in (("method_a", method_a), ("method_b", method_b)):
        if method not in present:
            raise SmoothrankError(f"{name}: no finished run of {method!r}; methods: {sorted(present)}")
    return [r for r in results if r["method"] == method_a], [r for r in results if r["method"] == method_b]


def stored_metrics(runs: Sequence[dict[str, Any]]) -> list[str]:
    """The metrics whose per-query test values every one of ``runs`` stored, in stored order."""
    stored = [[m for m in (r.get("per_query") or {}) if m != "qids"] for r in runs]
    return [m for m in stored[0] if all(m in other for other in stored[1:])] if stored else []


def unstored_metrics_message(metrics: Sequence[str], stored: Sequence[str], method_a: str,
                             method_b: str) -> str | None:
    """Why ``metrics`` cannot be compared (None: they can): none given, or not all stored."""
    what = f"the runs of {method_a} and {method_b} stored {', '.join(stored) or 'no per-query test values'}"
    if not metrics:
        return f"no metric given; {what}"
    missing = [m for m in metrics if m not in stored]
    if missing:
        return f"{', '.join(map(repr, missing))} not stored; {what}"
    return None


def compare_methods(results: Sequence[dict[str, Any]], method_a: str, method_b: str, *,
                    metrics: Sequence[str] | None = None, dataset: str | None = None) -> dict[str, TTest]:
    """Paired t-test of ``method_a - method_b`` per metric, over their common test queries.

    Pairs are the per-query test values on the same (dataset, fold, query), seeds averaged per query, all
    folds pooled: the same test as the summary's baseline column, between any two methods. The
    summary tests each dataset on its own; here the datasets of the runs are pooled too unless
    ``dataset`` names one (:func:`compared_datasets` lists them).
    ``metrics`` defaults to those both methods' runs stored; others are an error, and so are two
    methods without a common test query (e.g. run on other test files), and two methods whose test
    queries differ within a fold both were tested on (other test files that share some query ids).
    """
    if dataset is not None:
        results = on_dataset(results, method_a, method_b, dataset)
    runs_a, runs_b = method_runs(results, method_a, method_b)
    stored = stored_metrics(runs_a + runs_b)
    metrics = stored if metrics is None else list(metrics)
    problem = unstored_metrics_message(metrics, stored, method_a, method_b)
    if problem is not None:
        raise SmoothrankError(f"metrics: {problem}")
    queries_a, queries_b = set(_queries(runs_a)), set(_queries(runs_b))
    if not queries_a & queries_b:
        raise SmoothrankError(f"{method_a} and {method_b} have no common test queries (dataset, fold, "
                              "query id): their runs were not tested on the same data")
    # Within a fold both were tested on, the same data has the same queries: a partial overlap is
    # other test files whose query ids happen to meet (folds one of them lacks are left out).
    shared = {q[:2] for q in queries_a} & {q[:2] for q in queries_b}
    only_a = [q for q in queries_a - queries_b if q[:2] in shared]
    only_b = [q for q in queries_b - queries_a if q[:2] in shared]
    if only_a or only_b:
        raise SmoothrankError(f"{method_a} and {method_b} were not tested on the same queries: in the folds "
                              f"both have, {len(queries_a & queries_b)} are common, {len(only_a)} only in "
                              f"the runs of {method_a} and {len(only_b)} only in those of {method_b}; their "
                              "runs were not tested on the same data")
    return {metric: _compare(runs_a, runs_b, metric) for metric in metrics}


def on_dataset(results: Sequence[dict[str, Any]], method_a: str, method_b: str, dataset: str,
               *, argument: str = "dataset") -> list[dict[str, Any]]:
    """The results of ``dataset``; an error naming ``argument`` where either method has no run on it."""
    for method in (method_a, method_b):
        present = sorted({str(r.get("dataset")) for r in results if r["method"] == method})
        if present and dataset not in present:
            raise SmoothrankError(f"{argument}: {method} has no run on {dataset!r}; it has {present}")
    return [r for r in results if str(r.get("dataset")) == dataset]


def compared_datasets(results: Sequence[dict[str, Any]], method_a: str, method_b: str) -> list[str]:
    """The datasets whose test queries :func:`compare_methods` pairs (pools, when several)."""
    runs_a, runs_b = method_runs(results, method_a, method_b)
    return sorted({str(q[0]) for q in set(_queries(runs_a)) & set(_queries(runs_b))})


def _queries(runs: Iterable[dict[str, Any]]) -> list[tuple[Any, Any, str]]:
    """The (dataset, fold, query id) of every stored per-query test value of ``runs``."""
    return [(r.get("dataset"), r["fold"], qid)
            for r in runs for qid in (r.get("per_query") or {}).get("qids", [])]


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


TARGET_METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "map")
MQ2008_FOLDS = 5  # the published LETOR 4.0 rows are means over these
# How a blend's legend names its members' scores, by ``normalize`` (ensemble.normalize_scores).
_NORMALIZED_SCORES = {"zscore": "standardised", "rank": "rank-scaled (position in [0, 1])", "none": "raw"}


def published_comparison(rows: Sequence[dict[str, Any]], dataset: str, published: dict[str, dict[str, float]],
                         *, select_by: str, targets: Sequence[str] = TARGET_METRICS) -> list[dict[str, Any]]:
    """Each method of ``dataset`` against the published rows, ordered by mean validation ``select_by``.

    For every target metric, ``beats[metric]`` is True when the method's mean test value over the
    folds is strictly above every published value of that metric (a published row without it is
    ignored) and the method has every fold the dataset's most complete method has (``n_folds``,
    ``complete_folds``); ``beats_all`` when that holds for every target; ``se[metric]`` is the test
    mean's standard error over queries (NaN without per-query values). The order is the only thing
    the validation split decides: the first row is the configuration a user would pick without
    looking at the test split (methods missing folds come last).
    """
    index = {(r["method"], r["split"], r["metric"]): r["mean"] for r in rows if r["dataset"] == dataset}
    folds = _fold_counts(rows, dataset)
    complete = max(folds.values(), default=0)
    missing = _missing_runs(rows, dataset)
    errors = {(r["method"], r["metric"]): r.get("se", math.nan) for r in rows
              if r["dataset"] == dataset and r["split"] == "test"}
    methods = list(dict.fromkeys(r["method"] for r in rows if r["dataset"] == dataset))
    kinds = {r["method"]: r["kind"] for r in rows if r["dataset"] == dataset}
    out = []
    for method in methods:
        test = {m: index.get((method, "test", m), math.nan) for m in targets}
        # a mean over fewer folds than the dataset's most complete method is no ✓ (the docstring's rule)
        whole = folds.get(method, 0) >= complete
        beats = {m: whole and not math.isnan(test[m]) and all(test[m] > p[m] for p in published.values()
                                                              if m in p)
                 for m in targets}
        out.append({"method": method, "kind": kinds[method],
                    "valid": index.get((method, "valid", select_by), math.nan), "test": test, "beats": beats,
                    "beats_all": all(beats.values()) and method not in missing,
                    "se": {m: errors.get((method, m), math.nan) for m in targets},
                    "n_folds": folds.get(method, 0), "complete_folds": complete,
                    "missing": missing.get(method)})
    # A method missing folds or seed runs (failed runs) is not the configuration it names: listed last.
    return sorted(out, key=lambda r: (r["missing"] is not None,
                                      -r["valid"] if not math.isnan(r["valid"]) else math.inf))


def _fold_counts(rows: Sequence[dict[str, Any]], dataset: str) -> dict[str, int]:
    """Each method's number of folds with a test result on ``dataset``."""
    counts: dict[str, int] = {}
    for r in rows:
        if r["dataset"] == dataset and r["split"] == "test":
            counts[r["method"]] = max(counts.get(r["method"], 0), r["n_folds"])
    return counts


def _missing_runs(rows: Sequence[dict[str, Any]], dataset: str) -> dict[str, str]:
    """The methods of ``dataset`` that lack folds, or seed runs, that others have (their runs failed),
    with what they have: ``{"m": "2 of 3 folds"}``. Seed ensembles and blends count folds only."""
    folds = _fold_counts(rows, dataset)
    runs: dict[str, int] = {}
    for r in rows:
        if r["dataset"] == dataset and r["split"] == "test" and r["kind"] != "ensemble":
            runs[r["method"]] = max(runs.get(r["method"], 0), r["n_runs"])
    all_folds, all_runs = max(folds.values(), default=0), max(runs.values(), default=0)
    out = {m: f"{f} of {all_folds} folds" for m, f in folds.items() if f < all_folds}
    out.update({m: f"{n} of {all_runs} runs" for m, n in runs.items() if n < all_runs and m not in out})
    return out


def _shown_label(method: str, missing: str | None) -> str:
    """A method's label in the tables, with what it lacks (its failed runs) when it lacks something."""
    return f"{method} ({missing})" if missing else method


def _comparison_lines(rows: Sequence[dict[str, Any]], dataset: str, published: dict[str, dict[str, float]],
                      select_by: str) -> list[str]:
    table = published_comparison(rows, dataset, published, select_by=select_by)
    targets = list(TARGET_METRICS)
    lines = [f"## {dataset}: test against every published row, by validation {select_by}", "",
             "✓: above every published baseline on that metric (mean test over the folds).", "",
             f"| method | validation {select_by} | " + " | ".join(targets) + " | all four |",
             "|---|---|" + "---|" * (len(targets) + 1)]
    for r in table:
        valid = "–" if math.isnan(r["valid"]) else f"{r['valid']:.4f}"
        cells = [("–" if math.isnan(r["test"][m]) else f"{r['test'][m]:.4f}")
                 + (" ✓" if r["beats"][m] else "") for m in targets]
        verdict = "yes" if r["beats_all"] else "no"
        label = _shown_label(r["method"], r["missing"])
        lines.append(f"| {label} | {valid} | " + " | ".join(cells) + f" | {verdict} |")
    best_values = {m: max(p[m] for p in published.values() if m in p) for m in targets}
    best = [f"{m}: {v:.4f}" for m, v in best_values.items()]
    folds = max(_fold_counts(rows, dataset).values(), default=0)
    partial = ([] if folds == MQ2008_FOLDS else
               [f"These rows are means over {folds} fold(s); the published rows are means over MQ2008's "
                f"{MQ2008_FOLDS} folds, so the ✓ marks compare unlike sets of test queries (the name rule "
                "that shows this table cannot tell a cut of MQ2008 from the whole)."])
    return [*lines, "", "Best published value per metric: " + ", ".join(best) + ".", *partial,
            *_noise_lines(table[0] if table else None, best_values), ""]


def _noise_lines(pick: dict[str, Any] | None, best: dict[str, float]) -> list[str]:
    """How the first row's gaps to the best published values compare with its sampling noise."""
    if pick is None or pick["missing"]:
        return []  # no pick: a method missing runs is no configuration's result
    if all(math.isnan(pick["se"][m]) for m in best):
        return []
    cells = []
    for m, value in best.items():
        mean, se = pick["test"][m], pick["se"][m]
        if math.isnan(mean) or math.isnan(se):
            continue
        gap = mean - value
        cells.append(f"{m} {mean:.4f} ± {1.96 * se:.4f} (gap {gap:+.4f}, {gap / se:+.1f} SE)"
                     if se > 0 else f"{m} {mean:.4f} (gap {gap:+.4f})")
    return ["", f"Sampling noise of the first row, `{pick['method']}`: test mean ± 1.96 standard errors over "
            "test queries (the spread another draw of test queries could give), and its gap to the best "
            "published value in standard errors: " + "; ".join(cells) + ". The published rows come "
            "without per-query values, so no paired test against them is possible."]


def format_markdown(rows: Sequence[dict[str, Any]], *, metrics: Sequence[str], title: str, convention: str,
                    baseline: str | None, alpha: float, command: str | None = None,
                    select_by: str | None = None, refit: bool = False, correction: str = "none") -> str:
    """Markdown tables: per dataset, test and training metrics (mean ± std over folds).

    ``refit``: the runs were refit on training + validation after selection (say so above the tables).
    ``correction``: how the rows' p-values were adjusted (:func:`summarize`), named in the legend.

    Where published LETOR 4.0 rows apply and ``select_by`` is given, a last table compares each
    method with them (:func:`published_comparison`).
    """
    lines = [f"# {title}", ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    lines.append(f"Convention `{convention}`; mean ± sample std over folds; model selection on the "
                 "validation split only.")
    if refit:
        lines.append("Refit: after selection, every run was retrained on the training and validation queries "
                     "together for its selected number of epochs (boosting rounds); the test and training "
                     "rows are those refit models', the validation rows the selected models' "
                     "(out of sample).")
    if baseline:
        adjusted = {"holm": "Holm-adjusted over the methods, per metric, ",
                    "bh": "Benjamini-Hochberg-adjusted over the methods, per metric, "}.get(correction, "")
        lines.append(f"▲/▼: significantly better/worse than `{baseline}` (paired t-test over test queries, "
                     f"two-sided, {adjusted}p < {alpha:g}).")
    if any(r.get("kind") == "ensemble" and not r.get("blend_of") for r in rows):
        lines.append("`<method>+ens<N>`: the seed ensemble of `<method>`: per fold, the mean of its N seed "
                     "runs' per-query normalised scores (`ensemble_normalize`), evaluated as one run.")
    blends = {r["method"]: r for r in rows if r.get("blend_of")}
    for label, row in blends.items():
        members = ", ".join(f"`{m}`" for m in row["blend_of"])
        learner = row.get("blend_learner")
        scaled = _NORMALIZED_SCORES.get(row.get("blend_normalize", "zscore"), "normalised")
        if learner:
            weights = ", ".join(f"`{m}` {w:.3f}" for m, w in row["blend_weights"].items())
            lines.append(f"`{label}`: a learned blend of {members}: per fold, the members' per-query "
                         f"{scaled} seed ensembles weighted by non-negative weights fit on the "
                         f"validation split ({learner['loss']}, l2 {learner['l2']:g}; its validation "
                         f"scores cross-fitted over {learner['cv']} parts). Mean weights over the folds: "
                         f"{weights}.{_convergence_note(row.get('blend_fits', []))}")
        else:
            lines.append(f"`{label}`: a blend of {members}: per fold, the mean of the members' per-query "
                         f"{scaled} scores, each method weighing the same (its seed runs share its "
                         "weight), evaluated as one run.")
    lines.append("")
    index = {(r["dataset"], r["method"], r["split"], r["metric"]): r for r in rows}
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    for dataset in datasets:
        methods = list(dict.fromkeys(r["method"] for r in rows if r["dataset"] == dataset))
        n_folds = max((r["n_folds"] for r in rows if r["dataset"] == dataset), default=0)
        missing = _missing_runs(rows, dataset)
        for split, label in (("test", "test"), ("valid", "validation"), ("train", "training")):
            if not any(r["split"] == split for r in rows if r["dataset"] == dataset):
                continue  # e.g. no validation split
            lines += [f"## {dataset}: {label} set ({n_folds} fold(s))", "",
                      "| method | " + " | ".join(metrics) + " |",
                      "|---|" + "---|" * len(metrics)]
            for method in methods:
                cells = [_cell(index.get((dataset, method, split, m))) for m in metrics]
                label = _shown_label(method, missing.get(method))
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
            if split == "test":
                published = published_baselines([dataset], convention)
                for name, values in published.items():
                    cells = [f"{values[m]:.4f}" if m in values else "–" for m in metrics]
                    lines.append(f"| {name} (published) | " + " | ".join(cells) + " |")
            lines.append("")
        if published_baselines([dataset], convention):
            from smoothrank.published import SOURCE

            note = "" if n_folds == MQ2008_FOLDS else (
                f" This experiment has {n_folds} fold(s) of {dataset}: compare with care.")
            lines += [f"Published rows: {SOURCE}; test sets, 5-fold average.{note}", ""]
            if select_by is not None and all(m in metrics for m in TARGET_METRICS):
                published = published_baselines([dataset], convention)
                lines += _comparison_lines(rows, dataset, published, select_by)
    return "\n".join(lines)


def _convergence_note(fits: Sequence[dict[str, Any]]) -> str:
    """A warning when some L-BFGS-B fit of a learned blend did not converge (none: empty)."""
    failed = [f for f in fits if not f.get("converged", True)]
    if not failed:
        return ""
    return (f" **{len(failed)} of its {len(fits)} weight fits did not converge** "
            f"(L-BFGS-B: {failed[0].get('message', '?')}).")


def _fit_summaries(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every L-BFGS-B fit of a learned blend's folds (the full fit and the cross-fits); a result that
    records no convergence gives none."""
    out: list[dict[str, Any]] = []
    for r in runs:
        ens = r["ensemble"]
        out += ([ens["fit"]] if "fit" in ens else []) + list(ens.get("cross_fits", []))
    return out


def _mean_weights(runs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """A learned blend's weights per member method, averaged over its folds."""
    per_fold = [r["ensemble"]["learned_weights"] for r in runs]
    return {m: float(np.mean([w[m] for w in per_fold])) for m in per_fold[0]}


def format_csv(rows: Sequence[dict[str, Any]], *, convention: str) -> str:
    """``summary.csv``: the :data:`CSV_COLUMNS` of ``rows``, every row under metric ``convention``."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        cells = {k: ("" if isinstance(v, float) and math.isnan(v) else
                     (f"{v:.6g}" if isinstance(v, float) else v)) for k, v in row.items() if k in CSV_COLUMNS}
        writer.writerow({**cells, "convention": convention})
    return buffer.getvalue()


#: The summary files :func:`write_reports` writes into an output folder.
SUMMARY_FILES = ("summary.md", "summary.csv", "summary.json")


def write_reports(results: Sequence[dict[str, Any]], out_dir: str | Path, *, metrics: Sequence[str],
                  title: str, convention: str, baseline: str | None = None, alpha: float = 0.05,
                  command: str | None = None, select_by: str | None = None,
                  correction: str = "none", missing: Mapping[str, str] | None = None
                  ) -> list[dict[str, Any]]:
    """Write ``summary.md``, ``summary.csv`` and ``summary.json`` into ``out_dir``; return the rows.

    ``missing``: the runs (and ensembles) of the spec that have no result, each with why (its error,
    or that it was not run). ``summary.md`` then opens with an "Incomplete" section listing them,
    and ``summary.json`` holds them under ``missing`` (``complete`` is false)."""
    from smoothrank.experiments.results import write_json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    missing = dict(missing or {})
    rows = summarize(results, metrics=metrics, baseline=baseline, alpha=alpha, correction=correction)
    refit = any("refit" in r for r in results)
    markdown = format_markdown(rows, metrics=metrics, title=title, convention=convention,
                               baseline=baseline, alpha=alpha, command=command, select_by=select_by,
                               refit=refit, correction=correction)
    write_text_atomic(out / "summary.md", _with_missing(markdown, missing))
    write_text_atomic(out / "summary.csv", format_csv(rows, convention=convention))
    write_json(out / "summary.json", {"title": title, "convention": convention, "baseline": baseline,
                                      "alpha": alpha, "correction": correction, "complete": not missing,
                                      "missing": missing, "rows": rows})
    return rows


def _with_missing(markdown: str, missing: Mapping[str, str]) -> str:
    """``markdown`` with an "Incomplete" section after its title listing the missing runs."""
    if not missing:
        return markdown
    title, _, rest = markdown.partition("\n")
    lines = [title, "", f"## Incomplete: {len(missing)} run(s) of the spec have no result", "",
             "The tables below leave them out; run the command again to retry them.", ""]
    lines += [f"- `{run_id}`: {' '.join(why.split())}" for run_id, why in missing.items()]
    return "\n".join(lines) + "\n" + rest
