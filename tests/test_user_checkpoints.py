"""A user's checkpoint read as users save it, through the installed ``cog-pl``: a torchvision network trained under
DDP and saved by a training script (``{'epoch', 'state_dict': {'module.…'}, 'optimizer'}``) or by Lightning's
``trainer.save_checkpoint`` (the same ``state_dict`` beside ``pytorch-lightning_version``) is read by ``models
check``, ``extract`` and ``run``, what was stripped logged in one line; the options that read other layouts are
spelled alike in ``run`` and ``models check`` and every message suggests the spelling of the command in use; a file
converted from one that needed trust keeps that fact into its stores and the report.

The files are built from the source: torchvision's ``resnet18`` with random weights, wrapped in
``torch.nn.parallel.DistributedDataParallel``'s ``module.`` prefix (DDP registers the network as ``self.module``,
torch/nn/parallel/distributed.py) and saved with ``torch.save`` as the ImageNet example of pytorch/examples does
(``save_checkpoint({'epoch', 'arch', 'state_dict': model.state_dict(), 'best_acc1', 'optimizer', ...})``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision

COG_PL = Path(sys.executable).with_name("cog-pl")
#: The line that says what was read (cog_pl.models.build), as it reads for the DDP-saved resnet18.
STRIPPED = "wrapper prefix stripped: 'module.' (122 keys)"


def cog_pl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([str(COG_PL), *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def ddp_state(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``DistributedDataParallel(net).state_dict()``: every key under ``module.``."""
    return {f"module.{k}": v for k, v in net.state_dict().items()}


def save_ddp(path: Path, net: torch.nn.Module) -> Path:
    """As pytorch/examples imagenet/main.py saves a DDP model: epoch, arch, state_dict, best_acc1, optimizer."""
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    torch.save({"epoch": 90, "arch": "resnet18", "state_dict": ddp_state(net), "best_acc1": torch.tensor(69.8),
                "optimizer": optimizer.state_dict()}, path)
    return path


def save_lightning(path: Path, net: torch.nn.Module) -> Path:
    """As Lightning's ``trainer.save_checkpoint`` saves a LightningModule holding the DDP-wrapped network as
    ``self.module``: its ``state_dict`` beside ``pytorch-lightning_version`` and the loop's state."""
    import lightning

    torch.save({"epoch": 3, "global_step": 120, "pytorch-lightning_version": lightning.__version__,
                "state_dict": ddp_state(net), "optimizer_states": [], "lr_schedulers": [], "loops": {}}, path)
    return path


@pytest.fixture(scope="module")
def resnet18() -> torch.nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18()


@pytest.fixture(scope="module")
def bench(onto, tmp_path_factory) -> dict[str, str]:
    """A miniature benchmark (two concepts per level, 32 px images) and its IN-21K folder."""
    from cog_pl.demo.synthetic import make_demo

    root = tmp_path_factory.mktemp("bench")
    path = make_demo(root, n_seen=3, n_per_level=2, train_per_concept=6, test_per_concept=3, image_size=32,
                     onto=onto)
    return {"benchmark": str(path), "in21k": str(root / "in21k")}


@pytest.mark.parametrize("save", [save_ddp, save_lightning], ids=["ddp-training-script", "lightning-checkpoint"])
def test_models_check_reads_a_ddp_checkpoint_and_says_what_it_stripped(save, resnet18, tmp_path):
    path = save(tmp_path / "r18.ckpt", resnet18)
    proc = cog_pl("models", "check", "torchvision:resnet18", path)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["container"].startswith("state_dict") and facts["stripped"] == "'module.' (122 keys)"
    assert facts["loaded"] == 100 and facts["dropped"] == {"head fc.*": 2}  # 62 tensors + 40 of batch norm - fc
    said = [ln for ln in proc.stderr.splitlines() if STRIPPED in ln]
    assert len(said) == 1 and "container state_dict" in said[0] and str(path) in said[0]
    assert "wrapper stripped  'module.' (122 keys)" in proc.stdout.splitlines()


def test_extract_and_run_read_a_ddp_checkpoint(resnet18, bench, tmp_path):
    """``extract`` writes the stores of a DDP-saved file; ``run`` reads the same file the same way (it reuses the
    stores: same weights, same reading) and probes them."""
    path = save_ddp(tmp_path / "checkpoint.pth.tar", resnet18)
    out = tmp_path / "out"
    proc = cog_pl("extract", "--model.model", "torchvision:resnet18", "--model.checkpoint", path,
                  "--data.in21k_root", bench["in21k"], "--data.benchmark", bench["benchmark"], "--data.domains",
                  "[cog_l2]", "--data.out", out / "features", "--data.num_workers", "0", "--data.batch_size", "16",
                  "--trainer.accelerator", "cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sum(STRIPPED in ln for ln in proc.stderr.splitlines()) == 1, proc.stderr[-3000:]
    meta = json.loads((out / "features" / "resnet18" / "cog_l2" / "test" / "meta.json").read_text())
    from cog_pl.io import file_sha256

    assert meta["weights"] == str(path) and meta["weights_sha256"] == file_sha256(path)
    proc = cog_pl("run", "--model", "torchvision:resnet18", "--checkpoint", path, "--in21k-root", bench["in21k"],
                  "--benchmark", bench["benchmark"], "--out", out, "--domains", "cog_l2", "--no-check",
                  "--num-workers", "0", "--seeds", "22", "--shots", "all", "--trials", "1", "--epochs", "1",
                  "--probe-device", "cpu", "--no-noise-predictions", "--no-html", "--accelerator", "cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert STRIPPED in proc.stderr
    from cog_pl.results import read_rows

    rows = read_rows(out / "results.sqlite")
    assert [(r["model"], r["domain"]) for r in rows] == [("resnet18", "cog_l2")]


def test_run_and_models_check_take_the_same_loading_options_and_messages_name_them(resnet18, bench, tmp_path):
    """A file under a wrapper of its own (``backbone.net.``): each command's refusal names its own option, which
    that command then accepts."""
    path = tmp_path / "wrapped.pth"
    torch.save({"state_dict": {f"backbone.net.{k}": v for k, v in resnet18.state_dict().items()}}, path)
    proc = cog_pl("models", "check", "torchvision:resnet18", path)
    assert proc.returncode == 2 and proc.stderr.strip().endswith("pass --checkpoint-prefix backbone.net."), proc.stderr
    assert cog_pl("models", "check", "torchvision:resnet18", path, "--checkpoint-prefix", "backbone.net.").returncode == 0
    keys = json.dumps({"^backbone\\.net\\.": ""})
    assert cog_pl("models", "check", "torchvision:resnet18", path, "--checkpoint-key-map", keys).returncode == 0
    run = ("run", "--model", "torchvision:resnet18", "--checkpoint", path, "--in21k-root", bench["in21k"],
           "--benchmark", bench["benchmark"], "--out", tmp_path / "out", "--domains", "cog_l2", "--no-check",
           "--num-workers", "0", "--stage", "extract", "--accelerator", "cpu")
    proc = cog_pl(*run)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and lines[-1].startswith("cog-pl run: error: "), proc.stderr[-2000:]
    assert lines[-1].endswith("pass --checkpoint-prefix backbone.net."), lines[-1]
    proc = cog_pl(*run, "--checkpoint-prefix", "backbone.net.")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "out" / "features" / "resnet18" / "cog_l2" / "test" / "meta.json").is_file()
    proc = cog_pl("extract", "--model.model", "torchvision:resnet18", "--model.checkpoint", path, "--data.in21k_root",
                  bench["in21k"], "--data.benchmark", bench["benchmark"], "--data.out", tmp_path / "x")
    assert proc.returncode == 2 and proc.stderr.strip().endswith("pass --model.prefix backbone.net."), proc.stderr


def test_a_converted_file_keeps_the_trust_its_source_needed_into_stores_and_the_report(resnet18, tmp_path):
    """``models convert --trust-checkpoint`` of a TorchScript archive: the plain file reads without trust, its
    metadata says its source needed trust, the stores made from it record ``trusted_checkpoint`` and
    ``report.md`` names the model in one line."""
    jit = tmp_path / "r18.jit"
    torch.jit.script(resnet18).save(str(jit))
    plain = tmp_path / "r18_plain.pth"
    proc = cog_pl("models", "convert", "torchvision:resnet18", jit, plain, "--trust-checkpoint")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "its source needed trust, which the stores made from it record" in proc.stdout
    assert torch.load(plain, weights_only=True)["cog_pl_converted"]["trust_checkpoint"] is True
    proc = cog_pl("models", "check", "torchvision:resnet18", plain)
    assert proc.returncode == 0 and json.loads(proc.stdout.splitlines()[-1])["trusted"] is True
    shown = f"read with trust   yes: its source {jit.name} was, when cog-pl models convert read it"
    assert shown in proc.stdout.splitlines()

    from cog_pl.extract.module import FeatureExtractor
    from cog_pl.results import append_row

    meta = FeatureExtractor("torchvision:resnet18", str(plain)).store_meta("32-true")
    assert meta["trusted_checkpoint"] is True
    for split in ("train", "test"):
        store = tmp_path / "features" / "resnet18" / "cog_l2" / split
        store.mkdir(parents=True)
        (store / "meta.json").write_text(json.dumps(meta))
    for seed, top1 in ((22, 60.0), (37, 62.0)):
        append_row(tmp_path / "results.sqlite", {"model": "resnet18", "domain": "cog_l2", "shots": None,
                                                 "seed": seed, "test_top1": top1, "test_top5": 90.0})
    proc = cog_pl("report", "--results", tmp_path / "results.sqlite", "--features", tmp_path / "features", "--out",
                  tmp_path / "report")
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (tmp_path / "report" / "report.md").read_text()
    assert f"resnet18's features were made from a checkpoint read with trust_checkpoint (code from {plain}" in text
