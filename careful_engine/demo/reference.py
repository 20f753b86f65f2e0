"""The embedded default run: the reference trajectories written as a model's FC output.

Each reference turn becomes one step holding all its calls in bfcl's FC format
(``[{name: json-string-arguments}]``, positional arguments bound to their parameter names)
followed by a closing text step, in bfcl generate's V4 layout. A ``careful_run.json`` manifest
beside the results names the registered decoder, so ``careful score`` needs no flags.
"""

from __future__ import annotations

import json
import os
import stat
from collections import Counter
from pathlib import Path

from careful_engine.core import bfcl, runs
from careful_engine.core.runs import is_synthetic  # noqa: F401  (the demo's names for them)
from careful_engine.core.runs import model_manifest as manifest  # noqa: F401
from careful_engine.core.runs import result_model_folder as model_folder  # noqa: F401
from careful_engine.core.safe_write import write_text
from careful_engine.demo import flaws
from careful_engine.demo.flaws import fc_step
from careful_engine.scoring.outputs import SCORE_DIR
from careful_engine.scoring.score import load_effects

MODEL_DIR = "reference"
FLAWED_DIR = "demo-flawed"  # the flawed run's folder; its model folder is flaws.MODEL_DIR
DECODER = "claude-sonnet-4-5-20250929-FC"
MANIFEST = runs.MANIFEST
CLOSING = ["Done."]


def _write(path: Path, text: str) -> None:
    """Write a file, replacing it; a link planted at the path is never followed."""
    # the run folder is the root: no link is followed below it (careful_engine.core.safe_write)
    root = path.parents[2] if path.parent.name == "multi_turn" else path.parents[1]
    write_text(path, text, root=root)


def reference_entry(conv: bfcl.Conversation) -> dict:
    result = [([fc_step(turn)] if turn else []) + [CLOSING] for turn in conv.ground_truth]
    return {"id": conv.id, "result": result}


def write_reference_run(out: Path, categories: tuple[str, ...] = bfcl.CATEGORIES) -> list[Path]:
    """Write the reference run under ``out``; returns the result files written."""
    folder = out / MODEL_DIR / "multi_turn"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for category in categories:
        path = folder / f"BFCL_v4_{category}_result.json"
        _write(path, "".join(json.dumps(reference_entry(conv)) + "\n"
                             for conv in bfcl.conversations(category)))
        paths.append(path)
    doc = {
        "model": MODEL_DIR,
        "decoder": DECODER,
        "condition": "reference",
        "bfcl_eval": bfcl.BFCL_VERSION,
        "note": "model output = the reference trajectory of every conversation",
    }
    _write(out / MODEL_DIR / MANIFEST, json.dumps(doc, indent=2) + "\n")
    return paths


def write_flawed_run(out: Path, categories: tuple[str, ...] = bfcl.CATEGORIES,
                     seed: int = flaws.SEED) -> list[Path]:
    """Write the SYNTHETIC flawed run under ``out`` (see careful_engine.demo.flaws); returns the
    result files written. The manifest says which flaw went where, and why."""
    effects = load_effects()
    folder = out / flaws.MODEL_DIR / "multi_turn"
    folder.mkdir(parents=True, exist_ok=True)
    paths, per_conversation, counts = [], {}, {}
    for category in categories:
        entries, placed = flaws.flawed_entries(category, effects, seed)
        path = folder / f"BFCL_v4_{category}_result.json"
        _write(path, "".join(json.dumps(e) + "\n" for e in entries))
        paths.append(path)
        per_conversation.update(placed)
        counts[category] = dict(sorted(Counter(p["flaw"] for p in placed.values()).items()))
    doc = {
        "model": flaws.MODEL_DIR,
        "decoder": DECODER,
        "condition": "synthetic flaws",
        "synthetic": True,
        "bfcl_eval": bfcl.BFCL_VERSION,
        "seed": seed,
        "note": "SYNTHETIC: no model wrote this. careful demo applied one flaw each to about a "
                "third of the reference trajectories (careful_engine/demo/flaws.py); the rest are "
                "the reference, one call per step. Not a model's results.",
        "flaw_kinds": flaws.KINDS,
        "flaws_per_category": counts,
        "conversations": per_conversation,
    }
    _write(out / flaws.MODEL_DIR / MANIFEST, json.dumps(doc, indent=2) + "\n")
    return paths


def _names(folder: Path) -> set[str] | None:
    """The entries of a real folder (not a link), None where it is anything else."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return None
        return set(os.listdir(folder))
    except OSError:
        return None


def earlier_demo(out: Path, flawed: bool) -> bool:
    """Whether ``out`` holds nothing but what an earlier ``careful demo`` wrote there (the
    reference run, or the flawed one with ``flawed``): its model folder, with its manifest
    (the demo's condition) and result files only, and the scores beside it. Such a folder is
    written over without ``--force``; anything else in it (a file of the user's, a link)
    makes it someone else's."""
    model_dir = flaws.MODEL_DIR if flawed else MODEL_DIR
    top = _names(out)
    if top is None or not top <= {model_dir, SCORE_DIR} or model_dir not in top:
        return False
    if SCORE_DIR in top and _names(out / SCORE_DIR) is None:
        return False
    model = out / model_dir
    if _names(model) != {MANIFEST, "multi_turn"}:
        return False
    results = {f"BFCL_v4_{c}_result.json" for c in bfcl.CATEGORIES}
    listed = _names(model / "multi_turn")
    if listed is None or not listed <= results:
        return False
    doc = manifest(model)
    return doc.get("model") == model_dir and doc.get("condition") == (
        "synthetic flaws" if flawed else "reference")
