"""``smoothrank demo``: train several losses on bundled MQ2008 Fold1 and print a leaderboard."""

from __future__ import annotations

import argparse
from pathlib import Path

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
    from smoothrank._config_types import SEED_MAX

    if not 0 <= args.seed <= SEED_MAX:
        raise CLIError(f"--seed: expected an integer in [0, 2**32 - 1], got {args.seed} (torch's CPU "
                       "generator keeps 32 bits of a seed)")
    losses = _parse_losses(args.losses)
    folds = _parse_folds(args.folds)
    _check_run_dir(args.run_dir)
    run_demo(losses=losses, epochs=args.epochs, seed=args.seed, folds=folds,
             run_root=args.run_dir, quiet=args.quiet)
    return 0


_FOLDS = range(1, 6)  # MQ2008 Fold1..Fold5


def _parse_losses(text: str | None) -> list[str] | None:
    if text is None:
        return None  # the defaults
    losses = [name.strip() for name in text.split(",") if name.strip()]
    if not losses:
        raise CLIError(f"--losses: no loss given (got {text!r})")
    twice = sorted({name for name in losses if losses.count(name) > 1})
    if twice:  # one run folder per loss: the second would find the first's run there
        raise CLIError(f"--losses: {', '.join(twice)} listed twice")
    return losses


def _parse_folds(text: str) -> list[int]:
    try:
        if "-" not in text:
            return [int(part) for part in text.split(",") if part.strip()]
        low, high = (int(part) for part in text.split("-", 1))
    except ValueError:
        raise CLIError(f"--folds: expected e.g. '1', '1,3' or '1-5', got {text!r}") from None
    # Bounds before expanding: a huge range would not even fit range()'s length.
    if not _FOLDS.start <= low <= high < _FOLDS.stop:
        raise CLIError(f"--folds: expected a range within 1-5, got {text!r}")
    return list(range(low, high + 1))


def _check_run_dir(text: str | None) -> None:
    """Refuse a --run-dir that cannot be a folder (empty, or under a file) before any training;
    ``run_demo`` refuses one that already holds its runs."""
    if text is None:
        return  # a temporary folder
    if not text.strip():
        raise CLIError("--run-dir: empty path")
    from smoothrank._atomic import blocking_file

    blocker = blocking_file(Path(text))
    if blocker is not None:
        raise CLIError(f"--run-dir: {blocker} is not a directory")
