"""The one printer of input problems that every command uses (careful_cli.common)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from careful_cli import common
from careful_engine.core.runs import Problem


@pytest.fixture
def stderr(monkeypatch):
    from rich.console import Console

    console = Console(stderr=False, record=True, width=200, emoji=False, highlight=False)
    monkeypatch.setattr(common, "err", console)
    return console


def test_grouped_by_kind_relative_and_unchanged(tmp_path: Path, stderr) -> None:
    run = tmp_path / "run"
    run.mkdir()
    f = str(run / "m" / "BFCL_v4_multi_turn_base_result.json")
    problems = ([Problem(f, f"line is not JSON (Expecting value: column {i})", i + 1,
                         f"multi_turn_base_{i}") for i in range(12)]
                + [Problem(f, "token count -3 is not a whole number of tokens", 40, "x")]
                + [Problem(f, "id missing from the file") for _ in range(7)])
    before = [vars(p).copy() for p in problems]
    common.print_input_problems(problems, run)
    text = stderr.export_text()
    assert [vars(p) for p in problems] == before  # the caller's problems are not rewritten
    assert text.startswith(f"20 input problem(s) under {run}:")
    assert "  m/BFCL_v4_multi_turn_base_result.json:1 [multi_turn_base_0]: line is not JSON" \
        in text
    assert text.count("line is not JSON") == 5 + 1  # five shown, then the count of the rest
    assert "... and 7 more: line is not JSON" in text
    assert "m/BFCL_v4_multi_turn_base_result.json:40 [x]: token count -3" in text
    assert "m/BFCL_v4_multi_turn_base_result.json: 7 id(s) missing from the file; counted as " \
           "failed" in text
    assert str(run) + "/m" not in text.split("\n", 1)[1]


def test_many_kinds_are_bounded(tmp_path: Path, stderr) -> None:
    problems = [Problem("f.json", f"odd problem {chr(97 + i % 26)}{i // 26}: detail", i + 1)
                for i in range(60)]
    common.print_input_problems(problems, tmp_path, missing="unverifiable")
    lines = stderr.export_text().splitlines()
    assert len(lines) <= 1 + 25 + 1 + 1  # header, the limit, the last group's count, the rest
    assert lines[-1].startswith("  ... and ") and "other kind(s)" in lines[-1]
    shown = sum(1 for line in lines if "odd problem" in line and "... and" not in line)
    rest = int(lines[-1].split()[2])
    assert shown + rest == 60  # every problem is either shown or counted


def test_text_is_literal(tmp_path: Path, stderr) -> None:
    common.print_input_problems([Problem("f\x1b[31m.json", "[bold]x[/] :smile: \x07", 3,
                                         "id\u202e")], None)
    text = stderr.export_text()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "[bold]x[/] :smile:" in text and "😄" not in text


def test_quiet_gives_the_count_alone(tmp_path: Path, stderr) -> None:
    """-q prints the tables only; a run with bad input still says so, in one line."""
    f = str(tmp_path / "m" / "BFCL_v4_multi_turn_base_result.json")
    problems = [Problem(f, "line is not JSON (x)", 2), Problem(f, "id missing from the file")]
    common.print_input_problems(problems, tmp_path, quiet=True)
    assert stderr.export_text() == f"2 input problem(s) under {tmp_path} (listed without -q)\n"
    common.print_input_problems([], tmp_path, quiet=True)
    assert stderr.export_text() == ""


def test_a_huge_id_is_quoted_cut(tmp_path: Path, stderr) -> None:
    """A result line whose id is 4 million characters: its problem line quoted it whole (the
    workbench's p took 52 s). The line shows its ends and its length; the field stays whole."""
    huge = "A" * 2_000_000 + "B" * 2_000_000
    p = Problem(str(tmp_path / "m" / "f.json"), "id is not in multi_turn_base", 3, huge)
    line = str(p)
    assert len(line) < 400 and p.id == huge
    assert "[AAAA" in line and "BBBB… (" not in line and "BBBB (4,000,000 characters)]" in line
    common.print_input_problems([p], tmp_path)
    assert "(4,000,000 characters)" in stderr.export_text()


def test_every_reader_words_a_line_over_the_cap_alike(tmp_path: Path, monkeypatch) -> None:
    """A line longer than a line is read with is one problem, never parsed, and every reader
    (result files, score files, careful score's lines, a resumed run) says so in one wording;
    the lines around it are read."""
    import json

    from careful_engine.analysis.bfcl_scores import read_score_lines
    from careful_engine.browse.runs import read_scores
    from careful_engine.core import runs
    from careful_engine.generation.results import repair

    monkeypatch.setattr(runs, "MAX_ENTRY_CHARS", 5_000)
    ids = [f"multi_turn_base_{i}" for i in range(3)]
    lines = [json.dumps({"id": i, "model": "m", "result": [], "x": [{}] * (2_000 * (i == ids[1]))})
             for i in ids]
    reason = (f"line is {len(lines[1]):,} characters long, more than the 5,000 a line is read "
              "with")
    path = tmp_path / "m" / "BFCL_v4_multi_turn_base_result.json"
    path.parent.mkdir()
    path.write_text("\n".join(lines) + "\n")
    loaded = runs.load_result_file(runs.ResultFile(path, "m", "multi_turn_base", 4))
    assert list(loaded.entries) == [ids[0], ids[2]]
    assert [(p.line, p.id, p.message) for p in loaded.problems if p.line] == [
        (2, ids[1], f"{reason}; skipped")]
    scores = read_score_lines(path)
    assert list(scores.failed) == [ids[0], ids[2]]
    assert [(p.line, p.message) for p in scores.problems] == [(2, f"{reason}; skipped")]
    problems: list[Problem] = []
    read_scores(path, "m", problems)  # (lines 1 and 3 are no score lines: problems of their own)
    assert [(p.line, p.message) for p in problems if p.line == 2] == [(2, f"{reason}; skipped")]
    assert repair(path) == ({ids[0], ids[2]}, [f"{path.name}:2: {reason}; dropped"])


def test_the_progress_bar_shows_folder_names_literally() -> None:
    """The bar's description names model folders and entries from files: on a terminal,
    markup in it is not acted on and its control characters reach it as escapes."""
    import io

    from rich.console import Console
    from rich.progress import Progress

    out = io.StringIO()
    term = Console(file=out, force_terminal=True, color_system="truecolor", width=200)
    bar = common.progress_bar()
    progress = Progress(*bar.columns, console=term)
    name = "m\x1b]0;PWNED\x07\x1b[31mRED[link=http://x]L[/link][bold red]R\u202e"
    progress.add_task(f"{name} base", total=3)
    term.print(progress.make_tasks_table(progress.tasks))
    text = out.getvalue()
    assert "\x1b]0;PWNED" not in text and "\x1b]8;" not in text  # no title, no hyperlink
    assert "\\x1b]0;PWNED\\x07\\x1b[31mRED[link=http://x]L[/link][bold red]R" in text
    assert "\u202e" not in text


def test_type_names_an_object_result_and_the_file_used_are_worded_right(tmp_path: Path) -> None:
    """"entry is a int" / "inference_log is a int" read "an int"; a result that is an object
    was "an error string: {'a': 1}"; with flat V3, multi_turn/ V3 and V4 files for one
    category, the flat V3 file was said to be used instead of the multi_turn/ V3 one although
    the V4 file is used."""
    import json

    from careful_engine.analysis.provenance.log import parse_log
    from careful_engine.core import runs
    from careful_engine.scoring.score import discover

    model = tmp_path / "m"
    (model / "multi_turn").mkdir(parents=True)
    ids = [f"multi_turn_base_{i}" for i in range(2)]
    path = model / "multi_turn" / "BFCL_v4_multi_turn_base_result.json"
    path.write_text("\n".join(["7", json.dumps({"id": ids[0], "result": {"a": 1}}),
                               json.dumps({"id": ids[1], "result": "boom"})]) + "\n")
    loaded = runs.load_result_file(runs.ResultFile(path, "m", "multi_turn_base", 4))
    said = {(p.line, p.id): p.message for p in loaded.problems if p.line}
    assert said == {(1, None): "entry is an int, not an object",
                    (2, ids[0]): "result is an object, not a list of turns: {'a': 1}",
                    (3, ids[1]): "result is an error string: boom"}
    log = parse_log(5)
    assert log is not None and "inference_log is an int, not a list" in log.problems
    for v3 in (model / "BFCL_v3_multi_turn_base_result.json",
               model / "multi_turn" / "BFCL_v3_multi_turn_base_result.json"):
        v3.write_text(json.dumps({"id": ids[0], "result": []}) + "\n")
    by_model, problems = discover(tmp_path)
    assert [rf.path for rf in by_model["m"]] == [path]
    passed_over = [p for p in problems if "is used instead" in p.message]
    assert len(passed_over) == 2
    assert all(f"({path})" in p.message for p in passed_over), passed_over


def test_compare_of_a_run_with_itself_reports_each_problem_once(tmp_path: Path) -> None:
    """``careful compare X X`` read X's files for both sides and reported each of their
    problems twice (2 N "× id missing from the file (in 1 file(s))" for N missing ids)."""
    import json

    from typer.testing import CliRunner

    from careful_cli import _load, app
    from tests import hostile_corpus as hc

    _load()
    run = tmp_path / "run"
    hc.write_model(run, "m", ["not json", hc.reference_lines(hc.N_GOOD + 1)[-1]])
    missing = 200 - hc.N_GOOD - 1
    res = CliRunner().invoke(app, ["compare", str(run), str(run), "-j1", "--out",
                                   str(tmp_path / "cmp"), "--format", "json", "--output",
                                   str(tmp_path / "ci.json")])
    assert res.exit_code == 1, res.output
    out = res.output.replace("\n", "")  # folded at the runner's width
    assert out.count(f": {missing} id(s) missing from the file") == 1, res.output
    assert out.count("line is not JSON") == 1, res.output
    assert f"{missing + 1} input problem(s)" in res.output
    doc = json.loads((tmp_path / "ci.json").read_text())
    assert len(doc["problem_lines"]) == missing + 1, doc["problems"]


@pytest.mark.parametrize("command", ["compare", "leaderboard", "sensitivity"])
def test_every_problem_line_is_in_problems_txt_of_every_output_folder(tmp_path: Path,
                                                                     command: str) -> None:
    """compare put every input problem's line in its CI JSON document but wrote no
    problems.txt (nor did leaderboard and sensitivity), while score writes one in its output
    folder and names it under the folded list: they now write it the same way, and name it."""
    import json

    from typer.testing import CliRunner

    from careful_cli import _load, app
    from careful_engine.scoring.score import score_run
    from tests import hostile_corpus as hc

    _load()
    run = tmp_path / "run"
    hc.write_model(run, "m", ["not json", "[1]"])
    expected = [str(p) for p in score_run(run, effects=None).problems]
    out = tmp_path / "out"
    args = [command, str(run), *([str(run)] if command == "compare" else []), "-j1",
            "--out", str(out)]
    if command == "compare":
        args += ["--format", "json", "--output", str(tmp_path / "ci.json")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1, res.output
    assert (out / "problems.txt").read_text().splitlines() == expected
    flat = res.output.replace("\n", "")
    assert f"(all {len(expected)} listed in {out / 'problems.txt'})" in flat
    if command == "compare":
        assert json.loads((tmp_path / "ci.json").read_text())["problem_lines"] == expected
    res = CliRunner().invoke(app, [*args, "-q"])
    assert f"(listed without -q; all {len(expected)} listed in {out / 'problems.txt'})" \
        in res.output.replace("\n", "")


@pytest.mark.parametrize("command", ["score", "leaderboard"])
def test_a_folder_that_cannot_be_used_is_in_problems_txt(tmp_path: Path, command: str) -> None:
    """A model folder that cannot be scored at all (no decoder for it) made the command exit 1
    with an error line, while problems.txt stayed empty: its line is there now, before the
    input problems'."""
    from typer.testing import CliRunner

    from careful_cli import _load, app
    from tests import hostile_corpus as hc

    _load()
    run = tmp_path / "run"
    hc.write_model(run, "m", ["not json"], good=2)
    hc.write_model(run, "nodecoder", decoder=None, good=2)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, [command, str(run), "-j1", "--out", str(out)])
    assert res.exit_code == 1, res.output
    lines = (out / "problems.txt").read_text().splitlines()
    assert "nodecoder" in lines[0] and "is not in bfcl-eval" in lines[0]
    assert any("result.json:3: truncated last line" in line for line in lines[1:])


def test_the_audits_write_every_problem_line_to_problems_txt(tmp_path: Path) -> None:
    """``audit decode`` and ``audit scores`` folded their problems in the terminal and wrote
    them nowhere (their output folders had no problems.txt): they now write it as score
    does, and name it under the folded list."""
    from typer.testing import CliRunner

    from careful_cli import _load, app
    from careful_engine.analysis import bfcl_scores
    from careful_engine.analysis.decode_audit import audit_run
    from tests import hostile_corpus as hc
    from tests.test_score_audit import write_score

    _load()
    run = tmp_path / "run"
    hc.write_model(run, "m", ["not json"] * 7 + ["[1]"])
    expected = audit_run(run).problems
    assert len(expected) > 5  # more than the terminal shows of one kind
    out = tmp_path / "decode"
    res = CliRunner().invoke(app, ["audit", "decode", str(run), "--out", str(out)])
    assert res.exit_code == 1, res.output
    assert (out / "problems.txt").read_text().splitlines() == [str(p) for p in expected]
    assert f"(all {len(expected)} listed in {out / 'problems.txt'})" \
        in res.output.replace("\n", "")

    path = write_score(tmp_path, "m", "multi_turn_base", 2, 10,
                       [{"id": f"multi_turn_base_{i}", "valid": True} for i in range(8)])
    expected = [str(p) for p in bfcl_scores.read_score_lines(path).problems]
    assert len(expected) == 8
    out = tmp_path / "scores"
    res = CliRunner().invoke(app, ["audit", "scores", str(tmp_path / "score"), "--out",
                                   str(out)])
    assert res.exit_code == 1, res.output
    assert (out / "problems.txt").read_text().splitlines() == expected
    assert f"(all {len(expected)} listed in {out / 'problems.txt'})" \
        in res.output.replace("\n", "")


def test_provenance_names_where_every_problem_is_listed(tmp_path: Path, stderr) -> None:
    """provenance folded its problems and, without --out, named no way to see the rest: it
    names its JSON report where one is written, else the options that list them all."""
    problems = [Problem("f.json", "line is not JSON", i + 1) for i in range(8)]
    common.print_input_problems(problems, None, listing="--out FILE or --json")
    assert "(--out FILE or --json lists all 8)" in stderr.export_text()
    common.print_input_problems(problems, None, full=tmp_path / "r.json",
                                listing="--out FILE or --json")
    assert f"(all 8 listed in {tmp_path / 'r.json'})" in stderr.export_text()


def test_every_type_in_a_message_is_named_with_its_article(tmp_path: Path) -> None:
    """Messages about files named Python types ("not a boundary file (a JSON list", "got
    NoneType", "is a str", "turns are NoneTypes", "not int"): each now names the JSON type
    with its article, as core.json_values.a_kind does everywhere else."""
    import json
    import types

    from careful_engine.annotation import llm, names, signals
    from careful_engine.annotation.errors import AnnotationError
    from careful_engine.core import decode
    from careful_engine.core.runs import DecoderUnavailable, manifest_decoder
    from careful_engine.effects import boundary, declarations
    from careful_engine.scoring.score import discover
    from tests import hostile_corpus as hc

    def error(fn, *args) -> str:
        try:
            fn(*args)
        except (AnnotationError, ValueError, DecoderUnavailable) as e:
            return str(e)
        raise AssertionError("no error")

    assert "(a list, not an object)" in error(boundary.from_json, [])
    assert "not null" in error(boundary.from_json, {"schema": boundary.SCHEMA,
                                                    "destructive": None})
    assert "not an int" in error(boundary.from_json, {"schema": boundary.SCHEMA,
                                                      "destructive": 5})
    path = tmp_path / "effects.json"
    path.write_text(json.dumps({"schema": declarations.SCHEMA, "functions": [1]}))
    assert "'functions' is a list, not an object" in error(declarations.load, path)
    assert declarations.entry_problem([]) == "a list, not an object"
    assert declarations.entry_problem({"class": 5}) == "class is an int"
    assert decode.odd_shape(None).startswith("a turn is null, not a list of steps")
    assert decode.odd_shape(3.5).startswith("a turn is a float, not a list of steps")
    assert error(names.check_reason, 5).endswith("a reason must be text, not an int")
    assert signals.extra_problem(5) == "its inputs are an int, not an object"
    assert signals.extra_problem(None) == "its inputs are null, not an object"
    assert "expected an object, got an int" in error(signals.parse_declarations,
                                                     {"functions": {"ls": 1}})
    assert llm.message_problem(5) == "the answer is not a message (an int without content)"
    block = types.SimpleNamespace(type="text", text=None)
    assert llm.message_problem(types.SimpleNamespace(content=[block])) == \
        "a text block holds null, not text"
    hc.write_model(tmp_path / "run", "m", decoder=7, good=1)
    (rf,) = discover(tmp_path / "run")[0]["m"]
    assert "must be a registry key string, not an int;" in error(manifest_decoder, rf)


def test_score_and_leaderboard_group_problems_alike(tmp_path: Path, stderr,
                                                    monkeypatch) -> None:
    """``careful score`` grouped input problems by one rule (first clause, numbers as #) and
    leaderboard, compare and sensitivity by another (the head before ": " and "; "), as
    counts without a line: the same problems were counted under different kinds, and the
    reason of one that broke the engine was never shown. Both now print them alike."""
    from careful_cli import scored as scored_cli
    from careful_engine.analysis.leaderboard import Scored

    f = str(tmp_path / "m" / "BFCL_v4_multi_turn_base_result.json")
    problems = ([Problem(f, f"token count -{i} is not a whole number of tokens", i, f"x{i}")
                 for i in range(1, 8)]
                + [Problem(f, f"line is not JSON (Expecting value: column {i})", 10 + i)
                   for i in range(7)]
                + [Problem(f, "not scored: too deep; skipped", 20 + i) for i in range(2)]
                + [Problem(f, "could not be scored (RecursionError: deep); counted as failed",
                           30, "multi_turn_base_9")])
    common.print_input_problems(problems, listing="`careful score` on a run folder")
    by_score = stderr.export_text(clear=True)
    scored_cli.report_problems(Scored([], [], problems, []), quiet=False)
    assert stderr.export_text() == by_score
    kinds = {m.group(2): int(m.group(1)) + 5
             for m in re.finditer(r"^  \.\.\. and (\d+) more: (.*)$", by_score, re.M)}
    assert kinds == {"token count -# is not a whole number of tokens": 7,
                     "line is not JSON": 7}
    assert "[multi_turn_base_9]: could not be scored (RecursionError: deep)" in by_score
