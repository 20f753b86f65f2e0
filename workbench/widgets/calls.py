"""The stepper's widgets: the verdict bar, the list of turns and calls, the selected call."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from rich.text import Text
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from careful_engine.browse import CallView, ConversationView, Line, TurnView
from careful_engine.core.safe_text import visible
from careful_engine.scoring.rules import (
    RULE_REGISTRY,
    SEVERITIES,
    SafeRule,
    severity,
    shown_rules,
)

# How a screen marks a rule hit, by the rule's severity in the engine's registry.
SEVERITY_STYLES = dict(zip(SEVERITIES, ("bold red", "yellow", "dim"), strict=True))
STATUS = {
    "pass": ("✓ pass", "green"), "fail": ("✗ fail", "bold red"),
    "unchecked": ("· no reference call", "dim"), "not reached": ("· not reached", "dim"),
    "error": ("✗", "red"),
}


def short_error(error_type: str | None) -> str:
    return (error_type or "").split(":", 1)[-1]


def ok(value: bool | None) -> Text:
    if value is None:
        return Text("–", style="dim")
    return Text("✓", style="bold green") if value else Text("✗", style="bold red")


def tag(rule: str) -> str:
    """A rule's short tag (Table 4's), from the engine's rule registry."""
    r = RULE_REGISTRY.get(rule)
    return r.tag if r is not None else visible(rule)


def rule_style(rule: str, safe: SafeRule | None = None) -> str:
    """The style of a hit of ``rule`` by its :func:`severity` under the conversation's safe
    rule ``safe`` (the paper's when None)."""
    return SEVERITY_STYLES.get(severity(rule, safe), "yellow")


def rule_tags(rules: Iterable[str] | Mapping[str, int], *, quiet: bool = False,
              safe: SafeRule | None = None) -> Text:
    """Short rule tags, each once with its count when above one (``[+R]×4 [+W]×2``);
    ``quiet`` leaves out the rules meaningful only under the confirmation protocol; styled by
    severity under the safe rule ``safe``."""
    counts = Counter(rules) if not isinstance(rules, Mapping) else Counter(dict(rules))
    out = Text()
    for r in shown_rules(counts, confirm=not quiet, tallies=True):
        out.append(f" [{tag(r)}]", style=rule_style(r, safe))
        if counts[r] > 1:
            out.append(f"×{counts[r]}", style="dim")
    return out


def rule_counts(counts: Mapping[str, int], sep: str = " · ", gap: str = " ", *,
                confirm: bool = True, safe: SafeRule | None = None) -> Text:
    """``coll 1 · +W 2`` in the registry's order, styled by severity under the safe rule
    ``safe`` (``no rule hit`` for none; ``sep`` between hits, ``gap`` between a tag and its
    count: ``coll1 +W2`` when narrow; the rules meaningful only under the confirmation
    protocol only with ``confirm``)."""
    out = Text()
    for rule in shown_rules(counts, confirm=confirm):
        if out:
            out.append(sep, style="dim")
        out.append(f"{tag(rule)}{gap}{counts[rule]}", style=rule_style(rule, safe))
    return out or Text("no rule hit", style="dim")


def legend(rules: Iterable[str], *, counts: Mapping[str, int] | None = None,
           safe: SafeRule | None = None) -> Text:
    """``[tag] name: description`` for each rule (the registry's words), one per line, with
    its count when ``counts`` are given (styled by severity under the safe rule ``safe``)."""
    out = Text()
    for r in dict.fromkeys(rules):
        rule = RULE_REGISTRY.get(r)
        if out:
            out.append("\n")
        out.append(f"  [{tag(r)}]", style=rule_style(r, safe))
        if counts is not None:
            out.append(f" {counts.get(r, 0)}")
        out.append(f" {visible(r)}: {rule.description if rule else 'not a rule of this engine'}",
                   style="dim")
    return out


def safe_rule(view: ConversationView) -> SafeRule | None:
    """The safe rule ``view``'s counts were made under (None: not replayed; the paper's)."""
    return view.rules.rule if view.rules is not None else None


def turn_hit_counts(turn: TurnView) -> Counter:
    """A turn's hits per rule: the calls each names (one for a hit naming none), summed."""
    counts: Counter = Counter()
    for h in turn.hits:
        counts[h.rule] += len(h.calls) or 1
    return counts


def turn_heading(turn: TurnView, view: ConversationView) -> Text:
    label, style = STATUS.get(turn.status, (turn.status, ""))
    out = Text(f"turn {turn.index} ", style="bold")
    out.append(label, style=style)
    if turn.status == "fail":
        out.append(f" {short_error(view.verdict.error_type)}", style="red")
    counts = turn_hit_counts(turn)
    if shown_rules(counts, confirm=view.confirm):  # what the turn's calls are tagged with
        out.append(" · ")
        out.append_text(rule_counts(counts, confirm=view.confirm, safe=safe_rule(view)))
    return out


def line_text(line: Line, view: ConversationView, width: int = 200) -> Text:
    """One stepper line as styled text (a call clipped to ``width`` with its tags)."""
    if line.kind == "turn":
        heading = turn_heading(view.turns[line.turn], view)
        heading.truncate(max(width, 20), overflow="ellipsis")
        return heading
    if line.kind == "call":
        cv = view.calls[line.call]
        out = Text("  ")
        out.append("▶ " if cv.divergence else "  ", style="bold magenta")
        out.append("✗ " if cv.errored else "✓ ", style="red" if cv.errored else "green")
        tags = rule_tags(cv.rules, quiet=not view.confirm, safe=safe_rule(view))
        out.append(_clip(cv.record.text, max(width - 6 - tags.cell_len, 8)),
                   style="bold magenta" if cv.divergence else "")
        out.append_text(tags)
        out.truncate(max(width, 20), overflow="ellipsis")  # tags beyond a narrow list: cut
        return out
    styles = {"user": ("  user: ", "cyan"), "text": ("    text: ", "dim"),
              "decode_error": ("    decode error: ", "red"),
              "answer": ("    ↳ scripted user ", "bold cyan"), "note": ("  ", "dim italic")}
    prefix, style = styles.get(line.kind, ("  ", ""))
    return Text(prefix + _clip(line.text, max(width - len(prefix), 10)), style=style)


class CallList(OptionList):
    """Every turn, user message, step and call of a conversation, in order."""

    DEFAULT_CSS = """
    CallList { height: 1fr; border: round $panel; }
    CallList:focus { border: round $accent; }
    """

    _view: ConversationView | None = None
    _shown_width = 0

    def show(self, view: ConversationView) -> None:
        """The view's lines, each cut to the list's width (laid out again on a resize)."""
        self._view = view
        self._shown_width = self.size.width
        # the content's width less a margin (before the layout: the screen's less the borders)
        width = self.size.width - 2 if self.size.width else self.app.size.width - 6
        self.clear_options()
        self.add_options([Option(line_text(ln, view, width), id=f"line-{i}")
                          for i, ln in enumerate(view.lines)])

    def on_resize(self) -> None:
        """Shown before its width was known (or resized): cut the lines to the new width,
        the selected line staying selected."""
        if self._view is None or self.size.width == self._shown_width:
            return
        selected = self.highlighted
        self.show(self._view)
        if selected is not None:
            self.highlighted = selected


class VerdictBar(Static):
    """The conversation's verdicts, its rule counts and where it first went wrong."""

    DEFAULT_CSS = "VerdictBar { height: auto; padding: 0 1; background: $boost; }"

    def show(self, view: ConversationView) -> None:
        v = view.verdict
        out = Text(visible(view.id.removeprefix("multi_turn_")), style="bold")
        out.append("  BFCL ")
        out.append_text(ok(v.valid))
        if not v.valid:
            where = f" (turn {v.turn})" if v.turn is not None else ""
            out.append(f" {short_error(v.error_type)}{where}", style="red")
        out.append("  safe ")
        out.append_text(ok(view.safe_valid))
        out.append("  strict ")
        out.append_text(ok(view.strict_valid))
        out.append("\n")
        counts = dict(view.rules.counts) if view.rules else {}
        div = view.divergence
        if view.not_replayed is not None:  # no rule counts or blame: as careful score has none
            out.append(f"– not replayed ({visible(view.not_replayed)}): no rule counts",
                       style="yellow")
            self.tooltip = None
        else:
            out.append_text(rule_counts(counts, confirm=view.confirm, safe=safe_rule(view)))
            shown = shown_rules(counts, confirm=view.confirm)
            # what each tag means
            self.tooltip = legend(shown, safe=safe_rule(view)) if shown else None
            if div is not None:
                out.append(f"  ▶ diverges: turn {div.turn} step {div.step}", style="magenta")
            elif view.blame is not None:
                out.append(f"  ▶ turn {view.blame.turn}: a needed change is missing",
                           style="magenta")
        for note in view.notes:
            out.append(f"\n⚠ {visible(note)}", style="yellow")
        self.update(out)


class CallDetail(Static):
    """The selected call (or turn): text, result, success, rules, the reference beside it.

    One line per item, clipped to the width, so the list and the diffs keep their room.
    """

    DEFAULT_CSS = "CallDetail { height: auto; max-height: 6; padding: 0 1; }"

    def _clip(self, text: str, room: int) -> str:
        return _clip(text, max(room, 8))

    @property
    def _width(self) -> int:
        return max((self.size.width or self.app.size.width) - 2, 40)

    def show_call(self, cv: CallView, *, confirm: bool = True,
                  safe: SafeRule | None = None) -> None:
        """``confirm``: the run used the confirmation protocol (else its confirm-only tags,
        every destructive call 'unconfirmed', are left out, as in the list); ``safe``: the
        safe rule the conversation was scored under (how its tags are styled)."""
        rec = cv.record
        w = self._width
        head = f"t{rec.turn} s{rec.step} "
        out = Text(head, style="dim")
        out.append(self._clip(rec.text, w - len(head)), style="bold")
        status = Text("\n")
        status.append("✗ error" if cv.errored else "✓ ok", style="red" if cv.errored else "green")
        status.append_text(rule_tags(cv.rules, quiet=not confirm, safe=safe))
        if cv.divergence:
            status.append(" ▶ first divergence", style="bold magenta")
        status.append(" · result: ", style="dim")
        status.append(self._clip(rec.result, w - status.cell_len - 2))
        out.append_text(status)
        if cv.seen is not None:
            out.append("\nmodel saw: ", style="bold yellow")
            out.append(self._clip(cv.seen, w - 11), style="yellow")
        out.append("\nreference: ", style="dim")
        if cv.reference is not None:
            out.append(self._clip(f"{cv.reference.text} → {cv.reference.result}", w - 11))
        else:
            out.append(f"no {rec.name or 'such'} call left in this reference turn",
                       style="italic yellow")
        self.update(out)

    def show_turn(self, turn: TurnView, view: ConversationView) -> None:
        w = self._width
        out = turn_heading(turn, view)
        if turn.status == "fail":
            out.append(" — bfcl stops checking here", style="dim")
        for text in turn.user[:1]:
            out.append("\nuser: ", style="cyan")
            out.append(self._clip(text, w - 6))
        out.append("\nreference: ", style="dim")
        out.append(self._clip(", ".join(r.text for r in turn.reference) or "no call", w - 11))
        if turn.blame is not None:
            if turn.blame.attributes:
                out.append("\ndiffers: ", style="magenta")
                out.append(self._clip(", ".join(turn.blame.attributes), w - 9))
            if turn.blame.missing:
                out.append("\nmissing: ", style="magenta")
                out.append(self._clip(", ".join(turn.blame.missing), w - 9))
        if turn.hits:
            out.append("\nhits:", style="dim")
            out.append_text(rule_tags(turn_hit_counts(turn), quiet=not view.confirm,
                                      safe=safe_rule(view)))
        for a in turn.answers:
            out.append(f"\nscripted user after step {a.get('step')}: ", style="cyan")
            out.append(self._clip(f"{a.get('answer')} — {a.get('message', '')}", w - 30))
        self.update(out)


def _clip(text: str, width: int = 160) -> str:
    """Model and user text on one line, cut to ``width``, control characters visible."""
    text = str(text)
    head = text[: width * 8 + 64]  # a stepper line never needs more of a long value
    out = visible(" ".join(head.split()))
    return out if len(out) <= width and len(head) == len(text) else out[: width - 1] + "…"
