"""``cog-pl models list|check|convert|download``: the paper's 31 models and the files their authors publish."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from cog_pl.errors import CogError

NORMALISATIONS = {((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)): "ImageNet",
                  ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)): "none (pixels in [0, 1])",
                  ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)): "0.5 / 0.5",
                  ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)): "CLIP"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="the paper's models: list them, check, convert and download their files",
                       description="The paper's 31 models as their authors publish them (docs/models.md).")
    msub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    ls = msub.add_parser("list", help="every model: architecture, feature, input, where its file is published; "
                                      "then the other backbones built by name")
    ls.add_argument("--json", action="store_true", help="one JSON object per paper model instead of the tables")
    ls.set_defaults(func=_list)
    check = msub.add_parser("check", help="load a file as the model reads it and report what it held",
                            description="Loads FILE in NAME's published layout and reports the container and "
                                        "prefix used, the tensors loaded and dropped, the feature dim and the "
                                        "file's sha256 (a table, then one JSON line).")
    check.add_argument("name", help="a paper model (cog-pl models list), timm:<name> or torchvision:<name>")
    check.add_argument("file", type=Path)
    _loading_options(check)
    check.set_defaults(func=_check)
    conv = msub.add_parser("convert", help="re-save a file as plain tensors (read without trust afterwards)",
                           description="Reads FILE in NAME's layout (with --trust-checkpoint where safe loading "
                                       "refuses it), checks that it loads, and writes OUT: its weights as plain "
                                       "tensors, which cog_pl reads with weights_only=True.")
    conv.add_argument("name")
    conv.add_argument("file", type=Path)
    conv.add_argument("out", type=Path)
    _loading_options(conv)
    conv.add_argument("--overwrite", action="store_true", help="replace OUT when it exists")
    conv.set_defaults(func=_convert)
    dl = msub.add_parser("download", help="fetch a model's published file into DIR/NAME/ (resumable)",
                         description="Downloads NAME's file from where its authors publish it into DIR/NAME/ "
                                     "(default DIR: the models dir, where cog-pl run looks), resuming a partial "
                                     "download and checking the hash the file name carries. Files behind a manual "
                                     "download or a conversion: prints where to get them.")
    dl.add_argument("name")
    dl.add_argument("dir", nargs="?", type=Path, help="default: $COG_PL_MODELS or ~/.cache/cog_pl/models")
    dl.add_argument("--url", help="download from this URL instead (a mirror); its file name's hash is checked")
    dl.add_argument("--no-hash-check", action="store_true",
                    help="keep a file whose sha256 does not start with the prefix its name carries")
    dl.add_argument("--no-progress", action="store_true")
    dl.set_defaults(func=_download)


def _loading_options(p: argparse.ArgumentParser) -> None:
    from cog_pl.cli.options import add_deprecated_alias

    p.add_argument("--trust-checkpoint", action="store_true",
                   help="read a file that safe loading refuses (TorchScript, dill): its code runs")
    add_deprecated_alias(p, "--prefix", add_checkpoint_options(p))


def _key_map(text: str) -> dict[str, str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object ({err.msg})") from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a JSON object of regex: replacement strings")
    return value


def add_checkpoint_options(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> argparse.Action:
    """How a user's checkpoint is read, spelled alike in ``cog-pl run`` and ``cog-pl models check|convert``
    (``cog-pl extract``'s ``--model.prefix``, ``--model.key_map``, ``--model.in_order``); returns the prefix's."""
    prefix = p.add_argument("--checkpoint-prefix", default=None, metavar="PREFIX",
                            help="read the weights under this key prefix (e.g. a LightningModule's backbone "
                                 "attribute, backbone.); DDP's module. and torch.compile's _orig_mod. are stripped "
                                 "from a user's file without it (as timm does)")
    p.add_argument("--checkpoint-key-map", type=_key_map, default=None, metavar="JSON",
                   help="rename the checkpoint's keys: a JSON object of regex: replacement, e.g. "
                        "'{\"^encoder\\.\": \"\"}'")
    p.add_argument("--checkpoint-in-order", action="store_true",
                   help="map the checkpoint's tensors by position (same architecture, other names)")
    return prefix


def checkpoint_options(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`add_checkpoint_options`' values as :func:`~cog_pl.models.build_backbone`'s keywords."""
    return {"prefix": args.checkpoint_prefix, "key_map": args.checkpoint_key_map, "in_order": args.checkpoint_in_order}


def _norm(spec: Any) -> str:
    name = NORMALISATIONS.get((tuple(spec.mean), tuple(spec.std)))
    if name is None:
        name = f"mean {tuple(spec.mean)}, std {tuple(spec.std)}"
    return name + (", BGR" if spec.bgr else "")


def _where(spec: Any) -> str:
    pub = spec.published
    if pub is None:
        return ""
    return pub.url or manual_steps(pub)


def manual_steps(pub: Any) -> str:
    """How to get a file ``cog-pl models download`` cannot fetch (:class:`~cog_pl.models.registry.Published`):
    where it is published, then its one-time conversion, each said once."""
    return f"{pub.manual}, then convert it once: {pub.conversion}" if pub.conversion else str(pub.manual)


def model_rows() -> list[dict[str, Any]]:
    """One row per paper model: what ``cog-pl models list`` prints."""
    from cog_pl.models.zoo import PAPER_MODELS

    rows = []
    for spec in PAPER_MODELS.values():
        pub = spec.published
        rows.append({"name": spec.name, "paper_name": spec.paper_name, "group": spec.group, "arch": spec.arch,
                     "feature": spec.feature, "feature_dim": spec.feature_dim, "image_size": spec.image_size,
                     "normalisation": _norm(spec), "file": pub.file if pub else None, "published": _where(spec),
                     "download": "direct" if pub and pub.url else "manual",
                     "conversion": pub.conversion if pub else None,
                     "needs_trust": spec.layout.trust, "text_tower": spec.text_tower is not None})
    return rows


def other_rows() -> list[dict[str, Any]]:
    """One row per other backbone :func:`~cog_pl.models.build_backbone` builds by name (``efficientnet_lite0``, the
    demo's CNNs, those registered or installed by packages' entry points), in the table's order."""
    from cog_pl.models import list_backbones, resolve_spec
    from cog_pl.models.zoo import PAPER_MODELS

    rows = []
    for name in list_backbones():
        if name not in PAPER_MODELS:
            spec = resolve_spec(name)
            rows.append({"name": name, "group": spec.group, "arch": spec.arch,
                         "feature_dim": spec.feature_dim if spec.feature_dim > 0 else "measured when built",
                         "image_size": spec.image_size, "note": spec.note})
    return rows


def _list(args: argparse.Namespace) -> int:
    rows = model_rows()
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    cols = ("name", "paper_name", "group", "arch", "feature", "feature_dim", "image_size", "normalisation",
            "download")
    heads = ("model", "paper", "group", "architecture", "feature", "dim", "px", "normalisation", "file")
    width = [max(len(h), *(len(str(r[c])) for r in rows)) for c, h in zip(cols, heads)]
    print("  ".join(h.ljust(w) for h, w in zip(heads, width)))
    for r in rows:
        print("  ".join(str(r[c]).ljust(w) for c, w in zip(cols, width)))
    print("\nwhere each file is published, and the one-time conversions:")
    for r in rows:
        extra = (f" (needs a one-time conversion: {r['conversion']})"
                 if r["conversion"] and r["download"] == "direct" else "")
        trust = f" [{r['needs_trust']}: read with --trust-checkpoint or convert once]" if r["needs_trust"] else ""
        print(f"  {r['name']}: {r['published']}{extra}{trust}")
    others = other_rows()
    cols = ("name", "group", "arch", "feature_dim", "image_size", "note")
    heads = ("model", "group", "architecture", "dim", "px", "note")
    width = [max(len(h), *(len(str(r[c])) for r in others)) for c, h in zip(cols, heads)]
    print("\nother backbones built by name (--model NAME; registered, or installed by a package):")
    print("  " + "  ".join(h.ljust(w) for h, w in zip(heads, width)).rstrip())
    for r in others:
        print("  " + "  ".join(str(r[c]).ljust(w) for c, w in zip(cols, width)).rstrip())
    from cog_pl.models.registry import list_text_towers

    print(f"\nwith a text tower (zero-shot), read from the same weights: {', '.join(list_text_towers())}, "
          "open_clip:<name> (a model of open_clip_torch; --checkpoint a file or a pretrained tag)")
    return 0


def check_file(name: str, file: Path, trust: bool = False, prefix: str | None = None,
               key_map: dict[str, str] | None = None, in_order: bool = False) -> dict[str, Any]:
    """Load ``file`` as ``name`` reads it; the facts ``cog-pl models check`` reports."""
    import torch

    from cog_pl.models import build_backbone

    backbone = build_backbone(name, file, prefix=prefix, key_map=key_map, in_order=in_order, trust_checkpoint=trust)
    spec, report = backbone.spec, backbone.report
    with torch.inference_mode():
        dim = int(backbone.model(torch.zeros(1, 3, spec.image_size, spec.image_size)).shape[-1])
    if dim != spec.feature_dim:
        raise RuntimeError(f"{name}: the built network gives {dim}-d features, its spec says {spec.feature_dim}")
    return {"model": spec.name, "file": str(file), "sha256": backbone.weights_sha256, "container": report.container,
            "prefix": report.prefix, "stripped": report.stripped, "loaded": report.loaded, "dropped": report.dropped,
            "missing": 0, "other_objects": report.other_objects, "trusted": report.trusted,
            "converted_from": report.converted_from, "feature_dim": dim, "image_size": spec.image_size,
            "definition": spec.definition()}


def _check(args: argparse.Namespace) -> int:
    from cog_pl.models.checkpoints import COMMAND_SPELLING, spelled

    with spelled(COMMAND_SPELLING):
        facts = check_file(args.name, args.file, args.trust_checkpoint, **checkpoint_options(args))
    lines = [("model", facts["model"]), ("file", facts["file"]), ("sha256", facts["sha256"]),
             ("container", facts["container"]), ("wrapper stripped", facts["stripped"] or "none"),
             ("prefix", repr(facts["prefix"])),
             ("tensors loaded", facts["loaded"]), ("tensors missing", 0),
             ("tensors dropped", ", ".join(f"{k} ({n})" for k, n in facts["dropped"].items()) or "none"),
             ("other objects", ", ".join(facts["other_objects"]) or "none"),
             ("read with trust", _trust_line(facts)),
             ("feature", f"{facts['feature_dim']}-d at {facts['image_size']} px"),
             ("definition", facts["definition"])]
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        print(f"{key:<{width}}  {value}")
    print(json.dumps(facts))
    return 0


def _trust_line(facts: dict[str, Any]) -> str:
    source = facts["converted_from"] or {}
    if source.get("trust_checkpoint"):
        return f"yes: its source {source.get('source')} was, when cog-pl models convert read it"
    return "yes" if facts["trusted"] else "no"


def _convert(args: argparse.Namespace) -> int:
    from cog_pl.errors import CogError
    from cog_pl.io import file_sha256
    from cog_pl.models.checkpoints import COMMAND_SPELLING, load_file, save_converted, spelled, take_container
    from cog_pl.models.registry import parse_model_name
    from cog_pl.models.zoo import resolve_spec

    spec = resolve_spec(args.name)
    # the name that builds this network again: torchvision:resnet50 as given, not the paper's resnet50 (whose label
    # and layout are its published file's)
    model = args.name if parse_model_name(args.name)[0] else spec.name
    if Path(args.out).resolve() == Path(args.file).resolve():
        raise CogError(f"output {args.out} is the input file itself: converting would replace it; name another "
                       "output file")
    if Path(args.out).exists() and not args.overwrite:
        raise CogError(f"output {args.out} exists; pass --overwrite to replace it")
    with spelled(COMMAND_SPELLING):  # it loads, or one line says why
        facts = check_file(args.name, args.file, args.trust_checkpoint, **checkpoint_options(args))
    source = load_file(args.file, args.trust_checkpoint)
    tensors, container, _ = take_container(source, spec.layout, str(args.file), spec.paper_name or spec.name)
    facts = {"model": model, "source": Path(args.file).name, "source_sha256": file_sha256(args.file),
             "container": container,
             # its code ran to read it (or to read the file it was converted from): stores made from OUT say so
             "trust_checkpoint": bool(facts["trusted"])}
    save_converted(tensors, args.out, facts)
    print(f"wrote {args.out}: {len(tensors)} tensors of {args.file} ({container}) as plain tensors; "
          f"cog-pl run --model {model} --checkpoint {args.out} reads it without trust"
          + ("; its source needed trust, which the stores made from it record" if facts["trust_checkpoint"] else ""))
    return 0


def _download(args: argparse.Namespace) -> int:
    from cog_pl.models.files import model_folder
    from cog_pl.models.zoo import PAPER_MODELS, resolve_spec

    spec = resolve_spec(args.name)
    if spec.name not in PAPER_MODELS or spec.published is None:
        raise CogError(f"{args.name}: not one of the paper's models (cog-pl models list); timm and torchvision "
                       "models need no download")
    pub, folder = spec.published, model_folder(spec.name, args.dir)
    url = args.url or pub.url
    if url is None:  # the answer to the question asked: where to get the file and where to put it
        print(f"{spec.name}: not downloadable by cog-pl: {manual_steps(pub)}; put {pub.file} in {folder}/ (where "
              "cog-pl run looks; or give it with --checkpoint FILE)")
        return 0
    from cog_pl.errors import DownloadError
    from cog_pl.io import file_sha256
    from cog_pl.models.download import download, hash_prefix_of
    from cog_pl.models.records import write_download_record

    name = url.rsplit("/", 1)[-1].split("?")[0]
    # what the zoo knows of the published file (a stated digest, or the prefix its published name carries), which a
    # mirror's copy must match too; else the prefix the URL's own name carries
    known = pub.sha256_prefix or hash_prefix_of(pub.file)
    expected = None if args.no_hash_check else known or hash_prefix_of(name)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        if name.endswith(".zip"):
            archive = download(url, folder / name, None if known else expected, progress=not args.no_progress)
            dest = _unzip(archive, pub.member or pub.file, folder / pub.file)
        else:  # a mirror's file keeps its own name
            whose = f" ({spec.name}'s published {pub.file})" if expected and expected == known else ""
            dest = download(url, folder / (name if args.url else pub.file), expected, progress=not args.no_progress,
                            prefix_of=whose)
    except DownloadError as err:  # no network, a server's error, a cut: the other ways to the file, in the line
        raise DownloadError(f"{spec.name}: {err}; "
                            + ("give another mirror with --url URL" if args.url else "download it from a mirror "
                               "with --url URL") + f", or put {pub.file} fetched another way in {folder}/ "
                            "(where cog-pl run looks)") from None
    digest = file_sha256(dest)
    if known and expected == known and not digest.startswith(known):  # a zip's member, checked once unpacked
        dest.unlink()
        raise CogError(f"{spec.name}: {dest} from {url}: sha256 {digest} does not start with the published "
                       f"file's {known} (it was removed)")
    verified = None if expected is None else ("the published file's digest" if expected == known
                                              else "the digest its URL's name carries")
    write_download_record(dest, url, digest, verified, spec.name)  # the paper's file for its label (models.label)
    if verified is None:
        print(f"{spec.name}: {dest} (unverified: "
              + ("--no-hash-check" if args.no_hash_check else "the zoo knows no digest of it and its URL's name "
                 "carries none") + f"; sha256 {digest}, recorded beside it)")
    else:
        print(f"{spec.name}: {dest} (sha256 {digest[:12]}..., verified against {verified})")
    return 0


def _unzip(archive: Path, member: str, dest: Path) -> Path:
    import shutil
    import zipfile

    from cog_pl.io import atomic_open

    with zipfile.ZipFile(archive) as zf:
        if member not in zf.namelist():
            raise CogError(f"{archive}: holds no {member} (it holds {', '.join(zf.namelist()[:5])})")
        with zf.open(member) as src, atomic_open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
    archive.unlink()
    return dest
