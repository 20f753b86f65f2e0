"""Audit of BFCL score folders (single-turn included): the irrelevance decode-failure signature
and the overall accuracy as bfcl's code weights it.

bfcl's irrelevance check (eval_runner.py, ``_evaluate_single_relevance_entry``) credits an
entry as a correct abstention when ``decode_ast`` raises, so an output that tried to call a
function and failed to parse scores like an abstention. A model whose relevance is 0 while its
irrelevance is at or near 1 is then reporting a decoder that never succeeds, not perfect
judgement; :func:`audit` flags that pair. A score file lists only failed entries, so the
credited entries are read from the result files (when found) and their raw output is checked
for an attempted call.

The overall accuracy is recomputed as bfcl-eval 2026.3.23 computes it
(eval_runner_helper.py, ``generate_leaderboard_csv``): non-live = unweighted mean of simple
(itself the unweighted mean of python, java, javascript), multiple, parallel and
parallel_multiple; live = mean of the four live AST categories weighted by entry count;
irrelevance = unweighted mean of irrelevance and live_irrelevance; multi-turn = unweighted mean
of the four categories; agentic = unweighted mean of web search (base, no_snippet) and memory
(kv, vector, rec_sum). Overall = 10 non-live + 10 live + 10 irrelevance + 30 multi-turn
+ 40 agentic, over 100. A category not evaluated counts as 0. live_relevance is shown by bfcl
but enters no block of the overall.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from careful_engine.analysis.bfcl_scores import NOT_A_HEADER, read_score_lines
from careful_engine.core import bfcl
from careful_engine.core.figures import percent_text
from careful_engine.core.runs import (
    Problem,
    content_lines,
    depth_over,
    line_over_cap,
    newest_per_category,
    search_files,
)
from careful_engine.core.safe_read import read_regular
from careful_engine.scoring.result import SCORES_NAME

SCORE_FILE = re.compile(r"^BFCL_v(\d+)_(\w+?)_score\.json$")
RESULT_FILE = re.compile(r"^BFCL_v(\d+)_(\w+?)_result\.json$")
# bfcl's grouping folders between the model folder and a score file
STRUCTURE_DIRS = frozenset({"non_live", "live", "multi_turn", "agentic", "memory", "kv",
                            "vector", "rec_sum", "format_sensitivity", "web_search"})
V3_ALIASES = {"simple": "simple_python", "java": "simple_java", "javascript": "simple_javascript"}

# eval_runner_helper.py:509-518 (bfcl-eval 2026.3.23): calculate_percentage_weighted_accuracy
WEIGHTS = {"non_live": 10, "live": 10, "irrelevance": 10, "multi_turn": 30, "agentic": 40}
BLOCKS = tuple(WEIGHTS)
LIVE_AST = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
IRRELEVANCE = ("irrelevance", "live_irrelevance")
RELEVANCE = "live_relevance"
AST_CATEGORIES = ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel",
                  "parallel_multiple", *LIVE_AST)
NEAR_ONE = 0.9  # irrelevance "at or near 1"
DECODER_FAILED = "decoder_failed"  # bfcl's ast_decoder / relevance_error error types


@cache
def dataset_count(category: str) -> int:
    """Entries in bfcl-eval's dataset file for a plain category (0 if not a plain file).

    bfcl weights the live block by entry counts and uses the dataset's count for a live
    category that was not evaluated (``get_category_score``)."""
    path = bfcl.DATA_DIR / f"BFCL_v4_{category}.json"
    if not path.exists():
        return 0
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


@dataclass
class ScoreFile:
    """One ``BFCL_v*_<category>_score.json``: its header and the failed entries' ids."""

    model: str
    category: str
    version: int
    path: Path
    accuracy: float
    correct: int | None
    total: int
    failed: dict[str, dict] = field(default_factory=dict)  # id -> error_type, first error


@dataclass
class ModelScores:
    model: str
    files: dict[str, ScoreFile] = field(default_factory=dict)

    def accuracy(self, category: str) -> float | None:
        f = self.files.get(category)
        return f.accuracy if f else None


def _model_of(path: Path) -> str:
    """The model folder: the first folder above the file that is not one of bfcl's groups."""
    folder = path.parent
    while folder.name in STRUCTURE_DIRS:
        folder = folder.parent
    return folder.name or "?"


def read_score_file(path: Path, model: str) -> tuple[ScoreFile | None, list[Problem]]:
    """Parse a score file (:func:`~careful_engine.analysis.bfcl_scores.read_score_lines`):
    line 1 the header, every later line one failed entry; None without a header."""
    m = SCORE_FILE.match(path.name)
    assert m, path
    version, category = int(m.group(1)), V3_ALIASES.get(m.group(2), m.group(2))
    lines = read_score_lines(path)
    if not lines.readable:
        return None, [replace(p, message=f"{p.message}; skipped") for p in lines.problems]
    if not lines.has_header:
        return None, [Problem(str(path), f"{NOT_A_HEADER}; file skipped", 1)]
    out = ScoreFile(model, category, version, path, lines.accuracy, lines.correct, lines.total,
                    {i: {"error_type": f.error_type or "", "error": f.error}
                     for i, f in lines.failed.items()})
    return out, lines.problems


def find_score_files(root: Path) -> tuple[dict[str, ModelScores], list[Problem]]:
    """Every score file under ``root``, per model folder: of one category's, the newest
    version (:func:`~careful_engine.core.runs.newest_per_category`; each other one a problem
    naming it)."""
    read: dict[str, list[ScoreFile]] = {}
    problems: list[Problem] = []
    paths = [root] if root.is_file() else sorted(search_files(root, "_score.json", problems))
    for path in paths:
        if not SCORE_FILE.match(path.name):
            continue
        model = _model_of(path)
        sf, probs = read_score_file(path, model)
        problems.extend(probs)
        if sf is not None:
            read.setdefault(model, []).append(sf)
    models: dict[str, ModelScores] = {}
    for model, files in read.items():
        best, passed_over = newest_per_category(files, model, "score file")
        problems.extend(passed_over)
        models[model] = ModelScores(model, best)
    return models, problems


# ---------------------------------------------------------------- the overall, as bfcl weights it


@dataclass
class Overall:
    """bfcl's five blocks and its weighted overall (fractions); absent categories count 0."""

    blocks: dict[str, float]
    overall: float
    unweighted: float  # the plain mean of the five blocks, for contrast
    relevance: float | None
    missing: list[str]  # scoring categories with no score file

    @property
    def irrelevance_share(self) -> float | None:
        """The share of the overall that the irrelevance block contributes."""
        if not self.overall:
            return None
        w = WEIGHTS["irrelevance"] / sum(WEIGHTS.values())
        return w * self.blocks["irrelevance"] / self.overall


def _acc(ms: ModelScores, category: str) -> float:
    return ms.accuracy(category) or 0.0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def overall(ms: ModelScores) -> Overall:
    """Recompute the overall accuracy from the score headers with bfcl's weights."""
    simple = _mean([_acc(ms, c) for c in ("simple_python", "simple_java", "simple_javascript")])
    non_live = _mean([simple, *[_acc(ms, c) for c in ("multiple", "parallel",
                                                       "parallel_multiple")]])
    counts = {c: ms.files[c].total if c in ms.files else dataset_count(c) for c in LIVE_AST}
    total = sum(counts.values())
    live = sum(_acc(ms, c) * counts[c] for c in LIVE_AST) / total if total else 0.0
    irrelevance = _mean([_acc(ms, c) for c in IRRELEVANCE])
    multi_turn = _mean([_acc(ms, c) for c in ("multi_turn_base", "multi_turn_miss_func",
                                              "multi_turn_miss_param",
                                              "multi_turn_long_context")])
    web = _mean([_acc(ms, c) for c in ("web_search_base", "web_search_no_snippet")])
    memory = _mean([_acc(ms, c) for c in ("memory_kv", "memory_vector", "memory_rec_sum")])
    agentic = _mean([web, memory])
    blocks = {"non_live": non_live, "live": live, "irrelevance": irrelevance,
              "multi_turn": multi_turn, "agentic": agentic}
    weighted = sum(WEIGHTS[b] * blocks[b] for b in BLOCKS) / sum(WEIGHTS.values())
    scoring = [*AST_CATEGORIES, *IRRELEVANCE, RELEVANCE, "multi_turn_base",
               "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context",
               "web_search_base", "web_search_no_snippet", "memory_kv", "memory_vector",
               "memory_rec_sum"]
    return Overall(blocks, weighted, _mean(list(blocks.values())), ms.accuracy(RELEVANCE),
                   [c for c in scoring if c not in ms.files])


# ---------------------------------------------------------------- credited irrelevance entries

_KEYWORD_ARG = re.compile(r"\(\s*[A-Za-z_]\w*\s*=")
_NAME_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_DOT_NAME = re.compile(r"\.[A-Za-z_]")


def _python_call(text: str) -> bool:
    """Whether ``text`` holds a Python call with a keyword argument: a match of
    ``\\b[A-Za-z_][\\w.]*\\(\\s*[A-Za-z_]\\w*\\s*=``, found in linear time (the regex scans
    the rest of a run of ``a.a.a.`` from every name in it: 21 s on one 80 KB line). Each
    ``(name=`` is checked against the run of word characters and dots just before it: the
    regex matches where a name starts that run or follows one of its dots."""
    for m in _KEYWORD_ARG.finditer(text):
        j = m.start()
        while j > 0 and (text[j - 1] == "." or text[j - 1] == "_" or text[j - 1].isalnum()):
            j -= 1
        if j < m.start() and (text[j] in _NAME_FIRST or _DOT_NAME.search(text, j, m.start())):
            return True
    return False


_CALL_MARKERS: list[tuple[str, Callable[[str], object]]] = [
    ("<tool_call>", re.compile(r"<\s*tool_call", re.I).search),
    ("<function>", re.compile(r"<\s*function(?:_call|s)?\b", re.I).search),
    ("[TOOL_CALLS]", re.compile(r"\[TOOL_CALLS\]").search),
    ("<|python_tag|>", re.compile(r"<\|python_tag\|>").search),
    ("<|tool_call|>", re.compile(r"<\|tool_calls?(?:_begin|_start)?\|>").search),
    ("JSON call", re.compile(r"[\"']name[\"']\s*:\s*[\"'][^\"']+[\"']\s*,\s*"
                             r"[\"'](?:arguments|parameters|args)[\"']\s*:").search),
    ("python call", _python_call),
]


def attempted_call(raw: Any) -> str | None:
    """The marker of an attempted function call in a raw model output, or None.

    Heuristic and format-agnostic where possible: tool-call tags and special tokens of common
    chat templates, a JSON object with a name and arguments, a Python call with keyword
    arguments, or a structured (function-calling) output holding a call.
    """
    if isinstance(raw, dict):
        return "structured call" if raw else None
    if isinstance(raw, list):
        if any(isinstance(x, dict) and x for x in raw):
            return "structured call"
        raw = "\n".join(str(x) for x in raw if x)
    if not isinstance(raw, str) or not raw.strip():
        return None
    for name, found in _CALL_MARKERS:
        if found(raw):
            return name
    return None


def is_empty_output(raw: Any) -> bool:
    if raw is None:
        return True
    if isinstance(raw, str):
        return raw.strip() in ("", "[]", "[[]]", "{}", "None")
    if isinstance(raw, (list, dict)):
        return all(is_empty_output(x) for x in raw) if isinstance(raw, list) else not raw
    return False


@dataclass
class Credited:
    """The entries of an irrelevance category that bfcl credited, by what their output holds."""

    category: str
    credited: int  # from the score header
    failed: int
    result_file: Path | None
    read: int = 0  # credited entries found in the result file
    empty: int = 0
    calls: int = 0
    other: int = 0
    markers: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)  # ids with an attempted call

    @property
    def call_share(self) -> float | None:
        return self.calls / self.read if self.read else None

    def marker_summary(self) -> str:
        """The call markers found, commonest first: ``"<tool_call> 3, json 1"``."""
        return ", ".join(f"{k} {v}" for k, v in sorted(self.markers.items(),
                                                         key=lambda kv: -kv[1]))


def find_result_file(results: Path, model: str, category: str) -> Path | None:
    """The result file of (model, category) under a result folder, if any."""
    best: tuple[int, Path] | None = None
    for path in search_files(results, f"_{category}_result.json", []):
        m = RESULT_FILE.match(path.name)
        if not m or m.group(2) != category:
            continue
        if model not in path.relative_to(results).parts and results.name != model:
            continue
        version = int(m.group(1))
        if best is None or version > best[0]:
            best = (version, path)
    return best[1] if best else None


def credited_irrelevance(sf: ScoreFile, results: Path | None) -> Credited:
    """Credited entries = result entries absent from the score file's failed lines."""
    correct = sf.correct if sf.correct is not None else round(sf.accuracy * sf.total)
    out = Credited(sf.category, correct, len(sf.failed), None)
    if results is None:
        return out
    out.result_file = find_result_file(results, sf.model, sf.category)
    if out.result_file is None:
        return out
    try:
        text = read_regular(out.result_file).decode("utf-8", errors="replace")
    except OSError:
        return out
    for _, line in content_lines(text):
        if line_over_cap(line):  # parsed, it could take gigabytes (as careful score)
            continue
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if (not isinstance(entry, dict) or not isinstance(entry.get("id"), str)
                or depth_over(entry) or entry["id"] in sf.failed):
            continue
        out.read += 1
        raw = entry.get("result")
        marker = attempted_call(raw)
        if marker:
            out.calls += 1
            out.markers[marker] = out.markers.get(marker, 0) + 1
            if len(out.examples) < 5:
                out.examples.append(str(entry.get("id")))
        elif is_empty_output(raw):
            out.empty += 1
        else:
            out.other += 1
    return out


# ---------------------------------------------------------------- flags


@dataclass
class Flag:
    model: str
    kind: str  # irrelevance_signature | ast_decode_failures | credited_calls
    message: str

    def __str__(self) -> str:
        return f"{self.model}: {self.message}"


@dataclass
class ModelAudit:
    model: str
    scores: ModelScores
    overall: Overall
    credited: list[Credited]
    ast_failed: int  # AST entries failed with a decoder failure
    ast_total: int
    flags: list[Flag]


def audit_model(ms: ModelScores, results: Path | None, near: float = NEAR_ONE) -> ModelAudit:
    ov = overall(ms)
    credited = [credited_irrelevance(ms.files[c], results) for c in IRRELEVANCE
                if c in ms.files]
    ast_total = sum(ms.files[c].total for c in AST_CATEGORIES if c in ms.files)
    ast_failed = sum(DECODER_FAILED in e["error_type"] or "Failed to decode" in e["error"]
                     for c in AST_CATEGORIES if c in ms.files
                     for e in ms.files[c].failed.values())
    irr = {c: ms.accuracy(c) for c in IRRELEVANCE if c in ms.files}
    near_one = {c: a for c, a in irr.items() if a >= near}
    flags: list[Flag] = []
    irr_text = ", ".join(f"{c} {percent_text(a)}" for c, a in irr.items())
    if ov.relevance is not None and ov.relevance == 0 and near_one:
        flags.append(Flag(ms.model, "irrelevance_signature",
                          f"relevance 0.0 with {irr_text}: a decoder that never succeeds, not "
                          "perfect judgement (bfcl credits a failed decode as an abstention)"))
    if ast_total and ast_failed >= near * ast_total and near_one:
        flags.append(Flag(ms.model, "ast_decode_failures",
                          f"{ast_failed} of {ast_total} AST entries failed to decode while "
                          f"{irr_text}: the irrelevance credit comes from the decoder failing"))
    for cr in credited:
        if cr.read and cr.calls * 2 >= cr.read:
            flags.append(Flag(ms.model, "credited_calls",
                              f"{cr.category}: {cr.calls} of {cr.read} credited entries contain "
                              f"an attempted call ({cr.marker_summary()})"))
    return ModelAudit(ms.model, ms, ov, credited, ast_failed, ast_total, flags)


def locate(root: Path, results: Path | None = None) -> tuple[Path, Path | None]:
    """The score folder to read and the result folder next to it.

    ``root`` may be a score folder (or a folder inside one) or a run folder holding
    ``score/`` (and ``result/``). Without ``results``, the result folder is the ``result``
    sibling of the nearest folder named ``score``, if it exists.
    """
    score = root
    if root.is_dir() and (root / "score").is_dir() and root.name != "score":
        score = root / "score"
    if results is not None:
        return score, results
    for folder in [score, *score.parents]:
        if folder.name == "score" and (folder.parent / "result").is_dir():
            return score, folder.parent / "result"
    return score, None


def written_by_careful(score: Path) -> bool:
    """Whether the score files under ``score`` (a score folder, or a folder or file inside
    one) are careful's own: ``careful score`` writes its ``score/`` folder beside
    ``conversations.jsonl``, which bfcl never writes."""
    for folder in [score, *score.parents]:
        if folder.name == "score":
            return (folder.parent / SCORES_NAME).is_file()
    return False


def audit(root: Path, results: Path | None = None,
          near: float = NEAR_ONE) -> tuple[list[ModelAudit], Path | None, list[Problem]]:
    """Audit every model's score files under ``root``."""
    score, result_dir = locate(root, results)
    models, problems = find_score_files(score)
    return ([audit_model(ms, result_dir, near) for ms in models.values()], result_dir, problems)
