"""A model's whole evaluation: data check, extraction of the six domains, every evaluation method, the report.

The stages in order (:data:`STAGES`; ``RunConfig.stage`` runs one alone, as the SLURM launcher's jobs do,
:mod:`cog_pl.pipeline.cluster`): ``check`` (the data, the grid's shot counts), ``extract`` (the feature stores, then
the level variants' regrouped from them: :mod:`cog_pl.features.regroup`), ``probe`` (every method on the stores,
:mod:`cog_pl.evaluate`, then the label-noise check's predictions), ``finetune`` (the methods that read images:
fine-tuning, the attentive probe on images) and ``report`` (from the rows). :class:`RunConfig` says what runs and is
checked before any work (:mod:`cog_pl.pipeline.config`); the stages around the methods are
:mod:`cog_pl.pipeline.stages`.

Each stage resumes: complete feature stores are skipped and interrupted ones continued, each only when made by the
same model, weights, precision, transform and data (else refused; ``overwrite`` replaces them); result rows that
exist are skipped and rows of other values refused (:mod:`cog_pl.evaluate.grid`); the report is recomputed from
rows. Under a distributed extraction (``srun`` tasks, Lightning's DDP) every rank extracts and only global rank zero
goes on to the later stages.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cog_pl.pipeline import stages
from cog_pl.pipeline.config import STAGES, ExtractOptions, ProbeOptions, RunConfig
from cog_pl.pipeline.stages import run_seen_warnings

__all__ = ["STAGES", "ExtractOptions", "ProbeOptions", "RunConfig", "RunSummary", "format_summary", "run",
           "run_seen_warnings"]
logger = logging.getLogger(__name__)


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
    from cog_pl.models.build import weights_file
    from cog_pl.results import check_results_file, count_rows
    from cog_pl.results.labels import LabelWeightsError, check_label_weights

    out = Path(cfg.out)
    resolve_spec(cfg.model)  # an unknown model fails before any work
    check_results_file(out / "results.sqlite")  # so does a results file that cannot take the rows
    try:
        check_label_weights(cfg.label, weights_file(cfg.model, cfg.checkpoint), features=out / "features",
                            results=out / "results.sqlite", overwrite=cfg.overwrite)  # before any work
    except LabelWeightsError as err:
        raise LabelWeightsError(f"{err}{stages.reuse_hint(cfg)}") from None
    if (out / "results.sqlite").is_file():  # and one whose rows were made on another benchmark
        stages.record_report_inputs(cfg, out)
    for warning in run_seen_warnings(cfg.model, cfg.seen, cfg.benchmark, cfg.domains):
        logger.warning("warning: %s", warning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seconds: dict[str, float] = {}
    stores, transform, written, report = cfg.store_paths(cfg.label), cfg.transform, 0, {}

    def runs(stage: str) -> bool:
        return cfg.stage in (None, stage)

    def timed(name: str, fn, *args):
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            seconds[name] = time.perf_counter() - start

    if cfg.check and runs("check"):
        timed("check", stages.check, cfg)
    if runs("extract"):
        stores, _, transform, lead = timed("extract", stages.extract, cfg, out)
        if not lead:  # another rank of a distributed extraction: rank zero does the rest
            return RunSummary(out, stores, 0, 0, {}, seconds, lead=False)
        if cfg.variants:
            stores += timed("regroup", stages.regroup, cfg, out, cfg.label)
    if runs("probe") or (cfg.report and runs("report")):
        stages.record_report_inputs(cfg, out)
    evaluated = [s for s in ("probe", "finetune") if runs(s) and cfg.methods_of(s)]
    if evaluated:  # the model's rows, read once: every method's rows of other values refused before the first runs
        from cog_pl.results import read_stored

        rows = read_stored(out / "results.sqlite", model=cfg.label)
        _evaluate(cfg, evaluated, stores, transform, rows, check_only=True)
    for stage in evaluated:  # the methods on the stores, then those that read images (their own stage, job)
        written += timed(stage, _evaluate, cfg, [stage], stores, transform, rows)
        if stage == "probe" and cfg.noise_predictions and "in1k" in cfg.domains and stages.noise_method(cfg):
            timed("label-noise predictions", stages.noise, cfg, out, cfg.label)
    if cfg.report and runs("report"):
        from cog_pl.report.build import write_report

        report = write_report(out / "results.sqlite", out / "report", baseline=cfg.baseline, html=cfg.html)
    return RunSummary(out, stores, written, count_rows(out / "results.sqlite"), report, seconds)


def _evaluate(cfg: RunConfig, which: Sequence[str], stores: Sequence[Path], transform: object, rows: object,
              check_only: bool = False) -> int:
    """The methods of the stages ``which`` (``probe``: on the stores, which must be complete when the stage runs
    alone; ``finetune``: on images, read with the extraction's ``transform``) on the model's ``rows`` read once
    (a cell whose row was written since is found so when it is claimed); ``check_only``: the check alone, rows of
    other values refused."""
    from dataclasses import replace

    from cog_pl.evaluate.runner import check_methods, run_methods

    if cfg.stage == "probe" and "probe" in which:
        stages.require_stores(stores)
    methods = [m for stage in which for m in cfg.methods_of(stage)]
    inputs = replace(cfg.inputs, transform=transform)
    if check_only:
        check_methods(methods, inputs, cfg.grids(), cfg.evaluation_plan(), rows)
        return 0
    what = "probes" if which == ["probe"] else "images"
    return run_methods(methods, inputs, cfg.grids(), cfg.evaluation_plan(), title=f"{what} of {cfg.label}",
                       check=False, rows=rows)


def format_summary(s: RunSummary, domains: Sequence[str]) -> str:
    """What a run did and where its stores and rows are (the report's files: the report's console summary,
    :func:`cog_pl.report.summary.console_summary`)."""
    return "\n".join(["", f"cog-pl run finished in {sum(s.seconds.values()):.0f} s "
                      + "(" + ", ".join(f"{k} {v:.0f} s" for k, v in s.seconds.items()) + ")",
                      f"  feature stores: {s.out / 'features'} ({len(s.stores)} for {len(domains)} domains)",
                      f"  result rows:    {s.out / 'results.sqlite'} ({s.rows_written} new, {s.rows_total} in all)"])
