"""What every ``careful`` command shares: exit codes, consoles, and literal display of untrusted text.

Exit codes (documented in the README):

* 0 — done, nothing to report
* 1 — done, with problems (bad items reported as ``file:line [id]: reason``; the rest was done)
* 2 — nothing usable, or bad arguments
* 3 — internal error (a short message and the path of a log holding the traceback)
* 4 — a gate failed (``--fail-on-regression``, ``--fail-under``): the inputs were fine, the result is not
"""

from __future__ import annotations

from rich.console import Console

from ..safe_text import literal, visible

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_UNUSABLE = 2
EXIT_INTERNAL = 3
EXIT_GATE = 4

console = Console()
err = Console(stderr=True, soft_wrap=True, highlight=False)

__all__ = [
    "EXIT_GATE", "EXIT_INTERNAL", "EXIT_OK", "EXIT_PROBLEMS", "EXIT_UNUSABLE",
    "console", "err", "literal", "visible",
]
