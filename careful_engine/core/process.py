"""bfcl's process-global simulator state, reproduced.

bfcl evaluates a whole file in one Python process, and its simulators share mutable objects
between instances, between the two sides of a conversation and between conversations:

* TravelAPI in long context merges ``CREDIT_CARD_EXTENSION`` and ``BOOKING_RECORD_EXTENSION``
  entries by reference (``travel_booking.py`` ``_add_credit_cards``), so a charge to an
  extension card changes the module's own dict: the other side sees it, and so does every
  later conversation.
* ``TwitterAPI.post_tweet(content, tags=[], mentions=[])`` stores its default lists in the
  tweet; ``mention()`` then extends the stored list in place, so the default itself grows and
  every later ``post_tweet`` without mentions starts from it. (Measured on the real xLAM-2-8b
  run: one base verdict depends on what ran before it in the process.)
* ``VehicleControlAPI``'s long-context weather dict is rewritten on every call.

bfcl evaluate processes a file in id order and stops executing a conversation at its first
failing turn. :class:`BfclProcess` stands for that process: it starts from pristine values
(read from private, never-executed copies of bfcl's modules), lets a conversation run on the
live objects exactly as bfcl's instances do, and, since the engine replays past bfcl's stopping
point, puts the objects back to what bfcl would have left behind.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import marshal
import pickle
from functools import cache
from types import ModuleType
from typing import Any

from careful_engine.core import bfcl

_CONTAINERS = (list, dict, set)
# Module-level objects the simulators mutate through calls (the rest of long_context.py's
# data is only read; tests/test_process.py checks that no other module-level object changes).
MUTATED_MODULE_OBJECTS = (
    ("TravelAPI", "CREDIT_CARD_EXTENSION"),
    ("TravelAPI", "BOOKING_RECORD_EXTENSION"),
    ("VehicleControlAPI", "LONG_WEATHER_EXTENSION"),
)


@cache
def _private_module(name: str) -> ModuleType:
    """A fresh copy of one of bfcl's simulator modules, never used to run anything."""
    spec = importlib.util.find_spec(name)
    copy_spec = importlib.util.spec_from_file_location(f"_careful_pristine.{name}", spec.origin)
    module = importlib.util.module_from_spec(copy_spec)
    copy_spec.loader.exec_module(module)
    return module


def _mutable_defaults(cls: type) -> list[tuple[str, Any]]:
    out = []
    for fname, func in sorted(inspect.getmembers(cls, inspect.isfunction)):
        for i, default in enumerate(func.__defaults__ or ()):
            if isinstance(default, _CONTAINERS):
                out.append((f"{cls.__name__}.{fname}.__defaults__[{i}]", default))
        for key, default in sorted((func.__kwdefaults__ or {}).items()):
            if isinstance(default, _CONTAINERS):
                out.append((f"{cls.__name__}.{fname}.__kwdefaults__[{key}]", default))
    return out


@cache
def shared_objects() -> tuple[tuple[str, str, Any, Any], ...]:
    """(class, label, live object, pristine object) for every shared mutable object."""
    out = []
    for class_name in bfcl.CLASSES:
        module_name = bfcl.CLASS_FILE_PATH_MAPPING[class_name]
        live_cls = bfcl.simulator_class(class_name)
        private_cls = getattr(_private_module(module_name), class_name)
        pristine = dict(_mutable_defaults(private_cls))
        for label, live in _mutable_defaults(live_cls):
            out.append((class_name, label, live, pristine[label]))
    data = _private_module(f"{bfcl.SIM_PACKAGE}.long_context")
    for class_name, attr in MUTATED_MODULE_OBJECTS:
        module_name = bfcl.CLASS_FILE_PATH_MAPPING[class_name]
        live = getattr(importlib.import_module(module_name), attr)
        # the private copy of a simulator module imports the live long_context module, so
        # data defined there is taken from a private copy of long_context itself
        source = data if hasattr(data, attr) else _private_module(module_name)
        pristine = getattr(source, attr)
        out.append((class_name, f"{module_name.rsplit('.', 1)[1]}.{attr}", live, pristine))
    return tuple(out)


def _assign(target: Any, contents: Any) -> None:
    """Give a live container new contents in place (its identity is what bfcl shares)."""
    if isinstance(target, list):
        target[:] = contents
    else:
        target.clear()
        target.update(contents)


def reset_to_pristine(classes: tuple[str, ...] | None = None) -> None:
    """Put every shared object (of ``classes``, if given) back to its value in a fresh
    process."""
    objs = [o for o in shared_objects() if classes is None or o[0] in classes]
    fresh = pickle.loads(pickle.dumps([p for *_, p in objs], pickle.HIGHEST_PROTOCOL))
    for (_, _, live, _), contents in zip(objs, fresh, strict=True):
        _assign(live, contents)


def pristine_module_object(class_name: str, attr: str) -> Any:
    """A fresh copy of one of :data:`MUTATED_MODULE_OBJECTS` as a new process holds it."""
    for c, label, _, pristine in shared_objects():
        if c == class_name and label.endswith(f".{attr}"):
            return pickle.loads(pickle.dumps(pristine, pickle.HIGHEST_PROTOCOL))
    raise KeyError(f"{class_name}.{attr} is not a shared module object")


def reset_bfcl_process_state() -> None:
    """Put bfcl's executor back in the state of a fresh process: its cached ``*_instance``
    globals forgotten and every shared object pristine. Benchmarks and tests that call
    bfcl's own code use this between runs."""
    bfcl.clear_executor_instances()
    reset_to_pristine()


def shared_classes() -> frozenset[str]:
    """The simulator classes that have process-global objects."""
    return frozenset(c for c, *_ in shared_objects())


class BfclProcess:
    """The process-global state of one ``bfcl evaluate`` run over one file."""

    def __init__(self, fresh: bool = True) -> None:
        if fresh:
            reset_to_pristine()

    @staticmethod
    def touches(involved_classes: tuple[str, ...]) -> bool:
        return bool(shared_classes().intersection(involved_classes))

    @staticmethod
    def checkpoint(involved_classes: tuple[str, ...]) -> bytes:
        return pickle.dumps(_live_objects(involved_classes), pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def restore(involved_classes: tuple[str, ...], blob: bytes) -> None:
        for live, contents in zip(_live_objects(involved_classes), pickle.loads(blob),
                                  strict=True):
            _assign(live, contents)


# ---------------------------------------------------------------- values, for the reference cache
_SCALARS = (str, int, float, bool, type(None))
_LIVE: dict[tuple[str, ...], list[Any]] = {}


def _live_objects(classes: tuple[str, ...] | list[str]) -> list[Any]:
    """The live shared objects of ``classes``, in :func:`shared_objects` order."""
    key = tuple(classes)
    got = _LIVE.get(key)
    if got is None:
        got = _LIVE[key] = [live for c, _, live, _ in shared_objects() if c in key]
    return got


def values(classes: tuple[str, ...]) -> bytes:
    """The values of the shared objects of ``classes`` as marshal (version 2) bytes: equal
    bytes, equal values. ValueError unless every object is a flat container of built-in
    scalars (a nested one can be aliased elsewhere, which bytes cannot show)."""
    return _values(_live_objects(classes))


def pristine_values(classes: tuple[str, ...]) -> bytes:
    """:func:`values` as a fresh process has them."""
    return _values([p for c, _, _, p in shared_objects() if c in classes])


def _values(objs: list[Any]) -> bytes:
    for obj in objs:
        items = obj.items() if type(obj) is dict else ((x, None) for x in obj)
        for k, v in items:
            if type(k) not in _SCALARS or type(v) not in _SCALARS:
                raise ValueError("a shared object holds a container")
    return marshal.dumps(objs, 2)


def fitting_values(classes: tuple[str, ...], blob: bytes) -> list[Any]:
    """The values in ``blob`` (from :func:`values`), checked to fit the shared objects of
    ``classes`` (ValueError, EOFError or TypeError if not)."""
    objs = _live_objects(classes)
    contents = marshal.loads(blob)
    if type(contents) is not list or len(contents) != len(objs) or any(
            type(c) is not type(o) for c, o in zip(contents, objs, strict=True)):
        raise ValueError("values of other objects")
    return contents


def set_values(classes: tuple[str, ...], blob: bytes) -> None:
    """Give the shared objects of ``classes`` the values :func:`values` made (in place: their
    identity is what bfcl shares)."""
    for live, new in zip(_live_objects(classes), fitting_values(classes, blob), strict=True):
        _assign(live, new)

