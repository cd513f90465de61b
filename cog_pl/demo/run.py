"""The demo end to end: two representations of the miniature benchmark evaluated, one report relative to a baseline.

:func:`run_demo` runs :func:`cog_pl.pipeline.run` for the baseline (the supervised ``demo_cnn``, with everything the
demo shows: few-shot, level variants, fine-tuning) and then for the second model (the self-supervised
``demo_cnn_ssl``, all data, same seeds, same probe methods) in a run folder of its own, ``OUT/demo_cnn_ssl``, as a
second team's run of another model would be (with ``--zeroshot`` the tiny CLIP ``demo_clip``, linear and zero-shot,
and with ``--token-probes`` the baseline's token stores, into the baseline's folder); then writes one report of both
runs (:mod:`cog_pl.report.runs`: the runs checked alike, each row's folder named), each model relative to the baseline
per domain (the paper's Fig. 3 (b)-(e)). It returns the time of every stage.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from cog_pl.demo.clip import NAMES, TEMPLATES
from cog_pl.demo.prepare import DemoAssets
from cog_pl.pipeline import RunConfig, run

log = logging.getLogger(__name__)
#: The attentive probe's preset on the demo CNN's tokens (:func:`token_config`).
TOKEN_PRESET = "ep"


@dataclass
class DemoSummary:
    """What a demo run wrote and how long each stage took (in order)."""

    out: Path
    baseline: str
    models: list[str]
    report: dict[str, Path]
    seconds: dict[str, float] = field(default_factory=dict)


def second_config(base: RunConfig, assets: DemoAssets) -> RunConfig:
    """The second model's run, in its own folder (:func:`second_out`): the baseline's probes (seeds, methods on the
    stores, search) on all data, nothing else."""
    probes = base.methods_of("probe")
    cfg = dataclasses.replace(base, model=assets.ssl_model, checkpoint=str(assets.ssl_checkpoint), name=None,
                              shots=(None,), variants=(), methods=probes,
                              method_options={m: base.method_options[m] for m in probes}, check=False, report=False)
    return dataclasses.replace(cfg, out=str(second_out(base.out, cfg.label)))


def second_out(out: str | Path, label: str) -> Path:
    """The second model's run folder: ``OUT/<its label>`` (its features, results store and Optuna studies)."""
    return Path(out) / label


def clip_config(base: RunConfig, assets: DemoAssets) -> RunConfig:
    """The tiny CLIP's run (``cog-pl demo --zeroshot``): its image features probed linearly and named zero-shot by
    its text tower with the names and templates it was trained on (:data:`cog_pl.demo.clip.NAMES`,
    :data:`~cog_pl.demo.clip.TEMPLATES`), all data, the baseline's seeds and search, nothing else."""
    return dataclasses.replace(base, model=assets.clip_model, checkpoint=str(assets.clip_checkpoint), name=None,
                               methods=("linear", "zeroshot"),
                               method_options={"zeroshot": {"names": NAMES, "templates": TEMPLATES}}, shots=(None,),
                               variants=(), check=False, report=False)


def token_config(base: RunConfig, feature: str, options: dict | None = None) -> RunConfig:
    """The baseline's token stores of definition ``feature`` (:mod:`cog_pl.models.definitions`) under the label
    ``<baseline>+<feature>`` (a label holds one definition), probed by the attentive and MLP probes on all data with
    the baseline's seeds and search. The attentive probe's preset is ``ep`` unless ``options`` names one: the demo
    CNN's 96 channels do not split into the D / 64 heads of the default ``capi``; of the two presets that fit them
    (:func:`cog_pl.models.poolers.fitting_presets`), EP's (32 queries, no query or key projection) trains a cell in
    a seventh of V-JEPA 2's time (its three token blocks): the demo's minutes.
    ``options``: the attentive and MLP probes' own (``cog-pl demo --attentive-preset/--mlp-hidden``)."""
    options = dict(options or {})
    options = {**options, "attentive": {"preset": TOKEN_PRESET, **options.get("attentive", {})}}
    return dataclasses.replace(base, name=f"{base.label}+{feature}", feature=feature, methods=("attentive", "mlp"),
                               shots=(None,), variants=(), check=False, report=False, noise_predictions=False,
                               method_options=options)


def run_demo(assets: DemoAssets, base: RunConfig, token_probes: str | None = None,
             token_options: dict | None = None) -> DemoSummary:
    """Evaluate the baseline with ``base`` (its ``report`` is ignored), then the second model when ``assets`` has
    one, and write the report of both; ``base.baseline`` names the reference model (default: the baseline's).
    ``token_probes``: a token definition (e.g. ``tokens2x2``) whose stores of the baseline the attentive and MLP
    probes also evaluate (:func:`token_config`, with ``token_options``), reported beside the linear probe. When
    ``assets`` has the tiny CLIP, it is evaluated too (:func:`clip_config`: linear and zero-shot)."""
    from cog_pl.report.build import write_report

    seconds = dict(assets.seconds)
    configs = [dataclasses.replace(base, report=False)]
    if assets.ssl_checkpoint is not None:
        configs.append(second_config(configs[0], assets))
    if token_probes is not None:
        configs.append(token_config(configs[0], token_probes, token_options))
    if assets.clip_checkpoint is not None:
        configs.append(clip_config(configs[0], assets))
    models = []
    for cfg in configs:
        name = cfg.label
        models.append(name)
        log.info("evaluating %s", name)
        summary = run(cfg)
        seconds.update({f"{stage} {name}": s for stage, s in summary.seconds.items()})
    baseline = base.baseline or models[0]
    t = time.perf_counter()
    out = Path(base.out)
    stores = list(dict.fromkeys(Path(cfg.out) / "results.sqlite" for cfg in configs))
    report = write_report(stores if len(stores) > 1 else stores[0], out / "report", models=models, baseline=baseline,
                          features=None if len(stores) > 1 else out / "features", levels=base.benchmark,
                          html=base.html)
    seconds["report"] = time.perf_counter() - t
    return DemoSummary(out, baseline, models, report, seconds)
