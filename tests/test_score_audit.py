"""careful_engine.analysis.score_audit and ``careful audit scores`` on hand-made score folders."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.analysis import score_audit as sa

_load()
runner = CliRunner()

GROUP = {"simple_python": "non_live", "simple_java": "non_live", "simple_javascript": "non_live",
         "multiple": "non_live", "parallel": "non_live", "parallel_multiple": "non_live",
         "irrelevance": "non_live", "live_simple": "live", "live_multiple": "live",
         "live_parallel": "live", "live_parallel_multiple": "live", "live_irrelevance": "live",
         "live_relevance": "live", "multi_turn_base": "multi_turn",
         "multi_turn_miss_func": "multi_turn", "multi_turn_miss_param": "multi_turn",
         "multi_turn_long_context": "multi_turn", "web_search_base": "agentic",
         "web_search_no_snippet": "agentic", "memory_kv": "agentic/memory/kv",
         "memory_vector": "agentic/memory/vector", "memory_rec_sum": "agentic/memory/rec_sum"}


def write_score(root: Path, model: str, category: str, correct: int, total: int,
                failed: list[dict] | None = None) -> Path:
    """A bfcl score file: the header, then one line per failed entry (ids default to the
    last ``total - correct`` entries)."""
    path = root / "score" / model / GROUP[category] / f"BFCL_v4_{category}_score.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if failed is None:
        failed = [{"id": f"{category}_{i}", "valid": False, "error_type": "x:y",
                   "error": ["wrong"]} for i in range(correct, total)]
    header = {"accuracy": correct / total, "correct_count": correct, "total_count": total}
    path.write_text("\n".join(json.dumps(x) for x in [header, *failed]) + "\n")
    return path


def write_results(root: Path, model: str, category: str, outputs: list) -> Path:
    path = root / "result" / model / GROUP[category] / f"BFCL_v4_{category}_result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": f"{category}_{i}", "result": out}) + "\n"
                            for i, out in enumerate(outputs)))
    return path


def nemotron(root: Path, model: str = "nemotron") -> None:
    """The seed's limit case: every output empty; AST fails to decode, irrelevance all 1."""
    decode_failed = [{"id": f"simple_python_{i}", "valid": False,
                      "error_type": "ast_decoder:decoder_failed",
                      "error": ["Invalid syntax. Failed to decode AST. expected string or "
                                "bytes-like object, got 'list'"]} for i in range(400)]
    write_score(root, model, "simple_python", 0, 400, decode_failed)
    write_score(root, model, "live_relevance", 0, 16, [
        {"id": f"live_relevance_{i}", "error_type": "relevance_error:decoder_failed",
         "error": ["Invalid syntax. Failed to decode AST when it should have."]}
        for i in range(16)])
    write_score(root, model, "irrelevance", 240, 240)
    write_score(root, model, "live_irrelevance", 884, 884)


def falcon(root: Path, model: str = "falcon") -> None:
    """The seed's Falcon3-1B: 229 of 240 credited, 228 of those with a <tool_call>."""
    write_score(root, model, "live_relevance", 0, 16)
    write_score(root, model, "irrelevance", 229, 240)
    call = '<tool_call>\n<tool_call name="math.solve" arguments={"a": 1, "b": 2}/>\n</tool_call>'
    outputs = [call] * 228 + ["I cannot help with that."] + ['[math.solve(a=1)]'] * 11
    write_results(root, model, "irrelevance", outputs)


# ---------------------------------------------------------------- the signature


def test_nemotron_limit_case(tmp_path: Path) -> None:
    nemotron(tmp_path)
    audits, results, problems = sa.audit(tmp_path / "score")
    assert problems == [] and results is None
    (a,) = audits
    assert {f.kind for f in a.flags} == {"irrelevance_signature", "ast_decode_failures"}
    assert a.overall.overall == pytest.approx(0.10)  # "10% x 100.00 is its entire overall"
    assert a.overall.blocks["irrelevance"] == 1.0
    assert a.overall.irrelevance_share == pytest.approx(1.0)
    assert (a.ast_failed, a.ast_total) == (400, 400)


def test_falcon_credited_entries_with_calls(tmp_path: Path) -> None:
    falcon(tmp_path)
    audits, results, _ = sa.audit(tmp_path)  # the run folder: score/ and result/ inside
    assert results == tmp_path / "result"
    (a,) = audits
    (cr,) = a.credited
    assert (cr.credited, cr.failed, cr.read) == (229, 11, 229)
    assert (cr.calls, cr.other, cr.empty) == (228, 1, 0)
    assert cr.markers == {"<tool_call>": 228}
    kinds = {f.kind for f in a.flags}
    assert kinds == {"irrelevance_signature", "credited_calls"}
    msg = next(f.message for f in a.flags if f.kind == "credited_calls")
    assert "228 of 229" in msg


def test_credited_entries_are_read_line_by_line_as_bfcl_writes_them(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """A line ends at a newline only (an output holding U+2028 or NEL, which JSON allows raw,
    was cut in two and not read), and a line longer than an entry is read from is not parsed
    (a line of 120 MB of ``{},`` took 3.7 GB and 30 s)."""
    from careful_engine.core import runs

    monkeypatch.setattr(runs, "MAX_ENTRY_CHARS", 5_000)
    write_score(tmp_path, "m", "irrelevance", 3, 3)
    path = tmp_path / "result" / "m" / "non_live" / "BFCL_v4_irrelevance_result.json"
    path.parent.mkdir(parents=True)
    lines = [{"id": "irrelevance_0", "result": "Calling\u2028[math.solve(a=1)]\x85 now"},
             {"id": "irrelevance_1", "result": [{}] * 2_000},
             {"id": "irrelevance_2", "result": "no"}]
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines),
                    encoding="utf-8")
    (a,), _, _ = sa.audit(tmp_path)
    (cr,) = a.credited
    assert (cr.read, cr.calls, cr.other, cr.empty) == (2, 1, 1, 0)


def test_without_result_files_the_signature_still_shows(tmp_path: Path) -> None:
    falcon(tmp_path)
    audits, _, _ = sa.audit(tmp_path / "score", results=tmp_path / "elsewhere")
    (a,) = audits
    assert a.credited[0].result_file is None and a.credited[0].read == 0
    assert {f.kind for f in a.flags} == {"irrelevance_signature"}


def test_a_healthy_model_is_not_flagged(tmp_path: Path) -> None:
    write_score(tmp_path, "good", "live_relevance", 14, 16)
    write_score(tmp_path, "good", "irrelevance", 230, 240)
    write_score(tmp_path, "good", "live_irrelevance", 700, 884)
    write_score(tmp_path, "good", "simple_python", 350, 400)
    (a,), _, _ = sa.audit(tmp_path / "score")
    assert a.flags == []


def test_near_threshold(tmp_path: Path) -> None:
    write_score(tmp_path, "m", "live_relevance", 0, 16)
    write_score(tmp_path, "m", "irrelevance", 200, 240)  # 0.83
    (a,), _, _ = sa.audit(tmp_path / "score")
    assert a.flags == []
    (a,), _, _ = sa.audit(tmp_path / "score", near=0.8)
    assert [f.kind for f in a.flags] == ["irrelevance_signature"]


# ---------------------------------------------------------------- attempted calls


@pytest.mark.parametrize(
    ("raw", "marker"),
    [('<tool_call>{"name": "f"}</tool_call>', "<tool_call>"),
     ("[TOOL_CALLS] [...]", "[TOOL_CALLS]"),
     ('{"name": "get_weather", "arguments": {"city": "Paris"}}', "JSON call"),
     ("[calc.area(width=3, height=4)]", "python call"),
     ([{"get_weather": '{"city": "Paris"}'}], "structured call"),
     (["<|python_tag|>f(x=1)"], "<|python_tag|>"),
     ("I cannot help with that; no function fits.", None),
     ("The function (which computes areas) is not relevant.", None),
     ([], None), ("", None), (None, None)],
)
def test_attempted_call(raw, marker) -> None:
    assert sa.attempted_call(raw) == marker


def test_empty_outputs() -> None:
    assert sa.is_empty_output([]) and sa.is_empty_output("") and sa.is_empty_output([[]])
    assert sa.is_empty_output("[]") and sa.is_empty_output(None)
    assert not sa.is_empty_output("No.")


# ---------------------------------------------------------------- the overall, against bfcl


def test_weights_are_those_of_the_installed_bfcl() -> None:
    from careful_engine.core import bfcl

    source = (bfcl.PACKAGE_DIR / "eval_checker" / "eval_runner_helper.py").read_text()
    assert "[10, 10, 10, 30, 40]" in source
    assert list(sa.WEIGHTS.values()) == [10, 10, 10, 30, 40]


def _bfcl_overall(score_dir: Path, out: Path) -> dict[str, dict[str, str]]:
    """bfcl-eval's own leaderboard code on a score folder: data_overall.csv by model."""
    from bfcl_eval.eval_checker.eval_runner_helper import (
        generate_leaderboard_csv,
        update_leaderboard_table_with_local_score_file,
    )

    table: dict = {}
    update_leaderboard_table_with_local_score_file(table, score_dir)
    out.mkdir()
    generate_leaderboard_csv(table, out)
    with open(out / "data_overall.csv") as f:
        return {row["Model"]: row for row in csv.DictReader(f)}


def _pc(cell: str) -> float | None:
    return None if cell == "N/A" else float(cell.rstrip("%")) / 100


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_overall_matches_bfcl_leaderboard_code(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    models = {"gpt-4o-2024-11-20-FC": "GPT-4o-2024-11-20 (FC)",
              "gpt-4o-2024-11-20": "GPT-4o-2024-11-20 (Prompt)"}
    for model in models:
        for category in GROUP:
            if rng.random() < 0.25:
                continue  # not evaluated: counts 0 (live: weighted by the dataset's count)
            total = rng.randint(5, 300)
            write_score(tmp_path, model, category, rng.randint(0, total), total, failed=[])
    ours = {a.model: a.overall for a in sa.audit(tmp_path / "score")[0]}
    theirs = _bfcl_overall(tmp_path / "score", tmp_path / "bfcl")
    for model, display in models.items():
        row, ov = theirs[display], ours[model]
        assert ov.overall == pytest.approx(_pc(row["Overall Acc"]), abs=6e-5)
        for block, column in (("irrelevance", "Irrelevance Detection"), ("live", "Live Acc"),
                              ("multi_turn", "Multi Turn Acc")):
            shown = _pc(row[column])  # N/A when a category of the block is missing
            if shown is not None:
                assert ov.blocks[block] == pytest.approx(shown, abs=6e-5)


# ---------------------------------------------------------------- reading score folders


def test_v3_names_bad_headers_and_model_folders(tmp_path: Path) -> None:
    flat = tmp_path / "score" / "old_model"
    flat.mkdir(parents=True)
    (flat / "BFCL_v3_simple_score.json").write_text(
        json.dumps({"accuracy": 0.5, "correct_count": 1, "total_count": 2}) + "\n")
    (flat / "BFCL_v3_irrelevance_score.json").write_text("not json\n")
    write_score(tmp_path, "new_model", "memory_kv", 3, 4)
    models, problems = sa.find_score_files(tmp_path / "score")
    assert set(models) == {"old_model", "new_model"}
    assert set(models["old_model"].files) == {"simple_python"}
    assert set(models["new_model"].files) == {"memory_kv"}
    assert len(problems) == 1 and "header" in problems[0].message
    # a model folder inside score/ works as the root too
    models, _ = sa.find_score_files(tmp_path / "score" / "new_model")
    assert set(models) == {"new_model"}


def test_every_score_file_passed_over_names_the_one_used(tmp_path: Path) -> None:
    """With a flat V3, a grouped V3 and a V4 score file for one category, the grouped V3 one
    was said to lose to the flat V3 one, which the V4 file replaced in turn: every line now
    names the file used in the end."""
    v4 = write_score(tmp_path, "m", "simple_python", 3, 4)
    v3s = [tmp_path / "score" / "m" / "BFCL_v3_simple_score.json",
           v4.parent / "BFCL_v3_simple_python_score.json"]
    for path in v3s:
        path.write_text(json.dumps({"accuracy": 0.5, "correct_count": 1, "total_count": 2})
                        + "\n")
    models, problems = sa.find_score_files(tmp_path / "score")
    assert models["m"].files["simple_python"].path == v4
    assert sorted(p.file for p in problems) == sorted(map(str, v3s))
    assert all(p.message == f"another simple_python score file for m ({v4}) is used instead"
               for p in problems), problems



# ---------------------------------------------------------------- the command


def test_cli(tmp_path: Path) -> None:
    nemotron(tmp_path, "nemotron")
    falcon(tmp_path, "falcon")
    out = tmp_path / "out"
    res = runner.invoke(app, ["audit", "scores", str(tmp_path), "--out", str(out)],
                        catch_exceptions=False)
    assert res.exit_code == 1, res.output
    assert "relevance 0.0" in res.output and "228 of 229" in res.output
    overall = {r["model"]: r for r in
               json.loads((out / "score_audit_overall.json").read_text())["rows"]}
    assert overall["nemotron"]["overall (weighted)"] == pytest.approx(10.0)
    flags = json.loads((out / "score_audit_flags.json").read_text())["rows"]
    assert {(f["model"], f["kind"]) for f in flags} >= {("nemotron", "irrelevance_signature"),
                                                       ("falcon", "credited_calls")}
    irr = json.loads((out / "score_audit_irrelevance.json").read_text())["rows"]
    falcon_row = next(r for r in irr if r["model"] == "falcon")
    assert falcon_row["attempted call"] == 228
    # the figures are bfcl's own, read from its score files: the table and the file say so
    flat = " ".join(res.output.split())
    assert "Overall as bfcl weights it (%), from bfcl's score files" in flat
    assert f"source: bfcl's score files in {tmp_path / 'score'}, as bfcl wrote them (not " \
           "re-scored" in flat
    caption = json.loads((out / "score_audit_overall.json").read_text())["caption"]
    assert f"source: bfcl's score files in {tmp_path / 'score'}" in caption


def test_cli_clean_missing_and_help(tmp_path: Path) -> None:
    write_score(tmp_path, "good", "live_relevance", 14, 16)
    write_score(tmp_path, "good", "irrelevance", 230, 240)
    res = runner.invoke(app, ["audit", "scores", str(tmp_path / "score"), "--out",
                              str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["audit", "scores", str(tmp_path / "o")])
    assert res.exit_code == 2
    res = runner.invoke(app, ["audit", "scores", "--help"])
    assert res.exit_code == 0 and "--results" in res.output


def test_python_call_marker_is_the_regex_in_linear_time() -> None:
    """The 'python call' marker finds exactly what its regex finds (random texts over the
    characters that matter), without the regex's rescans: one 80 KB line of 'a.' took 21 s."""
    import random
    import re
    import time

    from careful_engine.analysis.score_audit import _python_call

    spec = re.compile(r"\b[A-Za-z_][\w.]*\(\s*[A-Za-z_]\w*\s*=")
    rng = random.Random(7)
    for alphabet in ("ab_1.( =x\té,", "a.(=_ ", "Zz9.(= \n_é٣"):
        for _ in range(20_000):
            s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 16)))
            assert bool(spec.search(s)) == _python_call(s), repr(s)
    start = time.process_time()
    assert sa.attempted_call("a." * 400_000) is None
    assert sa.attempted_call("a." * 400_000 + "f(x=1)") == "python call"
    assert time.process_time() - start < 10


def test_a_score_line_longer_than_an_entry_is_one_problem_not_parsed(tmp_path: Path,
                                                                     monkeypatch) -> None:
    """A failure line longer than a result line is read from is skipped with its line (one of
    120 MB of ``{},`` took 3 GB and 10 s to parse); the others are read."""
    from careful_engine.analysis import bfcl_scores
    from careful_engine.core import runs

    monkeypatch.setattr(runs, "MAX_ENTRY_CHARS", 5_000)
    lines = ['{"accuracy": 0.5, "correct_count": 2, "total_count": 4}',
             json.dumps({"id": "multi_turn_base_1", "error_type": "a:b", "x": [{}] * 2_000}),
             json.dumps({"id": "multi_turn_base_2", "error_type": "a:b"})]
    path = tmp_path / "BFCL_v4_multi_turn_base_score.json"
    path.write_text("\n".join(lines) + "\n")
    read = bfcl_scores.read_score_lines(path)
    assert list(read.failed) == ["multi_turn_base_2"]
    (problem,) = read.problems
    assert (problem.line, problem.message) == (2, f"line is {len(lines[1]):,} characters long, "
                                                  "more than the 5,000 a line is read with; "
                                                  "skipped")


def test_audit_and_provenance_read_a_score_file_alike(tmp_path: Path) -> None:
    """One reader (analysis.bfcl_scores) for both: the same failures, error types and problem
    lines from the same file, whatever its lines hold."""
    from careful_engine.analysis.provenance.official import read_official

    lines = [
        '{"accuracy": 0.25, "correct_count": 1, "total_count": 4}',
        json.dumps({"id": "multi_turn_base_1", "error": {"error_type": "multi_turn:x",
                                                         "error_message": "m1"}}),
        json.dumps({"id": "multi_turn_base_2", "error_type": "top:level", "error": ["m2"]}),
        '{"id": "multi_turn_base_3", "error": {"error_type": NaN}}',
        "[1, 2]",
        '{"valid": false}',
        "not json",
    ]
    path = tmp_path / "BFCL_v4_multi_turn_base_score.json"
    path.write_text("\n".join(lines) + "\n")
    audit, audit_problems = sa.read_score_file(path, "m")
    official = read_official(path, "multi_turn_base")
    assert audit is not None and (audit.accuracy, audit.correct, audit.total) == (0.25, 1, 4)
    assert (official.accuracy, official.correct, official.total) == (0.25, 1, 4)
    assert official.failed == {"multi_turn_base_1": "multi_turn:x",
                               "multi_turn_base_2": "top:level", "multi_turn_base_3": None}
    assert {i: f["error_type"] for i, f in audit.failed.items()} == {
        "multi_turn_base_1": "multi_turn:x", "multi_turn_base_2": "top:level",
        "multi_turn_base_3": ""}
    assert audit.failed["multi_turn_base_2"]["error"] == "m2"
    shown = [str(p).split(path.name, 1)[1] for p in audit_problems]
    assert shown == [str(p).split(path.name, 1)[1] for p in official.problems]
    assert shown == [":4 [multi_turn_base_3]: error_type is not text; the failure is kept "
                     "without it", ":5: score line is not an object", ":6: score line has no id",
                     ":7: score line is not JSON (Expecting value: line 1 column 1 (char 0))"]


def test_bad_score_lines_are_problems_and_left_out(tmp_path: Path) -> None:
    """A header without a share and a count, a second line for an id (other than bfcl's own
    repeat of an inference error, tested in test_provenance), ``valid: true`` and a ``valid``
    that is not a boolean: each one ``file:line [id]: reason`` line, left out (they were
    dropped, overwrote the first line, counted as a failure, accepted); the rest read."""
    from careful_engine.analysis import bfcl_scores
    from careful_engine.analysis.provenance.official import read_official

    ids = [f"multi_turn_base_{i}" for i in range(4)]
    lines = ['{"accuracy": NaN, "correct_count": "84", "total_count": -1}',
             json.dumps({"id": ids[0], "valid": False, "error": {"error_type": "first"}}),
             json.dumps({"id": ids[0], "valid": False, "error": {"error_type": "second"}}),
             json.dumps({"id": ids[1], "valid": True}),
             json.dumps({"id": ids[2], "valid": "maybe"}),
             json.dumps({"id": ids[3], "error_type": "no:valid"})]
    path = tmp_path / "BFCL_v4_multi_turn_base_score.json"
    path.write_text("\n".join(lines) + "\n")
    read = bfcl_scores.read_score_lines(path)
    assert {i: f.error_type for i, f in read.failed.items()} == {ids[0]: "first",
                                                                 ids[3]: "no:valid"}
    assert (read.accuracy, read.correct, read.total) == (None, None, None)
    expected = [":1: first line is not a score header with an accuracy from 0 to 1 and a "
                "total_count; left out",
                f":3 [{ids[0]}]: a second score line for this id (first on line 2); left out",
                f":4 [{ids[1]}]: valid is true, but a score file lists failed entries only; "
                "left out",
                f":5 [{ids[2]}]: valid is 'maybe', not true or false; left out"]
    assert [str(p).split(path.name, 1)[1] for p in read.problems] == expected
    official = read_official(path, "multi_turn_base")
    assert official.failed == {ids[0]: "first", ids[3]: "no:valid"}
    assert official.accuracy is None and official.valid(ids[1]) is None
    assert [str(p).split(path.name, 1)[1] for p in official.problems] == expected
    path.write_text('{"accuracy": 0.5, "correct_count": "1", "total_count": 2}\n')
    read = bfcl_scores.read_score_lines(path)
    assert (read.accuracy, read.correct, read.total) == (0.5, None, 2)
    assert [str(p).split(path.name, 1)[1] for p in read.problems] == [
        ":1: correct_count is '1', not a whole number from 0; the header is read without it"]


def test_a_correct_count_over_the_total_is_a_problem(tmp_path: Path) -> None:
    """A header whose correct_count exceeds its total_count was read as it stood (5 correct
    of 4); it is one problem line like a correct_count that is not a count, the rest of the
    header kept."""
    from careful_engine.analysis import bfcl_scores

    path = tmp_path / "BFCL_v4_multi_turn_base_score.json"
    path.write_text('{"accuracy": 0.5, "correct_count": 5, "total_count": 4}\n')
    expected = [":1: correct_count is 5, more than total_count 4; the header is read "
                "without it"]
    read = bfcl_scores.read_score_lines(path)
    assert (read.accuracy, read.correct, read.total) == (0.5, None, 4)
    assert [str(p).split(path.name, 1)[1] for p in read.problems] == expected
    audit, problems = sa.read_score_file(path, "m")
    assert audit is not None and (audit.correct, audit.total) == (None, 4)
    assert [str(p).split(path.name, 1)[1] for p in problems] == expected
    path.write_text('{"accuracy": 1.0, "correct_count": 4, "total_count": 4}\n')
    read = bfcl_scores.read_score_lines(path)
    assert (read.correct, read.total, read.problems) == (4, 4, [])


@pytest.mark.parametrize("header", ['{"accuracy": 0.5, "total_count": "4"}',
                                    '{"accuracy": 0.5, "total_count": -4}',
                                    '{"accuracy": true, "total_count": 4}',
                                    '{"total_count": 4}'])
def test_a_header_without_a_share_and_a_count_skips_the_file(tmp_path: Path, header: str) -> None:
    path = tmp_path / "BFCL_v4_multi_turn_base_score.json"
    path.write_text(header + "\n")
    audit, problems = sa.read_score_file(path, "m")
    assert audit is None
    assert [str(p).split(path.name, 1)[1] for p in problems] == [
        ":1: first line is not a score header with an accuracy from 0 to 1 and a total_count; "
        "file skipped"]


def test_the_terminal_tables_are_whole_at_80_columns(tmp_path: Path) -> None:
    """Every block at 100.0, a long model name and folder, five-digit counts: an 80-column
    terminal shows every column and the whole caption (the overall table lost its "relev"
    column and its caption's ends: "unwtd: pl", "`careful provenan")."""
    from careful_engine.present import score_audit as show

    from .terminal_fit import cut_at_80

    full = sa.Overall(dict.fromkeys(sa.BLOCKS, 1.0), 1.0, 1.0, 1.0, [])
    credited = sa.Credited("live_irrelevance", 12345, 12345, tmp_path / "r.json", read=12345,
                           empty=12345, calls=12345, other=12345)
    audits = [sa.ModelAudit("Salesforce_Llama-xLAM-2-8b-fc-r", sa.ModelScores("m"), full,
                            [credited], 0, 0, [])]
    folder = Path("/work/shared/runs/" + "x" * 60)
    tables = [show.overall_terminal(audits, folder / "score"),
              show.credited_terminal(audits, folder / "result")]
    problems = [f"{t.title}: {p}" for t in tables for p in cut_at_80(t)]
    assert not problems, "\n".join(problems)


def test_careful_score_files_are_called_careful_s(tmp_path: Path) -> None:
    """The score files `careful score` writes (score/ beside conversations.jsonl) are named
    careful's own in the table and the files, not "bfcl's score files ... as bfcl wrote
    them"; bfcl's beside them still are bfcl's."""
    ours = tmp_path / "careful-score"
    write_score(ours, "m", "multi_turn_base", 150, 200)
    (ours / "conversations.jsonl").write_text("")
    write_score(tmp_path, "m", "multi_turn_base", 140, 200)
    for given, source, whose in ((ours, ours / "score", "careful's"),
                                 (ours / "score" / "m", ours / "score" / "m", "careful's"),
                                 (tmp_path, tmp_path / "score", "bfcl's")):
        out = tmp_path / f"out-{len(given.parts)}"
        res = runner.invoke(app, ["audit", "scores", str(given), "--out", str(out)],
                            env={"COLUMNS": "200"}, catch_exceptions=False)
        assert res.exit_code == 0, res.output
        flat = "".join(res.output.split())  # wrapped, a long path folded
        caption = "".join(json.loads((out / "score_audit_overall.json").read_text())[
            "caption"].split())
        assert f"from{whose}scorefiles" in flat
        if whose == "careful's":
            assert f"source:careful'sownscorefilesin{source},as`carefulscore`wrotethem" \
                in flat and f"careful'sownscorefilesin{source}" in caption
            assert "bfcl'sscorefiles" not in flat + caption
            assert "asbfclwrotethem" not in flat + caption
        else:
            assert f"source:bfcl'sscorefilesin{source},asbfclwrotethem" in flat
            assert "careful's" not in flat + caption
