"""``smoothrank export MODEL --format onnx|torchscript|exported-program --out FILE``."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help="export a trained model for serving (ONNX, TorchScript, torch.export)",
        description="Write MODEL with its fitted feature transforms inside the graph: raw features in "
                    "(input 'features', float32, batch x list x n_features, and 'mask', bool, batch x list, "
                    "where the model needs it), scores out ('scores', float32, batch x list); dynamic "
                    "batch and list sizes. See docs/serving.md.")
    parser.add_argument("model", help="model file written by `smoothrank train` (run_dir/model.pt)")
    parser.add_argument("--format", choices=("onnx", "torchscript", "exported-program"), default="onnx",
                        help="onnx (needs the export extra), torchscript, or exported-program (torch.export)")
    parser.add_argument("--out", required=True, help="output file")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from smoothrank._atomic import check_destination
    from smoothrank.export import export_model

    check_destination(args.out, "--out", inputs={"MODEL": args.model})
    with_mask = export_model(args.model, args.out, format=args.format)
    inputs = "features, mask" if with_mask else "features"
    print(f"wrote {args.out} ({args.format}; inputs: {inputs}; output: scores)", file=sys.stderr)
    return 0
