"""Observations: one call executed on owned simulator instances in a known state.

An observation is (state before, call, result, success, state after), taken from the
engine's :class:`~careful_engine.core.environment.Environment`. Two sources live here: the
reference trajectories of the four categories and the decoded calls of logged runs; the
synthetic probes are in :mod:`.probes`. Every source goes through one :class:`Recorder`,
which

* identifies an observation by (function, the class's state before, the call with its
  arguments bound to parameter names), so that a call seen twice from the same state (the
  same reference turn in base and miss_param, or a logged run that replays the references)
  is one observation: evidence counts do not grow with duplicated input;
* repeats every successful call that changed the state once more, on a copy of the resulting
  state, for the idempotence check (hidden state included).

All environments use one instance naming (bfcl rewrites a method name inside a string
argument to the instance name), so the same calls give the same states in every source.
Each conversation starts from bfcl's pristine process-global data (long-context TravelAPI
cards and bookings, ``post_tweet``'s default lists); nothing is carried between
conversations. The travel simulator's clock is pinned (:func:`pinned_clock`).
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import pickle
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from careful_engine.core import bfcl
from careful_engine.core.calls import Call
from careful_engine.core.decode import decode_entry
from careful_engine.core.environment import Environment, Execution
from careful_engine.core.process import BfclProcess, reset_to_pristine
from careful_engine.core.runs import (
    DecoderUnavailable,
    LoadedFile,
    ResultFile,
    decoder_key,
    find_result_files,
    is_synthetic,
    load_result_file,
    needs_decoder,
    result_model_folder,
    unmatched_decoder,
)
from careful_engine.core.safe_read import read_regular
from careful_engine.core.state import Change, State, diff
from careful_engine.core.trajectory import Outcome

INSTANCE_NAME = "careful_effects"  # the model name every observation environment uses
SOURCES = ("references", "probes", "runs")
_KEY_CACHE = 256

Progress = Callable[[int], None]


@dataclass
class Observation:
    """One distinct executed call, with its diff and the idempotence re-check."""

    source: str
    where: str
    function: str
    class_name: str
    call: str  # normalised: arguments bound to parameter names
    success: bool
    changes: list[Change]
    state_after: State = field(repr=False)
    repeat_changes: list[Change] | None = None  # None: not re-checked (failed or no change)

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def _canon(value: Any) -> str:
    """repr with sets sorted, so that a rendering never depends on hash randomisation."""
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_canon(v) for v in value)) + "}" if value else "set()"
    if isinstance(value, list):
        return "[" + ", ".join(_canon(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(_canon(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_canon(k)}: {_canon(v)}" for k, v in value.items()) + "}"
    return repr(value)


def bound_arguments(call: Call) -> dict[str, Any] | None:
    """The call's arguments by parameter name, in signature order (None: they do not bind)."""
    return bfcl.bound_arguments(call.name, call.args, dict(call.kwargs))


def normalise(call: Call) -> str:
    """``name(param=value, ...)`` with positional arguments bound to their names."""
    args = bound_arguments(call)
    if args is None:
        parts = [_canon(a) for a in call.args]
        parts += [f"{k}={_canon(v)}" for k, v in sorted(call.kwargs.items())]
    else:
        parts = [f"{k}={_canon(v)}" for k, v in args.items()]
    return f"{call.name}({', '.join(parts)})"


def fork(env: Environment, class_name: str) -> Environment:
    """A throwaway twin of ``env`` whose ``class_name`` instance is a deep copy."""
    twin = copy.copy(env)
    twin.instances = dict(env.instances)
    twin.instances[class_name] = pickle.loads(
        pickle.dumps(env.instances[class_name], pickle.HIGHEST_PROTOCOL))
    return twin


def with_instance(env: Environment, class_name: str, instance: Any, captured: bytes) -> Environment:
    """A twin of ``env`` holding ``instance`` (whose capture is ``captured``) for the class."""
    twin = copy.copy(env)
    twin.instances = dict(env.instances)
    twin.instances[class_name] = instance
    twin.state = env.initial_state.replace(class_name, captured)
    return twin


PINNED_TODAY = (2026, 3, 23)  # the release date of the pinned bfcl-eval


@contextmanager
def pinned_clock() -> Iterator[None]:
    """Pin ``datetime.today()`` in the travel simulator, whose age check in
    ``verify_traveler_information`` reads the wall clock: without this, a traveller turning
    18 would change the declarations' evidence counts from one day to the next."""
    module = importlib.import_module(bfcl.CLASS_FILE_PATH_MAPPING["TravelAPI"])
    real = module.datetime

    class Pinned(real):  # type: ignore[misc, valid-type]
        @classmethod
        def today(cls):
            return cls(*PINNED_TODAY)

        @classmethod
        def now(cls, tz=None):
            return cls(*PINNED_TODAY, tzinfo=tz)

    module.datetime = Pinned
    try:
        yield
    finally:
        module.datetime = real


def fresh_process(involved_classes: Sequence[str]) -> None:
    """Put bfcl's process-global simulator data back to pristine values when a class uses it."""
    if BfclProcess.touches(tuple(involved_classes)):
        reset_to_pristine()


def environment(conv: bfcl.Conversation) -> Environment:
    fresh_process(conv.involved_classes)
    return Environment.for_conversation(conv, "model", model_name=INSTANCE_NAME)


class Recorder:
    """Receives executed calls from every source, keeps distinct ones, re-checks writes."""

    def __init__(self, sink: Callable[[Observation], None]) -> None:
        self.sink = sink
        self._seen: set[bytes] = set()
        self.new_by_source: Counter = Counter()
        self.unrepresentable: Counter = Counter()  # function -> calls whose state is cyclic
        self._keys: dict[bytes, bytes] = {}  # recent captured bytes -> state digest

    def _state_key(self, state: State, cls: str) -> bytes:
        """A digest of the class's plain snapshot.

        Captured bytes are not canonical (marshal records how objects are shared and
        interned), so equal states can have different bytes; the plain snapshot, serialised
        in its (deterministic) insertion order, is.
        """
        blob = state.blob(cls)
        key = self._keys.get(blob)
        if key is None:
            plain = state[cls]
            try:
                text = json.dumps(plain, ensure_ascii=False, default=repr)
            except (TypeError, ValueError):  # keys JSON cannot hold (a model's tuple keys)
                text = repr(plain)
            key = hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest()
            if len(self._keys) >= _KEY_CACHE:
                self._keys.pop(next(iter(self._keys)))
            self._keys[blob] = key
        return key

    def record(self, source: str, where: str, before: State, ex: Execution,
               repeat: Callable[[], Execution]) -> bool:
        """Record one parsed call; returns whether it was a new observation."""
        assert isinstance(ex.call, Call) and ex.class_name is not None
        cls = ex.class_name
        norm = normalise(ex.call)
        try:
            state_key = self._state_key(before, cls)
        except RecursionError:
            state_key = before.blob(cls)  # a cyclic state has no plain form
        digest = hashlib.sha1(norm.encode("utf-8", "surrogatepass") + b"\0" + state_key).digest()
        if digest in self._seen:
            return False
        self._seen.add(digest)
        self.new_by_source[source] += 1
        try:
            changed = not before.same_as(ex.state_after, cls)
            changes = diff(before, ex.state_after) if changed else []
            repeat_changes = None
            if ex.success and changes:
                again = repeat()
                repeat_changes = ([] if ex.state_after.same_as(again.state_after, cls)
                                  else diff(ex.state_after, again.state_after))
        except RecursionError:
            # a state that contains itself (cp of a directory into itself): no snapshot
            self.unrepresentable[ex.call.name] += 1
            return True
        self.sink(Observation(source, where, ex.call.name, cls, norm, ex.success, changes,
                              ex.state_after, repeat_changes))
        return True


def failure_kind(ex: Execution) -> str:
    """How a call that was not executed is counted."""
    reason = getattr(ex.call, "reason", "")
    if "is not defined" in reason:
        if ex.call.name in bfcl.function_class():
            return "uninvolved_function_calls"  # a real function of a class not in the entry
        return "nonexistent_function_calls"
    return "unparsed_calls"


def run_call(recorder: Recorder, source: str, where: str, env: Environment, text: Any,
             counts: Counter) -> Execution:
    """Execute one call string in ``env`` (which advances) and record it."""
    before = env.state
    ex = env.execute(text)
    if not ex.parsed:
        counts[failure_kind(ex)] += 1
        return ex
    counts["calls"] += 1
    cls = ex.class_name
    recorder.record(source, where, before, ex, lambda: fork(env, cls).execute(text))
    return ex


# ---------------------------------------------------------------- source (a): references


def observe_references(recorder: Recorder, categories: Sequence[str] = bfcl.CATEGORIES,
                       progress: Progress | None = None) -> dict[str, int]:
    """Every call of the reference trajectories of ``categories``."""
    counts: Counter = Counter()
    before_new = recorder.new_by_source["references"]
    for category in categories:
        for conv in bfcl.conversations(category):
            counts["conversations"] += 1
            env = environment(conv)
            for t, turn in enumerate(conv.ground_truth):
                for text in turn:
                    run_call(recorder, "references", f"{conv.id} turn {t}", env, text, counts)
            if progress:
                progress(1)
    counts["observations"] = recorder.new_by_source["references"] - before_new
    return {k: counts[k] for k in sorted(counts)}


# ---------------------------------------------------------------- source (b): logged runs


@dataclass
class RunFile:
    """One result file of a logged run, located under the folder it was found in."""

    root: Path
    file: ResultFile
    loaded: LoadedFile | None = None
    decoder: str | None = None
    handler: Any = None
    skipped: str | None = None

    @property
    def rel(self) -> str:
        if self.root.is_file():
            return self.file.path.name
        return self.file.path.relative_to(self.root).as_posix()

    @property
    def conversations(self) -> int:
        return len(self.loaded.entries) if self.loaded else 0


def find_runs(roots: Sequence[Path], decoders: dict[str, str]) -> tuple[list[RunFile], list[str]]:
    """Result files under ``roots``, loaded, each with its decoder or the reason it is skipped."""
    found: list[RunFile] = []
    warnings: list[str] = []
    files_seen: list[ResultFile] = []
    for root in roots:
        files, problems = find_result_files(root)
        files_seen += files
        for p in problems:
            warnings.append(str(p))
        synthetic: set[Path] = set()
        for rf in sorted(files, key=lambda f: f.path.as_posix()):
            folder = result_model_folder(rf.path)
            if folder in synthetic or is_synthetic(folder):
                if folder not in synthetic:  # careful demo's flawed run: no model wrote it
                    synthetic.add(folder)
                    warnings.append(f"{folder}: skipped, a SYNTHETIC run (its manifest says so): "
                                    "no model made its calls")
                continue
            run = RunFile(root, rf)
            run.loaded = load_result_file(rf)
            problems = [p for p in run.loaded.problems if not p.message.startswith("id missing")]
            if problems:
                warnings.append(f"{rf.path}: {len(problems)} unusable line(s) or entries, "
                                f"e.g. {problems[0]}")
            if needs_decoder(run.loaded):
                try:
                    key = decoder_key(rf.model, rf, decoders.get(rf.model))
                    run.handler = bfcl.handler(key)
                    run.decoder = key
                except (bfcl.UnknownModel, RuntimeError, DecoderUnavailable) as e:
                    run.skipped = e.args[0] if e.args else str(e)
                    warnings.append(f"{rf.path}: skipped, no usable decoder for model folder "
                                    f"{rf.model!r}: {run.skipped} "
                                    f"(name one with --decoder {rf.model}=REGISTRY_KEY)")
            found.append(run)
    models = [rf.model for rf in files_seen]
    warnings += [unmatched_decoder(folder, key, models)
                 for folder, key in decoders.items() if folder not in models]
    return found, warnings


def observe_run(recorder: Recorder, run: RunFile, progress: Progress | None = None) -> dict:
    """Every decoded call of one result file, replayed conversation by conversation."""
    counts: Counter = Counter()
    before_new = recorder.new_by_source["runs"]
    assert run.loaded is not None
    for entry_id, entry in run.loaded.entries.items():
        conv = bfcl.conversation(entry_id)
        try:
            trajectory = decode_entry(entry, run.handler)
            if trajectory.turns is None:
                counts["inference_errors"] += 1
            else:
                env = environment(conv)
                for t, turn in enumerate(trajectory.turns):
                    for step in turn:
                        if step.outcome is not Outcome.CALLS:
                            continue
                        for text in step.calls:
                            run_call(recorder, "runs", f"{run.rel} {entry_id} turn {t}", env,
                                     text, counts)
        except Exception:  # noqa: BLE001 - a hostile entry (or one past the replay budget)
            counts["unusable_entries"] += 1  # stops itself, not the run
        if progress:
            progress(1)
    try:  # bounded, never from a FIFO or through a swapped-in device
        digest: str | None = hashlib.sha256(read_regular(run.file.path)).hexdigest()
    except OSError:
        digest = None
    out = {
        "file": run.rel,
        "model": run.file.model,
        "category": run.file.category,
        "decoder": run.decoder,
        "sha256": digest,
        "conversations": run.conversations,
        "observations": recorder.new_by_source["runs"] - before_new,
    }
    for key in ("calls", "inference_errors", "nonexistent_function_calls",
                "uninvolved_function_calls", "unparsed_calls"):
        out[key] = counts[key]
    return out
