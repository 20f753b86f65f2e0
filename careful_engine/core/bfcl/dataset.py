"""bfcl-eval's data, read from the installed, pinned package: categories, conversations with
their reference trajectories, function docs, and the simulator configuration.

bfcl-eval's ``constants.eval_config`` creates directories under ``BFCL_PROJECT_ROOT`` (by default
inside site-packages) when imported, so a private scratch root is set here, before any import of
bfcl-eval; every other module of this package imports this one first.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from careful_engine.core.user_cache import cache_dir

BFCL_VERSION = "2026.3.23"
CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
SHORT_NAMES = {
    "multi_turn_base": "base",
    "multi_turn_miss_func": "miss_func",
    "multi_turn_miss_param": "miss_param",
    "multi_turn_long_context": "long_context",
}
# the category column headers of the 80-column tables
COLUMN_NAMES = {
    "multi_turn_base": "base",
    "multi_turn_miss_func": "miss_fn",
    "multi_turn_miss_param": "miss_par",
    "multi_turn_long_context": "long_ctx",
}
CATEGORY_NAMES_HELP = ("base, miss_func, miss_param or long_context (the full names and the "
                       "tables' miss_fn, miss_par and long_ctx too)")


def category_named(name: str) -> str | None:
    """The category a user names: its full name (``multi_turn_base``), its short name
    (``base``) or its table column (``long_ctx``); None for anything else."""
    name = name.strip()
    for full in CATEGORIES:
        if name in (full, SHORT_NAMES[full], COLUMN_NAMES[full]):
            return full
    return None


def short_name(category: str) -> str:
    """A category's short name (``base``, ``miss_func``, ...); other names as they are."""
    return SHORT_NAMES.get(category, category)


MAXIMUM_STEP_LIMIT = 20  # bfcl_eval/constants/default_prompts.py:1


def _scratch_root() -> Path:
    try:
        root = cache_dir("bfcl_project_root")
    except OSError:  # a link or someone else's folder there: a fresh one of our own
        root = Path(tempfile.mkdtemp(prefix="careful_bfcl_"))
    return root


os.environ.setdefault("BFCL_PROJECT_ROOT", str(_scratch_root()))

import bfcl_eval  # noqa: E402  (no side effects: the package __init__ is empty)

PACKAGE_DIR = Path(bfcl_eval.__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"
FUNC_DOC_DIR = DATA_DIR / "multi_turn_func_doc"
ANSWER_DIR = DATA_DIR / "possible_answer"
SIM_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"

# bfcl_eval/constants/executable_backend_config.py, read at import (standard library only)
from bfcl_eval.constants.executable_backend_config import (  # noqa: E402
    CLASS_FILE_PATH_MAPPING,
    MULTI_TURN_FUNC_DOC_FILE_MAPPING,
    STATELESS_CLASSES,
)

__all__ = [  # what the rest of the package reads from here
    "ANSWER_DIR", "BFCL_VERSION", "CATEGORIES", "CLASSES", "CLASS_FILE_PATH_MAPPING", "DATA_DIR",
    "FUNC_DOC_DIR", "MAXIMUM_STEP_LIMIT", "MULTI_TURN_FUNC_DOC_FILE_MAPPING", "PACKAGE_DIR",
    "SHORT_NAMES", "SIM_PACKAGE", "STATELESS_CLASSES", "Conversation", "all_func_docs", "short_name",
    "category_of", "conversation", "conversation_index", "conversations", "func_docs",
    "function_class", "installed_version", "is_long_context", "sort_key",
]

CLASSES = (
    "GorillaFileSystem",
    "MathAPI",
    "MessageAPI",
    "TwitterAPI",
    "TicketAPI",
    "TradingBot",
    "TravelAPI",
    "VehicleControlAPI",
)


def installed_version() -> str:
    from importlib.metadata import version

    return version("bfcl_eval")


def category_of(entry_id: str) -> str:
    """BFCL's category of an entry id (``multi_turn_base_12`` -> ``multi_turn_base``)."""
    return entry_id.split(":")[0].rsplit("_", 1)[0]


_LONG_CONTEXT: dict[str, bool] = {}  # category -> is_long_context(category)


def is_long_context(category: str) -> bool:
    """BFCL's own test (multi_turn_checker.py:48-50): substring match on the category."""
    return "long_context" in category or "composite" in category


def sort_key(entry_id: str) -> tuple[str, int]:
    """The order bfcl evaluate processes a file in (utils.sort_key for multi-turn ids)."""
    cat, _, idx = entry_id.split(":")[0].rpartition("_")
    idx = idx.split("-")[0]
    return (cat, int(idx) if idx.isdigit() else -1)


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@cache
def func_docs(class_name: str) -> tuple[dict, ...]:
    """The function docs of one simulator class, in file order."""
    return tuple(_read_jsonl(FUNC_DOC_DIR / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]))


@cache
def all_func_docs() -> dict[str, dict]:
    """name -> doc for the 128 multi-turn functions."""
    return {d["name"]: d for c in CLASSES for d in func_docs(c)}


@cache
def function_class() -> dict[str, str]:
    """name -> simulator class for the 128 functions."""
    return {d["name"]: c for c in CLASSES for d in func_docs(c)}


@dataclass(frozen=True)
class Conversation:
    """One multi-turn test entry with its reference trajectory."""

    id: str
    category: str
    question: list  # list[turn][message]
    initial_config: dict
    involved_classes: tuple[str, ...]
    ground_truth: list  # list[turn][call string]
    missed_function: dict  # {turn index (str): [function names]}, miss_func only
    raw: dict

    @property
    def long_context(self) -> bool:
        got = _LONG_CONTEXT.get(self.category)  # (asked often per replay)
        if got is None:
            got = is_long_context(self.category)
            if len(_LONG_CONTEXT) < 1_000:
                _LONG_CONTEXT[self.category] = got
        return got

    def functions(self) -> list[dict]:
        """The docs shown at the start, missed functions held out (utils.py:772-801)."""
        held = {n for names in self.missed_function.values() for n in names}
        return [
            copy.deepcopy(d)
            for c in self.involved_classes
            for d in func_docs(c)
            if d["name"] not in held
        ]

    def held_out_docs(self, turn: int) -> list[dict]:
        names = self.missed_function.get(str(turn), [])
        docs = all_func_docs()
        return [copy.deepcopy(docs[n]) for n in names if n in docs]


@cache
def _load_category(category: str) -> tuple[Conversation, ...]:
    if category not in CATEGORIES:
        raise KeyError(f"unknown category {category!r}; expected one of {', '.join(CATEGORIES)}")
    questions = _read_jsonl(DATA_DIR / f"BFCL_v4_{category}.json")
    answers = _read_jsonl(ANSWER_DIR / f"BFCL_v4_{category}.json")
    assert len(questions) == len(answers)
    out = []
    # bfcl aligns prompt and ground truth by index (eval_runner._subset_entries_by_model_ids)
    for q, a in zip(questions, answers, strict=True):
        out.append(
            Conversation(
                id=q["id"],
                category=category,
                question=q["question"],
                initial_config=q["initial_config"],
                involved_classes=tuple(q["involved_classes"]),
                ground_truth=a["ground_truth"],
                missed_function=q.get("missed_function", {}),
                raw=q,
            )
        )
    return tuple(out)


def conversations(category: str) -> tuple[Conversation, ...]:
    """The 200 conversations of one category, in dataset order."""
    return _load_category(category)


@cache
def conversation_index() -> dict[str, Conversation]:
    return {c.id: c for cat in CATEGORIES for c in _load_category(cat)}


def conversation(entry_id: str) -> Conversation:
    try:
        return conversation_index()[entry_id]
    except KeyError:
        raise KeyError(f"no multi-turn conversation with id {entry_id!r}") from None
