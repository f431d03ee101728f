"""Untrusted text (message content, conversation ids) made safe for a terminal.

Content comes from models and users: an ESC sequence in it could clear the screen, set
the window title or recolour the rest of the output, and a bidi override could make
text read differently from what is stored. So control characters are never printed
raw; each is shown visibly instead, and everything else is shown exactly:

* C0 controls (U+0000..U+001F) and DEL as their Unicode control pictures: ESC is ``␛``,
  carriage return ``␍``, BEL ``␇``, DEL ``␡``. In message content, newline and tab are
  kept (a newline starts an indented continuation line); in ids they are shown too.
* C1 controls (U+0080..U+009F) and the bidi controls (U+061C, U+200E, U+200F,
  U+202A..U+202E, U+2066..U+2069) as ``⟨U+XXXX⟩``: they have no control picture.

On a terminal these stand-ins are in reverse video, so they can be told apart from the
same characters typed literally. Text is built as rich ``Text``, never parsed as markup:
``[bold]`` in content prints as ``[bold]``, and no escaping is applied that could show.
"""

from __future__ import annotations

import re

from rich.text import Text

__all__ = ["CONTROL_STYLE", "json_line", "safe_text", "visible"]

CONTROL_STYLE = "reverse"
"""How a control character's stand-in is shown on a terminal."""

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
# The same characters as UTF-8 bytes, for JSON output: C0 is already escaped by orjson.
_UNSAFE_UTF8 = re.compile(
    rb"\x7f|\xc2[\x80-\x9f]|\xd8\x9c|\xe2\x80[\x8e\x8f\xaa-\xae]|\xe2\x81[\xa6-\xa9]"
)


def stand_in(char: str) -> str:
    """The visible form of one control character."""
    code = ord(char)
    if code < 0x20:
        return chr(0x2400 + code)  # the Control Pictures block, in code order
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"⟨U+{code:04X}⟩"


def safe_text(text: str, *, multiline: bool = False, style: str = "") -> Text:
    """``text`` as rich ``Text`` with every control character replaced by its stand-in
    (in :data:`CONTROL_STYLE`); with ``multiline``, newlines and tabs are kept."""
    result = Text(style=style)
    start = 0
    for match in _UNSAFE.finditer(text):
        char = match.group()
        if multiline and char in "\n\t":
            continue
        result.append(text[start : match.start()])
        result.append(stand_in(char), style=CONTROL_STYLE)
        start = match.end()
    result.append(text[start:])
    return result


def visible(text: str) -> str:
    """``text`` as a plain string with every control character replaced by its stand-in
    (for one-line messages such as errors)."""
    return _UNSAFE.sub(lambda m: stand_in(m.group()), text)


def json_line(data: bytes) -> bytes:
    """orjson output with DEL, C1 and bidi controls written as ``\\uXXXX`` escapes: the
    same JSON value, with no raw control character for a terminal to act on. (These
    characters can only occur inside JSON strings, so replacing their bytes is safe.)"""
    return _UNSAFE_UTF8.sub(lambda m: f"\\u{ord(m.group().decode()):04x}".encode(), data)
