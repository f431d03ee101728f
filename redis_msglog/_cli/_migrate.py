"""``msglog import --from openai-agents|langchain|llama-index KEY...``: a framework's own
Redis store read into the log (:mod:`redis_msglog.integrations.migrate`), with the counts
of each key checked and reported."""

from __future__ import annotations

from dataclasses import replace

from rich.text import Text

from .._core.lifecycle.scope import scope_of_text
from .._tools.render import safe_text
from ._common import CLI_RETRY, CliError, Settings, err

SOURCE_HELP = (
    "Read the framework's own Redis store instead of a file: the arguments are its "
    "session ids (openai-agents RedisSession, langchain RedisChatMessageHistory) or chat "
    "store keys (llama-index RedisChatStore)."
)


def import_from_framework(
    settings: Settings,
    source: str,
    ids: tuple[str, ...],
    *,
    source_url: str | None,
    key_prefix: str | None,
    scope: str | None,
    batch_size: int,
) -> None:
    """Import ``ids`` from ``source``'s store (on ``source_url``, default the target's
    server) into the logs of the same ids, and print one line per key."""
    from ..integrations.migrate import import_from  # the framework, only when asked

    target = settings.client()
    reader = target if source_url is None else replace(settings, url=source_url).client()
    options: dict[str, object] = {"prefix": settings.prefix, "retry": CLI_RETRY}
    if scope is not None:
        options["scope"] = scope_of_text(scope)
    elif source == "llama-index":
        options["scope"] = ("llama-index",)  # MessageLogBaseChatStore's default scope
    results = import_from(
        source,
        target,
        ids,
        source=reader,
        key_prefix=key_prefix,
        batch_size=batch_size,
        **options,
    )
    for result in results:
        err.print(
            Text.assemble(
                f"{source} ",
                safe_text(result.source_key),
                " -> ",
                safe_text(result.conversation),
                f": {result.source_rows} rows in the source, {result.imported} in the log "
                f"({result.new} new, {result.already_there} already there)",
            )
        )
    if any(r.imported != r.source_rows for r in results):  # import_from checks it too
        raise CliError("counts differ")
