#!/usr/bin/env python3
"""Extraction throughput per decode path (``--decode pil|cpu|gpu``): images/s of raw PIL decoding (the yardstick),
of the data path alone (loader workers + the device side: decode, resize, normalise) and end to end
(``ExtractionDataModule`` + ``FeatureExtractor`` + the store writer under a Lightning Trainer), on JPEGs of
ImageNet's size distribution (about 400 x 350 px, about 110 KB: crops of the photographs shipped with scikit-image
and scikit-learn, scaled and saved at quality 95). Prints one table; figures name the precision.

    python benchmarks/bench_extract.py --device cpu --model torchvision:resnet18 --images 256
    python benchmarks/bench_extract.py --device cuda --model torchvision:resnet50 --images 8192 --precision bf16-mixed

``COG_PL_BENCH_TINY=1`` shrinks everything (a smoke run of the script, as ``scripts/gpu_check.sh`` does on a CPU).
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import lightning as L
import torch
from PIL import Image


def imagenet_like(n: int, seed: int = 0) -> list[bytes]:
    """``n`` JPEGs of ImageNet's typical size: random crops of real photographs, short side 280..420 px."""
    from cog_pl.extract.fidelity import sample_photos

    photos = [Image.open(io.BytesIO(b)).convert("RGB") for k, b in sample_photos(None).items()]
    photos = [p for p in photos if min(p.size) >= 300]
    rng, out = random.Random(seed), []
    for _ in range(n):
        img = rng.choice(photos)
        w, h = img.size
        cw, ch = rng.randint(int(0.5 * w), w), rng.randint(int(0.5 * h), h)
        x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
        crop = img.crop((x, y, x + cw, y + ch))
        short = rng.randint(280, 420)
        scale = short / min(crop.size)
        crop = crop.resize((max(1, round(crop.width * scale)), max(1, round(crop.height * scale))), Image.BICUBIC)
        buf = io.BytesIO()
        crop.save(buf, "JPEG", quality=95)
        out.append(buf.getvalue())
    return out


def make_tree(root: Path, images: int, concepts: int) -> Path:
    """A demo benchmark whose IN-1K val images are ImageNet-like JPEGs; returns the benchmark file."""
    from cog_pl.demo.synthetic import make_demo

    bench = make_demo(root / "data", n_seen=concepts, n_per_level=2, train_per_concept=2,
                      test_per_concept=max(1, images // concepts), image_size=16)
    files = sorted((root / "data" / "in1k" / "val").rglob("*.JPEG"))
    for path, data in zip(files, imagenet_like(len(files))):
        path.write_bytes(data)
    return Path(bench)


def pil_decode_rate(files: list[Path]) -> float:
    t = time.perf_counter()
    for f in files:
        with Image.open(f) as img:
            img.convert("RGB")
    return len(files) / (time.perf_counter() - t)


def data_module(root: Path, bench: Path, out: Path, decode: str, args: argparse.Namespace, transform):
    from cog_pl.extract.datamodule import ExtractionDataModule

    dm = ExtractionDataModule(out=str(out), model_name="m", in1k_root=str(root / "data" / "in1k"), domains=("in1k",),
                              splits=("test",), transform=transform, batch_size=args.batch_size,
                              num_workers=args.workers, benchmark=str(bench), decode=decode, overwrite=True)
    dm.device = torch.device(args.device)
    dm.setup("predict")
    return dm


def data_path_rate(dm, device: str) -> float:
    """Loader + device side alone, no backbone (what the data path can feed)."""
    [loader] = dm.predict_dataloader()
    n, t = 0, time.perf_counter()
    for batch in loader:
        out = dm.transfer_batch_to_device(batch, torch.device(device), 0)
        n += len(out["index"])
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return n / (time.perf_counter() - t)


def end_to_end_rate(dm, model, args: argparse.Namespace) -> float:
    trainer = L.Trainer(accelerator="cuda" if args.device.startswith("cuda") else "cpu", devices=1,
                        precision=args.precision, logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    n = sum(t.rows for t in dm.plan.targets)
    t = time.perf_counter()
    trainer.predict(model, datamodule=dm, return_predictions=False)
    return n / (time.perf_counter() - t)


def main() -> None:
    tiny = os.environ.get("COG_PL_BENCH_TINY") == "1"
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="torchvision:resnet18")
    p.add_argument("--images", type=int, default=24 if tiny else 256)
    p.add_argument("--concepts", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=8 if tiny else 64)
    p.add_argument("--workers", default="auto", help="loader workers (auto: the cores available, less one)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", default="bf16-mixed" if torch.cuda.is_available() else "32-true")
    p.add_argument("--paths", nargs="+", default=None, help="decode paths (default: pil cpu, and gpu on CUDA)")
    p.add_argument("--no-end-to-end", action="store_true", help="data path only")
    a = p.parse_args()
    a.workers = a.workers if a.workers == "auto" else int(a.workers)
    paths = a.paths or (["pil", "cpu", "gpu"] if a.device.startswith("cuda") else ["pil", "cpu"])

    from cog_pl.extract.module import FeatureExtractor

    tmp = Path(tempfile.mkdtemp())
    try:
        bench = make_tree(tmp, a.images, a.concepts)
        files = sorted((tmp / "data" / "in1k" / "val").rglob("*.JPEG"))
        sizes = [Image.open(f).size for f in files]
        kb = sum(f.stat().st_size for f in files) / len(files) / 1e3
        model = FeatureExtractor(a.model, channels_last=a.device.startswith("cuda"), random_weights=True)  # speed only
        pil_rate = pil_decode_rate(files)
        rows = []
        for path in paths:
            dm = data_module(tmp, bench, tmp / f"out-{path}", path, a, model.transform_config)
            data = data_path_rate(dm, a.device)
            e2e = None if a.no_end_to_end else end_to_end_rate(
                data_module(tmp, bench, tmp / f"out-{path}", path, a, model.transform_config), model, a)
            rows.append((path, data, e2e, dm.num_workers))
        print(f"{len(files)} JPEGs, mean {sum(w for w, _ in sizes) / len(sizes):.0f} x "
              f"{sum(h for _, h in sizes) / len(sizes):.0f} px, {kb:.0f} KB; model {a.model} "
              f"({model.transform_config.crop} px), batch {a.batch_size}, device {a.device}, precision {a.precision}, "
              f"{torch.get_num_threads()} torch threads, {len(os.sched_getaffinity(0))} cores")
        print(f"raw PIL decode, one core: {pil_rate:.0f} images/s")
        print(f"{'decode':<7} {'workers':>7} {'data path img/s':>16} {'end-to-end img/s':>17}")
        for path, data, e2e, workers in rows:
            print(f"{path:<7} {workers:>7} {data:16.0f} {'-' if e2e is None else f'{e2e:.0f}':>17}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
