"""The paper's label sets (annotations/paper/) and the boundaries `careful adjudicate` writes
from them (declarations/boundary/paper-*.json): reproducible byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from careful_cli.paper import regenerate_boundaries
from careful_engine.annotation import paper_labels
from careful_engine.effects import boundary
from careful_engine.effects.declarations import load as load_declarations


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("boundaries")
    regenerate_boundaries(out)
    return out


def test_boundaries_regenerate_byte_identical(regenerated: Path) -> None:
    for name in paper_labels.BOUNDARIES:
        shipped = boundary.boundary_dir() / f"{name}.json"
        assert (regenerated / f"{name}.json").read_bytes() == shipped.read_bytes(), name


def test_label_sets_are_the_reconstruction() -> None:
    """The committed files are what the reconstruction writes (the round's declarations hash
    aside, which follows declarations/effects.json)."""
    def strip(doc: dict) -> dict:
        doc = json.loads(json.dumps(doc))
        doc["round"].pop("declarations_sha256")
        for x in doc["labels"]:
            x.pop("inputs")
        return doc

    for a, doc in paper_labels.documents().items():
        shipped = json.loads((paper_labels.release_dir() / f"{a}.json").read_text("utf-8"))
        assert strip(shipped) == strip(doc), a
        assert all("[source: §4" in x["reason"] for x in shipped["labels"])


def test_boundary_sizes_and_the_documented_inconsistencies() -> None:
    sets = {n: set(boundary.load(n).destructive) for n in paper_labels.BOUNDARIES}
    sizes = {n: len(s) for n, s in sets.items()}
    # the paper says A1 16, A2 16, A3 17, A4 21 and a 17-function majority; its splits give:
    assert sizes == {"paper-A1": 15, "paper-A2": 15, "paper-A3": 16, "paper-A4": 22,
                     "paper-majority": 16, "paper-final": 24}
    union = sets["paper-A1"] | sets["paper-A2"] | sets["paper-A3"] | sets["paper-A4"]
    assert sets["paper-final"] == union
    majority = {f for f in union
                if sum(f in sets[f"paper-A{i}"] for i in (1, 2, 3)) >= 2}
    assert sets["paper-majority"] == majority
    assert len(sets["paper-final"] - sets["paper-majority"]) == 8  # the paper: seven
    kinds = {n: f["kind"] for n, f in load_declarations().functions.items()}
    writes = {n for n, k in kinds.items() if k == "write"}
    assert len(writes) == 49
    assert kinds["contact_customer_support"] == "read"  # so the boundary holds 23 writes
    assert len(sets["paper-final"] & writes) == 23
    each = [sets[f"paper-A{i}"] for i in (1, 2, 3, 4)]
    unanimous = [w for w in writes if len({w in s for s in each}) == 1]
    assert len(unanimous) == 39  # the paper: 38
    assert len(paper_labels.INCONSISTENCIES) >= 4


def test_boundaries_record_how_they_were_made() -> None:
    for name, (policy, who, _) in paper_labels.BOUNDARIES.items():
        data = json.loads((boundary.boundary_dir() / f"{name}.json").read_text("utf-8"))
        assert data["round"] == "paper" and data["policy"] == policy
        assert data["created"] == paper_labels.CREATED and data["version"] == 1
        assert data["decided_by"] == (who.split(",") if who else
                                      [policy.split(":")[1]] if ":" in policy else
                                      list(paper_labels.ANNOTATORS))
