"""``--config FILE`` of ``cog-pl run`` and ``cog-pl demo``: the command's options from a YAML file.

The file is a mapping of option names to values, the names as the flags spell them without the leading dashes
(``in1k-root`` or ``in1k_root``), every flag of the command included, its methods' options among them
(``ridge-regs``, ``finetune-epochs``)::

    model: resnet50
    in1k-root: /data/in1k
    methods: [linear, knn, ridge]
    shots: [all, 1, 8]
    finetune-epochs: 5
    overwrite: true                          # a switch: true gives it, false leaves it out
    html: false                              # an on/off option: --html or --no-html
    sbatch-option: [qos=high, account=lab]   # a flag given several times: a list

The file stands for the flags it holds, in its order, where ``--config`` stands on the command line (as LightningCLI
reads its ``--config``): a flag after it overrides the file's value, a flag before it is overridden. The command line
is expanded before it is parsed (:func:`expand_config_files`), so the run records, and its SLURM jobs run, the flags
themselves, not the file. Each value is checked by the flag's own type and choices, and a name the command does not
know or a value of the wrong kind is refused in one line naming the file and the option.
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path
from typing import Any

__all__ = ["add_config_file", "expand_config_files"]

FLAG = "--config"


def add_config_file(parser: argparse.ArgumentParser, command: str) -> None:
    """``--config FILE`` on ``parser`` (of ``cog-pl <command>``); :func:`expand_config_files` reads it."""
    parser.add_argument(FLAG, metavar="FILE", action=_Unexpanded, default=None,
                        help=f"a YAML file of {command}'s options, named as the flags without dashes (e.g. "
                             "'in1k-root: /data/in1k', 'methods: [linear, knn]', 'overwrite: true'): its flags stand "
                             "where --config stands, so a flag after it overrides the file's value (docs/reference/"
                             "configs.md)")


class _Unexpanded(argparse.Action):
    """What ``--config`` does if it reaches the parser unexpanded: an abbreviation of it (``--conf``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        _refuse(parser, f"{values}: give it as {FLAG} {values}, spelt out (an abbreviation of {FLAG} is not read: "
                        "the file is read before the other options)")


def expand_config_files(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` (a whole ``cog-pl`` command line) with each ``--config FILE`` of a command that takes one replaced by
    the flags the file holds; ``parser``: the ``cog-pl`` parser, whose subcommand's options check the file."""
    command = _subparser(parser, argv)
    if command is None:
        return list(argv)
    out: list[str] = []
    words = iter(argv)
    for word in words:
        if word == FLAG:
            file = next(words, None)
            if file is None:
                _refuse(command, f"argument {FLAG}: expected one argument")
            out += _flags(command, file)
        elif word.startswith(FLAG + "="):
            out += _flags(command, word.split("=", 1)[1])
        elif word == "--":
            out += [word, *words]
        else:
            out.append(word)
    return out


def _subparser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser | None:
    """The parser of the command ``argv`` names, if that command takes ``--config FILE``."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    name = next((w for w in argv if not w.startswith("-")), None)
    command = sub.choices.get(name) if sub is not None and name is not None else None
    if command is None or not any(isinstance(a, _Unexpanded) for a in command._actions):
        return None
    return command


def _refuse(parser: argparse.ArgumentParser, message: str) -> None:
    """The one-line refusal of a config file (argparse's error without the usage above it)."""
    parser.exit(2, f"{parser.prog}: error: {message}\n")


def _read(parser: argparse.ArgumentParser, file: str) -> dict:
    import yaml

    path = Path(file)
    if not path.is_file():
        _refuse(parser, f"{FLAG} {file}: no such file")
    try:
        settings = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        where = getattr(err, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        _refuse(parser, f"{FLAG} {file}: not YAML{line} ({getattr(err, 'problem', None) or err})")
    if settings is None:
        return {}
    if not isinstance(settings, dict):
        _refuse(parser, f"{FLAG} {file}: a mapping of option names to values, not a {type(settings).__name__}")
    return settings


def _flags(parser: argparse.ArgumentParser, file: str) -> list[str]:
    """The command-line words of the options in ``file``, each value checked as its flag checks it."""
    actions = {_key(o): a for a in parser._actions for o in a.option_strings
               if o.startswith("--") and not (isinstance(a, argparse.BooleanOptionalAction) and o.startswith("--no-"))
               and not isinstance(a, (argparse._HelpAction, argparse._VersionAction, _Unexpanded))}
    out: list[str] = []
    for key, value in _read(parser, file).items():
        action = actions.get(_key(str(key)))
        if action is None:
            close = difflib.get_close_matches(_key(str(key)), actions, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            _refuse(parser, f"{FLAG} {file}: {key}: no such option of this command{hint}")
        try:
            out += _words(parser, action, value)
        except argparse.ArgumentError as err:
            _refuse(parser, f"{FLAG} {file}: {key}: {err.message}")
        except argparse.ArgumentTypeError as err:
            _refuse(parser, f"{FLAG} {file}: {key}: {err}")
    return out


def _key(name: str) -> str:
    """An option's name in a file as its flag without dashes: ``in1k-root``, ``in1k_root``, ``--in1k-root`` alike."""
    return name.lstrip("-").replace("_", "-")


def _flag(action: argparse.Action) -> str:
    return next((s for s in action.option_strings if s.startswith("--") and not s.startswith("--no-")),
                next((s for s in action.option_strings if s.startswith("--")), action.option_strings[0]))


def _text(parser: argparse.ArgumentParser, action: argparse.Action, value: Any) -> str:
    """One value as the flag's text, checked by the flag's type and choices."""
    if isinstance(value, (dict, list)):
        raise argparse.ArgumentTypeError(f"one value, not a {'mapping' if isinstance(value, dict) else 'list'}")
    text = str(value).lower() if isinstance(value, bool) else str(value)
    converted = parser._get_value(action, text)
    if action.choices is not None and converted not in action.choices:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(map(str, action.choices))}")
    return text


def _switch(value: Any, flag: str) -> bool:
    if not isinstance(value, bool):
        raise argparse.ArgumentTypeError(f"true or false (the switch {flag}), not {value!r}")
    return value


def _words(parser: argparse.ArgumentParser, action: argparse.Action, value: Any) -> list[str]:
    """The words of one option of the file (none for a value that gives nothing: null, a switch's false)."""
    flag = _flag(action)
    if value is None:
        return []
    if isinstance(action, argparse.BooleanOptionalAction):
        return [flag if _switch(value, flag) else "--no-" + flag[2:]]
    if action.nargs == 0:  # store_true and the like
        return [flag] if _switch(value, flag) else []
    if isinstance(action, argparse._AppendAction):
        return [w for item in (value if isinstance(value, list) else [value])
                for w in (flag, _text(parser, action, item))]
    if action.nargs in ("+", "*") or isinstance(action.nargs, int):
        items = value if isinstance(value, list) else [value]
        if not items and (action.nargs != "*" or type(action) is not argparse._StoreAction):
            raise argparse.ArgumentTypeError("at least one value")
        if isinstance(action.nargs, int) and len(items) != action.nargs:
            raise argparse.ArgumentTypeError(f"{action.nargs} values, not {len(items)}")
        return [flag, *(_text(parser, action, v) for v in items)]
    if action.nargs == "?" and value is True:
        return [flag]
    return [f"{flag}={_text(parser, action, value)}"]
