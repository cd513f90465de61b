"""The launcher's command-line options, shared by ``cog-pl run``, ``cog-pl extract`` and ``cog-pl probe protocol``.

The options are one table (:data:`OPTIONS`), used twice: to add them to a command's parser, and to take them out of
a command line (:func:`split_argv`), so that a job runs the user's own command without them (plus ``--stage``).
:class:`ClusterOptions` holds their values; :func:`cluster_options` reads them from parsed arguments and refuses a
launcher option given without ``--launcher``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cog_pl.argtypes import at_least
from cog_pl.errors import CogError

LAUNCHERS = ("slurm", "sbatch-scripts")
#: Set in the environment of every job: a job's command must not submit jobs itself.
JOB_ENV = "COG_PL_CLUSTER_JOB"
DEFAULT_TIME_MIN = 240
DEFAULT_SIGNAL_DELAY_S = 120
DEFAULT_REQUEUES = 5


def time_minutes(text: str) -> int:
    """``--time`` in sbatch's forms (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) as whole minutes, rounded
    up (at least 1), as Slurm's ``time_str2mins`` reads it (src/common/parse_time.c). A field past its unit's range
    after a larger unit (minutes or seconds over 59, hours over 23 after days: ``25:99:99``, ``1-25:00:00``) is
    refused: sbatch would carry it over silently, and a typo would become another limit."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"time {text!r}: use minutes, HH:MM:SS or D-HH:MM:SS")
    days, *parts = match.groups()
    values = [int(p) for p in parts if p is not None]
    if days is None and len(values) < 3:  # minutes, minutes:seconds
        names = ("minutes", "seconds")
        seconds = values[0] * 60 + (values[1] if len(values) == 2 else 0)
    elif days is None:  # hours:minutes:seconds
        names = ("hours", "minutes", "seconds")
        seconds = values[0] * 3600 + values[1] * 60 + values[2]
    else:  # days-hours[:minutes[:seconds]]
        names = ("hours", "minutes", "seconds")
        seconds = int(days) * 86400 + sum(v * u for v, u in zip(values, (3600, 60, 1)))
    limits = {"hours": 23, "minutes": 59, "seconds": 59}
    first = 0 if days is not None else 1  # the leading field of a form without days has no upper bound
    over = [f"{name} {value}" for k, (name, value) in enumerate(zip(names, values))
            if k >= first and value > limits[name]]
    if over:
        d, rest = divmod(seconds, 86400)
        meant = f"{d}-" * bool(d) + f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
        raise argparse.ArgumentTypeError(f"time {text!r}: {' and '.join(over)} out of range (hours 0-23 after days, "
                                         f"minutes and seconds 0-59); sbatch would read it as {meant}: write that if "
                                         "it is meant")
    minutes = (seconds + 59) // 60
    if minutes < 1:
        raise argparse.ArgumentTypeError(f"time {text!r}: at least one minute")
    return minutes


def memory_size(text: str) -> str:
    """``--mem`` as sbatch reads it (Slurm's ``str_to_mbytes``, src/common/proc_args.c): a whole number of megabytes,
    or with a K, M, G or T suffix (either case, an optional B after it); 0 asks for all of each node's memory."""
    if not re.fullmatch(r"\d+(?:[KMGTkmgt][Bb]?)?", text):
        raise argparse.ArgumentTypeError(f"memory {text!r}: use a whole number of megabytes or one with a K, M, G or "
                                         "T suffix, e.g. 64G (0: all of each node's memory)")
    return text


def slurm_name(what: str, many: bool = False) -> Callable[[str], str]:
    """An argparse type for a Slurm name written into every job's ``#SBATCH`` lines (``--partition``,
    ``--account``): letters, digits and ``_ . + -``, no space or shell metacharacter (``many``: a comma-separated
    list, as sbatch's ``--partition`` takes)."""
    word = r"[A-Za-z0-9_.+-]+"

    def parse(text: str) -> str:
        if not re.fullmatch(rf"{word}(?:,{word})*" if many else word, text):
            listed = "; several separated by commas" if many else ""
            raise argparse.ArgumentTypeError(f"{what} {text!r}: a name of letters, digits and _ . + - (no space or "
                                             f"shell character){listed}")
        return text

    return parse


def sbatch_option(text: str) -> tuple[str, str | None]:
    """``--sbatch-option KEY[=VALUE]``: an sbatch option passed to every job (``qos=high``, ``exclusive``); a value
    with whitespace is refused (an ``#SBATCH`` line is split at it)."""
    key, _, value = text.lstrip("-").partition("=")
    if not re.fullmatch(r"[a-z][a-z0-9-]*", key):
        raise argparse.ArgumentTypeError(f"sbatch option {text!r}: use KEY or KEY=VALUE, e.g. qos=high or exclusive")
    if re.search(r"\s", value):
        raise argparse.ArgumentTypeError(f"sbatch option {text!r}: a value without whitespace (an #SBATCH line is "
                                         "split at it)")
    return key, value if "=" in text else None


#: sbatch options that a dedicated option, or cog-pl for each job, sets: an ``--sbatch-option`` of one would
#: override it, or clash with it, unseen; what sets each (sbatch's own mutually exclusive ``--mem``, ``--mem-per-cpu``
#: and ``--mem-per-gpu`` included). sbatch's one-letter forms are in :data:`SHORT_OPTIONS`.
SET_ELSEWHERE: dict[str, str] = {
    "time": "--time", **dict.fromkeys(("mem", "mem-per-cpu", "mem-per-gpu"), "--mem"), "partition": "--partition",
    "account": "--account", "constraint": "--constraint", "cpus-per-task": "--cpus-per-task", "nodes": "--nodes",
    **dict.fromkeys(("gres", "gpus", "gpus-per-node", "gpus-per-task", "ntasks", "ntasks-per-node"),
                    "--gpus-per-node"),  # (one task per GPU)
    "signal": "--signal-delay", **dict.fromkeys(("requeue", "no-requeue"), "--requeues"),
    **dict.fromkeys(("job-name", "array", "output", "open-mode", "chdir", "dependency"), "cog-pl"),
}
#: sbatch's lower-case one-letter options among them (``man sbatch``: -a --array, -c --cpus-per-task, -d
#: --dependency, -n --ntasks, -o --output, -p --partition, -t --time); the upper-case ones (-A, -C, -D, -G, -J, -N)
#: are no ``--sbatch-option`` key.
SHORT_OPTIONS = {"a": "array", "c": "cpus-per-task", "d": "dependency", "n": "ntasks", "o": "output",
                 "p": "partition", "t": "time"}


def check_sbatch_options(options: Sequence[tuple[str, str | None]]) -> None:
    """Refuse an ``--sbatch-option`` that sets what a dedicated option (or cog-pl for each job) sets, naming both."""
    for key, value in options:
        name = SHORT_OPTIONS.get(key, key)
        if name in SET_ELSEWHERE:
            given = key if value is None else f"{key}={value}"
            setter = SET_ELSEWHERE[name]
            fix = f"give {setter} instead" if setter.startswith("--") else "it cannot be given"
            raise CogError(f"--sbatch-option {given}: sets sbatch's --{name}, which {setter} sets for every job; {fix}")


#: (flags, argparse keyword arguments) of every launcher option; ``--launcher`` first.
OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("--launcher",), {"nargs": "+", "metavar": ("slurm|sbatch-scripts", "DIR"), "default": None,
                       "help": "run on a SLURM cluster: slurm submits the jobs through submitit and returns; "
                               "sbatch-scripts DIR writes plain sbatch scripts and a submit.sh (default DIR: "
                               "OUT/slurm/scripts) for clusters where jobs are submitted by hand"}),
    (("--dry-run",), {"action": "store_true", "default": False,
                      "help": "print the jobs, their resources and dependencies; submit nothing"}),
    (("--nodes",), {"type": at_least(1), "default": 1, "help": "nodes of each extraction job (default 1)"}),
    (("--gpus-per-node",), {"type": at_least(0), "default": 1,
                            "help": "GPUs of each extraction node, one srun task (one DDP rank) each; probe and "
                                    "fine-tuning tasks take one; 0: a CPU cluster (default 1)"}),
    (("--cpus-per-task",), {"type": at_least(1), "default": None, "help": "CPUs of each task (default: SLURM's)"}),
    (("--partition",), {"type": slurm_name("partition", many=True), "default": None,
                        "help": "SLURM partition (several: comma-separated)"}),
    (("--account",), {"type": slurm_name("account"), "default": None, "help": "SLURM account"}),
    (("--time",), {"type": time_minutes, "default": DEFAULT_TIME_MIN, "dest": "time_limit", "metavar": "TIME",
                   "help": f"time limit of each job: minutes, HH:MM:SS or D-HH:MM:SS (default {DEFAULT_TIME_MIN} "
                           "min); a job that reaches it is requeued and resumes"}),
    (("--mem",), {"type": memory_size, "default": None,
                  "help": "memory of each node, as sbatch takes it: megabytes, or with a K, M, G or T suffix (e.g. "
                          "64G; 0: all of it)"}),
    (("--constraint",), {"default": None, "help": "SLURM node features the jobs need (e.g. a100)"}),
    (("--sbatch-option",), {"type": sbatch_option, "action": "append", "default": [], "metavar": "KEY[=VALUE]",
                            "help": "any other sbatch option for every job, repeatable (qos=high, exclusive)"}),
    (("--signal-delay",), {"type": at_least(10), "default": DEFAULT_SIGNAL_DELAY_S, "metavar": "SECONDS",
                           "help": "SLURM signals a job this long before its time limit, and it requeues itself "
                                   f"(default {DEFAULT_SIGNAL_DELAY_S})"}),
    (("--requeues",), {"type": at_least(0), "default": DEFAULT_REQUEUES,
                       "help": "times a job that reaches its time limit is requeued (default "
                               f"{DEFAULT_REQUEUES}); a preempted job always is"}),
)


def add_launcher_options(parser: argparse.ArgumentParser, description: str) -> None:
    """The launcher's options as one group of ``parser``."""
    group = parser.add_argument_group("cluster (SLURM)", description)
    for flags, kwargs in OPTIONS:
        group.add_argument(*flags, **kwargs)


def split_argv(argv: Sequence[str], *extra: tuple[tuple[str, ...], dict[str, Any]]
               ) -> tuple[argparse.Namespace, list[str]]:
    """The launcher options (and the ``extra`` ones, given as in :data:`OPTIONS`) of a command line, and the rest of
    it in order: the command a job runs. Abbreviations are matched as the command's own parser matched them (an
    abbreviation it accepted is unique among all its options, so among these too)."""
    parser = argparse.ArgumentParser(add_help=False)
    for flags, kwargs in (*OPTIONS, *extra):
        parser.add_argument(*flags, **{k: v for k, v in kwargs.items() if k not in ("help", "metavar")})
    return parser.parse_known_args(list(argv))


@dataclass(frozen=True)
class ClusterOptions:
    """Where and how the jobs run (the values of :data:`OPTIONS`)."""

    launcher: str = "slurm"
    scripts_dir: Path | None = None  # sbatch-scripts: where they are written (None: OUT/slurm/scripts)
    dry_run: bool = False
    nodes: int = 1
    gpus_per_node: int = 1
    cpus_per_task: int | None = None
    partition: str | None = None
    account: str | None = None
    time_min: int = DEFAULT_TIME_MIN
    mem: str | None = None
    constraint: str | None = None
    sbatch: tuple[tuple[str, str | None], ...] = ()
    signal_delay_s: int = DEFAULT_SIGNAL_DELAY_S
    requeues: int = DEFAULT_REQUEUES

    def __post_init__(self) -> None:
        """The checks of the command-line options, for options made in Python too: what goes into an ``#SBATCH``
        line is what sbatch reads."""
        try:
            for value, parse in ((self.partition, slurm_name("partition", many=True)),
                                 (self.account, slurm_name("account")), (self.mem, memory_size)):
                if value is not None:
                    parse(value)
            for key, value in self.sbatch:
                sbatch_option(key if value is None else f"{key}={value}")
        except argparse.ArgumentTypeError as err:
            raise CogError(str(err)) from None
        check_sbatch_options(self.sbatch)
        if not (isinstance(self.time_min, int) and self.time_min >= 1):
            raise CogError(f"time limit {self.time_min!r}: a whole number of minutes, at least 1")

    @property
    def tasks_per_node(self) -> int:
        """Tasks of an extraction node: one per GPU (Lightning's DDP rank), one on a CPU node."""
        return max(self.gpus_per_node, 1)

    @property
    def task_gpus(self) -> int:
        """GPUs of a probe or fine-tuning task: one on a GPU cluster."""
        return 1 if self.gpus_per_node else 0

    def sbatch_parameters(self) -> dict[str, str | bool]:
        """The sbatch options every job gets besides its own resources (``--key=value``; True: a bare flag)."""
        given = {"partition": self.partition, "account": self.account, "mem": self.mem,
                 "constraint": self.constraint, "cpus-per-task": self.cpus_per_task}
        params: dict[str, str | bool] = {k: str(v) for k, v in given.items() if v is not None}
        params.update({k: True if v is None else v for k, v in self.sbatch})
        return params

    def describe(self) -> str:
        """What every job gets, in two lines."""
        hours, minutes = divmod(self.time_min, 60)
        shared = ", ".join(f"{k} {v}" if v is not True else k for k, v in self.sbatch_parameters().items())
        return (f"every job: time {hours}:{minutes:02d}:00{', ' + shared if shared else ''}\n"
                f"requeued on SLURM's signal {self.signal_delay_s} s before its time limit (up to {self.requeues} "
                "times) and on preemption, resuming from what is finished")


def array_tasks(workers: int | str | None, storage: str | None, out: str | Path, what: str = "tasks"
                ) -> tuple[int, str]:
    """The job array's task count (``--probe-workers``) and the probes' storage under ``--launcher``: ``auto`` is
    refused (SLURM needs a number), the storage defaults to ``out/optuna.journal`` and a SQLite file is refused for
    more than one task (its locks do not hold across nodes). ``what`` names the tasks in the messages."""
    from cog_pl.probe.storage import storage_kind

    if workers == "auto":
        raise CogError(f"--probe-workers auto: under --launcher give the number of {what} of the job array (e.g. "
                       "--probe-workers 16)")
    tasks = int(workers or 1)
    storage = storage or str(Path(out) / "optuna.journal")
    if tasks > 1 and storage_kind(storage) == "sqlite":
        raise CogError(f"--storage {storage}: a SQLite file cannot be shared by {tasks} {what} on several nodes; "
                       "give a database URL (postgresql://...) or a journal file (*.journal, *.log)")
    return tasks, storage


def cluster_options(args: argparse.Namespace) -> ClusterOptions | None:
    """The launcher's options of parsed arguments; None without ``--launcher``, where a launcher option given is
    refused, naming it."""
    defaults = {dest_of(flags, kwargs): kwargs.get("default") for flags, kwargs in OPTIONS}
    if args.launcher is None:
        given = [flags[0] for flags, kwargs in OPTIONS
                 if getattr(args, dest_of(flags, kwargs)) != defaults[dest_of(flags, kwargs)]]
        if given:
            raise CogError(f"{given[0]}: set without --launcher; add --launcher slurm (or sbatch-scripts DIR)")
        return None
    name, *rest = args.launcher
    if name not in LAUNCHERS:
        raise CogError(f"--launcher {name!r}: choose slurm or sbatch-scripts DIR")
    if name == "slurm" and rest:
        raise CogError(f"--launcher slurm takes no folder (got {' '.join(rest)}); sbatch-scripts DIR does")
    if len(rest) > 1:
        raise CogError(f"--launcher sbatch-scripts takes one folder, got {' '.join(rest)}")
    if rest and Path(rest[0]).exists() and not Path(rest[0]).is_dir():
        raise CogError(f"--launcher sbatch-scripts {rest[0]}: a file, not a folder; name a folder for the scripts "
                       "(made where missing)")
    return ClusterOptions(launcher=name, scripts_dir=Path(rest[0]) if rest else None, dry_run=args.dry_run,
                          nodes=args.nodes, gpus_per_node=args.gpus_per_node, cpus_per_task=args.cpus_per_task,
                          partition=args.partition, account=args.account, time_min=args.time_limit, mem=args.mem,
                          constraint=args.constraint, sbatch=tuple(args.sbatch_option),
                          signal_delay_s=args.signal_delay, requeues=args.requeues)


def dest_of(flags: tuple[str, ...], kwargs: dict[str, Any]) -> str:
    """The attribute argparse stores an option in."""
    return kwargs.get("dest") or flags[0].lstrip("-").replace("-", "_")
