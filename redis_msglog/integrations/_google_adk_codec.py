"""What the ADK session service stores, and how: its conversation ids (ADK's ids are
any strings, so each is encoded into a scope part), its attribute names and values, and
an ADK ``Event`` as a log message (a neutral message carrying the event's JSON)."""

from __future__ import annotations

import hashlib
import string
from typing import Any

import orjson
from google.adk.events.event import Event
from google.genai import types
from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from .._core.lifecycle.scope import MAX_PART_LENGTH
from .._core.read.views import MAX_ATTR_NAME, AttrChanges
from ..errors import InvalidArgumentError, InvalidMessageError
from ..formats._common import usage_of
from ..models import AgentMessage, StoredMessage

FORMAT = "adk"
"""The key of the event's JSON in a message's ``extras``."""

APP, USER, ID, UPDATED = "adk:app", "adk:user", "adk:id", "adk:updated"
"""Attributes of a session's conversation: its ADK ids exactly, its last update time."""

STATE = "state:"
"""The prefix of a state key's attribute (value: the state value's JSON)."""

USER_STATE, APP_STATE = "~user", "~app"
"""The last id part of the conversations holding ``user:`` and ``app:`` state: no
encoded session id starts with ``~`` but a hashed one (``~h...``)."""

_SAFE = frozenset(string.ascii_letters + string.digits + "._-")
_MAX_KEY = MAX_ATTR_NAME - len(STATE)


def encode_id(what: str, value: object) -> str:
    """``value`` (an ADK app name, user id or session id) as a scope part: its UTF-8
    bytes, those outside ``[A-Za-z0-9._-]`` as ``%XX``; ``~e`` for the empty string and
    ``~h<sha256>`` when that is over 200 characters. Injective (up to SHA-256); not a
    ``str`` or not valid UTF-8 (a lone surrogate) raises ``InvalidArgumentError``."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(value).__name__}")
    try:
        raw = value.encode()
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{what} is not valid UTF-8: {exc.reason}") from None
    if not raw:
        return "~e"
    out = "".join(chr(b) if chr(b) in _SAFE else f"%{b:02X}" for b in raw)
    if len(out) > MAX_PART_LENGTH:
        return "~h" + hashlib.sha256(raw).hexdigest()
    return out


def json_text(what: str, value: Any) -> str:
    """``value`` as JSON text, if reading that back gives ``value`` exactly (JSON
    values: no datetimes, sets, NaN, tuples...); ``InvalidArgumentError`` otherwise."""
    try:
        plain = to_jsonable_python(value)
        text = orjson.dumps(plain).decode()
        exact = orjson.loads(text) == value and type(plain) is type(value)
    except (TypeError, ValueError, orjson.JSONEncodeError) as exc:
        raise InvalidArgumentError(f"{what} has no JSON form: {exc}") from None
    if not exact:
        raise InvalidArgumentError(f"{what} would not read back as it is: {value!r:.200}")
    return text


def state_attrs(state: dict[str, Any]) -> dict[str, str | None]:
    """The attributes setting ``state`` (unprefixed keys), checked: keys of at most 250
    characters of valid UTF-8, values with an exact JSON form."""
    out: dict[str, str | None] = {}
    for key, value in state.items():
        if not isinstance(key, str) or len(key) > _MAX_KEY:
            raise InvalidArgumentError(f"a state key is a str of at most {_MAX_KEY} characters")
        out[STATE + key] = json_text(f"state {key!r}", value)
    if out:
        AttrChanges.of(out)  # names and values as the log checks them, before any write
    return out


def state_of(attrs: dict[str, str]) -> dict[str, Any]:
    """The state (unprefixed keys) that ``attrs`` hold."""
    return {k[len(STATE) :]: orjson.loads(v) for k, v in attrs.items() if k.startswith(STATE)}


def state_values(state: dict[str, Any]) -> dict[str, str]:
    """``user:`` or ``app:`` state (unprefixed keys) as values kept in place (name: the
    key, value: its JSON), checked as :func:`state_attrs` checks them."""
    return {name[len(STATE) :]: str(value) for name, value in state_attrs(state).items()}


def state_of_values(values: dict[str, str]) -> dict[str, Any]:
    """The state (unprefixed keys) that values kept in place hold."""
    return {name: orjson.loads(value) for name, value in values.items()}


def event_message(event: Event) -> dict[str, Any]:
    """A message for ``event``: its author's role and its text for every other reader,
    and in ``extras["adk"]["event"]`` its JSON (``model_dump(mode="json",
    by_alias=True, exclude_none=True)``), checked to give the event back exactly."""
    try:
        data = event.model_dump(mode="json", by_alias=True, exclude_none=True)
        text = orjson.dumps(data)
        # Compared as data: pydantic's == compares private attributes too, and
        # google-genai sets one on a usage it merged (_initial_prompt_token_count),
        # which is no part of the event and never stored.
        exact = Event.model_validate_json(text).model_dump() == event.model_dump()
    except (TypeError, ValueError, orjson.JSONEncodeError) as exc:
        raise InvalidArgumentError(f"event {event.id!r:.100} has no JSON form: {exc}") from None
    if not exact:
        raise InvalidArgumentError(f"event {event.id!r:.100} would not read back as it is")
    parts = event.content.parts if event.content and event.content.parts else []
    msg: dict[str, Any] = {
        "role": "user" if event.author == "user" else "assistant",
        "content": "".join(p.text for p in parts if p.text and not p.thought),
        "extras": {FORMAT: {"event": data}},
    }
    if event.id:
        msg["id"] = event.id
    if event.author:
        msg["name"] = event.author
    usage = None if event.usage_metadata is None else _usage(event.usage_metadata)
    if usage:
        msg["usage"] = usage
    with_tools = msg if event.author == "user" else _with_tools(msg, parts)
    try:
        AgentMessage.model_validate(with_tools)
    except (ValidationError, InvalidMessageError):
        return msg  # calls or a response the neutral model cannot hold: the text alone
    return with_tools


def _with_tools(msg: dict[str, Any], parts: list[types.Part]) -> dict[str, Any]:
    """``msg`` with the event's function calls as tool calls (an assistant message), or
    its one function response as a ``tool`` message (its JSON the content), when every
    call or the response has an id: what the exporters pair. An event of several
    responses (ADK merges parallel ones) keeps its text only."""
    calls = [p.function_call for p in parts if p.function_call]
    responses = [p.function_response for p in parts if p.function_response]
    if calls and all(c.id and c.name for c in calls):
        tool_calls = [{"id": c.id, "name": c.name, "args": c.args or {}} for c in calls]
        return {**msg, "role": "assistant", "tool_calls": tool_calls}
    if len(responses) == 1 and not calls and responses[0].id:
        response = responses[0]
        content = msg["content"] or orjson.dumps(response.response or {}).decode()
        fields = {"role": "tool", "tool_call_id": response.id, "content": content}
        return {**msg, **fields, "name": response.name or msg.get("name")}
    return msg


def message_event(row: StoredMessage) -> Event:
    """The event a row holds; a message another writer appended (no event in it) as an
    event of its text, authored by its role (its ``name`` for an assistant's)."""
    data = (row.extras or {}).get(FORMAT, {}).get("event") if row.extras else None
    if isinstance(data, dict):
        try:
            return Event.model_validate_json(orjson.dumps(data))
        except ValidationError:
            pass  # not an event of ours: shown as text
    author = "user" if row.role == "user" else (row.name or row.role)
    return Event(
        id=row.id or f"msglog-{row.seq}",
        invocation_id="",
        author=author,
        content=types.Content(
            role="user" if row.role == "user" else "model", parts=[types.Part(text=row.text)]
        ),
        timestamp=row.at.timestamp(),
    )


def _usage(found: Any) -> dict[str, Any] | None:
    """An event's ``usage_metadata`` (Gemini's counts) as a message's usage. Gemini keeps
    thoughts and tool-use prompts apart from ``candidates`` and ``prompt``; ours count
    every input (cached included: ``prompt_token_count`` has them) and every output
    (reasoning included), so they are added in."""
    return usage_of(
        (found.prompt_token_count or 0) + (found.tool_use_prompt_token_count or 0),
        (found.candidates_token_count or 0) + (found.thoughts_token_count or 0),
        found.cached_content_token_count,
        found.thoughts_token_count,
    )
