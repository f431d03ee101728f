"""Tests that need no server: pure code, the I/O-free core, lint and layout."""
