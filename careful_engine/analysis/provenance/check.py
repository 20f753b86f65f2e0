"""Provenance of one conversation and of one result file: drift, decoder drift, fidelity."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from careful_engine.analysis.provenance.decoder import DecoderDrift, decoder_drift
from careful_engine.analysis.provenance.drift import DatasetDrift, dataset_drift, no_log
from careful_engine.analysis.provenance.fidelity import Fidelity, replay_fidelity
from careful_engine.analysis.provenance.log import parse_log
from careful_engine.analysis.provenance.official import OfficialScore, find_official, read_official
from careful_engine.core import bfcl
from careful_engine.core.environment import Environment
from careful_engine.core.perf import collector_paused
from careful_engine.core.replay import ConversationTrace
from careful_engine.core.runs import LoadedFile, Problem, load_result_file
from careful_engine.core.safe_read import read_regular
from careful_engine.scoring.score import MISSING, CategoryScore, score_file

GROUND_TRUTH = "possible_ground_truth_change"
UNVERIFIABLE = "unverifiable"


@dataclass
class ConversationProvenance:
    """Drift, decoder drift and replay fidelity of one conversation, with its verdicts."""

    id: str
    category: str
    line: int | None
    drift: DatasetDrift
    decoder: DecoderDrift | None = None
    fidelity: Fidelity | None = None
    valid_now: bool | None = None
    error_now: str | None = None
    valid_then: bool | None = None
    error_then: str | None = None

    @property
    def replays_differently(self) -> bool:
        return bool(self.fidelity and self.fidelity.relevant)

    @property
    def clean(self) -> bool:
        """Verified, no drift, same decode, every logged result reproduced (or neutral)."""
        return (self.drift.verifiable and not self.drift.drifted
                and not (self.decoder and self.decoder.differs) and not self.replays_differently)

    @property
    def verdict_changed(self) -> bool:
        return self.valid_then is not None and self.valid_now is not None and \
            self.valid_then != self.valid_now

    def reasons(self) -> list[str]:
        """What in the log can explain a changed verdict, strongest first."""
        if not self.drift.verifiable:
            return [UNVERIFIABLE]
        out = []
        if self.drift.drifted:
            out.append("dataset_drift")
        if self.decoder and self.decoder.differs:
            out.append("decoder_drift")
        if self.replays_differently:
            out.append("replay_differs")
        return out or [GROUND_TRUTH]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "category": self.category,
            "line": self.line,
            "clean": self.clean,
            "dataset_drift": self.drift.to_json(),
            "decoder_drift": self.decoder.to_json() if self.decoder else None,
            "replay_fidelity": self.fidelity.to_json() if self.fidelity else None,
            "valid_now": self.valid_now,
            "error_now": self.error_now,
            "valid_then": self.valid_then,
            "error_then": self.error_then,
        }
        if self.verdict_changed:
            out["verdict_change_reasons"] = self.reasons()
        return out


def _initial_state(conv: bfcl.Conversation, trace: ConversationTrace | None) -> Any:
    if trace is not None and trace.model is not None:
        return trace.model.initial_state
    return Environment.for_conversation(conv, "model", snapshots=True).initial_state


def check_conversation(
    conv: bfcl.Conversation,
    entry: dict | None,
    trace: ConversationTrace | None = None,
    *,
    line: int | None = None,
) -> tuple[ConversationProvenance, list[str]]:
    """Check one result entry against the pinned dataset and, given its replay, against the
    replay. Returns the provenance and the log's shape problems (located in the log)."""
    if entry is None:
        return ConversationProvenance(conv.id, conv.category, line,
                                      no_log("the entry is missing from the file")), []
    inference_error = type(entry.get("result")) is not list
    log = parse_log(entry.get("inference_log"))
    problems = list(log.problems) if log else []
    result = entry.get("result")
    if log is not None and not inference_error and log.turns and len(log.turns) != len(result):
        problems.append(f"the inference_log has {len(log.turns)} turns, the result "
                        f"{len(result)}")
    if log is None:
        drift = no_log("inference error, no log" if inference_error
                       else "the entry has no inference_log")
    else:
        drift = dataset_drift(conv, log, _initial_state(conv, trace),
                              inference_error=inference_error)
    prov = ConversationProvenance(conv.id, conv.category, line, drift)
    if trace is not None:
        prov.valid_now = trace.verdict.valid
        prov.error_now = trace.verdict.error_type
    if log is not None and trace is not None and not inference_error:
        prov.decoder = decoder_drift(log, trace.trajectory)
        prov.fidelity = replay_fidelity(trace, log, drift, prov.decoder)
    return prov, problems


def entry_drift(conv: bfcl.Conversation, entry: dict | None) -> DatasetDrift:
    """Dataset drift of one entry, without a replay (``careful score --exclude-drifted``)."""
    return check_conversation(conv, entry)[0].drift


# ---------------------------------------------------------------- files


@dataclass
class FileProvenance:
    """Provenance of every conversation of one category file."""

    model: str
    category: str
    path: Path
    conversations: list[ConversationProvenance] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    official: OfficialScore | None = None

    @property
    def verifiable(self) -> bool:
        return any(c.drift.verifiable for c in self.conversations)


_LONE = re.compile(r"[\ud800-\udfff]")


def _lone_surrogates(value: Any, path: str, out: list[str]) -> None:
    if isinstance(value, str):
        m = _LONE.search(value)
        if m:
            out.append(f"{path} (U+{ord(m.group()):04X})")
    elif isinstance(value, dict):
        for k, v in value.items():
            _lone_surrogates(v, f"{path}.{k}" if path else str(k), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _lone_surrogates(v, f"{path}[{i}]", out)


def unicode_problems(loaded: LoadedFile) -> list[Problem]:
    """Entries holding strings with lone surrogates (invalid Unicode), with file, line and id."""
    try:
        raw = read_regular(loaded.file.path)
    except OSError:
        return []
    try:
        text, undecodable = raw.decode("utf-8"), False
    except UnicodeDecodeError:
        text, undecodable = raw.decode("utf-8", "surrogateescape"), True
    if not undecodable and "\\ud" not in text and "\\uD" not in text:
        return []  # no invalid bytes and no escaped surrogate: nothing to look for
    lines = text.split("\n")
    out = []
    for entry_id, lineno in loaded.lines.items():
        line = lines[lineno - 1] if lineno - 1 < len(lines) else ""
        if "\\ud" in line or "\\uD" in line or (undecodable and _LONE.search(line)):
            where: list[str] = []
            _lone_surrogates(loaded.entries[entry_id], "", where)
            if where:
                more = f" and {len(where) - 1} more" if len(where) > 1 else ""
                out.append(Problem(str(loaded.file.path), "invalid Unicode (lone surrogate) in "
                                   f"{where[0]}{more}; compared as is", lineno, entry_id))
    return out


def check_scored(
    loaded: LoadedFile,
    score: CategoryScore,
    official: OfficialScore | None = None,
) -> FileProvenance:
    """Provenance of a file already scored with ``keep_traces=True`` (the replay is reused)."""
    rf = loaded.file
    out = FileProvenance(rf.model, rf.category, rf.path, official=official)
    out.problems.extend(unicode_problems(loaded))
    for r in score.results:
        conv = bfcl.conversation(r.id)
        entry = loaded.entries.get(r.id)
        line = loaded.lines.get(r.id)
        try:
            prov, problems = check_conversation(conv, entry, r.trace, line=line)
        except Exception as e:  # noqa: BLE001 - a hostile entry fails itself, not the file
            reason = f"could not be checked ({type(e).__name__}: {str(e)[:160]})"
            prov = ConversationProvenance(conv.id, conv.category, line, no_log(reason))
            problems = [reason]
        if r.trace is None:
            prov.valid_now, prov.error_now = r.verdict.valid, r.verdict.error_type
        if official is not None:
            prov.valid_then = official.valid(r.id)
            prov.error_then = official.failed.get(r.id)
        out.problems.extend(Problem(str(rf.path), p, line, r.id) for p in problems)
        out.conversations.append(prov)
    if official is not None:
        out.problems.extend(official.problems)
    return out


def check_file(
    loaded: LoadedFile,
    handler: Any | None,
    *,
    score_root: Path | None = None,
    on_entry: Callable[[], None] | None = None,
) -> tuple[CategoryScore, FileProvenance]:
    """Score a file (the same replay as ``careful score``) and check its provenance.

    The file's traces are kept until checked; the collector is paused meanwhile (full
    collections over hundreds of live traces would cost about half the scoring time).
    """
    path = find_official(loaded.file, score_root)
    official = read_official(path, loaded.file.category) if path else None
    with collector_paused():
        score = score_file(loaded, handler, keep_traces=True, on_entry=on_entry)
        prov = check_scored(loaded, score, official)
        for r in score.results:
            r.trace = None  # the traces are large; the provenance keeps what it needs
    return score, prov


def dumps(obj: Any) -> str:
    """JSON that is always valid UTF-8 (lone surrogates escaped)."""
    return json.dumps(obj, ensure_ascii=True, default=str)


@dataclass
class DriftSplit:
    """A scored file's accuracy on all conversations and on those that did not drift."""

    model: str
    category: str
    drift: dict[str, DatasetDrift]
    correct: int
    total: int
    correct_kept: int
    total_kept: int

    @property
    def excluded(self) -> int:
        return self.total - self.total_kept

    @property
    def unverifiable(self) -> int:
        return sum(not d.verifiable for d in self.drift.values())


def drift_split(loaded: LoadedFile, score: CategoryScore) -> DriftSplit:
    """Dataset drift of every conversation of a scored file, and the accuracy without the
    drifted ones (unverifiable conversations are kept, and counted)."""
    drift = {r.id: entry_drift(bfcl.conversation(r.id), loaded.entries.get(r.id))
             for r in score.results}
    kept = [r for r in score.results if not drift[r.id].drifted]
    return DriftSplit(score.model, score.category, drift, score.correct, score.total,
                      sum(r.verdict.valid for r in kept), len(kept))


class DriftDigest:
    """Whether a scored conversation's log shows dataset drift (:func:`entry_drift`), worked
    out where it is scored (a :data:`careful_engine.scoring.result.Digest`: a worker that loaded
    the file reads its entries there, so that the parent need not read the file again)."""

    def __call__(self, trace: Any, result: Any, rf: Any, entry: dict | None = None) -> bool:
        return entry_drift(bfcl.conversation(result.id), entry).drifted


def run_drift(files: Iterable[tuple[LoadedFile, CategoryScore]]) -> dict[str, tuple[int, int]]:
    """Per model folder of a scored run (``RunScore.files``): (conversations whose log shows
    dataset drift, conversations scored), as :func:`drift_split` counts them; no replay, no
    figure changed. From the results' :class:`DriftDigest` answers where every conversation
    with an entry has one, else from the entries (a file scored without keeping its entries
    is read again)."""
    out: dict[str, tuple[int, int]] = {}
    for lf, cs in files:
        if all(type(r.digest) is bool or r.verdict.error_type == MISSING for r in cs.results):
            n = sum(r.digest is True for r in cs.results)
        else:
            if not lf.entries and lf.lines:
                lf = load_result_file(lf.file)
            n = drift_split(lf, cs).excluded
        drifted, total = out.get(cs.model, (0, 0))
        out[cs.model] = (drifted + n, total + cs.total)
    return out


def drift_note(drifted: int, total: int, run: object) -> str:
    """The one line ``score`` and ``leaderboard`` print when a run's logs show dataset drift."""
    return (f"{drifted} of {total} conversations were generated on another dataset version "
            f"than bfcl-eval {bfcl.BFCL_VERSION}'s; `careful provenance {run}` attributes the "
            "difference")
