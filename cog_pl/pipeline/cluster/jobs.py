"""The job graph of an evaluation: which SLURM jobs, their resources, dependencies and commands (no SLURM here).

``cog-pl run --launcher`` maps each stage of :data:`cog_pl.pipeline.STAGES` onto jobs:

- ``check``: one task, the data check (once for every model: they read the same data);
- ``extract/<model>``: one job per model on ``--nodes`` x ``--gpus-per-node``, one ``srun`` task (one DDP rank) per
  GPU, the stores written by rank as a local multi-GPU run writes them; after ``check``;
- ``probe/<model>``: a job array of ``--probe-workers`` tasks on one GPU each, sharing one Optuna storage and one
  results file, each cell claimed by one task before it is tuned; after the model's extraction;
- ``finetune/<model>`` (with ``--methods ... finetune``): one task on one GPU; after ``check``;
- ``report``: one task, the report of every model in the results file; after every probe and fine-tuning job.

Every job runs the user's own command with ``--stage`` (:func:`stage_argv`), so a requeued or resubmitted job
resumes by the stages' rules. A dependency is ``afterok``: a job starts once those it depends on ended well.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cog_pl.pipeline.cluster.options import ClusterOptions

if TYPE_CHECKING:
    from cog_pl.pipeline import RunConfig


@dataclass(frozen=True)
class Job:
    """One SLURM job (or job array) of a graph and what it makes."""

    key: str  # unique in its graph: check, extract/<model>, probe/<model>, finetune/<model>, report
    stage: str
    argv: tuple[str, ...]  # the cog-pl command line it runs, without "cog-pl"
    what: str = ""  # one line: what it makes
    nodes: int = 1
    tasks_per_node: int = 1
    gpus_per_node: int = 0
    array: int = 0  # tasks of a job array, each running the command (0: one job)
    after: tuple[str, ...] = ()  # keys of the jobs that must end well first (afterok)
    stores: tuple[str, ...] = ()  # the feature stores it makes (its progress)
    rows: tuple[tuple, ...] = ()  # the result rows it makes: (model, method, domain, shots, seed)
    files: tuple[str, ...] = ()  # other files it writes (the report)

    @property
    def name(self) -> str:
        """The SLURM job name."""
        return "cog-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", self.key)

    def resources(self) -> str:
        """Nodes, tasks and GPUs in words."""
        gpus = f", {self.gpus_per_node} GPU{'s' * (self.gpus_per_node > 1)}" if self.gpus_per_node else ""
        if self.array:
            return f"array of {self.array} task{'s' * (self.array > 1)}{gpus + ' each' if gpus else ''}"
        if self.nodes == 1 and self.tasks_per_node == 1:
            return f"1 task{gpus}"
        per_node = f"{gpus} a node" if gpus else ""
        return f"{self.nodes} node{'s' * (self.nodes > 1)} x {self.tasks_per_node} tasks{per_node}"

    def command(self, program: str = "cog-pl", hide_passwords: bool = True) -> str:
        """The command line as a shell would take it (a database URL's password shown as ``***``)."""
        text = shlex.join([program, *self.argv])
        return re.sub(r"(://[^:/@\s]+:)[^@\s]+@", r"\1***@", text) if hide_passwords else text

    def as_record(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "rows": [list(r) for r in self.rows]}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Job:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in record.items() if k in fields}
        for name in ("argv", "after", "stores", "files"):
            values[name] = tuple(values.get(name, ()))
        values["rows"] = tuple(tuple(r) for r in values.get("rows", ()))
        return cls(**values)


def stage_argv(command: Sequence[str], argv: Sequence[str], stage: str, *extra: str) -> tuple[str, ...]:
    """A job's command: ``command`` (``("run",)``), the user's options without the launcher's, ``--stage``."""
    return (*command, *argv, "--stage", stage, *extra)


def extract_trainer_options(opts: ClusterOptions, strategy: str, flags: tuple[str, str, str, str]
                            ) -> tuple[str, ...]:
    """The Trainer options an extraction job runs with: ``--nodes`` x one task per GPU (or one on a CPU node), DDP
    across them. ``flags``: the command's names of num_nodes, devices, accelerator and strategy."""
    nodes, devices, accelerator, strategy_flag = flags
    options = [nodes, str(opts.nodes), devices, str(opts.tasks_per_node), accelerator,
               "gpu" if opts.gpus_per_node else "cpu"]
    if opts.nodes * opts.tasks_per_node > 1 and strategy == "auto":
        options += [strategy_flag, "ddp"]
    return tuple(options)


def _grid_words(cfg: RunConfig, rows: int) -> str:
    grid = cfg.probe_grid
    shapes = sorted({(len(seeds), len(shots)) for _, seeds, shots in grid})
    shape = (f"{shapes[0][0]} seeds x {shapes[0][1]} shot settings x {len(grid)} domains" if len(shapes) == 1
             else f"{len(grid)} domains")
    methods = " and ".join(cfg.methods_of("probe"))
    return f"{rows} rows: {methods} on {shape}"


def run_jobs(configs: Sequence[RunConfig], argv: Sequence[str], opts: ClusterOptions, probe_tasks: int,
             storage: str) -> list[Job]:
    """The graph of ``cog-pl run`` for each model's config (in order); ``argv``: the user's options without the
    launcher's, ``--model``, ``--checkpoint``, ``--stage``, ``--probe-workers`` and ``--storage``;
    ``storage``: the Optuna storage the probe tasks share."""
    def model_argv(cfg: RunConfig) -> tuple[str, ...]:
        return (*argv, "--model", cfg.model, *(("--checkpoint", cfg.checkpoint) if cfg.checkpoint else ()))

    first = configs[0]
    jobs: list[Job] = []
    checked = ("check",) if first.check else ()
    if first.check:
        jobs.append(Job("check", "check", stage_argv(("run",), model_argv(first), "check"),
                        what=f"the data check of {len(first.domains)} domains"))
    ends: list[str] = []
    for cfg in configs:
        name = cfg.label  # the folder its stores go under (cog_pl.models.label)
        mine = model_argv(cfg)
        stores = tuple(str(p.resolve()) for p in cfg.store_paths(name))
        extract = Job(f"extract/{name}", "extract",
                      stage_argv(("run",), mine, "extract",
                                 *extract_trainer_options(opts, cfg.extract.strategy,
                                                          ("--num-nodes", "--devices", "--accelerator",
                                                           "--strategy"))),
                      what=f"{len(stores)} feature stores ({len(cfg.domains)} domains x train, test"
                           + (f"; variants {', '.join(cfg.variants)} regrouped" if cfg.variants else "") + ")",
                      nodes=opts.nodes, tasks_per_node=opts.tasks_per_node, gpus_per_node=opts.gpus_per_node,
                      after=checked, stores=stores)
        rows = cfg.rows_of("probe")
        probe = Job(f"probe/{name}", "probe",
                    stage_argv(("run",), mine, "probe", "--storage", storage),
                    what=_grid_words(cfg, len(rows)), gpus_per_node=opts.task_gpus, array=probe_tasks,
                    after=(extract.key,), rows=tuple(rows))
        jobs += [extract, probe]
        ends.append(probe.key)
        if cfg.methods_of("finetune"):  # the methods that read images: one task on one GPU
            tuned = tuple(cfg.rows_of("finetune"))
            jobs.append(Job(f"finetune/{name}", "finetune", stage_argv(("run",), mine, "finetune"),
                            what=f"{len(tuned)} rows: {' and '.join(cfg.methods_of('finetune'))} on "
                                 f"{len(cfg.domains)} domains",
                            gpus_per_node=opts.task_gpus, after=checked, rows=tuned))
            ends.append(jobs[-1].key)
    if first.report:
        report = str(Path(first.out).resolve() / "report" / "report.md")
        jobs.append(Job("report", "report", stage_argv(("run",), model_argv(first), "report"),
                        what=f"the report of every model in {first.out}/results.sqlite", after=tuple(ends),
                        files=(report,)))
    return jobs


def ordered(jobs: Iterable[Job]) -> list[Job]:
    """The jobs in their order, each moved after those it depends on (a cycle or an unknown key refused)."""
    left, done, out = list(jobs), set(), []
    keys = {j.key for j in left}
    for job in left:
        unknown = [k for k in job.after if k not in keys]
        if unknown:
            raise ValueError(f"job {job.key} depends on unknown job(s) {', '.join(unknown)}")
    while left:  # the first job in the given order whose dependencies are placed
        job = next((j for j in left if set(j.after) <= done), None)
        if job is None:
            raise ValueError(f"the jobs {', '.join(j.key for j in left)} depend on each other")
        out.append(job)
        done.add(job.key)
        left.remove(job)
    return out


def format_jobs(jobs: Sequence[Job], opts: ClusterOptions, ids: dict[str, str] | None = None,
                program: str = "cog-pl") -> str:
    """The graph as text: one line per job (its id once submitted), what every job gets, then each command."""
    ids = ids or {}
    rows = [(j.key, ids.get(j.key, ""), j.resources(), "after " + ", ".join(j.after) if j.after else "-", j.what)
            for j in jobs]
    head = ("job", "id", "resources", "depends on (afterok)", "makes")
    keep = [i for i in range(len(head)) if i != 1 or ids]
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  " + "  ".join(f"{r[i]!s:<{widths[i]}}" for i in keep).rstrip() for r in [head, *rows]]
    lines += ["", opts.describe(), "", "commands:"]
    lines += [f"  {j.key}: {j.command(program)}" for j in jobs]
    return "\n".join(lines)
