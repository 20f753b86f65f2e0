"""Pilot tests for the workbench defects of issue 15, each failing on the code before it: one
truth under another boundary, every binding with no data, the roster, reasons on purpose,
problems in view, decoders as the CLI does them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Input, Select

from careful_engine import browse
from careful_engine.scoring.settings import KEY
from tests.workbench_support import (
    IDS,
    open_agreement,
    open_replay,
    resign,
    screen_text,
    settings,
    settle,
    start_labelling,
)
from workbench.app import WorkbenchApp
from workbench.screens import (
    ReplayScreen,
)

MODES = ("home", "label", "agreement", "replay", "leaderboard")


pytestmark = pytest.mark.usefixtures("no_blink")




def keys_of(binding: Binding) -> list[str]:
    return [k.strip() for k in binding.key.split(",") if k.strip()]


# ---------------------------------------------------------------- defect 5: no data, every key


def test_every_binding_on_every_screen_with_no_data(tmp_path, monkeypatch) -> None:
    """An empty run folder and a new database: every binding of every screen (and the app's,
    but quit) pressed, modal screens closed with Escape; the app never stops on an error."""
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    from workbench.context import Settings

    app = WorkbenchApp(Settings(runs=[tmp_path / "runs"], db=tmp_path / "careful.db",
                                boundary_dir=tmp_path / "boundary", cache_dir=tmp_path / "c",
                                user="tester"))
    pressed: list[str] = []

    async def go():
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            for mode in MODES:
                await app.switch_mode(mode)
                await settle(pilot)
                screen = app.screen
                bindings = [b for b in [*type(screen).BINDINGS, *WorkbenchApp.BINDINGS]
                            if isinstance(b, Binding) and b.action != "quit"]
                for b in bindings:
                    for key in keys_of(b):
                        if app.screen is not screen:  # a key left the screen: come back
                            while isinstance(app.screen, ModalScreen):
                                await settle(pilot, "escape")
                            await app.switch_mode(mode)
                            await settle(pilot)
                        await settle(pilot, key)
                        pressed.append(f"{mode}:{key}")
                        assert app._exception is None, f"{mode}: {key}"
                        while isinstance(app.screen, ModalScreen):
                            await settle(pilot, "escape")
                        for select in app.screen.query(Select):  # an opened drop-down
                            select.expanded = False
        assert app.return_code in (None, 0)

    asyncio.run(go())
    assert {"replay:x", "replay:c", "replay:e", "replay:h", "replay:s"} <= set(pressed), pressed


def test_a_crash_gives_a_nonzero_exit_code(monkeypatch, tmp_path) -> None:
    """`careful workbench` exits 3 when the app stopped on an error (it exited 0)."""
    from typer.testing import CliRunner

    from careful_cli import _load
    from careful_cli import app as cli

    _load()

    def crash(self) -> None:
        self._return_code = 1  # what Textual records when a handler raised

    monkeypatch.setattr(WorkbenchApp, "run", crash)
    (tmp_path / "runs").mkdir()
    result = CliRunner().invoke(cli, ["workbench", str(tmp_path / "runs"), "--db",
                                      str(tmp_path / "c.db")])
    assert result.exit_code == 3


# ---------------------------------------------------------------- defect 1: one truth


def boundary_file(path: Path) -> Path:
    """paper-final without rm and with cd and mkdir: cd's failed attempt becomes collateral."""
    from careful_engine.effects import boundary

    b = boundary.load("paper-final")
    destructive = {k: v for k, v in b.destructive.items() if k != "rm"}
    destructive |= {"cd": "test: moving is destructive", "mkdir": "test: so is mkdir"}
    path.write_text(json.dumps({"schema": boundary.SCHEMA, "name": "test-boundary",
                                "destructive": [{"name": n, "reason": r}
                                                for n, r in destructive.items()]}))
    return path


def row_truth(row) -> tuple:
    return (row.official_valid, row.safe_valid, row.rules)


def view_truth(view) -> tuple:
    from careful_engine.browse.runs import TALLIES

    # as the view shows them: without the protocol, no rule meaningful only under it
    rules = {k: v for k, v in view.rules.counts.items()
             if v and k not in TALLIES and view.shown(k)}
    return (view.verdict.valid, view.safe_valid, rules)


def line_truth(line: dict) -> tuple:
    from careful_engine.browse.runs import TALLIES

    rules = {k: v for k, v in (line.get("rules") or {}).items() if v and k not in TALLIES}
    return (line["official_valid"], line.get("safe_valid"), rules)


def cli_lines(run: Path, bfile: Path, out: Path) -> dict[str, dict]:
    from typer.testing import CliRunner

    from careful_cli import _load
    from careful_cli import app as cli

    _load()

    result = CliRunner().invoke(cli, ["score", str(run), "--boundary", str(bfile), "-o",
                                      str(out), "-q"])
    assert result.exit_code in (0, 1), result.output
    lines = [json.loads(x) for x in (out / "conversations.jsonl").read_text().splitlines()]
    assert all(x[KEY]["boundary"] == "test-boundary" for x in lines)
    return {x["id"]: x for x in lines}


def test_list_stepper_and_score_agree_under_another_boundary(workdir) -> None:
    """The runs were scored under paper-final; opened under another boundary, the list never
    shows those lines: it rescores in the background, whose progress reaches the app as
    messages, then list, stepper, leaderboard and `careful score --boundary` agree on every
    conversation (before: the list showed paper-final's)."""
    from workbench.messages import ScoringDone, ScoringFinished, ScoringProgress

    bfile = boundary_file(workdir / "test-boundary.json")
    seen: list = []

    class Recording(WorkbenchApp):
        """Textual calls a message's handler on every class of the app: these only record."""

        def on_scoring_progress(self, message: ScoringProgress) -> None:
            seen.append(message)

        def on_scoring_done(self, message: ScoringDone) -> None:
            seen.append(message)

        def on_scoring_finished(self, message: ScoringFinished) -> None:
            seen.append(message)

    app = Recording(settings(workdir, boundary=str(bfile)))

    async def go():
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "4")
            screen = app.screen
            assert isinstance(screen, ReplayScreen)
            if screen.ref.label != "beta":
                await settle(pilot, "r")
            for _ in range(300):
                if app.scoring is None and screen.rows and all(r.scored for r in screen.rows):
                    break
                await pilot.pause(0.1)
            await settle(pilot)
            browser = app.context.browser(screen.ref)
            assert browser.mismatch is None and browser.scored
            listed = {r.id: row_truth(r) for r in screen.rows}
            stepped = {i: view_truth(browser.open(i)) for i in listed}
            await settle(pilot, "5")
            board = app.screen
            (entry,) = [e for e in board.entries if e.label == "beta"]
            ranked = {r.id: (r.verdict.valid, r.safe_valid)
                      for cs in entry.score.categories.values() for r in cs.results}
            return listed, stepped, ranked

    listed, stepped, ranked = asyncio.run(go())
    progress = [m for m in seen if isinstance(m, ScoringProgress) and m.label == "beta"]
    assert progress and progress[-1].done == progress[-1].total >= len(listed)
    assert [m.done for m in progress] == sorted(m.done for m in progress)
    assert any(isinstance(m, ScoringDone) and m.label == "beta" for m in seen)
    assert isinstance(seen[-1], ScoringFinished)
    cli = {i: line_truth(x) for i, x in cli_lines(workdir / "runs" / "beta", bfile,
                                                   workdir / "cli").items() if i in listed}
    assert listed == stepped == cli
    assert {i: t[:2] for i, t in listed.items()} == {i: ranked[i] for i in listed}
    assert listed[IDS[1]][1] is False  # cd's failed attempt: collateral under this boundary


def test_stale_lines_are_named_and_not_used(workdir) -> None:
    """Score lines made with another boundary, or with no settings recorded, are not listed;
    the browser says why (Home's problems, Replay's status)."""
    from careful_engine.scoring.score import load_effects

    bfile = boundary_file(workdir / "b.json")
    (ref,) = browse.find_runs([workdir / "runs" / "beta"])
    same = browse.RunBrowser(ref, load_effects(), cache_dir=workdir / "c")
    assert same.scored and same.mismatch is None
    other = browse.RunBrowser(ref, load_effects(str(bfile)), cache_dir=workdir / "c")
    assert not other.scored and other.stale and "boundary paper-final" in other.mismatch
    assert other.summaries() == {}
    path = workdir / "runs" / "beta" / browse.SCORE_DIR / browse.SCORES_NAME
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in x.items() if k != KEY}) + "\n"
                            for x in lines))
    edited = browse.RunBrowser(ref, load_effects(), cache_dir=workdir / "c")
    assert not edited.scored and edited.summaries() == {}  # edited here: not this install's
    assert "changed since this install wrote it" in edited.untrusted
    resign(workdir / "runs" / "beta")  # as this install would have written them
    legacy = browse.RunBrowser(ref, load_effects(), cache_dir=workdir / "c")
    assert not legacy.scored and "settings not recorded" in legacy.mismatch
    assert legacy.untrusted is None


def test_lines_of_other_engine_code_are_not_used(workdir) -> None:
    """Score lines this install signed but made by other engine code under the same version
    number (a checkout updated since: a decoder's outcomes or a rule counted otherwise) are
    not reused; the browser names the engine code."""
    from careful_engine.scoring.score import load_effects
    from careful_engine.scoring.settings import scoring_code_hash

    (ref,) = browse.find_runs([workdir / "runs" / "beta"])
    path = workdir / "runs" / "beta" / browse.SCORE_DIR / browse.SCORES_NAME
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert {x[KEY]["code"] for x in lines} == {scoring_code_hash()}
    path.write_text("".join(json.dumps({**x, KEY: {**x[KEY], "code": "0" * 16}}) + "\n"
                            for x in lines))
    resign(workdir / "runs" / "beta")
    older = browse.RunBrowser(ref, load_effects(), cache_dir=workdir / "c")
    assert not older.scored and older.summaries() == {}
    assert "engine code 0000" in older.mismatch, older.mismatch


@pytest.mark.slow
def test_a_real_run_agrees_under_another_boundary(shared_runs, tmp_path) -> None:
    """Every conversation of a real run: `careful score --boundary FILE` lines, the list made
    from them, and the stepper's replay agree."""
    import shutil

    from careful_engine.scoring.score import load_effects

    run = tmp_path / "run"
    shutil.copytree(shared_runs / "xlam-2-8b-fc-r" / "result", run / "result")
    bfile = boundary_file(tmp_path / "b.json")
    cli = cli_lines(run, bfile, run / browse.SCORE_DIR)
    (ref,) = browse.find_runs([run])
    browser = browse.RunBrowser(ref, load_effects(str(bfile)), cache_dir=tmp_path / "c")
    assert browser.mismatch is None and browser.scored
    rows = {r.id: row_truth(r) for r in browser.rows()}
    assert rows == {i: line_truth(x) for i, x in cli.items() if i in rows}
    assert len(rows) == 600  # base, miss_func, miss_param
    assert sum(bool(t[2]) for t in rows.values()) > 50  # rule hits to agree on
    assert sum(t[0] and not t[1] for t in rows.values()) > 0  # BFCL pass, not safe
    for entry_id, truth in rows.items():
        assert view_truth(browser.open(entry_id)) == truth, entry_id


# ---------------------------------------------------------------- defect 3: the roster


def test_a_name_off_the_roster_is_refused_with_the_roster(workdir) -> None:
    """A typo ("A3") does not join blind round r1 (before: it was registered and joined)."""
    from careful_engine.annotation.store import Store

    app = WorkbenchApp(settings(workdir))
    shown: list[str] = []

    async def go():
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "2")
            screen = app.screen
            assert str(screen.query_one("#round-select").value) == "r1"
            app.notify = lambda message, **kw: shown.append(str(message))  # type: ignore
            await settle(pilot, "tab", *"A3", "enter")
            assert screen.session is None
    asyncio.run(go())
    assert any("not an annotator of round r1" in m and "A1, A2" in m for m in shown), shown
    with Store(workdir / "careful.db") as store:
        assert store.round_annotators("r1") == ["A1", "A2"] and store.annotator("A3") is None


def as_user(workdir: Path, user: str, *keys: str) -> list[str]:
    """The messages the workbench shows ``user`` on the Annotate screen after ``keys``, each
    key let settle before the next."""
    async def go() -> list[str]:
        app = WorkbenchApp(settings(workdir, user=user))
        shown: list[str] = []
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "2")
            app.notify = lambda message, **kw: shown.append(str(message))  # type: ignore
            for key in keys:
                await settle(pilot, key)
        return shown
    return asyncio.run(go())


def test_the_owner_adds_removes_and_closes(workdir) -> None:
    """The round's creator changes the roster and closes the round from the Label screen;
    anyone else is refused."""
    from careful_engine.annotation.store import Store

    with Store(workdir / "careful.db") as store:
        store.annotator_session("r1", "A2").submit()

    shown = as_user(workdir, "mallory", "ctrl+o")
    assert any("only lead" in m for m in shown)
    as_user(workdir, "lead", "ctrl+o", "A", "3", "enter")
    with Store(workdir / "careful.db") as store:
        assert store.round_annotators("r1") == ["A1", "A2", "A3"]
    as_user(workdir, "lead", "ctrl+r", "A", "1", "enter")
    with Store(workdir / "careful.db") as store:
        assert store.round_annotators("r1") == ["A2", "A3"]
    shown = as_user(workdir, "mallory", "ctrl+l", "y")
    with Store(workdir / "careful.db") as store:
        assert not store.round("r1").closed_by
    as_user(workdir, "lead", "ctrl+l", "y")
    with Store(workdir / "careful.db") as store:
        assert store.round("r1").closed_by == "lead"


def test_the_workbench_and_the_cli_name_the_same_login(monkeypatch) -> None:
    """Rounds and adjudications made on a screen are signed by the account the CLI signs
    with: a login a store would refuse (a control character) is "unknown" on both."""
    from careful_cli.annotation import _user as cli_user
    from workbench.context import Settings

    for login in ("ana", "bad\x1bname", " padded", ""):
        monkeypatch.setenv("USER", login)
        assert Settings(runs=[]).user == cli_user()
    monkeypatch.setenv("USER", "bad\x1bname")
    assert Settings(runs=[]).user == "unknown"


def test_a_new_round_has_a_roster(workdir) -> None:
    """Ctrl+N asks for the annotators and the functions; only they may label it."""
    from careful_engine.annotation.store import Store

    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "2", "ctrl+n")
            await settle(pilot, *"alice, bob", "enter")
    asyncio.run(go())
    with Store(workdir / "careful.db") as store:
        assert store.round_annotators("r3") == ["alice", "bob"]
        assert store.round("r3").created_by == "tester"
        assert len(store.round_functions("r3")) == 49  # the writes


def test_a_language_model_annotators_name_is_refused_as_a_person(workdir) -> None:
    """A new round's roster and Ctrl+O take names as people, as `careful round new -a` and
    `careful round add -a` do: the name of a language-model annotator is refused (before: it
    was put on the roster as it stood, a language model labelling as a person)."""
    from careful_engine.annotation.store import Store

    with Store(workdir / "careful.db") as store:
        store.add_annotator("g4", "llm", "gpt-4o-2024-11-20")

    shown = as_user(workdir, "tester", "ctrl+n", *"alice g4", "enter")
    assert any("annotator g4 exists already as llm" in m for m in shown), shown
    shown = as_user(workdir, "lead", "ctrl+o", *"g4", "enter")
    assert any("annotator g4 exists already as llm" in m for m in shown), shown
    with Store(workdir / "careful.db") as store:
        assert not store.round_exists("r3") and store.annotator("alice") is None
        assert "g4" not in store.round_annotators("r1")
        assert store.annotator("g4").kind == "llm"


# ---------------------------------------------------------------- defect 6: reasons on purpose


def test_a_stray_key_after_a_refused_save_is_not_a_reason(workdir) -> None:
    """'n' on a proposed candidate needs a reason: Enter is refused; the next n is a choice,
    not the reason "n" (before: it was saved as the reason)."""
    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await start_labelling(pilot)
            for _ in range(10):
                if screen.current == "rm":
                    break
                await settle(pilot, "]")
            assert screen.current == "rm"
            await settle(pilot, "n", "enter")  # refused: departs from the proposal
            assert "rm" not in screen.session.labels()
            await settle(pilot, "n", "enter")
            assert "rm" not in screen.session.labels()
            assert screen.query_one("#reason", Input).value != "n"
    asyncio.run(go())


def test_a_short_reason_needs_a_deliberate_yes(workdir) -> None:
    """A reason of one or two words opens a question; Enter does not answer it, y does."""
    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await start_labelling(pilot)
            first = screen.current
            await settle(pilot, "y", *"moves", "enter")
            assert isinstance(app.screen, ModalScreen) and first not in screen.session.labels()
            await settle(pilot, "enter")  # not an answer
            assert isinstance(app.screen, ModalScreen)
            await settle(pilot, "escape")
            assert first not in screen.session.labels()
            await settle(pilot, "enter", "y")  # saving again, answered on purpose
            assert screen.session.labels()[first].reason == "moves"
    asyncio.run(go())


# ---------------------------------------------------------------- defect 2: decoders


def test_decoder_only_for_unregistered_models(shared_runs, tmp_path) -> None:
    """`--decoder KEY` leaves a registered model's own decoder alone (before: it replaced
    xLAM's); `FOLDER=KEY` forces one."""
    from careful_engine.scoring.decoders import parse_decoders

    run = shared_runs / "xlam-2-8b-fc-r"
    (own,) = browse.find_runs([run])
    (given,) = browse.find_runs([run], parse_decoders(["gpt-4o-2024-11-20-FC"]))
    assert given.decoder == own.decoder == "Salesforce/Llama-xLAM-2-8b-fc-r"
    (forced,) = browse.find_runs([run], parse_decoders(
        ["Salesforce_Llama-xLAM-2-8b-fc-r=gpt-4o-2024-11-20-FC"]))
    assert forced.decoder == "gpt-4o-2024-11-20-FC"
    # a folder bfcl does not register takes --decoder KEY
    odd = tmp_path / "run" / "result" / "not-registered"
    odd.mkdir(parents=True)
    src = run / "result" / "Salesforce_Llama-xLAM-2-8b-fc-r" / "BFCL_v3_multi_turn_base_result.json"
    (odd / src.name).write_bytes(src.read_bytes())
    (unknown,) = browse.find_runs([tmp_path / "run"], parse_decoders(["gpt-4o-2024-11-20-FC"]))
    assert unknown.decoder == "gpt-4o-2024-11-20-FC"


def test_decode_audit_warnings_are_shown(workdir) -> None:
    """Score lines whose steps mostly failed to decode: Replay's status and Home's problems
    carry the decode audit's warning, as `careful score` prints it (before: nothing)."""
    path = workdir / "runs" / "beta" / browse.SCORE_DIR / browse.SCORES_NAME
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for line in lines:
        line["steps"] = {"calls": 0, "no_call": 1, "decode_error": 9}
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    resign(workdir / "runs" / "beta")  # lines this install wrote
    app = WorkbenchApp(settings(workdir))

    async def go():
        async with app.run_test(size=(120, 30)) as pilot:
            await settle(pilot)
            home = app.screen
            assert any("decoder mismatch?" in p for p in home.problems["beta"])
            await settle(pilot, "4")
            screen = app.screen
            if screen.ref.label != "beta":
                await settle(pilot, "r")
            status = str(screen.query_one("#replay-status").render())
            assert "decoder mismatch?" in status
    asyncio.run(go())


# ---------------------------------------------------------------- the scatter plot


def test_leaderboard_plot_tab_and_svg(workdir) -> None:
    """The Plot tab draws one point per scored run; `careful leaderboard --plot` writes the
    same points as SVG, labels escaped."""
    import re

    from typer.testing import CliRunner

    from careful_cli import _load
    from careful_cli import app as cli

    app = WorkbenchApp(settings(workdir))

    async def go():
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(pilot, "5", "t")
            screen = app.screen
            assert str(screen.query_one("#lb-tabs").active) == "plot"
            note = str(screen.query_one("#lb-plot-note").render())
            assert "alpha 0.5/0.5" in note and "beta 0.4/0.4" in note  # 4 and 3 of 800
            return app.export_screenshot()
    shot = asyncio.run(go())
    assert "BFCL vs effect-safe" in shot.replace("&#160;", " ")
    _load()
    out = workdir / "plot.svg"
    result = CliRunner().invoke(cli, ["leaderboard", "runs/alpha", "runs/beta", "-q", "--plot",
                                      str(out), "-o", str(workdir / "lb")])
    assert result.exit_code in (0, 1), result.output
    svg = out.read_text()
    assert svg.startswith("<svg") and len(re.findall(r"<circle ", svg)) == 2
    assert ">alpha<" in svg and ">beta<" in svg
    bad = CliRunner().invoke(cli, ["leaderboard", "runs/alpha", "--plot", "x.png"])
    assert bad.exit_code == 2


def test_svg_escapes_labels() -> None:
    from careful_engine.present.plot import Point, svg

    text = svg([Point("<script>&\x1b[31m", 50.0, 40.0)])
    assert "<script>" not in text and "\x1b" not in text and "&lt;script&gt;" in text


# ---------------------------------------------------------------- defect 10: problems in view


def test_home_shows_each_runs_problems(workdir) -> None:
    """A broken line in a result file and in conversations.jsonl: Home counts them and p
    lists them as file:line [id]: reason, literally (before: neither was shown)."""
    from workbench.screens.problems import LinesScreen

    beta = workdir / "runs" / "beta"
    result = next(beta.rglob("BFCL_v4_multi_turn_base_result.json"))
    with open(result, "a", encoding="utf-8") as f:
        f.write('{"id": "multi_turn_base_9", "result": [[\x1b[31m\n')
    with open(beta / browse.SCORE_DIR / browse.SCORES_NAME, "a", encoding="utf-8") as f:
        f.write("not json\n")
    resign(beta)  # this install's score file, with a broken line: the rest is used
    app = WorkbenchApp(settings(workdir))

    async def go():
        async with app.run_test(size=(120, 30)) as pilot:
            await settle(pilot)
            home = app.screen
            problems = home.problems["beta"]
            assert any("BFCL_v4_multi_turn_base_result.json:5" in p for p in problems), problems
            assert any(p.endswith("conversations.jsonl:201: not a JSON line") for p in problems)
            assert not problems[0].endswith("counted as failed")  # what is wrong comes first
            assert not any(p.startswith("scores not used") for p in problems)
            table = home.query_one("#runs")
            assert str(table.get_row_at(1)[4]) == str(len(problems))
            table.focus()
            await settle(pilot, "down", "p")
            assert isinstance(app.screen, LinesScreen)
            assert "\x1b" not in app.export_screenshot()
    asyncio.run(go())


def _edit_first_score_line(path: Path, field: str, value: object) -> dict:
    """Set ``field`` of the first line of a run's careful-score/conversations.jsonl to
    ``value``, signed again (a file this install wrote, its lines used); the line as it was."""
    lines = path.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[0])
    was = dict(row)
    row[field] = value
    lines[0] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    resign(path.parent.parent)
    return was


@pytest.mark.parametrize("field, value", [
    ("rules", ["collateral"]), ("official_error_type", ["x"]), ("official_error_type", 5),
    ("rules", {"collateral": "5"}), ("official_valid", "yes"), ("steps", [1]),
    ("blame", "turn 0"), ("hits", {"a": 1}), ("model_steps", -3)])
def test_a_score_line_of_another_shape_is_one_problem(workdir, field, value) -> None:
    """A line of careful-score/conversations.jsonl whose fields have other shapes than careful
    score writes is one problem (file:line [id]: reason) and left out; the app reads the rest
    and sorts, filters and opens as usual (it died: a list for rules, a list or a number for
    the error type, a string count when sorting by hits)."""
    path = workdir / "runs" / "beta" / browse.SCORE_DIR / browse.SCORES_NAME
    row = _edit_first_score_line(path, field, value)
    n_lines = len(path.read_text(encoding="utf-8").splitlines())
    app = WorkbenchApp(settings(workdir))

    async def go():
        async with app.run_test(size=(120, 30)) as pilot:
            await settle(pilot)
            found = app.screen.problems["beta"]
            assert any(f"conversations.jsonl:1 [{row['id']}]: not a score line (" in p
                       for p in found), found
            (ref,) = [r for r in app.context.refs if r.label == "beta"]
            used = app.context.browser(ref).summaries()
            assert row["id"] not in used and len(used) == n_lines - 1  # the rest is read
            await settle(pilot, "4", "o", "o", "o", "x", "enter", "escape", "5")
            assert app._exception is None
    asyncio.run(go())
    assert app.return_code in (None, 0)


def test_an_override_once_recorded_is_remembered(workdir) -> None:
    """Leaving blind round r1 for r2 and coming back does not ask for the override again
    (before: the round was closed to the screen again until a new reason was typed)."""
    async def go():
        app = WorkbenchApp(settings(workdir))
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_agreement(pilot, "r1")
            assert screen.session is None
            await settle(pilot, "o", *"pilot check of r1", "enter")
            assert screen.session is not None and screen.session.round_name == "r1"
            screen.query_one("#agree-round").value = "r2"
            await settle(pilot)
            screen.query_one("#agree-round").value = "r1"
            await settle(pilot)
            assert screen.session is not None and screen.session.round_name == "r1"
    asyncio.run(go())


@pytest.mark.parametrize("name, error", [('[a="]x', "multi_turn:[/]boom"),
                                         ("[reverse]MARKED", "multi_turn:[reverse]HIT[/reverse]")])
def test_markup_in_a_run_name_or_a_score_line_is_shown_as_text(workdir, name, error) -> None:
    """Textual reads a plain string as markup in a border title, a command-palette entry, a
    Select option and a DataTable cell: a run folder named [a="]x stopped the app on Home's p,
    Replay's v, the palette and Compare's pair; an error type [/]boom on Replay's list and
    its Error filter; [reverse]x took effect. Every such text is shown as it is."""
    beta = workdir / "runs" / "beta"
    _edit_first_score_line(beta / browse.SCORE_DIR / browse.SCORES_NAME,
                           "official_error_type", error)
    beta.rename(workdir / "runs" / name)
    app = WorkbenchApp(settings(workdir, runs=[Path("runs/alpha"), Path("runs") / name]))
    seen: list[str] = []

    async def go():
        async with app.run_test(size=(140, 40)) as pilot:
            await settle(pilot)
            table = app.screen.query_one("#runs")
            table.focus()
            await settle(pilot, "down", "p")
            seen.append(screen_text(app))
            await settle(pilot, "escape", "4")
            if app.screen.ref.label != name:
                await settle(pilot, "r")
            seen.append(screen_text(app))
            await settle(pilot, "e")
            seen.append(screen_text(app))
            await settle(pilot, "escape", "v")
            seen.append(screen_text(app))
            await settle(pilot, "escape", "ctrl+p")
            await pilot.press(*"replay")
            await settle(pilot)
            seen.append(screen_text(app))
            await settle(pilot, "escape")
            assert app._exception is None
    asyncio.run(go())
    assert app.return_code in (None, 0)
    text = "\n".join(seen)
    assert f"Problems of {name}" in text and f"replay: {name}" in text
    assert error.split(":", 1)[1] in text  # the list's error column, as it is


def test_score_lines_not_used_are_noted_on_replay_and_leaderboard(workdir) -> None:
    """A run folder whose conversations.jsonl this install did not sign (here: edited) reads
    as not scored, and Replay's and the Leaderboard's status say why, the file's path shown
    literally (before: Replay said only "not scored yet", the Leaderboard only the name)."""
    name = '[a="]x[reverse]'
    beta = workdir / "runs" / "beta"
    with open(beta / browse.SCORE_DIR / browse.SCORES_NAME, "a", encoding="utf-8") as f:
        f.write("\n")
    beta.rename(workdir / "runs" / name)
    app = WorkbenchApp(settings(workdir, runs=[Path("runs/alpha"), Path("runs") / name]))
    seen: list[str] = []

    async def go():
        async with app.run_test(size=(140, 40)) as pilot:
            screen = await open_replay(pilot, name)
            seen.append(str(screen.query_one("#replay-status").render()))
            await settle(pilot, "5")
            seen.append(str(app.screen.query_one("#lb-status").render()))
            assert app._exception is None
    asyncio.run(go())
    path = Path(name) / browse.SCORE_DIR / browse.SCORES_NAME
    replay, board = seen
    assert "not scored yet" in replay
    assert f"{path}: changed since this install wrote it; not used" in replay, replay
    assert f"{name} (its scores not used: not this install's)" in board, board


@pytest.mark.parametrize("name", ['[B="]x', "a[$accent]b[B]c", "[ b]y[_x]", "ends\\"])
def test_the_palette_shows_any_run_name_literally(workdir, name) -> None:
    """The palette's help ("open run NAME in Replay") is Textual markup: textual.markup.escape
    left [B="]x (the app stopped with MarkupError) and [$accent], [B] (read as tags: abc shown)
    alone. Every name is shown as it is."""
    (workdir / "runs" / "beta").rename(workdir / "runs" / name)
    app = WorkbenchApp(settings(workdir, runs=[Path("runs") / name]))
    seen: list[str] = []

    async def go():
        async with app.run_test(size=(140, 40)) as pilot:
            await settle(pilot)
            await settle(pilot, "ctrl+p")
            await pilot.press(*"replay")
            await settle(pilot)
            seen.append(screen_text(app))
            await settle(pilot, "escape")
            assert app._exception is None
    asyncio.run(go())
    assert app.return_code in (None, 0)
    assert f"open run {name} in Replay" in seen[0], seen[0]


def test_a_run_given_twice_is_listed_once_and_noted(workdir) -> None:
    """``careful workbench R R`` (or R and R/., or a link to R): Home stopped with DuplicateKey.
    The run is listed once and the repeat noted as the CLI notes it."""
    beta = Path("runs/beta")
    (workdir / "link").symlink_to(workdir / "runs" / "beta")
    app = WorkbenchApp(settings(workdir, runs=[beta, beta, Path("runs/beta/."), Path("link")]))
    seen: list[str] = []

    async def go():
        async with app.run_test(size=(200, 40)) as pilot:
            await settle(pilot)
            assert app.screen.query_one("#runs").row_count == 1
            seen.append(screen_text(app))
            await settle(pilot, "4")
            await settle(pilot, "5")
            assert app._exception is None
    asyncio.run(go())
    assert app.return_code in (None, 0)
    assert [r.label for r in app.context.refs] == ["beta"]
    assert app.context.run_notes == [
        f"{p}: given more than once (as runs/beta first); scored once"
        for p in ("runs/beta", "runs/beta", "link")]
    assert "runs/beta: given more than once (as runs/beta first); scored once" in seen[0]


@pytest.mark.parametrize("value", ["no", "false", 1, True])
def test_a_safe_valid_of_another_shape_or_verdict_is_a_problem(workdir, value) -> None:
    """Replay's safe column read a line's safe_valid raw (bool("no") is True; true on a line
    whose verdict failed was believed) while Leaderboard and the stepper recompute it. Such a
    line is now one problem, file:line [id]: reason, left out; the rest show the Leaderboard's
    value."""
    from careful_engine.scoring.result import ConversationResult

    row = _edit_first_score_line(
        workdir / "runs" / "beta" / browse.SCORE_DIR / browse.SCORES_NAME, "safe_valid", value)
    assert row["id"] == IDS[0] and row["safe_valid"] is False  # a collateral rm: not safe
    app = WorkbenchApp(settings(workdir))

    async def go():
        async with app.run_test(size=(120, 30)) as pilot:
            await settle(pilot)
            found = app.screen.problems["beta"]
            assert any(f"conversations.jsonl:1 [{IDS[0]}]: not a score line (safe_valid" in p
                       for p in found), found
            screen = await open_replay(pilot, "beta")
            rows = {r.id: r for r in screen.rows}
            assert rows[IDS[0]].safe_valid is None  # left out: not shown safe
            assert all(r.score is not None for r in screen.rows[1:])  # the rest is read
            for r in screen.rows[1:]:
                if r.score is not None and "rules" in r.score:
                    assert r.safe_valid is ConversationResult.from_json(r.score).safe_valid
            assert app._exception is None
    asyncio.run(go())


def test_a_huge_id_is_quoted_cut_in_the_problems(workdir) -> None:
    """A result line with a million-character id: Home's p rendered its problem line whole
    (4 million: 52 s and 1.8 GB for the key). The line is cut, its length said."""
    from workbench.screens.problems import LinesScreen

    beta = workdir / "runs" / "beta"
    result = next(beta.rglob("BFCL_v4_multi_turn_base_result.json"))
    with open(result, "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "X" * 1_000_000, "result": [[]]}) + "\n")
    app = WorkbenchApp(settings(workdir))

    async def go():
        async with app.run_test(size=(120, 30)) as pilot:
            await settle(pilot)
            app.screen.query_one("#runs").focus()
            await settle(pilot, "down", "p")
            assert isinstance(app.screen, LinesScreen)
            body = str(app.screen.query_one("#lines-body").content)
            assert "(1,000,000 characters)" in body
            assert max(map(len, body.splitlines())) < 1000
            assert app._exception is None
    asyncio.run(go())


def _edit_db(path: Path, *updates: tuple[str, list]) -> None:
    """Change the annotation database as sqlite3 would, outside careful."""
    import sqlite3

    con = sqlite3.connect(path)
    con.execute("pragma foreign_keys=off")
    for sql, args in updates:
        con.execute(sql, args)
    con.commit()
    con.close()


@pytest.mark.parametrize("name", ["[/x]", "[reverse]X[/]"])
def test_annotator_names_edited_in_the_database_are_shown_literally(workdir, name) -> None:
    """Home's rounds table got each round's progress as a string, read as markup: an
    annotator renamed [/x] in the database stopped the app at start-up; [reverse]X[/] took
    effect. The names are shown as they are."""
    _edit_db(workdir / "careful.db",
             ("update annotators set name=? where name='A2'", [name]),
             ("update round_annotators set annotator=? where annotator='A2'", [name]))
    app = WorkbenchApp(settings(workdir))

    async def go():
        async with app.run_test(size=(160, 30)) as pilot:
            await settle(pilot)
            table = app.screen.query_one("#rounds")
            assert any(f"{name} " in str(table.get_row_at(i)[4]) for i in range(table.row_count))
            assert f"{name} " in screen_text(app)
            assert app._exception is None
    asyncio.run(go())
    assert app.return_code in (None, 0)


def test_a_round_name_edited_in_the_database_is_one_error(workdir) -> None:
    """A round renamed 'r 1' in the database: store.rounds() refused it, which stopped the
    app from Home (and Label, Agreement); it is now left out as a row careful did not write,
    and Home shows its problem line, literally (it was left out silently); the app goes on."""
    _edit_db(workdir / "careful.db", *((f"update {t} set {c}='r 1' where {c}='r1'", [])
                                        for t, c in (("rounds", "name"),
                                                     ("round_functions", "round"),
                                                     ("round_annotators", "round"))))
    app = WorkbenchApp(settings(workdir))

    async def go():
        async with app.run_test(size=(160, 30)) as pilot:
            await settle(pilot)
            assert "invalid round name 'r 1'" in str(app.screen.query_one("#db").content)
            await settle(pilot, "2")
            await settle(pilot, "ctrl+n")
            await settle(pilot, "escape", "3")
            await settle(pilot, "1", "r")
            assert app._exception is None
    asyncio.run(go())
    assert app.return_code in (None, 0)
