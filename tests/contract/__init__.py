"""The library's behaviour against real servers, every backend and both clients."""
