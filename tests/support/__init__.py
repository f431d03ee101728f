"""Helpers the tests share (no tests here): cluster, proxy, history oracle."""
