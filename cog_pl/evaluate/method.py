"""What an evaluation method is: a :class:`Method` subclass in one file, registered by name, and the :class:`Job` it
runs (one domain of one model).

A method says what its rows' numbers depend on (:meth:`Method.identity`), which cells of a domain's grid it makes
(:meth:`Method.cells`: ``(shots, seed)`` pairs) and how it makes them (:meth:`Method.run_cell`, or
:meth:`Method.run_cells` for a method that makes many cells in one pass). Everything else, the same for every method,
is the grid runner's (:func:`cog_pl.evaluate.grid.run_grid`): which rows exist and which are refused, stale rows,
claims, the loop over cells, writing the rows. A method's options are a frozen dataclass (:attr:`Method.options`)
whose fields are the method's ``cog-pl run`` flags and its entry of ``RunConfig.method_options``
(:mod:`cog_pl.evaluate.options`).

This module is light (no torch): the method table, the report and ``cog-pl run --help`` import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from cog_pl.errors import CogError
from cog_pl.io import digest
from cog_pl.protocol import ProbeProtocol
from cog_pl.registry import Registry

__all__ = ["Cell", "Inputs", "Job", "Method", "register_method", "registered", "unregister_method"]

#: A cell of a domain's grid: (shots, seed); shots None is all data; a seedless method's seed is ``NO_SEED``.
Cell = tuple[int | None, int]
#: What a method reads: one vector per image, a token store's ``[N, T, D]`` (or vectors as T = 1), or images.
READS = ("vectors", "tokens", "images")


@dataclass(frozen=True)
class Inputs:
    """What a run evaluates, as any method may read it: the label of its rows, the folder of its feature stores and,
    for the methods that read images, the network, its weights and the data."""

    label: str
    features: Path | None = None  # features/<label>/: a domain's train and test stores under <domain>/
    model: str | None = None  # the network (a registry name) the stores were made by
    checkpoint: str | None = None
    reading: Mapping[str, Any] = field(default_factory=dict)  # how the checkpoint is read (build_backbone's keywords)
    transform: Any = None  # the images' transform (the extraction's)
    feature: str | None = None  # the feature definition (cog_pl.models.definitions); None: the paper's
    in1k_root: str | None = None
    in21k_root: str | None = None
    benchmark: str | None = None


@dataclass
class Job:
    """One method on one domain of one model: what :func:`~cog_pl.evaluate.grid.run_grid` runs. ``seeds`` and
    ``shots`` are the grid's; ``plan`` the search plan (:class:`~cog_pl.probe.tuner.SearchPlan`); ``options`` the
    method's options (an instance of :attr:`Method.options`, or None); ``rows`` the model's stored rows a caller read
    once (:func:`cog_pl.results.read_stored`); ``workers`` and ``wait`` for methods whose grid worker processes
    share (:attr:`Method.shares_grid`)."""

    method: Method
    inputs: Inputs
    domain: str
    results: Path
    protocol: ProbeProtocol
    seeds: tuple[int, ...]
    shots: tuple[int | None, ...]
    plan: Any = None
    device: str = "cpu"
    options: Any = None
    storage: str | None = None
    overwrite: bool = False
    rows: Any = None
    workers: int | str | None = None
    threads: int = 0
    wait: bool = True
    allow_class_mismatch: bool = False
    progress: bool = False  # a method that trains with a Lightning Trainer shows its progress
    at: Path | None = None  # the domain's store folder, where it is not <inputs.features>/<domain>
    show: Callable[[str], None] | None = None  # one line per row made (default: the log)
    #: a method's progress within a cell, in cells (a fraction: an attentive probe's trial batch of a long cell); a
    #: progress bar's, handed down by the runner
    tick: Callable[[float], None] | None = None

    @property
    def model(self) -> str:
        """The rows' model: the run's label."""
        return self.inputs.label

    @property
    def root(self) -> Path:
        """The domain's store folder (``train/`` and ``test/``)."""
        if self.at is not None:
            return Path(self.at)
        if self.inputs.features is None:
            raise CogError(f"{self.method.name} reads feature stores and the run names no features folder")
        return Path(self.inputs.features) / self.domain

    def key(self, cell: Cell) -> tuple:
        """The row key of ``cell``."""
        return self.model, self.method.name, self.domain, *cell


class Method:
    """An evaluation method. Subclass it, set the class attributes, implement :meth:`identity` and :meth:`run_cell`
    (or :meth:`run_cells`), and register an instance (:func:`register_method`).

    Attributes:
        name: the ``method`` of its rows and its ``--methods`` name (a Python identifier).
        label: its name in the report (default: ``name``).
        order: its place in the report and in listings (lower first; ties in registration order).
        description: one line for ``cog-pl run --methods``.
        options: the type of its options, a frozen dataclass (None: it takes none); each field is a ``cog-pl run``
            flag ``--<prefix>-<field>`` (prefix: the class's ``flag_prefix``, else the method's name) and a key of
            ``RunConfig.method_options[name]``; its ``__post_init__`` refuses bad values.
        reads: ``"vectors"`` (one feature per image: refuses token stores), ``"tokens"`` (token stores, or vectors as
            one token) or ``"images"`` (the images themselves, with the extraction's transform).
        frozen: its rows evaluate the frozen backbone: the report's probe tables set them beside the linear probe
            (False for fine-tuning, reported on its own).
        seedless: it draws nothing at random: one row per (domain, shots), key seed ``NO_SEED``.
        shares_grid: worker processes (``--probe-workers``, cluster array tasks) share its grid, each cell claimed.
        batched: it makes many cells in one pass (:meth:`run_cells`): the runner claims them together.
        noise_predictions: its IN-1K all-data row is the one the label-noise check makes again on the levels.
    """

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    order: ClassVar[float] = 100.0
    description: ClassVar[str] = ""
    options: ClassVar[type | None] = None
    reads: ClassVar[str] = "vectors"
    frozen: ClassVar[bool] = True
    seedless: ClassVar[bool] = False
    shares_grid: ClassVar[bool] = False
    batched: ClassVar[bool] = False
    noise_predictions: ClassVar[bool] = False

    @property
    def title(self) -> str:
        """The report label: ``label``, else the name."""
        return self.label or self.name

    @property
    def probe(self) -> bool:
        """Whether it evaluates stored features (not images)."""
        return self.reads != "images"

    @property
    def tokens(self) -> bool:
        """Whether it takes token stores."""
        return self.reads == "tokens"

    # -- what a method defines ---------------------------------------------------------------------------------------

    def precheck(self, inputs: Inputs, options: Any) -> None:
        """Refuse, before any work of the run (before extraction), what its inputs and options already show cannot
        run: a model without a text tower, a preset that cannot split the features ..."""

    def open(self, job: Job) -> Any:
        """The domain's state every later call gets (its stores opened, say): cheap, made before any work. By default
        the domain's train/test store pair (:func:`~cog_pl.features.pair.open_pair`; token stores refused unless
        :attr:`reads` is ``"tokens"``); None for a method that reads images."""
        if self.reads == "images":
            return None
        from cog_pl.features.pair import open_pair, vectors_only

        pair = open_pair(job.root, allow_class_mismatch=job.allow_class_mismatch)
        takers = sorted((m for m in (_METHODS.get(n) for n in _METHODS) if m.tokens), key=lambda m: m.order)
        return pair if self.reads == "tokens" else vectors_only(pair, self.name, ", ".join(m.name for m in takers))

    def identity(self, job: Job, state: Any) -> dict[str, Any]:
        """The values the rows' numbers depend on besides their seed and shots, as the rows record them (JSON-able,
        top-level keys of the row: ``features``, ``protocol``, the method's own settings ...). A row of other values
        is refused (``overwrite``: made again); the digest of these values (:meth:`digest`) is the row's
        ``identity``."""
        raise NotImplementedError

    def digest(self, values: Mapping[str, Any]) -> str:
        """The ``identity`` digest of :meth:`identity`'s values."""
        return digest(dict(values))

    def cells(self, job: Job) -> list[Cell]:
        """The grid's cells: every (shots, seed) of ``job``; a seedless method's one cell per shots setting."""
        from cog_pl.results import NO_SEED

        if self.seedless:
            return [(n, NO_SEED) for n in dict.fromkeys(job.shots)]
        return [(n, seed) for n in job.shots for seed in job.seeds]

    def check(self, job: Job, state: Any, cells: Sequence[Cell]) -> None:
        """Refuse, before any work, what would fail later (a shot count some class cannot fill, a width a preset
        cannot split): ``cells`` are the whole grid's. By default the shot counts against the train labels of a
        method that reads stores (``state``: the store pair, or an object holding it as ``pair``)."""
        if self.reads == "images" or state is None:
            return
        from cog_pl.data.sampling import check_shots
        from cog_pl.probe.data import train_labels

        check_shots(train_labels(getattr(state, "pair", state)), job.protocol.val_fraction, [n for n, _ in cells])

    def run_cell(self, job: Job, state: Any, cell: Cell, want: dict[str, Any]) -> dict[str, Any]:
        """Make one cell: its row's fields (the runner adds the key, ``identity`` and the values of ``want``, the
        format version and the package versions, and writes it)."""
        raise NotImplementedError

    def run_cells(self, job: Job, state: Any, cells: Sequence[Cell], want: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Make ``cells``, yielding each one's row as it ends (by default :meth:`run_cell` in turn; a
        :attr:`batched` method makes them in one pass)."""
        for cell in cells:
            yield self.run_cell(job, state, cell, want)

    def worker_slots(self, job: Job, state: Any, cells: int) -> list[Any]:
        """The worker processes (:class:`~cog_pl.probe.workers.WorkerSlot`) for ``cells`` cells of a
        :attr:`shares_grid` method's grid with ``job.workers``; none: this process makes them."""
        return []

    def close(self, state: Any) -> None:
        """Release what :meth:`open` or the cells opened (a study storage), after the domain's grid."""


_METHODS: Registry[Method] = Registry("evaluation method")


def register_method(method: Method, *, replace: bool = False) -> Method:
    """Add ``method`` (an instance) to the table; a taken name is refused unless ``replace``."""
    if not isinstance(method, Method):
        raise CogError(f"register_method takes a cog_pl.evaluate.Method instance, got {method!r}")
    if not isinstance(method.name, str) or not method.name.isidentifier():
        raise CogError(f"an evaluation method's name must be a Python identifier (letters, digits, _), "
                       f"got {method.name!r}")
    if method.reads not in READS:
        raise CogError(f"method {method.name}: reads={method.reads!r}; choose from {', '.join(READS)}")
    if method.options is not None and not dataclasses.is_dataclass(method.options):
        raise CogError(f"method {method.name}: its options must be a dataclass, got {method.options!r}")
    return _METHODS.add(method.name, method, replace=replace)


def unregister_method(name: str) -> Method:
    """Remove ``name`` from the table (tests, plugins replaced at run time)."""
    return _METHODS.remove(name)


def registered() -> Registry[Method]:
    """The table itself (:mod:`cog_pl.evaluate.table` loads the built-in methods into it first)."""
    return _METHODS
