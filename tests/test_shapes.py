"""Every result shape bfcl's evaluator accepts: the engine's verdict and error type against
bfcl's own (``eval_runner._evaluate_single_multi_turn_entry``, run at test time), on the
references and their perturbations rendered in each shape.

Shapes: turns as one string, as a list of strings, steps as JSON strings, as objects with
object arguments, text steps wrapped in lists or bare, turns as objects (bfcl iterates keys),
empty turns and missing turns, through an FC and a prompting decoder.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.core import bfcl
from careful_engine.core.decode import decode_entry
from careful_engine.demo.reference import fc_step

from . import perturb
from .verdicts import FC_DECODER, PROMPTING_DECODER, agree

N = 100  # conversations of multi_turn_base per shape (references and 7 perturbations each)


def _fc_objects(calls: list[str]) -> list[dict]:
    return [{n: json.loads(a)} for d in fc_step(calls) for n, a in d.items()]


def _py(calls: list[str]) -> str:
    return f"[{', '.join(calls)}]"


Shape = Callable[[list[str]], object]  # one turn's reference calls -> the turn as written
SHAPES: dict[str, tuple[str, Shape]] = {
    "fc: steps with JSON-string arguments, text wrapped in a list":
        (FC_DECODER, lambda c: ([fc_step(c)] if c else []) + [["Done."]]),
    "fc: steps with object arguments": (FC_DECODER, lambda c: ([_fc_objects(c)] if c else [])),
    "fc: steps as JSON strings": (FC_DECODER, lambda c: [json.dumps(fc_step(c))] if c else []),
    "fc: bare text steps": (FC_DECODER, lambda c: ([fc_step(c)] if c else []) + ["Done."]),
    "fc: turns as one string": (FC_DECODER, lambda c: json.dumps(fc_step(c)) if c else ""),
    "fc: turns as objects": (FC_DECODER, lambda c: fc_step(c)[0] if c else {}),
    "prompting: turns as lists of strings":
        (PROMPTING_DECODER, lambda c: ([_py(c)] if c else []) + ["All done."]),
    "prompting: turns as one string": (PROMPTING_DECODER, lambda c: _py(c) if c else ""),
    "prompting: text wrapped in lists":
        (PROMPTING_DECODER, lambda c: ([[_py(c)]] if c else []) + [["All done."]]),
    "empty turns": (FC_DECODER, lambda c: []),
}


def _entries(shape: Shape) -> list[list[dict]]:
    """Per kind (reference, each perturbation, missing turns): one entry per conversation."""
    kinds: dict[str, list[dict]] = {}
    for conv in bfcl.conversations("multi_turn_base")[:N]:
        variants = {"reference": [list(t) for t in conv.ground_truth], **perturb.perturbations(conv)}
        variants["missing_turns"] = variants["reference"][:1]
        for kind, turns in variants.items():
            kinds.setdefault(kind, []).append(
                {"id": conv.id, "result": [shape(t) for t in turns]})
    return list(kinds.values())


@pytest.mark.parametrize("name", list(SHAPES))
def test_every_shape_gets_bfcls_verdict(name: str, tmp_path: Path) -> None:
    decoder, shape = SHAPES[name]
    counts: Counter = Counter()
    for entries in _entries(shape):
        counts += agree(entries, "multi_turn_base", decoder, "careful-shapes", tmp_path)
    print(f"\n{name}: {sum(counts.values())} entries agree with bfcl: {dict(counts)}")
    assert sum(counts.values()) == N * 9


def test_string_turns_take_the_named_decoder_and_are_named_plainly(tmp_path: Path) -> None:
    """A folder that is not a registered model, whose turns are strings: --decoder applies."""
    convs = bfcl.conversations("multi_turn_base")[:12]
    path = tmp_path / "run" / "my-model" / "multi_turn" / "BFCL_v4_multi_turn_base_result.json"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps({"id": c.id, "result": [_py(t) for t in c.ground_truth]})
                            + "\n" for c in convs))
    runner = CliRunner()
    _load()
    res = runner.invoke(app, ["score", str(tmp_path / "run"), "--out", str(tmp_path / "o"),
                              "--decoder", PROMPTING_DECODER])
    assert res.exit_code in (0, 1) and "Traceback" not in res.output, res.output
    assert "decoder is needed" not in res.output
    res = runner.invoke(app, ["audit", "decode", str(tmp_path / "run"), "--decoder",
                              PROMPTING_DECODER, "--out", str(tmp_path / "a")])
    assert "turns are strings: bfcl iterates their characters and decodes nothing" in \
        " ".join(res.output.split()), res.output
    traj = decode_entry(json.loads(path.read_text().splitlines()[0]),
                        bfcl.handler(PROMPTING_DECODER))
    assert traj.problems and "turns are strings" in traj.problems[0]
