"""``cog-pl features import|export|info|regroup``: feature stores, the released code's ``X_Y.pth`` files, and the
stores of level variants regrouped from the level stores."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cog_pl.errors import CogError, MissingFileError
from cog_pl.levels.measures import list_measures
from cog_pl.protocol import DOMAINS
from cog_pl.wordnet.similarity import LCS_RULES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("features", help="convert and inspect feature stores",
                       description="Feature store v1 (docs/feature_store.md) and the released CoG code's X_Y.pth.")
    fsub = p.add_subparsers(dest="features_command", metavar="ACTION", required=True)
    imp = fsub.add_parser("import", help="X_Y.pth -> feature store",
                          description="SRC is an X_Y.pth file (written to OUT as one split) or the released code's "
                                      "<dataset>/ folder holding features_train/X_Y.pth and features_test/X_Y.pth "
                                      "(written to OUT/train and OUT/test).")
    imp.add_argument("src", type=Path)
    imp.add_argument("out", type=Path)
    imp.add_argument("--model", required=True)
    imp.add_argument("--domain", required=True, choices=DOMAINS)
    imp.add_argument("--split", choices=("train", "test"), help="needed when SRC is a single file")
    imp.add_argument("--weights-sha256", default=None)
    imp.add_argument("--overwrite", action="store_true")
    imp.add_argument("--dtype", choices=("float16", "float32"), default="float16",
                     help="the store's feature dtype (default float16; features beyond its range, 65504, are refused)")
    imp.set_defaults(func=_import)
    exp = fsub.add_parser("export", help="feature store -> X_Y.pth")
    exp.add_argument("store", type=Path, help="a split directory, or a root with train/ and test/")
    exp.add_argument("out", type=Path, help="X_Y.pth file, or (for a root) the folder receiving features_*/X_Y.pth")
    exp.set_defaults(func=_export)
    info = fsub.add_parser("info", help="print a store's meta and shape")
    info.add_argument("store", type=Path, help="a split directory, or a root with train/ and test/ (checked as a pair)")
    info.set_defaults(func=_info)
    reg = fsub.add_parser("regroup", help="stores of a level variant, regrouped from the level stores (no extraction)",
                          description="A level variant re-ranks the same concepts by another similarity, so a model's "
                                      "cog_l1..cog_l5 stores hold all its images: their rows (train from train, test "
                                      "from test) are copied into <root>/<model>/cog_l<i>@<variant>/<split>. When the "
                                      "stores hold a subset of the concepts (the demo), the variant levels are that "
                                      "subset re-ranked and cut into five equal blocks. Finished stores are skipped.")
    reg.add_argument("--features-root", type=Path, required=True, help="the folder holding <model>/cog_l1 .. cog_l5")
    reg.add_argument("--model", required=True, help="the model folder under --features-root")
    src = reg.add_mutually_exclusive_group(required=True)
    src.add_argument("--measure", choices=list_measures(), help="re-rank the stores' concepts by this similarity")
    src.add_argument("--levels", type=Path,
                     help="a level file (e.g. `cog-pl levels build --measure wup --concepts official --out F`)")
    reg.add_argument("--name", help="variant name in the domains cog_l<i>@<name> (default: the measure)")
    reg.add_argument("--lcs", choices=LCS_RULES, default=None,
                     help="subsumer rule of --measure lin: deepest (default, the official levels') or max-ic (NLTK's); "
                          "jcn always takes the max-IC subsumer, wup and path their own; not with --levels")
    reg.add_argument("--overwrite", action="store_true", help="regroup again, replacing the variant's stores")
    reg.set_defaults(func=_regroup)


def _import(args: argparse.Namespace) -> int:
    from cog_pl.features.convert import import_pth

    if args.src.is_dir():
        pairs = [(args.src / f"features_{s}" / "X_Y.pth", args.out / s, s) for s in ("train", "test")]
    else:
        if not args.split:
            raise CogError("--split is required when importing a single X_Y.pth file")
        pairs = [(args.src, args.out, args.split)]
    for src, out, split in pairs:
        if not src.is_file():
            raise MissingFileError(f"{src} does not exist")
        import_pth(src, out, args.model, args.domain, split, args.weights_sha256, overwrite=args.overwrite,
                   dtype=args.dtype)
        print(f"{src} -> {out}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from cog_pl.features.convert import export_pair, export_pth
    from cog_pl.features.pair import SPLITS

    if (args.store / "train").is_dir():  # a root: the pair, checked together
        for split, written in zip(SPLITS, export_pair(args.store, args.out)):
            print(f"{args.store / split} -> {written}")
    else:
        print(f"{args.store} -> {export_pth(args.store, args.out)}")
    return 0


def _info(args: argparse.Namespace) -> int:
    from cog_pl.features.pair import SPLITS, open_pair
    from cog_pl.features.store import FeatureStore, check_finite, open_store

    def described(s: FeatureStore) -> dict:
        check_finite(s)  # info vouches for a store: its values are read, not only its header
        meta = {k: v for k, v in s.meta.items() if k != "classes"}
        return {"path": str(s.path), "rows": len(s), "dim": int(s.features.shape[-1]), "dtype": str(s.features.dtype),
                **meta}

    if (args.store / "train").is_dir():  # a root: the pair, checked together
        pair = open_pair(args.store, min_classes=1)  # (info describes a store it does not probe)
        info = {"path": str(pair.root), "model": pair.model, "domain": pair.domain, "num_classes": pair.num_classes,
                "dim": pair.dim, **{split: described(pair[split]) for split in SPLITS}}
    else:
        info = described(open_store(args.store))
    print(json.dumps(info, indent=1))
    return 0


def _regroup(args: argparse.Namespace) -> int:
    from cog_pl.features.regroup import regroup_variant
    from cog_pl.resources import LEVELS

    if args.levels is not None and args.lcs is not None:
        raise CogError("--lcs goes with --measure: a level file (--levels) was ranked with its own subsumer rule")
    lcs = {} if args.lcs is None else {"lcs": args.lcs}  # regroup_variant's default otherwise
    result = regroup_variant(args.features_root, args.model, measure=args.measure, level_file=args.levels,
                             name=args.name, overwrite=args.overwrite, **lcs)
    print(f"level variant {result.variant!r} of {args.model} (levels: {result.level_file})")
    print("level of the stores (rows) -> level of the variant (columns), concepts:")
    print("       " + "  ".join(f"{lvl:>5}" for lvl in LEVELS))
    for lvl, row in zip(LEVELS, result.moves):
        print(f"  {lvl}  " + "  ".join(f"{n:5d}" for n in row))
    for path in result.written:
        print(f"wrote   {path}")
    for path in result.skipped:
        print(f"skipped {path} (complete)")
    root = args.features_root / args.model
    print(f"probe them with e.g. `cog-pl probe protocol --features {root / result.domains[0]} --model {args.model} "
          f"--domain {result.domains[0]} --results results.sqlite`")
    return 0
