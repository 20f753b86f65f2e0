"""Systematic perturbations of the reference trajectories, as result entries bfcl can evaluate.

Each perturbation is generated per conversation from its reference, deterministically. FC
entries use bfcl's FC step format (``[{name: json-args}]``) and a text step closing each turn;
prompting entries use the reference call strings verbatim (``"[sort('final_report.pdf')]"``),
which bfcl's prompting decoders parse with positional arguments dropped.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from careful_engine.core import bfcl
from careful_engine.core.calls import Call, format_call, parse_call
from careful_engine.core.replay import replay
from careful_engine.demo import reference as demo
from careful_engine.demo.flaws import EXTRA_READ, fc_step

CLOSING = ["Done."]

# One write per class that changes state in most initial states.
EXTRA_WRITE = {
    "GorillaFileSystem": "touch(file_name='careful_extra.txt')",
    "MathAPI": "add(a=1, b=2)",
    "MessageAPI": "add_contact(user_name='careful_extra')",
    "TwitterAPI": "post_tweet(content='careful extra')",
    "TicketAPI": "create_ticket(title='careful extra')",
    "TradingBot": "add_to_watchlist(stock='ZETA')",
    "TravelAPI": "set_budget_limit(access_token='abc', budget_limit=1.0)",
    "VehicleControlAPI": "setHeadlights(mode='on')",
}


def _methods() -> frozenset[str]:
    return frozenset(bfcl.function_class())


def swap_arguments(text: str) -> str:
    """Swap two argument values, or alter the only one; a call with none gets a bogus one."""
    call = parse_call(text, methods=_methods())
    assert isinstance(call, Call), text
    kwargs = dict(call.kwargs)
    if call.args:  # bind positionals by name through the FC helper's binding
        name, args_json = next(iter(fc_step([text])[0].items()))
        kwargs = json.loads(args_json)
    keys = list(kwargs)
    if len(keys) >= 2 and kwargs[keys[0]] != kwargs[keys[1]]:
        kwargs[keys[0]], kwargs[keys[1]] = kwargs[keys[1]], kwargs[keys[0]]
    elif keys:
        v = kwargs[keys[0]]
        kwargs[keys[0]] = (v + "_x") if isinstance(v, str) else (
            not v if isinstance(v, bool) else (v + 1 if isinstance(v, (int, float)) else v))
    else:
        kwargs["careful_bogus"] = 1
    return format_call(call.name, kwargs)


def _state_changing_calls(conv: bfcl.Conversation, turn: int) -> list[int]:
    """Indices of the reference calls of ``turn`` that changed the state (hidden included)."""
    trace = replay(conv, None)
    return [i for i, rec in enumerate(trace.reference.turns[turn]) if rec.changed]


def perturbations(conv: bfcl.Conversation) -> dict[str, list[list[str]]]:
    """name -> perturbed reference (list of turns of call strings)."""
    rng = random.Random(conv.id)
    gt = [list(t) for t in conv.ground_truth]
    nonempty = [i for i, t in enumerate(gt) if t]
    t = rng.choice(nonempty)
    cls = rng.choice(conv.involved_classes)
    out: dict[str, list[list[str]]] = {}

    p = [list(x) for x in gt]
    del p[t][rng.randrange(len(p[t]))]
    out["dropped_call"] = p

    p = [list(x) for x in gt]
    p[t].insert(rng.randrange(len(p[t]) + 1), EXTRA_READ[cls])
    out["extra_read"] = p

    p = [list(x) for x in gt]
    p[t].append(EXTRA_WRITE[cls])
    out["extra_write"] = p

    # a duplicated write: a call of turn t that changed the state when the reference ran
    p = [list(x) for x in gt]
    writes = _state_changing_calls(conv, t) or list(range(len(p[t])))
    i = rng.choice(writes)
    p[t].insert(i + 1, p[t][i])
    out["duplicated_write"] = p

    p = [list(x) for x in gt]
    i = rng.randrange(len(p[t]))
    p[t][i] = swap_arguments(p[t][i])
    out["swapped_argument"] = p

    p = [list(x) for x in gt]
    p[t] = []
    out["empty_turn"] = p

    p = [list(x) for x in gt]
    out["wrong_turn_count"] = p[:-1] if len(p) > 1 else p + [[]]
    return out


def fc_entry(entry_id: str, turns: list[list[str]], *, undecodable_turn: int | None = None,
             one_step_per_call: bool = False) -> dict:
    result = []
    for t, calls in enumerate(turns):
        steps: list = []
        if calls:
            steps = [fc_step([c]) for c in calls] if one_step_per_call else [fc_step(calls)]
        if t == undecodable_turn:
            steps.insert(0, "I will now call [cd(folder= ... unbalanced")
        result.append(steps + [CLOSING])
    return {"id": entry_id, "result": result}


def prompting_entry(entry_id: str, turns: list[list[str]]) -> dict:
    """Reference call strings as a prompting model writes them, then a text step."""
    return {
        "id": entry_id,
        "result": [([f"[{', '.join(calls)}]"] if calls else []) + ["All done."] for calls in turns],
    }


def all_fc_entries(category: str) -> dict[str, list[dict]]:
    """kind -> entries (one per conversation) for the FC perturbation suite of a category."""
    kinds: dict[str, list[dict]] = {}
    for conv in bfcl.conversations(category):
        gt = [list(t) for t in conv.ground_truth]
        kinds.setdefault("reference", []).append(fc_entry(conv.id, gt))
        kinds.setdefault("reference_step_per_call", []).append(
            fc_entry(conv.id, gt, one_step_per_call=True))
        for name, turns in perturbations(conv).items():
            kinds.setdefault(name, []).append(fc_entry(conv.id, turns))
        t = random.Random(conv.id + "u").randrange(len(gt))
        kinds.setdefault("undecodable_step", []).append(fc_entry(conv.id, gt, undecodable_turn=t))
        only = [list(x) for x in gt]
        nonempty = [i for i, x in enumerate(only) if x]
        entry = fc_entry(conv.id, only)
        entry["result"][nonempty[0]] = ["Let me think about [this"]  # the turn's only step fails
        kinds.setdefault("undecodable_only_step", []).append(entry)
    return kinds


BASE = "multi_turn_base"


def write_run(root: Path, perturbed: dict[int, str], *, drop: set[int] = frozenset(),
              model: str = "reference") -> Path:
    """The reference base category, conversation i replaced by perturbation perturbed[i];
    conversations in ``drop`` left out (missing: counted as failed, an input problem)."""
    path = root / model / "multi_turn" / f"BFCL_v4_{BASE}_result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for i, conv in enumerate(bfcl.conversations(BASE)):
            if i in drop:
                continue
            turns = ([list(t) for t in conv.ground_truth] if i not in perturbed
                     else perturbations(conv)[perturbed[i]])
            f.write(json.dumps(fc_entry(conv.id, turns)) + "\n")
    (root / model / demo.MANIFEST).write_text(json.dumps({"model": model,
                                                          "decoder": demo.DECODER}))
    return root


def inference_errors(root: Path, keep: int, model: str = "reference") -> Path:
    """A :func:`write_run` run with every entry after the first ``keep`` an inference error
    (the result an error string: nothing to replay, as deepseek-r1-0528-errors' 199)."""
    path = root / model / "multi_turn" / f"BFCL_v4_{BASE}_result.json"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(
        x if i < keep else json.dumps({"id": json.loads(x)["id"],
                                       "result": "Error during inference: boom"})
        for i, x in enumerate(lines)) + "\n")
    return root
