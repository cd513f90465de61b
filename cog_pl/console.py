"""What ``cog-pl`` prints: one logging handler, each event once, no third-party noise the user cannot act on.

:func:`setup` is called once by the command line (:mod:`cog_pl.cli.main`); library users keep their own logging.

- **One handler.** Records go to the root logger's :class:`ConsoleHandler`, which writes through ``tqdm`` so an open
  progress bar (:mod:`cog_pl.progress`) is redrawn below a message instead of torn by it. A library that installs
  a handler of its own (Lightning does, on import, on the ``lightning`` logger, whatever the application set up)
  would print each of its records a second time through ours: the console handler leaves a record to the handler
  it has already met on its way to the root.
- **Other packages' chatter.** Their info messages show with ``--verbose`` only (``cog_pl``'s always); Lightning's
  rank-zero messages (``GPU available: False``, ``Loading train_dataloader ...``, repeated by every Trainer) too,
  except for the LightningCLI commands, which keep them. Lightning's advertisements (``💡 Tip: ... litlogger``) are
  dropped at their logger for every command. Hugging Face's download bars are off (weights come from packages).
- **Known warnings.** :data:`KNOWN_WARNINGS` lists, by message and module, the deprecation warnings third-party
  packages raise about their own internals (nothing a ``cog-pl`` user can change); :func:`filter_known_warnings`
  ignores exactly those. Every other warning is shown.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

#: The loggers of Lightning's rank-zero messages (``rank_zero_info``); created here before Lightning is imported.
LIGHTNING_RANK_ZERO = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")
#: Messages that advertise products rather than report on the run: dropped where they are logged.
ADVERTISEMENTS = ("💡 Tip:",)
#: (message regex, category, module regex) of warnings raised by third-party code about its own internals.
KNOWN_WARNINGS: tuple[tuple[str, type[Warning], str], ...] = (
    # Lightning 2.6 on torch 2.14: its pytree helper uses a torch class torch has deprecated (every fit/test/predict)
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning, r"lightning\.pytorch\.utilities\._pytree"),
    # Lightning on any machine with SLURM's client installed, for each Trainer the package makes; cog-pl's own SLURM
    # jobs run under srun (raised through rank_zero_warn, whose frame is not Lightning's: any module)
    (r"The `srun` command is available on your system but is not used", UserWarning, ""),
)


class AdvertisementFilter(logging.Filter):
    """Drops the records of :data:`ADVERTISEMENTS`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(ADVERTISEMENTS)


def printed_on_the_way(record: logging.LogRecord) -> bool:
    """Whether a handler of a logger between the record's and the root (a library's own) has handled it already."""
    logger: logging.Logger | None = logging.getLogger(record.name)
    root = logging.getLogger()
    while logger is not None and logger is not root:
        if any(record.levelno >= h.level for h in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


class ConsoleHandler(logging.StreamHandler):
    """The command line's handler: writes through ``tqdm.write`` (progress bars stay whole), each record once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not printed_on_the_way(record) and bool(super().filter(record))

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:
            self.handleError(record)


def filter_known_warnings() -> None:
    """Ignore the warnings of :data:`KNOWN_WARNINGS` (each by its message, category and module), nothing else."""
    for message, category, module in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


def setup(verbose: bool = False, lightning_info: bool = False) -> None:
    """The console of a ``cog-pl`` command: ``cog_pl``'s messages (debug too with ``verbose``) and every package's
    warnings on stderr through one :class:`ConsoleHandler`; Lightning's rank-zero messages only with
    ``lightning_info`` or ``verbose``; other packages' info only with ``verbose``. As ``logging.basicConfig``, it
    leaves a root logger that already has handlers (an application's, pytest's) as it is."""
    root = logging.getLogger()
    if not root.handlers:
        handler = ConsoleHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.DEBUG if verbose else logging.WARNING)
        logging.getLogger("cog_pl").setLevel(logging.DEBUG if verbose else logging.INFO)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # weights load from packages: no download to show
    for name in LIGHTNING_RANK_ZERO:
        logger = logging.getLogger(name)
        logger.setLevel(logging.NOTSET if verbose or lightning_info else logging.WARNING)
        if not any(isinstance(f, AdvertisementFilter) for f in logger.filters):
            logger.addFilter(AdvertisementFilter())
    filter_known_warnings()
