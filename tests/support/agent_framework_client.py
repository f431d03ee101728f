"""A scripted Agent Framework chat client for the integration tests: a real
``BaseChatClient`` with the framework's function-invocation and middleware layers (the
stack ``Agent`` drives), whose "model" asks for the ``weather`` tool when the user asks
about the weather and answers after the result. Every response has a fresh message id,
as a real service gives. Given a ``usage``, every response reports it (its
``usage_details``); by default none."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from agent_framework import BaseChatClient, ChatResponse, Content, Message, UsageDetails, tool
from agent_framework._middleware import ChatMiddlewareLayer
from agent_framework._tools import FunctionInvocationLayer


class ScriptedClient(FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], BaseChatClient[Any]):
    """Records what each model call was sent (``seen``)."""

    def __init__(self, usage: UsageDetails | None = None) -> None:
        super().__init__(middleware=[])
        self.seen: list[list[Message]] = []
        self.usage = usage

    def _inner_get_response(
        self,
        *,
        messages: Sequence[Message],
        stream: bool,
        options: Mapping[str, Any],
        **kwargs: Any,
    ) -> Awaitable[ChatResponse]:
        async def respond() -> ChatResponse:
            self.seen.append(list(messages))
            last = messages[-1]
            reply_id = f"r-{uuid.uuid4().hex[:12]}"
            if last.role == "user" and "weather" in last.text:
                call = Content.from_function_call(
                    call_id=f"c-{uuid.uuid4().hex[:12]}",
                    name="weather",
                    arguments={"city": last.text.split()[-1]},
                )
                reply = Message("assistant", [call], message_id=reply_id)
            else:
                said = last.text or "".join(str(c.result) for c in last.contents)
                reply = Message("assistant", [f"re: {said}"], message_id=reply_id)
            usage = None if self.usage is None else UsageDetails(**self.usage)
            return ChatResponse(messages=reply, usage_details=usage)

        return respond()


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"
