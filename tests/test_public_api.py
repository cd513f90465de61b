"""The package's face: a curated top level loaded on first use, and an ``__all__`` in every package whose names all
resolve (to the objects, not to submodules of the same name), documented on the API reference's overview page."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import cog_pl

PACKAGES = sorted(m.name for m in pkgutil.walk_packages(cog_pl.__path__, "cog_pl.") if m.ispkg)
API_INDEX = Path(__file__).resolve().parents[1] / "docs" / "reference" / "api" / "index.md"


def test_every_package_is_found():
    assert len(PACKAGES) == 21
    assert {"cog_pl.models.arch", "cog_pl.levels", "cog_pl.cli", "cog_pl.progress", "cog_pl.results",
            "cog_pl.zeroshot", "cog_pl.evaluate"} <= set(PACKAGES)


@pytest.mark.parametrize("package", ["cog_pl", *PACKAGES])
def test_every_name_of_all_resolves(package):
    module = importlib.import_module(package)
    assert isinstance(module.__all__, list) and module.__all__, f"{package} has no __all__"
    assert len(set(module.__all__)) == len(module.__all__)
    for name in module.__all__:
        value = getattr(module, name)
        assert not isinstance(value, types.ModuleType), f"{package}.{name} is a module, not the object"
        assert name in dir(module)
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


def test_star_import_gives_the_curated_names():
    namespace: dict = {}
    exec("from cog_pl import *", namespace)
    assert set(cog_pl.__all__) <= set(namespace)
    assert namespace["FeatureExtractor"].__module__ == "cog_pl.extract.module"
    assert namespace["build_backbone"] is importlib.import_module("cog_pl.models").build_backbone


def test_the_curated_list_is_the_table_it_loads_from():
    assert sorted(cog_pl.__all__) == sorted(["__version__", *cog_pl._EXPORTS])
    for name, module in cog_pl._EXPORTS.items():
        assert getattr(importlib.import_module(module), name) is getattr(cog_pl, name)


def test_importing_the_package_loads_nothing_heavy():
    code = ("import sys, cog_pl; heavy = [m for m in ('torch', 'lightning', 'numpy', 'typing') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_curated_names_are_documented():
    text = API_INDEX.read_text()
    missing = [name for name in cog_pl.__all__ if name != "__version__" and f"`{name}`" not in text]
    assert not missing, f"docs/reference/api/index.md lacks {missing}"


#: Modules whose docstrings hold the public surface's examples (examples that need data are marked to skip).
EXAMPLE_MODULES = ("cog_pl.registry", "cog_pl.errors", "cog_pl.models.registry", "cog_pl.models.zoo",
                   "cog_pl.models.build",
                   "cog_pl.levels.measures", "cog_pl.data.sources", "cog_pl.evaluate.table", "cog_pl.benchmark",
                   "cog_pl.cli.options", "cog_pl.extract.module", "cog_pl.datamodules.features",
                   "cog_pl.datamodules.images", "cog_pl.finetune.module", "cog_pl.pipeline", "cog_pl.features.store",
                   "cog_pl.probe.callback", "cog_pl.probe.module", "cog_pl.callbacks.cog_eval")


#: Of those, the modules whose every example needs data (all marked to skip): their examples are compiled only.
NEED_DATA = ("cog_pl.datamodules.features", "cog_pl.datamodules.images", "cog_pl.features.store",
             "cog_pl.probe.callback")


@pytest.mark.parametrize("module", EXAMPLE_MODULES)
def test_the_examples_of_the_docstrings_run(module):
    import doctest

    mod = importlib.import_module(module)
    examples = [e for test in doctest.DocTestFinder().find(mod) for e in test.examples]
    assert examples, f"{module} has no example"
    for example in examples:  # a skipped example is still valid Python
        compile(example.source, module, "single")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0
    assert (result.attempted == 0) == (module in NEED_DATA), f"{module}: {result.attempted} examples ran"
