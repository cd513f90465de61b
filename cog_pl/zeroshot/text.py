"""The text side of zero-shot classification: a model's text tower, built by the backbone's name.

The towers live with the backbones (:mod:`cog_pl.models.text`: a backbone entry carries its text tower, read from
the same weights as its image features); this module is where the zero-shot code takes them from:
:class:`TextTower` (``encode_text(texts)`` -> (N, E), not normalised), :func:`build_text_tower`, and
:func:`text_handling` (how a tower makes its tokens, for the classifier's identity).

Example:
    >>> tower = build_text_tower("open_clip:RN50", random_weights=True)  # doctest: +SKIP
    >>> tower.encode_text(["a photo of a dog", "a photo of a cat"]).shape  # doctest: +SKIP
    torch.Size([2, 1024])
"""

from __future__ import annotations

from cog_pl.models.text import TextTower, build_text_tower, has_text_tower, list_text_towers, text_handling

__all__ = ["TextTower", "build_text_tower", "has_text_tower", "list_text_towers", "text_handling"]
