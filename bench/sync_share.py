"""Measurement: how much of the reference side a model side could lend it, per run and category.

Where the model side of a turn starts from the state the reference turn starts from and makes
exactly the reference's calls (the same names and arguments, argument types included, in the
same order), the reference turn computes nothing new: its results and states are the model's.
A replay could then execute such turns once for both sides. This prints the upper bound of
that saving: the share of reference calls in turns that are in step from the conversation's
start (every earlier turn matched too; conversations whose classes reach bfcl's process-global
objects are left out, as the reference cache leaves them out). It changes nothing; it is the
figure to look at before building that sharing.

    python bench/sync_share.py [--runs ../shared/runs]

(``bound``: conversations left out; ``in step``: the share of the file's reference calls.)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import shared_runs  # bench/shared_runs.py (a script's folder is on its path)

from careful_engine.core import bfcl, refcache
from careful_engine.core.decode import decode_entry
from careful_engine.core.replay import replay
from careful_engine.core.runs import load_result_file
from careful_engine.core.trajectory import CallRecord
from careful_engine.scoring.score import discover


def _key(record: CallRecord) -> str | None:
    """A call's name and arguments, their types shown by repr (None: a refused call, never
    shared)."""
    return record.call.signature() if record.parsed else None


def main() -> None:
    here = Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=here / "shared/runs")
    args = ap.parse_args()
    os.environ["CAREFUL_REFCACHE"] = "off"  # every reference replayed live
    print(f"{'run / category':<48} {'convs':>5} {'bound':>5} {'ref calls':>9} {'in step':>8}")
    total = shared = 0
    for run in sorted(p for p in args.runs.iterdir() if p.is_dir()):
        by_model, _ = discover(run)
        for model, files in by_model.items():
            handler = shared_runs.handler(run, model)
            for rf in files:
                loaded = load_result_file(rf)
                n = bound = calls = in_step = 0
                for entry in loaded.entries.values():
                    conv = bfcl.conversation(entry["id"])
                    n += 1
                    trace = replay(conv, decode_entry(entry, handler), model_name=model)
                    ref_turns = trace.reference.turns
                    calls += sum(len(t) for t in ref_turns)
                    if refcache.process_classes(conv):
                        bound += 1
                        continue
                    model_turns = trace.model.turns if trace.model else []
                    for t, ref_turn in enumerate(ref_turns):
                        keys = [_key(r) for r in ref_turn]
                        if (t >= len(model_turns) or None in keys
                                or [_key(r) for r in model_turns[t]] != keys):
                            break
                        in_step += len(ref_turn)
                total, shared = total + calls, shared + in_step
                name = f"{run.name} / {rf.category.removeprefix('multi_turn_')}"
                print(f"{name[:48]:<48} {n:>5} {bound:>5} {calls:>9} "
                      f"{in_step / max(calls, 1):>8.0%}")
    print(f"all: {shared} of {total} reference calls in step ({shared / max(total, 1):.0%})")


if __name__ == "__main__":
    main()
