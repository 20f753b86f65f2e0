"""Replay: choose a run, a category and filters; the conversations, ready to open.

The list comes from the result files and, when present, the score lines of ``careful score``
(or of the workbench's own scoring, key s), so the filters work without replaying anything; a
conversation is replayed only when it is opened.
"""

from __future__ import annotations

import re
from dataclasses import asdict

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Checkbox, DataTable, ProgressBar, Select, Static

from careful_engine.browse import (
    ConversationRow,
    Filter,
    default_cache_dir,
    error_types,
    hit_rules,
)
from careful_engine.core import bfcl
from careful_engine.core.checker import INFERENCE_ERROR
from careful_engine.core.safe_text import visible
from careful_engine.scoring.result import NOT_REPLAYED_TYPES
from careful_engine.scoring.rules import (
    RULE_REGISTRY,
    RULES,
    SEVERITIES,
    rule_legend,
    severity,
    shown_rules,
)
from careful_engine.scoring.score import error_word

from ..messages import ScoreState
from ..widgets import SYNTHETIC, KeyFooter, NavBar, Picker
from ..widgets.calls import legend, ok, rule_counts, tag
from ..widgets.shared import plain, shown_path
from .base import WorkbenchScreen

COLUMNS = ("conversation", "turns", "steps", "BFCL", "safe", "error", "rule hits")
# The orders the list can take (key o steps through them, O reverses): the column each sorts,
# and whether it starts descending (most hits, most steps first).
SORTS = {"id": ("conversation", False), "verdict": ("BFCL", False),
         "hits": ("rule hits", True), "steps": ("steps", True)}


def natural(entry_id: str) -> tuple:
    """``base_2`` before ``base_10``: digits compared as numbers."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", entry_id))


def _verdict(value: bool | None) -> int:
    return 2 if value is None else int(value)  # fail, pass, then not scored


def _weight(row: ConversationRow) -> tuple[int, ...]:
    """Rule hits by severity under the row's safe rule (severe first), as the column shows
    them."""
    counts = row.rules
    shown = shown_rules(counts, confirm=row.confirm)
    marks = {r: severity(r, row.safe_rule) for r in shown}
    return tuple(sum(counts[r] for r in shown if marks[r] == s) for s in SEVERITIES)


def sort_rows(rows: list[ConversationRow], by: str | None, reverse: bool = False
              ) -> list[ConversationRow]:
    """The rows in the order ``by`` (None: as in the files), ties by id: stable and
    deterministic whatever order the rows came in."""
    if by is None:
        return list(rows)
    key = {"id": lambda r: natural(r.id),
           "verdict": lambda r: (_verdict(r.official_valid), _verdict(r.safe_valid)),
           "hits": _weight, "steps": lambda r: (r.steps, r.turns)}[by]
    descending = SORTS[by][1] != reverse
    ordered = sorted(rows, key=lambda r: natural(r.id))
    return sorted(ordered, key=key, reverse=descending)  # stable: ties keep the id order
NARROW = ("conv", "t", "st", "BFCL", "safe", "error", "rule hits")  # under 100 columns


def short_id(entry_id: str) -> str:
    return entry_id.removeprefix("multi_turn_")


class ReplayScreen(WorkbenchScreen):
    """The conversations of a run, filtered; Enter replays one in the stepper."""

    MAIN = ("#conversations",)

    HELP = ("Choose a run and a category; narrow the list to failed conversations (x), to one "
            "error type (e) or to conversations with a given rule hit (h). The verdict columns "
            "come from `careful score`'s conversations.jsonl; without it, s scores the run in "
            "the background and the filters fill in. Enter replays the "
            "conversation call by call; v shows the selected row whole. o sorts the list by "
            "conversation, verdict (failed first), rule hits (most severe first) or steps, "
            "then back to the files' order; O reverses. The rule tags: "
            + rule_legend(RULES) + ".")
    BINDINGS = [
        Binding("enter", "open", "Open", show=False),
        Binding("r", "next_run", "Run"),
        Binding("x", "toggle_failed", "Failed"),
        Binding("e", "cycle('error')", "Error"),
        Binding("h", "cycle('rule')", "Rule"),
        Binding("c", "cycle('category')", "Category"),
        Binding("s", "score", "Score"),
        Binding("o", "sort", "Sort", tooltip="Sort by conversation, verdict, rule hits, steps"),
        Binding("O", "reverse", "Reverse", show=False, tooltip="Reverse the sort"),
        Binding("v", "whole", "Whole", show=False, tooltip="The selected conversation's row whole"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.ref = None
        self.filter = Filter()
        self.rows: list[ConversationRow] = []
        self.shown_rows: list[ConversationRow] = []
        self.values: dict[str, list[str]] = {"category": [], "error": [], "rule": []}
        self.sort: str | None = None  # None: the files' order
        self._narrow = False  # the list was filled for under 100 columns
        self.reverse = False

    def compose(self) -> ComposeResult:
        yield NavBar("replay")
        with Horizontal(classes="bar"):
            labels = [(plain(r.label), r.label) for r in self.app.context.refs]
            wanted = self.app.replay_run or (labels[0][1] if labels else Select.NULL)
            yield Picker(labels, prompt="no run", allow_blank=not labels, value=wanted,
                         compact=True, id="run")
            yield Picker([], prompt="all categories", compact=True, id="category")
        with Horizontal(classes="bar"):
            yield Checkbox("failed only", compact=True, id="failed")
            yield Picker([], prompt="any error type", compact=True, id="error")
            yield Picker([], prompt="any rule hit", compact=True, id="rule")
        yield Static(id="replay-status", classes="note")
        yield ProgressBar(show_eta=False, id="score-progress")
        yield DataTable(id="conversations", cursor_type="row", zebra_stripes=True)
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        self.sub_title = "Replay"
        self.query_one("#score-progress").display = False
        table = self.query_one("#conversations", DataTable)
        table.add_columns(*COLUMNS)
        refs = self.app.context.refs
        self.watch(self.app, "score_state", self._scoring, init=False)
        self.show_run(self.app.replay_run or (refs[0].label if refs else None))

    def on_resize(self) -> None:
        """The short headers and tight rule hits under 100 columns, the full ones above."""
        if self.rows and (self.app.size.width < 100) != self._narrow:
            self.refill()  # (a list still loading is filled for the width it meets)

    def on_screen_resume(self) -> None:
        wanted = self.app.replay_run
        if wanted and self.ref is not None and wanted != self.ref.label:
            self.show_run(wanted)

    # ---------------------------------------------------------------- loading

    def show_run(self, label: str | None) -> None:
        """List the run named ``label`` (a note instead when there is none)."""
        if label is None:
            self.query_one("#replay-status", Static).update(
                "no run found: give run folders to `careful workbench`, or run `careful demo`")
            return
        self.ref = self.app.context.ref(label)
        self.app.replay_run = label
        self.query_one(NavBar).show_detail(SYNTHETIC if self.app.context.synthetic(self.ref) else "")
        run = self.query_one("#run", Select)
        if run.value != label:
            run.value = label
        self.query_one("#conversations", DataTable).loading = True
        self.run_worker(self._load, thread=True, exclusive=True, group="replay-list")

    def _load(self) -> None:
        browser = self.app.context.browser(self.ref)
        rows = browser.rows()
        self.app.settle_memory(collect=False)  # a run's files, read (see Home)
        self.app.call_from_thread(self._loaded, self.ref.label, rows)

    def _warm(self) -> None:
        """Import the run's decoder (a second or so) before a conversation is opened."""
        try:
            self.app.context.browser(self.ref).handler()
        except Exception:  # noqa: BLE001  (reported when a conversation is opened)
            pass

    def _loaded(self, label: str, rows: list[ConversationRow]) -> None:
        if self.ref is None or label != self.ref.label:
            return
        self.rows = rows
        self.values = {"category": list(self.ref.categories), "error": error_types(rows),
                       "rule": hit_rules(rows)}
        # (a Select reads a string prompt as markup: the score lines' words are Text)
        self.query_one("#category", Select).set_options(
            [(plain(bfcl.SHORT_NAMES[c]), c) for c in self.values["category"]])
        self.query_one("#error", Select).set_options(
            [(plain(error_word(e)), e) for e in self.values["error"]])
        self.query_one("#rule", Select).set_options(
            [(plain(f"{tag(r)}  {r}"), r) for r in self.values["rule"]])
        self._restore_filter(label)
        table = self.query_one("#conversations", DataTable)
        table.loading = False
        self.refill()
        table.focus()
        mismatch = self.app.context.browser(self.ref).mismatch
        failed = self.app.scoring_failed  # (a failed rescore is not repeated unasked)
        if mismatch is not None and self.app.scoring is None \
                and (label not in failed or failed[label] != mismatch):
            self.app.start_scoring([self.ref])  # one truth: never list another setting's scores
        # after the list is painted: the import would compete with it for the interpreter
        self.set_timer(0.3, lambda: self.run_worker(self._warm, thread=True, group="warm"))

    def refill(self) -> None:
        """Apply the filter to the list (no replay)."""
        self.shown_rows = sort_rows(self.filter.apply(self.rows), self.sort, self.reverse)
        table = self.query_one("#conversations", DataTable)
        table.clear(columns=True)  # widths follow the content (scores arrive later)
        narrow = self._narrow = self.app.size.width < 100  # 80 columns: the hits still fit
        table.add_columns(*self._headers(narrow))
        for r in self.shown_rows:
            # (a table reads a string cell as markup: what came from a file is Text)
            table.add_row(plain(short_id(r.id)), str(r.turns), str(r.steps),
                          ok(r.official_valid), ok(r.safe_valid),
                          plain(error_word(r.error_type) if r.scored else ""),
                          _hits(r, narrow), key=r.id)
        self._status()

    def _headers(self, narrow: bool = False) -> list[str]:
        """The column names (short ones under 100 columns), the sorted one with its arrow
        (▲ ascending, ▼ descending)."""
        names = NARROW if narrow else COLUMNS
        if self.sort is None:
            return list(names)
        column, descending = SORTS[self.sort]
        arrow = "▼" if descending != self.reverse else "▲"
        return [f"{n} {arrow}" if c == column else n for c, n in zip(COLUMNS, names, strict=True)]

    def action_sort(self) -> None:
        """The next order: conversation, verdict, rule hits, steps, then the files' again."""
        if self._no_run():
            return
        order = [None, *SORTS]
        self.sort = order[(order.index(self.sort) + 1) % len(order)]
        self.reverse = False
        self._resort()

    def action_reverse(self) -> None:
        if self._no_run():
            return
        if self.sort is None:
            self.notify("the list is in the files' order: o sorts it first")
            return
        self.reverse = not self.reverse
        self._resort()

    @on(DataTable.HeaderSelected, "#conversations")
    def _header(self, event: DataTable.HeaderSelected) -> None:
        """A click on a sortable column's header sorts by it (again: reverses)."""
        name = COLUMNS[event.column_index] if event.column_index < len(COLUMNS) else None
        by = next((k for k, (c, _) in SORTS.items() if c == name), None)
        if by is None or self.ref is None:
            return
        self.reverse = not self.reverse if by == self.sort else False
        self.sort = by
        self._resort()

    def _resort(self) -> None:
        """Sort the list again and show its top: what the order puts first (keeping the
        selection would scroll to wherever it landed, the order's head out of sight)."""
        table = self.query_one("#conversations", DataTable)
        self.refill()
        if table.row_count:
            table.move_cursor(row=0)
            table.scroll_home(animate=False)

    def _no_run(self) -> bool:
        """True (and said) when no run is loaded: the keys that need one do nothing."""
        if self.ref is None:
            self.notify("no run loaded: give run folders to `careful workbench`",
                        severity="warning")
        return self.ref is None

    def _status(self) -> None:
        if self.ref is None:
            return
        browser = self.app.context.browser(self.ref)
        text = Text(f"{len(self.shown_rows)} of {len(self.rows)} conversations", style="bold")
        if self.sort is not None:
            column, descending = SORTS[self.sort]
            text.append(f" · sorted by {column} {'▼' if descending != self.reverse else '▲'}",
                        style="bold")
        missing = browser.missing()
        if missing:
            text.append(f" · {missing} ids missing from the files (scored as failed)",
                        style="yellow")
        if browser.mismatch is not None:
            text.append(" · scores " + ("being remade" if self.app.scoring == self.ref.label
                                        else "not used") + ": " + visible(browser.mismatch)
                        + " (s rescores)", style="yellow")
        elif browser.scored:
            path = browser.scores_path
            where = ("the workbench's own" if path.is_relative_to(self.app.context.settings.cache_dir
                                                                  or default_cache_dir())
                     else shown_path(path))
            text.append(f" · scores: {visible(where)}", style="dim")
            if browser.stale:
                text.append(" (older than the results: s to rescore)", style="yellow")
        else:
            text.append(" · not scored yet: s scores the run in the background",
                        style="yellow")
            if browser.untrusted is not None:  # the run folder's own lines: not this install's
                text.append(f" · {visible(browser.untrusted)}", style="yellow")
        if browser.score_problems:  # unreadable files, broken lines: never a silent "–"
            first = browser.score_problems[0]
            text.append(f" · score file problems: {len(browser.score_problems)} ("
                        f"{visible(first.message)}; Home, p lists them)", style="yellow")
        for flag in browser.decode_flags()[:1]:  # as `careful score` warns
            text.append(f" · decode audit: {visible(flag)}", style="bold red")
        self.query_one("#replay-status", Static).update(text)

    # ---------------------------------------------------------------- filters

    @on(Select.Changed, "#run")
    def _run_changed(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL and (self.ref is None or event.value != self.ref.label):
            self.show_run(str(event.value))

    @on(Select.Changed, "#category")
    @on(Select.Changed, "#error")
    @on(Select.Changed, "#rule")
    @on(Checkbox.Changed, "#failed")
    def _filter_changed(self) -> None:
        def value(selector: str) -> str | None:
            v = self.query_one(selector, Select).value
            return None if v is Select.NULL else str(v)

        wanted = Filter(value("#category"), self.query_one("#failed", Checkbox).value,
                        value("#error"), value("#rule"))
        if wanted != self.filter and self.ref is not None:
            self.filter = wanted
            self.refill()
        if self.ref is not None:
            self.app.context.remembered.remember_filter(self.ref.label, asdict(wanted))

    def _restore_filter(self, label: str) -> None:
        """The filters remembered for this run, else the ones in use: switching runs (or
        restarting) never resets them; a value this run does not have is dropped."""
        saved = self.app.context.remembered.filters.get(label) or asdict(self.filter)

        def kept(key: str, values: str) -> str | None:
            return saved.get(key) if saved.get(key) in self.values[values] else None

        wanted = Filter(kept("category", "category"), saved.get("failed_only") is True,
                        kept("error_type", "error"), kept("rule", "rule"))
        for selector, value in (("#category", wanted.category), ("#error", wanted.error_type),
                                ("#rule", wanted.rule)):
            select = self.query_one(selector, Select)
            if value is None:
                select.clear()
            else:
                select.value = value
        self.query_one("#failed", Checkbox).value = wanted.failed_only
        self.filter = wanted

    def action_next_run(self) -> None:
        if self._no_run():
            return
        labels = [r.label for r in self.app.context.refs]
        if self.ref is not None and len(labels) > 1:
            self.show_run(labels[(labels.index(self.ref.label) + 1) % len(labels)])

    def action_toggle_failed(self) -> None:
        if self._no_run():
            return
        box = self.query_one("#failed", Checkbox)
        box.value = not box.value

    def action_cycle(self, which: str) -> None:
        """Step a filter through its values (and back to 'any')."""
        if self._no_run():
            return
        select = self.query_one(f"#{which}", Select)
        values = self.values[which]
        if not values:
            self.notify(f"no {which} to filter on" + ("" if self.app.context.browser(
                self.ref).scored else ": score the run first (s)"), severity="warning")
            return
        current = select.value
        i = values.index(current) + 1 if current in values else 0
        if i < len(values):
            select.value = values[i]
            rule = RULE_REGISTRY.get(values[i]) if which == "rule" else None
            if rule is not None:  # what the tag means, in the registry's words
                self.notify(f"{rule.tag}: {rule.description}", timeout=3)
        else:
            select.clear()

    # ---------------------------------------------------------------- opening, scoring

    @on(DataTable.RowSelected, "#conversations")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        self.open(str(event.row_key.value))

    def action_open(self) -> None:
        table = self.query_one("#conversations", DataTable)
        if table.row_count:
            self.open(str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value))

    def open(self, entry_id: str) -> None:
        """Replay one conversation (in a thread) and show it in the stepper."""
        self.query_one("#replay-status", Static).update(plain(f"replaying {entry_id} …"))
        self.run_worker(lambda: self._open(entry_id), thread=True, exclusive=True,
                        group="replay-open")

    def _open(self, entry_id: str) -> None:
        from .conversation import ConversationScreen

        browser = self.app.context.browser(self.ref)
        try:
            view = browser.open(entry_id)
        except Exception as e:  # noqa: BLE001  (a decoder that does not import, a bad entry)
            self.app.call_from_thread(self.notify, f"{entry_id}: {e}", severity="error")
            self.app.call_from_thread(self._status)
            return
        self.app.settle_memory()
        self.app.call_from_thread(self._status)
        self.app.call_from_thread(self.app.push_screen, ConversationScreen(view))

    def action_whole(self) -> None:
        """The selected row whole, rule hits in the registry's words."""
        from ..widgets.whole import row_whole
        from .problems import LinesScreen

        table = self.query_one("#conversations", DataTable)
        if self._no_run() or not table.row_count:
            return
        key = str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        row = next(r for r in self.shown_rows if r.id == key)
        verdict = {None: "not scored", True: "pass", False: "fail"}
        cells = [row.id, row.category, row.turns, row.steps, verdict[row.official_valid],
                 verdict[row.safe_valid],
                 f"{error_word(row.error_type)} ({row.error_type})" if row.error_type else "–"]
        lines = row_whole(("conversation", "category", "turns", "steps", "BFCL", "safe",
                           "error"), cells)
        lines.append(Text("rule hits:" + ("\n" if row.rules else " none"), style="bold")
                     + legend(row.rules, counts=row.rules, safe=row.safe_rule))
        self.app.push_screen(LinesScreen(f"{self.ref.label} · {row.id}", lines))

    def action_score(self) -> None:
        if not self._no_run():
            self.app.start_scoring([self.ref])

    def _scoring(self, score: ScoreState) -> None:
        """Background scoring moved on (the app's ``score_state``)."""
        bar = self.query_one("#score-progress", ProgressBar)
        label, done, total, state = score.label, score.done, score.total, score.state
        if self.ref is None:
            return
        if state == "finished":  # no scoring any more (after an error: no "being remade")
            bar.display = False
            if self.rows:
                self._status()
            return
        if label != self.ref.label:
            return
        if state == "running":
            bar.display = True
            bar.update(total=total or None, progress=done)
            self.query_one("#replay-status", Static).update(
                plain(f"scoring {label}: {done}/{total}"))
        else:
            bar.display = False
            if state == "done":
                self.show_run(label)
            else:
                self._status()


def _hits(row: ConversationRow, narrow: bool = False) -> Text:
    """The row's rule hits (``coll1 +W2 unconf3`` under 100 columns: six tags still fit);
    ``– not replayed (inference)`` where nothing (or not all) was replayed: no rule counts."""
    if row.inference_error or row.error_type in NOT_REPLAYED_TYPES:
        why = error_word(row.error_type or INFERENCE_ERROR)
        return Text(f"– {why}" if narrow else f"– not replayed ({why})", style="dim")
    if not row.scored:
        return Text("")
    if not shown_rules(row.rules, confirm=row.confirm):
        return Text("")
    if narrow:
        return rule_counts(row.rules, " ", "", confirm=row.confirm, safe=row.safe_rule)
    return rule_counts(row.rules, confirm=row.confirm, safe=row.safe_rule)
