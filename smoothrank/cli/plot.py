"""``smoothrank plot``: the papers' figures, training curves and experiment summaries as PNG files."""

from __future__ import annotations

import math
from typing import Any

from smoothrank.cli import CLIError


def _temperatures(text: str) -> list[float]:
    try:
        values = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise CLIError(f"--temperatures: expected comma-separated numbers, got {text!r}") from None
    if not values or any(not 0 < v < math.inf for v in values):
        raise CLIError(f"--temperatures: expected positive finite numbers, got {text!r}")
    return values


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plot", help="draw a figure (PNG): figure1, figure2, softrank, curves RUN_DIR, summary SUMMARY.csv, "
                     "forest SUMMARY.csv",
        description="figure1/figure2: NeuralNDCG paper Figures 1 and 2; softrank: SoftRank Figures 2 and 3; "
                    "curves RUN_DIR: loss and validation metrics per epoch of a training run; "
                    "summary SUMMARY.csv: bar chart of an experiment summary; forest SUMMARY.csv: the same "
                    "as a forest plot on a zoomed axis, optionally with the published LETOR 4.0 rows.")
    parser.add_argument("figure", choices=("figure1", "figure2", "softrank", "curves", "summary", "forest"))
    parser.add_argument("source", nargs="?", default=None,
                        help="RUN_DIR for curves, SUMMARY.csv for summary and forest")
    parser.add_argument("--out", required=True, help="output PNG file")
    # Each option belongs to some figures (_OPTION_FIGURES); None = not given, so that one given to
    # another figure is refused rather than silently ignored. Defaults: _DEFAULTS.
    parser.add_argument("--temperature", type=float, default=None,
                        help=f"figure1: NeuralNDCG temperature (default {_DEFAULTS['temperature']:g})")
    parser.add_argument("--temperatures", default=None,
                        help=f"figure2: comma-separated (default {_DEFAULTS['temperatures']})")
    parser.add_argument("--sigma", type=float, default=None,
                        help=f"softrank: score standard deviation (default {_DEFAULTS['sigma']:g})")
    parser.add_argument("--dataset", default=None,
                        help="summary, forest: which dataset (default: the first)")
    parser.add_argument("--split", default=None, choices=("test", "train", "valid"),
                        help=f"summary, forest: split (default {_DEFAULTS['split']})")
    parser.add_argument("--methods", default=None,
                        help="summary, forest: comma-separated methods (default: all)")
    parser.add_argument("--metrics", default=None,
                        help="summary, forest: comma-separated metrics (default: all)")
    parser.add_argument("--published", action="store_true",
                        help="forest: draw the published LETOR 4.0 MQ2008 rows (test, letor4 convention)")
    parser.set_defaults(func=run)


_OPTION_FIGURES = {
    "temperature": ("figure1",), "temperatures": ("figure2",), "sigma": ("softrank",),
    "dataset": ("summary", "forest"), "split": ("summary", "forest"), "methods": ("summary", "forest"),
    "metrics": ("summary", "forest"), "published": ("forest",),
}
_DEFAULTS = {"temperature": 1.0, "temperatures": "0.01,0.1,0.5,1,2", "sigma": 0.2, "split": "test"}


def _check_options(args: Any) -> None:
    """Refuse an option the figure does not take (a --temperature given to figure2 would otherwise
    draw figure2's temperatures while the user believes τ was set), then fill in the defaults."""
    for name, figures in _OPTION_FIGURES.items():
        value = getattr(args, name)  # not `in (None, False)`: 0.0 == False, and --sigma 0 is given
        if value is not None and value is not False and args.figure not in figures:
            only = " and ".join(f"plot {f}" for f in figures)
            raise CLIError(f"--{name}: only for {only}, not plot {args.figure}")
    for name, default in _DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)


def run(args: Any) -> int:
    from smoothrank import plots
    from smoothrank._atomic import check_destination, is_device_or_fifo

    out = check_destination(args.out, "--out")  # before any curve is computed
    _check_options(args)
    needs_source = args.figure in ("curves", "summary", "forest")
    if needs_source and args.source is None:
        what = "run directory" if args.figure == "curves" else "summary.csv"
        raise CLIError(f"plot {args.figure}: give the {what}")
    if not needs_source and args.source is not None:
        raise CLIError(f"plot {args.figure}: takes no source argument (got {args.source!r})")
    if args.figure == "figure1":
        if not 0 < args.temperature < math.inf:
            raise CLIError(f"--temperature: expected a positive finite number, got {args.temperature}")
        plots.neuralndcg_figure1(args.out, temperature=args.temperature)
    elif args.figure == "figure2":
        plots.neuralndcg_figure2(args.out, temperatures=_temperatures(args.temperatures))
    elif args.figure == "softrank":
        if not 0 < args.sigma < math.inf:
            raise CLIError(f"--sigma: expected a positive finite number, got {args.sigma}")
        plots.softrank_figure(args.out, sigma=args.sigma)
    elif args.figure == "curves":
        plots.training_curves(args.source, args.out)
    elif args.figure == "summary":
        plots.summary_bars(args.source, args.out, dataset=args.dataset, split=args.split,
                           metrics=_names(args.metrics, "--metrics"),
                           methods=_names(args.methods, "--methods"))
    else:
        plots.summary_forest(args.source, args.out, dataset=args.dataset, split=args.split,
                             metrics=_names(args.metrics, "--metrics"),
                             methods=_names(args.methods, "--methods"),
                             references=_published(args) if args.published else None)
    if not is_device_or_fifo(out):  # --out /dev/stdout: the PNG is the output, not followed by its name
        print(args.out)
    return 0


def _names(text: str | None, option: str) -> list[str] | None:
    if text is None:
        return None
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise CLIError(f"{option}: expected comma-separated names, got {text!r}")
    return list(dict.fromkeys(names))  # drop repeats, keep order (as evaluate --metrics)


def _published(args: Any) -> dict[str, dict[str, float]]:
    """The published LETOR 4.0 rows, checked to apply: an MQ2008 test split under letor4 (the
    convention is summary.csv's ``convention`` column or, in a file written before that column, the
    experiment's ``spec.yaml`` beside it; letor4 when neither is there)."""
    from smoothrank.experiments.report import published_baselines
    from smoothrank.plots.figures import read_summary_rows, summary_convention

    if args.split != "test":
        raise CLIError(f"--published: the published rows are test-set values; got --split {args.split}")
    convention = summary_convention(args.source) or "letor4"
    datasets = list(dict.fromkeys(row.get("dataset") for row in read_summary_rows(args.source)))
    dataset = args.dataset
    if dataset is None:
        dataset = datasets[0] if datasets else ""
    elif datasets and dataset not in datasets:  # as the figure names it (an empty file: its own error)
        raise CLIError(f"--dataset: {dataset!r} is not in {args.source}; it has {datasets}")
    rows = published_baselines([dataset], convention)
    if not rows:
        raise CLIError(f"--published: the published LETOR 4.0 rows are for MQ2008 under the letor4 "
                       f"convention; {args.source} is dataset {dataset!r} under {convention!r}")
    return rows
