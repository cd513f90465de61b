"""The errors ``cog_pl`` raises for bad input, told apart from its own defects.

A :class:`CogError` says that what the user gave is wrong: an option, a file, a name, a missing package. The
``cog-pl`` command prints it in one line with exit status 2. Any other exception that reaches the command (a
``KeyError``, a ``RuntimeError``, an ``AssertionError``) is a defect of ``cog_pl``: the command prints its traceback
and a line asking for a report, exit status 1. Library code raises the most specific subclass it can; each
subclasses the builtin error that callers caught before it existed, so ``except KeyError`` keeps working.
"""

from __future__ import annotations

__all__ = ["CogError", "MissingDependencyError", "NotFoundError", "UnknownNameError"]


class CogError(ValueError):
    """What the user gave is wrong (an option, a file, a name): shown as one line, not as a traceback.

    Example:
        >>> err = CogError("--shots 0: must be at least 1")
        >>> isinstance(err, ValueError)  # callers that catch ValueError still do
        True
    """


class NotFoundError(CogError, KeyError):
    """A name the user gave (a synset, an image, a packaged config) is not where it was looked up."""

    def __str__(self) -> str:  # a KeyError quotes its message; this one reads as a sentence
        return str(self.args[0]) if self.args else ""


class MissingDependencyError(CogError, ImportError):
    """An optional package that a feature needs is not installed; the message says what to install."""


class UnknownNameError(CogError):
    """A name that no registry holds (a backbone, a similarity measure, an image source, a probe method); the message
    suggests the closest known name."""
