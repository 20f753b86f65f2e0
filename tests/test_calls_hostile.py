"""Hostile call strings are refused, never executed, and leave every simulator untouched.

``careful_engine.core.calls.parse_call`` must accept only ``method(<literals>)``; everything else is
a ParseFailure that ``Environment.execute`` records as ``Error during execution: ...`` without
calling anything. The hypothesis part fuzzes the parser: arbitrary text never raises, rendered
literal calls round-trip, and a call with any non-literal argument is always refused.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from careful_engine.core import bfcl
from careful_engine.core.calls import MAX_CALL_LENGTH, Call, ParseFailure, format_call, parse_call
from careful_engine.core.environment import Environment
from careful_engine.core.state import snapshot_instance

CONVERSATION = "multi_turn_base_0"
S = "@SENTINEL@"  # replaced by a per-test temporary path that must never be created
FS = f"careful_eval_{CONVERSATION}_GorillaFileSystem_instance"


def _deep(n: int) -> str:
    return "[" * n + "]" * n


HOSTILE: list[Any] = [
    # code execution through builtins, modules and attribute chains
    pytest.param(f"__import__('os').system('touch {S}')", id="import-system"),
    pytest.param(f"__import__('subprocess').run(['touch', '{S}'])", id="import-subprocess-run"),
    pytest.param(f"os.system('touch {S}')", id="os-system"),
    pytest.param("().__class__.__bases__[0].__subclasses__()", id="subclasses"),
    pytest.param("cd.__globals__", id="globals-attr"),
    pytest.param(f"cd.__globals__['os'].system('touch {S}')", id="globals-os-system"),
    pytest.param(f"{FS}.__class__.__init__.__globals__", id="instance-globals"),
    pytest.param(f"{FS}._load_scenario({{}})", id="instance-private-method"),
    pytest.param(f"{FS}.cd(folder='document')", id="instance-name-written-out"),
    pytest.param("ls(a=True).__class__", id="attribute-of-result"),
    pytest.param("ls()()", id="call-of-call"),
    pytest.param("sort(file_name='final_report.pdf').__reduce__()", id="method-on-result"),
    pytest.param("type('x', (), {})()", id="type-call"),
    pytest.param("setattr(cd, 'x', 1)", id="setattr"),
    pytest.param(f"print(open('{S}', 'w'))", id="print-open"),
    # lambdas, comprehensions, generator expressions
    pytest.param(f"(lambda: __import__('os').system('touch {S}'))()", id="lambda-called"),
    pytest.param("cd(folder=lambda: 'document')", id="lambda-arg"),
    pytest.param("cd(folder=[x for x in 'ab'])", id="listcomp"),
    pytest.param("cd(folder={x: x for x in 'ab'})", id="dictcomp"),
    pytest.param("cd(folder={x for x in 'ab'})", id="setcomp"),
    pytest.param("cd(folder=(x for x in 'ab'))", id="genexp"),
    pytest.param(f"cd(folder=[__import__('os').system('touch {S}') for _ in [0]])", id="comp-sys"),
    # f-strings
    pytest.param("cd(folder=f\"{__import__('os').getcwd()}\")", id="fstring-getcwd"),
    pytest.param(f"cd(folder=f\"{{__import__('os').system('touch {S}')}}\")", id="fstring-sys"),
    pytest.param("cd(folder=f'document')", id="fstring-plain"),
    # starred and double-starred arguments
    pytest.param("cd(*['document'])", id="starred"),
    pytest.param("cd(**{'folder': 'document'})", id="double-starred"),
    pytest.param("cd('document', *[])", id="starred-empty"),
    pytest.param("cd(folder=[*'abc'])", id="starred-in-list"),
    pytest.param("cd(folder={**{}})", id="dict-unpacking"),
    # dunder and private names
    pytest.param("__builtins__", id="builtins-name"),
    pytest.param(f"__builtins__.open('{S}', 'w')", id="builtins-open"),
    pytest.param("_load_scenario({})", id="load-scenario"),
    pytest.param("_load_scenario(config={}, long_context=False)", id="load-scenario-kw"),
    pytest.param("cd.__call__(folder='document')", id="dunder-call"),
    pytest.param("cd(folder=__name__)", id="dunder-arg"),
    # calls nested in arguments
    pytest.param("cd(folder=pwd())", id="nested-call"),
    pytest.param("echo(content=open('/etc/passwd').read(), file_name='x')", id="nested-open"),
    pytest.param("rm(file_name=ls()['current_directory_content'][0])", id="nested-subscript"),
    # walrus, subscripts, operators, conditionals, await / yield
    pytest.param("cd(folder=(y := 'document'))", id="walrus"),
    pytest.param("cd(folder=['document'][0])", id="subscript-list"),
    pytest.param("cd(folder={'a': 'document'}['a'])", id="subscript-dict"),
    pytest.param("add(a=1+2, b=3)", id="binop-add"),
    pytest.param("power(base=10**10**10, exponent=2)", id="binop-power"),
    pytest.param("cd(folder='doc' + 'ument')", id="binop-concat"),
    pytest.param("cd(folder='a' * 10**9)", id="binop-repeat"),
    pytest.param("cd(folder='document' if True else 'archive')", id="ifexp"),
    pytest.param("cd(folder=not True)", id="not"),
    pytest.param("cd(folder=True and 'document')", id="boolop"),
    pytest.param("cd(folder=1 < 2)", id="compare"),
    pytest.param("cd(folder=-True)", id="negative-bool"),
    pytest.param("cd(folder=--1)", id="double-negative"),
    pytest.param("cd(folder=~1)", id="invert"),
    pytest.param("cd(folder=await x)", id="await"),
    pytest.param("cd(folder=(yield))", id="yield"),
    pytest.param("cd(folder=x)", id="free-name"),
    pytest.param("cd(folder=True.__class__)", id="attribute-arg"),
    # unsupported constants
    pytest.param("cd(folder=b'document')", id="bytes"),
    pytest.param("cd(folder=1j)", id="complex"),
    pytest.param("cd(folder=...)", id="ellipsis"),
    pytest.param("cd(folder={[1]: 2})", id="unhashable-key"),
    pytest.param("cd(folder={[1]})", id="unhashable-member"),
    # several statements, imports, exec / eval / globals / getattr / breakpoint
    pytest.param("cd(folder='document'); rm(file_name='final_report.pdf')", id="semicolon"),
    pytest.param("cd(folder='document')\nrm(file_name='final_report.pdf')", id="newline"),
    pytest.param("import os", id="import"),
    pytest.param("from os import system", id="from-import"),
    pytest.param(f"exec('import os; os.system(\"touch {S}\")')", id="exec"),
    pytest.param(f'eval(\'__import__("os").system("touch {S}")\')', id="eval"),
    pytest.param("compile('1', 'x', 'eval')", id="compile"),
    pytest.param("globals()", id="globals"),
    pytest.param("locals()", id="locals"),
    pytest.param(f"getattr(__import__('os'), 'system')('touch {S}')", id="getattr"),
    pytest.param("breakpoint()", id="breakpoint"),
    # bfcl's blocklist
    pytest.param("exit()", id="exit"),
    pytest.param("quit()", id="quit"),
    pytest.param("kill()", id="kill"),
    pytest.param("remove(x=1)", id="remove"),
    pytest.param("run()", id="run"),
    pytest.param(f"unlink('{S}')", id="unlink"),
    pytest.param(f"popen('touch {S}')", id="popen"),
    pytest.param(f"Popen(['touch', '{S}'])", id="Popen"),
    # a mapped name the rewrite misses resolves to nothing in bfcl (NameError)
    pytest.param("(cd)(folder='document')", id="parenthesised-name"),
    pytest.param("cd\\\n(folder='document')", id="line-continuation"),
    pytest.param("\uff43\uff44(folder='document')", id="nfkc-fullwidth-name"),
    # sizes, nesting, null bytes, degenerate text
    pytest.param("cd(folder='" + "a" * (MAX_CALL_LENGTH + 10) + "')", id="over-length"),
    pytest.param("cd(folder='" + "a" * 500_000, id="long-unclosed"),
    pytest.param(_deep(10_000), id="deep-list-10000"),
    pytest.param("cd(folder=" + _deep(10_000) + ")", id="deep-list-arg"),
    pytest.param("cd(folder=" + "(" * 10_000 + "1" + ")" * 10_000 + ")", id="deep-parens"),
    pytest.param("cd(folder=" + "-" * 100_000 + "1)", id="deep-unary"),
    pytest.param("cd(folder=" + "not " * 100_000 + "1)", id="deep-not"),
    pytest.param("cd(folder=" + "1+" * 100_000 + "1)", id="long-binop-chain"),
    pytest.param("cd(folder='doc\x00ument')", id="null-in-string"),
    pytest.param("cd\x00(folder='document')", id="null-in-name"),
    pytest.param("\x00", id="null-only"),
    pytest.param("cd(folder='document', folder='archive')", id="repeated-keyword"),
    pytest.param("ls", id="bare-name"),
    pytest.param("", id="empty"),
    pytest.param("   \t ", id="blank"),
    pytest.param("# cd(folder='document')", id="comment"),
    # not a string at all
    pytest.param(None, id="None"),
    pytest.param(123, id="int"),
    pytest.param(1.5, id="float"),
    pytest.param({"name": "cd", "arguments": {"folder": "document"}}, id="dict"),
    pytest.param(["cd(folder='document')"], id="list"),
    pytest.param(b"cd(folder='document')", id="bytes-input"),
]


def _environment() -> Environment:
    conv = bfcl.conversation(CONVERSATION)
    assert set(conv.involved_classes) == {"GorillaFileSystem", "TwitterAPI"}
    return Environment.for_conversation(conv, "model")


def _snapshots(env: Environment) -> dict[str, dict]:
    """Fresh snapshots, so that a change made in place is seen too."""
    return {c: snapshot_instance(i) for c, i in env.instances.items()}


@pytest.fixture
def env() -> Environment:
    return _environment()


@pytest.fixture
def tripwires(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any eval or exec while a call is handled fails the test."""

    def tripped(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("eval/exec reached")

    monkeypatch.setattr(builtins, "eval", tripped)
    monkeypatch.setattr(builtins, "exec", tripped)


def _with_sentinel(text: Any, sentinel: str) -> Any:
    return text.replace(S, sentinel) if isinstance(text, str) else text


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_call_is_refused_and_inert(text: Any, env: Environment, tmp_path, tripwires):
    sentinel = tmp_path / "pwned"
    text = _with_sentinel(text, str(sentinel))
    cwd = os.getcwd()
    before = _snapshots(env)
    state_before = env.state

    for kwargs in ({}, {"mapping": env.mapping}, {"methods": frozenset(env.mapping)}):
        result = parse_call(text, **kwargs)
        assert isinstance(result, (Call, ParseFailure))
    parsed = parse_call(text, env.mapping)
    assert isinstance(parsed, ParseFailure), parsed
    assert parsed.result.startswith("Error during execution")

    execution = env.execute(text)
    assert not execution.parsed
    assert not execution.success
    assert execution.class_name is None
    assert isinstance(execution.result, str)
    assert execution.result.startswith("Error during execution")

    assert env.state is state_before
    assert _snapshots(env) == before
    assert not sentinel.exists()
    assert os.getcwd() == cwd


def test_blocklist_message_matches_bfcl(env: Environment) -> None:
    for name in ("exit", "quit", "kill", "remove", "run"):
        assert env.execute(f"{name}()").result == (
            f"Error during execution: Function call {name} is not allowed."
        )
    assert env.execute("(cd)(folder='document')").result == (
        "Error during execution: name 'cd' is not defined"
    )


@pytest.mark.parametrize(
    "content",
    [
        "ls(a=True); rm(file_name='final_report.pdf')",
        f"__import__('os').system('touch {S}')",
        "rmdir(dir_name='archive'); cd(folder='..')",
    ],
)
def test_method_names_inside_a_string_literal_stay_text(
    content: str, env: Environment, tmp_path, tripwires
) -> None:
    sentinel = tmp_path / "pwned"
    content = _with_sentinel(content, str(sentinel))
    for setup in ("cd(folder='document')", "touch(file_name='n.txt')"):
        assert env.execute(setup).success
    before = _snapshots(env)

    text = f"echo(content={content!r}, file_name='n.txt')"
    call = parse_call(text, env.mapping)
    assert isinstance(call, Call)
    assert call.name == "echo" and call.args == ()
    assert set(call.kwargs) == {"content", "file_name"}
    assert type(call.kwargs["content"]) is str and call.kwargs["file_name"] == "n.txt"

    execution = env.execute(text)
    assert execution.parsed and execution.success, execution.result
    assert execution.class_name == "GorillaFileSystem"
    after = _snapshots(env)

    # the only change: n.txt now holds the (bfcl-rewritten) content as plain text
    files = after["GorillaFileSystem"]["root"]["__dir__"]["document"]["__dir__"]
    assert files["n.txt"] == {"__file__": call.kwargs["content"]}
    files["n.txt"] = before["GorillaFileSystem"]["root"]["__dir__"]["document"]["__dir__"]["n.txt"]
    assert after == before
    assert {"final_report.pdf", "previous_report.pdf"} <= set(files)
    assert "archive" in after["GorillaFileSystem"]["root"]["__dir__"]
    assert not sentinel.exists()


# ------------------------------------------------------------------------------ fuzzing

MAPPING = _environment().mapping
NAMES = ("cd", "ls", "echo", "mv", "post_tweet", "search_tweets")
FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUND_TRIP = settings(FUZZ, max_examples=150)


def _literals(text: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers(-(10**30), 10**30)
    scalars |= st.floats(allow_nan=False, allow_infinity=False) | text
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.lists(inner, max_size=4).map(tuple)
            | st.dictionaries(text, inner, max_size=4)
        ),
        max_leaves=8,
    )


_identifiers = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda s: not keyword.iskeyword(s)
)


@FUZZ
@given(st.text())
def test_fuzz_arbitrary_text_never_raises(text: str) -> None:
    for kwargs in ({}, {"mapping": MAPPING}, {"methods": frozenset(NAMES)}):
        assert isinstance(parse_call(text, **kwargs), (Call, ParseFailure))


@FUZZ
@given(st.text(alphabet="cdls()[]{}'\",=:.-+*_0123456789 \\\n\tjbe", max_size=60))
def test_fuzz_call_shaped_text_never_raises(text: str) -> None:
    for kwargs in ({}, {"mapping": MAPPING}):
        result = parse_call(text, **kwargs)
        assert isinstance(result, (Call, ParseFailure))
        if isinstance(result, Call):
            assert result.name in MAPPING or not kwargs


@ROUND_TRIP
@given(
    st.sampled_from(NAMES),
    st.dictionaries(_identifiers, _literals(st.text(max_size=20)), max_size=5),
)
def test_fuzz_literal_calls_round_trip(name: str, values: dict[str, Any]) -> None:
    text = format_call(name, values)
    for call in (parse_call(text), parse_call(text, methods=frozenset(NAMES))):
        assert isinstance(call, Call), call
        assert call.name == name and call.args == ()
        assert call.kwargs == values
        assert repr(call.kwargs) == repr(values)  # types too: bool vs int, tuple vs list, -0.0


@ROUND_TRIP
@given(
    st.sampled_from(NAMES),
    st.dictionaries(
        _identifiers, _literals(st.text(st.characters(exclude_characters="("), max_size=20))
    ),
)
def test_fuzz_literal_calls_round_trip_through_the_rewrite(name: str, values: dict) -> None:
    # without "(" in any string, bfcl's rewrite only prefixes the head
    call = parse_call(format_call(name, values), MAPPING)
    assert isinstance(call, Call), call
    assert call.name == name
    assert repr(call.kwargs) == repr(values)


def _bad_nodes() -> st.SearchStrategy[ast.expr]:
    name = st.sampled_from(["x", "cd", "ls", "__import__", "os", "True_", "open"])
    const = st.integers(0, 9).map(ast.Constant)
    return st.one_of(
        name.map(lambda n: ast.Name(n, ast.Load())),
        name.map(lambda n: ast.Call(ast.Name(n, ast.Load()), [], [])),
        st.tuples(name, const).map(lambda t: ast.Call(ast.Name(t[0], ast.Load()), [t[1]], [])),
        st.tuples(name, name).map(lambda t: ast.Attribute(ast.Name(t[0], ast.Load()), t[1])),
        st.tuples(const, st.sampled_from([ast.Add, ast.Pow, ast.Mult]), const).map(
            lambda t: ast.BinOp(t[0], t[1](), t[2])
        ),
        st.tuples(name, const).map(lambda t: ast.Subscript(ast.Name(t[0], ast.Load()), t[1])),
        const.map(lambda c: ast.IfExp(ast.Constant(True), c, c)),
        const.map(lambda c: ast.Compare(c, [ast.Lt()], [c])),
        const.map(lambda c: ast.BoolOp(ast.And(), [c, c])),
        const.map(lambda c: ast.UnaryOp(ast.Not(), c)),
        const.map(lambda c: ast.Lambda(ast.arguments([], [], None, [], [], None, []), c)),
        name.map(lambda n: ast.JoinedStr([ast.FormattedValue(ast.Name(n), -1, None)])),
        const.map(lambda c: ast.NamedExpr(ast.Name("y", ast.Store()), c)),
        const.map(lambda c: ast.Starred(ast.List([c], ast.Load()), ast.Load())),
        st.just(ast.Constant(b"bytes")),
        st.just(ast.Constant(1j)),
        st.just(ast.Constant(...)),
        const.map(
            lambda c: ast.ListComp(
                c,
                [ast.comprehension(ast.Name("i", ast.Store()), ast.List([], ast.Load()), [], 0)],
            )
        ),
    )


def _wrap(node: ast.expr, how: str) -> ast.expr:
    if how == "list":
        return ast.List([ast.Constant(1), node], ast.Load())
    if how == "tuple":
        return ast.Tuple([node, ast.Constant("a")], ast.Load())
    if how == "set":
        return ast.Set([node])
    if how == "dict-value":
        return ast.Dict([ast.Constant("k")], [node])
    if how == "dict-key":
        return ast.Dict([node], [ast.Constant(0)])
    return node


@FUZZ
@given(
    st.sampled_from(NAMES),
    _bad_nodes(),
    st.lists(st.sampled_from(["list", "tuple", "set", "dict-value", "dict-key"]), max_size=3),
    st.booleans(),
    st.dictionaries(_identifiers, _literals(st.text(max_size=5)), max_size=2),
)
def test_fuzz_non_literal_arguments_are_refused(
    name: str, bad: ast.expr, wrappers: list[str], positional: bool, good: dict[str, Any]
) -> None:
    for how in wrappers:
        if isinstance(bad, ast.Starred) and how in ("dict-value", "dict-key"):
            continue
        bad = _wrap(bad, how)
    keywords = [ast.keyword(k, ast.Constant(None)) for k in good if k != "bad"]
    if positional or isinstance(bad, ast.Starred):
        call = ast.Call(ast.Name(name, ast.Load()), [bad], keywords)
    else:
        call = ast.Call(ast.Name(name, ast.Load()), [], [*keywords, ast.keyword("bad", bad)])
    try:
        text = ast.unparse(ast.fix_missing_locations(ast.Expression(call)))
    except Exception:  # an AST unparse cannot render is not a test input
        return
    for kwargs in ({}, {"mapping": MAPPING}, {"methods": frozenset(NAMES)}):
        result = parse_call(text, **kwargs)
        assert isinstance(result, ParseFailure), (text, result)
        assert result.result.startswith("Error during execution")


def test_odd_literals_in_model_text_print_no_warning() -> None:
    """Python's tokenizer warned on stderr about odd literals in a model's call text while
    it was parsed ("<string>:1: SyntaxWarning: invalid decimal literal" for ``1if``, once per
    call, in every worker): text from a file made careful print Python's warnings. They are
    silenced for the pseudo-files model text is parsed as; a real module's still show."""
    import subprocess
    import sys

    code = ("from careful_engine.core.calls import parse_call\n"
            "from careful_engine.core.literal_expr import safe_eval, Refused\n"
            "import ast\n"
            "for t in ['ls(a=1if 1else 2)', 'ls(a=0x1for)', 'ls(a=\"\\\\{\")']:\n"
            "    parse_call(t)\n"
            "    try:\n"
            "        safe_eval(t[5:-1]); ast.literal_eval(t[5:-1])\n"
            "    except (Refused, ValueError, SyntaxError):\n"
            "        pass\n"
            "import warnings; warnings.warn_explicit('still shown', SyntaxWarning, 'real.py', 1)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stderr.strip() == "real.py:1: SyntaxWarning: still shown", done.stderr
