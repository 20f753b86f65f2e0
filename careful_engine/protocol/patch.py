"""The patch of bfcl's two multi-turn inference loops: their two exit points and their executor.

bfcl's ``BaseHandler.inference_multi_turn_FC`` and ``inference_multi_turn_prompting`` end a
turn in exactly two places: the response decoded to no call (``"Empty response from the model.
Proceed to next turn."``, then ``break``) and decoding failed (the ``except`` after ``"Failed
to decode the model response. Proceed to next turn."``, then ``break``). The patch reads the
installed source of both methods, parses it, and puts one statement before each of those
two ``break`` statements::

    if self._careful_user_answer('FC', 'no_call', locals()):
        continue
    break

Every other line is the installed code as it is, compiled with its own file name and line
numbers in a copy of bfcl's module namespace in which one name differs: the executor
``execute_multi_turn_func_call`` the loops call for every decoded step is the engine's
(:mod:`careful_engine.core.executor`: same contract and results, no ``eval``). The loops
are installed on ``BaseHandler`` (so every handler class gets them), still marked ``@final``.
No loop code is copied into this repository. The hook is a no-op (the ``break`` runs) unless
the handler carries a ``careful_protocol``; see :mod:`.hook`. :func:`strip_hooks` undoes the
transformation on a tree, which is how the tests prove that nothing else changed.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import threading
from types import FunctionType
from typing import Any

from careful_engine.core import executor

HOOK = "_careful_user_answer"
EXECUTOR = "execute_multi_turn_func_call"
LOOPS = {"inference_multi_turn_FC": "FC", "inference_multi_turn_prompting": "prompting"}
EXIT_MESSAGES = {
    "no_call": "Empty response from the model. Proceed to next turn.",
    "decode_error": "Failed to decode the model response. Proceed to next turn.",
}
_lock = threading.Lock()
_originals: dict[str, FunctionType] = {}


class PatchError(RuntimeError):
    """The installed bfcl loop does not have the expected shape."""


def _base_handler() -> type:
    # through careful_engine.core.bfcl: it sets BFCL_PROJECT_ROOT before bfcl's config is imported
    from careful_engine.core import bfcl

    return bfcl.base_handler_class()


def original_function(name: str) -> FunctionType:
    """The unpatched loop method, as installed by bfcl-eval."""
    if name in _originals:
        return _originals[name]
    fn = _base_handler().__dict__[name]
    return getattr(fn, "__careful_original__", fn)


def original_tree(name: str) -> tuple[ast.Module, str]:
    """The parsed source of an unpatched loop (line numbers as in the file) and its file."""
    fn = original_function(name)
    lines, first = inspect.getsourcelines(fn)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    return tree, inspect.getsourcefile(fn) or "<bfcl_eval base_handler>"


def _prints(stmts: list[ast.stmt], message: str) -> bool:
    for s in stmts:
        if (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                and isinstance(s.value.func, ast.Name) and s.value.func.id == "print"
                and s.value.args and isinstance(s.value.args[0], ast.Constant)
                and s.value.args[0].value == message):
            return True
    return False


def exit_points(tree: ast.AST) -> dict[str, list[ast.stmt]]:
    """The statement lists that end in each exit point's ``break`` (exactly one each)."""
    found: dict[str, list[list[ast.stmt]]] = {k: [] for k in EXIT_MESSAGES}
    for node in ast.walk(tree):
        bodies: list[list[ast.stmt]] = []
        if isinstance(node, ast.If | ast.ExceptHandler):
            bodies.append(node.body)
        for body in bodies:
            for kind, message in EXIT_MESSAGES.items():
                if _prints(body, message) and body and isinstance(body[-1], ast.Break):
                    found[kind].append(body)
    out = {}
    for kind, bodies in found.items():
        if len(bodies) != 1:
            raise PatchError(f"expected one {kind!r} exit point ending in break, found "
                             f"{len(bodies)}: bfcl-eval's loop is not the pinned version")
        out[kind] = bodies[0]
    return out


def _hook_stmt(mode: str, kind: str, at: ast.stmt) -> ast.If:
    call = ast.Call(
        func=ast.Attribute(value=ast.Name("self", ast.Load()), attr=HOOK, ctx=ast.Load()),
        args=[ast.Constant(mode), ast.Constant(kind),
              ast.Call(func=ast.Name("locals", ast.Load()), args=[], keywords=[])],
        keywords=[],
    )
    node = ast.If(test=call, body=[ast.Continue()], orelse=[])
    for n in ast.walk(node):
        ast.copy_location(n, at)
    return node


def is_hook(node: ast.AST) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Call)
            and isinstance(node.test.func, ast.Attribute) and node.test.func.attr == HOOK)


def transform(tree: ast.Module, mode: str) -> ast.Module:
    """Insert the hook before the ``break`` of both exit points (in place)."""
    for kind, body in exit_points(tree).items():
        body.insert(len(body) - 1, _hook_stmt(mode, kind, body[-1]))
    return tree


def strip_hooks(tree: ast.Module) -> ast.Module:
    """Remove every inserted hook statement (in place): the inverse of :func:`transform`."""
    for node in ast.walk(tree):
        for attr in ("body", "orelse", "finalbody", "handlers"):
            seq = getattr(node, attr, None)
            if isinstance(seq, list):
                seq[:] = [s for s in seq if not is_hook(s)]
    return tree


def executor_calls(tree: ast.AST) -> int:
    """How many times the loop calls bfcl's executor by name."""
    return sum(1 for n in ast.walk(tree) if isinstance(n, ast.Call)
               and isinstance(n.func, ast.Name) and n.func.id == EXECUTOR)


def loop_globals(module_globals: dict[str, Any]) -> dict[str, Any]:
    """bfcl's module namespace with the engine's executor in place of bfcl's."""
    if EXECUTOR not in module_globals:
        raise PatchError(f"bfcl's base_handler does not import {EXECUTOR}: bfcl-eval's loop "
                         "is not the pinned version")
    namespace = dict(module_globals)
    namespace[EXECUTOR] = executor.execute_multi_turn_func_call
    return namespace


def patched_function(name: str) -> FunctionType:
    """Compile the transformed loop in (a copy of) bfcl's module namespace, with the engine's
    executor."""
    tree, filename = original_tree(name)
    if executor_calls(tree) != 2:
        raise PatchError(f"expected {name} to call {EXECUTOR} twice, found "
                         f"{executor_calls(tree)}: bfcl-eval's loop is not the pinned version")
    transform(tree, LOOPS[name])
    original = original_function(name)
    module = sys.modules[original.__module__]
    namespace: dict[str, Any] = {}
    exec(compile(tree, filename, "exec"), loop_globals(module.__dict__), namespace)
    fn = namespace[name]
    fn.__qualname__ = original.__qualname__
    fn.__doc__ = original.__doc__
    fn.__careful_original__ = original
    fn.__careful_patched__ = True
    return fn


class HookFailure(BaseException):  # noqa: N818
    """A failure inside the hook. A BaseException on purpose: the first exit point sits inside
    bfcl's ``try``, whose ``except Exception`` would otherwise read the failure as a decoding
    error and call the hook a second time for the same step."""


def _hook(self: Any, mode: str, kind: str, frame: dict[str, Any]) -> bool:
    protocol = getattr(self, "careful_protocol", None)
    if protocol is None:
        return False
    try:
        return protocol.on_exit(self, mode, kind, frame)
    except Exception as e:
        raise HookFailure(f"the scripted user failed at {frame.get('test_entry_id')} turn "
                          f"{frame.get('turn_idx')}: {type(e).__name__}: {e}") from e


def install() -> None:
    """Install the patched loops and the hook on BaseHandler (idempotent, thread-safe)."""
    with _lock:
        base = _base_handler()
        for name in LOOPS:
            current = base.__dict__[name]
            if getattr(current, "__careful_patched__", False):
                continue
            _originals[name] = current
            setattr(base, name, patched_function(name))
        setattr(base, HOOK, _hook)


def uninstall() -> None:
    """Put bfcl's own loops back."""
    with _lock:
        base = _base_handler()
        for name in LOOPS:
            fn = base.__dict__[name]
            original = getattr(fn, "__careful_original__", None)
            if original is not None:
                setattr(base, name, original)
        if HOOK in base.__dict__:
            delattr(base, HOOK)


def installed() -> bool:
    """Both loops are the patched ones and call the engine's executor."""
    base = _base_handler()
    return all(getattr(fn := base.__dict__[n], "__careful_patched__", False)
               and fn.__globals__.get(EXECUTOR) is executor.execute_multi_turn_func_call
               for n in LOOPS)
