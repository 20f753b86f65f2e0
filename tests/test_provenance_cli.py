"""``careful provenance`` and ``careful score --exclude-drifted`` end to end, and the real runs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.core import bfcl
from careful_engine.scoring.score import MISSING

from .provenance_support import (
    DECODER,
    MODEL_DIR,
    generate_run,
    read_lines,
    turns,
    write_run,
)

_load()
runner = CliRunner()
CAT = "multi_turn_base"
IDS = [f"{CAT}_{i}" for i in (0, 1, 2, 14, 102, 150)]


def _run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> list[dict]:
    path = generate_run(tmp_path_factory.mktemp("gen"), CAT, IDS)
    return read_lines(path)


def _drifted_run(root: Path, entries: list[dict]) -> Path:
    e = copy.deepcopy(entries)
    turns(e[1])[0]["begin_of_turn_query"][0]["content"] = "Another question"
    bot = next(s for s in e[4]["inference_log"][0] if s["class_name"] == "TradingBot")
    bot["content"]["account_info"]["balance"] = 1.0
    e[3]["inference_log"].extend(copy.deepcopy(e[3]["inference_log"][-2:]))
    e[3]["result"].append([["Done."]])
    site = next(m for t in turns(e[5]) for k, v in t.items() if k.startswith("step_")
                for m in v if m["role"] == "tool")
    site["content"] = "altered"
    del e[2]["inference_log"]
    write_run(root, CAT, [json.dumps(x) for x in e])
    score = root / "score" / MODEL_DIR / "multi_turn" / f"BFCL_v4_{CAT}_score.json"
    score.parent.mkdir(parents=True, exist_ok=True)
    score.write_text(json.dumps({"accuracy": 0.03, "correct_count": 6, "total_count": 200})
                     + "\n" + "".join(json.dumps({"id": c.id, "error": {"error_type": "x"}})
                                      + "\n" for c in bfcl.conversations(CAT)
                                      if c.id not in IDS))
    return root


def test_provenance_report_json(generated, tmp_path: Path) -> None:
    root = _drifted_run(tmp_path / "run", generated)
    res = _run("provenance", str(root), "--decoder", DECODER, "--json")
    assert res.exit_code == 1, res.output  # 194 ids missing from the file: reported
    report = json.loads(res.stdout)
    (run,) = report["runs"]
    by_id = {c["id"]: c for c in run["conversations"]}
    status = {i: by_id[i]["dataset_drift"]["status"] for i in IDS}
    assert status == {IDS[0]: "identical", IDS[1]: "question_changed", IDS[2]: "no_log",
                      IDS[3]: "turn_count_changed", IDS[4]: "initial_state_changed",
                      IDS[5]: "identical"}
    assert by_id[IDS[0]]["clean"] and not by_id[IDS[5]]["clean"]
    first = by_id[IDS[5]]["replay_fidelity"]["first_divergence"]
    assert first["logged"] == "altered" and first["cause"] == "simulator_changed"
    (cat,) = run["categories"]
    assert cat["dataset_drift"]["by_kind"] == {"turn_count_changed": 1, "question_changed": 1,
                                               "initial_state_changed": 1}
    assert cat["dataset_drift"]["by_status"]["no_log"] == 200 - len(IDS) + 1
    v = cat["verdicts"]
    assert v["official"]["accuracy"] == 0.03
    # the turn-count drift makes one conversation fail now that passed then
    assert v["passed_then_fail_now"]["ids"] == [IDS[3]]
    assert v["passed_then_fail_now"]["primary_reason"] == {"dataset_drift": 1}


def test_provenance_tables(generated, tmp_path: Path) -> None:
    root = _drifted_run(tmp_path / "run", generated)
    out = tmp_path / "report.json"
    res = _run("provenance", str(root), "--decoder", DECODER, "--explain", "--out", str(out))
    assert res.exit_code == 1
    for word in ("Dataset drift", "Decoder drift", "Replay fidelity", "Verdicts",
                 "simulator_changed", "altered", "pass→fail", "id(s) missing"):
        assert word in res.output, word
    assert json.loads(out.read_text())["runs"][0]["model"] == MODEL_DIR


def test_unverifiable_run(generated, tmp_path: Path) -> None:
    lines = []
    for e in generated:
        e = dict(e)
        e.pop("inference_log")
        lines.append(json.dumps(e))
    write_run(tmp_path, CAT, lines)
    res = _run("provenance", str(tmp_path), "--decoder", DECODER)
    assert "unverifiable" in res.output
    res = _run("provenance", str(tmp_path), "--decoder", DECODER, "--json")
    cat = json.loads(res.stdout)["runs"][0]["categories"][0]
    assert cat["verifiable"] is False and cat["with_log"] == 0 and cat["clean"] == 0


def test_all_inference_errors_and_bad_unicode_do_not_crash(tmp_path: Path) -> None:
    lines = [json.dumps({"id": c.id, "result": "Error during inference: \ud83d x",
                         "traceback": "t"}) for c in bfcl.conversations(CAT)]
    lines[5] = b'{"id": "multi_turn_base_5", "result": "bad \xff byte"}'.decode(
        "utf-8", "surrogateescape")
    write_run(tmp_path, CAT, lines, model="nobody_knows")
    res = _run("provenance", str(tmp_path))  # no decoder needed: nothing to decode
    assert res.exit_code == 1, res.output
    assert "lone surrogate" in res.output and "... and 194 more" in res.output
    res = _run("provenance", str(tmp_path), "--json")
    report = json.loads(res.stdout)
    bad = [p for p in report["problems"] if p["id"] == "multi_turn_base_5" and p["line"] == 6]
    assert any("line is not UTF-8 (byte 0xff" in p["message"] for p in bad)
    cat = report["runs"][0]["categories"][0]
    assert cat["dataset_drift"]["by_status"]["no_log"] == 200
    assert cat["replay_fidelity"]["share"] is None


def test_score_exclude_drifted_on_a_run_of_inference_errors(tmp_path: Path) -> None:
    lines = [json.dumps({"id": c.id, "result": "Error during inference: x", "traceback": "t"})
             for c in bfcl.conversations(CAT)]
    write_run(tmp_path, CAT, lines, model="nobody_knows")
    res = _run("score", str(tmp_path), "--out", str(tmp_path / "out"), "--exclude-drifted")
    assert res.exit_code == 1, res.output
    assert "not drifted" in res.output and "200" in res.output


def test_unknown_model_and_missing_input(tmp_path: Path) -> None:
    write_run(tmp_path, CAT, [json.dumps({"id": f"{CAT}_0", "result": [[["x"]]]})],
              model="someone_unknown-model")
    res = _run("provenance", str(tmp_path))
    assert res.exit_code == 2 and "--decoder" in res.output
    assert _run("provenance", str(tmp_path / "nope")).exit_code == 2


def test_score_exclude_drifted(generated, tmp_path: Path) -> None:
    root = _drifted_run(tmp_path / "run", generated)
    out = tmp_path / "out"
    res = _run("score", str(root), "--decoder", DECODER, "--out", str(out), "--exclude-drifted")
    assert "not drifted" in res.output and "BFCL accuracy (%) with and without" in res.output
    lines = {x["id"]: x for x in map(json.loads, (out / "conversations.jsonl").open())}
    assert lines[IDS[1]]["dataset_drift"] == "question_changed"
    assert lines[IDS[2]]["dataset_drift"] == "no_log"
    _drift_table_is_written(out, list(lines.values()))
    res = _run("score", str(root), "--decoder", DECODER, "--out", str(out))
    assert "not drifted" not in res.output
    assert "dataset_drift" not in (out / "conversations.jsonl").read_text()


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_score_and_leaderboard_note_dataset_drift(generated, tmp_path: Path) -> None:
    """One line, from the logs alone, when conversations drifted; the figures as without it;
    none for a clean run."""
    root = _drifted_run(tmp_path / "run", generated)
    note = (f"3 of 200 conversations were generated on another dataset version than bfcl-eval "
            f"{bfcl.BFCL_VERSION}'s; `careful provenance {root}` attributes the difference")
    for args, label in ((["score", str(root), "--out", str(tmp_path / "s")], MODEL_DIR),
                        (["leaderboard", str(root), "--out", str(tmp_path / "lb")], "run")):
        res = _run(*args, "--decoder", DECODER, "-q")
        assert res.exit_code == 1, res.output  # 194 ids missing
        (line,) = [x for x in res.stderr.splitlines() if x.startswith("note:")]
        assert _flat(line) == f"note: {label}: {note}", line  # the model folder; the entry
    clean = generate_run(tmp_path / "clean", CAT, IDS[:2])
    for cmd in ("score", "leaderboard"):
        res = _run(cmd, str(clean), "--decoder", DECODER, "--out", str(tmp_path / cmd), "-q")
        assert "note:" not in res.output and "dataset version" not in res.output


def test_run_drift_reads_a_file_scored_without_its_entries(generated, tmp_path: Path) -> None:
    """A worker that loaded and scored a file itself keeps no entries in the parent: the
    count reads the file again, and agrees."""
    from careful_engine.analysis.provenance import run_drift
    from careful_engine.core.runs import LoadedFile
    from careful_engine.scoring.score import score_run

    root = _drifted_run(tmp_path / "run", generated)
    run = score_run(root, decoder=DECODER)
    assert run_drift(run.files) == {MODEL_DIR: (3, 200)}
    bare = [(LoadedFile(lf.file, lines=lf.lines), cs) for lf, cs in run.files]
    assert run_drift(bare) == {MODEL_DIR: (3, 200)}


@pytest.mark.parametrize("jobs", [1, 2])
def test_drift_is_counted_where_each_conversation_is_scored(
        generated, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int) -> None:
    """score and leaderboard count the drift as they score (DriftDigest, in the workers with
    jobs): the parent reads no file again (it made leaderboard --jobs 2 read every file twice)
    and counts what the entries give."""
    from careful_engine.analysis.provenance import check
    from careful_engine.scoring.score import score_run

    root = _drifted_run(tmp_path / "run", generated)
    run = score_run(root, decoder=DECODER, jobs=jobs, digest=check.DriftDigest())
    assert {type(r.digest) for _, cs in run.files for r in cs.results
            if r.verdict.error_type != MISSING} == {bool}

    def no_reading(*_a: object, **_k: object) -> None:
        raise AssertionError("read again")

    monkeypatch.setattr(check, "load_result_file", no_reading)
    monkeypatch.setattr(check, "drift_split", no_reading)
    assert check.run_drift(run.files) == {MODEL_DIR: (3, 200)}


def _drift_table_is_written(out: Path, lines: list[dict]) -> None:
    """``--exclude-drifted``'s table is written with the command's other tables (it was only
    printed), its accuracy labelled as BFCL's (the column was "all") and agreeing with the
    conversations' verdicts and drift in conversations.jsonl."""
    import csv

    from careful_engine.core.figures import percent, percent_text

    table = json.loads((out / "accuracy_drift.json").read_text())
    assert table["title"].startswith("BFCL accuracy") and "not effect-safe" in table["caption"]
    assert "scored_with" not in table  # BFCL's verdict: no boundary, detector or rule changes it
    kept = [x for x in lines if x["dataset_drift"] in ("identical", "no_log")]
    (row,) = table["rows"]
    assert row == {
        "model": MODEL_DIR, "category": bfcl.short_name(CAT),
        "BFCL % all": percent(sum(x["official_valid"] for x in lines) / len(lines)),
        "n all": len(lines),
        "BFCL % not drifted": percent(sum(x["official_valid"] for x in kept) / len(kept)),
        "n not drifted": len(kept), "drifted": len(lines) - len(kept),
        "unverifiable": sum(x["dataset_drift"] == "no_log" for x in lines)}
    assert row["drifted"] == 3 and row["n all"] == 200
    (written,) = csv.DictReader((out / "accuracy_drift.csv").read_text().splitlines())
    # the JSON stores the value, the CSV the figure shown (core.figures)
    assert written["BFCL % not drifted"] == percent_text(row["BFCL % not drifted"] / 100)
    assert "BFCL % all" in (out / "accuracy_drift.md").read_text()


def test_help() -> None:
    res = _run("provenance", "--help")
    assert res.exit_code == 0
    for word in ("--decoder", "--official", "--json", "--explain", "Exit code"):
        assert word in res.output


# ---------------------------------------------------------------- the real runs


def _report(root: Path, *args: str) -> dict:
    res = _run("provenance", str(root), "--json", *args)
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)


def test_real_xlam_drop_is_explained(shared_runs: Path, tmp_path: Path) -> None:
    report = _report(shared_runs / "xlam-2-8b-fc-r" / "result" /
                     "Salesforce_Llama-xLAM-2-8b-fc-r" / "BFCL_v3_multi_turn_base_result.json",
                     "--official", str(shared_runs / "xlam-2-8b-fc-r" / "score"))
    (cat,) = report["runs"][0]["categories"]
    assert cat["with_log"] == 200
    assert cat["dataset_drift"]["drifted"] == 90
    assert cat["dataset_drift"]["by_kind"] == {"turn_count_changed": 11, "question_changed": 70,
                                               "initial_state_changed": 72}
    assert cat["decoder_drift"]["steps_differing"] == 0
    v = cat["verdicts"]
    assert v["official"]["accuracy"] == 0.765 and v["accuracy_now"] == 0.57
    lost, gained = v["passed_then_fail_now"], v["failed_then_pass_now"]
    assert (lost["count"], gained["count"]) == (42, 3)
    assert lost["primary_reason"] == {"dataset_drift": 42}
    assert "possible_ground_truth_change" not in gained["any_reason"]
    # score says so in one line, from the logs alone (the table's figure is bfcl's own)
    res = _run("score", str(shared_runs / "xlam-2-8b-fc-r"), "--out", str(tmp_path / "s"),
               "-q")
    assert "57.0" in res.stdout
    assert "275 of 600 conversations were generated on another dataset version" in res.stderr


@pytest.mark.parametrize("run", ["gpt-oss-120b-vllm-v0.11.0", "gpt-oss-120b-vllm-v0.10.2"])
def test_real_gpt_oss_runs_are_clean_or_explained(shared_runs: Path, run: str) -> None:
    report = _report(shared_runs / run, "--decoder", "gpt-4o-2024-11-20-FC")
    for cat in report["runs"][0]["categories"]:
        assert cat["dataset_drift"]["drifted"] == 0
        assert cat["decoder_drift"]["steps_differing"] == 0
        causes = set(cat["replay_fidelity"]["first_divergence_causes"])
        assert causes <= {"engine_refusal", "numeric_precision"}
        assert cat["replay_fidelity"]["conversations_diverging_verdict_relevant"] == 0
        assert cat["replay_fidelity"]["share"] > 0.98
        v = cat["verdicts"]
        assert v["passed_then_fail_now"]["count"] == v["failed_then_pass_now"]["count"] == 0
    for conv in report["runs"][0]["conversations"]:
        if not conv["clean"]:
            assert conv["dataset_drift"]["status"] == "no_log"  # the inference errors


def test_real_runs_without_a_log_or_with_only_errors(shared_runs: Path) -> None:
    report = _report(shared_runs / "glyphh-ada-1.1", "--decoder", "gpt-4o-2024-11-20-FC")
    run = report["runs"][0]
    assert run["verifiable"] is False and len(run["categories"]) == 4
    assert all(c["dataset_drift"]["by_status"]["no_log"] == 200 for c in run["categories"])
    report = _report(shared_runs / "deepseek-r1-0528-errors", "--decoder",
                     "deepseek-ai/DeepSeek-R1")
    (cat,) = report["runs"][0]["categories"]
    assert cat["dataset_drift"]["by_status"]["no_log"] == 199
