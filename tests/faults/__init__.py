"""Failures: servers killed or stopped, lost replies, cluster faults, damage."""
