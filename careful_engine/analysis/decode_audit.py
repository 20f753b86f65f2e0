"""What the decoder made of a run: per category, the share of logged steps that decoded to
calls, to no call, and that failed to decode, with the commonest failure messages.

bfcl drops a step that fails to decode without a word, so a decoder that does not fit the
run's output format turns every answer into silence, and the silence reads as behaviour (a
model that "never acts"). :func:`flags` names that case instead: a run in which (almost) no
step decodes to calls while most steps fail to decode is flagged as a probable decoder
mismatch. It works on scores (:class:`CategoryScore`, :class:`ModelScore`, :class:`RunScore`)
or, without replaying anything, on a run folder (:func:`audit_run`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from careful_engine.analysis.leaderboard import label_entries
from careful_engine.core import bfcl
from careful_engine.core.checker import INFERENCE_ERROR
from careful_engine.core.decode import decode_entry
from careful_engine.core.figures import percent_text
from careful_engine.core.runs import Problem, result_model_folder
from careful_engine.core.trajectory import Outcome, Trajectory
from careful_engine.scoring.decoders import DecoderChoice
from careful_engine.scoring.rules import ASKED_READ, ASKED_UNREAD, no_call_text, unread_note
from careful_engine.scoring.score import (
    MISSING,
    CategoryScore,
    DecoderUnavailable,
    ModelScore,
    RunScore,
    folder_decoder,
    load_run,
)

MISMATCH_MAX_CALLS = 0.05  # flag when fewer than 5% of steps decode to calls ...
# ... while at least 40% fail to decode (the text answer closing each turn is no call, so a
# decoder that fails every step of calls leaves a run of one call step a turn near half)
MISMATCH_MIN_FAILED = 0.4
MIN_STEPS = 10  # too few steps to judge a decoder

_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_NUMBER = re.compile(r"(?<![A-Za-z_])[-+]?\d+(?:\.\d+)?")
_SPACE = re.compile(r"\s+")


def normalise(message: str, limit: int = 160) -> str:
    """A decode failure message with positions, numbers and quoted text stripped, so that
    messages that differ only there group together."""
    first = message.strip().splitlines()[0] if message.strip() else ""

    def quoted(m: re.Match[str]) -> str:
        body = m.group(0)[1:-1]
        keep = len(body) <= 24 and re.fullmatch(r"[\w.<>-]*", body) and not body.isdigit()
        return m.group(0) if keep else m.group(0)[0] + "…" + m.group(0)[-1]

    text = _QUOTED.sub(quoted, first)
    text = _NUMBER.sub("N", text)
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class DecodeFlag:
    """A finding about the decoder of one model (and category, if not the whole run)."""

    model: str
    category: str | None
    kind: str  # decoder_mismatch | no_calls | odd_shape | no_text | inference_errors
    message: str

    def __str__(self) -> str:
        return self.labelled(self.model)

    def labelled(self, label: str) -> str:
        """The finding under ``label`` (an entry's label: two runs' model folders of one name
        told apart) instead of the model folder's name."""
        where = label + (f" {bfcl.short_name(self.category)}" if self.category else "")
        return f"{where}: {self.message}"


@dataclass
class DecodeStats:
    """Decode outcomes of one model's steps, in one category or (category None) in all."""

    model: str
    category: str | None
    decoder: str | None
    conversations: int = 0
    inference_errors: int = 0  # entries whose result is not a list: no steps at all
    missing: int = 0  # entries absent from the result file
    steps: Counter = field(default_factory=Counter)  # Outcome -> steps
    messages: Counter = field(default_factory=Counter)  # normalised failure -> steps
    examples: dict[str, str] = field(default_factory=dict)  # normalised -> one raw message
    shapes: Counter = field(default_factory=Counter)  # odd turn shape -> turns
    # conversations whose turns without a call had text (asked_read) or, all of them, none
    reading: Counter = field(default_factory=Counter)

    @property
    def total_steps(self) -> int:
        return sum(self.steps.values())

    def share(self, outcome: Outcome) -> float | None:
        return self.steps.get(outcome, 0) / self.total_steps if self.total_steps else None

    def add_message(self, raw: str) -> None:
        key = normalise(raw)
        self.messages[key] += 1
        self.examples.setdefault(key, raw[:300])

    def add_trajectory(self, traj: Trajectory) -> None:
        self.conversations += 1
        if traj.turns is None:
            self.inference_errors += 1
            return
        for problem in traj.problems:  # "turn N: <shape>"
            self.shapes[problem.partition(": ")[2] or problem] += 1
        read = [r for turn in traj.turns if (r := no_call_text(turn)) is not None]
        if read:
            self.reading[ASKED_READ if any(read) else ASKED_UNREAD] += 1
        for turn in traj.turns:
            for step in turn:
                self.steps[step.outcome] += 1
                if step.outcome is Outcome.DECODE_ERROR:
                    self.add_message(step.error or "")

    def merge(self, other: DecodeStats) -> None:
        self.conversations += other.conversations
        self.inference_errors += other.inference_errors
        self.missing += other.missing
        self.steps.update(other.steps)
        self.messages.update(other.messages)
        self.shapes.update(other.shapes)
        self.reading.update(other.reading)
        for k, v in other.examples.items():
            self.examples.setdefault(k, v)

    def flags(self) -> list[DecodeFlag]:
        """Decoder mismatch (few calls, most steps failed), no calls at all, turns of an odd
        shape (strings, objects), or no steps."""
        out = []
        n = self.total_steps
        calls = self.share(Outcome.CALLS) or 0.0
        failed = self.share(Outcome.DECODE_ERROR) or 0.0
        dec = f" (decoder {self.decoder})" if self.decoder else ""
        if n >= MIN_STEPS and calls < MISMATCH_MAX_CALLS and failed >= MISMATCH_MIN_FAILED:
            out.append(DecodeFlag(
                self.model, self.category, "decoder_mismatch",
                f"decoder mismatch? {100 * failed:.0f}% of {n} steps failed to decode{dec}, "
                f"{percent_text(calls)}% decoded to calls: its silence is not behaviour"))
        elif n >= MIN_STEPS and calls < MISMATCH_MAX_CALLS:
            out.append(DecodeFlag(
                self.model, self.category, "no_calls",
                f"decoder found no calls? {percent_text(calls)}% of {n} steps decoded to calls"
                f"{dec}; check the decoder before reading this as behaviour"))
        for shape, turns in self.shapes.most_common(3):
            out.append(DecodeFlag(self.model, self.category, "odd_shape",
                                  f"{shape} ({turns} turn{'s' if turns != 1 else ''})"))
        note = unread_note(self.reading) if not out else None  # (a mismatch says more)
        if note:
            out.append(DecodeFlag(self.model, self.category, "no_text", note))
        real = self.conversations - self.missing
        if real and self.inference_errors * 2 >= real:
            left = real - self.inference_errors
            rest = ("nothing to decode" if not left else
                    f"only {left} entr{'y is' if left == 1 else 'ies are'} left to decode")
            out.append(DecodeFlag(
                self.model, self.category, "inference_errors",
                f"{self.inference_errors} of {real} entries are inference errors (no steps "
                f"logged): {rest}"))
        return out


# ---------------------------------------------------------------- from scores


def from_category(cs: CategoryScore, decoder: str | None = None) -> DecodeStats:
    """Decode outcomes of a scored category (failure messages only where traces were kept)."""
    st = DecodeStats(cs.model, cs.category, decoder)
    for r in cs.results:
        traj = r.trace.trajectory if r.trace is not None else None
        if traj is not None:
            st.add_trajectory(traj)
            continue
        st.conversations += 1
        if r.rules is not None:
            st.reading.update({k: n for k, n in r.rules.tallies().items()
                               if k in (ASKED_READ, ASKED_UNREAD)})
        if r.verdict.error_type == MISSING:
            st.missing += 1
        elif r.verdict.error_type == INFERENCE_ERROR and not r.decode:
            st.inference_errors += 1
        st.steps.update(r.decode)
    return st


def from_model(ms: ModelScore) -> list[DecodeStats]:
    """Per category, then the whole model (category None) last."""
    per = [from_category(cs, ms.decoder) for cs in ms.categories.values()]
    total = DecodeStats(ms.model, None, ms.decoder)
    for st in per:
        total.merge(st)
    return [*per, total]


def _flags_of(stats: list[DecodeStats]) -> list[DecodeFlag]:
    """The whole model's flags, then the categories' flags of other kinds."""
    whole = [f for st in stats if st.category is None for f in st.flags()]
    kinds = {f.kind for f in whole}
    return whole + [f for st in stats if st.category is not None for f in st.flags()
                    if f.kind not in kinds]


def flags(score: CategoryScore | ModelScore | RunScore) -> list[DecodeFlag]:
    """Decoder findings for ``careful score``'s output (empty when the decoder looks fine)."""
    if isinstance(score, CategoryScore):
        return from_category(score).flags()
    if isinstance(score, ModelScore):
        return _flags_of(from_model(score))
    return [f for ms in score.scores for f in _flags_of(from_model(ms))]


# ---------------------------------------------------------------- from a run folder


@dataclass
class RunAudit:
    """Decode statistics of every model folder of one run folder."""

    run: Path
    stats: list[DecodeStats]  # per model: its categories, then the model (category None)
    problems: list[Problem]
    unusable: list[str]
    folders: dict[str, Path] = field(default_factory=dict)  # each model folder, by name

    def flags(self) -> list[DecodeFlag]:
        by_model: dict[str, list[DecodeStats]] = {}
        for st in self.stats:
            by_model.setdefault(st.model, []).append(st)
        return [f for sts in by_model.values() for f in _flags_of(sts)]


def audit_run(
    run_dir: Path,
    *,
    decoder: str | None | DecoderChoice = None,
    models: Iterable[str] | None = None,
    on_start: Callable[[int], None] | None = None,
    on_entry: Callable[[], None] | None = None,
) -> RunAudit:
    """Decode every step of every result file under ``run_dir`` (no replay, no verdicts).

    The decoder is chosen as ``careful score`` chooses it: ``decoder`` (a key, or
    ``--decoder``'s :class:`DecoderChoice`), else the folder's ``careful_run.json``, else its
    registry key.
    """
    loaded, problems = load_run(run_dir, models)
    problems = [p for p in problems if not p.message.startswith("id missing")]
    if on_start:
        on_start(sum(len(lf.entries) for fs in loaded.values() for lf in fs))
    audit = RunAudit(run_dir, [], problems, [])
    for model, files in loaded.items():
        audit.folders[model] = result_model_folder(files[0].file.path)
        chosen = (decoder.for_model(run_dir, model, files[0].file)
                  if isinstance(decoder, DecoderChoice) else decoder)
        try:
            key, handler = folder_decoder(model, files, chosen)
        except DecoderUnavailable as e:
            audit.unusable.append(str(e))
            continue
        total = DecodeStats(model, None, key if handler else None)
        for lf in files:
            st = DecodeStats(model, lf.file.category, total.decoder)
            st.missing = len(lf.missing)
            st.conversations = st.missing
            for entry in lf.entries.values():
                st.add_trajectory(decode_entry(entry, handler))
                if on_entry:
                    on_entry()
            audit.stats.append(st)
            total.merge(st)
        audit.stats.append(total)
    return audit


def by_entry(audits: list[RunAudit]) -> tuple[list[tuple[str, list[DecodeStats]]],
                                              list[tuple[str, DecodeFlag]]]:
    """Each model folder's statistics under its entry label (labelled as the leaderboard
    labels entries), and every flag with the same label; empty when nothing was decoded."""
    pairs = [(a.run, st.model) for a in audits for st in a.stats if st.category is None]
    folders = [a.folders.get(st.model) for a in audits for st in a.stats if st.category is None]
    labels = dict(zip(pairs, label_entries(pairs, folders), strict=True))
    table: list[tuple[str, list[DecodeStats]]] = []
    for a in audits:
        by_model: dict[str, list[DecodeStats]] = {}
        for st in a.stats:
            by_model.setdefault(st.model, []).append(st)
        table += [(labels[(a.run, m)], sts) for m, sts in by_model.items()]
    flagged = [(labels[(a.run, f.model)], f) for a in audits for f in a.flags()]
    return table, flagged
