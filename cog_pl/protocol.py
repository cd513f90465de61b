"""The ImageNet-CoG protocol in numbers: one frozen object per phase, the single source of truth.

Every constant of ``docs/protocol.md`` lives here. Code takes these objects as defaults, users override fields with
``dataclasses.replace`` (or config keys of the same names), and every result records ``asdict(...)`` of the values
it was made with, so that a deviation from the published protocol is always visible.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from cog_pl.errors import CogError

DOMAINS = ("in1k", "cog_l1", "cog_l2", "cog_l3", "cog_l4", "cog_l5")
#: The two splits of every domain, each a feature store (``<domain>/train``, ``<domain>/test``).
SPLITS = ("train", "test")
LEVEL_OF_DOMAIN = {f"cog_l{i}": f"L{i}" for i in range(1, 6)}
DOMAIN_OF_LEVEL = {level: domain for domain, level in LEVEL_OF_DOMAIN.items()}
#: ``cog_l3@wup``: level L3 of the level variant ``wup`` (same concepts, re-ranked by another similarity).
VARIANT_SEP = "@"
_VARIANT_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def check_domains(domains, who: str = "") -> None:
    """Refuse names that are not domains of the benchmark, naming them and the choices (``who``: a prefix)."""
    unknown = [d for d in domains if d not in DOMAINS]
    if unknown:
        raise CogError(f"{who}unknown domain(s) {', '.join(unknown)}; choose from {', '.join(DOMAINS)}")


def variant_domain(domain: str, variant: str) -> str:
    """The domain name of a level of a level variant, e.g. ``variant_domain("cog_l3", "wup") == "cog_l3@wup"``."""
    if domain not in LEVEL_OF_DOMAIN:
        raise CogError(f"level variants regroup the CoG levels; {domain!r} is not one of "
                       f"{', '.join(LEVEL_OF_DOMAIN)}")
    if not _VARIANT_NAME.fullmatch(variant):
        raise CogError(f"variant name {variant!r}: use letters, digits, '_', '-' or '.'")
    return f"{domain}{VARIANT_SEP}{variant}"


def split_domain(domain: str) -> tuple[str, str | None]:
    """``"cog_l3@wup" -> ("cog_l3", "wup")``; ``"cog_l3" -> ("cog_l3", None)``."""
    base, sep, variant = domain.partition(VARIANT_SEP)
    return base, (variant if sep else None)


@dataclass(frozen=True)
class LevelProtocol:
    """How the five concept generalization levels are built from WordNet (paper Sec. 3.2-3.3, App. A)."""

    min_images: int = 782
    person_root: str = "n00007846"  # person.n.01: its whole subtree is dropped
    # "in21k": drop concepts with any IN-21K descendant (App. A.1, reproduces 5146 = 5216 - 70);
    # "eligible": drop concepts with a still-eligible descendant (the main text's wording).
    leaf_rule: str = "in21k"
    measure: str = "lin"
    lcs: str = "deepest"  # see cog_pl.wordnet.similarity
    instance_hypernyms: bool = True
    corpus_includes_in1k: bool = True  # n04399382 (teddy bear) is in IN-1K but not in Fall 2011
    n_levels: int = 5
    level_size: int = 1000
    eligible_in_paper: int = 5146
    manual_discards_in_paper: int = 70


@dataclass(frozen=True)
class FeatureProtocol:
    """Phase 1: frozen backbone, penultimate features, resize-crop-normalise. ``batch_size`` and ``precision`` are
    the extraction's defaults (``cog-pl run``, :class:`~cog_pl.extract.datamodule.ExtractionDataModule`)."""

    image_size: int = 224
    resize_interpolation: str = "bicubic"
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    batch_size: int = 128
    precision: str = "32-true"
    max_train_per_concept: int = 1300
    min_train_per_concept: int = 732
    test_per_concept: int = 50


#: The hyper-parameter samplers the probes implement: TPE over (lr, wd) jointly (Optuna's ``multivariate=True``).
SAMPLERS = ("tpe-multivariate",)


@dataclass(frozen=True)
class ProbeProtocol:
    """Phase 2: tuned linear probes on L2-normalised features (paper App. B)."""

    epochs: int = 100
    batch_size: int = 1024
    momentum: float = 0.9
    lr_range: tuple[float, float] = (0.1, 100.0)
    wd_range: tuple[float, float] = (1e-12, 1e-4)
    trials: int = 30
    val_fraction: float = 0.2
    seeds: tuple[int, ...] = (22, 37, 45, 77, 93)
    shots: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    normalize: bool = True
    sampler: str = "tpe-multivariate"  # one of SAMPLERS: :func:`cog_pl.probe.study.trial_sampler`
    #: Labels of a deviation these fields cannot express (e.g. ``{"loss": "focal"}``): recorded with every result
    #: and hashed into the study names, so the studies of a deviation never mix with the protocol's.
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "trials"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise CogError(f"probe protocol: {name} must be at least 1 (an integer), got "
                               f"{getattr(self, name)!r}")
        if not 0 < self.val_fraction < 1:
            raise CogError(f"probe protocol: val_fraction must be between 0 and 1, got {self.val_fraction}")
        if not 0 <= self.momentum < 1:
            raise CogError(f"probe protocol: momentum must be in [0, 1), got {self.momentum}")
        for name in ("lr_range", "wd_range"):
            low, high = getattr(self, name)
            if not 0 < low <= high:
                raise CogError(f"probe protocol: {name} must be (low, high) with 0 < low <= high, got {(low, high)}")
        if self.sampler not in SAMPLERS:
            raise CogError(f"probe protocol: sampler {self.sampler!r}; this code implements {', '.join(SAMPLERS)}")
        check_grid(self.seeds, self.shots, "probe protocol: ")

    def grid(self, seeds=None, shots=None) -> tuple[tuple[int, ...], tuple[int | None, ...]]:
        """The seeds and shot settings of a grid, checked: the protocol's (All and each N) where not given."""
        seeds = self.seeds if seeds is None else tuple(seeds)
        shots = (None, *self.shots) if shots is None else tuple(shots)
        check_grid(seeds, shots)
        return seeds, shots


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_grid(seeds, shots=(), who: str = "", names: tuple[str, str] = ("seeds", "shots")) -> None:
    """Refuse seeds that are not integers >= 0 (numpy's seeds) and shot counts that are neither None (all data) nor
    integers >= 1, naming the values (``who``: a prefix; ``names``: what the seeds and shots are called)."""
    bad = [s for s in seeds if not (_is_int(s) and s >= 0)]
    if bad or not len(seeds):
        raise CogError(f"{who}{names[0]} must be at least 0 (integers, one or more), got {list(seeds)}")
    bad = [n for n in shots if n is not None and not (_is_int(n) and n >= 1)]
    if bad:
        raise CogError(f"{who}{names[1]} must be 'all' or at least 1 (integers), got {bad}")


def as_record(obj: Any) -> dict[str, Any]:
    """The protocol values as a JSON-ready dict (tuples become lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(obj).items()}


@dataclass(frozen=True)
class NamedProtocol:
    """A named probe grid and search that ``cog-pl run --protocol NAME`` gives its ``--seeds``, ``--shots``,
    ``--trials`` and ``--epochs`` by default. A protocol other than the paper's is recorded in the linear probe's rows
    (``protocol.extra.protocol``, so its studies and rows never mix with the paper's) and named by the report."""

    name: str
    seeds: tuple[int, ...]
    shots: tuple[int | None, ...]
    trials: int
    epochs: int
    about: str

    def probe_protocol(self, trials: int | None = None, epochs: int | None = None) -> ProbeProtocol:
        """The :class:`ProbeProtocol` of this name with these trials and epochs (by default its own)."""
        if self.name == PAPER:
            return replace(ProbeProtocol(), trials=self.trials if trials is None else trials,
                           epochs=self.epochs if epochs is None else epochs)
        return replace(ProbeProtocol(), trials=self.trials if trials is None else trials,
                       epochs=self.epochs if epochs is None else epochs, seeds=self.seeds,
                       shots=tuple(n for n in self.shots if n is not None), extra={"protocol": self.name})


PAPER = "paper"
#: The named protocols of ``cog-pl run --protocol``: the paper's (App. B), and a small one for a first try.
PROTOCOLS = {p.name: p for p in (
    NamedProtocol(PAPER, ProbeProtocol().seeds, (None, *ProbeProtocol().shots), ProbeProtocol().trials,
                  ProbeProtocol().epochs, "the paper's (App. B): 5 seeds, all data and 1 to 128 shots, 30 trials of "
                                          "100 epochs per probe"),
    NamedProtocol("quick", (22,), (None, 4), 10, 30,
                  "a first try: one seed, all data and 4 shots, 10 trials of 30 epochs per probe; its rows say so "
                  "and are never averaged with the paper's, nor comparable with its numbers"),
)}


def named_protocol(name: str) -> NamedProtocol:
    """The named protocol ``name`` (:data:`PROTOCOLS`); an unknown name is refused, naming the known ones."""
    if name not in PROTOCOLS:
        raise CogError(f"--protocol {name!r}: choose from {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def protocol_words(record: dict[str, Any]) -> tuple[str, str]:
    """(name, words) of a recorded :class:`ProbeProtocol` (:func:`as_record`): the named protocol
    (:data:`PROTOCOLS`) whose every value it has, ``extra.protocol`` included, with its trials, epochs and seeds
    (``paper (30 trials × 100 epochs, 5 seeds)``), else ``custom`` with its trials and epochs and what else differs
    from the paper's (``custom (2 trials × 1 epoch)``). The words the report's tables and the refusals of rows made
    under another protocol use."""
    for name, named in PROTOCOLS.items():
        if as_record(named.probe_protocol()) == dict(record):
            return name, (f"{name} ({_count(record['trials'], 'trial')} × {_count(record['epochs'], 'epoch')}, "
                          f"{_count(len(record.get('seeds') or []), 'seed')})")
    paper = as_record(PROTOCOLS[PAPER].probe_protocol())
    seeds = record.get("seeds") or []
    parts = [f"{_count(record.get('trials', 0), 'trial')} × {_count(record.get('epochs', 0), 'epoch')}"]
    if list(seeds) != paper["seeds"]:
        parts.append(_count(len(seeds), "seed"))
    extra = record.get("extra") or {}
    parts += [f"{k}={v}" for k, v in sorted(extra.items())]
    shown = ("trials", "epochs", "seeds", "shots", "extra")
    parts += [f"{k}={record[k]}" for k in sorted(record) if k not in shown and record[k] != paper.get(k)]
    return "custom", f"custom ({', '.join(parts)})"
