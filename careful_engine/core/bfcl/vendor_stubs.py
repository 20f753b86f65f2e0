"""Vendor SDKs left unloaded while a bfcl handler is imported and built for decoding.

bfcl's handler modules import their vendor's SDK at module level (``from openai import
OpenAI``: about 0.7 s, in every process) although decoding a logged step never calls it; only
inference does. While the engine imports and builds a handler for decoding
(:func:`decoding_imports`), each SDK that is installed but not loaded yet is given a stub
module instead. A name taken from a stub is a stand-in class (:class:`_StandIn`):

* while the handler is imported and built, calling it gives an inert object (the API client a
  handler's ``__init__`` makes, which sends nothing anyway) and ``isinstance`` is False;
* afterwards, any use (a call, an attribute, ``isinstance``, ``issubclass``) imports the real
  SDK and forwards to the real object, so code that does need the SDK later in the process
  (generation, bfcl's own code, a decoder that really reads an SDK type) gets the real thing.

The stub modules leave ``sys.modules`` when the handler is built: a later ``import openai``
imports the real package. An SDK that is not installed gets no stub (the handler still fails
to import, naming the package, as without stubs); one already loaded is used as it is.
``CAREFUL_VENDOR_STUBS=off`` imports the real SDKs (tests compare both ways).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# SDKs (and HTTP clients) that bfcl's handler modules import for inference only
VENDOR_MODULES = ("openai", "anthropic", "google.genai", "mistralai", "cohere", "boto3",
                  "writerai", "qwen_agent", "requests", "httpx")

_STATE = threading.local()


def _active() -> bool:
    return getattr(_STATE, "on", False)


def _vendor_of(name: str) -> str | None:
    for root in VENDOR_MODULES:
        if name == root or name.startswith(root + "."):
            return root
    return None


def _real(path: str) -> Any:
    """The real object a stand-in names (``module`` or ``module:attr.attr``)."""
    module, _, attrs = path.partition(":")
    obj: Any = importlib.import_module(module)
    for attr in filter(None, attrs.split(".")):
        obj = getattr(obj, attr)
    return obj


class _StandInMeta(type):
    """Stand-in classes: inert while a decoder is built, the real object afterwards."""

    _careful_path: str

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if _active():
            return _inert()
        return _real(cls._careful_path)(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("_"):  # probes such as typing's _is_protocol find nothing
            raise AttributeError(name)
        if _active():
            sep = "." if ":" in cls._careful_path else ":"
            return _stand_in(f"{cls._careful_path}{sep}{name}")
        return getattr(_real(cls._careful_path), name)

    def __instancecheck__(cls, obj: Any) -> bool:
        return False if _active() else isinstance(obj, _real(cls._careful_path))

    def __subclasscheck__(cls, sub: type) -> bool:
        return type.__subclasscheck__(cls, sub) if _active() else issubclass(
            sub, _real(cls._careful_path))


class _StandIn(Exception, metaclass=_StandInMeta):  # noqa: N818 - usable in ``except``
    """An inert object (an API client a handler builds and decoding never uses)."""

    _careful_path = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return _inert()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _inert()


def _inert() -> _StandIn:
    return type.__call__(_StandIn)


_STAND_INS: dict[str, type] = {}


def _stand_in(path: str) -> type:
    got = _STAND_INS.get(path)
    if got is None:
        name = path.rpartition(":")[2].rpartition(".")[2] or path.rpartition(".")[2]
        got = _STAND_INS[path] = _StandInMeta(name, (_StandIn,), {"_careful_path": path})
    return got


class _StubModule(types.ModuleType):
    """A vendor module not loaded: its names are stand-ins (the real module's afterwards)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if _active():
            return _stand_in(f"{self.__name__}:{name}")
        return getattr(importlib.import_module(self.__name__), name)


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # a package: ``from openai.types import X`` is stubbed too


class _StubFinder(importlib.abc.MetaPathFinder):
    def __init__(self, vendors: frozenset[str]) -> None:
        self.vendors = vendors

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if not _active() or _vendor_of(name) not in self.vendors:
            return None
        return importlib.machinery.ModuleSpec(name, _StubLoader(), is_package=True)


def _installed_unloaded() -> frozenset[str]:
    out = set()
    for root in VENDOR_MODULES:
        if root in sys.modules:
            continue
        try:
            if importlib.util.find_spec(root) is not None:
                out.add(root)
        except (ImportError, ValueError):
            continue
    return frozenset(out)


@contextmanager
def decoding_imports() -> Iterator[None]:
    """Import and build a decoder with the installed vendor SDKs stubbed (see the module)."""
    if _active() or os.environ.get("CAREFUL_VENDOR_STUBS") == "off":  # nested, or off
        yield
        return
    finder = _StubFinder(_installed_unloaded())
    sys.meta_path.insert(0, finder)
    _STATE.on = True
    try:
        yield
    finally:
        _STATE.on = False
        sys.meta_path.remove(finder)
        for name in [n for n, m in sys.modules.items() if isinstance(m, _StubModule)]:
            stub = sys.modules.pop(name)
            parent, _, child = name.rpartition(".")
            holder = sys.modules.get(parent)  # google.genai's stub is an attribute of google
            if (holder is not None and not isinstance(holder, _StubModule)
                    and holder.__dict__.get(child) is stub):
                delattr(holder, child)
