"""The ``smoothrank`` command line.

Every module in this package that defines ``add_parser(subparsers)`` contributes one
sub-command; the parser it adds must set ``func`` (a callable taking the parsed namespace and
returning an exit status) with ``parser.set_defaults(func=...)``. Discovery keeps the
sub-commands independent of each other. A sub-command whose last positional takes any number of
values (``nargs="*"``) may set ``positionals_anywhere=<its dest>`` too, so that those values may
also come after options (``train c.yaml --quiet lr=1``), as ``parse_intermixed_args`` allows.
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


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    # argparse matches a sub-command's positionals once, before its first option, and leaves the
    # ones after it over; parse_intermixed_args would take them but does not support sub-commands.
    args, extras = parser.parse_known_args(argv)
    dest = getattr(args, "positionals_anywhere", None)
    stray = [a for a in extras if a.startswith("-")] if dest is not None else extras
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extras:
        setattr(args, dest, [*getattr(args, dest), *extras])
    return args


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
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
