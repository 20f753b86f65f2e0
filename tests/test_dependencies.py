"""The declared dependencies, checked: every third-party package the project imports is named in
pyproject.toml, and requirements/runtime.txt (what scripts/setup.sh installs) names the same
packages with the same bounds."""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("careful_engine", "careful_cli", "workbench")
# installed by scripts/setup.sh on its own, with --no-deps, so runtime.txt leaves it out
SEPARATE = {"bfcl-eval"}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _declared(project: dict) -> set[str]:
    """Canonical distribution names in dependencies and every optional-dependencies group."""
    reqs = list(project.get("dependencies", []))
    for group in project.get("optional-dependencies", {}).values():
        reqs += group
    return {canonicalize_name(Requirement(r).name) for r in reqs}


def _imported_tops() -> dict[str, str]:
    """Top-level name of every absolute third-party import -> one `file:line` importing it."""
    own = set(PACKAGES)
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in own or top in sys.stdlib_module_names:
                        continue
                    found.setdefault(top, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def _distributions(top: str, mapping: dict[str, list[str]]) -> set[str]:
    """The distributions that provide import name `top` (its own name when not installed,
    e.g. an optional extra's package)."""
    return {canonicalize_name(d) for d in mapping.get(top, [top])}


def undeclared(project: dict) -> list[str]:
    declared = _declared(project)
    mapping = importlib.metadata.packages_distributions()
    return sorted(f"{where}: {top} ({', '.join(sorted(_distributions(top, mapping)))})"
                  for top, where in _imported_tops().items()
                  if not _distributions(top, mapping) & declared)


def test_every_third_party_import_is_declared():
    """An import that only arrives through another package's dependencies (httpx2 through
    anthropic, click through typer) breaks when that package changes its own."""
    assert undeclared(_pyproject()["project"]) == []


def test_the_check_sees_a_missing_declaration():
    """The check itself: dropping one declared package makes it report that package."""
    project = dict(_pyproject()["project"])
    project["dependencies"] = [r for r in project["dependencies"]
                               if canonicalize_name(Requirement(r).name) != "httpx2"]
    assert any(line.endswith(": httpx2 (httpx2)") for line in undeclared(project))


def _runtime_txt() -> dict[str, Requirement]:
    reqs = {}
    for line in (ROOT / "requirements" / "runtime.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            reqs[canonicalize_name(req.name)] = req
    return reqs


def test_runtime_txt_mirrors_pyproject():
    """scripts/setup.sh installs requirements/runtime.txt (bfcl-eval apart, --no-deps); `pip
    install .` reads pyproject.toml: both name the same packages with the same bounds."""
    project = {canonicalize_name(Requirement(r).name): Requirement(r)
               for r in _pyproject()["project"]["dependencies"]}
    runtime = _runtime_txt()
    assert sorted(set(project) - SEPARATE) == sorted(runtime)
    assert {n: str(r.specifier) for n, r in runtime.items()} == \
           {n: str(project[n].specifier) for n in runtime}
