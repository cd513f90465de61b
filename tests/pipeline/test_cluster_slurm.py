"""A whole evaluation on a real SLURM (:mod:`slurm`: one node on loopback): the demo's miniature benchmark submitted
with ``cog-pl run --launcher slurm`` and 2 probe tasks gives the rows of a local ``cog-pl run``; a graph whose probe
tasks are signalled (they requeue themselves) and then cancelled mid-way, submitted again, ends with the same rows,
none made twice and no store extracted again; the plain ``sbatch`` scripts, submitted by hand, give them too."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from slurm import slurm_cluster, wait_for  # noqa: F401  (the fixture)

from cog_pl.pipeline.cluster.ledger import read_ledger, submitted_ids
from cog_pl.results import read_rows, row_key
from cog_pl.results.claims import claims_path

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
COG_PL = Path(sys.executable).with_name("cog-pl")  # the console script installed beside the test's Python
GRID = ["--seeds", "22", "37", "45", "--shots", "all", "1", "2", "--trials", "8", "--epochs", "2000"]  # cells slow
# enough that the 5 s between a cancel and its SIGKILL (KillWait, tests/slurm.py) never finishes the grid
CELLS = 6 * 3 * 3
CLUSTER = ["--gpus-per-node", "0", "--probe-workers", "2", "--time", "30", "--cpus-per-task", "1"]
RESULT_KEYS = ("test_top1", "test_top5", "lr", "wd", "val_top1", "best_trial")
GRAPH_TIMEOUT = 900


def _env(cluster) -> dict[str, str]:
    return {**cluster.env, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def _cog(args: list[str], env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(COG_PL), *args], env=env, capture_output=True, text=True, timeout=timeout)


def _args(demo, out: Path) -> list[str]:
    return ["run", "--model", "external:demo_cnn", "--checkpoint", str(demo.checkpoint), "--in1k-root",
            str(demo.in1k_root), "--in21k-root", str(demo.in21k_root), "--benchmark", str(demo.benchmark), "--out",
            str(out), *GRID, "--accelerator", "cpu", "--devices", "1", "--num-workers", "0", "--batch-size", "64",
            "--probe-device", "cpu"]


def _table(results: Path) -> dict[tuple, tuple]:
    return {row_key(r): tuple(r[k] for k in RESULT_KEYS) for r in read_rows(results)}


def _count(results: Path) -> int:
    try:
        return len(read_rows(results))
    except (sqlite3.Error, ValueError):  # being created
        return 0


def _job_logs(out: Path) -> str:
    """The end of each job's log, and every error line in it."""
    logs = [p for p in sorted((out / "slurm" / "logs").rglob("*")) if p.suffix in (".err", ".out")]
    parts = []
    for path in logs:
        lines = path.read_text(errors="replace").splitlines()
        errors = [ln for ln in lines[:-15] if "error" in ln.lower() or "Caught signal" in ln or "requeue" in ln]
        parts.append("\n".join([f"--- {path}", *errors[-10:], "...", *lines[-15:]]))
    return "\n".join(parts)


def _wait(condition, timeout: float, what: str, out: Path, every: float = 0.5):
    """:func:`wait_for`, the jobs' logs shown on a time-out."""
    try:
        return wait_for(condition, timeout, what, every)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{_job_logs(out)}") from None


def _requeued(cluster, array: str, tasks: int = 2) -> list[dict[str, str]]:
    """The array's tasks once every one of them was requeued and waits (SLURM delays a requeued job)."""
    shown = [t for t in cluster.show(array) if t.get("Restarts") == "1" and t.get("JobState") == "PENDING"]
    return shown if len(shown) == tasks else []


def _ids(out: Path) -> dict[str, str]:
    return submitted_ids(out, read_ledger(out))


def _wait_graph(cluster, out: Path, timeout: float = GRAPH_TIMEOUT) -> None:
    """Until the report job of the graph recorded under ``out`` completed; fails at once on a job ending badly."""
    def ended():
        ids = _ids(out)
        for key, job_id in ids.items():
            bad = [t for t in cluster.show(job_id) if t.get("JobState") in ("FAILED", "CANCELLED", "TIMEOUT",
                                                                            "OUT_OF_MEMORY", "NODE_FAIL")]
            assert not bad, (f"job {key} ({job_id}) ended {bad[0]['JobState']} (reason {bad[0].get('Reason')}, exit "
                             f"code {bad[0].get('ExitCode')})\n{_job_logs(out)}\n{cluster.logs()}")
        return "report" in ids and [t.get("JobState") for t in cluster.show(ids["report"])] == ["COMPLETED"]

    try:
        wait_for(ended, timeout, f"the graph under {out} to end", every=2)
    except AssertionError as err:
        if "timed out" in str(err):
            raise AssertionError(f"{err}\n{cluster.jobs()}\n{_job_logs(out)}") from None
        raise


def _stores(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "features").rglob("features.npy"))}


@pytest.fixture(scope="module")
def cluster(slurm_cluster):  # noqa: F811  (tests/slurm.py)
    return slurm_cluster


@pytest.fixture(autouse=True)
def _no_jobs_left(request):
    """After each test, even a failed one, its jobs are cancelled: the next test starts on an empty queue."""
    yield
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster").cancel_all()


@pytest.fixture(scope="module")
def demo(tmp_path_factory, onto):
    from cog_pl.demo import prepare

    return prepare(tmp_path_factory.mktemp("demo"), n_seen=10, n_per_level=4, train_per_concept=16,
                   test_per_concept=6, image_size=32, epochs=1, onto=onto)


@pytest.fixture(scope="module")
def local(demo, tmp_path_factory, cluster):
    """The same evaluation run here by ``cog-pl run``, no SLURM."""
    out = tmp_path_factory.mktemp("local")
    env = {k: v for k, v in _env(cluster).items() if k != "SLURM_CONF"}
    done = _cog(_args(demo, out), env)
    assert done.returncode == 0, done.stderr[-3000:]
    table = _table(out / "results.sqlite")
    assert len(table) == CELLS
    return out, table


@pytest.fixture(scope="module")
def on_slurm(demo, local, cluster, tmp_path_factory):
    """The evaluation submitted with --launcher slurm (after a dry run), waited for."""
    out = tmp_path_factory.mktemp("slurm")
    env = _env(cluster)
    dry = _cog([*_args(demo, out), "--launcher", "slurm", *CLUSTER, "--dry-run"], env)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert not cluster.jobs() and not (out / "slurm").exists()  # nothing submitted
    submitted = _cog([*_args(demo, out), "--launcher", "slurm", *CLUSTER], env, timeout=300)
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    _wait_graph(cluster, out)
    return out, dry.stdout, submitted.stdout


def test_the_cluster_starts_in_seconds(cluster):
    assert cluster.started_in < 30, cluster.logs()


def test_a_run_on_slurm_gives_the_rows_of_a_local_run(on_slurm, local, cluster):
    out, dry, submitted = on_slurm
    for text in (dry, submitted):
        assert "array of 2 tasks" in text and "after extract/demo_cnn" in text and "after probe/demo_cnn" in text
        assert f"{CELLS} rows: linear on 3 seeds x 3 shot settings x 6 domains" in text
    ids = _ids(out)
    assert sorted(ids) == ["check", "extract/demo_cnn", "probe/demo_cnn", "report"]
    assert all(ids[k] in submitted for k in ids)
    assert _stores(out) == _stores(local[0])  # the extraction job's features, bit for bit
    assert _table(out / "results.sqlite") == local[1]
    rows = read_rows(out / "results.sqlite")
    assert len({r["worker"] for r in rows}) == 2, "both probe tasks should have made rows"
    tasks = cluster.show(ids["probe/demo_cnn"])
    assert sorted(t["ArrayTaskId"] for t in tasks) == ["0", "1"]
    status = _cog(["run", "--status", str(out)], _env(cluster), timeout=120)
    assert status.returncode == 0, status.stderr
    lines = {line.split()[0]: line for line in status.stdout.splitlines()[1:] if line.strip()}
    assert "COMPLETED" in lines["check"] and "12/12 stores complete" in lines["extract/demo_cnn"]
    assert "COMPLETED x2" in lines["probe/demo_cnn"] and f"{CELLS}/{CELLS} rows" in lines["probe/demo_cnn"]
    assert "report.md written" in lines["report"]
    assert (out / "report" / "report.md").is_file()


def test_signalled_and_cancelled_jobs_submitted_again_end_with_the_same_rows(on_slurm, local, demo, cluster,
                                                                           tmp_path):
    """Mid-way through the probes SLURM signals both tasks (as before a time limit): each requeues itself and,
    released, resumes. Later every job is cancelled (scancel) and the same command submitted again: it ends with
    the local rows, the rows made before the cancel kept as they were, the stores never extracted again."""
    out, env = tmp_path / "again", _env(cluster)
    shutil.copytree(on_slurm[0] / "features", out / "features")  # finished stores: the extraction job skips them
    stamps = {p: p.stat().st_mtime_ns for p in (out / "features").rglob("*.npy")}
    results = out / "results.sqlite"
    submitted = _cog([*_args(demo, out), "--launcher", "slurm", *CLUSTER], env, timeout=300)
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    probe = _ids(out)["probe/demo_cnn"]
    _wait(lambda: _count(results) >= 2, GRAPH_TIMEOUT, "the first rows", out, every=0.1)
    cluster.run("scancel", "--signal=USR2", probe)  # what SLURM sends --signal-delay s before the limit
    restarted = _wait(lambda: _requeued(cluster, probe), 120, "both probe tasks to requeue themselves", out)
    assert _count(results) < CELLS, _job_logs(out)
    for task in restarted:
        cluster.release(f"{probe}_{task['ArrayTaskId']}")
    resumed = _count(results)
    _wait(lambda: _count(results) >= resumed + 2, GRAPH_TIMEOUT, "rows made after the requeue", out, every=0.1)
    # Killed mid-way as by a lost node: submitit ignores the SIGTERM of a plain scancel (it waits for SLURM's KILL,
    # which this one-node cluster's process tracking does not always deliver), so the tasks get SIGKILL themselves,
    # then the graph is cancelled.
    cluster.run("scancel", "--signal=KILL", "--full", probe)
    cluster.run("scancel", *_ids(out).values())
    wait_for(lambda: not cluster.jobs(), 120, "the cancelled jobs to end")
    before = {row_key(r): r for r in read_rows(results)}
    assert resumed + 2 <= len(before) < CELLS, "the grid ended before it could be cancelled"

    again = _cog([*_args(demo, out), "--launcher", "slurm", *CLUSTER], env, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    _wait_graph(cluster, out)
    after = {row_key(r): r for r in read_rows(results)}
    assert _table(results) == local[1] and len(after) == CELLS
    assert all(after[k] == row for k, row in before.items())  # finished rows kept, never made again
    with sqlite3.connect(claims_path(results)) as con:
        assert con.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0  # no cell left claimed
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # no store extracted again
    earlier = read_ledger(out)["earlier"]
    assert len(earlier) == 1 and earlier[0]["jobs"][2]["id"] == probe


def test_plain_sbatch_scripts_submitted_by_hand_give_the_same_rows(on_slurm, local, demo, cluster, tmp_path):
    out, scripts, env = tmp_path / "by_hand", tmp_path / "scripts", _env(cluster)
    shutil.copytree(on_slurm[0] / "features", out / "features")
    written = _cog([*_args(demo, out), "--launcher", "sbatch-scripts", str(scripts), *CLUSTER], env, timeout=300)
    assert written.returncode == 0, written.stderr[-3000:]
    assert not cluster.jobs()  # written, not submitted
    names = sorted(p.name for p in scripts.iterdir())
    assert names == ["01-cog-check.sbatch", "02-cog-extract-demo_cnn.sbatch", "03-cog-probe-demo_cnn.sbatch",
                     "04-cog-report.sbatch", "submit.sh"]
    probe_script = (scripts / names[2]).read_text()
    assert "#SBATCH --array=0-1" in probe_script and "#SBATCH --signal=B:USR2@120" in probe_script
    assert "trap requeue USR2" in probe_script and "--stage probe --storage" in probe_script
    submit = subprocess.run(["bash", str(scripts / "submit.sh")], env=env, capture_output=True, text=True,
                            timeout=120)
    assert submit.returncode == 0, submit.stderr
    ids = _ids(out)
    assert sorted(ids) == ["check", "extract/demo_cnn", "probe/demo_cnn", "report"]
    assert cluster.show(ids["report"])[0]["Dependency"].startswith("afterok:")
    results = out / "results.sqlite"
    _wait(lambda: _count(results) >= 2, GRAPH_TIMEOUT, "the first rows", out, every=0.1)
    cluster.run("scancel", "--batch", "--signal=USR2", ids["probe/demo_cnn"])  # the script's trap requeues
    restarted = _wait(lambda: _requeued(cluster, ids["probe/demo_cnn"]), 120, "the scripts to requeue their jobs",
                      out)
    for task in restarted:
        cluster.release(f"{ids['probe/demo_cnn']}_{task['ArrayTaskId']}")
    _wait_graph(cluster, out)
    assert _table(results) == local[1]
    status = _cog(["run", "--status", str(out)], env, timeout=120)
    assert status.returncode == 0 and ids["probe/demo_cnn"] in status.stdout, status.stderr



def test_a_job_slurm_refuses_is_one_line_and_leaves_nothing_queued(demo, cluster, tmp_path):
    """A partition the cluster lacks: sbatch refuses the first job; the user reads why in one line (exit 2, their
    option), and no job of the graph stays queued."""
    refused = _cog([*_args(demo, tmp_path / "refused"), "--launcher", "slurm", *CLUSTER, "--partition", "nosuch"],
                   _env(cluster), timeout=300)
    assert refused.returncode == 2, refused.stderr[-3000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("cog-pl run: error: SLURM refused the job check (") and "partition" in last.lower(), last
    assert last.endswith("the jobs submitted before it were cancelled")
    assert not cluster.jobs()
