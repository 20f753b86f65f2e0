"""Scoring runs: decode, replay and bfcl's verdict per conversation; accuracy per category."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import bfcl
from .decode import decode_entry
from .process import BfclProcess
from .replay import ConversationTrace, replay
from .runs import LoadedFile, Problem, ResultFile, find_result_files
from .trajectory import Outcome, Verdict

MISSING = "careful:missing_entry"


@dataclass
class ConversationResult:
    model: str
    category: str
    id: str
    verdict: Verdict
    decode: Counter = field(default_factory=Counter)
    calls: int = 0
    failed_calls: int = 0
    trace: ConversationTrace | None = None

    def to_json(self) -> dict[str, Any]:
        v = self.verdict
        return {
            "model": self.model,
            "category": self.category,
            "id": self.id,
            "official_valid": v.valid,
            "official_error_type": v.error_type,
            "official_error_message": v.error_message,
            "official_failed_turn": v.turn,
            "steps": {o.value: self.decode.get(o, 0) for o in Outcome},
            "model_calls": self.calls,
            "model_failed_calls": self.failed_calls,
        }


@dataclass
class CategoryScore:
    model: str
    category: str
    results: list[ConversationResult]
    file: ResultFile | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def correct(self) -> int:
        return sum(r.verdict.valid for r in self.results)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0


@dataclass
class ModelScore:
    model: str
    decoder: str | None
    categories: dict[str, CategoryScore] = field(default_factory=dict)

    def mean_accuracy(self) -> float:
        """bfcl's unweighted multi-turn mean: an absent category counts as 0."""
        return sum(
            self.categories[c].accuracy if c in self.categories else 0.0 for c in bfcl.CATEGORIES
        ) / len(bfcl.CATEGORIES)


def score_file(
    loaded: LoadedFile,
    handler: Any | None,
    *,
    keep_traces: bool = False,
    on_entry: Callable[[], None] | None = None,
) -> CategoryScore:
    """Score one category file: every conversation of the category, missing ones failed."""
    rf = loaded.file
    process = BfclProcess()  # bfcl's process-global state, fresh as in a new process
    by_id = {c.id: c for c in bfcl.conversations(rf.category)}
    results: list[ConversationResult] = []
    for entry_id in sorted(by_id, key=bfcl.sort_key):
        conv = by_id[entry_id]
        entry = loaded.entries.get(entry_id)
        if entry is None:
            results.append(ConversationResult(rf.model, rf.category, entry_id,
                                              Verdict(False, MISSING, "entry missing")))
            if on_entry:
                on_entry()
            continue
        trajectory = decode_entry(entry, handler)
        trace = replay(conv, trajectory, model_name=rf.model, process=process)
        decode = Counter(s.outcome for turn in (trajectory.turns or []) for s in turn)
        calls = trace.model.calls() if trace.model else []
        results.append(ConversationResult(
            rf.model, rf.category, entry_id, trace.verdict, decode,
            len(calls), sum(not c.success for c in calls), trace if keep_traces else None,
        ))
        if on_entry:
            on_entry()
    return CategoryScore(rf.model, rf.category, results, rf, list(loaded.problems))


def needs_decoder(loaded: LoadedFile) -> bool:
    return any(
        type(e.get("result")) is list and any(isinstance(t, list) and t for t in e["result"])
        for e in loaded.entries.values()
    )


def write_score_file(score: CategoryScore, loaded: LoadedFile, out_dir: Path) -> Path:
    """A bfcl-compatible score file: a header line, then one line per failed entry."""
    path = out_dir / "score" / score.model / "multi_turn" / f"BFCL_v4_{score.category}_score.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    gt = {c.id: c for c in bfcl.conversations(score.category)}
    with open(path, "w", encoding="utf-8") as f:
        header = {"accuracy": score.accuracy, "correct_count": score.correct,
                  "total_count": score.total}
        f.write(json.dumps(header) + "\n")
        for r in score.results:
            if r.verdict.valid:
                continue
            entry = loaded.entries.get(r.id, {})
            prompt = {k: v for k, v in gt[r.id].raw.items() if k != "function"}
            line = {
                "id": r.id,
                "model_name": score.model,
                "test_category": score.category,
                "valid": False,
                "error": r.verdict.to_json()["error"],
                "prompt": prompt,
                "model_result_raw": entry.get("result"),
                "possible_answer": gt[r.id].ground_truth,
            }
            f.write(json.dumps(line, default=str, ensure_ascii=False) + "\n")
    return path


def discover(root: Path) -> tuple[dict[str, list[ResultFile]], list[Problem]]:
    files, problems = find_result_files(root)
    by_model: dict[str, list[ResultFile]] = {}
    for rf in files:
        by_model.setdefault(rf.model, []).append(rf)
    for model, rfs in by_model.items():
        best: dict[str, ResultFile] = {}
        for rf in rfs:
            other = best.get(rf.category)
            if other is not None:
                keep, drop = (rf, other) if rf.version > other.version else (other, rf)
                problems.append(Problem(str(drop.path), f"another {rf.category} file for "
                                        f"{model} ({keep.path}) is used instead"))
                rf = keep
            best[rf.category] = rf
        by_model[model] = sorted(best.values(), key=lambda r: bfcl.CATEGORIES.index(r.category))
    return by_model, problems


def manifest_decoder(rf: ResultFile) -> str | None:
    """The decoder named by a ``careful_run.json`` in the model folder, if any."""
    folder = rf.path.parent.parent if rf.path.parent.name == "multi_turn" else rf.path.parent
    path = folder / "careful_run.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("decoder")
    except (json.JSONDecodeError, AttributeError):
        return None
