"""The operator tools behind ``msglog`` and :mod:`redis_msglog.admin`: importing exports
and other frameworks' histories, verifying deletions, terminal rendering, the demo and
the ACL rules."""
