"""Figures per result file (one model, one category): what the tables and the JSON show."""

from __future__ import annotations

from collections import Counter
from typing import Any

from careful_engine.analysis.provenance.check import FileProvenance
from careful_engine.analysis.provenance.drift import DRIFT_ORDER, DriftKind


def _example(c: Any, item: Any) -> dict[str, Any]:
    return {"id": c.id, **item.to_json()}


def summarise(fp: FileProvenance) -> dict[str, Any]:
    """Counts, shares and one example per kind, for one file."""
    convs = fp.conversations
    verified = [c for c in convs if c.drift.verifiable]
    status = Counter(c.drift.status.value for c in convs)
    kinds = Counter(k.value for c in convs for k in c.drift.kinds if k in DRIFT_ORDER)
    notes = sum(bool(c.drift.notes) for c in verified)

    dec_kinds: Counter = Counter()
    dec_examples: dict[str, dict] = {}
    steps = differing = 0
    for c in convs:
        if c.decoder is None:
            continue
        steps += c.decoder.compared
        for d in c.decoder.diffs or []:
            differing += 1
            dec_kinds[d.kind] += 1
            dec_examples.setdefault(d.kind, _example(c, d))

    logged = reproduced = extra = 0
    causes: Counter = Counter()
    cause_examples: dict[str, dict] = {}
    for c in convs:
        f = c.fidelity
        if f is None:
            continue
        logged, reproduced, extra = logged + f.logged, reproduced + f.reproduced, extra + f.extra
        if f.first is not None:
            causes[f.first.cause] += 1
            cause_examples.setdefault(f.first.cause, _example(c, f.first))

    out: dict[str, Any] = {
        "model": fp.model,
        "category": fp.category,
        "file": str(fp.path),
        "verifiable": fp.verifiable,
        "conversations": len(convs),
        "with_log": len(verified),
        "dataset_drift": {
            "by_status": {k.value: status.get(k.value, 0) for k in DriftKind},
            "by_kind": {k.value: kinds.get(k.value, 0) for k in DRIFT_ORDER},
            "drifted": sum(c.drift.drifted for c in convs),
            "with_notes": notes,
        },
        "decoder_drift": {
            "steps_compared": steps,
            "steps_differing": differing,
            "conversations_differing": sum(bool(c.decoder and c.decoder.differs) for c in convs),
            "by_kind": dict(dec_kinds.most_common()),
            "examples": dec_examples,
            "raw_output_differs_from_result": sum(
                len(c.decoder.raw_mismatch or []) for c in convs if c.decoder),
        },
        "replay_fidelity": {
            "calls_logged": logged,
            "reproduced": reproduced,
            "share": reproduced / logged if logged else None,
            "replayed_not_logged": extra,
            "conversations_diverging": sum(bool(c.fidelity and c.fidelity.first) for c in convs),
            "conversations_diverging_verdict_relevant": sum(
                c.replays_differently for c in convs),
            "first_divergence_causes": dict(causes.most_common()),
            "examples": cause_examples,
        },
        "clean": sum(c.clean for c in convs),
        "problems": len(fp.problems),
    }
    out["verdicts"] = _verdicts(fp)
    return out


def _verdicts(fp: FileProvenance) -> dict[str, Any]:
    convs = fp.conversations
    now = sum(bool(c.valid_now) for c in convs)
    out: dict[str, Any] = {"correct_now": now, "accuracy_now": now / len(convs) if convs else None}
    if fp.official is None:
        out["official"] = None
        return out
    off = fp.official
    lost = [c for c in convs if c.valid_then is True and c.valid_now is False]
    gained = [c for c in convs if c.valid_then is False and c.valid_now is True]
    out["official"] = {"file": str(off.path), "accuracy": off.accuracy,
                       "correct": off.correct, "total": off.total}
    for name, group in (("passed_then_fail_now", lost), ("failed_then_pass_now", gained)):
        reasons = Counter(r for c in group for r in c.reasons())
        primary = Counter(c.reasons()[0] for c in group)
        causes = Counter(c.fidelity.relevant[0].cause for c in group
                         if c.replays_differently and c.fidelity)
        drift_kinds = Counter(k.value for c in group for k in c.drift.kinds
                              if k in DRIFT_ORDER)
        out[name] = {
            "count": len(group),
            "primary_reason": dict(primary.most_common()),
            "any_reason": dict(reasons.most_common()),
            "drift_kinds": dict(drift_kinds.most_common()),
            "replay_causes": dict(causes.most_common()),
            "ids": [c.id for c in group],
        }
    return out
