"""bfcl's decoders made safe on import: every ``bfcl_eval.model_handler`` module gets the
engine's literal evaluator in place of ``eval``, and ``exec``/``compile`` refused."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any

from careful_engine.core.literal_expr import patch_module

_MODEL_HANDLER = "bfcl_eval.model_handler"


def _is_model_handler(name: str) -> bool:
    return name == _MODEL_HANDLER or name.startswith(_MODEL_HANDLER + ".")


class _PatchingLoader(importlib.abc.Loader):
    """Runs a module's own loader, then gives the module the safe evaluator."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        patch_module(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, … for inspect
        return getattr(self._inner, name)


class _SecureOnImport(importlib.abc.MetaPathFinder):
    """Patches every ``bfcl_eval.model_handler`` module as it is imported, whoever imports it
    (the engine's decoders, generation's handlers, bfcl's own ``get_handler``)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if not _is_model_handler(name):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


def _secure_on_import() -> None:
    if not any(isinstance(f, _SecureOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _SecureOnImport())
    secure_decoders()


def secure_decoders(cls: type | None = None) -> None:
    """Give bfcl's decoders the engine's safe literal evaluator instead of ``eval``.

    Patches (once each) every loaded module of ``bfcl_eval.model_handler`` and the module of
    every class in ``cls``'s MRO: in them ``eval`` computes literal expressions only and
    ``exec``/``compile`` refuse (careful_engine.core.literal_expr). Importing this module installs
    an import hook that does the same for every ``bfcl_eval.model_handler`` module imported
    later, by anyone. bfcl's executor is not touched.
    """
    mods = [m for n, m in list(sys.modules.items()) if m is not None and _is_model_handler(n)]
    for klass in cls.__mro__ if cls is not None else ():
        module = sys.modules.get(klass.__module__)
        if module is not None and module.__name__.startswith("bfcl_eval."):
            mods.append(module)
    for module in mods:
        patch_module(module)


_secure_on_import()
