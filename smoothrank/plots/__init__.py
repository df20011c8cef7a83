"""Figures (matplotlib, Agg backend, PNG): the papers' illustrations, training curves, summaries.

* :func:`neuralndcg_figure1`, :func:`neuralndcg_figure2`: NDCG vs NeuralNDCG as one score varies
  (Pobrotyn & Bialobrzeski 2021, Figures 1 and 2).
* :func:`softrank_figure`: SoftRank (Taylor et al. 2008) Figures 2 and 3: smoothed scores -> rank
  distributions -> discount distribution.
* :func:`training_curves`: loss and validation metrics per epoch of a trainer run directory.
* :func:`summary_bars`: test means ± std over folds from an experiment's ``summary.csv``.
* :func:`summary_forest`: the same as a forest plot on a zoomed axis, with reference values (the
  published LETOR 4.0 rows) as vertical lines.
* :func:`summary_convention`: the metric convention of a ``summary.csv``, which both summary figures
  name in their titles.

Every function computes its curves with the package's own code (no hand-drawn data), writes
the PNG atomically and returns the arrays it plotted, so tests can check them.
"""

from smoothrank.plots.figures import (
    neuralndcg_curves,
    neuralndcg_figure1,
    neuralndcg_figure2,
    softrank_example,
    softrank_figure,
    summary_bars,
    summary_convention,
    summary_forest,
    training_curves,
)

__all__ = [
    "neuralndcg_curves",
    "neuralndcg_figure1",
    "neuralndcg_figure2",
    "softrank_example",
    "softrank_figure",
    "summary_bars",
    "summary_convention",
    "summary_forest",
    "training_curves",
]
