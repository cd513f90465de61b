"""Wrong files are refused with one line that points at the fix; safe loading runs nothing from a file; the opt-in
that reads TorchScript is explicit and recorded; ``cog-pl models list|convert``."""

from __future__ import annotations

import argparse
import json
import os

import pytest
import torch
import torchvision

from cog_pl.cli.main import main
from cog_pl.models import build_backbone
from cog_pl.models.checkpoints import CheckpointError, load_file


@pytest.fixture(scope="module")
def resnet50_state():
    torch.manual_seed(0)
    return torchvision.models.resnet50().state_dict()


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_file_of_another_architecture_says_so(tmp_path, capsys):
    path = tmp_path / "resnet18.pth"
    torch.save(torchvision.models.resnet18().state_dict(), path)
    assert main(["models", "check", "resnet50", str(path)]) == 2
    line = _error_line(capsys)
    assert "holds another architecture than resnet50" in line and str(path) in line
    assert "resnet50-19c8e357.pth" in line  # the file the user should have


def test_half_the_keys_are_named(tmp_path, capsys, resnet50_state):
    path = tmp_path / "half.pth"
    keys = [k for k in resnet50_state if not k.startswith(("layer4", "fc."))]
    torch.save({k: resnet50_state[k] for k in keys}, path)
    assert main(["models", "check", "resnet50", str(path)]) == 2
    line = _error_line(capsys)
    assert "backbone tensors missing (e.g. layer4." in line and str(path) in line


def test_an_unknown_wrapper_is_named_with_the_option_that_reads_it(tmp_path, capsys, resnet50_state):
    path = tmp_path / "wrapped.pth"
    torch.save({"state_dict": {"backbone.net." + k: v for k, v in resnet50_state.items()}}, path)
    assert main(["models", "check", "torchvision:resnet50", str(path)]) == 2
    line = _error_line(capsys)
    assert "carry the wrapper 'backbone.net.'" in line and line.endswith("pass --checkpoint-prefix backbone.net.")
    assert main(["models", "check", "torchvision:resnet50", str(path), "--checkpoint-prefix", "backbone.net."]) == 0
    facts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert facts["container"] == "state_dict" and facts["prefix"] == "backbone.net." and facts["loaded"] == 265
    assert facts["dropped"] == {"head fc.*": 2}


def test_a_paper_models_file_in_another_layout_names_the_expected_container(tmp_path, capsys, resnet50_state):
    path = tmp_path / "raw.pth"
    torch.save({"module.encoder_q." + k: v for k, v in resnet50_state.items()}, path)
    assert main(["models", "check", "moco_v2", str(path)]) == 2
    line = _error_line(capsys)
    assert "not MoCo-v2's published file" in line and "['state_dict']" in line


def test_benign_pickled_objects_load_and_a_malicious_pickle_runs_nothing(tmp_path, resnet50_state):
    import numpy as np

    ok = tmp_path / "ok.pth"
    torch.save({"state_dict": resnet50_state, "args": argparse.Namespace(lr=0.1), "acc": np.float64(76.1),
                "dtype": np.dtype("float32")}, ok)
    assert build_backbone("torchvision:resnet50", ok).report.other_objects == ["args", "acc", "dtype"]
    scalar = np._core.multiarray.scalar  # files saved under numpy 1.x name it numpy.core.multiarray.scalar
    old = tmp_path / "numpy1.pth"
    scalar.__module__ = "numpy.core.multiarray"
    try:
        torch.save({"state_dict": resnet50_state, "best_acc1": np.float64(76.1)}, old)
    finally:
        scalar.__module__ = "numpy._core.multiarray"
    assert load_file(old)["best_acc1"] == 76.1
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    bad = tmp_path / "bad.pth"
    torch.save({"state_dict": resnet50_state, "payload": Payload()}, bad)
    with pytest.raises(CheckpointError, match=r"pickles posix.system, which safe loading refuses .*trust_checkpoint"):
        load_file(bad)
    assert not marker.exists()


def _torchscript(path, state):
    net = torchvision.models.resnet18()
    net.load_state_dict(state)
    torch.jit.save(torch.jit.script(net.eval()), str(path))


def test_torchscript_needs_the_opt_in_and_converts_once(tmp_path, capsys):
    torch.manual_seed(0)
    state = torchvision.models.resnet18().state_dict()
    path = tmp_path / "scripted.pt"
    _torchscript(path, state)
    assert main(["models", "check", "torchvision:resnet18", str(path)]) == 2
    line = _error_line(capsys)
    assert "is a TorchScript archive" in line and "pass --trust-checkpoint" in line and "models convert" in line
    assert main(["models", "check", "torchvision:resnet18", str(path), "--trust-checkpoint"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["trusted"] is True
    out = tmp_path / "plain.pth"
    assert main(["models", "convert", "torchvision:resnet18", str(path), str(out)]) == 2  # convert needs it too
    assert "TorchScript" in _error_line(capsys)
    assert main(["models", "convert", "torchvision:resnet18", str(path), str(out), "--trust-checkpoint"]) == 0
    capsys.readouterr()
    converted = build_backbone("torchvision:resnet18", out)  # plain tensors now: no trust needed to read them,
    # and the trust its source needed stays recorded (the stores made from it say so)
    assert converted.trusted and converted.report.converted_from["source"] == "scripted.pt"
    assert converted.report.converted_from["trust_checkpoint"] is True
    for key, value in converted.model.state_dict().items():
        if not key.endswith("num_batches_tracked"):
            torch.testing.assert_close(value, state[key], rtol=0, atol=0)


def test_models_list_names_every_paper_model_with_its_file(capsys):
    assert main(["models", "list", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 31
    by = {r["name"]: r for r in rows}
    assert by["vgg19"]["file"] == "vgg19_bn-c79401a0.pth" and by["nat_m4"]["feature_dim"] == 1536
    assert by["clip"]["needs_trust"] and by["byol"]["conversion"] and by["t2t_vit_t_14"]["download"] == "manual"
    assert by["efficientnet_b1"]["normalisation"] == "ImageNet, BGR"
    assert main(["models", "list"]) == 0
    table = capsys.readouterr().out
    assert "T2T-ViT-t-14" in table and "one-time conversions" in table
    byol = next(line for line in table.splitlines() if line.strip().startswith("byol:"))
    assert byol.count("convert it") == 1 and "then convert it once: python convert.py" in byol  # each step said once
