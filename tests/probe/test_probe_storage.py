"""Study storages: a SQLite file in WAL mode on a local disk, the rollback journal on network filesystems."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3

import optuna
import pytest

from cog_pl.probe import storage as storage_module
from cog_pl.probe.storage import close_storage, filesystem_type, opened, resolve_storage


def _fill(storage, trials: int = 3) -> None:
    study = optuna.create_study(storage=storage, study_name="s", direction="maximize")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=trials)


def _journal_mode(path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return connection.execute("PRAGMA journal_mode").fetchone()[0]


def test_a_local_sqlite_study_logs_ahead_and_its_file_alone_holds_it_after_close(tmp_path):
    db = tmp_path / "study.db"
    storage = resolve_storage(db)
    _fill(storage)
    with storage.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL: no sync per commit
    assert _journal_mode(db) == "wal"
    close_storage(storage)
    assert not (tmp_path / "study.db-wal").exists()  # folded back into the file
    shutil.copy(db, tmp_path / "copy.db")  # the file alone, as a user would copy it
    copied = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'copy.db'}")
    assert len(copied.trials) == 3


def test_a_sqlite_study_on_a_network_filesystem_keeps_the_rollback_journal(tmp_path, monkeypatch):
    close_storage(resolve_storage(tmp_path / "copied.db"))  # made in WAL mode on a local disk, then "copied"
    assert _journal_mode(tmp_path / "copied.db") == "wal"
    monkeypatch.setattr(storage_module, "filesystem_type", lambda path: "nfs4")
    for name in ("study.db", "copied.db"):
        storage = resolve_storage(tmp_path / name)
        assert isinstance(storage, optuna.storages.RDBStorage)
        _fill(storage)
        close_storage(storage)
        assert _journal_mode(tmp_path / name) == "delete"


def test_filesystem_type_is_that_of_the_longest_mount_above_the_path():
    mounts = "\n".join(["/dev/vda / ext4 rw 0 0", "server:/export /mnt/share nfs4 rw 0 0",
                        "/dev/vdb /mnt/share/scratch xfs rw 0 0", "//host/a /mnt/my\\040drive cifs rw 0 0", ""])
    assert filesystem_type("/home/user/run/study.db", mounts) == "ext4"
    assert filesystem_type("/mnt/share/run", mounts) == "nfs4"
    assert filesystem_type("/mnt/share", mounts) == "nfs4"
    assert filesystem_type("/mnt/shared", mounts) == "ext4"  # a longer name is not a mount below /mnt/share
    assert filesystem_type("/mnt/share/scratch/x", mounts) == "xfs"
    assert filesystem_type("/mnt/my drive/x", mounts) == "cifs"
    assert filesystem_type("/x", "") is None


def test_a_file_that_is_not_a_database_is_named(tmp_path):
    bad = tmp_path / "notes.db"
    bad.write_text("these are my notes, not an Optuna study\n" * 100)
    with pytest.raises(ValueError, match=r"notes\.db: cannot open the study database"):
        resolve_storage(bad)
    assert bad.read_text().startswith("these are my notes")  # untouched


def test_journal_files_and_urls_are_taken_as_they_are(tmp_path):
    assert isinstance(resolve_storage(tmp_path / "study.log"), optuna.storages.JournalStorage)
    url = f"sqlite:///{tmp_path / 'given.db'}"
    storage = resolve_storage(url)  # one engine, which close_storage can close
    assert isinstance(storage, optuna.storages.RDBStorage) and storage.url == url
    assert _journal_mode(tmp_path / "given.db") == "delete"  # a URL is used as given: no write-ahead log
    close_storage(storage)


def test_a_database_url_that_cannot_be_used_is_named_without_its_password(tmp_path):
    with pytest.raises(ValueError, match=r"storage sqlite:///.*missing/x\.db: cannot open the study database"):
        resolve_storage(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    with pytest.raises(ValueError, match=r"storage nosuchdb://me:\*\*\*@host/db: not a database URL") as caught:
        resolve_storage("nosuchdb://me:secret@host/db")
    assert "secret" not in str(caught.value)
    for url, port in (("postgresql://user:pw@host:notaport/db", "notaport"), ("postgresql://u:pw@[::1]:x/db", "x"),
                      ("mysql://host:5o/db", "5o")):  # SQLAlchemy says only "invalid literal for int()"
        with pytest.raises(ValueError, match=rf"^storage .*: port '{port}' is not a number$") as caught:
            resolve_storage(url)
        assert "pw" not in str(caught.value) and url.replace(":pw@", ":***@") in str(caught.value)


def test_a_storage_opened_for_a_block_is_closed_after_it_and_one_handed_in_is_not(tmp_path):
    with opened(tmp_path / "made.db") as made:
        _fill(made)
        assert made.engine.pool.checkedin() >= 1
    assert made.engine.pool.checkedin() == 0  # disposed: the file alone holds the study
    assert not (tmp_path / "made.db-wal").exists()
    handed = resolve_storage(tmp_path / "handed.db")
    with opened(handed) as same:
        assert same is handed
        _fill(same)
    assert handed.engine.pool.checkedin() >= 1  # its owner's to close
    close_storage(handed)


def _open_and_tell(path: str, start: float) -> None:
    import time

    from cog_pl.probe.storage import close_storage, resolve_storage

    time.sleep(max(0.0, start - time.time()))  # every process opens the new file at the same moment
    storage = resolve_storage(path)
    study = optuna.create_study(storage=storage, study_name="s", load_if_exists=True)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    close_storage(storage)


def test_workers_starting_together_on_a_new_file_take_turns_creating_it(tmp_path):
    import multiprocessing
    import time

    context = multiprocessing.get_context("spawn")
    path = str(tmp_path / "new.db")
    start = time.time() + 4.0  # after the spawned interpreters have imported Optuna
    procs = [context.Process(target=_open_and_tell, args=(path, start)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert len(optuna.load_study(study_name="s", storage=f"sqlite:///{path}").trials) == 8


def test_a_new_file_skips_the_schema_check_and_an_existing_one_is_checked(tmp_path):
    path = tmp_path / "optuna.db"
    storage = resolve_storage(path)  # made here, under the directory lock: this Optuna's schema
    assert storage.skip_compatibility_check
    _fill(storage)
    close_storage(storage)
    reopened = resolve_storage(path)
    assert not reopened.skip_compatibility_check
    close_storage(reopened)
    with contextlib.closing(sqlite3.connect(path)) as db, db:  # as if written by another Optuna version
        db.execute("UPDATE alembic_version SET version_num = 'v9.9.9.z'")
    with pytest.raises(RuntimeError, match="no longer compatible"):
        resolve_storage(path)


def _sha(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_our_results_file_as_a_storage_is_refused_and_left_byte_for_byte(tmp_path):
    from cog_pl.results import append_row

    results = tmp_path / "results.sqlite"
    append_row(results, {"model": "m", "domain": "cog_l1", "shots": None, "seed": 22, "test_top1": 50.0})
    before, mode = _sha(results), _journal_mode(results)
    with pytest.raises(ValueError, match=r"results\.sqlite is not an Optuna storage \(it has tables [a-z, ]*\brows\b"
                                         r"[a-z, ]*\); point --storage at a new file"):
        resolve_storage(results)
    assert _sha(results) == before and _journal_mode(results) == mode == "delete"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.sqlite"]


def test_another_applications_database_as_a_storage_is_refused(tmp_path):
    app = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(app)) as db, db:
        db.execute("CREATE TABLE studies (id INTEGER)")  # a name Optuna also uses, and one it does not
        db.execute("CREATE TABLE invoices (id INTEGER)")
    before = _sha(app)
    with pytest.raises(ValueError, match=r"app\.db is not an Optuna storage \(it has tables invoices\)"):
        resolve_storage(app)
    assert _sha(app) == before


def test_an_empty_file_a_new_path_and_an_optuna_file_are_storages(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    for path in (empty, tmp_path / "new.db"):
        with opened(path) as storage:
            _fill(storage)
        with opened(path) as storage:  # reopened: Optuna's own tables only
            assert len(optuna.load_study(study_name="s", storage=storage).trials) == 3


def test_a_garbage_journal_file_is_named_in_one_line(tmp_path):
    for name, text in (("notes.log", "not json at all\nsecond line\n"), ("list.jsonl", "[1, 2]\n[3]\n")):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ValueError, match=rf"{name.replace('.', r'[.]')} is not an Optuna journal file") as caught:
            resolve_storage(path)
        assert "\n" not in str(caught.value)
        assert path.read_text() == text
