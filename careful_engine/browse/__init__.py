"""Browsing runs for the workbench, with no UI: list a run's conversations fast, replay one
on demand into a per-call view model, and read scores without re-scoring.

* :mod:`.runs`: :func:`find_runs` turns run folders into :class:`RunRef` s (one per model
  folder); :class:`RunBrowser` lists a run's conversations from its result files (ids,
  categories, turns, steps) merged with ``conversations.jsonl`` from ``careful score`` when
  present, so filters work at once, and :meth:`RunBrowser.open` replays one conversation
  (decode, replay, rules, blame) into a :class:`ConversationView`;
* :mod:`.view`: that view model (turns, calls matched to the reference, rule hits on the calls
  that caused them, the first diverging call, stepping) and :func:`change_rows`;
* :mod:`.score`: :func:`model_score` rebuilds a :class:`~careful_engine.scoring.score.ModelScore`
  from score lines, so the leaderboard and the paired comparison need no second scoring
  (:func:`score_to_file`, the engine's, makes them);
* :mod:`.review`: :func:`function_review`, one function's review-sheet entry (blind).
"""

from careful_engine.browse.review import FunctionReview, ReviewExample, function_review
from careful_engine.browse.runs import (
    REPLAY_LOCK,
    SCORE_DIR,
    SCORES_NAME,
    ConversationRow,
    Filter,
    RunBrowser,
    RunRef,
    cache_scores_path,
    default_cache_dir,
    error_types,
    find_runs,
    hit_rules,
    label_entries,
    read_scores,
    score_paths,
)
from careful_engine.browse.score import model_score
from careful_engine.browse.view import (
    CallView,
    ConversationView,
    Line,
    TurnView,
    build_view,
    change_rows,
)
from careful_engine.scoring.score import score_to_file

__all__ = [
    "REPLAY_LOCK", "SCORES_NAME", "SCORE_DIR", "CallView", "ConversationRow", "ConversationView",
    "Filter", "FunctionReview", "Line", "ReviewExample", "RunBrowser", "RunRef", "TurnView",
    "build_view", "cache_scores_path", "change_rows", "default_cache_dir", "error_types",
    "find_runs", "function_review", "hit_rules", "label_entries", "model_score", "read_scores",
    "score_paths", "score_to_file",
]
