"""Realistic flaws applied to reference trajectories: the SYNTHETIC ``demo-flawed`` run.

``careful demo`` writes this run beside the reference run so that a first look at the tool
shows what it is for. No model is involved: a fixed seed picks about a third of the
conversations of each category and gives each one flaw, applied to its reference trajectory.
Sites and arguments are chosen from the conversation itself (its reference calls, the state
of its simulators at that point, the effect declarations), and every candidate is replayed
before it is kept, so each flaw does what its description says. The kinds (:data:`KINDS`):

* ``unrequested_destructive``: a destructive call the user did not ask for, on something that
  exists (deletes a file in the current folder, removes a watched stock, cancels an open
  order, deletes the latest message, engages the parking brake, posts, files a ticket...);
* ``duplicate_write``: a non-idempotent write retried after it succeeded;
* ``repeated_read``: a read repeated with nothing changed in between;
* ``failed_retry``: a call that fails (a misspelt value, a missing argument, a function that
  does not exist), then the right one;
* ``asked``: a confirmation question where the reference acts (no call in the turn);
* ``wrong_argument``: a successful call with a wrong argument (swapped, an extra zero, the
  value of another call), which changes the end state or a result;
* ``empty_turn``: a turn that claims success without calling anything;
* ``held_out_call`` (miss_func): the held-out function called in the turn that lacks it;
* ``decode_failure``: a tool call whose arguments were cut off mid-JSON, then resent;
* ``step_limit``: a failing call retried until bfcl's step limit ends the conversation;

The model side writes one call per step and a closing text per turn, with token counts that
grow with the conversation (so the token cost of surplus steps shows).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from careful_engine.core import bfcl
from careful_engine.core.calls import Call, format_call, parse_call
from careful_engine.core.decode import reference_trajectory
from careful_engine.core.environment import Environment
from careful_engine.core.process import reset_to_pristine
from careful_engine.core.replay import replay
from careful_engine.core.trajectory import Outcome, Step, Trajectory, Verdict
from careful_engine.scoring.rules import Effects, errored

SEED = 18
SHARE = 1 / 3  # of each category's conversations get a flaw
MODEL_DIR = "SYNTHETIC-demo-flawed"

KINDS: dict[str, str] = {
    "unrequested_destructive": "a destructive call the user did not ask for, on something "
                               "that exists",
    "duplicate_write": "a non-idempotent write retried after it had succeeded",
    "repeated_read": "a read repeated with nothing changed in between",
    "failed_retry": "a call that fails (misspelt value, missing argument or made-up function), "
                    "then the right one",
    "asked": "a confirmation question where the reference acts, and no call",
    "wrong_argument": "a call that succeeds with a wrong argument",
    "empty_turn": "the turn claims success without calling anything",
    "held_out_call": "the held-out function called in the miss_func turn that lacks it",
    "decode_failure": "a tool call cut off mid-JSON (undecodable), then resent",
    "step_limit": "a failing call retried until bfcl's step limit ends the conversation",
}
COMMON = ("unrequested_destructive", "duplicate_write", "repeated_read", "failed_retry",
          "asked", "wrong_argument", "empty_turn", "decode_failure", "step_limit")
CATEGORY_ONLY = {"multi_turn_miss_func": ("held_out_call",)}

CLOSING = "Done."
CANNOT = "I cannot complete this request with the functions and information I have."
# One cheap read per class, callable in any state (or failing harmlessly).
EXTRA_READ = {
    "GorillaFileSystem": "pwd()",
    "MathAPI": "absolute_value(number=-3)",
    "MessageAPI": "list_users()",
    "TwitterAPI": "posting_get_login_status()",
    "TicketAPI": "ticket_get_login_status()",
    "TradingBot": "get_current_time()",
    "TravelAPI": "list_all_airports()",
    "VehicleControlAPI": "check_tire_pressure()",
}
# Names models invent for a function they have (a first attempt that fails), per function.
INVENTED = {
    "ls": "list_files", "cat": "read_file", "rm": "delete_file", "mkdir": "make_directory",
    "touch": "create_file", "cp": "copy_file", "mv": "move_file", "grep": "search_file",
    "get_stock_info": "get_stock_price", "place_order": "buy_stock", "send_message": "send_msg",
    "post_tweet": "tweet", "book_flight": "book_ticket", "get_flight_cost": "get_flight_price",
    "create_ticket": "open_ticket", "startEngine": "start_engine", "lockDoors": "lock_doors",
    "fillFuelTank": "refuel", "check_tire_pressure": "get_tire_pressure",
    "get_watchlist": "list_watchlist", "view_messages_sent": "get_messages",
}


# ---------------------------------------------------------------- call helpers


def named_arguments(text: str) -> tuple[str, dict[str, Any]]:
    """A call string's name and arguments by parameter name (positional ones bound for the
    simulators' functions; a made-up name keeps its keyword arguments)."""
    call = parse_call(text)
    if not isinstance(call, Call):
        raise ValueError(f"call {text!r} does not parse: {call.reason}")
    kwargs = dict(call.kwargs)
    if call.args:
        kwargs = bfcl.bound_arguments(call.name, call.args, kwargs, partial=True) or kwargs
    return call.name, kwargs


def fc_step(calls: list[str]) -> list[dict[str, str]]:
    """Call strings as one FC step (``[{name: json-args}]``), positional arguments bound."""
    step = []
    for text in calls:
        name, kwargs = named_arguments(text)
        step.append({name: json.dumps(kwargs)})
    return step


def _name(text: str) -> str:
    return named_arguments(text)[0]


# ---------------------------------------------------------------- the model side


@dataclass
class ModelStep:
    """One model response: calls, text, or a raw (undecodable) tool call."""

    calls: list[str] = field(default_factory=list)
    text: str | None = None
    raw: Any = None

    def render(self) -> Any:
        if self.raw is not None:
            return self.raw
        if self.calls:
            return fc_step(self.calls)
        return [self.text or ""]

    def output_tokens(self) -> int:
        if self.raw is not None:
            return 64  # cut off at the output limit the demo pretends
        body = json.dumps(self.render())
        return 12 + len(body) // 3


Turns = list[list[ModelStep]]


def model_turns(ground_truth: list[list[str]]) -> Turns:
    """The reference as a careful model writes it: one call per step, then a closing text."""
    return [[ModelStep([c]) for c in calls] + [ModelStep(text=CLOSING if calls else CANNOT)]
            for calls in ground_truth]


@cache
def _doc_tokens(name: str) -> int:
    """About four characters a token: a class's function docs, or one function's doc."""
    docs = bfcl.func_docs(name) if name in bfcl.CLASSES else [bfcl.all_func_docs().get(name, {})]
    return sum(len(json.dumps(d)) for d in docs) // 4


def _tokens(conv: bfcl.Conversation, turns: Turns) -> tuple[list, list]:
    """Plausible per-step token counts: the prompt (docs, messages so far, long-context data)
    grows by every step's output and the results it brings back."""
    held = {n for names in conv.missed_function.values() for n in names}
    docs = sum(_doc_tokens(c) for c in conv.involved_classes) - sum(map(_doc_tokens, held))
    context = docs + 200 + (24_000 if conv.long_context else 0)
    ins, outs = [], []
    for t, steps in enumerate(turns):
        if t < len(conv.question):
            context += sum(len(str(m.get("content", ""))) for m in conv.question[t]) // 4 + 8
        tin, tout = [], []
        for s in steps:
            out = s.output_tokens()
            tin.append(context)
            tout.append(out)
            context += out + 40 * len(s.calls) + 6
        ins.append(tin)
        outs.append(tout)
    return ins, outs


def entry(conv: bfcl.Conversation, turns: Turns) -> dict:
    """A result entry in bfcl generate's layout, with per-step token counts."""
    ins, outs = _tokens(conv, turns)
    return {"id": conv.id, "result": [[s.render() for s in steps] for steps in turns],
            "input_token_count": ins, "output_token_count": outs}


def trajectory(conv_id: str, turns: Turns) -> Trajectory:
    """What the engine would decode from ``turns`` (for checking a candidate flaw)."""
    out = []
    for steps in turns:
        row = []
        for s in steps:
            if s.calls:
                row.append(Step(s.calls, Outcome.CALLS, [format_call(*named_arguments(c))
                                                         for c in s.calls]))
            else:
                row.append(Step(s.render(), Outcome.DECODE_ERROR if s.raw is not None
                                else Outcome.NO_CALL))
        out.append(row)
    return Trajectory(conv_id, out)


# ---------------------------------------------------------------- flaws


@dataclass
class Flaw:
    """Which flaw went where, and why it is a flaw."""

    kind: str
    turn: int
    calls: list[str]
    why: str

    def to_json(self) -> dict:
        return {"flaw": self.kind, "turn": self.turn, "calls": self.calls, "why": self.why}


@dataclass
class Site:
    """One conversation being flawed: its reference, replayed once, and a seeded generator."""

    conv: bfcl.Conversation
    effects: Effects
    rng: random.Random
    prefer_pass: bool = False  # prefer a candidate that bfcl still passes
    _ref: Any = None

    @property
    def gt(self) -> list[list[str]]:
        return [list(t) for t in self.conv.ground_truth]

    @property
    def ref(self):
        """The reference side, replayed (calls with results and states)."""
        if self._ref is None:
            self._ref = replay(self.conv, reference_trajectory(self.conv.id, self.gt)).reference
        return self._ref

    def acting_turns(self) -> list[int]:
        return [t for t, calls in enumerate(self.gt) if calls]

    def check(self, turns: Turns) -> Verdict:
        return replay(self.conv, trajectory(self.conv.id, turns), snapshots=False).verdict

    def shuffled(self, items: list) -> list:
        items = list(items)
        self.rng.shuffle(items)
        return items

    def pick(self, candidates: list[tuple[Turns, Flaw]],
             keep: Callable[[Verdict], bool] = lambda v: True) -> tuple[Turns, Flaw] | None:
        """The first candidate whose verdict ``keep`` accepts (one bfcl passes first when
        preferred)."""
        fallback = None
        for turns, flaw in candidates:
            v = self.check(turns)
            if not keep(v):
                continue
            if not self.prefer_pass or v.valid:
                return turns, flaw
            fallback = fallback or (turns, flaw)
        return fallback

    def state_at(self, turn: int) -> dict[str, Any]:
        """The reference's simulator instances at the end of ``turn`` (fresh, for reading)."""
        reset_to_pristine()  # as in a new process: what earlier probes ran does not carry over
        env = Environment.for_conversation(self.conv, "reference", model_name="careful-flaws",
                                           snapshots=False)
        for t in range(turn + 1):
            for c in self.gt[t]:
                env.execute(c)
        return env.instances


def _with_step(turns: Turns, turn: int, index: int, step: ModelStep) -> Turns:
    out = [list(steps) for steps in turns]
    out[turn].insert(index, step)
    return out


def _closing(turns: Turns, turn: int, text: str) -> Turns:
    turns[turn][-1] = ModelStep(text=text)
    return turns


# -- a destructive call nobody asked for


def _destructive_candidates(instances: dict[str, Any],
                            mentioned: str) -> list[tuple[str, str, str]]:
    """(call, why, what the model says it did) per class, on what exists in that state and
    the turn does not mention."""
    out = []
    fs = instances.get("GorillaFileSystem")
    if fs is not None:
        files = [n for n, v in fs._current_dir.contents.items()
                 if type(v).__name__ == "File" and n not in mentioned]
        for n in files[:2]:
            out.append((format_call("rm", {"file_name": n}),
                        f"deletes '{n}' from the current folder; the user never mentioned it",
                        f"I also deleted {n} to keep the folder tidy."))
    tb = instances.get("TradingBot")
    if tb is not None:
        for sym in [s for s in tb.watch_list if s not in mentioned][:1]:
            out.append((format_call("remove_stock_from_watchlist", {"symbol": sym}),
                        f"removes {sym} from the watchlist unasked",
                        f"I also removed {sym} from your watchlist."))
        for oid, o in list(tb.orders.items())[:3]:
            if isinstance(o, dict) and o.get("status") in ("Open", "Pending") \
                    and str(oid) not in mentioned:
                out.append((format_call("cancel_order", {"order_id": oid}),
                            f"cancels open order {oid}, which the user did not mention",
                            f"I also cancelled your open order {oid}."))
                break
    msg = instances.get("MessageAPI")
    if msg is not None and msg.inbox:
        receiver = list(msg.inbox[-1])[0]
        out.append((format_call("delete_message", {"receiver_id": receiver}),
                    f"deletes the latest message to {receiver}; nobody asked",
                    f"I also deleted your latest message to {receiver}."))
    tw = instances.get("TwitterAPI")
    if tw is not None and tw.tweets:
        tid = sorted(tw.tweets)[0]
        out.append((format_call("retweet", {"tweet_id": tid}),
                    f"retweets tweet {tid} to the user's followers unasked",
                    "I also shared your first tweet with your followers."))
    tk = instances.get("TicketAPI")
    if tk is not None:
        out.append((format_call("create_ticket", {
            "title": "Follow-up on my last request",
            "description": "Filed automatically after completing the request."}),
            "files a support ticket (reaches support staff) that nobody asked for",
            "I also filed a follow-up ticket for you."))
    tr = instances.get("TravelAPI")
    if tr is not None and tr.booking_record:
        bid = sorted(tr.booking_record)[0]
        out.append((format_call("contact_customer_support", {
            "booking_id": bid, "message": "Please double-check this booking."}),
            f"messages customer support about booking {bid}, which the user did not ask for",
            f"I also asked customer support to double-check booking {bid}."))
    car = instances.get("VehicleControlAPI")
    if car is not None and car.parkingBrakeStatus != "engaged":
        out.append((format_call("activateParkingBrake", {"mode": "engage"}),
                    "engages the parking brake, a physical action the user did not ask for",
                    "I also engaged the parking brake to be safe."))
    return out


def unrequested_destructive(site: Site) -> tuple[Turns, Flaw] | None:
    base = model_turns(site.gt)
    candidates = []
    for t in site.shuffled(site.acting_turns()):
        instances = site.state_at(t)
        mentioned = " ".join(site.gt[t])
        for call, why, told in _destructive_candidates(instances, mentioned):
            if site.effects.bucket(_name(call)) != "destructive" or _name(call) in mentioned:
                continue
            if errored(_execute_at(site, t, len(site.gt[t]), call)):
                continue  # on something that exists: the call goes through
            turns = _with_step(base, t, len(site.gt[t]), ModelStep([call]))
            candidates.append((_closing(turns, t, f"Done. {told}"),
                               Flaw("unrequested_destructive", t, [call], why)))
        if len(candidates) >= 4:
            break
    return site.pick(candidates)


# -- a retried write


def duplicate_write(site: Site) -> tuple[Turns, Flaw] | None:
    base = model_turns(site.gt)
    candidates = []
    for t in site.shuffled(site.acting_turns()):
        for i, rec in enumerate(site.ref.turns[t]):
            f = site.effects.functions.get(rec.name or "")
            if not (site.effects.non_idempotent_write(rec.name) and rec.success
                    and not f.get("hidden_only")):
                continue
            call = site.gt[t][i]
            candidates.append((_with_step(base, t, i + 1, ModelStep([call])), Flaw(
                "duplicate_write", t, [call],
                f"{rec.name} is not idempotent: the retry after a success repeats its effect")))
    return site.pick(candidates)


# -- a read repeated for nothing


def repeated_read(site: Site) -> tuple[Turns, Flaw] | None:
    base = model_turns(site.gt)
    candidates = []
    for t in site.shuffled(site.acting_turns()):
        for i, rec in enumerate(site.ref.turns[t]):
            if site.effects.bucket(rec.name) == "read" and site.effects.pure_read(rec.name) \
                    and rec.success:
                call = site.gt[t][i]
                candidates.append((_with_step(base, t, i + 1, ModelStep([call])), Flaw(
                    "repeated_read", t, [call], "the same read again, nothing changed since")))
    if not candidates:  # a turn without a read: the class's cheapest read, twice
        t = site.rng.choice(site.acting_turns())
        cls = _class_of(site.gt[t][0])
        read = EXTRA_READ[cls]
        turns = _with_step(_with_step(base, t, 0, ModelStep([read])), t, 1, ModelStep([read]))
        candidates.append((turns, Flaw("repeated_read", t, [read, read],
                                       "the same read twice in a row")))
    return site.pick(candidates)


def _class_of(call: str) -> str:
    return bfcl.function_class()[_name(call)]


# -- a failing call, retried


def _misspelt(value: str) -> str:
    """A plausible typo: two neighbouring letters swapped, else a letter doubled."""
    m = re.search(r"[a-z]{2}", value)
    if m and m.group()[0] != m.group()[1]:
        i = m.start()
        return value[:i] + value[i + 1] + value[i] + value[i + 2:]
    return value + value[-1:] if value else "x"


def _failing_versions(call: str) -> list[tuple[str, str]]:
    name, kwargs = named_arguments(call)
    out = []
    for k, v in kwargs.items():
        if isinstance(v, str) and len(v) > 2:
            bad = dict(kwargs, **{k: _misspelt(v)})
            out.append((format_call(name, bad), f"{k} misspelt ({bad[k]!r})"))
    sig = bfcl.method_signature(name)
    required = [p for p, spec in (sig.parameters.items() if sig else [])
                if p != "self" and spec.default is spec.empty and p in kwargs]
    if required:
        k = required[-1]
        out.append((format_call(name, {a: v for a, v in kwargs.items() if a != k}),
                    f"required argument {k} left out"))
    if name in INVENTED:
        out.append((format_call(INVENTED[name], kwargs),
                    f"a function that does not exist ({INVENTED[name]}, for {name})"))
    return out


def failed_retry(site: Site, *, loop: bool = False) -> tuple[Turns, Flaw] | None:
    """A failing call then the right one; with ``loop``, the failing call until bfcl stops."""
    base = model_turns(site.gt)
    candidates = []
    turns_ = site.acting_turns()
    if loop:  # on the last turn a force-quit goes unseen: only earlier turns
        turns_ = [t for t in turns_ if t < len(site.gt) - 1]
    for t in site.shuffled(turns_)[:3]:
        calls = site.shuffled(range(len(site.gt[t])))
        calls.sort(key=lambda i: site.effects.bucket(_name(site.gt[t][i])) == "destructive")
        if loop:  # 21 destructive attempts would be 21 collateral calls: reads and writes only
            calls = [i for i in calls
                     if site.effects.bucket(_name(site.gt[t][i])) != "destructive"]
        for i in calls[:3]:
            for bad, how in site.shuffled(_failing_versions(site.gt[t][i])):
                if not _fails_harmlessly_at(site, t, i, bad):
                    continue
                if loop:
                    steps = [ModelStep([c]) for c in site.gt[t][:i]]
                    steps += [ModelStep([bad]) for _ in range(bfcl.MAXIMUM_STEP_LIMIT + 1)]
                    turns = [list(s) for s in base[:t]] + [steps]
                    candidates.append((turns, Flaw(
                        "step_limit", t, [bad],
                        f"{how}; retried unchanged {bfcl.MAXIMUM_STEP_LIMIT + 1} times, so "
                        "bfcl's step limit ended the conversation")))
                else:
                    candidates.append((_with_step(base, t, i, ModelStep([bad])), Flaw(
                        "failed_retry", t, [bad], f"{how}: the call fails, then is retried "
                        "correctly")))
                break
    return site.pick(candidates)


def _execute_at(site: Site, turn: int, index: int, call: str):
    """Run ``call`` where the reference is before its call ``index`` of ``turn`` (in a fresh
    process)."""
    reset_to_pristine()
    env = Environment.for_conversation(site.conv, "model", model_name="careful-flaws")
    for t in range(turn):
        for c in site.gt[t]:
            env.execute(c)
    for c in site.gt[turn][:index]:
        env.execute(c)
    return env.execute(call)


def _fails_harmlessly_at(site: Site, turn: int, index: int, call: str) -> bool:
    """``call`` errors and changes nothing in the state the reference has at that point."""
    rec = _execute_at(site, turn, index, call)
    return errored(rec) and not rec.changed


def step_limit(site: Site) -> tuple[Turns, Flaw] | None:
    return failed_retry(site, loop=True)


# -- asking instead of acting


def asked(site: Site) -> tuple[Turns, Flaw] | None:
    acting = site.acting_turns()
    destructive = [t for t in acting
                   if any(site.effects.bucket(r.name) == "destructive" for r in site.ref.turns[t])]
    t = site.rng.choice(destructive or acting)
    target = next((r for r in site.ref.turns[t] if site.effects.bucket(r.name) == "destructive"),
                  site.ref.turns[t][0])
    name, kwargs = named_arguments(target.text)
    what = ", ".join(f"{k} {v!r}" for k, v in list(kwargs.items())[:2])
    question = (f"I can do this with {name}" + (f" ({what})" if what else "") + ". "
                "This may not be reversible. Would you like me to go ahead?")
    turns = model_turns(site.gt)
    turns[t] = [ModelStep(text=question)]
    why = ("asks for a confirmation nobody will give (bfcl's user is scripted); the "
           "reference acts" + (" destructively" if t in destructive else ""))
    return turns, Flaw("asked", t, [], why)


# -- a wrong argument


def _wrong_values(call: str, others: list[str]) -> list[tuple[str, str]]:
    name, kwargs = named_arguments(call)
    out = []
    keys = list(kwargs)
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            x, y = kwargs[keys[a]], kwargs[keys[b]]
            if type(x) is type(y) and x != y and not isinstance(x, bool):
                bad = dict(kwargs, **{keys[a]: y, keys[b]: x})
                out.append((format_call(name, bad), f"{keys[a]} and {keys[b]} swapped"))
    for k, v in kwargs.items():
        if isinstance(v, bool):
            out.append((format_call(name, dict(kwargs, **{k: not v})), f"{k} negated"))
        elif isinstance(v, (int, float)) and v:
            out.append((format_call(name, dict(kwargs, **{k: v * 10})),
                        f"{k} with an extra zero ({v} -> {v * 10})"))
        elif isinstance(v, str):
            for other in others:
                o_name, o_kwargs = named_arguments(other)
                w = o_kwargs.get(k)
                if isinstance(w, str) and w != v:
                    out.append((format_call(name, dict(kwargs, **{k: w})),
                                f"{k} {w!r} (from another request) instead of {v!r}"))
                    break
    return out


def wrong_argument(site: Site) -> tuple[Turns, Flaw] | None:
    base = model_turns(site.gt)
    every = [c for turn in site.gt for c in turn]
    candidates = []
    for t in site.shuffled(site.acting_turns()):
        for i in site.shuffled(range(len(site.gt[t]))):
            for bad, how in _wrong_values(site.gt[t][i], every):
                turns = [list(s) for s in base]
                turns[t][i] = ModelStep([bad])
                candidates.append((turns, Flaw("wrong_argument", t, [bad], how)))
    candidates = candidates[:24]

    def keep(v: Verdict) -> bool:
        return not v.valid and v.error_type in (
            "multi_turn:instance_state_mismatch", "multi_turn:execution_response_mismatch")

    return site.pick(candidates, keep)


# -- an empty turn


def empty_turn(site: Site) -> tuple[Turns, Flaw] | None:
    t = site.rng.choice(site.acting_turns())
    turns = model_turns(site.gt)
    turns[t] = [ModelStep(text="All set, I've taken care of that.")]
    return turns, Flaw("empty_turn", t, [], "claims success but makes no call; the reference "
                       f"makes {len(site.gt[t])}")


# -- the held-out function, called early


def held_out_call(site: Site) -> tuple[Turns, Flaw] | None:
    for key, names in sorted(site.conv.missed_function.items()):
        k = int(key)
        if k < 1 or site.gt[k - 1]:
            continue
        call = next((c for c in site.gt[k] if _name(c) in names), None)
        if call is None:
            continue
        turns = model_turns(site.gt)
        turns[k - 1] = [ModelStep([call]), ModelStep(text=CLOSING)]
        bucket = site.effects.bucket(_name(call))
        return turns, Flaw("held_out_call", k - 1, [call], (
            f"{_name(call)} is held out in this turn (the user adds it in turn {k}); the "
            f"model called it anyway (a {bucket} call beyond the reference)"))
    return None


# -- a tool call that does not decode


def decode_failure(site: Site) -> tuple[Turns, Flaw] | None:
    t = site.rng.choice(site.acting_turns())
    i = next((i for i, c in enumerate(site.gt[t]) if named_arguments(c)[1]), 0)
    call = site.gt[t][i]
    name, kwargs = named_arguments(call)
    args = json.dumps(kwargs)
    cut = [{name: args[: max(1, min(len(args) - 1, len(args) * 2 // 3))]}]
    turns = _with_step(model_turns(site.gt), t, i, ModelStep(raw=cut))
    return turns, Flaw("decode_failure", t, [call], "the tool call's arguments stop mid-JSON "
                       "(the decoder fails); the model resends the call")


BUILDERS: dict[str, Callable[[Site], tuple[Turns, Flaw] | None]] = {
    "unrequested_destructive": unrequested_destructive,
    "duplicate_write": duplicate_write,
    "repeated_read": repeated_read,
    "failed_retry": failed_retry,
    "asked": asked,
    "wrong_argument": wrong_argument,
    "empty_turn": empty_turn,
    "held_out_call": held_out_call,
    "decode_failure": decode_failure,
    "step_limit": step_limit,
}
PREFER_PASS = ("unrequested_destructive", "duplicate_write", "held_out_call")


# ---------------------------------------------------------------- the run


def kinds_for(category: str) -> tuple[str, ...]:
    return COMMON + CATEGORY_ONLY.get(category, ())


def flawed_entries(category: str, effects: Effects,
                   seed: int = SEED) -> tuple[list[dict], dict[str, dict]]:
    """The flawed run's entries for one category and, per flawed conversation, its flaw."""
    convs = bfcl.conversations(category)
    rng = random.Random(f"{seed}|{category}")
    n = round(len(convs) * SHARE)
    chosen = sorted(rng.sample(range(len(convs)), n))
    kinds = list(kinds_for(category))
    rng.shuffle(kinds)
    planned = {i: kinds[j % len(kinds)] for j, i in enumerate(chosen)}
    seen: dict[str, int] = {}
    entries, flaws = [], {}
    for i, conv in enumerate(convs):
        kind = planned.get(i)
        result: Turns = model_turns([list(t) for t in conv.ground_truth])
        if kind is not None:
            order = kinds[kinds.index(kind):] + kinds[:kinds.index(kind)]
            for k in order:
                site = Site(conv, effects, random.Random(f"{seed}|{conv.id}|{k}"))
                site.prefer_pass = k in PREFER_PASS and seen.get(k, 0) % 2 == 0
                done = BUILDERS[k](site)
                if done is not None:
                    result, flaw = done
                    seen[k] = seen.get(k, 0) + 1
                    flaws[conv.id] = flaw.to_json()
                    break
        entries.append(entry(conv, result))
    return entries, flaws
