"""A job graph printed (``--dry-run``), submitted through submitit (``slurm``) or written as scripts.

Everything lands under ``<root>/slurm/``: ``jobs.json`` (:mod:`cog_pl.pipeline.cluster.ledger`), ``logs/``, and for the
plain scripts ``scripts/`` (unless ``--launcher sbatch-scripts DIR`` names another folder). A submission is refused
while a job of an earlier one under the same root doing the same work (the same key: ``extract/<model>``, ...) is
queued or running (two extractions would write the same stores); earlier jobs that SLURM will never start (a job
they depend on failed) are cancelled.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from cog_pl.errors import CogError
from cog_pl.pipeline.cluster.jobs import Job, format_jobs, ordered
from cog_pl.pipeline.cluster.ledger import NEVER, cancel, job_states, read_ledger, submitted_ids, write_ledger
from cog_pl.pipeline.cluster.options import JOB_ENV, ClusterOptions

log = logging.getLogger(__name__)


def _jobs(jobs: Sequence[Job]) -> str:
    return f"{len(jobs)} job{'s' * (len(jobs) > 1)}"


def refuse_live(root: Path, jobs: Sequence[Job]) -> None:
    """Refuse to submit ``jobs`` while a job of the same key (the same model's extraction, say: two would write the
    same stores) of a submission recorded under ``root`` may still run; cancel recorded jobs that never will
    (pending on a dependency that failed)."""
    record = read_ledger(root)
    if record is None:
        return
    wanted = {j.key for j in jobs if j.stage not in ("check", "report")}  # those two may run twice side by side
    ids: dict[str, list[str]] = {}
    for i, submission in enumerate([record, *record.get("earlier", [])]):
        known = submitted_ids(root, submission) if i == 0 else {j["key"]: j["id"] for j in submission["jobs"]
                                                                 if j.get("id")}
        for key, job_id in known.items():
            ids.setdefault(job_id, []).append(key)
    if not ids:
        return
    states = job_states(ids)
    live, stuck = [], set()
    for job_id, keys in ids.items():
        for task in states.get(job_id, []):
            if task.active and wanted.intersection(keys):
                live.append(f"{'/'.join(sorted(set(keys)))} {task.id} {task.state}")
            elif task.reason == NEVER:
                stuck.add(job_id)
    if live:
        live.sort()
        shown = ", ".join(live[:4]) + (f" and {len(live) - 4} more" if len(live) > 4 else "")
        raise CogError(f"{root}: jobs of an earlier submission doing the same work are still queued or running "
                       f"({shown}); wait for them (cog-pl run --status {root}) or scancel them, then submit again")
    if stuck:
        cancel(sorted(stuck))
        log.warning("cancelled job(s) %s of an earlier submission: a job they depend on failed, so SLURM would "
                    "never start them", ", ".join(sorted(stuck)))


def launch(jobs: Sequence[Job], opts: ClusterOptions, root: str | os.PathLike,
           results: str | os.PathLike | None = None, *, entry: Callable[[list[str]], int]) -> int:
    """Print, submit or write ``jobs`` as ``opts`` says, recorded under ``root`` (``results``: where their rows go,
    by default ``<root>/results.sqlite``); prints what was done. Returns the exit status. ``entry``: the command
    line's entry point (``cog_pl.cli.main.main``, ``argv -> exit status``), which a job submitted through submitit
    runs its command with (plain scripts run ``python -m cog_pl.cli.main``)."""
    if os.environ.get(JOB_ENV):
        raise CogError("--launcher inside a cluster job: a job's command never submits jobs (drop --launcher)")
    jobs, root = ordered(jobs), Path(root).resolve()
    folder, workdir = root / "slurm", Path.cwd()
    if opts.dry_run:
        print(f"dry run: {_jobs(jobs)}, nothing submitted\n\n{format_jobs(jobs, opts)}")
        return 0
    if opts.launcher == "sbatch-scripts":
        from cog_pl.pipeline.cluster.scripts import log_pattern, write_scripts

        record = folder / "submitted.tsv"
        paths = write_scripts(jobs, opts, opts.scripts_dir or folder / "scripts", folder / "logs", record,
                              workdir)  # all or none, before the submission is recorded
        try:
            write_ledger(root, opts.launcher, jobs, {}, {j.key: log_pattern(folder / "logs", j) for j in jobs},
                         results)
        except BaseException:  # no scripts of a submission that is not recorded
            for path in paths:
                path.unlink(missing_ok=True)
            raise
        record.unlink(missing_ok=True)  # its ids went into the record of the last submission
        print(f"wrote {len(jobs)} sbatch script{'s' * (len(jobs) > 1)}; submit them in order with: bash {paths[-1]}\n\n"
              f"{format_jobs(jobs, opts)}\n\nthen follow them with: cog-pl run --status {root}")
        return 0
    try:
        from cog_pl.pipeline.cluster.submit import log_pattern, submit
    except ImportError as err:
        raise CogError(f"--launcher slurm needs submitit ({err}): pip install 'cog_pl[slurm]', or write plain "
                       "sbatch scripts with --launcher sbatch-scripts DIR") from None
    refuse_live(root, jobs)
    ids = submit(jobs, opts, folder / "logs", workdir, entry)
    write_ledger(root, opts.launcher, jobs, ids, {j.key: log_pattern(folder / "logs") for j in jobs}, results)
    print(f"submitted {_jobs(jobs)}\n\n{format_jobs(jobs, opts, ids)}\n\n"
          f"follow them with: cog-pl run --status {root}")
    return 0
