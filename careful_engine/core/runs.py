"""Finding and reading BFCL result files, with a clear message for every bad line.

Layouts recognised under a run folder (at any depth):

* V4: ``<model>/multi_turn/BFCL_v4_<category>_result.json`` (bfcl generate's own layout)
* V3 flat: ``<model>/BFCL_v3_<category>_result.json`` (older bfcl releases)

The model is the folder above ``multi_turn/`` (V4) or the file's folder (V3); bfcl maps it to
a registry key by replacing ``_`` with ``/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import AnyStr, Protocol, TypeVar

from careful_engine.core import bfcl
from careful_engine.core.decode import answers_problem, bad_token_count, has_steps
from careful_engine.core.json_values import a_kind
from careful_engine.core.perf import collector_paused
from careful_engine.core.safe_read import (
    MAX_SMALL_BYTES,
    NotRegular,
    TooLarge,
    file_kind,
    read_regular,
)
from careful_engine.core.safe_text import clip, visible

RESULT_FILE = re.compile(r"^BFCL_v(\d+)_(\w+?)_result\.json$")
MAX_DEPTH = 100  # nesting of one entry; bfcl's own entries stay under 12
# characters of one entry's line: the shared runs' longest is 34,000; parsed, a line of small
# objects takes about twenty times its length in memory, so a longer one is not read
MAX_ENTRY_CHARS = 16 * 2**20
# bytes one file's kept entries may take parsed, as :func:`parsed_bound` estimates them from
# above before parsing: the shared runs' largest file is estimated at 43 MB (parsed: 10 MB);
# what is past this is not read. With the file's bytes (MAX_RESULT_BYTES) and one line being
# read, reading one result file takes at most about 850 MB whatever the file holds
MAX_KEPT_BYTES = 512 * 2**20
VALUE_BYTES = 128  # a parsed JSON value or key at most, besides its characters: measured 90
TOKEN_FIELDS = ("input_token_count", "output_token_count")  # per turn, per step


def line_over_cap(line: str | bytes, then: str = "skipped") -> str | None:
    """Why ``line`` is too long to parse (longer than :data:`MAX_ENTRY_CHARS`), or None: the
    one wording of every reader of JSON lines, ending ``; <then>`` (none when ``then`` is "").
    Undecoded UTF-8 is too long only where it is over four bytes a character (decode the
    rest, and ask again)."""
    tail = f"; {then}" if then else ""
    if isinstance(line, bytes):
        if len(line) <= 4 * MAX_ENTRY_CHARS:
            return None
        return (f"line is {len(line):,} bytes long, more than the {MAX_ENTRY_CHARS:,} "
                f"characters a line is read with{tail}")
    if len(line) <= MAX_ENTRY_CHARS:
        return None
    return (f"line is {len(line):,} characters long, more than the {MAX_ENTRY_CHARS:,} a line "
            f"is read with{tail}")


def values_bound(line: str | bytes) -> int:
    """An upper bound on the JSON values and object keys ``line`` parses into, counted
    without parsing it: every value but the first follows a ``[``, ``{``, ``,`` or ``:``
    (the same characters inside strings only raise the count; in UTF-8 no other character's
    bytes are these, so undecoded bytes count the same, and faster)."""
    if isinstance(line, bytes):
        return 1 + line.count(b"[") + line.count(b"{") + line.count(b",") + line.count(b":")
    return 1 + line.count("[") + line.count("{") + line.count(",") + line.count(":")


def parsed_bound(line: str | bytes) -> int:
    """An upper bound on the bytes ``line`` takes parsed: :data:`VALUE_BYTES` a value
    (:func:`values_bound`) and four a character (a string's character takes at most four;
    undecoded, four a byte: more)."""
    return VALUE_BYTES * values_bound(line) + 4 * len(line)


class ParseBudget:
    """The bytes one file's kept entries may take parsed (:data:`MAX_KEPT_BYTES`): a line is
    parsed only where its :func:`parsed_bound` fits in what is left; from the first line that
    does not, no line of the file is read."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_KEPT_BYTES if limit is None else limit
        self.used = 0
        self.stopped_at: int | None = None  # the first line refused

    def refuse(self, lineno: int, line: str | bytes, then: str = "not read",
               bound: int | None = None) -> str | None:
        """Why line ``lineno`` is not read (the budget ran out before it, or it does not fit
        in what is left), or None: it may be parsed; :meth:`keep` it once kept (``bound``:
        its :func:`parsed_bound`, if at hand). The one wording of every reader that keeps a
        file's lines, ending ``; <then>``."""
        if self.stopped_at is None:
            if self.used + (parsed_bound(line) if bound is None else bound) <= self.limit:
                return None
            self.stopped_at = lineno
        tail = f"; {then}" if then else ""
        return (f"line {self.stopped_at} and the lines after it would take the file's parsed "
                f"entries past the {self.limit:,} bytes a file is read into{tail}")

    def keep(self, line: str | bytes, bound: int | None = None) -> None:
        """Count a kept line against the budget (``bound``: its :func:`parsed_bound`)."""
        self.used += parsed_bound(line) if bound is None else bound


def depth_over(value: object, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests lists and objects deeper than ``limit`` (walked without
    recursion)."""
    level = [value] if isinstance(value, (list, dict)) else []
    depth = 0
    while level:  # the lists and objects at one depth, one depth at a time
        depth += 1
        if depth > limit:
            return True
        inner: list = []
        for v in level:
            inner += [x for x in (v.values() if isinstance(v, dict) else v)
                      if isinstance(x, (list, dict))]
        level = inner
    return False


@dataclass
class Problem:
    """Something wrong with the input, located as precisely as possible."""

    file: str
    message: str
    line: int | None = None
    id: str | None = None
    fatal: bool = False

    def __str__(self) -> str:
        """``file:line [id]: reason``, control characters shown as escapes; an id over 200
        characters and a reason over 1000 cut in the middle (the line is for people; the
        fields stay whole)."""
        where = self.file + (f":{self.line}" if self.line else "")
        who = f" [{clip(self.id)}]" if self.id else ""
        return visible(f"{where}{who}: {clip(self.message, 1000)}")

    @property
    def kind(self) -> str:
        """What kind of problem this is, as every command groups them: the message's first
        clause (before a ``:``, `` (`` or ``; ``), numbers as ``#``, at most 60 characters."""
        head = self.message.split(":")[0].split(" (")[0].split("; ")[0]
        return re.sub(r"\d+", "#", head)[:60]


@dataclass
class ResultFile:
    path: Path
    model: str  # the result folder name, as bfcl uses it
    category: str
    version: int


@dataclass
class LoadedFile:
    """The usable entries of one result file, in bfcl's evaluation order, and its problems."""

    file: ResultFile
    entries: dict[str, dict] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    sha256: str | None = None  # of the bytes read (None: not read)

    @property
    def unreadable(self) -> bool:
        """The file could not be read at all: reported, not scored."""
        return any(p.fatal for p in self.problems)

    @property
    def missing(self) -> list[str]:
        return [c.id for c in bfcl.conversations(self.file.category) if c.id not in self.entries]


class Versioned(Protocol):
    """A bfcl file of one category in one format version (a result or a score file)."""

    path: Path
    category: str
    version: int


V = TypeVar("V", bound=Versioned)


def newest_per_category(files: Iterable[V], model: str, what: str = "file"
                        ) -> tuple[dict[str, V], list[Problem]]:
    """One file per category: the newest version (of equal versions, the first given), in
    the order their categories first come; and a problem for every other file, naming the
    one used in the end (``another <category> <what> for <model> (<path>) is used
    instead``)."""
    files = list(files)
    best: dict[str, V] = {}
    for f in files:
        other = best.get(f.category)
        if other is None or f.version > other.version:
            best[f.category] = f
    passed_over = [Problem(str(f.path), f"another {f.category} {what} for {model} "
                           f"({best[f.category].path}) is used instead")
                   for f in files if f is not best[f.category]]
    return best, passed_over


def find_result_files(root: Path) -> tuple[list[ResultFile], list[Problem]]:
    """Multi-turn result files under ``root``, and notes on files in unexpected places."""
    files: list[ResultFile] = []
    problems: list[Problem] = []
    if root.is_file():
        candidates: Iterator[Path] | list[Path] = iter([root])
    else:
        candidates = search_files(root, "_result.json", problems)
    for path in sorted(candidates):
        try:
            mode = path.stat().st_mode
        except OSError as e:
            problems.append(Problem(str(path), f"cannot read ({e.strerror}); not scored"))
            continue
        if not stat.S_ISREG(mode):
            problems.append(Problem(str(path), f"{file_kind(mode)}, not a regular file; "
                                    "skipped"))
            continue
        m = RESULT_FILE.match(path.name)
        if not m:
            problems.append(Problem(str(path), "not a bfcl result file name; skipped"))
            continue
        version, category = int(m.group(1)), m.group(2)
        if not category.startswith("multi_turn"):
            continue  # single-turn and agentic categories are not this tool's business
        if category not in bfcl.CATEGORIES:
            problems.append(Problem(str(path), f"category {category!r} is not one of the four "
                                    "multi-turn categories; skipped"))
            continue
        parent = path.parent
        if parent.name == "multi_turn":
            model = parent.parent.name
            if version < 4:
                problems.append(Problem(str(path), "a V3 file inside multi_turn/; scored anyway"))
        else:
            model = parent.name
            if version >= 4:
                problems.append(Problem(str(path), "a V4 file outside a multi_turn/ folder; "
                                        "scored anyway"))
        if model in ("result", "score", ""):
            problems.append(Problem(str(path), "file is not inside a model folder; "
                                    f"using {model!r} as the model name"))
        files.append(ResultFile(path, model, category, version))
    return files, problems


MAX_SEARCH_DEPTH = 32  # folders below a run folder; bfcl's layouts need 3


def search_files(root: Path, suffix: str, problems: list[Problem]) -> list[Path]:
    """Every entry whose name ends with ``suffix`` under ``root`` (what ``root.rglob("*" +
    suffix)`` finds), found
    without recursion (a folder nested thousands deep cannot overflow the stack), each folder
    once (a link back up is not a loop), at most :data:`MAX_SEARCH_DEPTH` folders deep."""
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()
    stack = [(root, 0)]
    too_deep = False
    while stack:
        folder, depth = stack.pop()
        try:
            st = folder.stat()
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:  # unreadable, or gone: as rglob, passed over
            continue
        for e in entries:
            if e.name.endswith(suffix):
                found.append(Path(e.path))
            try:
                is_dir = e.is_dir()
            except OSError:
                continue
            if not is_dir:
                continue
            if depth >= MAX_SEARCH_DEPTH:
                if not too_deep:
                    too_deep = True
                    problems.append(Problem(e.path, f"folders more than {MAX_SEARCH_DEPTH} "
                                            "levels below the run folder are not searched"))
                continue
            stack.append((Path(e.path), depth + 1))
    return found


def load_result_file(rf: ResultFile) -> LoadedFile:
    """Read a JSON Lines result file entry by entry; bad lines are reported and skipped."""
    with collector_paused():  # parsing makes many acyclic objects: a third of the time in gc
        return _load_result_file(rf)


def _load_result_file(rf: ResultFile) -> LoadedFile:
    out = LoadedFile(rf)
    valid_ids = {c.id for c in bfcl.conversations(rf.category)}
    name = str(rf.path)
    try:
        raw = read_regular(rf.path)
    except OSError as e:
        out.problems.append(Problem(name, f"cannot read ({e.strerror or e}); not scored",
                                    fatal=True))
        return out
    out.sha256 = hashlib.sha256(raw).hexdigest()  # what a signature lists (scoring.signature)
    unparsed: Problem | None = None  # a line that is not JSON: "truncated" if it is the last
    budget = ParseBudget()
    refused: set[str] = set()  # ids of lines the budget refused, each reported once
    others = 0  # lines the budget refused without a new id of the category: counted
    for lineno, raw_line in content_lines(raw):
        # decoded line by line: one character beyond Latin-1 would make the whole file's text
        # take two or four bytes a character; of a line not read, only where its id would be
        stopped = budget.stopped_at is not None
        too_long = None if stopped else line_over_cap(raw_line)
        bound = parsed_bound(raw_line)  # (counted once, in bytes: see values_bound)
        not_utf8: UnicodeDecodeError | None = None
        if stopped or too_long:  # only where its id would be: a cut may split a character
            line = raw_line[:100_000].decode("utf-8", errors="surrogateescape")
        else:
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as e:  # bfcl's reader fails on the whole file
                line, not_utf8 = raw_line.decode("utf-8", errors="surrogateescape"), e
        del raw_line
        if not _CONTENT.search(line):
            continue  # blank but for Unicode spaces: blank as the file's text reads
        if unparsed is not None:
            out.problems.append(unparsed)
            unparsed = None
        if too_long or (not stopped and (too_long := line_over_cap(line))):
            out.problems.append(Problem(name, too_long, lineno, _guess_id(line)))
            continue
        if not_utf8 is not None:
            out.problems.append(Problem(name, "line is not UTF-8 (byte "
                                        f"0x{not_utf8.object[not_utf8.start]:02x} at byte "
                                        f"{not_utf8.start + 1:,}); skipped", lineno,
                                        _guess_id(line)))
            continue
        if over := budget.refuse(lineno, line, "not read, counted as failed", bound):
            guess = _guess_id(line)
            if guess in valid_ids and guess not in out.entries and guess not in refused:
                refused.add(guess)
                out.problems.append(Problem(name, over, lineno, guess))
            else:
                others += 1
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as e:
            unparsed = Problem(name, f"line is not JSON ({e.msg})", lineno, _guess_id(line))
            continue
        except RecursionError:
            out.problems.append(Problem(name, "line nests too deeply to read; skipped",
                                        lineno, _guess_id(line)))
            continue
        except ValueError as e:  # e.g. an integer of more than 4,300 digits
            out.problems.append(Problem(name, "line is not usable JSON "
                                        f"({str(e).split(';')[0][:120]})", lineno,
                                        _guess_id(line)))
            continue
        if depth_over(entry):
            out.problems.append(Problem(name, f"entry nests deeper than {MAX_DEPTH} levels; "
                                        "skipped", lineno, _guess_id(line)))
            continue
        if not isinstance(entry, dict):
            out.problems.append(Problem(name, f"entry is {a_kind(entry)}, not an "
                                        "object", lineno))
            continue
        entry_id = entry.get("id")
        if not isinstance(entry_id, str):
            out.problems.append(Problem(name, "entry has no string 'id'", lineno))
            continue
        if entry_id not in valid_ids:
            out.problems.append(Problem(name, f"id is not in {rf.category}", lineno, entry_id))
            continue
        if entry_id in out.entries:
            out.problems.append(Problem(name, f"duplicate id (first on line "
                                        f"{out.lines[entry_id]}); this line is ignored",
                                        lineno, entry_id))
            continue
        if "result" not in entry:
            out.problems.append(Problem(name, "entry has no 'result'; counted as an inference "
                                        "error", lineno, entry_id))
        elif type(entry["result"]) is not list:
            tb = " (with a traceback)" if "traceback" in entry else ""
            what = ("an error string" if isinstance(entry["result"], str)
                    else f"{a_kind(entry['result'])}, not a list of turns")
            out.problems.append(Problem(name, f"result is {what}{tb}: "
                                        f"{str(entry['result'])[:120]}", lineno, entry_id))
        wrong = answers_problem(entry)
        if wrong is not None:
            out.problems.append(Problem(name, wrong, lineno, entry_id))
        for key in TOKEN_FIELDS:
            bad = bad_token_count(entry.get(key))
            if bad is not None:
                out.problems.append(Problem(name, f"{key} holds {bad!r:.40}, which is not a "
                                            "token count; the conversation's token figures are "
                                            "unknown", lineno, entry_id))
        out.entries[entry_id] = entry
        out.lines[entry_id] = lineno
        budget.keep(line, bound)
    if others:
        out.problems.append(Problem(name, f"{others:,} more lines from line {budget.stopped_at} "
                                    "on (no new id of the category) not read: they would take "
                                    f"the file's parsed entries past the {budget.limit:,} bytes "
                                    "a file is read into"))
    if unparsed is not None:
        unparsed.message = unparsed.message.replace("line is not JSON", "truncated last line", 1)
        out.problems.append(unparsed)
    for missing in out.missing:
        if missing in refused:
            continue
        out.problems.append(Problem(name, "id missing from the file; counted as failed",
                                    None, missing))
    order = sorted(out.entries, key=bfcl.sort_key)
    out.entries = {k: out.entries[k] for k in order}
    return out


_CONTENT = re.compile(r"\S")
_CONTENT_BYTES = re.compile(rb"\S")  # ASCII whitespace only: more lines than _CONTENT's


def content_lines(text: AnyStr) -> Iterator[tuple[int, AnyStr]]:
    """(line number, line) of every line of ``text`` that is not blank, without splitting the
    whole text into a list (a file of millions of empty lines costs no memory and little
    time: blank stretches are skipped at C speed). In bytes, blank is ASCII whitespace only."""
    content: re.Pattern = _CONTENT if isinstance(text, str) else _CONTENT_BYTES
    nl = "\n" if isinstance(text, str) else b"\n"
    pos, lineno, n = 0, 1, len(text)
    while True:
        m = content.search(text, pos)
        if m is None:
            return
        first = m.start()
        start = text.rfind(nl, pos, first) + 1 or pos
        lineno += text.count(nl, pos, start)
        end = text.find(nl, first)
        if end < 0:
            end = n
        yield lineno, text[start:end]
        pos, lineno = end + 1, lineno + 1


def budgeted_lines(text: str, name: str, problems: list[Problem], budget: ParseBudget,
                   then: str = "not read") -> Iterator[tuple[int, str]]:
    """(line number, line) of the lines of ``text`` that are not blank (:func:`content_lines`)
    while ``budget`` lets them be parsed; at the first it refuses, one problem in
    :meth:`ParseBudget.refuse`'s words (ending ``; <then>``), and no more lines. The caller
    counts each line it keeps (:meth:`ParseBudget.keep`)."""
    for n, line in content_lines(text):
        if over := budget.refuse(n, line, then):
            problems.append(Problem(name, over, n, _guess_id(line)))
            return
        yield n, line


def _guess_id(line: str) -> str | None:
    m = re.search(r'"id"\s*:\s*"([^"]{1,200})"', line[:100_000])
    return m.group(1) if m else None


class DecoderUnavailable(Exception):
    """A model folder whose steps need a decoder that cannot be had."""


def needs_decoder(loaded: LoadedFile) -> bool:
    """Whether any turn of the file gives bfcl's decoder something to decode, whatever its
    shape (a list of steps, a string whose characters bfcl iterates, an object's keys)."""
    return any(
        type(e.get("result")) is list and any(has_steps(t) for t in e["result"])
        for e in loaded.entries.values()
    )


def decoder_key(model_dir: str, first: ResultFile | None, chosen: str | None = None) -> str:
    """A model folder's decoder key: ``chosen`` (``--decoder``) if given, else the one its
    ``careful_run.json`` names (read next to ``first``, one of its result files), else its
    registry key (the folder name with ``_`` as ``/``, as bfcl evaluate maps it). Raises
    :class:`DecoderUnavailable` for a manifest that names no usable key."""
    return (chosen or (manifest_decoder(first) if first is not None else None)
            or bfcl.registry_key_for_dir(model_dir))


MANIFEST = "careful_run.json"  # a model folder's manifest (careful generate, careful demo)


def result_model_folder(result_file: Path) -> Path:
    """The model folder of a result file (above ``multi_turn/`` in bfcl's V4 layout)."""
    parent = result_file.parent
    return parent.parent if parent.name == "multi_turn" else parent


LAYOUT_FOLDERS = ("result", "multi_turn")  # bfcl's own folders between a run and its files


def owning_run(model_folder: Path) -> Path:
    """The run folder a model folder belongs to, as an absolute path (links not followed):
    the folder above it, past bfcl's layout folders (``result/``); the model folder itself
    when there is nothing above it."""
    folder = Path(os.path.abspath(model_folder))
    run = folder.parent
    while run.name in LAYOUT_FOLDERS:
        run = run.parent
    return run if run.name else folder


def shared_names(files: list[ResultFile]) -> dict[str, list[Path]]:
    """Model folder names that several model folders among ``files`` share (runs of one model
    side by side under a parent folder), each with those folders in the order found."""
    folders: dict[str, list[Path]] = {}
    for rf in files:
        seen = folders.setdefault(rf.model, [])
        if (folder := result_model_folder(rf.path)) not in seen:
            seen.append(folder)
    return {m: fs for m, fs in folders.items() if len(fs) > 1}


def unmatched_decoder(folder: str, key: str, found: list[str]) -> str:
    """The note on ``--decoder FOLDER=KEY`` naming none of the folders ``found``."""
    names = list(dict.fromkeys(found))
    shown = ", ".join(names[:12]) + (f", … ({len(names)} in all)" if len(names) > 12 else "")
    return (f"--decoder {folder}={key}: no run or model folder named {folder} "
            f"(found: {shown or 'none'}); not used")


def model_manifest(model_folder: Path) -> dict:
    """A model folder's ``careful_run.json`` ({} when absent, too large, unreadable or not an
    object)."""
    try:
        data = json.loads(read_regular(model_folder / MANIFEST, MAX_SMALL_BYTES))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def is_synthetic(model_folder: Path) -> bool:
    """Whether a model folder's manifest marks it synthetic (``careful demo``'s flawed run: no
    model wrote it)."""
    return model_manifest(model_folder).get("synthetic") is True


SYNTHETIC_MARK = " (SYNTHETIC)"  # after the label of a run no model wrote (careful demo's)


def synthetic_label(label: str, synthetic: bool) -> str:
    """An entry's label as every table shows it: marked when its run is synthetic (its
    manifest says so), as the workbench marks it."""
    return label + SYNTHETIC_MARK if synthetic else label


def manifest_decoder(rf: ResultFile) -> str | None:
    """The decoder named by a ``careful_run.json`` in the model folder, if any.

    A manifest that cannot be read or parsed names none; one whose ``decoder`` is not a
    string (or that is a FIFO, a device...) raises :class:`DecoderUnavailable`.
    """
    path = result_model_folder(rf.path) / MANIFEST
    if not os.path.lexists(path):
        return None
    try:
        doc = json.loads(read_regular(path, MAX_SMALL_BYTES))
    except (NotRegular, TooLarge) as e:
        raise DecoderUnavailable(f"{visible(path)}: {e.strerror}; use --decoder") from None
    except (OSError, ValueError, RecursionError):
        return None
    decoder = doc.get("decoder") if isinstance(doc, dict) else None
    if decoder is None or isinstance(decoder, str):
        return decoder
    raise DecoderUnavailable(f"{visible(path)}: 'decoder' must be a registry key string, not "
                             f"{a_kind(decoder)}; use --decoder")
