"""The record of a submission and what SLURM says of its jobs.

``<root>/slurm/jobs.json`` (format 1) holds the graph of the latest submission: each job's key, stage, command,
resources, dependencies, SLURM id (None until a script is submitted by hand) and what it makes; the submissions
before it are kept under ``earlier``. ``submit.sh`` of the plain scripts appends ``KEY ID`` lines to
``<root>/slurm/submitted.tsv`` as it submits, which :func:`submitted_ids` reads too.

A job's state comes from ``squeue`` while SLURM queues or runs it, then ``sacct`` (where accounting is on), then
``scontrol show job`` (ended jobs SLURM still holds, for ``MinJobAge``); an id none of them knows is ``ENDED``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cog_pl.errors import CogError
from cog_pl.io import read_json, write_json
from cog_pl.pipeline.cluster.jobs import Job

FORMAT = 1
#: States of a job SLURM may still run (or is running).
ACTIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                    "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})
#: The reason of a pending job whose dependency failed: SLURM will never start it.
NEVER = "DependencyNeverSatisfied"


def ledger_path(root: str | Path) -> Path:
    return Path(root) / "slurm" / "jobs.json"


def write_ledger(root: str | Path, launcher: str, jobs: Sequence[Job], ids: dict[str, str | None],
                 logs: dict[str, str], results: str | Path | None = None) -> Path:
    """Record a submission (the earlier ones kept under ``earlier``): its jobs, their ids and logs (``%j``: a job's
    or array task's id), and the results file their rows go to (None: ``<root>/results.sqlite``)."""
    path = ledger_path(root)
    earlier = []
    previous = read_ledger(root)
    if previous is not None:  # kept with the ids submit.sh recorded for it
        known = submitted_ids(root, previous)
        previous["jobs"] = [{**j, "id": known.get(j["key"])} for j in previous["jobs"]]
        earlier = [*previous.pop("earlier", []), previous]
    write_json(path, {"format": FORMAT, "launcher": launcher, "submitted": time.strftime("%Y-%m-%d %H:%M:%S"),
                      "results": None if results is None else str(results),
                      "jobs": [{**j.as_record(), "id": ids.get(j.key), "log": logs.get(j.key)} for j in jobs],
                      "earlier": earlier})
    return path


def read_ledger(root: str | Path) -> dict[str, Any] | None:
    """The latest submission's record, None where there is none."""
    path = ledger_path(root)
    if not path.is_file():
        return None
    record = read_json(path, "SLURM job record")
    if record.get("format") != FORMAT:
        raise CogError(f"{path}: a SLURM job record of format {record.get('format')!r}; this cog-pl reads "
                       f"format {FORMAT}")
    return record


def submitted_ids(root: str | Path, record: dict[str, Any]) -> dict[str, str]:
    """Each job's SLURM id: the record's, else the latest that ``submit.sh`` wrote to ``submitted.tsv``."""
    ids = {j["key"]: j["id"] for j in record["jobs"] if j.get("id")}
    by_hand = Path(root) / "slurm" / "submitted.tsv"
    if by_hand.is_file():
        for line in by_hand.read_text().splitlines():
            key, _, job_id = line.strip().rpartition(" ")
            if key and job_id:
                ids[key] = job_id
    return ids


@dataclass(frozen=True)
class TaskState:
    """One job (or array task) as SLURM has it."""

    id: str
    state: str
    reason: str = ""
    elapsed: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE and self.reason != NEVER


def _run(cmd: list[str]) -> subprocess.CompletedProcess | None:
    if shutil.which(cmd[0]) is None:
        return None
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def job_states(ids: Iterable[str]) -> dict[str, list[TaskState]]:
    """The state of each job id's tasks (one for a plain job, one per array task); ``[]`` for an id SLURM no
    longer knows. A ValueError when ``squeue`` is missing (not on a SLURM host)."""
    wanted = [str(i) for i in ids]
    found: dict[str, list[TaskState]] = {i: [] for i in wanted}
    queue = _run(["squeue", "-h", "-a", "-r", "-o", "%F|%i|%T|%r|%M"])
    if queue is None:
        raise CogError("squeue not found: the jobs' states are SLURM's (run this on a host of the cluster)")
    for line in queue.stdout.splitlines():
        base, task, state, reason, elapsed = (line.split("|") + [""] * 5)[:5]
        if base in found:
            found[base].append(TaskState(task, state, reason, elapsed))
    rest = [i for i in wanted if not found[i]]
    if rest:
        acct = _run(["sacct", "-n", "-P", "-X", "-j", ",".join(rest), "-o", "JobID,State,Elapsed"])
        if acct is not None and acct.returncode == 0:
            for line in acct.stdout.splitlines():
                task, state, elapsed = (line.split("|") + [""] * 3)[:3]
                base = task.split("_")[0]
                if base in found:
                    found[base].append(TaskState(task, state.split()[0] if state else "", "", elapsed))
    for job_id in [i for i in wanted if not found[i]]:
        shown = _run(["scontrol", "-o", "show", "job", job_id])
        if shown is None or shown.returncode != 0:
            continue
        for line in shown.stdout.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            task = fields.get("JobId", job_id)
            if fields.get("ArrayTaskId"):
                task = f"{fields.get('ArrayJobId', job_id)}_{fields['ArrayTaskId']}"
            found[job_id].append(TaskState(task, fields.get("JobState", ""), fields.get("Reason", ""),
                                           fields.get("RunTime", "")))
    return found


def cancel(ids: Iterable[str]) -> None:
    """``scancel`` these jobs (and every task of an array)."""
    ids = [str(i) for i in ids]
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=60)
