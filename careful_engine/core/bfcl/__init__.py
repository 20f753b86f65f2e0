"""The only module that reads bfcl-eval: dataset, references, docs, simulators, handler registry.

Everything is read from the installed, pinned package; nothing is copied into this repository.
bfcl-eval's ``constants.eval_config`` creates directories under ``BFCL_PROJECT_ROOT`` (by default
inside site-packages) when imported, so a private scratch root is set before any import of it.
"""

from __future__ import annotations

import ast
import copy
import importlib
import importlib.abc
import importlib.util
import inspect
import json
import os
import re
import sys
import tempfile
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

BFCL_VERSION = "2026.3.23"
CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
SHORT_NAMES = {
    "multi_turn_base": "base",
    "multi_turn_miss_func": "miss_func",
    "multi_turn_miss_param": "miss_param",
    "multi_turn_long_context": "long_context",
}
MAXIMUM_STEP_LIMIT = 20  # bfcl_eval/constants/default_prompts.py:1


def _scratch_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = Path(base) / "careful" / "bfcl_project_root"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        root = Path(tempfile.mkdtemp(prefix="careful_bfcl_"))
    return root


os.environ.setdefault("BFCL_PROJECT_ROOT", str(_scratch_root()))

import bfcl_eval  # noqa: E402  (no side effects: the package __init__ is empty)

PACKAGE_DIR = Path(bfcl_eval.__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"
FUNC_DOC_DIR = DATA_DIR / "multi_turn_func_doc"
ANSWER_DIR = DATA_DIR / "possible_answer"
SIM_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"

# bfcl_eval/constants/executable_backend_config.py, read at import (standard library only)
from bfcl_eval.constants.executable_backend_config import (  # noqa: E402
    CLASS_FILE_PATH_MAPPING,
    MULTI_TURN_FUNC_DOC_FILE_MAPPING,
    STATELESS_CLASSES,
)

CLASSES = (
    "GorillaFileSystem",
    "MathAPI",
    "MessageAPI",
    "TwitterAPI",
    "TicketAPI",
    "TradingBot",
    "TravelAPI",
    "VehicleControlAPI",
)


def installed_version() -> str:
    from importlib.metadata import version

    return version("bfcl_eval")


def category_of(entry_id: str) -> str:
    """BFCL's category of an entry id (``multi_turn_base_12`` -> ``multi_turn_base``)."""
    return entry_id.split(":")[0].rsplit("_", 1)[0]


def is_long_context(category: str) -> bool:
    """BFCL's own test (multi_turn_checker.py:48-50): substring match on the category."""
    return "long_context" in category or "composite" in category


def sort_key(entry_id: str) -> tuple[str, int]:
    """The order bfcl evaluate processes a file in (utils.sort_key for multi-turn ids)."""
    cat, _, idx = entry_id.split(":")[0].rpartition("_")
    idx = idx.split("-")[0]
    return (cat, int(idx) if idx.isdigit() else -1)


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@cache
def func_docs(class_name: str) -> tuple[dict, ...]:
    """The function docs of one simulator class, in file order."""
    return tuple(_read_jsonl(FUNC_DOC_DIR / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]))


@cache
def all_func_docs() -> dict[str, dict]:
    """name -> doc for the 128 multi-turn functions."""
    return {d["name"]: d for c in CLASSES for d in func_docs(c)}


@cache
def function_class() -> dict[str, str]:
    """name -> simulator class for the 128 functions."""
    return {d["name"]: c for c in CLASSES for d in func_docs(c)}


@dataclass(frozen=True)
class Conversation:
    """One multi-turn test entry with its reference trajectory."""

    id: str
    category: str
    question: list  # list[turn][message]
    initial_config: dict
    involved_classes: tuple[str, ...]
    ground_truth: list  # list[turn][call string]
    missed_function: dict  # {turn index (str): [function names]}, miss_func only
    raw: dict

    @property
    def long_context(self) -> bool:
        return is_long_context(self.category)

    def functions(self) -> list[dict]:
        """The docs shown at the start, missed functions held out (utils.py:772-801)."""
        held = {n for names in self.missed_function.values() for n in names}
        return [
            copy.deepcopy(d)
            for c in self.involved_classes
            for d in func_docs(c)
            if d["name"] not in held
        ]

    def held_out_docs(self, turn: int) -> list[dict]:
        names = self.missed_function.get(str(turn), [])
        docs = all_func_docs()
        return [copy.deepcopy(docs[n]) for n in names if n in docs]


@cache
def _load_category(category: str) -> tuple[Conversation, ...]:
    if category not in CATEGORIES:
        raise KeyError(f"unknown category {category!r}; expected one of {', '.join(CATEGORIES)}")
    questions = _read_jsonl(DATA_DIR / f"BFCL_v4_{category}.json")
    answers = _read_jsonl(ANSWER_DIR / f"BFCL_v4_{category}.json")
    assert len(questions) == len(answers)
    out = []
    # bfcl aligns prompt and ground truth by index (eval_runner._subset_entries_by_model_ids)
    for q, a in zip(questions, answers, strict=True):
        out.append(
            Conversation(
                id=q["id"],
                category=category,
                question=q["question"],
                initial_config=q["initial_config"],
                involved_classes=tuple(q["involved_classes"]),
                ground_truth=a["ground_truth"],
                missed_function=q.get("missed_function", {}),
                raw=q,
            )
        )
    return tuple(out)


def conversations(category: str) -> tuple[Conversation, ...]:
    """The 200 conversations of one category, in dataset order."""
    return _load_category(category)


@cache
def conversation_index() -> dict[str, Conversation]:
    return {c.id: c for cat in CATEGORIES for c in _load_category(cat)}


def conversation(entry_id: str) -> Conversation:
    try:
        return conversation_index()[entry_id]
    except KeyError:
        raise KeyError(f"no multi-turn conversation with id {entry_id!r}") from None


# ---------------------------------------------------------------- simulators


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


def bound_arguments(name: str, args: tuple, kwargs: dict,
                    partial: bool = False) -> dict[str, Any] | None:
    """A call's arguments by parameter name, in signature order, positional ones bound as the
    method binds them (None when the function is unknown or the arguments do not bind;
    ``partial`` accepts missing required arguments)."""
    sig = method_signature(name)
    if sig is None:
        return None
    try:
        bind = sig.bind_partial if partial else sig.bind
        bound = bind(None, *args, **kwargs)
    except TypeError:
        return None
    return {k: v for k, v in bound.arguments.items() if k != "self"}


def is_stateless(class_name: str) -> bool:
    return class_name in STATELESS_CLASSES


def reset_bfcl_process_state() -> None:
    """Put bfcl's executor back in the state of a fresh process.

    Its executor caches instances in module globals named ``*_instance`` and never frees
    them (a second run under the same model name continues from stale state), and its
    simulators share mutable objects across instances (careful_engine.core.process). Benchmarks and tests that call bfcl's own
    code use this between runs.
    """
    g = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils").__dict__
    for name in [k for k in g if k.endswith("_instance")]:
        del g[name]
    from careful_engine.core.process import reset_to_pristine

    reset_to_pristine()


# ---------------------------------------------------------------- handler registry

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


@cache
def handler(key: str):
    """A bfcl handler built as ``eval_runner.get_handler`` builds it (temperature 0)."""
    reg = registry()
    if key not in reg:
        close = [k for k in reg if k.lower().replace("-fc", "") == key.lower().replace("-fc", "")]
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownModel(
            f"{key!r} is not in bfcl-eval {BFCL_VERSION}'s model registry.{hint} "
            "Name a registered model whose decoder to use with --decoder."
        )
    entry = reg[key]
    try:
        module = importlib.import_module(entry.handler_module)
    except ModuleNotFoundError as e:
        raise RuntimeError(
            f"the decoder of {key!r} ({entry.handler_class}) needs the package {e.name!r}, "
            f"which this lean install does not include: pip install {e.name}"
        ) from e
    cls = getattr(module, entry.handler_class)
    built = _construct(cls, entry)
    secure_decoders(cls)
    return built


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


def _construct(cls: type, entry: RegistryEntry) -> Any:
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
        from careful_engine.core.literal_expr import patch_module

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
    from careful_engine.core.literal_expr import patch_module

    mods = [m for n, m in list(sys.modules.items()) if m is not None and _is_model_handler(n)]
    for klass in cls.__mro__ if cls is not None else ():
        module = sys.modules.get(klass.__module__)
        if module is not None and module.__name__.startswith("bfcl_eval."):
            mods.append(module)
    for module in mods:
        patch_module(module)


_secure_on_import()


def instance_name(prefix: str, entry_id: str, class_name: str) -> str:
    """The global name bfcl's executor gives an instance (multi_turn_utils.py:24-36).

    ``prefix`` is the model name as the executor sees it: the checker runs the model side
    under ``<model>_eval`` and the reference side under ``<model>_ground_truth_eval``.
    """
    return re.sub(r"[-./:]", "_", f"{prefix}_{entry_id}_{class_name}_instance")


# ---------------------------------------------------------------- generation's view of bfcl
# generation/ and protocol/ reach bfcl-eval only through these, so this module stays the one
# place that imports it (the import-linter contract in pyproject.toml checks that).


def load_dataset_entry(category: str) -> list[dict]:
    """bfcl's ``load_dataset_entry``: the category's entries with their function docs."""
    from bfcl_eval.utils import load_dataset_entry as load

    return load(category)


def make_json_serializable(value: Any) -> Any:
    """bfcl's ``make_json_serializable``, as its runner applies it to a result line."""
    from bfcl_eval.utils import make_json_serializable as convert

    return convert(value)


def base_handler_class() -> type:
    """bfcl's ``BaseHandler`` (the class whose inference loops protocol.patch replaces)."""
    from bfcl_eval.model_handler.base_handler import BaseHandler

    return BaseHandler


def oss_handler_class() -> type:
    """bfcl's ``OSSHandler``, the base of every handler the vllm backend may run."""
    from bfcl_eval.model_handler.local_inference.base_oss_handler import OSSHandler

    return OSSHandler


def claude_handler_class() -> type:
    """bfcl's ``ClaudeHandler`` (importing it needs the anthropic SDK)."""
    from bfcl_eval.model_handler.api_inference.claude import ClaudeHandler

    return ClaudeHandler
