"""``careful score`` and ``careful demo`` end to end, including bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.core import bfcl
from careful_engine.demo import reference as demo

_load()
runner = CliRunner()
CATEGORY = "multi_turn_base"


def _run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def _lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "conversations.jsonl").read_text().splitlines()]


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _reference_lines(n: int | None = None) -> list[str]:
    convs = bfcl.conversations(CATEGORY)[: n or None]
    return [json.dumps(demo.reference_entry(c)) for c in convs]


def test_demo_scores_100(tmp_path: Path) -> None:
    res = _run("demo", "--out", str(tmp_path / "ref"))
    assert res.exit_code == 0, res.output
    lines = _lines(tmp_path / "ref" / "careful-score")
    assert len(lines) == 800
    assert all(line["official_valid"] for line in lines)
    for cat in bfcl.CATEGORIES:
        score = tmp_path / "ref/careful-score/score/reference/multi_turn" / f"BFCL_v4_{cat}_score.json"
        header = json.loads(score.read_text().splitlines()[0])
        assert header == {"accuracy": 1.0, "correct_count": 200, "total_count": 200}
    assert "100.0" in res.output


def test_bad_input_is_reported_and_the_rest_scored(tmp_path: Path) -> None:
    lines = _reference_lines()
    ids = [json.loads(x)["id"] for x in lines]
    bad = list(lines)
    bad[3] = "this is not json"
    bad[5] = bad[4]  # duplicate id (entry 4 twice, entry 5 missing)
    bad[7] = json.dumps({"id": ids[7], "result": "Error during inference: boom",
                         "traceback": "Traceback ..."})
    bad[9] = json.dumps({"id": ids[9], "result": [5, "text", {"x": 1}]})  # odd steps and turns
    bad[11] = json.dumps({"id": "multi_turn_base_9999", "result": []})
    del bad[20]  # a missing id
    bad[-1] = bad[-1][: len(bad[-1]) // 2]  # truncated last line
    run = tmp_path / "run"
    _write(run / "Salesforce_Llama-xLAM-2-8b-fc-r" / "multi_turn" /
           f"BFCL_v4_{CATEGORY}_result.json", bad)
    out = tmp_path / "out"
    # the folder's model is registered: FOLDER=KEY forces the reference run's decoder on it
    res = _run("score", str(run), "--out", str(out), "--decoder",
               f"Salesforce_Llama-xLAM-2-8b-fc-r={demo.DECODER}")
    assert res.exit_code == 1, res.output
    text = res.output
    f = f"BFCL_v4_{CATEGORY}_result.json"
    assert f"{f}:4" in text and "not JSON" in text
    assert "duplicate id" in text and ids[4] in text
    assert "truncated last line" in text and ids[-1] in text
    assert "multi_turn_base_9999" in text
    assert "error string (with a traceback)" in text
    assert "missing" in text
    by_id = {x["id"]: x for x in _lines(out)}
    assert len(by_id) == 200
    assert by_id[ids[0]]["official_valid"] and by_id[ids[4]]["official_valid"]
    assert by_id[ids[3]]["official_error_type"] == "careful:missing_entry"
    assert by_id[ids[5]]["official_error_type"] == "careful:missing_entry"
    assert by_id[ids[7]]["official_error_type"] == "multi_turn:inference_error"
    assert by_id[ids[9]]["official_valid"] is False
    assert by_id[ids[20]]["official_error_type"] == "careful:missing_entry"
    assert by_id[ids[-1]]["official_error_type"] == "careful:missing_entry"
    # every other entry is the reference and passes
    failed = {k for k, v in by_id.items() if not v["official_valid"]}
    assert failed == {ids[3], ids[5], ids[7], ids[9], ids[11], ids[20], ids[-1]}


def test_unknown_model_needs_a_decoder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write(run / "someone_unknown-model" / "multi_turn" / f"BFCL_v4_{CATEGORY}_result.json",
           _reference_lines(3))
    res = _run("score", str(run), "--out", str(tmp_path / "out"))
    assert res.exit_code == 2
    assert "someone/unknown-model" in res.output and "--decoder" in res.output


def _words(text: str) -> str:
    return " ".join(text.split())  # (rich wraps the error line)


def test_a_mistyped_decoder_key_gets_close_keys_and_where_to_list_them(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write(run / "someone_unknown-model" / "multi_turn" / f"BFCL_v4_{CATEGORY}_result.json",
           _reference_lines(3))
    res = _run("score", str(run), "--out", str(tmp_path / "out"), "--decoder", "gpt-4o-FC")
    assert res.exit_code == 2
    said = _words(res.output)
    assert "Did you mean 'gpt-4o-2024-11-20-FC'" in said, said
    assert "careful decoders" in said


def test_a_folder_named_nearly_as_a_key_gets_the_key_suggested(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write(run / "gpt-4o-2024-11-20-fx" / "multi_turn" / f"BFCL_v4_{CATEGORY}_result.json",
           _reference_lines(3))
    res = _run("score", str(run), "--out", str(tmp_path / "out"))
    assert res.exit_code == 2
    said = _words(res.output)
    assert "'gpt-4o-2024-11-20-fx' is not in" in said and "'gpt-4o-2024-11-20-FC'" in said
    assert "careful decoders" in said


def test_decoders_lists_the_registry_keys_with_their_kind() -> None:
    res = _run("decoders")
    assert res.exit_code == 0
    listed = dict(line.split() for line in res.output.splitlines())
    assert listed == {k: "FC" if e.is_fc_model else "prompting"
                      for k, e in bfcl.registry().items()}
    res = _run("decoders", "GPT-4O")
    assert res.exit_code == 0
    keys = [line.split()[0] for line in res.output.splitlines()]
    assert keys == sorted(k for k in bfcl.registry() if "gpt-4o" in k.lower())
    assert "gpt-4o-2024-11-20-FC" in keys
    res = _run("decoders", "no-such-model-anywhere")
    assert res.exit_code == 2 and "careful decoders" in _words(res.output)


def test_unexpected_places_and_v3_layout(tmp_path: Path) -> None:
    run = tmp_path / "run"
    # a V3 flat file (older bfcl) and a V4 file outside multi_turn/
    _write(run / "a" / f"BFCL_v3_{CATEGORY}_result.json", _reference_lines())
    _write(run / "b" / f"BFCL_v4_{CATEGORY}_result.json", _reference_lines())
    _write(run / "b" / "BFCL_v4_simple_result.json", ['{"id": "simple_0", "result": []}'])
    res = _run("score", str(run), "--out", str(tmp_path / "out"), "--decoder", demo.DECODER)
    assert "outside a multi_turn/ folder" in res.output
    lines = _lines(tmp_path / "out")
    assert {x["model"] for x in lines} == {"a", "b"}
    assert all(x["official_valid"] for x in lines)
    assert res.exit_code == 1


@pytest.mark.parametrize("args", [["score", "/nonexistent/run"], ["score", "."]])
def test_unusable_input(args: list[str], tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = _run(*args)
    assert res.exit_code == 2
    assert "error" in res.output


def test_all_inference_errors_need_no_decoder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    lines = [json.dumps({"id": c.id, "result": "Error during inference: x", "traceback": "t"})
             for c in bfcl.conversations(CATEGORY)]
    _write(run / "nobody_knows" / "multi_turn" / f"BFCL_v4_{CATEGORY}_result.json", lines)
    res = _run("score", str(run), "--out", str(tmp_path / "out"))
    assert res.exit_code == 1  # usable, with every entry reported
    assert all(x["official_error_type"] == "multi_turn:inference_error"
               for x in _lines(tmp_path / "out"))


def test_help_explains() -> None:
    res = _run("score", "--help")
    assert res.exit_code == 0
    for word in ("RUN_DIR", "--decoder", "--out", "Exit code"):
        assert word in res.output


def test_a_model_filter_that_matches_nothing_says_what_there_is(tmp_path) -> None:
    folder = tmp_path / "run" / "some-model" / "multi_turn"
    folder.mkdir(parents=True)
    (folder / "BFCL_v4_multi_turn_base_result.json").write_text(
        json.dumps({"id": "multi_turn_base_0", "result": [[]]}) + "\n")
    for command in (["score", str(tmp_path / "run"), "-o", str(tmp_path / "o")],
                    ["provenance", str(tmp_path / "run")]):
        res = runner.invoke(app, [*command, "-m", "nosuch"], env={"COLUMNS": "300"})
        assert res.exit_code == 2, res.output
        assert f"no model folder nosuch under {tmp_path / 'run'} (found: some-model)" \
            in res.output, res.output


@pytest.mark.parametrize("name", ["long_ctx", "long_context", "multi_turn_long_context"])
def test_a_category_is_named_as_any_screen_shows_it(name) -> None:
    """Full names, short names and the tables' column headers all name a category."""
    from careful_engine.analysis.gates import parse_category
    from careful_engine.generation.dataset import parse_categories

    assert bfcl.category_named(f" {name} ") == "multi_turn_long_context"
    assert parse_category(name) == "multi_turn_long_context"
    assert parse_categories([name]) == ("multi_turn_long_context",)
    res = runner.invoke(app, ["audit", "references", "-c", name])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["audit", "references", "-c", "basee"], env={"COLUMNS": "300"})
    assert res.exit_code == 2 and "miss_fn" in res.output, res.output


def test_asked_is_na_on_a_run_that_logs_no_text(shared_runs: Path, tmp_path: Path) -> None:
    """The gpt-oss runs log every step without a call as [] (no text): asked and asked
    destr. are n/a (–, empty in CSV, null in JSON and conversations.jsonl), with a warning,
    not 0; a conversation whose every turn has a call still asked nothing (0)."""
    run = shared_runs / "gpt-oss-120b-vllm-v0.10.2"
    res = runner.invoke(app, ["score", str(run), "--decoder", "gpt-4o-2024-11-20-FC", "-j1",
                              "--out", str(tmp_path / "o")], env={"COLUMNS": "200"})
    assert "asked n/a: " in " ".join(res.output.split())
    rules = json.loads((tmp_path / "o" / "rules.json").read_text())
    rows = rules["rows"]
    assert rows and all(r["asked"] is None and r["asked destr."] is None for r in rows), rows
    lines = _lines(tmp_path / "o")
    # (null in a line with nothing replayed: an inference error, a stopped replay)
    silent = [x for x in lines if (x["no_call_turns"] or {}).get("without_text")]
    assert silent and all(x["rules"]["asked"] is None for x in silent)
    assert all(x["rules"]["asked"] == 0 for x in lines
               if x.get("no_call_turns") == {"with_text": 0, "without_text": 0})


def test_a_parent_of_runs_with_one_model_name_is_refused(tmp_path: Path) -> None:
    """Two runs of one model side by side: score writes one score/<model> folder per name, so
    it refuses their parent folder up front, naming both runs (not one run's files dropped
    for the other's as an input problem that -q condenses); a --model that leaves the shared
    name out is scored."""
    parent = tmp_path / "runs"
    for run in ("v1", "v2"):
        _write(parent / run / "result" / "same-model" / "multi_turn" /
               f"BFCL_v4_{CATEGORY}_result.json", _reference_lines(2))
    _write(parent / "other" / "result" / "other-model" / "multi_turn" /
           f"BFCL_v4_{CATEGORY}_result.json", _reference_lines(2))
    out = tmp_path / "out"
    res = runner.invoke(app, ["score", str(parent), "-q", "--out", str(out), "--decoder",
                              demo.DECODER], env={"COLUMNS": "400"})
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert f"2 model folders named same-model, in run folders {parent / 'v1'}, " \
           f"{parent / 'v2'}" in text, text
    assert "careful leaderboard" in text and "input problem" not in text
    assert not out.exists()
    res = _run("score", str(parent), "--out", str(out), "--decoder", demo.DECODER,
               "--model", "other-model", "-j1")
    assert res.exit_code == 1, res.output  # (the other files' 'id missing' lines)
    assert {x["model"] for x in _lines(out)} == {"other-model"}
    # nothing said of the model folders --model left out (their files were reported as
    # passed over: 'another ... file for same-model ... is used instead')
    assert "same-model" not in res.output and "used instead" not in res.output


def test_a_synthetic_run_is_marked_by_score(tmp_path: Path) -> None:
    """careful demo's flawed run (manifest ``"synthetic": true``) was a plain model in
    score's tables, files and JSON document, while leaderboard and compare mark it: now
    every table of score labels it ``MODEL (SYNTHETIC)`` and the document says so."""
    import jsonschema

    from careful_engine.analysis import ci_report

    run = tmp_path / "run"
    for model, synthetic in (("real", False), ("fake", True)):
        _write(run / model / "multi_turn" / f"BFCL_v4_{CATEGORY}_result.json",
               _reference_lines(2))
        doc = {"decoder": demo.DECODER, **({"synthetic": True} if synthetic else {})}
        (run / model / demo.MANIFEST).write_text(json.dumps(doc))
    out = tmp_path / "out"
    res = runner.invoke(app, ["score", str(run), "-q", "-j1", "--out", str(out),
                              "--format", "json", "--output", str(tmp_path / "doc.json")],
                        env={"COLUMNS": "200"})
    assert res.exit_code == 1, res.output  # (the 'id missing' lines)
    # the tables fold a long first cell: the row of fake, then the rest of its label
    lines = res.output.splitlines()
    rows = [(x.split()[0], nxt.split()[0] if nxt.strip() else "")
            for x, nxt in zip(lines, lines[1:], strict=False) if x.startswith(("fake ", "real "))]
    assert rows and all(nxt.startswith("(SYNTHETIC") == (first == "fake")
                        for first, nxt in rows), res.output
    for name in ("accuracy.csv", "rules.csv"):
        rows = (out / name).read_text().splitlines()[1:]
        assert {r.split(",")[0] for r in rows} == {"real", "fake (SYNTHETIC)"}, name
    doc = json.loads((tmp_path / "doc.json").read_text())
    jsonschema.validate(doc, ci_report.schema())
    assert {r["model"]: r["synthetic"] for r in doc["runs"]} == {"real": False, "fake": True}
    assert {x["model"] for x in _lines(out)} == {"real", "fake"}  # the folder, as bfcl's
