"""The SLURM launcher without SLURM: the job graph of a full evaluation (the one docs/cluster.md shows), the command a
job runs, the options refused in one line, the plain sbatch scripts, the status of a recorded submission, and the
probe grid's claimed cells that several machines share."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from cog_pl.cli.main import main
from cog_pl.pipeline.cluster.jobs import Job, format_jobs, ordered
from cog_pl.pipeline.cluster.ledger import TaskState, read_ledger, submitted_ids, write_ledger
from cog_pl.pipeline.cluster.options import ClusterOptions, split_argv, time_minutes
from cog_pl.pipeline.cluster.scripts import write_scripts

REPO = Path(__file__).resolve().parents[2]
#: The full-size evaluation of docs/cluster.md: 6 domains, 270 cells, 2 nodes x 8 GPUs, 16 probe tasks.
FULL = ("run --model dino --checkpoint {t}/shared/models/dino_resnet50_pretrain.pth --in1k-root {t}/data/in1k "
        "--in21k-root {t}/data/in21k --out {t}/shared/cog/dino --precision bf16-mixed --decode gpu "
        "--launcher slurm --nodes 2 --gpus-per-node 8 --cpus-per-task 12 --mem 480G --partition gpu "
        "--account vision --time 6:00:00 --probe-workers 16 --storage postgresql://cog@db.internal/optuna --dry-run")


def _roots(tmp_path: Path) -> None:
    for sub in ("data/in1k", "data/in21k", "shared/models"):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
    from cog_pl.models.records import record_download

    for model, name in (("dino", "dino_resnet50_pretrain.pth"), ("swav", "swav_800ep_pretrain.pth.tar")):
        (tmp_path / "shared/models" / name).write_bytes(model.encode())
        record_download(tmp_path / "shared/models" / name, model, name)  # fetched by cog-pl models download: the
        # paper's file, labelled with the paper's name


def _dry_run(tmp_path: Path, capsys, command: str = FULL) -> str:
    _roots(tmp_path)
    assert main(command.format(t=tmp_path).split()) == 0, capsys.readouterr().err
    return capsys.readouterr().out.replace(str(tmp_path), "")


def test_the_full_evaluation_is_four_jobs_on_2_nodes_of_8_gpus(tmp_path, capsys):
    out = _dry_run(tmp_path, capsys)
    assert out.startswith("dry run: 4 jobs, nothing submitted")
    table = {line.split()[0]: line for line in out.splitlines()[3:7]}
    assert "2 nodes x 8 tasks, 8 GPUs a node" in table["extract/dino"] and "after check" in table["extract/dino"]
    assert "array of 16 tasks, 1 GPU each" in table["probe/dino"] and "after extract/dino" in table["probe/dino"]
    assert "270 rows: linear on 5 seeds x 9 shot settings x 6 domains" in table["probe/dino"]
    assert "after probe/dino" in table["report"]
    commands = dict(line.strip().split(": ", 1) for line in out.split("commands:\n")[1].splitlines())
    assert commands["extract/dino"].endswith("--stage extract --num-nodes 2 --devices 8 --accelerator gpu "
                                             "--strategy ddp")
    assert commands["probe/dino"].endswith("--stage probe --storage postgresql://cog@db.internal/optuna")
    assert all("--launcher" not in c and "--probe-workers" not in c and "--nodes" not in c for c in commands.values())
    assert "time 6:00:00, partition gpu, account vision, mem 480G, cpus-per-task 12" in out


def test_the_docs_show_the_dry_run_of_the_full_evaluation(tmp_path, capsys):
    """docs/cluster.md's graph is this command's output, word for word."""
    docs = (REPO / "docs" / "cluster.md").read_text()
    shown = re.search(r"<!-- dry-run -->\n```text\n(.*?)```", docs, re.S)
    assert shown, "docs/cluster.md lost its dry-run block"
    assert _dry_run(tmp_path, capsys).strip() == shown.group(1).strip()


def test_a_study_of_many_models_is_one_extraction_and_one_probe_array_per_model(tmp_path, capsys):
    command = FULL.replace("--model dino --checkpoint {t}/shared/models/dino_resnet50_pretrain.pth",
                           "--model dino swav --checkpoint {t}/shared/models/dino_resnet50_pretrain.pth "
                           "{t}/shared/models/swav_800ep_pretrain.pth.tar")
    out = _dry_run(tmp_path, capsys, command.replace("/cog/dino", "/cog/study"))
    table = [line.split()[0] for line in out.splitlines()[3:9]]
    assert table == ["check", "extract/dino", "probe/dino", "extract/swav", "probe/swav", "report"]
    assert "after probe/dino, probe/swav" in out


def test_a_job_runs_the_command_without_the_launchers_options():
    given, rest = split_argv(["--model", "m", "--launch", "slurm", "--nodes=2", "--out", "o", "--sbatch-option",
                              "qos=high", "--dry-run", "--seeds", "1", "2"], (("--model",), {"nargs": "+"}))
    assert rest == ["--out", "o", "--seeds", "1", "2"]  # in order; an abbreviation the command took is taken out
    assert given.launcher == ["slurm"] and given.nodes == 2 and given.dry_run and given.model == ["m"]
    assert given.sbatch_option == [("qos", "high")]


@pytest.mark.parametrize(("text", "minutes"), [("30", 30), ("2:30", 3), ("4:00:00", 240), ("1-0", 1440),
                                               ("1-2:30", 1590), ("0-0:0:30", 1)])
def test_time_limits_in_sbatchs_forms(text, minutes):
    assert time_minutes(text) == minutes


@pytest.mark.parametrize(("extra", "message"), [
    (["--nodes", "2"], "--nodes: set without --launcher; add --launcher slurm"),
    (["--launcher", "pbs"], "--launcher 'pbs': choose slurm or sbatch-scripts DIR"),
    (["--launcher", "slurm", "x"], "--launcher slurm takes no folder"),
    (["--launcher", "slurm", "--probe-workers", "auto"], "--probe-workers auto: under --launcher give the number"),
    (["--launcher", "slurm", "--probe-workers", "4", "--storage", "s.db"],
     "a SQLite file cannot be shared by 4 probe tasks on several nodes"),
    (["--launcher", "slurm", "--gpus-per-node", "8", "--devices", "4"], "--devices 4: under --launcher"),
    (["--launcher", "slurm", "--gpus-per-node", "0", "--accelerator", "gpu"], "--accelerator gpu: under --launcher"),
    (["--launcher", "slurm", "--methods", "linear", "finetune", "--finetune-devices", "2"],
     "--finetune-devices 2: under --launcher"),
    (["--model", "dino", "swav"], "--model: several models need --launcher"),
    (["--checkpoint", "a.pth", "b.pth"], "--checkpoint: 2 file(s) for 1 model(s)"),
])
def test_launcher_options_that_cannot_work_are_refused_in_one_line(tmp_path, capsys, extra, message):
    _roots(tmp_path)
    argv = ["run", "--in1k-root", str(tmp_path / "data/in1k"), "--in21k-root", str(tmp_path / "data/in21k"), "--out",
            str(tmp_path / "out"), *([] if "--model" in extra else ["--model", "dino"]), *extra, "--random-weights",
            *(["--dry-run"] if "--launcher" in extra else [])]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("cog-pl run: error: ") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("text", "said"), [
    ("25:99:99", "minutes 99 and seconds 99 out of range (hours 0-23 after days, minutes and seconds 0-59); sbatch "
                 "would read it as 1-02:40:39"),
    ("1-25:00:00", "hours 25 out of range (hours 0-23 after days, minutes and seconds 0-59); sbatch would read it as "
                   "2-01:00:00"),
    ("5:60", "seconds 60 out of range"), ("2-0:60", "minutes 60 out of range"), ("0", "at least one minute")])
def test_a_time_field_past_its_range_is_refused_not_carried(text, said):
    """Issue 47, item 7: sbatch (Slurm's time_str2secs) carries a field past its range into the next unit; a typo
    would become another limit. The leading field of a form without days has no bound (``48:00:00``, ``90:30``)."""
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"time {text!r}: {said}")):
        time_minutes(text)
    assert (time_minutes("48:00:00"), time_minutes("90:30"), time_minutes("1-23:59:59")) == (2880, 91, 2880)


def test_slurm_names_memory_and_sbatch_options_are_checked_as_sbatch_reads_them():
    """Issue 47, item 7: a partition or account that is empty or holds a space or a shell character, a memory size
    sbatch cannot read (Slurm's str_to_mbytes: digits, a K/M/G/T suffix, an optional B; 0 is all of it), and an
    ``--sbatch-option`` that sets what a dedicated option (or cog-pl for each job) sets: refused, also for options
    made in Python; what sbatch reads is taken as given."""
    import argparse

    from cog_pl.errors import CogError
    from cog_pl.pipeline.cluster.options import memory_size, slurm_name

    partition = slurm_name("partition", many=True)
    assert [partition(p) for p in ("gpu", "gpu,cpu", "a100-80g")] == ["gpu", "gpu,cpu", "a100-80g"]
    for bad in ("", "a b", "gpu;rm -rf ~", "gpu,", "$(id)"):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"partition {bad!r}: a name of letters")):
            partition(bad)
    assert [memory_size(m) for m in ("64G", "512", "0", "1tb", "100m")] == ["64G", "512", "0", "1tb", "100m"]
    for bad in ("abc", "-5", "64 G", "1.5G", "64GiB"):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"memory {bad!r}: use a whole number")):
            memory_size(bad)
    assert ClusterOptions(partition="gpu", mem="64G", sbatch=(("qos", "high"), ("exclusive", None))).partition == "gpu"
    for kw, said in (({"partition": "a b"}, "partition 'a b'"), ({"mem": "lots"}, "memory 'lots'"),
                     ({"account": "x;y"}, "account 'x;y'"),
                     ({"sbatch": (("time", "5"),)}, "--sbatch-option time=5: sets sbatch's --time, which --time "
                                                    "sets for every job; give --time instead"),
                     ({"sbatch": (("p", "gpu"),)}, "--sbatch-option p=gpu: sets sbatch's --partition"),
                     ({"sbatch": (("mem-per-cpu", "4G"),)}, "sets sbatch's --mem-per-cpu, which --mem sets"),
                     ({"sbatch": (("requeue", None),)}, "--sbatch-option requeue: sets sbatch's --requeue, which "
                                                        "--requeues sets"),
                     ({"sbatch": (("output", "x.log"),)}, "which cog-pl sets for every job; it cannot be given"),
                     ({"sbatch": (("comment", "a\nb"),)}, "a value without whitespace")):
        with pytest.raises(CogError, match=re.escape(said)):
            ClusterOptions(**kw)


def test_a_time_limit_sbatch_cannot_read_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--model", "dino", "--launcher", "slurm", "--time", "soon"])
    assert "time 'soon': use minutes, HH:MM:SS or D-HH:MM:SS" in capsys.readouterr().err


def test_a_probe_stage_without_its_stores_is_refused_naming_the_first(tmp_path, capsys):
    argv = ["run", "--model", "resnet50", "--in21k-root", str(tmp_path), "--domains", "cog_l2", "--out",
            str(tmp_path / "out"), "--stage", "probe", "--random-weights"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "feature store" in err and "cog_l2/train is not complete (2 of 2 are not): run the extract stage" in err


def _graph() -> list[Job]:
    return [Job("report", "report", ("run", "--stage", "report"), after=("probe/m",), files=("o/report/report.md",)),
            Job("probe/m", "probe", ("run", "--stage", "probe", "--storage", "postgresql://u:secret@h/db"),
                array=3, after=("extract/m",), rows=(("m", "linear", "d", None, 22),)),
            Job("extract/m", "extract", ("run", "--stage", "extract"), nodes=2, tasks_per_node=4, gpus_per_node=4,
                stores=("o/features/m/d/train",))]


def test_jobs_are_ordered_after_what_they_depend_on_and_passwords_hidden():
    jobs = ordered(_graph())
    assert [j.key for j in jobs] == ["extract/m", "probe/m", "report"]
    text = format_jobs(jobs, ClusterOptions())
    assert "postgresql://u:***@h/db" in text and "secret" not in text
    with pytest.raises(ValueError, match="depends on unknown job"):
        ordered([Job("a", "probe", (), after=("b",))])


def test_plain_scripts_pass_dependencies_and_requeue_on_the_signal(tmp_path):
    jobs = ordered(_graph())
    opts = ClusterOptions(launcher="sbatch-scripts", partition="gpu", sbatch=(("qos", "high"), ("exclusive", None)),
                          signal_delay_s=90, requeues=2)
    paths = write_scripts(jobs, opts, tmp_path / "s", tmp_path / "logs", tmp_path / "rec.tsv", tmp_path)
    assert [p.name for p in paths] == ["01-cog-extract-m.sbatch", "02-cog-probe-m.sbatch", "03-cog-report.sbatch",
                                       "submit.sh"]
    for path in paths:
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, path
    extract, probe = paths[0].read_text(), paths[1].read_text()
    for flag in ("--nodes=2", "--ntasks-per-node=4", "--gpus-per-node=4", "--partition=gpu", "--qos=high",
                 "--exclusive", "--requeue", "--signal=B:USR2@90", f"--chdir={tmp_path}"):
        assert f"#SBATCH {flag}\n" in extract
    assert "#SBATCH --array=0-2\n" in probe and "MAX_REQUEUES=2" in probe and "trap requeue USR2" in probe
    assert "postgresql://u:secret@h/db" in probe  # the job needs it
    submit = paths[-1].read_text().splitlines()
    assert submit[-3:] == ["job1=$(submit extract/m 01-cog-extract-m.sbatch)",
                           'job2=$(submit probe/m 02-cog-probe-m.sbatch "$job1")',
                           'job3=$(submit report 03-cog-report.sbatch "$job2")']


def test_a_fake_sbatch_shows_what_submit_sh_records(tmp_path):
    """submit.sh run against an sbatch that only prints ids: each job's id lands in the record, and each job is
    given its dependencies' ids."""
    jobs = ordered(_graph())
    paths = write_scripts(jobs, ClusterOptions(launcher="sbatch-scripts"), tmp_path / "s", tmp_path / "logs",
                          tmp_path / "o" / "slurm" / "submitted.tsv", tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text('#!/bin/bash\necho "$@" >> "$(dirname "$0")/calls"\n'
                                    'n=$(wc -l < "$(dirname "$0")/calls"); echo "$((100 + n));cluster"\n')
    (bin_dir / "sbatch").chmod(0o755)
    done = subprocess.run(["bash", str(paths[-1])], capture_output=True, text=True,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    calls = (bin_dir / "calls").read_text().splitlines()
    assert calls == ["--parsable 01-cog-extract-m.sbatch", "--parsable --dependency=afterok:101 02-cog-probe-m.sbatch",
                     "--parsable --dependency=afterok:102 03-cog-report.sbatch"]
    write_ledger(tmp_path / "o", "sbatch-scripts", jobs, {}, {})
    assert submitted_ids(tmp_path / "o", read_ledger(tmp_path / "o")) == {"extract/m": "101", "probe/m": "102",
                                                                          "report": "103"}


def test_status_shows_each_jobs_state_progress_and_the_error_of_a_failed_one(tmp_path, monkeypatch):
    import cog_pl.pipeline.cluster.status as status

    root = tmp_path / "o"
    store = root / "features/m/d/train"
    store.mkdir(parents=True)
    (store / "meta.json").write_text("{}")
    jobs = [Job("extract/m", "extract", (), stores=(str(store), str(root / "features/m/d/test"))),
            Job("probe/m", "probe", (), array=2, rows=(("m", "linear", "d", None, 22), ("m", "linear", "d", 2, 22))),
            Job("report", "report", (), files=(str(root / "report/report.md"),))]
    logs = tmp_path / "logs"
    (logs / "11_1").mkdir(parents=True)
    (logs / "11_1" / "11_1_0_log.err").write_text("Traceback ...\ncog-pl run: error: the disk is full\nsubmitit x\n")
    write_ledger(root, "slurm", jobs, {"extract/m": "10", "probe/m": "11", "report": "12"},
                 {j.key: str(logs / "%j" / "%j_0_log.err") for j in jobs})
    states = {"10": [TaskState("10", "RUNNING", "None", "0:12:03")],
              "11": [TaskState("11_0", "PENDING", "Dependency"), TaskState("11_1", "FAILED")], "12": []}
    monkeypatch.setattr(status, "job_states", lambda ids: {i: states[i] for i in ids})
    text = status.status_text(root)
    lines = {line.split()[0]: line for line in text.splitlines()[1:] if line.strip()}
    assert "job 10" in lines["extract/m"] and "RUNNING 0:12:03" in lines["extract/m"]
    assert "1/2 stores complete" in lines["extract/m"]
    assert "PENDING (Dependency) x1, FAILED x1" in lines["probe/m"] and "0/2 rows" in lines["probe/m"]
    assert "cog-pl run: error: the disk is full" in text
    assert "ended (SLURM no longer holds it)" in lines["report"] and "report.md not written yet" in lines["report"]


def test_claimed_cells_are_tuned_by_one_worker_alone(tmp_path):
    """A worker never tunes a cell another live worker holds (on another machine): it makes the others, waits, and
    tunes the held one only once its claim is released."""
    import optuna
    from test_probe_fixtures import write_features

    from cog_pl.evaluate.runner import run_on_stores
    from cog_pl.probe.tuner import SearchPlan
    from cog_pl.protocol import ProbeProtocol
    from cog_pl.results import has_row
    from cog_pl.results.claims import claim, release

    features = write_features(tmp_path / "m" / "d", classes=3, dim=8, per_class=20, test_per_class=4)
    results, storage = tmp_path / "r.sqlite", tmp_path / "s.db"
    held = ("m", "linear", "d", None, 22)
    elsewhere = claim(results, "m/linear/d/shots=all/seed=22", stale_after=3600, worker="other")
    assert elsewhere is not None
    made: list = []
    worker = threading.Thread(target=lambda: made.extend(run_on_stores("linear",
        features, results, storage=storage, protocol=ProbeProtocol(trials=2, epochs=2),
        plan=SearchPlan(startup_trials=2), seeds=(22,), shots=(None, 2), device="cpu")))
    worker.start()
    deadline = time.monotonic() + 120
    while not has_row(results, ("m", "linear", "d", 2, 22)) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)  # a poll of the held cell or two
    assert worker.is_alive() and not has_row(results, held)
    names = optuna.get_all_study_names(f"sqlite:///{storage}")
    assert not any("/shots-all/" in n for n in names), names  # the held cell was not tuned here
    release(elsewhere)
    worker.join(timeout=120)
    assert not worker.is_alive() and sorted((r["shots"] or 0) for r in made) == [0, 2]


def test_extract_and_probe_protocol_take_the_launcher_too(tmp_path, capsys, monkeypatch):
    from test_probe_fixtures import write_features

    from cog_pl.models.records import record_download

    _roots(tmp_path)
    paper = tmp_path / "models" / "resnet50" / "resnet50-19c8e357.pth"  # the config's model, downloaded
    paper.parent.mkdir(parents=True)
    paper.write_bytes(b"resnet50")  # not the published file's digest: its label is given (--model.name), not
    # resnet50, which only the published file takes
    record_download(paper, "resnet50", paper.name)
    monkeypatch.setenv("COG_PL_MODELS", str(tmp_path / "models"))
    argv = ["extract", "--config", str(REPO / "configs/extract/resnet50.yaml"), "--model.name", "r50_fake",
            "--data.in1k_root",
            str(tmp_path / "data/in1k"), "--data.in21k_root", str(tmp_path / "data/in21k"), "--data.out",
            str(tmp_path / "features"), "--launcher", "slurm", "--nodes", "2", "--gpus-per-node", "4", "--dry-run"]
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "extract/r50_fake  2 nodes x 4 tasks, 4 GPUs a node" in out and "12 feature stores" in out
    assert out.rstrip().endswith("--trainer.num_nodes 2 --trainer.devices 4 --trainer.accelerator gpu "
                                 "--trainer.strategy ddp")
    assert main([*argv[:-5], "--trainer.devices", "2", *argv[-5:]]) == 2
    assert "--trainer.devices 2: under --launcher" in capsys.readouterr().err

    features = write_features(tmp_path / "m" / "d", classes=3, dim=8, per_class=10, test_per_class=2)
    argv = ["probe", "protocol", "--features", str(features), "--results", str(tmp_path / "r.sqlite"), "--seeds",
            "22", "37", "--shots", "all", "2", "--launcher", "sbatch-scripts", "--probe-workers", "3", "--dry-run"]
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "probe/m/d  array of 3 tasks" in out and "4 rows: linear on 2 seeds x 2 shot settings" in out
    assert f"--storage {tmp_path}/cog_probe_runs/optuna.journal".replace(f"{tmp_path}/", "") in out
    assert main([*argv, "--storage", "s.db"]) == 2
    assert "a SQLite file cannot be shared by 3 tasks" in capsys.readouterr().err


class _FakeExecutor:
    """submitit's executor without SLURM: records what is submitted."""

    def __init__(self) -> None:
        self.submitted: list = []

    def update_parameters(self, **params) -> None:
        pass

    def batch(self):
        import contextlib

        return contextlib.nullcontext()

    def submit(self, job):
        self.submitted.append(job)
        return type("Submitted", (), {"job_id": f"{100 + len(self.submitted)}_0"})()


def test_a_submitted_job_runs_the_command_line_it_was_handed(tmp_path, capsys, monkeypatch):
    """``--launcher slurm`` hands each job the command line's entry point (the launcher imports nothing of the
    command line): submitit pickles it by reference, and the job runs its argv through it, requeues with it and
    fails when it fails."""
    cloudpickle = pytest.importorskip("cloudpickle")
    submit = pytest.importorskip("cog_pl.pipeline.cluster.submit")
    from cog_pl.cli import main as cli_main
    from cog_pl.pipeline.cluster.options import JOB_ENV

    executor = _FakeExecutor()
    monkeypatch.setattr(submit, "_executor", lambda folder, opts: executor)
    _roots(tmp_path)
    assert main(FULL.replace(" --dry-run", "").format(t=tmp_path).split()) == 0, capsys.readouterr().err
    assert len(executor.submitted) == 19  # check, extraction, 16 probe tasks, report
    for job in executor.submitted:
        assert job.entry is cli_main.main and "--launcher" not in job.argv
        again = cloudpickle.loads(cloudpickle.dumps(job))  # as submitit writes it and the node reads it
        assert again.entry is cli_main.main and again.argv == job.argv
    assert b"cog_pl.cli.main" in cloudpickle.dumps(executor.submitted[0])  # by reference, not by value
    monkeypatch.setenv(JOB_ENV, "")  # the job sets it (its command never submits jobs): removed again after
    seen: list = []
    assert submit.StageJob(("report", "--out", "o"), lambda argv: seen.append(argv) or 0)() == 0
    assert seen == [["report", "--out", "o"]]
    entry = seen.append
    requeued = submit.StageJob(("probe",), entry).checkpoint()
    assert requeued.function.entry is entry and requeued.function.argv == ("probe",)
    with pytest.raises(RuntimeError, match="cog-pl probe ended with exit status 2"):
        submit.StageJob(("probe",), lambda argv: 2)()


def test_a_submission_is_refused_while_an_earlier_one_does_the_same_work(tmp_path, monkeypatch):
    """Two extractions of one model must not write the same stores: a second submission waits for the first;
    another model's jobs may go; jobs that can never start (their dependency failed) are cancelled."""
    import cog_pl.pipeline.cluster.launch as launch

    root = tmp_path / "o"
    write_ledger(root, "slurm", _graph(), {"extract/m": "10", "probe/m": "11", "report": "12"}, {})
    states = {"10": [TaskState("10", "RUNNING")], "11": [TaskState("11_0", "PENDING", "Dependency")],
              "12": [TaskState("12", "PENDING", "DependencyNeverSatisfied")]}
    cancelled: list = []
    monkeypatch.setattr(launch, "job_states", lambda ids: {i: states.get(i, []) for i in ids})
    monkeypatch.setattr(launch, "cancel", lambda ids: cancelled.extend(ids))
    with pytest.raises(ValueError, match=r"still queued or running \(extract/m 10 RUNNING, probe/m 11_0 PENDING\)"):
        launch.refuse_live(root, _graph())
    other = [Job("extract/n", "extract", ()), Job("report", "report", ())]
    launch.refuse_live(root, other)  # another model: allowed, the stuck report cancelled
    assert cancelled == ["12"]
    states["10"] = [TaskState("10", "COMPLETED")]
    states["11"] = [TaskState("11_0", "FAILED")]
    launch.refuse_live(root, _graph())



def test_scripts_that_fail_half_way_leave_no_script_and_the_earlier_submission_recorded(tmp_path, capsys):
    """Issue 37: ``--launcher sbatch-scripts DIR`` writes its scripts all or none, and records the submission only
    once they are written: a failure half-way (a folder stands where submit.sh goes, after the job's script) leaves
    no script nor temporary file, and the earlier submission's jobs.json and the ids its submit.sh recorded as they
    were."""
    from test_probe_fixtures import write_features

    features = write_features(tmp_path / "m" / "d", classes=3, dim=8, per_class=10, test_per_class=2)
    argv = ["probe", "protocol", "--features", str(features), "--results", str(tmp_path / "o" / "r.sqlite"),
            "--seeds", "22", "--shots", "all", "--launcher", "sbatch-scripts"]
    assert main([*argv, str(tmp_path / "s")]) == 0, capsys.readouterr().err
    ledger, record = tmp_path / "o" / "slurm" / "jobs.json", tmp_path / "o" / "slurm" / "submitted.tsv"
    record.write_text("probe/m/d 101\n")  # the earlier submission's submit.sh ran
    before = ledger.read_bytes()
    (tmp_path / "s2" / "submit.sh").mkdir(parents=True)
    capsys.readouterr()
    assert main([*argv, str(tmp_path / "s2")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path / "s2" / "submit.sh") in err[0], err
    assert [p.name for p in (tmp_path / "s2").iterdir()] == ["submit.sh"]  # no script, no temporary file
    assert ledger.read_bytes() == before and record.read_text() == "probe/m/d 101\n"
    assert read_ledger(tmp_path / "o")["earlier"] == []
