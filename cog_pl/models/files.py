"""Where the paper's published files live on a user's machine: ``<models dir>/<model>/<file>``.

``cog-pl models download NAME DIR`` puts a file there and records it beside it (``<file>.download.json``: the model,
the URL, the file's SHA-256), which makes the file the model's published one for its label
(:mod:`cog_pl.models.label`); ``cog-pl run --model NAME`` without ``--checkpoint`` takes it from there. The models dir
is ``$COG_PL_MODELS``, else ``~/.cache/cog_pl/models``. A model that needs weights and has none is refused
(:func:`resolve_checkpoint`): random weights only on request.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from cog_pl.errors import MissingWeightsError
from cog_pl.models.records import RECORD_SUFFIX
from cog_pl.models.registry import check_open_clip_name, import_open_clip, parse_model_name
from cog_pl.models.zoo import PAPER_MODELS, resolve_spec

logger = logging.getLogger(__name__)

#: How each caller spells the options of :func:`resolve_checkpoint`'s refusal: (a file, random weights).
RUN_OPTIONS = ("--checkpoint FILE", "--random-weights")
EXTRACT_OPTIONS = ("--model.checkpoint FILE (checkpoint=)", "--model.random_weights true (random_weights=True)")


def models_dir(given: str | os.PathLike | None = None) -> Path:
    """The folder of downloaded model files: ``given``, ``$COG_PL_MODELS`` or ``~/.cache/cog_pl/models``."""
    if given:
        return Path(given)
    return Path(os.environ.get("COG_PL_MODELS") or Path.home() / ".cache" / "cog_pl" / "models")


def model_folder(name: str, root: str | os.PathLike | None = None) -> Path:
    return models_dir(root) / resolve_spec(name).name


def _candidates(folder: Path) -> list[Path]:
    """The weights files of a model's folder: not a partial download, not a download record."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.endswith((".part", RECORD_SUFFIX)))


def find_checkpoint(name: str, root: str | os.PathLike | None = None) -> Path | None:
    """A paper model's file in the models dir: its published file name, else the one file its folder holds."""
    spec = resolve_spec(name)
    if spec.name not in PAPER_MODELS or spec.published is None:
        return None
    folder = model_folder(name, root)
    named = folder / spec.published.file
    if named.is_file():
        return named
    files = _candidates(folder)
    return files[0] if len(files) == 1 else None


def default_checkpoint(name: str, root: str | os.PathLike | None = None) -> str | None:
    """The checkpoint ``cog-pl run`` uses when none is given: the model's file in the models dir, if there."""
    found = find_checkpoint(name, root)
    if found is not None:
        logger.info("checkpoint of %s: %s (from the models dir)", name, found)
        return str(found)
    return None


def resolve_checkpoint(model: str, checkpoint: str | os.PathLike | None = None, random_weights: bool = False,
                       root: str | os.PathLike | None = None, options: tuple[str, str] = RUN_OPTIONS) -> str | None:
    """The weights file ``model`` runs with, decided once for ``cog-pl run``, ``cog-pl extract`` and the Python API.

    ``checkpoint`` when given; else, for a paper model, its file in the models dir (``root``, default
    :func:`models_dir`); None for random weights (``random_weights``) and for networks that bring their own
    (:func:`~cog_pl.models.label.needs_weights`). Anything else is refused in one line naming
    ``cog-pl models download NAME``, the file option, the folder searched (and the files there when they are
    several) and the random-weights option (``options``: how the caller spells the last two).
    """
    from cog_pl.models.label import is_own_builder, needs_weights

    file_option, random_option = options
    if checkpoint is not None:
        if random_weights:
            raise MissingWeightsError(f"{random_option.split()[0]} and {file_option.split()[0]} {checkpoint}: give "
                                      "one of them")
        return str(checkpoint)
    spec = resolve_spec(model)
    if random_weights or not needs_weights(spec):
        return None
    if spec.name in PAPER_MODELS and spec.published is not None:
        found = default_checkpoint(model, root)
        if found is not None:
            return found
        folder = model_folder(model, root)
        files = _candidates(folder)
        where = (f"{len(files)} files in {folder} ({', '.join(p.name for p in files)}) and none is "
                 f"{spec.published.file}" if files else f"no file in {folder}")
        raise MissingWeightsError(f"{model} needs weights and has none: {where}; fetch the published file with "
                                  f"cog-pl models download {spec.name}, give one with {file_option}, or pass "
                                  f"{random_option} for random initialisation")
    source, rest = parse_model_name(model)
    if source == "open_clip":  # an unknown model is no question of weights
        check_open_clip_name(rest)
        known = import_open_clip().list_pretrained_tags_by_model(rest)
        tags = ", ".join(known[:6]) + (f" and {len(known) - 6} more" if len(known) > 6 else "") if known else "none"
        raise MissingWeightsError(f"{model} is built without weights (open_clip's pretrained=None): give a file or one "
                                  f"of its pretrained tags ({tags}) with {file_option}, or pass {random_option} for "
                                  "random initialisation")
    if is_own_builder(spec):  # cog_pl's own architectures; cog-pl demo pretrains the demo's files
        builder = spec.builder if isinstance(spec.builder, str) else spec.arch.removeprefix("external:")
        demo = f" (cog-pl demo writes OUT/data/{spec.name}.pt)" if spec.group == "demo" else ""
        raise MissingWeightsError(f"{model} is built without weights ({builder} initialises it at random): give a "
                                  f"file with {file_option}{demo}, or pass {random_option} for random "
                                  "initialisation")
    raise MissingWeightsError(f"{model} is built without weights (timm's pretrained=False, torchvision's "
                              f"weights=None): give a file with {file_option}, or pass {random_option} for random "
                              "initialisation")
