"""``smoothrank bm25f build|evaluate|export``: BM25F statistics from raw text, BM25F scored with given
parameters, and a trained BM25F model's parameters out to a search engine (docs/bm25f.md).

Training is ``smoothrank train CONFIG`` with ``data.train``/``valid``/``test`` naming statistics
folders and ``model: {kind: bm25f, fields: [...]}``.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any

from smoothrank.cli import CLIError
from smoothrank.errors import SmoothrankWarning


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bm25f", help="BM25F statistics, scoring and parameter export",
                                   description="Learnable BM25F (docs/bm25f.md). Train with smoothrank train "
                                               "and a config whose model is {kind: bm25f}.")
    sub = parser.add_subparsers(dest="bm25f_command", metavar="ACTION", required=True)
    build = sub.add_parser("build", help="statistics folders from documents, queries and qrels",
                           description="Tokenize JSON Lines documents and queries (lowercase, split on "
                                       "non-alphanumerics, no stemming) and write BM25F statistics folders.")
    build.add_argument("--documents", required=True, help="JSON Lines ({\"id\": ..., field: text, ...}) or "
                       "TREC-style (<DOC><DOCNO>..</DOCNO><TITLE>..</TITLE>..</DOC>)")
    build.add_argument("--queries", required=True, action="append", metavar="[NAME=]FILE",
                       help="qid<TAB>text file; NAME=FILE (repeatable) writes OUT/NAME for each")
    build.add_argument("--qrels", required=True, help="TREC qrels: qid iteration docid relevance")
    build.add_argument("--fields", help="comma-separated fields to index, in order (default: those of "
                                        "the first document)")
    build.add_argument("--out", required=True, help="output folder")
    build.set_defaults(func=run_build)

    evaluate = sub.add_parser("evaluate", help="NDCG of BM25F with given (or default) parameters",
                              description="Score a statistics folder with BM25F and print the metrics.")
    evaluate.add_argument("stats", help="statistics folder")
    evaluate.add_argument("--params", help="bm25f_params.json (default: k1=1.2, b=0.75, w=1)")
    evaluate.add_argument("--metrics", default="ndcg@1,ndcg@3,ndcg@10,map",
                          help="comma-separated metrics (default: %(default)s)")
    evaluate.add_argument("--convention", default="letor4", choices=["letor4", "lightgbm", "trec"])
    evaluate.set_defaults(func=run_evaluate)

    export = sub.add_parser("export", help="a trained BM25F model's parameters as JSON and engine snippets",
                            description="Write bm25f_params.json and Elasticsearch/OpenSearch snippets "
                                        "(docs/bm25f.md explains where Lucene's scoring differs).")
    export.add_argument("model", help="model.pt of a run (or its run folder)")
    export.add_argument("--out", required=True, help="output folder")
    export.set_defaults(func=run_export)


def run_build(args: argparse.Namespace) -> int:
    from smoothrank.data.bm25f_builder import build_statistics

    queries: Any
    named = [q.partition("=") for q in args.queries]
    if len(named) == 1 and not named[0][1]:
        queries = args.queries[0]
    elif all(sep and name for name, sep, _ in named):
        queries = {name: path for name, _, path in named}
        if len(queries) != len(named):
            raise CLIError("--queries: a NAME given twice")
    else:
        raise CLIError("--queries: with several files, give each as NAME=FILE")
    fields = [f.strip() for f in args.fields.split(",")] if args.fields else None
    summary = build_statistics(args.documents, queries, args.qrels, args.out, fields=fields)
    for name, counts in summary.items():
        shown = ", ".join(f"{v} {k}" for k, v in counts.items())
        print(f"{Path(args.out) / name}: {shown}")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    import torch

    from smoothrank.data.bm25f import read_bm25f
    from smoothrank.models import BM25F
    from smoothrank.training.inference import evaluate_model

    data = read_bm25f(args.stats)
    dataset = data.to_dataset()
    options: dict[str, Any] = {}
    if args.params is not None:
        params = json.loads(Path(args.params).read_text(encoding="utf-8"))
        fields = params.get("fields", {}) if isinstance(params, dict) else {}
        if set(fields) != set(data.fields):
            raise CLIError(f"--params: fields {sorted(fields)}, but {args.stats} has {list(data.fields)}")
        options = {"k1": params["k1"], "weights": {f: fields[f]["weight"] for f in data.fields},
                   "b": {f: fields[f]["b"] for f in data.fields}}
    if data.feature_names:
        raise CLIError(f"{args.stats}: has query-independent features; evaluate scores BM25F alone "
                       "(score a trained model with its run instead)")
    with torch.no_grad():
        model = BM25F(dataset.n_features, fields=data.fields, **options)
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    values = evaluate_model(model, dataset, metrics=metrics, convention=args.convention)
    print(f"{args.stats} [{args.convention} convention]: "
          + "  ".join(f"{k}={v:.4f}" for k, v in values.items()))
    return 0


def run_export(args: argparse.Namespace) -> int:
    from smoothrank.models import BM25F
    from smoothrank.models.bm25f_export import write_parameters
    from smoothrank.training.artifact import load_model

    path = Path(args.model)
    if path.is_dir():
        path = path / "model.pt"
    loaded = load_model(path)
    if not isinstance(loaded.model, BM25F):
        kind = loaded.config.get("model", {}).get("kind")
        raise CLIError(f"{path}: not a BM25F model (model.kind {kind!r})")
    if loaded.model.combine is not None:
        warnings.warn(f"{path}: the model combines the BM25F score with {loaded.model.query_independent} "
                      "query-independent feature(s) in a net; the files hold the BM25F parameters only",
                      SmoothrankWarning, stacklevel=1)
    params = loaded.model.parameters_dict()
    files = write_parameters(params, args.out)
    print(json.dumps(params, indent=2))
    for path in files.values():
        print(f"wrote {path}")
    return 0
