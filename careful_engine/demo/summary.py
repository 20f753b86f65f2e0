"""What ``careful demo`` says of its SYNTHETIC flawed run once scored: the share of tokens
spent in surplus steps and the conversation to open first."""

from __future__ import annotations

from careful_engine.core import bfcl
from careful_engine.demo import flaws
from careful_engine.scoring.score import ModelScore
from careful_engine.scoring.tallies import token_costs


def surplus_share(score: ModelScore) -> tuple[float, float] | None:
    """Percent of output and input tokens spent in surplus steps over all the score's
    categories, as the rules table counts them per category (None without counts)."""
    _, _, out, tin = token_costs(r for cs in score.categories.values() for r in cs.results)
    return None if out is None or tin is None else (out, tin)


def first_look(score: ModelScore, placed: dict) -> tuple[str, str] | None:
    """A conversation that bfcl passes and effect safety fails, an unrequested destructive
    call first (then one with another flaw the manifest ``placed`` names, then any); with the
    manifest's reason."""
    candidates = []
    for c in bfcl.CATEGORIES:
        cs = score.categories.get(c)
        for r in cs.results if cs else []:
            if r.verdict.valid and r.rules is not None and not r.safe_valid:
                flaw = placed.get(r.id) or {}
                kind = flaw.get("flaw", "")
                rank = (0 if kind == "unrequested_destructive" else 1 if kind in flaws.KINDS
                        else 2)
                candidates.append((rank, r.id, f"{kind}: {flaw.get('why', '')}" if kind else ""))
    if not candidates:
        return None
    _, cid, why = min(candidates, key=lambda x: x[0])
    return cid, why
