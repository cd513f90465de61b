"""Helpers for the data tests: tiny ImageNet-shaped trees (folders and tars, corrupt and truncated files) and a
tiny benchmark (real wnids and official test filenames, 3 concepts per level) patched into ``cog_pl.resources``.

Import from test modules: ``from conftest_data import ...`` (pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cog_pl import resources
from cog_pl.protocol import FeatureProtocol

TINY_PROTOCOL = replace(FeatureProtocol(), max_train_per_concept=6, min_train_per_concept=3, test_per_concept=3)
N_CONCEPTS, N_TEST, N_TRAIN_CANDIDATES = 3, 3, 8


def jpeg_bytes(seed: int, size: tuple[int, int] = (40, 30)) -> bytes:
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=80)
    return buf.getvalue()


def bad_bytes(kind: str, seed: int = 0) -> bytes:
    """``"corrupt"``: not an image at all; ``"truncated"``: a JPEG cut in half."""
    if kind == "corrupt":
        return b"this is not a JPEG" * 10
    data = jpeg_bytes(seed, (64, 64))
    return data[: len(data) // 2]


def write_synset(root: Path, wnid: str, files: dict[str, bytes], layout: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    if layout == "folder":
        (root / wnid).mkdir(exist_ok=True)
        for name, data in files.items():
            (root / wnid / name).write_bytes(data)
    else:
        with tarfile.open(root / f"{wnid}.tar", "w") as tf:
            for name, data in sorted(files.items()):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))


@dataclass
class TinyBenchmark:
    levels: dict[str, tuple[str, ...]]
    test: dict[str, tuple[str, ...]]  # level -> "wnid/filename"
    in1k: tuple[str, ...]

    def concept_files(self, level: str, wnid: str, n_train: int = N_TRAIN_CANDIDATES) -> dict[str, str]:
        """filename -> "test" | "train" for one concept's images."""
        out = {p.split("/", 1)[1]: "test" for p in self.test[level] if p.startswith(wnid + "/")}
        out.update({f"{wnid}_9{k:04d}.JPEG": "train" for k in range(n_train)})
        return out

    def make_in21k(self, root: Path, layout: str = "folder", bad: dict[str, str] | None = None,
                   skip: tuple[str, ...] = (), n_train: dict[str, int] | None = None) -> Path:
        """All concepts of all tiny levels; ``bad`` maps ``wnid/filename`` to "corrupt"/"truncated"; ``skip``
        leaves out synsets (wnid) or images (wnid/filename)."""
        bad, n_train = bad or {}, n_train or {}
        seed = 0
        for level, wnids in self.levels.items():
            for wnid in wnids:
                if wnid in skip:
                    continue
                files = {}
                for name in self.concept_files(level, wnid, n_train.get(wnid, N_TRAIN_CANDIDATES)):
                    key = f"{wnid}/{name}"
                    seed += 1
                    if key not in skip:
                        files[name] = bad_bytes(bad[key], seed) if key in bad else jpeg_bytes(seed)
                write_synset(root, wnid, files, layout)
        return root

    def make_in1k(self, root: Path, layout: str = "folder", n_train: int = 4, n_val: int = 50) -> Path:
        for i, wnid in enumerate(self.in1k):
            write_synset(root / "train", wnid, {f"{wnid}_{k}.JPEG": jpeg_bytes(1000 * i + k) for k in range(n_train)},
                         layout)
            write_synset(root / "val", wnid, {f"ILSVRC2012_val_{i:04d}{k:04d}.JPEG": jpeg_bytes(10**6 + 100 * i + k)
                                              for k in range(n_val)}, "folder")
        return root


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> TinyBenchmark:
    """Three real concepts per level, three of their official test images each, three IN-1K classes."""
    levels = {lv: tuple(sorted(resources.official_levels()[lv])[:N_CONCEPTS]) for lv in resources.LEVELS}
    test = {}
    for lv, wnids in levels.items():
        paths = [p for p in resources.official_test_split(lv) if p.split("/", 1)[0] in wnids]
        test[lv] = tuple(p for w in wnids for p in sorted(q for q in paths if q.startswith(w))[:N_TEST])
    in1k = resources.in1k_wnids()[:3]
    monkeypatch.setattr(resources, "official_levels", lambda: levels)
    monkeypatch.setattr(resources, "official_test_split", lambda level: test[level])
    monkeypatch.setattr(resources, "in1k_wnids", lambda: in1k)
    monkeypatch.setenv("COG_PL_CACHE", str(tmp_path / "cache"))  # never the user's cache
    return TinyBenchmark(levels, test, in1k)
