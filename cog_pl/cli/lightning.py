"""Handing the rest of a ``cog-pl`` command line to a LightningCLI: one way, for every LightningCLI command.

``cog-pl`` picks the command (``extract``, ``finetune``, ``probe fit|validate|test``: ``LIGHTNING_COMMANDS`` in
:mod:`cog_pl.cli.main`) and gives the words after it to the command module's ``run(argv, prog)``, which builds
its :class:`CommandLineCLI`. ``sys.argv`` keeps the whole ``cog-pl`` line, because Lightning relaunches the same
command line for each DDP process; the LightningCLI parses only the words it is given, under the command's name
(``cog-pl probe fit --help`` prints ``usage: cog-pl probe fit ...``). ``--config NAME`` names a config shipped with
the package (``cog-pl extract --config resnet50``), a path a file.
"""

from __future__ import annotations

import sys
from argparse import ArgumentError
from typing import Any

from lightning.pytorch.cli import LightningArgumentParser, LightningCLI


class CommandLineCLI(LightningCLI):
    """A LightningCLI that parses the words after a ``cog-pl`` command, not ``sys.argv``.

    LightningCLI warns when it is given ``args`` while ``sys.argv`` holds arguments, against parsing one command line
    by mistake for another. Here ``args`` *is* the command line, less the words that named the command; ``sys.argv``
    must stay as the user typed it for DDP's relaunch, so the warning would be given on every call.
    """

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse ``args``; a bad option or config file prints the usage, then raises a :class:`CommandError` whose
        one-line message (jsonargparse's, its lines joined) ``cog-pl`` prints as its other errors."""
        from cog_pl.cli.main import CommandError

        for each in (parser, *getattr(self, "_subcommand_parsers", {}).values()):
            each.exit_on_error = False
        try:
            self.config = parser.parse_args(args)
        except ArgumentError as err:
            words = list(args or ())
            sub = self._subcommand_parsers.get(words[0]) if words and hasattr(self, "_subcommand_parsers") else None
            (sub or parser).print_usage(sys.stderr)
            message = " ".join(str(err).split())
            configs = [w.split("=", 1)[-1] for k, w in enumerate(words) if w.startswith("--config=")
                       or (k and words[k - 1] in ("-c", "--config"))]
            if message.startswith("Problems parsing config") and configs:
                message = f"config file {', '.join(configs)}: {message}"
            raise CommandError(message) from err

    def instantiate_classes(self) -> None:
        """Build the model, datamodule and trainer; an argument a class refuses is reported by its own message
        (jsonargparse wraps it with the union of types it tried and the whole namespace given)."""
        try:
            super().instantiate_classes()
        except ValueError as err:
            reasons = [line.strip()[2:] for line in str(err).splitlines() if line.strip().startswith("- ")
                       and not line.strip().startswith("- Expected a <class 'NoneType'>")]
            if str(err).startswith("Does not validate against") and reasons:
                raise ValueError("; ".join(reasons)) from err
            raise


def hand_over(cli_class: type[CommandLineCLI], argv: list[str], prog: str, **kwargs: Any) -> CommandLineCLI:
    """Run ``cli_class`` on ``argv`` (the rest of the command line), its usage and errors under the name ``prog``
    (``cog-pl extract``); ``--config NAME`` reads the command's packaged config of that name
    (:mod:`cog_pl.cli.configs`)."""
    from cog_pl.cli.configs import resolve_config_args

    argv = resolve_config_args(prog.split()[-1], list(argv))
    return cli_class(args=argv, parser_kwargs={"prog": prog}, **kwargs)
