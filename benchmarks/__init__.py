"""Benchmarks of redis-msglog, reported as ratios against raw redis-py in the same run."""
