"""What every artifact records about how it was made: the library versions and the creation time.

Result rows, level files and feature stores each carry ``versions`` and ``created`` from here, so one set of
libraries is recorded everywhere. Versions come from package metadata: nothing is imported, so asking costs no
``import torch`` in a process that does not need it.
"""

from __future__ import annotations

import datetime as dt
import functools
import platform
from typing import Any

from cog_pl.version import __version__

#: Libraries whose version shapes a result, a level file or a feature store ("absent" where not installed).
PACKAGES = ("torch", "torchvision", "timm", "lightning", "optuna", "numpy", "nltk")


@functools.cache
def _installed() -> tuple[tuple[str, str], ...]:
    from importlib.metadata import PackageNotFoundError, version

    out = [("cog_pl", __version__), ("python", platform.python_version())]
    for name in PACKAGES:
        try:
            out.append((name, version(name)))
        except PackageNotFoundError:
            out.append((name, "absent"))
    return tuple(out)


def versions(**extra: str) -> dict[str, str]:
    """cog_pl, python and :data:`PACKAGES` versions, plus ``extra`` (a data version, say the WordNet one)."""
    return {**dict(_installed()), **extra}


def created() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def provenance(**extra: str) -> dict[str, Any]:
    """``{"versions": versions(**extra), "created": created()}``, to merge into an artifact's metadata."""
    return {"versions": versions(**extra), "created": created()}
