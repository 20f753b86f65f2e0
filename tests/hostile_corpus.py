"""Hostile inputs shared by the isolation, safe-write and terminal-safety tests: small runs
(a few reference entries of one category) with one kind of damage each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from careful_engine.core import bfcl
from careful_engine.demo import reference as demo

CATEGORY = "multi_turn_base"
RESULT = f"BFCL_v4_{CATEGORY}_result.json"
N_GOOD = 3  # reference entries per file: enough to score, cheap to replay
ESC = "\x1b"
# markup, an escape sequence, a bell, a bidi override: what a hostile name carries
HOSTILE_NAME = f"[red]evil[blink]{ESC}[31mred{ESC}]0;title\x07\u202egnp"


def ids() -> list[str]:
    return [c.id for c in bfcl.conversations(CATEGORY)]


def reference_lines(n: int = N_GOOD) -> list[str]:
    return [json.dumps(demo.reference_entry(c)) for c in bfcl.conversations(CATEGORY)[:n]]


def model_dir(run: Path, model: str | bytes) -> Path:
    """``run/model`` (a bytes name may be invalid UTF-8)."""
    if isinstance(model, bytes):
        return Path(os.fsdecode(os.path.join(os.fsencode(run), model)))
    return run / model


def write_model(run: Path, model: str | bytes, extra: list[str] = (), *,
                decoder: object = demo.DECODER, good: int = N_GOOD) -> Path:
    """A V4 model folder holding ``good`` reference entries plus ``extra`` lines, with a
    ``careful_run.json`` naming ``decoder`` (None: no manifest)."""
    folder = model_dir(run, model)
    (folder / "multi_turn").mkdir(parents=True, exist_ok=True)
    path = folder / "multi_turn" / RESULT
    path.write_text("\n".join(reference_lines(good) + list(extra)) + "\n")
    if decoder is not None:
        (folder / "careful_run.json").write_text(json.dumps({"decoder": decoder}))
    return path


def big_int_line(entry_id: str, digits: int = 5000) -> str:
    return f'{{"id": "{entry_id}", "result": {"7" * digits}}}'


def deep_line(entry_id: str, depth: int) -> str:
    return f'{{"id": "{entry_id}", "result": {"[" * depth + "]" * depth}}}'


def run_cli(*args: str, env: dict | None = None, timeout: float = 300,
            prelude: str = "") -> subprocess.CompletedProcess:
    """``careful ARGS`` in a fresh interpreter through the real entry point (main()), with
    optional Python run first (``prelude``: e.g. a patch)."""
    code = f"import sys\n{prelude}\nfrom careful_cli import main\nsys.argv = ['careful', *sys.argv[1:]]\nmain()\n"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})},
                          errors="surrogateescape")
