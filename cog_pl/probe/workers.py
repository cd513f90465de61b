"""A domain's probe grid on a whole machine: N worker processes on one study storage and one results file.

:func:`plan_workers` decides how many workers a machine runs and where: with CUDA devices one per GPU, each pinned to
its own (``CUDA_VISIBLE_DEVICES``) with the CPU threads split between them; otherwise one per few cores
(:func:`threads_per_worker`) with torch's threads split, so workers never oversubscribe the cores; never more than
the grid's cells, nor than host memory holds copies of the features. :func:`run_workers` starts them as a
``concurrent.futures.ProcessPoolExecutor`` (spawned processes), one task per cell, largest first, and shows
progress as the tasks end.

A task makes its cell as an in-process run does (:func:`cog_pl.probe.cells.make_cell`: claim, tune, write the row,
release), so each cell is tuned by one worker alone and the grid's rows equal a one-worker run's
(``tests/test_probe_workers_auto.py``); a cell another machine's worker holds is asked again until its row exists.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class WorkerSlot:
    """One worker: its torch threads, the device it probes on and the environment it starts with."""

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
        raise ValueError(f"--probe-workers {workers!r}; expected auto or a count of at least 1")
    cores = available_cores()
    gpus = 0
    if str(device).startswith("cuda"):
        import torch

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
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    slots = []
    for i in range(workers):
        mine = {**env, "OMP_NUM_THREADS": str(per), "MKL_NUM_THREADS": str(per)}
        if gpus:
            mine["CUDA_VISIBLE_DEVICES"] = _visible(i % gpus)
        slots.append(WorkerSlot(per, "cuda" if gpus else "cpu", mine))
    return slots


def _visible(i: int) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry of this process's i-th visible GPU (honouring the parent's own list)."""
    parent = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return parent[i] if i < len(parent) else str(i)


def cell_order(cells: list[tuple[int | None, int]]) -> list[tuple[int | None, int]]:
    """Largest cells first (all data, then shots descending), so the last cells to end are small ones."""
    return sorted(cells, key=lambda c: (c[0] is not None, -(c[0] or 0), c[1]))


def run_workers(root: str | os.PathLike, results: str | os.PathLike, *, workers: int | str, model: str | None = None,
                domain: str | None = None, storage: str | os.PathLike, protocol: Any = None, plan: Any = None,
                seeds: tuple[int, ...] | None = None, shots: tuple[int | None, ...] | None = None,
                device: str = "cpu", overwrite: bool = False, threads: int = 0,
                progress: Callable[[str], None] | None = None,
                allow_class_mismatch: bool = False) -> list[dict[str, Any]]:
    """:func:`~cog_pl.probe.protocol_run.run_protocol` with ``workers`` processes (:func:`plan_workers`); returns the
    rows written. ``progress`` gets one line per cell written (default: the log); ``allow_class_mismatch``: as
    :func:`~cog_pl.features.pair.open_pair`'s."""
    from cog_pl.features.pair import open_pair
    from cog_pl.probe.protocol_run import grid_todo, grid_values, run_protocol

    protocol, plan, seeds, shots = grid_values(protocol, plan, seeds, shots)
    pair = open_pair(root, allow_class_mismatch=allow_class_mismatch)
    model, domain = pair.names(model, domain)
    todo = grid_todo(pair, results, model=model, domain=domain, protocol=protocol, plan=plan, seeds=seeds,
                     shots=shots, device=device, overwrite=overwrite)  # a row of other inputs: refused now
    size = sum(os.path.getsize(p) for p in Path(root).rglob("features.npy"))
    train = pair.train
    flops = grid_flops(len(todo), len(train), train.features.shape[1], train.num_classes, protocol.trials,
                       protocol.epochs)
    slots = plan_workers(workers, device, len(todo), 2 * size, threads, flops)  # float16 on disk, float32 in memory
    if len(slots) <= 1:
        return run_protocol(root, results, model=model, domain=domain, storage=storage, protocol=protocol, plan=plan,
                            seeds=seeds, shots=shots, device=device, overwrite=overwrite,
                            allow_class_mismatch=allow_class_mismatch)
    show = progress or log.info
    show(f"probe grid {model}/{domain}: {len(todo)} cells on {len(slots)} workers "
         f"({slots[0].threads} thread(s) each, {slots[0].device})")
    spec = {"root": str(root), "results": str(results), "model": model, "domain": domain, "storage": str(storage),
            "protocol": protocol, "plan": plan, "allow_class_mismatch": allow_class_mismatch}
    context = multiprocessing.get_context("spawn")
    places = context.Queue()
    for i, slot in enumerate(slots):
        places.put((i, slot))
    rows, started = [], time.monotonic()
    with ProcessPoolExecutor(len(slots), mp_context=context, initializer=_start, initargs=(spec, places)) as pool:
        pending = {pool.submit(_cell, cell): cell for cell in cell_order(todo)}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    cell = pending.pop(future)
                    status, worker, row = future.result()
                    if status == "held":  # another machine's worker holds it: asked again (the task waited a second)
                        pending[pool.submit(_cell, cell)] = cell
                    elif row is not None:
                        rows.append(row)
                        show(f"[{len(rows)}/{len(todo)}] worker {worker}: shots={row['shots'] or 'all'} "
                             f"seed={row['seed']} -> test top-1 {row['test_top1']:.2f} ({row['seconds']:.1f} s; "
                             f"{time.monotonic() - started:.0f} s in all)")
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # the running cells end (their claims released)
            raise
    return rows


_WORKER: dict[str, Any] = {}  # a worker process's place, splits and storage (:func:`_start`)


def _start(spec: dict[str, Any], places: Any) -> None:
    """A worker process's start: its place (threads, device, environment), the features, the storage."""
    index, slot = places.get()
    os.environ.update({k: v for k, v in slot.env.items() if k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                                   "CUDA_VISIBLE_DEVICES")})
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    import optuna
    import torch

    from cog_pl.features.pair import open_pair
    from cog_pl.identity import wanted
    from cog_pl.probe.protocol_run import Splits
    from cog_pl.probe.storage import resolve_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    torch.set_num_threads(slot.threads)
    protocol, plan = spec["protocol"], spec["plan"]
    pair = open_pair(spec["root"], allow_class_mismatch=spec["allow_class_mismatch"])
    splits = Splits.for_probes(pair, slot.device, protocol, plan)
    _WORKER.update(spec, index=index, device=slot.device, splits=splits, storage=resolve_storage(spec["storage"]),
                   want=wanted(splits.features, protocol, plan.as_record(), plan.precision_on(slot.device)))


def _cell(cell: tuple[int | None, int]) -> tuple[str, int, dict[str, Any] | None]:
    """One task: the cell made by :func:`cog_pl.probe.cells.make_cell` in this worker process."""
    from cog_pl.probe.cells import make_cell
    from cog_pl.probe.protocol_run import METHOD

    w = _WORKER
    shots, seed = cell
    status, row = make_cell(w["splits"], w["results"], (w["model"], METHOD, w["domain"], shots, seed), w["want"],
                            storage=w["storage"], protocol=w["protocol"], plan=w["plan"], device=w["device"])
    if status == "held":
        time.sleep(1.0)
    return status, w["index"], row
