"""Rendering: the paper's tables, reports in four formats (terminal, Markdown, CSV, JSON) and
the leaderboard plot. The only engine package that builds rich renderables."""

__all__ = ["agreement", "compare", "decode_audit", "leaderboard", "outputs", "plot", "report",
           "score_audit", "sensitivity", "tables"]
