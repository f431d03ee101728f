"""A conversation's lifecycle in the core: scopes and their directory indexes, and
erasure."""
