"""The call parser's fast path (``calls._fast``, no ``ast``) reads exactly what ``ast`` reads.

Every call string is parsed twice: as it is, and with the fast path switched off and the caches
cleared, so that ``ast`` decides. The two results must be equal, with equal types all the way
down (``1`` vs ``1.0`` vs ``True``, lists vs tuples). The strings are the dataset's own
reference calls, hand-picked edge cases, and generated ones close to the fast path's shape.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from careful_engine.core import bfcl, calls
from careful_engine.core.calls import parse_call

pytestmark = pytest.mark.filterwarnings("ignore:invalid escape sequence")

MAPPING = {m: "careful_eval_x_GorillaFileSystem_instance" for m in ("cd", "ls", "mkdir", "echo")}
MAPPING.update({m: "careful_eval_x_TwitterAPI_instance" for m in ("post_tweet", "comment")})


def _typed(value: object) -> object:
    """``value`` with the type of every part kept, for comparisons."""
    if isinstance(value, dict):
        return ("dict", [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return (type(value).__name__, [_typed(v) for v in items])
    return (type(value).__name__, repr(value))


def _view(result: object) -> object:
    if isinstance(result, calls.Call):
        return ("call", result.name, _typed(result.args), _typed(dict(result.kwargs)),
                result.text)
    return ("failure", result.text, result.reason, result.name)


def _slow(text: str, mapping: dict) -> object:
    saved = calls._fast
    calls._fast = lambda _text: None
    calls.clear_caches()
    try:
        return parse_call(text, mapping)
    finally:
        calls._fast = saved
        calls.clear_caches()


def _same(text: str, mapping: dict | None = None) -> None:
    mapping = MAPPING if mapping is None else mapping
    calls._CALLS.clear()
    assert _view(parse_call(text, mapping)) == _view(_slow(text, mapping)), text


EDGES = [
    "cd(folder='document')", 'cd(folder="document")', "ls()", "ls( )", "  ls(a=True)\t",
    "ls(a=False)", "ls(a=None)", "mkdir(dir_name='a b', x=[1, -2.5, \"q\", True, None])",
    "mkdir(x=[])", "mkdir(x=[ ])", "mkdir(x=[1,])", "mkdir(x=-0)", "mkdir(x=-0.0)",
    "mkdir(x=0.10)", "mkdir(x=01)", "mkdir(x=1_000)", "mkdir(x=1e5)", "mkdir(x=.5)",
    "mkdir(x=1.)", "mkdir(x=123456789012345678901234567890)", "mkdir(x=+1)", "mkdir(x=--1)",
    "mkdir(x=1, x=2)", "mkdir(class=1)", "mkdir(True=1)", "mkdir(_x=1)", "mkdir(__debug__=1)",
    "mkdir(x='a\\nb')", "mkdir(x='a\\'b')", "mkdir(x=r'a')", "mkdir(x=b'a')", "mkdir(x=f'a')",
    "mkdir(x='''a''')", "mkdir(x='a' 'b')", "mkdir(x='a\"b')", "mkdir(x=\"a'b\")",
    "mkdir(x='a)b')", "mkdir(x='a(b')", "mkdir(x='ls(')", "mkdir(x='é ü 中文 🙂')",
    "mkdir(x='\x0c')", "mkdir(x='\x85')", "mkdir(x='\u2028')", "mkdir(x='\x00')",
    "mkdir(x='\ud800')", "mkdir(x = 1 , y = 'z')", "mkdir (x=1)", "mkdir(x=1)(y=2)",
    "mkdir(x=1, 'a')", "mkdir('a')", "mkdir(x={'a': 1})", "mkdir(x=(1, 2))",
    "mkdir(x=[[1]])", "mkdir(x=[1, [2]])", "ｃｄ(folder='a')", "rm(file_name='a')",
    "remove(x=1)", "_private(x=1)", "unknown(x=1)", "post_tweet(content='x', tags=['#a'])",
    "comment(tweet_id=0, comment_content='ok')", "if(x=1)", "None(x=1)", "cd(folder=True1)",
    "cd(folder='a'", "cd folder='a')", "cd(folder='a'))", "cd(\tfolder\t=\t'a'\t)",
    "cd(folder='a',)", "cd(,)", "echo(content='x', file_name=\"y\")\n",
]


@pytest.mark.parametrize("text", EDGES)
def test_edge_cases_read_as_ast_reads_them(text: str) -> None:
    _same(text)


def test_the_dataset_reference_calls_read_as_ast_reads_them() -> None:
    for category in bfcl.CATEGORIES:
        for conv in bfcl.conversations(category):
            mapping = {m: f"careful_eval_{conv.id}_{c}_instance" for c in conv.involved_classes
                       for m in bfcl.public_methods(c)}
            for turn in conv.ground_truth:
                for text in turn:
                    _same(text, mapping)


_CHARS = st.sampled_from(list("ab '\"\\()[],=-+.0123456789_\t\n\x0c\x00\x85é中🙂#")
                         + ["\ud800", "True", "None", "class", "ls", "x"])
_TEXT = st.lists(_CHARS, max_size=12).map("".join)
_SCALAR = st.one_of(
    st.integers(-10**20, 10**20).map(str), st.floats(allow_nan=False).map(repr),
    _TEXT.map(lambda s: f"'{s}'"), _TEXT.map(lambda s: f'"{s}"'),
    st.sampled_from(["True", "False", "None", "[]", "-0", "00", "1.", ".5", "1e3"]))
_VALUE = st.one_of(_SCALAR, st.lists(_SCALAR, max_size=3).map(lambda v: "[" + ", ".join(v) + "]"))
_NAME = st.sampled_from(["cd", "ls", "mkdir", "echo", "post_tweet", "class", "_x", "x", "zz"])
_SEP = st.sampled_from([",", ", ", " ,", ",\t", ""])


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(_NAME, st.lists(st.tuples(_NAME, _VALUE, _SEP), max_size=4), _TEXT)
def test_generated_calls_read_as_ast_reads_them(name: str, args: list, tail: str) -> None:
    inner = "".join(f"{k}={v}{sep}" for k, v, sep in args)
    _same(f"{name}({inner})")
    _same(f"{name}({inner}){tail}")
