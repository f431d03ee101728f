"""Drafts, I/O-free: messages while they are written (docs/drafts.md).

:mod:`.scripts` (the draft scripts and their arguments), :mod:`.deltas` (a delta as
stored, and the message the deltas spell), :mod:`.plans` (opening, writing, claiming,
finishing and listing drafts) and :mod:`.cursor` (a follower's position among the
drafts, and the resume id that names it)."""
