"""The proof that a simulator method never changes its instance (careful_engine.core.purity):
it refuses every way of changing state it cannot see through, and on real runs every call of
a method it accepts leaves the capture as it was."""

from __future__ import annotations

import textwrap
import types
from pathlib import Path

import pytest

from careful_engine.core import bfcl, environment, purity
from careful_engine.core.decode import decode_entry, reference_trajectory
from careful_engine.core.process import BfclProcess
from careful_engine.core.replay import replay
from careful_engine.core.runs import load_result_file
from careful_engine.scoring.score import discover

SHARED = {"known": 1}


def _method(source: str):  # noqa: ANN202
    """A function from ``source`` whose source inspect can read (a file of its own)."""
    import importlib.util
    import tempfile

    folder = Path(tempfile.mkdtemp())
    path = folder / "mod.py"
    path.write_text("SHARED = {}\n\n\nclass Sim:\n" + textwrap.indent(textwrap.dedent(source), "    "))
    spec = importlib.util.spec_from_file_location(f"purity_case_{abs(hash(source))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Sim


PURE = [
    "def f(self, k):\n    return self.d.get(k)\n",
    "def f(self, k):\n    if k not in self.d:\n        return {'error': 'no'}\n    return self.d[k]\n",
    "def f(self):\n    out = {}\n    for k, v in self.d.items():\n        out[k] = v\n    return out\n",
    "def f(self, s):\n    x = self.d[s].copy()\n    x['y'] = 1\n    return x\n",
    "def f(self):\n    n = 0\n    for v in self.items:\n        n += len(v)\n    return n\n",
    "def f(self):\n    r = []\n    r.append(len(self.items))\n    return sorted(r)\n",
    "def f(self, t):\n    return [s for s in self.items if abs(s) >= t]\n",
]
CHANGING = [
    "def f(self, v):\n    self.x = v\n",
    "def f(self, k, v):\n    self.d[k] = v\n",
    "def f(self, v):\n    self.items.append(v)\n",
    "def f(self, v):\n    a = self.items\n    a.append(v)\n",
    "def f(self, v):\n    a = self.items\n    a += [v]\n",
    "def f(self, v):\n    a = self.d['k']\n    a['x'] = v\n",
    "def f(self):\n    x = self.d['k'].copy()\n    x['n']['m'] = 1\n",
    "def f(self):\n    x = []\n    x.append(self.items)\n    y = x[0]\n    y += [1]\n",
    "def f(self):\n    del self.d['k']\n",
    "def f(self):\n    self.helper()\n",
    "def f(self):\n    setattr(self, 'x', 1)\n",
    "def f(self):\n    return self._random.randint(1, 2)\n",
    "def f(self):\n    SHARED['k'] = 1\n",
    "def f(self):\n    s = SHARED\n    s.update({'k': 1})\n",
    "def f(self):\n    global SHARED\n    SHARED = {}\n",
    "def f(self):\n    self.items.sort()\n",
    "def f(self):\n    x = self.items\n    x.sort()\n",
    "def f(self):\n    for self.x in range(3):\n        pass\n",
    "def f(self):\n    [0 for self.x in range(3)]\n",
    "def f(self, v=[]):\n    v += [1]\n",
    "def f(self):\n    with open('x') as h:\n        return h.read()\n",
    "def f(self):\n    def g():\n        self.x = 1\n    return g\n",
    "def f(self):\n    return print(self.x)\n",
    "def f(self):\n    return getattr(self, 'x')\n",
    "def f(self):\n    return vars(self)\n",
    "def f(self):\n    (self.x, y) = (1, 2)\n",
]


@pytest.mark.parametrize("source", PURE)
def test_accepted(source: str) -> None:
    assert purity.pure_methods(_method(source)) == {"f"}


@pytest.mark.parametrize("source", CHANGING)
def test_refused(source: str) -> None:
    assert purity.pure_methods(_method(source)) == frozenset()


def test_classes_with_attribute_hooks_have_no_pure_methods() -> None:
    cls = _method("def f(self):\n    return self.x\n")
    assert purity.pure_methods(cls) == {"f"}
    hooked = types.new_class("Hooked", (cls,), exec_body=lambda ns: ns.update(
        __getattr__=lambda self, name: 0))
    assert purity.pure_methods(hooked) == frozenset()
    prop = types.new_class("Prop", (cls,), exec_body=lambda ns: ns.update(
        y=property(lambda self: 1)))
    assert purity.pure_methods(prop) == frozenset()


def test_decorated_methods_are_not_pure() -> None:
    cls = _method("@staticmethod\ndef f():\n    return 1\n")
    assert purity.pure_methods(cls) == frozenset()


def test_accepted_methods_leave_the_capture_as_it_was(shared_runs: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """With the shortcut off, every call of an accepted method in the real runs (model and
    reference sides, every category) leaves its class's capture byte for byte as it was."""
    monkeypatch.setattr(environment, "_pure", lambda class_name: frozenset())
    pure = {c: purity.pure_methods(bfcl.simulator_class(c)) for c in bfcl.CLASSES}
    assert sum(map(len, pure.values())) > 40
    checked = 0

    def check(trace) -> int:  # noqa: ANN001
        n = 0
        for side in (trace.model, trace.reference):
            for turn in side.turns if side else []:
                for r in turn:
                    if r.class_name and r.name in pure[r.class_name] \
                            and r.class_name != environment.FILE_SYSTEM:
                        a = r.state_before.blob(r.class_name)
                        b = r.state_after.blob(r.class_name)
                        assert a == b or r.class_name in environment.process_classes(
                            trace.conversation.involved_classes,
                            trace.conversation.long_context), (trace.id, r.text)
                        n += 1
        return n

    for run in sorted(p for p in shared_runs.iterdir() if p.is_dir()):
        by_model, _ = discover(run)
        for model, files in by_model.items():
            key = (bfcl.registry_key_for_dir(model) if run.name.startswith("xlam")
                   else "gpt-4o-2024-11-20-FC")
            handler = bfcl.handler(key)
            for rf in files:
                proc = BfclProcess()
                for e in load_result_file(rf).entries.values():
                    checked += check(replay(bfcl.conversation(e["id"]), decode_entry(e, handler),
                                            model_name=model, process=proc))
    for category in bfcl.CATEGORIES:
        for conv in bfcl.conversations(category):
            checked += check(replay(conv, reference_trajectory(conv.id, conv.ground_truth)))
    assert checked > 3_000



def _blank(node) -> str:  # noqa: ANN001
    """A definition's dump with its strings blanked: dedenting a method's own source also
    re-indents its multi-line strings (docstrings), and the proof reads no constant."""
    import ast
    import copy

    node = copy.deepcopy(node)
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            n.value = ""
    return ast.dump(node)


def test_a_definition_from_its_file_is_the_one_its_own_source_gives(monkeypatch) -> None:  # noqa: ANN001
    """Every public function of every simulator class (and of the cases above): the definition
    found in the parse of its whole file is the one parsed from its own source (but for the
    indentation inside strings), and the proof's verdict is the same from either."""
    import inspect

    found = []
    classes = [bfcl.simulator_class(c) for c in bfcl.CLASSES]
    for cls in [*classes, *(_method(s) for s in PURE + CHANGING)]:
        for name in dir(cls):
            value = inspect.getattr_static(cls, name)
            if name.startswith("_") or not isinstance(value, types.FunctionType):
                continue
            module_globals = value.__globals__  # vars() of the class's module
            own = purity._own_definition(value)
            assert _blank(purity._definition(value)) == _blank(own), (cls, name)
            found.append((value, module_globals, purity.pure_function(value, module_globals)))
    assert len(found) > 120 and any(v for *_, v in found) and not all(v for *_, v in found)
    monkeypatch.setattr(purity, "_definition", lambda func: None)  # each one's own source
    assert [purity.pure_function(f, g) for f, g, _ in found] == [v for *_, v in found]


def test_a_function_made_by_exec_is_read_from_its_own_source() -> None:
    namespace: dict = {}
    exec("def g(self):\n    return 1\n", namespace)  # noqa: S102 - a test's own constant
    assert purity._definition(namespace["g"]) is None
