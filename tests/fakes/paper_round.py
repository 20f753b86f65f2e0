"""The paper's annotation round (§4), rebuilt: four label sets and stand-in declarations.

The label sets are the released reconstruction, ``annotations/paper/A1.json`` ... ``A4.json``
(:mod:`careful_engine.annotation.paper_labels` writes them and states the source of every label):
every annotator says yes to the 13 functions of the final boundary nobody disputed; echo and
create_ticket split A2, A3 yes against A1, A4 no, rmdir A1, A4 yes against A2, A3 no;
cancel_order A1, A3, A4 yes with A2 dissenting; contact_customer_support A4 alone; and A4 alone
on mv, unfollow_user, remove_stock_from_watchlist, pressBrakePedal, releaseBrakePedal and
activateParkingBrake.

The round here runs on stand-in declarations with the paper's counts: the 23 boundary
functions that change state (all but contact_customer_support, which the simulator implements
without a state change) plus 26 further writes matching Table 2's per-class counts, cd among
them. Every annotator labels those 26 "no", so which ones they are does not affect any
statistic. The signals' proposal is the paper's three signals.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from careful_engine.annotation import paper_labels
from careful_engine.core import bfcl
from careful_engine.effects import boundary

ANNOTATORS = tuple(paper_labels.ANNOTATORS)


@cache
def _release() -> dict[str, dict[str, tuple[bool, str]]]:
    """annotator -> function -> (destructive, reason), from annotations/paper/."""
    out = {}
    for a in ANNOTATORS:
        doc = json.loads((paper_labels.release_dir() / f"{a}.json").read_text("utf-8"))
        out[a] = {x["function"]: (x["destructive"], x["reason"]) for x in doc["labels"]}
    return out


def _disputed() -> dict[str, tuple[str, ...]]:
    sets = _release()
    out = {}
    for name in bfcl.function_class():
        yes = tuple(a for a in ANNOTATORS if sets[a][name][0])
        if yes and len(yes) < len(ANNOTATORS):
            out[name] = yes
    return out


DISPUTED = _disputed()
# Writes outside the boundary (stand-ins matching Table 2: FS 3 + cd, Message 2, Twitter 2,
# Ticket 5, Trading 3, Travel 3, Vehicle 7).
OTHER_WRITES = (
    "cd", "cp", "mkdir", "touch",
    "add_contact", "message_login",
    "authenticate_twitter", "follow_user",
    "close_ticket", "edit_ticket", "logout", "resolve_ticket", "ticket_login",
    "add_to_watchlist", "trading_login", "trading_logout",
    "authenticate_travel", "register_credit_card", "set_budget_limit",
    "adjustClimateControl", "fillFuelTank", "lockDoors", "setCruiseControl", "setHeadlights",
    "set_navigation", "startEngine",
)
READ_IN_BOUNDARY = ("contact_customer_support",)
SIGNALS = {
    "entries-removed": ("rm", "rmdir", "mv", "delete_message", "remove_stock_from_watchlist",
                        "cancel_booking"),
    "balance-changed": ("fund_account", "withdraw_funds", "book_flight", "purchase_insurance",
                        "cancel_booking"),
    "third-party": ("send_message", "post_tweet", "comment", "mention", "retweet"),
}


def final_boundary() -> dict[str, str]:
    return dict(boundary.load("paper-final").destructive)


def reason(annotator: str, function: str) -> str:
    """The reason ``annotator`` gave for ``function`` in the released label set."""
    return _release()[annotator][function][1]


def writes() -> list[str]:
    final = final_boundary()
    return sorted({*final, *OTHER_WRITES} - set(READ_IN_BOUNDARY))


def signals_of(name: str) -> list[str]:
    return [s for s, names in SIGNALS.items() if name in names]


def declarations() -> dict:
    w = set(writes())
    return {
        "functions": {
            name: {
                "kind": "write" if name in w else "read",
                "proposed": bool(signals_of(name)),
                "signals": signals_of(name),
            }
            for name in bfcl.function_class()
        }
    }


def write_declarations(path: Path) -> Path:
    path.write_text(json.dumps(declarations(), indent=2) + "\n")
    return path


def label_sets() -> dict[str, dict[str, tuple[bool, str]]]:
    """annotator -> function -> (destructive, reason) on all 128 functions (the release)."""
    return {a: dict(labels) for a, labels in _release().items()}


def build(store, tmp: Path, round_name: str = "paper", submit: bool = True):
    """Create the paper's round in ``store`` and enter the four label sets (submitted)."""
    from careful_engine.annotation.signals import load_inputs

    inputs = load_inputs(write_declarations(tmp / "effects.json"))
    for a in ANNOTATORS:
        store.add_annotator(a, "llm" if a in ("A2", "A3") else "human",
                            {"A2": "claude-opus-5-5", "A3": "claude-fable-5-1"}.get(a))
    store.new_round(round_name, inputs, ANNOTATORS)
    for a, labels in label_sets().items():
        session = store.annotator_session(round_name, a)
        for name, (destructive, reason) in labels.items():
            session.label(name, destructive, reason)
        if submit:
            session.submit()
    return inputs
