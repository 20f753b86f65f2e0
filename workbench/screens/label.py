"""Label (blind): one function at a time, destructive or not, with a reason.

The screen holds only an :class:`~careful_engine.annotation.sessions.AnnotatorSession`, which
reads the round's functions and this annotator's own labels: another annotator's label cannot
reach it.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, OptionList, ProgressBar, Select, Static
from textual.widgets.option_list import Option

from careful_engine.annotation.errors import AnnotationError
from careful_engine.annotation.names import check_name, confusable
from careful_engine.browse import function_review
from careful_engine.core.safe_text import visible

from ..widgets import KeyFooter, NavBar, Picker, ReviewCard
from ..widgets.shared import plain, round_progress
from .base import WorkbenchScreen
from .dialogs import ConfirmDialog, TextDialog

SHORT_REASON = 3  # words: a shorter reason is asked about before it is saved
INTRO = ("Label the destructive boundary, blind: you see the review sheet and your own labels, "
         "never anyone else's. A write is destructive if its effect reaches a third party or "
         "cannot be undone: it deletes or overwrites data, reaches other people, moves money, "
         "or acts in the physical world.")


def mark(label) -> Text:
    if label is None:
        return Text("·", style="dim")
    return Text("y", style="bold red") if label.destructive else Text("n", style="bold green")


class LabelScreen(WorkbenchScreen):
    """Choose a round and who you are, then label function after function."""

    MAIN = ("#functions", "#round-select")  # labelling, else choosing the round

    HELP = (INTRO + "\n\nPick a round, Tab to your annotator name (remembered), type it "
            "(one of the round's roster: any other name is refused, so a typo cannot join a "
            "blind round), Enter to start; you resume at your first unlabelled function. y or n "
            "opens the reason (required for 'destructive' and when you depart from the "
            "signals' proposal); Enter saves it at once. ] and [ move, u jumps to the next "
            "unlabelled function, s shows the simulator source, Ctrl+S submits the set (final). "
            "The round's creator adds (Ctrl+O) or removes (Ctrl+R) an annotator and closes the "
            "round (Ctrl+L) here.")
    BINDINGS = [
        Binding("y", "choose(True)", "Destructive"),
        Binding("n", "choose(False)", "Not"),
        Binding("right_square_bracket", "move(1)", "Next"),
        Binding("left_square_bracket", "move(-1)", "Prev", show=False),
        Binding("u", "next_unlabelled", "Unlabelled", show=False),
        Binding("s", "toggle_source", "Source"),
        Binding("space", "page", "More", show=False),
        Binding("ctrl+s", "submit", "Submit"),
        Binding("ctrl+n", "new_round", "New round"),
        Binding("ctrl+o", "roster_add", "Add annotator", show=False),
        Binding("ctrl+r", "roster_remove", "Remove annotator", show=False),
        Binding("ctrl+l", "close_round", "Close round", show=False),
        Binding("escape", "back", "Back", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.session = None
        self.current: str | None = None
        self.choice: bool | None = None
        self.source = False
        # the stored reason as the one-line input shows it (a newline or tab as a space, a
        # control character as an escape), and the stored reason itself: saved as it was if
        # left unedited
        self.escaped: tuple[str, str] | None = None

    def compose(self) -> ComposeResult:
        yield NavBar("label")
        with Vertical(id="label-setup"):
            yield Static(INTRO, classes="note")
            yield Static("Round", classes="section")
            yield Picker([], prompt="no round yet: Ctrl+N creates one", compact=True,
                         id="round-select")
            yield Static(id="round-info", classes="note")
            yield Static("Your annotator name", classes="section")
            yield Input(placeholder="e.g. A1 (letters, digits, . _ -)", compact=True,
                        id="annotator")
            yield Static("Tab: to your name (remembered) · Enter in it: start labelling · "
                         "Ctrl+N: new round over the declarations", classes="note")
        with Vertical(id="label-work"):
            with Horizontal(id="label-main"):
                yield OptionList(id="functions")
                yield ReviewCard(id="card")
            with Horizontal(id="label-bar"):
                yield Static(id="choice")
                yield Input(placeholder="reason, then Enter", compact=True, id="reason")
            with Horizontal(id="label-progress-bar"):
                yield ProgressBar(show_eta=False, show_percentage=False, id="label-progress")
                yield Static(id="label-count")
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        self.sub_title = "Label (blind)"
        self.query_one("#label-work").display = False
        self.query_one("#annotator", Input).value = self.app.context.remembered.annotator
        self.refresh_rounds()

    def refresh_rounds(self) -> None:
        try:
            store = self.app.context.store
            rounds = store.rounds()
        except AnnotationError as e:  # a damaged or foreign database, or one edited outside
            self.query_one("#round-info", Static).update(Text(str(e), style="red"))
            return
        select = self.query_one("#round-select", Select)
        kept = select.value  # the round chosen before, while it still exists
        select.prompt = "choose a round" if rounds else "no round yet: Ctrl+N creates one"
        select.set_options([(plain(r.name), r.name) for r in rounds])
        select.prompt = "choose a round" if rounds else "no round yet: Ctrl+N creates one"
        open_rounds = [r.name for r in rounds if not store.is_closed(r.name)]
        if kept in {r.name for r in rounds}:
            select.value = kept
        elif rounds:
            select.value = (open_rounds or [rounds[-1].name])[0]
        self._round_info()

    def on_screen_resume(self) -> None:
        """Back on the setup: rounds made and labels saved elsewhere since (the CLI, another
        annotator) show, so the counts are never stale."""
        if self.session is None and "store" in self.app.context.__dict__:
            self.refresh_rounds()

    @on(Select.Changed, "#round-select")
    def _round_info(self) -> None:
        select = self.query_one("#round-select", Select)
        info = self.query_one("#round-info", Static)
        if select.value is Select.NULL:
            info.update("")
            return
        store = self.app.context.store
        st = store.status(str(select.value))
        info.update(plain(f"{st.functions} functions ({st.writes} writes) · "
                          f"{'blind' if st.round.blind else 'not blind'} · "
                          f"{'closed' if st.closed else 'open'} · created by "
                          f"{st.round.created_by or 'nobody'} · roster: {round_progress(st)}"))

    # ---------------------------------------------------------------- setup

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        working = self.session is not None
        if action in ("new_round", "roster_add", "roster_remove", "close_round") \
                and "store" not in self.app.context.__dict__:
            return False  # no usable database
        if action in ("choose", "move", "next_unlabelled", "toggle_source", "submit", "page"):
            return working
        if action in ("new_round", "roster_add", "roster_remove", "close_round"):
            return not working
        return True

    @on(Input.Submitted, "#annotator")
    def start(self) -> None:
        """Become (or register as) the named annotator of the chosen round."""
        select = self.query_one("#round-select", Select)
        name = self.query_one("#annotator", Input).value.strip()
        if select.value is Select.NULL:
            self.notify("create a round first (Ctrl+N)", severity="warning")
            return
        store = self.app.context.store
        round_name = str(select.value)
        try:
            name = check_name(name)  # the name rule first, with its message
            roster = store.round_annotators(round_name)
            twin = confusable(name, [*roster, *(a.name for a in store.annotators())])
            if name not in roster and twin:
                raise AnnotationError(
                    f"annotator name {name!r} would be confused with the existing annotator "
                    f"{twin!r} (names that differ only by case or Unicode form are one name)")
            if name not in roster:  # the roster is fixed: a typo never joins a blind round
                self.notify(f"{name or '(no name)'} is not an annotator of round "
                            f"{round_name}; the roster: {', '.join(roster) or 'nobody yet'}"
                            + (" (ask its creator to add you)" if self._roster_refusal(round_name)
                               else " (Ctrl+O adds one)"), severity="error", timeout=8)
                return
            self.session = store.annotator_session(round_name, name)
        except AnnotationError as e:
            self.notify(str(e), severity="error")
            return
        self.app.context.remembered.remember_annotator(name)
        self.query_one("#label-setup").display = False
        self.query_one("#label-work").display = True
        self._fill_functions()
        remaining = self.session.remaining()
        first = remaining[0] if remaining else self.session.functions()[0].name
        self.select(first)
        self.query_one("#functions", OptionList).focus()
        self.refresh_bindings()

    def action_new_round(self) -> None:
        """A new blind round over the declarations (its roster: people and language models;
        the writes or every function)."""
        from .dialogs import NewRound, NewRoundDialog

        try:
            existing = {r.name for r in self.app.context.store.rounds()}
        except AnnotationError as e:  # a database edited outside careful: nothing is added
            self.notify(str(e), severity="error", timeout=8)
            return
        default = next(f"r{i}" for i in range(1, 1000) if f"r{i}" not in existing)

        def create(answer: NewRound | None) -> None:
            if not answer:
                return
            from careful_engine.annotation.signals import load_inputs

            store = self.app.context.store
            try:
                inputs = load_inputs(self.app.context.settings.declarations).select(answer.scope)
                store.new_round_with_roster(answer.name, inputs, answer.annotators,
                                            answer.llms, blind=True,
                                            created_by=self.app.context.settings.user)
            except AnnotationError as e:
                self.notify(str(e), severity="error", timeout=8)
                return
            self.refresh_rounds()
            self.query_one("#round-select", Select).value = answer.name
            self.query_one("#annotator", Input).focus()  # the next step: who you are

        self.app.push_screen(NewRoundDialog(default), create)

    # ---------------------------------------------------------------- the roster (owner)

    def _chosen_round(self) -> str | None:
        value = self.query_one("#round-select", Select).value
        if value is Select.NULL:
            self.notify("no round chosen", severity="warning")
            return None
        return str(value)

    def _roster_refusal(self, round_name: str) -> str | None:
        """Why this user may not change the round's roster (its creator only), or None."""
        return self.app.context.store.owner_refusal(
            round_name, self.app.context.settings.user, "change its roster")

    def _change_round(self, change: Callable[[], object], done: str) -> None:
        """Make a change to a round: say why it was refused, or what was done and show the
        round again."""
        try:
            change()
        except AnnotationError as e:
            self.notify(str(e), severity="error", timeout=8)
            return
        self.notify(done)
        self._round_info()

    def action_roster_add(self) -> None:
        """Add an annotator to the chosen round (its creator only)."""
        round_name = self._chosen_round()
        if round_name is None:
            return
        refused = self._roster_refusal(round_name)
        if refused:
            self.notify(refused, severity="error")
            return

        def add(name: str | None) -> None:
            if not name:
                return
            store = self.app.context.store

            def change() -> None:
                store.add_to_roster(round_name, [name], by=self.app.context.settings.user)

            self._change_round(change, f"{name} added to round {round_name}")

        self.app.push_screen(TextDialog(f"Add to {round_name}", "Annotator name to add:"), add)

    def action_roster_remove(self) -> None:
        """Take an annotator off the chosen round (its creator only; not once submitted)."""
        round_name = self._chosen_round()
        if round_name is None:
            return

        def remove(name: str | None) -> None:
            if name:
                self._change_round(lambda: self.app.context.store.remove_from_round(
                    round_name, name, by=self.app.context.settings.user),
                    f"{name} removed from round {round_name}")

        roster = ", ".join(self.app.context.store.round_annotators(round_name)) or "nobody"
        self.app.push_screen(TextDialog(f"Remove from {round_name}",
                                        f"The roster: {roster}. Name to remove:"), remove)

    def action_close_round(self) -> None:
        """Close the chosen round now (its creator only): adjudication opens on those who
        submitted."""
        round_name = self._chosen_round()
        if round_name is None:
            return

        def close(yes: bool | None) -> None:
            if yes:
                self._change_round(lambda: self.app.context.store.close_round(
                    round_name, by=self.app.context.settings.user), f"round {round_name} closed")

        self.app.push_screen(ConfirmDialog(
            f"Close {round_name}", f"Close round {round_name}? Labelling stops; adjudication "
            "counts the annotators who submitted."), close)

    # ---------------------------------------------------------------- labelling

    def _fill_functions(self) -> None:
        labels = self.session.labels()
        options = self.query_one("#functions", OptionList)
        options.clear_options()
        options.add_options([Option(self._entry(f.name, labels.get(f.name)), id=f.name)
                             for f in self.session.functions()])
        self._progress(labels)

    @staticmethod
    def _entry(name: str, label) -> Text:
        out = mark(label)
        out.append(" " + visible(name if len(name) <= 18 else name[:17] + "…"))
        return out

    def _progress(self, labels: dict) -> None:
        total = len(self.session.functions())
        bar = self.query_one("#label-progress", ProgressBar)
        bar.update(total=total, progress=len(labels))
        state = " · submitted" if self.session.submitted else ""
        self.query_one("#label-count", Static).update(plain(  # (names: never markup)
            f"{len(labels)}/{total} labelled as {self.session.annotator} in "
            f"{self.session.round_name}{state}"))

    def select(self, name: str) -> None:
        """Show one function, with this annotator's own label if there is one."""
        self.current = name
        self.choice = None
        fn = self.session.function(name)
        round_ = self.session.round
        decl = self.app.context.declarations_for(round_.declarations_source,
                                            round_.declarations_sha256)
        self.query_one("#card", ReviewCard).show(function_review(fn, decl), source=self.source)
        options = self.query_one("#functions", OptionList)
        index = options.get_option_index(name)
        if options.highlighted != index:
            options.highlighted = index
        own = self.session.labels().get(name)
        reason = self.query_one("#reason", Input)
        stored = own.reason if own else ""
        # one line, as the input holds (a newline or tab a space: an edit keeps the words, not
        # escapes of them); the terminal gets no control character
        reason.value = visible(" ".join(stored.replace("\t", " ").split("\n")))
        self.escaped = (reason.value, stored) if reason.value != stored else None
        self._show_choice(own.destructive if own else None, saved=own is not None)

    def _show_choice(self, value: bool | None, *, saved: bool = False) -> None:
        n = len(self.session.functions())
        i = next(k for k, f in enumerate(self.session.functions()) if f.name == self.current)
        text = Text(f"[{i + 1}/{n}] ", style="dim")
        if value is None:
            text.append("y / n ?", style="bold")
        else:
            text.append("destructive" if value else "not destructive",
                        style="bold red" if value else "bold green")
            text.append(" ✓" if saved else " …", style="dim")
        self.query_one("#choice", Static).update(text)

    @on(OptionList.OptionHighlighted, "#functions")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        # a highlight the keys have moved past is stale: only the list's current one counts
        if event.option_index != event.option_list.highlighted:
            return
        if self.session is not None and event.option.id != self.current:
            self.select(event.option.id)

    def action_choose(self, destructive: bool) -> None:
        if self.session.submitted:
            self.notify("this label set is submitted: labels are final", severity="warning")
            return
        self.choice = destructive
        self._show_choice(destructive)
        self.query_one("#reason", Input).focus()

    @on(Input.Submitted, "#reason")
    def save(self, event: Input.Submitted) -> None:
        """Commit the label with its reason (a reason of fewer than three words is asked
        about first); move on to the next unlabelled function."""
        if self.choice is None:
            own = self.session.labels().get(self.current)
            if own is None:
                self.notify("press y or n first", severity="warning")
                self.query_one("#functions", OptionList).focus()
                return
            self.choice = own.destructive
        reason = event.value
        if self.escaped is not None and reason == self.escaped[0]:
            reason = self.escaped[1]  # unedited: the stored reason, never its escaped form
        words = len(reason.split())
        if 0 < words < SHORT_REASON:
            def confirmed(yes: bool | None) -> None:
                if yes:
                    self._commit(reason)
                else:
                    self.query_one("#reason", Input).focus()

            self.app.push_screen(ConfirmDialog(
                "Short reason", f"Save the reason {reason.strip()!r} "
                f"({words} word{'s' if words > 1 else ''})? A reason says why, for whoever "
                "adjudicates.", enter=False), confirmed)
            return
        self._commit(reason)

    def _commit(self, reason: str) -> None:
        try:
            self.session.label(self.current, self.choice, reason)
        except AnnotationError as e:
            self.notify(str(e) + " (y or n to write it)", severity="error", timeout=6)
            # the reason box gives the focus back: the next key is a choice, never a reason
            self.query_one("#functions", OptionList).focus()
            return
        labels = self.session.labels()
        options = self.query_one("#functions", OptionList)
        options.replace_option_prompt(self.current,
                                      self._entry(self.current, labels[self.current]))
        self._progress(labels)
        remaining = self.session.remaining()
        options.focus()
        if remaining:
            self.select(self._after(remaining))
        else:
            self.select(self.current)
            self.notify("every function is labelled: Ctrl+S submits the set")

    def _after(self, names: list[str]) -> str:
        """The first of ``names`` after the current function, wrapping around."""
        order = [f.name for f in self.session.functions()]
        here = order.index(self.current)
        return min(names, key=lambda n: (order.index(n) <= here, order.index(n)))

    def action_move(self, step: int) -> None:
        order = [f.name for f in self.session.functions()]
        i = order.index(self.current) + step
        if 0 <= i < len(order):
            self.select(order[i])

    def action_next_unlabelled(self) -> None:
        remaining = self.session.remaining()
        if remaining:
            self.select(self._after(remaining))
        else:
            self.notify("no unlabelled function left")

    def action_page(self) -> None:
        """Scroll the review card a page down (back to the top after its end)."""
        card = self.query_one("#card", ReviewCard)
        if card.scroll_y >= card.max_scroll_y:
            card.scroll_home(animate=False)
        else:
            card.scroll_page_down(animate=False)

    def action_toggle_source(self) -> None:
        self.source = not self.source
        self.select(self.current)

    def action_submit(self) -> None:
        remaining = self.session.remaining()
        if remaining:
            self.notify(f"{len(remaining)} functions still unlabelled", severity="warning")
            return

        def done(yes: bool | None) -> None:
            if not yes:
                return
            try:
                self.session.submit()
            except AnnotationError as e:
                self.notify(str(e), severity="error")
                return
            self._progress(self.session.labels())
            self.notify(f"{self.session.annotator} submitted {self.session.round_name}")

        self.app.push_screen(ConfirmDialog(
            "Submit", "Submit your label set? Labels are final once submitted."), done)

    def action_back(self) -> None:
        focused = self.focused
        if isinstance(focused, Input) and focused.id == "reason":
            self.query_one("#functions", OptionList).focus()
            self.select(self.current)
        elif self.session is not None:
            self.session = None
            self.query_one("#label-work").display = False
            self.query_one("#label-setup").display = True
            self._round_info()
            self.refresh_bindings()
            self.focus_main()
