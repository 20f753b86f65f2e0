"""The embedded default run: the reference trajectories written as a model's FC output.

Each reference turn becomes one step holding all its calls in bfcl's FC format
(``[{name: json-string-arguments}]``, positional arguments bound to their parameter names)
followed by a closing text step, in bfcl generate's V4 layout. A ``careful_run.json`` manifest
beside the results names the registered decoder, so ``careful score`` needs no flags.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import bfcl
from .calls import Call, parse_call

MODEL_DIR = "reference"
DECODER = "claude-sonnet-4-5-20250929-FC"
MANIFEST = "careful_run.json"
CLOSING = ["Done."]


def fc_step(calls: list[str]) -> list[dict[str, str]]:
    """Reference call strings as one FC step, positional arguments bound to names."""
    classes = bfcl.function_class()
    step = []
    for text in calls:
        call = parse_call(text, methods=frozenset(classes))
        if not isinstance(call, Call):
            raise ValueError(f"reference call {text!r} does not parse: {call.reason}")
        args = dict(call.kwargs)
        if call.args:
            args = bfcl.bound_arguments(call.name, call.args, args, partial=True) or args
        step.append({call.name: json.dumps(args)})
    return step


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
        with open(path, "w", encoding="utf-8") as f:
            for conv in bfcl.conversations(category):
                f.write(json.dumps(reference_entry(conv)) + "\n")
        paths.append(path)
    manifest = {
        "model": MODEL_DIR,
        "decoder": DECODER,
        "condition": "reference",
        "bfcl_eval": bfcl.BFCL_VERSION,
        "note": "model output = the reference trajectory of every conversation",
    }
    (out / MODEL_DIR / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return paths
