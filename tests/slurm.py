"""A real SLURM cluster for the tests: ``slurm_cluster`` starts one node on loopback and stops it afterwards.

Debian's ``slurm-wlm`` and ``munge`` (``.ci/run`` installs them): ``munged`` with a fresh key on its own socket,
``slurmctld`` and ``slurmd`` in the foreground on free loopback ports, with their own state, spool and log folders in
a temporary directory; one node of 8 CPUs (``SlurmdParameters=config_overrides``: more than the machine has, so that
a graph's jobs run side by side), ``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``, no accounting
(job states come from ``squeue`` and ``scontrol``). It starts in about a second. Every command of a test gets
``env`` (``SLURM_CONF`` names the cluster); the test process's own environment is left alone.

On the way out, even after a failure: every job is cancelled and waited for, the three daemons are stopped (by the
process ids this fixture started), then any process still holding this cluster's ``SLURM_CONF`` in its environment
(a job's step) is killed by id, and the directory removed. Where the programs are missing the tests are skipped,
except on CI (``CI`` set), where their absence fails them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")
CPUS = 8

CONF = """\
ClusterName=cogtest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser={user}
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={home}/munge/socket
StateSaveLocation={home}/state
SlurmdSpoolDir={home}/spool
SlurmctldPidFile={home}/slurmctld.pid
SlurmdPidFile={home}/slurmd.pid
SlurmctldLogFile={home}/log/slurmctld.log
SlurmdLogFile={home}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
KillWait=5
MinJobAge=3600
InactiveLimit=0
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _absent(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{why}: .ci/run should have installed slurm-wlm and munge")
    pytest.skip(why)


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class SlurmCluster:
    """A running one-node cluster: ``env`` for the commands that use it."""

    home: Path
    node: str
    env: dict[str, str]
    daemons: list[subprocess.Popen] = field(default_factory=list)
    started_in: float = 0.0  # seconds from the first daemon to an idle node

    def run(self, *cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout, check=check)

    def jobs(self) -> list[tuple[str, str, str, str]]:
        """Every job SLURM queues or runs: (array or job id, job or task id, state, reason)."""
        out = self.run("squeue", "-h", "-a", "-r", "-o", "%F|%i|%T|%r").stdout
        return [tuple(line.split("|")) for line in out.splitlines() if line.strip()]

    def show(self, job_id: str) -> list[dict[str, str]]:
        """``scontrol show job``'s fields of a job (one dict per array task); [] for a job SLURM forgot."""
        done = self.run("scontrol", "-o", "show", "job", job_id, check=False)
        return [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in done.stdout.splitlines()]

    def release(self, job_id: str, after_s: int = 10) -> None:
        """Make a requeued job eligible in ``after_s`` seconds rather than SLURM's two minutes.

        Not at once: slurmd revokes a requeued job's credential and refuses a launch whose credential was not issued
        after the revocation ("Job credential revoked", SchedMD/slurm ``src/slurmd/slurmd/req.c``; credential times
        are whole seconds), and the old incarnation's steps take up to KillWait (5 s) to end. A job started inside
        that window fails at launch with nothing in its log (seen on a loaded CI machine); SLURM's own delay exists
        for the same reason."""
        self.run("scontrol", "update", f"JobId={job_id}", f"StartTime=now+{after_s}", check=False)

    def cancel_all(self, timeout: float = 60) -> None:
        """Cancel every job and wait until SLURM forgets them, so one test's jobs never reach the next test."""
        ids = sorted({j[0] for j in self.jobs()})
        if ids:
            self.run("scancel", "--full", "--signal=KILL", *ids, check=False)
            self.run("scancel", *ids, check=False)
            wait_for(lambda: not self.jobs(), timeout, "the cancelled jobs to end")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted((self.home / "log").glob("*")))


def wait_for(condition: Callable[[], object], timeout: float, what: str, every: float = 0.5) -> object:
    """Poll ``condition`` until it returns something true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _ours(conf: Path) -> list[int]:
    """Processes (other than this one) whose environment names this cluster's configuration: jobs and steps."""
    marker, mine, found = f"SLURM_CONF={conf}".encode(), os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == mine:
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _stop(cluster: SlurmCluster) -> None:
    try:
        ids = sorted({j[0] for j in cluster.jobs()})
        if ids:
            cluster.run("scancel", *ids, check=False)
            wait_for(lambda: not cluster.jobs(), 60, "the cancelled jobs to end")
    except (AssertionError, OSError, subprocess.SubprocessError):
        pass  # the daemons go anyway
    for proc in reversed(cluster.daemons):
        if proc.poll() is None:
            proc.terminate()
    for proc in reversed(cluster.daemons):
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pid in _ours(cluster.home / "slurm.conf"):  # a job step slurmd left behind
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def slurm_cluster():
    """A one-node SLURM cluster on loopback, for this module."""
    missing = [p for p in PROGRAMS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]
    if missing:
        _absent(f"SLURM's programs {', '.join(missing)} not found (Debian: apt-get install slurm-wlm munge)")
    home = Path(tempfile.mkdtemp(prefix="cog-pl-slurm-"))
    node = socket.gethostname().split(".")[0]
    for sub in ("state", "spool", "log", "munge"):
        (home / sub).mkdir()
    (home / "munge").chmod(0o755)  # clients reach the socket
    key = home / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    ctld_port, d_port = _free_ports(2)
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
    conf = home / "slurm.conf"
    conf.write_text(CONF.format(node=node, ctld_port=ctld_port, d_port=d_port, user=user, home=home, cpus=CPUS))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = SlurmCluster(home, node, env)
    sbin = lambda name: shutil.which(name) or f"/usr/sbin/{name}"  # noqa: E731
    started = time.monotonic()
    try:
        for cmd in ([sbin("munged"), "--foreground", "--force", f"--socket={home}/munge/socket",
                     f"--key-file={key}", f"--pid-file={home}/munge/munged.pid", f"--seed-file={home}/munge/seed",
                     f"--log-file={home}/log/munged.log"],
                    [sbin("slurmctld"), "-D", "-f", str(conf)],
                    [sbin("slurmd"), "-D", "-f", str(conf), "-N", node]):
            log = (home / "log" / f"{Path(cmd[0]).name}.out").open("w")
            cluster.daemons.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                    start_new_session=True))
            if cmd[0].endswith("munged"):
                wait_for(lambda: (home / "munge" / "socket").exists(), 30, "munged's socket")
        wait_for(lambda: cluster.run("sinfo", "-h", "-o", "%T", check=False).stdout.strip() == "idle", 60,
                 "the node to be idle")
        cluster.started_in = time.monotonic() - started
        yield cluster
    except AssertionError as err:
        raise AssertionError(f"{err}\n{cluster.logs()}") from err
    finally:
        _stop(cluster)
        shutil.rmtree(home, ignore_errors=True)
