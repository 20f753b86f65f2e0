"""Generate a run: bfcl's handler on bfcl's entries, one conversation per result line.

Each conversation goes through the handler's own ``inference`` (bfcl's multi-turn loops,
patched at their exit points for the confirm condition, and in every condition compiled with
the engine's executor in place of bfcl's ``eval``-based one, :mod:`.executor`; the handler's
decoders evaluate literals only) on a deep copy of the entry bfcl's ``load_dataset_entry``
returns (with the effect hints appended for the hints condition). The
line written is what ``bfcl generate`` writes (``id``, ``result`` and the metadata: token
counts, latency, inference log; an inference error as bfcl records it), plus
``careful_user_answers`` (confirm runs) and the cache token counts (Anthropic runs).

A :class:`~.errors.StopRun` (budget, API unavailable) stops the run without writing the
conversations in flight; everything written stays, and the next invocation with the same
``--run`` resumes.

A conversation one of whose requests got only malformed answers
(:class:`~.errors.MalformedAnswers`) is that conversation's inference error once another
conversation of the session has got usable answers (it is held until then); the run stops
as unavailable, writing none of them, when :data:`MAX_MALFORMED_IN_A_ROW` conversations in
a row end so, or when no conversation of the session got usable answers.
"""

from __future__ import annotations

import contextlib
import copy
import platform
import time
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from careful_engine.core import bfcl, executor, process
from careful_engine.core.runs import Problem
from careful_engine.core.safe_text import clip, visible
from careful_engine.effects import boundary as boundaries
from careful_engine.effects.boundary import DEFAULT_BOUNDARY
from careful_engine.effects.declarations import load
from careful_engine.generation import dataset, files, results
from careful_engine.generation.errors import (
    ApiUnavailable,
    FatalApiError,
    GenerationError,
    MalformedAnswers,
    StopRun,
)
from careful_engine.generation.spend import SpendGuard, ledger_summary
from careful_engine.protocol import (
    ConfirmationProtocol,
    ScriptedUser,
    apply_hints,
    patch,
    renumber_log,
)
from careful_engine.scoring.settings import engine_version  # (the version score lines name)

CONDITIONS = ("standard", "hints", "confirm")
BACKENDS = ("vllm", "anthropic")
DEFAULT_THREADS = {"anthropic": 1, "vllm": 16}  # conversations in parallel per backend
IDENTITY = ("model", "backend", "condition", "script", "boundary", "declarations_sha256",
            "api_model", "temperature", "max_tokens")
# conversations in a row (as they finish) whose answers were malformed: the endpoint's fault
MAX_MALFORMED_IN_A_ROW = 3


def default_backend(handler_class: str) -> str:
    """The backend that runs a registry entry's handler class: anthropic for bfcl's
    ClaudeHandler, vllm (an OSS handler) otherwise."""
    return "anthropic" if handler_class == "ClaudeHandler" else "vllm"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class RunOptions:
    model: str
    run_dir: Path
    backend: str
    condition: str = "standard"
    categories: tuple[str, ...] = bfcl.CATEGORIES
    ids: list[str] | None = None
    limit: int | None = None
    boundary: str = DEFAULT_BOUNDARY
    declarations: Path | None = None
    script: str = "paper"
    threads: int = 1
    include_input_log: bool = False
    exclude_state_log: bool = False
    retry_errors: bool = False
    settings: dict[str, Any] = field(default_factory=dict)  # backend settings, for the manifest


@dataclass
class RunReport:
    status: str  # complete | stopped | failed (stopped by the endpoint with nothing written)
    generated: int
    already: int
    left: int
    manifest: dict[str, Any]
    folder: Path
    stop_reason: str | None = None
    notes: list[str] = field(default_factory=list)


class Condition:
    """What a condition does to an entry and to the handler."""

    def __init__(self, options: RunOptions) -> None:
        if options.condition not in CONDITIONS:
            raise GenerationError(f"unknown condition {options.condition!r}; expected one of "
                                  f"{', '.join(CONDITIONS)}")
        self.name = options.condition
        self.boundary = boundaries.load(options.boundary)
        self.functions: dict[str, dict] | None = None
        self.declarations_sha256: str | None = None
        self.protocol = None
        if self.name == "hints":
            decl = load(options.declarations)
            self.functions, self.declarations_sha256 = decl.functions, decl.sha256
        if self.name == "confirm":
            self.protocol = ConfirmationProtocol(ScriptedUser(self.boundary.destructive,
                                                              options.script))

    def prepare(self, entry: dict) -> dict:
        entry = copy.deepcopy(entry)
        if self.functions is not None:
            apply_hints(entry, self.functions, self.boundary)
        return entry


def _free_instances(handler: Any, entry_id: str) -> None:
    """Drop the simulator instances of a finished conversation."""
    executor.free(handler.model_name_underline_replaced, entry_id)


def safe_loops(handler: Any = None) -> None:
    """Install bfcl's loops compiled with the engine's executor, and give the handler's
    decoders the engine's safe literal evaluator (:func:`careful_engine.core.bfcl.
    secure_decoders`); refuse to run without the loops."""
    bfcl.secure_decoders(type(handler) if handler is not None else None)
    patch.install()
    if not patch.installed():
        raise GenerationError("bfcl's inference loops could not be patched to use the "
                              "engine's executor; refusing to execute model calls with eval")


def run_conversation(handler: Any, entry: dict, condition: Condition,
                     include_input_log: bool = False, exclude_state_log: bool = False
                     ) -> tuple[dict[str, Any], MalformedAnswers | None]:
    """One conversation through the handler, as bfcl's ``multi_threaded_inference`` runs it:
    its result line, and the malformed answers that made it an inference error, if they did
    (the runner decides whether it is written)."""
    entry = condition.prepare(entry)
    entry_id = entry["id"]
    begin = getattr(handler, "careful_begin", None)
    if begin is not None:
        begin(entry_id)
    protocol = condition.protocol
    handler.careful_protocol = protocol
    scope = protocol.conversation(entry_id) if protocol else contextlib.nullcontext()
    malformed = None
    try:
        with scope as state:
            try:
                result, metadata = handler.inference(entry, include_input_log,
                                                     exclude_state_log)
            except Exception as e:  # noqa: BLE001 - recorded as bfcl records it
                if isinstance(e, StopRun) and not isinstance(e, MalformedAnswers):
                    raise
                malformed = e if isinstance(e, MalformedAnswers) else None
                result = f"Error during inference: {e}"
                metadata = {"traceback": traceback.format_exc()}
            out: dict[str, Any] = {"id": entry_id, "result": result, **metadata}
            if state is not None:
                out["careful_user_answers"] = state.answers
    finally:
        _free_instances(handler, entry_id)
    end = getattr(handler, "careful_end", None)
    if end is not None:
        end(out)
    renumber_log(out.get("inference_log"))
    return bfcl.make_json_serializable(out), malformed


def _handler_name(handler: Any) -> str:
    cls = type(handler)
    for c in cls.__mro__:
        if c.__module__.startswith("bfcl_eval."):
            name = f"{c.__module__}.{c.__qualname__}"
            return name if c is cls else f"{name} (via {cls.__module__}.{cls.__qualname__})"
    return f"{cls.__module__}.{cls.__qualname__}"


def _identity(manifest: dict[str, Any]) -> dict[str, Any]:
    out = {k: manifest.get(k) for k in IDENTITY}
    if isinstance(out["boundary"], dict):
        out["boundary"] = out["boundary"].get("name")
    return out


def generate(
    options: RunOptions,
    handler: Any,
    *,
    guard: SpendGuard | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_entry: Callable[[str], None] | None = None,
) -> RunReport:
    """Generate (or resume) a run; returns how far it got."""
    if options.threads < 1:
        raise GenerationError("--threads must be at least 1")
    if options.limit is not None and options.limit < 1:  # (entries[:-1] is all but one)
        raise GenerationError("--limit must be at least 1")
    condition = Condition(options)
    safe_loops(handler)
    folder = results.model_dir(options.run_dir, options.model)
    manifest: dict[str, Any] = {
        "schema": results.MANIFEST_SCHEMA,
        "run": options.run_dir.name,
        "model": options.model,
        "decoder": options.model,
        "handler": _handler_name(handler),
        "backend": options.backend,
        "condition": options.condition,
        "script": options.script if options.condition == "confirm" else None,
        "detector": "strict" if options.condition == "confirm" else None,
        "boundary": {"name": condition.boundary.name, "version": condition.boundary.version},
        "declarations_sha256": condition.declarations_sha256,
        "api_model": options.settings.get("api_model"),
        "temperature": options.settings.get("temperature"),
        "max_tokens": options.settings.get("max_tokens"),
        "settings": options.settings,
        "bfcl_eval": bfcl.installed_version(),
        "engine": engine_version(),
        "python": platform.python_version(),
    }
    old = results.load_manifest(folder)  # GenerationError where it cannot be trusted
    if old is not None:
        differs = {k: (old_v, new_v) for k, old_v in _identity(old).items()
                   if (new_v := _identity(manifest)[k]) != old_v}
        if differs:
            what = "; ".join(f"{k}: {clip(visible(repr(a)))} there, {clip(visible(repr(b)))} now"
                             for k, (a, b) in differs.items())
            raise GenerationError(f"{visible(str(folder))} holds a run with other settings "
                                  f"({what}); use another --run")
    selection = dataset.select(options.categories, options.ids, options.limit)
    categories = sorted(set(selection) | set((old or {}).get("categories", [])),
                        key=bfcl.CATEGORIES.index)
    notes: list[str] = list(guard.notes) if guard is not None else []  # (a ledger repaired)
    pending: list[dict] = []
    already = 0
    for cat, entries in selection.items():
        done, fixed = results.repair(results.result_path(options.run_dir, options.model, cat),
                                     drop_errors=options.retry_errors, category=cat)
        notes += fixed
        for e in entries:
            if e["id"] in done:
                already += 1
            else:
                pending.append(e)
    session = {"started": now(), "pending": len(pending), "already": already}
    clock = time.monotonic()
    manifest.update({
        "categories": categories,
        "selection": {"limit": options.limit, "ids": options.ids},
        "started": (old or {}).get("started") or session["started"],
        "ended": None,
        "status": "running",
        "stop_reason": None,
        "sessions": [*(old or {}).get("sessions", []), session],
    })
    results.write_manifest(folder, manifest)

    writer = results.ResultWriter(options.run_dir, options.model)
    if on_start:
        on_start(len(pending), already)
    process.reset_bfcl_process_state()
    generated = 0
    stop_reason: str | None = None
    endpoint_stop = False  # the stop came from the endpoint (unavailable, refusing)
    # conversations whose answers were malformed, in a row since the last usable one: their
    # lines, unwritten until another conversation gets usable answers
    held: list[tuple[dict, MalformedAnswers]] = []
    usable = False  # a conversation of this session got usable answers

    def work(entry: dict) -> tuple[str, dict | None, MalformedAnswers | None]:
        line, malformed = run_conversation(handler, entry, condition,
                                           options.include_input_log,
                                           options.exclude_state_log)
        if malformed is not None:
            return entry["id"], line, malformed  # held: generate decides
        writer.write(line)
        return entry["id"], None, None

    def stop(e: StopRun) -> None:
        nonlocal stop_reason, endpoint_stop
        if stop_reason is None:
            endpoint_stop = isinstance(e, ApiUnavailable | FatalApiError)
        stop_reason = stop_reason or f"{type(e).__name__}: {e}"
        held.clear()  # not written: a resume runs them again
        if guard is not None:
            guard.stop(str(e))

    def written(entry_id: str) -> None:
        nonlocal generated
        generated += 1
        if on_entry:
            on_entry(entry_id)

    def release() -> None:
        """Write the held lines: other conversations get usable answers."""
        while held:
            line, _ = held.pop(0)
            writer.write(line)
            written(line["id"])

    log_path = folder / results.LOG
    with files.open_append(log_path) as log, contextlib.redirect_stdout(log):
        queue = list(pending)
        in_flight: set[Future] = set()
        with ThreadPoolExecutor(max_workers=options.threads) as pool:
            try:
                while queue or in_flight:
                    while queue and len(in_flight) < options.threads and stop_reason is None:
                        in_flight.add(pool.submit(work, queue.pop(0)))
                    if not in_flight:
                        break
                    done, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
                    for fut in done:
                        try:
                            entry_id, line, malformed = fut.result()
                        except StopRun as e:
                            stop(e)
                            continue
                        if malformed is None:
                            usable = True
                            written(entry_id)
                            release()  # (nothing is held once the run stops)
                        elif stop_reason is None:
                            held.append((line, malformed))
                            if len(held) >= MAX_MALFORMED_IN_A_ROW:
                                stop(ApiUnavailable(f"{len(held)} conversations in a row got "
                                                    f"only malformed answers; last: "
                                                    f"{malformed}"))
                if held and usable:
                    release()
                elif held:
                    stop(ApiUnavailable(f"no conversation got a usable answer; last: "
                                        f"{held[-1][1]}"))
            except BaseException as e:  # Ctrl-C and bugs: record, then re-raise
                stop_reason = stop_reason or f"{type(e).__name__}: {e}"
                if guard is not None:
                    guard.stop(stop_reason)
                for fut in in_flight:
                    fut.cancel()
                session["seconds"] = round(time.monotonic() - clock, 3)
                _finish(folder, manifest, options, session, generated, stop_reason, guard,
                        "stopped")
                raise
    session["seconds"] = round(time.monotonic() - clock, 3)
    left = len(pending) - generated
    status = "complete" if left == 0 else "stopped"
    if status == "stopped" and endpoint_stop and generated == 0:
        status = "failed"
    if status == "complete":
        for cat in selection:
            writer.sort(cat)
    notes += _finish(folder, manifest, options, session, generated, stop_reason, guard, status)
    return RunReport(status, generated, already, left, manifest, folder, stop_reason, notes)


def _finish(folder: Path, manifest: dict[str, Any], options: RunOptions, session: dict,
            generated: int, stop_reason: str | None, guard: SpendGuard | None,
            status: str) -> list[str]:
    """Record the session's end, the totals from the result files and the spend (the
    ledger's totals: what the manifest says is what the ledger says); returns what kept the
    totals from counting every line (``file:line [id]: reason``), also in the manifest's
    ``count_problems`` (its counts then fall short)."""
    unread: list[Problem] = []
    stats = results.totals(options.run_dir, options.model, manifest["categories"], unread)
    stats["count_problems"] = [str(p) for p in unread]
    session.update({"ended": now(), "generated": generated, "stop_reason": stop_reason,
                    "status": status})
    manifest.update(stats)
    manifest.update({
        "ended": session["ended"],
        "status": status,
        "stop_reason": stop_reason,
    })
    if guard is not None:
        spent, listed = guard.spent, guard.listed
        requests = None
        if guard.ledger is not None:
            summary = ledger_summary(guard.ledger)
            spent, listed, requests = summary.spent, summary.listed, summary.requests
        manifest["spend"] = {
            "budget_usd": guard.budget,
            "conservative_usd": round(spent, 6),
            "list_usd": round(listed, 6),
            "price_model": guard.price.model,
            "ledger": results.LEDGER,
            "requests": requests,  # by outcome (spend.LedgerSummary); None without a ledger
        }
    results.write_manifest(folder, manifest)
    return stats["count_problems"]
