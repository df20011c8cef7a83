"""``smoothrank losses``: the registered losses, their options (with defaults) and what the registry
knows of each (family, which queries count, a closed-form Hessian diagonal)."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("losses", help="list the available losses and their options",
                                   description="List the loss registry: names usable as loss.name in a "
                                               "config, with the options (loss.options.*) and defaults.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from smoothrank import losses

    for name in losses.available():
        options = losses.options(name)
        shown = ", ".join(f"{key}={value!r}" for key, value in options.items()) or "(no options)"
        described = losses.info(name)
        counts = "positive ideal DCG" if described.relevance == "gain" else "a positive label"
        if described.distinct_labels:
            counts += ", two labels"
        extras = [described.family, f"counts queries with {counts}"]
        if described.hessian_diagonal is not None:
            extras.append("closed-form Hessian diagonal")
        print(f"{name}: {shown}  [{'; '.join(extras)}]")
    return 0
