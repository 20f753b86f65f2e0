"""Simulator methods proven, from their source, never to change their instance.

A call to such a method leaves the instance's capture as it was, so the replay need not take
it again (careful_engine.core.environment). The proof is a conservative reading of the method's
own code (``ast``); anything it cannot see through makes the method count as changing state:

* no store but to a plain local name, and to one level of subscript of a *fresh* local (a
  name only ever bound to a new container: a literal, a comprehension, ``.copy()``, ``dict``,
  ``list``, ``set`` or ``sorted`` of something);
* no ``del``, ``with``, ``global``/``nonlocal``, ``yield``/``await``, import, nested function
  or class; no augmented assignment but to a local never bound to anything that may reach the
  instance, a parameter or a module-level object;
* no call but built-in functions that do not change their arguments (``len``, ``str``,
  ``sorted``, ...), methods that read (``get``, ``items``, ``startswith``, ``copy``, ...), and
  the container methods of fresh locals (``append``, ``update``, ...);
* no decorator; the class defines no descriptor but plain functions, and no
  ``__getattr__``/``__getattribute__``/``__setattr__`` (an attribute read runs no code).

The caller still captures whenever the state may hold values this reasoning does not cover
(see ``Environment.execute``): only marshal captures of built-in values, without a NaN.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import linecache
import sys
import textwrap
import types
from collections.abc import Iterator
from functools import cache
from typing import Any

# built-in functions that never change their arguments (on built-in values)
SAFE_BUILTINS = frozenset({
    "len", "str", "int", "float", "bool", "repr", "abs", "round", "min", "max", "sum",
    "sorted", "list", "tuple", "dict", "set", "frozenset", "any", "all", "isinstance",
    "enumerate", "zip", "range", "reversed", "hash", "ord", "chr", "divmod", "pow",
    "Exception", "ValueError", "KeyError", "TypeError", "IndexError", "RuntimeError",
})
# methods of built-in values that only read (or return a new value)
SAFE_METHODS = frozenset({
    "get", "keys", "values", "items", "copy", "count", "index", "startswith", "endswith",
    "lower", "upper", "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "join",
    "format", "find", "rfind", "replace", "isdigit", "isalpha", "isalnum", "isspace",
    "isnumeric", "isdecimal", "islower", "isupper", "title", "capitalize", "casefold",
    "zfill", "center", "ljust", "rjust", "partition", "rpartition", "issubset",
    "issuperset", "isdisjoint", "union", "intersection", "difference",
    "symmetric_difference", "is_integer",
})
# methods that change a container: allowed on fresh locals only
FRESH_MUTATORS = frozenset({"append", "extend", "update", "pop", "setdefault", "insert",
                            "remove", "add", "discard", "clear", "sort", "reverse"})
_FRESH_CALLS = frozenset({"dict", "list", "set", "sorted"})
_REJECT = (ast.Delete, ast.With, ast.AsyncWith, ast.Global, ast.Nonlocal, ast.Yield,
           ast.YieldFrom, ast.Await, ast.Import, ast.ImportFrom, ast.FunctionDef,
           ast.AsyncFunctionDef, ast.ClassDef)


def _names(target: ast.AST) -> list[str] | None:
    """The plain names a binding target binds; None if it stores anywhere else."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        out: list[str] = []
        for elt in target.elts:
            got = _names(elt.value if isinstance(elt, ast.Starred) else elt)
            if got is None:
                return None
            out += got
        return out
    return None


def _fresh_value(node: ast.AST) -> bool:
    if isinstance(node, (ast.Dict, ast.List, ast.Set, ast.ListComp, ast.DictComp,
                         ast.SetComp)):
        return True
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "copy" and not node.args:
            return True
        return isinstance(f, ast.Name) and f.id in _FRESH_CALLS
    return False


# built-ins whose result is a new number, string or bool (it reaches nothing of its arguments)
_SCALAR_CALLS = frozenset({"len", "int", "float", "str", "bool", "repr", "hash", "ord", "chr",
                           "abs", "round", "isinstance"})


def _loads(node: ast.AST) -> set[str]:
    """The names whose objects the value of ``node`` may reach."""
    out: set[str] = set()
    work = [node]
    while work:
        n = work.pop()
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) \
                and n.func.id in _SCALAR_CALLS:
            continue  # checked as a call below; its value reaches nothing
        if isinstance(n, ast.Name):
            out.add(n.id)
        work.extend(ast.iter_child_nodes(n))
    return out


_DEFS: dict[str, tuple[list[str], dict[int, list[ast.AST]]]] = {}  # file: its lines, defs


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement of ``body`` and of the blocks nested in it (not their expressions: a
    definition is a statement)."""
    for node in body:
        yield node
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list):
                yield from _statements(block)
        for handler in getattr(node, "handlers", None) or ():
            yield from _statements(handler.body)


def _definition(func: Any) -> ast.AST | None:
    """The definition of ``func`` in the parse of its whole source file, which is parsed once
    for all its functions: the node :func:`_own_definition` gives, without reading each
    function's block with ``tokenize`` (two thirds of the cost of a class's proof). None where
    it cannot be found so (no file, or no single definition of that name at that line)."""
    code = getattr(func, "__code__", None)
    try:
        filename = inspect.getsourcefile(func) if code is not None else None
    except TypeError:
        return None
    if not filename:
        return None
    linecache.checkcache(filename)  # as inspect does: a file changed since is read again
    lines = linecache.getlines(filename, getattr(func, "__globals__", None))
    got = _DEFS.get(filename)
    if got is None or got[0] is not lines:
        try:
            tree = ast.parse("".join(lines))
        except (SyntaxError, ValueError):
            return None
        defs: dict[int, list[ast.AST]] = {}
        for node in _statements(tree.body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                defs.setdefault(first, []).append(node)  # where co_firstlineno points
        got = _DEFS[filename] = (lines, defs)
    found = [n for n in got[1].get(code.co_firstlineno, []) if n.name == func.__name__]
    return found[0] if len(found) == 1 else None


def _own_definition(func: Any) -> ast.AST | None:
    """The definition of ``func`` parsed from its own source (``inspect.getsource``)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    return tree.body[0] if len(tree.body) == 1 else None


def pure_function(func: Any, module_globals: dict[str, Any]) -> bool:
    """Whether ``func`` (a plain method) provably never changes its instance or anything
    reachable from it or from module-level objects."""
    fn = _definition(func) or _own_definition(func)
    if not isinstance(fn, ast.FunctionDef):
        return False
    if fn.decorator_list:
        return False
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    params |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
    body = [n for stmt in fn.body for n in ast.walk(stmt)]
    binds: list[tuple[list[str], ast.AST | None, bool]] = []  # names, value, plain binding
    flows: list[tuple[str, ast.AST]] = []  # a name's container given a value (x[k] = v, ...)
    for node in body:
        if isinstance(node, _REJECT):
            return False
        if isinstance(node, ast.Assign):
            for target in node.targets:
                names = _names(target)
                if names is not None:
                    binds.append((names, node.value, isinstance(target, ast.Name)))
                elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    flows.append((target.value.id, node.value))  # fresh only: checked below
                else:
                    return False  # a store into an attribute or a nested subscript
        elif isinstance(node, ast.AnnAssign):
            if not isinstance(node.target, ast.Name):
                return False
            binds.append(([node.target.id], node.value, True))
        elif isinstance(node, ast.NamedExpr):
            binds.append(([node.target.id], node.value, True))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            names = _names(node.target)
            if names is None:
                return False
            binds.append((names, node.iter, False))
        elif isinstance(node, ast.AugAssign):
            if not isinstance(node.target, ast.Name):
                return False
            binds.append(([node.target.id], node.value, False))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            binds.append(([node.name], None, False))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.attr in FRESH_MUTATORS:
            for arg in (*node.args, *(k.value for k in node.keywords)):
                flows.append((node.func.value.id, arg))
    local = params | {n for names, _, _ in binds for n in names}
    globals_used = {node.id for node in body if isinstance(node, ast.Name)
                    and node.id not in local
                    and (node.id in module_globals or not hasattr(builtins, node.id))}
    # names that may reach the instance, a parameter's object or a module-level object
    tainted = set(params) | globals_used
    changed = True
    while changed:
        changed = False
        edges = [(names, value) for names, value, _ in binds] + [([n], v) for n, v in flows]
        for names, value in edges:
            if value is None or _loads(value) & tainted:
                for n in names:
                    if n not in tainted:
                        tainted.add(n)
                        changed = True
    fresh = {n for n in local - params
             if all(plain and value is not None and _fresh_value(value)
                    for names, value, plain in binds if n in names)}
    for node in body:
        if isinstance(node, ast.AugAssign) and node.target.id in tainted \
                and node.target.id not in fresh:
            return False
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and target.value.id not in fresh:
                    return False
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute):
                if f.attr in SAFE_METHODS:
                    continue
                if f.attr in FRESH_MUTATORS and isinstance(f.value, ast.Name) \
                        and f.value.id in fresh:
                    continue
                return False
            if not (isinstance(f, ast.Name) and f.id in SAFE_BUILTINS and f.id not in local
                    and f.id not in module_globals):
                return False
    return True


def _plain_class(cls: type) -> bool:
    """No descriptor but functions, no attribute hooks: reading an attribute runs no code."""
    for klass in cls.__mro__[:-1]:  # not object
        for name, value in vars(klass).items():
            if name in ("__getattr__", "__getattribute__", "__setattr__"):
                return False
            if name.startswith("__") and name.endswith("__"):
                continue
            if isinstance(value, (types.FunctionType, staticmethod, classmethod)):
                continue
            if hasattr(type(value), "__get__") or hasattr(type(value), "__set__"):
                return False
    return True


@cache
def pure_methods(cls: type) -> frozenset[str]:
    """The public methods of ``cls`` that provably never change an instance."""
    if not _plain_class(cls):
        return frozenset()
    module = sys.modules.get(cls.__module__)
    module_globals = vars(module) if module is not None else {}
    out = set()
    for name in dir(cls):
        if name.startswith("_"):
            continue
        value = inspect.getattr_static(cls, name)
        if isinstance(value, types.FunctionType) and pure_function(value, module_globals):
            out.add(name)
    return frozenset(out)
