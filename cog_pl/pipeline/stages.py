"""The stages of a run around its evaluation methods: the data check, the extraction (and the level variants'
regrouping), the label-noise check's predictions, and what the report needs recorded beside the rows."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cog_pl.errors import CogError, MissingFileError
from cog_pl.pipeline.config import RunConfig
from cog_pl.protocol import LEVEL_OF_DOMAIN, variant_domain

__all__ = ["check", "extract", "noise", "noise_method", "record_report_inputs", "regroup", "require_stores",
           "reuse_hint", "run_seen_warnings"]
logger = logging.getLogger(__name__)


def run_seen_warnings(model: str, seen: str | None, benchmark: str | None, domains: Sequence[str]) -> list[str]:
    """:func:`~cog_pl.levels.seen.seen_warnings` for a run: the levels of ``domains`` (``cog_l1``..``cog_l5``) in
    ``benchmark`` (the official one when None), the model's registry entry saying what it saw unless ``seen`` does."""
    from cog_pl.benchmark import load_benchmark
    from cog_pl.levels.seen import seen_warnings
    from cog_pl.models import resolve_spec

    levels = [LEVEL_OF_DOMAIN[d] for d in domains if d in LEVEL_OF_DOMAIN]
    registry_seen = resolve_spec(model).seen
    if not levels or (seen is None and registry_seen is None):
        return []
    bench = load_benchmark(benchmark)
    return seen_warnings(model, seen, {lv: bench.classes(lv) for lv in levels}, registry_seen)


def reuse_hint(cfg: RunConfig) -> str:
    """For a run refused because the stores under its label were made from another weights file (``cog-pl extract
    --model.checkpoint FILE``, then ``cog-pl run`` without ``--checkpoint``, which takes the model's default
    weights): the option that reuses them, where that file is still there."""
    from cog_pl.results.labels import recorded_weights

    files = {f for f, digest, _ in recorded_weights(cfg.label, Path(cfg.out) / "features") if f and digest}
    if len(files) != 1 or cfg.checkpoint == next(iter(files)) or not Path(next(iter(files))).is_file():
        return ""
    return f"; to reuse its feature stores, run with --checkpoint {next(iter(files))}"


def record_report_inputs(cfg: RunConfig, out: Path) -> None:
    """Record in the results store what the report of its rows needs besides them, so that ``cog-pl report`` reads
    the same as this run's report: the similarity source of the concept analyses (the benchmark file's; refused when
    the store records another) and the feature stores' root."""
    from cog_pl.report.build import FEATURES_INFO
    from cog_pl.report.concepts import record_similarity_source
    from cog_pl.results import write_info

    record_similarity_source(out / "results.sqlite", cfg.benchmark)
    write_info(out / "results.sqlite", FEATURES_INFO, str((out / "features").resolve()))


def require_stores(paths: Sequence[Path]) -> None:
    """Refuse to probe before the extraction ended: every store the probes read must be complete."""
    from cog_pl.features.store import is_complete

    missing = [p for p in paths if not is_complete(p)]
    if missing:
        raise MissingFileError(f"feature store {missing[0]} is not complete ({len(missing)} of {len(paths)} are "
                               "not): run the extract stage first (cog-pl run ... --stage extract)")


def check(cfg: RunConfig) -> None:
    from cog_pl.data.check import check_data
    from cog_pl.resources import LEVELS

    levels = tuple(LEVELS[int(d[-1]) - 1] for d in cfg.domains if d != "in1k")
    report = check_data(("in1k" in cfg.domains and cfg.in1k_root) or None, (levels and cfg.in21k_root) or None,
                        levels=levels, benchmark=cfg.benchmark, in1k_source=cfg.extract.in1k_source,
                        in21k_source=cfg.extract.in21k_source, allow_missing=cfg.extract.allow_missing)
    if not report.ok:
        _hint_benchmark(cfg)
        raise CogError("the data cannot run the benchmark:\n" + report.format())
    _check_grid_on_data(cfg, report.train_per_class)
    logger.info("data check passed")


def _hint_benchmark(cfg: RunConfig) -> None:
    """The official check failed and no benchmark file was given: when a benchmark file beside the roots names
    exactly what they hold (the demo's ``data/benchmark_eval.json``), one line saying to pass it, instead of the
    list of every official synset the roots lack."""
    from cog_pl.data.check import benchmark_of_data
    from cog_pl.data.roots import DATA_FILE

    if cfg.benchmark is not None:
        return
    found = benchmark_of_data(("in1k" in cfg.domains and cfg.in1k_root) or None,
                              (any(d != "in1k" for d in cfg.domains) and cfg.in21k_root) or None)
    roots = " and ".join(r for r in (cfg.in1k_root, cfg.in21k_root) if r)
    if len(found) == 1:
        named = found[0].parent / DATA_FILE
        also = f" (or --data {found[0].parent} alone, whose {DATA_FILE} names it and the roots)" \
            if named.exists() else ""
        raise CogError(f"{roots} hold the concepts of the benchmark file {found[0]}, not the official ImageNet-CoG: "
                       f"pass --benchmark {found[0]}{also}")
    if found:
        raise CogError(f"{roots} hold the concepts of the benchmark files {', '.join(map(str, found))}, not the "
                       "official ImageNet-CoG: pass the one to evaluate with --benchmark FILE")


def _check_grid_on_data(cfg: RunConfig, train_per_class: dict[str, dict[str, int]]) -> None:
    """Every shot setting of the grid against the train images the data check counted, before any extraction: the
    probes would refuse a class with fewer rows than N (:func:`~cog_pl.data.sampling.check_shots`) only after it.
    A level variant regroups the five levels' concepts, so its classes are theirs."""
    from cog_pl.data.sampling import check_shot_counts
    from cog_pl.resources import concept_name

    levels = {w: n for d, per in train_per_class.items() if d in LEVEL_OF_DOMAIN for w, n in per.items()}
    for domain, _, shots in cfg.probe_grid:
        counts = train_per_class.get(domain, levels if "@" in domain else {})
        if not counts:
            continue
        check_shot_counts(counts, cfg.protocol.val_fraction, shots, unit="train images",
                          option="--variant-shots" if "@" in domain else "--shots",
                          name=lambda wnid, domain=domain: f"{wnid} ({concept_name(wnid)}) of {domain}")


def extract(cfg: RunConfig, out: Path) -> tuple[list[Path], str, Any, bool]:
    """The feature stores of every domain (complete ones skipped); returns them, the model's name, the transform
    the images were read with (``cfg.transform``, by default the backbone's own), which fine-tuning reuses, and
    whether this process is global rank zero (under ``srun`` every task runs this, one rank each)."""
    import lightning as L

    from cog_pl.callbacks.progress import StageProgress
    from cog_pl.console import filter_known_warnings
    from cog_pl.extract.datamodule import ExtractionDataModule
    from cog_pl.extract.module import FeatureExtractor

    opts = cfg.extract
    filter_known_warnings()
    trainer = L.Trainer(**opts.trainer_kwargs(), logger=False, enable_checkpointing=False,
                        enable_model_summary=False, enable_progress_bar=False,
                        callbacks=[StageProgress(f"extracting {cfg.label}")] if cfg.progress else [])

    def data(transform: Any) -> ExtractionDataModule:
        return ExtractionDataModule(out=str(out / "features"), model_name=cfg.label, in1k_root=cfg.in1k_root,
                                    in21k_root=cfg.in21k_root, domains=cfg.domains, transform=transform,
                                    batch_size=opts.batch_size, num_workers=opts.num_workers, benchmark=cfg.benchmark,
                                    on_error=opts.on_error, max_skipped=opts.max_skipped, overwrite=cfg.overwrite,
                                    in1k_source=opts.in1k_source, in21k_source=opts.in21k_source,
                                    allow_missing=opts.allow_missing, decode=opts.decode)

    kept = _kept_without_weights(cfg, data, trainer)
    if kept is not None:
        return kept[0], cfg.label, kept[1], trainer.is_global_zero
    model = FeatureExtractor(cfg.model, cfg.checkpoint, **cfg.checkpoint_kwargs, name=cfg.name,
                             random_weights=cfg.random_weights, feature=cfg.feature, transform=cfg.transform)
    transform = cfg.transform or model.transform_config
    dm = data(transform)
    if trainer.strategy.root_device.type == "cuda":  # NHWC convolutions on tensor cores: a layout, not a change
        model.set_backbone(model.backbone, channels_last=True)  # of the protocol
    # the datamodule's setup asks the stores' plan once (cog_pl.extract.stores), as `cog-pl extract` does; the
    # writer settles it and fills its targets (none left: the loop is skipped)
    trainer.predict(model, datamodule=dm, return_predictions=False)  # (the plan names each store it skips, once)
    stores = [dm.store_path(d, s) for d in cfg.domains for s in ("train", "test")]
    return stores, model.model_name, transform, trainer.is_global_zero


def _kept_without_weights(cfg: RunConfig, data: Any, trainer: Any) -> tuple[list[Path], Any] | None:
    """A rerun whose stores are all complete and were made by this run's inputs, decided without reading the
    checkpoint's tensors (:func:`~cog_pl.extract.module.planned_store_meta`: the network on the meta device, the
    weights by the file's digest, checked by the same plan as an extraction): the stores and the transform, the
    load skipped. None (the extraction loads the weights and decides) when there is no file, a store is not
    complete, or the plan without the weights cannot say every store is kept (a store of other inputs is refused
    by the extraction that follows, naming what differs). ``data``: the run's datamodule for a transform; the
    Trainer gives the precision and the device (the decode path), as it gives them to the extraction."""
    from cog_pl.extract.module import planned_store_meta
    from cog_pl.extract.stores import plan_extraction
    from cog_pl.features.plan import Action
    from cog_pl.features.store import is_complete

    paths = [p for p in cfg.store_paths(cfg.label) if p.parent.name in cfg.domains]
    if cfg.checkpoint is None or cfg.overwrite or not all(is_complete(p) for p in paths):
        return None
    try:
        meta, transform, dim = planned_store_meta(cfg.model, cfg.checkpoint, **cfg.checkpoint_kwargs, name=cfg.name,
                                                  transform=cfg.transform, feature=cfg.feature, label=cfg.label,
                                                  precision=str(trainer.precision))
        dm = data(transform)
        dm.device = trainer.strategy.root_device  # (the extraction's datamodule asks its Trainer)
        plan = plan_extraction(dm, meta)
    except Exception as err:  # (the extraction decides, with the weights, and says why)
        logger.debug("stores not decided without the weights (%s): the checkpoint is read", err)
        return None
    if any(t.store.action is not Action.SKIP for t in plan.stores):
        return None
    if trainer.is_global_zero:
        plan.settle(dim)  # (nothing to finish: the kept stores tidied, as an extraction does)
    logger.info("nothing to extract: all %d stores under %s are complete, made by these weights (sha256 %s); "
                "the checkpoint was not loaded", len(plan.stores), paths[0].parent.parent, meta["weights_sha256"][:12])
    return paths, transform


def regroup(cfg: RunConfig, out: Path, model_name: str) -> list[Path]:
    """The stores of each level variant, regrouped from the level stores (finished ones skipped)."""
    from cog_pl.features.regroup import SPLITS, regroup_variant
    from cog_pl.features.store import is_complete
    from cog_pl.levels.measures import get_measure

    root = out / "features"
    todo = [m for m in cfg.variants if cfg.overwrite or not all(
        is_complete(root / model_name / variant_domain(d, m) / s) for d in LEVEL_OF_DOMAIN for s in SPLITS)]
    onto = None
    if any(get_measure(m).wordnet for m in todo):  # one WordNet ontology for every WordNet measure
        from cog_pl.levels.builder import build_ontology

        onto = build_ontology()
    paths = []
    for measure in cfg.variants:
        result = regroup_variant(root, model_name, measure=measure, onto=onto, overwrite=cfg.overwrite)
        logger.info("level variant %s: %d stores written, %d already there (%s)", measure, len(result.written),
                    len(result.skipped), result.level_file)
        paths += [root / model_name / d / s for d in result.domains for s in SPLITS]
    return paths


def noise_method(cfg: RunConfig) -> str | None:
    """The method of ``cfg.methods`` whose IN-1K row the label-noise check makes again (its table flag), if any."""
    from cog_pl.evaluate import get_method

    return next((m for m in cfg.methods if get_method(m).noise_predictions), None)


def noise(cfg: RunConfig, out: Path, model_name: str) -> None:
    """The label-noise check's predictions of the report (:func:`cog_pl.analysis.label_noise.store_noise_predictions`):
    the IN-1K linear probe of the first seed, made again from its all-data row, on each level's test images;
    skipped where stored from the same row."""
    from cog_pl.analysis.label_noise import store_noise_predictions
    from cog_pl.results import get_row
    from cog_pl.results.predictions import read_noise_predictions

    targets = [d for d in cfg.domains if d in LEVEL_OF_DOMAIN]
    row = get_row(out / "results.sqlite", (model_name, noise_method(cfg), "in1k", None, cfg.seeds[0]))
    if not targets or row is None or not isinstance(row.get("predictions"), dict):
        return
    from cog_pl.errors import PredictionsError

    try:
        if all(read_noise_predictions(out / "results.sqlite", row, d) is not None for d in targets):
            logger.info("label-noise predictions of %s exist, made from the same row: skipped", model_name)
            return
    except PredictionsError:  # made from an earlier row: made again below
        pass
    device = row.get("device", "cpu") if str(row.get("device", "cpu")).startswith("cpu") or _cuda() else "cpu"
    store_noise_predictions(out / "features", out / "results.sqlite", row, targets, device=device)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


