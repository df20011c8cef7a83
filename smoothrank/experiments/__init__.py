"""Experiments: a YAML grid of runs over folds, GBDT baselines, paired t-tests, reports.

* :mod:`~smoothrank.experiments.spec`: :func:`load_spec` validates a spec, :func:`expand` lists its cells.
* :mod:`~smoothrank.experiments.runner`: :func:`run_experiment` runs the unfinished cells.
* :mod:`~smoothrank.experiments.gbdt`: LightGBM / XGBoost rankers on :class:`smoothrank.data.Dataset`.
* :mod:`~smoothrank.experiments.stats`: :func:`paired_ttest`, :func:`mean_std`,
  :func:`fold_mean_standard_error`.
* :mod:`~smoothrank.experiments.results`: a finished run's ``result.json`` and ``scores.npz``.
* :mod:`~smoothrank.experiments.combine`: per-query score normalisation and :func:`combine_scores`.
* :mod:`~smoothrank.experiments.ensemble`: seed ensembles and blends.
* :mod:`~smoothrank.experiments.stacking`: learned blends, :func:`fit_blend` / :func:`fit_blend_weights`.
* :mod:`~smoothrank.experiments.report`: :func:`write_reports` (Markdown, CSV, JSON).
* :mod:`~smoothrank.experiments.reuse`: :func:`find_reusable` / :func:`apply_reuse`, finished runs of
  another output folder (``--reuse``).

See ``docs/EXPERIMENTS.md``.
"""

from smoothrank.experiments.combine import combine_scores
from smoothrank.experiments.report import summarize, write_reports
from smoothrank.experiments.runner import ExperimentOutcome, load_results, run_cell, run_experiment
from smoothrank.experiments.spec import Cell, ExperimentSpec, expand, load_spec, spec_from_dict
from smoothrank.experiments.stacking import BlendFit, fit_blend, fit_blend_weights
from smoothrank.experiments.stats import (
    TTest,
    adjust_pvalues,
    fold_mean_standard_error,
    mean_std,
    paired_ttest,
)

__all__ = [
    "BlendFit",
    "Cell",
    "ExperimentOutcome",
    "ExperimentSpec",
    "TTest",
    "adjust_pvalues",
    "combine_scores",
    "expand",
    "fit_blend",
    "fit_blend_weights",
    "fold_mean_standard_error",
    "load_results",
    "load_spec",
    "mean_std",
    "paired_ttest",
    "run_cell",
    "run_experiment",
    "spec_from_dict",
    "summarize",
    "write_reports",
]
