"""ImageNet-CoG, the concept generalization benchmark, as PyTorch Lightning modules.

The names most users need are importable from here (``from cog_pl import FeatureExtractor``); each is loaded on
first use, so ``import cog_pl`` stays cheap (the ``cog-pl`` command starts without torch). The curated list is
:data:`__all__`, documented in docs/reference/api/index.md; everything else lives in its package.
"""

from __future__ import annotations

from cog_pl.version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read it the same)

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    # Lightning modules, datamodules and callbacks
    "FeatureExtractor": "cog_pl.extract.module",
    "ExtractionDataModule": "cog_pl.extract.datamodule",
    "LinearProbe": "cog_pl.probe.module",
    "FineTuneClassifier": "cog_pl.finetune.module",
    "FeatureDataModule": "cog_pl.datamodules.features",
    "CoGLevelDataModule": "cog_pl.datamodules.images",
    "ImageNetDataModule": "cog_pl.datamodules.images",
    "CoGEvaluationCallback": "cog_pl.callbacks.cog_eval",
    "FeatureStoreWriter": "cog_pl.extract.writer",
    "OptunaTrialCallback": "cog_pl.probe.callback",
    # backbones
    "Backbone": "cog_pl.models.build",
    "BackboneSpec": "cog_pl.models.zoo",
    "build_backbone": "cog_pl.models.build",
    "list_backbones": "cog_pl.models.build",
    "register_backbone": "cog_pl.models.build",
    # the other tables users add to
    "list_measures": "cog_pl.levels.measures",
    "register_measure": "cog_pl.levels.measures",
    "list_sources": "cog_pl.data.sources",
    "register_source": "cog_pl.data.sources",
    "Method": "cog_pl.evaluate",
    "list_methods": "cog_pl.evaluate",
    "register_method": "cog_pl.evaluate",
    # the protocol, the benchmark file, the stores
    "DOMAINS": "cog_pl.protocol",
    "FeatureProtocol": "cog_pl.protocol",
    "LevelProtocol": "cog_pl.protocol",
    "ProbeProtocol": "cog_pl.protocol",
    "Benchmark": "cog_pl.benchmark",
    "load_benchmark": "cog_pl.benchmark",
    "FeatureStore": "cog_pl.features.store",
    "open_store": "cog_pl.features.store",
    # a whole evaluation, as ``cog-pl run`` does it
    "RunConfig": "cog_pl.pipeline",
    "ProbeOptions": "cog_pl.pipeline",
    "run": "cog_pl.pipeline",
    # errors
    "CogError": "cog_pl.errors",
}

__all__ = [
    "DOMAINS", "Backbone", "BackboneSpec", "Benchmark", "CoGEvaluationCallback", "CoGLevelDataModule", "CogError",
    "ExtractionDataModule", "FeatureDataModule", "FeatureExtractor", "FeatureProtocol", "FeatureStore",
    "FeatureStoreWriter", "FineTuneClassifier", "ImageNetDataModule", "LevelProtocol", "LinearProbe", "Method",
    "OptunaTrialCallback", "ProbeOptions", "ProbeProtocol", "RunConfig", "__version__", "build_backbone",
    "list_backbones", "list_measures", "list_methods", "list_sources", "load_benchmark", "open_store",
    "register_backbone", "register_measure", "register_method", "register_source", "run",
]


def __getattr__(name: str) -> object:
    """Load a curated name on first use (PEP 562) and keep it, so the next use is a plain attribute."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cog_pl' has no attribute {name!r}")
    from cog_pl.registry import load_object

    value = load_object(f"{module}:{name}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from cog_pl.benchmark import Benchmark, load_benchmark
    from cog_pl.callbacks.cog_eval import CoGEvaluationCallback
    from cog_pl.data.sources import list_sources, register_source
    from cog_pl.datamodules.features import FeatureDataModule
    from cog_pl.datamodules.images import CoGLevelDataModule, ImageNetDataModule
    from cog_pl.errors import CogError
    from cog_pl.evaluate import Method, list_methods, register_method
    from cog_pl.extract.datamodule import ExtractionDataModule
    from cog_pl.extract.module import FeatureExtractor
    from cog_pl.extract.writer import FeatureStoreWriter
    from cog_pl.features.store import FeatureStore, open_store
    from cog_pl.finetune.module import FineTuneClassifier
    from cog_pl.levels.measures import list_measures, register_measure
    from cog_pl.models.build import Backbone, build_backbone, list_backbones, register_backbone
    from cog_pl.models.zoo import BackboneSpec
    from cog_pl.pipeline import ProbeOptions, RunConfig, run
    from cog_pl.probe.callback import OptunaTrialCallback
    from cog_pl.probe.module import LinearProbe
    from cog_pl.protocol import DOMAINS, FeatureProtocol, LevelProtocol, ProbeProtocol
