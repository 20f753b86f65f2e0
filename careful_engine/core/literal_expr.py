"""A safe stand-in for ``eval`` on model text: literal expressions only, with bounded results.

bfcl's decoders call ``eval`` on text a model wrote (``resolve_ast_by_type`` for argument nodes
that are binary operations, and several local FC handlers on whole tool-call texts). The engine
gives those modules :func:`safe_eval` under the name ``eval`` (:func:`patch_module`), which
computes the value ``eval`` would for expressions built only from literals (numbers, strings,
bytes, ``True``/``False``/``None``, lists, tuples, sets, dicts, unary and binary operators,
comparisons, ``and``/``or``, conditionals ``a if c else b`` and subscripts ``[...][i]``/``[a:b]``
over them) and raises :class:`Refused`, naming the construct, for anything else (names, calls,
attributes, lambdas, comprehensions, f-strings with fields, …) and for results over the size
bounds (``9 ** 9 ** 9``, ``'a' * 10 ** 10``, ``'%(a)99999999s' % {'a': 1}``): every result is
weighed, and ``*`` and ``%`` formatting are bounded before they run. Like ``eval``, ``and``/``or``
and conditionals evaluate only the operands they return. Nothing is compiled to code, imported
or looked up: the text is only parsed.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from types import ModuleType
from typing import Any

MAX_WEIGHT = 1_000_000  # items + characters of a result (its repr stays around a megabyte)
MAX_INT_BITS = 20_000  # past 4,300 digits Python refuses to print an int anyway
NUMBER_CHARS = 330  # the longest '%d' or '%f' of a float ('%f' % 1e308: 309 digits, then decimals)

_BINOPS: dict[type, Any] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.BitAnd: operator.and_,
    ast.MatMult: operator.matmul,
}
_UNARY: dict[type, Any] = {
    ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert,
    ast.Not: operator.not_,
}
_COMPARE: dict[type, Any] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
# a '%' conversion after its (key): flags, width, .precision, length modifier, conversion
_FORMAT_SPEC = re.compile(r"[-+ #0]*(\*|[0-9]+)?(?:\.(\*|[0-9]*))?[hlL]?(.?)", re.S)
_NUMBER_CONVERSIONS = frozenset("diouxXeEfFgG")
_UNKNOWN = object()
_SEQUENCES = (str, bytes, list, tuple)


class Refused(ValueError):
    """Model text that is not a bounded literal expression; the message names the construct."""


def _show(node: ast.AST, limit: int = 80) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001 (unparse of odd trees)
        text = type(node).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _refuse(node: ast.AST, why: str | None = None) -> Refused:
    what = why or type(node).__name__
    return Refused(f"refused: {what} `{_show(node)}`")


def _weight_of_constant(v: Any) -> int:
    if isinstance(v, (str, bytes)):
        return len(v) + 1
    if isinstance(v, int):
        return v.bit_length() // 64 + 1
    return 1


def _bits(v: Any) -> int:
    return abs(v).bit_length() if isinstance(v, int) else 0


def _too_large(node: ast.AST) -> Refused:
    return _refuse(node, f"result too large (over {MAX_WEIGHT:,} items) in")


def _format_bound(fmt: str | bytes, args: Any) -> int:
    """An upper bound on ``len(fmt % args)``, computed without formatting: the literal text plus,
    per conversion, the most its width, precision and argument can produce (parsed as CPython
    does: ``%%``, ``%(key)``, flags, ``*`` or width, ``.precision``, length modifier,
    conversion). Past :data:`MAX_WEIGHT` it stops counting. Where the argument cannot be told
    (the cases where ``%`` itself raises), the whole argument object stands in for it."""
    text = fmt.decode("latin-1") if isinstance(fmt, bytes) else fmt
    items = args if isinstance(args, tuple) else (args,)
    reprs: dict[int, int] = {}

    def size(v: Any, conversion: str) -> int:  # the longest text of v under the conversion
        v = args if v is _UNKNOWN else v
        if conversion == "c":
            return 1  # one character, or '%' raises
        if isinstance(v, int):  # sign, prefix, digits: no decimal or hex form, nor 'False', is longer
            return len(oct(v)) + 2
        if isinstance(v, float) or conversion in _NUMBER_CONVERSIONS:
            return NUMBER_CHARS  # anything but a number raises
        if conversion in "sb" and isinstance(v, type(fmt)):  # as it is
            return len(v)
        if id(v) not in reprs:
            reprs[id(v)] = len(ascii(v))  # str(v) and repr(v) are no longer
        return reprs[id(v)]

    total, taken, done, pos = 0, 0, 0, text.find("%")
    while pos >= 0 and total <= MAX_WEIGHT:
        total += pos - done  # the literal text before this '%'
        pos += 1
        if text.startswith("%", pos):  # '%%'
            total, done = total + 1, pos + 1
            pos = text.find("%", done)
            continue
        arg: Any = None
        if text.startswith("(", pos):  # '%(key)': the key may hold balanced parentheses
            depth, end = 0, pos
            for end in range(pos, len(text)):
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                if not depth:
                    break
            if depth:
                break  # incomplete key: '%' raises
            key: Any = text[pos + 1:end]
            key = key.encode("latin-1") if isinstance(fmt, bytes) else key
            arg = args.get(key, _UNKNOWN) if isinstance(args, dict) else _UNKNOWN
            taken, pos = len(items), end + 1  # no positional arguments after a key
        m = _FORMAT_SPEC.match(text, pos)
        assert m is not None  # every part of the pattern is optional
        counts = []  # width, precision
        for n in m.group(1, 2):
            if n == "*":
                star = items[taken] if taken < len(items) else None
                taken += 1
                if not isinstance(star, int):  # '%' raises here ("* wants int", "not
                    return total  # enough arguments"), after at most what came before
                counts.append(abs(star))
            else:
                counts.append(int(n) if n and len(n) < 10 else MAX_WEIGHT + 1 if n else 0)
        width, precision = counts
        if arg is None:
            arg = items[taken] if taken < len(items) else _UNKNOWN
            taken += 1
        conversion = m.group(3)
        if conversion in "eEfFgG":  # digits, point, exponent; 6 decimals unless told
            total += max(width, size(arg, conversion) + 8 + (
                precision if m.group(2) is not None else 6))
        elif conversion in _NUMBER_CONVERSIONS:  # precision: at least that many digits
            total += max(width, size(arg, conversion) + precision)
        else:  # s r a b c: a precision only cuts; any other character raises
            total += max(width, size(arg, conversion))
        done = m.end()
        pos = text.find("%", done)
    return total + len(text) - done if pos < 0 else total + len(text)


def safe_eval(source: Any, *_: Any) -> Any:
    """``eval(source)`` for literal expressions; :class:`Refused` for anything else."""
    if isinstance(source, bytes):
        source = source.decode("utf-8")
    if not isinstance(source, str):
        raise TypeError("eval() arg 1 must be a string, bytes or code object")
    tree = ast.parse(source.lstrip(" \t"), mode="eval")  # eval strips the same way
    try:
        return _Evaluator().value(tree.body)[0]
    except RecursionError:
        raise Refused("refused: expression nested too deeply") from None


class _Evaluator:
    def value(self, node: ast.AST) -> tuple[Any, int]:
        """(value, weight): weight bounds the size of the value's repr."""
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise _refuse(node)
        v, w = method(node)
        if w > MAX_WEIGHT:
            raise _too_large(node)
        return v, w

    def _Constant(self, node: ast.Constant) -> tuple[Any, int]:
        return node.value, _weight_of_constant(node.value)

    def _items(self, elts: list[ast.expr]) -> tuple[list, int]:
        out: list = []
        weight = 1
        for e in elts:
            if isinstance(e, ast.Starred):
                v, w = self.value(e.value)
                if not isinstance(v, (*_SEQUENCES, set, frozenset, dict)):
                    raise TypeError(f"Value after * must be an iterable, not {type(v).__name__}")
                out.extend(v)
            else:
                v, w = self.value(e)
                out.append(v)
            weight += w
            if weight > MAX_WEIGHT:
                raise _too_large(e)
        return out, weight

    def _List(self, node: ast.List) -> tuple[Any, int]:
        return self._items(node.elts)

    def _Tuple(self, node: ast.Tuple) -> tuple[Any, int]:
        items, w = self._items(node.elts)
        return tuple(items), w

    def _Set(self, node: ast.Set) -> tuple[Any, int]:
        items, w = self._items(node.elts)
        return set(items), w

    def _Dict(self, node: ast.Dict) -> tuple[Any, int]:
        out: dict = {}
        weight = 1
        for k, v in zip(node.keys, node.values, strict=True):
            value, w = self.value(v)
            if k is None:  # {**mapping}
                if not isinstance(value, dict):
                    raise TypeError(f"'{type(value).__name__}' object is not a mapping")
                out.update(value)
            else:
                key, kw = self.value(k)
                out[key] = value
                w += kw
            weight += w
        return out, weight

    def _JoinedStr(self, node: ast.JoinedStr) -> tuple[Any, int]:
        if not all(isinstance(p, ast.Constant) and isinstance(p.value, str) for p in node.values):
            raise _refuse(node, "f-string field")
        text = "".join(p.value for p in node.values)  # type: ignore[attr-defined]
        return text, len(text) + 1

    def _IfExp(self, node: ast.IfExp) -> tuple[Any, int]:
        test, _ = self.value(node.test)
        return self.value(node.body if test else node.orelse)

    def _Subscript(self, node: ast.Subscript) -> tuple[Any, int]:
        container, w = self.value(node.value)
        index, _ = self.value(node.slice)
        result = container[index]  # a builtin literal's own __getitem__: no model code runs
        if isinstance(result, (list, tuple, set, dict)):
            return result, w  # a part weighs no more than the whole
        return result, _weight_of_constant(result)

    def _Slice(self, node: ast.Slice) -> tuple[Any, int]:
        parts = [None if e is None else self.value(e)[0] for e in (node.lower, node.upper, node.step)]
        return slice(*parts), 1

    def _UnaryOp(self, node: ast.UnaryOp) -> tuple[Any, int]:
        v, w = self.value(node.operand)
        return _UNARY[type(node.op)](v), w

    def _BoolOp(self, node: ast.BoolOp) -> tuple[Any, int]:
        is_and = isinstance(node.op, ast.And)
        v, w = None, 1
        for e in node.values:
            v, w = self.value(e)
            if bool(v) != is_and:
                break
        return v, w

    def _Compare(self, node: ast.Compare) -> tuple[Any, int]:
        left, _ = self.value(node.left)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            fn = _COMPARE.get(type(op))
            if fn is None:
                raise _refuse(node, f"comparison {type(op).__name__} in")
            right, _ = self.value(comp)
            if not fn(left, right):
                return False, 1
            left = right
        return True, 1

    def _BinOp(self, node: ast.BinOp) -> tuple[Any, int]:
        a, wa = self.value(node.left)
        b, wb = self.value(node.right)
        op = type(node.op)
        weight = wa + wb
        if op is ast.Mult:
            weight = self._product_weight(node, a, wa, b, wb)
        elif op is ast.Pow and isinstance(a, int) and isinstance(b, int) and b > 0:
            if abs(a) > 1 and b * math.log2(abs(a)) > MAX_INT_BITS:
                raise _refuse(node, f"result too large (over {MAX_INT_BITS:,} bits) in")
        elif op is ast.LShift and isinstance(a, int) and isinstance(b, int) and a and b > 0:
            if _bits(a) + b > MAX_INT_BITS:
                raise _refuse(node, f"result too large (over {MAX_INT_BITS:,} bits) in")
        elif op is ast.Mod and isinstance(a, (str, bytes)) and _format_bound(a, b) > MAX_WEIGHT:
            raise _too_large(node)
        result = _BINOPS[op](a, b)
        if isinstance(result, int) and _bits(result) > MAX_INT_BITS:
            raise _refuse(node, f"result too large (over {MAX_INT_BITS:,} bits) in")
        if op is ast.Pow or op is ast.LShift or (op is ast.Mod and isinstance(a, (str, bytes))):
            weight = _weight_of_constant(result)  # what was produced, not what went in
        return result, weight

    def _product_weight(self, node: ast.BinOp, a: Any, wa: int, b: Any, wb: int) -> int:
        if isinstance(a, int) and isinstance(b, int):
            if _bits(a) + _bits(b) > MAX_INT_BITS:
                raise _refuse(node, f"result too large (over {MAX_INT_BITS:,} bits) in")
            return wa + wb
        for seq, ws, n in ((a, wa, b), (b, wb, a)):
            if isinstance(seq, _SEQUENCES) and isinstance(n, int):
                if n > 0 and ws * n > MAX_WEIGHT:
                    raise _too_large(node)
                return max(ws * max(n, 0), 1)
        return wa + wb


def _refused_code(*_: Any, **__: Any) -> Any:
    raise Refused("refused: exec/compile of model text")


_PATCHED = "__careful_safe_eval__"


def patch_module(module: ModuleType) -> None:
    """Make ``eval`` in ``module`` the safe evaluator and ``exec``/``compile`` refuse (once)."""
    g = module.__dict__
    if g.get(_PATCHED):
        return
    g["eval"] = safe_eval
    g["exec"] = _refused_code
    g["compile"] = _refused_code
    g[_PATCHED] = True


def is_patched(module: ModuleType) -> bool:
    return bool(module.__dict__.get(_PATCHED))
