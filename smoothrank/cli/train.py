"""``smoothrank train CONFIG [KEY=VALUE ...]``: train a ranker as described by a config file."""

from __future__ import annotations

import argparse
import sys

from smoothrank.cli import CLIError
from smoothrank.training.config import load_config


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train", help="train a ranking model from a config file",
        description="Train a ranking model. Every config option can be overridden with a dotted "
                    "KEY=VALUE argument, e.g. optimizer.lr=0.0005 model.hidden=[32,16]. The run directory "
                    "receives config.yaml, metrics.jsonl, checkpoint.pt, model.pt and summary.json.")
    parser.add_argument("config", help="YAML (.yaml/.yml) or TOML (.toml) config file")
    parser.add_argument("overrides", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--run-dir", help="run directory (default: output.run_dir of the config)")
    parser.add_argument("--resume", action="store_true", help="continue the interrupted run in the run dir")
    parser.add_argument("--quiet", action="store_true", help="no progress bar, no summary")
    # KEY=VALUE overrides may also follow the options (see smoothrank.cli.main).
    parser.set_defaults(func=run, positionals_anywhere="overrides")


def run(args: argparse.Namespace) -> int:
    # Validate everything (config, loss options, data files) before the run directory is created.
    if args.run_dir is not None and not args.run_dir.strip():
        raise CLIError("--run-dir: expected a directory path, got an empty one")
    config = load_config(args.config, args.overrides)
    from smoothrank.training.checkpoint import MODEL_FILE
    from smoothrank.training.distributed import process_group
    from smoothrank.training.trainer import train

    # Under torchrun (WORLD_SIZE > 1 in the environment) the processes train as one group; process 0
    # writes the run folder and prints.
    with process_group(config.training.device, timeout_s=config.training.distributed_timeout) as group:
        main = group is None or group.is_main
        result = train(config, run_dir=args.run_dir, resume=args.resume, quiet=args.quiet or not main)
    if not args.quiet and main:
        convention = config.evaluation.convention
        how = (f"selected by validation {config.evaluation.select_by}" if result.valid_metrics
               else "the last epoch: no validation split to select by")
        print(f"best epoch {result.best_epoch} of {len(result.history)} ({how})")
        for split, values in (("valid", result.valid_metrics), ("test", result.test_metrics)):
            if values:
                shown = "  ".join(f"{k}={v:.4f}" for k, v in values.items())
                print(f"{split} [{convention} convention]: {shown}")
        if result.run_dir is not None:  # train() sets it
            print(f"model: {result.run_dir / MODEL_FILE}", file=sys.stdout)
    return 0
