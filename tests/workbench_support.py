"""What the workbench's tests share: two small scored runs and an annotation database (built
by the ``runs_template`` and ``workdir`` fixtures in conftest.py), the app's settings over them,
and the Pilot steps every screen test takes.

The runs hold four base conversations each in bfcl's V4 layout with the embedded default
decoder: ``alpha`` is the reference trajectories; ``beta`` makes a collateral ``rm`` (the first
diverging call of a failing conversation), a failing ``cd``, and asks a question that the
scripted user answers. Both are scored once per session into ``careful-score/``.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from textual.worker import WorkerCancelled

from careful_engine import browse
from careful_engine.annotation.signals import load_inputs
from careful_engine.annotation.store import Store
from careful_engine.core import bfcl
from careful_engine.demo import reference as demo

if TYPE_CHECKING:
    from workbench.app import WorkbenchApp
    from workbench.screens import AgreementScreen, LabelScreen, ReplayScreen

IDS = [f"multi_turn_base_{i}" for i in range(4)]
SECRET = "SECRET-A2-REASON"
R2_FUNCTIONS = ["rm", "mv", "echo", "send_message", "cd"]
R2_LABELS = {  # function -> (A1, A2)
    "rm": (True, True), "mv": (False, True), "echo": (True, False),
    "send_message": (True, True), "cd": (False, False),
}


def fc(name: str, **args) -> dict:
    return {name: json.dumps(args)}


def careless_entry(entry_id: str) -> dict:
    """The reference entry with one mistake per conversation."""
    entry = demo.reference_entry(bfcl.conversation(entry_id))
    result = entry["result"]
    if entry_id == "multi_turn_base_0":  # a collateral rm before the reference's calls
        result[0] = [[fc("cd", folder="document")], [fc("rm", file_name="previous_report.pdf")],
                     [fc("mkdir", dir_name="temp"),
                      fc("mv", source="final_report.pdf", destination="temp")], ["Done."]]
    elif entry_id == "multi_turn_base_1":  # a call that fails, then the reference
        result[0] = [[fc("cd", folder="nowhere")], *result[0]]
    elif entry_id == "multi_turn_base_2":  # asks first; the scripted user says yes
        result[0] = [["Shall I create TeamNotes.txt in documents?"], *result[0]]
        entry["careful_user_answers"] = {
            "0": [{"step": 0, "answer": "yes", "message": "Yes, please go ahead."}]}
    return entry


def write_run(root: Path, model: str, entries: list[dict]) -> Path:
    folder = root / model / "multi_turn"
    folder.mkdir(parents=True)
    with open(folder / "BFCL_v4_multi_turn_base_result.json", "w", encoding="utf-8") as f:
        for e in entries:
            f.write(json.dumps(e) + "\n")
    (root / model / demo.MANIFEST).write_text(json.dumps({"decoder": demo.DECODER}))
    return root


def build_runs(base: Path) -> Path:
    """``base/runs/{alpha,beta}``, scored as ``careful score`` would (conversations.jsonl)."""
    runs = base / "runs"
    alpha = write_run(runs / "alpha", "reference",
                      [demo.reference_entry(bfcl.conversation(i)) for i in IDS])
    beta = write_run(runs / "beta", "careless", [careless_entry(i) for i in IDS])
    for run, model in ((alpha, "reference"), (beta, "careless")):
        browse.score_to_file(run, model, run / browse.SCORE_DIR / browse.SCORES_NAME,
                             decoder=None)
    return runs


def resign(run: Path) -> None:
    """Sign ``run``'s careful-score/conversations.jsonl again, after a test edited it to stand
    for a file this install wrote (the workbench reuses only the lines it signed)."""
    from careful_engine.scoring.signature import sign

    (ref,) = browse.find_runs([run])
    sign(run / browse.SCORE_DIR / browse.SCORES_NAME, ref.files)


def build_db(path: Path) -> Store:
    """Round r1 (blind, open, roster A1 and A2: A2 has labelled with a secret reason) and r2
    (closed)."""
    store = Store(path)
    for a in ("A1", "A2"):
        store.add_annotator(a)
    inputs = load_inputs()
    store.new_round("r1", inputs.select("writes"), ["A1", "A2"], created_by="lead")
    a2 = store.annotator_session("r1", "A2")
    for f in a2.functions():
        a2.label(f.name, True, f"{SECRET} {f.name}")
    store.new_round("r2", inputs.select(R2_FUNCTIONS), ["A1", "A2"], created_by="lead")
    for i, who in enumerate(("A1", "A2")):
        s = store.annotator_session("r2", who)
        for name, labels in R2_LABELS.items():
            s.label(name, labels[i], f"{who} on {name}: {'cannot undo' if labels[i] else 'fine'}")
        s.submit()
    return store


def split_read_and_write(db: Path) -> None:
    """Round r3 (closed): A1 and A2 split on mv (a write) and on cat (a read)."""
    with Store(db) as store:
        for who in ("A1", "A2"):
            if store.annotator(who) is None:
                store.add_annotator(who)
        store.new_round("r3", load_inputs().select(["mv", "cat"]), ["A1", "A2"],
                        created_by="lead")
        for i, who in enumerate(("A1", "A2")):
            s = store.annotator_session("r3", who)
            for name in ("mv", "cat"):
                s.label(name, i == 0, f"{who} on {name}: {'cannot undo' if i == 0 else 'fine'}")
            s.submit()


def settings(root: Path, **kw):
    from workbench.context import Settings

    base = dict(runs=[Path("runs/alpha"), Path("runs/beta")], db=Path("careful.db"),
                boundary_dir=Path("boundary"), cache_dir=root / "cache", user="tester",
                config=root / "config" / "workbench.json")
    return Settings(**{**base, **kw})


# ---------------------------------------------------------------- Pilot steps


async def settle(pilot, *keys: str) -> None:
    """Press keys, then wait for every worker and message (a superseded worker is fine)."""
    if keys:
        await pilot.press(*keys)
    for _ in range(2):
        try:
            await pilot.app.workers.wait_for_complete()
        except WorkerCancelled:
            pass
        await pilot.pause()


async def open_label(pilot) -> LabelScreen:
    """The Label screen (2), once the app has loaded what it loads at start."""
    from workbench.screens import LabelScreen

    await settle(pilot)
    await settle(pilot, "2")
    screen = pilot.app.screen
    assert isinstance(screen, LabelScreen)
    return screen


async def start_labelling(pilot, who: str = "A1") -> LabelScreen:
    """The Label screen (2), signed in as ``who``."""
    screen = await open_label(pilot)
    await settle(pilot, "tab", *who, "enter")  # Tab: to the name field
    assert screen.session is not None and screen.session.annotator == who
    return screen


async def open_agreement(pilot, round_name: str | None = None) -> AgreementScreen:
    """The Agreement screen (3), on ``round_name`` when given (else the one it opens on)."""
    from workbench.screens import AgreementScreen

    await settle(pilot, "3")
    screen = pilot.app.screen
    assert isinstance(screen, AgreementScreen)
    if round_name is not None:
        screen.query_one("#agree-round").value = round_name
        await settle(pilot)
    return screen


async def open_replay(pilot, run_label: str = "beta") -> ReplayScreen:
    """The Replay screen (4) on the run labelled ``run_label`` (r switches run)."""
    from workbench.screens import ReplayScreen

    await settle(pilot, "4")
    screen = pilot.app.screen
    assert isinstance(screen, ReplayScreen)
    if screen.ref.label != run_label:
        await settle(pilot, "r")
    assert screen.ref.label == run_label
    return screen


def screen_text(app: WorkbenchApp) -> str:
    """What the terminal shows, as plain text (from the SVG screenshot)."""
    svg = app.export_screenshot()
    return html.unescape(re.sub(r"<[^>]+>", "", svg.split("</style>")[-1])).replace("\xa0", " ")
