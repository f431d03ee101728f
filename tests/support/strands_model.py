"""A scripted Strands model for the tests (our own minimal equivalent of Strands'
``tests/fixtures/mocked_model_provider.py``): it answers from the conversation alone,
so any worker process gets the same answer for the same history.

- the last message a user prompt ``"... tool:<city>"``: a ``toolUse`` of ``weather``;
- the last message a tool result: a text answer quoting the result;
- a prompt containing ``SECRET``: a guardrail intervention (``redactContent``, the
  user's message overwritten with ``REDACTED_PROMPT``) and a refusal text;
- any other prompt: ``"echo: <prompt>"``.

Given a ``usage`` (Strands' ``Usage``), every response reports it (a ``metadata`` event,
as providers send after ``messageStop``); by default none is reported."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterable
from typing import Any

from strands import tool
from strands.models import Model
from strands.types.content import Messages

REDACTED_PROMPT = "[prompt removed by the guardrail]"
REFUSAL = "I cannot help with that."


@tool
def weather(city: str) -> str:
    """The weather of a city."""
    return f"sunny in {city}"


class ScriptedModel(Model):
    def __init__(self, usage: dict[str, int] | None = None) -> None:
        self.usage = usage

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    async def structured_output(
        self, output_model: Any, prompt: Messages, system_prompt: str | None = None, **kwargs: Any
    ) -> AsyncGenerator[Any, None]:
        raise NotImplementedError
        yield

    async def stream(
        self, messages: Messages, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
    ) -> AsyncIterable[Any]:
        for event in _events(messages[-1]):
            yield event
        if self.usage is not None:
            yield {"metadata": {"usage": dict(self.usage), "metrics": {"latencyMs": 0}}}


def _events(last: Any) -> list[dict[str, Any]]:
    start: dict[str, Any] = {"messageStart": {"role": "assistant"}}
    results = [b["toolResult"] for b in last["content"] if "toolResult" in b]
    if results:
        said = "".join(c.get("text", "") for r in results for c in r["content"])
        return [start, *_text(f"the tool said: {said}"), *_stop("end_turn")]
    prompt = "".join(b.get("text", "") for b in last["content"])
    if "SECRET" in prompt:
        guard = {"redactContent": {"redactUserContentMessage": REDACTED_PROMPT}}
        return [start, guard, *_text(REFUSAL), *_stop("guardrail_intervened")]
    if "tool:" in prompt:
        city = prompt.split("tool:", 1)[1].strip()
        use = {"toolUse": {"name": "weather", "toolUseId": f"call-{city}"}}
        arguments = {"toolUse": {"input": json.dumps({"city": city})}}
        return [
            start,
            {"contentBlockStart": {"start": use}},
            {"contentBlockDelta": {"delta": arguments}},
            {"contentBlockStop": {}},
            *_stop("tool_use"),
        ]
    return [start, *_text(f"echo: {prompt}"), *_stop("end_turn")]


def _text(text: str) -> list[dict[str, Any]]:
    return [
        {"contentBlockStart": {"start": {}}},
        {"contentBlockDelta": {"delta": {"text": text}}},
        {"contentBlockStop": {}},
    ]


def _stop(reason: str) -> list[dict[str, Any]]:
    return [{"messageStop": {"stopReason": reason}}]
