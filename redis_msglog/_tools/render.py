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
from typing import Any

import orjson
from rich.text import Text

from ..edits import EditEntry
from ..models import StoredMessage
from ..parts import (
    AudioPart,
    ContentPart,
    FilePart,
    ImagePart,
    ReasoningPart,
    RedactedThinkingPart,
    RefusalPart,
    TextPart,
    ThinkingPart,
)

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
    # A run of controls is one span: a span each made 120,000 NULs take 4 s to print.
    for match in (_UNSAFE_RUN_KEEPING_LINES if multiline else _UNSAFE_RUN).finditer(text):
        result.append(text[start : match.start()])
        result.append("".join(map(stand_in, match.group())), style=CONTROL_STYLE)
        start = match.end()
    result.append(text[start:])
    return result


_UNSAFE_RUN = re.compile(f"{_UNSAFE.pattern}+")
_UNSAFE_RUN_KEEPING_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]+")


def visible(text: str) -> str:
    """``text`` as a plain string with every control character replaced by its stand-in
    (for one-line messages such as errors)."""
    return _UNSAFE.sub(lambda m: stand_in(m.group()), text)


def json_line(data: bytes) -> bytes:
    """orjson output with DEL, C1 and bidi controls written as ``\\uXXXX`` escapes: the
    same JSON value, with no raw control character for a terminal to act on. (These
    characters can only occur inside JSON strings, so replacing their bytes is safe.)"""
    return _UNSAFE_UTF8.sub(lambda m: f"\\u{ord(m.group().decode()):04x}".encode(), data)


# -- rows of a conversation, as `msglog show` and the demo print them ------------------

COLOURS = {"user": "cyan", "assistant": "green", "tool": "yellow", "system": "magenta"}
INDENT = " " * 37  # continuation lines start under the content


PART_STYLE = "italic"
"""How a content part other than text is shown on a terminal (``[image 1.2 MiB png]``)."""
CLIP = 60  # characters of a URL, file name or id shown in a part's label


def _multiline(text: str) -> Text:
    """Content text: newlines kept, continuation lines indented under the content."""
    return safe_text(text.replace("\n", "\n" + INDENT), multiline=True)


def _clip(text: str) -> str:
    return text if len(text) <= CLIP else text[: CLIP - 1] + "…"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _media_label(part: ImagePart | AudioPart | FilePart) -> str:
    words: list[str] = [part.type]
    if isinstance(part, FilePart) and part.filename is not None:
        words.append(_clip(part.filename))
    if part.data is not None:
        words.append(human_bytes(len(part.data)))
    elif part.url is not None:
        words.append(f"url {_clip(part.url)}")
    elif part.file_id is not None:
        words.append(f"file_id {_clip(part.file_id)}")
    if part.media_type:
        words.append(part.media_type.rpartition("/")[2])  # image/png -> png
    return " ".join(words)


def part_label(part: ContentPart) -> Text:
    """A content part other than text as one bracketed label: its kind and what it holds
    (sizes, not bytes; lengths, not thinking), for example ``[image 1.2 MiB png]``,
    ``[file report.pdf 220.0 KiB pdf]``, ``[thinking 340 chars, signed]``,
    ``[reasoning rs_abc: 2 summary parts, encrypted]``, ``[refusal: the text]``. Text
    from the content (a URL, a file name, a refusal) keeps its control characters
    visible, as everywhere (:func:`.safe_text`)."""
    if isinstance(part, RefusalPart):
        return Text.assemble(
            ("[refusal: ", PART_STYLE), _multiline(part.refusal), ("]", PART_STYLE)
        )
    if isinstance(part, (ImagePart, AudioPart, FilePart)):
        label = _media_label(part)
    elif isinstance(part, ThinkingPart):
        label = f"thinking {_plural(len(part.thinking), 'char')}"
        label += ", signed" if part.signature is not None else ", unsigned"
    elif isinstance(part, RedactedThinkingPart):
        label = "redacted thinking"
    elif isinstance(part, ReasoningPart):
        held = [_plural(len(part.summary), "summary part")]
        if part.content is not None:
            held.append(_plural(len(part.content), "content part"))
        if part.encrypted_content is not None:
            held.append("encrypted")
        label = "reasoning" + (f" {_clip(part.id)}" if part.id else "") + ": " + ", ".join(held)
    else:  # text: not a label (future kinds are refused by the model before this)
        label = part.type
    return safe_text(f"[{label}]", style=PART_STYLE)


def _content(row: StoredMessage) -> Text:
    """The content: text exactly, other parts as their labels, a space between a label
    and what is next to it (text parts join as :attr:`AgentMessage.text` does)."""
    if isinstance(row.content, str):
        return _multiline(row.content)
    if not row.content and (native := _native_item(row)) is not None:
        kind, item_id = native.get("type"), native.get("id")
        label = f"{kind if isinstance(kind, str) else 'item'}" + (
            f" {_clip(item_id)}" if isinstance(item_id, str) else ""
        )
        return safe_text(f"[{label}]", style=PART_STYLE)
    text = Text()
    after_label = False
    for part in row.content:
        is_label = not isinstance(part, TextPart)
        if text and (is_label or after_label):
            text.append(" ")
        text.append_text(_multiline(part.text) if isinstance(part, TextPart) else part_label(part))
        after_label = is_label
    return text


def _native_item(row: StoredMessage) -> dict[str, Any] | None:
    """A Responses item a row carries verbatim (an Agents SDK session's hosted-tool or
    unknown item: see ``formats.responses.item_messages``), shown as ``[web_search_call
    ws_1]``."""
    patch = (row.extras or {}).get("responses")
    item = patch.get("$item") if isinstance(patch, dict) else None
    return item if isinstance(item, dict) else None


def format_edit(entry: EditEntry) -> Text:
    """An edit entry as a line: seq, time, ``edit`` and what it changed."""
    if entry.op == "retract":
        what = "retract " + ", ".join(map(str, entry.seqs or ()))
    elif entry.op == "archive":
        what = f"archive through {entry.through_seq}"
    elif entry.op == "trim":
        what = f"trim through {entry.through_seq}: the entries up to it were removed"
    elif entry.op == "redact":
        what = f"redact {', '.join(map(str, entry.seqs or ()))}"
        what += f" ({entry.reason})" if entry.reason is not None else ""
    elif entry.op == "compact":
        through = "everything" if entry.through_seq is None else entry.through_seq
        what = f"compact through {through}: the next {entry.count} messages replace it"
    elif entry.op == "fork":
        what = f"fork of {entry.source!r} at seq {entry.source_seq}: {entry.count} messages"
    else:
        what = "attrs"
    if entry.attrs:
        changes = ", ".join(
            f"{k}={'(deleted)' if v is None else v!r}" for k, v in entry.attrs.items()
        )
        what = f"{what}; attrs {changes}" if entry.op != "attrs" else f"attrs {changes}"
    return Text.assemble(
        (f"{entry.seq:>6}  {entry.at:%H:%M:%S.%f}", "dim"),
        "  ",
        (f"{'edit':<9}", "red"),
        "  ",
        safe_text(what),
    )


def format_row(row: StoredMessage | EditEntry, width: int | None = None) -> Text:
    """One message as a line: seq, time, role, content and tool calls. The content is
    shown exactly, with control characters made visible (see :mod:`.render`), and
    parts other than text as labels (:func:`part_label`); it is never interpreted as
    markup. An edit entry: what it changed (:func:`format_edit`)."""
    if isinstance(row, EditEntry):
        return format_edit(row)
    text = Text("(redacted) ", style="red") if row.redacted else Text()
    if row.tool_call_id:
        text.append_text(Text.assemble("[", safe_text(row.tool_call_id), "] "))
    text.append_text(_content(row))
    for call in row.tool_calls or []:
        args = orjson.dumps(call.args).decode()
        text.append(" → " if text else "→ ")
        text.append_text(safe_text(f"{call.name}({args}) [{call.id}]"))
    if width is not None and text.cell_len > width:
        text.truncate(width, overflow="ellipsis")
    return Text.assemble(
        (f"{row.seq:>6}  {row.at:%H:%M:%S.%f}", "dim"),
        "  ",
        (f"{row.role:<9}", COLOURS[row.role]),
        "  ",
        text,
    )


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")
