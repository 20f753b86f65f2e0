"""Machine-readable results of ``careful score`` and ``careful compare`` for CI (docs/ci.md).

One result document (a dict; schema ``careful.result.v3``, in
``careful_engine/data/careful.result.v3.schema.json``) is built from the scores, the paired
comparisons and the gate; the JUnit XML and the Markdown summary are rendered from that
document, so the three cannot disagree. Writes never follow a symlink: ``--output`` replaces
the path itself, the step summary is appended with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import json
import os
import re
import stat
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Sequence
from importlib.resources import files
from typing import Any

from careful_engine.analysis.gates import Gate, rule_counts, shared_categories
from careful_engine.analysis.leaderboard import Comparison, Entry
from careful_engine.core import bfcl
from careful_engine.core.budget import Budget
from careful_engine.core.figures import percent, shown
from careful_engine.core.safe_text import markdown_literal, visible
from careful_engine.scoring.decoders import DecoderChoice
from careful_engine.scoring.rules import (
    ASKED_READ,
    ASKED_UNREAD,
    COVERAGE,
    RULES,
    Effects,
    coverage,
    measurable,
    rule_count,
)
from careful_engine.scoring.score import CategoryScore, ModelScore
from careful_engine.scoring.settings import engine_version, scored_with
from careful_engine.scoring.stats import Paired

SCHEMA = "careful.result.v3"
FORMATS = ("text", "json", "junit")
SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
# problem lines the document lists at most (the rest counted in problem_lines_omitted; score
# and compare write every one to problems.txt in their --out folder)
PROBLEM_LINES = 10_000


def schema() -> dict[str, Any]:
    """The JSON Schema of the result document."""
    return json.loads(files("careful_engine").joinpath(f"data/{SCHEMA}.schema.json").read_text())


# ---------------------------------------------------------------- the document


def _percent(ok: int, n: int) -> float | None:
    """Unrounded, computed as the tables' figure is (``pct(ok / n)`` rounds this value)."""
    return percent(ok / n) if n else None


def all_rules(counts: Counter, confirm: bool) -> dict[str, int | None]:
    """Every rule's count (0 included; null for one meaningful only under the confirmation
    protocol, without it; null for every rule where no conversation was replayed), in the
    rules' order; then ``asked_read`` and ``asked_unread`` (the conversations whose turns
    without a call had text to read, and had none: 0 included, null with the rules where none
    was replayed); other counters after them (how many were replayed: ``replayed`` beside
    ``n``)."""
    out = {r: rule_count(counts, r, confirm) for r in RULES}
    read = measurable(counts)
    out.update((k, counts.get(k, 0) if read else None) for k in (ASKED_READ, ASKED_UNREAD))
    out.update((k, n) for k, n in sorted(counts.items()) if k not in out and k not in COVERAGE)
    return out


def _category(cs: CategoryScore, effects: bool) -> dict[str, Any]:
    n = cs.total
    scores: dict[str, dict[str, Any] | None] = dict.fromkeys(("bfcl", "safe", "strict"))
    scores["bfcl"] = {"passes": cs.correct, "percent": _percent(cs.correct, n)}
    if effects:
        safe = sum(r.safe_valid for r in cs.results)
        scores["safe"] = {"passes": safe, "percent": _percent(safe, n)}
        if cs.confirm:  # strict success needs the confirmation protocol; over its own n
            scores["strict"] = {"passes": cs.strict_passes,
                                "percent": _percent(cs.strict_passes, cs.needing),
                                "n": cs.needing}
    totals = cs.rule_totals() if effects else None
    return {
        "category": cs.category, "name": bfcl.short_name(cs.category), "n": n,
        "replayed": coverage(totals)[0] if totals is not None else None,
        "scores": scores,
        "rules": all_rules(totals, cs.confirm) if totals is not None else {},
    }


def model_json(ms: ModelScore, effects: bool, *, path: str, role: str) -> dict[str, Any]:
    """A model's scores per category and overall: the four-category mean (absent = 0), the
    rules summed, and the conversations of its categories (not the mean's denominator: the
    mean averages the categories' percentages) and of them those replayed (what the rules
    are summed over)."""
    mean = {"bfcl": percent(ms.mean_accuracy())}  # unrounded: the tables round these
    for k, attr in (("safe", "safe_accuracy"), ("strict", "strict_accuracy")):
        mean[k] = percent(ms.mean_accuracy(attr) if effects else None)
    cats = [_category(ms.categories[c], effects) for c in bfcl.CATEGORIES if c in ms.categories]
    totals = rule_counts(ms) if effects else None
    return {
        "role": role, "path": path, "model": ms.model, "synthetic": ms.synthetic,
        "decoder": ms.decoder,
        "categories": cats,
        "overall": {"mean_percent": mean, "conversations": sum(c["n"] for c in cats),
                    "replayed": coverage(totals)[0] if totals is not None else None,
                    "rules": all_rules(totals, ms.confirm) if totals is not None else {}},
    }


def _paired(name: str, category: str | None, p: Paired) -> dict[str, Any]:
    return {"name": name, "category": category, "n": p.n, "passes_a": p.passes_a,
            "passes_b": p.passes_b, "gained": len(p.gained), "lost": len(p.lost), "p": p.p,
            "gained_ids": list(p.gained), "lost_ids": list(p.lost)}


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    """The paired table of one verdict: per shared category and overall."""
    return {
        "score": cmp.kind,
        "categories": [_paired(bfcl.short_name(c), c, p) for c, p in cmp.categories.items()],
        "overall": _paired("overall", None, cmp.overall),
        "only_baseline": [bfcl.short_name(c) for c in cmp.only_a],
        "only_candidate": [bfcl.short_name(c) for c in cmp.only_b],
    }


def settings_json(effects: Effects | None, detector: str, boundary: str | None, *,
                  decoders: DecoderChoice, decoded: Iterable[str | None],
                  budget: Budget | None = None,
                  scores: list[str] | None = None) -> dict[str, Any]:
    """The document's ``settings``, one key set for every command (docs/ci.md): the
    ``boundary`` as given and the ``detector``; whether the effect rules were counted; the
    ``--decoder`` values that decoded one of the model folders (``decoded``: their decoder
    keys; comma-separated, None if none did); the safe rule and the replay budget's limits
    other than the default as :func:`~careful_engine.scoring.settings.scored_with` records
    them in the score lines (None: no effect rules; the default budget); with ``scores``,
    the scores compared."""
    used = scored_with(effects, detector, None, budget)
    out = {"boundary": boundary if effects is not None else None, "detector": detector,
           "effects": effects is not None,
           "decoder": ", ".join(decoders.used(decoded)) or None,
           "safe_rule": used["safe_rule"], "budget": used["budget"]}
    if scores is not None:
        out["scores"] = scores
    return out


def document(command: str, *, settings: dict[str, Any], runs: list[dict[str, Any]],
             gate: Gate, exit_code: int, problems: Sequence[object] = (),
             unusable: list[str] | None = None,
             comparisons: list[Comparison] | None = None) -> dict[str, Any]:
    """The result document of one command (schema ``careful.result.v3``): ``problems`` is
    their count, ``problem_lines`` each one's ``file:line [id]: reason`` line (the first
    :data:`PROBLEM_LINES`; ``problem_lines_omitted`` counts the rest)."""
    return {
        "schema": SCHEMA,
        "command": command,
        "careful_version": engine_version(),
        "bfcl_eval": bfcl.BFCL_VERSION,
        "settings": settings,
        "runs": runs,
        "comparisons": [comparison_json(c) for c in comparisons or []],
        "gate": gate.to_json(),
        "problems": len(problems),
        "problem_lines": [str(p) for p in problems[:PROBLEM_LINES]],
        "problem_lines_omitted": max(0, len(problems) - PROBLEM_LINES),
        "unusable": list(unusable or []),
        "exit_code": exit_code,
    }


def to_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2) + "\n"


# ---------------------------------------------------------------- JUnit

_XML_BAD = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _x(text: object) -> str:
    """Text from a file made visible and valid in XML 1.0."""
    return _XML_BAD.sub("?", visible(text, keep_newlines=True))


def junit(doc: dict[str, Any]) -> str:
    """JUnit XML: a suite of one passing test case per run and category (the numbers in its
    system-out), and a suite of one test case per gate condition, failed when it failed."""
    cmd = doc["command"]
    root = ET.Element("testsuites", name=f"careful {cmd}")
    cats = ET.SubElement(root, "testsuite", name=f"careful {cmd}: categories")
    n = 0
    for run in doc["runs"]:
        for c in [*run["categories"], {"name": "overall", **run["overall"]}]:
            case = ET.SubElement(cats, "testcase", classname=_x(f"careful.{cmd}.{run['role']}"),
                                 name=_x(f"{run['model']} {c['name']}"))
            ET.SubElement(case, "system-out").text = _x(json.dumps(
                {k: v for k, v in c.items() if k != "category"}, sort_keys=True))
            n += 1
    for cmp in doc["comparisons"]:
        for row in [*cmp["categories"], cmp["overall"]]:
            case = ET.SubElement(cats, "testcase", classname=f"careful.{cmd}.paired.{cmp['score']}",
                                 name=_x(row["name"]))
            ET.SubElement(case, "system-out").text = _x(
                f"n {row['n']}, passes A {row['passes_a']}, passes B {row['passes_b']}, gained "
                f"{row['gained']}, lost {row['lost']}, McNemar p {row['p']:.4g}")
            n += 1
    cats.set("tests", str(n))
    cats.set("failures", "0")
    gate = doc["gate"]
    suite = ET.SubElement(root, "testsuite", name=f"careful {cmd}: gate",
                          tests=str(len(gate["conditions"])), failures=str(gate["failed"]))
    for cond in gate["conditions"]:
        case = ET.SubElement(suite, "testcase", classname=f"careful.{cmd}.gate.{cond['kind']}",
                             name=_x(cond["name"]))
        if not cond["passed"]:
            ET.SubElement(case, "failure", message=_x(cond["message"]),
                          type=cond["kind"]).text = _x(cond["message"])
        else:
            ET.SubElement(case, "system-out").text = _x(cond["message"])
    root.set("tests", str(n + len(gate["conditions"])))
    root.set("failures", str(gate["failed"]))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


# ---------------------------------------------------------------- Markdown

def md(text: object) -> str:
    """Text from a file shown as itself in Markdown (see safe_text.markdown_literal)."""
    return markdown_literal(text)


def _cell(value: Any, digits: int = 1) -> str:
    """A figure as the tables show it (:func:`~careful_engine.core.figures.shown`)."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{shown(value, digits):.{digits}f}"
    return str(value)


MEAN_NOTE = ("mean: bfcl's unweighted mean of the four categories' percentages (an absent one "
             "counting as 0), not a share of any n; its collateral is summed over the "
             "categories; replayed: the conversations collateral is counted over (an inference "
             "error, a missing or unscorable entry has nothing to replay; – where none was); "
             "strict %: over the conversations whose reference makes a destructive call "
             "(scores.strict.n in the JSON), not over n")


def markdown(doc: dict[str, Any]) -> str:
    """A short Markdown summary: scores, paired tables, and the gate's conditions."""
    gate = doc["gate"]
    verdict = ("no gate" if not gate["evaluated"] else
               "gate passed" if gate["passed"] else f"gate FAILED ({gate['failed']} condition(s))")
    lines = ["", f"### careful {doc['command']}: {verdict}", ""]
    lines += ["| run | model | category | n | BFCL % | safe % | strict % | replayed | "
              "collateral |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for run in doc["runs"]:
        for c in run["categories"]:
            s = c["scores"]
            lines.append(f"| {run['role']} | {md(run['model'])} | {c['name']} | {c['n']} | "
                         + " | ".join(_cell(s[k] and s[k]["percent"]) for k in
                                      ("bfcl", "safe", "strict"))
                         + f" | {_cell(c.get('replayed'))} | "
                           f"{_cell(c['rules'].get('collateral'))} |")
        m = run["overall"]["mean_percent"]  # n: none (an average of the categories' percents)
        lines.append(f"| {run['role']} | {md(run['model'])} | mean | – | "
                     + " | ".join(_cell(m[k]) for k in ("bfcl", "safe", "strict"))
                     + f" | {_cell(run['overall'].get('replayed'))} | "
                       f"{_cell(run['overall']['rules'].get('collateral'))} |")
    if doc["runs"]:
        lines += ["", MEAN_NOTE]
    for cmp in doc["comparisons"]:
        lines += ["", f"Paired ({cmp['score']}): gained = fails in the baseline, passes in the "
                  "candidate; p = exact McNemar", "",
                  "| category | n | baseline | candidate | gained | lost | p |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for row in [*cmp["categories"], cmp["overall"]]:
            lines.append(f"| {row['name']} | {row['n']} | {row['passes_a']} | {row['passes_b']} "
                         f"| {row['gained']} | {row['lost']} | {row['p']:.3g} |")
    if gate["conditions"]:
        lines += ["", "| gate condition | outcome |", "|---|---|"]
        for cond in gate["conditions"]:
            lines.append(f"| {md(cond['message'])} | {'pass' if cond['passed'] else '**FAIL**'} |")
    return "\n".join(lines) + "\n\n"


# ---------------------------------------------------------------- writing


def append_summary(path: str, text: str) -> None:
    """Append to the step summary file: created if absent, never truncated, never through a
    symlink, never anything but a regular file. Raises OSError."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0), 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def render(doc: dict[str, Any], fmt: str) -> str:
    return junit(doc) if fmt == "junit" else to_json(doc)


def shared_json(ms: ModelScore, categories: list[str], effects: bool) -> dict[str, Any]:
    """A run's figures over the categories both compared runs have (what compare's overall
    rows and ``--max-increase RULE=N`` count; ``replayed``: the conversations the rules are
    over), beside ``overall`` (all of the run's)."""
    cs = [ms.categories[c] for c in categories]
    totals = rule_counts(ms, categories)
    return {"categories": [bfcl.short_name(c) for c in categories],
            "conversations": sum(c.total for c in cs),
            "replayed": coverage(totals)[0] if effects else None,
            "rules": all_rules(totals, any(c.confirm for c in cs)) if effects else {}}


def entry_runs(entries: list[tuple[str, Entry]], effects: bool) -> list[dict[str, Any]]:
    """``runs`` of the document for compare's baseline and candidate, each with ``shared``:
    its figures over the categories both have."""
    shared = shared_categories(*(e.score for _, e in entries))
    return [{**model_json(e.score, effects, path=str(e.run), role=role),
             "shared": shared_json(e.score, shared, effects)} for role, e in entries]
