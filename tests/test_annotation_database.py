"""A damaged or foreign database file: every annotation command says so and exits 2, with no
traceback and without writing to the file; a version-1 database is upgraded in place."""

from __future__ import annotations

import json
import os
import sqlite3
import stat

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.annotation.database import SCHEMA_VERSION, DatabaseError
from careful_engine.annotation.signals import load_inputs
from careful_engine.annotation.store import Store
from tests.annotation_db import rows
from tests.fakes import paper_round

_load()  # every command on `careful`


@pytest.fixture
def decl(tmp_path):
    return paper_round.write_declarations(tmp_path / "effects.json")


def _good(path, decl):
    with Store(path) as store:
        store.add_annotator("A1")
        store.new_round("r", load_inputs(decl).select(["rm", "cd"]), ["A1"], created_by="lead")
        s = store.annotator_session("r", "A1")
        s.label("rm", True, "deletes")
    return path


def _sql(path, *statements):
    conn = sqlite3.connect(str(path))
    for st in statements:
        conn.execute(st)
    conn.commit()
    conn.close()


# a good database altered by one statement: (case, statement, what the error says)
ALTERED = [
    ("missing table", "drop table labels", "table 'labels' is missing"),
    ("version", "update meta set value = '99' where key = 'schema'", "schema version '99'"),
    ("no version", "delete from meta", "schema version 'none'"),
    ("missing column", "alter table decisions drop column reason", "lacks columns reason"),
]


def _damaged(tmp_path, decl) -> dict:
    cases = {}
    p = tmp_path / "text.db"
    p.write_text("this is not a database\n" * 10)
    cases["text"] = (p, "not an SQLite database")
    p = tmp_path / "random.db"
    p.write_bytes(bytes(range(256)) * 8)
    cases["random"] = (p, "not an SQLite database")
    p = tmp_path / "truncated.db"
    data = _good(tmp_path / "full.db", decl).read_bytes()
    _sql(tmp_path / "full.db", "pragma wal_checkpoint(TRUNCATE)")
    data = (tmp_path / "full.db").read_bytes()
    p.write_bytes(data[:1500])
    cases["truncated"] = (p, "database")
    p = tmp_path / "foreign.db"
    _sql(p, "create table foo (x)", "insert into foo values (1)")
    cases["foreign"] = (p, "not a careful annotation database")
    for case, statement, says in ALTERED:
        p = _good(tmp_path / f"{case.replace(' ', '-')}.db", decl)
        _sql(p, statement)
        cases[case] = (p, says)
    cases["folder"] = (tmp_path, "not a regular file")
    target = _good(tmp_path / "target.db", decl)
    (tmp_path / "link.db").symlink_to(target)  # SQLite would write through it
    cases["link"] = (tmp_path / "link.db", "a symbolic link")
    (tmp_path / "dangling.db").symlink_to(tmp_path / "nowhere" / "x.db")
    cases["dangling link"] = (tmp_path / "dangling.db", "a symbolic link")
    wal = _good(tmp_path / "wal.db", decl)
    (tmp_path / "wal.db-wal").unlink(missing_ok=True)
    (tmp_path / "wal.db-wal").symlink_to(tmp_path / "elsewhere-wal")
    cases["journal link"] = (wal, "a symbolic link")
    return cases


COMMANDS = (
    ["round", "status"], ["round", "status", "r"], ["round", "new", "r2", "-f", "rm"],
    ["round", "add", "r", "-a", "A2"], ["round", "submit", "r", "-a", "A1"],
    ["label", "-r", "r", "-a", "A1"], ["agree", "-r", "r", "--override", "x"],
    ["adjudicate", "-r", "r", "--override", "x", "--dry-run"],
    ["labels", "export", "-r", "r", "--override", "x"],
    ["annotate-llm", "-m", "m", "-a", "L1", "-r", "r", "--api-key", "k"],
)


def test_every_command_refuses_a_damaged_database(tmp_path, decl):
    cases = _damaged(tmp_path, decl)
    export = tmp_path / "export.json"
    export.write_text(json.dumps({"schema": "careful.labels/1"}))
    runner = CliRunner()
    tried = 0
    for name, (path, message) in cases.items():
        before = path.read_bytes() if path.is_file() else None
        for command in (*COMMANDS, ["labels", "import", str(export)]):
            result = runner.invoke(app, [*command, "--db", str(path)], input="q\n",
                                   env={"COLUMNS": "250"})
            assert result.exit_code == 2, (name, command, result.output)
            assert "Traceback" not in result.output, (name, command)
            assert message in result.output, (name, command, result.output)
            tried += 1
        if before is not None:
            assert path.read_bytes() == before, name  # nothing written to it
    assert tried == len(cases) * (len(COMMANDS) + 1)


def test_the_engine_raises_one_error_type(tmp_path, decl):
    for path, message in _damaged(tmp_path, decl).values():
        with pytest.raises(DatabaseError, match=message):
            Store(path)


def test_an_empty_file_becomes_a_database(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()
    with Store(path) as store:
        assert store.rounds() == [] and store.integrity_check() == "ok"


def test_a_new_database_is_not_readable_by_other_logins(tmp_path, decl):
    """Every annotator's labels and reasons are in the file: SQLite made it (and its journal
    files) readable by every login on the machine; careful makes it for its owner and group.
    A file that exists keeps the permissions it has."""
    old = os.umask(0o002)
    try:
        path = tmp_path / "new.db"
        with Store(path) as store:
            store.add_annotator("A1")
            store.new_round("r", load_inputs(decl).select(["rm"]), ["A1"], created_by="lead")
            store.annotator_session("r", "A1", account="A1").label("rm", True, "deletes")
            wal = path.with_name(path.name + "-wal")
            assert wal.exists() and stat.S_IMODE(wal.stat().st_mode) == 0o660
        assert stat.S_IMODE(path.stat().st_mode) == 0o660
        mine = tmp_path / "mine.db"
        mine.touch(mode=0o604)
        mine.chmod(0o604)
        Store(mine).close()
        assert stat.S_IMODE(mine.stat().st_mode) == 0o604
    finally:
        os.umask(old)


def test_a_version_1_database_is_upgraded(tmp_path, decl):
    path = _good(tmp_path / "v1.db", decl)
    _sql(path, "alter table annotators drop column account",
         "alter table reveals drop column what", "alter table rounds drop column closed_by",
         "update meta set value = '1' where key = 'schema'")
    with Store(path) as store:
        # the labels written before owners were recorded go to the first login that opens them
        assert store.annotator_session("r", "A1", account="a1-login").labels()["rm"].reason
        with pytest.raises(Exception, match="blind and still open"):
            store.annotator_session("r", "A1", account="someone-else")
    assert rows(path, "select value from meta where key = 'schema'") == [
        {"value": str(SCHEMA_VERSION)}]
    assert rows(path, "select account from annotators") == [{"account": "a1-login"}]


def test_the_workbench_says_so_and_goes_on(tmp_path):
    import asyncio

    from tests.workbench_support import open_label
    from workbench.app import WorkbenchApp, demo_settings
    from workbench.screens.agreement import AgreementScreen
    from workbench.screens.label import LabelScreen

    (tmp_path / "runs").mkdir()
    (tmp_path / "careful.db").write_text("garbage\n" * 20)

    async def go():
        app = WorkbenchApp(demo_settings(tmp_path))
        async with app.run_test(size=(100, 30)) as pilot:
            await open_label(pilot)
            assert "not an SQLite database" in str(
                app.screen.query_one("#round-info").render())
            await pilot.press("ctrl+n")  # no new round over a database it cannot use
            await pilot.pause()
            assert isinstance(app.screen, LabelScreen)
            await app.push_screen(AgreementScreen())
            await pilot.pause()
            assert "not an SQLite database" in str(
                app.screen.query_one("#agree-summary").render())
            for key in ("w", "p", "t", "d", "b", "o"):
                await pilot.press(key)
            await pilot.pause()
        assert app.return_code in (None, 0)

    asyncio.run(go())
