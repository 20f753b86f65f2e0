"""Scores without re-scoring (:func:`model_score` from score lines), and scoring one model
folder in a separate process (``python -m careful_engine.browse score``, through
:func:`careful_engine.scoring.score.score_to_file`), which reports its progress as
:class:`ScoreEvent` JSON lines."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from careful_engine.browse.runs import RunRef
from careful_engine.core import bfcl
from careful_engine.effects.boundary import DEFAULT_BOUNDARY
from careful_engine.scoring.result import ConversationResult
from careful_engine.scoring.score import CategoryScore, ModelScore, score_to_file

# ---------------------------------------------------------------- scores without re-scoring


def model_score(ref: RunRef, summaries: dict[str, dict]) -> ModelScore | None:
    """The run's :class:`ModelScore` rebuilt from its score lines (None if one is missing or
    is not a result line of this model and category)."""
    ms = ModelScore(ref.model, ref.decoder)
    for category in ref.categories:
        results = []
        for conv in bfcl.conversations(category):
            try:
                r = ConversationResult.from_json(summaries.get(conv.id))
            except ValueError:
                return None
            if (r.model, r.category, r.id) != (ref.model, category, conv.id):
                return None
            results.append(r)
        ms.categories[category] = CategoryScore(ref.model, category, results)
    return ms


# ---------------------------------------------------------------- scoring in a subprocess
# (to go: the workbench will score in a worker thread calling
# careful_engine.scoring.score.score_to_file directly; see /work/notes/arch2.md)


@dataclass(frozen=True)
class ScoreEvent:
    """One event of a scoring subprocess, as a JSON line on its own channel (its stdout;
    anything else it prints goes to stderr): ``start`` (``total``), ``entry`` (one more
    conversation), ``done`` (``out``) or ``error`` (``message``)."""

    kind: str
    total: int = 0
    out: str = ""
    message: str = ""

    def to_line(self) -> str:
        return json.dumps({"event": self.kind, "total": self.total, "out": self.out,
                           "message": self.message}) + "\n"

    @classmethod
    def from_line(cls, line: str) -> ScoreEvent | None:
        """The event on one line, or None for a line that is not one (never an exception)."""
        try:
            data = json.loads(line)
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("event") not in EVENTS:
            return None
        total = data.get("total")
        return cls(str(data["event"]),
                   total if type(total) is int and total >= 0 else 0,
                   str(data.get("out") or ""), str(data.get("message") or ""))


EVENTS = ("start", "entry", "done", "error")


def read_events(stream: Iterable[str]) -> Iterator[ScoreEvent]:
    """The events of a scoring subprocess's channel, skipping anything that is not one."""
    for line in stream:
        event = ScoreEvent.from_line(line)
        if event is not None:
            yield event


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m careful_engine.browse")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("score", help="score one model folder; one JSON event line per "
                       "conversation on stdout (see ScoreEvent)")
    p.add_argument("run", type=Path)
    p.add_argument("--model", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--decoder")
    p.add_argument("--boundary", default=DEFAULT_BOUNDARY)
    p.add_argument("--declarations", type=Path)
    p.add_argument("--detector", default="strict")
    args = parser.parse_args(argv)
    # the events own stdout; whatever else is printed (bfcl, warnings) goes to stderr
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    def say(event: ScoreEvent) -> None:
        channel.write(event.to_line())
        channel.flush()

    try:
        out = score_to_file(args.run, args.model, args.out, decoder=args.decoder,
                            boundary=args.boundary, declarations=args.declarations,
                            detector=args.detector,
                            on_start=lambda n: say(ScoreEvent("start", total=n)),
                            on_entry=lambda: say(ScoreEvent("entry")))
    except (ValueError, OSError) as e:
        say(ScoreEvent("error", message=str(e)))
        return 2
    say(ScoreEvent("done", out=str(out)))
    return 0
