"""AsyncMessageLog's format conveniences: the history as a provider's messages, and a
provider's messages appended (the pure conversions are in :mod:`redis_msglog.adapters`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import adapters
from ._api import AsyncLogAPI

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage


class AsyncLogFormats(AsyncLogAPI):
    """The provider formats of :class:`AsyncMessageLog`, each one read or one append."""

    # -- provider formats (see redis_msglog.adapters for the rules) ------------------

    async def to_openai(self) -> list[dict[str, Any]]:
        """The full history as OpenAI Chat Completions messages."""
        return adapters.to_openai(await self.all())

    async def to_anthropic(self) -> list[dict[str, Any]]:
        """The full history as Anthropic Messages turns (the system prompt left out:
        :meth:`anthropic_system` is the request's top-level ``system`` parameter)."""
        return adapters.to_anthropic(await self.all())

    async def to_langchain(self) -> list[dict[str, Any]]:
        """The full history as LangChain ``{"role", "content"}`` messages (user,
        assistant and system only)."""
        return adapters.to_langchain(await self.all())

    async def to_responses(self) -> list[dict[str, Any]]:
        """The full history as OpenAI Responses API input items (reasoning items only
        where OpenAI produced them)."""
        return adapters.to_responses(await self.all())

    async def to_langchain_messages(self) -> list[BaseMessage]:
        """The full history as LangChain ``BaseMessage`` objects, one per message, nothing
        left out (tool calls and results, ids, content blocks). Needs langchain-core."""
        return adapters.to_langchain_messages(await self.all())

    async def anthropic_system(self) -> str | list[dict[str, Any]] | None:
        """The ``system`` parameter for :meth:`to_anthropic`'s turns: the history's system
        prompt as it was imported (a ``str``, or text blocks), ``None`` if there is none.

        Each of these methods reads the full history; to build a request from one read,
        call the pure functions on the rows: ``rows = log.all()``, then
        ``adapters.to_anthropic(rows)`` and ``adapters.anthropic_system(rows)``."""
        return adapters.anthropic_system(await self.all())

    # -- importing provider formats: one atomic append_many each ----------------------

    async def append_openai(
        self, messages: Sequence[Any], *, idempotency_key: str | None = None
    ) -> int:
        """Append OpenAI Chat Completions messages, converted by
        :func:`~redis_msglog.from_openai`, with one :meth:`append_many` (all or none);
        return the last seq (:meth:`count` for an empty list, which writes nothing).

        Input the importer rejects raises :class:`~redis_msglog.InvalidMessageError`
        (naming the message's index and path) before anything is sent.
        ``idempotency_key`` as in :meth:`append`: the conversion is deterministic, so a
        retry with the same input and key never writes twice. ``to_openai()`` gives the
        same messages back."""
        return await self.append_many(
            adapters.from_openai(messages), idempotency_key=idempotency_key
        )

    async def append_responses(
        self, items: Sequence[Any], *, idempotency_key: str | None = None
    ) -> int:
        """Append OpenAI Responses API items (input items, or a response's ``output``
        items), converted by :func:`~redis_msglog.from_responses`, with one
        :meth:`append_many`; return the last seq. As :meth:`append_openai` otherwise;
        ``to_responses()`` gives the same items back."""
        return await self.append_many(
            adapters.from_responses(items), idempotency_key=idempotency_key
        )

    async def append_anthropic(
        self,
        turns: Sequence[Any],
        *,
        system: str | Sequence[Any] | None = None,
        idempotency_key: str | None = None,
    ) -> int:
        """Append Anthropic Messages turns, converted by
        :func:`~redis_msglog.from_anthropic` (``system``, the request's top-level
        parameter, as a leading system message), with one :meth:`append_many`; return the
        last seq. As :meth:`append_openai` otherwise; ``to_anthropic()`` gives the same
        turns back and ``anthropic_system()`` the ``system``."""
        return await self.append_many(
            adapters.from_anthropic(turns, system=system), idempotency_key=idempotency_key
        )

    async def append_langchain(
        self, messages: Sequence[Any], *, idempotency_key: str | None = None
    ) -> int:
        """Append LangChain ``BaseMessage`` objects, converted by
        :func:`~redis_msglog.from_langchain` (needs langchain-core), with one
        :meth:`append_many`; return the last seq. As :meth:`append_openai` otherwise;
        ``to_langchain_messages()`` gives equal messages back."""
        return await self.append_many(
            adapters.from_langchain(messages), idempotency_key=idempotency_key
        )
