"""Identity and blindness: names checked at every entry, labels that belong to the login that
wrote them, overrides recorded in the round's reveal log, and a store that cannot read labels."""

from __future__ import annotations

import inspect
import json
import re
import stat
import unicodedata

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.annotation import store as store_module
from careful_engine.annotation.errors import AnnotationError, BlindnessError
from careful_engine.annotation.llm import annotate
from careful_engine.annotation.names import NAME_RULE, check_name
from careful_engine.annotation.release import write_label_sets
from careful_engine.annotation.signals import load_inputs
from careful_engine.annotation.store import Store
from tests.annotation_db import rows
from tests.fakes import paper_round

_load()  # every command on `careful`

SECRET = "BOBS-SECRET-REASON"
GOOD = ["A1", "alice", "claude-opus-4.5", "J_Doe", "Zoë", "李雷", "x" * 64]
BAD = {
    "alice\n": "whitespace", "alice\r\n": "whitespace", " alice": "whitespace",
    "alice ": "whitespace", "\talice": "whitespace", "": "empty", "a b": "whitespace",
    "al\x1bice": "control", "al\x00ice": "control", "ali\u202ece": "control",
    "ali\u200bce": "control", "\ufeffalice": "control", "a/b": "not allowed",
    "../x": "not allowed", "a\\b": "not allowed", "a,b": "not allowed", "[red]x": "not allowed",
    "-rf": "start with", ".hidden": "start with", "x" * 65: "65 characters",
    "a\u2028b": "whitespace", "a\u00a0b": "whitespace",
}


@pytest.fixture
def decl(tmp_path):
    return paper_round.write_declarations(tmp_path / "effects.json")


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "careful.db"
    monkeypatch.setenv("CAREFUL_DB", str(path))
    return path


def invoke(*args, user="bob", input=None):
    env = {"COLUMNS": "250", "USER": user}
    return CliRunner().invoke(app, list(args), input=input, env=env)


# ---------------------------------------------------------------- names


@pytest.mark.parametrize("name", GOOD)
def test_good_names(name):
    assert check_name(name) == name


@pytest.mark.parametrize(("name", "why"), list(BAD.items()))
def test_bad_names_say_the_rule(name, why):
    with pytest.raises(AnnotationError) as info:
        check_name(name)
    assert why in str(info.value) and NAME_RULE in str(info.value)
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value)


def test_non_text_names():
    for value in (None, 3, ["a"], b"alice"):
        with pytest.raises(AnnotationError, match="not text"):
            check_name(value)


def test_names_are_nfc_and_confusables_are_one_name(tmp_path):
    decomposed = unicodedata.normalize("NFD", "Zoë")
    assert decomposed != "Zoë"
    with Store(tmp_path / "x.db") as store:
        assert store.add_annotator(decomposed).name == "Zoë"
        assert store.annotator("Zoë") is not None and store.annotator(decomposed) is not None
        for twin in ("zoë", "ZOË", "zoe\u0308"):
            with pytest.raises(AnnotationError, match="confused with the existing annotator"):
                store.add_annotator(twin)
        store.add_annotator("alice")
        with pytest.raises(AnnotationError, match="confused with the existing annotator 'alice'"):
            store.add_annotator("Alice")
        with pytest.raises(AnnotationError, match="confused"):
            store.add_annotator("\uff41lice")  # full-width a
        assert [a.name for a in store.annotators()] == ["Zoë", "alice"]


def test_every_entry_checks_names(tmp_path, decl):
    inputs = load_inputs(decl).select(["rm", "cd"])
    with Store(tmp_path / "x.db") as store:
        store.add_annotator("A1")
        store.new_round("r", inputs, ["A1"], created_by="lead")
        for call in (
            lambda: store.add_annotator("bob\n"),
            lambda: store.add_annotator("bot ", "llm", "m"),
            lambda: store.add_annotator("bot", "llm", "model with spaces"),
            lambda: store.new_round("r2\n", inputs),
            lambda: store.new_round("r2", inputs, created_by="lead\x1b[2J"),
            lambda: store.add_to_round("r", "A1\n", by="lead"),
            lambda: store.annotator_session("r", "A1\t"),
            lambda: store.annotator_session("r", "A1", account="bob\n"),
            lambda: store.adjudication_session("r", " lead", override="x"),
            lambda: store.round("r\n"),
        ):
            with pytest.raises(AnnotationError):
                call()
        assert [r.name for r in store.rounds()] == ["r"]
        assert [a.name for a in store.annotators()] == ["A1"]


def test_reasons_are_checked(tmp_path, decl):
    with Store(tmp_path / "x.db") as store:
        store.add_annotator("A1")
        store.new_round("r", load_inputs(decl).select(["rm"]), ["A1"], created_by="lead")
        session = store.annotator_session("r", "A1")
        for reason in ("\x1b[31mred", "a\x00b", "x" * 4001, "safe \u202eesrever"):
            with pytest.raises(AnnotationError):
                session.label("rm", True, reason)
        with pytest.raises(AnnotationError, match="must be text"):
            session.label("rm", True, 42)  # type: ignore[arg-type]
        assert session.labels() == {}
        assert session.label("rm", True, "two\r\nlines\twith a tab ").reason == (
            "two\nlines\twith a tab")


def test_cli_refuses_bad_names_without_a_traceback(db, decl):
    result = invoke("round", "new", "r", "-d", str(decl), "-f", "rm,cd", "-a", "alice\n",
                    "-a", "bob")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "invalid annotator name 'alice\\n'" in result.output and "no spaces" in result.output
    result = invoke("round", "new", "r", "-d", str(decl), "-f", "rm,cd", "--llm",
                    "bot\x1b[2J=claude")
    assert result.exit_code == 2 and "\x1b" not in result.output
    assert not db.exists() or rows(db, "select * from rounds") == []
    result = invoke("round", "new", "r", "-d", str(decl), "-f", "rm,cd", "-a", "alice")
    assert result.exit_code == 0, result.output
    result = invoke("round", "add", "r", "-a", "Alice")
    assert result.exit_code == 2 and "confused" in result.output
    result = invoke("label", "-r", "r", "-a", "alice ", input="")
    assert result.exit_code == 2 and "leading or trailing whitespace" in result.output


def test_llm_annotator_names_are_checked_before_any_call(tmp_path, decl):
    class Client:
        calls = 0

        class messages:  # noqa: N801
            @staticmethod
            def create(**kwargs):
                Client.calls += 1
                raise AssertionError("no call expected")

    with Store(tmp_path / "x.db") as store:
        store.new_round("r", load_inputs(decl).select(["rm"]), [], created_by="lead")
        for name, model in (("bot\n", "m"), ("bot", "m\n"), ("", "m")):
            with pytest.raises(AnnotationError):
                annotate(store, "r", name, model, client=Client(), join=True)
        assert Client.calls == 0 and store.annotators() == []


# ---------------------------------------------------------------- blindness


def _bob_labels(db, decl):
    assert invoke("round", "new", "r", "-d", str(decl), "-f", "rm,cd,ls", "-a", "alice",
                  "-a", "bob", user="lead").exit_code == 0
    result = invoke("label", "-r", "r", "-a", "bob", input=f"y {SECRET}\nq\n", user="bob")
    assert result.exit_code == 0 and "saved" in result.output, result.output


def _label_rest(db, *who, destructive=True, reason="a reason", submit=True):
    """Each of ``who`` (in round r, by their own login) labels what they have not yet, and
    submits unless told not to."""
    with Store(db) as store:
        for name in who:
            session = store.annotator_session("r", name, account=name)
            for function in session.remaining():
                session.label(function, destructive, reason)
            if submit:
                session.submit()


def test_revise_by_another_login_is_refused(db, decl):
    _bob_labels(db, decl)
    for args in (["--revise"], [], ["-f", "cd"]):
        result = invoke("label", "-r", "r", "-a", "bob", *args, input="n\nq\n", user="mallory")
        assert result.exit_code == 2, result.output
        assert SECRET not in result.output and "blind and still open" in result.output
        assert "'mallory'" in result.output and "override" in result.output
    with Store(db) as store:
        assert store.reveal_log("r") == []
        labels = store.annotator_session("r", "bob", account="bob").labels()
    assert list(labels) == ["cd"] and labels["cd"].reason == SECRET  # nothing written


def test_revise_by_the_owner_shows_only_their_own(db, decl):
    _bob_labels(db, decl)
    result = invoke("label", "-r", "r", "-a", "bob", "--revise", input="q\n", user="bob")
    assert result.exit_code == 0 and SECRET in result.output
    result = invoke("label", "-r", "r", "-a", "alice", "--revise", input="s\ns\ns\n",
                    user="alice")
    assert result.exit_code == 0 and SECRET not in result.output
    # alice's first label makes alice alice's: bob cannot then open alice's labels
    assert invoke("label", "-r", "r", "-a", "alice", input="y mine\nq\n",
                  user="alice").exit_code == 0
    result = invoke("label", "-r", "r", "-a", "alice", "--revise", input="q\n", user="bob")
    assert result.exit_code == 2 and "mine" not in result.output


def _alice_file(tmp_path, decl) -> str:
    """alice's submitted label set of a blind round "imp", made in another database."""
    other = tmp_path / "elsewhere.db"
    with Store(other) as store:
        store.add_annotator("alice")
        store.new_round("imp", load_inputs(decl).select(["rm", "cd", "ls"]), ["alice"],
                        created_by="lead")
        session = store.annotator_session("imp", "alice", account="alice")
        for f in session.functions():
            session.label(f.name, False, "harmless")
        session.submit()
        (path,) = write_label_sets(store.adjudication_session("imp", "lead"), tmp_path / "o")
    return str(path)


def test_another_login_cannot_import_a_roster_names_labels(db, decl, tmp_path):
    path = _alice_file(tmp_path, decl)
    assert invoke("round", "new", "imp", "-d", str(decl), "-f", "rm,cd,ls", "-a", "alice",
                  "-a", "bob", user="lead").exit_code == 0
    result = invoke("labels", "import", path, user="bob")
    assert result.exit_code == 2, result.output
    assert "blind and still open" in result.output and "only login 'alice'" in result.output
    assert rows(db, "select * from labels") == []
    # once alice wrote a label, the name is hers: bob is refused for that reason
    assert invoke("label", "-r", "imp", "-a", "alice", "-f", "cd", input="n\n",
                  user="alice").exit_code == 0
    result = invoke("labels", "import", path, user="bob")
    assert result.exit_code == 2 and "belong to login 'alice'" in result.output, result.output
    assert len(rows(db, "select * from labels")) == 1


def test_the_login_of_a_roster_name_imports_its_labels(db, decl, tmp_path):
    path = _alice_file(tmp_path, decl)
    assert invoke("round", "new", "imp", "-d", str(decl), "-f", "rm,cd,ls", "-a", "alice",
                  "-a", "bob", user="lead").exit_code == 0
    result = invoke("labels", "import", path, user="alice")
    assert result.exit_code == 0 and "3 labels" in result.output, result.output
    assert rows(db, "select account from annotators where name = 'alice'") == [
        {"account": "alice"}]


def test_an_override_is_recorded_and_shown(db, decl):
    _bob_labels(db, decl)
    result = invoke("label", "-r", "r", "-a", "bob", "--revise", "--override",
                    "bob asked me to fix a typo", input="q\n", user="lead")
    assert result.exit_code == 0, result.output
    assert SECRET in result.output and "recorded in the reveal log" in result.output
    with Store(db) as store:
        (entry,) = store.reveal_log("r")
    assert (entry["who"], entry["what"], entry["override"]) == (
        "lead", "labels of bob (annotator session)", "bob asked me to fix a typo")
    assert entry["created"]
    status = invoke("round", "status", "r")
    assert "override by lead" in status.output and "bob asked me to fix a typo" in status.output
    result = invoke("agree", "-r", "r", "--subset", "all", "--override", "pilot", user="lead")
    assert result.exit_code == 0
    assert "labels of bob" in result.output and "bob asked me to fix a typo" in result.output
    data = json.loads(invoke("agree", "-r", "r", "--subset", "all", "--override", "again",
                             "--json", user="lead").output)
    assert [r["override"] for r in data["reveals"]] == [
        "bob asked me to fix a typo", "pilot", "again"]


def test_an_opening_under_another_name_records_the_login(db, decl):
    """``--by`` names who asks, and a login could give another's name: the reveal log then
    keeps the login beside it, so an override is never laid at someone else's door alone."""
    _bob_labels(db, decl)
    result = invoke("agree", "-r", "r", "--subset", "all", "--override", "just looking",
                    "--by", "lead", user="mallory")
    assert result.exit_code == 0, result.output
    assert invoke("agree", "-r", "r", "--subset", "all", "--override", "mine",
                  user="lead").exit_code == 0
    with Store(db) as store:
        log = [(r["who"], r["what"], r["override"]) for r in store.reveal_log("r")]
    assert log == [
        ("lead", "all labels (adjudication session, by login mallory)", "just looking"),
        ("lead", "all labels (adjudication session)", "mine")]
    status = invoke("round", "status", "r").output
    assert "override by lead" in status and "by login mallory): just looking" in status


def test_an_override_export_is_readable_by_its_login_only(db, decl, tmp_path):
    """Exported from a blind, open round with an override, the label sets (every reason in
    them) are the overrider's: an annotator still labelling cannot read them in the release
    folder, where the reveal log would not see it. Once the round is closed, they are
    published as before."""
    _bob_labels(db, decl)
    out = tmp_path / "release"
    result = invoke("labels", "export", "-r", "r", "-o", str(out), "--override", "audit",
                    user="lead")
    assert result.exit_code == 0, result.output
    assert SECRET in (out / "bob.json").read_text()
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {
        "alice.json": 0o600, "bob.json": 0o600}
    _label_rest(db, "alice", "bob")
    assert invoke("labels", "export", "-r", "r", "-o", str(out), user="lead").exit_code == 0
    assert stat.S_IMODE((out / "bob.json").stat().st_mode) == 0o644


def test_an_override_boundary_is_readable_by_its_login_only(db, decl, tmp_path):
    """A boundary adjudicated from a blind, open round with an override gives away labels
    (``--policy annotator:bob`` is bob's): like an override export, it is the overrider's
    file until the round closes; a boundary of the closed round is published as before."""
    _bob_labels(db, decl)
    _label_rest(db, "bob", destructive=False, reason="fine", submit=False)
    out = tmp_path / "bob.json"
    result = invoke("adjudicate", "-r", "r", "--policy", "annotator:bob", "--out", str(out),
                    "--override", "audit", user="lead")
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    _label_rest(db, "alice", "bob")
    result = invoke("adjudicate", "-r", "r", "--out", str(out), "--force", user="lead")
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


@pytest.mark.parametrize("login", ["lead", "mallory"])
def test_closing_under_the_creators_name_records_the_login(db, decl, login):
    """``round close --by lead`` from another login closes the round (``--by`` is a name,
    not an identity) but the round says which login did it, as the reveal log does for an
    opening: closing opens the labels of those who submitted."""
    _bob_labels(db, decl)
    _label_rest(db, "alice")
    result = invoke("round", "close", "r", "--by", "lead", user=login)
    assert result.exit_code == 0, result.output
    with Store(db) as store:
        closed_by = store.round("r").closed_by
    assert closed_by == ("lead" if login == "lead" else "lead (login mallory)")
    status = invoke("round", "status", "r", user="bob")
    assert status.exit_code == 0 and f"closed by {closed_by} at" in status.output, status.output


def test_blank_or_hostile_override_is_no_override(db, decl):
    _bob_labels(db, decl)
    for reason in ("   ", "\x1b[2J"):
        result = invoke("label", "-r", "r", "-a", "bob", "--override", reason, input="q\n",
                        user="mallory")
        assert result.exit_code == 2 and SECRET not in result.output
    with Store(db) as store:
        assert store.reveal_log("r") == []


def test_library_sessions_obey_the_same_rule(tmp_path, decl):
    with Store(tmp_path / "x.db") as store:
        for a in ("alice", "bob"):
            store.add_annotator(a)
        store.new_round("r", load_inputs(decl).select(["rm", "cd"]), ["alice", "bob"],
                        created_by="lead")
        bob = store.annotator_session("r", "bob", account="bob")
        bob.label("rm", True, SECRET)
        with pytest.raises(BlindnessError):
            store.annotator_session("r", "bob", account="mallory")
        # opening before bob wrote anything did not let mallory keep the name either
        early = store.annotator_session("r", "alice", account="mallory")
        store.annotator_session("r", "alice", account="alice").label("cd", False, "")
        with pytest.raises(BlindnessError):
            early.label("rm", True, "sneaky")
        peek = store.annotator_session("r", "bob", account="lead", override="audit")
        assert peek.overridden and peek.labels()["rm"].reason == SECRET
        assert [(r["who"], r["override"]) for r in store.reveal_log("r")] == [("lead", "audit")]
        # once the round is closed the labels are no secret, and no override is needed
        bob.label("cd", False, "")
        bob.submit()
        store.annotator_session("r", "alice", account="alice").label("rm", True, "mine")
        store.annotator_session("r", "alice", account="alice").submit()
        assert store.annotator_session("r", "bob", account="mallory").labels()


# ---------------------------------------------------------------- the roster


def test_roster_remove_and_close(tmp_path, decl):
    with Store(tmp_path / "x.db") as store:
        for a in ("alice", "bob", "carol"):
            store.add_annotator(a)
        store.new_round("r", load_inputs(decl).select(["rm"]), ["alice", "bob", "carol"],
                        created_by="lead")
        with pytest.raises(AnnotationError, match="not an annotator of round r .*alice, bob"):
            store.annotator_session("r", "alcie")
        with pytest.raises(AnnotationError, match="only lead"):
            store.remove_from_round("r", "carol", by="bob")
        store.remove_from_round("r", "carol", by="lead")
        assert store.round_annotators("r") == ["alice", "bob"]
        s = store.annotator_session("r", "alice", account="alice")
        s.label("rm", True, "deletes")
        s.submit()
        with pytest.raises(AnnotationError, match="the roster is final"):
            store.remove_from_round("r", "alice", by="lead")
        with pytest.raises(AnnotationError, match="only lead"):
            store.close_round("r", by="alice")
        assert not store.is_closed("r")
        store.close_round("r", by="lead")
        assert store.is_closed("r") and store.round("r").closed_by == "lead"
        with pytest.raises(AnnotationError, match="closed"):
            store.annotator_session("r", "bob", account="bob").label("rm", False, "x")
        with pytest.raises(AnnotationError, match="closed"):
            store.add_annotator("dave") and store.add_to_round("r", "dave", by="lead")
        assert set(store.adjudication_session("r", "lead").labels()) == {"alice", "bob"}


def test_round_remove_and_close_commands(db, decl):
    assert invoke("round", "new", "r", "-d", str(decl), "-f", "rm", "-a", "alice", "-a", "bob",
                  user="lead").exit_code == 0
    assert invoke("round", "remove", "r", "-a", "bob", user="alice").exit_code == 2
    result = invoke("round", "remove", "r", "-a", "bob", user="lead")
    assert result.exit_code == 0 and "annotators alice" in result.output
    assert invoke("label", "-r", "r", "-a", "alice", "--submit", input="y gone\n",
                  user="alice").exit_code == 0
    result = invoke("round", "close", "r", user="lead")
    assert result.exit_code == 0 and "closed at" in result.output


def test_round_add_is_the_creators_and_never_reopens_a_round(db, decl):
    assert invoke("round", "new", "r", "-d", str(decl), "-f", "rm", "-a", "alice",
                  user="lead").exit_code == 0
    result = invoke("round", "add", "r", "-a", "zed", user="eve")
    assert result.exit_code == 2 and "only lead, who created round r, may add zed" in \
        result.output, result.output
    assert invoke("round", "add", "r", "-a", "bob", user="lead").exit_code == 0
    assert invoke("round", "remove", "r", "-a", "bob", user="lead").exit_code == 0
    assert invoke("label", "-r", "r", "-a", "alice", "--submit", input="y gone\n",
                  user="alice").exit_code == 0
    # every annotator submitted: the round is closed, and adding one would open it again
    result = invoke("round", "add", "r", "-a", "zed", user="lead")
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "takes no new annotator" in result.output
    assert rows(db, "select annotator from round_annotators") == [{"annotator": "alice"}]
    assert invoke("agree", "-r", "r", user="lead").exit_code == 0
    assert invoke("round", "close", "r", user="lead").exit_code == 0
    result = invoke("round", "add", "r", "-a", "zed", user="lead")
    assert result.exit_code == 2 and "was closed by lead" in result.output, result.output


@pytest.mark.parametrize("own", [True, False], ids=["owned-name", "unused-name"])
def test_an_unsubmitted_set_never_reopens_a_round_whose_labels_could_be_read(
        db, decl, tmp_path, own):
    """Every annotator of a blind round submitted, so anyone may read its labels; a set that
    is not submitted (here: no label at all) would join and open it again, and its login would
    then label after reading them. Refused as `round add` is: one line, nothing written."""
    if own:  # alice's login owns the name from another round
        assert invoke("round", "new", "r0", "-d", str(decl), "-f", "cd", "-a", "alice",
                      user="alice").exit_code == 0
        assert invoke("label", "-r", "r0", "-a", "alice", input="n\n",
                      user="alice").exit_code == 0
    assert invoke("round", "new", "r", "-d", str(decl), "-f", "rm,cd", "-a", "bob",
                  user="lead").exit_code == 0
    assert invoke("label", "-r", "r", "-a", "bob", "--submit",
                  input=f"y {SECRET}\ny {SECRET}\n", user="bob").exit_code == 0
    result = invoke("labels", "export", "-r", "r", "-o", str(tmp_path / "out"), user="alice")
    assert result.exit_code == 0, result.output  # closed: anyone reads bob's labels
    doc = json.loads((tmp_path / "out" / "bob.json").read_text())
    assert SECRET in doc["labels"][0]["reason"]
    doc["annotator"]["name"], doc["submitted"] = "alice", None
    for item in doc["labels"]:
        item.update(destructive=None, reason=None, labelled=None, updated=None)
    empty = tmp_path / "alice.json"
    empty.write_text(json.dumps(doc))
    before = _counts(db)
    result = invoke("labels", "import", str(empty), user="alice")
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and (
        "every annotator of round r has submitted: it is closed, and alice's label set is "
        "not submitted, so it would open the round again") in result.output, result.output
    assert _counts(db) == before
    with Store(db) as store:
        assert store.is_closed("r") and store.round_annotators("r") == ["bob"]
    result = invoke("label", "-r", "r", "-a", "alice", input="y copied\n", user="alice")
    assert result.exit_code == 2 and "not an annotator of round r" in result.output


def _label_set_files(tmp_path, decl, names=("A1", "A2", "A3")) -> dict[str, str]:
    """name -> the submitted label set of each annotator of a blind round "imp" over rm, cd
    and ls, made in another database (A1 says rm is destructive, the others say no)."""
    with Store(tmp_path / "elsewhere.db") as store:
        for who in names:
            store.add_annotator(who)
        store.new_round("imp", load_inputs(decl).select(["rm", "cd", "ls"]), names,
                        created_by="lead")
        for who in names:
            session = store.annotator_session("imp", who, account=who)
            for f in session.functions():
                yes = f.name == "rm" and who == "A1"
                session.label(f.name, yes, "deletes" if yes else "harmless")
            session.submit()
        paths = write_label_sets(store.adjudication_session("imp", "lead"), tmp_path / "o")
    return {p.stem: str(p) for p in paths}


def _counts(db) -> list[int]:
    return [rows(db, f"select count(*) as n from {t}")[0]["n"]
            for t in ("annotators", "round_annotators", "labels", "decisions", "adjudications")]


@pytest.mark.parametrize("begin", ["boundary", "decision"])
def test_no_annotator_joins_by_import_once_adjudication_has_begun(db, decl, tmp_path, begin):
    """Sets imported one after another make a round in which everyone has submitted, and a
    further set still joins it; once a boundary or a manual decision is recorded, a set for a
    new name is one line naming the round and why, exit 2, nothing written (it joined, and
    the round's agreement and decisions no longer described its roster)."""
    files = _label_set_files(tmp_path, decl)
    for who in ("A1", "A2"):
        result = invoke("labels", "import", files[who], user="lead")
        assert result.exit_code == 0 and "3 labels" in result.output, result.output
    with Store(db) as store:
        assert store.is_closed("imp")  # every annotator submitted, and A2 still joined
    if begin == "boundary":
        result = invoke("adjudicate", "-r", "imp", "--out", str(tmp_path / "b.json"),
                        user="lead")
        assert result.exit_code == 0, result.output
        said = "(1 boundary recorded, on the annotators it had then)"
    else:
        with Store(db) as store:
            store.adjudication_session("imp", "lead").decide("cd", True, "moves you")
        said = "(1 manual decision recorded, on the annotators it had then)"
    before = _counts(db)
    result = invoke("labels", "import", files["A3"], user="lead")
    assert result.exit_code == 2, result.output
    assert result.output == (
        f"error: {files['A3']}: the adjudication of round imp has begun {said}; it takes no "
        "new annotator, so A3's label set is not imported (import it under another round "
        "name)\n"), result.output
    assert _counts(db) == before
    assert rows(db, "select annotator from round_annotators") == [
        {"annotator": "A1"}, {"annotator": "A2"}]
    # a set already there is still "already present"; under another round name A3 joins
    assert "already present" in invoke("labels", "import", files["A1"], user="lead").output
    result = invoke("labels", "import", files["A3"], "--round", "imp2", user="lead")
    assert result.exit_code == 0 and "A3 -> round imp2: 3 labels" in result.output
    # nor does anyone join or leave by `round add` / `round remove`
    result = invoke("round", "add", "imp", "-a", "zed", user="lead")
    assert result.exit_code == 2 and "the adjudication of round imp has begun" in result.output


def test_the_roster_of_an_open_round_is_final_once_a_decision_is_recorded(db, decl, tmp_path):
    """A round that is not blind can be adjudicated while open: from its first manual
    decision no annotator is added or removed, by hand or by import (both were accepted);
    an annotator already on the roster still imports its own set, as it may still label."""
    files = _label_set_files(tmp_path, decl)
    assert invoke("round", "new", "imp", "-d", str(decl), "-f", "rm,cd,ls", "--not-blind",
                  "-a", "A1", "-a", "A2", "-a", "bob", user="lead").exit_code == 0
    assert invoke("labels", "import", files["A1"], user="A1").exit_code == 0
    with Store(db) as store:
        store.adjudication_session("imp", "lead").decide("rm", True, "it deletes")
    before = _counts(db)
    for args, says in (
        (("round", "add", "imp", "-a", "zed"), "; it takes no new annotator"),
        (("round", "remove", "imp", "-a", "bob"), ": the roster is final"),
        (("labels", "import", files["A3"]), "; it takes no new annotator, so A3's label set"),
    ):
        result = invoke(*args, user="lead")
        assert result.exit_code == 2 and result.output.count("\n") == 1, (args, result.output)
        assert ("the adjudication of round imp has begun (1 manual decision recorded, on the "
                "annotators it had then)" + says) in result.output, (args, result.output)
    assert _counts(db)[1:] == before[1:]
    assert rows(db, "select annotator from round_annotators order by annotator") == [
        {"annotator": "A1"}, {"annotator": "A2"}, {"annotator": "bob"}]
    result = invoke("labels", "import", files["A2"], user="A2")
    assert result.exit_code == 0 and "A2 -> round imp: 3 labels" in result.output, result.output


def test_a_draft_left_when_the_round_was_closed_does_not_count(db, decl):
    assert invoke("round", "new", "c", "-d", str(decl), "-f", "rm,cd,ls", "-a", "alice",
                  "-a", "bob", user="lead").exit_code == 0
    assert invoke("label", "-r", "c", "-a", "alice", "--submit",  # cd, ls, rm
                  input="n\nn\ny gone\n", user="alice").exit_code == 0
    assert invoke("label", "-r", "c", "-a", "bob", "-f", "cd", input="y draft, unsure\nq\n",
                  user="bob").exit_code == 0
    assert invoke("round", "close", "c", user="lead").exit_code == 0
    result = invoke("adjudicate", "-r", "c", "--dry-run", user="lead")
    assert result.exit_code == 0, result.output
    assert "1 destructive of 3" in result.output and "bob" not in result.output
    data = json.loads(invoke("agree", "-r", "c", "--subset", "all", "--json",
                             user="lead").output)
    assert data["splits"] == [] and "bob" not in json.dumps(data["agreement"])
    result = invoke("agree", "-r", "c", "-a", "alice,bob", user="lead")
    assert result.exit_code == 2 and "bob did not submit round c" in result.output
    # the draft is kept: its label set can still be exported
    assert invoke("labels", "export", "-r", "c", "-a", "bob", "-o", str(db.parent / "out"),
                  user="lead").exit_code == 0


# ---------------------------------------------------------------- blindness as an API


def test_the_store_reads_no_label():
    """Every query on the labels table lives in the sessions; the store only counts."""
    source = inspect.getsource(store_module)
    reads = re.findall(r"from labels\b[^\"]*", source)
    assert reads and all("count(*)" in source[source.index(r) - 120:source.index(r)]
                         for r in reads), reads
    members = {n for n, _ in inspect.getmembers(Store)}
    assert not {"_label_rows", "_write_label", "_submit", "_import_labels", "_open_labels",
                "_submitted_at", "_tx", "_rows", "db"} & members


def test_sessions_do_not_reach_into_the_store():
    from careful_engine.annotation import release, sessions

    for module in (sessions, release):
        source = inspect.getsource(module)
        assert not re.search(r"store\._[a-z]", source), module.__name__
        assert not re.search(r"_store\._[a-z]", source), module.__name__


def test_the_workbench_refuses_bad_and_foreign_names(tmp_path, decl, monkeypatch):
    import asyncio

    from tests.workbench_support import open_label
    from workbench.app import WorkbenchApp, demo_settings

    (tmp_path / "runs").mkdir()
    with Store(tmp_path / "careful.db") as store:
        store.add_annotator("bob")
        store.new_round("r", load_inputs(decl).select(["rm", "cd"]), ["bob"], created_by="lead")
        store.annotator_session("r", "bob", account="bob").label("rm", True, SECRET)
    monkeypatch.setenv("USER", "mallory")

    async def go():
        app = WorkbenchApp(demo_settings(tmp_path))
        async with app.run_test(size=(100, 30)) as pilot:
            screen = await open_label(pilot)
            screen.query_one("#annotator").focus()  # the name field takes keys once focused
            for name, message in (("a:b", "invalid annotator name"),
                                  ("Bob", "confused with the existing annotator 'bob'"),
                                  ("bob", "blind and still open")):
                screen.query_one("#annotator").value = name
                await pilot.press("enter")
                await pilot.pause()
                assert screen.session is None, name
                notes = [n.message for n in app._notifications]
                assert any(message in n for n in notes), (name, notes)
            assert SECRET not in str(app.export_screenshot())

    asyncio.run(go())
    with Store(tmp_path / "careful.db") as store:
        assert [a.name for a in store.annotators()] == ["bob"]
        assert store.reveal_log("r") == []


def test_one_convention_for_lists_of_names():
    """Commas and spaces separate names (a CLI option, a workbench field); other whitespace
    stays in its name, so that the name check refuses it rather than correcting it."""
    from careful_engine.annotation.names import parse_names

    assert parse_names(["A1,A2", "A3", "A1"]) == ["A1", "A2", "A3"]
    assert parse_names("alice, bob  carol,") == ["alice", "bob", "carol"]
    assert parse_names("alice\n") == ["alice\n"] and parse_names("a\tb") == ["a\tb"]
    assert parse_names(None) == parse_names("") == parse_names(" , ") == []
