"""``cog-pl data check``: can the benchmark run on these ImageNet copies? A counted, readable report.

Errors (the benchmark cannot run as published): a missing IN-1K or CoG synset, a missing official test image
(and, against a split file, a missing train image; each named), a concept whose train count falls outside the
protocol's range, and, with ``--decode``, an image extraction would stop at. ``allow_missing`` (extraction's
tolerance) turns missing images within its cap into warnings. Also named, as warnings: images a source holds that
no label claims (a flat val's extra files) and images a copy re-encoded (a webdataset shard's ``png`` of a
``.JPEG``). Any source of :mod:`cog_pl.data.sources` is checked; the table says which one read each domain.
Other warnings: an unexpected IN-1K total, and the unreadable images extraction would skip. Check and extraction
agree on what is fatal: both decode with :func:`~cog_pl.data.imagenet.load_image` and apply the same policy
(``on_error``: under ``"fail"`` every unreadable image is an error; under ``"skip"`` a warning, until a (domain,
split) has more than :func:`~cog_pl.data.imagenet.skip_budget` allows).
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from torch.utils.data import DataLoader, Dataset

from cog_pl import resources
from cog_pl.benchmark import Benchmark
from cog_pl.data.imagenet import MAX_SKIPPED, check_policy, check_tolerance, load_image, skip_budget
from cog_pl.data.sources import ImageSource, open_source, open_split_source, printable
from cog_pl.data.splits import build_split, check_split, installed_split_path, load_split
from cog_pl.errors import CogError
from cog_pl.protocol import FeatureProtocol

log = logging.getLogger(__name__)
IN1K_TRAIN_IMAGES = 1_281_167
SHOWN = 10  # findings listed per (domain, kind) before "... and N more"


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" or "warning"
    domain: str
    kind: str
    message: str


@dataclass
class DataReport:
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # domain -> classes / train / test
    findings: list[Finding] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (location, reason)
    decoded: int = 0
    sources: dict[str, str] = field(default_factory=dict)  # domain -> the source(s) that read it
    mismatch: dict[str, dict[str, int]] = field(default_factory=dict)  # domain -> missing / extra / re-encoded
    train_per_class: dict[str, dict[str, int]] = field(default_factory=dict)  # domain -> wnid -> train images there

    def add(self, severity: str, domain: str, kind: str, message: str) -> None:
        self.findings.append(Finding(severity, domain, kind, message))

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def format(self) -> str:
        lines = [f"{'domain':<8} {'classes':>9} {'train':>10} {'test':>8}  {'source':<16} {'missing':>7} "
                 f"{'extra':>6} {'re-encoded':>10}"]
        for dom, c in self.counts.items():
            m = self.mismatch.get(dom, {})
            lines.append(f"{dom:<8} {c['classes']:>4}/{c['expected_classes']:<4} {c['train']:>10} {c['test']:>8}  "
                         f"{self.sources.get(dom, '?'):<16} {m.get('missing', 0):>7} {m.get('extra', 0):>6} "
                         f"{m.get('re-encoded', 0):>10}")
        if self.decoded:
            lines.append(f"decoded {self.decoded} images: {len(self.unreadable)} unreadable")
        for severity in ("error", "warning"):
            group = [f for f in self.findings if f.severity == severity]
            if not group:
                continue
            lines.append(f"{severity}s ({len(group)}):")
            by_kind: dict[tuple[str, str], list[Finding]] = defaultdict(list)
            for f in group:
                by_kind[f.domain, f.kind].append(f)
            for (dom, kind), items in by_kind.items():
                lines.append(f"  [{dom}] {kind}: {len(items)}")
                lines += [f"    {f.message}" for f in items[:SHOWN]]
                if len(items) > SHOWN:
                    lines.append(f"    ... and {len(items) - SHOWN} more")
        lines.append("OK: the benchmark can run on this data." if self.ok else
                     f"FAILED: {len(self.errors)} error(s); the benchmark cannot run as published.")
        return "\n".join(lines)


class _DecodeAll(Dataset):
    """Decodes ``(domain, source, wnid, filename)`` rows, returning ``None`` or the error message."""

    def __init__(self, rows: list[tuple[str, ImageSource, str, str]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> str | None:
        _, source, wnid, name = self.rows[i]
        try:
            load_image(source, wnid, name)
        except OSError as err:
            return str(err)
        return None


def _name_mismatch(report: DataReport, domain: str, part: str, missing: list[str], rows: int, allow: float,
                   source: ImageSource, keys: list[tuple[str, str]]) -> None:
    """Name each missing image (an error, a warning within ``allow_missing``) and each re-encoded one of ``keys``."""
    cap = skip_budget(rows, allow) if allow else 0
    severity = "warning" if len(missing) <= cap else "error"
    for key in missing:
        report.add(severity, domain, f"missing {part} images" + (" (allowed)" if severity == "warning" else ""),
                   printable(key))
    altered = source.altered()
    changed = [(k, altered[k]) for k in keys if k in altered]
    for (wnid, name), why in changed:
        report.add("warning", domain, f"re-encoded {part} images", printable(f"{wnid}/{name}: {why}"))
    m = report.mismatch.setdefault(domain, {"missing": 0, "extra": 0, "re-encoded": 0})
    m["missing"] += len(missing)
    m["re-encoded"] += len(changed)


def _check_in1k(root: Path, report: DataReport, cache_dir, rows: dict, benchmark: Benchmark | None,
                kind: str = "auto", allow_missing: float = 0) -> None:
    wnids = benchmark.in1k if benchmark else resources.in1k_wnids()
    n_val = benchmark.feature_protocol().test_per_concept if benchmark else 50
    counts = {"classes": 0, "expected_classes": len(wnids), "train": 0, "test": 0}
    names_of = []
    for split, sub in (("train", "train"), ("test", "val")):
        try:
            source = open_split_source(root, split, kind, cache_dir)
        except FileNotFoundError as err:
            report.add("error", "in1k", "missing folder", str(err))
            continue
        names_of.append(source.name)
        present = 0
        for wnid in wnids:
            if not source.has(wnid):
                report.add("error", "in1k", f"missing {sub} synset", f"{wnid} ({resources.concept_name(wnid)}) "
                                                                     f"not under {source.root}")
                continue
            present += 1
            names = source.list(wnid)
            counts[split] += len(names)
            if split == "train":
                report.train_per_class.setdefault("in1k", {})[wnid] = len(names)
            rows[split] += [("in1k", source, wnid, n) for n in names]
            if split == "test" and len(names) != n_val:
                report.add("error", "in1k", "val images per class",
                           f"{wnid}: {len(names)} val images, expected {n_val}")
        counts["classes"] = present if split == "train" else min(counts["classes"], present)
        absent = [f"{w}/{n}" for w in wnids for n in source.absent(w)]
        keys = [(w, n) for _, src, w, n in rows[split] if src is source]
        _name_mismatch(report, "in1k", split, absent, len(keys) + len(absent), allow_missing, source, keys)
        extra = source.extra()
        for name in extra:
            report.add("warning", "in1k", f"unlabelled {sub} images", printable(f"{source.root}/{name}"))
        report.mismatch["in1k"]["extra"] += len(extra)
    report.sources["in1k"] = "/".join(dict.fromkeys(names_of)) or "-"
    if counts["train"] and counts["train"] != IN1K_TRAIN_IMAGES and benchmark is None:
        report.add("warning", "in1k", "train total", f"{counts['train']} train images, the official set has "
                                                     f"{IN1K_TRAIN_IMAGES}")
    report.counts["in1k"] = counts


def _check_level(level: str, source: ImageSource, report: DataReport, protocol: FeatureProtocol, cache_dir,
                 split_file: str | None, rows: dict, benchmark: Benchmark | None, allow_missing: float = 0) -> None:
    domain = f"cog_l{level[1]}"
    installed = installed_split_path(level, cache_dir)
    path = split_file or (installed if installed.exists() and benchmark is None else None)
    split = (load_split(path, level, benchmark) if path
             else build_split(level, source, protocol=protocol, benchmark=benchmark))
    issues = check_split(split, protocol, source)
    for issue in issues:  # missing images are named one by one below
        if "missing" in issue.problem and issue.problem != "synset missing":
            continue
        kind = "missing synset" if issue.problem == "synset missing" else "image counts"
        report.add("error", domain, kind, f"{issue.wnid} ({resources.concept_name(issue.wnid)}): {issue.problem}")
    missing = {i.wnid for i in issues if i.problem == "synset missing"}
    counts = {"classes": len(split.classes) - len(missing), "expected_classes": len(split.classes),
              "train": 0, "test": 0}
    present = {w: set(source.list(w)) for w in split.classes if w not in missing}
    for part in ("train", "test"):  # count and decode what is there; name what is not
        samples, _ = split.samples(part)
        kept = [(domain, source, w, n) for w, n in samples if n in present.get(w, ())]
        gone = [f"{w}/{n}" for w, n in samples if w in present and n not in present[w]]
        _name_mismatch(report, domain, part, gone, len(samples), allow_missing, source, [r[2:] for r in kept])
        counts[part] = len(kept)
        rows[part] += kept
        if part == "train":
            per_class = report.train_per_class.setdefault(domain, dict.fromkeys(present, 0))
            for _, _, wnid, _ in kept:
                per_class[wnid] += 1
    report.counts[domain] = counts
    report.sources[domain] = source.name


def check_data(in1k_root: str | os.PathLike | None = None, in21k_root: str | os.PathLike | None = None,
               decode: bool = False, workers: int = 0, progress: bool = False, cache_dir: str | None = None,
               protocol: FeatureProtocol | None = None, split_files: dict[str, str] | None = None,
               levels: tuple[str, ...] = resources.LEVELS, benchmark: str | None = None, on_error: str = "fail",
               max_skipped: float = MAX_SKIPPED, in1k_source: str = "auto", in21k_source: str = "auto",
               allow_missing: float = 0) -> DataReport:
    """Check IN-1K and/or the CoG levels; with ``decode``, fully decode every image of every split.

    ``benchmark``: a benchmark file (:mod:`cog_pl.benchmark`) to check against instead of the official one.
    ``on_error`` / ``max_skipped``: the extraction's policy for unreadable images, which decides their severity.
    ``in1k_source`` / ``in21k_source``: how the images are stored (a source name, or ``"auto"``); ``allow_missing``:
    the extraction's tolerance of images the split lists but the source lacks.
    """
    check_policy(on_error, max_skipped)
    check_tolerance(allow_missing, "allow_missing")
    if in1k_root is None and in21k_root is None:
        raise CogError("give --in1k-root and/or --in21k-root")
    custom = Benchmark.load(benchmark) if benchmark is not None else None
    protocol = protocol or (custom.feature_protocol() if custom else FeatureProtocol())
    report = DataReport()
    rows: dict[str, list] = {"train": [], "test": []}
    if in1k_root is not None:
        _check_in1k(Path(in1k_root), report, cache_dir, rows, custom, in1k_source, allow_missing)
    if in21k_root is not None:
        source = open_source(in21k_root, in21k_source, cache_dir=cache_dir)
        for level in levels:
            _check_level(level, source, report, protocol, cache_dir, (split_files or {}).get(level), rows, custom,
                         allow_missing)
    if decode:
        _decode(rows, report, workers, progress, on_error, max_skipped)
    return report


def _decode(rows: dict, report: DataReport, workers: int, progress: bool, on_error: str = "fail",
            max_skipped: float = MAX_SKIPPED) -> None:
    from tqdm import tqdm

    for split in ("test", "train"):
        todo = rows[split]
        direct = [i for i, r in enumerate(todo) if r[1].random_access]
        bar = tqdm(total=len(todo), desc=f"decoding {split}", unit="img", disable=not progress)
        errors: dict[int, str] = {}
        loader = DataLoader(_DecodeAll([todo[i] for i in direct]), batch_size=64, num_workers=workers,
                            collate_fn=lambda batch: batch)
        done = 0
        for batch in loader:
            errors.update((direct[k], err) for k, err in enumerate(batch, start=done) if err is not None)
            done += len(batch)
            bar.update(len(batch))
        streamed: dict[int, list[int]] = defaultdict(list)  # gzip sources: each file decompressed once
        for i, r in enumerate(todo):
            if not r[1].random_access:
                streamed[id(r[1])].append(i)
        for at in streamed.values():
            source = todo[at[0]][1]
            for pos, data in source.stream([todo[i][2:] for i in at]):
                _, _, wnid, name = todo[at[pos]]
                try:
                    load_image(source, wnid, name, data)
                except OSError as err:
                    errors[at[pos]] = str(err)
                bar.update(1)
        bar.close()
        done = len(todo)
        bad: dict[str, list[str]] = defaultdict(list)
        for i in sorted(errors):
            domain, _, wnid, name = todo[i]
            report.unreadable.append((printable(f"{wnid}/{name}"), errors[i]))
            bad[domain].append(errors[i])
        report.decoded += done
        for domain, found in bad.items():  # the severity extraction gives them: stop, or skip within the cap
            kind, severity = f"unreadable {split} images", "error"
            if on_error == "skip":
                cap = skip_budget(sum(r[0] == domain for r in rows[split]), max_skipped)
                severity = "warning" if len(found) <= cap else "error"
                kind += " (skipped)" if len(found) <= cap else f" (more than --max-skipped allows: {cap})"
            for err in found:
                report.add(severity, domain, kind, err)


def write_unreadable(report: DataReport, path: str | os.PathLike) -> None:
    """Save the unreadable images as ``wnid/filename<TAB>reason`` lines (atomically)."""
    from cog_pl.io import atomic_open

    with atomic_open(path) as fh:
        fh.writelines(f"{key}\t{reason}\n" for key, reason in report.unreadable)


def benchmark_of_data(in1k_root: str | os.PathLike | None, in21k_root: str | os.PathLike | None,
                      cache_dir: str | None = None) -> list[Path]:
    """Benchmark files beside the roots (in them or their parent folders, as ``cog-pl demo`` writes
    ``data/benchmark_eval.json`` beside ``data/in1k`` and ``data/in21k``) whose every concept the roots hold: the
    benchmark a failed official check most likely meant. One whose IN-1K domain is a sample made to be evaluated
    (``meta.in1k_domain``, the demo's ``benchmark_eval.json``) comes alone; otherwise all that match, sorted."""
    roots = [Path(r) for r in (in1k_root, in21k_root) if r is not None]
    found: list[tuple[Path, Benchmark]] = []
    for path in sorted({p for r in roots for d in (r, r.parent) if d.is_dir() for p in d.glob("*.json")}):
        try:
            if path.stat().st_size < 50_000_000:
                found.append((path, Benchmark.load(path)))
        except (CogError, OSError):
            continue
    if not found:
        return []
    sources = []
    try:
        if in1k_root is not None:
            sources.append(("in1k", open_split_source(Path(in1k_root), "train", "auto", cache_dir)))
        if in21k_root is not None:
            sources.append(("levels", open_source(in21k_root, "auto", cache_dir=cache_dir)))
    except (CogError, OSError):
        return []

    def holds(bench: Benchmark) -> bool:
        wanted = {"in1k": bench.in1k, "levels": [w for lv in bench.levels for w in bench.classes(lv)]}
        return all(source.has(w) for part, source in sources for w in wanted[part])

    matching = [(p, b) for p, b in found if holds(b)]
    evaluated = [p for p, b in matching if b.meta.get("in1k_domain")]
    return evaluated[:1] if len(evaluated) == 1 else [p for p, _ in matching]
