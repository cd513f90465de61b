"""Entry point of the ``cog-pl`` command."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from cog_pl import __version__

#: Command-group modules under ``cog_pl.cli``; each defines ``register(subparsers)``.
COMMAND_MODULES = ("wordnet", "levels", "data", "features", "probe", "report", "run", "noise")
#: Commands handed whole to a LightningCLI (their options are Lightning's): the words that name them, and the module
#: whose ``run(argv, prog)`` takes the rest of the command line (:mod:`cog_pl.cli.lightning`).
LIGHTNING_COMMANDS = {
    ("extract",): "cog_pl.cli.extract",
    ("finetune",): "cog_pl.cli.finetune",
    ("probe", "fit"): "cog_pl.cli.probe_lightning",
    ("probe", "validate"): "cog_pl.cli.probe_lightning",
    ("probe", "test"): "cog_pl.cli.probe_lightning",
}
#: The one-word LightningCLI commands as ``cog-pl --help`` lists them (``cog-pl probe --help`` lists ``probe fit``...).
LIGHTNING_HELP = {
    "extract": "extract frozen features of a model for IN-1K and L1..L5 (LightningCLI predict; see --help)",
    "finetune": "fine-tune a backbone on a domain's images (LightningCLI fit/test; see fit --help)",
}
GLOBAL_FLAGS = ("-v", "--verbose")


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
    if only is None:
        for name, text in LIGHTNING_HELP.items():
            sub.add_parser(name, add_help=False, help=text)
    return parser


def _command(argv: list[str]) -> str | None:
    """The command ``argv`` names, if it names one of COMMAND_MODULES (after the global options)."""
    words = [a for a in argv if a not in GLOBAL_FLAGS]
    return words[0] if words and words[0] in COMMAND_MODULES else None


def lightning_command(argv: list[str]) -> tuple[str, str, list[str]] | None:
    """For a command line that names a LightningCLI command (after the global options): its module, its name (the
    words that name it) and the rest of the line, for the LightningCLI; None otherwise. ``probe fit`` keeps ``fit``
    in the rest: it is the LightningCLI's own subcommand."""
    words = argv[1:] if argv[:1] and argv[0] in GLOBAL_FLAGS else argv
    for names, module in LIGHTNING_COMMANDS.items():
        if tuple(words[:len(names)]) == names:
            return module, names[0], words[1:]
    return None


class CommandError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


def main(argv: list[str] | None = None) -> int:
    """Run one ``cog-pl`` command (default: the process's command line); returns its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    handed = lightning_command(argv)
    if handed:
        module, name, rest = handed
        verbose = argv[0] in GLOBAL_FLAGS
        logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s")
        importlib.import_module(module).run(rest, prog=f"cog-pl {name}")
        return 0
    parser = build_parser(only=_command(argv))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except (CommandError, ValueError, KeyError, FileNotFoundError, RuntimeError) as err:
        if args.verbose:
            raise
        msg = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"cog-pl {args.command}: error: {msg}", file=sys.stderr)
        return 2


def entry() -> None:
    """The ``cog-pl`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
