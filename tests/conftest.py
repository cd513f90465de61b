"""Shared fixtures: real WordNet 3.0 (installed by scripts/test.sh), the IN-21K ontology, a built level file."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):  # scripts/test.sh runs one worker per core: one thread each, and the
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # commands the tests start inherit it
        os.environ.setdefault(var, "1")


@pytest.fixture(scope="session")
def wn():
    from cog_pl.wordnet import get_wordnet

    return get_wordnet()


@pytest.fixture(scope="session")
def onto(wn):
    from cog_pl.levels.builder import build_ontology

    return build_ontology()


@pytest.fixture(scope="session")
def level_content(onto):
    from cog_pl.levels.builder import build_levels

    return build_levels(onto=onto)


# The files that take longest (`scripts/test.sh --all` prints the 30 slowest tests; 2026-12-02, 2 cores), run first,
# then every other file holding a slow test, then the rest in their own order: with pytest-xdist's `--dist loadfile`
# (scripts/test.sh) the long files start at once instead of leaving one worker busy at the end while the other idles.
LONGEST_FIRST = ("test_tutorials.py", "pipeline/test_cluster_slurm.py", "pipeline/test_pipeline.py",
                 "pipeline/test_fault_injection.py", "test_docs_commands.py", "models/test_user_checkpoints.py",
                 "demo/test_demo_console.py", "models/test_model_labels.py", "extract/test_decode_gpu_check.py",
                 "models/test_backbone_plugin.py", "report/test_report_protocols.py", "demo/test_demo.py",
                 "data/test_sources_streamed_ddp.py")


def pytest_collection_modifyitems(config, items):
    root = os.path.join(str(config.rootpath), "tests") + os.sep
    files = [str(item.path).removeprefix(root) for item in items]
    slow = {f for f, item in zip(files, items, strict=True) if item.get_closest_marker("slow")}
    first = {name: rank for rank, name in enumerate(LONGEST_FIRST)}
    rank = {id(item): (first.get(f, len(first)), f not in slow) for f, item in zip(files, items, strict=True)}
    items.sort(key=lambda item: rank[id(item)])  # stable: each file's tests keep their order
