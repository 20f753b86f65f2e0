"""The UI-free engine module behind the workbench, careful_engine.browse, on the two small scored
runs of tests/workbench_support.py (the ``runs_template`` fixture)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from careful_engine import browse
from careful_engine.annotation.signals import load_inputs
from careful_engine.demo import reference as demo
from tests.workbench_support import IDS


@pytest.fixture(scope="module")
def beta(runs_template) -> browse.RunBrowser:
    from careful_engine.scoring.score import load_effects

    (ref,) = browse.find_runs([runs_template / "beta"])
    return browse.RunBrowser(ref, load_effects())


def test_find_runs_labels_match_the_leaderboard(runs_template) -> None:
    refs = browse.find_runs([runs_template / "alpha", runs_template / "beta"])
    assert [(r.label, r.model, r.decoder) for r in refs] == [
        ("alpha", "reference", demo.DECODER), ("beta", "careless", demo.DECODER)]
    pairs = [(runs_template / "a", "m"), (runs_template / "a", "n"), (Path("/x/b"), "m"),
             (Path("/y/b"), "m")]
    # one model in a run: the run's name; several: run/model; the same name twice: the
    # folders above it that tell them apart
    assert browse.label_entries(pairs) == ["a/m", "a/n", "x/b", "y/b"]
    assert browse.label_entries([(Path("/x/b"), "m")]) == ["b"]


def test_rows_come_from_the_files_and_the_score_lines(beta) -> None:
    rows = beta.rows()
    assert [r.id for r in rows] == IDS and beta.scored and not beta.stale
    assert beta.missing() == 196
    assert [r.official_valid for r in rows] == [False, True, True, True]
    assert rows[0].error_type == "multi_turn:instance_state_mismatch"
    assert rows[0].rules["collateral"] == 1 and rows[1].rules["failed"] == 1
    assert [r.steps for r in rows] == [10, 9, 11, 4]


def test_a_score_line_longer_than_an_entry_is_one_problem_not_parsed(tmp_path,
                                                                     monkeypatch) -> None:
    """A conversations.jsonl line longer than a result line is read from is left out with its
    line, unparsed (one of 120 MB of ``{},`` takes gigabytes); the other lines are read."""
    from careful_engine.core import runs

    monkeypatch.setattr(runs, "MAX_ENTRY_CHARS", 5_000)
    path = tmp_path / "conversations.jsonl"
    long = json.dumps({"id": "multi_turn_base_1", "model": "m", "x": [{}] * 2_000})
    path.write_text(long + "\n" + json.dumps({"id": "multi_turn_base_2", "model": "x"}) + "\n")
    problems: list = []
    assert browse.read_scores(path, "m", problems) == {}
    assert [(p.line, p.message) for p in problems] == [
        (1, f"line is {len(long):,} characters long, more than the 5,000 a line is read with; "
            "skipped")]


def test_filters_narrow_without_replaying(beta) -> None:
    rows = beta.rows()
    assert [r.id for r in browse.Filter(failed_only=True).apply(rows)] == [IDS[0]]
    assert [r.id for r in browse.Filter(rule="failed").apply(rows)] == IDS[:2]
    assert browse.error_types(rows) == ["multi_turn:instance_state_mismatch"]
    assert browse.hit_rules(rows)[:1] == ["collateral"]
    assert browse.Filter(category="multi_turn_long_context").apply(rows) == []


def test_the_view_of_a_failing_conversation(beta) -> None:
    view = beta.open(IDS[0])
    assert not view.verdict.valid and view.safe_valid is False
    div = view.divergence
    assert div is not None and div.record.text == "rm(file_name='previous_report.pdf')"
    assert {"collateral", "beyond_destructive"} <= set(div.rules)
    assert div.reference is None  # beyond the reference
    assert [c.kind for c in div.changes] == ["removed"]
    assert [t.status for t in view.turns] == ["fail", "not reached", "not reached",
                                              "not reached"]
    first = view.calls[0]
    assert first.reference is not None and first.reference.text == "cd(folder='document')"
    # navigation is over lines: calls, failing turns, hits, the divergence
    start = view.divergence_line()
    assert view.lines[start].call == div.index
    assert view.lines[view.next_call(start)].call == div.index + 1
    assert view.lines[view.next_call(start, -1)].call == div.index - 1
    assert view.next_failing_turn(start) is None
    assert view.lines[view.next_hit(-1)].call == div.index
    assert beta.open(IDS[0]) is view  # cached


def test_scripted_answers_and_questions_in_place(beta) -> None:
    view = beta.open(IDS[2])
    kinds = [(ln.kind, ln.step) for ln in view.lines if ln.turn == 0]
    assert kinds[:4] == [("turn", None), ("user", None), ("text", 0), ("answer", 0)]
    assert view.verdict.valid and view.turns[0].answers[0]["answer"] == "yes"


def test_model_score_from_score_lines_equals_scoring(runs_template, beta) -> None:
    from careful_engine.scoring.score import load_effects, score_run

    rebuilt = browse.model_score(beta.ref, beta.summaries(), decoder=beta.decoder_used())
    scored = score_run(runs_template / "beta", effects=load_effects()).scores[0]
    for attr in ("accuracy", "safe_accuracy", "strict_accuracy"):
        assert rebuilt.mean_accuracy(attr) == scored.mean_accuracy(attr)
    cs = rebuilt.categories["multi_turn_base"]
    assert cs.rule_totals() == scored.categories["multi_turn_base"].rule_totals()
    assert browse.model_score(beta.ref, {}, decoder=None) is None


def test_function_review_is_blind_and_complete() -> None:
    from careful_engine.effects.declarations import load

    inputs = load_inputs()
    review = browse.function_review(inputs.functions["rm"], load())
    facts = dict(review.facts)
    assert facts["kind"] == "write" and facts["proposal"] == "destructive candidate"
    assert "entries-removed" in facts["signals"] and review.examples
    assert review.examples[0].changes[0]["kind"] == "removed"
    assert "def rm(" in review.source
    bare = browse.function_review(inputs.functions["rm"], None)
    assert dict(bare.facts)["kind"] == "write" and not bare.examples


def test_function_review_says_what_the_review_sheet_says() -> None:
    """The Label screen's facts are the review sheet's, word for word, for every function
    (the card dropped 'N failed calls changed it anyway': add_contact, startEngine; and
    listed signals in the file's order, not the signals' order)."""
    import re

    from careful_engine.effects import review as sheet
    from careful_engine.effects.declarations import load

    decl, inputs = load(), load_inputs()
    text = sheet.markdown(decl)
    for name, fn in inputs.functions.items():
        facts = dict(browse.function_review(fn, decl).facts)
        section = text.split(f".{name}\n", 1)[1].split("\n## ", 1)[0]
        for label, key in (("Evidence", "evidence"), ("Signals", "signals")):
            line = re.search(rf"^- {label}: (.*)$", section, re.M).group(1)
            assert facts[key] == line, (name, label)
    assert "failed calls changed it anyway" in dict(
        browse.function_review(inputs.functions["add_contact"], decl).facts)["evidence"]


def test_scoring_from_a_thread_never_replays_in_this_process(tmp_path, runs_template,
                                                             monkeypatch) -> None:
    """What the workbench's scoring worker calls: from a thread, with ``in_process=False``
    and a forkserver, every conversation is replayed in worker processes (scoring here is
    made to fail, and nothing fails), progress arrives in the calling thread, and the lines
    are byte for byte those of scoring in this process."""
    import threading

    from careful_engine.scoring import batch

    (ref,) = browse.find_runs([runs_template / "beta"])
    here = tmp_path / "here" / browse.SCORES_NAME
    serial = browse.score_to_file(ref.run, ref.model, here, decoder=ref.decoder)

    def no_replay_here(*a, **k):
        raise AssertionError("a conversation was replayed in the app's process")

    monkeypatch.setattr(batch, "score_file", no_replay_here)
    out = tmp_path / "workers" / browse.SCORES_NAME
    seen: list[tuple[int, int, str]] = []
    got: dict = {}

    def work() -> None:
        got["run"] = browse.score_to_file(
            ref.run, ref.model, out, decoder=ref.decoder, jobs=1, mp_context="forkserver",
            in_process=False, on_progress=lambda d, t: seen.append(
                (d, t, threading.current_thread().name)))

    thread = threading.Thread(target=work, name="scoring")
    thread.start()
    thread.join(180)
    assert not thread.is_alive()
    assert [str(p) for p in got["run"].problems] == [str(p) for p in serial.problems]
    assert not any("not scored" in str(p) for p in serial.problems)
    assert out.read_bytes() == here.read_bytes()
    assert seen[0][:2] == (0, 200) and seen[-1][:2] == (200, 200)
    assert [d for d, *_ in seen] == sorted(d for d, *_ in seen)
    assert {name for *_, name in seen} == {"scoring"}


def test_the_engine_imports_no_textual() -> None:
    code = ("import careful_engine, careful_engine.scoring.score, careful_engine.scoring.rules, "
            "careful_cli, careful_engine.annotation, careful_engine.browse, "
            "careful_cli.workbench; import sys; "
            "bad = sorted(m for m in sys.modules if m.startswith(('textual', 'workbench'))); "
            "assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_score_cache_of_a_long_or_undecodable_run_name_can_be_made(tmp_path) -> None:
    """A run folder named with 250 characters (or bytes that are not UTF-8) gets a cache folder
    it can create: the name plus the key went past the 255 bytes a file name may have, and
    the run could not be scored in the workbench."""
    import os

    from careful_engine import browse

    names = ["r" * 250, "é" * 127, os.fsdecode(b"run-\xff\xfe")]
    paths = set()
    for name in names:
        ref = browse.RunRef(tmp_path / name, "model", (), "decoder")
        path = browse.cache_scores_path(ref, tmp_path / "cache")
        assert len(os.fsencode(path.parent.parent.name)) <= 255
        path.parent.mkdir(parents=True)
        path.write_text("")
        paths.add(path)
    assert len(paths) == len(names)
    long_a = browse.cache_scores_path(browse.RunRef(tmp_path / ("a" * 250), "m", (), "d"))
    long_b = browse.cache_scores_path(browse.RunRef(tmp_path / ("a" * 249 + "b"), "m", (), "d"))
    assert long_a != long_b  # cut to the same name, told apart by the key


def test_hit_navigation_skips_hits_the_run_does_not_show(beta) -> None:
    """Without the confirmation protocol every destructive call is 'unconfirmed' and the
    stepper shows no such tag: h must not stop on a call whose only hits are those."""
    import dataclasses

    from careful_engine.scoring.rules import RULE_REGISTRY

    confirm_only = {k for k, r in RULE_REGISTRY.items() if r.confirm}
    skipped = 0
    for row in beta.rows():
        protocol = beta.open(row.id)  # (beta was generated under the protocol)
        for view in (protocol, dataclasses.replace(protocol, confirm=False)):
            stops = set()
            line = -1
            while (line := view.next_hit(line)) is not None:
                stops.add(line)
            for i, ln in enumerate(view.lines):
                if ln.kind != "call":
                    continue
                rules = set(view.calls[ln.call].rules)
                if rules and rules <= confirm_only and not view.confirm:
                    skipped += 1
                    assert i not in stops, (row.id, view.calls[ln.call].record.text)
                elif rules:
                    assert i in stops, (row.id, view.calls[ln.call].record.text)
            assert view.any_hit() == bool(stops)
    assert skipped > 0  # the run has such calls: the test can fail


# ---------------------------------------------------------------- score lines this install wrote


def _forge(path: Path) -> None:
    """Every line passing under BFCL and safe, its rules zeroed; then made newer than the
    results (the figures a received run folder could carry)."""
    import os

    lines = []
    for text in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(text)
        row.update(official_valid=True, official_error_type=None,
                   official_error_message=None, official_failed_turn=None, safe_valid=True)
        if isinstance(row.get("rules"), dict):
            row["rules"] = {k: 0 if type(v) is int else v for k, v in row["rules"].items()}
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.utime(path)


def _browser(run: Path) -> browse.RunBrowser:
    from careful_engine.scoring.score import load_effects

    (ref,) = browse.find_runs([run])
    return browse.RunBrowser(ref, load_effects(), cache_dir=run.parent / "wb-cache")


def test_forged_score_lines_are_not_shown(workdir) -> None:
    """A run folder's conversations.jsonl edited to pass everything (and touched) is not
    shown: no valid signature of this install's, so its lines are not used and the run reads
    as not scored (before: the Leaderboard showed the forged figures); nor are its lines
    parsed for problems (they were listed among the run's problems)."""
    beta = workdir / "runs" / "beta"
    genuine = _browser(beta)
    assert genuine.scored and genuine.untrusted is None  # the fixture's, made here: reused
    assert browse.model_score(genuine.ref, genuine.summaries(), decoder=genuine.decoder_used()) is not None
    _forge(beta / browse.SCORE_DIR / browse.SCORES_NAME)
    with (beta / browse.SCORE_DIR / browse.SCORES_NAME).open("a") as f:
        f.write("not a score line\n")
    forged = _browser(beta)
    assert not forged.summaries() and not forged.scored
    assert browse.model_score(forged.ref, forged.summaries(), decoder=forged.decoder_used()) is None
    assert "changed since this install wrote it; not used" in forged.untrusted
    assert forged.score_problems == []  # a file not used has no line problems to report


def test_score_lines_of_another_install_are_not_shown(workdir, monkeypatch, tmp_path) -> None:
    """A genuine conversations.jsonl with its signature, copied from another install (another
    key), is not used either; a run folder with no signature neither."""
    beta = workdir / "runs" / "beta"
    monkeypatch.setenv("CAREFUL_CACHE_DIR", str(tmp_path / "other-install"))
    other = _browser(beta)
    assert not other.summaries() and "not signed by this install" in other.untrusted
    monkeypatch.undo()
    (beta / browse.SCORE_DIR / (browse.SCORES_NAME + ".mac")).unlink()
    unsigned = _browser(beta)
    assert not unsigned.summaries() and "no signature" in unsigned.untrusted


def test_careful_score_lines_are_reused_by_the_workbench(workdir) -> None:
    """`careful score` on this install signs what it writes: the workbench reuses the lines
    (no re-scoring), and not once a result file changes under them."""
    from typer.testing import CliRunner

    from careful_cli import _load, app

    beta = workdir / "runs" / "beta"
    scores = beta / browse.SCORE_DIR / browse.SCORES_NAME
    scores.unlink()
    (scores.parent / (scores.name + ".mac")).unlink()
    _load()
    result = CliRunner().invoke(app, ["score", str(beta), "--quiet"])
    assert result.exit_code in (0, 1) and scores.is_file(), result.output  # 1: ids missing
    browser = _browser(beta)
    assert browser.scored and browser.untrusted is None
    assert browser.scores_path == scores
    assert browse.model_score(browser.ref, browser.summaries(), decoder=browser.decoder_used()) is not None
    result_file = next(beta.rglob("BFCL_v4_multi_turn_base_result.json"))
    result_file.write_bytes(result_file.read_bytes() + b"\n")
    changed = _browser(beta)
    assert not changed.summaries() and "other result files" in changed.untrusted


def test_a_run_from_another_install_is_scored_again(workdir, monkeypatch, tmp_path) -> None:
    """A run folder with its score lines, copied from another install: the workbench scores it
    itself (as `s` on Replay does, into its cache) and shows those lines, even with the copied
    file newer; the copied file stays noted as not used."""
    import os

    from careful_engine.scoring.score import score_to_file

    beta = workdir / "runs" / "beta"
    monkeypatch.setenv("CAREFUL_CACHE_DIR", str(tmp_path / "this-install"))
    received = _browser(beta)
    assert not received.summaries() and "not signed by this install" in received.untrusted
    cached = browse.cache_scores_path(received.ref, beta.parent / "wb-cache")
    score_to_file(beta, received.ref.model, cached, decoder=received.ref.decoder)
    os.utime(beta / browse.SCORE_DIR / browse.SCORES_NAME)  # the newer of the two
    rescored = _browser(beta)
    assert rescored.scored and rescored.scores_path == cached
    assert browse.model_score(rescored.ref, rescored.summaries(), decoder=rescored.decoder_used()) is not None
    assert "not signed by this install" in rescored.untrusted


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_result_file_changed_while_it_is_scored_is_not_reused(workdir, jobs: int) -> None:
    """The signature hashed the result files after scoring: a file changed while it was
    scored was listed with its new bytes, so the workbench reused figures made from the old
    ones. Each file is now listed with the hash of the bytes it was scored from (taken as
    they were read, in whichever process read them)."""
    from careful_engine.scoring.score import score_to_file

    beta = workdir / "runs" / "beta"
    browser = _browser(beta)
    result_file = next(beta.rglob("BFCL_v4_multi_turn_base_result.json"))
    changed: list[bool] = []

    def change_it(*_args: object) -> None:
        if not changed:  # once: the file read, its conversations being scored
            changed.append(True)
            result_file.write_bytes(result_file.read_bytes() + b"\n")

    cached = browse.cache_scores_path(browser.ref, beta.parent / "wb-cache")
    score_to_file(beta, browser.ref.model, cached, decoder=browser.ref.decoder, jobs=jobs,
                  on_entry=change_it)
    assert changed
    again = _browser(beta)
    assert not again.summaries() and "other result files" in (again.untrusted or "")


def test_lines_scored_under_another_budget_are_not_reused(workdir) -> None:
    """`careful score --max-seconds-per-conversation` tiny stops replays (counted as failed):
    its lines record the budget, so the workbench (default budget) does not reuse them and
    says why (before: reused silently, figures lower); the tables state the budget."""
    from typer.testing import CliRunner

    from careful_cli import _load, app
    from careful_engine.core.budget import BUDGET_EXCEEDED

    beta = workdir / "runs" / "beta"
    out = workdir / "tight"
    _load()
    result = CliRunner().invoke(app, ["score", str(beta), "--out", str(out),
                                      "--max-seconds-per-conversation", "1e-9", "--jobs", "1"])
    assert result.exit_code == 1, result.output
    lines = [json.loads(t) for t in (out / browse.SCORES_NAME).read_text().splitlines()]
    assert any(row["official_error_type"] == BUDGET_EXCEEDED for row in lines)
    assert {json.dumps(row["scored_with"]["budget"]) for row in lines} == {'{"seconds": 1e-09}'}
    assert "replay budget not the default: seconds 1e-09" in (out / "rules.md").read_text()
    header, first = (out / "rules.csv").read_text().splitlines()[:2]
    assert header.endswith(",safe rule,replay budget") and first.endswith(",seconds 1e-09")
    assert "replay budget not the default" in " ".join(result.output.split())
    scores = beta / browse.SCORE_DIR / browse.SCORES_NAME
    for name in (browse.SCORES_NAME, browse.SCORES_NAME + ".mac"):
        (scores.parent / name).write_bytes((out / name).read_bytes())
    browser = _browser(beta)
    assert not browser.scored and "replay budget" in browser.mismatch, browser.mismatch
