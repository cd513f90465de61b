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

import contextlib
import hashlib
import json
import os
import shlex
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


def test_a_suggested_option_is_spelled_as_the_command_in_use_takes_it(resnet18, tmp_path):
    """The fast core of the commands' tests: one refusal, spelled for the Python API, ``cog-pl extract`` and
    ``cog-pl run`` / ``models check``."""
    from cog_pl.models import build_backbone
    from cog_pl.models.checkpoints import COMMAND_SPELLING, EXTRACT_SPELLING, CheckpointError, spelled

    path = tmp_path / "wrapped.pth"
    torch.save({"state_dict": {f"module.backbone.net.{k}": v for k, v in resnet18.state_dict().items()}}, path)
    said = {}
    for where, spelling in (("api", None), ("extract", EXTRACT_SPELLING), ("command", COMMAND_SPELLING)):
        with pytest.raises(CheckpointError) as err, spelled(spelling) if spelling else contextlib.nullcontext():
            build_backbone("torchvision:resnet18", path)
        said[where] = str(err.value)
    assert said["api"].endswith("pass prefix='backbone.net.'")  # DDP's module. stripped first, then named
    assert said["extract"].endswith("pass --model.prefix backbone.net.")
    assert said["command"].endswith("pass --checkpoint-prefix backbone.net.")
    read = build_backbone("torchvision:resnet18", path, prefix="backbone.net.").report
    assert (read.stripped, read.prefix, read.loaded) == ("'module.' (122 keys)", "backbone.net.", 100)


def test_a_download_kept_unverified_is_named_when_it_is_read(tmp_path, caplog):
    """The fast core of the run test below: ``models download`` records the mirror's copy of a file whose digest the
    zoo does not know, and reading it says so."""
    import logging

    from cog_pl.cli.main import main
    from cog_pl.models import build_backbone

    torch.manual_seed(0)
    mirror = tmp_path / "dino_r50.pth"
    torch.save({k: v for k, v in torchvision.models.resnet50().state_dict().items() if not k.startswith("fc.")},
               mirror)
    assert main(["models", "download", "dino", str(tmp_path / "models"), "--url", mirror.as_uri(),
                 "--no-progress"]) == 0
    dest = tmp_path / "models" / "dino" / mirror.name
    with caplog.at_level(logging.WARNING, logger="cog_pl.models.build"):
        build_backbone("dino", dest)
    assert [r.getMessage() for r in caplog.records if "is unverified" in r.getMessage()] == [
        f"checkpoint {dest} is unverified: cog-pl models download fetched it from {mirror.as_uri()} and checked its "
        f"sha256 ({hashlib.sha256(mirror.read_bytes()).hexdigest()[:12]}...) against nothing (the zoo "
        "knows no digest of it)"]


@pytest.mark.slow
def test_extract_and_run_read_a_ddp_checkpoint(resnet18, bench, tmp_path):
    """``extract`` writes the stores of a DDP-saved file; ``run`` on the same file finds them made by its inputs
    (same weights, same reading) without loading the file, and probes them."""
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
    # the stores are the extraction's: same file, same reading (the plan made without the tensors agrees)
    assert "the checkpoint was not loaded" in proc.stderr and STRIPPED not in proc.stderr, proc.stderr[-3000:]
    from cog_pl.results import read_rows

    rows = read_rows(out / "results.sqlite")
    assert [(r["model"], r["domain"]) for r in rows] == [("resnet18", "cog_l2")]


@pytest.mark.slow
def test_run_and_models_check_take_the_same_loading_options_and_messages_name_them(resnet18, bench, tmp_path):
    """A file under a wrapper of its own (``backbone.net.``): each command's refusal names its own option, which
    that command then accepts."""
    path = tmp_path / "wrapped.pth"
    torch.save({"state_dict": {f"backbone.net.{k}": v for k, v in resnet18.state_dict().items()}}, path)
    proc = cog_pl("models", "check", "torchvision:resnet18", path)
    assert proc.returncode == 2 and proc.stderr.strip().endswith("pass --checkpoint-prefix backbone.net."), proc.stderr
    proc = cog_pl("models", "check", "torchvision:resnet18", path, "--checkpoint-prefix", "backbone.net.")
    assert proc.returncode == 0, proc.stderr
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


def test_convert_refuses_to_replace_its_input_and_an_existing_file(resnet18, tmp_path, capsys):
    """``models convert`` of a readable file: onto itself (the same file by another path) refused, the file left
    as it was; over an existing file refused without ``--overwrite``, replaced with it."""
    from cog_pl.cli.main import main

    path = save_ddp(tmp_path / "r18.pth", resnet18)
    before = path.read_bytes()
    assert main(["models", "convert", "torchvision:resnet18", str(path), str(tmp_path / "." / "r18.pth")]) == 2
    assert capsys.readouterr().err.strip() == (f"cog-pl models: error: output {path} is the input file itself: "
                                               "converting would replace it; name another output file")
    assert path.read_bytes() == before
    out = tmp_path / "plain.pth"
    out.write_bytes(b"the user's other file")
    assert main(["models", "convert", "torchvision:resnet18", str(path), str(out)]) == 2
    assert capsys.readouterr().err.strip() == (f"cog-pl models: error: output {out} exists; pass --overwrite to "
                                               "replace it")
    assert out.read_bytes() == b"the user's other file"
    assert main(["models", "convert", "torchvision:resnet18", str(path), str(out), "--overwrite"]) == 0
    assert torch.load(out, weights_only=True)["cog_pl_converted"]["trust_checkpoint"] is False


def test_convert_of_a_torchvision_file_names_the_network_it_was_given_not_the_papers_model(tmp_path, capsys):
    """``models convert torchvision:resnet50 FILE OUT``: the line says to run OUT as ``torchvision:resnet50``, the
    name it was given (``--model resnet50`` is the paper's model, whose layout and label are its published file's),
    and OUT records that name."""
    from cog_pl.cli.main import main

    torch.manual_seed(0)
    path = save_ddp(tmp_path / "my_r50.pth", torchvision.models.resnet50())
    out = tmp_path / "my_r50_plain.pth"
    assert main(["models", "convert", "torchvision:resnet50", str(path), str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert f"cog-pl run --model torchvision:resnet50 --checkpoint {out} reads it without trust" in line
    assert "--model resnet50 " not in line
    assert torch.load(out, weights_only=True)["cog_pl_converted"]["model"] == "torchvision:resnet50"
    assert main(["models", "convert", "torchvision:resnet50", str(path), str(out)]) == 2  # one line, OUT kept
    assert capsys.readouterr().err.strip() == (f"cog-pl models: error: output {out} exists; pass --overwrite to "
                                               "replace it")


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


@pytest.mark.slow
def test_a_download_kept_unverified_is_recorded_and_run_says_so(bench, tmp_path):
    """DINO's published file carries no hash in its name and the zoo knows no digest of it: a mirror's copy is kept,
    recorded unverified beside it, and ``run`` (which takes it from the models dir) says so in one line. The
    mirror's file is the layout DINO publishes (facebookresearch/dino: a ResNet-50 state dict without its head)."""
    from cog_pl.io import file_sha256

    torch.manual_seed(0)
    mirror = tmp_path / "mirror" / "dino_r50.pth"
    mirror.parent.mkdir()
    torch.save({k: v for k, v in torchvision.models.resnet50().state_dict().items() if not k.startswith("fc.")},
               mirror)
    models = tmp_path / "models"
    proc = cog_pl("models", "download", "dino", models, "--url", mirror.as_uri(), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    dest = models / "dino" / "dino_r50.pth"
    assert proc.stdout.strip() == (f"dino: {dest} (unverified: the zoo knows no digest of it and its URL's name "
                                   f"carries none; sha256 {file_sha256(mirror)}, recorded beside it)")
    record = json.loads((models / "dino" / "dino_r50.pth.download.json").read_text())
    assert record == {"model": "dino", "file": "dino_r50.pth", "url": mirror.as_uri(), "sha256": file_sha256(mirror),
                      "verified": None}
    proc = cog_pl("run", "--model", "dino", "--models-dir", models, "--in21k-root", bench["in21k"], "--benchmark",
                  bench["benchmark"], "--out", tmp_path / "out", "--domains", "cog_l2", "--no-check", "--num-workers",
                  "0", "--stage", "extract", "--accelerator", "cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [ln for ln in proc.stderr.splitlines() if "is unverified" in ln]
    assert len(said) == 1, proc.stderr[-3000:]
    assert said[0].endswith(f"checkpoint {dest} is unverified: cog-pl models download fetched it from "
                            f"{mirror.as_uri()} and checked its sha256 ({file_sha256(mirror)[:12]}...) against "
                            "nothing (the zoo knows no digest of it)")


#: The own-checkpoint tutorial's command lines, in its order (a line added there must be added here, to be run).
TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorials" / "own-checkpoint.md"
TUTORIAL_LINES = [
    "cog-pl models check torchvision:resnet50 my_r50.pth",
    "cog-pl run --model torchvision:resnet50 --checkpoint my_r50.pth --in1k-root /data/in1k --in21k-root /data/in21k "
    "--out runs/mine",
    "cog-pl models convert torchvision:resnet50 my_r50.jit my_r50_plain.pth --trust-checkpoint",
    "cog-pl models check torchvision:resnet50 my_encoder.pth --checkpoint-prefix encoder.",
    "cog-pl run --model torchvision:resnet50 --checkpoint my_encoder.pth --checkpoint-prefix encoder. --in1k-root "
    "/data/in1k --in21k-root /data/in21k --out runs/encoder",
    "cog-pl extract --config resnet50 --model.model torchvision:resnet50 --model.checkpoint my_encoder.pth "
    "--model.prefix encoder. --data.in1k_root /data/in1k --data.in21k_root /data/in21k --data.out "
    "runs/encoder/features",
]


@pytest.mark.slow
def test_the_own_checkpoint_tutorial_runs_as_written(bench, tmp_path):
    """Each line of docs/tutorials/own-checkpoint.md, run in a folder holding the files it names, made as users make
    them: ``my_r50.pth`` a torchvision ResNet-50 saved by DDP in a training script's checkpoint, ``my_r50.jit`` a
    TorchScript archive, ``my_encoder.pth`` an SSL checkpoint whose backbone sits under ``encoder.`` beside its
    projector. The ImageNet roots are the one thing replaced: by the miniature benchmark (one level, one seed, one
    trial of one epoch), as the docs' other lines run on generated data (tests/test_docs_commands.py)."""
    from test_docs_commands import doc_commands
    from test_tutorials import first_try_lines

    demo = first_try_lines("own-checkpoint")  # the first try on the demo's data: run by tests/test_tutorials.py
    lines = [line for line in doc_commands(TUTORIAL.read_text()) if shlex.split(line) not in demo]
    assert lines == TUTORIAL_LINES
    torch.manual_seed(0)
    r50 = torchvision.models.resnet50()
    torch.save({"epoch": 100, "arch": "resnet50", "state_dict": ddp_state(r50), "optimizer": {}},
               tmp_path / "my_r50.pth")
    torch.jit.script(r50).save(str(tmp_path / "my_r50.jit"))
    encoder = {f"encoder.{k}": v for k, v in r50.state_dict().items() if not k.startswith("fc.")}
    projector = {"projector.0.weight": torch.zeros(128, 2048), "projector.0.bias": torch.zeros(128)}
    torch.save({"state_dict": {**encoder, **projector}, "epoch": 200}, tmp_path / "my_encoder.pth")
    tiny = {"--in1k-root /data/in1k --in21k-root /data/in21k":
            f"--in21k-root {bench['in21k']} --benchmark {bench['benchmark']} --domains cog_l2 --no-check "
            "--num-workers 0 --seeds 22 --shots all --trials 1 --epochs 1 --probe-device cpu --no-noise-predictions "
            "--accelerator cpu",
            "--data.in1k_root /data/in1k --data.in21k_root /data/in21k":
            f"--data.in21k_root {bench['in21k']} --data.benchmark {bench['benchmark']} --data.domains [cog_l2] "
            "--data.num_workers 0 --trainer.accelerator cpu"}
    said = []  # each line's process, in the tutorial's order
    for line in lines:
        for typed, small in tiny.items():
            line = line.replace(typed, small)
        proc = cog_pl(*line.split()[1:], cwd=tmp_path)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-3000:]}"
        said.append(proc)
    check, run, convert, _, run_encoder, extract = said
    assert "wrapper prefix stripped: 'module.' (320 keys)" in check.stderr
    assert "wrapper prefix stripped: 'module.' (320 keys)" in run.stderr
    assert "container state_dict (beside epoch, arch, optimizer)" in run.stderr
    assert "its source needed trust" in convert.stdout
    assert torch.load(tmp_path / "my_r50_plain.pth", weights_only=True)["cog_pl_converted"]["trust_checkpoint"]
    assert "key prefix taken: 'encoder.'" in run_encoder.stderr
    for run in ("mine", "encoder"):
        assert (tmp_path / "runs" / run / "report" / "report.html").is_file()
        label = {"mine": "resnet50@my_r50", "encoder": "resnet50@my_encoder"}[run]  # not the paper's resnet50
        meta = json.loads((tmp_path / "runs" / run / "features" / label / "cog_l2" / "test" / "meta.json")
                          .read_text())
        assert meta["weights"] == {"mine": "my_r50.pth", "encoder": "my_encoder.pth"}[run]
    assert "already complete" in extract.stdout  # the run's stores: the file read alike by both commands
