"""Provider and framework formats: one module per format, each a pair of pure functions
(``from_X`` builds :class:`~redis_msglog.AgentMessage` objects, ``to_X`` renders them),
with no I/O. The rules they share (tool-call pairing, ids, argument normalisation, the
per-format ``extras`` merge patches) live in :mod:`._common`."""
