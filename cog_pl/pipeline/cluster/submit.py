"""A job graph submitted to SLURM through ``submitit`` (``--launcher slurm``).

Each job runs :class:`StageJob`: one stage's ``cog-pl`` command, in every task of the job (``srun``; an
extraction's tasks are the ranks of Lightning's DDP). submitit asks SLURM for a signal ``--signal-delay`` seconds
before the time limit (``--signal=USR2@S``) and sends the same on preemption where the cluster does; on it, task 0
calls :meth:`StageJob.checkpoint` and requeues the job (``scontrol requeue``), up to ``--requeues`` time limits and
for every preemption. The requeued job runs the same command, which resumes from the finished stores, rows and
studies. Dependencies are SLURM's ``afterok`` (an array: every task ended well).
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import submitit

from cog_pl.errors import CogError
from cog_pl.pipeline.cluster.jobs import Job
from cog_pl.pipeline.cluster.options import JOB_ENV, ClusterOptions

log = logging.getLogger(__name__)


#: What a job runs: the command line's entry point, ``argv -> exit status`` (``cog_pl.cli.main.main``, handed down by
#: the command line through :func:`~cog_pl.pipeline.cluster.launch.launch`). submitit pickles it by reference (its
#: module and name), so the job imports it where it runs, and this module never imports the command line above it.
Entry = Callable[[list[str]], int]


class StageJob(submitit.helpers.Checkpointable):
    """``cog-pl ARGV`` as a submitit job that requeues itself on SLURM's signal (time limit, preemption); ``entry``
    runs the command line (:data:`Entry`)."""

    def __init__(self, argv: Sequence[str], entry: Entry) -> None:
        self.argv = tuple(argv)
        self.entry = entry
        self.requeued = False

    def __call__(self) -> int:
        os.environ[JOB_ENV] = "1"
        try:
            status = self.entry(list(self.argv))
        except BaseException:
            if self.requeued:  # submitit's handler ends the process with SystemExit, wherever it stood
                sys.exit(-1)
            raise
        if status and self.requeued:  # the exit reached cleanup code that failed in its turn: requeued anyway
            sys.exit(-1)
        if status:  # a failed stage fails its job: the jobs after it (afterok) never start
            raise RuntimeError(f"cog-pl {shlex.join(self.argv)} ended with exit status {status} (its error is in "
                               "this job's log)")
        return status

    def checkpoint(self) -> submitit.helpers.DelayedSubmission:
        """The same command again: the work done lives in the stores, rows and studies, not in this object.
        Called by submitit's signal handler on task 0 just before it requeues the job and exits."""
        self.requeued = True
        log.warning("requeued: cog-pl %s resumes from what is finished", shlex.join(self.argv))
        return submitit.helpers.DelayedSubmission(StageJob(self.argv, self.entry))


def _executor(folder: Path, opts: ClusterOptions) -> submitit.AutoExecutor:
    try:
        return submitit.AutoExecutor(folder=folder / "%j", cluster="slurm", slurm_max_num_timeout=opts.requeues)
    except RuntimeError as err:  # no srun: not a SLURM host
        raise CogError(f"--launcher slurm: {err} (submit from a host of the cluster, or write scripts with "
                       "--launcher sbatch-scripts DIR)") from None


def submit(jobs: Sequence[Job], opts: ClusterOptions, folder: Path, workdir: Path, entry: Entry) -> dict[str, str]:
    """Submit ``jobs`` (ordered: each after those it depends on), their logs under ``folder``, each running in
    ``workdir`` its command line through ``entry``; returns each job's SLURM id. A job SLURM refuses cancels those
    submitted before it."""
    executor = _executor(folder, opts)
    ids: dict[str, str] = {}
    try:
        for job in jobs:
            extra: dict[str, str | bool] = {**opts.sbatch_parameters(), "chdir": str(workdir), "requeue": True}
            extra.pop("cpus-per-task", None)  # a submitit parameter of its own
            if job.after:
                extra["dependency"] = "afterok:" + ":".join(ids[k] for k in job.after)
            executor.update_parameters(
                name=job.name, timeout_min=opts.time_min, nodes=job.nodes, tasks_per_node=job.tasks_per_node,
                gpus_per_node=job.gpus_per_node or None, cpus_per_task=opts.cpus_per_task,
                slurm_signal_delay_s=opts.signal_delay_s, slurm_array_parallelism=max(job.array, 1),
                slurm_setup=[f"export {JOB_ENV}=1"], slurm_additional_parameters=extra)
            if job.array > 1:
                with executor.batch():
                    tasks = [executor.submit(StageJob(job.argv, entry)) for _ in range(job.array)]
                ids[job.key] = tasks[0].job_id.split("_")[0]
            else:
                ids[job.key] = executor.submit(StageJob(job.argv, entry)).job_id
            log.info("submitted %s as job %s", job.key, ids[job.key])
    except Exception as err:
        if ids:
            from cog_pl.pipeline.cluster.ledger import cancel

            cancel(ids.values())
        failed = next(j.key for j in jobs if j.key not in ids)
        detail = getattr(err, "stderr", None) or err
        raise CogError(f"SLURM refused the job {failed} ({' '.join(str(detail).split())}); the jobs "
                       f"submitted before it were cancelled") from err
    return ids


def log_pattern(folder: Path) -> str:
    """Where submitit writes the errors of a job's first task, ``%j`` standing for the job's (or array task's,
    ``ID_INDEX``) id."""
    return str(folder / "%j" / "%j_0_log.err")
