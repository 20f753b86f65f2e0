"""Agreement and adjudication: kappas, the split functions side by side, the boundary.

Everything comes from an :class:`~careful_engine.annotation.sessions.AdjudicationSession`,
which opens only once every annotator of a blind round has submitted, or with an override
whose reason is recorded.
"""

from __future__ import annotations

from pathlib import Path

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Select, Static

from careful_engine.annotation.errors import AnnotationError, BlindnessError
from careful_engine.annotation.names import REASON_MAX, parse_names
from careful_engine.core.safe_text import clip, visible
from careful_engine.effects.boundary import BoundaryError, user_path
from careful_engine.present.agreement import agreement_tables, reveal_lines

from ..widgets import KeyFooter, NavBar, Picker
from ..widgets.shared import plain, shown_path, yes_no
from .base import WorkbenchScreen
from .dialogs import ConfirmDialog, DecisionDialog, TextDialog

TIES = ("error", "yes", "no")
REVEAL_OVERRIDES = 5  # the overrides of the reveal log under the figures (all: careful agree)


def reason_text(reason: str) -> str:
    """A label's or decision's reason as the screen shows it: control characters as escapes,
    cut in the middle past what a reason may hold (:data:`REASON_MAX`), its length said."""
    return visible(clip(reason, REASON_MAX), keep_newlines=True)


def reveal_log(reveals: list[dict]) -> Text:
    """The overrides in a round's reveal log, the last :data:`REVEAL_OVERRIDES`: who opened
    labels early, when, what and why (openings of a closed round are logged too, and listed
    by ``careful round status``)."""
    count = sum(1 for r in reveals if r["override"])
    out = Text()
    if count:
        out.append(f"\nreveal log: {count} override{'s' if count != 1 else ''}"
                   f" of {len(reveals)} openings", style="yellow")
    for line in reveal_lines(reveals, REVEAL_OVERRIDES):
        out.append(f"\n  {line.text}", style="yellow")
    return out


class AgreementScreen(WorkbenchScreen):
    """Pairwise and overall agreement, the splits, decisions and the boundary."""

    MAIN = ("#splits", "#agree-round")

    HELP = ("Agreement of a labelling round: raw agreement and Cohen's kappa per pair, Fleiss' "
            "kappa over all annotators and Krippendorff's alpha (nominal), on the writes or on "
            "all functions (w). A blind round opens only when every annotator has submitted; "
            "o opens it earlier with a reason, which is recorded. Below, every split function "
            "with each annotator's label and reason side by side. Adjudicate by policy (p; "
            "majority ties follow t) or one function at a time (d, with a reason; decisions "
            "never change a label), then write the boundary the scorer reads (b). a counts "
            "only some annotators (as `careful agree -a A1,A2`), for agreement and "
            "adjudication alike.")
    BINDINGS = [
        Binding("w", "toggle_subset", "Writes/all"),
        Binding("p", "cycle_policy", "Policy"),
        Binding("t", "cycle_tie", "Ties"),
        Binding("d", "decide", "Decide"),
        Binding("b", "write_boundary", "Boundary"),
        Binding("a", "choose_annotators", "Annotators"),
        Binding("o", "override", "Override", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.session = None
        self.subset = "writes"
        self.policy = "any"
        self.tie = "error"
        self.result = None
        self.refused = ""  # why the policy adjudicates nothing (shown; said on writing)
        self.split_names: list[str] = []
        self.chosen: list[str] | None = None  # the annotators counted (None: all of them)
        self.listed: tuple | None = None  # the rounds in the picker: (name, closed) each
        self.round_name: str | None = None  # the round chosen (opened, or refused while blind)

    def compose(self) -> ComposeResult:
        yield NavBar("agreement")
        with Horizontal(classes="bar"):
            yield Picker([], prompt="no round", compact=True, id="agree-round")
            yield Static(id="agree-mode")
        with VerticalScroll(id="agree-body"):
            yield Static(id="agree-summary")
            with Horizontal(id="agree-tables"):
                yield DataTable(id="pairs", cursor_type="row")
                yield DataTable(id="splits", cursor_type="row")
            yield Static(id="split-detail")
            yield Static(id="adjudication")
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        self.sub_title = "Agreement"
        self.query_one("#pairs", DataTable).add_columns("pair", "agree", "κ")
        self.query_one("#splits", DataTable).add_columns("split", "decided", "yes", "no")
        self.refresh_rounds()

    def on_screen_resume(self) -> None:
        self.refresh_rounds()  # a round added or closed since (Label screen, the CLI)
        if self.session is not None:  # labels and decisions saved since: counts as they are
            self.show()

    def refresh_rounds(self) -> None:
        """List the rounds; only when they changed (each opening is recorded in the round's
        reveal log), keeping the round chosen (the first closed one at first)."""
        try:
            store = self.app.context.store
            rounds = store.rounds()
            listed = tuple((r.name, store.is_closed(r.name)) for r in rounds)
        except AnnotationError as e:  # a damaged or foreign database, or one edited outside
            self._message(Text(str(e), style="red"))
            return
        if listed == self.listed:
            return
        self.listed = listed
        select = self.query_one("#agree-round", Select)
        with self.prevent(Select.Changed):
            select.set_options([(plain(r.name), r.name) for r in rounds])
        names = [name for name, _ in listed]
        if self.round_name in names:  # still chosen: opened now if it has just closed
            with self.prevent(Select.Changed):
                select.value = self.round_name
            if self.session is None:
                self.open_round()
        elif rounds:
            self.round_name = None
            select.value = ([name for name, closed in listed if closed] or names)[0]
        else:
            self.round_name = None
            self._message(Text("no labelling round yet (Label screen, Ctrl+N)", style="dim"))

    @on(Select.Changed, "#agree-round")
    def _round_changed(self, event: Select.Changed) -> None:
        if event.value is Select.NULL or event.value == self.round_name:
            return  # the round chosen already: opened once per choice
        self.round_name = str(event.value)
        self.session = None
        self.chosen = None
        self.open_round()

    def open_round(self, override: str | None = None) -> None:
        """Open an adjudication session on the chosen round (refused while blind and open)."""
        value = self.query_one("#agree-round", Select).value
        if value is Select.NULL:
            return
        remembered = self.app.context.overrides
        override = override or remembered.get(str(value))  # asked once per round and app
        try:
            self.session = self.app.context.store.adjudication_session(
                str(value), self.app.context.settings.user, override=override)
            if override:
                remembered[str(value)] = override
        except BlindnessError as e:
            self.session = None
            self._message(plain(e, style="yellow") + Text(
                "\n\no: open it now with a reason (recorded)", style="bold"))
            return
        except AnnotationError as e:
            self._message(plain(e, style="red"))
            return
        self.show()

    def _message(self, text: Text) -> None:
        self.query_one("#agree-summary", Static).update(text)
        self.query_one("#agree-tables").display = False
        for table in ("#pairs", "#splits"):
            self.query_one(table, DataTable).clear()
        self.query_one("#split-detail", Static).update("")
        self.query_one("#adjudication", Static).update("")
        self._mode()

    def _no_writes(self) -> bool:
        """Whether the open round's inputs declare no write (agreement on all functions only,
        as careful agree says)."""
        return self.session is not None and not self.session.declares_writes()

    def _subset(self) -> str:
        """What the figures and the splits are over: the chosen subset (all where the inputs
        declare no write: :meth:`AdjudicationSession.subsets`)."""
        return self.subset if self.session is None else self.session.subsets(self.subset)[-1]

    def _mode(self) -> None:
        who = "all annotators" if self.chosen is None else f"only {', '.join(self.chosen)}"
        subset = self._subset()
        self.query_one("#agree-mode", Static).update(plain(
            f"{subset} · {who} · policy {self.policy}"
            + (f" · ties {self.tie}" if self.policy == "majority" else "")))

    # ---------------------------------------------------------------- display

    def show(self) -> None:
        """Agreement, splits and the adjudication preview of the open session."""
        s = self.session
        self._mode()
        self.query_one("#agree-tables").display = True
        subset = self._subset()
        try:
            report = s.agreement(subset, self.chosen)
        except AnnotationError as e:  # a chosen annotator left the roster
            self.chosen = None
            self.notify(str(e), severity="warning")
            report = s.agreement(subset)
        summary = Text(f"round {visible(s.round_name)} · {len(report.functions)} functions "
                       f"({subset}) · {len(report.annotators)} annotator"
                       f"{'' if len(report.annotators) == 1 else 's'}", style="bold")
        if s.overridden:
            summary.append(" · opened with an override (recorded)", style="yellow")
        tables = agreement_tables(report)
        (_, fleiss), (_, alpha), (_, destructive) = tables.overall
        summary.append(f"\nFleiss' κ {fleiss} · Krippendorff's α {alpha} · unanimous "
                       f"{report.unanimous}/{report.complete} · destructive labels: "
                       + visible(destructive))
        summary.append_text(reveal_log(s.reveal_log()))
        self.query_one("#agree-summary", Static).update(summary)
        pairs = self.query_one("#pairs", DataTable)
        pairs.clear()
        for pair, agree, kappa in tables.pair_cells(("pair", "agree", "Cohen's κ")):
            pairs.add_row(plain(pair), agree, kappa)
        self._splits()
        self._adjudicate()
        self.query_one("#splits", DataTable).focus()

    def _splits(self) -> None:
        decided = {d.function: d for d in self.session.decisions()}
        table = self.query_one("#splits", DataTable)
        cursor = table.cursor_row
        table.clear()
        splits = self.session.splits(self._subset(), self.chosen)  # as the figures beside
        self.split_names = [sp.function for sp in splits]
        for sp in splits:
            d = decided.get(sp.function)
            table.add_row(plain(sp.function),  # decided before the names: always on view
                          yes_no(d.destructive) if d else Text("–", style="dim"),
                          plain(",".join(sp.yes)), plain(",".join(sp.no)), key=sp.function)
        if splits:
            table.move_cursor(row=min(cursor, len(splits) - 1))
            self._detail(splits[min(cursor, len(splits) - 1)].function)
        else:
            self.query_one("#split-detail", Static).update(
                Text("no split: every function was labelled alike", style="dim"))

    @on(DataTable.RowHighlighted, "#splits")
    def _split_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self.session is not None and event.row_key is not None:
            self._detail(str(event.row_key.value))

    def _detail(self, function: str) -> None:
        """Each annotator's label and reason on one split function, side by side."""
        labels = self.session.counted()  # the labels that count, as in the splits
        if self.chosen is not None:
            labels = {a: v for a, v in labels.items() if a in self.chosen}
        # (Text, never markup; a Text title or caption takes no style from the table)
        table = Table(title=plain(f"{function}: labels and reasons", "table.title"),
                      title_justify="left",
                      expand=True, show_lines=False)
        who = [a for a in labels if function in labels[a]]
        for a in who:
            table.add_column(plain(a), ratio=1)
        table.add_row(*(yes_no(labels[a][function].destructive) for a in who))
        table.add_row(*(Text(reason_text(labels[a][function].reason or "–")) for a in who))
        for d in self.session.decisions():
            if d.function == function:
                table.caption = plain(f"decision by {d.author}: " + (
                    "destructive" if d.destructive else "not destructive")
                    + f" — {clip(d.reason, REASON_MAX)}", "table.caption")
        self.query_one("#split-detail", Static).update(table)

    def _adjudicate(self) -> None:
        from careful_engine.annotation.adjudication import describe

        out = self.query_one("#adjudication", Static)
        try:
            self.result = self.session.adjudicate(self.policy, tie=self.tie,
                                                  annotators=self.chosen)
        except AnnotationError as e:
            self.result, self.refused = None, str(e)
            out.update(plain(f"policy {self.policy}: {e}", style="red"))
            return
        r = self.result
        text = plain(f"policy {self.policy}: {len(r.destructive)} destructive of "
                     f"{len(r.outcomes)}", style="bold")
        text.append("\n" + visible(describe(r, self.session.round), keep_newlines=True),
                    style="dim")
        out.update(text)

    # ---------------------------------------------------------------- actions

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action in ("decide", "write_boundary", "toggle_subset", "cycle_policy",
                      "cycle_tie", "choose_annotators"):
            return self.session is not None or None
        if action == "override":
            return True
        return True

    def action_toggle_subset(self) -> None:
        if self._no_writes():
            self.notify("the round's inputs declare no writes: agreement on all functions only")
            return
        self.subset = "all" if self.subset == "writes" else "writes"
        self.show()

    def action_cycle_policy(self) -> None:
        policies = ["any", "majority", "unanimous"] + [
            f"annotator:{a.name}" for a in self.session.annotators()
            if self.chosen is None or a.name in self.chosen]
        i = policies.index(self.policy) if self.policy in policies else -1
        self.policy = policies[(i + 1) % len(policies)]
        self._mode()
        self._adjudicate()

    def action_cycle_tie(self) -> None:
        self.tie = TIES[(TIES.index(self.tie) + 1) % len(TIES)]
        self._mode()
        self._adjudicate()

    def action_choose_annotators(self) -> None:
        """Agreement and adjudication on some of the round's annotators (as ``careful agree
        -a A1,A2``); an empty answer counts them all again."""
        roster = [a.name for a in self.session.annotators()]

        def chosen(answer: str | None) -> None:
            if answer is None:
                return
            picked = parse_names(answer)
            unknown = [a for a in picked if a not in roster]
            if unknown:
                self.notify(f"not annotators of round {self.session.round_name}: "
                            f"{', '.join(unknown)} (the roster: {', '.join(roster)})",
                            severity="error", timeout=8)
                return
            self.chosen = picked if picked and set(picked) != set(roster) else None
            if self.policy.startswith("annotator:") and self.chosen is not None \
                    and self.policy.partition(":")[2] not in self.chosen:
                self.policy = "any"
            self.show()

        self.app.push_screen(TextDialog(
            "Annotators counted", f"Agreement and adjudication on these annotators of "
            f"{self.session.round_name} (names separated by spaces or commas; empty: all of "
            f"{', '.join(roster)}):", value=" ".join(self.chosen or roster), allow_empty=True),
            chosen)

    def action_override(self) -> None:
        if self.session is not None:
            self.notify("the round is open already")
            return

        def opened(reason: str | None) -> None:
            if reason:
                self.open_round(override=reason)

        self.app.push_screen(TextDialog(
            "Open before every annotator has submitted",
            "Why open the labels now? (recorded with your name)"), opened)

    def action_decide(self) -> None:
        table = self.query_one("#splits", DataTable)
        if not self.split_names:
            self.notify("no split function to decide", severity="warning")
            return
        function = self.split_names[table.cursor_row]
        proposed = next((f.proposed for f in self.session.functions()
                         if f.name == function), None)

        def decided(answer: tuple[bool, str] | None) -> None:
            if answer is None:
                return
            try:
                self.session.decide(function, answer[0], answer[1])
            except AnnotationError as e:
                self.notify(str(e), severity="error")
                return
            self._splits()
            self._adjudicate()

        self.app.push_screen(DecisionDialog(function, proposed), decided)

    def action_write_boundary(self) -> None:
        if self.result is None:
            self.notify(f"nothing to write: {self.refused or 'no adjudication'}",
                        severity="warning")
            return
        default = self.session.default_boundary_name(self.policy)

        def write(name: str | None, force: bool = False) -> None:
            if not name:
                return
            folder = self.app.context.settings.boundary_dir
            # as careful adjudicate: <name>.json in the working folder unless settings say
            path = folder / f"{name}.json" if folder is not None else user_path(name)
            if name.endswith(".json"):  # a path: the boundary is named after the file
                path, name = Path(name), Path(name).stem
            try:
                boundary, out = self.session.write_boundary(self.result, name, path=path,
                                                            force=force)
            except (AnnotationError, BoundaryError, ValueError) as e:
                if "exists" in str(e) and not force:
                    self.app.push_screen(
                        ConfirmDialog("Replace?", f"{e}.\nWrite a new version?"),
                        lambda yes: write(name, True) if yes else None)
                    return
                self.notify(str(e), severity="error")
                return
            self.notify(f"wrote {shown_path(out)}: {len(boundary.destructive)} destructive "
                        f"(v{boundary.version})")

        folder = self.app.context.settings.boundary_dir
        where = f"{shown_path(folder)}/NAME.json" if folder is not None else \
            "NAME.json in the working folder, as careful adjudicate writes it"
        self.app.push_screen(TextDialog(
            "Write the boundary", f"{len(self.result.destructive)} destructive functions under "
            f"{self.policy}. Boundary name (written to {where}), or a path ending in "
            ".json:", value=default), write)
