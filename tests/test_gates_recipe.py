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

from careful_engine.analysis import ci_report
from careful_engine.core import bfcl
from careful_engine.demo import reference as demo

from .perturb import BASE, write_run

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
