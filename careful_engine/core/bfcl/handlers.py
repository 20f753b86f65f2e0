"""bfcl's handler registry: model keys to handler classes, constructed for decoding only
(dummy credentials, no network or process while one is built)."""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.abc
import importlib.util
import inspect
import os
import re
import sys
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from careful_engine.core.bfcl.dataset import BFCL_VERSION
from careful_engine.core.bfcl.secure import secure_decoders
from careful_engine.core.bfcl.vendor_stubs import decoding_imports

_MODEL_CONFIG = "bfcl_eval.constants.model_config"


@dataclass(frozen=True)
class RegistryEntry:
    key: str
    model_name: str
    handler_module: str
    handler_class: str
    is_fc_model: bool
    underscore_to_dot: bool


@cache
def registry() -> dict[str, RegistryEntry]:
    """bfcl's MODEL_CONFIG_MAPPING, read from model_config.py's source without importing it.

    Importing model_config imports every handler and every vendor SDK (seconds, and packages
    this project does not install); only the handler a run needs is imported, on demand.
    """
    path = Path(importlib.util.find_spec(_MODEL_CONFIG).origin)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported: dict[str, str] = {}
    maps: dict[str, RegistryEntry] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                imported[alias.asname or alias.name] = node.module
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict)
            and any(isinstance(t, ast.Name) and t.id.endswith("_model_map") for t in node.targets)
        ):
            for k, v in zip(node.value.keys, node.value.values, strict=True):
                if not (isinstance(k, ast.Constant) and isinstance(v, ast.Call)):
                    continue
                kw = {a.arg: a.value for a in v.keywords}
                handler = kw["model_handler"]
                assert isinstance(handler, ast.Name)
                lit = {
                    name: ast.literal_eval(kw[name])
                    for name in ("model_name", "is_fc_model", "underscore_to_dot")
                    if name in kw
                }
                maps[k.value] = RegistryEntry(
                    key=k.value,
                    model_name=lit["model_name"],
                    handler_module=imported[handler.id],
                    handler_class=handler.id,
                    is_fc_model=lit.get("is_fc_model", True),
                    underscore_to_dot=lit.get("underscore_to_dot", False),
                )
    return maps


def registry_key_for_dir(dir_name: str) -> str:
    """bfcl evaluate's mapping of a result folder name to a registry key (eval_runner.py:782)."""
    return dir_name.replace("_", "/")


class UnknownModel(KeyError):
    pass


def close_keys(name: str, n: int = 3) -> list[str]:
    """The registry keys closest to ``name`` (a mistyped key or a result folder's name): the
    same key in another case or with/without ``-FC``; then keys that extend it, of the same
    kind (``-FC`` or not); then difflib's close matches (of the name, and of the key bfcl
    makes of a folder's name)."""
    reg = registry()
    lower = name.lower()
    folded = lower.removesuffix("-fc")
    fc = lower.endswith("-fc")
    same = [k for k in reg if k.lower().removesuffix("-fc") == folded]
    longer = sorted(k for k in reg if k.lower().startswith(folded)
                    and k.lower().endswith("-fc") == fc)
    keys = {k.lower(): k for k in reg}
    near = [keys[k] for text in dict.fromkeys([lower, registry_key_for_dir(lower)])
            for k in difflib.get_close_matches(text, list(keys), n=n, cutoff=0.6)]
    return list(dict.fromkeys([*same, *longer, *near]))[:n]


def matching_keys(text: str = "") -> list[RegistryEntry]:
    """The registry's entries whose key holds ``text`` (any case; all for ""), by key."""
    wanted = text.lower()
    return [e for k, e in sorted(registry().items()) if wanted in k.lower()]


@cache
def handler(key: str):
    """A bfcl handler built as ``eval_runner.get_handler`` builds it (temperature 0)."""
    reg = registry()
    if key not in reg:
        close = close_keys(key)
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise UnknownModel(
            f"{key!r} is not in bfcl-eval {BFCL_VERSION}'s model registry.{hint} "
            "Name a registered model whose decoder to use with --decoder KEY "
            "(`careful decoders [FILTER]` lists the keys)."
        )
    entry = reg[key]
    try:
        try:  # vendor SDKs stubbed: decoding never calls them (core/bfcl/vendor_stubs.py)
            with decoding_imports():
                cls, built = _import_and_build(entry)
        except (ModuleNotFoundError, HandlerSends):
            raise
        except Exception:  # noqa: BLE001 - a handler that needs its SDK to be built: the real one
            cls, built = _import_and_build(entry)
    except ModuleNotFoundError as e:
        raise RuntimeError(
            f"the decoder of {key!r} ({entry.handler_class}) needs the package {e.name!r}, "
            f"which this lean install does not include: pip install {e.name}"
        ) from e
    secure_decoders(cls)
    return built


def _import_and_build(entry: RegistryEntry) -> tuple[type, Any]:
    cls = getattr(importlib.import_module(entry.handler_module), entry.handler_class)
    return cls, construct(cls, entry)


_DUMMY_CREDENTIAL = "careful-decode-only"
_CREDENTIAL = re.compile(
    r"""os\.(?:getenv|environ\.get)\(\s*["']([A-Z0-9_]*(?:_KEY|_TOKEN|_SECRET))["']"""
    r"""|os\.environ\[\s*["']([A-Z0-9_]*(?:_KEY|_TOKEN|_SECRET))["']\s*\]""")


@cache
def _credential_names(cls: type) -> tuple[str, ...]:
    """Credential variables (``*_KEY``, ``*_TOKEN``, ``*_SECRET``) the modules of a handler
    class read, found in their source."""
    names: set[str] = set()
    for klass in cls.__mro__:
        module = sys.modules.get(klass.__module__)
        if module is None or not module.__name__.startswith("bfcl_eval"):
            continue
        try:
            source = inspect.getsource(module)
        except (OSError, TypeError):
            continue
        for m in _CREDENTIAL.finditer(source):
            names.add(m.group(1) or m.group(2))
    return tuple(sorted(names))


def construct(cls: type, entry: RegistryEntry) -> Any:
    """The handler as ``eval_runner.get_handler`` builds it, with no credentials needed.

    Vendor handlers build their API client in ``__init__`` and refuse to without a key
    (Gemini's raises, OpenAI's and Cohere's clients too); building a client sends nothing and
    decoding needs none, so a dummy value fills each credential variable the handler's modules
    read that is unset, for the construction only; an audit hook refuses any connection, name
    look-up or process started while it is built (boto3's credential chain would ask the EC2
    metadata service, so that is switched off too). A handler whose own ``__init__`` does not
    take bfcl's arguments (so ``bfcl evaluate`` cannot build it either) gets the attributes
    ``BaseHandler.__init__`` sets, which are all its decoders read.
    """
    fill = {n: _DUMMY_CREDENTIAL for n in _credential_names(cls)} | _QUIET_ENV
    missing = [n for n in fill if not os.environ.get(n)]
    for name in missing:
        os.environ[name] = fill[name]
    kwargs = {"model_name": entry.model_name, "temperature": 0, "registry_name": entry.key,
              "is_fc_model": entry.is_fc_model}
    _install_offline_hook()
    _BUILDING.on = True
    try:
        try:
            return cls(**kwargs)
        except TypeError as e:
            if "unexpected keyword argument" not in str(e):
                raise
            from bfcl_eval.model_handler.base_handler import BaseHandler

            built = cls.__new__(cls)
            BaseHandler.__init__(built, **kwargs)
            return built
    finally:
        _BUILDING.on = False
        for name in missing:
            os.environ.pop(name, None)


# boto3 (Amazon Nova) otherwise asks the EC2 metadata service for credentials
_QUIET_ENV = {"AWS_EC2_METADATA_DISABLED": "true"}
_BUILDING = threading.local()
_OFFLINE_HOOK: list[bool] = []
_SENDING = frozenset({"socket.connect", "socket.getaddrinfo", "socket.sendto", "socket.sendmsg",
                      "socket.gethostbyname", "subprocess.Popen", "os.system", "os.posix_spawn"})


class HandlerSends(RuntimeError):
    """A bfcl handler that tried to reach the network (or start a process) while being built."""


def _offline(event: str, args: tuple) -> None:
    if event in _SENDING and getattr(_BUILDING, "on", False):
        raise HandlerSends(f"a bfcl handler tried {event} {args[:2]!r} while being built for "
                           "decoding; refused")


def _install_offline_hook() -> None:
    """An audit hook that refuses network and processes while a handler is being built (once
    per process; outside construction it returns at once)."""
    if not _OFFLINE_HOOK:
        sys.addaudithook(_offline)
        _OFFLINE_HOOK.append(True)
