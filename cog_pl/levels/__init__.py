"""Phase 0 of ImageNet-CoG: the five concept levels from WordNet similarity, seen sets, variants, benchmark files.

- :mod:`~cog_pl.levels.eligibility`: which IN-21K concepts may enter a level; :mod:`~cog_pl.levels.counts`: images.
- :mod:`~cog_pl.levels.measures`: the similarity measures (a :class:`~cog_pl.registry.Registry`).
- :mod:`~cog_pl.levels.ranking`, :mod:`~cog_pl.levels.builder`: ranking the concepts and cutting the levels; the
  level file. :mod:`~cog_pl.levels.compare`, :mod:`~cog_pl.levels.plot`: comparing and plotting level sets.
- :mod:`~cog_pl.levels.seen`: the concepts a model's pretraining covered, also from a vocabulary
  (:mod:`~cog_pl.levels.vocabulary`: MetaCLIP's entry counts, a lemma list); :mod:`~cog_pl.levels.variants`: the same
  concepts re-ranked by another measure; :mod:`~cog_pl.levels.benchmark_file`: levels for another seen set.
"""

from cog_pl._lazy import lazy_exports

_EXPORTS = {
    "build_ontology": ".ontology",
    "build_levels": ".builder",
    "write_level_file": ".builder",
    "load_level_file": ".builder",
    "check_levels": ".builder",
    "Measure": ".measures",
    "register_measure": ".measures",
    "get_measure": ".measures",
    "list_measures": ".measures",
    "unregister_measure": ".measures",
    "similarity_to_set": ".measures",
    "SeenSet": ".seen",
    "named_seen_set": ".seen",
    "resolve_seen": ".seen",
    "read_seen_file": ".seen",
    "vocabulary_seen_set": ".seen",
    "variant_levels": ".variants",
    "level_benchmark": ".benchmark_file",
    "eligible_concepts": ".eligibility",
    "level_agreement": ".compare",
    "plot_levels": ".plot"
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
