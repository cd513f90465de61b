"""``cog_pl.protocol``: every field is read by the code, and the probes' study names carry their rows' identity."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from cog_pl.protocol import FeatureProtocol, ProbeProtocol


def test_study_names_carry_the_identity_digest_of_their_rows():
    """One digest names a cell's study and identifies its rows (:mod:`cog_pl.results.identity`); resumed runs find their
    studies because it is stable."""
    from cog_pl.probe.cell import study_name
    from cog_pl.probe.tuner import SearchPlan
    from cog_pl.results.identity import wanted

    plan = SearchPlan(precision="32-true")
    digest = wanted(None, ProbeProtocol(), plan.as_record(), "32-true")["identity"]
    assert study_name("m", "cog_l1", None, 22, ProbeProtocol(), plan) == f"m/cog_l1/shots-all/seed-22/{digest[:10]}"
    assert digest[:10] == "bab74c23a0"
    small = dataclasses.replace(ProbeProtocol(), trials=4, epochs=3)
    assert study_name("m", "cog_l1", 4, 22, small, SearchPlan(mode="exact")) == "m/cog_l1/shots-4/seed-22/271b837276"
    labelled = dataclasses.replace(ProbeProtocol(), extra={"loss": "focal"})  # a deviation gets studies of its own
    assert study_name("m", "cog_l1", None, 22, labelled, SearchPlan(precision="32-true")) != \
        "m/cog_l1/shots-all/seed-22/bab74c23a0"


def test_the_sampler_is_the_one_implemented():
    with pytest.raises(ValueError, match="probe protocol: sampler 'random'; this code implements tpe-multivariate"):
        ProbeProtocol(sampler="random")


def test_extraction_defaults_are_the_feature_protocols():
    from cog_pl.callbacks.cog_eval import CoGEvaluationCallback
    from cog_pl.cli.main import build_parser
    from cog_pl.extract.datamodule import ExtractionDataModule
    from cog_pl.pipeline import ExtractOptions

    protocol = FeatureProtocol()
    assert ExtractOptions().batch_size == protocol.batch_size and ExtractOptions().precision == protocol.precision
    for cls in (ExtractionDataModule, CoGEvaluationCallback):
        assert inspect.signature(cls).parameters["batch_size"].default == protocol.batch_size
    args = build_parser().parse_args(["run", "--model", "resnet50"])
    assert (args.batch_size, args.precision) == (protocol.batch_size, protocol.precision)

