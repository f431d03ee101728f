"""A scope's usage totals (docs/usage.md): the sum of the totals of its conversations and
its sub-scopes', paged from the scope's index, never by ``SCAN``.

The index is tenant-writable, so an entry alone proves nothing: a conversation counts
only when its owner record names the listed scope and created time, read in the same
round trip as its totals (one erased and taken by another scope meanwhile is left out)."""

from __future__ import annotations

from ...models import Usage
from ..steps import Command, Plan
from ..stored import usage
from ..stored.entries import text
from ..stored.keys import ConversationKeys
from .scope import MAX_LIST_LIMIT, Scope, Scoped, ScopedConversation, joined


def scope_usage_plan(scoped: Scoped, scope: Scope) -> Plan[Usage]:
    """The summed usage of every conversation of ``scope`` and below: per page of the
    index (1,000 conversations), the listing's two round trips and one more for their
    totals and owner records. Costs in two currencies raise
    :class:`~redis_msglog.UsageCurrencyError`."""
    found: list[Usage] = []
    cursor: str | None = None
    while True:
        page = yield from scoped.list_plan(scope, MAX_LIST_LIMIT, cursor)
        if page.conversations:
            found.append(Usage.total((yield from _page_totals(scoped, page.conversations))))
        if page.cursor is None:
            return Usage.total(found)
        cursor = page.cursor


def _page_totals(scoped: Scoped, listed: list[ScopedConversation]) -> Plan[list[Usage]]:
    """The totals of the conversations of one page whose owner record still says what
    the listing read."""
    commands: list[Command] = []
    for conversation in listed:
        keys = ConversationKeys.build(scoped.prefix, conversation.conversation)
        commands.append(("HMGET", keys.owner, "scope", "created"))
        commands.append(("HMGET", keys.usage, *usage.FIELDS))
    replies = yield from scoped.read(tuple(commands), None)
    return [
        usage.from_totals(replies[2 * at + 1], f"{conversation.conversation!r}'s usage")
        for at, conversation in enumerate(listed)
        if _still_owned(replies[2 * at], conversation)
    ]


def _still_owned(owner: list[bytes | str | None], listed: ScopedConversation) -> bool:
    scope, created = owner
    return (
        scope is not None
        and created is not None
        and text(scope) == joined(listed.scope)
        and text(created) == str(listed.created_micros)
    )
