"""Call strings parsed with ``ast`` into calls of literal values; nothing is ever evaluated.

bfcl-eval's executor rewrites a call string (prefixing every ``name(`` that is a public method
with an instance name, string literals included) and passes it to ``eval``. This module keeps
the rewrite, so that string arguments hold exactly what bfcl would store, but accepts only one
shape afterwards: a single call ``method(...)`` or ``<instance>.method(...)`` whose arguments are
literals (strings, numbers, booleans, None, and tuples, lists, sets and dicts of them).
Anything else is a :class:`ParseFailure`, recorded and never executed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from keyword import iskeyword
from typing import Any

from careful_engine.core.json_values import a_kind

# bfcl_eval/eval_checker/multi_turn_eval/multi_turn_utils.py:138
_CALL_NAME = re.compile(r"\b([a-zA-Z_]\w*)\s*(?=\()")
# multi_turn_utils.py:80: names refused before eval
BLOCKED_NAMES = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})
MAX_CALL_LENGTH = 1_000_000


@dataclass(frozen=True)
class Call:
    """A parsed call: function name, literal positional and keyword arguments."""

    name: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    text: str = ""

    def signature(self) -> str:
        """A canonical, hashable rendering of name and arguments (for duplicate detection)."""
        parts = [repr(a) for a in self.args]
        parts += [f"{k}={v!r}" for k, v in sorted(self.kwargs.items())]
        return f"{self.name}({', '.join(parts)})"


@dataclass(frozen=True)
class ParseFailure:
    """A call string that was refused; ``result`` is the string recorded as its result."""

    text: str
    reason: str
    name: str | None = None

    @property
    def result(self) -> str:
        return f"Error during execution: {self.reason}"


def rewrite(text: str, mapping: Mapping[str, str]) -> str:
    """bfcl's ``_process_method_calls``: prefix mapped ``name(`` with ``<instance>.``."""

    def repl(m: re.Match) -> str:
        name = m.group(1)
        inst = mapping.get(name)
        return f"{inst}.{name}" if inst is not None else name

    return _CALL_NAME.sub(repl, text)


def blocked_name(rewritten: str) -> str | None:
    """bfcl's name blocklist check, reproduced with string operations only."""
    head = rewritten.split("(")[0] if "(" in rewritten else rewritten
    if "." in head:
        head = head.split(".")[1]
    return head if head in BLOCKED_NAMES else None


def _literal(node: ast.AST) -> Any:
    """ast.literal_eval's node walk, without complex numbers, bytes or arithmetic."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (str, int, float, bool)) or node.value is None:
            return node.value
        raise ValueError(f"unsupported constant {type(node.value).__name__}")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = node.operand
        if isinstance(operand, ast.Constant) and type(operand.value) in (int, float):
            return -operand.value if isinstance(node.op, ast.USub) else +operand.value
        raise ValueError("unary sign on a non-number")
    if isinstance(node, ast.Tuple):
        return tuple(_literal(e) for e in node.elts)
    if isinstance(node, ast.List):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Set):
        return {_literal(e) for e in node.elts}
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("dict unpacking")
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True)}
    raise ValueError(f"{type(node).__name__} is not a literal")


_PLANS: dict[str, tuple[str, list[ast.expr], list[ast.keyword]] | None] = {}
_PLAN_CACHE_SIZE = 200_000
_CALLS: dict[str, Call] = {}
_IMMUTABLE = frozenset({str, int, float, bool, type(None)})


def _plan(text: str) -> tuple[str, list[ast.expr], list[ast.keyword]] | None:
    """The parsed shape of a call string with a single ``(``, cached; None when not simple.

    With a single ``(``, bfcl's rewrite can only touch the function name, so parsing the
    original text is equivalent to parsing the rewritten one whenever the rewrite's regex
    matches exactly that name.
    """
    plan = _PLANS.get(text, False)
    if plan is not False:
        return plan
    plan = None
    if text.count("(") == 1:
        m = _CALL_NAME.search(text)
        try:
            node = ast.parse(text.strip(" \t"), mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            node = None
        if (
            m is not None
            and isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == m.group(1)
            and all(kw.arg is not None for kw in node.keywords)
            and len({kw.arg for kw in node.keywords}) == len(node.keywords)
        ):
            plan = (node.func.id, node.args, node.keywords)
    if len(_PLANS) < _PLAN_CACHE_SIZE:
        _PLANS[text] = plan
    return plan


# The common shape of a call string, read without ``ast``: ``name(k=v, ...)`` whose values are
# plain strings (no escapes, prefixes or control characters), short decimal numbers, True,
# False, None, or flat lists of those. Whatever else (or anything doubtful: a keyword, a
# repeated or private argument name) goes through ``ast`` as before; what the fast path reads
# is what ``ast`` reads (tests/test_calls_fast.py checks them against each other).
_STR_BODY = r"[^{q}\\\x00-\x1f\x7f\ud800-\udfff]*"
_SCALAR = ("'" + _STR_BODY.format(q="'") + "'|\"" + _STR_BODY.format(q='"') + "\""
           r"|-?(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,15})?|True|False|None")
_ITEM = re.compile(_SCALAR)
_VALUE = rf"(?:{_SCALAR}|\[[ \t]*(?:(?:{_SCALAR})(?:[ \t]*,[ \t]*(?:{_SCALAR}))*)?[ \t]*\])"
_HEAD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\([ \t]*")
_ARG = re.compile(rf"([A-Za-z][A-Za-z0-9_]*)[ \t]*=[ \t]*({_VALUE})[ \t]*(,[ \t]*)?")
_CONSTANTS = {"True": True, "False": False, "None": None}


def _new_call(name: str, args: tuple, kwargs: dict[str, Any], text: str) -> Call:
    """``Call(name, args, kwargs, text)``, without the frozen dataclass's four
    ``object.__setattr__`` calls (the same instance dict)."""
    call = _object_new(Call)
    call.__dict__.update(name=name, args=args, kwargs=kwargs, text=text)
    return call


_object_new = object.__new__


def _scalar(token: str) -> Any:
    c = token[0]
    if c == "'" or c == '"':
        return token[1:-1]
    if token in _CONSTANTS:
        return _CONSTANTS[token]
    return float(token) if "." in token else int(token)


def _fast(text: str) -> tuple[str, dict[str, Any], bool] | None:
    """``(name, kwargs, whether a value is a list)`` of a call string of the common shape;
    None for anything else."""
    if text.count("(") != 1:
        return None
    source = text.strip(" \t")
    m = _HEAD.match(source)
    end = len(source) - 1
    if m is None or source[end] != ")" or iskeyword(m.group(1)):
        return None
    kwargs: dict[str, Any] = {}
    pos = m.end()
    lists = False
    match = _ARG.match
    while pos < end:
        a = match(source, pos)
        if a is None:
            return None
        key, value, comma = a.groups()
        if key in kwargs or iskeyword(key):
            return None
        first = value[0]
        if first == "'" or first == '"':  # _scalar's string, inlined (the usual value)
            kwargs[key] = value[1:-1]
        elif first == "[":
            kwargs[key] = [_scalar(i.group()) for i in _ITEM.finditer(value)]
            lists = True
        else:
            kwargs[key] = _scalar(value)
        pos = a.end()
        if comma is None:
            break
    return (m.group(1), kwargs, lists) if pos == end else None


def parse_call(
    text: str,
    mapping: Mapping[str, str] | None = None,
    methods: frozenset[str] | None = None,
) -> Call | ParseFailure:
    """Parse one call string.

    ``mapping`` (method name -> instance name) applies bfcl's rewrite first; a call is then
    accepted as ``<instance>.method(...)`` for a mapped method, or ``name(...)`` which will
    resolve to nothing. ``methods`` restricts accepted names when no mapping is given.
    """
    if not isinstance(text, str):
        return ParseFailure(repr(text), f"call is {a_kind(text)}, not a string")
    if len(text) > MAX_CALL_LENGTH:
        return ParseFailure(text[:200], "call string too long")
    if mapping:
        call = _CALLS.get(text)
        if call is not None and call.name in mapping:
            return call
        fast = _fast(text)
        if fast is not None and fast[0] in mapping and fast[0] not in BLOCKED_NAMES \
                and not fast[0].startswith("_"):
            name, kwargs = fast[0], fast[1]
            call = _new_call(name, (), kwargs, text)
            if not fast[2] and len(_CALLS) < _PLAN_CACHE_SIZE:  # only immutable values
                _CALLS[text] = call
            return call
        plan = _plan(text)
        if plan is not None and plan[0] in mapping and plan[0] not in BLOCKED_NAMES:
            name, arg_nodes, kw_nodes = plan
            if not name.startswith("_"):
                try:
                    args = tuple(_literal(a) for a in arg_nodes)
                    kwargs = {kw.arg: _literal(kw.value) for kw in kw_nodes}
                except (ValueError, TypeError, RecursionError) as e:
                    return ParseFailure(text, f"argument is not a literal ({e})", name)
                call = Call(name=name, args=args, kwargs=kwargs, text=text)
                # a call whose arguments are all immutable can be handed out again: the
                # method receives its own kwargs dict and cannot change the values
                if len(_CALLS) < _PLAN_CACHE_SIZE and all(
                        type(v) in _IMMUTABLE for v in (*args, *kwargs.values())):
                    _CALLS[text] = call
                return call
    source = rewrite(text, mapping) if mapping else text
    blocked = blocked_name(source)
    if blocked is not None:
        return ParseFailure(text, f"Function call {blocked} is not allowed.", blocked)
    try:
        # eval() strips leading and trailing spaces and tabs from a string expression; the
        # file name "<string>" makes the message eval's own ("invalid syntax (<string>, line 1)")
        tree = ast.parse(source.strip(" \t"), filename="<string>", mode="eval")
    except (SyntaxError, ValueError) as e:
        return ParseFailure(text, str(e))
    except (RecursionError, MemoryError, OverflowError) as e:
        return ParseFailure(text, f"{type(e).__name__} while parsing")
    node = tree.body
    if not isinstance(node, ast.Call):
        return ParseFailure(text, "not a function call")
    func = node.func
    instances = set(mapping.values()) if mapping else set()
    if isinstance(func, ast.Name):
        name = func.id
        if mapping:
            # The rewrite prefixes every mapped ``name(``; a bare name left over (unmapped, or
            # a mapped one the regex missed: ``(cd)(...)``, ``cd\\<newline>(...)``, an NFKC
            # spelling such as fullwidth ``ｃｄ(...)``) is a NameError in bfcl's eval, message kept
            return ParseFailure(text, f"name '{name}' is not defined", name)
    elif (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id in instances
        and mapping.get(func.attr) == func.value.id
    ):
        name = func.attr
    else:
        return ParseFailure(text, "only a plain call of a simulator function is executed")
    if name.startswith("_"):
        return ParseFailure(text, f"private name '{name}' is never called", name)
    if methods is not None and name not in methods:
        return ParseFailure(text, f"name '{name}' is not defined", name)
    try:
        args = tuple(_literal(a) for a in node.args)
        kwargs: dict[str, Any] = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise ValueError("keyword unpacking")
            if kw.arg in kwargs:
                return ParseFailure(text, f"keyword argument repeated: {kw.arg}", name)
            kwargs[kw.arg] = _literal(kw.value)
    except (ValueError, TypeError, RecursionError) as e:
        return ParseFailure(text, f"argument is not a literal ({e})", name)
    return Call(name=name, args=args, kwargs=kwargs, text=text)


def reusable(call: Call | ParseFailure) -> bool:
    """Whether :func:`parse_call` may hand ``call`` out again for its text: a call string with
    a single ``(`` (bfcl's rewrite touches only the function name, so the parse does not
    depend on the instance names) whose arguments are all immutable."""
    return (type(call) is Call and call.text.count("(") == 1 and type(call.kwargs) is dict
            and all(type(v) in _IMMUTABLE for v in (*call.args, *call.kwargs.values())))


def remember(known: dict[str, Call]) -> None:
    """Take ``known`` (text -> a :func:`reusable` call parsed from that text, such as a
    cached reference's calls) as parsed already."""
    if len(_CALLS) < _PLAN_CACHE_SIZE:
        _CALLS.update(known)


def format_call(name: str, kwargs: Mapping[str, Any]) -> str:
    """Render a call as bfcl's FC decoders do: ``name(k=repr(v),...)``."""
    return f"{name}({','.join(f'{k}={v!r}' for k, v in kwargs.items())})"


def clear_caches() -> None:
    """Forget the parsed call strings kept for this process (a benchmark's cold start)."""
    _PLANS.clear()
    _CALLS.clear()
