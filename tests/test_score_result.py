"""careful_engine.scoring.result: a scored conversation's line in conversations.jsonl, written
and read back in one place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.core.trajectory import Outcome
from careful_engine.demo import reference as demo
from careful_engine.scoring.result import SCORES_NAME, ConversationResult
from careful_engine.scoring.score import load_effects, score_run

_load()

BASE = ("multi_turn_base",)


@pytest.fixture(scope="module")
def flawed(tmp_path_factory) -> tuple[Path, list[ConversationResult]]:
    """The demo's SYNTHETIC flawed run (base only), scored with the effect rules."""
    root = tmp_path_factory.mktemp("flawed")
    demo.write_flawed_run(root, BASE)
    run = score_run(root, effects=load_effects())
    return root, [r for _, cs in run.files for r in cs.results]


def test_every_result_reads_back_as_it_was_written(flawed) -> None:
    _, results = flawed
    assert any(r.blame for r in results) and any(r.rules.hits for r in results)
    for r in results:
        line = json.loads(json.dumps(r.to_json()))
        back = ConversationResult.from_json(line)
        assert back.to_json() == r.to_json(), r.id
        assert (back.safe_valid, back.strict_valid, back.decode) == (
            r.safe_valid, r.strict_valid, +r.decode)
        assert back.reference_destructive == r.reference_destructive


def test_a_line_keeps_the_decode_counts_beside_the_rules(flawed) -> None:
    """The rules' step count once overwrote the decode counts (both were "steps")."""
    _, results = flawed
    line = results[0].to_json()
    assert line["steps"] == {o.value: results[0].decode.get(o, 0) for o in Outcome}
    assert line["model_steps"] == results[0].rules.steps > 0


def test_careful_score_writes_the_lines_the_reader_reads(flawed, tmp_path: Path) -> None:
    root, results = flawed
    res = CliRunner().invoke(app, ["score", str(root), "--out", str(tmp_path), "-q", "-j", "1"])
    assert res.exit_code == 0, res.output
    lines = (tmp_path / SCORES_NAME).read_text().splitlines()
    back = [ConversationResult.from_json(json.loads(x)) for x in lines]
    assert [r.to_json() for r in back] == [r.to_json() for r in results]
    assert all("scored_with" in json.loads(x) for x in lines)


@pytest.mark.parametrize("change", [
    "not an object", {"official_valid": "yes"}, {"id": 7}, {"model_calls": -1},
    {"rules": {"collateral": "2"}}, {"hits": {"rule": "x"}}, {"hits": [{"rule": "x"}]},
    {"safe_rule": {"collateral": "some", "duplicates": "all"}}, {"blame": []},
    {"blame": {"turn": 0, "call": 3, "step": None, "reason": "state"}},
    {"steps": {"calls": 1.5}}, {"official_failed_turn": True}, {"replay_stopped": 3},
])
def test_a_line_of_another_shape_is_a_value_error(flawed, change) -> None:
    """A line is data from a file: a bad field gives ValueError (one reason), never another
    exception."""
    _, results = flawed
    line = next(r for r in results if r.blame).to_json()
    bad = change if isinstance(change, str) else {**line, **change}
    with pytest.raises(ValueError):
        ConversationResult.from_json(bad)


def test_a_line_without_the_effect_rules_has_none() -> None:
    line = {"model": "m", "category": "multi_turn_base", "id": "multi_turn_base_0",
            "official_valid": False, "official_error_type": "careful:missing_entry",
            "official_error_message": "entry missing", "official_failed_turn": None,
            "steps": {"calls": 0, "no_call": 0, "decode_error": 0}, "model_calls": 0,
            "model_failed_calls": 0, "replay_stopped": None}
    r = ConversationResult.from_json(line)
    assert r.rules is None and not r.safe_valid and r.strict_valid is None
    assert r.to_json() == line


def test_a_result_without_detail_keeps_what_ranking_reads() -> None:
    from collections import Counter

    from careful_engine.core.trajectory import Outcome, Verdict
    from careful_engine.scoring.blame import Blame
    from careful_engine.scoring.result import ConversationResult
    from careful_engine.scoring.rules import ConversationRules, Hit

    rules = ConversationRules(Counter(collateral=1, unconfirmed=1),
                              [Hit("collateral", 0, ["rm(file_name='a')"], [1], [0])],
                              [Counter(collateral=1)], steps=3, reference_destructive=1,
                              answers=Counter(yes=1))
    full = ConversationResult("m", "multi_turn_base", "multi_turn_base_7",
                              Verdict(False, "multi_turn:state", "differs", 1, {"a": 1}),
                              Counter({Outcome.CALLS: 3}), 2, 1, None, rules,
                              Blame(1, "rm(file_name='a')", 1, ["a"]), True, 1)
    brief = full.without_detail()
    assert brief.rules.hits == [] and brief.rules.per_turn == [] and brief.blame is None
    assert (brief.verdict.error_message, brief.verdict.details) == (None, {})
    v = brief.verdict
    assert (v.valid, v.error_type, v.turn) == (False, "multi_turn:state", 1)
    for attr in ("model", "category", "id", "decode", "calls", "failed_calls", "confirm",
                 "reference_destructive", "safe_valid", "strict_valid"):
        assert getattr(brief, attr) == getattr(full, attr), attr
    assert brief.rules.counts == full.rules.counts and brief.rules.answers == full.rules.answers
    assert full.rules.hits and full.blame is not None  # the original is untouched


def test_an_inference_error_has_no_rule_counts(tmp_path: Path) -> None:
    """An inference error (nothing replayed) is scored with null rules, not zeros, and reads
    back so; a line an earlier version wrote with zeros reads as nothing replayed too, so the
    workbench's totals agree with careful score's."""
    from collections import Counter

    from careful_engine.scoring.rules import coverage, rule_count
    from careful_engine.scoring.score import CategoryScore

    from .perturb import inference_errors, write_run

    run = inference_errors(write_run(tmp_path / "run", {}), 3)
    results = [r for _, cs in score_run(run, effects=load_effects()).files for r in cs.results]
    errors = [r for r in results if r.verdict.error_type == "multi_turn:inference_error"]
    assert len(errors) == len(results) - 3
    assert all(r.rules is None and not r.safe_valid and r.blame is not None
               and r.reference_destructive is not None for r in errors)
    line = errors[0].to_json()
    assert line["rules"] is None and line["safe_valid"] is False and line["blame"]
    back = ConversationResult.from_json(line)
    assert back.rules is None and back.to_json() == line
    old = {**line, "safe_rule": {"collateral": "attempted", "duplicates": "all"},
           "rules": dict.fromkeys(("collateral", "failed", "asked"), 0), "model_steps": 0}
    assert ConversationResult.from_json(old).rules is None
    cs = CategoryScore("m", "multi_turn_base",
                       [ConversationResult.from_json(x.to_json()) for x in results])
    totals = cs.rule_totals()
    assert coverage(totals) == (3, len(results)) and rule_count(totals, "failed", False) == 0
    none = CategoryScore("m", "multi_turn_base", errors).rule_totals()
    assert rule_count(none, "collateral", False) is None
    assert rule_count(Counter(), "collateral", False) == 0  # (a sum with nothing to say)
