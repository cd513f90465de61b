"""Issue 37, items 1 and 2: a model label names one set of weights (the user's ResNet-50 beside the paper's in one
output folder, the report relative to the real baseline, one label with two weights refused) and no model runs on
silent random weights (refused before any work; ``--random-weights`` labelled). Through the installed ``cog-pl`` on a
small generated benchmark; the label rules themselves in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision

from cog_pl.errors import CogError
from cog_pl.io import file_sha256
from cog_pl.results import read_rows

COG_PL = Path(sys.executable).with_name("cog-pl")  # the console script installed beside the test's Python


def cog(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``cog-pl ARGS`` as a user runs it."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "2", **(env or {})}
    return subprocess.run([str(COG_PL), *map(str, args)], env=full_env, capture_output=True, text=True, timeout=900)


def last_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


@pytest.fixture(scope="module")
def bench(onto, tmp_path_factory):
    """A generated benchmark of two L2 concepts (nine images each): its IN-21K folder and benchmark file."""
    from cog_pl.demo.synthetic import make_demo

    root = tmp_path_factory.mktemp("labels")
    path = make_demo(root / "d", n_seen=3, n_per_level=2, train_per_concept=6, test_per_concept=3, image_size=32,
                     onto=onto)
    return root / "d" / "in21k", path


def run_args(bench, out: Path) -> list[str | Path]:
    """``cog-pl run``'s options for the tiny benchmark: one level, one seed, one trial of two epochs, on CPU."""
    in21k, path = bench
    return ["--in21k-root", in21k, "--benchmark", path, "--domains", "cog_l2", "--out", out, "--no-check",
            "--num-workers", "0", "--batch-size", "18", "--seeds", "22", "--shots", "all", "--trials", "1",
            "--epochs", "2", "--accelerator", "cpu", "--probe-device", "cpu", "--no-noise-predictions", "--no-html"]


def resnet50_file(path: Path, seed: int) -> Path:
    """A user's ResNet-50, saved as torchvision's state dict (``torch.save(model.state_dict(), path)``)."""
    torch.manual_seed(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(torchvision.models.resnet50().state_dict(), path)
    return path


def section(report: str, title: str) -> str:
    return report.split(f"\n## {title}")[1].split("\n## ")[0]


@pytest.mark.slow
def test_a_users_resnet50_beside_the_papers_in_one_folder_relative_to_the_real_baseline(bench, tmp_path):
    """The paper's resnet50 (a replica of its published file, whose digest cannot be the published one: named
    ``resnet50@replica`` with ``--name``, since ``resnet50`` is the published file's alone) and the user's
    ``torchvision:resnet50 --checkpoint my_r50.pth`` in one output folder: two labels, two stores, rows of both, the
    report relative to the paper's model and its models table naming each file; a second file under the same label is
    refused in one line naming both files and digests, nothing written."""
    from replicas.torchvision_family import publish_resnet50

    paper = tmp_path / "models" / "resnet50" / "resnet50-replica.pth"
    paper.parent.mkdir(parents=True)
    publish_resnet50(paper)
    mine = resnet50_file(tmp_path / "mine" / "my_r50.pth", seed=1)
    out = tmp_path / "out"

    got = cog("run", "--model", "torchvision:resnet50", "--checkpoint", mine, *run_args(bench, out))
    assert got.returncode == 0, got.stderr[-3000:]
    got = cog("run", "--model", "resnet50", "--checkpoint", paper, "--name", "resnet50@replica", "--baseline",
              "resnet50@replica", *run_args(bench, out))
    assert got.returncode == 0, got.stderr[-3000:]

    rows = {r["model"]: r for r in read_rows(out / "results.sqlite")}
    assert sorted(rows) == ["resnet50@my_r50", "resnet50@replica"]  # both evaluated, under their own labels
    for label, file in (("resnet50@replica", paper), ("resnet50@my_r50", mine)):
        meta = json.loads((out / "features" / label / "cog_l2" / "train" / "meta.json").read_text())
        assert (meta["model"], meta["weights"], meta["weights_sha256"]) == (label, str(file), file_sha256(file))
        assert rows[label]["features"]["train"]["weights_sha256"] == file_sha256(file)
    report = (out / "report" / "report.md").read_text()
    diff = rows["resnet50@my_r50"]["test_top1"] - rows["resnet50@replica"]["test_top1"]
    [line] = [ln for ln in section(report, "Relative to resnet50@replica").splitlines()
              if ln.startswith("| resnet50@my_r50 |")]
    assert line.split("|")[2].strip().startswith(f"{diff:+.2f}")  # the user's model against the paper's
    table = section(report, "Models")
    assert f"| resnet50@replica | torchvision:resnet50 | {paper.name} | {file_sha256(paper)[:12]} | " \
           "torchvision:resnet50 penultimate 2048-d" in table
    assert f"| resnet50@my_r50 | torchvision:resnet50 | my_r50.pth | {file_sha256(mine)[:12]} |" in table

    other = resnet50_file(tmp_path / "other" / "my_r50.pth", seed=2)  # the same stem: the same label
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    got = cog("run", "--model", "torchvision:resnet50", "--checkpoint", other, *run_args(bench, out))
    line = last_line(got)
    assert got.returncode == 2 and "Traceback" not in got.stderr and line.startswith("cog-pl run: error: label "
                                                                                      "resnet50@my_r50 already names")
    assert all(f in line for f in (str(mine), file_sha256(mine)[:16], str(other), file_sha256(other)[:16]))
    assert "--name" in line and sorted(p.relative_to(out) for p in out.rglob("*")) == before


@pytest.mark.slow
def test_random_weights_only_on_request_and_labelled_in_rows_stores_and_report(bench, tmp_path):
    """``timm:resnet10t`` (built without weights) refused without a file; with ``--random-weights`` evaluated as
    ``resnet10t@random``: its folder, its rows, its store's ``weights: random``, the report's models table."""
    out = tmp_path / "out"
    got = cog("run", "--model", "timm:resnet10t", *run_args(bench, out))
    assert got.returncode == 2 and "timm:resnet10t is built without weights" in last_line(got)
    assert "--random-weights" in last_line(got) and not out.exists()
    got = cog("run", "--model", "timm:resnet10t", "--random-weights", *run_args(bench, out))
    assert got.returncode == 0, got.stderr[-3000:]
    assert {r["model"] for r in read_rows(out / "results.sqlite")} == {"resnet10t@random"}
    meta = json.loads((out / "features" / "resnet10t@random" / "cog_l2" / "test" / "meta.json").read_text())
    assert meta["model"] == "resnet10t@random" and meta["weights"] == "random"
    table = section((out / "report" / "report.md").read_text(), "Models")
    assert "| resnet10t@random | timm:resnet10t | random | – | timm:resnet10t penultimate 512-d" in table


def test_a_paper_model_without_its_file_is_refused_before_any_work(tmp_path):
    """No file in the models dir, or two: one line naming ``cog-pl models download``, ``--checkpoint``, the folder
    (and the files), ``--random-weights``; no output folder, no store, no row, no study."""
    in21k = tmp_path / "in21k"
    in21k.mkdir()
    common = ["--in21k-root", in21k, "--domains", "cog_l1", "--no-check"]
    got = cog("run", "--model", "resnet50", "--out", tmp_path / "a", *common,
              env={"COG_PL_MODELS": str(tmp_path / "models")})
    assert got.returncode == 2 and "Traceback" not in got.stderr
    assert last_line(got) == (f"cog-pl run: error: resnet50 needs weights and has none: no file in {tmp_path}/models/"
                              "resnet50; fetch the published file with cog-pl models download resnet50, give one "
                              "with --checkpoint FILE, or pass --random-weights for random initialisation")
    two = tmp_path / "two" / "resnet50"
    two.mkdir(parents=True)
    for name in ("resnet50-old.pth", "my_copy.pth"):
        (two / name).write_bytes(b"weights")
    got = cog("run", "--model", "resnet50", "--models-dir", two.parent, "--out", tmp_path / "b", *common)
    assert got.returncode == 2 and f"2 files in {two} (my_copy.pth, resnet50-old.pth) and none is " \
                                   "resnet50-19c8e357.pth" in last_line(got)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_labels_of_weights(tmp_path):
    """The label rules (cog_pl.models.label): the paper name for a recorded download of a paper model's file,
    ``<name>@<stem>`` for other weights of a paper model's network, ``@random``, the name of others, ``--name``."""
    from cog_pl.models.label import model_label
    from cog_pl.models.records import record_download
    from cog_pl.results.labels import LabelWeightsError, check_label_weights

    file = tmp_path / "models" / "dino" / "dino_resnet50_pretrain.pth"
    file.parent.mkdir(parents=True)
    file.write_bytes(b"the published bytes")
    assert model_label("dino", file) == "dino@dino_resnet50_pretrain"  # not known as the published file yet
    record_download(file, "dino", "https://example.org/dino_resnet50_pretrain.pth")
    assert model_label("dino", file) == "dino"  # cog-pl models download fetched and recorded it
    assert model_label("swav", file) == "swav@dino_resnet50_pretrain"  # another model's record
    file.write_bytes(b"other bytes")  # the file changed since: no longer the recorded one
    assert model_label("dino", file) == "dino@dino_resnet50_pretrain"
    assert model_label("torchvision:resnet50", tmp_path / "my_r50.pth.tar") == "resnet50@my_r50"
    assert model_label("timm:resnet50", random_weights=True) == "resnet50@random"
    assert model_label("timm:resnet10t", tmp_path / "a.pth") == "resnet10t"  # no paper model is called so
    assert model_label("resnet50", file, name="simclr_r50") == "simclr_r50"
    with pytest.raises(CogError, match=r"--name 'a/b': a label is a folder name"):
        model_label("resnet50", file, name="a/b")

    store = tmp_path / "out" / "features" / "mine" / "in1k" / "train"
    store.mkdir(parents=True)
    (store / "meta.json").write_text(json.dumps({"model": "mine", "weights": "/x/first.pth",
                                                 "weights_sha256": "ab" * 32}))
    check_label_weights("other", file, features=tmp_path / "out" / "features")  # another label: free
    with pytest.raises(LabelWeightsError) as err:
        check_label_weights("mine", file, features=tmp_path / "out" / "features")
    assert str(err.value).startswith(f"label mine already names /x/first.pth (sha256 abababababababab) in {store}; "
                                     f"this run's weights are {file} (sha256 {file_sha256(file)[:16]})")
    check_label_weights("mine", file, features=tmp_path / "out" / "features", overwrite=True)  # replaced on request


def test_the_baseline_resolves_to_a_label():
    """``--baseline`` takes a label, or a model name that spells one (the paper model's label); else one line naming
    the labels there are."""
    from cog_pl.report.models import resolve_baseline

    labels = ["resnet50", "resnet50@my_r50"]
    assert resolve_baseline("resnet50@my_r50", labels) == "resnet50@my_r50"
    assert resolve_baseline("ResNet-50", labels) == "resnet50"
    assert resolve_baseline(None, labels) is None
    with pytest.raises(CogError, match=r"--baseline dino: no results under that label; the labels are resnet50, "
                                       r"resnet50@my_r50"):
        resolve_baseline("dino", labels)


def test_the_demos_cnn_needs_weights_and_its_random_ones_are_labelled(tmp_path):
    """Issue 47, item 1: the demo's CNN (and its self-supervised twin and tiny CLIP, cog_pl's own builders) has no
    weights of its own: without a file it is refused, in resolve_checkpoint, which RunConfig and FeatureExtractor
    call (the Python API refuses as the commands do); with random weights on request it is ``demo_cnn@random``; with
    a file it keeps its name; a registered builder of the user's (which may load its own weights) is left alone."""
    from cog_pl.errors import MissingWeightsError
    from cog_pl.extract import FeatureExtractor
    from cog_pl.models.files import resolve_checkpoint
    from cog_pl.models.label import model_label, needs_weights
    from cog_pl.models.zoo import DEMO_MODELS, resolve_spec
    from cog_pl.pipeline import RunConfig

    assert all(needs_weights(spec) for spec in DEMO_MODELS.values())
    with pytest.raises(MissingWeightsError, match=r"^external:demo_cnn is built without weights \(cog_pl\.models\."
                                                  r"arch\.demo_cnn:DemoCNN initialises it at random\): give a file "
                                                  r"with --checkpoint FILE \(cog-pl demo writes OUT/data/demo_cnn\.pt"
                                                  r"\), or pass --random-weights"):
        resolve_checkpoint("external:demo_cnn")
    with pytest.raises(MissingWeightsError, match=r"^demo_cnn is built without weights"):
        RunConfig(model="demo_cnn", in1k_root=None, in21k_root=str(tmp_path), domains=("cog_l1",))
    with pytest.raises(MissingWeightsError, match=r"--model\.checkpoint FILE \(checkpoint=\)"):
        FeatureExtractor("external:demo_cnn")
    assert model_label("external:demo_cnn", random_weights=True) == "demo_cnn@random"  # as docs/models.md says
    assert model_label("demo_cnn_ssl", random_weights=True) == "demo_cnn_ssl@random"
    assert FeatureExtractor("external:demo_cnn", random_weights=True).model_name == "demo_cnn@random"
    assert model_label("external:demo_cnn", tmp_path / "demo_cnn.pt") == "demo_cnn"
    assert needs_weights(resolve_spec("external:cog_pl.models.arch.demo_cnn:DemoCNN"))  # named by its import path
    assert not needs_weights(resolve_spec("external:torch.nn:Identity"))  # a builder of the user's


def test_a_paper_models_name_is_the_label_of_its_published_file_alone(tmp_path):
    """Issue 47, item 2: ``--name dino`` on other weights and ``--name resnet50`` on the demo's CNN were accepted;
    a label that is a paper model's name is refused (in model_label, naming the option) unless the weights are that
    model's published file on its network (here a recorded download: CompReSS's digest is published nowhere)."""
    from torch import nn

    from cog_pl.extract import FeatureExtractor
    from cog_pl.models.label import model_label
    from cog_pl.models.records import record_download

    file = tmp_path / "models" / "compress" / "model.ckpt"
    file.parent.mkdir(parents=True)
    file.write_bytes(b"the published bytes")
    with pytest.raises(CogError, match=r"^--name compress: the label of the paper's CompReSS \(its published "
                                       r"model\.ckpt on torchvision:resnet50\), and these weights are .*model\.ckpt, "
                                       r"not its published file; choose another label \(e\.g\. compress@mine\)$"):
        model_label("compress", file, name="compress")
    record_download(file, "compress", "https://example.org/model.ckpt")  # now the published file
    assert model_label("compress", file, name="compress") == "compress"
    assert model_label("torchvision:resnet50", file, name="compress") == "compress"  # the same network
    with pytest.raises(CogError, match=r"these weights are .*model\.ckpt, not its published file"):
        model_label("torchvision:resnet50", file, name="dino")  # another paper model's file
    with pytest.raises(CogError, match=r"--model\.name resnet50: .* these weights are of another network, "
                                       r"timm:resnet10t"):
        model_label("timm:resnet10t", file, name="resnet50", option="--model.name")
    with pytest.raises(CogError, match=r"--name dino: .* these weights are random weights"):
        model_label("torchvision:resnet50", None, name="dino", random_weights=True)
    with pytest.raises(CogError, match=r"--model\.name resnet50: .* these weights are those of a module of yours "
                                       r"\(Linear\)"):
        FeatureExtractor(nn.Linear(3, 2), name="resnet50")
    assert model_label("timm:resnet10t", file, name="resnet50@mine") == "resnet50@mine"  # any other label
