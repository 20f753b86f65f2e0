"""bfcl's decoders without ``eval``: every registered handler builds with no credentials and
sends nothing, every eval site is given the safe evaluator, and on benign input the patched
decoders give exactly what bfcl's own (unpatched) decoders give.

The unpatched runs evaluate only strings this test renders from bfcl's references (benign by
construction), never a payload.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from careful_engine.core import bfcl
from careful_engine.core.decode import decode_step
from careful_engine.core.literal_expr import Refused, is_patched, safe_eval
from careful_engine.core.trajectory import Outcome

from .decoder_formats import (
    EXPRESSION_RENDERERS,
    EXTRA_ARITHMETIC,
    arithmetic,
    handler_format,
    named_calls,
    normalised,
    render,
)
from .guard import CANARY, EXPRESSIONS, guarded, new_canary

# bfcl defects, not the engine's: GorillaHandler.decode_execute passes has_tool_call_tag as the
# language to ast_parse (NotImplementedError for any input); ThinkAgentHandler writes the
# arguments object as one positional argument, which its own parser then drops
NEVER_DECODES = {"gorilla-openfunctions-v2", "ThinkAgents/ThinkAgent-1B"}


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.endswith(("_API_KEY", "_TOKEN", "_SECRET", "_SECRET_ACCESS_KEY")) or (
                name.startswith("AWS_")):
            monkeypatch.delenv(name)


def test_every_registry_key_builds_without_credentials_and_decodes(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """All keys, built afresh in an environment with no *_API_KEY, no network allowed."""
    _clean_env(monkeypatch)
    turns = [t for c in bfcl.conversations("multi_turn_base")[:5] for t in c.ground_truth if t]
    steps = [named_calls(max(turns, key=len)), named_calls(min(turns, key=len))]
    built, decoded, failed = 0, 0, {}
    with guarded(tmp_path, loopback=False):
        for key in bfcl.registry():
            h = bfcl.handler.__wrapped__(key)  # not the cached one: built here, in this env
            built += 1
            fmt = handler_format(key)
            if fmt is None:
                failed[key] = "no format decodes"
                continue
            calls = next(c for c in steps if render(fmt, c) is not None)  # GLM: one call
            st = decode_step(h, render(fmt, calls))
            if st.outcome is Outcome.CALLS and normalised(st.calls) == normalised(
                    [f"{n}({', '.join(f'{k}={v!r}' for k, v in kw.items())})" for n, kw in calls]):
                decoded += 1
            else:
                failed[key] = f"{fmt}: {st.outcome} {st.error}"
    assert not any(k.endswith("_API_KEY") for k in os.environ)
    print(f"\nregistry keys: {len(bfcl.registry())}, built: {built}, decoded a reference step: "
          f"{decoded}; not decodable: {failed}")
    assert built == len(bfcl.registry())
    assert set(failed) <= NEVER_DECODES, failed
    assert decoded == len(bfcl.registry()) - len(failed)


def test_a_handler_that_reaches_the_network_while_built_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    class Calls:
        def __init__(self, **_: object) -> None:
            socket.getaddrinfo("example.com", 443)

    entry = bfcl.RegistryEntry("x", "x", "m", "Calls", True, False)
    with pytest.raises(bfcl.HandlerSends):
        bfcl.construct(Calls, entry)


# ---------------------------------------------------------------- every eval site is patched


def _eval_sites() -> set[str]:
    """Modules of bfcl's model_handler package that call eval/exec/compile by name."""
    root = bfcl.PACKAGE_DIR / "model_handler"
    out = set()
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
               and n.func.id in ("eval", "exec", "compile") for n in ast.walk(tree)):
            rel = path.relative_to(bfcl.PACKAGE_DIR.parent).with_suffix("")
            out.add(".".join(rel.parts))
    return out


def test_every_eval_site_of_a_built_handler_is_patched() -> None:
    sites = _eval_sites()
    assert "bfcl_eval.model_handler.utils" in sites and len(sites) >= 9, sites
    for key in bfcl.registry():
        bfcl.handler(key)
    unpatched = [m for m in sites if m in sys.modules and not is_patched(sys.modules[m])]
    assert not unpatched
    assert all(m in sys.modules for m in sites)  # every site belongs to some registered handler


# ---------------------------------------------------------------- parity with bfcl's eval


@contextmanager
def unpatched() -> Iterator[None]:
    """bfcl's decoders as shipped (for benign, test-rendered text only)."""
    saved = {}
    for name, module in list(sys.modules.items()):
        if module is not None and name.startswith("bfcl_eval") and is_patched(module):
            saved[module] = {k: module.__dict__.pop(k) for k in
                             ("eval", "exec", "compile", "__careful_safe_eval__")}
    try:
        yield
    finally:
        for module, names in saved.items():
            module.__dict__.update(names)


def _decode(h, step):
    try:
        return ("ok", h.decode_execute(step, has_tool_call_tag=False))
    except Exception as e:  # noqa: BLE001
        return ("raises", type(e).__name__)


def _groups() -> dict[tuple, list[str]]:
    """Keys whose decode may reach eval, grouped by decode implementation and format: the
    prompting handlers and every handler whose format is read as Python expressions or whose
    class's modules call eval."""
    sites = _eval_sites()
    groups: dict[tuple, list[str]] = defaultdict(list)
    for key, entry in bfcl.registry().items():
        fmt = handler_format(key)
        if fmt is None:
            continue
        cls = type(bfcl.handler(key))
        evals = any(k.__module__ in sites for k in cls.__mro__)
        if entry.is_fc_model and fmt not in EXPRESSION_RENDERERS and not evals:
            continue
        groups[(cls.decode_execute, entry.is_fc_model, fmt)].append(key)
    return groups


def _steps(fmt: str, sample: int | None) -> list:
    """Every non-empty reference turn of all 800 conversations as one step (or a sample),
    plain and, for expression formats, written as arithmetic; plus arithmetic arguments."""
    out = []
    n = 0
    for cat in bfcl.CATEGORIES:
        for conv in bfcl.conversations(cat):
            n += 1
            if sample and n % (800 // sample):
                continue
            for turn in conv.ground_truth:
                if turn:
                    calls = named_calls(turn)
                    out.append(render(fmt, calls))
                    if fmt in EXPRESSION_RENDERERS:
                        out.append(render(fmt, calls, arithmetic))
    if fmt in EXPRESSION_RENDERERS:
        for text, value in EXTRA_ARITHMETIC:
            calls = [("cd", {"folder": value}), ("mv", {"source": "a", "destination": value})]
            out.append(render(fmt, calls, lambda v, t=text: t))
    return [s for s in out if s is not None]


@pytest.mark.slow
def test_patched_decoders_agree_with_bfcl_on_benign_input() -> None:
    groups = _groups()
    total = 0
    for (_, _, fmt), keys in groups.items():
        for i, key in enumerate(keys):
            h = bfcl.handler(key)
            steps = _steps(fmt, None if i == 0 else 20)  # all 800 for one key per group
            ours = [_decode(h, s) for s in steps]
            with unpatched():
                theirs = [_decode(h, s) for s in steps]
            diff = [(s, a, b) for s, a, b in zip(steps, ours, theirs, strict=True) if a != b]
            assert not diff, f"{key} ({fmt}): {len(diff)} differ, e.g. {diff[:2]}"
            assert sum(o[0] == "ok" for o in ours) > len(ours) * 0.9, key
            total += len(steps)
    prompting = {k for ks in groups.values() for k in ks if not bfcl.registry()[k].is_fc_model}
    classes = {bfcl.registry()[k].handler_class for k in prompting}
    used = {e.handler_class for e in bfcl.registry().values() if not e.is_fc_model}
    print(f"\nparity: {len(groups)} decode implementations, {sum(map(len, groups.values()))} "
          f"keys ({len(prompting)} prompting, {len(classes)} prompting classes), {total} steps")
    assert classes == used  # every prompting handler class of the registry


def test_arithmetic_really_goes_through_the_evaluator() -> None:
    h = bfcl.handler("Qwen/Qwen3-8B")
    got = h.decode_execute("[cd(folder='doc' + 'uments'), mv(source=2 ** 10, destination=[1 + 2])]",
                           has_tool_call_tag=False)
    assert got == ["cd(folder='documents')", "mv(source=1024, destination=[3])"]
    with unpatched():
        assert h.decode_execute("[cd(folder='doc' + 'uments')]", has_tool_call_tag=False) == \
            ["cd(folder='documents')"]


@pytest.mark.parametrize(("text", "reason"), [
    ("[cd(folder=__import__('os').system('x') + 1)]", "refused: Call `__import__('os')"),
    ("[cd(folder=9 ** 9 ** 9)]", "result too large"),
    ("[cd(folder='a' * 10 ** 10)]", "result too large"),
    ("[cd(folder=[0] * 10 ** 7 + [1])]", "result too large"),
    ("[cd(folder='%(a)99999999s' % {'a': 1})]", "result too large"),
    ("[cd(folder=(1).__class__ + 1)]", "refused: Attribute"),
    ("[cd(folder=x + 1)]", "refused: Name `x`"),
    ("[cd(folder=[i for i in 'ab'] + [])]", "refused: ListComp"),
])
def test_refused_constructs_are_named(text: str, reason: str) -> None:
    st = decode_step(bfcl.handler("Qwen/Qwen3-8B"), text)
    assert st.outcome is Outcome.DECODE_ERROR and reason in (st.error or ""), st.error


@pytest.mark.parametrize(("text", "value"), EXTRA_ARITHMETIC)
def test_the_evaluator_computes_what_eval_does(text: str, value: object) -> None:
    assert safe_eval(text) == eval(text) == value  # noqa: S307 (test-authored literals)


def test_the_evaluator_refuses_every_payload_without_running_anything(tmp_path: Path) -> None:
    canary = new_canary()
    texts = [t.replace(CANARY, str(canary)) for _, t in EXPRESSIONS]
    texts += ["lambda: 1", "(lambda: 1)()", "f'{1}'", "globals()", "1 if x else 3", "[1][x]",
              "[1][(1).real]", "'ab'[len('a'):]"]
    with guarded(tmp_path, canary=canary):
        for text in texts:
            with pytest.raises(Refused, match="^refused: "):
                safe_eval(text)


def test_handlers_built_directly_in_a_fresh_process_are_patched_too(tmp_path: Path) -> None:
    """Importing careful_engine.core.bfcl hooks imports of bfcl's model_handler modules, so a handler
    built without bfcl.handler (as generation builds them) decodes with the safe evaluator."""
    import subprocess

    canary = tmp_path / "canary"
    code = (
        "import careful_engine.core.bfcl\n"
        "from bfcl_eval.model_handler.local_inference.qwen import QwenHandler\n"
        "h = QwenHandler(model_name='Qwen/Qwen3-8B', temperature=0, registry_name='q', "
        "is_fc_model=False)\n"
        "try:\n"
        f"    h.decode_execute(\"[cd(folder=open({str(canary)!r}, 'w').name + 'x')]\", False)\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.stdout.startswith("Refused refused: "), out.stdout + out.stderr
    assert not canary.exists()


# ---------------------------------------------------------------- '%' formatting and its bound


@pytest.mark.parametrize("text", [
    "'%(a)99999999s' % {'a': 1}",  # a width after a mapping key
    "'%(a).99999999f' % {'a': 1.0}",  # a precision after a mapping key
    "b'%(a)99999999s' % {b'a': b'x'}",
    "'%(a(b))99999999s' % {'a(b)': 1}",  # a key holding parentheses
    "'%-#0 +99999999.5hf' % 1.0",  # flags and a length modifier before the conversion
    "'%*s' % (10 ** 8, 'a')",  # a width given by '*'
    "'%.*f' % (10 ** 8, 1.0)",
    "(('%999s' % '%999s') * 60000) % ((1,) * 60000)",  # small widths, a huge result
    "('%(a)s' * 1000) % {'a': 'x' * 10000}",  # one large argument converted many times
    "['%999s' % 'a'][0] * 2000",  # a formatted result weighs its real length
    "f'{1:99999999}'", "'{:99999999}'.format(1)",  # no str.format route
])
def test_string_formatting_over_the_bound_is_refused_at_once(text: str) -> None:
    import time
    import tracemalloc

    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(Refused, match="^refused: (result too large|f-string field|Call)"):
            safe_eval(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 2 and peak < 20_000_000, peak


@pytest.mark.parametrize("text", [
    "'%s-%d' % ('a', 3)", "'%(a)5s|' % {'a': 1}", "'%(a(b))s' % {'a(b)': 1}",
    "'%-5.2f|%+d|%#x|%o|%e|%g|%c|%r|%a|%%' % (1.5, 3, 255, 8, 1.0, 2.5, 65, 'é', 'é')",
    "'%*.*f|%-*s|' % (8, 2, 3.14159, 4, 'ab')", "'%2000s' % 'a'", "'%.3s' % 'abcdef'",
    "'%.500f' % 1e308", "b'%s %d %b' % (b'ab', 5, b'c')", "'%s' % [1, 'a']", "'%.f' % 2.5",
    "('%999s' % 'a') * 1000", "'%s' % ('x' * 400000)", "('%(a)s' * 140000) % {'a': 'x'}",
])
def test_string_formatting_gives_what_eval_does(text: str) -> None:
    assert safe_eval(text) == eval(text)  # noqa: S307 (test-authored literals)


def test_the_format_bound_is_never_below_the_real_length() -> None:
    from itertools import product

    from careful_engine.core.literal_expr import _format_bound

    values = [0, True, -8, 255, -10 ** 300, 1.5, -1e308, float("inf"), "é", "\U0001f600" * 3,
              b"xy", [1, "a"], {"a": 1}, None]
    checked = 0
    for flags, width, precision, conversion, v in product(
            ["", "-", "#", "0", "+ "], ["", "7", "*"], ["", ".", ".3", ".*"], "dxoeEfgGsrac", values):
        for fmt in (f"x%{flags}{width}{precision}{conversion}y", f"%(k){flags}{width}{conversion}"):
            args = {"k": v} if "(" in fmt else tuple([5] * fmt.count("*") + [v])
            if "(" in fmt and "*" in fmt:
                continue
            bargs = {b"k": v} if isinstance(args, dict) else args
            for f, a in ((fmt, args), (fmt.encode(), bargs)):
                try:
                    out = f % a
                except (TypeError, ValueError, OverflowError):
                    continue
                checked += 1
                assert _format_bound(f, a) >= len(out), (f, a)
    assert checked > 5000


@pytest.mark.parametrize("text", [
    "'%(a)s %s' % {'a': 1}", "'%s %s' % (1,)", "'%s' % (1, 2)", "'%d' % 'x'", "'%(a)s' % 5",
    "'%5%' % ()", "'%(a' % {'a': 1}", "'%(a)*d' % {'a': 1}", "'%*d' % ('x', 1)",
    "'%s%*d' % ('a', None, 1)", "[1, 2, 3][5]", "{'a': 1}[[1]]", "[1][0:1:0]", "(1)[0]",
])
def test_errors_are_the_errors_eval_raises(text: str) -> None:
    with pytest.raises(Exception) as want:  # noqa: PT011 (each its own)
        eval(text)  # noqa: S307 (test-authored literals)
    with pytest.raises(want.type, match=f"^{re.escape(str(want.value))}$"):
        safe_eval(text)


# ---------------------------------------------------------------- subscripts and conditionals


@pytest.mark.parametrize("text", [
    "[cd(folder='doc' + ['s','t'][0])]", "[cd(folder=(1 if True else 2) + 1)]",
    "[cd(folder='ab'[::-1] + 'c')]", "[cd(folder={'a': 1}['a'] + 1)]",
    "[cd(folder=(1, 2)[1:] + ())]", "[cd(folder=('x' if [] else 'y') * 2)]",
    "[cd(folder=b'abc'[1] + 1)]", "[cd(folder=[[1, 2]][0][-1] - 1)]",
    "[cd(folder=['s', 't'][0])]",  # not a BinOp: bfcl keeps the text, no eval
    "[cd(folder={'a': 'b'}['a'])]",
])
def test_subscripts_and_conditionals_decode_as_bfcl_does(text: str) -> None:
    h = bfcl.handler("gpt-4o-2024-11-20")
    ours = _decode(h, text)
    with unpatched():
        theirs = _decode(h, text)  # benign, test-authored text only
    assert ours == theirs and ours[0] == "ok", (ours, theirs)
