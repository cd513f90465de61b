"""``cog-pl run --status OUT``: each stage's jobs, their states as SLURM has them, and their progress.

Progress is read from what the jobs make, not from SLURM: complete feature stores, result rows present, the report
file. A job that failed shows the last line of its log (``cog-pl run: error: ...`` where the command refused).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from cog_pl.errors import MissingFileError
from cog_pl.pipeline.cluster.jobs import Job
from cog_pl.pipeline.cluster.ledger import ACTIVE, TaskState, job_states, ledger_path, read_ledger, submitted_ids

ENDED_BADLY = ("FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "PREEMPTED")


def _states(tasks: list[TaskState], job_id: str | None) -> str:
    if job_id is None:
        return "not submitted"
    if not tasks:
        return "ended (SLURM no longer holds it)"
    if len(tasks) == 1:
        t = tasks[0]
        reason = f" ({t.reason})" if t.state == "PENDING" and t.reason not in ("", "None") else ""
        elapsed = f" {t.elapsed}" if t.state == "RUNNING" and t.elapsed else ""
        return f"{t.state}{reason}{elapsed}"
    counts = Counter(t.state + (f" ({t.reason})" if t.state == "PENDING" and t.reason not in ("", "None") else "")
                     for t in tasks)
    return ", ".join(f"{state} x{n}" for state, n in counts.most_common())


def _last_error(pattern: str | None, tasks: list[TaskState]) -> str | None:
    """The last line worth showing of the log of the first task that ended badly."""
    bad = [t for t in tasks if t.state in ENDED_BADLY]
    if not pattern or not bad:
        return None
    path = Path(pattern.replace("%j", bad[0].id))
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return f"(no log at {path})"
    ours = [ln for ln in lines if ln.startswith("cog-pl ") and "error:" in ln]
    return (ours or lines or ["(empty log)"])[-1][:300] + f"  [{path}]"


def _progress(job: Job, present: set[tuple]) -> str:
    from cog_pl.features.store import is_complete

    parts = []
    if job.stores:
        parts.append(f"{sum(is_complete(p) for p in job.stores)}/{len(job.stores)} stores complete")
    if job.rows:
        parts.append(f"{sum(tuple(r) in present for r in job.rows)}/{len(job.rows)} rows")
    for name in job.files:
        path = Path(name)
        parts.append(f"{path.name} written {time.strftime('%Y-%m-%d %H:%M', time.localtime(path.stat().st_mtime))}"
                     if path.is_file() else f"{path.name} not written yet")
    return "; ".join(parts)


def status_text(root: str | Path) -> str:
    """The status of the latest submission recorded under ``root`` as text."""
    from cog_pl.results import read_rows, row_key

    record = read_ledger(root)
    if record is None:
        raise MissingFileError(f"{root}: no SLURM submission recorded ({ledger_path(root)} not found); submit one "
                               "with cog-pl run ... --launcher slurm")
    ids = submitted_ids(root, record)
    jobs = [(Job.from_record(j), j.get("log")) for j in record["jobs"]]
    note = ""
    try:
        states = job_states(ids.values())
    except ValueError as err:
        states, note = {}, f"job states unknown: {err}"
    results = Path(record["results"]) if record.get("results") else Path(root) / "results.sqlite"
    present = {row_key(r) for r in read_rows(results)} if any(j.rows for j, _ in jobs) else set()
    table = []
    for job, log in jobs:
        tasks = states.get(ids.get(job.key, ""), [])
        table.append((job.key, ids.get(job.key, "-"), _states(tasks, ids.get(job.key)), _progress(job, present),
                      _last_error(log, tasks)))
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    lines = [f"{root}: {record['launcher']} submission of {record['submitted']}, {len(jobs)} jobs"]
    if note:
        lines.append(note)
    for key, job_id, state, progress, error in table:
        lines.append(f"  {key:<{widths[0]}}  job {job_id:<{widths[1]}}  {state:<{widths[2]}}  {progress}".rstrip())
        if error:
            lines.append(f"      {error}")
    active = any(t.state in ACTIVE for ts in states.values() for t in ts)
    lines.append("" if active else "no job of this submission is queued or running")
    return "\n".join(lines).rstrip()
