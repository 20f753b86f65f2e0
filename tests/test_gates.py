"""Gates for CI (careful_engine.analysis.gates, careful_engine.analysis.ci_report, docs/ci.md): floors, paired
regressions, rule increases, exit code 4, the JSON document against its schema, JUnit, and the
GitHub step summary. Runs are perturbations of the reference base category, scored for real.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from fractions import Fraction
from pathlib import Path

import jsonschema
import pytest
from scipy.stats import binomtest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_cli.common import EXIT_GATE, EXIT_OK, EXIT_PROBLEMS, EXIT_UNUSABLE
from careful_engine.analysis import ci_report
from careful_engine.analysis import gates as g
from careful_engine.analysis import leaderboard as lb
from careful_engine.core import bfcl
from careful_engine.core.figures import shown
from careful_engine.core.trajectory import Verdict
from careful_engine.scoring.result import ConversationResult
from careful_engine.scoring.rules import ConversationRules
from careful_engine.scoring.score import CategoryScore, ModelScore

from .perturb import BASE, fc_entry, inference_errors, perturbations, write_run

_load()
runner = CliRunner()
N = len(bfcl.conversations(BASE))


# ---------------------------------------------------------------- runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """reference; worse (30 conversations lose a call: significantly worse); slightly (3:
    p = 0.25); noisy_a / noisy_b (4 failures each, on different conversations: p = 1);
    extra (10 extra writes, some destructive: collateral); partial (50 missing)."""
    tmp = tmp_path_factory.mktemp("gates")
    return {
        "reference": write_run(tmp / "reference", {}),
        "worse": write_run(tmp / "worse", dict.fromkeys(range(30), "dropped_call")),
        "slightly": write_run(tmp / "slightly", dict.fromkeys(range(3), "dropped_call")),
        "noisy_a": write_run(tmp / "noisy_a", dict.fromkeys(range(4), "dropped_call")),
        "noisy_b": write_run(tmp / "noisy_b", dict.fromkeys(range(4, 8), "dropped_call")),
        "extra": write_run(tmp / "extra", dict.fromkeys(range(10), "extra_write")),
        "partial": write_run(tmp / "partial", {}, drop=set(range(150, 200))),
    }


def _flat(text: str) -> str:
    """Output with Rich's error box and line breaks removed."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", text).split())


def _invoke(*args: object, env: dict[str, str] | None = None):
    return runner.invoke(app, [str(a) for a in args], env=env, catch_exceptions=False)


def _compare(runs: dict[str, Path], a: str, b: str, tmp: Path, *extra: object):
    return _invoke("compare", runs[a], runs[b], "--out", tmp / "cmp", "-q", *extra)


@pytest.fixture(scope="module")
def worse_json(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """compare reference worse --fail-on-regression --format json, document on stdout."""
    tmp = tmp_path_factory.mktemp("worse")
    res = _compare(runs, "reference", "worse", tmp, "--fail-on-regression", "--max-increase",
                   "collateral=0", "--format", "json")
    return res, json.loads(res.stdout)


# ---------------------------------------------------------------- parsing (exit 2 on bad input)


def test_parse_floor_and_increase() -> None:
    f = g.parse_floor("base:safe=35.5")
    assert (f.score, f.category, f.percent) == ("safe", BASE, Fraction(71, 2))
    assert g.parse_floor("bfcl=40").category is None
    assert g.parse_floor("multi_turn_miss_func:strict=0").category == "multi_turn_miss_func"
    inc = g.parse_increase("long_context:collateral=5")
    assert (inc.rule, inc.category, inc.limit) == ("collateral", "multi_turn_long_context", 5)
    assert g.parse_floor("bfcl=75e-1").percent == Fraction(15, 2)
    assert g.parse_floor("bfcl=100/3").percent == Fraction(100, 3)
    for bad in ("bfcl", "=40", "bfcl=", "speed=40", "nope:bfcl=40", "bfcl=forty", "bfcl=101",
                "bfcl=-1", "bfcl=1e-99999999", "bfcl=1e999999999", "bfcl=nan", "bfcl=0x10",
                "bfcl=\uff15", "bfcl=1_0", "bfcl=\u0665\u0660"):  # fullwidth, _, Arabic-Indic
        with pytest.raises(ValueError):  # at once: Fraction would expand 10**99999999 first
            g.parse_floor(bad)
    with pytest.raises(ValueError, match="effect rules"):
        g.parse_floor("safe=3", effects=False)
    for bad in ("collateral", "speed=1", "nope:collateral=1"):
        with pytest.raises(ValueError):
            g.parse_increase(bad)
    for bad in ("collateral=1.5", "collateral=\uff15", "collateral=1_0", "collateral=1 0"):
        with pytest.raises(ValueError, match="not a whole number"):
            g.parse_increase(bad)
    for bad in ("collateral=-2", "collateral=-" + "9" * 30):
        with pytest.raises(ValueError, match=">= 0"):
            g.parse_increase(bad)
    with pytest.raises(ValueError, match="too large"):
        g.parse_increase("collateral=" + "9" * 30)
    assert g.parse_increase("collateral=+5").limit == 5
    assert g.parse_increase("collateral=-0").limit == 0


@pytest.mark.parametrize(("args", "says"), [
    (["--fail-under", "speed=40"], "unknown score 'speed'"),
    (["--fail-under", "basic:bfcl=40"], "unknown category 'basic'"),
    (["--fail-under", "bfcl=x"], "not a number; write a percentage such as 37.5, 75e-1 or 1/3"),
    (["--fail-under", "base:safe=-1"], "'-1' must be between 0 and 100"),
    (["--fail-under", "safe=1e309"], "'1e309' must be between 0 and 100"),
    (["--fail-under", "safe=" + "1" * 21], "has too many digits"),
    (["--fail-under", "safe=1e-100"], "too many digits in its exponent"),
    (["--fail-under", "safe=10", "--no-effects"], "effect rules"),
    (["--format", "xml"], "choose one of text, json, junit"),
])
def test_score_bad_gate_arguments_exit_2(runs: dict[str, Path], tmp_path: Path, args: list,
                                         says: str) -> None:
    res = _invoke("score", runs["reference"], "--out", tmp_path, *args)
    assert res.exit_code == EXIT_UNUSABLE
    assert says in _flat(res.output)
    assert not (tmp_path / "conversations.jsonl").exists()  # refused before scoring


@pytest.mark.parametrize(("args", "says"), [
    (["--max-increase", "speed=1"], "unknown rule 'speed'"),
    (["--alpha", "0"], "between 0 and 1"),
    (["--score", "fast"], "choose bfcl, safe, strict or both"),
])
def test_compare_bad_gate_arguments_exit_2(runs: dict[str, Path], tmp_path: Path, args: list,
                                           says: str) -> None:
    res = _compare(runs, "reference", "worse", tmp_path, "--fail-on-regression", *args)
    assert res.exit_code == EXIT_UNUSABLE
    assert says in _flat(res.output)


# ---------------------------------------------------------------- the regression gate


def test_a_strict_regression_without_the_protocol_fails_as_not_applicable(
        runs: dict[str, Path], tmp_path: Path) -> None:
    """--score strict beside another score on runs without the confirmation protocol: the
    strict gate asked for fails as not applicable (exit 4), recorded in the gate section, as a
    strict floor of score does (it was dropped with a warning: exit 0); bfcl is still gated."""
    res = _compare(runs, "reference", "reference", tmp_path, "--score", "strict", "--score",
                   "bfcl", "--fail-on-regression", "--format", "json")
    assert res.exit_code == EXIT_GATE, res.output
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, ci_report.schema())
    failed = [c for c in doc["gate"]["conditions"] if not c["passed"]]
    assert [c["name"] for c in failed] == ["regression strict overall"]
    assert "gate failed: strict overall: not applicable (no confirmation protocol" in res.stderr
    assert doc["gate"]["options"]["scores"] == ["bfcl", "strict"]
    assert any(c["score"] == "bfcl" and c["passed"] for c in doc["gate"]["conditions"])


def test_significantly_worse_candidate_fails_with_exit_4(worse_json: tuple) -> None:
    res, doc = worse_json
    assert res.exit_code == EXIT_GATE == doc["exit_code"]
    p = binomtest(0, 30, 0.5).pvalue
    failed = [c for c in doc["gate"]["conditions"] if not c["passed"]]
    assert sorted((c["score"], c["scope"]) for c in failed) == [
        ("bfcl", "base"), ("bfcl", "overall"), ("safe", "base"), ("safe", "overall")]
    for c in failed:
        assert c["values"]["lost"] == 30 and c["values"]["gained"] == 0
        assert c["values"]["p"] == pytest.approx(p)
    # one line per failed condition, with the numbers, on stderr
    lines = [x for x in res.stderr.splitlines() if x.startswith("gate failed:")]
    assert len(lines) == 4
    assert all("lost 30, gained 0 of 200" in x and "p = 1.86e-09" in x for x in lines)
    increase = [c for c in doc["gate"]["conditions"] if c["kind"] == "increase"]
    assert len(increase) == 1 and increase[0]["passed"]  # dropping calls adds no collateral


def test_document_on_stdout_validates_against_the_schema(worse_json: tuple) -> None:
    res, doc = worse_json
    jsonschema.validate(doc, ci_report.schema())
    assert doc["schema"] == "careful.result.v3" and doc["command"] == "compare"
    assert "BFCL's verdict, paired" in res.stderr  # the tables moved to stderr
    base, cand = doc["runs"]
    assert (base["role"], cand["role"]) == ("baseline", "candidate")
    assert base["categories"][0]["scores"]["bfcl"] == {"passes": N, "percent": 100.0}
    assert cand["categories"][0]["scores"]["bfcl"]["passes"] == N - 30
    assert set(base["categories"][0]["rules"]) >= {"collateral", "duplicate_writes"}
    bfcl_cmp = doc["comparisons"][0]
    assert bfcl_cmp["score"] == "bfcl" and bfcl_cmp["overall"]["lost"] == 30
    assert len(bfcl_cmp["overall"]["lost_ids"]) == 30
    with pytest.raises(jsonschema.ValidationError):  # the schema does constrain
        jsonschema.validate({**doc, "exit_code": 7}, ci_report.schema())


@pytest.mark.parametrize(("a", "b", "lost", "gained"), [
    ("reference", "reference", 0, 0),  # identical
    ("noisy_a", "noisy_b", 4, 4),  # as many lost as gained
    ("reference", "slightly", 3, 0),  # worse, not significantly (p = 0.25)
    ("worse", "reference", 0, 30),  # significantly better
])
def test_equivalent_or_better_candidate_passes(runs: dict[str, Path], tmp_path: Path, a: str,
                                               b: str, lost: int, gained: int) -> None:
    out = tmp_path / "r.json"
    res = _compare(runs, a, b, tmp_path, "--fail-on-regression", "--format", "json",
                   "--output", out)
    assert res.exit_code == EXIT_OK, res.output
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, ci_report.schema())
    assert doc["gate"]["passed"] and doc["gate"]["evaluated"]
    assert len(doc["gate"]["conditions"]) == 4  # base and overall, under bfcl and safe
    overall = doc["comparisons"][0]["overall"]
    assert (overall["lost"], overall["gained"]) == (lost, gained)
    assert "gate passed (4 condition(s))" in res.stderr
    assert "BFCL's verdict, paired" in res.stdout  # --output: the tables stay on stdout


def test_alpha_edge_is_inclusive(runs: dict[str, Path], tmp_path: Path) -> None:
    """3 lost, 0 gained: p = 0.25 exactly; fails at alpha 0.25, passes just below."""
    assert binomtest(0, 3, 0.5).pvalue == 0.25
    at = _compare(runs, "reference", "slightly", tmp_path, "--fail-on-regression", "--score",
                  "bfcl", "--alpha", "0.25")
    assert at.exit_code == EXIT_GATE
    assert "bfcl base: lost 3, gained 0 of 200 paired (100.0% -> 98.5%), McNemar p = 0.25 <= " \
           "alpha 0.25" in at.stderr
    below = _compare(runs, "reference", "slightly", tmp_path, "--fail-on-regression",
                     "--score", "bfcl", "--alpha", "0.2499")
    assert below.exit_code == EXIT_OK


def test_without_gate_options_nothing_is_gated(runs: dict[str, Path], tmp_path: Path) -> None:
    res = _compare(runs, "reference", "worse", tmp_path)
    assert res.exit_code == EXIT_OK


def test_max_increase_of_collateral(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = _compare(runs, "reference", "extra", tmp_path, "--max-increase", "collateral=0",
                   "--max-increase", "base:beyond_write=100", "--format", "json", "--output",
                   out)
    doc = json.loads(out.read_text())
    extra = doc["runs"][1]["categories"][0]["rules"]["collateral"]
    assert extra > 0  # some extra writes are destructive under the boundary
    assert res.exit_code == EXIT_GATE
    cond = {c["rule"]: c for c in doc["gate"]["conditions"]}
    assert not cond["collateral"]["passed"] and cond["beyond_write"]["passed"]
    assert cond["collateral"]["values"] == {"baseline": 0, "candidate": extra,
                                            "increase": extra, "limit": 0,
                                            "categories": ["base"], "compared": N,
                                            "left_out": 0, "replayed": [N, N],
                                            "conversations": [N, N]}
    assert f"gate failed: collateral overall (1 shared category: base): 0 -> {extra} " \
           f"(+{extra}) over the {N} conversations both runs replayed (0 left out), " \
           "allowed +0" in res.stderr
    at_edge = _compare(runs, "reference", "extra", tmp_path, "--max-increase",
                       f"collateral={extra}")
    assert at_edge.exit_code == EXIT_OK


def test_overall_increase_names_the_shared_categories(runs: dict[str, Path],
                                                      tmp_path: Path) -> None:
    """A candidate with a category the baseline lacks: an overall increase counts the shared
    categories only; the message names them and the document carries that figure under
    runs[].shared, beside overall (all of the run's categories)."""
    wider = write_run(tmp_path / "wider", {})
    other = "multi_turn_miss_param"
    lines = [json.dumps(fc_entry(conv.id, perturbations(conv)["extra_write"] if i < 10 else
                                 [list(t) for t in conv.ground_truth]))
             for i, conv in enumerate(bfcl.conversations(other))]
    (wider / "reference" / "multi_turn" / f"BFCL_v4_{other}_result.json").write_text(
        "\n".join(lines) + "\n")
    out = tmp_path / "r.json"
    res = _invoke("compare", runs["reference"], wider, "--out", tmp_path / "cmp", "-q",
                  "--max-increase", "collateral=0", "--format", "json", "--output", out)
    assert res.exit_code == EXIT_OK, res.output
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, ci_report.schema())
    base, cand = doc["runs"]
    assert cand["overall"]["conversations"] == 2 * N and cand["overall"]["rules"]["collateral"] > 0
    for run in (base, cand):
        assert run["shared"]["categories"] == ["base"] and run["shared"]["conversations"] == N
        assert run["shared"]["replayed"] == N and run["shared"]["rules"]["collateral"] == 0
    (cond,) = doc["gate"]["conditions"]
    assert cond["values"] == {"baseline": 0, "candidate": 0, "increase": 0, "limit": 0,
                              "categories": ["base"], "compared": N, "left_out": 0,
                              "replayed": [N, N], "conversations": [N, N]}
    assert cond["message"] == "collateral overall (1 shared category: base): 0 -> 0 (+0) " \
                              f"over the {N} conversations both runs replayed (0 left out), " \
                              "allowed +0"
    with pytest.raises(jsonschema.ValidationError):  # the schema does constrain shared
        jsonschema.validate({**doc, "runs": [{**cand, "shared": {"categories": ["all"]}}]},
                            ci_report.schema())


# ---------------------------------------------------------------- floors


@pytest.mark.parametrize(("floors", "code", "failed"), [
    (["base:bfcl=85"], EXIT_OK, []),  # the worse run: 170/200 = 85 % exactly; passes
    (["base:bfcl=85.0001"], EXIT_GATE, ["bfcl base 85% < floor 85.0001%"]),
    (["base:bfcl=85.0000001"], EXIT_GATE, ["bfcl base 85% < floor 85.0000001%"]),  # not 85%
    (["base:bfcl=.5", "base:bfcl=+85"], EXIT_OK, []),
    (["bfcl=21.25", "base:safe=85"], EXIT_OK, []),  # the mean: 85 / 4 categories
    (["bfcl=21.26"], EXIT_GATE, ["bfcl mean 21.25% < floor 21.26%"]),
    (["base:safe=86", "base:strict=0", "miss_func:bfcl=0"], EXIT_GATE,
     ["safe base 85% < floor 86%",
      "strict base: not applicable (no confirmation protocol in this run)",
      "bfcl miss_func: category not in the run"]),
])
def test_floors_at_their_edges(runs: dict[str, Path], tmp_path: Path, floors: list[str],
                               code: int, failed: list[str]) -> None:
    args = [x for f in floors for x in ("--fail-under", f)]
    res = _invoke("score", runs["worse"], "--out", tmp_path, "-q", *args, "--format", "junit",
                  "--output", tmp_path / "junit.xml")
    assert res.exit_code == code, res.output
    lines = [x.removeprefix("gate failed: ") for x in res.stderr.splitlines()
             if x.startswith("gate failed:")]
    assert len(lines) == len(failed)
    for line, want in zip(lines, failed, strict=True):
        assert line.startswith(want)
    root = ET.parse(tmp_path / "junit.xml").getroot()
    gate = root.find("testsuite[@name='careful score: gate']")
    cases = gate.findall("testcase")
    assert len(cases) == len(floors) == int(gate.get("tests"))
    assert len(gate.findall("testcase/failure")) == len(failed) == int(gate.get("failures"))
    assert int(root.get("failures")) == len(failed)
    assert root.find("testsuite/testcase[@name='reference base']") is not None


def test_document_without_effect_rules(runs: dict[str, Path], tmp_path: Path) -> None:
    res = _invoke("score", runs["worse"], "--out", tmp_path, "-q", "--no-effects",
                  "--fail-under", "base:bfcl=85", "--format", "json")
    assert res.exit_code == EXIT_OK
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, ci_report.schema())
    cat = doc["runs"][0]["categories"][0]
    assert cat["scores"]["safe"] is None and cat["rules"] == {}
    assert doc["runs"][0]["overall"]["mean_percent"] == {"bfcl": 21.25, "safe": None,
                                                         "strict": None}


def test_gate_failure_wins_over_input_problems(runs: dict[str, Path], tmp_path: Path) -> None:
    """50 conversations missing (exit 1: counted as failed, 75 %): a failed floor gives 4."""
    ok = _invoke("score", runs["partial"], "--out", tmp_path, "-q", "--fail-under",
                 "base:bfcl=75", "--format", "json", "--output", tmp_path / "a.json")
    assert ok.exit_code == EXIT_PROBLEMS
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["exit_code"] == EXIT_PROBLEMS and doc["problems"] > 0 and doc["gate"]["passed"]
    bad = _invoke("score", runs["partial"], "--out", tmp_path, "-q", "--fail-under",
                  "base:bfcl=75.5", "--format", "json", "--output", tmp_path / "b.json")
    assert bad.exit_code == EXIT_GATE
    doc = json.loads((tmp_path / "b.json").read_text())
    jsonschema.validate(doc, ci_report.schema())
    assert doc["exit_code"] == EXIT_GATE and doc["problems"] > 0


# ---------------------------------------------------------------- JUnit and the step summary


def test_junit_counts_the_failed_conditions(worse_json: tuple, runs: dict[str, Path],
                                            tmp_path: Path) -> None:
    _, doc = worse_json
    root = ET.fromstring(ci_report.junit(doc))
    failures = root.findall(".//failure")
    assert len(failures) == int(root.get("failures")) == doc["gate"]["failed"] == 4
    assert int(root.get("tests")) == len(root.findall(".//testcase"))
    for suite in root.findall("testsuite"):
        assert int(suite.get("tests")) == len(suite.findall("testcase"))
        assert int(suite.get("failures")) == len(suite.findall("testcase/failure"))
    # on stdout, the file parses as it is
    res = _compare(runs, "reference", "worse", tmp_path, "--fail-on-regression", "--format",
                   "junit")
    assert res.exit_code == EXIT_GATE
    assert len(ET.fromstring(res.stdout.encode()).findall(".//failure")) == 4


def test_step_summary_is_appended(runs: dict[str, Path], tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    res = _invoke("score", runs["worse"], "--out", tmp_path / "s", "-q", "--fail-under",
                  "base:bfcl=90", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert res.exit_code == EXIT_GATE
    text = summary.read_text()
    assert text.startswith("earlier step\n")
    assert "### careful score: gate FAILED (1 condition(s))" in text
    assert "| run | reference | base | 200 | 85.0 | 85.0 |" in text
    assert "| `bfcl base 85% < floor 90%` | **FAIL** |" in text


def test_step_summary_never_follows_a_symlink(runs: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep\n")
    link = tmp_path / "summary.md"
    os.symlink(target, link)
    out = tmp_path / "out.json"
    res = _invoke("score", runs["reference"], "--out", tmp_path / "s", "-q", "--format", "json",
                  "--output", out, env={"GITHUB_STEP_SUMMARY": str(link)})
    assert res.exit_code == EXIT_OK
    assert target.read_text() == "keep\n"
    assert "warning: GITHUB_STEP_SUMMARY" in res.stderr
    assert json.loads(out.read_text())["schema"] == SCHEMA


def test_output_refuses_a_planted_link(runs: dict[str, Path], tmp_path: Path) -> None:
    """--output is written as every output is: a link planted at it is refused (exit 2), and
    neither it nor what it points to changes."""
    target = tmp_path / "precious"
    target.write_text("keep\n")
    out = tmp_path / "out.json"
    os.symlink(target, out)
    res = _invoke("score", runs["reference"], "--out", tmp_path / "s", "-q", "--format", "json",
                  "--output", out)
    assert res.exit_code == EXIT_UNUSABLE
    assert "symbolic link" in res.stderr and "Traceback" not in res.stderr + res.stdout
    assert out.is_symlink() and target.read_text() == "keep\n"


SCHEMA = "careful.result.v3"


def test_hostile_names_stay_literal() -> None:
    """A model folder name is data: valid XML, no Markdown or HTML from it."""
    ms = ModelScore("evil\x00\x1b[31m|<b>*x*</b>](http://a)", "dec")
    ms.categories[BASE] = CategoryScore(ms.model, BASE, [
        ConversationResult(ms.model, BASE, "multi_turn_base_0", Verdict(True),
                           rules=ConversationRules(Counter(), [], []))])
    gate = g.Gate(g.check_floors([ms], [g.parse_floor("base:bfcl=100")]), True)
    doc = ci_report.document("score", settings={"boundary": None, "detector": "strict",
                                                "effects": True}, gate=gate, exit_code=0,
                             runs=[ci_report.model_json(ms, True, path="x", role="run")])
    jsonschema.validate(doc, ci_report.schema())
    root = ET.fromstring(ci_report.junit(doc))
    assert "\\x1b" in root.find(".//testcase").get("name")
    md = ci_report.markdown(doc)
    assert "\x1b" not in md and "| `evil\\x00\\x1b[31m\\|<b>*x*</b>](http://a)` | base |" in md
    from markdown_it import MarkdownIt  # as GitHub renders it: the name is code, one cell

    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    assert "<b>" not in html and "<a " not in html
    assert "<td><code>evil\\x00\\x1b[31m|&lt;b&gt;*x*&lt;/b&gt;](http://a)</code></td>" in html


# ---------------------------------------------------------------- the engine on fakes


def _ms(label: str, outcomes: list[tuple[bool, int]]) -> ModelScore:
    ms = ModelScore(label, "dec")
    ms.categories[BASE] = CategoryScore(label, BASE, [
        ConversationResult(label, BASE, f"id{i}", Verdict(ok),
                           rules=ConversationRules(Counter({"collateral": c}), [], []))
        for i, (ok, c) in enumerate(outcomes)])
    return ms


def test_engine_regression_and_coverage() -> None:
    a = _ms("a", [(True, 0)] * 12)
    b = _ms("b", [(False, 0)] * 10 + [(True, 0)] * 2)
    b.categories.pop(BASE)
    b.categories["multi_turn_miss_func"] = CategoryScore("b", "multi_turn_miss_func", [])
    cmp = lb.compare(a, b)
    conds = g.check_regressions([cmp], 0.05)
    assert [(c.kind, c.scope, c.passed) for c in conds][0] == ("coverage", "base", False)
    b = _ms("b", [(False, 0)] * 10 + [(True, 0)] * 2)
    conds = g.check_regressions([lb.compare(a, b)], 0.05)
    assert [c.passed for c in conds] == [False, False]
    assert conds[0].values["p"] == pytest.approx(binomtest(0, 10, 0.5).pvalue)
    inc = g.check_increases(a, _ms("c", [(True, 1)] * 12), [g.parse_increase("collateral=11")])
    assert not inc[0].passed and inc[0].values["increase"] == 12


def _not_replayed(ms: ModelScore, ids: range) -> None:
    """Make conversations ``id<i>`` of ``ms`` inference errors (nothing replayed: no rules)."""
    for r in ms.categories[BASE].results:
        if int(r.id[2:]) in ids:
            r.verdict, r.rules = Verdict(False, "multi_turn:inference_error"), None


def test_an_increase_is_paired_over_the_conversations_both_replayed() -> None:
    """A candidate with one more inference error than the baseline is compared over the
    conversations both replayed (paired by id, as the score regressions pair them): what one
    run did not replay is left out of both sides, and the line says how many were compared
    and left out, with both counts; whatever the limit, it was not comparable before."""
    a = _ms("a", [(True, 1)] * 12)
    b = _ms("b", [(True, 2)] * 12)
    _not_replayed(a, range(0, 1))
    _not_replayed(b, range(0, 2))  # one more: id1, where the baseline has 1 collateral call
    lim = [g.parse_increase("collateral=10"), g.parse_increase("base:collateral=9")]
    generous, small = g.check_increases(a, b, lim)
    assert generous.passed and not small.passed
    for cond in (generous, small):
        assert cond.values == {"baseline": 10, "candidate": 20, "increase": 10,
                               "limit": cond.values["limit"], "categories": ["base"],
                               "compared": 10, "left_out": 2, "replayed": [11, 10],
                               "conversations": [12, 12]}
    assert small.message == ("collateral base: 10 -> 20 (+10) over the 10 conversations both "
                             "runs replayed (2 left out), allowed +9")
    # one that replayed far fewer is compared over the few both replayed (id1, id2)
    few = _ms("b", [(True, 0)] * 12)
    _not_replayed(few, range(3, 12))
    (cond,) = g.check_increases(a, few, [g.parse_increase("collateral=0")])
    assert cond.passed and cond.message == ("collateral overall (1 shared category: base): "
                                            "2 -> 0 (-2) over the 2 conversations both runs "
                                            "replayed (10 left out), allowed +0")


def test_an_increase_with_nothing_both_replayed_is_not_comparable() -> None:
    """Where no conversation was replayed by both runs the condition fails as not comparable,
    whatever the limit, saying how many were left out."""
    a = _ms("a", [(True, 5)] * 12)
    b = _ms("b", [(True, 0)] * 12)
    _not_replayed(a, range(0, 6))
    _not_replayed(b, range(6, 12))
    for cond in g.check_increases(a, b, [g.parse_increase("collateral=1000"),
                                         g.parse_increase("base:collateral=1000")]):
        assert not cond.passed and "not comparable (no conversation both runs replayed (12 " \
            "left out))" in cond.message, cond.message
        assert cond.values["compared"] == 0 and cond.values["left_out"] == 12
        assert cond.values["replayed"] == [6, 6] and "candidate" not in cond.values


def test_an_asked_increase_leaves_out_conversations_with_an_unread_turn() -> None:
    """``asked`` counts turns whose text asks: a conversation where either run left a turn
    without a call with no text (unread: it may hide the question counted) is left out of
    both sides, as one not replayed is; where that leaves nothing it is not comparable. Other
    rules compare every conversation both replayed."""
    a = _ms("a", [(True, 0)] * 4)
    b = _ms("b", [(True, 0)] * 4)
    for r in a.categories[BASE].results:
        r.rules.no_call_read = 3
    for r, asked in zip(b.categories[BASE].results, (2, 3, 0, 1), strict=True):
        r.rules.no_call_read = 3
        r.rules.counts["asked"] = r.rules.counts["asked_destructive"] = asked
    b.categories[BASE].results[3].rules.no_call_unread = 1  # id3 unread in the candidate
    a.categories[BASE].results[2].rules.no_call_unread = 1  # id2 in the baseline
    lim = [g.parse_increase("asked=5"), g.parse_increase("base:asked_destructive=4"),
           g.parse_increase("collateral=0")]
    generous, small, other = g.check_increases(a, b, lim)
    assert generous.passed and not small.passed and other.passed
    for cond in (generous, small):
        assert (cond.values["baseline"], cond.values["candidate"]) == (0, 5)
        assert (cond.values["compared"], cond.values["left_out"]) == (2, 2)
        assert cond.values["left_out_unread"] == 2
    assert small.message == (
        "asked_destructive base: 0 -> 5 (+5) over the 2 conversations both runs replayed, "
        "every turn without a call read (2 left out: 0 not replayed by both, 2 with such a "
        "turn unread), allowed +4")
    assert other.values["compared"] == 4 and "left_out_unread" not in other.values
    for r in b.categories[BASE].results:
        r.rules.no_call_unread = 1
    for cond in g.check_increases(a, b, lim[:2]):
        assert not cond.passed and "not comparable" in cond.message, cond.message
        assert cond.values["compared"] == 0 and cond.values["left_out_unread"] == 4


def test_floor_messages_tell_value_and_floor_apart() -> None:
    """A floor a value misses by less than 6 decimals shows the digits that differ."""
    ms = _ms("a", [(True, 0)] * 4 + [(False, 0)])
    for floor, says in (("base:bfcl=80.0000001", "bfcl base 80% < floor 80.0000001%"),
                        ("base:bfcl=80", "bfcl base 80% >= floor 80%"),
                        ("base:bfcl=1/3", "bfcl base 80% >= floor 0.333333%"),
                        ("base:bfcl=79.99999999999999999999",
                         "bfcl base 80% >= floor 79.99999999999999999999%")):
        assert g.check_floors([ms], [g.parse_floor(floor)])[0].message == says


def test_a_huge_gate_value_is_clipped_in_its_error() -> None:
    """A value of 10**5 digits is quoted clipped, not echoed in full (twice)."""
    for parse, text in ((g.parse_floor, "bfcl=" + "1" * 100_000),
                        (g.parse_floor, "bfcl=" + "x" * 100_000),
                        (g.parse_increase, "collateral=" + "9" * 100_000),
                        (g.parse_increase, "collateral=" + "x" * 100_000)):
        with pytest.raises(ValueError) as e:
            parse(text)
        assert len(str(e.value)) < 1_000 and "characters)" in str(e.value)


def test_every_unmeasurable_increase_names_its_categories() -> None:
    """An increase of ``asked`` that cannot be measured (a run whose turns without a call
    carry no text) names the categories it is over, as every other increase condition does."""
    a = _ms("a", [(True, 0)] * 3)
    b = _ms("b", [(True, 0)] * 3)
    for r in b.categories[BASE].results:
        r.rules.no_call_unread = 1
    for lim, scope in (("asked=0", ["base"]), ("base:asked=0", ["base"])):
        cond = g.check_increases(a, b, [g.parse_increase(lim)])[0]
        assert not cond.passed and "carry no text" in cond.message, cond.message
        assert cond.values == {"limit": 0, "categories": scope}


# ---------------------------------------------------------------- inference errors


@pytest.fixture(scope="module")
def errored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """some: 10 conversations with an extra write each (collateral), the other 190 inference
    errors; every: all 200 inference errors."""
    tmp = tmp_path_factory.mktemp("errors")
    return {"some": inference_errors(
                write_run(tmp / "some", dict.fromkeys(range(10), "extra_write")), 10),
            "every": inference_errors(write_run(tmp / "every", {}), 0)}


def test_inference_errors_have_no_rule_counts(errored: dict[str, Path], tmp_path: Path) -> None:
    """An inference error has nothing replayed: its rules are null (not zeros) and the totals
    are over the replayed conversations, which every table and the document state; where none
    was replayed every rule is n/a. BFCL and safe count it as failed, as before."""
    res = _invoke("score", errored["some"], "--out", tmp_path / "s", "--format", "json")
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, ci_report.schema())
    cat, overall = doc["runs"][0]["categories"][0], doc["runs"][0]["overall"]
    assert (cat["n"], cat["replayed"]) == (N, 10)
    assert (overall["conversations"], overall["replayed"]) == (N, 10)
    assert cat["rules"]["collateral"] > 0 and "replayed" not in cat["rules"]
    assert cat["scores"]["bfcl"]["passes"] <= 10 and cat["scores"]["safe"]["passes"] <= 10
    lines = [json.loads(x) for x in (tmp_path / "s" / "conversations.jsonl").read_text()
             .splitlines()]
    errors = [x for x in lines if x["official_error_type"] == "multi_turn:inference_error"]
    assert len(errors) == N - 10
    assert all(x["rules"] is None and x["safe_valid"] is False for x in errors)
    assert all(type(x["reference_destructive_calls"]) is int and x["blame"] for x in errors)
    row = json.loads((tmp_path / "s" / "rules.json").read_text())["rows"][0]
    assert (row["conversations"], row["replayed"]) == (N, 10)
    assert row["collateral"] == cat["rules"]["collateral"]
    assert f"10/{N}" in res.stderr and "replayed" in _flat(res.stderr)
    # the legend says the N - 10 errors have no counts (it read "inference errors: none")
    # and names every kind the counts leave out (it left out replays the budget stopped)
    assert ("conv: replayed / scored (no rule counts: inference errors, missing, unscorable, "
            "budget-stopped)") in _flat(res.stderr)
    title = json.loads((tmp_path / "s" / "rules.json").read_text())["title"]
    assert "counts over the category's conversations replayed" in title, title

    res = _invoke("score", errored["every"], "--out", tmp_path / "e", "--format", "json")
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, ci_report.schema())
    cat = doc["runs"][0]["categories"][0]
    assert cat["replayed"] == 0 and doc["runs"][0]["overall"]["replayed"] == 0
    assert all(cat["rules"][r] is None for r in ("collateral", "failed", "asked"))
    assert all(v is None for v in doc["runs"][0]["overall"]["rules"].values())
    row = json.loads((tmp_path / "e" / "rules.json").read_text())["rows"][0]
    assert row["replayed"] == 0 and row["collateral"] is None and row["failed"] is None
    assert row["steps / conv"] is None  # (per conversation replayed, as the counts)


def test_rule_totals_over_inference_errors_elsewhere(errored: dict[str, Path],
                                                     runs: dict[str, Path],
                                                     tmp_path: Path) -> None:
    """leaderboard states how many conversations its rule totals are over; compare's
    increase gate is not measurable against a run with nothing replayed (it was 0 -> 0), and
    otherwise compares the conversations both runs replayed, saying how many."""
    res = _invoke("leaderboard", errored["some"], errored["every"], "--out", tmp_path / "lb",
                  "-q")
    assert res.exit_code in (EXIT_OK, EXIT_PROBLEMS), res.output
    rows = {r["entry"]: r for r in json.loads((tmp_path / "lb" / "leaderboard_rules.json")
                                               .read_text())["rows"]}
    assert (rows["some"]["conversations"], rows["some"]["replayed"]) == (N, 10)
    assert rows["some"]["collateral"] > 0
    assert rows["every"]["replayed"] == 0 and rows["every"]["collateral"] is None
    out = tmp_path / "g.json"
    gate = _compare({"a": runs["reference"], "b": errored["every"]}, "a", "b", tmp_path,
                    "--max-increase", "collateral=0", "--format", "json", "--output", out)
    cond = json.loads(out.read_text())["gate"]["conditions"][0]
    assert gate.exit_code == EXIT_GATE and not cond["passed"]
    assert "not measurable" in cond["message"]
    # the candidate replayed 10 of N (the 10 with an extra write, as in the baseline): the
    # counts are paired over those 10, the others left out of both sides, and the line and the
    # document say so (it failed as not comparable, whatever the limit)
    for a, b in (("extra", "some"), ("some", "extra")):
        pair = {"extra": runs["extra"], "some": errored["some"]}
        gate = _compare(pair, a, b, tmp_path, "--max-increase", "collateral=0", "--format",
                        "json", "--output", out)
        doc = json.loads(out.read_text())
        jsonschema.validate(doc, ci_report.schema())
        cond = doc["gate"]["conditions"][0]
        assert gate.exit_code in (EXIT_OK, EXIT_PROBLEMS) and cond["passed"], cond["message"]
        count = doc["runs"][[a, b].index("some")]["shared"]["rules"]["collateral"]
        assert count > 0 and (cond["values"]["baseline"], cond["values"]["candidate"]) == \
            (count, count)
        assert f"{count} -> {count} (+0) over the 10 conversations both runs replayed " \
               f"({N - 10} left out), allowed +0" in cond["message"]
        assert (cond["values"]["compared"], cond["values"]["left_out"]) == (10, N - 10)
        replayed = [N, 10] if b == "some" else [10, N]
        assert cond["values"]["replayed"] == replayed
        assert [r["shared"]["replayed"] for r in doc["runs"]] == replayed
        assert [r["shared"]["conversations"] for r in doc["runs"]] == [N, N]


def test_every_problem_line_is_in_the_document_and_problems_txt(tmp_path: Path) -> None:
    """40 lines not JSON: the terminal folds them (five, then a count), the document lists
    every ``file:line [id]: reason`` line (``problems`` stays their count) and so does
    problems.txt in --out, which the folded list names."""
    run = write_run(tmp_path / "bad", {})
    path = run / "reference" / "multi_turn" / f"BFCL_v4_{BASE}_result.json"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([f"not json {i}" for i in range(40)] + lines[40:]) + "\n")
    out = tmp_path / "out"
    res = _invoke("score", run, "--out", out, "--format", "json", "--output", tmp_path / "ci.json")
    assert res.exit_code == EXIT_PROBLEMS
    doc = json.loads((tmp_path / "ci.json").read_text())
    jsonschema.validate(doc, ci_report.schema())
    listed = doc["problem_lines"]
    assert doc["problems"] == len(listed) >= 40 and doc["problem_lines_omitted"] == 0
    for i in range(1, 41):  # every bad line, by its file and line number
        assert sum(x.startswith(f"{path}:{i} ") or x.startswith(f"{path}:{i}:")
                   for x in listed) == 1, i
    assert (out / "problems.txt").read_text().splitlines() == listed
    assert "... and" in _flat(res.stderr) and "problems.txt" in _flat(res.stderr)
    assert "(listed without -q; all" in _flat(_invoke(
        "score", run, "--out", out, "-q", "--format", "json", "--output", tmp_path / "q.json"
    ).stderr)


def test_the_document_carries_the_figure_the_tables_round() -> None:
    """base 8 of 200, miss_func 70 of 200: the mean is 9.75 (9.749999999999998 in floats,
    which the tables showed as 9.7 while the step summary rounded the document's 9.75 to 9.8).
    The document stores 9.75 and every display rounds it one way, half up: 9.8."""
    from careful_engine.present.tables import accuracy_table

    ms = ModelScore("m", "dec")
    for cat, ok in ((BASE, 8), ("multi_turn_miss_func", 70)):
        ms.categories[cat] = CategoryScore("m", cat, [
            ConversationResult("m", cat, f"{cat}_{i}", Verdict(i < ok),
                               rules=ConversationRules(Counter(), [], [])) for i in range(200)])
    run = ci_report.model_json(ms, True, path="x", role="run")
    table = accuracy_table([ms], True).json()["rows"][0]
    mean = run["overall"]["mean_percent"]
    assert table["mean BFCL"] == mean["bfcl"] and shown(mean["bfcl"]) == 9.8
    assert mean["bfcl"] == 9.75 == round(100 * ms.mean_accuracy(), 9)  # float noise off
    doc = ci_report.document("score", settings={"boundary": None, "detector": "strict",
                                                "effects": True},
                             gate=g.Gate([], False), exit_code=0, runs=[run])
    jsonschema.validate(doc, ci_report.schema())
    row = next(x for x in ci_report.markdown(doc).splitlines() if "| mean |" in x)
    assert "| 9.8 |" in row and "9.7" not in row


def test_every_documented_rule_key_is_always_in_the_document() -> None:
    """``asked_read`` and ``asked_unread`` (and any rule) appeared only when not 0: a reader
    could not tell 0 from a key that does not exist. Every one is present, 0 when none."""
    from careful_engine.scoring.rules import ASKED_READ, ASKED_UNREAD, RULES

    run = ci_report.model_json(_ms("m", [(True, 0), (False, 0)]), True, path="x", role="run")
    for rules in (run["overall"]["rules"], run["categories"][0]["rules"]):
        assert list(rules) == [*RULES, ASKED_READ, ASKED_UNREAD]
        assert rules[ASKED_READ] == rules[ASKED_UNREAD] == rules["collateral"] == 0
    doc = ci_report.document("score", settings={"boundary": None, "detector": "strict",
                                                "effects": True},
                             gate=g.Gate([], False), exit_code=0, runs=[run])
    jsonschema.validate(doc, ci_report.schema())


def test_the_ci_document_names_the_engine_as_the_score_lines_do(monkeypatch) -> None:
    """The CI document looked its version up on its own, null where the package is not
    installed, while the score lines' ``scored_with.engine`` said ``0+unknown``: now both
    are :func:`careful_engine.scoring.settings.engine_version`."""
    from importlib import metadata

    from careful_engine.scoring import settings

    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    settings.engine_version.cache_clear()
    try:
        doc = ci_report.document("score", settings={"boundary": None, "detector": "strict",
                                                    "effects": False}, runs=[],
                                 gate=g.Gate([], False), exit_code=0)
        engine = settings.scored_with(None, "strict", None)["engine"]
    finally:
        settings.engine_version.cache_clear()
    assert doc["careful_version"] == engine == "0+unknown"
    jsonschema.validate(doc, ci_report.schema())
