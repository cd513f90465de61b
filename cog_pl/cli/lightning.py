"""Handing the rest of a ``cog-pl`` command line to a LightningCLI: one way, for every LightningCLI command.

``cog-pl`` picks the command (``extract``, ``finetune``, ``probe fit|validate|test``: ``LIGHTNING_COMMANDS`` in
:mod:`cog_pl.cli.main`) and gives the words after it to the command module's ``run(argv, prog)``, which builds
its :class:`CommandLineCLI`. ``sys.argv`` keeps the whole ``cog-pl`` line, because Lightning relaunches the same
command line for each DDP process; the LightningCLI parses only the words it is given, under the command's name
(``cog-pl probe fit --help`` prints ``usage: cog-pl probe fit ...``). ``--config NAME`` names a config shipped with
the package (``cog-pl extract --config resnet50``), a path a file.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import re
import sys
from argparse import ArgumentError
from typing import Any

import lightning as L
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from cog_pl.errors import CogError

logger = logging.getLogger(__name__)

#: Loggers whose packages Lightning does not install: the class and the packages (any one of them) it needs.
LOGGER_PACKAGES = {"TensorBoardLogger": ("tensorboard", "tensorboardX"), "WandbLogger": ("wandb",),
                   "MLFlowLogger": ("mlflow",), "CometLogger": ("comet_ml",), "NeptuneLogger": ("neptune",)}


def missing_logger_package(text: str) -> str | None:
    """For a logger named in ``text`` (a command line, a config, an error) whose package is not installed, the line
    that says which; None when every logger named can be built."""
    for name, packages in LOGGER_PACKAGES.items():
        if re.search(rf"\b{name}\b", text) and not any(importlib.util.find_spec(p) for p in packages):
            return (f"--trainer.logger {name} needs the {' or '.join(packages)} package, which is not installed "
                    f"(pip install {packages[0]})")
    return None


def _cog_error_in(err: BaseException) -> bool:
    """Whether ``err`` or an error it was raised from (jsonargparse wraps a class's own refusal) is a CogError."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, CogError):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


class RequireCheckpoint(L.Callback):
    """Refuse to test or validate a module no checkpoint was loaded into: in a fresh process it is untrained, and
    its accuracy (chance) would read as a result."""

    def __init__(self, command: str, given: Any) -> None:
        self.command, self.given = command, given

    def _check(self, trainer: L.Trainer) -> None:
        if trainer.ckpt_path is None:
            raise CogError(f"{self.command} --ckpt_path {self.given}: Lightning found no such checkpoint, so the "
                           f"{self.command} would score an untrained model; pass the .ckpt file the fit wrote (fit "
                           "prints it), or keep last.ckpt (ModelCheckpoint save_last) where this run looks")

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._check(trainer)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._check(trainer)


class CommandLineCLI(LightningCLI):
    """A LightningCLI that parses the words after a ``cog-pl`` command, not ``sys.argv``.

    LightningCLI warns when it is given ``args`` while ``sys.argv`` holds arguments, against parsing one command line
    by mistake for another. Here ``args`` *is* the command line, less the words that named the command; ``sys.argv``
    must stay as the user typed it for DDP's relaunch, so the warning would be given on every call.
    """

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse ``args``; a bad option or config file prints the usage, then raises a :class:`CommandError` whose
        one-line message (jsonargparse's, its lines joined) ``cog-pl`` prints as its other errors."""
        from cog_pl.errors import CommandError

        for each in (parser, *getattr(self, "_subcommand_parsers", {}).values()):
            each.exit_on_error = False
        self.words = list(args or ())  # as given: which of two spellings of one option came last (_former_root)
        try:
            self.config = parser.parse_args(args)
        except ArgumentError as err:
            words = list(args or ())
            sub = self._subcommand_parsers.get(words[0]) if words and hasattr(self, "_subcommand_parsers") else None
            (sub or parser).print_usage(sys.stderr)
            message = " ".join(str(err).split())
            configs = [w.split("=", 1)[-1] for k, w in enumerate(words) if w.startswith("--config=")
                       or (k and words[k - 1] in ("-c", "--config"))]
            if message.startswith("Problems parsing config") and configs:
                message = f"config file {', '.join(configs)}: {message}"
            if "trainer.logger" in message:  # jsonargparse's union errors hide a missing package
                configs_text = " ".join(open(c).read() for c in configs if os.path.isfile(c))
                message = missing_logger_package(f"{message} {' '.join(words)} {configs_text}") or message
            raise CommandError(message) from err

    def _parse_ckpt_path(self) -> None:
        """Lightning reads ``--ckpt_path``'s hyper-parameters here (``torch.load`` with ``weights_only``); a file it
        cannot read, or whose pickle safe loading refuses, is named in one line (:func:`cog_pl.io.load_failure`)."""
        try:
            super()._parse_ckpt_path()
        except ArgumentError:  # the file's hyper-parameters do not fit the command: jsonargparse's own message
            raise
        except Exception as err:  # torch.load's errors have no common base (UnpicklingError, RuntimeError, ...)
            from cog_pl.io import load_failure

            path = self.config[self.config.subcommand].get("ckpt_path")
            raise CogError(f"--ckpt_path {path}: not a checkpoint this command can read: {load_failure(err)}") \
                from err

    def before_instantiate_classes(self) -> None:
        """Settle what the packaged configs would otherwise fight with a common override (see each helper), and save
        the resolved config of ``test`` and ``validate`` as ``<subcommand>_config.yaml``: the fit's ``config.yaml``,
        which the test line a fit prints names, stays the fit's, reusable for another fit."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        _without_checkpoint_callbacks(config)
        _model_import_path(config)
        _former_root(config, self.words)
        if self.subcommand in ("test", "validate"):
            self.save_config_kwargs = {**self.save_config_kwargs, "config_filename": f"{self.subcommand}_config.yaml"}

    def instantiate_classes(self) -> None:
        """Build the model, datamodule and trainer; an argument a class refuses is reported by its own message
        (jsonargparse wraps it with the union of types it tried and the whole namespace given)."""
        try:
            super().instantiate_classes()
        except ModuleNotFoundError as err:
            raise CogError(missing_logger_package(str(err) + " " + " ".join(sys.argv)) or str(err)) from err
        except ValueError as err:
            missing = missing_logger_package(str(err)) if "logger" in str(err) else None
            if missing:
                raise CogError(missing) from err
            reasons = [line.strip()[2:] for line in str(err).splitlines() if line.strip().startswith("- ")
                       and not line.strip().startswith("- Expected a <class 'NoneType'>")]
            if str(err).startswith("Does not validate against") and reasons:
                raise CogError("; ".join(reasons)) from err
            if not isinstance(err, CogError) and _cog_error_in(err):  # ours, wrapped by jsonargparse: the user's
                raise CogError(str(err)) from err
            raise  # a CogError as raised, or a plain ValueError: a defect

    # -- test and validate score a trained model, never an untrained one -------------------------------------------
    def _checked(self, command: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        from cog_pl.errors import CommandError

        if kwargs.get("ckpt_path") is None:
            raise CommandError(f"{command} needs --ckpt_path (the .ckpt file a fit wrote, or last): without it the "
                               f"{command} would score an untrained model")
        self.trainer.callbacks.append(RequireCheckpoint(command, kwargs["ckpt_path"]))
        return kwargs

    def test(self, **kwargs: Any) -> Any:
        return self.trainer.test(**self._checked("test", kwargs))

    def validate(self, **kwargs: Any) -> Any:
        return self.trainer.validate(**self._checked("validate", kwargs))

    def test_command(self) -> str | None:
        """After ``fit``: the one line that tests this run (its saved config, its checkpoint), or None."""
        ckpt = self.trainer.checkpoint_callback
        path = getattr(ckpt, "last_model_path", "") or getattr(ckpt, "best_model_path", "")
        config = os.path.abspath(os.path.join(self.trainer.log_dir or "", "config.yaml"))
        if not path or not os.path.isfile(config):
            return None
        prog = self.parser.prog.removesuffix(" fit").removesuffix(" [options]")
        return f"{prog} test --config {config} --ckpt_path {os.path.abspath(path)}"

    def after_fit(self) -> None:
        line = self.test_command()
        if line and self.trainer.is_global_zero:
            print(f"test this run with: {line}")


def _without_checkpoint_callbacks(config: Any) -> None:
    """``--trainer.enable_checkpointing false`` leaves out the ``ModelCheckpoint`` callbacks of the config (the
    packaged configs add one for ``last.ckpt``), which Lightning's Trainer would otherwise refuse beside it."""
    trainer = config.get("trainer")
    if trainer is None or trainer.get("enable_checkpointing") is not False or not trainer.get("callbacks"):
        return
    callbacks = trainer.callbacks if isinstance(trainer.callbacks, list) else [trainer.callbacks]
    kept = [c for c in callbacks if not str(_class_path(c) or "").endswith(".ModelCheckpoint")]
    if len(kept) < len(callbacks):
        logger.info("--trainer.enable_checkpointing false: the config's ModelCheckpoint left out (no .ckpt written)")
        trainer.callbacks = kept


def _class_path(value: Any) -> str | None:
    return value.get("class_path") if hasattr(value, "get") else None


def _model_import_path(config: Any) -> None:
    """``--model.model mynets.TinyNet``: a dotted import path that names no backbone of the registry but a class or
    function of an importable module is taken as that builder (``external:mynets:TinyNet``), not refused as an
    unknown zoo name."""
    model = config.get("model")
    name = model.get("model") if hasattr(model, "get") else None
    if not isinstance(name, str) or ":" in name or "." not in name.strip("."):
        return
    from cog_pl.errors import UnknownNameError
    from cog_pl.models import resolve_spec

    try:
        resolve_spec(name)
        return  # a registered name that holds a dot
    except UnknownNameError:
        pass
    module, _, attr = name.rpartition(".")
    from cog_pl.registry import load_object

    try:
        found = load_object(f"{module}:{attr}")
    except (ImportError, AttributeError):
        return  # not an import path either: the registry's refusal names the known names
    if callable(found):
        model.model = f"external:{module}:{attr}"


#: The image roots of the datamodules, by the name ``root`` had before them (cog_pl.datamodules.images).
ROOT_NAMES = ("in21k_root", "in1k_root")


def _root_setter(key: str) -> str | None:
    """Which spelling of a datamodule's image root an option (``--data.root``, ``--data.init_args.in21k_root``)
    sets: ``"root"``, ``"new"``, or None."""
    last = key.removeprefix("--data.").removeprefix("init_args.") if key.startswith("--data.") else None
    return "root" if last == "root" else "new" if last in ROOT_NAMES else None


def _config_root_setter(text: str) -> str | None:
    """Which spelling of the image root a config (a file, or YAML given inline) sets under ``data``, if any."""
    import yaml

    try:
        loaded = yaml.safe_load(open(text).read() if os.path.isfile(text) else text)
    except (OSError, yaml.YAMLError):
        return None
    data = loaded.get("data") if isinstance(loaded, dict) else None
    data = data.get("init_args", data) if isinstance(data, dict) else None
    if not isinstance(data, dict):
        return None
    return "root" if "root" in data else "new" if any(k in data for k in ROOT_NAMES) else None


def _former_root(config: Any, words: list[str]) -> None:
    """The image root given by its former name, ``root``, after a config that sets ``in21k_root``/``in1k_root``
    (the packaged ones do), overrides it as any later option does: the new name is dropped, so the datamodule takes
    ``root`` (with its deprecation warning) instead of refusing the two."""
    data = config.get("data")
    args = data.get("init_args", data) if hasattr(data, "get") else None
    if not hasattr(args, "get") or args.get("root") is None or not any(args.get(k) for k in ROOT_NAMES):
        return
    last = None
    for k, word in enumerate(words):
        key, eq, value = word.partition("=")
        if key in ("-c", "--config"):
            value = value if eq else (words[k + 1] if k + 1 < len(words) else "")
            last = _config_root_setter(value) or last
        else:
            last = _root_setter(key) or last
    if last == "root":
        for k in ROOT_NAMES:
            if args.get(k) is not None:
                setattr(args, k, None)


def hand_over(cli_class: type[CommandLineCLI], argv: list[str], prog: str, **kwargs: Any) -> CommandLineCLI:
    """Run ``cli_class`` on ``argv`` (the rest of the command line), its usage and errors under the name ``prog``
    (``cog-pl extract``); ``--config NAME`` reads the command's packaged config of that name
    (:mod:`cog_pl.cli.configs`)."""
    from cog_pl.cli.configs import resolve_config_args

    argv = resolve_config_args(prog.split()[-1], list(argv))
    return cli_class(args=argv, parser_kwargs={"prog": prog}, **kwargs)
