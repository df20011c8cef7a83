"""``smoothrank predict MODEL DATA --out FILE``: score a LETOR file with a trained model."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from smoothrank.cli import CLIError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "predict", help="score a LETOR file with a trained model",
        description="Write one score per input line, in input line order (the LETOR prediction-file "
                    "format read by `smoothrank evaluate` and Eval-Score-4.0.pl), or a TREC run.")
    parser.add_argument("model", help="model file written by `smoothrank train` (run_dir/model.pt), or a "
                                      "GBDT run's model.txt (LightGBM) / model.json (XGBoost)")
    parser.add_argument("data", help="LETOR / SVMlight file to score")
    parser.add_argument("--out", required=True, help="output file")
    parser.add_argument("--format", choices=("letor", "trec"), default="letor", help="output format")
    parser.add_argument("--tag", default="smoothrank", help="run tag of a TREC run")
    parser.add_argument("--n-features", type=int, default=None,
                        help="feature count of a sparse DATA file whose largest index is below the model's")
    parser.add_argument("--regroup", action="store_true",
                        help="group the lines of a query that are apart in DATA (output keeps line order)")
    parser.add_argument("--null-value", default=None, metavar="NUMBER|nan",
                        help="LETOR 3.0's NULL feature values: read as this number (default 0, with a note "
                             "saying how many), or 'nan' to keep them missing (GBDT models only)")
    parser.set_defaults(func=run)


def _null_value(text: str | None) -> float | str | None:
    from smoothrank.data.missing import check_null_value

    if text is None or text.strip().lower() == "nan":
        return check_null_value(text, "--null-value")
    try:
        return check_null_value(float(text), "--null-value")
    except ValueError:
        raise CLIError(f"--null-value: expected a number or 'nan', got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    from smoothrank._atomic import check_destination
    from smoothrank.data import load_letor
    from smoothrank.data.missing import apply_null_value
    from smoothrank.data.writers import check_trec_tag, write_scores
    from smoothrank.errors import IndexBaseError
    from smoothrank.experiments.gbdt import booster_library
    from smoothrank.training.artifact import load_model
    from smoothrank.training.inference import scored_chunks

    # Before the model and the data are read: a bad destination (or the input itself) or tag.
    check_destination(args.out, "--out", inputs={"MODEL": args.model, "DATA": args.data})
    if args.format == "trec":
        check_trec_tag(args.tag, "--tag")
    if booster_library(args.model) is not None:
        return _write(args, _score_with_booster(args))
    loaded = load_model(args.model)
    if args.n_features is not None and args.n_features < 1:
        raise CLIError(f"--n-features: expected a positive count, got {args.n_features}")
    # The training file's index base (model.pt records it): a file guessing its own would be read
    # one column off when the two disagree (a zero-based file without any "0:" token).
    zero_based = "auto" if loaded.index_base is None else loaded.index_base == 0
    try:
        # Scoring uses no label: a real-valued or negative one is no error here (the reader still
        # refuses a label that is not a finite float32 number).
        def read(*, null_value: float) -> object:
            return load_letor(args.data, n_features=args.n_features, zero_based=zero_based,
                              regroup=args.regroup, allow_real_labels=True, allow_negative_labels=True,
                              null_value=null_value)

        dataset: Any = apply_null_value(args.data, read, _null_value(args.null_value), "--null-value",
                                        missing_ok=False)
    except IndexBaseError as err:
        # They name zero_based, which the user of predict did not set: say why.
        if zero_based == "auto":
            raise
        raise IndexBaseError(f"{err} (read with the feature indices of the model's training file, which "
                              f"start at {loaded.index_base})") from None
    if dataset.n_features != loaded.n_features:
        hint = (" (a sparse file may pass --n-features)" if dataset.n_features < loaded.n_features else "")
        raise CLIError(f"{args.data} has {dataset.n_features} features but the model {args.model} was "
                       f"trained on {loaded.n_features}{hint}")
    # Scored into a file-backed scratch array, written a range of queries at a time: no score array
    # in memory.
    write_scores(args.out, dataset, scored_chunks(loaded, dataset, source=args.data), format=args.format,
                 tag=args.tag)
    return 0


def _score_with_booster(args: argparse.Namespace) -> tuple[Any, np.ndarray]:
    """The data and its scores by a LightGBM or XGBoost model file (index base: the file's own)."""
    from smoothrank.data import load_letor
    from smoothrank.data.missing import apply_null_value
    from smoothrank.experiments.gbdt import load_booster

    booster = load_booster(args.model)
    if args.n_features is not None and args.n_features < 1:
        raise CLIError(f"--n-features: expected a positive count, got {args.n_features}")
    def read(*, null_value: float) -> object:
        return load_letor(args.data, n_features=args.n_features or booster.n_features, regroup=args.regroup,
                          allow_real_labels=True, allow_negative_labels=True, null_value=null_value)

    dataset: Any = apply_null_value(args.data, read, _null_value(args.null_value), "--null-value",
                                    missing_ok=True)
    if dataset.n_features != booster.n_features:
        raise CLIError(f"{args.data} has {dataset.n_features} features but the model {args.model} was "
                       f"trained on {booster.n_features}")
    return dataset, booster.predict(dataset)


def _write(args: argparse.Namespace, scored: tuple[Any, np.ndarray]) -> int:
    from smoothrank.data import write_predictions, write_trec_run

    dataset, scores = scored
    if args.format == "trec":
        write_trec_run(args.out, dataset, scores, tag=args.tag)
    else:
        # One score per input line, in line order, whatever order the reader grouped rows in.
        order = np.argsort(dataset.line_numbers, kind="stable")
        write_predictions(args.out, scores[order])
    return 0
