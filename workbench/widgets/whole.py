"""Values whole: what the stepper and the tables cut to fit, shown entire, with a
character-level diff of the model's value against the reference's (difflib).

Every string here comes from a file or a model: it goes through ``visible()`` before it
becomes a Rich :class:`~rich.text.Text` (never markup), so control characters show as escapes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from difflib import SequenceMatcher
from typing import Any, TypeVar

from rich.text import Text

from careful_engine.browse import CallView, ConversationView, TurnView
from careful_engine.core.safe_text import visible
from careful_engine.core.state import Change
from careful_engine.effects.infer import short_path
from careful_engine.scoring.rules import SafeRule, shown_rules

from .calls import legend, safe_rule, turn_hit_counts

MAX_CHARS = 200_000  # of one value shown whole; the rest is counted
TOTAL_CHARS = 4 * MAX_CHARS  # of a list of changes shown whole; the changes past it counted
T = TypeVar("T")
DIFF_CELLS = 4_000_000  # the differing middle's size (product of lengths) difflib may take on
REMOVED = "bold white on red"  # the reference's characters the model's value lacks
ADDED = "bold black on green"  # the model's characters the reference's value lacks


def whole(value: Any) -> str:
    """A state value as text, uncut, as the diff panes show it (JSON where it is JSON: a
    string quoted, so that spaces at its ends show; else its repr)."""
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):  # mixed or non-JSON keys: keep the (deterministic) order
        try:
            return json.dumps(value, ensure_ascii=False, default=repr)
        except (TypeError, ValueError):
            return repr(value)


def bounded(text: str) -> tuple[str, int]:
    """``text`` shown (control characters as escapes), at most :data:`MAX_CHARS` of it, and
    how many characters were left out."""
    shown = visible(text[:MAX_CHARS], keep_newlines=True)
    return shown, max(len(text) - MAX_CHARS, 0)


def _more(n: int) -> Text:
    return Text(f" … {n} more characters" if n else "", style="dim italic")


def char_diff(model: str, reference: str) -> tuple[Text, Text]:
    """The two values as styled text, the characters that differ marked: on the reference's
    side those the model lacks (:data:`REMOVED`), on the model's those the reference lacks
    (:data:`ADDED`). The common start and end are set aside first, so a long value with one
    changed word costs little; a differing middle too large for difflib is marked whole."""
    m, m_more = bounded(model)
    r, r_more = bounded(reference)
    start = 0
    limit = min(len(m), len(r))
    while start < limit and m[start] == r[start]:
        start += 1
    end = 0
    while end < limit - start and m[-1 - end] == r[-1 - end]:
        end += 1
    mid_m, mid_r = m[start:len(m) - end], r[start:len(r) - end]
    out_m, out_r = Text(m[:start]), Text(r[:start])
    if len(mid_m) * len(mid_r) <= DIFF_CELLS:
        ops = SequenceMatcher(None, mid_r, mid_m, autojunk=False).get_opcodes()
    else:
        ops = [("replace", 0, len(mid_r), 0, len(mid_m))]
    for op, i1, i2, j1, j2 in ops:
        if op == "equal":
            out_r.append(mid_r[i1:i2])
            out_m.append(mid_m[j1:j2])
            continue
        if i2 > i1:
            out_r.append(mid_r[i1:i2], style=REMOVED)
        if j2 > j1:
            out_m.append(mid_m[j1:j2], style=ADDED)
    out_m.append(m[len(m) - end:] if end else "")
    out_r.append(r[len(r) - end:] if end else "")
    return out_m + _more(m_more), out_r + _more(r_more)


def marked(text: Text, style: str) -> str:
    """The characters of ``text`` carrying ``style`` (what a test checks the diff marks)."""
    return "".join(text.plain[s.start:s.end] for s in text.spans if str(s.style) == style)


def _value(label: str, text: str | Text, style: str = "") -> Text:
    out = Text(f"  {label:<10}" if label else "    ", style="dim")
    if isinstance(text, Text):
        return out + text
    shown, more = bounded(text)
    return out + Text(shown, style=style) + _more(more)


def pair(title: str, model: str | None, reference: str | None) -> list[Text]:
    """A heading, then the model's and the reference's value; diffed when both are there
    and differ."""
    lines = [Text(title, style="bold")]
    if model is not None and reference is not None and model != reference:
        dm, dr = char_diff(model, reference)
        lines += [_value("model", dm), _value("reference", dr)]
    else:
        if model is not None:
            lines.append(_value("model", model))
        if reference is not None:
            lines.append(_value("reference", reference))
        if model is not None and model == reference:
            lines.append(Text("  (the same)", style="dim italic"))
    return lines


def _changes(title: str, changes: Sequence[Change]) -> list[Text]:
    lines = [Text(title, style="bold")]
    if not changes:
        lines.append(Text("  (no state change)", style="dim italic"))

    def change(c: Change) -> list[Text]:
        head = Text(f"  {visible(short_path(c.path))}", style="cyan")
        head.append(f" {c.kind}" + (" (hidden)" if c.hidden else ""), style="dim")
        out = [head]
        if c.kind != "added":
            out.append(_value("    was", whole(c.before)))
        if c.kind != "removed":
            out.append(_value("    now", whole(c.after)))
        return out

    return lines + _bounded(changes, change)


def _bounded(items: Sequence[T], render: Callable[[T], list[Text]]) -> list[Text]:
    """``render`` of each item, until :data:`TOTAL_CHARS` are shown; the items past them
    counted in a last line."""
    lines: list[Text] = []
    size = 0
    for i, item in enumerate(items):
        if size > TOTAL_CHARS:
            lines.append(Text(f"  … {len(items) - i} more changes (past {TOTAL_CHARS:,} "
                              "characters)", style="dim italic"))
            break
        shown = render(item)
        size += sum(len(x) for x in shown)
        lines += shown
    return lines


def call_whole(cv: CallView, *, confirm: bool = True,
               safe: SafeRule | None = None) -> list[Text]:
    """One call entire: its text and result beside the reference call's, what the model was
    shown, its rule hits explained (those meaningful only under the confirmation protocol
    with ``confirm``; styled under the safe rule ``safe``), both sides' state changes, and where both changed the same attribute
    differently, the character diff."""
    rec, ref = cv.record, cv.reference
    lines = [Text(f"turn {rec.turn} step {rec.step}: "
                  + ("✗ error" if cv.errored else "✓ ok")
                  + (" · ▶ first divergence" if cv.divergence else ""), style="bold")]
    lines += pair("call", rec.text, ref.text if ref is not None else None)
    if ref is None:
        lines.append(Text(f"  no {visible(rec.name or 'such')} call left in this reference turn",
                          style="italic yellow"))
    lines += pair("result", rec.result, ref.result if ref is not None else None)
    if cv.seen is not None:
        lines += pair("the model was shown (logged) against the replay", cv.seen, rec.result)
    rules = shown_rules(Counter(cv.rules), confirm=confirm, tallies=True)
    if rules:
        lines += [Text("rule hits", style="bold"), legend(rules, safe=safe)]
    mine = {c.path: c for c in cv.changes}
    theirs = {c.path: c for c in cv.reference_changes}
    both = [p for p in mine if p in theirs and mine[p].after != theirs[p].after]
    lines += _bounded(both, lambda p: pair(
        f"{visible(short_path(p))}: the model's value against the reference's",
        whole(mine[p].after), whole(theirs[p].after)))
    lines += _changes("state changes (model)", cv.changes)
    if ref is not None:
        lines += _changes("state changes (reference)", cv.reference_changes)
    return lines


def turn_whole(turn: TurnView, view: ConversationView) -> list[Text]:
    """One turn entire: the user's messages, the reference calls, what differs at its end
    (model against reference, character by character) and its rule hits explained."""
    lines = [Text(f"turn {turn.index}: {turn.status}", style="bold")]
    for text in turn.user:
        lines += [Text("user", style="bold cyan"), _value("", text)]
    lines.append(Text("reference calls", style="bold"))
    for r in turn.reference:
        lines.append(_value("", f"{r.text} → {r.result}"))
    if not turn.reference:
        lines.append(Text("  (none)", style="dim italic"))
    differences = turn.end_differences()
    if differences:
        lines.append(Text("at the end of the turn, what bfcl's state check compares differs:",
                          style="bold magenta"))

    def difference(c: Change) -> list[Text]:
        path = visible(short_path(c.path))
        if c.kind == "changed":
            return pair(path, whole(c.after), whole(c.before))
        if c.kind == "added":
            return pair(path + " (only the model has it)", whole(c.after), None)
        return pair(path + " (only the reference has it)", None, whole(c.before))

    lines += _bounded(differences, difference)
    if turn.blame is not None and turn.blame.missing:
        lines.append(Text("missing (reference calls the model did not make)", style="bold"))
        lines += [_value("", m) for m in turn.blame.missing]
    counts = turn_hit_counts(turn)
    rules = shown_rules(counts, confirm=view.confirm, tallies=True)
    if rules:
        lines += [Text("rule hits", style="bold"),
                  legend(rules, counts=counts, safe=safe_rule(view))]
    for a in turn.answers:
        lines += [Text(f"scripted user after step {a.get('step')}", style="bold cyan"),
                  _value("", f"{a.get('answer')} — {a.get('message', '')}")]
    return lines


def line_whole(view: ConversationView, line: int) -> tuple[str, list[Text]]:
    """The title and the lines of the whole view of one stepper line."""
    ln = view.lines[line]
    if ln.call is not None:
        return f"{view.id} · call", call_whole(view.calls[ln.call], confirm=view.confirm,
                                                safe=safe_rule(view))
    if ln.kind == "turn":
        return f"{view.id} · turn {ln.turn}", turn_whole(view.turns[ln.turn], view)
    return f"{view.id} · turn {ln.turn}", [Text(ln.kind, style="bold"), _value("", ln.text)]


def row_whole(columns: Sequence[str], cells: Sequence[Any]) -> list[Text]:
    """A table row entire, one ``column: value`` per line."""
    out = []
    for c, v in zip(columns, cells, strict=False):
        value = v if isinstance(v, Text) else Text(bounded(str(v))[0])
        out.append(Text(f"{visible(c)}: ", style="bold") + value)
    return out
