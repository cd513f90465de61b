"""A whole evaluation on a SLURM cluster: the stages of ``cog-pl run`` as SLURM jobs, through ``submitit``.

Nothing here schedules work: SLURM runs the jobs, Lightning's DDP spreads an extraction over the tasks of its job
(``srun``, :class:`~lightning.pytorch.plugins.environments.SLURMEnvironment`), and the probe tasks share one Optuna
storage and one results file, each cell claimed by one task before it is tuned
(:class:`cog_pl.evaluate.grid.CellTask`). Each job runs one stage's ``cog-pl`` command (``cog-pl run ... --stage
extract``), so a job that is requeued or submitted again resumes from what is finished, by the rules every stage
already follows.

- :mod:`cog_pl.pipeline.cluster.options`: the launcher's command-line options and :class:`ClusterOptions`.
- :mod:`cog_pl.pipeline.cluster.jobs`: the job graph of a run (pure: which jobs, their resources, dependencies,
  commands).
- :mod:`cog_pl.pipeline.cluster.launch`: a graph printed (``--dry-run``), submitted, or written as scripts.
- :mod:`cog_pl.pipeline.cluster.submit`: submission through ``submitit``;
  :class:`~cog_pl.pipeline.cluster.submit.StageJob` requeues itself on SLURM's signal.
- :mod:`cog_pl.pipeline.cluster.scripts`: plain, commented ``sbatch`` scripts for clusters without ``submitit``.
- :mod:`cog_pl.pipeline.cluster.ledger`: the record of a submission (``OUT/slurm/jobs.json``) and the jobs' states.
- :mod:`cog_pl.pipeline.cluster.status`: each stage's jobs and progress (``cog-pl run --status OUT``).
"""

from cog_pl.pipeline.cluster.jobs import Job
from cog_pl.pipeline.cluster.options import ClusterOptions

__all__ = ["ClusterOptions", "Job"]
