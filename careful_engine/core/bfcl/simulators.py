"""bfcl's simulator classes: their public methods and signatures, the global names its executor
gives instances, and the executor's instance cache."""

from __future__ import annotations

import copy
import dis
import importlib
import importlib.abc
import importlib.util
import inspect
import marshal
import random
import threading
import types
from collections.abc import Callable
from functools import cache
from typing import Any

from careful_engine.core.bfcl.dataset import (
    CLASS_FILE_PATH_MAPPING,
    STATELESS_CLASSES,
    function_class,
)


@cache
def simulator_class(class_name: str) -> type:
    module = importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name])
    return getattr(module, class_name)


@cache
def public_methods(class_name: str) -> frozenset[str]:
    """Public method names, as the executor maps them (inspect.getmembers, no leading '_')."""
    instance = simulator_class(class_name)()
    return frozenset(
        n for n, _ in inspect.getmembers(instance, predicate=inspect.ismethod)
        if not n.startswith("_")
    )


@cache
def method_signature(name: str) -> inspect.Signature | None:
    """The signature of one of the 128 simulator methods (None for an unknown name)."""
    cls = function_class().get(name)
    if cls is None:
        return None
    return inspect.signature(getattr(simulator_class(cls), name))


def bound_arguments(name: str, args: tuple, kwargs: dict, partial: bool = False,
                    defaults: bool = False) -> dict[str, Any] | None:
    """A call's arguments by parameter name, in signature order, positional ones bound as the
    method binds them (None when the function is unknown or the arguments do not bind;
    ``partial`` accepts missing required arguments; ``defaults`` adds the omitted ones that
    have a default, as copies: a mutable default of the simulators is never handed out)."""
    sig = method_signature(name)
    if sig is None:
        return None
    try:
        bind = sig.bind_partial if partial else sig.bind
        bound = bind(None, *args, **kwargs)
    except TypeError:
        return None
    if defaults:
        given = set(bound.arguments)
        bound.apply_defaults()
        return {k: v if k in given else copy.deepcopy(v)
                for k, v in bound.arguments.items() if k != "self"}
    return {k: v for k, v in bound.arguments.items() if k != "self"}


_PLAIN_TYPES = (dict, list, tuple, str, int, float, bool, type(None))
_VERIFIED: dict[bytes, bool] = {}  # marshal bytes -> whether they came from plain data alone


def _plain_data(value: Any) -> bool:
    """Whether ``value`` holds only dicts, lists, tuples, strings, numbers, booleans and None
    (exact types: no subclass, no bytes-like value, which marshal would turn into bytes)."""
    work = [value]
    while work:
        v = work.pop()
        t = type(v)
        if t not in _PLAIN_TYPES:
            return False
        if t is dict:
            work.extend(v)
            work.extend(v.values())
        elif t is list or t is tuple:
            work.extend(v)
    return True


def plain_deepcopy(value: Any, memo: dict | None = None) -> Any:
    """``copy.deepcopy(value)`` at C speed where ``value`` is plain data: a marshal round trip
    (a new object for every container, shared ones shared as deepcopy shares them: marshal
    writes an object reached twice once and refers back to it; exact floats); anything else,
    or with a memo, is copy.deepcopy's."""
    if memo is None:
        try:
            data = marshal.dumps(value)
        except ValueError:
            data = None
        if data is not None:
            ok = _VERIFIED.get(data)
            if ok is None:
                ok = _plain_data(value)
                if len(_VERIFIED) < 1_000:
                    _VERIFIED[data] = ok
            if ok:
                return marshal.loads(data)
    return copy.deepcopy(value, memo)


@cache
def scenario_loader(class_name: str) -> Callable[..., None] | None:
    """The class's own ``_load_scenario`` (its code, defaults and closure as they are) whose
    ``deepcopy`` is :func:`plain_deepcopy` (bfcl's simulators deep-copy their plain-data
    ``DEFAULT_STATE`` on every load); None when the method reads no module-level
    ``deepcopy``. Its ``random`` is :class:`_SeedingRandom` (generators in the state
    ``random.Random(seed)`` gives, set from a state kept per seed; see :func:`seeded_state`).
    Call it as ``loader(instance, scenario, long_context=...)``. bfcl's module is not
    changed: its own code and every other caller still use copy.deepcopy and random."""
    func = getattr(simulator_class(class_name), "_load_scenario", None)
    if type(func) is not types.FunctionType or "deepcopy" not in func.__code__.co_names \
            or func.__globals__.get("deepcopy") is not copy.deepcopy:
        return None
    # the module's names as they are (its module-level objects are the same objects; the
    # simulator modules never rebind a name after import), deepcopy replaced
    names = dict(func.__globals__)
    names["deepcopy"] = plain_deepcopy
    if names.get("random") is random:  # its generators seeded from a state kept per seed
        names["random"] = _SeedingRandom(_draw_free(simulator_class(class_name), func))
    fast = types.FunctionType(func.__code__, names, func.__name__, func.__defaults__,
                              func.__closure__)
    fast.__kwdefaults__ = func.__kwdefaults__
    return fast


_SEED_STATES: dict[int, tuple] = {}  # an int seed -> random.Random(seed).getstate()
_SEEDED = threading.local()  # .last: (generator, its state) from the last draw-free load


class _SeedingRandom:
    """The ``random`` module as a loader of :func:`scenario_loader` sees it: ``Random(seed)``
    with an int seed is a generator in the state ``random.Random(seed)`` has (set from a state
    kept per seed: cheaper than seeding); everything else is the module's. Where the loader
    is proven never to draw from what it creates (``draw_free``), the generator and its state
    are kept for :func:`seeded_state`."""

    def __init__(self, draw_free: bool) -> None:
        self._draw_free = draw_free

    def __getattr__(self, name: str) -> Any:
        return getattr(random, name)

    def Random(self, x: Any = None) -> random.Random:  # noqa: N802 - the module's name
        if type(x) is not int:
            return random.Random(x)
        state = _SEED_STATES.get(x)
        if state is None:
            state = random.Random(x).getstate()
            if len(_SEED_STATES) < 1_000:
                _SEED_STATES[x] = state
        rng = random.Random.__new__(random.Random)
        rng.setstate(state)
        if self._draw_free:
            _SEEDED.last = (rng, state)
        return rng


def seeded_state(rng: Any) -> tuple | None:
    """``rng.getstate()`` without reading it, where ``rng`` is the generator the last load in
    this thread (by a draw-free loader of :func:`scenario_loader`, just returned) created:
    else None. Asked once per load (it is forgotten)."""
    last = getattr(_SEEDED, "last", None)
    if last is None:
        return None
    _SEEDED.last = None
    return last[1] if last[0] is rng else None


_RANDOM_METHODS = frozenset(n for n in dir(random.Random) if not n.startswith("__"))
_SELF_USES = frozenset({"LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR"})


def _stored_at_once(ins: list[dis.Instruction], i: int, this: str | None) -> bool:
    """Whether the ``random`` read at ``ins[i]`` is ``this._random = random.Random(...)``: the
    generator made goes straight to the instance, nowhere else (its arguments are read
    without a jump)."""
    if this is None or i + 1 >= len(ins) or ins[i + 1].opname not in ("LOAD_METHOD",
                                                                      "LOAD_ATTR") \
            or ins[i + 1].argval != "Random":
        return False
    depth = 0
    for j in range(i, len(ins)):
        op = ins[j]
        if op.opcode in dis.hasjrel or op.opcode in dis.hasjabs:
            return False
        depth += dis.stack_effect(op.opcode, op.arg if op.opcode >= dis.HAVE_ARGUMENT else None,
                                  jump=False)
        if depth == 1 and j > i + 1 and op.opname != "PRECALL":
            return (op.opname == "CALL" and j + 2 < len(ins)
                    and ins[j + 1].opname in ("LOAD_FAST", "LOAD_DEREF")
                    and ins[j + 1].argval == this
                    and ins[j + 2].opname == "STORE_ATTR" and ins[j + 2].argval == "_random")
    return False


def _draw_free(cls: type, func: types.FunctionType) -> bool:
    """Whether ``func`` (a method of ``cls``), and the methods of ``cls`` it calls, can never
    draw from a generator the instance holds: none of their code reads an attribute named as a
    method of ``random.Random`` or ``_random``, uses ``self`` otherwise than to read, call or
    set one of its attributes or to close over it in code checked alike (so it is never
    handed elsewhere), or makes a generator other than as ``self._random = random.Random(...)``
    (so it is never handed elsewhere either)."""
    seen: set = set()
    todo: list[tuple[types.CodeType, str | None]] = [
        (func.__code__, func.__code__.co_varnames[0] if func.__code__.co_argcount else None)]
    while todo:
        code, this = todo.pop()
        if code in seen:
            continue
        seen.add(code)
        ins = list(dis.get_instructions(code))
        for i, op in enumerate(ins):
            if op.opname == "LOAD_GLOBAL" and op.argval == "random" \
                    and not _stored_at_once(ins, i, this):
                return False
            if op.opname in _SELF_USES and (op.argval in _RANDOM_METHODS
                                            or op.argval == "_random" and op.opname != "STORE_ATTR"):
                return False
            if this is None or op.argval != this or op.opname not in ("LOAD_FAST", "LOAD_DEREF"):
                continue
            nxt = ins[i + 1] if i + 1 < len(ins) else None
            if nxt is None or nxt.opname not in _SELF_USES:
                return False
            member = inspect.getattr_static(cls, nxt.argval, None)
            if member is None or nxt.opname == "STORE_ATTR":
                continue  # an instance attribute
            if nxt.opname == "LOAD_METHOD" and type(member) is types.FunctionType:
                code_ = member.__code__
                todo.append((code_, code_.co_varnames[0] if code_.co_argcount else None))
            elif not isinstance(member, _PLAIN_TYPES):
                return False  # a property, a bound method handed on, ...
        todo.extend((c, this if this in c.co_freevars else None)
                    for c in code.co_consts if type(c) is types.CodeType)
    return True


def is_stateless(class_name: str) -> bool:
    return class_name in STATELESS_CLASSES


def clear_executor_instances() -> None:
    """Forget the instances bfcl's executor caches in module globals named ``*_instance`` (it
    never frees them: a second run under the same model name continues from stale state)."""
    g = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils").__dict__
    for name in [k for k in g if k.endswith("_instance")]:
        del g[name]



def instance_name(prefix: str, entry_id: str, class_name: str) -> str:
    """The global name bfcl's executor gives an instance (multi_turn_utils.py:24-36).

    ``prefix`` is the model name as the executor sees it: the checker runs the model side
    under ``<model>_eval`` and the reference side under ``<model>_ground_truth_eval``.
    """
    name = f"{prefix}_{entry_id}_{class_name}_instance"
    for sep in _NAME_SEPARATORS:  # re.sub(r"[-./:]", "_", name), without the regex engine
        if sep in name:
            name = name.replace(sep, "_")
    return name


_NAME_SEPARATORS = ("-", ".", "/", ":")
