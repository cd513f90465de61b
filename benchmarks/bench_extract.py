#!/usr/bin/env python3
"""Extraction throughput: the whole path (JPEG decode, resize, crop, backbone, store writes) against the backbone
alone on the same tensors, and fp32 against bf16 autocast on CPU. Prints images/s and ratios from one run.

Images come from the demo generator (real wnids, JPEG folders), read through ``ExtractionDataModule`` exactly as
``cog-pl extract`` reads ImageNet.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import lightning as L
import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="torchvision:resnet18")
    p.add_argument("--images-per-concept", type=int, default=24)
    p.add_argument("--concepts", type=int, default=8)
    p.add_argument("--image-size", type=int, default=160, help="size of the generated JPEGs")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=1)
    a = p.parse_args()

    from cog_pl.demo.synthetic import make_demo
    from cog_pl.extract.datamodule import ExtractionDataModule
    from cog_pl.extract.module import FeatureExtractor

    tmp = Path(tempfile.mkdtemp())
    try:
        bench = make_demo(tmp / "data", n_seen=a.concepts, n_per_level=2, train_per_concept=4,
                          test_per_concept=a.images_per_concept, image_size=a.image_size)
        model = FeatureExtractor(a.model)
        results = {}
        for precision in ("32-true", "bf16-mixed"):
            dm = ExtractionDataModule(
                out=str(tmp / f"out-{precision}"), model_name="m", in1k_root=str(tmp / "data/in1k"),
                domains=("in1k",), splits=("test",), transform=model.transform_config,
                batch_size=a.batch_size, num_workers=a.workers, benchmark=str(bench))
            dm.setup()
            n = dm.targets[0].rows
            batches = [next(iter(dm.predict_dataloader()[0]))["image"]]
            trainer = L.Trainer(accelerator="cpu", devices=1, precision=precision, logger=False,
                                enable_progress_bar=False, enable_model_summary=False)
            t = time.perf_counter()
            trainer.predict(model, datamodule=dm, return_predictions=False)
            e2e = n / (time.perf_counter() - t)
            x = batches[0]
            reps = max(1, n // len(x))
            dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float32
            with torch.inference_mode(), torch.autocast("cpu", dtype=dtype, enabled=precision != "32-true"):
                model(x)  # warm-up
                t = time.perf_counter()
                for _ in range(reps):
                    model(x)
                alone = reps * len(x) / (time.perf_counter() - t)
            results[precision] = (e2e, alone, n)
        print(f"model {a.model}, {results['32-true'][2]} images of {a.image_size}px -> "
              f"{model.transform_config.crop}px, batch {a.batch_size}, {a.workers} loader worker(s), "
              f"{torch.get_num_threads()} torch threads")
        print(f"{'precision':<12} {'end-to-end img/s':>17} {'backbone alone img/s':>21} {'ratio':>7}")
        for prec, (e2e, alone, _) in results.items():
            print(f"{prec:<12} {e2e:17.1f} {alone:21.1f} {e2e / alone:7.2f}")
        print(f"bf16 / fp32, end to end: {results['bf16-mixed'][0] / results['32-true'][0]:.2f}; "
              f"backbone alone: {results['bf16-mixed'][1] / results['32-true'][1]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
