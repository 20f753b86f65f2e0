"""Price table, conservative accounting and the spend guard for API runs (paper §7).

Prices are US dollars per million tokens, kept in one data file
(``careful_engine/data/prices.json``; ``--prices`` names another). A request is billed

* at list price: uncached input x input + cache writes x cache-write price + cache reads x
  cache-read price + output x output price;
* conservatively (what the guard counts): as at list price, except that cache reads are
  billed at the full input price.

Before every request, retries included, the guard reserves the request's worst case: every
prompt token (estimated from above, :func:`estimate_prompt_tokens`) at the higher of the input
and cache-write prices, plus the full output limit at the output price. If the run's spend so
far plus the reservations in flight plus this worst case would exceed the budget, the request
is not sent and the run stops (:class:`~.errors.BudgetExhausted`), resumable. A request that
fails with an HTTP error costs nothing; one whose outcome is unknown (connection lost, timeout)
is charged its worst case (a malformed answer too, or what the usage it reports costs where
that is more). Every attempt is appended to a ledger (JSON Lines, flushed and
fsynced), whose total a resumed run starts from, so the budget covers the run folder as a whole.
The guard never counts less than was spent: resuming cuts off a last line a kill left cut
short (it loses no spend: :meth:`SpendGuard.resume`), and refuses to resume over any other
line it cannot read, naming each (``file:line: reason``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from careful_engine.core.decode import MAX_TOKEN_COUNT
from careful_engine.core.json_values import (
    JSONTextError,
    finite_number,
    line_at,
    loads,
    loads_located,
)
from careful_engine.core.runs import Problem
from careful_engine.core.safe_read import MAX_SMALL_BYTES, read_regular
from careful_engine.core.safe_text import clip, visible
from careful_engine.generation import files
from careful_engine.generation.errors import BudgetExhausted, GenerationError

MTOK = 1_000_000
_SHOWN = 5  # unreadable ledger lines named in a refusal to resume
TOOL_USE_ALLOWANCE = 1024  # tokens for the API's own tool-use system prompt and framing


@dataclass(frozen=True)
class ModelPrice:
    model: str
    input: float
    output: float
    cache_write: float  # 5-minute cache writes (what BFCL's ephemeral markers create)
    cache_read: float
    cache_write_1h: float | None = None
    display: str = ""
    ids: tuple[str, ...] = ()
    fictional: bool = False

    @property
    def prompt_worst(self) -> float:
        """Highest price a prompt token can be billed at under bfcl's markers (5-minute
        ``ephemeral`` cache writes; no 1-hour writes are requested)."""
        return max(self.input, self.cache_write)


@dataclass
class Volume:
    """Token volume of a run or a request. ``input`` is uncached input."""

    requests: int = 0
    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cache_write_1h: int = 0
    output: int = 0

    @property
    def prompt(self) -> int:
        return self.input + self.cache_read + self.cache_write + self.cache_write_1h

    def add(self, other: Volume) -> None:
        for k in ("requests", "input", "cache_read", "cache_write", "cache_write_1h", "output"):
            setattr(self, k, getattr(self, k) + getattr(other, k))

    def to_json(self) -> dict[str, int]:
        return {"requests": self.requests, "prompt": self.prompt, "input": self.input,
                "cache_read": self.cache_read, "cache_write": self.cache_write,
                "cache_write_1h": self.cache_write_1h, "output": self.output}


def list_cost(v: Volume, p: ModelPrice) -> float:
    return (v.input * p.input + v.cache_write * p.cache_write
            + v.cache_write_1h * (p.cache_write_1h or p.cache_write)
            + v.cache_read * p.cache_read + v.output * p.output) / MTOK


def conservative_cost(v: Volume, p: ModelPrice) -> float:
    """List price, but cache reads billed at the full input price."""
    return (v.input * p.input + v.cache_write * p.cache_write
            + v.cache_write_1h * (p.cache_write_1h or p.cache_write)
            + v.cache_read * p.input + v.output * p.output) / MTOK


def worst_case(prompt_tokens: int, max_tokens: int, p: ModelPrice) -> float:
    return (prompt_tokens * p.prompt_worst + max_tokens * p.output) / MTOK


def usage_volume(usage: Any) -> Volume:
    """One API response's ``usage`` (object or dict) as a volume of one request."""

    def get(obj: Any, key: str) -> int:
        """A token count of the response: absent is 0; anything but a whole number from 0
        to MAX_TOKEN_COUNT raises ValueError (the guard then charges the worst case)."""
        value = obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
        if value is None:
            return 0
        if type(value) is not int or not 0 <= value <= MAX_TOKEN_COUNT:
            raise ValueError(f"usage {key} is {value!r:.40}, not a token count")
        return value

    write = get(usage, "cache_creation_input_tokens")
    detail = (usage.get("cache_creation") if isinstance(usage, dict)
              else getattr(usage, "cache_creation", None))
    write_1h = get(detail, "ephemeral_1h_input_tokens") if detail is not None else 0
    if write_1h > write:
        raise ValueError("usage: more 1-hour cache writes than cache writes")
    return Volume(
        requests=1,
        input=get(usage, "input_tokens"),
        cache_read=get(usage, "cache_read_input_tokens"),
        cache_write=write - write_1h,
        cache_write_1h=write_1h,
        output=get(usage, "output_tokens"),
    )


def _jsonable(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if not callable(dump):
        return str(obj)
    try:  # a field not of its declared type (the endpoint's doing): no warning on stderr
        return dump(warnings=False)
    except TypeError:  # a model_dump without the argument
        return dump()


def estimate_prompt_tokens(request: dict[str, Any]) -> int:
    """An upper bound on a Messages request's prompt tokens.

    One token per UTF-8 byte of the serialized system prompt, tools and messages (a token
    covers at least one byte, and the JSON framing outweighs the API's per-message framing),
    plus :data:`TOOL_USE_ALLOWANCE`. Several times the true count, which only makes the guard
    stop a little earlier than it must.
    """
    payload = {k: request.get(k) for k in ("system", "tools", "messages")}
    text = json.dumps(payload, default=_jsonable, ensure_ascii=False)
    return len(text.encode("utf-8")) + TOOL_USE_ALLOWANCE


# ---------------------------------------------------------------- price table


def default_prices_path() -> Path:
    return Path(str(resources.files("careful_engine") / "data" / "prices.json"))


@dataclass(frozen=True)
class PriceTable:
    models: tuple[ModelPrice, ...]
    document: dict[str, Any]
    source: str

    def names(self) -> list[str]:
        return [m.model for m in self.models]

    def find(self, name: str) -> ModelPrice | None:
        """By table name or id; ``-FC`` registry suffixes and ``-YYYYMMDD`` dates ignored."""
        key = name.strip()
        if key.endswith("-FC"):
            key = key[:-3]
        candidates = [key, re.sub(r"-\d{8}$", "", key)]
        for c in candidates:
            for m in self.models:
                if c == m.model or c in m.ids:
                    return m
        return None

    def get(self, name: str) -> ModelPrice:
        found = self.find(name)
        if found is None:
            raise GenerationError(f"no price for {name!r} in {self.source}; known: "
                                  f"{', '.join(self.names())}")
        return found


MAX_PRICE = 1_000_000  # dollars per million tokens: beyond any real price, far from overflow


def load_prices(path: str | Path | None = None) -> PriceTable:
    """A price table; :class:`GenerationError` naming the file, the line and the entry for
    anything the spend guard could not trust (prices must be finite and not negative: a
    negative or NaN price would let the guard count less than is spent; a model named twice
    would be priced by its first entry alone)."""
    path = Path(path) if path else default_prices_path()
    where = visible(str(path))
    try:
        text = read_regular(path, MAX_SMALL_BYTES).decode("utf-8")
        doc = loads(text)
    except OSError as e:
        raise GenerationError(f"cannot read price table {where}: {e.strerror or e}") from None
    except JSONTextError as e:  # a key given twice
        raise GenerationError(f"{where}:{e.line or 1}: not a JSON price table ({e})") from None
    except (ValueError, RecursionError) as e:  # JSON, UTF-8
        raise GenerationError(f"{where}: not a JSON price table ({str(e)[:100]})") from None
    if not isinstance(doc, dict) or doc.get("schema") != "careful.prices/1":
        schema = doc.get("schema") if isinstance(doc, dict) else None
        raise GenerationError(f"{where}: not a price table (schema "
                              f"{visible(repr(schema))[:60]})")
    entries = doc.get("models", [])
    if not isinstance(entries, list):
        raise GenerationError(f"{where}: 'models' must be a list, not {type(entries).__name__}")
    models: list[ModelPrice] = []
    named: dict[str, int] = {}  # a model's name or id -> its entry
    for k, m in enumerate(entries):
        try:
            price = _price(m)
            for name in (price.model, *price.ids):
                if name in named:
                    raise ValueError(f"{visible(repr(name))[:80]} is already priced by "
                                     f"models[{named[name]}]")
                named[name] = k
        except (KeyError, TypeError, ValueError) as e:
            try:  # (again, to find the entry's line)
                line = line_at(loads_located(text), "models", k)
            except (ValueError, RecursionError):
                line = None
            raise GenerationError(f"{where}{f':{line}' if line else ''} [models[{k}]]: "
                                  f"{visible(str(e))[:160]}") from None
        models.append(price)
    return PriceTable(tuple(models), doc, str(path))


def _price(m: Any) -> ModelPrice:
    if not isinstance(m, dict):
        raise TypeError(f"a {type(m).__name__}, not an object")

    def usd(key: str) -> float:
        value = m[key]
        if type(value) not in (int, float) or not 0 <= value <= MAX_PRICE:  # (NaN fails)
            raise ValueError(f"{key} must be a price from 0 to {MAX_PRICE:,} dollars per "
                             f"million tokens, not {value!r}")
        return float(value)

    name, display, ids = m["model"], m.get("display", m["model"]), m.get("ids", [])
    if not isinstance(name, str) or not isinstance(display, str):
        raise TypeError("model and display must be text")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise TypeError("ids must be a list of names")
    fictional = m.get("fictional", False)
    if type(fictional) is not bool:
        raise TypeError(f"fictional must be true or false, not {fictional!r:.40}")
    return ModelPrice(
        model=name, input=usd("input"), output=usd("output"),
        cache_write=usd("cache_write_5m"), cache_read=usd("cache_read"),
        cache_write_1h=usd("cache_write_1h") if m.get("cache_write_1h") else None,
        display=display, ids=tuple(ids), fictional=fictional,
    )


# ---------------------------------------------------------------- the guard


@dataclass(frozen=True)
class Ticket:
    """A reservation for one request attempt."""

    uid: str
    worst: float
    before: float  # spent + reserved when the request was checked


class SpendGuard:
    """A hard budget over every request of a run folder, retries included; thread-safe.

    The ledger gets a ``sent`` line (with the worst case) before each request goes out and a
    final line (``ok``, ``http <status>``, ``unknown: ...``) after; a request with no final
    line (the process was killed while it was in flight) is charged its worst case on resume.
    """

    def __init__(self, budget: float | None, price: ModelPrice, ledger: Path | None = None,
                 spent: float = 0.0, listed: float = 0.0) -> None:
        if budget is not None and not ((finite_number(budget) or 0) > 0):
            raise GenerationError(f"the budget must be a finite positive number of US "
                                  f"dollars, not {budget!r}")
        self.budget = budget
        self.price = price
        self.ledger = ledger
        self.spent = spent  # conservative dollars of settled requests
        self.listed = listed  # the same requests at list price
        self.reserved = 0.0
        self.stopped: str | None = None
        self._lock = threading.Lock()
        self._uids = itertools.count(1)
        self._session = f"{os.getpid()}-{time.time_ns()}"
        self.notes: list[str] = []  # what resuming repaired in the ledger
        self._tail_checked = False  # the ledger's last line is whole (drop_torn_tail)

    @classmethod
    def resume(cls, budget: float | None, price: ModelPrice, ledger: Path) -> SpendGuard:
        """Start from an existing ledger's total (in-flight requests at their worst case).

        A last line cut short (a kill while it was written) is cut off first, said in
        :attr:`notes`: that loses no spend, since a ``sent`` line is written before its
        request goes out (cut, the request was never sent) and a request whose final line is
        cut is charged its worst case. Any other line that cannot be read (not a record,
        longer than a line is read with, past what a file's records may take) may have held
        an amount, and the guard never counts less than was spent: the run is not resumed
        (:class:`GenerationError` naming each such line, ``file:line: reason``)."""
        note = files.drop_torn_tail(ledger)
        summary = ledger_summary(ledger)
        unread = [Problem(str(ledger), "not a ledger record (not JSON, or longer than a line "
                          "is read with)", n) for n in summary.skipped] + summary.problems
        if unread:
            shown = [str(p) for p in unread[:_SHOWN]]
            more = f"; and {len(unread) - _SHOWN:,} more" if len(unread) > _SHOWN else ""
            raise GenerationError(
                f"{'; '.join(shown)}{more}; the spend these lines record cannot be counted, "
                "and the budget must never count less than was spent: the run is not resumed "
                "(restore the ledger's lines, or use another --run)")
        guard = cls(budget, price, ledger, summary.spent, summary.listed)
        guard.notes = [note] if note else []
        guard._tail_checked = True  # (just cut: its first write need not read the ledger again)
        return guard

    def reserve(self, worst: float, context: dict[str, Any] | None = None) -> Ticket:
        """Reserve a request's worst case, or stop the run if it could cross the budget."""
        with self._lock:
            before = self.spent + self.reserved
            if self.stopped or (self.budget is not None and before + worst > self.budget):
                reason = self.stopped or (
                    f"the next request could cost up to ${worst:.4f}, and ${before:.4f} of the "
                    f"${self.budget:.2f} budget is spent or reserved")
                self.stopped = reason
                self._log({"status": "refused", "spent_before_usd": before,
                           "worst_usd": worst}, context)
                raise BudgetExhausted(reason)
            self.reserved += worst
            ticket = Ticket(f"{self._session}-{next(self._uids)}", worst, before)
            self._log({"status": "sent", "request": ticket.uid, "spent_before_usd": before,
                       "worst_usd": worst}, context)
            return ticket

    def _priced(self, usage: Any) -> tuple[Volume, float, float] | str:
        """A response's usage, its conservative and its list cost; or why it has none."""
        try:
            v = usage_volume(usage)
        except (TypeError, ValueError, OverflowError):  # not token counts: cost unknown
            return "unknown: unreadable usage"
        cost, listed = conservative_cost(v, self.price), list_cost(v, self.price)
        if not (math.isfinite(cost) and cost >= 0 and math.isfinite(listed) and listed >= 0):
            return "unknown: usage priced below zero"
        return v, cost, listed

    def settle(self, ticket: Ticket, usage: Any, context: dict | None = None) -> Volume:
        """A request answered: charge its actual cost (conservatively)."""
        priced = self._priced(usage)
        if isinstance(priced, str):
            self.charge_unknown(ticket, priced, context)
            return Volume(requests=1)
        v, cost, listed = priced
        self._final(ticket, "ok", cost, listed, context, usage=v.to_json())
        return v

    def release(self, ticket: Ticket, status: str, context: dict | None = None) -> None:
        """A request failed with an HTTP error: it costs nothing."""
        self._final(ticket, status, 0.0, 0.0, context)

    def charge_unknown(self, ticket: Ticket, status: str, context: dict | None = None,
                       usage: Any = None) -> None:
        """A request whose outcome is unknown (connection lost, a malformed answer): charged
        its worst case, or what the ``usage`` it reported costs where that is more."""
        priced = self._priced(usage) if usage is not None else "none"
        if isinstance(priced, str):
            self._final(ticket, status, ticket.worst, ticket.worst, context)
            return
        v, cost, listed = priced
        self._final(ticket, status, max(cost, ticket.worst), max(listed, ticket.worst),
                    context, usage=v.to_json())

    def stop(self, reason: str) -> None:
        """Refuse every further request (another part of the run decided to stop)."""
        with self._lock:
            self.stopped = self.stopped or reason

    def _final(self, ticket: Ticket, status: str, cost: float, listed: float,
               context: dict | None, **extra: Any) -> None:
        with self._lock:
            self.reserved -= ticket.worst
            self.spent += cost
            self.listed += listed
            self._log({"status": status, "request": ticket.uid, "worst_usd": ticket.worst,
                       "conservative_usd": cost, "list_usd": listed, **extra}, context)

    def _log(self, record: dict[str, Any], context: dict | None) -> None:
        if self.ledger is None:
            return

        line = json.dumps({"time": round(time.time(), 3), **(context or {}), **record})
        files.ensure_dir(self.ledger.parent, self.ledger.parent.parent.parent)
        if not self._tail_checked:  # never append onto a line a kill cut short
            if note := files.drop_torn_tail(self.ledger):
                self.notes.append(note)
            self._tail_checked = True
        with files.open_append(self.ledger) as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_ledger(ledger: Path, skipped: list[int] | None = None,
                problems: list[Problem] | None = None) -> list[dict[str, Any]]:
    """The ledger's records; a line cut by a kill is skipped (others: numbers in ``skipped``;
    lines past what a file's records may take: one problem in ``problems``)."""
    return files.read_records(ledger, skipped, problems)


MAX_REQUEST_USD = 1e6  # no one request costs a million dollars; more is no amount


def _usd(value: Any, unreadable: float = 0.0) -> float:
    """A ledger amount: none (absent: nothing was charged) counts as 0; anything else but a
    finite number from 0 to :data:`MAX_REQUEST_USD` as ``unreadable`` (so a sum of amounts is
    always finite: two lines of 1e308 made ``$inf`` and JSON that was not JSON)."""
    if value is None:
        return 0.0
    number = finite_number(value)  # (a 400-digit integer is no amount either)
    return number if number is not None and 0 <= number <= MAX_REQUEST_USD else unreadable


def _shown(value: Any) -> str:
    """A ledger value named in a message: clipped, control characters visible."""
    return "missing" if value is None else visible(clip(repr(value), 80))


def ledger_totals(ledger: Path) -> tuple[float, float]:
    """(conservative, list) dollars: final lines, plus the worst case of unanswered requests."""
    summary = ledger_summary(ledger)
    return summary.spent, summary.listed


# what became of the requests a ledger records, in the order they are shown
OUTCOMES = ("answered", "worst case", "failed", "refused")


@dataclass
class LedgerSummary:
    """A ledger's (conservative, list) dollars and its requests by outcome: ``answered``
    (priced from the usage the endpoint reported), ``worst case`` (charged their worst case:
    usage unreadable, connection lost, or no final line: the process was killed while they
    were in flight), ``failed`` (an HTTP error: nothing charged) and ``refused`` (never sent:
    the budget could not cover them)."""

    spent: float = 0.0
    listed: float = 0.0
    requests: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    skipped: list[int] = field(default_factory=list)  # lines that are not records
    problems: list[Problem] = field(default_factory=list)  # lines not read (too many records)


def requests_sent(requests: dict[str, int]) -> int:
    """How many of a ledger's requests by outcome were sent (all but the refused)."""
    return sum(n for k, n in requests.items() if k != "refused")


def ledger_summary(ledger: Path) -> LedgerSummary:
    """What a spend ledger adds up to (see :class:`LedgerSummary`). A ``sent`` request whose
    ``worst_usd`` is not an amount is a problem where nothing else says what it cost (no
    final line, or one without a readable amount): the guard never counts less than was
    spent."""
    out = LedgerSummary()
    spent = listed = 0.0
    pending: dict[object, float] = {}
    unknown: dict[object, Any] = {}  # sent requests without a readable worst case: the value
    for n, rec in enumerate(read_ledger(ledger, out.skipped, out.problems)):
        uid = rec.get("request")
        uid = uid if isinstance(uid, str) else None
        status = rec.get("status")
        if status == "sent":  # (without a request id it can never be answered: its worst case)
            key = uid if uid else ("line", n)
            worst = _usd(rec.get("worst_usd"), -1.0)
            if worst < 0 or rec.get("worst_usd") is None:  # what it could cost is not known
                unknown[key] = rec.get("worst_usd")
                worst = 0.0
            pending[key] = worst
            continue
        if status == "refused":
            out.requests["refused"] += 1
            continue
        worst = max(pending.pop(uid, 0.0) if uid else 0.0, _usd(rec.get("worst_usd")))
        if uid in unknown:  # known after all only if this line says what it cost
            value = unknown.pop(uid)
            if _usd(rec.get("conservative_usd"), -1.0) < 0 and worst == 0:
                unknown[uid] = value
        # a final line whose amount cannot be read is charged its request's worst case
        cost = _usd(rec.get("conservative_usd"), worst)
        spent += cost
        listed += _usd(rec.get("list_usd"), worst)
        kind = ("answered" if status == "ok" else
                "worst case" if isinstance(status, str) and status.startswith("unknown")
                else "failed" if cost == 0 else "worst case")
        out.requests[kind] += 1
    for key, value in unknown.items():
        out.problems.append(Problem(
            str(ledger), f"a sent request's worst_usd is {_shown(value)}, not an amount from 0 "
            f"to {MAX_REQUEST_USD:,.0f}, and no line says what it cost: it cannot be counted",
            id=key if isinstance(key, str) else None))
    lost = sum(pending.values())
    out.requests["worst case"] += len(pending)
    out.spent, out.listed = spent + lost, listed + lost
    return out
