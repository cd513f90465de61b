"""What ``cog-pl run`` does (:class:`RunConfig`), checked before any work, and its stages' options."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
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

__all__ = ["STAGES", "ExtractOptions", "ProbeOptions", "RunConfig"]

#: The stages of a run, in order (``RunConfig.stage`` runs one alone).
STAGES = ("check", "extract", "probe", "finetune", "report")


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
    """What ``cog-pl run`` does; every field has the protocol's value by default. The stages' options are
    ``extract`` and ``probe``; the evaluation methods are ``methods`` (:mod:`cog_pl.evaluate`: probes on the stores,
    and ``finetune`` or ``attentive_images``, which read images), each with its options in ``method_options`` (by
    method name: its options dataclass, or a dict of its fields, the ``cog-pl run`` flags ``--<method>-<field>``).

    Example:
        >>> cfg = RunConfig(model="dino", in1k_root="/data/in1k", in21k_root="/data/in21k", seeds=(22,),
        ...                 probe=ProbeOptions(trials=10), methods=("linear", "knn", "finetune"),
        ...                 method_options={"finetune": {"epochs": 5}})  # doctest: +SKIP
    """

    model: str
    in1k_root: str | None = None
    in21k_root: str | None = None
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
    overwrite: bool = False  # replace what earlier runs made (feature stores: extracted and regrouped again)
    seen: str | None = None  # the model's pretraining label set (named set or file): warned of where levels hold it
    methods: tuple[str, ...] = ("linear",)  # evaluation methods (cog_pl.evaluate), e.g. + "knn", "finetune"
    # a method's options by its name (its options dataclass, or a dict of its fields): {"attentive": {"preset":
    # "capi"}, "finetune": {"epochs": 5}}; resolved to the dataclasses, every method's, by __post_init__
    method_options: dict[str, Any] = field(default_factory=dict)
    report: bool = True  # write the report at the end (False: the caller writes one, e.g. the demo for two models)
    html: bool = True  # the report also as report.html (cog_pl.report.html)
    noise_predictions: bool = True  # the label-noise check's predictions for the report (IN-1K probe on the levels)
    stage: str | None = None  # one of STAGES alone; None: every stage in turn
    storage: str | None = None  # the probes' Optuna storage (database URL, journal or SQLite file); None: out/optuna.db
    name: str | None = None  # the label of stores, rows and report (cog_pl.models.label); None: from the weights
    random_weights: bool = False  # a network without a file initialised at random (labelled <name>@random)
    models_dir: str | None = None  # where a paper model's file is looked for without checkpoint; None: $COG_PL_MODELS
    feature: str | None = None  # a feature definition (cog_pl.models.definitions); None: the paper's feature
    #: a data folder naming the roots, the benchmark and the images' size at once (``cog-pl run --data``: the demo's
    #: OUT/data, or a folder with cog_data.json or in1k/ and in21k/); resolved into those fields, then None
    data: str | None = None
    #: the named protocol (``cog-pl run --protocol``: paper or quick) the grid and search default to; the same as
    #: ``probe=ProbeOptions(name=...)``
    protocol_name: str | None = None

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
        self._resolve_data()
        if self.protocol_name is not None:
            named_protocol(self.protocol_name)  # an unknown name, refused naming the known ones
            self.probe, self.protocol_name = replace(self.probe, name=self.protocol_name), None
        named = named_protocol(self.probe.name)
        self.seeds = named.seeds if self.seeds is None else tuple(self.seeds)
        self.shots = named.shots if self.shots is None else tuple(self.shots)
        self.protocol  # noqa: B018 - refuses bad trials/epochs now, not after extraction
        for name, seeds in (("seeds", self.seeds), ("variant_seeds", self.variant_seeds)):
            if seeds is not None:
                check_grid(seeds, names=(name, "shots"))
        self._check_devices()
        check_domains(self.domains)
        if self.seen is not None:
            from cog_pl.levels.seen import resolve_seen

            resolve_seen(self.seen)  # a bad --seen is refused before any work
        self.shots, self.variant_shots = _shot_values(self.shots, "shots"), _shot_values(self.variant_shots,
                                                                                           "variant_shots")
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
        self._resolve_weights()
        self._check_methods()

    def _resolve_data(self) -> None:
        """``data`` into the roots, the benchmark and (unless ``transform`` is given) the images' size its folder
        records, as ``cog-pl run --data`` does; giving it beside a root or the benchmark is refused."""
        if self.data is None:
            return
        from cog_pl.data.roots import resolve_data_option

        self.in1k_root, self.in21k_root, self.benchmark, roots = resolve_data_option(
            str(self.data), self.in1k_root, self.in21k_root, self.benchmark)
        if roots.image_size is not None and self.transform is None:
            from cog_pl.models.transform import resolve_transform

            self.transform = resolve_transform(roots.image_size)
        self.data = None  # resolved: a copy (dataclasses.replace) keeps the roots, not the folder a second time

    def _check_methods(self) -> None:
        """Every method known and its options resolved (a bad value refused by its flag's name); options of a method
        not run refused; a token definition with a method that reads one vector per image refused, naming those
        that read tokens; each method's own refusals of the run's inputs (:meth:`~cog_pl.evaluate.Method.precheck`);
        all before any work."""
        from cog_pl.errors import UnknownNameError
        from cog_pl.evaluate import get_method, list_methods, token_methods
        from cog_pl.evaluate.options import resolve_options

        unknown = [m for m in self.methods if m not in list_methods()]
        if unknown or not self.methods:
            raise UnknownNameError(f"methods: unknown method(s) {', '.join(unknown) or '(none given)'}; choose from "
                                   f"{', '.join(list_methods())}")
        self.methods = tuple(dict.fromkeys(self.methods))
        idle = [m for m in self.method_options if m not in self.methods]
        if idle:
            raise CogError(f"options of {', '.join(idle)} given for a run without it: add it to --methods")
        self.method_options = {m: resolve_options(get_method(m), self.method_options.get(m)) for m in self.methods}
        if self.feature is not None:
            from cog_pl.models.definitions import parse_feature

            if parse_feature(self.feature).tokens:
                vectors = [m for m in self.methods if get_method(m).reads == "vectors"]
                if vectors:
                    raise CogError(f"--feature {self.feature}: a token definition makes token stores, which "
                                   f"{', '.join(vectors)} cannot read; methods that take token stores: "
                                   f"{', '.join(token_methods()) or 'none registered'}")
        inputs = self.inputs
        for m in self.methods:
            get_method(m).precheck(inputs, self.method_options[m])

    @property
    def inputs(self) -> Any:
        """What the evaluation methods read of this run (:class:`~cog_pl.evaluate.Inputs`)."""
        from cog_pl.evaluate import Inputs

        return Inputs(label=self.label, features=Path(self.out) / "features" / self.label, model=self.model,
                      checkpoint=self.checkpoint,
                      reading={**self.checkpoint_kwargs, "random_weights": self.random_weights},
                      transform=self.transform, feature=self.feature, in1k_root=self.in1k_root,
                      in21k_root=self.in21k_root, benchmark=self.benchmark)

    def methods_of(self, stage: str) -> tuple[str, ...]:
        """The methods a stage runs: ``probe`` those on the feature stores, ``finetune`` those that read images."""
        from cog_pl.evaluate import get_method

        return tuple(m for m in self.methods if get_method(m).probe == (stage == "probe"))

    def grids(self) -> list[Any]:
        """The run's grids (:class:`~cog_pl.evaluate.runner.Grid`): every domain, then the level variants' (no
        images: regrouped features)."""
        from cog_pl.evaluate.runner import Grid

        return [Grid(d, seeds, shots, images="@" not in d) for d, seeds, shots in self.probe_grid]

    def evaluation_plan(self) -> Any:
        """What the run's grids share (:class:`~cog_pl.evaluate.runner.Plan`)."""
        from cog_pl.device import resolve_device
        from cog_pl.evaluate.runner import Plan

        return Plan(results=Path(self.out) / "results.sqlite", protocol=self.protocol, search=self.probe.plan(),
                    device=str(resolve_device(self.probe.device)), storage=self.study_storage,
                    options=self.method_options, overwrite=self.overwrite, workers=self.probe.workers,
                    progress=self.progress)

    def rows_of(self, stage: str) -> list[tuple]:
        """The keys of the rows ``stage`` (``probe`` or ``finetune``) makes."""
        from cog_pl.evaluate import get_method
        from cog_pl.evaluate.runner import jobs_of

        plan = self.evaluation_plan()
        return [job.key(cell) for m in self.methods_of(stage)
                for job in jobs_of(get_method(m), self.inputs, self.grids(), plan) for cell in job.method.cells(job)]

    def _resolve_weights(self) -> None:
        """The weights file, decided before any work: ``checkpoint``, else a paper model's file in ``models_dir``;
        a model that needs weights and has none is refused unless ``random_weights``
        (:func:`cog_pl.models.files.resolve_checkpoint`); a bad ``name`` is refused too."""
        from cog_pl.models.files import resolve_checkpoint
        from cog_pl.models.label import check_label, check_paper_name

        if self.name is not None:
            check_label(self.name)
        self.checkpoint = resolve_checkpoint(self.model, self.checkpoint, self.random_weights, self.models_dir)
        if self.name is not None:  # a paper model's name for its published file alone
            check_paper_name(self.name, self.model, self.checkpoint)

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


def _shot_values(shots: Any, name: str) -> tuple[int | None, ...]:
    """``shots`` as the grid takes them: ``None`` or ``"all"`` for all data, positive integers; anything else refused
    in one line naming the field."""
    out = []
    for s in shots:
        if s is None or (isinstance(s, str) and s.lower() == "all"):
            out.append(None)
        elif isinstance(s, int) and not isinstance(s, bool) and s > 0:
            out.append(s)
        else:
            raise CogError(f"{name}: {s!r} is not a shot setting; give 'all' (or None) or a positive integer (the "
                           f"protocol's: all, {', '.join(map(str, ProbeProtocol().shots))})")
    return tuple(out)


@functools.lru_cache(maxsize=32)
def _label_of(model: str, checkpoint: str | None, name: str | None, random_weights: bool,
              stamp: tuple[int, int] | None) -> str:
    """:func:`cog_pl.models.label.model_label`, once per file's version (``stamp``: size, mtime; it reads the
    checkpoint's digest)."""
    from cog_pl.models.label import model_label

    return model_label(model, checkpoint, name, random_weights)


