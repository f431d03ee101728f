"""The byte bounds of a log's writes (docs/lifecycle.md, "Bounds"): how many bytes one
append call may send (``max_batch_bytes``), and how many bytes of the stream one trim or
redaction may rewrite (``max_rewrite_bytes``), given how many entries a stream node holds
at most (``stream_node_entries``)."""

from __future__ import annotations

from dataclasses import dataclass

from ... import errors

DEFAULT_MAX_BATCH_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_REWRITE_BYTES = 8 * 1024 * 1024
DEFAULT_STREAM_NODE_ENTRIES = 100  # Redis's (and Valkey's) stream-node-max-entries default


@dataclass(frozen=True, slots=True)
class Rewrite:
    """What a trim or a redaction may rewrite: at most ``max_bytes`` of entries, from the
    stream node holding the first entry it changes, whose size is at most
    ``node_entries`` entries (the server's ``stream-node-max-entries``)."""

    max_bytes: int = DEFAULT_MAX_REWRITE_BYTES
    node_entries: int = DEFAULT_STREAM_NODE_ENTRIES


DEFAULT_REWRITE = Rewrite()


def check_batch_bytes(
    encoded: tuple[bytes, ...],
    blobs: tuple[tuple[str, bytes], ...],
    cap: int,
    attrs: bytes = b"",
) -> None:
    """Raise :class:`~redis_msglog.BatchTooLargeError` when the messages, binaries and
    attribute changes (``attrs``: their JSON) of one call are over ``cap`` bytes, before
    anything is sent."""
    size = sum(map(len, encoded)) + len(attrs)
    if blobs:
        size += sum(len(data) for _, data in blobs)
    if size > cap:
        raise errors.BatchTooLargeError(
            f"the {len(encoded)} messages of this call encode to {size} bytes (binaries "
            f"and attribute changes included), over the limit of {cap} for one call "
            "(max_batch_bytes): write them in several calls. Nothing was written.",
            cap=cap,
        )
