"""Provider formats: pure functions over message lists, with no I/O.

Each format lives in its own module under :mod:`redis_msglog.formats` (importers
``from_X`` and exporters ``to_X``); this module gathers them, and keeps the seed's
``to_langchain`` (plain ``{"role", "content"}`` dicts).

``to_openai``, ``to_anthropic`` and ``to_langchain`` take any sequence of
:class:`AgentMessage`/:class:`StoredMessage` (``log.all()``, ``log.last(20)``...) and
return ``list[dict]`` that the providers accept, not only their types. The choices (also
in docs/adapters.md):

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

from collections.abc import Sequence
from typing import Any

from .formats._common import MISSING_RESULT, normalize_args, require_messages, tool_call_id
from .formats.anthropic import anthropic_system, from_anthropic, to_anthropic
from .formats.langchain import from_langchain, to_langchain_messages
from .formats.openai_chat import from_openai, to_openai
from .formats.responses import from_responses, to_responses
from .models import AgentMessage

__all__ = [
    "MISSING_RESULT",
    "anthropic_system",
    "from_anthropic",
    "from_langchain",
    "from_openai",
    "from_responses",
    "normalize_args",
    "to_anthropic",
    "to_langchain",
    "to_langchain_messages",
    "to_openai",
    "to_responses",
    "tool_call_id",
]


def to_langchain(messages: Sequence[AgentMessage]) -> list[dict[str, Any]]:
    """LangChain messages: plain ``{"role", "content"}`` for user, assistant and system;
    tool messages and tool calls dropped; content parts other than text dropped (their
    text joined). A turn whose text is empty or whitespace-only is dropped too:
    LangChain's Anthropic chat model forwards it, and the API rejects it. For everything,
    losslessly, use :func:`to_langchain_messages`."""
    require_messages(messages)
    out = []
    for msg in messages:
        text = msg.text
        if msg.role != "tool" and text.strip():
            out.append({"role": msg.role, "content": text})
    return out
