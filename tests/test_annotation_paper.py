"""The paper's situation (§4): four blind label sets, agreement, and 'any' -> paper-final."""

from __future__ import annotations

import json

import pytest

from careful_engine.annotation.errors import AnnotationError
from careful_engine.annotation.release import (
    import_label_set,
    read_label_set,
    write_label_sets,
)
from careful_engine.annotation.store import Store
from careful_engine.effects import boundary
from tests.fakes import paper_round


@pytest.fixture(scope="module")
def paper(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("paper")
    store = Store(tmp / "careful.db")
    paper_round.build(store, tmp)
    yield store, tmp
    store.close()


def test_any_gives_the_paper_final_boundary(paper, tmp_path):
    store, _ = paper
    session = store.adjudication_session("paper", "lead")
    assert not session.overridden
    result = session.adjudicate("any")
    final = boundary.load("paper-final")
    assert set(result.destructive) == set(final.destructive)
    assert len(result.destructive) == 24

    b, path = session.write_boundary(result, "paper-any", path=tmp_path / "paper-any.json")
    loaded = boundary.load(path)  # what the scorer's --boundary reads
    assert set(loaded.destructive) == set(final.destructive)
    assert loaded.decided_by == ("A1", "A2", "A3", "A4")
    assert "'any'" in loaded.method
    data = json.loads(path.read_text())
    assert data["round"] == "paper" and data["policy"] == "any"
    assert data["declarations_sha256"] == store.round("paper").declarations_sha256
    echo = next(d for d in data["destructive"] if d["name"] == "echo")
    assert echo["reason"].startswith(f"A2: {paper_round.reason('A2', 'echo')} | A3: ")
    assert echo["reason"].endswith("[2 of 4 (A2, A3); any]")
    # the file exists now: no silent replacement, a forced one bumps the version
    with pytest.raises(AnnotationError, match="exists"):
        session.write_boundary(result, "paper-any", path=path)
    session.write_boundary(result, "paper-any", path=path, force=True)
    assert boundary.load(path).version == 2


def test_agreement_matches_the_paper(paper):
    store, _ = paper
    session = store.adjudication_session("paper", "lead")
    writes = session.agreement("writes")
    assert len(writes.functions) == 49
    expected = {  # §4: raw agreement of 49 writes and Cohen's kappa
        ("A1", "A2"): (45, 0.81), ("A1", "A3"): (46, 0.86), ("A2", "A3"): (48, 0.95),
        ("A1", "A4"): (43, 0.74), ("A2", "A4"): (39, 0.57), ("A3", "A4"): (40, 0.61),
    }
    for (a, b), (agree, kappa) in expected.items():
        pair = writes.pair(a, b)
        assert (pair.agree, pair.n) == (agree, 49), (a, b)
        assert round(pair.kappa, 2) == kappa, (a, b, pair.kappa)
    assert round(writes.fleiss, 2) == 0.75
    everything = session.agreement("all")
    assert len(everything.functions) == 128
    assert round(everything.fleiss, 2) == 0.80
    # the paper says 38 writes are unanimous; its own splits leave 39 (49 - 10)
    assert writes.unanimous == 39
    assert everything.yes == {"A1": 15, "A2": 15, "A3": 16, "A4": 22}
    assert 0.7 < everything.alpha < 0.9


def test_splits_are_the_papers(paper):
    store, _ = paper
    splits = {s.function: s for s in store.adjudication_session("paper", "lead").splits()}
    assert set(splits) == set(paper_round.DISPUTED)
    assert splits["echo"].yes == ("A2", "A3") and splits["echo"].no == ("A1", "A4")
    assert splits["rmdir"].yes == ("A1", "A4")
    assert splits["cancel_order"].no == ("A2",)
    assert splits["contact_customer_support"].yes == ("A4",)
    assert splits["mv"].reasons["A4"] == paper_round.reason("A4", "mv")
    assert splits["mv"].proposed is True and splits["mv"].kind == "write"


def test_other_policies(paper):
    store, _ = paper
    session = store.adjudication_session("paper", "lead")
    with pytest.raises(AnnotationError, match="tied on .*echo"):
        session.adjudicate("majority")
    assert len(session.adjudicate("majority", tie="yes").destructive) == 17
    assert len(session.adjudicate("majority", tie="no").destructive) == 14
    # the preliminary three-annotator majority: 16 here (the paper reports 17)
    three = session.adjudicate("majority", annotators=["A1", "A2", "A3"])
    assert len(three.destructive) == 16
    assert not three.ties
    assert len(session.adjudicate("unanimous").destructive) == 13
    sizes = {a: len(session.adjudicate(f"annotator:{a}").destructive)
             for a in paper_round.ANNOTATORS}
    assert sizes == {"A1": 15, "A2": 15, "A3": 16, "A4": 22}
    with pytest.raises(AnnotationError, match="unknown policy"):
        session.adjudicate("most")
    with pytest.raises(AnnotationError, match="not annotators"):
        session.adjudicate("any", annotators=["A9"])


def test_manual_decisions_are_appended_and_never_change_labels(tmp_path):
    store = Store(tmp_path / "careful.db")
    paper_round.build(store, tmp_path)
    session = store.adjudication_session("paper", "lead")
    session.decide("echo", False, "overwriting is editing, not deleting")
    result = session.adjudicate("any")
    assert "echo" not in result.destructive and len(result.destructive) == 23
    assert result.outcomes["echo"].by == "decision"
    assert session.labels()["A2"]["echo"].destructive is True  # the label is untouched
    session.decide("echo", True, "on reflection, content is lost")
    assert [d.destructive for d in session.decisions()] == [False, True]
    result = session.adjudicate("any")
    assert "manual decision by lead" in result.destructive["echo"]
    _, path = session.write_boundary(result, "with-decisions", path=tmp_path / "b.json")
    data = json.loads(path.read_text())
    assert data["decisions"] == [
        {"function": "echo", "destructive": True, "author": "lead",
         "reason": "on reflection, content is lost", "created": data["decisions"][0]["created"]}
    ]
    assert len(session.adjudicate("any", use_decisions=False).destructive) == 24
    with pytest.raises(AnnotationError, match="reason"):
        session.decide("rm", False, " ")
    with pytest.raises(AnnotationError, match="not a function"):
        session.decide("nope", True, "x")
    store.close()


def test_release_round_trip_and_readjudication(paper, tmp_path):
    store, _ = paper
    session = store.adjudication_session("paper", "lead")
    paths = write_label_sets(session, tmp_path / "release")
    assert sorted(p.name for p in paths) == ["A1.json", "A2.json", "A3.json", "A4.json"]
    doc = read_label_set(tmp_path / "release" / "A2.json")
    assert doc["annotator"] == {"name": "A2", "kind": "llm", "model": "claude-opus-5-5"}
    echo = next(x for x in doc["labels"] if x["function"] == "echo")
    assert echo["destructive"] is True
    assert echo["reason"] == paper_round.reason("A2", "echo")
    assert doc["submitted"]

    elsewhere = Store(tmp_path / "elsewhere.db")
    for p in paths:
        name, n = import_label_set(elsewhere, read_label_set(p))
        assert (name, n) == ("paper", 128)
    assert import_label_set(elsewhere, read_label_set(paths[0])) == ("paper", 0)  # idempotent
    assert elsewhere.is_closed("paper")
    assert elsewhere.round("paper").declarations_sha256 == store.round("paper").declarations_sha256
    result = elsewhere.adjudication_session("paper", "someone else").adjudicate("any")
    assert set(result.destructive) == set(boundary.load("paper-final").destructive)

    # a conflicting set under the same annotator name is refused
    altered = read_label_set(paths[0])
    altered["labels"][0]["reason"] = "something else entirely"
    with pytest.raises(AnnotationError, match="other labels"):
        import_label_set(elsewhere, altered)
    # a set over other inputs cannot join the round
    other = read_label_set(paths[0])
    other["round"]["declarations_sha256"] = "0" * 64
    with pytest.raises(AnnotationError, match="other inputs"):
        import_label_set(elsewhere, other)
    elsewhere.close()


def test_release_validation(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "careful.boundary/1"}')
    with pytest.raises(AnnotationError, match="not a label set"):
        read_label_set(bad)
    bad.write_text("{")
    with pytest.raises(AnnotationError, match="invalid JSON"):
        read_label_set(bad)
