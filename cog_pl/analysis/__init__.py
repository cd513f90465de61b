"""Analyses the paper runs on its benchmark, from stores and result rows.

- :mod:`~cog_pl.analysis.label_noise`: missing-label noise between domains (paper Sec. 4.4).
- :mod:`~cog_pl.analysis.concepts`: per-concept accuracy against similarity; :mod:`~cog_pl.analysis.paired`:
  paired differences between two models; :mod:`~cog_pl.analysis.confusions`: the classes taken for each other.
- :mod:`~cog_pl.analysis.severity`: how far in WordNet wrong predictions land (the lowest common hypernym's height);
  :mod:`~cog_pl.analysis.intervals`: a top-1 with its bootstrap interval over test images.
"""

from cog_pl._lazy import lazy_exports

_EXPORTS = {
    "NoiseRow": ".label_noise",
    "noise_table": ".label_noise",
    "ConceptScores": ".concepts",
    "concept_scores": ".concepts",
    "PairedDifference": ".paired",
    "paired_difference": ".paired",
    "Confusion": ".confusions",
    "top_confusions": ".confusions",
    "Severity": ".severity",
    "class_hierarchy": ".severity",
    "mistake_severity": ".severity",
    "top1_interval": ".intervals",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
