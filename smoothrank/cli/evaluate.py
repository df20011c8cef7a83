"""``smoothrank evaluate``: score a prediction file against a LETOR/SVMlight file.

The prediction file holds one score per line, in the line order of the data file (the input of
the LETOR evaluation scripts). The mean metrics are printed with the convention they follow.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import torch

from smoothrank._atomic import strict_json
from smoothrank.cli import CLIError
from smoothrank.metrics import PRESETS, evaluate_flat, get_convention, mean_metrics, parse_metric
from smoothrank.metrics.evaluate import LETOR4_METRICS, uses_gain


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "evaluate", help="evaluate a prediction file (one score per line) against a LETOR file",
        description="Evaluate predictions against a LETOR/SVMlight file under a named convention.")
    parser.add_argument("--data", required=True, help="LETOR/SVMlight file (plain or gzip)")
    parser.add_argument("--predictions", required=True,
                        help="one score per line, in the data file's line order")
    parser.add_argument("--metrics", default=",".join(LETOR4_METRICS),
                        help="comma-separated, e.g. ndcg@1,ndcg@5,p@3,map,mrr (default: the LETOR 4.0 set "
                             "NDCG@1..10, P@1..10, MAP)")
    parser.add_argument("--convention", default="letor4", choices=sorted(PRESETS),
                        help="evaluation convention (default: letor4, the official LETOR 4.0 script)")
    parser.add_argument("--format", default="table", choices=("table", "json"))
    parser.add_argument("--per-query", action="store_true", help="also print each query's values")
    parser.add_argument("--n-features", type=int, default=None,
                        help="feature count of a DATA file wider than the reader infers on its own "
                             "(65536; see docs/data.md)")
    parser.add_argument("--regroup", action="store_true",
                        help="group the lines of a query that are apart in DATA (output keeps line order)")
    parser.set_defaults(func=run)


def _metric_names(text: str) -> list[str]:
    names = [m.strip().lower() for m in text.split(",") if m.strip()]
    if not names:
        raise CLIError("--metrics: no metric given")
    for name in names:
        try:
            parse_metric(name)
        except ValueError as err:
            raise CLIError(f"--{err}") from None
    return list(dict.fromkeys(names))  # drop repeats, keep order


def run(args: argparse.Namespace) -> int:
    from smoothrank.data import load_letor, read_predictions  # the data layer loads only when needed
    from smoothrank.data.dataset import check_label_gains

    names = _metric_names(args.metrics)
    conv = get_convention(args.convention)
    if args.n_features is not None and args.n_features < 1:
        raise CLIError(f"--n-features: expected a positive count, got {args.n_features}")
    dataset = load_letor(args.data, n_features=args.n_features, regroup=args.regroup)
    if uses_gain(names):
        check_label_gains(dataset, "--data", conv.gain, option=f"--convention {conv.name}",
                          dtype=torch.float64)
    predictions = read_predictions(args.predictions, expected=dataset.n_docs)
    # Prediction i belongs to the i-th data line of the file, whatever the dataset's row order.
    scores = np.empty(dataset.n_docs, dtype=np.float64)
    scores[np.argsort(dataset.line_numbers, kind="stable")] = predictions
    per_query = evaluate_flat(scores, dataset.labels, offsets=dataset.offsets, metrics=names,
                              convention=conv, doc_ids=list(dataset.doc_ids))
    means = mean_metrics(per_query)
    qids = [str(q) for q in dataset.qids]
    if args.format == "json":
        doc: dict[str, Any] = {
            "data": str(args.data), "predictions": str(args.predictions),
            "convention": conv.name, "convention_description": conv.describe(),
            "n_queries": dataset.n_queries, "n_docs": dataset.n_docs,
            "metrics": dict(means),
        }
        if args.per_query:
            doc["per_query"] = [{"qid": qid, **{n: float(per_query[n][i]) for n in names}}
                                for i, qid in enumerate(qids)]
        # strict JSON: null for NaN and for an infinite value (a DCG of huge labels under lightgbm's
        # exponential gain), as compare's output
        print(strict_json(doc, indent=2))
        return 0
    print(f"# {conv.describe()}")
    print(f"# {dataset.n_queries} queries, {dataset.n_docs} documents: {args.data}")
    width = max(len(n) for n in names)
    for name in names:
        print(f"{name:<{width}}  {means[name]:.4f}")
    if args.per_query:
        print()
        print("\t".join(["qid", *names]))
        for i, qid in enumerate(qids):
            print("\t".join([qid, *(f"{float(per_query[n][i]):.4f}" for n in names)]))
    return 0
