"""The three consequence signals of §4, computed from one call's state diff.

* ``entries-removed``: an entry of public state disappeared: a dict key was removed anywhere
  (a file or directory of the tree, a booking, a user...) or a list got shorter (a message of
  the inbox, a watch-list symbol, a followed user...).
* ``balance-changed``: a number changed at a path whose last key mentions ``balance``
  (``TravelAPI.credit_card_list[*].balance``, ``TradingBot.account_info.balance``).
* ``third-party``: an entry was added where someone other than the acting user sees it: a
  message in ``MessageAPI.inbox`` addressed to a user other than the current user, or a
  tweet, a comment or a retweet in ``TwitterAPI`` (public: on followers' timelines and in the
  author's thread), including a name added to a tweet's mentions.

The signals propose candidates for the destructive boundary; they decide nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from careful_engine.core.state import Change

ENTRIES_REMOVED = "entries-removed"
BALANCE_CHANGED = "balance-changed"
THIRD_PARTY = "third-party"
SIGNALS = (ENTRIES_REMOVED, BALANCE_CHANGED, THIRD_PARTY)

# Collections where an added entry reaches other people (class, attribute) -> what it is.
THIRD_PARTY_COLLECTIONS: dict[tuple[str, str], str] = {
    ("MessageAPI", "inbox"): "a message addressed to another user",
    ("TwitterAPI", "tweets"): "a public tweet, or a name added to a tweet's mentions",
    ("TwitterAPI", "comments"): "a comment in a tweet's thread",
    ("TwitterAPI", "retweets"): "a retweet, shown to the poster's followers",
}


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _key(x: Any) -> str:
    try:
        return json.dumps(x, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return repr(x)


def _added_items(before: list, after: list) -> list:
    """Items of ``after`` beyond those of ``before`` (as multisets)."""
    left = Counter(_key(x) for x in before)
    out = []
    for item in after:
        k = _key(item)
        if left[k]:
            left[k] -= 1
        else:
            out.append(item)
    return out


def _entries_removed(c: Change) -> bool:
    if c.hidden:
        return False
    if c.kind == "removed":
        return True
    return (c.kind == "changed" and isinstance(c.before, list) and isinstance(c.after, list)
            and len(c.after) < len(c.before))


def _balance_changed(c: Change) -> bool:
    last = c.path[-1] if c.path else ""
    return (c.kind == "changed" and isinstance(last, str) and "balance" in last.lower()
            and _number(c.before) and _number(c.after) and c.before != c.after)


def _third_party(c: Change, current_user: Any) -> bool:
    if len(c.path) < 2 or (c.path[0], c.path[1]) not in THIRD_PARTY_COLLECTIONS:
        return False
    grew = (c.kind == "changed" and isinstance(c.before, list) and isinstance(c.after, list)
            and len(c.after) > len(c.before))
    if c.path[0] == "MessageAPI":
        if not grew:
            return False
        for item in _added_items(c.before, c.after):
            receivers = list(item) if isinstance(item, dict) else []
            if any(r != current_user for r in receivers):
                return True
        return False
    return c.kind == "added" or grew


def detect(changes: Iterable[Change], state_after: Mapping[str, Any]) -> set[str]:
    """The signals one successful call's changes raise (``state_after``: class -> snapshot)."""
    changes = list(changes)
    found: set[str] = set()
    current_user = None
    if any(c.path[:1] == ("MessageAPI",) for c in changes) and "MessageAPI" in state_after:
        current_user = state_after["MessageAPI"].get("current_user")
    for c in changes:
        if _entries_removed(c):
            found.add(ENTRIES_REMOVED)
        if _balance_changed(c):
            found.add(BALANCE_CHANGED)
        if _third_party(c, current_user):
            found.add(THIRD_PARTY)
    return found
