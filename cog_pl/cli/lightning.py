"""Handing the rest of a ``cog-pl`` command line to a LightningCLI: one way, for every LightningCLI command.

``cog-pl`` picks the command (``extract``, ``finetune``, ``probe fit|validate|test``: ``LIGHTNING_COMMANDS`` in
:mod:`cog_pl.cli.main`) and gives the words after it to the command module's ``run(argv, prog)``, which builds
its :class:`CommandLineCLI`. ``sys.argv`` keeps the whole ``cog-pl`` line, because Lightning relaunches the same
command line for each DDP process; the LightningCLI parses only the words it is given, under the command's name
(``cog-pl probe fit --help`` prints ``usage: cog-pl probe fit ...``).
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.cli import LightningArgumentParser, LightningCLI


class CommandLineCLI(LightningCLI):
    """A LightningCLI that parses the words after a ``cog-pl`` command, not ``sys.argv``.

    LightningCLI warns when it is given ``args`` while ``sys.argv`` holds arguments, against parsing one command line
    by mistake for another. Here ``args`` *is* the command line, less the words that named the command; ``sys.argv``
    must stay as the user typed it for DDP's relaunch, so the warning would be given on every call.
    """

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        self.config = parser.parse_args(args)


def hand_over(cli_class: type[CommandLineCLI], argv: list[str], prog: str, **kwargs: Any) -> CommandLineCLI:
    """Run ``cli_class`` on ``argv`` (the rest of the command line), its usage and errors under the name ``prog``."""
    return cli_class(args=list(argv), parser_kwargs={"prog": prog}, **kwargs)
