"""Terminal safety (issue 12, item 5): every string from a file, a model or a person reaches
the terminal literally, in the CLI and in the workbench: Rich markup shown as text, control
characters (escape sequences, bells, bidi overrides, lone surrogates) shown as escapes."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.core.runs import Problem
from careful_engine.core.safe_text import (
    csv_cell,
    literal,
    markdown_literal,
    markdown_text,
    visible,
)
from careful_engine.present.report import Report
from careful_engine.present.tables import terminal_table
from tests import hostile_corpus as hc

_load()
runner = CliRunner()
NAME = hc.HOSTILE_NAME
SHOWN = visible(NAME)  # what the terminal must show for it


def careful(*args: object):
    return runner.invoke(app, [str(a) for a in args], color=True)


def assert_literal(text: str) -> None:
    """No control character reached the output, and the markup came out as text."""
    raw = [c for c in text if c in "\x07\x1b\u202e" or 0xD800 <= ord(c) <= 0xDFFF]
    # Rich's own colour codes are ESC [ ... m: allow those, and nothing else
    stripped = _strip_sgr(text)
    assert "\x1b" not in stripped and "\x07" not in stripped and "\u202e" not in stripped, (
        raw, text)
    assert "[red]evil[blink]" in stripped.replace("\n", ""), text


def _strip_sgr(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def render(renderable) -> str:
    console = Console(width=200, force_terminal=True, color_system="standard", highlight=False)
    with console.capture() as cap:
        console.print(renderable)
    return cap.get()


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> Path:
    """A run whose model folder, entry ids, manifest decoder and model text are hostile."""
    run = tmp_path_factory.mktemp("ts") / "run"
    evil_step = [{"cd": json.dumps({"folder": NAME})}]
    bad_id = f"multi_turn_base_{NAME}"
    hc.write_model(run, NAME, [json.dumps({"id": bad_id, "result": [[evil_step]]}),
                               json.dumps({"id": hc.ids()[5], "result": NAME})])
    hc.write_model(run, "decoder-evil", decoder=NAME)
    return run


# ---------------------------------------------------------------- the helpers


@pytest.mark.parametrize("text", [NAME, "[bold]x[/]", "\\[not]", "x\\", "\ud800\udfff",
                                  "\x9b31m", "a\u2066b\u2069", "tab\there", "\x00nul"])
def test_literal_renders_as_itself(text) -> None:
    out = render(f"[bold]{literal(text)}[/bold]")  # as the commands use it, inside markup
    assert _strip_sgr(out).rstrip("\n") == visible(text)
    assert not any(c in _strip_sgr(out) for c in "\x00\x07\x1b\x9b\u202e\u2066")


def test_report_and_terminal_tables_show_cells_titles_and_captions_literally() -> None:
    rep = Report(f"title {NAME}", ["model", "n"], caption=f"caption {NAME}")
    rep.add(NAME, 1)
    for table in (rep.rich(), terminal_table(f"t {NAME}", ["a", "b"], [[NAME, "1"]],
                                             f"c {NAME}", first_width=80)):
        out = _strip_sgr(render(table))
        assert out.count("[red]evil[blink]") == 3 and "\x1b" not in out and "\x07" not in out
    assert visible(NAME) in rep.markdown()


def _html(markdown: str) -> str:
    """Markdown rendered as GitHub renders it (CommonMark with tables, raw HTML allowed)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)


HOSTILE_CELLS = [NAME, "evil|<b>*x*</b>](http://a)", "`tick` ``x``", ":smile: @octocat",
                 "www.example.com", "<img src=x onerror=alert(1)>", "&amp; &lt;", " x ", "_u_",
                 "a\\|b", "\\", "1. item", "# h", "plain words 1.5 %"]


@pytest.mark.parametrize("text", HOSTILE_CELLS)
def test_markdown_cells_render_as_themselves(text) -> None:
    """A name from a file in a Markdown table is one cell that shows exactly its visible
    text: no HTML, link, emphasis, entity or column of its own; anything but plain words is
    a code span, where GitHub reads no emoji shortcode or mention either."""
    import html
    import re

    cell = markdown_literal(text)
    out = _html(f"| a | b |\n|---|---|\n| {cell} | 7 |\n")
    cells = re.findall(r"<td>(.*?)</td>", out, re.S)
    assert len(cells) == 2 and cells[1] == "7"  # the number stays in its own column
    inner = cells[0]
    if inner.startswith("<code>"):
        assert inner.endswith("</code>") and inner.count("<") == 2
        inner = inner[len("<code>"):-len("</code>")]
    else:
        assert "<" not in inner and re.fullmatch(r"[A-Za-z0-9 ,.;%+=/-]*", text)
    assert html.unescape(inner) == visible(text).strip()


@pytest.mark.parametrize("text", HOSTILE_CELLS)
def test_markdown_prose_renders_as_itself(text) -> None:
    import html

    out = _html(f"**{markdown_text(text.strip())}**\n").strip()  # (as Report strips a title)
    assert out.startswith("<p><strong>") and out.endswith("</strong></p>")
    inner = out[len("<p><strong>"):-len("</strong></p>")]
    assert "<" not in inner and html.unescape(inner) == visible(text).strip()


def test_report_markdown_keeps_its_columns() -> None:
    rep = Report(f"title {NAME} *x*", ["model", "n"], caption=f"- caption {NAME} [l](u)")
    rep.add("evil|<b>x</b>", 1)
    rep.add(NAME, 2)
    out = _html(rep.markdown())
    assert out.count("<td>") == 4 and "<td>1</td>" in out and "<td>2</td>" in out
    assert "<b>" not in out and "<a " not in out and "<em>" not in out and "<ul>" not in out


def test_report_csv_escapes_control_characters_as_every_table_does() -> None:
    import csv
    import io

    rep = Report("t", ["model", f"n{NAME}"])
    rep.add(NAME, 1)
    text = rep.csv()
    assert "\x1b" not in text and "\x07" not in text
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[1] == [visible(NAME), "1"] and rows[0][1] == visible(f"n{NAME}")
    assert rep.json()["rows"][0]["model"] == NAME  # the JSON keeps the exact text


@pytest.mark.parametrize(("text", "cell"), [
    ("=HYPERLINK(\"http://x\",\"y\")", "'=HYPERLINK(\"http://x\",\"y\")"),
    ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"), ("-2+3", "'-2+3"), ("@SUM(A1)", "'@SUM(A1)"),
    ("\t=1", "\\x09=1"),  # (a tab is escaped first: the cell starts with a backslash)
    ("-2", "-2"), ("+1.7", "+1.7"), ("-0.5e3", "-0.5e3"), ("model", "model"), ("", ""),
    ("a=b", "a=b"),
])
def test_csv_cell_is_never_a_formula(text, cell) -> None:
    assert csv_cell(text) == cell


def test_score_and_leaderboard_csvs_never_hold_a_formula(tmp_path) -> None:
    """A model folder named as a spreadsheet formula: every CSV the commands write shows it
    with a leading quote; the JSON keeps the exact name."""
    import csv
    import io

    name = "=HYPERLINK(\"evil\",\"x\")+cmd|' -C calc'!A0"
    run = tmp_path / "@SUM(1+1)"  # (leaderboard's entries are run folders)
    hc.write_model(run, name, good=3)
    for args in (["score", run, "--out", tmp_path / "s"],
                 ["leaderboard", run, "--out", tmp_path / "l"]):
        res = careful(*args)
        # (1: the folder holds 3 of the category's conversations; the rest count as failed)
        assert res.exit_code in (0, 1) and "Traceback" not in res.output, res.output
    written = sorted((tmp_path / "s").rglob("*.csv")) + sorted((tmp_path / "l").rglob("*.csv"))
    assert written
    cells = [c for p in written for row in csv.reader(io.StringIO(p.read_text())) for c in row]
    assert "'" + name in cells and "'@SUM(1+1)" in cells
    assert not [c for c in cells if c[:1] in ("=", "@") or (c[:1] in "+-" and c[1:2].isalpha())]
    assert any(json.dumps(name)[1:-1] in p.read_text() for p in (tmp_path / "s").rglob("*.json"))
    assert any("\"@SUM(1+1)\"" in p.read_text() for p in (tmp_path / "l").rglob("*.json"))


def test_problem_lines_are_visible() -> None:
    p = Problem(f"/runs/{NAME}/x.json", f"id is not in {NAME}", 3, NAME)
    s = str(p)
    assert "\x1b" not in s and "\x07" not in s and "\\x1b" in s and "[red]" in s


# ---------------------------------------------------------------- the commands


def test_score_shows_folder_ids_and_decoder_literally(tmp_path, hostile_run) -> None:
    res = careful("score", hostile_run, "--out", tmp_path / "out")
    assert res.exit_code == 1, res.output
    assert_literal(res.output)
    assert SHOWN in res.output.replace("\n", "") or "evil" in res.output
    assert "\\x1b" in res.output and "\\u202e" in res.output
    # the decoder named by the manifest, quoted in the unusable-folder message
    assert "decoder-evil" in res.output


@pytest.mark.parametrize("args", [
    ["leaderboard", "{run}", "--out", "{out}"],
    ["audit", "decode", "{run}", "--out", "{out}"],
    ["provenance", "{run}"],
    ["sensitivity", "{run}", "--detector", "strict", "--detector", "qmark", "--out", "{out}"],
])
def test_reading_commands_show_names_literally(tmp_path, hostile_run, args) -> None:
    res = careful(*[a.format(run=hostile_run, out=tmp_path / "out") for a in args])
    assert res.exit_code in (1, 2), res.output
    assert_literal(res.output)


def test_cost_shows_names_and_prices_literally(tmp_path, hostile_run) -> None:
    res = careful("cost", hostile_run)
    assert res.exit_code == 1, res.output  # the hostile run's bad lines are reported
    assert_literal(res.output)
    prices = json.loads((Path(__file__).parents[1] / "careful_engine" / "data"
                         / "prices.json").read_text())
    prices["models"][0]["display"] = NAME
    table = tmp_path / "prices.json"
    table.write_text(json.dumps(prices))
    res = careful("cost", hostile_run, "--prices", table)
    assert res.exit_code == 1, res.output  # the hostile run's bad lines are reported
    assert_literal(res.output)


@pytest.mark.parametrize("change, reason", [
    ({"input": -1.0}, "input must be a price from 0 to"),
    ({"output": "NaN"}, "output must be a price from 0 to"),
    ({"output": 1e308}, "output must be a price from 0 to"),
    ({"ids": 5}, "ids must be a list"),
])
def test_price_tables_the_guard_cannot_trust_are_refused(tmp_path, change, reason) -> None:
    prices = json.loads((Path(__file__).parents[1] / "careful_engine" / "data"
                         / "prices.json").read_text())
    prices["models"][1].update(change)
    table = tmp_path / "prices.json"
    table.write_text(json.dumps(prices))
    res = careful("cost", tmp_path, "--prices", table)
    assert res.exit_code == 2 and "models[1]" in res.output and reason in res.output, res.output
    table.write_text(json.dumps({**prices, "models": 5}))
    res = careful("cost", tmp_path, "--prices", table)
    assert res.exit_code == 2 and "'models' must be a list" in res.output, res.output


def test_emoji_codes_in_names_stay_as_text(tmp_path) -> None:
    """Rich turns ``:warning:`` into an emoji; text from files must come out as written."""
    run = tmp_path / "run"
    hc.write_model(run, "m:warning:x")
    res = careful("score", run, "--out", tmp_path / "out")
    assert res.exit_code == 1, res.output
    assert ":warning:" in res.output and "\u26a0" not in res.output and "⚠" not in res.output


def test_non_utf8_folder_name_is_shown_escaped(tmp_path) -> None:
    run = tmp_path / "run"
    hc.write_model(run, b"\xff\x1b[2J")
    res = careful("score", run, "--out", tmp_path / "out")
    assert res.exit_code == 1, res.output
    assert "\\udcff\\x1b[2J" in res.output and "\x1b[2J" not in res.output


def test_missing_path_and_out_are_quoted_literally(tmp_path) -> None:
    res = careful("score", tmp_path / NAME)
    assert res.exit_code == 2
    assert_literal(res.output)
    target = tmp_path / f"f{NAME}"
    target.write_text("x")
    res = careful("leaderboard", tmp_path, "--out", target)
    assert res.exit_code == 2 and "[red]evil" in res.output and "\x07" not in res.output


def test_declare_warnings_are_literal(tmp_path, hostile_run) -> None:
    res = careful("declare", "--runs", hostile_run, "--out", tmp_path / "e.json")
    assert res.exit_code == 1, res.output
    assert_literal(res.output)


def test_annotation_errors_quote_names_literally(tmp_path) -> None:
    """A name from a person, refused, is quoted as text in the error."""
    res = careful("round", "new", NAME, "--db", tmp_path / "a.db", "--annotator", "ann1")
    assert res.exit_code == 2, res.output
    assert "\x1b" not in _strip_sgr(res.output) and "\x07" not in res.output


# ---------------------------------------------------------------- the workbench


def test_workbench_shows_hostile_names_and_model_text_literally(tmp_path, hostile_run,
                                                                monkeypatch) -> None:
    from textual.widgets import DataTable

    from workbench.app import WorkbenchApp
    from workbench.context import Settings

    monkeypatch.chdir(tmp_path)
    settings = Settings(runs=[hostile_run], db=tmp_path / "wb.db",
                        boundary_dir=Path("boundary"), cache_dir=tmp_path / "cache",
                        user="tester")

    async def go() -> tuple[list, str, list[str]]:
        app = WorkbenchApp(settings)
        async with app.run_test(size=(160, 40)) as pilot:
            for _ in range(3):
                await app.workers.wait_for_complete()
                await pilot.pause()
            table = app.screen.query_one("#runs", DataTable)
            cells = [table.get_row_at(i)[0] for i in range(table.row_count)]
            app.notify(f"error {NAME}")
            await pilot.pause()
            notes = [n.message for n in app._notifications]
            return cells, app.export_screenshot(), notes

    cells, svg, notes = asyncio.run(go())
    label = next(c for c in cells if "evil" in str(c))
    rendered = _strip_sgr(render(label) if not isinstance(label, str) else
                          render(_markup_cell(label)))
    assert "[red]evil[blink]" in rendered and "\x1b" not in rendered and "\\x1b" in rendered
    assert all("\x1b" not in n and "\x07" not in n for n in notes)
    assert "\x1b" not in svg and "\x07" not in svg


def _markup_cell(text: str):
    from rich.text import Text

    return Text.from_markup(text)  # how DataTable renders a str cell


def test_workbench_call_text_is_visible() -> None:
    from workbench.widgets.calls import _clip
    from workbench.widgets.diff import diff_text

    assert "\x1b" not in _clip(f"cd(folder='{NAME}')")
    out = render(diff_text([{"path": NAME, "kind": "changed", "before": NAME, "after": NAME}]))
    assert _strip_sgr(out).count("[red]evil[blink]") == 3 and "\x07" not in out


def test_workbench_tables_leave_emoji_codes_as_text(tmp_path, monkeypatch) -> None:
    """DataTable renders a str cell as Rich markup, emoji codes included: cells from files are
    Text, so a run named ``run :warning: x`` shows as written."""
    from textual.widgets import DataTable

    from workbench.app import WorkbenchApp
    from workbench.context import Settings

    run = tmp_path / "run :warning: x"
    hc.write_model(run, "m")
    monkeypatch.chdir(tmp_path)
    settings = Settings(runs=[run], db=tmp_path / "wb.db", boundary_dir=Path("boundary"),
                        cache_dir=tmp_path / "cache", user="tester")

    async def go() -> list:
        app = WorkbenchApp(settings)
        async with app.run_test(size=(160, 40)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            table = app.screen.query_one("#runs", DataTable)
            return [table.get_row_at(i)[0] for i in range(table.row_count)]

    cells = asyncio.run(go())
    shown = [render(c) if not isinstance(c, str) else render(_markup_cell(c)) for c in cells]
    assert any(":warning:" in s for s in shown) and not any("⚠" in s for s in shown), shown


def test_every_invisible_format_character_is_shown_as_an_escape() -> None:
    """Unicode's format characters (Cf: bidi marks, zero-width spaces and joiners, invisible
    operators, tag characters), line and paragraph separators: none reaches a terminal raw."""
    import sys
    import unicodedata

    hidden = [chr(c) for c in range(sys.maxunicode + 1)
              if unicodedata.category(chr(c)) in ("Cf", "Zl", "Zp")]
    assert len(hidden) > 150
    for keep in (False, True):
        shown = visible("".join(hidden), keep_newlines=keep)
        assert shown.isascii(), [c for c in shown if not c.isascii()][:5]
    assert visible("\U000e0041") == "\\U000e0041"  # (five hex digits would read ambiguously)
    assert visible("plain é 漢字 😀 \u00e9") == "plain é 漢字 😀 é"


def test_a_model_folder_with_invisible_characters_is_shown_escaped(tmp_path) -> None:
    name = "m\u061cx\u200by\u2060z"
    run = tmp_path / "run"
    hc.write_model(run, name, [json.dumps({"id": hc.ids()[0], "result": [[[{"pwd": "{}"}]]]})])
    res = careful("score", run, "--out", tmp_path / "out")
    assert res.exit_code in (0, 1), res.output
    assert not any(c in res.output for c in "\u061c\u200b\u2060"), res.output
    assert "\\u061c" in res.output.replace("\n", ""), res.output


def test_a_terminal_that_cannot_encode_a_character_gets_an_escape(workdir) -> None:
    """Under ``PYTHONIOENCODING=ascii`` (or a C locale without UTF-8) a character the stream
    cannot hold (the en dash of a score table's n/a) is written as a backslash escape; it
    made ``careful score`` an internal error (exit 3) after it had written its files."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    done = subprocess.run([sys.executable, "-m", "careful_cli", "score", "runs/alpha", "-o",
                           "out"], capture_output=True, env=env, timeout=600)
    text = (done.stdout + done.stderr).decode("ascii")  # nothing else reached the streams
    assert done.returncode in (0, 1), text  # (1: this small run's missing ids)
    assert "written to out" in text and "internal error" not in text and "Traceback" not in text
    assert "\\u2013" in text  # the n/a dash, as an escape


def test_a_long_label_folds_after_a_separator_not_mid_word() -> None:
    """At 80 columns the rule-totals table cut ``gpt-oss-120b-vllm-v0.10.2`` into
    ``gpt-oss-120b-v`` / ``llm-v0.10.2`` (rich folds text without spaces anywhere): a label
    now folds after a ``-``, ``_``, ``/``, ``:`` or space within reach, and is cut only
    where a piece alone is wider than its column; what is shown is the label, whole."""
    from careful_engine.present.tables import fold_label

    labels = ["gpt-oss-120b-vllm-v0.10.2", "deepseek-r1-0528-errors", "x" * 30, "ab[bold]c\x1b"]
    rows = [[label, "590/600", "149"] for label in labels]
    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(terminal_table("t", ["entry", "conv", "coll"], rows, first_width=14))
    text = console.export_text().split("─ \n", 1)[1]  # the rows, under the header's rule
    lines = [line[:16].strip() for line in text.splitlines()]
    assert lines[:4] == ["gpt-oss-120b-", "vllm-v0.10.2", "deepseek-r1-", "0528-errors"]
    assert lines[4:7] == ["x" * 14, "x" * 14, "xx"]
    assert lines[7] == visible("ab[bold]c\x1b")  # literally, as every cell
    for label in labels:
        for width in range(1, 32):
            folded = fold_label(label, width)
            assert folded.replace("\n", "") == label
            assert all(len(line) <= width for line in folded.split("\n"))
