"""Zero-shot classification of the levels by a vision-language model's text side.

- :mod:`~cog_pl.zeroshot.text`: :class:`TextTower`, :func:`build_text_tower` (the towers: :mod:`cog_pl.models.text`).
- :mod:`~cog_pl.zeroshot.names`: class name schemes (a :class:`~cog_pl.registry.Registry`): ``lemma``, ``lemmas``,
  ``lemma_gloss``, ``lemma_hypernym``, ``openai``; polysemy within a domain (:func:`shared_names`), and distinct
  prompts for the concepts that share a name (:func:`distinct_names`, applied by :func:`class_names`).
- :mod:`~cog_pl.zeroshot.prompts`: template sets (a registry): ``openai80``, ``openai7``, a CLIP_benchmark file.
- :mod:`~cog_pl.zeroshot.classifier`: the classifier (per class: normalised prompt embeddings averaged,
  renormalised) and the logits.
- :mod:`~cog_pl.zeroshot.identity`: the names, templates, shared-name rule and tokenization a row records, and the
  refusal of another's.
"""

from cog_pl._lazy import lazy_exports

_EXPORTS = {
    "ClassName": ".names",
    "DISTINCT_NAMES": ".names",
    "distinct_names": ".names",
    "NameScheme": ".names",
    "class_names": ".names",
    "get_name_scheme": ".names",
    "list_name_schemes": ".names",
    "register_name_scheme": ".names",
    "shared_names": ".names",
    "TemplateSet": ".prompts",
    "get_templates": ".prompts",
    "list_template_sets": ".prompts",
    "read_template_file": ".prompts",
    "register_template_set": ".prompts",
    "zeroshot_classifier": ".classifier",
    "zeroshot_logits": ".classifier",
    "zeroshot_identity": ".identity",
    "check_zeroshot_identity": ".identity",
    "TextTower": ".text",
    "build_text_tower": ".text",
    "has_text_tower": ".text",
    "list_text_towers": ".text",
    "text_handling": ".text",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
