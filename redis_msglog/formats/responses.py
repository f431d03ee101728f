"""OpenAI Responses API input items: ``from_responses`` / ``to_responses``.

A Responses history splits one assistant turn into several items (``reasoning``, an
output ``message``, ``function_call`` s). :func:`from_responses` groups a run of them into
one assistant message: reasoning items and the output message's parts become its content
in order, the calls its tool calls, so the Chat and Anthropic exporters still pair
parallel calls with their results. :func:`to_responses` splits it back in the same order.
Reasoning items are sent only to Responses, and only when OpenAI produced them.

Item fields the neutral model has no place for (``status``, ``phase``, item ``id`` s of
calls, ``annotations``...) ride in ``extras["responses"]``. One layout hint is not a
field: a reasoning item that came between two ``function_call`` s of one turn records
``"$after_calls": n`` (how many of the turn's calls precede it) in its patch.

Item by item (the OpenAI Agents SDK's session, which must give back every item exactly,
and pop them one at a time): :func:`item_messages` makes one message per item, marked by
``"$item"`` in its patch (``true``, or the item itself when the neutral model cannot
hold it exactly: a hosted-tool or unknown item type, a null field), and
:func:`message_items` gives the item back. Every exporter first joins each run of
marked messages into the messages :func:`from_responses` makes of their items
(:func:`join_items`), so parallel calls logged one per message still pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from ..errors import InvalidMessageError
from ..models import AgentMessage, json_equal
from ._common import build, mapping, paired, require_messages, sequence
from ._responses_read import from_responses as from_responses  # public here, as before
from ._responses_render import (
    FORMAT,
    render_assistant,
    render_input_message,
    render_output,
)

_ITEM = "$item"


def to_responses(messages: Sequence[AgentMessage]) -> list[dict[str, Any]]:
    """Responses API input items: messages (the short ``{"role", "content"}`` form unless
    the message came from Responses in another), ``reasoning`` items (OpenAI's only),
    ``function_call`` / ``function_call_output`` pairs, results right after their calls;
    see docs/adapters.md for every rule."""
    out: list[dict[str, Any]] = []
    for turn in paired(join_items(messages, keep_native=True)):
        msg = turn.message
        native = _native(msg)
        if native is not None:
            out.append(native)
        elif msg.role == "assistant":
            out.extend(render_assistant(msg))
        else:
            out.append(render_input_message(msg))
        out.extend(render_output(call_id, result) for call_id, result in turn.results)
    return out


# -- item by item: one message per item -------------------------------------------------


def item_messages(items: Sequence[Any]) -> list[AgentMessage]:
    """One :class:`AgentMessage` per Responses item, for a log that stores items one by
    one: ``message_items(m) == [item]`` exactly (as JSON, null fields included), for every
    item type. An item :func:`from_responses` converts becomes that message, marked
    ``"$item": true`` in its ``extras["responses"]`` (or carrying the item itself when
    the conversion is not exact); any other item (hosted tools, unknown types) is kept
    verbatim in an empty message of its role (``assistant`` for non-messages) that no
    other format renders. Readers of other formats see the messages
    :func:`from_responses` makes of the items (:func:`join_items`). Items that are
    pydantic models are taken as their JSON without unset fields; anything else that is
    not a JSON object raises :class:`InvalidMessageError`."""
    out: list[AgentMessage] = []
    for i, raw in enumerate(sequence(items, 0, "")):
        if isinstance(raw, BaseModel):
            raw = raw.model_dump(mode="json", exclude_unset=True)
        out.append(_item_message(dict(mapping(raw, i, "")), i))
    return out


def _item_message(item: dict[str, Any], i: int) -> AgentMessage:
    try:
        converted = from_responses([item])
    except InvalidMessageError:
        converted = []
    if len(converted) == 1:
        msg = converted[0]
        rendered = message_items(msg)
        exact = len(rendered) == 1 and json_equal(rendered[0], item)
        patch = (msg.extras or {}).get(FORMAT, {})
        if isinstance(patch, dict):
            marked = {**patch, _ITEM: True if exact else item}
            return msg.model_copy(update={"extras": {**(msg.extras or {}), FORMAT: marked}})
    role = item.get("role")
    role = "system" if role == "developer" else role
    fields: dict[str, Any] = {
        "role": role if role in ("user", "system", "assistant") else "assistant",
        "content": [],
        "extras": {FORMAT: {_ITEM: item}},
    }
    return build(AgentMessage, i, "", fields)


def _marker(msg: AgentMessage) -> Any:
    patch = (msg.extras or {}).get(FORMAT) if msg.extras else None
    return patch.get(_ITEM) if isinstance(patch, dict) else None


def _native(msg: AgentMessage) -> dict[str, Any] | None:
    """The item a message carries verbatim (``"$item"``), if it does."""
    marker = _marker(msg)
    return marker if isinstance(marker, dict) else None


def _projection(msg: AgentMessage) -> AgentMessage:
    """``msg`` without its ``"$item"`` marker."""
    patch = dict((msg.extras or {}).get(FORMAT) or {})
    patch.pop(_ITEM, None)
    extras = {k: v for k, v in (msg.extras or {}).items() if k != FORMAT}
    if patch:
        extras[FORMAT] = patch
    return msg.model_copy(update={"extras": extras or None})


def message_items(msg: AgentMessage) -> list[dict[str, Any]]:
    """The Responses items of one message rendered alone (no pairing with other
    messages): for a message of :func:`item_messages`, exactly its item; for any other
    message, what :func:`to_responses` renders for it (an assistant turn's content and
    calls, a tool result as a ``function_call_output``, a message item)."""
    native = _native(msg)
    if native is not None:
        return [native]
    if _marker(msg) is not None:
        msg = _projection(msg)
    if msg.role == "assistant":
        return render_assistant(msg)
    if msg.role == "tool":
        return [render_output(msg.tool_call_id or "", msg)]
    return [render_input_message(msg)]


def join_items(
    messages: Sequence[AgentMessage], *, keep_native: bool = False
) -> list[AgentMessage]:
    """``messages`` with each run of :func:`item_messages` messages replaced by the
    messages :func:`from_responses` makes of their items (a turn's reasoning, output
    message and calls as one assistant message). Messages carrying an item verbatim that
    no neutral message holds are dropped, or with ``keep_native`` kept in place (ending
    the run). Any other message passes unchanged."""
    require_messages(messages)
    if not any(_marker(m) is not None for m in messages):
        return list(messages)
    out: list[AgentMessage] = []
    run: list[AgentMessage] = []

    def flush() -> None:
        if run:
            out.extend(_joined(run))
            run.clear()

    for msg in messages:
        marker = _marker(msg)
        if marker is None:
            flush()
            out.append(msg)
        elif _native(msg) is not None and _projectable(msg):
            run.append(msg)
        elif _native(msg) is not None:
            if keep_native:
                flush()
                out.append(msg)
        else:
            run.append(msg)
    flush()
    return out


def _projectable(msg: AgentMessage) -> bool:
    """A verbatim item the neutral model holds too (a converted item with null fields)."""
    return bool(msg.content) or bool(msg.tool_calls) or msg.role == "tool"


def _joined(run: list[AgentMessage]) -> list[AgentMessage]:
    items = [item for msg in run for item in message_items(msg)]
    try:
        return from_responses(items)
    except InvalidMessageError:  # a run that does not convert as a whole: each alone
        return [_projection(msg) for msg in run]
