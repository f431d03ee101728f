"""Provider formats: pure functions over message lists, with no I/O.

``to_openai``, ``to_anthropic`` and ``to_langchain`` take any sequence of
:class:`AgentMessage`/:class:`StoredMessage` (``log.all()``, ``log.last(20)``...) and
return ``list[dict]`` that the providers accept, not only their types. The choices (also
in the README's adapter table):

* tool-call ``args`` that are not a JSON object: a string holding a JSON object is
  parsed; ``None`` becomes ``{}``; anything else becomes ``{"value": args}``. Both
  adapters use this one rule (``normalize_args``).
* tool-call ids that are not ``^[a-zA-Z0-9_-]{1,40}$`` are rewritten to ``call_`` + 32 hex
  digits of their SHA-256: deterministic, and identical on the call and its result.
* tool results are paired with the calls of the assistant turn before them, and placed
  right after it, in call order; messages logged in between (another worker's user turn)
  follow the results. A call with no result (a worker died) gets a synthesized error
  result, ``MISSING_RESULT``; a result with no call is dropped.
* ``name`` is sent to OpenAI on system/user/assistant only, with characters outside
  ``[a-zA-Z0-9_-]`` replaced by ``_`` and cut to 64; Anthropic and LangChain get none.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from .models import AgentMessage

MISSING_RESULT = "error: no result was recorded for this tool call"
"""The content of the result synthesized for a tool call that has none."""

_VALID_ID = re.compile(r"^[a-zA-Z0-9_-]{1,40}$")
_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def normalize_args(args: Any) -> dict[str, Any]:
    """Tool-call arguments as the JSON object both providers require."""
    if isinstance(args, dict):
        return args
    if args is None:
        return {}
    if isinstance(args, str):
        try:
            parsed = orjson.loads(args)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"value": args}


def tool_call_id(raw: str) -> str:
    """A call id valid for both providers; the same raw id always maps to the same one."""
    if _VALID_ID.match(raw):
        return raw
    return "call_" + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _openai_name(name: str | None) -> str | None:
    if not name:
        return None
    cleaned = _INVALID_NAME_CHARS.sub("_", name)[:64]
    return cleaned or None


@dataclass
class _Turn:
    """A message, and for an assistant turn with tool calls, its paired results."""

    message: AgentMessage
    results: list[tuple[str, str, bool]] = field(default_factory=list)  # id, content, error


def _paired(messages: Sequence[AgentMessage]) -> list[_Turn]:
    """Pair tool results with their calls; see the module docstring for the rules."""
    turns: list[_Turn] = []
    open_turn: _Turn | None = None  # the assistant turn whose calls await results
    received: dict[str, str] = {}
    deferred: list[_Turn] = []

    def close() -> None:
        nonlocal open_turn
        if open_turn is not None:
            for call in open_turn.message.tool_calls or []:
                content = received.get(call.id)
                open_turn.results.append(
                    (
                        tool_call_id(call.id),
                        MISSING_RESULT if content is None else content,
                        content is None,
                    )
                )
            turns.extend(deferred)
        open_turn = None
        received.clear()
        deferred.clear()

    for msg in messages:
        if msg.role == "tool":
            expected = {c.id for c in open_turn.message.tool_calls or []} if open_turn else set()
            if msg.tool_call_id in expected and msg.tool_call_id not in received:
                received[msg.tool_call_id] = msg.content
                if len(received) == len(expected):
                    close()
            continue  # orphan or duplicate result: dropped
        if msg.role == "assistant" and msg.tool_calls:
            close()
            open_turn = _Turn(msg)
            turns.append(open_turn)
        elif open_turn is not None:
            deferred.append(_Turn(msg))
        else:
            turns.append(_Turn(msg))
    close()
    return turns


def to_openai(messages: Sequence[AgentMessage]) -> list[dict[str, Any]]:
    """OpenAI Chat Completions messages: all roles, ``tool_calls``/``tool_call_id``."""
    out: list[dict[str, Any]] = []
    for turn in _paired(messages):
        msg = turn.message
        item: dict[str, Any] = {"role": msg.role, "content": msg.content}
        name = _openai_name(msg.name)
        if name:
            item["name"] = name
        if msg.tool_calls:
            item["tool_calls"] = [
                {
                    "id": tool_call_id(call.id),
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": orjson.dumps(normalize_args(call.args)).decode(),
                    },
                }
                for call in msg.tool_calls
            ]
            if not msg.content:
                item["content"] = None
        out.append(item)
        out.extend(
            {"role": "tool", "tool_call_id": call_id, "content": content}
            for call_id, content, _error in turn.results
        )
    return out


def to_anthropic(messages: Sequence[AgentMessage]) -> list[dict[str, Any]]:
    """Anthropic Messages turns: ``system`` dropped (pass it as the top-level ``system``
    parameter), tool calls as ``tool_use`` blocks, results as ``tool_result`` blocks in
    one user turn, consecutive same-role turns merged, alternating user/assistant."""
    turns: list[dict[str, Any]] = []
    for turn in _paired(messages):
        msg = turn.message
        if msg.role == "system":
            continue
        role = "assistant" if msg.role == "assistant" else "user"
        _add_anthropic_turn(turns, role, _anthropic_blocks(msg))
        _add_anthropic_turn(turns, "user", _anthropic_results(turn))
    _fix_anthropic_ends(turns)
    return turns


def _anthropic_blocks(msg: AgentMessage) -> list[dict[str, Any]]:
    """A message's own content blocks: its text (unless blank), then its tool calls."""
    blocks: list[dict[str, Any]] = []
    if msg.content.strip():
        blocks.append({"type": "text", "text": msg.content})
    for call in msg.tool_calls or []:
        blocks.append(
            {
                "type": "tool_use",
                "id": tool_call_id(call.id),
                "name": call.name,
                "input": normalize_args(call.args),
            }
        )
    return blocks


def _anthropic_results(turn: _Turn) -> list[dict[str, Any]]:
    """The ``tool_result`` blocks of an assistant turn's paired results."""
    return [
        {
            "type": "tool_result",
            "tool_use_id": call_id,
            **({"content": content} if content else {}),
            **({"is_error": True} if error else {}),
        }
        for call_id, content, error in turn.results
    ]


def _add_anthropic_turn(
    turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]
) -> None:
    """Append ``blocks`` as a turn of ``role``, merged into the last turn if it has that
    role (the API wants user and assistant to alternate); nothing if there are none."""
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": blocks})


def _fix_anthropic_ends(turns: list[dict[str, Any]]) -> None:
    """Start with a user turn, and end an assistant turn's text without whitespace."""
    if turns and turns[0]["role"] == "assistant":
        # The API wants a user turn first; say nothing more than that one exists.
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": "(continued)"}]})
    if turns and turns[-1]["role"] == "assistant":
        last = turns[-1]["content"][-1]
        if last["type"] == "text":  # a final assistant turn must not end in whitespace
            last["text"] = last["text"].rstrip()


def to_langchain(messages: Sequence[AgentMessage]) -> list[dict[str, Any]]:
    """LangChain messages: plain ``{"role", "content"}`` for user, assistant and system;
    tool messages and tool calls dropped. A turn whose text is empty or whitespace-only
    is dropped too: LangChain's Anthropic chat model forwards it, and the API rejects it."""
    return [
        {"role": msg.role, "content": msg.content}
        for msg in messages
        if msg.role != "tool" and msg.content.strip()
    ]
