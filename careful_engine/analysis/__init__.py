"""Analyses over scored runs, as data (no rendering): leaderboard, sensitivity, re-examined
user answers, CI gates and result documents, score and decode audits, provenance, and bfcl's
score files read once for them."""

__all__ = ["bfcl_scores", "ci_report", "compare", "decode_audit", "gates", "leaderboard",
           "provenance", "reexamine", "score_audit", "sensitivity"]
