"""``cog-pl noise``: the label-noise check of the paper's App. A.3, as a table."""

from __future__ import annotations

import argparse
from pathlib import Path

from cog_pl.errors import CogError
from cog_pl.protocol import DOMAINS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("noise", help="a domain's classifier on another domain's test images: confident matches",
                       description="Train SOURCE's final linear probe, apply it to TARGET's test features and list "
                                   "the images it claims with probability >= threshold (paper App. A.3).")
    p.add_argument("--features", type=Path, required=True, help="a model's store root: <domain>/train|test")
    p.add_argument("--source", choices=DOMAINS, required=True)
    p.add_argument("--target", choices=DOMAINS, required=True)
    p.add_argument("--results", type=Path, help="take lr and wd from SOURCE's all-data row of this results store")
    p.add_argument("--lr", type=float)
    p.add_argument("--wd", type=float)
    p.add_argument("--seed", type=int, default=22)
    p.add_argument("--threshold", type=float, default=0.99)
    p.add_argument("--in1k-root", help="with --in21k-root/--benchmark: name the images by wnid/filename")
    p.add_argument("--in21k-root")
    p.add_argument("--benchmark")
    p.add_argument("--out", type=Path, help="also write the table (markdown) here, and a .csv beside it")
    p.set_defaults(func=_noise)


def _hyper(args: argparse.Namespace, model: str) -> tuple[float, float]:
    if args.lr is not None and args.wd is not None:
        return args.lr, args.wd
    if args.results is None:
        raise CogError("give --lr and --wd, or --results with a tuned all-data row of the source domain")
    from cog_pl.results import read_rows

    rows = [r for r in read_rows(args.results) if r["model"] == model and r["method"] == "linear"
            and r["domain"] == args.source and r["shots"] is None and r["seed"] == args.seed]
    if not rows:
        raise CogError(f"{args.results} has no all-data row for model {model}, {args.source}, seed {args.seed}")
    return rows[0]["lr"], rows[0]["wd"]


def _noise(args: argparse.Namespace) -> int:
    from cog_pl.analysis.label_noise import confident_predictions, noise_csv, noise_table, open_domains
    from cog_pl.io import atomic_open

    if args.source == args.target:
        raise CogError("--source and --target must differ")
    stores = open_domains(args.features, args.source, args.target)
    # the model the rows name: the stores' metadata; plain stores record none, their folder stands in
    lr, wd = _hyper(args, stores[0].meta.get("model") or args.features.resolve().name)
    key = None
    if args.in1k_root or args.in21k_root:
        from cog_pl.extract.datamodule import ExtractionDataModule

        dm = ExtractionDataModule(in1k_root=args.in1k_root, in21k_root=args.in21k_root, domains=(args.target,),
                                  splits=("test",), benchmark=args.benchmark, num_workers=0,
                                  transform="protocol")  # only the image keys are read
        key = dm.datasets(args.target)["test"][0].key
    rows = confident_predictions(args.features, args.source, args.target, lr, wd, args.threshold, args.seed,
                                 image_key=key, stores=stores)
    table = noise_table(rows, len(stores[1]))
    print(f"{args.source} classifier (lr {lr:.4g}, wd {wd:.3g}) on {args.target} test images, "
          f"confidence >= {args.threshold}")
    print(table)
    if args.out:
        with atomic_open(args.out) as fh:
            fh.write(table)
        with atomic_open(args.out.with_suffix(".csv")) as fh:
            fh.write(noise_csv(rows))
        print(f"wrote {args.out} and {args.out.with_suffix('.csv')}")
    return 0
