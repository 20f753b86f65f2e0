"""Run provenance: is an old run being re-scored on the data and decoder it was made with?

A result file's ``inference_log`` records what the model saw while it ran. Three checks compare
it with today's pinned bfcl-eval, per conversation:

* dataset drift (:mod:`.drift`): logged user messages and initial state vs the pinned dataset;
* decoder drift (:mod:`.decoder`): logged decodes vs today's decoder on the same raw output;
* replay fidelity (:mod:`.fidelity`): logged tool results vs the replay's, call by call, with
  the cause of each conversation's first divergence.

Entries without a log are *unverifiable*, never clean. Entry points: :func:`check_file` (score
and check a file), :func:`check_scored` (reuse a scoring's traces), :func:`check_conversation`
(one entry, optionally with its :class:`~careful_engine.core.replay.ConversationTrace`),
:func:`entry_drift`, :func:`run_drift` (a scored run's drifted conversations, for a one-line
note), and for the workbench :func:`logged_tool_results` / :func:`seen_results`
(the result the model actually saw, per call ``(turn, step, index)``).
"""

from careful_engine.analysis.provenance.check import (
    ConversationProvenance,
    DriftSplit,
    FileProvenance,
    check_conversation,
    check_file,
    check_scored,
    drift_note,
    drift_split,
    entry_drift,
    run_drift,
    unicode_problems,
)
from careful_engine.analysis.provenance.decoder import DecodeDiff, DecoderDrift, decoder_drift
from careful_engine.analysis.provenance.drift import DatasetDrift, DriftKind, dataset_drift
from careful_engine.analysis.provenance.fidelity import (
    CAUSES,
    Divergence,
    Fidelity,
    SeenResult,
    logged_tool_results,
    seen_results,
)
from careful_engine.analysis.provenance.log import InferenceLog, parse_log
from careful_engine.analysis.provenance.official import OfficialScore, find_official, read_official
from careful_engine.analysis.provenance.summary import summarise

__all__ = [
    "CAUSES",
    "ConversationProvenance",
    "DatasetDrift",
    "DecodeDiff",
    "DecoderDrift",
    "Divergence",
    "DriftKind",
    "DriftSplit",
    "FileProvenance",
    "Fidelity",
    "InferenceLog",
    "OfficialScore",
    "SeenResult",
    "check_conversation",
    "check_file",
    "check_scored",
    "dataset_drift",
    "decoder_drift",
    "drift_note",
    "drift_split",
    "entry_drift",
    "find_official",
    "logged_tool_results",
    "parse_log",
    "read_official",
    "run_drift",
    "seen_results",
    "summarise",
    "unicode_problems",
]
