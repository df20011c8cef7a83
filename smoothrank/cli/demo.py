"""``smoothrank demo``: train several losses on bundled MQ2008 Fold1 and print a leaderboard."""

from __future__ import annotations

import argparse

from smoothrank.cli import CLIError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="train NeuralNDCG, LambdaRank, ListNet, SoftNDCG on MQ2008 and compare",
        description="Train a small MLP with several losses on the bundled LETOR 4.0 MQ2008 Fold1 "
                    "(model selection on validation), then print test NDCG@1/3/5/10, P@1 and MAP under "
                    "the official LETOR 4.0 convention next to the published LETOR 4.0 baselines.")
    parser.add_argument("--losses", default=None,
                        help="comma-separated loss names "
                             "(default: neural_ndcg,lambda_rank,list_net,soft_ndcg)")
    parser.add_argument("--epochs", type=int, default=15, help="epochs per loss (default 15)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folds", default="1",
                        help="MQ2008 folds: '1' (default), '1,3' or '1-5' (all five, as the published rows)")
    parser.add_argument("--run-dir", default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from smoothrank.training.demo import run_demo

    if args.epochs < 1:
        raise CLIError(f"--epochs: expected a positive count, got {args.epochs}")
    losses = [name.strip() for name in args.losses.split(",") if name.strip()] if args.losses else None
    run_demo(losses=losses, epochs=args.epochs, seed=args.seed, folds=_parse_folds(args.folds),
             run_root=args.run_dir, quiet=args.quiet)
    return 0


def _parse_folds(text: str) -> list[int]:
    try:
        if "-" in text:
            low, high = (int(part) for part in text.split("-", 1))
            return list(range(low, high + 1))
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CLIError(f"--folds: expected e.g. '1', '1,3' or '1-5', got {text!r}") from None
