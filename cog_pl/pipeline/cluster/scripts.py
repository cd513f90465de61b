"""A job graph as plain, commented ``sbatch`` scripts (``--launcher sbatch-scripts DIR``): no ``submitit`` needed.

One script per job (``NN-<job name>.sbatch``) and ``submit.sh``, which submits them in order, each with
``--dependency=afterok:`` on the ids of those it depends on, and records each id in ``OUT/slurm/submitted.tsv``
(``cog-pl run --status OUT`` reads it). A script asks SLURM for ``USR2`` ``--signal-delay`` seconds before its time
limit (``--signal=B:USR2@S``, to the batch shell) and requeues its job on it (``scontrol requeue``), at most
``--requeues`` times; the job, run again, resumes from what is finished.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from cog_pl.io import atomic_open
from cog_pl.pipeline.cluster.jobs import Job
from cog_pl.pipeline.cluster.options import JOB_ENV, ClusterOptions

REQUEUE = """\
# SLURM sends USR2 to this script {delay} s before the time limit (and on preemption, where the cluster signals
# jobs): the job is requeued and, run again, resumes from what is finished. Past MAX_REQUEUES it just ends.
MAX_REQUEUES={requeues}
requeue() {{
    local id=${{SLURM_ARRAY_JOB_ID:+${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}}}
    id=${{id:-$SLURM_JOB_ID}}
    if [ "${{SLURM_RESTART_COUNT:-0}}" -lt "$MAX_REQUEUES" ]; then
        echo "cog-pl: signalled before the time limit or preempted: requeueing job $id" >&2
        scontrol requeue "$id"
    else
        echo "cog-pl: signalled, but requeued $MAX_REQUEUES times already: not again" >&2
    fi
}}
trap requeue USR2
"""

RUN = """\
export {env}=1  # a job's command never submits jobs itself
PYTHON=${{COG_PL_PYTHON:-{python}}}

# {how}
srun --kill-on-bad-exit=1 "$PYTHON" -m cog_pl.cli.main {argv} &
child=$!
while true; do  # a trapped signal interrupts wait: wait again until srun itself ends
    wait "$child"
    status=$?
    kill -0 "$child" 2>/dev/null || break
done
exit $status
"""

HOW = {
    "check": "one task: the data check (every image of the splits present, the sources readable)",
    "extract": "one task per GPU on every node, Lightning's DDP ranks (SLURMEnvironment reads srun's variables); "
               "finished stores are skipped, interrupted ones resumed",
    "probe": "each array task is one probe worker: they share the Optuna storage and the results file, and each "
             "cell is claimed by one task before it is tuned; finished rows are skipped",
    "finetune": "one task: the backbone fine-tuned on every domain; finished rows are skipped",
    "report": "one task: tables and plots from the rows",
}


def _flag(key: str, value: str | bool) -> str:
    return f"#SBATCH --{key}" if value is True else f"#SBATCH --{key}={value}"


def job_script(job: Job, opts: ClusterOptions, logs: Path, workdir: Path, python: str = sys.executable) -> str:
    """The ``sbatch`` script of one job."""
    log = logs / (f"{job.name}-%A_%a.out" if job.array > 1 else f"{job.name}-%j.out")
    flags: dict[str, str | bool] = {"job-name": job.name, "nodes": str(job.nodes),
                                    "ntasks-per-node": str(job.tasks_per_node)}
    if job.gpus_per_node:
        flags["gpus-per-node"] = str(job.gpus_per_node)
    if job.array > 1:
        flags["array"] = f"0-{job.array - 1}"
    flags.update({"time": str(opts.time_min), **opts.sbatch_parameters(), "output": str(log),
                  "open-mode": "append", "chdir": str(workdir), "requeue": True,
                  "signal": f"B:USR2@{opts.signal_delay_s}"})
    after = f"; submit.sh starts it after {', '.join(job.after)} ended well" if job.after else ""
    lines = ["#!/bin/bash", f"# cog-pl {job.stage} stage ({job.key}): {job.what}{after}.",
             "# Written by cog-pl --launcher sbatch-scripts; submit all with submit.sh beside it. Submitted again, "
             "it resumes.", *(_flag(k, v) for k, v in flags.items()), "",
             REQUEUE.format(delay=opts.signal_delay_s, requeues=opts.requeues),
             RUN.format(env=JOB_ENV, python=shlex.quote(python), argv=shlex.join(job.argv), how=HOW[job.stage])]
    return "\n".join(lines)


SUBMIT = """\
#!/bin/bash
# Submits the jobs of one cog-pl evaluation in order, each after those it depends on (afterok: it starts once they
# ended well), and records each job's id in {record} for `cog-pl run --status`.
set -euo pipefail
cd "$(dirname "$0")"
record={record}
mkdir -p "$(dirname "$record")"
submit() {{  # KEY SCRIPT [IDS IT DEPENDS ON...]
    local key=$1 script=$2 deps="" id
    shift 2
    if [ $# -gt 0 ]; then deps="--dependency=afterok:$(IFS=:; echo "$*")"; fi
    id=$(sbatch --parsable $deps "$script")
    id=${{id%%;*}}
    echo "$key $id" >> "$record"
    echo "$key: job $id ($script)" >&2
    echo "$id"
}}
"""


def write_scripts(jobs: Sequence[Job], opts: ClusterOptions, folder: Path, logs: Path, record: Path,
                  workdir: Path) -> list[Path]:
    """Write one script per job and ``submit.sh`` into ``folder``; returns their paths (``submit.sh`` last). All or
    none: each is written to a temporary file beside it, and they are renamed into place once every one is written
    (a failure, a full disk say, leaves none of them)."""
    folder.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    texts, names = {}, {}
    submit = [SUBMIT.format(record=shlex.quote(str(record)))]
    for i, job in enumerate(jobs, 1):
        path = folder / f"{i:02d}-{job.name}.sbatch"
        texts[path] = job_script(job, opts, logs, workdir)
        names[job.key] = f"job{i}"
        deps = " ".join(f'"${names[k]}"' for k in job.after)
        submit.append(f"{names[job.key]}=$(submit {shlex.quote(job.key)} {path.name}{' ' + deps if deps else ''})")
    texts[folder / "submit.sh"] = "\n".join(submit) + "\n"
    with contextlib.ExitStack() as written:  # renamed into place when the block ends, removed on an error
        for path, text in texts.items():
            written.enter_context(atomic_open(path)).write(text)
    for path in texts:
        path.chmod(0o755)
    return list(texts)


def log_pattern(logs: Path, job: Job) -> str:
    """Where a script's job writes its log, ``%j`` standing for the job's (or array task's, ``ID_INDEX``) id."""
    return str(logs / f"{job.name}-%j.out")
