"""Defaults chosen once (:mod:`cog_pl.defaults`): the code, the command line and every packaged config agree."""

from __future__ import annotations

import argparse
import inspect

import pytest
import yaml

from cog_pl.cli.configs import configs_root
from cog_pl.cli.main import build_parser
from cog_pl.datamodules.images import ImageDataModule
from cog_pl.defaults import MAX_SKIPPED, NUM_WORKERS
from cog_pl.extract.datamodule import ExtractionDataModule
from cog_pl.pipeline import ExtractOptions

CONFIGS = sorted(configs_root().rglob("*.yaml"))


def _data_section(config: dict) -> dict:
    data = config.get("data") or {}
    return data.get("init_args", data)


def test_the_code_takes_its_defaults_from_one_place():
    for cls in (ExtractionDataModule, ImageDataModule):
        assert inspect.signature(cls.__init__).parameters["num_workers"].default == NUM_WORKERS, cls
    assert inspect.signature(ExtractionDataModule.__init__).parameters["max_skipped"].default == MAX_SKIPPED
    assert ExtractOptions().num_workers == NUM_WORKERS and ExtractOptions().max_skipped == MAX_SKIPPED


def _defaults(parser: argparse.ArgumentParser) -> dict:
    return {a.dest: a.default for a in parser._actions if a.default is not argparse.SUPPRESS}


def test_the_command_line_takes_its_defaults_from_one_place():
    run = build_parser(only="run")._subparsers._group_actions[0].choices["run"]
    assert _defaults(run)["num_workers"] == NUM_WORKERS and _defaults(run)["max_skipped"] == MAX_SKIPPED
    data = build_parser(only="data")._subparsers._group_actions[0].choices["data"]
    check = data._subparsers._group_actions[0].choices["check"]
    assert _defaults(check)["num_workers"] == NUM_WORKERS and _defaults(check)["max_skipped"] == MAX_SKIPPED


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_packaged_config_agrees_with_the_defaults(path):
    data = _data_section(yaml.safe_load(path.read_text()))
    if data.get("cache_images"):  # decoded once at setup, then served in-process: its loaders have no workers
        assert data.get("num_workers") == 0, path.name
    elif "num_workers" in data:
        assert data["num_workers"] == NUM_WORKERS, f"{path.name}: num_workers {data['num_workers']!r}"
    if "max_skipped" in data:
        assert data["max_skipped"] == MAX_SKIPPED, f"{path.name}: max_skipped {data['max_skipped']!r}"


def test_the_configs_are_found():
    assert len(CONFIGS) >= 30 and any("num_workers" in _data_section(yaml.safe_load(p.read_text())) for p in CONFIGS)
