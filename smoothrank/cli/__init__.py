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
import contextlib
import importlib
import os
import pkgutil
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator

from smoothrank import __version__
from smoothrank.errors import SmoothrankError, SmoothrankWarning


class CLIError(SmoothrankError):
    """A user-facing error of a sub-command: printed as ``smoothrank: error: <message>``, status 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a job scheduler, ``docker stop``), raised where Ctrl-C's interrupt would be,
    so that a command stops the same way: temporary files removed, checkpoints kept, one line."""


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    # Python's default for SIGTERM is to die on the spot: no cleanup, and an experiment's worker
    # processes would be left running. Signal handlers can only be set from the main thread.
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(_signum: int, _frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    dest: str | None = getattr(args, "positionals_anywhere", None)
    stray = [a for a in extras if a.startswith("-")] if dest is not None else extras
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extras and dest is not None:  # without a dest, every extra is stray: refused above
        setattr(args, dest, [*getattr(args, dest), *extras])
    return args


def _os_message(err: OSError) -> str:
    if err.strerror is None:
        return str(err)
    return f"{err.strerror}: {err.filename}" if err.filename is not None else err.strerror


# What to do after Ctrl-C (or SIGTERM), for the sub-commands whose work survives an interruption.
_AFTER_INTERRUPT = {
    "train": "continue with the same command and --resume",
    "experiment": "run the same command again: finished runs are kept, interrupted ones resume",
}


def _one_line_warnings(previous: Callable[..., None]) -> Callable[..., None]:
    """A ``warnings.showwarning`` for the command line: smoothrank's own warnings as one line, like
    its errors; any other warning (a library's) as ``previous`` shows it."""
    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, SmoothrankWarning):
            print(f"smoothrank: warning: {message}", file=sys.stderr if file is None else file)
        else:
            previous(message, category, filename, lineno, file, line)
    return show


def main(argv: list[str] | None = None) -> int:
    try:
        # Building the parser imports every sub-command (torch among them: seconds): Ctrl-C then is
        # the same one line as during a command.
        parser = build_parser()
        args = _parse(parser, argv)
    except KeyboardInterrupt:
        print("smoothrank: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        with warnings.catch_warnings(), _sigterm_as_interrupt():
            warnings.showwarning = _one_line_warnings(warnings.showwarning)
            status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so that a closed pipe is caught below and not at exit
        return status
    except KeyboardInterrupt as err:
        hint = _AFTER_INTERRUPT.get(args.command)
        what = "terminated" if isinstance(err, Terminated) else "interrupted"
        print(f"smoothrank: {what}" + (f"; {hint}" if hint else ""), file=sys.stderr)
        # 128 + the signal, as a shell reports a command stopped by it (Ctrl-C: SIGINT)
        return 128 + (signal.SIGTERM if isinstance(err, Terminated) else signal.SIGINT)
    except BrokenPipeError:
        # The reader went away (``smoothrank ... | head``): stop quietly, as Unix tools do. stdout
        # is pointed at devnull so that the interpreter's final flush cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, the status of a Unix tool killed by the closed pipe
    except SmoothrankError as err:
        print(f"smoothrank: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        # Missing files, permissions, a full disk: the system's message, naming the path where it
        # has one, instead of a traceback. (BrokenPipeError, an OSError too, is handled above.)
        print(f"smoothrank: error: {_os_message(err)}", file=sys.stderr)
        return 2
