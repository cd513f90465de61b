"""Zero-shot at ImageNet scale: the text classifier of 1,000 concepts x 80 templates by CLIP RN50's text tower, and
the zero-shot evaluation's throughput.

The text tower is the paper's CLIP ResNet-50's (:func:`cog_pl.models.build_text_tower`, ``clip`` with random weights
of RN50's sizes: the time does not depend on the values), the templates OpenAI's 80 (``openai80``), the names the
first lemma of 1,000 IN-1K concepts (``lemma``); the classifier is :func:`cog_pl.zeroshot.zeroshot_classifier`
(prompts tokenised by CLIP's tokenizer, encoded in batches, normalised, averaged per concept). The classifier is
built twice in one run, side by side: as the tower builds it (texts sorted by length, each batch cut after its last
end-of-text token: :mod:`cog_pl.models.arch.clip_text`) and over the whole 77-token context (the published forward),
with the ratio of the two times and the largest difference of the two classifiers. On a CPU the full-context build of
80,000 prompts takes hours, so ``--concepts`` of them are encoded and the times are extrapolated linearly to 1,000
(the prompts are encoded in fixed-size batches: linear in their number; stated as an estimate in the output). The
evaluation: :func:`cog_pl.zeroshot.zeroshot_logits` and the top-5 on ``--images`` random 1024-d image embeddings
against the 1,000-column classifier, in the batches the method uses (:data:`cog_pl.probe.zeroshot.BATCH`).

    python benchmarks/bench_zeroshot.py [--concepts 8] [--images 50000] [--device cpu|cuda] [--precision 32-true]

Precision: ``32-true`` (float32 everywhere, the method's) or ``bf16-mixed`` (the text tower under bfloat16 autocast:
CUDA only, an option of this benchmark, not of the method). ``COG_PL_BENCH_TINY=1``: 2 concepts, 2,000 images.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import time

import torch

from cog_pl import resources
from cog_pl.metrics import topk_first
from cog_pl.models.text import build_text_tower
from cog_pl.probe.zeroshot import BATCH
from cog_pl.zeroshot import class_names, get_templates, zeroshot_classifier, zeroshot_logits

FULL = 1000


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _machine(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        model = ""
    return f"{model or platform.processor() or 'CPU'}, {os.cpu_count()} logical cores"


def _build(tower, names, templates, device: torch.device, cut: bool) -> tuple[torch.Tensor, float]:
    """The classifier and the seconds it took, each batch cut after its last end token (``cut``) or not."""
    tower.net.cut = tower.sort_by_length = cut
    try:
        zeroshot_classifier(tower.encode_text, names[:1], templates[:2])  # warm-up
        _sync(device)
        t0 = time.perf_counter()
        weights = zeroshot_classifier(tower.encode_text, names, templates)
        _sync(device)
        return weights, time.perf_counter() - t0
    finally:
        tower.net.cut, tower.sort_by_length = type(tower.net).cut, type(tower).sort_by_length


def main() -> None:
    tiny = os.environ.get("COG_PL_BENCH_TINY") == "1"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concepts", type=int, default=2 if tiny else None,
                   help="concepts encoded (default: 8 on a CPU, 1000 on CUDA); the time is extrapolated to 1000")
    p.add_argument("--templates", default="openai80")
    p.add_argument("--images", type=int, default=2000 if tiny else 50_000)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", default="32-true", choices=("32-true", "bf16-mixed"))
    p.add_argument("--threads", type=int, default=None, help="torch threads on the CPU (default: torch's)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    concepts = args.concepts or (FULL if device.type == "cuda" else 8)
    wnids = list(resources.in1k_wnids()[:concepts])
    templates = get_templates(args.templates)
    t0 = time.perf_counter()
    tower = build_text_tower("clip", random_weights=True).to(device)
    built = time.perf_counter() - t0
    names = class_names("lemma", wnids)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if args.precision == "bf16-mixed"
                else contextlib.nullcontext())
    with autocast:
        weights, cut = _build(tower, names, templates.templates, device, cut=True)
        whole, full = _build(tower, names, templates.templates, device, cut=False)
    prompts = concepts * len(templates.templates)
    print(f"device {device} ({_machine(device)}; {torch.get_num_threads()} torch threads), precision "
          f"{args.precision}, text tower clip (RN50's, random weights; built in {built:.1f} s)")
    estimate = "" if concepts == FULL else f" (an estimate: extrapolated linearly from {concepts} concepts)"
    for label, seconds in (("cut after the last end token, sorted by length", cut), ("whole 77-token context", full)):
        print(f"classifier, {label}: {concepts} concepts x {len(templates.templates)} templates = {prompts} prompts "
              f"in {seconds:.2f} s ({prompts / seconds:.0f} prompts/s); 1000 concepts: "
              f"{seconds * FULL / concepts:.1f} s{estimate}")
    print(f"classifier build, cut / whole context: {cut / full:.3f} of the time ({full / cut:.1f}x faster); largest "
          f"difference of the two classifiers {(weights - whole).abs().max().item():.2e}")
    classifier = torch.nn.functional.normalize(torch.randn(weights.shape[0], FULL, device=device), dim=0)
    x = torch.randn(args.images, weights.shape[0])
    for _ in range(2):  # the first pass warms up; the second is timed
        _sync(device)
        t0 = time.perf_counter()
        for i in range(0, len(x), BATCH):
            topk_first(zeroshot_logits(x[i:i + BATCH].to(device), classifier), 5)
        _sync(device)
        seconds = time.perf_counter() - t0
    print(f"evaluation: {args.images} images x {FULL} concepts ({weights.shape[0]}-d, float32) in {seconds:.3f} s: "
          f"{args.images / seconds:,.0f} images/s")


if __name__ == "__main__":
    main()
