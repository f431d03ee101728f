"""The write path of the core: a batch encoded, an append prepared and committed, what
follows a failed first try, the producer, the preflight and durability."""
