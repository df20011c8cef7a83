"""``smoothrank losses``: the registered losses and their options (with defaults)."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("losses", help="list the available losses and their options",
                                   description="List the loss registry: names usable as loss.name in a "
                                               "config, with the options (loss.options.*) and defaults.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from smoothrank import losses

    for name in sorted(losses.available()):
        options = losses.options(name)
        shown = ", ".join(f"{key}={value!r}" for key, value in options.items()) or "(no options)"
        print(f"{name}: {shown}")
    return 0
