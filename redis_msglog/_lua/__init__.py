"""The Python side of the Lua scripts in ``lua/``: the append script's contract, loading
the scripts, and running them with their fallbacks."""
