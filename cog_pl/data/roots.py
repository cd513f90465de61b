"""One folder names the data: ``--data DIR`` stands for ``--in1k-root``, ``--in21k-root`` and ``--benchmark``.

A folder given with ``--data`` either holds a data file, :data:`DATA_FILE` (JSON: ``in1k_root``, ``in21k_root``,
``benchmark``, each a path relative to the folder or absolute, each optional; ``image_size``, the pixels of its
images where they are all one size), which ``cog-pl demo`` writes beside its miniature ImageNet
(``<out>/data/cog_data.json``: its ``in1k/``, ``in21k/``, ``benchmark_eval.json`` and its images' size, which
``cog-pl run --data`` reads them at unless ``--image-size`` is given), or is
read as ``in1k/`` and ``in21k/`` subfolders evaluated on the official ImageNet-CoG concepts. A user writes the file
for a copy of ImageNet kept elsewhere (``{"in1k_root": "/data/in1k", "in21k_root": "/data/in21k"}``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cog_pl.errors import CogError
from cog_pl.io import read_json, write_json

__all__ = ["DATA_FILE", "DataRoots", "read_data_dir", "resolve_data_option", "write_data_file"]

#: The data file of a ``--data`` folder.
DATA_FILE = "cog_data.json"
_KEYS = ("in1k_root", "in21k_root", "benchmark")


@dataclass(frozen=True)
class DataRoots:
    """The IN-1K and IN-21K roots and the benchmark file a ``--data`` folder names (None: not given), the size of its
    images where it records one, and what named them (``source``: its data file, or the folder read as ``in1k/`` and
    ``in21k/``)."""

    in1k_root: str | None
    in21k_root: str | None
    benchmark: str | None
    source: str
    image_size: int | None = None

    def line(self) -> str:
        """One line saying what the folder named."""
        parts = [f"{k.replace('_', ' ')} {v}" for k, v in zip(_KEYS, (self.in1k_root, self.in21k_root,
                                                                         self.benchmark)) if v]
        size = f", images {self.image_size} px" if self.image_size else ""
        return f"data from {self.source}: {', '.join(parts) or 'nothing'}{size}"


def read_data_dir(path: str | os.PathLike, option: str = "--data") -> DataRoots:
    """What the folder ``path`` names (see the module docstring); a folder that names nothing, a data file that is
    not an object of the known keys, or a path it names that does not exist is refused in one line."""
    root = Path(path)
    if not root.is_dir():
        raise CogError(f"{option} {root}: no such folder")
    file = root / DATA_FILE
    if file.exists():
        data: Any = read_json(file, "data file")
        if not isinstance(data, dict) or set(data) - {*_KEYS, "image_size", "about"}:
            raise CogError(f"data file {file}: expected a JSON object of {', '.join(_KEYS)} (paths) and image_size, "
                           f"got {sorted(data) if isinstance(data, dict) else type(data).__name__}")
        size = data.get("image_size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise CogError(f"data file {file}: image_size {size!r} is not a number of pixels")
        found = {}
        for key in _KEYS:
            value = data.get(key)
            if value is None:
                continue
            target = Path(value) if Path(value).is_absolute() else root / value
            if not target.exists():
                raise CogError(f"data file {file}: {key} {value} does not exist ({target})")
            found[key] = str(target)
        return DataRoots(found.get("in1k_root"), found.get("in21k_root"), found.get("benchmark"), str(file), size)
    subs = {k: root / n for k, n in (("in1k_root", "in1k"), ("in21k_root", "in21k")) if (root / n).is_dir()}
    if not subs:
        raise CogError(f"{option} {root}: holds neither {DATA_FILE} nor in1k/ or in21k/ folders; give "
                       "--in1k-root and --in21k-root, or write the data file")
    return DataRoots(*(str(subs[k]) if k in subs else None for k in _KEYS[:2]), None,
                     f"{root} (its in1k/ and in21k/)")


def write_data_file(root: str | os.PathLike, in1k_root: str | None = "in1k", in21k_root: str | None = "in21k",
                    benchmark: str | None = None, about: str | None = None, image_size: int | None = None) -> Path:
    """Write ``root``'s :data:`DATA_FILE` (atomically; paths relative to ``root`` stay relative; ``image_size``: the
    pixels of its images, where they are all one size)."""
    data: dict[str, object] = {k: v for k, v in zip(_KEYS, (in1k_root, in21k_root, benchmark)) if v is not None}
    if image_size is not None:
        data["image_size"] = int(image_size)
    if about:
        data["about"] = about
    path = Path(root) / DATA_FILE
    write_json(path, data)
    return path


def resolve_data_option(data: str | None, in1k_root: str | None, in21k_root: str | None,
                        benchmark: str | None) -> tuple[str | None, str | None, str | None, DataRoots | None]:
    """The roots and benchmark a command runs on: those ``--data`` names, or the ones given; both is refused."""
    if data is None:
        return in1k_root, in21k_root, benchmark, None
    given = [o for o, v in (("--in1k-root", in1k_root), ("--in21k-root", in21k_root), ("--benchmark", benchmark))
             if v is not None]
    if given:
        raise CogError(f"--data {data} names the roots and the benchmark; give it or {', '.join(given)}, not both")
    roots = read_data_dir(data)
    return roots.in1k_root, roots.in21k_root, roots.benchmark, roots
