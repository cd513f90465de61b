"""Entry point of the ``cog-pl`` command."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from cog_pl import __version__
from cog_pl.cli.exit import finish

#: Command-group modules under ``cog_pl.cli``; each defines ``register(subparsers)``.
COMMAND_MODULES = ("wordnet", "levels", "data", "features", "extract", "probe", "report", "run", "noise", "finetune")
#: Commands handed whole to a LightningCLI (their options are the Lightning ones).
LIGHTNING_COMMANDS = {"extract": "cog_pl.cli.extract", "finetune": "cog_pl.finetune.cli"}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``cog-pl`` parser; ``only``: register that command alone (each command module imports what its options
    need, numpy for some: a command's start should not pay for the others)."""
    parser = argparse.ArgumentParser(
        prog="cog-pl",
        description="ImageNet-CoG: measure how well a visual representation generalizes to unseen concepts.",
    )
    parser.add_argument("--version", action="version", version=f"cog-pl {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES if only is None else (only,):
        importlib.import_module(f"cog_pl.cli.{name}").register(sub)
    return parser


def _command(argv: list[str]) -> str | None:
    """The command ``argv`` names, if it names one of COMMAND_MODULES (after the global options)."""
    words = [a for a in argv if a not in ("-v", "--verbose")]
    return words[0] if words and words[0] in COMMAND_MODULES else None


class CommandError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


def main(argv: list[str] | None = None) -> int:
    """Run one ``cog-pl`` command; returns its exit status."""
    return _run(argv)[0]


def entry() -> None:
    """The ``cog-pl`` console script: :func:`main`, then a quick exit for commands that allow it."""
    finish(*_run(None))


def _run(argv: list[str] | None) -> tuple[int, bool]:
    """Exit status, and whether the command allows a quick exit (:mod:`cog_pl.cli.exit`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in LIGHTNING_COMMANDS:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        return importlib.import_module(LIGHTNING_COMMANDS[argv[0]]).run(argv[1:]), False
    parser = build_parser(only=_command(argv))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 1, False
    try:
        return int(args.func(args) or 0), getattr(args, "fast_exit", False)
    except (CommandError, ValueError, KeyError, FileNotFoundError, RuntimeError) as err:
        if args.verbose:
            raise
        msg = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"cog-pl {args.command}: error: {msg}", file=sys.stderr)
        return 2, False


if __name__ == "__main__":
    entry()
