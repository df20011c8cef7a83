"""The ``smoothrank`` command line.

Every module in this package that defines ``add_parser(subparsers)`` contributes one
sub-command; the parser it adds must set ``func`` (a callable taking the parsed namespace and
returning an exit status) with ``parser.set_defaults(func=...)``. Discovery keeps the
sub-commands independent of each other.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from smoothrank import __version__
from smoothrank.errors import SmoothrankError


class CLIError(SmoothrankError):
    """A user-facing error of a sub-command: printed as ``smoothrank: error: <message>``, status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="smoothrank",
        description="Learning to rank by direct optimisation of smoothed rank metrics.",
    )
    parser.add_argument("--version", action="version", version=f"smoothrank {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        add = getattr(module, "add_parser", None)
        if add is not None:
            add(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so that a closed pipe is caught below and not at exit
        return status
    except BrokenPipeError:
        # The reader went away (``smoothrank ... | head``): stop quietly, as Unix tools do. stdout
        # is pointed at devnull so that the interpreter's final flush cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, the status of a Unix tool killed by the closed pipe
    except SmoothrankError as err:
        print(f"smoothrank: error: {err}", file=sys.stderr)
        return 2
    except (FileNotFoundError, IsADirectoryError, PermissionError) as err:
        # OSError's message already names the path.
        print(f"smoothrank: error: {err.strerror}: {err.filename}", file=sys.stderr)
        return 2
