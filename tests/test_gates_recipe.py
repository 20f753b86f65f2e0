"""docs/ci.md cannot drift: its two CI recipes are extracted from the document (the ``yaml``
blocks; in the GitHub workflow the steps named ``careful ...``, in the GitLab job the
``script`` of ``careful-gate``), checked against each other and the README's install, and run
as written, with the installed ``careful``, on the reference run and on perturbed runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_cli.common import EXIT_GATE, EXIT_PROBLEMS
from careful_engine.analysis import ci_report
from careful_engine.core import bfcl
from careful_engine.demo import reference as demo

from .perturb import BASE, write_run

_load()

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "ci.md"
CAREFUL = Path(sys.executable).parent / "careful"
INSTALL = "bash careful/scripts/setup.sh"


def _recipes() -> tuple[dict, dict]:
    """(the GitHub workflow, the GitLab job) as parsed from docs/ci.md."""
    blocks = [yaml.safe_load(b) for b in re.findall(r"^```yaml\n(.*?)^```", DOC.read_text(),
                                                    re.S | re.M)]
    github = [b for b in blocks if "jobs" in b]
    gitlab = [b for b in blocks if "careful-gate" in b and "jobs" not in b]
    assert len(github) == 1 and len(gitlab) == 1, "docs/ci.md: one workflow and one job"
    return github[0]["jobs"]["careful-gate"], gitlab[0]["careful-gate"]


def _github_commands(job: dict) -> list[str]:
    return [s["run"].strip() for s in job["steps"] if s.get("name", "").startswith("careful ")]


@pytest.fixture(scope="module")
def recipe() -> dict:
    gh, gl = _recipes()
    return {"commands": _github_commands(gh), "env": gh["env"], "github": gh, "gitlab": gl}


def test_both_recipes_run_the_same_commands_and_install_the_readme_way(recipe: dict) -> None:
    gh, gl = recipe["github"], recipe["gitlab"]
    cmds = recipe["commands"]
    assert len(cmds) == 2 and all(c.startswith("careful ") for c in cmds)
    assert [c.split()[1] for c in cmds] == ["score", "compare"]
    assert cmds == [c.strip() for c in gl["script"]]
    assert recipe["env"] == gl["variables"]
    assert "--fail-on-regression" in cmds[1] and "--fail-under" in cmds[0]
    install = [s["run"] for s in gh["steps"] if s.get("name") == "install careful"]
    assert len(install) == 1 and INSTALL in install[0]
    assert INSTALL in gl["before_script"]
    assert "bash scripts/setup.sh" in (REPO / "README.md").read_text()
    # the runs come from artifacts
    uses = [s.get("uses", "") for s in gh["steps"]]
    assert sum(u.startswith("actions/download-artifact") for u in uses) == 2
    assert gl["needs"][0]["artifacts"] is True
    junit = gl["artifacts"]["reports"]["junit"]
    assert f"--output {junit}" in cmds[1]  # the report GitLab reads is the one written


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """reference (the four categories); worse (30 of base's conversations lose a call: a
    significant loss, floors still met); base_only (base alone: the mean is 25 %)."""
    tmp = tmp_path_factory.mktemp("recipe")
    demo.write_reference_run(tmp / "reference")
    others = tuple(c for c in bfcl.CATEGORIES if c != BASE)
    demo.write_reference_run(tmp / "worse", others)
    write_run(tmp / "worse", dict.fromkeys(range(30), "dropped_call"))
    return {"reference": tmp / "reference", "worse": tmp / "worse",
            "base_only": write_run(tmp / "base_only", {})}


def _run_recipe(recipe: dict, baseline: Path, candidate: Path, work: Path) -> list[int]:
    """Every command of the recipe, as written, in a fresh workspace holding the two runs where
    the recipe's variables say; returns their exit codes."""
    if not CAREFUL.exists():
        pytest.skip(f"{CAREFUL} is not installed")
    work.mkdir()
    env = {**os.environ, **recipe["env"], "PATH": f"{CAREFUL.parent}{os.pathsep}"
           f"{os.environ.get('PATH', '')}", "GITHUB_STEP_SUMMARY": str(work / "summary.md")}
    shutil.copytree(baseline, work / env["BASELINE_RUN"])
    shutil.copytree(candidate, work / env["CANDIDATE_RUN"])
    codes = []
    for cmd in recipe["commands"]:
        proc = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode != 2, proc.stderr  # the documented command line is valid
        codes.append(proc.returncode)
    return codes


def _junit_failures(work: Path, recipe: dict) -> int:
    junit = recipe["gitlab"]["artifacts"]["reports"]["junit"]
    root = ET.parse(work / junit).getroot()
    assert int(root.get("failures")) == len(root.findall(".//failure"))
    return len(root.findall(".//failure"))


def _score_doc(work: Path) -> dict:
    doc = json.loads((work / "careful-out" / "score.json").read_text())
    jsonschema.validate(doc, ci_report.schema())
    return doc


def test_recipe_passes_an_unchanged_candidate(recipe: dict, runs: dict, tmp_path: Path) -> None:
    work = tmp_path / "w"
    assert _run_recipe(recipe, runs["reference"], runs["reference"], work) == [0, 0]
    assert _junit_failures(work, recipe) == 0
    assert _score_doc(work)["runs"][0]["overall"]["mean_percent"]["bfcl"] == 100.0
    summary = (work / "summary.md").read_text()
    assert "careful score: gate passed" in summary and "careful compare: gate passed" in summary


def test_recipe_stops_a_significant_loss_with_exit_4(recipe: dict, runs: dict,
                                                     tmp_path: Path) -> None:
    work = tmp_path / "w"
    assert _run_recipe(recipe, runs["reference"], runs["worse"], work) == [0, 4]
    assert _junit_failures(work, recipe) == 4  # bfcl and safe, on base and overall
    assert _score_doc(work)["gate"]["passed"]  # 96.25 % mean: the floors hold
    assert "careful compare: gate FAILED (4 condition(s))" in (work / "summary.md").read_text()


def test_recipe_stops_a_run_below_its_floors(recipe: dict, runs: dict, tmp_path: Path) -> None:
    work = tmp_path / "w"
    assert _run_recipe(recipe, runs["reference"], runs["base_only"], work) == [4, 4]
    failed = [c["message"] for c in _score_doc(work)["gate"]["conditions"] if not c["passed"]]
    assert failed == ["bfcl mean 25% < floor 40%", "safe mean 25% < floor 35%"]
    assert _junit_failures(work, recipe) == 6  # 3 categories missing, under bfcl and safe


def test_the_document_lists_every_rule_a_gate_takes() -> None:
    from careful_engine.analysis.gates import RULES

    text = DOC.read_text(encoding="utf-8")
    part = text[text.index("--max-increase [CATEGORY:]RULE=N`"):]
    listed = part[part.index("Rules: "):part.index("(see `careful score --help`)")]
    assert re.findall(r"`(\w+)`", listed) == list(RULES)


# README's CI example on two real runs: the candidate has one inference error more than the
# baseline (11 against 10), and the decoder their manifests do not name
REAL = ("gpt-oss-120b-vllm-v0.10.2", "gpt-oss-120b-vllm-v0.11.0")
DECODER = "gpt-4o-2024-11-20-FC"


def _careful(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def _collateral(run: Path, out: Path) -> dict[tuple[str, str], int | None]:
    """(category, id) -> collateral calls (None: not replayed), from ``careful score``'s
    conversation lines."""
    res = _careful("score", run, "--decoder", DECODER, "--out", out, "-q")
    assert res.exit_code in (0, EXIT_PROBLEMS), res.output
    lines = [json.loads(x) for x in (out / "conversations.jsonl").read_text().splitlines()]
    return {(x["category"], x["id"]): (x["rules"] or {}).get("collateral") for x in lines}


def test_readme_example_on_real_runs_compares_the_conversations_both_replayed(
        shared_runs: Path, tmp_path: Path) -> None:
    """``careful compare BASELINE CANDIDATE --fail-on-regression --alpha 0.05 --max-increase
    collateral=N`` on two real runs, one inference error apart: the limit compares collateral
    over the conversations both replayed (the candidate's extra error no longer makes it not
    comparable whatever N, with no counts shown): a generous limit passes (exit 1: the runs'
    inference errors are input problems), a small one fails with one line stating both
    counts, how many conversations were compared and how many left out."""
    runs = [shared_runs / n for n in REAL]
    if not all(r.is_dir() for r in runs):
        pytest.skip(f"{', '.join(REAL)} not in {shared_runs}")
    a, b = (_collateral(r, tmp_path / f"score{i}") for i, r in enumerate(runs))
    both = [k for k in a if a[k] is not None and b.get(k) is not None]
    left = len(a.keys() | b.keys()) - len(both)
    assert sum(v is None for v in b.values()) > sum(v is None for v in a.values())
    ca, cb = sum(a[k] for k in both), sum(b[k] for k in both)
    assert cb - ca > 5 and left > 0
    line = (f"gate failed: collateral overall (3 shared categories: base, miss_func, "
            f"miss_param): {ca} -> {cb} ({cb - ca:+d}) over the {len(both)} conversations both "
            f"runs replayed ({left} left out), allowed +5")
    for limit, code in ((5, EXIT_GATE), (cb - ca, EXIT_PROBLEMS), (1000, EXIT_PROBLEMS)):
        out = tmp_path / f"gate{limit}.json"
        res = _careful("compare", *runs, "--decoder", DECODER, "--fail-on-regression",
                       "--alpha", "0.05", "--max-increase", f"collateral={limit}", "--out",
                       tmp_path / "cmp", "-q", "--format", "json", "--output", out)
        doc = json.loads(out.read_text())
        jsonschema.validate(doc, ci_report.schema())
        assert res.exit_code == code, res.output
        (cond,) = [c for c in doc["gate"]["conditions"] if c["kind"] == "increase"]
        assert cond["passed"] == (code != EXIT_GATE)
        assert (cond["values"]["baseline"], cond["values"]["candidate"]) == (ca, cb)
        assert (cond["values"]["compared"], cond["values"]["left_out"]) == (len(both), left)
        failed = " ".join(res.stderr.split()).split("gate failed: ")[1:]
        assert [f"gate failed: {x}".strip() for x in failed] == ([line] if code == EXIT_GATE
                                                                 else [])
