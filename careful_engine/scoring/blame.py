"""Blame: where a failed conversation first went wrong (None for a passing one).

The first turn whose public end state differs from the reference's is found: the first model
call whose change lies inside a differing attribute is blamed, else the first that created,
removed or replaced one of its parents (a post that created the tweet whose content differs;
not a mkdir whose folder later misses a file); when no model call did, the reference calls
that made such a change are missing, each with the closest model call of the turn (the one
:func:`careful_engine.scoring.rules.align` matched to it, else the most similar by name and
bound arguments). A response mismatch names every reference call whose result is missing and
the closest model call to each. A turn with no decoded call, a conversation cut short (step
limit) and an inference error name the reference calls of the turn that were not made (those
no model call matches by call or function, else all of them; with none, the last model call
made). Every failed conversation gets a blame that names a call or a missing reference call,
as long as its reference makes a call, except one whose replay the budget stopped
(careful_engine.core.budget): not replayed in full, it has no blame (None; null in JSON), as it
has no rule counts, whatever verdict it carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from careful_engine.core.checker import EMPTY_TURN, FORCE_TERMINATED, RESPONSE_MISMATCH
from careful_engine.core.fs_capture import TreeVersion
from careful_engine.core.replay import ConversationTrace
from careful_engine.core.state import State, comparable, public_view
from careful_engine.core.trajectory import CallRecord
from careful_engine.scoring.rules import WITHIN, Effects, align, canonical


@dataclass
class Blame:
    """Where a failed conversation first went wrong.

    ``call``/``step``: the model call blamed (None when the model failed to make a change);
    ``missing``: reference calls whose change or result is missing, with ``closest`` (and
    ``closest_steps``) the model call of the turn nearest to each (None where the turn has
    none); ``reason``: state, response, empty_turn, force_terminated or inference_error.
    """

    turn: int
    call: str | None
    step: int | None
    attributes: list[str]  # public attributes that differ at the end of the turn
    missing: list[str] = field(default_factory=list)
    reason: str = "state"
    closest: list[str | None] = field(default_factory=list)
    closest_steps: list[int | None] = field(default_factory=list)
    missing_results: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.call is None and not self.missing

    def to_json(self) -> dict:
        return {"turn": self.turn, "call": self.call, "step": self.step,
                "attributes": self.attributes, "missing": self.missing, "reason": self.reason,
                "closest": self.closest, "closest_steps": self.closest_steps,
                "missing_results": self.missing_results}


def _same_captures(a: State, b: State) -> bool:
    """Whether two states hold equal captures of every class (then they are equal; a
    difference in the captures alone decides nothing)."""
    if a is b:
        return True
    if a._blobs.keys() != b._blobs.keys():
        return False
    for c, x in a._blobs.items():
        y = b._blobs[c]
        if x is y:
            continue
        if type(x) is TreeVersion and type(y) is TreeVersion:
            if not x.same(y):
                return False
        elif type(x) is not bytes or x != y:
            return False
    return True


def _public(state: State) -> dict[str, dict]:
    return {c: public_view(state[c]) for c in state}


def _differing(a: State, b: State) -> list[tuple]:
    """The paths of ``diff(_public(a), _public(b))``, without materialising the classes
    whose captures are equal and hold no NaN (those yield no change)."""
    out: list[tuple] = []
    for c in a:
        if c not in b:
            out.append((c,))
            continue
        x, y = a._blobs[c], b._blobs[c]
        if type(x) is TreeVersion and type(y) is TreeVersion:
            if x.same(y):  # file-system states hold strings and flags only, never floats
                continue
        elif x == y and comparable(x):
            continue
        pa, pb = public_view(a[c]), public_view(b[c])
        if pa is not pb and pa != pb:
            _leaf_paths(pa, pb, (c,), out)
    out.extend((c,) for c in b if c not in a)
    return out


def _leaf_paths(a: dict, b: dict, path: tuple, out: list[tuple]) -> None:
    """Append the paths of :func:`~careful_engine.core.state.diff`'s changes from ``a`` to
    ``b`` (two unequal dicts under ``path``) to ``out``, in its order, without making the
    changes (iterative: any depth)."""
    stack: list = [(a, b, path)]
    while stack:
        task = stack.pop()
        if type(task) is list:  # paths to emit once the nested ones before them are done
            out.extend(task)
            continue
        a, b, path = task
        tasks: list = []
        for k in a:
            if k not in b:
                tasks.append([path + (k,)])
                continue
            x, y = a[k], b[k]
            if x is y or x == y:
                continue
            if type(x) is dict and type(y) is dict:
                tasks.append((x, y, path + (k,)))
            else:
                tasks.append([path + (k,)])
        added = [path + (k,) for k in b if k not in a]
        if added:
            tasks.append(added)
        stack.extend(reversed(tasks))


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path if p not in ("__dir__", "__file__"))


def _inside(path: tuple, differing: list[tuple]) -> bool:
    """``path`` is a differing attribute or lies inside one."""
    return any(path[: len(d)] == d for d in differing)


def _parent(path: tuple, differing: list[tuple]) -> bool:
    """``path`` is a parent of a differing attribute (a change there created, removed or
    replaced the object holding it)."""
    return any(d[: len(path)] == path for d in differing)


_ABSENT = object()


def _at(state: State, path: tuple) -> Any:
    node: Any = state[path[0]] if path[0] in state else _ABSENT
    for key in path[1:]:
        if not isinstance(node, dict) or key not in node:
            return _ABSENT
        node = node[key]
    return node


def _made_by_parent(rec: CallRecord, differing: list[tuple],
                    paths: list[tuple] | None = None) -> bool:
    """The call changed a parent of a differing attribute and thereby created, removed or
    changed that attribute (a post that created the tweet whose content differs; not a
    mkdir whose folder later misses a file)."""
    parents = [p for p in (_changed_paths(rec) if paths is None else paths)
               if _parent(p, differing)]
    if not parents:
        return False
    return any(d[: len(p)] == p and _at(rec.state_before, d) != _at(rec.state_after, d)
               for p in parents for d in differing)


def _changed_paths(rec: CallRecord, classes: set[str] | None = None) -> list[tuple]:
    """The paths of the call's public changes (with ``classes``: of those classes only, all
    that :func:`_inside` and :func:`_parent` can find of paths in them)."""
    return [ch.path for ch in rec.diff(classes) if not ch.hidden]


def _closest(ref: CallRecord, j: int, model: list[CallRecord],
             matches: list[tuple[int | None, str | None]]) -> CallRecord | None:
    """The model call aligned to reference call ``j``, else the most similar one by name and
    bound arguments (None when the turn has no model call)."""
    for rec, (k, _) in zip(model, matches, strict=True):
        if k == j:
            return rec
    if not model:
        return None
    want = _arguments(ref)
    return max(model, key=lambda r: (r.name == ref.name, len(_arguments(r) & want)))


def _arguments(rec: CallRecord) -> set[str]:
    """The call's arguments as ``name=value`` texts (bound to parameter names)."""
    text = canonical(rec)
    inner = text[text.find("(") + 1: text.rfind(")")] if "(" in text else ""
    return set(inner.split(","))


def _missing_blame(t: int, reason: str, trace: ConversationTrace, records: list[CallRecord],
                   effects: Effects | None, attributes: list[str] | None = None) -> Blame:
    model = trace.model.turns[t] if trace.model and t < len(trace.model.turns) else []
    ref = trace.reference.turns[t] if t < len(trace.reference.turns) else []
    matches = align(model, ref, effects)
    index = {id(r): j for j, r in enumerate(ref)}
    near = [_closest(r, index[id(r)], model, matches) if id(r) in index else None
            for r in records]
    return Blame(t, None, None, attributes or [], [r.text for r in records], reason,
                 [c.text if c else None for c in near], [c.step if c else None for c in near],
                 [r.result[:200] for r in records])


def _last_call(trace: ConversationTrace) -> tuple[int, CallRecord] | None:
    for t in range(len(trace.model.turns) - 1, -1, -1) if trace.model else ():
        if trace.model.turns[t]:
            return t, trace.model.turns[t][-1]
    return None


def blame(trace: ConversationTrace, effects: Effects | None = None) -> Blame | None:
    """Where a failed conversation first went wrong (None for a passing one, and for one
    whose replay the budget stopped: its last turn ran in part, so no blame is computed).

    The first turn whose public end state differs from the reference's: the first model call
    whose change lies inside a differing attribute is blamed, else the first that created,
    removed or replaced one of its parents; when no model call did, the reference calls that made such a change
    are missing (with the closest model call to each). A response mismatch names every
    reference call whose result is missing and the closest model call to each. A turn with
    no decoded call, a conversation cut short (step limit) and an inference error name the
    reference calls of the turn that were not made. Every other failed conversation gets a
    blame that names a call or a missing reference call, as long as its reference makes a
    call.
    """
    v = trace.verdict
    if v.valid or trace.budget_exceeded is not None:
        return None
    ref_turns = trace.reference.turns
    if trace.model is None:  # inference error: nothing was executed
        t = next((i for i, calls in enumerate(ref_turns) if calls), 0)
        return _missing_blame(t, "inference_error", trace, list(ref_turns[t]) if ref_turns
                              else [], effects)
    last = v.turn if v.turn is not None else len(ref_turns) - 1
    for t, ref_end in enumerate(trace.reference.turn_end_states[: last + 1]):
        if t >= len(trace.model.turn_end_states):
            break
        model_end = trace.model.turn_end_states[t]
        if _same_captures(ref_end, model_end):
            continue  # equal captures: equal states, no public attribute differs
        differing = _differing(ref_end, model_end)
        if not differing:
            continue
        attributes = sorted({_dotted(p) for p in differing})[:20]
        classes = {d[0] for d in differing}  # a change elsewhere is in no differing path
        changed: list[tuple[CallRecord, list[tuple]]] = []
        for rec in trace.model.turns[t]:  # a change inside a differing attribute
            paths = _changed_paths(rec, classes)
            if any(_inside(p, differing) for p in paths):
                return Blame(t, rec.text, rec.step, attributes)
            changed.append((rec, paths))
        for rec, paths in changed:  # a change to a parent that made the difference
            if paths and _made_by_parent(rec, differing, paths):
                return Blame(t, rec.text, rec.step, attributes)
        missing = []
        for rec in ref_turns[t]:
            paths = _changed_paths(rec, classes)
            if any(_inside(p, differing) for p in paths) or _made_by_parent(rec, differing,
                                                                           paths):
                missing.append(rec)
        if missing:
            return _missing_blame(t, "state", trace, missing, effects, attributes)
        # the difference predates the turn in hidden state: the turn's unmatched calls
        return _unmatched_blame(t, "state", trace, effects, attributes)
    if v.error_type == RESPONSE_MISMATCH and v.turn is not None:
        pool = list(v.details.get("missing_items") or [])
        records = []
        for rec in ref_turns[v.turn]:
            if rec.result in pool:
                pool.remove(rec.result)
                records.append(rec)
        if records:
            return _missing_blame(v.turn, "response", trace, records, effects)
    reason = {EMPTY_TURN: "empty_turn", FORCE_TERMINATED: "force_terminated",
              RESPONSE_MISMATCH: "response"}.get(v.error_type or "", "state")
    if v.error_type == FORCE_TERMINATED:  # cut short in the last turn the model reached
        # (no reference turn at all where the budget stopped the replay in the first turn)
        t = max(min(len(trace.model.turns) - 1, len(ref_turns) - 1), 0)
        if t < len(ref_turns) and not ref_turns[t] and t + 1 < len(ref_turns):
            t += 1
        return _unmatched_blame(t, reason, trace, effects)
    return _unmatched_blame(max(last, 0), reason, trace, effects)


def _unmatched_blame(t: int, reason: str, trace: ConversationTrace, effects: Effects | None,
                     attributes: list[str] | None = None) -> Blame:
    """The reference calls of turn ``t`` no model call matches (by call or function), else all
    of them; with none, the last model call made."""
    model = trace.model.turns[t] if trace.model and t < len(trace.model.turns) else []
    ref = trace.reference.turns[t] if t < len(trace.reference.turns) else []
    matched = {j for j, how in align(model, ref, effects) if how in WITHIN}
    records = [r for j, r in enumerate(ref) if j not in matched] or list(ref)
    if records:
        return _missing_blame(t, reason, trace, records, effects, attributes)
    found = _last_call(trace)
    if found is not None:
        lt, rec = found
        return Blame(lt, rec.text, rec.step, attributes or [], reason=reason)
    return Blame(t, None, None, attributes or [], reason=reason)
