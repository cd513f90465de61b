"""Device, precision and "does it fit": one decision each, used by every stage (extraction, probes, fine-tuning).

- :func:`resolve_device`: ``"auto"`` is the current CUDA device where there is one, else the CPU; anything else is
  parsed by ``torch.device`` and refused by name when this machine has no such device.
- :func:`resolve_precision`: one vocabulary, Lightning's (``"32-true"``, ``"bf16-mixed"``, ``"16-mixed"``, ...), plus
  ``"auto"``: ``"bf16-mixed"`` where bfloat16 matrix products are fast on the device (:func:`fast_bf16`), else
  ``"32-true"``. A stage that runs only some precisions passes ``allowed``.
- :func:`trainer_options`: a stage's Lightning ``accelerator``/``devices``/``precision``, "auto" resolved by the two.
- :func:`fits`: whether ``needed`` bytes fit in a device's free memory with a safety margin (:data:`FIT_FRACTION`);
  host memory always "fits" (the operating system pages).
- :func:`loader_workers`: how many loader worker processes ``num_workers="auto"`` means.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import torch

from cog_pl.errors import CogError

log = logging.getLogger(__name__)

#: Lightning's Trainer precisions (its ``_PRECISION_INPUT``), the one vocabulary of every stage.
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true", "transformer-engine",
              "transformer-engine-float16", "32", "16", "bf16", "64")
#: The fraction of a device's free memory a stage may plan to fill (the rest absorbs fragmentation and the
#: allocations a plan does not count: cuBLAS workspaces, CUDA graphs, Triton's).
FIT_FRACTION = 0.9


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """The device a stage runs on: ``"auto"`` is the current CUDA device, else the CPU."""
    if isinstance(device, torch.device):
        dev = device
    elif device in (None, "", "auto"):
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    else:
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise CogError(f"device {device!r}: not a device name (auto, cpu, cuda, cuda:1, ...)") from err
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise CogError(f"device {str(dev)!r}: this machine has no CUDA device (use --device cpu or auto)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise CogError(f"device {str(dev)!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return dev


def accelerator(device: str | torch.device = "auto") -> str:
    """Lightning's ``accelerator`` for a device request (``"cuda"`` or ``"cpu"``, or the request's type)."""
    dev = resolve_device(device)
    return "cuda" if dev.type == "cuda" else dev.type


def trainer_options(accelerator: str = "auto", devices: int | str = "auto", precision: str | int = "32-true",
                    allowed: Sequence[str] = PRECISIONS) -> dict[str, Any]:
    """A Lightning Trainer's ``accelerator``, ``devices`` and ``precision`` for a stage: accelerator ``"auto"`` is
    the device :func:`resolve_device` picks (``"cuda"`` or ``"cpu"``), precision ``"auto"`` is resolved on that
    device (:func:`resolve_precision`), so the Trainer and the rows get the values the stage really ran with."""
    if accelerator in (None, "", "auto"):
        accelerator = resolve_device("auto").type
    on = "cuda" if accelerator in ("cuda", "gpu") else accelerator
    return {"accelerator": accelerator, "devices": devices, "precision": resolve_precision(precision, on, allowed)}


def fast_bf16(device: str | torch.device) -> bool:
    """True where bfloat16 matrix products are much faster than float32 ones: recent GPUs, CPUs with AMX/BF16."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")  # private, hence looked up with a default
        return any(getattr(torch.cpu, name, lambda: False)() for name in probes)
    return False


def resolve_precision(precision: str | int, device: str | torch.device = "auto",
                      allowed: Sequence[str] = PRECISIONS) -> str:
    """A Lightning precision string; ``"auto"`` becomes ``"bf16-mixed"`` where :func:`fast_bf16` holds on ``device``
    (resolved by :func:`resolve_device`), else ``"32-true"``. Values outside ``allowed`` are refused by name."""
    precision = str(precision)
    if precision == "auto":
        precision = "bf16-mixed" if fast_bf16(resolve_device(device)) else "32-true"
        if precision not in allowed:
            precision = "32-true"
    if precision not in allowed:
        raise CogError(f"precision {precision!r}; expected auto or one of {', '.join(allowed)}")
    return precision


def free_bytes(device: str | torch.device) -> int | None:
    """Bytes a stage can still allocate on a CUDA device (free memory plus what PyTorch's allocator holds unused);
    None for the host."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    return int(torch.cuda.mem_get_info(dev)[0] + torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev))


def fits(needed: int, device: str | torch.device, free: int | None = None, what: str = "data") -> bool:
    """Whether ``needed`` bytes fit on ``device`` within :data:`FIT_FRACTION` of its free memory (``free``: measured
    when None). Always True on the host. Logs the decision when it does not fit."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return True
    free = free_bytes(dev) if free is None else free
    if needed <= FIT_FRACTION * free:
        return True
    log.info("%s (%.1f GB) does not fit in the %.1f GB free on %s", what, needed / 1e9, free / 1e9, dev)
    return False


def loader_workers(processes: int = 1) -> int:
    """Loader workers per process: the cores this process may run on (``os.sched_getaffinity``: a container's or a
    job's share, not the machine's), shared by ``processes`` (DDP ranks on the node), less one for the process
    itself; at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, processes) - 1)
