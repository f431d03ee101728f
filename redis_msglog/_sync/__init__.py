# Generated from _async/__init__.py by scripts/unasync.py: edit that file, then run it.
"""The sync client, :class:`MessageLog`, generated file by file from
``redis_msglog/_async/`` (the single source of both clients: see there)."""

from ._directory import Directory
from ._log import MessageLog

__all__ = ["Directory", "MessageLog"]
