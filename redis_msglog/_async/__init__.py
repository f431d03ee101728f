"""The asyncio client, :class:`AsyncMessageLog`, in files by concern: the carrier
(``_carrier.py``), the core API (``_api.py``), the edits (``_edits.py``), the format
conveniences (``_formats.py``) and the public class (``_log.py``); the directory of
scoped conversations (``_directory.py``).

This folder is the single source of both clients: ``redis_msglog/_sync/`` (``MessageLog``)
is generated from it, file by file, by ``scripts/unasync.py`` (``await`` dropped,
``Async`` names replaced), and a test fails when the two drift. What truly differs is in
``_io/io_async.py`` / ``_io/io_sync.py`` and ``_io/subscription.py``.
"""

from ._directory import AsyncDirectory
from ._log import AsyncMessageLog

__all__ = ["AsyncDirectory", "AsyncMessageLog"]
