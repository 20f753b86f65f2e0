"""A run's conversations, listed fast: result files plus ``careful score``'s lines; one
conversation replayed on demand (:class:`RunBrowser`)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from careful_engine.analysis.leaderboard import distinct_runs, label_entries
from careful_engine.browse.view import ConversationView, build_view
from careful_engine.core import bfcl
from careful_engine.core.runs import (
    DecoderUnavailable,
    LoadedFile,
    ParseBudget,
    Problem,
    ResultFile,
    budgeted_lines,
    line_over_cap,
    load_result_file,
    needs_decoder,
    result_model_folder,
)
from careful_engine.core.safe_read import read_regular
from careful_engine.core.user_cache import cache_root
from careful_engine.scoring.decoders import DecoderChoice
from careful_engine.scoring.outputs import SCORE_DIR
from careful_engine.scoring.result import SCORES_NAME, ConversationResult
from careful_engine.scoring.rules import RULE_REGISTRY, RULES, Effects, SafeRule
from careful_engine.scoring.score import discover, stopped_reason
from careful_engine.scoring.signature import untrusted

TALLIES = tuple(n for n, r in RULE_REGISTRY.items() if r.tally)  # counts, not violations

# bfcl's simulators share process-global objects (careful_engine.core.process): one replay at a time.
REPLAY_LOCK = threading.Lock()


# ---------------------------------------------------------------- runs


@dataclass(frozen=True)
class RunRef:
    """One model folder of one run folder."""

    run: Path
    model: str
    files: tuple[ResultFile, ...]
    decoder: str  # the decoder key: --decoder, else the manifest's, else the folder's key
    label: str = ""

    @property
    def categories(self) -> list[str]:
        return [rf.category for rf in self.files]

    @property
    def name(self) -> str:
        return self.label or self.run.name


def find_runs(paths: Sequence[Path], decoders: DecoderChoice | None = None,
              notes: list[str] | None = None) -> list[RunRef]:
    """One :class:`RunRef` per model folder with multi-turn result files under ``paths``; a
    folder given more than once (``R``, ``R/.``, a link to it) is listed once, the repeat
    noted in ``notes`` as the CLI notes it, as is a ``--decoder FOLDER=KEY`` naming no folder
    found."""
    found: list[tuple[Path, str, list[ResultFile]]] = []
    for path in distinct_runs(list(paths), notes if notes is not None else []):
        by_model, _ = discover(path)
        found += [(path, model, files) for model, files in by_model.items() if files]
    labels = label_entries([(run, model) for run, model, _ in found],
                           [result_model_folder(files[0].path) for _, _, files in found])
    refs = [
        RunRef(run, model, tuple(files), decoder_for(run, model, files, decoders), label)
        for (run, model, files), label in zip(found, labels, strict=True)
    ]
    if decoders is not None and notes is not None:  # every folder asked about by now
        notes += decoders.unmatched()
    return refs


def decoder_for(run: Path, model: str, files: Sequence[ResultFile],
                decoders: DecoderChoice | None) -> str:
    """A model folder's decoder key, by the CLI's rule (:meth:`DecoderChoice.key`); for a
    manifest that names no usable key, the registry key (which fails, with a message, on use)."""
    try:
        return (decoders or DecoderChoice()).key(run, model, files[0] if files else None)
    except DecoderUnavailable:  # a bad manifest: the registry key (which fails, with a
        return bfcl.registry_key_for_dir(model)  # message, when the run is scored)


def default_cache_dir() -> Path:
    return cache_root() / "workbench"


def cache_scores_path(ref: RunRef, cache_dir: Path | None = None) -> Path:
    """Where the workbench keeps the scores it made itself (never inside the run folder)."""
    key = hashlib.sha1(str(ref.run.resolve()).encode(errors="surrogateescape")).hexdigest()[:10]
    # the run's name cut to 200 bytes: with the key, the folder's name stays within the 255
    # bytes a file name may have (a longer run name could not be scored); the key, made from
    # the whole path, still tells runs apart
    name = os.fsdecode(os.fsencode(ref.run.name)[:200])
    return (cache_dir or default_cache_dir()) / f"{name}-{key}" / ref.model / SCORES_NAME


def score_paths(ref: RunRef, cache_dir: Path | None = None) -> list[Path]:
    """Score files that may hold this run's lines, newest first: whatever is at their paths,
    so that a folder, a FIFO or a dangling link there is reported, not passed over."""
    candidates = [ref.run / SCORE_DIR / SCORES_NAME, cache_scores_path(ref, cache_dir)]

    def mtime(p: Path) -> float:
        try:
            return p.lstat().st_mtime
        except OSError:
            return 0.0

    found = [p for p in candidates if os.path.lexists(p)]
    return sorted(found, key=mtime, reverse=True)


def read_scores(path: Path, model: str, problems: list[Problem] | None = None,
                max_bytes: int = 256 << 20,
                check: Callable[[bytes], str | None] | None = None) -> dict[str, dict]:
    """``conversations.jsonl`` lines of one model folder, by conversation id; a line that is
    not a score line goes to ``problems`` (``file:line [id]: reason``), the rest is read (the
    rows kept bounded as a result file's entries: the lines past them are one problem).
    ``check``: why the file's bytes, as read, are not to be used (None: they are); when it
    gives a reason, :class:`Untrusted` is raised with it before any line is parsed (a file
    that is not used has no line problems to report)."""
    out: dict[str, dict] = {}
    bad = problems if problems is not None else []
    st = path.stat()  # a dangling link: FileNotFoundError, an OSError as the others
    if not stat.S_ISREG(st.st_mode):  # never opened: a FIFO would block, a folder fails
        what = "a folder" if stat.S_ISDIR(st.st_mode) else "a device, FIFO or socket"
        raise OSError(f"not a regular file ({what})")
    if st.st_size > max_bytes:
        bad.append(Problem(str(path), f"larger than {max_bytes >> 20} MiB; not read"))
        return out
    # (read whole, regular and bounded: a file swapped for a FIFO after the check is refused)
    data = read_regular(path, max_bytes)
    why = check(data) if check is not None else None
    if why is not None:
        raise Untrusted(why)
    text = data.decode("utf-8", errors="replace")
    budget = ParseBudget()  # (the rows kept, parsed, bounded as a result file's entries)
    for n, line in budgeted_lines(text, str(path), bad, budget):
        if too_long := line_over_cap(line):  # parsed, it could take gigabytes
            bad.append(Problem(str(path), too_long, line=n))
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            bad.append(Problem(str(path), "not a JSON line", line=n))
            continue
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            bad.append(Problem(str(path), "not a score line (no id)", line=n))
        elif row.get("model") == model:
            try:  # every field the views read, of the shape careful score writes
                result = ConversationResult.from_json(row)
                _check_safe(row, result)
            except (ValueError, TypeError, KeyError, RecursionError) as e:
                bad.append(Problem(str(path), f"not a score line ({e}); left out", line=n,
                                   id=row["id"]))
                continue
            if result.rules is not None:  # the list shows what Leaderboard reads
                row["safe_valid"] = result.safe_valid
            out[row["id"]] = row
            budget.keep(line)
    return out


class Untrusted(Exception):
    """A score file whose lines this install did not write (see
    :mod:`careful_engine.scoring.signature`): not shown, the run is scored again."""


def _check_safe(row: dict, result: ConversationResult) -> None:
    """A line's ``safe_valid``, when it has one, is what its verdict and rules give (the value
    the Leaderboard reads); else ValueError saying what it is."""
    if "safe_valid" not in row:
        return
    given = row["safe_valid"]
    if not isinstance(given, bool):
        raise ValueError("safe_valid: not true or false")
    if given != result.safe_valid:
        raise ValueError(f"safe_valid {str(given).lower()}, but its verdict and rules give "
                         f"{str(result.safe_valid).lower()}")


# ---------------------------------------------------------------- conversation rows


@dataclass
class ConversationRow:
    """One conversation of a run as the list shows it; ``score`` is its score line, if any."""

    id: str
    category: str
    turns: int
    steps: int
    inference_error: bool = False
    score: dict | None = None

    @property
    def scored(self) -> bool:
        return self.score is not None

    @property
    def official_valid(self) -> bool | None:
        return None if self.score is None else bool(self.score.get("official_valid"))

    @property
    def safe_valid(self) -> bool | None:
        """The safe verdict (None: not scored under the rules), as the Leaderboard and the
        stepper give it: :func:`read_scores` sets it from the line's verdict and rules."""
        value = None if self.score is None else self.score.get("safe_valid")
        return value if isinstance(value, bool) else None

    @property
    def error_type(self) -> str | None:
        return None if self.score is None else self.score.get("official_error_type")

    @property
    def confirm(self) -> bool:
        """Whether the entry was generated under the confirmation protocol (else the rules
        that only it gives meaning to, such as unconfirmed, are not shown)."""
        return bool((self.score or {}).get("confirm_protocol"))

    @property
    def safe_rule(self) -> SafeRule | None:
        """The safe rule the line was scored under (None: none named, or not one of the
        engine's: the paper's is assumed)."""
        rule = (self.score or {}).get("safe_rule")
        if not isinstance(rule, dict):
            return None
        try:
            return SafeRule(str(rule.get("collateral")), str(rule.get("duplicates")))
        except ValueError:
            return None

    @property
    def rules(self) -> dict[str, int]:
        """Rule hits with their counts (tallies such as destructive_calls left out)."""
        rules = (self.score or {}).get("rules")
        if not isinstance(rules, dict):
            return {}
        return {k: v for k, v in rules.items()
                if type(v) is int and v > 0 and k not in TALLIES}


@dataclass(frozen=True)
class Filter:
    """What the conversation list shows; score-based filters need score lines."""

    category: str | None = None
    failed_only: bool = False
    error_type: str | None = None
    rule: str | None = None

    def accepts(self, row: ConversationRow) -> bool:
        if self.category and row.category != self.category:
            return False
        if self.failed_only and row.official_valid is not False:
            return False
        if self.error_type and row.error_type != self.error_type:
            return False
        return not (self.rule and not row.rules.get(self.rule))

    def apply(self, rows: Sequence[ConversationRow]) -> list[ConversationRow]:
        return [r for r in rows if self.accepts(r)]


def error_types(rows: Sequence[ConversationRow]) -> list[str]:
    return sorted({r.error_type for r in rows if r.error_type})


def hit_rules(rows: Sequence[ConversationRow]) -> list[str]:
    """Rules hit in some conversation, in the engine's rule order."""
    hit = {k for r in rows for k in r.rules}
    return [k for k in RULES if k in hit]


def _row(entry_id: str, category: str, entry: dict) -> ConversationRow:
    result = entry.get("result")
    if type(result) is not list:
        return ConversationRow(entry_id, category, 0, 0, inference_error=True)
    return ConversationRow(entry_id, category, len(result),
                           sum(len(t) for t in result if isinstance(t, list)))


# ---------------------------------------------------------------- one run


class RunBrowser:
    """A run's conversations: listed from the files, replayed one at a time on demand."""

    def __init__(self, ref: RunRef, effects: Effects | None = None, *, detector: str = "strict",
                 cache_dir: Path | None = None, keep: int = 16) -> None:
        self.ref = ref
        self.effects = effects
        self.detector = detector
        self.cache_dir = cache_dir
        self._loaded: dict[str, LoadedFile] = {}
        self._rows: list[ConversationRow] | None = None
        self._scores: dict[str, dict] = {}
        self._scores_path: Path | None = None
        self.mismatch: str | None = None  # why the score lines found were not used
        self.untrusted: str | None = None  # a score file this install did not write (unused)
        self._flags: list[str] | None = None  # the decode audit's warnings, once computed
        self.score_problems: list[Problem] = []
        self._views: OrderedDict[str, ConversationView] = OrderedDict()
        self._keep = keep
        self._handler: Any = None

    # listing ---------------------------------------------------------

    def loaded(self, category: str) -> LoadedFile:
        if category not in self._loaded:
            rf = next(f for f in self.ref.files if f.category == category)
            self._loaded[category] = load_result_file(rf)
        return self._loaded[category]

    def rows(self) -> list[ConversationRow]:
        """Every conversation in the run's files, with its score line when there is one."""
        if self._rows is None:
            self._read_scores()
            rows = []
            for rf in self.ref.files:
                for entry_id, entry in self.loaded(rf.category).entries.items():
                    row = _row(entry_id, rf.category, entry)
                    row.score = self._scores.get(entry_id)
                    rows.append(row)
            self._rows = rows
        return self._rows

    def missing(self) -> int:
        """Conversations of the run's categories absent from its files (scored as failed)."""
        return sum(len(self.loaded(c).missing) for c in self.ref.categories)

    def wanted_settings(self) -> dict:
        """What this browser replays with (:func:`~careful_engine.scoring.settings.scored_with`):
        a score line made otherwise would contradict the stepper."""
        from careful_engine.scoring.settings import scored_with

        return scored_with(self.effects, self.detector, self.decoder_used())

    def decoder_used(self) -> str | None:
        """The decoder key scoring uses for this run: none where no step needs decoding (all
        inference errors), as ``careful score`` records it."""
        needs = any(needs_decoder(self.loaded(c)) for c in self.ref.categories)
        return self.ref.decoder if needs else None

    def _read_scores(self) -> None:
        """The newest score file made with this browser's settings; the newest other one's
        differences go to :attr:`mismatch` (its lines are not used)."""
        from careful_engine.scoring.settings import KEY, differences

        self._scores, self._scores_path, self.mismatch = {}, None, None
        self.score_problems, self._flags = [], None
        wanted = None
        self.untrusted = None
        for path in score_paths(self.ref, self.cache_dir):
            try:
                scores = read_scores(path, self.ref.model, self.score_problems,
                                     check=lambda data, p=path: untrusted(p, data,
                                                                          self.ref.files))
            except OSError as e:
                self.score_problems.append(Problem(str(path), f"cannot read: {e}"))
                continue
            except Untrusted as e:  # planted, edited, or another install's: never shown
                self.untrusted = self.untrusted or f"{path}: {e}; not used"
                continue
            if not scores:
                continue
            wanted = wanted or self.wanted_settings()
            seen: list = []  # the distinct settings of the lines (one, normally)
            for row in scores.values():
                if row.get(KEY) not in seen:
                    seen.append(row.get(KEY))
            diffs = sorted({d for found in seen for d in differences(found, wanted)})
            if diffs:
                self.mismatch = self.mismatch or (f"{path}: scored with " + "; ".join(diffs))
                continue
            self._scores, self._scores_path, self.mismatch = scores, path, None
            return

    @property
    def scores_path(self) -> Path | None:
        self.rows()
        return self._scores_path

    @property
    def scored(self) -> bool:
        """Every listed conversation has a score line made with this browser's settings."""
        rows = self.rows()
        return bool(rows) and all(r.scored for r in rows)

    @property
    def stale(self) -> bool:
        """Score lines made with other settings, or older than a result file."""
        path = self.scores_path
        if self.mismatch is not None:
            return True
        if path is None:
            return False
        newest = max(rf.path.stat().st_mtime for rf in self.ref.files)
        return path.stat().st_mtime < newest

    def decode_flags(self) -> list[str]:
        """The decode audit's warnings (``careful score`` prints them) from the score lines:
        a decoder that (almost) never decodes is not model behaviour."""
        from careful_engine.analysis.decode_audit import DecodeStats
        from careful_engine.core.checker import INFERENCE_ERROR
        from careful_engine.core.trajectory import Outcome
        from careful_engine.scoring.score import MISSING

        self.rows()
        if not self._scores:
            return []
        if self._flags is not None:
            return self._flags
        st = DecodeStats(self.ref.model, None, self.ref.decoder)
        outcomes = {o.value: o for o in Outcome}
        for line in self._scores.values():
            st.conversations += 1
            error = line.get("official_error_type")
            steps = line.get("steps") if isinstance(line.get("steps"), dict) else {}
            if error == MISSING:
                st.missing += 1
            elif error == INFERENCE_ERROR and not any(
                    isinstance(v, int) and v for v in steps.values()):
                st.inference_errors += 1
            for k, v in steps.items():
                if k in outcomes and isinstance(v, int) and v > 0:
                    st.steps[outcomes[k]] += v
        self._flags = [f.message for f in st.flags() if f.kind != "odd_shape"]
        return self._flags

    def problems(self) -> list[Problem]:
        """What was wrong with the run's files (result files, then score files)."""
        self.rows()
        return [p for c in self.ref.categories for p in self.loaded(c).problems] + list(
            self.score_problems)

    def budget_stopped(self) -> list[Problem]:
        """The conversations of the score lines used whose replay the budget stopped
        (``replay_stopped``), in ``careful score``'s words for its input problems (lines from
        before that field are other engine code's: never used)."""
        where = str(self._scores_path) if self._scores_path is not None else str(self.ref.run)
        return [Problem(where, stopped_reason(why, r.error_type, self.effects is not None),
                        id=r.id)
                for r in self.rows() if r.score is not None
                and isinstance(why := r.score.get("replay_stopped"), str)]

    def reload(self) -> None:
        """Forget the listing (after scoring) and the opened conversations."""
        self._rows = None
        self._views.clear()

    def summaries(self) -> dict[str, dict]:
        """Score lines by id (missing conversations included)."""
        self.rows()
        return self._scores

    # opening ---------------------------------------------------------

    def handler(self) -> Any:
        """The run's bfcl decoder (imported on first use; a second or so)."""
        if self._handler is None and any(needs_decoder(self.loaded(c))
                                         for c in self.ref.categories):
            self._handler = bfcl.handler(self.ref.decoder)
        return self._handler

    def entry(self, entry_id: str) -> dict | None:
        return self.loaded(bfcl.category_of(entry_id)).entries.get(entry_id)

    def open(self, entry_id: str) -> ConversationView:
        """Decode, replay, count the rules and blame one conversation (cached)."""
        view = self._views.get(entry_id)
        if view is not None:
            self._views.move_to_end(entry_id)
            return view
        from careful_engine.core.decode import decode_entry
        from careful_engine.core.replay import replay
        from careful_engine.scoring.blame import blame
        from careful_engine.scoring.rules import evaluate

        entry = self.entry(entry_id)
        if entry is None:
            raise KeyError(f"{entry_id} is not in {self.ref.name}")
        conv = bfcl.conversation(entry_id)
        handler = self.handler() if type(entry.get("result")) is list else None
        trajectory = decode_entry(entry, handler)
        with REPLAY_LOCK:
            trace = replay(conv, trajectory, model_name=self.ref.model)
        rules = evaluate(trace, self.effects, self.detector) if self.effects else None
        culprit = blame(trace, self.effects)  # as careful score blames it
        view = build_view(trace, rules, culprit, entry, self._scores.get(entry_id))
        self._views[entry_id] = view
        while len(self._views) > self._keep:
            self._views.popitem(last=False)
        return view
