"""File-system state keys are hash() values, which differ between processes: a reference
recorded by one process (a worker, a forkserver child, an earlier ``careful score``) must still
compare equal to the same state replayed live in another."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATEGORY = "multi_turn_miss_func"

RECORD = f"""
from careful_engine.core import refcache
refcache.warm(({CATEGORY!r},))
"""

COMPARE = f"""
import sys
from careful_engine.core import bfcl, refcache
from careful_engine.core.environment import Environment
refcache.clear_memory()
refcache.warm(({CATEGORY!r},))  # everything is on disk already: nothing recorded here
assert refcache.STATS["recorded"] == 0, refcache.STATS
model, compared, unequal = "Some-Model_v1.5", 0, []
for conv in bfcl.conversations({CATEGORY!r})[:60]:
    if "GorillaFileSystem" not in conv.involved_classes or refcache.depends_on_process(conv):
        continue
    side = refcache.reference_side(conv, model, True, None, None)
    if side is None:
        continue
    env = Environment.for_conversation(conv, "reference", model_name=model)
    for t, texts in enumerate(conv.ground_truth):
        live = [env.execute(x, t, -1) for x in texts]
        for g, w in zip(side.run(t, -1, conv.ground_truth[t]), live, strict=True):
            compared += 1
            if not (g.state_before == w.state_before and g.state_after == w.state_after):
                unequal.append((conv.id, t, w.text))
print(compared, len(unequal), unequal[:3])
sys.exit(1 if unequal or not compared else 0)
"""


def _python(code: str, seed: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": seed, "CAREFUL_CACHE_DIR": str(cache),
           "CAREFUL_REFCACHE": "on", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, text=True,
                          capture_output=True, timeout=600)


def test_a_reference_recorded_under_another_hash_seed_compares_equal(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    done = _python(RECORD, "1", cache)
    assert done.returncode == 0, done.stderr[-2000:]
    got = _python(COMPARE, "2", cache)
    assert got.returncode == 0, (got.stdout, got.stderr[-2000:])
    compared = int(got.stdout.split()[0])
    assert compared > 100, got.stdout
