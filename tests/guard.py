"""A process-wide guard for tests that feed hostile result files or model answers to the engine,
and the corpus of hostile payloads those tests feed it.

How to use it::

    from tests.guard import FORMATS, guarded, hostile_payloads

    def test_x(tmp_path):
        canary = new_canary()                       # a path outside tmp_path; must never appear
        run = write_run(tmp_path, hostile_payloads(canary))   # your own files
        with guarded(tmp_path, canary=canary) as g: # everything inside is watched
            careful_score(run, out=tmp_path / "out")
        # leaving the block raises GuardViolation if anything forbidden happened (even if the
        # code under test caught the exception the hook raised), or if the canary exists

The hook (``sys.addaudithook``; installed once, on first use, and never removable, so it is
switched by a flag: it does nothing outside a ``guarded`` block) blocks, by raising
:class:`Blocked` from the audited operation, and records:

* ``exec`` of a code object and ``compile`` of anything, unless the nearest Python caller is
  the import system, code run while a module is being imported (libraries generate functions
  at import; not when code compiled from a string started that import), ``ast.parse`` (parsing runs nothing; bfcl's
  decoders and ``ast.literal_eval`` parse model text), or one of the standard library's code
  generators (dataclasses, namedtuple, typing's forward references, ``inspect``'s string
  annotations of source code, which typer reads);
* process creation: ``os.system``, ``os.exec*``, ``os.spawn*``, ``os.posix_spawn``, ``os.fork``,
  ``subprocess.Popen``, ``pty.spawn``, ``os.kill``, ``webbrowser.open``, ``breakpoint()``,
  ``input()`` (except while a library is being imported by code that is not from a string:
  numpy.testing runs ``lscpu`` on import; and ``fork`` by ``multiprocessing`` for the engine's
  worker pool: the workers inherit the guard and append what they find to a file in the test
  folder, which the block reads when it exits);
* imports that load ``os``, ``subprocess``, ``shutil``, ``pty``, ``pdb``, ``webbrowser``,
  ``antigravity``, ``this``, ``runpy`` or ``code`` from anywhere but a module's top level (a
  library importing them as it is itself imported is fine), and any import at all, file
  open or other audited event raised while code compiled from a string (a frame whose file
  name is ``<string>``, ``<unknown>``, …, other than the standard library's generated dunder
  methods) is running — an already-loaded ``os`` raises no import event, so its use is caught
  here and at the ``exec`` that would run it;
* file opens for reading outside: the test's temporary folder, the repository, the virtual
  environment and the Python installation it is based on (standard library, site-packages),
  ``/work/shared`` (``CAREFUL_SHARED``), bfcl's scratch ``BFCL_PROJECT_ROOT``, and
  ``/dev/null``, ``/dev/urandom``, ``/etc/localtime``, ``/usr/share/zoneinfo`` and this
  process's own ``/proc/<pid>`` (the replay budget reads its memory use there);
* file opens for writing and file-system changes (remove, rename, mkdir, symlink, chmod, …;
  a path relative to a ``dir_fd`` is resolved against that directory, and for ``os.open``,
  whose audit event does not carry ``dir_fd``, against the directory fds the caller holds)
  outside the test's temporary folder, any ``write=`` folders given, the scratch
  ``BFCL_PROJECT_ROOT`` (bfcl's config module creates folders there when imported) and the
  engine's reference cache (``careful_engine.core.refcache.cache_root()``);
* network connections and name look-ups to anything but loopback (``loopback=False`` refuses
  those too).

The corpus (:func:`hostile_payloads`) holds expressions that would touch the canary, import
modules, reach builtins through dunder chains, or blow up memory if anything evaluated them,
each placed in several ways, in bfcl's prompting text format (``[cd(folder=…)]``), in bfcl's FC
step format (``[{name: json_args}]``, payloads in names, in argument strings and in argument
text that is not JSON) and in the tool-call text of the local FC handlers whose bfcl decoders
``eval`` it (Qwen/Hermes ``<tool_call>``, Llama 3.1 ``{"name":…,"parameters":…}``), plus
payloads split across steps.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import tempfile
import threading
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("CAREFUL_SHARED", REPO.parent / "shared"))


class Blocked(RuntimeError):
    """Raised by the audit hook from inside a forbidden operation."""


class GuardViolation(AssertionError):
    """Leaving a ``guarded`` block after something forbidden was attempted."""


_PROCESS_EVENTS = frozenset({
    "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty",
    "subprocess.Popen", "pty.spawn", "os.startfile", "os.kill", "os.killpg",
    "webbrowser.open", "builtins.breakpoint", "builtins.input",
})
_DENIED_IMPORTS = frozenset({
    "os", "subprocess", "shutil", "pty", "posix", "pdb", "webbrowser", "antigravity", "this",
    "runpy", "code",
})
# event -> (index of a written path argument, index of its dir_fd argument or None), …
_MUTATIONS: dict[str, tuple[tuple[int, int | None], ...]] = {
    "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),),
    "os.rename": ((0, 2), (1, 3)), "os.symlink": ((1, 2),), "os.link": ((1, 3),),
    "os.chmod": ((0, 2),), "os.chown": ((0, 3),), "os.truncate": ((0, None),),
    "os.utime": ((0, 3),), "os.chflags": ((0, None),), "os.lchown": ((0, None),),
    "shutil.rmtree": ((0, None),), "shutil.copyfile": ((1, None),),
    "shutil.copytree": ((1, None),), "shutil.move": ((0, None), (1, None)),
    "shutil.chown": ((0, None),), "os.setxattr": ((0, None),), "os.removexattr": ((0, None),),
}
# the standard library's code generators (file name endings) whose exec/compile is not model text
_STDLIB_GENERATORS = ("dataclasses.py", "collections/__init__.py", "typing.py")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_SYSTEM_READS = ("/dev/null", "/dev/urandom", "/etc/localtime", "/usr/share/zoneinfo")
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0", "", None})


def _real(path: str | os.PathLike) -> str:
    return os.path.realpath(os.fsdecode(path))


def _fd_dir(fd: object) -> str | None:
    """The directory an open file descriptor refers to (Linux), if it is one."""
    if not isinstance(fd, int) or isinstance(fd, bool) or fd < 0:
        return None
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return target if os.path.isdir(target) else None


def _candidates(path: str | bytes | os.PathLike, dir_fd: object = None, frame=None) -> list[str]:
    """Where a path may point: absolute as it is; relative to ``dir_fd`` if the call gave one;
    for an ``open`` event (which does not carry ``dir_fd``), relative to any directory fd held
    in the calling function's variables; else relative to the working directory."""
    text = os.fsdecode(path)
    if os.path.isabs(text):
        return [_real(text)]
    bases = [d for d in [_fd_dir(dir_fd)] if d]
    if not bases and frame is not None:
        bases = [d for v in list(frame.f_locals.values()) if (d := _fd_dir(v))]
    return [_real(os.path.join(b, text)) for b in bases or [os.getcwd()]]


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


@dataclass
class _State:
    active: bool = False
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    loopback: bool = True
    violations: list[str] = field(default_factory=list)
    pid: int = 0  # the process that entered the block
    report: str = ""  # where forked workers append their violations


_STATE = _State()
_LOCAL = threading.local()
_INSTALLED = False
_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"])


def install() -> None:
    """Add the audit hook to this process (once; it stays, switched off outside ``guarded``)."""
    global _INSTALLED
    if not _INSTALLED:
        sys.addaudithook(_hook)
        _INSTALLED = True


def _string_frame(start) -> str | None:
    """The first frame of code compiled from a string (not a generated dunder), if any."""
    f = start
    while f is not None:
        code = f.f_code
        name = code.co_filename
        if (name.startswith("<") and not name.startswith("<frozen")
                and not (code.co_name.startswith("__") and code.co_name.endswith("__"))):
            return f"{name}:{code.co_name}"
        f = f.f_back
    return None


def _trusted_caller(f) -> bool:
    """exec/compile whose nearest Python caller is the import system, ast.parse or a stdlib
    code generator."""
    if f is None:
        return False
    name = f.f_code.co_filename
    if name.startswith("<frozen importlib"):
        return True
    if not name.startswith(_STDLIB):
        return _importing(f)
    if name.endswith("/ast.py"):
        return f.f_code.co_name == "parse"
    if name.endswith("/inspect.py"):  # annotations of source code (typer reads them)
        return f.f_code.co_name in ("get_annotations", "<dictcomp>")
    return name.endswith(_STDLIB_GENERATORS) or _importing(f)


def _issuer(f):
    """The nearest frame outside the import system."""
    while f is not None and f.f_code.co_filename.startswith("<frozen"):
        f = f.f_back
    return f


def _importing(f) -> bool:
    """Code generated while a module is being imported (libraries build functions at import),
    with no code compiled from a string further up the stack."""
    seen_import = False
    while f is not None:
        name = f.f_code.co_filename
        if name.startswith("<frozen importlib"):
            seen_import = True
        elif name.startswith("<") and not name.startswith("<frozen"):
            return False
        f = f.f_back
    return seen_import


def _hook(event: str, args: tuple) -> None:
    if not _STATE.active or event == "sys._getframe" or getattr(_LOCAL, "busy", False):
        return
    _LOCAL.busy = True
    try:
        problem = _check(event, args)
        if problem and os.environ.get("CAREFUL_GUARD_DEBUG"):  # where it came from
            traceback.print_stack(file=sys.__stderr__)
    except Exception as e:  # never let the guard itself crash the code under test
        problem = f"{event}: guard could not check ({type(e).__name__}: {e})"
    finally:
        _LOCAL.busy = False
    if problem:
        _STATE.violations.append(problem)
        if os.getpid() != _STATE.pid and _STATE.report:
            _LOCAL.busy = True
            try:
                with open(_STATE.report, "a", encoding="utf-8") as f:
                    f.write(problem.replace("\n", " ") + "\n")
            except OSError:
                pass
            finally:
                _LOCAL.busy = False
        raise Blocked(f"careful test guard: {problem}")


def _check(event: str, args: tuple) -> str | None:
    if event in ("exec", "compile"):
        caller = sys._getframe(2)  # 0 _check, 1 _hook, 2 the Python code that called exec/eval
        if _trusted_caller(caller):
            return None
        what = args[0]
        shown = what.co_filename if hasattr(what, "co_filename") else repr(what)[:120]
        return f"{event} of {shown} from {caller.f_code.co_filename}:{caller.f_lineno}"
    if event in _PROCESS_EVENTS or event.startswith("os.exec") or event.startswith("os.spawn"):
        caller = sys._getframe(2)
        if _importing(caller):
            return None  # a library probing the machine as it is imported (numpy runs lscpu)
        if (event == "os.fork" and caller.f_code.co_filename.startswith(_STDLIB + "/multiprocessing/")
                and _string_frame(caller) is None):
            return None  # the engine's worker pool; workers stay guarded and report back
        return f"{event}{_short(args)}"
    if event == "import":
        module = str(args[0])
        issuer = _issuer(sys._getframe(2))
        if module.split(".")[0] in _DENIED_IMPORTS and issuer is not None and (
                issuer.f_code.co_name != "<module>" or issuer.f_code.co_filename.startswith("<")):
            return f"import of {module} from {issuer.f_code.co_filename}:{issuer.f_code.co_name}"
    elif event == "open":
        path, mode, flags = (list(args) + [None, None])[:3]
        if not isinstance(path, (str, bytes, os.PathLike)):
            return None  # a file descriptor
        places = _candidates(path, frame=sys._getframe(2))
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
        if writing and not any(_under(r, _STATE.write) for r in places):
            return f"open for writing outside the test folder: {places[0]}"
        own = (f"/proc/{os.getpid()}",)  # the replay budget reads its own memory use (workers too)
        if not writing and not any(_under(r, _STATE.read + own) for r in places):
            return f"open outside the allowed folders: {places[0]}"
    elif event in _MUTATIONS:
        for i, fd_i in _MUTATIONS[event]:
            if i < len(args) and isinstance(args[i], (str, bytes, os.PathLike)):
                fd = args[fd_i] if fd_i is not None and fd_i < len(args) else None
                real = _candidates(args[i], fd)[0]
                if not _under(real, _STATE.write):
                    return f"{event} outside the test folder: {real}"
    elif event == "socket.connect":
        address = args[1] if len(args) > 1 else None
        host = address[0] if isinstance(address, tuple) else address
        if not (_STATE.loopback and host in _LOOPBACK):
            return f"network connection to {address!r}"
    elif event == "socket.getaddrinfo":
        if not (_STATE.loopback and args and args[0] in _LOOPBACK):
            return f"name look-up of {args[0]!r}"
    if event in ("object.__getattr__", "import", "open") or event.startswith(
            ("os.", "ctypes.", "socket.", "shutil.", "subprocess.", "builtins.", "sys.")):
        where = _string_frame(sys._getframe(2))
        if where:
            return f"{event}{_short(args)} from code compiled from a string ({where})"
    return None


def _short(args: tuple) -> str:
    text = repr(args)
    return text if len(text) <= 160 else text[:159] + "…"


def new_canary() -> Path:
    """A fresh path outside any test folder; hostile payloads try to create it."""
    return Path(tempfile.gettempdir()) / f"careful_canary_{uuid.uuid4().hex}"


@contextmanager
def guarded(tmp: Path, *, canary: Path | None = None, read: tuple[Path, ...] = (),
            write: tuple[Path, ...] = (), loopback: bool = True) -> Iterator[_State]:
    """Watch everything this process does inside the block (see the module docstring)."""
    install()
    if _STATE.active:
        raise RuntimeError("guarded blocks do not nest")
    tmp_roots = (_real(tmp),)
    env_root = os.environ.get("BFCL_PROJECT_ROOT")
    from careful_engine.core.refcache import cache_root  # the engine's own reference cache

    cache = str(cache_root())
    reads = [str(REPO), sys.prefix, sys.base_prefix, sys.exec_prefix, _STDLIB,
             sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], str(SHARED),
             *_SYSTEM_READS, *(str(p) for p in read)]
    if env_root:
        reads.append(env_root)
    state = _STATE
    state.read = tuple(_real(p) for p in reads) + tmp_roots + tuple(_real(p) for p in write)
    # bfcl's eval_config creates its result/score folders under the scratch root on import
    state.write = tmp_roots + tuple(_real(p) for p in write) + (
        (_real(env_root),) if env_root else ()) + (_real(cache),)
    state.read += (_real(cache),)
    state.pid = os.getpid()
    state.report = os.path.join(_real(tmp), f".careful_guard_{os.getpid()}.txt")
    state.loopback = loopback
    state.violations = []
    state.active = True
    try:
        yield state
    finally:
        state.active = False
    problems = list(state.violations)
    try:  # what forked workers found (they cannot append to this process's list)
        with open(state.report, encoding="utf-8") as f:
            problems += [f"in a worker process: {line.rstrip()}" for line in f if line.strip()]
        os.remove(state.report)
    except OSError:
        pass
    if canary is not None and os.path.lexists(canary):
        problems.append(f"the canary {canary} exists")
    if problems:
        raise GuardViolation("forbidden while guarded:\n  " + "\n  ".join(problems[:20]))


@pytest.fixture
def guard(tmp_path: Path) -> Iterator[_State]:
    """``guarded(tmp_path)`` as a fixture (import it into a test module to use it)."""
    with guarded(tmp_path) as state:
        yield state


# ---------------------------------------------------------------- the hostile payload corpus

CANARY = "@CANARY@"  # replaced by the canary's path

# (kind, expression): each would touch the canary, import, reach builtins or exhaust memory if
# anything evaluated it
EXPRESSIONS: tuple[tuple[str, str], ...] = (
    ("import", "__import__('os').system('touch @CANARY@')"),
    ("import", "__import__('subprocess').call(['touch', '@CANARY@'])"),
    ("import", "__import__('subprocess').Popen(['touch', '@CANARY@'])"),
    ("import", "__import__('shutil').copy('/etc/hostname', '@CANARY@')"),
    ("import", "__import__('pathlib').Path('@CANARY@').touch()"),
    ("import", "__import__('importlib').import_module('os').system('touch @CANARY@')"),
    ("import", "__import__('sys').modules['os'].system('touch @CANARY@')"),
    ("import", "__import__('antigravity')"),
    ("import", "__import__('os').environ"),
    ("builtin", "open('@CANARY@', 'w').write('x')"),
    ("builtin", "open('@CANARY@', 'w')"),
    ("builtin", "open('/etc/passwd').read()"),
    ("builtin", "eval(\"open('@CANARY@', 'w')\")"),
    ("builtin", "exec(\"open('@CANARY@', 'w')\")"),
    ("builtin", "compile('1', 'x', 'eval')"),
    ("builtin", "globals()"),
    ("builtin", "vars()"),
    ("builtin", "getattr(__import__('os'), 'system')('touch @CANARY@')"),
    ("builtin", "breakpoint()"),
    ("builtin", "input()"),
    ("builtin", "print(open('/etc/passwd').read())"),
    ("builtin", "type('X', (), {})"),
    ("builtin", "bytearray(10 ** 10)"),
    ("dunder", "().__class__.__base__.__subclasses__()"),
    ("dunder", "().__class__.__bases__[0].__subclasses__()[0]"),
    ("dunder", "(1).__class__.__mro__[-1].__subclasses__()"),
    ("dunder", "__builtins__['open']('@CANARY@', 'w')"),
    ("dunder", "__builtins__.open('@CANARY@', 'w')"),
    ("dunder", "{}.__class__.__init__.__globals__"),
    ("dunder", "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == "
               "'catch_warnings'][0]()._module.__builtins__['__import__']('os')"
               ".system('touch @CANARY@')"),
    ("attribute", "os.system('touch @CANARY@')"),
    ("attribute", "json.codecs.sys.modules['os'].system('touch @CANARY@')"),
    ("attribute", "ast.builtins"),
    ("binop", "1 + __import__('os').system('touch @CANARY@')"),
    ("binop", "'a' + open('@CANARY@', 'w').name"),
    ("binop", "[1] + [__import__('os').system('touch @CANARY@')]"),
    ("binop", "'%s' % open('@CANARY@', 'w')"),
    ("size", "9 ** 9 ** 9"),
    ("size", "'a' * 10 ** 10"),
    ("size", "[0] * 10 ** 10"),
    ("size", "[[0] * 10 ** 5] * 10 ** 5"),
    ("size", "1 << 10 ** 10"),
    ("call", "(lambda: __import__('os').system('touch @CANARY@'))()"),
    ("lambda", "lambda: __import__('os').system('touch @CANARY@')"),
    ("lambda", "(lambda f: f('@CANARY@', 'w'))(open)"),
    ("comprehension", "[open('@CANARY@', 'w') for _ in range(1)]"),
    ("comprehension", "{k: open('@CANARY@', 'w') for k in 'a'}"),
    ("comprehension", "list(open('@CANARY@', 'w') for _ in 'a')"),
    ("comprehension", "{open('@CANARY@', 'w') for _ in 'a'}"),
    ("other", "(x := open('@CANARY@', 'w'))"),
    ("other", "1 if __import__('os').system('touch @CANARY@') else 2"),
    ("other", "[*map(open, ['@CANARY@'], ['w'])]"),
    ("other", "{**__import__('os').environ}"),
    ("other", "[1, 2][__import__('os').system('touch @CANARY@')]"),
    ("other", "f\"{__import__('os').system('touch @CANARY@')}\""),
    ("other", "-__import__('os').system('touch @CANARY@')"),
    ("other", "not __import__('os').system('touch @CANARY@')"),
    ("other", "__import__('os').system('touch @CANARY@') == 0"),
)


@dataclass(frozen=True)
class Payload:
    """One hostile result-file turn: its steps, in one format."""

    name: str
    format: str  # one of FORMATS
    steps: tuple  # the turn's steps, as they would appear in a result file


FORMATS = ("prompting", "fc", "qwen_fc_text", "llama_3_1_text")


def _prompting(kind: str, expr: str) -> list[tuple[str, list]]:
    out = [
        ("keyword", [f"[cd(folder={expr})]"]),
        ("nested", [f"[mv(source='a.txt', destination=[{expr}, {{'k': ({expr},)}}])]"]),
        ("binop", [f"[cd(folder='x' + ({expr}))]"]),
        ("second_call", [f"[ls(a=True), touch(file_name={expr})]"]),
    ]
    if kind in ("import", "builtin", "call", "attribute"):
        out.append(("whole_call", [f"[{expr}]"]))
    return out


def _split(expr: str) -> list[str]:
    half = len(expr) // 2
    return [f"[cd(folder={expr[:half]}", f"{expr[half:]})]"]


def _fc(expr: str) -> list[tuple[str, list]]:
    return [
        ("argument_string", [[{"cd": json.dumps({"folder": expr})}]]),
        ("quote_break", [[{"cd": json.dumps({"folder": "x'); " + expr + "; ('"})}]]),
        ("argument_text", [[{"cd": "{'folder': " + expr + "}"}]]),
        ("name", [[{expr: "{}"}]]),
    ]


def hostile_payloads(canary: Path | str, formats: tuple[str, ...] = FORMATS) -> list[Payload]:
    """Every payload of the corpus, in each of ``formats``, with ``canary`` filled in."""
    c = str(canary)
    out: list[Payload] = []
    for i, (kind, template) in enumerate(EXPRESSIONS):
        expr = template.replace(CANARY, c)
        tag = f"{i:02d}_{kind}"
        if "prompting" in formats:
            out += [Payload(f"{tag}_{where}", "prompting", tuple(steps))
                    for where, steps in _prompting(kind, expr)]
            out.append(Payload(f"{tag}_split", "prompting", tuple(_split(expr))))
        if "fc" in formats:
            out += [Payload(f"{tag}_{where}", "fc", tuple(steps)) for where, steps in _fc(expr)]
        if "qwen_fc_text" in formats:
            text = '<tool_call>\n{"name": "cd", "arguments": {"folder": ' + expr + "}}\n</tool_call>"
            out.append(Payload(f"{tag}_tool_call", "qwen_fc_text", (text,)))
            out.append(Payload(f"{tag}_tool_call_split", "qwen_fc_text",
                               tuple(_split_text(text))))
        if "llama_3_1_text" in formats:
            text = '{"name": "cd", "parameters": {"folder": ' + expr + "}}"
            out.append(Payload(f"{tag}_python_tag", "llama_3_1_text", ("<|python_tag|>" + text,)))
            out.append(Payload(f"{tag}_list", "llama_3_1_text", (f"[{text}]",)))
    return out


def _split_text(text: str) -> list[str]:
    half = len(text) // 2
    return [text[:half], text[half:]]


def result_entry(entry_id: str, payload: Payload, turns: int = 1) -> dict:
    """A result entry whose first turn holds ``payload``'s steps, closed by a text step."""
    result: list[list] = [list(payload.steps) + ["Done."]]
    result += [["Done."] for _ in range(turns - 1)]
    return {"id": entry_id, "result": result}
