"""Blind annotation of the destructive boundary: store, agreement, adjudication, release.

The engine behind §4 of the paper. Submodules are imported on demand so that the labelling
loop starts fast (the statistics need scikit-learn, the LLM annotator the Anthropic SDK):

- :mod:`.signals`: a round's inputs (functions, kinds, the signals' proposal, their hash);
- :mod:`.store`: the SQLite store (annotators, rounds, labels, decisions, LLM calls);
- :mod:`.sessions`: what an annotator (blind) and an adjudicator may read and do;
- :mod:`.agreement`: raw agreement, Cohen's and Fleiss' kappa, Krippendorff's alpha, splits;
- :mod:`.adjudication`: policies and manual decisions, producing a :class:`~careful_engine.
  boundary.Boundary`;
- :mod:`.release`: one JSON file per annotator's label set, exported and imported;
- :mod:`.llm`: a language model as an ordinary, blind annotator.
"""

from __future__ import annotations

from .errors import AnnotationError, BlindnessError, LabelError, RoundError

__all__ = ["AnnotationError", "BlindnessError", "LabelError", "RoundError"]
