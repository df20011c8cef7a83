"""``smoothrank evaluate``: score prediction files against LETOR/SVMlight files, many in one call.

A prediction file holds one score per line, in the line order of the data file (the input of the
LETOR evaluation scripts), or is a TREC run (``qid Q0 docid rank score tag``), matched to the data
by query and document id. An experiment's output folder stands for the prediction files of its
runs (``runs/<run id>/test.pred``, or ``valid.pred`` with ``--split valid``), each scored against
the data file its run recorded. One file prints the mean metrics as a list; several print one
table, a row per file. The convention is printed with them.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from smoothrank._atomic import strict_json
from smoothrank.cli import CLIError
from smoothrank.metrics import PRESETS, evaluate_flat, get_convention, mean_metrics, parse_metric
from smoothrank.metrics.evaluate import LETOR4_METRICS, uses_gain


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "evaluate", help="evaluate prediction files (one score per line, or TREC runs) against LETOR files",
        description="Evaluate predictions against LETOR/SVMlight files under a named convention: one "
                    "file, several, or every run of an experiment's output folder, in one table.")
    parser.add_argument("--data", default=None,
                        help="LETOR/SVMlight file (plain or gzip) the prediction files score; not needed "
                             "for experiment folders, whose runs name their own")
    parser.add_argument("--predictions", required=True, nargs="+", action="extend", metavar="FILE_OR_OUT",
                        help="prediction files (one score per line, in DATA's line order; or TREC runs, "
                             "matched by qid and docid) and/or experiment output folders")
    parser.add_argument("--split", default="test", choices=("test", "valid"),
                        help="which prediction file of an experiment folder's runs (default: test)")
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


@dataclass
class _Entry:
    """One prediction file to score: its label in the table, its path, and how to get its data."""

    label: str
    path: Path
    data: str | dict[str, Any]  # --data's path, or a run's recorded data section
    split: str = "test"


def _entries(args: argparse.Namespace) -> list[_Entry]:
    from smoothrank.experiments.runner import RESULT_FILE, read_result

    entries: list[_Entry] = []
    for given in args.predictions:
        path = Path(given)
        if not path.is_dir():
            if args.data is None:
                raise CLIError(f"--data: needed to score the prediction file {given} (only experiment "
                               "folders name their own data)")
            entries.append(_Entry(str(given), path, str(args.data)))
            continue
        results = sorted((path / "runs").glob(f"*/{RESULT_FILE}"))
        if not results:
            raise CLIError(f"--predictions: {given} is a folder without finished runs "
                           f"({path / 'runs'}/<run id>/{RESULT_FILE})")
        for result_path in results:
            recorded = read_result(result_path).get("predictions", {}).get(args.split)
            if not recorded:
                raise CLIError(f"{result_path}: the run recorded no {args.split} prediction file (a run "
                               "finished before runs wrote them, or one without a test split)")
            entries.append(_Entry(result_path.parent.name, result_path.parent / recorded["file"],
                                  recorded["data"], args.split))
    return entries


class _DataCache:
    """Each data file (or run data section) read once for all the prediction files scoring it."""

    def __init__(self, args: argparse.Namespace, names: list[str]) -> None:
        self.args, self.names, self.conv = args, names, get_convention(args.convention)
        self.loaded: dict[str, Any] = {}

    def get(self, entry: _Entry) -> Any:
        from smoothrank.data import load_letor
        from smoothrank.data.dataset import check_label_gains
        from smoothrank.datasets import load_splits

        key = json.dumps(entry.data, sort_keys=True) + entry.split
        if key not in self.loaded:
            if isinstance(entry.data, str):
                dataset = load_letor(entry.data, n_features=self.args.n_features, regroup=self.args.regroup)
                where = "--data"
            else:
                dataset, where = load_splits(entry.data)[entry.split], f"{entry.label}'s data"
            if uses_gain(self.names):
                check_label_gains(dataset, where, self.conv.gain, option=f"--convention {self.conv.name}",
                                  dtype=torch.float64)
            self.loaded[key] = dataset
        return self.loaded[key]


def run(args: argparse.Namespace) -> int:
    from smoothrank.data import read_scores

    names = _metric_names(args.metrics)
    conv = get_convention(args.convention)
    if args.n_features is not None and args.n_features < 1:
        raise CLIError(f"--n-features: expected a positive count, got {args.n_features}")
    entries = _entries(args)
    cache = _DataCache(args, names)
    scored = []
    for entry in entries:
        dataset = cache.get(entry)
        per_query = evaluate_flat(read_scores(entry.path, dataset), dataset.labels, offsets=dataset.offsets,
                                  metrics=names, convention=conv, doc_ids=list(dataset.doc_ids))
        scored.append((entry, dataset, per_query, mean_metrics(per_query)))
    if len(scored) == 1 and not Path(args.predictions[0]).is_dir():
        _print_one(args, names, conv, *scored[0])
    else:
        _print_many(args, names, conv, scored)
    return 0


def _per_query_rows(dataset: Any, per_query: dict[str, torch.Tensor], names: list[str]
                    ) -> list[dict[str, Any]]:
    return [{"qid": str(qid), **{n: float(per_query[n][i]) for n in names}}
            for i, qid in enumerate(dataset.qids)]


def _print_one(args: argparse.Namespace, names: list[str], conv: Any, entry: _Entry, dataset: Any,
               per_query: dict[str, torch.Tensor], means: dict[str, float]) -> None:
    if args.format == "json":
        doc: dict[str, Any] = {
            "data": str(args.data), "predictions": str(entry.path),
            "convention": conv.name, "convention_description": conv.describe(),
            "n_queries": dataset.n_queries, "n_docs": dataset.n_docs,
            "metrics": dict(means),
        }
        if args.per_query:
            doc["per_query"] = _per_query_rows(dataset, per_query, names)
        # strict JSON: null for NaN and for an infinite value (a DCG of huge labels under lightgbm's
        # exponential gain), as compare's output
        print(strict_json(doc, indent=2))
        return
    print(f"# {conv.describe()}")
    print(f"# {dataset.n_queries} queries, {dataset.n_docs} documents: {args.data}")
    width = max(len(n) for n in names)
    for name in names:
        print(f"{name:<{width}}  {means[name]:.4f}")
    if args.per_query:
        print()
        print("\t".join(["qid", *names]))
        for row in _per_query_rows(dataset, per_query, names):
            print("\t".join([row["qid"], *(f"{row[n]:.4f}" for n in names)]))


def _print_many(args: argparse.Namespace, names: list[str], conv: Any, scored: list[Any]) -> None:
    if args.format == "json":
        rows = []
        for entry, dataset, per_query, means in scored:
            row: dict[str, Any] = {"predictions": entry.label, "file": str(entry.path),
                                   "data": str(dataset.source), "n_queries": dataset.n_queries,
                                   "n_docs": dataset.n_docs, "metrics": dict(means)}
            if args.per_query:
                row["per_query"] = _per_query_rows(dataset, per_query, names)
            rows.append(row)
        print(strict_json({"convention": conv.name, "convention_description": conv.describe(),
                           "results": rows}, indent=2))
        return
    print(f"# {conv.describe()}")
    width = max(len(e.label) for e, *_ in scored)
    print("\t".join([f"{'predictions':<{width}}", "queries", *names]))
    for entry, dataset, _, means in scored:
        print("\t".join([f"{entry.label:<{width}}", str(dataset.n_queries),
                         *(f"{means[n]:.4f}" for n in names)]))
    if args.per_query:
        for entry, dataset, per_query, _ in scored:
            print()
            print(f"# {entry.label}")
            print("\t".join(["qid", *names]))
            for row in _per_query_rows(dataset, per_query, names):
                print("\t".join([row["qid"], *(f"{row[n]:.4f}" for n in names)]))
