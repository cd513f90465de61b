"""A method's options: its dataclass's fields as ``cog-pl run`` flags, and the values given as that dataclass.

Each field of :attr:`Method.options <cog_pl.evaluate.method.Method.options>` is the flag ``--<prefix>-<field>``
(underscores as hyphens; the prefix is the class's ``flag_prefix``, else the method's name), typed from its
annotation (``int``, ``float``, ``str``, ``bool`` as ``--x/--no-x``, ``tuple[int, ...]`` as several values, a
field's ``metadata["type"]`` or ``metadata["json"]`` otherwise), with ``metadata["help"]`` and its default in the
help. Methods that share an options class (zero-shot and the text-initialised linear probe) share its flags, which
apply to each of them that runs. ``RunConfig.method_options`` takes the same values by method name, as a dict or as
the dataclass (:func:`resolve_options`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from cog_pl.errors import CogError
from cog_pl.evaluate.method import Method

__all__ = ["add_method_options", "flag", "given_options", "option_flags", "resolve_options"]


def prefix_of(method: Method) -> str:
    """The flags' prefix of ``method``'s options: the class's ``flag_prefix``, else the method's name."""
    return str(getattr(method.options, "flag_prefix", method.name)).replace("_", "-")


def flag(method: Method, name: str) -> str:
    """The ``cog-pl run`` flag of option ``name`` of ``method``."""
    return f"--{prefix_of(method)}-{name.replace('_', '-')}"


def _dest(prefix: str, name: str) -> str:
    return f"{prefix}_{name}".replace("-", "_")


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _base(hint: Any) -> Any:
    """``X`` of ``X | None``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def _argument(f: dataclasses.Field, hint: Any) -> dict[str, Any]:
    """argparse's keywords for a field."""
    meta, base = f.metadata, _base(hint)
    default = f.default if f.default is not dataclasses.MISSING else None
    shown = ("on" if default else "off") if base is bool else (
        " ".join(map(str, default)) if isinstance(default, tuple) else default)
    help_text = meta.get("help", f.name.replace("_", " "))
    if default is not None and "(default" not in help_text:
        help_text += f" (default: {shown})"
    kw: dict[str, Any] = {"default": None, "help": help_text}
    if "metavar" in meta:
        kw["metavar"] = meta["metavar"]
    if meta.get("json"):
        kw["type"] = _json(f.name)
        kw.setdefault("metavar", "JSON")
    elif "type" in meta:
        kw["type"] = meta["type"]
    elif base is bool:
        kw["action"] = argparse.BooleanOptionalAction
    elif typing.get_origin(base) is tuple:
        kw["nargs"], kw["type"] = "+", typing.get_args(base)[0]
    elif base in (int, float, str):
        kw["type"] = base
    return kw


def _json(name: str):
    def parse(text: str) -> Any:
        try:
            return json.loads(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"{name}: not JSON ({err})") from None
    return parse


def option_flags(methods: Iterable[Method]) -> dict[type, list[Method]]:
    """The options classes of ``methods``, each with the methods that take it (in the given order)."""
    out: dict[type, list[Method]] = {}
    for m in methods:
        if m.options is not None:
            out.setdefault(m.options, []).append(m)
    return out


def add_method_options(parser: argparse.ArgumentParser, methods: Iterable[Method]) -> None:
    """A group of flags per options class of ``methods``: its fields, unset (None) unless given."""
    for cls, users in option_flags(methods).items():
        names = " ".join(m.name for m in users)
        doc = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        group = parser.add_argument_group(f"{' / '.join(m.title for m in users)} (--methods {names})", doc)
        hints = _hints(cls)
        for f in dataclasses.fields(cls):
            if f.metadata.get("cli", True):
                group.add_argument(flag(users[0], f.name), dest=_dest(prefix_of(users[0]), f.name),
                                   **_argument(f, hints[f.name]))


def given_options(args: argparse.Namespace, chosen: Iterable[Method],
                  known: Iterable[Method]) -> dict[str, dict[str, Any]]:
    """The options given on the command line, by method name, for each method of ``chosen`` (a class's flags apply to
    every chosen method that takes it); a flag of a method not chosen is refused in one line naming the methods to
    add."""
    chosen = list(chosen)
    out: dict[str, dict[str, Any]] = {}
    for cls, users in option_flags(known).items():
        prefix = prefix_of(users[0])
        values = {f.name: getattr(args, _dest(prefix, f.name), None) for f in dataclasses.fields(cls)}
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if v is not None}
        if not values:
            continue
        takers = [m for m in chosen if m.options is cls]
        if not takers:  # the method the flags are named after first
            users = sorted(users, key=lambda m: m.name.replace("_", "-") != prefix)
            flags = ", ".join(flag(users[0], k) for k in values)
            raise CogError(f"{flags}: set for a run without {' or '.join(m.name for m in users)}; add "
                           f"{users[0].name} to --methods")
        for m in takers:
            out[m.name] = dict(values)
    return out


def resolve_options(method: Method, given: Any) -> Any:
    """``method``'s options from ``given``: its dataclass as given, from a dict of its fields (an unknown key refused
    in one line naming the fields), or its defaults (None); a method without options takes none."""
    cls = method.options
    if cls is None:
        if given:
            raise CogError(f"method {method.name} takes no options, got {given!r}")
        return None
    if given is None:
        return cls()
    if isinstance(given, cls):
        return given
    if not isinstance(given, Mapping):
        raise CogError(f"options of {method.name}: give a {cls.__name__} or a dict of its fields, got {given!r}")
    names = [f.name for f in dataclasses.fields(cls)]
    bad = [k for k in given if k not in names]
    if bad:
        raise CogError(f"{method.name}: unknown option(s) {', '.join(bad)}; choose from {', '.join(names)}")
    hints = _hints(cls)
    values = {k: tuple(v) if isinstance(v, list) and typing.get_origin(_base(hints[k])) is tuple else v
              for k, v in given.items()}
    return cls(**values)
