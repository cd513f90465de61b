"""Argparse types and option groups shared by several ``cog-pl`` commands (no heavy imports: parsing stays fast)."""

from __future__ import annotations

import argparse
import sys

from cog_pl.argtypes import at_least  # below the cli: the cluster launcher's options use it too
from cog_pl.defaults import MAX_SKIPPED, NUM_WORKERS

__all__ = ["MAX_SKIPPED", "NUM_WORKERS", "add_deprecated_alias", "add_skip_policy", "at_least", "deprecation_line",
           "loader_workers_value", "parse_max_skipped"]

#: The release that removes the old spellings :func:`add_deprecated_alias` accepts.
REMOVED_IN = "0.2"


def loader_workers_value(text: str) -> int | str:
    """``--num-workers``: ``auto`` or a count of at least 0 (:data:`cog_pl.defaults.NUM_WORKERS`)."""
    if text != "auto" and not text.isdigit():
        raise argparse.ArgumentTypeError(f"loader workers {text!r}: use 'auto' or a count of at least 0")
    return text if text == "auto" else int(text)


def parse_max_skipped(text: str) -> float:
    """``--max-skipped``: a fraction in [0, 1) or a count >= 1 (:func:`cog_pl.data.imagenet.skip_budget`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a fraction in [0, 1) or a count >= 1") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a fraction in [0, 1) or a count >= 1, not negative")
    return value


def add_skip_policy(parser: argparse.ArgumentParser | argparse._ArgumentGroup, on_error_help: str) -> None:
    """``--on-error {fail,skip}`` and ``--max-skipped``: what an unreadable image does."""
    parser.add_argument("--on-error", choices=("fail", "skip"), default="fail", help=on_error_help)
    parser.add_argument("--max-skipped", type=parse_max_skipped, default=MAX_SKIPPED,
                        help=f"with --on-error skip, a split fails past this many unreadable images: below 1 a "
                             f"fraction of the split (default {MAX_SKIPPED}, rounded up), else a count")


def deprecation_line(old: str, new: str) -> str:
    """The one line an old spelling prints: which option replaces it, and when the old one goes."""
    return f"cog-pl: warning: {old} is deprecated, use {new} ({old} goes in cog_pl {REMOVED_IN})"


class _DeprecatedSpelling(argparse.Action):
    """An old spelling of an option: sets the new option's value and prints :func:`deprecation_line` once."""

    def __init__(self, option_strings: list[str], dest: str, new: str, nargs: int | str | None = None,
                 const: object = None, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=nargs, const=const, **kwargs)
        self.new = new
        self.warned = False

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        if not self.warned:
            print(deprecation_line(option_string or self.option_strings[0], self.new), file=sys.stderr)
            self.warned = True
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


class _NoLongerNeeded(argparse.Action):
    """A flag whose behaviour became the default: accepted for one release, prints one line saying so."""

    def __init__(self, option_strings: list[str], dest: str, why: str, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=False, help=argparse.SUPPRESS, **kwargs)
        self.why = why

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        flag = option_string or self.option_strings[0]
        print(f"cog-pl: warning: {flag} is deprecated and does nothing: {self.why} ({flag} goes in cog_pl "
              f"{REMOVED_IN})", file=sys.stderr)
        setattr(namespace, self.dest, True)


def add_no_longer_needed(parser: argparse.ArgumentParser | argparse._ArgumentGroup, flag: str, why: str) -> None:
    """Accept ``flag``, whose behaviour is now always on, for one release; hidden from ``--help``."""
    parser.add_argument(flag, action=_NoLongerNeeded, why=why)


def add_deprecated_alias(parser: argparse.ArgumentParser | argparse._ArgumentGroup, old: str,
                         new: argparse.Action) -> argparse.Action:
    """Accept ``old``, an option's former spelling, for one release: it takes the values ``new`` (the action
    ``add_argument`` returned) takes, sets the same destination and prints one line naming ``new``; hidden from
    ``--help`` and the CLI reference.

    Example:
        >>> p = argparse.ArgumentParser()
        >>> add_deprecated_alias(p, "--device", p.add_argument("--probe-device", default="auto")) and None
        >>> p.parse_args(["--device", "cpu"]).probe_device  # prints the deprecation line to stderr
        'cpu'
    """
    kwargs: dict = {"dest": new.dest, "help": argparse.SUPPRESS, "default": argparse.SUPPRESS, "nargs": new.nargs,
                    "const": new.const}
    if new.nargs != 0:
        kwargs.update(type=new.type, choices=new.choices, metavar=new.metavar)
    return parser.add_argument(old, action=_DeprecatedSpelling, new=new.option_strings[0], **kwargs)
