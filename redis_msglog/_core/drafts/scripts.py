"""The draft scripts (``lua/draft_*.lua``), their arguments by name, and the fixed
numbers of the draft model (docs/drafts.md states each)."""

from __future__ import annotations

from datetime import timedelta

from ..._lua.load import load_script
from ..._lua.run import ScriptRunner

OPEN, WRITE, CLAIM, FINISH = (
    "draft_open.lua",
    "draft_write.lua",
    "draft_claim.lua",
    "draft_finish.lua",
)

OPEN_KEY_NAMES = ("seq", "owner", "drafts", "feed")
OPEN_ARGV_NAMES = (
    "id", "token", "role", "name", "lease_ms", "on_interrupt", "scope", "max_drafts",
    "grace_ms", "feed_max", "ttl_ms",
)  # fmt: skip
WRITE_KEY_names = ("drafts", "stream")
WRITE_ARGV_NAMES = ("id", "token", "at", "max_bytes", "retention_ms")
CLAIM_KEY_NAMES = ("drafts", "feed", "stream")
CLAIM_ARGV_NAMES = (
    "id", "claimant", "intent", "token", "claim_ms", "grace_ms", "feed_max", "ttl_ms",
)  # fmt: skip
FINISH_KEY_NAMES = ("drafts", "feed", "stream")
FINISH_ARGV_NAMES = ("id", "seq", "outcome", "grace_ms", "feed_max", "ttl_ms")
SCRIPT_NAMES = {
    OPEN: (OPEN_KEY_NAMES, OPEN_ARGV_NAMES),
    WRITE: (WRITE_KEY_names, WRITE_ARGV_NAMES),
    CLAIM: (CLAIM_KEY_NAMES, CLAIM_ARGV_NAMES),
    FINISH: (FINISH_KEY_NAMES, FINISH_ARGV_NAMES),
}
"""Each draft script's ``KEYS`` and ``ARGV`` names, in order (a test reads the scripts'
binding blocks against them)."""

DEFAULT_LEASE = timedelta(seconds=30)
CLAIM_MS = 10_000
"""How long a claimant has to write a draft's message and finish it before another may
take the claim over (and write the same message under the same key)."""
GRACE_MS = 60_000
"""How long an ended draft's deltas stay readable, so a reader mid-draft reads the rest."""
RETENTION_MS = 3_600_000
"""How long a draft's deltas outlive its last write when nobody ends it."""
FEED_MAX = 1000
"""About how many start and end entries the drafts feed keeps (``MAXLEN ~``)."""
MAX_DRAFTS = 100
"""How many drafts a conversation may hold at once (open, or ended within the grace)."""
FLUSH_SECONDS = 0.03
FLUSH_BYTES = 4096
"""A writer sends its pending deltas once the oldest is this old, or they are this big."""


class DraftScripts(ScriptRunner):
    """The draft scripts, run like the log's (EVALSHA, EVAL, no shebang)."""

    __slots__ = ()

    def __init__(self) -> None:
        self.scripts = {name: load_script(name) for name in SCRIPT_NAMES}
