"""Feature definitions beyond the paper's: which tokens of which blocks make a store's rows, chosen by name.

The paper's feature (the spec's own: a CNN's penultimate layer, a DeiT's class token) stays the default; a
definition named here replaces it (``FeatureExtractor(feature=...)``, ``cog-pl extract --model.feature``,
``cog-pl run --feature``). The name is recorded in every store made with it (meta ``feature``, and ``definition``,
which states it), so a store made by another definition is never reused or resumed. One table,
:data:`DEFINITIONS`, holds the grammar; :func:`parse_feature` is the one parser (plain Python: no torch), and
:mod:`cog_pl.models.features` builds the modules.

Vector definitions (a ViT-like backbone: anything with timm's ``forward_intermediates`` and a ``num_prefix_tokens``):

- ``cls``, ``cls_last<n>``: the class token of the last block, or of the last ``n`` blocks concatenated (oldest
  first), each after the final norm: DINOv2's ``create_linear_input`` on ``get_intermediate_layers(..., norm=True)``
  (the final norm applied to every block taken);
- ``patch_mean``: the average of the last block's patch tokens (after the final norm; register and distillation
  tokens excluded);
- ``cls_last<n>+patch_mean`` (``cls+patch_mean``): both, the patch average appended last, as DINOv2's
  ``use_avgpool`` and DINOv3's linear evaluation;
- ``mean_last<k>``: the average over the last ``k`` blocks' outputs, then over the patch tokens, without the final
  norm: AIM's ``AverageLayers(reduce=True)`` on the blocks' raw outputs (its ``features`` are appended before
  ``post_trunk_norm``). AIM has no class token; here the prefix tokens are left out.

Token definitions (any ViT-like backbone, and CNNs: the last feature map's cells as patches, its global average as
the class token) make *token stores*, float16 ``[N, T, D]``:

- ``tokens<h>x<w>`` (``tokens1x1``, ``tokens2x2``, ``tokens4x4``): the class token, then the last block's patch
  tokens (after the final norm) averaged to an ``h`` x ``w`` grid (``adaptive_avg_pool2d``), row-major:
  ``T = 1 + h * w``;
- ``tokens_full``: the class token and every patch token (``T = 1 + H * W``, 197 for ViT-B/16 at 224 px).

Sources (line by line: ``docs/reference/sources.md``; :data:`DEFINITIONS` names each definition's):
facebookresearch/dinov2 b8931f7 ``dinov2/eval/linear.py``, ``dinov2/models/vision_transformer.py``;
facebookresearch/dinov3 6876159 ``dinov3/eval/linear.py``; apple/ml-aim bd9e068 ``aim-v1/aim/v1/torch/layers.py``,
``aim-v1/aim/v1/torch/models.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cog_pl.errors import UnknownNameError
from cog_pl.registry import did_you_mean

__all__ = ["DEFINITIONS", "FeatureDefinition", "list_features", "parse_feature"]

#: The grammar of definition names, one line each: pattern -> (what it is, its source). The one list of them.
DEFINITIONS: dict[str, tuple[str, str]] = {
    "cls": ("the class token of the last block, after the final norm", "dinov2/eval/linear.py l.171-183"),
    "cls_last<n>": ("the class tokens of the last n blocks, each after the final norm, concatenated",
                    "dinov2/eval/linear.py l.171-183, n_last_blocks_list=[1, 4] l.503"),
    "patch_mean": ("the average of the last block's patch tokens, after the final norm",
                   "dinov2/eval/linear.py l.173-180 (use_avgpool)"),
    "cls_last<n>+patch_mean": ("the class tokens of the last n blocks, then the patch average (cls+patch_mean: n=1)",
                               "dinov3/eval/linear.py l.148-160"),
    "mean_last<k>": ("the average of the last k blocks' outputs (no final norm), over the patch tokens",
                     "ml-aim aim-v1/aim/v1/torch/layers.py l.324-340"),
    "tokens<h>x<w>": ("a token store: the class token, then the patch tokens averaged to an h x w grid",
                      "this benchmark (issue 40)"),
    "tokens_full": ("a token store: the class token and every patch token", "this benchmark (issue 40)"),
}
#: Names the did-you-mean of a refusal is chosen from (the grammar's usual instances).
EXAMPLES = ("cls", "cls_last4", "patch_mean", "cls+patch_mean", "cls_last4+patch_mean", "mean_last6", "tokens1x1",
            "tokens2x2", "tokens4x4", "tokens_full")
_NAME = re.compile(r"^(?:(?P<cls>cls(?:_last(?P<n>[1-9]\d*))?)(?P<avg>\+patch_mean)?|(?P<patch>patch_mean)"
                   r"|mean_last(?P<k>[1-9]\d*)|tokens(?:(?P<h>[1-9]\d*)x(?P<w>[1-9]\d*)|(?P<full>_full)))$")


@dataclass(frozen=True)
class FeatureDefinition:
    """A parsed definition name: ``cls_blocks`` class tokens (of the last blocks), ``patch_mean``, ``mean_last``
    blocks averaged, or a token store's ``grid`` (``(h, w)``; ``None`` with ``tokens`` for the full grid)."""

    name: str
    cls_blocks: int = 0
    patch_mean: bool = False
    mean_last: int = 0
    tokens: bool = False
    grid: tuple[int, int] | None = None

    @property
    def blocks(self) -> int:
        """How many of the last blocks it reads."""
        return max(self.cls_blocks, self.mean_last, 1)

    @property
    def needs_class_token(self) -> bool:
        return self.cls_blocks > 0


def parse_feature(name: str) -> FeatureDefinition:
    """The definition a name states; an unknown name is refused in one line with the closest known one.

    Example:
        >>> parse_feature("cls_last4+patch_mean").cls_blocks, parse_feature("cls_last4+patch_mean").patch_mean
        (4, True)
        >>> parse_feature("tokens2x2").grid
        (2, 2)
    """
    match = _NAME.match(name) if isinstance(name, str) else None
    if match is None:
        raise UnknownNameError(f"unknown feature definition {name!r}; {did_you_mean(str(name), EXAMPLES)}known: "
                               f"{', '.join(DEFINITIONS)} (e.g. {', '.join(EXAMPLES)})")
    g = match.groupdict()
    if g["cls"]:
        return FeatureDefinition(name, cls_blocks=int(g["n"] or 1), patch_mean=bool(g["avg"]))
    if g["patch"]:
        return FeatureDefinition(name, patch_mean=True)
    if g["k"]:
        return FeatureDefinition(name, mean_last=int(g["k"]))
    grid = None if g["full"] else (int(g["h"]), int(g["w"]))
    return FeatureDefinition(name, tokens=True, grid=grid)


def list_features() -> tuple[str, ...]:
    """The grammar's patterns (:data:`DEFINITIONS`)."""
    return tuple(DEFINITIONS)
