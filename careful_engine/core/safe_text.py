"""Show text that came from a file, a model or a person literally: no markup, no control codes.

``visible`` turns control characters (C0, C1, DEL) and invisible format characters (bidi
marks and overrides, zero-width characters, line separators) into visible escapes;
``literal`` also escapes Rich markup, for any string that goes through a Rich renderer.
"""

from __future__ import annotations

import re
import unicodedata

# Unicode's format characters (category Cf: bidi marks and overrides, zero-width spaces and
# joiners, invisible operators, the soft hyphen, tag characters...) and line and paragraph
# separators (Zl, Zp), as of Unicode 14 (Python 3.11): invisible, or able to reorder or hide
# what follows them on a terminal (tests/test_terminal_safety.py checks the list)
_INVISIBLE = ("\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
              "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
              "\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
              "\U000e0020-\U000e007f")
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]|[\ud800-\udfff]")
_CONTROL_NL = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]|[\ud800-\udfff]")
# What careful refuses in text it stores and reads back (reasons, people's names, paths): the
# characters that can mislead a terminal. C0 and C1 controls and DEL (newline and tab aside in
# text of several lines), bidi embeddings, overrides and isolates, surrogates, and private-use
# and unassigned code points (no meaning a reader can rely on); in one-line text also the line
# and paragraph separators. Format characters that only join or hint (the zero-width joiner in
# an emoji, the soft hyphen, zero-width spaces, bidi marks) are kept: visible() escapes them
# where text is shown, and what careful writes round-trips through its readers.
_MISLEADING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
                         "\ud800-\udfff]")
_MISLEADING_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e"
                              "\u2066-\u2069\ud800-\udfff]")


def misleading(text: str, *, lines: bool = False) -> str | None:
    """The first character of ``text`` that careful refuses to store or read back (see
    ``_MISLEADING``: controls, bidi overrides and isolates, surrogates, unassigned), as
    ``U+XXXX``, or None; ``lines``: newline, tab and line separators are allowed."""
    m = (_MISLEADING if lines else _MISLEADING_LINE).search(text)
    c = m.group(0) if m else next(
        (c for c in text if unicodedata.category(c) in ("Cn", "Co")), None)
    return None if c is None else f"U+{ord(c):04X}"


# Rich's own markup pattern (rich.markup.escape), without importing Rich here.
_MARKUP = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def _escape_char(m: re.Match[str]) -> str:
    c = m.group(0)
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def visible(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` as a string with every control character shown as an escape (``\\x1b``)."""
    s = text if isinstance(text, str) else str(text)
    return (_CONTROL if keep_newlines else _CONTROL_NL).sub(_escape_char, s)


def clip(text: str, width: int = 200) -> str:
    """``text`` in at most ``width`` characters, cut in the middle (``…``), its full length
    noted when cut: a value quoted in a line for people (an entry id of a million characters)."""
    if len(text) <= width:
        return text
    tail = (width - 1) // 2
    return f"{text[:width - 1 - tail]}…{text[len(text) - tail:]} ({len(text):,} characters)"


def escape_markup(text: str) -> str:
    """Escape Rich markup the way ``rich.markup.escape`` does."""

    def repl(m: re.Match[str]) -> str:
        backslashes, tag = m.group(1), m.group(2)
        return f"{backslashes}{backslashes}\\{tag}"

    out = _MARKUP.sub(repl, text)
    if out.endswith("\\") and not out.endswith("\\\\"):
        out += "\\"
    return out


def literal(text: object, *, keep_newlines: bool = False) -> str:
    """``visible`` text with Rich markup escaped: safe inside any Rich markup string."""
    return escape_markup(visible(text, keep_newlines=keep_newlines))


# what Markdown shows as itself: words, numbers and a few signs (no emphasis, link, HTML,
# entity, escape, emoji shortcode, @mention or table delimiter among them)
_MD_PLAIN = re.compile(r"[A-Za-z0-9 ,.;%+=/-]*")
_MD_INLINE = re.compile(r"([\\`*_\[\]<>!|~&])")
_MD_HEAD = re.compile(r"(\s*\d*)([-+#=>.)])")  # a list item, heading or quote at the start
_BACKTICKS = re.compile(r"`+")


def markdown_literal(text: object) -> str:
    """``visible`` text shown as itself in GitHub-flavoured Markdown, in a table cell or
    inline: plain words as they are, anything else as a code span, where no Markdown, HTML,
    link, autolink, emoji shortcode or @mention is read (``|`` escaped, as a table needs)."""
    s = visible(text)
    if _MD_PLAIN.fullmatch(s) and "www." not in s.lower():
        return s
    fence = "`" * (max((len(m) for m in _BACKTICKS.findall(s)), default=0) + 1)
    pad = " " if s[:1] in (" ", "`") or s[-1:] in (" ", "`") else ""
    body = s.replace("|", "\\|")
    return f"{fence}{pad}{body}{pad}{fence}"


def markdown_text(text: object) -> str:
    """``visible`` text in Markdown prose (a title, a caption) with what Markdown would read
    as markup escaped: emphasis, code, links, HTML, entities, tables, and a heading, list or
    quote at the start. GitHub may still show an emoji shortcode or a mention in it: names
    from files go through :func:`markdown_literal`."""
    s = _MD_INLINE.sub(r"\\\1", visible(text))
    head = _MD_HEAD.match(s)
    if head:
        s = f"{head.group(1)}\\{head.group(2)}{s[head.end():]}"
    return s


# what a spreadsheet reads as the start of a formula in a CSV cell (OWASP's list, less the
# tab and carriage return, which visible() has escaped by then); a plain number such as a
# rank change "-2" or "+1.7" is read as that number and is left as it is
_FORMULA_START = ("=", "+", "-", "@")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def csv_cell(text: object) -> str:
    """``visible`` text for a CSV text cell, never read as a formula by a spreadsheet: a cell
    starting with ``= + - @`` gets a leading ``'``, unless it is a plain number (a tab or
    carriage return first is shown as ``\\x09``/``\\x0d``: no formula)."""
    s = visible(text)
    if s.startswith(_FORMULA_START) and not _NUMBER.fullmatch(s):
        return "'" + s
    return s


__all__ = ["clip", "csv_cell", "escape_markup", "literal", "markdown_literal",
           "markdown_text", "misleading", "visible"]
