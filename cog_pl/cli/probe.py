"""``cog-pl probe``: tune and test linear probes on extracted features.

``tune`` runs one tuned probe (one seed, all data or N shots) and prints its result row as the last line; ``knn``
the same for the weighted k-NN classifier (:mod:`cog_pl.probe.knn_protocol`);
``protocol`` runs a domain's seeds x shots grid into a results file. ``fit``, ``validate`` and ``test`` are listed
here and run by a LightningCLI with a YAML config (``configs/probe/``; :mod:`cog_pl.cli.probe_lightning`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

from cog_pl.cli.options import add_deprecated_alias, add_no_longer_needed
from cog_pl.errors import CogError
from cog_pl.protocol import ProbeProtocol

log = logging.getLogger(__name__)


#: The command-line option of each protocol, search-plan and grid field (errors name the option a user typed).
OPTION_OF_FIELD = {"trials": "--trials", "epochs": "--epochs", "batch_size": "--batch-size",
                   "trial_batch": "--trial-batch", "stale_after": "--stale-after", "seeds": "--seeds",
                   "shots": "--shots", "variant_seeds": "--variant-seeds", "finetune_seeds": "--finetune-seeds"}


def option_error(err: CogError) -> CogError:
    """``err`` (of its own kind) with the field names it mentions written as the options that set them
    (``trial_batch`` -> ``--trial-batch``)."""
    text = str(err)
    for name, option in OPTION_OF_FIELD.items():
        text = re.sub(rf"(?<![\w-]){name}\b", option, text)
    return type(err)(text)


def _protocol(args: argparse.Namespace) -> ProbeProtocol:
    try:
        return replace(ProbeProtocol(), trials=args.trials, epochs=args.epochs, batch_size=args.batch_size)
    except CogError as err:
        raise option_error(err) from None


def _plan(args: argparse.Namespace):
    from cog_pl.probe.tuner import SearchPlan

    given = {"trial_batch": args.trial_batch, "stale_after": args.stale_after, "precision": args.precision}
    try:
        return SearchPlan(mode="exact" if args.exact else "fast", **{k: v for k, v in given.items() if v is not None})
    except CogError as err:
        raise option_error(err) from None


def _check_grid(seeds, shots) -> None:
    from cog_pl.protocol import check_grid

    try:
        check_grid(seeds, shots)
    except CogError as err:
        raise option_error(err) from None


def _shots(text: str) -> int | None:
    """A ``--shots`` value of ``probe protocol``: ``all`` or an integer (checked with the other values)."""
    if text.lower() == "all":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"shot value {text!r}: use 'all' or a positive integer") from None


def workers_value(text: str) -> int | str:
    """A ``--probe-workers`` value: ``auto`` or a count of at least 1."""
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"workers value {text!r}: use 'auto' or a count of at least 1")
    return int(text)


def _device(name: str) -> str:
    from cog_pl.device import resolve_device

    return str(resolve_device(name))


def _setup(args: argparse.Namespace) -> None:
    """Threads and logging of the probe commands; refuses a bad numeric option before any work."""
    if args.threads < 0:
        raise CogError(f"--threads must be at least 0 (0: torch's default), got {args.threads}")
    _protocol(args), _plan(args)
    if args.probe_command == "tune":
        if args.seed < 0 or (args.shots is not None and args.shots < 1):
            raise CogError(f"--seed must be at least 0 and --shots at least 1, got --seed {args.seed} --shots "
                           f"{args.shots}")
    else:
        _check_grid(args.seeds or ProbeProtocol().seeds, args.shots or ())
    import optuna
    import torch

    logging.getLogger("alembic").setLevel(logging.WARNING)  # as Optuna sets it: a database storage's imports log

    if args.threads:
        torch.set_num_threads(args.threads)
    optuna.logging.set_verbosity(optuna.logging.DEBUG if args.verbose else optuna.logging.WARNING)


def _tune(args: argparse.Namespace) -> int:
    _setup(args)
    from cog_pl.features.pair import open_pair
    from cog_pl.probe.cell import METHOD, Splits, probe, study_name

    if args.results:
        from cog_pl.results import check_results_file

        check_results_file(args.results)  # before the work, not after
    protocol = _protocol(args)
    device = _device(args.device)
    plan = _plan(args)
    pair = _vectors(open_pair(args.features, allow_class_mismatch=args.allow_class_mismatch), METHOD)
    model, domain = pair.names(args.model, args.domain)  # the store's meta names them; folder names where it does not
    splits = Splits.for_probes(pair, device, protocol, plan)
    storage = args.storage or Path(args.workdir) / "optuna.db"
    if args.results:
        _refuse_other_row(args.results, (model, METHOD, domain, args.shots, args.seed), splits, protocol, plan,
                          device, args.overwrite)
    name = args.study_name or study_name(model, domain, args.shots, args.seed, protocol, plan, device,
                                         splits.features)
    with _claimed(args.results or Path(args.workdir) / "probe-tune", f"study {name}", plan):  # its one writer
        row = probe(splits, seed=args.seed, shots=args.shots, storage=storage, model=model, domain=domain,
                    protocol=protocol, plan=plan, device=device, name=name, flush_denormal=not args.keep_denormals)
    if args.results:
        from cog_pl.results import append_row

        append_row(args.results, row)
    print(json.dumps(row, sort_keys=True, default=str), flush=True)  # unstored predictions: a count
    return 0


@contextlib.contextmanager
def _claimed(beside: Path, cell: str, plan):
    """Hold ``cell`` in the claims file beside ``beside`` while the block runs, waiting while another process holds
    it: two ``probe tune`` of one study take turns, the second finding it tuned."""
    from cog_pl.results.claims import claim, heartbeat, release

    if (held := claim(beside, cell, plan.stale_after)) is None:
        log.info("%s is held by another worker; waiting for it", cell)
    while held is None:
        time.sleep(1.0)
        held = claim(beside, cell, plan.stale_after)
    try:
        with heartbeat(held, plan.renew_every):
            yield
    finally:
        release(held)


def _refuse_other_row(results: Path, key: tuple, splits, protocol, plan, device, overwrite: bool) -> None:
    """A row of the cell made with other inputs is refused before any work (``--overwrite``: replaced), as the
    grid does; one made with the same inputs is made again and replaced by an equal row."""
    from cog_pl.results.identity import cells_todo, wanted

    model, method, domain, shots, seed = key
    cells_todo(results, model=model, method=method, domain=domain, seeds=[seed], shots=[shots], overwrite=overwrite,
               want=wanted(splits.features, protocol, plan.as_record(), plan.precision_on(device)))


def _protocol_cmd(args: argparse.Namespace) -> int:
    from cog_pl.pipeline.cluster.options import cluster_options

    cluster = cluster_options(args)
    _setup(args)
    if cluster is not None:
        return _launch_protocol(args, cluster)
    from cog_pl.evaluate.runner import run_on_stores

    shots = None if args.shots is None else tuple(args.shots)
    storage = str(args.storage or Path(args.workdir) / "optuna.db")
    grid = {"model": args.model, "domain": args.domain, "storage": storage,
            "protocol": _protocol(args), "plan": _plan(args), "seeds": tuple(args.seeds) if args.seeds else None,
            "shots": shots, "device": _device(args.device), "overwrite": args.overwrite,
            "allow_class_mismatch": args.allow_class_mismatch}
    rows = run_on_stores("linear", args.features, args.results, workers=args.workers, threads=args.threads,
                         show=lambda line: print(line, file=sys.stderr, flush=True), **grid)
    print(json.dumps({"rows_written": len(rows), "results": str(args.results)}), flush=True)
    return 0


def _launch_protocol(args: argparse.Namespace, cluster) -> int:
    """``probe protocol --launcher``: the grid as a SLURM job array of ``--probe-workers`` tasks, each one worker that
    claims a cell before tuning it, all on one storage and one results file."""
    from cog_pl.features.pair import open_pair
    from cog_pl.pipeline.cluster.jobs import Job
    from cog_pl.pipeline.cluster.launch import launch
    from cog_pl.pipeline.cluster.options import array_tasks, split_argv
    from cog_pl.probe.cell import METHOD

    tasks, storage = array_tasks(args.workers, args.storage, args.workdir)
    pair = open_pair(args.features)
    model, domain = args.model or pair.model, args.domain or pair.domain
    seeds, shots = ProbeProtocol().grid(args.seeds or None, args.shots)
    rows = tuple((model, METHOD, domain, n, seed) for seed in seeds for n in shots)
    words = args.command_line[args.command_line.index("protocol") + 1:]
    _, rest = split_argv(words, (("--probe-workers", "--workers"), {}), (("--storage",), {}))
    job = Job(f"probe/{model}/{domain}", "probe",
              ("probe", "protocol", *rest, "--storage", storage),
              what=f"{len(rows)} rows: linear on {len(seeds)} seeds x {len(shots)} shot settings",
              gpus_per_node=cluster.task_gpus, array=tasks, rows=rows)
    return launch([job], cluster, Path(args.results).resolve().parent, results=Path(args.results).resolve(),
                  entry=args.entry)


def _knn(args: argparse.Namespace) -> int:
    """One k-NN cell (k chosen on validation, then tested); its row is the last line."""
    if args.seed < 0 or (args.shots is not None and args.shots < 1):
        raise CogError(f"--seed must be at least 0 and --shots at least 1, got --seed {args.seed} --shots "
                       f"{args.shots}")
    import torch

    from cog_pl.features.pair import open_pair
    from cog_pl.probe.knn import KNNSettings
    from cog_pl.probe.knn_protocol import knn_rows, launched_group, resolve_knn_precision

    settings = KNNSettings(ks=tuple(args.ks), temperature=args.temperature)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.results:
        from cog_pl.results import check_results_file

        check_results_file(args.results)
    device = torch.device(_device(args.device))
    if device.type == "cuda" and args.device == "auto" and "LOCAL_RANK" in os.environ:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # torchrun: one GPU a rank
    group = launched_group(device)
    pair = _vectors(open_pair(args.features, allow_class_mismatch=args.allow_class_mismatch), "knn")
    model, domain = pair.names(args.model, args.domain)
    (row,) = knn_rows(pair, [(args.shots, args.seed)], model=model, domain=domain, protocol=ProbeProtocol(),
                      settings=settings, device=device, precision=resolve_knn_precision(args.precision, device),
                      group=group)
    if group is not None and _rank() != 0:
        return 0
    if args.results:
        from cog_pl.results import append_row

        append_row(args.results, row)
    print(json.dumps(row, sort_keys=True, default=str), flush=True)  # unstored predictions: a count
    return 0


def _vectors(pair, method: str):
    """``pair``, refused in one line when it holds token stores, naming the methods that take them (the method
    table's: :func:`cog_pl.evaluate.token_methods`)."""
    from cog_pl.evaluate import token_methods
    from cog_pl.features.pair import vectors_only

    return vectors_only(pair, method, ", ".join(token_methods()))


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank()


#: ``--allow-class-mismatch``'s help (:func:`cog_pl.features.pair.open_pair`).
ALLOW_CLASS_MISMATCH = ("probe a train and a test store without meta.json whose class counts differ (otherwise "
                        "refused); test labels the train split never has count as errors")


#: ``--stale-after``'s help, in ``probe`` and ``run`` (:mod:`cog_pl.results.claims`).
STALE_AFTER_HELP = ("seconds without a heartbeat after which a worker's claim on a cell is taken over (default 120); "
                    "a claim whose process no longer runs on this machine is taken over at once")


def _features(p: argparse.ArgumentParser) -> None:
    p.add_argument("--features", required=True, help="directory with train/ and test/ (features.npy, labels.npy)")
    p.add_argument("--allow-class-mismatch", action="store_true", help=ALLOW_CLASS_MISMATCH)


def _common(p: argparse.ArgumentParser) -> None:
    defaults = ProbeProtocol()
    _features(p)
    p.add_argument("--trials", type=int, default=defaults.trials)
    p.add_argument("--epochs", type=int, default=defaults.epochs)
    p.add_argument("--batch-size", type=int, default=defaults.batch_size)
    p.add_argument("--exact", action="store_true", help="trials one at a time, validation every epoch (published)")
    # search options default to SearchPlan's values (None here: the parser is built without importing torch)
    p.add_argument("--trial-batch", type=int, help="trials per batch after TPE's startup (fast mode; default 5)")
    p.add_argument("--storage", help="Optuna storage: database URL, journal file (*.log) or SQLite file path")
    p.add_argument("--workdir", default="cog_probe_runs", help="where the default SQLite storage lives")
    p.add_argument("--stale-after", type=float, help=STALE_AFTER_HELP)
    add_deprecated_alias(p, "--device", p.add_argument("--probe-device", dest="device", default="auto",
                                                       help="auto, cpu, cuda, cuda:1, ..."))
    add_deprecated_alias(p, "--precision", p.add_argument(
        "--probe-precision", dest="precision", choices=("auto", "32-true", "bf16-mixed"),
        help="matrix products in bfloat16 (bf16-mixed) or float32; auto: bfloat16 in fast mode where the device runs "
             "it fast (GPUs, CPUs with AMX/AVX512-BF16), float32 in exact mode"))
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--keep-denormals", action="store_true", help="do not flush subnormal floats on the CPU")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("probe", help="tune and test linear probes on features")
    add_subcommands(parser)


def add_subcommands(parser: argparse.ArgumentParser) -> None:
    """The ``tune``, ``protocol``, ``fit``, ``test`` and ``validate`` subcommands."""
    sub = parser.add_subparsers(dest="probe_command", metavar="SUBCOMMAND", required=True)

    tune = sub.add_parser("tune", help="one tuned probe: search (lr, wd), retrain on all train data, test")
    _common(tune)
    tune.add_argument("--seed", type=int, default=ProbeProtocol().seeds[0])
    tune.add_argument("--shots", type=int, help="N images per concept (default: all)")
    tune.add_argument("--model", help="model name in the result (default: the store's meta, else the parent "
                                       "directory's name)")
    tune.add_argument("--domain", help="domain name in the result (default: the store's meta, else the directory's "
                                        "name)")
    tune.add_argument("--study-name", help="Optuna study name (default: derived from the cell and protocol)")
    tune.add_argument("--results", type=Path, help="also add the row to this results store (SQLite)")
    tune.add_argument("--overwrite", action="store_true",
                      help="replace the results store's row of this cell when it was made with other inputs "
                           "(otherwise refused)")
    tune.set_defaults(func=_tune)

    grid = sub.add_parser("protocol", help="all seeds x shots of one domain into a results file")
    _common(grid)
    grid.add_argument("--model", help="default: the store's meta, else the parent directory's name")
    grid.add_argument("--domain", help="default: the store's meta, else the directory's name")
    grid.add_argument("--results", type=Path, required=True, help="results store (SQLite; resumable)")
    grid.add_argument("--overwrite", action="store_true",
                      help="make again and replace rows that were made with other inputs (another protocol, search "
                           "or feature store), which are otherwise refused")
    grid.add_argument("--seeds", type=int, nargs="*", help="default: the protocol's five seeds")
    grid.add_argument("--shots", nargs="*", type=_shots, help="N values and/or 'all' (default: all, 1, 2, ..., 128)")
    add_deprecated_alias(grid, "--workers", grid.add_argument(
        "--probe-workers", dest="workers", type=workers_value, metavar="N|auto",
        help="run the grid with N worker processes on this machine (auto: one per GPU, else one per few cores), each "
             "cell tuned by one worker, --threads per worker (default: the cores split); with --launcher: N tasks of "
             "a SLURM job array; default: this process alone"))
    add_no_longer_needed(grid, "--claim-cells", "every probe worker claims each cell before tuning it")
    from cog_pl.pipeline.cluster.options import add_launcher_options

    add_launcher_options(grid, "the grid as a SLURM job array of --probe-workers tasks (docs/cluster.md), sharing "
                               "--storage (default with --launcher: WORKDIR/optuna.journal) and --results")
    grid.set_defaults(func=_protocol_cmd)

    knn = sub.add_parser("knn", help="one weighted k-NN classifier: k chosen on validation, tested (no training)")
    _features(knn)
    knn.add_argument("--seed", type=int, default=ProbeProtocol().seeds[0], help="the validation split's and the "
                     "N-shot samples' seed (the linear probe's samples for the same seed)")
    knn.add_argument("--shots", type=int, help="N images per concept (default: all)")
    knn.add_argument("--ks", type=int, nargs="+", default=[10, 20, 100, 200], help="k values tried on validation")
    knn.add_argument("--temperature", type=float, default=0.07, help="votes weigh exp(similarity / T)")
    add_deprecated_alias(knn, "--device", knn.add_argument(
        "--probe-device", dest="device", default="auto",
        help="auto, cpu, cuda, cuda:1, ... (under torchrun: a GPU a rank, the train features sharded over the ranks)"))
    add_deprecated_alias(knn, "--precision", knn.add_argument(
        "--probe-precision", dest="precision", choices=("auto", "32-true", "bf16-mixed", "64-true"), default="auto",
        help="the similarity product's inputs; auto: bfloat16 where the device does it fast"))
    knn.add_argument("--model", help="model name in the result (default: the store's meta, else the parent "
                                      "directory's name)")
    knn.add_argument("--domain", help="domain name in the result (default: the store's meta, else the directory's "
                                       "name)")
    knn.add_argument("--results", type=Path, help="also add the row to this results store (SQLite)")
    knn.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    knn.set_defaults(func=_knn)

    for name in ("fit", "validate", "test"):  # listed here, run by cog_pl.cli.probe_lightning (cog_pl.cli.main)
        sub.add_parser(name, add_help=False,
                       help=f"LightningCLI {name} of LinearProbe (--config NAME of a packaged config, or a YAML "
                            f"file; see {name} --help)")
