"""A model's whole evaluation: data check, extraction of the six domains, every probe, the report.

With ``variants`` (``wup``, ``jcn``, ``text``, ...), the level variants are probed too: their stores are regrouped
from the five level stores (:mod:`cog_pl.features.regroup`, no extraction) and probed as domains ``cog_l<i>@<name>``
with ``variant_seeds`` and ``variant_shots`` (all data by default), which the report compares with the official levels.

With ``methods`` (``("linear", "knn")``), every domain is also evaluated by the other probe methods
(:mod:`cog_pl.probe.methods`: ``knn``, the weighted k-NN classifier on the linear probe's samples), which the report
sets beside the linear probe.

With ``finetune`` (keyword arguments of :func:`cog_pl.finetune.compare.finetune_domains`: recipe, epochs, precision,
...), the backbone is also fine-tuned on every domain (paper App. C.2; rows of method ``finetune``, ``finetune_seeds``)
and the report sets the probes against it.

After the probes, the IN-1K probe of the first seed is made again from its row and applied to each level's test
images (``noise_predictions``: the label-noise check, from which the report names the seen concept each unseen
concept is most often taken for).

Each stage resumes: complete feature stores are skipped and interrupted ones continued, each only when made by the
same model, weights, precision, transform and data (else refused; ``overwrite`` replaces them); result rows that
exist are skipped and interrupted Optuna studies continued from their storage; the report is recomputed from rows.
``stage`` runs one stage of :data:`STAGES` alone (the jobs of the SLURM launcher, :mod:`cog_pl.pipeline.cluster`):
``probe`` needs the stores complete, ``report`` rows. Under a distributed extraction (``srun`` tasks, Lightning's DDP)
every rank extracts and only global rank zero goes on to the later stages.

The package is the run layer: this module's stages, and the SLURM launcher that runs them as jobs
(:mod:`cog_pl.pipeline.cluster`)."""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cog_pl.defaults import MAX_SKIPPED, NUM_WORKERS
from cog_pl.errors import CogError, MissingFileError
from cog_pl.protocol import (
    DOMAINS,
    LEVEL_OF_DOMAIN,
    PAPER,
    FeatureProtocol,
    ProbeProtocol,
    check_domains,
    check_grid,
    named_protocol,
    variant_domain,
)

if TYPE_CHECKING:
    from cog_pl.probe.tuner import SearchPlan

__all__ = ["FINETUNE_SET_BY_RUN", "STAGES", "ExtractOptions", "ProbeOptions", "RunConfig", "RunSummary",
           "format_summary", "run", "run_seen_warnings"]
logger = logging.getLogger(__name__)

#: The stages of a run, in order (``RunConfig.stage`` runs one alone).
STAGES = ("check", "extract", "probe", "finetune", "report")
#: Arguments of :func:`~cog_pl.finetune.compare.finetune_domains` the run sets itself, hence no ``finetune`` keys.
FINETUNE_SET_BY_RUN = ("model", "checkpoint", "results", "domains", "in1k_root", "in21k_root", "benchmark",
                       "transform", "seed", "progress", "overwrite", "label")


def _is_whole_tar(root: str) -> bool:
    """Whether ``root`` is IN-21K's one outer tar (:mod:`cog_pl.data.whole_tar`), read in place like a folder."""
    from cog_pl.data.whole_tar import find_whole_tar

    return Path(root).is_file() and bool(find_whole_tar(Path(root)))


@dataclass
class ExtractOptions:
    """The extraction's Lightning Trainer and loaders (Lightning's meanings); the protocol's batch and precision."""

    devices: Any = "auto"
    accelerator: str = "auto"
    precision: str = FeatureProtocol().precision  # or "auto" (cog_pl.device.resolve_precision)
    strategy: str = "auto"
    num_nodes: int = 1
    batch_size: int = FeatureProtocol().batch_size
    num_workers: int | str = NUM_WORKERS  # "auto": the cores this process may run on (device.loader_workers)
    decode: str = "pil"  # pil, cpu, gpu or auto (cog_pl.extract.decode); recorded in every store and row
    on_error: str = "fail"  # an unreadable image: "fail" naming it, or "skip" it (recorded in its store's meta.json)
    max_skipped: float = MAX_SKIPPED  # with "skip": at most this fraction of a split (or, >= 1, this many images)
    in1k_source: str = "auto"  # how the images are stored (cog_pl.data.sources), "auto": detected from the root
    in21k_source: str = "auto"
    allow_missing: float = 0  # images a split lists but the source lacks that are tolerated (0: refused)

    def trainer_kwargs(self) -> dict[str, Any]:
        """The Trainer's options, ``"auto"`` accelerator and precision resolved
        (:func:`cog_pl.device.trainer_options`)."""
        from cog_pl.device import trainer_options

        return {**trainer_options(self.accelerator, self.devices, self.precision), "strategy": self.strategy,
                "num_nodes": self.num_nodes}


@dataclass
class ProbeOptions:
    """The probes' search (protocol trials and epochs, :class:`~cog_pl.probe.tuner.SearchPlan` mode, trial batch and
    precision) and the device they run on."""

    trials: int | None = None  # None: the named protocol's (the paper's: 30)
    epochs: int | None = None  # None: the named protocol's (the paper's: 100)
    mode: str = "fast"  # or "exact": trials one at a time, as published
    device: str = "auto"  # cog_pl.device.resolve_device
    precision: str = "auto"  # "auto", "32-true" or "bf16-mixed" (SearchPlan)
    trial_batch: int | None = None  # None: SearchPlan's
    workers: int | str | None = None  # N or "auto": worker processes per grid (cog_pl.probe.workers); None: this one
    stale_after: float | None = None  # seconds until a silent claim is taken over (SearchPlan); None: SearchPlan's
    name: str = PAPER  # the named protocol (cog_pl.protocol.PROTOCOLS) recorded in the rows: "paper" or "quick"

    @property
    def protocol(self) -> ProbeProtocol:
        """The named protocol (by default the published one) with these trials and epochs."""
        return named_protocol(self.name).probe_protocol(self.trials, self.epochs)

    def plan(self) -> SearchPlan:
        from cog_pl.probe.tuner import SearchPlan

        batch = {} if self.trial_batch is None else {"trial_batch": self.trial_batch}
        if self.stale_after is not None:
            batch["stale_after"] = self.stale_after
        return SearchPlan(mode=self.mode, precision=self.precision, **batch)


@dataclass
class RunConfig:
    """What ``cog-pl run`` does; every field has the protocol's value by default. One options object per stage:
    ``extract``, ``probe`` and ``finetune`` (keyword arguments of :func:`~cog_pl.finetune.compare.finetune_domains`,
    its Trainer's ``devices``/``accelerator``/``precision`` among them; None: no fine-tuning).

    Example:
        >>> cfg = RunConfig(model="dino", in1k_root="/data/in1k", in21k_root="/data/in21k", seeds=(22,),
        ...                 probe=ProbeOptions(trials=10))  # doctest: +SKIP
    """

    model: str
    in1k_root: str | None
    in21k_root: str | None
    out: str = "cog_run"
    checkpoint: str | None = None
    trust_checkpoint: bool = False  # read a checkpoint safe loading refuses (its code runs); recorded in the stores
    checkpoint_prefix: str | None = None  # how a user's checkpoint is read: build_backbone's prefix, key_map, in_order
    checkpoint_key_map: dict[str, str] | None = None
    checkpoint_in_order: bool = False
    domains: tuple[str, ...] = DOMAINS
    seeds: tuple[int, ...] | None = None  # None: the named protocol's (probe.name; the paper's five)
    shots: tuple[int | None, ...] | None = None  # None: the named protocol's (the paper's: all, 1 to 128)
    benchmark: str | None = None
    transform: Any = None  # None: the backbone's own
    extract: ExtractOptions = field(default_factory=ExtractOptions)
    probe: ProbeOptions = field(default_factory=ProbeOptions)
    check: bool = True
    baseline: str | None = None
    progress: bool = True
    variants: tuple[str, ...] = ()  # level variants to probe besides the official levels, e.g. ("wup", "text")
    variant_seeds: tuple[int, ...] | None = None  # None: the same seeds as the official levels
    variant_shots: tuple[int | None, ...] = (None,)
    finetune: dict[str, Any] | None = None  # finetune_domains keyword arguments; None: no fine-tuning
    finetune_seeds: tuple[int, ...] | None = None  # None: the first of the seeds (finetune_seed_values)
    #: attentive_images_domains keyword arguments (cog_pl.finetune.attentive_images), e.g. {"preset": "vjepa"}: the
    #: attentive probe trained on augmented images, on the run's seeds and shots; None: not run
    attentive_images: dict[str, Any] | None = None
    overwrite: bool = False  # replace what earlier runs made (feature stores: extracted and regrouped again)
    seen: str | None = None  # the model's pretraining label set (named set or file): warned of where levels hold it
    methods: tuple[str, ...] = ("linear",)  # probe methods on every domain (cog_pl.probe.methods), e.g. + "knn"
    # a probe method's own options, by method name, handed to its run and check: {"attentive": {"preset": "capi"},
    # "zeroshot": {"names": "lemma", "templates": "openai80"}} (cog_pl.probe.zeroshot.ZeroShotOptions)
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    report: bool = True  # write the report at the end (False: the caller writes one, e.g. the demo for two models)
    html: bool = True  # the report also as report.html (cog_pl.report.html)
    noise_predictions: bool = True  # the label-noise check's predictions for the report (IN-1K probe on the levels)
    stage: str | None = None  # one of STAGES alone; None: every stage in turn
    storage: str | None = None  # the probes' Optuna storage (database URL, journal or SQLite file); None: out/optuna.db
    name: str | None = None  # the label of stores, rows and report (cog_pl.models.label); None: from the weights
    random_weights: bool = False  # a network without a file initialised at random (labelled <name>@random)
    models_dir: str | None = None  # where a paper model's file is looked for without checkpoint; None: $COG_PL_MODELS
    feature: str | None = None  # a feature definition (cog_pl.models.definitions); None: the paper's feature

    @property
    def label(self) -> str:
        """The name of this run's stores (``features/<label>/``), rows and report lines: ``name``, else the paper
        name for the published file, ``<name>@<stem>`` for other weights of a paper model's network,
        ``<name>@random`` for random weights (:func:`cog_pl.models.label.model_label`)."""
        file = Path(self.checkpoint) if self.checkpoint else None
        stamp = (file.stat().st_size, file.stat().st_mtime_ns) if file is not None and file.is_file() else None
        return _label_of(self.model, self.checkpoint, self.name, self.random_weights, stamp)

    @property
    def checkpoint_kwargs(self) -> dict[str, Any]:
        """How the checkpoint is read, as ``FeatureExtractor`` and ``FineTuneClassifier`` take it."""
        return {"prefix": self.checkpoint_prefix, "key_map": self.checkpoint_key_map,
                "in_order": self.checkpoint_in_order, "trust_checkpoint": self.trust_checkpoint}

    @property
    def variant_domains(self) -> tuple[str, ...]:
        """``cog_l1@wup`` .. ``cog_l5@wup`` for each variant."""
        return tuple(variant_domain(d, m) for m in self.variants for d in LEVEL_OF_DOMAIN)

    @property
    def finetune_seed_values(self) -> tuple[int, ...]:
        """The seeds of the fine-tuning runs: ``finetune_seeds``, by default the first of ``seeds``."""
        return tuple(self.seeds[:1] if self.finetune_seeds is None else self.finetune_seeds)

    @property
    def protocol(self) -> ProbeProtocol:
        """The probe protocol of the run: the published values with the probe options' trials and epochs."""
        return self.probe.protocol

    @property
    def study_storage(self) -> str:
        """Where the probes' Optuna studies live: ``storage``, by default ``optuna.db`` under ``out``."""
        return self.storage or str(Path(self.out) / "optuna.db")

    @property
    def probe_grid(self) -> list[tuple[str, tuple[int, ...], tuple[int | None, ...]]]:
        """Every probed domain with its seeds and shot settings: the domains, then the level variants'."""
        grid = [(d, tuple(self.seeds), tuple(self.shots)) for d in self.domains]
        variant_seeds = tuple(self.seeds if self.variant_seeds is None else self.variant_seeds)
        return grid + [(d, variant_seeds, tuple(self.variant_shots)) for d in self.variant_domains]

    def store_paths(self, model_name: str) -> list[Path]:
        """The train and test feature stores the probes read: every domain's, then the level variants'."""
        root = Path(self.out) / "features" / model_name
        return [root / d / s for d in (*self.domains, *self.variant_domains) for s in ("train", "test")]

    def __post_init__(self) -> None:
        if self.stage is not None and self.stage not in STAGES:
            raise CogError(f"stage {self.stage!r}: choose from {', '.join(STAGES)}")
        named = named_protocol(self.probe.name)
        self.seeds = named.seeds if self.seeds is None else tuple(self.seeds)
        self.shots = named.shots if self.shots is None else tuple(self.shots)
        self.protocol  # noqa: B018 - refuses bad trials/epochs now, not after extraction
        for name, seeds in (("seeds", self.seeds), ("variant_seeds", self.variant_seeds),
                            ("finetune_seeds", self.finetune_seeds)):
            if seeds is not None:
                check_grid(seeds, names=(name, "shots"))
        self._check_devices()
        check_domains(self.domains)
        if self.seen is not None:
            from cog_pl.levels.seen import resolve_seen

            resolve_seen(self.seen)  # a bad --seen is refused before any work
        from cog_pl.probe.methods import list_probe_methods

        unknown = [m for m in self.methods if m not in list_probe_methods()]
        if unknown or not self.methods:
            from cog_pl.errors import UnknownNameError

            raise UnknownNameError(f"methods: unknown probe method(s) {', '.join(unknown) or '(none given)'}; choose "
                                   f"from {', '.join(list_probe_methods())}")
        if set(self.method_options) & {"attentive", "mlp"}:
            from cog_pl.probe.attentive import settings_of

            for name in set(self.method_options) & {"attentive", "mlp"}:
                settings_of(name, **self.method_options[name])  # a bad preset or width is refused before any work
        self._check_method_options()
        for name, shots in (("shots", self.shots), ("variant_shots", self.variant_shots)):
            bad_shots = [s for s in shots if s is not None and not (isinstance(s, int) and s > 0)]
            if bad_shots:
                raise CogError(f"invalid shot value(s) {bad_shots} in {name}: use 'all' (None) or positive "
                               f"integers (protocol: {', '.join(map(str, ProbeProtocol().shots))})")
        if self.variants:
            from cog_pl.levels.measures import get_measure, list_measures

            bad = [v for v in self.variants if v not in list_measures()]
            if bad:
                raise CogError(f"unknown level variant(s) {', '.join(bad)}; choose from "
                               f"{', '.join(list_measures())}")
            for v in self.variants:
                get_measure(v).require(f"the level variant {v!r}", f"or drop {v!r} from the variants")
            lacking = [d for d in LEVEL_OF_DOMAIN if d not in self.domains]
            if lacking:
                raise CogError(f"level variants regroup the features of all five levels; add {', '.join(lacking)} "
                               "to the domains")
        needs_in1k = "in1k" in self.domains
        needs_in21k = any(d != "in1k" for d in self.domains)
        for flag, need, root in (("--in1k-root", needs_in1k, self.in1k_root),
                                 ("--in21k-root", needs_in21k, self.in21k_root)):
            if need and not root:
                raise CogError(f"{flag} is required for the domains {', '.join(self.domains)}")
            if need and not Path(root).is_dir() and not (flag == "--in21k-root" and _is_whole_tar(root)):
                raise MissingFileError(f"{flag} {root} is not a folder" + (
                    " nor an IN-21K whole tar (fall11_whole.tar, winter21_whole.tar.gz)" if flag == "--in21k-root"
                    else ""))
        if self.finetune is not None:
            self._check_finetune()
        if self.attentive_images is not None:
            self._check_attentive_images()
        self._check_feature()
        self._resolve_weights()

    def _check_feature(self) -> None:
        """Refuse an unknown feature definition, and a token definition with a method that reads one vector per
        image, before any work."""
        if self.feature is None:
            return
        from cog_pl.methods import get_method, token_methods
        from cog_pl.models.definitions import parse_feature

        if not parse_feature(self.feature).tokens:
            return
        vectors = [m for m in self.methods if not get_method(m).tokens]
        if vectors:
            raise CogError(f"--feature {self.feature}: a token definition makes token stores, which "
                           f"{', '.join(vectors)} cannot read; methods that take token stores: "
                           f"{', '.join(token_methods()) or 'none registered'}")

    def _check_method_options(self) -> None:
        """Refuse options of a method not run, and zero-shot's bad names, templates or a model without a text tower,
        before any work."""
        idle = [m for m in self.method_options if m not in self.methods]
        if idle:
            raise CogError(f"options of {', '.join(idle)} given for a run without it: add it to --methods")
        if "zeroshot" in self.methods:
            from cog_pl.probe.zeroshot import ZeroShotOptions, require_text_tower

            options = ZeroShotOptions(**self.method_options.get("zeroshot", {}))
            require_text_tower(options.backbone or self.model)
        if "linear_text_init" in self.methods:  # the linear probe started from the text classifier
            from cog_pl.probe.text_init import require_text_tower as require_text_init
            from cog_pl.probe.zeroshot import ZeroShotOptions

            options = ZeroShotOptions(**self.method_options.get("linear_text_init", {}))
            require_text_init(options.backbone or self.model)

    def _resolve_weights(self) -> None:
        """The weights file, decided before any work: ``checkpoint``, else a paper model's file in ``models_dir``;
        a model that needs weights and has none is refused unless ``random_weights``
        (:func:`cog_pl.models.files.resolve_checkpoint`); a bad ``name`` is refused too."""
        from cog_pl.models.files import resolve_checkpoint
        from cog_pl.models.label import check_label

        if self.name is not None:
            check_label(self.name)
        self.checkpoint = resolve_checkpoint(self.model, self.checkpoint, self.random_weights, self.models_dir)

    def _check_devices(self) -> None:
        """Refuse a probe mode, device or precision, or an extraction precision, before any work."""
        from cog_pl.device import resolve_device, resolve_precision

        try:
            self.probe.plan()
            resolve_device(self.probe.device)
        except CogError as err:
            raise CogError(f"probe options: {err}") from None
        try:
            resolve_precision(self.extract.precision, "cpu")
        except CogError as err:
            raise CogError(f"extraction options: {err}") from None

    def _check_attentive_images(self) -> None:
        """Refuse an ``attentive_images`` option or preset before any work."""
        from cog_pl.finetune.attentive_images import attentive_images_domains
        from cog_pl.models.poolers import POOLER_PRESETS

        allowed = [k for k in inspect.signature(attentive_images_domains).parameters
                   if k not in ("model", "checkpoint", "results", "domains", "in1k_root", "in21k_root", "benchmark",
                                "transform", "seeds", "shots", "overwrite", "label")]
        bad = [k for k in self.attentive_images if k not in allowed]
        if bad:
            raise CogError(f"attentive_images: unknown option(s) {', '.join(bad)}; choose from {', '.join(allowed)}")
        preset = self.attentive_images.get("preset")
        if preset is not None and preset not in POOLER_PRESETS:
            raise CogError(f"--attentive-images {preset!r}: choose a preset from {', '.join(POOLER_PRESETS)}")

    def _check_finetune(self) -> None:
        """Refuse a ``finetune`` option, recipe key or precision the fine-tuning would fail on after the probes."""
        from cog_pl.finetune.compare import check_options, finetune_domains

        params = inspect.signature(finetune_domains).parameters
        allowed = [k for k in params if k not in FINETUNE_SET_BY_RUN]
        bad = [k for k in self.finetune if k not in allowed]
        if bad:
            raise CogError(f"finetune: unknown option(s) {', '.join(bad)}; choose from {', '.join(allowed)}")
        try:
            check_options(self.finetune.get("precision", params["precision"].default), self.finetune.get("recipe"))
        except CogError as err:
            raise CogError(f"finetune: {err}") from None
        if not self.finetune_seed_values:
            raise CogError("finetune_seeds: give at least one seed")


@functools.lru_cache(maxsize=32)
def _label_of(model: str, checkpoint: str | None, name: str | None, random_weights: bool,
              stamp: tuple[int, int] | None) -> str:
    """:func:`cog_pl.models.label.model_label`, once per file's version (``stamp``: size, mtime; it reads the
    checkpoint's digest)."""
    from cog_pl.models.label import model_label

    return model_label(model, checkpoint, name, random_weights)


@dataclass
class RunSummary:
    out: Path
    stores: list[Path]
    rows_written: int
    rows_total: int
    report: dict[str, Path]
    seconds: dict[str, float]
    lead: bool = True  # False on the other ranks of a distributed extraction, which end after it


def run(cfg: RunConfig) -> RunSummary:
    """A model's whole evaluation, as ``cog-pl run`` does it: data check, extraction, probes, fine-tuning, report.

    Args:
        cfg: what to run; ``cfg.stage`` runs that stage alone. Finished stores and result rows are skipped, so a
            second call resumes.

    Returns:
        Where everything was written (stores, results, report) and what each stage did.

    Example:
        >>> from cog_pl import RunConfig, run
        >>> summary = run(RunConfig(model="resnet50", checkpoint="resnet50-19c8e357.pth", in1k_root="/data/in1k",
        ...                         in21k_root="/data/in21k", out="runs/resnet50"))  # doctest: +SKIP
    """
    import optuna

    from cog_pl.models import resolve_spec
    from cog_pl.results import check_results_file

    resolve_spec(cfg.model)  # an unknown model fails before any work
    check_results_file(Path(cfg.out) / "results.sqlite")  # so does a results file that cannot take the rows
    from cog_pl.models.build import weights_file
    from cog_pl.results.labels import LabelWeightsError, check_label_weights

    try:
        check_label_weights(cfg.label, weights_file(cfg.model, cfg.checkpoint), features=Path(cfg.out) / "features",
                            results=Path(cfg.out) / "results.sqlite", overwrite=cfg.overwrite)  # before any work
    except LabelWeightsError as err:
        raise LabelWeightsError(f"{err}{_reuse_hint(cfg)}") from None
    if (Path(cfg.out) / "results.sqlite").is_file():  # and one whose rows were made on another benchmark
        _record_report_inputs(cfg, Path(cfg.out))
    for warning in run_seen_warnings(cfg.model, cfg.seen, cfg.benchmark, cfg.domains):
        logger.warning("warning: %s", warning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = Path(cfg.out)
    seconds: dict[str, float] = {}

    def runs(stage: str) -> bool:
        return cfg.stage in (None, stage)

    model_name, transform, stores = cfg.label, cfg.transform, cfg.store_paths(cfg.label)
    if cfg.check and runs("check"):
        t = time.perf_counter()
        _check(cfg)
        seconds["check"] = time.perf_counter() - t
    if runs("extract"):
        t = time.perf_counter()
        stores, model_name, transform, lead = _extract(cfg, out)
        seconds["extract"] = time.perf_counter() - t
        if not lead:  # another rank of a distributed extraction: rank zero does the rest
            return RunSummary(out, stores, 0, 0, {}, seconds, lead=False)
        if cfg.variants:
            t = time.perf_counter()
            stores += _regroup(cfg, out, model_name)
            seconds["regroup"] = time.perf_counter() - t
    written = 0
    if runs("probe") or (cfg.report and runs("report")):
        _record_report_inputs(cfg, out)
    if runs("probe"):
        if cfg.stage == "probe":
            _require_stores(stores)
        t = time.perf_counter()
        written = _probe(cfg, out, model_name)
        seconds["probe"] = time.perf_counter() - t
        if cfg.noise_predictions and "in1k" in cfg.domains and _noise_method(cfg) is not None:
            t = time.perf_counter()
            _noise(cfg, out, model_name)
            seconds["label-noise predictions"] = time.perf_counter() - t
    if cfg.finetune is not None and runs("finetune"):
        t = time.perf_counter()
        written += _finetune(cfg, out, transform or _backbone_transform(cfg))
        seconds["finetune"] = time.perf_counter() - t
    if cfg.attentive_images is not None and runs("finetune"):  # it reads images, as fine-tuning does
        t = time.perf_counter()
        written += _attentive_images(cfg, out, transform or _backbone_transform(cfg))
        seconds["attentive probe on images"] = time.perf_counter() - t
    from cog_pl.report.build import write_report
    from cog_pl.results import count_rows

    report = {}
    if cfg.report and runs("report"):
        report = write_report(out / "results.sqlite", out / "report", baseline=cfg.baseline, html=cfg.html)
    return RunSummary(out, stores, written, count_rows(out / "results.sqlite"), report, seconds)


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


def _reuse_hint(cfg: RunConfig) -> str:
    """For a run refused because the stores under its label were made from another weights file (``cog-pl extract
    --model.checkpoint FILE``, then ``cog-pl run`` without ``--checkpoint``, which takes the model's default
    weights): the option that reuses them, where that file is still there."""
    from cog_pl.results.labels import recorded_weights

    files = {f for f, digest, _ in recorded_weights(cfg.label, Path(cfg.out) / "features") if f and digest}
    if len(files) != 1 or cfg.checkpoint == next(iter(files)) or not Path(next(iter(files))).is_file():
        return ""
    return f"; to reuse its feature stores, run with --checkpoint {next(iter(files))}"


def _record_report_inputs(cfg: RunConfig, out: Path) -> None:
    """Record in the results store what the report of its rows needs besides them, so that ``cog-pl report`` reads
    the same as this run's report: the similarity source of the concept analyses (the benchmark file's; refused when
    the store records another) and the feature stores' root."""
    from cog_pl.report.build import FEATURES_INFO
    from cog_pl.report.concepts import record_similarity_source
    from cog_pl.results import write_info

    record_similarity_source(out / "results.sqlite", cfg.benchmark)
    write_info(out / "results.sqlite", FEATURES_INFO, str((out / "features").resolve()))


def _require_stores(paths: Sequence[Path]) -> None:
    """Refuse to probe before the extraction ended: every store the probes read must be complete."""
    from cog_pl.features.store import is_complete

    missing = [p for p in paths if not is_complete(p)]
    if missing:
        raise MissingFileError(f"feature store {missing[0]} is not complete ({len(missing)} of {len(paths)} are "
                               "not): run the extract stage first (cog-pl run ... --stage extract)")


def _backbone_transform(cfg: RunConfig) -> Any:
    """The transform the extraction reads images with, for a stage that runs without it (fine-tuning alone)."""
    from cog_pl.extract.module import FeatureExtractor

    return FeatureExtractor(cfg.model, cfg.checkpoint, **cfg.checkpoint_kwargs, name=cfg.name,
                            random_weights=cfg.random_weights).transform_config


def _check(cfg: RunConfig) -> None:
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


def _extract(cfg: RunConfig, out: Path) -> tuple[list[Path], str, Any, bool]:
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


def _regroup(cfg: RunConfig, out: Path, model_name: str) -> list[Path]:
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


def _noise_method(cfg: RunConfig) -> str | None:
    """The method of ``cfg.methods`` whose IN-1K row the label-noise check makes again (its table flag), if any."""
    from cog_pl.probe.methods import get_probe_method

    return next((m for m in cfg.methods if get_probe_method(m).noise_predictions), None)


def _noise(cfg: RunConfig, out: Path, model_name: str) -> None:
    """The label-noise check's predictions of the report (:func:`cog_pl.analysis.label_noise.store_noise_predictions`):
    the IN-1K linear probe of the first seed, made again from its all-data row, on each level's test images;
    skipped where stored from the same row."""
    from cog_pl.analysis.label_noise import store_noise_predictions
    from cog_pl.results import get_row
    from cog_pl.results.predictions import read_noise_predictions

    targets = [d for d in cfg.domains if d in LEVEL_OF_DOMAIN]
    row = get_row(out / "results.sqlite", (model_name, _noise_method(cfg), "in1k", None, cfg.seeds[0]))
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


def _probe(cfg: RunConfig, out: Path, model_name: str) -> int:
    """Every method of ``cfg.methods`` on every domain (:mod:`cog_pl.probe.methods`); rows of other inputs are
    refused for all methods before the first probe runs."""
    from cog_pl.device import resolve_device
    from cog_pl.probe.methods import get_probe_method
    from cog_pl.results import read_stored, row_key

    protocol, plan, device = cfg.protocol, cfg.probe.plan(), str(resolve_device(cfg.probe.device))
    grid = cfg.probe_grid
    methods = [get_probe_method(m) for m in cfg.methods]
    shared = [m for m in methods if m.shares_grid]  # workers (here, on other machines) share their grid
    results = out / "results.sqlite"

    def call(method, fn, domain, seeds, shots, rows, wait=False):
        if fn is method.run and method.shares_grid:  # no barrier after each domain: the wait pass below
            fn = functools.partial(fn, wait=wait, workers=cfg.probe.workers)
        if method.takes_rows:  # the rows read once, not the whole file again for each domain
            fn = functools.partial(fn, rows=rows)
        return fn(out / "features" / model_name / domain, results, model=model_name, domain=domain,
                  storage=cfg.study_storage, protocol=protocol, plan=plan, seeds=seeds, shots=shots, device=device,
                  overwrite=cfg.overwrite, **cfg.method_options.get(method.name, {}))

    # The model's rows, read once for every method's check and run pass over the domains: this process writes a
    # (method, domain)'s rows only in its run, after its check and run read them; a row another worker writes
    # meanwhile is found when its cell is claimed (cog_pl.probe.cells), and the wait pass reads the file again.
    stored = read_stored(results, model=model_name)
    for method in methods:  # a row made with other inputs is refused before any probe runs
        for domain, seeds, shots in grid:
            if method.check is not None:
                call(method, method.check, domain, seeds, shots, stored)
    from cog_pl.progress import Progress

    written, made = 0, {m.name: set() for m in shared}
    total = len(methods) * sum(len(seeds) * len(shots) for _, seeds, shots in grid)
    with Progress(f"probes of {model_name}", total, "rows", enabled=cfg.progress) as bar:
        for method in methods:
            for i, (domain, seeds, shots) in enumerate(grid, 1):
                logger.debug("[%d/%d] %s on %s: %d seeds x %d shot settings", i, len(grid), method.name, domain,
                             len(seeds), len(shots))
                rows = call(method, method.run, domain, seeds, shots, stored)
                written += len(rows)
                if method.shares_grid:
                    made[method.name].update(row_key(r) for r in rows)
                bar.update(len(seeds) * len(shots))
        for method in shared:  # the cells other workers held: wait for them
            have = {r.key for r in stored.select(method=method.name)} | made[method.name]
            if not cfg.overwrite and not _missing_rows(have, model_name, method.name, grid):
                continue  # every cell's row was there or made here: no other worker's to wait for
            fresh = read_stored(results, model=model_name, method=method.name)  # other workers' rows too
            waiting = grid if cfg.overwrite else _missing_rows({r.key for r in fresh}, model_name, method.name, grid)
            for domain, seeds, shots in waiting:  # (overwrite: an old row may stand for one being made again)
                rows = call(method, method.run, domain, seeds, shots, fresh, wait=True)  # (taking over expired claims)
                written += len(rows)
    return written


def _missing_rows(have: set[tuple], model_name: str, method: str, grid: list) -> list:
    """The domains of ``grid`` (domain, seeds, shots) with a row of ``method`` whose key is not in ``have``."""
    return [(d, seeds, shots) for d, seeds, shots in grid
            if any((model_name, method, d, n, seed) not in have for n in shots for seed in seeds)]


def _finetune(cfg: RunConfig, out: Path, transform: Any) -> int:
    """Fine-tune the backbone on every domain, its images read with ``transform`` (the extraction's), rows that exist
    skipped; returns the rows written."""
    from cog_pl.methods import get_method

    finetune_domains = get_method("finetune").run  # fine-tuning's entry of the method table
    written, options = 0, dict(cfg.finetune)
    if cfg.trust_checkpoint:  # the backbone's file needs the opt-in: the fine-tuning recipe records it too
        options["recipe"] = {**(options.get("recipe") or {}), "trust_checkpoint": True}
    reading = {k: v for k, v in cfg.checkpoint_kwargs.items() if v and k != "trust_checkpoint"}
    if reading:  # the checkpoint is read as the extraction read it
        options["recipe"] = {**(options.get("recipe") or {}), **reading}
    for seed in cfg.finetune_seed_values:
        logger.info("fine-tuning %s on %d domains, seed %d", cfg.model, len(cfg.domains), seed)
        rows = finetune_domains(cfg.model, cfg.checkpoint, str(out / "results.sqlite"), cfg.domains,
                                in1k_root=cfg.in1k_root, in21k_root=cfg.in21k_root, benchmark=cfg.benchmark,
                                transform=transform, seed=seed, progress=cfg.progress, overwrite=cfg.overwrite,
                                label=cfg.label, **options)
        written += len(rows)
    return written


def _attentive_images(cfg: RunConfig, out: Path, transform: Any) -> int:
    """The attentive probe trained on every domain's augmented images (method ``attentive_images``), on the run's
    seeds and shots with the probe protocol's trials, its heads reading the run's ``feature`` (a token definition's
    tokens), rows that exist skipped; returns the rows written."""
    from cog_pl.methods import get_method

    run = get_method("attentive_images").run  # its entry of the method table
    reading = {k: v for k, v in {**cfg.checkpoint_kwargs, "random_weights": cfg.random_weights}.items() if v}
    options = {"trials": cfg.protocol.trials, "feature": cfg.feature, "reading": reading or None,
               **(cfg.attentive_images or {})}
    if cfg.probe.trial_batch is not None:
        options.setdefault("trial_batch", cfg.probe.trial_batch)
    rows = run(cfg.model, cfg.checkpoint, str(out / "results.sqlite"), cfg.domains, in1k_root=cfg.in1k_root,
               in21k_root=cfg.in21k_root, benchmark=cfg.benchmark, transform=transform, seeds=tuple(cfg.seeds),
               shots=tuple(cfg.shots), overwrite=cfg.overwrite, label=cfg.label, **options)
    return len(rows)


def format_summary(s: RunSummary, domains: Sequence[str]) -> str:
    lines = ["", f"cog-pl run finished in {sum(s.seconds.values()):.0f} s "
             + "(" + ", ".join(f"{k} {v:.0f} s" for k, v in s.seconds.items()) + ")",
             f"  feature stores: {s.out / 'features'} ({len(s.stores)} for {len(domains)} domains)",
             f"  result rows:    {s.out / 'results.sqlite'} ({s.rows_written} new, {s.rows_total} in all)"]
    lines += [f"  {k + ':':<15} {v}" for k, v in s.report.items()]
    return "\n".join(lines)
