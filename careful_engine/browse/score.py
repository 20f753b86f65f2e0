"""Scores without re-scoring: :func:`model_score` rebuilds a run's score from its score lines.
(Scoring itself is the engine's :func:`careful_engine.scoring.score.score_to_file`, which the
workbench calls from a worker thread, with the replays in worker processes.)"""

from __future__ import annotations

from careful_engine.browse.runs import RunRef
from careful_engine.core import bfcl
from careful_engine.scoring.result import ConversationResult
from careful_engine.scoring.score import CategoryScore, ModelScore


def model_score(ref: RunRef, summaries: dict[str, dict], *,
                decoder: str | None) -> ModelScore | None:
    """The run's :class:`ModelScore` rebuilt from its score lines (None if one is missing or
    is not a result line of this model and category); ``decoder``: the one scoring used
    (:meth:`RunBrowser.decoder_used`: none for a run that needed none)."""
    ms = ModelScore(ref.model, decoder)
    for category in ref.categories:
        results = []
        for conv in bfcl.conversations(category):
            try:
                r = ConversationResult.from_json(summaries.get(conv.id))
            except ValueError:
                return None
            if (r.model, r.category, r.id) != (ref.model, category, conv.id):
                return None
            results.append(r)
        ms.categories[category] = CategoryScore(ref.model, category, results)
    return ms
