"""bfcl's simulator classes: their public methods and signatures, the global names its executor
gives instances, and the executor's instance cache."""

from __future__ import annotations

import copy
import importlib
import importlib.abc
import importlib.util
import inspect
import marshal
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
    ``deepcopy``. Call it as ``loader(instance, scenario, long_context=...)``. bfcl's module
    is not changed: its own code and every other caller still use copy.deepcopy."""
    func = getattr(simulator_class(class_name), "_load_scenario", None)
    if type(func) is not types.FunctionType or "deepcopy" not in func.__code__.co_names \
            or func.__globals__.get("deepcopy") is not copy.deepcopy:
        return None
    # the module's names as they are (its module-level objects are the same objects; the
    # simulator modules never rebind a name after import), deepcopy replaced
    names = dict(func.__globals__)
    names["deepcopy"] = plain_deepcopy
    fast = types.FunctionType(func.__code__, names, func.__name__, func.__defaults__,
                              func.__closure__)
    fast.__kwdefaults__ = func.__kwdefaults__
    return fast


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
