"""The packaged configs and the common overrides of the LightningCLI commands (issue 39, item 10): checkpointing
switched off, the image root by its former name, the fit's config.yaml kept by the test line it prints and
reusable for another fit, a model named by its import path, a final probe's fit without Lightning's empty-loader
warning."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from test_probe_fixtures import write_features

from cog_pl.cli.main import main

TINY_NET = '''
import torch.nn as nn


class TinyNet(nn.Module):
    """A network of the user's, named by its import path."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return self.pool(self.conv(x)).flatten(1)
'''


def test_a_final_probe_fit_its_test_line_and_the_reused_config(tmp_path, capsys):
    """``probe fit --config linear_probe`` in final mode: no ``Total length of `list``` warning; with
    ``--trainer.enable_checkpointing false`` the packaged ModelCheckpoint is left out, not refused; the test line the
    fit prints keeps the fit's config.yaml, which a second fit reads again."""
    features = write_features(tmp_path / "feats", classes=3, dim=4, per_class=10, test_per_class=4)
    common = ["--config", "linear_probe", "--data.features", str(features), "--data.stage_mode", "final",
              "--trainer.max_epochs", "1", "--trainer.accelerator", "cpu"]
    run = tmp_path / "run"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["probe", "fit", *common, "--trainer.default_root_dir", str(run)]) == 0
    assert not [w for w in caught if "Total length" in str(w.message)], [str(w.message) for w in caught]
    out = capsys.readouterr().out
    (line,) = [x.split(": ", 1)[1] for x in out.splitlines() if x.startswith("test this run with: ")]
    config = run / "config.yaml"
    fitted = config.read_text()
    assert main(line.split()[1:]) == 0, capsys.readouterr().err  # the line as printed, after `cog-pl`
    assert config.read_text() == fitted  # the test saved its own config beside it
    assert (run / "test_config.yaml").is_file()
    again = tmp_path / "again"
    assert main(["probe", "fit", "--config", str(config), "--trainer.default_root_dir", str(again)]) == 0, \
        capsys.readouterr().err
    assert (again / "checkpoints" / "last.ckpt").is_file()
    off = tmp_path / "off"
    assert main(["probe", "fit", *common, "--trainer.default_root_dir", str(off),
                 "--trainer.enable_checkpointing", "false"]) == 0, capsys.readouterr().err
    assert not list(off.rglob("*.ckpt"))


def test_finetune_overrides_of_the_packaged_config(onto, tmp_path, monkeypatch, capsys):
    """``finetune fit --config demo`` with the overrides users type: the image root by its former name (``root``,
    over the config's ``in21k_root``), a model by its import path (``mynets.TinyNet``, a class), and
    ``--trainer.enable_checkpointing false`` (the config adds a ModelCheckpoint)."""
    from cog_pl.demo.synthetic import make_demo

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=2, train_per_concept=4, test_per_concept=2,
                      image_size=32, onto=onto)
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "mynets.py").write_text(TINY_NET)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    argv = ["finetune", "fit", "--config", "demo", "--data.benchmark", str(bench), "--data.level", "cog_l2",
            "--model.model", "mynets.TinyNet", "--model.checkpoint", "null", "--trainer.max_epochs", "1",
            "--trainer.precision", "32-true", "--trainer.accelerator", "cpu", "--trainer.default_root_dir",
            str(tmp_path / "ft"), "--trainer.enable_checkpointing", "false"]
    with pytest.warns(FutureWarning, match=r"root goes in cog_pl 0.2"):
        code = main([*argv, "--data.root", str(tmp_path / "d" / "in21k")])
    assert code == 0, capsys.readouterr().err
    assert not list(Path(tmp_path / "ft").rglob("*.ckpt"))
    saved = (tmp_path / "ft" / "config.yaml").read_text()
    assert "model: external:mynets:TinyNet" in saved  # taken as the class, recorded by its builder's path
    # both names given on the command line are still refused, in one line
    assert main([*argv, "--data.root", str(tmp_path / "d" / "in21k"), "--data.in21k_root",
                 str(tmp_path / "d" / "in21k")]) == 2
    assert "give in21k_root (root is its former name), not both" in capsys.readouterr().err
