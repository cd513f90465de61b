"""A domain's probe grid on a whole machine: how many worker processes, where, and the pool that runs them.

:func:`plan_workers` decides how many workers a machine runs and where: with CUDA devices one per GPU, each pinned to
its own (``CUDA_VISIBLE_DEVICES``) with the CPU threads split between them; otherwise one per few cores
(:func:`threads_per_worker`) with torch's threads split, so workers never oversubscribe the cores; never more than
the grid's cells, nor than host memory holds copies of the features. :func:`worker_pool` starts them as a
``concurrent.futures.ProcessPoolExecutor`` of spawned processes, each with its own copy of the grid's cell task
(:class:`~cog_pl.evaluate.grid.CellTask`: anything with a ``placed(index, device)`` giving the worker's copy), for
the grid loop of :func:`cog_pl.evaluate.grid.make_cells`: each cell is tuned by one worker alone and the grid's
rows equal a one-worker run's (``tests/probe/test_probe_workers_auto.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import multiprocessing.context
import os
import signal
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import optuna
import torch

from cog_pl.errors import CogError


@dataclasses.dataclass(frozen=True)
class WorkerSlot:
    """One worker: its torch threads, the device it probes on and the environment variables it sets at its start."""

    threads: int
    device: str
    env: dict[str, str]


def available_cores() -> int:
    """Cores this process may run on (a container's or job's share)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def threads_per_worker(cores: int) -> int:
    """Torch threads per CPU worker for ``workers="auto"``: 1 up to 4 cores, then about half the square root (2 at
    16 cores, 4 at 64): small probes gain little from threads, many processes a lot."""
    return max(1, round(cores ** 0.5 / 2))


def available_memory() -> int | None:
    """Bytes of host memory available (``MemAvailable``), None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


#: Seconds a worker process takes to start (imports, features loaded) on a small CPU, and the host's float32
#: throughput per core assumed by :func:`grid_flops`' estimate: ``auto`` starts workers only when one process would
#: take several start-ups' time, so a small grid is never slower with ``auto`` than in one process.
WORKER_START_SECONDS = 5.0
CORE_FLOPS = 2e10
#: At most this many cores, ``auto`` runs one process with every thread: measured on 2 quiet cores, one process with 2
#: threads did a 12-cell grid in 21.3 s and two one-thread workers in 25.5 s (an 8-cell grid: 13.6 s against 16.9 s).
SMALL_HOST_CORES = 2


def grid_flops(cells: int, rows: int, dim: int, classes: int, trials: int, epochs: int) -> float:
    """Multiply-adds x 2 of a grid's tuning and final retrains, all cells at full size (an upper bound: few-shot
    cells are smaller): forward and backward of a linear head, 3 products of rows x dim x classes per epoch."""
    return 6.0 * cells * (trials + 1) * epochs * rows * dim * classes


def plan_workers(workers: int | str, device: str, cells: int, feature_bytes: int = 0, threads: int = 0,
                 flops: float | None = None) -> list[WorkerSlot]:
    """The workers for a grid of ``cells`` cells on ``device`` (``cpu`` or ``cuda``): ``workers`` a count or
    ``"auto"``; ``feature_bytes``: the size of the domain's stores (each CPU worker holds about three float32 copies);
    ``threads``: torch threads per worker (0: the cores split between the workers); ``flops``: the grid's work
    (:func:`grid_flops`), with which ``auto`` on the CPU keeps one process when the work would take less than four
    worker start-ups in it."""
    if workers != "auto" and not (isinstance(workers, int) and workers >= 1):
        raise CogError(f"--probe-workers {workers!r}; expected auto or a count of at least 1")
    cores = available_cores()
    gpus = 0
    if str(device).startswith("cuda"):
        gpus = torch.cuda.device_count()
    if workers == "auto":
        if gpus:
            workers = gpus
        else:
            workers = cores // threads_per_worker(cores)
            memory = available_memory()
            if feature_bytes and memory:
                workers = min(workers, max(1, int(0.8 * memory) // (6 * feature_bytes)))
            if flops is not None and flops / (CORE_FLOPS * cores) < 4 * WORKER_START_SECONDS:
                workers = 1  # done before the workers would have started
            if cores <= SMALL_HOST_CORES:
                workers = 1  # one process's threads beat one-thread workers here (benchmarks/bench_probe_grid.py)
    workers = max(1, min(workers, max(cells, 1)))
    per = threads or max(1, cores // workers)
    env = {"OMP_NUM_THREADS": str(per), "MKL_NUM_THREADS": str(per)}
    return [WorkerSlot(per, "cuda" if gpus else "cpu", {**env, "CUDA_VISIBLE_DEVICES": _visible(i % gpus)} if gpus
                       else env) for i in range(workers)]


def _visible(i: int) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry of this process's i-th visible GPU (honouring the parent's own list)."""
    parent = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return parent[i] if i < len(parent) else str(i)


def grid_slots(workers: int | str, pair: Any, protocol: Any, cells: int, device: str,
               threads: int = 0) -> list[WorkerSlot]:
    """:func:`plan_workers` for ``cells`` cells of the grid of ``pair`` (a :class:`~cog_pl.features.pair.StorePair`)
    under ``protocol``: its features' size in memory and its work (:func:`grid_flops`) measured here."""
    size = sum(os.path.getsize(p) for p in Path(pair.root).rglob("features.npy"))
    train = pair.train
    flops = grid_flops(cells, len(train), train.features.shape[1], train.num_classes, protocol.trials,
                       protocol.epochs)
    return plan_workers(workers, device, cells, 2 * size, threads, flops)  # float16 on disk, float32 in memory


class _WorkerProcess(multiprocessing.context.SpawnProcess):
    """A worker process spawned with SIGINT ignored (the setting survives ``exec``): a Ctrl-C during its start-up
    (imports take seconds) does not end it with a traceback; the parent, interrupted too, shuts the pool down. Its
    :func:`_start` then takes SIGINT for the cell it makes (:func:`_interrupt`). The parent ignores SIGINT only
    while it spawns the process (a fork and an exec)."""

    def start(self) -> None:
        if threading.current_thread() is not threading.main_thread():  # signal handlers: main thread only
            return super().start()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            super().start()
        finally:
            # None: a handler not set from Python, which cannot be restored: Python's own instead
            signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)


class _WorkerContext(multiprocessing.context.SpawnContext):
    Process = _WorkerProcess


class WorkerPool(ProcessPoolExecutor):
    """The grid's worker processes; leaving its block on an error (Ctrl-C among them) cancels the cells not started
    and waits for the workers, which release the claims of the cells they were making."""

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.shutdown(wait=True, cancel_futures=exc_type is not None)
        return False


def worker_pool(maker: Any, slots: list[WorkerSlot]) -> WorkerPool:
    """One spawned process per slot, each with its copy of ``maker`` (picklable: its stores and storage as paths)
    placed in its slot (:func:`_start`, ``maker.placed(index, device)``); :func:`make_cell` is their task."""
    context = _WorkerContext()
    places = context.Queue()
    for place in enumerate(slots):
        places.put(place)
    return WorkerPool(len(slots), mp_context=context, initializer=_start, initargs=(maker, places))


_MAKER: list[Any] = []  # a worker process's own (:func:`_start`)
_MAKING = threading.Event()  # set while the worker makes a cell


def _interrupt(signum: int, frame: Any) -> None:
    """A worker's SIGINT (Ctrl-C reaches the whole process group): stops the cell it makes, whose claim is released
    on the way out; an idle worker leaves the stopping to the parent, which shuts the pool down."""
    if _MAKING.is_set():
        raise KeyboardInterrupt


def _start(maker: Any, places: Any) -> None:
    """A worker process's start: its place (threads, device, environment) and its copy of the task."""
    index, slot = places.get()
    os.environ.update(slot.env)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    torch.set_num_threads(slot.threads)
    signal.signal(signal.SIGINT, _interrupt)
    _MAKER.append(maker.placed(index, slot.device))


def make_cell(cell: tuple[int | None, int], delay: float = 0.0) -> tuple[str, int, dict[str, Any] | None]:
    """A worker process's task: the cell made by its copy of the grid's cell task."""
    _MAKING.set()
    try:
        return _MAKER[0](cell, delay)
    finally:
        _MAKING.clear()
