"""Entry point of the ``cog-pl`` command."""

from __future__ import annotations

import argparse
import errno
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from cog_pl import console
from cog_pl.cli.config_file import expand_config_files
from cog_pl.errors import CogError, DiskFullError, UnknownNameError
from cog_pl.version import __version__

#: Command-group modules under ``cog_pl.cli``; each defines ``register(subparsers)``.
COMMAND_MODULES = ("wordnet", "levels", "data", "features", "models", "configs", "probe", "report", "run", "noise")
#: Commands handed whole to a LightningCLI (their options are Lightning's): the words that name them, and the module
#: under ``cog_pl.cli`` whose ``run(argv, prog)`` takes the rest of the command line (:mod:`cog_pl.cli.lightning`).
LIGHTNING_COMMANDS = {
    ("extract",): "extract",
    ("finetune",): "finetune",
    ("probe", "fit"): "probe_lightning",
    ("probe", "validate"): "probe_lightning",
    ("probe", "test"): "probe_lightning",
}


def command_module(name: str) -> Any:
    """The module of ``cog_pl.cli`` that ``name`` names (:data:`COMMAND_MODULES`, the values of
    :data:`LIGHTNING_COMMANDS`), imported on first use, so that a command's start pays for its own imports alone."""
    match name:
        case "wordnet":
            from cog_pl.cli import wordnet as module
        case "levels":
            from cog_pl.cli import levels as module
        case "data":
            from cog_pl.cli import data as module
        case "features":
            from cog_pl.cli import features as module
        case "models":
            from cog_pl.cli import models as module
        case "configs":
            from cog_pl.cli import configs as module
        case "probe":
            from cog_pl.cli import probe as module
        case "report":
            from cog_pl.cli import report as module
        case "run":
            from cog_pl.cli import run as module
        case "noise":
            from cog_pl.cli import noise as module
        case "extract":
            from cog_pl.cli import extract as module
        case "finetune":
            from cog_pl.cli import finetune as module
        case "probe_lightning":
            from cog_pl.cli import probe_lightning as module
        case _:
            raise UnknownNameError(f"no cog-pl command module {name!r}; known: {', '.join(COMMAND_MODULES)}")
    return module
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
        command_module(name).register(sub)
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


#: Errors in what the user gave (an option, a file, a URL, a synset): one line, exit status 2. Only cog_pl's own
#: :class:`~cog_pl.errors.CogError` counts: a plain ``ValueError``, ``TypeError`` or ``KeyError`` reaching the command
#: is a defect of cog_pl (its traceback, exit status 1), never shown as the user's error.
USAGE_ERRORS: tuple[type[BaseException], ...] = (CogError,)
#: The base error classes of libraries (module, class) whose errors say the user's configuration is wrong.
LIBRARY_USAGE_ERRORS = (("lightning.fabric.utilities.exceptions", "MisconfigurationException"),)
#: The base error classes of the database libraries and torch's out-of-memory (module, class): failures of the
#: machine, not of the input.
LIBRARY_ERRORS = (("sqlite3", "Error"), ("sqlalchemy.exc", "SQLAlchemyError"), ("optuna.exceptions", "OptunaError"),
                  ("torch.cuda", "OutOfMemoryError"))
#: Set to 1 to see the traceback of an error that is otherwise printed in one line (as ``--verbose`` does).
DEBUG_ENV = "COG_PL_DEBUG"


def _loaded(pairs: tuple[tuple[str, str], ...]) -> list[type[BaseException]]:
    """The classes of ``pairs`` whose module is already imported (this module imports none of them)."""
    return [getattr(sys.modules[module], name) for module, name in pairs
            if module in sys.modules and hasattr(sys.modules[module], name)]


def usage_errors() -> tuple[type[BaseException], ...]:
    """Errors of what the user gave: :data:`USAGE_ERRORS` and the loaded libraries' configuration errors."""
    return USAGE_ERRORS + tuple(_loaded(LIBRARY_USAGE_ERRORS))


def runtime_errors() -> tuple[type[BaseException], ...]:
    """Failures of the machine, the files or a database (permissions, a full disk, an unreadable image, SQLite,
    SQLAlchemy, Optuna's storage, a GPU out of memory): one line, exit status 1. A library's errors count only once
    it is loaded: this module imports none of them."""
    return (OSError, *_loaded(LIBRARY_ERRORS))


def error_message(err: BaseException) -> str:
    """``err`` in one line, naming the file (an OSError's filename) or the database where the error knows it."""
    if isinstance(err, KeyError) and err.args:
        return str(err.args[0])
    if isinstance(err, DiskFullError):  # names the path and the bytes needed and free
        return str(err)
    if isinstance(err, OSError) and not isinstance(err, FileNotFoundError) and err.strerror:
        where = " -> ".join(str(f) for f in (err.filename, err.filename2) if f is not None)
        what = "disk full (no space left on device)" if err.errno == errno.ENOSPC else err.strerror
        return f"{where}: {what}" if where else what
    if isinstance(err, USAGE_ERRORS):  # ours; one wrapping a library's error keeps only its first line
        return str(err).strip().split("\n")[0] if err.__cause__ is not None else str(err)
    text = " ".join(str(err).split("\n")[0].split()) or type(err).__name__  # a library's message: its first line
    if type(err).__module__.split(".")[0] in ("sqlite3", "sqlalchemy"):
        return f"database error: {text}"
    return text


#: Exit status of a command stopped by Ctrl-C (SIGINT): 128 + 2, as shells report it.
INTERRUPTED = 130
#: Commands that resume where an interrupted run stopped (finished stores and rows kept, the probe grid's claims
#: released as its cells stop).
RESUMABLE = ("run", "demo", "probe")


def interrupted_line(command: str) -> str:
    """The one line a command stopped by Ctrl-C prints."""
    if command in RESUMABLE:
        return (f"cog-pl {command}: interrupted; finished stores and rows are kept and claims released: run the same "
                "command again to resume")
    return f"cog-pl {command}: interrupted"


def _debugging(verbose: bool) -> bool:
    return verbose or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def report_errors(command: str, verbose: bool, run: Callable[[], int]) -> int:
    """Run a command; an error of what the user gave (status 2) or of the machine (status 1) is printed as one line
    ``cog-pl COMMAND: error: ...``, its traceback only with ``--verbose`` or ``COG_PL_DEBUG=1``. Ctrl-C prints one
    line, :func:`interrupted_line` (status 130). Any other exception is a defect of cog_pl: its traceback, then a
    line saying so (status 1)."""
    try:
        return run()
    except KeyboardInterrupt:  # Ctrl-C: the work stopped as asked (what it held released on the way out)
        if _debugging(verbose):
            raise
        print(interrupted_line(command), file=sys.stderr)
        return INTERRUPTED
    except SystemExit as done:  # a Lightning Trainer ends a Ctrl-C with sys.exit(1) (lightning.pytorch.trainer.call)
        if not isinstance(done.__context__, KeyboardInterrupt) or _debugging(verbose):
            raise
        print(interrupted_line(command), file=sys.stderr)
        return INTERRUPTED
    except (*usage_errors(), *runtime_errors()) as err:
        if _debugging(verbose):
            raise
        print(f"cog-pl {command}: error: {error_message(err)}", file=sys.stderr)
        return 2 if isinstance(err, usage_errors()) else 1
    except Exception as err:  # a defect: show where it happened
        if _debugging(verbose):
            raise
        traceback.print_exc(file=sys.stderr)
        print(f"cog-pl {command}: internal error ({type(err).__name__}): this is a bug in cog_pl, not in what you "
              "gave; please report it with the traceback above", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    """Run one ``cog-pl`` command (default: the process's command line); returns its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    handed = lightning_command(argv)
    if handed:
        module, name, rest = handed
        verbose = argv[0] in GLOBAL_FLAGS
        console.setup(verbose, lightning_info=True)

        def hand() -> int:
            launches = {"entry": main} if module == "extract" else {}  # its --launcher's jobs run command lines
            command_module(module).run(rest, prog=f"cog-pl {name}", **launches)
            return 0

        return report_errors(name, verbose, hand)
    parser = build_parser(only=_command(argv))
    argv = expand_config_files(parser, argv)  # run's and demo's --config FILE: the flags it holds, in its place
    args = parser.parse_args(argv)
    args.command_line = argv  # as typed: the SLURM launcher's jobs run it again, without its own options
    args.entry = main  # what they run it with (handed down: a command module never imports this one)
    console.setup(args.verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    return report_errors(args.command, args.verbose, lambda: int(args.func(args) or 0))


def entry() -> None:
    """The ``cog-pl`` console script."""
    try:
        code = main()
    except KeyboardInterrupt:  # Ctrl-C before a command started (its imports, say)
        print("cog-pl: interrupted", file=sys.stderr)
        code = INTERRUPTED
    sys.exit(code)


if __name__ == "__main__":
    entry()
