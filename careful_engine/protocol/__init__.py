"""The confirmation-aware protocol and the effect-hints condition (paper §6).

* :mod:`.user` — the deterministic scripted user and the two stricter scripts of §7;
* :mod:`.verbs` — which destructive actions a text names (function names, verb phrases);
* :mod:`.patch` — bfcl's two multi-turn loops patched at their two exit points only;
* :mod:`.hook` — what happens at those points: answer, append as a user message, record;
* :mod:`.hints` — declarations rendered into the function docs as MCP tool annotations.
"""

from careful_engine.protocol.hints import apply_hints
from careful_engine.protocol.hook import ConfirmationProtocol, renumber_log
from careful_engine.protocol.user import (
    NO,
    RESTATE,
    SCRIPTS,
    YES,
    Decision,
    ScriptedUser,
    TurnReference,
    TurnState,
)

__all__ = [
    "NO",
    "RESTATE",
    "SCRIPTS",
    "YES",
    "ConfirmationProtocol",
    "Decision",
    "ScriptedUser",
    "TurnReference",
    "TurnState",
    "apply_hints",
    "renumber_log",
]
