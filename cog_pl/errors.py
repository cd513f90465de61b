"""The errors ``cog_pl`` raises for bad input, told apart from its own defects.

A :class:`CogError` says that what the user gave is wrong: an option, a file, a name, a missing package. The
``cog-pl`` command prints it in one line with exit status 2. Any other exception that reaches the command (a
``KeyError``, a ``RuntimeError``, an ``AssertionError``) is a defect of ``cog_pl``: the command prints its traceback
and a line asking for a report, exit status 1. Library code raises the most specific subclass it can; each
subclasses the builtin error that callers caught before it existed, so ``except KeyError`` keeps working.

Every error class of ``cog_pl`` is defined here, also the failures of the machine (an ``OSError`` or a SQLite error:
one line, exit status 1); the modules that raise them import them from here (and keep their old names importable).
"""

from __future__ import annotations

import sqlite3

__all__ = ["CheckpointError", "ClaimsFileError", "ClaimsFileUnusable", "CogError", "CommandError", "DiskFullError",
           "DivergedError", "DownloadError", "LabelWeightsError", "MissingDependencyError", "MissingFileError",
           "MissingWeightsError", "NotFoundError", "PredictionsError", "StoreError", "UnknownNameError",
           "UnreadableImageError", "WordNetUnavailable", "WrongTypeError"]


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


class MissingFileError(CogError, FileNotFoundError):
    """A file or folder the user named (an option, an argument, a configured path) does not exist; still a
    ``FileNotFoundError`` for the callers that catch one."""


class WrongTypeError(CogError, TypeError):
    """An argument of the wrong kind given to the API (a registered backbone that is no builder, a source that is no
    ``ImageSource``, a storage object where a path is wanted); still a ``TypeError``."""


class CommandError(CogError):
    """A user-facing error of the command line itself: printed without a traceback, exit status 2."""


# -- bad input of one kind (each a CogError: one line, exit status 2) ------------------------------------------------

class StoreError(CogError):
    """A feature store that is missing, incomplete, damaged or not the one asked for; the message says why."""


class CheckpointError(CogError):
    """A checkpoint that cannot be read or does not fit; the message names the file and the fix."""


class MissingWeightsError(CogError):
    """A model that needs weights has none (no file given, none or several in the models dir)."""


class PredictionsError(CogError):
    """Stored predictions that cannot be trusted: unreadable, of another format, or not the ones their row
    recorded; the message names the file and the row."""


class LabelWeightsError(CogError):
    """One label given weights of two digests in one output folder or results store."""


class ClaimsFileError(CogError):
    """The claims file is a folder or no SQLite database: one line naming it (``cog-pl`` exit status 2)."""


class WordNetUnavailable(CogError, RuntimeError):
    """No route could provide WordNet 3.0 (offline, no NLTK data): the message says how to install it."""


class DivergedError(CogError, RuntimeError):
    """The training loss stopped being finite: the recipe's learning rate is too high for this backbone."""


# -- failures of the machine, the network or a database (one line, exit status 1) -----------------------------------

class DiskFullError(OSError):
    """No space left for a file; the message (one line) names the file and, where known, the bytes needed."""

    def __str__(self) -> str:
        return str(self.strerror)


class DownloadError(OSError):
    """A transfer that failed; the message (one line) names the URL, why, and the ``.part`` kept to resume."""


class UnreadableImageError(OSError):
    """An image that cannot be read or decoded; the message names the file, in one line."""

    def __init__(self, message: str) -> None:
        # re-raised from a DataLoader worker, the message is the worker's traceback: keep its last line, ours
        mark = f"{type(self).__name__}: "
        lines = [line for line in str(message).splitlines() if mark in line]
        if "\n" in str(message) and lines:
            message = lines[-1].split(mark, 1)[1]
        super().__init__(message)


class ClaimsFileUnusable(sqlite3.OperationalError):
    """The claims file cannot be read or written now (read-only, locked past the timeout, a disk error): one line
    naming it (exit status 1, a failure of the machine); a heartbeat retries it."""
