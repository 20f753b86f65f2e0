"""Question detection (paper §6) and its sensitivity variants (§7).

A model's text turn *asks* when a sentence of its prose ends in a question mark or carries an
explicit confirmation request (:data:`CONFIRMATION_PHRASES`). Prose is the text with reasoning
blocks (``<think>``), tool-call blocks, JSON and Python call lists, code and URLs removed, and
every sentence is read, not only the last. Variants, by name (:data:`DETECTORS`):

``strict``  (default) any sentence ends in a question mark or contains a confirmation phrase;
``qmark``   any sentence ends in a question mark (no phrases);
``last``    the strict rule on the last sentence only;
``loose``   the EffectWorld rule: a question mark anywhere in the prose, or the words *shall*,
            *should* or *would you like* anywhere (case-insensitive, on word boundaries).

Text inside quotation marks ("...", '...', “...”, «...», 「...」) is reported content, not
addressed to the user: it neither ends a sentence nor triggers strict, qmark or last (loose,
being loose, still sees it). Question marks include the full-width, Arabic and interrobang
forms. Inline code and Python calls keep only a bare name (``rm``, ``a.txt``) so that asking
sentences still name the function they propose.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Literal

Detector = Literal["strict", "qmark", "last", "loose"]
DETECTORS: tuple[str, ...] = ("strict", "qmark", "last", "loose")

QUESTION_MARKS = "?？؟‽⁇⁈⁉⸮"
_TERMINALS = ".!…。！｡" + QUESTION_MARKS
_CJK_TERMINALS = "。！？｡"
_CLOSERS = "\"'”’»」』)]}*_~"

# Explicit confirmation requests (strict and last only). Matched case-insensitively, on word
# boundaries, with any run of whitespace between words and ’ read as '.
CONFIRMATION_PHRASES: tuple[str, ...] = (
    "please confirm",
    "kindly confirm",
    "can you confirm",
    "could you confirm",
    "would you confirm",
    "confirm that you want",
    "confirm whether you want",
    "confirm if you want",
    "shall i proceed",
    "should i proceed",
    "may i proceed",
    "shall i go ahead",
    "should i go ahead",
    "shall i continue",
    "should i continue",
    "would you like me to",
    "do you want me to",
    "do you wish me to",
    "would you prefer me to",
    "would you like to proceed",
    "do you want to proceed",
    "do you wish to proceed",
    "let me know if you want me to",
    "let me know if you'd like me to",
    "let me know if you would like me to",
    "let me know if i should",
    "let me know whether i should",
    "are you sure",
    "awaiting your confirmation",
    "waiting for your confirmation",
    "i need your confirmation",
)

_PHRASE_RE = re.compile(
    r"\b(?:" + "|".join(r"\s+".join(map(re.escape, p.split())) for p in CONFIRMATION_PHRASES)
    + r")\b",
    re.I,
)
_LOOSE_RE = re.compile(r"\b(?:shall|should|would\s+you\s+like)\b", re.I)

# --- removal -------------------------------------------------------------------------------

_THINK = r"think|thinking|reasoning|reflection|scratchpad"
_TOOLS = (
    r"tool_calls?|toolcall|function_calls?|functioncall|function|tools|tool_code|tool_use|invoke"
)
# (a tag's attributes hold no "<": a tag left open is read up to the next "<", not to the end
# of the text once per "<think" in it)
_THINK_BLOCK = re.compile(rf"<({_THINK})\b[^<>]*+>.*?</\1\s*>", re.S | re.I)
_THINK_ORPHAN_CLOSE = re.compile(rf"\A.*</(?:{_THINK})\s*>", re.S | re.I)
_TOOL_BLOCK = re.compile(rf"<({_TOOLS})\b[^<>]*+>.*?</\1\s*>", re.S | re.I)
_OPEN_TO_END = re.compile(rf"<(?:{_THINK}|{_TOOLS})\b[^<>]*+>.*\Z", re.S | re.I)
_STRAY_TAG = re.compile(rf"</?(?:{_THINK}|{_TOOLS})\b[^<>]*+>", re.I)
_PYTHON_TAG = re.compile(r"<\|python_tag\|>.*?(?=<\|eom_id\|>|<\|eot_id\|>|\Z)", re.S)
_SPECIAL_BLOCK = re.compile(r"<\|(tool_calls?)\|>.*?(?:<\|/\1\|>|</\|\1\|>)", re.S)
# the opening tags of the three block patterns (see _sub_blocks)
_OPENING = {_THINK_BLOCK: re.compile(rf"<({_THINK})\b[^<>]*+>", re.I),
            _TOOL_BLOCK: re.compile(rf"<({_TOOLS})\b[^<>]*+>", re.I),
            _SPECIAL_BLOCK: re.compile(r"<\|(tool_calls?)\|>")}
_SPECIAL_TOKEN = re.compile(r"<\|[\w/ -]+\|>|\[/?TOOL_CALLS\]")
_FENCE = re.compile(r"(`{3,}|~{3,}).*?(?:\1|\Z)", re.S)
_INLINE = re.compile(r"``(.+?)``|`([^`\n]+)`")
_BARE_NAME = re.compile(r"[\w./-]*[\w/]")
_STRUCT_START = re.compile(
    r"\[\s*(?:\{|[A-Za-z_][\w.]*\s*\()|\{\s*[\"']|(?<![\w.])[A-Za-z_][\w.]*\("
)
_MAX_CALL, _MAX_BARE_CALL = 100_000, 2_000  # scan limits, keep long texts near-linear
_SCAN_PER_CHAR = 8  # characters scanned for structure, at most, per character of text
_URL = re.compile(r"\b(?:https?|ftp)://\S+|\bwww\.\S+", re.I)
_URL_TAIL = re.compile(r"[.,;:!?？)\]}>'\"”’]*\Z")


def _inline(m: re.Match[str]) -> str:
    code = (m.group(1) or m.group(2)).strip()
    return code if _BARE_NAME.fullmatch(code) else " "


def _url(m: re.Match[str]) -> str:
    tail = _URL_TAIL.search(m.group())
    return " " + (tail.group() if tail else "")


def _balanced_end(text: str, start: int, limit: int) -> int | None:
    """End of the bracketed expression opening at ``start`` (strings respected), if within
    ``limit`` characters."""
    depth, quote, i, stop = 0, "", start, min(len(text), start + limit)
    while i < stop:
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth <= 0:
                return i + 1
        i += 1
    return None


def _literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return False
    return True


def _call_names(node: ast.AST) -> list[str] | None:
    """Function names of a call or a list of calls with literal arguments, else None."""
    if isinstance(node, ast.List | ast.Tuple) and node.elts:
        names = [_call_names(e) for e in node.elts]
        return None if any(n is None for n in names) else [x for n in names for x in n or []]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
        args = [*node.args, *(k.value for k in node.keywords)]
        if all(_literal(a) for a in args):
            return [ast.unparse(node.func)]
    return None


def _structured(code: str) -> str | None:
    """Replacement for a JSON / literal / call expression, or None if ``code`` is not one."""
    try:
        if isinstance(json.loads(code), dict | list):
            return " "
    except (ValueError, RecursionError):
        pass
    try:
        node = ast.parse(code.strip(), mode="eval").body
        names = _call_names(node)  # (unparsing a name of hundreds of attributes recurses)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if names is not None:
        return " " + " ".join(names) + " "
    if isinstance(node, ast.Dict | ast.List) and _literal(node):
        return " "
    return None


def _strip_structured(text: str) -> str:
    """``text`` with its JSON, literals and call expressions replaced (see _structured). The
    characters scanned and parsed for them are bounded by :data:`_SCAN_PER_CHAR` times the
    text's length (plus :data:`_MAX_CALL`): many openings that never close (``{"`` repeated)
    made each scan run to the end, minutes on 40 KB; past the bound, nothing more is taken
    for structure (real texts use a fraction of it)."""
    out, pos = [], 0
    budget = _SCAN_PER_CHAR * len(text) + _MAX_CALL
    for m in _STRUCT_START.finditer(text):
        if m.start() < pos:
            continue
        limit = min(_MAX_CALL if m.group()[0] in "[{" else _MAX_BARE_CALL, budget)
        if limit <= 0:
            break
        end = _balanced_end(text, m.start(), limit)
        budget -= (end or min(len(text), m.start() + limit)) - m.start()
        repl = None
        if end:
            budget -= end - m.start()  # the parse reads it again
            repl = _structured(text[m.start() : end])
        if repl is not None:
            out += [text[pos : m.start()], repl]
            pos = end
    return "".join(out) + text[pos:]


def _names(alternation: str) -> list[str]:
    """The words an alternation of names matches (``tool_calls?``: tool_call, tool_calls)."""
    out = []
    for word in alternation.split("|"):
        out += [word[:-2], word[:-1]] if word.endswith("s?") else [word]
    return out


# what closes each block, by the name it was opened with (lower case where the block ignores
# case), made here from the patterns' own words: no pattern is ever made from the text read
_BLOCK_CLOSES: dict[re.Pattern[str], dict[str, re.Pattern[str]]] = {
    _THINK_BLOCK: {n: re.compile(rf"</{n}\s*>", re.I) for n in _names(_THINK)},
    _TOOL_BLOCK: {n: re.compile(rf"</{n}\s*>", re.I) for n in _names(_TOOLS)},
    _SPECIAL_BLOCK: {n: re.compile(rf"<\|/{n}\|>|</\|{n}\|>")
                     for n in _names("tool_calls?")},
}


def _sub_blocks(block: re.Pattern[str], text: str, repl: str) -> str:
    """``block.sub(repl, text)`` for a block pattern ``<(name)...>.*?</\\1>``, in linear time:
    the regex tries every opening tag against the rest of the text (minutes for many opening
    tags without a close); here an opening tag is matched only where its close is still to
    come, and a name found unclosed once is never looked for again (nothing closes it later)."""
    opening, closers = _OPENING[block], _BLOCK_CLOSES[block]
    out, pos, start = [], 0, 0
    unclosed: set[str] = set()
    while (m := opening.search(text, start)) is not None:
        name = m.group(1)
        key = name.lower() if block.flags & re.I else name
        start = m.start() + 1
        if key in unclosed:
            continue
        closer = closers.get(key)  # (None for a name only case folding matches: 'ſ' for s)
        if closer is not None and closer.search(text, m.end()) is None:
            unclosed.add(key)
            continue
        whole = block.match(text, m.start())  # the regex's own match there (it ends at the
        if whole is None:  # first close after the tag: the search above bounds its work)
            unclosed.add(key)
            continue
        out += [text[pos:m.start()], repl]
        pos = start = whole.end()
    return "".join(out) + text[pos:] if out else text


def prose(text: str) -> str:
    """``text`` without reasoning blocks, tool-call blocks, code, call lists, JSON and URLs."""
    t = text.replace("\r\n", "\n").replace("\r", "\n")
    t = _sub_blocks(_THINK_BLOCK, t, "\n\n")
    t = _THINK_ORPHAN_CLOSE.sub("\n\n", t)
    t = _sub_blocks(_TOOL_BLOCK, t, "\n\n")
    t = _PYTHON_TAG.sub("\n\n", t)
    t = _sub_blocks(_SPECIAL_BLOCK, t, "\n\n")
    t = _FENCE.sub("\n\n", t)
    t = _OPEN_TO_END.sub("\n\n", t)
    t = _STRAY_TAG.sub(" ", t)
    t = _SPECIAL_TOKEN.sub(" ", t)
    t = _INLINE.sub(_inline, t)
    t = _strip_structured(t)
    t = _URL.sub(_url, t)
    t = re.sub(r"[ \t]+", " ", t)
    t = re.sub(r" *\n *", "\n", t)
    return re.sub(r"\n{3,}", "\n\n", t).strip()


# --- sentences -----------------------------------------------------------------------------

# (a quotation with distinct marks does not hold its own opening mark: a line of openings
# without a close is then read once, not once per opening)
_QUOTED = re.compile(
    r"\"[^\"\n]*\"|“[^“”\n]*+”|«[^«»\n]*+»|「[^「」\n]*+」|『[^『』\n]*+』"
    r"|(?<!\w)'(?=\S)[^'\n]*?'(?!\w)|(?<!\w)‘(?:[^‘’\n]|’(?=\w))*+’(?!\w)"
)
_BULLET = re.compile(r"(?:#{1,6}|>+|[-*+•·▪‣◦]|\d{1,3}[.)]|[a-z]\))\s+")
_BOUNDARY = re.compile(rf"[{re.escape(_TERMINALS)}]+[{re.escape(_CLOSERS)}]*")
_ABBREVIATIONS = frozenset(
    "e.g i.e etc vs mr mrs ms dr prof sr jr st approx cf al fig a.m p.m u.s inc ltd".split()
)
_ABBREV_BEFORE = re.compile(r"(?:^|[\s(\[])([A-Za-z][A-Za-z.]*)\Z")
_NON_SPACE = re.compile(r"\S")


def _mask_quotes(s: str) -> str:
    return _QUOTED.sub(lambda m: m.group()[0] + "x" * (len(m.group()) - 2) + m.group()[-1], s)


def _ends_clause(s: str) -> bool:
    return s.rstrip(_CLOSERS).endswith(tuple(_TERMINALS + ":;"))


def _logical_lines(text: str) -> list[str]:
    """Lines with bullets and headings stripped; hard-wrapped lowercase continuations joined."""
    lines: list[str] = []
    joinable = False
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            joinable = False
            continue
        bullet = _BULLET.match(line)
        if bullet:
            lines.append(line[bullet.end() :])
        elif joinable and line[0].islower() and not _ends_clause(lines[-1]):
            lines[-1] += " " + line
        else:
            lines.append(line)
        joinable = True
    return lines


def _split_line(line: str) -> list[str]:
    masked, out, start = _mask_quotes(line), [], 0
    for m in _BOUNDARY.finditer(masked):
        end = m.end()
        nxt = _NON_SPACE.search(line, end)
        if not nxt:
            break
        run = m.group().rstrip(_CLOSERS)
        if not (nxt.start() > end or any(c in _CJK_TERMINALS for c in run)):
            continue
        if not any(c in "!" + QUESTION_MARKS + _CJK_TERMINALS for c in run):
            if nxt.group().islower():
                continue
            before = _ABBREV_BEFORE.search(line[max(0, m.start() - 12) : m.start()])
            if run == "." and before and before.group(1).lower() in _ABBREVIATIONS:
                continue
        out.append(line[start:end])
        start = end
    out.append(line[start:])
    return out


def sentences(text: str) -> list[str]:
    """Split prose into sentences at ``. ! ? …`` (and CJK forms), newlines and bullets.

    Decimals (3.5), file names (a.txt), common abbreviations (e.g., i.e., Mr.), a period
    followed by a lowercase word and punctuation inside quotation marks do not split.
    """
    parts = (s.strip() for line in _logical_lines(text) for s in _split_line(line))
    return [s for s in parts if any(c.isalnum() for c in s)]


# --- detection -----------------------------------------------------------------------------


def _unquoted(s: str) -> str:
    return _QUOTED.sub(" ", s).replace("’", "'")


def _ends_in_question(s: str) -> bool:
    t = _unquoted(s).rstrip()
    while t and not t[-1].isalnum() and t[-1] not in _TERMINALS:
        t = t[:-1].rstrip()
    run = re.search(rf"[{re.escape(_TERMINALS)}]+\Z", t)
    return bool(run) and any(c in QUESTION_MARKS for c in run.group())


def _strict(s: str) -> bool:
    return _ends_in_question(s) or bool(_PHRASE_RE.search(_unquoted(s)))


def _loose(s: str) -> bool:
    return any(c in QUESTION_MARKS for c in s) or bool(_LOOSE_RE.search(s))


_RULES = {"strict": _strict, "qmark": _ends_in_question, "last": _strict, "loose": _loose}


def _join(text: object) -> str:
    """A model output as one text: strings kept, lists flattened, tool-call dicts dropped."""
    if isinstance(text, str):
        return text
    if isinstance(text, list | tuple):
        return "\n\n".join(filter(None, map(_join, text)))
    return ""


def has_text(text: str | list | None) -> bool:
    """Whether ``text`` (as :func:`asks` takes it) holds anything for a detector to read: a
    step logged as ``[]`` (an FC log that kept only the calls) holds none."""
    return bool(_join(text).strip())


def asking_sentences(text: str | list | None, detector: str = "strict") -> list[str]:
    """The sentences of ``text``'s prose that make it ask under ``detector``."""
    if detector not in _RULES:
        raise ValueError(f"unknown detector {detector!r}; expected one of {DETECTORS}")
    found = sentences(prose(_join(text)))
    if detector == "last":
        found = found[-1:]
    return [s for s in found if _RULES[detector](s)]


def asks(text: str | list | None, detector: str = "strict") -> bool:
    """Whether ``text`` (a string, a list of output pieces, or None) asks under ``detector``."""
    return bool(asking_sentences(text, detector))
