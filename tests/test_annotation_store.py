"""The annotation store: inputs, labels and their rules, submission, and blindness."""

from __future__ import annotations

import hashlib
import inspect
import json

import pytest

from careful_engine.annotation.errors import (
    AnnotationError,
    BlindnessError,
    LabelError,
    RoundError,
)
from careful_engine.annotation.sessions import AdjudicationSession, AnnotatorSession
from careful_engine.annotation.signals import fallback_inputs, load_inputs
from careful_engine.annotation.store import Store, default_db_path, repo_root
from careful_engine.core import bfcl
from tests.annotation_db import raw

SECRET = "SECRET-REASON-OF-A2"


@pytest.fixture
def decl(tmp_path):
    path = tmp_path / "effects.json"
    path.write_text(json.dumps({"functions": {
        "rm": {"kind": "write", "proposed": True, "signals": ["entries-removed"]},
        "cd": {"kind": "write", "proposed": False, "idempotent": False},
        "ls": {"kind": "read", "proposed": False},
        "mv": {"kind": "write", "proposed": True},
    }}))
    return path


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "careful.db")
    yield s
    s.close()


def _round(store, decl, name="r", blind=True, annotators=("A1", "A2", "A3")):
    for a in annotators:
        store.add_annotator(a)
    return store.new_round(name, load_inputs(decl), annotators, blind=blind, created_by="lead")


def _label_all(store, name, annotator, reason_yes="destructive", submit=True):
    session = store.annotator_session(name, annotator)
    for f in session.functions():
        session.label(f.name, bool(f.proposed), reason_yes if f.proposed else "")
    if submit:
        session.submit()
    return session


def test_inputs_from_declarations_and_fallback(decl):
    inputs = load_inputs(decl)
    assert inputs.sha256 == hashlib.sha256(decl.read_bytes()).hexdigest()
    assert list(inputs.functions) == ["cd", "ls", "mv", "rm"]  # bfcl class order, then name
    assert inputs.functions["rm"].proposed is True
    assert inputs.functions["rm"].extra == {"signals": ["entries-removed"]}
    assert inputs.functions["cd"].extra == {"idempotent": False}
    assert list(inputs.select("writes").functions) == ["cd", "mv", "rm"]
    assert list(inputs.select(["rm", "ls"]).functions) == ["ls", "rm"]
    with pytest.raises(AnnotationError, match="not among"):
        inputs.select(["nope"])
    fb = fallback_inputs()
    assert len(fb.functions) == 128 and set(fb.functions) == set(bfcl.function_class())
    assert {f.kind for f in fb.functions.values()} == {"unknown"}
    assert {f.proposed for f in fb.functions.values()} == {None}
    assert fb.sha256 == fallback_inputs().sha256
    with pytest.raises(AnnotationError, match="declares no writes"):
        fb.select("writes")


@pytest.mark.parametrize("content, match", [
    ("{", "invalid JSON"),
    ('{"x": 1}', "'functions'"),
    ('{"functions": {"nope": {}}}', "not multi-turn functions"),
    ('{"functions": {"rm": {"kind": "delete"}}}', "kind must be"),
    ('{"functions": {"rm": {"proposed": "yes"}}}', "expected true, false or null"),
])
def test_bad_declarations(tmp_path, content, match):
    path = tmp_path / "d.json"
    path.write_text(content)
    with pytest.raises(AnnotationError, match=match):
        load_inputs(path)


def test_default_db_path(monkeypatch, tmp_path):
    monkeypatch.delenv("CAREFUL_DB", raising=False)
    assert default_db_path() == repo_root() / "annotations" / "careful.db"
    assert (repo_root() / "careful_engine").is_dir()
    monkeypatch.setenv("CAREFUL_DB", str(tmp_path / "x.db"))
    assert default_db_path() == tmp_path / "x.db"


def test_schema_wal_and_round_records(store, decl):
    assert raw(store.path).journal_mode == "wal"
    rnd = _round(store, decl)
    assert rnd.blind and rnd.created_by == "lead"
    assert rnd.declarations_sha256 == hashlib.sha256(decl.read_bytes()).hexdigest()
    assert rnd.declarations_source == str(decl)
    assert [f.name for f in store.round_functions("r")] == ["cd", "ls", "mv", "rm"]
    with pytest.raises(RoundError, match="exists already"):
        _round(store, decl)
    with pytest.raises(RoundError, match="no round"):
        store.round("missing")
    with pytest.raises(AnnotationError, match="invalid round name"):
        store.new_round("../x", load_inputs(decl))
    with pytest.raises(AnnotationError, match="unknown annotators"):
        store.new_round("r2", load_inputs(decl), ["ghost"])
    # reopening the file keeps everything
    again = Store(store.path)
    assert again.round("r").declarations_sha256 == rnd.declarations_sha256
    again.close()


def test_annotators(store):
    store.add_annotator("A2", "llm", "claude-x")
    assert store.add_annotator("A2", "llm", "claude-x").model == "claude-x"  # idempotent
    with pytest.raises(AnnotationError, match="exists already"):
        store.add_annotator("A2", "llm", "claude-y")
    with pytest.raises(AnnotationError, match="needs its model"):
        store.add_annotator("A3", "llm")
    with pytest.raises(AnnotationError, match="kind"):
        store.add_annotator("A3", "robot")


def test_label_rules(store, decl):
    _round(store, decl)
    s = store.annotator_session("r", "A1")
    with pytest.raises(LabelError, match="reason is required for every 'destructive'"):
        s.label("cd", True)
    with pytest.raises(LabelError, match="departing from the signals' proposal"):
        s.label("rm", False, "  ")
    with pytest.raises(LabelError, match="not a function of round"):
        s.label("echo", False)
    with pytest.raises(LabelError, match="true or false"):
        s.label("ls", "no")
    s.label("ls", False)  # agrees with the proposal: no reason needed
    s.label("rm", False, "the file can be recreated")
    s.label("rm", True, "on second thought: content is lost")  # revision before submitting
    labels = s.labels()
    assert labels["rm"].destructive and labels["rm"].reason.startswith("on second")
    assert raw(store.path)["labels"].count == 2
    (old,) = list(raw(store.path)["label_revisions"].rows)
    assert (old["function"], old["destructive"], old["reason"]) == (
        "rm", 0, "the file can be recreated")
    assert s.remaining() == ["cd", "mv"]
    with pytest.raises(LabelError, match="unlabelled"):
        s.submit()
    s.label("cd", False)
    s.label("mv", True, "the source disappears")
    s.submit()
    with pytest.raises(LabelError, match="labels are final"):
        s.label("ls", True, "too late")
    with pytest.raises(LabelError, match="already"):
        s.submit()
    assert store.annotator_session("r", "A1").submitted


def test_unknown_annotator_in_round(store, decl):
    _round(store, decl)
    store.add_annotator("Z")
    with pytest.raises(AnnotationError, match="not an annotator of round"):
        store.annotator_session("r", "Z")
    store.add_to_round("r", "Z", by="lead")
    assert "Z" in store.round_annotators("r")


def test_annotator_session_never_reveals_other_labels(store, decl):
    _round(store, decl)
    _label_all(store, "r", "A2", reason_yes=SECRET)
    _label_all(store, "r", "A3", reason_yes=SECRET)
    session = store.annotator_session("r", "A1")
    session.label("rm", True, "mine")
    with pytest.raises(BlindnessError):
        session.others()
    # every public, argument-free member of the session: nothing carries another's label
    seen = []
    for name, _member in inspect.getmembers(AnnotatorSession):
        if name.startswith("_") or name == "submit":  # submit writes; its error is a count
            continue
        value = getattr(session, name)
        if callable(value):
            params = [p for p in inspect.signature(value).parameters.values()
                      if p.default is inspect.Parameter.empty]
            if params:
                continue
            try:
                value = value()
            except BlindnessError:
                continue
        seen.append(repr(value))
    assert seen and not any(SECRET in text or "'A2'" in text for text in seen)
    assert set(session.labels()) == {"rm"}
    # nor does the status, which carries counts only
    status = store.status("r")
    assert SECRET not in repr(status)
    assert {p.annotator: p.labelled for p in status.progress} == {"A1": 1, "A2": 4, "A3": 4}


def test_agreement_and_labels_only_after_every_submission(store, decl):
    _round(store, decl)
    _label_all(store, "r", "A2")
    _label_all(store, "r", "A3")
    assert not store.is_closed("r")
    with pytest.raises(BlindnessError, match="A1 has not submitted"):
        store.adjudication_session("r", "A2")  # an annotator wanting a peek
    with pytest.raises(BlindnessError):
        store.adjudication_session("r", "lead", override="   ")
    assert store.status("r").reveals == ()

    with pytest.raises(BlindnessError):  # nor by building the session directly
        AdjudicationSession(store, object(), "r", "A2")
    early = store.adjudication_session("r", "lead", override="checking the pipeline")
    assert early.overridden
    (reveal,) = store.status("r").reveals
    assert (reveal["who"], reveal["override"]) == ("lead", "checking the pipeline")
    assert set(early.labels()["A1"]) == set()

    _label_all(store, "r", "A1")
    assert store.is_closed("r")
    session = store.adjudication_session("r", "lead")
    assert not session.overridden
    assert store.status("r").reveals[-1]["override"] is None
    assert session.agreement("writes").pair("A1", "A2").agree == 3
    assert store.round("r") and raw(store.path)["rounds"].get("r")["closed_at"]


def test_round_that_is_not_blind(store, decl):
    _round(store, decl, blind=False)
    _label_all(store, "r", "A2", reason_yes=SECRET)
    s1 = store.annotator_session("r", "A1")
    others = s1.others()
    assert others["A2"]["rm"].reason == SECRET
    assert store.adjudication_session("r", "lead").labels()["A2"]["rm"].destructive


def test_llm_calls_are_recorded(store, decl):
    _round(store, decl)
    s = store.annotator_session("r", "A1")
    s.log_call("rm", model="m", ok=1, input_tokens=12, output_tokens=3)
    (row,) = list(raw(store.path)["llm_calls"].rows)
    assert (row["function"], row["input_tokens"], row["ok"]) == ("rm", 12, 1)
