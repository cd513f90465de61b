"""The command line's reference in Markdown, generated from the parsers themselves (the docs site's
``reference/cli.md`` and ``reference/configs.md`` are filled in from here when the site is built).

Every ``cog-pl`` command with its description and a table of its options (flags, what they do, defaults) comes from
:func:`cog_pl.cli.main.build_parser`; the LightningCLI commands (``extract``, ``finetune fit|test``, ``probe
fit|validate|test``) print their own ``--help``, which is kept whole.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from collections.abc import Iterator

from cog_pl.cli.configs import packaged, summary
from cog_pl.cli.main import LIGHTNING_COMMANDS, build_parser, command_module

#: The LightningCLI subcommands of a one-word LightningCLI command (``extract`` runs ``predict`` alone, unnamed).
LIGHTNING_SUBCOMMANDS = {"finetune": (("fit", "test"), None)}
WIDTH = "100"  # argparse wraps help at $COLUMNS


def _md(text: str) -> str:
    """Text for a Markdown table cell: ``|``, ``<`` and ``>`` escaped outside code spans; inside them Python-Markdown's
    tables keep a ``|`` in the cell and would show an escape literally (``fit\\|test``)."""
    parts = " ".join(text.split()).split("`")
    return "`".join(part if i % 2 else part.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
                    for i, part in enumerate(parts))


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def walk(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                                                          argparse.ArgumentParser]]:
    """Every command of ``parser``, depth first, as (the words that name it, its parser)."""
    yield words, parser
    for name, sub in _subcommands(parser).items():
        yield from walk(sub, (*words, name))


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            meta = "" if action.nargs == 0 else " " + formatter._format_args(action, action.dest.upper())
            flags = ", ".join(f"`{s}{meta}`" for s in action.option_strings)
        else:
            flags = f"`{formatter._format_args(action, action.dest)}`"
        text = formatter._expand_help(action) if action.help else ""
        if action.choices and not isinstance(action.choices, dict) and "{" not in flags:
            text += f" (one of {', '.join(map(str, action.choices))})"
        default = action.default
        if action.option_strings and default not in (None, False, argparse.SUPPRESS, []) and action.nargs != 0:
            shown = " ".join(map(str, default)) if isinstance(default, list | tuple) else str(default)
            if "default" not in text.lower():
                text += f" (default: {shown})"
        rows.append(f"| {_md(flags)} | {_md(text)} |")
    return rows


def _lightning_help(words: tuple[str, ...]) -> str:
    """The ``--help`` a LightningCLI command prints (``words``: ``("probe", "fit")``, ``("extract",)``)."""
    module = command_module(LIGHTNING_COMMANDS[words[:1] if words[0] != "probe" else words[:2]])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        module.run([*words[1:], "--help"], prog=f"cog-pl {words[0]}")
    return out.getvalue().rstrip()


def _lightning_section(words: tuple[str, ...]) -> list[str]:
    name = " ".join(words)
    module = command_module(LIGHTNING_COMMANDS[words[:1] if words[0] != "probe" else words[:2]])
    doc = (module.__doc__ or "").strip().split("\n\n")
    intro = [doc[0]] + [p for p in doc[1:] if not p.startswith("    ")]
    lines = [f"## `cog-pl {name}`", "", "A LightningCLI command: the words after it are Lightning's "
             "(`--config NAME|FILE`, `--model.*`, `--data.*`, `--trainer.*`, `--print_config`).", ""]
    lines += [" ".join(p.split()) + "\n" for p in intro]
    lines += ['??? info "All options (`--help`)"', "", "    ```text"]
    lines += [f"    {line}".rstrip() for line in _lightning_help(words).splitlines()]
    lines += ["    ```", ""]
    return lines


def cli_markdown() -> str:
    """The reference of every ``cog-pl`` command, in Markdown."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        return _cli_markdown()
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def _anchor(words: tuple[str, ...]) -> str:
    """The anchor of a command's section; a one-word LightningCLI command with subcommands: its first one's."""
    subs = LIGHTNING_SUBCOMMANDS.get(words[0], ((), None))[0] if len(words) == 1 else ()
    return "-".join(("cog-pl", *words, *subs[:1]))


def _cli_markdown() -> str:
    lightning = {words for words in LIGHTNING_COMMANDS}
    lines: list[str] = []
    for words, parser in walk(build_parser()):
        if words in lightning:
            subs = LIGHTNING_SUBCOMMANDS.get(words[0], ((), None))[0] if len(words) == 1 else ()
            for each in [(*words, sub) for sub in subs] or [words]:
                lines += _lightning_section(each)
            continue
        lines += [f"## `{' '.join(('cog-pl', *words))}`", ""]
        if parser.description:
            lines += [" ".join(parser.description.split()), ""]
        lines += ["```text", parser.format_usage().strip(), "```", ""]
        subs = {n: p for n, p in _subcommands(parser).items()}
        if subs:
            lines += ["| command | what it does |", "|---|---|"]
            helps = {a.dest: a.help for a in parser._actions if isinstance(a, argparse._SubParsersAction)
                     for a in a._choices_actions}
            lines += [f"| [`{n}`](#{_anchor((*words, n))}) | {_md(helps.get(n) or '')} |" for n in subs]
            lines.append("")
        rows = _option_rows(parser)
        if rows:
            lines += ["| option | meaning |", "|---|---|", *rows, ""]
    return "\n".join(lines)


def configs_markdown() -> str:
    """The table of the packaged configs: name, what it is for."""
    lines = ["| group | `--config` | what it is for |", "|---|---|---|"]
    for key, path in packaged().items():
        group, name = key.split("/", 1)
        lines.append(f"| {group} | `{name}` | {_md(summary(path))} |")
    return "\n".join(lines)


def methods_markdown() -> str:
    """The table of the registered evaluation methods (:mod:`cog_pl.evaluate`), in report order: name, report label,
    what it reads, its ``cog-pl run`` options, what it does."""
    import dataclasses

    from cog_pl.evaluate.options import flag
    from cog_pl.evaluate.table import get_method, list_methods

    lines = ["| `method` | report label | reads | options | what it does |", "|---|---|---|---|---|"]
    for name in list_methods():
        m = get_method(name)
        options = ", ".join(f"`{flag(m, f.name)}`" for f in dataclasses.fields(m.options)) if m.options else "–"
        lines.append(f"| `{name}` | {_md(m.title)} | {m.reads} | {options} | {_md(m.description)} |")
    return "\n".join(lines)
