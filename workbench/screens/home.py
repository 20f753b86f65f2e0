"""Home: the runs found, the declarations and the boundary, the labelling rounds."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from careful_engine.annotation.errors import AnnotationError
from careful_engine.core.safe_text import visible
from careful_engine.effects.declarations import summary_text

from ..widgets import KeyFooter, NavBar
from ..widgets.shared import NAME_CHARS, middle, plain, round_progress, shown_path
from .base import WorkbenchScreen


def declarations_text(wb) -> Text:
    """The declarations' version and counts, and the scoring boundary."""
    decl = wb.declarations
    source = shown_path(wb.settings.declarations or "declarations/effects.json")
    if decl is None:
        return plain(f"{source}: not found or unreadable (run `careful declare`)", style="red")
    doc = decl.document
    out = plain(shown_path(decl.source), style="bold")
    out.append(visible(f" · {doc['schema']} · bfcl-eval {doc['bfcl_eval']} · sha256 "
                       f"{decl.sha256[:12]}") + "\n")
    out.append(summary_text(doc) + "\n")
    effects = wb.effects
    if effects is None:
        out.append(visible(f"boundary {wb.settings.boundary}: {wb.effects_problem}"),
                   style="red")
    else:
        b = effects.boundary
        out.append(visible(f"scoring boundary {b.name} v{b.version}: {len(b.destructive)} "
                           "destructive"
                           + (f", decided by {', '.join(b.decided_by)}" if b.decided_by else "")))
    return out


# the conversations a run's files hold; Leaderboard's "conversations" (careful score's count)
# also counts the ids missing from them, scored as failed
IN_FILES = "in files"
IN_FILES_NOTE = ("in files: the conversations present in the run's files (Leaderboard's "
                 "conversations count every conversation of the run's categories, an id "
                 "missing from a file as failed)")


class HomeScreen(WorkbenchScreen):
    """The runs, the declarations and the labelling rounds."""

    MAIN = ("#runs",)

    HELP = ("Home lists the runs the workbench found (one row per model folder), whether "
            "`careful score` lines exist for them, the effect declarations and the scoring "
            "boundary, and the labelling rounds in the annotation database with each "
            "annotator's progress (counts only: labels stay blind). Enter on a run opens it "
            f"in Replay. {IN_FILES_NOTE[0].upper()}{IN_FILES_NOTE[1:]}.")
    BINDINGS = [
        Binding("enter", "open_run", "Replay run"),
        Binding("p", "problems", "Problems"),
        Binding("r", "refresh", "Refresh"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.problems: dict[str, list[str]] = {}  # run label -> its files' problems
        self.db_notified: set[str] = set()  # the database problems notified already

    def compose(self) -> ComposeResult:
        yield NavBar("home")
        with VerticalScroll(id="home"):
            yield Static("Runs", classes="section")
            yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
            yield Static(id="runs-note", classes="note")
            yield Static("Declarations", classes="section")
            yield Static(id="declarations")
            yield Static("Labelling rounds", classes="section")
            yield DataTable(id="rounds", cursor_type="row")
            yield Static(id="db", classes="note")
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        self.sub_title = "Home"
        runs = self.query_one("#runs", DataTable)
        runs.add_columns("run", "cats", IN_FILES, "scores", "problems", "decoder")
        runs.loading = True
        rounds = self.query_one("#rounds", DataTable)
        rounds.add_columns("round", "fns", "blind", "state", "progress")
        self.query_one("#declarations", Static).update(declarations_text(self.app.context))
        self.run_worker(self._load, thread=True, group="home")

    def on_screen_resume(self) -> None:
        if "store" in self.app.context.__dict__:
            self.refresh_rounds()

    def _load(self) -> None:
        """Read the store and list the runs off the main thread (imports, files)."""
        from careful_engine.analysis.leaderboard import synthetic_label  # (find_runs loaded it)

        wb = self.app.context
        # what the app holds by now (Textual, the engine's modules, the declarations) out of
        # the collector's way first: the objects of a run's score lines, read below, set off
        # a full collection, which walked all of it (0.1-0.2 s of Home's start); the files
        # read are frozen in turn once listed
        self.app.settle_memory(collect=False)
        try:
            wb.store  # noqa: B018  (opens the database: sqlite-utils takes a moment to import)
        except AnnotationError as e:  # a damaged or foreign database: say so, go on
            self.app.call_from_thread(self.notify, str(e), severity="error", timeout=10)
        else:
            self.app.call_from_thread(self.refresh_rounds)
        rows, problems = [], {}
        for ref in wb.refs:
            browser = wb.browser(ref)
            convs = len(browser.rows())
            state = ("stale" if browser.stale else "✓" if browser.scored else
                     "unreadable" if any(p.message.startswith("cannot read")
                                         for p in browser.score_problems) else "–")
            name = synthetic_label(ref.label, wb.synthetic(ref))
            # what is wrong first; then the ids absent from the files (scored as failed)
            found = [str(p) for p in sorted(browser.problems(),
                                            key=lambda p: p.message.startswith("id missing"))]
            found += map(str, browser.budget_stopped())  # as careful score lists them
            if browser.mismatch is not None:
                found.append(f"scores not used: {browser.mismatch}")
            if browser.untrusted is not None:  # a run folder's own scores: not this install's
                found.append(f"scores not used: {browser.untrusted}")
            n_input = len(found)  # the input problems, as careful score counts them
            found += [f"decode audit ({ref.decoder}): {m}" for m in browser.decode_flags()]
            problems[ref.label] = found
            rows.append((ref.label, name, len(ref.categories), convs, state,
                         (n_input, len(found) - n_input), ref.decoder))
        self.problems = problems
        self.app.settle_memory(collect=False)  # the runs' files, read: kept while the app runs
        self.app.call_from_thread(self._fill_runs, rows)

    def _fill_runs(self, rows: list[tuple]) -> None:
        table = self.query_one("#runs", DataTable)
        table.loading = False
        if self.is_current and (self.focused is None or self.focused.id == "home"):
            self.set_focus(table)  # it could not while loading; on view again: focus_main
        table.clear()
        for label, name, cats, convs, state, (n_input, n_flags), decoder in rows:
            # input problems (careful score's count), then decode-audit flags apart
            cell = Text(str(n_input), style="bold yellow" if n_input else "")
            if n_flags:
                cell.append(f" ⚑{n_flags}", style="bold yellow")
            table.add_row(plain(middle(name, NAME_CHARS)), str(cats), str(convs), state, cell,
                          plain(decoder or ""), key=label)
        wb = self.app.context
        where = ", ".join(shown_path(p) for p in wb.settings.runs) or "nothing"
        note = f"{len(rows)} run(s) from {where}"
        if not rows:
            note += ": no multi-turn result files (try `careful demo`)"
        else:
            note += (f"; {IN_FILES_NOTE}; scores: ✓ from `careful score` or the workbench, "
                     "stale: made with other settings or older than the results, unreadable: see p, – none yet (s in "
                     "Replay); problems: the input problems careful score reports (replays the budget "
                     "stopped among them), ⚑ decode-audit flags; "
                     "p lists the selected run's problems")
        if any(ref.run.name == "reference" and ref.model == "reference" for ref in wb.refs):
            note += ("; reference is the embedded default: the reference trajectories as a "
                     "model's output (`careful demo`)")
        # a folder given twice, as the CLI says it (listed once)
        self.query_one("#runs-note", Static).update(plain("; ".join([*wb.run_notes, note])))
        if wb.run_notes:
            self.notify("; ".join(wb.run_notes), severity="warning", timeout=8)

    def refresh_rounds(self) -> None:
        store = self.app.context.store
        table = self.query_one("#rounds", DataTable)
        table.clear()
        note = f"annotation database: {shown_path(store.path)} · you are {self.app.context.settings.user}"
        # the problems of this read only (the store is the workbench's, kept open: what it
        # noted before, and a database repaired since, would be shown again)
        store.problems.clear()
        try:
            rows = [(rnd, store.status(rnd.name)) for rnd in store.rounds()]
        except AnnotationError as e:  # a database edited outside careful: say so, go on
            text = plain(note)
            text.append("\n")
            text.append_text(plain(e, style="red"))
            self.query_one("#db", Static).update(text)
            self.notify(str(e), severity="error", timeout=10)
            table.add_row("–", "", "", "", "the rounds cannot be read (below)")
            return
        text = plain(note)
        problems = list(store.problems)
        if problems:  # rows left out as not careful's (a database edited outside it)
            n = len(problems)
            text.append("\n")
            text.append_text(plain(f"{n} row(s) of the database left out: "
                                   + "; ".join(problems[:3])
                                   + (f"; and {n - 3} more" if n > 3 else ""), style="red"))
            new = [line for line in problems if line not in self.db_notified]
            if new:  # notified once each, not again on every refresh
                self.notify(f"{len(new)} row(s) of the annotation database left out (see "
                            "Home)", severity="warning", timeout=8)
        self.db_notified = set(problems)
        self.query_one("#db", Static).update(text)
        for rnd, st in rows:  # (names from the database: Text, never markup)
            table.add_row(plain(rnd.name), str(st.functions), "yes" if rnd.blind else "no",
                          "closed" if st.closed else "open", plain(round_progress(st)),
                          key=rnd.name)
        if not table.row_count:
            table.add_row("–", "", "", "", "no round yet: press 2 (Label), then Ctrl+N")

    def action_refresh(self) -> None:
        self.query_one("#declarations", Static).update(declarations_text(self.app.context))
        self.refresh_rounds()

    @on(DataTable.RowSelected, "#runs")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_run()

    def action_problems(self) -> None:
        """The selected run's input problems, ``file:line [id]: reason``, literally."""
        from .problems import LinesScreen

        table = self.query_one("#runs", DataTable)
        if not table.row_count:
            self.notify("no run loaded", severity="warning")
            return
        label = str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        lines = self.problems.get(label, [])
        self.app.push_screen(LinesScreen(f"Problems of {label} ({len(lines)})", lines,
                                         empty="no problems in this run's files"))

    def action_open_run(self) -> None:
        table = self.query_one("#runs", DataTable)
        if not table.row_count:
            return
        label = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        self.app.open_run(label)
