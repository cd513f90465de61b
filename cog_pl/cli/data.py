"""``cog-pl data check`` and ``cog-pl data split export|import``: is the data there, and which images are train."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys

from cog_pl.cli.options import (
    NUM_WORKERS,
    add_deprecated_alias,
    add_skip_policy,
    loader_workers_value,
    parse_max_skipped,
)
from cog_pl.errors import CogError

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="check ImageNet copies and manage CoG splits",
                       description="Check that IN-1K and IN-21K hold what the benchmark reads; export and import "
                                   "the CoG train/test split files.")
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    chk = dsub.add_parser("check", help="report missing synsets and images, counts, unreadable images",
                          description="Exit status 0 when the benchmark can run on this data, 1 when it cannot.")
    chk.add_argument("--in1k-root", help="IN-1K: a folder holding train/ and val/ (folders or tars per synset, or "
                                          "the flat val with its devkit), timm's webdataset shards, or Hugging "
                                          "Face's tars")
    chk.add_argument("--in21k-root", help="IN-21K: one folder (Winter 2021) or tar (Fall 2011) per synset, or "
                                          "timm's imagenet-w21-wds shards")
    chk.add_argument("--data", metavar="DIR", help="a folder naming the data at once, instead of --in1k-root, "
                                                   "--in21k-root and --benchmark: its cog_data.json (cog-pl demo "
                                                   "writes OUT/data/cog_data.json), else its in1k/ and in21k/")
    add_source_options(chk)
    chk.add_argument("--decode", action="store_true", help="also fully decode every image (slow; with progress)")
    add_deprecated_alias(chk, "--workers", chk.add_argument(
        "--num-workers", type=loader_workers_value, default=NUM_WORKERS,
        help=f"decoding processes with --decode, or auto: the cores this process may run on, less one (default "
             f"{NUM_WORKERS})"))
    chk.add_argument("--bad-list", help="save the unreadable images here (wnid/filename<TAB>reason)")
    chk.add_argument("--cache-dir", help="where tar indexes and installed splits live (default ~/.cache/cog_pl)")
    chk.add_argument("--benchmark", help="a benchmark file (cog-pl levels build --seen) to check against instead of "
                                         "the official concepts and test split, as run and extract read it")
    add_skip_policy(chk, "the extraction's policy for unreadable images (with --decode): fail makes each an "
                         "error, skip a warning up to --max-skipped per split")
    chk.set_defaults(func=_check)

    spl = dsub.add_parser("split", help="export or import a CoG level's train/test split file")
    ssub = spl.add_subparsers(dest="split_command", metavar="ACTION", required=True)
    exp = ssub.add_parser("export", help="build (or take the installed) split of a level and write it",
                          description="The split rule is in cog_pl.data.splits and recorded in the file.")
    exp.add_argument("--level", required=True, choices=("L1", "L2", "L3", "L4", "L5"))
    exp.add_argument("--in21k-root", required=True)
    exp.add_argument("--out", required=True, help="split file to write (.json.gz)")
    exp.add_argument("--seed", type=int, default=0, help="seed of the train selection rule (default 0)")
    exp.add_argument("--cache-dir")
    exp.set_defaults(func=_export)
    imp = ssub.add_parser("import", help="verify a split file and install it as the level's split",
                          description="Verifies format, hash and the official test split; with --in21k-root also "
                                      "that every listed image exists. Installed splits are used by the "
                                      "CoG DataModules and by data check.")
    imp.add_argument("file")
    imp.add_argument("--in21k-root")
    imp.add_argument("--cache-dir")
    imp.set_defaults(func=_import)


#: The built-in sources (:func:`cog_pl.data.sources.list_sources`) that can hold each dataset, as the help lists
#: them: the table itself is not imported at start-up (its names are checked when a root is opened; a test keeps
#: these equal to it). IN-1K's official ILSVRC2012_img_train.tar is a whole tar of synset tars, as IN-21K's are.
SOURCES_OF = {"in1k": ("synsets", "flat_val", "wds", "hf_tars", "whole_tar"), "in21k": ("synsets", "wds", "whole_tar")}


def add_source_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--in1k-source``, ``--in21k-source`` (how the images are stored) and ``--allow-missing``."""
    for which, names in SOURCES_OF.items():
        parser.add_argument(f"--{which}-source", default="auto", metavar="NAME",
                            help=f"how the {which.upper()} images are stored: {', '.join(names)} or a registered "
                                 "source (default auto: detected from the root)")
    parser.add_argument("--allow-missing", type=parse_max_skipped, default=0,
                        help="tolerate this many images the split lists but the source lacks, per split (below 1 "
                             "a fraction of it): left out with a warning; default 0 refuses any")


def _check(args: argparse.Namespace) -> int:
    from cog_pl.data.check import check_data, write_unreadable
    from cog_pl.data.roots import resolve_data_option
    from cog_pl.device import loader_workers

    workers = loader_workers() if args.num_workers == "auto" else args.num_workers
    args.in1k_root, args.in21k_root, args.benchmark, roots = resolve_data_option(
        args.data, args.in1k_root, args.in21k_root, args.benchmark)
    if roots is not None:
        print(roots.line())
    report = check_data(args.in1k_root, args.in21k_root, decode=args.decode, workers=workers,
                        progress=args.decode and sys.stderr.isatty(), cache_dir=args.cache_dir,
                        on_error=args.on_error, max_skipped=args.max_skipped, in1k_source=args.in1k_source,
                        in21k_source=args.in21k_source, allow_missing=args.allow_missing, benchmark=args.benchmark)
    print(report.format())
    if args.bad_list and args.decode:
        write_unreadable(report, args.bad_list)
        print(f"unreadable images listed in {args.bad_list}")
    return 0 if report.ok else 1


def _export(args: argparse.Namespace) -> int:
    from cog_pl.data.sources import open_source
    from cog_pl.data.splits import build_split, check_split, save_split

    split = build_split(args.level, open_source(args.in21k_root, cache_dir=args.cache_dir), seed=args.seed)
    issues = check_split(split)
    save_split(split, args.out)
    n_train = sum(map(len, split.train.values()))
    print(f"{args.out}: {args.level}, {n_train} train / {sum(map(len, split.test.values()))} test images, "
          f"sha256 {split.sha256()}")
    for issue in issues[:10]:
        print(f"  warning: {issue.wnid}: {issue.problem}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from cog_pl.data.sources import open_source
    from cog_pl.data.splits import check_split, installed_split_path, load_split

    split = load_split(args.file)
    if args.in21k_root:
        missing = [i for i in check_split(split, source=open_source(args.in21k_root, cache_dir=args.cache_dir))
                   if "missing" in i.problem]
        if missing:
            for issue in missing[:10]:
                print(f"  {issue.wnid}: {issue.problem}", file=sys.stderr)
            raise CogError(f"{len(missing)} concept(s) of {args.file} lack images under {args.in21k_root}; "
                           "not installed")
    dest = installed_split_path(split.level, args.cache_dir)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(args.file, dest.with_name(dest.name + ".tmp"))
    dest.with_name(dest.name + ".tmp").replace(dest)
    print(f"installed {split.level} split {split.sha256()} at {dest}")
    return 0
