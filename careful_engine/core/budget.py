"""Bounded work per conversation: the budget, the guards on call arguments, the meter.

A replayed conversation may be hostile: bfcl's simulators do whatever the arguments ask,
so ``power(base=9, exponent=999999999)`` computes a three-billion-bit integer and
``logarithm(..., precision=10**8)`` asks mpmath for a hundred million digits, and calls that
are cheap one at a time (``cp`` of a directory, which shares its children) can build a tree
whose unfolded size doubles with every call. The engine therefore gives each conversation a
:class:`Budget`:

* **time** (``seconds``): CPU time of the thread replaying the conversation, checked before
  every few calls (CPU time, not wall-clock: a busy machine does not change a verdict);
* **memory** (``megabytes``): growth of the process's resident memory since the replay
  started, checked every few calls;
* **state size**: the file system's tree, unfolded as bfcl's comparisons and walks see it, may
  hold at most ``max_tree_entries`` entries and be at most ``max_tree_depth`` deep (a tree
  that contains itself is unbounded);
* **argument guards** (:func:`guard`), checked before a call runs: whole-number powers whose
  result would exceed ``max_result_bits`` bits (and ``round_number`` to so many places left of
  the point), and precisions (``square_root``, ``logarithm``) of more than ``max_precision``
  digits. The guards follow the cost model of
  the simulator code (bfcl-eval 2026.3.23), not particular inputs; calls bfcl answers with an
  error at once (a float precision for ``square_root``) are left to run.

When any of them is exceeded the conversation stops (nothing more of it runs) and gets the
verdict ``careful:budget_exceeded``, with the reason as its message (a verdict bfcl had
already reached stands); it has no rule counts and no blame (not replayed in full; its
``conversations.jsonl`` line has them null) and is reported as an input problem; the rest of the file is scored as usual. Defaults are in :data:`DEFAULT_BUDGET`; ``careful score
--max-seconds-per-conversation / --max-mb-per-conversation`` override the first two.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from careful_engine.core.json_values import finite_number

BUDGET_EXCEEDED = "careful:budget_exceeded"


@dataclass(frozen=True)
class Budget:
    """Limits on the work of replaying one conversation (both sides)."""

    seconds: float = 30.0
    megabytes: float = 1024.0
    max_tree_entries: int = 100_000
    max_tree_depth: int = 1_000
    max_result_bits: int = 1_000_000
    max_precision: int = 10_000

    def __post_init__(self) -> None:
        for name in ("seconds", "megabytes"):
            value = getattr(self, name)
            if not ((finite_number(value) or 0) > 0):
                raise ValueError(f"budget {name} must be a finite positive number, not {value!r}")


DEFAULT_BUDGET = Budget()


class BudgetExceeded(Exception):
    """Raised inside a replay when a conversation exceeds its budget; ``str`` is the reason."""


_STATM: list[int] = []  # an open descriptor of /proc/self/statm (read with pread)


def _rss_bytes() -> int | None:
    """The process's resident memory now (Linux), or None where it cannot be read."""
    try:
        if not _STATM:
            _STATM.append(os.open("/proc/self/statm", os.O_RDONLY))
        return int(os.pread(_STATM[0], 128, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _forget_statm() -> None:
    """In a forked child: the inherited descriptor reads the parent's /proc/<pid>/statm, so
    it is closed and the child opens its own (a worker's memory budget measured the parent)."""
    while _STATM:
        try:
            os.close(_STATM.pop())
        except OSError:
            pass


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_statm)

try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux
    _PAGE = 4096


class Meter:
    """Time and memory spent by one conversation's replay, checked between calls."""

    __slots__ = ("budget", "_deadline", "_rss0", "_calls", "calls", "_wall")
    EVERY = 4  # calls between two looks at the clock (a call's own work is bounded)
    MEMORY_EVERY = 32  # and at the resident memory

    def __init__(self, budget: Budget | None = None) -> None:
        self.budget = budget or DEFAULT_BUDGET
        # a thread's CPU time grows no faster than the wall clock (read first): until half
        # the budget has passed on it (a cheap clock), the CPU clock (a system call) cannot
        # be past the deadline and is not read
        self._wall = time.perf_counter() + self.budget.seconds / 2
        self._deadline = time.thread_time() + self.budget.seconds
        self._rss0 = _rss_bytes()
        self._calls = 0
        self.calls = 0  # counted by the caller; :meth:`check` runs every EVERY calls

    def tick(self) -> None:
        """Count one call; check the budget every :attr:`EVERY` calls."""
        self.calls += 1
        if self.calls % self.EVERY == 0:
            self.check()

    def check(self) -> None:
        """Raise :class:`BudgetExceeded` when the time or memory budget is spent."""
        if time.perf_counter() > self._wall and time.thread_time() > self._deadline:
            raise BudgetExceeded(
                f"replay took more than {self.budget.seconds:g} s of CPU time (time budget per "
                "conversation)")
        self._calls += self.EVERY
        if self._calls % self.MEMORY_EVERY == 0 and self._rss0 is not None:
            now = _rss_bytes()
            if now is not None and now - self._rss0 > self.budget.megabytes * 2**20:
                raise BudgetExceeded(
                    f"replay grew memory by {(now - self._rss0) / 2**20:.0f} MB, more than "
                    f"{self.budget.megabytes:g} MB (memory budget per conversation)")


def _is_int(x: Any) -> bool:
    return type(x) is int or type(x) is bool


def _number(x: Any) -> bool:
    return type(x) in (int, float, bool)


def _bound(args: tuple, kwargs: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """Arguments by parameter name (positional ones in declaration order)."""
    out = dict(zip(names, args, strict=False))
    out.update((k, v) for k, v in kwargs.items() if k in names)
    return out


def _power(a: dict[str, Any], b: Budget) -> str | None:
    base, exponent = a.get("base"), a.get("exponent")
    # int ** int is exact: the result has about exponent * bits(base) bits (floats overflow fast)
    if _is_int(base) and _is_int(exponent) and exponent > 0 and abs(base) > 1:
        bits = exponent * math.log2(abs(int(base)))
        if bits > b.max_result_bits:
            return (f"power({base!r:.40}, {exponent!r:.40}) would compute an integer of about "
                    f"{bits:.3g} bits (limit {b.max_result_bits:,})")
    return None


def _round(a: dict[str, Any], b: Budget) -> str | None:
    number, places = a.get("number"), a.get("decimal_places", 0)
    # round(int, -n) computes 10**n (one C call, no check between): an n-digit integer
    if _is_int(number) and _is_int(places) and places < 0:
        bits = -places * math.log2(10)
        if bits > b.max_result_bits:
            return (f"round_number(..., decimal_places={places!r:.40}) would compute an integer "
                    f"of about {bits:.3g} bits (limit {b.max_result_bits:,})")
    return None


def _digits(p: Any, int_only: bool) -> Any:
    """The precision a simulator will take ``p`` as, or None where it refuses ``p`` at once:
    decimal's context takes ints only; mpmath's ``dps`` setter calls ``int()`` on what it is
    given, so a string of digits counts as its number."""
    if int_only:
        return p if _is_int(p) else None
    if _number(p):
        return p
    if type(p) is str:
        try:
            return int(p)  # as mpmath converts it (the int-from-string length limit applies)
        except ValueError:
            return None
    return None


def _precision(int_only: bool):
    def check(a: dict[str, Any], b: Budget) -> str | None:
        p = _digits(a.get("precision"), int_only)
        if p is not None and p > b.max_precision:
            return (f"a precision of {p!r:.40} digits (limit {b.max_precision:,}) would take "
                    "unbounded time")
        return None

    return check


# function -> (parameter names in order, check). Cost model of bfcl-eval 2026.3.23 math_api.py:
# power is ``base**exponent``; square_root sets decimal's context precision (an int) and takes
# Decimal.sqrt; logarithm sets mpmath.mp.dps (any number, or a string int() reads) and takes
# mpmath.log; round_number rounds an int to -n places by computing 10**n. Other simulator
# functions do work bounded by their arguments' size (itself bounded by the call length) or by
# the state (bounded by the tree limits).
_GUARDS = {
    "power": (("base", "exponent"), _power),
    "square_root": (("number", "precision"), _precision(int_only=True)),
    "logarithm": (("value", "base", "precision"), _precision(int_only=False)),
    "round_number": (("number", "decimal_places"), _round),
}


GUARDED = frozenset(_GUARDS)


def guard(name: str, args: tuple, kwargs: Mapping[str, Any], budget: Budget) -> str | None:
    """Why a call must not run (its arguments ask for unbounded work), or None."""
    entry = _GUARDS.get(name)
    if entry is None:
        return None
    names, check = entry
    return check(_bound(args, kwargs, names), budget)
