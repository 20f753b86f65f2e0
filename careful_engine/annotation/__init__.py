"""Blind annotation of the destructive boundary: store, agreement, adjudication, release.

The engine behind §4 of the paper. Submodules are imported on demand so that the labelling
loop starts fast (the statistics need scikit-learn, the LLM annotator the Anthropic SDK):

- :mod:`.signals`: a round's inputs (functions, kinds, the signals' proposal, their hash);
- :mod:`.names`: the rules for names and reasons, checked at every entry;
- :mod:`.database`: the SQLite file (opened safely, its schema, write transactions);
- :mod:`.records`: the frozen records the store and the sessions hand out;
- :mod:`.store`: annotators, rounds and their rosters, progress, the reveal log (no labels);
- :mod:`.sessions`: the only code that reads or writes labels: what an annotator (blind), an
  adjudicator and an import may read and do;
- :mod:`.agreement`: raw agreement, Cohen's and Fleiss' kappa, Krippendorff's alpha, splits;
- :mod:`.adjudication`: policies and manual decisions, producing a :class:`~careful_engine.
  boundary.Boundary`;
- :mod:`.schema`: a small JSON-Schema-like validator and a JSON reader that knows lines;
- :mod:`.release`: one JSON file per annotator's label set, exported and imported (checked
  whole first);
- :mod:`.llm`: a language model as an ordinary, blind annotator.
"""

from __future__ import annotations

from careful_engine.annotation.errors import AnnotationError, BlindnessError, LabelError, RoundError

__all__ = ["AnnotationError", "BlindnessError", "LabelError", "RoundError"]
