"""``cog-pl extract``: Phase 1 through LightningCLI ``predict``, every domain and split of a model in one command.

    cog-pl extract --config resnet50 --data.in1k_root /data/in1k --data.in21k_root /data/in21k

Stores land in ``<data.out>/<model>/<domain>/<split>/``; complete ones are skipped, interrupted ones resumed, each
only when made by the same checkpoint, model, precision, transform and data (else refused, naming the difference;
``--data.overwrite true`` extracts them again). ``--data.dtype float32`` for features beyond float16's range.
``--data.decode pil|cpu|gpu|auto`` picks the decode path (:mod:`cog_pl.extract.decode`), ``--data.num_workers auto``
the loader workers from the cores available.
Any Trainer option works (``--trainer.devices 4 --trainer.strategy ddp --trainer.precision bf16-mixed``,
``--trainer.num_nodes`` on a cluster). ``--launcher slurm`` (and the other options of
:data:`cog_pl.pipeline.cluster.options.OPTIONS`, read before the LightningCLI sees the line) submits the extraction as
one SLURM job on ``--nodes`` x ``--gpus-per-node``, one ``srun`` task per GPU (docs/cluster.md).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import LightningArgumentParser

from cog_pl.cli.lightning import CommandLineCLI, hand_over
from cog_pl.errors import CogError
from cog_pl.extract.datamodule import ExtractionDataModule
from cog_pl.extract.module import FeatureExtractor
from cog_pl.extract.stores import ExtractionPlan
from cog_pl.features.store import is_complete

logger = logging.getLogger(__name__)

TRAINER_DEFAULTS: dict[str, Any] = {"logger": False, "enable_checkpointing": False, "enable_model_summary": False}


class ExtractCLI(CommandLineCLI):
    """LightningCLI with the extractor's name and input pipeline linked into the datamodule."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("model.model_name", "data.model_name", apply_on="instantiate")
        parser.link_arguments("model.transform_config", "data.transform", apply_on="instantiate")

    def predict(self, model: FeatureExtractor, datamodule: ExtractionDataModule | None = None,
                return_predictions: bool | None = None, **kwargs: Any) -> None:
        """Run prediction without keeping the features in memory: the writer callback stores them."""
        from cog_pl.results.labels import check_label_weights

        backbone = model.backbone  # one label, one set of weights under --data.out, checked before any store
        check_label_weights(model.model_name, backbone.weights, sha256=backbone.weights_sha256, features=datamodule.out,
                            overwrite=datamodule.overwrite, name_option="--model.name",
                            overwrite_option="--data.overwrite true")
        # the datamodule's setup plans the stores once; the writer finalises the ready ones and skips the loop when
        # nothing is left
        self.trainer.predict(model, datamodule=datamodule, return_predictions=False, **kwargs)
        if self.trainer.is_global_zero:
            _summary(datamodule.plan)


def _summary(plan: ExtractionPlan) -> None:
    rows = [(str(t.path), t.rows, "extracted" if is_complete(t.path) else "INCOMPLETE")
            for t in plan.targets + plan.ready]
    rows += [(str(p), None, "already complete") for p in plan.skipped]
    width = max((len(r[0]) for r in rows), default=10)
    print(f"\n{'feature store':<{width}}  {'rows':>9}  status")
    for path, n, status in sorted(rows):
        print(f"{path:<{width}}  {'' if n is None else n:>9}  {status}")


class _ParseOnly(ExtractCLI):
    """The command line parsed and checked by the LightningCLI, nothing built: what ``--launcher`` submits."""

    def instantiate_classes(self) -> None:
        pass


def _cli(cls: type[ExtractCLI], argv: list[str], prog: str, **kwargs: Any) -> ExtractCLI:
    command = [] if kwargs.get("run") is False else ["predict"]  # run=False: no subcommand
    return hand_over(cls, [*command, *argv], prog, model_class=FeatureExtractor,
                     datamodule_class=ExtractionDataModule, trainer_defaults=TRAINER_DEFAULTS,
                     save_config_callback=None, seed_everything_default=False, **kwargs)


def run(argv: list[str], prog: str = "cog-pl extract", entry: Any = None) -> ExtractCLI | None:
    """Run ``cog-pl extract ARGV``: LightningCLI ``predict`` (the only subcommand) on ``ARGV``; with ``--launcher``,
    submit it (:func:`launch`; ``entry``: what its job runs the command line with, :func:`cog_pl.cli.main.main`,
    which hands itself down)."""
    from cog_pl.models.checkpoints import EXTRACT_SPELLING, spelled
    from cog_pl.pipeline.cluster.options import cluster_options, split_argv

    given, rest = split_argv(argv)
    if "-h" in rest or "--help" in rest:
        try:
            return _cli(ExtractCLI, rest, prog)
        finally:  # the LightningCLI's help has exited; the launcher's options, read before it, follow it
            print("\n" + launcher_help())
    cluster = cluster_options(given)
    if cluster is None:
        with spelled(EXTRACT_SPELLING):  # a message that suggests a loading option names the config key
            return _cli(ExtractCLI, argv, prog)
    launch(rest, cluster, prog, entry)
    return None


def launcher_help() -> str:
    """The launcher's options as ``cog-pl extract --help`` lists them after the LightningCLI's own."""
    import argparse

    from cog_pl.pipeline.cluster.options import add_launcher_options

    parser = argparse.ArgumentParser(usage=argparse.SUPPRESS, add_help=False)
    add_launcher_options(parser, "the extraction as one SLURM job on --nodes x --gpus-per-node, one srun task (one "
                                 "DDP rank) per GPU (docs/cluster.md); read before the LightningCLI sees the line")
    return parser.format_help().rstrip()


def launch(rest: list[str], cluster: Any, prog: str = "cog-pl extract", entry: Any = None) -> int:
    """``cog-pl extract --launcher``: the command line checked here, then run as one SLURM job of ``--nodes`` x one
    task per GPU, Lightning's DDP across them (:mod:`cog_pl.pipeline.cluster`); ``entry``: what the job runs its
    command line with (``cog-pl``'s dispatch, handed down by :func:`cog_pl.cli.main.main`)."""
    from cog_pl.pipeline.cluster.jobs import Job, extract_trainer_options
    from cog_pl.pipeline.cluster.launch import launch as launch_jobs
    config = _cli(_ParseOnly, rest, prog, run=False).config
    trainer, data = config["trainer"], config["data"]
    per_node, wanted = cluster.tasks_per_node, "gpu" if cluster.gpus_per_node else "cpu"
    if str(trainer["devices"]) not in ("auto", str(per_node)):
        raise CogError(f"--trainer.devices {trainer['devices']}: under --launcher the extraction runs one task per "
                       f"GPU of each node ({per_node} with --gpus-per-node {cluster.gpus_per_node})")
    if trainer["num_nodes"] not in (1, cluster.nodes):
        raise CogError(f"--trainer.num_nodes {trainer['num_nodes']}: under --launcher use --nodes")
    if str(trainer["accelerator"]) not in ("auto", wanted, *(("cuda",) if wanted == "gpu" else ())):
        raise CogError(f"--trainer.accelerator {trainer['accelerator']}: under --launcher with --gpus-per-node "
                       f"{cluster.gpus_per_node} the extraction runs on {wanted}")
    from cog_pl.models.files import EXTRACT_OPTIONS, resolve_checkpoint
    from cog_pl.models.label import model_label

    m = config["model"]
    checkpoint = resolve_checkpoint(m["model"], m["checkpoint"], m["random_weights"], options=EXTRACT_OPTIONS)
    name = model_label(m["model"], checkpoint, m["name"], m["random_weights"], "--model.name")  # its stores' folder
    root = Path(data["out"]).resolve()
    stores = tuple(str(root / name / d / s) for d in data["domains"] for s in data["splits"])
    options = extract_trainer_options(cluster, str(trainer["strategy"]), ("--trainer.num_nodes", "--trainer.devices",
                                                                         "--trainer.accelerator",
                                                                         "--trainer.strategy"))
    job = Job(f"extract/{name}", "extract", ("extract", *rest, *options),
              what=f"{len(stores)} feature stores ({len(data['domains'])} domains)", nodes=cluster.nodes,
              tasks_per_node=per_node, gpus_per_node=cluster.gpus_per_node, stores=stores)
    return launch_jobs([job], cluster, root, entry=entry)
