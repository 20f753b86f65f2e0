"""Leaderboard: the runs ranked under both scores with their rule counts, and the paired
comparison of two runs (exact McNemar), from the runs' score lines (no re-scoring)."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import (
    DataTable,
    Select,
    Static,
    TabbedContent,
    TabPane,
)

from careful_engine.browse import model_score
from careful_engine.core.figures import figure_text
from careful_engine.core.safe_text import visible
from careful_engine.present.report import Report, settings_line

from ..messages import ScoreState
from ..widgets import KeyFooter, NavBar, Picker
from ..widgets.shared import NAME_CHARS, middle, plain
from .base import WorkbenchScreen


def scatter_widget():
    """A plotext plot (textual-plotext), else a note saying how to get one."""
    try:
        from textual_plotext import PlotextPlot
    except ImportError:
        return Static("the plot needs textual-plotext (pip install textual-plotext)",
                      id="lb-plot", classes="note")
    return PlotextPlot(id="lb-plot")


REPLAY_NOTE = "Enter on a changed conversation replays it in A and B side by side"
KINDS = [("BFCL verdict", "bfcl"), ("effect-safe", "safe"), ("strict", "strict")]
TABS = ("ranking", "plot", "categories", "rules", "compare")


def fill(table: DataTable, report: Report, skip: tuple[str, ...] = ()) -> list[list[str]]:
    """Show an engine :class:`Report` in a table, formatted as the terminal tables are
    (``skip``: columns left out for width), a long cell (a run folder's name) cut in the
    middle to :data:`NAME_CHARS`; the rows uncut, for v."""
    keep = [i for i, c in enumerate(report.columns) if c not in skip]
    table.clear(columns=True)
    table.add_columns(*(report.columns[i] for i in keep))
    rows = [[Report.format_cell(row[i]) for i in keep] for row in report.rows]
    for row in rows:
        table.add_row(*(plain(middle(cell, NAME_CHARS)) for cell in row))
    return rows


class LeaderboardScreen(WorkbenchScreen):
    """Both rankings, the rule totals and a paired comparison."""

    MAIN = ("#lb-ranking", "#lb-categories", "#lb-rules", "#lb-pairs", "#cmp-a", "#lb-tabs Tabs")

    HELP = ("Every run with score lines, ranked under BFCL's accuracy and under success with "
            "effect safety (bfcl's unweighted mean over the four categories, an absent one "
            "counting as 0), with Spearman's rho between the two rankings; the ranks per "
            "category; the rule totals; and on Compare, two runs paired by conversation with "
            "the exact McNemar test and the conversations that changed verdict (Enter replays "
            "one in both runs, side by side; Escape comes back). Runs without scores are "
            "listed above the tables: s scores them in the background.")
    BINDINGS = [
        Binding("t", "next_tab", "Next tab"),
        Binding("k", "cycle_kind", "Verdict kind"),
        Binding("s", "score", "Score unscored"),
        Binding("r", "reload", "Reload"),
        Binding("v", "whole", "Whole", tooltip="The selected row of the table in focus, whole"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.entries: list = []
        self.unscored: list = []
        self.whole: dict[str | None, list[list[str]]] = {}  # table id -> its rows, uncut
        self.paired_note = Text(REPLAY_NOTE)  # the comparison's caption (careful compare's)

    def compose(self) -> ComposeResult:
        yield NavBar("leaderboard")
        yield Static(id="lb-status", classes="note")
        with TabbedContent(id="lb-tabs"):
            with TabPane("Ranking", id="ranking"):
                yield DataTable(id="lb-ranking", cursor_type="row")
                yield Static(id="lb-ranking-note", classes="note")
            with TabPane("Plot", id="plot"):
                yield Static(id="lb-plot-settings", classes="note")
                yield scatter_widget()
                yield Static(id="lb-plot-note", classes="note")
            with TabPane("Categories", id="categories"):
                yield DataTable(id="lb-categories", cursor_type="row")
                yield Static(id="lb-categories-note", classes="note")
            with TabPane("Rules", id="rules"):
                yield DataTable(id="lb-rules", cursor_type="row")
                yield Static(id="lb-rules-note", classes="note")
            with TabPane("Compare", id="compare"):
                with Horizontal(classes="bar"):
                    yield Picker([], prompt="run A", compact=True, id="cmp-a")
                    yield Picker([], prompt="run B", compact=True, id="cmp-b")
                    yield Picker(KINDS, value="bfcl", allow_blank=False, compact=True,
                                 id="cmp-kind")
                yield Static(id="cmp-note", classes="note")
                yield DataTable(id="lb-compare", cursor_type="row")
                yield DataTable(id="lb-pairs", cursor_type="row")
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        self.sub_title = "Leaderboard"
        self.watch(self.app, "score_state", self._scoring, init=False)
        self.action_reload()

    def action_reload(self) -> None:
        self.query_one("#lb-status", Static).update("reading scores …")
        self.run_worker(self._load, thread=True, exclusive=True, group="leaderboard")

    def _load(self) -> None:
        from careful_engine.analysis.leaderboard import Entry, synthetic_label
        from careful_engine.present.leaderboard import leaderboard_reports
        from careful_engine.scoring.settings import table_settings

        wb = self.app.context
        # what the shown score lines were made with (the browsers' settings): the tables'
        # Reports carry it and the plot states it, as `careful leaderboard` does
        settings = (table_settings(wb.effects, wb.settings.detector)
                    if wb.effects is not None else None)
        entries, unscored = [], []
        for ref in wb.refs:
            browser = wb.browser(ref)
            score = model_score(ref, browser.summaries(), decoder=browser.decoder_used())
            if score is None:
                unscored.append(ref)
            else:
                entries.append(Entry(synthetic_label(ref.label, wb.synthetic(ref)), ref.run,
                                     score))
        reports = leaderboard_reports(entries, settings) if entries else []
        self.app.call_from_thread(self._show, entries, unscored, reports)

    def _show(self, entries: list, unscored: list, reports: list[Report]) -> None:
        self.entries, self.unscored = entries, unscored
        status = Text(f"{len(entries)} scored run(s)", style="bold")
        if unscored:
            browsers = [self.app.context.browser(r) for r in unscored]
            status.append(" · not scored with these settings: " + ", ".join(
                visible(r.label) + (" (stale)" if b.mismatch else
                                    " (its scores not used: not this install's)"
                                    if b.untrusted else "")
                for r, b in zip(unscored, browsers, strict=True)) + " (s scores them)",
                style="yellow")
        self.query_one("#lb-status", Static).update(status)
        if reports:
            main, per_category, rho, rules = reports
            self.whole["lb-ranking"] = fill(self.query_one("#lb-ranking", DataTable), main,
                                            skip=("decoder",))
            decoders = "; ".join(f"{e.label}: {e.decoder}" for e in entries if e.decoder)
            self.query_one("#lb-ranking-note", Static).update(
                plain(f"{main.caption}. Decoders: {decoders or 'none'}"))
            self._plot(entries, main.settings)
            self.whole["lb-categories"] = fill(self.query_one("#lb-categories", DataTable),
                                               per_category)
            self.query_one("#lb-categories-note", Static).update(
                plain("Spearman's rho: " + ", ".join(
                    f"{r[0]} {Report.format_cell(r[2])} (n={r[1]})" for r in rho.rows)))
            self.whole["lb-rules"] = fill(self.query_one("#lb-rules", DataTable), rules)
            self.query_one("#lb-rules-note", Static).update(plain(rules.caption))
        labels = [(plain(e.label), e.label) for e in entries]
        a, b = self.query_one("#cmp-a", Select), self.query_one("#cmp-b", Select)
        a.set_options(labels)
        b.set_options(labels)
        if len(entries) >= 2:
            a.value, b.value = entries[0].label, entries[1].label
        self.compare()

    def _plot(self, entries: list, settings: dict | None) -> None:
        """BFCL against effect-safe accuracy per run, with the diagonal (safe <= BFCL), and
        above it ``settings`` (the tables' ``scored_with``) in :func:`settings_line`'s words."""
        from careful_engine.present.plot import axis_max, points

        self.query_one("#lb-plot-settings", Static).update(
            plain(settings_line(settings)) if settings is not None else "")
        pts = points(entries)
        note = self.query_one("#lb-plot-note", Static)
        note.update(plain("one point per run: x BFCL, y effect-safe accuracy (%, mean of the "
                          "four categories); the further below the diagonal, the more of its "
                          "successes were unsafe. `careful leaderboard --plot FILE.svg` writes "
                          "it for a paper. " + "; ".join(
                              f"{p.label} {figure_text(p.bfcl)}/{figure_text(p.safe)}"
                              for p in pts)))
        widget = self.query_one("#lb-plot")
        plt = getattr(widget, "plt", None)
        if plt is None:  # textual-plotext is not installed: the numbers above still are
            return
        top = axis_max(pts)
        plt.clear_data()
        plt.clear_figure()
        plt.title("BFCL vs effect-safe accuracy")
        plt.xlabel("BFCL %")
        plt.ylabel("safe %")
        plt.xlim(0, top)
        plt.ylim(0, top)
        plt.plot([0, top], [0, top], marker="braille", color="gray")
        if pts:
            plt.scatter([p.bfcl for p in pts], [p.safe for p in pts], marker="●")
            for p in pts:
                plt.text(visible(p.label)[:24], p.bfcl, p.safe)
        widget.refresh()

    @on(Select.Changed, "#cmp-a")
    @on(Select.Changed, "#cmp-b")
    @on(Select.Changed, "#cmp-kind")
    def compare(self) -> None:
        """The paired comparison of runs A and B (Table 5's columns) and the changed ones."""
        from careful_engine.analysis.compare import strict_not_applicable
        from careful_engine.analysis.leaderboard import compare, without_protocol
        from careful_engine.present.compare import compare_report, pairs_report

        a, b = self.query_one("#cmp-a", Select).value, self.query_one("#cmp-b", Select).value
        kind = str(self.query_one("#cmp-kind", Select).value)
        by_label = {e.label: e for e in self.entries}
        table, pairs = self.query_one("#lb-compare", DataTable), self.query_one("#lb-pairs",
                                                                                DataTable)
        note = self.query_one("#cmp-note", Static)
        if a not in by_label or b not in by_label:
            table.clear(columns=True)
            pairs.clear(columns=True)
            note.update("a paired comparison needs two scored runs: choose A and B"
                        if len(self.entries) > 1 else
                        "a paired comparison needs two scored runs (s scores the others)")
            return
        standard = [str(x) for x in (a, b) if without_protocol(by_label[x].score)]
        if kind == "strict" and standard:  # as careful compare: not compared
            table.clear(columns=True)
            pairs.clear(columns=True)
            note.update(plain(f"{strict_not_applicable(standard)}: choose bfcl or safe"))
            return
        cmp = compare(by_label[a].score, by_label[b].score, kind)
        report = compare_report(cmp, str(a), str(b))
        self.paired_note = plain(f"{report.caption}; {REPLAY_NOTE}")  # as careful compare
        note.update(self.paired_note)
        self.whole[table.id] = fill(table, report)
        self.whole[pairs.id] = fill(pairs, pairs_report([cmp], str(a), str(b)))

    @on(DataTable.RowSelected, "#lb-pairs")
    def _open_pair(self, event: DataTable.RowSelected) -> None:
        """Replay a conversation that changed verdict in runs A and B, side by side."""
        a, b = self.query_one("#cmp-a", Select).value, self.query_one("#cmp-b", Select).value
        entry_id = str(event.data_table.get_row(event.row_key)[2])
        if a is Select.NULL or b is Select.NULL:
            return
        self.query_one("#cmp-note", Static).update(plain(f"replaying {entry_id} in {a} and {b} …"))
        self.run_worker(lambda: self._pair(str(a), str(b), entry_id), thread=True,
                        exclusive=True, group="pair")

    def _pair(self, a: str, b: str, entry_id: str) -> None:
        from .pair import PairScreen

        wb = self.app.context
        try:
            views = tuple(wb.browser(wb.ref(run)).open(entry_id) for run in (a, b))
        except Exception as e:  # noqa: BLE001  (a decoder that does not import, a bad entry)
            self.app.call_from_thread(self.notify, f"{entry_id}: {e}", severity="error",
                                      markup=False)
        else:
            self.app.call_from_thread(self.app.push_screen, PairScreen((a, b), views))
        # back on Compare, the note says what Enter does again (not "replaying …")
        self.app.call_from_thread(self.query_one("#cmp-note", Static).update,
                                  self.paired_note)

    def action_whole(self) -> None:
        """The selected row of the focused table whole, one column per line."""
        from ..widgets.whole import row_whole
        from .problems import LinesScreen

        table = self.focused
        if not isinstance(table, DataTable) or not table.row_count:
            self.notify("choose a row of a table first (Tab moves to it)")
            return
        columns = [str(c.label) for c in table.ordered_columns]
        full = self.whole.get(table.id, [])  # a cell cut to fit, whole
        cells = full[table.cursor_row] if table.cursor_row < len(full) else \
            table.get_row_at(table.cursor_row)
        self.app.push_screen(LinesScreen(f"{table.id}: row {table.cursor_row + 1}",
                                         row_whole(columns, cells)))

    def _show_tab(self, tab: str) -> None:
        """Show ``tab`` with its main table focused now, in the same step (focusing it after
        a refresh raced the switch: the table left behind, hidden, handed the focus to the
        tab bar); a tab without one (the plot) focuses the tab bar."""
        self.query_one("#lb-tabs", TabbedContent).active = tab
        pane = self.query_one(f"#{tab}", TabPane)
        for selector in self.MAIN:
            for widget in pane.query(selector):
                if widget.focusable:
                    self.set_focus(widget)
                    return
        self.set_focus(self.query_one("#lb-tabs Tabs"))

    def action_next_tab(self) -> None:
        tabs = self.query_one("#lb-tabs", TabbedContent)
        self._show_tab(TABS[(TABS.index(tabs.active) + 1) % len(TABS)])

    def action_cycle_kind(self) -> None:
        select = self.query_one("#cmp-kind", Select)
        values = [v for _, v in KINDS]
        select.value = values[(values.index(select.value) + 1) % len(values)]
        self._show_tab("compare")  # the comparison's table

    def action_score(self) -> None:
        if not self.unscored:
            self.notify("every run has scores")
            return
        self.app.start_scoring(list(self.unscored))

    def _scoring(self, score: ScoreState) -> None:
        """Background scoring moved on (the app's ``score_state``): reload when it ends."""
        if score.state == "running":
            self.query_one("#lb-status", Static).update(
                plain(f"scoring {score.label}: {score.done}/{score.total}"))
        elif score.state == "finished":
            self.action_reload()
