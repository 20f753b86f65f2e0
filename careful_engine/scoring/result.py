"""One scored conversation (:class:`ConversationResult`) and its JSON line in
``conversations.jsonl``, written and read here only.

``careful score`` writes the lines (:func:`write_conversations`); the workbench reads them
back into results (:meth:`ConversationResult.from_json`) to rank runs without replaying
them. A line is data from a file: :meth:`~ConversationResult.from_json` checks every field
it reads and raises :class:`ValueError` with the reason for a line of another shape.

Every line scored under the effect rules has the same keys: one with nothing replayed, or not
in full (an inference error, a replay the budget stopped, a missing or unscorable entry), has
null where nothing was measured (its rules, hits, steps, surplus and tokens).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from careful_engine.core.budget import BUDGET_EXCEEDED
from careful_engine.core.checker import INFERENCE_ERROR
from careful_engine.core.replay import ConversationTrace
from careful_engine.core.safe_write import writer
from careful_engine.core.trajectory import Outcome, Verdict
from careful_engine.scoring.blame import Blame
from careful_engine.scoring.rules import (
    ASKING,
    CONFIRM_ONLY,
    RULES,
    ConversationRules,
    Hit,
    SafeRule,
    safe_valid,
    strict_valid,
)

SCORES_NAME = "conversations.jsonl"  # one line per conversation, written by `careful score`
# the outcomes with no rule counts: nothing replayed, or not in full (a line of an earlier
# version gave them zeros, or the counts of the part replayed)
NOT_REPLAYED_TYPES = (INFERENCE_ERROR, BUDGET_EXCEEDED)
# the keys a line has of its rules (ConversationRules.to_json): every line under the rules has
# them all, null in a line with nothing replayed
RULE_KEYS = tuple(ConversationRules(Counter(), [], []).to_json())

# What an analysis reads of a replayed conversation where it was replayed (a worker, perhaps):
# ``digest(trace, result, result_file, entry)``, kept as ``ConversationResult.digest`` (plain
# data that pickles small, so that neither the trace nor the file's entries need be kept or
# sent back)
Digest = Callable[[ConversationTrace, "ConversationResult", Any, dict], Any]


@dataclass
class ConversationResult:
    """A conversation scored: bfcl's verdict, how its steps decoded, and (with the effect
    declarations) the rule counts and where a failed one went wrong."""

    model: str
    category: str
    id: str
    verdict: Verdict
    decode: Counter = field(default_factory=Counter)
    calls: int = 0
    failed_calls: int = 0
    trace: ConversationTrace | None = None
    rules: ConversationRules | None = None
    blame: Blame | None = None
    confirm: bool = False  # generated under the confirmation protocol
    reference_destructive: int | None = None  # destructive calls in the reference (with effects)
    digest: Any = None  # what a Digest read of the trace (score_file's ``digest``)
    # why the replay budget stopped the replay (None: it did not), also where bfcl's verdict
    # was reached before the stop and stands (the error type is then bfcl's)
    stopped: str | None = None

    @property
    def safe_valid(self) -> bool:
        return self.rules is not None and safe_valid(self.verdict.valid, self.rules)

    @property
    def strict_valid(self) -> bool | None:
        """Strict success; None (not applicable) without the confirmation protocol, where no
        destructive call can be confirmed."""
        if not self.confirm:
            return None
        return self.rules is not None and strict_valid(self.verdict.valid, self.rules)

    def without_detail(self) -> ConversationResult:
        """This result as ranking and pairing runs read it: the verdict, error type, decode
        and call counts, rule counts and the confirmation protocol, without what only the
        conversation's own view reads (the rules' hits and per-turn counts, the blame, bfcl's
        error message and details). A fifth of the size, for workers to send back."""
        v, rules = self.verdict, self.rules
        return replace(self, verdict=Verdict(v.valid, v.error_type, None, v.turn),
                       rules=rules if rules is None else replace(rules, hits=[], per_turn=[]),
                       blame=None)

    def to_json(self) -> dict[str, Any]:
        """The conversation's line in ``conversations.jsonl`` (the trace is not kept)."""
        v = self.verdict
        effect: dict[str, Any] = {}
        if self.rules is not None:
            effect = {"safe_valid": self.safe_valid, "strict_valid": self.strict_valid,
                      "safe_rule": self.rules.rule.to_json(), "confirm_protocol": self.confirm,
                      **self.rules.to_json(self.confirm),
                      "blame": self.blame.to_json() if self.blame else None}
        elif self.reference_destructive is not None:
            # under the rules, nothing replayed or not in full (an inference error, a replay
            # the budget stopped, a missing or unscorable entry): the keys of a replayed
            # line, null where nothing was measured (no counts, not zeros; no safe rule
            # applied: the run's is in scored_with); it fails, as bfcl counts it
            effect = {"safe_valid": self.safe_valid, "strict_valid": self.strict_valid,
                      "safe_rule": None, "confirm_protocol": self.confirm,
                      **dict.fromkeys(RULE_KEYS),
                      "reference_destructive_calls": self.reference_destructive,
                      "blame": self.blame.to_json() if self.blame else None}
        return {
            "model": self.model,
            "category": self.category,
            "id": self.id,
            "official_valid": v.valid,
            "official_error_type": v.error_type,
            "official_error_message": v.error_message,
            "official_failed_turn": v.turn,
            "steps": {o.value: self.decode.get(o, 0) for o in Outcome},
            "model_calls": self.calls,
            "model_failed_calls": self.failed_calls,
            "replay_stopped": self.stopped,
            **effect,
        }

    @classmethod
    def from_json(cls, line: Any) -> ConversationResult:
        """The result a :meth:`to_json` line holds (without its trace); raises ValueError
        naming the first field of another shape. Fields a line leaves out take their
        defaults: a line written without the effect rules has no rules, and neither has an
        inference error or a replay the budget stopped (:data:`NOT_REPLAYED_TYPES`)."""
        if not isinstance(line, dict):
            raise ValueError("not a JSON object")
        if line.get("rules") is not None and not isinstance(line["rules"], dict):
            raise ValueError("rules: not an object")
        rules = _rules(line) if isinstance(line.get("rules"), dict) \
            and line.get("official_error_type") not in NOT_REPLAYED_TYPES \
            and line.get("replay_stopped") is None else None
        blame = line.get("blame")
        return cls(
            _str(line, "model"), _str(line, "category"), _str(line, "id"),
            Verdict(_bool(line, "official_valid"), _opt_str(line, "official_error_type"),
                    _opt_str(line, "official_error_message"),
                    _opt_int(line, "official_failed_turn")),
            decode=_outcomes(line.get("steps")),
            calls=_int(line, "model_calls"), failed_calls=_int(line, "model_failed_calls"),
            rules=rules, blame=_blame(blame) if blame is not None else None,
            confirm=line.get("confirm_protocol") is True,
            reference_destructive=rules.reference_destructive if rules
            else _opt_int(line, "reference_destructive_calls"),
            stopped=_opt_str(line, "replay_stopped"))


def write_conversations(out_dir: Path, results: Iterable[ConversationResult],
                        extra: Callable[[ConversationResult], dict[str, Any]] | None = None,
                        name: str = SCORES_NAME) -> Path:
    """Write ``out_dir/name``, one :meth:`~ConversationResult.to_json` line per result plus
    the keys ``extra`` gives it (what it was scored with, dataset drift); replaced whole and
    never through a planted link (:func:`careful_engine.core.safe_write.writer`)."""
    with writer(out_dir, name) as f:
        for r in results:
            f.write(json.dumps({**r.to_json(), **(extra(r) if extra else {})}) + "\n")
    return out_dir / name


# ---------------------------------------------------------------- field checks


def _str(line: dict, key: str) -> str:
    value = line.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{key}: not a string")
    return value


def _opt_str(line: dict, key: str) -> str | None:
    value = line.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key}: not a string or null")
    return value


def _bool(line: dict, key: str) -> bool:
    value = line.get(key)
    if not isinstance(value, bool):
        raise ValueError(f"{key}: not true or false")
    return value


def _int(line: dict, key: str, default: int = 0) -> int:
    value = line.get(key, default)
    if type(value) is not int or value < 0:
        raise ValueError(f"{key}: not a count")
    return value


def _opt_int(line: dict, key: str) -> int | None:
    value = line.get(key)
    return None if value is None else _int(line, key)


def _counts(value: Any, keys: Iterable[str], what: str,
            nullable: Iterable[str] = ()) -> Counter:
    """The counts of ``keys`` in ``value``; one of ``nullable`` may be null (not applicable:
    left out)."""
    if value is None:
        return Counter()
    if not isinstance(value, dict):
        raise ValueError(f"{what}: not an object")
    return Counter({k: _int(value, k) for k in keys
                    if k in value and not (value[k] is None and k in nullable)})


def _outcomes(value: Any) -> Counter:
    counts = _counts(value, [o.value for o in Outcome], "steps")
    return Counter({Outcome(k): n for k, n in counts.items() if n})


def _names(value: Any, what: str, nullable: bool = False) -> list:
    if not isinstance(value, list) or not all(
            isinstance(x, str) or (nullable and x is None) for x in value):
        raise ValueError(f"{what}: not a list of names")
    return value


def _ints(value: Any, what: str, nullable: bool = False) -> list:
    if not isinstance(value, list) or not all(
            (type(x) is int) or (nullable and x is None) for x in value):
        raise ValueError(f"{what}: not a list of numbers")
    return value


def _hit(value: Any) -> Hit:
    if not isinstance(value, dict):
        raise ValueError("hits: not a list of objects")
    return Hit(_str(value, "rule"), _int(value, "turn"), _names(value.get("calls"), "hits"),
               _ints(value.get("steps", []), "hits"), _ints(value.get("indices", []), "hits"))


def _rules(line: dict) -> ConversationRules:
    hits = line.get("hits", [])
    if not isinstance(hits, list):
        raise ValueError("hits: not a list")
    rules = ConversationRules(
        _counts(line["rules"], RULES, "rules", nullable=CONFIRM_ONLY + ASKING),
        [_hit(h) for h in hits], [],
        surplus_steps=_int(line, "surplus_steps"), steps=_int(line, "model_steps"),
        output_tokens=_opt_int(line, "output_tokens"),
        input_tokens=_opt_int(line, "input_tokens"),
        surplus_output_tokens=_opt_int(line, "surplus_output_tokens"),
        surplus_input_tokens=_opt_int(line, "surplus_input_tokens"),
        surplus_calls=_int(line, "surplus_calls"),
        reference_destructive=_int(line, "reference_destructive_calls"),
        answers=_counts(line.get("user_answers"), ("yes", "no", "restate"), "user_answers"))
    turns = line.get("no_call_turns")  # (absent in lines of earlier versions: read)
    if turns is not None:
        if not isinstance(turns, dict):
            raise ValueError("no_call_turns: not an object")
        rules.no_call_read = _int(turns, "with_text")
        rules.no_call_unread = _int(turns, "without_text")
    unreadable = rules.no_call_unread > 0 and not rules.no_call_read
    if "asked" in line["rules"] and (line["rules"]["asked"] is None) != unreadable:
        raise ValueError("rules: asked is null where no_call_turns says it was read, or "
                         "the reverse")
    rule = line.get("safe_rule")
    if rule is not None:
        if not isinstance(rule, dict):
            raise ValueError("safe_rule: not an object")
        rules.rule = SafeRule(str(rule.get("collateral")), str(rule.get("duplicates")))
    return rules


def _blame(value: Any) -> Blame:
    if not isinstance(value, dict):
        raise ValueError("blame: not an object")
    return Blame(_int(value, "turn"), _opt_str(value, "call"), _opt_int(value, "step"),
                 _names(value.get("attributes", []), "blame"),
                 _names(value.get("missing", []), "blame"), _str(value, "reason"),
                 _names(value.get("closest", []), "blame", nullable=True),
                 _ints(value.get("closest_steps", []), "blame", nullable=True),
                 _names(value.get("missing_results", []), "blame"))
