"""The configs shipped inside the package: ``cog-pl configs list|show`` and ``--config NAME`` of the LightningCLI
commands (a name reads the packaged file, a path the file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cog_pl.cli.configs import GROUPS, configs_root, find, packaged, resolve_config, resolve_config_args
from cog_pl.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def test_the_clones_configs_folder_is_the_packaged_one():
    """``configs/`` at the top of a clone (the layout the docs name) links to the folder the wheel ships."""
    assert (REPO / "configs").resolve() == configs_root().resolve() == (REPO / "cog_pl" / "configs").resolve()
    assert {p.parent.name for p in configs_root().glob("*/*.yaml")} == set(GROUPS)


def test_every_group_ships_its_configs():
    table = packaged()
    assert {"extract/resnet50", "extract/dino", "probe/linear_probe", "probe/ddp_cpu", "finetune/demo",
            "finetune/resnet50"} <= set(table)
    assert len(packaged("extract")) == 32  # the 31 paper models and efficientnet_lite0
    assert all(p.is_file() for p in table.values())


def test_a_name_resolves_to_the_commands_packaged_file():
    assert resolve_config("extract", "resnet50") == str(configs_root() / "extract" / "resnet50.yaml")
    assert resolve_config("finetune", "resnet50") == str(configs_root() / "finetune" / "resnet50.yaml")
    assert resolve_config("extract", "resnet50.yaml") == resolve_config("extract", "extract/resnet50")
    assert resolve_config_args("probe", ["fit", "-c", "linear_probe", "--config=ddp_cpu", "--data.x", "y"]) == [
        "fit", "-c", str(configs_root() / "probe" / "linear_probe.yaml"),
        "--config=" + str(configs_root() / "probe" / "ddp_cpu.yaml"), "--data.x", "y"]


def test_a_file_is_read_as_given_even_under_a_packaged_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("resnet50").write_text("model:\n  model: dino\n")
    assert resolve_config("extract", "resnet50") == "resnet50"
    assert resolve_config("extract", str(REPO / "configs" / "extract" / "dino.yaml")).endswith("dino.yaml")
    assert resolve_config("extract", "{model: {model: dino}}") == "{model: {model: dino}}"  # inline YAML


def test_what_resolves_to_nothing_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not a clone: configs/extract/resnet50.yaml is not there
    with pytest.raises(FileNotFoundError, match=r"configs/extract/resnet50.yaml: no such file; the packaged config "
                                                r"of that name is --config resnet50"):
        resolve_config("extract", "configs/extract/resnet50.yaml")
    with pytest.raises(KeyError, match="resnet5: no packaged extract config of that name; there are: adv_robust"):
        resolve_config("extract", "resnet5")
    with pytest.raises(KeyError, match=r"the name of 2 packaged configs \(extract/resnet50, finetune/resnet50\)"):
        find("resnet50")


def test_configs_list_and_show(capsys):
    assert main(["configs", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(packaged()) and out[0].startswith("extract/adv_robust ")
    assert any(line.startswith("probe/linear_probe") and "LinearProbe" in line for line in out)
    assert main(["configs", "list", "finetune"]) == 0
    assert [w.split()[0] for w in capsys.readouterr().out.splitlines()] == ["finetune/demo", "finetune/resnet50",
                                                                             "finetune/resnet50_small"]
    assert main(["configs", "show", "linear_probe"]) == 0
    assert capsys.readouterr().out == (configs_root() / "probe" / "linear_probe.yaml").read_text()
    assert main(["configs", "show", "--path", "extract/dino"]) == 0
    assert capsys.readouterr().out.strip() == str(configs_root() / "extract" / "dino.yaml")
    assert main(["configs", "show", "resnet50"]) == 2
    assert "give the group too" in capsys.readouterr().err


def test_a_lightning_command_reads_a_packaged_config_by_name(tmp_path, monkeypatch, capsys):
    """``cog-pl probe fit --config linear_probe`` from a folder that holds no configs: the packaged file is loaded
    (``--print_config`` prints the values it set)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        main(["probe", "fit", "--config", "linear_probe", "--print_config"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "weight_decay: 1.0e-06" in out and "features: features/in1k" in out  # linear_probe.yaml's values
    assert main(["extract", "--config", "resnet5"]) == 2
    assert "no packaged extract config of that name" in capsys.readouterr().err
