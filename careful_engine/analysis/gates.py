"""Gates for CI: floors on a run's scores and regressions between two paired runs.

Data only (no printing): the CLI parses options with :func:`parse_floor` and
:func:`parse_increase` (``ValueError`` with a one-line reason on bad input) and evaluates them
with :func:`check_floors`, :func:`check_regressions` and :func:`check_increases`; each gives one
:class:`Condition` per thing checked, with the numbers and a one-line message.

* Floor (``careful score --fail-under [CATEGORY:]SCORE=PERCENT``): fails when the score is
  below the floor; a score equal to the floor passes (compared exactly, as fractions). Without a
  category the score is the four-category mean as bfcl computes it and the tables print it (an
  absent category counts as 0). A floor on a category the run lacks fails.
* Regression (``careful compare --fail-on-regression``): per paired category and overall,
  fails when the exact two-sided McNemar p <= alpha and the candidate lost more conversations
  than it gained. A category the baseline has and the candidate lacks fails as well.
* Increase (``careful compare --max-increase [CATEGORY:]RULE=N``): fails when the candidate's
  count of RULE (summed over the categories both runs have, or in one) exceeds the baseline's
  by more than N; the message names those categories (``overall (3 shared categories: ...)``),
  as the result document's ``runs[].shared`` does. Counts are paired by conversation id, as
  the regressions pair verdicts: over the conversations both runs replayed, a conversation one
  run did not replay (an inference error, ...) left out of both sides; the message says how
  many were compared and left out, and the condition fails as not comparable only where none
  is left. ``asked`` and ``asked_destructive`` count turns without a call whose text asks: a
  conversation where either run left such a turn without text (unread) is left out of both
  too; where no turn of a run could be read, they fail as not measurable.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from careful_engine.analysis.leaderboard import KINDS, Comparison
from careful_engine.core import bfcl
from careful_engine.core.figures import percent_text
from careful_engine.core.safe_text import clip
from careful_engine.scoring.rules import (
    ASKING,
    RULES,
    applies,
    asked_readable,
    coverage,
    measurable,
)
from careful_engine.scoring.score import ModelScore
from careful_engine.scoring.stats import Paired

SCORES = tuple(KINDS)  # bfcl, safe, strict
OVERALL = "overall"  # the scope of a condition on no single category
MEAN = "mean"


def parse_category(name: str) -> str:
    """A category by its short (``base``) or full (``multi_turn_base``) name."""
    full = bfcl.category_named(name)
    if full is None:
        raise ValueError(f"unknown category {_shown(name.strip())}; choose one of "
                         f"{bfcl.CATEGORY_NAMES_HELP}")
    return full


def _split(text: str, what: str) -> tuple[str | None, str, str]:
    """``[CATEGORY:]NAME=VALUE`` -> (category or None, name, value)."""
    head, eq, value = text.partition("=")
    if not eq or not head.strip() or not value.strip():
        raise ValueError(f"{_shown(text)}: expected [CATEGORY:]{what}=VALUE")
    cat, colon, name = head.rpartition(":")
    return (cat.strip() if colon else None), name.strip(), value.strip()


@dataclass(frozen=True)
class Floor:
    """``--fail-under [CATEGORY:]SCORE=PERCENT``; category None = the four-category mean."""

    score: str
    category: str | None
    percent: Fraction
    text: str


# a floor's value: ASCII digits (not '５', not '1_0', which Python's number parsers take), with
# a decimal part, an exponent or a denominator (37.5, .5, 75e-1, 1/3); the digits are limited
# after the match (Fraction("1e-99999999") would take forever)
NUMBER = re.compile(r"([-+]?)(\d*)(?:\.(\d*))?(?:[eE]([-+]?)(\d+))?(?:/(\d+))?", re.ASCII)
DIGITS, EXPONENT_DIGITS = 20, 2
FORMS = "a percentage such as 37.5, 75e-1 or 1/3"
WHOLE = re.compile(r"[-+]?\d+", re.ASCII)


def _shown(text: str) -> str:
    """``text`` quoted for an error line, clipped (a value of a million digits)."""
    return clip(repr(text))


def _percent(value: str) -> Fraction:
    """A floor's value, exactly; ``ValueError`` says why it is refused."""
    m = NUMBER.fullmatch(value)
    if not m or not (m[2] or m[3]):
        raise ValueError(f"is not a number; write {FORMS}")
    sign, whole, decimals, exp_sign, exp, denominator = m.groups()
    if max(len(whole.lstrip("0")), len(decimals or ""), len((denominator or "").lstrip("0"))) \
            > DIGITS:
        raise ValueError(f"has too many digits (at most {DIGITS} before the point, {DIGITS} "
                         f"after it and {DIGITS} in a denominator)")
    if exp and len(exp.lstrip("0")) > EXPONENT_DIGITS:
        if exp_sign != "-" and (whole + (decimals or "")).strip("0"):
            raise ValueError("must be between 0 and 100")  # >= 10**100 / 10**20 (or < 0)
        raise ValueError(f"has too many digits in its exponent (at most {EXPONENT_DIGITS}: "
                         "75e-1)")
    if denominator is not None and (decimals is not None or exp is not None):
        raise ValueError(f"is not a number; write {FORMS} (a fraction of whole numbers)")
    if denominator is not None and not denominator.strip("0"):
        raise ValueError("divides by 0")
    return Fraction(value)


def parse_floor(text: str, *, effects: bool = True) -> Floor:
    cat, score, value = _split(text, "SCORE")
    if score not in SCORES:
        raise ValueError(f"{_shown(text)}: unknown score {_shown(score)}; choose one of "
                         f"{', '.join(SCORES)}")
    if score != "bfcl" and not effects:
        raise ValueError(f"{_shown(text)}: the {score} score needs the effect rules (drop "
                         "--no-effects)")
    category = None if cat in (None, MEAN) else parse_category(cat)
    try:
        percent = _percent(value)
    except ValueError as e:
        raise ValueError(f"{_shown(text)}: {_shown(value)} {e}") from None
    if not 0 <= percent <= 100:
        raise ValueError(f"{_shown(text)}: {_shown(value)} must be between 0 and 100")
    return Floor(score, category, percent, text)


@dataclass(frozen=True)
class Increase:
    """``--max-increase [CATEGORY:]RULE=N``; category None = summed over the shared categories."""

    rule: str
    category: str | None
    limit: int
    text: str


def parse_increase(text: str) -> Increase:
    cat, rule, value = _split(text, "RULE")
    if rule not in RULES:
        raise ValueError(f"{_shown(text)}: unknown rule {_shown(rule)}; choose one of "
                         f"{', '.join(RULES)}")
    category = None if cat in (None, OVERALL) else parse_category(cat)
    if not WHOLE.fullmatch(value):
        raise ValueError(f"{_shown(text)}: {_shown(value)} is not a whole number")
    if value.startswith("-") and value.lstrip("-0"):
        raise ValueError(f"{_shown(text)}: the allowed increase must be >= 0")
    if len(value.lstrip("+-0")) > 18:
        raise ValueError(f"{_shown(text)}: {_shown(value)} is too large an increase")
    limit = int(value)
    return Increase(rule, category, limit, text)


@dataclass
class Condition:
    """One thing a gate checked: what, where, the numbers, and whether it held."""

    kind: str  # floor | regression | coverage | increase
    scope: str  # a short category name, "mean" or "overall"
    passed: bool
    message: str  # one line with the numbers
    score: str | None = None
    rule: str | None = None
    model: str | None = None
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        what = self.score or self.rule or ""
        who = f"{self.model} " if self.model else ""
        return f"{who}{self.kind} {what} {self.scope}".replace("  ", " ").strip()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "scope": self.scope, "score": self.score,
                "rule": self.rule, "model": self.model, "passed": self.passed,
                "message": self.message, "values": self.values}


@dataclass
class Gate:
    """The conditions of one command; ``evaluated`` is False when no gate option was given."""

    conditions: list[Condition] = field(default_factory=list)
    evaluated: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[Condition]:
        return [c for c in self.conditions if not c.passed]

    @property
    def passed(self) -> bool:
        return not self.failed

    def to_json(self) -> dict[str, Any]:
        return {"evaluated": self.evaluated, "passed": self.passed, "failed": len(self.failed),
                "options": self.options, "conditions": [c.to_json() for c in self.conditions]}


def _pct(x: Fraction, decimals: int = 6) -> str:
    """A percentage with as many decimals as it needs (up to ``decimals``, rounded exactly):
    85%, 85.0001%, 66.666667%."""
    scaled = round(abs(x) * 10 ** decimals)
    whole, part = divmod(scaled, 10 ** decimals)
    digits = f"{part:0{decimals}d}".rstrip("0") if decimals else ""
    return f"{'-' if x < 0 and scaled else ''}{whole}{'.' + digits if digits else ''}%"


def _pcts(value: Fraction, floor: Fraction) -> tuple[str, str]:
    """A value and its floor, each with as many decimals as it needs (6 at least, more where
    6 would show two different numbers alike: 80.0000001% < floor 80.0000001%, not 80% <
    floor 80%)."""
    decimals = 6
    while value != floor and _pct(value, decimals) == _pct(floor, decimals):
        decimals += 6  # they differ within the digits a floor can have (limited, as is n)
    return _pct(value, decimals), _pct(floor, decimals)


def _score_fraction(ms: ModelScore, score: str, category: str | None) -> Fraction | None:
    """A category's score (None if absent), or the four-category mean (absent = 0), exactly."""
    def cat(c: str) -> Fraction | None:
        cs = ms.categories.get(c)
        if cs is None:
            return None
        ok, n = ((cs.strict_passes, cs.needing) if score == "strict" else  # as strict_accuracy
                 (cs.correct if score == "bfcl" else sum(r.safe_valid for r in cs.results),
                  cs.total))
        return Fraction(100 * ok, n) if n else Fraction(0)

    if category is not None:
        return cat(category)
    return sum((cat(c) or Fraction(0) for c in bfcl.CATEGORIES), Fraction(0)) / len(
        bfcl.CATEGORIES)


def _confirmed(ms: ModelScore, category: str | None) -> bool:
    """Strict success applies: the category (or any category) ran the confirmation protocol."""
    cats = [ms.categories[category]] if category else list(ms.categories.values())
    return any(cs.confirm for cs in cats)


def check_floors(scores: list[ModelScore], floors: list[Floor]) -> list[Condition]:
    """One condition per model and floor: passes when the score is at or above the floor."""
    out = []
    several = len(scores) > 1
    for ms in scores:
        for f in floors:
            scope = MEAN if f.category is None else bfcl.short_name(f.category)
            value = _score_fraction(ms, f.score, f.category)
            who = f"{ms.model} " if several else ""
            why = ("category not in the run" if value is None else
                   "not applicable (no confirmation protocol in this run)"
                   if f.score == "strict" and not _confirmed(ms, f.category) else None)
            if why:
                typed = clip(f.text.partition("=")[2].strip())  # as typed: 80.0000001, 1/3
                out.append(Condition("floor", scope, False, f"{who}{f.score} {scope}: {why} "
                                     f"(floor {typed}%)", f.score, model=ms.model,
                                     values={"floor": float(f.percent), "value": None}))
                continue
            ok = value >= f.percent
            rel = ">=" if ok else "<"
            shown, floor = _pcts(value, f.percent)
            out.append(Condition(
                "floor", scope, ok, f"{who}{f.score} {scope} {shown} {rel} floor {floor}",
                f.score, model=ms.model,
                values={"floor": float(f.percent), "value": float(value)}))
    return out


def regression(p: Paired, alpha: float) -> bool:
    """Significantly worse: exact McNemar p <= alpha and more lost than gained."""
    return len(p.lost) > len(p.gained) and p.p <= alpha


def check_regressions(comparisons: list[Comparison], alpha: float) -> list[Condition]:
    """Per compared score: one condition per shared category and overall, plus one per
    category only the baseline has."""
    out = []
    for cmp in comparisons:
        for c in cmp.only_a:
            name = bfcl.short_name(c)
            out.append(Condition("coverage", name, False, f"{cmp.kind} {name}: in the "
                                 "baseline, not in the candidate", cmp.kind))
        for c, p in [*cmp.categories.items(), (None, cmp.overall)]:
            scope = OVERALL if c is None else bfcl.short_name(c)
            bad = regression(p, alpha)
            acc = (f"{percent_text(p.passes_a / p.n)}% -> {percent_text(p.passes_b / p.n)}%"
                   if p.n else "nothing paired")
            rel = "<=" if p.p <= alpha else ">"
            out.append(Condition(
                "regression", scope, not bad,
                f"{cmp.kind} {scope}: lost {len(p.lost)}, gained {len(p.gained)} of {p.n} paired "
                f"({acc}), McNemar p = {p.p:.3g} {rel} alpha {alpha:g}", cmp.kind,
                values={"n": p.n, "passes_a": p.passes_a, "passes_b": p.passes_b,
                        "gained": len(p.gained), "lost": len(p.lost), "p": p.p,
                        "alpha": alpha}))
    return out


def rule_counts(ms: ModelScore, categories: list[str] | None = None) -> Counter:
    """Rule counts summed over ``categories`` (default: all of the model's)."""
    out: Counter = Counter()
    for c, cs in ms.categories.items():
        if categories is None or c in categories:
            out.update(cs.rule_totals())
    return out


def shared_categories(a: ModelScore, b: ModelScore) -> list[str]:
    """The categories both runs have, in bfcl's order: what an ``overall`` increase sums."""
    return [c for c in bfcl.CATEGORIES if c in a.categories and c in b.categories]


def shared_scope(categories: list[str]) -> str:
    """``overall (3 shared categories: base, miss_func, miss_param)``: the scope of an
    overall increase, named in its message as the result document names it (``shared``)."""
    n = len(categories)
    names = ", ".join(bfcl.short_name(c) for c in categories) or "none"
    return f"{OVERALL} ({n} shared categor{'y' if n == 1 else 'ies'}: {names})"


def check_increases(a: ModelScore, b: ModelScore, limits: list[Increase]) -> list[Condition]:
    """One condition per limit: the candidate's count minus the baseline's, <= the limit.
    Counts are taken over the categories both runs have (or the one named), over the
    conversations there both runs replayed (:func:`paired_counts`); the message and
    ``values`` name the categories, how many conversations were compared and how many left
    out. Not comparable only where no conversation is left to compare."""
    shared = shared_categories(a, b)
    out = []
    for lim in limits:
        cats = shared if lim.category is None else [lim.category]
        scope = OVERALL if lim.category is None else bfcl.short_name(lim.category)
        where = shared_scope(shared) if lim.category is None else scope
        if lim.category is not None and lim.category not in shared:
            out.append(Condition("increase", scope, False, f"{lim.rule} {scope}: category not "
                                 "in both runs", rule=lim.rule,
                                 values={"limit": lim.limit, "categories": []}))
            continue
        if not applies(lim.rule, all(_confirmed(ms, c) for ms in (a, b) for c in cats)):
            out.append(Condition("increase", scope, False, f"{lim.rule} {where}: not "
                                 "applicable (a run without the confirmation protocol)",
                                 rule=lim.rule, values={"limit": lim.limit,
                                                        "categories": _names(cats)}))
            continue
        ta, tb = rule_counts(a, cats), rule_counts(b, cats)
        if not (measurable(ta) and measurable(tb)):
            out.append(Condition("increase", scope, False, f"{lim.rule} {where}: not "
                                 "measurable (a run with no conversation replayed: inference "
                                 "errors, missing or unscorable entries)",
                                 rule=lim.rule, values={"limit": lim.limit,
                                                        "categories": _names(cats)}))
            continue
        if not (asked_readable(ta) and asked_readable(tb)) and lim.rule in ASKING:
            out.append(Condition("increase", scope, False, f"{lim.rule} {where}: not "
                                 "measurable (a run whose turns without a call carry no text)",
                                 rule=lim.rule, values={"limit": lim.limit,
                                                        "categories": _names(cats)}))
            continue
        asking = lim.rule in ASKING
        pair = paired_counts(a, b, cats, lim.rule, asking=asking)
        (ra, na), (rb, nb) = coverage(ta), coverage(tb)
        values = {"limit": lim.limit, "categories": _names(cats), "compared": pair.compared,
                  "left_out": pair.left_out, "replayed": [ra, rb], "conversations": [na, nb]}
        if asking:
            values["left_out_unread"] = pair.unread
        if not pair.compared:  # nothing both runs replayed (and read) to compare
            out.append(Condition("increase", scope, False, f"{lim.rule} {where}: not "
                                 f"comparable (no conversation {pair.over(asking)})",
                                 rule=lim.rule, values=values))
            continue
        ca, cb = pair.baseline, pair.candidate
        n = pair.compared
        out.append(Condition(
            "increase", scope, cb - ca <= lim.limit, f"{lim.rule} {where}: {ca} -> {cb} "
            f"({cb - ca:+d}) over the {n} conversation{'s' * (n != 1)} {pair.over(asking)}, "
            f"allowed +{lim.limit}", rule=lim.rule,
            values={"baseline": ca, "candidate": cb, "increase": cb - ca, **values}))
    return out


@dataclass(frozen=True)
class PairedCounts:
    """A rule's counts over the conversations both runs replayed, paired by id: ``compared``
    conversations; ``left_out`` the others of either run (``unread`` of them: replayed by
    both, left out for a turn without a call with no text, for ``asked``)."""

    baseline: int
    candidate: int
    compared: int
    left_out: int
    unread: int = 0

    def over(self, asking: bool) -> str:
        """What the counts are over, for a message: ``both runs replayed (11 left out)``."""
        read = ", every turn without a call read" if asking else ""
        why = (f": {self.left_out - self.unread} not replayed by both, {self.unread} with "
               "such a turn unread" if self.unread else "")
        return f"both runs replayed{read} ({self.left_out} left out{why})"


def paired_counts(a: ModelScore, b: ModelScore, categories: list[str], rule: str, *,
                  asking: bool = False) -> PairedCounts:
    """``rule``'s counts in ``categories`` over the conversations both runs replayed, paired
    by id as the score regressions pair them: a conversation one run did not replay (an
    inference error, a missing or unscorable entry, a replay the budget stopped) or lacks is
    left out of both sides. ``asking`` (``asked``, ``asked_destructive``: read from the text of
    turns without a call) also leaves out a conversation where either run left such a turn
    without text: a blank turn may hide the question counted."""
    ca = cb = compared = left = unread = 0
    for c in categories:
        ra = {r.id: r.rules for r in reversed(a.categories[c].results)}  # the first of an id
        rb = {r.id: r.rules for r in reversed(b.categories[c].results)}
        for i in ra | rb:
            x, y = ra.get(i), rb.get(i)
            if x is None or y is None:
                left += 1
            elif asking and (x.no_call_unread or y.no_call_unread):
                left, unread = left + 1, unread + 1
            else:
                ca, cb, compared = ca + x.counts.get(rule, 0), cb + y.counts.get(rule, 0), \
                    compared + 1
    return PairedCounts(ca, cb, compared, left, unread)


def _names(categories: list[str]) -> list[str]:
    return [bfcl.short_name(c) for c in categories]
