"""``careful generate``: options, manifest, progress, exit codes on bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.core import bfcl
from careful_engine.generation.dataset import parse_categories, parse_ids, select
from careful_engine.generation.errors import GenerationError
from careful_engine.scoring.settings import engine_version
from tests.fakes.openai_server import FakeCompletionsServer

_load()
cli = CliRunner()
KEY = "Qwen/Qwen3-0.6B"


def _gen(tmp_path, *args: str, url: str = "http://127.0.0.1:9/v1"):
    return cli.invoke(app, ["generate", "--model", KEY, "--runs-dir", str(tmp_path),
                            "--endpoint", url, "--tokenizer", "server", *args],
                      catch_exceptions=False)


def test_generate_writes_bfcl_layout_and_a_manifest(tmp_path):
    with FakeCompletionsServer(KEY, responder=lambda r: "Done.") as s:
        res = _gen(tmp_path, "--run", "smoke", "--categories", "base,miss_param", "--limit",
                   "2", "--condition", "hints", url=s.url)
        url = s.url
    assert res.exit_code == 0, res.output
    folder = tmp_path / "smoke" / "Qwen_Qwen3-0.6B"
    for cat in ("multi_turn_base", "multi_turn_miss_param"):
        lines = (folder / "multi_turn" / f"BFCL_v4_{cat}_result.json").read_text().splitlines()
        assert [json.loads(x)["id"] for x in lines] == [f"{cat}_0", f"{cat}_1"]
    m = json.loads((folder / "careful_run.json").read_text())
    assert m["model"] == m["decoder"] == KEY
    assert m["handler"] == "bfcl_eval.model_handler.local_inference.qwen.QwenHandler"
    assert m["condition"] == "hints" and len(m["declarations_sha256"]) == 64
    assert m["boundary"] == {"name": "paper-final", "version": 1}
    # the engine version the score lines of this run will name (one definition of it)
    assert m["bfcl_eval"] == bfcl.BFCL_VERSION and m["engine"] == engine_version()
    assert m["started"] and m["ended"] and m["status"] == "complete"
    assert m["settings"]["temperature"] == 0.001
    assert m["settings"]["tokenizer"] == "server" and m["settings"]["endpoint"] == url
    assert m["tokens"]["requests"] > 0 and m["tokens"]["output"] > 0
    assert m["conversations"] == {"multi_turn_base": {"written": 2},
                                  "multi_turn_miss_param": {"written": 2}}
    assert "complete, 4 generated" in res.output
    # same command again: nothing to do
    with FakeCompletionsServer(KEY, responder=lambda r: "Done.") as s:
        again = _gen(tmp_path, "--run", "smoke", "--categories", "base,miss_param", "--limit",
                     "2", "--condition", "hints", url=s.url)
        assert s.completions() == []
    assert again.exit_code == 0 and "4 already written" in again.output


def test_resume_refuses_other_settings(tmp_path):
    with FakeCompletionsServer(KEY, responder=lambda r: "Done.") as s:
        assert _gen(tmp_path, "--run", "r", "--ids", "multi_turn_base_0",
                    url=s.url).exit_code == 0
        res = _gen(tmp_path, "--run", "r", "--ids", "multi_turn_base_1", "--condition",
                   "confirm", url=s.url)
    assert res.exit_code == 2
    assert "condition: 'standard' there, 'confirm' now" in res.output


def test_a_hostile_setting_in_the_manifest_is_clipped_in_the_refusal(tmp_path):
    """A setting of 200,000 characters planted in the manifest is named clipped, escapes
    shown, not echoed whole into the refusal."""
    with FakeCompletionsServer(KEY, responder=lambda r: "Done.") as s:
        assert _gen(tmp_path, "--run", "r", "--ids", "multi_turn_base_0",
                    url=s.url).exit_code == 0
        path = tmp_path / "r" / "Qwen_Qwen3-0.6B" / "careful_run.json"
        manifest = json.loads(path.read_text())
        manifest["condition"] = "\x1b[31m" + "c" * 200_000
        path.write_text(json.dumps(manifest))
        res = _gen(tmp_path, "--run", "r", "--ids", "multi_turn_base_0", url=s.url)
    assert res.exit_code == 2, res.output
    assert len(res.output) < 2_000 and "\x1b" not in res.output, res.output[:3000]
    assert "other settings" in res.output and "characters)" in res.output


def test_counts_the_parse_budget_leaves_short_are_reported(tmp_path, monkeypatch):
    """When a result file's lines do not all fit the parse budget, the manifest's counts
    fall short: each file's unread lines are reported (``file:line [id]: reason``), on screen
    and in the manifest, not left silent."""
    from careful_engine.core import runs

    with FakeCompletionsServer(KEY, responder=lambda r: "Done.") as s:
        first = _gen(tmp_path, "--run", "r", "--ids", "multi_turn_base_0,multi_turn_base_1",
                     url=s.url)
        assert first.exit_code == 0, first.output
        folder = tmp_path / "r" / "Qwen_Qwen3-0.6B"
        path = folder / "multi_turn" / "BFCL_v4_multi_turn_base_result.json"
        line = path.read_text().splitlines()[0]
        monkeypatch.setattr(runs, "MAX_KEPT_BYTES", runs.parsed_bound(line) + 1)
        res = _gen(tmp_path, "--run", "r", "--ids", "multi_turn_base_0,multi_turn_base_1",
                   url=s.url)
    assert res.exit_code == 0, res.output
    m = json.loads((folder / "careful_run.json").read_text())
    assert m["conversations"] == {"multi_turn_base": {"written": 1}}
    assert len(m["count_problems"]) == 1
    assert m["count_problems"][0].startswith(f"{path}:2 [multi_turn_base_1]: line 2 and the ")
    assert f"{path.name}:2 [multi_turn_base_1]: line 2" in "".join(res.output.split("\n"))


@pytest.mark.parametrize(("manifest", "reason"), [
    ("{", ":1: not JSON"),
    ("[]", "a list, not a manifest"),
    ('{"sessions": 5}', "'sessions' is an int, not a list"),
    ('{"categories": ["multi_turn_x"]}', "'categories' holds something other than"),
    ('{"sessions": [NaN]}', "NaN is not a JSON value"),
    (b"\xff{", "not UTF-8"),
])
def test_resume_refuses_a_manifest_it_cannot_trust(tmp_path, manifest, reason):
    """A damaged manifest cannot say how the conversations already there were made: the run
    is not resumed (one line naming the file), rather than mixed with other settings."""
    with FakeCompletionsServer(KEY, responder=lambda r: "Done.") as s:
        assert _gen(tmp_path, "--run", "r", "--ids", "multi_turn_base_0",
                    url=s.url).exit_code == 0
        before = len(s.completions())
        path = tmp_path / "r" / "Qwen_Qwen3-0.6B" / "careful_run.json"
        if isinstance(manifest, bytes):
            path.write_bytes(manifest)
        else:
            path.write_text(manifest)
        res = _gen(tmp_path, "--run", "r", "--ids", "multi_turn_base_0,multi_turn_base_1",
                   "--condition", "confirm", url=s.url)
        assert len(s.completions()) == before  # nothing generated
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    text = " ".join(res.output.split())
    assert "careful_run.json" in text and reason in text and "not resumed" in text


def test_repair_names_line_and_id(tmp_path):
    from careful_engine.generation.results import repair

    path = tmp_path / "BFCL_v4_multi_turn_base_result.json"
    good = json.dumps({"id": "multi_turn_base_0", "result": []})
    path.write_text("\n".join([good, "{nope", json.dumps({"x": 1}), good, "{cut"]))
    ids, notes = repair(path)
    assert ids == {"multi_turn_base_0"}
    assert notes == [f"{path.name}: dropped a last line cut short (4 characters)",
                     f"{path.name}:2: dropped a line that is not JSON",
                     f"{path.name}:3: dropped a line without a string id",
                     f"{path.name}:4 [multi_turn_base_0]: dropped a duplicate of line 1"]
    assert path.read_text() == good + "\n"
    # an id of another category, or of none, can never run: dropped, named, not counted
    foreign = [json.dumps({"id": i, "result": "planted"})
               for i in ("not_a_real_id", "multi_turn_miss_func_3")]
    path.write_text("\n".join([good, *foreign]) + "\n")
    ids, notes = repair(path, category="multi_turn_base")
    assert ids == {"multi_turn_base_0"} and path.read_text() == good + "\n"
    assert notes == [f"{path.name}:2 [not_a_real_id]: dropped, the id is not in multi_turn_base",
                     f"{path.name}:3 [multi_turn_miss_func_3]: dropped, the id is not in "
                     "multi_turn_base"]


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e309"])
def test_repair_drops_a_line_holding_a_number_that_is_not_finite(tmp_path, number):
    """A result line holding NaN, Infinity or 1e309 (read as infinity) is no JSON value: it
    is dropped, said, and its conversation runs again."""
    from careful_engine.generation.results import repair

    path = tmp_path / "BFCL_v4_multi_turn_base_result.json"
    good = json.dumps({"id": "multi_turn_base_0", "result": []})
    bad = f'{{"id": "multi_turn_base_1", "result": [], "latency": {number}}}'
    path.write_text(good + "\n" + bad + "\n")
    ids, notes = repair(path, category="multi_turn_base")
    assert ids == {"multi_turn_base_0"} and path.read_text() == good + "\n"
    assert len(notes) == 1 and notes[0].startswith(f"{path.name}:2: dropped a line that is "
                                                   "not usable JSON (")
    assert number.lstrip("-") in notes[0]


def test_a_line_longer_than_score_reads_is_dropped_unparsed(tmp_path, monkeypatch):
    """Resuming drops a result line longer than ``careful score`` reads (it runs again), and
    a ledger line that long is skipped, neither parsed: a planted line of 120 MB of ``{},``
    took 3 GB to parse."""
    from careful_engine.core import runs
    from careful_engine.generation import results
    from careful_engine.generation.spend import read_ledger

    monkeypatch.setattr(runs, "MAX_ENTRY_CHARS", 5_000)
    good = json.dumps({"id": "multi_turn_base_0", "result": []})
    long = json.dumps({"id": "multi_turn_base_1", "result": [{}] * 2_000})
    path = tmp_path / "BFCL_v4_multi_turn_base_result.json"
    path.write_text(good + "\n" + long + "\n")
    ids, notes = results.repair(path, category="multi_turn_base")
    assert ids == {"multi_turn_base_0"} and path.read_text() == good + "\n"
    assert notes == [f"{path.name}:2: line is {len(long):,} characters long, more than the "
                     "5,000 a line is read with; dropped"]
    ledger = tmp_path / "careful_spend.jsonl"
    ledger.write_text(json.dumps({"status": "ok"}) + "\n" + long + "\n")
    skipped: list[int] = []
    assert read_ledger(ledger, skipped) == [{"status": "ok"}] and skipped == [2]


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "no/such-model"], "not in bfcl-eval"),
    (["--categories", "multi_turn_everything"], "unknown category"),
    (["--ids", "multi_turn_base_999"], "no multi-turn conversation"),
    (["--condition", "lenient"], "unknown condition"),
])
def test_bad_input_exits_2(tmp_path, args, message):
    base = ["generate", "--model", KEY, "--run", "x", "--runs-dir", str(tmp_path),
            "--endpoint", "http://127.0.0.1:9/v1", "--ready-timeout", "0"]
    res = cli.invoke(app, [*base, *args])
    assert res.exit_code == 2, res.output
    assert message in res.output


def test_bad_script_is_a_usage_error(tmp_path):
    res = cli.invoke(app, ["generate", "--model", KEY, "--run", "x", "--script", "kind"])
    assert res.exit_code == 2 and "named-only" in res.output


def test_selection_helpers():
    assert parse_categories(["base", "long_context"]) == ("multi_turn_base",
                                                          "multi_turn_long_context")
    assert parse_categories(None) == bfcl.CATEGORIES
    assert parse_ids(["multi_turn_base_1,multi_turn_base_0", "multi_turn_base_1"]) == [
        "multi_turn_base_1", "multi_turn_base_0"]
    with pytest.raises(GenerationError):
        parse_categories(["simple"])
    picked = select(("multi_turn_base",), ids=["multi_turn_miss_func_3"])
    assert list(picked) == ["multi_turn_miss_func"]
    assert [e["id"] for e in picked["multi_turn_miss_func"]] == ["multi_turn_miss_func_3"]
    assert [e["id"] for e in select(("multi_turn_base",), limit=3)["multi_turn_base"]] == [
        "multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2"]
