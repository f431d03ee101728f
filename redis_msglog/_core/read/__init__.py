"""The read path of the core: the read plans, the round trip they stand on, the warm-
read cache, views of a log with edits, and follows."""
