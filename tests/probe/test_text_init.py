"""``linear_text_init``: the linear probe with every head starting from the zero-shot text classifier, as ELEVATER's
``TRAIN.INIT_HEAD_WITH_TEXT_ENCODER`` (Computer-Vision-in-the-Wild/Elevater_Toolkit_IC
vision_benchmark/evaluation/full_model_finetune.py:106-116: ``weight = zeroshot_weights.T``, ``bias = 0``; the logit
scale ``exp(0) = 1`` under the default ``LOGIT_SCALE_INIT = 'none'``, lines 132-141). A tiny open_clip model of random
weights saved as a file is the vision-language model, as in test_zeroshot_method.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from run_stages import probe_stage

from cog_pl import resources
from cog_pl.errors import CogError
from cog_pl.evaluate import get_method, list_methods
from cog_pl.probe.data import ProbeData
from cog_pl.probe.tuner import train_probe
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import read_rows

open_clip = pytest.importorskip("open_clip", reason="the text-initialised probe needs open_clip_torch (vlm extra)")
from open_clip_fixtures import SEVEN, reference_classifier, tiny_open_clip  # noqa: E402
from open_clip_fixtures import write_pair as write_store_pair  # noqa: E402

NAME = "cog-pl-ti-tiny"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_open_clip(tmp_path_factory.mktemp("open_clip"), NAME, seed=7)


@pytest.fixture(scope="module")
def wnids():
    return list(resources.in1k_wnids()[:6])


@pytest.fixture(scope="module")
def text(tiny, wnids):
    """ELEVATER's head start, written from its code: the zero-shot weights ``[E, C]`` (feature.py:546-557, per class
    the normalised prompt embeddings averaged and renormalised) transposed, times exp(logit_scale = 0)."""
    _, model = tiny
    zeroshot_weights = reference_classifier(model, NAME, [resources.concept_name(w).split(", ")[0] for w in wnids],
                                            SEVEN)
    return zeroshot_weights.T * np.exp(0.0)


def write_pair(root, weights, wnids, centers, noise, per_class, seed=0, arch=f"open_clip:{NAME}"):
    """Train/test stores whose features are the class ``centers`` plus Gaussian ``noise``."""
    return write_store_pair(root, weights, wnids,
                            lambda y, rng: (centers[y] + noise * rng.normal(size=(len(y), centers.shape[1]))
                                            ).astype(np.float32), arch=arch, per_class=per_class, seed=seed)


def _start(root, tmp_path):
    from cog_pl.evaluate.zeroshot import ZeroShotOptions
    from cog_pl.features.pair import open_pair
    from cog_pl.probe.text_init import text_start

    return text_start(open_pair(root), tmp_path / "r.sqlite", model="m", domain=root.name,
                      device=torch.device("cpu"), options=ZeroShotOptions(templates="openai7"))


def test_registered_just_after_the_linear_probe():
    assert list_methods()[:3] == ("linear", "linear_text_init", "zeroshot")
    assert get_method("linear_text_init").title == "linear probe (text-initialised)"


def test_the_heads_start_at_the_text_classifier(tiny, wnids, text, tmp_path):
    path, _ = tiny
    root = write_pair(tmp_path / "cog_l1", path, wnids, text.numpy(), 0.05, (4, 3))
    start = _start(root, tmp_path)
    assert torch.allclose(start.weight, text, atol=1e-5) and torch.equal(start.bias, torch.zeros(len(wnids)))
    assert (start.record["from"], start.record["names"], start.record["templates"]) == ("text", "lemma", "openai7")
    assert start.record["tower"]["model"] == f"open_clip:{NAME}" and len(start.record["tower"]["sha256"]) == 64
    assert (start.record["scale"], start.record["bias"]) == (1.0, 0.0)
    # passed down to the heads: three trials with lr 0 keep it; their first choice is the classifier's
    x = torch.nn.functional.normalize(torch.randn(12, text.shape[1]), dim=1)
    y = torch.arange(12) % len(wnids)
    res = train_probe(ProbeData(x, y, x, y, len(wnids)), [0.0] * 3, [0.0] * 3, protocol=ProbeProtocol(epochs=1),
                      seeds=[1, 2, 3], perm_seed=0, head_start=start)
    for k in range(3):
        assert torch.allclose(res.weight[:, k, :].T, text, atol=1e-5) and torch.equal(res.bias[k], start.bias)
    zeroshot_top1 = 100 * float(((x @ text.T).argmax(1) == y).float().mean())
    assert torch.allclose(res.top1, torch.full((3,), zeroshot_top1))


def test_one_shot_the_text_start_beats_the_random_start(tiny, wnids, text, tmp_path):
    """Images near their concept's text embedding: one noisy shot per class teaches a random head little, the text
    start already names them."""
    path, _ = tiny
    root = write_pair(tmp_path / "cog_l1", path, wnids, text.numpy(), 0.08, (1, 30), seed=3)
    start = _start(root, tmp_path)
    from cog_pl.features.pair import open_pair
    from cog_pl.probe.cell import Splits

    s = Splits.load(open_pair(root))
    data = ProbeData(s.train_x, s.train_y, s.test_x, s.test_y, s.num_classes)
    kw = {"protocol": ProbeProtocol(epochs=10), "seeds": [4], "perm_seed": 5}
    text_top1 = float(train_probe(data, [0.1], [1e-4], head_start=start, **kw).top1[0])  # the protocol's lowest lr
    random_top1 = float(train_probe(data, [0.1], [1e-4], **kw).top1[0])
    assert text_top1 >= random_top1 + 30, (text_top1, random_top1)


def test_run_methods_linear_linear_text_init_zeroshot(tiny, wnids, text, tmp_path):
    from cog_pl.cli.main import build_parser
    from cog_pl.cli.run import _config
    from cog_pl.pipeline import ExtractOptions

    path, _ = tiny

    def config(*extra, model=f"open_clip:{NAME}"):
        args = build_parser().parse_args(["run", "--model", model, "--checkpoint", str(path),
                                          "--in21k-root", str(tmp_path), "--domains", "cog_l1", "cog_l2",
                                          "--seeds", "22", "--shots", "all", "2", "--trials", "2", "--epochs", "2",
                                          "--probe-device", "cpu", "--probe-precision", "32-true",
                                          "--out", str(tmp_path / "out"), *extra])
        return _config(args, ExtractOptions(), args.methods, model=args.model[0], checkpoint=str(path), in1k_root=None,
                       in21k_root=args.in21k_root, out=args.out, domains=tuple(args.domains), benchmark=None,
                       check=False, overwrite=False)

    cfg = config("--methods", "linear", "linear_text_init", "zeroshot", "--zeroshot-templates", "openai7")
    assert cfg.method_options["zeroshot"].templates == cfg.method_options["linear_text_init"].templates == "openai7"
    out = tmp_path / "out"
    for i, domain in enumerate(cfg.domains):
        write_pair(out / "features" / "m" / domain, path, wnids, text.numpy(), 0.3, (6, 3), seed=i)
    assert probe_stage(cfg, out, "m") == 2 * (2 + 2 + 1)  # domains x (linear: 2 cells, text-initialised: 2, zero-shot)
    rows = read_rows(out / "results.sqlite")
    by = {(r["method"], r["domain"], r["shots"]): r for r in rows}
    assert sorted({m for m, _, _ in by}) == ["linear", "linear_text_init", "zeroshot"]
    linear, text_init = by["linear", "cog_l1", 2], by["linear_text_init", "cog_l1", 2]
    assert "init" not in linear and "init" not in linear["search"]  # the linear probe's rows as before
    init = text_init["init"]
    assert init == text_init["search"]["init"]
    assert (init["from"], init["names"], init["templates"], init["scale"], init["bias"], init["features"]) == (
        "text", "lemma", "openai7", 1.0, 0.0, "l2-normalised")
    assert init["tower"] == {"model": f"open_clip:{NAME}",
                             "sha256": by["zeroshot", "cog_l1", None]["text_tower"]["sha256"]}
    assert text_init["identity"] != linear["identity"] and text_init["study"] != linear["study"]
    for key in ("lr", "wd", "oracle_test_top1", "selected_test_top1", "train_rows", "tuning_rows", "val_rows"):
        assert key in text_init
    assert (text_init["train_rows"], text_init["tuning_rows"]) == (linear["train_rows"], linear["tuning_rows"])
    # the classifier encoded once per domain, by the zero-shot method or the probe, then read from its cache
    assert len(list((out / "results.zeroshot" / "m" / "cog_l1").glob("*.npy"))) == 1
    assert probe_stage(cfg, out, "m") == 0  # resumed
    from cog_pl.report.tables import methods_markdown, summarize

    section = methods_markdown(summarize(rows))  # the report sets the method apart, by its label, after the linear
    assert section.index("| linear probe |") < section.index("| linear probe (text-initialised) |"), section
    # rows of other templates are refused before any work
    with pytest.raises(CogError, match=r"row m/linear_text_init/cog_l1/shots=all/seed=22 was made with .*openai7"):
        probe_stage(config("--methods", "linear_text_init"), out, "m")
    with pytest.raises(CogError, match=r"^linear_text_init needs a text tower and resnet50 has none; the models "
                                       r"with one: .*drop linear_text_init from --methods\)$"):
        cfg.__class__(model="resnet50", in1k_root=None, in21k_root=str(tmp_path), domains=("cog_l1",),
                      methods=("linear_text_init",), random_weights=True)
