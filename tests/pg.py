"""A real PostgreSQL server for the tests: ``postgres_url`` starts one on loopback, as an unprivileged user, in a
temporary directory, with one empty database, and stops it afterwards.

The server programs (``initdb``, ``pg_ctl``) are found on the PATH or under ``/usr/lib/postgresql/*/bin``; where they
(or the ``psycopg2`` driver) are missing the tests using the fixture are skipped, except on CI (``CI`` set), where
``.ci/run`` installs them and their absence fails the tests.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

DATABASE = "cogtest"
USER = "cog"  # the server's superuser (trust authentication on loopback only)


def server_bin() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``, the newest installed version's; None where there are none."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    return versions[-1].parent if versions else None


def _absent(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{why}: .ci/run should have installed it")
    pytest.skip(why)


def _server_user() -> pwd.struct_passwd | None:
    """The user the server runs as: this one, or (as root, which initdb refuses) an unprivileged one."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    pytest.fail("running as root, and neither a 'postgres' nor a 'nobody' user exists to run PostgreSQL")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url():
    """``postgresql+psycopg2://cog@127.0.0.1:PORT/cogtest`` of a server started for this module."""
    bindir = server_bin()
    if bindir is None:
        _absent("PostgreSQL server programs (initdb, pg_ctl) not found on the PATH or in /usr/lib/postgresql")
    try:
        import psycopg2  # noqa: F401  (SQLAlchemy's default PostgreSQL driver)
    except ImportError:
        _absent("the psycopg2 driver is not installed (pip install -e '.[test]')")
    user = _server_user()
    as_user = {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    home = Path(tempfile.mkdtemp(prefix="cog-pl-pg-"))  # not under pytest's root-only tmp: the server user reads it
    data, log = home / "data", home / "server.log"
    if user is not None:
        os.chown(home, user.pw_uid, user.pw_gid)
    env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C", "HOME": str(home), "TZ": "UTC"}
    port = _free_port()
    try:
        subprocess.run([bindir / "initdb", "-D", data, "-U", USER, "-A", "trust", "-E", "UTF8", "--no-sync"],
                       check=True, capture_output=True, env=env, cwd=home, **as_user)
        options = f"-h 127.0.0.1 -p {port} -k {home} -c fsync=off -c synchronous_commit=off -c max_connections=100"
        subprocess.run([bindir / "pg_ctl", "-D", data, "-l", log, "-w", "-t", "60", "-o", options, "start"],
                       check=True, capture_output=True, env=env, cwd=home, **as_user)
        try:
            subprocess.run([bindir / "createdb", "-h", "127.0.0.1", "-p", str(port), "-U", USER, DATABASE],
                           check=True, capture_output=True, env=env, cwd=home)
            yield f"postgresql+psycopg2://{USER}@127.0.0.1:{port}/{DATABASE}"
        finally:
            subprocess.run([bindir / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop"], capture_output=True,
                           env=env, cwd=home, **as_user)
    except subprocess.CalledProcessError as err:
        tail = log.read_text()[-2000:] if log.exists() else ""
        raise RuntimeError(f"PostgreSQL did not start: {err.stderr.decode(errors='replace')}{tail}") from err
    finally:
        shutil.rmtree(home, ignore_errors=True)
