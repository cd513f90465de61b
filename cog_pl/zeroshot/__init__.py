"""Zero-shot classification of the levels by a vision-language model's text tower.

- :mod:`~cog_pl.zeroshot.text`: :class:`TextTower`, :func:`build_text_tower` (the towers: :mod:`cog_pl.models.text`).
"""

from cog_pl._lazy import lazy_exports

_EXPORTS = {
    "TextTower": ".text",
    "build_text_tower": ".text",
    "has_text_tower": ".text",
    "list_text_towers": ".text",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
