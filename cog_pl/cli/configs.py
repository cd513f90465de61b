"""``cog-pl configs list|show``: the LightningCLI configs shipped inside the package, and ``--config NAME``.

The extraction, probe and fine-tuning YAML files are package data, ``cog_pl/configs/<group>/<name>.yaml`` (in the
wheel; in a clone ``configs/`` at the top is a link to the same folder). The LightningCLI commands take a packaged
config by name: ``cog-pl extract --config resnet50`` reads ``extract/resnet50.yaml``, ``cog-pl finetune fit --config
resnet50`` reads ``finetune/resnet50.yaml``; a file that exists is read as given, whatever its name.
"""

from __future__ import annotations

import argparse
import re
from importlib import resources
from pathlib import Path

from cog_pl.errors import MissingFileError, NotFoundError

#: The LightningCLI commands and the folder of packaged configs each one reads names from.
GROUPS = ("extract", "finetune", "probe")
SUFFIX = ".yaml"
CONFIG_FLAGS = ("--config", "-c")


def configs_root() -> Path:
    """``cog_pl/configs`` of the installed package (a folder on disk: a wheel is installed unpacked)."""
    return Path(str(resources.files("cog_pl") / "configs"))


def packaged(group: str | None = None) -> dict[str, Path]:
    """The packaged configs as ``{"<group>/<name>": path}``, sorted; ``group``: that group's only."""
    groups = GROUPS if group is None else (group,)
    return {f"{g}/{p.stem}": p for g in groups for p in sorted((configs_root() / g).glob(f"*{SUFFIX}"))}


def find(name: str, group: str | None = None) -> Path:
    """The packaged config ``name`` (``resnet50``, ``resnet50.yaml`` or ``extract/resnet50``); ``group`` narrows
    a bare name. A name two groups share, or none has, raises a KeyError that lists what there is."""
    stem = name.removesuffix(SUFFIX)
    table = packaged(group)
    if stem in table:
        return table[stem]
    hits = [path for key, path in table.items() if key.split("/", 1)[1] == stem]
    if len(hits) == 1:
        return hits[0]
    where = f"{group} " if group else ""
    if hits:
        raise NotFoundError(f"{name}: the name of {len(hits)} packaged configs ("
                                 f"{', '.join(k for k in table if k.endswith('/' + stem))}): give the group too")
    raise NotFoundError(f"{name}: no packaged {where}config of that name; there are: "
                             f"{', '.join(k.split('/', 1)[1] if group else k for k in table)} (cog-pl configs list)")


def resolve_config(group: str, value: str) -> str:
    """What ``--config value`` of a ``group`` command reads: ``value`` when it is a file, else the packaged config
    of that name (``NAME``, ``NAME.yaml`` or ``GROUP/NAME``). A path that is neither, or a bare name no packaged
    config has, raises naming it; anything else (an inline YAML string) goes to the LightningCLI as given."""
    if Path(value).is_file():
        return value
    table = packaged(group)
    key = value.removesuffix(SUFFIX)
    key = key if key.startswith(f"{group}/") else f"{group}/{key}"
    if key in table:
        return str(table[key])
    if "/" in value or value.endswith((SUFFIX, ".yml", ".json")):
        stem = Path(value).name.removesuffix(SUFFIX)
        hint = f"; the packaged config of that name is --config {stem}" if f"{group}/{stem}" in table else ""
        raise MissingFileError(f"--config {value}: no such file{hint}")
    if re.fullmatch(r"[\w.-]+", value):
        find(value, group)  # raises, listing the group's names
    return value


def resolve_config_args(group: str, argv: list[str]) -> list[str]:
    """``argv`` with each ``--config``/``-c`` value resolved by :func:`resolve_config`."""
    out = list(argv)
    for k, word in enumerate(out):
        if word.startswith("--config="):
            out[k] = "--config=" + resolve_config(group, word.split("=", 1)[1])
        elif k and out[k - 1] in CONFIG_FLAGS:
            out[k] = resolve_config(group, word)
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("configs", help="the extraction, probe and fine-tuning configs shipped with the package",
                       description="The LightningCLI YAML files inside the package; `cog-pl extract --config "
                                   "NAME` (and finetune, probe fit) reads one by name.")
    csub = p.add_subparsers(dest="configs_command", metavar="ACTION", required=True)
    ls = csub.add_parser("list", help="every packaged config: group, name, what it is for")
    ls.add_argument("group", nargs="?", choices=GROUPS, help="one group only")
    ls.set_defaults(func=_list)
    show = csub.add_parser("show", help="print a packaged config (copy it to change it)")
    show.add_argument("name", help="NAME or GROUP/NAME, e.g. resnet50 or extract/resnet50")
    show.add_argument("--path", action="store_true", help="print the file's path instead of its text")
    show.set_defaults(func=_show)


def summary(path: Path) -> str:
    """A config's first comment line: what it is for."""
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def _list(args: argparse.Namespace) -> int:
    table = packaged(args.group)
    width = max(map(len, table), default=10)
    for key, path in table.items():
        print(f"{key:<{width}}  {summary(path)}")
    return 0


def _show(args: argparse.Namespace) -> int:
    path = find(args.name)
    print(path if args.path else path.read_text(), end="\n" if args.path else "")
    return 0
